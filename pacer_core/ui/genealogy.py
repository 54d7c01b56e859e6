"""SMC-SD genealogy: which particle descends from which, and what resampling did to each. One
function, ``lineage``, serves both the SMC column (particle histories, the panel's faded and purple
rows) and the genealogy plot (edges and node colours).

An ``SMCCycleEvent`` describes its rows BEFORE that cycle's resampling; ``ancestors[i]`` is the old row
that new row i copies. So row i of cycle c continues row ``ancestors[i]`` of cycle c-1 when cycle c-1
resampled, else row i. Worked example, N = 3: cycle 0 resamples with ancestors [1, 1, 2]; then cycle 1's
parents are [1, 1, 2], and cycle 0's fates are [resampled-away, duplicated, kept] (copies [0, 2, 1])."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from ..events import SMCCycleEvent, TokenRecord, TokenState


class Fate(StrEnum):
    """What one cycle's resampling did to a particle (CSS classes use these values)."""
    KEPT = "kept"
    DUPLICATED = "duplicated"
    RESAMPLED_AWAY = "resampled-away"


@dataclass(frozen=True)
class CycleLineage:
    """One cycle of the genealogy."""
    event: SMCCycleEvent
    parents: list[int]      # parents[i]: the row of the previous cycle that row i continues
    copies: list[int]       # how many rows copy row i after this cycle's resampling (1 each when none)
    fates: list[Fate]


class HistoryPiece(NamedTuple):
    token: TokenRecord
    cycle: int              # index of the cycle that added the token


def _fate(copies: int) -> Fate:
    if copies == 0:
        return Fate.RESAMPLED_AWAY
    return Fate.DUPLICATED if copies > 1 else Fate.KEPT


def lineage(events: list) -> list[CycleLineage]:
    """The genealogy of a run's SMC cycles (other events are skipped)."""
    out: list[CycleLineage] = []
    previous = None
    for event in events or []:
        if not isinstance(event, SMCCycleEvent):
            continue
        n = len(event.weights)
        parents = list(previous.ancestors[:n]) if previous is not None and previous.resampled else list(range(n))
        copies = [event.ancestors.count(row) for row in range(n)] if event.resampled else [1] * n
        out.append(CycleLineage(event, parents, copies, [_fate(count) for count in copies]))
        previous = event
    return out


def cycle_tokens(event: SMCCycleEvent, row: int) -> list[TokenRecord]:
    """Particle ``row``'s new tokens of one cycle, with their kind (drafted or bonus) as the decoder
    reported it. An event without ``particle_tokens`` (built by hand) shows its text as one piece."""
    if event.particle_tokens:
        return list(event.particle_tokens[row]) if row < len(event.particle_tokens) else []
    text = event.particle_texts[row] if row < len(event.particle_texts) else ""
    return [TokenRecord(-1, text, TokenState.DRAFTED)] if text else []


def particle_histories(events: list, resample_last: bool = True) -> list[list[HistoryPiece]]:
    """Each particle's continuation, following the genealogy. With ``resample_last=False`` the last
    cycle's resampling is not applied (the rows as that cycle's weights saw them)."""
    histories: list[list[HistoryPiece]] = []
    for index, line in enumerate(lineage(events)):
        histories = [(list(histories[parent]) if parent < len(histories) else [])
                     + [HistoryPiece(token, index) for token in cycle_tokens(line.event, row)]
                     for row, parent in enumerate(line.parents)]
    last = [event for event in events or [] if isinstance(event, SMCCycleEvent)][-1:]
    if resample_last and last and last[0].resampled:
        histories = [list(histories[ancestor]) for ancestor in last[0].ancestors]
    return histories
