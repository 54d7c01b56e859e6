"""Makes llama.cpp's float32 matrix products and its flash attention row-invariant, in an unpacked llama-cpp-python
source tree.

    python scripts/patch_llama_source.py SOURCE_DIR     (scripts/build_llama.sh runs it before building)

Why: ggml-cpu (as vendored in llama-cpp-python 0.3.36) multiplies one activation row with ``ggml_vec_dot_f32``
(four accumulators over interleaved stretches of the row) and two or more rows with llamafile's tinyBLAS (one
accumulator per output). Both compute the same sums, rounded differently, so a position's logits depend on how many
positions share its forward pass, and greedy speculative decoding could part from AR's tokens at a near tie. Its
flash attention does the same twice over: one query row over 512 or more KV cells is split across threads, each
part's softmax merged after, and 64 or more query rows run a tiled kernel; every other row runs the kernel that
walks a row's cells in order with one running softmax.

The change, three edits of ggml's ``llamafile/sgemm.cpp``, two of ``ggml-cpu/ops.cpp`` and one of llama.cpp's
llama graph (``src/models/llama.cpp``):

1. ``llamafile_sgemm`` also takes a product over one row when that row is contiguous (``ldb == k``: a layer's
   input, the attention weights times V) and the weights are float32 or float16. A one-token float32 query times
   the keys stays on ggml's own path, as it does for every longer feed (the query is a strided view there).
2. tinyBLAS multiplies one row with a kernel of its own (``gemv``): each output keeps tinyBLAS's single accumulator,
   fed in the same order and reduced by the same ``hsum``, so it has the bits it has beside other rows; several
   outputs are in flight at once (16 with 32 vector registers, AVX-512; 8 with 16, AVX2) and the rows are split
   evenly across threads without a shared counter or a barrier of its own. Through tinyBLAS's many-row tiles
   (``gemm_bloc<4, 1>``, two barriers per product) the one-row step cost ~5-10% more than ggml's own.
3. Flash attention runs the row kernel (``ggml_compute_forward_flash_attn_ext_f16_one_chunk`` over all the cells)
   for every feed of fewer than TILED_ROWS (128) query rows: the split of one row's cells is off, and the tiled
   kernel is kept only for 128 rows or more (the stock threshold is 64). Threads still share the rows and heads (a
   one-token step of the embedded target: 9 heads on 2 threads). The tiles prefill a long prompt ~1.4x faster
   than the row kernel (a 522-token prompt: 1.5 against 2.2 ms a token on the 2-vCPU AVX-512 host); the engine
   feeds that many rows only in a prompt's prefill, which every run of a prompt does alike
   (``LlamaTargetCache.prefill``), and keeps each step's feed below 128 rows.

4. A short head for the gguf drafter (``pacer_core/llama/short_head.py``): a llama file whose metadata sets
   ``pacer.head_rows = K`` has its output head multiply only its first K token rows (a view of the weights) and
   pads the logits with zeros to the vocabulary's size, which the drafter never reads. The embedded target's Q4_1
   file keeps its head in Q8_0, about a fifth of a draft step; the drafter's copy of the file puts the ids the
   target writes most often first. Files without the key (the target's among them) are untouched.

Then one row of a step gives the same bits as the same row among many, with flash attention on as off, and the
engine (pacer_core/llama/target.py) proves that at load. Other types and other CPUs are unchanged. The patched lines are
matched exactly; a source that differs fails loudly, naming the edit."""
from __future__ import annotations

import sys
from pathlib import Path

SGEMM = Path("vendor/llama.cpp/ggml/src/ggml-cpu/llamafile/sgemm.cpp")
OPS = Path("vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp")
LLAMA_GRAPH = Path("vendor/llama.cpp/src/models/llama.cpp")

ONE_ROW_GATE = ("""    // only enable sgemm for prompt processing
#if !defined(__MMA__)
    if (n < 2)
        return false;
#endif
""", """    // only enable sgemm for prompt processing, except contiguous float32/float16 rows (row-invariant products:
    // PACER Lab, scripts/patch_llama_source.py)
#if !defined(__MMA__)
    if (n < 2 && ((Atype != GGML_TYPE_F32 && Atype != GGML_TYPE_F16) || ldb != k))
        return false;
#endif
""")

ONE_ROW_KERNEL = ("""        : params(params), A(A), B(B), C(C), k(k), lda(lda), ldb(ldb), ldc(ldc) {
    }

    bool matmul(int64_t m, int64_t n) {
        if (k % KN != 0)
            return false;
        // compute RM for only need tile with size RM&RM-1
""", """        : params(params), A(A), B(B), C(C), k(k), lda(lda), ldb(ldb), ldc(ldc) {
    }

    bool matmul(int64_t m, int64_t n) {
        if (k % KN != 0)
            return false;
        if (n == 1 && m % 4 == 0) {     // where the many-row tiles below take it (PACER Lab's one-row kernel)
            gemv(m);
            return true;
        }
        // compute RM for only need tile with size RM&RM-1
""")

