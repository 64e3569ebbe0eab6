"""``e^x`` as one ``ex2.approx.ftz.f32`` where a kernel takes many exponentials per thread.

``tl.exp`` lowers to ``ex2.approx.f32`` without flush-to-zero, so ptxas brackets every
exponential with a range test and two conditional multiplies that keep denormal results: five
instructions per element where KDA's ring launch takes 32-64 exponentials per thread (its
decayed ring keys, ``[CAP, d_k]`` per program). The ``.ftz`` form is two (the scale by
``log2 e`` and the ``MUFU.EX2``); it differs only where ``e^x`` is below ``2^-126`` (returned as
0), far under fp32 accumulation error for the ring terms it serves (decays ``<= 1``).

``FAST`` is a ``tl.constexpr``: launchers pass :func:`fast_exp_supported`'s answer, so that the
CPU interpreter (no inline PTX) takes ``tl.exp``.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["exp_ftz", "fast_exp_supported"]


def fast_exp_supported(device: torch.device) -> bool:
    """Whether a launch on ``device`` can take the inline-PTX exponential (a CUDA device, not
    under ``TRITON_INTERPRET=1``)."""
    return device.type == "cuda" and os.environ.get("TRITON_INTERPRET") != "1"


@triton.jit
def exp_ftz(x, FAST: tl.constexpr):
    """``e^x`` of an fp32 tensor: ``ex2.approx.ftz.f32`` with ``FAST``, else ``tl.exp``."""
    if FAST:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp(x)
