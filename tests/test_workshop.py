"""The workshop guide (docs/workshop.md) replayed. Its exercises live in one file, assets/workshop.json: the
guide is rendered from it (and must equal the committed guide), every exercise runs through the app's own
handlers on the embedded pair with the guide's settings, and the test asserts what the guide tells the class
to look for. The step-through exercise also runs in the browser, picked from the page's example list."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_process import browser_marks

from pacer_core.testing.app_runner import set_max_new_tokens
from pacer_core.ui import handlers, timeline
from pacer_core.ui.drafter_menu import DrafterMenu
from pacer_core.ui.drafter_switch import drafter_context
from pacer_core.ui.page_types import AppContext, PageInputs
from pacer_core.ui.workshop import GUIDE_PATH, load_examples, load_workshop, render_guide, starting_settings

ROOT = Path(__file__).resolve().parent.parent
WORKSHOP = load_workshop()
DEFAULT_PROMPT = "Write a Python function that returns the factorial of n."


# ---------------------------------------------------------------- the guide and the page's list (no model)

@pytest.mark.pure
def test_the_committed_guide_is_the_one_rendered_from_the_exercises():
    assert GUIDE_PATH.read_text(encoding="utf-8") == render_guide(WORKSHOP), \
        "docs/workshop.md is out of date: run .venv/bin/python -m pacer_core.ui.workshop"


@pytest.mark.pure
def test_the_exercises_use_the_pages_examples_and_fit_a_class():
    examples = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))
    assert examples[0]["prompt"] == DEFAULT_PROMPT                  # the page's default prompt stays first
    labels = [item["label"] for item in examples]
    assert len(labels) == len(set(labels))
    used = {run.example for exercise in WORKSHOP.exercises for run in exercise.runs}
    assert used <= set(load_examples())
    assert 6 <= len(WORKSHOP.exercises) <= 8 and 60 <= WORKSHOP.minutes <= 90
    assert set(CHECKS) == {exercise.id for exercise in WORKSHOP.exercises}   # every exercise is replayed


@pytest.mark.pure
def test_an_unknown_example_label_is_refused(tmp_path):
    raw = json.loads((ROOT / "assets" / "workshop.json").read_text(encoding="utf-8"))
    raw["exercises"][0]["runs"][0]["example"] = "No such example"
    path = tmp_path / "workshop.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ValueError, match="No such example"):
        load_workshop(path)


# ---------------------------------------------------------------- replaying the exercises (embedded pair)

@pytest.fixture(scope="module")
def context(embedded_target, embedded_drafters):
    """The app's context as build_ui makes it: the pair, its pre-verifier and the drafter menu."""
    from pacer_core.preverifier import default_preverifier

    drafter = embedded_drafters.default
    preverifier = default_preverifier(embedded_target, drafter)
    return AppContext(embedded_target, drafter, preverifier, getattr(preverifier, "kind", "heuristic"),
                      drafter_menu=DrafterMenu(embedded_target, embedded_drafters, preverifier))


def page_inputs(context, run) -> PageInputs:
    """What the page sends after the class followed the run: the settings as the page starts them (γ where the
    chosen drafter moves it) with the run's changes, the pair's chat template, the AR baseline measured, and the
    chosen drafter."""
    chosen = drafter_context(context, run.drafter).drafter
    settings = starting_settings(context.target, chosen, context.preverifier, context.limits) | run.settings
    return PageInputs(run.prompt, settings, chat=context.target.use_chat_template, measure_ar=True,
                      drafter=run.drafter)


_REPLAYS: dict = {}


def replay(context, run) -> list:
    """The run's ViewUpdates: Run's last one, or the last one of every Step click (cached per module)."""
    inputs = page_inputs(context, run)
    key = (inputs.key(), run.drafter, run.step_clicks)
    if key not in _REPLAYS:
        if run.step_clicks:
            updates, session = [], None
            for _ in range(run.step_clicks):
                *_, update = handlers.step(context, inputs, session)
                session = update.session
                updates.append(update)
        else:
            *_, final = handlers.run(context, inputs)
            updates = [final]
        assert all(update.session is not None for update in updates), updates[-1].status
        _REPLAYS[key] = updates
    return _REPLAYS[key]


