"""Long answers and long prompts: what each step costs as a run grows, through the page's own Run handler.

For each prompt (``assets/prompts/long.jsonl``: passages of about 50, 500 and 1,500 tokens), ONE run of
``pacer_core.ui.handlers.run`` with the app's defaults (T = 0.7, seed 0, the pair's measured fixed length,
PACER's trained pre-verifier, SMC-SD N = 4, K = 4, the AR baseline measured) to ``--max-new-tokens``. The
four methods run interleaved, one step each in turn, so they share the machine's load at every moment.

Read off that one run, per method:
* tokens/s and speedup over AR at 64, 256 and 512 new tokens: the method's own step time up to the step
  that reached the mark (the first N tokens of a 512-token run are an N-token run, up to the last step's
  budget cut), AR's up to exactly N;
* the time per step split into draft (drafter forwards), verify (the target pass) and everything else
  (sampling, bookkeeping, detokenising; the step's wall time from the decoder's generator minus the two),
  by output position: steps that start in [0, 64), [64, 256), [256, 512);
* peak memory (the process's RSS, sampled after every step: the target, the drafter and every method's
  caches at once, SMC-SD's N copies included) and the page's render overhead (the handler's wall time
  outside model work, over the model work, as benchmarks/ui_overhead.py measures it).

``--ignore-eos`` (the default) keeps every method generating to the token budget (the vLLM benchmarks'
``--ignore-eos``): each run then reaches every mark, and the report gives where each output's first
end-of-text token came. Writes results.json and report.md to ``--out``.

    python benchmarks/scaling.py --out benchmarks/results/long-scaling
    python benchmarks/scaling.py --plot benchmarks/results/long-scaling   # report and figure from saved results
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pacer_core import method_table  # noqa: E402

MARKS = (64, 256, 512)
BINS = ((0, 64), (64, 256), (256, 512))
MODEL_WORK = ("advance_one", "compute_oracle", "compute_likelihoods")


def rss_bytes() -> int:
    """The process's resident set size now (Linux /proc; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def without_stops(target):
    """A view of ``pair`` with no end-of-text ids: every method generates to its token budget. The same
    target and tokenizer (nothing copied); the decoders read ``pair.eos_token_ids``."""
    from pacer_core.models import Target

    class NoStopPair(Target):
        @property
        def eos_token_ids(self) -> set[int]:
            return set()

    fields = {field.name: getattr(target, field.name) for field in dataclasses.fields(target)}
    return NoStopPair(**fields)


class StepRecorder:
    """While active, every RunSession.advance_one call is timed and tagged with the method and whether it
    added an event; the model-running methods' wall time is summed (render = the rest of the handler's);
    the RSS is sampled after each call."""

    def __init__(self):
        self.calls: list[tuple[str, float, int]] = []     # (method, seconds, events after the call)
        self.model_seconds = 0.0
        self.peak_rss = 0
        self._originals = {}

    def __enter__(self):
        from pacer_core.ui.session import RunSession

        self._session_class = RunSession
        for name in MODEL_WORK:
            self._originals[name] = getattr(RunSession, name)
            setattr(RunSession, name, self._wrap(name, self._originals[name]))
        return self

    def _wrap(self, name: str, method):
        recorder = self

        @functools.wraps(method)
        def wrapper(session, *args, **kwargs):
            started = time.perf_counter()
            try:
                return method(session, *args, **kwargs)
            finally:
                seconds = time.perf_counter() - started
                recorder.model_seconds += seconds
                if name == "advance_one":
                    run = args[0]
                    recorder.calls.append((run.method, seconds, len(run.events)))
                recorder.peak_rss = max(recorder.peak_rss, rss_bytes())
        return wrapper

    def __exit__(self, *exc):
        for name, method in self._originals.items():
            setattr(self._session_class, name, method)
        return False


