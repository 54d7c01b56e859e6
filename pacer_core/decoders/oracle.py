"""The oracle adaptive-length decoder (greedy only): it knows the target's greedy output in advance
and drafts exactly γ*+1 tokens each step (every token the target will accept, plus the first one it
will reject), the best any stopping rule could do with this draft. A yardstick for PACER."""
from __future__ import annotations

from ..settings import DecodeSettings
from .base import DecodeState, DraftBuilder, Proposal, SpeculativeDecoder


class OracleLength(SpeculativeDecoder):
    name = "oracle"

    def __init__(self, reference_output_ids: list[int], max_draft_len: int | None = None):
        super().__init__(max_draft_len=max_draft_len)
        self.reference = list(reference_output_ids)

    def propose(self, target, state: DecodeState, settings: DecodeSettings, budget: int) -> Proposal:
        if not settings.greedy:
            raise ValueError("The oracle decoder is defined for greedy decoding only.")
        limit = min(settings.max_draft_len, max(budget - 1, 0))
        draft = DraftBuilder(target, state, settings)
        while len(draft.drafted_ids) < limit:
            position = len(draft.sequence) - state.prompt_len
            token_id = draft.draw()[0]
            if position >= len(self.reference) or self.reference[position] != token_id:
                break
        return draft.proposal()
