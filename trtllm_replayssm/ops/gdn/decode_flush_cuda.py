"""The one-launch Gated DeltaNet step's flush rows in CUDA C++ (``FusedVariant(flush_impl="cuda")``).

``flush_cuda.cu`` holds the kernel (``gdn_flush_rows``), compiled at run time by NVRTC for the
device's own architecture (``ops/_nvrtc.py``) behind ``ops/_flush_rows.cuh``. It runs first in
the step and lets the fused kernel (``decode_fused.py``, launched next with programmatic dependent
launch) start beside it at once; its blocks read every row's cursors (which rows flush, their
``c``) and fold the flush rows. The fused kernel, compiled without its fold, serves the other rows
and moves every row's cursors (its programs of a flush row count their arrival and exit), a row's
last program waiting for this launch to finish first (``gdc_wait``), so the cursors this launch
reads are the step's and the step ends when both launches have.

Its block items are (flush row, ``heads_per_item`` value heads of one key head), walked by a wave
of blocks sized from the device's occupancy (``_flush_rows.wave_blocks``), so a step with no
flush row costs one wave of blocks that find none. A block forms its key head's terms once (``k_t``,
``q_t`` normalised, the ring keys and their dot products with both) and each head's decay
weights; its warps then walk warp items of :func:`warp_rows` checkpoint rows, each row's two dot
products reduced inside the warp, ``u_i`` and ``o_i`` formed by a lane, and the fold
``S e^{D_t} + sum_j U_j w_j k_j^T + u k_t^T`` in exact fp32 FMAs.

:func:`unsupported` says when the step keeps the Triton fold: a checkpoint that is not fp32 or not
16-byte aligned rows, ``d_k`` other than 32, 64 or 128, ring keys whose rows do not start on
16-byte boundaries, an operand whose last dimension is not contiguous, ``q`` and ``k`` (or ``a``
and ``b``) of two dtypes, or a batch above ``LIST_MAX_BATCH``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from .._flush_rows import KINDS as _KINDS
from .._flush_rows import checkpoint_reason, chunked, launch_plan
from .._flush_rows import source as _source

__all__ = ["THREADS", "defines", "flush_rows_cuda", "flush_rows_torch", "shared_bytes", "unsupported", "warp_rows"]

#: Threads per block: 8 warps, each walking its own warp items.
THREADS = 256
#: Float4s of a warp item per thread where none are asked (its checkpoint rows stay in registers;
#: ``FusedVariant.flush_cuda_passes`` asks 8).
MAX_PASSES = 4

_P = ctypes.c_void_p
_I32, _I64, _F32 = ctypes.c_int32, ctypes.c_int64, ctypes.c_float
#: ``gdn_flush_rows``'s parameters: 15 pointers, the scale, the batch, the pad slot id, 18 strides.
SIGNATURE = (_P,) * 15 + (_F32, _I32, _I64) + (_I64,) * 18


KERNEL_FILE = str(Path(__file__).with_name("flush_cuda.cu"))


def source() -> str:
    """``flush_cuda.cu`` behind the shared device code (``ops/_flush_rows.cuh``)."""
    return _source(KERNEL_FILE)


def warp_rows(d_k: int, d_v: int, passes: int = MAX_PASSES) -> int | None:
    """Checkpoint rows of a warp item: ``passes`` warp instructions of rows (a row is ``d_k / 4``
    lanes of float4s), fewer where ``d_v`` asks, a power of two up to 32; ``None`` for a ``d_k``
    the kernel does not take."""
    lanes = d_k // 4
    if d_k % 8 or lanes > 32 or 32 % lanes:
        return None
    per = 32 // lanes
    # A power of two of rows, so that a warp item's rows divide the warp's lanes.
    return max((per << s for s in range(4) if (per << s) <= min(32, per * passes) and d_v % (per << s) == 0),
               default=None)


def unsupported(checkpoint: torch.Tensor, batch: int, operands: dict | None = None) -> str | None:
    """Why this step cannot take the CUDA flush launch (``None`` when it can). ``operands``: the
    rings and the step's activations by name, which the kernel reads in 16-byte chunks (the
    ring's keys) or element by element (the rest: their last dimension must be contiguous)."""
    _, _, d_v, d_k = checkpoint.shape
    reason = checkpoint_reason(checkpoint, batch, None if warp_rows(d_k, d_v) is not None else
                               f"d_k {d_k}: the CUDA flush takes d_k 32, 64 or 128")
    if reason is not None:
        return reason
    for name, t in (operands or {}).items():
        if t is None:
            continue
        if t.dtype not in _KINDS:
            return f"{name} is {t.dtype}"
        if t.stride(-1) != 1:
            return f"{name}'s last dimension is not contiguous"
        if name == "ring_k" and not chunked(t):
            return "ring_k's rows do not start on 16-byte boundaries"
    ops = operands or {}
    for x, y in (("q", "k"), ("a", "b")):
        if ops.get(x) is not None and ops.get(y) is not None and ops[x].dtype != ops[y].dtype:
            return f"{x} is {ops[x].dtype} and {y} {ops[y].dtype}: the CUDA flush reads them as one dtype"
    if checkpoint.device.type != "cuda":
        return "the checkpoint is not on a CUDA device"
    return None


