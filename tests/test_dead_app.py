"""Tests that lose their app server fail within seconds, naming how it ended (issue: a browser test waited its
full 420 s on a server that had died at the first Run), and a native drafter build that crashes never takes
the app down: the page starts without gguf, says why under the drafter list, drafts with the next drafter and
serves runs."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from app_process import CHROMIUM, embedded_pair_missing, running_app, set_max_new_tokens
from pacer_core.testing.app_runner import AppDied

REPLAY_ONLY = {"PACER_REPLAY_ONLY": "1"}     # serves without loading a model: quick to start


def kill_later(app, number: int, after_s: float) -> None:
    threading.Timer(after_s, lambda: os.killpg(app.process.pid, number)).start()


@pytest.mark.server
@pytest.mark.parametrize("number, named", [(signal.SIGSEGV, "SIGSEGV"), (signal.SIGKILL, "SIGKILL")])
def test_a_wait_on_a_dead_app_fails_within_seconds_naming_its_end(tmp_path, number, named):
    with running_app(tmp_path / "app.log", REPLAY_ONLY) as app:
        kill_later(app, number, 1.0)
        started = time.monotonic()
        with pytest.raises(AppDied) as died:
            time.sleep(120)                  # stands in for any long wait on the server
        waited = time.monotonic() - started
    assert waited < 30, waited
    message = str(died.value)
    assert f"was killed by {named}" in message and "its log ends:" in message and "127.0.0.1" in message


@pytest.mark.browser
@pytest.mark.server
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"chromium not found at {CHROMIUM}")
def test_a_browser_wait_on_a_dead_app_fails_within_seconds(tmp_path, chromium_browser):
    with running_app(tmp_path / "app.log", REPLAY_ONLY) as app:
        context = chromium_browser.new_context()
        page = context.new_page()
        page.goto(app)
        page.wait_for_selector("#replay-status", timeout=120_000)
        kill_later(app, signal.SIGSEGV, 1.0)
        started = time.monotonic()
        with pytest.raises(AppDied, match="was killed by SIGSEGV"):
            page.wait_for_selector("#never-on-the-page", timeout=420_000)
        assert time.monotonic() - started < 30
        context.close()                      # the browser still answers after the interruption


@pytest.mark.browser
@pytest.mark.server
@pytest.mark.embedded
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"chromium not found at {CHROMIUM}")
@pytest.mark.parametrize("hook", ["SIGILL"])    # the field's crash (AMX); tests/test_native_proof.py has SIGSEGV too
def test_a_crashing_gguf_build_leaves_the_page_serving_without_it(tmp_path, chromium_browser, hook):
    reason = embedded_pair_missing()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: no native build to prove")
    with running_app(tmp_path / "app.log", {"PACER_GGUF_PROOF_CRASH": hook}) as app:
        page = chromium_browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
        page.set_default_timeout(180_000)
        page.goto(app)
        page.wait_for_selector("#run-button")
        left_out = page.inner_text("#drafters-left-out")
        assert "gguf" in left_out and f"llama.cpp died with {hook}" in left_out, left_out
        status = page.inner_text("#pair-status")
        assert "a separate small model" in status and "llama.cpp" not in status   # small draft, torch target
        page.click("#drafter input")
        page.wait_for_selector("[role=option]")
        listed = page.eval_on_selector_all("[role=option]", "els => els.map(e => e.innerText.trim())")
        assert listed and not any(text.startswith("Drafter: gguf") for text in listed), listed
        page.keyboard.press("Escape")
        page.fill("#prompt textarea", "Name three primary colours.")
        set_max_new_tokens(page, 4)
        page.click("#run-button")
        page.wait_for_selector("#run-status .run-done", timeout=420_000)
        assert "small" in page.inner_text("#metrics-table")
    assert f"gguf drafter left out: llama.cpp died with {hook}" in (tmp_path / "app.log").read_text()

