"""The oracle adaptive-length decoder (greedy only): it knows the target's greedy output in advance
and drafts exactly γ*+1 tokens each step (every token the target will accept, plus the first one it
will reject), the best any stopping rule could do with this draft. A yardstick for PACER."""
from __future__ import annotations

import time

import torch

from ..settings import DecodeSettings
from .base import DecodeState, Proposal, SpeculativeDecoder, draft_one, shown_draft_prob


class OracleLength(SpeculativeDecoder):
    name = "oracle"

    def __init__(self, reference_output_ids: list[int], max_draft_len: int = 16):
        self.reference = list(reference_output_ids)
        self.max_draft_len = max_draft_len

    def propose(self, pair, state: DecodeState, settings: DecodeSettings, budget: int) -> Proposal:
        if not settings.greedy:
            raise ValueError("The oracle decoder is defined for greedy decoding only.")
        limit = min(self.max_draft_len, max(budget - 1, 0))
        started = time.perf_counter()
        draft_sequence, drafted_ids, rows, shown = list(state.sequence), [], [], []
        while len(drafted_ids) < limit:
            token_id, draft_probs, logits_row, _ = draft_one(pair, state, draft_sequence, settings)
            position = len(draft_sequence) - state.prompt_len
            drafted_ids.append(token_id)
            rows.append(draft_probs)
            shown.append(shown_draft_prob(draft_probs, logits_row, token_id, settings))
            draft_sequence.append(token_id)
            if position >= len(self.reference) or self.reference[position] != token_id:
                break
        draft_probs = torch.stack(rows) if rows else torch.zeros(0, pair.vocab_size)
        return Proposal(drafted_ids, draft_probs, shown, seconds=time.perf_counter() - started)
