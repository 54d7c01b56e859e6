"""A Hugging Face Space's build of this repository (tests/test_space_build.py), startable in the background.

The Gradio SDK's steps alone: the repository's files copied to a new folder, packages.txt, pre-requirements.txt
when present, requirements.txt, then gradio at the front matter's sdk_version with uvicorn and spaces, into a
fresh venv with a fresh pip cache (never setup.sh).

Most of the build is llama-cpp-python compiled from source (~7 min on a quiet 2-core machine). When the full suite
runs, conftest starts the build as the session begins, in a child at the scheduler's idle class
(``SCHED_IDLE``): it takes only the CPU time no test wants, the second core during the many one-thread tests, so
its minutes mostly vanish into the suite instead of being added to it, and it cannot slow a timed test beyond what
an idle-class neighbour does. The test then waits for it; run alone, the test builds in the foreground."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_LIMIT_S = 2400        # the llama-cpp-python build dominates: 5-9 min on a quiet 2-core machine
TEST_ID = "tests/test_space_build.py::test_a_space_built_from_this_repository_serves_the_default_example"


def front_matter() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("---\n")[1]
    pairs = (line.split(": ", 1) for line in block.strip().splitlines())
    return {key: value.strip().strip('"') for key, value in pairs}


def requirement_pin(name: str) -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        match = re.match(rf"{re.escape(name)}==(\S+)", line)
        if match:
            return match.group(1)
    raise AssertionError(f"requirements.txt pins no {name}")


def repository_copy(destination: Path) -> Path:
    """What a Space receives: the files git tracks (and new ones it does not ignore), nothing built here."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def missing_debian_packages(app: Path) -> list[str]:
    listed = app / "packages.txt"
    names = listed.read_text().split() if listed.exists() else []
    return [name for name in names if subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True,
                                                     text=True).stdout != "install ok installed"]


class BuildSkipped(Exception):
    """The build cannot run on this machine (what it lacks is the message)."""


def idle_class() -> None:
    """In a child before it runs its command: the scheduler's idle class, inherited by everything it starts, and
    the lowest priority (nice 19), so its CPU time is counted as niced work, which a page's timing turn does not
    wait out (pacer_core/ui/settle.py)."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    os.nice(19)


def run_step(command: list[str], log, env: dict, cwd: Path, idle: bool, children: list) -> None:
    """``command`` to its end in a session of its own (``children`` holds it meanwhile, for
    ``SpaceBuild.stop_and_remove``)."""
    log.write(f"\n$ {' '.join(command)}\n")
    log.flush()
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True,
                             preexec_fn=idle_class if idle else None)
    children.append(child)
    try:
        returncode = child.wait(timeout=BUILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, 9)
        raise
    finally:
        children.remove(child)
    log.write(f"[{time.monotonic() - started:.0f} s]\n")
    log.flush()
    assert returncode == 0, f"{' '.join(command)} exited with {returncode}"


def build_space_venv(app: Path, work: Path, log, idle: bool = False, children: list | None = None) -> Path:
    """The Gradio SDK's build, each step's command and seconds in the log; the venv's python."""
    children = [] if children is None else children
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PACER_", "VIRTUAL_ENV"))}
    env |= {"PIP_CACHE_DIR": str(work / "pip-cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    missing = missing_debian_packages(app)
    if missing:
        if os.geteuid() != 0:
            raise BuildSkipped(f"packages.txt lists {missing}, not installed here, and apt-get needs root")
        run_step(["apt-get", "install", "-y", "-qq", *missing], log, env | {"DEBIAN_FRONTEND": "noninteractive"},
                 app, idle, children)
    python = work / "venv" / "bin" / "python"
    run_step([sys.executable, "-m", "venv", str(work / "venv")], log, env, app, idle, children)
    run_step([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], log, env, app, idle, children)
    for requirements in ("pre-requirements.txt", "requirements.txt"):
        if (app / requirements).exists():
            run_step([str(python), "-m", "pip", "install", "-r", requirements], log, env, app, idle, children)
    run_step([str(python), "-m", "pip", "install", f"gradio[oauth]=={front_matter()['sdk_version']}",
              "uvicorn>=0.14.0", "spaces"], log, env, app, idle, children)
    return python


class SpaceBuild:
    """One Space build in ``work``: the repository copied at once, the venv built on a thread (``start``) or in the
    caller (``wait`` without a start). ``wait`` returns the venv's python, raises what the build raised."""

    def __init__(self, work: Path, idle: bool):
        self.work, self.idle = work, idle
        self.app = repository_copy(work / "app")
        self.log_path = work / "space.log"
        self.python: Path | None = None
        self.error: BaseException | None = None
        self.build_s = 0.0
        self._thread: threading.Thread | None = None
        self._children: list[subprocess.Popen] = []

    def _build(self) -> None:
        started = time.monotonic()
        try:
            with open(self.log_path, "w") as log:
                self.python = build_space_venv(self.app, self.work, log, self.idle, self._children)
        except BaseException as error:  # noqa: BLE001 - handed to the test that waits
            self.error = error
        finally:
            self.build_s = time.monotonic() - started

    def start(self) -> "SpaceBuild":
        self._thread = threading.Thread(target=self._build, name="space-build", daemon=True)
        self._thread.start()
        return self

    def wait(self) -> Path:
        if self._thread is None:
            self._build()
        else:
            self._thread.join()
        if self.error is not None:
            raise self.error
        return self.python

    def stop_and_remove(self) -> None:
        """A build still going when the session ends is stopped (its step's whole process group), its folder
        removed."""
        for child in list(self._children):
            try:
                os.killpg(child.pid, 9)
            except ProcessLookupError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=30)
        shutil.rmtree(self.work, ignore_errors=True)


SPACE_BUILD = pytest.StashKey["SpaceBuild"]()      # the session's background build, on its config's stash


def background_build() -> SpaceBuild:
    """The build started now at the idle class, in a temporary folder of its own (``stop_and_remove`` removes it)."""
    return SpaceBuild(Path(tempfile.mkdtemp(prefix="pacer-space-build-")), idle=True).start()
