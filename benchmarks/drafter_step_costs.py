"""Each drafter's draft call against the target's one-token step on the pair's default engine (on a CPU with the
embedded target: llama.cpp), after a 100-token prompt, medians of 25, in two rounds. Prints c = draft call /
target step per drafter: the figure measured_defaults.json keeps as each drafter's cost on the CPU.

    .venv/bin/python benchmarks/drafter_step_costs.py [--drafters gguf,small,self-int8,self-int4]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.target_engine import timed_pass  # noqa: E402
from pacer_core import load_target  # noqa: E402
from pacer_core.drafters import load_drafter  # noqa: E402
from pacer_core.drafters import new_caches  # noqa: E402
from pacer_core.llama.engine import target_cache  # noqa: E402

PROMPT_IDS = [(index * 37) % 40000 + 100 for index in range(100)]


def one_token_ms(cache, repeats: int = 25) -> float:
    """Median milliseconds of one one-token feed after the prompt (cropped back after each)."""
    cache.forward(PROMPT_IDS, keep=1)
    return 1000 * statistics.median([timed_pass(cache, len(PROMPT_IDS), [1234]) for _ in range(repeats)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafters", default="gguf,small,self-int8,self-int4")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    target, drafters = load_target("embedded", "gguf", device="cpu", dtype="float32")
    for round_index in range(args.rounds):
        target_ms = one_token_ms(target_cache(target, drafters.default))
        for name in args.drafters.split(","):
            _, draft_cache = new_caches(target, load_drafter(target, drafters, name))
            draft_ms = one_token_ms(draft_cache)
            print(f"round {round_index + 1}: {name}: draft call {draft_ms:.1f} ms, target step {target_ms:.1f} ms, "
                  f"c = {draft_ms / target_ms:.2f}", flush=True)


if __name__ == "__main__":
    main()
