"""A lean decode path for the quantized copy of a Llama-family target (Llama, SmolLM2, Qwen2, Mistral):
fused q/k/v and gate/up projections, a preallocated KV cache cropped by moving its length, and no
per-call bookkeeping beyond the arithmetic.

Why: profiled on the 2-core CPU, a one-token step of the quantized copy through the transformers module
tree spent about two thirds of its time outside the matrix products (hundreds of small operators and the
Python between them: README, "Drafters"). A drafter's cost per token is what decides whether drafting
pays, so its step is written out here once, for the one architecture family it serves; any other target
drafts through the ordinary module tree (``self_quantized.quantized_copy``).

The math is the target's (RMSNorm, rotary positions from the target's own rotary module, grouped-query
attention, SiLU-gated MLP); only the linear weights differ (quantized). The tests compare it with the
module tree's quantized copy, including after crops and row reorders."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from ..kvcache import CachedModel
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


class LeanKVCache:
    """Keys and values of every layer in preallocated [B, kv heads, capacity, head dim] tensors; the first
    ``length`` positions are valid. Cropping moves ``length``; capacity doubles when a feed overflows it."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, device, dtype):
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.device, self.dtype = device, dtype
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.length = 0

    def ensure(self, batch: int, needed: int) -> None:
        capacity = self.keys[0].shape[2] if self.keys else 0
        if self.keys and self.keys[0].shape[0] != batch:
            if self.length:
                raise ValueError("the batch size changes only through reorder()")
            self.keys, self.values, capacity = [], [], 0
        if needed <= capacity:
            return
        capacity = max(needed, 2 * capacity, 64)
        shape = (batch, self.kv_heads, capacity, self.head_dim)
        grown = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(2 * self.layers)]
        for index, old in enumerate(self.keys + self.values):
            grown[index][:, :, : self.length] = old[:, :, : self.length]
        self.keys, self.values = grown[: self.layers], grown[self.layers:]

    def reorder(self, rows: torch.Tensor) -> None:
        self.keys = [keys.index_select(0, rows) for keys in self.keys]
        self.values = [values.index_select(0, rows) for values in self.values]


class LeanDecoder(nn.Module):
    """The quantized copy's forward over new tokens with a LeanKVCache. Activations (the residual stream,
    norms, attention) are float32 by default: bfloat16 throughout was no faster on the 2-core CPU (its
    elementwise kernels are slower there) and agreed a little less often with the int8 copy (0.983 vs 0.988)."""

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

    def new_kv_cache(self) -> LeanKVCache:
        return LeanKVCache(len(self.layers), self.kv_heads, self.head_dim, self.device, self.activations)

    def norm(self, hidden: torch.Tensor, weight: torch.Tensor, epsilon: float) -> torch.Tensor:
        return functional.rms_norm(hidden, (self.hidden_size,), weight, epsilon)

    @torch.inference_mode()
    def forward(self, token_ids: torch.Tensor, cache: LeanKVCache,
                keep: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, T, V], the final normed hidden states [B, T, H]); with ``keep`` only the last ``keep``
        positions go through the output layer (T becomes ``keep`` in both)."""
        batch, count = token_ids.shape
        start = cache.length
        cache.ensure(batch, start + count)
        hidden = self.embed(token_ids).to(self.activations)
        positions = torch.arange(start, start + count, device=self.device).unsqueeze(0)
        cos, sin = (table.unsqueeze(2) for table in self.rotary(hidden, positions))        # [1, T, 1, D]
        mask = self._mask(start, count)
        for index, layer in enumerate(self.layers):
            normed = self.norm(hidden, layer.input_norm, layer.epsilon)
            hidden = hidden + self._attention(layer, normed, cos, sin, cache, index, start, mask)
            gate, up = layer.gate_up(self.norm(hidden, layer.post_norm, layer.epsilon)).split(layer.intermediate, -1)
            hidden = hidden + layer.down(functional.silu(gate) * up)
        cache.length = start + count
        final = self.norm(hidden if not keep else hidden[:, -keep:], self.final_norm, self.epsilon)
        return self.lm_head(final), final

    def _mask(self, start: int, count: int) -> torch.Tensor | None:
        """Causal over the new tokens (None for one token: it sees everything before it)."""
        if count == 1:
            return None
        key_positions = torch.arange(start + count, device=self.device)
        query_positions = torch.arange(start, start + count, device=self.device)
        return key_positions[None, :] <= query_positions[:, None]

    def _attention(self, layer: LeanLayer, normed, cos, sin, cache: LeanKVCache, index: int, start: int, mask):
        """Rotary positions on queries and keys together (one fused product made them adjacent), the new
        keys and values into the cache, grouped-query attention over everything cached."""
        batch, count, _ = normed.shape
        mixed = layer.qkv(normed)
        query_key = mixed[..., : layer.query_size + layer.kv_size].view(batch, count, -1, self.head_dim)
        query_key = query_key * cos + rotate_half(query_key) * sin
        query = query_key[:, :, : self.heads].transpose(1, 2)
        end = start + count
        cache.keys[index][:, :, start:end] = query_key[:, :, self.heads:].transpose(1, 2)
        cache.values[index][:, :, start:end] = mixed[..., layer.query_size + layer.kv_size:].view(
            batch, count, self.kv_heads, self.head_dim).transpose(1, 2)
        attended = functional.scaled_dot_product_attention(
            query, cache.keys[index][:, :, :end], cache.values[index][:, :, :end], attn_mask=mask,
            enable_gqa=self.kv_heads != self.heads)
        return layer.output(attended.transpose(1, 2).reshape(batch, count, self.heads * self.head_dim))


class LeanCache:
    """One run's state of the lean drafter, with ``kvcache.CachedModel``'s interface (forward, crop,
    reorder, feed_sequence, length, calls), so every decoder drafts with it unchanged."""

    features = None
    feature_length = 0

    def __init__(self, decoder: LeanDecoder, vocab_size: int):
        self.decoder, self.vocab_size = decoder, vocab_size
        self.kv = decoder.new_kv_cache()
        self.device = decoder.device
        self.calls = 0

    @property
    def length(self) -> int:
        return self.kv.length

    def forward(self, new_token_ids, output_hidden_states: bool = False, keep: int | None = None):
        """As ``CachedModel.forward``: logits [B, T, V] float32 (only the last ``keep`` rows when given)."""
        if not torch.is_tensor(new_token_ids):
            new_token_ids = torch.tensor([list(new_token_ids)], dtype=torch.long)
        logits, hidden = self.decoder(new_token_ids.to(self.device), self.kv, keep)
        self.calls += 1
        logits = logits[..., : self.vocab_size].float()
        return (logits, hidden.float()) if output_hidden_states else logits

    def crop(self, length: int) -> None:
        self.kv.length = min(self.kv.length, length)

    def reorder(self, ancestor_index: torch.Tensor) -> None:
        self.kv.reorder(ancestor_index.to(self.device))

    feed_sequence = CachedModel.feed_sequence
