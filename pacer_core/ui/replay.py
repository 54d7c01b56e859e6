"""Replay: a recorded run (an exported trace, ``pacer_core.trace``) shown again by the live page's own views
(``views.columns_view``, ``plots_view``, ``table_view``, ``step_lines``, ``summary_lines``), step by step,
with no model. No Gradio here: ``replay_tab`` lays it out.

A ``Replay`` is a validated trace and a click count, and its views follow the live Step button click for
click (``handlers.step``): click 2j-1 shows target pass j as drafted, click 2j the target's verdict on it, and
click 2P+1 (P: the longest column's passes) the finished page of ``handlers.finish_run``. After click 2j-1 or
2j every method shows its first j events and is finished once it has fewer than j, as a live session is; the
oracle γ*, log-likelihoods and proposal divergence appear on the finished page only, as they are computed
after the run. So a replayed view is the HTML the live page showed at that click (tests/test_replay.py).

    replay = open_trace(Path("assets/traces/easy-and-hard-1.json").read_bytes())   # TraceError if unusable
    update = replay_view(replay)            # pass 1 drafted: a ViewUpdate, as the handlers return
    update = replay_view(replay.step())     # pass 1 verified"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from ..method_table import column_keys, label_of
from ..settings import FIELDS
from ..trace import RecordedRun, TraceError, TraceLimits, parse_trace
from . import charts, narration, page
from .columns import column_html
from .escape import escape_text
from .page_types import AppContext, ViewUpdate
from .session import MethodRun, RunSession
from .tables import empty_frame
from .views import columns_view, plots_view, step_lines, summary_lines, table_view

TRACES_DIR = Path(__file__).resolve().parent.parent.parent / "assets" / "traces"


class RecordedTarget:
    """Stands in for the Target in a recorded session: its description (which names the drafter it ran with),
    and no model."""

    def __init__(self, describe: dict):
        self._describe = describe

    def describe(self, drafter) -> dict:
        return self._describe


class RecordedSession(RunSession):
    """The RunSession of a recorded run as it stood after ``passes`` Step clicks' worth of target passes, or
    (``finished``) after the run with the figures computed afterwards. It holds what the handlers' views read
    and has nothing to advance: no pair, no generators."""

    def __init__(self, recorded: RecordedRun, passes: int, finished: bool = False):
        # RunSession's state without its constructor, which validates against a pair and encodes the prompt.
        self.target, self.drafter, self.menu_key = RecordedTarget(recorded.pair), None, recorded.drafter
        self.prompt, self.settings, self.chat = recorded.prompt, recorded.settings, recorded.chat_template
        self.prompt_note, self.oracle_note = recorded.prompt_note, recorded.oracle_note
        self.pacer_rule = recorded.pacer_rule
        self.cancel, self.pending_verdict, self.preverifier = threading.Event(), None, None
        if finished and recorded.stopped:
            self.cancel.set()
        shown = passes if not finished else None
        self.runs = {method: recorded_run(recorded, method, shown) for method in column_keys()
                     if method in recorded.results or method in recorded.errors}
        self.ar = recorded_run(recorded, "ar", shown) if "ar" in recorded.results else None
        self.oracle, self.oracle_steps = (recorded.oracle, recorded.oracle_steps) if finished else (None, None)
        self.oracle_greedy = not (finished and recorded.oracle) or recorded.settings["temperature"] == 0
        self.logliks = dict(recorded.logliks) if finished else {}
        self.proposal_kl = recorded.proposal_kl if finished else None

    def _start(self, run: MethodRun) -> None:
        raise TraceError("A recorded run has no model to run.")


def recorded_run(recorded: RecordedRun, method: str, passes: int | None) -> MethodRun:
    """A method's run after ``passes`` target passes (None: all of them): finished once it has fewer events
    than that, as a live run pulls its Result on the pass after its last event."""
    result, error = recorded.results.get(method), recorded.errors.get(method)
    events = list(result.events) if result is not None else []
    busy = recorded.busy_seconds.get(method, 0.0)
    if passes is not None and passes <= len(events):
        return MethodRun(method, events=events[:passes], busy_seconds=busy)
    return MethodRun(method, events=events, result=result, error=error, busy_seconds=busy)


@dataclass(frozen=True)
class Replay:
    """A recorded run and how far the page has stepped through it (``clicks`` Step clicks, 1: the first
    pass drafted). Immutable: ``step``, ``start`` and ``end`` give new Replays."""
    recorded: RecordedRun
    clicks: int = 1

    @cached_property
    def passes(self) -> int:
        """Target passes of the longest column (its Step clicks are 2 per pass, then one for the end)."""
        return max((len(self.recorded.results[m].events) for m in column_keys() if m in self.recorded.results),
                   default=0)

    @property
    def last_click(self) -> int:
        return 2 * self.passes + 1

    @property
    def finished(self) -> bool:
        return self.clicks >= self.last_click

    def step(self) -> "Replay":
        return replace(self, clicks=min(self.clicks + 1, self.last_click))

    def start(self) -> "Replay":
        return replace(self, clicks=1)

    def end(self) -> "Replay":
        return replace(self, clicks=self.last_click)


def replay_context(recorded: RecordedRun) -> AppContext:
    """What the column notes read from the app: the recorded pair and which pre-verifier PACER used."""
    return AppContext(RecordedTarget(recorded.pair), None, preverifier_kind=recorded.preverifier_kind)


# ---------------------------------------------------------------- loading

def open_trace(data: bytes | str, limits: TraceLimits = TraceLimits()) -> Replay:
    """A trace file's content → a Replay at its first click, or TraceError (``pacer_core.trace``)."""
    return Replay(parse_trace(data, limits))


