"""Frames the page has drawn: how Run times a method only once the browser has finished drawing.

A method's timed window must hold its decoder and nothing else. The browser shares the cores, so a frame still
being drawn when a method starts lands in that method's seconds, and how long a browser takes to draw depends on
the machine (a fixed wait that holds on one host fails on another). So Run sends a method's turn as one frame
whose status line carries a token (``page.run_status_html(..., drawn=token)``), and waits (untimed) until the page
says it has drawn it: the page's script (``DRAWN_JS``, installed by ``layout.launch_options``) sees the token
appear, waits for the frame to be painted and for the browser to go idle, then writes the token into a hidden
textbox whose change event calls ``acknowledge`` (off Gradio's queue, so it reaches a Run that holds the queue's
slot). Nothing is sent while the method decodes.

A client that draws nothing (the API, tests) does not acknowledge and is not waited for (``PageInputs``'s
``acknowledges``); a page whose acknowledgement never comes (a tab hidden mid-run acknowledges at once) is waited
for at most ``WAIT_S``. No Gradio here."""
from __future__ import annotations

import itertools
import threading
import time

WAIT_S = 5.0          # the longest a turn waits for its frame to be drawn (a lost acknowledgement, a stalled tab)
PAGE_READY = "page"   # what the page's script writes at load: this page acknowledges frames
ACKNOWLEDGE_PATH = "pacer-drawn"   # where the page posts a drawn frame's token (``AcknowledgeRoute``)
MAX_TOKEN_BYTES = 256

# Run in the browser at load (Gradio's ``js``). It watches the run status line; a status that carries a new token
# is acknowledged after the next paint (a rAF, then a task) and the browser's next idle moment, so the columns and
# the line sent with it are laid out and painted. The token goes by a plain POST to ``ACKNOWLEDGE_PATH``: sent
# through a Gradio event (the hidden textbox's change, still the fallback and the load-time ready mark) it cost
# the browser 60-90 ms of script and garbage collection just after the method's decoding had started. A hidden tab
# paints nothing and acknowledges at once. Once it has acknowledged a method's turn (a busy line), the page holds
# its animation frames (``ui/quiet_frames.py``) until the status line changes again: the method's timed window has
# the cores to itself. The finished table's frame (``handlers.table_then_charts``) is acknowledged without a hold:
# nothing is timed after it.
DRAWN_JS = """
() => {
  const seen = new Set();
  const box = () => document.querySelector('#pacer-drawn textarea, #pacer-drawn input');
  const viaBox = (token) => {
    const input = box();
    if (!input) return;
    input.value = token;
    input.dispatchEvent(new Event('input', {bubbles: true}));
  };
  const send = (token) => fetch(new URL('%s', window.location.href), {method: 'POST', body: token, keepalive: true})
    .then((response) => { if (!response.ok) viaBox(token); }, () => viaBox(token));
  const idle = (then) => window.requestIdleCallback ? requestIdleCallback(then, {timeout: 1000}) : setTimeout(then, 50);
  const hold = () => window.pacerFrames && window.pacerFrames.hold();
  const release = () => window.pacerFrames && window.pacerFrames.release();
  const drawn = (token, timed) => {
    if (document.hidden) return send(token);
    requestAnimationFrame(() => setTimeout(() => idle(() => { send(token); if (timed) hold(); }), 0));
  };
  const look = () => {
    release();
    const line = document.querySelector('#run-status [data-drawn]');
    const token = line && line.getAttribute('data-drawn');
    if (token && !seen.has(token)) { seen.add(token); drawn(token, line.classList.contains('run-busy')); }
  };
  const start = () => {
    const status = document.querySelector('#run-status');
    if (!status || !box()) return setTimeout(start, 200);
    new MutationObserver(look).observe(status, {subtree: true, childList: true, attributes: true, characterData: true});
    viaBox('%s');
  };
  start();
}
""" % (ACKNOWLEDGE_PATH, PAGE_READY)


class AcknowledgeRoute:
    """ASGI middleware: a POST to a path ending in ``/ACKNOWLEDGE_PATH`` answers 204, then acknowledges the token in
    its body (``DrawnFrames.acknowledge``): a method's clock starts at the acknowledgement, so the server's reply is
    written before it, not inside the method's timed window; everything else goes on to the app."""

    def __init__(self, app, frames: "DrawnFrames"):
        self.app, self.frames = app, frames

    async def __call__(self, scope, receive, send):
        if not (scope.get("type") == "http" and scope.get("method") == "POST"
                and scope.get("path", "").endswith("/" + ACKNOWLEDGE_PATH)):
            return await self.app(scope, receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False) or len(body) > MAX_TOKEN_BYTES:
                break
        fits = len(body) <= MAX_TOKEN_BYTES
        try:
            await send({"type": "http.response.start", "status": 204 if fits else 413,
                        "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:                # a page gone before the reply still drew the frame
            if fits:
                self.frames.acknowledge(body.decode("utf-8", "replace"))


class DrawnFrames:
    """Tokens of frames sent and waiting to be drawn, shared by an app's handlers (thread-safe).

    >>> frames = DrawnFrames()
    >>> token = frames.expect()
    >>> frames.acknowledge(token)
    >>> frames.wait(token, timeout=0.0)
    True
    """

    def __init__(self):
        self._guard = threading.Lock()
        self._pending: dict[str, threading.Event] = {}
        self._count = itertools.count(1)
        self._prefix = f"{time.time_ns():x}"     # tokens of an earlier process are never taken for this one's

    def expect(self) -> str:
        """A fresh token for a frame about to be sent."""
        token = f"{self._prefix}-{next(self._count)}"
        with self._guard:
            self._pending[token] = threading.Event()
        return token

    def acknowledge(self, token: str | None) -> None:
        """The page has drawn the frame ``token``; an unknown token (the page's ready mark, a stale one) is ignored."""
        with self._guard:
            drawn = self._pending.get(token or "")
        if drawn is not None:
            drawn.set()

    def wait(self, token: str, timeout: float = WAIT_S) -> bool:
        """Block until ``token``'s frame is drawn or ``timeout`` passes; True if drawn. The token is done with."""
        with self._guard:
            drawn = self._pending.get(token)
        try:
            return drawn is not None and drawn.wait(timeout)
        finally:
            with self._guard:
                self._pending.pop(token, None)

    def pending(self) -> int:
        with self._guard:
            return len(self._pending)
