"""Triton decode kernels of delta-rule layers: Gated DeltaNet, and KDA with ``PER_CHANNEL``.

Two kernels, both one launch for a batch of rows (``state_indices`` picks each row's slot, a row
equal to ``pad_slot_id`` gets a zero output and touches nothing):

* :func:`delta_standard_step`: the plain recurrence, reading and writing ``S`` every token;
  with ``WRITE_THROUGH`` the same kernel is the ReplaySSM write-through step (a flush at every
  token), the default below batch :data:`WRITE_THROUGH_BELOW`.
* :func:`delta_replay_step`: one ReplaySSM token per row; each slot is a non-flush or a flush
  step according to its own ``committed`` / ``flush_at`` (replayssm-math.md section 2).

Tiling: the rows of ``S`` (the ``d_v`` axis) evolve independently under the delta rule. The
standard kernel gives a program ``BV`` rows and the full ``d_k`` axis. The ReplaySSM kernel gives
a program ``d_v / SPLIT`` rows of one (row, value head): it computes the head's ring terms
(decays, ring-key dot products) once and streams the checkpoint in ``BV``-row blocks; on an
H200 this was 1.3-1.5x faster at batch 256 than one ``BV``-row tile per program, which
recomputes the ring terms per tile (benchmarks/NOTES_delta.md). Every program recomputes the
l2-normalisation and the gates of its head from the raw projections.

Non-flush (``c = committed``, ring entries ``0..c-1`` plus the current token ``t``), with
``D_j`` the cumulative log-decay up to entry ``j`` (a scalar for GDN, a ``d_k``-vector for KDA):

    P x  = S_c (e^{D_t} * x) + sum_j u_j ((k_j * e^{D_t - D_j}) . x)     (P = S_{t-1} Diag(e^{g_t}))
    u_t  = beta_t (v_t - P k_t),       o_t = P q_t + u_t (k_t . q_t)

One pass over the ``S_c`` tile gives both ``S_c k`` and ``S_c q``; ``u_t`` is appended to
``ring_u`` for later outputs. Flush: the window is refolded token by token from the fp32
checkpoint and the raw ring (``k, v, beta, g``) in registers, so the cached ``u`` (which a
low-precision read copy would have shaped) never enters the recurrence (math.md section 4).
``REFOLD=False`` instead folds the cached ``u`` (valid when outputs read the fp32 checkpoint
itself); benchmarks/NOTES_delta.md compares the two.

The per-slot cursors are advanced by the last program of a row to finish (an arrival counter
per row, reset to zero by that program), so every program reads the cursors of the step.
The measured launch choices (``launch_config``, ``replay_config``, ``default_variant`` and the
batches where they change) are in ``launch.py`` and re-exported here.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._arrivals import arrival_counters, replay_cursors, write_through_cursors
from .launch import (FUSED_FROM, KDA_READ_STAGES_FROM, REREAD_FROM, WRITE_THROUGH_BELOW, default_variant, launch_config,
                     replay_config, write_through_config)

__all__ = ["FUSED_FROM", "KDA_READ_STAGES_FROM", "REPLAY_VARIANT", "REREAD_FROM", "WRITE_THROUGH_BELOW",
           "default_variant", "delta_standard_step", "delta_replay_step", "launch_config", "replay_config",
           "write_through_config"]

#: The ReplaySSM kernel the ops launch: None for :func:`default_variant`'s measured choice per
#: call (batch, kind, flush kind), "rowwise" for :func:`_replay_step_kernel` (row-wise refold),
#: "chunked" for ``decode_chunked.py`` with its default
#: :class:`~trtllm_replayssm.ops.gdn.decode_chunked.ChunkedVariant`, or such a variant;
#: "staged" (or a :class:`~trtllm_replayssm.ops.gdn.decode_staged.StagedVariant`) for the
#: two-launch step of ``decode_staged.py``; "fused" (or a
#: :class:`~trtllm_replayssm.ops.gdn.decode_fused.FusedVariant`) for the one-launch step of
#: ``decode_fused.py`` (Gated DeltaNet, ``refold=False``).
REPLAY_VARIANT = None


@triton.jit
def _softplus(x):
    # log1p(exp(x)) without overflow; matches torch's softplus threshold of 20.
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))


@triton.jit
def _load_qk(q, k, i_b, i_h, o_k, scale, stride_q, stride_qh, stride_k, stride_kh, RING_K: tl.constexpr):
    """Normalised ``q`` and ``k`` of key head ``i_h`` (``k`` rounded as the ring stores it), and
    ``k``'s norm (a chunk of the raw ``k`` divided by it carries the bits of the whole vector's)."""
    b_q, b_k = _qk_inputs(q, k, i_b, i_h, o_k, stride_q, stride_qh, stride_k, stride_kh)
    return _normalise_qk(b_q, b_k, scale, RING_K)


@triton.jit
def _qk_inputs(q, k, i_b, i_h, o_k, stride_q, stride_qh, stride_k, stride_kh):
    """What :func:`_load_qk` loads: the raw ``q``, ``k`` of key head ``i_h`` in fp32."""
    return (tl.load(q + i_b * stride_q + i_h * stride_qh + o_k).to(tl.float32),
            tl.load(k + i_b * stride_k + i_h * stride_kh + o_k).to(tl.float32))


@triton.jit
def _normalise_qk(b_q, b_k, scale, RING_K: tl.constexpr):
    """:func:`_load_qk` on the raw fp32 ``q``, ``k`` (a kernel that loads them early, before
    the values it waits on, normalises them later)."""
    b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6) * scale
    k_norm = tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
    # The ring keeps k (and v) in the activation dtype; every use goes through that rounding so
    # that a later refold sees exactly the inputs this step used.
    b_k = (b_k / k_norm).to(RING_K).to(tl.float32)
    return b_q, b_k, k_norm


@triton.jit
def _load_gate(a, b, A_log, dt_bias, i_b, i_hv, o_k, stride_a, stride_b, K: tl.constexpr,
               PER_CHANNEL: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Log-decay (``[K]`` per channel, else a scalar) and beta of value head ``i_hv``."""
    A_raw, b_a, b_b = _gate_inputs(a, b, A_log, dt_bias, i_b, i_hv, o_k, stride_a, stride_b, K, PER_CHANNEL, HAS_BIAS)
    return _gate_of(A_raw, b_a, b_b)


