"""The gguf drafter's native build is proven in a child process before the app offers it (issue: a llama.cpp
build that dies at its first decode took the whole app down): a build that passes is used, one that dies by a
signal or hangs is left out with the reason, the default drafter moves to the next by the project's rule, and
the library and the bench say the same reason. A test hook (PACER_GGUF_PROOF_CRASH) stands in for a broken
build; the real build is proven on the embedded GGUF."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import torch

from pacer_core.drafters import LoadedDrafters, load_drafter
from pacer_core.drafters.kinds import gguf_unavailable
from pacer_core.llama import proof
from pacer_core.llama.availability import embedded_gguf_unavailable

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash setup.sh builds it)")


@pytest.fixture(autouse=True)
def fresh_proofs(tmp_path, monkeypatch):
    """Each test proves into its own cache and forgets the verdicts earlier tests kept in memory."""
    monkeypatch.setenv("PACER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(proof.CRASH_HOOK, raising=False)
    monkeypatch.setattr(proof, "_VERDICTS", {})


@pytest.fixture(scope="module")
def tiny_gguf_pair(tmp_path_factory):
    """(a tiny pair, what it loaded: its target written as the gguf drafter's file)."""
    from test_gguf_drafter import gguf_of
    from pacer_core.testing.tiny import tiny_pair

    target, drafter = tiny_pair(scale=40)
    target_file = gguf_of(target.model, target.tokenizer, tmp_path_factory.mktemp("gguf"))
    return target, LoadedDrafters.around(drafter, gguf_file=target_file)


@pytest.mark.pure
@pytest.mark.parametrize("number, named", [(signal.SIGILL, "SIGILL (an illegal instruction"),
                                           (signal.SIGSEGV, "SIGSEGV (a segmentation fault)")])
def test_a_crash_is_named_with_its_signal_and_the_rebuild_command(number, named, tmp_path):
    reason = proof.crash_reason(-int(number), tmp_path / "model.gguf", "")
    assert named in reason and "model.gguf" in reason and proof.REBUILD_COMMAND in reason
    assert "exit code 3: boom" in proof.crash_reason(3, tmp_path / "model.gguf", "loading\nboom\n")


def test_the_build_here_passes_its_proof_once_then_from_the_cache(tiny_gguf_pair):
    target, drafters = tiny_gguf_pair
    path = drafters.gguf_file
    assert gguf_unavailable(target, drafters) is None
    verdict = proof.prove(path)
    assert verdict.ok and not verdict.cached                      # proven by the call above, kept in memory
    proof._VERDICTS.clear()
    cached = proof.prove(path)
    assert cached.ok and cached.cached and cached.key == verdict.key
    assert len(list(proof.cache_dir().glob("*.json"))) == 1


@pytest.mark.parametrize("hook, named", [("SIGSEGV", "SIGSEGV"), ("SIGILL", "SIGILL")])
def test_a_build_that_dies_is_left_out_and_the_library_says_why(tiny_gguf_pair, monkeypatch, hook, named):
    target, drafters = tiny_gguf_pair
    monkeypatch.setenv(proof.CRASH_HOOK, hook)
    reason = gguf_unavailable(target, drafters)
    assert reason and f"llama.cpp died with {named}" in reason and proof.REBUILD_COMMAND in reason
    with pytest.raises(ValueError, match=named):
        load_drafter(target, drafters, "gguf")
    assert proof.read_cached(proof.proof_key(proof.Path(drafters.gguf_file))).ok is False
    monkeypatch.delenv(proof.CRASH_HOOK)             # the hook is part of the key: the real build still passes
    assert gguf_unavailable(target, drafters) is None


def test_a_proof_that_hangs_is_stopped_left_out_and_not_cached(tiny_gguf_pair, monkeypatch):
    monkeypatch.setenv(proof.CRASH_HOOK, "HANG")
    monkeypatch.setenv(proof.TIMEOUT_ENV, "3")
    started = time.monotonic()
    reason = gguf_unavailable(*tiny_gguf_pair)
    assert time.monotonic() - started < 30
    assert "did not finish within 3 s" in reason
    assert not list(proof.cache_dir().glob("*.json"))


def test_the_bench_says_the_same_reason_for_at_gguf(tiny_gguf_pair, monkeypatch):
    from pacer_core.bench import load_row_drafters
    from pacer_core.methods import parse_method
    from pacer_core.settings import SettingsError

    monkeypatch.setenv(proof.CRASH_HOOK, "SIGILL")
    with pytest.raises(SettingsError, match="llama.cpp died with SIGILL"):
        load_row_drafters(*tiny_gguf_pair, [parse_method("fixed:3@gguf")], None)


def test_the_default_drafter_moves_on_when_the_embedded_build_dies(monkeypatch):
    from pacer_core import embedded
    from pacer_core.drafters.construction import default_embedded_drafter

    try:
        embedded.find_gguf_file()
    except embedded.EmbeddedModelMissing as missing:
        pytest.skip(str(missing))
    assert embedded_gguf_unavailable() is None
    assert default_embedded_drafter("embedded", torch.device("cpu")) == "gguf"
    monkeypatch.setenv(proof.CRASH_HOOK, "SIGILL")
    assert "SIGILL" in embedded_gguf_unavailable()
    assert default_embedded_drafter("embedded", torch.device("cpu")) == embedded.DEFAULT_EMBEDDED_DRAFTER


def test_the_command_line_prints_one_verdict_line(tiny_gguf_pair, monkeypatch):
    from pacer_core.testing.app_runner import ROOT

    _, drafters = tiny_gguf_pair
    command = [sys.executable, "-m", "pacer_core.llama.proof", "--again", drafters.gguf_file]
    passed = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert passed.returncode == 0 and passed.stdout.strip().startswith("gguf drafter proven"), passed
    monkeypatch.setenv(proof.CRASH_HOOK, "SIGSEGV")
    failed = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert failed.returncode == 1 and failed.stdout.strip().startswith("gguf drafter left out: llama.cpp died "
                                                                       "with SIGSEGV"), failed
