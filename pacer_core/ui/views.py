"""Views of a session: what the page shows of a ``RunSession`` at any moment, as plain values for a
``ViewUpdate`` (columns' HTML, the charts, the metrics table, the narration, the status line once done), and the
run's files to download. Pure apart from ``export_files``, which writes them; no Gradio."""
from __future__ import annotations

import json
import time
from pathlib import Path

from ..drafters import drafter_key
from ..method_table import label_of
from . import charts, columns, measured, narration, page, race, tables
from .downloads import DOWNLOADS
from .page_types import AppContext, ViewUpdate
from .session import RunSession


def column_note(context: AppContext, session: RunSession, method: str) -> str | None:
    """The small print under a column: what stops PACER's drafting and its discard mode, SMC-SD's error."""
    settings, notes = session.settings, []
    if method == "pacer" and session.pacer_rule:
        notes.append(session.pacer_rule)
    elif method == "pacer" and context.preverifier_kind != "trained":   # a trace recorded before the rule was kept
        notes.append("Pre-verifier: heuristic confidence rule (no trained layer for this pair).")
    if method == "pacer" and settings.get("on_fail") == "discard" and settings.get("temperature", 0) > 0:
        notes.append("Discard mode under sampling is approximate (not lossless).")
    if method == "smc" and not session.runs[method].error:
        notes.append(measured.smc_column_note(session.target.describe(session.drafter), settings, session.logliks,
                                              proposal_kl=session.proposal_kl))
    return " ".join(notes) or None


def columns_view(context: AppContext, session: RunSession, running: bool, pending=frozenset()) -> dict[str, str]:
    """Every column's HTML; methods in ``pending`` show their newest step as drafted, not yet verified."""
    return {method: columns.column_html(method, [], placeholder=run.error, skipped=True) if run.skipped else
            columns.column_html(method, run.events, run.result, run.error, running=running and not run.done,
                                note=column_note(context, session, method), pending=method in pending)
            for method, run in session.runs.items()}


def events_by_method(session: RunSession) -> dict[str, list]:
    """Every method's events so far, the AR baseline's first (when it is measured)."""
    events = {"ar": session.ar.events} if session.ar is not None else {}
    return events | {method: run.events for method, run in session.runs.items()}


def chart_data(session: RunSession) -> charts.ChartData:
    """What the charts read from a session: its events, the oracle γ* once computed, the drafter's name."""
    oracle_label = "oracle γ*" if session.oracle_greedy else "oracle E[γ*] (sampling)"
    return charts.ChartData(events_by_method(session), session.oracle, session.oracle_steps, oracle_label,
                            drafter_label(session))


def plots_view(session: RunSession, names=None) -> dict[str, object]:
    """The charts by name (all of ``charts.CHARTS``, or only ``names``)."""
    return charts.figures(chart_data(session), names)


def drafter_label(session: RunSession) -> str:
    """The drafter's menu key (one of ``drafters.drafter_keys()``), as the page's drafter choice names it."""
    return session.menu_key or drafter_key(session.drafter)


def table_view(session: RunSession):
    return tables.metrics_frame(session.results(), session.busy_seconds(), session.statuses(), session.logliks,
                                drafter=drafter_label(session))


def export_files(session: RunSession, folder: Path | None = None) -> tuple[str, str]:
    """The run's JSON trace and CSV metrics, written to a fresh folder (by default among the page's downloads,
    which keep only the newest runs' files); returns both paths."""
    folder = folder or DOWNLOADS.fresh("pacer-run-")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    trace_path, csv_path = folder / f"pacer-trace-{stamp}.json", folder / f"pacer-metrics-{stamp}.csv"
    trace_path.write_text(json.dumps(session.trace(), indent=1, ensure_ascii=False), encoding="utf-8")
    table_view(session).to_csv(csv_path, index=False)
    return str(trace_path), str(csv_path)


def summary_lines(session: RunSession) -> dict[str, str]:
    drafter = drafter_label(session)
    return {method: run.error or narration.summarize_run(run.result, run.events)
            + narration.drafter_sentence(method, drafter)
            for method, run in session.runs.items() if run.error or run.result is not None}


def step_lines(session: RunSession, new_events: dict, verify_phase: bool) -> dict[str, str]:
    """The narration of one Step click: what each method drafted, or the target's verdict on it."""
    explain = narration.explain_step if verify_phase else narration.explain_draft
    return {method: explain(event) if event is not None else (session.runs[method].error or "finished.")
            for method, event in new_events.items()}


def steps_so_far(session: RunSession) -> int:
    return max((len(run.events) for run in session.runs.values()), default=0)


def final_status(session: RunSession, started: float | None, now: float, charts_pending: bool = False,
                 drawn: str | None = None) -> str:
    """The status line once every column is done: time taken or stopped, how it was timed, failures, notes
    (``charts_pending``: the finished table is out, its charts come in the next frame; ``drawn``: the token the
    page acknowledges once it has painted it)."""
    how = race.how_timed(session.timing_pass_count())
    message = f"Done in {now - started:.1f} s, {how}." if started is not None else \
        "All methods finished (step-through: each method's own passes, timed between your clicks)."
    if session.stopped:
        message = "Stopped."
    elif session.cancel.is_set():
        message = f"Done in {now - started:.1f} s, {how} (replay skipped)."
    failed = {method: run.error for method, run in session.runs.items() if run.error and not run.skipped}
    for method, error in failed.items():      # one column's failure must not read as a clean "Done"
        message += f" {label_of(method)} did not finish: {error}"
    skipped = [label_of(method) for method, run in session.runs.items() if run.skipped]
    if skipped:
        message += f" Not run (stopped before their turn): {', '.join(skipped)}."
    message += "".join(f" {note}" for note in (session.oracle_note, session.prompt_note) if note)
    return page.run_status_html(message, "error" if len(failed) == len(session.runs) else "done",
                                drawn=drawn, charts_pending=charts_pending)


def finished_view(context: AppContext, session: RunSession, ready_plots: dict | None = None) -> ViewUpdate:
    """The finished page but its status line: columns, every chart (those in ``ready_plots`` as built already),
    summary, table and downloads."""
    ready = ready_plots or {}
    figures = ready | plots_view(session, names={name for name in charts.chart_names() if name not in ready})
    return ViewUpdate(columns=columns_view(context, session, running=False), plots=figures,
                      narration=narration.narration_html(summary_lines(session)), table=table_view(session),
                      downloads=export_files(session), session=session)
