"""No animation frames while a method is timed: the page's share of the cores during a timed window, cut to nothing.

Gradio's front end keeps animation-frame loops running on a page that is doing nothing (measured on Gradio 6.31 with
the plainest app, a textbox and a button: a status tracker's elapsed-time loop at 60 frames a second, left running
by a tracker that was unmounted while pending, and a transition loop at about 30). Each frame wakes the browser's
renderer; on the 2-core host, with the page open and idle, the embedded pair's AR took 1.25 s at 48 tokens against
1.08 s with no page, and PACER 0.71 s against 0.61 s (medians of 16 interleaved runs,
docs/measurements.md "The page's own frames"). A workshop laptop runs the browser on the decoder's cores.

So the page holds its animation frames while a method is timed. ``HOLD_FRAMES_JS`` wraps
``requestAnimationFrame``: while held, a callback waits instead of asking for a frame, and on release every waiting
callback gets its frame. It must run before Gradio's modules, which keep their own reference to the function, so
``HeadScript`` (an ASGI middleware, handed to Gradio through ``launch(app_kwargs=...)``) writes it into the page's
``<head>`` ahead of them. The page's drawn-frame script (``ui/frames.py``) holds the frames once it has
acknowledged a method's turn and releases them when the next frame arrives; any click, key or wheel releases them
too, so a page whose server went away never stays still. Nothing here is needed for correctness: without it (an
older page, another front end) the frames simply keep running."""
from __future__ import annotations

HOLD_FRAMES_JS = """
(() => {
  if (window.pacerFrames) return;
  const ask = window.requestAnimationFrame.bind(window);
  const forget = window.cancelAnimationFrame.bind(window);
  let waiting = null;                 // Map(id -> callback) while frames are held, else null
  const moved = new Map();            // a held callback's id -> the id its frame got on release
  let nextId = -1;                    // held callbacks get negative ids: never a browser's own
  window.requestAnimationFrame = (callback) => {
    if (waiting === null) return ask(callback);
    const id = nextId--;
    waiting.set(id, callback);
    return id;
  };
  window.cancelAnimationFrame = (id) => {
    if (waiting !== null && waiting.delete(id)) return;
    if (moved.has(id)) { forget(moved.get(id)); moved.delete(id); return; }
    forget(id);
  };
  const release = () => {
    if (waiting === null) return;
    const due = waiting;
    waiting = null;
    moved.clear();
    due.forEach((callback, id) => moved.set(id, ask(callback)));
  };
  window.pacerFrames = {
    hold() { if (waiting === null) { waiting = new Map(); window.pacerFrames.holds += 1; } },
    release,
    held() { return waiting !== null; },
    waiting() { return waiting === null ? 0 : waiting.size; },
    holds: 0,
  };
  for (const kind of ['pointerdown', 'keydown', 'wheel', 'visibilitychange']) {
    window.addEventListener(kind, release, {capture: true, passive: true});
  }
})();
"""

SCRIPT_TAG = b"<script>" + HOLD_FRAMES_JS.encode("utf-8") + b"</script>"


def with_head_script(html: bytes, script: bytes = SCRIPT_TAG) -> bytes:
    """``html`` with ``script`` first in its ``<head>`` (ahead of every module script); unchanged without a head.

    >>> with_head_script(b'<html><head><meta charset="utf-8"></head></html>', b'<script>1</script>')
    b'<html><head><script>1</script><meta charset="utf-8"></head></html>'
    """
    start = html.find(b"<head")
    end = html.find(b">", start) if start >= 0 else -1
    if end < 0:
        return html
    return html[:end + 1] + script + html[end + 1:]


class HeadScript:
    """ASGI middleware: every HTML page the app serves gets ``HOLD_FRAMES_JS`` first in its head. Other responses
    (the API, files, event streams) pass through untouched, as do compressed ones."""

    def __init__(self, app, script: bytes = SCRIPT_TAG):
        self.app, self.script = app, script

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") != "GET":
            return await self.app(scope, receive, send)
        start, body = None, []

        async def send_page(message):
            nonlocal start
            if message["type"] == "http.response.start":
                if is_plain_html(message.get("headers", [])):
                    start = message
                    return None
                return await send(message)
            if start is None or message["type"] != "http.response.body":
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return None
            page = with_head_script(b"".join(body), self.script)
            headers = [(name, value) for name, value in start.get("headers", []) if name.lower() != b"content-length"]
            headers.append((b"content-length", str(len(page)).encode("ascii")))
            await send(start | {"headers": headers})
            return await send({"type": "http.response.body", "body": page, "more_body": False})

        return await self.app(scope, receive, send_page)


def is_plain_html(headers) -> bool:
    """An uncompressed ``text/html`` response."""
    values = {name.lower(): value.lower() for name, value in headers}
    return values.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in values
