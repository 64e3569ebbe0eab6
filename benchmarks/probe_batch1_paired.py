"""Batch 1 (or any small batch), the standard step against the ReplaySSM step timed in pairs.

The plain benchmark times each step's graph in its own block of replays, so drift between the
blocks (clocks, the machine's other tenants) enters their ratio: Mamba-2's batch 1 has read
0.95-1.05x across calls. Here the two steps are replayed alternately in every round, each after an
L2 flush and event-timed as ``_timing.time_replays`` does, and the ratio is taken per round.
Each side is captured in several graphs (``--graphs``), and every round replays all of them in
an order rotated by the round, so that neither a graph nor a place in the round can favour a
side. ``--aa`` adds a control row, the standard step against itself, whose ratio shows what the
method reads where nothing differs. ``--standard-with`` and ``--replay-with`` replace fields of
either side's default ``LaunchConfig`` (``field=value, ...``).

``--allocations K`` times only the standard step, over ``K`` separately allocated state tensors,
once all in the same rounds and once each in a block of its own: whether a lone row's time
depends on where its state lies, or on when its block runs.

``--kind gdn`` / ``kda`` times fla's step (the decode benchmarks' baseline there) against the
ops' default ReplaySSM step instead. ``--no-l2-flush`` replays without the L2 flush, so that
what a cold L2 costs either side (the cursors' loads, say) shows against the default.

    PYTHONPATH=$PWD python3 benchmarks/probe_batch1_paired.py [--kind mamba2] [--batches 1 4] [--dims nemotron_h]
        [--rounds 300] [--graphs 16] [--aa] [--replay-with "num_warps=2"] [--standard-with "num_warps=1"]
        [--allocations 8] [--no-l2-flush]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _derive import parse_fields  # noqa: E402
from _delta_layer import Cursors, Layer, fla_fn, replay_fn  # noqa: E402
from _timing import (WARMUP_ROUNDS, L2Flusher, capture_graph, device_info, graph_floor_us, time_replays,  # noqa: E402
                     time_steps)
from bench_mamba2_decode import DIMS, WINDOW, _inputs  # noqa: E402

from trtllm_replayssm.config import ReplaySSMConfig  # noqa: E402
from trtllm_replayssm.ops.gdn._wrappers import default_refold  # noqa: E402
from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, decode  # noqa: E402
from trtllm_replayssm.ops.mamba2.launch import launch_config  # noqa: E402


def configs(dims, batch, standard_with: str = "", replay_with: str = ""):
    """Each side's ``LaunchConfig``: its default for ``batch`` with the given fields replaced."""
    head_dim, d_state = dims[1], dims[2]
    std = launch_config("standard", head_dim, d_state, batch)
    rep = launch_config("replay", head_dim, d_state, batch, gpu=decode.gpu_name("cuda"))
    return (dataclasses.replace(std, **parse_fields(standard_with, decode.LaunchConfig)),
            dataclasses.replace(rep, **parse_fields(replay_with, decode.LaunchConfig)))


# Gated DeltaNet (Qwen3.5-4B) and KDA (Kimi-Linear) as bench_gdn_decode.py / bench_kda_decode.py
# time them: (value heads, key heads, d_k, d_v).
DELTA_DIMS = {"gdn": (32, 16, 128, 128), "kda": (32, 32, 128, 128)}


def compare(make_standard, make_other, before, rounds, graphs):
    """``(standard us, other us, per-round other / standard speedups, per-graph medians)`` of two
    steps, each captured ``graphs`` times in the order A B B A A B ... (at batch 1 two graphs of
    the same kernel on the same memory time up to ~6% apart, steadily, so one graph per side would
    put that in the ratio) and replayed in rotated rounds (``time_replays(rotate=True)``) with
    ``before()`` ahead of each replay. A round's speedup is the mean of its standard replays over
    the mean of its others."""
    sides = [(k % 4 in (0, 3)) for k in range(2 * graphs)]  # True: a standard graph
    captured = [make_standard() if is_std else make_other() for is_std in sides]
    time_replays(captured, rounds=WARMUP_ROUNDS, flush=before, rotate=True)
    times = time_replays(captured, rounds=rounds, flush=before, rotate=True)
    std_cols = [i for i, is_std in enumerate(sides) if is_std]
    other_cols = [i for i, is_std in enumerate(sides) if not is_std]
    std_t = [statistics.fmean(t[i] for i in std_cols) for t in times]
    other_t = [statistics.fmean(t[i] for i in other_cols) for t in times]
    ratios = [a / b for a, b in zip(std_t, other_t)]
    per_graph = {side: [statistics.median(t[i] for t in times) for i in cols]
                 for side, cols in (("standard", std_cols), ("other", other_cols))}
    return statistics.median(std_t), statistics.median(other_t), ratios, per_graph


