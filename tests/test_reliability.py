"""Reliability of the served app: four clients at once each get their own, uncorrupted
result; Stop ends a run within about one step; a client that cancels or disconnects does not leave
its run going; a decoder failing mid-run shows one error line and the app keeps serving; the CLIs
report bad arguments in one line without a traceback.

The apps here run in-process on the tiny pair (pacer_core/testing/tiny.py) with a forward pre-hook on the
target model that counts target forward passes and can slow each one down, so "one step" and
"the run stopped" can be measured on the server side."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from test_app_server import Api, free_port
from pacer_core.testing.tiny import tiny_pair
from pacer_core.ui import race

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
COLUMNS = ("Fixed-length SD", "PACER", "SMC-SD (approximate)")


class CountingPair:
    """A tiny pair (with its drafter) whose target counts its forward passes and sleeps ``delay`` seconds in each."""

    def __init__(self):
        self.target, self.drafter = tiny_pair()
        self.delay = 0.0
        self.calls = 0
        self.lock = threading.Lock()
        self.target.model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        with self.lock:
            self.calls += 1
        if self.delay:
            time.sleep(self.delay)

    def wait_for_calls(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while self.calls < count:
            assert time.time() < deadline, f"only {self.calls} target calls after {timeout} s"
            time.sleep(0.02)

    def settle(self, quiet_s: float = 1.0, timeout: float = 30.0) -> float:
        """Wait until no target call happens for ``quiet_s``; return when the last call came (s)."""
        started = last_change = time.time()
        seen = self.calls
        while time.time() - last_change < quiet_s:
            assert time.time() - started < timeout, "the target kept running"
            time.sleep(0.05)
            if self.calls != seen:
                seen, last_change = self.calls, time.time()
        return last_change - started


def start_app(counting: CountingPair, concurrency: int):
    from pacer_core.drafters import LoadedDrafters
    from pacer_core.ui.layout import build_ui, serve

    demo = build_ui(counting.target, LoadedDrafters.around(counting.drafter))
    port = free_port()
    serve(demo, host="127.0.0.1", port=port, concurrency=concurrency, prevent_thread_lock=True, quiet=True)
    return demo, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def wide_app():
    """Four runs may decode at the same time (PACER_CONCURRENCY=4 does this for app.py)."""
    counting = CountingPair()
    demo, url = start_app(counting, concurrency=4)
    yield counting, url
    demo.close()


@pytest.fixture(scope="module")
def narrow_app():
    """One run at a time, the default: a run left going would make the next request wait."""
    counting = CountingPair()
    demo, url = start_app(counting, concurrency=1)
    yield counting, url
    demo.close()


def client_for(url):
    from gradio_client import Client

    return Client(url, verbose=False)


def run_kwargs(api: Api, **by_label) -> dict:
    return {api.params[label]: value for label, value in by_label.items()}


CALL_S = 0.05     # each target call's added delay while a run is stopped, cancelled or left
LONG_RUN = {"Prompt": "t1 t2 t3", "Max new tokens": 240, "Temperature (0 = greedy)": 0.8, "Seed": 5,
            "Measure the AR baseline too": True}


@contextmanager
def slow_long_run(counting, client, run):
    """Submit LONG_RUN with every target call slowed down, yield its job once 12 calls have happened,
    and restore full speed afterwards."""
    counting.delay = CALL_S
    try:
        job = client.submit(api_name="/run", **run_kwargs(run, **LONG_RUN))
        counting.wait_for_calls(counting.calls + 12)
        yield job
    finally:
        counting.delay = 0.0


# ---------------------------------------------------------------- 1. concurrency


def test_four_clients_at_once_each_get_their_own_exact_result(wide_app, monkeypatch):
    from pacer_core import generate
    from pacer_core.ui import handlers
    from pacer_core.ui.session import RunSession

    counting, url = wide_app
    windows: dict[str, list[float]] = {}

    class TimedSession(RunSession):      # records when each run decoded, to prove the runs took turns
        def advance_one(self, run):
            windows.setdefault(self.prompt, []).append(time.perf_counter())
            return super().advance_one(run)

    monkeypatch.setattr(handlers, "RunSession", TimedSession)
    requests = [("t1 t2 t3", 0.0, 0), ("t9 t8", 0.8, 1), ("t20 t21 t22 t23", 0.0, 7), ("t40", 1.2, 123)]
    clients = [client_for(url) for _ in requests]
    apis = [Api(client, "/run") for client in clients]
    barrier = threading.Barrier(len(requests))
    outputs, failures = [None] * len(requests), []

    def one(index):
        prompt, temperature, seed = requests[index]
        try:
            barrier.wait(timeout=60)
            outputs[index] = apis[index](**{"Prompt": prompt, "Max new tokens": 16, "Seed": seed,
                                            "Temperature (0 = greedy)": temperature,
                                            "Measure the AR baseline too": False})
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(f"{prompt}: {error!r}")

    counting.delay = 0.04                # long enough for the four runs to overlap on any machine
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    counting.delay = 0.0
    assert not failures, failures
    spans = sorted((min(times), max(times)) for times in windows.values())
    assert len(spans) == 4                # four runs at once, but their decoding took turns (timed alone)
    assert all(end < next_start for (_, end), (next_start, _) in zip(spans, spans[1:])), "two runs decoded at once"

    for (prompt, temperature, seed), out in zip(requests, outputs):
        assert "run-done" in out["Run status"], out["Run status"]
        trace = json.loads(Path(out["⬇ JSON trace"]).read_text())
        assert trace["prompt"] == prompt and trace["settings"]["seed"] == seed
        assert trace["settings"]["temperature"] == temperature
        methods = ("fixed", "pacer") if temperature == 0 else ("fixed", "pacer", "smc")
        assert set(trace["results"]) == set(methods)
        for method in methods:
            alone = generate(counting.target, counting.drafter, method, prompt, **trace["settings"])
            served = trace["results"][method]
            assert served["token_ids"] == alone.token_ids, (prompt, method)
            assert served["text"] == alone.text
            assert len(served["token_ids"]) == 16
        for label in COLUMNS:
            if temperature == 0 and label.startswith("SMC"):
                assert "temperature" in out[label] and "pacer-error" in out[label]
            else:
                assert "badge-done" in out[label] and "pacer-error" not in out[label], (prompt, label)


# ---------------------------------------------------------------- 2. Stop, cancel, disconnect


def test_stop_ends_the_run_within_one_step_and_the_next_run_works(narrow_app):
    counting, url = narrow_app
    client = client_for(url)
    run = Api(client, "/run")
    with slow_long_run(counting, client, run) as job:
        before = counting.calls
        stopped_at = time.perf_counter()
        assert "Stopping" in client.predict(api_name="/stop")
        final = dict(zip(run.returns, job.result(timeout=60)))
        took = time.perf_counter() - stopped_at
        after = counting.calls - before
    # One step of each of the four interleaved methods (fixed, PACER, SMC, AR) may be in flight.
    assert after <= 8, f"{after} target calls after Stop"
    assert took < 15, f"the run took {took:.1f} s to stop"
    assert "Stopped." in final["Run status"]
    trace = json.loads(Path(final["⬇ JSON trace"]).read_text())
    assert {result["finish_reason"] for result in trace["results"].values()} == {"cancelled"}
    assert all(len(result["token_ids"]) < 240 for result in trace["results"].values())
    out = run(**{"Prompt": "t5 t6", "Max new tokens": 4, "Measure the AR baseline too": False})
    assert "run-done" in out["Run status"] and "Stopped" not in out["Run status"]
    assert all("badge-done" in out[label] for label in COLUMNS)


def test_a_cancelled_job_does_not_keep_running(narrow_app):
    counting, url = narrow_app
    client = client_for(url)
    run = Api(client, "/run")
    with slow_long_run(counting, client, run) as job:
        before = counting.calls
        job.cancel()
        last_call = counting.settle()
        after = counting.calls - before
    # Gradio ends a cancelled generator at its next yield: while a method is timed for an API client, an empty
    # update every race.CLIENT_CHECK_S; the cancel request itself returns only then.
    most_calls = round(race.CLIENT_CHECK_S / CALL_S) + 6
    assert after <= most_calls and last_call < 3, f"{after} target calls in {last_call:.1f} s after cancel"
    assert_next_request_is_served_promptly(counting, url)


def test_a_client_that_disconnects_does_not_leave_its_run_going(narrow_app, tmp_path):
    counting, url = narrow_app
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]
        from gradio_client import Client
        from test_app_server import Api
        client = Client({url!r}, verbose=False)
        run = Api(client, "/run")
        job = client.submit(api_name="/run", **{{run.params[k]: v for k, v in {LONG_RUN!r}.items()}})
        while len(job.outputs()) < 2:
            time.sleep(0.05)
        print("streaming", flush=True)
        time.sleep(600)
    """))
    counting.delay = CALL_S
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, GRADIO_ANALYTICS_ENABLED="False"))
    try:
        assert child.stdout.readline().strip() == "streaming", child.stderr.read()
        counting.wait_for_calls(counting.calls + 4)
        before = counting.calls
        child.kill()                      # the connection drops as when a browser tab is closed
        child.wait(timeout=30)
        last_call = counting.settle()
        after = counting.calls - before
    finally:
        counting.delay = 0.0
        if child.poll() is None:
            child.kill()
    # While it times a method the handler sends an API client an empty update every race.CLIENT_CHECK_S, where Gradio ends a
    # Run whose client left: at most that many seconds of target calls, and a step or two under way.
    most_calls = round(race.CLIENT_CHECK_S / CALL_S) + 6
    assert after <= most_calls and last_call < race.CLIENT_CHECK_S + 1.5, \
        f"{after} target calls in {last_call:.1f} s after the disconnect"
    assert_next_request_is_served_promptly(counting, url)


