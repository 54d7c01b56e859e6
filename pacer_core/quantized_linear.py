"""Weight-only quantized linear layers: int8 per output channel or int4 in groups along the input, with
bfloat16 activations inside the kernel and the layer's own dtype outside it.

Why: a drafter made of the target's own weights agrees with the target far more often than a small trained
draft (docs/drafters.md); quantizing only the weights keeps that agreement (activations stay in
bfloat16, whose rounding the target's greedy choices rarely notice) while each matrix product reads 4x or 8x
fewer bytes than float32.

Kernels (torch's own; docs/drafters.md says why not torchao): int8 ``aten._weight_int8pack_mm`` (CPU);
int4 ``aten._weight_int4pack_mm_for_cpu`` on the CPU and ``aten._weight_int4pack_mm`` on CUDA. A device or
build without the kernel raises ``QuantizationUnavailable`` naming what is missing, at build time.

The pure math (``int8_per_channel``, ``int4_groupwise``, ``dequantize_*``) is separate from the layer so the
tests can check a layer's output against its own dequantized weights."""
from __future__ import annotations

import torch
from torch import nn

BITS = (4, 8)
INT4_GROUP_SIZE = 32        # the GGUF Q4_1 block the embedded target was published in
INT4_INNER_K_TILES = 2       # the int4 kernels' packing: K must be a multiple of 16 * this
INT4_OFFSET = 8              # the kernels store w = (q - 8) * scale + zero, q in 0..15


class QuantizationUnavailable(RuntimeError):
    """No weight-only kernel for this bit width on this device or torch build."""


# ---------------------------------------------------------------- pure math

def int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] float → (int8 codes [N, K], scales [N]) with w ≈ code * scale, symmetric per output row."""
    weight = weight.float()
    scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    codes = torch.round(weight / scales[:, None]).clamp(-128, 127).to(torch.int8)
    return codes, scales


def dequantize_int8(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return codes.float() * scales.float()[:, None]


def int4_groupwise(weight: torch.Tensor, group_size: int = INT4_GROUP_SIZE
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[N, K] float → (codes 0..15 as int32 [N, K], scales [N, K/G], zeros [N, K/G]), asymmetric per group:
    w ≈ (code - 8) * scale + zero, the group's minimum mapping to code 0 and its maximum to 15."""
    rows, columns = weight.shape
    groups = weight.float().reshape(rows, columns // group_size, group_size)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scales = ((high - low) / 15.0).clamp(min=1e-12)
    codes = torch.round((groups - low[..., None]) / scales[..., None]).clamp(0, 15).to(torch.int32)
    zeros = low + scales * INT4_OFFSET
    return codes.reshape(rows, columns), scales, zeros


def dequantize_int4(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    rows, columns = codes.shape
    group_size = columns // scales.shape[1]
    groups = codes.reshape(rows, -1, group_size).float()
    return ((groups - INT4_OFFSET) * scales[..., None] + zeros[..., None]).reshape(rows, columns)


# ---------------------------------------------------------------- kernels

def _pack_int4(codes: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cpu":
        return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), INT4_INNER_K_TILES)
    pairs = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)       # CUDA takes two codes a byte
    return torch.ops.aten._convert_weight_to_int4pack(pairs.to(device).contiguous(), INT4_INNER_K_TILES)


def _int4_matmul(device: torch.device):
    return (torch.ops.aten._weight_int4pack_mm_for_cpu if device.type == "cpu"
            else torch.ops.aten._weight_int4pack_mm)


def int4_fits(out_features: int, in_features: int, group_size: int = INT4_GROUP_SIZE) -> bool:
    """The int4 kernels need N to be a multiple of 16, K of the group and of 16 * inner K tiles (a layer
    that does not fit is stored in int8 instead)."""
    return (out_features % 16 == 0 and in_features % group_size == 0
            and in_features % (16 * INT4_INNER_K_TILES) == 0)


def storable_bits(bits: int, out_features: int, in_features: int, group_size: int = INT4_GROUP_SIZE) -> int:
    """``bits``, or 8 for an int4 layer whose shape the int4 kernels do not take."""
    return bits if bits == 8 or int4_fits(out_features, in_features, group_size) else 8


class QuantizedLinear(nn.Module):
    """``nn.Linear``'s forward with weight-only int4 or int8 weights. Inputs of any float dtype; the output
    has the input's dtype. The float weight is not kept."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, bits: int,
                 group_size: int = INT4_GROUP_SIZE):
        super().__init__()
        if bits not in BITS:
            raise ValueError(f"bits must be 4 or 8, not {bits}")
        weight = weight.detach()
        self.out_features, self.in_features = weight.shape
        self.bits, self.group_size = bits, group_size
        self.device = weight.device
        self.bias = None if bias is None else bias.detach().float()
        if bits == 8:
            codes, scales = int8_per_channel(weight)
            self.codes, self.scales = codes.to(self.device), scales.to(self.device, torch.bfloat16)
        else:
            if not int4_fits(self.out_features, self.in_features, group_size):
                raise ValueError(f"int4 needs out_features divisible by 16 and in_features by {group_size} and "
                                 f"{16 * INT4_INNER_K_TILES}, not {self.out_features} x {self.in_features}")
            codes, scales, zeros = int4_groupwise(weight, group_size)
            self.codes = _pack_int4(codes.cpu() if self.device.type == "cpu" else codes, self.device)
            # [K/G, N, 2]: scale and zero of each group, as the kernels read them
            self.scales = torch.stack([scales.t(), zeros.t()], dim=-1).to(self.device, torch.bfloat16).contiguous()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        leading = hidden.shape[:-1]
        rows = hidden.reshape(-1, self.in_features).to(torch.bfloat16)
        if self.bits == 8:
            output = torch.ops.aten._weight_int8pack_mm(rows, self.codes, self.scales)
        else:
            output = _int4_matmul(self.device)(rows, self.codes, self.group_size, self.scales)
        output = output.to(hidden.dtype)
        if self.bias is not None:
            output = output + self.bias.to(hidden.dtype)
        return output.reshape(*leading, self.out_features)

    def extra_repr(self) -> str:
        layout = "per channel" if self.bits == 8 else f"groups of {self.group_size}"
        return f"in_features={self.in_features}, out_features={self.out_features}, int{self.bits} {layout}"

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales, self.bias) if t is not None)


def check_kernel(bits: int, device, group_size: int = INT4_GROUP_SIZE) -> None:
    """Run the kernel once on a tiny layer; raise QuantizationUnavailable naming what is missing."""
    device = torch.device(device)
    size = max(16 * INT4_INNER_K_TILES, group_size) * 2
    try:
        layer = QuantizedLinear(torch.randn(size, size, device=device), None, bits, group_size)
        layer(torch.randn(1, size, device=device))
    except (RuntimeError, NotImplementedError, AttributeError) as failure:
        kernel = ("aten._weight_int8pack_mm" if bits == 8 else
                  "aten._weight_int4pack_mm_for_cpu" if device.type == "cpu" else "aten._weight_int4pack_mm")
        first = (str(failure).strip().splitlines() or [type(failure).__name__])[0]
        raise QuantizationUnavailable(
            f"int{bits} weight-only drafting needs the kernel {kernel} on {device.type}, which this torch "
            f"{torch.__version__} build does not provide there ({first[:160]}).") from failure
