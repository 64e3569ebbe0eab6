"""Plain-PyTorch reference of Gated DeltaNet decode, standard and ReplaySSM: the oracle.

Also the one home of the delta-rule algebra that KDA shares (``ops/kda/reference.py`` is a thin
layer over it): every function below takes the log-decay ``g`` as a tensor whose last axis
broadcasts over ``d_k`` -- ``[..., 1]`` for GDN (one decay per head), ``[..., d_k]`` for KDA
(one per key channel) -- so the same lines serve both.

Per value head (``HV`` value heads, ``H`` key heads, value head ``h`` reads key head
``h // (HV // H)``), with the state ``S`` in TensorRT-LLM's ``[d_v, d_k]`` layout
(replayssm-math.md sections 1-4)::

    q, k = l2norm(q), l2norm(k);  q *= scale                  (eps 1e-6, scale = d_k ** -0.5)
    g    = -exp(A_log) * softplus(a + dt_bias);  beta = sigmoid(b)
    S_t  = S_{t-1} Diag(e^g) + u_t k_t^T,   u_t = beta (v_t - S_{t-1} (e^g * k_t))
    o_t  = S_t q_t

ReplaySSM keeps the checkpoint ``S_c`` and a ring of the window's entries. With ``G_i`` the
cumulative log-decay of ring positions ``0..i``::

    S_i = S_c Diag(e^{G_i}) + sum_{j <= i} u_j (e^{G_i - G_j} * k_j)^T
    u_i = beta_i (v_i - S_c (e^{G_i} * k_i) - sum_{j < i} u_j ((e^{G_i - G_j} * k_j) . k_i))

The second line is a unit lower-triangular system in the ``u``'s of the new entries (the ``T``
drafts of a verify, or the whole window of a refolding flush), solved per head at once.

Everything is computed in float64; outputs come back in ``v.dtype``, ring entries and the
checkpoint are written in their own dtypes (``ops/gdn/state.py``). Rows whose
``state_indices`` entry is ``pad_slot_id`` get zero outputs and touch no state. Every argument
is checked before anything is written, so a rejected call changes nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._slots import check_num_drafts, live_rows
from .state import DeltaRuleReplayState

__all__ = [
    "L2NORM_EPS",
    "inputs_doc",
    "l2norm",
    "delta_rule_gates",
    "delta_rule_update",
    "solve_window_values",
    "window_outputs",
    "fold_window",
    "gdn_standard_step",
    "gdn_replay_step",
    "gdn_replay_verify",
    "gdn_replay_commit",
    "gdn_replay_flush",
    "gdn_replay_materialize",
    "slots_due_to_flush",
]

#: fla's (and Hugging Face's) epsilon of the in-kernel q/k l2-normalisation.
L2NORM_EPS = 1e-6

_F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# The delta-rule algebra (float64 tensors in, float64 tensors out; no validation here)
# ---------------------------------------------------------------------------------------------
def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` along the last axis, fla's convention."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def delta_rule_gates(
    a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor | None, per_channel_decay: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-decay and write strength from the raw projections, in float64.

    Args:
        a: GDN ``[..., HV]``; KDA ``[..., HV, d_k]``.
        b: ``[..., HV]``.
        A_log: ``[HV]``.
        dt_bias: GDN ``[HV]``; KDA ``[HV * d_k]``; or None.
        per_channel_decay: False for GDN, True for KDA.

    Returns:
        ``g``: ``[..., HV, 1]`` (GDN) or ``[..., HV, d_k]`` (KDA), ``<= 0``; ``beta``: ``[..., HV]``.
    """
    a = a.to(_F64)
    if dt_bias is not None:
        a = a + dt_bias.to(_F64).view(a.shape[-2:] if per_channel_decay else a.shape[-1:])
    decay_rate = A_log.to(_F64).exp()
    if per_channel_decay:
        g = -decay_rate[:, None] * F.softplus(a)
    else:
        g = (-decay_rate * F.softplus(a))[..., None]
    return g, torch.sigmoid(b.to(_F64))


