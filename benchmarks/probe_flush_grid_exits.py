"""What a flush launch in grid form would cost Gated DeltaNet's steps that have no flush row.

The window fold runs at 99% of copy at Gated DeltaNet's dims as a grid of small blocks and at
92% as a fixed wave of the same blocks (``bench_fold_ceiling.py``, NOTES_delta.md, thirty-first
run). A CUDA graph fixes a launch's grid, so a flush launch in grid form has a block for every
(row, item) of the batch, and in a step without flush rows every block reads its row's cursors
and exits. This probe times that cost beside the ops' default step at a non-flush phase: a
stand-in launch of ``batch x items`` blocks of ``--warps`` warps that load the cursors and exit,
alone, before the step and after it, in one graph each, replayed with the L2 flushed and every
row reset to ring length ``--committed`` first.

    PYTHONPATH=$PWD python3 benchmarks/probe_flush_grid_exits.py [--batches 128 256] [--items 16 32 64]
        [--warps 8] [--committed 7] [--rounds 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import positive_int  # noqa: E402
from _delta_layer import Cursors, Layer, replay_fn  # noqa: E402
from _timing import L2Flusher, capture_graph, device_info, graph_floor_us, time_warmed  # noqa: E402

WINDOW = 16
#: Qwen3.5-4B: (value heads, key heads, d_k, d_v), as bench_gdn_decode.py times it.
DIMS = (32, 16, 128, 128)


@triton.jit
def _exit_blocks(committed, flush_at, word, ITEMS: tl.constexpr):
    """One block of a grid-form flush launch: its row's cursors, then nothing unless it flushes."""
    row = tl.program_id(0) // ITEMS
    c = tl.load(committed + row)
    if c + 1 >= tl.load(flush_at + row):
        tl.atomic_add(word, 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=positive_int, nargs="+", default=[128, 256])
    p.add_argument("--items", type=positive_int, nargs="+", default=[16, 32, 64],
                   help="blocks per batch row (64-row blocks of each value head: 64; whole value heads: 32)")
    p.add_argument("--warps", type=int, default=8)
    p.add_argument("--committed", type=int, default=7, help="every row's ring length (a non-flush phase)")
    p.add_argument("--rounds", type=positive_int, default=30)
    args = p.parse_args(argv)
    if args.warps not in (1, 2, 4, 8, 16, 32):
        p.error(f"--warps: expected a power of two up to 32, got {args.warps}")
    if not 0 <= args.committed < WINDOW - 1:
        p.error(f"--committed: expected a non-flush ring length in [0, {WINDOW - 2}], got {args.committed}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    flusher = L2Flusher()
    print(f"# {device_info()}; graph floor {graph_floor_us(flusher):.1f} us; ring length {args.committed}, "
          f"{args.warps}-warp exit blocks, median of {args.rounds} replays")
    print("| batch | exit blocks | step alone us | exits alone us | exits, then the step us "
          "| the step, then exits us |")
    print("|---|---|---|---|---|---|")
    layer = Layer("gdn", *DIMS, torch.bfloat16, WINDOW)
    word = torch.zeros(1, dtype=torch.int32, device="cuda")
    for batch in args.batches:
        x = layer.tokens(batch)
        idx = torch.arange(batch, dtype=torch.int32, device="cuda")
        state = layer.state(batch)
        phase = [torch.full((batch,), args.committed, dtype=torch.int32, device="cuda")]
        step = replay_fn(layer, state, x, idx, refold=False)

        reset = Cursors(state, phase, flusher)

        def timed(fn):
            reset()  # the capture's warm-up calls move the cursors two entries on
            return time_warmed([capture_graph(fn)], args.rounds, reset)

        alone = timed(step)
        for items in args.items:
            blocks = batch * items

            def exits(blocks=blocks, items=items):
                _exit_blocks[(blocks,)](state.committed, state.flush_at, word, ITEMS=items, num_warps=args.warps)

            before = timed(lambda: (exits(), step()))
            after = timed(lambda: (step(), exits()))
            print(f"| {batch} | {blocks} | {alone:.1f} | {timed(exits):.1f} | {before:.1f} | {after:.1f} |",
                  flush=True)
        assert int(word.item()) == 0, "a non-flush phase must not flush"


if __name__ == "__main__":
    main()
