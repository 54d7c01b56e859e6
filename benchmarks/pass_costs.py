"""Forward-pass costs of the embedded pair by dtype: one target or draft pass over 1 and over 4 new
tokens after a 60-token context, interleaved across the configurations so that the machine's load hits all
of them alike (medians of ``--repeats``). ``--packed both`` adds float32 with and without the pre-packed
oneDNN linear layers (pacer_core/packed_linear.py; bfloat16 is never packed). This is what decides the CPU default dtype together with
exactness (the bench's ``same_as_ar``): speculative decoding pays one multi-token verify pass per step and
one single-token draft pass per drafted token, AR one single-token target pass per token.

    python benchmarks/pass_costs.py --packed both --out benchmarks/results/pass_costs.json"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.results_writer import print_and_write  # noqa: E402
from pacer_core.kvcache import CachedModel  # noqa: E402
from pacer_core.models import load_target  # noqa: E402

CONTEXT = list(range(1000, 1060))
SIZES = (1, 2, 4, 8)


def configurations(dtypes: list[str], packed: str) -> list[tuple[str, str]]:
    """(dtype, "1" packed / "0" default kernels) for every configuration asked for."""
    packings = {"both": ("0", "1"), "yes": ("1",), "no": ("0",)}[packed]
    return [(dtype, packing) for dtype in dtypes for packing in (packings if dtype in ("float32", "fp32") else ("0",))]


def caches_by_config(dtypes: list[str], packed: str) -> dict:
    caches = {}
    for dtype, packing in configurations(dtypes, packed):
        os.environ["PACER_PACKED_LINEAR"] = packing
        target, drafters = load_target("embedded", "embedded-small", device="cpu", dtype=dtype)
        label = dtype + (" packed" if target.describe(drafters.default)["linear_kernels"] != "default" else "")
        for role, model in (("target", target.model), ("draft", drafters.small_model)):
            cache = CachedModel(model, target.vocab_size)
            cache.forward(CONTEXT)
            caches[f"{role} {label}"] = cache
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
    parser.add_argument("--packed", choices=("both", "yes", "no"), default="both",
                        help="float32 with pre-packed linear layers, without, or both")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    medians = interleaved_medians(caches_by_config(args.dtypes.split(","), args.packed), args.repeats)
    report = {"threads": torch.get_num_threads(), "context": len(CONTEXT), "repeats": args.repeats, "medians": medians,
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    print_and_write(report, args.out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
