"""What the Atlas tab's buttons do, as ordinary functions (no Gradio): Run yields ``AtlasUpdate``s while the
prompts are decoded, Stop asks the run to end after the current prompt (what finished is kept), and a chosen
row gives the Live demo's values for its prompt.

Run decodes through ``pacer_core.atlas`` (the engine's ``api.run_request``, each drafter from the page's
``DrafterMenu``), shows the progress bar after every prompt, redraws the figures and tables at most every
``RENDER_INTERVAL_S`` and once at the end, then writes atlas.json, atlas.csv and report.md for download."""
from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Iterator

from ..atlas import AtlasPrompt, atlas_lane, build_atlas, load_atlas_prompts, run_prompts, write_atlas
from ..atlas.cli import BUILT_IN_PROMPTS
from ..drafters import drafter_key
from ..models import ModelLoadError
from ..settings import SettingsError
from .atlas_view import progress_html
from .downloads import DOWNLOADS
from .drafter_switch import drafter_context
from .page_types import AppContext

RENDER_INTERVAL_S = 5.0
MAX_PROMPTS = 200            # an uploaded file is cut to its first MAX_PROMPTS prompts
LIVE_SETTINGS = ("temperature", "seed", "max_new_tokens")


@dataclass(frozen=True)
class AtlasChoice:
    """The tab's controls for one run."""
    method: str = "pacer"
    drafter: str | None = None       # the page's drafter key; None: the pair's own
    compare: str | None = None       # a second drafter key, or None
    temperature: float = 0.0
    seed: int = 0
    max_new_tokens: int = 32
    measure_ar: bool = False
    prompts_path: str | None = None  # an uploaded JSONL; None: the built-in set


@dataclass
class AtlasSession:
    """One run of the tab: its prompts and choice (for the way back to the Live demo), its stop flag, its atlas."""
    choice: AtlasChoice
    prompts: list[AtlasPrompt]
    cancel: threading.Event = field(default_factory=threading.Event)
    atlas: dict | None = None


@dataclass
class AtlasUpdate:
    status: str | None = None         # the progress bar and its line (atlas_view.progress_html)
    atlas: dict | None = None         # set: redraw every figure and table from it
    session: AtlasSession | None = None
    files: list[str] | None = None    # atlas.json, atlas.csv, report.md
    warning: str | None = None


def drafter_keys(context: AppContext, choice: AtlasChoice) -> list[str]:
    default = context.drafter_menu.default_key if context.drafter_menu is not None else drafter_key(context.drafter)
    keys = [choice.drafter or default]
    if choice.compare and choice.compare != keys[0]:
        keys.append(choice.compare)
    return keys


def choice_prompts(choice: AtlasChoice) -> list[AtlasPrompt]:
    return load_atlas_prompts(choice.prompts_path or BUILT_IN_PROMPTS)[:MAX_PROMPTS]


def lanes_for(context: AppContext, choice: AtlasChoice, prompts: list[AtlasPrompt]) -> list:
    raw = {"temperature": choice.temperature, "seed": choice.seed, "max_new_tokens": choice.max_new_tokens}
    lanes = []
    for key in drafter_keys(context, choice):
        chosen = drafter_context(context, key)
        lanes.append(atlas_lane(chosen.target, chosen.drafter, chosen.preverifier, key, choice.method, raw, prompts,
                                context.limits))
    return lanes


def run(context: AppContext, choice: AtlasChoice,
        render_interval_s: float = RENDER_INTERVAL_S) -> Iterator[AtlasUpdate]:
    """Decode every prompt; an update after each (the atlas so far when a redraw is due), then the files."""
    try:
        prompts = choice_prompts(choice)
        lanes = lanes_for(context, choice, prompts)
    except (SettingsError, ModelLoadError, ValueError, OSError) as error:
        yield AtlasUpdate(status=progress_html(0, 1, str(error), "error"), warning=str(error))
        return
    session, runs, total = AtlasSession(choice, prompts), [], len(prompts)
    yield AtlasUpdate(status=progress_html(0, total, f"Decoding {total} prompts…"), session=session)
    keys, settings, last_render = [lane.drafter for lane in lanes], lanes[0].requests[0].settings, time.perf_counter()
    for prompt_run in run_prompts(prompts, lanes, choice.measure_ar, session.cancel):
        runs.append(prompt_run)
        update = AtlasUpdate(status=progress_html(len(runs), total, f"{len(runs)} of {total} prompts decoded…"))
        if time.perf_counter() - last_render >= render_interval_s:
            update.atlas = build_atlas(choice.method, keys, settings, prompts, runs)
            last_render = time.perf_counter()
        yield update
    session.atlas = build_atlas(choice.method, keys, settings, prompts, runs)
    stopped = len(runs) < total
    message = (f"Stopped: {len(runs)} of {total} prompts kept." if stopped else f"Done: {total} prompts.")
    out = write_atlas(DOWNLOADS.fresh("pacer-atlas-"), session.atlas)
    yield AtlasUpdate(status=progress_html(len(runs), total, message, "stopped" if stopped else "done"),
                      atlas=session.atlas,
                      session=session, files=[str(out / name) for name in ("atlas.json", "atlas.csv", "report.md")])


def guarded(updates: Iterator[AtlasUpdate]) -> Iterator[AtlasUpdate]:
    """An unexpected failure becomes an error line and a warning (and a log entry); the app keeps serving."""
    try:
        yield from updates
    except Exception as error:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        message = f"The atlas failed: {type(error).__name__}: {error}"
        yield AtlasUpdate(status=progress_html(0, 1, message, "error"), warning=message)


def stop(session: AtlasSession | None) -> None:
    """End the run after the prompt in flight (that prompt is dropped, the finished ones are kept)."""
    if session is not None:
        session.cancel.set()


def live_values(session: AtlasSession | None, prompt_number, offered_drafters=()) -> dict | None:
    """The Live demo's values for prompt ``prompt_number`` (1-based, as the tables show it): its text, the
    atlas's temperature, seed and max new tokens, and its drafter when the Live demo offers it. None for no
    such prompt."""
    try:
        index = int(prompt_number) - 1
    except (TypeError, ValueError):
        return None
    if session is None or not 0 <= index < len(session.prompts):
        return None
    choice = session.choice
    values = {"prompt": session.prompts[index].prompt} | {name: getattr(choice, name) for name in LIVE_SETTINGS}
    if choice.drafter and choice.drafter in offered_drafters:
        values["drafter"] = choice.drafter
    return values
