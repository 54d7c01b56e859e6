"""SMC-SD cycle events say which new token of each particle was drafted and which was the target's
bonus, each with its own text, so no view has to guess from lengths."""
from __future__ import annotations

import pytest

from pacer_core.api import stream
from pacer_core.events import SMCCycleEvent, TokenState
from pacer_core.testing.tiny import tiny_pair


@pytest.mark.parametrize("eos_token_id", [None, 9])   # 9: one particle draws EOS mid-cycle
def test_each_new_token_carries_its_kind_and_text(eos_token_id):
    target, drafter = tiny_pair(eos_token_id=eos_token_id, scale=0.2)
    events = [item for seed in range(8)      # several seeds, so some particle draws EOS whatever the sampler draws
              for item in stream(target, drafter, "smc", "t1 t2", temperature=1.0, max_new_tokens=9, seed=seed,
                                 n_particles=4, draft_len=3)
              if isinstance(item, SMCCycleEvent)]
    assert events
    cut_short = 0
    for event in events:
        assert len(event.particle_tokens) == len(event.particle_token_ids)
        for tokens, ids in zip(event.particle_tokens, event.particle_token_ids):
            assert [token.token_id for token in tokens] == ids
            assert [token.text for token in tokens] == target.token_texts(ids)
            states = [token.state for token in tokens]
            n_drafted = states.count(TokenState.DRAFTED)
            assert states[:n_drafted] == [TokenState.DRAFTED] * n_drafted   # drafts first, then at most one bonus
            assert states[n_drafted:] in ([], [TokenState.BONUS])
            if TokenState.BONUS not in states and ids:                      # only an EOS cuts the bonus off
                assert ids[-1] in target.eos_token_ids
                cut_short += 1
    assert (cut_short > 0) == (eos_token_id is not None)
