"""benchmarks/ar_step_profile.py: the step arithmetic and the table (pure), and its dry form on a tiny GGUF."""

import pytest
from script_module import load_script

profile = load_script("benchmarks/ar_step_profile.py")


@pytest.mark.pure
def test_a_step_is_what_the_run_left_after_its_prefill_over_the_other_tokens():
    assert profile.step_split(2.0, 0.5, 16) == pytest.approx(0.1)
    assert profile.step_split(0.3, 0.3, 1) == 0.0


@pytest.mark.pure
def test_the_table_takes_medians_and_compares_each_step_with_llama_completions():
    samples = {150: {"ours ar": {"prefill": [0.2, 0.3, 0.1], "step": [0.030, 0.020, 0.025]},
                     "engine": {"prefill": [0.2], "step": [0.02]},
                     "plain call, llama.cpp's context": {"prefill": [], "step": []},
                     "llama-completion": {"prefill": [0.1], "step": [0.02]}}}
    table = profile.profile_table(samples)
    assert [row["row"] for row in table] == ["ours ar", "engine", "llama-completion"]
    assert table[0]["prefill_ms"] == pytest.approx(200) and table[0]["step_ms"] == pytest.approx(25)
    assert table[0]["step_over_llama_completion"] == pytest.approx(1.25)
    without_tool = profile.profile_table({40: {"engine": {"prefill": [0.1], "step": [0.01]}}})
    assert without_tool[0]["step_over_llama_completion"] is None


def test_the_dry_form_profiles_a_tiny_gguf(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash setup.sh builds it)")
    assert profile.main(["--tiny", "--lengths", "12", "--tokens", "3", "--repeats", "1", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "| 12 | ours ar |" in report and "| 12 | engine |" in report
    assert "| 12 | plain call, llama.cpp's context |" in report
