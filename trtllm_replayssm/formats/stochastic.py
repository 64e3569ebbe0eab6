"""Stochastic rounding from float32 to float16 / bfloat16 / FP8 E4M3, keyed by a counter.

Stochastic rounding (SR) rounds ``x`` to the representable neighbour above it (in magnitude)
with probability ``p = (|x| - lo) / (hi - lo)`` and to the one below otherwise, so that
``E[SR(x)] = x``: a checkpoint rewritten at every flush accumulates no rounding bias
(replayssm-math.md section 4).

Random bits come from Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
3", SC 2011), a counter-based generator: the bits for one element are a pure function of
``(seed, counter)``, so a run is reproducible and any kernel can draw the bits of any element
without shared generator state. :func:`philox4x32` is written in int64 torch arithmetic (no
uint32/uint64 kernels needed) and is bit-identical to Triton's ``tl.philox``; :func:`randint`
equals ``tl.randint(seed, offset)`` for an int64 ``offset``.

Counter layout used by :func:`stochastic_round`, the same in every kernel:

* key: ``seed`` (64 bits; ``ReplaySSMConfig.sr_seed``), low word first;
* counter words 0-1: ``offset`` (64 bits), low word first. For a checkpoint
  ``[slots, heads, P, N]`` use ``offset = slot * (heads * P * N) + element``, ``element`` the
  flat index within the slot's state;
* counter words 2-3: ``stream = (layer, flush_count)``, the layer index within the model and the
  number of flushes the slot has made (mod 2**32).

Distinct ``(slot, element, layer, flush_count)`` thus never share a counter. Element ``i``
rounds away from zero when ``r_i < ceil(p_i * 2**32)``, ``r_i`` the first output word. ``p`` is
a multiple of ``2**-32`` (so the rounding is exactly unbiased) whenever ``|x| >= 2**-9 (hi -
lo)``, which holds everywhere except far below the target's smallest subnormal; there the
round-up probability is rounded up to the next multiple of ``2**-32``.

Values beyond the target's largest finite magnitude saturate to it (float16 65504, bfloat16
about 3.39e38, E4M3 448); NaN becomes the target's canonical NaN (float16 ``0x7E00``, bfloat16
``0x7FC0``, E4M3 ``0x7F``).
"""

from __future__ import annotations

import torch

from ._checks import describe

__all__ = ["SR_DTYPES", "philox4x32", "randint", "stochastic_round"]

#: Targets of :func:`stochastic_round`.
SR_DTYPES = (torch.float16, torch.bfloat16, torch.float8_e4m3fn)

_MASK32 = 0xFFFFFFFF
_PHILOX_ROUNDS = 10
_PHILOX_MUL_A = 0xD2511F53
_PHILOX_MUL_B = 0xCD9E8D57
_PHILOX_KEY_A = 0x9E3779B9
_PHILOX_KEY_B = 0xBB67AE85

# target -> (integer dtype of the same width for bit views, sign bit, largest finite magnitude
# bits, canonical NaN bits). NaN payloads differ between CPU and GPU casts, so NaN is written as
# one fixed pattern.
_BITS = {
    torch.float16: (torch.int16, 0x8000, 0x7BFF, 0x7E00),
    torch.bfloat16: (torch.int16, 0x8000, 0x7F7F, 0x7FC0),
    torch.float8_e4m3fn: (torch.uint8, 0x80, 0x7E, 0x7F),
}


