"""fp32-level products on TF32 tensor cores when one operand is exact in TF32.

``tl.dot(..., input_precision="tf32x3")`` splits both fp32 operands into a TF32 part and a
remainder and runs three TF32 products (``a_lo b_hi + a_hi b_lo + a_hi b_hi``). The folds of a
ReplaySSM flush multiply fp32 weights by ring entries stored in the activation dtype (the
window's ``B`` for Mamba-2, its keys for Gated DeltaNet): bf16 and fp16 values widen to fp32
exactly and fit TF32's 10 mantissa bits, so ``b_lo`` is zero and one of the three products
adds nothing. :func:`dot_tf32x2` splits ``a`` only and runs the other two.

Error: ``a_hi`` is ``a`` rounded to TF32 (``|a_lo| <= 2^-11 |a|``), ``a_lo`` reaches the tensor
cores truncated to TF32 (relative ``2^-10``), so each product term carries at most
``2^-21 |a b|`` beyond fp32 accumulation, the same order as tf32x3's dropped ``a_lo b_lo``.
"""

import triton
import triton.language as tl

__all__ = ["dot_tf32x2", "dot_tf32x3_split_b", "fp32_dot", "tf32_split"]


@triton.jit
def tf32_split(x):
    """``(hi, lo)`` of an fp32 tensor: ``hi`` rounded to TF32 (nearest, ties away from zero),
    ``lo = x - hi`` (exact in fp32)."""
    bits = x.to(tl.int32, bitcast=True)
    # Adding half of the dropped field's weight to the magnitude bits, then clearing the low 13
    # bits, rounds the magnitude; the sign bit is untouched for finite x.
    hi = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return hi, x - hi


@triton.jit
def dot_tf32x2(a, b, acc):
    """``acc + a @ b`` to fp32 level for ``b`` exact in TF32 (fp32 widened from bf16 / fp16):
    ``a`` ``[M, K]`` fp32, ``b`` ``[K, N]`` fp32, ``acc`` ``[M, N]`` fp32; ``M, N, K >= 16``."""
    hi, lo = tf32_split(a)
    acc = tl.dot(lo, b, acc=acc, input_precision="tf32")
    return tl.dot(hi, b, acc=acc, input_precision="tf32")


@triton.jit
def dot_tf32x3_split_b(a, b_hi, b_lo, acc):
    """tf32x3's three products with ``b`` already split (``(b_hi, b_lo) = tf32_split(b)``), so
    that a ``b`` shared by several products is split once: ``a`` ``[M, K]``, ``b_hi`` /
    ``b_lo`` ``[K, N]``, ``acc`` ``[M, N]``, all fp32; ``M, N, K >= 16``. Smallest terms first."""
    hi, lo = tf32_split(a)
    acc = tl.dot(lo, b_hi, acc=acc, input_precision="tf32")
    acc = tl.dot(hi, b_lo, acc=acc, input_precision="tf32")
    return tl.dot(hi, b_hi, acc=acc, input_precision="tf32")


@triton.jit
def fp32_dot(a, b, acc, b_src, PRECISION: tl.constexpr):
    """``acc + a @ b`` at fp32 level: ``PRECISION`` "ieee" / "tf32x3" as ``tl.dot`` takes them, or
    "tf32x2" (:func:`dot_tf32x2`) where ``b`` was read from 16-bit floats at ``b_src`` (a pointer,
    only its dtype is used), tf32x3 otherwise."""
    # One return at the end: the compiler builds every branch that is not pruned as constant.
    if PRECISION == "tf32x2":
        if b_src.dtype.element_ty != tl.float32:
            acc = dot_tf32x2(a, b, acc)
        else:
            acc = tl.dot(a, b, acc=acc, input_precision="tf32x3")
    else:
        acc = tl.dot(a, b, acc=acc, input_precision=PRECISION)
    return acc
