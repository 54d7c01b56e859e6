"""The library (pacer_core without pacer_core.ui) imports and decodes without gradio or plotly installed,
as on a GPU machine that has torch, transformers and pandas but not the UI's packages.

A fresh interpreter gets an import hook that makes ``import gradio`` / ``import plotly`` (and their
submodules) fail as if they were not installed; it then imports the public API and the CLIs' modules and
runs every decoder on a tiny random Llama pair; last, importing the UI must fail on gradio or plotly."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import importlib.abc
    import sys

    BLOCKED = ("gradio", "plotly")

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    for blocked in BLOCKED:
        try:
            __import__(blocked)
        except ImportError:
            pass
        else:
            raise SystemExit(f"the hook failed to block {blocked}")

    import pacer_core
    from pacer_core import generate, load_target, stream
    import pacer_core.analysis, pacer_core.bench, pacer_core.decoders.smc, pacer_core.drafters.feature_head
    import pacer_core.training.preverifier

    import torch
    torch.set_num_threads(1)
    from pacer_core.testing.tiny import tiny_pair

    pair, drafter = tiny_pair(scale=4.0)
    for method, temperature in (("ar", 0.0), ("fixed", 0.0), ("pacer", 0.8), ("smc", 0.8)):
        result = generate(pair, drafter, method, "t3 t4 t5", max_new_tokens=8, temperature=temperature, seed=1)
        assert len(result.token_ids) == 8, (method, result.token_ids)
    items = list(stream(pair, drafter, "fixed", "t1 t2", max_new_tokens=4))
    assert items[-1].kind == "result"
    loaded = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED and sys.modules[name])
    assert not loaded, loaded
    print("library ok without", ", ".join(BLOCKED))
""")


UI_CHECK = textwrap.dedent("""
    try:
        import pacer_core.ui.layout
    except ImportError as missing:
        print("ui needs", missing.name)
    else:
        print("ui imported")
""")


def child_environment(*paths) -> dict:
    return os.environ | {"PYTHONPATH": os.pathsep.join(str(path) for path in paths), "OMP_WAIT_POLICY": "PASSIVE"}


@pytest.fixture(scope="module")
def child_run():
    """One fresh interpreter (torch and transformers load once, ~5 s): the library checks, then the UI import."""
    return subprocess.run([sys.executable, "-c", CHILD + UI_CHECK], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=child_environment(ROOT, ROOT / "tests"))


@pytest.mark.slow
def test_library_imports_and_runs_without_gradio_or_plotly(child_run):
    assert child_run.returncode == 0, child_run.stdout[-2000:] + child_run.stderr[-4000:]
    assert "library ok without gradio, plotly" in child_run.stdout


def test_the_ui_is_what_needs_gradio(child_run):
    """The hook really blocks: importing the UI package under it (after the library ran) fails on gradio or plotly."""
    assert child_run.returncode == 0, child_run.stderr[-4000:]
    assert "ui needs gradio" in child_run.stdout or "ui needs plotly" in child_run.stdout
