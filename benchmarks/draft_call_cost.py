"""What one gguf draft call costs beyond llama_decode, before and after the changes of issue 35: each piece timed
on its own, interleaved (every piece once per repeat, shuffled), medians in microseconds.

    python benchmarks/draft_call_cost.py --repeats 300 --out benchmarks/results/draft-call-cost.json

Pieces: ``llama_decode`` (one token, one output row, the embedded Q4_1 file, rolled back after); ``row copy``
(the logits row out of llama.cpp into a torch tensor: GGUFCache._decode_once's memmove); ``logger reset``
(``_logger.set_verbose(False)``, which the drafter called on every decode before); greedy row math before
(one-hot from an argmax, a second argmax over it, a softmax for q(x)) and after (one argmax, the one-hot built
from it, a softmax for q(x)); PACER's token features (softmax, top-2, clamp, log, multiply, sum), unchanged."""
from __future__ import annotations

import argparse
import ctypes
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.results_writer import print_and_write  # noqa: E402
from pacer_core import sampling  # noqa: E402
from pacer_core.drafters import load_drafter  # noqa: E402
from pacer_core.llama.model import llama_cpp_module  # noqa: E402
from pacer_core.models import load_target  # noqa: E402
from pacer_core.preverifier import token_features  # noqa: E402


def greedy_before(row: torch.Tensor) -> tuple[int, float]:
    one_hot = torch.zeros_like(row, dtype=torch.float32)
    one_hot[int(torch.argmax(row))] = 1.0
    token_id = int(torch.argmax(one_hot))
    return token_id, float(torch.softmax(row.float(), dim=-1)[token_id])


def greedy_after(row: torch.Tensor) -> tuple[int, float]:
    token_id = int(torch.argmax(row))
    sampling.one_hot(token_id, row)
    return token_id, sampling.display_prob(row, token_id)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    target, drafters = load_target("embedded", "small", target_engine="torch")
    drafter = load_drafter(target, drafters, "gguf")
    cache = drafter.new_cache()
    prompt = target.encode_prompt("Explain how a refrigerator keeps food cold.")
    row = cache.forward(prompt, keep=1)[0, -1].clone()
    token_id = int(torch.argmax(row))
    llama_cpp = llama_cpp_module()
    from llama_cpp import _logger
    length = cache.length
    batch = cache.batch.batch

    def decode():
        batch.token[0], batch.pos[0], batch.seq_id[0][0], batch.n_seq_id[0], batch.logits[0] = token_id, length, 0, 1, 1
        batch.n_tokens = 1
        cache.context.decode(cache.batch)
        cache.context.kv_cache_seq_rm(0, length, -1)

    def copy():
        logits = torch.empty(1, drafter.model.n_vocab)
        ctypes.memmove(logits.data_ptr(), llama_cpp.llama_get_logits(cache.context.ctx), logits.nbytes)

    pieces = {"llama_decode": decode, "row copy": copy, "logger reset": lambda: _logger.set_verbose(False),
              "greedy math before": lambda: greedy_before(row), "greedy math after": lambda: greedy_after(row),
              "token features": lambda: token_features(row, torch.zeros(0), token_id, 0)}
    samples = {name: [] for name in pieces}
    order = list(pieces)
    for piece in pieces.values():
        piece()
    shuffler = random.Random(0)
    for _ in range(args.repeats):
        shuffler.shuffle(order)
        for name in order:
            started = time.perf_counter()
            pieces[name]()
            samples[name].append(time.perf_counter() - started)
    micro = {name: round(1e6 * statistics.median(values), 1) for name, values in samples.items()}
    beyond = {"before": micro["row copy"] + micro["logger reset"] + micro["greedy math before"],
              "after": micro["row copy"] + micro["greedy math after"],
              "pacer before": micro["row copy"] + micro["logger reset"] + micro["greedy math before"]
              + micro["token features"],
              "pacer after": micro["row copy"] + micro["greedy math after"] + micro["token features"]}
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "repeats": args.repeats, "threads": drafter.model.threads,
              "torch_threads": torch.get_num_threads(), "median_microseconds": micro,
              "beyond_llama_decode_microseconds": {name: round(value, 1) for name, value in beyond.items()}}
    print_and_write(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
