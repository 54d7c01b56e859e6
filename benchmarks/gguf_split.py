"""Where a step's time goes with the gguf drafter: per drafted token, the time inside llama.cpp's decode and
the rest of drafting (logit copy, softmax, sampling, pre-verifier features, bookkeeping); per verify pass, the
time inside the target's forward and the rest (acceptance loop, residual, commit, the step event). The target's
forward time counts only inside a verify pass: the prompt is run through the target when a run is set up, before
its first step, and that prefill is reported apart (``prefill_forward_ms``, per run).

    python benchmarks/gguf_split.py --methods fixed:8,pacer --prompts assets/prompts/validation.jsonl --limit 4 \\
        --temperature 0.7 --out benchmarks/results/gguf-split/after-t0.7.json

It times the two engines by wrapping ``GGUFCache._decode_once`` (the drafter's llama.cpp calls, and the target's
when llama.cpp runs it: llama/target.py) and ``CachedModel._run`` (the target's model call in torch), runs each
method on the prompts through ``run_request`` (the app's path), and divides."""
from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pacer_core.api import run_request  # noqa: E402
from pacer_core.decoders.base import SpeculativeDecoder  # noqa: E402
from pacer_core.drafters import measured_settings  # noqa: E402
from pacer_core.llama.cache import GGUFCache  # noqa: E402
from pacer_core.llama.target import LlamaTargetCache  # noqa: E402
from pacer_core.kvcache import CachedModel  # noqa: E402
from pacer_core.methods import parse_method  # noqa: E402
from pacer_core.models import load_target  # noqa: E402
from pacer_core.prompts import load_prompts  # noqa: E402
from pacer_core.request import encode_prompt, request_for  # noqa: E402
from pacer_core.settings import Limits, validate_settings  # noqa: E402


@contextmanager
def timed(owner, name: str, totals: dict, key: str):
    """Add the seconds spent in ``owner.name`` to ``totals[key]`` while inside the block; a llama.cpp call made for
    the target (``LlamaTargetCache``, the llama.cpp target engine) counts as the target's forward."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            counted = "target_forward" if args and isinstance(args[0], LlamaTargetCache) else key
            if counted == "target_forward" and not totals["inside_verify"]:
                counted = "prefill_forward"
            totals[counted] += time.perf_counter() - started
    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextmanager
def marked_verify(totals: dict):
    """``totals["inside_verify"]`` is 1 while a decoder's verify pass runs (``SpeculativeDecoder.verify``)."""
    original = SpeculativeDecoder.verify

    def wrapper(*args, **kwargs):
        totals["inside_verify"] += 1
        try:
            return original(*args, **kwargs)
        finally:
            totals["inside_verify"] -= 1
    SpeculativeDecoder.verify = wrapper
    try:
        yield
    finally:
        SpeculativeDecoder.verify = original


def split_one(target, drafter, spec_text: str, prompts: list, settings_text: dict, limits) -> dict:
    """Run one method over the prompts; the per-token and per-verify split in milliseconds."""
    spec = parse_method(spec_text)
    totals = {"llama_cpp": 0.0, "target_forward": 0.0, "prefill_forward": 0.0, "inside_verify": 0}
    draft_s = verify_s = 0.0
    drafted = verifies = tokens = 0
    with timed(GGUFCache, "_decode_once", totals, "llama_cpp"), timed(CachedModel, "_run", totals, "target_forward"), \
            marked_verify(totals):
        for prompt_ids in prompts:
            raw = measured_settings(target, drafter, "gguf", spec.kind) | settings_text | spec.overrides
            request = request_for(target, drafter, spec.kind, validate_settings(limits, **raw), frozenset(raw),
                                  prompt_ids, limits)
            *events, result = list(run_request(target, request))
            draft_s += sum(event.draft_seconds for event in events)
            verify_s += sum(event.verify_seconds for event in events)
            drafted += sum(len(event.tokens) - 1 for event in events)
            verifies += result.metrics.target_calls
            tokens += result.metrics.new_tokens
    return {"method": spec_text, "drafted_tokens": drafted, "verify_passes": verifies, "new_tokens": tokens,
            "per_drafted_token_ms": {"llama_cpp": 1000 * totals["llama_cpp"] / max(drafted, 1),
                                     "rest": 1000 * (draft_s - totals["llama_cpp"]) / max(drafted, 1)},
            "per_verify_ms": {"target_forward": 1000 * totals["target_forward"] / max(verifies, 1),
                              "rest": 1000 * (verify_s - totals["target_forward"]) / max(verifies, 1)},
            "prefill_forward_ms": 1000 * totals["prefill_forward"] / max(len(prompts), 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="fixed:8,pacer")
    parser.add_argument("--prompts", default="assets/prompts/validation.jsonl")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--out", default="")
    parser.add_argument("--target-engine", default=None, dest="target_engine", help="auto, torch or llama.cpp")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    limits = Limits.from_env()
    target, drafters = load_target(draft="gguf", target_engine=args.target_engine)
    drafter = drafters.default
    records = load_prompts(args.prompts)[: args.limit or None]
    prompts = [encode_prompt(target, record["prompt"], None, limits) for record in records]
    settings = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature}
    rows = []
    split_one(target, drafter, args.methods.split(",")[0], prompts[:1], settings, limits)       # warm-up
    for method in args.methods.split(","):
        rows.append(split_one(target, drafter, method, prompts, settings, limits))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"temperature": args.temperature, "prompts": args.prompts,
                                              "target_engine": target.describe(drafter)["target_engine"],
                                              "limit": args.limit, "threads": torch.get_num_threads(),
                                              "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
