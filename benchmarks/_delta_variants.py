"""``bench_gdn_decode.py --variants``: every replay kernel variant of :data:`VARIANTS`, checked
on the GPU against the row-wise replay kernel and the standard kernel (WRONG and no timing on a
mismatch), then timed (non-flush, flush, amortized, staggered) beside fla and the standard step,
in one short run; ``--derive`` adds variants with launch fields replaced."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import multiprocessing
import time

import torch

from _delta_layer import DTYPES, Cursors, Layer, fla_fn, standard_fn, window_cycle
from _derive import label, parse_fields
from _timing import L2Flusher, capture_graph, copy_bandwidth_gbps, device_info, warmed_median

from trtllm_replayssm.ops.gdn import decode
from trtllm_replayssm.ops.gdn.decode_chunked import ChunkedVariant, chunked_config
from trtllm_replayssm.ops.gdn.decode_staged import (
    StagedVariant, flush_config, folds_first, ring_split, staged_config, uses_flush_dot,
)
from trtllm_replayssm.ops.gdn.reference import delta_rule_replay_flush as flush_slots
from trtllm_replayssm.ops.gdn.reference import delta_rule_replay_materialize as materialize
from trtllm_replayssm.ops.gdn.reference import slots_due_to_flush


@dataclasses.dataclass(frozen=True)
class WriteThrough:
    """``variant="write_through"`` with the standard step's launch config or this ``(BV, warps)``."""

    block_v: int | None = None
    num_warps: int | None = None


