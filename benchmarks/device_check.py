"""Device check, part 2: where a decoding step's time goes on models of real shapes.

The pair the app loads on this GPU with no target set (models.gpu_default_pair, by the GPU's memory: SmolLM2-1.7B
with its 135M draft below 22 GB, Qwen2.5-7B with its 0.5B draft from a 24 GB card), at their real shapes, with RANDOM
weights in bf16, decode the same random prompt with AR, fixed SD (γ = 4), PACER and SMC-SD (N = 8, K = 4).
Each step's wall time is split into draft, verify and everything else; overhead = everything else / step.

    python benchmarks/device_check.py             # a GPU (cuda), real shapes, bf16; about 1-2 min on an H200
    python benchmarks/device_check.py --dry-run   # the CPU, tiny shapes, fp32; seconds (CI runs it)

scripts/device_check.sh runs this after the device test tier. Writes device_check.json and summary.txt to --out.

How a step is timed: draft_seconds and verify_seconds come from the decoders' own events (StepEvent,
SMCCycleEvent); the step's time is the wall time from the previous event to this one, so "other" is the
rest of the decoder's loop (committing, cache crops, token texts, event objects, SMC-SD's weights and
resampling). Both brackets end in host syncs (.item(), .tolist()), so on a GPU they time finished work.
The first step of every run (the prompt's prefill) is left out. Per method:
  AR      draft = 0; verify = the target forward plus picking the token.
  fixed   draft = the drafting loop (draft forwards + sampling); verify = the target forward + acceptance.
  PACER   as fixed, with the pre-verifier's scoring inside draft.
  SMC-SD  draft = K batched draft forwards with sampling; verify = the target forward, its log-probs and
          the bonus tokens; other includes the weights, ESS and resampling.
Random weights make acceptance near chance, so tokens per step say nothing about a trained pair; the split
of a step's time is what this measures. This module imports neither tests/ nor gradio.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacer_core.drafters import IndependentDrafter, LoadedDrafters, load_drafter  # noqa: E402
from pacer_core.api import run_request  # noqa: E402
from pacer_core.events import Result  # noqa: E402
from pacer_core.models import Target, target_from_models  # noqa: E402
from pacer_core.request import EncodedPrompt, RunRequest, chosen_names, request_for  # noqa: E402
from pacer_core.settings import Limits, validate_settings  # noqa: E402
from benchmarks.results_writer import write_summary  # noqa: E402

# Real shapes of the pairs the app loads on a GPU with no target set (default_target.GPU_DEFAULT_PAIRS, chosen by memory).
REAL_SHAPES = {
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": ("llama", 49152, {"hidden_size": 2048, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192}),
    "HuggingFaceTB/SmolLM2-135M-Instruct": ("llama", 49152, {"hidden_size": 576, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536}),
    "Qwen/Qwen2.5-7B-Instruct": ("qwen2", 152064, {"hidden_size": 3584, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
        "tie_word_embeddings": False}),
    "Qwen/Qwen2.5-0.5B-Instruct": ("qwen2", 151936, {"hidden_size": 896, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864}),
}
DRY_TARGET_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "intermediate_size": 128}
DRY_DRAFT_SHAPE = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "intermediate_size": 64}
DRY_VOCAB_SIZE = 512
OVERHEAD_LIMIT = 0.10   # the bar: above it, the per-step Python work needs reducing


@dataclass
class MethodRow:
    """One method and temperature in the report; ``drafter``: drafters.load_drafter's name (None: the random draft
    model)."""
    label: str
    method: str
    temperature: float
    overrides: dict
    drafter: str | None = None


ROWS = [MethodRow("ar", "ar", 0.0, {}), MethodRow("fixed:4", "fixed", 0.0, {"gamma": 4}),
        MethodRow("pacer", "pacer", 0.0, {}),
        MethodRow("ar T=1", "ar", 1.0, {}), MethodRow("fixed:4 T=1", "fixed", 1.0, {"gamma": 4}),
        MethodRow("pacer T=1", "pacer", 1.0, {}),
        MethodRow("smc:8:4 T=1", "smc", 1.0, {"n_particles": 8, "draft_len": 4}),
        # the target's own weights, quantized at load time (drafters/self_quantized.py)
        MethodRow("fixed:4@self-int4", "fixed", 0.0, {"gamma": 4}, "self-int4"),
        MethodRow("fixed:4@self-int8", "fixed", 0.0, {"gamma": 4}, "self-int8"),
        MethodRow("smc:8:4 T=1@self-int4", "smc", 1.0, {"n_particles": 8, "draft_len": 4}, "self-int4")]


class NumberTokenizer:
    """Id i ↔ the text 't<i> ': all the decoders need from a tokenizer (decode, token texts)."""

    chat_template = None
    eos_token_id = None

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def decode(self, ids, skip_special_tokens=False) -> str:
        return "".join(f"t{int(i)} " for i in ids)

    def __len__(self) -> int:
        return self.vocab_size


def random_model(model_type: str, shape: dict, vocab_size: int, device: torch.device, dtype: torch.dtype,
                 seed: int):
    """A Llama or Qwen2 of the given shape with transformers' random initialisation, built directly on ``device``."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_class, model_class = (Qwen2Config, Qwen2ForCausalLM) if model_type == "qwen2" else \
        (LlamaConfig, LlamaForCausalLM)
    config = config_class(vocab_size=vocab_size, max_position_embeddings=8192, bos_token_id=None, eos_token_id=None,
                          pad_token_id=None, **({"tie_word_embeddings": True} | shape))
    torch.manual_seed(seed)
    with torch.device(device):
        model = model_class(config)
    return model.to(dtype).eval()


