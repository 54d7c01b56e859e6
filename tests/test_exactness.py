"""Exactness (docs/algorithms.md#how-exactness-is-tested): greedy token identity with AR, and the sampling
distribution of the first tokens against the target's, enumerated on a tiny vocabulary.

The math of speculative sampling (acceptance, residual, filters) is checked exactly in tests/test_sampling.py;
the chi-square tests here (one per decoder, marked ``statistical``) check the decoders' wiring: the right rows,
the bonus token, the caches, the filters reaching every position. Significance level 0.001, fixed seeds (so
the outcome is repeatable).

Runs per chi-square test (RUNS = 1000, was 3000). Pearson's statistic over the 5**3 = 125 outcomes (cells with
an expected count under 5 pooled: about 75 degrees of freedom at 1000 runs) follows a noncentral chi-square
with noncentrality N·phi2 under an error whose distance from the target is phi2 = sum (p_bug - p)**2 / p.
At N = 1000, phi2 >= 0.1 is detected with power >= 0.99 at alpha = 0.001 (critical value ~117, mean ~175,
sd ~23). Accepting every draft (test_broken_acceptance_rule_is_caught, which checks this claim) has
phi2 ~ 0.6 on this pair; a subtle formula slip such as resampling from p instead of norm(max(0, p - q))
has phi2 ~ 0.05 (power ~0.6 at 1000 runs, ~0.95 at 1500) and is caught exactly, without sampling, by
tests/test_sampling.py."""
from collections import Counter

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, sampling, validate_settings
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.enumeration import chi_square_p_value, target_sequence_distribution
from pacer_core.testing.runs import run_ids, sample_counts
from pacer_core.testing.tiny import tiny_pair

SIGNIFICANCE = 1e-3


PROMPTS = [[1, 2, 3], [5], [7, 7, 7, 7, 9], [11, 40, 2, 63, 8, 0], list(range(20))]


PACER_CONFIGS = [(1, 4, 0.0, "submit"), (3, 16, 0.0, "submit"), (1, 16, 0.3, "submit"), (3, 4, 0.3, "discard"),
                 (1, 4, 0.99, "discard"), (3, 16, 0.99, "discard"), (1, 16, 0.99, "submit"), (3, 4, 0.99, "submit")]


@pytest.mark.slow   # ~20 s idle; the fast tier keeps greedy identity in test_cuda_tier, test_feature_head, test_pacer_phrases_and_cost
@pytest.mark.parametrize("noise", [0.1, 0.4, None])
def test_greedy_fixed_and_pacer_equal_ar_on_tiny_pairs(noise):
    target, drafter = tiny_pair(scale=6.0, draft_noise=noise, eos_token_id=63)
    # PACER: every pair of (block, max length, threshold, on_fail) values appears (8 configurations instead of the
    # 24 of the full product), except threshold 0 with discard: at threshold 0 no block fails, on_fail never acts
    decoders = [FixedSpeculative(g) for g in (1, 2, 4, 8)] + [
        Pacer(block, max_len, threshold, ConfidencePreVerifier(), on_fail)
        for block, max_len, threshold, on_fail in PACER_CONFIGS]
    for prompt in PROMPTS:
        reference = run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=40)
        for decoder in decoders:
            assert run_ids(decoder, target, drafter, prompt, max_new_tokens=40) == reference, (decoder.info(), prompt)


def test_greedy_stops_at_eos_like_ar():
    target, drafter = tiny_pair(vocab_size=8, scale=4.0, eos_token_id=0)
    for prompt in ([1], [2, 3], [4, 5, 6]):
        reference = run_ids(Autoregressive(), target, drafter, prompt, max_new_tokens=40)
        assert run_ids(FixedSpeculative(4), target, drafter, prompt, max_new_tokens=40) == reference
        assert run_ids(Pacer(2, 8, 0.2), target, drafter, prompt, max_new_tokens=40) == reference


