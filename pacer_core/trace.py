"""Exported run traces: the JSON the page's "⬇ JSON trace" writes, read back for replay.

A trace is untrusted input (a file anyone can edit or hand to a class). ``parse_trace`` turns its bytes into
a ``RecordedRun`` of the same typed events the decoders yield (``pacer_core.events``), or raises
``TraceError`` with one sentence a person can act on; it never executes or interprets anything in the file.
The schema is ``docs/trace-format.md``. Invariants of a RecordedRun:

* ``format == TRACE_FORMAT`` and ``version == TRACE_VERSION`` (older and newer versions are refused by name);
* every event and Result is rebuilt through its dataclass, field by field against the dataclass's own type
  hints (``trace_checks.checker``; a field added to ``events.py`` is read without a change here), unknown
  fields refused;
* sizes are bounded (``TraceLimits``): file bytes, events per method, tokens per step, particles, text;
* methods are the page's (``method_table.method_keys``); step methods hold ``StepEvent``s, the others
  (SMC-SD) ``SMCCycleEvent``s whose per-particle lists all have N entries and whose ancestors lie in 0..N-1;
* settings pass ``settings.validate_settings`` (at ``TraceLimits``' caps, not this Space's).

Text (token pieces, prompt, model names) is kept exactly as recorded: the page's renderers escape it.

    recorded = parse_trace(Path("assets/traces/phrase-drafts.json").read_bytes())
    recorded.results["pacer"].events[0].blocks[0]      # a BlockDecision, as the decoder yielded it
    parse_trace(b'{"results": {}}')                    # TraceError: This trace has no format version: ..."""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from . import __version__, method_table
from .events import Result, SMCCycleEvent, StepEvent
from .settings import SettingsError, validate_settings
from .trace_checks import TraceError, TraceLimits, build, checked_text, coerce, optional_value, plain_json

TRACE_FORMAT = "pacer-lab-trace"
TRACE_VERSION = 1
DRAFTER_KEY = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")   # a drafter key (drafters.kinds; plot titles show it)


@dataclass
class RecordedRun:
    """A validated trace: what the page needs to show the run again, with no model."""
    prompt: str
    settings: dict                      # validated, as RunSession.settings
    pair: dict                          # Target.describe() of the pair it ran on
    results: dict[str, Result]          # method → Result with its events (AR when the baseline was measured)
    busy_seconds: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)    # method → why it did not run (SMC-SD when greedy)
    drafter: str | None = None          # the page's drafter key
    preverifier_kind: str = "heuristic"
    logliks: dict[str, float] = field(default_factory=dict)
    proposal_kl: float | None = None
    oracle: list | None = None
    oracle_steps: list | None = None
    oracle_note: str | None = None
    pacer_rule: str | None = None      # what stopped PACER's drafting, in words (traces before it: None)
    prompt_note: str | None = None
    chat_template: bool | None = None
    stopped: bool = False
    recorded_at: str = ""
    project_version: str = ""
    title: str | None = None


def trace_header() -> dict:
    """The fields every exported trace starts with: format, version, project version, UTC time."""
    return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "project_version": __version__,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ---------------------------------------------------------------- bytes → dict

def parse_trace(data: bytes | str, limits: TraceLimits = TraceLimits()) -> RecordedRun:
    """A trace file's content → RecordedRun, or TraceError."""
    if len(data) > limits.max_bytes:
        raise TraceError(f"The file is too large for a trace ({len(data) / 2**20:.1f} MB; at most "
                         f"{limits.max_bytes / 2**20:.0f} MB).")
    return validate_trace(load_json(data), limits)


