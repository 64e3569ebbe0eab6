"""The streaming ReplaySSM step for Mamba-2 (``LaunchConfig(kernel="v4")``): one program per
``(row, head, head_dim part)`` that loops over the part's checkpoint tiles.

The per-tile kernel of ``decode.py`` gives every ``[BLOCK_P, d_state]`` tile its own program,
and each such program redoes the ring work (ring loads, decays, ``B_j . C`` scores, layout
conversions) for 16 KB of checkpoint. Here the ring work is done once per program and the
program then streams ``BLOCKS`` checkpoint tiles with the next ones' loads in flight:

- ring terms, once per program: with ``G`` the cumulative ``dt A`` up to the current token
  ``t`` and ``c`` the committed entries,
  ``y_ring[p] = sum_{j<c} coef_j x_j[p] + dt_t (B_t . C_t) x_t[p]``,
  ``coef_j = exp(G_t - G_j) dt_j (B_j . C_t)``, and the checkpoint's decay ``Gamma = exp(G_t)``;
  the ring ``x`` tile is loaded as ``[BLOCK_P, J]`` so that its reduction over ``J`` lands on
  the rows of the checkpoint tile (only ``[BLOCK_P]`` / ``[J]`` vectors change layout);
- every load that does not depend on ``committed`` (checkpoint tiles, the whole ring with its
  masked tail, the token's inputs) is issued before the first arithmetic;
- a flush folds each tile in the same loop, ``S_new = Gamma S_c + (x^T w) B`` as a
  ``[BLOCK_P, J] x [J, d_state]`` product in fp32 (``fold``: unrolled FMAs, or ``tl.dot`` with
  ``input_precision="ieee"`` or ``"tf32x3"``), and ``y = S_new C``.

Pipelining (``pipeline``): ``"regs"`` unrolls the tile loop and issues the loads of the next
``ahead`` tiles before the current tile's arithmetic (the values wait in registers);
``"range"`` is a ``tl.range`` loop that Triton's software pipeliner stages through shared
memory (``num_stages``); ``"cols"`` gives each program one ``[block_p, d_state]`` tile and walks
it in 32-column chunks through a ``num_stages`` pipeline with the ring's loads in flight, the
chunk products summed in-thread, a flush row reading its chunks again (L2 hits) to fold each with
a ``tl.dot`` fold (the form with which Gated DeltaNet's one-launch step overtook its staged step,
``ops/gdn/decode_fused.py``; at Nemotron-H dims, 64-row programs of one warp compile to 240
registers on sm_90, no spills; on an H200 it lost to the staged step, non-flush 282.9-306.0
against 275.7-278.9 us and flush 665-765 against 613-616 us at batch 256: NOTES_mamba2.md,
twenty-first run). ``p_split`` programs share one head's rows: 1 for large batches
(fewer, longer programs), 2-4 at batch 1 to fill the SMs. ``split_flush`` serves the non-flush
rows (and appends every row's token) in one launch and folds the flush rows in a second, each
compiled with only its own path: the fold's registers and shared memory then no longer lower
the occupancy of non-flush steps, at the price of tile loads that wait for ``committed`` and a
second launch whose non-flush programs exit at once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._chunk_sums import chunk_partials
from .._tf32 import fp32_dot
from .decode import (_append_dt_B, _arrivals, _common, _fold_unrolled, _move_cursors, _program_ids, _slot_of,
                     _softplus_clamp, _state_strides)

__all__ = ["replay_step_v4"]


@triton.jit
def _load_tile(ck_base, rx_base, x_row, z_row, blk, live_rows, y_rows, s_ck_p, s_rx_j,
               P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
               BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr, HAS_Z: tl.constexpr):
    """The loads of checkpoint tile ``blk``: ``S [BLOCK_P, N]``, ring ``x [BLOCK_P, J]`` (every
    entry: the committed ones are only known later), the token's ``x`` and ``z`` rows."""
    offs_p = blk * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    rows = offs_p < live_rows
    S = tl.load(ck_base + offs_p[:, None] * s_ck_p + offs_n[None, :], mask=rows[:, None] & (offs_n < N)[None, :], other=0.0)
    # Every entry: the committed ones are only known later.
    rx, xb, zb = _load_rows(rx_base, x_row, z_row, offs_p, rows, y_rows, s_rx_j, CAP, BLOCK_J, HAS_Z)
    return S, rx, xb, zb


