"""Cost-aware stopping (pacer_core/stopping.py): expected tokens, the extension rule, the stored cost model and
the acceptance-by-entropy table."""
import math

import pytest

import torch

from pacer_core.stopping import (AcceptanceByEntropy, PacerCostModel, StepCosts, decide_extension, entropy_nats,
                                 expected_tokens, interpolate, non_increasing)

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


def test_verify_cost_interpolates_the_measured_points_and_extends_the_last_segment():
    points = ((1, 1.0), (4, 1.1), (8, 1.5))
    assert interpolate(points, 1) == 1.0 and interpolate(points, 0) == 1.0
    assert interpolate(points, 6) == pytest.approx(1.3)
    assert interpolate(points, 12) == pytest.approx(1.9)            # 0.1 per token after 8, as between 4 and 8
    costs = StepCosts(0.2, verify_points=points, step_overhead=0.05)
    assert costs.step(3) == pytest.approx(0.05 + 3 * 0.2 + 1.1)
    assert StepCosts(0.2, verify_slope=0.1).verify(3) == pytest.approx(1.2)   # no points: the line


def test_step_overhead_makes_longer_drafts_pay_sooner():
    """A constant cost per step is amortised over more tokens by a longer draft, never the reverse."""
    plain, with_overhead = StepCosts(0.25, 0.05), StepCosts(0.25, 0.05, step_overhead=0.5)
    probs = [0.9] * 4
    assert decide_extension(probs, 0.9, 2, with_overhead).current_rate < decide_extension(probs, 0.9, 2, plain).current_rate
    borderline = [accept for accept in (0.5, 0.6, 0.7, 0.8, 0.9)
                  if decide_extension(probs, accept, 2, with_overhead).extend != decide_extension(probs, accept, 2, plain).extend]
    assert borderline and all(decide_extension(probs, accept, 2, with_overhead).extend for accept in borderline)


def test_entropy_in_nats():
    probs = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    assert entropy_nats(probs).tolist() == pytest.approx([0.0, math.log(4)])


def test_pooling_adjacent_violators_gives_the_non_increasing_fit():
    assert non_increasing([0.9, 0.7, 0.8, 0.5], [1, 1, 1, 1]) == pytest.approx([0.9, 0.75, 0.75, 0.5])
    assert non_increasing([0.5, 0.9], [3, 1]) == pytest.approx([0.6, 0.6])
    assert non_increasing([0.9, 0.8], [1, 1]) == [0.9, 0.8]


def test_acceptance_by_entropy_fits_bin_means_and_reads_them_back():
    entropies = [0.0] * 4 + [1.0] * 4 + [2.0] * 4
    accepts = [1.0, 1.0, 0.9, 0.9] + [0.8] * 4 + [0.5, 0.7, 0.5, 0.7]
    table = AcceptanceByEntropy.fit(entropies, accepts, bins=3)
    assert table.edges == (0.0, 1.0, 2.0) and table.acceptance == pytest.approx((0.95, 0.8, 0.6))
    assert table(0.0) == pytest.approx(0.95) and table(0.5) == pytest.approx(0.8)
    assert table(9.0) == pytest.approx(0.6)                           # above the last edge: the last bin
    tied = AcceptanceByEntropy.fit([0.0] * 10 + [1.0], [1.0] * 10 + [0.0], bins=4)
    assert tied.edges == (0.0, 1.0)                                   # ties stay in one bin
    with pytest.raises(ValueError):
        AcceptanceByEntropy.fit([], [])


def test_the_cost_model_round_trips_through_its_record():
    model = PacerCostModel(StepCosts(0.25, verify_points=((2, 1.0), (8, 1.3)), step_overhead=0.1),
                           AcceptanceByEntropy((0.1, 1.0), (0.99, 0.9)), 0.97)
    again = PacerCostModel.from_record(json_round_trip(model.to_record()))
    assert again.costs == model.costs and again.acceptance == model.acceptance and again.mean_acceptance == 0.97
    assert again.token_acceptance(0.05, fallback=0.3) == 0.99
    assert PacerCostModel().token_acceptance(0.05, fallback=0.3) == 0.3    # no table: the pre-verifier's


