"""benchmarks/ui_overhead.py in its tiny form: one repeat of 8 new tokens on the embedded pair, through the page's
Run handler and headless, so a change to the session or the handlers cannot leave the benchmark broken."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.embedded
def test_ui_overhead_runs_in_its_tiny_form(tmp_path):
    out = tmp_path / "ui_overhead.json"
    completed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ui_overhead.py"), "--repeats", "1",
                                "--max-new-tokens", "8", "--out", str(out)], cwd=ROOT, capture_output=True,
                               text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["settings"]["max_new_tokens"] == 8
    assert set(report["new_tokens"]) >= {"fixed", "pacer", "smc", "ar"}
    assert all(0 < count <= 8 for count in report["new_tokens"].values())
