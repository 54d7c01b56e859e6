"""benchmarks/graphed_payoff.py: its arithmetic (the expected speedup and the best γ per acceptance), the twin pair's
agreement by construction, and its dry form end to end on the CPU (every row runs, the twins accept every draft,
our greedy fixed:4 returns transformers' assisted generation's tokens)."""
from __future__ import annotations

import json

import pytest
import torch
from script_module import load_script


@pytest.fixture(scope="module")
def payoff():
    return load_script("benchmarks/graphed_payoff.py")


@pytest.mark.pure
def test_expected_speedup_is_leviathans_formula(payoff):
    # α = 0.8, γ = 4: (1 - 0.8^5) / 0.2 = 3.3616 tokens a pass; the pass costs 4 * 0.25 + 1.2 = 2.2 AR steps
    assert payoff.expected_speedup(0.8, 4, 0.25, 1.2) == pytest.approx(3.3616 / 2.2)
    assert payoff.expected_speedup(1.0, 4, 0.25, 1.0) == pytest.approx(5 / 2.0)        # α = 1: γ + 1 tokens
    table = payoff.best_gamma_table(0.1, {1: 1.0, 2: 1.0, 4: 1.05, 8: 1.2}, alphas=(0.6, 0.9))
    assert [row["best_gamma"] for row in table] == [2, 8]      # cheap drafts: a longer γ pays as α grows
    assert table[1]["speedup"] == pytest.approx(payoff.expected_speedup(0.9, 8, 0.1, 1.2))


def test_twins_compute_the_same_logits(payoff):
    torch.manual_seed(0)
    target, drafter = payoff.build_pair(True, True, torch.device("cpu"), torch.float32)
    tokens = torch.randint(target.vocab_size, (1, 12))
    with torch.no_grad():
        target_logits = target.model(input_ids=tokens).logits
        draft_logits = drafter.model(input_ids=tokens).logits
    assert torch.allclose(target_logits, draft_logits, rtol=1e-4, atol=1e-3)
    assert torch.equal(target_logits.argmax(-1), draft_logits.argmax(-1))
    assert draft_logits.softmax(-1).max(-1).values.mean() > 0.5         # as confident as a trained draft


@pytest.mark.pure
def test_a_failing_part_is_recorded_and_the_rest_stands(payoff):
    errors = {}
    assert payoff.attempt(errors, "peer", lambda: 1 / 0) is None
    assert payoff.attempt(errors, "costs", lambda value: value, 3) == 3
    assert errors == {"peer": "ZeroDivisionError: division by zero"}


def test_graphed_payoff_dry_run(payoff, tmp_path, capsys):
    assert payoff.main(["--dry", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "graphed_payoff.json").read_text())
    labels = [row["label"] for row in report["twin_rows"]]
    assert labels == ["ar", "ar eager", "fixed:2", "fixed:4", "fixed:8", "pacer"]
    assert [row["label"] for row in report["random_rows"]] == ["ar T=1", "smc:4:4 T=1", "smc:8:8 T=1"]
    for row in report["twin_rows"]:
        assert row["tokens_per_s"] > 0 and (row["alpha"] is None or row["alpha"] == 1.0)
    assert report["peer"]["same_tokens"] is True and report["errors"] == {}
    assert len(report["bars"]) == 7 and all(row["median_step_ms"] >= 0 for row in report["random_rows"])
    assert report["costs"]["c"] > 0 and sorted(map(int, report["costs"]["v"])) == list(range(1, 9))
    assert [row["alpha"] for row in report["expected"]] == [0.6, 0.7, 0.8, 0.9]
    summary = (tmp_path / "summary.txt").read_text()
    assert "expected speedup over graphed AR" in summary and "same tokens as our fixed:4: yes" in summary
    assert "issue 52's bars" in summary
