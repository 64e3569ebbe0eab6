"""NVFP4 and FP8 E4M3 formats: code tables, packing, error bounds, edge cases, argument checks.

Error bound checked for NVFP4 (``s`` = the decoded E4M3 block scale, ``g`` = the global scale,
``t = |x| / (s g)``): round to nearest on the E2M1 grid, whose spacing is 0.5 on [0, 2], 1 on
[2, 4] and 2 on [4, 6], gives ``|err| <= s g h(t)`` with ``h = 0.25, 0.5, 1`` on those ranges;
beyond 6 the value saturates, ``|err| = |x| - 6 s g``. For a block whose ideal scale
``s* = block_amax / (6 g)`` lies in E4M3's normal range ``[2**-6, 448]`` the E4M3 rounding
keeps ``|s - s*| <= 2**-4 s*``, hence ``|err| <= (17/16) block_amax / 6`` for every element.
Float32 arithmetic adds at most a few ulps of ``|x|``.
"""

import math

import pytest
import torch

from trtllm_replayssm.formats import (
    E2M1_VALUES,
    e2m1_decode,
    e2m1_encode,
    fp8_dequantize,
    fp8_quantize,
    nvfp4_dequantize,
    nvfp4_quantize,
)

FP32_SLACK = 2.0**-20  # relative, covers the few float32 roundings in scale and decode products


def _e4m3_values() -> torch.Tensor:
    """All finite non-negative E4M3 values, sorted, in float64 (from their bit patterns)."""
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).double()
    values = values[torch.isfinite(values) & (values >= 0)]
    return values.unique()


def _nearest_on_grid(x: torch.Tensor, grid: torch.Tensor, even_index: torch.Tensor) -> torch.Tensor:
    """float64 reference: index of the nearest grid magnitude (saturating), ties to the entry
    whose ``even_index`` is True."""
    magnitude = x.double().abs().clamp(max=grid[-1]).unsqueeze(-1)  # saturate at the largest
    distance = (magnitude - grid).abs()
    best = distance.min(dim=-1, keepdim=True).values
    candidates = distance == best
    # Among tied candidates prefer the even one; otherwise the single nearest.
    prefer = candidates & even_index
    pick = torch.where(prefer.any(-1, keepdim=True), prefer, candidates).double().argmax(-1)
    return pick


def _random_tensor(shape, kind: str, generator: torch.Generator) -> torch.Tensor:
    x = torch.randn(shape, generator=generator)
    if kind == "lognormal":
        x = x * torch.exp(3 * torch.randn(shape, generator=generator))
    elif kind == "outliers":
        mask = torch.rand(shape, generator=generator) < 0.01
        x = torch.where(mask, x * 1e4, x)
    elif kind == "uniform":
        x = torch.rand(shape, generator=generator) * 2 - 1
    return x


# -- E2M1 -------------------------------------------------------------------------------------


def test_every_e2m1_code_decodes_to_its_table_value():
    positive = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    expected = positive + [-v for v in positive]
    decoded = e2m1_decode(torch.arange(16, dtype=torch.uint8))
    assert decoded.dtype == torch.float32
    assert decoded.tolist() == expected
    assert torch.signbit(decoded).tolist() == [False] * 8 + [True] * 8


def test_e2m1_encode_inverts_decode_except_negative_zero():
    codes = torch.arange(16, dtype=torch.uint8)
    expected = codes.clone()
    expected[8] = 0  # -0.0 is not < 0, so it takes the sign-less code
    assert torch.equal(e2m1_encode(e2m1_decode(codes)), expected)


def test_e2m1_encode_rounds_to_nearest_even_and_saturates():
    grid = torch.tensor(E2M1_VALUES, dtype=torch.float64)
    even = torch.tensor([True, False] * 4)
    midpoints = ((grid[1:] + grid[:-1]) / 2).float()
    g = torch.Generator().manual_seed(0)
    x = torch.cat([
        midpoints,
        -midpoints,
        grid.float(),
        -grid.float(),
        torch.randn(4000, generator=g) * 3,
        torch.tensor([6.5, 100.0, -1e30, float("inf")]),
        midpoints + 1e-6,
        midpoints - 1e-6,
    ])
    codes = e2m1_encode(x)
    expected = _nearest_on_grid(x, grid, even).to(torch.uint8) | ((x < 0).to(torch.uint8) << 3)
    assert torch.equal(codes, expected)
    # The ties themselves: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
    assert e2m1_decode(e2m1_encode(midpoints)).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]


