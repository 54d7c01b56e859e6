"""Where a draft token's time goes on a GPU: the model's own eager forward, the project's cache around it, the
sampling after it, and the same forward replayed as one CUDA graph.

The device check found a drafted token costing 1.1-1.9 target steps on an H200 at batch 1 (docs/measurements.md,
"The second GPU run"): both models bound by kernel launches. This splits one decode step of each model of a GPU
pair (random weights in the real shapes, benchmarks/device_check.py) into

  eager     ``model(input_ids=[1 token], past_key_values=DynamicCache)``: transformers' own forward;
  cached    ``kvcache.CachedModel.forward`` over one token, logits of that token: what a decoder calls;
  sampled   cached + ``sampling.token_log_probs`` + ``sampling.sample_rows`` + reading the id on the host: one
            drafted token as the drafting loop pays it;
  graph     the eager forward over a ``StaticCache`` captured once as a CUDA graph and replayed (what CUDA graphs
            would leave of the launch cost; "failed: ..." when this transformers release cannot be captured).

Medians over ``--steps`` steps after a warm-up, in ms. ``--dry-run``: tiny shapes on the CPU (no graph).

    python benchmarks/gpu_step_split.py --out benchmarks/results/gpu-step-split
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from device_check import DRY_DRAFT_SHAPE, DRY_VOCAB_SIZE, REAL_SHAPES, random_model, synchronize  # noqa: E402
from pacer_core.kvcache import CachedModel, cache_argument  # noqa: E402
from pacer_core.sampling import sample_rows, token_log_probs  # noqa: E402
from benchmarks.results_writer import write_summary  # noqa: E402

GPU_PAIRS = (("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
             ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"))


def timed_ms(step, device: torch.device, steps: int, warmup: int = 5) -> float:
    """Median wall time of ``step()`` in ms, the device synchronised around each call."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        synchronize(device)
        started = time.perf_counter()
        step()
        synchronize(device)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def prompt_ids(vocab_size: int, length: int, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (1, length), generator=generator).to(device)


@torch.inference_mode()
def eager_ms(model, prompt: torch.Tensor, steps: int) -> float:
    from transformers import DynamicCache

    cache = DynamicCache()
    model(input_ids=prompt, use_cache=True, **cache_argument(model, cache))
    token = prompt[:, -1:]
    return timed_ms(lambda: model(input_ids=token, use_cache=True, **cache_argument(model, cache)), prompt.device,
                    steps)


@torch.inference_mode()
def cached_ms(model, vocab_size: int, prompt: torch.Tensor, steps: int, sample: bool) -> float:
    cache = CachedModel(model, vocab_size)
    cache.forward(prompt, keep=1)
    token = prompt[:, -1:]
    generator = torch.Generator(device=prompt.device).manual_seed(0)

    def step():
        logits = cache.forward(token, keep=1)[:, -1]
        if sample:
            int(sample_rows(token_log_probs(logits, 1.0).exp(), generator)[0])

    return timed_ms(step, prompt.device, steps)


@torch.inference_mode()
def graph_ms(model, prompt: torch.Tensor, steps: int) -> float | str:
    """One-token forward over a StaticCache, captured as a CUDA graph and replayed; its error message if capture
    fails."""
    from transformers import StaticCache

    device, length = prompt.device, prompt.shape[1]
    try:
        # transformers' StaticLayer writes each call at its own running position (not at cache_position), replays
        # included: room for the 3 warm-ups, the capture, timed_ms's 5 warm-ups and every timed step
        cache = StaticCache(config=model.config, max_cache_len=length + 3 + 1 + 5 + steps + 8)
        given = cache_argument(model, cache)
        model(input_ids=prompt, use_cache=True, cache_position=torch.arange(length, device=device), **given)
        static_token = prompt[:, -1:].clone()
        static_position = torch.tensor([length], device=device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(3):
                model(input_ids=static_token, use_cache=True, cache_position=static_position, **given)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(input_ids=static_token, use_cache=True, cache_position=static_position, **given)
    except Exception as error:  # noqa: BLE001 - reported, not fatal: the other columns stand
        return f"failed: {type(error).__name__}: {str(error)[:160]}"
    return timed_ms(graph.replay, device, steps)


def model_row(model_id: str, shape_entry, device, dtype, steps: int, prompt_len: int, dry_run: bool) -> dict:
    model_type, vocab_size, shape = shape_entry
    model = random_model(model_type, shape, vocab_size, device, dtype, seed=0)
    prompt = prompt_ids(vocab_size, prompt_len, device)
    row = {"model": model_id, "layers": shape["num_hidden_layers"], "vocab": vocab_size}
    for _ in range(2):      # twice, the first pass a warm-up of everything (clocks, allocator, kernels chosen)
        row |= {"sampled_ms": cached_ms(model, vocab_size, prompt, steps, sample=True),
                "eager_ms": eager_ms(model, prompt, steps),
                "cached_ms": cached_ms(model, vocab_size, prompt, steps, sample=False)}
    row["graph_ms"] = "not on the CPU" if dry_run else graph_ms(model, prompt, steps)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def summary(report: dict) -> str:
    lines = [f"one decode step at batch 1 on {report['device_name']} ({report['dtype']}), prompt "
             f"{report['prompt_tokens']} tokens, median of {report['steps']} steps, ms",
             f"{'model':42} {'layers':>6} {'eager':>8} {'cached':>8} {'sampled':>8} {'graph':>8}"]
    for row in report["rows"]:
        graph = row["graph_ms"]
        graph_text = f"{graph:8.2f}" if isinstance(graph, float) else f"  {graph}"
        lines.append(f"{row['model']:42} {row['layers']:>6} {row['eager_ms']:8.2f} {row['cached_ms']:8.2f} "
                     f"{row['sampled_ms']:8.2f} {graph_text}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU in fp32")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--out", default=None, help="folder for gpu_step_split.json and summary.txt")
    args = parser.parse_args()
    device = torch.device("cpu" if args.dry_run else "cuda")
    dtype = torch.float32 if args.dry_run else torch.bfloat16
    if args.dry_run:
        models = [("tiny random draft", ("llama", DRY_VOCAB_SIZE, DRY_DRAFT_SHAPE))]
    else:
        models = [(model_id, REAL_SHAPES[model_id]) for hub_pair in GPU_PAIRS for model_id in hub_pair]
    rows = [model_row(model_id, entry, device, dtype, args.steps, args.prompt_tokens, args.dry_run)
            for model_id, entry in models]
    import transformers

    report = {"device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
              "dtype": str(dtype).removeprefix("torch."), "torch": torch.__version__,
              "transformers": transformers.__version__, "steps": args.steps, "prompt_tokens": args.prompt_tokens,
              "rows": rows}
    write_summary(args.out, "gpu_step_split.json", report, summary(report))


if __name__ == "__main__":
    main()
