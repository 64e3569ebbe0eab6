"""Chunked (WY) ReplaySSM step of delta-rule layers: the flush as two products over the state.

The kernel of ``decode.py`` refolds a window with ``c + 1`` dependent rank-1 updates of each
``[BV, d_k]`` state block, each waiting on a cross-thread reduction ``S k_j``: latency bound
(3.3x a standard step on an H200, benchmarks/NOTES_delta.md). Here the window's ``n = c + 1``
entries (ring ``0..c-1`` plus the current token at position ``c``) are folded in the chunked
form of ``reference.solve_window_values`` / ``reference.fold_window``, with ``G_i`` the
cumulative log-decay through entry ``i`` (scalar for GDN, a ``d_k``-vector for KDA):

    Kg[i]   = e^{G_i} * k_i,        Kd[i] = e^{G_{n-1} - G_i} * k_i                     [BC, d_k]
    M[i, j] = beta_i sum_d k_i[d] k_j[d] e^{G_i[d] - G_j[d]}  (j < i, else 0)          [BC, BC]
    A       = (I + M)^{-1}                        (unit lower triangular, forward substitution)
    U^T     = (beta * (V^T - S_c Kg^T)) A^T                                             [BV, BC]
    S_new   = S_c Diag(e^{G_{n-1}}) + U^T Kd

``M, A`` depend on the ring only: a program computes them once and streams its state row
blocks through three ``tl.dot`` products (fp32 operands; ``PRECISION`` "tf32x3" or "ieee").
With ``K_CHUNK`` (the default) the two products that reduce over or produce ``d_k`` run over
``K_CHUNK``-wide column chunks of the block whose key tiles are rebuilt from the ring (the
flushing program first writes the current token's ``k`` and ``g`` at position ``c``): whole
``[BV, d_k]`` dot operands in registers spill on sm_90 (``ChunkedVariant`` lists the
measurements). ``refold=False`` takes ``U`` from ``ring_u`` and solves only the current
token's row.

Non-flush steps run the one-pass form of ``decode.py`` with two changes: with ``LOADS_AHEAD``
the whole ring (masked tail included) and the program's first state block are requested before
``committed`` is known, so those loads are in flight while the cursor and the ring terms are
waited for (the ring is masked in registers); the loop over the other blocks is software
pipelined (``STAGES``). Launch choices live in :class:`ChunkedVariant`.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from .._arrivals import replay_cursors
from .decode import _append_gate_key, _arrivals, _load_token, _program_ids, _strides, replay_config

__all__ = ["ChunkedVariant", "delta_replay_chunked_step"]


@dataclass(frozen=True)
class ChunkedVariant:
    """Launch choices of the chunked kernel; ``None`` fields take :func:`decode.replay_config`'s.

    ``precision``: ``tl.dot`` input precision of the flush products, "tf32x3" (three TF32
    tensor-core products, near fp32) or "ieee" (fp32 FMA, whose operands spill: 255 registers +
    ~500 bytes of stack on sm_90). ``k_chunk``: the flush's products run over ``d_k`` chunks
    this wide, read from memory (the second pass re-reads the block from L1/L2); None holds
    whole ``[BV, d_k]`` / ``[BC, d_k]`` operands in registers (spills). ``loads_ahead``: request
    the whole ring (masked tail included) and the first state block before the cursor.
    ``stages``: software-pipelining depth of the loop over the program's other state blocks.
    ``block_v`` (>= 16, the smallest ``tl.dot`` tile), ``split`` (programs per value head),
    ``num_warps``, ``max_registers`` (ptxas ``.maxnreg``: the non-flush path alone needs 80
    registers, the flush path raises the kernel to 128; a cap of 96 fits 5 programs of 128
    threads per SM instead of 4 at the price of flush-path spills, 176 bytes of stack).

    Registers for sm_90 at Qwen3.5-4B dims, bf16, ``BV = 32`` (Triton 3.9 with the launch-time
    16-byte specialisation, ``cuobjdump``): the defaults 128 (KDA 128), ``k_chunk=16`` 125
    (KDA 161), ``k_chunk=64`` 240, ``stages=2`` 128 + 8 bytes of stack; the row-wise kernel 96.
    """

    precision: str = "tf32x3"
    k_chunk: int | None = 32
    loads_ahead: bool = True
    stages: int = 1
    block_v: int | None = None
    split: int | None = None
    num_warps: int | None = None
    max_registers: int | None = None

    def __post_init__(self):
        if self.precision not in ("ieee", "tf32x3"):
            raise ValueError(f"precision: expected 'ieee' or 'tf32x3', got {self.precision!r}")
        if self.block_v is not None and self.block_v < 16:
            raise ValueError(f"block_v: expected >= 16 (tl.dot tiles), got {self.block_v}")
        if self.stages < 1:
            raise ValueError(f"stages: expected >= 1, got {self.stages}")
        if self.k_chunk is not None and (self.k_chunk < 16 or self.k_chunk & (self.k_chunk - 1)):
            raise ValueError(f"k_chunk: expected None or a power of two >= 16, got {self.k_chunk}")


@triton.jit
def _row(tile, o_c, i):
    """Row ``i`` of a ``[BC, X]`` register tile (a masked reduction: rows are spread over threads)."""
    return tl.sum(tl.where((o_c == i)[:, None], tile, 0.0), axis=0)


@triton.jit
def _coupling(Kw, Gc, bw, o_c, n, BC: tl.constexpr, PER_CHANNEL: tl.constexpr, PRECISION: tl.constexpr):
    """``M [BC, BC]``: ``beta_i (e^{G_i - G_j} * k_i) . k_j`` for ``j < i < n``, else 0."""
    lower = o_c[:, None] > o_c[None, :]
    if PER_CHANNEL:
        # The decay sits inside the dot product: one row of M per entry; the exponents are <= 0
        # where kept and masked to -inf elsewhere (positive ones can overflow).
        M = tl.zeros([BC, BC], dtype=tl.float32)
        for i in tl.range(1, n):
            k_i = _row(Kw, o_c, i)
            G_i = _row(Gc, o_c, i)
            expo = tl.where((o_c < i)[:, None], G_i[None, :] - Gc, float("-inf"))
            m_i = tl.sum(Kw * k_i[None, :] * tl.exp(expo), axis=1)
            M = tl.where((o_c == i)[:, None], m_i[None, :], M)
    else:
        KK = tl.dot(Kw, tl.trans(Kw), input_precision=PRECISION)
        M = KK * tl.exp(tl.where(lower, Gc[:, None] - Gc[None, :], float("-inf")))
    return tl.where(lower, bw[:, None] * M, 0.0)


@triton.jit
def _unit_lower_inverse(M, o_c, n, BC: tl.constexpr):
    """``(I + M)^{-1}`` of a strictly lower ``M`` whose rows ``>= n`` are zero, by forward
    substitution: row ``i`` of the strictly lower part is ``-m_i - m_i L``."""
    L = tl.zeros([BC, BC], dtype=tl.float32)
    for i in tl.range(1, n):
        a_i = -_row(M, o_c, i)
        a_i += tl.sum(a_i[:, None] * L, axis=0)
        L = tl.where((o_c == i)[:, None], a_i[None, :], L)
    return L + (o_c[:, None] == o_c[None, :]).to(tl.float32)


@triton.jit
def _window_values(P, o_v, p_v, p_rv, p_ru, o_c, b_beta, bw, is_t, m_prev, m_cap, solve, V: tl.constexpr,
                   REFOLD: tl.constexpr, LOADS_AHEAD: tl.constexpr, PRECISION: tl.constexpr):
    """``U^T [BV, BC]`` of one block from ``P = S_c Kg^T``: the triangular solve (``solve = A^T``)
    or, folding the cached ``u``, only the current token's row (``solve`` = row ``c`` of ``M``)."""
    b_v = tl.load(p_v + o_v).to(p_rv.dtype.element_ty).to(tl.float32)
    if REFOLD:
        if LOADS_AHEAD:
            Vt = tl.load(p_rv + o_c[None, :] * V + o_v[:, None], mask=m_cap[None, :], other=0.0)
        else:
            Vt = tl.load(p_rv + o_c[None, :] * V + o_v[:, None], mask=m_prev[None, :], other=0.0)
        Vt = tl.where(is_t[None, :], b_v[:, None], tl.where(m_prev[None, :], Vt.to(tl.float32), 0.0))
        Ut = tl.dot(bw[None, :] * (Vt - P), solve, input_precision=PRECISION)
    else:
        # Row c of the window's system: u_t = beta_t (v_t - S_c Kg_t) - sum_j M[c, j] u_j.
        Ut = tl.load(p_ru + o_c[None, :] * V + o_v[:, None], mask=m_prev[None, :], other=0.0)
        P_t = tl.sum(tl.where(is_t[None, :], P, 0.0), axis=1)
        b_u = b_beta * (b_v - P_t) - tl.sum(Ut * solve[None, :], axis=1)
        Ut = tl.where(is_t[None, :], b_u[:, None], Ut)
    return Ut


