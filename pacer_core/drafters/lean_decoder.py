"""A lean decode path for the quantized copy of a Llama-family target (Llama, SmolLM2, Qwen2, Mistral):
fused q/k/v and gate/up projections, keys and values written in place into the same growing KV store every
torch model uses (``kvcache.GrowingLayer``), and no per-call bookkeeping beyond the arithmetic.

Why: profiled on the 2-core CPU, a one-token step of the quantized copy through the transformers module
tree spent about two thirds of its time outside the matrix products (hundreds of small operators and the
Python between them: docs/drafters.md). A drafter's cost per token is what decides whether drafting
pays, so its step is written out here once, for the one architecture family it serves; any other target
drafts through the ordinary module tree (``self_quantized.quantized_copy``).

The math is the target's (RMSNorm, rotary positions from the target's own rotary module, grouped-query
attention, SiLU-gated MLP); only the linear weights differ (quantized). The tests compare it with the
module tree's quantized copy, including after crops and row reorders."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from ..kvcache import CachedModel, GrowingCache
from ..quantized_linear import INT4_GROUP_SIZE, QuantizedLinear, storable_bits

LEAN_MODEL_TYPES = ("llama", "qwen2", "mistral")


def lean_supported(target: nn.Module) -> bool:
    """A Llama-family causal LM with SiLU MLPs and full (not sliding-window) attention."""
    config = target.config
    if getattr(config, "model_type", "") not in LEAN_MODEL_TYPES or getattr(config, "hidden_act", "") != "silu":
        return False
    if getattr(config, "use_sliding_window", False) or getattr(config, "sliding_window", None) and \
            config.model_type == "mistral":
        return False
    inner = getattr(target, "model", None)
    return all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb"))


def _weight_and_bias(*layers: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The layers' weights stacked along the output (one fused product); biases likewise, or None."""
    weight = torch.cat([layer.weight.detach() for layer in layers], dim=0)
    if all(layer.bias is None for layer in layers):
        return weight, None
    biases = [layer.bias.detach() if layer.bias is not None else torch.zeros(layer.out_features)
              for layer in layers]
    return weight, torch.cat(biases)


def fused_quantized(bits: int, group_size: int, *layers: nn.Module) -> QuantizedLinear:
    weight, bias = _weight_and_bias(*layers)
    usable_bits = storable_bits(bits, *weight.shape, group_size)
    return QuantizedLinear(weight, bias, usable_bits, group_size)


class LeanLayer(nn.Module):
    """One decoder layer: projections quantized and fused, norm weights in the activations' dtype."""

    def __init__(self, layer: nn.Module, bits: int, group_size: int, activations: torch.dtype):
        super().__init__()
        attention, mlp = layer.self_attn, layer.mlp
        self.input_norm = layer.input_layernorm.weight.detach().to(activations)
        self.post_norm = layer.post_attention_layernorm.weight.detach().to(activations)
        self.epsilon = float(layer.input_layernorm.variance_epsilon)
        self.qkv = fused_quantized(bits, group_size, attention.q_proj, attention.k_proj, attention.v_proj)
        self.output = fused_quantized(bits, group_size, attention.o_proj)
        self.gate_up = fused_quantized(bits, group_size, mlp.gate_proj, mlp.up_proj)
        self.down = fused_quantized(bits, group_size, mlp.down_proj)
        self.query_size = attention.q_proj.out_features
        self.kv_size = attention.k_proj.out_features
        self.intermediate = mlp.gate_proj.out_features


def rotate_half(states: torch.Tensor) -> torch.Tensor:
    half = states.shape[-1] // 2
    return torch.cat((-states[..., half:], states[..., :half]), dim=-1)


