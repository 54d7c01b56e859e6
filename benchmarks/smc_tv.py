"""How far is SMC-SD from the target's distribution, and does the gap shrink with N? (docs/algorithms.md#smc-sd)

On a tiny random Llama pair with a 6-token vocabulary, the exact distribution of the first 3 generated
tokens is enumerated from the target (216 outcomes). SMC-SD (Emara et al. 2026, arXiv 2604.15672; an
APPROXIMATE method) is run thousands of times with different seeds for each particle count N, and the
total-variation distance between its empirical distribution of those 3 tokens and the exact one is
reported, next to:

* ``noise_floor``: the mean TV that an EXACT sampler reaches with the same number of runs (finite-sample
  noise; no method can beat it with this many runs);
* ``tv_exact`` for N = 1, where SMC-SD is plain "draft K, then one target bonus" and its distribution
  can be enumerated too.

Setting: K = 1, max_new_tokens = 4, so the first 3 tokens are (drafted, bonus, drafted) over two cycles
with an ESS check in between: the weights and the resampling both matter.

    python benchmarks/smc_tv.py                 # N = 1, 4, 16, 64; 20000 runs each (~10 min on 1 core)
    python benchmarks/smc_tv.py --runs 500      # quicker
Writes benchmarks/results/smc_tv.json and .md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacer_core.api import run_request  # noqa: E402
from pacer_core.request import EncodedPrompt, RunRequest, chosen_names, request_for  # noqa: E402
from pacer_core.sampling import token_log_probs  # noqa: E402
from pacer_core.settings import Limits, validate_settings  # noqa: E402
from pacer_core.testing.enumeration import target_sequence_distribution, total_variation  # noqa: E402
from pacer_core.testing.tiny import tiny_pair  # noqa: E402

VOCAB, SCALE, DRAFT_NOISE = 6, 10.0, 0.5
PROMPT = [1, 2]
N_TOKENS, DRAFT_LEN, MAX_NEW_TOKENS, TEMPERATURE, ESS_THRESHOLD = 3, 1, 4, 1.0, 0.5


@torch.inference_mode()
def single_particle_distribution(pair) -> dict[tuple, float]:
    """Exact output distribution of SMC-SD with N = 1 and K = 1: q(t1) p(t2 | t1) q(t3 | t1 t2)."""
    distribution = {}
    for prefix in itertools.product(range(VOCAB), repeat=N_TOKENS - 1):
        ids = torch.tensor([PROMPT + list(prefix)])
        target_log_probs = token_log_probs(pair.target(input_ids=ids).logits[0, len(PROMPT) - 1:], TEMPERATURE)
        draft_log_probs = token_log_probs(pair.draft(input_ids=ids).logits[0, len(PROMPT) - 1:], TEMPERATURE)
        prefix_prob = float(draft_log_probs[0, prefix[0]].exp() * target_log_probs[1, prefix[1]].exp())
        for last in range(VOCAB):
            distribution[prefix + (last,)] = prefix_prob * float(draft_log_probs[2, last].exp())
    return distribution


def sampled_tv(distribution: dict[tuple, float], runs: int, generator: torch.Generator) -> float:
    """TV of ``runs`` i.i.d. draws from ``distribution`` against itself (finite-sample noise)."""
    outcomes = list(distribution)
    probs = torch.tensor([distribution[o] for o in outcomes], dtype=torch.float64)
    draws = torch.multinomial(probs, runs, replacement=True, generator=generator).tolist()
    return total_variation(Counter(outcomes[i] for i in draws), distribution)


def bootstrap_std(counts: Counter, exact: dict[tuple, float], generator: torch.Generator, reps: int = 200) -> float:
    outcomes = list(counts)
    freqs = torch.tensor([counts[o] for o in outcomes], dtype=torch.float64)
    total = int(freqs.sum())
    values = []
    for _ in range(reps):
        draws = torch.multinomial(freqs, total, replacement=True, generator=generator).tolist()
        values.append(total_variation(Counter(outcomes[i] for i in draws), exact))
    return float(torch.tensor(values).std())


def smc_request(pair, n_particles: int) -> RunRequest:
    """SMC-SD with N particles on PROMPT, seed 0, validated once. A study, not a Space: the particle cap
    is N itself."""
    limits = Limits(max_particles=n_particles)
    raw = {"temperature": TEMPERATURE, "max_new_tokens": MAX_NEW_TOKENS, "n_particles": n_particles,
           "draft_len": DRAFT_LEN, "ess_threshold": ESS_THRESHOLD, "power": 1.0, "final": "sample"}
    return request_for(pair, "smc", validate_settings(limits, **raw), chosen_names(raw),
                       EncodedPrompt(tuple(PROMPT)), limits)


def run(particles: list[int], runs: int) -> dict:
    torch.set_num_threads(1)
    pair = tiny_pair(vocab_size=VOCAB, scale=SCALE, draft_noise=DRAFT_NOISE)
    exact = target_sequence_distribution(pair.target, PROMPT, N_TOKENS, TEMPERATURE)
    generator = torch.Generator().manual_seed(0)
    noise_floor = sum(sampled_tv(exact, runs, generator) for _ in range(20)) / 20
    rows = []
    for n_particles in particles:
        request = smc_request(pair, n_particles)
        counts, resampled_runs, started = Counter(), 0, time.perf_counter()
        for seed in range(runs):
            *events, result = run_request(pair, request.reseeded(seed))
            counts[tuple(result.token_ids[:N_TOKENS])] += 1
            resampled_runs += any(event.resampled for event in events)
        row = {"n_particles": n_particles, "runs": runs, "tv": total_variation(counts, exact),
               "tv_bootstrap_std": bootstrap_std(counts, exact, generator),
               "runs_with_resampling": resampled_runs, "seconds": time.perf_counter() - started}
        if n_particles == 1:
            row["tv_exact"] = 0.5 * sum(abs(p - exact[o]) for o, p in single_particle_distribution(pair).items())
        rows.append(row)
        print(json.dumps(row), flush=True)
    tvs = [row["tv"] for row in rows]
    return {"benchmark": "smc_tv", "approximate_method": "SMC-SD (Emara et al. 2026, arXiv 2604.15672)",
            "setting": {"vocab_size": VOCAB, "lm_head_scale": SCALE, "draft_noise": DRAFT_NOISE, "prompt": PROMPT,
                        "first_tokens": N_TOKENS, "draft_len": DRAFT_LEN, "max_new_tokens": MAX_NEW_TOKENS,
                        "temperature": TEMPERATURE, "ess_threshold": ESS_THRESHOLD, "final": "sample",
                        "seeds": f"0..{runs - 1}"},
            "noise_floor": noise_floor, "results": rows,
            "decreasing_with_n": all(a > b for a, b in zip(tvs, tvs[1:])),
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip() + ", CPU, 1 thread",
            "torch": torch.__version__}


def to_markdown(report: dict) -> str:
    setting = report["setting"]
    lines = ["# SMC-SD: total variation to the exact target distribution", "",
             "SMC-SD is **approximate** (Emara et al. 2026, arXiv 2604.15672): its output only approaches the "
             "target's distribution as the number of particles N grows.", "",
             f"Tiny random Llama pair, vocabulary {setting['vocab_size']}, first {setting['first_tokens']} "
             f"generated tokens ({setting['vocab_size'] ** setting['first_tokens']} outcomes, enumerated exactly "
             f"from the target), K = {setting['draft_len']}, max_new_tokens = {setting['max_new_tokens']}, "
             f"T = T_d = {setting['temperature']}, ESS threshold {setting['ess_threshold']}, seeds "
             f"{setting['seeds']}. Produced by `python benchmarks/smc_tv.py`.", "",
             "| N | runs | TV (± bootstrap std) | exact TV | runs that resampled | seconds |",
             "|---|------|----------------------|----------|---------------------|---------|"]
    for row in report["results"]:
        exact = f"{row['tv_exact']:.3f}" if "tv_exact" in row else "–"
        lines.append(f"| {row['n_particles']} | {row['runs']} | {row['tv']:.3f} ± {row['tv_bootstrap_std']:.3f} | "
                     f"{exact} | {row['runs_with_resampling']} | {row['seconds']:.1f} |")
    lines += ["", f"Noise floor (mean TV of the same number of EXACT samples): {report['noise_floor']:.3f}. "
              f"Decreasing with N: **{report['decreasing_with_n']}**.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--particles", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    report = run(args.particles, args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "smc_tv.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "smc_tv.md").write_text(to_markdown(report))
    print(to_markdown(report))
    return 0 if report["decreasing_with_n"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