ONE_ROW_FUNCTIONS = ("""  private:
    template <int RM, int RN, int BM>
    inline void mnpack(int64_t m, int64_t n, int64_t SIZE_N, int64_t BN) {
        if (SIZE_N == RN) {
            return gemm<RM, RN, BM>(m, n, BN);
        }
""", """  private:
    // One activation row (PACER Lab, scripts/patch_llama_source.py): every output keeps gemm_bloc's single
    // accumulator, fed in the same order and reduced by the same hsum, so it has the bits it has beside other
    // rows; RV outputs in flight hide the FMA latency. The rows are split evenly across threads in blocks of 4,
    // with no shared chunk counter and so no barrier of its own (the graph's barrier after the op is enough).
    template <int RV>
    inline void gemv_rows(int64_t ii) {
        D Cv[RV] = {};
        for (int64_t l = 0; l < k; l += KN) {
            V Bv = load<V>(B + l);
            for (int64_t i = 0; i < RV; ++i)
                Cv[i] = madd(load<V>(A + lda * (ii + i) + l), Bv, Cv[i]);
        }
        for (int64_t i = 0; i < RV; ++i)
            C[ii + i] = hsum(Cv[i]);
    }

    NOINLINE void gemv(int64_t m) {
        constexpr int RV = VECTOR_REGISTERS == 32 ? 16 : 8;
        const int64_t quads = (m / 4 + params->nth - 1) / params->nth;
        const int64_t start = std::min(m, 4 * quads * params->ith), end = std::min(m, start + 4 * quads);
        int64_t ii = start;
        for (; ii + RV <= end; ii += RV)
            gemv_rows<RV>(ii);
        for (; ii < end; ii += 4)
            gemv_rows<4>(ii);
    }

    template <int RM, int RN, int BM>
    inline void mnpack(int64_t m, int64_t n, int64_t SIZE_N, int64_t BN) {
        if (SIZE_N == RN) {
            return gemm<RM, RN, BM>(m, n, BN);
        }
""")

FLASH_ATTENTION_SPLIT = ("""    const bool use_split_kv_path = !use_ref && (neq1 == 1 && neq3 == 1)""",
                         """    // PACER Lab (scripts/patch_llama_source.py): a row's cells are never split across
    // threads, so a row alone has the bits it has beside other rows
    const bool use_split_kv_path = false && !use_ref && (neq1 == 1 && neq3 == 1)""")

TILED_ROWS = 128      # feeds of this many query rows or more keep the tiled kernel: a prompt's prefill, never a step
FLASH_ATTENTION_TILES = ("""        bool use_tiled = !use_ref &&""",
                         f"""        // PACER Lab (scripts/patch_llama_source.py): under {TILED_ROWS} query rows (every
        // step of a run) run the row kernel, as one row alone does; a prompt's prefill keeps the tiles
        bool use_tiled = !use_ref && neq1 >= {TILED_ROWS} &&""")

HEAD_ROWS_KEY = "pacer.head_rows"   # a draft file's metadata: its head scores only its first this-many token rows
SHORT_HEAD = ("""        // lm_head
        cur = build_lora_mm(model.output, cur, model.output_s);
""", f"""        // lm_head; a file whose metadata sets {HEAD_ROWS_KEY} scores only its first rows and pads the rest
        // with zeros, which its reader ignores (PACER Lab's short-head draft: scripts/patch_llama_source.py)
        const auto head_rows_kv = model.gguf_kv.find("{HEAD_ROWS_KEY}");
        const int64_t head_rows = head_rows_kv == model.gguf_kv.end() ? 0 : std::stoll(head_rows_kv->second);
        if (head_rows > 0 && head_rows < model.output->ne[1]) {{
            ggml_tensor * head = ggml_view_2d(ctx0, model.output, model.output->ne[0], head_rows,
                                              model.output->nb[1], 0);
            cur = build_lora_mm(head, cur, model.output_s);
            cur = ggml_pad(ctx0, cur, model.output->ne[1] - head_rows, 0, 0, 0);
        }} else {{
            cur = build_lora_mm(model.output, cur, model.output_s);
        }}
""")

EDITS = {SGEMM: {"the one-row gate of llamafile_sgemm": ONE_ROW_GATE, "tinyBLAS::matmul's start": ONE_ROW_KERNEL,
                 "tinyBLAS's private part": ONE_ROW_FUNCTIONS},
         OPS: {"flash attention's split of one row's cells": FLASH_ATTENTION_SPLIT,
               "flash attention's tiled kernel": FLASH_ATTENTION_TILES},
         LLAMA_GRAPH: {"the llama graph's head": SHORT_HEAD}}


def patched_text(text: str, relative: Path) -> str:
    """``text`` (the file at ``relative`` as llama-cpp-python 0.3.36 ships it) with each of its edits made;
    SystemExit naming the first edit whose original lines are not found exactly once."""
    for name, (original, patched) in EDITS[relative].items():
        if text.count(original) != 1:
            raise SystemExit(f"patch_llama_source: {relative} differs from llama-cpp-python 0.3.36's; the lines of "
                             f"{name} were not found once")
        text = text.replace(original, patched)
    return text


WHAT_EACH_FILE_GETS = {SGEMM: "one-row float32 and float16 products go through tinyBLAS's one-row kernel",
                       OPS: f"flash attention runs every feed of fewer than {TILED_ROWS} rows with the row kernel",
                       LLAMA_GRAPH: f"a llama file whose metadata sets {HEAD_ROWS_KEY} scores only that many head rows"}


def patch(source_dir: Path) -> str:
    """Patch ``source_dir`` in place; returns what was done, a line a file (raises SystemExit, before writing
    anything, if the source is not as expected)."""
    texts = {}
    for relative in EDITS:
        path = source_dir / relative
        if not path.exists():
            raise SystemExit(f"patch_llama_source: {path} not found (not a llama-cpp-python source tree?)")
        texts[relative] = path.read_text()
    done, patched = [], {}
    for relative, text in texts.items():
        if all(new in text for _, new in EDITS[relative].values()):
            done.append(f"{source_dir / relative}: already patched")
        else:
            patched[relative] = patched_text(text, relative)      # SystemExit here writes nothing
    for relative, text in patched.items():
        (source_dir / relative).write_text(text)
        done.append(f"{source_dir / relative}: {WHAT_EACH_FILE_GETS[relative]}")
    return "\n".join(done)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.splitlines()[2].strip())
    print(patch(Path(sys.argv[1])))
