"""Triton decode kernels for Mamba-2: the standard step and the ReplaySSM step (one launch).

Both kernels run one program per ``(head_dim block, head, row)``: the grid is wide enough at
batch 1 (Nemotron-H: 4 blocks x 128 heads = 512 programs) and each program streams one
``[BLOCK_P, d_state]`` tile of fp32 state, which is what bounds a decode step.

``mamba2_replay_step`` serves every row of a batch in one launch. Per row, with
``c = committed[slot]``:

- non-flush (``c + 1 < flush_at``): append ``x, dt, B`` at ring position ``c``; read the
  checkpoint tile once; ``y = exp(A sum dt) S_c C + sum_j exp(A sum_{i>j} dt_i) dt_j (B_j . C) x_j``.
  Nothing of the state's size is written.
- flush: the same, then ``S = exp(A sum dt) S_c + sum_j exp(A sum_{i>j} dt_i) dt_j x_j B_j^T`` is
  written back in fp32. The fold is a ``[BLOCK_P, J] x [J, d_state]`` product with fp32 operands
  and IEEE fp32 arithmetic (``FOLD_DOT``) or a loop of FMAs: the checkpoint is never rounded
  through a 16-bit type.

The cursors (``committed``, ``flush_at``) of a slot are read by all its programs, so they are
updated by the last program of the slot to arrive (an arrival counter per slot, reset by that
program): one launch, no second kernel.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .._arrivals import arrival_counters, write_through_cursors
from .launch import DOT_FOLDS, FOLDS, KERNELS, PIPELINES, LaunchConfig, gpu_name, launch_config

__all__ = ["DOT_FOLDS", "FOLDS", "KERNELS", "PIPELINES", "LaunchConfig", "gpu_name", "launch_config", "replay_step",
           "standard_step"]


@triton.jit
def _program_ids(ROWS_FASTEST: tl.constexpr):
    """``(row, head, part)`` of this program. ``ROWS_FASTEST`` walks rows first, so the programs
    running at one time belong to many slots."""
    if ROWS_FASTEST:
        row = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        part = tl.program_id(2)
    else:
        part = tl.program_id(0)
        h = tl.program_id(1)
        row = tl.program_id(2).to(tl.int64)
    return row, h, part


@triton.jit
def _tile_lanes(pid_p, P: tl.constexpr, N: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_J: tl.constexpr):
    """``(offs_p, offs_n, offs_j, mask_p, mask_n)`` of checkpoint tile ``pid_p``: its head_dim
    rows, the d_state columns and the ring entries' lanes."""
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    return offs_p, offs_n, tl.arange(0, BLOCK_J), offs_p < P, offs_n < N


@triton.jit
def _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES: tl.constexpr):
    """``(slot, live)`` of batch row ``row``; a padded row addresses slot 0 (a valid address)
    and is masked by ``live`` from there on."""
    if HAS_INDICES:
        slot = tl.load(idx_ptr + row).to(tl.int64)
    else:
        slot = row
    live = slot != pad_slot_id
    return tl.where(live, slot, 0), live


@triton.jit
def _mixer_gate(h, row, offs_p, mask_p, D_ptr, z_ptr, s_z_row, s_z_head, HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """``(D_h, z)`` for :func:`_mixer_output` (``z`` ``[BLOCK_P]`` fp32; 0.0 where absent).

    Loaded with the tile rather than after its reduction: issued late, ``z``'s DRAM latency sat
    exposed at the end of every flush tile (11% of the Mamba-2 flush launch's stall samples in
    Nsight Compute, H200)."""
    d = 0.0
    zv = 0.0
    if HAS_D:
        d = tl.load(D_ptr + h).to(tl.float32)
    if HAS_Z:
        zv = tl.load(z_ptr + row * s_z_row + h * s_z_head + offs_p, mask=mask_p, other=0.0).to(tl.float32)
    return d, zv


@triton.jit
def _mixer_output(y, x, d, zv, HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """The mixer's output rows from the SSM's ``y``: ``(y + D_h x) * silu(z)`` in fp32, with ``d``,
    ``zv`` from :func:`_mixer_gate`."""
    if HAS_D:
        y += d * x
    if HAS_Z:
        y = y * zv * tl.sigmoid(zv)
    return y


@triton.jit
def _softplus_clamp(dt, h, HAS_DT_BIAS: tl.constexpr, dt_bias_ptr, DT_SOFTPLUS: tl.constexpr, HAS_CLAMP: tl.constexpr,
                    dt_min, dt_max):
    if HAS_DT_BIAS:
        dt = dt + tl.load(dt_bias_ptr + h).to(tl.float32)
    if DT_SOFTPLUS:
        dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(dt)), dt)
    if HAS_CLAMP:
        dt = tl.minimum(tl.maximum(dt, dt_min), dt_max)
    return dt