class LeanDecoder(nn.Module):
    """The quantized copy's forward over new tokens, writing through a ``GrowingCache``. Activations (the residual
    stream, norms, attention) are float32 by default: bfloat16 throughout was no faster on the 2-core CPU and
    agreed a little less often with the int8 copy (docs/drafters.md)."""

    def __init__(self, target: nn.Module, bits: int, group_size: int = INT4_GROUP_SIZE,
                 activations: torch.dtype = torch.float32):
        super().__init__()
        inner, config = target.model, target.config
        self.config, self.activations = config, activations
        self.embed, self.rotary = inner.embed_tokens, inner.rotary_emb
        self.final_norm = inner.norm.weight.detach().to(activations)
        self.epsilon = float(inner.norm.variance_epsilon)
        self.layers = nn.ModuleList(LeanLayer(layer, bits, group_size, activations) for layer in inner.layers)
        self.lm_head = fused_quantized(bits, group_size, target.get_output_embeddings())
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.hidden_size = config.hidden_size
        self.device = next(target.parameters()).device

    def norm(self, hidden: torch.Tensor, weight: torch.Tensor, epsilon: float) -> torch.Tensor:
        return functional.rms_norm(hidden, (self.hidden_size,), weight, epsilon)

    @torch.inference_mode()
    def forward(self, token_ids: torch.Tensor, cache: GrowingCache, start: int,
                keep: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The new tokens [B, T] at positions start..start+T-1 after the ``start`` the cache holds → (logits
        [B, T, V], the final normed hidden states [B, T, H]); with ``keep`` only the last ``keep`` positions go
        through the output layer (T becomes ``keep`` in both)."""
        batch, count = token_ids.shape
        hidden = self.embed(token_ids).to(self.activations)
        positions = torch.arange(start, start + count, device=self.device).unsqueeze(0)
        cos, sin = (table.unsqueeze(2) for table in self.rotary(hidden, positions))        # [1, T, 1, D]
        mask = self._mask(start, count)
        for index, layer in enumerate(self.layers):
            normed = self.norm(hidden, layer.input_norm, layer.epsilon)
            hidden = hidden + self._attention(layer, normed, cos, sin, cache, index, mask)
            gate, up = layer.gate_up(self.norm(hidden, layer.post_norm, layer.epsilon)).split(layer.intermediate, -1)
            hidden = hidden + layer.down(functional.silu(gate) * up)
        final = self.norm(hidden if not keep else hidden[:, -keep:], self.final_norm, self.epsilon)
        return self.lm_head(final), final

    def _mask(self, start: int, count: int) -> torch.Tensor | None:
        """Causal over the new tokens (None for one token: it sees everything before it)."""
        if count == 1:
            return None
        key_positions = torch.arange(start + count, device=self.device)
        query_positions = torch.arange(start, start + count, device=self.device)
        return key_positions[None, :] <= query_positions[:, None]

    def _attention(self, layer: LeanLayer, normed, cos, sin, cache: GrowingCache, index: int, mask):
        """Rotary positions on queries and keys together (one fused product made them adjacent), the new
        keys and values into the cache, grouped-query attention over everything cached."""
        batch, count, _ = normed.shape
        mixed = layer.qkv(normed)
        query_key = mixed[..., : layer.query_size + layer.kv_size].view(batch, count, -1, self.head_dim)
        query_key = query_key * cos + rotate_half(query_key) * sin
        query = query_key[:, :, : self.heads].transpose(1, 2)
        new_keys = query_key[:, :, self.heads:].transpose(1, 2)                                    # [B, kv, T, D]
        new_values = mixed[..., layer.query_size + layer.kv_size:].view(batch, count, self.kv_heads, self.head_dim)
        keys, values = cache.layer(index).update(new_keys, new_values.transpose(1, 2))    # every cached position
        attended = functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask,
                                                           enable_gqa=self.kv_heads != self.heads)
        return layer.output(attended.transpose(1, 2).reshape(batch, count, self.heads * self.head_dim))


class LeanCache(CachedModel):
    """One run's state of the lean drafter: a ``CachedModel`` (so a ``ModelCache``) whose model call is the lean
    step, writing through the same ``GrowingCache``."""

    def _run(self, token_ids: torch.Tensor, output_hidden_states: bool):
        return self.model(token_ids, self.cache, self.length, self.keep_logits)
