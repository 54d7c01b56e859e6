"""Phrase lookup (pacer_core/phrases.py): which phrase is found, from where, and when none is."""
import pytest

from pacer_core.phrases import find_phrase, latest_occurrence

pytestmark = pytest.mark.pure


def test_copies_what_followed_the_latest_earlier_occurrence():
    sequence = [5, 6, 7, 1, 2, 9, 5, 6, 8, 1, 2]          # the suffix [1, 2] occurred at 3 (then 9 …)
    match = find_phrase(sequence, prompt_len=6, max_tokens=3)
    assert match.token_ids == (9, 5, 6) and match.match_length == 2 and match.source_start == 3
    assert match.in_prompt


def test_prefers_the_longest_suffix_that_recurs():
    sequence = [1, 2, 3, 4, 0, 3, 4, 7, 2, 3, 4]           # [2, 3, 4] recurs at 1; [3, 4] more recently at 5
    match = find_phrase(sequence, prompt_len=0, max_tokens=2)
    assert match.match_length == 3 and match.token_ids == (0, 3) and not match.in_prompt


def test_no_phrase_without_a_recurring_suffix_or_budget():
    assert find_phrase([1, 2, 3, 4, 5], prompt_len=5, max_tokens=4) is None
    assert find_phrase([1, 2, 1, 2], prompt_len=2, max_tokens=0) is None
    assert find_phrase([7], prompt_len=1, max_tokens=3) is None


def test_single_token_matches_do_not_trigger_by_default():
    assert find_phrase([3, 8, 3], prompt_len=1, max_tokens=2) is None
    assert find_phrase([3, 8, 3], prompt_len=1, max_tokens=2, min_match=1).token_ids == (8, 3)


def test_copy_stops_at_the_end_of_the_sequence():
    match = find_phrase([4, 4, 4], prompt_len=0, max_tokens=5)
    assert match.token_ids == (4,) and match.source_start == 0


def test_latest_occurrence_excludes_the_suffix_itself():
    assert latest_occurrence([1, 2, 1, 2], 2) == 0
    assert latest_occurrence([1, 2, 3], 2) is None
