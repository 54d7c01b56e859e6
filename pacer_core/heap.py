"""The collector kept out of timed windows: everything a process holds once it has loaded its models is moved out
of the cyclic garbage collector's reach.

Why: Python's full collection walks every tracked object. The app's process holds about 560,000 once its models,
its page and its warm-up are loaded, and a full collection there took 0.30-0.32 s (docs/measurements.md, "The
collector"). One falls due once the objects that outlived younger collections since the last one reach a quarter of
the long-lived ones: rarely (none in 14 Runs of a probe), but then at whatever allocation comes next, inside a
method's timed window as likely as not, where it would add a third to a one-second method. After
``freeze_loaded_heap`` a full collection walks only what was made since (0.0 ms measured right after)."""
from __future__ import annotations

import gc
import time


def freeze_loaded_heap() -> float:
    """Collect the garbage startup left, then freeze what is alive (``gc.freeze``): later collections skip it. Call
    once, after the models are loaded and warmed; returns the seconds it took."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - started