@triton.jit
def _fold_unrolled(upd, c, total, A, rdt_base, rx_base, rB_base, s_rx_j, s_rB_j, offs_p, offs_n,
                   P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr, s_rdt_j: tl.constexpr):
    """``upd + sum_{j<c} exp(A (total - G_j)) dt_j x_j B_j^T`` over the ring's committed entries
    as rank-1 FMA updates, unrolled so that all entry loads are issued at once."""
    prefix = 0.0
    for j in tl.static_range(CAP):
        take = j < c
        dt_j = tl.where(take, tl.load(rdt_base + j * s_rdt_j), 0.0)
        prefix += dt_j
        w_j = tl.exp(A * (total - prefix)) * dt_j
        x_j = tl.load(rx_base + j * s_rx_j + offs_p, mask=offs_p < tl.where(take, P, 0), other=0.0)
        B_j = tl.load(rB_base + j * s_rB_j + offs_n, mask=offs_n < tl.where(take, N, 0), other=0.0)
        upd += (w_j * x_j.to(tl.float32))[:, None] * B_j.to(tl.float32)[None, :]
    return upd


@triton.jit
def _append_dt_B(fits, part, h, HEADS_PER_GROUP: tl.constexpr, rdt_base, rB_base, c, s_rB_j, dt, B_raw, offs_n, mask_n,
                 s_rdt_j: tl.constexpr):
    """Ring entry ``c``'s ``dt`` (once per head) and ``B`` (once per group)."""
    if fits:
        if part == 0:
            tl.store(rdt_base + c * s_rdt_j, dt)
            if h % HEADS_PER_GROUP == 0:
                tl.store(rB_base + c * s_rB_j + offs_n, B_raw, mask=mask_n)


