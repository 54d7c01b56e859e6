"""The device tier: the decoders' checks on one chosen device, with the tiny pairs moved there.

    pytest tests/test_cuda_tier.py --device cuda        # or PACER_TEST_DEVICE=cuda pytest tests/test_cuda_tier.py
    pytest tests/test_cuda_tier.py                      # default --device cpu: the same checks, small and quick

Greedy identity with AR (fixed SD, PACER, a feature head), seeded runs repeating, the sampled distribution
of fixed SD against the enumerated target, SMC-SD with resampling, the draft on another device than the
target, and a target whose last layers sit elsewhere (what ``device_map="auto"`` does). Without a visible GPU,
``--device cuda`` skips every test with the reason "no CUDA device visible". The last test runs the device
check script's CPU dry run (scripts/device_check.sh --dry-run), so CI keeps it working."""
import dataclasses
import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from pacer_core import Autoregressive, FixedSpeculative, Pacer, generate, method_table, validate_settings
from pacer_core.decoders.smc import SMC
from pacer_core.drafters.feature_head import random_head_drafter
from pacer_core.preverifier import ConfidencePreVerifier
from pacer_core.testing.enumeration import chi_square_p_value, target_sequence_distribution
from pacer_core.testing.tiny import tiny_pair

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [[1, 2, 3], [7, 7, 7, 7, 9], list(range(20))]
SIGNIFICANCE = 1e-3


def on_device(pair_and_drafter, target_device, draft_device=None):
    """Move a tiny pair's target and its drafter's model (to ``draft_device`` when given): (the pair recording the
    device, the drafter)."""
    target, drafter = pair_and_drafter
    target.model.to(target_device)
    if drafter is not None:
        drafter.model.to(draft_device or target_device)
    return dataclasses.replace(target, device=torch.device(target_device)), drafter


def other_device(device: torch.device) -> torch.device:
    """A second device to split work onto: another GPU when there is one, else the CPU."""
    if device.type == "cuda" and torch.cuda.device_count() > 1:
        return torch.device("cuda", ((device.index or 0) + 1) % torch.cuda.device_count())
    return torch.device("cpu")


def run(decoder, target, drafter, prompt_ids, **settings):
    *_, result = decoder.run(target, drafter, list(prompt_ids), validate_settings(**settings))
    return result


def greedy_decoders():
    return [FixedSpeculative(1), FixedSpeculative(4),
            Pacer(2, 8, 0.3, ConfidencePreVerifier(), "submit"), Pacer(1, 4, 0.99, ConfidencePreVerifier(), "discard")]


def assert_greedy_identity(target, drafter, max_new_tokens=24):
    for prompt in PROMPTS:
        reference = run(Autoregressive(), target, drafter, prompt, max_new_tokens=max_new_tokens).token_ids
        for decoder in greedy_decoders():
            assert run(decoder, target, drafter, prompt, max_new_tokens=max_new_tokens).token_ids == reference, \
                decoder.info()


def test_greedy_fixed_and_pacer_equal_ar(test_device):
    assert_greedy_identity(*on_device(tiny_pair(scale=6.0, draft_noise=0.2, eos_token_id=63), test_device))


