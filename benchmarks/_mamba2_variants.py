"""``bench_mamba2_decode.py --variants``: every replay kernel variant (``VARIANTS``, or ``--derive``'s)
checked against the standard kernel on the GPU, then timed beside the ops' default, in one short
run; the variants' labels; the precompile pass that fills Triton's cache in parallel first.

A variant is a dict of ``LaunchConfig`` keywords, optionally with ``ring_dt_layout`` (the state's
``ring_dt`` storage, ``state.RING_DT_LAYOUTS``: not a launch field). The timing itself is
``bench_mamba2_decode``'s (imported where it is used: that module imports this one).
"""

from __future__ import annotations

import json

import torch
from _derive import parse_fields

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, decode
from trtllm_replayssm.ops.mamba2.launch import WS_CONSUMERS
from trtllm_replayssm.ops.mamba2.state import RING_DT_LAYOUTS


def _bench():
    """``bench_mamba2_decode`` (dims, inputs, the timed steps), imported on first use."""
    import bench_mamba2_decode

    return bench_mamba2_decode


_FAST = dict(kernel="v4", cursor_kernel=True, rows_fastest=True)  # bandwidth-bound: no counters
_B1 = dict(kernel="v4")  # latency-bound: arrival counters, no second launch
_STAGED = dict(kernel="staged")  # a per-row ring launch, then one program per checkpoint tile
VARIANTS = [  # keyword arguments of decode.LaunchConfig; each set compiles once (~1-3 s).
    # Comments: stream-kernel registers per thread for sm_90 from benchmarks/registers_mamba2_staged.py
    # (Triton 3.9; spills noted; the ring launch takes 72).
    # one-launch, one program per head streaming its tiles (the default below batch 128 before)
    dict(block_p=32, num_warps=4, fold="loop", max_registers=128, **_FAST),
    # flush rows in a third launch: the stream launch compiles without the fold (flush-launch
    # registers with the ring and checkpoint row strides as compile-time constants and the ring
    # tiles loaded whole, zeroed past c in registers)
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, **_STAGED),  # 56; flush 132
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_max_registers=128,
         **_STAGED),  # flush 128 + 8 B spilled: 4 programs per SM (default)
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_heads=1, flush_max_registers=128,
         **_STAGED),
    # fewer flush programs: fewer early exits on non-flush steps (8192 programs cost 8.7 us)
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_heads=8, flush_max_registers=128,
         **_STAGED),
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_heads=16, flush_max_registers=128,
         **_STAGED),
    # the flush launch on a side stream, under the stream launch
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_max_registers=128, flush_stream=True,
         **_STAGED),
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_heads=1, flush_max_registers=128,
         flush_stream=True, **_STAGED),
    # the flush launch as a wave of programs walking the flush rows' tiles
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_persistent=3, **_STAGED),  # flush 130
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_persistent=4, flush_max_registers=128,
         **_STAGED),
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_persistent=16, flush_block_p=16,
         flush_warps=2, **_STAGED),
    # batch 1: head_dim split over 2-8 programs to fill 132 SMs
    dict(block_p=16, num_warps=4, p_split=4, fold="tf32x3", **_B1),  # 93
    dict(block_p=32, num_warps=8, p_split=2, fold="loop", **_B1),  # 66
]
VARIANT_BATCHES = (256, 1, 128)  # most important first: the first pass compiles every variant
#: A variant's key beside the LaunchConfig fields: the state's ring_dt storage (state.RING_DT_LAYOUTS).
LAYOUT_KEY = "ring_dt_layout"


def split_variant(kw) -> tuple[dict, str]:
    """A variant's ``(LaunchConfig keywords, ring_dt layout)``."""
    return {k: v for k, v in kw.items() if k != LAYOUT_KEY}, kw.get(LAYOUT_KEY, "heads")


