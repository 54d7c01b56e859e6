"""Run times each method alone, then replays the columns at the pace each ran (ui/race.py): the pure lane
arithmetic, and the Run handler's two phases on a tiny random pair."""
from __future__ import annotations

import threading

import pytest

from pacer_core.method_table import column_keys
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import handlers, race, timing_turn
from pacer_core.ui.frames import DrawnFrames
from pacer_core.ui.page_types import AppContext, PageInputs, ViewUpdate
from pacer_core.ui.timing_turn import TimingTurn


@pytest.fixture(scope="module")
def context():
    target, drafter = tiny_pair()
    return AppContext(target, drafter)


def inputs(measure_ar=True, **settings) -> PageInputs:
    return PageInputs("t1 t2", {"max_new_tokens": 12, "temperature": 0.8, "seed": 3} | settings, chat=False,
                      measure_ar=measure_ar)


def lane(method="fixed", seconds=(0.1, 0.3, 0.6), tokens=(2, 5, 8), total=0.7) -> race.Lane:
    return race.Lane(method, tuple(seconds), tuple(tokens), total)


def test_a_lane_shows_the_events_that_had_arrived_by_then():
    fixed = lane()
    assert [race.shown(fixed, t) for t in (0.0, 0.1, 0.29, 0.3, 0.65, 5.0)] == [0, 1, 1, 2, 3, 3]
    assert not race.finished(fixed, 0.69) and race.finished(fixed, 0.7)


def test_the_race_lasts_as_long_as_its_slowest_lane_and_says_who_finished():
    fast, slow = lane("pacer", total=0.5), lane("ar", (0.2, 0.4, 0.9), (1, 2, 3), 1.0)
    assert race.duration([fast, slow]) == 1.0 and race.duration([]) == 0.0
    line = race.race_line([fast, slow], 0.45)
    assert "PACER 5 tokens" in line and "AR 2 tokens" in line
    line = race.race_line([fast, slow], 0.8)
    assert "PACER ✓ 0.50 s" in line and "AR 2 tokens" in line
    assert "1.0 s" in race.race_line([fast, slow], 3.0)          # the clock stops at the end


def test_the_explain_tab_states_the_replays_speed():
    """The Explain tab tells how fast the race replays: the number the race uses, not an older one."""
    from pacer_core.ui.widgets import EXPLAIN_PATH

    import re

    stated = re.findall(r"sped up (\d+(?:\.\d+)?)x", EXPLAIN_PATH.read_text(encoding="utf-8"))
    assert stated and all(float(speed) == race.REPLAY_SPEED for speed in stated), stated


def test_run_times_each_method_alone_one_after_another(context, monkeypatch):
    order = []
    advance_one = handlers.RunSession.advance_one

    def recording(session, run):
        order.append(run.method)
        return advance_one(session, run)

    monkeypatch.setattr(handlers.RunSession, "advance_one", recording)
    updates = list(handlers.run(context, inputs(), frame_s=0.0))
    runs = [method for index, method in enumerate(order) if index == 0 or order[index - 1] != method]
    assert runs == ["fixed", "pacer", "smc", "ar"] * timing_turn.MAX_PASSES     # one block of steps each, and the
    session = updates[-1].session                                    # tiny pair's short passes timed thrice
    for run in list(session.runs.values()) + [session.ar]:
        assert run.event_seconds == sorted(run.event_seconds) and len(run.event_seconds) == len(run.events)
        assert run.event_seconds[-1] <= run.busy_seconds
        assert run.busy_seconds == min(session.pass_seconds[run.method])            # each keeps its fastest pass
    table = updates[-1].table.set_index("method")
    assert table.loc["Autoregressive (AR)", "seconds"] == round(session.ar.busy_seconds, 3)
    assert "each method timed alone (best of 3)" in updates[-1].status
    assert session.trace()["pass_seconds"] == session.pass_seconds


