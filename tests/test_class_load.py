"""A class on one app, small: ``benchmarks/class_load.py`` with eight clients at once (four replaying a shipped
trace through the Replay API, four running live) against app.py on a tiny pair saved to folders, one run at a
time and a queue of three. Every client gets its result or the queue's clear refusal, the app keeps serving and
logs no traceback, and the report names the waits and the peak memory. In the browser, a visitor whose Run waits
behind another's sees their place in the queue."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app_process import CHROMIUM
from pacer_core.testing.tiny import tiny_llama
from test_models import WORDS, save_model, word_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.server]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "class_load.py"


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    """A tiny target and draft saved like hub models (app.py loads them by folder)."""
    folder = tmp_path_factory.mktemp("pair")
    tokenizer = word_tokenizer(WORDS)
    target = save_model(folder / "target", tiny_llama(64, seed=0), tokenizer)
    draft = save_model(folder / "draft", tiny_llama(64, hidden=16, layers=1, seed=1), tokenizer)
    return target, draft


def test_a_small_class_gets_results_or_a_clear_queue_full(tiny_folders, tmp_path):
    target, draft = tiny_folders
    out = tmp_path / "class-load"
    command = [sys.executable, str(SCRIPT), "--replay-clients", "4", "--live-clients", "4", "--replay-steps", "2",
               "--traces", "easy-and-hard-1.json", "smc-particles-1.json", "--target", target, "--draft", draft,
               "--prompt", "w3 w4 w5", "--max-new-tokens", "8", "--concurrency", "1", "--queue-size", "3",
               "--deadline-s", "240", "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["app"]["still_serving"] and run["app"]["tracebacks_in_log"] == 0
    assert len(run["clients"]) == 8
    for client in run["clients"]:
        assert client["outcome"] in ("result", "queue full"), client
        if client["outcome"] == "queue full":
            assert "Queue is full" in client["message"], client
    assert run["all"]["outcomes"].get("result", 0) >= 1
    assert run["memory_mib"]["peak"] >= run["memory_mib"]["idle"] > 0
    report = (out / "report.md").read_text()
    assert "wait p50" in report and "wait p95" in report and "peak" in report


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM}")
def test_a_waiting_visitor_sees_their_place_in_the_queue(chromium_browser):
    """One run at a time: the second visitor's Run waits and the page says where it stands ("queue: 1/1")."""
    from playwright.sync_api import expect

    from test_reliability import CountingPair, start_app

    counting = CountingPair()
    counting.delay = 0.1                                # a run long enough to queue behind
    demo, url = start_app(counting, concurrency=1)
    pages = [chromium_browser.new_context(viewport={"width": 1600, "height": 1000}).new_page() for _ in range(2)]
    try:
        for page in pages:
            page.goto(url)
            page.wait_for_selector("#run-button")
            page.locator("#prompt textarea").fill("t1 t2 t3")      # words the tiny tokenizer reads
        pages[0].click("#run-button")
        counting.wait_for_calls(2)
        pages[1].click("#run-button")
        expect(pages[1].get_by_text(re.compile(r"queue: 1/1")).first).to_be_visible(timeout=30_000)
        for page in pages:
            page.click("#stop-button")
    finally:
        counting.delay = 0.0
        for page in pages:
            page.context.close()
        demo.close()
