"""Replay (pacer_core/ui/replay.py) against the live page: a run of the tiny random pair, exported and replayed,
shows the same column HTML, metrics table, narration and figures as the live page did, click for click
through Step and at the finished page. The shipped recordings (assets/traces) open and show what the
workshop guide says about them. A 512-token trace opens and shows its first step within a second."""
from __future__ import annotations

import json
import time

import pytest

from pacer_core.drafters import LoadedDrafters
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import handlers
from pacer_core.ui.page_types import AppContext, PageInputs
from pacer_core.trace import TraceError
from pacer_core.ui import replay as replay_module
from pacer_core.ui.replay import Replay, check_drawable, open_trace, open_trace_file, replay_view, shipped_traces
from pacer_core.ui.workshop import load_workshop, recorded_runs

RECORDED = recorded_runs(load_workshop())


@pytest.fixture(scope="module")
def context():
    target, drafter = tiny_pair()
    return AppContext(target, drafter)


def inputs(temperature: float, tokens: int = 10) -> PageInputs:
    return PageInputs("t1 t2", {"max_new_tokens": tokens, "temperature": temperature, "seed": 3}, measure_ar=True)


def figures(update) -> dict | None:
    return None if update.plots is None else {name: figure.to_json() for name, figure in update.plots.items()}


def assert_same_view(replayed, live) -> None:
    """The columns, table and narration the live page showed (figures too, where it drew them)."""
    assert replayed.columns == live.columns
    assert replayed.table.equals(live.table)
    assert replayed.narration == live.narration
    if live.plots is not None:
        assert figures(replayed) == figures(live)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_replayed_run_shows_what_the_live_page_showed(context, temperature):
    *_, final = handlers.run(context, inputs(temperature))
    with open(final.downloads[0], "rb") as file:
        replay = open_trace(file.read())
    assert_same_view(replay_view(replay.end()), final)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_replayed_steps_show_what_live_step_through_showed(context, temperature):
    """Every Step click: pass j drafted, its verdict, ..., then the finished page."""
    clicks, session = [], None
    while not clicks or "run-done" not in (clicks[-1].status or ""):
        *_, update = handlers.step(context, inputs(temperature, tokens=6), session)
        clicks.append(update)
        session = update.session
    replay = open_trace(json.dumps(session.trace()))
    assert replay.last_click == len(clicks)
    for click, live in enumerate(clicks, 1):
        replayed = replay_view(Replay(replay.recorded, click))
        assert_same_view(replayed, live)
        assert (replayed.plots is None) == (live.plots is None) or click == 1   # the first click clears old plots


def test_step_start_and_end_stay_within_the_run(context):
    *_, final = handlers.run(context, inputs(0.8, tokens=4))
    replay = open_trace(json.dumps(final.session.trace()))
    assert replay.start().clicks == 1 and replay.end().finished and replay.end().step().clicks == replay.last_click
    assert "pass 1 of" in replay_view(replay).status and "drafted" in replay_view(replay).status
    assert "verified" in replay_view(replay.step()).status


def test_a_trace_the_renderers_cannot_draw_is_refused_in_one_line(context, monkeypatch):
    *_, final = handlers.run(context, inputs(0.8, tokens=4))
    replay = open_trace(json.dumps(final.session.trace()))
    check_drawable(replay)

    def broken(session, names=None):
        raise ZeroDivisionError("a renderer met numbers it cannot draw")

    monkeypatch.setattr(replay_module, "plots_view", broken)
    with pytest.raises(TraceError, match="inconsistent.*ZeroDivisionError"):
        check_drawable(replay)


# ---------------------------------------------------------------- the shipped recordings (no model)

@pytest.mark.pure
def test_every_recorded_exercise_run_is_shipped_small_and_opens():
    listed = shipped_traces()
    assert {item.path for item in RECORDED} == set(listed.values())
    for item in RECORDED:
        assert item.path.stat().st_size < 300_000, item.path.name
        replay = open_trace_file(item.path)
        assert replay.recorded.title == item.title and listed[item.title] == item.path
        assert "SmolLM2" in replay.recorded.pair["target"] and replay.recorded.drafter == (item.run.drafter or "small")
        assert replay.recorded.settings["max_new_tokens"] == item.run.settings["max_new_tokens"]
        assert "ar" in replay.recorded.results                     # speedups against AR, as the guide asks
        check_drawable(replay)


def recorded(exercise_id: str, index: int = 1):
    return open_trace_file(next(item.path for item in RECORDED if item.exercise.id == exercise_id
                                and item.run is item.exercise.runs[index - 1])).recorded


@pytest.mark.pure
def test_the_recordings_show_what_the_guide_says():
    easy, hard = (recorded("easy-and-hard", index).results["fixed"].metrics for index in (1, 2))
    assert hard.alpha < easy.alpha
    pacer = recorded("preverifier-stop").results["pacer"].events
    assert any(event.stop_reason == "preverifier" for event in pacer)
    phrases = recorded("phrase-drafts").results["pacer"].events
    assert any(block.phrase for event in phrases for block in event.blocks)
    greedy = recorded("greedy-and-sampling", 1)
    assert all(greedy.results[m].token_ids == greedy.results["ar"].token_ids for m in ("fixed", "pacer"))
    small, close = recorded("smc-particles", 1), recorded("smc-particles", 2)
    assert any(event.resampled for event in small.results["smc"].events)
    assert close.proposal_kl < small.proposal_kl


# ---------------------------------------------------------------- speed

def long_trace(tokens: int = 512) -> bytes:
    """A sampling run of ``tokens`` new tokens of the tiny pair (its context widened), AR measured, exported."""
    target, drafter = tiny_pair()
    for model in (target.model, drafter.model):
        model.config.max_position_embeddings = 4 * tokens
    *_, final = handlers.run(AppContext(target, drafter), inputs(0.8, tokens=tokens))
    with open(final.downloads[0], "rb") as file:
        return file.read()


@pytest.mark.slow
def test_a_512_token_trace_shows_its_first_step_within_a_second():
    data = long_trace(512)
    replay = open_trace(data)
    assert all(len(result.token_ids) == 512 for result in replay.recorded.results.values())
    started = time.perf_counter()
    replay_view(open_trace(data))
    seconds = time.perf_counter() - started
    print(f"512-token trace ({len(data) / 1024:.0f} KB): opened and first step drawn in {seconds:.3f} s")
    assert seconds < 1.0


# ---------------------------------------------------------------- the pages

def tab_ids(demo) -> set:
    import gradio as gr

    return {block.id for block in demo.blocks.values() if isinstance(block, gr.Tab)}


def test_the_live_page_has_the_replay_tab_and_replay_only_has_no_live_demo():
    from pacer_core.ui.layout import build_ui
    from pacer_core.ui.replay_tab import build_replay_ui

    target, drafter = tiny_pair()
    assert {"live", "replay"} <= tab_ids(build_ui(target, LoadedDrafters.around(drafter)))
    assert tab_ids(build_replay_ui()) == {"replay", "explain"}
