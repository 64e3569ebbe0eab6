"""Mamba-2 decode ops: public wrappers that validate arguments, then call ``torch.ops.replayssm``.

``mamba2_standard_step`` is the standard recurrence (vLLM's / TensorRT-LLM's
``selective_state_update``: the state is read and written every token), kept as the baseline.
``mamba2_replay_step`` is the ReplaySSM step: non-flush rows read the checkpoint and append to
the ring, rows whose window fills fold the ring into the checkpoint, all rows of a batch in the
same launch(es). From batch 12 the step is a per-row ring launch, then one program per
checkpoint tile, the flush rows' tiles in a launch of their own (``decode_staged.py``; with
``d_state`` 256 from batch 128, one launch of ``decode_v4.py`` at 16-127); below that, where
the step is latency-bound and the replay saves no bandwidth, every step folds its token into the
checkpoint (a flush at every token: the cursors stay at ``(0, window)``, outputs and materialised
states are those of the plain replay); ``decode.launch_config`` picks, from measurements on an
H200 (benchmarks/RESULTS.md).

Checks here look only at shapes, dtypes, devices and strides (host metadata), so a call never
synchronises with the GPU and can be captured in a CUDA graph. Slot ids in ``state_indices``
are trusted on the GPU (rows equal to ``pad_slot_id`` are skipped); on the CPU the reference
checks them too.
"""

from __future__ import annotations

import math

import torch

from .. import registry  # noqa: F401  (registers torch.ops.replayssm.*)
from .._slots import check_pad_slot_id
from .reference import _check_flag, _check_inputs, _check_ring_dtypes, _shape_error, _ssm_state_dims, _state_dims
from .state import Mamba2ReplayState, ring_dt_layout_of

from .reference import mamba2_replay_materialize  # plain torch on any device: no kernel needed

__all__ = ["Mamba2ReplayState", "mamba2_replay_step", "mamba2_standard_step", "mamba2_replay_materialize"]

#: Checkpoint dtypes the kernels read and write (lower precisions keep this layout).
KERNEL_STATE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Largest head_dim / d_state a kernel tile covers.
MAX_DIM = 256


def _check_state_indices(state_indices, batch: int) -> None:
    if state_indices is None:
        return
    if not isinstance(state_indices, torch.Tensor) or tuple(state_indices.shape) != (batch,):
        raise _shape_error("state_indices", f"[batch] = [{batch}] int32/int64 or None", state_indices)
    if state_indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"state_indices: expected int32 or int64, got {state_indices.dtype}")


def _check_kernel_layout(state_tensors: dict, inputs: dict, head_dim: int, d_state: int) -> None:
    """What the Triton kernels need beyond the reference's shape checks: one device, dtypes
    they support, unit stride along the last axis (and contiguous state tensors; Mamba-2's
    ``ring_dt`` in either of its layouts)."""
    device = next(iter(state_tensors.values())).device
    for name, t in {**state_tensors, **inputs}.items():
        if t is not None and t.device != device:
            raise ValueError(f"{name}: expected a tensor on {device} (where the state lives), got {t.device}")
    if device.type != "cuda":
        return
    for name, t in state_tensors.items():
        if name == "ring_dt" and t.dim() == 3 and ring_dt_layout_of(t) is not None:
            continue  # either storage order (state.RING_DT_LAYOUTS)
        if not t.is_contiguous():
            extra = " or stored entries outermost (state.RING_DT_LAYOUTS)" if name == "ring_dt" else ""
            raise ValueError(f"{name}: expected a contiguous tensor{extra}, got strides {t.stride()}")
    for name, t in inputs.items():
        if t is not None and t.dim() > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name}: expected unit stride along the last axis, got strides {t.stride()}")
    for name in ("checkpoint", "ssm_state"):
        t = state_tensors.get(name)
        if t is not None and t.dtype not in KERNEL_STATE_DTYPES:
            raise ValueError(f"{name}: expected one of {KERNEL_STATE_DTYPES}, got {t.dtype}")
    if head_dim > MAX_DIM or d_state > MAX_DIM:
        raise ValueError(
            f"x: expected head_dim and d_state <= {MAX_DIM}, got head_dim={head_dim}, d_state={d_state}"
        )
    for name in ("committed", "flush_at"):
        t = state_tensors.get(name)
        if t is not None and t.dtype != torch.int32:
            raise ValueError(f"state.{name}: expected int32, got {t.dtype}")


