"""The graphed engine: the torch target's and its drafters' calls over static KV caches, replayed from CUDA graphs
on a GPU (at batch 1 an eager step is bound by kernel launches, docs/architecture.md "The graphed engine"). Its one
home, as llama.cpp's is ``pacer_core/llama/``:

- ``static_kv``: the static KV store (preallocated buffers written in place, stale entries masked by position);
- ``graphs``: ``GraphPool`` (one capture per shape at first use, eager fallback with the reason) and the CUDA
  capturer, the only CUDA-specific code;
- ``engine``: ``GraphedEngine``, one per model and process (slots of buffers and graphs that outlive a run);
- ``cache``: ``GraphedCache``, a run's ``kvcache.ModelCache`` over a slot.

Asked for with ``PACER_GRAPHED=1`` (off by default until a GPU run has measured it): then the torch engine's target
cache and any drafter whose cache is a plain ``kvcache.CachedModel`` (the independent draft model, the module-tree
self-quantized copy) run here (``drafters.caches`` asks ``target_cache`` and ``draft_cache``), unless the model is
one the engine cannot run exactly (``unsupported``: an attention without explicit masks, sliding windows). On a CPU the
static caches run eagerly (graphs need CUDA): what the tests check there is that the static path returns the
dynamic cache's tokens."""
from __future__ import annotations

import os

from ..kvcache import CachedModel, ModelCache
from .cache import GraphedCache
from .engine import ENGINE_ATTRIBUTE, GraphedEngine, default_capacity, engine_for, install_engine
from .graphs import GraphPool, StepShape, cuda_capturer

GRAPHED_ENV = "PACER_GRAPHED"

__all__ = ["GRAPHED_ENV", "GraphPool", "GraphedCache", "GraphedEngine", "StepShape", "capture_line", "cuda_capturer",
           "default_capacity", "draft_cache", "engine_for", "install_engine", "requested", "target_cache",
           "unsupported"]


def requested() -> bool:
    """Whether this process asked for the graphed engine (``PACER_GRAPHED``: 1, true, on or yes)."""
    return os.environ.get(GRAPHED_ENV, "").strip().lower() in ("1", "true", "on", "yes")


EXACT_ATTENTION = ("sdpa", "eager")     # attention implementations that apply an explicit 4D mask as given


def unsupported(model) -> str | None:
    """Why the graphed engine cannot run ``model`` exactly (None: it can): its full-attention 4D mask needs an
    attention that takes such a mask, and layers that all attend to every earlier position (no sliding window);
    a graph replays one device's kernels, so the weights must all be on one device (not split as
    ``device_map="auto"`` may split them: a step would copy between devices, which a capture refuses)."""
    parameters = getattr(model, "parameters", None)
    devices = {str(parameter.device) for parameter in parameters()} if callable(parameters) else set()
    if len(devices) > 1:
        return f"its weights are split over {len(devices)} devices ({', '.join(sorted(devices))})"
    config = getattr(model, "config", None)
    attention = getattr(config, "_attn_implementation", None) or "sdpa"
    if attention not in EXACT_ATTENTION:
        return f"its attention ({attention}) does not take an explicit 4D mask"
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        if any(kind != "full_attention" for kind in layer_types):
            return "some of its layers attend over a sliding window"
    elif getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "its layers attend over a sliding window"
    return None


def target_cache(target, keep_features: bool = False) -> GraphedCache:
    """A fresh graphed cache of the pair's torch target."""
    return GraphedCache(engine_for(target.model), target.vocab_size, keep_features=keep_features)


def draft_cache(cache: ModelCache) -> ModelCache:
    """A drafter's cache on the graphed engine when it is a plain ``CachedModel`` over a causal LM (the same model
    and logit width), else ``cache`` unchanged: caches with their own step (the lean self-quantized decoder, the
    feature head, a reduced vocabulary, llama.cpp) keep it."""
    if type(cache) is not CachedModel or cache.keep_features or unsupported(cache.model):
        return cache
    return GraphedCache(engine_for(cache.model), cache.vocab_size)


def capture_line(*models) -> str:
    """What a model line says of these models' graphs in this process: "graphs captured in X s (N shapes)", why
    they run eagerly, or that none ran on the graphed engine yet."""
    engines = [getattr(model, ENGINE_ATTRIBUTE, None) for model in models]
    engines = [engine for engine in engines if engine is not None and engine.slots]
    if not engines:
        return "graphed engine: not used yet in this process"
    reasons = [engine.fallback_reason for engine in engines if engine.fallback_reason]
    if reasons:
        return f"graphed engine: eager after a failed capture ({reasons[0]})"
    if not any(engine.graphs_on for engine in engines):
        return engines[0].describe()
    seconds = sum(engine.capture_seconds for engine in engines)
    return f"graphs captured in {seconds:.2f} s ({sum(engine.captures for engine in engines)} shapes)"
