"""Device time of each kernel launch of one Mamba-2 ReplaySSM step (the staged step's ring and
stream launches, or a one-launch kernel), non-flush and flush steps apart, from the CUDA
profiler. Complements ``bench_mamba2_decode.py``, which times whole steps.

    PYTHONPATH=$PWD python3 benchmarks/profile_mamba2_step.py --batch 256 [--timeline] [--derive "ring_warps=1, flush_max_registers=128"]

``--timeline`` also replays each step as the benchmark does (a CUDA graph, L2 flushed before
each replay) under the profiler and prints when each kernel starts and ends within the replay,
and the replay's event-timed length: what the graph's launch and dependency edges add.
``--derive`` adds configurations (``field=value, ...`` replacing fields of the default one),
each on a fresh state, after the default.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, decode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _derive import label, parse_fields  # noqa: E402
from _timing import L2Flusher, capture_graph, graph_timeline  # noqa: E402

WINDOW = 16


def kernel_times(fn, steps: int) -> dict[str, float]:
    """Mean device microseconds per step of every CUDA kernel ``fn`` launches."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    out = defaultdict(float)
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            out[evt.name] += evt.device_time / steps
    return dict(out)


def print_timeline(label: str, replays: list[dict]) -> None:
    """Median start / end of each kernel (by its place in the replay) over ``replays``."""
    if not replays:
        return
    names = [k[0] for k in replays[0]["kernels"]]
    same = [r for r in replays if [k[0] for k in r["kernels"]] == names]
    us = statistics.median(r["us"] for r in same)
    span = statistics.median(max(k[2] for k in r["kernels"]) for r in same)
    print(f"  timeline {label}: {len(same)} replays, event-timed {us:.1f} us, first kernel start to last end {span:.1f} us")
    for i, name in enumerate(names):
        start = statistics.median(r["kernels"][i][1] for r in same)
        end = statistics.median(r["kernels"][i][2] for r in same)
        print(f"    {name[:56]:<56} {start:8.1f} .. {end:8.1f} us")


def timeline(step, window: int, replays: int = 4) -> None:
    """Per-kernel timeline of ``step``'s graph replays: the non-flush and the flush steps apart."""
    flusher = L2Flusher()
    graph = capture_graph(step)
    runs = graph_timeline(graph, replays * window, flusher)
    longest = max(r["us"] for r in runs)
    print_timeline("non-flush", [r for r in runs if r["us"] < 0.7 * longest])
    print_timeline("flush", [r for r in runs if r["us"] >= 0.7 * longest])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[256])
    p.add_argument("--dims", type=int, nargs=4, default=[128, 64, 128, 8], metavar=("HEADS", "HEAD_DIM", "D_STATE", "GROUPS"))
    p.add_argument("--timeline", action="store_true", help="also trace graph replays kernel by kernel")
    p.add_argument("--derive", nargs="+", default=[], metavar="FIELDS",
                   help="also profile these: 'field=value, ...' replacing fields of the default LaunchConfig")
    args = p.parse_args(argv)
    heads, head_dim, d_state, groups = args.dims
    derived = [parse_fields(spec, decode.LaunchConfig) for spec in args.derive]
    for batch in args.batch:
        default = decode.launch_config("replay", head_dim, d_state, batch, gpu=decode.gpu_name("cuda"))
        for fields in [{}] + derived:
            cfg = dataclasses.replace(default, **fields)
            print(f"batch {batch}, dims {tuple(args.dims)}, " + (f"default + {label(fields)}" if fields else "default"))
            profile_config(batch, args.dims, cfg, args.timeline, standard_too=not fields)


def profile_config(batch, dims, cfg, with_timeline: bool, standard_too: bool) -> None:
    """Kernel times (and the timeline) of the step under ``cfg`` on a fresh in-phase state."""
    heads, head_dim, d_state, groups = dims
    state = Mamba2ReplayState.allocate(batch, heads, head_dim, d_state, groups, ReplaySSMConfig(window=WINDOW, flush_stagger=False),
                                       activation_dtype=torch.bfloat16, device="cuda")
    state.checkpoint.normal_(0, 0.1)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(batch, heads, head_dim, device="cuda", generator=g).to(torch.bfloat16)
    z = torch.randn_like(x)
    dt = torch.randn(batch, heads, device="cuda", generator=g)
    B = (torch.randn(batch, groups, d_state, device="cuda", generator=g) / d_state**0.5).to(torch.bfloat16)
    C = torch.randn(batch, groups, d_state, device="cuda", generator=g).to(torch.bfloat16)
    A = -torch.rand(heads, device="cuda", generator=g) - 0.5
    D, dt_bias = torch.randn(heads, device="cuda"), torch.randn(heads, device="cuda") * 0.5
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)
    std = state.checkpoint.clone()

    def step():
        decode.replay_step(state.checkpoint, state.ring_x, state.ring_dt, state.ring_B, state.committed,
                           state.flush_at, state.window, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1,
                           out=y, config=cfg)

    def standard():
        decode.standard_step(std, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1, out=y)

    for _ in range(2 * WINDOW):  # compile, then leave every slot at ring position 0 (in phase)
        step()
    standard()
    torch.cuda.synchronize()
    nonflush = kernel_times(step, WINDOW - 1)
    flush = kernel_times(step, 1)
    base = kernel_times(standard, 5)
    print(f"  {cfg}")
    for name in sorted(set(nonflush) | set(flush)):
        print(f"  {name[:60]:<60} non-flush {nonflush.get(name, 0.0):8.1f} us   flush {flush.get(name, 0.0):8.1f} us")
    for name, us in base.items():
        print(f"  standard {name[:51]:<51} {us:8.1f} us")
    if with_timeline:
        timeline(step, WINDOW)
        if standard_too:
            flusher = L2Flusher()
            print_timeline("standard", graph_timeline(capture_graph(standard), 8, flusher))


if __name__ == "__main__":
    main()
