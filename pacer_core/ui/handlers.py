"""What the Run, Step and Stop buttons do, as ordinary functions: plain inputs in, ``ViewUpdate``s out.
No Gradio here: ``layout`` maps each ViewUpdate onto its components, the tests and
benchmarks/ui_overhead.py call these functions directly.

Run has two phases (``ui/race.py``). First it times each method alone, one after another, the AR baseline
last (``time_each_alone``): a method's turn is one frame (the status line and the columns), its decoding starts
once the page has drawn that frame (``ui/frames.py``) and nothing is sent until it ends, so each method's seconds
are its decoder's own. Then it replays the columns side by side
at the pace each ran (``replay_race``: each running column in parts from kept state, so a frame costs and sends
only the new steps) while a thread computes the oracle γ* and the target log-likelihoods and builds the
finished page: plots (sent as soon as they are ready, drawn hidden until the race ends), metrics table and
downloads. Step is
a two-click state machine per target pass (``RunSession.pending_verdict``): first what each draft proposed
(grey), then the target's verdict. Bad settings give a ViewUpdate with an error line and a warning, never
an exception."""
from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..models import ModelLoadError
from ..settings import Limits, SettingsError
from . import METHOD_LABELS, columns, measured, narration, page, plots, race, tables
from .live import LiveColumns
from ..drafters import drafter_key
from .frames import DrawnFrames
from .session import RunSession, user_message
from .timing_turn import TimingTurn

if TYPE_CHECKING:
    from ..drafters.drafter import Drafter
    from ..models import Target



@dataclass(frozen=True)
class AppContext:
    """What every handler of one app shares: the pair loaded once per process, the drafter its runs draft with,
    PACER's pre-verifier, the Space owner's limits (read once, here or by ``build_ui``) and the drafters the page
    offers (a ``DrafterMenu``; None: only ``drafter``)."""
    target: Target
    drafter: Drafter
    preverifier: object = None
    preverifier_kind: str = "heuristic"     # "trained" or "heuristic"
    limits: Limits = field(default_factory=Limits.from_env)
    drafters: object = None
    frames: DrawnFrames = field(default_factory=DrawnFrames)   # the page's acknowledgements of drawn frames


@dataclass(frozen=True)
class PageInputs:
    """The controls' values for one click."""
    prompt: str
    settings: dict              # setting name → control value; threshold None: the pre-verifier's own
    chat: bool = False
    measure_ar: bool = True
    drafter: str | None = None  # the drafter menu's key (drafters.drafter_keys()); None: the context's own
    acknowledges: bool = False  # the page says when it has drawn a frame (ui/frames.py); an API client does not

    def key(self) -> tuple:
        """Equal to ``RunSession.key()`` of a session started from these inputs."""
        return (self.prompt, tuple(sorted(self.settings.items())), self.chat, self.drafter or None)


@dataclass
class ViewUpdate:
    """What one handler step changes on the page. A field left None keeps what the page shows."""
    columns: dict[str, object] | None = None    # method → column HTML, or a running column in parts (ui/live.py)
    plots: dict[str, object] | None = None      # plot name (plots_view's keys) → plotly figure
    status: str | None = None                   # run-status HTML
    narration: str | None = None                # narration HTML
    table: object | None = None                 # metrics DataFrame
    downloads: tuple[str, str] | None = None    # (JSON trace path, CSV metrics path)
    session: RunSession | None = None           # the session to keep for the next click
    warning: str | None = None                  # plain text for a toast (escaped by the wiring)


# ---------------------------------------------------------------- views of a session

def new_session(context: AppContext, inputs: PageInputs) -> RunSession:
    """Validates the settings (SettingsError) and encodes the prompt; no model runs yet. ``context`` is the
    chosen drafter's (``drafter_context``)."""
    return RunSession(context.target, context.drafter, inputs.prompt, dict(inputs.settings), chat=bool(inputs.chat),
                      preverifier=context.preverifier, measure_ar=bool(inputs.measure_ar), limits=context.limits,
                      menu_key=inputs.drafter or None)


