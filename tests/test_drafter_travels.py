"""The drafter travels with the run, not with the pair: runs over one pair with different drafters each
draft with their own, greedy runs still return AR's tokens, and the pair is the same object, unchanged."""
from pacer_core import generate
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui.session import RunSession


def counting(drafter) -> list:
    """Record every cache ``drafter`` hands a run (one per drafted run)."""
    handed = []
    new_cache = drafter.new_cache

    def recording(*args, **kwargs):
        cache = new_cache(*args, **kwargs)
        handed.append(cache)
        return cache

    drafter.new_cache = recording
    return handed


def attributes(target) -> dict:
    """What the pair holds, by identity: a run must neither replace nor add anything."""
    return {name: id(value) for name, value in vars(target).items()}


def test_two_generate_calls_draft_with_their_own_drafters():
    target, own = tiny_pair()
    _, other = tiny_pair(draft_seed=5, draft_noise=0.6)
    own_caches, other_caches = counting(own), counting(other)
    before = attributes(target)
    reference = generate(target, own, "ar", "t1 t2 t3", max_new_tokens=12).token_ids
    first = generate(target, own, "fixed", "t1 t2 t3", max_new_tokens=12, gamma=3)
    assert len(own_caches) == 1 and not other_caches
    second = generate(target, other, "pacer", "t1 t2 t3", max_new_tokens=12)
    assert len(own_caches) == 1 and len(other_caches) == 1
    assert first.token_ids == second.token_ids == reference
    assert attributes(target) == before


def test_two_sessions_over_one_pair_keep_their_drafters():
    target, own = tiny_pair()
    _, other = tiny_pair(draft_seed=5, draft_noise=0.6)
    own_caches, other_caches = counting(own), counting(other)
    before = attributes(target)
    settings = {"max_new_tokens": 8, "temperature": 0.8, "seed": 2}
    sessions = [RunSession(target, own, "t1 t2", settings), RunSession(target, other, "t1 t2", settings)]
    while not all(session.finished for session in sessions):
        for session in sessions:
            session.advance()
    drafted = ("fixed", "pacer", "smc")
    assert len(own_caches) == len(other_caches) == len(drafted)
    assert [session.drafter for session in sessions] == [own, other]
    assert all(session.runs[method].request.drafter is session.drafter
               for session in sessions for method in drafted)
    assert attributes(target) == before
