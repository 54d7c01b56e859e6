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
import threading
import time
from typing import Iterator

from ..compute_thread import on_compute_thread
from . import columns, page, race
from .frames import DrawnFrames
from .page_types import ViewUpdate
from .session import RunSession

STALE_S = 15.0     # a timing Run checks in at least every CLIENT_CHECK_S (0.5 s) unless one step takes this long


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


def timing_column(run, current) -> str:
    """A column while the methods are timed: its progress, its time alone, or its turn to come."""
    return columns.column_html(run.method, [], None, run.error if not run.skipped else None, running=run is current,
                               note=None, placeholder=None if run.error else race.waiting_text(run, run is current))


def timing_columns(session: RunSession, current) -> dict[str, str]:
    return {method: timing_column(run, current) for method, run in session.runs.items()}


def timing_update(session: RunSession, current, position: int, count: int, drawn: str | None = None) -> ViewUpdate:
    """A method's turn: the status line (with the token the page acknowledges once drawn) and every column."""
    line = race.timing_line(current.method, position, count, previous_line(session, current))
    return ViewUpdate(columns=timing_columns(session, current),
                      status=page.run_status_html(line, "busy", drawn=drawn))


def previous_line(session: RunSession, current) -> str | None:
    """What the last method timed took, for the next turn's line (None at the first turn)."""
    runs = session.all_runs()
    earlier = [run for run in runs[:runs.index(current)] if run.done and not run.skipped]
    return race.took_line(earlier[-1]) if earlier else None


def time_each_alone(session: RunSession, frames: DrawnFrames | None = None, check=lambda: True,
                    clock=time.perf_counter, check_s: float = race.CLIENT_CHECK_S,
                    quiet=contextlib.nullcontext) -> Iterator[ViewUpdate]:
    """Run's first phase: each method decodes alone, one after another (``RunSession.timing_queue``). A method's
    turn is one frame (its line and the columns); with ``frames`` (a page that acknowledges what it has drawn) its
    decoding starts once the page has drawn that frame, and nothing is sent until it ends: its timed window holds
    its decoder only, however fast or slow the browser is. Every ``check_s`` between steps ``check()`` says whether
    the Run is still wanted (False: its client left, it stops like Stop); without ``frames`` (an API client, no
    browser to disturb) the turn's status line goes out again instead, where Gradio ends a Run whose client left or
    cancelled (an update with no value at all is an error to Gradio). ``quiet()``: a context held while a
    page's method decodes (``layout.quiet_queue``: the server's own polling slowed down meanwhile).
    Stop ends the current method and skips the rest."""
    queue = session.timing_queue()
    for position, current in enumerate(queue, 1):
        token = frames.expect() if frames is not None else None
        turn = timing_update(session, current, position, len(queue), drawn=token)
        yield turn
        if frames is not None:                 # a page: decode once it has drawn the turn, send nothing until the end
            started = clock()
            frames.wait(token)
            session.phase_seconds["drawing"] = session.phase_seconds.get("drawing", 0.0) + clock() - started
            with quiet():                      # the whole method on the compute thread: no hand-off per step
                on_compute_thread(decode_alone, session, current, check, clock, check_s)
        else:
            checked = clock()
            while not current.done:
                session.advance_one(current)
                if not current.done and clock() - checked >= check_s:
                    yield ViewUpdate(status=turn.status)
                    if not check():
                        session.stop()
                    checked = clock()
        if session.cancel.is_set():
            session.skip_unstarted()
            return


def decode_alone(session: RunSession, current, check, clock, check_s: float) -> None:
    """One method's steps with nothing sent: ``check()`` every ``check_s`` (False: its client left, stop)."""
    checked = clock()
    while not current.done:
        session.advance_one(current)
        if not current.done and clock() - checked >= check_s:
            if not check():
                session.stop()
            checked = clock()


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
