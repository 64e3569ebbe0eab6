"""The staged step's flush launch in CUDA C++ (``LaunchConfig(flush_impl="cuda")``).

``flush_cuda.cu`` holds the kernel (``mamba2_flush_rows``): built to test whether the Triton flush
launch's ~89% of copy bandwidth on an H200 was Triton's code generation (its fold's registers and
shared memory leave 16 warps per SM in flight). It was not: at 32 warps per SM with an exact fp32
FMA fold this launch measures within 1% of the Triton launch at Nemotron-H dims and 2% faster at
Nemotron-3-Nano dims (``benchmarks/NOTES_mamba2.md``, twenty-fifth run), so it stays an option,
not the default; it is also the flush that engines without Triton can take. The kernel is compiled
at run time by NVRTC for the device's own architecture (``ops/_nvrtc.py``) and takes the place of
``decode_staged._flush_kernel`` in a staged step with ``flush_launch``: same inputs (the ring
launch's ``coef`` / ``info`` scratch), same outputs (the flush rows' checkpoint tiles and ``y``),
the same place in the step (first, on the side stream with ``flush_stream``).

Its block items are (flush row, ``flush_heads`` heads of one group), walked by a wave of blocks
sized from the device's occupancy (``_flush_rows.wave_blocks``), so a step with no flush row costs one
wave of blocks that find none, as the Triton list launches do; a block loads the group's ring
``B`` once and its warps walk their own warp items (one head's :func:`warp_rows` rows) without
block-wide barriers.

:func:`unsupported` says when a step keeps the Triton flush launch: a checkpoint that is not fp32
or not 16-byte aligned rows, ``d_state`` other than 64 or 128, rings or activations whose rows do
not start on 16-byte boundaries, or a batch above ``LIST_MAX_BATCH``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from .._flush_rows import KINDS as _KINDS
from .._flush_rows import checkpoint_reason, chunked, launch_plan
from .._flush_rows import source as _source

__all__ = ["THREADS", "defines", "flush_rows_cuda", "rows_per_instr", "shared_bytes", "unsupported", "warp_rows"]

#: Threads per block: 8 warps, each walking its own warp items.
THREADS = 256
#: Float4s of a warp item per thread by default (its checkpoint rows stay in registers; 4 keeps
#: the kernel within 64 registers, 4 blocks per SM), and at most when asked (80 registers at 8).
MAX_PASSES, ASKED_MAX_PASSES = 4, 8

_P = ctypes.c_void_p
_I32, _I64 = ctypes.c_int32, ctypes.c_int64
#: ``mamba2_flush_rows``'s parameters: 12 pointers, the batch, 16 strides (the rows' strides are defines).
SIGNATURE = (_P,) * 12 + (_I32,) + (_I64,) * 16


KERNEL_FILE = str(Path(__file__).with_name("flush_cuda.cu"))


def source() -> str:
    """``flush_cuda.cu`` behind the shared device code (``ops/_flush_rows.cuh``)."""
    return _source(KERNEL_FILE)


def rows_per_instr(d_state: int) -> int | None:
    """Checkpoint rows one warp instruction covers (a row is ``d_state / 4`` lanes of float4s, a
    power of two up to a warp); ``None`` for a ``d_state`` the kernel does not take."""
    lanes = d_state // 4
    if d_state % 8 or lanes > 32 or 32 % lanes:
        return None
    return 32 // lanes


def warp_rows(head_dim: int, d_state: int, asked: int | None = None) -> int | None:
    """Checkpoint rows of a warp item: ``asked`` (``LaunchConfig.flush_cuda_rows``; it must divide
    ``head_dim`` and be a multiple of :func:`rows_per_instr`, at most :data:`ASKED_MAX_PASSES`
    instructions), or the most that divide ``head_dim`` in at most :data:`MAX_PASSES` instructions; ``None`` for a ``d_state`` the kernel does not take."""
    per = rows_per_instr(d_state)
    if per is None:
        return None
    if asked is not None:
        if head_dim % asked or asked % per or asked // per > ASKED_MAX_PASSES:
            raise ValueError(f"LaunchConfig.flush_cuda_rows: expected a divisor of head_dim {head_dim} that is a "
                             f"multiple of {per} (rows per warp instruction at d_state {d_state}) and at most "
                             f"{ASKED_MAX_PASSES * per}, got {asked}")
        return asked
    return max((r for r in range(per, per * MAX_PASSES + 1, per) if head_dim % r == 0), default=None)


def unsupported(checkpoint: torch.Tensor, batch: int, operands: dict | None = None) -> str | None:
    """Why this step cannot take the CUDA flush launch (``None`` when it can). ``operands``: the
    rings and the step's activations by name (``ring_x``, ``x``, ...; ``None`` entries skipped),
    which the kernel reads in 16-byte chunks."""
    _, _, head_dim, d_state = checkpoint.shape
    reason = checkpoint_reason(checkpoint, batch, None if warp_rows(head_dim, d_state) is not None else
                               f"d_state {d_state}: the CUDA flush takes d_state 64 or 128")
    if reason is not None:
        return reason
    for name, t in (operands or {}).items():
        if t is not None and t.dtype not in _KINDS:
            return f"{name} is {t.dtype}"
        if t is not None and not chunked(t):
            return f"{name}'s rows do not start on 16-byte boundaries"
    if checkpoint.device.type != "cuda":
        return "the checkpoint is not on a CUDA device"
    return None


def defines(heads: int, groups: int, head_dim: int, d_state: int, capacity: int, x_dtype, bc_dtype, ring_dtype,
            d_dtype, has_d: bool, has_z: bool, idx_dtype, row_strides: tuple[int, int, int],
            min_blocks: int = 4, rows: int | None = None, heads_per_item: int = 1) -> dict:
    """The ``-D`` values ``flush_cuda.cu`` is compiled with (one compilation per distinct set);
    ``row_strides``: the checkpoint's, ``ring_x``'s and ``ring_B``'s row strides (elements);
    ``min_blocks``, ``rows``: ``LaunchConfig.flush_cuda_blocks`` / ``flush_cuda_rows`` (rows of a
    warp item); ``heads_per_item``: heads of one group per block item (a divisor of the group's)."""
    rows = warp_rows(head_dim, d_state, rows)
    if rows is None:
        raise ValueError(f"d_state {d_state}: the CUDA flush takes d_state 64 or 128")
    for name, dt in (("x", x_dtype), ("B", bc_dtype), ("ring", ring_dtype)):
        if dt not in _KINDS:
            raise ValueError(f"{name}: expected one of {tuple(_KINDS)}, got {dt}")
    if (heads // groups) % heads_per_item:
        raise ValueError(f"heads_per_item: expected a divisor of the group's {heads // groups} heads, got "
                         f"{heads_per_item}")
    ck_p, rx_j, rb_j = row_strides
    return dict(CK_P=ck_p, RX_J=rx_j, RB_J=rb_j, P=head_dim, N=d_state, CAP=capacity, HEADS=heads,
                HPG=heads // groups, HEADS_PER_ITEM=heads_per_item, THREADS=THREADS,
                PASSES=rows // rows_per_instr(d_state), MIN_BLOCKS=min_blocks, X_KIND=_KINDS[x_dtype],
                BC_KIND=_KINDS[bc_dtype], RING_KIND=_KINDS[ring_dtype],
                D_KIND=_KINDS.get(d_dtype, 0) if has_d else 0, HAS_D=int(has_d),
                HAS_Z=int(has_z), HAS_INDICES=int(idx_dtype is not None), IDX_64=int(idx_dtype == torch.int64))


def shared_bytes(batch: int, d_state: int, capacity: int, rows: int) -> int:
    """Dynamic shared memory of a block: the group's ring ``B`` with the token's ``B`` and ``C``,
    each warp's weighted ``x`` (``capacity + 1`` entries of its ``rows``) with ``x`` and ``z``
    (fp32), and the batch's flush rows with their ``c`` (int32) and slots (int64)."""
    warps = THREADS // 32
    return 4 * ((capacity + 1) * d_state + d_state + warps * ((capacity + 1) * rows + 2 * rows)) + 16 * batch


def flush_rows_cuda(checkpoint, ring_x, ring_B, coef, info, x, B, C, D, z, idx, y, batch, strides, capacity,
                    min_blocks: int = 4, rows: int | None = None, heads_per_item: int = 1):
    """Launch ``mamba2_flush_rows`` on the current stream.

    checkpoint ``[slots, heads, head_dim, d_state]`` fp32; ``ring_x`` ``[slots, heads, capacity,
    head_dim]`` and ``ring_B`` ``[slots, groups, capacity, d_state]`` (activation or fp32 dtype);
    ``coef`` ``[batch, heads, capacity + 2]`` fp32 and ``info`` ``[batch, 2]`` int32 from the ring
    launch; ``x`` / ``z`` / ``y`` ``[batch, heads, head_dim]``, ``B`` / ``C`` ``[batch, groups,
    d_state]``, ``D`` ``[heads]``, ``idx`` ``[batch]`` int32/int64 (each of ``D``, ``z``, ``idx`` may
    be ``None``); ``strides``: the staged step's 16 flush strides (``decode_staged``);
    ``min_blocks`` / ``rows`` / ``heads_per_item``: as :func:`defines`. Writes the
    flush rows' tiles and ``y``."""
    _, heads, head_dim, d_state = checkpoint.shape
    groups = B.shape[1]
    rows = warp_rows(head_dim, d_state, rows)
    defs = defines(heads, groups, head_dim, d_state, capacity, x.dtype, B.dtype, ring_x.dtype,
                   None if D is None else D.dtype, D is not None, z is not None, None if idx is None else idx.dtype,
                   (checkpoint.stride(2), ring_x.stride(2), ring_B.stride(2)), min_blocks, rows, heads_per_item)
    shared = shared_bytes(batch, d_state, capacity, rows)
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    kernel, blocks = launch_plan(KERNEL_FILE, "mamba2_flush_rows", SIGNATURE, tuple(defs.items()), index,
                                 batch * (heads // heads_per_item), shared, THREADS)
    (s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group, s_x_row, s_x_head, s_B_row, s_B_group,
     s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head) = strides
    anchor = checkpoint  # the pointer of an absent operand (never read: its HAS_ flag is 0)
    ptrs = [t.data_ptr() for t in (checkpoint, ring_x, ring_B, coef, info, x, B, C,
                                   D if D is not None else anchor, z if z is not None else anchor,
                                   idx if idx is not None else anchor, y)]
    args = (*ptrs, batch, s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group, s_x_row,
            s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head)
    kernel.launch(blocks, THREADS, shared, args, torch.cuda.current_stream(x.device).cuda_stream)
