"""Quiet cores before a method's clock starts (ui/settle.py): the wait ends at the first quiet window, never runs
past its bound on a machine that stays busy, and costs nothing where the cores cannot be read."""
from __future__ import annotations

import multiprocessing
import time
from types import SimpleNamespace

import pytest

from pacer_core.ui import settle

pytestmark = pytest.mark.pure


def fake_machine(busy_per_window: list[float], window_s: float = 0.02):
    """A reader, sleep and clock for ``wait_until_quiet``: the cores are busy ``busy_per_window[i]`` seconds in the
    i-th window slept."""
    state = {"busy": 0.0, "now": 0.0, "windows": 0}

    def sleep(seconds):
        state["busy"] += busy_per_window[min(state["windows"], len(busy_per_window) - 1)]
        state["windows"] += 1
        state["now"] += seconds

    return (lambda: state["busy"]), sleep, (lambda: state["now"]), state


def test_the_wait_ends_at_the_first_quiet_window():
    read, sleep, clock, state = fake_machine([0.02, 0.01, 0.0, 0.03])
    assert settle.wait_until_quiet(read, sleep, clock, window_s=0.02, most_s=1.0) == pytest.approx(0.06)
    assert state["windows"] == 3
    read, sleep, clock, state = fake_machine([0.0])
    assert settle.wait_until_quiet(read, sleep, clock, window_s=0.02, most_s=1.0) == pytest.approx(0.02)


def test_a_window_busy_under_the_quiet_share_counts_as_quiet():
    read, sleep, clock, _ = fake_machine([0.004])                  # 4 ms of 20: a fifth of one core
    assert settle.wait_until_quiet(read, sleep, clock, window_s=0.02, most_s=1.0, quiet_share=0.25) == \
        pytest.approx(0.02)
    read, sleep, clock, _ = fake_machine([0.006, 0.0])
    assert settle.wait_until_quiet(read, sleep, clock, window_s=0.02, most_s=1.0, quiet_share=0.25) == \
        pytest.approx(0.04)


def test_a_machine_that_stays_busy_is_waited_for_at_most_the_bound():
    read, sleep, clock, state = fake_machine([0.03])
    assert settle.wait_until_quiet(read, sleep, clock, window_s=0.02, most_s=0.25) == pytest.approx(0.26)
    assert state["windows"] == 13


def test_without_a_reader_nothing_is_waited_for():
    assert settle.wait_until_quiet(None, sleep=lambda seconds: pytest.fail("slept")) == 0.0


def test_busy_seconds_leave_out_idle_io_wait_stolen_time_and_niced_work():
    times = SimpleNamespace(user=3.0, nice=0.5, system=1.0, idle=50.0, iowait=2.0, irq=0.25, softirq=0.25,
                            steal=4.0)
    assert settle.busy_seconds(times) == pytest.approx(4.5)


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_busy_core_on_this_machine_holds_the_wait_to_its_bound():
    """The real reader (psutil) sees another process spinning: no window is quiet, so the wait runs to its bound."""
    read = settle.machine_busy_reader()
    if read is None:
        pytest.skip("psutil cannot read this machine's cores")
    child = multiprocessing.get_context("spawn").Process(target=spin, args=(3.0,))
    child.start()
    try:
        time.sleep(0.3)                                             # the child is up and spinning
        waited = settle.wait_until_quiet(read, window_s=0.02, most_s=0.3)
    finally:
        child.terminate()
        child.join()
    assert waited >= 0.3


def test_a_run_that_found_the_machine_busy_waits_briefly_on_its_later_turns():
    bounds = []
    waits = iter([0.02, 0.25, 0.04, 0.0])

    def wait(most_s):
        bounds.append(most_s)
        return next(waits)

    quiet = settle.QuietCores(wait, most_s=0.25, busy_machine_s=0.04)
    assert [quiet() for _ in range(4)] == [0.02, 0.25, 0.04, 0.0]
    assert bounds == [0.25, 0.25, 0.04, 0.04]                       # after the wait that ran to its bound


def test_each_run_gets_its_own_waits():
    from pacer_core.ui import timing_turn

    first, second = timing_turn.quiet_cores(), timing_turn.quiet_cores()
    first.most_s = 0.04
    assert second.most_s == settle.MOST_S


def test_the_module_s_worked_examples_hold():
    import doctest

    assert doctest.testmod(settle).failed == 0
