"""Fixed-length speculative decoding: the draft proposes γ tokens every step."""
from __future__ import annotations

import time

import torch

from ..settings import DecodeSettings
from .base import DecodeState, Proposal, SpeculativeDecoder, draft_one, shown_draft_prob


class FixedSpeculative(SpeculativeDecoder):
    name = "fixed"

    def __init__(self, gamma: int | None = None):
        self.gamma = gamma

    def propose(self, pair, state: DecodeState, settings: DecodeSettings, budget: int) -> Proposal:
        gamma = min(self.gamma or settings.gamma, max(budget - 1, 0))
        started = time.perf_counter()
        draft_sequence = list(state.sequence)
        drafted_ids, draft_rows, shown = [], [], []
        for _ in range(gamma):
            token_id, draft_probs, logits_row, _ = draft_one(pair, state, draft_sequence, settings)
            drafted_ids.append(token_id)
            draft_rows.append(draft_probs)
            shown.append(shown_draft_prob(draft_probs, logits_row, token_id, settings))
            draft_sequence.append(token_id)
            if token_id in state.eos_ids:
                break
        draft_probs = torch.stack(draft_rows) if draft_rows else torch.zeros(0, pair.vocab_size)
        return Proposal(drafted_ids, draft_probs, shown, seconds=time.perf_counter() - started)

    def info(self) -> dict:
        return {"gamma": self.gamma}
