"""The benchmark scripts that had no test of their own, each run once in its tiny form (one repeat, a prompt or two,
a few new tokens) as a child process on the embedded pair, so a change elsewhere cannot leave one of them broken.
Each test checks what the script wrote (or printed), not only that it exited 0."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from script_module import ROOT, run_script, run_script_report


@pytest.mark.embedded
def test_atlas_overhead_runs_in_its_tiny_form(tmp_path):
    """Two prompts (so the plain/atlas order flips once), one repeat of 8 new tokens."""
    prompts = tmp_path / "two.jsonl"
    prompts.write_text("\n".join((ROOT / "assets/prompts/atlas.jsonl").read_text().splitlines()[:2]) + "\n")
    out = tmp_path / "atlas-overhead"
    report = run_script_report("benchmarks/atlas_overhead.py", out, "--prompts", str(prompts), "--repeats", "1",
                               "--max-new-tokens", "8", report=out / "overhead.json")
    assert report["max_new_tokens"] == 8 and report["method"] == "pacer" and report["drafter"] == "small"
    [repeat] = report["repeats"]
    assert len(repeat["paired_ratios"]) == 2 and all(ratio > 0 for ratio in repeat["paired_ratios"])
    assert 0 < repeat["tokens"] <= 16
    assert repeat["record_s"] > 0, "the stopwatch around runner.prompt_record timed nothing"
    assert 0 <= report["accepted"] <= report["drafted"]
    assert (out / "report.md").read_text().startswith("# Atlas overhead")


@pytest.mark.embedded
def test_draft_call_cost_runs_in_its_tiny_form(tmp_path):
    out = tmp_path / "draft-call-cost.json"
    report = run_script_report("benchmarks/draft_call_cost.py", out, "--repeats", "1")
    assert report["repeats"] == 1
    assert set(report["median_microseconds"]) == {"llama_decode", "row copy", "logger reset", "greedy math before",
                                                  "greedy math after", "token features"}
    assert report["median_microseconds"]["llama_decode"] > 0
    assert set(report["beyond_llama_decode_microseconds"]) == {"before", "after", "pacer before", "pacer after"}


@pytest.mark.embedded
def test_draft_call_profile_runs_in_its_tiny_form(tmp_path):
    """One length (the shortest, 40 prompt tokens), one repeat, 8 new tokens, one step alone."""
    out = tmp_path / "draft-call-profile"
    summary = run_script_report("benchmarks/draft_call_profile.py", out, "--lengths", "40", "--tokens", "8",
                                "--repeats", "1", "--alone-repeats", "1", report=out / "profile.json")
    assert summary["tokens"] == 8
    [round_] = summary["rounds"]
    assert round_["length"] == 40 and round_["repeat"] == 0 and round_["prompt_tokens"] > 0
    assert round_["identical"] is True, "greedy fixed SD with the gguf drafter decoded other tokens than AR"
    assert round_["draft step alone"]["calls"] == 1 and round_["target step alone"]["calls"] == 1
    assert round_["draft first feed"]["calls"] == 1


@pytest.mark.embedded
def test_draft_files_runs_in_its_tiny_form(tmp_path):
    """One prompt, 4 tokens, one step: the shipped file, one requantized from the target (its own types: every
    greedy token the shipped file's) and a short-head copy, and the target's feeds of 1 and 2 rows."""
    out = tmp_path / "draft-files"
    report = run_script_report("benchmarks/draft_files.py", out, "--variants", "q4_1,short-head-32768", "--limit", "1",
                               "--tokens", "4", "--steps", "1", "--rows", "1,2", report=out / "results.json")
    assert set(report["files"]) == {"shipped", "q4_1", "short-head-32768"} and report["positions"] == 4
    for row in report["files"].values():
        assert 0 <= row["agreement"] <= 1 and row["step_ms"] > 0 and row["step_over_target_step"] > 0
    assert report["files"]["q4_1"]["agreement"] == report["files"]["shipped"]["agreement"]
    assert set(report["target_feed_ms"]) == {"1", "2"} and all(ms > 0 for ms in report["target_feed_ms"].values())
    assert (out / "report.md").read_text().startswith("# Draft files built from the target")


@pytest.mark.embedded
def test_drafter_step_costs_runs_in_its_tiny_form():
    """The gguf drafter only, one round; the script prints, it writes no file."""
    completed = run_script("benchmarks/drafter_step_costs.py", "--drafters", "gguf", "--rounds", "1")
    lines = re.findall(r"^round (\d+): (\S+): draft call ([\d.]+) ms, target step ([\d.]+) ms, c = ([\d.]+)$",
                       completed.stdout, flags=re.MULTILINE)
    assert len(lines) == 1, completed.stdout
    round_index, name, draft_ms, target_ms, _ = lines[0]
    assert (round_index, name) == ("1", "gguf")
    assert float(draft_ms) > 0 and float(target_ms) > 0


@pytest.mark.embedded
def test_gguf_split_runs_in_its_tiny_form(tmp_path):
    """Both default methods (fixed:8 and pacer) on one prompt, 8 new tokens."""
    out = tmp_path / "gguf-split.json"
    report = run_script_report("benchmarks/gguf_split.py", out, "--methods", "fixed:8,pacer", "--limit", "1",
                               "--max-new-tokens", "8")
    assert report["limit"] == 1 and report["temperature"] == 0.0
    assert [row["method"] for row in report["rows"]] == ["fixed:8", "pacer"]
    for row in report["rows"]:
        assert 0 < row["new_tokens"] <= 8 and row["verify_passes"] >= 1 and row["drafted_tokens"] >= 0
        assert set(row["per_drafted_token_ms"]) == {"llama_cpp", "rest"}
        assert set(row["per_verify_ms"]) == {"target_forward", "rest"}
        assert row["per_verify_ms"]["rest"] >= 0          # the prefill at setup is not inside any verify pass
        assert row["prefill_forward_ms"] > 0


@pytest.mark.embedded
def test_llama_build_flags_runs_in_its_dry_form(tmp_path):
    """The project's build against itself: the installed llama_cpp's folder as the "other" build, one repeat."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        pytest.skip("llama_cpp (llama-cpp-python) is not installed")
    site = Path(spec.origin).resolve().parent.parent
    out = tmp_path / "llama-build-flags.json"
    report = run_script_report("benchmarks/llama_build_flags.py", out, "--other", str(site), "--label-other", "itself",
                               "--repeats", "1")
    assert report["repeats"] == 1 and report["file"].endswith(".gguf")
    assert set(report["median_step_ms"]) == {f"{label} {rows} row(s)" for label in ("project flags", "itself")
                                             for rows in (1, 4)}
    assert all(value > 0 for value in report["median_step_ms"].values())
    assert set(report["ours_over_other"]) == {"1 row(s)", "4 row(s)"}
    assert all(len(values) == 1 for values in report["samples_ms"].values())


@pytest.mark.embedded
def test_pass_costs_runs_in_its_tiny_form(tmp_path):
    """float32 with and without the pre-packed linear layers (where this torch can pack), one repeat."""
    from pacer_core.packed_linear import packing_available

    out = tmp_path / "pass-costs.json"
    report = run_script_report("benchmarks/pass_costs.py", out, "--dtypes", "float32", "--packed", "both",
                               "--repeats", "1")
    assert report["repeats"] == 1 and report["context"] == 60
    labels = ("float32", "float32 packed") if packing_available() else ("float32",)
    assert set(report["medians"]) == {f"{role} {label}" for role in ("target", "draft") for label in labels}
    for by_size in report["medians"].values():
        assert set(by_size) == {"1_token_ms", "2_token_ms", "4_token_ms", "8_token_ms"}
        assert all(value > 0 for value in by_size.values())


@pytest.mark.embedded
def test_host_noise_runs_in_its_tiny_form(tmp_path):
    """One repeat of 4 tokens on one llama.cpp thread, in the child process the full run uses per thread count."""
    out = tmp_path / "host-noise"
    report = run_script_report("benchmarks/host_noise.py", out, "--repeats", "1", "--max-new-tokens", "4",
                               "--threads", "1", "--array-mb", "8", report=out / "results.json")
    [leg] = report["legs"]
    assert leg["threads"] == 1 and leg["same_tokens"]
    [run] = leg["runs"]["ar"]
    assert run["seconds"] > 0 and 0 < run["step_ms_fastest"] <= run["step_ms_median"]
    assert 0.5 < run["cpu_over_wall"] < 1.5, "one llama.cpp thread keeps about one CPU busy"
    for probe in ("memory", "compute"):
        [timed] = leg["runs"][probe]
        assert timed["solo_s"] > 0 and timed["pair_s"] > 0
    assert "| 1 |" in (out / "report.md").read_text()
