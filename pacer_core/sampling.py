"""Pure math of speculative decoding: logits → probabilities, acceptance, residual, sampling.

Tensors in, tensors out; no model, no cache. Shape letters: V vocabulary, G drafted tokens.
The acceptance rule and residual follow Leviathan et al. 2023 / Chen et al. 2023."""
from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Mask logits outside top-k and outside the top-p nucleus with -inf. logits: [..., V]."""
    filtered = logits.float()
    if top_k and 0 < top_k < filtered.shape[-1]:
        kth_largest = torch.topk(filtered, top_k, dim=-1).values[..., -1:]
        filtered = filtered.masked_fill(filtered < kth_largest, float("-inf"))
    if 0.0 < top_p < 1.0:
        sorted_logits, sorted_index = torch.sort(filtered, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_drop = mass_before >= top_p  # keep the smallest prefix whose mass reaches top_p
        drop = torch.zeros_like(sorted_drop).scatter(-1, sorted_index, sorted_drop)
        filtered = filtered.masked_fill(drop, float("-inf"))
    return filtered


def logits_to_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Sampling distribution [..., V] at `temperature` (> 0) after top-k/top-p, in float32."""
    if temperature <= 0:
        raise ValueError("logits_to_probs needs temperature > 0; greedy decoding uses argmax")
    return torch.softmax(filter_logits(logits.float() / temperature, top_k, top_p), dim=-1)


def token_log_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """log of the sampling distribution at ``temperature`` (> 0) after top-k/top-p, float64. [..., V].
    SMC-SD's weights and the proposal divergence need it in log space (-inf where filtered out)."""
    filtered = filter_logits(logits.float() / temperature, top_k, top_p)
    return torch.log_softmax(filtered.double(), dim=-1)


def chosen_log_probs(logits_rows: torch.Tensor, token_ids: list[int]) -> list[float]:
    """log p(token_ids[i]) under row i of [>= len(token_ids), V] logits at temperature 1: the target's
    log-likelihood of the tokens a run emitted, read from the rows that judged them."""
    if not token_ids:
        return []
    log_probs = torch.log_softmax(logits_rows[: len(token_ids)].float(), dim=-1)
    chosen = torch.tensor(token_ids, dtype=torch.long, device=log_probs.device).unsqueeze(-1)
    return log_probs.gather(-1, chosen).squeeze(-1).tolist()


def display_probs(logits: torch.Tensor) -> torch.Tensor:
    """Plain softmax at temperature 1, used to report p and q under greedy decoding."""
    return torch.softmax(logits.float(), dim=-1)


def display_prob(logits_row: torch.Tensor, token_id: int) -> float:
    """``display_probs(logits_row)[token_id]``. One fused softmax: measured faster on a loaded 2-core CPU than
    exp(l_x - logsumexp(l)), whose several reductions each start a parallel region
    (benchmarks/results/draft-call-cost.json)."""
    return float(torch.softmax(logits_row.float(), dim=-1)[token_id])


def one_hot(token_id: int, like: torch.Tensor) -> torch.Tensor:
    """[V] float32 on ``like``'s device: 1 at ``token_id`` (greedy's q)."""
    row = torch.zeros(like.shape[-1], dtype=torch.float32, device=like.device)
    row[token_id] = 1.0
    return row


def acceptance_probs(target_token_probs: torch.Tensor, draft_token_probs: torch.Tensor) -> torch.Tensor:
    """min(1, p(x)/q(x)) for each drafted token. Both [G]. q(x) > 0 since x was drawn from q."""
    return torch.clamp(target_token_probs / draft_token_probs.clamp_min(1e-30), max=1.0)


def residual_distribution(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)) over [V]; falls back to p when p ≤ q everywhere (then p == q)."""
    positive_part = (target_probs - draft_probs).clamp_min(0.0)
    mass = positive_part.sum(-1, keepdim=True)
    if float(mass.min()) <= 0.0:
        return target_probs
    return positive_part / mass


def sample_token(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One id drawn from a [V] distribution; ``probs`` must be on the generator's device."""
    return int(sample_rows(probs.unsqueeze(0), generator)[0])


def sample_rows(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One id per row of [R, V] (unnormalised) probabilities → [R] long, by inverse transform: the first id whose
    cumulative mass (float64) exceeds a uniform draw times the row's mass. An id with zero mass never raises the
    cumulative sum, so it is never drawn. torch.multinomial does the same job in 1.3 ms a row of 49,152 ids on the
    2-core CPU, this in 0.13 ms: a sampled draft or AR token paid it on every call."""
    cumulative = torch.cumsum(probs, dim=-1, dtype=torch.float64)
    total = cumulative[:, -1:]
    draws = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64, device=probs.device) * total
    chosen = torch.searchsorted(cumulative, draws, right=True).squeeze(-1)
    last_with_mass = (cumulative < total).sum(-1)        # where the cumulative sum reaches the total
    return torch.minimum(chosen, last_with_mass)


def uniform(generator: torch.Generator | None) -> float:
    """One U[0, 1) draw on the generator's own device (a CUDA generator cannot fill a CPU tensor)."""
    return float(torch.rand((), generator=generator, device=generator_device(generator)).item())


def generator_device(generator: torch.Generator | None) -> torch.device | None:
    """Where a generator can draw: its own device (None: torch's default generator and device)."""
    return None if generator is None else generator.device


def count_greedy_matches(drafted_ids: list[int], target_argmax_ids: list[int]) -> int:
    """Leading drafted tokens equal to the target's argmax at the same position."""
    matched = 0
    for drafted_id, target_id in zip(drafted_ids, target_argmax_ids):
        if drafted_id != target_id:
            break
        matched += 1
    return matched
