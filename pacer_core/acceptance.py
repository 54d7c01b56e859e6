"""Acceptance by draft position, counted once per verify pass (in the spirit of vLLM's
``SpecDecodingStats.observe_draft``) and read by every report: the atlas's breakdown (``atlas.counts``) and the
page's chart.

A step's draft is described by two numbers: how many drafted tokens the target saw (``verified``) and how many
of them it accepted, a prefix (``accepted``). At draft position k (1-based) a step then has
* a verified token when k <= verified;
* a judged token when the target ruled on it: k <= accepted + 1 and k <= verified (every token before it was
  accepted; tokens after the first rejection were drafted from a wrong prefix, so they tell nothing);
* an accepted token when k <= accepted.
Two rates follow: accepted / judged is the conditional acceptance P(token k accepted | tokens 1..k-1 accepted)
(Leviathan et al. 2023 assume one α for every k); accepted / verified is the share of the verified tokens at k
that were kept.

Worked example: steps (verified, accepted) = (3, 1), (2, 2), (1, 0) give
position 1: 3 verified, 3 judged, 2 accepted; position 2: 2 verified, 2 judged, 1 accepted;
position 3: 1 verified, 0 judged, 0 accepted."""
from __future__ import annotations

from dataclasses import dataclass, field

from .events import StepEvent


@dataclass
class AcceptanceByPosition:
    """Counts per draft position; index k-1 of each list is position k."""
    steps: int = 0
    verified: list[int] = field(default_factory=list)
    judged: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def observe_draft(self, verified: int, accepted: int) -> None:
        """One verify pass: ``verified`` drafted tokens the target saw, the first ``accepted`` of them kept."""
        if not 0 <= accepted <= verified:
            raise ValueError(f"accepted ({accepted}) must lie between 0 and verified ({verified})")
        self.steps += 1
        missing = verified - len(self.verified)
        if missing > 0:
            for counts in (self.verified, self.judged, self.accepted):
                counts.extend([0] * missing)
        for index in range(verified):
            self.verified[index] += 1
            self.judged[index] += int(index <= accepted)
            self.accepted[index] += int(index < accepted)

    @classmethod
    def of_events(cls, events) -> AcceptanceByPosition:
        """The counts of a run's step events (other events, SMC-SD's cycles, are skipped; AR's steps draft none)."""
        stats = cls()
        for event in events or []:
            if isinstance(event, StepEvent) and event.n_drafted:
                stats.observe_draft(event.n_drafted, event.n_accepted)
        return stats

    @property
    def positions(self) -> list[int]:
        return list(range(1, len(self.verified) + 1))

    def judged_rows(self) -> list[dict]:
        """[{position, drafted, accepted, alpha}] over the judged tokens (drafted = judged; alpha: the conditional
        acceptance), positions nothing was judged at left out."""
        return [{"position": position, "drafted": judged, "accepted": accepted, "alpha": accepted / judged}
                for position, judged, accepted in zip(self.positions, self.judged, self.accepted) if judged]

    def verified_rates(self) -> tuple[list[int], list[float], list[int]]:
        """(positions, accepted / verified at each, verified at each): the share of the verified tokens kept."""
        rates = [accepted / verified for accepted, verified in zip(self.accepted, self.verified)]
        return self.positions, rates, list(self.verified)
