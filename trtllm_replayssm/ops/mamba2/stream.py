"""The stream launch of the two-launch Mamba-2 step (``decode_staged.py``): the programs that read
the checkpoint tile by tile and form ``y`` from it and the ring terms the ring launch left.

``_stream_kernel`` is a grid of one program per ``(head_dim tile, head, row)``;
``_stream_walk`` (``LaunchConfig.stream_tiles > 1``) a grid of programs that each walk
``stream_tiles`` tiles, strided by the grid, and store the rows of ``y`` of all of them after the
last one's reads. Stores among a stream of reads cost more than their bytes: in
``benchmarks/probe_memory_rates.py`` on an H200, one fp32 sum stored per 128 floats read took a
1 GiB read from 241-244 to 254-258 us as a grid, and 251-252 us as one wave of looping blocks
that kept their sums until their last pass (NOTES_mamba2.md, thirty-seventh run). ``_stream_tile``
is one tile's work for both; ``_fold_ring`` the fold of a tile that flushes here (and in the
flush launch's programs).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._tf32 import fp32_dot
from .decode import _mixer_gate, _mixer_output, _program_ids, _slot_of, _tile_lanes

__all__ = ["_fold_ring", "_ring_B_tile", "_stream_kernel", "_stream_walk"]


@triton.jit
def _fold_ring(upd, c, line, rx, lead, rx_base, rB_base, s_rx_j, s_rB_j, offs_p, offs_n, offs_j, in_ring, mask_p, mask_n,
               P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr, FOLD: tl.constexpr):
    """``upd + sum_{j<c} w_j x_j B_j^T`` in fp32 for one ``[BLOCK_P, d_state]`` tile (``lead`` and
    ``line`` hold the weights ``w_j``, ``rx`` the tile's ring ``x`` zeroed past ``c``)."""
    if FOLD == "fma":
        # Every entry's loads (L1/L2 hits: the rx tile fetched the same lines) issue at once.
        for j in tl.static_range(CAP):
            take = j < c
            w_j = tl.load(line + j)
            x_j = tl.load(rx_base + j * s_rx_j + offs_p, mask=offs_p < tl.where(take, P, 0), other=0.0)
            B_j = tl.load(rB_base + j * s_rB_j + offs_n, mask=offs_n < tl.where(take, N, 0), other=0.0)
            upd += (w_j * x_j.to(tl.float32))[:, None] * B_j.to(tl.float32)[None, :]
    elif FOLD == "loop":
        # Rolled (few registers), with the next entry's loads in flight during this one's FMAs.
        w_j = tl.load(line)
        x_j = tl.load(rx_base + offs_p, mask=offs_p < tl.where(c > 0, P, 0), other=0.0)
        B_j = tl.load(rB_base + offs_n, mask=offs_n < tl.where(c > 0, N, 0), other=0.0)
        for j in range(0, c):
            more = j + 1 < c
            w_n = tl.load(line + j + 1)
            x_n = tl.load(rx_base + (j + 1) * s_rx_j + offs_p, mask=offs_p < tl.where(more, P, 0), other=0.0)
            B_n = tl.load(rB_base + (j + 1) * s_rB_j + offs_n, mask=offs_n < tl.where(more, N, 0), other=0.0)
            upd += (w_j * x_j.to(tl.float32))[:, None] * B_j.to(tl.float32)[None, :]
            w_j, x_j, B_j = w_n, x_n, B_n
    elif FOLD == "pipe":
        # Rolled, with Triton's software pipeliner keeping later entries' loads in flight.
        for j in tl.range(0, c, num_stages=3):
            w_j = tl.load(line + j)
            x_j = tl.load(rx_base + j * s_rx_j + offs_p, mask=mask_p, other=0.0)
            B_j = tl.load(rB_base + j * s_rB_j + offs_n, mask=mask_n, other=0.0)
            upd += (w_j * x_j.to(tl.float32))[:, None] * B_j.to(tl.float32)[None, :]
    else:
        rB = _ring_B_tile(rB_base, offs_j, offs_n, in_ring, mask_n, s_rB_j, CAP)
        upd = fp32_dot(rx * lead[None, :], rB, upd, rB_base, FOLD)
    return upd


@triton.jit
def _ring_B_tile(rB_base, offs_j, offs_n, in_ring, mask_n, s_rB_j, CAP: tl.constexpr):
    """The group's ring ``B`` ``[BLOCK_J, BLOCK_N]`` in fp32, zeroed past ``c`` in registers
    (every entry loaded, so the load waits for no cursor; NaN-safe)."""
    rB = tl.load(rB_base + offs_j[:, None] * s_rB_j + offs_n[None, :],
                 mask=(offs_j < CAP)[:, None] & mask_n[None, :], other=0.0)
    return tl.where(in_ring[:, None], rB.to(tl.float32), 0.0)


@triton.jit
def _stream_tile(
    ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, committed_ptr, flush_at_ptr, x_ptr, B_ptr, C_ptr, D_ptr, z_ptr,
    window, row, h, g, slot, live, c, is_flush, offs_p, offs_n, offs_j, mask_p, mask_n,
    s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rB_slot, s_rB_group, s_rB_j,
    s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head,
    ring_dt_ptr, terms_ptr, scores_ptr, s_rdt_slot, s_rdt_head, s_rdt_j,
    HEADS: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
    BLOCK_J: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FOLD: tl.constexpr, RING_PREFETCH: tl.constexpr,
    FLUSH_HERE: tl.constexpr, RING_X_STORED: tl.constexpr, COMPACT: tl.constexpr, first_tile,
):
    """One checkpoint tile of the stream launch (``_stream_kernel``'s program, ``_stream_walk``'s
    iteration): its rows of ``y`` ``[BLOCK_P]`` fp32 (0 for a padded row), the ring entry and the
    row's cursors stored (``first_tile``: the row's tile that moves them)."""
    live_p = offs_p < tl.where(live, P, 0)
    ck_ptrs = ckpt_ptr + slot * s_ck_slot + h * s_ck_head + offs_p[:, None] * s_ck_p + offs_n[None, :]
    # The checkpoint tile is the only large transfer: first, so everything else overlaps it.
    S = tl.load(ck_ptrs, mask=live_p[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
    d_h, zv = _mixer_gate(h, row, offs_p, mask_p, D_ptr, z_ptr, s_z_row, s_z_head, HAS_D, HAS_Z)

    line = coef_ptr + (row * HEADS + h) * (CAP + 2)
    in_ring = offs_j < c
    if COMPACT:
        # w_j = exp(A (G_t - G_j)) dt_j as the ring launch forms it, from this head's ring dt.
        terms = terms_ptr + (row * HEADS + h) * 4
        total = tl.load(terms)
        gamma = tl.load(terms + 1)
        last = tl.load(terms + 2)
        A_h = tl.load(terms + 3)
        rdt = tl.load(ring_dt_ptr + slot * s_rdt_slot + h * s_rdt_head + offs_j * s_rdt_j, mask=in_ring, other=0.0)
        score = tl.load(scores_ptr + (row * (HEADS // HEADS_PER_GROUP) + g) * BLOCK_J + offs_j, mask=in_ring,
                        other=0.0)
        lead = tl.where(in_ring, tl.exp(A_h * (total - tl.cumsum(rdt, axis=0))) * rdt * score, 0.0)
    else:
        lead = tl.load(line + offs_j, mask=offs_j < CAP, other=0.0)
        gamma = tl.load(line + CAP)
        last = tl.load(line + CAP + 1)
    x = tl.load(x_ptr + row * s_x_row + h * s_x_head + offs_p, mask=mask_p, other=0.0)
    Cv = tl.load(C_ptr + row * s_C_row + g * s_C_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    rx_base = ring_x_ptr + slot * s_rx_slot + h * s_rx_head
    rB_base = ring_B_ptr + slot * s_rB_slot + g * s_rB_group
    if RING_PREFETCH:
        # Every entry, without waiting for c (one latency less, up to 2x the ring bytes);
        # entries past c are zeroed after the fact (NaN-safe, unlike a zero coefficient).
        rx = tl.load(rx_base + offs_j[None, :] * s_rx_j + offs_p[:, None],
                     mask=live_p[:, None] & (offs_j < CAP)[None, :], other=0.0)
        rx = tl.where(in_ring[None, :], rx.to(tl.float32), 0.0)
    else:
        rx = tl.load(rx_base + offs_j[None, :] * s_rx_j + offs_p[:, None], mask=live_p[:, None] & in_ring[None, :],
                     other=0.0).to(tl.float32)
    xf = x.to(tl.float32)
    if is_flush & FLUSH_HERE:
        Bv = tl.load(B_ptr + row * s_B_row + g * s_B_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)
        upd = gamma * S + (last * xf)[:, None] * Bv[None, :]
        upd = _fold_ring(upd, c, line, rx, lead, rx_base, rB_base, s_rx_j, s_rB_j, offs_p, offs_n, offs_j, in_ring,
                         mask_p, mask_n, P, N, CAP, FOLD)
        tl.store(ck_ptrs, upd.to(ckpt_ptr.dtype.element_ty), mask=live_p[:, None] & mask_n[None, :])
        y = tl.sum(upd * Cv[None, :], axis=1)
    else:
        y = gamma * tl.sum(S * Cv[None, :], axis=1) + tl.sum(rx * lead[None, :], axis=1) + last * xf
        if not RING_X_STORED:
            # The token's ring entry (entry c is not read by this step).
            tl.store(rx_base + c * s_rx_j + offs_p, x, mask=offs_p < tl.where(live & (c < CAP), P, 0))
    # The row's cursors: every ring program read `committed`, nothing here does.
    if live & first_tile:
        tl.store(committed_ptr + slot, tl.where(is_flush, 0, c + 1))
        if is_flush:
            tl.store(flush_at_ptr + slot, window)
    y = _mixer_output(y, xf, d_h, zv, HAS_D, HAS_Z)
    y = tl.where(live, y, 0.0)
    return y


@triton.jit
def _stream_kernel(
    ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, info_ptr, committed_ptr, flush_at_ptr,
    x_ptr, B_ptr, C_ptr, D_ptr, z_ptr, idx_ptr, y_ptr,
    window, pad_slot_id,
    s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rB_slot, s_rB_group, s_rB_j,
    s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    HEADS: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_INDICES: tl.constexpr, FOLD: tl.constexpr,
    ROWS_FASTEST: tl.constexpr, RING_PREFETCH: tl.constexpr, FLUSH_HERE: tl.constexpr,
    RING_X_STORED: tl.constexpr = False,
    ring_dt_ptr=None, terms_ptr=None, scores_ptr=None, s_rdt_slot=0, s_rdt_head=0, COMPACT: tl.constexpr = False,
    s_rdt_j: tl.constexpr = 1,
):
    # RING_X_STORED: the ring launch wrote the token's ring x entry (LaunchConfig.ring_x_in_ring).
    # COMPACT: the ring launch wrote the row's scores and head terms, not its line (compact_coef).
    row, h, pid_p = _program_ids(ROWS_FASTEST)
    g = h // HEADS_PER_GROUP
    offs_p, offs_n, offs_j, mask_p, mask_n = _tile_lanes(pid_p, P, N, BLOCK_P, BLOCK_N, BLOCK_J)
    slot, live = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)
    c = tl.load(info_ptr + 2 * row)
    flag = tl.load(info_ptr + 2 * row + 1)
    is_flush = flag != 0
    if not FLUSH_HERE:
        # Flush rows belong to the flush launch: their programs only move the cursors and exit
        # (in a step where every row flushes, going on to masked loads cost 166 us of 1000 at
        # batch 256 on an H200). The flag is indexed by row, so its load runs alongside the
        # slot's and the checkpoint load waits for no extra latency.
        if live & is_flush:
            if (h == 0) & (pid_p == 0):
                tl.store(committed_ptr + slot, 0)
                tl.store(flush_at_ptr + slot, window)
            return
    y = _stream_tile(
        ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, committed_ptr, flush_at_ptr, x_ptr, B_ptr, C_ptr, D_ptr, z_ptr,
        window, row, h, g, slot, live, c, is_flush, offs_p, offs_n, offs_j, mask_p, mask_n,
        s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rB_slot, s_rB_group, s_rB_j,
        s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head,
        ring_dt_ptr, terms_ptr, scores_ptr, s_rdt_slot, s_rdt_head, s_rdt_j,
        HEADS, HEADS_PER_GROUP, P, N, CAP, BLOCK_J, HAS_D, HAS_Z, FOLD, RING_PREFETCH, FLUSH_HERE, RING_X_STORED,
        COMPACT, (h == 0) & (pid_p == 0),
    )
    tl.store(y_ptr + row * s_y_row + h * s_y_head + offs_p, y.to(y_ptr.dtype.element_ty),
             mask=mask_p)


@triton.jit
def _stream_walk(
    ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, info_ptr, committed_ptr, flush_at_ptr,
    x_ptr, B_ptr, C_ptr, D_ptr, z_ptr, idx_ptr, y_ptr,
    window, pad_slot_id, total_tiles,
    s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rB_slot, s_rB_group, s_rB_j,
    s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    HEADS: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_INDICES: tl.constexpr, FOLD: tl.constexpr,
    RING_PREFETCH: tl.constexpr, RING_X_STORED: tl.constexpr, TILES: tl.constexpr, WALK: tl.constexpr,
    ring_dt_ptr=None, terms_ptr=None, scores_ptr=None, s_rdt_slot=0, s_rdt_head=0, COMPACT: tl.constexpr = False,
    s_rdt_j: tl.constexpr = 1,
):
    """``_stream_kernel``'s tiles (numbered in its grid order: ``head_dim`` tile fastest, then
    head, then row; ``TILES`` tiles a head, ``total_tiles`` in all), ``WALK`` a program: tile
    ``pid + i * programs`` in step ``i``. Flush rows belong to the flush launch (the stream
    launch then compiles without the fold): their tiles only move the cursors and store no ``y``.
    The ``y`` rows of the program's tiles are kept in registers (``[WALK, BLOCK_P]`` fp32) and
    stored together after its last tile."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs_n = tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_J)
    mask_n = offs_n < N
    steps = tl.arange(0, WALK)
    offs_b = tl.arange(0, BLOCK_P)
    y_all = tl.zeros([WALK, BLOCK_P], dtype=tl.float32)
    stored = steps < 0
    for i in range(WALK):
        t = pid + i * programs
        if t < total_tiles:
            pid_p = t % TILES
            h = (t // TILES) % HEADS
            row = (t // (TILES * HEADS)).to(tl.int64)
            g = h // HEADS_PER_GROUP
            offs_p = pid_p * BLOCK_P + offs_b
            mask_p = offs_p < P
            slot, live = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)
            c = tl.load(info_ptr + 2 * row)
            is_flush = tl.load(info_ptr + 2 * row + 1) != 0
            if live & is_flush:
                if (h == 0) & (pid_p == 0):
                    tl.store(committed_ptr + slot, 0)
                    tl.store(flush_at_ptr + slot, window)
            else:
                y = _stream_tile(
                    ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, committed_ptr, flush_at_ptr, x_ptr, B_ptr, C_ptr,
                    D_ptr, z_ptr, window, row, h, g, slot, live, c, is_flush, offs_p, offs_n, offs_j, mask_p,
                    mask_n, s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rB_slot, s_rB_group,
                    s_rB_j, s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head,
                    ring_dt_ptr, terms_ptr, scores_ptr, s_rdt_slot, s_rdt_head, s_rdt_j,
                    HEADS, HEADS_PER_GROUP, P, N, CAP, BLOCK_J, HAS_D, HAS_Z, FOLD, RING_PREFETCH, False,
                    RING_X_STORED, COMPACT, (h == 0) & (pid_p == 0),
                )
                here = steps == i
                y_all = tl.where(here[:, None], y[None, :], y_all)
                stored = stored | here
    t_all = (pid + steps * programs).to(tl.int64)
    rows = t_all // (TILES * HEADS)
    heads = (t_all // TILES) % HEADS
    p_all = (t_all % TILES) * BLOCK_P
    y_ptrs = y_ptr + rows[:, None] * s_y_row + heads[:, None] * s_y_head + p_all[:, None] + offs_b[None, :]
    tl.store(y_ptrs, y_all.to(y_ptr.dtype.element_ty), mask=stored[:, None] & (p_all[:, None] + offs_b[None, :] < P))
