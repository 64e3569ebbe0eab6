"""Where an all-flush Mamba-2 step's time goes past its flush kernel: the step's launches replayed
in parts, each part its own CUDA graph, event-timed with L2 flushed (Nemotron-H dims, bf16).

The default step at ``--batch`` is run once eagerly with its launches recorded (the ring launch,
the stream launch, the flush launch ``flush_rows_ws``: their arguments, scratch included), then
replayed in these graphs, in rotated rounds:

- ``step``: the whole step, with the two fills that put every slot back at its flush position
  (``fills``: those alone, as copies; every part that reads the cursors starts with them);
- ``ring``, ``ws``: the ring launch, the flush kernel alone;
- ``ring>ws``: the two in order on one stream (no stream launch beside the flush kernel);
- ``ws|stream``: the flush kernel on the side stream beside the stream launch (no ring launch
  before them);
- ``early``: the schedule of a flush kernel that waits only for a cursor launch (``_flags_kernel``
  here: slot, cursor and flag of every row, what the kernel needs to number its items) and runs
  beside the ring launch; the stream launch waits for both. The flush kernel reads the recorded
  scratch of the ring launch (the same values every replay), i.e. this times the schedule, not
  a kernel that forms its own weights;
- ``standard``: the standard step at the same dims on a checkpoint of its own (``ncu_flush_step``'s
  inputs: ``dt`` in bf16, as the Mamba-2 benchmark draws it); ``floor``: a one-word graph;
- ``ws sS`` (``--stages``): the flush kernel alone with S stages; ``wt pP wW``
  (``--write-through``): the whole all-flush step as the write-through kernel (the standard
  step's programs, each folding its tile's ring entries first), fills included.

With ``--committed N`` the step is a non-flush one (every slot at ring length N) and the parts ask
what the flush kernel's wave of blocks that find no item costs it: ``step``, ``fills``, ``ring``,
``ring>stream`` (no flush kernel), ``ring>ws|stream`` (the step's own schedule, replayed),
``ring>stream|ws`` (the same branches, the stream launch's node made first; ``ws0``: the flush
kernel on a side stream of the default priority), ``ring>stream>ws``
(the empty wave after the stream launch, on one stream), ``standard``, and what the ring launch
costs the stream launch after it: ``stream`` (alone, on the recorded scratch), ``ringD>stream``
(the ring launch's lines stored into a spare buffer, so the lines the stream launch reads are
clean), ``ringX>stream`` (no token ``x`` entry stored). The all-flush parts
include ``ring>stream|ws`` and ``ring>stream|ws0`` too. Both modes also replay the step's
schedule (``ring>ws|stream``) with the ring launch storing the token's ``dt`` as its whole sector
(``ringS>ws|stream``, ``LaunchConfig.ring_dt_sector``) or into a copy of the ring's ``dt`` laid
out entries outermost (``ringE>ws|stream``: a group's heads' entry in 64 contiguous bytes).

    PYTHONPATH=$PWD python3 benchmarks/probe_flush_step_parts.py --batch 256 --rounds 30
    PYTHONPATH=$PWD python3 benchmarks/probe_flush_step_parts.py --batch 256 --committed 7
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cli import positive_int, require_cuda  # noqa: E402

from _timing import L2Flusher, capture_graph, graph_floor_us, graph_timeline, time_replays  # noqa: E402
from ncu_flush_step import WINDOW, cursor_fills, mamba2_step  # noqa: E402


@triton.jit
def _flags_kernel(committed_ptr, flush_at_ptr, idx_ptr, info_ptr, batch, pad_slot_id, BLOCK: tl.constexpr):
    # The ring launch's info for every row: c and the flush flag (a padded row: 0, 0).
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = rows < batch
    slot = tl.load(idx_ptr + rows, mask=ok, other=0)
    live = ok & (slot != pad_slot_id)
    c = tl.load(committed_ptr + slot, mask=live, other=0)
    at = tl.load(flush_at_ptr + slot, mask=live, other=0)
    tl.store(info_ptr + 2 * rows, c, mask=ok)
    tl.store(info_ptr + 2 * rows + 1, tl.where(live & (c + 1 >= at), 1, 0), mask=ok)


class Recorder:
    """Stands in for a Triton kernel object (``kernel[grid](*args)``) or a launcher function and
    records its last call before making it."""

    def __init__(self, real, indexed: bool) -> None:
        self.real, self.indexed, self.call = real, indexed, None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.call = (grid, args, kwargs)
            return self.real[grid](*args, **kwargs)
        return launch

    def __call__(self, *args, **kwargs):
        self.call = (None, args, kwargs)
        return self.real(*args, **kwargs)

    def replay(self, **changed) -> None:
        """The recorded call again; ``changed``: arguments replaced by name (a Triton kernel's)."""
        grid, args, kwargs = self.call
        if changed:
            names = self.real.arg_names
            kwargs = {**dict(zip(names, args)), **kwargs, **changed}
            args = ()
        if self.indexed:
            self.real[grid](*args, **kwargs)
        else:
            self.real(*args, **kwargs)

    def arg(self, name: str):
        """The recorded call's argument ``name`` (a Triton kernel's), passed by position or keyword."""
        _, args, kwargs = self.call
        return {**dict(zip(self.real.arg_names, args)), **kwargs}[name]


def ring_dt_forms(ring: Recorder) -> dict:
    """Replays of the recorded ring launch that store the token's dt differently: ``S`` as its
    whole sector (``LaunchConfig.ring_dt_sector``), ``E`` into a copy of the ring's dt laid out
    entries outermost (a group's heads' entry in 64 contiguous bytes)."""
    ring_dt = ring.arg("ring_dt_ptr")
    entry_major = ring_dt.permute(0, 2, 1).contiguous().permute(0, 2, 1)

    def into_entry_major():
        ring.replay(ring_dt_ptr=entry_major, s_rdt_slot=entry_major.stride(0), s_rdt_head=entry_major.stride(1),
                    s_rdt_j=entry_major.stride(2))
    into_entry_major.ring_dt = entry_major
    return {"S": lambda: ring.replay(DT_SECTOR=True), "E": into_entry_major}


def ring_store_forms(ring: Recorder) -> dict:
    """Replays of the recorded ring launch that leave out some of its stores: ``D`` stores its
    lines into a spare buffer (``.lines``), so those the stream launch reads stay as recorded and
    none of them is dirty; ``X`` stores no token ``x`` entry."""
    spare = torch.empty_like(ring.arg("coef_ptr"))

    def into_spare():
        ring.replay(coef_ptr=spare)
    into_spare.lines = spare
    return {"D": into_spare, "X": lambda: ring.replay(RING_X=False)}


def time_parts(parts: dict, rounds: int, title: str) -> tuple[dict, float, L2Flusher, dict]:
    """Capture each part as a graph and time them in rotated rounds; print and return the medians
    (us), the graph floor, the flusher and the graphs."""
    graphs = {name: capture_graph(fn) for name, fn in parts.items()}
    flusher = L2Flusher()
    names = list(graphs)
    time_replays([graphs[n] for n in names], rounds=5, flush=flusher, rotate=True)
    times = time_replays([graphs[n] for n in names], rounds=rounds, flush=flusher, rotate=True)
    floor = graph_floor_us(flusher)
    print(f"{title}; {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"{rounds} rounds, median (min..max) us")
    med = {}
    for i, name in enumerate(names):
        col = sorted(t[i] for t in times)
        med[name] = col[len(col) // 2]
        print(f"  {name:<14} {med[name]:8.1f}  ({col[0]:.1f}..{col[-1]:.1f})")
    print(f"  {'floor':<14} {floor:8.1f}")
    return med, floor, flusher, graphs


def print_timelines(graphs: dict, names, replays: int, flusher: L2Flusher) -> None:
    for name in names if replays else ():
        print(f"  timeline {name}:")
        for r in graph_timeline(graphs[name], replays, flusher)[-2:]:
            spans = ", ".join(f"{k[:22]} {s:.1f}..{e:.1f}" for k, s, e in r["kernels"])
            print(f"    {r['us']:.1f} us: {spans}")


@functools.lru_cache(maxsize=None)
def _plain_side(device: torch.device) -> torch.cuda.Stream:
    return torch.cuda.Stream(device=device, priority=0)


def stream_first(main_launch, side_launch, plain: bool = False) -> None:
    """Both launches after what the current stream has queued, ``main_launch``'s node made first
    (the side stream waits for the same point; captured, the two are sibling nodes). ``plain``:
    ``side_launch`` on a side stream of the default priority, not the ops' high-priority one
    (PyTorch instantiates graphs with ``cudaGraphInstantiateFlagUseNodePriority``, so a captured
    launch keeps its stream's priority)."""
    from trtllm_replayssm.ops._side_stream import fork, join

    device = torch.device("cuda")
    if plain:
        side = _plain_side(device)
        side.wait_stream(torch.cuda.current_stream(device))
    else:
        side = fork(device)
    main_launch()
    with torch.cuda.stream(side):
        side_launch()
    join(side, device)


def nonflush_parts(args, step, fills, ring, stream, ws, side_by_side, standard) -> None:
    """``--committed``: the non-flush step with and without the flush kernel's empty wave."""
    parts = {
        "step": step, "fills": fills, "ring": lambda: (fills(), ring.replay()),
        "ring>stream": lambda: (fills(), ring.replay(), stream.replay()),
        "ring>ws|stream": lambda: (fills(), ring.replay(), side_by_side(ws.replay, stream.replay)),
        "ring>stream|ws": lambda: (fills(), ring.replay(), stream_first(stream.replay, ws.replay)),
        "ring>stream|ws0": lambda: (fills(), ring.replay(), stream_first(stream.replay, ws.replay, True)),
        "ring>stream>ws": lambda: (fills(), ring.replay(), stream.replay(), ws.replay()),
        "standard": standard,
    }
    for form, ring_form in ring_dt_forms(ring).items():
        parts[f"ring{form}>ws|stream"] = lambda r=ring_form: (fills(), r(), side_by_side(ws.replay, stream.replay))
    # What the ring launch costs the stream launch after it: the stream launch alone (on the
    # recorded scratch), after the ring launch's D and X forms.
    parts["stream"] = lambda: (fills(), stream.replay())
    for form, ring_form in ring_store_forms(ring).items():
        parts[f"ring{form}>stream"] = lambda r=ring_form: (fills(), r(), stream.replay())
    med, floor, flusher, graphs = time_parts(
        parts, args.rounds, f"batch {args.batch}, Nemotron-H dims, non-flush at ring length {args.committed}")
    # every part that starts with the fills, in the order built above
    for name in (n for n in parts if n not in ("fills", "ring", "standard")):
        us = med[name] - med["fills"] + floor
        print(f"  {name} - fills + floor: {us:.1f} us = {us / med['standard']:.4f}x standard")
    print_timelines(graphs, ("step", "ring>stream", "stream", "ringX>stream"), args.timeline, flusher)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=positive_int, default=256)
    p.add_argument("--rounds", type=positive_int, default=30)
    p.add_argument("--timeline", type=int, default=4, metavar="REPLAYS", help="traced replays per part (0: none)")
    p.add_argument("--write-through", nargs="*", default=[], metavar="P,W",
                   help="also the all-flush step as the write-through kernel (the standard step's programs, "
                        "folding the ring first) with P-row tiles and W warps, each P,W its own part")
    p.add_argument("--stages", type=int, nargs="*", default=[], metavar="S",
                   help="also the flush kernel alone with S stages (LaunchConfig.flush_ws_stages) per S")
    p.add_argument("--committed", type=int, default=None, metavar="N",
                   help=f"a non-flush step with every slot at ring length N (0 to {WINDOW - 2}) instead of the "
                        "all-flush step")
    args = p.parse_args(argv)
    if args.committed is not None and not 0 <= args.committed <= WINDOW - 2:
        p.error(f"--committed: expected a ring length from 0 to {WINDOW - 2} (a non-flush step), got {args.committed}")
    if args.committed is not None and (args.stages or args.write_through):
        p.error("--committed: the non-flush parts only (--stages / --write-through time the all-flush step)")
    require_cuda(p)
    from trtllm_replayssm.ops._side_stream import fork, join
    from trtllm_replayssm.ops.mamba2 import decode_staged
    from trtllm_replayssm.ops.mamba2.launch import LaunchConfig

    step = mamba2_step(args.batch, committed=args.committed)
    standard = mamba2_step(args.batch, standard=True)
    ring = Recorder(decode_staged._ring_kernel, True)
    stream = Recorder(decode_staged._stream_kernel, True)
    ws = Recorder(decode_staged.flush_rows_ws, False)
    decode_staged._ring_kernel, decode_staged._stream_kernel, decode_staged.flush_rows_ws = ring, stream, ws
    try:
        step()
        torch.cuda.synchronize()
    finally:
        decode_staged._ring_kernel, decode_staged._stream_kernel, decode_staged.flush_rows_ws = (
            ring.real, stream.real, ws.real)
    if ws.call is None:
        raise SystemExit(f"batch {args.batch}: the default step does not take the warp-specialised flush")
    committed, flush_at, idx = (stream.arg(name) for name in ("committed_ptr", "flush_at_ptr", "idx_ptr"))
    early_info = torch.empty(args.batch, 2, dtype=torch.int32, device="cuda")
    device = torch.device("cuda")

    fills = cursor_fills(committed, flush_at, WINDOW - 1 if args.committed is None else args.committed)

    def flags():
        _flags_kernel[(triton.cdiv(args.batch, 256),)](committed, flush_at, idx, early_info, args.batch, -1,
                                                       BLOCK=256)

    def side_by_side(first, then):
        side = fork(device)
        with torch.cuda.stream(side):
            first()
        then()
        join(side, device)

    def early():
        # The flush kernel after the cursor launch, beside the ring launch; the stream launch
        # after both (it moves the cursors the cursor launch reads).
        flags()
        side = fork(device)
        with torch.cuda.stream(side):
            ws.replay()
        ring.replay()
        stream.replay()
        join(side, device)

    # Every part that reads the cursors puts them back first (the stream launch moves them).
    if args.committed is not None:
        nonflush_parts(args, step, fills, ring, stream, ws, side_by_side, standard)
        return
    parts = {
        "step": step, "fills": fills, "ring": lambda: (fills(), ring.replay()), "ws": ws.replay,
        "ring>ws": lambda: (fills(), ring.replay(), ws.replay()),
        "ws|stream": lambda: (fills(), side_by_side(ws.replay, stream.replay)),
        "ring>stream|ws": lambda: (fills(), ring.replay(), stream_first(stream.replay, ws.replay)),
        "ring>stream|ws0": lambda: (fills(), ring.replay(), stream_first(stream.replay, ws.replay, True)),
        "flags": lambda: (fills(), flags()), "early": lambda: (fills(), early()), "standard": standard,
        "ring>ws|stream": lambda: (fills(), ring.replay(), side_by_side(ws.replay, stream.replay)),
    }
    for form, ring_form in ring_dt_forms(ring).items():
        parts[f"ring{form}>ws|stream"] = lambda r=ring_form: (fills(), r(), side_by_side(ws.replay, stream.replay))
    _, ws_args, ws_kwargs = ws.call
    bound = inspect.signature(ws.real).bind(*ws_args, **ws_kwargs).arguments
    for stages in args.stages:  # exactly S: flush_rows_ws's stages, no cap
        parts[f"ws s{stages}"] = lambda s=stages: ws.real(**dict(bound, stages=s, max_stages=0))
    for spec in args.write_through:
        rows, warps = (int(v) for v in spec.split(","))
        cfg = LaunchConfig(block_p=rows, num_warps=warps, kernel="write_through")
        parts[f"wt p{rows} w{warps}"] = mamba2_step(args.batch, fields=dataclasses.asdict(cfg))
    med, floor, flusher, graphs = time_parts(parts, args.rounds, f"batch {args.batch}, Nemotron-H dims, all-flush")
    print(f"  step - fills + floor: {med['step'] - med['fills'] + floor:.1f} us = "
          f"{(med['step'] - med['fills'] + floor) / med['standard']:.4f}x standard; "
          f"early - fills + floor: {med['early'] - med['fills'] + floor:.1f} us = "
          f"{(med['early'] - med['fills'] + floor) / med['standard']:.4f}x")
    print_timelines(graphs, ("step", "ring>ws", "ws|stream", "early"), args.timeline, flusher)


if __name__ == "__main__":
    main()