@triton.jit
def _load_rows(rx_base, x_row, z_row, offs_p, rows, y_rows, s_rx_j, entries, BLOCK_J: tl.constexpr,
               HAS_Z: tl.constexpr):
    """A tile's ring ``x [BLOCK_P, J]`` (its first ``entries``, zeros after) and the token's ``x``
    and ``z`` rows."""
    offs_j = tl.arange(0, BLOCK_J)
    rx = tl.load(rx_base + offs_j[None, :] * s_rx_j + offs_p[:, None], mask=rows[:, None] & (offs_j < entries)[None, :],
                 other=0.0)
    xb = tl.load(x_row + offs_p, mask=offs_p < y_rows, other=0.0)
    if HAS_Z:
        zb = tl.load(z_row + offs_p, mask=offs_p < y_rows, other=0.0)
    else:
        zb = xb
    return rx, xb, zb


@triton.jit
def _fold_tile(S, x, offs_p, offs_n, c, in_ring, w, gamma, total, dt, A, Bv, Cv, rB,
               ck_base, rdt_base, rx_base, rB_base, rx, s_ck_p, s_rx_j, s_rB_j, tile_rows,
               P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr, FOLD: tl.constexpr, s_rdt_j: tl.constexpr):
    """Fold the ring into checkpoint tile ``S``, store it, return its output rows ``S_new C``."""
    # Rank-1 term of the current token first: its x and B are in registers.
    upd = gamma * S + (dt * x)[:, None] * Bv[None, :]
    if FOLD == "fma":
        # Every entry's loads (L1/L2 hits: the tile loads fetched the same lines) issue at once.
        upd = _fold_unrolled(upd, c, total, A, rdt_base, rx_base, rB_base, s_rx_j, s_rB_j, offs_p, offs_n, P, N, CAP,
                             s_rdt_j)
    elif FOLD == "loop":
        # The same updates in a rolled loop over the committed entries: fewer registers
        # (the fold's registers count against every step's occupancy), one latency per entry.
        prefix = 0.0
        for j in range(0, tl.minimum(c, CAP)):
            dt_j = tl.load(rdt_base + j * s_rdt_j)
            prefix += dt_j
            w_j = tl.exp(A * (total - prefix)) * dt_j
            x_j = tl.load(rx_base + j * s_rx_j + offs_p, mask=offs_p < P, other=0.0)
            B_j = tl.load(rB_base + j * s_rB_j + offs_n, mask=offs_n < N, other=0.0)
            upd += (w_j * x_j.to(tl.float32))[:, None] * B_j.to(tl.float32)[None, :]
    else:
        xw = tl.where(in_ring[None, :], rx.to(tl.float32), 0.0) * w[None, :]
        upd = fp32_dot(xw, rB, upd, rB_base, FOLD)
    tl.store(ck_base + offs_p[:, None] * s_ck_p + offs_n[None, :], upd.to(ck_base.dtype.element_ty),
             mask=(offs_p < tile_rows)[:, None] & (offs_n < N)[None, :])
    return tl.sum(upd * Cv[None, :], axis=1)


@triton.jit
def _tile_step(S, rx, xb, zb, blk, is_flush, live, c, in_ring, coef, coef_now, w, gamma, total, dt, A, D, Bv, Cv, rB,
               ck_base, rdt_base, rx_base, rB_base, y_row, s_ck_p, s_rx_j, s_rB_j, tile_rows, y_rows,
               P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
               BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
               HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FOLD: tl.constexpr, ROWS: tl.constexpr,
               s_rdt_j: tl.constexpr):
    """Output rows of tile ``blk`` and, on a flush, its folded checkpoint. ``ROWS`` ("all",
    "nonflush", "flush") says which rows this launch serves: a launch of one kind compiles
    only that path."""
    offs_p = blk * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    x = xb.to(tl.float32)
    S = S.to(tl.float32)
    if ROWS == "flush":
        # Rows that do not flush run no fold iterations (their loads are masked off already).
        y = _fold_tile(S, x, offs_p, offs_n, tl.where(is_flush, c, 0), in_ring, w, gamma, total, dt, A, Bv, Cv, rB, ck_base, rdt_base,
                       rx_base, rB_base, rx, s_ck_p, s_rx_j, s_rB_j, tile_rows, P, N, CAP, FOLD, s_rdt_j)
    elif ROWS == "nonflush":
        ring = tl.sum(tl.where(in_ring[None, :], rx.to(tl.float32), 0.0) * coef[None, :], axis=1)
        y = gamma * tl.sum(S * Cv[None, :], axis=1) + ring + coef_now * x
    else:
        if is_flush:
            y = _fold_tile(S, x, offs_p, offs_n, c, in_ring, w, gamma, total, dt, A, Bv, Cv, rB, ck_base, rdt_base,
                           rx_base, rB_base, rx, s_ck_p, s_rx_j, s_rB_j, tile_rows, P, N, CAP, FOLD, s_rdt_j)
        else:
            ring = tl.sum(tl.where(in_ring[None, :], rx.to(tl.float32), 0.0) * coef[None, :], axis=1)
            y = gamma * tl.sum(S * Cv[None, :], axis=1) + ring + coef_now * x
    _finish_rows(y, x, zb, D, live, y_row, offs_p, y_rows, HAS_D, HAS_Z)


