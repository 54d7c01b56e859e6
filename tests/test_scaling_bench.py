"""benchmarks/scaling.py's arithmetic (steps from generator calls, speed at the marks, the step profile, the
report and the figure) on hand-made records, and one tiny-pair run through the Run handler."""
from __future__ import annotations

import pytest
from script_module import load_script

from pacer_core import method_table


@pytest.fixture(scope="module")
def scaling():
    return load_script("benchmarks/scaling.py")


class Event:
    def __init__(self, total, draft=0.01, verify=0.02):
        self.total_new_tokens, self.draft_seconds, self.verify_seconds = total, draft, verify


@pytest.mark.pure
def test_steps_take_their_generator_calls_and_the_final_call_joins_the_last_step(scaling):
    events = [Event(3), Event(5), Event(9)]
    calls = [("pacer", 0.5, 1), ("ar", 9.0, 1), ("pacer", 0.1, 2), ("pacer", 0.2, 3), ("pacer", 0.05, 3)]
    records = scaling.step_records("pacer", events, calls)
    assert [r["start"] for r in records] == [0, 3, 5] and [r["tokens"] for r in records] == [3, 2, 4]
    assert [round(r["wall_s"], 6) for r in records] == [0.5, 0.1, 0.25]


@pytest.mark.pure
def test_marks_profile_and_speedup(scaling):
    records = [{"start": s, "tokens": 2, "draft_s": 0.01, "verify_s": 0.02, "wall_s": 0.04} for s in range(0, 520, 2)]
    marks = scaling.at_marks(records)
    assert marks["64"]["tokens"] == 64 and marks["64"]["seconds"] == pytest.approx(32 * 0.04)
    assert marks["512"]["tokens_per_s"] == pytest.approx(50.0)
    profile = scaling.profile(records)
    assert set(profile) == {"0-64", "64-256", "256-512"}
    assert profile["0-64"]["other_ms"] == pytest.approx(10.0) and profile["0-64"]["tokens_per_step"] == 2


@pytest.mark.pure
def test_report_and_figure_from_saved_results(scaling, tmp_path):
    def method(rate):
        marks = {str(m): {"tokens": m, "seconds": m / rate, "tokens_per_s": rate, "speedup_vs_ar": rate / 10}
                 for m in scaling.MARKS}
        return {"marks": marks, "profile": {"0-64": {"steps": 3, "draft_ms": 1, "verify_ms": 2, "other_ms": 0.5,
                                                     "tokens_per_step": 1.5}}, "first_eos": None}
    run = {"id": "p", "category": "prompt-50", "prompt_tokens": 60, "wall_s": 10.0, "model_s": 9.5, "render_s": 0.5,
           "render_overhead": 0.05, "updates": 40, "baseline_rss_mb": 900, "peak_rss_mb": 1000,
           "methods": {"ar": method(10), "fixed": method(11), "pacer": method(12), "smc": method(15)}}
    report = {"started": "now", "machine": {"pair": "tiny", "threads": 2}, "runs": [run],
              "settings": {"prompts": "x.jsonl", "max_new_tokens": 512, "ignore_eos": True, "decode": {}}}
    (tmp_path / "ui-overhead-48.json").write_text('{"settings": {"max_new_tokens": 48}, "render_overhead": 0.03}')
    scaling.write_outputs(tmp_path, report, str(tmp_path / "figure.svg"))
    text = (tmp_path / "report.md").read_text()
    assert "| prompt-50 | 60 | PACER | 12.00 | 1.20× |" in text
    svg = (tmp_path / "figure.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 4      # 3 speedup lines + the overhead line


def test_one_tiny_run_through_the_handler(scaling):
    from pacer_core.testing.tiny import tiny_pair
    from pacer_core.ui.page_types import AppContext

    target, drafter = tiny_pair(eos_token_id=3)
    target = scaling.without_stops(target)
    context = AppContext(target, drafter)
    result = scaling.run_prompt(context, {"id": "tiny", "prompt": "t1 t2 t3"}, 70, {3})
    for name in method_table.method_keys():
        row = result["methods"][name]
        assert row["new_tokens"] == 70 and set(row["marks"]) == {"64"}, name
        assert row["marks"]["64"]["speedup_vs_ar"] > 0
        assert sum(r["tokens"] for r in row["steps"]) >= 70
    assert 0 < result["render_s"] < result["wall_s"] and result["peak_rss_mb"] > 0
