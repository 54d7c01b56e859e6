"""The ``self-int4`` / ``self-int8`` drafters: a copy of the loaded target whose linear layers are quantized
weight-only at load time (``quantized_linear.py``), drafting with a KV cache of its own.

Drafting with a low-bit copy of the target itself needs no training and agrees with the target far more
often than a small draft (QSpec, Zhao et al. 2025, arXiv 2410.11305; docs/drafters.md). The copy shares
every tensor that is not a linear weight with the target (embeddings, norms, rotary tables), so it costs
only the quantized weights: about a quarter (int8) or an eighth (int4) of the target's linear weights.

Exactness does not depend on the copy's numerics: fixed SD and PACER verify with the float target, and
SMC-SD's proposal is a causal LM's softmax, which has full support."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..kvcache import CachedModel, ModelCache
from ..packed_linear import PackedLinear
from ..quantized_linear import INT4_GROUP_SIZE, QuantizationUnavailable, QuantizedLinear, check_kernel, storable_bits
from .lean_decoder import LeanCache, LeanDecoder, lean_supported

SELF_DRAFTERS = {"self-int4": 4, "self-int8": 8}


class SelfQuantizedDrafter:
    """The target's own weights, quantized; an ordinary causal LM to the decoders."""

    kind = "self-quantized"
    reads_target_features = False

    def __init__(self, model: nn.Module, vocab_size: int, name: str, bits: int, target_id: str = ""):
        """``model``: a LeanDecoder (Llama-family targets) or the quantized module tree (any other)."""
        self.model, self.vocab_size, self.name, self.bits = model, vocab_size, name, bits
        self.target_id = target_id
        self.hidden_size = int(getattr(model.config, "hidden_size", 0))

    @classmethod
    def from_target(cls, target: nn.Module, vocab_size: int, name: str, target_id: str = "",
                    group_size: int = INT4_GROUP_SIZE, lean: bool = True,
                    activations: torch.dtype | None = None) -> "SelfQuantizedDrafter":
        """Quantize the target's linear layers (seconds). ``lean``: use the lean decode step when the
        architecture has one (``activations``: its dtype; default the target's)."""
        bits = SELF_DRAFTERS[name]
        check_kernel(bits, next(target.parameters()).device, group_size)
        if lean and lean_supported(target):
            model = LeanDecoder(target, bits, group_size, activations or next(target.parameters()).dtype)
        else:
            model = quantized_copy(target, bits, group_size)
        return cls(model, vocab_size, name, bits, target_id)

    @property
    def lean(self) -> bool:
        return isinstance(self.model, LeanDecoder)

    def new_cache(self, target_cache: ModelCache | None, full_support: bool = False) -> CachedModel:
        if self.lean:
            return LeanCache(self.model, self.vocab_size)
        return CachedModel(self.model, self.vocab_size)

    def quantized_bytes(self) -> int:
        return sum(module.nbytes() for module in self.model.modules() if isinstance(module, QuantizedLinear))

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "bits": self.bits, "dtype": f"int{self.bits} weights",
                "of": self.target_id, "lean_step": self.lean,
                "parameters": count_parameters(self.model),
                "quantized_megabytes": round(self.quantized_bytes() / 2 ** 20, 1)}


def count_parameters(model: nn.Module) -> int:
    """Weights the model computes with: float parameters plus each quantized layer's in × out."""
    floats = sum(parameter.numel() for parameter in model.parameters())
    return floats + sum(m.in_features * m.out_features for m in model.modules() if isinstance(m, QuantizedLinear))


def quantized_copy(target: nn.Module, bits: int, group_size: int = INT4_GROUP_SIZE) -> nn.Module:
    """The target's architecture built without memory, every linear layer replaced by its quantized
    version and every other tensor shared with the target (no copy)."""
    with torch.device("meta"):
        copy = type(target)(target.config)
    for name, module in list(copy.named_modules()):
        original = target.get_submodule(name)
        if isinstance(original, (nn.Linear, PackedLinear)):
            parent_name, _, child = name.rpartition(".")
            layer_bits = storable_bits(bits, original.out_features, original.in_features, group_size)
            quantized = QuantizedLinear(original.weight, original.bias, layer_bits, group_size)
            setattr(copy.get_submodule(parent_name) if parent_name else copy, child, quantized)
        else:
            share_tensors(module, original)
    copy.generation_config = target.generation_config
    return copy.eval().requires_grad_(False)


def share_tensors(module: nn.Module, original: nn.Module) -> None:
    """Point a meta module's own parameters, buffers and tensor attributes at the original's."""
    for name in list(module._parameters):
        module._parameters[name] = original._parameters[name]
    for name in list(module._buffers):
        module._buffers[name] = original._buffers[name]
    for name, value in list(vars(module).items()):
        if torch.is_tensor(value) and value.is_meta:
            setattr(module, name, getattr(original, name))


# ---- for a pair: the builder and the availability check of the table's row (kinds.KINDS) ------------------------------

def self_drafter(target, drafters, name: str, head_dir=None) -> SelfQuantizedDrafter:
    """self-int4 / self-int8: the pair's target with its linear layers quantized (seconds, nothing stored).
    Always over the whole vocabulary: drafting from the most frequent ids only made it cheaper but agree
    much less often (docs/drafters.md)."""
    try:
        return SelfQuantizedDrafter.from_target(target.model, target.vocab_size, name, target.name)
    except QuantizationUnavailable as missing:
        raise ValueError(str(missing)) from None


def self_unavailable(bits: int) -> Callable[[object, object], str | None]:
    def unavailable(target, drafters) -> str | None:
        try:
            check_kernel(bits, target.device)
        except QuantizationUnavailable as missing:
            return str(missing)
        return None
    return unavailable
