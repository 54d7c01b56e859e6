"""Record the workshop's runs for the Replay tab: every run of the exercises about a phenomenon
(``workshop.recorded_runs``), through the page's own Run handler on the embedded pair drafting with the small
draft model (the drafter the guide is written for; on a CPU with llama-cpp-python the app's own default is
gguf), with the page's starting settings and the exercise's changes, the AR baseline measured. Each trace is
what "⬇ JSON trace" exports, plus the title the Replay tab lists it by.

    .venv/bin/python scripts/record_traces.py                 # all of them into assets/traces/
    .venv/bin/python scripts/record_traces.py easy-and-hard   # one exercise's runs

Greedy runs give the same tokens on any machine; the timings (and so the speedups) are this machine's."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pacer_core.default_target import target_from_env  # noqa: E402
from pacer_core.trace import parse_trace  # noqa: E402
from pacer_core.ui import handlers  # noqa: E402
from pacer_core.ui.drafter_switch import app_context, drafter_context  # noqa: E402
from pacer_core.ui.page_types import AppContext, PageInputs  # noqa: E402
from pacer_core.ui.workshop import load_workshop, recorded_runs, starting_settings  # noqa: E402

WORKSHOP_DRAFTER = "small"   # the guide's "16M-parameter draft" (tests/conftest.py's embedded_pair drafts with it too)


def page_inputs(context: AppContext, run) -> PageInputs:
    """What the page sends once the class followed the run (tests/test_workshop.py's page_inputs)."""
    chosen = drafter_context(context, run.drafter).drafter
    settings = starting_settings(context.target, chosen, context.preverifier, context.limits) | run.settings
    return PageInputs(run.prompt, settings, chat=context.target.use_chat_template, measure_ar=True,
                      drafter=run.drafter)


def record(context: AppContext, recorded) -> dict:
    """One run through the Run handler; its trace with the Replay tab's title."""
    *_, final = handlers.run(context, page_inputs(context, recorded.run), plot_interval_s=1e9)
    if final.session is None:
        raise RuntimeError(f"{recorded.path.name}: the run did not start ({final.status})")
    return final.session.trace() | {"title": recorded.title}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Record the workshop's runs into assets/traces/.")
    parser.add_argument("exercises", nargs="*", help="exercise ids (default: every recorded one)")
    parser.add_argument("--draft", default=WORKSHOP_DRAFTER,
                        help=f"the pair's own drafter, as app.py --draft (default: {WORKSHOP_DRAFTER}, the one the "
                        "guide's exercises are written for; a run that names a drafter uses that one)")
    parser.add_argument("--out", type=Path, default=None, help="folder to write to (default: assets/traces/)")
    args = parser.parse_args(argv)
    chosen = [item for item in recorded_runs(load_workshop())
              if not args.exercises or item.exercise.id in args.exercises]
    target, drafters = target_from_env(draft=args.draft)
    context = app_context(target, drafters)
    for item in chosen:
        started = time.perf_counter()
        text = json.dumps(record(context, item), ensure_ascii=False, separators=(",", ":"))
        parse_trace(text)                                   # what the Replay tab will accept
        path = (args.out or item.path.parent) / item.path.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
        print(f"{path}: {len(text) / 1024:.0f} KB in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
