"""Start ``app.py`` in a subprocess on 127.0.0.1 and a free port, for the end-to-end UI tests
(tests/test_app_server.py, tests/test_app_browser.py). The pair comes from the environment like
app.py itself (PACER_TARGET / PACER_DRAFT, default: the embedded pair)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 300
CHROMIUM = os.environ.get("PACER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def browser_marks() -> list:
    """The marks of a browser test module: it starts app.py on the embedded pair and drives chromium."""
    import pytest

    return [pytest.mark.browser, pytest.mark.server, pytest.mark.embedded,
            pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM}: install it "
                               "with 'apt-get update && apt-get install -y chromium'")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AppStartError(RuntimeError):
    pass


@contextlib.contextmanager
def running_app(log_path: Path, extra_env: dict | None = None):
    """Yield the URL of a freshly started ``python app.py``; stop it (its whole process group) after."""
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
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def embedded_pair_missing() -> str | None:
    """Why the default (embedded) pair cannot load here, or None when it can (env overrides count)."""
    if os.environ.get("PACER_TARGET") and os.environ.get("PACER_DRAFT"):
        return None
    from pacer_core import embedded

    try:
        if not os.environ.get("PACER_TARGET"):
            embedded.find_gguf_file()
    except embedded.EmbeddedModelMissing as missing:
        return str(missing)
    if not os.environ.get("PACER_DRAFT"):
        draft_dir = embedded.EMBEDDED_DRAFT_DIR
        if not (draft_dir / "config.json").exists():
            return f"the embedded draft is not in {draft_dir} (set PACER_DRAFT to another draft to run this test)"
    return None


def set_max_new_tokens(page, value: int) -> None:
    """Open the Settings accordion, type the number of new tokens, close it again (a Playwright page)."""
    header = page.locator("#settings button.label-wrap")
    header.click()
    box = page.locator("#max-new-tokens input[type=number]")
    box.fill(str(value))
    box.press("Enter")
    header.click()
