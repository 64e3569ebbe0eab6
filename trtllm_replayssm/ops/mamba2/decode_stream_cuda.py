"""The staged step's stream launch as a persistent CUDA C++ kernel (``LaunchConfig(stream_impl="cuda")``).

``stream_cuda.cu`` holds the kernel (``mamba2_stream_rows``). It serves the non-flush rows of a
staged step with ``flush_launch`` and ``ring_x_in_ring`` (the flush launch folds the flush rows;
the ring launch appends the token to the ring), as the Triton ``_stream_kernel`` does, with two
differences of form:

- it is one wave of blocks whose warps take items (batch row, head, 8 checkpoint rows) from a
  counter, ``CHUNK`` consecutive items at a time, rather than a grid of tile programs;
- each warp keeps its items' outputs in shared memory and writes them after its last checkpoint
  read. On an H200 a 1 GiB read that stores one value per 128 read among its loads takes 258 us
  against 244 us for the read alone; with the values kept and written at the end, 251 us
  (``benchmarks/probe_memory_rates.py``, ``rows`` / ``rows_end``).

The counter is one int32 per step that the ring launch zeroes. A warp whose shared memory is
full stores further outputs at once (a warp that takes far more than its share, as one that
starts beside a long flush launch's blocks may, stays correct).

:func:`stream_unsupported` says when a step keeps the Triton stream launch.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from .._flush_rows import KINDS as _KINDS
from .._flush_rows import chunked, launch_plan
from .._flush_rows import source as _source
from .decode_flush_cuda import have_nvrtc

__all__ = ["CHUNK", "STREAM_FILE", "THREADS", "source", "stage_items", "stream_defines", "stream_rows_cuda",
           "stream_unsupported"]

STREAM_FILE = str(Path(__file__).with_name("stream_cuda.cu"))
#: Threads per block (8 warps, each walking its own items).
THREADS = 256
#: Consecutive warp items a warp takes from the counter at a time: a whole 64-row head (32 KB of
#: checkpoint) per counter update at Nemotron-H dims.
CHUNK = 8
#: Rows of a warp item (a lane holds 4 columns of each).
ROWS = 8
#: Shared memory a block may take for its warps' staged outputs.
MAX_STAGE_BYTES = 32 * 1024
#: Most ring entries a lane takes in the kernel's two rounds.
MAX_CAPACITY = 32

_P = ctypes.c_void_p
_I32, _I64 = ctypes.c_int32, ctypes.c_int64
#: ``mamba2_stream_rows``'s parameters: 13 pointers, batch, window, pad slot, stage, 12 strides.
SIGNATURE = (_P,) * 13 + (_I32, _I32, _I64, _I32) + (_I64,) * 12


def source() -> str:
    """``stream_cuda.cu`` behind the shared device code (``ops/_flush_rows.cuh``), as NVRTC compiles it."""
    return _source(STREAM_FILE)


def stream_unsupported(checkpoint: torch.Tensor, ring_x: torch.Tensor, x: torch.Tensor, C: torch.Tensor,
                       z: torch.Tensor | None, y: torch.Tensor, D: torch.Tensor | None) -> str | None:
    """Why a staged step cannot take the CUDA stream kernel (``None`` when it can): a checkpoint
    that is not fp32 with contiguous 16-byte-aligned rows, ``d_state`` other than 128, ``head_dim``
    not a multiple of 8, a ring of more than :data:`MAX_CAPACITY` entries, operands of a dtype the
    kernel does not take or whose rows do not start on 16-byte boundaries, no CUDA device, or no
    NVRTC."""
    _, _, head_dim, d_state = checkpoint.shape
    if checkpoint.dtype != torch.float32:
        return f"the checkpoint is {checkpoint.dtype}, the CUDA stream kernel reads fp32 checkpoints"
    if d_state != 128:
        return f"d_state {d_state}: the CUDA stream kernel takes d_state 128"
    if head_dim % ROWS:
        return f"head_dim {head_dim}: the CUDA stream kernel takes multiples of {ROWS}"
    if ring_x.shape[2] > MAX_CAPACITY:
        return f"a ring of {ring_x.shape[2]} entries: the CUDA stream kernel takes at most {MAX_CAPACITY}"
    if checkpoint.stride(3) != 1 or any(s % 4 for s in checkpoint.stride()[:3]) or checkpoint.data_ptr() % 16:
        return "the checkpoint's rows are not contiguous 16-byte aligned fp32 rows"
    for name, t in (("ring_x", ring_x), ("x", x), ("C", C), ("z", z), ("y", y), ("D", D)):
        if t is not None and t.dtype not in _KINDS:
            return f"{name} is {t.dtype}"
        if t is not None and name != "D" and not chunked(t):
            return f"{name}'s rows do not start on 16-byte boundaries"
    if y.dtype != x.dtype or (z is not None and z.dtype != x.dtype):
        return "x, z and y differ in dtype"
    if checkpoint.device.type != "cuda":
        return "the checkpoint is not on a CUDA device"
    if not have_nvrtc():
        return "no NVRTC library loads (the CUDA launches are compiled at run time)"
    return None


def stream_defines(heads: int, groups: int, head_dim: int, d_state: int, capacity: int, x_dtype, c_dtype, ring_dtype,
                   d_dtype, has_z: bool, idx_dtype, row_strides: tuple[int, int], min_blocks: int = 4) -> dict:
    """The ``-D`` values ``stream_cuda.cu`` is compiled with; ``row_strides``: the checkpoint's and
    ``ring_x``'s row strides (elements)."""
    for name, dt in (("x", x_dtype), ("C", c_dtype), ("ring", ring_dtype)):
        if dt not in _KINDS:
            raise ValueError(f"{name}: expected one of {tuple(_KINDS)}, got {dt}")
    ck_p, rx_j = row_strides
    return dict(CK_P=ck_p, RX_J=rx_j, P=head_dim, N=d_state, CAP=capacity, HEADS=heads, HPG=heads // groups,
                THREADS=THREADS, MIN_BLOCKS=min_blocks, CHUNK=CHUNK, X_KIND=_KINDS[x_dtype],
                BC_KIND=_KINDS[c_dtype], RING_KIND=_KINDS[ring_dtype], D_KIND=_KINDS.get(d_dtype, 0),
                HAS_D=int(d_dtype is not None), HAS_Z=int(has_z), HAS_INDICES=int(idx_dtype is not None),
                IDX_64=int(idx_dtype == torch.int64))


