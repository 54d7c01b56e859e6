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

from ..kvcache import CachedModel


class IndependentDrafter:
    """A separate causal LM that shares the target's tokenizer."""

    kind = "independent"
    reads_target_features = False

    def __init__(self, model, vocab_size: int, name: str):
        self.model, self.vocab_size, self.name = model, vocab_size, name
        self.hidden_size = int(getattr(model.config, "hidden_size", 0))

    def new_cache(self, target_cache) -> CachedModel:
        return CachedModel(self.model, self.vocab_size)

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name,
                "parameters": sum(p.numel() for p in self.model.parameters())}


def new_caches(pair, batch_prefix: list[int] | None = None):
    """The target's cache and the drafter's cache for one run. A drafter that reads the target's
    features gets them recorded by the target cache."""
    drafter = pair.drafter
    target = CachedModel(pair.target, pair.vocab_size, keep_features=drafter.reads_target_features)
    return target, drafter.new_cache(target)


__all__ = ["IndependentDrafter", "new_caches"]
