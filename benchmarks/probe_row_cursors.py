"""Timing probe: Gated DeltaNet's one-launch step with its cursors given per row by the caller.

Every program of the one-launch step loads its slot, then the slot's cursor, then the ring
entries below it, and the last program of each row moves the cursors after an arrival count.
A serving engine knows each request's position in its window; if it passed the ring positions
per batch row (an operator-contract change, NOTES_delta.md, twenty-seventh run), the cursor
would load beside the slot and no program would count arrivals or move cursors. This probe
times that step before anything is built for it: ``delta_replay_fused_step(row_cursors=True)``
with ``[batch]`` cursors the probe sets before each replay, against the ops' own step at the
same ring length, both CUDA-graph replays with the L2 flushed, over ring lengths 0..14 (the
benchmark's non-flush step). The outputs of the two are compared bit for bit first.

    PYTHONPATH=$PWD python3 benchmarks/probe_row_cursors.py --batches 128 256
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _delta_layer import Cursors, Layer, replay_fn  # noqa: E402
from _timing import L2Flusher, capture_graph, copy_bandwidth_gbps, device_info, median, time_replays  # noqa: E402

DIMS = (32, 16, 128, 128)  # Qwen3.5-4B: value heads, key heads, d_k, d_v


class RowCursors:
    """Called before each replay (outside the timed region): flush L2, set the rows' ring length."""

    def __init__(self, committed, flush_at, window, phases, flush):
        self.committed, self.flush_at, self.window, self.flush = committed, flush_at, window, flush
        self.phases = phases
        self.i = 0

    def __call__(self):
        self.committed.fill_(self.phases[self.i % len(self.phases)])
        self.i += 1
        self.flush_at.fill_(self.window)
        self.flush()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[128, 256])
    p.add_argument("--rounds", type=int, default=10, help="replays per ring length")
    args = p.parse_args(argv)
    if any(b < 1 for b in args.batches):
        raise SystemExit(f"--batches: expected positive batch sizes, got {args.batches}")
    if not torch.cuda.is_available():
        raise SystemExit("probe_row_cursors.py needs a CUDA GPU")
    from trtllm_replayssm.ops.gdn import decode
    from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant, delta_replay_fused_step

    bandwidth = copy_bandwidth_gbps()
    print(device_info(), f"copy bandwidth {bandwidth:.0f} GB/s")
    flusher = L2Flusher()
    layer = Layer("gdn", *DIMS, torch.bfloat16, 16)
    phases = list(range(layer.window - 1))
    print(f"gdn {DIMS}, bf16, ring lengths {phases[0]}..{phases[-1]}, {args.rounds} replays each")
    print("| batch | ops' step us (% copy) | row cursors us (% copy) | difference us |")
    print("|---|---|---|---|")
    for batch in args.batches:
        variant = decode.default_variant(batch, False, False, layer.d_v, layer.window)
        if not isinstance(variant, FusedVariant):
            print(f"| {batch} | the default here is not the one-launch step ({variant!r}) | | |")
            continue
        state, x = layer.state(batch), layer.tokens(batch)
        idx = torch.randperm(batch, device="cuda").to(torch.int32)
        row_c = torch.zeros(batch, dtype=torch.int32, device="cuda")
        row_f = torch.full((batch,), layer.window, dtype=torch.int32, device="cuda")
        ops = replay_fn(layer, state, x, idx, refold=False, variant=variant)

        def rows():
            return delta_replay_fused_step(
                state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
                row_c, row_f, state.window, **x, A_log=layer.A_log, dt_bias=layer.dt_bias, state_indices=idx,
                pad_slot_id=-1, scale=None, refold=False, variant=variant, row_cursors=True)

        # Same outputs, bit for bit, at every ring length (the ring's entries are the step's own).
        for c in phases:
            state.committed.fill_(c)
            state.flush_at.fill_(layer.window)
            want = ops().clone()
            row_c.fill_(c)
            got = rows()
            if not torch.equal(got, want):
                raise SystemExit(f"batch {batch}, ring length {c}: row cursors change the outputs")
        times = {}
        for name, fn, before in (
                ("ops", ops, lambda c: Cursors(state, [torch.full((batch,), c, dtype=torch.int32, device="cuda")],
                                                flusher)),
                ("rows", rows, lambda c: RowCursors(row_c, row_f, layer.window, [c], flusher))):
            before(0)()
            graph = capture_graph(fn)
            times[name] = sum(median([r[0] for r in time_replays([graph], rounds=args.rounds, flush=before(c))])
                              for c in phases) / len(phases)
        step_bytes = sum(layer.step_bytes(batch, c, False) for c in phases) / len(phases)
        pct = {m: 100 * step_bytes / (t * 1e-6) / (bandwidth * 1e9) for m, t in times.items()}
        print(f"| {batch} | {times['ops']:.1f} ({pct['ops']:.0f}%) | {times['rows']:.1f} ({pct['rows']:.0f}%) | "
              f"{times['ops'] - times['rows']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