def test_a_run_times_its_methods_again_only_while_its_passes_are_short():
    """The number of passes follows the first pass's seconds: one when it takes the floor or more, enough to reach
    the floor otherwise, never more than the cap."""
    assert timing_turn.timing_passes(2.5, 2.5) == 1 and timing_turn.timing_passes(12.0, 2.5) == 1
    assert timing_turn.timing_passes(1.3, 2.5) == 2 and timing_turn.timing_passes(0.9, 2.5) == 3
    assert timing_turn.timing_passes(0.01, 2.5, max_passes=3) == 3 and timing_turn.timing_passes(0.0, 2.5) == 1


def test_a_later_pass_keeps_the_faster_run_with_the_same_tokens_and_records_every_pass(context):
    session = handlers.new_session(context, inputs())
    list(timing_turn.time_each_alone(session, min_timed_s=0.0))                     # one pass
    assert session.timing_pass_count() == 1 and session.pass_seconds == {}
    first = session.runs["fixed"]
    slower = session.new_run("fixed")
    while not slower.done:
        session.advance_one(slower)
    slower.busy_seconds = first.busy_seconds + 1.0
    session.keep_faster(slower)
    assert session.runs["fixed"] is first and session.pass_seconds["fixed"] == [first.busy_seconds,
                                                                                 first.busy_seconds + 1.0]
    faster = session.new_run("fixed")
    while not faster.done:
        session.advance_one(faster)
    faster.busy_seconds = first.busy_seconds / 2
    other = session.new_run("fixed")
    while not other.done:
        session.advance_one(other)
    other.busy_seconds, other.result.token_ids = 0.0, other.result.token_ids[:-1]   # other tokens: never kept
    session.keep_faster(other)
    session.keep_faster(faster)
    assert session.runs["fixed"] is faster and len(session.pass_seconds["fixed"]) == 4
    assert session.timing_pass_count() == 4


def test_stop_in_a_later_pass_leaves_the_first_pass_s_figures(context):
    session = handlers.new_session(context, inputs(max_new_tokens=40))
    frames, updates = DrawnFrames(), []
    for update in timing_turn.time_each_alone(session, frames, min_timed_s=1e9):
        updates.append(update)
        frames.acknowledge(update.status.split('data-drawn="')[1].split('"')[0])
        if "pass 2 of 3" in update.status and "2 of 4" in update.status:
            session.stop()                                          # during pass 2's PACER turn
    assert "Timing alone again (pass 2 of 3)" in updates[4].columns["fixed"]
    assert "A short Run is timed 3 times" in updates[4].status and "AR took" in updates[4].status
    assert len(updates) == 6 and not session.stopped
    assert all(run.result is not None and run.result.finish_reason != "cancelled" for run in session.all_runs())
    assert len(session.pass_seconds["pacer"]) == 2 and "smc" not in session.pass_seconds


def test_a_page_gets_one_frame_per_turn_and_nothing_while_a_method_decodes(context):
    """With a page that acknowledges frames: one update per method's turn, each sent before its decoding starts
    and drawn (acknowledged) before its first step; no update between two steps."""
    frames = DrawnFrames()
    session = handlers.new_session(context, inputs())
    timeline = []
    advance_one = session.advance_one

    def recording(run):
        timeline.append(("step", run.method))
        return advance_one(run)

    session.advance_one = recording
    updates = []
    for update in timing_turn.time_each_alone(session, frames, clock=iter(range(0, 10_000)).__next__, check_s=1.0,
                                                   min_timed_s=0.0):   # one pass
        token = update.status.split('data-drawn="')[1].split('"')[0]
        timeline.append(("frame", token))
        updates.append(update)
        frames.acknowledge(token)                                   # the page drew it
    assert len(updates) == 4                                       # each method's turn, nothing else
    assert [kind for kind, _ in timeline].count("frame") == 4
    methods = [value for kind, value in timeline if kind == "step"]
    assert [method for index, method in enumerate(methods) if index == 0 or methods[index - 1] != method] == \
        ["fixed", "pacer", "smc", "ar"]
    for index, (kind, _) in enumerate(timeline):                   # a frame only before a method's first step
        if kind == "frame" and index:
            assert timeline[index + 1][1] != timeline[index - 1][1]
    assert all(len(update.columns) == len(session.runs) for update in updates)
    assert all(update.plots is None and update.narration is None for update in updates)
    assert all("Timing each method alone" in update.status for update in updates)
    assert "took" not in updates[0].status and "fixed SD took" in updates[1].status
    first = updates[0].columns
    assert "Timing alone now" in first["fixed"] and "Waits its turn" in first["smc"]
    assert frames.pending() == 0


