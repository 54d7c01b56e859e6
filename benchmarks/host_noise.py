"""How steady is this host for a decode step? AR's one-row step run after run, beside two probes of the host itself.
(docs/measurements.md, "The page against the decoders alone": why AR is the noisiest figure on a 2-vCPU host.)

Every speedup on the page and in the benchmarks divides by AR, so a host that moves AR's step between runs moves
every speedup with it. Three things are timed, interleaved, ``--repeats`` times:
  ar        AR on the default example (seeded, so every run decodes the same tokens): the run's seconds, the
            median and fastest of its one-row steps (each step's ``verify_seconds``), and the process's CPU seconds
            over the run's wall seconds (2.0 on two threads: both busy, computing or spinning, never waiting);
  memory    one thread summing a 256 MB array (DRAM-bound, as a float32 one-row step is), first alone on CPU 0,
            then on CPU 0 and CPU 1 at once: the pair's slower time over the solo time;
  compute   the same with a cache-resident matrix product (compute-bound).
A short pause before each repeat lets the CPUs go idle, as they do between a page's Runs. ``--threads 2,1`` runs
the whole set once per llama.cpp thread count, each in a child process (the count is read when the target loads).

    python benchmarks/host_noise.py --out benchmarks/results/host-noise
    python benchmarks/host_noise.py --repeats 1 --max-new-tokens 4 --threads 1 --array-mb 8   # the suite's form
"""
from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):   # the probes are one thread each, set before numpy loads
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from any folder

from benchmarks.results_writer import write_folder_or_print  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAUSE_S = 0.3              # idle CPUs before each repeat
CHILD_FLAG = "--child-of-threads"


def process_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def steal_seconds() -> float:
    """The host's stolen time so far (all CPUs), from /proc/stat; 0 where there is none to read."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def ar_run(target, drafter, prompt: str, new_tokens: int) -> dict:
    from pacer_core import generate

    started, cpu, steal = time.perf_counter(), process_cpu_seconds(), steal_seconds()
    result = generate(target, drafter, "ar", prompt, max_new_tokens=new_tokens, temperature=0.7, seed=0)
    wall = time.perf_counter() - started
    steps = [event.verify_seconds for event in result.events if getattr(event, "verify_seconds", None)][1:]
    steps = steps or [wall]      # the first step carries the prompt's prefill
    return {"seconds": wall, "step_ms_median": 1000 * statistics.median(steps), "step_ms_fastest": 1000 * min(steps),
            "cpu_over_wall": (process_cpu_seconds() - cpu) / wall, "steal_s": steal_seconds() - steal,
            "token_ids": list(result.token_ids)}


def on_cpu(cpu: int, work, timings: dict, key) -> None:
    """``work()`` on CPU ``cpu`` (where the host lets a thread be placed), its seconds in ``timings[key]``."""
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})
    started = time.perf_counter()
    work()
    timings[key] = time.perf_counter() - started


def pair_over_solo(work) -> dict:
    """``work`` alone on CPU 0 (once untimed first: the CPU comes out of idle), then on CPUs 0 and 1 at once: both
    seconds and the pair's slower over the solo."""
    everywhere = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    solo, pair = {}, {}
    on_cpu(0, work, solo, 0)
    on_cpu(0, work, solo, 0)
    threads = [threading.Thread(target=on_cpu, args=(cpu, work, pair, cpu)) for cpu in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if everywhere is not None:
        os.sched_setaffinity(0, everywhere)
    return {"solo_s": solo[0], "pair_s": max(pair.values()), "pair_over_solo": max(pair.values()) / solo[0]}


def probes(array_mb: int) -> dict:
    import numpy

    array = numpy.ones(array_mb * 1024 * 1024 // 4, dtype=numpy.float32)
    matrix = numpy.full((256, 256), 0.5, dtype=numpy.float32)
    return {"memory": lambda: [array.sum() for _ in range(3)],
            "compute": lambda: [matrix @ matrix for _ in range(200)]}


def measure(repeats: int, new_tokens: int, array_mb: int) -> dict:
    from pacer_core.default_target import target_from_env

    target, drafters = target_from_env()
    prompt = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))[0]["prompt"]
    work = probes(array_mb)
    ar_run(target, drafters.default, prompt, new_tokens)          # warm-up
    runs = {"ar": [], "memory": [], "compute": []}
    for _ in range(repeats):
        time.sleep(PAUSE_S)
        runs["ar"].append(ar_run(target, drafters.default, prompt, new_tokens))
        for name in ("memory", "compute"):
            runs[name].append(pair_over_solo(work[name]))
    same_tokens = all(run["token_ids"] == runs["ar"][0]["token_ids"] for run in runs["ar"])
    for run in runs["ar"]:
        del run["token_ids"]
    return {"threads": int(os.environ.get("PACER_GGUF_THREADS") or 0) or None, "runs": runs,
            "same_tokens": same_tokens, "pair": target.describe(drafters.default)}