def assert_next_request_is_served_promptly(counting: CountingPair, url: str) -> None:
    """With one decoding slot, a run still going would hold the next request in the queue."""
    started, calls = time.perf_counter(), counting.calls
    out = Api(client_for(url), "/run")(**{"Prompt": "t7 t8", "Max new tokens": 4,
                                          "Measure the AR baseline too": False})
    assert "run-done" in out["Run status"]
    assert time.perf_counter() - started < 30
    assert counting.calls - calls < 40          # only this short run's own target calls


# ---------------------------------------------------------------- 3. model errors mid-run


def test_a_decoder_failing_mid_run_shows_one_line_and_the_app_keeps_serving(wide_app, monkeypatch):
    from pacer_core.decoders.pacer import Pacer

    counting, url = wide_app
    original = Pacer.propose

    def out_of_memory(self, target, state, settings, budget):
        if state.new_tokens >= 3:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\n"
                               "If reserved but unallocated memory is large try setting max_split_size_mb")
        return original(self, target, state, settings, budget)

    monkeypatch.setattr(Pacer, "propose", out_of_memory)
    run = Api(client_for(url), "/run")
    settings = {"Prompt": "t1 t2", "Max new tokens": 12, "Temperature (0 = greedy)": 0.8,
                "Measure the AR baseline too": False}
    out = run(**settings)
    assert "pacer-error" in out["PACER"]
    assert "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" in out["PACER"]
    assert "max_split_size_mb" not in out["PACER"] and "Traceback" not in json.dumps(out, default=str)
    assert 'data-state="' in out["PACER"]              # the steps before the failure stay on screen
    for label in ("Fixed-length SD", "SMC-SD (approximate)"):
        assert "badge-done" in out[label] and "pacer-error" not in out[label]
    assert "run-done" in out["Run status"]
    trace = json.loads(Path(out["⬇ JSON trace"]).read_text())
    assert trace["errors"]["pacer"].startswith("RuntimeError: CUDA out of memory")
    monkeypatch.undo()
    out = run(**settings)
    assert all("badge-done" in out[label] and "pacer-error" not in out[label] for label in COLUMNS)


# ---------------------------------------------------------------- 4. CLI errors


@pytest.mark.parametrize("argv, expected", [
    (["app.py", "--target", "/nonexistent/path"], "does not exist"),
    (["-m", "pacer_core.bench", "--methods", "nope"], "Unknown benchmark method 'nope'"),
    (["-m", "pacer_core.training.preverifier", "fit", "--work", "/nonexistent/pacer-work"], "collect"),
], ids=["app-target", "bench-methods", "train-fit-work"])
def test_cli_errors_are_one_line_without_a_traceback(argv, expected):
    completed = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=180, cwd=ROOT,
                               env=dict(os.environ, GRADIO_ANALYTICS_ENABLED="False"))
    assert completed.returncode != 0
    assert "Traceback" not in completed.stderr
    progress = ("[pacer] loading the model pair",)
    lines = [line for line in completed.stderr.splitlines() if line.strip() and not line.startswith(progress)]
    assert len(lines) == 1 and expected in lines[0], completed.stderr
    assert not Path("/nonexistent/pacer-work").exists()        # nothing created for a failed call
