"""The ring launch of the staged Mamba-2 step (``decode_staged.py``), what the stream and flush
launches read of the ring before they start.

``_ring_kernel``, one program per (batch row, group): the cursors, the ring weights, scores and
decays as per-(row, head) coefficient lines, the row's ``(c, flush)`` flags, and the token's ring
``dt`` and ``B`` entries (its ``x`` entry too with ``LaunchConfig.ring_x_in_ring``).

With ``LaunchConfig.compact_coef`` a non-flush row's terms are not lines of ring weights times
scores (``[CAP + 2]`` fp32 per head, 2.4 MB a step at Nemotron-H batch 256) but the group's
``[BLOCK_J]`` scores and four floats per head (``G_t``, ``Gamma``, ``dt_t B_t . C_t``, ``A``,
0.6 MB): the stream programs form the weights from the ring's ``dt`` entries, which they read
beside their checkpoint tile. Writes among the checkpoint's reads cost more than their bytes
(``benchmarks/NOTES_mamba2.md``, thirty-sixth run); the lines were most of the non-flush step's.

With ``LaunchConfig.ring_dt_sector`` the token's ``dt`` entry is stored as the 32-byte sector
around it (8 fp32 entries) rather than as one word per head: the heads' rings lie ``CAP`` words
apart, so single words leave 32768 sectors a step partly written at Nemotron-H batch 256, and on
an H200 partly written sectors among the checkpoint's reads cost more per sector than whole ones
(``benchmarks/probe_memory_rates.py``, thirty-seventh run). In the step it gained nothing on an
H200 (forty-fifth run, Nemotron-H non-flush 274.6-274.8 against 274.5-274.9 us at batch 256,
531.5-531.8 against 531.8-532.0 at 512), so it stays an option. Every
launch also takes a ``ring_dt`` stored entries outermost (``s_rdt_j``, a constexpr:
``Mamba2ReplayState.allocate(ring_dt_layout="entries")``; a group's heads' entry is then 64
contiguous bytes, 8 times fewer sectors written). The state allocates heads outermost by default:
on an H100 (forty-fourth run, ``bench_mamba2_decode.py --derive ring_dt_layout=entries``) the
entries layout left the Nemotron-H amortized step at 409.0 us at batch 256 and shortened it by
~1 us (of 800) at 512; on an H200 (forty-fifth run) it changed nothing at 256 (non-flush 274.7 /
275.0 us against 274.5-274.9) and at 512 lengthened the non-flush step by 2-3 us and the all-flush
step by 11-19%. So those partly written sectors are not on the step's critical path.

The flush rows' lines and every row's flags from a launch of their own on the side stream, ahead
of the ring launch, so that the flush launch would not wait for the ring launch
(``flush_early``), were built, GPU-tested and timed on an H100, and removed: the flush step moved
by 0-2 us while the non-flush step lost 1.6-2 us at batch 128-160, 4 us at 256 and 8 us at 512,
where the stream launch then waits for two launches on two streams (``benchmarks/NOTES_mamba2.md``,
forty-sixth run).

Storing the ``x`` entry from a launch of its own on a second side stream, beside the stream
launch, was built and timed (Nemotron-H 256, H200: non-flush 274.8-275.1 against 274.5-274.9 us)
and removed (``benchmarks/NOTES_mamba2.md``, thirty-ninth run).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .decode import _slot_of, _softplus_clamp

__all__ = []


@triton.jit
def _ring_kernel(
    ring_dt_ptr, ring_B_ptr, committed_ptr, flush_at_ptr,
    dt_ptr, A_ptr, B_ptr, C_ptr, dt_bias_ptr, idx_ptr, coef_ptr, info_ptr,
    window, pad_slot_id, dt_min, dt_max,
    s_rdt_slot, s_rdt_head, s_rB_slot, s_rB_group, s_rB_j,
    s_dt_row, s_B_row, s_B_group, s_C_row, s_C_group,
    GROUPS: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
    BLOCK_HG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_CLAMP: tl.constexpr, HAS_INDICES: tl.constexpr,
    ring_x_ptr=None, x_ptr=None, s_rx_slot=0, s_rx_head=0, s_rx_j=0, s_x_row=0, s_x_head=0,
    P: tl.constexpr = 1, BLOCK_P: tl.constexpr = 1, RING_X: tl.constexpr = False,
    count_ptr=None, ZERO_COUNT: tl.constexpr = False,
    terms_ptr=None, scores_ptr=None, COMPACT: tl.constexpr = False, DT_SECTOR: tl.constexpr = False,
    s_rdt_j: tl.constexpr = 1,
):
    # RING_X: this launch also writes the token's ring x entry (LaunchConfig.ring_x_in_ring), so
    # that the stream launch, which reads the checkpoint, stores only y. ZERO_COUNT: it zeroes the
    # warp-specialised flush launch's item counter (flush_ws_order "counter" or "auto"), which runs after it.
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    if ZERO_COUNT:
        if (row == 0) & (g == 0):
            tl.store(count_ptr, 0)
    slot, live = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)
    c = tl.where(live, tl.load(committed_ptr + slot), 0)
    flush_at = tl.load(flush_at_ptr + slot)
    is_flush = c + 1 >= tl.where(live, flush_at, CAP + 1)
    fits = tl.where(live, c < CAP, False)
    offs_hg = tl.arange(0, BLOCK_HG)
    offs_n = tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_J)
    mask_hg = offs_hg < HEADS_PER_GROUP
    mask_n = offs_n < N
    in_ring = offs_j < c
    LINE: tl.constexpr = CAP + 2
    # Lanes past the group's heads repeat its first head (every load stays in bounds; their stores are masked).
    heads = g * HEADS_PER_GROUP + tl.where(mask_hg, offs_hg, 0)
    # A flush row's line holds the weights alone: its scores are never read, so neither is its
    # ring B here (the flush launch folds it; in an all-flush step at batch 256 that is 7.7 MB).
    rB = tl.load(ring_B_ptr + slot * s_rB_slot + g * s_rB_group + offs_j[:, None] * s_rB_j + offs_n[None, :],
                 mask=(offs_j < tl.where(is_flush, 0, c))[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
    B_raw = tl.load(B_ptr + row * s_B_row + g * s_B_group + offs_n, mask=mask_n, other=0.0)
    Cv = tl.load(C_ptr + row * s_C_row + g * s_C_group + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    rdt = tl.load(ring_dt_ptr + slot * s_rdt_slot + heads[:, None] * s_rdt_head + offs_j[None, :] * s_rdt_j,
                  mask=mask_hg[:, None] & in_ring[None, :], other=0.0)
    dt = tl.load(dt_ptr + row * s_dt_row + heads, mask=mask_hg, other=0.0).to(tl.float32)
    dt = _softplus_clamp(dt, heads, HAS_DT_BIAS, dt_bias_ptr, DT_SOFTPLUS, HAS_CLAMP, dt_min, dt_max)
    A = tl.load(A_ptr + heads, mask=mask_hg, other=0.0).to(tl.float32)
    score = tl.sum(rB * Cv[None, :], axis=1)  # [J]: B_j . C_t, shared by the group's heads
    score_now = tl.sum(B_raw.to(tl.float32) * Cv, axis=0)
    total = tl.sum(rdt, axis=1) + dt  # [heads]
    w = tl.where(in_ring[None, :], tl.exp(A[:, None] * (total[:, None] - tl.cumsum(rdt, axis=1))) * rdt, 0.0)
    gamma = tl.exp(A * total)
    line = coef_ptr + (row * GROUPS * HEADS_PER_GROUP + heads) * LINE
    if COMPACT:
        # Lines for flush rows only (the flush launches read them). A non-flush row gets the
        # group's scores and per head (G_t, Gamma, dt_t B_t . C_t, A), 16 bytes: its stream
        # programs form the weights from the ring's dt themselves (LaunchConfig.compact_coef).
        heads_flush = offs_hg < tl.where(is_flush, HEADS_PER_GROUP, 0)
        tl.store(line[:, None] + offs_j[None, :], w, mask=heads_flush[:, None] & (offs_j < CAP)[None, :])
        tl.store(line + CAP, gamma, mask=heads_flush)
        tl.store(line + CAP + 1, dt, mask=heads_flush)
        tl.store(scores_ptr + (row * GROUPS + g) * BLOCK_J + offs_j, score,
                 mask=offs_j < tl.where(is_flush, 0, BLOCK_J))
        col = tl.arange(0, 4)
        terms = tl.where(col[None, :] == 0, total[:, None], tl.where(col[None, :] == 1, gamma[:, None], tl.where(
            col[None, :] == 2, (dt * score_now)[:, None], A[:, None])))
        tl.store(terms_ptr + (row * GROUPS * HEADS_PER_GROUP + heads)[:, None] * 4 + col[None, :], terms,
                 mask=(offs_hg < tl.where(is_flush, 0, HEADS_PER_GROUP))[:, None] & (col < 4)[None, :])
    else:
        lead = tl.where(is_flush, w, w * score[None, :])
        tl.store(line[:, None] + offs_j[None, :], lead, mask=mask_hg[:, None] & (offs_j < CAP)[None, :])
        tl.store(line + CAP, gamma, mask=mask_hg)
        tl.store(line + CAP + 1, tl.where(is_flush, dt, dt * score_now), mask=mask_hg)
    # The token's ring entry (entry c is not read by this step).
    if DT_SECTOR:
        # The 8 fp32 entries around c (one 32-byte sector where a head's ring starts on one): those
        # below c as loaded, dt at c, zeros after (uncommitted: never read before a later step
        # writes them). A lone 4-byte store leaves its sector partly written.
        lo = c // 8 * 8
        window8 = (offs_j >= lo) & (offs_j < lo + 8) & (offs_j < CAP)
        sector = tl.where(offs_j[None, :] == c, dt[:, None], rdt)
        tl.store(ring_dt_ptr + slot * s_rdt_slot + heads[:, None] * s_rdt_head + offs_j[None, :] * s_rdt_j, sector,
                 mask=(offs_hg < tl.where(fits, HEADS_PER_GROUP, 0))[:, None] & window8[None, :])
    else:
        tl.store(ring_dt_ptr + slot * s_rdt_slot + heads * s_rdt_head + c * s_rdt_j, dt,
                 mask=offs_hg < tl.where(fits, HEADS_PER_GROUP, 0))
    tl.store(ring_B_ptr + slot * s_rB_slot + g * s_rB_group + c * s_rB_j + offs_n, B_raw,
             mask=offs_n < tl.where(fits, N, 0))
    if RING_X:
        # Not for a flush row: its flush folds the token from x, and the entry is never read.
        offs_p = tl.arange(0, BLOCK_P)
        mask_x = mask_hg[:, None] & (offs_p < tl.where(fits & (is_flush == 0), P, 0))[None, :]
        xv = tl.load(x_ptr + row * s_x_row + heads[:, None] * s_x_head + offs_p[None, :], mask=mask_x, other=0.0)
        tl.store(ring_x_ptr + slot * s_rx_slot + heads[:, None] * s_rx_head + c * s_rx_j + offs_p[None, :], xv,
                 mask=mask_x)
    if g == 0:
        tl.store(info_ptr + 2 * row, c)
        tl.store(info_ptr + 2 * row + 1, tl.where(is_flush, 1, 0))

