"""Draft-length policies: PACER's cost rule priced with the run's own measured costs (``stopping.RunCosts``), which
of the pre-verifier and the cost rule stopped each draft, and the +2/-1 schedule of transformers' assisted generation
as a fixed-SD variant (``fixed:dyn``). Exactness like every proposer: greedy identity with AR, and chi-square tests of
the sampled outputs against the target's law (``statistical``)."""
import math
from collections import Counter

import pytest

from pacer_core import Autoregressive, FixedSpeculative, Pacer, validate_settings
from pacer_core.decoders.fixed import next_scheduled_gamma
from pacer_core.decoders.pacer import cost_stop_reason, effective_stop_rule, uses_run_costs
from pacer_core.methods import parse_method
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.settings import SettingsError
from pacer_core.stopping import PacerCostModel, RunCosts, StepCosts, per_step_and_per_token
from pacer_core.testing.enumeration import chi_square_p_value
from pacer_core.testing.runs import run_ids, sample_counts
from pacer_core.testing.tiny import tiny_pair

PRIOR = StepCosts(0.5, verify_points=((1, 1.0), (17, 2.6)), step_overhead=0.05)


def test_run_costs_are_the_prior_before_any_step_and_reproduce_its_worked_example():
    costs = RunCosts()
    assert costs.costs(PRIOR) == PRIOR
    costs.observe(10, 0.1, 11, 0.04, other_seconds=0.001)
    costs.observe(10, 0.1, 11, 0.04, other_seconds=0.001)
    measured = costs.costs(PRIOR)
    assert measured.draft_per_token == pytest.approx(0.5)
    assert measured.verify(1) == pytest.approx(1.0) and measured.verify(17) == pytest.approx(2.6)
    assert measured.step_overhead == pytest.approx(0.05)


def test_run_costs_follow_a_host_whose_drafting_has_a_fixed_part_per_step():
    """The prior prices a drafted token at 0.5 of a one-token pass and a step's own work at 0.05; this host drafts a
    token at 0.2 of the pass and pays 0.3 a step whatever its length (the first draft call's catch-up feed), and
    verifies on the prior's line: the run's estimates leave the prior for the host's as its steps come in."""
    unit = 0.025                                          # a one-token pass: 25 ms

    def observed(steps: int) -> StepCosts:
        costs = RunCosts()
        for index in range(steps):
            drafted = (3, 7, 11, 5, 8)[index % 5]
            costs.observe(drafted, unit * (0.3 + 0.2 * drafted), drafted + 1, unit * PRIOR.verify(drafted + 1))
        return costs.costs(PRIOR)

    few, many = observed(5), observed(60)
    assert abs(few.draft_per_token - 0.2) < abs(PRIOR.draft_per_token - 0.2)
    assert abs(few.step_overhead - 0.3) < abs(PRIOR.step_overhead - 0.3)
    assert many.draft_per_token == pytest.approx(0.2, abs=0.02) and many.step_overhead == pytest.approx(0.3, abs=0.05)
    assert many.verify(9) == pytest.approx(PRIOR.verify(9))


def test_a_step_cost_splits_into_a_part_per_step_and_a_part_per_token_only_where_the_line_can_say():
    assert per_step_and_per_token([2, 4, 8], [0.5, 0.9, 1.7]) == pytest.approx((0.1, 0.2))
    assert per_step_and_per_token([4, 4], [1.0, 1.4]) is None                  # one length
    assert per_step_and_per_token([1, 2, 3], [0.1, 0.5, 0.6]) is None          # a negative part per step
    assert per_step_and_per_token([1, 9], [1.0, 0.8]) is None                  # longer drafts cheaper: noise


def test_run_costs_of_steps_of_one_length_keep_the_priors_split_at_the_runs_level():
    costs = RunCosts()
    for _ in range(6):
        costs.observe(8, 0.08, 9, 0.025 * PRIOR.verify(9), other_seconds=0.0)       # 0.08 s outside: 3.2 passes
    measured = costs.costs(PRIOR)
    assert measured.step_overhead + 8 * measured.draft_per_token == pytest.approx(3.2)       # the run's level
    assert measured.step_overhead / measured.draft_per_token == pytest.approx(0.05 / 0.5)    # the prior's split


def test_run_costs_read_a_steeper_verify_line_from_the_run_and_keep_the_prior_shape_on_noise():
    steep = RunCosts()
    for n in (2, 4, 8, 12, 16, 2, 4, 8, 12, 16):
        steep.observe(n - 1, 0.01 * (n - 1), n, 0.02 * (1 + 0.3 * (n - 1)))
    assert steep.costs(PRIOR).verify(17) > PRIOR.verify(17) + 1.0     # the run's slope outweighs two prior passes
    backwards = RunCosts()                                               # longer passes faster: noise
    for n, seconds in ((2, 0.05), (16, 0.01)) * 5:
        backwards.observe(n - 1, 0.01, n, seconds)
    kept = backwards.costs(PRIOR)
    assert kept.verify(17) == pytest.approx(PRIOR.verify(17)) and kept.verify(1) == 1.0
    with pytest.raises(ValueError):
        RunCosts().observe(1, 0.1, 0, 0.1)


