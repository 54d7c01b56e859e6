"""Pre-packed float32 linear layers for CPU inference (oneDNN).

Why: speculative decoding pays off only when a target pass over a few tokens costs about as much as a pass
over one. On a small CPU the default float32 GEMM repacks each weight matrix on every call, so a 4-token
pass over the embedded target cost 2.2x a 1-token pass (``benchmarks/results/pass_costs.json``): every
verify pass paid for the tokens it checked, and speculative decoding could not beat AR. oneDNN can pack a
weight once into its blocked layout; a pass then streams each weight once whatever the number of rows.
``benchmarks/pass_costs.py --packed both`` measures the two side by side.

Numerics: still float32 with float32 accumulation. A row's result does not depend on how many rows share
the call (``tests/test_packed_linear.py`` checks it), so a target position scores the same in AR's 1-token
passes and in a verify pass: greedy speculative decoding keeps returning AR's tokens.

Only for inference: ``pack_linear_layers`` is applied by ``models.load_target`` to models on the CPU in
float32; a packed layer falls back to the ordinary kernel whenever autograd needs a graph."""
from __future__ import annotations

import os

import torch
from torch import nn
from torch.nn import functional

ENV_SWITCH = "PACER_PACKED_LINEAR"   # "0" turns packing off
ROWS_HINT = 4                         # the verify pass size the packed layout is tuned for


def packing_available() -> bool:
    """oneDNN is built in and exposes the pack-once linear ops."""
    return (torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def packing_wanted(device: torch.device, dtype: torch.dtype) -> bool:
    """Pack when the model runs in float32 on the CPU, unless PACER_PACKED_LINEAR=0."""
    if os.environ.get(ENV_SWITCH, "1").strip() in ("0", "false", "no", "off"):
        return False
    return torch.device(device).type == "cpu" and dtype == torch.float32 and packing_available()


class PackedLinear(nn.Module):
    """nn.Linear's forward with the weight packed once. ``weight``/``bias`` stay the original tensors
    (shared, not copied), so shapes, tied embeddings and readers of the weight see what they saw before."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        with torch.no_grad():
            self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), ROWS_HINT)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if hidden.dtype != torch.float32 or hidden.device.type != "cpu" or (
                torch.is_grad_enabled() and (hidden.requires_grad or self.weight.requires_grad)):
            return functional.linear(hidden, self.weight, self.bias)
        leading = hidden.shape[:-1]
        rows = hidden.reshape(-1, self.in_features).contiguous()
        bias = None if self.bias is None else self.bias.detach()
        output = torch.ops.mkldnn._linear_pointwise(rows, self.packed_weight, bias, "none", [], "")
        return output.reshape(*leading, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed=oneDNN"


def pack_linear_layers(model: nn.Module) -> int:
    """Replace every nn.Linear of ``model`` (output layer included) by a PackedLinear; returns how many."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, PackedLinear(child))
                replaced += 1
    return replaced
