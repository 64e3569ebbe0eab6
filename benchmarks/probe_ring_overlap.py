"""Timing probe: a staged non-flush step (the delta rules', or Mamba-2's with ``--kind
mamba2``) with its ring launch running beside the stream launch instead of before it. What a
step whose ring and stream programs run together could gain at most (NOTES_delta.md,
twenty-fourth run; NOTES_mamba2.md, thirty-ninth run), measured before building one.

The probe reorders the ops' own launches, nothing else: the ring launch goes to the side stream
(after the current stream, as the flush list launch does), the flush list launch follows it
there, and the stream launch is issued on the current stream without waiting for either; the
step joins the side stream before it returns. The stream programs then read the ring terms and
row flags of the previous replay of the same step (every replay starts at the same ring length
``c``, and the scratch buffers are kept across calls), so they compute with the values a correct
step would, but **outputs and state are not a decode step's**: only the time means anything.

    PYTHONPATH=$PWD python3 benchmarks/probe_ring_overlap.py --kind kda --batches 128 256 --committed 8
    PYTHONPATH=$PWD python3 benchmarks/probe_ring_overlap.py --kind mamba2 --batches 128 256 --committed 8

Prints, per batch, the step as the ops run it and the reordered one (median us of graph replays
with the L2 flushed before each, as the benchmarks time them) and their % of copy bandwidth.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cli import positive_int, require_cuda  # noqa: E402

from _delta_layer import Cursors, Layer, replay_fn  # noqa: E402
from _timing import L2Flusher, capture_graph, copy_bandwidth_gbps, device_info, warmed_median  # noqa: E402

DIMS = {"gdn": (32, 16, 128, 128), "kda": (32, 32, 128, 128),
        "mamba2": (128, 64, 128, 8)}  # Mamba-2: Nemotron-H's (heads, head_dim, d_state, groups)


class _KeptBuffers:
    """``torch`` for ``decode_staged`` with ``empty`` returning one buffer per (shape, dtype):
    the ring launch's scratch and row flags outlive a step, so a stream launch that does not wait
    for this step's ring launch reads the previous step's (equal) values."""

    def __init__(self):
        self.kept = {}

    def empty(self, *shape, dtype=None, device=None, **kw):
        key = (tuple(shape), dtype, str(device))
        if key not in self.kept:
            self.kept[key] = torch.empty(*shape, dtype=dtype, device=device, **kw)
        return self.kept[key]

    def __getattr__(self, name):
        return getattr(torch, name)


@contextlib.contextmanager
def ring_beside(ds):
    """Inside: the staged step of module ``ds`` (``ops.gdn.decode_staged`` or
    ``ops.mamba2.decode_staged``) runs its ring launch on the side stream beside its stream launch."""
    from trtllm_replayssm.ops._side_stream import fork

    ring_kernel, old_fork = ds._ring_kernel, ds.fork
    sides = []

    class _Ring:
        def __getitem__(self, grid):
            launch = ring_kernel[grid]

            def run(*args, **kwargs):
                device = args[0].device
                side = fork(device)
                with torch.cuda.stream(side):
                    launch(*args, **kwargs)
                sides.append(side)
            return run

    ds._ring_kernel, ds.fork = _Ring(), (lambda device: sides.pop())
    try:
        yield
    finally:
        ds._ring_kernel, ds.fork = ring_kernel, old_fork


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", default="kda", choices=sorted(DIMS))
    p.add_argument("--batches", type=positive_int, nargs="+", default=[128, 256])
    p.add_argument("--committed", type=int, default=8, help="every row's ring length (a non-flush step: < 15)")
    p.add_argument("--rounds", type=positive_int, default=30)
    args = p.parse_args(argv)
    if not 0 <= args.committed < 15:
        p.error(f"--committed: expected 0..14 (a non-flush step at window 16), got {args.committed}")
    require_cuda(p)
    bandwidth = copy_bandwidth_gbps()
    print(device_info(), f"copy bandwidth {bandwidth:.0f} GB/s")
    flusher = L2Flusher()
    if args.kind == "mamba2":
        return _main_mamba2(args, bandwidth, flusher)
    from trtllm_replayssm.ops.gdn import decode
    from trtllm_replayssm.ops.gdn import decode_staged as ds
    from trtllm_replayssm.ops.gdn.decode_staged import StagedVariant

    layer = Layer(args.kind, *DIMS[args.kind], torch.bfloat16, 16)
    print(f"{args.kind} {DIMS[args.kind]}, bf16, ring length {args.committed}, {args.rounds} rounds")
    print("| batch | step us (% copy) | ring beside stream us (% copy) | difference us |")
    print("|---|---|---|---|")
    for batch in args.batches:
        variant = decode.default_variant(batch, layer.per_channel, False, layer.d_v, layer.window)
        if not (isinstance(variant, StagedVariant) and variant.flush_launch and variant.flush_stream):
            print(f"| {batch} | the default here is not the staged step with its flush list on the side stream "
                  f"({variant!r}) | | |")
            continue
        state, x = layer.state(batch), layer.tokens(batch)
        idx = torch.arange(batch, dtype=torch.int32, device="cuda")
        at_c = Cursors(state, [torch.full((batch,), args.committed, dtype=torch.int32, device="cuda")], flusher)
        fn = replay_fn(layer, state, x, idx, refold=False, variant=variant)
        times = _time_both(ds, fn, at_c, args.rounds)
        step_bytes = layer.step_bytes(batch, args.committed, False)
        _print_row(batch, times, step_bytes, bandwidth)


def _time_both(ds, fn, at_c, rounds):
    """``{"ops": us, "beside": us}``: ``fn``'s graph as the ops run it and with the ring launch of
    module ``ds`` beside its stream launch (``at_c`` before each replay)."""
    times = {}
    ds.torch = _KeptBuffers()
    try:
        for mode in ("ops", "beside"):
            at_c()
            fn()  # fills the kept scratch and flags with this ring length's values, in order
            torch.cuda.synchronize()
            with ring_beside(ds) if mode == "beside" else contextlib.nullcontext():
                at_c()
                graph = capture_graph(fn)
            times[mode] = warmed_median(graph, rounds, at_c)
    finally:
        ds.torch = torch
    return times


def _print_row(batch, times, step_bytes, bandwidth):
    pct = {m: 100 * step_bytes / (t * 1e-6) / (bandwidth * 1e9) for m, t in times.items()}
    print(f"| {batch} | {times['ops']:.1f} ({pct['ops']:.0f}%) | {times['beside']:.1f} ({pct['beside']:.0f}%) | "
          f"{times['ops'] - times['beside']:.1f} |")


def _main_mamba2(args, bandwidth, flusher):
    """``main`` for Mamba-2 at Nemotron-H dims: the default staged step at every batch (its flush
    launch on the side stream from batch 12), every row at ring length ``--committed``."""
    from bench_mamba2_decode import _inputs, _io_bytes, _ring_bytes, _state_bytes

    from trtllm_replayssm.config import ReplaySSMConfig
    from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, decode
    from trtllm_replayssm.ops.mamba2 import decode_staged as ds

    dims = DIMS["mamba2"]
    print(f"mamba2 {dims}, bf16, ring length {args.committed}, {args.rounds} rounds")
    print("| batch | step us (% copy) | ring beside stream us (% copy) | difference us |")
    print("|---|---|---|---|")
    for batch in args.batches:
        cfg = decode.launch_config("replay", dims[1], dims[2], batch, gpu=decode.gpu_name("cuda"))
        if not (cfg.kernel == "staged" and cfg.flush_launch and cfg.flush_stream):
            print(f"| {batch} | the default here is not the staged step with its flush launch on the side stream | | |")
            continue
        state = Mamba2ReplayState.allocate(batch, *dims, ReplaySSMConfig(window=16), activation_dtype=torch.bfloat16,
                                           device="cuda")
        state.checkpoint.normal_(0, 0.1)
        x, dt, A, B, C, D, z, dt_bias = _inputs(batch, *dims, torch.bfloat16)
        idx = torch.arange(batch, dtype=torch.int32, device="cuda")
        y = torch.empty_like(x)

        def at_c():
            state.committed.fill_(args.committed)
            state.flush_at.fill_(state.window)
            flusher()

        def fn():
            decode.replay_step(state.checkpoint, state.ring_x, state.ring_dt, state.ring_B, state.committed,
                               state.flush_at, state.window, x, dt, A, B, C, D, z, dt_bias, True, None, None,
                               idx, -1, out=y, config=cfg)

        times = _time_both(ds, fn, at_c, args.rounds)
        act = 2
        step_bytes = (_state_bytes(batch, *dims[:3]) + _ring_bytes(batch, *dims, args.committed, act)
                      + _io_bytes(batch, *dims, act))
        _print_row(batch, times, step_bytes, bandwidth)


if __name__ == "__main__":
    main()