@triton.jit
def _standard_step_kernel(
    state_ptr, x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, idx_ptr, y_ptr,
    ring_x_ptr, ring_dt_ptr, ring_B_ptr, committed_ptr, flush_at_ptr, arrivals_ptr,
    pad_slot_id, dt_min, dt_max, window,
    s_st_slot, s_st_head, s_st_p,
    s_x_row, s_x_head, s_dt_row, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    s_rx_slot, s_rx_head, s_rx_j, s_rdt_slot, s_rdt_head, s_rB_slot, s_rB_group, s_rB_j,
    HEADS_PER_GROUP: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
    HAS_CLAMP: tl.constexpr, HAS_INDICES: tl.constexpr, WRITE_THROUGH: tl.constexpr, s_rdt_j: tl.constexpr = 1,
):
    """One ``[BLOCK_P, d_state]`` state tile per program: ``S = e^{A dt} S + dt x B^T``, ``y = S C``.

    ``WRITE_THROUGH`` (``LaunchConfig(kernel="write_through")``): the state is a ReplaySSM
    checkpoint and the step a flush at every token (a window of one). The slot's cursors are
    loaded beside the tile (both indexed by slot: no added latency). At ``(committed, flush_at)
    = (0, window)``, the steady state of such steps, the step is the standard one and touches
    neither the ring nor the cursors (no arrival count). Otherwise (a slot served at larger
    batches arrives with ``c`` ring entries, or from a reset with a staggered ``flush_at``) the
    ``c`` entries are folded first, one exact fp32 update each, and every program of the slot
    counts its arrival; the last sets the cursors to ``(0, window)``. All of them read the same
    cursors, since only the last to arrive moves them. Drafts are not served here."""
    pid_p = tl.program_id(0)
    h = tl.program_id(1)
    row = tl.program_id(2).to(tl.int64)
    g = h // HEADS_PER_GROUP
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p = offs_p < P
    mask_n = offs_n < N
    slot, live = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)
    # Liveness enters masks through comparisons only (no scalar & vector), which every
    # backend, the interpreter included, types as a boolean mask.
    mask_live_p = offs_p < tl.where(live, P, 0)
    mask_s = mask_live_p[:, None] & mask_n[None, :]
    s_ptrs = state_ptr + slot * s_st_slot + h * s_st_head + offs_p[:, None] * s_st_p + offs_n[None, :]
    # The state tile is the only large transfer: issue it first so the small loads overlap it.
    S = tl.load(s_ptrs, mask=mask_s, other=0.0).to(tl.float32)
    if WRITE_THROUGH:
        # A padded row reads as a slot at rest: it folds nothing and counts no arrival.
        c = tl.where(live, tl.load(committed_ptr + slot), 0)
        flush_at = tl.where(live, tl.load(flush_at_ptr + slot), window)

    dt = tl.load(dt_ptr + row * s_dt_row + h).to(tl.float32)
    dt = _softplus_clamp(dt, h, HAS_DT_BIAS, dt_bias_ptr, DT_SOFTPLUS, HAS_CLAMP, dt_min, dt_max)
    A = tl.load(A_ptr + h).to(tl.float32)
    x = tl.load(x_ptr + row * s_x_row + h * s_x_head + offs_p, mask=mask_p, other=0.0).to(tl.float32)
    Bv = tl.load(B_ptr + row * s_B_row + g * s_B_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    Cv = tl.load(C_ptr + row * s_C_row + g * s_C_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)

    if WRITE_THROUGH:
        if c > 0:
            # Rare: the slot's ring entries, oldest first.
            rx_base = ring_x_ptr + slot * s_rx_slot + h * s_rx_head
            rdt_base = ring_dt_ptr + slot * s_rdt_slot + h * s_rdt_head
            rB_base = ring_B_ptr + slot * s_rB_slot + g * s_rB_group
            for j in range(0, c):
                dt_j = tl.load(rdt_base + j * s_rdt_j)
                x_j = tl.load(rx_base + j * s_rx_j + offs_p, mask=mask_p, other=0.0).to(tl.float32)
                B_j = tl.load(rB_base + j * s_rB_j + offs_n, mask=mask_n, other=0.0).to(tl.float32)
                S = tl.exp(A * dt_j) * S + (dt_j * x_j)[:, None] * B_j[None, :]
    S = tl.exp(A * dt) * S + (dt * x)[:, None] * Bv[None, :]
    tl.store(s_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_s)
    y = tl.sum(S * Cv[None, :], axis=1)
    # The gate after the tile (unlike the replay kernels): loaded with the tile it cost this
    # streaming kernel ~4% at batch 256 on an H200 (558 against 539 us).
    d_h, zv = _mixer_gate(h, row, offs_p, mask_p, D_ptr, z_ptr, s_z_row, s_z_head, HAS_D, HAS_Z)
    y = _mixer_output(y, x, d_h, zv, HAS_D, HAS_Z)
    y = tl.where(live, y, 0.0)
    tl.store(y_ptr + row * s_y_row + h * s_y_head + offs_p, y.to(y_ptr.dtype.element_ty), mask=mask_p)
    if WRITE_THROUGH:
        write_through_cursors(arrivals_ptr, committed_ptr, flush_at_ptr, slot, c, flush_at, window,
                              tl.num_programs(0) * tl.num_programs(1))


@triton.jit
def _replay_step_kernel(
    ckpt_ptr, ring_x_ptr, ring_dt_ptr, ring_B_ptr, committed_ptr, flush_at_ptr, arrivals_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, idx_ptr, y_ptr,
    window, pad_slot_id, dt_min, dt_max,
    s_ck_slot, s_ck_head, s_ck_p,
    s_rx_slot, s_rx_head, s_rx_j, s_rdt_slot, s_rdt_head, s_rB_slot, s_rB_group, s_rB_j,
    s_x_row, s_x_head, s_dt_row, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    HEADS_PER_GROUP: tl.constexpr, P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
    HAS_CLAMP: tl.constexpr, HAS_INDICES: tl.constexpr, FOLD_DOT: tl.constexpr, RING_PREFETCH: tl.constexpr,
    CURSOR_KERNEL: tl.constexpr, ROWS_FASTEST: tl.constexpr, s_rdt_j: tl.constexpr = 1,
):
    row, h, pid_p = _program_ids(ROWS_FASTEST)
    g = h // HEADS_PER_GROUP
    offs_p, offs_n, offs_j, mask_p, mask_n = _tile_lanes(pid_p, P, N, BLOCK_P, BLOCK_N, BLOCK_J)
    slot, live = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)
    # Liveness enters masks through comparisons only (no scalar & vector), which every
    # backend, the interpreter included, types as a boolean mask.
    mask_live_p = offs_p < tl.where(live, P, 0)
    mask_s = mask_live_p[:, None] & mask_n[None, :]
    ck_ptrs = ckpt_ptr + slot * s_ck_slot + h * s_ck_head + offs_p[:, None] * s_ck_p + offs_n[None, :]
    S = tl.load(ck_ptrs, mask=mask_s, other=0.0).to(tl.float32)
    d_h, zv = _mixer_gate(h, row, offs_p, mask_p, D_ptr, z_ptr, s_z_row, s_z_head, HAS_D, HAS_Z)

    # Padded rows address slot 0 (a valid address) and are masked from here on.
    c = tl.where(live, tl.load(committed_ptr + slot), 0)
    flush_at = tl.load(flush_at_ptr + slot)
    is_flush = c + 1 >= tl.where(live, flush_at, CAP + 1)

    dt = tl.load(dt_ptr + row * s_dt_row + h).to(tl.float32)
    dt = _softplus_clamp(dt, h, HAS_DT_BIAS, dt_bias_ptr, DT_SOFTPLUS, HAS_CLAMP, dt_min, dt_max)
    A = tl.load(A_ptr + h).to(tl.float32)
    x_raw = tl.load(x_ptr + row * s_x_row + h * s_x_head + offs_p, mask=mask_p, other=0.0)
    B_raw = tl.load(B_ptr + row * s_B_row + g * s_B_group + offs_n, mask=mask_n, other=0.0)
    x = x_raw.to(tl.float32)
    Bv = B_raw.to(tl.float32)
    Cv = tl.load(C_ptr + row * s_C_row + g * s_C_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)

    # Append the token at ring position c. Entry c is never read back from memory in this
    # launch (other programs of the slot may not have written it yet): its values come from
    # the inputs in registers.
    fits = tl.where(live, c < CAP, False)
    rx_base = ring_x_ptr + slot * s_rx_slot + h * s_rx_head
    rdt_base = ring_dt_ptr + slot * s_rdt_slot + h * s_rdt_head
    rB_base = ring_B_ptr + slot * s_rB_slot + g * s_rB_group
    tl.store(rx_base + c * s_rx_j + offs_p, x_raw, mask=offs_p < tl.where(fits, P, 0))
    _append_dt_B(fits, pid_p, h, HEADS_PER_GROUP, rdt_base, rB_base, c, s_rB_j, dt, B_raw, offs_n, mask_n, s_rdt_j)

    # Cursor hand-off (unless CURSOR_KERNEL, where a second launch moves the cursors): the
    # last program of the slot to arrive moves them. The arrival is counted early (its
    # latency hides behind the checkpoint load) and after this program has used c and
    # flush_at: every warp has consumed them in the stores above before the barrier, and the
    # increment's operand depends on them, so no program of the slot can read a cursor after
    # the last one has written it. Relaxed: no fence on the hot path.
    if not CURSOR_KERNEL:
        tl.debug_barrier()
        increment = tl.where(live, tl.where(c + flush_at >= -(2**30), 1, 0), 0)
        arrived = tl.atomic_add(arrivals_ptr + slot, increment, sem="relaxed")

    in_ring = offs_j < c
    # RING_PREFETCH loads every ring entry without waiting for c (one memory latency less,
    # for small batches); otherwise only the committed entries are fetched (fewer bytes).
    if RING_PREFETCH:
        fetch_j = offs_j < CAP
    else:
        fetch_j = in_ring
    is_now = offs_j == c
    rdt = tl.load(rdt_base + offs_j * s_rdt_j, mask=fetch_j, other=0.0)
    rdt = tl.where(in_ring, rdt, tl.where(is_now, dt, 0.0))
    total = tl.sum(rdt, axis=0)
    # exp(A * sum_{i>j} dt_i): the decay from entry j to the current token.
    decay = tl.where(offs_j <= c, tl.exp(A * (total - tl.cumsum(rdt, axis=0))), 0.0)
    weight = decay * rdt
    rB = tl.load(rB_base + offs_j[:, None] * s_rB_j + offs_n[None, :], mask=fetch_j[:, None] & mask_n[None, :], other=0.0)
    rB = tl.where(in_ring[:, None], rB.to(tl.float32), tl.where(is_now[:, None], Bv[None, :], 0.0))
    rx = tl.load(rx_base + offs_j[:, None] * s_rx_j + offs_p[None, :], mask=fetch_j[:, None] & mask_p[None, :], other=0.0)
    rx = tl.where(in_ring[:, None], rx.to(tl.float32), tl.where(is_now[:, None], x[None, :], 0.0))

    decay_total = tl.exp(A * total)
    scores = tl.sum(rB * Cv[None, :], axis=1)  # B_j . C
    y = decay_total * tl.sum(S * Cv[None, :], axis=1) + tl.sum((weight * scores)[:, None] * rx, axis=0)

    if is_flush:
        if FOLD_DOT:
            # Tiles reloaded here (L1/L2 hits) so that the dot's operand layouts stay local to
            # the flush branch instead of reshaping the non-flush path.
            fx = tl.load(rx_base + offs_j[:, None] * s_rx_j + offs_p[None, :], mask=in_ring[:, None] & mask_p[None, :], other=0.0)
            fx = tl.where(is_now[:, None], x[None, :], fx.to(tl.float32))
            fB = tl.load(rB_base + offs_j[:, None] * s_rB_j + offs_n[None, :], mask=in_ring[:, None] & mask_n[None, :], other=0.0)
            fB = tl.where(is_now[:, None], Bv[None, :], fB.to(tl.float32))
            upd = tl.dot(tl.trans(weight[:, None] * fx), fB, input_precision="ieee")
        else:
            upd = _fold_unrolled((dt * x)[:, None] * Bv[None, :], c, total, A, rdt_base, rx_base, rB_base,
                                 s_rx_j, s_rB_j, offs_p, offs_n, P, N, CAP, s_rdt_j)
        S_new = decay_total * S + upd
        tl.store(ck_ptrs, S_new.to(ckpt_ptr.dtype.element_ty), mask=mask_s)

    y = _mixer_output(y, x, d_h, zv, HAS_D, HAS_Z)
    y = tl.where(live, y, 0.0)
    tl.store(y_ptr + row * s_y_row + h * s_y_head + offs_p, y.to(y_ptr.dtype.element_ty), mask=mask_p)

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