def test_greedy_equals_transformers_assisted_generation():
    target, drafter = tiny_pair(scale=6.0, draft_noise=0.3)
    assistant = drafter.model
    for prompt in PROMPTS[:3]:
        input_ids = torch.tensor([prompt])
        # transformers 5 reads these knobs from the assistant's generation_config
        assistant.generation_config.num_assistant_tokens = 4
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        assisted = target.model.generate(input_ids, assistant_model=assistant, do_sample=False,
                                         max_new_tokens=24, min_new_tokens=24, pad_token_id=0)
        ours = run_ids(FixedSpeculative(4), target, drafter, prompt, max_new_tokens=24)
        assert ours == assisted[0, len(prompt):].tolist()


PROMPT = [1, 2]
N_TOKENS = 3
RUNS = 1000                  # see the module docstring for the power reasoning


FILTERED = {"temperature": 0.8, "top_k": 4}      # fixed SD's test also checks that the filters reach the decoder


@pytest.fixture(scope="module")
def filtered_truth(six_token_pair):
    target, _ = six_token_pair
    return target_sequence_distribution(target.model, PROMPT, N_TOKENS, **FILTERED)


@pytest.mark.statistical
def test_ar_sampling_matches_target_distribution(six_token_pair, six_token_truth):
    target, drafter = six_token_pair
    counts = sample_counts(Autoregressive(), target, drafter, PROMPT, N_TOKENS, RUNS, temperature=1.0)
    assert chi_square_p_value(counts, six_token_truth) > SIGNIFICANCE


@pytest.mark.statistical
def test_fixed_sampling_with_top_k_matches_filtered_target(six_token_pair, filtered_truth):
    target, drafter = six_token_pair
    counts = sample_counts(FixedSpeculative(2), target, drafter, PROMPT, N_TOKENS, RUNS, **FILTERED)
    assert chi_square_p_value(counts, filtered_truth) > SIGNIFICANCE


@pytest.mark.statistical
def test_pacer_sampling_matches_target_distribution(six_token_pair, six_token_truth):
    target, drafter = six_token_pair
    counts = sample_counts(Pacer(1, 2, 0.5, ConfidencePreVerifier(), "submit"), target, drafter, PROMPT, N_TOKENS,
                           RUNS, temperature=1.0)
    assert chi_square_p_value(counts, six_token_truth) > SIGNIFICANCE


@pytest.mark.statistical
def test_pacer_sampling_with_a_trained_sampling_layer_matches_target_distribution(six_token_pair, six_token_truth):
    """The layer llama.cpp drafters get (scalars only, a layer for sampled tokens) decides where drafting stops
    from the drafted tokens alone, so speculative sampling stays exact. Its threshold (near the median of this
    random layer's scores) makes it stop in many steps and not in others."""
    from pacer_core.preverifier.model import PreVerifierLayer, TrainedPreVerifier

    torch.manual_seed(0)
    layer, sampling_layer = PreVerifierLayer(0, scalar_count=8), PreVerifierLayer(0, scalar_count=8)
    trained = TrainedPreVerifier(layer, layer.shape() | {"threshold_greedy": 0.54}, sampling_layer)
    decoder = Pacer(1, 3, 0.54, trained, "submit")
    target, drafter = six_token_pair
    stops = Counter(event.stop_reason for seed in range(40) for event in
                    list(decoder.run(target, drafter, PROMPT, validate_settings(max_new_tokens=N_TOKENS,
                                                                                temperature=1.0, seed=seed)))[:-1])
    assert stops["preverifier"] >= 10 and stops["budget"] >= 10
    counts = sample_counts(decoder, target, drafter, PROMPT, N_TOKENS, RUNS, temperature=1.0)
    assert chi_square_p_value(counts, six_token_truth) > SIGNIFICANCE


@pytest.mark.statistical
def test_broken_acceptance_rule_is_caught(six_token_pair, filtered_truth, monkeypatch):
    """The chi-square tests have power at RUNS: accepting every drafted token gives the draft's distribution,
    and the fixed-SD test's settings must reject it."""
    monkeypatch.setattr(sampling, "acceptance_probs", lambda target_probs, draft_probs: torch.ones_like(target_probs))
    target, drafter = six_token_pair
    counts = sample_counts(FixedSpeculative(2), target, drafter, PROMPT, N_TOKENS, RUNS, **FILTERED)
    assert chi_square_p_value(counts, filtered_truth) < SIGNIFICANCE
