"""What the Run, Step and Stop buttons do, as ordinary functions: plain inputs in (``PageInputs``), ``ViewUpdate``s
out. No Gradio here: ``layout`` maps each ViewUpdate onto its components, the tests and
benchmarks/ui_overhead.py call these functions directly.

Run has two phases (``ui/race.py``): first it times each method alone, one after another, the AR baseline last
(``timing_turn``); then it replays the columns side by side at the pace each ran while a thread scores the
outputs and builds the finished page (``race_replay``). Step is a two-click state machine per target pass
(``RunSession.pending_verdict``): first what each draft proposed (grey), then the target's verdict. A click may
name another drafter (``drafter_switch``). Bad settings give a ViewUpdate with an error line and a warning, never
an exception."""
from __future__ import annotations

import contextlib
import sys
import time
import traceback
from dataclasses import replace
from typing import Iterator

from ..models import ModelLoadError
from ..settings import SettingsError
from . import narration, page, race
from .drafter_switch import contexts_for
from .frames import DrawnFrames
from .page_types import AppContext, PageInputs, ViewUpdate, error_update
from .race_replay import replay_race
from .session import RunSession, user_message
from .timing_turn import time_each_alone, timed_alone, timing_columns
from .views import columns_view, finished_view, final_status, plots_view, step_lines, steps_so_far, table_view


def new_session(context: AppContext, inputs: PageInputs) -> RunSession:
    """Validates the settings (SettingsError) and encodes the prompt; no model runs yet. ``context`` is the
    chosen drafter's (``drafter_switch.drafter_context``)."""
    return RunSession(context.target, context.drafter, inputs.prompt, dict(inputs.settings), chat=bool(inputs.chat),
                      preverifier=context.preverifier, measure_ar=bool(inputs.measure_ar), limits=context.limits,
                      menu_key=inputs.drafter or None)


WARM_UP_PROMPT = "Say hello."


def warm_up(context: AppContext, prompt: str = WARM_UP_PROMPT, new_tokens: int = 4) -> float:
    """At start-up: one short Run of every method, AR too, with the settings the page starts with and nothing
    drawn, then its scoring. A visitor's first Run then times its decoders rather than their first-call costs
    (llama.cpp contexts allocated, the drafter's pool laid out beside the target's, lazy layers loaded), which
    otherwise land in the first method timed. Returns its seconds."""
    from .workshop import starting_settings

    started = time.perf_counter()
    settings = starting_settings(context.target, context.drafter, context.preverifier, context.limits)
    session = new_session(context, PageInputs(prompt, settings | {"max_new_tokens": new_tokens},
                                              chat=context.target.use_chat_template, measure_ar=True))
    for _ in time_each_alone(session):      # each method alone, as Run times them, with nothing drawn
        pass
    session.analyse()
    return time.perf_counter() - started


def finish_run(context: AppContext, session: RunSession, measure_ar: bool, started: float | None,
               prepared: ViewUpdate | None = None, frames: DrawnFrames | None = None) -> Iterator[ViewUpdate]:
    """After the columns: the AR baseline (if asked and not yet run), the oracle, likelihoods, table and
    exports (``prepared``: that view already built during the replay; ``frames``: a page that acknowledges what it
    has drawn, ``table_then_charts``)."""
    if measure_ar and not session.cancel.is_set() and not (session.ar and session.ar.done):
        yield ViewUpdate(status=page.run_status_html("Finishing the AR baseline (target alone)…", "busy"),
                         table=table_view(session))
        for _ in session.ar_steps():
            pass
    if not session.stopped and not session.analysed:
        if session.settings["temperature"] > 0:
            yield ViewUpdate(status=page.run_status_html("Scoring each output under the target (log-likelihood "
                                                         "per token, for SMC-SD's error)…", "busy"))
        session.analyse()
    update, now = prepared if prepared is not None else finished_view(context, session), time.perf_counter()
    yield from table_then_charts(update, lambda charts_pending, drawn=None:
                                 final_status(session, started, now, charts_pending, drawn), frames)


