"""Write a draft folder's frequent_ids.json: the target's reply-token ids ranked by how often the target wrote
them (most frequent first), which ``@small-N`` reads to draft from the N most frequent ids only
(pacer_core/drafters/vocabulary.py; FR-Spec, Zhao et al. 2025, arXiv 2502.14856).

    python -m pacer_core.training.vocabulary --replies REPLIES.jsonl.gz --out assets/draft-smollm2

REPLIES: JSON lines with ``reply_ids`` (token ids the target generated), plain or gzipped. The pair's special
ids (end of turn, end of text) are ranked first so a reduced vocabulary can always end a reply."""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import torch

from ..drafters.vocabulary import save_frequent_ids


def read_reply_ids(path: Path) -> list[list[int]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line)["reply_ids"] for line in lines if line.strip()]


def rank_ids(replies, vocab_size: int, always: tuple[int, ...] = ()) -> torch.Tensor:
    """Every id the replies (lists or tensors of ids) use, most frequent first (``always`` ahead of all; ties by
    id). Also ranks the feature head's kept ids (head_data.frequent_ids)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for reply in replies:
        ids = torch.as_tensor(reply, dtype=torch.long).clamp(0, vocab_size - 1)
        counts += torch.bincount(ids, minlength=vocab_size)
    order = [int(i) for i in torch.argsort(counts, descending=True, stable=True) if counts[i] > 0]
    return torch.tensor(list(dict.fromkeys([*always, *order])), dtype=torch.long)


def coverage(ranked: torch.Tensor, replies: list[list[int]], sizes=(4096, 8192, 16384)) -> dict[int, float]:
    """Share of the reply tokens that the first N ranked ids cover."""
    tokens = torch.tensor([t for reply in replies for t in reply], dtype=torch.long)
    return {size: round(float(torch.isin(tokens, ranked[:size]).float().mean()), 4) for size in sizes}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replies", required=True, help="JSON lines with reply_ids")
    parser.add_argument("--out", required=True, help="the draft model's folder")
    parser.add_argument("--vocab-size", type=int, default=49152)
    parser.add_argument("--always", default="0,1,2", help="ids ranked first (comma-separated; SmolLM2: end of text, turn start and end)")
    parser.add_argument("--default-kept", type=int, default=0,
                        help="ids the draft scores by default when loaded (0: all; see docs/drafters.md)")
    parser.add_argument("--holdout", type=float, default=0.1, help="share of replies kept out to report coverage")
    args = parser.parse_args(argv)
    replies = read_reply_ids(Path(args.replies))
    cut = int(len(replies) * (1 - args.holdout))
    always = tuple(int(i) for i in args.always.split(",") if i.strip())
    ranked = rank_ids(replies[:cut], args.vocab_size, always)
    print(f"{len(replies[:cut])} replies ranked {ranked.numel()} ids; coverage of the {len(replies) - cut} held-out "
          f"replies' tokens by the first N: {coverage(ranked, replies[cut:])}")
    path = save_frequent_ids(args.out, rank_ids(replies, args.vocab_size, always), Path(args.replies).name,
                             args.default_kept)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
