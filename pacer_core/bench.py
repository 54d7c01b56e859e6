"""Benchmark CLI: the one place speed is measured. Methods run interleaved per repeat on the same
prompts after one warm-up; medians over repeats are reported side by side in one run.

    python -m pacer_core.bench --methods ar,hf,hf-assisted,hf-assisted-dynamic,fixed:2,fixed:4,pacer \\
        --prompts assets/prompts/bench.jsonl --max-new-tokens 64 --temperature 0 --repeats 3 --out DIR
"""
from __future__ import annotations

import argparse
import copy
import csv
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .analysis import proposal_divergence, target_log_likelihood
from .api import make_decoder
from .decoders.oracle import OracleLength
from .drafters import drafter_swapped, load_drafter
from .methods import HF_METHODS, MethodSpec, parse_method
from .models import ModelLoadError, load_pair
from .prompts import load_prompts
from .request import RunRequest, chosen_names, encode_prompt, request_for
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


@dataclass
class RunRecord:
    seconds: float
    new_tokens: int
    target_calls: int
    draft_calls: int
    drafted: int
    accepted: int
    draft_seconds: float
    verify_seconds: float
    token_ids: list
    text: str


def run_hf(pair, spec: MethodSpec, request: RunRequest) -> RunRecord:
    settings, prompt_ids = request.settings, list(request.prompt_ids)
    eos_ids = sorted(pair.eos_token_ids)
    kwargs = {"max_new_tokens": settings.max_new_tokens, "eos_token_id": eos_ids or None,
              "pad_token_id": eos_ids[0] if eos_ids else 0}
    if settings.greedy:
        kwargs["do_sample"] = False
    else:
        torch.manual_seed(settings.seed)
        kwargs.update(do_sample=True, temperature=settings.temperature, top_k=settings.top_k or None,
                      top_p=settings.top_p)
    if spec.kind != "hf" and pair.draft is None:
        raise SettingsError(f"{spec.kind} needs an independent draft model; this pair has only a feature head.")
    draft_config = pair.draft.generation_config if pair.draft is not None else None
    saved_draft_config = copy.deepcopy(draft_config)
    if spec.kind in ("hf-assisted", "hf-assisted-dynamic"):
        # transformers 5 reads the assisted-generation knobs from the ASSISTANT's generation_config,
        # not from generate() kwargs; set them there for this call and restore them afterwards.
        kwargs["assistant_model"] = pair.draft
    if spec.kind == "hf-assisted":
        draft_config.num_assistant_tokens = settings.gamma
        draft_config.num_assistant_tokens_schedule = "constant"
        draft_config.assistant_confidence_threshold = 0.0
    target_counter = CallCounter(pair.target)
    draft_counter = CallCounter(pair.draft if pair.draft is not None else pair.target)
    input_ids = torch.tensor([prompt_ids], device=pair.device)
    started = time.perf_counter()
    try:
        with torch.inference_mode():
            output = pair.target.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    finally:
        target_counter.close()
        draft_counter.close()
        if pair.draft is not None:
            pair.draft.generation_config = saved_draft_config
    seconds = time.perf_counter() - started
    new_ids = output[0, len(prompt_ids):].tolist()
    return RunRecord(seconds, len(new_ids), target_counter.calls, draft_counter.calls, 0, 0, 0.0, 0.0,
                     new_ids, pair.decode(new_ids))


def run_ours(pair, spec: MethodSpec, request: RunRequest, reference) -> RunRecord:
    decoder = OracleLength(reference) if spec.kind == "oracle" else make_decoder(spec.kind, request.preverifier)
    started = time.perf_counter()
    *events, result = decoder.run(pair, list(request.prompt_ids), request.settings)
    seconds = time.perf_counter() - started
    metrics = result.metrics
    return RunRecord(seconds, metrics.new_tokens, metrics.target_calls, metrics.draft_calls, metrics.drafted_tokens,
                     metrics.accepted_tokens, sum(e.draft_seconds for e in events),
                     sum(e.verify_seconds for e in events), result.token_ids, result.text)


def add_relative_speeds(rows: list[dict]) -> None:
    """speedup_vs_ar = tokens/s over AR's; speedup_vs_fixed = tokens/s over the fastest fixed:G row's
    (when the run has one). Both ratios come from the same run, so the machine's load cancels."""
    rates = {row["method"]: row["tokens_per_s"] for row in rows}
    ar_rate = rates.get("ar")
    fixed_rates = [rate for method, rate in rates.items() if parse_method(method).kind == "fixed" and rate]
    best_fixed = max(fixed_rates, default=None)
    for row in rows:
        row["speedup_vs_ar"] = row["tokens_per_s"] / ar_rate if ar_rate else None
        if best_fixed:
            row["speedup_vs_fixed"] = row["tokens_per_s"] / best_fixed


