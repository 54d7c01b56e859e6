"""The atlas's arithmetic on hand-made step events: judged tokens, their contexts and every breakdown."""
import json

import pytest

from pacer_core.atlas import counts
from pacer_core.atlas.token_kinds import (CODE_SYMBOLS, DIGITS, END_OF_TEXT, INSIDE_WORD, SPACE_PUNCTUATION, START_OF_WORD,
                                    token_kind)
from pacer_core.atlas.report import csv_rows, markdown_report, token_cell
from pacer_core.atlas.runner import UNCATEGORISED, load_atlas_prompts
from pacer_core.events import StepEvent, TokenRecord
from pacer_core.settings import SettingsError

pytestmark = pytest.mark.pure


@pytest.mark.parametrize("text, previous, is_end, kind", [
    (" world", "o", False, START_OF_WORD), ("ing", "k", False, INSIDE_WORD), ("Hello", "\n", False, START_OF_WORD),
    ("Hello", "", False, START_OF_WORD), ("ing", "3", False, INSIDE_WORD), (" 42", " ", False, DIGITS),
    (" 1,234", "", False, DIGITS), (" {", ")", False, CODE_SYMBOLS), ("_", "x", False, CODE_SYMBOLS),
    (", ", "d", False, SPACE_PUNCTUATION), ("\n\n", ".", False, SPACE_PUNCTUATION), ("(x", "f", False, START_OF_WORD),
    ("</s>", "", True, END_OF_TEXT), ("3rd", " ", False, START_OF_WORD), ("\ufffd", "a", False, SPACE_PUNCTUATION)])
def test_token_kind(text, previous, is_end, kind):
    assert token_kind(text, previous, is_end) == kind


def step(number: int, verdicts: str, texts: list[str], start: int, probs=None, phrase=False) -> StepEvent:
    """A step from a verdict string: A accepted, R rejected, r rejected after the first rejection, D discarded;
    then the target's token (corrected after a rejection, else bonus), whose text is texts[-1]."""
    states = {"A": "accepted", "R": "rejected", "r": "rejected", "D": "discarded"}
    probs = probs or [0.5] * len(verdicts)
    tokens = [TokenRecord(100 + i, texts[i], states[v], draft_prob=probs[i], target_prob=0.4, phrase=phrase)
              for i, v in enumerate(verdicts)]
    n_accepted = verdicts.count("A")
    next_kind = "corrected" if "R" in verdicts else "bonus"
    tokens.append(TokenRecord(7, texts[len(verdicts)], next_kind, target_prob=0.9))
    emitted = texts[:n_accepted] + [texts[len(verdicts)]]
    verified = len(verdicts) - verdicts.count("D")
    return StepEvent("fixed", number, tokens, list(range(len(emitted))), "".join(emitted), verified, n_accepted,
                     0.0, 0.0, start + len(emitted))


def worked_example():
    """The module docstring's example: A R r, then A A (bonus), then R."""
    return [step(0, "ARr", [" a", " b", " c", " B"], 0), step(1, "AA", [" d", " e", " f"], 2),
            step(2, "R", ["x", " G"], 5)]


def test_worked_example_counts():
    events = worked_example()
    judged = counts.judged_drafts(events, 0, "Say")
    assert [(j.position, j.accepted) for j in judged] == [(1, True), (2, False), (1, True), (2, True), (1, False)]
    assert counts.drafted_and_accepted(events) == (6, 3)
    assert counts.by_position(judged) == [{"position": 1, "drafted": 3, "accepted": 2, "alpha": 2 / 3},
                                          {"position": 2, "drafted": 2, "accepted": 1, "alpha": 0.5}]


def test_contexts_targets_and_output_positions():
    judged = counts.judged_drafts(worked_example(), 0, "Say")
    rejected = [j for j in judged if not j.accepted]
    assert [(j.context, j.drafted, j.target) for j in rejected] == [("Say\n a", " b", " B"),
                                                                     ("Say\n a B d e f", "x", " G")]
    assert [j.output_position for j in judged] == [0, 1, 2, 3, 5]
    assert judged[-1].kind == INSIDE_WORD            # "x" glued to the "f" before it


