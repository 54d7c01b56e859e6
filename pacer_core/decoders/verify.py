"""The lossless accept rule of speculative sampling (Leviathan et al. 2023, Chen et al. 2023;
docs/algorithms.md#speculative-sampling), as one pure function of one step's tensors: ``judge``.

Vocabulary (as in vLLM's rejection sampler). The proposer drafted G tokens d_1..d_G; the target scored them
in one forward pass, whose G+1 rows are p(· | prefix, d_<i) for i = 1..G+1.
* accepted: the longest prefix d_1..d_n the target keeps. Sampling: d_i is kept with probability
  min(1, p(d_i) / q(d_i)), tested in order; greedy: d_i is kept while it equals the target's argmax.
* corrected: when d_{n+1} is rejected, the target's token in its place, drawn from the residual
  norm(max(0, p − q)) at that row (greedy: the argmax), so every emitted token is distributed as p.
* bonus: when all G are accepted, one more token drawn from the target's last row (row G+1), free.
A step therefore emits n + 1 tokens: the accepted prefix, then the corrected or the bonus token.

Shape letters: G drafted tokens, V vocabulary. Everything is combined on the target logits' device, the
generator's (the device rule of ``decoders/base.py``)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import sampling
from ..settings import DecodeSettings


@dataclass
class Verdict:
    """The target's ruling on one step's draft."""
    n_accepted: int                  # n: d_1..d_n accepted
    next_token: int                  # the corrected token, or the bonus when all G were accepted
    next_kind: str                   # "corrected" | "bonus"
    next_prob: float                 # p(next_token) (greedy: the temperature-1 softmax's, for display)
    target_token_probs: list[float]  # [G] p(d_i)
    accept_probs: list[float]        # [G] min(1, p(d_i) / q(d_i)) (greedy: 1.0 where d_i is the argmax, else 0.0)


def judge(drafted_ids: list[int], draft_probs: torch.Tensor, target_logits: torch.Tensor,
          settings: DecodeSettings, generator: torch.Generator | None) -> Verdict:
    """Accept a prefix of the draft and choose the token after it.

    drafted_ids    # [G] d_1..d_G
    draft_probs    # [G, V] q, the distribution each d_i was drawn from (one-hot for a copied phrase)
    target_logits  # [G+1, V] raw target logits; row i scores drafted_ids[i], row G the bonus
    settings: temperature, top_k and top_p turn the logits into p (temperature 0: greedy); generator: the
    run's, on target_logits' device (its draws are the only state this function touches)."""
    if settings.greedy:
        return judge_greedy(drafted_ids, target_logits)
    gamma = len(drafted_ids)
    device = target_logits.device
    drafted = torch.tensor(drafted_ids, dtype=torch.long, device=device)                       # [G]
    positions = torch.arange(gamma, device=device)                                             # [G]
    draft_probs = draft_probs.to(device)                                                       # [G, V]
    target_probs = sampling.logits_to_probs(target_logits, settings.temperature, settings.top_k,
                                            settings.top_p)                                    # [G+1, V]
    target_token_probs = target_probs[positions, drafted] if gamma else torch.zeros(0, device=device)   # [G]
    draft_token_probs = draft_probs[positions, drafted] if gamma else torch.zeros(0, device=device)     # [G]
    accept = sampling.acceptance_probs(target_token_probs, draft_token_probs)                  # [G]
    for index in range(gamma):
        if sampling.uniform(generator) >= float(accept[index]):
            residual = sampling.residual_distribution(target_probs[index], draft_probs[index])  # [V]
            corrected = sampling.sample_token(residual, generator)
            return Verdict(index, corrected, "corrected", float(target_probs[index, corrected]),
                           target_token_probs.tolist(), accept.tolist())
    bonus = sampling.sample_token(target_probs[gamma], generator)
    return Verdict(gamma, bonus, "bonus", float(target_probs[gamma, bonus]),
                   target_token_probs.tolist(), accept.tolist())


def judge_greedy(drafted_ids: list[int], target_logits: torch.Tensor) -> Verdict:
    """``judge`` at temperature 0: keep drafted tokens while they are the target's argmax; the next token is
    the argmax after them. drafted_ids: [G]; target_logits: [G+1, V]."""
    target_argmax = torch.argmax(target_logits, dim=-1).tolist()                               # [G+1]
    shown_probs = sampling.display_probs(target_logits)                                        # [G+1, V]
    n_accepted = sampling.count_greedy_matches(drafted_ids, target_argmax)
    next_token = target_argmax[n_accepted]
    target_token_probs = [float(shown_probs[i, t]) for i, t in enumerate(drafted_ids)]
    accept = [1.0 if drafted == best else 0.0 for drafted, best in zip(drafted_ids, target_argmax)]
    kind = "bonus" if n_accepted == len(drafted_ids) else "corrected"
    return Verdict(n_accepted, next_token, kind, float(shown_probs[n_accepted, next_token]), target_token_probs, accept)
