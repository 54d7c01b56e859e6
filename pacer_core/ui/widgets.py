"""Pieces every tab of the page builds with: a setting's control (from ``settings.FIELDS``), the ZeroGPU decorator
for model-running handlers, and where the Explain tab's text lives. Kept apart from ``layout`` so the tabs it
assembles (Replay, Atlas) can use them without importing the page that imports them."""
from __future__ import annotations

import os
from pathlib import Path

import gradio as gr

from ..settings import FIELD_BY_NAME, Limits

EXPLAIN_PATH = Path(__file__).resolve().parent / "explain.md"

try:  # On a Hugging Face ZeroGPU Space, decorate the model-running handlers; unchanged elsewhere.
    import spaces  # type: ignore

    gpu = spaces.GPU(duration=int(os.environ.get("PACER_GPU_DURATION", "120")))
except ImportError:  # pragma: no cover - the usual case off Spaces
    def gpu(function):
        return function


def control(name: str, limits: Limits, value=None, **extra):
    """The control of one setting: label, range, step, help and starting value from settings.FIELDS."""
    field = FIELD_BY_NAME[name]
    high = field.high_for(limits)
    if value is None:
        value = field.app_value if field.app_value is not None else field.default
    if field.kind == "int" and high > 10_000:       # seed, top-k: typed, checked by the validator
        return gr.Number(value=value, precision=0, label=field.label, info=field.help, **extra)
    return gr.Slider(field.low, high, value=min(value, high), step=field.step, label=field.label, info=field.help,
                     **extra)
