"""fp32-level products on tensor cores when one operand is exact in TF32 or bf16.

``tl.dot(..., input_precision="tf32x3")`` splits both fp32 operands into a TF32 part and a
remainder and runs three TF32 products (``a_lo b_hi + a_hi b_lo + a_hi b_hi``). The folds of a
ReplaySSM flush multiply fp32 weights by ring entries stored in the activation dtype (the
window's ``B`` for Mamba-2, its keys for Gated DeltaNet): bf16 and fp16 values widen to fp32
exactly and fit TF32's 10 mantissa bits, so ``b_lo`` is zero and one of the three products
adds nothing. :func:`dot_tf32x2` splits ``a`` only and runs the other two.

Error: ``a_hi`` is ``a`` rounded to TF32 (``|a_lo| <= 2^-11 |a|``), ``a_lo`` reaches the tensor
cores truncated to TF32 (relative ``2^-10``), so each product term carries at most
``2^-21 |a b|`` beyond fp32 accumulation, the same order as tf32x3's dropped ``a_lo b_lo``.

Where ``b`` is bf16 (the models' activations), :func:`dot_bf16x3` splits ``a`` into three bf16
parts instead and runs three bf16 products: each part is the rounded remainder of those before
and takes 8 of its bits, so the parts add up to a normal fp32 ``a`` exactly (bf16 keeps fp32's
exponent range) and every product is exact in the fp32 accumulator. The operands are 16-bit, which halves the bytes moved by the layout
changes that feed the MMA; on an H200 a flush's fold ran 2-5% faster than with tf32x2
(benchmarks/NOTES_delta.md, twentieth run).
"""

import triton
import triton.language as tl

__all__ = ["dot_bf16x3", "dot_tf32x2", "dot_tf32x3_split_b", "fp32_dot", "tf32_split"]


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
def dot_bf16x3(a, b, acc):
    """``acc + a @ b`` to fp32 level for ``b`` exact in bf16 (read from bf16): ``a`` split into
    three bf16 parts (each the rounded remainder of the ones before; they add up to a normal
    fp32 ``a`` exactly, bf16 having fp32's exponent range), three bf16 products into the fp32
    accumulator, smallest parts first. ``a`` ``[M, K]`` fp32, ``b`` ``[K, N]`` (any float dtype, exact in
    bf16), ``acc`` ``[M, N]`` fp32; ``M, N, K >= 16``. 16-bit operands halve the bytes the
    operands' layout changes move against the TF32 form."""
    a1 = a.to(tl.bfloat16)
    r1 = a - a1.to(tl.float32)
    a2 = r1.to(tl.bfloat16)
    a3 = (r1 - a2.to(tl.float32)).to(tl.bfloat16)
    b16 = b.to(tl.bfloat16)
    acc = tl.dot(a3, b16, acc=acc)
    acc = tl.dot(a2, b16, acc=acc)
    return tl.dot(a1, b16, acc=acc)


@triton.jit
def fp32_dot(a, b, acc, b_src, PRECISION: tl.constexpr):
    """``acc + a @ b`` at fp32 level: ``PRECISION`` "ieee" / "tf32x3" as ``tl.dot`` takes them, or
    "tf32x2" (:func:`dot_tf32x2`) where ``b`` was read from 16-bit floats at ``b_src`` (a pointer,
    only its dtype is used), tf32x3 otherwise; "bf16x3" (:func:`dot_bf16x3`) where ``b_src`` is
    bf16, "tf32x2"'s choice otherwise."""
    # One return at the end: the compiler builds every branch that is not pruned as constant.
    if PRECISION == "bf16x3" and b_src.dtype.element_ty == tl.bfloat16:
        acc = dot_bf16x3(a, b, acc)
    elif PRECISION == "tf32x2" or PRECISION == "bf16x3":
        if b_src.dtype.element_ty != tl.float32:
            acc = dot_tf32x2(a, b, acc)
        else:
            acc = tl.dot(a, b, acc=acc, input_precision="tf32x3")
    else:
        acc = tl.dot(a, b, acc=acc, input_precision=PRECISION)
    return acc
