"""Drafters: what proposes tokens for the target to verify.

Every drafter hands each decoding run a *cache* with one interface (``kvcache.CachedModel``'s: feed
tokens and get logits over the full vocabulary, crop to a length, reorder batch rows), so fixed SD,
PACER, the oracle and SMC-SD run on any kind unchanged. Four kinds:

* ``independent``: a small causal LM with its own KV cache (any hub or local draft; the baseline for
  transformers' assisted generation), optionally scoring only its most frequent ids (``vocabulary.py``).
* ``feature-head``: one decoder layer that reads the target's own hidden state (EAGLE, Li et al. 2024,
  arXiv 2401.15077), optionally with a reduced output vocabulary (FR-Spec, Zhao et al. 2025,
  arXiv 2502.14856); see ``feature_head.py``.
* ``self-quantized`` (``self-int4``, ``self-int8``): the loaded target's own weights, quantized weight-only at
  load time, with a KV cache of its own (QSpec, Zhao et al. 2025, arXiv 2410.11305); see ``self_quantized.py``.

This package does not import ``models`` (the loader imports the drafters, never the reverse)."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from torch import nn

from .. import embedded
from ..kvcache import CachedModel
from ..packed_linear import PackedLinear
from ..quantized_linear import QuantizationUnavailable
from .gguf_drafter import GGUFDrafter, GGUFUnavailable
from .kinds import KINDS, all_names_text, gguf_path, gguf_unavailable, kind_for_key, kind_for_name, kind_of_drafter
from .self_quantized import SELF_DRAFTERS, SelfQuantizedDrafter
from .vocabulary import OFF_VOCABULARY_MASS, full_vocabulary_logits, load_frequent_ids


class IndependentDrafter:
    """A separate causal LM that shares the target's tokenizer. With ``kept_ids`` its output layer scores
    only those ids (q = 0 elsewhere; vocabulary.py)."""

    kind = "independent"
    reads_target_features = False

    def __init__(self, model, vocab_size: int, name: str, kept_ids: torch.Tensor | None = None):
        self.model, self.vocab_size, self.name = model, vocab_size, name
        self.hidden_size = int(getattr(model.config, "hidden_size", 0))
        self.kept_ids = None if kept_ids is None else kept_ids.long()
        self.output_layer = None if kept_ids is None else kept_output_layer(model, self.kept_ids)

    def new_cache(self, target_cache, full_support: bool = False) -> CachedModel:
        if self.kept_ids is None:
            return CachedModel(self.model, self.vocab_size)   # a causal LM's softmax already has full support
        return ReducedVocabularyCache(self, OFF_VOCABULARY_MASS if full_support else 0.0)

    def describe(self) -> dict:
        parameter = next(self.model.parameters())
        described = {"kind": self.kind, "name": self.name, "dtype": str(parameter.dtype).replace("torch.", ""),
                     "parameters": sum(p.numel() for p in self.model.parameters())}
        if self.kept_ids is not None:
            described["kept_ids"] = int(self.kept_ids.numel())
        return described


def kept_output_layer(model, kept_ids: torch.Tensor) -> nn.Module:
    """The model's output layer cut to the kept ids' rows (packed like the original, if it was)."""
    output = model.get_output_embeddings()
    if getattr(model.config, "final_logit_softcapping", None) or not isinstance(output, (nn.Linear, PackedLinear)):
        raise ValueError("A reduced vocabulary needs a draft whose output layer is a plain linear layer.")
    weight = output.weight.detach()
    kept_ids = kept_ids.to(weight.device)
    rows = nn.Linear(weight.shape[1], kept_ids.numel(), bias=output.bias is not None,
                     device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        rows.weight.copy_(weight[kept_ids])
        if output.bias is not None:
            rows.bias.copy_(output.bias.detach()[kept_ids])
    rows.requires_grad_(False)
    return PackedLinear(rows) if isinstance(output, PackedLinear) else rows


class ReducedVocabularyCache(CachedModel):
    """An independent draft's cache whose logits come from the kept rows only: the draft's decoder runs as
    usual, the output layer reads K rows instead of the vocabulary, every other id gets -inf (or, for
    SMC-SD, a shared share ``off_mass`` of the probability)."""

    def __init__(self, drafter: IndependentDrafter, off_mass: float = 0.0):
        super().__init__(drafter.model, drafter.vocab_size)
        self.decoder = drafter.model.get_decoder()
        self.drafter, self.off_mass = drafter, off_mass

    def _run(self, token_ids: torch.Tensor, output_hidden_states: bool):
        hidden = self.decoder(input_ids=token_ids, cache=self.cache, use_cache=True).last_hidden_state
        logits = full_vocabulary_logits(self.drafter.output_layer(hidden), self.drafter.kept_ids, self.vocab_size,
                                        self.off_mass)
        return logits, hidden


def active_engine(pair):
    """The engine the pair's target runs on in a run: its llama.cpp engine (``pair.target_engine``,
    target_engine.py) unless it has none or the drafter reads the target's hidden states (llama.cpp's are not
    read); None means torch. AR and the verify passes of one pair always get the same engine."""
    engine = getattr(pair, "target_engine", None)
    drafter = getattr(pair, "drafter", None)
    if engine is None or (drafter is not None and drafter.reads_target_features):
        return None
    return engine


def engine_label(pair) -> str:
    """What the page's model line says about the target's engine."""
    engine = active_engine(pair)
    if engine is not None:
        return engine.describe()
    if getattr(pair, "target_engine", None) is not None:
        return "torch (the drafter reads the target's hidden states, which llama.cpp does not give)"
    return "torch"


def target_cache(pair, keep_features: bool = False):
    """A fresh cache of the pair's target on its engine (``active_engine``)."""
    engine = active_engine(pair)
    if engine is not None and not keep_features:
        return engine.new_cache()
    return CachedModel(pair.target, pair.vocab_size, keep_features=keep_features)


