"""Train the feature-conditioned draft head (EAGLE-style) for a target model.

Stages (each resumable; data and checkpoints live in work/head/, which git ignores):
  features  run the target over target-written replies and keep its hidden states (head_data.py)
  train     fit the head: forward KL to the target at T = 1 and 0.7 over the kept output ids, plus
            regression of the predicted hidden state onto the real one, with a second pass that feeds
            the head its own predictions (what it sees when drafting beyond the first token)
  export    save the head (bfloat16 safetensors + config) into assets/

Example (embedded target, CPU):
  python -m pacer_core.training.head features --max-shards 24
  python -m pacer_core.training.head train --minutes 40
  python -m pacer_core.training.head export
Any target: --target HUB_ID_OR_PATH --device cuda (the data must then be that target's own replies)."""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch

from ..drafters.head_model import FeatureHead, HeadConfig
from .draft import ensure_passive_openmp
from .head_data import (collate, frequent_ids, generated_sequences, load_shards, read_replies, shard_plan,
                        token_batches, training_sequences, write_shard)
from .head_loss import head_losses

REPO_ROOT = Path(__file__).resolve().parents[2]
WORK_DIR = Path(os.environ.get("PACER_HEAD_WORK", REPO_ROOT / "work" / "head"))
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "target_replies.jsonl.gz"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_target(source: str, device: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..loading import resolve_source
    location, _ = resolve_source(source, "target")
    tokenizer = AutoTokenizer.from_pretrained(location)
    model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype).to(device).eval()
    return model, tokenizer


def stage_features(args) -> None:
    target, tokenizer = load_target(args.target, args.device, torch.float32)
    if args.generated:
        sequences = generated_sequences(Path(args.generated), args.seed)
    else:
        sequences = training_sequences(read_replies(Path(args.data)), tokenizer, args.seed)
    shards = shard_plan(sequences, args.tokens_per_shard)[: args.max_shards]
    folder = WORK_DIR / args.features
    folder.mkdir(parents=True, exist_ok=True)
    log(f"{len(sequences)} sequences, {sum(len(s['ids']) for s in sequences):,} tokens; writing {len(shards)} shards")
    from tqdm import tqdm
    for index, shard in enumerate(tqdm(shards, desc="feature shards")):
        path = folder / f"shard_{index:04d}.pt"
        if not path.exists():
            write_shard(target, shard, path, args.tokens_per_batch)


def feature_folders(spec: str) -> list[tuple[str, int]]:
    """``"features-chat*3,features"`` → [("features-chat", 3), ("features", 1)]: the folders to train on,
    each with how many times an epoch repeats its training sequences (to weight a scarce kind of text)."""
    folders = []
    for item in spec.split(","):
        name, _, times = item.strip().partition("*")
        if not name or (times and (not times.isdigit() or int(times) < 1)):
            raise SystemExit(f"--features: {item!r} is not FOLDER or FOLDER*N with N a positive whole number")
        folders.append((name, int(times or 1)))
    return folders


def initial_head(target) -> FeatureHead:
    """A head whose layer starts as a copy of the target's last layer and whose output norm is the
    target's final norm (so its first predictions already live in the target's feature space)."""
    head = FeatureHead(HeadConfig.from_target(target.config))
    last = target.model.layers[-1]
    copies = {"input_norm": last.input_layernorm, "mlp_norm": last.post_attention_layernorm,
              "q_proj": last.self_attn.q_proj, "k_proj": last.self_attn.k_proj, "v_proj": last.self_attn.v_proj,
              "o_proj": last.self_attn.o_proj, "gate_proj": last.mlp.gate_proj, "up_proj": last.mlp.up_proj,
              "down_proj": last.mlp.down_proj}
    with torch.no_grad():
        for name, module in copies.items():
            getattr(head.layer, name).weight.copy_(module.weight.float())
        head.norm.weight.copy_(target.model.norm.weight.float())
    return head


