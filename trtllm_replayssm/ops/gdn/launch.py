"""Launch choices of the delta-rule decode kernels, measured on an H200 (benchmarks/NOTES_delta.md):
the tiles of the standard, write-through and row-wise replay steps, and :func:`default_variant`,
the replay kernel the ops launch when none is named (``decode.REPLAY_VARIANT``), with the
batches where that choice changes. The kernels are in ``decode*.py``."""

from __future__ import annotations

__all__ = ["FUSED_FROM", "KDA_READ_STAGES_FROM", "REREAD_FROM", "WRITE_THROUGH_BELOW", "default_variant",
           "launch_config", "replay_config", "write_through_config"]

#: Gated DeltaNet's cached-``u`` flush reads its tile again for the fold from this batch
#: (``StagedVariant.flush_reread``; see :func:`default_variant`). On an H200 the held tile led at
#: batch 128 and the re-read fold at 160, 192, 224 (amortized 118.2 / 142.2 / 162.0 us against
#: 121.2 / 144.9 / 165.0), 256 and 512.
REREAD_FROM = 160

#: Gated DeltaNet's cached-``u`` step is the one-launch step (``decode_fused.py``, 64-row programs
#: walking their tile in pipelined column chunks, the flush's product in three bf16 passes) from
#: this batch, where a 16-entry ring and ``d_v`` a multiple of 64 allow it (see
#: :func:`default_variant`). On an H200, one call (twentieth run; staged step -> one-launch,
#: us): batch 128 amortized 100.6 -> 95.6, staggered in steady state 102.3 -> 100.8 (from one
#: phase offset 102.8 -> 103.7); 256 181.9 -> 174.5, 179.8 -> 177.5 (182.0 -> 180.5); 512 in an
#: earlier call 330.5 -> 327.5, 335.8 -> 328.5; 128 again on another H200 100.2 -> 96.0, 101.0 ->
#: 100.9 (102.3 -> 103.2). At 64 it led amortized (59.3 -> 54.9) and tied
#: the steady staggered step (61.3 -> 61.7), trailing from one offset (61.7 -> 65.4): its flush
#: rows' programs, ~2.7x a non-flush one, spread one row in L through the grid, where the staged
#: step's side-stream flush launch takes them first. With two TF32 passes for its fold it had
#: trailed the staged step's staggered steps at 128 and 256 by 2-5%. Since the third stage and the
#: unrolled re-read (twenty-first run) it also leads below 128 (twenty-seventh run, two timings in
#: one call, staged -> one-launch, amortized / steady staggered / one offset us): 112 89.1-89.4 ->
#: 83.1 / 90.5-90.6 -> 87.1-87.3 / 91.3-91.5 -> 88.9-89.1; 96 79.0-79.2 -> 73.4-73.5 / 79.2-79.4
#: -> 77.8-77.9 / 79.3-79.8 -> 79.1-79.5; 80 69.0-69.2 -> 63.8-63.9 / 70.1 -> 68.8-68.9 / 70.8 ->
#: 70.2-71.5; at 64 it leads amortized (58.5 -> 54.2) and ties the steady staggered step (59.6-59.8
#: -> 59.7) but trails from one offset (60.0-60.5 -> 61.8-62.3), so the staged step keeps 64.
FUSED_FROM = 80

#: KDA's cached-``u`` step streams its checkpoint in 32-row tiles walked in 32-column chunks
#: through a 2-stage pipeline from this batch (``StagedVariant(block_v=32, read_stages=2)``, the
#: one-launch step's chunk loop in the staged stream launch). On an H200 (Kimi-Linear-like dims,
#: bf16, twenty-second run; amortized / steady staggered us against the 8-row tiles): batch 128
#: 111.1-111.3 / 110.1-110.5 against 112.0-112.1 / 110.9-111.1 (two calls), 256 203.7 / 203.6-203.8
#: against 208.6-209.1 / 204.8-205.1 (the aligned flush 555 -> 505 us: a quarter of the stream
#: programs beside the flush launch), 512 386.1 / 386.6 against 396.1 / 388.7; at 64 it trailed
#: (64.1 / 63.1 against 63.6 / 61.7). Three stages: within 1 us at 256 and 512, slower staggered.
KDA_READ_STAGES_FROM = 128

#: Batches below this take the write-through step when no variant is named (on an H200 it led
#: the staged step at batch 32 and trailed it at 40).
WRITE_THROUGH_BELOW = 33


