"""The Run, Step and Stop handlers as plain functions on a tiny random pair: no server, no browser.
They return ViewUpdates; these tests read the column HTML, status lines and downloads from them."""
from __future__ import annotations

import json
import threading

import pytest

from pacer_core.testing.tiny import tiny_pair
from pacer_core.method_table import column_keys
from pacer_core.ui import charts, handlers, race_replay, views
from pacer_core.ui.frames import DrawnFrames
from pacer_core.ui.page_types import AppContext, PageInputs, ViewUpdate
from pacer_core.ui.timing_turn import time_each_alone


@pytest.fixture(scope="module")
def context():
    target, drafter = tiny_pair()
    return AppContext(target, drafter)


def inputs(prompt="t1 t2", measure_ar=False, **settings) -> PageInputs:
    return PageInputs(prompt, {"max_new_tokens": 5, "temperature": 0.8, "seed": 3} | settings, chat=False,
                      measure_ar=measure_ar)


def last(updates) -> ViewUpdate:
    *_, final = updates
    return final


def test_run_streams_every_step_then_the_finished_page(context, tmp_path):
    updates = list(handlers.run(context, inputs(measure_ar=True)))
    streamed = [update for update in updates if update.columns and "run-busy" in (update.status or "")]
    assert len(streamed) >= 2 and all(set(update.columns) == set(column_keys()) for update in streamed)
    final = updates[-1]
    assert "run-done" in final.status and final.session is not None
    for method in column_keys():
        assert 'data-state="' in final.columns[method] and "badge-done" in final.columns[method]
        assert "pacer-error" not in final.columns[method]
    drawn = [update.plots for update in updates if update.plots is not None]   # a late replay frame and the end
    assert 1 <= len(drawn) <= 2 and all(plots is drawn[-1] for plots in drawn)
    plots = final.plots
    assert set(plots) == {"timeline", "speedup", "histogram", "lengths", "accept", "blocks", "weights", "ess",
                          "genealogy"}
    lanes = {lane for trace in plots["timeline"].data if trace.type == "bar" for lane in trace.y}
    assert lanes == {"AR", "fixed SD", "PACER", "SMC-SD"}                 # one lane per method, AR included
    assert [trace.mode for trace in plots["speedup"].data].count("markers") == 3   # each column's point
    assert list(final.table["method"])[0].startswith("Autoregressive")
    trace = json.loads(open(final.downloads[0], encoding="utf-8").read())
    assert set(trace["results"]) == {"ar", "fixed", "pacer", "smc"}
    assert "tau" in open(final.downloads[1], encoding="utf-8").read()


def test_greedy_run_finishes_with_smc_refused_in_its_column(context):
    final = last(handlers.run(context, inputs(temperature=0.0)))
    assert "run-done" in final.status and "did not finish" in final.status
    assert "pacer-error" in final.columns["smc"] and "temperature above 0" in final.columns["smc"]
    assert "pacer-error" not in final.columns["fixed"]


@pytest.mark.parametrize("settings, message", [({"temperature": -1.0}, "temperature"),
                                               ({"max_new_tokens": 0}, "max new tokens")])
def test_bad_settings_give_one_error_update_not_an_exception(context, settings, message):
    updates = list(handlers.run(context, inputs(**settings)))
    assert len(updates) == 1
    assert "run-error" in updates[0].status and message in updates[0].warning.lower()
    assert updates[0].session is None              # the page keeps whatever session it had


def test_empty_prompt_is_a_clear_message(context):
    update = last(handlers.step(context, inputs(prompt="   "), None))
    assert "run-error" in update.status and update.warning


