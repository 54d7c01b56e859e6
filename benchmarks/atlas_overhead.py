"""What the atlas costs on top of decoding: the same prompts decoded with the same method, once plainly
(``runner.decode``: ``api.run_request`` drained to its Result, what the bench times) and once through the
atlas (``runner.run_prompt``: the same decode plus keeping the judged tokens), interleaved prompt by prompt
(the order flips every prompt), then the atlas's aggregation and its three files once per repeat.

Three figures, from the least to the most robust on a shared machine:

* ``wall_overhead``: the atlas's total wall time (its prompts + aggregation + files) over the plain total;
* ``paired_overhead``: the median over prompts of atlas time ÷ plain time for the same prompt, minus 1;
* ``bookkeeping_overhead``: the atlas's own work timed where it happens (``prompt_record``, ``build_atlas``,
  ``write_atlas``) ÷ the plain decoding time. It does not depend on the load at the time.

The tab also redraws its figures and tables while it runs (at most every ``RENDER_INTERVAL_S``): ``render_s``
is one redraw of the finished atlas, so ``render_s / RENDER_INTERVAL_S`` bounds that share.

    python benchmarks/atlas_overhead.py --threads 1 --max-new-tokens 32 --repeats 3 \\
        --out benchmarks/results/atlas-overhead
"""
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pacer_core.atlas import runner  # noqa: E402
from pacer_core.atlas.cli import BUILT_IN_PROMPTS, named_drafter  # noqa: E402
from pacer_core.atlas.report import build_atlas, write_atlas  # noqa: E402
from pacer_core.models import load_target  # noqa: E402
from pacer_core.settings import Limits  # noqa: E402


class Stopwatch:
    """Total seconds spent inside a wrapped function."""

    def __init__(self, function):
        self.function, self.seconds = function, 0.0

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started


def timed(function, *args):
    started = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - started


def render_seconds(atlas: dict) -> float:
    """One redraw of the tab: every figure, table and the summary from the atlas."""
    from pacer_core.ui import atlas_view
    from pacer_core.ui.atlas_tab import FIGURES, TABLES

    started = time.perf_counter()
    for figure in FIGURES.values():
        figure(atlas).to_plotly_json()
    for _, frame in TABLES.values():
        frame(atlas)
    atlas_view.summary_html(atlas)
    return time.perf_counter() - started


