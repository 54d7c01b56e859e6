"""Fixed-length speculative decoding: the draft proposes γ tokens every step."""
from __future__ import annotations

from ..settings import DecodeSettings
from .base import DecodeState, DraftBuilder, Proposal, SpeculativeDecoder


class FixedSpeculative(SpeculativeDecoder):
    name = "fixed"

    def __init__(self, gamma: int | None = None):
        super().__init__(gamma=gamma)

    def propose(self, pair, state: DecodeState, settings: DecodeSettings, budget: int) -> Proposal:
        gamma = min(settings.gamma, max(budget - 1, 0))
        draft = DraftBuilder(pair, state, settings)
        for _ in range(gamma):
            if draft.draw()[0] in state.eos_ids:
                break
        return draft.proposal()

    def describe(self, settings: DecodeSettings) -> dict:
        return {"gamma": settings.gamma}