def parse_variant(spec: str, base: dict) -> dict:
    """``--derive``'s ``"field=value, ..."`` over ``base``: LaunchConfig fields and ``ring_dt_layout``.
    A spec of ``ring_dt_layout`` alone is ``{"ring_dt_layout": ...}``: the ops' default launch at
    each batch on that state (not ``base``, which is one batch's)."""
    items = [item for item in spec.split(",") if item.strip()]
    layouts = [item.partition("=")[2].strip() for item in items if item.partition("=")[0].strip() == LAYOUT_KEY]
    for layout in layouts:
        if layout not in RING_DT_LAYOUTS:
            raise SystemExit(f"--derive: {LAYOUT_KEY} expected one of {RING_DT_LAYOUTS}, got {layout!r}")
    rest = ", ".join(item for item in items if item.partition("=")[0].strip() != LAYOUT_KEY)
    if layouts and not rest:
        return {LAYOUT_KEY: layouts[-1]}
    return dict(base, **parse_fields(rest, decode.LaunchConfig), **({LAYOUT_KEY: layouts[-1]} if layouts else {}))


def layout_label(layout: str) -> str:
    return " ringE" if layout == "entries" else ""


def short(cfg) -> str:
    """A LaunchConfig in a table column: the fields that differ from the defaults."""
    return (_short(cfg) + (" ring-x-in-ring" if cfg.ring_x_in_ring else "") + (" compact" if cfg.compact_coef else "")
            + (f" walk{cfg.stream_tiles}" if cfg.stream_tiles > 1 else "") + (" dt-sector" if cfg.ring_dt_sector else ""))


def _registers(cfg) -> str:
    """The stream (or one-launch) kernel's register cap in a label, where one is set."""
    return f" r{cfg.max_registers}" if cfg.max_registers else ""


def _ring_warps(cfg) -> str:
    return f" rw{cfg.ring_warps}" if cfg.ring_warps != 4 else ""


def _short(cfg) -> str:
    if cfg.kernel == "staged" and cfg.flush_launch and cfg.flush_impl == "cuda_ws":
        # The warp-specialised CUDA flush reads none of the other flush fields.
        return (f"staged bp{cfg.block_p} w{cfg.num_warps}" + _registers(cfg)
                + " +flush cuda_ws"
                + (f" s{cfg.flush_ws_stages}" if cfg.flush_ws_stages else "")
                + (f" smax{cfg.flush_ws_max_stages}" if cfg.flush_ws_max_stages else "") + (" side" if cfg.flush_stream else "")
                + (f" {cfg.flush_ws_order}{cfg.flush_ws_chunk}" if cfg.flush_ws_order != "stride" else "")
                + (f"t{cfg.flush_ws_taper}" if cfg.flush_ws_taper else "")
                + (f" l2a{cfg.flush_ws_l2_ahead}" if cfg.flush_ws_l2_ahead else "")
                + (f" cw{cfg.flush_ws_consumers}" if cfg.flush_ws_consumers != WS_CONSUMERS else "")
                + _ring_warps(cfg))
    if cfg.kernel == "staged" and cfg.flush_launch and cfg.flush_impl == "cuda":
        # The CUDA flush launch reads only its own fields and flush_heads.
        return (f"staged bp{cfg.block_p} w{cfg.num_warps}" + _registers(cfg)
                + f" +flush cuda h{cfg.flush_heads} b{cfg.flush_cuda_blocks}"
                + (f" rows{cfg.flush_cuda_rows}" if cfg.flush_cuda_rows else "") + (" side" if cfg.flush_stream else "")
                + _ring_warps(cfg))
    if cfg.kernel == "staged":
        return f"staged bp{cfg.block_p} w{cfg.num_warps} {cfg.fold}" + _registers(cfg) + (
            _ring_warps(cfg)) + (" rows" if cfg.rows_fastest else "") + (
            " pf" if cfg.ring_prefetch else "") + (
            (f" +flush bp{cfg.flush_block_p} w{cfg.flush_warps} " +
             (f"x{cfg.flush_persistent}/SM" + (f" items h{cfg.flush_heads}" if cfg.flush_list_items == "heads" else "")
              if cfg.flush_persistent else f"h{cfg.flush_heads}") +
             (f" r{'|'.join(map(str, cfg.flush_max_registers)) if isinstance(cfg.flush_max_registers, tuple) else cfg.flush_max_registers}"
              if cfg.flush_max_registers else "") +
             (" side" if cfg.flush_stream else "") + (f" s{cfg.flush_stages}" if cfg.flush_stages != 1 else "") +
             (f" l2 {cfg.flush_l2_prefetch}" + (f"+{cfg.flush_l2_ahead}" if cfg.flush_l2_ahead != 1 else "")
              if cfg.flush_l2_prefetch != "none" else "")) if cfg.flush_launch else "")
    if cfg.kernel == "write_through":
        return f"write-through bp{cfg.block_p} w{cfg.num_warps}" + _registers(cfg)
    if cfg.kernel == "v3":
        return f"v3 bp{cfg.block_p} w{cfg.num_warps}" + _registers(cfg) + (
            " cur" if cfg.cursor_kernel else "") + (" rows" if cfg.rows_fastest else "")
    parts = [f"v4 bp{cfg.block_p} p{cfg.p_split} w{cfg.num_warps}", cfg.fold,
             f"regs a{cfg.ahead}" if cfg.pipeline == "regs" else f"{cfg.pipeline} s{cfg.num_stages}"]
    parts += [f"r{cfg.max_registers}"] if cfg.max_registers else []
    parts += ["cur" if cfg.cursor_kernel else "cnt"] + (["rows"] if cfg.rows_fastest else [])
    parts += ["split"] if cfg.split_flush else []
    return " ".join(parts)


