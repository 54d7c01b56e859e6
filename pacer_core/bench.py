"""Benchmark CLI: the one place speed is measured. Methods run interleaved per repeat on the same
prompts after one warm-up; medians over repeats are reported side by side in one run.

    python -m pacer_core.bench --methods ar,hf,hf-assisted,hf-assisted-dynamic,fixed:2,fixed:4,pacer \\
        --prompts assets/prompts/bench.jsonl --max-new-tokens 64 --temperature 0 --repeats 3 --out DIR

The rows' summaries and the results.json / results.csv / report.md outputs are built in bench_report.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch

from . import method_table
from .bench_report import (RunRecord, add_drafters_and_identity, add_log_likelihoods, add_luck_free_speeds,
                           add_proposal_divergences, add_relative_speeds, machine_info, step_tokens, summarise,
                           write_outputs)
from .decoders.oracle import OracleLength
from .drafters import load_drafter
from .heap import freeze_loaded_heap
from .methods import HF_METHODS, MethodSpec, parse_method
from .models import ModelLoadError, load_target
from .prompts import load_prompts
from .request import RunRequest, encode_prompt, row_requests
from .settings import Limits, SettingsError, validate_settings


def select_prompts(prompts: list[dict], per_category: int) -> list[dict]:
    if not per_category:
        return prompts
    seen: dict[str, int] = {}
    chosen = []
    for record in prompts:
        seen[record["category"]] = seen.get(record["category"], 0) + 1
        if seen[record["category"]] <= per_category:
            chosen.append(record)
    return chosen


class CallCounter:
    """Counts forward calls of a module (used for transformers' own generate())."""

    def __init__(self, module):
        self.calls = 0
        self.handle = module.register_forward_hook(self._count)

    def _count(self, *_):
        self.calls += 1

    def close(self):
        self.handle.remove()


def run_hf(target, draft_model, spec: MethodSpec, request: RunRequest) -> RunRecord:
    """transformers' own generate: plain (``hf``) or assisted by ``draft_model``, the loaded independent draft model
    (``hf-assisted``, ``hf-assisted-dynamic``)."""
    settings, prompt_ids = request.settings, list(request.prompt_ids)
    eos_ids = sorted(target.eos_token_ids)
    kwargs = {"max_new_tokens": settings.max_new_tokens, "eos_token_id": eos_ids or None,
              "pad_token_id": eos_ids[0] if eos_ids else 0}
    if settings.greedy:
        kwargs["do_sample"] = False
    else:
        torch.manual_seed(settings.seed)
        kwargs.update(do_sample=True, temperature=settings.temperature, top_k=settings.top_k or None,
                      top_p=settings.top_p)
    if spec.kind != "hf" and draft_model is None:
        raise SettingsError(f"{spec.kind} needs an independent draft model; none was loaded with this target.")
    draft_config = draft_model.generation_config if draft_model is not None else None
    saved_draft_config = copy.deepcopy(draft_config)
    if spec.kind in ("hf-assisted", "hf-assisted-dynamic"):
        # transformers 5 reads the assisted-generation knobs from the ASSISTANT's generation_config,
        # not from generate() kwargs; set them there for this call and restore them afterwards.
        kwargs["assistant_model"] = draft_model
    if spec.kind == "hf-assisted":
        draft_config.num_assistant_tokens = settings.gamma
        draft_config.num_assistant_tokens_schedule = "constant"
        draft_config.assistant_confidence_threshold = 0.0
    target_counter = CallCounter(target.model)
    draft_counter = CallCounter(draft_model if draft_model is not None else target.model)
    input_ids = torch.tensor([prompt_ids], device=target.device)
    started = time.perf_counter()
    try:
        with torch.inference_mode():
            output = target.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    finally:
        target_counter.close()
        draft_counter.close()
        if draft_model is not None:
            draft_model.generation_config = saved_draft_config
    seconds = time.perf_counter() - started
    new_ids = output[0, len(prompt_ids):].tolist()
    return RunRecord(seconds, len(new_ids), target_counter.calls, draft_counter.calls, 0, 0, 0.0, 0.0,
                     new_ids, target.decode(new_ids))


def run_ours(target, spec: MethodSpec, request: RunRequest, reference) -> RunRecord:
    if spec.kind == "oracle":
        decoder = OracleLength(reference)
    else:
        decoder = method_table.make_decoder(spec.kind, request.preverifier)
    started = time.perf_counter()
    *events, result = decoder.run(target, request.drafter, list(request.prompt_ids), request.settings)
    seconds = time.perf_counter() - started
    metrics = result.metrics
    return RunRecord(seconds, metrics.new_tokens, metrics.target_calls, metrics.draft_calls, metrics.drafted_tokens,
                     metrics.accepted_tokens, sum(e.draft_seconds for e in events),
                     sum(e.verify_seconds for e in events), result.token_ids, result.text,
                     step_tokens(events))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pacer_core.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="ar,hf,hf-assisted,hf-assisted-dynamic,fixed:2,fixed:4,fixed:8,pacer")
    parser.add_argument("--prompts", default="assets/prompts/bench.jsonl", help="JSONL with id, category, prompt")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N prompts (0 = all)")
    parser.add_argument("--per-category", type=int, default=0, help="use the first N prompts of each category (0 = all)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/latest")
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--draft", default="embedded")
    parser.add_argument("--head", default=None, help="feature head folder for @head rows (default: the embedded one)")
    parser.add_argument("--draft-gguf", default=None, help="GGUF file for @gguf rows (default: the embedded target's own)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--target-engine", default=None, dest="target_engine",
                        help="what runs the target: auto (llama.cpp for the embedded target on a CPU where "
                        "llama-cpp-python is installed, else torch), torch or llama.cpp (default: $PACER_TARGET_ENGINE "
                        "or auto)")
    parser.add_argument("--draft-dtype", default=None, help="the drafter's dtype (default: the target's)")
    parser.add_argument("--draft-vocab", default=None,
                        help="ids the independent draft scores: all or N most frequent (default: its folder's)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--loglik", action="store_true",
                        help="also report the target's mean log-likelihood per generated token (all repeats)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="any decode setting, e.g. --setting threshold=0.4 (repeatable)")
    return parser


def parse_settings(args) -> dict:
    extra = {}
    for item in args.setting:
        if "=" not in item:
            raise SettingsError(f"--setting needs NAME=VALUE (got {item!r}).")
        name, value = item.split("=", 1)
        extra[name.strip()] = value.strip()
    return extra


def cli_settings(args) -> dict:
    """The settings the command line chose: its flags and every --setting (the rest are defaults)."""
    return {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "seed": args.seed,
            **coerce_numbers(parse_settings(args))}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_benchmark(args)
    except (SettingsError, ModelLoadError, FileNotFoundError) as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2


def run_benchmark(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    specs = [parse_method(text) for text in args.methods.split(",") if text.strip()]
    if not any(spec.kind == "ar" for spec in specs):
        specs.insert(0, parse_method("ar"))
    limits = Limits.from_env()
    raw = cli_settings(args)
    base = validate_settings(limits, **raw)
    if any(spec.kind == "oracle" for spec in specs) and not base.greedy:
        raise SettingsError("The oracle method needs --temperature 0.")
    prompts = select_prompts(load_prompts(args.prompts), args.per_category)[: args.limit or None]
    target, drafters = load_target(args.target, args.draft, device=args.device, dtype=args.dtype,
                                   draft_dtype=args.draft_dtype, draft_vocab=args.draft_vocab,
                                   draft_gguf=args.draft_gguf,
                                   target_engine=args.target_engine or os.environ.get("PACER_TARGET_ENGINE"))
    from .preverifier import default_preverifier

    own = drafters.default
    preverifier = default_preverifier(target, own)
    encoded = [encode_prompt(target, record["prompt"], None, limits) for record in prompts]
    drafters_by_name = load_row_drafters(target, drafters, specs, args.head)
    row_drafters = {spec.label: drafters_by_name[spec.drafter] if spec.drafter else (own, preverifier) for spec in specs}
    requests = {spec.label: row_requests(target, row_drafters[spec.label][0], spec, raw, encoded, limits,
                                         row_drafters[spec.label][1])
                for spec in specs}
    settings_for = {label: row[0].settings for label, row in requests.items()}
    prompt_ids = [list(prompt.ids) for prompt in encoded]
    runs = interleaved_runs(specs, len(prompts), args.repeats, row_runner(target, drafters.small_model, requests))
    rows = [summarise(spec.label, runs[spec.label]) | {"settings": settings_for[spec.label].to_dict()}
            for spec in specs]
    add_relative_speeds(rows)
    add_luck_free_speeds(rows)
    add_drafters_and_identity(own, rows, specs, runs, base.greedy)
    if args.loglik:
        add_log_likelihoods(target, own, rows, specs, runs, prompt_ids)
        add_proposal_divergences(target, own, rows, specs, settings_for, runs, prompt_ids, drafters_by_name)
    report = {"machine": machine_info(target, own), "preverifier": getattr(preverifier, "kind", "custom"),
              "settings": {"prompts": args.prompts, "prompt_count": len(prompts), "max_new_tokens": args.max_new_tokens,
                           "temperature": args.temperature, "repeats": args.repeats, "seed": args.seed,
                           "decode": base.to_dict()},
              "prompt_ids": [record["id"] for record in prompts], "methods": rows}
    write_outputs(Path(args.out), report)
    print((Path(args.out) / "report.md").read_text())
    return 0


def row_runner(target, small_model, requests: dict):
    """``run_one(spec, index, repeat)``: one timed run of a row on prompt ``index``. AR's output on each prompt is
    kept as the reference the oracle drafts from (AR runs first on every prompt, ``interleaved_runs``)."""
    references = {}

    def run_one(spec: MethodSpec, index: int, repeat: int = 0) -> RunRecord:
        request = requests[spec.label][index]
        if not request.settings.greedy:  # sampling: a different seed per repeat, so log-likelihoods see varied samples
            request = request.reseeded(repeat)
        if spec.kind in HF_METHODS:
            return run_hf(target, small_model, spec, request)
        record = run_ours(target, spec, request, references.get(index, []))
        if spec.kind == "ar" and not spec.drafter:
            references[index] = record.token_ids
        return record
    return run_one


def interleaved_runs(specs: list[MethodSpec], prompt_count: int, repeats: int, run_one) -> dict:
    """{row label: [one list of RunRecords per repeat]}: every row warmed up once on the first prompt, then each
    repeat runs every row on a prompt before moving to the next prompt (AR first), so slow drift of the machine
    touches every row alike."""
    from tqdm import tqdm

    ordered = sorted(specs, key=lambda spec: spec.kind != "ar")  # AR first: the oracle needs its output
    for spec in tqdm(ordered, desc="warm-up", file=sys.stderr):
        run_one(spec, 0)
    freeze_loaded_heap()       # no full collection of the loaded models' objects inside a timed run (heap.py)
    runs = {spec.label: [] for spec in specs}
    progress = tqdm(total=repeats * len(specs) * prompt_count, desc="benchmark", file=sys.stderr)
    for repeat in range(repeats):
        batch = {spec.label: [] for spec in specs}
        for index in range(prompt_count):
            for spec in ordered:
                batch[spec.label].append(run_one(spec, index, repeat))
                progress.update()
        for label, records in batch.items():
            runs[label].append(records)
    progress.close()
    return runs


def load_row_drafters(target, drafters, specs: list[MethodSpec], head) -> dict:
    """Drafter name (@NAME in a method) → (the drafter, its pre-verifier)."""
    from .preverifier import default_preverifier

    drafters_by_name = {}
    for name in sorted({spec.drafter for spec in specs if spec.drafter}):
        try:
            drafter = load_drafter(target, drafters, name, head)
        except ValueError as bad:
            raise SettingsError(str(bad)) from None
        drafters_by_name[name] = (drafter, default_preverifier(target, drafter))
    return drafters_by_name


def coerce_numbers(raw: dict) -> dict:
    """--setting values arrive as text; numbers become numbers, the rest stays text."""
    converted = {}
    for name, value in raw.items():
        for cast in (int, float):
            try:
                converted[name] = cast(value)
                break
            except ValueError:
                continue
        else:
            converted[name] = value
    return converted


if __name__ == "__main__":
    sys.exit(main())
