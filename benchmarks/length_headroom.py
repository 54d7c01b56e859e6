"""How much any length policy could gain over the best fixed length, read from one run's long drafts.

PACER drafts every step to ``--max-draft-len`` (the threshold rule at 0: nothing stops a draft early) and the target
rules on every drafted token, so each full step gives, per position i, the pre-verifier's acceptance estimate e_i and
the target's acceptance probability a_i = min(1, p(x_i)/q(x_i)) of the token drafted there (greedy: 1 where it is the
target's argmax, else 0), given the tokens before it were kept. A draft of k tokens then yields
E(k) = 1 + Σ_{i≤k} Π_{j≤i} a_j tokens in expectation (docs/algorithms.md#cost-aware-stopping) and costs C(k) AR steps
(the drafter's stored cost model, ``stopping.StepCosts.step``). Over the run's full steps:

* fixed:k, every k up to the cap: Σ E_s(k) / Σ C(k);
* the estimates' policy (reading them as the cost rule does: through a trained layer's calibration of its greedy
  estimates, ``training/calibration.py``): per step, the k that maximises 1 + Σ_{i≤k} Π e_j − R·C(k), R the rate
  that policy itself predicts (Dinkelbach's iteration), scored with the a's. It reads the whole draft's estimates at
  once, so it bounds what a policy reading e (PACER reads them a token at a time) can reach on these costs;
* the probabilities' policy: the same reading the a's, the best a policy can do that sees each drafted token and
  knows how likely the target keeps it, but not the draw (greedy: the oracle, which knows where the first miss is);
* PACER's cost rule as it runs, a token at a time (``stopping.decide_extension`` on the estimates so far, the next
  token expected at the stored mean acceptance), on the same costs.

Also: how well the raw estimates predict the a's (mean a by estimate bin, the slope of a on e).

    .venv/bin/python benchmarks/length_headroom.py --temperature 0.7 --samples 4 --out benchmarks/results/length-headroom-t0.7
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.results_writer import write_folder_or_print  # noqa: E402
from pacer_core import load_target  # noqa: E402
from pacer_core.decoders.pacer import pair_cost_model  # noqa: E402
from pacer_core.drafters import load_drafter  # noqa: E402
from pacer_core.long_drafts import long_draft_steps  # noqa: E402
from pacer_core.preverifier import default_preverifier  # noqa: E402
from pacer_core.prompts import load_prompts  # noqa: E402
from pacer_core.request import encode_prompt  # noqa: E402
from pacer_core.settings import Limits  # noqa: E402
from pacer_core.stopping import StepCosts, decide_extension, least_squares_line  # noqa: E402


def prefix_values(accept_probs: list[float]) -> list[float]:
    """[E(0), E(1), …, E(K)]: E(k) = 1 + Σ_{i≤k} Π_{j≤i} a_j, the expected tokens of a draft cut after k tokens."""
    values, kept = [1.0], 1.0
    for probability in accept_probs:
        kept *= probability
        values.append(values[-1] + kept)
    return values


def best_length(values: list[float], step_costs: list[float], rate: float) -> int:
    """The k maximising values[k] − rate · step_costs[k] (the first such k)."""
    scores = [value - rate * cost for value, cost in zip(values, step_costs)]
    return scores.index(max(scores))


def policy_rate(steps: list[dict], step_costs: list[float], reading: str, rounds: int = 50) -> tuple[float, float]:
    """(rate scored with the a's, mean length) of the policy that reads ``reading`` ("estimates" or "accept_probs")
    per step, at the rate it predicts for itself (Dinkelbach: R ← Σ its values / Σ its costs until it settles)."""
    rate = 1.0
    for _ in range(rounds):
        lengths = [best_length(prefix_values(step[reading]), step_costs, rate) for step in steps]
        predicted = sum(prefix_values(step[reading])[k] for step, k in zip(steps, lengths)) / \
            sum(step_costs[k] for k in lengths)
        if abs(predicted - rate) < 1e-9:
            break
        rate = predicted
    return rate_of(steps, step_costs, lengths), statistics.fmean(lengths)


def cost_rule_lengths(steps: list[dict], costs: StepCosts, next_accept: float) -> list[int]:
    """The length PACER's cost rule drafts each step to, reading the estimates a token at a time: after each drafted
    token it drafts one more while ``decide_extension`` says that raises the step's expected tokens per unit of
    cost, the next token expected to be kept with ``next_accept`` (the stored mean acceptance)."""
    lengths = []
    for step in steps:
        estimates, length = step["estimates"], 1
        while length < len(estimates) and decide_extension(estimates[:length], next_accept, 1, costs).extend:
            length += 1
        lengths.append(length)
    return lengths


def rate_of(steps: list[dict], step_costs: list[float], lengths: list[int]) -> float:
    """Σ E_s(k_s) / Σ C(k_s), E scored with the target's acceptance probabilities."""
    return sum(prefix_values(step["accept_probs"])[k] for step, k in zip(steps, lengths)) / \
        sum(step_costs[k] for k in lengths)


def fixed_rates(steps: list[dict], step_costs: list[float]) -> dict[int, float]:
    """{k: Σ E_s(k) / (steps · C(k))} for k = 1 … the cap."""
    cap = len(step_costs) - 1
    return {k: sum(prefix_values(step["accept_probs"])[k] for step in steps) / (len(steps) * step_costs[k])
            for k in range(1, cap + 1)}


def calibration(steps: list[dict], bins: int = 6) -> dict:
    """Mean estimate and mean a per estimate bin (equal counts), and the least-squares slope of a on e."""
    pairs = sorted((e, a) for step in steps for e, a in zip(step["estimates"], step["accept_probs"]))
    if len(pairs) < 2:
        return {"tokens": len(pairs), "bins": [], "slope": None}
    estimates, actual = [e for e, _ in pairs], [a for _, a in pairs]
    mean_e, mean_a = statistics.fmean(estimates), statistics.fmean(actual)
    slope = least_squares_line(estimates, actual)[1] if len(set(estimates)) > 1 else None
    size = math.ceil(len(pairs) / bins)
    chunks = [pairs[start:start + size] for start in range(0, len(pairs), size)]
    return {"tokens": len(pairs), "mean_estimate": mean_e, "mean_accept_prob": mean_a, "slope": slope,
            "bins": [{"tokens": len(chunk), "estimate_low": chunk[0][0], "estimate_high": chunk[-1][0],
                      "mean_estimate": statistics.fmean(e for e, _ in chunk),
                      "mean_accept_prob": statistics.fmean(a for _, a in chunk)} for chunk in chunks]}


def collect(target, drafter, preverifier, prompts: list[dict], args) -> tuple[list[dict], list[int]]:
    """Every full step of a long-draft PACER run per prompt and sample; and each prompt's length."""
    steps, prompt_lengths = [], []
    for record in prompts:
        for sample in range(args.samples if args.temperature > 0 else 1):
            steps += long_draft_steps(target, drafter, preverifier, record["prompt"], args.max_draft_len,
                                      args.max_new_tokens, args.temperature, args.seed + sample)
        prompt_lengths.append(len(encode_prompt(target, record["prompt"], None, Limits.from_env()).ids))
    return steps, prompt_lengths


def headroom(steps: list[dict], costs: StepCosts, cap: int, next_accept: float, read=None) -> dict:
    """Fixed lengths, the two policies and PACER's cost rule, and their ratios to the best fixed length; the
    estimates' policy and the cost rule read each estimate through ``read`` (the cost rule's reading of the
    pre-verifier's estimates, ``TrainedPreVerifier.cost_rule_estimate``) when one is given."""
    if read is not None:
        steps = [step | {"estimates": [read(estimate) for estimate in step["estimates"]]} for step in steps]
    step_costs = [costs.step(k) for k in range(cap + 1)]
    fixed = fixed_rates(steps, step_costs)
    best_k = max(fixed, key=fixed.get)
    estimates_rate, estimates_length = policy_rate(steps, step_costs, "estimates")
    probs_rate, probs_length = policy_rate(steps, step_costs, "accept_probs")
    rule_lengths = cost_rule_lengths(steps, costs, next_accept)
    rule_rate = rate_of(steps, step_costs, rule_lengths)
    return {"steps": len(steps), "step_costs": step_costs, "fixed": fixed, "best_fixed": best_k,
            "estimates_policy": {"rate": estimates_rate, "mean_length": estimates_length,
                                 "over_best_fixed": estimates_rate / fixed[best_k]},
            "probabilities_policy": {"rate": probs_rate, "mean_length": probs_length,
                                     "over_best_fixed": probs_rate / fixed[best_k]},
            "cost_rule": {"rate": rule_rate, "mean_length": statistics.fmean(rule_lengths),
                          "over_best_fixed": rule_rate / fixed[best_k], "next_accept": next_accept}}


def markdown(report: dict) -> str:
    found, calibrated = report["headroom"], report["calibration"]
    fixed = found["fixed"]
    shown = sorted({1, 2, 3, 4, 6, 8, 12, 16, found["best_fixed"], max(fixed)} & set(fixed))
    costs = ", ".join(f"{k}: {found['step_costs'][k]:.2f}" for k in shown)
    lines = [f"# Length headroom ({report['date']})", "",
             f"{report['prompt_count']} prompts from {report['prompts']}, T = {report['temperature']}, "
             f"{report['samples']} sample(s) a prompt, {report['max_new_tokens']} new tokens, drafts of "
             f"{report['max_draft_len']} every step; {found['steps']} full steps. Costs: {report['costs_source']} "
             f"(C(k) in AR steps: {costs}).", "",
             "| policy | expected tokens per AR step | over the best fixed | mean length |", "| --- | --- | --- | --- |"]
    lines += [f"| fixed:{k} | {fixed[k]:.3f} | {fixed[k] / fixed[found['best_fixed']]:.3f} | {k} |" for k in shown]
    for name, key in (("PACER's cost rule (a token at a time)", "cost_rule"),
                      ("reads the estimates (whole draft)", "estimates_policy"), ("reads min(1, p/q)", "probabilities_policy")):
        row = found[key]
        lines.append(f"| {name} | {row['rate']:.3f} | **{row['over_best_fixed']:.3f}** | {row['mean_length']:.1f} |")
    lines += ["", f"Estimates against the target's acceptance probability ({calibrated['tokens']} drafted tokens; "
              f"slope of a on e: {slope_text(calibrated['slope'])}):",
              "", "| estimate | tokens | mean estimate | mean min(1, p/q) |", "| --- | --- | --- | --- |"]
    lines += [f"| {b['estimate_low']:.3f}-{b['estimate_high']:.3f} | {b['tokens']} | {b['mean_estimate']:.3f} | "
              f"{b['mean_accept_prob']:.3f} |" for b in calibrated["bins"]]
    return "\n".join(lines) + "\n"


def cost_rule_reading(preverifier, temperature: float):
    """How the cost rule reads this pre-verifier's estimates at this temperature (None: as they are)."""
    read = getattr(preverifier, "cost_rule_estimate", None)
    return None if read is None else (lambda estimate: read(estimate, temperature > 0))


def mean_acceptance(model, steps: list[dict]) -> float:
    """What the cost rule expects of a token not drafted yet: the stored mean acceptance, else the estimates' mean."""
    if model.mean_acceptance is not None:
        return float(model.mean_acceptance)
    return statistics.fmean(e for step in steps for e in step["estimates"])


def slope_text(slope: float | None) -> str:
    return "none (the estimates do not vary)" if slope is None else f"{slope:.3f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default="assets/prompts/heldout.jsonl")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--samples", type=int, default=4, help="seeds a prompt when sampling")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-draft-len", type=int, default=24)
    parser.add_argument("--drafter", default="gguf")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    target, drafters = load_target("embedded", "embedded")
    drafter = load_drafter(target, drafters, args.drafter)
    preverifier = default_preverifier(target, drafter)
    prompts = load_prompts(args.prompts)[: args.limit or None]
    steps, prompt_lengths = collect(target, drafter, preverifier, prompts, args)
    if not steps:
        print("error: no step drafted the whole cap (raise --max-new-tokens or lower --max-draft-len)", file=sys.stderr)
        return 2
    model = pair_cost_model(target, drafter).at_prompt_length(int(statistics.median(prompt_lengths)))
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "prompts": args.prompts, "prompt_count": len(prompts),
              "temperature": args.temperature, "samples": args.samples if args.temperature > 0 else 1,
              "max_new_tokens": args.max_new_tokens, "max_draft_len": args.max_draft_len, "drafter": args.drafter,
              "preverifier": getattr(preverifier, "kind", "custom"), "costs_source": model.source,
              "headroom": headroom(steps, model.costs, args.max_draft_len, mean_acceptance(model, steps),
                                   cost_rule_reading(preverifier, args.temperature)),
              "calibration": calibration(steps),
              "steps": steps}
    write_folder_or_print(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