@triton.jit
def _fold_block(S, o_v, p_s, p_o, p_v, p_rv, p_ru, o_k, o_c, b_q, b_beta, bw, is_t, m_prev, m_cap, Kg, Kd, solve,
                e_end, K: tl.constexpr, V: tl.constexpr, PER_CHANNEL: tl.constexpr, REFOLD: tl.constexpr,
                LOADS_AHEAD: tl.constexpr, PRECISION: tl.constexpr):
    """Flush of one ``[BV, K]`` block with the key tiles in registers:
    ``S_new = S Diag(e^{G_end}) + U^T Kd``, store, output."""
    P = tl.dot(S, tl.trans(Kg), input_precision=PRECISION)
    Ut = _window_values(P, o_v, p_v, p_rv, p_ru, o_c, b_beta, bw, is_t, m_prev, m_cap, solve, V, REFOLD,
                        LOADS_AHEAD, PRECISION)
    if PER_CHANNEL:
        S = S * e_end[None, :]
    else:
        S = S * e_end
    S += tl.dot(Ut, Kd, input_precision=PRECISION)
    tl.store(p_s + o_v[:, None] * K + o_k[None, :], S.to(p_s.dtype.element_ty))
    tl.store(p_o + o_v, tl.sum(S * b_q[None, :], axis=1).to(p_o.dtype.element_ty))