def learning_rate(step: int, total: int, peak: float, warmup: int = 30) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def save_checkpoint(path: Path, head, optimizer, step: int, kept_ids, history: list) -> None:
    temporary = path.with_suffix(".tmp")
    torch.save({"head": head.state_dict(), "config": head.config.to_dict(), "optimizer": optimizer.state_dict(),
                "step": step, "kept_ids": kept_ids, "history": history}, temporary)
    temporary.rename(path)


@torch.no_grad()
def validate(head, batches, embedding, output_rows, regression_weight) -> dict:
    head.eval()
    totals: dict = {}
    for batch in batches:
        _, stats = head_losses(head, batch, embedding, output_rows, regression_weight)
        for key, value in stats.items():
            totals.setdefault(key, []).append(value)
    head.train()
    return {key: round(sum(values) / len(values), 4) for key, values in totals.items()}


def stage_train(args) -> None:
    torch.manual_seed(args.seed)
    target, _ = load_target(args.target, args.device, torch.float32)
    validation, training = [], []
    for name, times in feature_folders(args.features):   # the first sequences of every folder validate
        sequences = load_shards(WORK_DIR / name)
        validation += sequences[: args.validation_sequences]
        training += sequences[args.validation_sequences:] * times
    log(f"{len(training)} training sequences ({sum(len(s['ids']) for s in training):,} tokens), "
        f"{len(validation)} validation")
    checkpoint_path = WORK_DIR / "checkpoint.pt"
    if checkpoint_path.exists():
        state = torch.load(checkpoint_path, map_location=args.device)
        head = FeatureHead(HeadConfig(**state["config"]))
        head.load_state_dict(state["head"])
        head.to(args.device)
        kept_ids, step, history = state["kept_ids"], state["step"], state["history"]
        if args.restart_lr:
            step, history = 0, history + [{"round": "restart", "reply_only": args.reply_only}]
    else:
        head = initial_head(target.cpu()).to(args.device)
        target.to(args.device)
        kept_ids = frequent_ids(training, args.kept_ids, always=tuple(sorted(set(_special_ids(target)))))
        step, history = 0, []
    embedding = target.get_input_embeddings()
    output_rows = target.get_output_embeddings().weight.detach()[kept_ids[: args.train_ids].to(args.device)].float()
    optimizer = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0)
    if checkpoint_path.exists() and not args.restart_lr:
        optimizer.load_state_dict(state["optimizer"])
    rng = random.Random(args.seed)
    per_epoch = token_batches(training, args.tokens_per_batch, args.max_length, rng)
    total_steps = args.epochs * len(per_epoch)
    validation_batches = [collate(b, args.max_length, args.device, args.reply_only) for b in token_batches(
        validation, args.tokens_per_batch, args.max_length, random.Random(1))]
    deadline = time.time() + args.minutes * 60
    head.train()
    from tqdm import tqdm
    progress = tqdm(total=total_steps, initial=step, desc="head steps")
    while step < total_steps and time.time() < deadline:
        epoch_batches = token_batches(training, args.tokens_per_batch, args.max_length,
                                      random.Random(args.seed + step // len(per_epoch)))
        batch = collate(epoch_batches[step % len(per_epoch)], args.max_length, args.device, args.reply_only)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, total_steps, args.lr)
        loss, stats = head_losses(head, batch, embedding, output_rows, args.regression_weight)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        step += 1
        progress.update(1)
        progress.set_postfix({k: round(v, 3) for k, v in stats.items()})
        if step % args.every == 0 or step == total_steps:
            history.append({"step": step, "train": stats,
                            "validation": validate(head, validation_batches, embedding, output_rows,
                                                   args.regression_weight)})
            log(f"step {step}: {history[-1]}")
            save_checkpoint(checkpoint_path, head, optimizer, step, kept_ids, history)
    save_checkpoint(checkpoint_path, head, optimizer, step, kept_ids, history)
    log(f"stopped at step {step}/{total_steps}")


def _special_ids(target) -> list[int]:
    eos = target.generation_config.eos_token_id if target.generation_config else None
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    return [int(i) for i in ids] + [0, 1, 2]


def stage_export(args) -> None:
    """bfloat16 head weights + kept ids + config into the assets folder (the target is not saved)."""
    from safetensors.torch import save_file

    from ..drafters.feature_head import CONFIG_FILE, WEIGHTS_FILE
    state = torch.load(WORK_DIR / "checkpoint.pt", map_location="cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.to(torch.bfloat16).contiguous().cpu() for name, tensor in state["head"].items()}
    tensors["kept_ids"] = state["kept_ids"][: args.kept_ids].to(torch.int32).cpu()
    save_file(tensors, str(out / WEIGHTS_FILE))
    config = {"kind": "feature-head", "target": args.target, "head": state["config"], "trained_steps": state["step"],
              "kept_ids": int(tensors["kept_ids"].numel()), "history": state["history"][-1:]}
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    log(f"exported step {state['step']} to {out}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pacer_core.training.head", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    stages = parser.add_subparsers(dest="stage", required=True)
    features = stages.add_parser("features", help="target hidden states over target-written replies")
    features.add_argument("--target", default="embedded")
    features.add_argument("--device", default="cpu")
    features.add_argument("--data", default=str(DEFAULT_DATA), help="target_replies.jsonl(.gz)")
    features.add_argument("--generated", default=None,
                          help="instead of --data: a folder of replies from `python -m pacer_core.training.draft generate`")
    features.add_argument("--features", default="features", help="sub-folder of the work folder to write shards to")
    features.add_argument("--seed", type=int, default=0)
    features.add_argument("--tokens-per-shard", type=int, default=40_000)
    features.add_argument("--tokens-per-batch", type=int, default=2_400)
    features.add_argument("--max-shards", type=int, default=None)
    train = stages.add_parser("train", help="fit the head on the written feature shards")
    train.add_argument("--target", default="embedded")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="cpu")
    train.add_argument("--features", default="features",
                       help="comma-separated sub-folders of the work folder whose shards to train on; FOLDER*N repeats "
                            "a folder's training sequences N times an epoch")
    train.add_argument("--kept-ids", type=int, default=16384, help="output ids the head may propose (most frequent)")
    train.add_argument("--train-ids", type=int, default=8192,
                       help="the loss covers the first N kept ids (the output layer dominates a step's cost)")
    train.add_argument("--tokens-per-batch", type=int, default=2048)
    train.add_argument("--max-length", type=int, default=320)
    train.add_argument("--epochs", type=int, default=1)
    train.add_argument("--lr", type=float, default=5e-4)
    train.add_argument("--regression-weight", type=float, default=1.0)
    train.add_argument("--validation-sequences", type=int, default=64)
    train.add_argument("--every", type=int, default=25, help="validate and checkpoint every N steps")
    train.add_argument("--reply-only", action="store_true",
                       help="score only the positions that predict reply tokens (the prompt still gives context)")
    train.add_argument("--restart-lr", action="store_true",
                       help="continue from the checkpoint with a fresh schedule of --epochs (a second round)")
    train.add_argument("--minutes", type=float, default=600.0, help="stop (and checkpoint) after this long")
    export = stages.add_parser("export", help="save the trained head (bfloat16) for decoding")
    export.add_argument("--target", default="embedded")
    export.add_argument("--out", default=str(REPO_ROOT / "assets" / "head-smollm2"))
    export.add_argument("--kept-ids", type=int, default=8192,
                        help="ids the shipped head proposes (the most frequent; keep those the loss covered)")
    return parser


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    ensure_passive_openmp(argv, "pacer_core.training.head")
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    {"features": stage_features, "train": stage_train, "export": stage_export}[args.stage](args)


if __name__ == "__main__":
    main()
