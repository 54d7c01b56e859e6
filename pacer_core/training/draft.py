"""Train the embedded draft model for SmolLM2-135M-Instruct by knowledge distillation (CPU).

Stages (each resumable: results and checkpoints live in work/draft/, re-running continues):
  generate  batched target replies to the training instructions (greedy + sampled), recording the
            target's top-k next-token probabilities at every reply position (free teacher data)
  teacher   top-k target probabilities on corpus text chunks (supplementary data)
  train     distil a small Llama draft (PCA-initialised tied embeddings) on the cached top-k
  eval      held-out greedy agreement, tau for greedy gamma=4 speculative decoding, step times
  average   parameter-average saved checkpoints into checkpoint.pt
  export    save the draft (bfloat16 safetensors + tokenizer) to assets/draft-smollm2/

Example:  python -m pacer_core.training.draft generate && python -m pacer_core.training.draft train \
          && python -m pacer_core.training.draft export && python -m pacer_core.training.draft eval
"""
# The stages' data (generation, story openings, corpus teacher cache) live in draft_data.py, evaluation in
# draft_eval.py; this module holds the draft model's build and training loop, export, averaging and the CLI.
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .draft_data import (DTYPES, EXPORT_DIR, PAD_ID, TOKENIZER_FILES, WORK_DIR, draft_config, draft_from_checkpoint,
                         load_target, load_tokenizer, log, reply_file_samples, stage_generate, stage_teacher,
                         target_dir)
from .draft_eval import load_draft_for_eval, stage_eval
from .instructions import evaluation_prompts, resembles_evaluation


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------- draft model build
@torch.no_grad()
def pca_embeddings(target_embeddings: torch.Tensor, width: int) -> torch.Tensor:
    """Project the target's (vocab x 576) embedding matrix onto its top `width` principal directions.
    Uncentred: with tied embeddings, logits h.e stay approximately preserved under the projection."""
    _, _, right_vectors = torch.linalg.svd(target_embeddings.float(), full_matrices=False)
    return target_embeddings.float() @ right_vectors[:width].T


def build_draft(args):
    from transformers import LlamaForCausalLM
    draft = LlamaForCausalLM(draft_config(args))
    target = load_target(torch.float32)
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(pca_embeddings(target.model.embed_tokens.weight, args.hidden))
        # small output scale: with the copied embeddings a large one makes the fresh draft
        # confidently predict its input token (initial loss ~50 instead of ~10)
        draft.model.norm.weight.fill_(0.25)
    draft.tie_weights()
    return draft


# ----------------------------------------------------------------------------- training data
def load_samples(include_corpus: bool, reply_files: list[dict] | None = None) -> list[dict]:
    """The generated shards (soft labels) and corpus chunks, plus ``reply_files``: samples already read
    from reply files (hard labels), all filtered against the evaluation prompts."""
    paths = sorted((WORK_DIR / "replies").glob("*.pt"))
    if include_corpus:
        paths += sorted((WORK_DIR / "corpus").glob("*.pt"))
    samples = list(reply_files or [])
    for path in paths:
        samples += torch.load(path)
    evaluation = evaluation_prompts()
    kept = [sample for sample in samples if len(sample["reply"]) > 0 and not (
        sample.get("instruction") and resembles_evaluation(sample["instruction"], evaluation))]
    log(f"kept {len(kept)} of {len(samples)} samples (dropped empty ones and instructions resembling "
        f"an evaluation or benchmark prompt)")
    return kept


def sample_inputs(sample: dict) -> tuple[torch.Tensor, int]:
    """Input ids = prompt + reply[:-1]; the logits at positions start..end predict the reply tokens."""
    input_ids = torch.cat([sample["prompt"], sample["reply"][:-1]]).long()
    return input_ids, len(sample["prompt"]) - 1


