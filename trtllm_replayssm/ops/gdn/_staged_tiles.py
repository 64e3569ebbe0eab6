"""Per-tile bodies of the staged delta-rule step (``decode_staged.py``): the non-flush read of
a checkpoint tile and the flush folds of a ``[BV, d_k]`` fp32 tile (refold from the raw ring,
its chunked "wy" form, the cached ``u`` as rank-1 updates or as one product).

Shapes: ``S`` ``[BV, K]`` fp32 (rows ``o_v`` of one value head's state), ``U`` ``[BC, BV]``
the ring's cached ``u`` (zero from ``c`` on), ``o_k`` / ``o_c`` / ``o_v`` the ``d_k``, ring
and ``d_v`` offsets; ``p_*`` pointers to the (row, head)'s ring entries and scratch line.
"""

import triton
import triton.language as tl

from .._chunk_sums import chunk_partials
from .._tf32 import dot_tf32x3_split_b, fp32_dot, tf32_split
from .decode import _delta_update, _ring_entry, _tile_refold_raw


@triton.jit
def _wy_column(S, R, G, j, c, b_v, p_rk, p_rv, p_rg, p_rb, o_k, o_v, o_c, K: tl.constexpr, V: tl.constexpr,
               PER_CHANNEL: tl.constexpr):
    """Column ``j`` of ``R = beta (V - S_c Kg^T)`` and the running log-decay ``G`` through ``j``;
    an entry past ``c`` (the unrolled loop) adds nothing."""
    live = j <= c
    if PER_CHANNEL:
        G += tl.where(live, tl.load(p_rg + j * K + o_k), 0.0)
    else:
        G += tl.where(live, tl.load(p_rg + j), 0.0)
    kg = tl.load(p_rk + j * K + o_k).to(tl.float32) * tl.exp(G)
    v_j = tl.where(j == c, b_v, tl.load(p_rv + j * V + o_v).to(tl.float32))
    r_j = tl.load(p_rb + j) * (v_j - tl.sum(S * kg[None, :], axis=1))
    return tl.where(((o_c == j) & live)[None, :], r_j[:, None], R), G


@triton.jit
def _wy_update(S, R, G, G_end, i, c, p_rk, p_rg, p_a, o_k, o_c, K: tl.constexpr, BC: tl.constexpr,
               PER_CHANNEL: tl.constexpr):
    """``S += u_i (e^{G_end - G_i} * k_i)^T`` with ``u_i = R A_i`` (row ``i`` of the window's
    inverse); an entry past ``c`` adds nothing."""
    live = i <= c
    if PER_CHANNEL:
        G += tl.where(live, tl.load(p_rg + i * K + o_k), 0.0)
    else:
        G += tl.where(live, tl.load(p_rg + i), 0.0)
    b_ui = tl.where(live, tl.sum(R * tl.load(p_a + i * BC + o_c)[None, :], axis=1), 0.0)
    kd = tl.where(live, tl.load(p_rk + i * K + o_k).to(tl.float32) * tl.exp(G_end - G), 0.0)
    return S + b_ui[:, None] * kd[None, :], G


