"""Makes llama.cpp's float32 matrix products row-invariant, in an unpacked llama-cpp-python source tree.

    python scripts/patch_llama_source.py SOURCE_DIR     (scripts/build_llama.sh runs it before building)

Why: ggml-cpu (as vendored in llama-cpp-python 0.3.36) multiplies one activation row with ``ggml_vec_dot_f32``
(four 8-lane accumulators) and two or more rows with llamafile's tinyBLAS (one 8-lane accumulator per output).
Both compute the same sums, rounded differently, so a position's logits depend on how many positions share its
forward pass, and greedy speculative decoding could part from AR's tokens at a near tie. The project's target
engine (pacer_core/llama/target.py) worked around it by giving every one-row call a companion token, which costs
a second row on every AR step.

The change: tinyBLAS also takes a float32 product over one row when that row is contiguous (``ldb == k``: a
layer's input, the attention weights times V). A one-token query times the keys stays on ggml's own path, as it
does for every longer feed (the query is a strided view there). Then one row gives the same bits as the same row
among many, and the engine drops the companion once it has proven that on the loaded library. Other types and
other CPUs are unchanged. The patched line is matched exactly; a source that differs fails loudly."""
from __future__ import annotations

import sys
from pathlib import Path

SGEMM = Path("vendor/llama.cpp/ggml/src/ggml-cpu/llamafile/sgemm.cpp")
ORIGINAL = """    // only enable sgemm for prompt processing
#if !defined(__MMA__)
    if (n < 2)
        return false;
#endif
"""
PATCHED = """    // only enable sgemm for prompt processing, except contiguous float32 rows (row-invariant products:
    // PACER Lab, scripts/patch_llama_source.py)
#if !defined(__MMA__)
    if (n < 2 && (Atype != GGML_TYPE_F32 || ldb != k))
        return false;
#endif
"""


def patch(source_dir: Path) -> str:
    """Patch ``source_dir`` in place; returns what was done (raises SystemExit if the source is not as expected)."""
    path = source_dir / SGEMM
    if not path.exists():
        raise SystemExit(f"patch_llama_source: {path} not found (not a llama-cpp-python source tree?)")
    text = path.read_text()
    if PATCHED in text:
        return f"{path}: already patched"
    if text.count(ORIGINAL) != 1:
        raise SystemExit(f"patch_llama_source: {path} differs from llama-cpp-python 0.3.36's; the line to patch "
                         "was not found once")
    path.write_text(text.replace(ORIGINAL, PATCHED))
    return f"{path}: one-row float32 products go through tinyBLAS"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.splitlines()[2].strip())
    print(patch(Path(sys.argv[1])))