@triton.jit
def _replay_cursor_kernel(committed_ptr, flush_at_ptr, idx_ptr, batch, window, pad_slot_id,
                          HAS_INDICES: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_batch = rows < batch
    if HAS_INDICES:
        slots = tl.load(idx_ptr + rows, mask=in_batch, other=pad_slot_id).to(tl.int64)
    else:
        slots = rows.to(tl.int64)
    live = rows < tl.where(slots != pad_slot_id, batch, 0)
    c = tl.load(committed_ptr + slots, mask=live, other=0)
    flush_at = tl.load(flush_at_ptr + slots, mask=live, other=0)
    is_flush = c + 1 >= flush_at
    tl.store(committed_ptr + slots, tl.where(is_flush, 0, c + 1), mask=live)
    tl.store(flush_at_ptr + slots, tl.where(is_flush, window, flush_at), mask=live)


# -- launchers (tensors already validated by the public wrappers) ------------------------------------

_ARRIVALS: dict[torch.device, torch.Tensor] = {}


def _arrivals(slots: int, device: torch.device) -> torch.Tensor:
    """Per-slot arrival counters, zero between launches (each launch's last program re-zeroes)."""
    return arrival_counters(_ARRIVALS, slots, device, lambda: ValueError(
        f"state: {slots} slots seen for the first time inside a CUDA-graph capture; call the "
        "step once eagerly with this state before capturing"))


def _common(x, dt, B, C, z, y, dt_bias, dt_min, dt_max, D, state_indices, dummy):
    has_clamp = dt_min is not None or dt_max is not None
    lo = -math.inf if dt_min is None else float(dt_min)
    hi = math.inf if dt_max is None else float(dt_max)
    strides = (
        x.stride(0), x.stride(1), dt.stride(0), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
        z.stride(0) if z is not None else 0, z.stride(1) if z is not None else 0, y.stride(0), y.stride(1),
    )
    flags = dict(
        HAS_D=D is not None, HAS_Z=z is not None, HAS_DT_BIAS=dt_bias is not None,
        HAS_CLAMP=has_clamp, HAS_INDICES=state_indices is not None,
    )
    ptrs = [t if t is not None else dummy for t in (D, z, dt_bias, state_indices)]
    return lo, hi, strides, flags, ptrs


def standard_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id,
                  out=None, config: LaunchConfig | None = None):
    """Launch the standard step; ``state`` ``[slots, heads, head_dim, d_state]`` is updated in place."""
    batch, head_dim, d_state = x.shape[0], x.shape[2], state.shape[3]
    y = torch.empty_like(x) if out is None else out
    if batch == 0:
        return y
    cfg = config or launch_config("standard", head_dim, d_state, batch)
    return _launch_standard(state, None, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices,
                            pad_slot_id, y, cfg)


