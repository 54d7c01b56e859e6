"""Drafter switching: the page's drafter menu names a drafter per click; the click then runs in a context drafting
with it (its PACER with that drafter's trained pre-verifier, or the confidence rule). The drafters are built on
first use and kept by the ``DrafterMenu``; the target is never reloaded."""
from __future__ import annotations

from dataclasses import replace

from ..models import ModelLoadError
from .page_types import AppContext, PageInputs, ViewUpdate, error_update
from .session import user_message


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
