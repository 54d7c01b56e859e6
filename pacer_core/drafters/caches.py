"""The two caches a run holds, the target's and its drafter's (``new_caches``): the target's on its engine
(``llama.engine.target_cache``, or the graphed engine when asked: ``run_target_cache``), recording its hidden states
for a drafter that reads them."""
from __future__ import annotations

from .. import graphed
from ..kvcache import ModelCache
from ..llama.engine import active_engine, target_cache


def run_target_cache(target, drafter, keep_features: bool = False) -> ModelCache:
    """A fresh cache of the pair's target for a run with ``drafter`` (None: none): on its engine
    (``llama.engine.target_cache``), except that a torch target runs on the graphed engine when the process asked
    for it (``graphed.requested``: PACER_GRAPHED=1) and the engine can run it exactly (``graphed.unsupported``)."""
    if graphed.requested() and active_engine(target, drafter) is None and not graphed.unsupported(target.model):
        return graphed.target_cache(target, keep_features)
    return target_cache(target, drafter, keep_features=keep_features)


def new_caches(target, drafter, full_support: bool = False) -> tuple[ModelCache, ModelCache]:
    """The target's cache and ``drafter``'s cache for one run (both ``kvcache.ModelCache``; the target's on its
    engine, ``run_target_cache``). A drafter that reads the target's features gets them recorded by the
    target cache. ``full_support``: the drafter's q must be > 0 on every id (SMC-SD's proposal). With the graphed
    engine asked for, a drafter whose cache is a plain causal LM's runs there too (``graphed.draft_cache``)."""
    target_cache = run_target_cache(target, drafter, keep_features=drafter.reads_target_features)
    draft = drafter.new_cache(target_cache, full_support)
    return target_cache, graphed.draft_cache(draft) if graphed.requested() else draft