def _launch_standard(state, replay, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices,
                     pad_slot_id, y, cfg):
    """``_standard_step_kernel`` over ``state``; ``replay``: ``None`` (the standard step) or the
    write-through step's ``(ring_x, ring_dt, ring_B, committed, flush_at, window)``."""
    batch, heads, head_dim = x.shape
    slots, _, _, d_state = state.shape
    groups = B.shape[1]
    lo, hi, strides, flags, (D_, z_, bias_, idx_) = _common(x, dt, B, C, z, y, dt_bias, dt_min, dt_max, D, state_indices, A)
    if replay is None:
        ring = (state,) * 6  # unused pointers (WRITE_THROUGH=False prunes every use)
        window, ring_strides, s_rdt_j = 0, (0,) * 8, 1
    else:
        ring_x, ring_dt, ring_B, committed, flush_at, window = replay
        ring = (ring_x, ring_dt, ring_B, committed, flush_at, _arrivals(slots, state.device))
        ring_strides = _state_strides(state, ring_x, ring_dt, ring_B)[3:]
        s_rdt_j = ring_dt.stride(2)
    _standard_step_kernel[(triton.cdiv(head_dim, cfg.block_p), heads, batch)](
        state, x, dt, A, B, C, D_, z_, bias_, idx_, y, *ring,
        pad_slot_id, lo, hi, int(window), state.stride(0), state.stride(1), state.stride(2), *strides, *ring_strides,
        HEADS_PER_GROUP=heads // groups, P=head_dim, N=d_state,
        BLOCK_P=cfg.block_p, BLOCK_N=triton.next_power_of_2(d_state),
        DT_SOFTPLUS=bool(dt_softplus), **flags, WRITE_THROUGH=replay is not None, s_rdt_j=s_rdt_j,
        num_warps=cfg.num_warps, maxnreg=cfg.max_registers,
    )
    return y


