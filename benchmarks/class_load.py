"""A class on one Space: many ``gradio_client`` visitors at once against one app (``app.py`` in a subprocess on
127.0.0.1 and a free port, stopped at the end), some replaying a shipped trace through the Replay API
(``/replay_open`` then ``/replay_step`` … ``/replay_end``), some running live (``/run`` with few new tokens).

Each client connects, all wait at one barrier, then all submit at once. Per client it records the wait before its
first call started (the queue), the total time, the worst place in the queue it was shown and the outcome:
``result``, ``queue full`` (the queue's own "Queue is full" refusal) or ``error`` / ``timeout``. A thread samples
the app's resident memory (psutil) every ``--sample-s``; the whole run stops itself at ``--deadline-s``. The
figures go to ``OUT/results.json`` (one entry per setting: a second setting with the same ``--out`` is added
beside the first) and ``OUT/report.md``.

    python benchmarks/class_load.py                                     # 20 replaying + 10 live, app defaults
    python benchmarks/class_load.py --concurrency 2 --queue-size 16     # the same under other queue settings
    python benchmarks/class_load.py --replay-only --live-clients 0       # the no-model replay Space

The clients run in this process, on the same machine as the app: their own work (decoding the streamed
updates) competes with the app for the CPU, so the waits are an upper bound for visitors on other machines.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacer_core.testing.app_runner import AppStartError, running_app  # noqa: E402

TRACES_DIR = ROOT / "assets" / "traces"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "class-load"
QUEUE_FULL = "Queue is full"
POLL_S = 0.05                       # how often a client looks at its call's status
STARTED = {"PROCESSING", "ITERATING", "PROGRESS", "FINISHED", "CANCELLED"}


@dataclass
class ClientRecord:
    """One visitor: what it did and what it saw (times in seconds from the common start)."""
    kind: str                           # "replay" or "live"
    index: int
    outcome: str = "timeout"            # result, queue full, error, timeout
    message: str = ""
    connect_s: float | None = None      # Client(url): the page's config and API description
    wait_s: float | None = None         # submit of the first call -> its processing started
    queued_s: float = 0.0               # all calls' waits together
    busy_s: float = 0.0                 # all calls' processing together (started -> result)
    total_s: float | None = None        # the common start -> the last call's result
    calls: int = 0
    worst_place: int | None = None      # the highest queue place it was shown (1 = next)


@dataclass
class MemorySampler:
    """The app process's resident memory (with any children), sampled on a thread."""
    pid: int
    every_s: float
    samples: list = field(default_factory=list)     # [(seconds since start, MiB)]
    stop: threading.Event = field(default_factory=threading.Event)

    def rss_mib(self) -> float:
        process = psutil.Process(self.pid)
        total = process.memory_info().rss
        for child in process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total / 2**20

    def run(self, started: float) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append((round(time.time() - started, 2), round(self.rss_mib(), 1)))
            except psutil.NoSuchProcess:
                return
            self.stop.wait(self.every_s)


def percentile(values: list[float], share: float) -> float | None:
    """Linear interpolation between the closest ranks (share 0.5 = median); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# ---------------------------------------------------------------- one call, one client


class Endpoint:
    """An endpoint of the app called with values named by their UI labels; outputs come back keyed by label."""

    def __init__(self, client, name: str):
        info = client.view_api(return_format="dict", print_info=False)["named_endpoints"][name]
        self.client, self.name = client, name
        self.params = {p["label"]: p["parameter_name"] for p in info["parameters"]}
        self.returns = [r["label"] for r in info["returns"]]

    def submit(self, positional=(), **by_label):
        return self.client.submit(*positional, api_name=self.name,
                                  **{self.params[label]: value for label, value in by_label.items()})

    def outputs(self, values) -> dict:
        return dict(zip(self.returns, values))


def watched_call(record: ClientRecord, endpoint: Endpoint, deadline: float, positional=(), **by_label) -> dict:
    """Submit one call and follow its status until it ends: the queue wait and worst place go on the record."""
    submitted = time.time()
    job = endpoint.submit(positional, **by_label)
    started = None
    while not job.done():
        if time.time() > deadline:
            job.cancel()
            raise TimeoutError("the load test's deadline passed")
        status = job.status()                   # the latest message, stamped when it arrived
        if status.code.name == "IN_QUEUE" and status.rank is not None:
            record.worst_place = max(record.worst_place or 0, status.rank + 1)
        if started is None and status.code.name in STARTED:
            started = status.time.timestamp()
        time.sleep(POLL_S)
    result = job.result()
    finished = time.time()
    waited = (started or finished) - submitted
    record.busy_s = round(record.busy_s + finished - (started or finished), 2)
    record.wait_s = record.wait_s if record.wait_s is not None else round(waited, 2)
    record.queued_s = round(record.queued_s + waited, 2)
    record.calls += 1
    return endpoint.outputs(result)


def status_line(outputs: dict) -> str:
    """The page's status line among a call's outputs (the HTML with class run-status), or ""."""
    return next((value for value in outputs.values() if isinstance(value, str) and 'class="run-status' in value), "")


def status_kind(status_html: str) -> str:
    """done, error, busy or info: the run-<kind> class of the page's status line."""
    for kind in ("done", "error", "busy", "info"):
        if f"run-{kind}" in (status_html or ""):
            return kind
    return "unknown"


