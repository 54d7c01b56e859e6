"""In the browser, on a tiny in-process pair: the Atlas tab runs an uploaded prompt set with its progress bar,
then choosing a row of its per-prompt table opens that prompt in the Live demo with the atlas's settings."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app_process import CHROMIUM, free_port
from pacer_core.drafters import LoadedDrafters
from pacer_core.testing.tiny import tiny_pair

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
pytestmark = [pytest.mark.browser, pytest.mark.server,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"chromium not found at {CHROMIUM}")]
PROMPTS = ["t3 t9 t27", "t5 t25 t61", "t7 t49 t20"]
TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def tiny_app_url():
    from pacer_core.ui.layout import build_ui, serve

    target, drafter = tiny_pair(scale=40)
    demo = build_ui(target, LoadedDrafters.around(drafter))
    port = free_port()
    serve(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def test_a_row_opens_its_prompt_in_the_live_demo(tiny_app_url, chromium_browser, tmp_path):
    prompts = tmp_path / "set.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": text, "category": "tiny"}) for text in PROMPTS))
    page = chromium_browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(tiny_app_url)
    page.get_by_role("tab", name="Atlas").click()
    page.set_input_files("#atlas-upload input[type=file]", str(prompts))
    page.wait_for_selector("#atlas-upload :text('set.jsonl')")
    box = page.locator("#atlas-max-new-tokens input[type=number]")
    box.fill("7")
    box.press("Enter")
    page.click("#atlas-run")
    page.wait_for_selector("#atlas-status .run-done")
    assert "Done: 3 prompts" in page.inner_text("#atlas-status")
    table = page.locator("#atlas-table-prompts")
    table.locator("span", has_text=PROMPTS[1]).first.click()
    page.wait_for_function(f"document.querySelector('#prompt textarea').value === {PROMPTS[1]!r}")
    assert page.get_by_role("tab", name="Live demo").get_attribute("aria-selected") == "true"
    page.locator("#settings button.label-wrap").click()          # the Live demo's Settings accordion
    assert page.locator("#max-new-tokens input[type=number]").input_value() == "7"
    page.context.close()
