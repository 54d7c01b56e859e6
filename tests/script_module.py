"""Load one of the project's scripts (benchmarks/*.py, scripts/*.py: scripts, not a package) as a module, for the tests
of their arithmetic and their tiny forms."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str):
    """The module of ``ROOT / relative_path``, executed once per call (e.g. ``load_script("benchmarks/scaling.py")``)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
