"""The numbers behind the timeline, speedup-against-acceptance and accepted-per-pass plots
(pacer_core/ui/timeline.py), the figures built from them, and the column's clean answer."""
from __future__ import annotations

import math

import pytest

from pacer_core.events import Metrics, Result, SMCCycleEvent, StepEvent, TokenRecord
from pacer_core.ui import columns, narration, plots_time, timeline

pytestmark = pytest.mark.pure

HOSTILE = "<script>alert(1)</script>%{x}"


def step(method, index, states, draft_s, verify_s, total, text="t"):
    tokens = [TokenRecord(1, text, state) for state in states]
    drafted = sum(s in ("accepted", "rejected") for s in states)
    accepted = sum(s == "accepted" for s in states)
    return StepEvent(method, index, tokens, [1] * (accepted + 1), text * (accepted + 1), drafted, accepted,
                     draft_s, verify_s, total)


def ar_step(index, seconds=0.1):
    return StepEvent("ar", index, [TokenRecord(1, "a", "target")], [1], "a", 0, 0, 0.0, seconds, index + 1)


def cycle(index, n=2, k=3, draft_s=0.2, verify_s=0.3):
    rows = [[TokenRecord(1, "d", "drafted")] * k + [TokenRecord(2, "b", "bonus")] for _ in range(n)]
    return SMCCycleEvent("smc", index, ["dddb"] * n, [[1] * (k + 1)] * n, [0.0] * n, [1 / n] * n, float(n), 0.5,
                         False, list(range(n)), [False] * n, draft_s, verify_s, (k + 1) * (index + 1),
                         particle_tokens=rows)


# fixed γ = 4: pass 1 keeps 2 of 4 (2 wasted), pass 2 keeps all 4 (+ bonus)
FIXED = [step("fixed", 0, ["accepted", "accepted", "rejected", "rejected", "corrected"], 0.4, 0.2, 3),
         step("fixed", 1, ["accepted"] * 4 + ["bonus"], 0.4, 0.2, 8)]
AR = [ar_step(i) for i in range(8)]


# ---------------------------------------------------------------- timeline segments

def test_segments_split_draft_into_kept_and_wasted_then_verify_end_to_end():
    segments = timeline.method_segments("fixed", FIXED)
    kinds = [(s.step, s.kind, round(s.start, 6), round(s.seconds, 6)) for s in segments]
    assert kinds == [(0, timeline.KEPT_DRAFT, 0.0, 0.2), (0, timeline.WASTED_DRAFT, 0.2, 0.2),
                     (0, timeline.VERIFY, 0.4, 0.2),
                     (1, timeline.KEPT_DRAFT, 0.6, 0.4), (1, timeline.VERIFY, 1.0, 0.2)]   # no zero-length part
    assert [s.emitted for s in segments] == [3, 3, 3, 5, 5]
    assert sum(s.seconds for s in segments) == pytest.approx(1.2)


def test_ar_lane_is_verify_only_and_smc_wastes_nothing():
    ar = timeline.method_segments("ar", AR)
    assert {s.kind for s in ar} == {timeline.VERIFY} and ar[-1].start == pytest.approx(0.7)
    smc = timeline.method_segments("smc", [cycle(0), cycle(1)])
    assert [s.kind for s in smc] == [timeline.KEPT_DRAFT, timeline.VERIFY] * 2
    assert timeline.drafted_and_wasted(cycle(0, k=3)) == (3, 0)


def test_discarded_drafts_count_as_wasted():
    event = step("pacer", 0, ["accepted", "discarded", "discarded", "corrected"], 0.3, 0.1, 2)
    assert timeline.drafted_and_wasted(event) == (3, 2)
    wasted = [s for s in timeline.method_segments("pacer", [event]) if s.kind == timeline.WASTED_DRAFT]
    assert wasted[0].seconds == pytest.approx(0.2)


def test_a_lane_starts_with_the_prefill_its_first_pass_reports():
    first = step("fixed", 0, ["accepted", "corrected"], 0.1, 0.2, 2)
    first.prefill_seconds = 0.05
    segments = timeline.method_segments("fixed", [first, FIXED[1]])
    assert [(s.step, s.kind, round(s.start, 6), round(s.seconds, 6)) for s in segments[:3]] == [
        (0, timeline.PREFILL, 0.0, 0.05), (0, timeline.KEPT_DRAFT, 0.05, 0.1), (0, timeline.VERIFY, 0.15, 0.2)]
    assert sum(s.seconds for s in segments) == pytest.approx(0.05 + 0.3 + 0.6)
    grouped = timeline.method_segments("fixed", [first, FIXED[1]], group=2)    # a bar for both passes
    assert grouped[0].kind == timeline.PREFILL and grouped[0].seconds == pytest.approx(0.05)
    assert timeline.method_segments("ar", AR)[0].kind == timeline.VERIFY          # a trace without one: none


