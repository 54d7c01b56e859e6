"""Per-token features for the pre-verifier, all computed from what the draft already produced and from
this generation's own past (how often its earlier drafts were accepted)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy
import torch


@dataclass(frozen=True)
class DraftContext:
    """What a token's features know beyond its own position: this generation's acceptance history (the first
    drafted token of every earlier step, which every method verifies, so the rate does not depend on how long
    the drafts were) and the draft so far in this step."""
    history_rate: float = 0.5        # (first tokens accepted + 1) / (steps verified + 2)
    last_accepted: float = 0.5       # 1 if the previous step's first drafted token was accepted, 0 if not; 0.5 before
    prefix_log_prob: float = 0.0     # sum of log q(x) over the tokens drafted before this one in this step

    def after(self, draft_prob: float) -> "DraftContext":
        """The context of the next token of the same draft."""
        return DraftContext(self.history_rate, self.last_accepted,
                            self.prefix_log_prob + math.log(max(draft_prob, 1e-8)))


def history_context(first_verified: int, first_accepted: int, last_accepted: bool | None) -> DraftContext:
    """The context of a step's first drafted token, from the generation's counts so far."""
    return DraftContext(history_rate=(first_accepted + 1) / (first_verified + 2),
                        last_accepted=0.5 if last_accepted is None else float(last_accepted))


@dataclass
class TokenFeatures:
    """Features of one drafted token x chosen from the draft distribution at its position."""
    hidden: torch.Tensor        # [H] the draft's last hidden state that produced q
    draft_prob: float           # q(x) at temperature 1
    entropy: float              # entropy of q at temperature 1 (nats)
    margin: float               # top-1 minus top-2 probability of q
    position: int               # 0-based position in the whole draft of this step
    context: DraftContext = DraftContext()
    sampled: bool = False       # x was drawn from q at a temperature > 0 (not its argmax, nor a copied phrase)


def token_features(draft_logits: torch.Tensor, hidden: torch.Tensor, chosen_id: int, position: int,
                   context: DraftContext | None = None, sampled: bool = False) -> TokenFeatures:
    """draft_logits: [V] raw logits at the position; hidden: [H]; ``sampled``: x was drawn from q."""
    draft_prob, entropy, margin = softmax_summary(draft_logits, chosen_id)
    return TokenFeatures(hidden=hidden.detach().float().cpu(), draft_prob=draft_prob, entropy=entropy, margin=margin,
                         position=position, context=context or DraftContext(), sampled=sampled)


def softmax_summary(logits: torch.Tensor, chosen_id: int) -> tuple[float, float, float]:
    """q(x), H(q) and top-1 − top-2 of q = softmax(``logits`` [V]). With m the largest logit, s = l − m, e = exp(s)
    and Z = Σ e: q = e / Z and H(q) = log Z − (e · s) / Z, so one argmax, the largest of the rest, one exp and one dot
    product. A drafted token's features are computed between two draft calls, which leave the CPU's caches holding
    the draft's weights: on a 49,152-id vocabulary this costs about 0.09 ms there in numpy over the row's own memory,
    against 0.16 ms for torch's fused softmax, max and dot (each op a call of its own) and more for softmax, top-2,
    log, product and sum (tests/test_preverifier.py: the same values to float32 rounding, torch's path too, which
    rows on an accelerator take)."""
    if logits.device.type != "cpu":
        return _torch_softmax_summary(logits, chosen_id)
    row = logits.detach().float().numpy()
    top_index = int(row.argmax())
    top_logit = float(row[top_index])
    if not math.isfinite(top_logit):
        return _torch_softmax_summary(logits, chosen_id)
    rest = [part.max() for part in (row[:top_index], row[top_index + 1:]) if part.size]
    second_logit = float(max(rest)) if rest else -math.inf
    shifted = row - numpy.float32(top_logit)
    weights = numpy.exp(shifted)                     # e: q times Z
    total = float(weights.sum())
    with numpy.errstate(invalid="ignore"):
        weighted_shift = float(numpy.dot(weights, shifted))
    if not math.isfinite(weighted_shift):           # masked ids: e = 0 against a shift of −inf
        weighted_shift = float(numpy.dot(weights, numpy.maximum(shifted, numpy.float32(-1e30))))
    entropy = math.log(total) - weighted_shift / total
    return float(weights[chosen_id]) / total, max(entropy, 0.0), (1.0 - math.exp(second_logit - top_logit)) / total


def _torch_softmax_summary(logits: torch.Tensor, chosen_id: int) -> tuple[float, float, float]:
    """``softmax_summary`` in torch's ops, for rows that are not in the CPU's memory and rows whose every logit is
    −inf: H(q) = l_t − log q_t − q · l with t the most likely id."""
    logits = logits.float()
    probs = torch.softmax(logits, dim=0)
    top_prob, top_index = torch.max(probs, dim=0)
    top_prob, top_index = float(top_prob), int(top_index)
    others = [part.max() for part in (probs[:top_index], probs[top_index + 1:]) if part.numel()]
    second_prob = float(max(others)) if others else 0.0
    expected_logit = float(torch.dot(probs, logits))
    if not math.isfinite(expected_logit):      # masked ids: q = 0 against a logit of −inf
        expected_logit = float(torch.dot(probs, logits.clamp(min=torch.finfo(torch.float32).min)))
    entropy = float(logits[top_index]) - math.log(top_prob) - expected_logit
    return float(probs[chosen_id]), max(entropy, 0.0), top_prob - second_prob
