"""PACER: draft in blocks, let a small pre-verifier score each block, stop drafting at the first
block that scores below the threshold (ALGORITHMS.md section 3; Zhang et al. 2026, arXiv 2602.01274).

on_fail="submit" sends the failing block to the target too: the stopping rule only looks at drafted
tokens, so the output keeps the target's distribution exactly. on_fail="discard" drops that block;
exact under greedy decoding only (approximate under sampling, and labelled so)."""
from __future__ import annotations

import time

import torch

from ..events import BlockDecision
from ..preverifier import ConfidencePreVerifier, token_features
from ..settings import DecodeSettings
from .base import DecodeState, Proposal, SpeculativeDecoder, draft_one, shown_draft_prob


class Pacer(SpeculativeDecoder):
    name = "pacer"

    def __init__(self, block_size: int | None = None, max_draft_len: int | None = None,
                 threshold: float | None = None, preverifier=None, on_fail: str | None = None):
        self.block_size = block_size
        self.max_draft_len = max_draft_len
        self.threshold = threshold
        self.preverifier = preverifier or ConfidencePreVerifier()
        self.on_fail = on_fail
        self.effective_threshold = threshold

    def _threshold(self, settings: DecodeSettings) -> float:
        for candidate in (self.threshold, settings.threshold):
            if candidate is not None:
                return float(candidate)
        return float(self.preverifier.threshold_for(settings.temperature)
                     if hasattr(self.preverifier, "threshold_for") else self.preverifier.default_threshold)

    def propose(self, pair, state: DecodeState, settings: DecodeSettings, budget: int) -> Proposal:
        block_size = self.block_size or settings.block_size
        limit = min(self.max_draft_len or settings.max_draft_len, max(budget - 1, 0))
        threshold, on_fail = self._threshold(settings), self.on_fail or settings.on_fail
        self.effective_threshold = threshold
        started = time.perf_counter()
        draft_sequence = list(state.sequence)
        proposal = Proposal([], torch.zeros(0, pair.vocab_size), [], stop_reason="max_len")
        rows = []
        while len(proposal.drafted_ids) < limit:
            block_start = len(proposal.drafted_ids)
            features, hit_eos = [], False
            for _ in range(min(block_size, limit - block_start)):
                token_id, draft_probs, logits_row, hidden_row = draft_one(pair, state, draft_sequence, settings, True)
                features.append(token_features(logits_row, hidden_row, token_id, len(proposal.drafted_ids)))
                proposal.drafted_ids.append(token_id)
                proposal.draft_display_probs.append(shown_draft_prob(draft_probs, logits_row, token_id, settings))
                rows.append(draft_probs)
                draft_sequence.append(token_id)
                if token_id in state.eos_ids:
                    hit_eos = True
                    break
            block_score, token_probs = self.preverifier.score_block(features)
            passed = block_score >= threshold
            block_index = len(proposal.blocks)
            proposal.blocks.append(BlockDecision(block_index, len(features), float(block_score), threshold, passed))
            proposal.token_blocks += [block_index] * len(features)
            proposal.token_preverifier_probs += [float(prob) for prob in token_probs]
            if not passed:
                proposal.stopped_from, proposal.stop_reason = block_start, "preverifier"
                if on_fail == "discard":
                    proposal.discarded = len(features)
                break
            if hit_eos:
                proposal.stop_reason = "eos"
                break
        if proposal.stop_reason == "max_len" and limit < (self.max_draft_len or settings.max_draft_len):
            proposal.stop_reason = "budget"
        proposal.draft_probs = torch.stack(rows) if rows else torch.zeros(0, pair.vocab_size)
        proposal.seconds = time.perf_counter() - started
        return proposal

    def info(self) -> dict:
        return {"preverifier": getattr(self.preverifier, "kind", "custom"), "block_size": self.block_size,
                "max_draft_len": self.max_draft_len, "threshold": self.effective_threshold, "on_fail": self.on_fail}