def test_a_stop_is_the_preverifiers_when_typical_tokens_would_have_drafted_on():
    model = PacerCostModel(StepCosts(0.3, verify_points=((1, 1.0), (17, 2.0))))
    assert cost_stop_reason([0.97, 0.2], 0.97, 1, model, True) == "preverifier"       # a risky token stopped it
    long_draft = [0.97] * 40
    assert cost_stop_reason(long_draft, 0.97, 1, model, True) == "cost"               # the economics stopped it
    assert cost_stop_reason([0.97, 0.2], 0.97, 1, model, False) == "cost"             # entropy-priced: the rule's


def test_auto_is_the_cost_rule_priced_with_the_runs_costs_when_greedy_and_the_stored_ones_when_sampling():
    assert effective_stop_rule(validate_settings(stop_rule="auto")) == "cost"
    assert effective_stop_rule(validate_settings(stop_rule="threshold", temperature=0.7)) == "threshold"
    assert uses_run_costs(validate_settings()) and not uses_run_costs(validate_settings(temperature=0.7))
    assert uses_run_costs(validate_settings(temperature=0.7, cost_source="run"))
    assert not uses_run_costs(validate_settings(cost_source="stored"))
    with pytest.raises(SettingsError, match="Cost rule's costs"):
        validate_settings(cost_source="timed")


class RiskySecondToken(ConfidencePreVerifier):
    """Estimates every drafted token at 0.95 but the second of a draft at 0.1: a stand-in for a layer that spots
    the risky token."""

    def score_block(self, block):
        token_probs = [0.1 if feature.position == 1 else 0.95 for feature in block]
        return math.prod(token_probs), token_probs


@pytest.mark.parametrize("cost_source", ["auto", "stored"])
def test_greedy_pacer_on_the_cost_rule_equals_ar_and_says_what_stopped_each_draft(cost_source):
    """``auto`` prices with this run's timings (on tiny models a draft call costs about a target pass, so the costs
    stop most drafts); the stored prior (a drafted token 0.15 of a pass) drafts on over confident tokens and leaves
    the stop to the risky one."""
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.1, eos_token_id=63)
    reasons = Counter()
    for prompt in ([1, 2, 3], [7, 7, 7, 7, 9], list(range(20))):
        reference = run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=40)
        *events, result = Pacer(1, 32, None, RiskySecondToken()).run(
            target, drafter, prompt, validate_settings(max_new_tokens=40, stop_rule="auto", cost_source=cost_source,
                                             phrase_len=0))
        assert result.token_ids == reference
        costs = "this run's measured costs" if cost_source == "auto" else "the drafter's stored costs"
        assert costs in result.info["stopped_by"]
        reasons.update(event.stop_reason for event in events)
        assert all("→ stop" in event.stop_note for event in events if event.stop_reason in ("preverifier", "cost"))
    assert reasons["preverifier" if cost_source == "stored" else "cost"] > 0, reasons
    if cost_source == "stored":
        assert all(event.n_drafted == 2 for event in events if event.stop_reason == "preverifier")


def test_a_pacer_run_reads_every_step_after_the_first_with_its_bookkeeping():
    """The run's costs take one observation a step from the second on (the first may include a prefill): its
    drafted tokens, and its seconds outside the verify pass, which hold the drafting and the step's own work."""
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.1, eos_token_id=63)
    seen = []

    class Watched(Pacer):
        def step(self, target, state, settings, step):
            event = super().step(target, state, settings, step)
            seen.append((state.run_costs.steps, list(state.run_costs.outside), event))
            return event

    *events, _ = Watched(1, 32, None, RiskySecondToken()).run(
        target, drafter, [1, 2, 3], validate_settings(max_new_tokens=40, cost_source="run", phrase_len=0))
    assert len(events) > 3 and [steps for steps, _, _ in seen] == list(range(len(events)))
    *_, (_, outside, _) = seen
    for (drafted, seconds), event in zip(outside, events[1:]):
        assert drafted == event.n_drafted and seconds >= event.draft_seconds


def test_the_schedule_grows_by_two_after_a_full_accept_and_shrinks_by_one_otherwise():
    assert next_scheduled_gamma(4, 4, 4) == 6
    assert next_scheduled_gamma(4, 4, 3) == 3
    assert next_scheduled_gamma(1, 1, 0) == 1
    assert next_scheduled_gamma(6, 2, 2) == 8          # cut short by the token budget or EOS, all kept: as there


def test_fixed_dyn_parses_as_fixed_sd_on_the_schedule():
    spec = parse_method("fixed:dyn@gguf")
    assert (spec.kind, spec.overrides, spec.drafter) == ("fixed", {"gamma_schedule": "dynamic"}, "gguf")
    assert parse_method("fixed:dyn:6").overrides == {"gamma_schedule": "dynamic", "gamma": 6}
    with pytest.raises(SettingsError, match="fixed:dyn"):
        parse_method("fixed:dyn:6:2")


