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

``flush_impl="cuda_ws"`` takes ``flush_ws.cu`` instead (:func:`flush_rows_ws`): the same items as
(flush row, head) pairs, walked by one block per SM in which a producer thread bulk-copies each
item's checkpoint tile and every operand it reads (the group's ring ``B``, the head's ring ``x``,
the token's ``B``, ``C``, ``x``, ``z``, its coef line) into one of 2 to :data:`WS_MAX_STAGES`
stages and sends the folded tiles back by bulk stores, while :data:`WS_CONSUMERS` warps (by default;
``LaunchConfig.flush_ws_consumers``) fold them.
It is the default flush launch from batch 128 at ``d_state`` 128 (at most 3 stages below batch 192): on
an H200 at Nemotron-H batch 256 the flush step took 592-599 us against 614 us for the Triton launch
(``benchmarks/NOTES_mamba2.md``, thirty-fourth run), 568 us with the ``"auto"`` order, and at 128
297 against 315 us (forty-first run). Its blocks leave :data:`WS_STREAM_RESERVE`
of the SM's shared memory to the stream launch that runs beside them. :func:`ws_unsupported`
says when it falls back to this file's launch.

:func:`unsupported` says when a step keeps the Triton flush launch: a checkpoint that is not fp32
or not 16-byte aligned rows, ``d_state`` other than 64 or 128, rings or activations whose rows do
not start on 16-byte boundaries, a batch above ``LIST_MAX_BATCH``, no CUDA device, or no NVRTC.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from .. import _nvrtc
from .._flush_rows import KINDS as _KINDS
from .._flush_rows import checkpoint_reason, chunked, launch_plan
from .._flush_rows import source as _source
from .launch import WS_CONSUMER_CHOICES, WS_CONSUMERS, WS_ORDERS, ws_consumers_allowed

__all__ = ["THREADS", "WS_CONSUMERS", "WS_CONSUMER_CHOICES", "WS_MAX_STAGES", "WS_STREAM_RESERVE", "defines",
           "flush_rows_cuda", "flush_rows_ws", "have_nvrtc", "rows_per_instr", "shared_bytes", "unsupported",
           "warp_rows", "ws_defines", "ws_pick_stages", "ws_rows_split", "ws_shared_bytes", "ws_shared_limit",
           "ws_stage_bytes", "ws_stages", "ws_unsupported"]

#: Threads per block: 8 warps, each walking its own warp items.
THREADS = 256
#: Float4s of a warp item per thread by default (its checkpoint rows stay in registers; 4 keeps
#: the kernel within 64 registers, 4 blocks per SM), and at most when asked (80 registers at 8).
MAX_PASSES, ASKED_MAX_PASSES = 4, 8

_P = ctypes.c_void_p
_I32, _I64 = ctypes.c_int32, ctypes.c_int64
#: ``mamba2_flush_rows``'s parameters: 12 pointers, the batch, 16 strides (the rows' strides are defines).
SIGNATURE = (_P,) * 12 + (_I32,) + (_I64,) * 16
#: ``mamba2_flush_ws``'s: those, then the item counter.
WS_SIGNATURE = SIGNATURE + (_P,)


KERNEL_FILE = str(Path(__file__).with_name("flush_cuda.cu"))
WS_FILE = str(Path(__file__).with_name("flush_ws.cu"))
#: ``flush_impl="cuda_ws"``: the most head tiles in flight per block (its consumer warps:
#: ``launch.WS_CONSUMERS``). Five stages were the probe's best (benchmarks/fold_ws.cu); in the step
#: a block takes fewer where five would crowd out the stream launch (WS_STREAM_RESERVE).
WS_MAX_STAGES = 5
#: Shared memory (bytes) a ``flush_ws.cu`` block leaves free on its SM for the stream launch's
#: programs, which run beside it (``flush_stream``). H200, Nemotron-H batch 256: five stages (a
#: 208 KB block, 20 KB left) slowed every non-flush step from 279 to 302 us, four (168 KB) did not.
WS_STREAM_RESERVE = 56 * 1024


