"""SMC-SD's measured approximation error, for the note under its column.

The figures come from the benchmark runs shipped in ``benchmarks/results/smc-embedded-heldout40*`` (the small
draft) and ``benchmarks/results/gguf-heldout-t0.7-smc`` (the gguf drafter, ``smc:N:K@gguf`` rows)
(``python -m pacer_core.bench ... --loglik``): how much lower the target's log-likelihood per token of
SMC-SD's outputs was than AR's, on held-out prompts. They apply only to the pair, drafter and temperature they
were measured on; for any other pair the note says so instead of quoting them."""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from ..method_table import exact_keys
from ..methods import parse_method

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
MEASURED_RUNS = (RESULTS / "smc-embedded-heldout40" / "results.json",
                 RESULTS / "smc-embedded-heldout40-many-particles" / "results.json",
                 RESULTS / "gguf-heldout-t0.7-smc" / "results.json")
DRAFTER_KEYS = {"independent": "small", "feature-head": "head"}   # describe()["drafter"]["kind"] → the page's name


@functools.lru_cache(maxsize=4)
def load_run(path: str) -> dict | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def drafter_key_of(drafter: dict) -> str:
    """The page's name of a described drafter: small, head, self-int8, self-int4, gguf."""
    kind = drafter.get("kind", "")
    return f"self-int{drafter.get('bits')}" if kind == "self-quantized" else DRAFTER_KEYS.get(kind, kind)


def smc_rows(run: dict, describe: dict | None = None) -> dict[tuple[int, int], dict]:
    """{(N, K): row} for the run's smc:N:K rows at the default draft temperature; each row gains
    ``ar_loglik``, AR's log-likelihood per token in the same run. With ``describe`` (a pair's), only the rows
    of its drafter: ``@DRAFTER`` rows of that drafter on the same target, plain rows when the run's pair is it."""
    ar_loglik = next((row.get("target_loglik_per_token") for row in run.get("methods", []) if row.get("method") == "ar"),
                     None)
    rows = {}
    for row in run.get("methods", []):
        spec = parse_method(str(row.get("method", "")))
        if describe is not None and not same_drafter(run.get("machine", {}), spec.drafter, describe):
            continue
        if spec.kind == "smc" and "draft_temperature" not in spec.overrides and "loglik_gap_vs_ar_pct" in row \
                and len(spec.overrides) == 2:
            rows[(spec.overrides["n_particles"], spec.overrides["draft_len"])] = row | {"ar_loglik": ar_loglik}
    return rows


def same_drafter(machine: dict, row_drafter: str | None, describe: dict) -> bool:
    if machine.get("target") != describe.get("target"):
        return False
    if row_drafter:
        return row_drafter == drafter_key_of(describe.get("drafter") or {})
    return machine.get("draft") == describe.get("draft")


def _gap_text(row: dict) -> str:
    gap = float(row["loglik_gap_vs_ar_pct"])
    where = f"{gap:.0f}% lower than AR's" if gap >= 0.5 else (
        "level with AR's" if gap > -0.5 else f"{-gap:.0f}% higher than AR's")
    values = ""
    if row.get("target_loglik_per_token") is not None and row.get("ar_loglik") is not None:
        values = f"{row['target_loglik_per_token']:.2f} vs {row['ar_loglik']:.2f}, "
    return f"{where} ({values}95% interval of the gap {row['loglik_gap_ci95']} %)"


def measured_runs(paths) -> list[dict]:
    return [run for run in (load_run(str(path)) for path in paths) if run is not None]