# -- NVFP4 layout and exactness -----------------------------------------------------------------


def test_nvfp4_packs_low_nibble_first():
    # Block amax 6 with global scale 1 gives block scale 1, so codes are the values' own.
    x = torch.tensor([0.5, -6.0, 3.0, 1.0] + [0.0] * 12)
    packed, block_scale, global_scale = nvfp4_quantize(x, torch.tensor(1.0))
    assert block_scale.float().tolist() == [1.0]
    assert packed.shape == (8,) and packed.dtype == torch.uint8
    assert packed[:2].tolist() == [0x1 | (0xF << 4), 0x5 | (0x2 << 4)]


@pytest.mark.parametrize("scale_dims", [0, 1, 2])
def test_nvfp4_exact_round_trip_of_values_on_the_grid(scale_dims):
    g = torch.Generator().manual_seed(1)
    shape = (3, 4, 64)
    lead = shape[:scale_dims]
    e4m3 = _e4m3_values()
    normal_scales = e4m3[(e4m3 >= 2**-6)].float()
    block_scale = normal_scales[torch.randint(len(normal_scales), (*shape[:-1], 4), generator=g)]
    global_scale = 2.0 ** torch.randint(-20, 20, lead, generator=g).float()
    codes = torch.randint(16, (*shape[:-1], 4, 16), generator=g, dtype=torch.int32).to(torch.uint8)
    codes[..., 0] = 7  # +6 in every block, so the block amax reproduces the block scale exactly
    gs = global_scale.reshape(*lead, *([1] * (len(shape) + 1 - len(lead))))
    x = (e2m1_decode(codes) * block_scale.unsqueeze(-1) * gs).reshape(shape)
    q = nvfp4_quantize(x, global_scale, scale_dims=scale_dims)
    assert torch.equal(q.block_scale.float(), block_scale)
    assert torch.equal(nvfp4_dequantize(*q), x)
    # Derived global scale: make one block per slice carry scale 448, then amax / 2688 = g.
    block_scale[..., 0] = 448.0
    x = (e2m1_decode(codes) * block_scale.unsqueeze(-1) * gs).reshape(shape)
    q = nvfp4_quantize(x, scale_dims=scale_dims)
    assert torch.equal(q.global_scale, global_scale)
    assert torch.equal(nvfp4_dequantize(*q), x)


@pytest.mark.parametrize("kind", ["normal", "lognormal", "outliers", "uniform"])
@pytest.mark.parametrize("scale_dims", [0, 2])
def test_nvfp4_error_within_derived_bound(kind, scale_dims):
    g = torch.Generator().manual_seed(2)
    x = _random_tensor((4, 3, 8, 64), kind, g)
    q = nvfp4_quantize(x, scale_dims=scale_dims)
    assert q.global_scale.shape == x.shape[:scale_dims]
    err = (nvfp4_dequantize(*q).double() - x.double()).abs()
    blocks = x.double().abs().reshape(*x.shape[:-1], -1, 16)
    gs = q.global_scale.double().reshape(*q.global_scale.shape, *([1] * (blocks.ndim - scale_dims)))
    step = (q.block_scale.double().unsqueeze(-1) * gs).expand_as(blocks)  # s * g per element
    t = blocks / step
    half_spacing = torch.where(t <= 2, 0.25, torch.where(t <= 4, 0.5, 1.0))
    bound = torch.where(t <= 6, half_spacing * step, blocks - 6 * step) + FP32_SLACK * blocks
    assert (err.reshape_as(blocks) <= bound).all()

    block_amax = blocks.amax(-1, keepdim=True)
    ideal = block_amax / (6 * gs)
    normal = ((ideal >= 2**-6) & (ideal <= 448)).expand_as(blocks)
    apriori = (17 / 16) * block_amax / 6 * (1 + FP32_SLACK)
    assert normal.any()
    assert (err.reshape_as(blocks) <= apriori)[normal].all()