def test_lanes_come_in_a_fixed_order_and_empty_input_gives_nothing():
    segments = timeline.timeline_segments({"smc": [cycle(0)], "fixed": FIXED, "ar": AR})
    order = list(dict.fromkeys(s.method for s in segments))
    assert order == ["ar", "fixed", "smc"]
    assert timeline.timeline_segments({}) == [] and timeline.method_segments("fixed", []) == []


# ---------------------------------------------------------------- expected speedup

def test_expected_tokens_per_step_matches_leviathan():
    assert timeline.expected_tokens_per_step(0.0, 4) == 1.0
    assert timeline.expected_tokens_per_step(1.0, 4) == 5.0
    assert timeline.expected_tokens_per_step(0.5, 4) == pytest.approx(1.9375)          # (1 - 0.5^5) / 0.5
    # the same as summing the survival probabilities 1 + α + ... + α^γ
    assert timeline.expected_tokens_per_step(0.8, 6) == pytest.approx(sum(0.8 ** k for k in range(7)))


def test_expected_speedup_worked_example_from_the_docstring():
    assert timeline.expected_speedup(0.5, 4, 0.1, 1.2) == pytest.approx(1.9375 / 1.6)
    assert timeline.expected_speedup(0.0, 4, 0.1, 1.2) == pytest.approx(0.625)
    # Leviathan et al.'s own form with v = 1: (1 - α^(γ+1)) / ((1 - α)(γc + 1))
    alpha, gamma, c = 0.7, 5, 0.05
    assert timeline.expected_speedup(alpha, gamma, c, 1.0) == pytest.approx(
        (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1)))
    assert math.isnan(timeline.expected_speedup(0.5, 0, 0.0, 0.0))


@pytest.mark.parametrize("gamma", [1, 2.5, 4, 8])
@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_implied_acceptance_inverts_the_expectation(alpha, gamma):
    tau = timeline.expected_tokens_per_step(alpha, gamma)
    assert timeline.implied_acceptance(tau, gamma) == pytest.approx(alpha, abs=1e-6)


def test_implied_acceptance_clamps():
    assert timeline.implied_acceptance(0.5, 4) == 0.0 and timeline.implied_acceptance(9.0, 4) == 1.0
    assert timeline.implied_acceptance(2.0, 0) == 0.0


def test_operating_point_lies_on_its_curve_and_uses_measured_costs():
    ar_seconds = timeline.ar_seconds_per_token(AR)
    assert ar_seconds == pytest.approx(0.1)
    point = timeline.operating_point("fixed", FIXED, ar_seconds)
    assert point.gamma == 4 and point.drafted_per_step == 4
    assert point.draft_cost == pytest.approx(0.8 / 8 / 0.1)          # draft seconds per drafted token / AR s/token
    assert point.verify_cost == pytest.approx(0.2 / 0.1)
    assert point.tokens_per_step == 4.0 and point.kept_fraction == pytest.approx(6 / 8)
    assert point.speedup == pytest.approx((8 / 1.2) / (1 / 0.1))      # tokens/s over AR's tokens/s
    assert point.curve([point.alpha_hat])[0] == pytest.approx(point.speedup)


def test_operating_point_of_smc_and_of_nothing():
    point = timeline.operating_point("smc", [cycle(0), cycle(1)], 0.1)
    assert point.gamma == 3 and point.alpha_hat == 1.0 and point.kept_fraction is None
    assert point.speedup == pytest.approx((8 / 1.0) / 10)
    assert timeline.operating_point("fixed", [], 0.1) is None
    assert timeline.operating_point("fixed", FIXED, None) is None
    assert timeline.operating_point("ar", AR, 0.1) is None           # nothing drafted
    assert timeline.ar_seconds_per_token([]) is None


# ---------------------------------------------------------------- histogram

def test_accepted_histogram_counts_every_value_up_to_the_largest():
    assert timeline.accepted_histogram(FIXED) == {0: 0, 1: 0, 2: 1, 3: 0, 4: 1}
    assert timeline.accepted_histogram([cycle(0, k=2), cycle(1, k=2)]) == {0: 0, 1: 0, 2: 2}
    assert timeline.accepted_histogram([]) == {}


# ---------------------------------------------------------------- figures