def smc_error_note(describe: dict, n_particles: int, draft_len: int, temperature: float,
                   paths=MEASURED_RUNS) -> str:
    """One or two sentences: the measured error for this N and K, every measured one when this N and K
    was not measured, or why none applies."""
    runs = measured_runs(paths)
    if not runs:
        return "Its error has not been measured for this pair."
    runs = [run for run in runs if smc_rows(run, describe)]
    if not runs:
        return ("Its error depends on how closely the draft follows the target; it was measured for the embedded "
                "pair only (README, SMC-SD figures).")
    rows = {key: row for run in runs for key, row in smc_rows(run, describe).items()}
    settings = runs[0].get("settings", {})
    other_temperature = float(temperature) != float(settings.get("temperature", -1))
    where = ((f"Not measured at temperature {temperature:g}. " if other_temperature else "")
             + f"Measured on this pair at temperature {settings.get('temperature')} over "
             f"{settings.get('prompt_count')} held-out prompts x {settings.get('repeats')} runs, the target's "
             "log-likelihood per token of SMC-SD's outputs was")
    if (n_particles, draft_len) in rows:
        return f"{where} {_gap_text(rows[(n_particles, draft_len)])} for N={n_particles}, K={draft_len}."
    listed = "; ".join(f"N={n}, K={k}: {float(row['loglik_gap_vs_ar_pct']):.0f}"
                       for (n, k), row in sorted(rows.items()))
    return f"N={n_particles}, K={draft_len} was not measured. {where} below AR's by, in percent: {listed}."


def this_run_text(logliks: dict) -> str:
    """SMC-SD's target log-likelihood per token on this run next to the exact columns' (sampling runs)."""
    exact = [logliks[method] for method in exact_keys() if method in logliks]
    if "smc" not in logliks or not exact:
        return ""
    return (f"This run: the target's log-likelihood per token is {logliks['smc']:.2f} for SMC-SD's output and "
            f"{sum(exact) / len(exact):.2f} for the exact columns' (one prompt, so noisy).")


def non_default_text(settings: dict) -> str:
    """The measurements used the decoder's defaults; say so when this run does not."""
    draft_temperature = settings.get("draft_temperature")
    if (float(settings.get("ess_threshold", 0.5)) != 0.5 or float(settings.get("power", 1.0)) != 1.0
            or (draft_temperature is not None and float(draft_temperature) != float(settings["temperature"]))):
        return ("(Those figures used ESS threshold 0.5, power 1 and draft temperature = temperature; "
                "this run's settings differ.)")
    return ""


def divergence_text(proposal_kl: float | None, n_particles: int, draft_len: int) -> str:
    """The run's KL(p_T || q_Td) per token, turned into the particle count at which importance weighting of
    one K-token block starts to work: about exp(K x KL) (Chatterjee & Diaconis 2018). It is a threshold,
    not a guarantee: beyond it the error still shrinks only like 1/N."""
    if proposal_kl is None or not math.isfinite(proposal_kl):
        return ""
    needed = draft_len * proposal_kl
    count = f"{math.exp(needed):,.0f}" if needed < math.log(1e6) else "over a million"
    ratio = math.exp(min(needed, 50.0)) / n_particles
    verdict = ("more than" if ratio < 0.5 else "about as many as" if ratio <= 2 else "fewer than" if ratio <= 8
               else "far fewer than")
    return (f"Why: along this output the draft's distribution is {proposal_kl:.2f} nats per token (KL) from the "
            f"target's. Importance weights start to correct a {draft_len}-token block only with more than about "
            f"e^(K x KL) = {count} particles (Chatterjee & Diaconis 2018), and the error then shrinks roughly as 1/N; "
            f"N={n_particles} is {verdict} that.")


def smc_column_note(describe: dict, settings: dict, logliks: dict, paths=MEASURED_RUNS,
                    proposal_kl: float | None = None) -> str:
    """The whole note under the SMC-SD column: approximate, its measured error, this run's figure, and
    the run's proposal divergence as the particle count it calls for."""
    n_particles, draft_len = int(settings["n_particles"]), int(settings["draft_len"])
    parts = ["SMC-SD is approximate: its output follows the target's distribution only approximately.",
             smc_error_note(describe, n_particles, draft_len, float(settings["temperature"]), paths),
             non_default_text(settings), this_run_text(logliks),
             divergence_text(proposal_kl, n_particles, draft_len)]
    return " ".join(part for part in parts if part)