@triton.jit
def _chunk_keys(p_rk, p_rg, o_c, o_kc, m_win, Gc, G_end, K: tl.constexpr, PER_CHANNEL: tl.constexpr):
    """``Kg, Kd [BC, KC]`` and ``e^{G_end}`` of one ``d_k`` chunk, read from the ring (window rows
    ``0..c``, the current token's already written there)."""
    Kc = tl.load(p_rk + o_c[:, None] * K + o_kc[None, :], mask=m_win[:, None], other=0.0).to(tl.float32)
    if PER_CHANNEL:
        gc = tl.load(p_rg + o_c[:, None] * K + o_kc[None, :], mask=m_win[:, None], other=0.0)
        G_chunk = tl.cumsum(gc, axis=0)
        G_last = tl.sum(gc, axis=0)
        Kg = Kc * tl.exp(G_chunk)
        Kd = Kc * tl.exp(G_last[None, :] - G_chunk)
        e_end = tl.exp(G_last)[None, :]
    else:
        Kg = Kc * tl.exp(Gc)[:, None]
        Kd = Kc * tl.exp(G_end - Gc)[:, None]
        e_end = tl.exp(G_end)
    return Kg, Kd, e_end


@triton.jit
def _fold_block_chunked(o_v, p_s, p_o, p_q, q_factor, p_v, p_rk, p_rg, p_rv, p_ru, o_c, b_beta, bw, is_t, m_prev,
                        m_cap, m_win, Gc, G_end, solve, BV: tl.constexpr, BC: tl.constexpr, K: tl.constexpr,
                        V: tl.constexpr, KC: tl.constexpr, PER_CHANNEL: tl.constexpr, REFOLD: tl.constexpr,
                        LOADS_AHEAD: tl.constexpr, PRECISION: tl.constexpr):
    """Flush of one ``[BV, K]`` block in ``KC``-wide ``d_k`` chunks read from memory: pass 1 sums
    ``P = S_c Kg^T`` over the chunks, pass 2 re-reads each chunk (cache-resident), adds
    ``U^T Kd`` and stores it. ``tl.dot`` operands are ``[BV, KC]`` / ``[BC, KC]`` tiles, so no
    whole-``d_k`` operand is held in registers. The chunk loops stay rolled (unrolled they took
    133 / 168 registers at 16- / 32-wide chunks on sm_90 instead of 125 / 128)."""
    P = tl.zeros([BV, BC], dtype=tl.float32)
    for kc in tl.range(0, K, KC, num_stages=1):
        o_kc = kc + tl.arange(0, KC)
        S = tl.load(p_s + o_v[:, None] * K + o_kc[None, :]).to(tl.float32)
        Kg, Kd, e_end = _chunk_keys(p_rk, p_rg, o_c, o_kc, m_win, Gc, G_end, K, PER_CHANNEL)
        P += tl.dot(S, tl.trans(Kg), input_precision=PRECISION)
    Ut = _window_values(P, o_v, p_v, p_rv, p_ru, o_c, b_beta, bw, is_t, m_prev, m_cap, solve, V, REFOLD,
                        LOADS_AHEAD, PRECISION)
    b_o = tl.zeros([BV], dtype=tl.float32)
    for kc in tl.range(0, K, KC, num_stages=1):
        o_kc = kc + tl.arange(0, KC)
        S = tl.load(p_s + o_v[:, None] * K + o_kc[None, :]).to(tl.float32)
        Kg, Kd, e_end = _chunk_keys(p_rk, p_rg, o_c, o_kc, m_win, Gc, G_end, K, PER_CHANNEL)
        S = S * e_end + tl.dot(Ut, Kd, input_precision=PRECISION)
        tl.store(p_s + o_v[:, None] * K + o_kc[None, :], S.to(p_s.dtype.element_ty))
        b_q = tl.load(p_q + o_kc).to(tl.float32) * q_factor
        b_o += tl.sum(S * b_q[None, :], axis=1)
    tl.store(p_o + o_v, b_o.to(p_o.dtype.element_ty))