def check_drawable(replay: Replay) -> None:
    """Draw the finished page once: a trace that passed validation but that the renderers still cannot draw
    (edited into inconsistency) is a TraceError, said in one line. The page runs this right after showing
    the first step, so the first step does not wait for it."""
    try:
        finished_view(replay.end())
    except Exception as error:  # noqa: BLE001 - any failure to draw is the file's fault
        raise TraceError(f"The trace is inconsistent: the page cannot draw it ({type(error).__name__}).") from None


def open_trace_file(path: str | Path, limits: TraceLimits = TraceLimits()) -> Replay:
    """``open_trace`` on a file, refusing one that is too large before reading it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > limits.max_bytes:
            raise TraceError(f"The file is too large for a trace ({size / 2**20:.1f} MB; at most "
                             f"{limits.max_bytes / 2**20:.0f} MB).")
        data = path.read_bytes()
    except OSError as error:
        raise TraceError(f"The file could not be read ({type(error).__name__}).") from None
    return open_trace(data, limits)


def shipped_traces(folder: Path = TRACES_DIR) -> dict[str, Path]:
    """The recorded runs in ``assets/traces``: {title: path}, in file-name order (a file without a readable
    title is listed by its name; it is validated only when chosen)."""
    import json

    listed = {}
    for path in sorted(folder.glob("*.json")):
        try:
            title = json.loads(path.read_text(encoding="utf-8")).get("title")
        except (OSError, ValueError, AttributeError):
            title = None
        listed[title if isinstance(title, str) and title else path.stem] = path
    return listed


# ---------------------------------------------------------------- views

def replay_view(replay: Replay) -> ViewUpdate:
    """What the page shows at the replay's click: a pass drafted, its verdict, or the finished run."""
    return finished_view(replay) if replay.finished else step_view(replay)


def step_view(replay: Replay) -> ViewUpdate:
    """Click 2j-1: pass j drafted (grey, no plots: they would give the verdict away); click 2j: its verdict."""
    recorded, passes, verify_phase = replay.recorded, (replay.clicks + 1) // 2, replay.clicks % 2 == 0
    session = RecordedSession(recorded, passes)
    new_events = {method: run.events[passes - 1] if len(run.events) >= passes and not run.done else None
                  for method, run in session.runs.items()}
    pending = set() if verify_phase else {method for method, event in new_events.items() if event is not None}
    update = ViewUpdate(columns=columns_view(replay_context(recorded), session, running=not session.finished,
                                             pending=pending),
                        narration=narration.narration_html(step_lines(session, new_events, verify_phase)),
                        table=table_view(session), status=step_status(replay, passes, verify_phase))
    if verify_phase:
        update.plots = plots_view(session)
    elif replay.clicks == 1:                  # a freshly opened trace: no figures yet, not the last trace's
        update.plots = dict.fromkeys(charts.chart_names())
    return update