def step_records(method: str, events: list, calls: list) -> list[dict]:
    """Per event of one method: where its output stood before the step, tokens it added, draft, verify and
    wall seconds (the generator call that yielded it; calls that yielded no event, such as the final
    Result, count towards the step before)."""
    walls, pending = [], 0.0
    for name, seconds, count in calls:
        if name != method:
            continue
        if count > len(walls):
            walls.append(pending + seconds)
            pending = 0.0
        elif walls:
            walls[-1] += seconds
        else:
            pending += seconds
    records, before = [], 0
    for event, wall in zip(events, walls):
        total = int(event.total_new_tokens)
        records.append({"start": before, "tokens": max(total - before, 0), "draft_s": float(event.draft_seconds),
                        "verify_s": float(event.verify_seconds), "wall_s": wall})
        before = total
    return records


def at_marks(records: list[dict], marks=MARKS) -> dict:
    """{mark: {"tokens", "seconds", "tokens_per_s", "decode_tokens_per_s"}} from the steps up to the one that
    reached the mark; "decode" leaves out the first step, which also runs the prompt through the models."""
    out, seconds, tokens = {}, 0.0, 0
    pending = sorted(marks)
    first = records[0] if records else None
    for record in records:
        seconds += record["wall_s"]
        tokens = record["start"] + record["tokens"]
        while pending and tokens >= pending[0]:
            mark = pending.pop(0)
            decode_seconds = seconds - first["wall_s"]
            out[str(mark)] = {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
                              "first_step_s": first["wall_s"],
                              "decode_tokens_per_s": (tokens - first["tokens"]) / decode_seconds
                              if decode_seconds > 0 else None}
    return out


def profile(records: list[dict], bins=BINS) -> dict:
    """Mean per step in each position bin (by where the step started): draft, verify, other ms; tokens."""
    out = {}
    for low, high in bins:
        chosen = [r for r in records if low <= r["start"] < high]
        if not chosen:
            continue
        draft = statistics.fmean(r["draft_s"] for r in chosen)
        verify = statistics.fmean(r["verify_s"] for r in chosen)
        wall = statistics.fmean(r["wall_s"] for r in chosen)
        out[f"{low}-{high}"] = {"steps": len(chosen), "draft_ms": 1e3 * draft, "verify_ms": 1e3 * verify,
                                "other_ms": 1e3 * max(wall - draft - verify, 0.0),
                                "tokens_per_step": statistics.fmean(r["tokens"] for r in chosen)}
    return out


def app_settings(target, drafter, max_new_tokens: int) -> dict:
    """What the page's controls start at (ui/layout.py): T = 0.7, seed 0, the pair's measured fixed length;
    PACER's block size and threshold come from its pre-verifier (the run request resolves them)."""
    from pacer_core.drafters import measured_gamma
    from pacer_core.settings import FIELD_BY_NAME

    settings = {"max_new_tokens": max_new_tokens, "temperature": FIELD_BY_NAME["temperature"].app_value, "seed": 0}
    gamma = measured_gamma(target, drafter)
    return settings | ({"gamma": gamma} if gamma else {})


def add_speedups(methods: dict) -> None:
    """Each mark's speedup over AR at the same mark, end to end and for the decoding after the first step."""
    for row in methods.values():
        for mark, value in row.get("marks", {}).items():
            ar = methods.get("ar", {}).get("marks", {}).get(mark)
            value["speedup_vs_ar"] = value["tokens_per_s"] / ar["tokens_per_s"] if ar else None
            value["decode_speedup_vs_ar"] = (value["decode_tokens_per_s"] / ar["decode_tokens_per_s"]
                                             if ar and ar.get("decode_tokens_per_s") and value.get("decode_tokens_per_s")
                                             else None)