def replay_visit(record: ClientRecord, client, trace: Path, steps: int, deadline: float) -> str:
    """Open a shipped trace, step through a few target passes, then show the whole run; the last status line."""
    watched_call(record, Endpoint(client, "/replay_open"), deadline, (str(trace),))
    step = Endpoint(client, "/replay_step")
    for _ in range(steps):
        watched_call(record, step, deadline)
    last = watched_call(record, Endpoint(client, "/replay_end"), deadline)
    return status_line(last)


def live_visit(record: ClientRecord, client, settings: dict, deadline: float) -> str:
    """One ▶ Run with the page's settings except those given; the final status line."""
    return status_line(watched_call(record, Endpoint(client, "/run"), deadline, **settings))


def released(gate: threading.Barrier, deadline: float) -> None:
    """Wait for the others at the gate (a client that never connects does not hold the class back)."""
    try:
        gate.wait(timeout=max(1.0, deadline - time.time()))
    except threading.BrokenBarrierError:
        pass


def connect(record: ClientRecord, url: str):
    """Client(url) timed on the record, or None with the reason as the outcome."""
    from gradio_client import Client

    connecting = time.time()
    try:
        client = Client(url, verbose=False, download_files=False, httpx_kwargs={"timeout": 300})
    except Exception as error:  # noqa: BLE001 - a refused connection is an outcome
        record.outcome, record.message = "error", f"connect: {type(error).__name__}: {error}"[:300]
        return None
    record.connect_s = round(time.time() - connecting, 2)
    return client


def outcome_of(error: Exception) -> tuple[str, str]:
    """queue full (the queue's own refusal), timeout, or error with its message."""
    if isinstance(error, TimeoutError):
        return "timeout", str(error)
    if QUEUE_FULL.lower() in str(error).lower():
        return "queue full", str(error)[:300]
    return "error", f"{type(error).__name__}: {error}"[:300]


def visit(record: ClientRecord, url: str, plan: dict, gate: threading.Barrier, started: list, deadline: float):
    """One client from connecting to its outcome; nothing it meets escapes (the outcome says what happened)."""
    client = connect(record, url)
    released(gate, deadline)
    if client is None:
        return
    try:
        if record.kind == "replay":
            status = replay_visit(record, client, plan["trace"], plan["replay_steps"], deadline)
        else:
            status = live_visit(record, client, plan["live_settings"], deadline)
        record.outcome = "result" if status_kind(status) in ("done", "info") else "error"
        record.message = "" if record.outcome == "result" else status[:300]
    except Exception as error:  # noqa: BLE001 - QueueError, AppError, timeouts, connection errors: all outcomes
        record.outcome, record.message = outcome_of(error)
    finally:
        record.total_s = round(time.time() - started[0], 2)
        client.close()


# ---------------------------------------------------------------- the class


def client_plan(args) -> list[ClientRecord]:
    return ([ClientRecord("replay", i) for i in range(args.replay_clients)]
            + [ClientRecord("live", i) for i in range(args.live_clients)])


def traces(names: list[str] | None) -> list[Path]:
    paths = [TRACES_DIR / name for name in names] if names else sorted(TRACES_DIR.glob("*.json"))
    missing = [str(path) for path in paths if not path.exists()]
    if missing or not paths:
        raise SystemExit(f"no such trace: {', '.join(missing) or TRACES_DIR}")
    return paths


def live_settings(args) -> dict:
    settings = {"Max new tokens": args.max_new_tokens, "Measure the AR baseline too": args.measure_ar}
    if args.prompt is not None:
        settings["Prompt"] = args.prompt
    return settings


def run_class(url: str, args, records: list[ClientRecord]) -> float:
    """All clients in threads, released together; returns the seconds the class took."""
    shipped = traces(args.traces)
    gate = threading.Barrier(len(records) + 1)
    started = [time.time()]
    deadline = time.time() + args.deadline_s
    threads = []
    for record in records:
        plan = {"trace": shipped[record.index % len(shipped)], "replay_steps": args.replay_steps,
                "live_settings": live_settings(args)}
        threads.append(threading.Thread(target=visit, args=(record, url, plan, gate, started, deadline),
                                        daemon=True))
        threads[-1].start()
    released(gate, deadline)
    started[0] = time.time()
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.time()) + 30)
    return time.time() - started[0]


