"""Mamba-2 decode: standard step vs ReplaySSM (non-flush, flush, amortized, staggered mix).

Every step is captured in a CUDA graph and each replay is timed alone with the L2 flushed
before it (at batches up to 32 each step in sixteen graphs, replayed in rotated rounds, a step's
time the mean of its graphs' medians: ``_timing.time_steps``); the state is fp32 ``[slots,
heads, head_dim, d_state]``, activations bf16 (``dt`` too, as a model's in_proj gives it:
``--dt-dtype``), window L=16. Bandwidth is reported against a device-to-device copy measured in
the same run. Batch-1 ratios move by a few percent between
processes here (RESULTS.md, thirtieth run); ``probe_batch1_paired.py`` times them in pairs.

- standard: ``mamba2_standard_step`` (read + write the state every token): the baseline.
- non-flush: mean over ring positions 0..14 of a window with every slot in phase.
- flush: position 15 of that window (every slot folds its ring and writes its checkpoint).
- amortized: the mean over the 16 steps of the window (15 non-flush + 1 flush).
- mixed: slots in staggered phases (slot i first flushes after 16 - i % 16 tokens), so about
  1/16 of the batch flushes at every step; the mean over 16 steps.

Usage::

    python benchmarks/bench_mamba2_decode.py --json mamba2_decode.json
    python benchmarks/bench_mamba2_decode.py --sweep      # launch configurations, Nemotron-H dims
    python benchmarks/bench_mamba2_decode.py --variants --json mamba2_variants.json
        # every replay kernel variant (_mamba2_variants.py): checked against the standard kernel on the
        # GPU, then timed at batch 256 / 1 / 128 and the best two on Nemotron-3-Nano dims (< 150 s)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import check_output, positive_int, require_cuda  # noqa: E402
from _mamba2_variants import (LAYOUT_KEY, VARIANT_BATCHES, VARIANTS, parse_variant, precompile,  # noqa: E402
                              run_variants)
from _spread import spread, spread_lines  # noqa: E402
from _timing import (WARMUP_ROUNDS, L2Flusher, SameSizeCopy, add_l2_flush_argument, capture_graph,  # noqa: E402
                     copy_bandwidths_gbps, device_info, graph_floor_us, graphs_for, time_steps, time_warmed)

from trtllm_replayssm.config import ReplaySSMConfig  # noqa: E402
from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, decode  # noqa: E402
from trtllm_replayssm.ops.mamba2.state import RING_DT_LAYOUTS  # noqa: E402

DIMS = {
    # name: (heads, head_dim, d_state, groups)
    "nemotron_h": (128, 64, 128, 8),
    "nemotron3_nano": (96, 80, 128, 8),
}
WINDOW = 16


#: The input distributions a plain run can time on (``--inputs``). On one H200 the three timed
#: within 0.3% of each other (fp32 ``dt``, Nemotron-H batch 256); ``dt``'s dtype moved the
#: standard step by 2.7% (NOTES_mamba2.md, thirty-fifth run).
INPUTS = {
    "unit": "unit normals; dt = softplus(N(0, 1) + N(0, 0.25)), A in (-1.5, -0.5) (the tables' default)",
    "slow_decay": "ncu_flush_step.py's: A in (-1, 0), dt = softplus(N(0, 1) + N(0, 1))",
    "model": "Mamba-2's initialisation: A = -exp(U(log 1, log 16)), dt = softplus(N(0, 0.25) + "
             "softplus^-1(exp(U(log 1e-3, log 1e-1)))), D = 1",
}


def _inputs(batch, heads, head_dim, d_state, groups, dtype, device="cuda", kind="unit", dt_dtype=None):
    """``x, dt, A, B, C, D, z, dt_bias`` of one decode step from the distribution ``kind``
    (:data:`INPUTS`), ``dt`` in ``dt_dtype`` (``None``: the activations' ``dtype``, as a model's
    in_proj gives it; on fp32 ``dt`` the standard step ran 2.7% slower at Nemotron-H dims, batch
    256, on an H200: NOTES_mamba2.md, thirty-fifth run)."""
    g = torch.Generator(device=device).manual_seed(batch)
    x = torch.randn(batch, heads, head_dim, device=device, generator=g).to(dtype)
    dt = torch.randn(batch, heads, device=device, generator=g)
    B = (torch.randn(batch, groups, d_state, device=device, generator=g) / d_state**0.5).to(dtype)
    C = torch.randn(batch, groups, d_state, device=device, generator=g).to(dtype)
    z = torch.randn(batch, heads, head_dim, device=device, generator=g).to(dtype)
    A = -(0.5 + torch.rand(heads, device=device, generator=g))
    D = torch.randn(heads, device=device, generator=g)
    dt_bias = torch.randn(heads, device=device, generator=g) * 0.5
    if kind == "slow_decay":
        A = -torch.rand(heads, device=device, generator=g)
        dt_bias = torch.randn(heads, device=device, generator=g)
    elif kind == "model":
        A = -torch.exp(torch.empty(heads, device=device).uniform_(0.0, math.log(16.0), generator=g))
        dt0 = torch.exp(torch.empty(heads, device=device).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
        dt_bias = dt0 + torch.log(-torch.expm1(-dt0))  # softplus^-1
        dt = dt * 0.5
        D = torch.ones(heads, device=device)
    elif kind != "unit":
        raise ValueError(f"inputs: expected one of {tuple(INPUTS)}, got {kind!r}")
    return x, dt.to(dtype if dt_dtype is None else dt_dtype), A, B, C, D, z, dt_bias


def _state_bytes(batch, heads, head_dim, d_state):
    return batch * heads * head_dim * d_state * 4


def _ring_bytes(batch, heads, head_dim, d_state, groups, entries, act_bytes):
    return batch * entries * (heads * head_dim * act_bytes + heads * 4 + groups * d_state * act_bytes)


def _io_bytes(batch, heads, head_dim, d_state, groups, act_bytes):
    # x, z, y per head; B, C per group; dt per head
    return batch * (3 * heads * head_dim * act_bytes + 2 * groups * d_state * act_bytes + heads * 4)


def time_standard(dims, batch, dtype, flush, rounds, config=None, inputs=None):
    heads, head_dim, d_state, groups = dims
    state = torch.randn(batch, heads, head_dim, d_state, device="cuda") * 0.1
    x, dt, A, B, C, D, z, dt_bias = _inputs(batch, *dims, dtype, **(inputs or {}))
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)

    def step():
        decode.standard_step(state, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1, out=y, config=config)

    graphs = [capture_graph(step) for _ in range(graphs_for(batch))]
    # Replayed first, untimed, as the delta-rule benchmarks do their baselines (a process's first
    # timing ran slow on the H200: _timing.WARMUP_ROUNDS). Without it the variants mode (10
    # rounds) read this step at 579-584 us where a plain run (30 rounds) read 537.8 us in the
    # same call; with it, 532.2-532.7 us, the plain runs' figure on that kind of H200
    # (NOTES_mamba2.md, twenty-second run).
    us = time_warmed(graphs, rounds, flush)
    del state
    return us


def time_replay(dims, batch, dtype, flush, rounds, stagger, config=None, inputs=None, ring_dt_layout="heads"):
    """Per-phase times of 16 consecutive steps (microseconds, list of 16; `_timing.time_steps`)."""
    heads, head_dim, d_state, groups = dims
    cfg = ReplaySSMConfig(window=WINDOW, flush_stagger=stagger)
    state = Mamba2ReplayState.allocate(batch, heads, head_dim, d_state, groups, cfg, activation_dtype=dtype, device="cuda",
                                       ring_dt_layout=ring_dt_layout)
    state.checkpoint.normal_(0, 0.1)
    x, dt, A, B, C, D, z, dt_bias = _inputs(batch, *dims, dtype, **(inputs or {}))
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)

    def step():
        decode.replay_step(state.checkpoint, state.ring_x, state.ring_dt, state.ring_B, state.committed,
                           state.flush_at, state.window, x, dt, A, B, C, D, z, dt_bias, True, None, None,
                           idx, -1, out=y, config=config)

    graphs = [capture_graph(step) for _ in range(graphs_for(batch))]
    time_steps(graphs, WINDOW, rounds=max(1, WARMUP_ROUNDS // 2), flush=flush)  # untimed, as the standard step's
    # Back to phase 0 of every slot's window after the warm-up (the checkpoint keeps its
    # random contents: timing zeros can flatter a kernel).
    state.committed.zero_()
    state.flush_at.copy_(torch.tensor([cfg.first_flush_at(s) for s in range(batch)], dtype=torch.int32))
    torch.cuda.synchronize()
    phases = time_steps(graphs, WINDOW, rounds=rounds, flush=flush)
    del state
    return phases


def bench(dims_name, batch, dtype, flush, rounds, copy_gbps, configs=None, same_copy=None, inputs=None,
          ring_dt_layout="heads"):
    dims = DIMS[dims_name]
    std_cfg, rep_cfg = _pick(configs, batch, dims[1]) if configs else (None, None)
    std_us = time_standard(dims, batch, dtype, flush, rounds, std_cfg, inputs)
    phases = time_replay(dims, batch, dtype, flush, rounds, False, rep_cfg, inputs, ring_dt_layout)
    mixed = time_replay(dims, batch, dtype, flush, rounds, True, rep_cfg, inputs, ring_dt_layout)
    return record(dims_name, batch, dtype, std_us, phases, mixed, copy_gbps, std_cfg, rep_cfg, same_copy)


def record(dims_name, batch, dtype, std_us, phases, mixed, copy_gbps, std_cfg=None, rep_cfg=None, same_copy=None):
    """Times of one standard step and of a window's 16 replay phases (in phase and staggered)
    as a result record: microseconds, GB/s, % of copy (and of a copy of each step's own size,
    ``same_copy``: a ``_timing.SameSizeCopy``, where given), speedups."""
    heads, head_dim, d_state, groups = dims = DIMS[dims_name]
    act = torch.tensor([], dtype=dtype).element_size()
    s_bytes = _state_bytes(batch, heads, head_dim, d_state)
    io = _io_bytes(batch, heads, head_dim, d_state, groups, act)
    nonflush_us = sum(phases[:-1]) / (WINDOW - 1)
    flush_us = phases[-1]
    amortized_us = sum(phases) / WINDOW
    mixed_us = sum(mixed) / WINDOW
    # Bytes a step must move: the state once (non-flush) or twice (flush, standard), the ring
    # entries it reads (c of them at position c) plus the one it appends, and the token's I/O.
    nonflush_bytes = s_bytes + io + sum(_ring_bytes(batch, *dims, c + 1, act) for c in range(WINDOW - 1)) / (WINDOW - 1)
    flush_bytes = 2 * s_bytes + io + _ring_bytes(batch, *dims, WINDOW, act)
    std_bytes = 2 * s_bytes + io

    def gbps(nbytes, us):
        return nbytes / (us * 1e-6) / 1e9

    rec = {
        "dims": dims_name, "heads": heads, "head_dim": head_dim, "d_state": d_state, "groups": groups,
        "batch": batch, "activation": str(dtype).replace("torch.", ""),
        "standard_us": std_us, "standard_gbps": gbps(std_bytes, std_us),
        "nonflush_us": nonflush_us, "nonflush_gbps": gbps(nonflush_bytes, nonflush_us),
        "flush_us": flush_us, "flush_gbps": gbps(flush_bytes, flush_us),
        "amortized_us": amortized_us, "mixed_us": mixed_us,
        "phase_us": phases, "mixed_phase_us": mixed,
        "standard_config": str(std_cfg or decode.launch_config("standard", head_dim, d_state, batch)),
        "replay_config": str(rep_cfg or decode.launch_config("replay", head_dim, d_state, batch,
                                                             gpu=decode.gpu_name("cuda"))),
    }
    rec["standard_pct_copy"] = 100 * rec["standard_gbps"] / copy_gbps
    rec["nonflush_pct_copy"] = 100 * rec["nonflush_gbps"] / copy_gbps
    rec["flush_pct_copy"] = 100 * rec["flush_gbps"] / copy_gbps
    if same_copy is not None:
        for step, nbytes in (("standard", std_bytes), ("nonflush", nonflush_bytes), ("flush", flush_bytes)):
            rec[f"{step}_pct_same_copy"] = 100 * rec[f"{step}_gbps"] / same_copy(nbytes)
    rec["speedup_amortized"] = std_us / amortized_us
    rec["speedup_mixed"] = std_us / mixed_us
    rec["speedup_nonflush"] = std_us / nonflush_us
    rec["flush_over_standard"] = flush_us / std_us
    return rec


HEADER = (
    f"{'dims':<15}{'batch':>6} | {'std us':>9}{'%copy':>7} | {'nonfl us':>9}{'%copy':>7} | {'flush us':>9}"
    f"{'/std':>6} | {'amort us':>9}{'x std':>7} | {'mixed us':>9}{'x std':>7} | {'nonfl %same-size copy':>22}"
)


def row(r):
    return (
        f"{r['dims']:<15}{r['batch']:>6} | {r['standard_us']:>9.1f}{r['standard_pct_copy']:>6.1f}% | "
        f"{r['nonflush_us']:>9.1f}{r['nonflush_pct_copy']:>6.1f}% | {r['flush_us']:>9.1f}{r['flush_over_standard']:>6.2f} | "
        f"{r['amortized_us']:>9.1f}{r['speedup_amortized']:>7.2f} | {r['mixed_us']:>9.1f}{r['speedup_mixed']:>7.2f}"
        + (f" | {r['nonflush_pct_same_copy']:>21.1f}%" if "nonflush_pct_same_copy" in r else "")
    )


SPREAD_KEYS = ("standard_us", "amortized_us", "speedup_amortized", "speedup_mixed", "flush_over_standard",
               "nonflush_pct_copy")


STANDARD_CONFIGS = [(8, 2), (8, 4), (16, 2)]
REPLAY_CONFIGS = [  # keyword arguments of decode.LaunchConfig
    dict(block_p=16, num_warps=4),
    dict(block_p=32, num_warps=4, max_registers=128),
    dict(block_p=32, num_warps=4, max_registers=128, rows_fastest=True),
    dict(block_p=32, num_warps=4, max_registers=128, cursor_kernel=True),
    dict(block_p=32, num_warps=4, max_registers=128, cursor_kernel=True, rows_fastest=True),
    dict(block_p=64, num_warps=4, ring_prefetch=True, cursor_kernel=True),
    dict(block_p=64, num_warps=4, max_registers=128, rows_fastest=True),
    dict(block_p=16, num_warps=4, ring_prefetch=True, cursor_kernel=True),
    dict(block_p=16, num_warps=4, rows_fastest=True),
    dict(block_p=32, num_warps=4, fold_dot=True, cursor_kernel=True),
    dict(block_p=32, num_warps=4, max_registers=96, cursor_kernel=True),
    dict(block_p=16, num_warps=2, max_registers=96, cursor_kernel=True, rows_fastest=True),
]


def sweep(batches, dtype, flush, rounds):
    """Time launch configurations of both kernels at Nemotron-H dims (for ``decode.launch_config``).

    Returns the records and, per batch, the fastest standard and replay (amortized) configs.
    """
    dims = DIMS["nemotron_h"]
    out, best = [], {}
    for batch in batches:
        std_best, rep_best = (None, float("inf")), (None, float("inf"))
        for bp, nw in STANDARD_CONFIGS:
            cfg = decode.LaunchConfig(bp, nw)
            us = time_standard(dims, batch, dtype, flush, rounds, cfg)
            out.append({"kernel": "standard", "batch": batch, "config": str(cfg), "us": us})
            std_best = min(std_best, (cfg, us), key=lambda t: t[1])
            print(f"standard batch {batch:>4} {cfg}: {us:9.1f} us", flush=True)
        for params in REPLAY_CONFIGS:
            cfg = decode.LaunchConfig(**params)
            ph = time_replay(dims, batch, dtype, flush, rounds, False, cfg)
            rec = {"kernel": "replay", "batch": batch, "config": str(cfg),
                   "nonflush_us": sum(ph[:-1]) / (WINDOW - 1), "flush_us": ph[-1], "amortized_us": sum(ph) / WINDOW}
            out.append(rec)
            rep_best = min(rep_best, (cfg, rec["amortized_us"]), key=lambda t: t[1])
            print(f"replay   batch {batch:>4} {cfg}: non-flush {rec['nonflush_us']:8.1f}  flush "
                  f"{rec['flush_us']:8.1f}  amortized {rec['amortized_us']:8.1f} us", flush=True)
        best[batch] = (std_best[0], rep_best[0])
        print(f"best at batch {batch}: standard {std_best[0]}, replay {rep_best[0]}", flush=True)
    return out, best


def _pick(configs, batch, head_dim):
    """The tuned configs of the nearest swept batch (log scale), with tiles that divide head_dim."""
    import dataclasses
    import math

    nearest = min(configs, key=lambda b: abs(math.log(b) - math.log(batch)))
    out = []
    for cfg in configs[nearest]:
        block_p = cfg.block_p
        while block_p > 8 and head_dim % block_p:
            block_p //= 2
        out.append(dataclasses.replace(cfg, block_p=max(block_p, 16) if cfg.fold_dot else block_p))
    return out



def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=positive_int, nargs="+", default=[1, 32, 128, 256, 512])
    p.add_argument("--dims", nargs="+", default=list(DIMS), choices=list(DIMS))
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--rounds", type=positive_int, default=30)
    p.add_argument("--repeats", type=int, default=1,
                   help="time each (dims, batch) this many times in turn, standard and ReplaySSM steps side by "
                        "side, and print the spread of the ratios (the machines of a pool differ by ~1%%)")
    p.add_argument("--no-l2-flush", action="store_true")
    add_l2_flush_argument(p)
    p.add_argument("--dt-dtype", default="activation", choices=["activation", "float32"],
                   help="dt's dtype: the activations' (as a model's in_proj gives it; the default from the "
                        "thirty-fifth run) or float32 (earlier tables), on which the standard step ran 2.7%% "
                        "slower at Nemotron-H dims")
    p.add_argument("--inputs", default="unit", choices=list(INPUTS),
                   help="the distribution the plain run's steps are timed on: " +
                        "; ".join(f"{k}: {v}" for k, v in INPUTS.items()))
    p.add_argument("--sweep", action="store_true", help="time launch configurations, then stop")
    p.add_argument("--tune", action="store_true", help="sweep first, then benchmark with the fastest configs")
    p.add_argument("--sweep-batches", type=positive_int, nargs="+", default=[1, 32, 256])
    p.add_argument("--variants", action="store_true",
                   help="check and time every replay kernel variant (_mamba2_variants.VARIANTS) at batch 1/128/256, then stop")
    p.add_argument("--variant-batches", type=positive_int, nargs="+", default=list(VARIANT_BATCHES),
                   help="--variants: batches at Nemotron-H dims, the first also at Nemotron-3-Nano dims")
    p.add_argument("--derive", nargs="+", default=[], metavar="FIELDS",
                   help="--variants: time these instead of VARIANTS, each 'field=value, ...' replacing fields "
                        "of the default replay configuration at batch 256 (Nemotron-H dims); "
                        f"'{LAYOUT_KEY}=entries' allocates the state's ring_dt entries outermost (alone: the "
                        "default launch at each batch on that state)")
    p.add_argument("--ring-dt-layout", default="heads", choices=list(RING_DT_LAYOUTS),
                   help="the plain run's state: ring_dt stored heads outermost (the default) or entries outermost")
    p.add_argument("--variant-rounds", type=positive_int, default=10)
    p.add_argument("--budget-s", type=float, default=120.0, help="--variants: skip what starts after this many seconds")
    p.add_argument("--compile-workers", type=int, default=8,
                   help="--variants: processes compiling the kernels before the run (0: compile as they come)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.derive and not args.variants:
        p.error("--derive: only with --variants (it replaces the variants of that run)")
    if args.repeats < 1:
        p.error(f"--repeats: expected >= 1, got {args.repeats}")
    if args.no_l2_flush and args.l2_flush:
        p.error("--l2-flush: not with --no-l2-flush")
    if (args.inputs != "unit" or args.dt_dtype != "activation") and (args.variants or args.sweep or args.tune):
        p.error("--inputs / --dt-dtype: the plain run only (--variants / --sweep / --tune time the unit inputs "
                "with dt in the activations' dtype)")
    import time

    if args.derive:
        base = dataclasses.asdict(decode.launch_config("replay", DIMS["nemotron_h"][1], DIMS["nemotron_h"][2], 256,
                                                        gpu=decode.gpu_name("cuda")))
        VARIANTS[:] = [parse_variant(spec, base) for spec in args.derive]

    check_output(p, args.json)
    require_cuda(p)
    start = time.perf_counter()
    dtype = getattr(torch, args.dtype)
    if args.variants and args.compile_workers > 0:
        precompile(dtype, args.compile_workers)
    flush = None if args.no_l2_flush else L2Flusher(mode=args.l2_flush)
    info = device_info()
    copies = copy_bandwidths_gbps()
    copy_gbps = max(copies.values())
    floor = graph_floor_us(flush, args.rounds)
    print(f"# {info}  copy bandwidth (read + write): " + ", ".join(f"{k} {v:.0f} GB/s" for k, v in copies.items())
          + f"; graph floor {floor:.1f} us (a one-kernel graph's replay, timed as the steps are: in every row)"
          + f"; inputs {args.inputs}, dt {args.dt_dtype}, ring_dt {args.ring_dt_layout}"
          + f"; L2 flush {flush.mode if flush else 'none'}",
          flush=True)
    result = {"device": info, "copy_gbps": copy_gbps, "copies_gbps": copies, "graph_floor_us": floor, "window": WINDOW,
              "state_dtype": "float32", "activation": args.dtype, "l2_flush": flush.mode if flush else None,
              "inputs": args.inputs, "dt_dtype": args.dt_dtype, LAYOUT_KEY: args.ring_dt_layout}
    if args.variants:
        run_variants(dtype, flush, args.variant_rounds, copy_gbps, result, args.json, args.budget_s, start,
                     tuple(args.variant_batches))
        return result
    configs = None
    if args.sweep or args.tune:
        result["sweep"], configs = sweep(args.sweep_batches, dtype, flush, args.rounds)
        result["tuned"] = {b: [str(c) for c in cfgs] for b, cfgs in configs.items()}
    inputs = dict(kind=args.inputs, dt_dtype=torch.float32 if args.dt_dtype == "float32" else None)
    if not args.sweep:
        print(HEADER, flush=True)
        same_copy = SameSizeCopy(flush, args.rounds)
        records = []
        for name in args.dims:
            for batch in args.batches:
                for repeat in range(args.repeats):
                    rec = bench(name, batch, dtype, flush, args.rounds, copy_gbps, configs, same_copy, inputs,
                                args.ring_dt_layout)
                    rec["repeat"] = repeat
                    records.append(rec)
                    print(row(rec), flush=True)
        result["results"] = records
        result["same_size_copy_gbps"] = {f"{mib} MiB": gbps for mib, gbps in same_copy.cache.items()}
        if args.repeats > 1:
            result["spread"] = spread(records, ("dims", "batch"), SPREAD_KEYS)
            print(spread_lines(result["spread"], ("dims", "batch"), SPREAD_KEYS), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
