"""Measure the cost model PACER's cost rule prices a block with (pacer_core/stopping.py ``PacerCostModel``), once
per drafter and kind of device, and store it in the draft folder's measured_defaults.json
(``drafters.<drafter>.pacer_costs.<device kind>``). A sampled PACER run prices with this stored model, so seeded
runs repeat token for token; a greedy one starts from it and then prices with its own steps' seconds
(``stopping.RunCosts``). Re-run it when the engines change (a faster target step moves every ratio).

Prompt by prompt, interleaved: one AR run (its seconds per token after the first are the unit, "one AR step": the
first step is the prompt's prefill), then fixed SD at every draft length in ``--gammas`` at the temperature given,
recording per step the seconds spent drafting and verifying and, per drafted token, the entropy of the q it was
sampled from and its acceptance probability min(1, p(x)/q(x)). A run's time before its first step (the target's
prefill that the drafter adopts or reads, timed once per prompt) and its first step (which may include a prefill)
are a cost per run, not per step, and are left out of the step costs. From those:

  draft_per_token         what each drafted token adds to a step's drafting seconds, in AR steps: the slope of the
                          least-squares line of a step's drafting seconds on its draft length
                          (``stopping.per_step_and_per_token``); its intercept, what a step's drafting costs
                          whatever its length (the first call feeds the token the target added), goes to
                          step_overhead
  verify                  a verify pass by tokens verified (drafted + 1), in AR steps: the least-squares line
                          through every pass's seconds, stored as its two ends (one pass per step is too
                          noisy to read point by point on a shared CPU)
  step_overhead           a step's seconds outside both models (judging, commit, events; at least 0: on long
                          prompts the separately timed prefill can exceed the run's own by more than this) plus the
                          drafting line's intercept, in AR steps
  acceptance_by_entropy   mean acceptance by bins of the draft's entropy (AcceptanceByEntropy.fit)
  mean_acceptance         mean acceptance of every drafted token

With ``--length-sets`` (prompt files of longer prompts) the same is measured on each set too and the costs are
also stored by prompt length (``by_prompt_length``: each set's median prompt tokens with its draft, verify and
overhead costs), which the cost rule interpolates at a run's prompt length; the acceptance table stays the first
set's.

    python -m pacer_core.training.pacer_costs --drafter gguf --prompts assets/prompts/validation.jsonl --write
    python -m pacer_core.training.pacer_costs --drafter gguf --length-sets assets/prompts/code-calibration.jsonl \
        --length-gammas 1,4,8,12 --write
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import replace
from datetime import date
from pathlib import Path

import torch

from ..decoders.autoregressive import Autoregressive
from ..decoders.base import make_state
from ..decoders.fixed import FixedSpeculative
from ..drafters import drafter_key, load_drafter
from ..drafters.measured import TORCH_TARGET_PART, target_verifies_on_torch_cpu
from ..models import load_target
from ..prompts import load_prompts
from ..request import encode_prompt
from ..settings import Limits, validate_settings
from ..stopping import (AcceptanceByEntropy, PacerCostModel, StepCosts, entropy_nats, expected_tokens,
                        least_squares_line, per_step_and_per_token)

GAMMAS = (1, 2, 4, 8, 12, 16, 24, 32)


class RecordingFixed(FixedSpeculative):
    """Fixed SD that keeps the entropy of every distribution it drafted from, step by step."""

    def __init__(self, gamma: int):
        super().__init__(gamma)
        self.entropies: list[list[float]] = []

    def propose(self, target, state, settings, budget):
        proposal = super().propose(target, state, settings, budget)
        self.entropies.append(entropy_nats(proposal.draft_probs).tolist() if proposal.drafted_ids else [])
        return proposal


class Observations:
    """What the runs measured, in seconds and per drafted token."""

    def __init__(self):
        self.ar_seconds, self.ar_tokens = 0.0, 0
        self.draft_steps: list[tuple[int, float]] = []       # (tokens drafted, seconds drafting) per step
        self.verify_seconds: dict[int, list[float]] = defaultdict(list)
        self.outside_seconds, self.steps = 0.0, 0
        self.entropies: list[float] = []
        self.accept_probs: list[float] = []
        self.paths: list[list[tuple[float, float]]] = []   # the longest drafts' steps: (entropy, acceptance) per token

    def add_ar(self, events: list, result) -> None:
        """An AR run's steps after its first (the prompt's prefill)."""
        self.ar_seconds += result.metrics.seconds - events[0].verify_seconds
        self.ar_tokens += result.metrics.new_tokens - 1

    def add_fixed(self, events: list, result, entropies: list[list[float]], keep_paths: bool,
                  prefill_seconds: float) -> None:
        for index, (event, step_entropies) in enumerate(zip(events, entropies)):
            if index > 0:
                self.draft_steps.append((event.n_drafted, event.draft_seconds))
                self.verify_seconds[event.n_drafted + 1].append(event.verify_seconds)
            path = [(entropy, token.accept_prob) for entropy, token in zip(step_entropies, event.tokens[:event.n_drafted])]
            self.entropies += [entropy for entropy, _ in path]
            self.accept_probs += [accept for _, accept in path]
            if keep_paths:
                self.paths.append(path)
        self.outside_seconds += (result.metrics.seconds - prefill_seconds
                                 - sum(e.draft_seconds + e.verify_seconds for e in events))
        self.steps += len(events)

    def model(self, source: str) -> PacerCostModel:
        unit = self.ar_seconds / self.ar_tokens                       # one AR step
        sizes = [tokens for tokens, seconds in self.verify_seconds.items() for _ in seconds]
        intercept, slope = least_squares_line(sizes, [s for seconds in self.verify_seconds.values() for s in seconds])
        verify = tuple((tokens, (intercept + slope * tokens) / unit) for tokens in (1, max(sizes)))
        lengths, seconds = [float(k) for k, _ in self.draft_steps], [spent for _, spent in self.draft_steps]
        per_step, per_token = per_step_and_per_token(lengths, seconds) or (0.0, sum(seconds) / max(sum(lengths), 1))
        costs = StepCosts(per_token / unit, verify_points=verify,
                          step_overhead=(max(0.0, self.outside_seconds / max(self.steps, 1)) + per_step) / unit)
        return PacerCostModel(costs, AcceptanceByEntropy.fit(self.entropies, self.accept_probs),
                              sum(self.accept_probs) / len(self.accept_probs), source)


def prefill_seconds(target, drafter, prompt_ids: list[int], settings) -> float:
    """What a speculative run spends before its first step: fresh caches and the target's prefill that the
    drafter adopts or reads (``decoders.base.make_state``)."""
    started = time.perf_counter()
    make_state(target, drafter, prompt_ids, settings, with_draft=True)
    return time.perf_counter() - started


def measure(target, drafter, prompt_ids: list[list[int]], gammas, temperature: float, max_new_tokens: int, repeats: int,
            progress=None) -> Observations:
    observed = Observations()
    for repeat in range(repeats):
        for index, ids in enumerate(prompt_ids):
            settings = validate_settings(max_new_tokens=max_new_tokens, temperature=temperature,
                                         seed=1000 * repeat + index)
            prefill = prefill_seconds(target, drafter, ids, settings)
            *events, result = Autoregressive().run(target, drafter, ids, settings)
            observed.add_ar(events, result)
            for gamma in gammas:
                decoder = RecordingFixed(gamma)
                *events, result = decoder.run(target, drafter, ids, settings)
                observed.add_fixed(events, result, decoder.entropies, gamma == max(gammas), prefill)
                if progress:
                    progress.update()
    return observed


def simulated_rate(model: PacerCostModel, paths: list[list[tuple[float, float]]], stop_after) -> float:
    """Expected tokens per AR step over the recorded drafts when each step stops after ``stop_after(path)``
    tokens: Σ E(k) / Σ C(k) with the recorded per-token acceptance (a check of the rule, not a benchmark)."""
    tokens = cost = 0.0
    for path in paths:
        length = stop_after(path)
        tokens += expected_tokens([accept for _, accept in path[:length]])
        cost += model.costs.step(length)
    return tokens / cost if cost else 0.0


def cost_rule_length(model: PacerCostModel, block: int, limit: int):
    """The stopping point the cost rule picks on a recorded draft (the decoder's loop, on recorded entropies)."""
    from ..stopping import decide_extension

    def stop_after(path):
        length = min(block, len(path))
        while length < min(limit, len(path)):
            estimates = [model.token_acceptance(entropy, 1.0) for entropy, _ in path[:length]]
            size = min(block, limit - length)
            next_accept = model.mean_acceptance if model.mean_acceptance is not None else estimates[-1]
            if not decide_extension(estimates, next_accept, size, model.costs).extend:
                break
            length += size
        return min(length, len(path))
    return stop_after


def write_model(target, drafter, device: str, model: PacerCostModel, source: str) -> Path:
    """Store the model in the drafter's entry of the pair's measured_defaults.json, or in its ``cpu_torch_target``
    part when the target verified on torch on a CPU (``drafters.measured``)."""
    if not target.measured_file:
        raise SystemExit("This pair has no measured_defaults.json to write to (it lives in the draft model's folder).")
    path, key = Path(target.measured_file), drafter_key(drafter)
    record = json.loads(path.read_text()) if path.exists() else {}
    entry = record.setdefault("drafters", {}).setdefault(key, {})
    if target_verifies_on_torch_cpu(target, drafter, key):
        entry = entry.setdefault(TORCH_TARGET_PART, {})
    entry.setdefault("pacer_costs", {})[device] = model.to_record() | {"source": source}
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path


def median_tokens(prompt_ids: list[list[int]]) -> int:
    return int(statistics.median(len(ids) for ids in prompt_ids))


def costs_by_length(target, drafter, args, limits) -> list[tuple[int, StepCosts]]:
    """(median prompt tokens, step costs) for each band (``category``) of each --length-sets file, drafting with
    ``drafter``."""
    gammas = [int(g) for g in args.length_gammas.split(",")]
    bands: dict[str, list] = defaultdict(list)
    for path in args.length_sets.split(","):
        for record in load_prompts(path)[: args.limit * 8 or None]:
            bands[f"{path}:{record.get('category', '')}"].append(record["prompt"])
    measured = []
    for band, prompts in bands.items():
        prompt_ids = [list(encode_prompt(target, prompt, None, limits).ids) for prompt in prompts[: args.limit]]
        observed = measure(target, drafter, prompt_ids, gammas, args.temperature, args.max_new_tokens, args.repeats)
        measured.append((median_tokens(prompt_ids), observed.model(band).costs))
        print(f"{band}: {measured[-1][0]} tokens, a drafted token {measured[-1][1].draft_per_token:.3f} AR steps",
              file=sys.stderr)
    return measured


def main(argv=None) -> int:
    from tqdm import tqdm

    parser = argparse.ArgumentParser(prog="python -m pacer_core.training.pacer_costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", default="gguf", help="small, head, self-int8, self-int4, gguf")
    parser.add_argument("--prompts", default="assets/prompts/validation.jsonl")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--gammas", default=",".join(map(str, GAMMAS)))
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--block", type=int, default=4, help="block size of the simulated cost rule")
    parser.add_argument("--max-draft-len", type=int, default=32, help="longest draft of the simulated cost rule")
    parser.add_argument("--write", action="store_true", help="store the model in the draft folder's measured_defaults.json")
    parser.add_argument("--dump", default=None, help="also write the recorded drafts (entropy, acceptance) as JSON here")
    parser.add_argument("--length-sets", default="", help="comma-separated prompt files: costs by prompt length too, "
                                                         "one length per band of 'category' in each file")
    parser.add_argument("--length-gammas", default="1,4,8,12", help="fixed lengths run on the --length-sets")
    args = parser.parse_args(argv)
    gammas = [int(g) for g in args.gammas.split(",")]
    target, drafters = load_target("embedded", "embedded")
    drafter = load_drafter(target, drafters, args.drafter)
    limits = Limits.from_env()
    prompts = load_prompts(args.prompts)[: args.limit or None]
    prompt_ids = [list(encode_prompt(target, record["prompt"], None, limits).ids) for record in prompts]
    progress = tqdm(total=args.repeats * len(prompt_ids) * len(gammas), file=sys.stderr)
    observed = measure(target, drafter, prompt_ids, gammas, args.temperature, args.max_new_tokens, args.repeats, progress)
    progress.close()
    device = torch.device(target.device).type
    source = (f"python -m pacer_core.training.pacer_costs --drafter {args.drafter} on {len(prompt_ids)} prompts of "
              f"{args.prompts}, T = {args.temperature}, {args.max_new_tokens} tokens, fixed SD at {gammas}, "
              f"{date.today().isoformat()}; AR step {observed.ar_seconds / observed.ar_tokens * 1000:.1f} ms; "
              f"target on {target.describe(drafter).get('target_engine', 'torch')}")
    model = observed.model(source)
    if args.length_sets:
        by_length = costs_by_length(target, drafter, args, limits) + [(median_tokens(prompt_ids), model.costs)]
        model = replace(model, by_length=tuple(sorted(by_length)))
        source += (f"; by prompt length on {args.length_sets} (fixed SD at {args.length_gammas}, "
                   f"{args.repeats} repeat(s)): " + ", ".join(f"{length} tokens {costs.draft_per_token:.2f} a drafted "
                                                              f"token" for length, costs in model.by_length))
        model = replace(model, source=source)
    report = {"model": model.to_record(), "source": source,
              "simulated_rate": {f"fixed:{g}": simulated_rate(model, observed.paths, lambda path, g=g: min(g, len(path)))
                                 for g in gammas}
              | {"cost rule": simulated_rate(model, observed.paths, cost_rule_length(model, args.block, args.max_draft_len))}}
    print(json.dumps(report, indent=2))
    if args.dump:
        Path(args.dump).write_text(json.dumps({"model": model.to_record(), "paths": observed.paths,
                                               "verify_seconds": observed.verify_seconds,
                                               "ar_seconds_per_token": observed.ar_seconds / observed.ar_tokens}))
    if args.write:
        print(f"written to {write_model(target, drafter, device, model, source)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
