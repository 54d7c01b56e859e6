"""The feature-conditioned draft head: one decoder layer that reads the target's own hidden state.

EAGLE (Li et al. 2024, arXiv 2401.15077): with f_t the hidden state the target's output layer reads at
position t and e(x) the target's token embedding,

    h_t      = fuse([f_t ; e(x_{t+1})])            (2H → H)
    f̂_{t+1}  = norm(DecoderLayer(h_≤t))            causal attention over the head's own positions
    q(x_{t+2}) = softmax(W_out f̂_{t+1})            W_out: the target's output rows for the kept ids

Further tokens continue from the head's own prediction: (f̂_{t+1}, e(x̂_{t+2})) → f̂_{t+2}. The head
stores no embedding or output matrix of its own: both are the target's, frozen, so the head is small
(one layer + the fusion matrix) and its predicted state lives in the target's feature space.

A reduced output vocabulary (FR-Spec, Zhao et al. 2025, arXiv 2502.14856) keeps only the most frequent
ids; q is 0 on every other id, which keeps speculative sampling exact (such tokens are never drafted and
the residual max(0, p − q) = p covers them). Shape letters: B batch, T positions, H hidden, D head dim."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class HeadConfig:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float
    rms_norm_eps: float

    @classmethod
    def from_target(cls, target_config) -> "HeadConfig":
        rope = getattr(target_config, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(target_config, "rope_theta", 10000.0))
        heads = target_config.num_attention_heads
        return cls(hidden_size=target_config.hidden_size, num_heads=heads,
                   num_kv_heads=getattr(target_config, "num_key_value_heads", heads),
                   head_dim=getattr(target_config, "head_dim", None) or target_config.hidden_size // heads,
                   intermediate_size=target_config.intermediate_size, rope_theta=float(theta),
                   rms_norm_eps=float(target_config.rms_norm_eps))

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        variance = hidden.float().pow(2).mean(-1, keepdim=True)
        return (hidden.float() * torch.rsqrt(variance + self.eps)).to(hidden.dtype) * self.weight


def rotary_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [T, D] for integer positions [T] (Su et al. 2021, rotary position embedding)."""
    inverse_frequency = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)
    angles = positions.float()[:, None] * inverse_frequency[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply rotary embedding to [B, heads, T, D]."""
    first, second = states.chunk(2, dim=-1)
    return states * cos.to(states.dtype) + torch.cat([-second, first], dim=-1) * sin.to(states.dtype)


class HeadLayer(nn.Module):
    """One Llama-style decoder layer (pre-norm attention with rotary positions, SwiGLU MLP)."""

    def __init__(self, config: HeadConfig):
        super().__init__()
        self.config = config
        hidden, heads, kv_heads, head_dim = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
        self.input_norm = RMSNorm(hidden, config.rms_norm_eps)
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.mlp_norm = RMSNorm(hidden, config.rms_norm_eps)
        self.gate_proj = nn.Linear(hidden, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, hidden, bias=False)

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor, past: tuple | None = None,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """hidden [B, T, H], positions [T]; past = (keys, values) [B, kv_heads, P, D] or None;
        mask: bool [T, P + T] (True = may attend), causal when None. Returns the layer output and the
        keys/values of the new positions."""
        config = self.config
        batch, length, _ = hidden.shape
        normed = self.input_norm(hidden)
        queries = self.q_proj(normed).view(batch, length, config.num_heads, config.head_dim).transpose(1, 2)
        keys = self.k_proj(normed).view(batch, length, config.num_kv_heads, config.head_dim).transpose(1, 2)
        values = self.v_proj(normed).view(batch, length, config.num_kv_heads, config.head_dim).transpose(1, 2)
        cos, sin = rotary_tables(positions, config.head_dim, config.rope_theta)
        queries, keys = rotate(queries, cos, sin), rotate(keys, cos, sin)
        all_keys = keys if past is None else torch.cat([past[0], keys], dim=2)
        all_values = values if past is None else torch.cat([past[1], values], dim=2)
        if mask is None:
            mask = causal_mask(length, all_keys.shape[2] - length, hidden.device)
        repeat = config.num_heads // config.num_kv_heads
        attended = F.scaled_dot_product_attention(queries, all_keys.repeat_interleave(repeat, dim=1),
                                                  all_values.repeat_interleave(repeat, dim=1), attn_mask=mask)
        hidden = hidden + self.o_proj(attended.transpose(1, 2).reshape(batch, length, -1))
        normed = self.mlp_norm(hidden)
        hidden = hidden + self.down_proj(F.silu(self.gate_proj(normed)) * self.up_proj(normed))
        return hidden, (keys, values)


def causal_mask(new: int, past: int, device=None) -> torch.Tensor:
    """bool [new, past + new]: new position i sees every past position and new positions ≤ i."""
    return torch.ones(new, past + new, dtype=torch.bool, device=device).tril(diagonal=past)


class FeatureHead(nn.Module):
    """Predicts the target's next hidden state from its current one and the next token's embedding.

    ``embedding`` and ``output_rows`` are the target's (not parameters of the head: not saved, not
    trained). ``kept_ids`` [K] are the output ids the head can propose (all ids for a full head)."""

    def __init__(self, config: HeadConfig):
        super().__init__()
        self.config = config
        self.fuse = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.layer = HeadLayer(config)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def predict_features(self, target_features: torch.Tensor, next_embeddings: torch.Tensor,
                         positions: torch.Tensor, past: tuple | None = None, mask: torch.Tensor | None = None):
        """[B, T, H] features and embeddings of the following tokens → predicted next features [B, T, H]
        and the layer's new keys/values."""
        fused = self.fuse(torch.cat([target_features, next_embeddings], dim=-1))
        hidden, new_past = self.layer(fused, positions, past, mask)
        return self.norm(hidden), new_past


def kept_logits(predicted_features: torch.Tensor, output_rows: torch.Tensor) -> torch.Tensor:
    """Logits over the kept ids [..., K] from predicted features [..., H] and the target's rows [K, H]."""
    return predicted_features @ output_rows.t()