def one_repeat(lane, prompts, repeat: int, bookkeeping: Stopwatch) -> dict:
    plain, atlas, runs = [], [], []
    for index, prompt in enumerate(prompts):
        request = lane.requests[index]
        for first in ((True, False) if (index + repeat) % 2 == 0 else (False, True)):
            if first:
                (_, result), seconds = timed(runner.decode, lane.target, request)
                plain.append((seconds, result.token_ids))
            else:
                run, seconds = timed(runner.run_prompt, index, prompt, [lane], False)
                atlas.append((seconds, run.records[lane.drafter].token_ids))
                runs.append(run)
    before = bookkeeping.seconds
    started = time.perf_counter()
    built = build_atlas("pacer", [lane.drafter], lane.requests[0].settings, prompts, runs)
    write_atlas(Path(tempfile.mkdtemp(prefix="atlas-overhead-")), built)
    finishing = time.perf_counter() - started
    assert all(p[1] == a[1] for p, a in zip(plain, atlas)), "the atlas decoded different tokens"
    plain_total, atlas_total = sum(s for s, _ in plain), sum(s for s, _ in atlas) + finishing
    return {"plain_s": plain_total, "atlas_s": atlas_total, "finishing_s": finishing,
            "record_s": before, "paired_ratios": [a[0] / p[0] for p, a in zip(plain, atlas)],
            "tokens": sum(len(ids) for _, ids in plain), "atlas": built}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default=str(BUILT_IN_PROMPTS))
    parser.add_argument("--method", default="pacer")
    parser.add_argument("--drafter", default="small")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/atlas-overhead")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target, drafters = load_target()
    prompts = runner.load_atlas_prompts(args.prompts)
    drafter, preverifier = named_drafter(target, drafters, args.drafter)
    lane = runner.atlas_lane(target, drafter, preverifier, args.drafter, args.method,
                             {"temperature": 0.0, "seed": 0, "max_new_tokens": args.max_new_tokens}, prompts, Limits())
    runner.decode(lane.target, lane.requests[0])                      # warm-up
    bookkeeping = Stopwatch(runner.prompt_record)
    runner.prompt_record = bookkeeping
    repeats = []
    for repeat in range(args.repeats):
        bookkeeping.seconds = 0.0
        result = one_repeat(lane, prompts, repeat, bookkeeping)
        result["record_s"] = bookkeeping.seconds
        repeats.append(result)
        print(f"repeat {repeat}: plain {result['plain_s']:.2f} s, atlas {result['atlas_s']:.2f} s", file=sys.stderr)
    final = repeats[-1].pop("atlas")
    for result in repeats[:-1]:
        result.pop("atlas")
    report = summarise(args, target, drafter, repeats, render_seconds(final))
    report["alpha"], report["drafted"], report["accepted"] = final["alpha"], final["drafted"], final["accepted"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(markdown(report))
    print((out / "report.md").read_text())
    return 0


def summarise(args, target, drafter, repeats: list[dict], render_s: float) -> dict:
    from pacer_core.ui.atlas_session import RENDER_INTERVAL_S

    plain, atlas = [r["plain_s"] for r in repeats], [r["atlas_s"] for r in repeats]
    bookkeeping = [(r["record_s"] + r["finishing_s"]) / r["plain_s"] for r in repeats]
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "pair": target.describe(drafter), "threads": torch.get_num_threads(),
            "prompts": args.prompts, "method": args.method, "drafter": args.drafter, "temperature": 0.0,
            "max_new_tokens": args.max_new_tokens, "repeats": repeats,
            "plain_s_median": statistics.median(plain), "atlas_s_median": statistics.median(atlas),
            "wall_overhead": statistics.median(a / p - 1 for a, p in zip(atlas, plain)),
            "paired_overhead": statistics.median(ratio for r in repeats for ratio in r["paired_ratios"]) - 1,
            "bookkeeping_overhead": statistics.median(bookkeeping),
            "render_s": render_s, "render_interval_s": RENDER_INTERVAL_S,
            "render_share_bound": render_s / RENDER_INTERVAL_S}


def markdown(report: dict) -> str:
    rows = [f"| {i} | {r['plain_s']:.2f} | {r['atlas_s']:.2f} | {r['atlas_s'] / r['plain_s'] - 1:+.1%} | "
            f"{r['record_s'] * 1000:.0f} | {r['finishing_s'] * 1000:.0f} | {r['tokens']} |"
            for i, r in enumerate(report["repeats"])]
    return "\n".join([
        f"# Atlas overhead, {report['date']}", "",
        f"{report['method']} drafted by {report['drafter']} on {report['pair']['target']} ({report['pair']['device']}, "
        f"{report['threads']} thread), greedy, {report['max_new_tokens']} new tokens, the "
        f"{len(report['repeats'][0]['paired_ratios'])} prompts of `{Path(report['prompts']).name}`; plain and atlas "
        f"interleaved prompt by prompt (order flipped every prompt), {len(report['repeats'])} repeats. Both decoded "
        f"the same tokens. α = {report['alpha']:.3f} ({report['accepted']} / {report['drafted']}).", "",
        "| repeat | plain s | atlas s | wall overhead | keeping judged tokens ms | aggregation + files ms | tokens |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"- wall overhead (median over repeats): {report['wall_overhead']:+.2%}",
        f"- paired overhead (median over prompt pairs): {report['paired_overhead']:+.2%}",
        f"- the atlas's own work ÷ plain decoding (median): {report['bookkeeping_overhead']:.3%}",
        f"- the tab's redraw of every figure and table: {report['render_s'] * 1000:.0f} ms, at most once per "
        f"{report['render_interval_s']:.0f} s while it runs (≤ {report['render_share_bound']:.1%}), "
        "and once at the end",
        "", "Command: `python benchmarks/atlas_overhead.py --threads 1 --max-new-tokens "
        f"{report['max_new_tokens']} --repeats {len(report['repeats'])} --out benchmarks/results/atlas-overhead`.", ""])


if __name__ == "__main__":
    sys.exit(main())
