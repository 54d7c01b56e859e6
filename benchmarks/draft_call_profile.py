"""Where a gguf draft call's time goes inside a run, against the same call alone, by prompt length.

    python benchmarks/draft_call_profile.py --lengths 40,150,300,600 --out benchmarks/results/draft-call-profile

For each length, the prompt nearest to it (assets/prompts/code.jsonl; the shortest from heldout.jsonl) runs
greedy, 64 new tokens, with EOS ignored: AR, then fixed SD with the gguf drafter (the target on the pair's default
engine). Every llama_decode of either cache is timed (the decode itself and the copy of its logits out), with the
tokens it fed, so a draft call splits into: the draft's first feed (its prefill of the prompt, or one token where
it adopts the target's prompt: drafters/gguf_drafter.py), one-token draft steps, catch-up feeds after a verify (two
tokens), and the Python and torch work between decodes. After each run the
same draft context at the same length times a one-token step alone (rolled back after each), interleaved with
the target's one-token step alone: "alone" is that median. Repeats interleave the lengths; medians throughout."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.llamacpp_peer import without_eos  # noqa: E402
from pacer_core.drafters import new_caches  # noqa: E402
from pacer_core.llama.cache import GGUFCache  # noqa: E402
from pacer_core.llama.engine import target_cache  # noqa: E402
from pacer_core.models import load_target  # noqa: E402
from pacer_core.prompts import load_prompts  # noqa: E402


class DecodeLog:
    """Every llama_decode of a GGUFCache while installed: (role, tokens fed, decode s, copy s, start, end)."""

    def __init__(self, drafter):
        self.drafter, self.calls = drafter, []
        self.original = GGUFCache._decode_once

    def __enter__(self):
        log = self

        def timed(cache, entries):
            started = time.perf_counter()
            logits = log.original(cache, entries)
            ended = time.perf_counter()
            role = "draft" if cache.owner is log.drafter else "target"
            log.calls.append((role, len(entries), ended - started, started, ended))
            return logits
        GGUFCache._decode_once = timed
        return self

    def __exit__(self, *exc):
        GGUFCache._decode_once = self.original


def nearest_prompts(lengths: list[int], target) -> dict[int, dict]:
    pool = load_prompts(str(ROOT / "assets/prompts/code.jsonl")) + load_prompts(str(ROOT / "assets/prompts/heldout.jsonl"))
    measured = [(len(target.encode_prompt(prompt["prompt"])), prompt) for prompt in pool]
    return {length: min(measured, key=lambda item: abs(item[0] - length))[1] for length in lengths}


def run_method(target, drafter, method: str, prompt_ids: list[int], tokens: int, gamma: int) -> tuple[float, list[int]]:
    from pacer_core.decoders import Autoregressive, FixedSpeculative
    from pacer_core.settings import DecodeSettings

    decoder = Autoregressive() if method == "ar" else FixedSpeculative(gamma)
    started = time.perf_counter()
    *_, result = decoder.run(target, drafter, list(prompt_ids), DecodeSettings(max_new_tokens=tokens, temperature=0.0, seed=0))
    return time.perf_counter() - started, list(result.token_ids)


def one_token_alone(cache, length: int, token_id: int, repeats: int) -> list[float]:
    """Seconds of a one-token feed (one logits row) after ``length`` cached tokens, rolled back after each."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        cache.forward([token_id], keep=1)
        samples.append(time.perf_counter() - started)
        cache.crop(length)
    return samples


def split_calls(calls: list[tuple]) -> dict:
    """Draft decodes by kind (first feed, one-token step, catch-up feed) and target decodes, in seconds; plus the time
    between the end of a draft decode and the start of the next decode (Python and torch work)."""
    kinds = defaultdict(list)
    first_draft = True
    for index, (role, fed, seconds, started, ended) in enumerate(calls):
        if role == "draft":
            kind = "draft first feed" if first_draft else ("draft step" if fed == 1 else f"draft feed {min(fed, 3)}+"
                                                         if fed >= 3 else "draft catch-up (2)")
            first_draft = False
            kinds[kind].append(seconds)
            if index + 1 < len(calls):
                kinds["after a draft decode"].append(calls[index + 1][3] - ended)
        else:
            kinds["target " + ("prefill" if fed > 8 else "verify/step")].append(seconds)
    return kinds


def milliseconds(values: list[float]) -> dict:
    return {"calls": len(values), "median_ms": round(1000 * statistics.median(values), 2) if values else None,
            "total_s": round(sum(values), 3)}


def profile_length(target, drafter, prompt, tokens: int, gamma: int, alone_repeats: int) -> dict:
    prompt_ids = target.encode_prompt(prompt["prompt"])
    with DecodeLog(drafter) as ar_log:
        ar_seconds, ar_ids = run_method(target, drafter, "ar", prompt_ids, tokens, gamma)
    with DecodeLog(drafter) as log:
        sd_seconds, sd_ids = run_method(target, drafter, "fixed", prompt_ids, tokens, gamma)
    kinds = split_calls(log.calls)
    target_cache, draft = new_caches(target, drafter)
    context_ids = list(prompt_ids) + ar_ids
    draft.forward(context_ids, keep=1)
    target_cache.forward(context_ids, keep=1)
    draft_alone, target_alone = [], []
    for _ in range(alone_repeats):          # interleaved, as in a run
        draft_alone += one_token_alone(draft, len(context_ids), ar_ids[-1], 1)
        target_alone += one_token_alone(target_cache, len(context_ids), ar_ids[-1], 1)
    report = {"prompt": prompt["id"], "prompt_tokens": len(prompt_ids), "ar_seconds": round(ar_seconds, 3),
              "fixed_seconds": round(sd_seconds, 3), "speedup": round(ar_seconds / sd_seconds, 3),
              "identical": sd_ids == ar_ids,
              "ar target steps": milliseconds([seconds for role, fed, seconds, *_ in ar_log.calls if fed <= 8]),
              "ar target prefill": milliseconds([seconds for role, fed, seconds, *_ in ar_log.calls if fed > 8]),
              "draft step alone": milliseconds(draft_alone), "target step alone": milliseconds(target_alone)}
    report |= {kind: milliseconds(values) for kind, values in sorted(kinds.items())}
    step = report.get("draft step", {}).get("median_ms")
    report["draft step in run / alone"] = round(step / report["draft step alone"]["median_ms"], 3) if step else None
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="40,150,300,600")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--alone-repeats", type=int, default=25)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    target, drafters = load_target("embedded", "gguf", device="cpu", dtype="float32")
    target, drafter = without_eos(target), drafters.default
    lengths = [int(text) for text in args.lengths.split(",")]
    prompts = nearest_prompts(lengths, target)
    rounds = []
    for repeat in range(args.repeats):
        for length in lengths:
            report = profile_length(target, drafter, prompts[length], args.tokens, args.gamma, args.alone_repeats)
            report |= {"length": length, "repeat": repeat}
            rounds.append(report)
            print(json.dumps({key: report[key] for key in ("length", "prompt_tokens", "speedup", "identical",
                                                           "draft step in run / alone")}
                             | {key: report.get(key, {}).get("median_ms") for key in
                                ("draft step", "draft step alone", "draft catch-up (2)", "draft first feed",
                                 "after a draft decode", "target verify/step", "target step alone",
                                 "ar target steps")}), flush=True)
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "tokens": args.tokens, "gamma": args.gamma,
        "engine": type(target_cache(target, drafter)).__name__, "gguf_threads": drafter.model.threads,
        "torch_threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"), "rounds": rounds}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
