"""The llama.cpp target engine in the context it proves at load against the plain one, end to end on the bench's rows.

The engine decodes with flash attention and float16 KV cells where the library passes its row-invariance proof
(pacer_core/llama/target.py, ``FLASH_CONTEXT``, prefill 256 tokens a call) and in the plain context otherwise (flash
attention off, float32 cells, ``PLAIN_CONTEXT``; before 2026-12-05 every library ran it, its prefill 48 tokens a
call). This loads the embedded target twice, once as proven and once with the proof failed, and times AR and the
page's default fixed SD and PACER with the ``gguf`` drafter on each, greedy, every row and both contexts interleaved
prompt by prompt (the prompt counted); it reports each row's seconds, its speed over AR in the same context, the
flash context's speed over the plain one per row, and how many outputs equal AR's in the same context.

    python benchmarks/engine_contexts.py --prompts assets/prompts/code.jsonl --repeats 2 --out benchmarks/results/engine-contexts-code
    python benchmarks/engine_contexts.py --limit 1 --repeats 1 --max-new-tokens 4        # the suite's tiny form
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from any folder

from benchmarks.results_writer import write_folder_or_print  # noqa: E402
from pacer_core import load_target, method_table  # noqa: E402
from pacer_core.drafters import load_drafter  # noqa: E402
from pacer_core.llama import target as llama_target  # noqa: E402
from pacer_core.methods import parse_method  # noqa: E402
from pacer_core.preverifier import default_preverifier  # noqa: E402
from pacer_core.prompts import load_prompts  # noqa: E402
from pacer_core.request import encode_prompt, row_requests  # noqa: E402
from pacer_core.settings import Limits  # noqa: E402

ROWS = ("ar", "fixed@gguf", "pacer@gguf")
CONTEXTS = ("flash", "plain")
PLAIN_CHUNK_TOKENS = 48          # the plain context's prefill as it ran before flash attention


def load_in(context: str):
    """(target, drafters) with the engine in ``context``: as proven, or with the attention proof failed."""
    if context == "flash":
        return load_target("embedded")
    proof = llama_target.attention_is_row_invariant
    llama_target.attention_is_row_invariant = lambda engine: False
    try:
        return load_target("embedded")
    finally:
        llama_target.attention_is_row_invariant = proof


def requests_for(target, drafters, prompts: list[dict], new_tokens: int) -> dict:
    """{row: (its MethodSpec, one RunRequest per prompt)}, resolved as the bench resolves them."""
    limits, raw = Limits.from_env(), {"max_new_tokens": new_tokens, "temperature": 0.0}
    encoded = [encode_prompt(target, record["prompt"], None, limits) for record in prompts]
    out = {}
    for label in ROWS:
        spec = parse_method(label)
        drafter = load_drafter(target, drafters, spec.drafter) if spec.drafter else drafters.default
        preverifier = default_preverifier(target, drafter)
        out[label] = (spec, row_requests(target, drafter, spec, raw, encoded, limits, preverifier))
    return out


def timed_run(target, spec, request, chunk_tokens: int) -> tuple[float, list[int]]:
    """One run's seconds and output ids, the engine's prefill cut into ``chunk_tokens`` a call."""
    llama_target.CHUNK_TOKENS = chunk_tokens
    decoder = method_table.make_decoder(spec.kind, request.preverifier)
    started = time.perf_counter()
    *_, result = decoder.run(target, request.drafter, list(request.prompt_ids), request.settings)
    return time.perf_counter() - started, list(result.token_ids)


def measure(prompts: list[dict], repeats: int, new_tokens: int) -> dict:
    proven_chunk = llama_target.CHUNK_TOKENS
    sides = {}
    for context in CONTEXTS:
        target, drafters = load_in(context)
        sides[context] = (target, requests_for(target, drafters, prompts, new_tokens),
                          proven_chunk if context == "flash" else PLAIN_CHUNK_TOKENS, target.engine.describe())
    seconds = {(context, row): 0.0 for context in CONTEXTS for row in ROWS}
    outputs = {key: [] for key in seconds}
    for (context, row) in seconds:                                          # warm-up on the first prompt
        target, requests, chunk, _ = sides[context]
        timed_run(target, requests[row][0], requests[row][1][0], chunk)
    for repeat in range(repeats):
        for index in range(len(prompts)):
            for (context, row) in seconds:
                target, requests, chunk, _ = sides[context]
                spent, output = timed_run(target, requests[row][0], requests[row][1][index], chunk)
                seconds[context, row] += spent
                if repeat == 0:
                    outputs[context, row].append(output)
    llama_target.CHUNK_TOKENS = proven_chunk
    return {"engines": {context: sides[context][3] for context in CONTEXTS},
            "rows": [{"context": context, "row": row, "seconds": round(seconds[context, row], 3),
                      "over_ar": round(seconds[context, "ar"] / seconds[context, row], 3),
                      "flash_over_plain": round(seconds["plain", row] / seconds["flash", row], 3),
                      "same_as_ar": sum(a == b for a, b in zip(outputs[context, row], outputs[context, "ar"]))}
                     for context in CONTEXTS for row in ROWS]}


def report_markdown(report: dict) -> str:
    lines = [f"# The engine's proven context against the plain one ({report['date']})", "",
             f"{report['prompt_count']} prompts of {report['prompts']}, greedy, {report['max_new_tokens']} new tokens, "
             f"{report['repeats']} repeat(s), every row and both contexts interleaved prompt by prompt; seconds summed "
             f"over prompts and repeats, the prompt included. flash: {report['engines']['flash']}; plain: "
             f"{report['engines']['plain']}, prefill {PLAIN_CHUNK_TOKENS} tokens a call.", "",
             "| context | row | seconds | speed over AR | flash over plain | outputs equal to AR's |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {row['context']} | {row['row']} | {row['seconds']:.2f} | {row['over_ar']:.3f}x | "
              f"{row['flash_over_plain']:.3f}x | {row['same_as_ar']}/{report['prompt_count']} |"
              for row in report["rows"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="assets/prompts/heldout.jsonl")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", default=None, help="results folder (results.json, report.md); else printed")
    args = parser.parse_args(argv)
    prompts = load_prompts(args.prompts)[: args.limit]
    report = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "prompts": args.prompts,
              "prompt_count": len(prompts), "repeats": args.repeats, "max_new_tokens": args.max_new_tokens}
    report |= measure(prompts, args.repeats, args.max_new_tokens)
    write_folder_or_print(args.out, report, report_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