def test_a_turn_waits_until_its_frame_is_drawn(context, monkeypatch):
    """Decoding starts only once the page acknowledged the turn's frame (the wait comes before any step)."""
    frames = DrawnFrames()
    session = handlers.new_session(context, inputs())
    waited = []
    monkeypatch.setattr(frames, "wait", lambda token, timeout=0: waited.append((token, session.runs["fixed"].events[:])))
    timing = timing_turn.time_each_alone(session, frames)
    first = next(timing)
    assert 'data-drawn="' in first.status
    next(timing)
    token, events_before = waited[0]
    assert token in first.status and events_before == []           # no step before the wait


def test_a_turn_decodes_once_the_cores_have_settled_after_the_drawn_frame(context, monkeypatch):
    """After the page's acknowledgement a turn waits for quiet cores (``settled``, ui/settle.py) before its first
    step, once per turn; its seconds add up in the trace's phase seconds. An API client (no frames) never waits."""
    frames = DrawnFrames()
    session = handlers.new_session(context, inputs())
    order = []
    wait = frames.wait
    monkeypatch.setattr(frames, "wait", lambda token, timeout=5.0: order.append("drawn") or wait(token, timeout))
    advance_one = session.advance_one
    session.advance_one = lambda run: order.append(run.method) or advance_one(run)

    def settled():
        order.append("settled")
        return 0.125

    for update in timing_turn.time_each_alone(session, frames, min_timed_s=0.0, settled=settled):
        frames.acknowledge(update.status.split('data-drawn="')[1].split('"')[0])
    turns = [index for index, entry in enumerate(order) if entry == "drawn"]
    assert len(turns) == 4 and all(order[index + 1] == "settled" for index in turns)
    assert all(order[index + 2] in ("fixed", "pacer", "smc", "ar") for index in turns)
    assert session.phase_seconds["settling"] == pytest.approx(0.5)
    api = handlers.new_session(context, inputs())
    list(timing_turn.time_each_alone(api, min_timed_s=0.0, settled=lambda: pytest.fail("an API client waited")))
    assert "settling" not in api.phase_seconds


def test_an_api_client_gets_its_line_again_between_steps_and_a_left_client_stops_the_run(context):
    ticks = iter(range(0, 10_000))
    session = handlers.new_session(context, inputs())
    updates = list(timing_turn.time_each_alone(session, clock=lambda: next(ticks) * 0.3, check_s=1.0,
                                                min_timed_s=0.0))                    # one pass
    lines = [update for update in updates if update.columns is None]   # the turn's line again: where Gradio can
    assert lines and all(update == ViewUpdate(status=update.status) for update in lines)   # end a Run
    assert all("data-drawn" not in update.status for update in updates)         # that lost its client
    assert len(updates) - len(lines) == 4
    session = handlers.new_session(context, inputs(max_new_tokens=40))
    updates = list(timing_turn.time_each_alone(session, DrawnFrames(), check=lambda: False, check_s=0.0))
    assert session.cancel.is_set() and session.runs["fixed"].result.finish_reason == "cancelled"
    assert all(session.runs[method].skipped for method in ("pacer", "smc"))


