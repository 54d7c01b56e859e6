"""The ``gguf`` drafter: a GGUF file of the target, run by llama.cpp (through llama-cpp-python), drafting with
a KV cache of its own.

Why it is both cheap and right on a CPU: the embedded target is the float32 conversion of
``SmolLM2-135M-Instruct.Q4_1.gguf`` (``embedded.py``), so that file holds the target's own weights in 4 bits.
Run by llama.cpp, an engine written for CPUs, it differs from the target only in arithmetic (8-bit activations
in its Q4_1 dot products): it agrees with the target's greedy token almost everywhere at a fraction of a target
step's cost on a CPU (README, "Measured"; docs/drafters.md). Drafting with a low-bit GGUF of the
target is also how llama.cpp's own speculative examples are used.

Exactness does not depend on the file's numerics: fixed SD and PACER verify with the float target, and SMC-SD's
proposal is a causal LM's softmax (full support).

The cache (``GGUFCache``) is a ``kvcache.DraftCache`` (forward, crop, reorder, feed_sequence, length, calls,
features): batch row r is llama.cpp sequence r of one context with a unified KV buffer; a crop removes
each row's cells past the length, a reorder copies sequences (cells are shared, not copied). Contexts are kept
in a small pool per drafter and reused across runs (``ContextPool``).

The prompt's keys and values come from the target when it can give them (``GGUFCache.adopt``): beside the
llama.cpp target engine, whose model has the same attention layout as the file (the embedded target and its own
Q4_1 file), the target runs over the prompt first and its cells are copied into the draft's context, a few
milliseconds where the draft's own prefill cost about 5 ms a prompt token on a 2-core CPU, more than the float32
target's own (benchmarks/draft_call_profile.py). The draft then drafts from the target's view of the prompt, which
only changes how often its guesses are accepted, never what the decoders output."""
from __future__ import annotations

import ctypes
import functools
import os
import threading
import weakref
from pathlib import Path

import torch

from ..kvcache import FeedsSequence

MAX_ROWS = 16                 # SMC-SD particles a context can hold (twice as many sequences: reorder's scratch)
START_CELLS = 2048            # KV cells a new context holds; a run that needs more grows its context (x2)
BATCH_TOKENS = 256            # tokens per llama_decode call (a longer feed is split); the context's
                              # compute buffer holds this many logit rows (256 x 49,152 floats: 50 MB)
COLUMNS_PER_RUN = 4           # caches one page run holds at once: fixed SD, PACER, SMC-SD and the oracle after


class GGUFUnavailable(RuntimeError):
    """llama-cpp-python is not installed, or the file cannot be used as a drafter for this target."""


@functools.cache
def _imported_llama_cpp():
    import llama_cpp
    from llama_cpp import _logger
    _logger.set_verbose(False)          # llama.cpp's load and context messages only on errors
    return llama_cpp


def llama_cpp_module():
    """``llama_cpp``, or GGUFUnavailable saying how to install it. Imported and quietened once: setting the
    logger's level on every decode call cost ~0.1 ms a call (logging clears every logger's cache)."""
    try:
        return _imported_llama_cpp()
    except ImportError as missing:
        raise GGUFUnavailable("The gguf drafter needs llama-cpp-python, which is not installed: bash setup.sh builds "
                              f"it from source (a C++ compiler and cmake are needed). ({missing})") from None


def llama_cpp_available() -> str | None:
    """None when llama-cpp-python imports, else why not (one line)."""
    try:
        llama_cpp_module()
    except GGUFUnavailable as missing:
        return str(missing)
    return None


def default_threads() -> int:
    """llama.cpp's threads for drafting: $PACER_GGUF_THREADS, else 2 (measured on the 2-core CPU: README,
    "Measured"), never more than the cores."""
    explicit = os.environ.get("PACER_GGUF_THREADS", "").strip()
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    return max(1, min(2, os.cpu_count() or 1))


