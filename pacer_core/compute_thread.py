"""One thread for the model work of a process that serves many threads (the app's page), and a way to hand back a
thread's OpenMP workers.

Why: torch and llama.cpp share one OpenMP runtime (libgomp), which keeps a team of worker threads for every
thread that has run a parallel region, for as long as that thread lives. Once the process holds more of these
workers than it has CPUs, libgomp stops letting idle workers spin between regions and puts them to sleep at
once, and a decode step is hundreds of short regions, each now paying a wake-up. Measured on a 2-core host
(docs/measurements.md, "Threads and OpenMP waiting"): a llama.cpp decode step of the embedded target took 15 ms
on the thread that loaded the model and 29 ms on any other thread, and AR on the default example 0.87 s against
1.40 s. Gradio runs each handler, even each pull of one Run's generator, on whichever worker thread is free, so
the page's decoders ran at the slower speed while the benchmarks, on the main thread, ran at the faster one.

So the page steps every decoder on one long-lived thread (``on_compute_thread``): app.py makes its main thread,
the one that loaded the models, that thread (``COMPUTE_THREAD.adopt_current_thread`` and ``serve_forever``,
Gradio serving from its own threads), so the process holds one team, as a script on its main thread does. A
process that cannot lend its main thread gets a thread of its own on the first call; the thread that loaded the
models should then hand its workers back (``release_openmp_workers``). An adopted thread must be free to serve:
if it waits on another thread that hands it work, both wait for ever (a script that iterates the page's handlers
itself, as benchmarks/ui_overhead.py does, keeps a thread of its own instead)."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import queue
import threading
from concurrent.futures import Future
from typing import Callable, TypeVar

Value = TypeVar("Value")

WAKE_S = 0.5               # how often an idle compute thread wakes (the main thread sees signals then)
OMP_PAUSE_SOFT = 1          # OpenMP 5.0's omp_pause_soft: free the runtime's threads, keep its settings


def _openmp_runtime():
    """The OpenMP runtime already in this process (torch's libgomp, which llama.cpp binds to as well), or None."""
    for name in ("libgomp.so.1", ctypes.util.find_library("gomp"), "libomp.so", ctypes.util.find_library("omp")):
        if not name:
            continue
        try:
            runtime = ctypes.CDLL(name, mode=getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_NOW", 0))
        except OSError:
            continue
        if hasattr(runtime, "omp_pause_resource_all"):
            return runtime
    return None


def release_openmp_workers() -> bool:
    """Hand back the OpenMP worker threads of the calling thread's parallel regions (OpenMP 5.0
    ``omp_pause_resource_all``); the next region on this thread starts a new team. False when no OpenMP runtime
    that can do it is loaded (nothing to release)."""
    runtime = _openmp_runtime()
    return runtime is not None and runtime.omp_pause_resource_all(ctypes.c_int(OMP_PAUSE_SOFT)) == 0


class ComputeThread:
    """A daemon thread that runs the calls handed to it one at a time, in order; started on the first call."""

    def __init__(self, name: str = "pacer-compute"):
        self.name = name
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_guard = threading.Lock()

    def is_current(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def call(self, function: Callable[..., Value], *args, **kwargs) -> Value:
        """``function(*args, **kwargs)`` run on this thread; its value, or its exception raised here. A call made
        on this thread itself runs at once (a call inside a call would otherwise wait for itself)."""
        if self.is_current():
            return function(*args, **kwargs)
        self._ensure_started()
        outcome: Future = Future()
        self._calls.put((outcome, function, args, kwargs))
        return outcome.result()

    def adopt_current_thread(self) -> None:
        """Make the calling thread this compute thread (before any call is handed over): calls made from other
        threads wait in order until it ``serve_forever``s; calls made on it run at once. The app adopts its main
        thread, the one that loaded the models, so the page decodes where a script does."""
        with self._start_guard:
            if self._thread is not None and self._thread is not threading.current_thread():
                raise RuntimeError(f"the compute thread is already {self._thread.name}")
            self._thread = threading.current_thread()

    def serve_forever(self) -> None:
        """Run the calls handed over, in order, on the adopted thread, until the process ends (Ctrl-C raises
        KeyboardInterrupt here)."""
        if not self.is_current():
            raise RuntimeError("serve_forever runs on the thread adopt_current_thread made the compute thread")
        self._serve()

    def _ensure_started(self) -> None:
        with self._start_guard:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                outcome, function, args, kwargs = self._calls.get(timeout=WAKE_S)
            except queue.Empty:
                continue              # a wake-up now and then lets the main thread see Ctrl-C
            if not outcome.set_running_or_notify_cancel():
                continue
            try:
                outcome.set_result(function(*args, **kwargs))
            except Exception as error:  # noqa: BLE001 - raised again in the caller's thread
                outcome.set_exception(error)


COMPUTE_THREAD = ComputeThread()


def on_compute_thread(function: Callable[..., Value], *args, **kwargs) -> Value:
    """Run ``function`` on the process's one compute thread (``COMPUTE_THREAD``) and return what it returns."""
    return COMPUTE_THREAD.call(function, *args, **kwargs)
