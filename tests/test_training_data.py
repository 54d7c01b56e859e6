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
