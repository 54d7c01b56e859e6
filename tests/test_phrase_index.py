"""The phrase index (pacer_core/phrases.py PhraseIndex) finds exactly what the scan (find_phrase) finds:
random sequences over small vocabularies (many repeats), indexed up to a random committed length with a
drafted tail after it, grown step by step as a run grows them."""
import random

import pytest

from pacer_core.phrases import MAX_MATCH, MIN_MATCH, PhraseIndex, find_phrase, latest_occurrence

pytestmark = pytest.mark.pure


@pytest.mark.parametrize("seed", range(40))
def test_index_matches_the_scan_on_random_sequences(seed):
    rng = random.Random(seed)
    vocab = rng.choice([2, 3, 5, 12])
    sequence = [rng.randrange(vocab) for _ in range(rng.randrange(1, 160))]
    committed = rng.randrange(0, len(sequence) + 1)
    index = PhraseIndex()
    index.sync(sequence[:committed])
    prompt_len = rng.randrange(0, len(sequence) + 1)
    for max_tokens in (0, 1, 3, 8):
        assert index.find(sequence, prompt_len, max_tokens) == find_phrase(sequence, prompt_len, max_tokens)
    for match_length in range(1, MAX_MATCH + 2):
        assert index.latest_occurrence(sequence, match_length) == latest_occurrence(sequence, match_length)


@pytest.mark.parametrize("seed", range(10))
def test_index_follows_a_growing_run(seed):
    """As in PACER: each step indexes the committed sequence, then looks phrases up block by block over
    the committed sequence plus the tokens drafted so far; some drafts are kept, the rest dropped."""
    rng = random.Random(100 + seed)
    vocab = rng.choice([3, 6, 20])
    committed = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
    prompt_len = len(committed)
    index = PhraseIndex()
    for _ in range(60):
        index.sync(committed)
        drafted = []
        for _ in range(rng.randrange(1, 4)):
            sequence = committed + drafted
            assert index.find(sequence, prompt_len, 8) == find_phrase(sequence, prompt_len, 8)
            drafted += [rng.randrange(vocab) for _ in range(rng.randrange(1, 4))]
        committed = committed + drafted[: rng.randrange(len(drafted) + 1)] + [rng.randrange(vocab)]
    assert index.tokens == committed[: len(index)]


def test_custom_match_lengths_agree_with_the_scan():
    rng = random.Random(7)
    sequence = [rng.randrange(4) for _ in range(300)]
    index = PhraseIndex(min_match=1, max_match=9)
    index.sync(sequence[:250])
    assert index.find(sequence, 100, 5) == find_phrase(sequence, 100, 5, min_match=1, max_match=9)
    assert index.find(sequence, 100, 5, MIN_MATCH, MAX_MATCH) == find_phrase(sequence, 100, 5)


def test_sync_refuses_a_sequence_that_does_not_extend_the_index():
    index = PhraseIndex()
    index.sync([1, 2, 3])
    with pytest.raises(ValueError):
        index.sync([1, 2])
    with pytest.raises(ValueError):
        index.sync([1, 2, 4, 5])
    index.sync([1, 2, 3, 4])
    assert index.tokens == [1, 2, 3, 4] and index.starts[2][(1, 2)] == [0]
