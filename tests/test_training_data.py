"""Pure helpers of the draft-distillation pipeline: prompt sets stay apart from evaluation prompts, story
recasing, and the tau arithmetic the model card reports."""
import pytest

from pacer_core.training.draft_data import recase_story
from pacer_core.training.draft_eval import greedy_tau
from pacer_core.training.instructions import (evaluation_prompts, extra_instructions, heldout_instructions,
                                              resembles_evaluation, training_instructions)

pytestmark = pytest.mark.pure


def test_training_prompts_never_contain_heldout_prompts():
    heldout = set(heldout_instructions())
    assert not heldout & set(training_instructions())
    assert not heldout & set(extra_instructions())


def test_extra_instructions_are_new_and_not_near_copies_of_heldout():
    extra = extra_instructions()
    assert len(extra) > 1500 and len(set(extra)) == len(extra)
    assert not set(extra) & set(training_instructions())
    assert not any(resembles_evaluation(prompt, heldout_instructions()) for prompt in extra)


def test_evaluation_prompts_include_benchmark_files_and_filter_near_copies():
    evaluation = evaluation_prompts()
    assert "What is the difference between weather and climate?" in evaluation  # from assets/prompts/bench.jsonl
    assert resembles_evaluation("What is the difference between weather and climate?", evaluation)
    assert resembles_evaluation("Write a Python function that returns the factorial of n.", evaluation)
    assert not resembles_evaluation("Tell me some fun facts about octopuses.", evaluation)


def test_recase_story_restores_sentence_starts_names_and_i():
    text = 'once upon a time, there was a girl named lily. lily said, "i like it." she smiled.'
    assert recase_story(text) == 'Once upon a time, there was a girl named Lily. Lily said, "I like it." She smiled.'


def test_greedy_tau_counts_accepted_runs_plus_the_target_token():
    assert greedy_tau([True] * 8, gamma=4) == (8, 2)           # 4 accepted + 1 target token, then 3 left
    assert greedy_tau([False] * 5, gamma=4) == (5, 5)          # every step emits only the target's token
    assert greedy_tau([True, True, False, True], gamma=4) == (4, 2)


def test_heldout_prompt_file_matches_the_draft_heldout_list():
    import json
    from pathlib import Path
    lines = Path("assets/prompts/heldout.jsonl").read_text().splitlines()
    assert [json.loads(line)["prompt"] for line in lines] == heldout_instructions()


class TemplateTokenizer:
    """Stands in for the target's tokenizer: a fixed template around one id per character of the message."""

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return [1] + [ord(character) % 50 for character in messages[0]["content"]] + [2, 3]


def test_reply_files_become_hard_label_samples_without_evaluation_prompts(tmp_path):
    import gzip
    import json

    import torch

    from pacer_core.training.draft import collate, load_samples
    from pacer_core.training.draft_data import reply_file_samples

    heldout = heldout_instructions()[0]
    records = [{"kind": "templated", "prompt": "Name two colours.", "reply_ids": [7, 8, 9, 2]},
               {"kind": "grounded", "prompt": heldout, "reply_ids": [5, 2]},
               {"kind": "templated", "prompt": "Say nothing.", "reply_ids": []}]
    path = tmp_path / "replies.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(json.dumps(record) for record in records) + "\n")
    samples = reply_file_samples(path, TemplateTokenizer())
    assert len(samples) == 2                                   # the empty reply is dropped
    first = samples[0]
    assert first["prompt"].tolist() == TemplateTokenizer().apply_chat_template(
        [{"content": "Name two colours."}], True, True)
    assert first["top_ids"][:, 0].tolist() == [7, 8, 9, 2] and first["top_probs"][:, 0].tolist() == [1.0] * 4
    assert float(first["top_probs"][:, 1:].abs().sum()) == 0.0
    kept = load_samples(include_corpus=False, reply_files=samples)
    assert [sample["instruction"] for sample in kept if sample.get("kind", "").startswith("file-")] == \
        ["Name two colours."]                                  # the held-out prompt never reaches training
    batch = collate([first])
    assert torch.equal(batch["labels"], torch.tensor([7, 8, 9, 2]))
