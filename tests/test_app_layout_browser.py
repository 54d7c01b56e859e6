"""The explainer on one screen, in a real browser: app.py on the EMBEDDED pair, driven by
Playwright through Debian's chromium.

* 1366x768 (a classroom laptop): before any scrolling the prompt, Run / Step / Stop and, after Run, the
  heads and first lines of the three columns are on screen; examples and settings start collapsed; the
  legend sits with the columns; every column shows the clean answer above its step trace (the trace can be
  switched off); below them the live timeline, the speedup-against-acceptance plot and the histogram.
* 390 px wide (a phone): the columns stack, nothing scrolls sideways, the text keeps a readable size.

PACER_SCREENSHOT_DIR=docs also writes the README screenshots there (screenshot.png, screenshot-plots.png,
screenshot-phone.png); then the run uses the app's default settings (48 new tokens) instead of 8."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from app_process import browser_marks, set_max_new_tokens

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 420
SCREENSHOT_DIR = os.environ.get("PACER_SCREENSHOT_DIR")
LAPTOP, PHONE = {"width": 1366, "height": 768}, {"width": 390, "height": 844}
METHODS = ("fixed", "pacer", "smc")

pytestmark = browser_marks()


@pytest.fixture(scope="module")
def browser(chromium_browser):
    return chromium_browser


def open_page(browser, url, viewport):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(180_000)        # the CPU may be shared and slow
    page.goto(url)
    page.wait_for_selector("#run-button")
    return context, page


def box(page, selector: str) -> dict:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, f"{selector} is not laid out"
    return found


def run_to_the_end(page) -> None:
    """Run (8 new tokens, or the defaults when writing README screenshots) and wait for the finished page."""
    if not SCREENSHOT_DIR:
        set_max_new_tokens(page, 8)
    page.evaluate("window.scrollTo(0, 0)")
    started = time.time()
    page.click("#run-button")
    page.wait_for_selector("#run-status .run-busy", timeout=RUN_TIMEOUT_S * 1000)
    page.wait_for_selector("#run-status .run-done", timeout=RUN_TIMEOUT_S * 1000)
    print(f"run took {time.time() - started:.1f} s")
    page.evaluate("window.scrollTo(0, 0)")


def plot_data(page, name: str) -> list[dict]:
    """The traces plotly drew in one plot (type, mode, y), read from the page."""
    return page.eval_on_selector(f"#plot-{name} .js-plotly-plot",
                                 "el => el.data.map(t => ({type: t.type, mode: t.mode || null, y: t.y || []}))")


def test_one_screen_at_1366x768(browser, app_url):
    context, page = open_page(browser, app_url, LAPTOP)
    try:
        for selector in ("#prompt textarea", "#run-button", "#step-button", "#stop-button", "#legend"):
            found = box(page, selector)
            assert found["y"] + found["height"] <= LAPTOP["height"], (selector, found)
        labels = [item["label"] for item in json.loads((ROOT / "assets" / "examples.json").read_text())]
        example = page.get_by_text(labels[1], exact=True)
        assert not example.is_visible()                                          # examples collapsed...
        page.click("#examples button.label-wrap")
        example.wait_for(state="visible")                                        # ... one click away
        page.click("#examples button.label-wrap")
        assert not page.locator("#max-new-tokens").is_visible()                  # settings collapsed

        run_to_the_end(page)
        assert page.evaluate("window.scrollY") == 0
        for method in METHODS:
            column = box(page, f"#col-{method}")
            assert column["y"] < LAPTOP["height"] - 200, (method, column)       # boxes start above the fold
            for part in (".col-title", ".answer-text"):                          # head and first answer line
                found = box(page, f"#col-{method} {part}")
                assert found["y"] + 20 <= LAPTOP["height"], (method, part, found)
            assert page.inner_text(f"#col-{method} .answer-text").strip()
            assert page.locator(f"#col-{method} .trace .tok").count() > 0
            assert box(page, f"#col-{method} .col-title")["y"] <= 430, method       # heads high on the first screen
        legend, columns = box(page, "#legend"), box(page, "#col-fixed")
        assert 0 < columns["y"] - legend["y"] < 120                              # the legend sits with them

        lanes = {lane for trace in plot_data(page, "timeline") if trace["type"] == "bar" for lane in trace["y"]}
        assert lanes == {"AR", "fixed SD", "PACER", "SMC-SD"}
        speedup = plot_data(page, "speedup")
        assert sum(trace["mode"] == "lines" for trace in speedup) == 3
        assert sum(trace["mode"] == "markers" for trace in speedup) == 3       # each column's operating point
        assert {trace["type"] for trace in plot_data(page, "histogram")} == {"bar"}
        assert box(page, "#plot-timeline")["y"] > columns["y"] + columns["height"]   # plots below the columns

        if SCREENSHOT_DIR:
            page.screenshot(path=str(Path(SCREENSHOT_DIR) / "screenshot.png"))
            top, bottom = box(page, "#plot-timeline"), box(page, "#plot-speedup")
            page.screenshot(path=str(Path(SCREENSHOT_DIR) / "screenshot-plots.png"), full_page=True,
                            clip={"x": 0, "y": top["y"] - 8, "width": LAPTOP["width"],
                                  "height": bottom["y"] + bottom["height"] - top["y"] + 16})

        page.uncheck("#show-trace input[type=checkbox]")                         # the clean answer alone
        page.wait_for_function("document.body.classList.contains('pacer-hide-trace')")
        assert not page.locator("#col-pacer .trace").is_visible()
        assert page.locator("#col-pacer .answer-text").is_visible()
        page.check("#show-trace input[type=checkbox]")
        page.wait_for_function("!document.body.classList.contains('pacer-hide-trace')")
        assert page.locator("#col-pacer .trace").is_visible()
    finally:
        context.close()


def test_columns_stack_and_stay_readable_at_phone_width(browser, app_url):
    context, page = open_page(browser, app_url, PHONE)
    try:
        run_to_the_end(page)
        boxes = [box(page, f"#col-{method}") for method in METHODS]
        for upper, lower in zip(boxes, boxes[1:]):
            assert lower["y"] >= upper["y"] + upper["height"] - 1, (upper, lower)      # stacked, in order
        for found in boxes:
            assert found["x"] >= 0 and found["x"] + found["width"] <= PHONE["width"]
            assert found["width"] >= 0.8 * PHONE["width"]
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]   # no sideways scroll
        for selector in (".answer-text", ".tokens", ".col-title"):
            size = page.eval_on_selector(f"#col-pacer {selector}", "el => parseFloat(getComputedStyle(el).fontSize)")
            assert size >= 14, (selector, size)
        if SCREENSHOT_DIR:
            page.evaluate(f"window.scrollTo(0, {boxes[0]['y'] - 60})")
            page.screenshot(path=str(Path(SCREENSHOT_DIR) / "screenshot-phone.png"))
    finally:
        context.close()