def test_nvfp4_zero_equal_and_tiny_blocks():
    zero = torch.zeros(2, 32)
    q = nvfp4_quantize(zero)
    assert q.packed.eq(0).all() and q.block_scale.float().eq(1).all()
    assert q.global_scale.item() == 1.0
    assert nvfp4_dequantize(*q).eq(0).all()

    # Per-slice scales: the all-zero slice must not poison its neighbours or turn into NaN.
    mixed = torch.stack([torch.zeros(32), torch.linspace(-3, 3, 32)])
    q = nvfp4_quantize(mixed, scale_dims=1)
    out = nvfp4_dequantize(*q)
    assert q.global_scale[0].item() == 1.0 and out[0].eq(0).all() and torch.isfinite(out).all()

    # All-equal: every element is the amax, so it encodes as 6 with block scale 448; only the
    # float32 rounding of amax / 2688 and of the decode product remains.
    for value in (1e-30, 0.3, -7.0, 3e30):
        equal = torch.full((2, 48), value)
        q = nvfp4_quantize(equal)
        assert q.block_scale.float().eq(448).all()
        assert q.packed.eq(0x77 if value > 0 else 0xFF).all()
        torch.testing.assert_close(nvfp4_dequantize(*q), equal, rtol=2.0**-22, atol=0)
    exact = torch.full((2, 48), 6 * 448 * 2.0**-10)  # global scale 2**-10 is exact
    assert torch.equal(nvfp4_dequantize(*nvfp4_quantize(exact)), exact)

    # A block 1e9 times smaller than the largest: its scale clamps to E4M3's smallest, and its
    # values decode to zero or a tiny multiple, never to garbage.
    x = torch.cat([torch.full((16,), 1e3), torch.linspace(-1e-6, 1e-6, 16)])
    q = nvfp4_quantize(x)
    assert q.block_scale[1].float().item() == 2.0**-9
    out = nvfp4_dequantize(*q)
    assert torch.equal(out[:16], x[:16])
    assert (out[16:] - x[16:]).abs().max() <= 1e-6


def test_nvfp4_leading_scales_equal_slicewise_quantization():
    g = torch.Generator().manual_seed(3)
    x = _random_tensor((3, 2, 4, 32), "lognormal", g)
    q = nvfp4_quantize(x, scale_dims=2)
    for s in range(3):
        for h in range(2):
            part = nvfp4_quantize(x[s, h])
            assert torch.equal(part.packed, q.packed[s, h])
            scale_bits = part.block_scale.view(torch.uint8)
            assert torch.equal(scale_bits, q.block_scale[s, h].view(torch.uint8))
            assert torch.equal(part.global_scale, q.global_scale[s, h])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nvfp4_half_inputs_quantize_like_their_float32_values(dtype):
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(4)).to(dtype)
    ours, from_fp32 = nvfp4_quantize(x), nvfp4_quantize(x.float())
    assert all(torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
               for a, b in zip(ours, from_fp32))
    assert nvfp4_dequantize(*ours, dtype=dtype).dtype == dtype


