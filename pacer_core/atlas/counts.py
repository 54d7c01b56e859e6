"""The atlas's arithmetic: the drafted tokens the target judged, read from a decoder's own step events, and
every count the atlas shows, as small pure functions (no model, no I/O).

Judged tokens. In a step the target rules on the drafted tokens in order and stops at the first rejection:
tokens after it were drafted from a prefix that is already wrong, so nothing was learned about them. A
*judged* token is an accepted one or the first rejected one of its step (``TokenState``; a PACER block never
sent to the target, DISCARDED, is not judged). Its left context is the true prefix (prompt and output so far
plus the accepted tokens before it in its step), and a rejected one has the target's own token in its place
(the step's CORRECTED token).

Counts. ``alpha`` = accepted / drafted over all verified drafted tokens is the decoders' own α (the bench's,
``Metrics.alpha``). The breakdowns count judged tokens, so their ``accepted / drafted`` at draft position k is
the conditional acceptance P(token k accepted | tokens 1..k-1 accepted) (Leviathan et al. 2023 assume one α for
every k). Worked example: steps with verdicts A R r (the third token verified but unjudged), A A and R give
by position 1: 3 drafted, 2 accepted; 2: 2 drafted, 1 accepted; and α = 3 / 6."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..acceptance import AcceptanceByPosition
from ..events import StepEvent, TokenState
from ..sampling import count_greedy_matches
from .token_kinds import TOKEN_KINDS, token_kind

CONTEXT_CHARS = 60          # left context kept with a judged token
ANSWER_START = "\n"         # between the prompt and the output in a left context: the answer starts a new line


@dataclass(frozen=True)
class Judgment:
    """One drafted token the target ruled on."""
    prompt_index: int
    step: int
    position: int            # its depth in the step's draft, 1-based
    output_position: int     # the output index (0-based) it would have taken
    token_id: int
    drafted: str             # its text
    kind: str                # token_kinds.TOKEN_KINDS
    accepted: bool
    draft_prob: float | None  # q(x), the drafter's own confidence in it
    target_prob: float | None  # p(x)
    phrase: bool             # PACER: copied from earlier text (q = 1 by construction), not the drafter's guess
    context: str             # up to CONTEXT_CHARS characters of prompt, ANSWER_START and output before it
    target: str | None = None  # rejected: the target's own token in its place
    preverifier_prob: float | None = None  # PACER: the pre-verifier's acceptance estimate for it


def judged_drafts(events, prompt_index: int, prompt_text: str, eos_ids=frozenset()) -> list[Judgment]:
    """Every judged drafted token of one run (see the module docstring), in output order."""
    judged, text_so_far = [], prompt_text + ANSWER_START
    for event in events:
        if not isinstance(event, StepEvent):
            continue
        start = event.total_new_tokens - len(event.emitted_ids)
        judged += _step_judgments(event, prompt_index, start, text_so_far, eos_ids)
        text_so_far += event.emitted_text
    return judged


def _step_judgments(event: StepEvent, prompt_index: int, start: int, text_so_far: str, eos_ids) -> list[Judgment]:
    judged, prefix = [], text_so_far
    target_token = event.tokens[-1] if event.tokens else None
    for depth, token in enumerate(event.tokens, 1):
        if token.state not in (TokenState.ACCEPTED, TokenState.REJECTED):
            break
        accepted = token.state is TokenState.ACCEPTED
        judged.append(Judgment(
            prompt_index, event.step, depth, start + depth - 1, token.token_id, token.text,
            token_kind(token.text, prefix[-1:], token.token_id in eos_ids), accepted, token.draft_prob,
            token.target_prob, token.phrase, prefix[-CONTEXT_CHARS:],
            None if accepted or target_token is None else target_token.text, token.preverifier_prob))
        if not accepted:
            break
        prefix += token.text
    return judged


def drafted_and_accepted(events) -> tuple[int, int]:
    """The decoders' own counts: (verified drafted tokens, accepted tokens) summed over the step events."""
    steps = [event for event in events if isinstance(event, StepEvent)]
    return sum(event.n_drafted for event in steps), sum(event.n_accepted for event in steps)


def ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def count_row(name: str, value, items: list[Judgment]) -> dict:
    accepted = sum(item.accepted for item in items)
    return {name: value, "drafted": len(items), "accepted": accepted, "alpha": ratio(accepted, len(items))}


def grouped(judgments: list[Judgment], key) -> dict:
    groups = defaultdict(list)
    for item in judgments:
        groups[key(item)].append(item)
    return groups


def by_position(judgments: list[Judgment]) -> list[dict]:
    """[{position, drafted, accepted, alpha}] for depths 1, 2, …: the conditional α at each depth
    (``acceptance.AcceptanceByPosition``, fed each step's judged tokens: its accepted prefix and the first
    rejection, so every one it counts is judged)."""
    stats = AcceptanceByPosition()
    for items in grouped(judgments, lambda item: (item.prompt_index, item.step)).values():
        stats.observe_draft(len(items), sum(item.accepted for item in items))
    return stats.judged_rows()


def by_token_kind(judgments: list[Judgment]) -> list[dict]:
    """[{kind, drafted, accepted, alpha}] in token_kinds.TOKEN_KINDS order, kinds never drafted left out."""
    groups = grouped(judgments, lambda item: item.kind)
    return [count_row("kind", kind, groups[kind]) for kind in TOKEN_KINDS if kind in groups]


