"""``LaunchConfig.ring_in_stream``: the staged step's ring launch and stream launch as one launch.

In the two-launch step (``decode_staged.py``) the ring launch runs alone before the stream launch:
on an H200 at Nemotron-H batch 256 the non-flush step takes ~8.6 us more than its stream launch
alone (273.0 against 264.4 us, ``benchmarks/NOTES_mamba2.md``, fifty-fourth run), the ring
launch's few megabytes, its dependent loads and the launch boundary. Here ``_lead_kernel``'s grid
is the ring launch's programs (``batch x groups``: ``ring.py``'s ``_ring_kernel`` called as a
function) followed by the stream launch's (``batch x heads x tiles``: ``stream.py``'s
``_stream_tile``, in its grid order, ``head_dim`` tile fastest, then head, then row). A stream
program first waits for its group's ring program and takes the row's ``c`` and flush flag from the
word it left (as the two-launch step's stream program loads ``info`` first), then runs the
two-launch step's tile. ``ring_sync.py`` has the words, and how the ring programs move the cursors.

The ring programs come ahead of the stream programs that wait for them, and that order is what keeps
the waits finite: a stream program waits only for ring programs with lower ids, which must have been
dispatched before it. CUDA does not promise to start a grid's blocks in the order of their ids
(scans that wait for earlier blocks take their ids from a counter for that reason), though NVIDIA
GPUs are observed to. The step has not yet run to its end on a GPU (``benchmarks/NOTES_mamba2.md``,
fifty-sixth run): it is an option, not a default.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .decode import _slot_of
from .ring import _ring_cursors, _ring_kernel
from .ring_sync import await_word, publish_ring, word_flushes, word_of, word_ring_length
from .stream import _checkpoint_tile, _stream_tile

__all__ = ["_lead_kernel"]


@triton.jit
def _lead_kernel(
    ckpt_ptr, ring_x_ptr, ring_dt_ptr, ring_B_ptr, committed_ptr, flush_at_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, idx_ptr, y_ptr, coef_ptr, info_ptr, sync_ptr, words_ptr,
    window, pad_slot_id, dt_min, dt_max, ring_programs, lead_rows,
    s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rdt_slot, s_rdt_head, s_rB_slot, s_rB_group, s_rB_j,
    s_x_row, s_x_head, s_dt_row, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head, s_y_row, s_y_head,
    GROUPS: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, P: tl.constexpr, N: tl.constexpr, CAP: tl.constexpr,
    TILES: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr,
    BLOCK_HG: tl.constexpr, BLOCK_PH: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_CLAMP: tl.constexpr, HAS_INDICES: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, RING_X: tl.constexpr, ZERO_COUNT: tl.constexpr,
    COUNT_DONE: tl.constexpr, DT_SECTOR: tl.constexpr, RING_PREFETCH: tl.constexpr, FENCE: tl.constexpr,
    LEAD_ROWS: tl.constexpr,
    s_rdt_j: tl.constexpr = 1,
    count_ptr=None,
):
    """Programs ``[0, ring_programs)``: ``_ring_kernel``'s ``(row, group)`` programs, row-major,
    each publishing its word (``COUNT_DONE``: also counted for a waiting warp-specialised flush
    launch); the rest: ``_stream_kernel``'s programs of a step whose flush rows go to the flush
    launch (``RING_X``: the ring programs store the token's ring ``x`` entry). ``sync_ptr`` /
    ``words_ptr``: ``ring_sync.ring_sync_counters`` / ``ring_sync_words``; ``BLOCK_PH``:
    ``head_dim`` rounded up to a power of two (the ring programs' ``x`` entry), ``BLOCK_P`` the
    stream tiles' rows. ``LEAD_ROWS`` 0: every ring
    program first; else (``lead_rows``: it, at most the batch) the first ``lead_rows`` rows' ring
    programs, then for each row ``r`` the ring programs of row ``r + lead_rows`` followed by row
    ``r``'s stream programs (grid: ``lead_rows x groups + batch x (groups + heads x tiles)``)."""
    pid = tl.program_id(0)
    HEADS: tl.constexpr = GROUPS * HEADS_PER_GROUP
    PER_ROW: tl.constexpr = HEADS * TILES  # stream programs a row
    # Which program this is: ring program (row, g), or stream program t of the stream launch's grid.
    if LEAD_ROWS == 0:
        is_ring = pid < ring_programs
        ring_at = pid
        t = pid - ring_programs
    else:
        # The first LEAD_ROWS rows' ring programs, then a block a row r: the ring programs of row
        # r + LEAD_ROWS (none past the batch), then row r's stream programs.
        ahead = lead_rows * GROUPS
        u = (pid - ahead) % (GROUPS + PER_ROW)
        r = (pid - ahead) // (GROUPS + PER_ROW)
        is_ring = (pid < ahead) | (u < GROUPS)
        ring_at = tl.where(pid < ahead, pid, (r + lead_rows) * GROUPS + u)
        t = r * PER_ROW + u - GROUPS
    if is_ring:
        row = (ring_at // GROUPS).to(tl.int64)
        g = ring_at % GROUPS
        if ring_at < ring_programs:
            _ring_kernel(
                ring_dt_ptr, ring_B_ptr, committed_ptr, flush_at_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, dt_bias_ptr,
                idx_ptr, coef_ptr, info_ptr, window, pad_slot_id, dt_min, dt_max, s_rdt_slot, s_rdt_head, s_rB_slot,
                s_rB_group, s_rB_j, s_dt_row, s_B_row, s_B_group, s_C_row, s_C_group, GROUPS, HEADS_PER_GROUP, N,
                CAP, BLOCK_HG, BLOCK_N, BLOCK_J, HAS_DT_BIAS, DT_SOFTPLUS, HAS_CLAMP, HAS_INDICES, ring_x_ptr, x_ptr,
                s_rx_slot, s_rx_head, s_rx_j, s_x_row, s_x_head, P, BLOCK_PH, RING_X, count_ptr, ZERO_COUNT, None,
                None, False, DT_SECTOR, s_rdt_j, row, g,
            )
            # The row's cursors as that work read them (L1 hits): what the word and the cursor move take.
            slot, live, c, is_flush = _ring_cursors(idx_ptr, committed_ptr, flush_at_ptr, row, pad_slot_id, CAP,
                                                    HAS_INDICES)
            publish_ring(sync_ptr, words_ptr, row, g, live, c, is_flush, HEADS_PER_GROUP * TILES, committed_ptr,
                         flush_at_ptr, slot, window, GROUPS, COUNT_DONE, FENCE)
    else:
        pid_p = t % TILES
        h = (t // TILES) % HEADS
        row = (t // PER_ROW).to(tl.int64)
        g = h // HEADS_PER_GROUP
        offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
        offs_n = tl.arange(0, BLOCK_N)
        offs_j = tl.arange(0, BLOCK_J)
        mask_p = offs_p < P
        mask_n = offs_n < N
        slot, live = _slot_of(idx_ptr, row, pad_slot_id, HAS_INDICES)
        word = word_of(words_ptr, row, g, live, GROUPS)
        # The row's c and flush flag come with the word (ring_sync.py). A row known to flush reads
        # no tile here (the flush launch folds it); where the word is not there yet (the launch's
        # first programs) the tile is loaded on the guess that the row does not, and is in flight
        # while the program waits.
        known_flush = ((word & 0xFFFF) != 0) & word_flushes(word)
        live_p = offs_p < tl.where(live & (known_flush == 0), P, 0)
        S = _checkpoint_tile(ckpt_ptr + slot * s_ck_slot + h * s_ck_head + offs_p[:, None] * s_ck_p + offs_n[None, :],
                             live_p, mask_n)
        if live:
            word = await_word(words_ptr, row, g, word, GROUPS, FENCE)
        c = tl.where(live, word_ring_length(word), 0)
        is_flush = live & word_flushes(word)
        if not is_flush:
            y = _stream_tile(
                ckpt_ptr, ring_x_ptr, ring_B_ptr, coef_ptr, committed_ptr, flush_at_ptr, x_ptr, B_ptr, C_ptr, D_ptr,
                z_ptr, window, row, h, g, slot, live, c, is_flush, offs_p, offs_n, offs_j, mask_p, mask_n,
                s_ck_slot, s_ck_head, s_ck_p, s_rx_slot, s_rx_head, s_rx_j, s_rB_slot, s_rB_group, s_rB_j,
                s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head,
                None, None, None, 0, 0, 1,
                HEADS, HEADS_PER_GROUP, P, N, CAP, BLOCK_J, HAS_D, HAS_Z, "loop", RING_PREFETCH, False, RING_X, False,
                False, S,
            )
            tl.store(y_ptr + row * s_y_row + h * s_y_head + offs_p, y.to(y_ptr.dtype.element_ty), mask=mask_p)