def _clamp(value, name: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name}: expected a float (not NaN) or None, got {value!r}")
    return float(value)


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
    """One token of the standard Mamba-2 recurrence per row; ``ssm_state`` is updated in place.

    Args:
        ssm_state: ``[slots, heads, head_dim, d_state]`` fp32 / fp16 / bf16.
        x: ``[batch, heads, head_dim]`` bf16 / fp16 / fp32.
        dt: ``[batch, heads]`` float, raw (before ``dt_bias``, softplus and the clamp).
        A: ``[heads]`` float, ``-exp(A_log)``.
        B, C: ``[batch, groups, d_state]`` float; head ``h`` reads group ``h // (heads / groups)``.
        D: ``[heads]`` float or None (``y += D_h x``).
        z: ``[batch, heads, head_dim]`` or None (``y *= silu(z)``).
        dt_bias: ``[heads]`` float or None.
        dt_softplus: apply softplus to ``dt + dt_bias``.
        dt_min, dt_max: clamp of the processed ``dt``, or None.
        state_indices: ``[batch]`` int32/int64 slot of each row, or None (row ``i`` -> slot ``i``).
        pad_slot_id: rows with this slot id get a zero output and touch no state.

    Returns:
        ``y``: ``[batch, heads, head_dim]`` in ``x.dtype``.
    """
    _, heads, head_dim, d_state, groups = _ssm_state_dims(ssm_state, B)
    dt_min, dt_max = _clamp(dt_min, "dt_min"), _clamp(dt_max, "dt_max")
    _check_flag(dt_softplus, "dt_softplus")
    pad_slot_id = check_pad_slot_id(pad_slot_id)
    batch, _ = _check_inputs(
        x, dt, A, B, C, D, z, dt_bias, dt_min, dt_max,
        heads=heads, head_dim=head_dim, d_state=d_state, groups=groups, with_t=False,
    )
    _check_state_indices(state_indices, batch)
    _check_kernel_layout(
        {"ssm_state": ssm_state},
        {"x": x, "dt": dt, "A": A, "B": B, "C": C, "D": D, "z": z, "dt_bias": dt_bias, "state_indices": state_indices},
        head_dim, d_state,
    )
    return torch.ops.replayssm.mamba2_standard_step(
        ssm_state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id
    )


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
    """One ReplaySSM decode token per row, every row of the batch in one launch.

    With ``c = state.committed[slot]``: the token's ``x, dt, B`` go to ring position ``c``; ``y``
    is computed from the checkpoint and ring entries ``0..c`` without writing the state;
    ``committed = c + 1``; if ``c + 1 >= flush_at[slot]`` the ring is folded into the fp32
    checkpoint (``committed = 0``, ``flush_at = window``).

    Args:
        state: the layer's :class:`Mamba2ReplayState` (``checkpoint [slots, heads, head_dim,
            d_state]``, ``ring_x [slots, heads, capacity, head_dim]``, ``ring_dt [slots, heads,
            capacity]`` fp32, ``ring_B [slots, groups, capacity, d_state]``, ``committed`` /
            ``flush_at [slots]`` int32), updated in place.
        x: ``[batch, heads, head_dim]`` in ``state.ring_x.dtype`` (bf16 / fp16 / fp32).
        dt: ``[batch, heads]`` float, raw (before ``dt_bias``, softplus and the clamp).
        A: ``[heads]`` float, ``-exp(A_log)``.
        B: ``[batch, groups, d_state]`` in ``state.ring_B.dtype``.
        C: ``[batch, groups, d_state]`` float.
        D: ``[heads]`` float or None.
        z: ``[batch, heads, head_dim]`` or None (output gate ``silu(z)``).
        dt_bias: ``[heads]`` float or None.
        dt_softplus: apply softplus to ``dt + dt_bias``.
        dt_min, dt_max: clamp of the processed ``dt``, or None.
        state_indices: ``[batch]`` int32/int64 slot of each row, or None (row ``i`` -> slot ``i``).
        pad_slot_id: rows with this slot id get a zero output and touch no state.

    Returns:
        ``y``: ``[batch, heads, head_dim]`` in ``x.dtype``.
    """
    dims = _state_dims(state)
    dt_min, dt_max = _clamp(dt_min, "dt_min"), _clamp(dt_max, "dt_max")
    _check_flag(dt_softplus, "dt_softplus")
    pad_slot_id = check_pad_slot_id(pad_slot_id)
    batch, _ = _check_inputs(x, dt, A, B, C, D, z, dt_bias, dt_min, dt_max, with_t=False, **dims)
    _check_ring_dtypes(state, x, B)
    _check_state_indices(state_indices, batch)
    if state.ring_dt.dtype != torch.float32:
        raise ValueError(f"state.ring_dt: expected float32, got {state.ring_dt.dtype}")
    _check_kernel_layout(
        state.tensors(),
        {"x": x, "dt": dt, "A": A, "B": B, "C": C, "D": D, "z": z, "dt_bias": dt_bias, "state_indices": state_indices},
        dims["head_dim"], dims["d_state"],
    )
    return torch.ops.replayssm.mamba2_replay_step(
        state.checkpoint, state.ring_x, state.ring_dt, state.ring_B, state.committed, state.flush_at,
        state.window, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id,
    )
