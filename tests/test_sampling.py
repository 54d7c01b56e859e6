"""Pure tests of pacer_core.sampling (no decoder run): the speculative-sampling identity computed exactly,
the top-k / top-p filters, temperature, greedy match counting, and the KV cache's crop on a tiny model.

The identity (Leviathan et al. 2023, Theorem 1; docs/algorithms.md#speculative-sampling): a token x drafted
from q and accepted with probability min(1, p(x)/q(x)), replaced after a rejection by a draw from
norm(max(0, p − q)), is distributed as p. Here that is computed exactly — no sampling — by walking every
branch of the rule the decoders use (``decoders/verify.py:judge``: draft γ tokens, accept a prefix, then a
corrected or a bonus token, then a fresh step) over random small distributions. With this exact check the
decoders' chi-square tests (marked ``statistical``) only have to catch wiring mistakes, which move the
output distribution far more than a subtle formula slip, so they need few runs."""
from __future__ import annotations

import itertools

import pytest
import torch

from pacer_core.kvcache import CachedModel
from pacer_core.sampling import (acceptance_probs, count_greedy_matches, filter_logits, logits_to_probs,
                                 residual_distribution, token_log_probs)
from pacer_core.testing.tiny import tiny_llama

pytestmark = pytest.mark.pure

VOCAB = 5
FILTERS = [  # (temperature, top_k, top_p) applied to both target and draft logits, as the decoders do
    (1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 3, 1.0), (1.0, 0, 0.8), (0.9, 4, 0.7), (1.0, 1, 1.0), (2.0, 0, 0.3)]


class RandomModel:
    """Next-token logits for every prefix, drawn once per prefix from a seeded generator (a tabulated LM)."""

    def __init__(self, seed: int, scale: float):
        self.generator = torch.Generator().manual_seed(seed)
        self.scale = scale
        self.table: dict[tuple, torch.Tensor] = {}

    def logits(self, prefix: tuple) -> torch.Tensor:  # [V]
        if prefix not in self.table:
            self.table[prefix] = torch.randn(VOCAB, generator=self.generator, dtype=torch.float64) * self.scale
        return self.table[prefix]


def speculative_output_distribution(target_probs_of, draft_probs_of, gamma: int, n_tokens: int,
                                    accept=acceptance_probs, residual=residual_distribution) -> dict[tuple, float]:
    """P(first n_tokens of the output = s) for every s, computed exactly over every branch of speculative
    sampling with γ drafted tokens per step. target_probs_of / draft_probs_of: prefix tuple → [V]."""

    def continue_from(prefix: tuple, n_left: int, drafts_left: int) -> dict[tuple, float]:
        if n_left == 0:
            return {(): 1.0}
        target_probs = target_probs_of(prefix)                 # [V]
        out: dict[tuple, float] = {}

        def add(token: int, weight: float, drafts_after: int) -> None:
            if weight <= 0:
                return
            for rest, prob in continue_from(prefix + (token,), n_left - 1, drafts_after).items():
                out[(token,) + rest] = out.get((token,) + rest, 0.0) + weight * prob

        if drafts_left == 0:                                   # every draft accepted: the bonus token, from p
            for token in range(VOCAB):
                add(token, float(target_probs[token]), gamma)
            return out
        draft_probs = draft_probs_of(prefix)                   # [V]
        accept_probs = accept(target_probs, draft_probs)       # [V]: min(1, p(x)/q(x)) for each possible x
        accepted_mass = draft_probs * accept_probs             # [V]: q(x)·min(1, p(x)/q(x))
        for token in range(VOCAB):                             # x drafted and accepted: keep drafting
            add(token, float(accepted_mass[token]), drafts_left - 1)
        rejected = 1.0 - float(accepted_mass.sum())            # some x drafted and rejected
        if rejected > 1e-12:
            corrected_probs = residual(target_probs, draft_probs)
            for token in range(VOCAB):                         # the corrected token ends the step
                add(token, rejected * float(corrected_probs[token]), gamma)
        return out

    return continue_from((), n_tokens, gamma)