def check_against_standard(dims, batch, dtype, config, device="cuda", steps=None, ring_dt_layout="heads"):
    """Run ``steps`` replay steps with ``config`` next to the in-project standard kernel on the same
    inputs. In phase, every slot flushes at the last step: the outputs of every step and the
    checkpoint after the flush are compared; staggered, the outputs of every step. Returns
    ``(ok, message)``; ``steps``: a window's (``bench_mamba2_decode.WINDOW``) by default."""
    window = _bench().WINDOW
    steps = steps or window
    heads, head_dim, d_state, groups = dims
    gen = torch.Generator(device=device).manual_seed(batch + 7)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, device=device, generator=gen) * scale

    A = -(0.5 + torch.rand(heads, device=device, generator=gen))
    D, dt_bias = randn(heads), randn(heads, scale=0.5)
    idx = torch.arange(batch, dtype=torch.int32, device=device)
    worst_y = 0.0
    for stagger in (False, True):
        cfg = ReplaySSMConfig(window=window, flush_stagger=stagger)
        state = Mamba2ReplayState.allocate(batch, heads, head_dim, d_state, groups, cfg, activation_dtype=dtype,
                                           device=device, ring_dt_layout=ring_dt_layout)
        state.checkpoint.normal_(0, 0.1, generator=gen)
        standard_state = state.checkpoint.clone()
        for step in range(steps):
            x, B, z = randn(batch, heads, head_dim).to(dtype), randn(batch, groups, d_state, scale=d_state**-0.5).to(dtype), \
                randn(batch, heads, head_dim).to(dtype)
            dt, C = randn(batch, heads), randn(batch, groups, d_state).to(dtype)
            y_std = decode.standard_step(standard_state, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1)
            y = decode.replay_step(state.checkpoint, state.ring_x, state.ring_dt, state.ring_B, state.committed,
                                   state.flush_at, state.window, x, dt, A, B, C, D, z, dt_bias, True, None, None,
                                   idx, -1, config=config)
            err = float((y.float() - y_std.float()).norm() / y_std.float().norm().clamp_min(1e-30))
            worst_y = max(worst_y, err)
            if not err < 2e-2:
                return False, f"y rel err {err:.2e} at step {step}{' (staggered)' if stagger else ''}"
        if not stagger:
            if not torch.all(state.committed == 0):
                return False, "cursors not reset by the flush"
            err = float((state.checkpoint - standard_state).norm() / standard_state.norm())
            if not err < 1e-4:
                return False, f"checkpoint rel err {err:.2e} after the flush"
            ckpt_err = err
    return True, f"y {worst_y:.1e} ckpt {ckpt_err:.1e}"


