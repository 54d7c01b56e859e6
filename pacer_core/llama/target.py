"""The target run by llama.cpp: a float32 GGUF of the very same weights as the torch model (``LlamaTarget``),
its cache a ``kvcache.ModelCache`` like torch's ``kvcache.CachedModel`` (forward with ``keep``, crop, reorder,
feed_sequence, length, calls), so every decoder runs on either unchanged. Which engine a run's target gets is
``engine.py``'s choice.

Why llama.cpp: on a 2-core CPU its float32 step over the embedded target costs ~27 ms against ~45-65 ms for
torch's packed float32 path (docs/measurements.md, "The target run by llama.cpp"). The embedded target IS the
float32 dequantization of ``SmolLM2-135M-Instruct.Q4_1.gguf``; requantizing that file to F32 with llama.cpp's
``llama_model_quantize`` (``allow_requantize``) writes exactly those weights, cached once under $PACER_CACHE.

Exactness: greedy SD returns AR's tokens only if a position's logits do not depend on how many positions share
its forward pass. llama.cpp's CPU kernels (ggml-cpu, as vendored in llama-cpp-python 0.3.36) are NOT row-invariant
as shipped:

* a matrix product over ONE activation row runs ``ggml_vec_dot_f32`` (four 8-lane accumulators), over two or more
  rows llamafile's tinyBLAS (one 8-lane accumulator per output): the same sums, rounded differently;
* flash attention with one query row over >= 512 KV cells (more than 256 cells in use) splits the cells across
  threads and merges partial softmaxes; with >= 64 query rows it runs a tiled kernel;
* the output layer sees only the rows whose logits are wanted, so a feed that wants one row multiplies one row.

``setup.sh`` builds the library patched (scripts/patch_llama_source.py): a contiguous float32 (or float16) row goes
through tinyBLAS too, whose one-row kernel gives each output the many-row kernel's single accumulator in the same
order, several outputs in flight; and flash attention runs every feed of fewer than TILED_ROWS (128) query rows
with its row kernel (one running softmax over the row's cells in order), never split. Feeds of 128 rows or more
keep the tiled kernel, which rounds otherwise but prefills a long prompt ~1.4x faster: the engine feeds that many
rows only in a prompt's prefill (``LlamaTargetCache.prefill``, prompt[:-1]), which every run of a prompt, AR's
included, does alike (``kvcache.prefill_prompt``), so a prompt's cells are the same bits in every run; every later
feed goes in chunks of fewer than 128 rows. A prompt of fewer than 128 tokens is one chunk run row by row, so AR
feeds it whole and takes its first token from that call (``LlamaTargetCache.first_pass``), the bits of the prefill
and a one-token step after it. At load the engine PROVES which library it has, bit for bit, and picks
its context from that:

* ``attention_is_row_invariant`` passes (the patched library): the context llama.cpp itself defaults to on a CPU,
  flash attention with keys and values in float16 (``FLASH_CONTEXT``: AR 5% faster than in the plain context, fixed
  SD and PACER 5-13%, docs/measurements.md "The engine's context");
* else flash attention off and float32 cells like the torch target's (``PLAIN_CONTEXT``), and
  ``one_row_is_invariant`` says whether one-row products need help: with a stock library every llama_decode that
  would run a one-row kernel (a feed of one token, AR's step, or one that wants a single row) gets a companion
  token in a sequence of its own (dropped right after, so the cache's cells keep following the positions), which
  costs a second row on every AR step.

The prefill is cut into balanced chunks of at most CHUNK_TOKENS (256), and a context refilled after growing feeds
the prefilled positions in those same chunks. ``tests/test_target_engine.py`` checks the result bit for bit against
one-token steps past 256 cells in every mode, and the greedy-identity tests (prompts of 1 to ~500 tokens) are the
referee. AR runs on the same engine as the verify passes (``engine.target_cache``).

The torch engine stays for GPU targets, other dtypes, targets without a GGUF, and drafters that read the target's
hidden states (the feature head): llama.cpp's are not read."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from .. import embedded
from .cache import GGUFCache
from .model import (BATCH_TOKENS, MAX_ROWS, ContextPool, GGUFModel, GGUFUnavailable, check_gguf_file,
                    default_threads, llama_cpp_module, target_token_strings, vocabulary_mismatch)

CHUNK_TOKENS = BATCH_TOKENS           # tokens per llama_decode at most (a context's batch)
COMPANION_SEQUENCE = 2 * MAX_ROWS     # the companion token's sequence (0..2*MAX_ROWS-1: rows and reorder's scratch)
F32_FILE_NAME = "smollm2-135m-instruct-f32.gguf"
LLAMA_FTYPE_ALL_F32 = 0
GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1
# The contexts the target engine decodes in (module docstring), the first whose proof passes at load:
FLASH_CONTEXT = {"flash_attn_type": 1, "type_k": GGML_TYPE_F16, "type_v": GGML_TYPE_F16}   # the patched library
PLAIN_CONTEXT = {"flash_attn_type": 0, "type_k": GGML_TYPE_F32, "type_v": GGML_TYPE_F32}   # any other
TILED_ROWS = 128                      # the patched library tiles flash attention over this many query rows or more
PROBE_PREFILL = 200                   # the proof's prefill (tiled), then a step of TILED_ROWS - 1 rows past 256 cells


def balanced_chunks(count: int, limit: int) -> list[int]:
    """Sizes of the fewest chunks of at most ``limit`` that add up to ``count``, as equal as possible (so none has
    a single token when ``count`` >= 2 and ``limit`` >= 4). balanced_chunks(100, 48) == [34, 33, 33]."""
    if count <= 0:
        return []
    pieces = -(-count // limit)
    size, extra = divmod(count, pieces)
    return [size + 1] * extra + [size] * (pieces - extra)


def needs_companion(entries: int, wanted: int) -> bool:
    """Whether a decode call needs the companion token: one token alone, or one output row alone, would run the
    one-row kernels (module docstring)."""
    return entries < 2 or wanted == 1


def probe_tokens(engine, count: int) -> list[int]:
    """``count`` ids of the engine's vocabulary, varied, the same every time."""
    return [(7 * index + 3) % engine.vocab_size for index in range(count)]


