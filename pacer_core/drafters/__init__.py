"""Drafters: what proposes tokens for the target to verify.

Every drafter hands each decoding run a *cache* with one interface (``kvcache.CachedModel``'s: feed
tokens and get logits over the full vocabulary, crop to a length, reorder batch rows), so fixed SD,
PACER, the oracle and SMC-SD run on any kind unchanged. Two kinds:

* ``independent``: a small causal LM with its own KV cache (any hub or local draft; the baseline for
  transformers' assisted generation).
* ``feature-head``: one decoder layer that reads the target's own hidden state (EAGLE, Li et al. 2024,
  arXiv 2401.15077), optionally with a reduced output vocabulary (FR-Spec, Zhao et al. 2025,
  arXiv 2502.14856); see ``feature_head.py``."""
from __future__ import annotations

import contextlib

from ..kvcache import CachedModel


class IndependentDrafter:
    """A separate causal LM that shares the target's tokenizer."""

    kind = "independent"
    reads_target_features = False

    def __init__(self, model, vocab_size: int, name: str):
        self.model, self.vocab_size, self.name = model, vocab_size, name
        self.hidden_size = int(getattr(model.config, "hidden_size", 0))

    def new_cache(self, target_cache, full_support: bool = False) -> CachedModel:
        return CachedModel(self.model, self.vocab_size)   # a causal LM's softmax already has full support

    def describe(self) -> dict:
        parameter = next(self.model.parameters())
        return {"kind": self.kind, "name": self.name, "dtype": str(parameter.dtype).replace("torch.", ""),
                "parameters": sum(p.numel() for p in self.model.parameters())}


def new_caches(pair, full_support: bool = False):
    """The target's cache and the drafter's cache for one run. A drafter that reads the target's
    features gets them recorded by the target cache. ``full_support``: the drafter's q must be > 0 on
    every id (SMC-SD's proposal)."""
    drafter = pair.drafter
    target = CachedModel(pair.target, pair.vocab_size, keep_features=drafter.reads_target_features)
    return target, drafter.new_cache(target, full_support)


def valid_drafter_name(name: str) -> bool:
    """Names for comparing drafters on one pair: small, head, head-N (its N most frequent ids), head-all."""
    return name in ("small", "head", "head-all") or (name.startswith("head-") and name[5:].isdigit())


def load_drafter(pair, name: str, head_dir=None):
    """A drafter by name, bound to the pair's target (the head folder defaults to the embedded one)."""
    from .feature_head import FeatureHeadDrafter
    if not valid_drafter_name(name):
        raise ValueError(f"Unknown drafter {name!r}: use small, head, head-N or head-all.")
    if name == "small":
        if pair.draft is None:
            raise ValueError("The drafter 'small' needs an independent draft model in the pair.")
        return IndependentDrafter(pair.draft, pair.vocab_size, pair.draft_model_id)
    from ..models import ModelLoadError, resolve_source
    try:
        head_dir, head_name = (str(head_dir), str(head_dir)) if head_dir else resolve_source("embedded-head", "draft")
    except ModelLoadError as missing:
        raise ValueError(str(missing)) from None
    kept = "all" if name == "head-all" else (int(name[5:]) if name.startswith("head-") else None)
    shown = head_name if kept is None else f"{head_name} [{name}]"
    return FeatureHeadDrafter.load(head_dir, pair.target, pair.vocab_size, shown, kept=kept)


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


__all__ = ["IndependentDrafter", "new_caches", "load_drafter", "drafter_swapped", "valid_drafter_name"]