VARIANT_HEADER = (
    f"{'dims':<15}{'batch':>6}  {'variant':<44} | {'nonfl us':>9}{'%copy':>7} | {'flush us':>9}{'/std':>6} | "
    f"{'amort us':>9}{'x std':>7} | {'mixed us':>9}{'x std':>7} | check"
)


def variant_row(r):
    if "amortized_us" not in r:
        return f"{r['dims']:<15}{r['batch']:>6}  {r['variant']:<44} | {r['check']}"
    return (
        f"{r['dims']:<15}{r['batch']:>6}  {r['variant']:<44} | {r['nonflush_us']:>9.1f}{r['nonflush_pct_copy']:>6.1f}% | "
        f"{r['flush_us']:>9.1f}{r['flush_over_standard']:>6.2f} | {r['amortized_us']:>9.1f}{r['speedup_amortized']:>7.2f} | "
        f"{r['mixed_us']:>9.1f}{r['speedup_mixed']:>7.2f} | {r['check']}"
    )


def compile_one(dims_name, dtype_name, params, batch, device="cuda"):
    """Launch one planned replay kernel once (``params``: LaunchConfig keywords, or None for
    ``launch_config``'s default at ``batch``) on a 2-row batch: the same constexprs and argument
    specialisation as the timed launches, so Triton's disk cache then holds its kernels."""
    bench = _bench()
    heads, head_dim, d_state, groups = dims = bench.DIMS[dims_name]
    dtype = getattr(torch, dtype_name)
    fields, layout = split_variant(params or {})
    cfg = decode.LaunchConfig(**fields) if fields else decode.launch_config(
        "replay", head_dim, d_state, batch, gpu=decode.gpu_name(device))
    state = Mamba2ReplayState.allocate(2, heads, head_dim, d_state, groups, ReplaySSMConfig(window=bench.WINDOW),
                                       activation_dtype=dtype, device=device, ring_dt_layout=layout)
    x, dt, A, B, C, D, z, dt_bias = bench._inputs(2, *dims, dtype, device=device)
    idx = torch.arange(2, dtype=torch.int32, device=device)
    decode.replay_step(state.checkpoint, state.ring_x, state.ring_dt, state.ring_B, state.committed, state.flush_at,
                       state.window, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1, config=cfg)
    if device == "cuda":
        torch.cuda.synchronize()
    return params