def pool_size() -> int:
    """Idle contexts kept per drafter: what the runs decoding at once ($PACER_CONCURRENCY, default 1) hold at once.
    Each context holds its KV buffer (START_CELLS cells: 45 MB for the embedded target) and a compute buffer
    (~50 MB, touched as used): about 52 MB resident each, measured after creating one."""
    try:
        concurrency = max(1, int(os.environ.get("PACER_CONCURRENCY", "1")))
    except ValueError:
        concurrency = 1
    return COLUMNS_PER_RUN * concurrency


def check_gguf_file(path) -> Path:
    """The path, if it names a readable GGUF file; GGUFUnavailable naming it otherwise."""
    path = Path(str(path)).expanduser()
    if not path.is_file():
        raise GGUFUnavailable(f"The GGUF drafter file '{path}' does not exist.")
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise GGUFUnavailable(f"'{path}' is not a GGUF file (it does not start with the GGUF magic bytes).")
    return path


def target_token_strings(tokenizer, count: int) -> list[str]:
    """The target tokenizer's string for each id below ``count``."""
    if hasattr(tokenizer, "convert_ids_to_tokens"):
        return [str(token) for token in tokenizer.convert_ids_to_tokens(list(range(count)))]
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    return [str(by_id.get(index, "")) for index in range(count)]


def vocabulary_mismatch(gguf_tokens: list[str], target_tokens: list[str], vocab_size: int) -> str | None:
    """Why the GGUF's vocabulary cannot draft for the target, or None. The file must score every id the
    target scores (``vocab_size``) and give each id the target tokenizer's string."""
    if len(gguf_tokens) < vocab_size:
        return f"it scores {len(gguf_tokens)} token ids and the target {vocab_size}"
    differing = [index for index, (ours, theirs) in enumerate(zip(gguf_tokens, target_tokens)) if ours != theirs]
    if differing:
        index = differing[0]
        return (f"{len(differing)} token ids have other strings (id {index}: {gguf_tokens[index]!r} in the file, "
                f"{target_tokens[index]!r} in the target's tokenizer)")
    return None


