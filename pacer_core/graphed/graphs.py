"""Graphs of the graphed engine: one captured model call per shape a run uses, captured at its first use and
replayed after (``GraphPool``), with the capture itself injected (``Capturer``) so that everything but the CUDA
lines runs and is tested on the CPU.

A *step* is a function of no arguments that reads only static buffers (token ids, the start position) and returns
tensors; a capturer turns it into a *replay*: a function of no arguments that recomputes the step from the buffers'
current values and returns the same output tensors every time (static outputs: the caller copies what it keeps
before the next replay). Python inside a step runs once, at capture: it must not read anything that changes
between calls except through those buffers.

When a capture fails (an unsupported model, out of memory, an operation that syncs with the host) the pool records
why, drops back to running every step eagerly, and says so (``fallback_reason``): the run goes on, exact, slower."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Hashable

import torch

Step = Callable[[], tuple]
Replay = Callable[[], tuple]
Capturer = Callable[[Step], Replay]

MAX_GRAPHED_TOKENS = 80   # longer calls (a prompt's prefill) run eagerly: their shapes rarely repeat


@dataclass(frozen=True)
class StepShape:
    """What fixes a model call's shapes: rows B, tokens fed T, logits kept (None: all T), hidden states returned,
    features recorded, and the span S of cache positions attention reads (a multiple of ``static_kv.SPAN_QUANTUM``
    covering the call's last position)."""
    rows: int
    fed: int
    keep: int | None
    hidden: bool
    features: bool
    span: int


class GraphPool:
    """Captured replays by key (a ``StepShape``, and whatever else the owner adds), each captured at first use.

    ``capturer`` None runs every step eagerly (the CPU, or graphs off); ``graphable(key)`` says which keys are
    worth a graph. ``captures`` counts captures, ``capture_seconds`` sums their time, ``replays`` counts replays;
    ``fallback_reason`` is why the pool runs eagerly after a failed capture (None: it has not failed)."""

    def __init__(self, capturer: Capturer | None, graphable: Callable[[Hashable], bool] = lambda key: True):
        self.capturer = capturer
        self.graphable = graphable
        self.replays_by_key: dict[Hashable, Replay] = {}
        self.captures = 0
        self.replays = 0
        self.capture_seconds = 0.0
        self.fallback_reason: str | None = None

    @property
    def active(self) -> bool:
        """Whether steps are captured at all (a capturer, and no failure yet)."""
        return self.capturer is not None and self.fallback_reason is None

    def run(self, key: Hashable, step: Step) -> tuple[tuple, bool]:
        """(the step's outputs, whether they are a replay's static outputs). The first call of a graphable key
        captures it; a failed capture falls back to ``step()`` for this and every later call."""
        if not self.active or not self.graphable(key):
            return step(), False
        replay = self.replays_by_key.get(key)
        if replay is None:
            started = time.perf_counter()
            try:
                replay = self.capturer(step)
            except Exception as error:  # noqa: BLE001 - any failure of a capture means: run eagerly, say why
                self.fallback_reason = f"capture of {key} failed ({type(error).__name__}: {str(error)[:200]})"
                self.replays_by_key.clear()
                return step(), False
            self.capture_seconds += time.perf_counter() - started
            self.captures += 1
            self.replays_by_key[key] = replay
        self.replays += 1
        return replay(), True

    def clear(self) -> None:
        """Forget every replay (the buffers they read were replaced); later calls capture again."""
        self.replays_by_key.clear()


def cuda_capturer(warmup_calls: int = 2) -> Capturer:
    """Capture a step as a ``torch.cuda.CUDAGraph``: a few calls on a side stream first (kernels chosen, the
    allocator warmed: PyTorch's documented recipe), then the capture, then one replay so the calling step's
    result is computed (capturing records work without doing it). The steps are idempotent (they rewrite the same
    cache positions from the same buffers), so the warm-up calls change nothing. All graphs of one capturer share
    one memory pool: they never run at the same time and their outputs are copied right after each replay. The
    capture is thread-local: another thread's CUDA work (a web server's) does not invalidate it.
    Untested here: the project's CPU machines have no GPU."""
    pool = torch.cuda.graph_pool_handle()

    def capture(step: Step) -> Replay:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup_calls):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        calling_stream = torch.cuda.current_stream()
        try:
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                outputs = step()
        except BaseException:          # a failed capture can leave the capture's stream current: the eager
            torch.cuda.set_stream(calling_stream)    # fallback and every later call must run on the caller's
            raise

        def replay() -> tuple:
            graph.replay()
            return outputs

        return replay

    return capture
