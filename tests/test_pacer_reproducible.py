"""Seeded PACER runs repeat token for token: its cost rule prices a block with the pair's stored cost
model (measured_defaults.json's ``pacer_costs``, else fixed priors), never with the process's own timings, so a
sampled run gives the same tokens before and after other runs in one process, and in another process on the
same device, under the page's starting settings for every drafter. Tiny models for every drafter kind (the
real measured_defaults.json copied beside them, so the page's starts and the stored cost models are the
shipped ones); the embedded pair for the real drafters (marked ``embedded``).

Run as a script (``python tests/test_pacer_reproducible.py tiny|embedded FOLDER``) it prints the tokens of every
drafter's runs as JSON: what the two-process tests compare against."""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacer_core import validate_settings  # noqa: E402
from pacer_core.api import make_decoder  # noqa: E402
from pacer_core.drafters import LoadedDrafters, load_drafter  # noqa: E402
from pacer_core.preverifier import default_preverifier  # noqa: E402
from pacer_core.ui.workshop import starting_settings  # noqa: E402

DRAFTERS = ("small", "head", "self-int8", "self-int4", "gguf")
SEEDS = (3, 11)
EMBEDDED_SEEDS, EMBEDDED_TOKENS = (3,), 32   # the real pair: one seed, shorter runs (~1.5 min, not 3)
TINY_PROMPT = [5, 9, 2, 7, 5, 9]
EMBEDDED_PROMPT = "Write a Python function that returns the factorial of n."


def has_llama_cpp() -> bool:
    try:
        importlib.import_module("llama_cpp")
        return True
    except ImportError:
        return False


def tiny_pair_in(folder: Path):
    """(a tiny pair whose measured file is the shipped measured_defaults.json (the page's starts, the cost models)
    copied into ``folder``, its drafter)."""
    from pacer_core.testing.tiny import tiny_pair

    measured_file = folder / "measured_defaults.json"
    shutil.copy(ROOT / "assets" / "draft-smollm2" / "measured_defaults.json", measured_file)
    target, drafter = tiny_pair(scale=2.0, draft_noise=0.2)
    return dataclasses.replace(target, measured_file=str(measured_file)), drafter


def tiny_drafter(target, small, key: str, folder: Path):
    """The drafter ``key`` for a tiny pair whose small drafter is ``small`` (gguf: its draft written to a file)."""
    from pacer_core.drafters.feature_head import random_head_drafter
    from pacer_core.testing.gguf_file import write_llama_gguf

    if key == "head":
        return random_head_drafter(target.model, target.vocab_size)
    gguf_file = ""
    if key == "gguf":
        gguf_file = str(write_llama_gguf(small.model, target.tokenizer, folder / "draft.gguf"))
    return load_drafter(target, LoadedDrafters.around(small, gguf_file=gguf_file), key)


def page_run(target, drafter, prompt_ids: list[int], seed: int, max_new_tokens: int | None = None):
    """PACER as the page starts it for ``drafter`` (its Settings accordion untouched but for ``max_new_tokens``
    when given), seeded."""
    preverifier = default_preverifier(target, drafter)
    starts = starting_settings(target, drafter, preverifier) | {"seed": seed}
    settings = validate_settings(**(starts | ({"max_new_tokens": max_new_tokens} if max_new_tokens else {})))
    *events, result = make_decoder("pacer", preverifier).run(target, drafter, prompt_ids, settings)
    return events, result


def other_runs(target, drafter, prompt_ids: list[int], max_new_tokens: int = 24) -> None:
    """Runs that a process may have made before: other methods, seeds, temperatures and stopping rules."""
    for method, extra in (("fixed", {"gamma": 6}), ("pacer", {"stop_rule": "cost", "block_size": 1}),
                          ("pacer", {"stop_rule": "cost", "temperature": 0.0}), ("smc", {"n_particles": 2})):
        settings = validate_settings(max_new_tokens=max_new_tokens, temperature=extra.pop("temperature", 0.9), seed=5,
                                     **extra)
        for _ in make_decoder(method, default_preverifier(target, drafter)).run(target, drafter, prompt_ids, settings):
            pass