def precompile(dtype, workers, device="cuda"):
    """Compile every planned kernel in ``workers`` processes at once (Triton compiles one kernel
    at a time per process, ~1-3 s each); a failure only costs the parallelism."""
    import concurrent.futures
    import multiprocessing
    import time

    name = str(dtype).replace("torch.", "")
    plan = [("nemotron_h", None, b) for b in (1, 256)] + [("nemotron3_nano", None, 256)]
    plan += [("nemotron_h", kw, 256) for kw in VARIANTS]
    start = time.perf_counter()
    try:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(min(workers, len(plan)), mp_context=ctx) as pool:
            for job in [pool.submit(compile_one, dims_name, name, params, batch, device)
                        for dims_name, params, batch in plan]:
                job.result()
    except Exception as exc:  # the timed run compiles whatever is missing
        print(f"# precompile: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    print(f"# precompiled {len(plan)} configs in {time.perf_counter() - start:.0f} s", flush=True)


def run_variants(dtype, flush, rounds, copy_gbps, result, json_path, budget_s, start, batches=VARIANT_BATCHES):
    """Check, then time, every variant at Nemotron-H dims (``VARIANT_BATCHES``) and the best two of
    the first batch on Nemotron-3-Nano dims at batch 256; prints a table sorted by amortized
    speedup per dims and batch, and the JSON after every variant.
    Past ``budget_s`` seconds (compilation included) the remaining variants are listed as skipped."""
    import time

    bench = _bench()
    records = result.setdefault("variants", [])
    # A variant with no launch fields is the ops' default at each batch (its layout named).
    candidates = [("default", None, "heads")] + [
        ("default", None, layout) if not fields else (None, decode.LaunchConfig(**fields), layout)
        for fields, layout in map(split_variant, VARIANTS)]

    def evaluate(dims_name, batch, name, cfg, layout):
        dims = bench.DIMS[dims_name]
        cfg = cfg or decode.launch_config("replay", dims[1], dims[2], batch, gpu=decode.gpu_name("cuda"))
        label = (name or short(cfg)) + layout_label(layout)
        rec = {"dims": dims_name, "batch": batch, "variant": label, "config": repr(cfg), LAYOUT_KEY: layout}
        if time.perf_counter() - start > budget_s:
            rec["check"] = "skipped (time budget)"
        else:
            try:
                ok, msg = check_against_standard(dims, batch, dtype, cfg, ring_dt_layout=layout)
                rec["check"] = msg if ok else f"WRONG: {msg}"
                if ok:
                    phases = bench.time_replay(dims, batch, dtype, flush, rounds, False, cfg, ring_dt_layout=layout)
                    mixed = bench.time_replay(dims, batch, dtype, flush, rounds, True, cfg, ring_dt_layout=layout)
                    rec.update(bench.record(dims_name, batch, dtype, standard[dims_name, batch], phases, mixed, copy_gbps,
                                      None, cfg))
                    rec["variant"] = label
            except Exception as exc:  # a variant that fails to compile must not end the run
                rec["check"] = f"ERROR: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        records.append(rec)
        configs[id(rec)] = (cfg, layout)
        print(variant_row(rec), flush=True)
        if json_path:
            json_path.write_text(json.dumps(result, indent=1))
        return rec

    standard, configs = {}, {}

    def batch_pass(dims_name, batch, cands):
        standard[dims_name, batch] = bench.time_standard(bench.DIMS[dims_name], batch, dtype, flush, rounds)
        print(f"# {dims_name} batch {batch}: standard {standard[dims_name, batch]:.1f} us", flush=True)
        for name, cfg, layout in cands:
            evaluate(dims_name, batch, name, cfg, layout)

    print(VARIANT_HEADER, flush=True)
    # Batch 256 first (it compiles every variant), then the best two of it on Nemotron-3-Nano
    # dims, then the other batches.
    batch_pass("nemotron_h", batches[0], candidates)
    at_first = sorted((r for r in records if "amortized_us" in r and r["variant"] != "default"),
                      key=lambda r: -r["speedup_amortized"])
    batch_pass("nemotron3_nano", batches[0],
               [("default", None, "heads")] + [(None, *configs[id(r)]) for r in at_first[:2]])
    for batch in batches[1:]:
        batch_pass("nemotron_h", batch, candidates)

    print("\n# sorted by amortized speedup over the standard kernel", flush=True)
    print(VARIANT_HEADER)
    for key in sorted({(r["dims"], r["batch"]) for r in records}):
        rows = [r for r in records if (r["dims"], r["batch"]) == key]
        rows.sort(key=lambda r: -r.get("speedup_amortized", -1.0))
        for r in rows:
            print(variant_row(r))
        timed = [r for r in rows if "amortized_us" in r]
        if timed:
            print(f"# best at {key[0]} batch {key[1]}: {timed[0]['config']}, {LAYOUT_KEY}={timed[0][LAYOUT_KEY]}")
    print(f"# variants done in {time.perf_counter() - start:.0f} s", flush=True)
