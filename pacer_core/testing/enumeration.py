"""Exact distributions on tiny-vocabulary models, for the sampling tests and benchmarks/smc_tv.py
(docs/algorithms.md#how-exactness-is-tested)."""
from __future__ import annotations

import itertools

import torch

from ..sampling import logits_to_probs


@torch.inference_mode()
def sequence_distribution(logits_of, vocab: int, prompt_ids, n_tokens: int, temperature: float,
                          top_k: int = 0, top_p: float = 1.0) -> dict[tuple, float]:
    """P(first n_tokens generated = s) for every s in V^n, by enumeration (small V and n only). ``logits_of(ids)``
    gives the logits [len(ids), V] of a sequence of ids: whatever engine the decoders under test run on."""
    distribution = {}
    for suffix in itertools.product(range(vocab), repeat=n_tokens - 1):
        logits = logits_of(list(prompt_ids) + list(suffix))[len(prompt_ids) - 1:]
        probs = logits_to_probs(logits, temperature, top_k, top_p)  # [n_tokens, V]
        prefix_prob = 1.0
        for position, token in enumerate(suffix):
            prefix_prob *= float(probs[position, token])
        for last in range(vocab):
            distribution[tuple(suffix) + (last,)] = prefix_prob * float(probs[n_tokens - 1, last])
    return distribution


def target_sequence_distribution(model, prompt_ids, n_tokens: int, temperature: float,
                                 top_k: int = 0, top_p: float = 1.0) -> dict[tuple, float]:
    """``sequence_distribution`` with a transformers causal LM's own forward."""
    return sequence_distribution(lambda ids: model(input_ids=torch.tensor([ids])).logits[0], model.config.vocab_size,
                                 prompt_ids, n_tokens, temperature, top_k, top_p)


def chi_square_p_value(counts: dict[tuple, int], expected_probs: dict[tuple, float]) -> float:
    """Pearson chi-square goodness of fit, cells with expected count < 5 pooled into one."""
    from scipy.stats import chisquare

    total = sum(counts.values())
    observed, expected, pooled_obs, pooled_exp = [], [], 0, 0.0
    for outcome, prob in expected_probs.items():
        if prob * total >= 5:
            observed.append(counts.get(outcome, 0))
            expected.append(prob * total)
        else:
            pooled_obs += counts.get(outcome, 0)
            pooled_exp += prob * total
    if pooled_exp > 0:
        observed.append(pooled_obs)
        expected.append(pooled_exp)
    scale = sum(observed) / sum(expected)
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)


def total_variation(counts: dict[tuple, int], expected_probs: dict[tuple, float]) -> float:
    total = sum(counts.values())
    outcomes = set(counts) | set(expected_probs)
    return 0.5 * sum(abs(counts.get(o, 0) / total - expected_probs.get(o, 0.0)) for o in outcomes)
