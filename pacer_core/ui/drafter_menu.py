"""The drafters the page offers for the loaded target: every entry of ``drafters.kinds.KINDS`` that can draft
for it here — the pair's independent draft (``small``), the feature head (``head``, for the embedded target),
the target's own weights in 8 and 4 bits (``self-int8``, ``self-int4``) and its GGUF file run by llama.cpp
(``gguf``, on a CPU). Each is built once, on first use, and kept for the life of the process; the
target is never reloaded. A choice is a drafter for the same pair, with the pre-verifier trained for it, if one
exists.

Memory: the small draft and the head are loaded with the pair (or on first use); each self-quantized copy
holds only its quantized linear weights and shares the rest with the target (``SelfQuantizedDrafter.describe``
gives its megabytes); the gguf drafter holds its file's weights and each pooled llama.cpp context its KV and
compute buffers, a few contexts kept for the next runs (figures: docs/drafters.md)."""
from __future__ import annotations

import sys
from pathlib import Path
import threading
import traceback
from dataclasses import dataclass

from ..compute_thread import on_compute_thread
from ..drafters import KINDS, SELF_DRAFTERS, drafter_key, entry_for_key, load_drafter, measured_drafter
from ..preverifier import confidence_rule, default_preverifier
from ..quantized_linear import INT4_GROUP_SIZE


@dataclass(frozen=True)
class DrafterOption:
    key: str             # a drafter key (drafters.kinds)
    description: str     # one line: what it is, size, cost per drafted token, agreement when measured


def describe_option(key: str, size: str, measured: dict, device_type: str) -> str:
    """``small · a separate small model · 16M parameters · c = 0.13 of a target step · agreement 0.39``; the cost
    measured inside runs (the cost rule's, by prompt length) where there is one, else a draft call's alone."""
    entry = entry_for_key(key)
    parts = [key, entry.words if entry else "drafter", size, cost_text(measured, device_type)]
    if measured.get("agreement") is not None:
        parts.append(f"agreement {measured['agreement']:.2f}")
    return " · ".join(parts)


def cost_text(measured: dict, device_type: str) -> str:
    """A drafted token's cost on this kind of device, in words: inside runs, in AR steps (the cost rule's, over the
    prompt lengths it was measured at) where measured so, else a draft call's alone, in target steps."""
    record = (measured.get("pacer_costs") or {}).get(device_type)
    if isinstance(record, dict) and "draft_per_token" in record:
        by_length = [(entry["prompt_tokens"], entry["draft_per_token"]) for entry in record.get("by_prompt_length", ())]
        if len(by_length) > 1:
            costs, lengths = sorted(cost for _, cost in by_length), sorted(length for length, _ in by_length)
            return (f"c = {costs[0]:.2f}–{costs[-1]:.2f} of an AR step in a run on {device_type} "
                    f"(prompts of {lengths[0]}–{lengths[-1]} tokens)")
        return f"c = {record['draft_per_token']:.2f} of an AR step in a run on {device_type}"
    cost = (measured.get("cost") or {}).get(device_type)
    return f"c = {cost:.2f} of a target step on {device_type}" if cost else "cost not measured here"


def size_text(drafter) -> str:
    described = drafter.describe()
    if "quantized_megabytes" in described:
        return f"{described['quantized_megabytes']:.0f} MB of int{described['bits']} weights"
    if "file_megabytes" in described:
        return f"{described['file_megabytes']:.0f} MB {described['dtype'].split()[-1]} file"
    return f"{described.get('parameters', 0) / 1e6:.1f}M parameters"


def estimated_size(target, drafters, key: str) -> str:
    """A drafter's size before it is built: a self-quantized copy stores bits/8 bytes per linear weight."""
    if key in SELF_DRAFTERS:
        bits = SELF_DRAFTERS[key]
        linear = sum(module.weight.numel() for module in target.model.modules()
                     if hasattr(module, "in_features") and hasattr(module, "weight"))
        per_weight = bits / 8 + (4 / INT4_GROUP_SIZE if bits == 4 else 0)    # int4: a bf16 scale and zero a group
        return f"≈{linear * per_weight / 2 ** 20:.0f} MB of int{bits} weights"
    if key == "gguf":
        from ..drafters import gguf_path
        path = gguf_path(target, drafters)
        return f"{Path(path).stat().st_size / 2 ** 20:.0f} MB file" if path and Path(path).exists() else "a GGUF file"
    return "loaded on first use"


class DrafterMenu:
    """Drafter key → a drafter for the pair, built on first use (thread-safe) and kept."""

    def __init__(self, target, drafters, preverifier=None):
        """``drafters``: what the loader built beside the target (``drafters.LoadedDrafters``), whose ``default`` is
        the page's own drafter; ``preverifier``: the one already loaded for it (found again when None)."""
        self.target, self.loaded_drafters = target, drafters
        self.default_key = drafter_key(drafters.default)
        self._drafter_by_key = {self.default_key: drafters.default}     # built so far, kept for the process
        self._preverifier_by_key: dict = {} if preverifier is None else {self.default_key: preverifier}
        self._lock = threading.Lock()
        self.unavailable = {entry.key: entry.unavailable(target, drafters)   # key -> why not (None: offered)
                            for entry in KINDS}
        self.keys = [entry.key for entry in KINDS if self.unavailable[entry.key] is None]
        if self.default_key not in self.keys:
            self.keys.insert(0, self.default_key)

    def left_out(self) -> dict[str, str]:
        """The kinds this page does not offer, each with why (shown under the menu and in the log)."""
        return {key: why for key, why in self.unavailable.items() if why and key not in self.keys}

    def drafter(self, key: str | None):
        """The drafter ``key`` names (None or "": the page's own). ValueError for a key the menu does not offer or
        a drafter that cannot be built."""
        key = key or self.default_key
        if key not in self.keys:
            why = self.unavailable.get(key)
            raise ValueError(f"The drafter '{key}' is not available here: {why}." if why else
                             f"Unknown drafter '{key}': this page offers {', '.join(self.keys)}.")
        with self._lock:
            if key not in self._drafter_by_key:
                self._drafter_by_key[key] = on_compute_thread(load_drafter, self.target, self.loaded_drafters, key)
            return self._drafter_by_key[key]

    def preverifier(self, key: str | None):
        """PACER's pre-verifier for the drafter: the layer trained for it, else the confidence rule (a broken
        layer file is reported in the log and replaced by the rule)."""
        key = key or self.default_key
        drafter = self.drafter(key)
        with self._lock:
            if key not in self._preverifier_by_key:
                try:
                    self._preverifier_by_key[key] = default_preverifier(self.target, drafter)
                except Exception:  # noqa: BLE001 - a broken optional layer must not stop the app
                    traceback.print_exc(file=sys.stderr)
                    self._preverifier_by_key[key] = confidence_rule(self.target, drafter)
            return self._preverifier_by_key[key]

    def built(self, key: str) -> bool:
        return key in self._drafter_by_key

    def options(self) -> list[DrafterOption]:
        """Every key with its one-line description (a drafter not built yet is described from its kind)."""
        device_type, own = self.target.device.type, self._drafter_by_key[self.default_key]
        options = []
        for key in self.keys:
            size = (size_text(self._drafter_by_key[key]) if key in self._drafter_by_key
                    else estimated_size(self.target, self.loaded_drafters, key))
            options.append(DrafterOption(key, describe_option(key, size, measured_drafter(self.target, own, key),
                                                              device_type)))
        return options