def attention_is_row_invariant(engine) -> bool:
    """Whether a step's rows past 256 cells get the same bits fed one at a time as fed among the most rows a step
    feeds: two caches prefill PROBE_PREFILL probe tokens alike (one call, tiled on the patched library), then one
    takes the next TILED_ROWS - 1 tokens in one feed (its last two rows' logits), the other in feeds of at most 48
    and the last two alone. On a flash-attention context, True with the library setup.sh builds
    (scripts/patch_llama_source.py: a lone row's cells are not split across threads, fewer than TILED_ROWS rows are
    not tiled, one-row products round like many-row ones), False with a stock llama-cpp-python."""
    probe = probe_tokens(engine, PROBE_PREFILL + TILED_ROWS - 1)
    together, apart = GGUFCache(engine), GGUFCache(engine)
    for cache in (together, apart):
        cache.forward(probe[:PROBE_PREFILL], keep=1)
    both = together.forward(probe[PROBE_PREFILL:], keep=2)[0]
    for start in range(PROBE_PREFILL, len(probe) - 2, 48):
        apart.forward(probe[start: min(start + 48, len(probe) - 2)], keep=1)
    alone = [apart.forward([token_id], keep=1)[0, -1] for token_id in probe[-2:]]
    return bool(torch.equal(both[0], alone[0]) and torch.equal(both[1], alone[1]))


