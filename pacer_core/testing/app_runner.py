"""Start ``python app.py`` in a subprocess on 127.0.0.1 and a free port, and stop it (its whole process group)
after: what the end-to-end tests (tests/app_process.py) and the class load benchmark (benchmarks/class_load.py)
run the app with.

A dead server must not cost a test its whole wait (a browser test waits minutes for a run to finish). Each app
started here is watched by a thread; while a test runs with its watch *armed* (tests/conftest.py arms every
running app around each test's call), the app's death interrupts the main thread within a second with
``AppDied``, naming the exit code (a signal by name) and the tail of the app's log."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
START_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AppStartError(RuntimeError):
    pass


class AppDied(RuntimeError):
    """The app's process ended while a test was using it."""


def exit_text(returncode: int) -> str:
    """``exited with 1`` or ``was killed by SIGSEGV (exit code -11)``."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name} (exit code {returncode})"
        except ValueError:
            pass
    return f"exited with {returncode}"


class RunningApp(str):
    """The app's URL (a str, as the tests use it) with its process, log and a watch for its death."""

    WATCH_PERIOD_S = 0.5

    def __new__(cls, url: str, process: subprocess.Popen, log_path: Path):
        app = super().__new__(cls, url)
        app.process, app.log_path, app.stopping, app.reported = process, log_path, False, False
        return app

    def death(self) -> str | None:
        """None while the process lives; else what a failing test says: how it ended and its log's tail."""
        if self.process.poll() is None:
            return None
        return (f"app.py at {str(self)} {exit_text(self.process.returncode)} while the test was using it; "
                f"its log ends:\n{tail(self.log_path)}")

    def watch(self) -> None:
        """Poll the process; when it dies during an armed test, interrupt the main thread once (SIGUSR1 → AppDied)."""
        while not self.stopping:
            if _WATCH["armed"] and not self.reported and self.process.poll() is not None:
                self.reported = True
                _DEATHS.append(self)
                signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
            time.sleep(self.WATCH_PERIOD_S)


_RUNNING: list[RunningApp] = []
_DEATHS: list[RunningApp] = []
_WATCH = {"armed": False, "handler": False}


def tail(log_path: Path, characters: int = 3000) -> str:
    try:
        return log_path.read_text(errors="replace")[-characters:]
    except OSError:
        return "(no log)"


def _raise_app_died(signum, frame) -> None:
    if _WATCH["armed"] and _DEATHS:
        raise AppDied(_DEATHS.pop().death())


def running_apps() -> list[RunningApp]:
    """The apps started here that have not been stopped."""
    return list(_RUNNING)


@contextlib.contextmanager
def armed_watch():
    """While inside, a running app's death raises AppDied in the main thread within a second (from the main thread
    only; elsewhere a no-op). An app already dead on entry raises at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    for app in running_apps():
        dead = app.death()
        if dead:
            app.reported = True
            raise AppDied(dead)
    if not _WATCH["handler"]:          # installed once and kept: a late signal must never meet the default action
        signal.signal(signal.SIGUSR1, _raise_app_died)
        _WATCH["handler"] = True
    _WATCH["armed"] = True
    try:
        yield
    finally:
        _WATCH["armed"] = False
        _DEATHS.clear()


@contextlib.contextmanager
def running_app(log_path: Path, extra_env: dict | None = None):
    """Yield the URL (a ``RunningApp``) of a freshly started ``python app.py``; stop it (its whole process group)
    after. Fails at once with AppStartError when the process ends before it serves."""
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", GRADIO_ANALYTICS_ENABLED="False") | (extra_env or {})
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--host", "127.0.0.1", "--port", str(port)],
                                   cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + START_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                raise AppStartError(f"app.py exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise AppStartError(f"app.py did not start within {START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(1.0)
        app = RunningApp(url, process, log_path)
        _RUNNING.append(app)
        threading.Thread(target=app.watch, name="app-watch", daemon=True).start()
        yield app
    finally:
        for app in [running for running in _RUNNING if running.process is process]:
            app.stopping = True
            _RUNNING.remove(app)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def set_max_new_tokens(page, value: int) -> None:
    """Open the page's Settings accordion, type the number of new tokens, close it again (a Playwright page): what
    the browser tests and benchmarks/page_fidelity.py set a Run's length with."""
    header = page.locator("#settings button.label-wrap")
    header.click()
    box = page.locator("#max-new-tokens input[type=number]")
    box.fill(str(value))
    box.press("Enter")
    box.press("Tab")      # the slider takes a typed number when its box loses focus; give its bar time to show it
    try:                  # (a value past the slider's range never shows: the Run's validation answers that one)
        page.wait_for_function(
            f"Number(document.querySelector('#max-new-tokens input[type=range]').value) === {int(value)}",
            timeout=5_000)
    except Exception:     # noqa: BLE001 - playwright's TimeoutError; the caller checks the length the Run used
        pass
    header.click()