def _mulhilo32(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32 bits of ``a * b`` for a 32-bit constant ``a`` and 32-bit values ``b``.

    The 64-bit product does not fit int64, so ``b`` is split into 16-bit halves; every partial
    product stays below 2**49.
    """
    partial_low = a * (b & 0xFFFF)
    middle = a * (b >> 16) + (partial_low >> 16)
    high = middle >> 16
    low = ((middle & 0xFFFF) << 16) | (partial_low & 0xFFFF)
    return high, low


def _as_words(value, device) -> torch.Tensor:
    t = value if isinstance(value, torch.Tensor) else torch.tensor(int(value), dtype=torch.int64)
    return (t.to(device=device, dtype=torch.int64)) & _MASK32


def philox4x32(
    seed: int,
    c0: torch.Tensor | int,
    c1: torch.Tensor | int = 0,
    c2: torch.Tensor | int = 0,
    c3: torch.Tensor | int = 0,
    rounds: int = _PHILOX_ROUNDS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32 with key ``(seed & 0xFFFFFFFF, seed >> 32)`` and counter ``(c0, c1, c2, c3)``.

    Args:
        seed: int in ``[0, 2**64)``.
        c0, c1, c2, c3: counter words, int64 tensors (broadcast together) or ints; only the low
            32 bits of each are used.
        rounds: Philox rounds (10 is the standard and Triton's default).

    Returns:
        Four int64 tensors of the broadcast shape holding uint32 values in ``[0, 2**32)``.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed: expected an int in [0, 2**64), got {seed!r}")
    tensors = [c for c in (c0, c1, c2, c3) if isinstance(c, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    words = torch.broadcast_tensors(*(_as_words(c, device) for c in (c0, c1, c2, c3)))
    c0, c1, c2, c3 = (w.clone() for w in words)
    k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
    for _ in range(rounds):
        high_b, low_b = _mulhilo32(_PHILOX_MUL_B, c2)
        high_a, low_a = _mulhilo32(_PHILOX_MUL_A, c0)
        c0, c1, c2, c3 = high_b ^ c1 ^ k0, low_b, high_a ^ c3 ^ k1, low_a
        k0 = (k0 + _PHILOX_KEY_A) & _MASK32
        k1 = (k1 + _PHILOX_KEY_B) & _MASK32
    return c0, c1, c2, c3


def randint(seed: int, offset: torch.Tensor | int) -> torch.Tensor:
    """The bits ``tl.randint(seed, offset)`` draws for an int64 ``offset``.

    Args:
        seed: int in ``[0, 2**64)``.
        offset: ``[...]`` int64 (or an int); the low and high words are counter words 0 and 1.

    Returns:
        ``[...]`` int64 holding uint32 values.
    """
    offset = _int_tensor("offset", offset)
    return philox4x32(seed, offset & _MASK32, offset >> 32)[0]


def _int_tensor(name: str, value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"{name}: expected an int64 tensor, got {describe(value)}")
        return value.to(torch.int64)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected an int or an int64 tensor, got {describe(value)}")
    if not -2**63 <= value < 2**63:
        raise ValueError(f"{name}: expected an int in [-2**63, 2**63) (an int64 counter), got {value}")
    return torch.tensor(value, dtype=torch.int64)


def _broadcast_counter(name: str, value, x: torch.Tensor) -> torch.Tensor:
    """``value`` (an int or int64 tensor) as an int64 tensor of ``x``'s shape."""
    value = _int_tensor(name, value).to(x.device)
    try:
        return torch.broadcast_to(value, x.shape)
    except RuntimeError as err:
        raise ValueError(
            f"{name}: expected a shape broadcastable to x {tuple(x.shape)}, "
            f"got {tuple(value.shape)}"
        ) from err


def _element_offsets(x: torch.Tensor, offset) -> torch.Tensor:
    """Counter offset per element: ``offset`` + flat index for an int, broadcast for a tensor."""
    if isinstance(offset, torch.Tensor):
        return _broadcast_counter("offset", offset, x)
    base = _int_tensor("offset", 0 if offset is None else offset).to(x.device)
    return base + torch.arange(x.numel(), dtype=torch.int64, device=x.device).reshape(x.shape)


def _from_bits(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    int_dtype = _BITS[dtype][0]
    if int_dtype == torch.int16:
        bits = torch.where(bits >= 0x8000, bits - 0x10000, bits)
    return bits.to(int_dtype).view(dtype)


def stochastic_round(
    x: torch.Tensor,
    dtype: torch.dtype,
    seed: int,
    offset: torch.Tensor | int | None = None,
    *,
    stream: tuple = (0, 0),
) -> torch.Tensor:
    """Round ``x`` to ``dtype`` stochastically, unbiased in expectation.

    Args:
        x: ``[...]`` float32.
        dtype: ``torch.float16``, ``torch.bfloat16`` or ``torch.float8_e4m3fn`` (for E4M3 with a
            scale, divide by the scale first, or use :func:`~.fp8.fp8_quantize` with ``seed``).
        seed: generator key, int in ``[0, 2**64)``.
        offset: counter words 0-1 per element: ``None`` uses the flat element index, an int
            ``o`` uses ``o + flat index``, an int64 tensor broadcastable to ``x`` is used as is.
        stream: counter words 2-3, ``(layer, flush_count)``; ints or int64 tensors broadcastable
            to ``x``.

    Returns:
        ``[...]`` of ``dtype``; each element is one of the two representable neighbours of
        ``x`` (``x`` itself if representable), saturated to the largest finite magnitude.
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise ValueError(f"x: expected a float32 tensor, got {describe(x)}")
    if dtype not in _BITS:
        raise ValueError(f"dtype: expected one of {SR_DTYPES}, got {dtype}")
    if not isinstance(stream, (tuple, list)) or len(stream) != 2:
        raise ValueError(f"stream: expected a pair (layer, flush_count), got {stream!r}")
    layer, flush_count = (_broadcast_counter("stream", word, x) for word in stream)
    offsets = _element_offsets(x, offset)
    bits = philox4x32(seed, offsets & _MASK32, offsets >> 32, layer, flush_count)[0]

    int_dtype, sign_bit, max_bits, nan_bits = _BITS[dtype]
    max_value = float(_from_bits(torch.tensor(max_bits), dtype).float())
    magnitude = x.abs().clamp(max=max_value)
    nearest = magnitude.to(dtype)
    # Magnitude bits of floats order like the floats; step the nearest value down when it
    # rounded up, giving ``lo <= |x| < hi`` with ``hi`` the next code.
    low_bits = nearest.view(int_dtype).to(torch.int32) & (sign_bit - 1)
    low_bits = low_bits - (nearest.float() > magnitude).to(torch.int32)
    high_bits = (low_bits + 1).clamp(max=max_bits)
    low = _from_bits(low_bits, dtype).float()
    step = _from_bits(high_bits, dtype).float() - low
    # Exact: |x| - lo is |x| with its low bits dropped and step is a power of two.
    prob_up = torch.where(step > 0, (magnitude - low) / torch.where(step > 0, step, 1.0), 0.0)
    threshold = torch.ceil(prob_up * 2.0**32).to(torch.int64)
    rounded_bits = torch.where(bits < threshold, high_bits, low_bits)
    rounded_bits = rounded_bits | (torch.signbit(x).to(torch.int32) * sign_bit)
    rounded_bits = torch.where(torch.isnan(x), nan_bits, rounded_bits)
    return _from_bits(rounded_bits, dtype)