def source(kernel_file: str = KERNEL_FILE) -> str:
    """``flush_cuda.cu`` (or ``flush_ws.cu``) behind the shared device code (``ops/_flush_rows.cuh``)."""
    return _source(kernel_file)


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
    if not have_nvrtc():
        return "no NVRTC library loads (the CUDA launches are compiled at run time)"
    return None


@functools.lru_cache(maxsize=None)
def have_nvrtc() -> bool:
    """Whether an NVRTC library loads (looked up once: :func:`unsupported` asks at every step)."""
    return _nvrtc.find_nvrtc() is not None


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


def _pointers(checkpoint, ring_x, ring_B, coef, info, x, B, C, D, z, idx, y) -> list[int]:
    """The kernels' 12 pointers (``MAMBA2_FLUSH_PARAMS``); an absent ``D``, ``z`` or ``idx`` takes the
    checkpoint's (never read: its ``HAS_`` flag is 0)."""
    return [t.data_ptr() for t in (checkpoint, ring_x, ring_B, coef, info, x, B, C,
                                   checkpoint if D is None else D, checkpoint if z is None else z,
                                   checkpoint if idx is None else idx, y)]


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
    ptrs = _pointers(checkpoint, ring_x, ring_B, coef, info, x, B, C, D, z, idx, y)
    args = (*ptrs, batch, s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group, s_x_row,
            s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head)
    kernel.launch(blocks, THREADS, shared, args, torch.cuda.current_stream(x.device).cuda_stream)


# -- flush_impl="cuda_ws": the warp-specialised form (flush_ws.cu) ---------------------------------


def ws_stage_bytes(head_dim: int, d_state: int, capacity: int, ring_bytes: int, bc_bytes: int, x_bytes: int,
                   has_z: bool) -> int:
    """Bytes of one ``flush_ws.cu`` stage: the head's checkpoint tile (fp32), the group's ring
    ``B`` and the head's ring ``x``, the token's ``B``, ``C``, ``x`` (and ``z``), and the 16-byte
    window that holds the head's coef line (``capacity + 2`` fp32 starting at most 12 bytes in)."""
    coef_window = (12 + 4 * (capacity + 2) + 15) // 16 * 16
    return (head_dim * d_state * 4 + capacity * (d_state + head_dim) * ring_bytes + 2 * d_state * bc_bytes
            + (2 if has_z else 1) * head_dim * x_bytes + coef_window)


def ws_shared_bytes(batch: int, heads: int, head_dim: int, d_state: int, capacity: int, ring_bytes: int,
                    bc_bytes: int, x_bytes: int, has_z: bool, stages: int) -> int:
    """Dynamic shared memory of a ``flush_ws.cu`` block: barriers, ``stages`` stages
    (:func:`ws_stage_bytes`), the consumer warps' weighted ``x`` (``capacity + 1`` entries of each
    warp's rows, fp32: ``capacity + 1`` entries of the head's rows, however many warps share them),
    every head's ``D`` (fp32), and the batch's flush rows (slot int64, row and ``c`` int32)."""
    words = (capacity + 1) * head_dim + heads
    return (128 + stages * ws_stage_bytes(head_dim, d_state, capacity, ring_bytes, bc_bytes, x_bytes, has_z)
            + 4 * (words + words % 2) + 16 * batch)


def ws_stages(batch: int, heads: int, head_dim: int, d_state: int, capacity: int, ring_bytes: int, bc_bytes: int,
              x_bytes: int, has_z: bool, limit: int) -> int:
    """The most stages (at most :data:`WS_MAX_STAGES`) whose block fits ``limit`` bytes of shared
    memory; 0 where not even two do."""
    fits = [s for s in range(2, WS_MAX_STAGES + 1)
            if ws_shared_bytes(batch, heads, head_dim, d_state, capacity, ring_bytes, bc_bytes, x_bytes, has_z, s)
            <= limit]
    return max(fits, default=0)


