"""The method grammar shared by the bench CLI and the UI's measured-results table.

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

from .drafters import all_names_text, valid_drafter_name
from .settings import SettingsError

HF_METHODS = ("hf", "hf-assisted", "hf-assisted-dynamic")


@dataclass
class MethodSpec:
    label: str
    kind: str                 # ar | fixed | pacer | smc | oracle | hf | hf-assisted | hf-assisted-dynamic
    overrides: dict = field(default_factory=dict)
    drafter: str | None = None  # drafters.valid_drafter_name: small, head, self-int4, ...; None: the pair's


def parse_method(text: str) -> MethodSpec:
    """ar, hf, hf-assisted[:G], hf-assisted-dynamic, fixed:G, fixed:dyn[:G], pacer[:B:L[:THRESHOLD]], smc:N:K[:DRAFT_T],
    oracle, each speculative one optionally followed by @DRAFTER (drafters.valid_drafter_name)."""
    method_text, _, drafter = text.strip().partition("@")
    method_text, *assignments = method_text.split("+")
    spec = _parse_method_name(method_text)
    spec.overrides.update(_row_settings(text, assignments))
    spec.label = text.strip() if assignments else spec.label
    if drafter:
        if spec.kind in ("ar", "hf") or spec.kind.startswith("hf-assisted") or not valid_drafter_name(drafter):
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
    parts = text.strip().split(":")
    name, numbers = parts[0], parts[1:]
    try:
        if name in ("ar", "hf", "hf-assisted-dynamic", "oracle") and not numbers:
            return MethodSpec(text, name)
        if name == "fixed" and numbers[:1] == ["dyn"] and len(numbers) <= 2:
            start = {"gamma": int(numbers[1])} if numbers[1:] else {}
            return MethodSpec(text, name, {"gamma_schedule": "dynamic"} | start)
        if name in ("fixed", "hf-assisted") and len(numbers) <= 1:
            return MethodSpec(text, name, {"gamma": int(numbers[0])} if numbers else {})
        if name == "pacer" and len(numbers) in (0, 2, 3):
            keys = ("block_size", "max_draft_len", "threshold")
            return MethodSpec(text, name, {k: float(v) if k == "threshold" else int(v) for k, v in zip(keys, numbers)})
        if name == "smc" and len(numbers) in (2, 3):
            overrides = {"n_particles": int(numbers[0]), "draft_len": int(numbers[1])}
            if len(numbers) == 3:
                overrides["draft_temperature"] = float(numbers[2])
            return MethodSpec(text, name, overrides)
    except ValueError:
        pass
    raise SettingsError(f"Unknown benchmark method {text!r}. Use ar, hf, hf-assisted[:G], hf-assisted-dynamic, "
                        "fixed:G, fixed:dyn[:G], pacer[:B:L[:T]], smc:N:K[:DRAFT_T] or oracle.")