class GGUFModel:
    """A GGUF file loaded by llama.cpp (weights in memory once) and what it says about itself."""

    def __init__(self, path: Path, threads: int):
        llama_cpp = llama_cpp_module()
        from llama_cpp import _internals
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        try:
            self.model = _internals.LlamaModel(path_model=str(path), params=params, verbose=False)
        except ValueError as failure:
            raise GGUFUnavailable(f"llama.cpp could not load '{path}': {failure}") from None
        self.path, self.threads = path, threads
        self.n_vocab = int(self.model.n_vocab())
        self.n_embd = int(self.model.n_embd())
        self.description = self.model.desc()
        self.file_bytes = path.stat().st_size

    def token_strings(self) -> list[str]:
        llama_cpp = llama_cpp_module()
        vocab = self.model.vocab
        return [llama_cpp.llama_vocab_get_text(vocab, index).decode("utf-8", errors="replace")
                for index in range(self.n_vocab)]

    def new_context(self, cells: int, sequences: int = 2 * MAX_ROWS, options: dict | None = None):
        """A context with a unified KV buffer of ``cells`` cells for ``sequences`` sequences (2 * MAX_ROWS:
        the rows and reorder's scratch). ``options``: other llama_context_params fields (the target engine's
        flash-attention and KV types)."""
        llama_cpp = llama_cpp_module()
        from llama_cpp import _internals
        params = llama_cpp.llama_context_default_params()
        cells = max(cells, BATCH_TOKENS)     # llama.cpp aborts (not raises) on a context smaller than its batch
        params.n_ctx, params.n_batch, params.n_ubatch = cells, BATCH_TOKENS, BATCH_TOKENS
        params.n_seq_max = sequences
        params.n_threads = params.n_threads_batch = self.threads
        params.kv_unified = True
        params.no_perf = True
        for name, value in (options or {}).items():
            setattr(params, name, value)
        context = _internals.LlamaContext(model=self.model, params=params, verbose=False)
        return context, _internals.LlamaBatch(n_tokens=BATCH_TOKENS, embd=0, n_seq_max=1, verbose=False)

    @functools.cached_property
    def kv_layout(self) -> tuple:
        """What a sequence's cells hold in this model: copying cells between two contexts needs the same."""
        metadata = self.model.metadata()
        arch = metadata.get("general.architecture", "llama")
        names = ("block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
                 "attention.key_length", "attention.value_length", "rope.freq_base")
        return (arch,) + tuple(metadata.get(f"{arch}.{name}") for name in names)

    def kv_bytes_per_cell(self) -> int:
        """Bytes one KV cell takes (keys and values in float16 over every layer)."""
        metadata = self.model.metadata()
        arch = metadata.get("general.architecture", "llama")
        layers = int(metadata.get(f"{arch}.block_count", 0))
        heads = int(metadata.get(f"{arch}.attention.head_count", 1))
        kv_heads = int(metadata.get(f"{arch}.attention.head_count_kv", heads))
        return 2 * 2 * layers * kv_heads * (self.n_embd // max(heads, 1))


class ContextPool:
    """Idle llama.cpp contexts of one model, reused across runs (creating one allocates its KV buffer).
    At most ``size`` are kept; a run that finds none creates one."""

    def __init__(self, model: GGUFModel, size: int | None = None, sequences: int = 2 * MAX_ROWS,
                 options: dict | None = None):
        self.model, self.size = model, size or pool_size()
        self.sequences, self.options = sequences, dict(options or {})
        self._idle: list = []
        self._lock = threading.Lock()
        self.created = 0

    def acquire(self, cells: int | None = None):
        """An idle context with at least ``cells`` cells (START_CELLS by default), emptied, or a new one."""
        cells = cells or START_CELLS
        with self._lock:
            for index, (context, batch) in enumerate(self._idle):
                if context.n_ctx() >= cells:
                    del self._idle[index]
                    context.kv_cache_clear()
                    return context, batch
        self.created += 1
        return self.model.new_context(cells, self.sequences, self.options)

    def release(self, context, batch) -> None:
        with self._lock:
            if len(self._idle) < self.size:
                self._idle.append((context, batch))


class GGUFDrafter:
    """A GGUF file as the drafter; an ordinary causal LM to the decoders."""

    kind = "gguf"
    reads_target_features = False
    hidden_size = 0           # no hidden states are read from llama.cpp (so no trained pre-verifier applies)

    def __init__(self, model: GGUFModel, vocab_size: int, name: str, target_id: str = ""):
        self.model, self.vocab_size, self.name, self.target_id = model, vocab_size, name, target_id
        self.pool = ContextPool(model)
        self._adopting_pools: dict = {}      # contexts laid out like a target's, by that target's context options

    @classmethod
    def load(cls, path, tokenizer, vocab_size: int, name: str, target_id: str = "",
             threads: int | None = None) -> "GGUFDrafter":
        """Load the file and check that it speaks the target's tokenizer (GGUFUnavailable otherwise)."""
        path = check_gguf_file(path)
        model = GGUFModel(path, threads or default_threads())
        mismatch = vocabulary_mismatch(model.token_strings(), target_token_strings(tokenizer, vocab_size), vocab_size)
        if mismatch:
            raise GGUFUnavailable(f"The GGUF file '{path.name}' does not share the tokenizer of the target "
                                  f"'{target_id or 'target'}': {mismatch}.")
        return cls(model, vocab_size, name, target_id)

    def new_cache(self, target_cache=None, full_support: bool = False) -> "GGUFCache":
        """A cache for one run; beside a llama.cpp target of the same attention layout, one that can ``adopt``
        the target's prompt (its context then stores keys and values as the target's does)."""
        return GGUFCache(self, self.pool_beside(target_cache))

    def pool_beside(self, target_cache) -> "ContextPool | None":
        """Contexts whose cells a ``target_cache`` can hand over, or None when it cannot."""
        if not isinstance(target_cache, GGUFCache) or target_cache.owner.model.kv_layout != self.model.kv_layout:
            return None
        options = target_cache.owner.pool.options
        key = tuple(sorted(options.items()))
        if key not in self._adopting_pools:
            self._adopting_pools[key] = ContextPool(self.model, options=options)
        return self._adopting_pools[key]

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "file": self.model.path.name, "of": self.target_id,
                "dtype": self.model.description, "parameters": int(self.model.model.n_params()),
                "file_megabytes": round(self.model.file_bytes / 2 ** 20, 1), "threads": self.model.threads,
                "kv_megabytes_per_context": round(START_CELLS * self.model.kv_bytes_per_cell() / 2 ** 20, 1)}