def token_budget_batches(samples: list[dict], tokens_per_batch: int, rng: random.Random) -> list[list[dict]]:
    """Shuffle, then group samples of similar length so right-padding wastes little."""
    order = samples[:]
    rng.shuffle(order)
    batches = []
    for start in range(0, len(order), 256):
        window = sorted(order[start:start + 256], key=lambda s: len(s["prompt"]) + len(s["reply"]))
        batch, width = [], 0
        for sample in window:
            width_if_added = max(width, len(sample["prompt"]) + len(sample["reply"]))
            if batch and width_if_added * (len(batch) + 1) > tokens_per_batch:
                batches.append(batch)
                batch, width_if_added = [], len(sample["prompt"]) + len(sample["reply"])
            batch.append(sample)
            width = width_if_added
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(batch: list[dict]) -> dict:
    inputs = [sample_inputs(sample) for sample in batch]
    width = max(len(ids) for ids, _ in inputs)
    input_ids = torch.full((len(batch), width), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    rows, columns = [], []
    for row, (ids, start) in enumerate(inputs):
        input_ids[row, :len(ids)] = ids
        attention_mask[row, :len(ids)] = 1
        count = len(batch[row]["reply"])
        rows.append(torch.full((count,), row))
        columns.append(torch.arange(start, start + count))
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "rows": torch.cat(rows), "columns": torch.cat(columns),
            "labels": torch.cat([sample["reply"] for sample in batch]).long(),
            "top_ids": torch.cat([sample["top_ids"] for sample in batch]).long(),
            "top_probs": torch.cat([sample["top_probs"] for sample in batch]).float()}


# ----------------------------------------------------------------------------- training
def frequent_token_ids(samples: list[dict], count: int) -> torch.Tensor:
    """The `count` ids carrying the most teacher probability mass over all cached positions."""
    mass = torch.zeros(49152)
    for sample in samples:
        mass.index_add_(0, sample["top_ids"].flatten().long(), sample["top_probs"].flatten().float())
    return mass.topk(count).indices


def candidate_ids(batch: dict, frequent_ids: torch.Tensor, random_count: int, generator: torch.Generator) -> torch.Tensor:
    """Output ids scored this step: the batch's teacher top-k ids, the frequent ids and a few random ids.
    Scoring ~10k instead of 49,152 ids makes the dominant output layer ~4x cheaper to train."""
    random_ids = torch.randint(0, 49152, (random_count,), generator=generator)
    return torch.unique(torch.cat([batch["top_ids"].flatten(), batch["labels"], frequent_ids, random_ids]))


def draft_logits_at(draft, batch: dict, candidates: torch.Tensor | None = None) -> torch.Tensor:
    """Draft logits only at supervised positions (skips the output layer on prompt tokens), over
    `candidates` ids only when given."""
    hidden = draft.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    supervised = hidden[batch["rows"], batch["columns"]]
    if candidates is None:
        return draft.lm_head(supervised)
    return supervised @ draft.lm_head.weight[candidates].T


def remap_to_candidates(batch: dict, candidates: torch.Tensor) -> dict:
    """Express top_ids and labels as column indices into the candidate logits."""
    position = torch.full((49152,), -1, dtype=torch.long)
    position[candidates] = torch.arange(len(candidates))
    return {**batch, "top_ids": position[batch["top_ids"]], "labels": position[batch["labels"]]}


def distillation_loss(draft_logits: torch.Tensor, batch: dict, hard_weight: float) -> tuple[torch.Tensor, dict]:
    """Cross-entropy to the renormalised teacher top-k, plus `hard_weight` x CE on the reply token."""
    draft_log_probs = torch.log_softmax(draft_logits.float(), dim=-1)
    teacher_probs = batch["top_probs"] / batch["top_probs"].sum(-1, keepdim=True)
    soft = -(teacher_probs * draft_log_probs.gather(-1, batch["top_ids"])).sum(-1).mean()
    hard = F.nll_loss(draft_log_probs, batch["labels"])
    agreement = (draft_logits.argmax(-1) == batch["top_ids"][:, 0]).float().mean()
    return soft + hard_weight * hard, {"soft": soft.item(), "hard": hard.item(), "agree": agreement.item()}


def learning_rate(step: int, args) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def initial_draft(args):
    """A fresh PCA-initialised draft, or (--init-from) an existing draft folder to continue training."""
    if not args.init_from:
        return build_draft(args)
    from transformers import AutoModelForCausalLM
    draft = AutoModelForCausalLM.from_pretrained(args.init_from, dtype=torch.float32)
    log(f"initialised from {args.init_from} ({draft.config.num_hidden_layers} layers, "
        f"hidden {draft.config.hidden_size})")
    return draft


def load_checkpoint(args):
    path = WORK_DIR / "checkpoint.pt"
    draft = initial_draft(args) if not path.exists() else None
    if draft is None:
        state = torch.load(path)
        draft = draft_from_checkpoint(state)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    step, history = 0, []
    if path.exists():
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:
            group["weight_decay"] = args.weight_decay
        step, history = state["step"], state["history"]
        log(f"resumed from step {step}")
    return draft, optimizer, step, history


