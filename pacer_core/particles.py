"""Pure math of SMC-SD's particles: normalised weights, effective sample size, systematic resampling,
and the divergence of the proposal (draft) from the target that decides how many particles are needed.

No model, no cache; float64 throughout. Shape letter: N particles. Follows
docs/algorithms.md#smc-sd (Emara et al. 2026, "Faster LLM Inference via Sequential Monte Carlo",
arXiv 2604.15672). Invariants the tests check:

* ``normalize_log_weights`` returns non-negative weights summing to 1 (uniform when every log-weight
  is -inf, i.e. no particle carries information).
* ``1 <= effective_sample_size(w) <= N``; N for equal weights, 1 for a one-hot vector.
* ``resample_line(N, t) = 1 + t · (N − 1)`` lies in the ESS range [1, N]: for every N ≥ 2 and t in (0, 1] a
  one-hot weight vector (ESS 1) falls below it and an even one (ESS N) does not.
* ``proposal_kl(p, p) = 0``, ``proposal_kl >= 0``, +inf where the draft gives 0 to a token the target
  can emit.
* ``systematic_resample`` returns sorted ancestor indices with E[copies of i] = N * w_i, and every
  particle gets either floor(N * w_i) or ceil(N * w_i) copies (so one with w_i > 1/N always survives).

Worked example (N = 4): w = [0.1, 0.6, 0.2, 0.1], u = 0.05 → points u + j/N = [0.05, 0.3, 0.55, 0.8],
cumulative weights [0.1, 0.7, 0.9, 1.0] → ancestors [0, 1, 1, 2]: copies [1, 2, 1, 0] against
N * w = [0.4, 2.4, 0.8, 0.4].
"""
from __future__ import annotations

import math

import torch


def normalize_log_weights(log_weights: torch.Tensor) -> torch.Tensor:
    """w_i = exp(logw_i) / Σ_j exp(logw_j), computed stably in float64. log_weights: [N] → [N]."""
    log_weights = torch.as_tensor(log_weights, dtype=torch.float64)
    if log_weights.numel() == 0:
        return log_weights.clone()
    if not torch.isfinite(log_weights.max()):
        # Every particle has probability 0 under the target (or a +inf slipped in): fall back to uniform.
        if bool(torch.isneginf(log_weights).all()):
            return torch.full_like(log_weights, 1.0 / log_weights.numel())
        raise ValueError(f"log-weights must be finite or -inf, got {log_weights.tolist()}")
    return torch.softmax(log_weights, dim=0)


def effective_sample_size(weights: torch.Tensor) -> float:
    """ESS = 1 / Σ w_i² for normalised weights [N]; 0.0 for no particles."""
    weights = torch.as_tensor(weights, dtype=torch.float64)
    if weights.numel() == 0:
        return 0.0
    return float(1.0 / torch.sum(weights * weights))


def resample_line(n_particles: int, ess_threshold: float) -> float:
    """The ESS below which SMC-SD resamples: the threshold t as a fraction of the ESS range [1, N],
    line = 1 + t · (N − 1).

    ESS = 1 / Σ w² can only lie in [1, N], so a line of t · N (the textbook form) sits below the whole range
    at N = 2 and t = 0.5 and can never be crossed. Measured from 1 instead, t = 0.5 puts the line half-way
    between total collapse (one particle holds all the weight: ESS 1) and even weights (ESS N), at every N.
    Worked example, N = 2, t = 0.5: line 1.5, so w = [0.9, 0.1] (ESS 1.22) resamples and w = [0.7, 0.3]
    (ESS 1.72) does not; N = 8, t = 0.5: line 4.5 (the textbook line would be 4.0)."""
    return 1.0 + ess_threshold * (n_particles - 1)


