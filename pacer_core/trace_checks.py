"""The checks a trace's values pass (``trace.py`` reads the file; this module checks what it holds): each value
against the type hint of the events.py field it fills (``checker``, built once per hint), and free-form JSON
(settings, info, the pair) against the size limits (``plain_json``). A failure is a ``TraceError`` naming the
path of the value ("results.pacer.events[3].tokens[0].text: expected text.")."""
from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import lru_cache

from .events import IN_MEMORY_ONLY, TokenRecord, TokenState
from .settings import Limits


class TraceError(ValueError):
    """A trace that cannot be replayed; the message says why in one sentence, for the page."""


@dataclass(frozen=True)
class TraceLimits:
    """What a trace may hold at most. Generous for any run a page allows (512 new tokens by default; a GPU
    Space may allow more), small enough that a hostile file cannot make the page slow."""
    max_bytes: int = 16 * 2**20
    max_events: int = 8192              # per method: each event emits at least one token
    max_tokens: int = 16384             # token ids of one output
    max_step_tokens: int = 512          # tokens shown in one step (drafts plus the target's token)
    max_particles: int = 64
    max_token_text: int = 1000          # characters of one token piece
    max_text: int = 1_000_000           # characters of any other string
    max_list: int = 16384               # items of any other list
    max_depth: int = 6                  # nesting of free-form dicts (settings, info, pair)

    def settings_limits(self) -> Limits:
        return Limits(max_new_tokens=self.max_tokens, max_prompt_tokens=self.max_tokens,
                      max_particles=self.max_particles, max_prompt_chars=self.max_text)


def coerce(value, hint, where: str, limits: TraceLimits):
    """``value`` checked against ``hint`` (a dataclass is rebuilt), or TraceError naming where it failed."""
    try:
        return checker(hint)(value, limits)
    except _Invalid as error:
        raise TraceError(f"{where}{error.path}: {error.message}") from None


def build(cls, value, where: str, limits: TraceLimits):
    """An instance of dataclass ``cls`` from a JSON object, every field checked against its type hint."""
    return coerce(value, cls, where, limits)


class _Invalid(Exception):
    """A value that does not fit its hint; ``path`` (".tokens[3].text") grows as it propagates up, so the
    path string is built only for the one value that failed."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.message, self.path = message, path

    def at(self, step: str) -> "_Invalid":
        return _Invalid(self.message, step + self.path)


@lru_cache(maxsize=None)
def checker(hint):
    """The check of one type hint, built once per hint: (value, limits) → the value, unchanged (an int stays an
    int where a float is allowed, so the renderers print what the live page printed), or _Invalid."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _optional_check(checker(inner))
    if origin is list or hint is list:
        return _list_check(checker(args[0]) if args else None)
    if is_dataclass(hint):
        return _dataclass_check(hint)
    if hint is dict or origin is dict:
        return _plain_check
    return SCALAR_CHECKS[hint]


def _optional_check(inner):
    def check(value, limits):
        return None if value is None else inner(value, limits)
    return check


def _list_check(item):
    def check(value, limits):
        if not isinstance(value, list):
            raise _Invalid("expected a list.")
        if len(value) > limits.max_list:
            raise _Invalid(f"{len(value):,} items, more than a trace may hold.")
        if item is None:
            return _plain_check(value, limits)
        checked = []
        try:
            for entry in value:
                checked.append(item(entry, limits))
        except _Invalid as error:
            raise error.at(f"[{len(checked)}]") from None
        return checked
    return check


def _dataclass_check(cls):
    hints = typing.get_type_hints(cls)
    serialised = [item for item in fields(cls) if not item.metadata.get(IN_MEMORY_ONLY)]   # what a trace can hold
    checks = {item.name: checker(hints[item.name]) for item in serialised}
    required = {item.name for item in serialised if item.default is MISSING and item.default_factory is MISSING}

    def check(value, limits):
        if not isinstance(value, dict):
            raise _Invalid("expected an object.")
        unknown, missing = value.keys() - checks.keys(), required - value.keys()
        if unknown:
            raise _Invalid(f"unknown field {sorted(unknown)[0][:40]!r}.")
        if missing:
            raise _Invalid(f"missing field {sorted(missing)[0]!r}.")
        kwargs = {}
        try:
            for name, entry in value.items():
                kwargs[name] = checks[name](entry, limits)
        except _Invalid as error:
            raise error.at(f".{name}") from None
        if cls is TokenRecord and len(kwargs.get("text", "")) > limits.max_token_text:
            raise _Invalid(f"{len(kwargs['text']):,} characters, more than one token may hold.", ".text")
        return cls(**kwargs)
    return check


def _check_bool(value, limits):
    if value is True or value is False:
        return value
    raise _Invalid("expected true or false.")


def _check_int(value, limits):
    if type(value) is int and abs(value) <= 2**53:
        return value
    raise _Invalid("expected a whole number.")


def _check_float(value, limits):
    if (type(value) is float and math.isfinite(value)) or (type(value) is int and abs(value) <= 2**53):
        return value
    raise _Invalid("expected a finite number.")


def _check_str(value, limits):
    if type(value) is str and len(value) <= limits.max_text:
        return value
    raise _Invalid("expected text." if not isinstance(value, str) else
                   f"{len(value):,} characters, more than a trace may hold ({limits.max_text:,}).")


def _check_state(value, limits):
    try:
        return TokenState(value)
    except (TypeError, ValueError):
        raise _Invalid(f"{str(value)[:40]!r} is not a token state.") from None


SCALAR_CHECKS = {bool: _check_bool, int: _check_int, float: _check_float, str: _check_str, TokenState: _check_state}


def checked_text(value, where: str, longest: int) -> str:
    if not isinstance(value, str):
        raise TraceError(f"{where}: expected text.")
    if len(value) > longest:
        raise TraceError(f"{where}: {len(value):,} characters, more than a trace may hold ({longest:,}).")
    return value


def optional_value(value, hint, where: str, limits: TraceLimits):
    return None if value is None else coerce(value, hint, where, limits)


def plain_json(value, where: str, limits: TraceLimits):
    """Free-form JSON (settings, info, the pair): bounded depth, lengths and text; returned as is."""
    try:
        return _plain_check(value, limits)
    except _Invalid as error:
        raise TraceError(f"{where}{error.path}: {error.message}") from None


def _plain_check(value, limits: TraceLimits, depth: int = 0):
    if depth > limits.max_depth:
        raise _Invalid("nested too deeply.")
    if isinstance(value, (dict, list)) and len(value) > limits.max_list:
        raise _Invalid(f"{len(value):,} items, more than a trace may hold.")
    if isinstance(value, dict):
        for key, item in value.items():
            if len(key) > 200:
                raise _Invalid("a key is too long.")
            try:
                _plain_check(item, limits, depth + 1)
            except _Invalid as error:
                raise error.at(f".{key[:40]}") from None
    elif isinstance(value, list):
        for index, item in enumerate(value):
            try:
                _plain_check(item, limits, depth + 1)
            except _Invalid as error:
                raise error.at(f"[{index}]") from None
    elif isinstance(value, str):
        _check_str(value, limits)
    elif isinstance(value, float) and not math.isfinite(value):
        raise _Invalid("expected a finite number.")
    return value