def replay_step(checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, window,
                x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id,
                out=None, config: LaunchConfig | None = None):
    """Launch the ReplaySSM step over the state tensors (layouts of ``Mamba2ReplayState``)."""
    batch, heads, head_dim = x.shape
    slots, _, _, d_state = checkpoint.shape
    groups, capacity = ring_B.shape[1], ring_B.shape[2]
    y = torch.empty_like(x) if out is None else out
    if batch == 0:
        return y
    cfg = config or launch_config("replay", head_dim, d_state, batch, gpu=gpu_name(x.device))
    if cfg.kernel == "staged":
        from .decode_staged import replay_step_staged

        return replay_step_staged(checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, window,
                                  x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices,
                                  pad_slot_id, y, cfg)
    if cfg.kernel == "write_through":
        return _launch_standard(checkpoint, (ring_x, ring_dt, ring_B, committed, flush_at, window), x, dt, A, B, C, D,
                                z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id, y, cfg)
    if cfg.kernel == "v4":
        from .decode_v4 import replay_step_v4

        return replay_step_v4(checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, window,
                              x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id,
                              y, cfg)
    lo, hi, strides, flags, (D_, z_, bias_, idx_) = _common(x, dt, B, C, z, y, dt_bias, dt_min, dt_max, D, state_indices, A)
    n_blocks = triton.cdiv(head_dim, cfg.block_p)
    grid = (batch, heads, n_blocks) if cfg.rows_fastest else (n_blocks, heads, batch)
    arrivals = committed if cfg.cursor_kernel else _arrivals(slots, checkpoint.device)
    _replay_step_kernel[grid](
        checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, arrivals,
        x, dt, A, B, C, D_, z_, bias_, idx_, y,
        int(window), pad_slot_id, lo, hi, *_state_strides(checkpoint, ring_x, ring_dt, ring_B), *strides,
        HEADS_PER_GROUP=heads // groups, P=head_dim, N=d_state, CAP=capacity,
        BLOCK_P=cfg.block_p, BLOCK_N=triton.next_power_of_2(d_state),
        BLOCK_J=max(16, triton.next_power_of_2(capacity)),
        DT_SOFTPLUS=bool(dt_softplus), **flags, FOLD_DOT=cfg.fold_dot, RING_PREFETCH=cfg.ring_prefetch,
        CURSOR_KERNEL=cfg.cursor_kernel, ROWS_FASTEST=cfg.rows_fastest, s_rdt_j=ring_dt.stride(2),
        num_warps=cfg.num_warps, maxnreg=cfg.max_registers,
    )
    if cfg.cursor_kernel:
        _move_cursors(committed, flush_at, idx_, batch, window, pad_slot_id, state_indices is not None)
    return y


def _state_strides(checkpoint, ring_x, ring_dt, ring_B):
    return (
        checkpoint.stride(0), checkpoint.stride(1), checkpoint.stride(2),
        ring_x.stride(0), ring_x.stride(1), ring_x.stride(2), ring_dt.stride(0), ring_dt.stride(1),
        ring_B.stride(0), ring_B.stride(1), ring_B.stride(2),
    )


def _move_cursors(committed, flush_at, idx, batch, window, pad_slot_id, has_indices):
    """The second launch of ``cursor_kernel`` configs: ``committed`` / ``flush_at`` of every row."""
    block = 256
    _replay_cursor_kernel[(triton.cdiv(batch, block),)](
        committed, flush_at, idx, batch, int(window), pad_slot_id, HAS_INDICES=has_indices, BLOCK=block, num_warps=4,
    )
