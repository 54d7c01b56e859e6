"""Does the page show each decoder's own speed? The real page against the same decoders alone (issues 41, 54).

app.py is started on its default pair (the embedded target, its default drafter) and driven in headless
Chromium: an example's prompt typed, Run clicked, the finished table awaited (the click-to-table time is
recorded on the browser's clock, ``WATCH_RUN_JS``, and as the driver sees it), the run's JSON trace downloaded. Then, in this process, the same four decoders run alone through
the library (``pacer_core.generate``) with exactly the settings the page ran (read from that trace), one after
another in the page's order once the browser has finished drawing, on a pair loaded the way app.py loads it
(``default_target.target_from_env``), three samples a round by default (each method's median kept: the page
gives one sample a round, the alone side a steadier one). A sample is what one page Run gives: each method's
fastest of as many passes as the page timed (a short Run times its methods two or three times,
``ui/timing_turn.py``). Both sides are on this machine in the same hour, interleaved round by round, so what differs
is only how the page measures.

Every example runs at each of ``--new-tokens`` (default 48, the page's own, and 16: a short run shows what a fixed
cost per method would add on a fast machine, where the methods take a fraction of a second). Per example, length
and method (medians over rounds): page seconds / alone seconds, and page speedup / alone speedup (speedup =
tokens/s ÷ AR's tokens/s on the same side); per example and length: click to finished table ÷ the four decoders'
alone seconds added up. Seeded runs decode the same tokens on both sides (``same_tokens`` checks).

    .venv/bin/python benchmarks/page_fidelity.py --out benchmarks/results/page-fidelity [--rounds 3] [--new-tokens 48,16]

Writes results.json and report.md. tests/test_page_fidelity_browser.py runs ``page_round`` and ``alone_round``
once on the default example."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results_writer import fmt  # noqa: E402
from pacer_core import method_table  # noqa: E402
from pacer_core.heap import freeze_loaded_heap  # noqa: E402
from pacer_core.testing.app_runner import running_app, set_max_new_tokens  # noqa: E402

EXAMPLES_PATH = ROOT / "assets" / "examples.json"
DEFAULT_EXAMPLES = (0, 4, 3)        # the default (a Python function), why the sky is blue, capital cities
CHROMIUM = os.environ.get("PACER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
RUN_TIMEOUT_S = 600
# Times a Run in the page, on the browser's clock: from the Run button's click event to the first frame painted
# with the finished status line and table ("table"), and to the frame after the finished charts were drawn
# ("charts"). The driver's own round trips (a click sent, a selector polled) are not the page's and stay out of it.
WATCH_RUN_JS = """() => {
  const watch = window.pacerRunWatch = {click: null, busy: false, table: null, charts: null};
  document.querySelector('#run-button').addEventListener('click', () => { watch.click = performance.now(); },
                                                         {capture: true, once: true});
  const painted = (then) => requestAnimationFrame(() => setTimeout(() => then(performance.now()), 0));
  const status = document.querySelector('#run-status');
  let tableSeen = false;
  const observer = new MutationObserver(() => {
    const line = status.querySelector('.run-status');
    if (watch.click === null || !line) return;
    if (line.classList.contains('run-busy')) watch.busy = true;
    if (!watch.busy || !(line.classList.contains('run-done') || line.classList.contains('run-error'))) return;
    if (!tableSeen) { tableSeen = true; painted((now) => { watch.table = now; }); }
    if (!line.hasAttribute('data-charts')) {
      observer.disconnect();
      painted((now) => { watch.charts = now; });
    }
  });
  observer.observe(status, {subtree: true, childList: true, attributes: true, characterData: true});
}"""
WARM_UP_PROMPT = "Say hello."
DRAWN_S = 1.0          # a quiet second after the browser reports idle, before the decoders run alone
NEW_TOKENS = (48, 16)  # the page's default length, and a short run where a fixed cost per method would show
SECONDS_BOUND, SPEEDUP_BOUND, RUN_BOUND = 1.10, 0.05, 1.5   # the page-fidelity bounds (docs/measurements.md)


def examples(indices) -> list[dict]:
    items = json.loads(EXAMPLES_PATH.read_text(encoding="utf-8"))
    return [items[index] for index in indices]


# ---------------------------------------------------------------- the page

def page_round(page, prompt: str, downloads: Path, new_tokens: int | None = None, attempts: int = 3) -> dict:
    """One Run of ``prompt`` on the page with its default settings (``new_tokens`` new tokens at most, if given):
    click-to-table seconds and the run's trace. A typed length does not always reach the Run (the slider's box
    commits on blur): a Run that used another length is run again, up to ``attempts`` times."""
    for attempt in range(attempts):
        try:
            return _page_round_once(page, prompt, downloads, new_tokens)
        except WrongLength:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


class WrongLength(RuntimeError):
    """The page ran another number of new tokens than the one typed."""


def _page_round_once(page, prompt: str, downloads: Path, new_tokens: int | None) -> dict:
    if new_tokens is not None:
        set_max_new_tokens(page, new_tokens)
    page.fill("#prompt textarea", prompt)
    page.wait_for_function("document.querySelector('#run-status .run-busy') === null", timeout=RUN_TIMEOUT_S * 1000)
    page.evaluate(WATCH_RUN_JS)
    started = time.perf_counter()
    page.click("#run-button")
    page.wait_for_selector("#run-status .run-busy", timeout=RUN_TIMEOUT_S * 1000)
    page.wait_for_selector("#run-status .run-done", timeout=RUN_TIMEOUT_S * 1000)
    driver_click_to_table = time.perf_counter() - started
    page.wait_for_function("window.pacerRunWatch.charts !== null && window.pacerRunWatch.table !== null",
                           timeout=RUN_TIMEOUT_S * 1000)
    watch = page.evaluate("() => window.pacerRunWatch")
    with page.expect_download(timeout=60_000) as download:
        page.click("#download-json")
    path = downloads / f"trace-{time.time_ns()}.json"
    download.value.save_as(str(path))
    trace = json.loads(path.read_text(encoding="utf-8"))
    if new_tokens is not None and trace["settings"].get("max_new_tokens") != new_tokens:
        raise WrongLength(f"the page ran {trace['settings'].get('max_new_tokens')} new tokens, not {new_tokens}")
    wait_until_drawn(page)
    return {"click_to_table_s": (watch["table"] - watch["click"]) / 1000,
            "click_to_charts_s": (watch["charts"] - watch["click"]) / 1000,
            "driver_click_to_table_s": driver_click_to_table, "status": page.inner_text("#run-status"), "trace": trace}


def page_methods(trace: dict) -> dict:
    """{method: {seconds, tokens, token_ids, in_steps_s, step_ms}} as the page measured them (busy_seconds: the
    table's seconds; the split from the kept pass's events, ``step_split``)."""
    busy = trace.get("busy_seconds", {})
    return {method: {"seconds": busy[method], "tokens": result["metrics"]["new_tokens"],
                     "token_ids": result["token_ids"]} | step_split(result.get("events", []))
            for method, result in trace.get("results", {}).items() if method in busy}


def _event_field(event, name: str) -> float:
    value = event.get(name) if isinstance(event, dict) else getattr(event, name, None)
    return float(value or 0.0)


def step_split(events: list) -> dict:
    """``in_steps_s``: a run's seconds inside its steps' model calls (each step's draft and verify seconds, a trace's
    dicts or a run's events alike), so that seconds − in_steps_s is what its timed window held besides them: the
    decoder's own bookkeeping, and anything of the page that ran there. ``step_ms``: the median step after the
    first (which carries the prompt's prefill); for AR, one target step, which follows the host's memory path
    (docs/measurements.md, "What moves AR between runs"). ``prefill_s``: the part of the rest the run spent on fresh
    caches and the prompt's prefill before its first pass (its first event's ``prefill_seconds``; 0 in traces older
    than the field), which places whatever lands in a window before or after the decoding starts."""
    steps = [_event_field(event, "draft_seconds") + _event_field(event, "verify_seconds") for event in events]
    later = steps[1:] or steps
    return {"in_steps_s": sum(steps), "step_ms": 1000 * statistics.median(later) if later else None,
            "prefill_s": sum(_event_field(event, "prefill_seconds") for event in events)}


# ---------------------------------------------------------------- the same decoders alone

def page_order(trace: dict) -> list[str]:
    """The order the page timed its methods in (``RunSession.timing_queue``): the columns, then AR."""
    ran = [method for method in trace.get("results", {}) if method in method_table.method_keys()]
    return [method for method in ran if method != "ar"] + [method for method in ran if method == "ar"]


def wait_until_drawn(page) -> None:
    """Let the browser finish drawing the finished page (nine charts, the columns, the table) before the alone
    round, so that none of its work lands on the first decoder timed alone."""
    for _ in range(2):
        page.evaluate("() => new Promise(resolve => requestIdleCallback(resolve, {timeout: 5000}))")
    time.sleep(DRAWN_S)


def leave_page(page) -> None:
    """The browser on a blank page while the decoders run alone: an open Gradio page keeps animation frames running
    (ui/quiet_frames.py), which the page holds only inside its own timed windows; alone means nothing else."""
    page.goto("about:blank")
    time.sleep(DRAWN_S)


def open_page(page, url: str) -> None:
    """Back to the app for the next page round (a fresh load of the page, drawn and idle before its Run, as a
    visitor's page is by the time they click)."""
    if page.url.rstrip("/") != url.rstrip("/"):
        page.goto(url)
        page.wait_for_selector("#run-button")
        wait_until_drawn(page)


def page_passes(trace: dict) -> int:
    """How many passes the page timed each method in (a short Run times them again and keeps each one's fastest)."""
    return max((len(seconds) for seconds in trace.get("pass_seconds", {}).values()), default=1)


def alone_round(target, drafter, trace: dict, repeats: int = 1) -> dict:
    """The page's four decoders alone, one after another in the page's order, with the settings the page ran.
    A sample is what one page Run gives: each method's fastest of as many passes as the page timed; ``repeats``
    samples, each method's seconds their median (one page Run is one sample, the alone side can afford a steadier
    one)."""
    from pacer_core import generate

    settings = {name: value for name, value in trace["settings"].items() if value is not None}
    per_sample = page_passes(trace)
    order = page_order(trace)
    seconds, splits, out = {method: [] for method in order}, {method: [] for method in order}, {}
    for _ in range(repeats * per_sample):
        for method in seconds:
            started = time.perf_counter()
            result = generate(target, drafter, method, trace["prompt"], chat=trace.get("chat_template"), **settings)
            seconds[method].append(time.perf_counter() - started)
            splits[method].append(step_split(result.events))
            out[method] = {"tokens": result.metrics.new_tokens, "token_ids": list(result.token_ids)}
    samples = {method: [min(passes[start:start + per_sample]) for start in range(0, len(passes), per_sample)]
               for method, passes in seconds.items()}
    return {method: {"seconds": statistics.median(samples[method]), "samples": samples[method],
                     "passes": seconds[method]} | split_of_passes(seconds[method], splits[method]) | out[method]
            for method in seconds}


def split_of_passes(seconds: list[float], splits: list[dict]) -> dict:
    """A method's alone passes split as the page's are (``step_split``): per pass and their medians."""
    outside = [max(total - split["in_steps_s"], 0.0) for total, split in zip(seconds, splits)]
    steps = [split["step_ms"] for split in splits]
    prefill = [split["prefill_s"] for split in splits]
    return {"outside_steps_passes": outside, "step_ms_passes": steps, "prefill_passes": prefill,
            "outside_steps_s": statistics.median(outside), "step_ms": median_or_none(steps),
            "prefill_s": statistics.median(prefill)}


def speedups(methods: dict) -> dict:
    """tokens/s ÷ AR's tokens/s on one side."""
    ar = methods.get("ar")
    if not ar:
        return {}
    ar_rate = ar["tokens"] / ar["seconds"]
    return {method: (row["tokens"] / row["seconds"]) / ar_rate for method, row in methods.items()}


def compare(page: dict, alone: dict) -> dict:
    """Per method: page seconds ÷ alone seconds, page speedup ÷ alone speedup, whether the tokens match."""
    page_speed, alone_speed = speedups(page), speedups(alone)
    return {method: {"page_s": page[method]["seconds"], "alone_s": alone[method]["seconds"],
                     "seconds_ratio": page[method]["seconds"] / alone[method]["seconds"],
                     "page_speedup": page_speed.get(method), "alone_speedup": alone_speed.get(method),
                     "speedup_ratio": (page_speed[method] / alone_speed[method]
                                       if method in page_speed and method in alone_speed else None),
                     "same_tokens": page[method]["token_ids"] == alone[method]["token_ids"],
                     "page_outside_steps_s": (max(page[method]["seconds"] - page[method]["in_steps_s"], 0.0)
                                              if page[method].get("in_steps_s") is not None else None),
                     "alone_outside_steps_s": alone[method].get("outside_steps_s"),
                     "page_step_ms": page[method].get("step_ms"), "alone_step_ms": alone[method].get("step_ms"),
                     "page_prefill_s": page[method].get("prefill_s"), "alone_prefill_s": alone[method].get("prefill_s")}
            for method in method_table.method_keys() if method in page and method in alone}


def alone_against_itself(alone: dict) -> dict:
    """The noise floor of the speedup comparison: the alone side's first sample (what one page Run gives) against
    the median of its other samples, compared as the page is (speedup ÷ speedup, per method). A page that added
    nothing to a method's time would show ratios this far from 1 on this host; {} with fewer than 3 samples."""
    counts = [len(row.get("samples", row["passes"])) for row in alone.values()]
    if not counts or min(counts) < 3:
        return {}
    samples = {method: row.get("samples", row["passes"]) for method, row in alone.items()}
    single = {method: {"tokens": row["tokens"], "seconds": samples[method][0]} for method, row in alone.items()}
    rest = {method: {"tokens": row["tokens"], "seconds": statistics.median(samples[method][1:])}
            for method, row in alone.items()}
    single_speed, rest_speed = speedups(single), speedups(rest)
    return {method: single_speed[method] / rest_speed[method] for method in single_speed if method in rest_speed}


# ---------------------------------------------------------------- rounds, summary, report

def median_of(rounds: list[dict], method: str, key: str):
    values = [row[method][key] for row in rounds if method in row and row[method][key] is not None]
    return statistics.median(values) if values else None


def median_or_none(values):
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def summarize(example_rounds: list[dict]) -> dict:
    """Medians over an example's rounds, per method, and its click-to-table ratio."""
    compared = [entry["compare"] for entry in example_rounds]
    methods = {}
    for method in method_table.method_keys():
        if not any(method in row for row in compared):
            continue
        methods[method] = {key: median_of(compared, method, key)
                           for key in ("page_s", "alone_s", "seconds_ratio", "page_speedup", "alone_speedup",
                                       "speedup_ratio", "page_outside_steps_s", "alone_outside_steps_s",
                                       "page_step_ms", "alone_step_ms", "page_prefill_s", "alone_prefill_s")}
        methods[method]["same_tokens"] = all(row[method]["same_tokens"] for row in compared if method in row)
        floor = [entry["alone_against_itself"][method] for entry in example_rounds
                 if method in entry.get("alone_against_itself", {})]
        methods[method]["alone_against_itself"] = statistics.median(floor) if floor else None
    whole = [entry["click_to_table_s"] / sum(row["seconds"] for row in entry["alone"].values())
             for entry in example_rounds]
    return {"methods": methods, "click_to_table_s": statistics.median(e["click_to_table_s"] for e in example_rounds),
            "click_to_charts_s": median_or_none(e.get("click_to_charts_s") for e in example_rounds),
            "driver_click_to_table_s": median_or_none(e.get("driver_click_to_table_s") for e in example_rounds),
            "click_to_table_over_alone_sum_per_round": whole,
            "drawing_s": median_or_none(phase(e, "drawing") for e in example_rounds),
            "settling_s": median_or_none(phase(e, "settling") for e in example_rounds),
            "alone_sum_s": statistics.median(sum(r["seconds"] for r in e["alone"].values()) for e in example_rounds),
            "click_to_table_over_alone_sum": statistics.median(whole)}


def phase(entry: dict, name: str):
    """Seconds a Run spent in one of its phases (``RunSession.phase_seconds``: waiting for the page to draw a
    method's turn, for quiet cores after it), None where its trace has none."""
    return (entry.get("phase_seconds") or {}).get(name)


def verdicts(summary: dict) -> dict:
    """Issue 54's figures: speedups within 5%, seconds within 1.10x, a whole Run within 1.5x the sum."""
    methods = summary["methods"].values()
    return {"speedups_within_5pct": all(row["speedup_ratio"] is None or abs(row["speedup_ratio"] - 1) <= SPEEDUP_BOUND
                                        for row in methods),
            "seconds_within_1.10x": all(row["seconds_ratio"] <= SECONDS_BOUND for row in methods),
            "run_within_1.5x_of_alone_sum": summary["click_to_table_over_alone_sum"] <= RUN_BOUND}


def report(results: dict) -> str:
    lines = [f"# The page against the decoders alone ({results['date']})", "",
             f"{results['machine']['cpus']} CPUs, {results['machine']['processor']}; pair: "
             f"{results['pair']['target']} on {results['pair']['target_engine']}, drafter "
             f"{results['pair']['drafter']}; {results['rounds']} rounds per example, medians (alone: "
             f"{results.get('alone_repeats', 1)} samples a round, each method's median; a sample is the fastest of as "
             f"many passes as the page timed, which a short Run times more than once); page settings as "
             f"the page starts (each run's settings in results.json).", "",
             "The last speedup column is the noise floor: the alone side's first sample against its other samples, "
             "compared as the page is (`alone_against_itself`).", "",
             "| example | method | page s | alone s | page/alone s | page speedup | alone speedup | "
             "page/alone speedup | alone/alone speedup | same tokens |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for example in results["examples"]:
        summary = example["summary"]
        for method, row in summary["methods"].items():
            lines.append(f"| {example['label']} | {method} | {fmt(row['page_s'])} | {fmt(row['alone_s'])} | "
                         f"{fmt(row['seconds_ratio'])} | {fmt(row['page_speedup'])} | {fmt(row['alone_speedup'])} | "
                         f"{fmt(row['speedup_ratio'])} | {fmt(row.get('alone_against_itself'))} | "
                         f"{'yes' if row['same_tokens'] else 'no'} |")
    lines += split_table(results)
    lines += ["", "Click to finished table: from the Run button's click event to the finished status line and table in "
              "the page, on the browser's clock; charts: to the frame after the finished charts were drawn (they "
              "follow the table); driver: the same click to table as Playwright sees it, its own round trips "
              "included; waits: of the Run, the seconds its timing turns waited for the page to draw each turn and "
              "then for quiet cores (ui/settle.py), all turns together.", "",
              "| example | click to finished table s | four decoders alone, added s | ratio (per round) | click to "
              "charts s | driver's click to table s | waits: drawn / quiet s | verdicts |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for example in results["examples"]:
        summary = example["summary"]
        passed = ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in example["verdicts"].items())
        per_round = " / ".join(fmt(value) for value in summary["click_to_table_over_alone_sum_per_round"])
        lines.append(f"| {example['label']} | {fmt(summary['click_to_table_s'])} | {fmt(summary['alone_sum_s'])} | "
                     f"{fmt(summary['click_to_table_over_alone_sum'])} ({per_round}) | "
                     f"{fmt(summary.get('click_to_charts_s'))} | {fmt(summary.get('driver_click_to_table_s'))} | "
                     f"{fmt(summary.get('drawing_s'))} / {fmt(summary.get('settling_s'))} | {passed} |")
    return "\n".join(lines) + "\n"


def split_table(results: dict) -> list[str]:
    """The report's lines on where each method's seconds went: outside its steps' model calls, and its median step."""
    lines = ["", "Where each method's seconds went (medians over rounds): outside steps is its timed seconds less the "
             "seconds inside its steps' model calls (the decoder's bookkeeping, and anything of the page that ran in "
             "its window); of it, prefill is the run's fresh caches and the prompt's prefill before its first "
             "pass; a step is the median step's model seconds after the first. AR's step is one target step, which "
             "moves with the host between runs (docs/measurements.md, \"What moves AR between runs\").",
             "", "| example | method | page outside steps s | alone outside steps s | page prefill s | alone prefill s "
             "| page step ms | alone step ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for example in results["examples"]:
        for method, row in example["summary"]["methods"].items():
            lines.append(f"| {example['label']} | {method} | {fmt(row.get('page_outside_steps_s'), 3)} | "
                         f"{fmt(row.get('alone_outside_steps_s'), 3)} | {fmt(row.get('page_prefill_s'), 3)} | "
                         f"{fmt(row.get('alone_prefill_s'), 3)} | {fmt(row.get('page_step_ms'), 1)} | "
                         f"{fmt(row.get('alone_step_ms'), 1)} |")
    return lines


def browser_page(playwright, url: str):
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(RUN_TIMEOUT_S * 1000)
    page.goto(url)
    page.wait_for_selector("#run-button")
    return browser, page


def measure(args) -> dict:
    from playwright.sync_api import sync_playwright

    from pacer_core.default_target import target_from_env

    target, drafters = target_from_env()
    chosen = [item | {"label": f"{item['label']} · {tokens} tokens", "new_tokens": tokens}
              for item in examples(args.examples) for tokens in args.new_tokens]
    rounds = {item["label"]: [] for item in chosen}
    downloads = Path(tempfile.mkdtemp(prefix="page-fidelity-"))
    with running_app(downloads / "app.log") as url, sync_playwright() as playwright:
        browser, page = browser_page(playwright, url)
        warm = page_round(page, WARM_UP_PROMPT, downloads)        # lazy builds and first-call costs, both sides
        alone_round(target, drafters.default, warm["trace"])
        freeze_loaded_heap()        # as app.py does once it serves: no full collection of startup's objects
        for round_index in range(args.rounds):
            for item in chosen:
                open_page(page, url)
                on_page = page_round(page, item["prompt"], downloads, item["new_tokens"])
                leave_page(page)
                alone = alone_round(target, drafters.default, on_page["trace"], args.alone_repeats)
                entry = {"round": round_index, "load_1min": os.getloadavg()[0],
                         "click_to_table_s": on_page["click_to_table_s"],
                         "click_to_charts_s": on_page["click_to_charts_s"],
                         "driver_click_to_table_s": on_page["driver_click_to_table_s"],
                         "phase_seconds": on_page["trace"].get("phase_seconds"),
                         "status": on_page["status"], "settings": on_page["trace"]["settings"],
                         "drafter": on_page["trace"].get("drafter"), "page": page_methods(on_page["trace"]),
                         "alone": alone}
                entry["compare"] = compare(entry["page"], alone)
                entry["alone_against_itself"] = alone_against_itself(alone)
                rounds[item["label"]].append(entry)
                print(f"[page-fidelity] round {round_index + 1} {item['label']}: click to table "
                      f"{entry['click_to_table_s']:.2f} s; " + ", ".join(
                          f"{m} {c['seconds_ratio']:.2f}x s, speedup {fmt(c['speedup_ratio'])}x"
                          for m, c in entry["compare"].items()), flush=True)
        browser.close()
    for entries in rounds.values():
        for entry in entries:
            for side in ("page", "alone"):
                for row in entry[side].values():
                    row.pop("token_ids", None)
    results = {"date": datetime.date.today().isoformat(), "rounds": args.rounds, "alone_repeats": args.alone_repeats,
               "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
               "pair": target.describe(drafters.default) | {"drafter": chosen and rounds[chosen[0]["label"]][0]["drafter"]},
               "examples": []}
    for item in chosen:
        summary = summarize(rounds[item["label"]])
        results["examples"].append({"label": item["label"], "prompt": item["prompt"],
                                    "new_tokens": item["new_tokens"], "summary": summary,
                                    "verdicts": verdicts(summary), "rounds": rounds[item["label"]]})
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder (results.json, report.md)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--alone-repeats", type=int, default=3, dest="alone_repeats",
                        help="samples of the four decoders alone per round (each as many passes as the page "
                             "timed), each method's median kept (default 3)")
    parser.add_argument("--examples", type=lambda text: [int(part) for part in text.split(",")],
                        default=list(DEFAULT_EXAMPLES), help="indices into assets/examples.json (default 0,4,3)")
    parser.add_argument("--new-tokens", type=lambda text: [int(part) for part in text.split(",")],
                        default=list(NEW_TOKENS), help="max new tokens per run, each a round of its own (default 48,16)")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"page_fidelity: chromium not found at {CHROMIUM} (apt-get install -y chromium)", file=sys.stderr)
        return 2
    results = measure(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    (args.out / "report.md").write_text(report(results), encoding="utf-8")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
