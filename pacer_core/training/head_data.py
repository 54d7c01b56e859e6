"""Teacher data for the feature-conditioned draft head: the target's hidden states over target-written text.

For every training sequence (chat prompt + the target's own reply) the target's body runs once over the
whole sequence; we keep, per position, the hidden state its output layer reads (the *feature* f_t,
float16). With the output layer's rows that is enough to recompute the target's logits for any set of
ids during training, so no logits are stored (and the output layer is not run here: on a 2-core CPU it
and the log-normaliser over 49k ids halved the throughput). Shards are written to a git-ignored folder and skipped when they already exist, so an
interrupted run resumes where it stopped."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import torch

from .instructions import evaluation_prompts, resembles_evaluation

def read_replies(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def training_sequences(records: list[dict], tokenizer, seed: int) -> list[dict]:
    """Chat-templated prompt + reply ids, shuffled; drops every prompt resembling an evaluation prompt."""
    evaluation = evaluation_prompts()
    sequences = []
    for record in records:
        if resembles_evaluation(record["prompt"], evaluation):
            continue
        encoded = tokenizer.apply_chat_template([{"role": "user", "content": record["prompt"]}],
                                                add_generation_prompt=True, tokenize=True)
        prompt_ids = list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)
        sequences.append({"ids": prompt_ids + list(record["reply_ids"]), "prompt_len": len(prompt_ids),
                          "kind": record["kind"]})
    random.Random(seed).shuffle(sequences)
    return sequences


def generated_sequences(folder: Path, seed: int) -> list[dict]:
    """Replies the draft trainer generated (``python -m pacer_core.training.draft generate``: files of
    samples with already-templated prompt ids and the target's reply ids), as training sequences. Its
    instructions were filtered against the evaluation prompts when generated; filtered again here."""
    evaluation = evaluation_prompts()
    sequences = []
    for path in sorted(Path(folder).glob("*.pt")):
        for sample in torch.load(path):
            if resembles_evaluation(sample["instruction"], evaluation):
                continue
            prompt_ids = sample["prompt"].tolist()
            sequences.append({"ids": prompt_ids + sample["reply"].tolist(), "prompt_len": len(prompt_ids),
                              "kind": f"generated-{sample['kind']}"})
    random.Random(seed).shuffle(sequences)
    return sequences


def shard_plan(sequences: list[dict], tokens_per_shard: int) -> list[list[dict]]:
    shards, current, size = [], [], 0
    for sequence in sequences:
        current.append(sequence)
        size += len(sequence["ids"])
        if size >= tokens_per_shard:
            shards.append(current)
            current, size = [], 0
    if current:
        shards.append(current)
    return shards


@torch.inference_mode()
def target_features(target, sequences: list[list[int]]) -> list[torch.Tensor]:
    """One right-padded pass of the target's body: per sequence the features [L, H] (float16)."""
    longest = max(len(ids) for ids in sequences)
    input_ids = torch.zeros(len(sequences), longest, dtype=torch.long)
    attention = torch.zeros(len(sequences), longest, dtype=torch.long)
    for row, ids in enumerate(sequences):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        attention[row, :len(ids)] = 1
    features = target.model(input_ids=input_ids, attention_mask=attention).last_hidden_state
    return [features[row, :len(ids)].to(torch.float16).clone() for row, ids in enumerate(sequences)]


def write_shard(target, shard: list[dict], path: Path, tokens_per_batch: int) -> None:
    ordered = sorted(shard, key=lambda sequence: len(sequence["ids"]))
    records = {"ids": [], "features": [], "prompt_len": [], "kind": []}
    batch: list[dict] = []
    for sequence in ordered + [None]:
        if sequence is not None and (not batch or (len(batch) + 1) * len(sequence["ids"]) <= tokens_per_batch):
            batch.append(sequence)
            continue
        if batch:
            records["ids"] += [torch.tensor(item["ids"], dtype=torch.int32) for item in batch]
            records["features"] += target_features(target, [item["ids"] for item in batch])
            records["prompt_len"] += [item["prompt_len"] for item in batch]
            records["kind"] += [item["kind"] for item in batch]
        batch = [sequence] if sequence is not None else []
    temporary = path.with_suffix(".tmp")
    torch.save(records, temporary)
    temporary.rename(path)


def load_shards(folder: Path, limit: int | None = None) -> list[dict]:
    """Every sequence of the written shards (ids, features, prompt_len, kind)."""
    sequences = []
    for path in sorted(folder.glob("shard_*.pt"))[:limit]:
        records = torch.load(path)
        for index in range(len(records["ids"])):
            sequences.append({key: records[key][index] for key in records})
    return sequences


def frequent_ids(sequences: list[dict], count: int, always: tuple[int, ...] = ()) -> torch.Tensor:
    """The ``count`` ids seen most often in the training text, most frequent first (``always`` first)."""
    from .vocabulary import rank_ids

    vocab_size = int(max(int(s["ids"].max()) for s in sequences)) + 1
    return rank_ids([s["ids"] for s in sequences], vocab_size, always)[:count]


def token_batches(sequences: list[dict], tokens_per_batch: int, max_length: int, rng: random.Random) -> list[list[dict]]:
    """Shuffled batches of similar-length sequences (cut to ``max_length``) of about ``tokens_per_batch``."""
    ordered = sorted(sequences, key=lambda s: min(len(s["ids"]), max_length))
    batches, current = [], []
    for sequence in ordered:
        length = min(len(sequence["ids"]), max_length)
        if current and (len(current) + 1) * length > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(sequence)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def collate(batch: list[dict], max_length: int, device="cpu", reply_only: bool = False) -> dict:
    """Right-padded ids [B, L] (long), features [B, L, H] (float32) and a validity mask [B, L] over the
    feature positions whose logits the loss scores (``reply_only``: only those scoring reply tokens)."""
    length = min(max(len(s["ids"]) for s in batch), max_length)
    hidden = batch[0]["features"].shape[-1]
    ids = torch.zeros(len(batch), length, dtype=torch.long)
    features = torch.zeros(len(batch), length, hidden)
    valid = torch.zeros(len(batch), length, dtype=torch.bool)
    for row, sequence in enumerate(batch):
        size = min(len(sequence["ids"]), length)
        ids[row, :size] = sequence["ids"][:size].long()
        features[row, :size] = sequence["features"][:size].float()
        valid[row, :size] = True
        if reply_only:
            valid[row, : max(sequence["prompt_len"] - 1, 0)] = False   # f_{P-1} scores the first reply token
    return {"ids": ids.to(device), "features": features.to(device), "valid": valid.to(device)}
