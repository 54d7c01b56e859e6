"""The settings each drafter starts with, as the benchmark measured them: readers of the pair's
``measured_defaults.json`` (in the independent draft model's folder). The app's controls, the bench's
``@drafter`` rows and the library start from these unless a setting is chosen; without the file (or an entry)
every reader returns nothing and the defaults of ``settings.FIELDS`` apply.

The file: {"gamma": {"cpu": 2}, "drafters": {"self-int8": {"gamma": {"cpu": 5}, "cost": {"cpu": 0.55},
"agreement": 0.97, "settings": {"pacer": {"block_size": 1}}}}, "source": ...}; entries are keyed by drafter key
(``kinds``), the top-level ``gamma`` is the independent draft's (``small``) unless its entry has one.

An entry's figures are those of the pair's default engine on that kind of device (on a CPU with the embedded
target: the target run by llama.cpp, where a target step is cheap). Its ``cpu_torch_target`` part holds what
differs when the target verifies on torch on a CPU (no llama-cpp-python, ``--target-engine torch``, a hub
target, or a drafter that reads the target's hidden states): a step costs ~2.5x more there, so each drafter's cost
per step, fastest length and PACER settings differ. ``measured_drafter`` lays it over the entry, figure by figure."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..llama.engine import active_engine
from .kinds import drafter_key

MEASURED_DEFAULTS_FILE = "measured_defaults.json"
TORCH_TARGET_PART = "cpu_torch_target"   # an entry's figures for a target verifying on torch on a CPU


def measured_defaults(target) -> dict:
    """The pair's ``measured_defaults.json`` (``Target.measured_file``, which the loader finds in the independent
    draft model's folder); {} without one, or when it cannot be read."""
    chosen = getattr(target, "measured_file", "")
    path = Path(chosen)
    if not chosen or not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def measured_drafter(target, drafter, key: str) -> dict:
    """What the benchmark measured for drafter ``key`` of this pair (its entry under ``drafters``), as runs drafting
    with ``drafter`` see it (``target_verifies_on_torch_cpu``); the independent draft's fixed length is also the
    file's top-level ``gamma``."""
    record = measured_defaults(target)
    entry = (record.get("drafters") or {}).get(key) or {}
    if not isinstance(entry, dict):
        return {}
    if key == "small" and "gamma" in record and "gamma" not in entry:
        entry = {**entry, "gamma": record["gamma"]}
    overlay = entry.get(TORCH_TARGET_PART)
    if isinstance(overlay, dict) and target_verifies_on_torch_cpu(target, drafter, key):
        entry = laid_over(entry, overlay)
    return {name: value for name, value in entry.items() if name != TORCH_TARGET_PART}


def laid_over(entry: dict, overlay: dict) -> dict:
    """``entry`` with ``overlay``'s figures over its own: keyed figures (by device kind, by method) key by key."""
    merged = dict(entry)
    for name, figure in overlay.items():
        base = merged.get(name)
        merged[name] = {**base, **figure} if isinstance(base, dict) and isinstance(figure, dict) else figure
    return merged


def target_verifies_on_torch_cpu(target, drafter, key: str) -> bool:
    """Whether drafter ``key``'s runs verify with the target on torch on a CPU: for ``drafter`` (the one the runs
    draft with), where ``llama.engine.active_engine`` runs them; for another key, whether the pair has a llama.cpp
    engine at all."""
    if torch.device(target.device).type != "cpu":
        return False
    if drafter is not None and drafter_key(drafter) == key:
        return active_engine(target, drafter) is None
    return getattr(target, "engine", None) is None


def measured_settings(target, drafter, key: str, method: str) -> dict:
    """The settings a method starts with for drafter ``key`` (its entry's "settings": {"pacer": {...}}), in runs
    drafting with ``drafter``."""
    settings = (measured_drafter(target, drafter, key).get("settings") or {}).get(method) or {}
    return dict(settings) if isinstance(settings, dict) else {}


def method_starts(target, drafter, method: str, key: str = "") -> dict:
    """Where ``method``'s settings start in runs drafting with ``drafter`` (measured as drafter ``key``, default its
    own key): the entry's settings for the method and, for fixed SD, the measured fixed length; {} where nothing was
    measured. The library's and the bench's front doors lay the caller's values over these
    (``request.build_request``, ``request.row_requests``), as the page's controls start from them
    (``ui.starts.drafter_starts``), so a run that chooses nothing runs what the page runs by default."""
    starts = measured_settings(target, drafter, key or drafter_key(drafter), method)
    gamma = measured_gamma(target, drafter) if method == "fixed" and "gamma" not in starts else None
    return starts | ({"gamma": gamma} if gamma else {})


def measured_gamma(target, drafter) -> int | None:
    """The fixed draft length the benchmark measured fastest for ``drafter`` on this pair's kind of device,
    or None when nothing was measured for this drafter."""
    try:
        entry = measured_drafter(target, drafter, drafter_key(drafter))
        gamma = (entry.get("gamma") or {}).get(torch.device(target.device).type)
    except AttributeError:
        return None
    return int(gamma) if isinstance(gamma, int) and gamma >= 1 else None
