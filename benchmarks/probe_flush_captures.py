"""Timing probe: a Mamba-2 flush step (every row flushes) of launch configurations derived from the
default, capture by capture and state allocation by state allocation.

``bench_mamba2_decode.py --variants`` read the counter-fed warp-specialised flush
(``flush_ws_order="counter"``) at 567 us in some of its graphs and 583-774 us in others at
Nemotron-H 256 (NOTES_mamba2.md, thirty-eighth run); each of its rows allocates a new state and
captures a new graph. This probe separates the two: for each of ``--allocations`` fresh states
it captures ``--captures`` graphs of each configuration and times each graph's flush step
(every row at ring length ``window - 1``, the L2 flushed before each replay, median of
``--rounds``). A time that follows the allocation and not the capture points at where the
checkpoint lies in memory; one that changes capture to capture at the step's scratch (the
counter lives there).

    PYTHONPATH=$PWD python3 benchmarks/probe_flush_captures.py --batch 256 \\
        --derive "" "flush_ws_order=counter, flush_ws_chunk=4" --allocations 3 --captures 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _derive import parse_fields  # noqa: E402
from _timing import L2Flusher, capture_graph, device_info, warmed_median  # noqa: E402

WINDOW = 16


def configs_for(specs: list[str], head_dim: int, d_state: int, batch: int) -> list[tuple[str, object]]:
    """``(label, LaunchConfig)`` per ``--derive`` spec: the default at ``batch`` with the fields replaced."""
    from trtllm_replayssm.ops.mamba2 import decode

    base = decode.launch_config("replay", head_dim, d_state, batch, gpu=decode.gpu_name("cuda"))
    return [(spec.strip() or "default", dataclasses.replace(base, **parse_fields(spec, decode.LaunchConfig)))
            for spec in specs]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dims", type=int, nargs=4, default=[128, 64, 128, 8],
                   metavar=("HEADS", "HEAD_DIM", "D_STATE", "GROUPS"))
    p.add_argument("--derive", nargs="+", default=[""], metavar="FIELDS",
                   help="configurations: 'field=value, ...' replacing fields of the default ('' is the default)")
    p.add_argument("--allocations", type=int, default=3)
    p.add_argument("--captures", type=int, default=3)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--mixed", type=int, default=0, metavar="N",
                   help="then time the staggered step (bench_mamba2_decode.py's mixed column: every slot in its "
                        "own phase, a fresh state and graph each time) N times per configuration, in turn")
    p.add_argument("--keep", action="store_true",
                   help="keep every allocation alive, so that each new state lies at new addresses")
    args = p.parse_args(argv)
    for name in ("batch", "allocations", "captures", "rounds"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name}: expected >= 1, got {getattr(args, name)}")
    if args.mixed < 0:
        raise SystemExit(f"--mixed: expected >= 0, got {args.mixed}")
    configs = configs_for(args.derive, args.dims[1], args.dims[2], args.batch)
    if not torch.cuda.is_available():
        raise SystemExit("probe_flush_captures.py needs a CUDA GPU")
    from bench_mamba2_decode import _inputs, time_replay

    from trtllm_replayssm.config import ReplaySSMConfig
    from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, decode

    print(device_info())
    print(f"dims {tuple(args.dims)}, batch {args.batch}, bf16, every row flushing, {args.rounds} rounds a graph")
    print("| configuration | allocation | checkpoint address | flush step us per capture |")
    print("|---|---|---|---|")
    flusher = L2Flusher()
    x, dt, A, B, C, D, z, dt_bias = _inputs(args.batch, *args.dims, torch.bfloat16)
    idx = torch.arange(args.batch, dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)
    kept = []
    for alloc in range(args.allocations):
        state = Mamba2ReplayState.allocate(args.batch, *args.dims, ReplaySSMConfig(window=WINDOW),
                                           activation_dtype=torch.bfloat16, device="cuda")
        state.checkpoint.normal_(0, 0.1)
        state.ring_dt.uniform_(0.0, 0.1)  # ring entries a flush folds: small steps, as a model's
        state.ring_x.normal_(0, 1)
        state.ring_B.normal_(0, 1 / args.dims[2] ** 0.5)
        if args.keep:
            kept.append(state)

        def at_flush():
            state.committed.fill_(WINDOW - 1)
            state.flush_at.fill_(WINDOW)
            flusher()

        for label, cfg in configs:
            def step(cfg=cfg):
                decode.replay_step(state.checkpoint, state.ring_x, state.ring_dt, state.ring_B, state.committed,
                                   state.flush_at, state.window, x, dt, A, B, C, D, z, dt_bias, True, None, None,
                                   idx, -1, out=y, config=cfg)

            times = []
            for _ in range(args.captures):
                state.checkpoint.normal_(0, 0.1)  # every replay decays it: fresh values for each graph
                at_flush()
                graph = capture_graph(step)
                times.append(warmed_median(graph, args.rounds, at_flush))
                del graph
            print(f"| {label} | {alloc} | {state.checkpoint.data_ptr():#x} | "
                  + ", ".join(f"{t:.1f}" for t in times) + " |", flush=True)
    if args.mixed:
        kept.clear()
        mixed = {label: [] for label, _ in configs}
        for _ in range(args.mixed):
            for label, cfg in configs:
                phases = time_replay(tuple(args.dims), args.batch, torch.bfloat16, flusher, args.rounds, True, cfg)
                mixed[label].append(sum(phases) / len(phases))
        print("| configuration | staggered step us, in turn |")
        print("|---|---|")
        for label, times in mixed.items():
            print(f"| {label} | " + ", ".join(f"{t:.1f}" for t in times) + " |", flush=True)


if __name__ == "__main__":
    main()