def load_json(data: bytes | str) -> dict:
    """Strict JSON (no NaN or Infinity) with a message for a file that ends early or is not JSON."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise TraceError("The file is not a trace: it is not UTF-8 text.") from None
    try:
        raw = json.loads(data, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        if error.pos >= len(data.rstrip()) - 5 or error.msg.startswith("Unterminated string"):   # cut off
            raise TraceError("The file ends early (incomplete JSON): it was probably cut off while downloading. "
                             "Export the trace again.") from None
        raise TraceError(f"The file is not valid JSON (line {error.lineno}, column {error.colno}: "
                         f"{error.msg}).") from None
    except TraceError:                              # NaN or Infinity (_refuse_constant)
        raise
    except (RecursionError, ValueError) as error:   # absurd nesting, an integer of thousands of digits
        raise TraceError(f"The file is not a usable trace ({type(error).__name__}).") from None
    if not isinstance(raw, dict):
        raise TraceError("The file is not a trace: it holds JSON, but not an object with a run in it.")
    return raw


def _refuse_constant(name: str):
    raise TraceError(f"The file holds {name}, which is not a number a trace can hold.")


# ---------------------------------------------------------------- dict → RecordedRun

def validate_trace(raw: dict, limits: TraceLimits = TraceLimits()) -> RecordedRun:
    """A parsed trace → RecordedRun, checking version, types, sizes and consistency (module docstring)."""
    check_version(raw)
    settings = checked_settings(raw.get("settings"), limits)
    results = {method: checked_result(method, value, limits)
               for method, value in _mapping(raw.get("results"), "results", method_table.method_keys()).items()}
    errors = {method: checked_text(value, f"errors.{method}", limits.max_text)
              for method, value in _mapping(raw.get("errors", {}), "errors", method_table.method_keys()).items()}
    if not results and not errors:
        raise TraceError("The trace holds no results: nothing to replay.")
    oracle, oracle_steps = checked_oracle(raw, limits)
    return RecordedRun(
        prompt=checked_text(raw.get("prompt"), "prompt", limits.max_text), settings=settings,
        pair=checked_pair(raw.get("pair"), limits), results=results,
        busy_seconds=_numbers(raw.get("busy_seconds", {}), "busy_seconds"), errors=errors,
        drafter=checked_drafter(raw.get("drafter")),
        preverifier_kind="trained" if raw.get("preverifier_kind") == "trained" else "heuristic",
        logliks=_numbers(raw.get("logliks") or {}, "logliks"),
        proposal_kl=optional_value(raw.get("proposal_kl"), float, "proposal_kl", limits),
        oracle=oracle, oracle_steps=oracle_steps,
        oracle_note=optional_value(raw.get("oracle_note"), str, "oracle_note", limits),
        pacer_rule=optional_value(raw.get("pacer_rule"), str, "pacer_rule", limits),
        prompt_note=optional_value(raw.get("prompt_note"), str, "prompt_note", limits),
        chat_template=optional_value(raw.get("chat_template"), bool, "chat_template", limits),
        stopped=bool(optional_value(raw.get("stopped"), bool, "stopped", limits)),
        recorded_at=checked_text(raw.get("recorded_at", ""), "recorded_at", 64),
        project_version=checked_text(raw.get("project_version", ""), "project_version", 64),
        title=optional_value(raw.get("title"), str, "title", TraceLimits(max_text=200)))


def check_version(raw: dict) -> None:
    """This reader's format and version, or a TraceError naming what the file is."""
    if raw.get("format") is None and "results" in raw:
        raise TraceError("This trace has no format version: it was exported by an older PACER Lab, before traces "
                         f"had one. Run the prompt again on the Live demo and export a new trace (format "
                         f"{TRACE_VERSION}).")
    if raw.get("format") != TRACE_FORMAT:
        raise TraceError(f"The file is not a PACER Lab trace (its format field is not {TRACE_FORMAT!r}).")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceError("The trace's version is missing or not a whole number.")
    if version < TRACE_VERSION:
        raise TraceError(f"This trace is format version {version}, from an older PACER Lab; this one reads version "
                         f"{TRACE_VERSION}. Export it again from the Live demo.")
    if version > TRACE_VERSION:
        raise TraceError(f"This trace is format version {version}, from a newer PACER Lab; this one "
                         f"({__version__}) reads version {TRACE_VERSION}. Update PACER Lab to replay it.")


def checked_settings(value, limits: TraceLimits) -> dict:
    if not isinstance(value, dict):
        raise TraceError("The trace has no settings.")
    try:
        return validate_settings(limits.settings_limits(), **value).to_dict()
    except SettingsError as error:
        raise TraceError(f"The trace's settings are not valid: {error}") from None


PAIR_TYPES = {"target": str, "draft": str, "device": str, "dtype": str, "linear_kernels": str, "vocab_size": int,
              "chat_template": bool, "target_engine": str}
DRAFTER_TYPES = {"kind": str, "name": str, "dtype": str, "parameters": int, "kept_ids": int, "bits": int,
                 "quantized_megabytes": float, "of": str, "lean_step": bool}


