"""Whose Run may time its methods now: one at a time per app, so that no two decoders share the cores while
they are timed. A turn is held by a Run's session, not by a lock held across a generator's yields: a visitor
who closes the tab leaves their Run's generator suspended where Gradio stopped pulling it, never closed, and a
plain lock would then be held for as long as the process lives. Here a turn whose holder was stopped, or has
not been seen for ``STALE_S``, passes to the next Run that asks."""
from __future__ import annotations

import threading
import time

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
