"""PACER's phrase drafts and cost-aware stopping keep the output exact: greedy identity with
AR on tiny pairs, and one chi-square test of the sampling distribution with phrases in play. Phrase
proposals are deterministic (q one-hot), which tests/test_sampling.py's exact identity covers for any q."""
from collections import Counter

import pytest

from pacer_core import Autoregressive, Pacer, validate_settings
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.enumeration import chi_square_p_value, target_sequence_distribution
from pacer_core.testing.tiny import tiny_pair

REPEATING_PROMPTS = [[1, 2, 3, 4, 1, 2], [5, 6, 5, 6, 5], [9, 8, 7, 9, 8, 7, 9], list(range(10)) + list(range(6))]


def run(decoder, target, drafter, prompt, **settings):
    *events, result = decoder.run(target, drafter, prompt, validate_settings(**settings))
    return events, result.token_ids


@pytest.mark.slow
@pytest.mark.parametrize("noise", [0.1, 0.6])
@pytest.mark.parametrize("stop_rule", ["threshold", "cost"])
def test_greedy_pacer_with_phrases_equals_ar(noise, stop_rule):
    target, drafter = tiny_pair(scale=6.0, draft_noise=noise, eos_token_id=63)
    phrase_tokens = 0
    for prompt in REPEATING_PROMPTS:
        _, reference = run(Autoregressive(), target, drafter, prompt, max_new_tokens=40)
        for block, on_fail in ((1, "submit"), (3, "discard")):
            decoder = Pacer(block, 12, 0.3, ConfidencePreVerifier(), on_fail)
            events, ids = run(decoder, target, drafter, prompt, max_new_tokens=40, phrase_len=6, stop_rule=stop_rule)
            assert ids == reference, (prompt, block, on_fail)
            phrase_tokens += sum(token.phrase for event in events for token in event.tokens)
    assert phrase_tokens > 0, "the prompts repeat, so some phrases must have been proposed"


def test_cost_rule_stops_drafting_with_a_stated_comparison():
    target, drafter = tiny_pair(scale=2.0, draft_noise=0.8)
    events, _ = run(Pacer(1, 16, 0.0, ConfidencePreVerifier()), target, drafter, [1, 2, 3], max_new_tokens=40,
                    stop_rule="cost")
    stops = [event for event in events if event.stop_reason == "cost"]
    assert stops and all("→ stop" in event.stop_note for event in stops)
    assert all(block.passed for event in events for block in event.blocks)   # the threshold plays no part


def test_phrase_blocks_say_where_they_came_from():
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.1)
    events, _ = run(Pacer(1, 12, 0.0, ConfidencePreVerifier()), target, drafter, REPEATING_PROMPTS[0],
                    max_new_tokens=24, phrase_len=6)
    notes = [block.phrase for event in events for block in event.blocks if block.phrase]
    assert notes and all(note.startswith("copied ") for note in notes)
    phrase_tokens = [token for event in events for token in event.tokens if token.phrase]
    assert all(token.draft_prob == 1.0 for token in phrase_tokens)        # q is one-hot on a phrase token


PROMPT = [1, 2, 3, 1, 2]        # the suffix [1, 2] recurs: the first draft is the phrase (3, 1, 2)
N_TOKENS = 3


@pytest.mark.statistical
def test_pacer_sampling_with_phrases_matches_target_distribution():
    """1000 runs: see tests/test_exactness.py for the power of this chi-square test."""
    target, drafter = tiny_pair(vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=16)
    truth = target_sequence_distribution(target.model, PROMPT, N_TOKENS, temperature=1.0)
    counts, phrase_steps = Counter(), 0
    for seed in range(1000):
        events, ids = run(Pacer(1, 4, 0.5, ConfidencePreVerifier(), "submit"), target, drafter, PROMPT,
                          max_new_tokens=N_TOKENS, seed=seed, temperature=1.0, phrase_len=3)
        counts[tuple(ids)] += 1
        phrase_steps += any(token.phrase for event in events for token in event.tokens)
    assert phrase_steps > 500
    assert chi_square_p_value(counts, truth) > 1e-3


