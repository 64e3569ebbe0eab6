"""ops/_tf32.py: the TF32 split and the two- / three-pass products of the flush folds.

CPU (CI): the split's bit-level properties in the interpreter, and the two-pass product's
algebra (the interpreter multiplies in full fp32). GPU: the product on tensor cores against
float64, next to one-pass TF32 and tf32x3 on the same operands.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from trtllm_replayssm.ops._tf32 import dot_tf32x3_split_b, fp32_dot, tf32_split

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _split_kernel(x_ptr, hi_ptr, lo_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    hi, lo = tf32_split(tl.load(x_ptr + offs))
    tl.store(hi_ptr + offs, hi)
    tl.store(lo_ptr + offs, lo)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                PRECISION: tl.constexpr):
    om, on, ok = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + om[:, None] * K + ok[None, :])
    b_src = b_ptr + ok[:, None] * N + on[None, :]
    b = tl.load(b_src).to(tl.float32)
    acc = tl.load(c_ptr + om[:, None] * N + on[None, :])
    tl.store(out_ptr + om[:, None] * N + on[None, :], fp32_dot(a, b, acc, b_src, PRECISION))


def test_tf32_split_is_exact_and_rounds_to_nearest():
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(992, generator=gen) * 10.0 ** torch.randint(-30, 30, (992,), generator=gen),
                   torch.tensor([0.0, -0.0, 1.0, -1.0, 1.0 + 2.0 ** -11, 1.0 - 2.0 ** -12, 3.4e38, -1e-40])
                   .repeat(4)]).to(DEV)
    hi, lo = torch.empty_like(x), torch.empty_like(x)
    _split_kernel[(1,)](x, hi, lo, BLOCK=x.numel())
    # hi + lo is x exactly; hi carries 10 mantissa bits (the low 13 are zero); lo is at most half
    # a TF32 ulp of x, so hi is the nearest TF32 value.
    assert torch.equal(hi + lo, x)
    assert torch.all(hi.view(torch.int32) & 0x1FFF == 0)
    normal = x.abs() > 1e-37
    assert torch.all(lo[normal].abs() <= x[normal].abs() * 2.0 ** -11)
    assert torch.all(torch.sign(hi[x != 0]) == torch.sign(x[x != 0]))


@pytest.mark.parametrize("precision", ["tf32x2", "bf16x3", "tf32x3"])
@pytest.mark.parametrize("b_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fp32_dot_matches_float64(precision, b_dtype):
    """``acc + a @ b`` with ``b`` read from 16-bit floats (two TF32 passes for "tf32x2") or fp32
    (tf32x3 for both): fp32-level agreement with float64 (in the interpreter, exact fp32).
    "bf16x3" splits ``a`` into bf16 parts, which the interpreter (Triton 3.9) does not round as
    the GPU does: its bf16 case runs on the GPU only (and in ``test_tf32x2_on_tensor_cores_gpu``)."""
    if precision == "bf16x3" and b_dtype == torch.bfloat16 and DEV == "cpu":
        pytest.skip("the Triton interpreter's fp32 -> bf16 conversion is not the GPU's; GPU-only case")
    gen = torch.Generator().manual_seed(1)
    M, N, K = 32, 64, 16
    a = torch.randn(M, K, generator=gen).to(DEV)
    b = torch.randn(K, N, generator=gen).to(b_dtype).to(DEV)
    c = torch.randn(M, N, generator=gen).to(DEV)
    out = torch.empty(M, N, device=DEV)
    _dot_kernel[(1,)](a, b, c, out, M=M, N=N, K=K, PRECISION=precision)
    ref = c.double() + a.double() @ b.double()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 5e-6, err


def test_three_bf16_parts_hold_fp32_exactly():
    """The split behind ``dot_bf16x3`` in torch's round-to-nearest bf16 (the GPU's conversion):
    each part takes 8 of the remainder's bits, so for normal fp32 values the three parts add up
    to the value exactly and three exact bf16 x bf16 products carry the fp32 operand whole; two
    parts would leave up to 2^-17 of it out."""
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(1 << 16, generator=gen) * 10.0 ** torch.randint(-20, 20, (1 << 16,), generator=gen)
    a1 = a.to(torch.bfloat16).float()
    r1 = a - a1
    a2 = r1.to(torch.bfloat16).float()
    a3 = (r1 - a2).to(torch.bfloat16).float()
    exact = a.double()
    assert torch.equal(a1.double() + a2.double() + a3.double(), exact)
    two = (a1.double() + a2.double() - exact).abs() / exact.abs()
    assert two.max().item() > 2.0 ** -18


@triton.jit
def _split_b_kernel(a_ptr, b_ptr, c_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    om, on, ok = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    b_hi, b_lo = tf32_split(tl.load(b_ptr + ok[:, None] * N + on[None, :]))
    acc = tl.load(c_ptr + om[:, None] * N + on[None, :])
    out = dot_tf32x3_split_b(tl.load(a_ptr + om[:, None] * K + ok[None, :]), b_hi, b_lo, acc)
    tl.store(out_ptr + om[:, None] * N + on[None, :], out)


def test_dot_tf32x3_split_b_matches_float64():
    """tf32x3 with ``b`` split beforehand (both operands general fp32): fp32-level agreement with
    float64 (in the interpreter, exact fp32 products of the parts; on the GPU, tensor cores)."""
    gen = torch.Generator().manual_seed(3)
    M, N, K = 32, 64, 16
    a = (torch.randn(M, K, generator=gen) * torch.rand(M, K, generator=gen).exp()).to(DEV)
    b = torch.randn(K, N, generator=gen).to(DEV)
    c = torch.randn(M, N, generator=gen).to(DEV)
    out = torch.empty(M, N, device=DEV)
    _split_b_kernel[(1,)](a, b, c, out, M=M, N=N, K=K)
    ref = c.double() + a.double() @ b.double()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 5e-6, err


@pytest.mark.gpu
def test_tf32x2_on_tensor_cores_gpu():
    """On the GPU the two-pass product is as close to float64 as tf32x3 and far closer than one
    TF32 pass (which would fail the flush's 1e-5 checkpoint target after a few windows)."""
    gen = torch.Generator().manual_seed(2)
    M, N, K = 64, 128, 16
    a = (torch.randn(M, K, generator=gen) * torch.rand(M, K, generator=gen).exp()).cuda()
    b = torch.randn(K, N, generator=gen).to(torch.bfloat16).cuda()
    c = torch.randn(M, N, generator=gen).cuda()
    ref = c.double() + a.double() @ b.double()
    errs = {}
    for precision in ("tf32", "tf32x3", "tf32x2", "bf16x3", "ieee"):
        out = torch.empty(M, N, device="cuda")
        _dot_kernel[(1,)](a, b, c, out, M=M, N=N, K=K, PRECISION=precision)
        errs[precision] = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert errs["tf32x2"] < 2e-6 and errs["tf32x3"] < 2e-6 and errs["bf16x3"] < 2e-6, errs
    assert errs["tf32"] > 20 * errs["tf32x2"], errs
