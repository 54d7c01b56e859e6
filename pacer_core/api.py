"""The public convenience calls: build a run request once (``pacer_core.request``), then run it."""
from __future__ import annotations

from typing import Iterator

from . import method_table
from .events import Result
from .request import RunRequest, build_request
from .settings import Limits, SettingsError


def make_decoder(method: str, preverifier=None):
    """A fresh decoder for a method key (``method_table``); it reads every setting from the run's."""
    row = method_table.find(method)
    if row is None:
        raise SettingsError(f"Unknown method {method!r}.")
    return row.build(preverifier)


def run_request(target, request: RunRequest, cancel=None) -> Iterator:
    """Yield the decoder's events and finally its Result, for a request resolved at its front door."""
    decoder = make_decoder(request.method, request.preverifier)
    for item in decoder.run(target, request.drafter, list(request.prompt_ids), request.settings, cancel,
                            keep_rows=request.keep_rows):
        if isinstance(item, Result) and request.prompt_note:
            item.info["prompt_note"] = request.prompt_note
        yield item


def stream(target, drafter, method: str, prompt: str, cancel=None, preverifier=None, chat: bool | None = None,
           limits: Limits | None = None, **raw_settings) -> Iterator:
    """Validate everything once, then yield the decoder's events and finally its Result, drafting with
    ``drafter`` (the loader's, ``models.load_target``, or another built for the pair: ``drafters.load_drafter``)."""
    request = build_request(target, drafter, method, prompt, raw_settings, chat=chat, preverifier=preverifier,
                            limits=limits)
    yield from run_request(target, request, cancel)


def generate(target, drafter, method: str, prompt: str, cancel=None, preverifier=None, chat: bool | None = None,
             limits: Limits | None = None, **raw_settings) -> Result:
    """Run one method drafting with ``drafter`` to the end and return its Result (.text, .token_ids, .events,
    .metrics)."""
    result = None
    for item in stream(target, drafter, method, prompt, cancel, preverifier, chat, limits, **raw_settings):
        result = item
    return result