@triton.jit
def _gate_inputs(a, b, A_log, dt_bias, i_b, i_hv, o_k, stride_a, stride_b, K: tl.constexpr,
                 PER_CHANNEL: tl.constexpr, HAS_BIAS: tl.constexpr):
    """What :func:`_load_gate` loads: ``(A_log, a + dt_bias, b)`` of value head ``i_hv`` in fp32."""
    A_raw = tl.load(A_log + i_hv).to(tl.float32)
    if PER_CHANNEL:
        b_a = tl.load(a + i_b * stride_a + i_hv * K + o_k).to(tl.float32)
        if HAS_BIAS:
            b_a += tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
    else:
        b_a = tl.load(a + i_b * stride_a + i_hv).to(tl.float32)
        if HAS_BIAS:
            b_a += tl.load(dt_bias + i_hv).to(tl.float32)
    return A_raw, b_a, tl.load(b + i_b * stride_b + i_hv).to(tl.float32)


@triton.jit
def _gate_of(A_raw, b_a, b_b):
    """``(g, beta)`` from :func:`_gate_inputs`."""
    A = tl.exp(A_raw)
    return -A * _softplus(b_a), tl.sigmoid(b_b)


@triton.jit
def _load_token(
    q, k, a, b, A_log, dt_bias, i_b, i_h, i_hv, o_k, scale,
    stride_q, stride_qh, stride_k, stride_kh, stride_a, stride_b,
    RING_K: tl.constexpr, K: tl.constexpr, PER_CHANNEL: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    """Normalised ``q``, ``k`` (rounded as the ring stores it), log-decay and beta of one head."""
    b_q, b_k, _ = _load_qk(q, k, i_b, i_h, o_k, scale, stride_q, stride_qh, stride_k, stride_kh, RING_K)
    b_g, b_beta = _load_gate(a, b, A_log, dt_bias, i_b, i_hv, o_k, stride_a, stride_b, K, PER_CHANNEL, HAS_BIAS)
    return b_q, b_k, b_g, b_beta


@triton.jit
def _append_gate_key(p_rb, p_rg, p_rk, c, b_beta, b_g, b_k, o_k, with_key, K: tl.constexpr,
                     PER_CHANNEL: tl.constexpr):
    """The token's beta and log-decay (``[K]`` per channel, else a scalar) at ring position ``c``
    of one value head, and with ``with_key`` (the key head's first value head) its key, in the
    ring's dtype; ``p_r*`` point at the (slot, head)'s ring entries."""
    tl.store(p_rb + c, b_beta)
    if PER_CHANNEL:
        tl.store(p_rg + c * K + o_k, b_g)
    else:
        tl.store(p_rg + c, b_g)
    if with_key:
        tl.store(p_rk + c * K + o_k, b_k.to(p_rk.dtype.element_ty))


@triton.jit
def _delta_update(S, b_k, b_v, b_g, b_beta, PER_CHANNEL: tl.constexpr):
    """One exact delta-rule step on a ``[BV, K]`` tile: decay, correct, add."""
    if PER_CHANNEL:
        S = S * tl.exp(b_g)[None, :]
    else:
        S = S * tl.exp(b_g)
    b_u = b_beta * (b_v - tl.sum(S * b_k[None, :], axis=1))
    return S + b_u[:, None] * b_k[None, :]


@triton.jit
def _program_ids(INNER: tl.constexpr, MID: tl.constexpr):
    """``(inner, mid, row)`` of this program in a 1-D grid ordered ``[row, MID, INNER]`` (e.g.
    ``INNER`` value-row tiles of ``MID`` value heads of each batch row)."""
    pid = tl.program_id(0)
    return pid % INNER, (pid // INNER) % MID, pid // (INNER * MID)


@triton.jit
def _standard_step_kernel(
    q, k, v, a, b, A_log, dt_bias, out, ssm_state, state_indices, pad_slot_id, scale,
    stride_q, stride_qh, stride_k, stride_kh, stride_v, stride_vh, stride_a, stride_b,
    stride_o, stride_oh,
    ring_k, ring_v, ring_beta, ring_g, committed, flush_at, arrivals, window,
    HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    PER_CHANNEL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_INDICES: tl.constexpr,
    WRITE_THROUGH: tl.constexpr = False, CAP: tl.constexpr = 1,
):
    """One ``[BV, d_k]`` state tile per program: one exact delta-rule step, ``o = S q``.

    ``WRITE_THROUGH`` (``variant="write_through"``): the state is a ReplaySSM checkpoint and the
    step a flush at every token (Mamba-2's write-through step, ``ops/mamba2/decode.py``). At
    ``(committed, flush_at) = (0, window)`` it is the standard step on the checkpoint (with the
    token's ``k`` and ``v`` rounded as the ring would keep them); otherwise the slot's ``c`` ring
    entries are refolded first from the raw ``k, v, beta, g`` (exact updates, as a refolding
    flush) and the programs of the slot count arrivals, the last setting ``(0, window)``."""
    i_v, i_hv, i_b = _program_ids(V // BV, HV)
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    p_o = out + i_b * stride_o + i_hv * stride_oh + o_v
    slot = i_b.to(tl.int64)
    if HAS_INDICES:
        slot = tl.load(state_indices + i_b).to(tl.int64)
    if slot == pad_slot_id:
        tl.store(p_o, tl.zeros([BV], dtype=tl.float32).to(out.dtype.element_ty))
        return
    if WRITE_THROUGH:
        p_s = ssm_state + (slot * HV + i_hv) * V * K + o_v[:, None] * K + o_k[None, :]
        S = tl.load(p_s).to(tl.float32)
        c = tl.load(committed + slot)
        fa = tl.load(flush_at + slot)
        ring_dtype = ring_k.dtype.element_ty
    else:
        ring_dtype = tl.float32
    b_q, b_k, b_g, b_beta = _load_token(
        q, k, a, b, A_log, dt_bias, i_b, i_h, i_hv, o_k, scale,
        stride_q, stride_qh, stride_k, stride_kh, stride_a, stride_b,
        ring_dtype, K, PER_CHANNEL, HAS_BIAS,
    )
    b_v = tl.load(v + i_b * stride_v + i_hv * stride_vh + o_v).to(tl.float32)
    if WRITE_THROUGH:
        b_v = b_v.to(ring_v.dtype.element_ty).to(tl.float32)
        if c > 0:
            # Rare: the slot's ring entries, oldest first (a slot served at larger batches).
            sh = slot * HV + i_hv
            S = _tile_refold_raw(S, c, ring_k + (slot * H + i_h) * CAP * K, ring_v + sh * CAP * V,
                                 ring_g + sh * CAP * (K if PER_CHANNEL else 1), ring_beta + sh * CAP, o_k, o_v,
                                 K, V, PER_CHANNEL)
    else:
        p_s = ssm_state + (slot * HV + i_hv) * V * K + o_v[:, None] * K + o_k[None, :]
        S = tl.load(p_s).to(tl.float32)
    S = _delta_update(S, b_k, b_v, b_g, b_beta, PER_CHANNEL)
    tl.store(p_s, S.to(ssm_state.dtype.element_ty))
    tl.store(p_o, tl.sum(S * b_q[None, :], axis=1).to(out.dtype.element_ty))
    if WRITE_THROUGH:
        write_through_cursors(arrivals, committed, flush_at, slot, c, fa, window, HV * (V // BV))


@triton.jit
def _ring_entry(j, p_rk, p_rv, p_rg, p_rb, o_k, o_v, K: tl.constexpr, V: tl.constexpr, PER_CHANNEL: tl.constexpr):
    """Ring entry ``j``'s ``(k, v, g, beta)``: ``k`` ``[K]`` and ``v`` ``[V]`` as stored, ``g``
    ``[K]`` (per-channel) or a scalar, ``beta`` a scalar."""
    if PER_CHANNEL:
        b_g = tl.load(p_rg + j * K + o_k)
    else:
        b_g = tl.load(p_rg + j)
    return tl.load(p_rk + j * K + o_k), tl.load(p_rv + j * V + o_v), b_g, tl.load(p_rb + j)


@triton.jit
def _tile_refold_raw(S, c, p_rk, p_rv, p_rg, p_rb, o_k, o_v, K: tl.constexpr, V: tl.constexpr,
                     PER_CHANNEL: tl.constexpr, STAGES: tl.constexpr = 1):
    """Ring entries ``0..c-1`` (raw ``k, v, g, beta`` at ``p_r*``) folded into an fp32 ``[BV, K]``
    tile, one exact update each; ``STAGES``: software-pipelining depth of the loop."""
    for j in tl.range(0, c, num_stages=STAGES):
        b_k, b_v, b_g, b_beta = _ring_entry(j, p_rk, p_rv, p_rg, p_rb, o_k, o_v, K, V, PER_CHANNEL)
        S = _delta_update(S, b_k.to(tl.float32), b_v.to(tl.float32), b_g, b_beta, PER_CHANNEL)
    return S


@triton.jit
def _replay_step_kernel(
    q, k, v, a, b, A_log, dt_bias, out,
    checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, arrivals,
    state_indices, pad_slot_id, window, scale,
    stride_q, stride_qh, stride_k, stride_kh, stride_v, stride_vh, stride_a, stride_b,
    stride_o, stride_oh,
    HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    SPLIT: tl.constexpr, CAP: tl.constexpr, BC: tl.constexpr, PER_CHANNEL: tl.constexpr,
    REFOLD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_INDICES: tl.constexpr,
):
    # A program owns V // SPLIT rows of one (row, value head): the ring terms (decays, ring-key
    # dot products) are computed once and the checkpoint rows are streamed in BV-row blocks.
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
    c = tl.load(committed + slot)
    flush = c + 1 >= tl.load(flush_at + slot)
    b_q, b_k, b_g, b_beta = _load_token(
        q, k, a, b, A_log, dt_bias, i_b, i_h, i_hv, o_k, scale,
        stride_q, stride_qh, stride_k, stride_kh, stride_a, stride_b,
        ring_k.dtype.element_ty, K, PER_CHANNEL, HAS_BIAS,
    )
    p_v = v + i_b * stride_v + i_hv * stride_vh
    sh = slot * HV + i_hv
    p_s = checkpoint + sh * V * K + o_k[None, :]
    p_rk = ring_k + (slot * H + i_h) * CAP * K
    p_rv = ring_v + sh * CAP * V
    p_rb = ring_beta + sh * CAP
    p_ru = ring_u + sh * CAP * V
    if PER_CHANNEL:
        p_rg = ring_g + sh * CAP * K
    else:
        p_rg = ring_g + sh * CAP
    if flush & REFOLD:
        # u_j are recomputed in fp32 from the checkpoint and the raw ring, row block by row block.
        for blk in tl.range(0, BLOCKS):
            o_v = v_first + blk * BV + o_bv
            S = tl.load(p_s + o_v[:, None] * K).to(tl.float32)
            for j in tl.range(0, c, num_stages=2):
                b_kj = tl.load(p_rk + j * K + o_k).to(tl.float32)
                b_vj = tl.load(p_rv + j * V + o_v).to(tl.float32)
                if PER_CHANNEL:
                    b_gj = tl.load(p_rg + j * K + o_k)
                else:
                    b_gj = tl.load(p_rg + j)
                S = _delta_update(S, b_kj, b_vj, b_gj, tl.load(p_rb + j), PER_CHANNEL)
            b_v = tl.load(p_v + o_v).to(ring_v.dtype.element_ty).to(tl.float32)
            S = _delta_update(S, b_k, b_v, b_g, b_beta, PER_CHANNEL)
            tl.store(p_s + o_v[:, None] * K, S.to(checkpoint.dtype.element_ty))
            tl.store(p_o + o_v, tl.sum(S * b_q[None, :], axis=1).to(out.dtype.element_ty))
    else:
        m_ck = (o_c[:, None] + o_k[None, :] * 0) < c
        Kr = tl.load(p_rk + o_c[:, None] * K + o_k[None, :], mask=m_ck, other=0.0).to(tl.float32)
        # Cumulative log-decays: D_t through the current token, e^{D_t - D_j} per ring entry.
        if PER_CHANNEL:
            b_G = tl.load(p_rg + o_c[:, None] * K + o_k[None, :], mask=m_ck, other=0.0)
            D_t = tl.sum(b_G, axis=0) + b_g
            Kr = Kr * tl.exp(D_t[None, :] - tl.cumsum(b_G, axis=0))
            e_t = tl.exp(D_t)
            ak = tl.sum(Kr * b_k[None, :], axis=1)
            aq = tl.sum(Kr * b_q[None, :], axis=1)
            x_k = e_t * b_k
            x_q = e_t * b_q
        else:
            b_G = tl.load(p_rg + o_c, mask=o_c < c, other=0.0)
            D_t = tl.sum(b_G) + b_g
            w = tl.exp(D_t - tl.cumsum(b_G, axis=0))
            e_t = tl.exp(D_t)
            ak = tl.sum(Kr * b_k[None, :], axis=1) * w
            aq = tl.sum(Kr * b_q[None, :], axis=1) * w
            x_k = e_t * b_k
            x_q = e_t * b_q
        kq = tl.sum(b_k * b_q)
        for blk in tl.range(0, BLOCKS):
            o_v = v_first + blk * BV + o_bv
            S = tl.load(p_s + o_v[:, None] * K).to(tl.float32)
            U = tl.load(p_ru + o_c[:, None] * V + o_v[None, :], mask=(o_c[:, None] + o_v[None, :] * 0) < c,
                        other=0.0)
            b_v = tl.load(p_v + o_v).to(ring_v.dtype.element_ty).to(tl.float32)
            b_u = b_beta * (b_v - tl.sum(S * x_k[None, :], axis=1) - tl.sum(ak[:, None] * U, axis=0))
            b_o = tl.sum(S * x_q[None, :], axis=1) + tl.sum(aq[:, None] * U, axis=0) + b_u * kq
            tl.store(p_o + o_v, b_o.to(out.dtype.element_ty))
            if flush:
                # REFOLD=False: fold the cached u's as they are, S = e^{g_j} S + u_j k_j^T in order.
                for j in tl.range(0, c, num_stages=2):
                    b_kj = tl.load(p_rk + j * K + o_k).to(tl.float32)
                    b_uj = tl.load(p_ru + j * V + o_v)
                    if PER_CHANNEL:
                        S = S * tl.exp(tl.load(p_rg + j * K + o_k))[None, :]
                    else:
                        S = S * tl.exp(tl.load(p_rg + j))
                    S += b_uj[:, None] * b_kj[None, :]
                if PER_CHANNEL:
                    S = S * tl.exp(b_g)[None, :]
                else:
                    S = S * tl.exp(b_g)
                S += b_u[:, None] * b_k[None, :]
                tl.store(p_s + o_v[:, None] * K, S.to(checkpoint.dtype.element_ty))
            else:
                tl.store(p_ru + c * V + o_v, b_u)
                tl.store(p_rv + c * V + o_v, b_v.to(ring_v.dtype.element_ty))
        if (i_s == 0) & (flush == 0):
            _append_gate_key(p_rb, p_rg, p_rk, c, b_beta, b_g, b_k, o_k, i_hv % G == 0, K, PER_CHANNEL)
    replay_cursors(arrivals, committed, flush_at, i_b, slot, c, flush, window, HV * SPLIT)


_ARRIVALS: dict[torch.device, torch.Tensor] = {}


def _arrivals(count: int, device: torch.device, per: str = "batch") -> torch.Tensor:
    """Zeroed counters (one per row, or per slot with ``per="slots"``) that the kernels leave
    zeroed; grown outside graph capture."""
    return arrival_counters(_ARRIVALS, count, device, lambda: RuntimeError(
        f"delta_replay_step: first call with {per}={count} inside CUDA-graph capture; run one "
        "step outside capture first (warm-up) so the counters exist"))


def _strides(q, k, v, a, b, out):
    return (
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        a.stride(0), b.stride(0), out.stride(0), out.stride(1),
    )


def delta_standard_step(ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale,
                        *, block_v=None, num_warps=None):
    """Launch the standard step (arguments already checked by the public wrapper).

    ``ssm_state``: ``[slots, HV, d_v, d_k]`` updated in place; ``q, k``: ``[batch, H, d_k]``;
    ``v``: ``[batch, HV, d_v]``; ``a``: ``[batch, HV]`` (GDN) or ``[batch, HV, d_k]`` (KDA);
    ``b``: ``[batch, HV]``; ``A_log``: ``[HV]``; ``dt_bias``: ``[HV]`` / ``[HV * d_k]`` or None;
    ``state_indices``: ``[batch]`` int32/int64 or None. Returns ``o [batch, HV, d_v]`` in
    ``v.dtype``.
    """
    return _launch_standard(ssm_state, None, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale,
                            block_v, num_warps)


def _launch_standard(ssm_state, replay, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, block_v,
                     num_warps):
    """``_standard_step_kernel`` over ``ssm_state``; ``replay``: ``None`` (the standard step) or
    the write-through step's ``(ring_k, ring_v, ring_beta, ring_g, committed, flush_at, window)``."""
    batch, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    bv, warps = (launch_config if replay is None else write_through_config)(batch, HV, K, V)
    bv, warps = block_v or bv, num_warps or warps
    grid = (batch * HV * (V // bv),)
    out = torch.empty_like(v)
    if replay is None:
        ring, window, cap = (ssm_state,) * 7, 0, 1  # unused (WRITE_THROUGH=False prunes every use)
    else:
        ring_k, ring_v, ring_beta, ring_g, committed, flush_at, window = replay
        ring = (ring_k, ring_v, ring_beta, ring_g, committed, flush_at, _arrivals(ssm_state.shape[0], q.device, "slots"))
        cap = ring_k.shape[2]
    _standard_step_kernel[grid](
        q, k, v, a, b, A_log, A_log if dt_bias is None else dt_bias, out, ssm_state, state_indices, pad_slot_id,
        K ** -0.5 if scale is None else scale, *_strides(q, k, v, a, b, out), *ring, int(window),
        HV=HV, H=H, K=K, V=V, BV=bv, PER_CHANNEL=a.dim() == 3, HAS_BIAS=dt_bias is not None,
        HAS_INDICES=state_indices is not None, WRITE_THROUGH=replay is not None, CAP=cap, num_warps=warps,
    )
    return out


def delta_replay_step(checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window,
                      q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold,
                      *, block_v=None, split=None, num_warps=None, variant=None):
    """Launch one ReplaySSM step (arguments already checked by the public wrapper).

    The state tensors are the fields of
    :class:`~trtllm_replayssm.ops.gdn.state.DeltaRuleReplayState`, updated in place; the other
    arguments as :func:`delta_standard_step`. ``refold=False`` folds the cached ``u`` at a flush
    instead of recomputing it (equal in exact arithmetic; only right when outputs read the
    recurrence checkpoint itself). ``variant``: ``"chunked"`` or a
    :class:`~trtllm_replayssm.ops.gdn.decode_chunked.ChunkedVariant` runs the chunked kernel,
    ``"staged"`` or a :class:`~trtllm_replayssm.ops.gdn.decode_staged.StagedVariant` the
    two-launch step, ``"fused"`` or a :class:`~trtllm_replayssm.ops.gdn.decode_fused.FusedVariant`
    the one-launch step (Gated DeltaNet with ``refold=False`` only), ``"rowwise"`` this module's,
    ``"write_through"`` a flush at every token on the
    standard step's tiles (the default below :data:`WRITE_THROUGH_BELOW`); default
    :data:`REPLAY_VARIANT`.
    """
    variant = REPLAY_VARIANT if variant is None else variant
    if variant is None and block_v is None and split is None:
        per_channel = ring_g.dim() == 4
        variant = default_variant(q.shape[0], per_channel, refold, v.shape[2], ring_k.shape[2])
    if variant == "write_through":
        return _launch_standard(checkpoint, (ring_k, ring_v, ring_beta, ring_g, committed, flush_at, window), q, k, v,
                                a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, block_v, num_warps)
    if variant is not None and variant != "rowwise":
        from .decode_chunked import ChunkedVariant, delta_replay_chunked_step
        from .decode_fused import FusedVariant, delta_replay_fused_step
        from .decode_staged import StagedVariant, delta_replay_staged_step

        if variant == "staged" or isinstance(variant, StagedVariant):
            return delta_replay_staged_step(
                checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window,
                q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold,
                StagedVariant() if variant == "staged" else variant)
        if variant == "fused" or isinstance(variant, FusedVariant):
            return delta_replay_fused_step(
                checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window,
                q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold,
                FusedVariant() if variant == "fused" else variant)
        if variant == "chunked":
            variant = ChunkedVariant()
        elif not isinstance(variant, ChunkedVariant):
            raise ValueError(f"variant: expected None, 'rowwise', 'chunked', 'staged', 'fused', 'write_through', "
                             f"a ChunkedVariant, a StagedVariant or a FusedVariant, got {variant!r}")
        return delta_replay_chunked_step(
            checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window,
            q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold, variant)
    batch, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    cap = ring_k.shape[2]
    bv, split, warps = replay_config(batch, HV, K, V, block_v, split)
    out = torch.empty_like(v)
    _replay_step_kernel[(batch * HV * split,)](
        q, k, v, a, b, A_log, A_log if dt_bias is None else dt_bias, out,
        checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, _arrivals(batch, q.device),
        state_indices, pad_slot_id, window, K ** -0.5 if scale is None else scale,
        *_strides(q, k, v, a, b, out),
        HV=HV, H=H, K=K, V=V, BV=bv, SPLIT=split, CAP=cap, BC=max(triton.next_power_of_2(cap), 2),
        PER_CHANNEL=a.dim() == 3, REFOLD=refold, HAS_BIAS=dt_bias is not None,
        HAS_INDICES=state_indices is not None, num_warps=num_warps or warps,
    )
    return out
