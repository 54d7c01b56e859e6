"""The atlas command: where a drafter's guesses are accepted and where they are not, over a prompt set.

    python -m pacer_core.atlas --prompts assets/prompts/atlas.jsonl --method pacer --drafter small \\
        [--temperature 0 --seed 0 --max-new-tokens 64] [--compare self-int8] [--ar] --out DIR

writes DIR/atlas.json, DIR/atlas.csv and DIR/report.md (``report``). The decoding is the engine's own
(``api.run_request``, as the bench and the page run it); the atlas only reads its step events."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ..drafters import load_drafter
from ..models import ModelLoadError, load_target
from ..settings import Limits, SettingsError
from .report import build_atlas, write_atlas
from .runner import atlas_lane, load_atlas_prompts, run_prompts

BUILT_IN_PROMPTS = Path(__file__).resolve().parent.parent.parent / "assets" / "prompts" / "atlas.jsonl"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pacer_core.atlas", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default=str(BUILT_IN_PROMPTS),
                        help="JSONL with prompt and optional category, id (default: the built-in categorised set)")
    parser.add_argument("--method", default="pacer", help="fixed[:G] or pacer[:B:L[:T]], optionally +NAME=VALUE")
    parser.add_argument("--drafter", default="small", help="the drafter's name (small, head, self-int8, …)")
    parser.add_argument("--compare", default=None, help="a second drafter, run on the same prompts")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--limit", type=int, default=0, help="use only the first N prompts (0 = all)")
    parser.add_argument("--ar", action="store_true", help="also decode each prompt with AR, for the speedup")
    parser.add_argument("--out", required=True)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--draft", default="embedded")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    return parser


def named_drafter(target, drafters, name: str):
    """(the drafter ``name`` for the pair, built from what was loaded beside it; that drafter's PACER
    pre-verifier)."""
    from ..preverifier import default_preverifier

    try:
        drafter = load_drafter(target, drafters, name)
    except ValueError as bad:
        raise SettingsError(str(bad)) from None
    return drafter, default_preverifier(target, drafter)


def run_atlas(target, drafters, args, progress=None) -> dict:
    """The atlas dictionary for parsed arguments on a loaded pair (``progress(done, total)`` after each prompt)."""
    prompts = load_atlas_prompts(args.prompts)[: args.limit or None]
    limits = Limits.from_env()
    raw = {"temperature": args.temperature, "seed": args.seed, "max_new_tokens": args.max_new_tokens}
    names = [args.drafter] + ([args.compare] if args.compare else [])
    if len(set(names)) < len(names):
        raise SettingsError("--compare needs a drafter other than --drafter.")
    lanes = [atlas_lane(target, *named_drafter(target, drafters, name), name, args.method, raw, prompts, limits)
             for name in names]
    runs = []
    for run in run_prompts(prompts, lanes, args.ar):
        runs.append(run)
        if progress is not None:
            progress(len(runs), len(prompts))
    return build_atlas(args.method, names, lanes[0].requests[0].settings, prompts, runs)


def bar_progress(bar):
    """A ``progress(done, total)`` that moves a tqdm bar."""
    def advance(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)
    return advance


def main(argv=None, target=None, drafters=None) -> int:
    """The command; ``target`` and ``drafters``: an already loaded target and what was loaded beside it (tests), else the
    ones --target/--draft name."""
    from tqdm import tqdm

    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if target is None:
            target, drafters = load_target(args.target, args.draft, device=args.device, dtype=args.dtype)
        with tqdm(desc="atlas", unit="prompt", file=sys.stderr) as bar:
            atlas = run_atlas(target, drafters, args, bar_progress(bar))
    except (SettingsError, ModelLoadError, FileNotFoundError) as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    out = write_atlas(args.out, atlas)
    print(f"α = {atlas['alpha']:.3f} over {atlas['drafted']} drafted tokens, {atlas['prompts']} prompts; "
          f"wrote {out / 'atlas.json'}, {out / 'atlas.csv'}, {out / 'report.md'}" if atlas["alpha"] is not None
          else f"nothing drafted; wrote {out}")
    return 0
