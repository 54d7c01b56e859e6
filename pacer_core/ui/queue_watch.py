"""The page's watch on Gradio's queue while Run times a method alone: whether the Run's client is still there
(``client_still_there``), and the queue's own polling slowed down meanwhile (``quiet_queue``). Both read
Gradio's queue attributes where they exist and do nothing where they do not (tests/test_ui_frames.py checks
they exist)."""
from __future__ import annotations

import contextlib

import gradio as gr


def client_still_there(demo: gr.Blocks, request) -> callable:
    """A check that is False once Gradio has marked the session of ``request`` gone (its tab closed, its connection
    dropped): Run asks it while a method is timed, when nothing is sent that Gradio could fail to deliver. It reads
    Gradio's queue (``_queue.event_ids_to_events``: each event's ``session_hash``, ``closed``, ``alive``;
    tests/test_ui_frames.py checks these exist); where they do not, it always says True."""
    session = getattr(request, "session_hash", None)

    def still_there() -> bool:
        events = getattr(getattr(demo, "_queue", None), "event_ids_to_events", None)
        if session is None or events is None:
            return True
        try:
            mine = [event for event in list(events.values()) if getattr(event, "session_hash", None) == session]
        except RuntimeError:          # changed while read (another thread): ask again at the next check
            return True
        return not any(getattr(event, "closed", False) or not getattr(event, "alive", True) for event in mine)

    return still_there


QUIET_POLL_S = 0.1    # how often Gradio's queue looks for work while a page's method is timed (its own: 1 ms)


@contextlib.contextmanager
def quiet_queue(demo: gr.Blocks):
    """Held while a page's method decodes alone. Gradio's queue polls for work to start every 1 ms and for progress
    to send every 10 ms: about 1,100 wake-ups a second of the server's event loop, on the cores and the GIL the
    decoder uses. Nothing needs them then (the Run holds the decoding slot; Stop and the page's acknowledgements
    start within a poll), so both slow to ``QUIET_POLL_S`` until the method ends, and are restored after."""
    queue = getattr(demo, "_queue", None)
    names = ("sleep_when_free", "progress_update_sleep_when_free")
    if queue is None or not all(hasattr(queue, name) for name in names):
        yield
        return
    before = {name: getattr(queue, name) for name in names}
    for name, value in before.items():
        setattr(queue, name, max(value, QUIET_POLL_S))
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(queue, name, value)