def test_step_through_drafts_then_verifies_one_pass_per_two_clicks(context):
    session, phases = None, []
    for _ in range(60):
        update = last(handlers.step(context, inputs(max_new_tokens=8, gamma=2), session))
        session = update.session
        if "run-done" in (update.status or ""):
            break
        phases.append("drafted;" in update.status)
        shown_as_drafted = ['data-state="drafted"' in markup for markup in update.columns.values()]
        assert any(shown_as_drafted) == phases[-1] and (update.plots is None) == phases[-1]
    else:
        pytest.fail("step-through never finished")
    assert phases == [True, False] * (len(phases) // 2)
    assert all(run.done for run in session.runs.values())
    steps = max(len(run.events) for run in session.runs.values())
    assert len(phases) == 2 * steps                # one draft click and one verdict click per target pass


def test_step_starts_over_when_the_inputs_change(context):
    first = last(handlers.step(context, inputs(), None)).session
    again = last(handlers.step(context, inputs(), first)).session
    assert again is first
    changed = last(handlers.step(context, inputs(seed=4), first)).session
    assert changed is not first


def test_stop_halts_a_run_after_the_current_step(context):
    run = handlers.run(context, inputs(max_new_tokens=60))
    session = next(run).session
    next(run)
    assert "Stopping" in handlers.stop(session).status
    final = last(run)
    assert "Stopped." in final.status
    assert all(run.result is None or run.result.finish_reason == "cancelled" for run in session.runs.values())
    assert max(len(run.events) for run in session.runs.values()) < 20
    assert "Stopping" in handlers.stop(None).status    # nothing running: still an answer


def test_an_unexpected_failure_becomes_one_error_update(context, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("renderer exploded <b>")

    monkeypatch.setattr(handlers.narration, "explain_draft", broken)
    update = last(handlers.guarded(handlers.step(context, inputs(), None)))
    assert "run-error" in update.status and "renderer exploded &lt;b&gt;" in update.status
    assert update.warning == "Something went wrong: RuntimeError: renderer exploded <b>"


def test_column_notes_name_what_stops_pacer_and_discard_mode(context):
    session = handlers.new_session(context, inputs(on_fail="discard"))
    note = views.column_note(context, session, "pacer")
    assert "Drafting stopped by" in note and "approximate" in note
    assert session.trace()["pacer_rule"] in note
    assert views.column_note(AppContext(context.target, context.drafter, preverifier_kind="trained"), session, "fixed") is None


def test_sessions_of_two_clicks_do_not_share_a_cancel_flag(context):
    first = next(handlers.run(context, inputs())).session
    second = next(handlers.run(context, inputs())).session
    handlers.stop(first)
    assert isinstance(first.cancel, threading.Event) and first.cancel.is_set() and not second.cancel.is_set()


def test_the_replay_ends_on_the_race_s_last_instant_not_a_frame_later(context):
    from pacer_core.ui import race

    session = handlers.new_session(context, inputs(measure_ar=True))
    list(time_each_alone(session))
    scoring_may_end, analyse = threading.Event(), session.analyse
    session.analyse = lambda: (scoring_may_end.wait(30), analyse())      # the scoring outlasts the race
    now, frames = [0.0], []

    def sleep(seconds):
        now[0] += seconds

    replay = race_replay.replay_race(context, session, frame_s=0.3, clock=lambda: now[0], sleep=sleep)
    try:
        while True:
            update = next(replay)
            if "Replay" in (update.status or ""):
                frames.append(now[0])
            else:
                scoring_may_end.set()
    except StopIteration as end:
        assert end.value is not None and end.value.table is not None    # the finished view
    race_end = race.duration(race.lanes_of(session)) / race.REPLAY_SPEED
    assert frames[0] == 0.0 and all(0 < later - earlier <= 0.3 + 1e-9 for earlier, later in zip(frames, frames[1:]))
    assert frames[-1] == pytest.approx(race_end, abs=1e-6)


def test_the_replay_carries_no_chart_and_the_finished_table_goes_out_before_the_charts(context, monkeypatch):
    """Drawing nine charts is one long task for the browser: no replay frame carries one (the thread builds the
    eight that need no scoring meanwhile), and the finished page is two frames, the table and columns first, its
    status marked as drawing the charts (style.css hides the last Run's), then the same view with every chart."""
    built, plots_view = [], race_replay.plots_view

    def recording_plots_view(session, names=None):
        built.append(set(names))
        return plots_view(session, names)

    monkeypatch.setattr(race_replay, "plots_view", recording_plots_view)
    updates = list(handlers.run(context, inputs(measure_ar=True), frame_s=0.0))
    replay = [update for update in updates if "Replay of the race" in (update.status or "")]
    assert replay and all(update.plots is None for update in replay)
    assert built[0] == set(charts.chart_names()) - charts.scored_names()          # built beside the replay
    table_first, with_charts = updates[-2], updates[-1]
    assert table_first.plots is None and table_first.table is not None and 'data-charts="pending"' in table_first.status
    assert set(with_charts.plots) == set(charts.chart_names()) and with_charts.session.oracle
    assert with_charts.table is table_first.table and with_charts.columns == table_first.columns   # nothing redrawn
    assert "data-charts" not in with_charts.status and "run-done" in with_charts.status
    assert with_charts.status == table_first.status.replace(' data-charts="pending"', "")


def test_the_replay_s_first_frame_says_each_lane_is_starting(context):
    """At the race's first instant no lane has an event yet: each column says it is starting, not how to start."""
    from pacer_core.ui import race

    session = handlers.new_session(context, inputs(measure_ar=True))
    list(time_each_alone(session))
    first = next(race_replay.replay_race(context, session, clock=lambda: 0.0, sleep=lambda seconds: None))
    for method in session.runs:
        assert race.STARTING in first.columns[method] and "Press Run" not in first.columns[method], method


def test_the_warm_up_runs_every_method_and_scores_them_with_the_page_s_starting_settings(context, monkeypatch):
    """app.py warms every method once before serving, so a visitor's first Run is timed like every later one."""
    from pacer_core.ui import session as session_module
    stepped, analysed = set(), []
    advance_one, analyse = session_module.RunSession.advance_one, session_module.RunSession.analyse

    def recording_advance_one(self, run):
        stepped.add(run.method)
        return advance_one(self, run)

    def recording_analyse(self):
        analysed.append((self.settings["temperature"], self.settings["max_new_tokens"]))
        return analyse(self)
    monkeypatch.setattr(session_module.RunSession, "advance_one", recording_advance_one)
    monkeypatch.setattr(session_module.RunSession, "analyse", recording_analyse)
    assert handlers.warm_up(context, prompt="t1 t2") > 0
    assert stepped >= set(column_keys()) | {"ar"}
    assert (0.7, 4) in analysed       # the page starts sampling, so the scoring passes are warmed too (other
                                      # tests' replays may still be scoring on their own threads meanwhile)


def test_a_page_gets_the_charts_once_it_has_painted_the_finished_table(context):
    """With a page that acknowledges frames, the charts frame waits for the table frame's acknowledgement: the
    browser's long chart-drawing task must not land before the table is on screen."""
    frames, waited = DrawnFrames(), []
    wait = frames.wait
    frames.wait = lambda token, timeout=5.0: (waited.append(token), wait(token, timeout))[1]
    finished = ViewUpdate(plots={"timeline": object()}, table="table", columns={"fixed": "column"})
    updates = handlers.table_then_charts(finished, lambda pending, drawn=None: views.final_status(
        handlers.new_session(context, inputs()), 0.0, 1.0, pending, drawn), frames)
    table_first = next(updates)
    token = table_first.status.split('data-drawn="')[1].split('"')[0]
    assert table_first.plots is None and not waited
    frames.acknowledge(token)
    with_charts = next(updates)
    assert waited == [token] and with_charts.plots and "data-drawn" not in with_charts.status
    assert frames.pending() == 0
