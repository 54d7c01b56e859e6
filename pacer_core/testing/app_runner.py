"""Start ``python app.py`` in a subprocess on 127.0.0.1 and a free port, and stop it (its whole process group)
after: what the end-to-end tests (tests/app_process.py) and the class load benchmark (benchmarks/class_load.py)
run the app with."""
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

ROOT = Path(__file__).resolve().parent.parent.parent
START_TIMEOUT_S = 300


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
