"""Pure-math tests of pacer_core.particles (no model): normalisation, ESS, systematic resampling."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer_core.particles import (dead_particle_cycles, effective_sample_size, normalize_log_weights, proposal_kl,
                                  resample_line, should_resample, systematic_resample)
from pacer_core.settings import FIELD_BY_NAME, Limits

pytestmark = pytest.mark.pure

log_weight_lists = st.lists(st.floats(min_value=-50, max_value=50, allow_nan=False), min_size=1, max_size=32)


@given(log_weight_lists)
@settings(max_examples=100, deadline=None)
def test_normalised_weights_sum_to_one_and_ignore_a_shift(values):
    weights = normalize_log_weights(torch.tensor(values, dtype=torch.float64))
    assert weights.dtype == torch.float64
    assert bool((weights >= 0).all())
    assert math.isclose(float(weights.sum()), 1.0, abs_tol=1e-12)
    shifted = normalize_log_weights(torch.tensor(values, dtype=torch.float64) + 123.0)
    assert torch.allclose(weights, shifted, atol=1e-12)


def test_normalise_edge_cases():
    assert normalize_log_weights(torch.zeros(0)).numel() == 0
    inf = float("inf")
    assert normalize_log_weights(torch.tensor([-inf, -inf, -inf])).tolist() == pytest.approx([1 / 3] * 3)
    assert normalize_log_weights(torch.tensor([-inf, 0.0, -inf])).tolist() == [0.0, 1.0, 0.0]
    assert normalize_log_weights(torch.tensor([-1000.0, -1000.0])).tolist() == pytest.approx([0.5, 0.5])


@given(log_weight_lists)
@settings(max_examples=100, deadline=None)
def test_ess_is_between_one_and_n(values):
    weights = normalize_log_weights(torch.tensor(values, dtype=torch.float64))
    ess = effective_sample_size(weights)
    assert 1.0 - 1e-9 <= ess <= len(values) + 1e-9


def test_ess_extremes():
    for n in (1, 4, 16):
        assert effective_sample_size(torch.full((n,), 1.0 / n)) == pytest.approx(n)
        one_hot = torch.zeros(n, dtype=torch.float64)
        one_hot[n // 2] = 1.0
        assert effective_sample_size(one_hot) == pytest.approx(1.0)
    assert effective_sample_size(torch.zeros(0)) == 0.0
    assert effective_sample_size(torch.tensor([0.5, 0.5, 0.0, 0.0])) == pytest.approx(2.0)


def test_a_point_that_rounds_to_one_never_picks_a_trailing_zero_weight_particle():
    """Found by hypothesis: (u + N - 1) / N rounds to exactly 1.0 for u just below 1."""
    assert systematic_resample(torch.tensor([0.0, 1.0, 0.0]), uniform=0.9999999999999998).tolist() == [1, 1, 1]
    weights = torch.tensor([0.5, 0.5 - 1e-12, 0.0], dtype=torch.float64)   # cumulative sum ends below 1
    assert 2 not in systematic_resample(weights, uniform=0.9999999999999998).tolist()


def test_systematic_resample_worked_example():
    weights = torch.tensor([0.1, 0.6, 0.2, 0.1], dtype=torch.float64)
    assert systematic_resample(weights, uniform=0.2).tolist() == [0, 1, 1, 2]   # u = 0.05
    assert systematic_resample(torch.tensor([1.0]), uniform=0.9).tolist() == [0]
    assert systematic_resample(torch.zeros(0)).numel() == 0


weight_vectors = st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=1, max_size=24).filter(
    lambda values: sum(values) > 1e-6)


@given(weight_vectors, st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
@settings(max_examples=200, deadline=None)
def test_systematic_copies_are_floor_or_ceil_of_expected(values, uniform):
    weights = torch.tensor(values, dtype=torch.float64)
    weights = weights / weights.sum()
    n = len(values)
    ancestors = systematic_resample(weights, uniform=uniform)
    assert ancestors.shape == (n,) and ancestors.dtype == torch.long
    assert bool((ancestors[1:] >= ancestors[:-1]).all()), "systematic resampling returns sorted ancestors"
    assert 0 <= int(ancestors.min()) and int(ancestors.max()) < n
    copies = torch.bincount(ancestors, minlength=n).double()
    expected = n * weights
    assert bool((copies >= torch.floor(expected - 1e-9)).all()) and bool((copies <= torch.ceil(expected + 1e-9)).all())
    assert bool((copies[weights == 0] == 0).all()), "a zero-weight particle is never chosen"
    heaviest = int(torch.argmax(weights))
    if float(weights[heaviest]) > 1.0 / n:
        assert heaviest in ancestors.tolist(), "the max-weight particle (w > 1/N) must survive"


@pytest.mark.statistical
def test_systematic_copies_are_unbiased():
    """E[copies of i] = N * w_i over seeded draws of u (copies is floor or ceil, so std per draw <= 0.5)."""
    weights = torch.tensor([0.05, 0.3, 0.01, 0.24, 0.4], dtype=torch.float64)
    n, draws = len(weights), 4000
    generator = torch.Generator().manual_seed(1234)
    total = torch.zeros(n, dtype=torch.float64)
    for _ in range(draws):
        total += torch.bincount(systematic_resample(weights, generator), minlength=n)
    mean_copies = total / draws
    # 5 sigma with sigma <= 0.5 / sqrt(draws) = 0.0079
    assert torch.allclose(mean_copies, n * weights, atol=0.04), (mean_copies, n * weights)


def test_systematic_resample_is_reproducible_with_a_seed():
    weights = torch.softmax(torch.randn(8, generator=torch.Generator().manual_seed(0), dtype=torch.float64), 0)
    first = systematic_resample(weights, torch.Generator().manual_seed(7))
    second = systematic_resample(weights, torch.Generator().manual_seed(7))
    assert first.tolist() == second.tolist()


def test_proposal_kl_worked_example_and_edge_cases():
    target = torch.tensor([0.5, 0.5, 0.0]).log()
    draft = torch.tensor([0.25, 0.25, 0.5]).log()
    assert float(proposal_kl(target, draft)) == pytest.approx(math.log(2))     # 2 x 0.5 x log(0.5 / 0.25)
    assert float(proposal_kl(target, target)) == 0.0                            # zero-mass tokens add nothing
    misses = torch.tensor([1.0, 0.0, 0.0]).log()
    assert float(proposal_kl(target, misses)) == math.inf                        # the draft never proposes token 1
    batched = proposal_kl(torch.stack([target, target]), torch.stack([draft, target]))
    assert batched.shape == (2,) and batched.tolist() == pytest.approx([math.log(2), 0.0])


@given(st.lists(st.floats(min_value=-20, max_value=20), min_size=2, max_size=16),
       st.lists(st.floats(min_value=-20, max_value=20), min_size=2, max_size=16))
@settings(max_examples=100, deadline=None)
def test_proposal_kl_is_non_negative(target_logits, draft_logits):
    size = min(len(target_logits), len(draft_logits))
    target = torch.log_softmax(torch.tensor(target_logits[:size], dtype=torch.float64), -1)
    draft = torch.log_softmax(torch.tensor(draft_logits[:size], dtype=torch.float64), -1)
    assert float(proposal_kl(target, draft)) >= -1e-12


def _allowed_thresholds() -> list[float]:
    """Every ESS threshold the settings accept, on their own step."""
    field = FIELD_BY_NAME["ess_threshold"]
    count = round((field.high - field.low) / field.step)
    return [round(field.low + i * field.step, 10) for i in range(count + 1)]


@pytest.mark.parametrize("ess_threshold", _allowed_thresholds())
def test_resampling_fires_at_every_allowed_n_and_threshold(ess_threshold):
    """A fully collapsed weight vector resamples and an even one does not, for every N >= 2 the settings allow
    (one particle has nothing to resample between) and every threshold on the settings' grid."""
    for n_particles in range(2, Limits().max_particles + 1):
        collapsed = torch.zeros(n_particles, dtype=torch.float64)
        collapsed[n_particles // 2] = 1.0
        even = torch.full((n_particles,), 1.0 / n_particles, dtype=torch.float64)
        assert should_resample(effective_sample_size(collapsed), n_particles, ess_threshold), (n_particles, ess_threshold)
        assert not should_resample(effective_sample_size(even), n_particles, ess_threshold), (n_particles, ess_threshold)


def test_resample_line_worked_example():
    assert resample_line(2, 0.5) == 1.5 and resample_line(8, 0.5) == 4.5 and resample_line(1, 0.5) == 1.0
    assert should_resample(effective_sample_size(torch.tensor([0.9, 0.1])), 2, 0.5)       # ESS 1.22
    assert not should_resample(effective_sample_size(torch.tensor([0.7, 0.3])), 2, 0.5)   # ESS 1.72
    assert not should_resample(1.0, 1, 1.0)                                               # one particle: never


def test_the_threshold_setting_can_always_fire():
    """No allowed value of the setting makes resampling impossible (0 would: the line would be the ESS floor)."""
    assert FIELD_BY_NAME["ess_threshold"].low > 0


def test_dead_particle_cycles_worked_example():
    weights = [[0.6, 0.4], [0.995, 0.005], [1.0, 0.0]]
    assert dead_particle_cycles(weights, [False, False, False]) == (1, 1)
    assert dead_particle_cycles(weights, [False, True, False]) == (0, 0)
    four = [[0.25] * 4, [0.997, 0.001, 0.001, 0.001], [0.5, 0.5, 0.0, 0.0], [0.25] * 4]
    assert dead_particle_cycles(four, [False] * 4) == (2, 5)     # cycle 2 ran with 3 dead, cycle 3 with 2
    assert dead_particle_cycles([], []) == (0, 0)