def default_variant(batch: int, per_channel: bool, refold: bool, d_v: int, capacity: int = 16):
    """The replay kernel the ops launch when no variant is named: ``"write_through"``, a
    :class:`~trtllm_replayssm.ops.gdn.decode_staged.StagedVariant`, a
    :class:`~trtllm_replayssm.ops.gdn.decode_fused.FusedVariant`, or ``None`` for the row-wise
    kernel; ``capacity``: the ring's entries.

    Measured on an H200 (``benchmarks/bench_gdn_decode.py --variants`` / ``bench_kda_decode.py``,
    RESULTS.md; Qwen3.5-4B GDN dims, Kimi-Linear KDA dims, bf16):

    - below batch :data:`WRITE_THROUGH_BELOW`, both kinds: the write-through step (a flush at
      every token on the standard step's tiles, 8 rows and one warp): at these sizes the
      replay's ring work is a latency chain, not bytes saved. Batch 1 / 8 / 16 / 31: GDN 6.5 /
      14.5 / 22.5 / 39.4 us against fla's 6.9 / 14.4 / 22.7 / 37.0 us and the row-wise
      kernel's 9.5 / 20.8 / 32.1 / 53.1 us; KDA 6.5 / 14.7 / 22.9 / 37.4 us against fla's 8.7 /
      17.6 / 28.6 / 49.1 us (row-wise 11.2 / 35.6 / 44.4 / 74.3 us). At batch 32 it still leads
      the staged step (GDN 38.8 / 40.6 us, KDA 40.3 / 42.8 us, refolding), at 40 it trails it
      (GDN 47.6 / 46.3, KDA 51.6 / 50.8; the staged step's staggered steps 41.5 / 48.6), at 64
      by 9-16 us;
    - from batch 33, both kinds: the staged step with one-warp ring and stream programs (their
      reductions over ``d_k`` stay inside a warp: the ring launch 24.5 -> 12.2 us for GDN,
      88.8 -> 28.3 us for KDA) and the flush rows' tiles in a list launch on a side stream
      (under the stream launch; for KDA's dot fold after it), 8-row stream tiles. A flush that
      folds the cached ``u`` (``refold=False``) folds each tile as one product: GDN 16-row tiles
      in two TF32 passes, 8 one-warp programs per SM (batch 256 amortized 190.0 us against 194.7
      us with the earlier tf32x3 fold of 32-row tiles; 1.35x fla's step with that one), KDA
      two 16-row tiles of a head per list item in tf32x3, 4 two-warp programs per SM (225.8 us =
      1.68x fla's 378.5 us); a refolding flush walks 16-row tiles with 16 one-warp programs per SM
      (GDN 206.0 us = 1.27x, staggered 211.9 us against 277.8 us row-wise; KDA 230.3 us =
      1.66x, staggered 236.3 us against 342.6 us). At batch 32 / 64 they also beat the row-wise
      kernel (GDN 38.6 / 61.2 us against 54.5 / 77.8 us with ``refold=False``, 40.2 / 63.1 us refolding;
      KDA 42.5 / 70.1 us refolding and 74.3 us at 64 with ``refold=False``, against 61.4 /
      87.0 us; staggered about half the row-wise kernel's);
      KDA's ring launch forms the decayed keys over two halves of the ring (``ring_halves``):
      batch 256 amortized 219.0 us (``refold=False``) / 219.6 us (refolding) = 1.73x / 1.72x
      fla's 378.3 us, from 225.8 / 231.5 us without; the refolding flush loads each update's
      ring entry one update ahead (``refold_prefetch``, 128 registers): GDN 206.0 -> 202.4 us
      (1.29x fla), KDA 220.1 -> 218.2 us (1.73x) at batch 256; KDA's cached-``u`` flush folds
      first (``fold_first``, a head's four 32-row tiles per item, 4 warps, beside the stream
      launch): 206.4 us = 1.86x fla over its 15-token cycle against 219.1 us refolding; from
      batch :data:`REREAD_FROM` (160) GDN's cached-``u`` flush reads its tile again for the fold
      (``flush_reread=64``): batch 256 amortized 185.2 -> 182.3 us, 512 351.8 -> 340.6 us (the
      staged step's GDN fold in three bf16 passes since the twentieth run);
    - from batch :data:`FUSED_FROM` (80), Gated DeltaNet's cached-``u`` step (``refold=False``)
      with a ring of at most 16 entries (``capacity``; a wider ring's ``[32, d_k]`` terms spill)
      and ``d_v`` a multiple of 64: the one-launch step
      (:class:`~trtllm_replayssm.ops.gdn.decode_fused.FusedVariant`, 64-row programs, the tile
      walked in 32-column chunks through a 3-stage pipeline, the fold in three bf16 passes, a
      flush row's re-read unrolled into registers):
      batch 256 amortized 181.9 -> 174.5 us, steady staggered 179.8 -> 177.5 us (see
      :data:`FUSED_FROM`; 2 stages then); the unrolled re-read then flush 412.8 -> 403.0 us,
      steady staggered 178.0 -> 176.0 us (128: 219.9 -> 207.3, 100.9 -> 98.4 us), which left the
      registers and shared memory for a third stage: amortized 174.8 -> 170.6 us, steady
      staggered 175.9 -> 172.0 us (128: 95.3 -> 93.1, 98.6 -> 97.1 us);
    - from batch :data:`KDA_READ_STAGES_FROM` (128), KDA's cached-``u`` step: the staged stream
      launch reads 32-row tiles in 32-column chunks through a 2-stage pipeline
      (``read_stages=2``): batch 256 amortized 208.6 -> 203.7 us, 512 396.1 -> 386.1 us;
    - otherwise (``d_v`` not a multiple of 32 from batch 33) the row-wise kernel.
    """
    if batch < WRITE_THROUGH_BELOW:
        return "write_through"
    if batch >= FUSED_FROM and not per_channel and not refold and d_v % 64 == 0 and capacity <= 16:
        from .decode_fused import FusedVariant

        return FusedVariant(block_v=64, stages=3, flush_stages=0)
    if d_v % 32 == 0:
        from .decode_staged import StagedVariant

        # 8-row stream tiles, both kinds: 64 registers, so 32 one-warp programs per SM (16-row
        # tiles take 122-123 and halve that; the KDA stream launch 169.4 -> 146.8 us at batch 256).
        # The ring programs load the token beside the slot (ring_token_first) and KDA's take their
        # decayed keys' exponentials as ex2.approx.ftz (ring_fast_exp): KDA ring launch 25.2 ->
        # 22.9 us under Nsight Compute at batch 256 (ring length 8); non-flush 181.8 -> 180.4 /
        # 100.2 -> 99.2 us, amortized 203.4 -> 201.9 / 110.9 -> 109.9 us at 256 / 128; GDN at 64
        # 54.4 -> 54.1 / 59.3 -> 59.0 us (twenty-third run).
        stream = dict(block_v=8, num_warps=1, ring_warps=1, raw_qk=not per_channel, flush_launch=True,
                      ring_token_first=True, ring_fast_exp=per_channel)
        if per_channel:
            # KDA's ring terms over two halves of the ring (the later one only once the window
            # reaches it): ring launch 168 -> 96 registers on sm_90; batch 256 non-flush 192.5 ->
            # 185.6 us, amortized 225.8 -> 219.0 us (refolding 231.5 -> 219.6 us), batch 128
            # 124.1 -> 119.1 / 118.3 us.
            stream["ring_halves"] = True
        if refold:
            # Each update's ring entry loaded one update ahead, held to 128 registers (16 one-warp
            # programs per SM; uncapped, KDA's took 168): batch 256 flush 749 -> 699 us (GDN) and
            # 770 -> 745 us (KDA), amortized 206.0 -> 202.4 / 220.1 -> 218.2 us.
            return StagedVariant(**stream, flush_stream=True, flush_block_v=16, flush_warps=1, flush_persistent=16,
                                 refold_prefetch=1, flush_max_registers=128)
        if not per_channel:
            # A scalar decay and 16-bit keys: the dot fold in two TF32 passes (ops/_tf32.py), in
            # 16-row one-warp programs (221 registers, 8 per SM), beside the stream launch: flush
            # 593 -> 525 us, amortized 194.7 -> 190.0 us at batch 256 (fp32 rings: tf32x3).
            # From REREAD_FROM (160) the fold reads the tile again in 64-column chunks after u_t instead of
            # holding it (flush_reread; 168 registers): flush 487.8 -> 421.2 us, amortized 185.2 ->
            # 182.3 us, staggered 187.2 -> 182.1 us at 256; 984 -> 770 / 351.8 -> 340.6 us at 512.
            # At 128 the stream launch beside that list kernel ran ~10 us slower (non-flush 90.9 ->
            # 101.4 us; amortized 100.8 -> 108.2), so batch 128 holds the tile; at 160-224 the
            # re-read fold led by ~3 us amortized, ~5 us staggered.
            # The product in three bf16 passes (bf16 rings; two TF32 passes for fp16): batch 64
            # flush 134.9 -> 132.5 us, steady staggered 61.3 -> 60.5 us; 128 248.1 -> 241.2 /
            # 102.3 -> 101.2 us; with the re-read fold at 256 within noise (418.9 / 419.8 us).
            return StagedVariant(**stream, flush_stream=True, flush_dot=True, flush_precision="bf16x3",
                                 flush_persistent=8, flush_block_v=16, flush_warps=1,
                                 flush_reread=64 if batch >= REREAD_FROM else 0)
        # KDA's per-channel decays keep tf32x3; the flush folds first (fold_first: the window's
        # entries alone, the token then reads the new checkpoint as entry 0 of the next window,
        # so no S k_t reduction stands between a tile's load and its store). A list item is a
        # whole head in four 32-row tiles (4 warps; 3 per SM when this was timed), the decayed
        # keys Kd [CAP, d_k] and their TF32 split made once for them, beside the stream launch.
        # Batch 256, graph replays through the cycle (profile_delta_step.py --timeline): non-flush
        # 181.7 us, flush 559.2 us, amortized over 15 tokens 206.9 us, against two tiles per item
        # 182.4 / 662.2 / 214.4 us and the eager fold of two 16-row tiles (2 warps) after the
        # stream launch 185.7 / 724.7 / 219.4 us. (With the tiles unrolled the kernel took 50.5 KB
        # of shared memory, over the 48 KB a block gets without opting in, and the stream launch
        # beside it ran 172 us instead of 148: non-flush 206.6 us.)
        # From KDA_READ_STAGES_FROM the stream launch reads 32-row tiles in pipelined chunks.
        read = dict(block_v=32, read_stages=2) if batch >= KDA_READ_STAGES_FROM else {}
        # Held to 128 registers the list kernel fits 4 programs per SM instead of 3 (166 registers
        # uncapped; 8 B spilled at batch 256, 32 at 1024): one call, flush / amortized us, 64 141.8
        # -> 130.2 / 63.3 -> 62.3, 128 260.0 -> 245.3 / 110.1 -> 109.5, 256 504.0 -> 468.3 / 202.1
        # -> 200.1, 512 984.2 -> 932.4 / 383.5 -> 380.4 (twenty-fourth run).
        return StagedVariant(**{**stream, **read}, flush_stream=True, flush_dot=True, flush_persistent=4,
                             flush_max_registers=128, flush_block_v=32, flush_warps=4, flush_item_tiles=4,
                             fold_first=True)
    return None