def drafter_context(context: AppContext, key: str | None) -> AppContext:
    """The context drafting with the menu's ``key``, whose PACER uses that drafter's trained pre-verifier (or the
    confidence rule); the same context for its own drafter. The drafter is built on its first use and kept
    (``DrafterMenu``); ValueError for a key the page does not offer."""
    if context.drafters is None or not key or key == context.drafters.default_key:
        if key and context.drafters is None:
            raise ValueError(f"This page drafts only with its pair's own drafter, not '{key}'.")
        return context
    drafter = context.drafters.drafter(key)
    preverifier = context.drafters.preverifier(key)
    return replace(context, drafter=drafter, preverifier=preverifier,
                   preverifier_kind=getattr(preverifier, "kind", None) or "heuristic")


def contexts_for(context: AppContext, inputs: PageInputs):
    """(the drafter's context, None), or (None, an error ViewUpdate) when the drafter cannot be built."""
    try:
        return drafter_context(context, inputs.drafter), None
    except (ValueError, ModelLoadError) as error:
        return None, error_update(user_message(error) if isinstance(error, ModelLoadError) else str(error))


def column_note(context: AppContext, session: RunSession, method: str) -> str | None:
    """The small print under a column: what stops PACER's drafting and its discard mode, SMC-SD's error."""
    settings, notes = session.settings, []
    if method == "pacer" and session.pacer_rule:
        notes.append(session.pacer_rule)
    elif method == "pacer" and context.preverifier_kind != "trained":   # a trace recorded before the rule was kept
        notes.append("Pre-verifier: heuristic confidence rule (no trained layer for this pair).")
    if method == "pacer" and settings.get("on_fail") == "discard" and settings.get("temperature", 0) > 0:
        notes.append("Discard mode under sampling is approximate (not lossless).")
    if method == "smc" and not session.runs[method].error:
        notes.append(measured.smc_column_note(session.target.describe(session.drafter), settings, session.logliks,
                                              proposal_kl=session.proposal_kl))
    return " ".join(notes) or None


def columns_view(context: AppContext, session: RunSession, running: bool, pending=frozenset()) -> dict[str, str]:
    """Every column's HTML; methods in ``pending`` show their newest step as drafted, not yet verified."""
    return {method: columns.column_html(method, [], placeholder=run.error, skipped=True) if run.skipped else
            columns.column_html(method, run.events, run.result, run.error, running=running and not run.done,
                                note=column_note(context, session, method), pending=method in pending)
            for method, run in session.runs.items()}


def live_columns_view(context: AppContext, session: RunSession, live: LiveColumns) -> dict[str, object]:
    """``columns_view`` while Run streams, at a cost per update that does not grow with the run: running
    columns in parts from ``live`` (ui/live.py: only the new events are rendered, and Gradio sends only what
    changed), finished ones rendered once."""
    return {method: live.value(method, run.events, run.result, run.error,
                               note=lambda method=method: column_note(context, session, method))
            for method, run in session.runs.items()}


def events_by_method(session: RunSession) -> dict[str, list]:
    """Every method's events so far, the AR baseline's first (when it is measured)."""
    events = {"ar": session.ar.events} if session.ar is not None else {}
    return events | {method: run.events for method, run in session.runs.items()}


PLOT_NAMES = ("timeline", "speedup", "histogram", "lengths", "accept", "blocks", "weights", "ess", "genealogy")
SCORED_PLOTS = frozenset({"lengths"})    # the plots that show a figure of the scoring (the oracle γ*)


def plots_view(session: RunSession, names=None) -> dict[str, object]:
    """The plots by name (all nine, or only ``names``)."""
    events = events_by_method(session)
    fixed, pacer, smc = events.get("fixed", []), events.get("pacer", []), events.get("smc", [])
    oracle_label = "oracle γ*" if session.oracle_greedy else "oracle E[γ*] (sampling)"
    builders = {"timeline": lambda: plots.timeline_figure(events),
                "speedup": lambda: plots.speedup_figure(events, drafter_label(session)),
                "histogram": lambda: plots.accepted_histogram_figure(events),
                "lengths": lambda: plots.draft_length_figure(fixed, pacer, session.oracle, session.oracle_steps,
                                                             oracle_label),
                "accept": lambda: plots.acceptance_figure({"fixed": fixed, "pacer": pacer}),
                "blocks": lambda: plots.block_scores_figure(pacer),
                "weights": lambda: plots.smc_weights_figure(smc),
                "ess": lambda: plots.smc_ess_figure(smc),
                "genealogy": lambda: plots.smc_genealogy_figure(smc)}
    return {name: build() for name, build in builders.items() if names is None or name in names}