def default_gpu_pair_ids(device: torch.device) -> tuple[str, str]:
    """The hub ids of the pair the app loads on this GPU with no target set (by its memory)."""
    from pacer_core.default_target import gpu_default_pair, gpu_memory_gb

    chosen = gpu_default_pair(gpu_memory_gb(device))
    return chosen.target, chosen.draft


def named_gpu_pair_ids(target_id: str) -> tuple[str, str]:
    """The hub ids of the GPU default pair whose target is ``target_id`` (--target)."""
    from pacer_core.default_target import GPU_DEFAULT_PAIRS

    chosen = next((hub_pair for hub_pair in GPU_DEFAULT_PAIRS if hub_pair.target == target_id), None)
    if chosen is None:
        raise SystemExit(f"device_check: --target must be one of {[hub_pair.target for hub_pair in GPU_DEFAULT_PAIRS]}")
    return chosen.target, chosen.draft


def random_pair(dry_run: bool, device: torch.device, dtype: torch.dtype,
                target_id: str | None = None) -> tuple[Target, IndependentDrafter]:
    """(the pair, its random draft model as a drafter): the CI's tiny shapes, or a GPU default pair's real shapes."""
    if dry_run:
        target = random_model("llama", DRY_TARGET_SHAPE, DRY_VOCAB_SIZE, device, dtype, seed=0)
        draft = random_model("llama", DRY_DRAFT_SHAPE, DRY_VOCAB_SIZE, device, dtype, seed=1)
        return target_from_models(target, draft, NumberTokenizer(DRY_VOCAB_SIZE), "tiny random target",
                                "tiny random draft", use_chat_template=False)
    target_id, draft_id = named_gpu_pair_ids(target_id) if target_id else default_gpu_pair_ids(device)
    (target_type, target_vocab, target_shape), (draft_type, draft_vocab, draft_shape) = \
        REAL_SHAPES[target_id], REAL_SHAPES[draft_id]
    target = random_model(target_type, target_shape, target_vocab, device, dtype, seed=0)
    draft = random_model(draft_type, draft_shape, draft_vocab, device, dtype, seed=1)
    return target_from_models(target, draft, NumberTokenizer(min(target_vocab, draft_vocab)),
                            f"random {target_id.split('/')[-1]}-shaped target",
                            f"random {draft_id.split('/')[-1]}-shaped draft", use_chat_template=False)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def row_request(target, drafter, row: MethodRow, prompt_ids: list[int], max_new_tokens: int) -> RunRequest:
    """The row's run request (seed 0), validated once: this script is a front door."""
    limits = Limits.from_env()
    raw = {"max_new_tokens": max_new_tokens, "temperature": row.temperature, **row.overrides}
    return request_for(target, drafter, row.method, validate_settings(limits, **raw), chosen_names(raw),
                       EncodedPrompt(tuple(prompt_ids)), limits)


