"""Evaluation of a distilled draft (stage ``eval`` of ``python -m pacer_core.training.draft``): held-out
greedy agreement with the target, tau for greedy fixed-gamma speculative decoding, and step times."""
from __future__ import annotations

import json
import statistics
import time

import torch
from tqdm import tqdm

from ..kvcache import forward_with_cache, returned_cache
from .draft_data import (EXPORT_DIR, WORK_DIR, draft_from_checkpoint, generate_batch, load_target, load_tokenizer, log,
                         prompt_ids, story_openings)
from .instructions import heldout_instructions


def greedy_tau(matches: list[bool], gamma: int) -> tuple[int, int]:
    """Tokens emitted and steps taken by greedy fixed-length speculative decoding over one continuation."""
    position, emitted, steps = 0, 0, 0
    while position < len(matches):
        accepted = 0
        while accepted < gamma and position + accepted < len(matches) and matches[position + accepted]:
            accepted += 1
        emitted += min(accepted + 1, len(matches) - position)
        position += accepted + 1
        steps += 1
    return emitted, steps


@torch.no_grad()
def draft_matches(draft, prompt: list[int], continuation: list[int]) -> list[bool]:
    input_ids = torch.tensor([prompt + continuation[:-1]])
    draft_logits = draft(input_ids=input_ids).logits[0, len(prompt) - 1:]
    return (draft_logits.argmax(-1) == torch.tensor(continuation)).tolist()


def eval_prompts(tokenizer, story_count: int) -> list[tuple[str, list[int]]]:
    chats = [("chat", prompt_ids(tokenizer, "chat", text)) for text in heldout_instructions()]
    stories = [("story", prompt_ids(tokenizer, "raw", text)) for text in story_openings(story_count)]
    return chats + stories


def target_continuations(target, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    continuations = []
    for start in tqdm(range(0, len(prompts), 20), desc="target greedy"):
        samples = generate_batch(target, prompts[start:start + 20], tokens, 0.0, 1, torch.Generator())
        continuations += [sample["reply"].tolist() for sample in samples]
    return continuations


@torch.no_grad()
def interleaved_step_ms(target, draft, context: list[int], steps: int) -> tuple[float, float]:
    """Median single-token decode step (KV cache) of target and draft, alternating one step of each so
    both see the same load from other processes on this shared CPU."""
    caches, tokens, times = {}, {}, {"target": [], "draft": []}
    for name, model in [("target", target), ("draft", draft)]:
        output = model(input_ids=torch.tensor([context]), use_cache=True)
        caches[name], tokens[name] = returned_cache(output), output.logits[:, -1:].argmax(-1)
    for _ in range(steps):
        for name, model in [("target", target), ("draft", draft)]:
            started = time.perf_counter()
            output = forward_with_cache(model, caches[name], tokens[name])
            times[name].append((time.perf_counter() - started) * 1000)
            caches[name], tokens[name] = returned_cache(output), output.logits[:, -1:].argmax(-1)
    return statistics.median(times["target"]), statistics.median(times["draft"])


def step_times(target, draft, context: list[int], steps: int) -> dict:
    times = {}
    for dtype_name, dtype in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        target_ms, draft_ms = interleaved_step_ms(target.to(dtype), draft.to(dtype), context, steps)
        times[f"target_{dtype_name}_ms"], times[f"draft_{dtype_name}_ms"] = round(target_ms, 2), round(draft_ms, 2)
    target.float(), draft.float()
    times["draft_bf16_over_target_bf16"] = round(times["draft_bf16_ms"] / times["target_bf16_ms"], 3)
    times["draft_fp32_over_target_bf16"] = round(times["draft_fp32_ms"] / times["target_bf16_ms"], 3)
    return times


def load_draft_for_eval(args):
    from transformers import AutoModelForCausalLM
    if args.checkpoint:
        return draft_from_checkpoint(torch.load(WORK_DIR / "checkpoint.pt")).eval()
    return AutoModelForCausalLM.from_pretrained(EXPORT_DIR, dtype=torch.float32).eval()


def stage_eval(args) -> None:
    torch.set_num_threads(args.threads)
    tokenizer, target, draft = load_tokenizer(), load_target(torch.float32), load_draft_for_eval(args)
    labelled = eval_prompts(tokenizer, args.stories)
    cache_path = WORK_DIR / f"eval_continuations_{args.tokens}.pt"
    if cache_path.exists():
        continuations = torch.load(cache_path)
    else:
        continuations = target_continuations(target, [prompt for _, prompt in labelled], args.tokens)
        torch.save(continuations, cache_path)
    per_kind = {}
    for (kind, prompt), continuation in tqdm(list(zip(labelled, continuations)), desc="draft teacher-forced"):
        matches = draft_matches(draft, prompt, continuation)
        emitted, steps = greedy_tau(matches, args.gamma)
        totals = per_kind.setdefault(kind, {"matches": 0, "positions": 0, "emitted": 0, "steps": 0, "prompts": 0})
        for key, value in [("matches", sum(matches)), ("positions", len(matches)), ("emitted", emitted),
                           ("steps", steps), ("prompts", 1)]:
            totals[key] += value
    report = {"gamma": args.gamma, "continuation_tokens": args.tokens, **summarise_eval(per_kind)}
    if not args.skip_timing:
        report["step_times"] = step_times(target, draft, labelled[0][1], args.timing_steps)
    report["draft_source"] = "work/draft/checkpoint.pt" if args.checkpoint else "assets/draft-smollm2"
    print(json.dumps(report, indent=2))
    if args.write:
        (EXPORT_DIR / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {EXPORT_DIR / 'eval.json'}")


def summarise_eval(per_kind: dict) -> dict:
    summary = {}
    per_kind["all"] = {key: sum(t[key] for t in per_kind.values()) for key in next(iter(per_kind.values()))}
    for kind, totals in per_kind.items():
        summary[kind] = {"prompts": totals["prompts"], "positions": totals["positions"],
                         "agreement": round(totals["matches"] / totals["positions"], 4),
                         "tau": round(totals["emitted"] / totals["steps"], 3)}
    return summary