@triton.jit
def _tile_wy(S, c, b_v, p_rk, p_rv, p_rg, p_rb, p_a, o_k, o_v, o_c, K: tl.constexpr, V: tl.constexpr,
             BV: tl.constexpr, BC: tl.constexpr, CAP: tl.constexpr, PER_CHANNEL: tl.constexpr, STAGES: tl.constexpr,
             UNROLL: tl.constexpr):
    """The window ``0..c`` folded into an fp32 ``[BV, K]`` tile in the chunked form:
    ``U^T = (beta * (V^T - S_c Kg^T)) A^T``, ``S = S_c Diag(e^{G_c}) + U^T Kd`` (launch 1 wrote the
    token's ``k, beta, g`` at ``c`` and the inverse ``A`` at ``p_a``); ``G`` the running log-decay."""
    R = tl.zeros([BV, BC], dtype=tl.float32)
    if PER_CHANNEL:
        G = tl.zeros([K], dtype=tl.float32)
    else:
        G = tl.sum(tl.zeros([2], dtype=tl.float32))
    if UNROLL:
        for j in tl.static_range(CAP):
            R, G = _wy_column(S, R, G, j, c, b_v, p_rk, p_rv, p_rg, p_rb, o_k, o_v, o_c, K, V, PER_CHANNEL)
    else:
        for j in tl.range(0, c + 1, num_stages=STAGES):
            R, G = _wy_column(S, R, G, j, c, b_v, p_rk, p_rv, p_rg, p_rb, o_k, o_v, o_c, K, V, PER_CHANNEL)
    G_end = G
    if PER_CHANNEL:
        S = S * tl.exp(G_end)[None, :]
        G = tl.zeros([K], dtype=tl.float32)
    else:
        S = S * tl.exp(G_end)
        G = tl.sum(tl.zeros([2], dtype=tl.float32))
    if UNROLL:
        for i in tl.static_range(CAP):
            S, G = _wy_update(S, R, G, G_end, i, c, p_rk, p_rg, p_a, o_k, o_c, K, BC, PER_CHANNEL)
    else:
        for i in tl.range(0, c + 1, num_stages=STAGES):
            S, G = _wy_update(S, R, G, G_end, i, c, p_rk, p_rg, p_a, o_k, o_c, K, BC, PER_CHANNEL)
    return S


@triton.jit
def _tile_refold(S, c, b_v, b_beta, p_rk, p_rv, p_rg, p_rb, o_k, o_v, K: tl.constexpr, V: tl.constexpr,
                 PER_CHANNEL: tl.constexpr, STAGES: tl.constexpr, PREFETCH: tl.constexpr):
    """The window ``0..c`` from the raw ring (launch 1 wrote the token's ``k, beta, g`` at ``c``)
    as ``c + 1`` exact updates of an fp32 tile; the token's ``v`` is ``b_v``. ``PREFETCH``
    (``refold_prefetch``): entry ``j + 1``'s ``k, v, g, beta`` are loaded before entry ``j``'s
    update."""
    if PREFETCH:
        b_k, b_vj, b_g, b_bj = _ring_entry(0, p_rk, p_rv, p_rg, p_rb, o_k, o_v, K, V, PER_CHANNEL)
        for j in range(0, c):
            # j + 1 <= c < CAP: the last prefetch is the token's entry (its stale v unused).
            n_k, n_v, n_g, n_b = _ring_entry(j + 1, p_rk, p_rv, p_rg, p_rb, o_k, o_v, K, V, PER_CHANNEL)
            S = _delta_update(S, b_k.to(tl.float32), b_vj.to(tl.float32), b_g, b_bj, PER_CHANNEL)
            b_k, b_vj, b_g, b_bj = n_k, n_v, n_g, n_b
    else:
        S = _tile_refold_raw(S, c, p_rk, p_rv, p_rg, p_rb, o_k, o_v, K, V, PER_CHANNEL, STAGES)
        b_k, _, b_g, _ = _ring_entry(c, p_rk, p_rv, p_rg, p_rb, o_k, o_v, K, V, PER_CHANNEL)
    return _delta_update(S, b_k.to(tl.float32), b_v, b_g, b_beta, PER_CHANNEL)


