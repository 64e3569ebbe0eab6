"""``bench_fold_ceiling.py``'s fold written in Gluon (Triton's explicit-layout dialect): the
checkpoint tile is loaded, folded on the tensor cores and stored in the MMA accumulator layout.

Triton places a tile's load and store in a coalesced layout and converts it to and from the
accumulator layout through shared memory around ``tl.dot``; Nsight Compute put ~30% of the
Mamba-2 flush launch's stall samples on those two conversions (NOTES_mamba2.md, eleventh run).
Here each thread loads the ``2 x fp32`` pairs its accumulator fragment holds (whole 32-byte
sectors per warp row, so no DRAM bytes are wasted), and nothing goes through shared memory.

The product ``X^T Y`` runs in two TF32 passes (``ops/_tf32.py``'s split): ``Y`` is bf16, exact in
TF32, and ``X`` (fp32) is split into a TF32 part rounded to nearest and its remainder.

``fold_gluon_fma_kernel``: the same fold as ``J`` rank-1 fp32 FMA updates (exact fp32, no tensor
cores), with each thread holding a ``[SPT_P, SPT_N]`` block of the tile (register blocking as in
a GEMM micro-kernel): per entry it loads ``SPT_P`` values of ``x_j`` and ``SPT_N`` of ``y_j``
(vectors, L1 hits) for ``SPT_P * SPT_N`` FMAs. Triton's own layouts give each thread one row of
four columns, so its FMA folds load a broadcast ``x`` value per row and entry (877-980 us at
Nemotron-H dims, NOTES_mamba2.md).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2


@gluon.jit
def _tf32_round(x):
    # Round to the nearest TF32 value (10 mantissa bits); the remainder x - hi is exact in fp32.
    bits = x.to(gl.int32, bitcast=True)
    return ((bits + 0x1000) & -8192).to(gl.float32, bitcast=True)


@gluon.jit
def fold_gluon_kernel(S_ptr, X_ptr, Y_ptr, a_ptr, C_ptr, out_ptr, n_tiles, HPG: gl.constexpr, P: gl.constexpr,
                      N: gl.constexpr, J: gl.constexpr, BLOCK_P: gl.constexpr, WARPS_M: gl.constexpr,
                      WARPS_N: gl.constexpr, PREFETCH: gl.constexpr):
    """``S <- a S + X^T Y`` and ``out = S C`` per ``[BLOCK_P, N]`` tile, programs walking tiles
    ``program_id, + num_programs, ...``; ``PREFETCH`` loads the next tile before this one's fold."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS_M, WARPS_N],
                                                  instr_shape=[16, 8])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    b_l: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=1)
    offs_p = gl.arange(0, BLOCK_P, layout=gl.SliceLayout(1, mma))
    offs_n = gl.arange(0, N, layout=gl.SliceLayout(0, mma))
    offs_pa = gl.arange(0, BLOCK_P, layout=gl.SliceLayout(1, a_l))
    offs_ja = gl.arange(0, J, layout=gl.SliceLayout(0, a_l))
    offs_jb = gl.arange(0, J, layout=gl.SliceLayout(1, b_l))
    offs_nb = gl.arange(0, N, layout=gl.SliceLayout(0, b_l))
    tile = offs_p[:, None] * N + offs_n[None, :]
    step = gl.num_programs(0)
    t = gl.program_id(0).to(gl.int64)
    if PREFETCH:
        nxt = gl.load(S_ptr + t * BLOCK_P * N + tile, mask=(offs_p < gl.where(t < n_tiles, BLOCK_P, 0))[:, None])
    while t < n_tiles:
        if PREFETCH:
            S = nxt
            nxt = gl.load(S_ptr + (t + step) * BLOCK_P * N + tile,
                          mask=(offs_p < gl.where(t + step < n_tiles, BLOCK_P, 0))[:, None])
        else:
            S = gl.load(S_ptr + t * BLOCK_P * N + tile)
        head = t // (P // BLOCK_P)
        p0 = t * BLOCK_P - head * P
        X = gl.load(X_ptr + head * J * P + offs_ja[None, :] * P + (p0 + offs_pa)[:, None])
        Y = gl.load(Y_ptr + (head // HPG) * J * N + offs_jb[:, None] * N + offs_nb[None, :]).to(gl.float32)
        X_hi = _tf32_round(X)
        acc = gl.load(a_ptr + head) * S
        acc = mma_v2(X - X_hi, Y, acc, input_precision="tf32")
        acc = mma_v2(X_hi, Y, acc, input_precision="tf32")
        gl.store(S_ptr + t * BLOCK_P * N + tile, acc)
        C = gl.load(C_ptr + (head // HPG) * N + offs_n).to(gl.float32)
        gl.store(out_ptr + t * BLOCK_P + offs_p, gl.sum(acc * C[None, :], axis=1))
        t += step


@gluon.jit
def fold_gluon_fma_kernel(S_ptr, X_ptr, Y_ptr, a_ptr, C_ptr, out_ptr, n_tiles, HPG: gl.constexpr, P: gl.constexpr,
                          N: gl.constexpr, J: gl.constexpr, BLOCK_P: gl.constexpr, SPT_P: gl.constexpr,
                          SPT_N: gl.constexpr, TPW_P: gl.constexpr, WARPS_P: gl.constexpr, WARPS_N: gl.constexpr,
                          UNROLL: gl.constexpr):
    """``S <- a S + X^T Y`` and ``out = S C`` per ``[BLOCK_P, N]`` tile as ``J`` rank-1 FMA updates,
    ``UNROLL`` entries' loads issued together; programs walk tiles ``program_id, + num_programs``."""
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[SPT_P, SPT_N], threads_per_warp=[TPW_P, 32 // TPW_P],
                                            warps_per_cta=[WARPS_P, WARPS_N], order=[1, 0])
    offs_p = gl.arange(0, BLOCK_P, layout=gl.SliceLayout(1, layout))
    offs_n = gl.arange(0, N, layout=gl.SliceLayout(0, layout))
    tile = offs_p[:, None] * N + offs_n[None, :]
    t = gl.program_id(0).to(gl.int64)
    while t < n_tiles:
        S = gl.load(S_ptr + t * BLOCK_P * N + tile)
        head = t // (P // BLOCK_P)
        p0 = t * BLOCK_P - head * P
        x_base = X_ptr + head * J * P + p0
        y_base = Y_ptr + (head // HPG) * J * N
        acc = gl.load(a_ptr + head) * S
        for j0 in range(0, J, UNROLL):
            for jj in gl.static_range(UNROLL):
                x_j = gl.load(x_base + (j0 + jj) * P + offs_p)
                y_j = gl.load(y_base + (j0 + jj) * N + offs_n).to(gl.float32)
                acc += x_j[:, None] * y_j[None, :]
        gl.store(S_ptr + t * BLOCK_P * N + tile, acc)
        C = gl.load(C_ptr + (head // HPG) * N + offs_n).to(gl.float32)
        gl.store(out_ptr + t * BLOCK_P + offs_p, gl.sum(acc * C[None, :], axis=1))
        t += gl.num_programs(0)


#: ``fold_gluon_fma_kernel`` shapes timed: (BLOCK_P, SPT_P, SPT_N, TPW_P, WARPS_P, WARPS_N, UNROLL)
FMA_SHAPES = ((32, 4, 4, 4, 2, 2, 4), (32, 4, 4, 4, 2, 2, 16), (32, 4, 4, 4, 2, 2, 1), (32, 2, 4, 4, 4, 1, 4),
              (16, 4, 4, 4, 1, 2, 4), (32, 4, 8, 8, 1, 4, 4), (64, 4, 4, 4, 4, 2, 4), (16, 2, 4, 8, 1, 2, 4))


def launches(S, X, Y, a, C, out, head_dim, hpg, sms):
    """``{name: zero-argument launch}`` of the Gluon fold in several shapes (grid: one tile per
    program, or ``xN`` programs per SM walking tiles)."""
    rows, n = S.shape
    common = dict(HPG=hpg, P=head_dim, N=n, J=X.shape[1])
    out_ = {}
    for bp, wm, wn, per_sm, prefetch in ((32, 2, 2, 0, False), (32, 2, 2, 5, False), (32, 2, 2, 4, True),
                                         (16, 1, 4, 0, False), (16, 1, 4, 8, True), (32, 2, 1, 0, False),
                                         (64, 4, 2, 0, False), (64, 2, 2, 0, False), (16, 1, 2, 0, False)):
        tiles = rows // bp
        grid = sms * per_sm if per_sm else tiles
        name = f"gluon bp{bp} w{wm}x{wn} x{per_sm or 'all'}{' pf' if prefetch else ''}"
        out_[name] = (lambda bp=bp, wm=wm, wn=wn, grid=grid, tiles=tiles, prefetch=prefetch: fold_gluon_kernel[(grid,)](
            S, X, Y, a, C, out, tiles, **common, BLOCK_P=bp, WARPS_M=wm, WARPS_N=wn, PREFETCH=prefetch,
            num_warps=wm * wn))
    for bp, spt_p, spt_n, tpw_p, wp, wn, unroll in FMA_SHAPES:
        name = f"gluon fma bp{bp} spt{spt_p}x{spt_n} tpw{tpw_p} w{wp}x{wn} u{unroll}"
        out_[name] = (lambda bp=bp, spt_p=spt_p, spt_n=spt_n, tpw_p=tpw_p, wp=wp, wn=wn, unroll=unroll:
                      fold_gluon_fma_kernel[(rows // bp,)](
                          S, X, Y, a, C, out, rows // bp, **common, BLOCK_P=bp, SPT_P=spt_p, SPT_N=spt_n,
                          TPW_P=tpw_p, WARPS_P=wp, WARPS_N=wn, UNROLL=unroll, num_warps=wp * wn))
    return out_
