"""Batch 1 (or any small batch), the standard step against the ReplaySSM step timed in pairs.

The plain benchmark times each step's graph in its own block of replays, so drift between the
blocks (clocks, the machine's other tenants) enters their ratio: Mamba-2's batch 1 has read
0.95-1.05x across calls. Here both graphs are replayed alternately in every round, each after an
L2 flush and event-timed as ``_timing.time_replays`` does, and the ratio is taken per round.

    PYTHONPATH=$PWD python3 benchmarks/probe_batch1_paired.py [--batches 1 4] [--dims nemotron_h] [--rounds 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import WARMUP_ROUNDS, L2Flusher, capture_graph, device_info, graph_floor_us, time_replays  # noqa: E402
from bench_mamba2_decode import DIMS, WINDOW, _inputs  # noqa: E402

from trtllm_replayssm.config import ReplaySSMConfig  # noqa: E402
from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, decode  # noqa: E402


def paired(dims, batch, dtype, flush, rounds):
    """``(standard us, replay us, per-round replay / standard ratios)``; the replay step at its
    default launch for ``batch`` (the write-through step below batch 16), every slot at phase 0."""
    heads, head_dim, d_state, groups = dims
    x, dt, A, B, C, D, z, dt_bias = _inputs(batch, *dims, dtype)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    y_std, y_rep = torch.empty_like(x), torch.empty_like(x)
    ssm = torch.randn(batch, heads, head_dim, d_state, device="cuda") * 0.1
    state = Mamba2ReplayState.allocate(batch, heads, head_dim, d_state, groups, ReplaySSMConfig(window=WINDOW),
                                       activation_dtype=dtype, device="cuda")
    state.checkpoint.normal_(0, 0.1)
    std = capture_graph(lambda: decode.standard_step(ssm, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1,
                                                     out=y_std))
    rep = capture_graph(lambda: decode.replay_step(state.checkpoint, state.ring_x, state.ring_dt, state.ring_B,
                                                   state.committed, state.flush_at, state.window, x, dt, A, B, C, D,
                                                   z, dt_bias, True, None, None, idx, -1, out=y_rep))

    def at_phase_zero():
        # A write-through step keeps (0, window); a replay step moves the cursors: reset either way.
        state.committed.zero_()
        state.flush_at.fill_(state.window)
        flush()

    time_replays([std, rep], rounds=WARMUP_ROUNDS, flush=at_phase_zero)
    times = time_replays([std, rep], rounds=rounds, flush=at_phase_zero)
    ratios = [t[0] / t[1] for t in times]
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times), ratios


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[1])
    p.add_argument("--dims", nargs="+", default=["nemotron_h", "nemotron3_nano"], choices=sorted(DIMS))
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = p.parse_args(argv)
    if any(b < 1 for b in args.batches) or args.rounds < 2:
        p.error(f"--batches: expected >= 1, --rounds: expected >= 2; got {args.batches}, {args.rounds}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    flush = L2Flusher()
    print(f"# {device_info()}; graph floor {graph_floor_us(flush):.1f} us; {args.rounds} paired rounds")
    print("| dims | batch | standard us | replay us | x standard: median of rounds (10th-90th percentile) |")
    print("|---|---|---|---|---|")
    for name in args.dims:
        for batch in args.batches:
            s, r, ratios = paired(DIMS[name], batch, getattr(torch, args.dtype), flush, args.rounds)
            q = statistics.quantiles(ratios, n=10)
            print(f"| {name} | {batch} | {s:.2f} | {r:.2f} | {statistics.median(ratios):.3f} ({q[0]:.3f}-{q[-1]:.3f}) |",
                  flush=True)


if __name__ == "__main__":
    main()