@triton.jit
def _step_block(S, o_v, p_o, p_v, p_rv, p_ru, o_c, c, m_prev, m_cap, b_beta, x_k, x_q, ak, aq, kq,
                V: tl.constexpr, LOADS_AHEAD: tl.constexpr):
    """Non-flush step of one ``[BV, K]`` block: output, and ``u_t``, ``v_t`` appended to the ring."""
    if LOADS_AHEAD:
        U = tl.load(p_ru + o_c[:, None] * V + o_v[None, :], mask=m_cap[:, None], other=0.0)
        U = tl.where(m_prev[:, None], U, 0.0)
    else:
        U = tl.load(p_ru + o_c[:, None] * V + o_v[None, :], mask=m_prev[:, None], other=0.0)
    b_v = tl.load(p_v + o_v).to(p_rv.dtype.element_ty).to(tl.float32)
    b_u = b_beta * (b_v - tl.sum(S * x_k[None, :], axis=1) - tl.sum(ak[:, None] * U, axis=0))
    b_o = tl.sum(S * x_q[None, :], axis=1) + tl.sum(aq[:, None] * U, axis=0) + b_u * kq
    tl.store(p_o + o_v, b_o.to(p_o.dtype.element_ty))
    tl.store(p_ru + c * V + o_v, b_u)
    tl.store(p_rv + c * V + o_v, b_v.to(p_rv.dtype.element_ty))


