"""How far is SMC-SD from the target's distribution, by particle count N and draft length K, at the shipped settings?
(docs/algorithms.md#smc-sd)

SMC-SD (Emara et al. 2026, arXiv 2604.15672) is APPROXIMATE. On tiny pairs with a 6-token vocabulary the target's
exact distribution of the first 3 generated tokens is enumerated (216 outcomes), and SMC-SD's own distribution of
them is estimated from seeded runs of the real decoder. Each run contributes its final selection distribution
Σ_i w_i δ(particle i's first 3 tokens) (its weights after the last cycle, over its particles' genealogy; a uniform
pick after resampling has the same distribution), whose mean over runs IS SMC-SD's output distribution with
``final = sample`` (a Rao-Blackwellised estimate: far less noise than counting the one chosen particle); with
``final = argmax`` each run contributes its chosen particle. Reported: the total-variation distance to the exact
distribution, its bootstrap standard deviation over runs, and at N = 1 the exact value (the first 3 tokens are
then the drafter's own samples: TV(q, p) over 3 tokens).

Settings: the page's temperature T = 0.7, T_d = T, ESS threshold 0.5, final = sample, power 1 (the shipped
defaults), max_new_tokens = 2 (K + 1): two cycles, with the ESS check between them and the final selection after.
Pairs: a tiny random Llama target with a noisy copy as its draft (noise 0.5 and 0.2), and the noise-0.2 draft
written as a GGUF file and run by llama.cpp (the ``gguf`` drafter's cache, crops and row copies).
The decoder resamples below ESS 1 + threshold · (N − 1) (``particles.resample_line``: 1.5 at N = 2, so the shipped
threshold resamples there too). ``--variants`` adds N = 2 runs with ess_threshold 1.0, final = argmax and draft
temperatures 0.85 and 1.0.

    python benchmarks/smc_tv.py                       # N = 1, 2, 4, 8; K = 4, 8; 1500 runs each (~15 min, 1 core)
    python benchmarks/smc_tv.py --runs 200 --pairs torch-0.5
Writes benchmarks/results/smc_tv.json and .md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacer_core.api import run_request  # noqa: E402
from pacer_core.drafters import new_caches  # noqa: E402
from pacer_core.request import EncodedPrompt, chosen_names, request_for  # noqa: E402
from pacer_core.sampling import token_log_probs  # noqa: E402
from pacer_core.settings import Limits, validate_settings  # noqa: E402
from pacer_core.testing.enumeration import target_sequence_distribution  # noqa: E402
from pacer_core.testing.tiny import tiny_pair  # noqa: E402

VOCAB, SCALE = 6, 10.0
PROMPT = [1, 2]
N_TOKENS, TEMPERATURE, ESS_THRESHOLD = 3, 0.7, 0.5
VARIANTS = {"ess_threshold=1.0": {"ess_threshold": 1.0}, "final=argmax": {"final": "argmax"},
            "draft_temperature=0.85": {"draft_temperature": 0.85}, "draft_temperature=1.0": {"draft_temperature": 1.0}}


def build_pair(name: str, folder: Path):
    """torch-0.5, torch-0.2: a noisy copy drafts; gguf-0.2: the noise-0.2 copy written as GGUF, run by llama.cpp."""
    noise = float(name.split("-")[1])
    target, drafter = tiny_pair(vocab_size=VOCAB, scale=SCALE, draft_noise=noise)
    if name.startswith("gguf"):
        from pacer_core.drafters import LoadedDrafters, load_drafter
        from pacer_core.testing.gguf_file import write_llama_gguf
        written = write_llama_gguf(drafter.model, target.tokenizer, folder / f"{name}.gguf")
        drafter = load_drafter(target, LoadedDrafters.around(drafter, gguf_file=str(written)), "gguf")
    return target, drafter


@torch.inference_mode()
def drafter_sequence_distribution(target, drafter, temperature: float) -> dict[tuple, float]:
    """The drafter's own distribution q of the first N_TOKENS tokens (SMC-SD's output at N = 1 when K >= N_TOKENS),
    through the drafter's cache with full support, as SMC-SD draws from it."""
    distribution = {}
    for prefix in itertools.product(range(VOCAB), repeat=N_TOKENS - 1):
        _, cache = new_caches(target, drafter, full_support=True)
        logits = cache.forward(torch.tensor([PROMPT + list(prefix)]))[0, len(PROMPT) - 1:]      # [N_TOKENS, V]
        probs = token_log_probs(logits.float(), temperature).exp()
        prefix_prob = float(torch.prod(probs[torch.arange(N_TOKENS - 1), list(prefix)]))
        for last in range(VOCAB):
            distribution[prefix + (last,)] = prefix_prob * float(probs[-1, last])
    return distribution