def defines(v_heads: int, k_heads: int, d_k: int, d_v: int, capacity: int, dtypes: dict, has_bias: bool,
            idx_dtype, row_strides: tuple[int, int, int], min_blocks: int = 4, passes: int = MAX_PASSES,
            heads_per_item: int | None = None, prefetch: bool = False) -> dict:
    """The ``-D`` values ``flush_cuda.cu`` is compiled with (one compilation per distinct set).

    ``dtypes``: the dtypes of ``qk`` (q and k), ``v`` (v and the output), ``ring_k``, ``ring_v``,
    ``gate`` (a and b), ``A_log`` and ``dt_bias``; ``row_strides``: the checkpoint's, ``ring_k``'s
    and ``ring_u``'s row strides (elements); ``heads_per_item``: value heads of one key head per
    block item (``None``: all of them); ``prefetch``: a warp loads its next item's operands before
    it works on the current one (twice the tile registers)."""
    rows = warp_rows(d_k, d_v, passes)
    if rows is None:
        raise ValueError(f"d_k {d_k}: the CUDA flush takes d_k 32, 64 or 128 (and d_v a multiple of its row "
                         f"group), got d_k {d_k}, d_v {d_v}")
    for name, dt in dtypes.items():
        if dt not in _KINDS:
            raise ValueError(f"{name}: expected one of {tuple(_KINDS)}, got {dt}")
    group = v_heads // k_heads
    hpi = group if heads_per_item is None else heads_per_item
    if group % hpi:
        raise ValueError(f"heads_per_item: expected a divisor of the key head's {group} value heads, got {hpi}")
    ck_p, rk_j, ru_j = row_strides
    per = 32 // (d_k // 4)
    return dict(CK_P=ck_p, RK_J=rk_j, RU_J=ru_j, K=d_k, V=d_v, CAP=capacity, HV=v_heads, G=group, HPI=hpi,
                THREADS=THREADS, PASSES=rows // per, MIN_BLOCKS=min_blocks, QK_KIND=_KINDS[dtypes["qk"]],
                V_KIND=_KINDS[dtypes["v"]], RING_KIND=_KINDS[dtypes["ring_k"]], RV_KIND=_KINDS[dtypes["ring_v"]],
                GATE_KIND=_KINDS[dtypes["gate"]], ALOG_KIND=_KINDS[dtypes["A_log"]],
                BIAS_KIND=_KINDS[dtypes["dt_bias"]] if has_bias else 0, HAS_BIAS=int(has_bias),
                HAS_INDICES=int(idx_dtype is not None), IDX_64=int(idx_dtype == torch.int64), PREFETCH=int(prefetch))


