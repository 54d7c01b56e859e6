"""How the loader builds what drafts for a target: the draft models it loads beside the target (``load_draft_models``)
and the drafter ``--draft`` names (``named_drafter``): a feature head's folder, a drafter made of the target itself
(``self-int8``, ``self-int4``, ``gguf``), or the independent draft model. Failures are ``loading.ModelLoadError``,
shown as one line like the target's own."""
from __future__ import annotations

import sys
import warnings

import torch

from .. import embedded
from ..loading import ModelLoadError, check_tokenizers_match, load_causal_lm, parameter_count, resolve_source
from .drafter import Drafter
from .feature_head import FeatureHeadDrafter, is_head_dir
from .independent import reduced_vocabulary_drafter, small_drafter
from .kinds import entry_for_name, load_drafter
from .loaded import DraftModels
from .vocabulary import recommended_kept


def default_embedded_drafter(draft, device: torch.device) -> str:
    """What ``embedded`` (or no draft) means for the embedded target: ``gguf`` (the target's own GGUF file run by
    llama.cpp) on a CPU where llama-cpp-python is installed and its build passed its proof in a child process
    (``llama.proof``), the drafter with which the app's defaults show the
    most of the papers' claims on held-out prompts (README, "Measured"); else the small draft model. Any other
    name is kept."""
    if draft not in (None, "", embedded.EMBEDDED):
        return draft
    from ..llama.availability import embedded_gguf_unavailable
    if device.type == "cpu":
        why_not = embedded_gguf_unavailable()
        if why_not is None:
            return "gguf"
        print(f"[pacer] gguf drafter left out: {why_not}; drafting with the small draft model", file=sys.stderr,
              flush=True)
    return embedded.DEFAULT_EMBEDDED_DRAFTER


def load_draft_models(draft_location: str, draft_name: str, is_embedded_target: bool, device, dtype, target_model,
                      target_tokenizer, target_name: str, gguf_file: str | None) -> DraftModels:
    """The draft models the drafters are built from: the independent draft model (``_small_model_source``), checked
    against the target's tokenizer, and the GGUF file the ``gguf`` drafter runs."""
    small_location, small_name = _small_model_source(draft_location, draft_name, is_embedded_target)
    small_model = _load_draft(small_location, small_name, device, dtype, target_model, target_tokenizer,
                              target_name) if small_location else None
    return DraftModels(small_model=small_model, small_model_id=small_name, gguf_file=str(gguf_file or ""))


def named_drafter(target, models: DraftModels, draft_location: str, draft_name: str, draft_dtype,
                  draft_vocab) -> Drafter:
    """The drafter ``--draft`` named, built for ``target`` (a ``models.Target``) from what was loaded: a feature
    head's folder, a drafter made of the target, or the independent draft model (scoring the ids ``draft_vocab``
    asks for)."""
    if is_head_dir(draft_location):
        return loaded_head(target, draft_location, draft_name, draft_dtype)
    if _builds_from_target(draft_location):
        return drafter_by_name(target, models, draft_location)
    return small_drafter_of(target, models, draft_vocab)


def _builds_from_target(draft_location: str) -> bool:
    """Whether the draft is a drafter made of the target itself (``self-int8``, ``self-int4``, ``gguf``)."""
    named = entry_for_name(draft_location)
    return named is not None and named.kind in ("self-quantized", "gguf")


def _small_model_source(draft_location: str, draft_name: str, is_embedded_target: bool) -> tuple[str | None, str]:
    """Where the independent draft model loads from, and its name: the draft itself; when a feature head or the
    target itself drafts, the embedded small draft beside the embedded target (the assisted baselines and ``small``
    need it), else none."""
    if not (is_head_dir(draft_location) or _builds_from_target(draft_location)):
        return draft_location, draft_name
    return resolve_source(embedded.EMBEDDED_SMALL, "draft") if is_embedded_target else (None, "")


def _load_draft(location: str, name: str, device, dtype, target_model, target_tokenizer, target_name: str):
    """The independent draft model, checked against the target's tokenizer (a draft larger than the target loads,
    with a warning: speculative decoding will be slower than plain decoding)."""
    draft_model, draft_tokenizer = load_causal_lm(location, name, "draft", device, dtype)
    check_tokenizers_match(target_tokenizer, draft_tokenizer, target_name, name)
    if parameter_count(draft_model) > parameter_count(target_model):
        warnings.warn(f"The draft '{name}' is larger than the target '{target_name}': "
                      "speculative decoding will be slower than plain decoding.")
    return draft_model


def loaded_head(target, directory: str, name: str, dtype) -> Drafter:
    """The feature head in ``directory`` (a folder with head_config.json) reading ``target``'s model."""
    try:
        return FeatureHeadDrafter.load(directory, target.model, target.vocab_size, name, dtype=dtype)
    except (OSError, KeyError, RuntimeError, ValueError) as failure:
        raise ModelLoadError(f"Could not load the feature head '{name}': {failure}") from failure


def drafter_by_name(target, models: DraftModels, name: str) -> Drafter:
    """``kinds.load_drafter`` for the loader: a drafter that cannot be built is a ModelLoadError."""
    try:
        return load_drafter(target, models, name)
    except ValueError as failure:
        raise ModelLoadError(str(failure)) from failure


def small_drafter_of(target, models: DraftModels, draft_vocab) -> Drafter:
    """The independent draft model as a drafter, scoring the ids ``draft_vocab`` asks for (drafters/vocabulary.py):
    None → what its folder's frequent_ids.json recommends (``default_kept``; all ids without one), "all" or 0 →
    every id, N → the N most frequent."""
    text = "" if draft_vocab is None else str(draft_vocab).strip().lower()
    every_id = text in ("all", "0", "full")
    if text and not every_id and not text.isdigit():
        raise ModelLoadError(f"Unknown draft vocabulary '{draft_vocab}': use all or a number of ids such as 16384.")
    count = 0 if every_id else int(text) if text else recommended_kept(models.small_model_folder)
    if not count:
        return small_drafter(target, models)
    try:
        return reduced_vocabulary_drafter(target, models, count, name=models.small_model_id)
    except ValueError as missing:
        raise ModelLoadError(str(missing)) from missing
