"""How much wall time the UI's rendering adds to a run: the same three interleaved decodes (fixed SD,
PACER, SMC-SD) on the embedded pair, once headless and once rendering every step exactly as the app's
Run handler does (three columns of escaped HTML per step, the six plots and narration every
PLOT_INTERVAL_S, the metrics table at the end). Repeats interleaved, medians reported.

    python benchmarks/ui_overhead.py --repeats 3 --max-new-tokens 48
"""
import argparse
import json
import statistics
import time
from pathlib import Path

from pacer_core import load_pair
from pacer_core.preverifier import default_preverifier
from pacer_core.ui import columns, plots, tables
from pacer_core.ui.layout import COLUMN_METHODS, PLOT_INTERVAL_S
from pacer_core.ui.session import RunSession

PROMPT = "Write a Python function that checks whether a string is a palindrome."


def run_once(pair, preverifier, settings, with_ui: bool) -> float:
    started = time.perf_counter()
    session = RunSession(pair, PROMPT, settings, preverifier=preverifier, measure_ar=False)
    last_plot = 0.0
    while not session.finished:
        session.advance()
        if with_ui:
            for method in COLUMN_METHODS:
                run = session.runs[method]
                columns.column_html(method, run.events, run.result, run.error, running=not run.done)
            if time.perf_counter() - last_plot > PLOT_INTERVAL_S:
                runs = session.runs
                plots.draft_length_figure(runs["fixed"].events, runs["pacer"].events).to_plotly_json()
                plots.acceptance_figure({"fixed": runs["fixed"].events, "pacer": runs["pacer"].events}).to_plotly_json()
                plots.block_scores_figure(runs["pacer"].events).to_plotly_json()
                plots.smc_weights_figure(runs["smc"].events).to_plotly_json()
                plots.smc_ess_figure(runs["smc"].events).to_plotly_json()
                plots.smc_genealogy_figure(runs["smc"].events).to_plotly_json()
                last_plot = time.perf_counter()
    if with_ui:
        tables.metrics_frame(session.results(), session.busy_seconds(), session.statuses())
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default="benchmarks/results/ui_overhead.json")
    args = parser.parse_args()
    pair = load_pair("embedded", "embedded")
    preverifier = default_preverifier(pair)
    settings = {"max_new_tokens": args.max_new_tokens, "temperature": 0.7, "seed": 0}
    run_once(pair, preverifier, settings, True)  # warm-up
    headless, with_ui = [], []
    for _ in range(args.repeats):
        headless.append(run_once(pair, preverifier, settings, False))
        with_ui.append(run_once(pair, preverifier, settings, True))
    report = {"headless_s": headless, "with_ui_s": with_ui, "headless_median_s": statistics.median(headless),
              "with_ui_median_s": statistics.median(with_ui),
              "overhead": statistics.median(with_ui) / statistics.median(headless) - 1, "settings": settings}
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