def loglik_gap_interval(method_totals: list[tuple[float, int]], reference_totals: list[tuple[float, int]],
                        draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Relative gap of a method's mean log-likelihood per token to the reference's, in percent
    (positive = the method's outputs are less likely under the target), with a 95% paired bootstrap
    interval. Entry j of both lists is the (sum of log-probs, token count) of one output for the same
    prompt and repeat; the bootstrap resamples these pairs together."""
    if len(method_totals) != len(reference_totals) or not method_totals:
        raise ValueError("the two lists must pair up one output per prompt and repeat")
    method = torch.tensor(method_totals, dtype=torch.float64)         # [R, 2]: sum, count
    reference = torch.tensor(reference_totals, dtype=torch.float64)   # [R, 2]

    def gap(rows: torch.Tensor) -> torch.Tensor:                      # rows: [..., R] indices
        method_mean = method[rows, 0].sum(-1) / method[rows, 1].sum(-1).clamp(min=1)
        reference_mean = reference[rows, 0].sum(-1) / reference[rows, 1].sum(-1).clamp(min=1)
        return 100.0 * (reference_mean - method_mean) / reference_mean.abs()

    generator = torch.Generator().manual_seed(seed)
    resampled = torch.randint(len(method_totals), (draws, len(method_totals)), generator=generator)
    spread = gap(resampled)
    low, high = torch.quantile(spread, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return float(gap(torch.arange(len(method_totals)))), low, high


def per_token(totals: list[tuple[float, int]]) -> float:
    """Mean per token of (sum, count) pairs."""
    return sum(total for total, _ in totals) / max(1, sum(count for _, count in totals))


def add_log_likelihoods(pair, rows: list[dict], specs: list[MethodSpec], runs: dict, prompt_ids: list) -> None:
    """Every row gains the target's log-likelihood per token of its outputs (all repeats) and its gap to AR's."""
    totals = {spec.label: [target_log_likelihood(pair, prompt_ids[i], record.token_ids)
                           for records in runs[spec.label] for i, record in enumerate(records)] for spec in specs}
    reference = next(totals[spec.label] for spec in specs if spec.kind == "ar")
    for row, spec in zip(rows, specs):
        row["target_loglik_per_token"] = per_token(totals[spec.label])
        gap, low, high = loglik_gap_interval(totals[spec.label], reference)
        row["loglik_gap_vs_ar_pct"], row["loglik_gap_ci95"] = gap, f"[{low:.1f}, {high:.1f}]"


def add_proposal_divergences(pair, rows: list[dict], specs: list[MethodSpec], settings_for: dict, runs: dict,
                             prompt_ids: list, drafters: dict) -> None:
    """SMC-SD rows gain proposal_kl_per_token: KL(p_T || q_Td) per token, in nats, along AR's outputs (all
    repeats: contexts drawn from the target itself) at the row's temperature and draft temperature."""
    ar_runs = next(runs[spec.label] for spec in specs if spec.kind == "ar")
    by_setting = {}
    for row, spec in zip(rows, specs):
        if spec.kind != "smc":
            continue
        settings = settings_for[spec.label]
        key = (settings.temperature, settings.draft_temperature or settings.temperature, settings.top_k, settings.top_p)
        drafter = drafters[spec.drafter][0] if spec.drafter else pair.drafter
        if (spec.drafter, key) not in by_setting:
            with drafter_swapped(pair, drafter):
                by_setting[spec.drafter, key] = per_token([
                    proposal_divergence(pair, prompt_ids[i], record.token_ids, *key)
                    for records in ar_runs for i, record in enumerate(records)])
        row["proposal_kl_per_token"] = by_setting[spec.drafter, key]


def drafter_label(pair, spec: MethodSpec) -> str:
    """Which drafter a row ran with: transformers' assisted rows always use the independent draft model."""
    if spec.kind in ("ar", "hf"):
        return "-"
    if spec.kind.startswith("hf-assisted"):
        return "independent (transformers' assistant)"
    return spec.drafter or pair.drafter.kind


def add_drafters_and_identity(pair, rows: list[dict], specs: list[MethodSpec], runs: dict, greedy: bool) -> None:
    """Each row's drafter; under greedy decoding also how many prompts gave exactly AR's tokens
    (``same_as_ar`` = "12/12"), since exact methods must reproduce AR."""
    reference = [run.token_ids for run in runs["ar"][0]] if "ar" in runs else None
    for row, spec in zip(rows, specs):
        row["drafter"] = drafter_label(pair, spec)
        if greedy and reference is not None:
            same = sum(run.token_ids == ids for run, ids in zip(runs[spec.label][0], reference))
            row["same_as_ar"] = f"{same}/{len(reference)}"


def summarise(label: str, runs_by_repeat: list[list[RunRecord]]) -> dict:
    """runs_by_repeat[r][i]: repeat r, prompt i. Counts come from the first repeat."""
    first = runs_by_repeat[0]
    seconds = [sum(run.seconds for run in runs) for runs in runs_by_repeat]
    new_tokens = sum(run.new_tokens for run in first)
    target_calls = sum(run.target_calls for run in first)
    drafted = sum(run.drafted for run in first)
    median_seconds = statistics.median(seconds)
    repeat_index = seconds.index(sorted(seconds)[len(seconds) // 2])
    chosen = runs_by_repeat[repeat_index]
    return {
        "method": label, "tau": new_tokens / target_calls if target_calls else None,
        "alpha": sum(run.accepted for run in first) / drafted if drafted else None,
        "target_calls": target_calls, "draft_calls": sum(run.draft_calls for run in first),
        "new_tokens": new_tokens, "seconds_median": median_seconds, "seconds_all": seconds,
        "tokens_per_s": new_tokens / median_seconds if median_seconds else None,
        "profile": {"draft_s": sum(r.draft_seconds for r in chosen), "verify_s": sum(r.verify_seconds for r in chosen),
                    "other_s": sum(r.seconds - r.draft_seconds - r.verify_seconds for r in chosen)},
        "texts": [run.text for run in first],
    }


def machine_info(pair) -> dict:
    import transformers

    return {"platform": platform.platform(), "processor": platform.processor(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), **pair.describe()}


def write_outputs(out_dir: Path, report: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=2))
    columns = ["method", "tau", "alpha", "target_calls", "draft_calls", "new_tokens", "seconds_median",
               "tokens_per_s", "speedup_vs_ar", "drafter"]
    if "same_as_ar" in report["methods"][0]:
        columns.append("same_as_ar")
    if "speedup_vs_fixed" in report["methods"][0]:
        columns.append("speedup_vs_fixed")
    if "target_loglik_per_token" in report["methods"][0]:
        columns += ["target_loglik_per_token", "loglik_gap_vs_ar_pct", "loglik_gap_ci95"]
    if any("proposal_kl_per_token" in row for row in report["methods"]):
        columns.append("proposal_kl_per_token")
    with open(out_dir / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(report["methods"])
    (out_dir / "report.md").write_text(markdown_report(report, columns))


def _fmt(value) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def markdown_report(report: dict, columns: list[str]) -> str:
    settings = report["settings"]
    lines = [f"# Benchmark {report['machine']['date']}", "",
             f"Pair: {report['machine']['target']} ← {report['machine']['draft']} on "
             f"{report['machine']['device']} (target {report['machine']['dtype']}, drafter "
             f"{report['machine']['drafter'].get('dtype', report['machine']['dtype'])}), torch {report['machine']['torch']}, "
             f"transformers {report['machine']['transformers']}, {report['machine']['threads']} threads.",
             f"{settings['prompt_count']} prompts from {settings['prompts']}, max_new_tokens={settings['max_new_tokens']}, "
             f"temperature={settings['temperature']}, repeats={settings['repeats']} (medians), seed={settings['seed']}.",
             "", "| " + " | ".join(columns + ["draft s", "verify s", "other s"]) + " |",
             "|" + "---|" * (len(columns) + 3)]
    for row in report["methods"]:
        profile = row["profile"]
        cells = [_fmt(row.get(c)) for c in columns] + [_fmt(profile["draft_s"]), _fmt(profile["verify_s"]),
                                                       _fmt(profile["other_s"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "speedup_vs_ar = tokens_per_s / AR tokens_per_s, both measured in this run"
              + ("; speedup_vs_fixed = tokens_per_s / the fastest fixed:G row's tokens_per_s. "
                 if "speedup_vs_fixed" in columns else ". ") +
              "Profile columns: time inside draft forwards, inside target verification, and the rest "
              "(sampling, bookkeeping, detokenisation) for the median repeat."]
    if "target_loglik_per_token" in columns:
        lines += ["", "target_loglik_per_token: the target's mean log-probability (temperature 1) of the generated "
                  "tokens over all repeats; loglik_gap_vs_ar_pct: how much lower it is than AR's, in percent of "
                  "AR's, with a 95% bootstrap interval over (prompt, repeat) pairs. Exact methods differ from AR "
                  "only by sampling noise, so their interval shows the noise of this run."]
    if "proposal_kl_per_token" in columns:
        lines += ["", "proposal_kl_per_token (SMC-SD rows): KL(p_T || q_Td), the divergence in nats of the draft's "
                  "sampling distribution from the target's, per token along AR's outputs. Importance sampling "
                  "starts to work only with about exp(KL) samples (Chatterjee & Diaconis 2018), and a cycle weights K "
                  "tokens at once, so N particles correct a cycle only once N passes exp(K x KL); the error then "
                  "shrinks roughly as 1/N."]
    return "\n".join(lines) + "\n"


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
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--draft-dtype", default=None, help="the drafter's dtype (default: the target's)")
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
    from tqdm import tqdm

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
    pair = load_pair(args.target, args.draft, device=args.device, dtype=args.dtype,
                     draft_dtype=args.draft_dtype)
    from .preverifier import default_preverifier

    preverifier = default_preverifier(pair)
    encoded = [encode_prompt(pair, record["prompt"], None, limits) for record in prompts]
    drafters = load_row_drafters(pair, specs, args.head)
    requests = {spec.label: row_requests(pair, spec, raw, encoded, limits,
                                         drafters[spec.drafter][1] if spec.drafter else preverifier)
                for spec in specs}
    settings_for = {label: row[0].settings for label, row in requests.items()}
    prompt_ids = [list(prompt.ids) for prompt in encoded]
    references = {}

    def run_one(spec, index, repeat=0):
        request = requests[spec.label][index]
        if not request.settings.greedy:  # sampling: a different seed per repeat, so log-likelihoods see varied samples
            request = request.reseeded(repeat)
        if spec.kind in HF_METHODS:
            return run_hf(pair, spec, request)
        if spec.drafter:
            with drafter_swapped(pair, drafters[spec.drafter][0]):
                return run_ours(pair, spec, request, references.get(index, []))
        record = run_ours(pair, spec, request, references.get(index, []))
        if spec.kind == "ar":
            references[index] = record.token_ids
        return record

    ordered = sorted(specs, key=lambda spec: spec.kind != "ar")  # AR first: the oracle needs its output
    for spec in tqdm(ordered, desc="warm-up", file=sys.stderr):
        run_one(spec, 0)
    runs = {spec.label: [] for spec in specs}
    progress = tqdm(total=args.repeats * len(specs) * len(prompts), desc="benchmark", file=sys.stderr)
    for repeat in range(args.repeats):
        batch = {spec.label: [] for spec in specs}
        for index in range(len(prompts)):
            for spec in ordered:
                batch[spec.label].append(run_one(spec, index, repeat))
                progress.update()
        for label, records in batch.items():
            runs[label].append(records)
    progress.close()
    rows = [summarise(spec.label, runs[spec.label]) | {"settings": settings_for[spec.label].to_dict()}
            for spec in specs]
    add_relative_speeds(rows)
    add_drafters_and_identity(pair, rows, specs, runs, base.greedy)
    if args.loglik:
        add_log_likelihoods(pair, rows, specs, runs, prompt_ids)
        add_proposal_divergences(pair, rows, specs, settings_for, runs, prompt_ids, drafters)
    report = {"machine": machine_info(pair), "preverifier": getattr(preverifier, "kind", "custom"),
              "settings": {"prompts": args.prompts, "prompt_count": len(prompts), "max_new_tokens": args.max_new_tokens,
                           "temperature": args.temperature, "repeats": args.repeats, "seed": args.seed,
                           "decode": base.to_dict()},
              "prompt_ids": [record["id"] for record in prompts], "methods": rows}
    write_outputs(Path(args.out), report)
    print((Path(args.out) / "report.md").read_text())
    return 0


def load_row_drafters(pair, specs: list[MethodSpec], head) -> dict:
    """Drafter name (@NAME in a method) → (the drafter, its pre-verifier)."""
    from .preverifier import default_preverifier

    drafters = {}
    for name in sorted({spec.drafter for spec in specs if spec.drafter}):
        try:
            drafter = load_drafter(pair, name, head)
        except ValueError as bad:
            raise SettingsError(str(bad)) from None
        with drafter_swapped(pair, drafter):
            drafters[name] = (drafter, default_preverifier(pair))
    return drafters


def row_requests(pair, spec: MethodSpec, raw: dict, prompts: list, limits: Limits, preverifier) -> list[RunRequest]:
    """One request per prompt for a method row: the row's own values over the CLI's, validated once and
    resolved exactly as the app and generate() resolve them (PACER: the pre-verifier's block size and
    threshold unless chosen)."""
    chosen = raw | spec.overrides
    settings = validate_settings(limits, **chosen)
    return [request_for(pair, spec.kind, settings, chosen_names(chosen), prompt, limits, preverifier)
            for prompt in prompts]


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
