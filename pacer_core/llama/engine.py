"""Which engine runs a pair's target, torch (``kvcache.CachedModel``) or llama.cpp (``target.LlamaTarget``): chosen
once when the pair loads (``choose_engine``), then for each run (``active_engine``: a drafter that reads the
target's hidden states keeps the torch target, llama.cpp's are not read). AR and the verify passes of runs with one
drafter always get the same engine (``target_cache``)."""
from __future__ import annotations

from typing import Protocol

import torch

from ..kvcache import CachedModel, ModelCache
from .availability import embedded_gguf_unavailable
from .target import LlamaTarget

ENGINES = ("auto", "torch", "llama.cpp")
ENGINE_ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "llama_cpp": "llama.cpp", "gguf": "llama.cpp"}


class ReadsFeatures(Protocol):
    reads_target_features: bool


class TargetSide(Protocol):
    """What the choice reads of a ``models.Target``: its torch model and the llama.cpp engine loaded for it (None:
    none)."""
    model: torch.nn.Module
    vocab_size: int
    engine: LlamaTarget | None


def parse_engine(text) -> str:
    """``auto``, ``torch`` or ``llama.cpp`` (a few spellings of llama.cpp accepted); ValueError otherwise."""
    key = str(text or "auto").strip().lower()
    key = ENGINE_ALIASES.get(key, key)
    if key not in ENGINES:
        raise ValueError(f"Unknown target engine '{text}': use auto, torch or llama.cpp.")
    return key


def engine_unavailable(is_embedded_target: bool, device_type: str, dtype_name: str) -> str | None:
    """Why the llama.cpp engine cannot run this target (None: it can)."""
    if device_type != "cpu":
        return f"llama.cpp runs the target on the CPU; this target is on {device_type}"
    if dtype_name != "float32":
        return f"the llama.cpp engine runs the target in float32 (asked: {dtype_name})"
    if not is_embedded_target:
        return "only the embedded target has a GGUF of its own weights for llama.cpp to run"
    return embedded_gguf_unavailable()          # no llama-cpp-python, no file, or a build that fails its proof


def choose_engine(requested: str, is_embedded_target: bool, device_type: str, dtype_name: str) -> str:
    """The engine a pair gets: ``auto`` is llama.cpp where it can run the target (the embedded target in float32 on
    a CPU with llama-cpp-python: measured fastest there), torch otherwise. An explicit llama.cpp that cannot run
    raises ValueError saying why."""
    requested = parse_engine(requested)
    if requested == "torch":
        return "torch"
    why_not = engine_unavailable(is_embedded_target, device_type, dtype_name)
    if why_not is None:
        return "llama.cpp"
    if requested == "llama.cpp":
        raise ValueError(f"The llama.cpp target engine is not available: {why_not}.")
    return "torch"


def active_engine(target: TargetSide, drafter: ReadsFeatures | None) -> LlamaTarget | None:
    """The engine the pair's target runs on in a run with ``drafter`` (the drafter of the runs compared with it;
    None: none): its llama.cpp engine (``target.engine``) unless it has none or the drafter reads the target's
    hidden states (llama.cpp's are not read); None means torch. AR and the verify passes of runs with one drafter
    always get the same engine."""
    engine = getattr(target, "engine", None)
    if engine is None or (drafter is not None and drafter.reads_target_features):
        return None
    return engine


def engine_label(target: TargetSide, drafter: ReadsFeatures | None) -> str:
    """What the page's model line says about the target's engine in runs with ``drafter``."""
    engine = active_engine(target, drafter)
    if engine is not None:
        return engine.describe()
    if getattr(target, "engine", None) is not None:
        return "torch (the drafter reads the target's hidden states, which llama.cpp does not give)"
    return "torch"


def target_cache(target: TargetSide, drafter: ReadsFeatures | None, keep_features: bool = False) -> ModelCache:
    """A fresh cache of the pair's target on its engine in runs with ``drafter`` (``active_engine``)."""
    engine = active_engine(target, drafter)
    if engine is not None and not keep_features:
        return engine.new_cache()
    return CachedModel(target.model, target.vocab_size, keep_features=keep_features)
