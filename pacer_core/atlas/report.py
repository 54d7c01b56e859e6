"""An atlas run's outputs: the ``atlas.json`` dictionary built from the kept PromptRuns, and the files
``atlas.json``, ``atlas.csv`` (one row per prompt) and ``report.md``.

``atlas.json`` (one drafter; with a comparison, ``compare`` holds the second drafter's in the same form plus
``agreement``): method, drafter, temperature, seed, max_new_tokens, settings, prompts (finished), prompt_total,
drafted, accepted, alpha (= accepted / drafted, the decoders' own counts), judged, tokens, target_calls, tau,
seconds, speedup (None without an AR baseline), by_position, by_token_kind, by_category, calibration,
by_preverifier_score (PACER: by its pre-verifier's estimate; lists of {…, drafted, accepted, alpha}: judged tokens,
``counts``), rejections, most_rejected, confidently_wrong and
per_prompt (index, id, category, prompt, tau, alpha, tokens, seconds, speedup, drafted, accepted, steps,
finish_reason, text)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from . import counts
from .runner import AtlasPrompt, PromptRun


def speedup(tokens: int, seconds: float, ar_tokens: int | None, ar_seconds: float | None) -> float | None:
    """Tokens per second over AR's on the same prompts (None without an AR measurement)."""
    if not ar_tokens or not ar_seconds or not seconds:
        return None
    return (tokens / seconds) / (ar_tokens / ar_seconds)


def prompt_row(prompt: AtlasPrompt, run: PromptRun, drafter: str) -> dict:
    record = run.records[drafter]
    return {"index": run.index, "id": prompt.id, "category": prompt.category, "prompt": prompt.prompt,
            "tau": record.tau, "alpha": record.alpha, "tokens": record.tokens, "seconds": record.seconds,
            "speedup": speedup(record.tokens, record.seconds, run.ar_tokens, run.ar_seconds),
            "drafted": record.drafted, "accepted": record.accepted, "steps": record.steps,
            "finish_reason": record.finish_reason, "text": record.text}


def drafter_atlas(method: str, drafter: str, settings, prompts: list[AtlasPrompt], runs: list[PromptRun]) -> dict:
    """One drafter's atlas over the finished prompts."""
    records = [run.records[drafter] for run in runs]
    judged = [item for record in records for item in record.judgments]
    drafted, accepted = sum(r.drafted for r in records), sum(r.accepted for r in records)
    tokens, seconds = sum(r.tokens for r in records), sum(r.seconds for r in records)
    target_calls = sum(r.target_calls for r in records)
    measured_ar = bool(runs) and all(run.ar_seconds is not None for run in runs)
    return {"method": method, "drafter": drafter, "temperature": settings.temperature, "seed": settings.seed,
            "max_new_tokens": settings.max_new_tokens, "settings": settings.to_dict(),
            "prompts": len(runs), "prompt_total": len(prompts), "drafted": drafted, "accepted": accepted,
            "alpha": counts.ratio(accepted, drafted), "judged": len(judged), "tokens": tokens,
            "target_calls": target_calls, "tau": counts.ratio(tokens, target_calls), "seconds": seconds,
            "speedup": speedup(tokens, seconds, sum(run.ar_tokens for run in runs),
                               sum(run.ar_seconds for run in runs)) if measured_ar else None,
            "by_position": counts.by_position(judged), "by_token_kind": counts.by_token_kind(judged),
            "by_category": counts.by_category(judged, [prompt.category for prompt in prompts]),
            "calibration": counts.calibration(judged), "by_preverifier_score": counts.by_preverifier_score(judged),
            "rejections": counts.rejections(judged),
            "most_rejected": counts.most_rejected(judged), "confidently_wrong": counts.confidently_wrong(judged),
            "per_prompt": [prompt_row(prompts[run.index], run, drafter) for run in runs]}


def build_atlas(method: str, drafters: list[str], settings, prompts: list[AtlasPrompt], runs: list[PromptRun]) -> dict:
    """The atlas of the first drafter; with a second, ``compare``: its atlas and where their verdicts differ."""
    atlas = drafter_atlas(method, drafters[0], settings, prompts, runs)
    if len(drafters) > 1:
        first, second = drafters[:2]
        shared = {run.index: counts.common_prefix_length(run.records[first].token_ids, run.records[second].token_ids)
                  for run in runs}
        agreement = counts.verdict_agreement([j for run in runs for j in run.records[first].judgments],
                                             [j for run in runs for j in run.records[second].judgments], shared)
        atlas["compare"] = drafter_atlas(method, second, settings, prompts, runs) | {"agreement": agreement}
    return atlas


CSV_COLUMNS = ["index", "id", "category", "tau", "alpha", "tokens", "seconds", "speedup", "drafted", "accepted",
               "steps", "finish_reason"]


def csv_rows(atlas: dict) -> list[dict]:
    """One row per prompt; with a comparison, the second drafter's tau, alpha and speedup beside the first's."""
    rows = [{column: row[column] for column in CSV_COLUMNS} for row in atlas["per_prompt"]]
    other = atlas.get("compare")
    if other:
        for row, second in zip(rows, other["per_prompt"]):
            row |= {f"{other['drafter']}_{name}": second[name] for name in ("tau", "alpha", "speedup")}
    return rows