@triton.jit
def _tile_read(S, U, c, b_v, b_beta, p_w, p_q, p_rk, o_k, o_c, K: tl.constexpr, BC: tl.constexpr,
               RAW_QK: tl.constexpr, RING: tl.constexpr = True):
    """``(u_t, o_t)`` of one tile from the checkpoint tile ``S`` and the ring's ``u`` tile ``U``
    ``[BC, BV]`` (zero from ``c`` on): ``P x = S_c (e^{D_t} x) + sum_j u_j coef_j``. ``RING=False``:
    an empty ring (``c = 0``; ``U`` unused), the ring terms skipped."""
    kq = tl.load(p_w + 2 * K + 2 * BC + 1)
    if RAW_QK:
        # The key head's raw q and the ring's k at c (16-bit, shared by its value heads); the
        # normalisation and e^{D_t} are scalars of the line, applied after the reductions.
        q_fac = tl.load(p_w + 2 * K + 2 * BC + 2)
        e_t = tl.load(p_w + 2 * K + 2 * BC + 3)
        Sq = tl.sum(S * tl.load(p_q + o_k).to(tl.float32)[None, :], axis=1) * q_fac
        Sk = tl.sum(S * tl.load(p_rk + c * K + o_k).to(tl.float32)[None, :], axis=1) * e_t
    else:
        Sq = tl.sum(S * tl.load(p_w + o_k)[None, :], axis=1)
        Sk = tl.sum(S * tl.load(p_w + K + o_k)[None, :], axis=1)
    return _ring_terms(Sq, Sk, kq, U, b_v, b_beta, p_w, o_c, K, BC, RING)


