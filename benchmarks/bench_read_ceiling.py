"""How fast can a Triton kernel read the Mamba-2 checkpoint? The read-only half of a ReplaySSM
non-flush step (``y = S C`` over ``[rows, d_state]`` tiles, no state written) timed in three
shapes, against the streaming copy of the same run:

- ``plain``: one program per ``[BLOCK_P, d_state]`` tile, pointer loads (the stream launch's shape);
  beside it ``nc`` (the tile read by ``ld.global.nc``), ``hint`` (L2 eviction policies on the
  load / ``y``'s store) and ``kept`` (``y`` or the tile's sum computed but never stored: what
  the output's 1/128 of stores costs; H200: 12-14 us of 257-260);
- ``persistent``: one wave of programs looping over tiles, pointer loads in a ``tl.range``
  loop with ``num_stages`` (whatever Triton's pipeliner makes of it);
- ``tma``: the same loop with the tile loaded through a host TMA descriptor, which the
  pipeliner multi-buffers in shared memory (Hopper and later): bytes in flight are then no
  longer bounded by registers.

    PYTHONPATH=$PWD python3 benchmarks/bench_read_ceiling.py [--batch 256]
    PYTHONPATH=$PWD python3 benchmarks/bench_read_ceiling.py --dims 32 128 128   # a delta-rule state:
        # value heads, d_v, d_k of Qwen3.5-4B GDN (C then plays q)

The tile shapes include one-warp programs of 4-16 rows, the delta-rule stream launch's shape.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import L2Flusher, capture_graph, copy_bandwidths_gbps, warmed_median  # noqa: E402


@triton.jit
def _gemv_rows(S, C_ptr, y_ptr, t, rows, TILES_PER_HEAD: tl.constexpr, N: tl.constexpr, STORE_EVICT: tl.constexpr = ""):
    """``y[rows] = S C_head`` for checkpoint tile ``t`` already loaded as ``S``."""
    C = tl.load(C_ptr + (t // TILES_PER_HEAD) * N + tl.arange(0, N)).to(tl.float32)
    tl.store(y_ptr + rows, tl.sum(S * C[None, :], axis=1), eviction_policy=STORE_EVICT)


@triton.jit
def _gemv_plain(S_ptr, C_ptr, y_ptr, TILES_PER_HEAD: tl.constexpr, BLOCK_P: tl.constexpr, N: tl.constexpr,
                LOAD_EVICT: tl.constexpr = "", STORE_EVICT: tl.constexpr = ""):
    """One ``[BLOCK_P, N]`` tile per program; ``LOAD_EVICT`` / ``STORE_EVICT``: L2 eviction
    policies of the tile's load and ``y``'s store (the ``hint`` forms; none by default)."""
    t = tl.program_id(0).to(tl.int64)
    rows = t * BLOCK_P + tl.arange(0, BLOCK_P)
    S = tl.load(S_ptr + rows[:, None] * N + tl.arange(0, N)[None, :], eviction_policy=LOAD_EVICT)
    _gemv_rows(S, C_ptr, y_ptr, t, rows, TILES_PER_HEAD, N, STORE_EVICT)


@triton.jit
def _load_f32x4_nc(ptrs):
    """``ld.global.nc.v4.f32`` from each pointer of ``ptrs`` (16-byte aligned fp32 vectors, any
    shape): the four components as four tensors of ``ptrs``' shape. Triton's ``tl.load`` emits
    ``ld.global`` only; a layout-free form, so that a caller reduces over the four parts."""
    return tl.inline_asm_elementwise(
        "ld.global.nc.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l", [ptrs],
        dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)


@triton.jit
def _gemv_nc(S_ptr, C_ptr, y_ptr, TILES_PER_HEAD: tl.constexpr, BLOCK_P: tl.constexpr, N: tl.constexpr):
    """``_gemv_plain`` with the tile read through the non-coherent path (``ld.global.nc``)."""
    t = tl.program_id(0).to(tl.int64)
    rows = t * BLOCK_P + tl.arange(0, BLOCK_P)
    q = tl.arange(0, N // 4)
    S0, S1, S2, S3 = _load_f32x4_nc(S_ptr + rows[:, None] * N + 4 * q[None, :])
    c = C_ptr + (t // TILES_PER_HEAD) * N + 4 * q
    y = tl.sum(S0 * tl.load(c).to(tl.float32)[None, :] + S1 * tl.load(c + 1).to(tl.float32)[None, :]
               + S2 * tl.load(c + 2).to(tl.float32)[None, :] + S3 * tl.load(c + 3).to(tl.float32)[None, :], axis=1)
    tl.store(y_ptr + rows, y)


@triton.jit
def _gemv_kept(S_ptr, C_ptr, y_ptr, TILES_PER_HEAD: tl.constexpr, BLOCK_P: tl.constexpr, N: tl.constexpr,
               REDUCE: tl.constexpr):
    """``_gemv_plain`` that stores nothing (a store that never fires keeps the loads): ``REDUCE``
    ``"rows"``: the same ``y = S C``; ``"all"``: the tile summed, no ``C`` loaded."""
    t = tl.program_id(0).to(tl.int64)
    rows = t * BLOCK_P + tl.arange(0, BLOCK_P)
    S = tl.load(S_ptr + rows[:, None] * N + tl.arange(0, N)[None, :])
    if REDUCE == "rows":
        C = tl.load(C_ptr + (t // TILES_PER_HEAD) * N + tl.arange(0, N)).to(tl.float32)
        total = tl.sum(tl.sum(S * C[None, :], axis=1))
    else:
        total = tl.sum(tl.sum(S, axis=1))
    if total == 1.0e30:
        tl.store(y_ptr + t, total)


@triton.jit
def _gemv_persistent(S_ptr, C_ptr, y_ptr, n_tiles, TILES_PER_HEAD: tl.constexpr, BLOCK_P: tl.constexpr,
                     N: tl.constexpr, STAGES: tl.constexpr, STORE_EVICT: tl.constexpr = ""):
    for t in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), num_stages=STAGES):
        rows = (t * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
        S = tl.load(S_ptr + rows[:, None] * N + tl.arange(0, N)[None, :])
        # Passed on rather than left to _gemv_rows' default: Triton 3.6 fails to compile a call
        # of a jit function whose constexpr argument is left to its default.
        _gemv_rows(S, C_ptr, y_ptr, t, rows, TILES_PER_HEAD, N, STORE_EVICT)


@triton.jit
def _gemv_tma(S_desc, C_ptr, y_ptr, n_tiles, TILES_PER_HEAD: tl.constexpr, BLOCK_P: tl.constexpr,
              N: tl.constexpr, STAGES: tl.constexpr, STORE_EVICT: tl.constexpr = ""):
    for t in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), num_stages=STAGES):
        S = S_desc.load([t * BLOCK_P, 0])
        _gemv_rows(S, C_ptr, y_ptr, t, (t * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64), TILES_PER_HEAD, N,
                   STORE_EVICT)


def launches(S, C, y, head_dim, sms):
    """``{name: zero-argument launch}`` for every kernel shape and launch choice."""
    rows, n = S.shape
    out = {}
    for bp, warps in ((4, 1), (8, 1), (16, 1), (8, 2), (16, 2), (16, 4), (32, 4), (32, 8), (64, 4), (64, 8)):
        tiles = rows // bp
        out[f"plain bp{bp} w{warps}"] = (lambda bp=bp, warps=warps, tiles=tiles: _gemv_plain[(tiles,)](
            S, C, y, TILES_PER_HEAD=head_dim // bp, BLOCK_P=bp, N=n, num_warps=warps))
        for reduce in ("rows", "all"):
            out[f"kept-{reduce} bp{bp} w{warps}"] = (lambda bp=bp, warps=warps, tiles=tiles, reduce=reduce: _gemv_kept[
                (tiles,)](S, C, y, TILES_PER_HEAD=head_dim // bp, BLOCK_P=bp, N=n, REDUCE=reduce, num_warps=warps))
        for le, se in (("evict_first", ""), ("", "evict_last"), ("evict_first", "evict_last"), ("", "evict_first")):
            out[f"hint {le or '-'}/{se or '-'} bp{bp} w{warps}"] = (
                lambda bp=bp, warps=warps, tiles=tiles, le=le, se=se: _gemv_plain[(tiles,)](
                    S, C, y, TILES_PER_HEAD=head_dim // bp, BLOCK_P=bp, N=n, LOAD_EVICT=le, STORE_EVICT=se,
                    num_warps=warps))
        out[f"nc bp{bp} w{warps}"] = (lambda bp=bp, warps=warps, tiles=tiles: _gemv_nc[(tiles,)](
            S, C, y, TILES_PER_HEAD=head_dim // bp, BLOCK_P=bp, N=n, num_warps=warps))
    for bp, warps, per_sm, stages in ((8, 1, 16, 3), (16, 1, 8, 3), (16, 4, 8, 3), (32, 4, 4, 3)):
        tiles = rows // bp
        out[f"persistent bp{bp} w{warps} x{per_sm} s{stages}"] = (
            lambda bp=bp, warps=warps, tiles=tiles, per_sm=per_sm, stages=stages: _gemv_persistent[(sms * per_sm,)](
                S, C, y, tiles, TILES_PER_HEAD=head_dim // bp, BLOCK_P=bp, N=n, STAGES=stages, num_warps=warps))
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return out
    for bp, warps, per_sm, stages in ((8, 1, 16, 4), (16, 1, 8, 4), (16, 4, 4, 4), (32, 4, 2, 4), (32, 4, 4, 3), (64, 4, 2, 3), (64, 8, 2, 4),
                                      (32, 8, 2, 6)):
        tiles = rows // bp
        desc = TensorDescriptor.from_tensor(S, [bp, n])
        out[f"tma bp{bp} w{warps} x{per_sm} s{stages}"] = (
            lambda bp=bp, warps=warps, tiles=tiles, per_sm=per_sm, stages=stages, desc=desc: _gemv_tma[(sms * per_sm,)](
                desc, C, y, tiles, TILES_PER_HEAD=head_dim // bp, BLOCK_P=bp, N=n, STAGES=stages, num_warps=warps))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dims", type=int, nargs=3, default=[128, 64, 128], metavar=("HEADS", "HEAD_DIM", "D_STATE"))
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    heads, head_dim, d_state = args.dims
    rows = args.batch * heads * head_dim
    S = torch.randn(rows, d_state, device="cuda")
    C = torch.randn(args.batch * heads, d_state, device="cuda").to(torch.bfloat16)
    y = torch.empty(rows, device="cuda")
    ref = (S.view(args.batch * heads, head_dim, d_state) * C.float()[:, None, :]).sum(-1).flatten()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    copy = max(copy_bandwidths_gbps().values())
    flush = L2Flusher()
    nbytes = S.numel() * 4 + C.numel() * 2 + y.numel() * 4
    print(f"# {torch.cuda.get_device_name()}, {sms} SMs, triton {triton.__version__}; copy {copy:.0f} GB/s; "
          f"batch {args.batch}, dims {tuple(args.dims)}: {S.numel() * 4 / 2**30:.2f} GiB of fp32 state")
    print(f"{'kernel':<32}{'us':>9}{'GB/s':>8}{'% copy':>8}  check")
    for name, fn in launches(S, C, y, head_dim, sms).items():
        try:
            y.zero_()
            fn()
            torch.cuda.synchronize()
            err = float((y - ref).abs().max() / ref.abs().max())
            # "kept-*" forms store nothing: no output to check, and only the state's bytes moved.
            kept = name.startswith("kept")
            check = "no output" if kept else "ok" if err < 1e-4 else f"WRONG {err:.1e}"
            us = warmed_median(capture_graph(fn), args.rounds, flush)
            gbps = (S.numel() * 4 if kept else nbytes) / (us * 1e-6) / 1e9
            print(f"{name:<32}{us:>9.1f}{gbps:>8.0f}{100 * gbps / copy:>7.1f}%  {check}", flush=True)
        except Exception as exc:  # one failing shape must not end the run
            print(f"{name:<32} ERROR {type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}", flush=True)


if __name__ == "__main__":
    main()
