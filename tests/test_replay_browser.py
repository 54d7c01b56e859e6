"""In the browser, on ``app.py --replay-only`` (no model loaded): a recorded run picked from the list or a
trace uploaded shows its first pass drafted, Step ▸ shows the verdict, ▸▸ Whole run the finished page; a
truncated trace gets a message and the page keeps working; markup in a trace's token text runs nothing;
a 512-token trace shows its first step within a second of the upload."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from app_process import CHROMIUM, running_app
from test_replay import long_trace
from test_trace import hostile

from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import handlers
from pacer_core.ui.page_types import AppContext, PageInputs
from pacer_core.ui.workshop import load_workshop, recorded_runs

pytestmark = [pytest.mark.browser, pytest.mark.server,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM}")]
FIRST_STEP = "document.querySelector('#replay-status').innerText.includes('pass 1 of')"
STATES = "m => [...document.querySelectorAll(`#replay-col-${m} .tok`)].map(e => e.dataset.state)"


@pytest.fixture(scope="module")
def replay_app(tmp_path_factory):
    """app.py --replay-only on a free port, and its log."""
    log = tmp_path_factory.mktemp("replay-app") / "app.log"
    with running_app(log, {"PACER_REPLAY_ONLY": "1"}) as url:
        yield url, log


@pytest.fixture
def page(replay_app, chromium_browser):
    """A fresh 1600x1000 page of the replay app (a fresh upload box each test)."""
    url, _ = replay_app
    context = chromium_browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector("#replay-step")
    yield page
    context.close()


def upload(page, path: Path, shown: str = FIRST_STEP) -> float:
    """Seconds from handing the file to the upload box until ``shown`` holds."""
    with page.expect_file_chooser() as chooser:
        page.click("#replay-file")
    started = time.perf_counter()
    chooser.value.set_files(str(path))
    page.wait_for_function(shown, polling=20)
    return time.perf_counter() - started


def upload_again(page, path: Path) -> float:
    """``upload`` on a freshly loaded page (the upload box holds one file)."""
    page.reload()
    page.wait_for_selector("#replay-step")
    return upload(page, path)


def test_the_replay_page_loads_no_model(replay_app, page):
    _, log = replay_app
    assert "no model is loaded" in log.read_text() and "loading the model pair" not in log.read_text()
    assert page.locator("#run-button").count() == 0


def test_an_uploaded_trace_steps_through_to_the_finished_run(page):
    recording = recorded_runs(load_workshop())[0]
    upload(page, recording.path)
    line = page.inner_text("#replay-recorded")
    assert "SmolLM2" in line and "Recorded" in line and "PACER Lab" in line and "Max new tokens 24" in line
    assert set(page.evaluate(STATES, "fixed")) == {"drafted"}
    page.click("#replay-step")
    page.wait_for_function("document.querySelector('#replay-status').innerText.includes('pass 1 of') && "
                           "document.querySelector('#replay-status').innerText.includes('verified')")
    fixed = set(page.evaluate(STATES, "fixed"))
    assert "drafted" not in fixed and fixed & {"accepted", "rejected"} and fixed & {"corrected", "bonus"}, fixed
    page.click("#replay-step")
    page.wait_for_function("document.querySelector('#replay-status').innerText.includes('pass 2 of')")
    page.click("#replay-end")
    page.wait_for_function("document.querySelector('#replay-status').innerText.includes('finished run')")
    table = page.inner_text("#replay-metrics-table")
    assert "Fixed-length SD" in table and "Autoregressive" in table


def test_a_recorded_run_is_picked_from_the_list(page):
    recording = recorded_runs(load_workshop())[-1]
    page.click("#replay-example input")
    page.wait_for_selector("[role=option]")
    page.locator("[role=option]", has_text=recording.title).first.dispatch_event("mousedown")
    page.wait_for_function(FIRST_STEP)
    assert recording.run.drafter in page.inner_text("#replay-recorded")


def test_a_truncated_trace_gets_a_message_and_the_page_keeps_working(page, tmp_path):
    broken = tmp_path / "broken.json"
    text = recorded_runs(load_workshop())[0].path.read_text(encoding="utf-8")
    broken.write_text(text[: len(text) // 3], encoding="utf-8")
    upload(page, broken, "document.querySelector('#replay-status .run-error') !== null")
    assert "ends early" in page.inner_text("#replay-status")
    page.click("#replay-step")
    page.wait_for_function("document.querySelector('#replay-status').innerText.includes('Open a recorded run first')")


def test_markup_in_a_trace_runs_nothing(page, tmp_path):
    inputs = PageInputs("t1 t2", {"max_new_tokens": 6, "temperature": 0.8, "seed": 3}, measure_ar=True)
    target, drafter = tiny_pair()
    *_, final = handlers.run(AppContext(target, drafter), inputs)
    path = tmp_path / "hostile.json"
    path.write_text(hostile(json.loads(Path(final.downloads[0]).read_text(encoding="utf-8"))), encoding="utf-8")
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    upload(page, path)
    page.click("#replay-end")
    page.wait_for_function("document.querySelector('#replay-status').innerText.includes('finished run')")
    page.hover("#replay-col-fixed .tok")
    assert dialogs == []                                                 # no alert(1) ran
    assert page.locator("#replay-columns img, #replay-columns script, #replay-recorded img").count() == 0
    assert "<script>" in page.inner_text("#replay-col-fixed")          # shown as text


def test_a_512_token_trace_shows_its_first_step_within_a_second(page, tmp_path):
    path = tmp_path / "long.json"
    path.write_bytes(long_trace(512))
    seconds = [upload(page, path), upload_again(page, path)]
    print(f"512-token trace ({path.stat().st_size / 1024:.0f} KB): upload to first shown step "
          f"{' s, '.join(f'{value:.2f}' for value in seconds)} s")
    assert max(seconds) < 1.0