@triton.jit
def _tile_read_chunks(p_s, U, c, b_v, b_beta, p_w, p_q, p_rk, o_c, K: tl.constexpr, BC: tl.constexpr,
                      BV: tl.constexpr, KC: tl.constexpr, STAGES: tl.constexpr, RAW_QK: tl.constexpr):
    """:func:`_tile_read` with the checkpoint tile read from ``p_s`` (``[BV]`` row pointers) in
    ``KC``-column chunks through a ``STAGES``-deep software pipeline rather than whole, the
    products with ``q`` and ``k`` summed in-thread per chunk (``ops/_chunk_sums.py``; the
    one-launch step's chunk loop, ``decode_fused.py``).
    The same terms in another fp32 order."""
    kq = tl.load(p_w + 2 * K + 2 * BC + 1)
    o_kc = tl.arange(0, KC)
    P_q = tl.zeros([BV, KC // 4], dtype=tl.float32)
    P_k = tl.zeros([BV, KC // 4], dtype=tl.float32)
    for j in tl.range(0, K // KC, num_stages=STAGES):
        cols = j * KC + o_kc
        Sj = tl.load(p_s + cols[None, :]).to(tl.float32)
        if RAW_QK:
            qj = tl.load(p_q + cols).to(tl.float32)
            kj = tl.load(p_rk + c * K + cols).to(tl.float32)
        else:
            qj = tl.load(p_w + cols)
            kj = tl.load(p_w + K + cols)
        P_q += chunk_partials(Sj, qj, BV, KC)
        P_k += chunk_partials(Sj, kj, BV, KC)
    Sq = tl.sum(P_q, axis=1)
    Sk = tl.sum(P_k, axis=1)
    if RAW_QK:
        Sq = Sq * tl.load(p_w + 2 * K + 2 * BC + 2)
        Sk = Sk * tl.load(p_w + 2 * K + 2 * BC + 3)
    return _ring_terms(Sq, Sk, kq, U, b_v, b_beta, p_w, o_c, K, BC, True)


@triton.jit
def _ring_terms(Sq, Sk, kq, U, b_v, b_beta, p_w, o_c, K: tl.constexpr, BC: tl.constexpr, RING: tl.constexpr):
    """``(u_t, o_t)`` from a tile's row sums ``S (e^{D_t} q)`` and ``S (e^{D_t} k)``, the ring's
    ``u`` tile and the coefficient line at ``p_w`` (``kq``: its ``k_t . q_t`` term)."""
    if RING:
        b_a = tl.load(p_w + 2 * K + o_c)
        b_bk = tl.load(p_w + 2 * K + BC + o_c)
        b_u = b_beta * (b_v - Sk - tl.sum(b_bk[:, None] * U, axis=0))
        return b_u, Sq + tl.sum(b_a[:, None] * U, axis=0) + b_u * kq
    b_u = b_beta * (b_v - Sk)
    return b_u, Sq + b_u * kq


@triton.jit
def _tile_fold_u(S, b_u, c, p_rk, p_ru, p_rg, o_k, o_v, K: tl.constexpr, V: tl.constexpr,
                 PER_CHANNEL: tl.constexpr, STAGES: tl.constexpr):
    """Fold the cached u's as they are, ``S = S Diag(e^{g_j}) + u_j k_j^T`` in order, then ``u_t``."""
    for j in tl.range(0, c + 1, num_stages=STAGES):
        if PER_CHANNEL:
            S = S * tl.exp(tl.load(p_rg + j * K + o_k))[None, :]
        else:
            S = S * tl.exp(tl.load(p_rg + j))
        # Position c of ring_u is stale: the current u_t comes from registers.
        b_uj = tl.where(j == c, b_u, tl.load(p_ru + j * V + o_v))
        S += b_uj[:, None] * tl.load(p_rk + j * K + o_k).to(tl.float32)[None, :]
    return S


@triton.jit
def _decays_to_end(gr):
    """``(w, decay)`` of a window's scalar log-decays ``gr`` ``[BC]`` (zero past its end):
    ``w_j = e^{G_c - G_j}`` with ``G`` the inclusive cumulative sum, ``decay = e^{G_c}``."""
    G_c = tl.sum(gr, axis=0)
    return tl.exp(G_c - tl.cumsum(gr, axis=0)), tl.exp(G_c)


@triton.jit
def _fold_keys(c, p_rk, p_rg, o_k, o_c, K: tl.constexpr, CAP: tl.constexpr, PER_CHANNEL: tl.constexpr,
               PRESPLIT: tl.constexpr, FOLD_FIRST: tl.constexpr = False, p_k0=None, p_g0=None):
    """The key side of ``_tile_fold_u_dot``, shared by every tile of a value head (``G`` the
    inclusive cumulative log-decay, all exponents <= 0; whole ring tiles zeroed past ``c`` in
    registers, NaN-safe, so that no load waits for the cursor). Returns ``(B, B_lo, w, decay)``:

    - per-channel decay (KDA): ``B = Kd`` ``[BC, K]`` with ``Kd_j = e^{G_c - G_j} k_j``,
      ``decay = e^{G_c}`` ``[K]``; ``PRESPLIT``: ``(B, B_lo)`` its TF32 split (``ops/_tf32.py``),
      made once for the tiles that reuse it;
    - scalar decay (Gated DeltaNet): ``B`` the raw keys ``[BC, K]`` (fp32), ``w = e^{G_c - G_j}``
      ``[BC]``, ``decay = e^{G_c}``.
    Unused outputs repeat ``B`` / ``w``.

    ``FOLD_FIRST``: the window is entries ``0..c-1`` (the token is not in it), and entry 0's key
    and log-decay come from ``p_k0`` / ``p_g0`` (the ring launch wrote the token over them)."""
    if FOLD_FIRST:
        live = o_c < c
    else:
        live = o_c <= c
    kr = tl.load(p_rk + o_c[:, None] * K + o_k[None, :], mask=(o_c < CAP)[:, None], other=0.0)
    kr = tl.where(live[:, None], kr.to(tl.float32), 0.0)
    if FOLD_FIRST:
        kr = tl.where((o_c == 0)[:, None] & live[:, None], tl.load(p_k0 + o_k)[None, :], kr)
    if PER_CHANNEL:
        gr = tl.load(p_rg + o_c[:, None] * K + o_k[None, :], mask=(o_c < CAP)[:, None], other=0.0)
        gr = tl.where(live[:, None], gr, 0.0)
        if FOLD_FIRST:
            gr = tl.where((o_c == 0)[:, None] & live[:, None], tl.load(p_g0 + o_k)[None, :], gr)
        G_c = tl.sum(gr, axis=0)
        B = kr * tl.exp(G_c[None, :] - tl.cumsum(gr, axis=0))
        decay = tl.exp(G_c)
        w = live.to(tl.float32)
    else:
        gr = tl.where(live, tl.load(p_rg + o_c, mask=o_c < CAP, other=0.0), 0.0)
        if FOLD_FIRST:
            gr = tl.where((o_c == 0) & live, tl.load(p_g0), gr)
        w, decay = _decays_to_end(gr)
        B = kr
    B_lo = B
    if PRESPLIT:
        B, B_lo = tf32_split(B)
    return B, B_lo, w, decay


@triton.jit
def _tile_fold_u_dot(S, U, b_u, c, B, B_lo, w, decay, o_c, ring_k, PER_CHANNEL: tl.constexpr,
                     PRECISION: tl.constexpr, PRESPLIT: tl.constexpr):
    """``_tile_fold_u`` as one product: ``S Diag(e^{G_c}) + U^T Kd`` with ``(B, B_lo, w, decay)``
    from :func:`_fold_keys` and ``U`` ``[BC, BV]`` the cached ``u`` (zero from ``c`` on; ``u_t``
    goes in at ``c``), tf32x3 (fp32-level products on tensor cores). ``BC`` >= 16 and ``BV`` >=
    16 (``tl.dot``). ``PRESPLIT`` (per-channel): tf32x3 by hand from ``Kd``'s split made once per
    head. ``PRECISION`` "tf32x2" / "bf16x3" with a scalar decay and a 16-bit ring (``ring_k``:
    only its dtype is used): the decay moves onto ``U`` (``(U^T Diag(w)) K``), the raw keys are
    exact in TF32 (bf16 for a bf16 ring) and the product takes two TF32 (three bf16) passes
    (``ops/_tf32.py``); "tf32x3" otherwise."""
    Ut = tl.where((o_c == c)[None, :], b_u[:, None], tl.trans(U))
    if PER_CHANNEL:
        S = S * decay[None, :]
        if PRESPLIT:
            S = dot_tf32x3_split_b(Ut, B, B_lo, S)
        else:
            S = tl.dot(Ut, B, acc=S, input_precision="tf32x3")
    else:
        S = S * decay
        if PRECISION != "tf32x3" and ring_k.dtype.element_ty != tl.float32:
            S = fp32_dot(Ut * w[None, :], B, S, ring_k, PRECISION)
        else:
            S = tl.dot(Ut, B * w[:, None], acc=S, input_precision="tf32x3")
    return S


@triton.jit
def _tile_fold_u_reread(p_s, U, b_u, c, p_rk, p_rg, o_c, K: tl.constexpr, KC: tl.constexpr, CAP: tl.constexpr,
                        ring_k, PRECISION: tl.constexpr):
    """``_tile_fold_u_dot`` for a scalar decay with the tile read again from ``p_s`` (``[BV, 1]``
    row pointers) in ``KC``-column chunks and stored chunk by chunk: the tile was read for
    ``u_t`` just before (L2 hits), and no registers hold it across that reduction. The keys
    come from the ring (the ring launch wrote the token's at ``c``); ``U`` ``[BC, BV]`` zero
    from ``c`` on."""
    live = o_c <= c
    w, decay = _decays_to_end(tl.where(live, tl.load(p_rg + o_c, mask=o_c < CAP, other=0.0), 0.0))
    Ut = tl.where((o_c == c)[None, :], b_u[:, None], tl.trans(U)) * w[None, :]
    o_kc = tl.arange(0, KC)
    for j in tl.static_range(K // KC):
        cols = j * KC + o_kc
        B = tl.load(p_rk + o_c[:, None] * K + cols[None, :], mask=live[:, None], other=0.0).to(tl.float32)
        # fp32_dot: PRECISION's passes for a 16-bit ring, tf32x3 for an fp32 one
        S = fp32_dot(Ut, B, tl.load(p_s + cols[None, :]) * decay, ring_k, PRECISION)
        tl.store(p_s + cols[None, :], S)