def final_particles(events) -> list[list[int]]:
    """Every particle's tokens after the last cycle, following the genealogy: each cycle appends the particles'
    new tokens, then row i copies row ``ancestors[i]``."""
    rows = [[] for _ in events[0].particle_token_ids]
    for event in events:
        rows = [row + list(new) for row, new in zip(rows, event.particle_token_ids)]
        rows = [list(rows[ancestor]) for ancestor in event.ancestors]
    return rows


def selection_distribution(events, result, final: str) -> dict[tuple, float]:
    """One run's distribution of its output's first N_TOKENS: Σ_i w_i δ(particle i) (sample), δ(chosen) (argmax)."""
    if final == "argmax":
        return {tuple(result.token_ids[:N_TOKENS]): 1.0}
    spread = defaultdict(float)
    for row, weight in zip(final_particles(events), result.info["final_weights"]):
        spread[tuple(row[:N_TOKENS])] += weight
    return spread


def tv_of_mean(per_run: torch.Tensor, exact: torch.Tensor) -> float:
    """TV between the mean of per-run distributions [R, O] and the exact one [O]."""
    return 0.5 * float((per_run.mean(0) - exact).abs().sum())


def bootstrap_std(per_run: torch.Tensor, exact: torch.Tensor, generator: torch.Generator, reps: int = 200) -> float:
    rows = torch.randint(per_run.shape[0], (reps, per_run.shape[0]), generator=generator)
    return float(torch.tensor([tv_of_mean(per_run[index], exact) for index in rows]).std())


def smc_settings(n_particles: int, draft_len: int, variant: dict):
    raw = {"temperature": TEMPERATURE, "max_new_tokens": 2 * (draft_len + 1), "n_particles": n_particles,
           "draft_len": draft_len, "ess_threshold": ESS_THRESHOLD, "power": 1.0, "final": "sample"} | variant
    limits = Limits(max_particles=max(n_particles, 1))
    return validate_settings(limits, **raw), chosen_names(raw), limits


def run_config(target, drafter, outcomes: list[tuple], exact: torch.Tensor, n_particles: int, draft_len: int, variant: dict,
               runs: int, generator: torch.Generator) -> dict:
    settings, names, limits = smc_settings(n_particles, draft_len, variant)
    request = request_for(target, drafter, "smc", settings, names, EncodedPrompt(tuple(PROMPT)), limits)
    index = {outcome: i for i, outcome in enumerate(outcomes)}
    per_run = torch.zeros(runs, len(outcomes), dtype=torch.float64)
    resampled_runs, started = 0, time.perf_counter()
    for seed in range(runs):
        *events, result = run_request(target, request.reseeded(seed))
        for outcome, weight in selection_distribution(events, result, settings.final).items():
            per_run[seed, index[outcome]] += weight
        resampled_runs += any(event.resampled for event in events)
    return {"n_particles": n_particles, "draft_len": draft_len, "runs": runs, "tv": tv_of_mean(per_run, exact),
            "tv_bootstrap_std": bootstrap_std(per_run, exact, generator), "runs_with_resampling": resampled_runs,
            "seconds": time.perf_counter() - started}