def new_caches(pair, full_support: bool = False):
    """The target's cache and the drafter's cache for one run. A drafter that reads the target's
    features gets them recorded by the target cache. ``full_support``: the drafter's q must be > 0 on
    every id (SMC-SD's proposal)."""
    drafter = pair.drafter
    target = target_cache(pair, keep_features=drafter.reads_target_features)
    return target, drafter.new_cache(target, full_support)


def valid_drafter_name(name: str) -> bool:
    """Names for comparing drafters on one pair: small, small-N (its N most frequent ids), head, head-N,
    head-all, self-int4, self-int8 (the target's own weights), gguf (its GGUF file run by llama.cpp)."""
    return kind_for_name(name) is not None


def load_drafter(pair, name: str, head_dir=None):
    """A drafter by name, bound to the pair's target (the head folder defaults to the embedded one);
    ValueError saying why when it cannot be built."""
    kind = kind_for_name(name)
    if kind is None:
        raise ValueError(f"Unknown drafter {name!r}: use {all_names_text()}.")
    return kind.build(pair, name, head_dir)


def small_drafter(pair, name: str) -> IndependentDrafter:
    """The pair's independent draft model (``small``), or its N most frequent ids (``small-N``)."""
    if pair.draft is None:
        raise ValueError(f"The drafter '{name}' needs an independent draft model in the pair.")
    if name == "small":
        return IndependentDrafter(pair.draft, pair.vocab_size, pair.draft_model_id)
    return reduced_vocabulary_drafter(pair, int(name[len("small-"):]))


def head_drafter(pair, name: str, head_dir=None):
    """The feature head (``head``, ``head-N``, ``head-all``): ``head_dir``'s, else the embedded one."""
    from .feature_head import FeatureHeadDrafter
    try:
        head_dir, head_name = (str(head_dir), str(head_dir)) if head_dir else (
            str(embedded.embedded_head_dir()), embedded.EMBEDDED_HEAD_LABEL)
    except embedded.EmbeddedModelMissing as missing:
        raise ValueError(str(missing)) from None
    kept = "all" if name == "head-all" else (int(name[5:]) if name.startswith("head-") else None)
    shown = head_name if kept is None else f"{head_name} [{name}]"
    return FeatureHeadDrafter.load(head_dir, pair.target, pair.vocab_size, shown, kept=kept)


