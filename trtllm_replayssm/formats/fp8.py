"""FP8 E4M3 with one FP32 scale per row.

Layout: ``q`` is ``float8_e4m3fn`` of the tensor's shape ``[..., n]`` (1 sign, 4 exponent, 3
mantissa bits, bias 7, no infinities, largest finite 448); ``scale`` is float32 ``[...]``, one
per row, where a row is everything along the last axis (for a state ``[slots, heads, P, N]``:
one scale per ``(slot, head, p)``). A value decodes as ``x = float(q) * scale``.

Quantization: ``scale = amax(|row|) / 448`` so the row's largest magnitude maps to 448 (an
all-zero row gets scale 1), then ``q = e4m3(clamp(x / scale, -448, 448))`` rounded to nearest
even, or stochastically (:mod:`.stochastic`) when a ``seed`` is given.

Error: for ``|x / scale| >= 2**-6`` (E4M3's normal range) round to nearest is within
``2**-4 |x|``; below it the spacing is ``2**-9 * scale``, so within ``2**-10 * scale``.
Stochastic rounding doubles both bounds (it may pick the farther neighbour).
"""

from __future__ import annotations

import torch

from ._checks import FLOAT_INPUTS, check_finite, check_out_dtype, check_scale, describe
from .nvfp4 import E4M3_MAX
from .stochastic import stochastic_round

__all__ = ["fp8_dequantize", "fp8_quantize"]


def fp8_quantize(
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    *,
    seed: int | None = None,
    offset: torch.Tensor | int | None = None,
    stream: tuple = (0, 0),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to FP8 E4M3 with a per-row scale.

    Args:
        x: ``[..., n]`` float32 / float16 / bfloat16 (at least one axis, ``n >= 1``), finite.
        scale: ``[...]`` (``x.shape[:-1]``) float32, positive and finite; ``None`` derives it as
            ``amax(|row|) / 448`` (1 for an all-zero row).
        seed: ``None`` rounds to nearest even; an int rounds stochastically with the counter
            ``(seed, offset, stream)`` of :func:`~.stochastic.stochastic_round` (x must then be
            float32).
        offset, stream: counter of the stochastic rounding; see
            :func:`~.stochastic.stochastic_round`.

    Returns:
        ``(q [..., n] float8_e4m3fn, scale [...] float32)``.
    """
    if not isinstance(x, torch.Tensor) or x.dtype not in FLOAT_INPUTS or x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(
            f"x: expected a float32, float16 or bfloat16 tensor [..., n] with n >= 1, got {describe(x)}"
        )
    check_finite("x", x)
    if seed is not None and x.dtype != torch.float32:
        raise ValueError(f"x: stochastic rounding (seed given) expects float32, got {x.dtype}")
    if seed is None and (offset is not None or tuple(stream) != (0, 0)):
        raise ValueError("offset, stream: they set the stochastic rounding's counter; pass a seed with them")
    if scale is None:
        scale = x.abs().amax(dim=-1).float() / E4M3_MAX
        # A zero row (or one whose scale underflows) would otherwise divide by zero.
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    else:
        check_scale("scale", scale, torch.float32, tuple(x.shape[:-1]), "one per row of x")
    scaled = (x.float() / scale.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX)
    if seed is None:
        q = scaled.to(torch.float8_e4m3fn)
    else:
        q = stochastic_round(scaled, torch.float8_e4m3fn, seed, offset, stream=stream)
    return q, scale


def fp8_dequantize(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Decode FP8 E4M3 with a per-row scale.

    Args:
        q: ``[..., n]`` float8_e4m3fn.
        scale: ``[...]`` (``q.shape[:-1]``) float32, positive and finite.
        dtype: floating-point dtype of the result.

    Returns:
        ``[..., n]`` of ``dtype``: ``float(q) * scale`` computed in float32, then cast.
    """
    if not isinstance(q, torch.Tensor) or q.dtype != torch.float8_e4m3fn or q.ndim < 1:
        raise ValueError(f"q: expected a float8_e4m3fn tensor [..., n], got {describe(q)}")
    check_scale("scale", scale, torch.float32, tuple(q.shape[:-1]), "one per row of q")
    check_out_dtype(dtype)
    return (q.float() * scale.unsqueeze(-1)).to(dtype)
