"""The staged step's flush launch as a wave of head-tile blocks (``LaunchConfig(flush_impl="cuda_head")``).

``flush_head.cu`` holds the kernel (``mamba2_flush_head``): the (flush row, head) items of
``flush_ws.cu``, each folded by one block of :func:`head_warps` warps that loads the head's
checkpoint tile into registers first, the group's ring ``B``, the token's ``B`` / ``C``, the coef
line and the ring ``x`` after it, and stores the folded tile from registers; a wave of
``flush_head_blocks`` blocks per SM walks the items, from the ring launch's item counter in the
in-phase steps (``flush_head_order``). It is that probe's form (``benchmarks/fold_grid.cu``, 64-row
blocks fed by a counter: 99.7% of copy on an H100, where the warp-specialised probe read 96.7%)
with the flush's operands, built to find out whether it moves the H200's flush step closer to the
standard step's rate per byte than ``flush_ws.cu`` (``benchmarks/NOTES_mamba2.md``, fifty-eighth
run). Same inputs and outputs as :func:`decode_flush_cuda.flush_rows_cuda`, the same place in the
step (first, on the side stream), and the same bits as the warp-specialised form (one fold order).

:func:`head_unsupported` says when a step that ``decode_flush_cuda.unsupported`` accepts cannot
take it (the step then takes ``flush_impl="cuda"``'s launch).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from .._flush_rows import KINDS as _KINDS
from .._flush_rows import launch_plan
from .decode_flush_cuda import SIGNATURE, _pointers
from .launch import WS_ORDERS

__all__ = ["HEAD_FILE", "HEAD_SIGNATURE", "flush_rows_head", "head_defines", "head_rows", "head_shared_bytes",
           "head_threads", "head_unsupported"]

HEAD_FILE = str(Path(__file__).with_name("flush_head.cu"))
#: ``mamba2_flush_head``'s parameters: ``mamba2_flush_rows``'s, then the item counter.
HEAD_SIGNATURE = SIGNATURE + (SIGNATURE[0],)
#: Most warps of a block (a head's rows split in whole fours, at most 512 threads).
MAX_WARPS = 16


@functools.lru_cache(maxsize=None)
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def head_rows(head_dim: int) -> int | None:
    """Checkpoint rows of a warp: 8 (the probe's 64-row blocks at Nemotron-H's head_dim) where that
    leaves at most :data:`MAX_WARPS` warps, else 16; ``None`` where neither divides ``head_dim``."""
    for rows in (8, 16):
        if head_dim % rows == 0 and head_dim // rows <= MAX_WARPS:
            return rows
    return None


def head_threads(head_dim: int) -> int:
    """Threads of a block: one warp per :func:`head_rows` rows of the head."""
    return 32 * (head_dim // head_rows(head_dim))


def head_shared_bytes(batch: int, head_dim: int, d_state: int, capacity: int) -> int:
    """Dynamic shared memory of a block: the group's ring ``B`` with the token's ``B`` (``capacity + 1``
    rows) and ``C`` widened to fp32, each warp's weighted ``x`` (``capacity + 1`` entries of its rows),
    and the batch's flush rows (row and ``c`` int32, slot int64)."""
    return 4 * ((capacity + 1) * d_state + d_state + (capacity + 1) * head_dim) + 16 * batch


def head_unsupported(checkpoint: torch.Tensor) -> str | None:
    """Why a step the CUDA flush serves cannot take the head-tile form (``None`` when it can):
    ``d_state`` other than 128 (a checkpoint row is a warp's 32 float4 columns) or a ``head_dim``
    that no :func:`head_rows` splits."""
    _, _, head_dim, d_state = checkpoint.shape
    if d_state != 128:
        return f"d_state {d_state}: the head-tile flush takes d_state 128"
    if head_rows(head_dim) is None:
        return f"head_dim {head_dim}: expected a multiple of 8 with at most {MAX_WARPS} warps of 8 or 16 rows"
    return None


