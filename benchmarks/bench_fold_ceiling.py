"""How fast can a Triton kernel fold a window into the checkpoint? The flush half of a ReplaySSM
step on its own: per head ``S <- a S + X^T Y`` over ``[rows, d_state]`` tiles (``X`` ``[J, P]``
fp32, the window's weighted inputs; ``Y`` ``[J, N]`` bf16, shared by a group of heads) and the
output ``y = S C``, timed in several shapes against the streaming copy of the same run. The
same shape serves Mamba-2 (``X`` = weighted ring ``x``, ``Y`` = ring ``B``) and the delta rules'
fold of cached ``u`` (``X`` = ``u``, ``Y`` = decayed keys).

- ``plain``: one program per ``[BLOCK_P, d_state]`` tile (load, fold, store);
- ``persist``: one wave of programs looping over tiles, the next tile's load issued before the
  current one is folded (bytes in flight no longer wait for the fold);
- ``tma``: the persistent loop with tiles loaded and stored through host TMA descriptors, which
  Triton's pipeliner multi-buffers in shared memory (Hopper and later).

Folds: ``fma`` (unrolled rank-1 FMAs), ``loop`` (rolled), ``tf32x3`` / ``tf32x2`` / ``bf16x3`` / ``ieee``
(``tl.dot``), ``none`` (``a S`` alone, no window: the same tiles' load, scale, output and store,
what a fold costs above them; checked against ``a S``); in Gluon (``_fold_gluon.py``): ``gluon bp...`` the tf32x2 fold with the tile in the
MMA accumulator layout from load to store, ``gluon fma ...`` rank-1 fp32 FMAs with a register block
of the tile per thread, ``gluon tma ...`` the tf32x2 fold with tiles streamed through shared
memory by TMA (``STAGES`` in flight per program, folded in place, stored by TMA); ``cuda ws ...``
(``fold_ws.cu``, CUDA C++ by NVRTC) a producer warp keeping whole head tiles in flight by bulk
copies while consumer warps fold them in fp32 FMAs and store them; ``cuda grid ...``
(``fold_grid.cu``) one small hardware-scheduled block per tile, its loads issued first, the fold in
fp32 FMAs; ``cuda mma ...`` (``fold_mma.cu``) the same grid with the product on the tensor cores
(``mma.sync`` on bf16 parts of ``X``, the tile kept in the accumulator layout) (names in
``_fold_ws.py``). ``delta chain ...`` / ``delta after ...``: the ``tl.dot`` fold with a
delta rule's row reduction ``S k`` (its result multiplied by a runtime zero, so the check holds)
before the fold, where the token's ``u`` needs it, or after the store, where a fold of the ring
alone leaves it (the next window's first ``u``).
The minimum possible time is a standard step's bytes (read + write the state once).

    PYTHONPATH=$PWD python3 benchmarks/bench_fold_ceiling.py [--batch 256] [--dims 128 64 128 16]
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

from trtllm_replayssm.ops._tf32 import dot_bf16x3, dot_tf32x2  # noqa: E402


@triton.jit
def _fold(S, head, rows_in_head, X_ptr, Y_ptr, a_ptr, HPG: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
          J: tl.constexpr, FOLD: tl.constexpr, eps_ptr=None, DELTA: tl.constexpr = 0):
    """``a S + X[:, rows]^T Y`` for one ``[BLOCK_P, N]`` tile of ``head``, in fp32.

    ``DELTA=1`` (``tl.dot`` folds): the last entry's ``X`` column is formed from the tile first,
    ``x + eps (S y_last)`` with ``eps`` a runtime zero, as a delta rule's flush forms the token's
    ``u`` from ``S k_t`` before its fold: the same result, with a row reduction between the tile's
    load and its fold."""
    offs_n = tl.arange(0, N)
    x_base = X_ptr + head * J * P
    y_base = Y_ptr + (head // HPG) * J * N
    acc = tl.load(a_ptr + head) * S
    if FOLD == "none":
        pass
    elif FOLD == "fma":
        for j in tl.static_range(J):
            x_j = tl.load(x_base + j * P + rows_in_head)
            y_j = tl.load(y_base + j * N + offs_n).to(tl.float32)
            acc += x_j[:, None] * y_j[None, :]
    elif FOLD == "loop":
        for j in range(J):
            x_j = tl.load(x_base + j * P + rows_in_head)
            y_j = tl.load(y_base + j * N + offs_n).to(tl.float32)
            acc += x_j[:, None] * y_j[None, :]
    else:
        offs_j = tl.arange(0, J)
        Xt = tl.load(x_base + offs_j[None, :] * P + rows_in_head[:, None])
        Y = tl.load(y_base + offs_j[:, None] * N + offs_n[None, :]).to(tl.float32)
        if DELTA == 1:
            k_t = tl.load(y_base + (J - 1) * N + offs_n).to(tl.float32)
            last = offs_j[None, :] == J - 1
            u = tl.sum(tl.where(last, Xt, 0.0), axis=1) + tl.load(eps_ptr) * tl.sum(S * k_t[None, :], axis=1)
            Xt = tl.where(last, u[:, None], Xt)
        if FOLD == "tf32x2":
            acc = dot_tf32x2(Xt, Y, acc)
        elif FOLD == "bf16x3":
            acc = dot_bf16x3(Xt, Y, acc)
        else:
            acc = tl.dot(Xt, Y, acc=acc, input_precision=FOLD)
    return acc


@triton.jit
def _output(acc, head, rows, C_ptr, out_ptr, HPG: tl.constexpr, N: tl.constexpr, Y_ptr=None, eps_ptr=None,
            J: tl.constexpr = 0, DELTA: tl.constexpr = 0):
    """``out = acc C``; ``DELTA=2``: plus ``eps (acc y_last)``, a second reduction of the folded
    tile after its store (a delta rule's next ``u`` formed from the new checkpoint)."""
    C = tl.load(C_ptr + (head // HPG) * N + tl.arange(0, N)).to(tl.float32)
    y = tl.sum(acc * C[None, :], axis=1)
    if DELTA == 2:
        k_t = tl.load(Y_ptr + ((head // HPG) * J + J - 1) * N + tl.arange(0, N)).to(tl.float32)
        y += tl.load(eps_ptr) * tl.sum(acc * k_t[None, :], axis=1)
    tl.store(out_ptr + rows, y)


@triton.jit
def _fold_plain(S_ptr, X_ptr, Y_ptr, a_ptr, C_ptr, out_ptr, HPG: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
                J: tl.constexpr, BLOCK_P: tl.constexpr, FOLD: tl.constexpr, eps_ptr=None, DELTA: tl.constexpr = 0):
    t = tl.program_id(0).to(tl.int64)
    head = t // (P // BLOCK_P)
    rows = t * BLOCK_P + tl.arange(0, BLOCK_P)
    ptrs = S_ptr + rows[:, None] * N + tl.arange(0, N)[None, :]
    acc = _fold(tl.load(ptrs), head, rows - head * P, X_ptr, Y_ptr, a_ptr, HPG, P, N, J, FOLD, eps_ptr, DELTA)
    tl.store(ptrs, acc)
    _output(acc, head, rows, C_ptr, out_ptr, HPG, N, Y_ptr, eps_ptr, J, DELTA)


@triton.jit
def _fold_persist(S_ptr, X_ptr, Y_ptr, a_ptr, C_ptr, out_ptr, n_tiles, HPG: tl.constexpr, P: tl.constexpr,
                  N: tl.constexpr, J: tl.constexpr, BLOCK_P: tl.constexpr, FOLD: tl.constexpr):
    step = tl.num_programs(0)
    t = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_P)[:, None] * N + tl.arange(0, N)[None, :]
    offs_p = tl.arange(0, BLOCK_P)[:, None]
    nxt = tl.load(S_ptr + t * BLOCK_P * N + offs, mask=offs_p < tl.where(t < n_tiles, BLOCK_P, 0))
    while t < n_tiles:
        S = nxt
        # The next tile's bytes are requested before this tile's fold: they arrive meanwhile.
        nxt = tl.load(S_ptr + (t + step) * BLOCK_P * N + offs, mask=offs_p < tl.where(t + step < n_tiles, BLOCK_P, 0))
        head = t // (P // BLOCK_P)
        rows = t * BLOCK_P + tl.arange(0, BLOCK_P)
        acc = _fold(S, head, rows - head * P, X_ptr, Y_ptr, a_ptr, HPG, P, N, J, FOLD)
        tl.store(S_ptr + t * BLOCK_P * N + offs, acc)
        _output(acc, head, rows, C_ptr, out_ptr, HPG, N)
        t += step


@triton.jit
def _fold_loop(S_ptr, X_ptr, Y_ptr, a_ptr, C_ptr, out_ptr, n_items, HPG: tl.constexpr, P: tl.constexpr,
               N: tl.constexpr, J: tl.constexpr, BLOCK_P: tl.constexpr, TILES_PER_ITEM: tl.constexpr,
               FOLD: tl.constexpr, eps_ptr=None, DELTA: tl.constexpr = 0):
    """Programs walk items of ``TILES_PER_ITEM`` tiles, one after the other, no prefetch: with the
    grid a fixed wave (``persist``-style) or one item per program (``TILES_PER_ITEM`` tiles)."""
    offs = tl.arange(0, BLOCK_P)[:, None] * N + tl.arange(0, N)[None, :]
    for i in range(tl.program_id(0), n_items, tl.num_programs(0)):
        for k in range(TILES_PER_ITEM):
            t = tl.full([], 0, tl.int64) + i * TILES_PER_ITEM + k
            head = t // (P // BLOCK_P)
            rows = t * BLOCK_P + tl.arange(0, BLOCK_P)
            acc = _fold(tl.load(S_ptr + t * BLOCK_P * N + offs), head, rows - head * P, X_ptr, Y_ptr, a_ptr, HPG, P,
                        N, J, FOLD, eps_ptr, DELTA)
            tl.store(S_ptr + t * BLOCK_P * N + offs, acc)
            _output(acc, head, rows, C_ptr, out_ptr, HPG, N, Y_ptr, eps_ptr, J, DELTA)


@triton.jit
def _fold_tma(S_desc, X_ptr, Y_ptr, a_ptr, C_ptr, out_ptr, n_tiles, HPG: tl.constexpr, P: tl.constexpr,
              N: tl.constexpr, J: tl.constexpr, BLOCK_P: tl.constexpr, FOLD: tl.constexpr, STAGES: tl.constexpr):
    for t in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), num_stages=STAGES):
        head = t // (P // BLOCK_P)
        rows = (t * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
        acc = _fold(S_desc.load([t * BLOCK_P, 0]), head, rows - head * P, X_ptr, Y_ptr, a_ptr, HPG, P, N, J, FOLD)
        S_desc.store([t * BLOCK_P, 0], acc)
        _output(acc, head, rows, C_ptr, out_ptr, HPG, N)


def launches(S, X, Y, a, C, out, head_dim, hpg, sms):
    """``{name: zero-argument launch}`` for every kernel shape, fold and launch choice."""
    rows, n = S.shape
    j = X.shape[1]
    common = dict(HPG=hpg, P=head_dim, N=n, J=j)
    out_ = {}
    for bp, warps in ((16, 2), (32, 4)):  # the Nano and Nemotron-H flush tiles without a fold
        out_[f"plain bp{bp} w{warps} none"] = (
            lambda bp=bp, warps=warps: _fold_plain[(rows // bp,)](
                S, X, Y, a, C, out, **common, BLOCK_P=bp, FOLD="none", num_warps=warps))
    for bp, warps in ((16, 2), (16, 4), (32, 4), (8, 1), (64, 4), (64, 8), (16, 8)):
        for fold in ("fma", "loop", "tf32x3", "tf32x2", "bf16x3", "ieee"):
            if (fold in ("tf32x3", "tf32x2", "bf16x3", "ieee") and bp < 16) or (bp == 64 or warps == 8) and fold != "tf32x3":
                continue
            out_[f"plain bp{bp} w{warps} {fold}"] = (
                lambda bp=bp, warps=warps, fold=fold: _fold_plain[(rows // bp,)](
                    S, X, Y, a, C, out, **common, BLOCK_P=bp, FOLD=fold, num_warps=warps))
    for bp, warps, per_sm, fold in ((16, 4, 4, "tf32x3"), (16, 4, 8, "tf32x3"), (16, 2, 8, "fma"),
                                    (16, 4, 6, "fma"), (32, 4, 4, "tf32x3"), (16, 4, 8, "loop")):
        out_[f"persist bp{bp} w{warps} x{per_sm} {fold}"] = (
            lambda bp=bp, warps=warps, per_sm=per_sm, fold=fold: _fold_persist[(sms * per_sm,)](
                S, X, Y, a, C, out, rows // bp, **common, BLOCK_P=bp, FOLD=fold, num_warps=warps))
    for bp, warps, per_sm, per_item, fold in ((16, 4, 8, 1, "tf32x3"), (16, 4, 12, 1, "tf32x3"),
                                              (16, 4, 16, 1, "tf32x3"), (16, 2, 16, 1, "tf32x3"),
                                              (16, 2, 24, 1, "tf32x3"), (16, 4, 0, 1, "tf32x3"),
                                              (16, 4, 0, 0, "tf32x3"), (16, 2, 0, 0, "tf32x3"),
                                              (32, 4, 0, 0, "tf32x3"), (8, 1, 0, 0, "fma"), (8, 1, 32, 1, "fma")):
        # per_sm 0: one item per program; per_item 0: a whole head per item.
        per_item = per_item or head_dim // bp
        items = rows // bp // per_item
        grid = sms * per_sm if per_sm else items
        out_[f"loop bp{bp} w{warps} x{per_sm or 'all'} t{per_item} {fold}"] = (
            lambda bp=bp, warps=warps, grid=grid, items=items, per_item=per_item, fold=fold: _fold_loop[(grid,)](
                S, X, Y, a, C, out, items, **common, BLOCK_P=bp, TILES_PER_ITEM=per_item, FOLD=fold,
                num_warps=warps))
    # A delta rule's flush: the token's u from the tile before the fold (chain) or the next
    # window's first u from the folded tile after its store (after).
    eps = torch.zeros(1, device=S.device)
    for bp, warps, per_head, fold in ((16, 1, False, "tf32x2"), (32, 4, False, "tf32x2"), (32, 4, True, "tf32x3"),
                                      (32, 4, True, "tf32x2"), (16, 2, True, "tf32x2"), (16, 1, False, "bf16x3"),
                                      (32, 4, True, "bf16x3"), (16, 2, True, "bf16x3")):
        for delta, what in ((1, "chain"), (2, "after")):
            per_item = head_dim // bp if per_head else 1
            out_[f"delta {what} bp{bp} w{warps} {'head' if per_head else 'tile'} {fold}"] = (
                lambda bp=bp, warps=warps, per_item=per_item, fold=fold, delta=delta: _fold_loop[(rows // bp // per_item,)](
                    S, X, Y, a, C, out, rows // bp // per_item, **common, BLOCK_P=bp, TILES_PER_ITEM=per_item,
                    FOLD=fold, eps_ptr=eps, DELTA=delta, num_warps=warps))
    try:
        import _fold_gluon
    except ImportError:  # a Triton without Gluon
        pass
    else:
        out_.update(_fold_gluon.launches(S, X, Y, a, C, out, head_dim, hpg, sms))
        try:
            out_.update(_fold_gluon.tma_launches(S, X, Y, a, C, out, head_dim, hpg, sms))
        except (ImportError, AttributeError, AssertionError) as exc:  # no Hopper TMA in this Triton
            print(f"# gluon tma: {type(exc).__name__}: {exc}")
    try:
        import _fold_ws

        out_.update(_fold_ws.launches(S, X, Y, a, C, out, head_dim, hpg, sms))
    except Exception as exc:  # noqa: BLE001 -- no NVRTC, or a driver that refuses the kernel
        print(f"# cuda ws: {type(exc).__name__}: {str(exc)[:300]}")
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return out_
    for bp, warps, per_sm, stages, fold in ((16, 4, 4, 3, "tf32x3"), (32, 4, 2, 3, "tf32x3"), (16, 4, 4, 3, "fma"),
                                            (32, 4, 2, 2, "fma"), (16, 4, 8, 2, "tf32x3")):
        desc = TensorDescriptor.from_tensor(S, [bp, n])
        out_[f"tma bp{bp} w{warps} x{per_sm} s{stages} {fold}"] = (
            lambda bp=bp, warps=warps, per_sm=per_sm, stages=stages, fold=fold, desc=desc: _fold_tma[(sms * per_sm,)](
                desc, X, Y, a, C, out, rows // bp, **common, BLOCK_P=bp, FOLD=fold, STAGES=stages, num_warps=warps))
    return out_


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dims", type=int, nargs=4, default=[128, 64, 128, 16],
                   metavar=("HEADS", "HEAD_DIM", "D_STATE", "HEADS_PER_GROUP"))
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--only", nargs="*", default=[], help="run only kernels whose name starts with one of these")
    p.add_argument("--standard", action="store_true",
                   help="first time the in-project standard decode step at these dims (bf16 inputs; its own state)")
    args = p.parse_args(argv)
    heads, head_dim, d_state, hpg = args.dims
    nh = args.batch * heads
    rows = nh * head_dim
    torch.manual_seed(0)
    S0 = torch.randn(rows, d_state, device="cuda")
    S = S0.clone()
    X = torch.randn(nh, args.window, head_dim, device="cuda") * 0.1
    Y = torch.randn(nh // hpg, args.window, d_state, device="cuda").to(torch.bfloat16)
    a = torch.rand(nh, device="cuda") * 0.5 + 0.5
    C = torch.randn(nh // hpg, d_state, device="cuda").to(torch.bfloat16)
    out = torch.empty(rows, device="cuda")
    Yg = Y.double().repeat_interleave(hpg, dim=0)
    scaled = a.double()[:, None, None] * S0.double().view(nh, head_dim, d_state)
    ref = (scaled + torch.einsum("hjp,hjn->hpn", X.double(), Yg)).view(rows, d_state)
    scaled = scaled.view(rows, d_state)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    copy = max(copy_bandwidths_gbps().values())
    flush = L2Flusher()
    nbytes = 2 * S.numel() * 4 + X.numel() * 4 + Y.numel() * 2 + out.numel() * 4

    def nofold(name):  # "none" shapes, their " full" waves included
        return "none" in name.split()

    def moved_bytes(name):
        # what a kernel must move: "nostore" leaves the state unwritten, "none" reads no X or Y
        return (nbytes - S.numel() * 4 * (" nostore" in name)
                - (X.numel() * 4 + Y.numel() * 2) * nofold(name))
    print(f"# {torch.cuda.get_device_name()}, {sms} SMs, triton {triton.__version__}; copy {copy:.0f} GB/s; "
          f"batch {args.batch}, dims {tuple(args.dims)}, window {args.window}: "
          f"{S.numel() * 4 / 2**30:.2f} GiB of fp32 state read and written; at copy speed "
          f"{nbytes / copy / 1e3:.1f} us")
    print(f"{'kernel':<34}{'us':>9}{'GB/s':>8}{'% copy':>8}  check")
    if args.standard:
        import bench_mamba2_decode as m2

        dims = (heads, head_dim, d_state, heads // hpg)
        us = m2.time_standard(dims, args.batch, torch.bfloat16, flush, args.rounds)
        gbps = (2 * m2._state_bytes(args.batch, *dims[:3]) + m2._io_bytes(args.batch, *dims, 2)) / (us * 1e-6) / 1e9
        print(f"{'standard step':<34}{us:>9.1f}{gbps:>8.0f}{100 * gbps / copy:>7.1f}%", flush=True)
    for name, fn in launches(S, X, Y, a, C, out, head_dim, hpg, sms).items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        try:
            # "nostore": a read ceiling that leaves the state as it was (its bytes: the reads)
            want = S0.double() if " nostore" in name else scaled if nofold(name) else ref

            def fold_error(fn=fn, want=want):  # one launch from S0, against float64
                S.copy_(S0)
                fn()
                torch.cuda.synchronize()
                return float(((S.double() - want).abs().max() / want.abs().max()))

            err = fold_error()
            us = warmed_median(capture_graph(fn), args.rounds, flush)
            # once more after the replays: a form that keeps state between launches (the counter
            # of "counter") must have put it back
            err = max(err, fold_error())
            gbps = moved_bytes(name) / (us * 1e-6) / 1e9
            print(f"{name:<34}{us:>9.1f}{gbps:>8.0f}{100 * gbps / copy:>7.1f}%  "
                  f"{'ok' if err < 1e-5 else 'WRONG'} {err:.1e}", flush=True)
        except Exception as exc:  # one failing shape must not end the run
            msg = str(exc).splitlines()[0][:100] if str(exc) else ""
            print(f"{name:<34} ERROR {type(exc).__name__}: {msg}", flush=True)


if __name__ == "__main__":
    main()
