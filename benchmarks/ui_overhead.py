"""How much wall time the UI adds to a run: the same three interleaved decodes (fixed SD, PACER,
SMC-SD) on the embedded pair, once headless and once through the app's own Run handler
(``pacer_core.ui.handlers.run``: three columns of escaped HTML per step, the nine plots and narration
at the end, then the oracle, the log-likelihoods, the metrics table and the downloads).
The headless run does the same model work (decodes, oracle, log-likelihoods) without rendering.
No Gradio is imported. Repeats interleaved, medians reported.

On a shared machine the wall times of two separate runs differ by more than the rendering costs, so the
UI run also times its own model work (``RunSession.advance_one``, ``compute_oracle``, ``compute_likelihoods``,
wrapped while it runs): ``render_s`` = its wall time minus that, and ``render_overhead`` = median render_s
÷ median headless time. Both runs share the same load at the same moment, so this figure is the robust one.
Since Run times each method alone and then replays the columns at the pace each ran (ui/race.py),
``render_s`` includes that replay (as long as the slowest method's own time): time the page adds, not time
any decoder is charged with.

    python benchmarks/ui_overhead.py --repeats 3 --max-new-tokens 48

Long answers (docs/measurements.md, "Long answers and long prompts"): ``--ignore-eos`` keeps every method
generating to the budget (a run that stopped at its end-of-text token would not measure 512 tokens), and
``--record FILE`` keeps the UI run's events and step times. ``--replay FILE`` then runs the Run handler of the
code on the path (e.g. an older checkout's, with ``PYTHONPATH``) over those recorded events with no model at
all, on a clock that advances by each recorded step's time, so plots are redrawn when they were in the real
run: the render cost of two versions of the page on the same events, at the cost of rendering only.

    python benchmarks/ui_overhead.py --repeats 1 --max-new-tokens 512 --ignore-eos --record run512.pkl
    PYTHONPATH=/path/to/old/checkout python benchmarks/ui_overhead.py --replay run512.pkl
"""
import argparse
import contextlib
import functools
import json
import pickle
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from any folder