def one_row_is_invariant(engine) -> bool:
    """Whether the loaded library gives a row the same bits alone as beside other rows: seven probe tokens fed as
    six (one output row) then one, against all seven at once (two output rows). True with the library setup.sh
    builds (scripts/patch_llama_source.py), False with a stock llama-cpp-python."""
    probe = probe_tokens(engine, 7)
    alone, together = GGUFCache(engine), GGUFCache(engine)
    first = alone.forward(probe[:6], keep=1)[0, -1]
    second = alone.forward(probe[6:], keep=1)[0, -1]
    both = together.forward(probe, keep=2)[0]
    return bool(torch.equal(first, both[0]) and torch.equal(second, both[1]))


def convert_to_f32(source: Path, destination: Path, threads: int | None = None) -> Path:
    """Write ``source`` (any GGUF llama.cpp reads) as an all-float32 GGUF at ``destination`` (atomically): each
    quantized tensor dequantized by llama.cpp itself, the rest copied."""
    llama_cpp = llama_cpp_module()
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix="f32-", suffix=".gguf", dir=destination.parent)
    os.close(handle)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize = LLAMA_FTYPE_ALL_F32, True
    params.nthread = threads or default_threads()
    try:
        code = llama_cpp.llama_model_quantize(str(source).encode(), staging.encode(), params)
        if code != 0:
            raise GGUFUnavailable(f"llama.cpp could not convert '{source.name}' to float32 (code {code}).")
        os.replace(staging, destination)
    finally:
        if os.path.exists(staging):
            os.remove(staging)
    return destination


def embedded_f32_gguf(log=None) -> Path:
    """The embedded target's weights as a float32 GGUF under the cache folder, converted once (~2 s) from the file
    the target was converted from."""
    destination = embedded.cache_root() / F32_FILE_NAME
    if destination.exists():
        return destination
    source = embedded.find_gguf_file()
    if log:
        log(f"[pacer] writing the embedded target as float32 GGUF for llama.cpp in {destination} (once)...")
    return convert_to_f32(source, destination)


def balanced_pieces(entries: list, limit: int) -> list[list]:
    """``entries`` cut into consecutive pieces of the sizes ``balanced_chunks`` gives for ``limit``."""
    pieces, start = [], 0
    for size in balanced_chunks(len(entries), limit):
        pieces.append(entries[start: start + size])
        start += size
    return pieces


