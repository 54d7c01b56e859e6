"""Forward-pass costs of the embedded pair by dtype: one target or draft pass over 1 and over 4 new
tokens after a 60-token context, interleaved across the configurations so that the machine's load hits all
of them alike (medians of ``--repeats``). This is what decides the CPU default dtype together with
exactness (the bench's ``same_as_ar``): speculative decoding pays one multi-token verify pass per step and
one single-token draft pass per drafted token, AR one single-token target pass per token.

    python benchmarks/pass_costs.py --out benchmarks/results/pass_costs.json"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pacer_core.kvcache import CachedModel  # noqa: E402
from pacer_core.models import load_pair  # noqa: E402

CONTEXT = list(range(1000, 1060))
SIZES = (1, 4)


def caches_by_config(dtypes: list[str]) -> dict:
    caches = {}
    for dtype in dtypes:
        pair = load_pair("embedded", "embedded-small", device="cpu", dtype=dtype)
        for role, model in (("target", pair.target), ("draft", pair.draft)):
            cache = CachedModel(model, pair.vocab_size)
            cache.forward(CONTEXT)
            caches[f"{role} {dtype}"] = cache
    return caches


@torch.inference_mode()
def interleaved_medians(caches: dict, repeats: int) -> dict:
    times = {name: {size: [] for size in SIZES} for name in caches}
    for _ in range(repeats):
        for name, cache in caches.items():
            for size in SIZES:
                started = time.perf_counter()
                cache.forward(list(range(5, 5 + size)))
                times[name][size].append(time.perf_counter() - started)
                cache.crop(len(CONTEXT))
    return {name: {f"{size}_token_ms": round(statistics.median(values) * 1000, 2) for size, values in by_size.items()}
            for name, by_size in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    medians = interleaved_medians(caches_by_config(args.dtypes.split(",")), args.repeats)
    report = {"threads": torch.get_num_threads(), "context": len(CONTEXT), "repeats": args.repeats, "medians": medians,
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
