"""Where an AR step goes, the project's beside llama.cpp's own, per prompt length: the prompt's prefill and the
one-token step (ms), each measured four ways on the same F32 file, interleaved per repeat, medians:

* ``ours ar``: the project's AR decoder as a run makes it (``Autoregressive`` on the llama.cpp engine): a step is
  the wall time between two emitted tokens (the engine's call, the argmax, the event, the text);
* ``engine``: the engine's cache alone (``LlamaTargetCache.forward``, row-invariant calls in its context);
* ``plain call, llama.cpp's context``: a plain ``llama_decode`` on the same library in a context set up like
  ``llama-completion``'s (flash attention auto, KV float16, the prompt in one batch);
* ``llama-completion``: the tool itself (``--bin`` or built by ``llamacpp_peer.py``): its ``prompt eval`` and
  ``eval`` ms per token (its sampling inside).

So ``ours ar - engine`` is the loop's work (Python, sampling, events), ``engine - plain call`` the context (KV type,
flash attention, prefill chunks), ``plain call - llama-completion`` the library (the one-row kernel, when the tool
runs the stock library) and the binding.

    python benchmarks/ar_step_profile.py --lengths 40,150,300,550 --repeats 5 --bin work/llamacpp-peer/.../bin
    python benchmarks/ar_step_profile.py --tiny          # the suite's dry form: a tiny GGUF, no tools

Not part of CI in full (it needs the tools); tests/test_ar_step_profile.py runs ``--tiny``."""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_writer import write_folder_or_print  # noqa: E402

LLAMA_CONTEXT = {"flash_attn_type": -1, "type_k": 1, "type_v": 1}     # llama-completion's defaults
ROWS = ("ours ar", "engine", "plain call, llama.cpp's context", "llama-completion")


def step_split(run_seconds: float, prefill_seconds: float, new_tokens: int) -> float:
    """Seconds per step after the first (the first step feeds the prompt): what is left of the run over the rest."""
    return (run_seconds - prefill_seconds) / max(1, new_tokens - 1)


def profile_table(samples: dict) -> list[dict]:
    """{length: {row: {"prefill": [s], "step": [s]}}} → rows of medians in ms, with each row's step over
    llama-completion's (or None where it was not run)."""
    table = []
    for length, rows in sorted(samples.items()):
        reference = rows.get("llama-completion", {}).get("step")
        reference_ms = 1000 * statistics.median(reference) if reference else None
        for row in ROWS:
            if row not in rows or not rows[row]["step"]:
                continue
            step_ms = 1000 * statistics.median(rows[row]["step"])
            table.append({"prompt_tokens": length, "row": row,
                          "prefill_ms": 1000 * statistics.median(rows[row]["prefill"]), "step_ms": step_ms,
                          "step_over_llama_completion": step_ms / reference_ms if reference_ms else None})
    return table


def ours_ar(target, drafter, prompt_ids: list[int], tokens: int) -> tuple[float, float]:
    """(prefill seconds, step seconds) of the project's AR run: the prompt's feed is what the run spent before its
    first step (``prefill_seconds``: prompt[:-1] on the llama.cpp target) and that first step (the prompt's last
    token there, the whole prompt on an engine that does not prefill)."""
    from pacer_core import Autoregressive
    from pacer_core.testing.runs import run_result
    result = run_result(Autoregressive(), target, drafter, prompt_ids, max_new_tokens=tokens)
    prefill = result.events[0].prefill_seconds + result.events[0].verify_seconds
    return prefill, step_split(result.metrics.seconds, prefill, result.metrics.new_tokens)


def cache_run(new_cache, prompt_ids: list[int], tokens: int) -> tuple[float, float]:
    """(prefill seconds, median seconds of a one-token call) of a bare cache fed the prompt then ``tokens`` steps."""
    cache = new_cache()
    started = time.perf_counter()
    logits = cache.forward(list(prompt_ids), keep=1)
    prefill = time.perf_counter() - started
    steps = []
    for _ in range(tokens - 1):
        token_id = int(logits[0, -1].argmax())
        started = time.perf_counter()
        logits = cache.forward([token_id], keep=1)
        steps.append(time.perf_counter() - started)
    return prefill, statistics.median(steps)


def completion_run(tools, target: Path, text: str, tokens: int, threads: int, scratch: Path) -> tuple[float, float]:
    from benchmarks.llamacpp_peer import llama_ar
    prompt_file = scratch / "prompt.txt"
    prompt_file.write_text(text)
    speed = llama_ar(tools, target, prompt_file, tokens, threads)
    return speed["prompt_seconds"], speed["seconds"] / max(1, speed["tokens"])