def json_round_trip(record: dict) -> dict:
    import json
    return json.loads(json.dumps(record))


def test_least_squares_line_recovers_a_line_and_is_flat_for_one_x():
    from pacer_core.stopping import least_squares_line
    assert least_squares_line([1, 2, 3, 5], [1.2, 1.4, 1.6, 2.0]) == pytest.approx((1.0, 0.2))
    assert least_squares_line([4, 4], [1.0, 3.0]) == (2.0, 0.0)
    with pytest.raises(ValueError):
        least_squares_line([], [])


def test_costs_by_prompt_length_interpolate_between_the_measured_lengths_and_round_trip():
    short = StepCosts(0.3, verify_points=((1, 1.0), (33, 5.0)), step_overhead=0.1)
    long = StepCosts(0.5, verify_points=((1, 1.0), (17, 3.0)), step_overhead=0.3)
    model = PacerCostModel(short, by_length=((40, short), (540, long)))
    middle = model.at_prompt_length(290).costs
    assert middle.draft_per_token == pytest.approx(0.4) and middle.step_overhead == pytest.approx(0.2)
    assert [size for size, _ in middle.verify_points] == [1, 33]
    assert middle.verify(33) == pytest.approx((5.0 + long.verify(33)) / 2)
    assert model.at_prompt_length(10).costs == short                      # the nearest measured length outside
    assert model.at_prompt_length(5000).costs.draft_per_token == pytest.approx(0.5)
    assert PacerCostModel(short).at_prompt_length(500).costs == short      # measured at one length: as it is
    again = PacerCostModel.from_record(model.to_record())
    assert again.by_length == model.by_length and again.at_prompt_length(290).costs == middle


def test_measured_step_costs_leave_out_each_runs_prefill_and_first_step():
    """pacer_costs' observations: the AR unit from the steps after the first (the prompt's prefill), the draft
    and verify costs from every step but the first, and a step's outside time without the prefill before it."""
    from types import SimpleNamespace as Record

    from pacer_core.training.pacer_costs import Observations

    def run(seconds, tokens):
        return Record(metrics=Record(seconds=seconds, new_tokens=tokens))

    def step(draft, verify, drafted):
        return Record(draft_seconds=draft, verify_seconds=verify, n_drafted=drafted,
                      tokens=[Record(accept_prob=0.9)] * drafted)

    observed = Observations()
    observed.add_ar([step(0.0, 0.5, 0)] + [step(0.0, 0.1, 0)] * 4, run(0.5 + 4 * 0.1, 5))
    assert observed.ar_seconds / observed.ar_tokens == pytest.approx(0.1)           # the prefill step left out
    events = [step(0.9, 0.7, 2), step(0.02, 0.12, 2), step(0.02, 0.12, 2)]          # the first paid a prefill
    observed.add_fixed(events, run(1.0 + 1.6 + 0.28 + 3 * 0.01, 9), [[0.1, 0.2]] * 3, False, prefill_seconds=1.0)
    model = observed.model("test")
    assert model.costs.draft_per_token == pytest.approx(0.1)                         # 0.01 s a drafted token
    assert model.costs.step_overhead == pytest.approx(0.1)                           # 0.01 s a step, prefill out
    observed = Observations()
    observed.add_ar([step(0.0, 0.5, 0)] + [step(0.0, 0.1, 0)] * 4, run(0.5 + 4 * 0.1, 5))
    longer = [step(0.9, 0.7, 2), step(0.03, 0.12, 2), step(0.05, 0.14, 4)]           # drafting: 0.01 s + 0.01 s a token
    observed.add_fixed(longer, run(1.0 + 1.6 + 0.34 + 3 * 0.01, 11), [[0.1, 0.2]] * 3, False, prefill_seconds=1.0)
    model = observed.model("test")
    assert model.costs.draft_per_token == pytest.approx(0.1)
    assert model.costs.step_overhead == pytest.approx(0.1 + 0.1)                     # and 0.01 s of drafting a step