@triton.jit
def _finish_rows(y, x, zb, D, live, y_row, offs_p, y_rows, HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """Store output rows ``offs_p``: ``y + D x``, gated by ``z silu(z)``, zero for a padded row."""
    if HAS_D:
        y += D * x
    if HAS_Z:
        zv = zb.to(tl.float32)
        y = y * zv * tl.sigmoid(zv)
    y = tl.where(live, y, 0.0)
    tl.store(y_row + offs_p, y.to(y_row.dtype.element_ty), mask=offs_p < y_rows)


@triton.jit
def _cols_tile(ck_base, rx_base, rB_base, x_row, z_row, y_row, C_row, B_row, first, tile_rows, y_rows, live,
               c, is_flush, in_ring, coef, coef_now, w, gamma, dt, D, s_ck_p, s_rx_j, s_rB_j,
               N: tl.constexpr, CAP: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_J: tl.constexpr, KC: tl.constexpr, NUM_STAGES: tl.constexpr,
               HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FOLD: tl.constexpr):
    """``pipeline="cols"``: the program's one ``[BLOCK_P, N]`` tile walked in ``KC``-column chunks
    through a ``NUM_STAGES`` pipeline (the ring's loads already in flight): ``S C_t`` summed four
    columns at a time in-thread, reduced across lanes once; ``y = Gamma S C + ring + coef_now x``
    (for a flush row too: ``S_new C`` is the same sum). A flush row then reads its chunks again
    (L2 hits) and folds each, ``Gamma S + dt x B_t^T + (x w)^T B_ring``, so no registers hold the
    tile across the reduction."""
    offs_p = first * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_j = tl.arange(0, BLOCK_J)
    o_kc = tl.arange(0, KC)
    rows = offs_p < tile_rows
    # The committed entries only: the whole ring costs ~1 us of an H200 step per entry (batch 256).
    rx, xb, zb = _load_rows(rx_base, x_row, z_row, offs_p, rows, y_rows, s_rx_j, c, BLOCK_J, HAS_Z)
    sums = tl.zeros([BLOCK_P, KC // 4], dtype=tl.float32)
    for jn in tl.range(0, BLOCK_N // KC, num_stages=NUM_STAGES):
        cols = jn * KC + o_kc
        Sj = tl.load(ck_base + offs_p[:, None] * s_ck_p + cols[None, :], mask=rows[:, None] & (cols < N)[None, :],
                     other=0.0).to(tl.float32)
        Cj = tl.load(C_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        sums += chunk_partials(Sj, Cj, BLOCK_P, KC)
    x = xb.to(tl.float32)
    xr = tl.where(in_ring[None, :], rx.to(tl.float32), 0.0)
    y = gamma * tl.sum(sums, axis=1) + tl.sum(xr * coef[None, :], axis=1) + coef_now * x
    if is_flush:
        xw = xr * w[None, :]
        for jf in tl.range(0, BLOCK_N // KC, num_stages=NUM_STAGES):
            cols = jf * KC + o_kc
            ptrs = ck_base + offs_p[:, None] * s_ck_p + cols[None, :]
            tile = rows[:, None] & (cols < N)[None, :]
            Bt = tl.load(B_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            rBj = tl.load(rB_base + offs_j[:, None] * s_rB_j + cols[None, :],
                          mask=in_ring[:, None] & (cols < N)[None, :], other=0.0).to(tl.float32)
            upd = gamma * tl.load(ptrs, mask=tile, other=0.0).to(tl.float32) + (dt * x)[:, None] * Bt[None, :]
            upd = fp32_dot(xw, rBj, upd, rB_base, FOLD)
            tl.store(ptrs, upd.to(ck_base.dtype.element_ty), mask=tile)
    _finish_rows(y, x, zb, D, live, y_row, offs_p, y_rows, HAS_D, HAS_Z)


@triton.jit
def _replay_v4_kernel(
    ckpt_ptr, ring_x_ptr, ring_dt_ptr, ring_B_ptr, committed_ptr, flush_at_ptr, arrivals_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, idx_ptr, y_ptr,
    window, pad_slot_id, dt_min, dt_max,
    s_ck_slot, s_ck_head, s_ck_p,
    s_rx_slot, s_rx_head, s_rx_j, s_rdt_slot, s_rdt_head, s_rB_slot, s_rB_group, s_rB_j,
    s_x_row, s_x_head, s_dt_row, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    HEADS_PER_GROUP: tl.constexpr, P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr, BLOCKS: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
    HAS_CLAMP: tl.constexpr, HAS_INDICES: tl.constexpr, FOLD: tl.constexpr, PIPELINE: tl.constexpr,
    AHEAD: tl.constexpr, NUM_STAGES: tl.constexpr, CURSOR_KERNEL: tl.constexpr, ROWS_FASTEST: tl.constexpr,
    ROWS: tl.constexpr, KC: tl.constexpr, s_rdt_j: tl.constexpr = 1,
):
    row, h, part = _program_ids(ROWS_FASTEST)
    g = h // HEADS_PER_GROUP
    first = part * BLOCKS  # this program's tiles: first .. first + BLOCKS - 1 (past P: masked)
    offs_n = tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_J)
    mask_n = offs_n < N
    slot, live = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)
    live_rows = tl.where(live, P, 0)  # rows below this bound are read and written
    ck_base = ckpt_ptr + slot * s_ck_slot + h * s_ck_head
    rx_base = ring_x_ptr + slot * s_rx_slot + h * s_rx_head
    rdt_base = ring_dt_ptr + slot * s_rdt_slot + h * s_rdt_head
    rB_base = ring_B_ptr + slot * s_rB_slot + g * s_rB_group
    x_row = x_ptr + row * s_x_row + h * s_x_head
    z_row = z_ptr + row * s_z_row + h * s_z_head
    y_row = y_ptr + row * s_y_row + h * s_y_head

    # Loads that do not wait for `committed`, largest first: the first checkpoint tiles, then
    # the whole ring (entries past `c` are masked after the fact) and the token's inputs. A
    # launch for one kind of rows ("nonflush" / "flush") can only load tiles once `c` tells
    # which kind its row is.
    if ROWS == "all":
        tile_rows = live_rows
        y_rows = P
    else:
        c = tl.where(live, tl.load(committed_ptr + slot), 0)
        flush_at = tl.load(flush_at_ptr + slot)
        is_flush = c + 1 >= tl.where(live, flush_at, CAP + 1)
        # Padded rows get their zero output from the non-flush launch.
        if ROWS == "flush":
            tile_rows = tl.where(is_flush, live_rows, 0)
            y_rows = tl.where(is_flush, P, 0)
        else:
            tile_rows = tl.where(is_flush, 0, live_rows)
            y_rows = tl.where(is_flush, 0, P)
    if PIPELINE == "regs":
        S0, rx0, x0, z0 = _load_tile(ck_base, rx_base, x_row, z_row, first, tile_rows, y_rows, s_ck_p, s_rx_j,
                                     P, N, CAP, BLOCK_P, BLOCK_N, BLOCK_J, HAS_Z)
        if AHEAD >= 2:
            if BLOCKS > 1:
                S1, rx1, x1, z1 = _load_tile(ck_base, rx_base, x_row, z_row, first + 1, tile_rows, y_rows, s_ck_p,
                                             s_rx_j, P, N, CAP, BLOCK_P, BLOCK_N, BLOCK_J, HAS_Z)
    if ROWS == "all":
        c = tl.where(live, tl.load(committed_ptr + slot), 0)
        flush_at = tl.load(flush_at_ptr + slot)
        is_flush = c + 1 >= tl.where(live, flush_at, CAP + 1)
    if PIPELINE == "cols":
        # No tile load goes out before the cursor's here: the ring is read up to c only (the
        # whole ring cost the c = 0 step 23 us of 295 on an H200 at batch 256).
        ring_live = offs_j < tl.where(tile_rows > 0, c, 0)
    else:
        ring_live = offs_j < tl.where(tile_rows > 0, CAP, 0)
    rdt_all = tl.load(rdt_base + offs_j * s_rdt_j, mask=ring_live, other=0.0)
    rB_all = tl.load(rB_base + offs_j[:, None] * s_rB_j + offs_n[None, :], mask=ring_live[:, None] & mask_n[None, :],
                     other=0.0)
    dt = tl.load(dt_ptr + row * s_dt_row + h).to(tl.float32)
    A = tl.load(A_ptr + h).to(tl.float32)
    B_raw = tl.load(B_ptr + row * s_B_row + g * s_B_group + offs_n, mask=mask_n, other=0.0)
    Cv = tl.load(C_ptr + row * s_C_row + g * s_C_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    if HAS_D:
        D = tl.load(D_ptr + h).to(tl.float32)
    else:
        D = 0.0
    dt = _softplus_clamp(dt, h, HAS_DT_BIAS, dt_bias_ptr, DT_SOFTPLUS, HAS_CLAMP, dt_min, dt_max)
    Bv = B_raw.to(tl.float32)

    # Append the token at ring position c (entry c is never read back in this launch: other
    # programs of the slot may not have written it yet). The flush launch of a split step
    # runs after the non-flush launch has appended it.
    if ROWS != "flush":
        fits = tl.where(live, c < CAP, False)
        for i in tl.static_range(BLOCKS):
            offs_p = (first + i) * BLOCK_P + tl.arange(0, BLOCK_P)
            xa = tl.load(x_row + offs_p, mask=offs_p < P, other=0.0)
            tl.store(rx_base + c * s_rx_j + offs_p, xa, mask=offs_p < tl.where(fits, P, 0))
        _append_dt_B(fits, part, h, HEADS_PER_GROUP, rdt_base, rB_base, c, s_rB_j, dt, B_raw, offs_n, mask_n,
                     s_rdt_j)
    if not CURSOR_KERNEL:
        # Counted once every warp has used c and flush_at (the stores above depend on them):
        # the last program of the slot then moves the cursors (see decode.py).
        tl.debug_barrier()
        increment = tl.where(live, tl.where(c + flush_at >= -(2**30), 1, 0), 0)
        arrived = tl.atomic_add(arrivals_ptr + slot, increment, sem="relaxed")

    # Ring terms, once per program.
    in_ring = offs_j < c
    rdt = tl.where(in_ring, rdt_all, 0.0)
    total = tl.sum(rdt, axis=0) + dt
    w = tl.where(in_ring, tl.exp(A * (total - tl.cumsum(rdt, axis=0))) * rdt, 0.0)
    rB = tl.where(in_ring[:, None], rB_all.to(tl.float32), 0.0)
    coef = w * tl.sum(rB * Cv[None, :], axis=1)
    coef_now = dt * tl.sum(Bv * Cv, axis=0)
    gamma = tl.exp(A * total)

    if PIPELINE == "regs":
        for i in tl.static_range(BLOCKS):
            S, rx, xb, zb = S0, rx0, x0, z0
            # Next tiles' loads go out before this tile's arithmetic.
            if AHEAD >= 2:
                if i + 1 < BLOCKS:
                    S0, rx0, x0, z0 = S1, rx1, x1, z1
                if i + 2 < BLOCKS:
                    S1, rx1, x1, z1 = _load_tile(ck_base, rx_base, x_row, z_row, first + i + 2, tile_rows, y_rows, s_ck_p,
                                                 s_rx_j, P, N, CAP, BLOCK_P, BLOCK_N, BLOCK_J, HAS_Z)
            else:
                if i + 1 < BLOCKS:
                    S0, rx0, x0, z0 = _load_tile(ck_base, rx_base, x_row, z_row, first + i + 1, tile_rows, y_rows, s_ck_p,
                                                 s_rx_j, P, N, CAP, BLOCK_P, BLOCK_N, BLOCK_J, HAS_Z)
            _tile_step(S, rx, xb, zb, first + i, is_flush, live, c, in_ring, coef, coef_now, w, gamma, total, dt, A,
                       D, Bv, Cv, rB, ck_base, rdt_base, rx_base, rB_base, y_row, s_ck_p, s_rx_j, s_rB_j, tile_rows,
                       y_rows, P, N, CAP, BLOCK_P, BLOCK_N, HAS_D, HAS_Z, FOLD, ROWS, s_rdt_j)
    elif PIPELINE == "range":
        for i in tl.range(0, BLOCKS, num_stages=NUM_STAGES):
            S, rx, xb, zb = _load_tile(ck_base, rx_base, x_row, z_row, first + i, tile_rows, y_rows, s_ck_p, s_rx_j,
                                       P, N, CAP, BLOCK_P, BLOCK_N, BLOCK_J, HAS_Z)
            _tile_step(S, rx, xb, zb, first + i, is_flush, live, c, in_ring, coef, coef_now, w, gamma, total, dt, A,
                       D, Bv, Cv, rB, ck_base, rdt_base, rx_base, rB_base, y_row, s_ck_p, s_rx_j, s_rB_j, tile_rows,
                       y_rows, P, N, CAP, BLOCK_P, BLOCK_N, HAS_D, HAS_Z, FOLD, ROWS, s_rdt_j)
    else:
        _cols_tile(ck_base, rx_base, rB_base, x_row, z_row, y_row, C_ptr + row * s_C_row + g * s_C_group,
                   B_ptr + row * s_B_row + g * s_B_group, first, tile_rows, y_rows, live, c, is_flush, in_ring, coef,
                   coef_now, w, gamma, dt, D, s_ck_p, s_rx_j, s_rB_j, N, CAP, BLOCK_P, BLOCK_N, BLOCK_J, KC,
                   NUM_STAGES, HAS_D, HAS_Z, FOLD)

    if not CURSOR_KERNEL:
        if ROWS_FASTEST:
            programs = tl.num_programs(1) * tl.num_programs(2)
        else:
            programs = tl.num_programs(0) * tl.num_programs(1)
        if live:
            if arrived == programs - 1:
                tl.store(committed_ptr + slot, tl.where(is_flush, 0, c + 1))
                if is_flush:
                    tl.store(flush_at_ptr + slot, window)
                tl.store(arrivals_ptr + slot, 0)


def replay_step_v4(checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, window,
                   x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id,
                   y, cfg):
    """Launch the streaming ReplaySSM step (arguments as ``decode.replay_step``, validated there);
    writes ``y`` ``[batch, heads, head_dim]`` and the state in place."""
    batch, heads, head_dim = x.shape
    slots, _, _, d_state = checkpoint.shape
    groups, capacity = ring_B.shape[1], ring_B.shape[2]
    lo, hi, strides, flags, (D_, z_, bias_, idx_) = _common(x, dt, B, C, z, y, dt_bias, dt_min, dt_max, D, state_indices, A)
    tiles = triton.cdiv(head_dim, cfg.block_p)
    # "cols": one tile per program
    blocks = 1 if cfg.pipeline == "cols" else triton.cdiv(tiles, min(cfg.p_split, tiles))
    parts = triton.cdiv(tiles, blocks)  # no program without a tile
    grid = (batch, heads, parts) if cfg.rows_fastest else (parts, heads, batch)
    arrivals = committed if cfg.cursor_kernel else _arrivals(slots, checkpoint.device)
    # split_flush: the non-flush rows (and every row's ring append) in one launch, the flush
    # rows in a second, so that the fold's registers do not lower the non-flush occupancy.
    for rows in ("nonflush", "flush") if cfg.split_flush else ("all",):
        _replay_v4_kernel[grid](
            checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, arrivals,
            x, dt, A, B, C, D_, z_, bias_, idx_, y,
            int(window), pad_slot_id, lo, hi, *_state_strides(checkpoint, ring_x, ring_dt, ring_B), *strides,
            HEADS_PER_GROUP=heads // groups, P=head_dim, N=d_state, CAP=capacity,
            BLOCK_P=cfg.block_p, BLOCK_N=triton.next_power_of_2(d_state),
            BLOCK_J=max(16, triton.next_power_of_2(capacity)), BLOCKS=blocks,
            DT_SOFTPLUS=bool(dt_softplus), **flags, FOLD=cfg.fold, PIPELINE=cfg.pipeline, AHEAD=cfg.ahead,
            NUM_STAGES=cfg.num_stages, CURSOR_KERNEL=cfg.cursor_kernel, ROWS_FASTEST=cfg.rows_fastest, ROWS=rows,
            KC=min(32, triton.next_power_of_2(d_state)), s_rdt_j=ring_dt.stride(2),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, maxnreg=cfg.max_registers,
        )
    if cfg.cursor_kernel:
        _move_cursors(committed, flush_at, idx_, batch, window, pad_slot_id, state_indices is not None)
    return y
