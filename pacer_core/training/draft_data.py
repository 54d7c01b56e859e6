"""Data of the draft-distillation pipeline (``python -m pacer_core.training.draft``): paths and constants,
the embedded target and its tokenizer, story openings (training and held-out), batched target generation
with top-k teacher probabilities (stage ``generate``), the corpus teacher cache (stage ``teacher``), and the
draft's architecture as stored in a work/draft checkpoint (shared by training, evaluation and export)."""
from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
import zlib
from pathlib import Path

import torch
from tqdm import tqdm

from ..kvcache import forward_with_cache, returned_cache
from .instructions import extra_instructions, training_instructions

REPO_ROOT = Path(__file__).resolve().parents[2]
WORK_DIR = REPO_ROOT / "work" / "draft"
CORPUS_DIR = Path("/work/shared/corpus")
TRAIN_CORPUS_FILES = {"tinystories_train_lowercase.txt": 0.6, "austen/emma.txt": 0.1, "austen/prideprejudice.txt": 0.1,
                      "austen/persuasion.txt": 0.05, "tinyshakespeare.txt": 0.15}  # file: share of chunks
EVAL_STORY_FILE = "tinystories_valid_head.txt"
EXPORT_DIR = REPO_ROOT / "assets" / "draft-smollm2"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "generation_config.json"]
EOS_ID = 2
PAD_ID = 2
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# ----------------------------------------------------------------------------- shared helpers
def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def target_dir() -> Path:
    from pacer_core.embedded import ensure_embedded_target
    return ensure_embedded_target()


def load_tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(target_dir())


def load_target(dtype=torch.float32):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(target_dir(), dtype=dtype).eval()


def chat_prompt_ids(tokenizer, instruction: str) -> list[int]:
    encoded = tokenizer.apply_chat_template([{"role": "user", "content": instruction}],
                                            add_generation_prompt=True, tokenize=True)
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return list(ids)


def story_opening(paragraph: str, starts: tuple[str, ...]) -> str | None:
    """The first two sentences of a story paragraph that begins with one of `starts`, else None."""
    paragraph = paragraph.strip()
    if paragraph.startswith(starts) and paragraph.count(". ") >= 2:
        return ". ".join(paragraph.split(". ")[:2]) + "."
    return None


def story_openings(count: int) -> list[str]:
    """First two sentences of stories from the held-out TinyStories validation file (eval only)."""
    text = (CORPUS_DIR / EVAL_STORY_FILE).read_text(encoding="utf-8")
    openings = []
    for paragraph in text.split("\n"):
        opening = story_opening(paragraph, ("Once upon a time",))
        if opening:
            openings.append(opening)
        if len(openings) == count:
            break
    return openings