class GGUFCache(FeedsSequence):
    """One run's drafting state in a pooled llama.cpp context, a ``kvcache.DraftCache``.

    Invariant: rows 0..B-1 are sequences 0..B-1 and each holds exactly ``row_tokens[r]`` (all rows the same
    length); sequences B..2B-1 are empty outside ``reorder``."""

    features = None
    feature_length = 0
    takes_keep = True         # ``forward(keep=k)``: llama.cpp computes and returns only the last k rows' logits

    def __init__(self, owner, pool: "ContextPool | None" = None):
        """``owner``: the GGUFDrafter, or the llama.cpp target engine (``target_engine.LlamaTarget``): what
        holds the model and the vocabulary size. ``pool``: where its contexts come from (the owner's pool by
        default; a drafter's contexts laid out like the target's when the cache can ``adopt``)."""
        self.owner, self.vocab_size = owner, owner.vocab_size
        self.pool = pool or owner.pool
        self.adopts_target_prompt = pool is not None and pool is not owner.pool
        self.context, self.batch = self.pool.acquire()
        self._release = weakref.finalize(self, self.pool.release, self.context, self.batch)
        self.row_tokens: list[list[int]] = [[]]
        self.device = torch.device("cpu")
        self.calls = 0

    @property
    def length(self) -> int:
        return len(self.row_tokens[0])

    @torch.inference_mode()
    def forward(self, new_token_ids, output_hidden_states: bool = False, keep: int | None = None):
        """Append tokens (list of ids, or [B, T] tensor) to every row; logits [B, T or keep, V] float32 (and an
        empty hidden state [B, T or keep, 0]: llama.cpp's are not read)."""
        if torch.is_tensor(new_token_ids):
            rows = new_token_ids.tolist()
        else:
            rows = [[int(token_id) for token_id in new_token_ids]]
        if len(rows) != len(self.row_tokens):
            raise ValueError(f"GGUFCache holds {len(self.row_tokens)} rows; got {len(rows)}.")
        kept = min(keep or len(rows[0]), len(rows[0]))
        logits = self._decode_rows(rows, kept)
        for row, tokens in zip(self.row_tokens, rows):
            row.extend(tokens)
        self.calls += 1
        logits = logits.view(len(rows), kept, -1)[..., : self.vocab_size]
        if output_hidden_states:
            return logits, logits.new_zeros(len(rows), kept, 0)
        return logits

    def _decode_rows(self, rows: list[list[int]], kept: int) -> torch.Tensor:
        """Feed each row's new tokens after its cached ones; the logits of each row's last ``kept`` tokens,
        [B * kept, n_vocab] in row order. Feeds of more than BATCH_TOKENS go in several decode calls."""
        entries = [(row_index, self.length + offset, token_id, offset >= len(tokens) - kept)
                   for row_index, tokens in enumerate(rows) for offset, token_id in enumerate(tokens)]
        outputs, decoded = [], []
        for chunk in self._chunks(entries):
            outputs.append(self._decode(chunk, decoded))
            decoded = decoded + chunk
        return torch.cat(outputs) if len(outputs) > 1 else outputs[0]

    def _chunks(self, entries: list) -> list[list]:
        """The decode calls a feed is split into: BATCH_TOKENS entries each."""
        return [entries[start: start + BATCH_TOKENS] for start in range(0, len(entries), BATCH_TOKENS)]

    def _decode(self, entries, decoded=()) -> torch.Tensor:
        """One llama_decode over (sequence, position, token, wants logits) entries; a full KV buffer is grown
        once and the call retried (``decoded``: this feed's entries already decoded, not yet in ``row_tokens``)."""
        try:
            return self._decode_once(entries)
        except RuntimeError:
            self._grow(len(entries), decoded)
            return self._decode_once(entries)

    def _decode_once(self, entries) -> torch.Tensor:
        llama_cpp = llama_cpp_module()
        batch = self.batch.batch
        outputs = 0
        for index, (sequence, position, token_id, wanted) in enumerate(entries):
            batch.token[index], batch.pos[index] = token_id, position
            batch.seq_id[index][0], batch.n_seq_id[index] = sequence, 1
            batch.logits[index] = wanted
            outputs += int(wanted)
        batch.n_tokens = len(entries)
        self.context.decode(self.batch)
        logits = torch.empty(outputs, self.owner.model.n_vocab)     # [outputs, n_vocab] float32, batch order
        if outputs:       # one copy out of llama.cpp's buffer, which the next decode overwrites
            ctypes.memmove(logits.data_ptr(), llama_cpp.llama_get_logits(self.context.ctx), logits.nbytes)
        return logits

    def _grow(self, extra: int, decoded=()) -> None:
        """A context with twice the cells (at least the rows' tokens plus ``extra``), refilled with every row's
        tokens and the ``decoded`` entries of the feed under way; the old one goes back to the pool."""
        needed = sum(len(row) for row in self.row_tokens) + len(decoded) + extra
        cells = max(2 * self.context.n_ctx(), needed + START_CELLS)
        self._release()
        self.context, self.batch = self.pool.acquire(cells)
        self._release = weakref.finalize(self, self.pool.release, self.context, self.batch)
        entries = [(row_index, position, token_id, False) for row_index, tokens in enumerate(self.row_tokens)
                   for position, token_id in enumerate(tokens)]
        entries += [(row_index, position, token_id, False) for row_index, position, token_id, _ in decoded]
        for chunk in self._chunks(entries):
            self._decode_once(chunk)

    def adopt(self, source: "GGUFCache") -> None:
        """Become a copy of ``source``'s one row (an empty cache of one row; ``source`` a cache whose model has
        the same attention layout, in a context with the same cell types: ``GGUFDrafter.pool_beside``): its
        cells are copied through llama.cpp's sequence state (a few ms for a few hundred tokens)."""
        if self.length or len(self.row_tokens) != 1 or len(source.row_tokens) != 1:
            raise ValueError("adopt copies one row into an empty cache of one row.")
        if source.length >= self.context.n_ctx():
            self._grow(source.length)
        llama_cpp = llama_cpp_module()
        size = llama_cpp.llama_state_seq_get_size(source.context.ctx, 0)
        state = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(source.context.ctx, state, size, 0)
        if not written or llama_cpp.llama_state_seq_set_data(self.context.ctx, state, written, 0) != written:
            raise RuntimeError("llama.cpp could not copy the target's cells into the draft's context.")
        self.row_tokens = [list(source.row_tokens[0])]

    def crop(self, length: int) -> None:
        """Roll every row back to its first ``length`` tokens."""
        if length >= self.length:
            return
        for sequence, tokens in enumerate(self.row_tokens):
            self.context.kv_cache_seq_rm(sequence, length, -1)
            del tokens[length:]

    def reorder(self, ancestor_index: torch.Tensor) -> None:
        """Row i becomes old row ancestor_index[i] (the batch may change size: SMC-SD's 1 → N after
        prefill). Copies go through scratch sequences B'..2B'-1 so no source is overwritten before it is read."""
        ancestors = [int(index) for index in ancestor_index.tolist()]
        count, old_count = len(ancestors), len(self.row_tokens)
        if count > MAX_ROWS:
            raise ValueError(f"The gguf drafter holds at most {MAX_ROWS} rows (particles); {count} were asked.")
        if ancestors == list(range(old_count)):
            return
        for row, ancestor in enumerate(ancestors):
            self.context.kv_cache_seq_cp(ancestor, MAX_ROWS + row, -1, -1)
        for sequence in range(max(count, old_count)):
            self.context.kv_cache_seq_rm(sequence, -1, -1)
        for row in range(count):
            self.context.kv_cache_seq_cp(MAX_ROWS + row, row, -1, -1)
            self.context.kv_cache_seq_rm(MAX_ROWS + row, -1, -1)
        self.row_tokens = [list(self.row_tokens[ancestor]) for ancestor in ancestors]