def target_distribution(target_probs_of, n_tokens: int) -> dict[tuple, float]:
    """P(s) = Π p(s_i | s_<i): what plain sampling from the target gives."""
    distribution = {}
    for sequence in itertools.product(range(VOCAB), repeat=n_tokens):
        prob = 1.0
        for index, token in enumerate(sequence):
            prob *= float(target_probs_of(sequence[:index])[token])
        distribution[sequence] = prob
    return distribution


def max_difference(first: dict, second: dict) -> float:
    return max(abs(first.get(key, 0.0) - second.get(key, 0.0)) for key in set(first) | set(second))


def probs_of(model: RandomModel, temperature: float, top_k: int, top_p: float):
    """prefix → the filtered sampling distribution [V] (float32 like the decoders', then float64), memoised."""
    memo: dict[tuple, torch.Tensor] = {}

    def probs(prefix: tuple) -> torch.Tensor:
        if prefix not in memo:
            memo[prefix] = logits_to_probs(model.logits(prefix), temperature, top_k, top_p).double()
        return memo[prefix]
    return probs


@pytest.mark.parametrize("seed", range(4))
def test_one_token_acceptance_and_residual_give_exactly_p(seed):
    """P(x) = q(x)·min(1, p/q) + (1 − Σ_y q(y)·min(1, p/q)) · norm(max(0, p − q))(x) = p(x)."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(50):
        target_probs = torch.softmax(torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 3, -1)
        draft_probs = torch.softmax(torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 3, -1)
        accepted_mass = draft_probs * acceptance_probs(target_probs, draft_probs)
        output = accepted_mass + (1 - accepted_mass.sum()) * residual_distribution(target_probs, draft_probs)
        assert torch.allclose(output, target_probs, atol=1e-12, rtol=0)


@pytest.mark.parametrize("temperature, top_k, top_p", FILTERS)
@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_speculative_sampling_output_is_exactly_the_target_distribution(gamma, temperature, top_k, top_p):
    """Three output tokens over every branch (accept, reject + corrected, bonus, next step), the filters
    applied to both p and q: the distribution of the output sequence is the target's, to float precision.
    Filtering makes q zero where p is not (and the reverse), the case a reduced-vocabulary drafter creates."""
    for seed in range(3):
        target = probs_of(RandomModel(2 * seed, scale=2.0), temperature, top_k, top_p)
        draft = probs_of(RandomModel(2 * seed + 1, scale=2.0), temperature, top_k, top_p)
        exact = speculative_output_distribution(target, draft, gamma, n_tokens=3)
        truth = target_distribution(target, 3)
        assert sum(exact.values()) == pytest.approx(1.0, abs=1e-6)
        assert max_difference(exact, truth) < 2e-6, (seed, max_difference(exact, truth))


def test_a_draft_equal_to_the_target_is_always_accepted():
    target = probs_of(RandomModel(0, scale=2.0), 1.0, 0, 1.0)
    target_probs = target(())
    assert torch.equal(acceptance_probs(target_probs, target_probs), torch.ones(VOCAB, dtype=torch.float64))
    assert torch.equal(residual_distribution(target_probs, target_probs), target_probs)   # the p ≤ q fallback
    assert max_difference(speculative_output_distribution(target, target, 3, 3), target_distribution(target, 3)) < 2e-6


@pytest.mark.parametrize("broken_accept, broken_residual", [
    (lambda target, draft: torch.ones_like(target), residual_distribution),     # accept every drafted token
    (acceptance_probs, lambda target, draft: target),                           # resample from p, not p − q
    (lambda target, draft: (target / draft).clamp(max=1.0) ** 2, residual_distribution),
], ids=["accept-all", "residual-is-p", "squared-ratio"])
def test_the_exact_check_catches_a_broken_rule(broken_accept, broken_residual):
    """The identity test can fail: each broken rule moves some sequence's probability by more than 1e-3,
    some 500x the tolerance the correct rule meets."""
    target = probs_of(RandomModel(0, scale=2.0), 1.0, 0, 1.0)
    draft = probs_of(RandomModel(1, scale=2.0), 1.0, 0, 1.0)
    broken = speculative_output_distribution(target, draft, 2, 3, broken_accept, broken_residual)
    assert max_difference(broken, target_distribution(target, 3)) > 1e-3


def test_acceptance_and_residual_values():
    target_probs = torch.tensor([0.5, 0.3, 0.2, 0.0])
    draft_probs = torch.tensor([0.25, 0.6, 0.0, 0.15])
    assert acceptance_probs(target_probs[:2], draft_probs[:2]).tolist() == pytest.approx([1.0, 0.5])
    # max(0, p − q) = [0.25, 0, 0.2, 0] → normalised by 0.45
    assert residual_distribution(target_probs, draft_probs).tolist() == pytest.approx([0.25 / 0.45, 0, 0.2 / 0.45, 0])
    rows = residual_distribution(torch.stack([target_probs, draft_probs]), torch.stack([draft_probs, target_probs]))
    assert rows.sum(-1).tolist() == pytest.approx([1.0, 1.0])      # [..., V] rows, each normalised


# ------------------------------------------------------------------------------------------ filters


def reference_filter(logits: list[float], top_k: int, top_p: float) -> set[int]:
    """Ids kept: the top_k largest, then the smallest prefix by probability whose mass reaches top_p."""
    order = sorted(range(len(logits)), key=lambda i: -logits[i])
    if 0 < top_k < len(logits):
        order = order[:top_k]
    if not 0 < top_p < 1:
        return set(order)
    probs = torch.softmax(torch.tensor([logits[i] for i in order], dtype=torch.float64), -1).tolist()
    kept, mass = [], 0.0
    for index, prob in zip(order, probs):
        if mass >= top_p:
            break
        kept.append(index)
        mass += prob
    return set(kept)


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (1, 1.0), (3, 1.0), (8, 1.0), (50, 1.0), (0, 0.5),
                                          (0, 0.9), (0, 1e-6), (4, 0.6), (2, 0.99)])
def test_filters_keep_exactly_the_top_k_and_the_nucleus(top_k, top_p):
    generator = torch.Generator().manual_seed(top_k * 100 + int(top_p * 1000))
    logits = torch.randn(6, 8, generator=generator) * 2          # [rows, V]: rows are filtered independently
    filtered = filter_logits(logits, top_k, top_p)
    for row, filtered_row in zip(logits.tolist(), filtered):
        kept = set(torch.nonzero(torch.isfinite(filtered_row)).flatten().tolist())
        assert kept == reference_filter(row, top_k, top_p)
        assert max(range(8), key=lambda i: row[i]) in kept          # the argmax always survives
        assert all(float(filtered_row[i]) == row[i] for i in kept)  # kept logits are untouched


def test_temperature_scales_logits_before_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    for temperature in (0.25, 1.0, 3.0):
        assert torch.allclose(logits_to_probs(logits, temperature), torch.softmax(logits / temperature, -1))
    assert logits_to_probs(logits, 1e-3)[0].tolist() == pytest.approx([1.0, 0.0, 0.0, 0.0])  # → argmax
    flat = logits_to_probs(logits, 1e4)[0]
    assert float(flat.max() - flat.min()) < 1e-3                                                # → uniform
    with pytest.raises(ValueError, match="temperature"):
        logits_to_probs(logits, 0.0)


def test_filtered_probabilities_and_log_probabilities_agree():
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(1)) * 3
    probs = logits_to_probs(logits, 0.8, top_k=5, top_p=0.9)
    log_probs = token_log_probs(logits, 0.8, top_k=5, top_p=0.9)
    assert log_probs.dtype == torch.float64
    assert torch.equal(probs == 0, torch.isneginf(log_probs))
    assert torch.allclose(log_probs.exp().float(), probs, atol=1e-6)
    assert probs.sum(-1).tolist() == pytest.approx([1.0] * 3)


# ------------------------------------------------------------------------------------- greedy matches


@pytest.mark.parametrize("drafted, target_argmax, expected", [
    ([], [7], 0),
    ([1, 2, 3], [1, 2, 3, 4], 3),            # all accepted: the target's row γ (the bonus) is not compared
    ([1, 2, 3], [9, 2, 3, 4], 0),
    ([1, 2, 3], [1, 9, 3, 4], 1),            # a later match after a mismatch does not count
    ([1, 2, 3], [1, 2, 9, 4], 2),
    ([5, 5], [5], 1),                        # never reads past the shorter list
])
def test_count_greedy_matches(drafted, target_argmax, expected):
    assert count_greedy_matches(drafted, target_argmax) == expected


# -------------------------------------------------------------------------------------- KV cache crop


def test_crop_rolls_the_cache_back_to_a_prefix():
    """After a rejected draft the cache is cropped to the committed prefix; what follows must give the
    logits a cache-free forward over the committed sequence gives."""
    model = tiny_llama(vocab_size=16, hidden=16, layers=2, seed=3)
    sequence = [3, 1, 4, 1, 5, 9, 2, 6]
    cached = CachedModel(model, 16, keep_features=True)
    first = cached.forward(sequence)[0]                          # [T, V]
    assert cached.length == 8 and cached.feature_length == 8
    cached.crop(20)                                              # longer than the cache: nothing happens
    assert cached.length == 8
    cached.crop(5)
    assert cached.length == 5 and cached.feature_length == 5
    again = cached.forward(sequence[5:])[0]                      # the same tokens again: the same logits
    assert torch.allclose(again, first[5:], atol=1e-5)
    cached.crop(4)
    replaced = cached.forward([7, 7])[0]                         # a different continuation after the crop
    with torch.inference_mode():
        fresh = model(input_ids=torch.tensor([sequence[:4] + [7, 7]])).logits[0, 4:].float()
    assert torch.allclose(replaced, fresh, atol=1e-5)
    assert not torch.allclose(replaced, first[4:6], atol=1e-3)   # it really computed something new
    assert cached.length == 6



@pytest.mark.pure
def test_display_prob_is_the_softmax_entry_without_the_row():
    from pacer_core.sampling import display_prob, display_probs, one_hot
    logits = torch.tensor([2.0, -1.0, 0.5, 30.0, float("-inf")])
    for token_id in range(5):
        assert display_prob(logits, token_id) == pytest.approx(float(display_probs(logits)[token_id]), rel=1e-6, abs=1e-12)
    row = one_hot(3, logits)
    assert row.dtype == torch.float32 and row.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0]


def test_sampled_ids_follow_the_distribution_and_never_take_a_zero_mass_id():
    from scipy.stats import chisquare

    from pacer_core.sampling import sample_rows, sample_token
    probs = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.3, 0.0])
    generator = torch.Generator().manual_seed(0)
    draws = sample_rows(probs.expand(20000, -1), generator)
    counts = torch.bincount(draws, minlength=6)
    assert counts[[0, 2, 5]].sum() == 0
    assert chisquare(counts[[1, 3, 4]].numpy(), (probs[[1, 3, 4]] * 20000).numpy()).pvalue > 1e-3
    assert sample_token(probs, torch.Generator().manual_seed(3)) in (1, 3, 4)


def test_a_draw_at_the_very_top_of_the_uniform_range_takes_the_last_id_with_mass(monkeypatch):
    from pacer_core import sampling
    monkeypatch.setattr(sampling.torch, "rand", lambda *shape, **kw: torch.ones(*shape, dtype=torch.float64))
    rows = torch.tensor([[0.25, 0.75, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    assert sampling.sample_rows(rows, None).tolist() == [1, 3]
