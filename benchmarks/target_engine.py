"""The target's engines side by side: the cost of a 1-token step and of a verify pass over T tokens, each after the
same chat prompt, for torch (packed float32, the project's former path), the llama.cpp engine (llama/target.py:
row-invariant calls, in each context configuration tried) and llama.cpp's own F32 step on the same weights (a plain
one-token llama_decode, what ``llama-completion`` runs). Interleaved: every configuration and every T once per
repeat, in a shuffled order; medians over repeats.

    python benchmarks/target_engine.py --repeats 15 --out benchmarks/results/target-engine

Also checks, per llama.cpp configuration, whether a position's logits are bit-equal between one-token steps and a
verify pass over several tokens (with and without the engine's companion token and chunking)."""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.results_writer import write_folder  # noqa: E402
from pacer_core.kvcache import CachedModel  # noqa: E402
from pacer_core.llama.target import COMPANION_SEQUENCE, LlamaTarget, LlamaTargetCache  # noqa: E402
from pacer_core.llama.cache import GGUFCache  # noqa: E402
from pacer_core.llama.model import ContextPool  # noqa: E402
from pacer_core.models import load_target  # noqa: E402

VERIFY_TOKENS = (1, 2, 4, 8, 12, 16, 24, 36)
PROMPT = "Explain how a refrigerator keeps food cold."
CONFIGURATIONS = {   # llama_context_params fields: flash attention 0 off / 1 on; KV type 0 float32 / 1 float16
    "fa off, kv f32": {"flash_attn_type": 0, "type_k": 0, "type_v": 0},
    "fa off, kv f16": {"flash_attn_type": 0, "type_k": 1, "type_v": 1},
    "fa on, kv f32": {"flash_attn_type": 1, "type_k": 0, "type_v": 0},
    "fa on, kv f16": {"flash_attn_type": 1, "type_k": 1, "type_v": 1},
}


class Engine:
    """One way to run the target: a name and a cache factory."""

    def __init__(self, name: str, new_cache):
        self.name, self.new_cache = name, new_cache


def llama_engines(model, vocab_size: int) -> list[Engine]:
    engines = []
    for label, options in CONFIGURATIONS.items():
        owner = LlamaTarget(model, vocab_size)
        owner.pool = ContextPool(model, sequences=COMPANION_SEQUENCE + 1, options=options)
        engines.append(Engine(f"engine ({label})", lambda owner=owner: LlamaTargetCache(owner)))
        if label == "fa on, kv f16":      # llama.cpp's defaults: what its own tools run
            engines.append(Engine("llama.cpp plain step (fa on, kv f16)", lambda owner=owner: GGUFCache(owner)))
    return engines


def timed_pass(cache, prompt_length: int, token_ids: list[int]) -> float:
    """Seconds of one forward over ``token_ids`` after the prompt (then cropped back)."""
    started = time.perf_counter()
    cache.forward(token_ids, keep=len(token_ids))
    seconds = time.perf_counter() - started
    cache.crop(prompt_length)
    return seconds


def step_curve(engines: list[Engine], prompt: list[int], continuation: list[int], repeats: int, seed: int) -> dict:
    caches = {engine.name: engine.new_cache() for engine in engines}
    for cache in caches.values():
        cache.forward(prompt, keep=1)
        timed_pass(cache, len(prompt), continuation[:4])       # warm
    samples = {name: {tokens: [] for tokens in VERIFY_TOKENS} for name in caches}
    plan = [(name, tokens) for name in caches for tokens in VERIFY_TOKENS]
    shuffler = random.Random(seed)
    for _ in range(repeats):
        shuffler.shuffle(plan)
        for name, tokens in plan:
            samples[name][tokens].append(timed_pass(caches[name], len(prompt), continuation[:tokens]))
    return {name: {tokens: 1000 * statistics.median(values) for tokens, values in by_tokens.items()}
            for name, by_tokens in samples.items()}


def invariance(engine: Engine, prompt: list[int], continuation: list[int]) -> dict:
    """Bit-equal rows between one-token steps and verify-style feeds (10 then 7 at a time)."""
    stepped = engine.new_cache()
    rows = [stepped.forward(prompt, keep=1)[0, -1]]
    for token_id in continuation:
        rows.append(stepped.forward([token_id], keep=1)[0, -1])
    stepped_rows = torch.stack(rows)
    verifying = engine.new_cache()
    sequence = list(prompt) + list(continuation)
    pieces = [verifying.forward(sequence[: len(prompt) + 10], keep=11)[0]]
    position = len(prompt) + 10
    while position < len(sequence):
        count = min(7, len(sequence) - position)
        pieces.append(verifying.forward(sequence[position: position + count], keep=count)[0])
        position += count
    verified_rows = torch.cat(pieces)
    return {"rows": int(verified_rows.shape[0]),
            "bit_equal": int((verified_rows == stepped_rows[: verified_rows.shape[0]]).all(-1).sum()),
            "max_abs_difference": float((verified_rows - stepped_rows[: verified_rows.shape[0]]).abs().max())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/target-engine")
    args = parser.parse_args(argv)
    target, _ = load_target("embedded", "small", target_engine="torch")
    engine = LlamaTarget.for_embedded(target.tokenizer, target.vocab_size)
    prompt = target.encode_prompt(PROMPT)
    continuation = [int(token) for token in torch.randint(100, 40000, (max(VERIFY_TOKENS),),
                                                          generator=torch.Generator().manual_seed(args.seed))]
    engines = [Engine("torch (packed float32)", lambda: CachedModel(target.model, target.vocab_size)),
               *llama_engines(engine.model, target.vocab_size)]
    curve = step_curve(engines, prompt, continuation, args.repeats, args.seed)
    checks = {item.name: invariance(item, prompt, continuation[:30]) for item in engines[1:]}
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "threads": engine.model.threads,
              "torch_threads": torch.get_num_threads(), "prompt_tokens": len(prompt), "repeats": args.repeats,
              "milliseconds": curve, "row_invariance": checks}
    write_folder(args.out, report, markdown(report))
    return 0


def markdown(report: dict) -> str:
    header = "| engine | " + " | ".join(f"T={tokens}" for tokens in VERIFY_TOKENS) + " |"
    lines = ["# The target's engines: ms per pass over T tokens", "",
             f"{report['date']}; llama.cpp {report['threads']} threads, torch {report['torch_threads']}; after a "
             f"{report['prompt_tokens']}-token chat prompt; medians of {report['repeats']} interleaved repeats.", "",
             header, "|---|" + "---:|" * len(VERIFY_TOKENS)]
    for name, by_tokens in report["milliseconds"].items():
        lines.append(f"| {name} | " + " | ".join(f"{by_tokens[tokens]:.1f}" for tokens in VERIFY_TOKENS) + " |")
    lines += ["", "Row invariance (logits of a position bit-equal between one-token steps and verify feeds):", ""]
    for name, check in report["row_invariance"].items():
        lines.append(f"- {name}: {check['bit_equal']}/{check['rows']} rows bit-equal, max |difference| "
                     f"{check['max_abs_difference']:.2g}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
