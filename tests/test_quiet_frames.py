"""The page's frame hold reaches the browser ahead of Gradio's modules (ui/quiet_frames.py): the middleware writes
it first in every HTML page's head and leaves every other response as it was."""
from __future__ import annotations

import asyncio

from pacer_core.ui import layout
from pacer_core.ui.quiet_frames import HOLD_FRAMES_JS, SCRIPT_TAG, HeadScript, is_plain_html, with_head_script

PAGE = b'<!doctype html><html><head><meta charset="utf-8"><script type="module" src="a.js"></script></head></html>'


def serve(body_parts: list[bytes], headers: list[tuple[bytes, bytes]], method: str = "GET"):
    """(start message, body) that ``HeadScript`` sends for an app answering with ``body_parts`` and ``headers``."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for index, part in enumerate(body_parts):
            await send({"type": "http.response.body", "body": part, "more_body": index < len(body_parts) - 1})

    sent = []

    async def send(message):
        sent.append(message)

    asyncio.run(HeadScript(app)({"type": "http", "method": method, "path": "/"}, None, send))
    return sent[0], b"".join(message.get("body", b"") for message in sent[1:])


def test_an_html_page_gets_the_hold_first_in_its_head_with_its_length_set():
    start, body = serve([PAGE[:40], PAGE[40:]], [(b"content-type", b"text/html; charset=utf-8"),
                                                 (b"content-length", str(len(PAGE)).encode())])
    assert body.index(b"window.pacerFrames") < body.index(b'type="module"')
    assert body == with_head_script(PAGE) and body.startswith(b"<!doctype html><html><head>" + SCRIPT_TAG)
    assert dict(start["headers"])[b"content-length"] == str(len(body)).encode()


def test_other_responses_pass_untouched():
    json_body = b'{"head": "<head>"}'
    assert serve([json_body], [(b"content-type", b"application/json")])[1] == json_body
    gzipped = [(b"content-type", b"text/html"), (b"content-encoding", b"gzip")]
    assert serve([b"\x1f\x8b<head>"], gzipped)[1] == b"\x1f\x8b<head>"
    assert serve([PAGE], [(b"content-type", b"text/html")], method="POST")[1] == PAGE
    assert not is_plain_html([(b"content-type", b"text/plain")])


def test_a_page_without_a_head_is_left_as_it_is():
    assert with_head_script(b"<html><body>hi</body></html>") == b"<html><body>hi</body></html>"


def test_the_app_launches_with_the_middleware_and_the_hold_wraps_request_animation_frame():
    middleware = layout.launch_options()["app_kwargs"]["middleware"]
    assert [entry.cls for entry in middleware] == [HeadScript]
    assert "window.requestAnimationFrame = " in HOLD_FRAMES_JS and "window.cancelAnimationFrame = " in HOLD_FRAMES_JS
