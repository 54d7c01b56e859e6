"""The two caches a run holds, the target's and its drafter's (``new_caches``): the target's on its engine
(``llama.engine.target_cache``), recording its hidden states for a drafter that reads them."""
from __future__ import annotations

from ..kvcache import ModelCache
from ..llama.engine import target_cache


def new_caches(pair, drafter, full_support: bool = False) -> tuple[ModelCache, ModelCache]:
    """The target's cache and ``drafter``'s cache for one run (both ``kvcache.ModelCache``; the target's on its
    engine, ``llama.engine.target_cache``). A drafter that reads the target's features gets them recorded by the
    target cache. ``full_support``: the drafter's q must be > 0 on every id (SMC-SD's proposal)."""
    target = target_cache(pair, drafter, keep_features=drafter.reads_target_features)
    return target, drafter.new_cache(target, full_support)