@triton.jit
def _chunked_replay_kernel(
    q, k, v, a, b, A_log, dt_bias, out,
    checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, arrivals,
    state_indices, pad_slot_id, window, scale,
    stride_q, stride_qh, stride_k, stride_kh, stride_v, stride_vh, stride_a, stride_b,
    stride_o, stride_oh,
    HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    SPLIT: tl.constexpr, CAP: tl.constexpr, BC: tl.constexpr, PER_CHANNEL: tl.constexpr,
    REFOLD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_INDICES: tl.constexpr,
    PRECISION: tl.constexpr, LOADS_AHEAD: tl.constexpr, STAGES: tl.constexpr, K_CHUNK: tl.constexpr,
):
    G: tl.constexpr = HV // H
    BLOCKS: tl.constexpr = V // BV // SPLIT
    i_s, i_hv, i_b = _program_ids(SPLIT, HV)
    i_h = i_hv // G
    o_k = tl.arange(0, K)
    o_bv = tl.arange(0, BV)
    o_c = tl.arange(0, BC)
    v_first = i_s * BLOCKS * BV
    p_o = out + i_b * stride_o + i_hv * stride_oh
    slot = i_b.to(tl.int64)
    if HAS_INDICES:
        slot = tl.load(state_indices + i_b).to(tl.int64)
    if slot == pad_slot_id:
        for blk in tl.range(0, BLOCKS):
            tl.store(p_o + v_first + blk * BV + o_bv, tl.zeros([BV], dtype=tl.float32).to(out.dtype.element_ty))
        return
    sh = slot * HV + i_hv
    p_v = v + i_b * stride_v + i_hv * stride_vh
    p_s = checkpoint + sh * V * K
    p_rk = ring_k + (slot * H + i_h) * CAP * K
    p_rv = ring_v + sh * CAP * V
    p_rb = ring_beta + sh * CAP
    p_ru = ring_u + sh * CAP * V
    if PER_CHANNEL:
        p_rg = ring_g + sh * CAP * K
    else:
        p_rg = ring_g + sh * CAP
    # The program's first state block is processed apart from the pipelined loop over the rest:
    # with LOADS_AHEAD it is requested, with the whole ring, before the cursors, so that those
    # loads are in flight while the cursor and the ring terms are waited for.
    o_v0 = v_first + o_bv
    m_cap = o_c < CAP
    if LOADS_AHEAD:
        S0 = tl.load(p_s + o_v0[:, None] * K + o_k[None, :]).to(tl.float32)
        Kr = tl.load(p_rk + o_c[:, None] * K + o_k[None, :], mask=m_cap[:, None], other=0.0).to(tl.float32)
        br = tl.load(p_rb + o_c, mask=m_cap, other=0.0)
        if PER_CHANNEL:
            gr = tl.load(p_rg + o_c[:, None] * K + o_k[None, :], mask=m_cap[:, None], other=0.0)
        else:
            gr = tl.load(p_rg + o_c, mask=m_cap, other=0.0)
    b_q, b_k, b_g, b_beta = _load_token(
        q, k, a, b, A_log, dt_bias, i_b, i_h, i_hv, o_k, scale,
        stride_q, stride_qh, stride_k, stride_kh, stride_a, stride_b,
        ring_k.dtype.element_ty, K, PER_CHANNEL, HAS_BIAS,
    )
    c = tl.load(committed + slot)
    flush = c + 1 >= tl.load(flush_at + slot)
    m_prev = o_c < c
    if LOADS_AHEAD:
        Kr = tl.where(m_prev[:, None], Kr, 0.0)
        br = tl.where(m_prev, br, 0.0)
        if PER_CHANNEL:
            gr = tl.where(m_prev[:, None], gr, 0.0)
        else:
            gr = tl.where(m_prev, gr, 0.0)
    else:
        Kr = tl.load(p_rk + o_c[:, None] * K + o_k[None, :], mask=m_prev[:, None], other=0.0).to(tl.float32)
        br = tl.load(p_rb + o_c, mask=m_prev, other=0.0)
        if PER_CHANNEL:
            gr = tl.load(p_rg + o_c[:, None] * K + o_k[None, :], mask=m_prev[:, None], other=0.0)
        else:
            gr = tl.load(p_rg + o_c, mask=m_prev, other=0.0)
        S0 = tl.load(p_s + o_v0[:, None] * K + o_k[None, :]).to(tl.float32)
    if flush:
        # The window: ring entries 0..c-1 and the current token at position c.
        is_t = o_c == c
        Kw = tl.where(is_t[:, None], b_k[None, :], Kr)
        bw = tl.where(is_t, b_beta, br)
        if PER_CHANNEL:
            gw = tl.where(is_t[:, None], b_g[None, :], gr)
            Gc = tl.cumsum(gw, axis=0)
            G_end = tl.sum(gw, axis=0)
            Kg = Kw * tl.exp(Gc)
            Kd = Kw * tl.exp(G_end[None, :] - Gc)
        else:
            gw = tl.where(is_t, b_g, gr)
            Gc = tl.cumsum(gw, axis=0)
            G_end = tl.sum(gw)
            Kg = Kw * tl.exp(Gc)[:, None]
            Kd = Kw * tl.exp(G_end - Gc)[:, None]
        e_end = tl.exp(G_end)
        if K_CHUNK != 0:
            # The chunk loads read the whole window from the ring: write the current token's key
            # and decay at position c first. Every program sharing those entries writes the same
            # bits, and the barrier makes this program's own writes visible to its threads.
            tl.store(p_rk + c * K + o_k, b_k.to(ring_k.dtype.element_ty))
            if PER_CHANNEL:
                tl.store(p_rg + c * K + o_k, b_g)
            else:
                tl.store(p_rg + c, b_g)
            tl.debug_barrier()
        if (K_CHUNK != 0) & (not PER_CHANNEL):
            # k_i . k_j over d_k chunks read back from the ring (no whole-d_k dot operand).
            KK = tl.zeros([BC, BC], dtype=tl.float32)
            for kc in tl.static_range(0, K, K_CHUNK):
                o_kc = kc + tl.arange(0, K_CHUNK)
                Kc = tl.load(p_rk + o_c[:, None] * K + o_kc[None, :], mask=(o_c <= c)[:, None], other=0.0)
                Kc = Kc.to(tl.float32)
                KK += tl.dot(Kc, tl.trans(Kc), input_precision=PRECISION)
            lower = o_c[:, None] > o_c[None, :]
            M = KK * tl.exp(tl.where(lower, Gc[:, None] - Gc[None, :], float("-inf")))
            M = tl.where(lower, bw[:, None] * M, 0.0)
        else:
            M = _coupling(Kw, Gc, bw, o_c, c + 1, BC, PER_CHANNEL, PRECISION)
        if REFOLD:
            solve = tl.trans(_unit_lower_inverse(M, o_c, c + 1, BC))
        else:
            solve = _row(M, o_c, c)
        if K_CHUNK == 0:
            _fold_block(S0, o_v0, p_s, p_o, p_v, p_rv, p_ru, o_k, o_c, b_q, b_beta, bw, is_t, m_prev, m_cap, Kg, Kd,
                        solve, e_end, K, V, PER_CHANNEL, REFOLD, LOADS_AHEAD, PRECISION)
            for blk in tl.range(1, BLOCKS, num_stages=STAGES):
                o_v = v_first + blk * BV + o_bv
                S = tl.load(p_s + o_v[:, None] * K + o_k[None, :]).to(tl.float32)
                _fold_block(S, o_v, p_s, p_o, p_v, p_rv, p_ru, o_k, o_c, b_q, b_beta, bw, is_t, m_prev, m_cap, Kg,
                            Kd, solve, e_end, K, V, PER_CHANNEL, REFOLD, LOADS_AHEAD, PRECISION)
        else:
            p_q = q + i_b * stride_q + i_h * stride_qh
            b_qraw = tl.load(p_q + o_k).to(tl.float32)
            q_factor = scale / tl.sqrt(tl.sum(b_qraw * b_qraw) + 1e-6)
            for blk in tl.range(0, BLOCKS, num_stages=STAGES):
                _fold_block_chunked(v_first + blk * BV + o_bv, p_s, p_o, p_q, q_factor, p_v, p_rk, p_rg, p_rv, p_ru,
                                    o_c, b_beta, bw, is_t, m_prev, m_cap, o_c <= c, Gc, G_end, solve, BV, BC, K, V,
                                    K_CHUNK, PER_CHANNEL, REFOLD, LOADS_AHEAD, PRECISION)
    else:
        # One pass (decode.py): decayed ring-key dot products once, then the state blocks.
        if PER_CHANNEL:
            D_t = tl.sum(gr, axis=0) + b_g
            Kr = Kr * tl.exp(D_t[None, :] - tl.cumsum(gr, axis=0))
            ak = tl.sum(Kr * b_k[None, :], axis=1)
            aq = tl.sum(Kr * b_q[None, :], axis=1)
        else:
            D_t = tl.sum(gr) + b_g
            w = tl.exp(D_t - tl.cumsum(gr, axis=0))
            ak = tl.sum(Kr * b_k[None, :], axis=1) * w
            aq = tl.sum(Kr * b_q[None, :], axis=1) * w
        x_k = tl.exp(D_t) * b_k
        x_q = tl.exp(D_t) * b_q
        kq = tl.sum(b_k * b_q)
        _step_block(S0, o_v0, p_o, p_v, p_rv, p_ru, o_c, c, m_prev, m_cap, b_beta, x_k, x_q, ak, aq, kq, V,
                    LOADS_AHEAD)
        for blk in tl.range(1, BLOCKS, num_stages=STAGES):
            o_v = v_first + blk * BV + o_bv
            S = tl.load(p_s + o_v[:, None] * K + o_k[None, :]).to(tl.float32)
            _step_block(S, o_v, p_o, p_v, p_rv, p_ru, o_c, c, m_prev, m_cap, b_beta, x_k, x_q, ak, aq, kq, V,
                        LOADS_AHEAD)
        if i_s == 0:
            _append_gate_key(p_rb, p_rg, p_rk, c, b_beta, b_g, b_k, o_k, i_hv % G == 0, K, PER_CHANNEL)
    replay_cursors(arrivals, committed, flush_at, i_b, slot, c, flush, window, HV * SPLIT)


