"""Phrase drafts: candidate continuations copied from the text so far, at no model cost.

Prompt lookup / n-gram drafting (Saxena 2023, "Prompt lookup decoding"; Ouroboros, Zhao et al. 2024,
arXiv 2402.13720, drafts whole phrases the same way): when the last few tokens of the sequence occurred
earlier in it — in the prompt (a passage to summarise, code to fix) or in the output so far — the tokens
that followed that earlier occurrence are a likely continuation. A phrase is a *deterministic* proposal:
q is one-hot on each phrase token, so speculative sampling stays exact (accept with probability p(x),
resample from the residual max(0, p − q), which is p without x, otherwise). See docs/algorithms.md#phrase-drafts.
"""
from __future__ import annotations

from dataclasses import dataclass

MIN_MATCH = 2      # shortest suffix that may trigger a phrase (one token matches far too often)
MAX_MATCH = 6      # the longest suffix tried first: a longer match predicts its continuation better


@dataclass(frozen=True)
class PhraseMatch:
    """``token_ids`` followed the sequence's last ``match_length`` tokens where they occurred at
    ``source_start`` (an index into the sequence); ``in_prompt``: that occurrence lies in the prompt."""
    token_ids: tuple[int, ...]
    match_length: int
    source_start: int
    in_prompt: bool

    def describe(self) -> str:
        where = "the prompt" if self.in_prompt else "the output so far"
        return f"copied {len(self.token_ids)} token{'s' if len(self.token_ids) != 1 else ''} from {where} " \
               f"after a {self.match_length}-token match"


def find_phrase(sequence: list[int], prompt_len: int, max_tokens: int, min_match: int = MIN_MATCH,
                max_match: int = MAX_MATCH) -> PhraseMatch | None:
    """The continuation of the most recent earlier occurrence of the longest suffix of ``sequence``
    (``max_match`` down to ``min_match`` tokens) that occurred before; None when no suffix recurs or
    ``max_tokens`` < 1. The copied tokens never run past the end of the sequence."""
    if max_tokens < 1:
        return None
    for match_length in range(min(max_match, len(sequence) - 1), min_match - 1, -1):
        start = latest_occurrence(sequence, match_length)
        if start is not None:
            follow = start + match_length
            copied = tuple(sequence[follow: follow + max_tokens])
            if copied:
                return PhraseMatch(copied, match_length, start, in_prompt=follow < prompt_len)
    return None


def latest_occurrence(sequence: list[int], match_length: int) -> int | None:
    """Start of the most recent occurrence of the last ``match_length`` tokens that ends before the
    sequence does (the suffix itself excluded), or None."""
    suffix = sequence[-match_length:]
    for start in range(len(sequence) - match_length - 1, -1, -1):
        if sequence[start: start + match_length] == suffix:
            return start
    return None
