"""Drafter switching: the page's drafter menu names a drafter per click; the click then runs in a context drafting
with it (its PACER with that drafter's trained pre-verifier, or the confidence rule). The drafters are built on
first use and kept by the ``DrafterMenu``; the target is never reloaded. ``app_context`` is the page's starting
context (the loader's drafter and its pre-verifier), built the same way by ``layout.build_ui`` and
scripts/record_traces.py."""
from __future__ import annotations

import sys
import traceback
from dataclasses import replace

from ..models import ModelLoadError
from ..settings import Limits
from .drafter_menu import DrafterMenu
from .page_types import AppContext, PageInputs, ViewUpdate, error_update
from .session import user_message


def load_preverifier(target, drafter):
    """The trained pre-verifier for the pair's target and ``drafter``, or None (PACER then uses its heuristic
    rule)."""
    try:
        from ..preverifier import default_preverifier

        return default_preverifier(target, drafter)
    except Exception:  # noqa: BLE001 - a broken optional layer must not stop the app
        traceback.print_exc(file=sys.stderr)
        return None


def app_context(target, drafters, preverifier=None, limits: Limits | None = None) -> AppContext:
    """What every click of the app shares: the loader's drafter (``drafters.default``, a ``LoadedDrafters``), its
    pre-verifier (the trained layer when there is one) and the menu of the other drafters the target offers."""
    drafter = drafters.default
    preverifier = preverifier if preverifier is not None else load_preverifier(target, drafter)
    kind = getattr(preverifier, "kind", None) or "heuristic"   # no layer loaded: PACER's confidence rule
    return AppContext(target, drafter, preverifier, kind, limits or Limits.from_env(),
                      DrafterMenu(target, drafters, preverifier))


def drafter_context(context: AppContext, key: str | None) -> AppContext:
    """The context drafting with the menu's ``key``; the same context for its own drafter. ValueError for a key
    the page does not offer."""
    menu = context.drafter_menu
    if menu is None or not key or key == menu.default_key:
        if key and menu is None:
            raise ValueError(f"This page drafts only with its pair's own drafter, not '{key}'.")
        return context
    drafter = menu.drafter(key)
    preverifier = menu.preverifier(key)
    return replace(context, drafter=drafter, preverifier=preverifier,
                   preverifier_kind=getattr(preverifier, "kind", None) or "heuristic")


def contexts_for(context: AppContext, inputs: PageInputs) -> tuple[AppContext | None, ViewUpdate | None]:
    """(the drafter's context, None), or (None, an error ViewUpdate) when the drafter cannot be built."""
    try:
        return drafter_context(context, inputs.drafter), None
    except (ValueError, ModelLoadError) as error:
        return None, error_update(user_message(error) if isinstance(error, ModelLoadError) else str(error))
