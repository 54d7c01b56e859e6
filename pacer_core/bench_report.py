"""The rows and outputs of a benchmark run (``python -m pacer_core.bench``): per-method medians over repeats,
speeds relative to AR and to the best fixed:G row, identity with AR under greedy decoding, the target's
log-likelihood gaps and SMC-SD proposal divergences, and results.json / results.csv / report.md."""
from __future__ import annotations

import csv
import json
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .analysis import proposal_divergence, target_log_likelihood
from .methods import MethodSpec, parse_method, takes_drafter
from .stopping import expected_tokens


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
    step_tokens: tuple[int, float] | None = None   # ``step_tokens(events)``: what its steps emitted, and would
    #                                                  emit in expectation; None without judged drafted tokens


def step_tokens(events) -> tuple[int, float] | None:
    """What a run's steps emitted before any cut at EOS or the budget, Σ (accepted + 1), and what they would emit
    in expectation over the target's accept draws given the drafts made, Σ E(k) (``stopping.expected_tokens`` of the
    drafted tokens' min(1, p/q); greedy: 1 or 0, so the two agree). At T > 0 the draws' luck moves a 12-prompt row's
    tokens by a few percent; the ratio takes it out of the row's speed (``add_luck_free_speeds``). None for a run
    without judged drafted tokens (AR, SMC-SD)."""
    realized, expected, judged = 0, 0.0, False
    for event in events:
        probs = [token.accept_prob for token in getattr(event, "tokens", [])[: getattr(event, "n_drafted", 0)]]
        if getattr(event, "kind", "") != "step" or any(prob is None for prob in probs):
            continue
        realized, expected = realized + event.n_accepted + 1, expected + expected_tokens(probs)
        judged = judged or bool(probs)
    return (realized, expected) if judged else None


def add_relative_speeds(rows: list[dict]) -> None:
    """speedup_vs_ar = tokens/s over AR's; speedup_vs_fixed = tokens/s over the fastest fixed:G row's (one length
    every step: the dynamic schedule's rows, fixed:dyn, are not among them) when the run has one. Both ratios come
    from the same run, so the machine's load cancels."""
    rates = {row["method"]: row["tokens_per_s"] for row in rows}
    ar_rate = rates.get("ar")
    fixed_rates = [rate for method, rate in rates.items() if is_fixed_length(parse_method(method)) and rate]
    best_fixed = max(fixed_rates, default=None)
    for row in rows:
        row["speedup_vs_ar"] = row["tokens_per_s"] / ar_rate if ar_rate else None
        if best_fixed:
            row["speedup_vs_fixed"] = row["tokens_per_s"] / best_fixed


def add_luck_free_speeds(rows: list[dict]) -> None:
    """``tokens_per_s_luck_free``: tokens/s times the row's expected over realized step tokens (all repeats), and
    ``speedup_vs_fixed_luck_free`` against the fastest fixed:G row on the same footing; only where every row of
    that comparison has its expectation (sampled runs; greedy ones equal their tokens/s)."""
    for row in rows:
        realized, expected = row.get("step_tokens"), row.get("expected_step_tokens")
        row["tokens_per_s_luck_free"] = row["tokens_per_s"] * expected / realized if realized and expected else None
    fixed = [row["tokens_per_s_luck_free"] for row in rows
             if is_fixed_length(parse_method(row["method"])) and row.get("tokens_per_s_luck_free")]
    for row in rows:
        if fixed and row["tokens_per_s_luck_free"]:
            row["speedup_vs_fixed_luck_free"] = row["tokens_per_s_luck_free"] / max(fixed)


def is_fixed_length(spec: MethodSpec) -> bool:
    """A fixed:G row: fixed SD drafting the same length every step."""
    return spec.kind == "fixed" and spec.overrides.get("gamma_schedule", "constant") == "constant"


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


def add_log_likelihoods(target, drafter, rows: list[dict], specs: list[MethodSpec], runs: dict,
                        prompt_ids: list) -> None:
    """Every row gains the target's log-likelihood per token of its outputs (all repeats) and its gap to AR's,
    scored on the engine the target runs on beside the bench's own ``drafter``."""
    totals = {spec.label: [target_log_likelihood(target, drafter, prompt_ids[i], record.token_ids)
                           for records in runs[spec.label] for i, record in enumerate(records)] for spec in specs}
    reference = next(totals[spec.label] for spec in specs if spec.kind == "ar")
    for row, spec in zip(rows, specs):
        row["target_loglik_per_token"] = per_token(totals[spec.label])
        gap, low, high = loglik_gap_interval(totals[spec.label], reference)
        row["loglik_gap_vs_ar_pct"], row["loglik_gap_ci95"] = gap, f"[{low:.1f}, {high:.1f}]"


