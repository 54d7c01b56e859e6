"""What PACER adds to the shared decoder types (``base.DecodeState``, ``base.Proposal``): a run's phrase index and
cost model (``PacerState``), and a step's blocks, pre-verifier estimates and stop (``PacerProposal``). The other
decoders' states and proposals carry none of it; ``pacer.py`` fills these."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..events import BlockDecision
from ..phrases import PhraseIndex
from ..stopping import PacerCostModel, RunCosts
from .base import DecodeState, Proposal


@dataclass
class PacerState(DecodeState):
    """A PACER run's state: the shared one plus what PACER reads on first use and keeps for the run."""
    phrase_index: PhraseIndex | None = None     # over ``sequence`` (built on first use)
    cost_model: PacerCostModel | None = None    # this pair's stored cost model at the prompt's length (first use)
    run_costs: RunCosts = field(default_factory=RunCosts)   # this run's own draft and verify seconds so far
    rejections: int = 0                         # verify passes that rejected a drafted token


@dataclass
class PacerProposal(Proposal):
    """A PACER step's draft: the shared proposal plus its blocks and why drafting stopped."""
    blocks: list[BlockDecision] = field(default_factory=list)
    token_blocks: list[int] = field(default_factory=list)
    token_preverifier_probs: list[float] = field(default_factory=list)
    stopped_from: int | None = None    # index of the first token of the failed block
    discarded: int = 0                 # trailing tokens not sent to the target (discard mode)
    stop_reason: str | None = None
    stop_note: str | None = None       # the cost rule's comparison that stopped drafting
    token_phrase: list[bool] = field(default_factory=list)   # per token: copied as a phrase (q one-hot)

    @property
    def verified(self) -> int:
        """The drafted tokens sent to the target: all but the discarded ones."""
        return len(self.drafted_ids) - self.discarded

    def token_fields(self, index: int) -> dict:
        """Drafted token ``index``'s block, pre-verifier estimate, and whether it was stopped or copied."""
        return {"block": self.token_blocks[index] if self.token_blocks else None,
                "preverifier_prob": self.token_preverifier_probs[index] if self.token_preverifier_probs else None,
                "stopped": self.stopped_from is not None and index >= self.stopped_from,
                "phrase": bool(self.token_phrase and self.token_phrase[index])}

    def event_fields(self) -> dict:
        """The step's blocks and why drafting stopped."""
        return {"blocks": self.blocks, "stop_reason": self.stop_reason, "stop_note": self.stop_note}
