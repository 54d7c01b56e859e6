"""The target a process loads when told nothing else (``target_from_env``): the settings of $PACER_TARGET and its
siblings, the embedded target when none is set, except on a GPU: there a target and drafter from the hub chosen for
the GPU's memory (``HubPair``, ``GPU_DEFAULT_PAIRS``, ``load_gpu_default``), with the embedded pair as the fallback."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch

from . import embedded
from .drafters.loaded import LoadedDrafters
from .models import ModelLoadError, Target, default_device, load_target

SETTINGS_FROM_ENV = {"target_source": "PACER_TARGET", "draft": "PACER_DRAFT", "device": "PACER_DEVICE",
                     "dtype": "PACER_DTYPE", "draft_dtype": "PACER_DRAFT_DTYPE", "draft_vocab": "PACER_DRAFT_VOCAB",
                     "draft_gguf": "PACER_DRAFT_GGUF", "target_engine": "PACER_TARGET_ENGINE"}


@dataclass(frozen=True)
class HubPair:
    """A target and drafter from the hub that pay on a GPU with at least ``min_gb`` of memory."""
    min_gb: float
    target: str
    draft: str
    download_gb: float     # both in bfloat16, what the first start downloads


# Checked from the largest: SmolLM2-1.7B with its 135M (~3.7 GB) below ~22 GB (T4 16 GB); Qwen2.5-7B with its 0.5B
# (~16 GB) from a 24 GB card (L4, A10G: 24.1e9 bytes) up, with room for the KV caches (README, "Hardware").
GPU_DEFAULT_PAIRS = (HubPair(22.0, "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", 16.2),
                     HubPair(0.0, "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", 3.7))


def target_from_env(**overrides) -> tuple[Target, LoadedDrafters]:
    """``load_target`` with PACER_TARGET / PACER_DRAFT / PACER_DEVICE / PACER_DTYPE / PACER_DRAFT_DTYPE /
    PACER_DRAFT_VOCAB / PACER_DRAFT_GGUF / PACER_TARGET_ENGINE as defaults (``overrides`` win where not None). With
    no target configured the target is the embedded one, except on a GPU: there the hub pair chosen for its memory
    (``load_gpu_default``)."""
    settings = {name: os.environ.get(variable) or None for name, variable in SETTINGS_FROM_ENV.items()}
    settings.update({k: v for k, v in overrides.items() if v is not None})
    if settings["target_source"] is None:
        device = torch.device(settings["device"]) if settings["device"] else default_device()
        if device.type == "cuda" and not settings.get("device_map"):
            return load_gpu_default(settings, device)
    settings["target_source"] = settings["target_source"] or embedded.EMBEDDED
    settings["draft"] = settings["draft"] or embedded.EMBEDDED
    return load_target(**settings)


def gpu_default_pair(memory_gb: float) -> HubPair:
    """The largest default pair the GPU's memory (decimal GB) holds."""
    return next(hub_pair for hub_pair in GPU_DEFAULT_PAIRS if memory_gb >= hub_pair.min_gb)


def gpu_memory_gb(device: torch.device) -> float:
    """Total memory of the CUDA device in decimal GB; 0 when it cannot be read (the smallest pair then)."""
    try:
        return torch.cuda.get_device_properties(device.index or 0).total_memory / 1e9
    except (RuntimeError, AssertionError, AttributeError) as failure:
        print(f"[pacer] could not read the GPU's memory ({failure}); choosing the smallest GPU pair",
              file=sys.stderr, flush=True)
        return 0.0


def load_gpu_default(settings: dict, device: torch.device) -> tuple[Target, LoadedDrafters]:
    """The hub pair for this GPU's memory (a configured drafter is kept); when it cannot load (the hub out of
    reach, say), the embedded pair on the same device with a one-line ``load_note`` saying why."""
    memory = gpu_memory_gb(device)
    chosen = gpu_default_pair(memory)
    draft = settings["draft"] if settings["draft"] not in (None, embedded.EMBEDDED) else chosen.draft
    print(f"[pacer] GPU with {memory:.1f} GB and no target set: loading {chosen.target} with {draft} as drafter "
          f"from the hub (~{chosen.download_gb:.1f} GB to download the first time; progress below)",
          file=sys.stderr, flush=True)
    try:
        return load_target(**(settings | {"target_source": chosen.target, "draft": draft, "device": device}))
    except (ModelLoadError, torch.cuda.OutOfMemoryError) as failure:
        reason = (str(failure).strip().splitlines() or [type(failure).__name__])[0].rstrip(".")
        note = (f"The GPU default pair ({chosen.target} with {draft}) could not load: {reason}. "
                "Serving the embedded pair.")
        print(f"[pacer] {note}", file=sys.stderr, flush=True)
    return load_target(**(settings | {"target_source": embedded.EMBEDDED, "draft": embedded.EMBEDDED,
                                      "device": device, "load_note": note}))
