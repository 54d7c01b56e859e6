"""PACER: draft in blocks, let a small pre-verifier score each block, stop drafting at the first
block that scores below the threshold (docs/algorithms.md#pacer; Zhang et al. 2026, arXiv 2602.01274).

on_fail="submit" sends the failing block to the target too: the stopping rule only looks at drafted
tokens, so the output keeps the target's distribution exactly. on_fail="discard" drops that block;
exact under greedy decoding only (approximate under sampling, and labelled so)."""
from __future__ import annotations

from ..events import BlockDecision
from ..preverifier import ConfidencePreVerifier, own_threshold, token_features
from ..settings import DecodeSettings
from .base import DecodeState, DraftBuilder, Proposal, SpeculativeDecoder


class Pacer(SpeculativeDecoder):
    name = "pacer"

    def __init__(self, block_size: int | None = None, max_draft_len: int | None = None,
                 threshold: float | None = None, preverifier=None, on_fail: str | None = None):
        super().__init__(block_size=block_size, max_draft_len=max_draft_len, threshold=threshold, on_fail=on_fail)
        self.preverifier = preverifier if preverifier is not None else ConfidencePreVerifier()

    def threshold(self, settings: DecodeSettings) -> float:
        """The run's threshold; None (a decoder used without a run request) means the pre-verifier's own."""
        return own_threshold(self.preverifier, settings.temperature) if settings.threshold is None \
            else float(settings.threshold)

    def propose(self, pair, state: DecodeState, settings: DecodeSettings, budget: int) -> Proposal:
        block_size, threshold = settings.block_size, self.threshold(settings)
        limit = min(settings.max_draft_len, max(budget - 1, 0))
        draft = DraftBuilder(pair, state, settings)
        blocks, token_blocks, token_probs_all = [], [], []
        stopped_from, discarded, stop_reason = None, 0, "max_len"
        while len(draft.drafted_ids) < limit:
            block_start = len(draft.drafted_ids)
            features, hit_eos = [], False
            for _ in range(min(block_size, limit - block_start)):
                position = len(draft.drafted_ids)
                token_id, logits_row, hidden_row = draft.draw(with_hidden=True)
                features.append(token_features(logits_row, hidden_row, token_id, position))
                if token_id in state.eos_ids:
                    hit_eos = True
                    break
            block_score, token_probs = self.preverifier.score_block(features)
            passed = block_score >= threshold
            blocks.append(BlockDecision(len(blocks), len(features), float(block_score), threshold, passed))
            token_blocks += [blocks[-1].index] * len(features)
            token_probs_all += [float(prob) for prob in token_probs]
            if not passed:
                stopped_from, stop_reason = block_start, "preverifier"
                discarded = len(features) if settings.on_fail == "discard" else 0
                break
            if hit_eos:
                stop_reason = "eos"
                break
        if stop_reason == "max_len" and limit < settings.max_draft_len:
            stop_reason = "budget"
        return draft.proposal(blocks=blocks, token_blocks=token_blocks, token_preverifier_probs=token_probs_all,
                              stopped_from=stopped_from, discarded=discarded, stop_reason=stop_reason)

    def describe(self, settings: DecodeSettings) -> dict:
        return {"preverifier": getattr(self.preverifier, "kind", "custom"), "block_size": settings.block_size,
                "max_draft_len": settings.max_draft_len, "threshold": self.threshold(settings),
                "on_fail": settings.on_fail}
