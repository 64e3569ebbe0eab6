"""The two-launch ReplaySSM step for Mamba-2 (``LaunchConfig(kernel="staged")``).

The one-launch kernels (``decode.py``, ``decode_v4.py``) make every program that streams
checkpoint rows also do the ring work of its head: load the ring's ``dt`` and ``B [J, d_state]``,
reduce ``B_j . C``, take the cumulative decays. That work is small in bytes but long in
dependent latency, and while a program does it no checkpoint bytes of its own are in flight;
``B`` is also re-read by each of the group's heads. Measured on an H200 that kept the non-flush
step at ~73% of copy bandwidth while the standard kernel, whose programs only load a tile,
update it and store it, reaches ~100% (benchmarks/NOTES_mamba2.md).

Here the ring work is a launch of its own and the checkpoint stream is as plain as the standard
kernel:

1. ``_ring_kernel``, one program per (batch row, group): reads the cursors, computes for every head
   ``G = cumulative dt A``, ``Gamma = exp(A G_t)`` and the ring weights
   ``w_j = exp(A (G_t - G_j)) dt_j`` (``j < c``), the scores ``B_j . C_t`` once per group, and
   writes per ``(row, head)`` a ``[CAP + 2]`` fp32 line: non-flush rows
   ``coef_j = w_j (B_j . C_t)``, ``Gamma``, ``dt_t (B_t . C_t)``; flush rows ``w_j``, ``Gamma``,
   ``dt_t``. It appends ``dt_t`` and ``B_t`` at ring position ``c``, and with ``ring_x_in_ring``
   (with ``flush_launch``; the default from batch 128) the group's heads of ``x_t`` too, for
   non-flush rows (``ring.py``). (One program per row looping over the groups took ~18 us at any
   batch on an H200: latency-bound.)
2. ``_stream_kernel`` (``stream.py``; ``_stream_walk`` with ``stream_tiles``), one program per
   ``(head_dim tile, head, row)`` as the standard kernel:
   the checkpoint tile is the first load; non-flush
   ``y = Gamma S_c C + x_ring^T coef + coef_now x_t`` (plus ``D x`` and the ``z`` gate) and the
   tile's slice of ``x_t`` is appended at ring position ``c`` (unless launch 1 did: stores among
   the checkpoint's reads cost more than their bytes, benchmarks/NOTES_mamba2.md, thirty-sixth
   run); flush (uniform per program)
   ``S = Gamma S_c + dt_t x_t B_t^T + sum_j w_j x_j B_j^T`` in fp32 (``fold``: unrolled FMAs,
   a rolled loop with the next entry prefetched (``loop``) or software-pipelined (``pipe``), or
   ``tl.dot`` at ``ieee`` / ``tf32x3`` precision; never through a 16-bit type), stored, and
   ``y = S C``.

The stream kernel reads the row's ``c`` and flush flag from launch 1's scratch; its first
program of each row moves the row's cursors (launch 1's programs all read them, launch 2's do
not): no counters.

``flush_launch``: the fold's registers (96-153 against 56) halve the stream programs per SM on
every step, so the flush rows can instead go to a third launch, ``_flush_kernel``: one program
per (row, group, ``flush_heads`` heads), whole heads in ``flush_block_p``-row tiles (the token's
``B`` and ``C``, and the group's ring ``B`` for the dot folds, loaded once per program;
``flush_stages`` > 1 hands the tile loop to Triton's software pipeliner); programs of non-flush
rows exit after two loads. The stream
launch then serves only the non-flush rows and compiles without the fold (H200, batch 256:
non-flush 290 us = 95% of copy against 336 us); its programs of flush rows move the cursors and
exit. ``flush_max_registers`` caps the flush launch's registers (in the defaults 128 or 96, 4 or 5
programs per SM, whichever fills its waves best on the device: on an H200 its 2048 programs from
batch 64 run in 3.9 waves at 4 per SM, in 3.1 at 5), whose programs take more heads as the batch
grows (``decode.launch_config``);
``flush_persistent=N`` replaces its grid by N programs per SM walking a list numbered from
the ring launch's flags: of the flush rows' tiles (``flush_list_items="tiles"``; a slower flush
as measured, each tile loading its row's operands) or of their (row, head chunk) items, each
what a per-row program does (``"heads"``; both ``_flush_kernel``'s ``ITEMS``; the default from batch
128 where 32-row tiles divide ``head_dim``): a non-flush step then pays one wave of programs
that find no item instead of ``batch x chunks`` early exits (``benchmarks/NOTES_mamba2.md``).
Every flush program asks the L2 for its next tile before each tile's load
(``flush_l2_prefetch``, ``ops/_prefetch.py``; the defaults from batch 128).
``flush_impl="cuda"`` replaces the flush launch by its CUDA C++ twin (``decode_flush_cuda.py``),
``flush_impl="cuda_ws"`` by that twin's warp-specialised form (``flush_ws.cu``) where it serves
(the default from batch 128 at ``d_state`` 128).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._flush_heads import flush_heads_per_program, fullest_last_wave_cap
from .._flush_list import LIST_MAX_BATCH, _sm_count, flush_ranks, flush_row, launch_key, list_grid, note_resident
from .._prefetch import prefetch_l2, prefetch_mode
from .._side_stream import fork, join
from .._tf32 import fp32_dot
from .decode_flush_cuda import flush_rows_cuda, flush_rows_ws, unsupported, ws_unsupported
from .decode import _common, _mixer_gate, _mixer_output, _slot_of, _state_strides
from .ring import _ring_kernel
from .stream import _fold_ring, _ring_B_tile, _stream_kernel, _stream_walk

__all__ = ["flush_heads_per_program", "flush_register_cap", "replay_step_staged"]


def flush_register_cap(cfg, programs: int | None, sms: int | None) -> int | None:
    """The ``.maxnreg`` of a flush launch of ``programs`` programs: ``cfg.flush_max_registers``,
    or of a tuple of caps the one that fills the launch's waves best on ``sms`` SMs (the first
    for a list launch, ``programs=None``, whose single wave has no last one to fill, or without a
    GPU, ``sms=None``: the interpreter ignores the cap)."""
    caps = cfg.flush_max_registers
    if not isinstance(caps, tuple):
        return caps
    if programs is None or sms is None:
        return caps[0]
    return fullest_last_wave_cap(caps, programs, cfg.flush_warps, sms)


@triton.jit
def _group_operands(B_ptr, C_ptr, ring_B_ptr, row, slot, g, c, offs_n, offs_j, mask_n, s_B_row, s_B_group, s_C_row,
                    s_C_group, s_rB_slot, s_rB_group, s_rB_j, CAP: tl.constexpr):
    """What a flush program loads once for group ``g`` of a row: ``(in_ring, rB_base, B, C, ring
    B)`` (entries ``< c``; the token's ``B``, ``C`` and :func:`_ring_B_tile` in fp32)."""
    in_ring = offs_j < c
    rB_base = ring_B_ptr + slot * s_rB_slot + g * s_rB_group
    Bv = tl.load(B_ptr + row * s_B_row + g * s_B_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    Cv = tl.load(C_ptr + row * s_C_row + g * s_C_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    return in_ring, rB_base, Bv, Cv, _ring_B_tile(rB_base, offs_j, offs_n, in_ring, mask_n, s_rB_j, CAP)


@triton.jit
def _flush_head(coef_ptr, ring_x_ptr, row, slot, h, offs_j, s_rx_slot, s_rx_head, HEADS: tl.constexpr,
                CAP: tl.constexpr):
    """Head ``h``'s coefficient line (ring weights ``w_j``, ``Gamma``, ``dt_t``) and ring ``x`` base."""
    line = coef_ptr + (row * HEADS + h) * (CAP + 2)
    lead = tl.load(line + offs_j, mask=offs_j < CAP, other=0.0)
    return line, lead, tl.load(line + CAP), tl.load(line + CAP + 1), ring_x_ptr + slot * s_rx_slot + h * s_rx_head


@triton.jit
def _flush_tile(ckpt_ptr, x_ptr, D_ptr, z_ptr, y_ptr, rB_base, rB, row, slot, h, pt, c, in_ring, line, lead, gamma, dt,
                rx_base, Bv, Cv, offs_n, offs_j, mask_n,
                s_ck_slot, s_ck_head, s_ck_p, s_rx_j, s_rB_j, s_x_row, s_x_head, s_z_row, s_z_head, s_y_row, s_y_head,
                P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr, BLOCK_P: tl.constexpr,
                HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FOLD: tl.constexpr):
    """Fold rows ``pt .. pt + BLOCK_P`` of head ``h`` of a flush row, store them and their output."""
    offs_p = pt + tl.arange(0, BLOCK_P)
    mask_p = offs_p < P
    ck_ptrs = ckpt_ptr + slot * s_ck_slot + h * s_ck_head + offs_p[:, None] * s_ck_p + offs_n[None, :]
    S = tl.load(ck_ptrs, mask=mask_p[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
    d_h, zv = _mixer_gate(h, row, offs_p, mask_p, D_ptr, z_ptr, s_z_row, s_z_head, HAS_D, HAS_Z)
    # Every ring entry, zeroed from c on in registers (NaN-safe): the load waits for no cursor.
    rx = tl.load(rx_base + offs_j[None, :] * s_rx_j + offs_p[:, None],
                 mask=mask_p[:, None] & (offs_j < CAP)[None, :], other=0.0)
    rx = tl.where(in_ring[None, :], rx.to(tl.float32), 0.0)
    xf = tl.load(x_ptr + row * s_x_row + h * s_x_head + offs_p, mask=mask_p, other=0.0).to(tl.float32)
    upd = gamma * S + (dt * xf)[:, None] * Bv[None, :]
    if FOLD == "fma" or FOLD == "loop" or FOLD == "pipe":
        upd = _fold_ring(upd, c, line, rx, lead, rx_base, rB_base, s_rx_j, s_rB_j, offs_p, offs_n, offs_j,
                         in_ring, mask_p, mask_n, P, N, CAP, FOLD)
    else:
        upd = fp32_dot(rx * lead[None, :], rB, upd, rB_base, FOLD)
    tl.store(ck_ptrs, upd.to(ckpt_ptr.dtype.element_ty), mask=mask_p[:, None] & mask_n[None, :])
    y = tl.sum(upd * Cv[None, :], axis=1)
    y = _mixer_output(y, xf, d_h, zv, HAS_D, HAS_Z)
    tl.store(y_ptr + row * s_y_row + h * s_y_head + offs_p, y.to(y_ptr.dtype.element_ty), mask=mask_p)


@triton.jit
def _flush_heads_of_row(
    ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, x_ptr, B_ptr, C_ptr, D_ptr, z_ptr, y_ptr, row, slot, c, chunk,
    s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group,
    s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    s_ck_p: tl.constexpr, s_rx_j: tl.constexpr, s_rB_j: tl.constexpr,
    HEADS: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, HEADS_PER_PROGRAM: tl.constexpr, P: tl.constexpr,
    N: tl.constexpr, CAP: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FOLD: tl.constexpr, STAGES: tl.constexpr, PREFETCH: tl.constexpr,
    AHEAD: tl.constexpr,
):
    """Fold the ``HEADS_PER_PROGRAM`` heads of head chunk ``chunk`` (of ``HEADS / HEADS_PER_PROGRAM``;
    the chunks of a group are consecutive) of flush row ``row`` (slot ``slot``, ``c`` ring entries),
    tile after tile; see :func:`_flush_kernel` for ``STAGES`` / ``PREFETCH`` / ``AHEAD``."""
    chunks: tl.constexpr = HEADS_PER_GROUP // HEADS_PER_PROGRAM
    TILES: tl.constexpr = (P + BLOCK_P - 1) // BLOCK_P
    g = chunk // chunks
    h0 = g * HEADS_PER_GROUP + (chunk % chunks) * HEADS_PER_PROGRAM
    offs_n = tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_J)
    mask_n = offs_n < N
    # The token's B and C, and the group's ring B for the dot folds, once per program (the ring B
    # per tile cost the Nemotron-H flush 2%: a 4 KB load, its conversion and a shared-memory
    # store for every tile).
    in_ring, rB_base, Bv, Cv, rB = _group_operands(B_ptr, C_ptr, ring_B_ptr, row, slot, g, c, offs_n, offs_j, mask_n,
                                                   s_B_row, s_B_group, s_C_row, s_C_group, s_rB_slot, s_rB_group,
                                                   s_rB_j, CAP)
    if STAGES > 1:
        for it in tl.range(0, HEADS_PER_PROGRAM * TILES, num_stages=STAGES):
            h = h0 + it // TILES
            line, lead, gamma, dt, rx_base = _flush_head(coef_ptr, ring_x_ptr, row, slot, h, offs_j, s_rx_slot,
                                                         s_rx_head, HEADS, CAP)
            _flush_tile(ckpt_ptr, x_ptr, D_ptr, z_ptr, y_ptr, rB_base, rB, row, slot, h, (it % TILES) * BLOCK_P, c,
                        in_ring, line, lead, gamma, dt, rx_base, Bv, Cv, offs_n, offs_j, mask_n,
                        s_ck_slot, s_ck_head, s_ck_p, s_rx_j, s_rB_j, s_x_row, s_x_head, s_z_row, s_z_head,
                        s_y_row, s_y_head, P, N, CAP, BLOCK_P, HAS_D, HAS_Z, FOLD)
    else:
        ck_base = ckpt_ptr + slot * s_ck_slot
        TILE_BYTES: tl.constexpr = BLOCK_P * s_ck_p * (ckpt_ptr.dtype.element_ty.primitive_bitwidth // 8)
        for a in tl.static_range(1, AHEAD if PREFETCH > 0 else 1):
            if a < HEADS_PER_PROGRAM * TILES:
                prefetch_l2(ck_base + (h0 + a // TILES) * s_ck_head + (a % TILES) * BLOCK_P * s_ck_p, TILE_BYTES,
                            PREFETCH)
        for hh in range(HEADS_PER_PROGRAM):
            h = h0 + hh
            line, lead, gamma, dt, rx_base = _flush_head(coef_ptr, ring_x_ptr, row, slot, h, offs_j, s_rx_slot,
                                                         s_rx_head, HEADS, CAP)
            for pt in range(0, P, BLOCK_P):
                if PREFETCH > 0:
                    t = hh * TILES + pt // BLOCK_P + AHEAD
                    if t < HEADS_PER_PROGRAM * TILES:
                        prefetch_l2(ck_base + (h0 + t // TILES) * s_ck_head + (t % TILES) * BLOCK_P * s_ck_p,
                                    TILE_BYTES, PREFETCH)
                _flush_tile(ckpt_ptr, x_ptr, D_ptr, z_ptr, y_ptr, rB_base, rB, row, slot, h, pt, c, in_ring, line,
                            lead, gamma, dt, rx_base, Bv, Cv, offs_n, offs_j, mask_n,
                            s_ck_slot, s_ck_head, s_ck_p, s_rx_j, s_rB_j, s_x_row, s_x_head, s_z_row, s_z_head,
                            s_y_row, s_y_head, P, N, CAP, BLOCK_P, HAS_D, HAS_Z, FOLD)


#: ``_flush_kernel``'s ``ITEMS``: a program per (row, head chunk), or a wave of programs walking a
#: list of (row, head chunk) items or of tiles.
ROW_GRID, LIST_HEADS, LIST_TILES = 0, 1, 2


@triton.jit
def _flush_kernel(
    ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, info_ptr,
    x_ptr, B_ptr, C_ptr, D_ptr, z_ptr, idx_ptr, y_ptr,
    batch, pad_slot_id,
    s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group,
    s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    s_ck_p: tl.constexpr, s_rx_j: tl.constexpr, s_rB_j: tl.constexpr,
    HEADS: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, HEADS_PER_PROGRAM: tl.constexpr, P: tl.constexpr,
    N: tl.constexpr, CAP: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_INDICES: tl.constexpr, FOLD: tl.constexpr,
    STAGES: tl.constexpr, PREFETCH: tl.constexpr = 0, AHEAD: tl.constexpr = 1,
    ITEMS: tl.constexpr = 0, BLOCK_B: tl.constexpr = 1,
):
    """The flush rows of a ``flush_launch`` step, by ``ITEMS``:

    - ``ROW_GRID``: a program per (row, chunk of ``HEADS_PER_PROGRAM`` heads of one group), grid
      ``(batch, HEADS / HEADS_PER_PROGRAM)``; programs of non-flush rows exit after two loads.
    - ``LIST_HEADS`` (``flush_list_items="heads"``): item ``i`` is head chunk ``i % (HEADS /
      HEADS_PER_PROGRAM)`` of the ``i // (HEADS / HEADS_PER_PROGRAM)``-th flush row, what a
      ``ROW_GRID`` program does, walked by a fixed wave of programs (``flush_persistent`` per
      SM) that number the flush rows from the ring launch's flags (``[BLOCK_B]``, a prefix sum).
      A non-flush step then costs one wave of programs finding no item, not ``batch x chunks``
      early exits.
    - ``LIST_TILES`` (``flush_list_items="tiles"``): the same wave over the flush rows'
      ``[BLOCK_P, d_state]`` tiles, item ``i`` tile ``i % (HEADS * TILES)`` of the ``i // (HEADS
      * TILES)``-th flush row, each loading its row's operands (one tile at a time per program,
      as many programs in flight as fit).

    ``STAGES > 1`` walks a program's (head, tile) pairs as one ``tl.range`` loop for Triton's
    software pipeliner. ``PREFETCH`` (``ops/_prefetch.py``; ``head_dim`` a multiple of
    ``BLOCK_P``): the tile ``AHEAD`` tiles on is asked of the L2 before each tile's load, so
    that the program's next loads hit the L2 while it folds (a program walks its tiles one after
    the other).

    The row strides of the checkpoint and the rings are compile-time constants (the cache's
    layout): with them as arguments every element of the ``[J, d_state]`` ring tile and the
    checkpoint tile needs its own 64-bit address (sm_90: 252 registers against 168; 132 with the
    ring tiles also loaded whole rather than masked by ``c``)."""
    if ITEMS == 0:
        row = tl.program_id(0).to(tl.int64)
        slot, live = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)
        # c with the flag and the slot (all indexed by row): nothing after the branch waits for it.
        c = tl.load(info_ptr + 2 * row)
        is_flush = tl.load(info_ptr + 2 * row + 1) != 0
        if live & is_flush:
            _flush_heads_of_row(ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, x_ptr, B_ptr, C_ptr, D_ptr, z_ptr, y_ptr,
                                row, slot, c, tl.program_id(1),
                                s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group,
                                s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head,
                                s_y_row, s_y_head, s_ck_p, s_rx_j, s_rB_j, HEADS, HEADS_PER_GROUP, HEADS_PER_PROGRAM,
                                P, N, CAP, BLOCK_P, BLOCK_N, BLOCK_J, HAS_D, HAS_Z, FOLD, STAGES, PREFETCH, AHEAD)
    elif ITEMS == 1:
        CHUNKS: tl.constexpr = HEADS // HEADS_PER_PROGRAM
        ranks, n_flush = flush_ranks(info_ptr, batch, BLOCK_B)
        for i in range(tl.program_id(0), n_flush * CHUNKS, tl.num_programs(0)):
            row = flush_row(ranks, i // CHUNKS).to(tl.int64)
            slot, _ = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)  # a flush row is live
            _flush_heads_of_row(ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, x_ptr, B_ptr, C_ptr, D_ptr, z_ptr, y_ptr,
                                row, slot, tl.load(info_ptr + 2 * row), i % CHUNKS,
                                s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group,
                                s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head,
                                s_y_row, s_y_head, s_ck_p, s_rx_j, s_rB_j, HEADS, HEADS_PER_GROUP, HEADS_PER_PROGRAM,
                                P, N, CAP, BLOCK_P, BLOCK_N, BLOCK_J, HAS_D, HAS_Z, FOLD, STAGES, PREFETCH, AHEAD)
    else:
        TILES: tl.constexpr = (P + BLOCK_P - 1) // BLOCK_P
        PER_ROW: tl.constexpr = HEADS * TILES
        ranks, n_flush = flush_ranks(info_ptr, batch, BLOCK_B)
        offs_n = tl.arange(0, BLOCK_N)
        offs_j = tl.arange(0, BLOCK_J)
        mask_n = offs_n < N
        for i in range(tl.program_id(0), n_flush * PER_ROW, tl.num_programs(0)):
            row = flush_row(ranks, i // PER_ROW).to(tl.int64)
            h = (i % PER_ROW) // TILES
            g = h // HEADS_PER_GROUP
            slot, _ = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)  # a flush row is live
            c = tl.load(info_ptr + 2 * row)
            in_ring, rB_base, Bv, Cv, rB = _group_operands(B_ptr, C_ptr, ring_B_ptr, row, slot, g, c, offs_n, offs_j,
                                                           mask_n, s_B_row, s_B_group, s_C_row, s_C_group, s_rB_slot,
                                                           s_rB_group, s_rB_j, CAP)
            line, lead, gamma, dt, rx_base = _flush_head(coef_ptr, ring_x_ptr, row, slot, h, offs_j, s_rx_slot,
                                                         s_rx_head, HEADS, CAP)
            _flush_tile(ckpt_ptr, x_ptr, D_ptr, z_ptr, y_ptr, rB_base, rB, row, slot, h, (i % TILES) * BLOCK_P, c,
                        in_ring, line, lead, gamma, dt, rx_base, Bv, Cv, offs_n, offs_j, mask_n,
                        s_ck_slot, s_ck_head, s_ck_p, s_rx_j, s_rB_j, s_x_row, s_x_head, s_z_row, s_z_head,
                        s_y_row, s_y_head, P, N, CAP, BLOCK_P, HAS_D, HAS_Z, FOLD)


def replay_step_staged(checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, window,
                       x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id,
                       y, cfg):
    """Launch the two-launch ReplaySSM step (arguments as ``decode.replay_step``, validated
    there); writes ``y`` ``[batch, heads, head_dim]`` and the state in place.

    Scratch between the launches: ``coef`` ``[batch, heads, capacity + 2]`` fp32 (ring weights,
    ``Gamma``, current-token term) and ``info`` ``[batch, 2]`` int32 (``c``, flush flag)."""
    batch, heads, head_dim = x.shape
    d_state = checkpoint.shape[3]
    groups, capacity = ring_B.shape[1], ring_B.shape[2]
    lo, hi, strides, flags, (D_, z_, bias_, idx_) = _common(x, dt, B, C, z, y, dt_bias, dt_min, dt_max, D, state_indices, A)
    (s_x_row, s_x_head, s_dt_row, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head) = strides
    (s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rdt_slot, s_rdt_head,
     s_rB_slot, s_rB_group, s_rB_j) = _state_strides(checkpoint, ring_x, ring_dt, ring_B)
    s_rdt_j = ring_dt.stride(2)  # 1 but for an entries-outermost ring_dt (ring.py)
    # 4 words past the lines: the warp-specialised flush copies each line in 16-byte windows; the
    # next word: its item counter (flush_ws_order "counter" / "auto"), zeroed by the ring launch.
    lines = batch * heads * (capacity + 2)
    block_j = max(16, triton.next_power_of_2(capacity))
    # compact_coef: a non-flush row's head terms [batch, heads, 4] and group scores [batch, groups,
    # block_j] past the lines, from a 128-byte boundary (whole sectors for the 16-byte stores).
    terms_at = -(-(lines + 8) // 32) * 32
    scores_at = terms_at + batch * heads * 4
    scratch = torch.empty(scores_at + batch * groups * block_j if cfg.compact_coef else lines + 8,
                          dtype=torch.float32, device=x.device)
    coef = scratch[:lines].view(batch, heads, capacity + 2)
    compact = dict(terms_ptr=scratch[terms_at:scores_at], scores_ptr=scratch[scores_at:], COMPACT=True) \
        if cfg.compact_coef else {}
    cuda_flush = cfg.flush_launch and cfg.flush_impl in ("cuda", "cuda_ws") and unsupported(
        checkpoint, batch, dict(ring_x=ring_x, ring_B=ring_B, x=x, B=B, C=C, z=z)) is None
    ws_flush = cuda_flush and cfg.flush_impl == "cuda_ws" and ws_unsupported(
        checkpoint, ring_x, ring_B, x, B, z, batch, cfg.flush_ws_consumers) is None
    counter = scratch[lines + 4:lines + 5].view(torch.int32) if ws_flush and cfg.flush_ws_order != "stride" else None
    info = torch.empty(batch, 2, dtype=torch.int32, device=x.device)
    block_n = triton.next_power_of_2(d_state)
    ring_x_here = cfg.ring_x_in_ring  # LaunchConfig allows it only with flush_launch
    _ring_kernel[(batch, groups)](
        ring_dt, ring_B, committed, flush_at, dt, A, B, C, bias_, idx_, coef, info,
        int(window), pad_slot_id, lo, hi,
        s_rdt_slot, s_rdt_head, s_rB_slot, s_rB_group, s_rB_j, s_dt_row, s_B_row, s_B_group, s_C_row, s_C_group,
        GROUPS=groups, HEADS_PER_GROUP=heads // groups, N=d_state, CAP=capacity,
        BLOCK_HG=triton.next_power_of_2(heads // groups), BLOCK_N=block_n, BLOCK_J=block_j,
        HAS_DT_BIAS=flags["HAS_DT_BIAS"], DT_SOFTPLUS=bool(dt_softplus), HAS_CLAMP=flags["HAS_CLAMP"],
        HAS_INDICES=flags["HAS_INDICES"], num_warps=cfg.ring_warps,
        **(dict(ring_x_ptr=ring_x, x_ptr=x, s_rx_slot=s_rx_slot, s_rx_head=s_rx_head, s_rx_j=s_rx_j, s_x_row=s_x_row,
                s_x_head=s_x_head, P=head_dim, BLOCK_P=triton.next_power_of_2(head_dim), RING_X=True)
           if ring_x_here else {}),
        **(dict(count_ptr=counter, ZERO_COUNT=True) if counter is not None else {}),
        **compact, DT_SECTOR=cfg.ring_dt_sector, s_rdt_j=s_rdt_j,
    )
    sms = _sm_count(x.device) if x.device.type == "cuda" else None
    flush_strides = (s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group,
                     s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head)

    per_program = flush_heads_per_program(heads // groups, cfg.flush_heads)
    # A partial last tile would prefetch past its head.
    prefetch = prefetch_mode(cfg.flush_l2_prefetch, x.device, cfg.flush_block_p * s_ck_p *
                             checkpoint.element_size()) if head_dim % cfg.flush_block_p == 0 else 0
    row_consts = dict(s_ck_p=s_ck_p, s_rx_j=s_rx_j, s_rB_j=s_rB_j, HEADS=heads, HEADS_PER_GROUP=heads // groups,
                      HEADS_PER_PROGRAM=per_program, P=head_dim, N=d_state, CAP=capacity, BLOCK_P=cfg.flush_block_p,
                      BLOCK_N=block_n, BLOCK_J=block_j, HAS_D=flags["HAS_D"], HAS_Z=flags["HAS_Z"],
                      HAS_INDICES=flags["HAS_INDICES"], FOLD=cfg.fold, STAGES=cfg.flush_stages, PREFETCH=prefetch,
                      AHEAD=cfg.flush_l2_ahead)

    def flush_rows():
        if ws_flush:
            flush_rows_ws(checkpoint, ring_x, ring_B, coef, info, x, B, C, D_ if flags["HAS_D"] else None,
                          z_ if flags["HAS_Z"] else None, idx_ if flags["HAS_INDICES"] else None, y, batch,
                          flush_strides, capacity, cfg.flush_ws_stages, counter, cfg.flush_ws_chunk,
                          cfg.flush_ws_order, cfg.flush_ws_max_stages, cfg.flush_ws_taper, cfg.flush_ws_l2_ahead,
                          cfg.flush_ws_consumers)
            return
        if cuda_flush:
            flush_rows_cuda(checkpoint, ring_x, ring_B, coef, info, x, B, C, D_ if flags["HAS_D"] else None,
                            z_ if flags["HAS_Z"] else None, idx_ if flags["HAS_INDICES"] else None, y, batch,
                            flush_strides, capacity, cfg.flush_cuda_blocks, cfg.flush_cuda_rows, per_program)
            return
        listed = cfg.flush_persistent and batch <= LIST_MAX_BATCH
        items = (ROW_GRID if not listed else LIST_HEADS if cfg.flush_list_items == "heads" else LIST_TILES)
        consts = dict(row_consts, ITEMS=items, BLOCK_B=triton.next_power_of_2(batch) if listed else 1)
        if items == ROW_GRID:
            grid, cap = (batch, heads // per_program), flush_register_cap(cfg, batch * (heads // per_program), sms)
        else:
            cap = flush_register_cap(cfg, None, sms)
            # What the wave's size is computed from: items per step when every row flushes.
            per_row = heads // per_program if items == LIST_HEADS else heads * triton.cdiv(head_dim, cfg.flush_block_p)
            work = batch * per_row
            key = launch_key("mamba2", (x.dtype, checkpoint.dtype, ring_x.dtype), cfg.flush_warps, cap, consts)
            grid = (list_grid(work, cfg.flush_persistent, x.device, key),)
        compiled = _flush_kernel[grid](
            checkpoint, ring_x, ring_B, coef, info, x, B, C, D_, z_, idx_, y,
            batch, pad_slot_id, *flush_strides, **consts, num_warps=cfg.flush_warps, maxnreg=cap,
        )
        if items != ROW_GRID:
            note_resident(key, compiled, x.device)

    # flush_stream: the flush launch on a side stream forked here, issued before the stream launch
    # so that it runs under it (disjoint rows); joined before returning. (Issued after it, on an
    # H200 the non-flush step took 1.2-1.8 us longer at Nemotron-H 256 and the all-flush step 15-17%
    # longer at 512: forty-fifth run.)
    side = fork(x.device) if cfg.flush_launch and cfg.flush_stream else None
    if side is not None:
        with torch.cuda.stream(side):
            flush_rows()
    tiles = triton.cdiv(head_dim, cfg.block_p)
    stream_args = (
        s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rB_slot, s_rB_group, s_rB_j,
        s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    )
    stream_consts = dict(
        HEADS=heads, HEADS_PER_GROUP=heads // groups, P=head_dim, N=d_state, CAP=capacity,
        BLOCK_P=cfg.block_p, BLOCK_N=block_n, BLOCK_J=block_j,
        HAS_D=flags["HAS_D"], HAS_Z=flags["HAS_Z"], HAS_INDICES=flags["HAS_INDICES"], FOLD=cfg.fold,
        RING_PREFETCH=cfg.ring_prefetch, RING_X_STORED=ring_x_here, num_warps=cfg.num_warps,
        maxnreg=cfg.max_registers,
        **(dict(compact, ring_dt_ptr=ring_dt, s_rdt_slot=s_rdt_slot, s_rdt_head=s_rdt_head, s_rdt_j=s_rdt_j)
           if compact else {}),
    )
    if cfg.stream_tiles > 1:  # LaunchConfig allows it only with flush_launch
        total = batch * heads * tiles
        _stream_walk[(triton.cdiv(total, cfg.stream_tiles),)](
            checkpoint, ring_x, ring_B, coef, info, committed, flush_at, x, B, C, D_, z_, idx_, y,
            int(window), pad_slot_id, total, *stream_args, TILES=tiles, WALK=cfg.stream_tiles, **stream_consts,
        )
    else:
        grid = (batch, heads, tiles) if cfg.rows_fastest else (tiles, heads, batch)
        _stream_kernel[grid](
            checkpoint, ring_x, ring_B, coef, info, committed, flush_at, x, B, C, D_, z_, idx_, y,
            int(window), pad_slot_id, *stream_args, ROWS_FASTEST=cfg.rows_fastest, FLUSH_HERE=not cfg.flush_launch,
            **stream_consts,
        )
    if side is not None:
        join(side, x.device)
    elif cfg.flush_launch:
        flush_rows()
    return y