@functools.lru_cache(maxsize=None)
def _device_limits(index: int) -> tuple[int, int, int]:
    """The device's major compute capability, the shared memory a ``flush_ws.cu`` block takes
    beside the stream launch (:func:`ws_shared_limit`) and what one block may opt into."""
    props = torch.cuda.get_device_properties(index)
    optin = props.shared_memory_per_block_optin
    return props.major, ws_shared_limit(optin, props.shared_memory_per_multiprocessor), optin


def _ws_most_stages(index: int, *plan) -> int:
    """The most stages for ``ws_stages(*plan, limit)``: within the stream launch's reserve, else
    (an fp32 step at head_dim 128, say) within what a block may opt into; 0 where two do not fit."""
    _, beside, optin = _device_limits(index)
    return ws_stages(*plan, beside) or ws_stages(*plan, optin)


def ws_shared_limit(per_block_optin: int, per_sm: int) -> int:
    """Shared memory a ``flush_ws.cu`` block may take on an SM of ``per_sm`` bytes (blocks may opt
    into ``per_block_optin``): :data:`WS_STREAM_RESERVE` stays free for the stream launch (a step
    for which two stages do not fit within it takes what a block may opt into: ``_ws_most_stages``)."""
    return min(per_block_optin, per_sm - 1024 - WS_STREAM_RESERVE)


def ws_pick_stages(asked: int, cap: int, most: int) -> int:
    """The stages a ``flush_ws.cu`` launch takes: ``asked`` (``LaunchConfig.flush_ws_stages``) where
    it is not 0, refused past ``most`` (what fits the device beside the stream launch), else
    ``most``, at most ``cap`` (``LaunchConfig.flush_ws_max_stages``; 0: no cap)."""
    if asked > most or asked == 1 or asked < 0:
        raise ValueError(f"LaunchConfig.flush_ws_stages: expected 0 or 2 to {most} (what fits the device's shared "
                         f"memory beside the stream launch at this step), got {asked}")
    if cap == 1 or cap < 0:
        raise ValueError(f"LaunchConfig.flush_ws_max_stages: expected 0 or 2 to {WS_MAX_STAGES}, got {cap}")
    return asked or min(most, cap or most)


def ws_rows_split(head_dim: int, consumers: int) -> bool:
    """Whether ``consumers`` warps take ``head_dim`` rows of a head in equal whole parts of at most
    32 (a row's output is one lane of its warp)."""
    return head_dim % consumers == 0 and head_dim // consumers <= 32


def ws_unsupported(checkpoint: torch.Tensor, ring_x: torch.Tensor, ring_B: torch.Tensor, x: torch.Tensor,
                   B: torch.Tensor, z: torch.Tensor | None, batch: int, consumers: int = WS_CONSUMERS) -> str | None:
    """Why a step that :func:`unsupported` accepts cannot take the warp-specialised form (``None``
    when it can): ``d_state`` other than 128, a head's checkpoint rows, its ring ``x`` entries or
    the ring's ``B`` entries not contiguous (each is one bulk copy), ``head_dim`` not split evenly
    over the ``consumers`` warps (at most 32 rows each), no bulk copies (a device before sm_90, or
    not CUDA), or too little shared memory for two stages."""
    _, heads, head_dim, d_state = checkpoint.shape
    if d_state != 128:
        return f"d_state {d_state}: the warp-specialised flush takes d_state 128"
    if checkpoint.stride(2) != d_state or ring_B.stride(2) != d_state or ring_x.stride(2) != head_dim:
        return "a head's checkpoint rows or the ring's x or B entries are not contiguous"
    if not ws_rows_split(head_dim, consumers):
        return (f"head_dim {head_dim}: expected a multiple of {consumers}, at most {32 * consumers} "
                f"({consumers} consumer warps)")
    if checkpoint.device.type != "cuda":
        return "bulk copies need a CUDA device"
    index = checkpoint.device.index if checkpoint.device.index is not None else torch.cuda.current_device()
    if _device_limits(index)[0] < 9:
        return "bulk copies need sm_90 or later"
    if not _ws_most_stages(index, batch, heads, head_dim, d_state, ring_B.shape[2], ring_B.element_size(),
                           B.element_size(), x.element_size(), z is not None):
        return "two stages do not fit the device's shared memory"
    return None


