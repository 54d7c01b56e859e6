"""What every drafter is to the rest of the project (``Drafter``): the decoders, the loader and the page use a
drafter only through these members, so a new kind is one module with a class that has them plus one row of
``kinds.KINDS``."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..kvcache import ModelCache


@runtime_checkable
class Drafter(Protocol):
    """``kind``: what sort of object it is (``kinds.py``'s word); ``name``: what the page and the records call it;
    ``reads_target_features``: it drafts from the target's hidden states, so the target runs on torch and records
    them (``llama.engine.active_engine``). ``new_cache(target_cache, full_support)``: this drafter's cache for
    one run beside the target's (``full_support``: q > 0 on every id, SMC-SD's proposal); ``describe()``: what
    the page and the records show about it."""

    kind: str
    name: str
    reads_target_features: bool

    def new_cache(self, target_cache: ModelCache | None, full_support: bool = False) -> ModelCache: ...

    def describe(self) -> dict: ...
