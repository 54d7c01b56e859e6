"""The page's incremental column state (pacer_core/ui/live.py) equals a full re-render of the same events:
after every event of real runs on a tiny pair, of hand-built runs with hostile token text, and of SMC-SD
runs that resample every cycle (the leader and the histories change under the kept pieces). Also: what a
streamed update carries under Gradio's diff (only the new step, not the trace)."""
from __future__ import annotations

import random

import pytest

from pacer_core.events import SMCCycleEvent, StepEvent, TokenRecord
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import columns
from pacer_core.ui.live import LiveColumns, column_markup
from pacer_core.ui.session import RunSession

NASTY = ["<script>alert(1)</script>", "a & b", "${x}", "{{y}}", "`z`", "\n", "\t", "\u200b", "\u202e", "\ufffd",
         "é", " ", "", "<b>", "'\""]


def assert_same_as_full_render(live: LiveColumns, method: str, events: list, note: str | None = None) -> object:
    value = live.value(method, events, note=lambda: note)
    assert column_markup(value) == columns.column_html(method, events, running=True, note=note)
    return value


@pytest.mark.parametrize("settings", [{"temperature": 0.8, "seed": 3},
                                      {"temperature": 0.9, "seed": 5, "ess_threshold": 1.0, "n_particles": 6},
                                      {"temperature": 1.0, "seed": 1, "draft_len": 1, "phrase_len": 2}])
def test_columns_of_a_real_run_equal_the_full_render_after_every_step(settings):
    target, drafter = tiny_pair()
    session = RunSession(target, drafter, "t1 t2 t3", {"max_new_tokens": 60} | settings, chat=False)
    live = LiveColumns()
    while not session.finished:
        session.advance()
        for method, run in session.runs.items():
            if not run.done:
                value = assert_same_as_full_render(live, method, run.events, note="a note")
                assert isinstance(value, dict)
    for method, run in session.runs.items():          # finished: the full column, rendered once
        done = live.value(method, run.events, run.result, run.error, note=lambda: "done")
        assert done == columns.column_html(method, run.events, run.result, run.error, note="done")
        assert live.value(method, run.events, run.result, run.error, note=lambda: "other") is done


def random_tokens(rng: random.Random, count: int) -> list[TokenRecord]:
    states = ["accepted", "rejected", "discarded"]
    tokens = [TokenRecord(rng.randrange(100), rng.choice(NASTY) + rng.choice(NASTY), rng.choice(states),
                          draft_prob=rng.random(), target_prob=rng.random(), accept_prob=rng.random(),
                          block=rng.choice([None, 0, 1]), phrase=rng.random() < 0.2, stopped=rng.random() < 0.1)
              for _ in range(count)]
    return tokens + [TokenRecord(rng.randrange(100), rng.choice(NASTY), rng.choice(["corrected", "bonus"]))]


@pytest.mark.parametrize("seed", range(5))
def test_hostile_step_text_renders_the_same_incrementally(seed):
    rng = random.Random(seed)
    events, total = [], 0
    live = LiveColumns()
    for step in range(30):
        tokens = random_tokens(rng, rng.randrange(0, 5))
        emitted = "".join(rng.choice(NASTY) for _ in range(rng.randrange(0, 3)))
        total += 1 + rng.randrange(3)
        events.append(StepEvent("pacer", step, tokens, [1], emitted, len(tokens) - 1, rng.randrange(len(tokens)),
                                0.01, 0.02, total))
        assert_same_as_full_render(live, "pacer", events)


@pytest.mark.parametrize("seed", range(5))
def test_smc_histories_follow_resampling_incrementally(seed):
    """Hand-built cycles with random resampling, finished particles (no new tokens) and hostile text."""
    rng = random.Random(seed)
    n, events, total, leader = rng.choice([2, 4, 7]), [], 0, ""
    live = LiveColumns()
    for step in range(25):
        weights = [rng.random() + 1e-3 for _ in range(n)]
        weights = [w / sum(weights) for w in weights]
        resampled = rng.random() < 0.5
        ancestors = sorted(rng.randrange(n) for _ in range(n)) if resampled else list(range(n))
        tokens = [[TokenRecord(rng.randrange(50), rng.choice(NASTY), rng.choice(["drafted", "bonus"]))
                   for _ in range(rng.choice([0, 1, 3]))] for _ in range(n)]
        total += 3
        leader = leader + rng.choice(NASTY) if rng.random() < 0.7 else rng.choice(NASTY) * 2
        events.append(SMCCycleEvent("smc", step, ["".join(t.text for t in row) for row in tokens],
                                    [[t.token_id for t in row] for row in tokens], [0.0] * n, weights,
                                    1.0 / sum(w * w for w in weights), 0.5, resampled, ancestors, [False] * n,
                                    0.01, 0.02, total, leader_text=leader, particle_tokens=tokens))
        assert_same_as_full_render(live, "smc", events, note="SMC note")


def test_a_streamed_update_carries_the_new_step_not_the_trace():
    """Gradio sends a generator's outputs as diffs against the previous value (gradio.utils.diff): a running
    column sends its counters, the new answer piece and the new step; the earlier steps are not re-sent."""
    from gradio.utils import diff

    target, drafter = tiny_pair()
    session = RunSession(target, drafter, "t1 t2 t3", {"max_new_tokens": 60, "temperature": 0.8, "seed": 1}, chat=False)   # 8 steps
    live, previous, sizes = LiveColumns(), None, []
    while not session.finished:
        session.advance()
        run = session.runs["pacer"]
        if run.done:
            break
        value = live.value("pacer", run.events)
        if previous is not None:
            edits = diff(previous, value)
            assert {path[0] for _, path, _ in edits} <= {"head", "answer", "trace"}
            assert all(action in ("replace", "add") for action, _, _ in edits)
            new_step = columns.step_html(run.events[-1])
            assert ["add", ["trace", len(run.events) - 1], new_step] in edits
            sizes.append(sum(len(str(edit[2])) for edit in edits))
        previous = value
    assert len(sizes) > 5 and max(sizes) < 3 * len(column_markup(previous)) / len(run.events) + 2000
