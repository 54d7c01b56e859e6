"""benchmarks/ui_overhead.py in its tiny form: one repeat of 8 new tokens on the embedded pair, through the page's
Run handler and headless, so a change to the session or the handlers cannot leave the benchmark broken."""
from __future__ import annotations

import json

import pytest
from script_module import run_script


@pytest.mark.embedded
def test_ui_overhead_runs_in_its_tiny_form(tmp_path):
    out = tmp_path / "ui_overhead.json"
    run_script("benchmarks/ui_overhead.py", "--repeats", "1", "--max-new-tokens", "8", "--out", str(out))
    report = json.loads(out.read_text())
    assert report["settings"]["max_new_tokens"] == 8
    assert set(report["new_tokens"]) >= {"fixed", "pacer", "smc", "ar"}
    assert all(0 < count <= 8 for count in report["new_tokens"].values())
