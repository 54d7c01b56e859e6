"""Cost-aware stopping (pacer_core/stopping.py): expected tokens, the extension rule, the cost meter."""
import math

import pytest

from pacer_core.stopping import CostMeter, StepCosts, decide_extension, expected_tokens

pytestmark = pytest.mark.pure


def test_expected_tokens_sums_the_prefix_acceptance_products():
    assert expected_tokens([]) == 1.0
    assert math.isclose(expected_tokens([0.5, 0.5]), 1 + 0.5 + 0.25)
    assert math.isclose(expected_tokens([0.8] * 3), (1 - 0.8 ** 4) / (1 - 0.8))   # Leviathan et al.'s closed form


def test_free_drafting_and_flat_verify_always_extend_while_acceptance_is_positive():
    free = StepCosts(draft_per_token=0.0, verify_slope=0.0)
    assert decide_extension([0.9, 0.9], next_accept=0.1, block=1, costs=free).extend


def test_expensive_verify_stops_a_doubtful_block_but_not_a_likely_one():
    cpu_like = StepCosts(draft_per_token=0.15, verify_slope=0.3)
    doubtful = decide_extension([0.9, 0.6], next_accept=0.3, block=1, costs=cpu_like)
    likely = decide_extension([0.9, 0.9], next_accept=0.95, block=1, costs=cpu_like)
    assert not doubtful.extend and likely.extend
    assert doubtful.gain_tokens == pytest.approx(0.9 * 0.6 * 0.3)
    assert doubtful.extra_cost == pytest.approx(0.15 + 0.3)
    assert "stop" in doubtful.describe() and "draft on" in likely.describe()


def test_the_rule_is_the_rate_comparison():
    costs = StepCosts(draft_per_token=0.2, verify_slope=0.1)
    probs, next_accept, block = [0.7, 0.7], 0.7, 2
    decision = decide_extension(probs, next_accept, block, costs)
    before = expected_tokens(probs) / costs.step(2)
    after = expected_tokens(probs + [next_accept] * block) / costs.step(4)
    assert decision.extend == (after > before)


def test_meter_uses_priors_until_two_verify_sizes_were_seen():
    meter = CostMeter()
    meter.record_verify(3, 0.3)
    meter.record_verify(3, 0.31)
    assert meter.costs() == StepCosts(0.15, 0.15)


def test_meter_recovers_a_linear_verify_cost_and_the_draft_cost():
    meter = CostMeter()
    for tokens in (1, 2, 3, 4, 5, 1, 3):
        meter.record_verify(tokens, 0.10 + 0.02 * tokens)      # single pass 0.12 s, +0.02 s per token
    meter.record_draft(4, 0.048)                                # 0.012 s per drafted token
    costs = meter.costs()
    assert costs.verify_slope == pytest.approx(0.02 / 0.12)
    assert costs.draft_per_token == pytest.approx(0.012 / 0.12)
    assert costs.verify(1) == 1.0


def test_calibration_rescales_estimates_to_the_measured_acceptance():
    from pacer_core.stopping import AcceptanceCalibration
    calibration = AcceptanceCalibration()
    assert calibration.calibrate([0.8]) == [0.8]
    calibration.record([0.8, 0.8, 0.8], accepted=0)      # judged: the first token only, rejected
    calibration.record([0.8, 0.8], accepted=2)           # both judged and accepted
    assert calibration.factor == pytest.approx(2 / 2.4)
    assert calibration.calibrate([0.9, 1.0]) == pytest.approx([0.75, 2 / 2.4])