def standard_graph(ssm, inputs, idx, cfg):
    """A graph of the Mamba-2 standard step on ``ssm`` (``inputs``: ``_inputs``' tensors), with an
    output buffer of its own."""
    x, dt, A, B, C, D, z, dt_bias = inputs
    y = torch.empty_like(x)
    return capture_graph(lambda: decode.standard_step(ssm, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1,
                                                      out=y, config=cfg))


def paired(dims, batch, dtype, flush, rounds, std_cfg, rep_cfg, aa=False, graphs=16):
    """Mamba-2: :func:`compare` of the standard step and the ReplaySSM step (every slot at phase
    0) or, with ``aa``, the standard step again. Both sides step one state tensor (the ReplaySSM
    checkpoint)."""
    heads, head_dim, d_state, groups = dims
    x, dt, A, B, C, D, z, dt_bias = _inputs(batch, *dims, dtype)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    state = Mamba2ReplayState.allocate(batch, heads, head_dim, d_state, groups, ReplaySSMConfig(window=WINDOW),
                                       activation_dtype=dtype, device="cuda")
    state.checkpoint.normal_(0, 0.1)
    ssm = state.checkpoint

    def standard():
        return standard_graph(ssm, (x, dt, A, B, C, D, z, dt_bias), idx, std_cfg)

    def other():
        if aa:
            return standard()
        y = torch.empty_like(x)
        return capture_graph(lambda: decode.replay_step(state.checkpoint, state.ring_x, state.ring_dt, state.ring_B,
                                                        state.committed, state.flush_at, state.window, x, dt, A, B,
                                                        C, D, z, dt_bias, True, None, None, idx, -1, out=y,
                                                        config=rep_cfg))

    return compare(standard, other, at_phase_zero(state, batch, flush), rounds, graphs)


def allocation_spread(dims, batch, dtype, flush, rounds, std_cfg, allocations, graphs=16):
    """The standard step over ``allocations`` separately allocated state tensors, ``graphs``
    graphs each: ``[(us when all are replayed in the same rotated rounds, us in a block of its
    own)]`` per allocation, each the mean of its graphs' medians. The first spread is the
    allocations' own; the second adds what changes between blocks timed one after the other
    (as the plain benchmarks time their steps)."""
    heads, head_dim, d_state, _ = dims
    inputs = _inputs(batch, *dims, dtype)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    sets = []
    for _ in range(allocations):
        ssm = torch.randn(batch, heads, head_dim, d_state, device="cuda") * 0.1
        sets.append([standard_graph(ssm, inputs, idx, std_cfg) for _ in range(graphs)])
    flat = [g for graph_set in sets for g in graph_set]
    time_replays(flat, rounds=WARMUP_ROUNDS, flush=flush, rotate=True)
    times = time_replays(flat, rounds=rounds, flush=flush, rotate=True)
    per_graph = [statistics.median(t[i] for t in times) for i in range(len(flat))]
    together = [statistics.fmean(per_graph[a * graphs:(a + 1) * graphs]) for a in range(allocations)]
    alone = [time_steps(graph_set, rounds=rounds, flush=flush)[0] for graph_set in sets]
    return list(zip(together, alone))


def at_phase_zero(state, batch, flush):
    """Before each replay: every slot back to phase 0, L2 flushed (a write-through step keeps
    ``(0, window)``, a replay step moves the cursors: reset either way)."""
    return Cursors(state, [torch.zeros(batch, dtype=torch.int32, device="cuda")], flush)


def delta_paired(kind, batch, flush, rounds, aa=False, graphs=16):
    """Gated DeltaNet / KDA (the decode benchmarks' dims, bf16): :func:`compare` of fla's
    standard step (its own state buffers, as ``bench_gdn_decode.py`` times it) and the ops'
    default ReplaySSM step at ``batch`` (every slot at phase 0), or fla again with ``aa``."""
    HV, H, d_k, d_v = DELTA_DIMS[kind]
    layer = Layer(kind, HV, H, d_k, d_v, torch.bfloat16, WINDOW)
    x = layer.tokens(batch)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    state = layer.state(batch)

    def standard():
        return capture_graph(fla_fn(layer, batch, x))

    refold = default_refold(layer.per_channel, batch)

    def other():
        return standard() if aa else capture_graph(replay_fn(layer, state, x, idx, refold=refold))

    return compare(standard, other, at_phase_zero(state, batch, flush), rounds, graphs)


