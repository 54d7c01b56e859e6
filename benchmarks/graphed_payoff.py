"""What the graphed engine pays on a GPU (issue 52 items 3-4): end-to-end tokens/s of every decoder with every
model call on static caches replayed from CUDA graphs, against graphed AR, and the speedup to expect at other
acceptance rates from the step costs measured here.

Two pairs in the real shapes of the GPU default pair (Qwen2.5-7B + 0.5B, random weights, bf16, batch 1):

  twin    the draft agrees with the target by construction (``make_twins``: every layer's output projections
          zeroed in both models, so each layer adds nothing while its matmuls still run at full size; the target's
          embedding, final norm and output layer padded copies of the draft's), so greedy acceptance is 1 and a
          fixed:γ pass emits γ + 1 tokens: the speedup is measured, not modelled;
  random  two unrelated random models: SMC-SD's rows (its speed does not depend on acceptance).

Rows, all greedy on the twin pair unless marked: AR graphed, AR eager (``PACER_GRAPHED`` off: the dynamic cache,
so what the graphs and the static cache save together), fixed:2/4/8, PACER, transformers' assisted generation (``generate(assistant_model=...)``, constant
γ = 4, greedy; its tokens must equal our fixed:4's), and on the random pair AR T=1, SMC-SD 4:4 and 8:8 at T = 1.
Step costs, graphed, from direct calls of the caches (medians): the target's one-token step (AR's), the draft's
one-token step (c = its share of AR's) and the verification of γ + 1 tokens for γ = 1..8 (v(γ)); then the expected
speedup (1 - α^(γ+1)) / ((1 - α)(γ·c + v(γ))) (Leviathan et al. 2023) at α = 0.6..0.9 with the best γ for each,
and the twin fixed:γ speedup predicted at α = 1, (γ + 1) / (γ·c + v(γ)), beside the measured one.

    python benchmarks/graphed_payoff.py --out benchmarks/results/graphed-payoff-h200   # a GPU; ~2-3 min on an H200
    python benchmarks/graphed_payoff.py --dry                                          # the CPU, tiny shapes, seconds

On the CPU the static caches run eagerly (graphs need CUDA): the dry form checks the plumbing (the twins agree,
every row runs, the tokens match the peer's), not a speed. scripts/device_check.sh runs the GPU form."""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from device_check import (REAL_SHAPES, MethodRow, NumberTokenizer, machine, random_model, row_request,  # noqa: E402
                          synchronize, timed_run)
from pacer_core import graphed  # noqa: E402
from pacer_core.models import target_from_models  # noqa: E402
from benchmarks.results_writer import write_summary  # noqa: E402

TARGET_ID, DRAFT_ID = "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"
DRY_SHAPES = {"target": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "intermediate_size": 128, "tie_word_embeddings": False},
              "draft": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "intermediate_size": 64}}
DRY_VOCAB = 512
ALPHAS = (0.6, 0.7, 0.8, 0.9)
GAMMAS = tuple(range(1, 9))
PEER_GAMMA = 4

TWIN_ROWS = [MethodRow("ar", "ar", 0.0, {}), MethodRow("ar eager", "ar", 0.0, {}),
             MethodRow("fixed:2", "fixed", 0.0, {"gamma": 2}), MethodRow("fixed:4", "fixed", 0.0, {"gamma": 4}),
             MethodRow("fixed:8", "fixed", 0.0, {"gamma": 8}), MethodRow("pacer", "pacer", 0.0, {})]
RANDOM_ROWS = [MethodRow("ar T=1", "ar", 1.0, {}),
               MethodRow("smc:4:4 T=1", "smc", 1.0, {"n_particles": 4, "draft_len": 4}),
               MethodRow("smc:8:8 T=1", "smc", 1.0, {"n_particles": 8, "draft_len": 8})]
EAGER_ROWS = {"ar eager"}


# ---- pure arithmetic ----------------------------------------------------------------------------------------------

