"""The page shows each decoder's own speed (issues 41, 54): Runs of the default example in Chromium against the
same decoders alone in this process (benchmarks/page_fidelity.py), with the settings the page ran.

At the page's 48 tokens a method's speedup on the page must be within a factor of 1.5 of its speedup alone (each
side's fastest, over one page Run, or up to three when a method is outside): the page that decoded interleaved
while it drew was off by up to 2x in every Run (SMC-SD 1.27x on the page against 0.63x alone).
At 16 tokens, where a method decodes in a fraction of a second and anything of the page inside its timed window
(a frame still being drawn, a progress tick) would show as it does on a fast machine, a method's page seconds must
be at most 1.15x its alone seconds (the fastest of four rounds on each side, page and alone interleaved, or of eight
when a method is over the bound after four, so a busy moment or a slower spell of the shared machine is not taken
for the page). The benchmark holds the tight figures."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app_process import browser_marks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import page_fidelity  # noqa: E402

pytestmark = browser_marks() + [pytest.mark.slow]
FACTOR, PAGE_ROUNDS = 1.5, 3
SHORT_TOKENS, SHORT_BOUND, SHORT_ROUNDS = 16, 1.15, 4


@pytest.fixture(scope="module")
def default_load():
    """(the pair app.py serves, what was loaded beside it), loaded the way app.py loads them."""
    from pacer_core.default_target import target_from_env

    return target_from_env()


def within_factor(compared: dict) -> bool:
    return all(row["speedup_ratio"] is None or 1 / FACTOR < row["speedup_ratio"] < FACTOR for row in compared.values())


def test_page_speedups_are_the_decoders_own(page, default_load, tmp_path):
    """One page Run against the same decoders alone twice (each method's faster); a method outside the factor gets
    up to two more page Runs (and alone pairs), each side's fastest deciding: a speedup divides by AR's seconds, and
    one Run of AR or of a method can fall in a slow spell of a shared host (1.3x apart with nothing else running:
    benchmarks/host_noise.py), which would move a ratio by as much as the interleaving this test is here to catch."""
    target, drafters = default_load
    prompt = page_fidelity.examples([0])[0]["prompt"]
    warm = page_fidelity.page_round(page, page_fidelity.WARM_UP_PROMPT, tmp_path)   # first-call costs, both sides
    page_fidelity.alone_round(target, drafters.default, warm["trace"])
    pages, alone = [], []
    for _ in range(PAGE_ROUNDS):
        on_page = page_fidelity.page_round(page, prompt, tmp_path)
        assert "timed alone" in on_page["status"]
        pages.append(page_fidelity.page_methods(on_page["trace"]))
        alone += [page_fidelity.alone_round(target, drafters.default, on_page["trace"]) for _ in range(2)]
        compared = page_fidelity.compare(fastest(pages), fastest(alone))
        if within_factor(compared):
            break
    assert set(compared) == {"ar", "fixed", "pacer", "smc"}
    for method, row in compared.items():
        assert row["same_tokens"], f"{method}: the page and the library decoded different tokens"
        if row["speedup_ratio"] is not None:
            assert 1 / FACTOR < row["speedup_ratio"] < FACTOR, (method, row)
    assert "timed alone" in page.inner_text("#metrics-table")    # the table says how it was timed


def fastest(rounds: list[dict]) -> dict:
    """Per method, the fastest of several rounds' rows ({method: {seconds, tokens, token_ids}})."""
    return {method: min((run[method] for run in rounds), key=lambda row: row["seconds"]) for method in rounds[0]}


def short_rounds(page, app_url, target, drafter, prompt: str, tmp_path, traces: list, alone: list) -> dict:
    """``SHORT_ROUNDS`` more rounds, page then alone, added to ``traces`` and ``alone``; every round so far compared,
    each side's fastest per method."""
    for _ in range(SHORT_ROUNDS):               # interleaved, as in the benchmark: the host's slower and faster
        page_fidelity.open_page(page, app_url)  # spells fall on both sides alike
        traces.append(page_fidelity.page_round(page, prompt, tmp_path, SHORT_TOKENS)["trace"])
        page_fidelity.leave_page(page)          # alone: no page open beside the decoders, as in the benchmark
        alone.append(page_fidelity.alone_round(target, drafter, traces[-1]))
    page_fidelity.open_page(page, app_url)      # the module's page back on the app for the tests after this one
    return page_fidelity.compare(fastest([page_fidelity.page_methods(trace) for trace in traces]), fastest(alone))


def test_a_short_runs_page_seconds_are_the_decoders_own(page, app_url, default_load, tmp_path):
    """What the page adds is there in every round; a slow spell of the host is not (one-run AR moves by up to 1.3x
    on a 2-vCPU host with nothing else running: benchmarks/host_noise.py). So a method over the bound after
    ``SHORT_ROUNDS`` rounds is given as many again, and its fastest over all of them on each side decides."""
    target, drafters = default_load
    prompt = page_fidelity.examples([0])[0]["prompt"]
    warm = page_fidelity.page_round(page, page_fidelity.WARM_UP_PROMPT, tmp_path)    # the page loaded, as the
    page_fidelity.alone_round(target, drafters.default, warm["trace"])                    # benchmark warms up
    traces, alone = [], []
    compared = short_rounds(page, app_url, target, drafters.default, prompt, tmp_path, traces, alone)
    if any(row["seconds_ratio"] > SHORT_BOUND for row in compared.values()):
        compared = short_rounds(page, app_url, target, drafters.default, prompt, tmp_path, traces, alone)
    assert set(compared) == {"ar", "fixed", "pacer", "smc"}
    for method, row in compared.items():
        assert row["same_tokens"], f"{method}: the page and the library decoded different tokens"
        assert row["seconds_ratio"] <= SHORT_BOUND, (f"{method}: {row['page_s']:.3f} s on the page against "
                                                     f"{row['alone_s']:.3f} s alone at {SHORT_TOKENS} tokens", row)


def test_the_page_holds_its_animation_frames_while_a_method_is_timed(page, app_url, tmp_path):
    """Gradio's idle loops go through the page's frame hold (installed ahead of Gradio's modules, which keep their
    own reference to requestAnimationFrame): held, their callbacks wait; a Run holds the frames once per timed
    method and releases them when it ends."""
    page_fidelity.open_page(page, app_url)      # a test before this one may have left the page blank
    page.evaluate("() => window.pacerFrames.hold()")
    page.wait_for_function("() => window.pacerFrames.waiting() > 0", polling=100, timeout=5_000)   # not by rAF
    page.evaluate("() => window.pacerFrames.release()")
    assert page.evaluate("() => [window.pacerFrames.held(), window.pacerFrames.waiting()]") == [False, 0]
    holds = page.evaluate("() => window.pacerFrames.holds")
    trace = page_fidelity.page_round(page, page_fidelity.WARM_UP_PROMPT, tmp_path, SHORT_TOKENS)["trace"]
    turns = 4 * page_fidelity.page_passes(trace)          # AR, fixed SD, PACER, SMC-SD in each pass (a short Run: 2-3)
    assert page.evaluate("() => window.pacerFrames.holds") - holds == turns
    assert not page.evaluate("() => window.pacerFrames.held()")              # the finished page moves again
