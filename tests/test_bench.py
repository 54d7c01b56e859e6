"""The benchmark CLI on a tiny saved pair: parses methods, runs interleaved, writes json/csv/md."""
import json

import pytest

from pacer_core import SettingsError
from pacer_core.bench import main
from pacer_core.bench_report import loglik_gap_interval
from pacer_core.methods import parse_method
from test_models import WORDS, save_model, word_tokenizer
from pacer_core.testing.tiny import noisy_copy, tiny_llama


def test_parse_method():
    assert parse_method("fixed:4").overrides == {"gamma": 4}
    assert parse_method("smc:8:4").overrides == {"n_particles": 8, "draft_len": 4}
    assert parse_method("smc:8:4:0.5").overrides == {"n_particles": 8, "draft_len": 4, "draft_temperature": 0.5}
    assert parse_method("pacer:2:8:0.4").overrides == {"block_size": 2, "max_draft_len": 8, "threshold": 0.4}
    row = parse_method("pacer:1:8+phrase_len=6+stop_rule=cost@small")
    assert row.overrides == {"block_size": 1, "max_draft_len": 8, "phrase_len": 6, "stop_rule": "cost"}
    assert row.drafter == "small" and row.label == "pacer:1:8+phrase_len=6+stop_rule=cost@small"
    with pytest.raises(SettingsError):
        parse_method("fixed:x")


def saved_pair_and_prompts(tmp_path):
    tokenizer = word_tokenizer(WORDS)
    target = tiny_llama(64, seed=0)
    target_dir = save_model(tmp_path / "target", target, tokenizer)
    draft_dir = save_model(tmp_path / "draft", noisy_copy(target, 0.2, 1), tokenizer)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"p{i}", "category": c, "prompt": f"w{i} w{i + 1}"})
                                 for i, c in enumerate(["chat", "code", "math", "story"])))
    return target_dir, draft_dir, prompts