def run(pair_names: list[str], particles: list[int], draft_lens: list[int], runs: int, variants: bool) -> dict:
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    rows, pairs_info = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for name in pair_names:
            target, drafter = build_pair(name, Path(folder))
            exact_dict = target_sequence_distribution(target.model, PROMPT, N_TOKENS, TEMPERATURE)
            outcomes = sorted(exact_dict)
            exact = torch.tensor([exact_dict[o] for o in outcomes], dtype=torch.float64)
            drafted = drafter_sequence_distribution(target, drafter, TEMPERATURE)
            tv_draft = 0.5 * sum(abs(drafted[o] - exact_dict[o]) for o in outcomes)
            pairs_info[name] = {"tv_draft_exact": tv_draft}
            configs = [(n, k, "shipped", {}) for k in draft_lens for n in particles]
            if variants:
                configs += [(2, draft_lens[0], label, extra) for label, extra in VARIANTS.items()]
            for n_particles, draft_len, label, extra in configs:
                row = {"pair": name, "variant": label} | run_config(target, drafter, outcomes, exact, n_particles, draft_len,
                                                                     extra, runs, generator)
                if n_particles == 1 and label == "shipped":
                    row["tv_exact"] = tv_draft
                rows.append(row)
                print(json.dumps(row), flush=True)
    return {"benchmark": "smc_tv", "approximate_method": "SMC-SD (Emara et al. 2026, arXiv 2604.15672)",
            "setting": {"vocab_size": VOCAB, "lm_head_scale": SCALE, "prompt": PROMPT, "first_tokens": N_TOKENS,
                        "max_new_tokens": "2 (K + 1)", "temperature": TEMPERATURE, "draft_temperature": "T",
                        "ess_threshold": ESS_THRESHOLD, "final": "sample", "seeds": f"0..{runs - 1}"},
            "pairs": pairs_info, "results": rows,
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip() + ", CPU, 1 thread",
            "torch": torch.__version__}


def to_markdown(report: dict) -> str:
    setting = report["setting"]
    lines = ["# SMC-SD: total variation to the exact target distribution", "",
             "SMC-SD is **approximate** (Emara et al. 2026, arXiv 2604.15672): its output only approaches the "
             "target's distribution as the number of particles N grows.", "",
             f"Tiny random Llama targets, vocabulary {setting['vocab_size']}, first {setting['first_tokens']} generated "
             f"tokens ({setting['vocab_size'] ** setting['first_tokens']} outcomes, enumerated exactly from the target), "
             f"T = T_d = {setting['temperature']}, ESS threshold {setting['ess_threshold']}, final = sample, "
             f"max_new_tokens = 2 (K + 1) (two cycles), seeds {setting['seeds']}; SMC-SD's distribution estimated "
             "from each run's final weights over its particles (Rao-Blackwellised). Produced by "
             "`python benchmarks/smc_tv.py`.", "",
             "| pair | K | N | settings | TV (± bootstrap std) | exact TV | runs that resampled | seconds |",
             "|------|---|---|----------|----------------------|----------|---------------------|---------|"]
    for row in report["results"]:
        exact = f"{row['tv_exact']:.3f}" if "tv_exact" in row else "–"
        lines.append(f"| {row['pair']} | {row['draft_len']} | {row['n_particles']} | {row['variant']} | "
                     f"{row['tv']:.3f} ± {row['tv_bootstrap_std']:.3f} | {exact} | {row['runs_with_resampling']} / "
                     f"{row['runs']} | {row['seconds']:.0f} |")
    lines += ["", "exact TV at N = 1: TV(q, p) over the 3 tokens, enumerated from the drafter (its own samples are "
              "SMC-SD's output at N = 1).", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1500)
    parser.add_argument("--particles", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--draft-lens", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--pairs", nargs="+", default=["torch-0.5", "torch-0.2", "gguf-0.2"])
    parser.add_argument("--no-variants", action="store_true", help="skip the N = 2 setting variants")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    report = run(args.pairs, args.particles, args.draft_lens, args.runs, not args.no_variants)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "smc_tv.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "smc_tv.md").write_text(to_markdown(report))
    print(to_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
