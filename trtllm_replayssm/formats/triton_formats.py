"""Triton device functions that decode and round the same bits as the torch definitions.

For use inside decode / flush kernels; each function here is bit-identical to its torch
counterpart (tests run them in the Triton interpreter):

* :func:`e2m1_to_float` ~ :func:`~.nvfp4.e2m1_decode`;
* :func:`nvfp4_unpack` ~ the element order of :func:`~.nvfp4.nvfp4_dequantize` (low nibble first);
* :func:`stochastic_round_fp16` ~ :func:`~.stochastic.stochastic_round` to float16, with the
  same Philox counter ``(seed, offset, stream)``.

Importing this module needs ``triton`` (the ``gpu`` extra).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["e2m1_to_float", "nvfp4_unpack", "stochastic_round_fp16"]


@triton.jit
def e2m1_to_float(code):
    """float32 value of 4-bit E2M1 codes held in an integer tensor (bits above 3 ignored)."""
    code = code.to(tl.int32)
    index = code & 7
    # Indices 2..7 are normal: (1 + mantissa / 2) * 2**(exponent - 1); 0 and 1 are 0 and 0.5.
    exponent = (index >> 1) - 1
    normal = (1.0 + 0.5 * (index & 1).to(tl.float32)) * tl.exp2(exponent.to(tl.float32))
    magnitude = tl.where(index < 2, 0.5 * index.to(tl.float32), normal)
    return tl.where((code & 8) != 0, -magnitude, magnitude)


@triton.jit
def nvfp4_unpack(packed):
    """``[BLOCK]`` uint8 bytes -> ``[2 * BLOCK]`` float32 E2M1 values, low nibble first."""
    low = e2m1_to_float(packed & 0x0F)
    high = e2m1_to_float(packed >> 4)
    return tl.reshape(tl.join(low, high), (2 * packed.shape[0],))


@triton.jit
def stochastic_round_fp16(x, seed, offset, layer, flush_count):
    """Round float32 ``x`` to float16 stochastically; ``offset`` is int64, one per element.

    Draws ``tl.philox(seed, offset_lo, offset_hi, layer, flush_count)``'s first word and rounds
    away from zero when it is below ``p * 2**32``; saturates at 65504; NaN becomes ``0x7E00``.
    """
    offset_lo = offset.to(tl.uint32)
    offset_hi = (offset >> 32).to(tl.uint32)
    zero = offset_lo * 0
    bits, _, _, _ = tl.philox(seed, offset_lo, offset_hi, zero + layer, zero + flush_count)

    magnitude = tl.minimum(tl.abs(x), 65504.0)
    nearest = magnitude.to(tl.float16)
    low_bits = nearest.to(tl.int16, bitcast=True).to(tl.int32) & 0x7FFF
    low_bits = low_bits - (nearest.to(tl.float32) > magnitude).to(tl.int32)
    high_bits = tl.minimum(low_bits + 1, 0x7BFF)
    low = low_bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    step = high_bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) - low
    prob_up = tl.where(step > 0, (magnitude - low) / tl.where(step > 0, step, 1.0), 0.0)
    threshold = tl.ceil(prob_up * 4294967296.0).to(tl.int64)
    rounded = tl.where(bits.to(tl.int64) < threshold, high_bits, low_bits)
    sign = (x.to(tl.int32, bitcast=True) >> 31) & 1
    rounded = rounded | (sign << 15)
    rounded = tl.where(x != x, 0x7E00, rounded)
    return rounded.to(tl.int16).to(tl.float16, bitcast=True)
