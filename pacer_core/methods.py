"""The method grammar shared by the bench CLI and the UI's measured-results table: each row of
``method_table`` by its ``grammar`` (its numbers read by the row's ``parse_numbers``), plus the forms only the
bench runs (``BENCH_ONLY_FORMS``). Today:

    ar, hf, hf-assisted[:G], hf-assisted-dynamic, fixed:G, fixed:dyn[:G], pacer[:B:L[:THRESHOLD]],
    smc:N:K[:DRAFT_T], oracle

``fixed:dyn[:G]`` is fixed SD on transformers' assisted-generation schedule (start at G, else the drafter's
measured γ; +2 after a fully kept draft, -1 otherwise), run by this engine with the row's drafter. Each is
optionally followed by +NAME=VALUE settings of its own and, for a speculative one, by @DRAFTER (small,
small-N, head, head-N, head-all, self-int4, self-int8, gguf). Example:
``parse_method("pacer:2:8:0.4+phrase_len=8@head")`` is a PACER run with block
size 2, at most 8 drafted tokens, threshold 0.4 and phrase drafts of up to 8 tokens, drafted by the feature head.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import method_table
from .drafters import all_names_text, valid_drafter_name
from .settings import SettingsError

HF_METHODS = ("hf", "hf-assisted", "hf-assisted-dynamic")
BENCH_ONLY_FORMS = ("fixed:dyn[:G]", "hf", "hf-assisted[:G]", "hf-assisted-dynamic", "oracle")


@dataclass
class MethodSpec:
    label: str
    kind: str                 # a method_table key, or oracle | hf | hf-assisted | hf-assisted-dynamic
    overrides: dict = field(default_factory=dict)
    drafter: str | None = None  # drafters.valid_drafter_name: small, head, self-int4, ...; None: the pair's


def parse_method(text: str) -> MethodSpec:
    """One form of ``grammar_text()`` (ar, fixed:G, pacer[:B:L[:THRESHOLD]], ..., oracle), optionally followed by
    +NAME=VALUE settings and, for a method that drafts (``takes_drafter``), @DRAFTER (drafters.valid_drafter_name)."""
    method_text, _, drafter = text.strip().partition("@")
    method_text, *assignments = method_text.split("+")
    spec = _parse_method_name(method_text)
    spec.overrides.update(_row_settings(text, assignments))
    spec.label = text.strip() if assignments else spec.label
    if drafter:
        if not takes_drafter(spec.kind) or not valid_drafter_name(drafter):
            raise SettingsError(f"{text!r}: @{drafter} needs a speculative method of ours and one of "
                                f"{all_names_text()}.")
        spec.label, spec.drafter = text.strip(), drafter
    return spec


def _row_settings(text: str, assignments: list[str]) -> dict:
    """+NAME=VALUE parts: numbers become numbers; the run request validates names and ranges."""
    settings = {}
    for assignment in assignments:
        name, equals, value = assignment.partition("=")
        if not equals or not name.strip():
            raise SettingsError(f"{text!r}: write row settings as +NAME=VALUE (e.g. pacer+stop_rule=cost).")
        settings[name.strip()] = _number_or_text(value.strip())
    return settings


def _number_or_text(value: str):
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return value


def _parse_method_name(text: str) -> MethodSpec:
    """A table row's ``key[:numbers]`` (its ``parse_numbers``), or one of the forms only the bench runs: the
    transformers rows, the oracle and fixed SD on the dynamic schedule."""
    parts = text.strip().split(":")
    name, numbers = parts[0], parts[1:]
    row = method_table.find(name)
    try:
        if name in ("hf", "hf-assisted-dynamic", "oracle") and not numbers:
            return MethodSpec(text, name)
        if name == "fixed" and numbers[:1] == ["dyn"] and len(numbers) <= 2:
            start = {"gamma": int(numbers[1])} if numbers[1:] else {}
            return MethodSpec(text, name, {"gamma_schedule": "dynamic"} | start)
        if name == "hf-assisted" and len(numbers) <= 1:
            return MethodSpec(text, name, {"gamma": int(numbers[0])} if numbers else {})
        if row is not None:
            return MethodSpec(text, name, row.parse_numbers(numbers))
    except ValueError:
        pass
    raise SettingsError(f"Unknown benchmark method {text!r}. Use {grammar_text()}.")


def grammar_text() -> str:
    """Every form the grammar accepts: the table's rows, then the bench's own."""
    forms = [row.grammar for row in method_table.rows()] + list(BENCH_ONLY_FORMS)
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def takes_drafter(kind: str) -> bool:
    """Whether a method of ours drafts (accepts ``@DRAFTER``): a speculative row, or the oracle's fixed SD."""
    row = method_table.find(kind)
    return kind == "oracle" or (row is not None and row.speculative)