def self_drafter(pair, name: str) -> SelfQuantizedDrafter:
    """self-int4 / self-int8: the pair's target with its linear layers quantized (seconds, nothing stored).
    Always over the whole vocabulary: drafting from the 16,384 most frequent ids cut its cost per token by
    6% (int8) to 27% (int4) but its first-token agreement from 0.96 to 0.82 (int8) and 0.90 to 0.79 (int4)
    (benchmarks/results/drafter-comparison/self-drafters.md)."""
    try:
        return SelfQuantizedDrafter.from_target(pair.target, pair.vocab_size, name, pair.target_id)
    except QuantizationUnavailable as missing:
        raise ValueError(str(missing)) from None


def gguf_drafter_for(pair) -> GGUFDrafter:
    """gguf: the pair's GGUF file (``kinds.gguf_path``) loaded by llama.cpp and checked against the target's
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


def draft_folder(pair) -> str:
    """Where the pair's draft model was loaded from (its frequent_ids.json lives there)."""
    return getattr(pair.draft.config, "_name_or_path", "")


MEASURED_DEFAULTS_FILE = "measured_defaults.json"


def measured_defaults(pair) -> dict:
    """The draft folder's ``measured_defaults.json`` ({} without one, or when it cannot be read)."""
    folder = draft_folder(pair) if pair.draft is not None else ""
    path = Path(folder) / MEASURED_DEFAULTS_FILE
    if not folder or not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def measured_drafter(pair, key: str) -> dict:
    """What the benchmark measured for one drafter of this pair ({"gamma": {"cpu": 5}, "cost": {"cpu": 0.55},
    "agreement": 0.97}), from ``drafters`` in measured_defaults.json; the independent draft's fixed length
    is also the file's top-level ``gamma``."""
    record = measured_defaults(pair)
    entry = (record.get("drafters") or {}).get(key) or {}
    if key == "small" and "gamma" in record:
        entry = {**entry, "gamma": record["gamma"]}
    return entry if isinstance(entry, dict) else {}


def drafter_key(drafter) -> str:
    """A drafter object's name in the page's list and in measured_defaults.json: small, head, self-int8,
    self-int4, gguf (``kinds.KINDS``)."""
    return kind_of_drafter(drafter).key


def measured_settings(pair, key: str, method: str) -> dict:
    """The settings a method starts with for this drafter ("settings": {"pacer": {"block_size": 1}} in its
    measured_defaults.json entry): the app's controls and the bench's @drafter rows use them unless chosen."""
    settings = (measured_drafter(pair, key).get("settings") or {}).get(method) or {}
    return dict(settings) if isinstance(settings, dict) else {}


def measured_gamma(pair) -> int | None:
    """The fixed draft length the benchmark measured fastest for this pair's drafter on this kind of device
    (``measured_defaults.json`` in the draft's folder: {"gamma": {"cpu": 2}, "drafters": {"self-int8":
    {"gamma": {"cpu": 5}}}, "source": ...}), or None when nothing was measured for this drafter."""
    try:
        gamma = (measured_drafter(pair, drafter_key(pair.drafter)).get("gamma") or {}).get(torch.device(pair.device).type)
    except AttributeError:
        return None
    return int(gamma) if isinstance(gamma, int) and gamma >= 1 else None


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


@contextlib.contextmanager
def drafter_swapped(pair, drafter):
    """Decode with another drafter inside the block, then restore the pair's own (the name goes with it,
    so a pre-verifier trained for that drafter is found)."""
    saved = pair.drafter, pair.draft_id
    pair.drafter, pair.draft_id = drafter, drafter.name
    try:
        yield
    finally:
        pair.drafter, pair.draft_id = saved


__all__ = ["active_engine", "engine_label", "target_cache", "IndependentDrafter", "SelfQuantizedDrafter", "GGUFDrafter", "KINDS", "kind_for_key", "new_caches", "load_drafter", "drafter_swapped",
           "valid_drafter_name", "all_names_text", "reduced_vocabulary_drafter", "SELF_DRAFTERS", "drafter_key", "measured_drafter", "measured_gamma",
           "measured_settings"]
