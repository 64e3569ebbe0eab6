"""Our NVFP4 quantization equals NVIDIA ModelOpt's NVFP4 quantizer bit for bit.

ModelOpt's ``NVFP4QTensor.quantize`` (the tensor-level path its checkpoint export uses) runs on
CPU; its packed codes, E4M3 block scales and FP32 global scale are compared with ours as raw bits,
and its dequantization with ours.
"""

import warnings

import pytest
import torch

from trtllm_replayssm.formats import E2M1_VALUES, nvfp4_dequantize, nvfp4_quantize

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # ModelOpt warns about untested transformers versions
    qtensor = pytest.importorskip("modelopt.torch.quantization.qtensor")
NVFP4QTensor = qtensor.NVFP4QTensor


def _modelopt_quantize(x: torch.Tensor, global_scale: torch.Tensor | None = None):
    # ModelOpt takes the absolute value of its scaled copy in place; hand it a clone anyway.
    packed, block_scale, global_scale = NVFP4QTensor.quantize(
        x.clone(), 16, weights_scaling_factor_2=global_scale
    )
    return packed, block_scale, global_scale


def _modelopt_dequantize(packed, block_scale, global_scale) -> torch.Tensor:
    return packed.dequantize(
        dtype=torch.float32, scale=block_scale, double_scale=global_scale, block_sizes={-1: 16}
    )


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    view = {torch.float8_e4m3fn: torch.uint8, torch.float32: torch.int32}
    if a.dtype in view:
        a, b = a.view(view[a.dtype]), b.view(view[b.dtype])
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _distribution(kind: str, shape, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(shape, generator=g)
    if kind == "lognormal":  # blocks spanning many binades: exercises subnormal block scales
        return x * torch.exp(4 * torch.randn(shape, generator=g))
    if kind == "outliers":  # a few huge values: most blocks far below the global amax
        return torch.where(torch.rand(shape, generator=g) < 0.005, x * 3e4, x)
    if kind == "heavy_tail":
        return x / torch.randn(shape, generator=g).abs().clamp(min=1e-3)  # Cauchy-like
    if kind == "uniform":
        return torch.rand(shape, generator=g) * 10 - 5
    return x


SHAPES = [(16,), (4, 64), (3, 5, 32), (2, 3, 8, 128)]
KINDS = ["normal", "lognormal", "outliers", "heavy_tail", "uniform"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_matches_modelopt_per_tensor(shape, kind):
    seed = 100 * SHAPES.index(shape) + KINDS.index(kind)
    x = _distribution(kind, shape, torch.Generator().manual_seed(seed))
    packed, block_scale, global_scale = _modelopt_quantize(x)
    ours = nvfp4_quantize(x)
    assert _same_bits(ours.packed, packed._quantized_data)
    assert _same_bits(ours.block_scale, block_scale)
    assert _same_bits(ours.global_scale, global_scale.float())
    theirs = _modelopt_dequantize(packed, block_scale, global_scale)
    assert torch.equal(nvfp4_dequantize(*ours), theirs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matches_modelopt_for_half_inputs(dtype):
    x = _distribution("outliers", (6, 96), torch.Generator().manual_seed(12)).to(dtype)
    packed, block_scale, global_scale = _modelopt_quantize(x)
    ours = nvfp4_quantize(x)
    assert _same_bits(ours.packed, packed._quantized_data)
    assert _same_bits(ours.block_scale, block_scale)
    assert _same_bits(ours.global_scale, global_scale.float())


def test_matches_modelopt_on_exact_ties_and_saturation():
    # Global scale 2**-8 and a +-6 element per block make the block scale exactly 448 * 2**k,
    # so the scaled values below land exactly on the E2M1 midpoints.
    grid = torch.tensor(E2M1_VALUES)
    midpoints = (grid[1:] + grid[:-1]) / 2
    rows = []
    for block_scale in (448.0, 2.0, 0.25, 2.0**-6):
        block = torch.cat([torch.tensor([6.0]), midpoints, -midpoints, torch.tensor([0.0])])
        rows.append(block * block_scale * 2.0**-8)
    x = torch.stack(rows)
    packed, block_scale, global_scale = _modelopt_quantize(x)
    ours = nvfp4_quantize(x)
    assert ours.global_scale.item() == 2.0**-8
    assert _same_bits(ours.packed, packed._quantized_data)
    assert _same_bits(ours.block_scale, block_scale)
    # And ties really went to the even code: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, ...
    element_scale = (ours.block_scale.float() * ours.global_scale).repeat_interleave(16, -1)
    decoded = nvfp4_dequantize(*ours) / element_scale
    assert decoded[0, 1:8].tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]


@pytest.mark.parametrize("kind", ["normal", "lognormal", "outliers"])
def test_matches_modelopt_per_slot_and_head(kind):
    x = _distribution(kind, (3, 4, 2, 64), torch.Generator().manual_seed(13))
    ours = nvfp4_quantize(x, scale_dims=2)
    # ModelOpt with its own per-slice scales, one (slot, head) at a time ...
    for s in range(x.shape[0]):
        for h in range(x.shape[1]):
            packed, block_scale, global_scale = _modelopt_quantize(x[s, h])
            assert _same_bits(ours.packed[s, h], packed._quantized_data)
            assert _same_bits(ours.block_scale[s, h], block_scale)
            assert _same_bits(ours.global_scale[s, h], global_scale.float())
    # ... and in one call with our per-(slot, head) scales broadcast over the rest.
    packed, block_scale, _ = _modelopt_quantize(x, ours.global_scale[..., None, None])
    assert _same_bits(ours.packed, packed._quantized_data)
    assert _same_bits(ours.block_scale, block_scale)


def test_matches_modelopt_with_a_given_global_scale():
    x = _distribution("normal", (8, 64), torch.Generator().manual_seed(14))
    global_scale = torch.tensor(1e-3)  # block scales overflow E4M3 and clamp at 448
    packed, block_scale, _ = _modelopt_quantize(x, global_scale)
    ours = nvfp4_quantize(x, global_scale)
    assert ours.block_scale.float().eq(448).any()
    assert _same_bits(ours.packed, packed._quantized_data)
    assert _same_bits(ours.block_scale, block_scale)
