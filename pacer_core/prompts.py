"""Prompt files: one JSON object a line with id, category and prompt (assets/prompts/*.jsonl)."""
from __future__ import annotations

import json
from pathlib import Path

from .settings import SettingsError


def load_prompts(path: str) -> list[dict]:
    prompts = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as bad:
            raise SettingsError(f"{path}:{number}: not valid JSON ({bad.msg}).") from None
        if not isinstance(record, dict) or not {"id", "category", "prompt"} <= set(record):
            raise SettingsError(f"{path}:{number}: each line needs id, category and prompt.")
        prompts.append(record)
    if not prompts:
        raise SettingsError(f"{path} holds no prompts.")
    return prompts
