"""Exactness (docs/algorithms.md#how-exactness-is-tested): greedy token identity with AR, and the sampling
distribution of the first tokens against the target's, enumerated on a tiny vocabulary.

Significance level of every chi-square test: 0.001, with fixed seeds (so the outcome is repeatable)."""
import itertools
from collections import Counter

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, sampling, validate_settings
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.enumeration import chi_square_p_value, target_sequence_distribution
from pacer_core.testing.tiny import tiny_pair

SIGNIFICANCE = 1e-3


def run_ids(decoder, pair, prompt_ids, **settings):
    *_, result = decoder.run(pair, prompt_ids, validate_settings(**settings))
    return result.token_ids


PROMPTS = [[1, 2, 3], [5], [7, 7, 7, 7, 9], [11, 40, 2, 63, 8, 0], list(range(20))]


@pytest.mark.parametrize("noise", [0.1, 0.4, None])
def test_greedy_fixed_and_pacer_equal_ar_on_tiny_pairs(noise):
    pair = tiny_pair(scale=6.0, draft_noise=noise, eos_token_id=63)
    decoders = [FixedSpeculative(g) for g in (1, 2, 4, 8)] + [
        Pacer(block, max_len, threshold, ConfidencePreVerifier(), on_fail)
        for block, max_len, threshold, on_fail in itertools.product((1, 3), (4, 16), (0.0, 0.3, 0.99),
                                                                    ("submit", "discard"))]
    for prompt in PROMPTS:
        reference = run_ids(Autoregressive(), pair, prompt, max_new_tokens=40)
        for decoder in decoders:
            assert run_ids(decoder, pair, prompt, max_new_tokens=40) == reference, (decoder.info(), prompt)


def test_greedy_stops_at_eos_like_ar():
    pair = tiny_pair(vocab_size=8, scale=4.0, eos_token_id=0)
    for prompt in ([1], [2, 3], [4, 5, 6]):
        reference = run_ids(Autoregressive(), pair, prompt, max_new_tokens=40)
        assert run_ids(FixedSpeculative(4), pair, prompt, max_new_tokens=40) == reference
        assert run_ids(Pacer(2, 8, 0.2), pair, prompt, max_new_tokens=40) == reference


def test_greedy_equals_transformers_assisted_generation():
    pair = tiny_pair(scale=6.0, draft_noise=0.3)
    for prompt in PROMPTS[:3]:
        input_ids = torch.tensor([prompt])
        # transformers 5 reads these knobs from the assistant's generation_config
        pair.draft.generation_config.num_assistant_tokens = 4
        pair.draft.generation_config.num_assistant_tokens_schedule = "constant"
        pair.draft.generation_config.assistant_confidence_threshold = 0.0
        assisted = pair.target.generate(input_ids, assistant_model=pair.draft, do_sample=False,
                                        max_new_tokens=24, min_new_tokens=24, pad_token_id=0)
        ours = run_ids(FixedSpeculative(4), pair, prompt, max_new_tokens=24)
        assert ours == assisted[0, len(prompt):].tolist()


PROMPT = [1, 2]
N_TOKENS = 3
RUNS = 3000


def sample_counts(decoder, pair, runs=RUNS, **settings):
    counts = Counter()
    for seed in range(runs):
        counts[tuple(run_ids(decoder, pair, PROMPT, max_new_tokens=N_TOKENS, seed=seed, **settings))] += 1
    return counts


@pytest.fixture(scope="module")
def six_token_pair():
    return tiny_pair(vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=16)


@pytest.fixture(scope="module")
def six_token_truth(six_token_pair):
    return target_sequence_distribution(six_token_pair.target, PROMPT, N_TOKENS, temperature=1.0)


@pytest.mark.parametrize("make_decoder", [
    lambda: Autoregressive(),
    lambda: FixedSpeculative(2),
    lambda: Pacer(1, 2, 0.5, ConfidencePreVerifier(), "submit"),
], ids=["ar", "fixed", "pacer"])
def test_sampling_matches_target_distribution(six_token_pair, six_token_truth, make_decoder):
    counts = sample_counts(make_decoder(), six_token_pair, temperature=1.0)
    assert chi_square_p_value(counts, six_token_truth) > SIGNIFICANCE


def test_sampling_with_top_k_matches_filtered_target(six_token_pair):
    truth = target_sequence_distribution(six_token_pair.target, PROMPT, N_TOKENS, temperature=0.8, top_k=4)
    counts = sample_counts(FixedSpeculative(2), six_token_pair, temperature=0.8, top_k=4)
    assert chi_square_p_value(counts, truth) > SIGNIFICANCE


def test_broken_acceptance_rule_is_caught(six_token_pair, six_token_truth, monkeypatch):
    """Accepting every drafted token gives the draft's distribution: the test must reject it."""
    monkeypatch.setattr(sampling, "acceptance_probs", lambda target, draft: torch.ones_like(target))
    counts = sample_counts(FixedSpeculative(2), six_token_pair, temperature=1.0)
    assert chi_square_p_value(counts, six_token_truth) < SIGNIFICANCE


def test_broken_residual_is_caught(six_token_pair, six_token_truth, monkeypatch):
    """Resampling from p instead of norm(max(0, p - q)) after a rejection biases the output."""
    monkeypatch.setattr(sampling, "residual_distribution", lambda target, draft: target)
    counts = sample_counts(FixedSpeculative(2), six_token_pair, temperature=1.0)
    assert chi_square_p_value(counts, six_token_truth) < SIGNIFICANCE
