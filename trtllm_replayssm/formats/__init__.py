"""Number formats of the ReplaySSM state: NVFP4 and FP8 E4M3 read copies, stochastic rounding.

* :mod:`.nvfp4`: FP4 E2M1 elements, two per byte (low nibble first), an FP8 E4M3 scale per 16
  elements of the last axis and an FP32 global scale per tensor or per leading index; bit-exact
  with NVIDIA ModelOpt's NVFP4 quantizer.
* :mod:`.fp8`: FP8 E4M3 with an FP32 scale per row (all axes but the last).
* :mod:`.stochastic`: unbiased stochastic rounding of float32 to float16 / bfloat16 / E4M3 with
  Philox4x32-10 bits keyed by ``(seed, offset, stream)``, bit-identical to Triton's generator.

These are the plain-torch definitions; GPU kernels encode and decode the same bits.
"""

from .fp8 import fp8_dequantize, fp8_quantize
from .nvfp4 import (
    E2M1_MAX,
    E2M1_VALUES,
    E4M3_MAX,
    NVFP4_BLOCK,
    NVFP4Tensor,
    e2m1_decode,
    e2m1_encode,
    nvfp4_dequantize,
    nvfp4_quantize,
)
from .stochastic import SR_DTYPES, philox4x32, randint, stochastic_round

__all__ = [
    "E2M1_MAX",
    "E2M1_VALUES",
    "E4M3_MAX",
    "NVFP4_BLOCK",
    "NVFP4Tensor",
    "SR_DTYPES",
    "e2m1_decode",
    "e2m1_encode",
    "fp8_dequantize",
    "fp8_quantize",
    "nvfp4_dequantize",
    "nvfp4_quantize",
    "philox4x32",
    "randint",
    "stochastic_round",
]