def launch_config(rows: int, v_heads: int, d_k: int, d_v: int) -> tuple[int, int]:
    """``(BV, num_warps)`` of the standard step: rows of ``S`` per program and warps.

    One warp per program keeps the ``d_k`` reductions inside a warp; 4-row tiles below 1024
    (row, head) pairs fill the SMs at small batches. On an H200 (Qwen3.5-4B GDN dims, bf16)
    against the earlier 8-32-row 2-4-warp tiles: batch 1 7.1 -> 6.1 us, 16 24.5 -> 21.6 us,
    256 271.3 -> 264.6 us (fla's kernel 6.9 / 22.7 / 261.0 us); KDA dims at 256 293.2 -> 267.1 us.
    """
    bv = 4 if rows * v_heads < 1024 else 8
    return min(bv, d_v), 1


def write_through_config(rows: int, v_heads: int, d_k: int, d_v: int) -> tuple[int, int]:
    """``(BV, num_warps)`` of the write-through step: 8-row one-warp tiles at every batch it
    serves (on an H200 below batch 32 within 0.7 us of 4-row tiles either way)."""
    return min(8, d_v), 1


def replay_config(rows: int, v_heads: int, d_k: int, d_v: int, block_v: int | None = None,
                  split: int | None = None) -> tuple[int, int, int]:
    """``(BV, SPLIT, num_warps)`` of the ReplaySSM step: BV-row blocks of ``S``, programs per head.

    A program computes its head's ring terms once and streams ``d_v / SPLIT`` rows; small batches
    split a head over more programs (about 2048 in all) so that every SM has work.
    """
    bv = block_v or (16 if d_k >= 256 or rows * v_heads < 1024 else 32)
    bv = min(bv, d_v)
    if split is None:
        split = 1
        while split < d_v // bv and rows * v_heads * split < 2048:
            split *= 2
    return bv, split, 4