def session_of(context, run):
    return replay(context, run)[-1].session


def token_states(markup: str) -> set[str]:
    return {state for state in ("drafted", "accepted", "rejected", "corrected", "bonus")
            if f'data-state="{state}"' in markup}


def check_step_through(context, exercise):
    (run,) = exercise.runs
    drafted, verified = replay(context, run)
    assert "drafted;" in drafted.status and drafted.plots is None           # the verdict is not given away
    for method in ("fixed", "pacer"):
        assert token_states(drafted.columns[method]) == {"drafted"}, method
    assert "particles drafted" in drafted.narration
    assert "verified;" in verified.status
    states = token_states(verified.columns["fixed"])
    assert "drafted" not in states and states & {"accepted", "rejected"} and states & {"corrected", "bonus"}
    assert all(len(method_run.events) == 1 for method_run in verified.session.runs.values())


def check_easy_and_hard(context, exercise):
    easy, hard = (session_of(context, run).runs["fixed"].result.metrics for run in exercise.runs)
    print(f"fixed-length SD: easy alpha {easy.alpha:.2f} tau {easy.tau:.2f}, hard alpha {hard.alpha:.2f} "
          f"tau {hard.tau:.2f}")
    assert hard.alpha < easy.alpha


def break_even_acceptance(point) -> float:
    """The α at which the operating point's speedup curve crosses 1 (it increases with α)."""
    low, high = 0.0, 1.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if point.curve([middle])[0] < 1.0 else (low, middle)
    return (low + high) / 2


def check_when_drafting_pays(context, exercise):
    points = []
    for run in exercise.runs:
        session = session_of(context, run)
        ar_seconds = timeline.ar_seconds_per_token(session.ar.events)
        point = timeline.operating_point("fixed", session.runs["fixed"].events, ar_seconds)
        metrics = session.runs["fixed"].result.metrics
        start, end = point.curve([0.0, 1.0])
        print(f"gamma {run.settings['gamma']}: c {point.draft_cost:.3f} v {point.verify_cost:.2f} kept "
              f"{point.kept_fraction:.2f} curve(0) {start:.2f} curve(1) {end:.2f} break-even "
              f"{break_even_acceptance(point):.2f} speedup {point.speedup:.2f}")
        assert start < 1.0 < end                   # the same method loses at low acceptance and wins at high
        points.append((point, metrics.drafted_tokens / max(metrics.accepted_tokens, 1)))
    (short, short_cost), (long, long_cost) = points
    assert long.kept_fraction < short.kept_fraction and long_cost > short_cost
    measured_alpha = short.alpha_hat                   # long drafts lose more at the measured, low acceptance
    assert long.curve([measured_alpha])[0] < short.curve([measured_alpha])[0]
    # (at α = 1 the curves end close together on a CPU, where v grows with the rows verified: which ends higher
    # moves with the run's measured costs, γ = 8 1.29-1.98 against γ = 2 1.15-2.06 in four runs on this host, so it
    # is not checked)


def wasted_drafts(events) -> int:
    return sum(timeline.drafted_and_wasted(event)[1] for event in events)


def check_preverifier_stop(context, exercise):
    (run,) = exercise.runs
    session = session_of(context, run)
    fixed, pacer = session.runs["fixed"].events, session.runs["pacer"].events
    print(f"wasted drafted tokens: fixed {wasted_drafts(fixed)}, PACER {wasted_drafts(pacer)}")
    assert any(event.stop_reason == "preverifier" for event in pacer)
    assert any(token.stopped for event in pacer for token in event.tokens)        # the amber tokens
    assert wasted_drafts(pacer) < wasted_drafts(fixed)


def check_phrase_drafts(context, exercise):
    (run,) = exercise.runs
    pacer = session_of(context, run).runs["pacer"].events
    accepted = sum(token.phrase and token.state == "accepted" for event in pacer for token in event.tokens)
    print(f"accepted phrase tokens: {accepted}")
    assert any(block.phrase for event in pacer for block in event.blocks)
    assert accepted >= 1