def step_flush(flusher, off: bool):
    """What runs before each timed replay besides the cursors' reset: the L2 flush, or nothing
    (``--no-l2-flush``)."""
    return (lambda: None) if off else flusher


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", default="mamba2", choices=["mamba2", "gdn", "kda"],
                   help="mamba2: the in-project standard step as the baseline; gdn / kda: fla's (bf16, the "
                        "decode benchmarks' dims)")
    p.add_argument("--batches", type=int, nargs="+", default=[1])
    p.add_argument("--dims", nargs="+", default=None, choices=sorted(DIMS),
                   help="Mamba-2 dims (default: nemotron_h nemotron3_nano)")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--graphs", type=int, default=16, help="graphs captured of each side (default 16)")
    p.add_argument("--aa", action="store_true", help="add the standard step against itself (a control row)")
    p.add_argument("--allocations", type=int, default=0, metavar="K",
                   help="Mamba-2: instead, the standard step over K state allocations, timed together and alone")
    p.add_argument("--standard-with", default="", metavar="FIELDS", help="LaunchConfig fields of the standard side")
    p.add_argument("--replay-with", default="", metavar="FIELDS", help="LaunchConfig fields of the ReplaySSM side")
    p.add_argument("--no-l2-flush", action="store_true",
                   help="replay without flushing the L2 first (the cursors and any operand still cached): "
                        "what a cold L2 adds to either side")
    args = p.parse_args(argv)
    if any(b < 1 for b in args.batches) or args.rounds < 2:
        p.error(f"--batches: expected >= 1, --rounds: expected >= 2; got {args.batches}, {args.rounds}")
    if args.graphs < 1:
        p.error(f"--graphs: expected >= 1, got {args.graphs}")
    for name, text in (("--standard-with", args.standard_with), ("--replay-with", args.replay_with)):
        try:
            parse_fields(text, decode.LaunchConfig)
        except SystemExit as err:
            p.error(f"{name}: {str(err).removeprefix('--derive: ')}")
    if args.kind != "mamba2" and (args.dims or args.standard_with or args.replay_with or args.dtype != "bfloat16"
                                  or args.allocations):
        p.error(f"--dims / --dtype / --standard-with / --replay-with / --allocations: Mamba-2 only, "
                f"got --kind {args.kind}")
    if args.allocations == 1 or args.allocations < 0:
        p.error(f"--allocations: expected 0 (off) or >= 2, got {args.allocations}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    flusher = L2Flusher()
    print(f"# {device_info()}; graph floor {graph_floor_us(flusher):.1f} us; {args.rounds} paired rounds"
          + ("; no L2 flush before the replays" if args.no_l2_flush else ""))
    flush = step_flush(flusher, args.no_l2_flush)
    if args.allocations:
        print_allocations(args, flush)
        return
    print(f"# standard with: {args.standard_with or '(default)'}; replay with: {args.replay_with or '(default)'}")
    print("| dims | batch | other side | standard us | other us | x standard: median of rounds (10th-90th percentile) "
          "| rounds the other side is faster | per-graph medians, standard / other us |")
    print("|---|---|---|---|---|---|---|---|")
    names = (args.dims or ["nemotron_h", "nemotron3_nano"]) if args.kind == "mamba2" else [args.kind]
    for name in names:
        for batch in args.batches:
            for aa in (True, False) if args.aa else (False,):
                if args.kind == "mamba2":
                    std_cfg, rep_cfg = configs(DIMS[name], batch, args.standard_with, args.replay_with)
                    s, r, ratios, per_graph = paired(DIMS[name], batch, getattr(torch, args.dtype), flush,
                                                     args.rounds, std_cfg, rep_cfg, aa, args.graphs)
                    label = "standard (A/A)" if aa else rep_cfg.kernel
                else:
                    s, r, ratios, per_graph = delta_paired(args.kind, batch, flush, args.rounds, aa, args.graphs)
                    label = "fla (A/A)" if aa else "replay (default launch)"
                q = statistics.quantiles(ratios, n=10)
                wins = sum(x > 1.0 for x in ratios) / len(ratios)
                print(f"| {name} | {batch} | {label} | {s:.2f} | {r:.2f} | "
                      f"{statistics.median(ratios):.3f} ({q[0]:.3f}-{q[-1]:.3f}) | {wins:.0%} | "
                      f"{' '.join(f'{t:.2f}' for t in per_graph['standard'])} / "
                      f"{' '.join(f'{t:.2f}' for t in per_graph['other'])} |", flush=True)


def print_allocations(args, flush):
    """``--allocations``: one table per dims and batch, a row per state allocation."""
    for name in args.dims or ["nemotron_h", "nemotron3_nano"]:
        for batch in args.batches:
            std_cfg, _ = configs(DIMS[name], batch, args.standard_with)
            rows = allocation_spread(DIMS[name], batch, getattr(torch, args.dtype), flush, args.rounds, std_cfg,
                                     args.allocations, args.graphs)
            print(f"\n| {name}, batch {batch}: allocation | us, all replayed together | us, in a block of its own |")
            print("|---|---|---|")
            for k, (together, alone) in enumerate(rows):
                print(f"| {k} | {together:.2f} | {alone:.2f} |")
            spread = [max(col) / min(col) for col in zip(*rows)]
            print(f"| max / min | {spread[0]:.3f} | {spread[1]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