def ws_defines(heads: int, groups: int, head_dim: int, d_state: int, capacity: int, x_dtype, bc_dtype, ring_dtype,
               d_dtype, has_d: bool, has_z: bool, idx_dtype, stages: int, order: str = "stride",
               chunk: int = 4, taper: int = 0, l2_ahead: int = 0, consumers: int = WS_CONSUMERS) -> dict:
    """The ``-D`` values ``flush_ws.cu`` is compiled with; ``order``: how a block takes its items
    (:data:`WS_ORDERS`; ``ORDER`` is its index), ``chunk``: consecutive items per take from the counter,
    ``taper``: > 0, one item a take once fewer than ``taper`` chunks a block remain
    (``LaunchConfig.flush_ws_taper``), ``l2_ahead``: 0, or the producer asks the L2 for each item
    this many loads before its own (1 or 2; ``LaunchConfig.flush_ws_l2_ahead``), ``consumers``: the
    consumer warps (:data:`WS_CONSUMER_CHOICES`; ``LaunchConfig.flush_ws_consumers``), each folding
    ``head_dim / consumers`` rows of a head (at most 32)."""
    if not ws_consumers_allowed(consumers):
        raise ValueError(f"consumers: expected one of {WS_CONSUMER_CHOICES}, got {consumers!r}")
    if not ws_rows_split(head_dim, consumers):
        raise ValueError(f"consumers: {consumers} warps do not split head_dim {head_dim} into whole rows, at most 32 "
                         "each")
    if order not in WS_ORDERS:
        raise ValueError(f"order: expected one of {WS_ORDERS}, got {order!r}")
    if chunk < 1:
        raise ValueError(f"chunk: expected >= 1, got {chunk}")
    if taper < 0:
        raise ValueError(f"taper: expected >= 0, got {taper}")
    if type(l2_ahead) is not int or l2_ahead not in (0, 1, 2):
        raise ValueError(f"l2_ahead: expected 0, 1 or 2, got {l2_ahead!r}")
    for name, dt in (("x", x_dtype), ("B", bc_dtype), ("ring", ring_dtype)):
        if dt not in _KINDS:
            raise ValueError(f"{name}: expected one of {tuple(_KINDS)}, got {dt}")
    return dict(P=head_dim, N=d_state, CAP=capacity, HEADS=heads, HPG=heads // groups,
                CW=consumers, STAGES=stages, THREADS=(consumers + 1) * 32, X_KIND=_KINDS[x_dtype],
                BC_KIND=_KINDS[bc_dtype], RING_KIND=_KINDS[ring_dtype],
                D_KIND=_KINDS.get(d_dtype, 0) if has_d else 0, HAS_D=int(has_d), HAS_Z=int(has_z),
                HAS_INDICES=int(idx_dtype is not None), IDX_64=int(idx_dtype == torch.int64),
                ORDER=WS_ORDERS.index(order), CHUNK=chunk, TAPER=taper, L2_AHEAD=l2_ahead)


