"""Pure math of SMC-SD's particles: normalised weights, effective sample size, systematic resampling,
and the divergence of the proposal (draft) from the target that decides how many particles are needed.

No model, no cache; float64 throughout. Shape letter: N particles. Follows
docs/algorithms.md#smc-sd (Emara et al. 2026, "Faster LLM Inference via Sequential Monte Carlo",
arXiv 2604.15672). Invariants the tests check:

* ``normalize_log_weights`` returns non-negative weights summing to 1 (uniform when every log-weight
  is -inf, i.e. no particle carries information).
* ``1 <= effective_sample_size(w) <= N``; N for equal weights, 1 for a one-hot vector.
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