def app_pid(url: str) -> int:
    """The app.py process this script started: the child listening on the URL's port."""
    port = url.rstrip("/").rsplit(":", 1)[1]
    for child in psutil.Process().children(recursive=True):
        try:
            if "app.py" in " ".join(child.cmdline()) and port in child.cmdline():
                return child.pid
        except psutil.NoSuchProcess:
            continue
    raise RuntimeError(f"no app.py child serves {url}")


def still_serving(url: str, pid: int) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status == 200 and psutil.pid_exists(pid)
    except OSError:
        return False


def app_env(args) -> dict:
    """What app.py reads: only the settings given here (the rest are the app's own defaults)."""
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")} if os.environ.get("OMP_NUM_THREADS") else {}
    for name, value in (("PACER_CONCURRENCY", args.concurrency), ("PACER_QUEUE_SIZE", args.queue_size),
                        ("PACER_TARGET", args.target), ("PACER_DRAFT", args.draft)):
        if value is not None:
            env[name] = str(value)
    if args.replay_only:
        env["PACER_REPLAY_ONLY"] = "1"
    return env


def measure(args) -> dict:
    """Start the app, run the class against it, sample its memory, stop it; the run's figures."""
    records = client_plan(args)
    with tempfile.TemporaryDirectory() as folder:
        log_path = Path(folder) / "app.log"
        started_app = time.time()
        with running_app(log_path, app_env(args)) as url:
            startup_s = time.time() - started_app
            pid = app_pid(url)
            sampler = MemorySampler(pid, args.sample_s)
            idle_mib = sampler.rss_mib()
            sampling = threading.Thread(target=sampler.run, args=(time.time(),), daemon=True)
            sampling.start()
            seconds = run_class(url, args, records)
            alive = still_serving(url, pid)
            sampler.stop.set()
            sampling.join(timeout=5)
        log = log_path.read_text(errors="replace")
    return summary(args, records, sampler, idle_mib, startup_s, seconds, alive, log)


# ---------------------------------------------------------------- figures and files


def spread(values: list[float]) -> dict:
    return {"n": len(values), "p50": rounded(percentile(values, 0.5)), "p95": rounded(percentile(values, 0.95)),
            "max": rounded(max(values) if values else None)}


def rounded(value):
    return None if value is None else round(value, 2)


def by_kind(records: list[ClientRecord], kind: str | None) -> dict:
    chosen = [r for r in records if kind is None or r.kind == kind]
    outcomes = {}
    for record in chosen:
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
    served = [r for r in chosen if r.outcome == "result"]
    return {"clients": len(chosen), "outcomes": outcomes,
            "wait_s": spread([r.wait_s for r in served if r.wait_s is not None]),
            "total_s": spread([r.total_s for r in served if r.total_s is not None]),
            "busy_s": spread([r.busy_s for r in served]),
            "connect_s": spread([r.connect_s for r in chosen if r.connect_s is not None]),
            "worst_place": max((r.worst_place or 0 for r in chosen), default=0)}


def summary(args, records, sampler, idle_mib, startup_s, seconds, alive, log) -> dict:
    peak = max((mib for _, mib in sampler.samples), default=idle_mib)
    return {
        "setting": args.label or setting_label(args),
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
        "settings": {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()
                     if key not in ("out", "append")},
        "app": {"pair": pair_line(log), "startup_s": round(startup_s, 1), "still_serving": alive,
                "tracebacks_in_log": log.count("Traceback (most recent call last)")},
        "memory_mib": {"idle": round(idle_mib, 1), "peak": round(peak, 1),
                       "end": sampler.samples[-1][1] if sampler.samples else None, "samples": sampler.samples},
        "class_s": round(seconds, 1),
        "all": by_kind(records, None), "replay": by_kind(records, "replay"), "live": by_kind(records, "live"),
        "clients": [asdict(record) for record in records],
    }


def pair_line(log: str) -> str:
    """What app.py said it loaded ("target … | drafter … | device dtype"), or that it loaded no model."""
    lines = [line for line in log.splitlines() if line.startswith(("[pacer] target", "[pacer] replay only"))]
    return lines[0].removeprefix("[pacer] ") if lines else "unknown"


def setting_label(args) -> str:
    concurrency = "default" if args.concurrency is None else args.concurrency
    queue = "default" if args.queue_size is None else args.queue_size
    return (f"{args.replay_clients} replay + {args.live_clients} live, concurrency {concurrency}, "
            f"queue {queue}{', replay only' if args.replay_only else ''}")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except OSError:
        return "unknown"