def stage_items(items: int, warps: int, y_bytes: int) -> int:
    """Staged outputs per warp: twice an even share of ``items`` over ``warps`` plus two chunks
    (warps take items as they come: some take more), a multiple of 4, within
    :data:`MAX_STAGE_BYTES` per block (``y_bytes``: one item's outputs)."""
    share = -(-items // max(1, warps))
    want = 2 * share + 2 * CHUNK
    most = MAX_STAGE_BYTES // ((THREADS // 32) * (y_bytes + 4))
    return max(4, min(want, most) // 4 * 4)


def stream_rows_cuda(checkpoint, ring_x, coef, info, committed, flush_at, x, C, D, z, idx, y, work, batch, window,
                     pad_slot_id, strides):
    """Launch ``mamba2_stream_rows`` on the current stream for the non-flush rows of a staged step.

    checkpoint ``[slots, heads, head_dim, 128]`` fp32; ``ring_x`` ``[slots, heads, capacity,
    head_dim]``; ``coef`` ``[batch, heads, capacity + 2]`` fp32 and ``info`` ``[batch, 2]`` int32
    from the ring launch; ``committed`` / ``flush_at`` ``[slots]`` int32 (moved here, as the
    Triton stream launch moves them); ``x`` / ``z`` / ``y`` ``[batch, heads, head_dim]``, ``C``
    ``[batch, groups, 128]``, ``D`` ``[heads]``, ``idx`` ``[batch]`` int32/int64 (each of ``D``, ``z``,
    ``idx`` may be ``None``); ``work``: one int32 the ring launch zeroed; ``strides``: the 12
    strides of :data:`SIGNATURE` (checkpoint slot/head, ring_x slot/head, x row/head, C row/group,
    z row/head, y row/head). Writes ``y`` of the non-flush and padded rows."""
    _, heads, head_dim, d_state = checkpoint.shape
    groups, capacity = C.shape[1], ring_x.shape[2]
    defs = stream_defines(heads, groups, head_dim, d_state, capacity, x.dtype, C.dtype, ring_x.dtype,
                          None if D is None else D.dtype, z is not None, None if idx is None else idx.dtype,
                          (checkpoint.stride(2), ring_x.stride(2)))
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    items = batch * heads * (head_dim // ROWS)
    y_bytes = ROWS * y.element_size()
    sms = torch.cuda.get_device_properties(index).multi_processor_count
    # The wave's size and each warp's stage depend on one another through the shared memory; the
    # stage is sized for a wave at the launch bounds' blocks per SM.
    stage = stage_items(items, sms * defs["MIN_BLOCKS"] * (THREADS // 32), y_bytes)
    shared = (THREADS // 32) * stage * (y_bytes + 4)
    kernel, blocks = launch_plan(STREAM_FILE, "mamba2_stream_rows", SIGNATURE, tuple(defs.items()), index,
                                 -(-items // (THREADS // 32)), shared, THREADS)
    ptrs = [t.data_ptr() for t in (checkpoint, ring_x, coef, info, committed, flush_at, x, C,
                                   checkpoint if D is None else D, checkpoint if z is None else z,
                                   checkpoint if idx is None else idx, y, work)]
    kernel.launch(blocks, THREADS, shared, (*ptrs, batch, int(window), int(pad_slot_id), stage, *strides),
                  torch.cuda.current_stream(x.device).cuda_stream)