def head_defines(heads: int, groups: int, head_dim: int, d_state: int, capacity: int, x_dtype, bc_dtype, ring_dtype,
                 d_dtype, has_d: bool, has_z: bool, idx_dtype, row_strides: tuple[int, int, int],
                 order: str = "stride", blocks: int = 2, max_registers: int | None = None) -> dict:
    """The ``-D`` values ``flush_head.cu`` is compiled with; ``row_strides``: the checkpoint's,
    ``ring_x``'s and ``ring_B``'s row strides (elements); ``order``: :data:`WS_ORDERS` (``ORDER`` is its
    index); ``blocks``: blocks per SM the registers are bounded for (``__launch_bounds__``), one for
    512-thread blocks (two would leave 64 registers a thread: the tile's rows spill)."""
    if order not in WS_ORDERS:
        raise ValueError(f"order: expected one of {WS_ORDERS}, got {order!r}")
    reason = head_unsupported(torch.empty(0, 0, head_dim, d_state, device="meta"))
    if reason is not None:
        raise ValueError(reason)
    for name, dt in (("x", x_dtype), ("B", bc_dtype), ("ring", ring_dtype)):
        if dt not in _KINDS:
            raise ValueError(f"{name}: expected one of {tuple(_KINDS)}, got {dt}")
    threads = head_threads(head_dim)
    ck_p, rx_j, rb_j = row_strides
    return dict(CK_P=ck_p, RX_J=rx_j, RB_J=rb_j, P=head_dim, N=d_state, CAP=capacity, HEADS=heads,
                HPG=heads // groups, THREADS=threads, MIN_BLOCKS=max(1, min(blocks, 768 // threads)),
                X_KIND=_KINDS[x_dtype], BC_KIND=_KINDS[bc_dtype], RING_KIND=_KINDS[ring_dtype],
                D_KIND=_KINDS.get(d_dtype, 0) if has_d else 0, HAS_D=int(has_d), HAS_Z=int(has_z),
                HAS_INDICES=int(idx_dtype is not None), IDX_64=int(idx_dtype == torch.int64),
                ORDER=WS_ORDERS.index(order), MAX_REGS=max_registers or 0)


def flush_rows_head(checkpoint, ring_x, ring_B, coef, info, x, B, C, D, z, idx, y, batch, strides, capacity,
                    counter: torch.Tensor | None = None, order: str | None = None, blocks: int = 2,
                    max_registers: int | None = None):
    """Launch ``mamba2_flush_head`` on the current stream: the arguments of
    ``decode_flush_cuda.flush_rows_cuda`` (``strides``: the staged step's 16 flush strides), for a
    step :func:`head_unsupported` accepts. A wave of ``blocks`` blocks per SM (fewer where fewer fit,
    at most one per item of a step in which every row flushes) walks the (flush row, head) items:
    with ``counter`` (``[1]`` int32, 0 when the launch starts: the ring launch zeroes it) each block
    takes its next item from it; else block ``b`` takes ``b``, ``b + blocks``, ... ``order``
    (``LaunchConfig.flush_head_order``; None: "counter" with a counter, else "stride"): "auto" takes
    the counter in a step where at least half of the ``batch`` rows flush, else the stride, and
    needs the counter. ``max_registers``: as :func:`head_defines`."""
    order = order or ("stride" if counter is None else "counter")
    if order not in WS_ORDERS:
        raise ValueError(f"order: expected one of {WS_ORDERS}, got {order!r}")
    if (order == "stride") != (counter is None):
        raise ValueError(f"counter: expected {'None' if order == 'stride' else 'a tensor'} for order {order!r}")
    if counter is not None and (counter.dtype != torch.int32 or counter.numel() != 1 or counter.device != x.device):
        raise ValueError(f"counter: expected one int32 on {x.device}, got {counter.dtype} x {counter.numel()} on "
                         f"{counter.device}")
    if type(blocks) is not int or not 1 <= blocks <= 8:
        raise ValueError(f"blocks: expected an int in [1, 8], got {blocks!r}")
    _, heads, head_dim, d_state = checkpoint.shape
    defs = head_defines(heads, B.shape[1], head_dim, d_state, capacity, x.dtype, B.dtype, ring_x.dtype,
                        None if D is None else D.dtype, D is not None, z is not None,
                        None if idx is None else idx.dtype,
                        (checkpoint.stride(2), ring_x.stride(2), ring_B.stride(2)), order, blocks, max_registers)
    shared = head_shared_bytes(batch, head_dim, d_state, capacity)
    threads = defs["THREADS"]
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    kernel, wave = launch_plan(HEAD_FILE, "mamba2_flush_head", HEAD_SIGNATURE, tuple(defs.items()), index,
                               batch * heads, shared, threads)
    wave = min(wave, blocks * _sms(index))  # the probe's wave: its blocks per SM, not every block that fits
    ptrs = _pointers(checkpoint, ring_x, ring_B, coef, info, x, B, C, D, z, idx, y)
    count_at = (checkpoint if counter is None else counter).data_ptr()  # never read in the stride order
    kernel.launch(wave, threads, shared, (*ptrs, batch, *strides, count_at),
                  torch.cuda.current_stream(x.device).cuda_stream)
