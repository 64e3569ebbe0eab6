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
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma


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


# Gluon's CTA-wide barrier and TMA copies under their current names (``barrier`` from Triton
# 3.7, ``thread_barrier`` before; ``async_load`` / ``async_store`` in later Triton).
_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.jit
def _tma_tile_operands(X_ptr, Y_ptr, a_ptr, C_ptr, t, valid, offs_pa, offs_ja, offs_jb, offs_cb, offs_c,
                       HPG: gl.constexpr, P: gl.constexpr, N: gl.constexpr, J: gl.constexpr, BLOCK_P: gl.constexpr,
                       CHUNK: gl.constexpr):
    """Tile ``t``'s fold operands, requested together: ``X`` columns (``[BLOCK_P, J]`` fp32, dot
    operand A), the head's decay, and its group's ``Y`` (four ``[J, CHUNK]`` dot operands B,
    fp32) and ``C`` (four ``[CHUNK]``)."""
    gl.static_assert(N == 4 * CHUNK, "the TMA fold holds its Y and C as four column chunks")
    head = t // (P // BLOCK_P)
    p0 = t * BLOCK_P - head * P
    X = gl.load(X_ptr + head.to(gl.int64) * J * P + offs_ja[None, :] * P + (p0 + offs_pa)[:, None],
                mask=(offs_pa < gl.where(valid, BLOCK_P, 0))[:, None], other=0.0)
    y_ptrs = Y_ptr + (head // HPG).to(gl.int64) * J * N + offs_jb[:, None] * N + offs_cb[None, :]
    c_ptrs = C_ptr + (head // HPG).to(gl.int64) * N + offs_c
    Y0 = gl.load(y_ptrs).to(gl.float32)
    Y1 = gl.load(y_ptrs + CHUNK).to(gl.float32)
    Y2 = gl.load(y_ptrs + 2 * CHUNK).to(gl.float32)
    Y3 = gl.load(y_ptrs + 3 * CHUNK).to(gl.float32)
    C0 = gl.load(c_ptrs).to(gl.float32)
    C1 = gl.load(c_ptrs + CHUNK).to(gl.float32)
    C2 = gl.load(c_ptrs + 2 * CHUNK).to(gl.float32)
    C3 = gl.load(c_ptrs + 3 * CHUNK).to(gl.float32)
    return X, gl.load(a_ptr + head, mask=valid, other=0.0), Y0, Y1, Y2, Y3, C0, C1, C2, C3


@gluon.jit
def _tma_fold_chunk(buf, decay, X_lo, X_hi, Y, C, yc, mma: gl.constexpr):
    """Fold one ``[BLOCK_P, CHUNK]`` chunk in place in shared memory; ``yc`` (same shape) gains
    ``acc * C``, reduced over columns once per tile (the reduction's shuffles were a third of the
    kernel's stall samples when taken per chunk). Each thread writes back exactly the elements it
    read: no barrier between the two."""
    acc = decay * buf.load(mma)
    acc = mma_v2(X_lo, Y, acc, input_precision="tf32")
    acc = mma_v2(X_hi, Y, acc, input_precision="tf32")
    buf.store(acc)
    return yc + acc * C[None, :]


@gluon.jit
def fold_gluon_tma_kernel(S_desc, X_ptr, Y_ptr, a_ptr, C_ptr, out_ptr, n_tiles, HPG: gl.constexpr, P: gl.constexpr,
                          N: gl.constexpr, J: gl.constexpr, BLOCK_P: gl.constexpr, CHUNK: gl.constexpr,
                          STAGES: gl.constexpr, LAG: gl.constexpr, WARPS_M: gl.constexpr, WARPS_N: gl.constexpr):
    """The tf32x2 fold with the checkpoint streamed through shared memory by TMA: each program
    keeps ``STAGES`` tiles in flight (``[BLOCK_P, N]`` as four column chunks of ``[BLOCK_P,
    CHUNK]``, 128-byte swizzled so the accumulator-layout reads do not collide on banks), folds a
    tile in place in shared memory and stores it back by TMA. A buffer is refilled ``LAG`` tiles
    after its store was issued (``tma.store_wait``: by then the store has read it), and the next
    tile's operands (``X``, ``Y``, ``C``, decay) are loaded into registers while this one folds,
    so the only latency a tile waits on is its own TMA load, issued ``STAGES - LAG`` tiles
    earlier."""
    NC: gl.constexpr = N // CHUNK
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS_M, WARPS_N],
                                                  instr_shape=[16, 8])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    b_l: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=1)
    offs_p = gl.arange(0, BLOCK_P, layout=gl.SliceLayout(1, mma))
    offs_c = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, mma))
    offs_pa = gl.arange(0, BLOCK_P, layout=gl.SliceLayout(1, a_l))
    offs_ja = gl.arange(0, J, layout=gl.SliceLayout(0, a_l))
    offs_jb = gl.arange(0, J, layout=gl.SliceLayout(1, b_l))
    offs_cb = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, b_l))
    bufs = gl.allocate_shared_memory(gl.float32, [STAGES * NC, BLOCK_P, CHUNK], S_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    pid = gl.program_id(0)
    step = gl.num_programs(0)
    mine = (n_tiles - pid + step - 1) // step
    for s in gl.static_range(STAGES):
        pred = s < mine
        mbarrier.expect(bars.index(s), BLOCK_P * N * 4, pred=pred)
        for c in gl.static_range(NC):
            _tma_load(S_desc, [(pid + s * step) * BLOCK_P, c * CHUNK], bars.index(s), bufs.index(s * NC + c), pred)
    X, decay, Y0, Y1, Y2, Y3, C0, C1, C2, C3 = _tma_tile_operands(
        X_ptr, Y_ptr, a_ptr, C_ptr, pid, 0 < mine, offs_pa, offs_ja, offs_jb, offs_cb, offs_c, HPG, P, N, J, BLOCK_P,
        CHUNK)
    for i in range(mine):
        b = i % STAGES
        t = pid + i * step
        X_hi = _tf32_round(X)
        X_lo = X - X_hi
        f_decay = decay
        fY0, fY1, fY2, fY3, fC0, fC1, fC2, fC3 = Y0, Y1, Y2, Y3, C0, C1, C2, C3
        X, decay, Y0, Y1, Y2, Y3, C0, C1, C2, C3 = _tma_tile_operands(
            X_ptr, Y_ptr, a_ptr, C_ptr, t + step, i + 1 < mine, offs_pa, offs_ja, offs_jb, offs_cb, offs_c, HPG, P,
            N, J, BLOCK_P, CHUNK)
        yc = gl.zeros([BLOCK_P, CHUNK], gl.float32, layout=mma)
        mbarrier.wait(bars.index(b), (i // STAGES) & 1)
        yc = _tma_fold_chunk(bufs.index(b * NC), f_decay, X_lo, X_hi, fY0, fC0, yc, mma)
        yc = _tma_fold_chunk(bufs.index(b * NC + 1), f_decay, X_lo, X_hi, fY1, fC1, yc, mma)
        yc = _tma_fold_chunk(bufs.index(b * NC + 2), f_decay, X_lo, X_hi, fY2, fC2, yc, mma)
        yc = _tma_fold_chunk(bufs.index(b * NC + 3), f_decay, X_lo, X_hi, fY3, fC3, yc, mma)
        gl.store(out_ptr + t.to(gl.int64) * BLOCK_P + offs_p, gl.sum(yc, axis=1))
        fence_async_shared()
        _barrier()
        for c in gl.static_range(NC):
            _tma_store(S_desc, [t * BLOCK_P, c * CHUNK], bufs.index(b * NC + c))
        # Tile i - LAG's stores have read their buffer once at most LAG * NC stores are pending:
        # refill it with the tile STAGES after it.
        tma.store_wait(LAG * NC)
        _barrier()
        nxt = i - LAG + STAGES
        if (i >= LAG) & (nxt < mine):
            pb = (i - LAG) % STAGES
            mbarrier.expect(bars.index(pb), BLOCK_P * N * 4)
            for c in gl.static_range(NC):
                _tma_load(S_desc, [(pid + nxt * step) * BLOCK_P, c * CHUNK], bars.index(pb), bufs.index(pb * NC + c))
    tma.store_wait(0)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s))


#: ``fold_gluon_tma_kernel`` shapes timed: (BLOCK_P, CHUNK, STAGES, LAG, WARPS_M, WARPS_N, programs per SM)
TMA_SHAPES = ((32, 32, 4, 1, 2, 2, 3), (32, 32, 3, 1, 2, 2, 4), (64, 32, 3, 1, 2, 2, 2), (64, 32, 2, 1, 2, 2, 3),
              (32, 32, 6, 2, 2, 2, 2), (16, 32, 6, 2, 1, 2, 4), (16, 32, 4, 1, 1, 2, 6), (16, 32, 3, 1, 1, 1, 8),
              (32, 32, 3, 1, 2, 1, 4), (64, 32, 6, 2, 2, 4, 1))


def tma_launches(S, X, Y, a, C, out, head_dim, hpg, sms):
    """``{name: zero-argument launch}`` of the TMA-streamed Gluon fold (Hopper and later)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows, n = S.shape
    common = dict(HPG=hpg, P=head_dim, N=n, J=X.shape[1])
    out_ = {}
    for bp, chunk, stages, lag, wm, wn, per_sm in TMA_SHAPES:
        layout = gl.NVMMASharedLayout(swizzle_byte_width=min(128, chunk * 4), element_bitwidth=32, rank=2)
        desc = TensorDescriptor.from_tensor(S, [bp, chunk], layout)
        name = f"gluon tma bp{bp} c{chunk} s{stages} l{lag} w{wm}x{wn} x{per_sm}"
        out_[name] = (lambda bp=bp, chunk=chunk, stages=stages, lag=lag, wm=wm, wn=wn, per_sm=per_sm, desc=desc:
                      fold_gluon_tma_kernel[(sms * per_sm,)](
                          desc, X, Y, a, C, out, rows // bp, **common, BLOCK_P=bp, CHUNK=chunk, STAGES=stages,
                          LAG=lag, WARPS_M=wm, WARPS_N=wn, num_warps=wm * wn))
    return out_
