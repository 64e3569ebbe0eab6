"""Row sums of a checkpoint tile walked in column chunks, summed inside each thread first.

A ``[rows, KC]`` chunk loaded in Triton's blocked layout holds four consecutive columns per
thread, so the chunk's products with a vector summed over those four stay in the thread; the
``[rows, KC / 4]`` partials add up chunk by chunk and cross lanes once, after the loop, instead
of one cross-lane reduction per chunk (H200, Gated DeltaNet's one-launch step: flush 433.5 ->
431.1 us at batch 256, non-flush 0.6-1.1 us less; benchmarks/NOTES_delta.md, twentieth run).
Used by the one-launch delta-rule step, the staged step's chunked read and Mamba-2's v4
``pipeline="cols"``.
"""

import triton
import triton.language as tl

__all__ = ["chunk_partials"]


@triton.jit
def chunk_partials(S, v, ROWS: tl.constexpr, KC: tl.constexpr):
    """``[ROWS, KC // 4]`` partial row sums of ``S * v`` (``S`` ``[ROWS, KC]`` fp32, ``v``
    ``[KC]`` fp32), four consecutive columns per partial; ``tl.sum(..., axis=1)`` of their total
    over the chunks is ``S v`` over the whole row."""
    return tl.sum(tl.reshape(S * v[None, :], [ROWS, KC // 4, 4]), axis=2)