def test_bench_runs_end_to_end(tmp_path, capsys):
    target_dir, draft_dir, prompts = saved_pair_and_prompts(tmp_path)
    out = tmp_path / "out"
    code = main(["--methods", "ar,hf,hf-assisted:3,fixed:3,fixed:dyn:2,pacer,oracle", "--prompts", str(prompts),
                 "--max-new-tokens", "12", "--repeats", "2", "--target", target_dir, "--draft", draft_dir,
                 "--device", "cpu", "--dtype", "float32", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    rows = {row["method"]: row for row in report["methods"]}
    assert set(rows) == {"ar", "hf", "hf-assisted:3", "fixed:3", "fixed:dyn:2", "pacer", "oracle"}
    assert rows["ar"]["speedup_vs_ar"] == 1.0 and rows["ar"]["tau"] == 1.0
    assert rows["fixed:3"]["speedup_vs_fixed"] == 1.0                 # the schedule's row is not a fixed length
    assert rows["fixed:dyn:2"]["texts"] == rows["ar"]["texts"]
    assert rows["fixed:dyn:2"]["settings"]["gamma_schedule"] == "dynamic"
    assert len(rows["pacer"]["prompt_seconds"]) == len(rows["pacer"]["prompt_tokens"]) == 4
    assert sum(rows["pacer"]["prompt_tokens"]) == rows["pacer"]["new_tokens"]
    assert rows["pacer"]["speedup_vs_fixed"] == pytest.approx(rows["pacer"]["tokens_per_s"] / rows["fixed:3"]["tokens_per_s"])
    assert rows["fixed:3"]["texts"] == rows["ar"]["texts"] == rows["hf"]["texts"]
    assert (out / "results.csv").read_text().startswith("method,tau,alpha")
    assert "| fixed:3 |" in (out / "report.md").read_text()


def test_bench_bad_prompt_file_is_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(["--prompts", str(bad), "--methods", "ar"]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_loglik_gap_interval():
    reference = [(-10.0, 10), (-30.0, 10), (-20.0, 10)]             # mean -2.0 per token
    gap, low, high = loglik_gap_interval(reference, reference)
    assert gap == low == high == 0.0
    worse = [(-11.0, 10), (-33.0, 10), (-22.0, 10)]                 # every output 10% less likely
    gap, low, high = loglik_gap_interval(worse, reference)
    assert gap == pytest.approx(10.0) and low == pytest.approx(10.0) and high == pytest.approx(10.0)
    mixed = [(-10.0, 10), (-36.0, 10), (-20.0, 10)]                 # one output much worse: a wide interval
    gap, low, high = loglik_gap_interval(mixed, reference)
    assert gap == pytest.approx(10.0) and low < gap < high and low >= 0.0
    with pytest.raises(ValueError):
        loglik_gap_interval(worse[:2], reference)


def test_bench_loglik_reports_the_gap_to_ar(tmp_path):
    target_dir, draft_dir, prompts = saved_pair_and_prompts(tmp_path)
    out = tmp_path / "out"
    code = main(["--methods", "ar,fixed:3,smc:4:2", "--prompts", str(prompts), "--max-new-tokens", "8",
                 "--temperature", "1.0", "--repeats", "2", "--loglik", "--target", target_dir, "--draft", draft_dir,
                 "--device", "cpu", "--dtype", "float32", "--out", str(out)])
    assert code == 0
    rows = {row["method"]: row for row in json.loads((out / "results.json").read_text())["methods"]}
    assert rows["ar"]["loglik_gap_vs_ar_pct"] == 0.0 and rows["ar"]["loglik_gap_ci95"] == "[0.0, 0.0]"
    for label in ("fixed:3", "smc:4:2"):
        assert rows[label]["target_loglik_per_token"] < 0
        low, high = map(float, rows[label]["loglik_gap_ci95"].strip("[]").split(","))
        assert low <= rows[label]["loglik_gap_vs_ar_pct"] <= high
    assert "loglik_gap_ci95" in (out / "results.csv").read_text().splitlines()[0]
    assert "95% bootstrap interval" in (out / "report.md").read_text()
    assert rows["smc:4:2"]["proposal_kl_per_token"] > 0 and "proposal_kl_per_token" not in rows["fixed:3"]
    assert "Chatterjee & Diaconis" in (out / "report.md").read_text()


def test_report_flags_a_greedy_row_that_differs_from_ar():
    from pacer_core.bench_report import identity_flags
    assert identity_flags([{"method": "ar", "same_as_ar": "12/12"}, {"method": "fixed:3", "same_as_ar": "12/12"}]) == []
    flags = identity_flags([{"method": "ar", "same_as_ar": "12/12"}, {"method": "pacer", "same_as_ar": "9/12"}])
    assert len(flags) == 2 and "pacer" in flags[1] and "3 of 12" in flags[1]


def test_step_tokens_are_what_the_steps_emitted_and_their_expectation_over_the_accept_draws():
    from pacer_core.bench_report import step_tokens
    from pacer_core.events import StepEvent, TokenRecord

    def step(accept_probs, accepted):
        tokens = [TokenRecord(token_id=1, text="a", state="accepted", accept_prob=prob) for prob in accept_probs]
        return StepEvent(method="fixed", step=0, tokens=tokens + [TokenRecord(2, "b", "bonus")], emitted_ids=[],
                         emitted_text="", n_drafted=len(accept_probs), n_accepted=accepted, draft_seconds=0.0,
                         verify_seconds=0.0, total_new_tokens=0)

    realized, expected = step_tokens([step([0.5, 0.5], 2), step([1.0, 0.0, 1.0], 1)])
    assert realized == 3 + 2 and expected == pytest.approx((1 + 0.5 + 0.25) + 2)
    assert step_tokens([]) is None


def test_a_sampled_bench_run_reports_luck_free_speeds_and_a_greedy_one_has_no_luck(tmp_path):
    target_dir, draft_dir, prompts = saved_pair_and_prompts(tmp_path)
    for temperature in ("0.7", "0"):
        out = tmp_path / f"out-{temperature}"
        assert main(["--methods", "ar,fixed:2,fixed:4,pacer", "--prompts", str(prompts), "--max-new-tokens", "12",
                     "--repeats", "2", "--temperature", temperature, "--target", target_dir, "--draft", draft_dir,
                     "--device", "cpu", "--dtype", "float32", "--out", str(out)]) == 0
        rows = {row["method"]: row for row in json.loads((out / "results.json").read_text())["methods"]}
        assert rows["ar"]["tokens_per_s_luck_free"] is None
        for method in ("fixed:2", "fixed:4", "pacer"):
            row = rows[method]
            expected_ratio = row["expected_step_tokens"] / row["step_tokens"]
            assert row["tokens_per_s_luck_free"] == pytest.approx(row["tokens_per_s"] * expected_ratio)
            if temperature == "0":
                assert expected_ratio == pytest.approx(1.0)
        assert max(rows[m]["speedup_vs_fixed_luck_free"] for m in ("fixed:2", "fixed:4")) == pytest.approx(1.0)
        assert "tokens_per_s_luck_free" in (out / "report.md").read_text()
