"""The two-launch ReplaySSM step of delta-rule layers (``variant="staged"`` / :class:`StagedVariant`).

In the one-launch kernels (``decode.py``, ``decode_chunked.py``) every program that streams
checkpoint rows first does the ring work of its head: normalise ``q, k``, take the gates, load
the ring's ``k [J, d_k]`` and decays, form the decayed ring-key dot products. That work is small
in bytes but long in dependent latency, and while a program does it none of its checkpoint bytes
are in flight: the non-flush step stayed at 69% of copy bandwidth on an H200 (KDA 58%) while the
standard kernel, whose programs only load a tile, update it and store it, reaches ~100%.

Here the ring work is a launch of its own and the checkpoint stream is as plain as the standard
kernel's:

1. ``_ring_kernel``, one program per (batch row, key head), covering the key head's value heads
   (``ring_split``: that many programs per key head, each covering a share of its value heads):
   reads the row's slot and cursors, computes the token's normalised ``q, k`` and gates as
   ``decode._load_token`` does, reads the ring's ``k`` (once per key head) and ``g`` (entries
   ``j < c``), and writes per (row, value head) one fp32 line of scratch. Non-flush rows (and
   flush rows folding the cached ``u``): ``e^{D_t} * q``, ``e^{D_t} * k`` ``[d_k]`` each, the ring
   coefficients ``a_j = (k_j * e^{D_t - D_j}) . q`` and ``b_j = (k_j * e^{D_t - D_j}) . k``
   ``[CAP]`` (zero from ``c`` on), ``beta_t`` and ``k . q``. Refolding flush rows: ``q`` and
   ``beta_t``. Per row it writes ``c`` and the flush flag (int32 scratch). It appends the
   token's ``k`` (key head), ``beta`` and ``g`` at ring position ``c``, flush rows included, so
   that the refold reads the whole window ``0..c`` from the ring.
2. ``_stream_kernel``, one program per (row, value head, ``BV``-row tile of ``d_v``), as the
   standard kernel: the checkpoint tile is the first load after the slot; ``c`` and the flush
   flag come from the scratch. Non-flush:

       P q = S_c (e^{D_t} q) + sum_j u_j a_j,    P k = S_c (e^{D_t} k) + sum_j u_j b_j
       u_t = beta_t (v_t - P k),                 o_t = P q + u_t (k . q)

   then ``u_t`` and the tile's ``v_t`` are appended at ring position ``c``. Flush (uniform per
   program): the window is refolded into the fp32 tile from the raw ring ``k, v, beta, g``
   (math.md section 4; ``fold="u"`` folds the cached ``u`` instead, for comparison), stored,
   and ``o_t = S q``. The first program of each live row moves the row's cursors: no program of
   this launch reads ``committed``, and launch 1, which does, has finished.

``flush_launch`` (as the Mamba-2 staged step): the fold's registers cost the stream programs
occupancy on every step, so the flush rows can go to a third launch, ``_flush_kernel``, whose
programs of non-flush rows exit after two loads; in the stream launch a flush row's programs
move its cursors and exit (the flag is read by row, next to the slot, so the checkpoint load
waits for nothing more), and it compiles without a fold (sm_90, Qwen3.5-4B dims: 96 -> 72
registers at BV=32 / 4 warps). ``raw_qk`` (Gated DeltaNet): the stream tile reads the raw
16-bit ``q`` and the ring's ``k`` at ``c`` of its key head, and the scalars ``e^{D_t}`` and
``e^{D_t} scale / ||q||`` from the coefficient line, instead of two fp32 ``[d_k]`` vectors
written per value head.

``fold_first`` (``StagedVariant``): a flush row's flush launch folds the ring's ``c`` entries
without the token, stores the tile, and gives the token its output and ``u`` from the folded tile
as entry 0 of the next window; the ring launch writes the token's ``k``, ``beta``, ``g`` at
position 0 (after copying entry 0's key and decay into the scratch line) and computes its
coefficient line as at ``c = 0``; the stream launch leaves ``committed = 1``.

Padded rows (``pad_slot_id``) get a zero output and touch nothing. The scratch is allocated per
call (``torch.empty``: fine under CUDA-graph capture).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._fast_exp import exp_ftz, fast_exp_supported
from .._flush_list import flush_ranks, flush_row, launch_key, list_grid, note_resident
from .._pdl import gdc_launch_dependents, gdc_wait, pdl_supported
from .._side_stream import fork, join
from ._staged_tiles import (_fold_keys, _tile_fold_u, _tile_fold_u_dot, _tile_fold_u_reread, _tile_read,
                            _tile_read_chunks, _tile_refold, _tile_wy)
from ._staged_variant import (StagedLaunch, StagedVariant, flush_config, folds_first, item_tiles, ring_split,
                              scratch_width, staged_config, staged_launch, uses_flush_dot)
from .decode import (_gate_inputs, _gate_of, _load_gate, _normalise_qk, _program_ids, _qk_inputs,
                     _strides)
from .decode_chunked import _coupling, _unit_lower_inverse

__all__ = ["StagedLaunch", "StagedVariant", "delta_replay_staged_step", "flush_config", "folds_first", "item_tiles",
           "ring_split", "scratch_width", "staged_config", "staged_launch", "uses_flush_dot"]


@triton.jit
def _ring_terms_halves(p_rk, p_rg, c, b_q, b_k, b_g, o_k, K: tl.constexpr, BC: tl.constexpr,
                       FAST_EXP: tl.constexpr = False):
    """KDA's ring terms over ``[BC / 2, d_k]`` halves of the ring, the later half only when the
    window reaches it (``c > BC / 2``): fewer registers live at once than the whole ``[BC, d_k]``
    tile (168 on sm_90 at one warp, 12 programs per SM) and no exponentials for empty entries.
    The log-decay from entry ``j`` to the token is a suffix sum, so the later half goes first and
    passes on only its column totals. ``FAST_EXP``: the exponentials as ``ops/_fast_exp.py``'s.
    Returns ``(D_t [d_k], b_a, b_bk per half [BC / 2])``."""
    HALF: tl.constexpr = BC // 2
    o_h = tl.arange(0, HALF)
    if c > HALF:
        m_hi = HALF + o_h < c
        offs = (HALF + o_h)[:, None] * K + o_k[None, :]
        G_hi = tl.load(p_rg + offs, mask=m_hi[:, None], other=0.0)
        s_hi = tl.sum(G_hi, axis=0)
        Kd = tl.load(p_rk + offs, mask=m_hi[:, None], other=0.0).to(tl.float32)
        Kd = Kd * exp_ftz((s_hi + b_g)[None, :] - tl.cumsum(G_hi, axis=0), FAST_EXP)
        a_hi = tl.sum(Kd * b_q[None, :], axis=1)
        bk_hi = tl.sum(Kd * b_k[None, :], axis=1)
    else:
        s_hi = tl.zeros([K], dtype=tl.float32)
        a_hi = tl.zeros([HALF], dtype=tl.float32)
        bk_hi = tl.zeros([HALF], dtype=tl.float32)
    m_lo = o_h < c
    offs = o_h[:, None] * K + o_k[None, :]
    G_lo = tl.load(p_rg + offs, mask=m_lo[:, None], other=0.0)
    D_t = tl.sum(G_lo, axis=0) + s_hi + b_g
    Kd = tl.load(p_rk + offs, mask=m_lo[:, None], other=0.0).to(tl.float32)
    Kd = Kd * exp_ftz(D_t[None, :] - tl.cumsum(G_lo, axis=0), FAST_EXP)
    return D_t, tl.sum(Kd * b_q[None, :], axis=1), a_hi, tl.sum(Kd * b_k[None, :], axis=1), bk_hi


@triton.jit
def _ring_kernel(
    q, k, a, b, A_log, dt_bias, ring_k, ring_beta, ring_g, committed, flush_at, state_indices, pad_slot_id, scale,
    scratch, row_info,
    stride_q, stride_qh, stride_k, stride_kh, stride_a, stride_b,
    HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, CAP: tl.constexpr, BC: tl.constexpr, W: tl.constexpr,
    PER_CHANNEL: tl.constexpr, REFOLD: tl.constexpr, WY: tl.constexpr, RAW_QK: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_INDICES: tl.constexpr, SPLIT: tl.constexpr, RING_PREFETCH: tl.constexpr, PDL: tl.constexpr,
    RING_HALVES: tl.constexpr = False, FOLD_FIRST: tl.constexpr = False, FAST_EXP: tl.constexpr = False,
    TOKEN_FIRST: tl.constexpr = False,
):
    if PDL:
        # The stream launch may be dispatched now; its programs wait for this launch to end.
        gdc_launch_dependents()
    G: tl.constexpr = HV // H
    GP: tl.constexpr = G // SPLIT
    i_s, i_h, i_b = _program_ids(SPLIT, H)
    o_k = tl.arange(0, K)
    o_c = tl.arange(0, BC)
    slot = i_b.to(tl.int64)
    if HAS_INDICES:
        slot = tl.load(state_indices + i_b).to(tl.int64)
    if TOKEN_FIRST:
        # The token's q, k and first gate inputs load beside the slot, and are normalised while
        # the cursor load is in flight: the chain before the ring's loads is slot, cursor.
        raw_q, raw_k = _qk_inputs(q, k, i_b, i_h, o_k, stride_q, stride_qh, stride_k, stride_kh)
        A_raw0, b_a0, b_b0 = _gate_inputs(a, b, A_log, dt_bias, i_b, i_h * G + i_s * GP, o_k, stride_a, stride_b,
                                          K, PER_CHANNEL, HAS_BIAS)
    if slot == pad_slot_id:
        # Every row's flag is written: the list flush launch numbers the flush rows from them.
        if (i_h == 0) & (i_s == 0):
            tl.store(row_info + i_b * 2, 0)
            tl.store(row_info + i_b * 2 + 1, 0)
        return
    c = tl.load(committed + slot)
    flush = c + 1 >= tl.load(flush_at + slot)
    if TOKEN_FIRST:
        b_q, b_k, _ = _normalise_qk(raw_q, raw_k, scale, ring_k.dtype.element_ty)
        b_g0, b_beta0 = _gate_of(A_raw0, b_a0, b_b0)
    # pos: where the token goes, and the ring entries its terms read (those before it). A
    # fold-first flush row starts the next window with the token (the flush launch folds entries
    # 0..c-1 first).
    pos = c
    if FOLD_FIRST:
        pos = tl.where(flush, 0, c)
    fits = pos < CAP
    if (i_h == 0) & (i_s == 0):
        tl.store(row_info + i_b * 2, c)
        tl.store(row_info + i_b * 2 + 1, flush.to(tl.int32))
    m_prev = o_c < pos
    if RING_PREFETCH:
        # Every ring entry, issued with the cursor loads instead of after them; entries from
        # c on are zeroed after the fact.
        m_load = o_c < CAP
    else:
        m_load = m_prev
    p_rk = ring_k + (slot * H + i_h) * CAP * K
    if not RING_HALVES:
        Kr = tl.load(p_rk + o_c[:, None] * K + o_k[None, :], mask=m_load[:, None], other=0.0).to(tl.float32)
        Kr = tl.where(m_prev[:, None], Kr, 0.0)
    # q and k belong to the key head: normalised once, and with a scalar decay their products
    # with the ring's keys are the same for every value head of the program (each scales them
    # by its own decays).
    if not TOKEN_FIRST:
        raw_q, raw_k = _qk_inputs(q, k, i_b, i_h, o_k, stride_q, stride_qh, stride_k, stride_kh)
        b_q, b_k, _ = _normalise_qk(raw_q, raw_k, scale, ring_k.dtype.element_ty)
    if RAW_QK:
        # The stream programs scale the raw q by this (normalisation, softmax scale, e^{D_t}).
        q_norm = scale / tl.sqrt(tl.sum(raw_q * raw_q) + 1e-6)
    b_kq = tl.sum(b_k * b_q)
    if not PER_CHANNEL:
        kr_q = tl.sum(Kr * b_q[None, :], axis=1)
        kr_k = tl.sum(Kr * b_k[None, :], axis=1)
    for gg in tl.static_range(GP):
        i_hv = i_h * G + i_s * GP + gg
        if TOKEN_FIRST and gg == 0:
            b_g, b_beta = b_g0, b_beta0
        else:
            b_g, b_beta = _load_gate(a, b, A_log, dt_bias, i_b, i_hv, o_k, stride_a, stride_b, K, PER_CHANNEL,
                                     HAS_BIAS)
        sh = slot * HV + i_hv
        p_w = scratch + (i_b * HV + i_hv) * W
        if flush & REFOLD:
            tl.store(p_w + o_k, b_q)
            if WY:
                # The window 0..c (the token at c) and its (I + M)^{-1}, row-major after the scalars.
                is_t = o_c == c
                Kw = tl.where(is_t[:, None], b_k[None, :], Kr)
                bw = tl.where(is_t, b_beta, tl.load(ring_beta + sh * CAP + o_c, mask=m_prev, other=0.0))
                if PER_CHANNEL:
                    gr = tl.load(ring_g + (sh * CAP + o_c[:, None]) * K + o_k[None, :], mask=m_prev[:, None],
                                 other=0.0)
                    Gc = tl.cumsum(tl.where(is_t[:, None], b_g[None, :], gr), axis=0)
                else:
                    gr = tl.load(ring_g + sh * CAP + o_c, mask=m_prev, other=0.0)
                    Gc = tl.cumsum(tl.where(is_t, b_g, gr), axis=0)
                A = _unit_lower_inverse(_coupling(Kw, Gc, bw, o_c, c + 1, BC, PER_CHANNEL, "ieee"), o_c, c + 1, BC)
                tl.store(p_w + 2 * K + 2 * BC + 4 + o_c[:, None] * BC + o_c[None, :], A)
        else:
            if PER_CHANNEL and RING_HALVES:
                D_t, b_a_lo, b_a_hi, b_bk_lo, b_bk_hi = _ring_terms_halves(
                    p_rk, ring_g + sh * CAP * K, pos, b_q, b_k, b_g, o_k, K, BC, FAST_EXP)
            elif PER_CHANNEL:
                p_rg = ring_g + sh * CAP * K
                b_G = tl.load(p_rg + o_c[:, None] * K + o_k[None, :], mask=m_load[:, None], other=0.0)
                b_G = tl.where(m_prev[:, None], b_G, 0.0)
                D_t = tl.sum(b_G, axis=0) + b_g
                Kd = Kr * exp_ftz(D_t[None, :] - tl.cumsum(b_G, axis=0), FAST_EXP)
                b_a = tl.sum(Kd * b_q[None, :], axis=1)
                b_bk = tl.sum(Kd * b_k[None, :], axis=1)
            else:
                b_G = tl.where(m_prev, tl.load(ring_g + sh * CAP + o_c, mask=m_load, other=0.0), 0.0)
                D_t = tl.sum(b_G) + b_g
                w = tl.exp(D_t - tl.cumsum(b_G, axis=0))
                b_a = kr_q * w
                b_bk = kr_k * w
            e_t = tl.exp(D_t)
            if RAW_QK:
                tl.store(p_w + 2 * K + 2 * BC + 2, e_t * q_norm)
                tl.store(p_w + 2 * K + 2 * BC + 3, e_t)
            else:
                tl.store(p_w + o_k, e_t * b_q)
                tl.store(p_w + K + o_k, e_t * b_k)
            # Entries from c on are zero (masked loads), so the streaming kernel needs no mask.
            if PER_CHANNEL and RING_HALVES:
                o_h = tl.arange(0, BC // 2)
                tl.store(p_w + 2 * K + o_h, b_a_lo)
                tl.store(p_w + 2 * K + BC // 2 + o_h, b_a_hi)
                tl.store(p_w + 2 * K + BC + o_h, b_bk_lo)
                tl.store(p_w + 2 * K + BC + BC // 2 + o_h, b_bk_hi)
            else:
                tl.store(p_w + 2 * K + o_c, b_a)
                tl.store(p_w + 2 * K + BC + o_c, b_bk)
            tl.store(p_w + 2 * K + 2 * BC + 1, b_kq)
        tl.store(p_w + 2 * K + 2 * BC, b_beta)
        if FOLD_FIRST:
            if flush:
                # The flush launch folds entry 0 after the token has taken its place: keep the
                # entry's decay (and, once per key head, its key) in the scratch line.
                p_first = p_w + 2 * K + 2 * BC + 4
                if PER_CHANNEL:
                    tl.store(p_first + K + o_k, tl.load(ring_g + sh * CAP * K + o_k))
                else:
                    tl.store(p_first + K, tl.load(ring_g + sh * CAP))
                if gg == 0:
                    if i_s == 0:
                        tl.store(p_first + o_k, tl.load(p_rk + o_k).to(tl.float32))
        if fits:
            tl.store(ring_beta + sh * CAP + pos, b_beta)
            if PER_CHANNEL:
                tl.store(ring_g + (sh * CAP + pos) * K + o_k, b_g)
            else:
                tl.store(ring_g + sh * CAP + pos, b_g)
            if gg == 0:
                if i_s == 0:
                    tl.store(p_rk + pos * K + o_k, b_k.to(ring_k.dtype.element_ty))


@triton.jit
def _stream_kernel(
    q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, state_indices, pad_slot_id,
    window, scratch, row_info, stride_q, stride_qh, stride_v, stride_vh, stride_o, stride_oh,
    HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, CAP: tl.constexpr,
    BC: tl.constexpr, W: tl.constexpr, PER_CHANNEL: tl.constexpr, REFOLD: tl.constexpr, WY: tl.constexpr,
    RAW_QK: tl.constexpr, FLUSH_HERE: tl.constexpr, STAGES: tl.constexpr, UNROLL: tl.constexpr,
    HAS_INDICES: tl.constexpr, PDL: tl.constexpr, READ_STAGES: tl.constexpr, KC: tl.constexpr,
    FOLD_FIRST: tl.constexpr = False,
):
    if PDL:
        # Launched as a programmatic dependent of the ring launch: everything below reads what
        # it wrote (scratch, row info, ring entries) or what it reads (the cursors).
        gdc_wait()
    i_v, i_hv, i_b = _program_ids(V // BV, HV)
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, K)
    o_c = tl.arange(0, BC)
    o_v = i_v * BV + tl.arange(0, BV)
    p_o = out + i_b * stride_o + i_hv * stride_oh + o_v
    # Indexed by row, not slot: these loads run alongside the slot's, the checkpoint's waits for
    # no extra latency.
    c = tl.load(row_info + i_b * 2)
    flush = tl.load(row_info + i_b * 2 + 1) != 0
    slot = i_b.to(tl.int64)
    if HAS_INDICES:
        slot = tl.load(state_indices + i_b).to(tl.int64)
    if slot == pad_slot_id:
        tl.store(p_o, tl.zeros([BV], dtype=tl.float32).to(out.dtype.element_ty))
        return
    if flush:
        # With a flush launch, that launch folds this row's tiles; without one, they are folded
        # here as it would. Either way the row's first program moves the cursors.
        if FLUSH_HERE:
            _flush_tile(q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, scratch, i_b, i_hv, slot,
                        c, i_v * BV, stride_q, stride_qh, stride_v, stride_vh, stride_o, stride_oh,
                        HV, H, K, V, BV, CAP, BC, W, PER_CHANNEL, REFOLD, WY, RAW_QK, STAGES, UNROLL, False, "tf32x3")
        if (i_hv == 0) & (i_v == 0):
            # A fold-first flush leaves the token as the next window's entry 0.
            tl.store(committed + slot, 1 if FOLD_FIRST else 0)
            tl.store(flush_at + slot, window)
        return
    sh = slot * HV + i_hv
    if READ_STAGES == 0:
        S = tl.load(checkpoint + sh * V * K + o_v[:, None] * K + o_k[None, :]).to(tl.float32)
    p_w = scratch + (i_b * HV + i_hv) * W
    p_rk = ring_k + (slot * H + i_h) * CAP * K
    p_rv = ring_v + sh * CAP * V
    p_ru = ring_u + sh * CAP * V
    p_q = q + i_b * stride_q + i_h * stride_qh
    b_v = tl.load(v + i_b * stride_v + i_hv * stride_vh + o_v).to(ring_v.dtype.element_ty).to(tl.float32)
    b_beta = tl.load(p_w + 2 * K + 2 * BC)
    # Only the c live entries: c arrives with the slot (both read first), so this mask costs no
    # latency and the ring's stale tail (7% of the state's bytes at 8-row tiles) stays in DRAM.
    U = tl.load(p_ru + o_c[:, None] * V + o_v[None, :], mask=(o_c < c)[:, None], other=0.0)
    if READ_STAGES == 0:
        b_u, b_o = _tile_read(S, U, c, b_v, b_beta, p_w, p_q, p_rk, o_k, o_c, K, BC, RAW_QK)
    else:
        # The ring's loads above are in flight while the chunk loop streams the tile.
        b_u, b_o = _tile_read_chunks(checkpoint + sh * V * K + o_v[:, None] * K, U, c, b_v, b_beta, p_w, p_q, p_rk,
                                     o_c, K, BC, BV, KC, READ_STAGES, RAW_QK)
    tl.store(p_o, b_o.to(out.dtype.element_ty))
    tl.store(p_ru + c * V + o_v, b_u)
    tl.store(p_rv + c * V + o_v, b_v.to(ring_v.dtype.element_ty))
    if (i_hv == 0) & (i_v == 0):
        tl.store(committed + slot, c + 1)


@triton.jit
def _flush_tile(q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, scratch, i_b, i_hv, slot, c, v0,
                stride_q, stride_qh, stride_v, stride_vh, stride_o, stride_oh,
                HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
                CAP: tl.constexpr, BC: tl.constexpr, W: tl.constexpr, PER_CHANNEL: tl.constexpr, REFOLD: tl.constexpr,
                WY: tl.constexpr, RAW_QK: tl.constexpr, STAGES: tl.constexpr, UNROLL: tl.constexpr,
                DOT: tl.constexpr, FOLD_PRECISION: tl.constexpr, TILES: tl.constexpr = 1,
                PREFETCH: tl.constexpr = 0, FOLD_FIRST: tl.constexpr = False, REREAD: tl.constexpr = 0):
    """Rows ``v0 .. v0 + TILES * BV`` of value head ``i_hv`` of flush row ``i_b``, in ``TILES``
    tiles of ``BV`` rows: fold, store, output. With ``DOT`` the fold's key side (``_fold_keys``)
    is formed once for the ``TILES`` tiles. ``PREFETCH``: how a refold loads its ring entries
    ahead (``refold_prefetch``). ``FOLD_FIRST`` (with ``DOT``): fold entries ``0..c-1``, store,
    then the token as the next window's entry 0 (``u_t`` into ring position 0). ``REREAD`` (with
    ``DOT``, a scalar decay, not ``FOLD_FIRST``): the fold reads the tile again in ``REREAD``-column
    chunks after ``u_t`` (``_tile_fold_u_reread``) instead of holding it."""
    o_k = tl.arange(0, K)
    o_c = tl.arange(0, BC)
    i_h = i_hv // (HV // H)
    sh = slot * HV + i_hv
    p_w = scratch + (i_b * HV + i_hv) * W
    p_rk = ring_k + (slot * H + i_h) * CAP * K
    p_rv = ring_v + sh * CAP * V
    p_ru = ring_u + sh * CAP * V
    p_rg = ring_g + sh * CAP * (K if PER_CHANNEL else 1)
    b_beta = tl.load(p_w + 2 * K + 2 * BC)
    PRESPLIT: tl.constexpr = PER_CHANNEL and TILES > 1
    if DOT and REREAD == 0:
        # Fold-first: entry 0's key (saved in the key head's first value head's line) and decay.
        p_first = scratch + (i_b * HV + i_h * (HV // H)) * W + 2 * K + 2 * BC + 4
        B, B_lo, w, decay = _fold_keys(c, p_rk, p_rg, o_k, o_c, K, CAP, PER_CHANNEL, PRESPLIT, FOLD_FIRST,
                                       p_first, p_w + 2 * K + 2 * BC + 4 + K)
    # A runtime loop: unrolled, the tiles' shared-memory buffers add up (KDA, four 32-row tiles:
    # 50.5 KB per program, past the 48 KB that keeps the stream launch beside it at full speed).
    for t in range(TILES):
        o_v = v0 + t * BV + tl.arange(0, BV)
        p_s = checkpoint + sh * V * K + o_v[:, None] * K + o_k[None, :]
        S = tl.load(p_s).to(tl.float32)
        b_v = tl.load(v + i_b * stride_v + i_hv * stride_vh + o_v).to(ring_v.dtype.element_ty).to(tl.float32)
        if WY:
            S = _tile_wy(S, c, b_v, p_rk, p_rv, p_rg, ring_beta + sh * CAP, p_w + 2 * K + 2 * BC + 4, o_k,
                         o_v, o_c, K, V, BV, BC, CAP, PER_CHANNEL, STAGES, UNROLL)
            b_o = tl.sum(S * tl.load(p_w + o_k)[None, :], axis=1)
        elif REFOLD:
            S = _tile_refold(S, c, b_v, b_beta, p_rk, p_rv, p_rg, ring_beta + sh * CAP, o_k, o_v, K, V,
                             PER_CHANNEL, STAGES, PREFETCH)
            b_o = tl.sum(S * tl.load(p_w + o_k)[None, :], axis=1)
        else:
            # Only the c live entries (c is read with the slot, so the mask costs no latency).
            U = tl.load(p_ru + o_c[:, None] * V + o_v[None, :], mask=(o_c < c)[:, None], other=0.0)
            if FOLD_FIRST:
                # The window's c entries alone (no column is the token's), stored; then the token
                # reads the new checkpoint as a non-flush step at c = 0 (an empty ring: its terms
                # skipped) and becomes entry 0.
                S = _tile_fold_u_dot(S, U, b_v, -1, B, B_lo, w, decay, o_c, ring_k, PER_CHANNEL, FOLD_PRECISION,
                                     PRESPLIT)
                tl.store(p_s, S.to(checkpoint.dtype.element_ty))
                b_u, b_o = _tile_read(S, U, 0, b_v, b_beta, p_w, q + i_b * stride_q + i_h * stride_qh, p_rk,
                                      o_k, o_c, K, BC, RAW_QK, False)
                tl.store(p_ru + o_v, b_u)
                tl.store(p_rv + o_v, b_v.to(ring_v.dtype.element_ty))
            else:
                b_u, b_o = _tile_read(S, U, c, b_v, b_beta, p_w, q + i_b * stride_q + i_h * stride_qh, p_rk,
                                      o_k, o_c, K, BC, RAW_QK)
                if DOT and REREAD > 0:
                    _tile_fold_u_reread(checkpoint + sh * V * K + o_v[:, None] * K, U, b_u, c, p_rk, p_rg, o_c,
                                        K, REREAD, CAP, ring_k, FOLD_PRECISION)
                elif DOT:
                    S = _tile_fold_u_dot(S, U, b_u, c, B, B_lo, w, decay, o_c, ring_k, PER_CHANNEL, FOLD_PRECISION,
                                         PRESPLIT)
                else:
                    S = _tile_fold_u(S, b_u, c, p_rk, p_ru, p_rg, o_k, o_v, K, V, PER_CHANNEL, STAGES)
        if not FOLD_FIRST and not (DOT and REREAD > 0 and not REFOLD and not WY):
            tl.store(p_s, S.to(checkpoint.dtype.element_ty))
        tl.store(out + i_b * stride_o + i_hv * stride_oh + o_v, b_o.to(out.dtype.element_ty))


@triton.jit
def _flush_kernel(
    q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, state_indices, pad_slot_id, scratch, row_info,
    stride_q, stride_qh, stride_v, stride_vh, stride_o, stride_oh,
    HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, CAP: tl.constexpr,
    BC: tl.constexpr, W: tl.constexpr, HEADS_PER_PROGRAM: tl.constexpr, SPLIT: tl.constexpr, PER_CHANNEL: tl.constexpr,
    REFOLD: tl.constexpr, WY: tl.constexpr, RAW_QK: tl.constexpr, STAGES: tl.constexpr, UNROLL: tl.constexpr,
    HAS_INDICES: tl.constexpr, DOT: tl.constexpr, FOLD_PRECISION: tl.constexpr, PREFETCH: tl.constexpr = 0,
    FOLD_FIRST: tl.constexpr = False, REREAD: tl.constexpr = 0,
):
    """The flush rows of a ``flush_launch`` step: ``V / SPLIT`` rows of ``HEADS_PER_PROGRAM``
    value heads of one row per program, in ``BV``-row tiles; programs of other rows exit after
    two loads (the stream launch moved every row's cursors, so none are read here)."""
    CHUNKS: tl.constexpr = HV // HEADS_PER_PROGRAM
    ROWS: tl.constexpr = V // SPLIT
    i_s, i_chunk, i_b = _program_ids(SPLIT, CHUNKS)
    hv0 = i_chunk * HEADS_PER_PROGRAM
    flag = tl.load(row_info + i_b * 2 + 1)
    slot = i_b.to(tl.int64)
    if HAS_INDICES:
        slot = tl.load(state_indices + i_b).to(tl.int64)
    if (slot != pad_slot_id) & (flag != 0):
        c = tl.load(row_info + i_b * 2)
        for hh in range(HEADS_PER_PROGRAM):
            for v0 in range(i_s * ROWS, (i_s + 1) * ROWS, BV):
                _flush_tile(q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, scratch, i_b, hv0 + hh,
                            slot, c, v0, stride_q, stride_qh, stride_v, stride_vh, stride_o, stride_oh,
                            HV, H, K, V, BV, CAP, BC, W, PER_CHANNEL, REFOLD, WY, RAW_QK, STAGES, UNROLL, DOT, FOLD_PRECISION,
                            1, PREFETCH, FOLD_FIRST, REREAD)


@triton.jit
def _flush_list_kernel(
    q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, state_indices, scratch, row_info, batch,
    stride_q, stride_qh, stride_v, stride_vh, stride_o, stride_oh,
    HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, CAP: tl.constexpr,
    BC: tl.constexpr, W: tl.constexpr, PER_CHANNEL: tl.constexpr, REFOLD: tl.constexpr, WY: tl.constexpr,
    RAW_QK: tl.constexpr, STAGES: tl.constexpr, UNROLL: tl.constexpr, HAS_INDICES: tl.constexpr, DOT: tl.constexpr,
    FOLD_PRECISION: tl.constexpr, BLOCK_B: tl.constexpr, TILES: tl.constexpr, PREFETCH: tl.constexpr = 0,
    FOLD_FIRST: tl.constexpr = False, REREAD: tl.constexpr = 0,
):
    """The flush rows' ``[BV, d_k]`` tiles as a list walked by a fixed wave of programs
    (``flush_persistent`` per SM): each program numbers the flush rows by a prefix sum of the
    ring launch's flags (padded rows have flag 0), item ``i`` is tile ``i % (HV * V / BV)`` of
    the ``i // (HV * V / BV)``-th flush row. Non-flush steps cost one wave of programs that find
    no item, instead of ``batch x heads`` early exits. ``TILES``: an item is that many
    consecutive tiles of one value head (the fold's key side formed once for them)."""
    NVB: tl.constexpr = V // (BV * TILES)
    PER_ROW: tl.constexpr = HV * NVB
    ranks, n_flush = flush_ranks(row_info, batch, BLOCK_B)
    for i in range(tl.program_id(0), n_flush * PER_ROW, tl.num_programs(0)):
        i_b = flush_row(ranks, i // PER_ROW)
        slot = i_b.to(tl.int64)
        if HAS_INDICES:
            slot = tl.load(state_indices + i_b).to(tl.int64)
        _flush_tile(q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, scratch, i_b,
                    (i % PER_ROW) // NVB, slot, tl.load(row_info + i_b * 2), (i % NVB) * BV * TILES,
                    stride_q, stride_qh, stride_v, stride_vh, stride_o, stride_oh,
                    HV, H, K, V, BV, CAP, BC, W, PER_CHANNEL, REFOLD, WY, RAW_QK, STAGES, UNROLL, DOT, FOLD_PRECISION,
                    TILES, PREFETCH, FOLD_FIRST, REREAD)


def delta_replay_staged_step(checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window,
                             q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold,
                             variant: StagedVariant):
    """Launch one ReplaySSM step as two kernels (three with ``flush_launch``); arguments as
    :func:`trtllm_replayssm.ops.gdn.decode.delta_replay_step` (already checked).
    Returns ``o [batch, HV, d_v]`` in ``v.dtype``."""
    batch, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    out = v.new_empty(v.shape)
    if batch == 0:
        return out
    launch = staged_launch(variant, batch, HV, H, K, V, ring_k.shape[2], per_channel=a.dim() == 3, refold=refold,
                           has_bias=dt_bias is not None, has_indices=state_indices is not None,
                           pdl=variant.pdl and pdl_supported(q.device), window=window)
    scratch = torch.empty(batch * HV * launch.width, dtype=torch.float32, device=q.device)
    row_info = torch.empty(batch * 2, dtype=torch.int32, device=q.device)
    scale = K ** -0.5 if scale is None else scale
    sq, sqh, sk, skh, sv, svh, sa, sb, so, soh = _strides(q, k, v, a, b, out)
    _ring_kernel[(batch * H * launch.ring_programs,)](
        q, k, a, b, A_log, A_log if dt_bias is None else dt_bias, ring_k, ring_beta, ring_g, committed, flush_at,
        state_indices, pad_slot_id, scale, scratch, row_info, sq, sqh, sk, skh, sa, sb,
        **dict(launch.ring, FAST_EXP=launch.ring["FAST_EXP"] and fast_exp_supported(q.device)),
        num_warps=launch.ring_warps, maxnreg=variant.ring_max_registers,
    )

    def flush_rows():
        consts = dict(launch.flush, **launch.common)
        if launch.flush_list:
            items = batch * HV * (V // (launch.flush_block_v * launch.flush_tiles))
            key = launch_key("delta", (q.dtype, ring_k.dtype, checkpoint.dtype), launch.flush_warps,
                             variant.flush_max_registers, consts)
            compiled = _flush_list_kernel[(list_grid(items, variant.flush_persistent, q.device, key),)](
                q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, state_indices, scratch, row_info,
                batch, sq, sqh, sv, svh, so, soh, **consts,
                num_warps=launch.flush_warps, maxnreg=variant.flush_max_registers,
            )
            note_resident(key, compiled, q.device)
        else:
            _flush_kernel[(batch * (HV // launch.flush_heads) * launch.flush_split,)](
                q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, state_indices, pad_slot_id, scratch,
                row_info, sq, sqh, sv, svh, so, soh, **consts,
                num_warps=launch.flush_warps, maxnreg=variant.flush_max_registers,
            )

    # flush_stream: the flush launch first, on a side stream, so that it runs under the stream
    # launch (disjoint rows); joined before returning.
    side = fork(q.device) if variant.flush_launch and variant.flush_stream else None
    if side is not None:
        with torch.cuda.stream(side):
            flush_rows()
    _stream_kernel[(batch * HV * (V // launch.block_v),)](
        q, v, out, checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, state_indices,
        pad_slot_id, window, scratch, row_info, sq, sqh, sv, svh, so, soh,
        **launch.stream, **launch.common, num_warps=launch.warps,
        maxnreg=variant.max_registers, **({"launch_pdl": True} if launch.stream["PDL"] else {}),
    )
    if side is not None:
        join(side, q.device)
    elif variant.flush_launch:
        flush_rows()
    return out
