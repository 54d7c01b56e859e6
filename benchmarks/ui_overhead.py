"""How much wall time the UI adds to a run: the same three interleaved decodes (fixed SD, PACER,
SMC-SD) on the embedded pair, once headless and once through the app's own Run handler
(``pacer_core.ui.handlers.run``: three columns of escaped HTML per step, the nine plots and narration
every PLOT_INTERVAL_S, then the oracle, the log-likelihoods, the metrics table and the downloads).
The headless run does the same model work (decodes, oracle, log-likelihoods) without rendering.
No Gradio is imported. Repeats interleaved, medians reported.

On a shared machine the wall times of two separate runs differ by more than the rendering costs, so the
UI run also times its own model work (``RunSession.advance_one``, ``compute_oracle``, ``compute_likelihoods``,
wrapped while it runs): ``render_s`` = its wall time minus that, and ``render_overhead`` = median render_s
÷ median headless time. Both runs share the same load at the same moment, so this figure is the robust one.

    python benchmarks/ui_overhead.py --repeats 3 --max-new-tokens 48
"""
import argparse
import contextlib
import functools
import json
import statistics
import time
from pathlib import Path

from pacer_core import load_pair
from pacer_core.preverifier import default_preverifier
from pacer_core.ui import handlers
from pacer_core.ui.handlers import AppContext, PageInputs
from pacer_core.ui.session import RunSession

PROMPT = "Write a Python function that checks whether a string is a palindrome."


def headless_seconds(context: AppContext, inputs: PageInputs) -> float:
    started = time.perf_counter()
    session = handlers.new_session(context, inputs)
    while not session.finished:
        session.advance()
    if inputs.measure_ar:
        for _ in session.ar_steps():
            pass
    session.compute_oracle()
    session.compute_likelihoods()
    return time.perf_counter() - started


MODEL_WORK = ("advance_one", "compute_oracle", "compute_likelihoods")


@contextlib.contextmanager
def timed_model_work(totals: list):
    """While active, RunSession's model-running methods add their wall time to totals[0]."""
    originals = {name: getattr(RunSession, name) for name in MODEL_WORK}

    def timed(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                totals[0] += time.perf_counter() - started
        return wrapper

    for name, method in originals.items():
        setattr(RunSession, name, timed(method))
    try:
        yield totals
    finally:
        for name, method in originals.items():
            setattr(RunSession, name, method)


def with_ui_seconds(context: AppContext, inputs: PageInputs) -> tuple[float, float]:
    """(wall time of the UI run, the part of it not spent in model work)."""
    with timed_model_work([0.0]) as model:
        started = time.perf_counter()
        for update in handlers.run(context, inputs):
            for figure in (update.plots or {}).values():
                figure.to_plotly_json()          # what Gradio does to send a figure
        total = time.perf_counter() - started
    return total, total - model[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default="benchmarks/results/ui_overhead.json")
    parser.add_argument("--no-ar", action="store_true",
                        help="leave out the AR baseline (the app measures it by default; the speedup plot needs it)")
    args = parser.parse_args()
    pair = load_pair("embedded", "embedded")
    preverifier = default_preverifier(pair)
    context = AppContext(pair, preverifier, getattr(preverifier, "kind", "heuristic"))
    settings = {"max_new_tokens": args.max_new_tokens, "temperature": 0.7, "seed": 0}
    inputs = PageInputs(PROMPT, settings, chat=pair.use_chat_template, measure_ar=not args.no_ar)
    with_ui_seconds(context, inputs)  # warm-up
    headless, with_ui, render = [], [], []
    for _ in range(args.repeats):
        headless.append(headless_seconds(context, inputs))
        total, rendering = with_ui_seconds(context, inputs)
        with_ui.append(total)
        render.append(rendering)
    report = {"headless_s": headless, "with_ui_s": with_ui, "render_s": render,
              "headless_median_s": statistics.median(headless), "with_ui_median_s": statistics.median(with_ui),
              "render_median_s": statistics.median(render),
              "overhead": statistics.median(with_ui) / statistics.median(headless) - 1,
              "render_overhead": statistics.median(render) / statistics.median(headless), "settings": settings,
              "measure_ar": inputs.measure_ar}
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
