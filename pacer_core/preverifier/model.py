"""The trainable pre-verification layer: a small MLP over per-token draft features giving a
per-token acceptance logit; a block's score is the product of its tokens' acceptance probabilities,
i.e. the estimated P(every token of the block is accepted | the tokens before it were).

Saved as safetensors + JSON (pair ids, feature spec, block size, thresholds, data summary, held-out
metrics) and loaded automatically for the matching pair."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch
from torch import nn

from .features import TokenFeatures

FEATURE_SPEC = ["hidden (projected)", "q(x)", "log q(x)", "entropy(q)", "top1 - top2", "position / 16"]
# The same plus what the draft's confidence cannot know: this generation's acceptance history and the draft so far.
HISTORY_FEATURE_SPEC = FEATURE_SPEC + ["first-token acceptance rate so far", "previous first token accepted",
                                       "log q of the draft before this token / 8"]
ASSETS_DIR = Path(__file__).resolve().parent.parent.parent / "assets"


def scalar_features(draft_prob, entropy, margin, position, history=None) -> torch.Tensor:
    """[T, 5] from per-token tensors (or floats) of q(x), entropy, margin and position; [T, 8] with
    ``history`` = (acceptance rate so far, previous first token accepted, log q of the draft before it)."""
    draft_prob = torch.as_tensor(draft_prob, dtype=torch.float32)
    columns = [draft_prob, torch.log(draft_prob.clamp_min(1e-8)), torch.as_tensor(entropy, dtype=torch.float32),
               torch.as_tensor(margin, dtype=torch.float32), torch.as_tensor(position, dtype=torch.float32) / 16.0]
    if history is not None:
        rate, last, prefix_log_prob = (torch.as_tensor(column, dtype=torch.float32) for column in history)
        columns += [rate, last, prefix_log_prob / 8.0]
    return torch.stack(columns, dim=-1)


def block_scalars(block: list[TokenFeatures], with_history: bool) -> torch.Tensor:
    """The scalar inputs of a block of drafted tokens, as a layer trained with or without history reads them."""
    history = ([f.context.history_rate for f in block], [f.context.last_accepted for f in block],
               [f.context.prefix_log_prob for f in block]) if with_history else None
    return scalar_features([f.draft_prob for f in block], [f.entropy for f in block], [f.margin for f in block],
                           [f.position for f in block], history)


class PreVerifierLayer(nn.Module):
    """hidden [T, H] + scalars [T, 5 or 8] → acceptance logits [T]."""

    def __init__(self, hidden_size: int, projection: int = 32, width: int = 64, scalar_count: int = 5):
        super().__init__()
        self.hidden_size, self.projection, self.width = hidden_size, projection, width
        self.scalar_count = scalar_count
        self.hidden_norm = nn.LayerNorm(hidden_size)
        self.hidden_proj = nn.Linear(hidden_size, projection)
        self.mlp = nn.Sequential(nn.Linear(projection + scalar_count, width), nn.GELU(), nn.Linear(width, 1))

    def forward(self, hidden: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
        projected = self.hidden_proj(self.hidden_norm(hidden))
        return self.mlp(torch.cat([projected, scalars], dim=-1)).squeeze(-1)


class TrainedPreVerifier:
    """A trained layer plus its thresholds, scoring blocks inside the PACER loop."""

    kind = "trained"

    def __init__(self, layer: PreVerifierLayer, config: dict):
        self.layer = layer.eval()
        self.config = config
        self.default_threshold = float(config["threshold_greedy"])

    def threshold_for(self, temperature: float) -> float:
        key = "threshold_greedy" if temperature <= 0 else "threshold_sampling"
        return float(self.config.get(key, self.default_threshold))

    @torch.inference_mode()
    def token_probs(self, block: list[TokenFeatures]) -> list[float]:
        hidden = torch.stack([feature.hidden for feature in block])
        scalars = block_scalars(block, with_history=self.layer.scalar_count > 5)
        return torch.sigmoid(self.layer(hidden, scalars)).tolist()

    def score_block(self, block: list[TokenFeatures]) -> tuple[float, list[float]]:
        token_probs = self.token_probs(block)
        return math.prod(token_probs), token_probs


def pair_slug(target_id: str, draft_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target_id}__{draft_id}")[:120]


def search_dirs() -> list[Path]:
    from ..embedded import cache_root

    return [ASSETS_DIR / "preverifiers", cache_root() / "preverifiers"]


def save(directory: Path, layer: PreVerifierLayer, config: dict) -> None:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in layer.state_dict().items()}, str(directory / "preverifier.safetensors"))
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def load(directory: Path) -> TrainedPreVerifier:
    from safetensors.torch import load_file

    config = json.loads((directory / "config.json").read_text())
    layer = PreVerifierLayer(config["hidden_size"], config["projection"], config["width"],
                             config.get("scalar_count", 5))
    layer.load_state_dict(load_file(str(directory / "preverifier.safetensors")))
    return TrainedPreVerifier(layer, config)


def load_for_pair(pair) -> TrainedPreVerifier | None:
    """The trained layer for exactly this (target, draft) pair, if one was shipped or trained. A draft model
    drafting from a reduced vocabulary (``small-N``) reads the same hidden states as when it drafts from all
    ids, so it uses the layer trained for the draft model when it has none of its own."""
    draft_names = [pair.draft_id]
    if getattr(pair.drafter, "kind", "") == "independent" and getattr(pair.drafter, "kept_ids", None) is not None:
        draft_names.append(pair.draft_model_id)
    for root in search_dirs():
        for draft_name in draft_names:
            directory = root / pair_slug(pair.target_id, draft_name)
            if (directory / "config.json").exists():
                trained = load(directory)
                if trained.config.get("hidden_size") == pair.drafter.hidden_size:
                    return trained
    return None
