"""Stochastic rounding and its Philox4x32-10 generator.

* Philox: the published Random123 known-answer vectors, and bit equality with Triton's own
  ``tl.randint`` / ``tl.philox`` run in the interpreter.
* Rounding: every result is one of the two neighbours (found independently, from a sorted table
  of all the target's values); the mean over ``N`` draws of ``x`` is within 5 standard errors
  ``5 * step * sqrt(p (1 - p) / N)`` of ``x``, for each of the test values, where ``p`` is the
  exact round-up probability; same ``(seed, offset, stream)`` gives the same bits, a different
  seed or stream different ones.
"""

import math

import pytest
import torch

from trtllm_replayssm.formats import (
    SR_DTYPES,
    fp8_dequantize,
    fp8_quantize,
    philox4x32,
    randint,
    stochastic_round,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # Triton kernels run where CUDA is
DRAWS = 4096
STANDARD_ERRORS = 5.0


def _all_finite_values(dtype: torch.dtype) -> torch.Tensor:
    """Sorted finite non-negative values of ``dtype`` in float64, from every bit pattern."""
    width = torch.finfo(dtype).bits
    codes = torch.arange(2**width, dtype=torch.int32)
    if width == 16:
        codes = torch.where(codes >= 2**15, codes - 2**16, codes).to(torch.int16)
    else:
        codes = codes.to(torch.uint8)
    values = codes.view(dtype).double()
    return values[torch.isfinite(values) & (values >= 0)].unique()


def _bits(value: torch.Tensor) -> int:
    """Bit pattern of a one-element float16 / bfloat16 / E4M3 tensor, as an unsigned int."""
    width = torch.finfo(value.dtype).bits
    raw = value.view(torch.int16 if width == 16 else torch.uint8).item()
    return raw % (1 << width)


def _neighbours(x: torch.Tensor, dtype: torch.dtype):
    """float64 ``(lo, hi, p_up)``: magnitudes ``lo <= |x| <= hi`` (saturating at the largest)
    and the probability ``(|x| - lo) / (hi - lo)`` of unbiased rounding to ``hi``."""
    table = _all_finite_values(dtype)
    magnitude = x.double().abs().clamp(max=table[-1])
    hi_index = torch.searchsorted(table, magnitude)
    hi = table[hi_index]
    lo = torch.where(hi == magnitude, hi, table[(hi_index - 1).clamp(min=0)])
    p_up = torch.where(hi > lo, (magnitude - lo) / (hi - lo).clamp(min=1e-300), 0.0)
    return lo, hi, p_up


def _standard_error(lo, hi, p_up) -> torch.Tensor:
    """Standard error of the mean of ``DRAWS`` unbiased roundings."""
    return (hi - lo) * torch.sqrt(p_up * (1 - p_up) / DRAWS)


def _test_values(dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Values across the target's range: normal binades, its subnormals, exact values, ties."""
    finfo = torch.finfo(dtype)
    low, high = math.log2(finfo.smallest_normal) - 3, math.log2(finfo.max) - 1
    exponents = torch.empty(48).uniform_(low, high, generator=g)
    x = (2.0**exponents) * (1 + torch.rand(48, generator=g))
    x = torch.where(torch.rand(48, generator=g) < 0.5, -x, x)
    table = _all_finite_values(dtype).float()
    exact = table[torch.randint(len(table), (4,), generator=g)]
    midpoint = ((table[100] + table[101]) / 2).reshape(1)
    return torch.cat([x, exact, -exact, midpoint, -midpoint])


# -- Philox ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, counter, expected",
    [  # Random123 kat_vectors, philox4x32 with 10 rounds
        ((0x0, 0x0), (0x0, 0x0, 0x0, 0x0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        (
            (0xFFFFFFFF, 0xFFFFFFFF),
            (0xFFFFFFFF,) * 4,
            (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
        ),
        (
            (0xA4093822, 0x299F31D0),
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_known_answers(key, counter, expected):
    seed = key[0] | (key[1] << 32)
    words = philox4x32(seed, *(torch.tensor([c]) for c in counter))
    assert tuple(int(w) for w in words) == expected


def _offsets() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.arange(64), torch.randint(-(2**62), 2**62, (64,), generator=g)])


@pytest.mark.parametrize("seed", [0, 12345, 2**40 + 7, 2**63 - 1])
def test_randint_equals_triton_randint(seed):
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")

    @triton.jit
    def draw(out_ptr, offset_ptr, seed, BLOCK: tl.constexpr):
        index = tl.arange(0, BLOCK)
        offset = tl.load(offset_ptr + index)
        tl.store(out_ptr + index, tl.randint(seed, offset).to(tl.int64))

    offsets = _offsets()
    out = torch.empty_like(offsets, device=DEVICE)
    draw[(1,)](out, offsets.to(DEVICE), seed, BLOCK=offsets.numel())
    assert torch.equal(out.cpu(), randint(seed, offsets))


def test_stochastic_round_bits_equal_triton_philox_with_stream():
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")

    @triton.jit
    def draw(out_ptr, offset_ptr, seed, layer, flush_count, BLOCK: tl.constexpr):
        index = tl.arange(0, BLOCK)
        offset = tl.load(offset_ptr + index)
        lo = offset.to(tl.uint32)
        hi = (offset >> 32).to(tl.uint32)
        bits, _, _, _ = tl.philox(seed, lo, hi, layer + lo * 0, flush_count + lo * 0)
        tl.store(out_ptr + index, bits.to(tl.int64))

    offsets = _offsets()
    out = torch.empty_like(offsets, device=DEVICE)
    seed, layer, flush_count = 987654321, 3, 41
    draw[(1,)](out, offsets.to(DEVICE), seed, layer, flush_count, BLOCK=offsets.numel())
    words = philox4x32(seed, offsets & 0xFFFFFFFF, offsets >> 32, layer, flush_count)
    assert torch.equal(out.cpu(), words[0])


def test_philox_counter_words_and_seed_all_matter():
    counter = torch.arange(1000)
    base = philox4x32(5, counter, 0, 0, 0)[0]
    assert base.min() >= 0 and base.max() < 2**32
    for seed, words in [(6, ()), (5 + 2**32, ()), (5, (1,)), (5, (0, 1)), (5, (0, 0, 1))]:
        changed = philox4x32(seed, counter, *words)[0]
        assert (changed != base).float().mean() > 0.99
    # Roughly uniform: each of 16 buckets of the 32-bit range gets 1000/16 +- 5 sigma.
    counts = torch.bincount(base >> 28, minlength=16).double()
    assert ((counts - 62.5).abs() <= 5 * math.sqrt(62.5)).all()


# -- stochastic rounding ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", SR_DTYPES)
def test_stochastic_round_is_unbiased_and_picks_a_neighbour(dtype):
    values = _test_values(dtype, torch.Generator().manual_seed(1))
    # Default offsets are flat indices, so every draw of every value has its own counter.
    draws = values.expand(DRAWS, -1).contiguous()
    rounded = stochastic_round(draws, dtype, seed=2024)
    assert rounded.dtype == dtype
    result = rounded.double()
    lo, hi, p_up = _neighbours(values, dtype)
    sign = torch.where(values < 0, -1.0, 1.0).double()
    assert ((result == sign * lo) | (result == sign * hi)).all()

    deviation = result.mean(dim=0) - values.double()
    standard_error = _standard_error(lo, hi, p_up)
    assert (deviation.abs() <= STANDARD_ERRORS * standard_error).all()
    # Pooled over all values, a bias toward (or away from) zero of even a small fraction of a
    # step would show: the magnitude deviations summed must stay within 5 pooled errors.
    pooled = (deviation * sign).sum() / standard_error.square().sum().sqrt()
    assert pooled.abs() <= STANDARD_ERRORS
    # Representable values never move; others do take both neighbours.
    exact = hi == lo
    assert (result[:, exact] == values.double()[exact]).all()
    spread = (p_up > 0.05) & (p_up < 0.95)
    assert spread.sum() > 10 and (result[:, spread].std(dim=0) > 0).all()


@pytest.mark.parametrize("dtype", SR_DTYPES)
def test_stochastic_round_is_reproducible_and_keyed(dtype):
    table = _all_finite_values(dtype)
    above_one = int(torch.searchsorted(table, torch.tensor(1.0, dtype=torch.float64)))
    x = torch.full((2000,), float((table[above_one] + table[above_one + 1]) / 2))  # a tie: p = 1/2
    first = stochastic_round(x, dtype, seed=7)
    assert torch.equal(first.float(), stochastic_round(x.clone(), dtype, seed=7).float())
    for other in (
        stochastic_round(x, dtype, seed=8),
        stochastic_round(x, dtype, seed=7, offset=2000),
        stochastic_round(x, dtype, seed=7, stream=(1, 0)),
        stochastic_round(x, dtype, seed=7, stream=(0, 1)),
    ):
        assert 0.35 < (other.float() != first.float()).float().mean() < 0.65
    # An element's rounding depends only on its counter, not on the tensor it sits in.
    part = stochastic_round(x[500:900].reshape(20, 20), dtype, seed=7, offset=500)
    assert torch.equal(part.reshape(-1).float(), first[500:900].float())
    explicit = stochastic_round(x, dtype, seed=7, offset=torch.arange(2000) + 3)
    assert torch.equal(explicit.float(), stochastic_round(x, dtype, seed=7, offset=3).float())
    layers = torch.arange(4)[:, None]
    per_layer = stochastic_round(x.reshape(4, 500), dtype, seed=7, stream=(layers, 9))
    one_layer = stochastic_round(x[1000:1500], dtype, seed=7, offset=1000, stream=(2, 9))
    assert torch.equal(per_layer[2].float(), one_layer.float())


@pytest.mark.parametrize("dtype", SR_DTYPES)
def test_stochastic_round_specials_saturate_and_keep_sign(dtype):
    big = torch.finfo(dtype).max
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([inf, -inf, 2.0 * big, -3.4e38, nan, -0.0, 0.0, big])
    out = stochastic_round(x, dtype, seed=3).float()
    assert out[:4].double().tolist() == [big, -big, big, -big]
    canonical_nan = {torch.float16: 0x7E00, torch.bfloat16: 0x7FC0, torch.float8_e4m3fn: 0x7F}
    assert torch.isnan(out[4]) and _bits(stochastic_round(x[4:5], dtype, 3)) == canonical_nan[dtype]
    assert out[5] == 0 and torch.signbit(out[5]) and not torch.signbit(out[6])
    assert out[7].double().item() == big


def test_fp8_with_scale_is_unbiased():
    g = torch.Generator().manual_seed(5)
    row = torch.randn(1, 64, generator=g) * torch.exp(torch.randn(1, 64, generator=g))
    draws = row.expand(DRAWS, -1).contiguous()
    q, scale = fp8_quantize(draws, seed=99)
    assert torch.equal(scale, row.abs().amax(-1).expand(DRAWS) / 448)
    decoded = fp8_dequantize(q, scale).double()
    lo, hi, p_up = _neighbours(row[0] / scale[0], torch.float8_e4m3fn)
    # Slack for the float32 roundings of x / scale and of the decode product.
    tolerance = STANDARD_ERRORS * _standard_error(lo, hi, p_up) * scale[0] + 2.0**-22 * row[0].abs()
    assert ((decoded.mean(0) - row[0].double()).abs() <= tolerance).all()
    # Error bound of stochastic rounding: less than one E4M3 step (twice the nearest bound).
    bound = torch.maximum(2.0**-3 * draws.double().abs(), 2.0**-9 * scale.double().unsqueeze(-1))
    assert ((decoded - draws.double()).abs() <= bound).all()
    assert not torch.equal(q.float(), fp8_quantize(draws)[0].float())


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        ((torch.randn(4).half(), torch.float16, 0), {}, "x"),
        ((torch.randn(4).double(), torch.float16, 0), {}, "x"),
        ((torch.randn(4), torch.float32, 0), {}, "dtype"),
        ((torch.randn(4), torch.float8_e5m2, 0), {}, "dtype"),
        ((torch.randn(4), torch.float16, -1), {}, "seed"),
        ((torch.randn(4), torch.float16, 2**64), {}, "seed"),
        ((torch.randn(4), torch.float16, 1.5), {}, "seed"),
        ((torch.randn(4), torch.float16, 0), {"offset": torch.zeros(4)}, "offset"),
        ((torch.randn(4), torch.float16, 0), {"offset": torch.zeros(3).long()}, "offset"),
        ((torch.randn(4), torch.float16, 0), {"offset": 2.0}, "offset"),
        ((torch.randn(4), torch.float16, 0), {"stream": (1,)}, "stream"),
        ((torch.randn(4), torch.float16, 0), {"stream": (torch.zeros(3, 1).long(), 0)}, "stream"),
        ((torch.randn(4), torch.float16, 0), {"stream": (torch.zeros(3).long(), 0)}, "stream"),
        ((torch.randn(4), torch.float16, 0), {"stream": (0, 1.0)}, "stream"),
        ((torch.randn(4), torch.float16, 0), {"stream": (torch.zeros(4), 0)}, "stream"),
    ],
)
def test_stochastic_round_rejects_bad_arguments(args, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        stochastic_round(*args, **kwargs)