def cell(value) -> str:
    return "–" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def run_section(run: dict) -> list[str]:
    after = "still served the page" if run["app"]["still_serving"] else "was DOWN"
    lines = [f"## {run['setting']}", "",
             f"{run['when']} ({run['commit']}); {run['app'].get('pair', 'unknown')}; app started in "
             f"{run['app']['startup_s']} s; the class took {run['class_s']} s; afterwards the app {after}, "
             f"{run['app']['tracebacks_in_log']} tracebacks in its log.", "",
             f"Memory (app process, resident): {run['memory_mib']['idle']} MiB idle, peak "
             f"**{run['memory_mib']['peak']} MiB**, {cell(run['memory_mib']['end'])} MiB at the end.", "",
             "| clients | n | outcomes | wait p50 | wait p95 | wait max | busy p50 | total p50 | total p95 | "
             "worst queue place |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind in ("replay", "live", "all"):
        part = run[kind]
        if not part["clients"]:
            continue
        outcomes = ", ".join(f"{count} {name}" for name, count in sorted(part["outcomes"].items()))
        lines.append(f"| {kind} | {part['clients']} | {outcomes} | {cell(part['wait_s']['p50'])} | "
                     f"{cell(part['wait_s']['p95'])} | {cell(part['wait_s']['max'])} | {cell(part['busy_s']['p50'])} | "
                     f"{cell(part['total_s']['p50'])} "
                     f"| {cell(part['total_s']['p95'])} | {part['worst_place']} |")
    problems = [c for c in run["clients"] if c["outcome"] != "result"]
    if problems:
        lines += ["", "Not served:", ""] + [f"- {c['kind']} {c['index']}: {c['outcome']}: {c['message']}"
                                           for c in problems[:12]]
    settings = run["settings"]
    lines += ["", f"Settings: {json.dumps({k: settings[k] for k in sorted(settings)})}", ""]
    return lines


def write_report(out: Path, runs: list[dict]) -> None:
    lines = ["# Class load: many visitors on one app", "",
             "`python benchmarks/class_load.py` (see its docstring). Waits (s) run from a call's submit to the moment "
             "it started (its time in the queue; for a replaying client its first call), busy the time its "
             "calls ran, totals from the common start to the client's last result, all over the clients served. Queue "
             "places are those the queue showed the client (1 = next). The clients ran on the app's own machine.", ""]
    for run in runs:
        lines += run_section(run)
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")


def save(out: Path, run: dict, append: bool) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    runs = json.loads(path.read_text())["runs"] if append and path.exists() else []
    runs = [r for r in runs if r["setting"] != run["setting"]] + [run]
    path.write_text(json.dumps({"runs": runs}, indent=1), encoding="utf-8")
    write_report(out, runs)
    return runs


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay-clients", type=int, default=20)
    parser.add_argument("--live-clients", type=int, default=10)
    parser.add_argument("--traces", nargs="*", default=None, help="file names in assets/traces the replaying "
                        "clients take in turn (default: all)")
    parser.add_argument("--replay-steps", type=int, default=5, help="Step ▸ presses before ▸▸ Whole run")
    parser.add_argument("--prompt", default=None, help="the live clients' prompt (default: the page's)")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--measure-ar", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--concurrency", type=int, default=None, help="PACER_CONCURRENCY (default: the app's)")
    parser.add_argument("--queue-size", type=int, default=None, help="PACER_QUEUE_SIZE (default: the app's)")
    parser.add_argument("--replay-only", action="store_true", help="app.py --replay-only (no live clients then)")
    parser.add_argument("--target", default=None, help="PACER_TARGET (default: the app's, the embedded pair)")
    parser.add_argument("--draft", default=None, help="PACER_DRAFT (default: the app's)")
    parser.add_argument("--deadline-s", type=float, default=900.0, help="the clients give up after this")
    parser.add_argument("--sample-s", type=float, default=0.25, help="memory sampling period")
    parser.add_argument("--label", default=None, help="the setting's name in the report (default: from flags)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--append", action="store_true", help="keep the other settings already in OUT")
    args = parser.parse_args(argv)
    if args.replay_only and args.live_clients:
        parser.error("--replay-only serves no model: use --live-clients 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        run = measure(args)
    except AppStartError as failure:
        print(f"[class-load] {failure}", file=sys.stderr)
        return 2
    save(args.out, run, args.append)
    part = run["all"]
    print(f"[class-load] {run['setting']}: {part['outcomes']}; wait p50 {part['wait_s']['p50']} s, p95 "
          f"{part['wait_s']['p95']} s; peak {run['memory_mib']['peak']} MiB; still serving: "
          f"{run['app']['still_serving']}")
    return 0 if run["app"]["still_serving"] else 1


if __name__ == "__main__":
    sys.exit(main())
