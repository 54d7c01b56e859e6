"""A reduced output vocabulary for a drafter (FR-Spec, Zhao et al. 2025, arXiv 2502.14856).

A drafter may score only its K most frequent ids: its output layer then reads K rows instead of the whole
vocabulary (for the embedded 16M draft the output layer is 12.6M of its parameters). q stays a distribution
over the full vocabulary with q = 0 off the kept ids, which keeps speculative sampling exact: such tokens
are never drafted, and the residual max(0, p - q) = p still covers them (docs/algorithms.md#reduced-vocabulary).
SMC-SD's importance weights p/q need q > 0 wherever the target has mass, so its proposal spreads a fixed
small share of the mass over the ids off the kept set (``OFF_VOCABULARY_MASS``)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

# SMC-SD's proposal from a reduced vocabulary: this much probability (at T = 1) spread evenly over the ids
# the drafter does not score, so q > 0 everywhere and the importance weights stay finite.
OFF_VOCABULARY_MASS = 0.01
FREQUENT_IDS_FILE = "frequent_ids.json"


def full_vocabulary_logits(kept_scores: torch.Tensor, kept_ids: torch.Tensor, vocab_size: int,
                           off_mass: float = 0.0) -> torch.Tensor:
    """Logits over the kept ids [..., K] → float32 logits over the whole vocabulary [..., V]. Ids off the kept
    set get -inf, or with ``off_mass`` > 0 one shared logit that gives them that much mass in all at T = 1."""
    scores = kept_scores.float()
    off_count = vocab_size - kept_ids.numel()
    if off_mass > 0 and off_count:
        kept_mass_log = torch.logsumexp(scores, dim=-1, keepdim=True)
        off_logit = kept_mass_log + math.log(off_mass / ((1 - off_mass) * off_count))
        full = off_logit.expand(*scores.shape[:-1], vocab_size).clone()
    else:
        full = torch.full((*scores.shape[:-1], vocab_size), float("-inf"), device=scores.device)
    return full.index_copy_(-1, kept_ids.to(scores.device), scores)


def load_frequent_ids(model_dir) -> torch.Tensor | None:
    """The ids of a draft folder's ``frequent_ids.json`` (most frequent first), or None without one."""
    path = Path(str(model_dir)) / FREQUENT_IDS_FILE
    if not model_dir or not path.exists():
        return None
    return torch.tensor(json.loads(path.read_text())["ids"], dtype=torch.long)


def recommended_kept(model_dir) -> int:
    """How many ids the draft folder recommends drafting from (``default_kept``; 0: all of them)."""
    path = Path(str(model_dir)) / FREQUENT_IDS_FILE
    return int(json.loads(path.read_text()).get("default_kept", 0)) if path.exists() else 0


def save_frequent_ids(model_dir, ids: torch.Tensor, source: str, default_kept: int = 0) -> Path:
    path = Path(model_dir) / FREQUENT_IDS_FILE
    record = {"source": source, "default_kept": int(default_kept), "count": int(ids.numel()),
              "ids": [int(i) for i in ids]}
    path.write_text(json.dumps(record) + "\n")
    return path
