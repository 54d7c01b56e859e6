"""pacer_core/heap.py: what startup leaves is collected once and frozen, so no full collection walks it later; app.py
freezes once it serves, before its compute thread takes the page's model work."""
from __future__ import annotations

import gc
import weakref

import pytest
from script_module import load_script


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self):
        self.partner = self


@pytest.fixture
def unfrozen():
    yield
    gc.unfreeze()


def test_startup_garbage_is_collected_and_what_is_alive_is_frozen(unfrozen):
    from pacer_core.heap import freeze_loaded_heap

    garbage, kept = Node(), Node()
    gone = weakref.ref(garbage)
    del garbage
    seconds = freeze_loaded_heap()
    assert seconds >= 0 and gone() is None, "the cycle startup dropped is collected before the freeze"
    assert gc.get_freeze_count() > 0
    remembered = weakref.ref(kept)
    del kept
    gc.collect()
    assert remembered() is not None, "a frozen object is out of the collector's reach (no full walk over it)"
    gc.unfreeze()
    gc.collect()
    assert remembered() is None


def test_the_app_freezes_once_it_serves_before_its_compute_thread_runs(monkeypatch):
    import argparse

    from pacer_core import heap
    from pacer_core.compute_thread import COMPUTE_THREAD
    from pacer_core.ui import layout

    order = []
    monkeypatch.setattr(layout, "serve", lambda demo, **options: order.append("serve"))
    monkeypatch.setattr(heap, "freeze_loaded_heap", lambda: order.append("freeze") or 0.0)
    monkeypatch.setattr(COMPUTE_THREAD, "serve_forever", lambda: order.append("compute"))
    load_script("app.py").serve_on_main_thread(object(), argparse.Namespace(host="127.0.0.1", port=0, concurrency=None))
    assert order == ["serve", "freeze", "compute"]
