"""Fixed-length speculative decoding: the draft proposes γ tokens every step; or, with
``gamma_schedule="dynamic"``, transformers' assisted-generation schedule (``AssistedCandidateGenerator``'s
"heuristic" one): the length starts at γ, grows by 2 after a step whose drafted tokens were all kept and shrinks
by 1 (to at least 1) otherwise. The schedule reads only the run's verdicts, so the output stays exact."""
from __future__ import annotations

from dataclasses import dataclass

from ..events import StepEvent
from ..settings import DecodeSettings
from .base import DecodeState, DraftBuilder, Proposal, SpeculativeDecoder


@dataclass
class FixedState(DecodeState):
    """A fixed-SD run's state: the shared one plus the dynamic schedule's next length (None: not started)."""
    scheduled_gamma: int | None = None


def next_scheduled_gamma(gamma: int, drafted: int, accepted: int) -> int:
    """transformers' heuristic schedule (``AssistedCandidateGenerator.update_candidate_strategy``): +2 after a step
    whose ``drafted`` tokens were all kept (a draft cut short by EOS or the token budget too), else −1, at least 1."""
    return gamma + 2 if accepted == drafted else max(1, gamma - 1)


class FixedSpeculative(SpeculativeDecoder):
    name = "fixed"
    state_type = FixedState

    def __init__(self, gamma: int | None = None, gamma_schedule: str | None = None):
        super().__init__(gamma=gamma, gamma_schedule=gamma_schedule)

    def draft_length(self, state: FixedState, settings: DecodeSettings) -> int:
        """This step's γ: the setting, or the dynamic schedule's current length."""
        if settings.gamma_schedule != "dynamic":
            return settings.gamma
        if state.scheduled_gamma is None:
            state.scheduled_gamma = settings.gamma
        return state.scheduled_gamma

    def propose(self, target, state: FixedState, settings: DecodeSettings, budget: int) -> Proposal:
        gamma = min(self.draft_length(state, settings), max(budget - 1, 0))
        draft = DraftBuilder(target, state, settings)
        for _ in range(gamma):
            if draft.draw()[0] in state.eos_ids:
                break
        return draft.proposal()

    def step(self, target, state: FixedState, settings: DecodeSettings, step: int) -> StepEvent:
        """The shared step; the dynamic schedule then moves its length by the verdict."""
        event = super().step(target, state, settings, step)
        if settings.gamma_schedule == "dynamic":
            state.scheduled_gamma = next_scheduled_gamma(self.draft_length(state, settings), event.n_drafted,
                                                         event.n_accepted)
        return event

    def describe(self, settings: DecodeSettings) -> dict:
        if settings.gamma_schedule == "dynamic":
            return {"gamma": settings.gamma, "gamma_schedule": "dynamic (+2 after a full accept, -1 otherwise)"}
        return {"gamma": settings.gamma}
