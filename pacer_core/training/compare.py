"""Compare drafters for one target under one protocol, on prompts no drafter was trained on.

For every drafter (small, head, head-N, head-all, self-int8, self-int4, gguf; see ``drafters.load_drafter``) and prompt, along the
target's own greedy output:
  agreement_at_depth  P(drafted token k is the target's | tokens 1..k-1 were), from greedy fixed SD with
                      gamma = 4 (each drafted token continues from the drafter's own previous ones)
  tau_gamma4          exact greedy tokens per verify pass of fixed SD with gamma = 4
  kl_T, one_minus_tv_T  KL(p_T || q_T) and 1 - TV between the target's and the drafter's distributions at
                      temperature T for the first drafted token (true prefix), averaged over positions;
                      1 - TV is the acceptance rate of speculative sampling there
  smc_kl_0.7          KL(p || q) at T = 0.7 of the proposal SMC-SD draws from (full support)
  cost_ratio          median time of one drafted token / one target step, interleaved, same context

  python -m pacer_core.training.compare --drafters small,head,head-8192,head-all --out FILE.json"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from ..analysis import draft_teacher_forced_logits
from ..api import run_request
from ..drafters import load_drafter, new_caches
from ..models import load_target
from ..particles import proposal_kl
from ..prompts import load_prompts
from ..sampling import logits_to_probs, token_log_probs
from ..request import RunRequest, chosen_names, encode_prompt, request_for
from ..settings import Limits, validate_settings

GAMMA = 4
TEMPERATURES = (0.7, 1.0)


def depth_counts(events, gamma: int) -> tuple[list[int], list[int]]:
    """reached[k]: steps whose drafted token k+1 was judged; accepted[k]: of those, accepted."""
    reached, accepted = [0] * gamma, [0] * gamma
    for event in events:
        for depth in range(min(event.n_drafted, gamma)):
            if depth <= event.n_accepted:
                reached[depth] += 1
                accepted[depth] += int(depth < event.n_accepted)
    return reached, accepted


@torch.inference_mode()
def divergences(target, drafter, prompt_ids, output_ids) -> dict:
    """Per-position KL(p||q) and 1 - TV at each temperature for the first drafted token."""
    ids = torch.tensor([list(prompt_ids) + list(output_ids)], device=target.device)
    target_logits = target.model(input_ids=ids).logits[0, len(prompt_ids) - 1: -1, : target.vocab_size].float().cpu()
    draft_logits = draft_teacher_forced_logits(target, drafter, prompt_ids, output_ids)
    figures = {}
    for temperature in TEMPERATURES:
        kl = proposal_kl(token_log_probs(target_logits, temperature), token_log_probs(draft_logits, temperature))
        overlap = torch.minimum(logits_to_probs(target_logits, temperature), logits_to_probs(draft_logits, temperature))
        figures[f"kl_{temperature}"] = kl.tolist()
        figures[f"one_minus_tv_{temperature}"] = overlap.sum(-1).tolist()
    smc_logits = draft_teacher_forced_logits(target, drafter, prompt_ids, output_ids, full_support=True)
    figures["smc_kl_0.7"] = proposal_kl(token_log_probs(target_logits, 0.7), token_log_probs(smc_logits, 0.7)).tolist()
    return figures


@torch.inference_mode()
def cost_ratio(target, drafter, context: list[int], steps: int = 60) -> float:
    """Median of interleaved single-token steps: one token ``drafter`` drafts over one target step."""
    target_cache, draft = new_caches(target, drafter)
    target_cache.forward(context[:-1])
    draft.feed_sequence(context[:-1] + [context[-1]], [])
    target_times, draft_times = [], []
    for _ in range(steps):
        started = time.perf_counter()
        target_cache.forward([context[-1]])
        target_times.append(time.perf_counter() - started)
        target_cache.crop(len(context) - 1)
        started = time.perf_counter()
        draft.forward([context[-1]])          # a feature head drafts this one from its own predicted state
        draft_times.append(time.perf_counter() - started)
        draft.crop(len(context))
    return statistics.median(draft_times) / statistics.median(target_times)


def evaluate_drafter(target, requests: list[RunRequest], references: list[list[int]]) -> dict:
    """Greedy fixed SD (gamma 4) requests, one per prompt, all drafting with one drafter, against AR's outputs."""
    drafter = requests[0].drafter
    reached, accepted, tokens, verify_steps, per_position = [0] * GAMMA, [0] * GAMMA, 0, 0, {}
    for request, reference in zip(requests, references):
        prompt_ids = list(request.prompt_ids)
        *events, result = run_request(target, request)
        assert result.token_ids == reference or target.dtype != torch.float32, "greedy SD must equal AR in fp32"
        step_reached, step_accepted = depth_counts(events, GAMMA)
        reached = [a + b for a, b in zip(reached, step_reached)]
        accepted = [a + b for a, b in zip(accepted, step_accepted)]
        tokens, verify_steps = tokens + result.metrics.new_tokens, verify_steps + len(events)
        for key, values in divergences(target, drafter, prompt_ids, reference).items():
            per_position.setdefault(key, []).extend(values)
    row = {"agreement_at_depth": [round(a / r, 4) if r else None for a, r in zip(accepted, reached)],
           "tau_gamma4": round(tokens / verify_steps, 4),
           "cost_ratio": round(cost_ratio(target, drafter, list(requests[0].prompt_ids) + references[0]), 4)}
    row.update({key: round(sum(values) / len(values), 4) for key, values in per_position.items()})
    return row


