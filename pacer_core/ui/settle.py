"""The machine settled before a method's clock starts: a timed window opens only once the cores are quiet.

The page acknowledges a method's turn once it has painted its frame (``ui/frames.py``), but the browser's work on
that frame does not end with the paint: the compositor and the rasterizer finish it in other processes, and the
acknowledgement's own request is handled after it is sent. Measured on the 2-core host (docs/measurements.md,
"What lands after the acknowledgement"): in the 0.3 s after each acknowledgement, the other processes used 9-19 ms
of CPU a turn, which landed in the first model calls of the method just started (its prefill). How long that work
lasts depends on the browser and the machine, so no fixed wait fits.

So after the acknowledgement the server watches the machine's busy CPU time (every core, every process, this
one's other threads included, niced work left out: ``psutil.cpu_times``) in windows of ``WINDOW_S``, and starts
the method's clock after the first window in which the cores were quiet, or after ``MOST_S`` on a machine that
never is (a busy background job, a video call); once a Run has seen that, its later turns wait at most
``BUSY_MACHINE_S`` (``QuietCores``), so a busy machine's Run is not held a quarter second a turn. A browser on
another machine (a Space) costs one window. Without psutil (it comes with accelerate, a requirement) the clock
starts at once. Pure logic here; the clock, the sleep and the reading are passed in."""
from __future__ import annotations

import time
from typing import Callable

WINDOW_S = 0.02        # one window: two of the kernel's 10 ms accounting ticks on each core
MOST_S = 0.25          # the longest a turn waits for quiet cores
QUIET_SHARE = 0.25     # busy seconds under this share of one core over a window count as quiet
BUSY_MACHINE_S = 0.04  # the most a Run's later turns wait once one turn found the machine never quiet


def busy_seconds(times) -> float:
    """Seconds the cores have been busy at a normal priority since boot, from a ``psutil.cpu_times()`` record:
    every field but idle, I/O wait, steal (a virtual machine's stolen time is the host's, not work on these cores)
    and niced work (a background job at a low priority yields the cores to a method's threads).

    >>> from types import SimpleNamespace
    >>> busy_seconds(SimpleNamespace(user=5.0, nice=3.0, system=2.0, idle=90.0, iowait=1.0, steal=0.5, irq=0.25))
    7.25
    """
    idle_fields = {"idle", "iowait", "steal", "nice", "guest_nice"}
    fields = getattr(times, "_fields", None) or [name for name in vars(times)]
    return sum(float(getattr(times, name)) for name in fields if name not in idle_fields)


def machine_busy_reader() -> Callable[[], float] | None:
    """A function giving the machine's busy seconds so far, or None where psutil cannot read them."""
    try:
        import psutil
        psutil.cpu_times()
    except Exception:            # not installed, or a platform it cannot read: the clock starts at once
        return None
    return lambda: busy_seconds(psutil.cpu_times())


def wait_until_quiet(read_busy: Callable[[], float] | None, sleep=time.sleep, clock=time.monotonic,
                     window_s: float = WINDOW_S, most_s: float = MOST_S, quiet_share: float = QUIET_SHARE) -> float:
    """Wait until a window of ``window_s`` in which the cores were busy less than ``quiet_share`` of one core, or
    ``most_s`` have passed; returns the seconds waited (0.0 without a reader).

    >>> readings = iter([0.0, 0.03, 0.05, 0.05])      # busy seconds: 30 ms, 20 ms, then none in a window
    >>> ticks = iter(range(100))
    >>> wait_until_quiet(lambda: next(readings), sleep=lambda seconds: None, clock=lambda: next(ticks) * 0.02)
    0.06
    """
    if read_busy is None:
        return 0.0
    started = clock()
    before = read_busy()
    while True:
        sleep(window_s)
        after = read_busy()
        waited = clock() - started
        if after - before < quiet_share * window_s or waited >= most_s:
            return round(waited, 6)
        before = after


class QuietCores:
    """One Run's waits for quiet cores, a call a turn (``wait_until_quiet``; ``wait(most_s)`` waits at most
    ``most_s`` and returns the seconds waited). Once a wait runs to its bound, the machine is busy with something
    else, and the Run's later turns wait at most ``busy_machine_s``: the browser's own work after a frame still
    gets its first windows, a steady background load no longer holds every turn.

    >>> bounds, waited = [], iter([0.26, 0.02])
    >>> quiet = QuietCores(lambda most_s: bounds.append(most_s) or next(waited))
    >>> quiet(), quiet(), bounds
    (0.26, 0.02, [0.25, 0.04])
    """

    def __init__(self, wait, most_s: float = MOST_S, busy_machine_s: float = BUSY_MACHINE_S):
        self.wait, self.most_s, self.busy_machine_s = wait, most_s, busy_machine_s

    def __call__(self) -> float:
        waited = self.wait(self.most_s)
        if waited >= self.most_s:
            self.most_s = min(self.most_s, self.busy_machine_s)
        return waited