#: (name, ``variant`` of decode.delta_replay_step, batches it runs at or None for all). Each
#: distinct launch config is one Triton compile (~1-4 s; a staged variant is two or three
#: kernels): per kind at batches 1/128/256, 13 replay launch configs + 2 standard + fla's + the
#: copy kernel.
#: The chunked variants that lost to the row-wise kernel everywhere, and the staged ``wy``,
#: ``fold u`` and BV=32 / 8 warps configs (RESULTS.md, 2026-11-30), are out of the sweep.
#: ``flush`` configs: the flush rows in a third launch, the stream kernel without a fold;
#: ``raw_qk``: the stream programs read the raw q and the ring's k instead of two fp32 vectors;
#: the flush launch's programs take one tile (``flush_split`` = d_v / BV) unless named:
#: ``whole heads``, or ``heads N split S`` (N value heads, d_v / S rows each, per program).
#: ``ring_split`` / ``ring_prefetch`` left this list after an H200 profile showed no gain (GDN
#: ring launch 26.0 us; split 2: 26.5 us; with prefetch: 27.8 us; NOTES_delta.md).
#: Registers for sm_90 at Qwen3.5-4B dims, bf16 (benchmarks/registers_gdn_staged.py; no spills):
#: stream kernel with the flush launch BV=16 / 2 warps and BV=32 / 4 warps 72 (GDN and KDA, raw_qk
#: or not; with the fold in it: BV=32 / 4 warps 96), BV=16 / 4 warps and BV=8 / 2 warps 48;
#: flush kernel 80 (KDA whole heads 96), heads 4 split 2 72 (KDA 80); ring kernel 48 (raw_qk
#: 56; KDA 72).
VARIANTS = [
    ("rowwise", "rowwise", None),
    ("chunked 2 warps", ChunkedVariant(num_warps=2), (1, 3, 8, 15, 32)),
    ("staged", StagedVariant(), None),
    ("staged flush raw_qk BV=16 2 warps whole heads",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True), (128, 256, 512)),
    # the flush launch as a list of flush tiles walked by a wave of programs (xN per SM), and
    # the cached u folded as one tf32x3 product per tile (fold u dot)
    ("staged flush raw_qk list x8 BV=16 4 warps refold",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_persistent=8, flush_block_v=16,
                   flush_warps=4), (128, 256, 512)),
    ("staged flush raw_qk list x8 BV=16 4 warps fold u",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, fold="u", flush_persistent=8,
                   flush_block_v=16, flush_warps=4), (128, 256, 512)),
    ("staged flush raw_qk fold u dot BV=16 4 warps split 8",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, fold="u", flush_dot=True, flush_split=8,
                   flush_block_v=16, flush_warps=4), (128, 256, 512)),
    ("staged flush raw_qk list x8 BV=16 4 warps fold u dot",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, fold="u", flush_dot=True,
                   flush_persistent=8, flush_block_v=16, flush_warps=4), None),
    ("staged flush raw_qk list x4 BV=32 4 warps fold u dot",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, fold="u", flush_dot=True,
                   flush_persistent=4, flush_block_v=32, flush_warps=4), (128, 256, 512)),
    ("staged flush raw_qk list x4 BV=32 4 warps fold u dot side stream",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, fold="u", flush_dot=True,
                   flush_persistent=4, flush_block_v=32, flush_warps=4, flush_stream=True), None),
    ("staged flush raw_qk BV=16 2 warps whole heads side stream",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_stream=True), (128, 256, 512)),
    ("staged flush raw_qk BV=32 4 warps list x4 BV=32 4 warps fold u dot",
     StagedVariant(block_v=32, num_warps=4, flush_launch=True, raw_qk=True, fold="u", flush_dot=True,
                   flush_persistent=4, flush_block_v=32, flush_warps=4), (128, 256, 512)),
    ("staged flush raw_qk BV=8 2 warps list x4 BV=32 4 warps fold u dot",
     StagedVariant(block_v=8, num_warps=2, flush_launch=True, raw_qk=True, fold="u", flush_dot=True,
                   flush_persistent=4, flush_block_v=32, flush_warps=4), (128, 256, 512)),
    ("staged flush raw_qk list x16 BV=16 2 warps fold u dot",
     StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, fold="u", flush_dot=True,
                   flush_persistent=16, flush_block_v=16, flush_warps=2), (128, 256, 512)),
    # The write-through step (a flush at every token on the standard step's tiles) at the
    # latency-bound batches, at the standard step's tile or ``(BV, warps)`` given.
    ("write-through", WriteThrough(), (1, 3, 8, 15, 16, 24, 31, 32, 40, 48, 56, 64)),
    ("write-through BV=4 1 warp", WriteThrough(4, 1), (1, 3, 8, 15, 16, 24, 31, 32, 64)),
    ("write-through BV=16 2 warps", WriteThrough(16, 2), (1, 3, 8, 15, 16, 24, 31, 32, 64)),
    # what the ops launch when no variant is named (decode.default_variant), from batch 16
    ("default", None, (16, 24, 31, 32, 40, 48, 56, 64, 128, 256, 512)),
]


#: ``(BV, warps)`` of the standard step also timed (besides its launch_config).
STANDARD_TILES = ((4, 1), (8, 1), (16, 1), (16, 2), (32, 4))


def derive_variants(specs):
    """Add to ``VARIANTS`` one variant per ``"BASE: field=value, ..."`` (``BASE`` a staged or
    chunked entry of ``VARIANTS``, the fields those of its dataclass); returns the new names."""
    by_name = {name: (variant, batches) for name, variant, batches in VARIANTS}
    names = []
    for spec in specs:
        base, sep, sets = spec.partition(":")
        if not sep or base.strip() not in by_name or not dataclasses.is_dataclass(by_name[base.strip()][0]):
            # "default" and "rowwise" name no dataclass: the ops' default with fields replaced is
            # the benchmarks' --default-with.
            raise SystemExit(f"--derive: expected 'BASE: field=value, ...' with BASE a staged or chunked variant "
                             f"name (for the ops' default: bench_gdn_decode.py / bench_kda_decode.py "
                             f"--default-with), got {spec!r}")
        variant, batches = by_name[base.strip()]
        fields = parse_fields(sets, type(variant))
        name = f"{base.strip()} + {label(fields)}"
        VARIANTS.append((name, dataclasses.replace(variant, **fields), batches))
        names.append(name)
    return names


