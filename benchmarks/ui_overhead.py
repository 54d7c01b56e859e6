"""How much wall time the UI adds to a run: the same three interleaved decodes (fixed SD, PACER,
SMC-SD) on the embedded pair, once headless and once through the app's own Run handler
(``pacer_core.ui.handlers.run``: three columns of escaped HTML per step, the six plots and narration
every PLOT_INTERVAL_S, then the oracle, the log-likelihoods, the metrics table and the downloads).
The headless run does the same model work (decodes, oracle, log-likelihoods) without rendering.
No Gradio is imported. Repeats interleaved, medians reported.

    python benchmarks/ui_overhead.py --repeats 3 --max-new-tokens 48
"""
import argparse
import json
import statistics
import time
from pathlib import Path

from pacer_core import load_pair
from pacer_core.preverifier import default_preverifier
from pacer_core.ui import handlers
from pacer_core.ui.handlers import AppContext, PageInputs

PROMPT = "Write a Python function that checks whether a string is a palindrome."


def headless_seconds(context: AppContext, inputs: PageInputs) -> float:
    started = time.perf_counter()
    session = handlers.new_session(context, inputs)
    while not session.finished:
        session.advance()
    session.compute_oracle()
    session.compute_likelihoods()
    return time.perf_counter() - started


def with_ui_seconds(context: AppContext, inputs: PageInputs) -> float:
    started = time.perf_counter()
    for update in handlers.run(context, inputs):
        for figure in (update.plots or {}).values():
            figure.to_plotly_json()          # what Gradio does to send a figure
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default="benchmarks/results/ui_overhead.json")
    args = parser.parse_args()
    pair = load_pair("embedded", "embedded")
    preverifier = default_preverifier(pair)
    context = AppContext(pair, preverifier, getattr(preverifier, "kind", "heuristic"))
    settings = {"max_new_tokens": args.max_new_tokens, "temperature": 0.7, "seed": 0}
    inputs = PageInputs(PROMPT, settings, chat=pair.use_chat_template, measure_ar=False)
    with_ui_seconds(context, inputs)  # warm-up
    headless, with_ui = [], []
    for _ in range(args.repeats):
        headless.append(headless_seconds(context, inputs))
        with_ui.append(with_ui_seconds(context, inputs))
    report = {"headless_s": headless, "with_ui_s": with_ui, "headless_median_s": statistics.median(headless),
              "with_ui_median_s": statistics.median(with_ui),
              "overhead": statistics.median(with_ui) / statistics.median(headless) - 1, "settings": settings}
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