def expected_speedup(alpha: float, gamma: int, draft_cost: float, verify_cost: float) -> float:
    """Tokens per pass over the pass's cost in AR steps: (1 - α^(γ+1)) / ((1 - α)(γ·c + v)); at α = 1 the
    numerator's limit γ + 1 (Leviathan et al. 2023, with c and v as fractions of one AR step)."""
    tokens = gamma + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)
    return tokens / (gamma * draft_cost + verify_cost)


def best_gamma_table(draft_cost: float, verify_costs: dict[int, float], alphas=ALPHAS) -> list[dict]:
    """For each α, the γ (among ``verify_costs``' keys) with the highest expected speedup, and that speedup."""
    rows = []
    for alpha in alphas:
        gamma = max(verify_costs, key=lambda g: expected_speedup(alpha, g, draft_cost, verify_costs[g]))
        rows.append({"alpha": alpha, "best_gamma": gamma,
                     "speedup": expected_speedup(alpha, gamma, draft_cost, verify_costs[gamma])})
    return rows


# ---- the twin pair --------------------------------------------------------------------------------------------------

TWIN_LOGIT_SCALE = 50.0   # random output rows give near-uniform softmaxes; a trained model's are peaked


@torch.no_grad()
def make_twins(target, draft, logit_scale: float = TWIN_LOGIT_SCALE) -> None:
    """Make ``target`` compute the same logits as ``draft`` (in place, both Llama/Qwen2-style with the same vocabulary
    and target hidden size >= the draft's): every layer's attention output and MLP down projections zeroed in both
    (each layer then adds nothing to the residual stream, while its products still run at full size), the target's
    embedding and output rows the draft's padded with zeros, and its final norm the draft's rescaled so that the
    RMS over the padded width gives the same normalized values: with H_d of H_t dimensions nonzero, the mean square
    over H_t is H_d / H_t of the draft's, so the weight and epsilon are scaled by sqrt(H_d / H_t) and H_d / H_t.
    Both models' output rows are multiplied by ``logit_scale`` first, so the draft is as confident as a trained one
    (PACER's stopping rule reads that confidence); the argmax, and so greedy acceptance, does not change."""
    for model in (target, draft):
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
            for module in (layer.self_attn.o_proj, layer.mlp.down_proj):
                if module.bias is not None:
                    module.bias.zero_()
    draft.get_output_embeddings().weight.mul_(logit_scale)
    if draft.get_output_embeddings().weight is draft.model.embed_tokens.weight:
        draft.model.norm.weight.mul_(logit_scale)         # tied rows: the scale must reach the logits, not the input
        draft.get_output_embeddings().weight.div_(logit_scale)
    draft_width, target_width = draft.config.hidden_size, target.config.hidden_size
    ratio = draft_width / target_width
    target.model.embed_tokens.weight.zero_()
    target.model.embed_tokens.weight[:, :draft_width] = draft.model.embed_tokens.weight
    norm = target.model.norm
    norm.weight.zero_()
    norm.weight[:draft_width] = draft.model.norm.weight * ratio ** 0.5
    norm.variance_epsilon = draft.model.norm.variance_epsilon * ratio
    output = target.get_output_embeddings().weight
    output.zero_()
    output[:, :draft_width] = draft.get_output_embeddings().weight


def build_pair(twin: bool, dry: bool, device: torch.device, dtype: torch.dtype):
    """(pair, drafter): the twin or the random pair, in the GPU default pair's real shapes or the dry tiny ones."""
    if dry:
        target_shape, draft_shape, vocab = DRY_SHAPES["target"], DRY_SHAPES["draft"], DRY_VOCAB
        target_vocab = draft_vocab = vocab
    else:
        (_, target_vocab, target_shape), (_, draft_vocab, draft_shape) = REAL_SHAPES[TARGET_ID], REAL_SHAPES[DRAFT_ID]
        if twin:
            draft_vocab = target_vocab      # the twins share one vocabulary (the target's, 128 ids more)
    target = random_model("qwen2", target_shape, target_vocab, device, dtype, seed=0)
    draft = random_model("qwen2", draft_shape, draft_vocab, device, dtype, seed=1)
    if twin:
        make_twins(target, draft)
    name = "twin" if twin else "random"
    return target_from_models(target, draft, NumberTokenizer(min(target_vocab, draft_vocab)),
                            f"{name} {TARGET_ID.split('/')[-1]}-shaped target" if not dry else f"{name} tiny target",
                            f"{name} {DRAFT_ID.split('/')[-1]}-shaped draft" if not dry else f"{name} tiny draft",
                            use_chat_template=False)


