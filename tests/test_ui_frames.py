"""The page's acknowledgements of drawn frames (ui/frames.py) and the check that a Run's client is still there
(queue_watch.client_still_there): what lets Run time a method only once the browser is done drawing, and send nothing
while it decodes."""
from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace

from pacer_core.ui import page
from pacer_core.ui.frames import ACKNOWLEDGE_PATH, DRAWN_JS, PAGE_READY, AcknowledgeRoute, DrawnFrames


def test_a_frame_is_drawn_once_acknowledged():
    frames = DrawnFrames()
    first, second = frames.expect(), frames.expect()
    assert first != second and frames.pending() == 2
    frames.acknowledge(second)
    assert frames.wait(second, timeout=0.0)
    assert not frames.wait(first, timeout=0.01)                    # never acknowledged: the wait ends, False
    assert frames.pending() == 0


def test_an_acknowledgement_from_another_thread_ends_the_wait():
    frames = DrawnFrames()
    token = frames.expect()
    threading.Timer(0.05, frames.acknowledge, args=(token,)).start()
    started = time.perf_counter()
    assert frames.wait(token, timeout=5.0)
    assert time.perf_counter() - started < 2.0


def test_unknown_and_stale_tokens_are_ignored():
    frames = DrawnFrames()
    frames.acknowledge(PAGE_READY)                                  # the page's ready mark
    frames.acknowledge(None)
    frames.acknowledge("someone-else-7")
    token = frames.expect()
    assert not frames.wait(token, timeout=0.0)
    frames.acknowledge(token)                                       # late: the turn has gone on
    assert frames.pending() == 0
    assert DrawnFrames().expect() != DrawnFrames().expect()         # two apps (processes) never share a token


def test_the_status_line_carries_its_token_and_the_page_script_reads_it():
    html = page.run_status_html("Timing <each>", "busy", drawn='a"b')
    assert 'data-drawn="a&quot;b"' in html and "&lt;each&gt;" in html
    assert "data-drawn" not in page.run_status_html("Ready.")
    assert "#run-status [data-drawn]" in DRAWN_JS and "#pacer-drawn" in DRAWN_JS and f"'{PAGE_READY}'" in DRAWN_JS


def post(route, path: str, body: bytes, method: str = "POST") -> list:
    """What ``route`` sends for one request (``body`` in two parts), and whether the app behind it was called."""
    import asyncio

    parts = [{"type": "http.request", "body": body[:3], "more_body": True},
             {"type": "http.request", "body": body[3:], "more_body": False}]
    sent, called = [], []

    async def receive():
        return parts.pop(0)

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        called.append(scope["path"])

    route.app = app
    asyncio.run(route({"type": "http", "method": method, "path": path}, receive, send))
    return sent + [("app", path) for path in called]


def test_the_page_acknowledges_a_frame_by_a_plain_post_that_never_reaches_gradio():
    """``AcknowledgeRoute`` takes a POST to .../pacer-drawn (under any root path) with the token as its body; every
    other request goes on to the app, and an oversized body acknowledges nothing."""
    frames = DrawnFrames()
    token = frames.expect()
    route = AcknowledgeRoute(None, frames)
    sent = post(route, f"/{ACKNOWLEDGE_PATH}", token.encode())
    assert sent[0]["status"] == 204 and frames.wait(token, timeout=0.0)
    other = frames.expect()
    assert post(route, f"/space/{ACKNOWLEDGE_PATH}", other.encode())[0]["status"] == 204
    assert frames.wait(other, timeout=0.0)
    assert post(route, "/gradio_api/run/predict", b"{}") == [("app", "/gradio_api/run/predict")]
    assert post(route, f"/{ACKNOWLEDGE_PATH}", b"", method="GET") == [("app", f"/{ACKNOWLEDGE_PATH}")]
    late = frames.expect()
    assert post(route, f"/{ACKNOWLEDGE_PATH}", late.encode() + b"x" * 300)[0]["status"] == 413
    assert not frames.wait(late, timeout=0.0)
    assert f"'{ACKNOWLEDGE_PATH}'" in DRAWN_JS and "viaBox(token)" in DRAWN_JS       # the textbox: the fallback


def test_the_reply_is_written_before_the_acknowledgement_starts_a_methods_clock():
    """The turn waiting on the token resumes only after the 204 went out; a reply that fails still acknowledges."""
    import asyncio

    frames = DrawnFrames()

    def acknowledge(token: str, send) -> None:
        async def receive():
            return {"type": "http.request", "body": token.encode(), "more_body": False}

        asyncio.run(AcknowledgeRoute(None, frames)({"type": "http", "method": "POST", "path": f"/{ACKNOWLEDGE_PATH}"},
                                                   receive, send))

    order, acknowledged = [], frames.acknowledge
    frames.acknowledge = lambda token: order.append("acknowledged") or acknowledged(token)
    token = frames.expect()

    async def send(message):
        order.append(message["type"])

    acknowledge(token, send)
    assert order == ["http.response.start", "http.response.body", "acknowledged"]
    assert frames.wait(token, timeout=0.0)

    async def broken(message):
        raise OSError("the page left")

    gone = frames.expect()
    try:
        acknowledge(gone, broken)
    except OSError:
        pass
    assert frames.wait(gone, timeout=0.0)


