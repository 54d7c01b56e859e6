"""Does a decoder run as fast off the main thread as on it? (docs/measurements.md, "Threads and OpenMP waiting")

Times the default pair's AR (and fixed SD) on one prompt in three places, repeats interleaved, medians:
  main       the script's own thread, as every benchmark decodes, and as the page decodes now (app.py's main
             thread loads the models and serves the page's model work: ``pacer_core.compute_thread``);
  worker     a fresh thread while the main thread's OpenMP team is still alive: how the page decoded before
             (Gradio runs each handler on whichever worker thread is free);
  compute    a compute thread of its own (``on_compute_thread`` in a process that did not lend its main thread)
             after the main thread handed its team back.
Each place hands its own OpenMP team back after its run, so the next place starts as the only team in the process.

    python benchmarks/thread_speed.py --out benchmarks/results/thread-speed
    python benchmarks/thread_speed.py --repeats 1 --max-new-tokens 8        # the suite's tiny form
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from any folder

from benchmarks.results_writer import write_folder_or_print  # noqa: E402
from pacer_core import generate, load_target  # noqa: E402
from pacer_core.compute_thread import on_compute_thread, release_openmp_workers  # noqa: E402

PROMPT = "Write a Python function that returns the n-th Fibonacci number."
PLACES = ("main", "worker", "compute")


def decode_seconds(target, drafter, method: str, new_tokens: int) -> float:
    started = time.perf_counter()
    generate(target, drafter, method, PROMPT, max_new_tokens=new_tokens, temperature=0.0)
    return time.perf_counter() - started


def in_fresh_thread(function, *args) -> float:
    """``function(*args)`` on a new thread, the main thread's OpenMP team left alive beside it."""
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(function(*args)), name="bench-worker")
    worker.start()
    worker.join()
    return outcome[0]


def released_after(function, *args) -> float:
    """``function(*args)``, then the calling thread's OpenMP team handed back."""
    try:
        return function(*args)
    finally:
        release_openmp_workers()


def timed_in(place: str, target, drafter, method: str, new_tokens: int) -> float:
    """One run's seconds in ``place``; the main thread's team is alive only while a worker place is timed (``measure``
    hands it back after every place; a fresh thread's team ends with the thread)."""
    args = (target, drafter, method, new_tokens)
    if place == "main":
        return decode_seconds(*args)
    if place == "worker":
        decode_seconds(target, drafter, method, 1)            # the main thread's team alive, as in an app process
        return in_fresh_thread(decode_seconds, *args)
    return on_compute_thread(released_after, decode_seconds, *args)


def measure(target, drafter, methods: list[str], repeats: int, new_tokens: int) -> dict:
    seconds = {method: {place: [] for place in PLACES} for method in methods}
    for method in methods:
        decode_seconds(target, drafter, method, new_tokens)             # warm-up
    for _ in range(repeats):
        for method in methods:
            for place in PLACES:
                seconds[method][place].append(timed_in(place, target, drafter, method, new_tokens))
                release_openmp_workers()
    return seconds


def report_of(seconds: dict, args, describe: dict) -> dict:
    medians = {method: {place: statistics.median(values) for place, values in by_place.items()}
               for method, by_place in seconds.items()}
    return {"settings": {"max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "greedy": True,
                         "prompt": PROMPT, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                         "gomp_spincount": os.environ.get("GOMP_SPINCOUNT")},
            "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
            "pair": describe, "seconds": seconds, "median_seconds": medians,
            "over_main": {method: {place: by[place] / by["main"] for place in PLACES}
                          for method, by in medians.items()}}


def markdown(report: dict) -> str:
    lines = [f"# A decoder on the main thread, a worker thread and the compute thread ({time.strftime('%Y-%m-%d')})",
             "", f"{report['machine']['cpus']} CPUs; target {report['pair']['target']} on "
             f"{report['pair']['target_engine']}, drafter {report['pair']['draft']}; greedy, "
             f"{report['settings']['max_new_tokens']} new tokens, {report['settings']['repeats']} repeats interleaved, "
             f"medians; OMP_WAIT_POLICY={report['settings']['omp_wait_policy']}, "
             f"GOMP_SPINCOUNT={report['settings']['gomp_spincount']}.", "",
             "| method | main s | worker s (main's team alive) | compute s | worker / main | compute / main |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for method, by in report["median_seconds"].items():
        ratio = report["over_main"][method]
        lines.append(f"| {method} | {by['main']:.3f} | {by['worker']:.3f} | {by['compute']:.3f} | "
                     f"{ratio['worker']:.2f} | {ratio['compute']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--methods", default="ar,fixed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default=None, help="a results folder (results.json, report.md)")
    args = parser.parse_args(argv)
    target, drafters = load_target(args.target)
    seconds = measure(target, drafters.default, args.methods.split(","), args.repeats, args.max_new_tokens)
    report = report_of(seconds, args, target.describe(drafters.default))
    write_folder_or_print(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