# ---- measuring ---------------------------------------------------------------------------------------------------

@contextmanager
def graphed_engine(on: bool):
    """The graphed engine asked for (PACER_GRAPHED=1) or not, for the runs inside; the environment restored after."""
    before = os.environ.get(graphed.GRAPHED_ENV)
    os.environ[graphed.GRAPHED_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(graphed.GRAPHED_ENV, None)
        else:
            os.environ[graphed.GRAPHED_ENV] = before


def run_once(target, drafter, row: MethodRow, prompt_ids: list[int], max_new_tokens: int, seed: int = 0):
    """One run of the row: (its Result, the median wall time of a step after the first, in ms)."""
    request = row_request(target, drafter, row, prompt_ids, max_new_tokens).reseeded(seed)
    with graphed_engine(row.label not in EAGER_ROWS):
        steps, result = timed_run(target, request)
    return result, 1e3 * statistics.median(step for step, _, _ in steps) if steps else 0.0


def assisted_run(target, drafter, prompt_ids: list[int], max_new_tokens: int) -> tuple[list[int], float]:
    """transformers' assisted generation, greedy, constant γ = PEER_GAMMA: (its new tokens, seconds)."""
    assistant = drafter.model
    assistant.generation_config.num_assistant_tokens = PEER_GAMMA
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.assistant_confidence_threshold = 0.0
    input_ids = torch.tensor([prompt_ids], device=target.device)
    synchronize(target.device)
    started = time.perf_counter()
    output = target.model.generate(input_ids, assistant_model=assistant, do_sample=False, max_new_tokens=max_new_tokens,
                                  min_new_tokens=max_new_tokens, pad_token_id=0)
    synchronize(target.device)
    return output[0, len(prompt_ids):].tolist(), time.perf_counter() - started


@torch.inference_mode()
def step_costs(target, drafter, prompt_ids: list[int], steps: int) -> dict:
    """Median ms of the graphed target's one-token step, the draft's one-token step, and the target's verification
    of γ + 1 tokens (γ in GAMMAS; cropped back after each call), each after its capture."""
    target_cache = graphed.target_cache(target)
    draft = graphed.draft_cache(drafter.new_cache(target_cache))
    token = prompt_ids[-1]

    def median_ms(cache, fed: int) -> float:
        cache.crop(len(prompt_ids) - 1)
        cache.forward(prompt_ids[-1:], keep=1)
        times = []
        for index in range(steps + 2):                   # the first two: capture and one replay
            synchronize(target.device)
            started = time.perf_counter()
            cache.forward([token] * fed, keep=fed)
            synchronize(target.device)
            times.append((time.perf_counter() - started) * 1e3)
            cache.crop(len(prompt_ids))
        return statistics.median(times[2:])

    target_cache.forward(prompt_ids[:-1], keep=1)
    draft.forward(prompt_ids[:-1], keep=1)
    costs = {"ar_step_ms": median_ms(target_cache, 1), "draft_step_ms": median_ms(draft, 1)}
    costs["verify_ms"] = {gamma: median_ms(target_cache, gamma + 1) for gamma in GAMMAS}
    costs["c"] = costs["draft_step_ms"] / costs["ar_step_ms"]
    costs["v"] = {gamma: ms / costs["ar_step_ms"] for gamma, ms in costs["verify_ms"].items()}
    return costs


def measure_rows(target, drafter, rows: list[MethodRow], prompt_ids, args, deadline: float, errors: dict) -> list[dict]:
    """Each row warmed up once (its graphs captured), then ``args.repeats`` interleaved timed runs: medians. A row
    that fails is left out with its error in ``errors``; one not started by ``deadline`` with "skipped"."""
    live = []
    for row in rows:
        if time.perf_counter() > deadline:
            errors[row.label] = "skipped: time budget"
        elif attempt(errors, row.label, run_once, target, drafter, row, prompt_ids, args.max_new_tokens) is not None:
            live.append(row)
    runs = {row.label: [] for row in live}
    for repeat in range(args.repeats):
        for row in live:
            if row.label not in errors:
                measured = attempt(errors, row.label, run_once, target, drafter, row, prompt_ids, args.max_new_tokens,
                                   repeat)
                if measured is not None:
                    runs[row.label].append(measured)
    table = []
    for row in live:
        if row.label in errors or not runs[row.label]:
            continue
        metrics = [result.metrics for result, _ in runs[row.label]]
        table.append({"label": row.label, "graphed": row.label not in EAGER_ROWS,
                      "tokens_per_s": statistics.median(m.tokens_per_s for m in metrics),
                      "median_step_ms": statistics.median(step_ms for _, step_ms in runs[row.label]),
                      "tokens_per_target_call": statistics.median(m.tau for m in metrics),
                      "alpha": metrics[0].alpha, "token_ids": runs[row.label][0][0].token_ids})
    return table


def attempt(errors: dict, name: str, function, *args):
    """``function(*args)``, or None with the error recorded under ``name``: one part failing on a device run leaves
    the others' figures standing."""
    try:
        return function(*args)
    except Exception as error:  # noqa: BLE001 - reported in the summary, not fatal
        errors[name] = f"{type(error).__name__}: {str(error)[:300]}"
        return None


def engine_figures(*models) -> dict:
    engines = [graphed.engine_for(model) for model in models]
    return {"capture_seconds": sum(engine.capture_seconds for engine in engines),
            "captures": sum(engine.captures for engine in engines),
            "engines": [engine.describe() for engine in engines],
            "notes": [note for engine in engines for note in engine.notes]}


def run_payoff(args) -> dict:
    started = time.perf_counter()
    dry = args.dry
    device = torch.device("cpu" if dry else "cuda")
    dtype = torch.float32 if dry else torch.bfloat16
    deadline = started + args.budget_seconds
    generator = torch.Generator().manual_seed(0)
    errors = {}
    report = {"dry": dry, "machine": machine(device, dtype), "prompt_tokens": args.prompt_tokens,
              "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "errors": errors}

    target, drafter = build_pair(True, dry, device, dtype)
    prompt_ids = torch.randint(target.vocab_size, (args.prompt_tokens,), generator=generator).tolist()
    report["twin_rows"] = measure_rows(target, drafter, TWIN_ROWS, prompt_ids, args, deadline, errors)
    report["capture"] = engine_figures(target.model, drafter.model)
    report["costs"] = attempt(errors, "step costs", step_costs, target, drafter, prompt_ids, args.steps)
    peer = attempt(errors, "peer", assisted_run, target, drafter, prompt_ids, args.max_new_tokens)
    ours = next((row for row in report["twin_rows"] if row["label"] == f"fixed:{PEER_GAMMA}"), None)
    report["peer"] = peer and {"label": f"assisted generation γ={PEER_GAMMA} (transformers, eager)",
                               "tokens_per_s": len(peer[0]) / peer[1],
                               "same_tokens": ours is not None and ours["token_ids"] == peer[0]}
    del target, drafter, peer
    gc.collect()                       # the engines and the models refer to each other
    if device.type == "cuda":
        torch.cuda.empty_cache()

    target, drafter = build_pair(False, dry, device, dtype)
    report["random_rows"] = measure_rows(target, drafter, RANDOM_ROWS, prompt_ids, args, deadline, errors)
    report["capture_random_pair"] = engine_figures(target.model, drafter.model)
    report["seconds"] = time.perf_counter() - started
    costs = report["costs"]
    report["expected"] = best_gamma_table(costs["c"], costs["v"]) if costs else []
    report["bars"] = bars(report)
    return report


def row_of(rows: list[dict], label: str) -> dict | None:
    return next((row for row in rows if row["label"] == label), None)


def bars(report: dict) -> list[dict]:
    """Issue 52's bars, each with the measured figure and whether it holds (None: not measured)."""
    twin, random_rows, costs, peer = report["twin_rows"], report["random_rows"], report["costs"], report["peer"]
    ar, fixed4, pacer = row_of(twin, "ar"), row_of(twin, "fixed:4"), row_of(twin, "pacer")
    ar_random, smc = row_of(random_rows, "ar T=1"), row_of(random_rows, "smc:8:8 T=1")
    found = []

    def bar(text: str, value, holds) -> None:
        found.append({"bar": text, "value": value, "holds": holds})

    ratio = fixed4["tokens_per_s"] / ar["tokens_per_s"] if fixed4 and ar else None
    bar("twin fixed:4 >= 1.7x graphed AR", ratio, None if ratio is None else ratio >= 1.7)
    if ratio is not None and costs:
        predicted = expected_speedup(1.0, 4, costs["c"], costs["v"][4])
        bar("twin fixed:4 within 15% of (γ+1)/(γc+v)", ratio / predicted, abs(ratio / predicted - 1) <= 0.15)
    if fixed4 and pacer:
        bar("twin PACER >= fixed:4", pacer["tokens_per_s"] / fixed4["tokens_per_s"],
            pacer["tokens_per_s"] >= fixed4["tokens_per_s"])
    smc_ratio = smc["tokens_per_s"] / ar_random["tokens_per_s"] if smc and ar_random else None
    bar("random SMC-SD 8:8 >= 1.5x graphed AR", smc_ratio, None if smc_ratio is None else smc_ratio >= 1.5)
    if fixed4 and peer:
        peer_ratio = fixed4["tokens_per_s"] / peer["tokens_per_s"]
        bar("fixed:4 >= 2x assisted generation, same tokens", peer_ratio, peer_ratio >= 2 and peer["same_tokens"])
    captures = report["capture"]["capture_seconds"]
    bar("every graph of the twin rows captured in <= 5 s", captures, captures <= 5 if captures else None)
    if ar and costs:
        share = 1 - costs["ar_step_ms"] / ar["median_step_ms"] if ar["median_step_ms"] else None
        bar("AR's non-model time <= 10% of its step", share, None if share is None else share <= 0.10)
    return found


def speedups(rows: list[dict], baseline: str) -> dict[str, float]:
    base = next((row["tokens_per_s"] for row in rows if row["label"] == baseline), None)
    return {row["label"]: row["tokens_per_s"] / base for row in rows} if base else {}


def alpha_text(alpha) -> str:
    return f"{alpha:6.3f}" if alpha is not None else f"{'-':>6}"


def summary_text(report: dict) -> str:
    costs, peer = report["costs"], report["peer"]
    twin_speedups = speedups(report["twin_rows"], "ar")
    lines = [f"graphed payoff on {report['machine']['device_name']} ({report['machine']['dtype']}), prompt "
             f"{report['prompt_tokens']} tokens, {report['max_new_tokens']} new tokens, medians of "
             f"{report['repeats']} interleaved runs, {report['seconds']:.0f} s"
             + ("  [dry run: the CPU runs the static caches eagerly; the figures are no speed]" if report["dry"] else ""),
             f"graphs: {report['capture']['captures']} captured in {report['capture']['capture_seconds']:.2f} s "
             f"(twin pair); {'; '.join(report['capture']['engines'])}"]
    if costs:
        lines.append(f"step costs (graphed, ms): AR step {costs['ar_step_ms']:.2f} (compare gpu_step_split's graph "
                     f"column for the target: the bar is 1.15x), draft step {costs['draft_step_ms']:.2f} "
                     f"(c = {costs['c']:.3f}), verify γ+1: "
                     + ", ".join(f"γ={g} {ms:.2f} (v={costs['v'][g]:.2f})" for g, ms in costs["verify_ms"].items()))
    lines += ["", f"{'twin target (acceptance 1 by construction)':44} {'tok/s':>8} {'x AR':>6} {'step ms':>8} "
              f"{'tok/pass':>8} {'alpha':>6} {'predicted x AR':>14}"]
    for row in report["twin_rows"]:
        gamma = int(row["label"].split(":")[1]) if row["label"].startswith("fixed:") else None
        predicted = (f"{expected_speedup(1.0, gamma, costs['c'], costs['v'][gamma]):14.2f}"
                     if costs and gamma in costs["v"] else f"{'':14}")
        lines.append(f"{row['label']:44} {row['tokens_per_s']:8.1f} {twin_speedups.get(row['label'], 0):6.2f} "
                     f"{row['median_step_ms']:8.2f} {row['tokens_per_target_call']:8.2f} {alpha_text(row['alpha'])} "
                     f"{predicted}")
    ar = row_of(report["twin_rows"], "ar")
    if peer:
        lines.append(f"{peer['label']:44} {peer['tokens_per_s']:8.1f} "
                     f"{peer['tokens_per_s'] / ar['tokens_per_s'] if ar else 0:6.2f}  "
                     f"same tokens as our fixed:{PEER_GAMMA}: {'yes' if peer['same_tokens'] else 'NO'}")
    random_speedups = speedups(report["random_rows"], "ar T=1")
    lines += ["", f"{'random target':44} {'tok/s':>8} {'x AR':>6} {'step ms':>8} {'tok/pass':>8}"]
    for row in report["random_rows"]:
        lines.append(f"{row['label']:44} {row['tokens_per_s']:8.1f} {random_speedups.get(row['label'], 0):6.2f} "
                     f"{row['median_step_ms']:8.2f} {row['tokens_per_target_call']:8.2f}")
    if report["expected"]:
        lines += ["", "expected speedup over graphed AR from the measured c and v(γ):",
                  "  " + "   ".join(f"α={row['alpha']:.1f}: {row['speedup']:.2f}x at γ={row['best_gamma']}"
                                    for row in report["expected"])]
    lines += ["", "issue 52's bars (on a GPU; a dry run's figures mean nothing):"]
    for bar in report["bars"]:
        verdict = {True: "holds", False: "FAILS", None: "not measured"}[bar["holds"]]
        value = "-" if bar["value"] is None else f"{bar['value']:.3f}"
        lines.append(f"  {bar['bar']:52} {value:>8}  {verdict}")
    for name, error in report["errors"].items():
        lines.append(f"error: {name}: {error}")
    notes = report["capture"]["notes"] + report["capture_random_pair"]["notes"]
    if notes:
        lines.append("notes: " + "; ".join(notes))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry", "--dry-run", dest="dry", action="store_true", help="tiny shapes on the CPU, fp32")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default 64 (12 with --dry)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 128 (8 with --dry)")
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (1 with --dry)")
    parser.add_argument("--steps", type=int, default=None, help="calls per step-cost median (default 30; 3 dry)")
    parser.add_argument("--budget-seconds", type=float, default=240.0, help="rows not started by then are skipped")
    parser.add_argument("--out", default=None, help="folder for graphed_payoff.json and summary.txt")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.max_new_tokens = args.max_new_tokens or (12 if args.dry else 64)
    args.prompt_tokens = args.prompt_tokens or (8 if args.dry else 128)
    args.repeats = args.repeats or (1 if args.dry else 3)
    args.steps = args.steps or (3 if args.dry else 30)
    if not args.dry and not torch.cuda.is_available():
        print("graphed_payoff: no CUDA device visible; run with --dry for the CPU form.", file=sys.stderr)
        return 2
    if args.dry:
        torch.set_num_threads(1)
    report = run_payoff(args)
    for rows in (report["twin_rows"], report["random_rows"]):
        for row in rows:
            row.pop("token_ids")
    write_summary(args.out, "graphed_payoff.json", report, summary_text(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
