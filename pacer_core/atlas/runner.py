"""Running an atlas: the prompts, one lane per drafter (the pair drafting with it and one run request per
prompt, resolved exactly as the bench resolves a ``METHOD@DRAFTER`` row), and the loop that decodes each prompt
through ``api.run_request`` (the engine every front door uses) and keeps what the atlas counts.

Prompts run one at a time, every lane (and AR, when asked) on prompt i before prompt i+1, so a run that is
stopped keeps whole prompts: the prompt in flight is dropped, every finished one is kept."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from .. import method_table
from ..api import run_request
from ..request import row_requests
from ..events import Result
from ..methods import parse_method
from ..request import RunRequest, encode_prompt
from ..settings import Limits, SettingsError
from .counts import Judgment, drafted_and_accepted, judged_drafts

if TYPE_CHECKING:
    from ..models import Target

UNCATEGORISED = "uncategorised"


@dataclass(frozen=True)
class AtlasPrompt:
    prompt: str
    category: str = UNCATEGORISED
    id: str = ""


def parse_prompt_line(line: str, where: str) -> AtlasPrompt:
    """One JSONL line: {"prompt": ..., "category": optional, "id": optional}."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as bad:
        raise SettingsError(f"{where}: not valid JSON ({bad.msg}).") from None
    if not isinstance(record, dict) or not isinstance(record.get("prompt"), str) or not record["prompt"].strip():
        raise SettingsError(f"{where}: each line needs a non-empty \"prompt\" (\"category\" and \"id\" are optional).")
    return AtlasPrompt(record["prompt"], str(record.get("category") or UNCATEGORISED), str(record.get("id") or ""))


def load_atlas_prompts(path) -> list[AtlasPrompt]:
    """A JSONL prompt file (the built-in ``assets/prompts/atlas.jsonl`` or an uploaded one)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    prompts = [parse_prompt_line(line, f"{Path(path).name}:{number}")
               for number, line in enumerate(lines, 1) if line.strip()]
    if not prompts:
        raise SettingsError(f"{Path(path).name} holds no prompts.")
    return [replace(prompt, id=prompt.id or f"prompt-{index + 1}") for index, prompt in enumerate(prompts)]


@dataclass
class Lane:
    """One drafter's side of an atlas run."""
    drafter: str                    # its key
    target: Target
    requests: list[RunRequest]      # one per prompt, each drafting with it


def atlas_lane(target, drafter, preverifier, key: str, method: str, raw: dict, prompts: list[AtlasPrompt],
               limits: Limits) -> Lane:
    """The lane for ``method`` (fixed[:G], pacer[:B:L[:T]], with +NAME=VALUE settings) drafted by ``drafter``,
    named ``key``: its settings are the bench's for METHOD@KEY (the drafter's measured starting settings, then
    ``raw``, then the method's own)."""
    spec = parse_method(method)
    if spec.kind not in method_table.drafting_keys() or spec.drafter:
        judged = " or ".join(method_table.entry(key).grammar for key in method_table.drafting_keys())
        raise SettingsError(f"The atlas counts the target's verdicts on drafted tokens: use {judged} "
                            f"(got {method!r}; the drafter is a separate choice).")
    spec.drafter = key
    encoded = [encode_prompt(target, prompt.prompt, None, limits) for prompt in prompts]
    return Lane(key, target, row_requests(target, drafter, spec, raw, encoded, limits, preverifier))


@dataclass
class PromptRecord:
    """What the atlas keeps of one decoded prompt."""
    index: int
    judgments: list[Judgment]
    drafted: int                    # verified drafted tokens (the decoder's own count, from its step events)
    accepted: int
    steps: int
    target_calls: int
    tokens: int
    seconds: float
    tau: float
    alpha: float | None
    finish_reason: str
    token_ids: list[int]
    text: str


def prompt_record(index: int, prompt: AtlasPrompt, events: list, result: Result, eos_ids=frozenset()) -> PromptRecord:
    drafted, accepted = drafted_and_accepted(events)
    metrics = result.metrics
    return PromptRecord(index, judged_drafts(events, index, prompt.prompt, eos_ids), drafted, accepted,
                        len(events), metrics.target_calls, metrics.new_tokens, metrics.seconds, metrics.tau,
                        metrics.alpha, result.finish_reason, list(result.token_ids), result.text)


def decode(target, request: RunRequest, cancel=None) -> tuple[list, Result]:
    """One run through the engine: (its step events, its Result)."""
    *events, result = run_request(target, request, cancel)
    return events, result


@dataclass
class PromptRun:
    """Prompt ``index`` decoded by every lane (and by AR when asked)."""
    index: int
    records: dict                   # drafter → PromptRecord
    ar_seconds: float | None = None
    ar_tokens: int | None = None


def run_prompt(index: int, prompt: AtlasPrompt, lanes: list[Lane], measure_ar: bool, cancel=None) -> PromptRun | None:
    """Decode one prompt in every lane; None when the run was stopped before it finished."""
    records = {}
    for lane in lanes:
        events, result = decode(lane.target, lane.requests[index], cancel)
        if result.finish_reason == "cancelled":
            return None
        records[lane.drafter] = prompt_record(index, prompt, events, result, lane.target.eos_token_ids)
    run = PromptRun(index, records)
    if measure_ar:
        first = lanes[0]
        _, result = decode(first.target, replace(first.requests[index], method="ar", preverifier=None), cancel)
        if result.finish_reason == "cancelled":
            return None
        run.ar_seconds, run.ar_tokens = result.metrics.seconds, result.metrics.new_tokens
    return run


def run_prompts(prompts: list[AtlasPrompt], lanes: list[Lane], measure_ar: bool = False,
                cancel=None) -> Iterator[PromptRun]:
    """Yield each prompt's PromptRun in order; stop quietly when ``cancel`` (a threading.Event) is set."""
    for index, prompt in enumerate(prompts):
        if cancel is not None and cancel.is_set():
            return
        run = run_prompt(index, prompt, lanes, measure_ar, cancel)
        if run is None:
            return
        yield run