def save_checkpoint(draft, optimizer, step: int, history: list) -> None:
    arch = {"layers": draft.config.num_hidden_layers, "hidden": draft.config.hidden_size,
            "ffn": draft.config.intermediate_size}
    path = WORK_DIR / "checkpoint.pt"
    torch.save({"model": draft.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "history": history, "arch": arch}, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def stage_train(args) -> None:
    torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    draft, optimizer, step, history = load_checkpoint(args)
    draft.train()
    started, epoch, running = time.time(), 0, []
    tokenizer = load_tokenizer() if args.replies else None
    reply_files = [sample for path in args.replies for sample in reply_file_samples(path, tokenizer)]
    progress = tqdm(total=args.steps, initial=step, desc="train steps")
    while step < args.steps:
        # reloaded every epoch, so training can start while `generate` is still adding shards
        samples = load_samples(include_corpus=not args.no_corpus, reply_files=reply_files)
        log(f"epoch {epoch}: {len(samples)} samples, {sum(len(s['reply']) for s in samples)} supervised tokens")
        frequent_ids = frequent_token_ids(samples, args.frequent_candidates)
        generator = torch.Generator().manual_seed(args.seed * 7919 + step)
        rng = random.Random(args.seed * 1000 + epoch + step)
        for batch_samples in token_budget_batches(samples, args.batch_tokens, rng):
            if step >= args.steps or (args.minutes and time.time() - started > args.minutes * 60):
                break
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, args)
            batch = collate(batch_samples)
            candidates = candidate_ids(batch, frequent_ids, args.random_candidates, generator)
            if args.full_vocab:
                candidates = torch.arange(49152)
            draft_logits = draft_logits_at(draft, batch, candidates)
            loss, stats = distillation_loss(draft_logits, remap_to_candidates(batch, candidates), args.hard_weight)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
            optimizer.step()
            step += 1
            running.append(stats)
            progress.update(1)
            if step % args.log_every == 0:
                history.append(summarise(running, step, started))
                running = []
                log(json.dumps(history[-1]))
            if step % args.save_every == 0:
                save_checkpoint(draft, optimizer, step, history)
        epoch += 1
        if args.minutes and time.time() - started > args.minutes * 60:
            break
    save_checkpoint(draft, optimizer, step, history)
    log(f"train: stopped at step {step}")


def summarise(running: list[dict], step: int, started: float) -> dict:
    return {"step": step, "minutes": round((time.time() - started) / 60, 1),
            **{key: round(statistics.mean(stat[key] for stat in running), 4) for key in running[0]}}

