"""What the L2 flush between timed replays leaves to the replay it times.

Every decode benchmark here times graph replays with the L2 flushed before each
(``_timing.L2Flusher``). A flush that zeroes a buffer four times the L2's size (``"write"``, the
benchmarks' default and every table so far) leaves the last L2-full of zeros dirty, and the
timed replay writes them back among its own traffic; one that sums the buffer (``"read"``)
leaves clean lines, which cost nothing to evict, as a model's weight reads leave them. This probe
times the same graphs after each flush, the two modes taking turns:

- ``floor``: a one-word kernel (the graph floor of every table; it evicts nothing);
- ``read``: a read of ``--gib`` GiB, one fp32 sum kept per 16 KB (the non-flush step's traffic);
- ``read+y``: the same read storing one bf16 sum per 512 bytes read (the non-flush step's ``y``
  among its checkpoint reads: stores of 1/256 of the bytes read cost it ~10 us under the write
  flush, thirty-sixth and thirty-seventh runs);
- ``rmw``: the same bytes scaled in place (a read and a write of every line: the standard step's);
- ``copy``: the same bytes copied into a second buffer.

The difference between the modes is what a timed replay pays for the flush's dirty lines.

    PYTHONPATH=$PWD python3 benchmarks/probe_l2_flush.py [--gib 1] [--rounds 30] [--repeats 3] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import positive_int  # noqa: E402
from _timing import (L2_FLUSH_MODES, L2Flusher, _triton_copy, capture_graph, device_info,  # noqa: E402
                     warmed_median)

BLOCK = 4096  # fp32 per program: 16 KB
ROW = 128  # fp32 a row sum covers in ``read+y`` (a checkpoint row at d_state 128)


@triton.jit
def _read_kernel(src, out, n, BLOCK: tl.constexpr):
    """Sum a block; store it only if it equals a value zeros never sum to (so nothing is stored,
    but no load can be left out)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    total = tl.sum(tl.load(src + offs, mask=offs < n, other=0.0), axis=0)
    tl.store(out + tl.program_id(0), total, mask=total == 1.0e30)


@triton.jit
def _row_sums_kernel(src, out, ROWS: tl.constexpr, COLS: tl.constexpr):
    """``out[r] = sum(src[r, :])`` in bf16 over ``ROWS`` rows of ``COLS`` fp32 a program."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    tile = tl.load(src + rows[:, None] * COLS + tl.arange(0, COLS)[None, :])
    tl.store(out + rows, tl.sum(tile, axis=1).to(tl.bfloat16))


@triton.jit
def _scale_kernel(buf, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(buf + offs, tl.load(buf + offs, mask=mask) * scale, mask=mask)


def kernels(nbytes: int, device: str = "cuda") -> dict:
    """The probe's launches over ``nbytes`` of fp32 zeros (each replayable as it stands)."""
    n = nbytes // 4
    src = torch.zeros(n, dtype=torch.float32, device=device)
    dst = torch.zeros_like(src)
    grid = (triton.cdiv(n, BLOCK),)
    out = torch.zeros(grid[0], dtype=torch.float32, device=device)
    sums = torch.zeros(n // ROW, dtype=torch.bfloat16, device=device)
    word = torch.zeros(1, dtype=torch.float32, device=device)
    return {
        "floor": lambda: _scale_kernel[(1,)](word, 1, 1.0, BLOCK=16),
        "read": lambda: _read_kernel[grid](src, out, n, BLOCK=BLOCK, num_warps=8),
        "read+y": lambda: _row_sums_kernel[(n // BLOCK,)](src, sums, ROWS=BLOCK // ROW, COLS=ROW, num_warps=8),
        "rmw": lambda: _scale_kernel[grid](src, n, 1.0, BLOCK=BLOCK, num_warps=8),
        "copy": lambda: _triton_copy(src, dst),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=positive_int, default=1, help="GiB each kernel reads")
    p.add_argument("--rounds", type=positive_int, default=30)
    p.add_argument("--repeats", type=positive_int, default=3, help="turns of the two modes per kernel")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    flushers = {mode: L2Flusher(mode=mode) for mode in L2_FLUSH_MODES}
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"# {device_info()}; L2 {l2 >> 20} MiB, flush buffer {flushers['read'].buffer.numel() * 4 >> 20} MiB; "
          f"{args.gib} GiB a kernel; median of {args.rounds} replays, {args.repeats} turns a mode")
    print("| kernel | after a write flush, us | after a read flush, us | difference, us |")
    print("|---|---|---|---|")
    rows = []
    for name, fn in kernels(args.gib << 30).items():
        graph = capture_graph(fn)
        times: dict[str, list[float]] = {mode: [] for mode in L2_FLUSH_MODES}
        for turn in range(args.repeats):
            order = L2_FLUSH_MODES if turn % 2 == 0 else L2_FLUSH_MODES[::-1]
            for mode in order:
                times[mode].append(warmed_median(graph, args.rounds, flushers[mode]))
        w, r = times["write"], times["read"]
        diff = [a - b for a, b in zip(w, r)]
        print(f"| {name} | {min(w):.1f}-{max(w):.1f} | {min(r):.1f}-{max(r):.1f} | "
              f"{min(diff):+.1f} to {max(diff):+.1f} |", flush=True)
        rows.append({"kernel": name, "write_us": w, "read_us": r})
    if args.json:
        args.json.write_text(json.dumps({"device": device_info(), "gib": args.gib, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