@pytest.mark.parametrize("method", method_table.method_keys())
def test_seeded_runs_repeat_on_the_device(test_device, method):
    target, drafter = on_device(tiny_pair(scale=2.0), test_device)
    runs = [generate(target, drafter, method, "t3 t4 t5", max_new_tokens=16, temperature=0.9, top_k=40, top_p=0.95,
                     seed=11).token_ids for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 16


@pytest.mark.statistical
def test_fixed_sampling_matches_the_target_on_the_device(test_device):
    target, drafter = tiny_pair(vocab_size=5, scale=6.0, draft_noise=None, target_layers=1, hidden=16)
    truth = target_sequence_distribution(target.model, [1, 2], 2, temperature=1.0)   # enumerated on the CPU
    target, drafter = on_device((target, drafter), test_device)
    runs = 1500 if test_device.type == "cuda" else 300
    counts = Counter(tuple(run(FixedSpeculative(2), target, drafter, [1, 2], max_new_tokens=2, temperature=1.0,
                               seed=seed).token_ids) for seed in range(runs))
    assert chi_square_p_value(counts, truth) > SIGNIFICANCE


@pytest.mark.parametrize("final", ["sample", "argmax"])
def test_smc_resamples_and_finishes_on_the_device(test_device, final):
    target, drafter = on_device(tiny_pair(vocab_size=32, scale=3.0, draft_noise=0.5, eos_token_id=31), test_device)
    result = run(SMC(4, 3, ess_threshold=1.0, final=final), target, drafter, [1, 2, 3], max_new_tokens=20,
                 temperature=1.0, top_k=20, top_p=0.95, seed=3)
    assert 0 < len(result.token_ids) <= 20 and result.finish_reason in ("eos", "length")
    assert result.info["resamples"] > 0
    assert abs(sum(result.info["final_weights"]) - 1.0) < 1e-9


def test_feature_head_drafts_on_the_device(test_device):
    target, _ = on_device(tiny_pair(scale=6.0, draft_noise=None, eos_token_id=63), test_device)
    for kept_ids in (None, list(range(0, 64, 2))):
        head = random_head_drafter(target.model, target.vocab_size, kept_ids, seed=0, scale=0.5)
        assert head.device == next(target.model.parameters()).device
        assert_greedy_identity(target, head, max_new_tokens=16)
    sampled = run(FixedSpeculative(3), target, head, [1, 2, 3], max_new_tokens=16, temperature=1.0, seed=2)
    particles = run(SMC(4, 3, ess_threshold=1.0), target, head, [1, 2, 3], max_new_tokens=16, temperature=1.0, seed=3)
    assert 0 < len(sampled.token_ids) <= 16 and particles.info["resamples"] > 0


def test_draft_on_another_device_than_the_target(test_device):
    """Draft rows are moved to the target's device before they meet the target's (degenerate on the CPU)."""
    target, drafter = on_device(tiny_pair(scale=6.0, draft_noise=0.2), test_device,
                                draft_device=other_device(test_device))
    assert_greedy_identity(target, drafter, max_new_tokens=16)
    for method in ("fixed", "pacer", "smc"):
        assert len(generate(target, drafter, method, "t3 t4", max_new_tokens=12, temperature=1.0, seed=4).token_ids) == 12


def split_last_layers(model, elsewhere: torch.device) -> None:
    """Put the final norm and the output layer on ``elsewhere`` (as device_map="auto" may): the hidden
    state is moved there on the way in, so the logits and the recorded features come back from there."""
    model.model.norm.to(elsewhere)
    model.lm_head.to(elsewhere)
    model.model.norm.register_forward_pre_hook(lambda module, args: tuple(arg.to(elsewhere) for arg in args))


def test_target_split_like_device_map_auto(test_device):
    target, independent = on_device(tiny_pair(scale=6.0, draft_noise=0.2, eos_token_id=63), test_device)
    reference = {tuple(prompt): run(Autoregressive(), target, independent, prompt, max_new_tokens=16).token_ids
                 for prompt in PROMPTS}
    split_last_layers(target.model, other_device(test_device))
    head = random_head_drafter(target.model, target.vocab_size, seed=0, scale=0.5)
    for drafter, prompt in itertools.product((independent, head), PROMPTS):
        for decoder in (FixedSpeculative(4), Pacer(2, 8, 0.3, ConfidencePreVerifier(), "submit")):
            assert run(decoder, target, drafter, prompt, max_new_tokens=16).token_ids == reference[tuple(prompt)]
        particles = run(SMC(4, 3, ess_threshold=1.0), target, drafter, prompt, max_new_tokens=12, temperature=1.0, seed=1)
        assert 0 < len(particles.token_ids) <= 12


def test_graphed_engine_on_the_device(test_device, monkeypatch):
    """The graphed engine (PACER_GRAPHED=1) returns AR's greedy tokens on the device, and on CUDA every call shape
    of the run was captured as a graph (none fell back to eager: the reason is in the message if one did)."""
    from pacer_core import graphed

    monkeypatch.setenv(graphed.GRAPHED_ENV, "1")
    target, drafter = on_device(tiny_pair(scale=6.0, draft_noise=0.2, eos_token_id=63), test_device)
    for prompt in PROMPTS:
        reference = run(Autoregressive(), target, drafter, prompt, max_new_tokens=16).token_ids
        for decoder in (FixedSpeculative(4), Pacer(2, 8, 0.3, ConfidencePreVerifier(), "submit")):
            assert run(decoder, target, drafter, prompt, max_new_tokens=16).token_ids == reference, decoder.info()
    engine = graphed.engine_for(target.model)
    if test_device.type == "cuda":
        assert engine.fallback_reason is None, engine.fallback_reason
        assert engine.captures > 0 and graphed.engine_for(drafter.model).captures > 0, engine.describe()
    else:
        assert "eager" in engine.describe()


@pytest.mark.slow
def test_device_check_dry_run(tmp_path):
    """scripts/device_check.sh --dry-run: the tier on the CPU, then the per-step benchmark with tiny shapes."""
    environment = os.environ | {"PYTHON": sys.executable, "DEVICE_CHECK_OUT": str(tmp_path),
                                "OMP_WAIT_POLICY": "PASSIVE"}
    completed = subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh"), "--dry-run"], cwd=ROOT,
                               env=environment, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert {row["method"] for row in report["rows"]} == {"ar", "fixed", "pacer", "smc"}
    for row in report["rows"]:
        assert row["steps"] > 0 and 0.0 <= row["overhead"] <= 1.0
    assert "overhead" in completed.stdout and "passed" in completed.stdout
    split = json.loads((tmp_path / "split" / "gpu_step_split.json").read_text())
    assert [row["eager_ms"] > 0 and row["sampled_ms"] > 0 for row in split["rows"]] == [True]
    payoff = json.loads((tmp_path / "payoff" / "graphed_payoff.json").read_text())
    assert payoff["peer"]["same_tokens"] and len(payoff["expected"]) == 4
    assert completed.stdout.count("passed") >= 2          # the tier eager, then with the graphed engine