# ----------------------------------------------------------------------------- export
def stage_export(args) -> None:
    from transformers import AutoModelForCausalLM
    draft = load_draft_for_eval(argparse.Namespace(checkpoint=True))
    EXPORT_DIR.mkdir(parents=True, exist_ok=True)
    draft.to(torch.bfloat16).save_pretrained(EXPORT_DIR, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (target_dir() / name).exists():
            shutil.copy(target_dir() / name, EXPORT_DIR / name)
    reloaded = AutoModelForCausalLM.from_pretrained(EXPORT_DIR, dtype=torch.float32).eval()
    with torch.no_grad():
        reloaded(input_ids=torch.tensor([[1, 2, 3]]))
    size_mb = (EXPORT_DIR / "model.safetensors").stat().st_size / 1e6
    log(f"exported to {EXPORT_DIR} ({size_mb:.1f} MB); reloads in float32")


# ----------------------------------------------------------------------------- checkpoint averaging
def stage_average(args) -> None:
    """Parameter average of saved checkpoints, written to work/draft/checkpoint.pt (keeps the last one's
    optimizer state and step)."""
    states = [torch.load(WORK_DIR / name) for name in args.checkpoints]
    averaged = {key: sum(state["model"][key].float() for state in states) / len(states) for key in states[0]["model"]}
    path = WORK_DIR / "checkpoint.pt"
    torch.save({**states[-1], "model": averaged, "averaged_from": list(args.checkpoints)}, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)
    log(f"averaged {len(states)} checkpoints into {path}")


# ----------------------------------------------------------------------------- CLI
def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pacer_core.training.draft", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    stages = parser.add_subparsers(dest="stage", required=True)
    generate = stages.add_parser("generate", help="batched target replies + top-k teacher probabilities")
    add_common(generate)
    generate.add_argument("--batch-size", type=int, default=128)
    generate.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16",
                          help="target dtype (bfloat16: ~2x faster batched decoding on this CPU, and what the app runs)")
    generate.add_argument("--stories", type=int, default=1024, help="TinyStories training openings to continue")
    generate.add_argument("--story-tokens", type=int, default=80, help="max new tokens per story continuation")
    generate.add_argument("--max-new-tokens", type=int, default=144)
    generate.add_argument("--top-k", type=int, default=32)
    generate.add_argument("--temperature", type=float, default=0.7)
    generate.add_argument("--sampled-fraction", type=float, default=0.3,
                          help="fraction of instructions that also get a sampled reply")
    generate.add_argument("--limit", type=int, default=0, help="use only the first N instructions")
    teacher = stages.add_parser("teacher", help="top-k target probabilities on corpus chunks")
    add_common(teacher)
    teacher.add_argument("--chunks", type=int, default=320)
    teacher.add_argument("--chunk-tokens", type=int, default=128)
    teacher.add_argument("--batch-size", type=int, default=16)
    teacher.add_argument("--top-k", type=int, default=32)
    train = stages.add_parser("train", help="distil the draft (resumes from work/draft/checkpoint.pt)")
    add_common(train)
    add_train_arguments(train)
    evaluate = stages.add_parser("eval", help="held-out agreement, tau and step times")
    add_common(evaluate)
    evaluate.add_argument("--checkpoint", action="store_true", help="evaluate work/draft/checkpoint.pt")
    evaluate.add_argument("--tokens", type=int, default=64)
    evaluate.add_argument("--stories", type=int, default=20)
    evaluate.add_argument("--gamma", type=int, default=4)
    evaluate.add_argument("--timing-steps", type=int, default=60)
    evaluate.add_argument("--skip-timing", action="store_true")
    evaluate.add_argument("--write", action="store_true", help="write assets/draft-smollm2/eval.json")
    average = stages.add_parser("average", help="average checkpoints (names in work/draft) into checkpoint.pt")
    add_common(average)
    average.add_argument("checkpoints", nargs="+")
    export = stages.add_parser("export", help="save the checkpoint to assets/draft-smollm2 (bfloat16)")
    add_common(export)
    return parser


def add_train_arguments(train: argparse.ArgumentParser) -> None:
    """The ``train`` stage's own options: the draft's shape, the schedule and what it is distilled on."""
    train.add_argument("--layers", type=int, default=4)
    train.add_argument("--hidden", type=int, default=256)
    train.add_argument("--ffn", type=int, default=768)
    train.add_argument("--init-from", default="", help="start from this draft folder (e.g. assets/draft-smollm2) "
                       "instead of a fresh PCA-initialised model; ignored when resuming")
    train.add_argument("--steps", type=int, default=1500)
    train.add_argument("--minutes", type=float, default=0, help="stop after this many minutes (0: no limit)")
    train.add_argument("--batch-tokens", type=int, default=1536)
    train.add_argument("--lr", type=float, default=2e-3)
    train.add_argument("--warmup", type=int, default=40)
    train.add_argument("--weight-decay", type=float, default=0.01)
    train.add_argument("--hard-weight", type=float, default=0.1)
    train.add_argument("--no-corpus", action="store_true")
    train.add_argument("--replies", action="append", default=[], metavar="FILE",
                       help="also train on target-written replies in this JSON-lines file (kind, prompt, reply_ids; "
                            "may be gzipped) with hard labels; repeatable")
    train.add_argument("--frequent-candidates", type=int, default=4096,
                       help="most frequent teacher ids always scored by the training softmax")
    train.add_argument("--random-candidates", type=int, default=2048)
    train.add_argument("--full-vocab", action="store_true", help="score all 49,152 ids (slower)")
    train.add_argument("--log-every", type=int, default=10)
    train.add_argument("--save-every", type=int, default=50)


def ensure_passive_openmp(argv, module: str = "pacer_core.training.draft") -> None:
    """On a shared 2-core CPU, OpenMP's default busy-waiting makes 2-thread torch 5-7x slower whenever
    another process competes (measured: 7.2 s vs 1.0 s per batched decode step). The policy must be set
    before torch loads, so re-execute ``module`` once with OMP_WAIT_POLICY=PASSIVE."""
    if os.environ.get("OMP_WAIT_POLICY") is None:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.execv(sys.executable, [sys.executable, "-m", module, *argv])


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    ensure_passive_openmp(argv)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    {"generate": stage_generate, "teacher": stage_teacher, "train": stage_train,
     "eval": stage_eval, "export": stage_export, "average": stage_average}[args.stage](args)


if __name__ == "__main__":
    main()