def test_greedy_fixed_dyn_equals_ar_and_moves_its_length():
    target, drafter = tiny_pair(scale=3.0, draft_noise=0.3, eos_token_id=63)
    lengths = set()
    for prompt in ([1, 2, 3], [7, 7, 7, 7, 9], list(range(20))):
        reference = run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=40)
        *events, result = FixedSpeculative(2, "dynamic").run(target, drafter, prompt,
                                                             validate_settings(max_new_tokens=40))
        assert result.token_ids == reference
        assert result.info["gamma_schedule"].startswith("dynamic")
        lengths.update(event.n_drafted for event in events)
        gamma = 2
        for event in events:
            budget = 40 - (event.total_new_tokens - len(event.emitted_ids))
            assert event.n_drafted == min(gamma, budget - 1) or 63 in [t.token_id for t in event.tokens]
            gamma = next_scheduled_gamma(gamma, event.n_drafted, event.n_accepted)
    assert len(lengths) > 2, lengths


PROMPT = [1, 2]
N_TOKENS = 3
RUNS = 1000
SIGNIFICANCE = 1e-3


@pytest.mark.statistical
def test_sampled_pacer_on_its_runs_costs_matches_the_target(six_token_pair, six_token_truth):
    """The cost rule priced with the run's own timings stops where the drafted tokens and the run's past say, so the
    output keeps the target's law; with an unrelated draft its stops vary from step to step."""
    target, drafter = six_token_pair
    decoder = Pacer(1, 3, None, ConfidencePreVerifier())
    settings = {"temperature": 1.0, "stop_rule": "cost", "cost_source": "run"}
    stops = Counter(event.stop_reason for seed in range(40) for event in
                    list(decoder.run(target, drafter, PROMPT, validate_settings(max_new_tokens=N_TOKENS, seed=seed,
                                                                                **settings)))[:-1])
    assert stops["cost"] + stops["preverifier"] >= 10 and stops["budget"] + stops["max_len"] >= 10, stops
    counts = sample_counts(decoder, target, drafter, PROMPT, N_TOKENS, RUNS, **settings)
    assert chi_square_p_value(counts, six_token_truth) > SIGNIFICANCE


@pytest.mark.statistical
def test_sampled_fixed_dyn_matches_the_target(six_token_pair, six_token_truth):
    target, drafter = six_token_pair
    counts = sample_counts(FixedSpeculative(1, "dynamic"), target, drafter, PROMPT, N_TOKENS, RUNS, temperature=1.0)
    assert chi_square_p_value(counts, six_token_truth) > SIGNIFICANCE


def test_the_draft_length_chart_says_what_stopped_each_pacer_draft_beside_the_oracle():
    from pacer_core.ui.plots_drafts import draft_length_figure

    target, drafter = tiny_pair(scale=6.0, draft_noise=0.1, eos_token_id=63)
    *events, _ = Pacer(1, 32, None, RiskySecondToken()).run(
        target, drafter, [1, 2, 3], validate_settings(max_new_tokens=40, cost_source="stored", phrase_len=0))
    figure = draft_length_figure({"pacer": events}, oracle=[3] * len(events))
    pacer_drafted = next(trace for trace in figure.data if trace.name == "PACER (drafted)")
    hovers = [hover for hover, event in zip(pacer_drafted.hovertext, events) if event.stop_reason == "preverifier"]
    assert hovers and all("stopped by the pre-verifier" in hover for hover in hovers)
    assert any(trace.name == "oracle γ*" for trace in figure.data)


def test_the_cost_rule_prices_a_trained_layers_greedy_estimates_through_its_calibration():
    """A layer sure of every token (its last bias at 30) drafts to the cap on the stored prior; with a calibration
    that reads its certainty as a coin flip, the cost rule stops after the first token. Either way greedy PACER
    returns AR's tokens."""
    import torch

    from pacer_core.preverifier.model import PreVerifierLayer, TrainedPreVerifier

    layer = PreVerifierLayer(0)
    with torch.no_grad():
        layer.mlp[-1].bias.fill_(30.0)
    config = layer.shape() | {"threshold_greedy": 0.5}
    sure = TrainedPreVerifier(layer, config)
    doubting = TrainedPreVerifier(layer, config | {"greedy_calibration": {"slope": 0.0, "offset": 0.0}})
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.1)
    prompt = [1, 2, 3]
    reference = run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=24)
    settings = validate_settings(max_new_tokens=24, stop_rule="auto", cost_source="stored", phrase_len=0)
    lengths = {}
    for name, preverifier in (("sure", sure), ("doubting", doubting)):
        *events, result = Pacer(1, 8, None, preverifier).run(target, drafter, prompt, settings)
        assert result.token_ids == reference
        lengths[name] = max(event.n_drafted for event in events)
    assert lengths == {"sure": 8, "doubting": 1}