def test_the_replay_ends_with_every_column_finished_at_its_own_time(context):
    updates = list(handlers.run(context, inputs(), frame_s=0.0))
    replay = [update for update in updates if update.status and "Replay of the race" in update.status]
    assert replay, "the columns were never replayed"
    assert all(set(update.columns) == set(column_keys()) for update in replay)
    assert "AR" in replay[-1].status                              # AR is a lane of the race
    final = updates[-1]                                           # every column's end (no last frame drawn first)
    assert "run-done" in final.status and race.HOW_TIMED in final.status
    assert all("badge-done" in final.columns[method] for method in column_keys())


def test_stop_during_the_replay_skips_to_the_end_and_keeps_every_result(context):
    run = handlers.run(context, inputs(), frame_s=10.0)         # a frame every 10 s: Stop must not wait for it
    session = next(run).session
    update = next(run)
    while "Replay of the race" not in (update.status or ""):
        update = next(run)
    handlers.stop(session)
    *_, final = run
    assert "replay skipped" in final.status and "Stopped." not in final.status
    assert all(run.result is not None and run.result.finish_reason != "cancelled" for run in session.runs.values())
    assert session.ar.result is not None


def test_stop_while_timing_skips_the_methods_whose_turn_never_came(context):
    run = handlers.run(context, inputs(max_new_tokens=40))
    session = next(run).session
    next(run)                                                    # the first method's turn begins
    handlers.stop(session)
    *_, final = run
    assert "Stopped." in final.status
    assert session.runs["fixed"].result.finish_reason == "cancelled"
    assert all(session.runs[method].skipped for method in ("pacer", "smc"))
    assert "stopped before its turn" in final.columns["pacer"] and "Not run" in final.status
    assert "not run" in " ".join(final.table["method"])


class Visitor:
    """A stand-in for another visitor's RunSession: what a turn reads of its holder."""

    def __init__(self):
        self.cancel = threading.Event()


def test_a_second_run_waits_while_another_is_timing_its_methods(context):
    other = Visitor()
    assert timing_turn.TIMING_TURN.take(other)                       # another visitor's run is timing
    try:
        run = handlers.run(context, inputs())
        session = next(run).session
        assert "Waiting for another run" in next(run).status
        assert not any(r.events for r in session.runs.values())  # nothing decoded meanwhile
        handlers.stop(session)
        *_, final = run
    finally:
        timing_turn.TIMING_TURN.release(other)
    assert "Stopped." in final.status
    assert all("before its turn" in r.error for r in session.runs.values())


def test_a_run_abandoned_mid_timing_does_not_block_the_next(context):
    """A visitor closes the tab during the timing phase: Gradio stops pulling their Run, never closing it. Once
    that Run is stopped (or unseen for the stale time) the next Run times its methods."""
    abandoned = handlers.run(context, inputs(max_new_tokens=40))
    left = next(abandoned).session
    next(abandoned)                                               # its first method's turn began; never resumed
    assert timing_turn.TIMING_TURN.holder() is left
    handlers.stop(left)
    *_, final = handlers.run(context, inputs())
    assert all(run.result is not None for run in final.session.runs.values())
    abandoned.close()                                             # its late cleanup leaves the turn alone
    assert timing_turn.TIMING_TURN.holder() is None


@pytest.mark.pure
def test_a_turn_passes_on_when_its_holder_stops_or_goes_quiet():
    now = [0.0]
    turn = TimingTurn(stale_s=15.0, clock=lambda: now[0])
    first, second = Visitor(), Visitor()
    assert turn.take(first) and not turn.take(second)
    now[0] = 14.0
    turn.seen(first)
    now[0] = 28.0
    assert not turn.take(second)                                  # seen 14 s ago: still timing
    now[0] = 29.5
    assert turn.take(second) and turn.holder() is second          # quiet for 15.5 s: gone
    turn.release(first)                                           # the old holder's late release changes nothing
    assert turn.holder() is second
    second.cancel.set()
    assert turn.take(first)                                       # a stopped holder gives way at once
    turn.release(first)
    assert turn.holder() is None
