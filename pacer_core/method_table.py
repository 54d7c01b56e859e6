"""The method table: one ``MethodEntry`` per decoding method, and every list of methods derived from it.

A new decoder is its module (a class with ``run(target, drafter, prompt_ids, settings, cancel, ...)`` yielding
events and finally a ``Result``) plus one row here, plus the rows of the settings it reads in ``settings.FIELDS``.
Everything else looks the row up: the method grammar (``methods.parse_method``), the trace reader, the page's
columns, lanes, labels and colours, the metrics table and the atlas.

Rows are read through the functions below, never copied into module constants, so that a row registered later
(``registered``, used by the tests' toy decoder) appears everywhere. This module imports nothing of the project:
decoders are built through ``build`` (which imports its module on first use), so the settings table and the
trace reader, which sit below the decoders, can read the table too.

Word glossary: **key** is the method's word in settings, traces and the grammar (``fixed``); **label** its
column title (``Fixed-length SD``); **short label** its name in chart legends and race lanes (``fixed SD``)."""
from __future__ import annotations

import importlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator


def lazy_decoder(module: str, class_name: str, takes_preverifier: bool = False) -> Callable[[object], object]:
    """A ``build`` that imports ``module`` on first use (decoders sit above this table in the import graph)."""
    def build(preverifier=None):
        decoder_class = getattr(importlib.import_module(module), class_name)
        return decoder_class(preverifier=preverifier) if takes_preverifier else decoder_class()
    return build


def numbers_for(*names: str, converters: tuple = (), required: tuple[int, ...] = ()) -> Callable[[list[str]], dict]:
    """The grammar's ``key:N:M`` numbers as settings: ``names[i]`` takes the i-th number (``converters[i]``, else
    int). ``required`` lists the numbers of numbers allowed (empty: 0 up to ``len(names)``)."""
    counts = required or tuple(range(len(names) + 1))

    def parse(numbers: list[str]) -> dict:
        if len(numbers) not in counts:
            raise ValueError(f"{len(numbers)} numbers")
        convert = [converters[i] if i < len(converters) else int for i in range(len(names))]
        return {name: convert[i](value) for i, (name, value) in enumerate(zip(names, numbers))}
    return parse


@dataclass(frozen=True)
class MethodEntry:
    key: str                                     # settings', traces' and the grammar's word for it
    label: str                                   # its column title and its row in the metrics table
    short_label: str                             # chart legends and race lanes
    colour: str                                  # one colour per method in every chart (Okabe-Ito)
    build: Callable[[object], object]            # preverifier -> a fresh decoder
    grammar: str                                 # how the bench writes it, e.g. "pacer[:B:L[:T]]"
    parse_numbers: Callable[[list[str]], dict]   # the grammar's numbers after ``key:`` -> settings
    steps: bool = True                           # yields one StepEvent per target pass (else SMCCycleEvent)
    column: bool = True                          # has a column of its own (AR is the yardstick, shown in lanes)
    exact: bool = True                           # reproduces the target's distribution (greedy: AR's tokens)
    speculative: bool = True                     # drafts with a drafter (accepts ``@DRAFTER`` in the grammar)
    scored: bool = False                         # sampled runs the page scores (oracle γ*, likelihood, divergence)
    output_drafted: bool = False                 # every output token is a draft sample (nothing corrected)


PAGE_METHOD_ROWS: list[MethodEntry] = [
    MethodEntry("ar", "Autoregressive (AR)", "AR", "#000000",
                lazy_decoder("pacer_core.decoders.autoregressive", "Autoregressive"), "ar", numbers_for(),
                column=False, speculative=False),
    MethodEntry("fixed", "Fixed-length SD", "fixed SD", "#56B4E9",
                lazy_decoder("pacer_core.decoders.fixed", "FixedSpeculative"), "fixed:G",
                numbers_for("gamma")),
    MethodEntry("pacer", "PACER", "PACER", "#0072B2",
                lazy_decoder("pacer_core.decoders.pacer", "Pacer", takes_preverifier=True), "pacer[:B:L[:T]]",
                numbers_for("block_size", "max_draft_len", "threshold", converters=(int, int, float),
                            required=(0, 2, 3)), scored=True),
    MethodEntry("smc", "SMC-SD (approximate)", "SMC-SD", "#CC79A7",
                lazy_decoder("pacer_core.decoders.smc", "SMC"), "smc:N:K[:DRAFT_T]",
                numbers_for("n_particles", "draft_len", "draft_temperature", converters=(int, int, float),
                            required=(2, 3)),
                steps=False, exact=False, scored=True, output_drafted=True),
]


def rows() -> tuple[MethodEntry, ...]:
    """Every method, in the page's order (AR first: the yardstick's lane)."""
    return tuple(PAGE_METHOD_ROWS)


def find(key: str) -> MethodEntry | None:
    return next((row for row in PAGE_METHOD_ROWS if row.key == key), None)


def entry(key: str) -> MethodEntry:
    row = find(key)
    if row is None:
        raise KeyError(f"no method {key!r}; known: {', '.join(method_keys())}")
    return row


def keys_where(flag: Callable[[MethodEntry], bool]) -> tuple[str, ...]:
    """The keys of the rows a flag holds for, in the table's order."""
    return tuple(row.key for row in PAGE_METHOD_ROWS if flag(row))


def method_keys() -> tuple[str, ...]:
    """The page's methods, AR first."""
    return keys_where(lambda row: True)


def column_keys() -> tuple[str, ...]:
    """The methods with a column of their own."""
    return keys_where(lambda row: row.column)


def scored_keys() -> tuple[str, ...]:
    """The methods whose sampled outputs the page scores against the target (oracle, likelihood, divergence)."""
    return keys_where(lambda row: row.scored)


def drafting_keys() -> tuple[str, ...]:
    """The methods that draft step by step (a StepEvent per target pass, with a drafter): the ones whose drafts the
    atlas judges token by token and the draft charts draw."""
    return keys_where(lambda row: row.steps and row.speculative)


def exact_keys() -> tuple[str, ...]:
    return keys_where(lambda row: row.exact)


def field_of(key: str, name: str, fallback):
    """One field of a method's row; ``fallback`` for a key the table does not know (an old trace's)."""
    row = find(key)
    return getattr(row, name) if row else fallback


def steps_by_pass(key: str) -> bool:
    """Does this method's trace hold one StepEvent per target pass (unknown keys: yes)."""
    return field_of(key, "steps", True)


def label_of(key: str) -> str:
    return field_of(key, "label", key)


def short_label_of(key: str) -> str:
    return field_of(key, "short_label", key)


def colour_of(key: str, fallback: str = "#000000") -> str:
    return field_of(key, "colour", fallback)


def make_decoder(key: str, preverifier=None):
    """A fresh decoder for a method key."""
    return entry(key).build(preverifier)


@contextmanager
def registered(new_row: MethodEntry) -> Iterator[MethodEntry]:
    """Add a row for the duration of a block (the tests' toy decoder); the table is as before afterwards."""
    if find(new_row.key):
        raise ValueError(f"method {new_row.key!r} is already in the table")
    PAGE_METHOD_ROWS.append(new_row)
    try:
        yield new_row
    finally:
        PAGE_METHOD_ROWS.remove(new_row)