def nonflush_phases(L):
    """Ring lengths timed for the non-flush mean: its cost is linear in ``c``, so the mean at
    ``0, (L-2)/2, L-2`` (0, 7, 14 at L=16) is the mean over ``0..L-2``."""
    return (0, (L - 2) // 2, L - 2)


def variant_step(layer, variant, state, x, idx, refold=True):
    launch = {}
    if isinstance(variant, WriteThrough):
        launch = dict(block_v=variant.block_v, num_warps=variant.num_warps)
        variant = "write_through"
    return decode.delta_replay_step(
        state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
        state.committed, state.flush_at, state.window, **x, A_log=layer.A_log, dt_bias=layer.dt_bias,
        state_indices=idx, pad_slot_id=-1, scale=None, refold=refold, variant=variant, **launch)


def _rel(actual, expected):
    expected = expected.float()
    return ((actual.float() - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def check_variant(layer, batch, variant):
    """Errors of ``variant`` against (a) the row-wise replay kernel from a staggered random state
    over L + 1 steps (every slot flushes once; same rounding, so a tight bound) and (b) the
    standard kernel from a fresh window over L steps (the last one flushes; the replay rounds k
    to the activation dtype, the standard step does not). A write-through step folds the raw
    ring: in (a) its reference is the standard kernel on the refolded (materialised) state,
    its cursors must end at ``(0, L)``. Returns ``(ok, errors)``."""
    write_through = isinstance(variant, WriteThrough)
    L = layer.window
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    fp32 = layer.dtype == torch.float32
    errors = {}
    mine = layer.state(batch)
    mine.committed.copy_(idx % L)
    mine.flush_at.fill_(L)
    # The random state's cached u does not follow from its raw ring: a variant that folds the
    # cached u is compared with the row-wise kernel folding it too (refold=False); a
    # write-through step folds the raw entries, so its reference is the standard step on the
    # materialised (refolded) state.
    ref_refold = not (isinstance(variant, StagedVariant) and variant.fold == "u")
    # A fold-first variant flushes a row before the token that would fill its window: the
    # row-wise reference gets those rows flushed first (the reference's replay_flush).
    first = folds_first(variant, True, L)
    if write_through:
        ref = materialize(mine, idx, -1, refold=True, per_channel_decay=layer.per_channel)
    else:
        ref = mine.clone()
    for _ in range(L + 1):
        x = layer.tokens(batch)
        if write_through:
            want = decode.delta_standard_step(ref, **x, A_log=layer.A_log, dt_bias=layer.dt_bias,
                                              state_indices=idx, pad_slot_id=-1, scale=None)
        else:
            if first:
                due = slots_due_to_flush(ref, idx)
                flush_slots(ref, due, -1, ref_refold, layer.per_channel)
            want = variant_step(layer, "rowwise", ref, x, idx, refold=ref_refold)
        errors["out_vs_rowwise"] = max(errors.get("out_vs_rowwise", 0.0),
                                       _rel(variant_step(layer, variant, mine, x, idx), want))
    if write_through:
        cursors_equal = bool((mine.flush_at == L).all() and (mine.committed == 0).all())
        errors["checkpoint_vs_rowwise"] = _rel(mine.checkpoint, ref)
        errors["ring_u_vs_rowwise"] = 0.0
    else:
        errors["checkpoint_vs_rowwise"] = _rel(mine.checkpoint, ref.checkpoint)
        errors["ring_u_vs_rowwise"] = _rel(mine.ring_u, ref.ring_u)
        cursors_equal = torch.equal(mine.committed, ref.committed) and torch.equal(mine.flush_at, ref.flush_at)
    mine.committed.zero_()
    mine.flush_at.fill_(L)
    plain = mine.checkpoint.clone()
    for _ in range(L):
        x = layer.tokens(batch)
        o = variant_step(layer, variant, mine, x, idx)
        want = decode.delta_standard_step(plain, **x, A_log=layer.A_log, dt_bias=layer.dt_bias,
                                          state_indices=idx, pad_slot_id=-1, scale=None)
        errors["out_vs_standard"] = max(errors.get("out_vs_standard", 0.0), _rel(o, want))
    # (A fold-first variant's last step left the token in the ring: compare the whole state.)
    errors["checkpoint_vs_standard"] = _rel(
        materialize(mine, idx, -1, refold=True, per_channel_decay=layer.per_channel) if first else mine.checkpoint,
        plain)
    torch.cuda.synchronize()
    loose = 1e-4 if fp32 else 5e-2
    # 16-bit activations: the ring keeps the l2-normalised k in that dtype, and a kernel whose
    # norm reduces in another order (other warps per program) can round an element one ulp apart
    # (2^-8 in bf16), which moves the checkpoint and u by up to ~1e-3; fp32 keeps the tight bound.
    near = 1e-4 if fp32 else 5e-3
    ok = (cursors_equal and bool((mine.committed == int(first)).all()) and errors["checkpoint_vs_rowwise"] < near
          and errors["ring_u_vs_rowwise"] < near and errors["out_vs_rowwise"] < (1e-4 if fp32 else 2e-2)
          and errors["out_vs_standard"] < loose and errors["checkpoint_vs_standard"] < loose)
    return ok, errors


def launch_text(layer, batch, variant):
    if variant is None:
        variant = decode.default_variant(batch, layer.per_channel, True, layer.d_v)
        return f"{variant}" if not isinstance(variant, StagedVariant) else "staged: " + launch_text(layer, batch, variant)
    if isinstance(variant, WriteThrough):
        bv, warps = decode.write_through_config(batch, layer.HV, layer.d_k, layer.d_v)
        return f"BV={variant.block_v or bv} warps={variant.num_warps or warps}"
    if isinstance(variant, StagedVariant):
        bv, warps, ring_warps = staged_config(batch, layer.HV, layer.d_k, layer.d_v, variant)
        text = f"BV={bv} warps={warps} ring warps={ring_warps} ring split={ring_split(layer.HV, layer.H, variant)}"
        if variant.flush_launch:
            # variant_step calls with refold=True
            flush_bv, flush_warps, heads, split = flush_config(batch, layer.HV, layer.d_k, layer.d_v, variant,
                                                               uses_flush_dot(variant, True))
            text += f" flush BV={flush_bv} warps={flush_warps} heads={heads} split={split}"
        return text
    if variant == "rowwise":
        bv, split, warps = decode.replay_config(batch, layer.HV, layer.d_k, layer.d_v)
    else:
        bv, split, warps = chunked_config(batch, layer.HV, layer.d_k, layer.d_v, variant)
    return f"BV={bv} split={split} warps={warps}"


def bench_variants_batch(layer, batch, flusher, rounds, copy_bw, with_fla, names):
    L = layer.window
    x = layer.tokens(batch)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    std_bytes = 2 * layer.state_bytes(batch) + layer.token_bytes(batch)
    rows = []

    def base_row(mode, fn):
        us = warmed_median(capture_graph(fn), rounds, flusher)
        rows.append({"batch": batch, "mode": mode, "amortized_us": us, "pct_copy": 100 * std_bytes / us / 1e3 / copy_bw})

    if with_fla:
        base_row("fla", fla_fn(layer, batch, x))
    ssm = torch.randn(batch, layer.HV, layer.d_v, layer.d_k, device="cuda") * 0.05
    base_row("standard", standard_fn(layer, ssm, x, idx))
    for bv, warps in STANDARD_TILES:
        base_row(f"standard BV={bv} {warps} warps", standard_fn(layer, ssm, x, idx, block_v=bv, num_warps=warps))
    del ssm
    phases = nonflush_phases(L)
    nonflush_bytes = sum(layer.step_bytes(batch, c, False) for c in phases) / len(phases)
    flush_bytes = layer.step_bytes(batch, L - 1, True, fold_u=False)
    for name, variant, batches in VARIANTS:
        if (names and name not in names) or (batches is not None and batch not in batches):
            continue
        row = {"batch": batch, "mode": name, "launch": launch_text(layer, batch, variant)}
        rows.append(row)
        if variant != "rowwise":
            ok, row["errors"] = check_variant(layer, batch, variant)
            row["check"] = "ok" if ok else "WRONG"
            if not ok:
                continue
        state = layer.state(batch)
        graph = capture_graph(lambda: variant_step(layer, variant, state, x, idx))

        def phase_us(phases):
            return warmed_median(graph, rounds, Cursors(state, [phases], flusher))

        if isinstance(variant, WriteThrough):
            # Every step of a write-through slot starts at c = 0 (no ring to replay or fold).
            us = phase_us(torch.zeros(batch, dtype=torch.int32, device="cuda"))
            row.update(nonflush_us=us, flush_us=us, amortized_us=us, staggered_us=us)
            del graph, state
            continue
        # A fold-first flush cycles through ring lengths 1..L-1 (L - 1 tokens per fold); the
        # non-flush cost is linear in c, so the mean over 1..L-2 is that of its ends.
        cycle = window_cycle(variant, True, L)
        own = phases if cycle[0] == 0 else (cycle[0], L - 2)
        per_phase = {c: phase_us(torch.full((batch,), c, dtype=torch.int32, device="cuda"))
                     for c in (*own, L - 1)}
        nonflush = sum(per_phase[c] for c in own) / len(own)
        mixed = cycle[0] + torch.arange(batch, device="cuda", dtype=torch.int32) % len(cycle)
        row.update(per_phase_us=per_phase, nonflush_us=nonflush, flush_us=per_phase[L - 1],
                   amortized_us=((len(cycle) - 1) * nonflush + per_phase[L - 1]) / len(cycle),
                   staggered_us=phase_us(mixed),
                   nonflush_pct_copy=100 * nonflush_bytes / nonflush / 1e3 / copy_bw,
                   flush_pct_copy=100 * flush_bytes / per_phase[L - 1] / 1e3 / copy_bw)
        del graph, state
        torch.cuda.empty_cache()
    return rows


def print_variants(rows, kind, L):
    print(f"\n{kind.upper()} replay variants (non-flush: mean of c = {nonflush_phases(L)}; amortized: "
          f"({L - 1} non-flush + 1 flush) / {L}; fold_first: c = 1 and {L - 2}, ({L - 2} + 1) / {L - 1})")
    print("| batch | kernel | launch | check | non-flush us | % copy | flush us | % copy | amortized us "
          "| x fla | x standard | staggered us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for batch in sorted({r["batch"] for r in rows}):
        mine = [r for r in rows if r["batch"] == batch]
        base = {r["mode"]: r["amortized_us"] for r in mine if r["mode"] in ("fla", "standard")}
        mine.sort(key=lambda r: r.get("amortized_us", float("inf")))

        def cell(r, key, fmt="{:.1f}"):
            return fmt.format(r[key]) if r.get(key) is not None else "-"

        for r in mine:
            us = r.get("amortized_us")
            x_fla = f"{base['fla'] / us:.2f}" if us and "fla" in base else "-"
            x_std = f"{base['standard'] / us:.2f}" if us else "-"
            print(f"| {batch} | {r['mode']} | {r.get('launch', '-')} | {r.get('check', '-')} | {cell(r, 'nonflush_us')} "
                  f"| {cell(r, 'nonflush_pct_copy', '{:.0f}%')} | {cell(r, 'flush_us')} "
                  f"| {cell(r, 'flush_pct_copy', '{:.0f}%')} | {cell(r, 'amortized_us')} | {x_fla} | {x_std} "
                  f"| {cell(r, 'staggered_us')} |")
    for r in rows:
        if r.get("check") == "WRONG":
            print(f"WRONG: batch {r['batch']} {r['mode']}: {r['errors']}")


def launch_plan(layer, batches, names):
    """The distinct kernels a --variants run launches: ``[(name, variant, BV, split, warps)]``
    (the standard kernel as name "standard"; split None)."""
    plan = {}
    for batch in batches:
        bv, warps = decode.launch_config(batch, layer.HV, layer.d_k, layer.d_v)
        plan[("standard", bv, None, warps)] = ("standard", None, bv, None, warps)
        for name, variant, only in VARIANTS:
            if (names and name not in names) or (only is not None and batch not in only):
                continue
            if variant is None or isinstance(variant, WriteThrough):
                continue  # compiled when first timed
            if isinstance(variant, StagedVariant):
                bv, warps, _ = staged_config(batch, layer.HV, layer.d_k, layer.d_v, variant)
                split = None
            elif variant == "rowwise":
                bv, split, warps = decode.replay_config(batch, layer.HV, layer.d_k, layer.d_v)
            else:
                bv, split, warps = chunked_config(batch, layer.HV, layer.d_k, layer.d_v, variant)
            plan[(name, bv, split, warps)] = (name, variant, bv, split, warps)
    return list(plan.values())


def compile_one(kind, dims, dtype, window, entry):
    """Launch one planned kernel once at batch 1 with the planned launch config: the same
    constexprs and argument specialisation as the timed launches, so Triton's disk cache then
    holds the compiled kernel for them."""
    layer = Layer(kind, *dims, DTYPES[dtype], window)
    name, variant, bv, split, warps = entry
    x = layer.tokens(1)
    idx = torch.zeros(1, dtype=torch.int32, device="cuda")
    if name == "standard":
        ssm = torch.zeros(1, layer.HV, layer.d_v, layer.d_k, device="cuda")
        decode.delta_standard_step(ssm, **x, A_log=layer.A_log, dt_bias=layer.dt_bias, state_indices=idx,
                                   pad_slot_id=-1, scale=None, block_v=bv, num_warps=warps)
    elif variant == "rowwise":
        state = layer.state(1)
        decode.delta_replay_step(
            state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
            state.committed, state.flush_at, state.window, **x, A_log=layer.A_log, dt_bias=layer.dt_bias,
            state_indices=idx, pad_slot_id=-1, scale=None, refold=True, variant="rowwise", block_v=bv, split=split,
            num_warps=warps)
    else:
        fixed = dict(block_v=bv, num_warps=warps) if split is None else dict(block_v=bv, split=split, num_warps=warps)
        variant_step(layer, dataclasses.replace(variant, **fixed), layer.state(1), x, idx)
    torch.cuda.synchronize()
    return name


def precompile(layer, kind, args):
    """Compile every planned kernel in ``args.compile_workers`` processes at once (Triton compiles
    one kernel at a time per process, ~1-4 s each); failures only cost the parallelism."""
    plan = launch_plan(layer, args.batches, args.variants)
    start = time.perf_counter()
    try:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(min(args.compile_workers, len(plan)), mp_context=ctx) as pool:
            jobs = [pool.submit(compile_one, kind, args.dims, args.dtype, args.window, entry) for entry in plan]
            for job in jobs:
                job.result()
    except Exception as exc:  # the timed run compiles whatever is missing
        print(f"precompile: {type(exc).__name__}: {exc}")
    print(f"precompiled {len(plan)} kernels in {time.perf_counter() - start:.0f} s", flush=True)


def run_variants(layer, args, kind):
    start = time.perf_counter()
    if args.compile_workers > 0:
        precompile(layer, kind, args)
    info = device_info()
    copy_bw = copy_bandwidth_gbps(nbytes=1 << 30, rounds=5)
    print(f"{info}  copy bandwidth {copy_bw:.0f} GB/s")
    flusher = L2Flusher()
    rows = []
    for batch in args.batches:
        rows += bench_variants_batch(layer, batch, flusher, args.rounds, copy_bw, not args.no_fla, args.variants)
        print(f"batch {batch} done at {time.perf_counter() - start:.0f} s", flush=True)
    print_variants(rows, kind, layer.window)
    print(f"{kind} variants: {time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kind": kind, "dims": args.dims, "dtype": args.dtype, "window": args.window, "device": info,
                       "copy_GBps": copy_bw, "rows": rows}, f, indent=1)