def timed_run(target, request: RunRequest):
    """One run: (per-step (step, draft, verify) seconds without the first step, the Result)."""
    steps, result = [], None
    synchronize(target.device)
    previous = time.perf_counter()
    for item in run_request(target, request):
        now = time.perf_counter()
        if isinstance(item, Result):
            result = item
            break
        steps.append((now - previous, item.draft_seconds, item.verify_seconds))
        previous = now
    return steps[1:], result


def summarize(row: MethodRow, steps: list[tuple], results: list[Result]) -> dict:
    """Per-step milliseconds (means over every timed step of every repeat) and the overhead share."""
    step_total = sum(step for step, _, _ in steps)
    draft_total = sum(draft for _, draft, _ in steps)
    verify_total = sum(verify for _, _, verify in steps)
    other_total = max(step_total - draft_total - verify_total, 0.0)
    count = max(len(steps), 1)
    new_tokens = sum(result.metrics.new_tokens for result in results)
    target_calls = sum(result.metrics.target_calls for result in results)
    return {"label": row.label, "method": row.method, "temperature": row.temperature, "steps": len(steps),
            "step_ms": 1e3 * step_total / count, "draft_ms": 1e3 * draft_total / count,
            "verify_ms": 1e3 * verify_total / count, "other_ms": 1e3 * other_total / count,
            "median_step_ms": 1e3 * statistics.median(step for step, _, _ in steps) if steps else 0.0,
            "overhead": other_total / step_total if step_total > 0 else 0.0,
            "tokens_per_target_call": new_tokens / target_calls if target_calls else 0.0,
            "tokens_per_s": statistics.median(result.metrics.tokens_per_s for result in results)}


def measure(target, draft: IndependentDrafter, row: MethodRow, prompt_ids: list[int], args) -> dict:
    """The row's per-step figures, drafting with ``draft`` (the random draft model) or the drafter the row names,
    built for the pair; a row whose drafter cannot be built here (no quantized kernel on this device) says why
    instead."""
    if row.drafter is None:
        return measure_with(target, draft, row, prompt_ids, args)
    try:
        drafter = load_drafter(target, LoadedDrafters.around(draft), row.drafter)
    except ValueError as missing:
        return {"label": row.label, "method": row.method, "temperature": row.temperature, "error": str(missing),
                "steps": 0, "step_ms": 0.0, "draft_ms": 0.0, "verify_ms": 0.0, "other_ms": 0.0, "median_step_ms": 0.0,
                "overhead": 0.0, "tokens_per_target_call": 0.0, "tokens_per_s": 0.0}
    return measure_with(target, drafter, row, prompt_ids, args)


def measure_with(target, drafter, row: MethodRow, prompt_ids: list[int], args) -> dict:
    warm_up = row_request(target, drafter, row, prompt_ids, min(8, args.max_new_tokens))
    timed_run(target, warm_up)   # kernels, allocator
    request = row_request(target, drafter, row, prompt_ids, args.max_new_tokens)
    steps, results = [], []
    for repeat in range(args.repeats):
        run_steps, result = timed_run(target, request.reseeded(repeat))
        steps += run_steps
        results.append(result)
    return summarize(row, steps, results)