def test_the_app_routes_the_page_s_acknowledgements_to_its_frames():
    from pacer_core.drafters import LoadedDrafters
    from pacer_core.testing.tiny import tiny_pair
    from pacer_core.ui import layout

    target, drafter = tiny_pair()
    demo = layout.build_ui(target, LoadedDrafters.around(drafter))
    middleware = layout.launch_options(demo.pacer_frames)["app_kwargs"]["middleware"]
    assert [entry.cls for entry in middleware][-1] is AcknowledgeRoute
    assert middleware[-1].kwargs["frames"] is demo.pacer_frames


def test_the_page_script_is_installed_and_a_run_reads_whether_the_page_acknowledges():
    from pacer_core.ui import layout

    assert layout.launch_options()["js"] == DRAWN_JS
    values = {"prompt": "p", "chat": False, "own": False, "ar": True, "drafter": None, "drawn": PAGE_READY}
    controls = layout.Controls("prompt", {}, "chat", "own", "ar", "drafter", "drawn")
    assert controls.read(values).acknowledges
    assert not controls.read(values | {"drawn": ""}).acknowledges        # an API client leaves it empty


def fake_demo(*events):
    return SimpleNamespace(_queue=SimpleNamespace(event_ids_to_events={str(i): e for i, e in enumerate(events)}))


def test_a_client_is_still_there_until_gradio_marks_its_session_gone():
    from pacer_core.ui.queue_watch import client_still_there

    mine = SimpleNamespace(session_hash="s1", closed=False, alive=True)
    other = SimpleNamespace(session_hash="s2", closed=True, alive=False)
    demo, request = fake_demo(mine, other), SimpleNamespace(session_hash="s1")
    still_there = client_still_there(demo, request)
    assert still_there()
    mine.closed = True                                              # its tab closed (Gradio's heartbeat ended)
    assert not still_there()
    mine.closed, mine.alive = False, False                          # its connection dropped
    assert not still_there()
    assert client_still_there(SimpleNamespace(), request)()         # no queue to read: never stops a Run
    assert client_still_there(demo, SimpleNamespace(session_hash=None))()


def test_gradio_still_has_what_the_check_reads():
    import inspect

    from gradio.queueing import Event, Queue

    assert "event_ids_to_events" in inspect.getsource(Queue.__init__)
    source = inspect.getsource(Event.__init__)
    assert all(f"self.{name}" in source for name in ("closed", "alive")) and "session_hash" in inspect.getsource(Event)


def test_gradio_polls_less_while_a_pages_method_decodes_and_as_before_after():
    from pacer_core.ui.queue_watch import QUIET_POLL_S, quiet_queue

    queue = SimpleNamespace(sleep_when_free=0.001, progress_update_sleep_when_free=0.01)
    with quiet_queue(SimpleNamespace(_queue=queue)):
        assert queue.sleep_when_free == queue.progress_update_sleep_when_free == QUIET_POLL_S
    assert (queue.sleep_when_free, queue.progress_update_sleep_when_free) == (0.001, 0.01)
    with quiet_queue(SimpleNamespace()):                            # no queue to quiet: nothing to do
        pass
    from gradio.queueing import Queue
    import inspect

    source = inspect.getsource(Queue.__init__)
    assert "self.sleep_when_free" in source and "self.progress_update_sleep_when_free" in source


def test_a_pages_method_decodes_inside_the_quiet_context_and_nothing_is_sent_meanwhile():
    from pacer_core.testing.tiny import tiny_pair
    from pacer_core.ui import handlers
    from pacer_core.ui.timing_turn import time_each_alone

    target, drafter = tiny_pair()
    context = handlers.AppContext(target, drafter)
    session = handlers.new_session(context, handlers.PageInputs("t1 t2", {"max_new_tokens": 6, "temperature": 0.8,
                                                                          "seed": 3}, measure_ar=True))
    inside, steps_inside = [], []
    advance_one = session.advance_one

    def recording(run):
        steps_inside.append(bool(inside))
        return advance_one(run)

    @contextlib.contextmanager
    def quiet():
        inside.append(1)
        try:
            yield
        finally:
            inside.pop()

    session.advance_one = recording
    frames = DrawnFrames()
    for update in time_each_alone(session, frames, quiet=quiet):
        assert not inside                                           # no frame goes out while quiet
        frames.acknowledge(update.status.split('data-drawn="')[1].split('"')[0])
    assert steps_inside and all(steps_inside)
