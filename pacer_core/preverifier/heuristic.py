"""The confidence rule that stands in when no trained pre-verifier exists for a pair."""
from __future__ import annotations

import math

from .features import TokenFeatures


class ConfidencePreVerifier:
    """Per-token acceptance estimate = the draft's own probability q(x) of the token it chose;
    block score = product over the block (estimated P(whole block accepted))."""

    kind = "heuristic"
    default_threshold = 0.3

    def score_block(self, block: list[TokenFeatures]) -> tuple[float, list[float]]:
        token_probs = [feature.draft_prob for feature in block]
        return math.prod(token_probs), token_probs
