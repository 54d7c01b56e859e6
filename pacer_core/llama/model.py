"""A GGUF file loaded by llama.cpp (through llama-cpp-python) and the pool of contexts its runs decode in: what the
gguf drafter (``drafters/gguf_drafter.py``) and the llama.cpp target engine (``target.py``) both stand on.

``llama_cpp_module`` is the one place the binding is imported (quietened once); ``GGUFUnavailable`` says why
llama.cpp cannot run here or a file cannot be used. A ``GGUFModel`` holds the weights once; a ``ContextPool``
keeps idle contexts (each with its KV buffer) of one model for reuse across runs."""
from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

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


def llama_unavailable() -> str | None:
    """None when llama-cpp-python imports, else why not (one line)."""
    try:
        llama_cpp_module()
    except GGUFUnavailable as missing:
        return str(missing)
    return None


def default_threads() -> int:
    """llama.cpp's threads for drafting: $PACER_GGUF_THREADS, else 2 (measured on the 2-core CPU:
    docs/measurements.md, "Threads and OpenMP waiting on a shared CPU"), never more than the cores."""
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