def finished_view(replay: Replay) -> ViewUpdate:
    """The finished page, as ``handlers.finish_run`` showed it (without the downloads: this is one)."""
    recorded = replay.recorded
    session = RecordedSession(recorded, replay.passes, finished=True)
    return ViewUpdate(columns=columns_view(replay_context(recorded), session, running=False),
                      plots=plots_view(session), status=finished_status(session),
                      narration=narration.narration_html(summary_lines(session)), table=table_view(session))


def step_status(replay: Replay, passes: int, verify_phase: bool) -> str:
    then = ("the finished run" if passes == replay.passes else "the next draft") if verify_phase else \
        "the target's verdict"
    phase = "verified" if verify_phase else "drafted"
    return page.run_status_html(f"Replay: target pass {passes} of {replay.passes} {phase}; press Step ▸ for "
                                f"{then}.", "info")


def finished_status(session: RecordedSession) -> str:
    """The status line of the finished replay: stopped or not, methods that failed, the run's notes."""
    message = "Replay: the finished run" + (" (stopped with ■ Stop)." if session.cancel.is_set() else ".")
    for method, run in session.runs.items():
        if run.error:
            message += f" {label_of(method)} did not finish: {run.error}"
    message += "".join(f" {note}" for note in (session.oracle_note, session.prompt_note) if note)
    return page.run_status_html(message, "done")


def error_view(message: str) -> ViewUpdate:
    """Something the replay cannot do: the reason in the status line and a warning."""
    return ViewUpdate(status=page.run_status_html(message, "error"), warning=message)


def refused_view(message: str) -> ViewUpdate:
    """A trace refused on opening: the reason, and empty columns, narration and table (not the last run's)."""
    return replace(error_view(message), columns={method: column_html(method, []) for method in column_keys()},
                   narration=narration.narration_html({}), table=empty_frame())


# ---------------------------------------------------------------- what it was recorded on

def settings_text(settings: dict) -> str:
    """'Temperature (0 = greedy) 0 · Seed 0 · …': every setting by the page's label (None: the default)."""
    return " · ".join(f"{field.label} {'default' if settings.get(field.name) is None else settings[field.name]}"
                      for field in FIELDS if field.name in settings)


def recorded_date(stamp: str) -> str:
    """'2026-12-02 05:45 UTC' from the trace's ISO stamp (shown as written when it is not one)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return stamp or "unknown date"


def recorded_html(recorded: RecordedRun) -> str:
    """The line above a replay: the pair as the live page's model line shows it, then title, date, project
    version, drafter, prompt and settings. All text from the trace is escaped."""
    items = [("Replay of", recorded.title or "a recorded run"), ("Recorded", recorded_date(recorded.recorded_at)),
             ("PACER Lab", recorded.project_version or "?"), ("Drafter", recorded.drafter or "?"),
             ("Prompt", recorded.prompt), ("Settings", settings_text(recorded.settings))]
    parts = "".join(f'<span class="pair-item"><span class="pair-key">{escape_text(key)}</span> '
                    f"{escape_text(str(value), newline_breaks=False)}</span>" for key, value in items)
    return (f'<div class="replay-recorded">{page.pair_status_html(recorded.pair, recorded.preverifier_kind)}'
            f'<div class="pair-status replay-meta">{parts}</div></div>')


__all__ = ["Replay", "RecordedSession", "TraceError", "check_drawable", "open_trace", "open_trace_file",
           "replay_view", "recorded_html", "shipped_traces", "error_view", "refused_view"]