def write_atlas(out_dir, atlas: dict) -> Path:
    """atlas.json, atlas.csv and report.md in ``out_dir`` (created); returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "atlas.json").write_text(json.dumps(atlas, indent=1, ensure_ascii=False), encoding="utf-8")
    rows = csv_rows(atlas)
    with open(out / "atlas.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (out / "report.md").write_text(markdown_report(atlas), encoding="utf-8")
    return out


def _fmt(value) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


VERDICT = {True: "✓", False: "✗"}


def token_cell(text) -> str:
    """A token in a markdown table cell: spaces as ␣, newlines as ↵, tabs as →, pipes escaped."""
    return "–" if text is None else context_cell(str(text).replace(" ", "␣"))


def context_cell(text) -> str:
    """Context text in a markdown table cell: newlines as ↵, tabs as →, pipes and backticks escaped."""
    return str(text).replace("\n", "↵").replace("\t", "→").replace("|", "\\|").replace("`", "\\`")


def table(rows: list[dict], columns: list[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(row.get(column)) for column in columns) + " |" for row in rows]
    return lines + [""]


def markdown_report(atlas: dict) -> str:
    lines = [f"# Atlas: {atlas['method']} drafted by {atlas['drafter']}", "",
             f"{atlas['prompts']} of {atlas['prompt_total']} prompts, temperature {atlas['temperature']}, seed "
             f"{atlas['seed']}, at most {atlas['max_new_tokens']} new tokens. α = accepted / drafted = "
             f"{atlas['accepted']} / {atlas['drafted']} = {_fmt(atlas['alpha'])}; τ = {_fmt(atlas['tau'])} tokens "
             f"per target pass; speedup over AR {_fmt(atlas['speedup'])}.", "",
             "The breakdowns count the drafted tokens the target judged (accepted, or the first rejected one of a "
             "step), so by position they give the conditional α at each depth.", ""]
    lines += section(atlas)
    other = atlas.get("compare")
    if other:
        agreement = other["agreement"]
        lines += [f"## Compared with {other['drafter']}", "",
                  f"α {_fmt(other['alpha'])}, τ {_fmt(other['tau'])}, speedup {_fmt(other['speedup'])}. On "
                  f"{agreement['compared']} output positions both judged: both accepted {agreement['both']}, only "
                  f"{atlas['drafter']} {agreement['only_first']}, only {other['drafter']} {agreement['only_second']}, "
                  f"neither {agreement['neither']}.", ""]
        first, second = atlas["drafter"], other["drafter"]
        lines += table([{"prompt_index": row["prompt_index"], "context": context_cell(row["context"]),
                         first: f"{token_cell(row['first'])} {VERDICT[row['first_accepted']]}",
                         second: f"{token_cell(row['second'])} {VERDICT[row['second_accepted']]}"}
                        for row in agreement["examples"][:15]], ["prompt_index", "context", first, second])
        lines += section(other, level="###")
    return "\n".join(lines) + "\n"


def section(atlas: dict, level: str = "##") -> list[str]:
    counted = ["drafted", "accepted", "alpha"]
    lines = [f"{level} By draft position", ""] + table(atlas["by_position"], ["position"] + counted)
    lines += [f"{level} By kind of drafted token", ""] + table(atlas["by_token_kind"], ["kind"] + counted)
    lines += [f"{level} By prompt category", ""] + table(atlas["by_category"], ["category"] + counted)
    lines += [f"{level} Calibration (the drafter's q against measured acceptance)", ""]
    lines += table(atlas["calibration"], ["low", "high", "mean_q", "drafted", "accepted", "alpha"])
    if atlas.get("by_preverifier_score"):
        lines += [f"{level} By the pre-verifier's estimate (PACER)", ""]
        lines += table(atlas["by_preverifier_score"], ["low", "high", "mean_score", "drafted", "accepted", "alpha"])
    lines += [f"{level} Most often rejected", ""]
    lines += table([{"drafted": token_cell(row["drafted"]), "rejected": row["rejected"], "judged": row["drafted_total"],
                     "contexts": "; ".join(f"…{context_cell(c['context'][-30:])} → {token_cell(c['target'])}"
                                           for c in row["contexts"])}
                    for row in atlas["most_rejected"]], ["drafted", "rejected", "judged", "contexts"])
    lines += [f"{level} Most confidently wrong", ""]
    lines += table([{**row, "context": context_cell(row["context"][-40:]), "drafted": token_cell(row["drafted"]),
                     "target": token_cell(row["target"])} for row in atlas["confidently_wrong"]],
                   ["prompt_index", "draft_prob", "context", "drafted", "target"])
    lines += [f"{level} Per prompt", ""]
    lines += table(atlas["per_prompt"], ["index", "id", "category", "tau", "alpha", "tokens", "seconds", "speedup"])
    return lines