def by_category(judgments: list[Judgment], categories: list[str]) -> list[dict]:
    """[{category, drafted, accepted, alpha}] in the prompts' order; ``categories[i]``: prompt i's category.
    A category none of whose prompts drafted anything is left out."""
    groups = grouped(judgments, lambda item: categories[item.prompt_index])
    return [count_row("category", category, groups[category]) for category in dict.fromkeys(categories)
            if category in groups]


def confidence_bin(draft_prob: float, bins: int) -> int:
    """Bin i of ``bins`` equal bins over [0, 1] holds i/bins <= q < (i+1)/bins; q = 1 goes in the last."""
    return min(max(int(draft_prob * bins), 0), bins - 1)


def calibration(judgments: list[Judgment], bins: int = 10) -> list[dict]:
    """The drafter's calibration: per bin of its confidence q, [{low, high, drafted, accepted, alpha, mean_q}],
    empty bins left out. Phrase tokens (q = 1 by construction) and tokens without q are not the drafter's
    guesses and are left out too. A calibrated drafter under greedy decoding has alpha ≈ mean_q."""
    groups = grouped([item for item in judgments if item.draft_prob is not None and not item.phrase],
                     lambda item: confidence_bin(item.draft_prob, bins))
    return [count_row("low", index / bins, items) | {"high": (index + 1) / bins, "mean_q": mean_confidence(items)}
            for index, items in sorted(groups.items())]


def by_preverifier_score(judgments: list[Judgment], bins: int = 10) -> list[dict]:
    """PACER's pre-verifier against the verdicts: per bin of its acceptance estimate, [{low, high, drafted,
    accepted, alpha, mean_score}], empty bins left out; [] for a method without a pre-verifier. A calibrated
    pre-verifier has alpha ≈ mean_score (greedy; sampled tokens are accepted with probability min(1, p/q), so
    the bins compare its estimate with how often that coin came up)."""
    scored = [item for item in judgments if item.preverifier_prob is not None]
    groups = grouped(scored, lambda item: confidence_bin(item.preverifier_prob, bins))
    return [count_row("low", index / bins, items) | {
                "high": (index + 1) / bins, "mean_score": sum(item.preverifier_prob for item in items) / len(items)}
            for index, items in sorted(groups.items())]


def mean_confidence(items: list[Judgment]) -> float:
    return sum(item.draft_prob for item in items) / len(items)


def rejection_row(item: Judgment) -> dict:
    return {"prompt_index": item.prompt_index, "position": item.position, "output_position": item.output_position,
            "context": item.context, "drafted": item.drafted, "target": item.target, "kind": item.kind,
            "draft_prob": item.draft_prob, "target_prob": item.target_prob}


def rejections(judgments: list[Judgment]) -> list[dict]:
    """Every rejected judged token: [{prompt_index, position, context, drafted, target, …}] in output order."""
    return [rejection_row(item) for item in judgments if not item.accepted]


def most_rejected(judgments: list[Judgment], limit: int = 15, examples: int = 3) -> list[dict]:
    """The drafted tokens (by text) most often rejected: [{drafted, rejected, drafted_total, contexts}], most
    rejections first (ties: the higher rejection rate), each with its first ``examples`` rejections."""
    groups = grouped(judgments, lambda item: item.drafted)
    rows = []
    for text, items in groups.items():
        rejected = [item for item in items if not item.accepted]
        if rejected:
            rows.append({"drafted": text, "rejected": len(rejected), "drafted_total": len(items),
                         "contexts": [rejection_row(item) for item in rejected[:examples]]})
    rows.sort(key=lambda row: (-row["rejected"], -row["rejected"] / row["drafted_total"], row["drafted"]))
    return rows[:limit]


def confidently_wrong(judgments: list[Judgment], limit: int = 10) -> list[dict]:
    """The rejections the drafter was surest of (highest q first; phrase tokens left out)."""
    wrong = [item for item in judgments if not item.accepted and item.draft_prob is not None and not item.phrase]
    wrong.sort(key=lambda item: -item.draft_prob)
    return [rejection_row(item) for item in wrong[:limit]]


def common_prefix_length(first: list[int], second: list[int]) -> int:
    """How many leading ids two outputs share (the greedy acceptance count, ``sampling.count_greedy_matches``)."""
    return count_greedy_matches(first, second)


def verdict_agreement(first: list[Judgment], second: list[Judgment], shared_prefix: dict[int, int],
                      examples: int = 30) -> dict:
    """Two drafters on the same prompts: where both drafted a judged token for the same prefix (same prompt,
    same output position, the two outputs equal up to it; ``shared_prefix[prompt_index]`` is that equal
    length), how often both, only one or neither was accepted, and the first ``examples`` places where
    exactly one was (``{prompt_index, output_position, context, first, first_accepted, second,
    second_accepted}``). Under greedy decoding both outputs are the target's, so every position counts."""
    second_at = {(item.prompt_index, item.output_position): item for item in second}
    counts = {"compared": 0, "both": 0, "only_first": 0, "only_second": 0, "neither": 0}
    differing = []
    for item in first:
        other = second_at.get((item.prompt_index, item.output_position))
        if other is None or item.output_position > shared_prefix.get(item.prompt_index, -1):
            continue
        counts["compared"] += 1
        counts[("both", "only_first", "only_second", "neither")[2 * (not item.accepted) + (not other.accepted)]] += 1
        if item.accepted != other.accepted and len(differing) < examples:
            differing.append({"prompt_index": item.prompt_index, "output_position": item.output_position,
                              "context": item.context, "first": item.drafted, "first_accepted": item.accepted,
                              "second": other.drafted, "second_accepted": other.accepted})
    return counts | {"examples": differing}