def add_proposal_divergences(target, own, rows: list[dict], specs: list[MethodSpec], settings_for: dict, runs: dict,
                             prompt_ids: list, drafters: dict) -> None:
    """SMC-SD rows gain proposal_kl_per_token: KL(p_T || q_Td) per token, in nats, along AR's outputs (all
    repeats: contexts drawn from the target itself) at the row's temperature and draft temperature, with the
    row's drafter (``own``, the bench's, for a row that names none)."""
    ar_runs = next(runs[spec.label] for spec in specs if spec.kind == "ar")
    by_setting = {}
    for row, spec in zip(rows, specs):
        if spec.kind != "smc":
            continue
        settings = settings_for[spec.label]
        key = (settings.temperature, settings.draft_temperature or settings.temperature, settings.top_k, settings.top_p)
        drafter = drafters[spec.drafter][0] if spec.drafter else own
        if (spec.drafter, key) not in by_setting:
            by_setting[spec.drafter, key] = per_token([
                proposal_divergence(target, drafter, prompt_ids[i], record.token_ids, *key)
                for records in ar_runs for i, record in enumerate(records)])
        row["proposal_kl_per_token"] = by_setting[spec.drafter, key]


def drafter_label(own, spec: MethodSpec) -> str:
    """Which drafter a row ran with (``own``, the bench's, unless it names one): transformers' assisted rows always
    use the independent draft model."""
    if spec.kind.startswith("hf-assisted"):
        return "independent (transformers' assistant)"
    if not takes_drafter(spec.kind):
        return "-"
    if spec.drafter:
        return spec.drafter
    kept = own.describe().get("kept_ids")
    return f"{own.kind} ({kept} ids)" if kept else own.kind


def add_drafters_and_identity(own, rows: list[dict], specs: list[MethodSpec], runs: dict, greedy: bool) -> None:
    """Each row's drafter (``own``, the bench's, unless it names one); under greedy decoding also how many prompts
    gave exactly AR's tokens (``same_as_ar`` = "12/12"), since exact methods must reproduce AR."""
    reference = [run.token_ids for run in runs["ar"][0]] if "ar" in runs else None
    for row, spec in zip(rows, specs):
        row["drafter"] = drafter_label(own, spec)
        if greedy and reference is not None:
            same = sum(run.token_ids == ids for run, ids in zip(runs[spec.label][0], reference))
            row["same_as_ar"] = f"{same}/{len(reference)}"


def identity_flags(rows: list[dict]) -> list[str]:
    """A warning line for every greedy row whose outputs differ from AR's on some prompt: exact methods must
    reproduce AR (approximate ones, SMC-SD and PACER's discard mode, say so in their label)."""
    flags = []
    for row in rows:
        same, _, total = str(row.get("same_as_ar", "")).partition("/")
        if total and same != total:
            flags.append(f"**MISMATCH: {row['method']} returned a different output from AR on {int(total) - int(same)} "
                         f"of {total} prompts.** Greedy SD is exact only when the target's numerics are the same "
                         "for one and for several tokens (float32 on a CPU); see README, \"Measured\".")
    return [""] + flags if flags else []


def summarise(label: str, runs_by_repeat: list[list[RunRecord]]) -> dict:
    """runs_by_repeat[r][i]: repeat r, prompt i. Counts come from the first repeat; per prompt, the median seconds
    and new tokens over repeats (``prompt_seconds``, ``prompt_tokens``: where a method gains or loses, prompt by
    prompt)."""
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
        "prompt_seconds": [statistics.median(runs[i].seconds for runs in runs_by_repeat) for i in range(len(first))],
        "prompt_tokens": [statistics.median(runs[i].new_tokens for runs in runs_by_repeat) for i in range(len(first))],
        "texts": [run.text for run in first],
        **luck_totals(runs_by_repeat),
    }


def luck_totals(runs_by_repeat: list[list[RunRecord]]) -> dict:
    """Over every repeat: the tokens a row's steps emitted and would emit in expectation (``step_tokens``); {} for a
    row without them."""
    runs = [run for runs in runs_by_repeat for run in runs]
    if not runs or any(run.step_tokens is None for run in runs):
        return {}
    return {"step_tokens": sum(run.step_tokens[0] for run in runs),
            "expected_step_tokens": sum(run.step_tokens[1] for run in runs)}


def machine_info(target, drafter) -> dict:
    import transformers

    return {"platform": platform.platform(), "processor": platform.processor(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), **target.describe(drafter)}


def write_outputs(out_dir: Path, report: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=2))
    columns = ["method", "tau", "alpha", "target_calls", "draft_calls", "new_tokens", "seconds_median",
               "tokens_per_s", "speedup_vs_ar", "drafter"]
    if "same_as_ar" in report["methods"][0]:
        columns.append("same_as_ar")
    if "speedup_vs_fixed" in report["methods"][0]:
        columns.append("speedup_vs_fixed")
    if any(row.get("speedup_vs_fixed_luck_free") for row in report["methods"]):
        columns += ["tokens_per_s_luck_free", "speedup_vs_fixed_luck_free"]
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
    lines += identity_flags(report["methods"])
    if "speedup_vs_fixed_luck_free" in columns:
        lines += ["", "tokens_per_s_luck_free = tokens_per_s × the row's expected over realized step tokens over all "
                  "repeats (per step 1 + Σ_i Π_{j≤i} min(1, p/q) of its drafted tokens: what its drafts emit on "
                  "average over the target's accept draws); speedup_vs_fixed_luck_free compares those."]
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