def check_greedy_and_sampling(context, exercise):
    greedy_run, sampled_run = exercise.runs
    greedy = replay(context, greedy_run)[-1]
    ar = greedy.session.ar.result.token_ids
    for method in ("fixed", "pacer"):
        assert greedy.session.runs[method].result.token_ids == ar, method
    table = greedy.table.set_index("method")
    assert list(table.loc[["Fixed-length SD", "PACER"], "same_as_ar"]) == ["yes", "yes"]
    sampled = session_of(context, sampled_run)
    assert any(sampled.runs[method].result.token_ids != sampled.ar.result.token_ids for method in ("fixed", "pacer"))


def check_smc_particles(context, exercise):
    small_run, close_run = exercise.runs
    small = session_of(context, small_run)
    cycles = small.runs["smc"].events
    print(f"small draft: {sum(event.resampled for event in cycles)} of {len(cycles)} cycles resampled, "
          f"KL {small.proposal_kl:.2f} nats/token")
    assert any(event.resampled for event in cycles)
    close = session_of(context, close_run)
    close_cycles = close.runs["smc"].events
    print(f"gguf: {sum(event.resampled for event in close_cycles)} of {len(close_cycles)} cycles resampled, "
          f"KL {close.proposal_kl:.3f} nats/token")
    assert close.drafter.kind == "gguf"
    assert close.proposal_kl < small.proposal_kl
    mean_ess = [sum(event.ess for event in events) / len(events) for events in (cycles, close_cycles)]
    assert mean_ess[1] > mean_ess[0]                  # the weights stay more even with the closer drafter


CHECKS = {"step-through": check_step_through, "easy-and-hard": check_easy_and_hard,
          "when-drafting-pays": check_when_drafting_pays, "preverifier-stop": check_preverifier_stop,
          "phrase-drafts": check_phrase_drafts, "greedy-and-sampling": check_greedy_and_sampling,
          "smc-particles": check_smc_particles}


@pytest.mark.embedded
@pytest.mark.parametrize("exercise_id", [exercise.id for exercise in WORKSHOP.exercises])
def test_the_exercise_shows_what_the_guide_says(context, exercise_id):
    CHECKS[exercise_id](context, WORKSHOP.exercise(exercise_id))


# ---------------------------------------------------------------- one exercise in the browser

def with_marks(marks):
    def decorate(function):
        for mark in marks:
            function = mark(function)
        return function
    return decorate


@with_marks(browser_marks())
def test_the_step_through_exercise_in_the_browser(app_url, chromium_browser, embedded_target, embedded_drafters):
    """The class's clicks: the example picked from the page's list by its label, the guide's settings, Step
    twice; the first click shows drafts only, the second the target's verdict."""
    (run,) = WORKSHOP.exercise("step-through").runs
    start = starting_settings(embedded_target, embedded_drafters.default)
    changed = {name: value for name, value in run.settings.items() if start.get(name) != value}
    assert set(changed) <= {"max_new_tokens"}, f"this test sets only max new tokens, the guide changes {changed}"
    context = chromium_browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(180_000)
    try:
        page.goto(app_url)
        page.wait_for_selector("#run-button")
        page.click("#examples button.label-wrap")
        page.get_by_text(run.example, exact=True).click()
        page.wait_for_function(f"document.querySelector('#prompt textarea').value === {json.dumps(run.prompt)}")
        if "max_new_tokens" in changed:
            set_max_new_tokens(page, changed["max_new_tokens"])
        states = "m => [...document.querySelectorAll(`#col-${m} .tok`)].map(e => e.dataset.state)"
        page.click("#step-button")
        page.wait_for_function("document.querySelector('#run-status').innerText.includes('step 1 drafted')")
        for method in ("fixed", "pacer"):
            assert set(page.evaluate(states, method)) == {"drafted"}, method
        page.click("#step-button")
        page.wait_for_function("document.querySelector('#run-status').innerText.includes('step 1 verified')")
        fixed = set(page.evaluate(states, "fixed"))
        assert "drafted" not in fixed and fixed & {"accepted", "rejected"} and fixed & {"corrected", "bonus"}, fixed
        assert page.locator("#col-pacer .step").count() == 1
    finally:
        context.close()
