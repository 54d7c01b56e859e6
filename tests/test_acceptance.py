"""acceptance.AcceptanceByPosition: the module docstring's worked example, its agreement with the atlas's judged
tokens, and its reading of a run's step events."""
from __future__ import annotations

import pytest

from pacer_core.acceptance import AcceptanceByPosition
from pacer_core.atlas import counts
from test_atlas_counts import worked_example


def test_worked_example():
    stats = AcceptanceByPosition()
    for verified, accepted in [(3, 1), (2, 2), (1, 0)]:
        stats.observe_draft(verified, accepted)
    assert (stats.steps, stats.verified, stats.judged, stats.accepted) == (3, [3, 2, 1], [3, 2, 0], [2, 1, 0])
    assert stats.judged_rows() == [{"position": 1, "drafted": 3, "accepted": 2, "alpha": 2 / 3},
                                   {"position": 2, "drafted": 2, "accepted": 1, "alpha": 0.5}]
    assert stats.verified_rates() == ([1, 2, 3], [2 / 3, 0.5, 0.0], [3, 2, 1])


def test_events_and_judged_tokens_give_the_same_rows():
    events = worked_example()
    from_events = AcceptanceByPosition.of_events(events).judged_rows()
    assert from_events == counts.by_position(counts.judged_drafts(events, 0, "Say"))


def test_nothing_drafted():
    stats = AcceptanceByPosition.of_events(None)
    assert stats.judged_rows() == [] and stats.verified_rates() == ([], [], [])


def test_more_accepted_than_verified_is_refused():
    with pytest.raises(ValueError):
        AcceptanceByPosition().observe_draft(2, 3)
