"""Triton device functions of the formats equal the torch definitions bit for bit (run in the
Triton interpreter on CPU, compiled on a GPU)."""

import pytest
import torch

from trtllm_replayssm.formats import (
    e2m1_decode,
    nvfp4_dequantize,
    nvfp4_quantize,
    stochastic_round,
)

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
triton_formats = pytest.importorskip("trtllm_replayssm.formats.triton_formats")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _nvfp4_decode_kernel(out_ptr, packed_ptr, scale_ptr, global_scale, BYTES: tl.constexpr):
    row = tl.program_id(0)
    packed = tl.load(packed_ptr + row * BYTES + tl.arange(0, BYTES))
    values = triton_formats.nvfp4_unpack(packed)
    block_scale = tl.load(scale_ptr + row * (BYTES // 8) + tl.arange(0, 2 * BYTES) // 16)
    columns = row * 2 * BYTES + tl.arange(0, 2 * BYTES)
    tl.store(out_ptr + columns, values * (block_scale * global_scale))


@triton.jit
def _sr_fp16_kernel(out_ptr, x_ptr, offset_ptr, seed, layer, flush_count, BLOCK: tl.constexpr):
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + index)
    offset = tl.load(offset_ptr + index)
    rounded = triton_formats.stochastic_round_fp16(x, seed, offset, layer, flush_count)
    tl.store(out_ptr + index, rounded)


def test_nvfp4_decode_matches_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 64, generator=g) * torch.exp(2 * torch.randn(6, 64, generator=g))
    q = nvfp4_quantize(x)
    expected = nvfp4_dequantize(*q)
    out = torch.empty(6, 64, device=DEVICE)
    # E4M3 -> float32 is exact, so the kernel reads the block scales as float32.
    scales = q.block_scale.float().to(DEVICE)
    _nvfp4_decode_kernel[(6,)](out, q.packed.to(DEVICE), scales, q.global_scale.item(), BYTES=32)
    assert torch.equal(out.cpu(), expected)


def test_every_code_pair_unpacks_in_order():
    packed = torch.arange(256, dtype=torch.uint8)
    codes = torch.stack([packed & 0x0F, packed >> 4], -1).reshape(16, 32)
    ones = torch.ones(16, 2, dtype=torch.float32)
    out = torch.empty(16, 32, device=DEVICE)
    _nvfp4_decode_kernel[(16,)](out, packed.to(DEVICE), ones.to(DEVICE), 1.0, BYTES=16)
    assert torch.equal(out.cpu(), e2m1_decode(codes))


def test_stochastic_round_fp16_matches_torch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, generator=g) * torch.exp(6 * torch.randn(512, generator=g))
    x[:6] = torch.tensor([float("inf"), float("-inf"), 1e6, float("nan"), -0.0, 3e-8])
    offsets = torch.arange(512) * 7919 + 2**40
    seed, layer, flush_count = 2**33 + 5, 4, 77
    out = torch.empty(512, dtype=torch.float16, device=DEVICE)
    _sr_fp16_kernel[(4,)](
        out, x.to(DEVICE), offsets.to(DEVICE), seed, layer, flush_count, BLOCK=128
    )
    expected = stochastic_round(x, torch.float16, seed, offsets, stream=(layer, flush_count))
    assert torch.equal(out.cpu().view(torch.int16), expected.view(torch.int16))