def spread(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1],
            "max_over_min": ordered[-1] / ordered[0]}


def summary_of(leg: dict) -> dict:
    runs = leg["runs"]
    return {"ar_seconds": spread([run["seconds"] for run in runs["ar"]]),
            "ar_step_ms_median": spread([run["step_ms_median"] for run in runs["ar"]]),
            "ar_cpu_over_wall": spread([run["cpu_over_wall"] for run in runs["ar"]]),
            "steal_s": sum(run["steal_s"] for run in runs["ar"]),
            "memory_solo_ms": spread([1000 * run["solo_s"] for run in runs["memory"]]),
            "memory_pair_over_solo": spread([run["pair_over_solo"] for run in runs["memory"]]),
            "compute_solo_ms": spread([1000 * run["solo_s"] for run in runs["compute"]]),
            "compute_pair_over_solo": spread([run["pair_over_solo"] for run in runs["compute"]])}


def child_leg(threads: int, args) -> dict:
    """One leg in a child process whose llama.cpp target loads with ``threads`` threads."""
    command = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, "--repeats", str(args.repeats),
               "--max-new-tokens", str(args.max_new_tokens), "--array-mb", str(args.array_mb)]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                               env=os.environ | {"PACER_GGUF_THREADS": str(threads)})
    if completed.returncode != 0:
        raise SystemExit(f"host_noise: the {threads}-thread leg failed:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def fmt_spread(values: dict, digits: int = 2) -> str:
    return (f"{values['median']:.{digits}f} ({values['min']:.{digits}f}-{values['max']:.{digits}f}, "
            f"max/min {values['max_over_min']:.2f})")


def markdown(report: dict) -> str:
    settings = report["settings"]
    lines = [f"# How steady this host is for a decode step ({report['date']})", "",
             f"{report['machine']['cpus']} CPUs ({report['machine']['processor']}); AR on the default example, "
             f"{settings['max_new_tokens']} new tokens at T = 0.7, seed 0; {settings['repeats']} repeats, each after "
             f"a {PAUSE_S} s pause, interleaved with the two host probes ({settings['array_mb']} MB array summed; "
             "256 x 256 product). Medians (min-max, max/min).", "",
             "| llama.cpp threads | AR s | AR one-row step ms | CPU s / wall s | steal s | memory solo ms | "
             "memory pair / solo | compute solo ms | compute pair / solo | same tokens |",
             "| ---: | --- | --- | --- | ---: | --- | --- | --- | --- | --- |"]
    for leg in report["legs"]:
        summary = leg["summary"]
        lines.append(f"| {leg['threads']} | {fmt_spread(summary['ar_seconds'], 3)} | "
                     f"{fmt_spread(summary['ar_step_ms_median'], 1)} | {fmt_spread(summary['ar_cpu_over_wall'])} | "
                     f"{summary['steal_s']:.2f} | {fmt_spread(summary['memory_solo_ms'], 0)} | "
                     f"{fmt_spread(summary['memory_pair_over_solo'])} | {fmt_spread(summary['compute_solo_ms'], 0)} | "
                     f"{fmt_spread(summary['compute_pair_over_solo'])} | {leg['same_tokens']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", default="2,1", help="llama.cpp thread counts, one child process each")
    parser.add_argument("--array-mb", type=int, default=256, help="the memory probe's array (above the caches)")
    parser.add_argument("--out", default=None, help="a results folder (results.json, report.md)")
    parser.add_argument(CHILD_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_of_threads:
        leg = measure(args.repeats, args.max_new_tokens, args.array_mb)
        print(json.dumps(leg | {"summary": summary_of(leg)}))
        return 0
    legs = [child_leg(int(threads), args) for threads in args.threads.split(",")]
    report = {"date": time.strftime("%Y-%m-%d"),
              "settings": {"repeats": args.repeats, "max_new_tokens": args.max_new_tokens,
                           "array_mb": args.array_mb, "temperature": 0.7, "seed": 0,
                           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")},
              "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
              "legs": legs}
    write_folder_or_print(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