def test_context_keeps_the_last_characters():
    judged = counts.judged_drafts([step(0, "R", ["z", "y"], 0)], 0, "w" * 500)
    assert judged[0].context == "w" * (counts.CONTEXT_CHARS - 1) + counts.ANSWER_START


def test_discarded_tokens_are_not_judged():
    events = [step(0, "AAD", [" a", " b", " c", " d"], 0)]
    assert [j.accepted for j in counts.judged_drafts(events, 0, "")] == [True, True]
    assert counts.drafted_and_accepted(events) == (2, 2)


def test_end_of_text_kind_from_eos_ids():
    judged = counts.judged_drafts([step(0, "A", ["</s>", " x"], 0)], 0, "", eos_ids={100})
    assert judged[0].kind == END_OF_TEXT


def test_by_category_and_kind_order():
    first = counts.judged_drafts(worked_example(), 0, "")
    second = counts.judged_drafts([step(0, "A", [" 7", " x"], 0)], 1, "")
    rows = counts.by_category(first + second, ["chat", "math", "chat"])
    assert rows == [{"category": "chat", "drafted": 5, "accepted": 3, "alpha": 0.6},
                    {"category": "math", "drafted": 1, "accepted": 1, "alpha": 1.0}]
    kinds = [row["kind"] for row in counts.by_token_kind(first + second)]
    assert kinds == [START_OF_WORD, INSIDE_WORD, DIGITS]


@pytest.mark.parametrize("q, bins, index", [(0.0, 10, 0), (0.0999, 10, 0), (0.1, 10, 1), (0.95, 10, 9), (1.0, 10, 9),
                                            (0.5, 4, 2)])
def test_confidence_bin(q, bins, index):
    assert counts.confidence_bin(q, bins) == index


def test_calibration_leaves_out_phrase_tokens():
    events = [step(0, "AR", [" a", " b", " c"], 0, probs=[0.95, 0.15]), step(1, "A", [" d", " e"], 2, phrase=True)]
    rows = counts.calibration(counts.judged_drafts(events, 0, ""))
    assert [(row["low"], row["drafted"], row["accepted"]) for row in rows] == [(0.1, 1, 0), (0.9, 1, 1)]
    assert rows[1]["mean_q"] == pytest.approx(0.95) and rows[1]["high"] == pytest.approx(1.0)


def test_acceptance_by_the_preverifiers_estimate():
    events = [step(0, "AR", [" a", " b", " c"], 0), step(1, "AA", [" d", " e", " f"], 2), step(2, "R", [" g", " h"], 5)]
    scores = iter([0.95, 0.35, 0.92, 0.99, 0.31])
    for event in events:
        for token in event.tokens[:-1]:
            token.preverifier_prob = next(scores)
    rows = counts.by_preverifier_score(counts.judged_drafts(events, 0, ""))
    assert [(row["low"], row["drafted"], row["accepted"]) for row in rows] == [(0.3, 2, 0), (0.9, 3, 3)]
    assert rows[1]["mean_score"] == pytest.approx((0.95 + 0.92 + 0.99) / 3)
    assert counts.by_preverifier_score(counts.judged_drafts(worked_example(), 0, "")) == []   # fixed SD: no scores
    report = markdown_report(minimal_atlas(by_preverifier_score=rows))
    assert "By the pre-verifier's estimate (PACER)" in report


