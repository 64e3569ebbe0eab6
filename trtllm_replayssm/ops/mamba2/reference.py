"""Mamba-2 ReplaySSM in plain PyTorch, computed in float64: the definition of correct.

Notation of replayssm-math.md: per head ``h`` (group ``g = h // (heads / groups)``),

    dt_t = clamp(softplus(dt_raw_t + dt_bias_h), dt_min, dt_max)      a_t = exp(dt_t * A_h)
    S_t  = a_t S_{t-1} + dt_t x_t B_t^T                                  S: [head_dim, d_state]
    y_t  = S_t C_t + D_h x_t,   then y_t * silu(z_t) when z is given

:func:`mamba2_standard_step` runs this recurrence as engines do (vLLM's and TensorRT-LLM's
``selective_state_update``). The ``mamba2_replay_*`` functions keep a :class:`Mamba2ReplayState`
instead: a checkpoint ``S_c`` plus a ring of the inputs ``(x_j, dt_j, B_j)`` since, and compute
outputs without writing the state, in the output-only form of math.md section 3:

    O = S_c Q Diag(exp(G_q)) + V (W o (K^T Q))

with, per head and for ring entries ``j`` and query positions ``p_i``: ``G`` the cumulative
log-decay ``sum_{i<=j} dt_i A_h``, ``Q = [C_{p_i}]`` ``[d_state, T]``, ``K = [B_j]``
``[d_state, M]``, ``V = [dt_j x_j]`` ``[head_dim, M]`` and the causal decay matrix
``W[j, i] = exp(G_{p_i} - G_j)`` for ``j <= p_i``, else 0. ``K^T Q`` is shared by the heads of
a group. A flush folds ring entries into the checkpoint with the same decays.

Every function is batched over cache slots: row ``i`` works on slot ``state_indices[i]``; rows
equal to ``pad_slot_id`` get a zero output and touch no state. Inputs are validated before
anything is written, so a call that raises ValueError leaves the state as it was.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._slots import check_num_drafts, live_rows
from .state import Mamba2ReplayState

__all__ = [
    "mamba2_standard_step",
    "mamba2_replay_step",
    "mamba2_replay_verify",
    "mamba2_replay_commit",
    "mamba2_replay_flush",
    "mamba2_replay_materialize",
]

_F64 = torch.float64

_INPUT_DOCS = """
        x: ``[batch{T}, heads, head_dim]`` activation dtype (the ring's ``ring_x`` dtype for
            the replay functions).
        dt: ``[batch{T}, heads]`` float, raw: before ``dt_bias``, softplus and the clamp.
        A: ``[heads]`` float, ``-exp(A_log)``.
        B: ``[batch{T}, groups, d_state]`` (the ring's ``ring_B`` dtype for the replay functions).
        C: ``[batch{T}, groups, d_state]`` float.
        D: ``[heads]`` float or None: skip connection ``y += D_h x``.
        z: ``[batch{T}, heads, head_dim]`` float or None: output gate ``y * silu(z)``.
        dt_bias: ``[heads]`` float or None, added to ``dt`` before the softplus.
        dt_softplus: apply softplus to ``dt + dt_bias``.
        dt_min, dt_max: float or None, clamp of the processed ``dt``.
        state_indices: ``[batch]`` int32/int64 slot of each row, or None (row ``i`` -> slot ``i``).
        pad_slot_id: index marking padded rows (zero output, no state read or written)."""


def _doc(fn, T: str = ""):
    fn.__doc__ = fn.__doc__.replace("{inputs}", _INPUT_DOCS.format(T=T))
    return fn


def _doc_with_t(fn):
    return _doc(fn, T=", T")


# -- argument checks -------------------------------------------------------------------------------


def _shape_error(name: str, expected: str, tensor) -> ValueError:
    got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
    return ValueError(f"{name}: expected {expected}, got {got}")


def _expect(name: str, tensor, shape: tuple, labels: str, optional: bool = False) -> None:
    if tensor is None and optional:
        return
    if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != tuple(shape):
        raise _shape_error(name, f"{labels} = {list(shape)}" + (" or None" if optional else ""), tensor)
    if not tensor.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {tensor.dtype}")


def _check_inputs(x, dt, A, B, C, D, z, dt_bias, dt_min, dt_max, *, heads, head_dim, d_state, groups, with_t):
    """Validate the per-token inputs against the state's dims; return ``(batch, T)``."""
    lead_labels = "[batch, T, " if with_t else "[batch, "
    ndim = 4 if with_t else 3
    if not isinstance(x, torch.Tensor) or x.dim() != ndim:
        raise _shape_error("x", f"{lead_labels}heads, head_dim]", x)
    lead = tuple(x.shape[: ndim - 2])
    if with_t and lead[1] < 1:
        raise ValueError(f"x: expected at least one token per row, got shape {tuple(x.shape)}")
    _expect("x", x, (*lead, heads, head_dim), f"{lead_labels}heads, head_dim]")
    _expect("dt", dt, (*lead, heads), f"{lead_labels}heads]")
    _expect("A", A, (heads,), "[heads]")
    _expect("B", B, (*lead, groups, d_state), f"{lead_labels}groups, d_state]")
    _expect("C", C, (*lead, groups, d_state), f"{lead_labels}groups, d_state]")
    _expect("D", D, (heads,), "[heads]", optional=True)
    _expect("z", z, (*lead, heads, head_dim), f"{lead_labels}heads, head_dim]", optional=True)
    _expect("dt_bias", dt_bias, (heads,), "[heads]", optional=True)
    for name, value in (("dt_min", dt_min), ("dt_max", dt_max)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value != value):
            raise ValueError(f"{name}: expected a float (not NaN) or None, got {value!r}")
    if dt_min is not None and dt_max is not None and dt_min > dt_max:
        raise ValueError(f"dt_min: expected dt_min <= dt_max, got dt_min={dt_min} > dt_max={dt_max}")
    return lead[0], (lead[1] if with_t else 1)


def _ssm_state_dims(ssm_state, B) -> tuple[int, int, int, int, int]:
    """The standard step's ``(slots, heads, head_dim, d_state, groups)``, from ``ssm_state``
    ``[slots, heads, head_dim, d_state]`` and the groups of ``B`` ``[batch, groups, d_state]``."""
    if not isinstance(ssm_state, torch.Tensor) or ssm_state.dim() != 4:
        raise _shape_error("ssm_state", "[slots, heads, head_dim, d_state]", ssm_state)
    if not ssm_state.dtype.is_floating_point:
        raise ValueError(f"ssm_state: expected a floating-point tensor, got {ssm_state.dtype}")
    slots, heads, head_dim, d_state = ssm_state.shape
    groups = B.shape[1] if isinstance(B, torch.Tensor) and B.dim() == 3 else -1
    if groups < 1 or heads % groups != 0:
        raise _shape_error("B", f"[batch, groups, d_state={d_state}] with groups dividing heads={heads}", B)
    return slots, heads, head_dim, d_state, groups


def _check_flag(value, name: str) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected a bool, got {value!r}")


def _state_dims(state: Mamba2ReplayState) -> dict:
    if not isinstance(state, Mamba2ReplayState):
        raise ValueError(f"state: expected a Mamba2ReplayState, got {type(state).__name__}")
    state.check()
    _, heads, head_dim, d_state = state.checkpoint.shape
    groups = state.ring_B.shape[1]
    if heads % groups != 0:
        raise ValueError(f"state.ring_B: groups={groups} does not divide heads={heads}")
    return dict(heads=heads, head_dim=head_dim, d_state=d_state, groups=groups)


def _check_ring_dtypes(state: Mamba2ReplayState, x: torch.Tensor, B: torch.Tensor) -> None:
    # The ring holds exactly what later steps and the flush replay; a silent cast here would make
    # the replayed token differ from the one whose output this step returned.
    if x.dtype != state.ring_x.dtype:
        raise ValueError(f"x: expected the ring's activation dtype {state.ring_x.dtype}, got {x.dtype}")
    if B.dtype != state.ring_B.dtype:
        raise ValueError(f"B: expected the ring's dtype {state.ring_B.dtype}, got {B.dtype}")


# -- shared math --------------------------------------------------------------------------------------


def _process_dt(dt, dt_bias, dt_softplus: bool, dt_min, dt_max) -> torch.Tensor:
    """``dt`` as the recurrence uses it, float64, same shape as ``dt``."""
    dt = dt.to(_F64)
    if dt_bias is not None:
        dt = dt + dt_bias.to(_F64)
    if dt_softplus:
        dt = F.softplus(dt)
    if dt_min is not None or dt_max is not None:
        dt = dt.clamp(min=dt_min, max=dt_max)
    return dt


def _per_head(t: torch.Tensor, heads: int, dim: int) -> torch.Tensor:
    """Repeat a per-group tensor along ``dim`` so that head ``h`` reads group ``h // (heads/groups)``."""
    return t.repeat_interleave(heads // t.shape[dim], dim=dim)


def _finish_output(y, x, D, z, out_rows, batch_shape, out_dtype) -> torch.Tensor:
    """Add ``D x``, gate with ``silu(z)``, scatter the live rows into a zero ``[batch, ...]``."""
    if D is not None:
        y = y + D.to(_F64)[:, None] * x.to(_F64)
    if z is not None:
        y = y * F.silu(z.to(_F64))
    out = torch.zeros(batch_shape, dtype=out_dtype, device=y.device)
    out[out_rows] = y.to(out_dtype)
    return out


def _gather_ring(state: Mamba2ReplayState, slot_ids: torch.Tensor, lengths: torch.Tensor, A: torch.Tensor):
    """Float64 ring contents of ``slot_ids`` with entries at or past ``lengths`` zeroed.

    Returns ``v [n, heads, M, head_dim]`` (``dt_j x_j``), ``keys [n, groups, M, d_state]``
    (``B_j``), ``log_decay_cum [n, heads, M]`` (``G_j``) and ``valid [n, M]`` bool.
    Stale entries past the cursor may hold anything (old drafts), so they are masked, not
    multiplied by zero.
    """
    capacity = state.ring_x.shape[2]
    valid = torch.arange(capacity, device=slot_ids.device)[None, :] < lengths[:, None]
    dt = torch.where(valid[:, None, :], state.ring_dt[slot_ids].to(_F64), 0.0)
    x = torch.where(valid[:, None, :, None], state.ring_x[slot_ids].to(_F64), 0.0)
    keys = torch.where(valid[:, None, :, None], state.ring_B[slot_ids].to(_F64), 0.0)
    log_decay_cum = torch.cumsum(dt * A.to(_F64)[None, :, None], dim=-1)
    return x * dt[..., None], keys, log_decay_cum, valid


def _fold(state: Mamba2ReplayState, slot_ids: torch.Tensor, lengths: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """The state after the first ``lengths`` ring entries of each slot: ``[n, heads, head_dim, d_state]`` float64.

    ``S = exp(G_{m-1}) S_c + sum_{j<m} exp(G_{m-1} - G_j) dt_j x_j B_j^T`` with ``m = lengths``.
    """
    v, keys, log_decay_cum, valid = _gather_ring(state, slot_ids, lengths, A)
    total = log_decay_cum[..., -1]  # masked entries add 0, so the last element is G_{m-1}
    weight = torch.where(valid[:, None, :], torch.exp(total[..., None] - log_decay_cum), 0.0)
    checkpoint = state.checkpoint[slot_ids].to(_F64)
    keys = _per_head(keys, checkpoint.shape[1], dim=1)
    return torch.exp(total)[..., None, None] * checkpoint + (v * weight[..., None]).transpose(-1, -2) @ keys


def _fold_into_checkpoint(state: Mamba2ReplayState, slot_ids: torch.Tensor, lengths: torch.Tensor, A) -> None:
    if slot_ids.numel():
        state.checkpoint[slot_ids] = _fold(state, slot_ids, lengths, A).to(state.checkpoint.dtype)
        state.committed[slot_ids] = 0
        state.flush_at[slot_ids] = state.window


def _check_A(A, heads: int) -> None:
    _expect("A", A, (heads,), "[heads]")


# -- standard recurrence ------------------------------------------------------------------------------


@_doc
def mamba2_standard_step(
    ssm_state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_min: float | None = None,
    dt_max: float | None = None,
    state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
) -> torch.Tensor:
    """One token of the standard recurrence per row: read, update and write ``ssm_state[slot]``.

    Args:
        ssm_state: ``[slots, heads, head_dim, d_state]`` any float dtype, updated in place.{inputs}

    Returns:
        ``y``: ``[batch, heads, head_dim]`` in ``x.dtype``.
    """
    slots, heads, head_dim, d_state, groups = _ssm_state_dims(ssm_state, B)
    batch, _ = _check_inputs(
        x, dt, A, B, C, D, z, dt_bias, dt_min, dt_max,
        heads=heads, head_dim=head_dim, d_state=d_state, groups=groups, with_t=False,
    )
    _check_flag(dt_softplus, "dt_softplus")
    rows, slot_ids = live_rows(state_indices, batch, slots, pad_slot_id, device=x.device)

    dt = _process_dt(dt[rows], dt_bias, dt_softplus, dt_min, dt_max)  # [n, heads]
    decay = torch.exp(dt * A.to(_F64))
    keys = _per_head(B[rows].to(_F64), heads, dim=1)  # [n, heads, d_state]
    queries = _per_head(C[rows].to(_F64), heads, dim=1)
    x_live = x[rows].to(_F64)
    state = decay[..., None, None] * ssm_state[slot_ids].to(_F64) + (dt[..., None] * x_live)[..., None] * keys[:, :, None, :]
    ssm_state[slot_ids] = state.to(ssm_state.dtype)
    y = (state @ queries[..., None])[..., 0]
    return _finish_output(y, x_live, D, None if z is None else z[rows], rows, tuple(x.shape), x.dtype)


# -- ReplaySSM -----------------------------------------------------------------------------------------


@_doc_with_t
def mamba2_replay_verify(
    state: Mamba2ReplayState,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_min: float | None = None,
    dt_max: float | None = None,
    state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
) -> torch.Tensor:
    """Append ``T`` draft tokens per row behind the committed entries and return all ``T`` outputs.

    Draft ``i`` of a slot with ``c = committed[slot]`` goes to ring position ``c + i``; its output
    reads the checkpoint and ring entries ``0..c+i`` (output-only: the checkpoint, ``committed``
    and ``flush_at`` are not written). Follow with :func:`mamba2_replay_commit`.

    Args:
        state: the layer's :class:`Mamba2ReplayState`; ring entries ``c..c+T-1`` are written.{inputs}

    Returns:
        ``y``: ``[batch, T, heads, head_dim]`` in ``x.dtype``.

    Raises:
        ValueError: wrong shapes or dtypes, bad ``state_indices``, or ``committed + T`` over the
            ring's capacity for some slot. Nothing is written then.
    """
    dims = _state_dims(state)
    batch, T = _check_inputs(x, dt, A, B, C, D, z, dt_bias, dt_min, dt_max, with_t=True, **dims)
    _check_flag(dt_softplus, "dt_softplus")
    _check_ring_dtypes(state, x, B)
    rows, slot_ids = live_rows(state_indices, batch, state.slots, pad_slot_id, device=x.device)
    committed = state.committed[slot_ids].to(torch.int64)
    over = committed + T > state.capacity
    if bool(over.any()):
        slot = int(slot_ids[over][0])
        raise ValueError(
            f"x: T={T} draft tokens do not fit the ring of slot {slot}: committed="
            f"{int(state.committed[slot])} + T > capacity={state.capacity}"
        )

    # Append: ring position committed + i of each live row's slot.
    positions = committed[:, None] + torch.arange(T, device=x.device)[None, :]  # [n, T]
    slot_grid = slot_ids[:, None].expand(-1, T)
    processed_dt = _process_dt(dt[rows], dt_bias, dt_softplus, dt_min, dt_max)  # [n, T, heads]
    state.ring_x[slot_grid, :, positions] = x[rows]
    state.ring_dt[slot_grid, :, positions] = processed_dt.to(state.ring_dt.dtype)
    state.ring_B[slot_grid, :, positions] = B[rows]

    # Output-only evaluation from the ring as stored (so that a later flush replays exactly it).
    heads = dims["heads"]
    v, keys, log_decay_cum, _ = _gather_ring(state, slot_ids, committed + T, A)
    query_cum = torch.gather(log_decay_cum, 2, positions[:, None, :].expand(-1, heads, -1))  # [n, heads, T]
    queries = C[rows].to(_F64).permute(0, 2, 3, 1)  # [n, groups, d_state, T]
    scores = _per_head(keys @ queries, heads, dim=1)  # K^T Q per group, then per head: [n, heads, M, T]
    causal = torch.arange(state.capacity, device=x.device)[None, :, None] <= positions[:, None, :]  # [n, M, T]
    exponent = torch.where(causal[:, None], query_cum[:, :, None, :] - log_decay_cum[..., None], -torch.inf)
    decay_matrix = torch.exp(exponent)  # W: [n, heads, M, T]
    attended = decay_matrix * scores
    checkpoint = state.checkpoint[slot_ids].to(_F64)
    from_checkpoint = (checkpoint @ _per_head(queries, heads, dim=1)) * torch.exp(query_cum)[:, :, None, :]
    y = from_checkpoint + v.transpose(-1, -2) @ attended  # [n, heads, head_dim, T]
    y = y.permute(0, 3, 1, 2)  # [n, T, heads, head_dim]
    return _finish_output(y, x[rows], D, None if z is None else z[rows], rows, tuple(x.shape), x.dtype)


def mamba2_replay_commit(
    state: Mamba2ReplayState,
    num_accepted: torch.Tensor,
    state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    *,
    A: torch.Tensor,
    num_drafts: int | None = None,
) -> None:
    """Commit ``num_accepted`` ring entries per row; flush slots whose ``committed`` reaches ``flush_at``.

    ``committed += num_accepted``. A slot with ``committed >= flush_at`` folds its committed
    entries (only those: rejected drafts past them are dropped) into the checkpoint and restarts
    with ``committed = 0``, ``flush_at = window``.

    Args:
        state: the layer's :class:`Mamba2ReplayState`, updated in place.
        num_accepted: ``[batch]`` int32/int64, accepted drafts per row, ``>= 0``.
        state_indices: ``[batch]`` int32/int64 slot per row, or None (row ``i`` -> slot ``i``).
        pad_slot_id: rows with this index are skipped.
        A: ``[heads]`` float, ``-exp(A_log)``: the decay a flush folds with (keyword-only).
        num_drafts: the ``T`` of the preceding verify; when given, ``num_accepted <= T`` is checked.

    Raises:
        ValueError: bad shapes, ``num_accepted`` negative, above ``num_drafts`` or past the ring's
            capacity. Nothing is written then.
    """
    dims = _state_dims(state)
    _check_A(A, dims["heads"])
    check_num_drafts(num_drafts)
    if not isinstance(num_accepted, torch.Tensor) or num_accepted.dim() != 1:
        raise _shape_error("num_accepted", "[batch] int32/int64", num_accepted)
    if num_accepted.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"num_accepted: expected int32 or int64, got {num_accepted.dtype}")
    rows, slot_ids = live_rows(state_indices, num_accepted.shape[0], state.slots, pad_slot_id, device=num_accepted.device)
    accepted = num_accepted[rows].to(torch.int64)
    new_committed = state.committed[slot_ids].to(torch.int64) + accepted
    if bool((accepted < 0).any()):
        raise ValueError(f"num_accepted: expected values >= 0, got {num_accepted.tolist()}")
    if num_drafts is not None and bool((accepted > num_drafts).any()):
        raise ValueError(f"num_accepted: expected values <= num_drafts={num_drafts}, got {num_accepted.tolist()}")
    if bool((new_committed > state.capacity).any()):
        raise ValueError(
            f"num_accepted: committed + num_accepted exceeds the ring's capacity={state.capacity} "
            f"(committed={state.committed[slot_ids].tolist()}, num_accepted={accepted.tolist()})"
        )
    flushing = new_committed >= state.flush_at[slot_ids].to(torch.int64)
    state.committed[slot_ids] = new_committed.to(state.committed.dtype)
    _fold_into_checkpoint(state, slot_ids[flushing], new_committed[flushing], A)


@_doc
def mamba2_replay_step(
    state: Mamba2ReplayState,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_min: float | None = None,
    dt_max: float | None = None,
    state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
) -> torch.Tensor:
    """One ReplaySSM decode token per row: append, output from checkpoint + ring, flush when due.

    With ``c = committed[slot]``: the token goes to ring position ``c``; ``y`` reads the
    checkpoint and entries ``0..c``; ``committed = c + 1``; if ``c + 1 >= flush_at[slot]`` the
    entries ``0..c`` are folded into the checkpoint (``committed = 0``, ``flush_at = window``).
    Identical to :func:`mamba2_replay_verify` with ``T = 1`` followed by a commit of 1.

    Args:
        state: the layer's :class:`Mamba2ReplayState`, updated in place.{inputs}

    Returns:
        ``y``: ``[batch, heads, head_dim]`` in ``x.dtype``.
    """
    def with_t(t):
        return None if t is None else t.unsqueeze(1)

    for name, t, ndim in (("x", x, 3), ("dt", dt, 2), ("B", B, 3), ("C", C, 3), ("z", z, 3)):
        if t is not None and (not isinstance(t, torch.Tensor) or t.dim() != ndim):
            raise _shape_error(name, f"a {ndim}-d tensor [batch, ...] (one token per row)", t)
    y = mamba2_replay_verify(
        state, with_t(x), with_t(dt), A, with_t(B), with_t(C), D, with_t(z), dt_bias,
        dt_softplus, dt_min, dt_max, state_indices, pad_slot_id,
    )
    # Cannot fail: verify checked the inputs and that one more entry fits every slot's ring.
    mamba2_replay_commit(
        state, torch.ones(x.shape[0], dtype=torch.int32, device=x.device), state_indices, pad_slot_id, A=A
    )
    return y[:, 0]


def mamba2_replay_flush(
    state: Mamba2ReplayState,
    state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    *,
    A: torch.Tensor,
) -> None:
    """Fold the committed ring entries of these slots into their checkpoints now.

    Afterwards ``committed = 0`` and ``flush_at = window`` for every addressed slot (a slot with
    nothing committed keeps its checkpoint and starts a full window). Uncommitted drafts are dropped.

    Args:
        state: the layer's :class:`Mamba2ReplayState`, updated in place.
        state_indices: ``[batch]`` int32/int64 slots, or None for slots ``0..slots-1``.
        pad_slot_id: entries with this index are skipped.
        A: ``[heads]`` float, ``-exp(A_log)`` (keyword-only).
    """
    dims = _state_dims(state)
    _check_A(A, dims["heads"])
    batch = state.slots if state_indices is None else _batch_of(state_indices)
    _, slot_ids = live_rows(state_indices, batch, state.slots, pad_slot_id, device=state.checkpoint.device)
    _fold_into_checkpoint(state, slot_ids, state.committed[slot_ids].to(torch.int64), A)


def mamba2_replay_materialize(
    state: Mamba2ReplayState,
    state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    *,
    A: torch.Tensor,
) -> torch.Tensor:
    """The current recurrent state ``S_t`` of each row's slot (checkpoint + committed entries), unwritten.

    Args:
        state: the layer's :class:`Mamba2ReplayState` (not modified).
        state_indices: ``[batch]`` int32/int64 slots, or None for slots ``0..slots-1``.
        pad_slot_id: rows with this index get zeros.
        A: ``[heads]`` float, ``-exp(A_log)`` (keyword-only).

    Returns:
        ``[batch, heads, head_dim, d_state]`` in the checkpoint's dtype: the state the standard
        recurrence would hold after the same tokens.
    """
    dims = _state_dims(state)
    _check_A(A, dims["heads"])
    batch = state.slots if state_indices is None else _batch_of(state_indices)
    rows, slot_ids = live_rows(state_indices, batch, state.slots, pad_slot_id, device=state.checkpoint.device)
    out = torch.zeros((batch, *state.checkpoint.shape[1:]), dtype=state.checkpoint.dtype, device=state.checkpoint.device)
    out[rows] = _fold(state, slot_ids, state.committed[slot_ids].to(torch.int64), A).to(out.dtype)
    return out


def _batch_of(state_indices) -> int:
    if not isinstance(state_indices, torch.Tensor) or state_indices.dim() != 1:
        raise _shape_error("state_indices", "a [batch] int32/int64 tensor or None", state_indices)
    return state_indices.shape[0]
