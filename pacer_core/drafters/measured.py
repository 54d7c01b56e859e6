"""The settings each drafter starts with, as the benchmark measured them: readers of the draft folder's
``measured_defaults.json``. The app's controls, the bench's ``@drafter`` rows and the library start from these
unless a setting is chosen; without the file (or an entry) every reader returns nothing and the defaults of
``settings.FIELDS`` apply.

The file: {"gamma": {"cpu": 2}, "drafters": {"self-int8": {"gamma": {"cpu": 5}, "cost": {"cpu": 0.55},
"agreement": 0.97, "settings": {"pacer": {"block_size": 1}}}}, "source": ...}; entries are keyed by drafter key
(``kinds``), the top-level ``gamma`` is the independent draft's (``small``)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .builders import draft_folder
from .kinds import drafter_key

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
    """What the benchmark measured for one drafter of this pair (its entry under ``drafters``); the independent
    draft's fixed length is also the file's top-level ``gamma``."""
    record = measured_defaults(pair)
    entry = (record.get("drafters") or {}).get(key) or {}
    if key == "small" and "gamma" in record:
        entry = {**entry, "gamma": record["gamma"]}
    return entry if isinstance(entry, dict) else {}


def measured_settings(pair, key: str, method: str) -> dict:
    """The settings a method starts with for this drafter (its entry's "settings": {"pacer": {...}})."""
    settings = (measured_drafter(pair, key).get("settings") or {}).get(method) or {}
    return dict(settings) if isinstance(settings, dict) else {}


def measured_gamma(pair) -> int | None:
    """The fixed draft length the benchmark measured fastest for this pair's drafter on this kind of device,
    or None when nothing was measured for this drafter."""
    try:
        gamma = (measured_drafter(pair, drafter_key(pair.drafter)).get("gamma") or {}).get(torch.device(pair.device).type)
    except AttributeError:
        return None
    return int(gamma) if isinstance(gamma, int) and gamma >= 1 else None
