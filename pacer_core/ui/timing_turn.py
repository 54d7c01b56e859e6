"""Run's first phase, the timing turn: each method decodes alone, one after another, and one Run of this app times
its methods at a time (``TimingTurn``), so that no two decoders share the cores while they are timed.

A method's turn is one frame (the status line and the columns); with a page that acknowledges what it has drawn
(``ui/frames.py``) its decoding starts once the page has drawn that frame and nothing is sent until it ends, so its
seconds are its decoder's own. The turn between Runs is held by a Run's session, not by a lock held across a
generator's yields: a visitor who closes the tab leaves their Run's generator suspended where Gradio stopped
pulling it, never closed, and a plain lock would then be held for as long as the process lives. Here a turn whose
holder was stopped, or has not been seen for ``STALE_S``, passes to the next Run that asks."""
from __future__ import annotations

import contextlib
import math
import threading
import time
from typing import Iterator

from ..compute_thread import on_compute_thread
from . import columns, page, race, settle
from .frames import DrawnFrames
from .page_types import ViewUpdate
from .session import RunSession

STALE_S = 15.0     # a timing Run checks in at least every CLIENT_CHECK_S (0.5 s) unless one step takes this long
MIN_TIMED_S = 2.5  # a first pass over the methods shorter than this is followed by more (16 new tokens of the
MAX_PASSES = 3     # embedded pair: 1.4 s, two passes); each method keeps its fastest (``time_each_alone``)


class TimingTurn:
    def __init__(self, stale_s: float = STALE_S, clock=time.monotonic):
        self._guard = threading.Lock()
        self._holder = None
        self._seen = 0.0
        self.stale_s, self.clock = stale_s, clock

    def _free_for(self, owner) -> bool:
        holder = self._holder
        return (holder is None or holder is owner or holder.cancel.is_set()
                or self.clock() - self._seen > self.stale_s)

    def take(self, owner) -> bool:
        """Give ``owner`` (anything with a ``cancel`` event: a RunSession) the turn if it is free; True if it has it."""
        with self._guard:
            if not self._free_for(owner):
                return False
            self._holder, self._seen = owner, self.clock()
            return True

    def seen(self, owner) -> None:
        """``owner`` is still timing: its turn is not stale."""
        with self._guard:
            if self._holder is owner:
                self._seen = self.clock()

    def release(self, owner) -> None:
        """End ``owner``'s turn; a turn that already passed to another Run stays with it."""
        with self._guard:
            if self._holder is owner:
                self._holder = None

    def holder(self):
        with self._guard:
            return self._holder


def timing_column(run, current: bool, again: str | None = None) -> str:
    """A column while the methods are timed: its progress, its time alone, or its turn to come (``again``: which
    later pass times it now)."""
    return columns.column_html(run.method, [], None, run.error if not run.skipped else None, running=current,
                               note=None, placeholder=None if run.error else race.waiting_text(run, current, again))


def timing_columns(session: RunSession, current: str | None, again: str | None = None) -> dict[str, str]:
    """Every column while the methods are timed; ``current``: the method timed now (None: before the first)."""
    return {method: timing_column(run, method == current, again) for method, run in session.runs.items()}


def timing_passes(first_pass_s: float, min_timed_s: float = MIN_TIMED_S, max_passes: int = MAX_PASSES) -> int:
    """How many passes over the methods a Run times: enough that together they take ``min_timed_s``, judged by the
    first pass's seconds, and at most ``max_passes``.

    >>> timing_passes(3.4), timing_passes(1.4), timing_passes(0.5), timing_passes(0.0)
    (1, 2, 3, 1)
    """
    if first_pass_s <= 0 or first_pass_s >= min_timed_s:
        return 1
    return min(max_passes, math.ceil(min_timed_s / first_pass_s))


def time_each_alone(session: RunSession, frames: DrawnFrames | None = None, check=lambda: True,
                    clock=time.perf_counter, check_s: float = race.CLIENT_CHECK_S,
                    quiet=contextlib.nullcontext, min_timed_s: float = MIN_TIMED_S,
                    settled=None) -> Iterator[ViewUpdate]:
    """Run's first phase: each method decodes alone, one after another (``RunSession.timing_queue``). A method's
    turn is one frame (its line and the columns); with ``frames`` (a page that acknowledges what it has drawn) its
    decoding starts once the page has drawn that frame and the cores have gone quiet after it (``settled()``,
    ``ui/settle.py``: the browser's work on a painted frame goes on in other processes), and nothing is sent until
    it ends: its timed window holds its decoder only, however fast or slow the browser is. Every ``check_s``
    between steps ``check()`` says whether the Run is still wanted (False: its client left, it stops like Stop);
    without ``frames`` (an API client, no browser to disturb) the turn's status line goes out again instead, where
    Gradio ends a Run whose client left or cancelled (an update with no value at all is an error to Gradio).
    ``quiet()``: a context held while a page's method decodes (``layout.quiet_queue``: the server's own polling
    slowed down meanwhile).

    A first pass shorter than ``min_timed_s`` is followed by more (``timing_passes``), each method timed afresh in
    the same order and keeping its fastest pass (``RunSession.keep_faster``): one pass of a short Run moves by 10%
    with whatever else the machine did in its window, and a busy moment only ever adds time.
    Stop ends the current method and skips the rest (in a later pass, the first pass's figures stand)."""
    queue = session.timing_queue()
    turn = Turn(session, frames, check, clock, check_s, quiet, settled or quiet_cores())
    for position, current in enumerate(queue, 1):
        yield from turn.take(current, race.timing_line(current.method, position, len(queue), turn.previous))
        if session.cancel.is_set():
            session.skip_unstarted()
            return
    methods = [run.method for run in queue if run.result is not None]
    passes = timing_passes(sum(session.busy_seconds()[method] for method in methods), min_timed_s)
    for pass_number in range(2, passes + 1):
        for position, method in enumerate(methods, 1):
            again = session.new_run(method)
            line = race.timing_again_line(method, position, len(methods), pass_number, passes, turn.previous)
            yield from turn.take(again, line, again=f"pass {pass_number} of {passes}")
            session.keep_faster(again)
            if session.cancel.is_set():
                return