def run_prompt(context, record: dict, max_new_tokens: int, eos_ids: set[int]) -> dict:
    from pacer_core.ui import handlers
    from pacer_core.ui.handlers import PageInputs

    target = context.target
    settings = app_settings(target, context.drafter, max_new_tokens)
    inputs = PageInputs(record["prompt"], settings, chat=target.use_chat_template,
                        measure_ar=True)
    baseline_rss = rss_bytes()
    updates, final = 0, None
    with StepRecorder() as recorder:
        started = time.perf_counter()
        for update in handlers.run(context, inputs):
            for figure in (update.plots or {}).values():
                figure.to_plotly_json()          # what Gradio does to send a figure
            updates += 1
            final = update
        wall = time.perf_counter() - started
    session = final.session
    if session is None:
        raise RuntimeError(f"{record['id']}: the run did not finish ({final.status})")
    runs = {"ar": session.ar} | dict(session.runs)
    methods = {}
    for method, run in runs.items():
        if run is None or run.error:
            methods[method] = {"error": run.error if run else "not run"}
            continue
        records = step_records(method, run.events, recorder.calls)
        output = run.result.token_ids if run.result else []
        first_eos = next((index for index, token in enumerate(output) if token in eos_ids), None)
        methods[method] = {"marks": at_marks(records), "profile": profile(records), "steps": records,
                           "new_tokens": len(output), "busy_s": run.busy_seconds, "first_eos": first_eos}
    add_speedups(methods)
    render = wall - recorder.model_seconds
    return {"id": record["id"], "category": record.get("category"), "prompt_tokens": len(session.prompt_ids),
            "prompt_note": session.prompt_note, "wall_s": wall, "model_s": recorder.model_seconds,
            "render_s": render, "render_overhead": render / recorder.model_seconds, "updates": updates,
            "baseline_rss_mb": baseline_rss / 2**20, "peak_rss_mb": recorder.peak_rss / 2**20,
            "methods": methods}


# ---------------------------------------------------------------- report

def size_of(run: dict) -> str:
    return run.get("category") or "prompts"