def test_nvfp4_does_not_modify_its_input():
    x = torch.randn(2, 32)
    before = x.clone()
    nvfp4_quantize(x)
    assert torch.equal(x, before)


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        ((torch.randn(4, 24),), {}, "x"),
        ((torch.randn(4, 0),), {}, "x"),
        ((torch.randn(()),), {}, "x"),
        ((torch.randint(0, 4, (4, 32)),), {}, "x"),
        ((torch.randn(4, 32).double(),), {}, "x"),
        ((torch.randn(4, 32),), {"scale_dims": 2}, "scale_dims"),
        ((torch.randn(4, 32),), {"scale_dims": -1}, "scale_dims"),
        ((torch.randn(4, 32), torch.ones(4)), {}, "global_scale"),
        ((torch.randn(4, 32), torch.ones(3)), {"scale_dims": 1}, "global_scale"),
        ((torch.randn(4, 32), torch.ones(4).double()), {"scale_dims": 1}, "global_scale"),
        ((torch.randn(4, 32), torch.tensor(0.0)), {}, "global_scale"),
        ((torch.randn(4, 32), torch.tensor(float("inf"))), {}, "global_scale"),
        ((torch.randn(4, 32), 2.0), {"scale_dims": 1}, "global_scale"),
    ],
)
def test_nvfp4_quantize_rejects_bad_arguments(args, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        nvfp4_quantize(*args, **kwargs)


def test_nvfp4_dequantize_rejects_bad_arguments():
    packed, block_scale, global_scale = nvfp4_quantize(torch.randn(3, 4, 32), scale_dims=1)
    bad = [
        ((packed.to(torch.int16), block_scale, global_scale), "packed"),
        ((packed, block_scale.float(), global_scale), "block_scale"),
        ((packed, block_scale[..., :1], global_scale), "block_scale"),
        ((packed[..., :12], block_scale, global_scale), "packed"),  # 24 codes: not whole blocks
        ((packed[..., :8], block_scale, global_scale), "block_scale"),  # one block of two scales
        ((packed, block_scale, -global_scale), "global_scale"),
        ((packed, block_scale, global_scale * float("nan")), "global_scale"),
        ((packed, block_scale, global_scale.double()), "global_scale"),
        ((packed, block_scale, torch.ones(4)), "global_scale"),
        ((packed, block_scale, torch.ones(3, 4, 16)), "global_scale"),
        ((packed, block_scale, 1.0), "global_scale"),
    ]
    for args, name in bad:
        with pytest.raises(ValueError, match=rf"^{name}:"):
            nvfp4_dequantize(*args)


# -- FP8 E4M3 per row ---------------------------------------------------------------------------


def test_fp8_codes_are_the_nearest_e4m3_values():
    grid = _e4m3_values()
    even = torch.arange(len(grid)) % 2 == 0  # consecutive codes alternate mantissa parity
    x = _random_tensor((16, 64), "lognormal", torch.Generator().manual_seed(5))
    midpoints = ((grid[1:] + grid[:-1]) / 2).float()  # exact ties with scale 1
    for row, scale in ((x, None), (torch.stack([midpoints, -midpoints]), torch.ones(2))):
        q, scale = fp8_quantize(row, scale)
        scaled = row / scale.unsqueeze(-1)
        sign = torch.where(scaled < 0, -1.0, 1.0).double()
        assert torch.equal(q.double(), grid[_nearest_on_grid(scaled, grid, even)] * sign)


@pytest.mark.parametrize("kind", ["normal", "lognormal", "outliers"])
def test_fp8_error_within_bound(kind):
    x = _random_tensor((5, 7, 64), kind, torch.Generator().manual_seed(6))
    q, scale = fp8_quantize(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == x.shape[:-1]
    assert torch.equal(scale, x.abs().amax(-1) / 448)
    err = (fp8_dequantize(q, scale).double() - x.double()).abs()
    bound = torch.maximum(2.0**-4 * x.double().abs(), 2.0**-10 * scale.double().unsqueeze(-1))
    assert (err <= bound * (1 + FP32_SLACK)).all()


def test_fp8_exact_round_trip_zero_rows_and_given_scale():
    grid = _e4m3_values()
    g = torch.Generator().manual_seed(7)
    values = grid[torch.randint(len(grid), (6, 32), generator=g)].float()
    values[:, 0] = 448.0
    values = values * torch.where(torch.rand(6, 32, generator=g) < 0.5, -1.0, 1.0)
    scale = 2.0 ** torch.randint(-30, 30, (6,), generator=g).float()
    x = values * scale.unsqueeze(-1)
    q, derived = fp8_quantize(x)
    assert torch.equal(derived, scale) and torch.equal(fp8_dequantize(q, derived), x)

    x[2] = 0
    q, derived = fp8_quantize(x)
    assert derived[2].item() == 1.0 and q[2].float().eq(0).all()
    assert torch.isfinite(fp8_dequantize(q, derived)).all()

    q, used = fp8_quantize(torch.tensor([[1000.0, -3.0]]), torch.tensor([1.0]))
    assert used.item() == 1.0 and q.float().tolist() == [[448.0, -3.0]]  # saturates, no NaN


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        ((torch.randn(()),), {}, "x"),
        ((torch.randint(0, 3, (2, 4)),), {}, "x"),
        ((torch.randn(2, 4).half(),), {"seed": 1}, "x"),
        ((torch.randn(2, 4), torch.ones(2, 4)), {}, "scale"),
        ((torch.randn(2, 4), torch.ones(2).double()), {}, "scale"),
        ((torch.randn(2, 4), torch.tensor([1.0, -1.0])), {}, "scale"),
    ],
)
def test_fp8_rejects_bad_arguments(args, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        fp8_quantize(*args, **kwargs)


def test_fp8_dequantize_rejects_bad_arguments():
    q, scale = fp8_quantize(torch.randn(2, 4))
    bad = [((q.float(), scale), "q"), ((q, scale[:1]), "scale"), ((q, scale.half()), "scale")]
    for args, name in bad:
        with pytest.raises(ValueError, match=rf"^{name}:"):
            fp8_dequantize(*args)


def test_bound_constants_are_what_the_docstring_says():
    # E4M3 has 3 mantissa bits: relative half-spacing 2**-4 in the normal range, and its
    # smallest normal / subnormal are 2**-6 / 2**-9.
    grid = _e4m3_values()
    normal = grid[grid >= 2**-6]
    assert grid[1].item() == 2.0**-9 and normal[0].item() == 2.0**-6
    assert math.isclose(((normal[1:] - normal[:-1]) / normal[:-1]).max().item(), 2.0**-3)