def test_the_page_shows_phrase_tokens_and_the_cost_decision():
    from pacer_core.ui.columns import token_span
    from pacer_core.ui.narration import explain_step
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.1)
    events, _ = run(Pacer(1, 12, 0.0, ConfidencePreVerifier()), target, drafter, REPEATING_PROMPTS[0],
                    max_new_tokens=24, phrase_len=6)
    event = next(event for event in events if any(token.phrase for token in event.tokens))
    token = next(token for token in event.tokens if token.phrase)
    assert "tok-phrase" in token_span(token) and "phrase: copied" in token_span(token)
    assert "is a phrase: copied" in explain_step(event)
    noisy_pair, noisy_drafter = tiny_pair(scale=2.0, draft_noise=0.8)
    events, _ = run(Pacer(1, 16, 0.0, ConfidencePreVerifier()), noisy_pair, noisy_drafter, [1, 2, 3],
                    max_new_tokens=40, stop_rule="cost")
    stopped = next(event for event in events if event.stop_reason == "cost")
    assert "Cost rule, next block:" in explain_step(stopped)


def test_the_cost_model_is_the_drafters_stored_one_for_this_device_else_a_prior(tmp_path):
    import dataclasses
    import json

    from pacer_core.decoders.pacer import pair_cost_model
    from pacer_core.stopping import PRIOR_COSTS

    target, drafter = tiny_pair()
    target = dataclasses.replace(target, measured_file=str(tmp_path / "measured_defaults.json"))
    assert pair_cost_model(target, drafter).source == "prior"
    assert pair_cost_model(target, drafter).costs == PRIOR_COSTS
    record = {"draft_per_token": 0.2, "verify": [[2, 1.0], [9, 1.4]], "step_overhead": 0.05,
              "acceptance_by_entropy": [[0.5, 0.99], [2.0, 0.8]], "mean_acceptance": 0.95}
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"drafters": {"small": {
        "cost": {"cpu": 0.3, "cuda": 0.5}, "pacer_costs": {"cuda": record}}}}))
    prior = pair_cost_model(target, drafter)                              # no model for a CPU: the measured draft cost
    assert prior.costs.draft_per_token == 0.3 and prior.acceptance is None
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"drafters": {"small": {
        "cost": {"cpu": 0.3}, "pacer_costs": {"cpu": record}}}}))
    model = pair_cost_model(target, drafter)
    assert model.costs.verify(9) == 1.4 and model.costs.step_overhead == 0.05 and model.mean_acceptance == 0.95
    assert model.token_acceptance(0.1, fallback=0.0) == 0.99 and model.source == "measured (cpu)"
    (tmp_path / "measured_defaults.json").write_text(json.dumps({"drafters": {"small": {
        "pacer_costs": {"cpu": {"verify": "broken"}}}}}))
    assert pair_cost_model(target, drafter).costs == PRIOR_COSTS


def test_sampled_tokens_are_priced_by_the_drafts_entropy_and_greedy_ones_by_the_preverifier():
    import torch

    from pacer_core.decoders.pacer import block_acceptance
    from pacer_core.preverifier import token_features
    from pacer_core.stopping import AcceptanceByEntropy, PacerCostModel

    model = PacerCostModel(acceptance=AcceptanceByEntropy((0.1, 10.0), (0.99, 0.6)))
    peaked, flat = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.full((4,), 0.25)
    sampled = [token_features(torch.zeros(4), torch.zeros(2), 0, position, sampled=True) for position in (0, 1)]
    assert block_acceptance(model, sampled, [peaked, flat], [0.3, 0.3]) == [0.99, 0.6]
    greedy = [token_features(torch.zeros(4), torch.zeros(2), 0, 0)]
    assert block_acceptance(model, greedy, [peaked], [0.3]) == [0.3]
    assert block_acceptance(None, sampled, [peaked, flat], [0.3, 0.3]) == []


def test_auto_stops_on_cost_at_every_temperature():
    from pacer_core.decoders.pacer import effective_stop_rule
    assert effective_stop_rule(validate_settings(stop_rule="auto")) == "cost"
    assert effective_stop_rule(validate_settings(stop_rule="auto", temperature=0.7)) == "cost"
    assert effective_stop_rule(validate_settings(stop_rule="threshold")) == "threshold"
    assert effective_stop_rule(validate_settings(stop_rule="cost")) == "cost"
    target, drafter = tiny_pair(scale=6.0, eos_token_id=63)
    for prompt in ([1, 2, 3], list(range(12))):
        *_, reference = Autoregressive().run(target, drafter, prompt, validate_settings(max_new_tokens=30))
        *_, auto = Pacer(2, 12, 0.2, ConfidencePreVerifier()).run(
            target, drafter, prompt, validate_settings(max_new_tokens=30, stop_rule="auto"))
        assert auto.token_ids == reference.token_ids
