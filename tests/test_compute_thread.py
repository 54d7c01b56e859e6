"""The compute thread (pacer_core/compute_thread.py): every call on one long-lived thread, values and exceptions
carried back, a call from the thread itself run at once; a thread's OpenMP team handed back; the page's decoders
stepped there; and benchmarks/thread_speed.py in its tiny form."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch

from pacer_core.compute_thread import COMPUTE_THREAD, ComputeThread, on_compute_thread, release_openmp_workers
from pacer_core.testing.tiny import tiny_pair
from script_module import run_script


@pytest.fixture(scope="module")
def tiny():
    return tiny_pair()


def current_thread_name() -> str:
    return threading.current_thread().name


def test_every_call_runs_on_the_same_long_lived_thread():
    compute = ComputeThread(name="test-compute")
    names = {compute.call(current_thread_name) for _ in range(3)}
    names |= {compute.call(current_thread_name) for _ in range(2)}
    assert names == {"test-compute"}
    assert compute.call(lambda a, b=0: a + b, 2, b=3) == 5
    assert not compute.is_current()


def test_calls_from_many_threads_come_back_to_each_caller():
    compute = ComputeThread(name="test-compute-many")
    results = {}
    callers = [threading.Thread(target=lambda i=i: results.__setitem__(i, compute.call(lambda: (i, current_thread_name()))))
               for i in range(8)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert results == {i: (i, "test-compute-many") for i in range(8)}


def test_an_exception_is_raised_in_the_caller_and_the_thread_keeps_serving():
    compute = ComputeThread()

    def fails():
        raise ValueError("bad input")
    with pytest.raises(ValueError, match="bad input"):
        compute.call(fails)
    with pytest.raises(StopIteration):
        compute.call(next, iter(()))
    assert compute.call(lambda: 7) == 7


def test_a_call_made_on_the_thread_itself_runs_at_once():
    compute = ComputeThread(name="test-compute-nested")
    assert compute.call(lambda: compute.call(current_thread_name)) == "test-compute-nested"


def test_an_adopted_thread_serves_the_calls_handed_to_it():
    """app.py's way: the thread that loaded the models adopts the compute thread, then serves; a call handed over
    meanwhile waits for it, and a second thread cannot take the role."""
    compute, adopted = ComputeThread(), threading.Event()

    def host():
        compute.adopt_current_thread()
        adopted.set()
        time.sleep(0.2)               # a call handed over before serving starts waits for it
        compute.serve_forever()
    threading.Thread(target=host, name="test-host", daemon=True).start()
    adopted.wait(10)
    assert compute.call(current_thread_name) == "test-host"
    assert compute.call(lambda: 6 * 7) == 42
    with pytest.raises(RuntimeError, match="already test-host"):
        compute.adopt_current_thread()
    with pytest.raises(RuntimeError, match="serve_forever runs on"):
        compute.serve_forever()


def threads_of_this_process() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts threads through /proc")
def test_release_hands_back_the_calling_threads_openmp_team():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: no OpenMP team to hand back")

    def team_then_release() -> tuple[int, int, bool]:
        before = torch.get_num_threads()
        torch.set_num_threads(2)
        try:
            values = torch.randn(512, 512)
            for _ in range(4):
                values = values @ values.T / 512        # parallel regions: this thread gets a team of workers
            with_team = threads_of_this_process()
            released = release_openmp_workers()
            return with_team, threads_of_this_process(), released
        finally:
            torch.set_num_threads(before)

    with_team, after, released = ComputeThread(name="test-openmp").call(team_then_release)
    assert released
    assert after < with_team


def test_the_page_steps_its_decoders_on_the_compute_thread(monkeypatch, target, drafter):
    from pacer_core.ui import session as session_module
    stepped_on = []
    real_run_request = session_module.run_request

    def recording_run_request(*args, **kwargs):
        for item in real_run_request(*args, **kwargs):
            stepped_on.append(current_thread_name())
            yield item
    monkeypatch.setattr(session_module, "run_request", recording_run_request)
    session = session_module.RunSession(target, drafter, "t1 t2", {"max_new_tokens": 4, "temperature": 0.0},
                                        methods=["fixed"], measure_ar=True)
    while not session.finished or not session.ar.done:
        session.advance()
    assert stepped_on and set(stepped_on) == {COMPUTE_THREAD.name}
    assert session.runs["fixed"].result is not None and session.ar.result is not None
    assert on_compute_thread(current_thread_name) == COMPUTE_THREAD.name


@pytest.mark.embedded
def test_thread_speed_runs_in_its_tiny_form(tmp_path):
    out = tmp_path / "thread-speed"
    run_script("benchmarks/thread_speed.py", "--repeats", "1", "--max-new-tokens", "8", "--out", str(out))
    report = json.loads((out / "results.json").read_text())
    assert set(report["median_seconds"]) == {"ar", "fixed"}
    assert all(seconds > 0 for by in report["median_seconds"].values() for seconds in by.values())
    assert "| ar |" in (out / "report.md").read_text()
