"""How a benchmark script hands back its results: the report printed and written as JSON (``print_and_write``), a
results folder with results.json and report.md (``write_folder``), or one with a named JSON file and summary.txt
(``write_summary``). One writer, so every results file has the same layout."""
from __future__ import annotations

import json
from pathlib import Path


def fmt(value, digits: int = 2) -> str:
    """A report's number: ``digits`` decimals, or "–" for a value not measured."""
    return "–" if value is None else f"{value:.{digits}f}"


def as_json(report: dict, indent: int = 1) -> str:
    return json.dumps(report, indent=indent)


def print_and_write(report: dict, out: str | Path | None, indent: int = 1) -> None:
    """Print the report as JSON, and write it to ``out`` (its folder made) when one is given."""
    print(as_json(report, indent))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(as_json(report, indent) + "\n")


def write_folder(out: str | Path, report: dict, markdown: str) -> None:
    """``out``/results.json and ``out``/report.md (the folder made); the report printed."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(as_json(report) + "\n")
    (out / "report.md").write_text(markdown)
    print(markdown)


def write_folder_or_print(out: str | Path | None, report: dict, markdown: str) -> None:
    """``write_folder`` when a folder is given, else the markdown printed."""
    if out:
        write_folder(out, report, markdown)
    else:
        print(markdown)


def write_summary(out: str | Path | None, json_name: str, report: dict, summary: str) -> None:
    """The summary printed; with ``out``, ``out``/``json_name`` (the report) and ``out``/summary.txt (the folder
    made)."""
    print(summary)
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / json_name).write_text(as_json(report, indent=2))
        (out / "summary.txt").write_text(summary + "\n")
