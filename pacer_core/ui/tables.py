"""Pure metrics table: Results (plus each method's own busy time) in, a pandas DataFrame out.

Names follow docs/algorithms.md#metrics. ``seconds`` is each method's own busy time from the session:
Run times each method alone, one after another, drawing nothing while it decodes (ui/race.py), so it is
the decoder's own time, as if it ran by itself; under Step it is the method's own passes between clicks. ``speedup`` is the ratio of tokens per
second to AR's, measured in the same session on the same prompt and settings. ``same_as_ar`` (greedy
runs only) says whether a method emitted exactly AR's tokens: fixed SD and PACER must. ``target_loglik``
(sampling runs only) is the target's mean log-probability per token of the method's output: exact
samplers differ only by chance, SMC-SD's gap to them is its approximation error on this prompt."""
from __future__ import annotations

import pandas as pd

from ..method_table import label_of, method_keys

COLUMNS = ["method", "drafter", "tau", "alpha", "target_calls", "draft_calls", "new_tokens", "seconds", "tokens_per_s",
           "speedup", "same_as_ar", "target_loglik"]
LABEL = ("Metrics · each method timed alone, one after another, nothing drawn while it ran (a short Run: its "
         "fastest of 2-3 passes) · speedup = tokens/s ÷ AR tokens/s")      # the live page's table; how it was timed, in one line


def metrics_row(method: str, result, seconds: float | None = None, status: str | None = None) -> dict:
    """One table row; ``seconds`` overrides the decoder's own wall time (see module doc)."""
    row = {"method": label_of(method), "drafter": None}
    if result is None:
        row.update({name: None for name in COLUMNS[1:]})
        if status:
            row["method"] += f" ({status})"
        return row
    metrics = result.metrics
    seconds = metrics.seconds if seconds is None else seconds
    row.update({"tau": round(metrics.tau, 3), "alpha": None if metrics.alpha is None else round(metrics.alpha, 3),
                "target_calls": metrics.target_calls, "draft_calls": metrics.draft_calls,
                "new_tokens": metrics.new_tokens, "seconds": round(seconds, 3),
                "tokens_per_s": round(metrics.new_tokens / seconds, 2) if seconds > 0 else None, "speedup": None,
                "same_as_ar": None, "target_loglik": None})
    if result.finish_reason == "cancelled":
        row["method"] += " (stopped)"
    return row


def metrics_frame(results: dict, seconds: dict | None = None, statuses: dict | None = None,
                  logliks: dict | None = None, drafter: str | None = None) -> pd.DataFrame:
    """A row per method present, in the method table's order (AR first), with speedup = tokens_per_s / AR tokens_per_s; ``drafter``
    names who drafted for the speculative rows."""
    seconds, statuses, logliks = seconds or {}, statuses or {}, logliks or {}
    rows = []
    for method in method_keys():
        if method not in results and method not in statuses:
            continue
        rows.append((method, metrics_row(method, results.get(method), seconds.get(method), statuses.get(method))))
    ar_speed = dict(rows).get("ar", {}).get("tokens_per_s") if rows else None
    ar_result = results.get("ar")
    for method, row in rows:
        if ar_speed and row.get("tokens_per_s"):
            row["speedup"] = round(row["tokens_per_s"] / ar_speed, 2)
        result = results.get(method)
        if method != "ar" and result is not None and ar_result is not None and _greedy(result) and _greedy(ar_result):
            row["same_as_ar"] = same_tokens(result.token_ids, ar_result.token_ids)
        if method in logliks:
            row["target_loglik"] = round(logliks[method], 3)
        row["drafter"] = "—" if method == "ar" else drafter
    frame = pd.DataFrame([row for _, row in rows], columns=COLUMNS)
    return frame


def _greedy(result) -> bool:
    return float((result.settings or {}).get("temperature", 1.0)) == 0.0


def same_tokens(output_ids, ar_ids) -> str:
    """Greedy runs: lossless methods must reproduce AR's tokens exactly ("yes"); a stopped run is
    compared over the tokens it produced."""
    length = min(len(output_ids), len(ar_ids))
    if length == 0:
        return "—"
    return "yes" if list(output_ids[:length]) == list(ar_ids[:length]) else "no"


def empty_frame() -> pd.DataFrame:
    return pd.DataFrame([], columns=COLUMNS)
