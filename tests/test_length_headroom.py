"""benchmarks/length_headroom.py: its arithmetic on steps whose answer is known (pure), and its tiny form on the
embedded pair with the gguf drafter."""
from __future__ import annotations


import pytest
from script_module import load_script, run_script_report

headroom = load_script("benchmarks/length_headroom.py")


def test_prefix_values_are_the_expected_tokens_of_each_cut():
    assert headroom.prefix_values([1.0, 0.5, 0.5]) == [1.0, 2.0, 2.5, 2.75]
    assert headroom.prefix_values([]) == [1.0]


def test_best_length_trades_the_value_against_the_rate_times_the_cost():
    values, costs = [1.0, 2.0, 2.5, 2.75], [1.0, 1.5, 2.0, 2.5]
    assert headroom.best_length(values, costs, rate=0.4) == 3     # the third token (+0.25) is worth its +0.2
    assert headroom.best_length(values, costs, rate=0.5) == 2     # a tie (+0.25 against +0.25): the shorter
    assert headroom.best_length(values, costs, rate=1.5) == 1     # the second token (+0.5) is not worth +0.75
    assert headroom.best_length(values, costs, rate=3.0) == 0


def test_a_policy_that_knows_which_steps_are_easy_beats_every_fixed_length():
    """Half the steps are kept whole, half miss at the first token: the probabilities' policy drafts long on the
    first and nothing on the second; estimates that cannot tell them apart do no better than the best fixed length."""
    easy = {"estimates": [0.5] * 4, "accept_probs": [1.0] * 4}
    hard = {"estimates": [0.5] * 4, "accept_probs": [0.0] * 4}
    steps = [easy, hard]
    step_costs = [1.0 + 0.2 * k for k in range(5)]
    fixed = headroom.fixed_rates(steps, step_costs)
    assert fixed[4] == pytest.approx((5 + 1) / (2 * 1.8))
    knowing, knowing_length = headroom.policy_rate(steps, step_costs, "accept_probs")
    assert knowing == pytest.approx((5 + 1) / (1.8 + 1.0))
    assert knowing_length == 2.0
    blind, _ = headroom.policy_rate(steps, step_costs, "estimates")
    assert blind <= max(fixed.values()) + 1e-12
    found = headroom.headroom(steps, headroom.StepCosts(0.2, verify_slope=0.0), 4, next_accept=0.5)
    assert found["best_fixed"] == 4 and found["probabilities_policy"]["over_best_fixed"] > 1.0


def test_the_cost_rule_drafts_while_the_next_token_pays_for_itself():
    """Costs 1 + 0.5 k, the next token kept with 0.9: after one sure token the rule drafts on; after a token
    estimated at 0.1 the next one cannot pay its half step."""
    costs = headroom.StepCosts(0.5, verify_slope=0.0)
    sure = {"estimates": [1.0, 1.0, 1.0, 1.0], "accept_probs": [1.0] * 4}
    risky = {"estimates": [1.0, 0.1, 1.0, 1.0], "accept_probs": [1.0] * 4}
    assert headroom.cost_rule_lengths([sure, risky], costs, next_accept=0.9) == [4, 2]


def test_calibration_bins_and_slope():
    steps = [{"estimates": [0.2, 0.4, 0.6, 0.8], "accept_probs": [0.1, 0.3, 0.5, 0.7]}]
    found = headroom.calibration(steps, bins=2)
    assert found["slope"] == pytest.approx(1.0)
    assert [b["tokens"] for b in found["bins"]] == [2, 2]
    assert found["bins"][0]["mean_accept_prob"] == pytest.approx(0.2)
    assert headroom.calibration([{"estimates": [0.5, 0.5], "accept_probs": [0.0, 1.0]}])["slope"] is None


@pytest.mark.embedded
def test_length_headroom_runs_in_its_tiny_form(tmp_path):
    out = tmp_path / "headroom"
    report = run_script_report("benchmarks/length_headroom.py", out, "--limit", "1", "--samples", "1",
                               "--max-new-tokens", "16", "--max-draft-len", "3", report=out / "results.json")
    found = report["headroom"]
    assert found["steps"] >= 1 and set(found["fixed"]) == {"1", "2", "3"}
    assert all(len(step["estimates"]) == 3 and all(0.0 <= a <= 1.0 for a in step["accept_probs"])
               for step in report["steps"])
    assert found["probabilities_policy"]["over_best_fixed"] >= found["estimates_policy"]["over_best_fixed"] - 1e-9
    assert "reads min(1, p/q)" in (out / "report.md").read_text()