class Turn:
    """How one method's turn is taken: its frame, then its decoding (``time_each_alone``); ``previous``: the run
    timed last, for the next turn's line."""

    def __init__(self, session: RunSession, frames: DrawnFrames | None, check, clock, check_s: float, quiet,
                 settled=lambda: 0.0):
        self.session, self.frames, self.check, self.clock, self.check_s, self.quiet = \
            session, frames, check, clock, check_s, quiet
        self.settled = settled
        self.previous = None

    def take(self, current, line: str, again: str | None = None) -> Iterator[ViewUpdate]:
        """``current``'s turn: one frame (the status ``line``, every column), then its steps with nothing sent (a
        page that acknowledges frames) or with the line sent again every ``check_s`` (an API client)."""
        session, frames, clock = self.session, self.frames, self.clock
        token = frames.expect() if frames is not None else None
        status = page.run_status_html(line, "busy", drawn=token)
        yield ViewUpdate(columns=timing_columns(session, current.method, again), status=status)
        if frames is not None:                 # a page: decode once it has drawn the turn, send nothing until the end
            started = clock()
            frames.wait(token)
            session.phase_seconds["drawing"] = session.phase_seconds.get("drawing", 0.0) + clock() - started
            session.phase_seconds["settling"] = session.phase_seconds.get("settling", 0.0) + self.settled()
            with self.quiet():                 # the whole method on the compute thread: no hand-off per step
                on_compute_thread(decode_alone, session, current, self.check, clock, self.check_s)
        else:
            checked = clock()
            while not current.done:
                session.advance_one(current)
                if not current.done and clock() - checked >= self.check_s:
                    yield ViewUpdate(status=status)
                    if not self.check():
                        session.stop()
                    checked = clock()
        self.previous = race.took_line(current)


def decode_alone(session: RunSession, current, check, clock, check_s: float) -> None:
    """One method's steps with nothing sent: ``check()`` every ``check_s`` (False: its client left, stop)."""
    checked = clock()
    while not current.done:
        session.advance_one(current)
        if not current.done and clock() - checked >= check_s:
            if not check():
                session.stop()
            checked = clock()


def quiet_cores() -> settle.QuietCores:
    """A Run's waits until this machine's cores are quiet (``settle.wait_until_quiet``), a call a turn."""
    return settle.QuietCores(lambda most_s: settle.wait_until_quiet(BUSY_READER, most_s=most_s))


BUSY_READER = settle.machine_busy_reader()   # None where psutil cannot read the cores: no wait
TIMING_TURN = TimingTurn()     # one Run's timing phase at a time in this process (PACER_CONCURRENCY > 1)


def timed_alone(session: RunSession, frames: DrawnFrames | None = None, still_wanted=lambda: True,
                quiet=contextlib.nullcontext, wait_s: float = 0.5, sleep=time.sleep) -> Iterator[ViewUpdate]:
    """``time_each_alone`` once no other Run of this app is timing its methods: with more than one run at a time
    (PACER_CONCURRENCY) two decoders would share the cores and each would be timed slower than it is. Stop
    while waiting skips the timing. A Run that was stopped or abandoned mid-timing (its tab closed) gives up its
    turn (``timing_turn``); one still timing keeps it fresh at every check."""
    while not TIMING_TURN.take(session):
        if session.cancel.is_set():
            session.skip_unstarted()
            return
        yield ViewUpdate(status=page.run_status_html("Waiting for another run on this server to finish timing its "
                                                     "methods: one decodes at a time, so each is timed alone…", "busy"))
        sleep(wait_s)

    def check() -> bool:
        TIMING_TURN.seen(session)
        return still_wanted()

    try:
        for update in time_each_alone(session, frames, check, quiet=quiet):
            TIMING_TURN.seen(session)
            yield update
    finally:
        TIMING_TURN.release(session)