def drafter_label(session: RunSession) -> str:
    """The drafter's menu key (one of ``drafters.drafter_keys()``), as the page's drafter choice names it."""
    return session.menu_key or drafter_key(session.drafter)


def table_view(session: RunSession):
    return tables.metrics_frame(session.results(), session.busy_seconds(), session.statuses(), session.logliks,
                                drafter=drafter_label(session))


def export_files(session: RunSession, folder: Path | None = None) -> tuple[str, str]:
    """The run's JSON trace and CSV metrics, written to a fresh folder; returns both paths."""
    folder = folder or Path(tempfile.mkdtemp(prefix="pacer-run-"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    trace_path, csv_path = folder / f"pacer-trace-{stamp}.json", folder / f"pacer-metrics-{stamp}.csv"
    trace_path.write_text(json.dumps(session.trace(), indent=1, ensure_ascii=False), encoding="utf-8")
    table_view(session).to_csv(csv_path, index=False)
    return str(trace_path), str(csv_path)


def summary_lines(session: RunSession) -> dict[str, str]:
    drafter = drafter_label(session)
    return {method: run.error or narration.summarize_run(run.result, run.events)
            + narration.drafter_sentence(method, drafter)
            for method, run in session.runs.items() if run.error or run.result is not None}


def error_update(message: str) -> ViewUpdate:
    return ViewUpdate(status=page.run_status_html(message, "error"), warning=message)


def steps_so_far(session: RunSession) -> int:
    return max((len(run.events) for run in session.runs.values()), default=0)


# ---------------------------------------------------------------- finishing a run

def final_status(session: RunSession, started: float | None, now: float) -> str:
    """The status line once every column is done: time taken or stopped, how it was timed, failures, notes."""
    message = f"Done in {now - started:.1f} s, {race.HOW_TIMED}." if started is not None else \
        "All methods finished (step-through: each method's own passes, timed between your clicks)."
    if session.stopped:
        message = "Stopped."
    elif session.cancel.is_set():
        message = f"Done in {now - started:.1f} s, {race.HOW_TIMED} (replay skipped)."
    failed = {method: run.error for method, run in session.runs.items() if run.error and not run.skipped}
    for method, error in failed.items():      # one column's failure must not read as a clean "Done"
        message += f" {METHOD_LABELS.get(method, method)} did not finish: {error}"
    skipped = [METHOD_LABELS.get(method, method) for method, run in session.runs.items() if run.skipped]
    if skipped:
        message += f" Not run (stopped before their turn): {', '.join(skipped)}."
    message += "".join(f" {note}" for note in (session.oracle_note, session.prompt_note) if note)
    return page.run_status_html(message, "error" if len(failed) == len(session.runs) else "done")


def finished_view(context: AppContext, session: RunSession, ready_plots: dict | None = None) -> ViewUpdate:
    """The finished page but its status line: columns, the nine plots (those in ``ready_plots`` as built
    already), summary, table and downloads."""
    ready = ready_plots or {}
    plots = ready | plots_view(session, names={name for name in PLOT_NAMES if name not in ready})
    return ViewUpdate(columns=columns_view(context, session, running=False), plots=plots,
                      narration=narration.narration_html(summary_lines(session)), table=table_view(session),
                      downloads=export_files(session), session=session)


def finish_run(context: AppContext, session: RunSession, measure_ar: bool, started: float | None,
               prepared: ViewUpdate | None = None) -> Iterator[ViewUpdate]:
    """After the three columns: the AR baseline (if asked and not yet run), the oracle, likelihoods, table and
    exports (``prepared``: that view already built during the replay)."""
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
    update = prepared if prepared is not None else finished_view(context, session)
    update.status = final_status(session, started, time.perf_counter())
    yield update


# ---------------------------------------------------------------- Run's two phases

def timing_column(run, current) -> str:
    """A column while the methods are timed: its progress, its time alone, or its turn to come."""
    return columns.column_html(run.method, [], None, run.error if not run.skipped else None, running=run is current,
                               note=None, placeholder=None if run.error else race.waiting_text(run, run is current))


def timing_columns(session: RunSession, current) -> dict[str, str]:
    return {method: timing_column(run, current) for method, run in session.runs.items()}


def timing_update(session: RunSession, current, position: int, count: int, drawn: str | None = None) -> ViewUpdate:
    """A method's turn: the status line (with the token the page acknowledges once drawn) and every column."""
    line = race.timing_line(current.method, position, count, previous_line(session, current))
    return ViewUpdate(columns=timing_columns(session, current),
                      status=page.run_status_html(line, "busy", drawn=drawn))


def previous_line(session: RunSession, current) -> str | None:
    """What the last method timed took, for the next turn's line (None at the first turn)."""
    runs = session.all_runs()
    earlier = [run for run in runs[:runs.index(current)] if run.done and not run.skipped]
    return race.took_line(earlier[-1]) if earlier else None


def time_each_alone(session: RunSession, frames: DrawnFrames | None = None, check=lambda: True,
                    clock=time.perf_counter, check_s: float = race.CLIENT_CHECK_S,
                    quiet=contextlib.nullcontext) -> Iterator[ViewUpdate]:
    """Run's first phase: each method decodes alone, one after another (``RunSession.timing_queue``). A method's
    turn is one frame (its line and the columns); with ``frames`` (a page that acknowledges what it has drawn) its
    decoding starts once the page has drawn that frame, and nothing is sent until it ends: its timed window holds
    its decoder only, however fast or slow the browser is. Every ``check_s`` between steps ``check()`` says whether
    the Run is still wanted (False: its client left, it stops like Stop); without ``frames`` (an API client, no
    browser to disturb) the turn's status line goes out again instead, where Gradio ends a Run whose client left or
    cancelled (an update with no value at all is an error to Gradio). ``quiet()``: a context held while a
    page's method decodes (``layout.quiet_queue``: the server's own polling slowed down meanwhile).
    Stop ends the current method and skips the rest."""
    queue = session.timing_queue()
    for position, current in enumerate(queue, 1):
        token = frames.expect() if frames is not None else None
        turn = timing_update(session, current, position, len(queue), drawn=token)
        yield turn
        if frames is not None:                 # a page: decode once it has drawn the turn, send nothing until the end
            started = clock()
            frames.wait(token)
            session.phase_seconds["drawing"] = session.phase_seconds.get("drawing", 0.0) + clock() - started
            with quiet():
                decode_alone(session, current, check, clock, check_s)
        else:
            checked = clock()
            while not current.done:
                session.advance_one(current)
                if not current.done and clock() - checked >= check_s:
                    yield ViewUpdate(status=turn.status)
                    if not check():
                        session.stop()
                    checked = clock()
        if session.cancel.is_set():
            session.skip_unstarted()
            return


def decode_alone(session: RunSession, current, check, clock, check_s: float) -> None:
    """One method's steps with nothing sent: ``check()`` every ``check_s`` (False: its client left, stop)."""
    checked = clock()
    while not current.done:
        session.advance_one(current)
        if not current.done and clock() - checked >= check_s:
            if not check():
                session.stop()
            checked = clock()


TIMING_TURN = TimingTurn()     # one Run's timing phase at a time in this process (PACER_CONCURRENCY > 1)


def timed_alone(session: RunSession, frames: DrawnFrames | None = None, still_wanted=lambda: True,
                quiet=contextlib.nullcontext, wait_s: float = 0.5, sleep=time.sleep) -> Iterator[ViewUpdate]:
    """``time_each_alone`` once no other Run of this app is timing its methods: with more than one run at a time
    (PACER_CONCURRENCY) two decoders would share the cores and each would be timed slower than it is. Stop
    while waiting skips the timing. A Run that was stopped or abandoned mid-timing (its tab closed) gives up its
    turn (``timing_turn``); one still timing keeps it fresh at every check."""
    while not TIMING_TURN.take(session):
        if session.cancel.is_set():
            session.skip_unstarted()
            return
        yield ViewUpdate(status=page.run_status_html("Waiting for another run on this server to finish timing its "
                                                     "methods: one decodes at a time, so each is timed alone…", "busy"))
        sleep(wait_s)

    def check() -> bool:
        TIMING_TURN.seen(session)
        return still_wanted()

    try:
        for update in time_each_alone(session, frames, check, quiet=quiet):
            TIMING_TURN.seen(session)
            yield update
    finally:
        TIMING_TURN.release(session)


def race_columns(context: AppContext, session: RunSession, lanes: list, live: LiveColumns,
                 elapsed: float) -> dict[str, object]:
    """The columns ``elapsed`` seconds into the replay: a lane that has finished shows its result."""
    by_method = {lane.method: lane for lane in lanes}
    view = {}
    for method, run in session.runs.items():
        lane = by_method.get(method)
        done = lane is None or race.finished(lane, elapsed)
        events = run.events if done else run.events[:race.shown(lane, elapsed)]
        view[method] = live.value(method, events, run.result if done else None, run.error if done else None,
                                  note=lambda method=method: column_note(context, session, method),
                                  placeholder=race.STARTING)
    return view


def replay_race(context: AppContext, session: RunSession, frame_s: float = race.RACE_FRAME_S,
                clock=time.perf_counter, sleep=time.sleep) -> Iterator[ViewUpdate]:
    """Run's second phase: the columns side by side at the pace each method ran alone (``race.REPLAY_SPEED``
    times faster), a frame at most every ``frame_s``. Meanwhile (nothing is timed now) a thread builds the plots
    that need no scoring, then computes the oracle and log-likelihoods and builds the finished view, which this
    generator returns. Each plot goes with the next frame once it is ready: the browser draws them while the race
    plays and shows them when it ends (style.css hides a running page's charts), so a scoring that outlasts the
    race leaves only the oracle's plot to draw. Stop skips to the end."""
    lanes, early_plots, prepared = race.lanes_of(session), {}, []

    def score_and_prepare() -> None:
        early_plots.update(plots_view(session, names=set(PLOT_NAMES) - SCORED_PLOTS))
        started = clock()
        session.analyse()
        session.phase_seconds["scoring"] = clock() - started      # in the trace the finished view exports
        prepared.append(finished_view(context, session, ready_plots=dict(early_plots)))

    worker = threading.Thread(target=score_and_prepare, name="pacer-finish", daemon=True)
    worker.start()
    live, start, plots_sent = LiveColumns(), clock(), set()
    while True:
        frame_start = clock()
        elapsed = (frame_start - start) * race.REPLAY_SPEED       # the methods' own seconds
        over = elapsed >= race.duration(lanes) - 1e-3 or session.cancel.is_set()
        if over and prepared:
            break                 # the finished view comes next and shows every column's end: no frame to draw first
        update = ViewUpdate(columns=race_columns(context, session, lanes, live, elapsed),
                            status=page.run_status_html(race.race_line(lanes, elapsed), "busy"))
        ready = prepared[0].plots if prepared else dict(early_plots)
        if ready.keys() - plots_sent:
            update.plots = {name: figure for name, figure in ready.items() if name not in plots_sent}
            plots_sent |= update.plots.keys()
        yield update
        if over:
            break
        until_end = (race.duration(lanes) - elapsed) / race.REPLAY_SPEED    # the last frame lands on the race's end
        sleep(max(0.0, min(frame_s, until_end) - (clock() - frame_start)))
    if worker.is_alive():
        yield ViewUpdate(status=page.run_status_html("Scoring each output under the target…", "busy"))
    worker.join()
    return prepared[0] if prepared else None    # with the plots again: the API's last values carry them (the
                                                  # page redraws nothing for an unchanged figure)


# ---------------------------------------------------------------- the three buttons

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
    yield from finish_run(context, session, inputs.measure_ar, started, prepared)


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


def step_lines(session: RunSession, new_events: dict, verify_phase: bool) -> dict[str, str]:
    explain = narration.explain_step if verify_phase else narration.explain_draft
    return {method: explain(event) if event is not None else (session.runs[method].error or "finished.")
            for method, event in new_events.items()}


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
