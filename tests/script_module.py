"""Load one of the project's scripts (benchmarks/*.py, scripts/*.py: scripts, not a package) as a module, for the tests
of their arithmetic and their tiny forms."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str):
    """The module of ``ROOT / relative_path``, executed once per call (e.g. ``load_script("benchmarks/scaling.py")``)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(relative_path: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``ROOT / relative_path`` with ``args`` in a child Python from the repository root; assert it exits 0
    (its stderr's tail in the failure)."""
    completed = subprocess.run([sys.executable, str(ROOT / relative_path), *args], cwd=ROOT, capture_output=True,
                               text=True, timeout=timeout)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def run_script_report(relative_path: str, out: Path, *args: str, report: Path | None = None) -> dict:
    """``run_script`` with ``--out out`` after ``args``; the JSON it wrote to ``report`` (default: ``out`` itself,
    for a script whose --out names a file; a folder's results.json otherwise)."""
    run_script(relative_path, *args, "--out", str(out))
    return json.loads((report or out).read_text())
