"""Phrase drafts: candidate continuations copied from the text so far, at no model cost.

Prompt lookup / n-gram drafting (Saxena 2023, "Prompt lookup decoding"; Ouroboros, Zhao et al. 2024,
arXiv 2402.13720, drafts whole phrases the same way): when the last few tokens of the sequence occurred
earlier in it — in the prompt (a passage to summarise, code to fix) or in the output so far — the tokens
that followed that earlier occurrence are a likely continuation. A phrase is a *deterministic* proposal:
q is one-hot on each phrase token, so speculative sampling stays exact (accept with probability p(x),
resample from the residual max(0, p − q), which is p without x, otherwise). See docs/algorithms.md#phrase-drafts.
"""
from __future__ import annotations

from bisect import bisect_right
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
    ``max_tokens`` < 1. The copied tokens never run past the end of the sequence. Scans the whole
    sequence per suffix length; ``PhraseIndex.find`` gives the same answer from an index."""
    return _longest_match(sequence, prompt_len, max_tokens, min_match, max_match,
                          lambda match_length: latest_occurrence(sequence, match_length))


def _longest_match(sequence: list[int], prompt_len: int, max_tokens: int, min_match: int, max_match: int,
                   occurrence) -> PhraseMatch | None:
    """``find_phrase``'s rule, with ``occurrence(match_length)`` → the latest earlier start or None."""
    if max_tokens < 1:
        return None
    for match_length in range(min(max_match, len(sequence) - 1), min_match - 1, -1):
        start = occurrence(match_length)
        if start is not None:
            follow = start + match_length
            copied = tuple(sequence[follow: follow + max_tokens])
            if copied:
                return PhraseMatch(copied, match_length, start, in_prompt=follow < prompt_len)
    return None


def latest_occurrence(sequence: list[int], match_length: int) -> int | None:
    """Start of the most recent occurrence of the last ``match_length`` tokens that ends before the
    sequence does (the suffix itself excluded), or None."""
    return _scan_back(sequence, match_length, len(sequence) - match_length - 1, 0)


def _scan_back(sequence: list[int], match_length: int, highest: int, lowest: int) -> int | None:
    """The highest start in [lowest, highest] where the last ``match_length`` tokens occur, or None."""
    suffix = sequence[-match_length:]
    for start in range(highest, max(lowest, 0) - 1, -1):
        if sequence[start: start + match_length] == suffix:
            return start
    return None


class PhraseIndex:
    """Where each n-gram of a growing token sequence starts (n from ``min_match`` to ``max_match``), kept as
    tokens arrive, so a phrase lookup costs a few dictionary probes instead of a scan of the whole sequence
    per block (a 1,500-token prompt: ~10,000 slice comparisons per block for the scan).

    Invariant: ``starts[n][gram]`` lists, ascending, every start s with s + n <= len(tokens) and
    tokens[s: s + n] == gram. ``tokens`` only grows: index the committed sequence (``sync``), and pass the
    committed sequence plus any drafted tail to ``find``; the few starts whose n-gram reaches into the tail
    are scanned (at most the tail's length plus n - 1 of them).

    Worked example: tokens [5, 6, 5, 6] give starts[2] = {(5, 6): [0, 2], (6, 5): [1]}; ``find`` on
    [5, 6, 5, 6] looks up the suffix (5, 6), drops start 2 (the suffix itself) and copies from 0 + 2:
    (5, 6), as ``find_phrase`` does."""

    def __init__(self, min_match: int = MIN_MATCH, max_match: int = MAX_MATCH):
        if not 1 <= min_match <= max_match:
            raise ValueError(f"Need 1 <= min_match <= max_match (got {min_match}, {max_match}).")
        self.min_match, self.max_match = min_match, max_match
        self.tokens: list[int] = []
        self.starts: dict[int, dict[tuple, list[int]]] = {n: {} for n in range(min_match, max_match + 1)}

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, token_ids) -> None:
        """Index more tokens at the end: every n-gram that now ends at each new token."""
        tokens = self.tokens
        for token_id in token_ids:
            tokens.append(int(token_id))
            end = len(tokens)
            for match_length, starts in self.starts.items():
                if end >= match_length:
                    starts.setdefault(tuple(tokens[end - match_length: end]), []).append(end - match_length)

    def sync(self, sequence: list[int]) -> None:
        """Index what ``sequence`` has beyond the indexed tokens (it must extend them: the committed sequence
        of a run only grows)."""
        indexed = len(self.tokens)
        if len(sequence) < indexed or (indexed and sequence[indexed - 1] != self.tokens[-1]):
            raise ValueError("PhraseIndex.sync: the sequence does not extend the indexed tokens.")
        self.extend(sequence[indexed:])

    def latest_occurrence(self, sequence: list[int], match_length: int) -> int | None:
        """``latest_occurrence(sequence, match_length)`` for a ``sequence`` that extends the indexed tokens."""
        highest = len(sequence) - match_length - 1          # the suffix itself excluded
        if highest < 0:
            return None
        if match_length not in self.starts:
            return latest_occurrence(sequence, match_length)
        indexed = len(self.tokens)
        # Starts whose n-gram reaches past the indexed tokens (into the drafted tail): scanned.
        found = _scan_back(sequence, match_length, highest, indexed - match_length + 1)
        if found is not None:
            return found
        starts = self.starts[match_length].get(tuple(sequence[-match_length:]))
        if not starts:
            return None
        position = bisect_right(starts, highest) - 1
        return starts[position] if position >= 0 else None

    def find(self, sequence: list[int], prompt_len: int, max_tokens: int, min_match: int | None = None,
             max_match: int | None = None) -> PhraseMatch | None:
        """``find_phrase(sequence, ...)`` from the index: the same match, for a ``sequence`` that extends the
        indexed tokens (the committed sequence, then the tokens drafted so far this step)."""
        min_match = self.min_match if min_match is None else min_match
        max_match = self.max_match if max_match is None else max_match
        return _longest_match(sequence, prompt_len, max_tokens, min_match, max_match,
                              lambda match_length: self.latest_occurrence(sequence, match_length))