def shared_bytes(batch: int, d_k: int, capacity: int, rows: int, heads_per_item: int) -> int:
    """Dynamic shared memory of a block (``flush_cuda.cu``'s regions, each a multiple of 4 words)
    and the batch's flush rows with their ``c`` (int32) and slots (int64)."""
    r4 = lambda n: (n + 3) // 4 * 4  # noqa: E731
    entries = capacity + 1
    words = (entries * d_k + d_k + 2 * r4(entries) + 2 * r4(heads_per_item * capacity) + 4 * heads_per_item
             + (THREADS // 32) * r4(entries * rows + 2 * rows))
    return 4 * words + 16 * batch


def flush_rows_torch(checkpoint, ring_k, ring_v, ring_g, ring_u, committed, flush_at, q, k, v, a, b, A_log, dt_bias,
                     idx, pad_slot_id: int, out, scale: float):
    """What ``gdn_flush_rows`` computes, in fp32 torch operations (arguments as
    :func:`flush_rows_cuda`): the CPU stand-in that lets the fused kernel's split (its programs of a
    flush row leaving it to this launch) run under the Triton interpreter, and a second reading of
    the kernel's formulas."""
    f32 = torch.float32
    batch, HV, _ = v.shape
    G = HV // k.shape[1]
    for row in range(batch):
        slot = int(idx[row]) if idx is not None else row
        if slot == pad_slot_id or int(committed[slot]) + 1 < int(flush_at[slot]):
            continue
        c = int(committed[slot])
        for h in range(HV):
            kh = h // G
            kr, qr = k[row, kh].to(f32), q[row, kh].to(f32)
            kt = (kr / torch.sqrt((kr * kr).sum() + 1e-6)).to(ring_k.dtype).to(f32)
            qt = qr / torch.sqrt((qr * qr).sum() + 1e-6) * scale
            ba = a[row, h].to(f32) + (dt_bias[h].to(f32) if dt_bias is not None else 0.0)
            g_t = -torch.exp(A_log[h].to(f32)) * torch.nn.functional.softplus(ba)
            beta = torch.sigmoid(b[row, h].to(f32))
            gr = ring_g[slot, h, :c]
            D = g_t + gr.sum()
            w = torch.exp(D - torch.cumsum(gr, 0))
            Kj = ring_k[slot, kh, :c].to(f32)
            U = ring_u[slot, h, :c]                                   # [c, d_v]
            S = checkpoint[slot, h]                                  # [d_v, d_k]
            e_t = torch.exp(D)
            vv = v[row, h].to(ring_v.dtype).to(f32)
            u = beta * (vv - e_t * (S @ kt) - U.T @ ((Kj @ kt) * w))
            out[row, h] = (e_t * (S @ qt) + U.T @ ((Kj @ qt) * w) + u * (kt @ qt)).to(out.dtype)
            checkpoint[slot, h] = e_t * S + (U.T * w) @ Kj + u[:, None] * kt[None, :]


def flush_rows_cuda(checkpoint, ring_k, ring_v, ring_g, ring_u, committed, flush_at, q, k, v, a, b, A_log, dt_bias,
                    idx, pad_slot_id: int, out, scale: float, min_blocks: int = 4, passes: int = MAX_PASSES, heads_per_item: int | None = None,
                    prefetch: bool = False):
    """Launch ``gdn_flush_rows`` on the current stream.

    checkpoint ``[slots, HV, d_v, d_k]`` fp32; ``ring_k`` ``[slots, H, capacity, d_k]``, ``ring_v``
    (its dtype only), ``ring_g`` ``[slots, HV, capacity]`` fp32, ``ring_u`` ``[slots, HV,
    capacity, d_v]`` fp32; ``committed`` / ``flush_at`` ``[slots]`` int32 (read, not moved); ``q`` / ``k`` ``[batch, H, d_k]``, ``v`` / ``out`` ``[batch, HV, d_v]``, ``a`` / ``b``
    ``[batch, HV]``, ``A_log`` / ``dt_bias`` ``[HV]`` (``dt_bias`` may be ``None``), ``idx``
    ``[batch]`` int32/int64 or ``None`` with ``pad_slot_id`` (its rows skipped); ``scale``: the query scale; ``min_blocks``, ``passes``,
    ``heads_per_item``, ``prefetch``: as :func:`defines`. Writes the flush rows' checkpoint tiles
    and outputs."""
    batch, HV, d_v = v.shape
    H, d_k = k.shape[1], k.shape[2]
    capacity = ring_k.shape[2]
    dtypes = dict(qk=q.dtype, v=v.dtype, ring_k=ring_k.dtype, ring_v=ring_v.dtype, gate=a.dtype, A_log=A_log.dtype,
                  dt_bias=dt_bias.dtype if dt_bias is not None else torch.float32)
    if q.dtype != k.dtype or a.dtype != b.dtype:
        raise ValueError(f"q, k: expected one dtype (got {q.dtype}, {k.dtype}); a, b: one dtype (got {a.dtype}, "
                         f"{b.dtype})")
    defs = defines(HV, H, d_k, d_v, capacity, dtypes, dt_bias is not None, None if idx is None else idx.dtype,
                   (checkpoint.stride(2), ring_k.stride(2), ring_u.stride(2)), min_blocks, passes, heads_per_item,
                   prefetch)
    shared = shared_bytes(batch, d_k, capacity, warp_rows(d_k, d_v, passes), defs["HPI"])
    index = v.device.index if v.device.index is not None else torch.cuda.current_device()
    kernel, blocks = launch_plan(KERNEL_FILE, "gdn_flush_rows", SIGNATURE, tuple(defs.items()), index,
                                 batch * (HV // defs["HPI"]), shared, THREADS)
    anchor = checkpoint  # the pointer of an absent operand (never read: its HAS_ flag is 0)
    ptrs = [t.data_ptr() for t in (checkpoint, ring_k, ring_g, ring_u, committed, flush_at, q, k, v, a, b, A_log,
                                   dt_bias if dt_bias is not None else anchor, idx if idx is not None else anchor,
                                   out)]
    strides = (checkpoint.stride(0), checkpoint.stride(1), ring_k.stride(0), ring_k.stride(1), ring_g.stride(0),
               ring_g.stride(1), ring_u.stride(0), ring_u.stride(1), q.stride(0), q.stride(1), k.stride(0),
               k.stride(1), v.stride(0), v.stride(1), a.stride(0), b.stride(0), out.stride(0), out.stride(1))
    kernel.launch(blocks, THREADS, shared, (*ptrs, float(scale), batch, int(pad_slot_id), *strides),
                  torch.cuda.current_stream(v.device).cuda_stream)