# ----------------------------------------------------------------------------- batched target generation
def left_pad(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(sequence) for sequence in sequences)
    input_ids = torch.full((len(sequences), width), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        input_ids[row, width - len(sequence):] = torch.tensor(sequence)
        attention_mask[row, width - len(sequence):] = 1
    return input_ids, attention_mask


def choose_next_tokens(next_logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    if temperature <= 0:
        return next_logits.argmax(-1)
    sampling_probs = torch.softmax(next_logits / temperature, dim=-1)
    return torch.multinomial(sampling_probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate_batch(target, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                   top_k: int, generator: torch.Generator) -> list[dict]:
    """Left-padded batched decoding; records each reply token and the target's top-k (T=1) distribution
    that predicted it."""
    input_ids, attention_mask = left_pad(prompts)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    output = target(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True)
    cache, next_logits = returned_cache(output), output.logits[:, -1].float()
    next_positions = position_ids[:, -1] + 1
    finished = torch.zeros(len(prompts), dtype=torch.bool)
    tokens, top_ids, top_probs = [], [], []
    for _ in range(max_new_tokens):
        target_probs = torch.softmax(next_logits, dim=-1)
        top = target_probs.topk(top_k, dim=-1)
        next_tokens = choose_next_tokens(next_logits, temperature, generator)
        next_tokens = torch.where(finished, torch.full_like(next_tokens, PAD_ID), next_tokens)
        tokens.append(next_tokens.masked_fill(finished, -1))
        top_ids.append(top.indices.to(torch.int32))
        top_probs.append(top.values.to(torch.float16))
        finished |= next_tokens == EOS_ID
        if finished.all():
            break
        attention_mask = torch.cat([attention_mask, torch.ones((len(prompts), 1), dtype=torch.long)], dim=1)
        output = forward_with_cache(target, cache, next_tokens[:, None], attention_mask=attention_mask,
                                    position_ids=next_positions[:, None])
        cache, next_logits = returned_cache(output), output.logits[:, -1].float()
        next_positions = next_positions + 1
    return unpack_replies(prompts, torch.stack(tokens, 1), torch.stack(top_ids, 1), torch.stack(top_probs, 1))


def unpack_replies(prompts, tokens, top_ids, top_probs) -> list[dict]:
    samples = []
    for row, prompt in enumerate(prompts):
        length = int((tokens[row] >= 0).sum())
        samples.append({"prompt": torch.tensor(prompt, dtype=torch.int32),
                        "reply": tokens[row, :length].to(torch.int32),
                        "top_ids": top_ids[row, :length].clone(), "top_probs": top_probs[row, :length].clone()})
    return samples


def reply_file_samples(path: Path, tokenizer, top_k: int = 32) -> list[dict]:
    """Target-written replies from a JSON-lines file (``kind``, ``prompt``, ``reply_ids``; optionally gzipped)
    as training samples with hard labels only: the reply token is the teacher's whole distribution (top_ids
    holds it first, then padding with probability 0), so the soft loss becomes cross-entropy on the token
    the target wrote, the sequence-level form of distillation (its argmax for greedy replies, a sample of its
    distribution for sampled ones). Prompts resembling an evaluation prompt are dropped by load_samples."""
    from .head_data import read_replies

    samples = []
    for record in read_replies(Path(path)):
        reply = torch.tensor(record["reply_ids"], dtype=torch.int32)
        if len(reply) == 0:
            continue
        top_ids = torch.zeros((len(reply), top_k), dtype=torch.int32)
        top_ids[:, 0] = reply
        top_probs = torch.zeros((len(reply), top_k), dtype=torch.float16)
        top_probs[:, 0] = 1.0
        samples.append({"prompt": torch.tensor(chat_prompt_ids(tokenizer, record["prompt"]), dtype=torch.int32),
                        "reply": reply, "top_ids": top_ids, "top_probs": top_probs,
                        "instruction": record["prompt"], "kind": f"file-{record.get('kind', 'reply')}"})
    log(f"{len(samples)} hard-label replies from {path}")
    return samples


def recase_story(text: str) -> str:
    """Undo the lowercasing of the TinyStories training file well enough for prompts: sentence starts,
    'I', and the names introduced by 'named X'."""
    names = set(re.findall(r"\bnamed (\w+)", text))
    for name in names:
        text = re.sub(rf"\b{name}\b", name.capitalize(), text)
    text = re.sub(r"\bi\b", "I", text)
    text = re.sub(r"\bi'", "I'", text)
    return re.sub(r"(^\"?|[.!?]\"?\s+\"?|\n\"?)([a-z])", lambda match: match.group(1) + match.group(2).upper(), text)


def training_story_openings(count: int, seed: int) -> list[str]:
    """First two sentences of stories from the TinyStories *training* file (recased): raw-completion
    prompts like the evaluation's story openings, which come from the separate validation file."""
    text = (CORPUS_DIR / "tinystories_train_lowercase.txt").read_text(encoding="utf-8")
    openings = [story_opening(paragraph, ("once upon a time", "one day")) for paragraph in text.split("\n")]
    unique = sorted({recase_story(opening) for opening in openings if opening})
    random.Random(seed).shuffle(unique)
    return unique[:count]


def generation_jobs(args) -> list[tuple[str, float, str, list[str]]]:
    """(shard name, temperature, prompt kind 'chat'|'raw', prompts) for every shard; the sources are
    interleaved so that a partial run already covers all of them."""
    instructions = training_instructions(args.seed) + extra_instructions(args.seed)
    if args.limit:
        instructions = instructions[:args.limit]
    sampled = random.Random(args.seed).sample(instructions, int(len(instructions) * args.sampled_fraction))
    stories = training_story_openings(args.stories, args.seed)
    sources = [("chat", 0.0, "chat", instructions), ("story", 0.0, "raw", stories),
               ("sampled", args.temperature, "chat", sampled)]
    per_source = []
    for mode, temperature, kind, subset in sources:
        per_source.append([(f"{mode}_{start // args.batch_size:04d}", temperature, kind,
                            subset[start:start + args.batch_size]) for start in range(0, len(subset), args.batch_size)])
    jobs = []
    for index in range(max(len(shards) for shards in per_source)):
        jobs += [shards[index] for shards in per_source if index < len(shards)]
    return jobs


def prompt_ids(tokenizer, kind: str, text: str) -> list[int]:
    return chat_prompt_ids(tokenizer, text) if kind == "chat" else tokenizer(text)["input_ids"]


def stage_generate(args) -> None:
    torch.set_num_threads(args.threads)
    out_dir = WORK_DIR / "replies"
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, target = load_tokenizer(), load_target(DTYPES[args.dtype])
    jobs = [job for job in generation_jobs(args) if not (out_dir / f"{job[0]}.pt").exists()]
    log(f"generate: {len(jobs)} shards to do (batch {args.batch_size}, max {args.max_new_tokens} new tokens, {args.dtype})")
    for name, temperature, kind, texts in tqdm(jobs, desc="generate shards"):
        generator = torch.Generator().manual_seed(args.seed * 100003 + zlib.crc32(name.encode()) % 100003)
        prompts = [prompt_ids(tokenizer, kind, text) for text in texts]
        max_new_tokens = args.max_new_tokens if kind == "chat" else args.story_tokens
        started = time.time()
        samples = generate_batch(target, prompts, max_new_tokens, temperature, args.top_k, generator)
        for sample, text in zip(samples, texts):
            sample.update(instruction=text, temperature=temperature, kind=kind)
        torch.save(samples, out_dir / f"{name}.tmp")
        (out_dir / f"{name}.tmp").rename(out_dir / f"{name}.pt")
        reply_tokens = sum(len(sample["reply"]) for sample in samples)
        log(f"{name}: {reply_tokens} reply tokens in {time.time() - started:.0f} s")


# ----------------------------------------------------------------------------- corpus teacher cache
def corpus_chunks(tokenizer, chunk_tokens: int, count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    chunks = []
    for name, share in TRAIN_CORPUS_FILES.items():
        text = (CORPUS_DIR / name).read_text(encoding="utf-8", errors="ignore")
        for _ in range(math.ceil(count * share)):
            start = rng.randrange(0, len(text) - chunk_tokens * 8)
            ids = tokenizer(text[start:start + chunk_tokens * 8])["input_ids"]
            chunks.append(ids[1:chunk_tokens + 1])
    rng.shuffle(chunks)
    return chunks[:count]


@torch.no_grad()
def teacher_topk(target, chunks: list[list[int]], top_k: int) -> list[dict]:
    input_ids = torch.tensor(chunks)
    target_logits = target(input_ids=input_ids).logits.float()
    target_probs = torch.softmax(target_logits[:, :-1], dim=-1)
    top = target_probs.topk(top_k, dim=-1)
    return [{"prompt": input_ids[row, :1].to(torch.int32), "reply": input_ids[row, 1:].to(torch.int32),
             "top_ids": top.indices[row].to(torch.int32), "top_probs": top.values[row].to(torch.float16),
             "instruction": None, "temperature": None} for row in range(len(chunks))]


def stage_teacher(args) -> None:
    torch.set_num_threads(args.threads)
    out_dir = WORK_DIR / "corpus"
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, target = load_tokenizer(), load_target(torch.float32)
    chunks = corpus_chunks(tokenizer, args.chunk_tokens, args.chunks, args.seed)
    batches = [chunks[start:start + args.batch_size] for start in range(0, len(chunks), args.batch_size)]
    for index, batch in enumerate(tqdm(batches, desc="teacher batches")):
        path = out_dir / f"corpus_s{args.seed}_{index:04d}.pt"
        if not path.exists():
            torch.save(teacher_topk(target, batch, args.top_k), path.with_suffix(".tmp"))
            path.with_suffix(".tmp").rename(path)


# ----------------------------------------------------------------------------- draft architecture (checkpoints)
def draft_config(args):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=49152, hidden_size=args.hidden, intermediate_size=args.ffn,
                       num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                       num_key_value_heads=max(1, args.hidden // 128), head_dim=64, hidden_act="silu",
                       max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=EOS_ID, pad_token_id=PAD_ID)


def draft_from_checkpoint(state: dict):
    """The draft model stored in a work/draft checkpoint dict."""
    from transformers import LlamaForCausalLM
    draft = LlamaForCausalLM(draft_config(argparse.Namespace(**state["arch"])))
    draft.load_state_dict(state["model"])
    draft.tie_weights()
    return draft