def checked_pair(value, limits: TraceLimits) -> dict:
    """Target.describe(): the fields the page formats are type-checked, the rest must be plain JSON."""
    if not isinstance(value, dict):
        raise TraceError("The trace does not say which models it ran on (pair).")
    pair = plain_json(value, "pair", limits)
    _typed_fields(pair, PAIR_TYPES, "pair")
    drafter = pair.get("drafter", {})
    if not isinstance(drafter, dict):
        raise TraceError("pair.drafter: expected an object.")
    _typed_fields(drafter, DRAFTER_TYPES, "pair.drafter")
    return pair


def checked_drafter(value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not DRAFTER_KEY.fullmatch(value):
        from .drafters.kinds import drafter_keys       # here: reading a valid trace loads no model code
        raise TraceError(f"drafter: expected a drafter key such as {', '.join(drafter_keys())}.")
    return value


def checked_oracle(raw: dict, limits: TraceLimits) -> tuple[list | None, list | None]:
    oracle = optional_value(raw.get("oracle_lengths"), list[float], "oracle_lengths", limits)
    steps = optional_value(raw.get("oracle_steps"), list[int], "oracle_steps", limits)
    if (oracle is None) != (steps is None) or (oracle is not None and len(steps) > len(oracle)):
        raise TraceError("oracle_lengths and oracle_steps do not match.")
    return oracle, steps


# ---------------------------------------------------------------- Results and events

def checked_result(method: str, value, limits: TraceLimits) -> Result:
    """One method's Result with its events rebuilt as dataclasses."""
    where = f"results.{method}"
    if not isinstance(value, dict):
        raise TraceError(f"{where}: expected an object.")
    raw_events = value.get("events")
    if not isinstance(raw_events, list):
        raise TraceError(f"{where}.events: expected a list.")
    if len(raw_events) > limits.max_events:
        raise TraceError(f"{where}: {len(raw_events):,} steps, more than a trace may hold ({limits.max_events:,}).")
    event_class = StepEvent if method_table.steps_by_pass(method) else SMCCycleEvent
    events = coerce(raw_events, list[event_class], f"{where}.events", limits)
    result = build(Result, value | {"events": []}, where, limits)
    if result.method != method or any(event.method != method for event in events):
        raise TraceError(f"{where}: holds another method's steps.")
    if len(result.token_ids) > limits.max_tokens:
        raise TraceError(f"{where}: {len(result.token_ids):,} tokens, more than a trace may hold.")
    for index, event in enumerate(events):
        check_event(event, f"{where}.events[{index}]", limits)
    if event_class is SMCCycleEvent and len({len(event.weights) for event in events}) > 1:
        raise TraceError(f"{where}: the number of particles changes between cycles.")
    result.events = events
    return result


def check_event(event, where: str, limits: TraceLimits) -> None:
    """Sizes, and for an SMC cycle that every per-particle list has one entry per particle."""
    if isinstance(event, StepEvent):
        if len(event.tokens) > limits.max_step_tokens:
            raise TraceError(f"{where}: {len(event.tokens):,} tokens in one step, more than a trace may hold.")
        return
    n = len(event.weights)
    if not 1 <= n <= limits.max_particles:
        raise TraceError(f"{where}: {n:,} particles (a trace holds 1 to {limits.max_particles}).")
    lists = (event.log_weights, event.ancestors, event.finished, event.particle_texts, event.particle_token_ids)
    if any(len(values) != n for values in lists) or len(event.particle_tokens) not in (0, n):
        raise TraceError(f"{where}: the particle lists have different lengths.")
    if any(not 0 <= ancestor < n for ancestor in event.ancestors):
        raise TraceError(f"{where}: an ancestor is not one of the cycle's particles.")
    if any(len(tokens) > limits.max_step_tokens for tokens in event.particle_tokens):
        raise TraceError(f"{where}: too many tokens for one particle in one cycle.")


def _numbers(value, where: str) -> dict[str, float]:
    """{method: finite number} for the page's methods."""
    return {method: coerce(number, float, f"{where}.{method}", TraceLimits())
            for method, number in _mapping(value, where, method_table.method_keys()).items()}


def _mapping(value, where: str, keys: tuple) -> dict:
    if not isinstance(value, dict):
        raise TraceError(f"{where}: expected an object.")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise TraceError(f"{where}: {unknown[0][:40]!r} is not one of the page's methods.")
    return value


def _typed_fields(values: dict, types_by_name: dict, where: str) -> None:
    for name, hint in types_by_name.items():
        if name in values and values[name] is not None:
            coerce(values[name], hint, f"{where}.{name}", TraceLimits(max_text=1000))