def length_prompts(target, lengths: list[int]) -> dict[int, list[int]]:
    """A prompt of each length: the code set's prompts' token ids, joined and cut (the chat template around)."""
    from pacer_core.prompts import load_prompts
    ids: list[int] = []
    for prompt in load_prompts(str(ROOT / "assets" / "prompts" / "code.jsonl")):
        ids += target.encode_prompt(prompt["prompt"])
    return {length: ids[:length] for length in lengths}


def measure(args) -> dict:
    from pacer_core.llama.cache import GGUFCache
    from pacer_core.llama.model import ContextPool
    from pacer_core.llama.target import LlamaTarget

    if args.tiny:
        from pacer_core.testing.gguf_file import write_llama_gguf
        from pacer_core.testing.tiny import tiny_pair
        import dataclasses
        target, drafter = tiny_pair(scale=6.0)
        scratch = Path(tempfile.mkdtemp(prefix="step-profile-"))
        target_file = write_llama_gguf(target.model, target.tokenizer, scratch / "target.gguf")
        engine = LlamaTarget.load(target_file, target.tokenizer, target.vocab_size)
        target = dataclasses.replace(target, engine=engine)
        prompts = {length: [index % 60 for index in range(length)] for length in args.lengths}
    else:
        from pacer_core.models import load_target
        target, drafters = load_target("embedded", "gguf")
        drafter, engine = drafters.default, target.engine
        if engine is None:
            raise SystemExit("the embedded target does not run on llama.cpp here (see the app's log for why)")
        target_file = engine.model.path
        prompts = length_prompts(target, args.lengths)
    tools = None
    if args.bin:
        from benchmarks.llamacpp_peer import find_tools
        tools = find_tools(Path(args.bin), ("llama-completion",))
        if tools is None:
            raise SystemExit(f"{args.bin} holds no llama-completion")
    plain = LlamaTarget.__new__(LlamaTarget)
    plain.model, plain.vocab_size = engine.model, engine.vocab_size
    plain.pool = ContextPool(engine.model, options=LLAMA_CONTEXT)
    samples: dict = {length: {row: {"prefill": [], "step": []} for row in ROWS} for length in prompts}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.repeats):
            for length, prompt_ids in prompts.items():
                runs = {"ours ar": lambda: ours_ar(target, drafter, prompt_ids, args.tokens),
                        "engine": lambda: cache_run(engine.new_cache, prompt_ids, args.tokens),
                        "plain call, llama.cpp's context": lambda: cache_run(lambda: GGUFCache(plain), prompt_ids,
                                                                             args.tokens)}
                if tools:
                    text = target.tokenizer.decode(prompt_ids)
                    runs["llama-completion"] = lambda: completion_run(tools, Path(target_file), text, args.tokens,
                                                                      engine.model.threads, Path(scratch))
                for row, run in runs.items():
                    prefill, step = run()
                    samples[length][row]["prefill"].append(prefill)
                    samples[length][row]["step"].append(step)
                print(f"[profile] {length} tokens: " + ", ".join(
                    f"{row} {1000 * values['step'][-1]:.2f} ms" for row, values in samples[length].items()
                    if values["step"]), flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": "python " + " ".join(sys.argv),
            "target_engine": engine.describe(), "target_file": str(target_file), "tokens": args.tokens,
            "repeats": args.repeats, "samples": samples, "table": profile_table(samples)}


def markdown(report: dict) -> str:
    lines = ["# Where an AR step goes: the project's beside llama.cpp's own", "",
             f"{report['date']}, `{report['command']}`", "",
             f"Target engine: {report['target_engine']}; {report['tokens']} new tokens per run, {report['repeats']} "
             "repeats interleaved, medians (ms). Rows: module docstring of benchmarks/ar_step_profile.py.", "",
             "| prompt tokens | row | prefill ms | step ms | step x llama-completion |", "|---:|---|---:|---:|---:|"]
    for row in report["table"]:
        ratio = row["step_over_llama_completion"]
        lines.append(f"| {row['prompt_tokens']} | {row['row']} | {row['prefill_ms']:.1f} | {row['step_ms']:.2f} | "
                     f"{'' if ratio is None else f'{ratio:.2f}x'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=lambda text: [int(n) for n in text.split(",")], default=[40, 150, 300, 550])
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bin", default=None, help="a folder holding llama-completion (llamacpp_peer.py builds it)")
    parser.add_argument("--tiny", action="store_true", help="a tiny GGUF written here, no tools (the suite's form)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    report = measure(args)
    write_folder_or_print(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