def markdown_table(rows: dict) -> str:
    lines = ["| drafter | agreement at depth 1 / 2 / 3 / 4 | tau (gamma 4) | KL T=0.7 | KL T=1 | 1-TV T=0.7 | "
             "1-TV T=1 | SMC proposal KL T=0.7 | cost / target step |", "|---" * 9 + "|"]
    for name, row in rows.items():
        depths = " / ".join("-" if value is None else f"{value:.2f}" for value in row["agreement_at_depth"])
        lines.append(f"| {name} | {depths} | {row['tau_gamma4']:.2f} | {row['kl_0.7']:.2f} | {row['kl_1.0']:.2f} | "
                     f"{row['one_minus_tv_0.7']:.3f} | {row['one_minus_tv_1.0']:.3f} | {row['smc_kl_0.7']:.2f} | "
                     f"{row['cost_ratio']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pacer_core.training.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafters", default="small,head,head-8192,head-all")
    parser.add_argument("--prompts", default="assets/prompts/heldout.jsonl")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--head", default=None, help="feature head folder (default: the embedded one)")
    parser.add_argument("--draft-gguf", default=None, help="GGUF file for the gguf drafter (default: the embedded "
                        "target's own)")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    target, drafters = load_target(args.target, "embedded-small", device="cpu", dtype=args.dtype, draft_gguf=args.draft_gguf)
    records = load_prompts(args.prompts)[: args.limit or None]
    limits = Limits.from_env()
    prompts = [encode_prompt(target, record["prompt"], None, limits) for record in records]
    raw = {"max_new_tokens": args.max_new_tokens, "temperature": 0.0, "gamma": GAMMA}
    settings, chosen = validate_settings(limits, **raw), chosen_names(raw)
    own = drafters.default
    references = [list(run_request(target, request_for(target, own, "ar", settings, chosen, prompt, limits)))[-1].token_ids
                  for prompt in prompts]
    rows = {}
    for name in args.drafters.split(","):
        drafter = load_drafter(target, drafters, name, args.head)
        fixed = [request_for(target, drafter, "fixed", settings, chosen, prompt, limits) for prompt in prompts]
        rows[name] = evaluate_drafter(target, fixed, references)
        print(f"{name}: {rows[name]}", file=sys.stderr, flush=True)
    report = {"prompts": args.prompts, "prompt_count": len(prompts), "max_new_tokens": args.max_new_tokens,
              "dtype": str(target.dtype).replace("torch.", ""), "drafters": rows, "table": markdown_table(rows)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(report["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
