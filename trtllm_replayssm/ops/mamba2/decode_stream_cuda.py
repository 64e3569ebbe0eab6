"""The staged step's stream launch and flush rows as one CUDA C++ grid (``LaunchConfig(stream_impl="cuda_grid")``).

``stream_grid.cu`` holds the kernel (``mamba2_stream_grid``): after the ring launch, one block per
(batch row, head, ``8 * warps`` checkpoint rows). A block of a non-flush row reads its rows and
writes ``y``, as the Triton stream launch's programs do; a block of a flush row folds the same
rows into the checkpoint and writes ``y`` from the folded rows. The flush rows thus get a grid's
schedule, under which the fold runs at copy speed, where every separate flush launch here walks
its items as a fixed wave of blocks (the form that a step without flush rows can afford, and
8-12 points slower: ``benchmarks/NOTES_mamba2.md``, thirty-third run). There is no flush launch and
no side stream. The ring launch stores the token's ring ``x`` entry (``ring_x_in_ring``).

:func:`grid_unsupported` says when a step takes the Triton stream launch (folding its flush rows
itself) instead.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from .. import _nvrtc
from .._flush_rows import KINDS as _KINDS
from .._flush_rows import chunked
from .._flush_rows import source as _source

__all__ = ["KERNEL_FILE", "SIGNATURE", "grid_defines", "grid_unsupported", "stream_grid"]

KERNEL_FILE = str(Path(__file__).with_name("stream_grid.cu"))
_P = ctypes.c_void_p
#: ``mamba2_stream_grid``'s parameters: 14 pointers, the window, the pad slot id, 16 strides.
SIGNATURE = (_P,) * 14 + (ctypes.c_int32, ctypes.c_int64) + (ctypes.c_int64,) * 16
#: Rows of a warp (the kernel's RW) and the most ring entries (a coef line is one value per lane).
WARP_ROWS, MAX_CAPACITY = 8, 30


@functools.lru_cache(maxsize=None)
def _have_nvrtc() -> bool:
    return _nvrtc.find_nvrtc() is not None


def grid_unsupported(checkpoint: torch.Tensor, ring_x: torch.Tensor, ring_B: torch.Tensor, operands: dict,
                     warps: int) -> str | None:
    """Why a step cannot take ``mamba2_stream_grid`` (``None`` when it can): ``d_state`` other than
    128, a checkpoint that is not fp32 with contiguous 16-byte aligned rows, ring entries not
    contiguous, ``head_dim`` not a multiple of ``8 * warps``, a ring of more than
    :data:`MAX_CAPACITY` entries, an operand (``operands``: ``x``, ``B``, ``C``, ``z``, ``y`` and the
    rings by name; ``None`` entries skipped) of another dtype or whose rows do not start on 16-byte
    boundaries, no CUDA device, or no NVRTC."""
    _, _, head_dim, d_state = checkpoint.shape
    if d_state != 128:
        return f"d_state {d_state}: the CUDA stream grid takes d_state 128"
    if checkpoint.dtype != torch.float32 or checkpoint.stride(2) != d_state or not chunked(checkpoint):
        return "the checkpoint is not fp32 with contiguous 16-byte aligned rows"
    if ring_x.stride(2) != head_dim or ring_B.stride(2) != d_state:
        return "the ring's x or B entries are not contiguous"
    if head_dim % (WARP_ROWS * warps):
        return f"head_dim {head_dim}: expected a multiple of {WARP_ROWS * warps} ({warps} warps of {WARP_ROWS} rows)"
    if ring_B.shape[2] > MAX_CAPACITY:
        return f"a ring of {ring_B.shape[2]} entries: the CUDA stream grid takes at most {MAX_CAPACITY}"
    for name, t in dict(operands, ring_x=ring_x, ring_B=ring_B).items():
        if t is not None and t.dtype not in _KINDS:
            return f"{name} is {t.dtype}"
        if t is not None and not chunked(t):
            return f"{name}'s rows do not start on 16-byte boundaries"
    if checkpoint.device.type != "cuda":
        return "the checkpoint is not on a CUDA device"
    if not _have_nvrtc():
        return "no NVRTC library loads (the CUDA launches are compiled at run time)"
    return None


def grid_defines(heads: int, groups: int, head_dim: int, d_state: int, capacity: int, x_dtype, bc_dtype, ring_dtype,
                 d_dtype, has_d: bool, has_z: bool, idx_dtype, warps: int, min_blocks: int) -> dict:
    """The ``-D`` values ``stream_grid.cu`` is compiled with; ``min_blocks``: blocks per SM its
    registers are bounded for (``__launch_bounds__``)."""
    for name, dt in (("x", x_dtype), ("B", bc_dtype), ("ring", ring_dtype)):
        if dt not in _KINDS:
            raise ValueError(f"{name}: expected one of {tuple(_KINDS)}, got {dt}")
    return dict(P=head_dim, N=d_state, CAP=capacity, HEADS=heads, HPG=heads // groups, WARPS=warps,
                THREADS=32 * warps, MINB=min_blocks, X_KIND=_KINDS[x_dtype], BC_KIND=_KINDS[bc_dtype],
                RING_KIND=_KINDS[ring_dtype], D_KIND=_KINDS.get(d_dtype, 0) if has_d else 0, HAS_D=int(has_d),
                HAS_Z=int(has_z), HAS_INDICES=int(idx_dtype is not None), IDX_64=int(idx_dtype == torch.int64))


def stream_grid(checkpoint, ring_x, ring_B, coef, info, committed, flush_at, x, B, C, D, z, idx, y, window: int,
                pad_slot_id: int, strides, warps: int = 2, min_blocks: int = 16):
    """Launch ``mamba2_stream_grid`` on the current stream, after the ring launch.

    checkpoint ``[slots, heads, head_dim, 128]`` fp32; ``ring_x`` ``[slots, heads, capacity,
    head_dim]`` and ``ring_B`` ``[slots, groups, capacity, 128]`` (activation or fp32 dtype; the
    token's ``x`` already in ``ring_x``); ``coef`` ``[batch, heads, capacity + 2]`` fp32 and
    ``info`` ``[batch, 2]`` int32 from the ring launch; ``committed`` / ``flush_at`` ``[slots]``
    int32 (moved here); ``x`` / ``z`` / ``y`` ``[batch, heads, head_dim]``, ``B`` / ``C`` ``[batch,
    groups, 128]``, ``D`` ``[heads]``, ``idx`` ``[batch]`` int32/int64 (``D``, ``z``, ``idx`` may
    be ``None``); ``strides``: the staged step's 16 flush strides (``decode_staged``); ``warps``:
    warps of a block (8 checkpoint rows each), ``min_blocks``: as :func:`grid_defines`. Writes
    ``y``, the flush rows' checkpoint tiles and every live row's cursors."""
    batch, heads, head_dim = x.shape
    capacity = ring_B.shape[2]
    defs = grid_defines(heads, B.shape[1], head_dim, checkpoint.shape[3], capacity, x.dtype, B.dtype, ring_x.dtype,
                        None if D is None else D.dtype, D is not None, z is not None,
                        None if idx is None else idx.dtype, warps, min_blocks)
    kernel = _nvrtc.load_kernel(_source(KERNEL_FILE), "mamba2_stream_grid", defs, SIGNATURE, x.device)
    ptrs = [t.data_ptr() for t in (checkpoint, ring_x, ring_B, coef, info, committed, flush_at, x, B, C,
                                   checkpoint if D is None else D, checkpoint if z is None else z,
                                   checkpoint if idx is None else idx, y)]
    blocks = batch * heads * (head_dim // (WARP_ROWS * warps))
    kernel.launch(blocks, 32 * warps, 0, (*ptrs, int(window), int(pad_slot_id), *strides),
                  torch.cuda.current_stream(x.device).cuda_stream)