class LlamaTargetCache(GGUFCache):
    """The target's KV cache in a llama.cpp context, row-invariant (module docstring): the prompt's prefill in
    chunks of at most CHUNK_TOKENS, every later feed in chunks of fewer than TILED_ROWS, and, on a library that is
    not one-row invariant, a companion token whenever a call would run a one-row kernel."""

    prefilled = 0           # positions written by ``prefill``: a refill (``_grow``) feeds them in the same chunks

    def prefill(self, token_ids, counted: bool = True) -> None:
        """Feed a prompt's first tokens (prompt[:-1]: every run of the prompt starts so, ``kvcache.prefill_prompt``)
        into this empty cache of one row, in balanced chunks of at most CHUNK_TOKENS (128 or more rows are tiled
        by the patched library's flash attention: ~1.4x faster on a long prompt); no logits are computed.
        ``counted``: the call counts in ``calls`` (not where it is the first half of a run's first pass)."""
        if self.length or len(self.row_tokens) != 1:
            raise ValueError("prefill starts an empty cache of one row.")
        tokens = [int(token_id) for token_id in token_ids]
        self.prefilled = len(tokens)
        self._decode_rows([tokens], 0)
        self.row_tokens[0].extend(tokens)
        self.calls += int(counted)

    def first_pass(self, token_ids) -> torch.Tensor | None:
        """A whole prompt fed in one call that also gives its last token's logits row [V], where that row and every
        cell are the same bits as ``prefill`` (prompt[:-1]) followed by the last token alone: on the patched library
        (``flash_attention``: proven row-invariant below TILED_ROWS rows) with a prompt of 2 to TILED_ROWS - 1
        tokens, one chunk run row by row either way. AR's first token then comes out of its prefill, as
        llama.cpp's own completion tool samples it, instead of from one more one-row step. None, with nothing fed,
        elsewhere (the caller prefills as every run does)."""
        tokens = [int(token_id) for token_id in token_ids]
        if not self.owner.flash_attention or not 2 <= len(tokens) < TILED_ROWS or self.length:
            return None
        self.prefilled = len(tokens)          # a refill after ``_grow`` feeds them as one chunk again
        return self.forward(tokens, keep=1)[0, -1]

    def _chunks(self, entries: list) -> list[list]:
        """A row's prefilled positions in the prefill's own chunks (the same bits again after ``_grow``); every
        other entry in balanced chunks of fewer than TILED_ROWS, which flash attention runs row by row."""
        prefix = [entry for entry in entries if entry[1] < self.prefilled]
        chunks = []
        for row in sorted({entry[0] for entry in prefix}):
            row_prefix = [entry for entry in prefix if entry[0] == row]
            chunks += balanced_pieces(row_prefix, CHUNK_TOKENS)
        rest = [entry for entry in entries if entry[1] >= self.prefilled]
        return chunks + balanced_pieces(rest, TILED_ROWS - 1)

    def _decode_once(self, entries):
        wanted = sum(1 for entry in entries if entry[3])
        if self.owner.one_row_invariant or not needs_companion(len(entries), wanted):
            return super()._decode_once(entries)
        companion = (COMPANION_SEQUENCE, 0, entries[-1][2], wanted > 0)   # its own sequence: sees only itself
        try:
            logits = super()._decode_once(list(entries) + [companion])
        finally:
            self.context.kv_cache_seq_rm(COMPANION_SEQUENCE, -1, -1)
        return logits[:wanted]


class LlamaTarget:
    """The target run by llama.cpp on a float32 GGUF of its weights; ``new_cache`` gives each run its KV cache
    (contexts pooled and reused like the gguf drafter's)."""

    name = "llama.cpp"

    def __init__(self, model: GGUFModel, vocab_size: int):
        """Loads nothing: proves the library (module docstring) and keeps a pool of the context it proved."""
        self.model, self.vocab_size = model, vocab_size
        self.pool = self._pool(FLASH_CONTEXT)
        self.flash_attention = self.one_row_invariant = attention_is_row_invariant(self)
        if not self.flash_attention:
            self.pool = self._pool(PLAIN_CONTEXT)
            self.one_row_invariant = one_row_is_invariant(self)     # else every one-row call takes a companion

    def _pool(self, options: dict) -> ContextPool:
        return ContextPool(self.model, sequences=COMPANION_SEQUENCE + 1, options=options)

    @classmethod
    def load(cls, path, tokenizer, vocab_size: int, threads: int | None = None) -> "LlamaTarget":
        """Load a GGUF of the target and check that it speaks the target's tokenizer (GGUFUnavailable otherwise)."""
        path = check_gguf_file(path)
        model = GGUFModel(path, threads or default_threads())
        mismatch = vocabulary_mismatch(model.token_strings(), target_token_strings(tokenizer, vocab_size), vocab_size)
        if mismatch:
            raise GGUFUnavailable(f"The GGUF file '{path.name}' cannot run the target: {mismatch}.")
        return cls(model, vocab_size)

    @classmethod
    def for_embedded(cls, tokenizer, vocab_size: int, log=None) -> "LlamaTarget":
        return cls.load(embedded_f32_gguf(log), tokenizer, vocab_size)

    def new_cache(self) -> LlamaTargetCache:
        return LlamaTargetCache(self)

    def describe(self) -> str:
        if self.flash_attention:
            rows = "flash attention, f16 KV"      # row-invariant too: the proof chose it
        else:
            rows = "one-row invariant" if self.one_row_invariant else "one-row calls with a companion token"
        return f"llama.cpp ({self.model.path.name}, {self.model.threads} threads, {rows})"
