"""L2 prefetches of a tile that a program will load later, without registers to hold it.

A program that walks its tiles one after the other (the Mamba-2 flush launch: a group's heads,
two 32-row tiles each) can ask the L2 for the next tile's bytes before it loads and folds the
current one: the next load then waits for an L2 hit rather than DRAM. The prefetch holds no
register and nothing waits for it. On an H200 it took 2-3% off the Mamba-2 flush launch
(``LaunchConfig.flush_l2_prefetch``); Gated DeltaNet's one-launch step and its list flush ran no
faster or slower with it (benchmarks/NOTES_delta.md, seventeenth run), so they do not use it.

Modes (a ``tl.constexpr``; the wrappers pass 0 off the GPU, where inline PTX cannot run):

- 0: nothing;
- 1: one ``prefetch.global.L2`` per 128-byte line, spread over the program's threads (sm_80 on);
- 2: one ``cp.async.bulk.prefetch.L2`` of the whole range by the program's first thread
  (sm_90 on; the range a multiple of 16 bytes, 16-byte aligned).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["PREFETCH_MODES", "prefetch_l2", "prefetch_mode"]

#: Names of the modes of :func:`prefetch_l2`, by value.
PREFETCH_MODES = {"none": 0, "lines": 1, "bulk": 2}


def prefetch_mode(name: str, device: torch.device, nbytes: int) -> int:
    """The ``MODE`` of :func:`prefetch_l2` that a launch on ``device`` passes for a prefetch
    named ``name`` (a key of :data:`PREFETCH_MODES`) of ``nbytes`` per range: 0 off a CUDA
    device or under ``TRITON_INTERPRET=1`` (no inline PTX), and where ``nbytes`` is not 128
    times a power of two (``tl.arange`` of the lines); "bulk" falls back to "lines" below sm_90."""
    if name not in PREFETCH_MODES:
        raise ValueError(f"prefetch: expected one of {tuple(PREFETCH_MODES)}, got {name!r}")
    lines = nbytes // 128
    if (device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1" or nbytes % 128
            or lines < 1 or lines & (lines - 1)):
        return 0
    mode = PREFETCH_MODES[name]
    if mode == 2 and torch.cuda.get_device_capability(device)[0] < 9:
        return 1
    return mode


@triton.jit
def prefetch_l2(base, NBYTES: tl.constexpr, MODE: tl.constexpr):
    """Ask the L2 for ``NBYTES`` contiguous bytes from pointer ``base`` (any element type);
    ``NBYTES`` 128 times a power of two (:func:`prefetch_mode` checks it). Returns nothing the
    caller needs."""
    if MODE == 1:
        lines = base.to(tl.pointer_type(tl.int8)) + tl.arange(0, NBYTES // 128) * 128
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [lines],
                                  dtype=tl.int32, is_pure=False, pack=1)
    elif MODE == 2:
        size = tl.full([1], NBYTES, tl.int32)
        start = base.to(tl.pointer_type(tl.int8)) + tl.zeros([1], dtype=tl.int32)
        # Every thread holds the (replicated) operand; only the program's first thread issues.
        tl.inline_asm_elementwise(
            "{\n\t.reg .pred p;\n\t.reg .u32 t;\n\tmov.u32 t, %tid.x;\n\tsetp.eq.u32 p, t, 0;\n\t"
            "@p cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0;\n\t}",
            "=r,l,r", [start, size], dtype=tl.int32, is_pure=False, pack=1)