def drafter_tokens(target, prompt_ids: list[int], drafters_by_key: dict, seeds=SEEDS,
                   max_new_tokens: int | None = None) -> dict:
    """Every drafter's tokens for every seed, as the page would run them."""
    return {key: {str(seed): page_run(target, drafter, prompt_ids, seed, max_new_tokens)[1].token_ids
                  for seed in seeds} for key, drafter in drafters_by_key.items()}


def embedded_tokens(target, prompt_ids: list[int], drafters_by_key: dict) -> dict:
    return drafter_tokens(target, prompt_ids, drafters_by_key, EMBEDDED_SEEDS, EMBEDDED_TOKENS)


def tiny_drafters(target, small, folder: Path) -> dict:
    return {key: tiny_drafter(target, small, key, folder) for key in DRAFTERS if key != "gguf" or has_llama_cpp()}


def embedded_setup():
    from pacer_core import load_target

    target, drafters = load_target("embedded", "small", device="cpu", dtype="float32")
    drafters_by_key = {key: load_drafter(target, drafters, key) for key in DRAFTERS if key != "gguf" or has_llama_cpp()}
    return target, list(target.encode_prompt(EMBEDDED_PROMPT)), drafters_by_key


def tokens_in_another_process(kind: str, folder: Path) -> dict:
    completed = subprocess.run([sys.executable, __file__, kind, str(folder)], capture_output=True, text=True,
                               check=True, cwd=ROOT, env={"OMP_WAIT_POLICY": "PASSIVE", **os.environ})
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("draft")
    target, small = tiny_pair_in(folder)
    return target, folder, tiny_drafters(target, small, folder)


def test_the_gguf_page_settings_take_the_cost_rule_at_the_pages_temperature(tiny):
    """The test below must exercise the cost rule: the page starts gguf at stop_rule auto and T = 0.7."""
    target, _, drafters_by_key = tiny
    if "gguf" not in drafters_by_key:
        pytest.skip("llama-cpp-python is not installed")
    gguf = drafters_by_key["gguf"]
    preverifier = default_preverifier(target, gguf)
    starts = starting_settings(target, gguf, preverifier)
    assert starts["stop_rule"] == "auto" and starts["temperature"] > 0      # auto: the cost rule when sampling
    settings = validate_settings(**(starts | {"seed": SEEDS[0], "max_draft_len": 32}))
    *events, _ = make_decoder("pacer", preverifier).run(target, gguf, TINY_PROMPT, settings)
    assert any(event.stop_reason == "cost" for event in events)   # past the page's short cap, the rule itself stops


def test_a_seeded_page_run_repeats_after_other_runs_in_one_process(tiny):
    target, _, drafters_by_key = tiny
    before = drafter_tokens(target, TINY_PROMPT, drafters_by_key)
    for drafter in drafters_by_key.values():
        other_runs(target, drafter, TINY_PROMPT)
    assert drafter_tokens(target, TINY_PROMPT, drafters_by_key) == before


def test_a_seeded_page_run_repeats_in_another_process(tiny):
    target, folder, drafters_by_key = tiny
    assert tokens_in_another_process("tiny", folder) == drafter_tokens(target, TINY_PROMPT, drafters_by_key)


@pytest.mark.embedded
def test_the_real_drafters_repeat_after_other_runs_and_in_another_process(tmp_path):
    import torch

    torch.set_num_threads(2)                     # as the other process runs (the fixture restores it)
    target, prompt_ids, drafters_by_key = embedded_setup()
    before = embedded_tokens(target, prompt_ids, drafters_by_key)
    for drafter in drafters_by_key.values():
        other_runs(target, drafter, prompt_ids, max_new_tokens=12)
    assert embedded_tokens(target, prompt_ids, drafters_by_key) == before
    assert tokens_in_another_process("embedded", tmp_path) == before


def main(kind: str, folder: str) -> None:
    if kind == "tiny":
        target, small = tiny_pair_in(Path(folder))
        print(json.dumps(drafter_tokens(target, TINY_PROMPT, tiny_drafters(target, small, Path(folder)))))
    else:
        target, prompt_ids, drafters_by_key = embedded_setup()
        print(json.dumps(embedded_tokens(target, prompt_ids, drafters_by_key)))


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1 if sys.argv[1] == "tiny" else 2)
    main(*sys.argv[1:3])