from pacer_core import load_target, method_table  # noqa: E402
from pacer_core.compute_thread import on_compute_thread, release_openmp_workers  # noqa: E402
from pacer_core.preverifier import default_preverifier  # noqa: E402
from pacer_core.ui import handlers  # noqa: E402
from pacer_core.ui.handlers import AppContext, PageInputs  # noqa: E402
from pacer_core.ui.replay import RecordedTarget  # noqa: E402
from pacer_core.ui.session import MethodRun, RunSession  # noqa: E402

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
def timed_model_work(totals: list, calls: list | None = None):
    """While active, RunSession's model-running methods add their wall time to totals[0] (and append
    (name, the run's method or None, seconds, what the call added: an event, the Result or None) to
    ``calls``)."""
    originals = {name: getattr(RunSession, name) for name in MODEL_WORK}

    def timed(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            run = args[0] if args and isinstance(args[0], MethodRun) else None   # the scoring passes take logits
            before = (len(run.events), run.result) if run is not None else None
            started = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                seconds = time.perf_counter() - started
                totals[0] += seconds
                if calls is not None:
                    added = None
                    if run is not None:
                        added = run.events[-1] if len(run.events) > before[0] else (
                            run.result if run.result is not before[1] else None)
                    calls.append((method.__name__, run.method if run is not None else None, seconds, added))
        return wrapper

    for name, method in originals.items():
        setattr(RunSession, name, timed(method))
    try:
        yield totals
    finally:
        for name, method in originals.items():
            setattr(RunSession, name, method)


def with_ui_seconds(context: AppContext, inputs: PageInputs, calls: list | None = None) -> tuple[float, float, object]:
    """(wall time of the UI run, the part of it not spent in model work, the finished session). ``calls``
    gets every model call's (name, the run's method, seconds) in order (``--record``)."""
    session = None
    with timed_model_work([0.0], calls) as model:
        started = time.perf_counter()
        for update in handlers.run(context, inputs):
            for figure in (update.plots or {}).values():
                figure.to_plotly_json()          # what Gradio does to send a figure
            session = update.session or session
        total = time.perf_counter() - started
    return total, total - model[0], session


# ---------------------------------------------------------------- --record / --replay

def recording(session, calls: list, settings: dict, measure_ar: bool) -> dict:
    """What a replay needs from a finished UI run: each model call in order with its time and what it added
    (an event, the Result, or the oracle / likelihood values), the pair's description and the inputs."""
    steps = [call for call in calls if call[0] != "advance_one" or call[3] is not None]
    return {"steps": steps, "describe": session.target.describe(session.drafter), "prompt": session.prompt,
            "prompt_ids": list(session.prompt_ids), "settings": settings, "measure_ar": measure_ar,
            "session_settings": dict(session.settings),
            "chat": session.chat, "errors": {run.method: run.error for run in session.runs.values() if run.error},
            "oracle": (session.oracle, session.oracle_steps, session.oracle_greedy, session.oracle_note),
            "logliks": dict(session.logliks), "proposal_kl": session.proposal_kl}


class VirtualClock:
    """``time`` for the handlers module during a replay: perf_counter runs at real speed plus every recorded
    model call's seconds (so the plots are redrawn on the real run's schedule); the rest is ``time``'s."""

    def __init__(self):
        self.offset = 0.0

    def perf_counter(self) -> float:
        return time.perf_counter() + self.offset

    def __getattr__(self, name):
        return getattr(time, name)


def replay_session_class(clock: VirtualClock, recorded: dict):
    """A RunSession of the code on the path whose model calls hand out the recorded items in order."""
    class ReplaySession(RunSession):
        def __init__(self, *args, **kwargs):      # noqa: D401 - no model, no validation: the recorded run's
            self.target, self.prompt, self.chat = RecordedTarget(recorded["describe"]), recorded["prompt"], recorded["chat"]
            self.settings = dict(recorded["session_settings"])
            self.raw_settings, self.preverifier, self.limits = dict(recorded["settings"]), None, None
            self.cancel, self.prompt_ids, self.prompt_note = threading.Event(), recorded["prompt_ids"], None
            self.runs = {method: MethodRun(method, error=recorded["errors"].get(method))
                         for method in method_table.column_keys()}
            self.ar = MethodRun("ar") if recorded["measure_ar"] else None
            self.oracle = self.oracle_steps = self.oracle_note = self.proposal_kl = self.pending_verdict = None
            self.oracle_greedy, self.logliks, self.created, self.drafter = True, {}, time.time(), "small"
            self._queue = list(recorded["steps"])

        def _take(self, name: str, method: str | None):
            for index, (kind, owner, seconds, item) in enumerate(self._queue):
                if kind == name and (method is None or owner == method):
                    del self._queue[index]
                    clock.offset += seconds
                    return item
            return None

        def advance_one(self, run) -> bool:
            if run.done:
                return False
            item = self._take("advance_one", run.method)
            if item is None:
                run.error = run.error or "replay ended"
            elif getattr(item, "kind", None) == "result":
                run.result = item
            else:
                run.events.append(item)
            return True

        def ar_steps(self):
            if self.ar is None:
                self.ar = MethodRun("ar")
            while not self.ar.done:
                self.advance_one(self.ar)
                yield self.ar

        def compute_oracle(self) -> None:
            self._take("compute_oracle", None)
            self.oracle, self.oracle_steps, self.oracle_greedy, self.oracle_note = recorded["oracle"]

        def compute_likelihoods(self) -> None:
            self._take("compute_likelihoods", None)
            self.logliks, self.proposal_kl = dict(recorded["logliks"]), recorded["proposal_kl"]

    return ReplaySession


def replay_render_seconds(recorded: dict) -> tuple[float, float, int]:
    """(render seconds, recorded model seconds, updates) of the Run handler of the code on the path over a
    recorded run."""
    clock = VirtualClock()
    session_class = replay_session_class(clock, recorded)
    original_new_session, original_time = handlers.new_session, handlers.time
    handlers.new_session = lambda context, inputs: session_class()
    handlers.time = clock
    context = AppContext(RecordedTarget(recorded["describe"]), None, None, "trained")
    inputs = PageInputs(recorded["prompt"], dict(recorded["settings"]), chat=recorded["chat"],
                        measure_ar=recorded["measure_ar"])
    try:
        updates, started = 0, time.perf_counter()
        for update in handlers.run(context, inputs):
            for figure in (update.plots or {}).values():
                figure.to_plotly_json()
            updates += 1
        render = time.perf_counter() - started
    finally:
        handlers.new_session, handlers.time = original_new_session, original_time
    return render, sum(seconds for _, _, seconds, _ in recorded["steps"]), updates


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default="benchmarks/results/ui_overhead.json")
    parser.add_argument("--no-ar", action="store_true",
                        help="leave out the AR baseline (the app measures it by default; the speedup plot needs it)")
    parser.add_argument("--ignore-eos", action="store_true", help="generate to the budget past end-of-text")
    parser.add_argument("--record", metavar="FILE", help="keep the last UI run's events and step times (pickle)")
    parser.add_argument("--replay", metavar="FILE", help="render a recorded run with the code on the path, no model")
    parser.add_argument("--no-headless", action="store_true",
                        help="no separate headless run: the denominator is the model work inside the UI run itself "
                             "(the same decodes, oracle and likelihoods, timed as they run; half the machine time)")
    args = parser.parse_args()
    if args.replay:
        recorded = pickle.loads(Path(args.replay).read_bytes())
        render, model, updates = replay_render_seconds(recorded)
        report = {"replay": args.replay, "render_s": render, "recorded_model_s": model, "updates": updates,
                  "headless_s": recorded.get("headless_s"),
                  "render_overhead": render / (recorded.get("headless_s") or model),
                  "settings": recorded["settings"], "measure_ar": recorded["measure_ar"],
                  "ignore_eos": recorded.get("ignore_eos")}
        Path(args.out).write_text(json.dumps(report, indent=2))
        print(json.dumps(report, indent=2))
        return
    target, drafters = load_target("embedded", "embedded")
    release_openmp_workers()    # all model work from here on runs on the compute thread, the page's and headless alike
    if args.ignore_eos:
        from scaling import without_stops

        target = without_stops(target)
    preverifier = default_preverifier(target, drafters.default)
    context = AppContext(target, drafters.default, preverifier, getattr(preverifier, "kind", "heuristic"))
    settings = {"max_new_tokens": args.max_new_tokens, "temperature": 0.7, "seed": 0}
    inputs = PageInputs(PROMPT, settings, chat=target.use_chat_template, measure_ar=not args.no_ar)
    with_ui_seconds(context, PageInputs(PROMPT, settings | {"max_new_tokens": 8}, chat=inputs.chat,
                                        measure_ar=inputs.measure_ar))  # warm-up (kernels, lazy loads)
    headless, with_ui, render, calls, session = [], [], [], [], None
    for _ in range(args.repeats):
        if not args.no_headless:
            headless.append(on_compute_thread(headless_seconds, context, inputs))
        calls.clear()
        total, rendering, session = with_ui_seconds(context, inputs, calls)
        with_ui.append(total)
        render.append(rendering)
        if args.no_headless:
            headless.append(total - rendering)
    report = {"headless_s": headless, "with_ui_s": with_ui, "render_s": render,
              "headless_median_s": statistics.median(headless), "with_ui_median_s": statistics.median(with_ui),
              "render_median_s": statistics.median(render),
              "overhead": statistics.median(with_ui) / statistics.median(headless) - 1,
              "render_overhead": statistics.median(render) / statistics.median(headless), "settings": settings,
              "measure_ar": inputs.measure_ar, "ignore_eos": args.ignore_eos,
              "headless": "model work inside the UI run" if args.no_headless else "a separate run",
              "new_tokens": {method: len(result.token_ids) for method, result in session.results().items()}}
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    if args.record:
        recorded = recording(session, calls, settings, inputs.measure_ar)
        recorded |= {"headless_s": headless[-1], "ignore_eos": args.ignore_eos}
        Path(args.record).write_bytes(pickle.dumps(recorded))


if __name__ == "__main__":
    main()
