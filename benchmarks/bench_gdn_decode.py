"""Gated DeltaNet decode: ReplaySSM step vs the standard step vs fla, one H200-style table.

For each batch (one slot per row, Qwen3.5-4B dims by default: HV=32, H=16, d_k=d_v=128,
bf16 activations, fp32 state, L=16) it times, as CUDA-graph replays with L2 flushed before
each replay (benchmarks/_timing.py; at batches up to 32 each step captured in sixteen graphs and
replayed in rotated rounds, its time the mean of its graphs' medians: ``_timing.time_steps``):

* ``fla``: fla's ``fused_recurrent_gated_delta_rule`` (gates, l2norm, sigmoid in-kernel,
  ``state_v_first`` so it reads our ``[HV, d_v, d_k]`` layout; layouts converted outside the
  timed region), writing its final state: the external baseline.
* ``standard``: the in-project standard kernel (read + write the state every token).
* ``replay non-flush``: mean over ring lengths ``c = 0..L-2``; ``replay flush``: ``c = L-1``;
  ``replay amortized``: the mean over the ``L`` phases of a window (15 + 1 at L=16; a fold-first
  flush, ``StagedVariant.fold_first``, cycles through ring lengths ``1..L-1``: 14 + 1);
  ``replay staggered``: one step of a batch whose slots sit at phases ``slot % L`` (fold-first:
  ``1 + slot % (L - 1)``), the cursors set before each replay; ``replay steady``: the mean over
  a window of consecutive steps from the cache's staggered placement (slot ``i`` first flushes
  after ``L - i % L`` tokens), each replay advancing the cursors as a server's steps do (the
  Mamba-2 benchmark's mixed row); what the
  ops run by default (``refold=None``: the flush folds the cached ``u``; KDA's fold-first).
* ``replay refold ...``: the same four with the window refolded from the raw ring.

The cursors are set before each replay, outside the timed region, so the same graph is timed at
every phase. GB/s counts the bytes each step must move; ``% copy`` is against a device-to-device
copy measured in the same run. Prints a table and writes JSON (``--json``). Batch-1 ratios
move by a few percent between processes here (RESULTS.md, thirtieth run);
``probe_batch1_paired.py --kind gdn|kda`` times them in pairs.

``--variants`` instead checks every replay kernel variant of ``_delta_variants.VARIANTS``
(row-wise, chunked, the staged step, the write-through step) against the row-wise replay kernel
and the standard kernel on the GPU (WRONG and no timing on a mismatch), then times each one's
non-flush, flush, amortized and staggered steps beside fla and the standard kernel, at batches
1, 128, 256 (a short run: about one compile per variant and launch config).

    python benchmarks/bench_gdn_decode.py --json gdn.json
    python benchmarks/bench_gdn_decode.py --variants --json gdn_variants.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _cli import check_output, positive_int, require_cuda  # noqa: E402

from _delta_layer import (DTYPES, Cursors, Layer, default_with, fla_fn, replay_fn, staged_with,  # noqa: E402
                          standard_fn, steady_start, window_cycle)
from _delta_variants import derive_variants, run_variants  # noqa: E402
from _derive import label, parse_fields, parse_fields_of  # noqa: E402
from _spread import spread, spread_lines  # noqa: E402
from _timing import (L2Flusher, SameSizeCopy, add_l2_flush_argument, capture_graph, copy_bandwidth_gbps, device_info,  # noqa: E402
                     graph_floor_us, graphs_for, time_steps, time_warmed)

from trtllm_replayssm.ops.gdn import decode  # noqa: E402
from trtllm_replayssm.ops.gdn._wrappers import default_refold  # noqa: E402
from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant  # noqa: E402


BATCHES = (1, 32, 128, 256, 512)
ROUNDS = 20


def bench_batch(layer, batch, flusher, rounds, copy_bw, with_fla, sweep, same_copy=None, with_fields=(), fused=(),
                staged=()):
    L = layer.window
    x = layer.tokens(batch)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    rows = []

    def row(mode, us, nbytes, **extra):
        rows.append({"batch": batch, "mode": mode, "us": us, "bytes": nbytes,
                     "GBps": nbytes / (us * 1e-6) / 1e9 if nbytes else None, **extra})
        return us

    def captured(fn):  # several graphs of one step at small batches (_timing.graphs_for)
        return [capture_graph(fn) for _ in range(graphs_for(batch))]

    def timed(fn):
        return time_warmed(captured(fn), rounds, flusher)

    if with_fla:
        row("fla", timed(fla_fn(layer, batch, x)), 2 * layer.state_bytes(batch) + layer.token_bytes(batch))
    ssm = torch.randn(batch, layer.HV, layer.d_v, layer.d_k, device="cuda") * 0.05
    us = timed(standard_fn(layer, ssm, x, idx))
    row("standard", us, 2 * layer.state_bytes(batch) + layer.token_bytes(batch))
    del ssm

    state = layer.state(batch)
    default = default_refold(layer.per_channel, batch)
    # (block_v, variant, row name, refold); block_v and variant None: the ops' default launch
    variants = [(None, None, "replay", default)]
    variants += [(bv, None, f"replay BV={bv}", default) for bv in (8, 16, 32)] if sweep else []
    for fields in with_fields:  # --default-with, where this batch's default has those fields
        variant = default_with(layer, batch, default, fields)
        variants += [(None, variant, f"replay {label(fields)}", default)] if variant is not None else []
    for fields in fused:  # --fused: the one-launch step, which folds the cached u
        variants.append((None, FusedVariant(**fields), f"replay fused {label(fields)}".rstrip(), False))
    for fields in staged:  # --staged: the staged step where the one-launch step is the default
        variant = staged_with(layer, batch, fields)
        variants += [(None, variant, f"replay staged {label(fields)}".rstrip(), False)] if variant is not None else []
    variants.append((None, None, "replay fold u" if default else "replay refold", not default))
    for block_v, variant, name, refold in variants:
        graphs = captured(replay_fn(layer, state, x, idx, refold=refold, block_v=block_v, variant=variant))
        # A write-through step (the default at small batches) keeps every slot at c = 0.
        launched = (variant or decode.default_variant(batch, layer.per_channel, refold, layer.d_v, layer.window)
                    if block_v is None else None)
        through = launched == "write_through"
        cycle = window_cycle(launched, refold, L)
        phases = [torch.full((batch,), 0 if through else c, dtype=torch.int32, device="cuda") for c in range(L)]
        per_phase = [time_steps(graphs, rounds=rounds, flush=Cursors(state, [p], flusher))[0] for p in phases]
        nonflush = sum(per_phase[c] for c in cycle[:-1]) / (len(cycle) - 1)
        nonflush_bytes = sum(layer.step_bytes(batch, c, False) for c in cycle[:-1]) / (len(cycle) - 1)
        flush_bytes = layer.step_bytes(batch, L - 1, True, fold_u=not refold)
        if through:
            nonflush_bytes = flush_bytes = layer.step_bytes(batch, 0, True)
        row(f"{name} non-flush", nonflush, nonflush_bytes)
        row(f"{name} flush", per_phase[-1], flush_bytes)
        row(f"{name} amortized", sum(per_phase[c] for c in cycle) / len(cycle),
            (nonflush_bytes * (len(cycle) - 1) + flush_bytes) / len(cycle), per_phase_us=per_phase, cycle=cycle)
        if block_v is None:
            stagger = (cycle[0] + torch.arange(batch, device="cuda", dtype=torch.int32) % len(cycle)) * (not through)
            staggered_us = time_steps(captured(replay_fn(layer, state, x, idx, refold=refold, variant=variant)),
                                      rounds=rounds, flush=Cursors(state, [stagger], flusher))[0]
            st_bytes = sum(layer.step_bytes(1, c, c == L - 1 or through, fold_u=not refold or c != L - 1)
                           * int((stagger == c).sum())
                           for c in range(L))
            row(f"{name} staggered", staggered_us, st_bytes)
            if not through:
                # Steady state: the cache's staggered placement, then consecutive replays, each
                # advancing the cursors (a window per round), as a server's steps do.
                steady_start(state, L)
                steady = time_steps(graphs, len(cycle), rounds=rounds, flush=flusher)
                row(f"{name} steady", sum(steady) / len(steady), st_bytes)
    del state
    torch.cuda.empty_cache()
    for r in rows:
        r["pct_copy"] = 100 * r["GBps"] / copy_bw if r["GBps"] else None
        r["pct_same_copy"] = 100 * r["GBps"] / same_copy(r["bytes"]) if r["GBps"] and same_copy else None
    return rows


def warmup_only(layer, batches):
    """Compile every kernel variant the run uses (fills Triton's disk cache; no timing)."""
    for batch in batches:
        x = layer.tokens(batch)
        idx = torch.arange(batch, dtype=torch.int32, device="cuda")
        state = layer.state(batch)
        ssm = torch.zeros(batch, layer.HV, layer.d_v, layer.d_k, device="cuda")
        decode.delta_standard_step(ssm, **x, A_log=layer.A_log, dt_bias=layer.dt_bias, state_indices=idx,
                                   pad_slot_id=-1, scale=None)
        replay_fn(layer, state, x, idx)()
        replay_fn(layer, state, x, idx, refold=False)()
    torch.cuda.synchronize()


#: What ``--repeats`` reports the spread of, per (batch, mode).
SPREAD_KEYS = ("us", "x_fla", "x_standard")


def with_ratios(rows, repeat=0):
    """``rows`` of one :func:`bench_batch` call with ``repeat`` and their ratios to that call's
    fla and standard steps (``x_fla`` ``None`` without fla)."""
    fla = next((r["us"] for r in rows if r["mode"] == "fla"), None)
    std = next(r["us"] for r in rows if r["mode"] == "standard")
    for r in rows:
        r.update(repeat=repeat, x_fla=fla / r["us"] if fla else None, x_standard=std / r["us"])
    return rows


def print_table(rows, kind):
    head = "| batch | mode | us | GB/s | % copy | % same-size copy | x vs fla | x vs standard |"
    print(f"\n{kind.upper()} decode\n{head}\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        vs_fla = f"{r['x_fla']:.2f}" if r["x_fla"] is not None else "-"
        same = f"{r['pct_same_copy']:.0f}%" if r.get("pct_same_copy") is not None else "-"
        print(f"| {r['batch']} | {r['mode']} | {r['us']:.1f} | {r['GBps']:.0f} | {r['pct_copy']:.0f}% | {same} | {vs_fla} "
              f"| {r['x_standard']:.2f} |")


def main(kind="gdn", argv=None):
    defaults = {"gdn": (32, 16, 128, 128), "kda": (32, 32, 128, 128)}[kind]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=positive_int, nargs="+", default=list(BATCHES))
    p.add_argument("--dims", type=positive_int, nargs=4, default=list(defaults), metavar=("HV", "H", "D_K", "D_V"))
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--window", type=positive_int, default=16)
    p.add_argument("--rounds", type=positive_int, default=ROUNDS)
    p.add_argument("--no-fla", action="store_true", help="skip the fla baseline")
    p.add_argument("--repeats", type=int, default=1,
                   help="time each batch this many times in turn and print the spread of each row's us and "
                        "ratio to fla (the machines of a pool differ by ~1%%)")
    p.add_argument("--sweep", type=int, nargs="*", default=[1, 256], help="batches to sweep BV at")
    p.add_argument("--warmup-only", action="store_true", help="compile every variant and exit")
    p.add_argument("--json", help="write the rows and the machine description here")
    add_l2_flush_argument(p)
    p.add_argument("--variants", nargs="*", metavar="NAME",
                   help="check and time the replay kernel variants (all, or these names of VARIANTS) at "
                        "--batches (default 1 128 256), --rounds (default 10)")
    p.add_argument("--derive", nargs="+", default=[], metavar="SPEC",
                   help="--variants: also time 'BASE: field=value, ...' (a VARIANTS entry with fields replaced)")
    p.add_argument("--default-with", nargs="+", default=[], metavar="FIELDS",
                   help="plain runs: also time the ops' default launch at each batch with these 'field=value, ...' "
                        "replaced (a row 'replay <fields>'; skipped at batches whose default has no such fields, "
                        "e.g. 'block_v=64, read_stages=3' for the staged step)")
    p.add_argument("--fused", nargs="+", default=[], metavar="FIELDS",
                   help="plain runs, Gated DeltaNet: also time the one-launch step FusedVariant(field=value, ...) "
                        "at each batch (refold=False; a row 'replay fused <fields>'; '' for its defaults), e.g. "
                        "'block_v=64, stages=2' at batch 64, where the default is the staged step")
    p.add_argument("--staged", nargs="+", default=[], metavar="FIELDS",
                   help="plain runs, Gated DeltaNet: also time the staged step the ops take below the one-launch "
                        "step's batches, with these StagedVariant 'field=value, ...' replaced, at each batch "
                        "(refold=False; a row 'replay staged <fields>'; '' as it is), e.g. 'block_v=32, "
                        "read_stages=2' at batch 128")
    p.add_argument("--compile-workers", type=int, default=8,
                   help="--variants: processes compiling the kernels before the run (0: compile as they come)")
    args = p.parse_args(argv)
    if args.derive and args.variants is None:
        p.error("--derive: only with --variants (it adds variants to that run)")
    if (args.default_with or args.fused or args.staged) and args.variants is not None:
        p.error("--default-with / --fused / --staged: only in plain runs (without --variants; --derive adds "
                "variants there)")
    from trtllm_replayssm.ops.gdn.decode_staged import StagedVariant

    if args.fused and kind == "kda":
        p.error("--fused: Gated DeltaNet only (the one-launch step does not serve KDA's per-channel decays)")
    fused = []  # --fused
    for spec in args.fused:
        try:
            fused.append(parse_fields(spec, FusedVariant))  # '' parses to {}: the field defaults
            FusedVariant(**fused[-1])
        except (SystemExit, ValueError) as err:
            p.error(f"--fused: {spec!r} is not 'field=value, ...' of FusedVariant ({err})")

    if args.staged and kind == "kda":
        p.error("--staged: Gated DeltaNet only (KDA's default is the staged step: --default-with)")
    staged = []  # --staged
    for spec in args.staged:
        try:
            staged.append(parse_fields(spec, StagedVariant))
            # checked on the staged step the ops take at batch 256
            staged_with(types.SimpleNamespace(per_channel=False, d_v=args.dims[3], window=args.window), 256,
                        staged[-1])
        except (SystemExit, ValueError) as err:
            p.error(f"--staged: {spec!r} is not 'field=value, ...' of StagedVariant ({err})")

    with_fields = []  # --default-with
    for spec in args.default_with:
        try:
            with_fields.append(parse_fields_of(spec, (StagedVariant, FusedVariant))[1])
        except SystemExit:
            p.error(f"--default-with: {spec!r} is not 'field=value, ...' of StagedVariant or of FusedVariant")
    if args.repeats < 1:
        p.error(f"--repeats: expected >= 1, got {args.repeats}")
    derived = derive_variants(args.derive)
    check_output(p, args.json)
    require_cuda(p)
    dtype = DTYPES[args.dtype]
    layer = Layer(kind, *args.dims, dtype, args.window)
    if derived and args.variants:
        args.variants += derived
    if args.variants is not None:
        if args.batches == list(BATCHES):
            args.batches = [1, 128, 256]
        if args.rounds == ROUNDS:
            args.rounds = 10
        run_variants(layer, args, kind)
        return
    if args.warmup_only:
        warmup_only(layer, args.batches)
        return
    info = device_info()
    copy_bw = copy_bandwidth_gbps()
    flusher = L2Flusher(mode=args.l2_flush)
    floor = graph_floor_us(flusher, args.rounds)
    print(f"{info}  copy bandwidth {copy_bw:.0f} GB/s; graph floor {floor:.1f} us (a one-kernel graph's replay, "
          f"timed as the steps are: in every row); L2 flush {flusher.mode}")
    same_copy = SameSizeCopy(flusher, args.rounds)
    rows = []
    for batch in args.batches:
        for repeat in range(args.repeats):
            timed = bench_batch(layer, batch, flusher, args.rounds, copy_bw, not args.no_fla, batch in args.sweep,
                                same_copy, with_fields, fused, staged)
            rows += with_ratios(timed, repeat)
    print_table(rows, kind)
    out = {"kind": kind, "dims": args.dims, "dtype": args.dtype, "window": args.window, "device": info,
           "copy_GBps": copy_bw, "graph_floor_us": floor, "l2_flush": flusher.mode, "same_size_copy_GBps": {f"{mib} MiB": gbps for mib, gbps in same_copy.cache.items()},
           "rows": rows}
    if args.repeats > 1:
        out["spread"] = spread(rows, ("batch", "mode"), SPREAD_KEYS)
        print(spread_lines(out["spread"], ("batch", "mode"), SPREAD_KEYS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main("gdn")