def table(rows: list[dict]) -> str:
    header = (f"{'method':<22} {'steps':>5} {'step ms':>8} {'draft ms':>9} {'verify ms':>9} {'other ms':>9} "
              f"{'overhead':>8} {'tok/call':>8} {'tok/s':>8}")
    lines = [header, "-" * len(header)]
    for row in rows:
        if row.get("error"):
            lines.append(f"{row['label']:<22} not run: {row['error']}")
            continue
        flag = "  > 10%" if row["overhead"] > OVERHEAD_LIMIT else ""
        lines.append(f"{row['label']:<22} {row['steps']:>5} {row['step_ms']:>8.2f} {row['draft_ms']:>9.2f} "
                     f"{row['verify_ms']:>9.2f} {row['other_ms']:>9.2f} {100 * row['overhead']:>7.1f}% "
                     f"{row['tokens_per_target_call']:>8.2f} {row['tokens_per_s']:>8.1f}{flag}")
    return "\n".join(lines)


def machine(device: torch.device, dtype: torch.dtype) -> dict:
    import transformers

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {"device": str(device), "device_name": name, "dtype": str(dtype).replace("torch.", ""),
            "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU in fp32 (CI)")
    parser.add_argument("--device", default=None, help="default: cuda (the CPU with --dry-run)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default 64 (16 with --dry-run)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 128 (8 with --dry-run)")
    parser.add_argument("--repeats", type=int, default=None, help="default 2 (1 with --dry-run)")
    parser.add_argument("--budget-seconds", type=float, default=360.0, help="skip the remaining rows after this")
    parser.add_argument("--target", default=None, help="a GPU default pair by its target's hub id (default: the "
                        "pair the app loads on this GPU, by its memory)")
    parser.add_argument("--out", default=None, help="folder for device_check.json and summary.txt")
    return parser


def apply_defaults(args) -> argparse.Namespace:
    dry = args.dry_run
    args.device = torch.device(args.device or ("cpu" if dry else "cuda"))
    args.max_new_tokens = args.max_new_tokens or (16 if dry else 64)
    args.prompt_tokens = args.prompt_tokens or (8 if dry else 128)
    args.repeats = args.repeats or (1 if dry else 2)
    return args


def run_check(args) -> dict:
    started = time.perf_counter()
    dtype = torch.float32 if args.dry_run else torch.bfloat16
    if args.dry_run:
        torch.set_num_threads(1)   # tiny models are dispatch-bound; one thread is fastest on a shared CPU
    target, draft = random_pair(args.dry_run, args.device, dtype, args.target)
    prompt_ids = torch.randint(target.vocab_size, (args.prompt_tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    rows, skipped = [], []
    for row in ROWS:
        if time.perf_counter() - started > args.budget_seconds:
            skipped.append(row.label)
            continue
        rows.append(measure(target, draft, row, prompt_ids, args))
        print(f"  {row.label}: {rows[-1]['step_ms']:.2f} ms/step, overhead {100 * rows[-1]['overhead']:.1f}%",
              flush=True)
    return {"dry_run": args.dry_run, "machine": machine(args.device, dtype), "target": target.name,
            "draft": draft.name, "prompt_tokens": args.prompt_tokens, "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats, "rows": rows, "skipped": skipped, "overhead_limit": OVERHEAD_LIMIT,
            "seconds": time.perf_counter() - started}


def summary_text(report: dict) -> str:
    over = [row["label"] for row in report["rows"] if row["overhead"] > OVERHEAD_LIMIT]
    lines = [f"{report['target']} + {report['draft']} on {report['machine']['device_name']} "
             f"({report['machine']['device']}, {report['machine']['dtype']}), prompt {report['prompt_tokens']} tokens, "
             f"{report['max_new_tokens']} new tokens x {report['repeats']} repeat(s), {report['seconds']:.0f} s",
             table(report["rows"]),
             f"overhead = other / step time; above {100 * OVERHEAD_LIMIT:.0f}%: {', '.join(over) or 'none'}"]
    if report["skipped"]:
        lines.append(f"skipped (time budget): {', '.join(report['skipped'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = apply_defaults(build_parser().parse_args(argv))
    if args.device.type == "cuda" and not torch.cuda.is_available():
        print("device_check: no CUDA device visible; run with --dry-run for the CPU check.", file=sys.stderr)
        return 2
    report = run_check(args)
    write_summary(args.out, "device_check.json", report, summary_text(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