def delta_rule_update(
    S: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the plain recurrence (what engines run today).

    Args:
        S: ``[B, HV, d_v, d_k]`` state before the token.
        q, k: ``[B, HV, d_k]`` normalised (``q`` scaled), already expanded to value heads.
        v: ``[B, HV, d_v]``.  beta: ``[B, HV]``.  g: ``[B, HV, 1 or d_k]``.

    Returns:
        ``o [B, HV, d_v]`` and the new state ``[B, HV, d_v, d_k]``.
    """
    S = S * g.exp()[:, :, None, :]
    u = beta[..., None] * (v - (S @ k[..., None])[..., 0])
    S = S + u[..., :, None] * k[..., None, :]
    return (S @ q[..., None])[..., 0], S


def _decayed_dots(
    x: torch.Tensor, gx: torch.Tensor, y: torch.Tensor, gy: torch.Tensor, keep: torch.Tensor
) -> torch.Tensor:
    """``P[..., i, j] = sum_d x_i[d] y_j[d] e^{gx_i[d] - gy_j[d]}`` where ``keep[..., i, j]``, else 0.

    ``x [..., n, d_k]``, ``gx [..., n, D]``, ``y [..., m, d_k]``, ``gy [..., m, D]``, ``keep``
    broadcastable to ``[..., n, m]``. Masked exponents go to ``-inf`` before ``exp`` because the
    positive ones (``j`` after ``i``) can overflow.
    """
    exponent = gx[..., :, None, :] - gy[..., None, :, :]
    decay = exponent.masked_fill(~keep[..., None], float("-inf")).exp()
    return (x[..., :, None, :] * y[..., None, :, :] * decay).sum(-1)


def solve_window_values(
    checkpoint: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    G: torch.Tensor,
    u_known: torch.Tensor,
    known: torch.Tensor,
    active: torch.Tensor,
) -> torch.Tensor:
    """Corrected values ``u`` of a window's entries: one unit lower-triangular solve per head.

    Entries marked ``known`` keep ``u_known``; the other ``active`` entries are solved from the
    checkpoint and the raw inputs (math.md sections 3 and 4); inactive entries get ``u = 0``.
    Known entries must precede the solved ones.

    Args:
        checkpoint: ``[B, HV, d_v, d_k]``.
        k: ``[B, HV, n, d_k]`` normalised keys.  v: ``[B, HV, n, d_v]``.  beta: ``[B, HV, n]``.
        G: ``[B, HV, n, 1 or d_k]`` cumulative log-decay from the checkpoint to each entry.
        u_known: ``[B, HV, n, d_v]``.  known, active: ``[B, n]`` bool.

    Returns:
        ``[B, HV, n, d_v]``.
    """
    n = k.shape[-2]
    solved = (active & ~known)[:, None, :, None]
    state_reads = (G.exp() * k) @ checkpoint.transpose(-1, -2)
    rhs = torch.where(solved, beta[..., None] * (v - state_reads), torch.where(known[:, None, :, None], u_known, 0.0))
    strictly_lower = torch.ones(n, n, dtype=torch.bool, device=k.device).tril(-1)
    coupling = beta[..., None] * _decayed_dots(k, G, k, G, strictly_lower) * solved
    system = coupling + torch.eye(n, dtype=k.dtype, device=k.device)
    return torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)


def window_outputs(
    checkpoint: torch.Tensor,
    q: torch.Tensor,
    Gq: torch.Tensor,
    q_pos: torch.Tensor,
    k: torch.Tensor,
    G: torch.Tensor,
    u: torch.Tensor,
) -> torch.Tensor:
    """Outputs of queries placed in a window, output-only: ``O = S_c Q D + (W (.) (K^T Q)) U``.

    Args:
        checkpoint: ``[B, HV, d_v, d_k]``.
        q: ``[B, HV, T, d_k]`` normalised, scaled queries.  Gq: ``[B, HV, T, 1 or d_k]`` their
            cumulative log-decays.  q_pos: ``[B, T]`` their ring positions.
        k: ``[B, HV, n, d_k]``.  G: ``[B, HV, n, 1 or d_k]``.  u: ``[B, HV, n, d_v]``.

    Returns:
        ``[B, HV, T, d_v]``.
    """
    n = k.shape[-2]
    visible = torch.arange(n, device=k.device)[None, None, :] <= q_pos[:, :, None]
    attention = _decayed_dots(q, Gq, k, G, visible[:, None])
    return (Gq.exp() * q) @ checkpoint.transpose(-1, -2) + attention @ u


def fold_window(
    checkpoint: torch.Tensor, k: torch.Tensor, G: torch.Tensor, u: torch.Tensor, length: torch.Tensor
) -> torch.Tensor:
    """The state after the first ``length`` window entries, ``S_c Diag(e^{G_m}) + sum u_j (e^{G_m - G_j} k_j)^T``.

    Args:
        checkpoint: ``[B, HV, d_v, d_k]``.  k: ``[B, HV, n, d_k]``.
        G: ``[B, HV, n, 1 or d_k]``.  u: ``[B, HV, n, d_v]``.  length: ``[B]`` int64 in ``[0, n]``.

    Returns:
        ``[B, HV, d_v, d_k]``.
    """
    n = k.shape[-2]
    taken = (torch.arange(n, device=k.device)[None, :] < length[:, None])[:, None, :, None]
    last = (length - 1).clamp(min=0)[:, None, None, None].expand(-1, G.shape[1], 1, G.shape[-1])
    G_end = torch.where(length[:, None, None, None] > 0, G.gather(2, last), 0.0)
    decayed_k = torch.where(taken, (G_end - G).masked_fill(~taken, float("-inf")).exp() * k, 0.0)
    return checkpoint * G_end.exp() + torch.where(taken, u, 0.0).transpose(-1, -2) @ decayed_k


# ---------------------------------------------------------------------------------------------
# Argument checks (all of them run before any write)
# ---------------------------------------------------------------------------------------------
def _shape_error(name: str, expected: str, tensor) -> ValueError:
    got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
    return ValueError(f"{name}: expected {expected}, got {got}")


def _check_inputs(q, k, v, a, b, A_log, dt_bias, scale, *, HV, H, d_k, d_v, per_channel_decay, drafts):
    """Shapes of one step's (``drafts=False``) or one verify's inputs; returns ``(batch, T)``."""
    lead = "[batch, T, " if drafts else "[batch, "
    if not isinstance(q, torch.Tensor) or q.dim() != (4 if drafts else 3):
        raise _shape_error("q", f"{lead}H, d_k]", q)
    batch = q.shape[0]
    T = q.shape[1] if drafts else 1
    if drafts and T < 1:
        raise ValueError(f"q: expected at least one draft token (T >= 1), got T={T}")
    pre = (batch, T) if drafts else (batch,)
    H = H if H is not None else q.shape[-2]
    expected = {
        "q": (pre + (H, d_k), f"{lead}H={H}, d_k={d_k}]"),
        "k": (pre + (H, d_k), f"{lead}H={H}, d_k={d_k}]"),
        "v": (pre + (HV, d_v), f"{lead}HV={HV}, d_v={d_v}]"),
        "a": (pre + ((HV, d_k) if per_channel_decay else (HV,)), f"{lead}HV={HV}" + (f", d_k={d_k}]" if per_channel_decay else "]")),
        "b": (pre + (HV,), f"{lead}HV={HV}]"),
    }
    for name, tensor in zip("qkvab", (q, k, v, a, b)):
        shape, text = expected[name]
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape:
            raise _shape_error(name, text, tensor)
        if not tensor.is_floating_point():
            raise ValueError(f"{name}: expected a floating-point tensor, got {tensor.dtype}")
    if H < 1 or HV % H != 0:
        raise ValueError(f"q: key heads H={H} must divide the value heads HV={HV}")
    if not isinstance(A_log, torch.Tensor) or tuple(A_log.shape) != (HV,):
        raise _shape_error("A_log", f"[HV={HV}]", A_log)
    bias_shape = (HV * d_k,) if per_channel_decay else (HV,)
    if dt_bias is not None and (not isinstance(dt_bias, torch.Tensor) or tuple(dt_bias.shape) != bias_shape):
        raise _shape_error("dt_bias", f"[{'HV * d_k' if per_channel_decay else 'HV'}={bias_shape[0]}] or None", dt_bias)
    for name, tensor in (("A_log", A_log), ("dt_bias", dt_bias)):
        if tensor is not None and not tensor.is_floating_point():
            raise ValueError(f"{name}: expected a floating-point tensor, got {tensor.dtype}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not 0 < scale < float("inf")):
        raise ValueError(f"scale: expected a positive finite float or None, got {scale!r}")
    return batch, T


def _check_state(state, per_channel_decay: bool) -> None:
    if not isinstance(state, DeltaRuleReplayState):
        raise ValueError(f"state: expected a DeltaRuleReplayState, got {type(state).__name__}")
    state.check()
    if state.ring_k.shape[1] < 1 or state.checkpoint.shape[1] % state.ring_k.shape[1]:
        raise ValueError(f"state.ring_k: its {state.ring_k.shape[1]} key heads do not divide the checkpoint's "
                         f"{state.checkpoint.shape[1]} value heads")
    if state.per_channel_decay != per_channel_decay:
        has, op = ("per-channel (KDA)", "GDN") if state.per_channel_decay else ("per-head (GDN)", "KDA")
        raise ValueError(f"state: its ring_g holds {has} decays, which a {op} op cannot use")


def _check_refold(refold) -> None:
    if not isinstance(refold, bool):
        raise ValueError(f"refold: expected a bool, got {refold!r}")


def _check_replay_inputs(state, q, k, v, a, b, A_log, dt_bias, scale, per_channel_decay, drafts):
    _check_state(state, per_channel_decay)
    _, HV, d_v, d_k = state.checkpoint.shape
    return _check_inputs(
        q, k, v, a, b, A_log, dt_bias, scale, HV=HV, H=state.ring_k.shape[1], d_k=d_k, d_v=d_v,
        per_channel_decay=per_channel_decay, drafts=drafts,
    )


# ---------------------------------------------------------------------------------------------
# Shared implementations of the ops (GDN: per_channel_decay=False, KDA: True)
# ---------------------------------------------------------------------------------------------
def _prepare(q, k, a, b, A_log, dt_bias, scale, per_channel_decay):
    """Normalised, scaled queries, normalised keys, ``g`` and ``beta`` in float64."""
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    g, beta = delta_rule_gates(a, b, A_log, dt_bias, per_channel_decay)
    return l2norm(q.to(_F64)) * scale, l2norm(k.to(_F64)), g, beta


def delta_rule_standard_step(
    ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, per_channel_decay
) -> torch.Tensor:
    """The body of ``gdn_standard_step`` / ``kda_standard_step`` (documented there)."""
    if not isinstance(ssm_state, torch.Tensor) or ssm_state.dim() != 4:
        raise _shape_error("ssm_state", "[slots, HV, d_v, d_k]", ssm_state)
    if not ssm_state.dtype.is_floating_point:
        raise ValueError(f"ssm_state: expected a floating-point tensor, got {ssm_state.dtype}")
    slots, HV, d_v, d_k = ssm_state.shape
    batch, _ = _check_inputs(
        q, k, v, a, b, A_log, dt_bias, scale, HV=HV, H=None, d_k=d_k, d_v=d_v,
        per_channel_decay=per_channel_decay, drafts=False,
    )
    rows, slot_ids = live_rows(state_indices, batch, slots, pad_slot_id, device=v.device)
    out = torch.zeros_like(v)
    if rows.numel() == 0:
        return out
    qn, kn, g, beta = _prepare(q[rows], k[rows], a[rows], b[rows], A_log, dt_bias, scale, per_channel_decay)
    share = HV // q.shape[1]
    o, S = delta_rule_update(
        ssm_state[slot_ids].to(_F64), qn.repeat_interleave(share, 1), kn.repeat_interleave(share, 1),
        v[rows].to(_F64), beta, g,
    )
    ssm_state[slot_ids] = S.to(ssm_state.dtype)
    out[rows] = o.to(v.dtype)
    return out


def _window(state: DeltaRuleReplayState, slot_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The checkpoint and whole rings of ``slot_ids`` in float64, keys expanded to value heads."""
    HV, H = state.checkpoint.shape[1], state.ring_k.shape[1]
    g = state.ring_g[slot_ids].to(_F64)
    return {
        "checkpoint": state.checkpoint[slot_ids].to(_F64),
        "k": state.ring_k[slot_ids].to(_F64).repeat_interleave(HV // H, 1),
        "v": state.ring_v[slot_ids].to(_F64),
        "beta": state.ring_beta[slot_ids].to(_F64),
        "g": g if state.per_channel_decay else g[..., None],
        "u": state.ring_u[slot_ids].to(_F64),
    }


def _cumulative_decay(g: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """``G [B, HV, n, D]``: log-decay from the checkpoint through each active entry."""
    return torch.where(active[:, None, :, None], g, 0.0).cumsum(2)


def _fold(state: DeltaRuleReplayState, slot_ids: torch.Tensor, refold: bool) -> torch.Tensor:
    """The float64 state of ``slot_ids`` after their committed entries, ``[B, HV, d_v, d_k]``."""
    win = _window(state, slot_ids)
    length = state.committed[slot_ids].to(torch.int64)
    active = torch.arange(state.capacity, device=length.device)[None, :] < length[:, None]
    G = _cumulative_decay(win["g"], active)
    if refold:
        # math.md section 4: recompute u from the recurrence checkpoint and the raw inputs, so
        # that whatever the cached u absorbed when it was computed (a read copy's rounding)
        # never enters the recurrence.
        u = solve_window_values(
            win["checkpoint"], win["k"], win["v"], win["beta"], G, win["u"], torch.zeros_like(active), active
        )
    else:
        u = win["u"]
    return fold_window(win["checkpoint"], win["k"], G, u, length)


def slots_due_to_flush(state: DeltaRuleReplayState, slot_ids: torch.Tensor) -> torch.Tensor:
    """The slots of ``slot_ids`` (int ``[n]``) whose next token fills the window, the kernels'
    flush trigger ``committed + 1 >= flush_at``: a step flushes them (a fold-first step folds
    their ring first, then appends the token)."""
    slot_ids = slot_ids.long()
    return slot_ids[state.committed[slot_ids] + 1 >= state.flush_at[slot_ids]]


def _flush_slots(state: DeltaRuleReplayState, slot_ids: torch.Tensor, refold: bool) -> None:
    if slot_ids.numel() == 0:
        return
    state.checkpoint[slot_ids] = _fold(state, slot_ids, refold).to(state.checkpoint.dtype)
    state.committed[slot_ids] = 0
    state.flush_at[slot_ids] = state.window


def _ring_write(ring: torch.Tensor, slot_ids: torch.Tensor, positions: torch.Tensor, values: torch.Tensor) -> None:
    """``ring[slot_ids[r], :, positions[r, t]] = values[r, :, t]``; values ``[R, heads, T, ...]``."""
    heads = torch.arange(ring.shape[1], device=ring.device)
    ring[slot_ids[:, None, None], heads[None, :, None], positions[:, None, :]] = values.to(ring.dtype)


def delta_rule_replay_verify(
    state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, per_channel_decay
) -> torch.Tensor:
    """The body of ``gdn_replay_verify`` / ``kda_replay_verify`` (documented there)."""
    batch, T = _check_replay_inputs(state, q, k, v, a, b, A_log, dt_bias, scale, per_channel_decay, drafts=True)
    HV = state.checkpoint.shape[1]
    rows, slot_ids = live_rows(state_indices, batch, state.slots, pad_slot_id, device=v.device)
    committed = state.committed[slot_ids].to(torch.int64)
    if bool((committed + T > state.capacity).any()):
        worst = int(committed.max())
        raise ValueError(
            f"q: T={T} drafts do not fit the ring (capacity {state.capacity}) behind {worst} committed "
            "entries; expected T <= capacity - committed (ReplaySSMConfig.max_draft_tokens)"
        )
    out = torch.zeros_like(v)
    if rows.numel() == 0:
        return out

    qn, kn, g, beta = _prepare(q[rows], k[rows], a[rows], b[rows], A_log, dt_bias, scale, per_channel_decay)
    positions = committed[:, None] + torch.arange(T, device=v.device)[None, :]
    _ring_write(state.ring_k, slot_ids, positions, kn.transpose(1, 2))
    _ring_write(state.ring_v, slot_ids, positions, v[rows].transpose(1, 2))
    _ring_write(state.ring_beta, slot_ids, positions, beta.transpose(1, 2))
    _ring_write(state.ring_g, slot_ids, positions, (g if per_channel_decay else g[..., 0]).transpose(1, 2))

    # Read the window back from the rings, so these outputs use the entries exactly as stored
    # (in the ring dtypes): the ones a later flush folds.
    win = _window(state, slot_ids)
    ring_pos = torch.arange(state.capacity, device=v.device)[None, :]
    known, active = ring_pos < committed[:, None], ring_pos < committed[:, None] + T
    G = _cumulative_decay(win["g"], active)
    u = solve_window_values(win["checkpoint"], win["k"], win["v"], win["beta"], G, win["u"], known, active)
    _ring_write(state.ring_u, slot_ids, positions, u.gather(2, _expand_positions(positions, u)))

    share = HV // state.ring_k.shape[1]
    queries = qn.repeat_interleave(share, 2).transpose(1, 2)
    o = window_outputs(win["checkpoint"], queries, G.gather(2, _expand_positions(positions, G)), positions,
                       win["k"], G, u)
    out[rows] = o.transpose(1, 2).to(v.dtype)
    return out


def _expand_positions(positions: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Gather index ``[R, HV, T, like.shape[-1]]`` picking ring positions along axis 2 of ``like``."""
    return positions[:, None, :, None].expand(-1, like.shape[1], -1, like.shape[-1])


def delta_rule_replay_commit(state, num_accepted, state_indices, pad_slot_id, refold, per_channel_decay,
                             num_drafts=None) -> None:
    """The body of ``gdn_replay_commit`` / ``kda_replay_commit`` (documented there)."""
    _check_state(state, per_channel_decay)
    _check_refold(refold)
    check_num_drafts(num_drafts)
    if not isinstance(num_accepted, torch.Tensor) or num_accepted.dim() != 1:
        raise _shape_error("num_accepted", "[batch] int32/int64", num_accepted)
    if num_accepted.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"num_accepted: expected int32 or int64, got {num_accepted.dtype}")
    rows, slot_ids = live_rows(state_indices, num_accepted.shape[0], state.slots, pad_slot_id,
                               device=num_accepted.device)
    accepted = num_accepted[rows].to(torch.int64)
    committed = state.committed[slot_ids].to(torch.int64) + accepted
    if bool((accepted < 0).any()) or bool((committed > state.capacity).any()):
        raise ValueError(
            f"num_accepted: expected 0 <= n <= capacity - committed (capacity {state.capacity}), "
            f"got {accepted.tolist()} for committed {state.committed[slot_ids].tolist()}"
        )
    if num_drafts is not None and bool((accepted > num_drafts).any()):
        raise ValueError(f"num_accepted: expected values <= num_drafts={num_drafts}, got {accepted.tolist()}")
    state.committed[slot_ids] = committed.to(state.committed.dtype)
    _flush_slots(state, slot_ids[committed >= state.flush_at[slot_ids]], refold)


def _slots_of(state, state_indices, pad_slot_id) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows and slots of a call whose only batch-shaped argument is ``state_indices``."""
    if not isinstance(state_indices, torch.Tensor) or state_indices.dim() != 1:
        raise _shape_error("state_indices", "[batch] int32/int64", state_indices)
    return live_rows(state_indices, state_indices.shape[0], state.slots, pad_slot_id, device=state.checkpoint.device)


def delta_rule_replay_flush(state, state_indices, pad_slot_id, refold, per_channel_decay) -> None:
    """The body of ``gdn_replay_flush`` / ``kda_replay_flush`` (documented there)."""
    _check_state(state, per_channel_decay)
    _check_refold(refold)
    _, slot_ids = _slots_of(state, state_indices, pad_slot_id)
    _flush_slots(state, slot_ids, refold)


def delta_rule_replay_materialize(state, state_indices, pad_slot_id, refold, per_channel_decay) -> torch.Tensor:
    """The body of ``gdn_replay_materialize`` / ``kda_replay_materialize`` (documented there)."""
    _check_state(state, per_channel_decay)
    _check_refold(refold)
    rows, slot_ids = _slots_of(state, state_indices, pad_slot_id)
    out = state.checkpoint.new_zeros((state_indices.shape[0],) + tuple(state.checkpoint.shape[1:]))
    if rows.numel():
        out[rows] = _fold(state, slot_ids, refold).to(out.dtype)
    return out


def delta_rule_replay_step(
    state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold, per_channel_decay
) -> torch.Tensor:
    """The body of ``gdn_replay_step`` / ``kda_replay_step``: verify of one token + commit of it."""
    _check_refold(refold)  # the commit would refuse it only after the verify wrote the rings
    batch, _ = _check_replay_inputs(state, q, k, v, a, b, A_log, dt_bias, scale, per_channel_decay, drafts=False)
    out = delta_rule_replay_verify(
        state, q[:, None], k[:, None], v[:, None], a[:, None], b[:, None], A_log, dt_bias, state_indices,
        pad_slot_id, scale, per_channel_decay,
    )
    ones = torch.ones(batch, dtype=torch.int32, device=v.device)
    delta_rule_replay_commit(state, ones, state_indices, pad_slot_id, refold, per_channel_decay)
    return out[:, 0]


# ---------------------------------------------------------------------------------------------
# Gated DeltaNet ops (ops/README.md, "Function names")
# ---------------------------------------------------------------------------------------------
def inputs_doc(per_channel_decay: bool, drafts: bool) -> str:
    """The argument lines shared by the docstrings of the GDN and KDA step / verify ops."""
    T = ", T" if drafts else ""
    decay = (
        f"a: ``[batch{T}, HV, d_k]`` raw per-channel decay projection.  b: ``[batch{T}, HV]`` raw ``beta`` logits.\n"
        "        A_log: ``[HV]``.  dt_bias: ``[HV * d_k]`` or None."
        if per_channel_decay else
        f"a: ``[batch{T}, HV]`` raw decay projection.  b: ``[batch{T}, HV]`` raw ``beta`` logits.\n"
        "        A_log: ``[HV]``.  dt_bias: ``[HV]`` or None."
    )
    return f"""
        q, k: ``[batch{T}, H, d_k]`` raw (after the short convolution), any float dtype.
        v: ``[batch{T}, HV, d_v]``; outputs come back in its dtype.
        {decay}
        state_indices: ``[batch]`` int32/int64 slot of each row, or None for row ``i`` -> slot ``i``.
        pad_slot_id: rows with this index get zero outputs and touch no state.
        scale: query scale, default ``d_k ** -0.5``."""


def gdn_standard_step(
    ssm_state: torch.Tensor, q, k, v, a, b, A_log, dt_bias=None, state_indices=None, pad_slot_id: int = -1,
    scale: float | None = None,
) -> torch.Tensor:
    """One token of the standard gated delta rule: reads and writes ``ssm_state`` in place.

    Args:
        ssm_state: ``[slots, HV, d_v, d_k]``, any float dtype (rewritten in it).{inputs}

    Returns:
        ``o [batch, HV, d_v]`` in ``v.dtype``.
    """
    return delta_rule_standard_step(ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, False)


def gdn_replay_step(
    state: DeltaRuleReplayState, q, k, v, a, b, A_log, dt_bias=None, state_indices=None, pad_slot_id: int = -1,
    scale: float | None = None, refold: bool = True,
) -> torch.Tensor:
    """One ReplaySSM decode token per row: append to the ring at ``committed``, output from the
    checkpoint + ring, ``committed += 1``; slots reaching ``flush_at`` flush (``refold`` as in
    :func:`gdn_replay_flush`). Equals :func:`gdn_replay_verify` with ``T = 1`` then
    :func:`gdn_replay_commit` of 1.

    Args:
        state: a GDN :class:`DeltaRuleReplayState` (``ring_g [slots, HV, capacity]``).{inputs}
        refold: how a flush made by this step folds the window.

    Returns:
        ``o [batch, HV, d_v]`` in ``v.dtype``.
    """
    return delta_rule_replay_step(
        state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold, False
    )


def gdn_replay_verify(
    state: DeltaRuleReplayState, q, k, v, a, b, A_log, dt_bias=None, state_indices=None, pad_slot_id: int = -1,
    scale: float | None = None,
) -> torch.Tensor:
    """Append ``T`` draft tokens behind the committed entries and return all ``T`` outputs,
    output-only (math.md section 3): the drafts' corrected values come from one unit
    lower-triangular solve per head; no per-token state is formed. ``committed`` is unchanged.

    Args:
        state: a GDN :class:`DeltaRuleReplayState`; needs ``committed + T <= capacity``.{inputs}

    Returns:
        ``o [batch, T, HV, d_v]`` in ``v.dtype``.
    """
    return delta_rule_replay_verify(state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, False)


def gdn_replay_commit(
    state: DeltaRuleReplayState, num_accepted: torch.Tensor, state_indices=None, pad_slot_id: int = -1,
    refold: bool = True, *, num_drafts: int | None = None,
) -> None:
    """Accept the first ``num_accepted`` drafts of the last verify: ``committed += n``, then
    slots with ``committed >= flush_at`` flush, folding only committed entries.

    Args:
        state: a GDN :class:`DeltaRuleReplayState`.
        num_accepted: ``[batch]`` int32/int64 in ``[0, capacity - committed]``.
        state_indices: ``[batch]`` int32/int64 or None.  pad_slot_id: rows left alone.
        refold: how the flushes fold (see :func:`gdn_replay_flush`).
        num_drafts: the ``T`` of the preceding verify; when given, ``num_accepted <= T`` is
            checked (the state does not record ``T``: entries past it hold no verified draft).
    """
    delta_rule_replay_commit(state, num_accepted, state_indices, pad_slot_id, refold, False, num_drafts)


def gdn_replay_flush(
    state: DeltaRuleReplayState, state_indices: torch.Tensor, pad_slot_id: int = -1, refold: bool = True
) -> None:
    """Fold the committed entries of these slots into the checkpoint now: ``committed = 0``,
    ``flush_at = window``.

    ``refold=True`` recomputes the corrected values from the checkpoint and the raw ring
    entries ``k, v, beta, g`` (math.md section 4: no read-copy rounding carried by ``ring_u``
    enters the recurrence); ``refold=False`` folds ``ring_u`` as cached. Equal in exact
    arithmetic.

    Args:
        state: a GDN :class:`DeltaRuleReplayState`.
        state_indices: ``[batch]`` int32/int64 slots (``pad_slot_id`` entries skipped).
    """
    delta_rule_replay_flush(state, state_indices, pad_slot_id, refold, False)


def gdn_replay_materialize(
    state: DeltaRuleReplayState, state_indices: torch.Tensor, pad_slot_id: int = -1, refold: bool = True
) -> torch.Tensor:
    """The current state ``S_t`` (checkpoint + committed entries) of each slot, nothing written.

    Args:
        state: a GDN :class:`DeltaRuleReplayState`.
        state_indices: ``[batch]`` int32/int64 slots.  refold: as in :func:`gdn_replay_flush`.

    Returns:
        ``[batch, HV, d_v, d_k]`` in the checkpoint dtype; zero for padded rows.
    """
    return delta_rule_replay_materialize(state, state_indices, pad_slot_id, refold, False)


for _op in (gdn_standard_step, gdn_replay_step, gdn_replay_verify):
    _op.__doc__ = _op.__doc__.format(inputs=inputs_doc(False, drafts=_op is gdn_replay_verify))
del _op
