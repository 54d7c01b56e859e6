"""The confidence rule that stands in when no trained pre-verifier exists for a pair."""
from __future__ import annotations

import math

from .features import TokenFeatures


class ConfidencePreVerifier:
    """Per-token acceptance estimate, block score = product over the block (estimated P(whole block accepted)).

    Greedy (and copied phrases): the draft's own probability q(x) of the token it chose, an estimate of how
    likely the target's argmax (or the target's p(x)) is that token. Sampled tokens: speculative sampling accepts
    x ~ q with probability min(1, p(x)/q(x)), whose mean is 1 − TV(p, q) whatever q(x) is, so a small q(x) says
    nothing about rejection (a drafter close to the target draws unlikely tokens the target finds just as
    likely). The draft cannot see p; its best estimate is this generation's measured acceptance of first
    drafted tokens (``DraftContext.history_rate``)."""

    kind = "heuristic"

    def __init__(self, default_threshold: float = 0.3):
        self.default_threshold = default_threshold   # a drafter's measured one (``confidence_rule``), else 0.3

    def score_block(self, block: list[TokenFeatures]) -> tuple[float, list[float]]:
        token_probs = [feature.context.history_rate if feature.sampled else feature.draft_prob for feature in block]
        return math.prod(token_probs), token_probs
