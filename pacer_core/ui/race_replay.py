"""Run's second phase, the race replayed: the columns side by side at the pace each method ran when it was timed
alone (``ui/race.py`` says what a lane shows at each instant), while a thread builds the charts that need no
scoring, then scores the outputs (oracle γ*, log-likelihoods) and builds the finished view. The replay's frames
carry no chart: drawing nine charts takes the browser 0.7 s in one go, which would hold up the replay's last frames
and the finished table behind it (``handlers.finish_run`` sends the charts after the table)."""
from __future__ import annotations

import threading
import time
from typing import Iterator

from . import charts, page, race
from .live import LiveColumns
from .page_types import AppContext, ViewUpdate
from .session import RunSession
from .views import column_note, finished_view, plots_view


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
    that need no scoring, then computes the oracle and log-likelihoods and builds the finished view (every chart
    in it), which this generator returns. Stop skips to the end."""
    lanes, early_plots, prepared = race.lanes_of(session), {}, []

    def score_and_prepare() -> None:
        early_plots.update(plots_view(session, names=set(charts.chart_names()) - charts.scored_names()))
        started = clock()
        session.analyse()
        session.phase_seconds["scoring"] = clock() - started      # in the trace the finished view exports
        prepared.append(finished_view(context, session, ready_plots=dict(early_plots)))

    worker = threading.Thread(target=score_and_prepare, name="pacer-finish", daemon=True)
    worker.start()
    live, start = LiveColumns(), clock()
    while True:
        frame_start = clock()
        elapsed = (frame_start - start) * race.REPLAY_SPEED       # the methods' own seconds
        over = elapsed >= race.duration(lanes) - 1e-3 or session.cancel.is_set()
        if over and prepared:
            break                 # the finished view comes next and shows every column's end: no frame to draw first
        update = ViewUpdate(columns=race_columns(context, session, lanes, live, elapsed),
                            status=page.run_status_html(race.race_line(lanes, elapsed), "busy"))
        yield update
        if over:
            break
        until_end = (race.duration(lanes) - elapsed) / race.REPLAY_SPEED    # the last frame lands on the race's end
        sleep(max(0.0, min(frame_s, until_end) - (clock() - frame_start)))
    if worker.is_alive():
        yield ViewUpdate(status=page.run_status_html("Scoring each output under the target…", "busy"))
    worker.join()
    return prepared[0] if prepared else None
