"""NVFP4: FP4 E2M1 elements with an FP8 E4M3 scale per 16 elements and an FP32 global scale.

The layout the Blackwell tensor cores consume, and that the read copy of a ReplaySSM state uses
(replayssm-math.md section 4):

* **Element** (4 bits): FP4 E2M1, ``code = sign << 3 | magnitude``, where the three magnitude
  bits index :data:`E2M1_VALUES` ``= (0, 0.5, 1, 1.5, 2, 3, 4, 6)``. Code 8 is ``-0``.
* **Packing**: two elements per byte along the last axis, low nibble first: byte ``j`` holds
  element ``2j`` in bits 0-3 and element ``2j + 1`` in bits 4-7.
* **Block scale**: one FP8 E4M3 (``float8_e4m3fn``) per 16 consecutive elements of the last axis.
* **Global scale**: one FP32 per tensor, or one per index of the first ``scale_dims`` axes (for
  a state ``[slots, heads, P, N]``, ``scale_dims=2`` gives one per slot and head).

A value decodes as ``x = e2m1(code) * float(block_scale) * global_scale``.

Quantization follows NVIDIA ModelOpt's NVFP4 convention bit for bit (tested against
``NVFP4QTensor.quantize``):

1. ``global_scale = amax(|x|) / (6 * 448)`` in FP32, so the largest block scale is E4M3's 448;
2. ``block_scale = e4m3(clamp(block_amax / (6 * global_scale), 2**-9, 448))``, where an all-zero
   block gets scale 1 (any scale encodes zeros exactly);
3. ``code = e2m1_encode(x / (float(block_scale) * global_scale))``: round to nearest, ties to the
   even code (even mantissa bit), saturating at 6; the sign bit is set for every ``x < 0``, so a
   small negative value that rounds to zero encodes as ``-0`` and ``-0.0`` itself as ``+0``.

One deliberate difference: where the global amax is 0 (an all-zero tensor or slice) ModelOpt's
formula divides by zero and yields NaN; here the global scale is 1 and the slice decodes to 0.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._checks import FLOAT_INPUTS, check_finite, check_out_dtype, check_scale, describe

__all__ = [
    "E2M1_MAX",
    "E2M1_VALUES",
    "E4M3_MAX",
    "NVFP4_BLOCK",
    "NVFP4Tensor",
    "e2m1_decode",
    "e2m1_encode",
    "nvfp4_dequantize",
    "nvfp4_quantize",
]

#: Largest E2M1 magnitude.
E2M1_MAX = 6.0
#: Largest finite FP8 E4M3 (``float8_e4m3fn``) magnitude.
E4M3_MAX = 448.0
#: Smallest positive E4M3 value (a subnormal); block scales are clamped up to it.
E4M3_MIN_SUBNORMAL = 2.0**-9
#: Elements sharing one block scale, along the last axis.
NVFP4_BLOCK = 16
#: E2M1 magnitudes indexed by the low three bits of a code.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

# Decision points between neighbouring magnitudes. At a midpoint, round-to-nearest-even picks
# the neighbour whose mantissa bit is 0 (codes 0, 2, 4, 6): midpoints whose lower neighbour is
# even round down, the others round up.
_MIDPOINTS_TIE_DOWN = (0.25, 1.25, 2.5, 5.0)
_MIDPOINTS_TIE_UP = (0.75, 1.75, 3.5)


class NVFP4Tensor(NamedTuple):
    """An NVFP4-quantized tensor of logical shape ``[..., n]``.

    Attributes:
        packed: ``[..., n / 2]`` uint8, two E2M1 codes per byte, low nibble first.
        block_scale: ``[..., n / 16]`` float8_e4m3fn, one scale per 16 elements.
        global_scale: ``x.shape[:scale_dims]`` float32 (a 0-dim tensor for one per tensor).
    """

    packed: torch.Tensor
    block_scale: torch.Tensor
    global_scale: torch.Tensor


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """Value of each 4-bit E2M1 code.

    Args:
        codes: ``[...]`` uint8, each in ``[0, 16)``.

    Returns:
        ``[...]`` float32; code 8 decodes to ``-0.0``.
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise ValueError(f"codes: expected a uint8 tensor of E2M1 codes, got {describe(codes)}")
    if bool((codes > 15).any()):
        raise ValueError(f"codes: expected 4-bit codes in [0, 16), got {int(codes.max())}")
    magnitudes = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    value = magnitudes[(codes & 0x7).long()]
    return torch.where((codes & 0x8) != 0, -value, value)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 code of each value (ties to even, saturating at +-6).

    Args:
        x: ``[...]`` float32 (or float16 / bfloat16) values already divided by their scale.

    Returns:
        ``[...]`` uint8 codes in ``[0, 16)``; the sign bit is set for every ``x < 0``.
    """
    if not isinstance(x, torch.Tensor) or x.dtype not in FLOAT_INPUTS:
        raise ValueError(f"x: expected a tensor of one of {FLOAT_INPUTS}, got {describe(x)}")
    if bool(torch.isnan(x).any()):
        raise ValueError("x: expected values that are not NaN (E2M1 has no NaN code)")
    magnitude = x.float().abs()
    tie_down = torch.tensor(_MIDPOINTS_TIE_DOWN, dtype=torch.float32, device=x.device)
    tie_up = torch.tensor(_MIDPOINTS_TIE_UP, dtype=torch.float32, device=x.device)
    # Count the decision points below the value: strictly below for tie-down midpoints, at or
    # below for tie-up ones. The count is the magnitude index, 7 (= 6.0) beyond the last.
    index = torch.bucketize(magnitude, tie_down, right=False) + torch.bucketize(
        magnitude, tie_up, right=True
    )
    return (index.to(torch.uint8) | ((x < 0).to(torch.uint8) << 3)).to(torch.uint8)


def _check_scale_dims(scale_dims: int, ndim: int) -> None:
    is_int = isinstance(scale_dims, int) and not isinstance(scale_dims, bool)
    if not is_int or not 0 <= scale_dims < ndim:
        raise ValueError(
            f"scale_dims: expected an int in [0, {ndim - 1}] (leading axes with their own global "
            f"scale), got {scale_dims!r}"
        )


def _expand_global(global_scale: torch.Tensor, ndim: int) -> torch.Tensor:
    """``global_scale`` with trailing singleton axes so it broadcasts against ``ndim`` axes."""
    return global_scale.reshape(*global_scale.shape, *([1] * (ndim - global_scale.ndim)))


def nvfp4_quantize(
    x: torch.Tensor,
    global_scale: torch.Tensor | float | None = None,
    *,
    scale_dims: int = 0,
) -> NVFP4Tensor:
    """Quantize ``x`` to NVFP4 along its last axis.

    Args:
        x: ``[..., n]`` float32 / float16 / bfloat16, finite, ``n`` a multiple of 16.
        global_scale: ``x.shape[:scale_dims]`` float32, positive and finite (a Python float is
            accepted with ``scale_dims=0``). ``None`` derives it from ``x`` as
            ``amax / (6 * 448)`` over all axes from ``scale_dims`` on.
        scale_dims: number of leading axes that each have their own global scale (0: one for
            the whole tensor; 2 for ``[slots, heads, P, N]``: one per slot and head).

    Returns:
        :class:`NVFP4Tensor` ``(packed [..., n/2] uint8, block_scale [..., n/16] float8_e4m3fn,
        global_scale x.shape[:scale_dims] float32)``.
    """
    if not isinstance(x, torch.Tensor) or x.dtype not in FLOAT_INPUTS:
        raise ValueError(f"x: expected a float32, float16 or bfloat16 tensor, got {describe(x)}")
    if x.ndim < 1 or x.shape[-1] % NVFP4_BLOCK != 0 or x.numel() == 0:
        raise ValueError(
            f"x: expected a non-empty tensor whose last dimension is a positive multiple of {NVFP4_BLOCK}, "
            f"got shape {tuple(x.shape)}"
        )
    check_finite("x", x)
    _check_scale_dims(scale_dims, x.ndim)
    lead_shape = tuple(x.shape[:scale_dims])
    if global_scale is None:
        reduce_dims = tuple(range(scale_dims, x.ndim))
        amax = x.abs().amax(dim=reduce_dims).float()
        global_scale = amax / (E2M1_MAX * E4M3_MAX)
        # An all-zero slice (or one so small that the scale underflows) would divide by zero.
        global_scale = torch.where(global_scale == 0, torch.ones_like(global_scale), global_scale)
    else:
        global_scale = _checked_global_scale(global_scale, lead_shape, x.device)

    blocks = x.reshape(*x.shape[:-1], -1, NVFP4_BLOCK)
    global_per_block = _expand_global(global_scale, blocks.ndim - 1)
    block_amax = blocks.abs().amax(dim=-1).float()
    block_scale = block_amax / (E2M1_MAX * global_per_block)
    block_scale = torch.where(block_scale == 0, torch.ones_like(block_scale), block_scale)
    # Clamping first keeps the E4M3 cast from producing 0 (underflow) or NaN (overflow).
    block_scale = block_scale.clamp(min=E4M3_MIN_SUBNORMAL, max=E4M3_MAX).to(torch.float8_e4m3fn)

    scaled = blocks.float() / (block_scale.float() * global_per_block).unsqueeze(-1)
    codes = e2m1_encode(scaled.reshape(x.shape))
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return NVFP4Tensor(packed, block_scale, global_scale)


def _checked_global_scale(global_scale, lead_shape: tuple, device) -> torch.Tensor:
    is_number = isinstance(global_scale, (int, float)) and not isinstance(global_scale, bool)
    if is_number and lead_shape == ():
        global_scale = torch.tensor(float(global_scale), dtype=torch.float32, device=device)
    check_scale("global_scale", global_scale, torch.float32, lead_shape, "x.shape[:scale_dims]")
    return global_scale


def nvfp4_dequantize(
    packed: torch.Tensor,
    block_scale: torch.Tensor,
    global_scale: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Decode NVFP4 back to floating point.

    Args:
        packed: ``[..., n/2]`` uint8, two E2M1 codes per byte, low nibble first.
        block_scale: ``[..., n/16]`` float8_e4m3fn.
        global_scale: ``packed.shape[:k]`` float32 for some ``k`` (0-dim: one per tensor),
            positive and finite.
        dtype: floating-point dtype of the result.

    Returns:
        ``[..., n]`` of ``dtype``: ``e2m1(code) * (float(block_scale) * global_scale)``, computed
        in float32 and then cast.
    """
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.ndim < 1 \
            or packed.shape[-1] % (NVFP4_BLOCK // 2) != 0:
        raise ValueError(f"packed: expected a uint8 tensor [..., n/2] with n a multiple of {NVFP4_BLOCK} (a last "
                         f"dimension that is a multiple of {NVFP4_BLOCK // 2}), got {describe(packed)}")
    expected_scale_shape = (*packed.shape[:-1], packed.shape[-1] * 2 // NVFP4_BLOCK)
    if (
        not isinstance(block_scale, torch.Tensor)
        or block_scale.dtype != torch.float8_e4m3fn
        or packed.shape[-1] % (NVFP4_BLOCK // 2) != 0
        or tuple(block_scale.shape) != expected_scale_shape
    ):
        raise ValueError(
            f"block_scale: expected a float8_e4m3fn tensor of shape {expected_scale_shape} (one "
            f"per {NVFP4_BLOCK} elements of packed), got {describe(block_scale)}"
        )
    if (
        not isinstance(global_scale, torch.Tensor)
        or global_scale.dtype != torch.float32
        or global_scale.ndim >= packed.ndim
        or tuple(global_scale.shape) != tuple(packed.shape[: global_scale.ndim])
    ):
        raise ValueError(
            f"global_scale: expected a float32 tensor whose shape is a leading part of "
            f"{tuple(packed.shape[:-1])}, got {describe(global_scale)}"
        )
    check_scale("global_scale", global_scale, torch.float32, tuple(global_scale.shape), "positive, finite")
    check_out_dtype(dtype)
    codes = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(*packed.shape[:-1], -1)
    values = e2m1_decode(codes).reshape(*block_scale.shape, NVFP4_BLOCK)
    scale = block_scale.float() * _expand_global(global_scale, block_scale.ndim)
    return (values * scale.unsqueeze(-1)).reshape(codes.shape).to(dtype)
