"""Loading one causal LM and its tokenizer from a source (a hub id, a local folder, or the word ``embedded``), and
the checks a loaded model passes: what the target's loader (``models.py``) and the drafters' construction
(``drafters/construction.py``) share. Loading errors become ``ModelLoadError`` with a message that names the model;
the UI and CLIs show it as one line."""
from __future__ import annotations

import os
from pathlib import Path

from . import embedded
from .packed_linear import pack_linear_layers, packing_wanted

PROBE_STRINGS = (
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b  # 42",
    "Ünïcödé ✓ 漢字 — émoji 🙂 and\ttabs",
    "<|im_start|>user\nHi<|im_end|>",
)


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded, or a draft does not fit its target."""


def resolve_source(source: str, role: str) -> tuple[str, str]:
    """Map a source to (path or hub id, display name); ``role`` is "target" or "draft"."""
    if source is None or str(source).strip() == "":
        source = embedded.EMBEDDED
    source = str(source).strip()
    if role == "draft" and source == embedded.EMBEDDED:
        source = embedded.DEFAULT_EMBEDDED_DRAFTER
    if role == "draft":     # the page's drafter names for the embedded drafters
        source = {"small": embedded.EMBEDDED_SMALL, "head": embedded.EMBEDDED_HEAD}.get(source, source)
    try:
        if role == "target" and source == embedded.EMBEDDED:
            return str(embedded.ensure_embedded_target()), embedded.TARGET_NAME
        if role == "draft" and source == embedded.EMBEDDED_SMALL:
            return str(embedded.embedded_draft_dir()), embedded.EMBEDDED_DRAFT_LABEL
        if role == "draft" and source == embedded.EMBEDDED_HEAD:
            return str(embedded.embedded_head_dir()), embedded.EMBEDDED_HEAD_LABEL
    except embedded.EmbeddedModelMissing as missing:
        raise ModelLoadError(str(missing)) from missing
    return source, source


def load_causal_lm(location: str, name: str, role: str, device, dtype, device_map=None):
    """(model in eval mode, tokenizer) from a folder or hub id, on ``device`` (or spread by ``device_map``), its
    linear layers packed where that pays (packed_linear.py)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    is_local = Path(location).expanduser().exists()
    if not is_local and (location.startswith((".", "/", "~")) or os.sep in location.strip("/").replace("/", "", 1)):
        raise ModelLoadError(f"The {role} model path '{location}' does not exist.")
    kwargs = {"dtype": dtype}
    if device_map:
        kwargs["device_map"] = device_map
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    except (OSError, ValueError, EnvironmentError) as failure:
        first_line = str(failure).strip().splitlines()[0] if str(failure).strip() else type(failure).__name__
        hint = "" if is_local else " (is it a valid hub id, and is the network or HF cache available?)"
        raise ModelLoadError(f"Could not load the {role} model '{name}'{hint}: {first_line}") from failure
    if not device_map:
        model.to(device)
        if packing_wanted(device, dtype):
            pack_linear_layers(model)
    model.eval()
    return model, tokenizer


def check_tokenizers_match(target_tokenizer, draft_tokenizer, target_name: str, draft_name: str) -> None:
    """Draft and target must map the same strings to the same ids, over the ids both know."""
    target_vocab, draft_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    common_limit = min(len(target_vocab), len(draft_vocab))
    target_common = {tok: i for tok, i in target_vocab.items() if i < common_limit}
    draft_common = {tok: i for tok, i in draft_vocab.items() if i < common_limit}
    differing = [tok for tok, i in target_common.items() if draft_common.get(tok) != i]
    if differing:
        raise ModelLoadError(
            f"Tokenizers do not match: '{target_name}' and '{draft_name}' give different ids to "
            f"{len(differing)} tokens (e.g. {differing[0]!r}). Speculative decoding needs one shared tokenizer.")
    for probe in PROBE_STRINGS:
        target_ids = target_tokenizer(probe, add_special_tokens=False)["input_ids"]
        draft_ids = draft_tokenizer(probe, add_special_tokens=False)["input_ids"]
        if list(target_ids) != list(draft_ids):
            raise ModelLoadError(
                f"Tokenizers do not match: '{target_name}' and '{draft_name}' split {probe[:30]!r} differently.")


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())