def should_resample(ess: float, n_particles: int, ess_threshold: float) -> bool:
    """Resample when the ESS has fallen below ``resample_line``. With one particle there is nothing to choose
    between (ESS is always 1 = the line), so it never resamples. Even weights give ESS = N only up to rounding
    (1 / Σ w² of N × 1/N can come out as N − 1e-15), so the comparison forgives a relative 1e-9: at threshold 1
    even weights do not resample, any real unevenness does."""
    return ess < resample_line(n_particles, ess_threshold) * (1.0 - 1e-9)


def dead_particle_cycles(cycle_weights: list[list[float]], resampled: list[bool],
                         weight_floor: float = 0.01) -> tuple[int, int]:
    """(cycles that ran with a particle under ``weight_floor`` of the weight, the particle rows those cycles spent
    on such particles). A cycle runs with the weights the cycle before it left: all equal after a resampling,
    else that cycle's normalised weights. ``cycle_weights[c]``: cycle c's normalised weights [N] (before its own
    resampling); ``resampled[c]``: whether cycle c resampled.

    Worked example, N = 2: weights [[0.6, 0.4], [0.995, 0.005], [1.0, 0.0]], never resampled → cycle 2 ran with
    particle 2 at 0.005 (cycle 1 ran with 0.4): (1 cycle, 1 row). Had cycle 1 resampled: (0, 0)."""
    cycles = rows = 0
    for weights_before, resampled_before in zip(cycle_weights[:-1], resampled[:-1]):
        if resampled_before:
            continue
        dead = sum(1 for weight in weights_before if weight < weight_floor)
        cycles += int(dead > 0)
        rows += dead
    return cycles, rows


def proposal_kl(target_log_dist: torch.Tensor, draft_log_dist: torch.Tensor) -> torch.Tensor:
    """KL(p || q) = Σ_x p(x) (log p(x) − log q(x)) in nats over the last dimension, from the target's and
    the draft's log-distributions ([..., V] → [...]; -inf entries allowed).

    Why it matters: importance sampling from q towards p needs about exp(KL(p || q)) samples before its
    estimates settle (Chatterjee & Diaconis 2018, "The sample size required in importance sampling",
    Ann. Appl. Probab. 28(2)). One SMC-SD cycle weights a block of K drafted tokens, whose KL is the sum
    of the per-token ones along the path, so N particles cope with a block only while N ≳ exp(K · KL)."""
    target_log_dist = torch.as_tensor(target_log_dist, dtype=torch.float64)
    draft_log_dist = torch.as_tensor(draft_log_dist, dtype=torch.float64)
    target_probs = target_log_dist.exp()
    terms = target_probs * (target_log_dist - draft_log_dist)
    return torch.where(target_probs > 0, terms, torch.zeros_like(terms)).sum(-1)


def systematic_resample(weights: torch.Tensor, generator: torch.Generator | None = None,
                        uniform: float | None = None) -> torch.Tensor:
    """Ancestor index [N] (long): one u ~ U[0, 1/N), points u + j/N, ancestor of j = the first i
    whose cumulative weight exceeds point j. ``uniform`` in [0, 1) fixes u = uniform / N (tests)."""
    weights = torch.as_tensor(weights, dtype=torch.float64)
    n_particles = weights.numel()
    if n_particles == 0:
        return torch.zeros(0, dtype=torch.long)
    if uniform is None:
        device = None if generator is None else generator.device
        uniform = float(torch.rand((), generator=generator, dtype=torch.float64, device=device))
    points = (uniform + torch.arange(n_particles, dtype=torch.float64, device=weights.device)) / n_particles
    points.clamp_(max=math.nextafter(1.0, 0.0))   # [N] in [0, 1): (u + N-1)/N may round to 1.0
    # Rounding must not leave a point past the last particle that has weight: the cumulative sum is 1
    # from it on, so every point lands on a particle with weight (or the last, if none has any).
    weighted = torch.nonzero(weights > 0)
    cumulative = torch.cumsum(weights, dim=0)
    cumulative[int(weighted.max()) if weighted.numel() else n_particles - 1:] = 1.0
    return torch.searchsorted(cumulative, points, right=True)
