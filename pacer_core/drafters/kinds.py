"""The drafter table: one entry per drafter the page can offer, and every lookup by key, kind or name. A new
drafter is one module (its class, a ``drafter.Drafter``, with a builder and an availability check for a pair) and
one entry here.

Three words, each for one thing:

* **key**: an entry's key, one per row of ``KINDS``: ``small``, ``head``, ``self-int8``, ``self-int4``, ``gguf``.
  The page's drafter menu offers keys, ``measured_defaults.json`` records figures under them, and
  ``drafter_key(drafter)`` gives a drafter object's key.
* **kind**: a drafter object's ``kind`` attribute, what sort of object it is: ``independent``, ``feature-head``,
  ``self-quantized`` (both self keys) or ``gguf``; an entry's ``kind`` says which objects it builds.
* **name**: what a user writes to choose a drafter (``--draft``, the bench's ``method@drafter``,
  ``load_drafter(target, drafters, name)``, ``training.compare --drafters``): every key, plus ``small-N`` (the independent
  draft scoring its N most frequent ids), ``head-N`` and ``head-all`` (the head's output vocabulary), ``gguf-N`` and
  ``gguf-all`` (how many ids the embedded GGUF file's head scores).
  ``DrafterEntry.answers_to(name)`` says whether an entry builds for a name."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .drafter import Drafter
from .feature_head import head_drafter, head_unavailable
from .gguf_drafter import GGUF_ENV, gguf_drafter_for, gguf_path, gguf_unavailable
from .independent import small_drafter, small_unavailable
from .self_quantized import SELF_DRAFTERS, self_drafter, self_unavailable


@dataclass(frozen=True)
class DrafterEntry:
    key: str                                       # the page's and measured_defaults.json's word for it
    kind: str                                      # the ``kind`` of the drafter objects it builds
    words: str                                     # what it is, in a few words (the page's menu line)
    answers_to: Callable[[str], bool]              # does this entry build the drafter of that name
    unavailable: Callable[[object, object], str | None]   # (target, drafters) -> why it cannot be offered (None: it can)
    build: Callable[..., Drafter]                  # (target, drafters, name, head_dir) -> the drafter
    matches: Callable[[Drafter], bool] = lambda drafter: True   # is a drafter object of this kind this entry's


def numbered(base: str, extra: tuple[str, ...] = ()) -> Callable[[str], bool]:
    """Answers to ``base``, ``base-N`` (N > 0) and the ``extra`` names."""
    def answers_to(name: str) -> bool:
        suffix = name[len(base) + 1:] if name.startswith(base + "-") else ""
        return name == base or name in extra or (suffix.isdigit() and int(suffix) > 0)
    return answers_to


def only(key: str) -> Callable[[str], bool]:
    return lambda name: name == key


KINDS = (
    DrafterEntry("small", "independent", "a separate small model", numbered("small"), small_unavailable,
                 small_drafter),
    DrafterEntry("head", "feature-head", "a 1-layer head reading the target's hidden state",
                 numbered("head", ("head-all",)), head_unavailable, head_drafter),
    DrafterEntry("self-int8", "self-quantized", "the target's own weights in 8 bits", only("self-int8"),
                 self_unavailable(8), self_drafter, lambda drafter: getattr(drafter, "bits", 0) == 8),
    DrafterEntry("self-int4", "self-quantized", "the target's own weights in 4 bits", only("self-int4"),
                 self_unavailable(4), self_drafter, lambda drafter: getattr(drafter, "bits", 0) == 4),
    DrafterEntry("gguf", "gguf", "the target's own GGUF file run by llama.cpp", numbered("gguf", ("gguf-all",)),
                 gguf_unavailable, gguf_drafter_for),
)


def drafter_keys() -> tuple[str, ...]:
    """Every entry's key, in the table's order (the page's menu order)."""
    return tuple(entry.key for entry in KINDS)


def entry_for_name(name: str) -> DrafterEntry | None:
    return next((entry for entry in KINDS if entry.answers_to(name)), None)


def entry_for_key(key: str) -> DrafterEntry | None:
    return next((entry for entry in KINDS if entry.key == key), None)


def entry_of_drafter(drafter) -> DrafterEntry:
    """The table's entry for a drafter object (an unknown kind counts as ``small``: an independent causal LM)."""
    kind = getattr(drafter, "kind", "")
    return next((entry for entry in KINDS if entry.kind == kind and entry.matches(drafter)), KINDS[0])


def drafter_key(drafter) -> str:
    """A drafter object's key (the page's menu, measured_defaults.json)."""
    return entry_of_drafter(drafter).key


def all_names_text() -> str:
    """Every name a drafter answers to, for messages: the keys with the numbered variants after theirs."""
    variants = {"small": ["small", "small-N"], "head": ["head", "head-N", "head-all"],
                "gguf": ["gguf", "gguf-N", "gguf-all"]}
    return ", ".join(name for key in drafter_keys() for name in variants.get(key, [key]))


def valid_drafter_name(name: str) -> bool:
    """Whether some entry answers to ``name`` (names, see the module docstring)."""
    return entry_for_name(name) is not None


def load_drafter(target, drafters, name: str, head_dir=None):
    """A drafter by name, bound to the pair's target and built from what the loader loaded beside it
    (``loaded.LoadedDrafters``; the head folder defaults to the embedded one); ValueError saying why when it
    cannot be built."""
    entry = entry_for_name(name)
    if entry is None:
        raise ValueError(f"Unknown drafter {name!r}: use {all_names_text()}.")
    return entry.build(target, drafters, name, head_dir)


__all__ = ["DrafterEntry", "KINDS", "drafter_keys", "entry_for_name", "entry_for_key", "entry_of_drafter", "drafter_key",
           "all_names_text", "valid_drafter_name", "load_drafter", "gguf_path", "gguf_unavailable", "SELF_DRAFTERS",
           "GGUF_ENV"]