def test_most_rejected_and_confidently_wrong():
    events = [step(0, "R", [" the", " a"], 0, probs=[0.3]), step(1, "AR", [" x", " the", " b"], 1, probs=[0.9, 0.8]),
              step(2, "R", [" of", " c"], 3, probs=[0.99])]
    judged = counts.judged_drafts(events, 0, "")
    top = counts.most_rejected(judged, examples=1)
    assert [(row["drafted"], row["rejected"], row["drafted_total"]) for row in top] == [(" the", 2, 2), (" of", 1, 1)]
    assert [c["target"] for c in top[0]["contexts"]] == [" a"]
    assert [(row["drafted"], row["draft_prob"]) for row in counts.confidently_wrong(judged)] == [(" of", 0.99),
                                                                                                (" the", 0.8),
                                                                                                (" the", 0.3)]


def test_verdict_agreement_counts_only_shared_prefixes():
    first = counts.judged_drafts([step(0, "AR", [" a", " b", " B"], 0)], 0, "")
    second = counts.judged_drafts([step(0, "R", [" z", " a"], 0), step(1, "R", [" c", " B"], 1)], 0, "")
    agreement = counts.verdict_agreement(first, second, {0: 2})
    assert {key: agreement[key] for key in ("compared", "both", "only_first", "only_second", "neither")} == {
        "compared": 2, "both": 0, "only_first": 1, "only_second": 0, "neither": 1}
    assert agreement["examples"] == [{"prompt_index": 0, "output_position": 0, "context": "\n", "first": " a",
                                      "first_accepted": True, "second": " z", "second_accepted": False}]
    assert counts.verdict_agreement(first, second, {0: 0})["compared"] == 1


def test_common_prefix_length():
    assert counts.common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert counts.common_prefix_length([], [1]) == 0


def test_load_atlas_prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "Hi", "category": "chat"}\n\n{"prompt": "Two", "id": "x"}\n')
    prompts = load_atlas_prompts(path)
    assert [(p.prompt, p.category, p.id) for p in prompts] == [("Hi", "chat", "prompt-1"), ("Two", UNCATEGORISED, "x")]
    path.write_text('{"text": "no prompt"}\n')
    with pytest.raises(SettingsError, match="p.jsonl:1"):
        load_atlas_prompts(path)


def test_built_in_prompt_set_is_categorised():
    from pacer_core.atlas.cli import BUILT_IN_PROMPTS

    prompts = load_atlas_prompts(BUILT_IN_PROMPTS)
    categories = {prompt.category for prompt in prompts}
    assert len(prompts) == 40 and len(categories) >= 6 and UNCATEGORISED not in categories
    assert len({prompt.id for prompt in prompts}) == 40


def test_markdown_cells_show_whitespace_and_escape_pipes():
    assert token_cell(" a|b\n") == "␣a\\|b↵"
    assert token_cell(None) == "–"


def minimal_atlas(**extra) -> dict:
    row = {"index": 0, "id": "p", "category": "c", "prompt": "x", "tau": 2.0, "alpha": 0.5, "tokens": 4, "seconds": 1.0,
           "speedup": None, "drafted": 2, "accepted": 1, "steps": 2, "finish_reason": "length", "text": "y"}
    return {"method": "pacer", "drafter": "small", "temperature": 0.0, "seed": 0, "max_new_tokens": 4, "prompts": 1,
            "prompt_total": 1, "drafted": 2, "accepted": 1, "alpha": 0.5, "tau": 2.0, "speedup": None,
            "by_position": [], "by_token_kind": [], "by_category": [], "calibration": [], "most_rejected": [],
            "confidently_wrong": [], "per_prompt": [row]} | extra


def test_report_and_csv_rows_with_a_comparison():
    agreement = {"compared": 0, "both": 0, "only_first": 0, "only_second": 0, "neither": 0, "examples": []}
    atlas = minimal_atlas(compare=minimal_atlas(drafter="head", agreement=agreement))
    rows = csv_rows(atlas)
    assert rows[0]["head_alpha"] == 0.5 and rows[0]["tau"] == 2.0
    report = markdown_report(atlas)
    assert "# Atlas: pacer drafted by small" in report and "## Compared with head" in report
    json.dumps(atlas)