def hover_text(fig) -> str:
    parts = []
    for trace in fig.data:
        assert getattr(trace, "hovertemplate", None) in (None, "")
        hover = getattr(trace, "hovertext", None)
        if hover is not None:
            parts.extend([hover] if isinstance(hover, str) else list(hover))
    return "\n".join(map(str, parts))


def test_timeline_figure_has_a_lane_per_method_and_the_four_kinds():
    smc = cycle(0)
    smc.prefill_seconds = 0.03
    fig = plots_time.timeline_figure({"ar": AR, "fixed": FIXED, "pacer": [], "smc": [smc]})
    bars = [trace for trace in fig.data if trace.type == "bar"]
    assert {trace.name for trace in bars} == {name for name, _, _ in plots_time.SEGMENT_STYLES.values()}
    lanes = {lane for trace in bars for lane in trace.y}
    assert lanes == {"AR", "fixed SD", "SMC-SD"}
    wasted = next(trace for trace in bars if "wasted" in trace.name)
    assert wasted.marker.pattern.shape == "x" and list(wasted.x) == pytest.approx([0.2])
    assert "did not keep" in hover_text(fig)
    prefill = next(trace for trace in bars if trace.name == "prompt prefill")
    assert list(prefill.y) == ["SMC-SD"] and list(prefill.x) == pytest.approx([0.03])
    assert "prompt's prefill" in hover_text(fig)


def test_speedup_figure_draws_curves_points_and_ar_at_one():
    events = {"ar": AR, "fixed": FIXED, "smc": [cycle(0), cycle(1)]}
    fig = plots_time.speedup_figure(events)
    curves = [trace for trace in fig.data if trace.mode == "lines"]
    points = [trace for trace in fig.data if trace.mode == "markers"]
    assert len(curves) == 2 and len(points) == 2
    fixed_point = timeline.operating_point("fixed", FIXED, 0.1)
    assert points[0].x[0] == pytest.approx(fixed_point.alpha_hat)
    assert points[0].y[0] == pytest.approx(fixed_point.speedup)
    assert any(shape.y0 == 1.0 for shape in fig.layout.shapes)       # AR = 1
    assert "speedup" in hover_text(fig)


def test_speedup_figure_without_ar_says_why():
    fig = plots_time.speedup_figure({"fixed": FIXED})
    assert not fig.data and "AR baseline" in fig.layout.annotations[0].text


def test_histogram_figure_groups_methods():
    fig = plots_time.accepted_histogram_figure({"fixed": FIXED, "smc": [cycle(0)]})
    assert [trace.name for trace in fig.data] == ["fixed SD", "SMC-SD"]
    assert list(fig.data[0].y) == [0, 0, 1, 0, 1]


@pytest.mark.parametrize("build", [plots_time.timeline_figure, plots_time.speedup_figure, plots_time.accepted_histogram_figure])
def test_new_figures_have_placeholders_and_escape_token_text(build):
    assert build({}).layout.annotations                                 # the "run to see" placeholder
    events = {"ar": AR, "fixed": [step("fixed", 0, ["accepted", "corrected"], 0.1, 0.1, 2, text=HOSTILE)]}
    text = hover_text(build(events))
    assert "<script>" not in text and "%{x}" not in text


# ---------------------------------------------------------------- the clean answer and the narration

def test_column_shows_the_clean_answer_above_the_trace():
    markup = columns.column_html("fixed", FIXED)
    answer, trace = markup.index('data-role="answer"'), markup.index('data-role="trace"')
    assert answer < trace
    answer_part = markup[answer:trace]
    assert "data-state" not in answer_part and "Answer so far" in answer_part and "ttttttt" in answer_part
    result = Result("fixed", "<b>final</b>", [1], FIXED, Metrics(4.0, 0.75, 2, 8, 8, 1.2, 6.7))
    done = columns.column_html("fixed", FIXED, result)
    assert "&lt;b&gt;final&lt;/b&gt;" in done and "<b>final" not in done


def test_pending_step_is_left_out_of_the_answer():
    assert columns.answer_text(FIXED, pending=True) == "ttt"
    assert columns.answer_text([cycle(0)]) == ""            # no leader text in this event
    assert columns.answer_text([]) == ""


def test_narration_counts_one_token_in_the_singular():
    one = step("fixed", 0, ["rejected", "corrected"], 0.1, 0.1, 1)
    assert "proposed 1 token." in narration.explain_step(one)
    assert "proposed 1 token " in narration.explain_draft(one) or "proposed 1 token (" in narration.explain_draft(one)