def chunked_config(rows: int, v_heads: int, d_k: int, d_v: int, variant: ChunkedVariant) -> tuple[int, int, int]:
    """``(BV, SPLIT, num_warps)``: :func:`decode.replay_config` with ``BV >= 16`` (``tl.dot``)."""
    bv = variant.block_v or max(16, replay_config(rows, v_heads, d_k, d_v)[0])
    bv, split, warps = replay_config(rows, v_heads, d_k, d_v, min(bv, d_v), variant.split)
    return bv, split, variant.num_warps or warps


def delta_replay_chunked_step(checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window,
                              q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold,
                              variant: ChunkedVariant):
    """Launch one ReplaySSM step with the chunked kernel; arguments as
    :func:`trtllm_replayssm.ops.gdn.decode.delta_replay_step` (already checked), ``d_k, d_v >= 16``.
    Returns ``o [batch, HV, d_v]`` in ``v.dtype``."""
    batch, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    cap = ring_k.shape[2]
    bv, split, warps = chunked_config(batch, HV, K, V, variant)
    out = v.new_empty(v.shape)
    _chunked_replay_kernel[(batch * HV * split,)](
        q, k, v, a, b, A_log, A_log if dt_bias is None else dt_bias, out,
        checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, _arrivals(batch, q.device),
        state_indices, pad_slot_id, window, K ** -0.5 if scale is None else scale,
        *_strides(q, k, v, a, b, out),
        HV=HV, H=H, K=K, V=V, BV=bv, SPLIT=split, CAP=cap, BC=max(triton.next_power_of_2(cap), 16),
        PER_CHANNEL=a.dim() == 3, REFOLD=refold, HAS_BIAS=dt_bias is not None,
        HAS_INDICES=state_indices is not None, PRECISION=variant.precision, LOADS_AHEAD=variant.loads_ahead,
        STAGES=variant.stages, K_CHUNK=min(variant.k_chunk or 0, K), num_warps=warps,
        maxnreg=variant.max_registers,
    )
    return out