def table_then_charts(finished: ViewUpdate, status, frames: DrawnFrames | None = None) -> Iterator[ViewUpdate]:
    """The finished page in two frames: everything but the charts, its status line (``status(charts_pending,
    drawn)``) saying the charts are on their way (style.css keeps the last Run's charts hidden meanwhile), then the
    same view again with the charts. The browser draws nine charts in one 0.7 s task, and the finished table and
    columns should not wait behind it: with ``frames`` (a page that acknowledges what it has drawn) the charts go
    once the table has been painted. The second frame repeats every value (unchanged: nothing redrawn) so that an
    API client's last values are complete."""
    if finished.plots:
        token = frames.expect() if frames is not None else None
        yield replace(finished, plots=None, status=status(True, token))
        if frames is not None:
            frames.wait(token)
    finished.status = status(False)
    yield finished


def run(context: AppContext, inputs: PageInputs, frame_s: float = race.RACE_FRAME_S,
        still_wanted=lambda: True, quiet=contextlib.nullcontext) -> Iterator[ViewUpdate]:
    """Time each method alone, replay the columns side by side at the pace each ran, then the finished page.
    ``still_wanted``: False once the client has left (checked while a method is timed, when nothing is sent);
    ``quiet``: a context held while a page's method decodes (``time_each_alone``)."""
    context, refused = contexts_for(context, inputs)
    if refused is not None:
        yield refused
        return
    try:
        session = new_session(context, inputs)
    except (SettingsError, ModelLoadError) as error:
        yield error_update(user_message(error))
        return
    started = time.perf_counter()
    yield ViewUpdate(columns=timing_columns(session, None),
                     status=page.run_status_html("Running… each method is timed alone, then replayed.", "busy"),
                     narration=narration.narration_html({}), table=table_view(session), session=session)
    yield from timed_alone(session, context.frames if inputs.acknowledges else None, still_wanted, quiet)
    session.phase_seconds["timing"] = time.perf_counter() - started
    prepared = None
    if not session.cancel.is_set():
        prepared = yield from replay_race(context, session, frame_s)
    yield from finish_run(context, session, inputs.measure_ar, started, prepared,
                          context.frames if inputs.acknowledges else None)


def session_for_step(context: AppContext, inputs: PageInputs, session: RunSession | None) -> RunSession:
    """The session a Step click continues: the current one unless it is done, stopped or its inputs changed."""
    if session is None or session.finished or session.cancel.is_set() or session.key() != inputs.key():
        return new_session(context, inputs)
    return session


def take_step(session: RunSession) -> tuple[dict, bool]:
    """One click: the draft phase advances every method to its next event and holds it back as pending;
    the verify phase releases the pending events. Returns ({method: event or None}, verify phase?)."""
    if session.pending_verdict is not None:
        new_events, session.pending_verdict = session.pending_verdict, None
        return new_events, True
    new_events = session.advance_until_event()
    if any(event is not None for event in new_events.values()):
        session.pending_verdict = new_events
    return new_events, False


def step(context: AppContext, inputs: PageInputs, session: RunSession | None) -> Iterator[ViewUpdate]:
    """Advance every method by half a target forward pass (draft, then verdict) and say what happened."""
    context, refused = contexts_for(context, inputs)
    if refused is not None:
        yield refused
        return
    try:
        session = session_for_step(context, inputs, session)
    except (SettingsError, ModelLoadError) as error:
        yield error_update(user_message(error))
        return
    new_events, verify_phase = take_step(session)
    pending = {method for method, event in (session.pending_verdict or {}).items() if event is not None}
    update = ViewUpdate(columns=columns_view(context, session, running=not session.finished, pending=pending),
                        narration=narration.narration_html(step_lines(session, new_events, verify_phase)),
                        session=session)
    if not pending:                           # the plots would give the verdict away
        update.plots = plots_view(session)
    if session.finished and not pending:       # the finished page replaces this step's view
        yield from finish_run(context, session, inputs.measure_ar, None)
        return
    phase = "drafted; press Step for the target's verdict" if pending else "verified; press Step for the next draft"
    update.status = page.run_status_html(f"Step-through: step {steps_so_far(session)} {phase}.", "info")
    update.table = table_view(session)
    yield update


def stop(session: RunSession | None) -> ViewUpdate:
    """Ask the running session to stop after its current step (the run handler then finishes)."""
    if session is not None:
        session.stop()
    return ViewUpdate(status=page.run_status_html("Stopping after the current step…", "busy"))


def guarded(updates: Iterator[ViewUpdate]) -> Iterator[ViewUpdate]:
    """Any unexpected failure becomes one error line and a warning (and a log entry), never an
    exception in the browser; the app keeps serving."""
    try:
        yield from updates
    except Exception as error:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        yield error_update(f"Something went wrong: {user_message(error)}")