def mean_or_none(values):
    values = [value for value in values if value is not None]
    return statistics.fmean(values) if values else None


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def report_markdown(report: dict) -> str:
    runs = report["runs"]
    settings = report["settings"]
    lines = [f"# Long answers and long prompts: {report['started']}", "",
             f"Pair: {report['machine'].get('pair')}; torch threads {report['machine'].get('threads')}; "
             f"{len(runs)} prompts from `{settings['prompts']}`, up to {settings['max_new_tokens']} new tokens, "
             f"the page's Run handler with the app's defaults ({json.dumps(settings['decode'])}); "
             f"end-of-text {'ignored' if settings['ignore_eos'] else 'honoured'}. Load average at start "
             f"{report['machine'].get('load_start')}, at end {report['machine'].get('load_end')}.", "",
             "## Speed at 64, 256 and 512 new tokens (mean over the prompts of each size)", "",
             "Tokens/s of each method's own steps up to the mark; speedup = that ÷ AR's at the same mark, same run.",
             "", "| prompt | prompt tokens | method | " + " | ".join(f"tok/s @{m} | ×AR @{m}" for m in MARKS) + " |",
             "|---|---|---|" + "---|---|" * len(MARKS)]
    sizes = sorted({size_of(run) for run in runs}, key=lambda name: min(r["prompt_tokens"] for r in runs
                                                                       if size_of(r) == name))
    for size in sizes:
        chosen = [run for run in runs if size_of(run) == size]
        tokens = "/".join(str(run["prompt_tokens"]) for run in chosen)
        for method in method_table.method_keys():
            cells = []
            for mark in MARKS:
                speeds = [run["methods"].get(method, {}).get("marks", {}).get(str(mark), {}) for run in chosen]
                cells += [fmt(mean_or_none(s.get("tokens_per_s") for s in speeds)),
                          fmt(mean_or_none(s.get("speedup_vs_ar") for s in speeds), 2, "×")]
            lines.append(f"| {size} | {tokens} | {method_table.short_label_of(method)} | " + " | ".join(cells) + " |")
    lines += ["", "## The same without the first step (decoding only)", "",
              "The first step also runs the prompt through the target (and, for the speculative methods, the "
              "drafter): first step seconds, then tokens/s and speedup over AR of the steps after it.", "",
              "| prompt | method | first step s | " + " | ".join(f"tok/s @{m} | ×AR @{m}" for m in MARKS) + " |",
              "|---|---|---|" + "---|---|" * len(MARKS)]
    for size in sizes:
        chosen = [run for run in runs if size_of(run) == size]
        for method in method_table.method_keys():
            rows = [run["methods"].get(method, {}).get("marks", {}) for run in chosen]
            first = mean_or_none(row.get(str(MARKS[0]), {}).get("first_step_s") for row in rows)
            cells = []
            for mark in MARKS:
                cells += [fmt(mean_or_none(row.get(str(mark), {}).get("decode_tokens_per_s") for row in rows)),
                          fmt(mean_or_none(row.get(str(mark), {}).get("decode_speedup_vs_ar") for row in rows), 2, "×")]
            label = method_table.short_label_of(method)
            lines.append(f"| {size} | {label} | {fmt(first)} | " + " | ".join(cells) + " |")
    lines += ["", "## Time per step by output position (ms per step: draft / verify / other; tokens per step)", "",
              "Steps grouped by where the output stood when they started; mean over the prompts of each size.", "",
              "| prompt | method | " + " | ".join(f"{low}–{high}" for low, high in BINS) + " |",
              "|---|---|" + "---|" * len(BINS)]
    for size in sizes:
        chosen = [run for run in runs if size_of(run) == size]
        for method in method_table.method_keys():
            cells = []
            for low, high in BINS:
                parts = [run["methods"].get(method, {}).get("profile", {}).get(f"{low}-{high}") for run in chosen]
                parts = [part for part in parts if part]
                if not parts:
                    cells.append("–")
                    continue
                cells.append(" / ".join(fmt(statistics.fmean(p[key] for p in parts), 0)
                                        for key in ("draft_ms", "verify_ms", "other_ms"))
                             + f"; {statistics.fmean(p['tokens_per_step'] for p in parts):.2f}")
            lines.append(f"| {size} | {method_table.short_label_of(method)} | " + " | ".join(cells) + " |")
    lines += ["", "## Each run: the page and memory", "",
              "render = the Run handler's wall time outside model work (decoding, oracle, likelihoods); overhead = "
              "render ÷ model work. RSS: the process before the run (models loaded) and its peak during it "
              "(all four methods' caches at once). first EOS: where each output's first end-of-text token came "
              "(AR / fixed / PACER / SMC-SD; – none).", "",
              "| prompt | tokens | wall s | model s | render s | overhead | updates | RSS before → peak MB | "
              "first EOS |", "|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        eos = " / ".join(str(run["methods"].get(m, {}).get("first_eos", "–") if run["methods"].get(m, {})
                             .get("first_eos") is not None else "–") for m in method_table.method_keys())
        lines.append(f"| {run['id']} | {run['prompt_tokens']} | {run['wall_s']:.1f} | {run['model_s']:.1f} | "
                     f"{run['render_s']:.2f} | {100 * run['render_overhead']:.1f}% | {run['updates']} | "
                     f"{run['baseline_rss_mb']:.0f} → {run['peak_rss_mb']:.0f} | {eos} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- figure (SVG, no plotting library needed)

DASHES = {0: "", 1: "6 4", 2: "2 3"}


def nice_step(rough: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``rough``."""
    power = 10 ** math.floor(math.log10(rough)) if rough > 0 else 1.0
    return next(factor * power for factor in (1, 2, 5, 10) if factor * power >= rough)


def svg_panel(x0: float, y0: float, width: float, height: float, title: str, xs: list, series: list,
              y_range: tuple[float, float], y_label: str, reference: float | None = None) -> list[str]:
    """One line chart: ``series`` = [(label, colour, dash, [y or None per x])]; x at even spacing."""
    low, high = y_range
    out = [f'<text x="{x0 + width / 2}" y="{y0 - 10}" text-anchor="middle" font-size="14">{title}</text>',
           f'<rect x="{x0}" y="{y0}" width="{width}" height="{height}" fill="none" stroke="#999"/>']

    def px(index):
        return x0 + width * (0.08 + 0.84 * index / max(len(xs) - 1, 1))

    def py(value):
        return y0 + height * (1 - (value - low) / (high - low))

    step = nice_step((high - low) / 5)
    for tick in range(int(low // step), int(high // step) + 1):
        value = tick * step
        if not low <= value <= high:
            continue
        out.append(f'<line x1="{x0}" x2="{x0 + width}" y1="{py(value):.1f}" y2="{py(value):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{py(value) + 4:.1f}" text-anchor="end" font-size="11">{value:g}</text>')
    for index, x in enumerate(xs):
        out.append(f'<text x="{px(index):.1f}" y="{y0 + height + 16}" text-anchor="middle" font-size="11">{x}</text>')
    out.append(f'<text x="{x0 + width / 2}" y="{y0 + height + 34}" text-anchor="middle" font-size="12">'
               "new tokens</text>")
    out.append(f'<text x="{x0 - 42}" y="{y0 + height / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 {x0 - 42} {y0 + height / 2})">{y_label}</text>')
    if reference is not None:
        out.append(f'<line x1="{x0}" x2="{x0 + width}" y1="{py(reference):.1f}" y2="{py(reference):.1f}" '
                   'stroke="#000" stroke-dasharray="4 3"/>')
    for label, colour, dash, values in series:
        points = [(px(i), py(v)) for i, v in enumerate(values) if v is not None]
        if not points:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2" '
                   f'stroke-dasharray="{dash}"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points]
    return out


def figure_svg(report: dict, overhead: dict | None) -> str:
    """Left: speedup over AR against new tokens, a line per method and prompt size (solid ~50, dashed ~500,
    dotted ~1,500 tokens). Right: the page's render overhead against new tokens (before and after)."""
    runs = report["runs"]
    sizes = sorted({size_of(run) for run in runs}, key=lambda name: min(r["prompt_tokens"] for r in runs
                                                                       if size_of(r) == name))
    series, values = [], []
    for size_index, size in enumerate(sizes):
        chosen = [run for run in runs if size_of(run) == size]
        for method in method_table.column_keys():
            ys = [mean_or_none(run["methods"].get(method, {}).get("marks", {}).get(str(mark), {})
                               .get("speedup_vs_ar") for run in chosen) for mark in MARKS]
            series.append((f"{method_table.short_label_of(method)}, {size}", method_table.colour_of(method),
                           DASHES.get(size_index, ""), ys))
            values += [y for y in ys if y is not None]
    high = max(values + [1.2]) * 1.1
    low = min(values + [0.8]) * 0.9
    width, height = 380, 260
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="960" height="440" font-family="sans-serif">',
             '<rect width="960" height="440" fill="white"/>']
    parts += svg_panel(70, 40, width, height, "Speedup over AR (same run)", list(MARKS), series, (low, high),
                       "× AR", reference=1.0)
    legend_y = 385
    for index, (label, colour, dash, _) in enumerate(series):
        x, y = 20 + (index % 3) * 155, legend_y + (index // 3) * 16 - 20
        parts.append(f'<line x1="{x}" x2="{x + 22}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2" '
                     f'stroke-dasharray="{dash}"/><text x="{x + 26}" y="{y + 4}" font-size="10">{label}</text>')
    if overhead:
        lengths = sorted(overhead, key=int)
        over_series = [(name, colour, dash, [100 * overhead[length].get(key) if overhead[length].get(key)
                                             is not None else None for length in lengths])
                       for name, key, colour, dash in (("before (old page, replayed)", "before", "#D55E00", "6 4"),
                                                       ("after (measured)", "after", "#009E73", ""))]
        peak = max([v for _, _, _, ys in over_series for v in ys if v is not None] + [6.0]) * 1.15
        parts += svg_panel(560, 40, width, height, "Page render overhead (% of decoding)", lengths, over_series,
                           (0.0, peak), "%", reference=5.0)
        for index, (label, colour, dash, _) in enumerate(over_series):
            x, y = 580 + index * 190, legend_y - 20
            parts.append(f'<line x1="{x}" x2="{x + 22}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2" '
                         f'stroke-dasharray="{dash}"/><text x="{x + 26}" y="{y + 4}" font-size="11">{label}</text>')
        parts.append(f'<text x="580" y="{legend_y}" font-size="10">dashed black: the 5% target</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def load_overheads(folder: Path) -> dict:
    """{new tokens: {"before": fraction, "after": fraction}} from ui-overhead-*.json in ``folder``."""
    out = {}
    for path in sorted(folder.glob("ui-overhead-*.json")):
        data = json.loads(path.read_text())
        tokens = str(data["settings"]["max_new_tokens"])
        kind = "before" if path.stem.endswith("-before") else "after"
        out.setdefault(tokens, {})[kind] = data.get("render_overhead")
    return out


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default="assets/prompts/long.jsonl")
    parser.add_argument("--only", default="", help="comma-separated prompt ids (default: all)")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--stop-at-eos", action="store_true", help="honour end-of-text (default: ignore it)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--out", default="benchmarks/results/long-scaling")
    parser.add_argument("--plot", metavar="FOLDER", help="only rebuild report.md and scaling.svg from FOLDER")
    parser.add_argument("--figure", default=None, help="also write the figure here (e.g. docs/long-scaling.svg)")
    args = parser.parse_args(argv)
    if args.plot:
        folder = Path(args.plot)
        report = json.loads((folder / "results.json").read_text())
        write_outputs(folder, report, args.figure)
        return 0

    import os

    import torch

    from pacer_core import load_target
    from pacer_core.preverifier import default_preverifier
    from pacer_core.prompts import load_prompts
    from pacer_core.settings import Limits
    from pacer_core.ui.handlers import AppContext

    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = load_prompts(args.prompts)
    if args.only:
        wanted = set(args.only.split(","))
        prompts = [record for record in prompts if record["id"] in wanted]
    target, drafters = load_target("embedded", "embedded")
    eos_ids = set(target.eos_token_ids)
    preverifier = default_preverifier(target, drafters.default)
    run_pair = target if args.stop_at_eos else without_stops(target)
    limits = Limits.from_env()
    context = AppContext(run_pair, drafters.default, preverifier, getattr(preverifier, "kind", "heuristic"), limits)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = os.getloadavg()[0]
    warm_up(context)
    runs = []
    for record in prompts:
        print(f"{record['id']} …", file=sys.stderr, flush=True)
        runs.append(run_prompt(context, record, args.max_new_tokens, eos_ids))
        print(f"  {runs[-1]['wall_s']:.0f} s, overhead {100 * runs[-1]['render_overhead']:.1f}%", file=sys.stderr)
    report = {"started": started,
              "machine": {"pair": target.describe(drafters.default), "threads": torch.get_num_threads(), "load_start": round(load_start, 2),
                          "load_end": round(os.getloadavg()[0], 2), "torch": torch.__version__},
              "settings": {"prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
                           "ignore_eos": not args.stop_at_eos, "decode": app_settings(target, drafters.default, args.max_new_tokens),
                           "limits": dataclasses.asdict(limits)},
              "runs": runs}
    write_outputs(Path(args.out), report, args.figure)
    print((Path(args.out) / "report.md").read_text())
    return 0


def warm_up(context) -> None:
    """One short run through the handler first (loads what is built lazily, warms the kernels)."""
    from pacer_core.ui import handlers
    from pacer_core.ui.handlers import PageInputs

    inputs = PageInputs("Say hello.", app_settings(context.target, context.drafter, 8), chat=context.target.use_chat_template,
                        measure_ar=True)
    for _ in handlers.run(context, inputs):
        pass


def write_outputs(folder: Path, report: dict, figure: str | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(report, indent=1))
    (folder / "report.md").write_text(report_markdown(report))
    svg = figure_svg(report, load_overheads(folder))
    (folder / "scaling.svg").write_text(svg)
    if figure:
        Path(figure).write_text(svg)


if __name__ == "__main__":
    sys.exit(main())
