"""The one-launch ReplaySSM step of Gated DeltaNet for a flush that folds the cached ``u``
(``refold=False``): ``variant="fused"`` / a :class:`FusedVariant` of ``decode.delta_replay_step``,
and with ``FusedVariant(block_v=64, stages=3, flush_stages=0)`` the ops' default for that step from
batch ``decode.FUSED_FROM`` (80) (benchmarks/NOTES_delta.md, sixteenth, eighteenth, twentieth,
twenty-first and twenty-seventh runs).

The staged step (``decode_staged.py``) forms each key head's ring terms in a launch of their own
and streams the checkpoint in a second; that boundary (the ring launch and the gap behind it,
~15 us of the batch-256 non-flush step on an H200) is what this kernel removes, as the paper's
public GDN kernel does. Each program owns ``BV`` rows of one (row, value head) over the whole
``d_k`` axis and forms the ring terms itself (``[CAP, d_k]`` ring keys, L2 hits after the first
program of a key head). With ``c = committed`` and ``D_j`` the cumulative log-decay through
ring entry ``j``:

    P x  = S_c (e^{D_t} x) + sum_{j<c} u_j e^{D_t - D_j} (k_j . x)
    u_t  = beta_t (v_t - P k_t),       o_t = P q_t + u_t (k_t . q_t)

A flush row (``c + 1 >= flush_at``) then folds the window as one product,
``S_c e^{D_t} + W Kf`` with ``W = [u_j e^{D_t - D_j}]_{j<c} | u_t`` ``[BV, BC]`` and ``Kf`` the
ring keys with the token's at ``c``, over ``KC``-column chunks of the tile read again (L2
hits) so that no registers hold it across the reduction ``u_t`` needs; on tensor cores at fp32
level (``W`` split in three bf16 parts against bf16 keys, or two TF32 parts against fp16 keys;
``ops/_tf32.py``), nothing rounded through the activation dtype. The last program
of a row to finish moves the slot's cursors (an arrival counter per row, as
``decode._replay_step_kernel``).

On an H200 (Qwen3.5-4B dims, bf16, batch 256), with its tile held whole (``stages=0``, 32 rows)
its non-flush steps ran 180-186 us against the staged step's 165 us: ptxas spread the tile's loads
over the ring terms' reductions to stay within its registers. Walked in 32-column chunks through a
2-stage pipeline with the ring's loads in flight (``stages=2``, 64 rows) they run 157-160 us, the
amortized step 175-177 us against 182-183 us, but the staggered steps 185-186 us against 182-183:
a flush program runs ~2.7x a non-flush one, and spread one row in ``L`` through the grid the
flush rows' programs cost a staggered step 7-10 us more than the same programs grouped
(NOTES_delta.md, nineteenth run). With the fold in three bf16 passes (twentieth run: flush 431 ->
412 us) it leads the staged step at 256 in staggered steps too (steady state 177.5 against 179.8
us) and from 128 in amortized ones. KDA's per-channel decays (a ``[CAP, d_k]`` exponent tile per program) were slower still and are
not served.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .._arrivals import replay_cursors
from .._chunk_sums import chunk_partials
from .._pdl import gdc_wait, pdl_supported
from .._tf32 import fp32_dot
from .decode_flush_cuda import flush_rows_cuda, flush_rows_torch
from .decode_flush_cuda import unsupported as cuda_flush_unsupported
from .decode import _append_gate_key, _arrivals, _load_gate, _load_qk, _program_ids, _strides

__all__ = ["FLUSH_IMPLS", "FusedVariant", "delta_replay_fused_step", "fused_config", "fused_constexprs"]

_PRECISIONS = ("tf32x2", "bf16x3", "tf32x3", "ieee")
#: Where a flush row is folded: in the fused kernel, or by the CUDA C++ launch that runs beside it.
FLUSH_IMPLS = ("triton", "cuda")


@dataclass(frozen=True)
class FusedVariant:
    """Launch choices of the one-launch step; ``None`` fields take :func:`fused_config`'s.

    ``block_v``: rows of ``S`` per program (>= 16: the fold's product); ``fold_chunk``: columns of
    ``d_k`` per product of a flush (the tile read again in chunks);
    ``num_warps`` / ``max_registers``: the kernel's warps and ptxas ``.maxnreg``;
    ``precision``: the fold's product, "bf16x3" (three bf16 passes of ``W`` split in three bf16
    parts where the keys are bf16; "tf32x2" elsewhere), "tf32x2" (two TF32 passes where the keys
    are 16-bit; tf32x3 elsewhere), "tf32x3" or "ieee" (``ops/_tf32.py``). H200, batch 256 / 512:
    "bf16x3" flush 431.5 -> 412.7 / 828.0 -> 789.6 us, steady staggered 181.0 -> 176.4 / 335.8 ->
    328.5 us against "tf32x2".
    ``stages``: 0 loads the program's ``[BV, d_k]`` tile whole, first; ``n >= 1`` walks it in
    ``fold_chunk``-column chunks as a ``tl.range(num_stages=n)`` loop after the ring's loads are
    issued (so they are in flight during it), Triton's pipeliner keeping the next chunks in
    flight through shared memory rather than registers, and reduces the ring terms after it (the
    flush's re-read takes the same loop). The reductions over ``d_k`` then add chunk by chunk:
    the same terms in another fp32 order.
    The chunk loop sums each chunk's products with ``q_t`` and ``k_t`` four columns at a time
    inside each thread into ``[BV, KC / 4]`` partials and reduces those across lanes once after
    the loop, not once per chunk (H200, batch 256 / 512, two calls: flush 433.5 -> 431.1 /
    837 -> 828 us, staggered steady 184 -> 183 / 342 -> 338.6 us, non-flush 0.6-1.1 us less;
    benchmarks/NOTES_delta.md, twentieth run).
    ``flush_stages``: the flush's re-read loop alone (``None``: as ``stages``); 0 unrolls it with
    plain loads into registers (the paper's kernel loads its chunks so), ``n >= 1`` pipelines it
    through shared memory as ``stages`` does. H200, one call (``block_v=64, stages=2``; None ->
    0 -> 1), batch 128 / 256 / 512: flush 219.9 -> 207.3 -> 209.1 / 412.8 -> 403.0 -> 400.8 /
    790.2 -> 785.6 -> 770.0 us, steady staggered 100.9 -> 98.4 -> 101.4 / 178.0 -> 176.0 ->
    182.1 / 330.9 -> 330.1 -> 342.9 us (1: the rolled loop's non-flush programs take 2-9 us
    more). With 0, the third stage (``stages=3``) that had lost with the rolled re-read gains:
    batch 128 / 256 amortized 95.3 -> 93.1 / 174.8 -> 170.6 us, steady staggered 98.6 -> 97.1 /
    175.9 -> 172.0 us, non-flush 87.8 -> 85.5 / 159.6 -> 155.3 us (sm_90: 255 registers, no
    spills, 16.5 KB of shared memory); ``stages=3, flush_stages=0`` is the ops' default
    (``launch.default_variant``).
    ``flush_impl``: "triton" folds a flush row in this kernel; "cuda" leaves the flush rows to
    the CUDA C++ launch of ``decode_flush_cuda.py``, which runs first and lets this kernel start
    beside it (programmatic dependent launch; this kernel then compiles without its fold), where
    ``decode_flush_cuda.unsupported`` finds nothing against the step (else the Triton fold);
    ``flush_cuda_blocks``: that launch's blocks per SM (its ``__launch_bounds__``),
    ``flush_cuda_passes``: warp instructions of checkpoint rows per warp item (8 rows at ``d_k``
    128), ``flush_cuda_heads``: value heads per block item (``None``: the key head's),
    ``flush_cuda_prefetch``: each warp loads its next item during the current one. H200, one call
    (benchmarks/NOTES_delta.md, twenty-sixth run), Triton -> "cuda" at batch 128 / 256 / 512: flush
    209.8 -> 175.4 / 402.1 -> 335.0 / 781.6 -> 660.1 us (84-85% of copy against 70-72%), amortized
    94.5 -> 93.8 / 171.9 -> 170.4 / 327.4 -> 324.3 us, but non-flush 86.8 -> 88.3 / 156.6 -> 159.4
    / 297.1 -> 301.9 us (the flush launch's blocks hold the SMs while they read the cursors) and
    steady staggered 98.0 -> 98.1 / 171.6 -> 173.9 / 319.5 -> 328.3 us: an option, not the
    default."""

    block_v: int | None = None
    fold_chunk: int | None = None
    num_warps: int | None = None
    max_registers: int | None = None
    precision: str = "bf16x3"
    stages: int = 0
    flush_stages: int | None = None
    flush_impl: str = "triton"
    flush_cuda_blocks: int = 3
    flush_cuda_passes: int = 8
    flush_cuda_heads: int | None = None
    flush_cuda_prefetch: bool = False

    def __post_init__(self):
        for name in ("block_v", "fold_chunk", "num_warps", "max_registers"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"FusedVariant.{name}: expected a positive int or None, got {value!r}")
        if not isinstance(self.stages, int) or self.stages < 0:
            raise ValueError(f"FusedVariant.stages: expected an int >= 0, got {self.stages!r}")
        if self.flush_stages is not None and (not isinstance(self.flush_stages, int) or self.flush_stages < 0):
            raise ValueError(f"FusedVariant.flush_stages: expected an int >= 0 or None, got {self.flush_stages!r}")
        if self.flush_impl not in FLUSH_IMPLS:
            raise ValueError(f"FusedVariant.flush_impl: expected one of {FLUSH_IMPLS}, got {self.flush_impl!r}")
        if not isinstance(self.flush_cuda_blocks, int) or not 1 <= self.flush_cuda_blocks <= 8:
            raise ValueError(f"FusedVariant.flush_cuda_blocks: expected an int in [1, 8], got {self.flush_cuda_blocks!r}")
        if not isinstance(self.flush_cuda_passes, int) or self.flush_cuda_passes not in (1, 2, 4, 8):
            raise ValueError(f"FusedVariant.flush_cuda_passes: expected 1, 2, 4 or 8, got {self.flush_cuda_passes!r}")
        if self.flush_cuda_heads is not None and (not isinstance(self.flush_cuda_heads, int)
                                                  or self.flush_cuda_heads < 1):
            raise ValueError(f"FusedVariant.flush_cuda_heads: expected a positive int or None, got "
                             f"{self.flush_cuda_heads!r}")
        if not isinstance(self.flush_cuda_prefetch, bool):
            raise ValueError(f"FusedVariant.flush_cuda_prefetch: expected a bool, got {self.flush_cuda_prefetch!r}")
        if self.precision not in _PRECISIONS:
            raise ValueError(f"FusedVariant.precision: expected one of {_PRECISIONS}, got {self.precision!r}")


def fused_config(variant: FusedVariant, rows: int, v_heads: int, d_k: int, d_v: int) -> tuple[int, int, int]:
    """``(BV, KC, num_warps)`` of one launch: ``BV`` rows per program (32, or ``d_v`` below it),
    the fold's ``KC`` columns (32, or ``d_k`` below it; 32 measured fastest) and one warp (the
    reductions over ``d_k`` stay inside it)."""
    bv = variant.block_v or min(32, d_v)
    kc = variant.fold_chunk or min(32, d_k)
    if bv < 16 or d_v % bv or bv & (bv - 1):
        raise ValueError(f"FusedVariant.block_v: expected a power of two >= 16 dividing d_v={d_v}, got {bv}")
    if kc < 16 or d_k % kc or kc & (kc - 1):
        raise ValueError(f"FusedVariant.fold_chunk: expected a power of two >= 16 dividing d_k={d_k}, got {kc}")
    return bv, kc, variant.num_warps or 1


def fused_constexprs(variant: FusedVariant, rows: int, v_heads: int, k_heads: int, d_k: int, d_v: int, capacity: int,
                     has_bias: bool, has_indices: bool, flush_elsewhere: bool = False) -> tuple[dict, int]:
    """``(constexprs, num_warps)`` of one ``_fused_step_kernel`` launch (the launcher's and the
    register report's, ``benchmarks/registers_gdn_staged.py``); ``flush_elsewhere``: the flush rows
    go to the CUDA launch."""
    bv, kc, warps = fused_config(variant, rows, v_heads, d_k, d_v)
    consts = dict(HV=v_heads, H=k_heads, K=d_k, V=d_v, BV=bv, KC=kc, CAP=capacity,
                  BC=max(triton.next_power_of_2(capacity), 16), HAS_BIAS=has_bias, HAS_INDICES=has_indices,
                  PRECISION=variant.precision, STAGES=variant.stages,
                  FLUSH_STAGES=variant.stages if variant.flush_stages is None else variant.flush_stages,
                  FLUSH_ELSEWHERE=flush_elsewhere)
    return consts, warps


@triton.jit
def _fold_chunk(p_s, p_k, p_rk, cols, o_c, c, live, k_norm, Wf, e_t, ring_k, K: tl.constexpr, PRECISION: tl.constexpr):
    """Columns ``cols`` of the flush tile: ``S e^{D_t} + Wf Kf`` (the ring keys with the token's
    at ``c``), the tile read again (an L2 hit)."""
    kt = (tl.load(p_k + cols).to(tl.float32) / k_norm).to(ring_k.dtype.element_ty).to(tl.float32)
    Kj = tl.load(p_rk + o_c[:, None] * K + cols[None, :], mask=live[:, None], other=0.0).to(tl.float32)
    Kf = tl.where((o_c == c)[:, None], kt[None, :], Kj)
    tl.store(p_s + cols[None, :], fp32_dot(Wf, Kf, tl.load(p_s + cols[None, :]) * e_t, ring_k, PRECISION))


@triton.jit
def _append_token(ring_u, ring_v, ring_beta, ring_g, p_rk, sh, c, o_v, o_k, b_u, b_v, b_beta, b_g, b_k, first_part,
                  with_key, CAP: tl.constexpr, V: tl.constexpr, K: tl.constexpr):
    """A non-flush row's token at ring position ``c``: the tile's ``u_t`` and ``v_t``; ``beta``,
    ``g`` by the head's first program (``first_part``), ``k`` by its key head's first head's."""
    tl.store(ring_u + sh * CAP * V + c * V + o_v, b_u)
    tl.store(ring_v + sh * CAP * V + c * V + o_v, b_v.to(ring_v.dtype.element_ty))
    if first_part:
        _append_gate_key(ring_beta + sh * CAP, ring_g + sh * CAP, p_rk, c, b_beta, b_g, b_k, o_k, with_key, K, False)


@triton.jit
def _fused_step_kernel(
    q, k, v, a, b, A_log, dt_bias, out,
    checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, arrivals,
    state_indices, pad_slot_id, window, scale,
    stride_q, stride_qh, stride_k, stride_kh, stride_v, stride_vh, stride_a, stride_b,
    stride_o, stride_oh,
    HV: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, KC: tl.constexpr,
    CAP: tl.constexpr, BC: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_INDICES: tl.constexpr, PRECISION: tl.constexpr, STAGES: tl.constexpr, FLUSH_STAGES: tl.constexpr,
    FLUSH_ELSEWHERE: tl.constexpr = False, PDL: tl.constexpr = False,
):
    G: tl.constexpr = HV // H
    PARTS: tl.constexpr = V // BV
    i_p, i_hv, i_b = _program_ids(PARTS, HV)
    if PDL:
        # Launched beside the CUDA flush launch (decode_flush_cuda.py), which touches none of this
        # kernel's rows but reads every row's cursors: a row's last program waits for it before it
        # moves them (replay_cursors), and program 0 waits too, so that the step ends when both
        # launches have even where every row is padded.
        if tl.program_id(0) == 0:
            gdc_wait()
    i_h = i_hv // G
    o_k = tl.arange(0, K)
    o_c = tl.arange(0, BC)
    o_v = i_p * BV + tl.arange(0, BV)
    p_o = out + i_b * stride_o + i_hv * stride_oh + o_v
    slot = i_b.to(tl.int64)
    if HAS_INDICES:
        slot = tl.load(state_indices + i_b).to(tl.int64)
    if slot == pad_slot_id:
        tl.store(p_o, tl.zeros([BV], dtype=tl.float32).to(out.dtype.element_ty))
        return
    sh = slot * HV + i_hv
    p_s = checkpoint + sh * V * K + o_v[:, None] * K
    p_k = k + i_b * stride_k + i_h * stride_kh
    p_rk = ring_k + (slot * H + i_h) * CAP * K
    o_kc = tl.arange(0, KC)
    if STAGES == 0:
        S = tl.load(p_s + o_k[None, :])
    c = tl.load(committed + slot)
    flush = c + 1 >= tl.load(flush_at + slot)
    if FLUSH_ELSEWHERE:
        # The flush rows are the CUDA launch's (decode_flush_cuda.py), which reads the cursors
        # while this kernel runs; they move as on every row, once it is done (replay_cursors).
        if flush:
            replay_cursors(arrivals, committed, flush_at, i_b, slot, c, flush, window, HV * PARTS, PDL)
            return
    b_q, b_k, k_norm = _load_qk(q, k, i_b, i_h, o_k, scale, stride_q, stride_qh, stride_k, stride_kh,
                                ring_k.dtype.element_ty)
    b_g, b_beta = _load_gate(a, b, A_log, dt_bias, i_b, i_hv, o_k, stride_a, stride_b, K, False, HAS_BIAS)
    b_v = tl.load(v + i_b * stride_v + i_hv * stride_vh + o_v).to(ring_v.dtype.element_ty).to(tl.float32)
    live = o_c < c
    kr = tl.load(p_rk + o_c[:, None] * K + o_k[None, :], mask=live[:, None], other=0.0)
    U = tl.load(ring_u + sh * CAP * V + o_c[:, None] * V + o_v[None, :], mask=live[:, None], other=0.0)
    gr = tl.load(ring_g + sh * CAP + o_c, mask=live, other=0.0)
    # The ring's loads are in flight during the chunk loop; kr stays in the ring's dtype until used.
    if STAGES > 0:
        # S k_t and S q_t chunk by chunk, the chunks' loads pipelined (q and k re-read per chunk
        # from L1 and scaled as _load_qk scales the whole vectors, element for element).
        raw_q = tl.load(q + i_b * stride_q + i_h * stride_qh + o_k).to(tl.float32)
        q_norm = tl.sqrt(tl.sum(raw_q * raw_q) + 1e-6)
        # Summed in-thread per chunk, across lanes once after the loop (ops/_chunk_sums.py).
        P_k = tl.zeros([BV, KC // 4], dtype=tl.float32)
        P_q = tl.zeros([BV, KC // 4], dtype=tl.float32)
        for j in tl.range(0, K // KC, num_stages=STAGES):
            cols = j * KC + o_kc
            Sj = tl.load(p_s + cols[None, :])
            qj = tl.load(q + i_b * stride_q + i_h * stride_qh + cols).to(tl.float32) / q_norm * scale
            kj = (tl.load(p_k + cols).to(tl.float32) / k_norm).to(ring_k.dtype.element_ty).to(tl.float32)
            P_k += chunk_partials(Sj, kj, BV, KC)
            P_q += chunk_partials(Sj, qj, BV, KC)
        S_k = tl.sum(P_k, axis=1)
        S_q = tl.sum(P_q, axis=1)
    D_t = tl.sum(gr) + b_g
    w = tl.where(live, tl.exp(D_t - tl.cumsum(gr, axis=0)), 0.0)
    e_t = tl.exp(D_t)
    kr = kr.to(tl.float32)
    ak = tl.sum(kr * b_k[None, :], axis=1) * w
    aq = tl.sum(kr * b_q[None, :], axis=1) * w
    if STAGES == 0:
        Sk = tl.sum(S * b_k[None, :], axis=1) * e_t
        Sq = tl.sum(S * b_q[None, :], axis=1) * e_t
    else:
        Sk = S_k * e_t
        Sq = S_q * e_t
    b_u = b_beta * (b_v - Sk - tl.sum(ak[:, None] * U, axis=0))
    tl.store(p_o, (Sq + tl.sum(aq[:, None] * U, axis=0) + b_u * tl.sum(b_k * b_q)).to(out.dtype.element_ty))
    if FLUSH_ELSEWHERE:
        # A flush row left above: every row here appends.
        _append_token(ring_u, ring_v, ring_beta, ring_g, p_rk, sh, c, o_v, o_k, b_u, b_v, b_beta, b_g, b_k,
                      i_p == 0, i_hv % G == 0, CAP, V, K)
    elif flush:
        # The window into the checkpoint as one product: u_t joins W at c, k_t the keys at c; the
        # tile is read again (an L2 hit), so nothing is held across the reductions above.
        Wf = tl.where((o_c == c)[None, :], b_u[:, None], tl.trans(U) * w[None, :])
        if FLUSH_STAGES == 0:
            for jf in tl.static_range(K // KC):
                _fold_chunk(p_s, p_k, p_rk, jf * KC + o_kc, o_c, c, live, k_norm, Wf, e_t, ring_k, K, PRECISION)
        else:
            for jf in tl.range(0, K // KC, num_stages=FLUSH_STAGES):
                _fold_chunk(p_s, p_k, p_rk, jf * KC + o_kc, o_c, c, live, k_norm, Wf, e_t, ring_k, K, PRECISION)
    else:
        _append_token(ring_u, ring_v, ring_beta, ring_g, p_rk, sh, c, o_v, o_k, b_u, b_v, b_beta, b_g, b_k,
                      i_p == 0, i_hv % G == 0, CAP, V, K)
    replay_cursors(arrivals, committed, flush_at, i_b, slot, c, flush, window, HV * PARTS, PDL)


def delta_replay_fused_step(checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window,
                            q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold,
                            variant: FusedVariant | None = None):
    """Launch one ReplaySSM step as a single kernel (arguments as ``decode.delta_replay_step``);
    ``refold`` must be False: this kernel folds the cached ``u``. Returns ``o [batch, HV, d_v]``
    in ``v.dtype``."""
    if refold:
        raise ValueError("delta_replay_fused_step: refold=True is not served by the one-launch step "
                         "(it folds the cached u); use the staged step")
    variant = variant or FusedVariant()
    batch, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    if ring_g.dim() == 4:
        raise ValueError("delta_replay_fused_step: per-channel decays (KDA) are not served by the one-launch "
                         "step; use the staged step")
    if variant.flush_cuda_heads is not None and (HV // H) % variant.flush_cuda_heads:
        raise ValueError(f"FusedVariant.flush_cuda_heads: expected a divisor of the key head's {HV // H} value heads, "
                         f"got {variant.flush_cuda_heads}")
    # On the CPU (the Triton interpreter) the split runs with the flush rows in torch operations.
    on_cpu = checkpoint.device.type == "cpu"
    cuda = variant.flush_impl == "cuda" and (on_cpu or cuda_flush_unsupported(
        checkpoint, batch, dict(ring_k=ring_k, ring_v=ring_v, ring_g=ring_g, ring_u=ring_u, q=q, k=k, v=v, a=a, b=b,
                                A_log=A_log, dt_bias=dt_bias)) is None)
    consts, warps = fused_constexprs(variant, batch, HV, H, K, V, ring_k.shape[2], dt_bias is not None,
                                     state_indices is not None, cuda)
    out = torch.empty_like(v)
    scale = K ** -0.5 if scale is None else scale
    arrivals = _arrivals(batch, q.device)  # before any launch: growing it inside a capture raises
    if cuda:
        # First: the flush rows, from the cursors as the step finds them (the fused kernel starts
        # beside this launch and moves a row's cursors only once it is done).
        args = (checkpoint, ring_k, ring_v, ring_g, ring_u, committed, flush_at, q, k, v, a, b, A_log, dt_bias,
                state_indices, pad_slot_id, out, scale)
        if on_cpu:
            flush_rows_torch(*args)
        else:
            flush_rows_cuda(*args, min_blocks=variant.flush_cuda_blocks, passes=variant.flush_cuda_passes,
                            heads_per_item=variant.flush_cuda_heads, prefetch=variant.flush_cuda_prefetch)
    pdl = cuda and pdl_supported(v.device)
    extra = {"maxnreg": variant.max_registers} if variant.max_registers else {}
    if pdl:
        extra["launch_pdl"] = True
    _fused_step_kernel[(batch * HV * (V // consts["BV"]),)](
        q, k, v, a, b, A_log, A_log if dt_bias is None else dt_bias, out,
        checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, arrivals,
        state_indices, pad_slot_id, window, scale,
        *_strides(q, k, v, a, b, out), **consts, PDL=pdl, num_warps=warps, **extra,
    )
    return out