def flush_rows_ws(checkpoint, ring_x, ring_B, coef, info, x, B, C, D, z, idx, y, batch, strides, capacity,
                  stages: int = 0, counter: torch.Tensor | None = None, chunk: int = 4, order: str | None = None,
                  max_stages: int = 0, taper: int = 0, l2_ahead: int = 0, consumers: int = WS_CONSUMERS):
    """Launch ``mamba2_flush_ws`` on the current stream: the arguments of :func:`flush_rows_cuda`
    (its ``strides``: the staged step's 16 flush strides), for a step :func:`ws_unsupported`
    accepts. ``coef`` must start on a 16-byte boundary with 12 readable bytes past its end (its
    lines are bulk-copied in 16-byte windows); ``stages``: ``LaunchConfig.flush_ws_stages`` (0: the
    most that fit, at most :data:`WS_MAX_STAGES` and at most ``max_stages`` where that is not 0;
    more than fit is refused: :func:`ws_pick_stages`). One block per SM
    walks the (flush row, head) items: with ``counter`` (``[1]`` int32, 0 when the launch starts:
    ``LaunchConfig.flush_ws_order="counter"``) each takes its next ``chunk`` consecutive items from
    it, else block ``b`` takes items ``b``, ``b + blocks``, ... ``order``
    (``LaunchConfig.flush_ws_order``; None: "counter" with a counter, else "stride") "auto" takes
    the counter's order in a step where at least half of the ``batch`` rows flush, else the
    stride's; it needs the counter. ``taper`` (``LaunchConfig.flush_ws_taper``): with the counter, one
    item a take once fewer than ``taper`` chunks a block remain (0: ``chunk`` to the end).
    ``l2_ahead`` (``LaunchConfig.flush_ws_l2_ahead``): 0, or the producer asks the L2 for an
    item's checkpoint tile and ring ``x`` this many loads (1 or 2) before its own, while its stages
    are all busy; with ``"auto"``, only in the steps that take the counter's order. ``consumers``
    (``LaunchConfig.flush_ws_consumers``): the block's consumer warps beside its producer warp."""
    order = order or ("stride" if counter is None else "counter")
    if order not in WS_ORDERS:
        raise ValueError(f"order: expected one of {WS_ORDERS}, got {order!r}")
    if (order == "stride") != (counter is None):
        raise ValueError(f"counter: expected {'None' if order == 'stride' else 'a tensor'} for order {order!r}")
    if counter is not None and (counter.dtype != torch.int32 or counter.numel() != 1 or counter.device != x.device):
        raise ValueError(f"counter: expected one int32 on {x.device}, got {counter.dtype} x {counter.numel()} on "
                         f"{counter.device}")
    _, heads, head_dim, d_state = checkpoint.shape
    groups = B.shape[1]
    if not coef.is_contiguous() or coef.data_ptr() % 16 or (
            coef.untyped_storage().nbytes() - coef.storage_offset() * 4 < coef.numel() * 4 + 12):
        raise ValueError("coef: expected contiguous fp32 lines from a 16-byte boundary with 12 readable bytes past "
                         "the last (decode_staged allocates it so)")
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    sizes = (ring_B.element_size(), B.element_size(), x.element_size(), z is not None)
    most = _ws_most_stages(index, batch, heads, head_dim, d_state, capacity, *sizes)
    stages = ws_pick_stages(stages, max_stages, most)
    defs = ws_defines(heads, groups, head_dim, d_state, capacity, x.dtype, B.dtype, ring_x.dtype,
                      None if D is None else D.dtype, D is not None, z is not None,
                      None if idx is None else idx.dtype, stages, order, chunk, taper, l2_ahead, consumers)
    shared = ws_shared_bytes(batch, heads, head_dim, d_state, capacity, *sizes, stages)
    threads = defs["THREADS"]
    kernel, blocks = launch_plan(WS_FILE, "mamba2_flush_ws", WS_SIGNATURE, tuple(defs.items()), index, batch * heads,
                                 shared, threads)
    ptrs = _pointers(checkpoint, ring_x, ring_B, coef, info, x, B, C, D, z, idx, y)
    count_at = (checkpoint if counter is None else counter).data_ptr()  # never read in the stride order
    kernel.launch(blocks, threads, shared, (*ptrs, batch, *strides, count_at),
                  torch.cuda.current_stream(x.device).cuda_stream)
