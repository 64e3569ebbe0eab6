"""Argument checks and dispatch shared by the public GDN and KDA wrappers.

Checks need no device synchronisation (nothing reads a CUDA tensor's values), so the wrappers
can be called inside CUDA-graph capture; slot values in ``state_indices`` are the caller's
contract on CUDA (the CPU reference checks them).
"""

from __future__ import annotations

import torch

from .._slots import check_pad_slot_id
from . import reference

#: Head dimensions the Triton kernels are built for (powers of two: one tile spans ``d_k``).
KERNEL_HEAD_DIMS = (16, 32, 64, 128, 256)


def _check_kernel_layout(state_tensors: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor | None],
                         state_indices, d_k: int, d_v: int) -> None:
    device = next(iter(state_tensors.values())).device
    for name, t in {**state_tensors, **inputs}.items():
        if t is None:
            continue
        if t.device != device:
            raise ValueError(f"{name}: expected a tensor on {device} like the state, got {t.device}")
    if state_indices is not None and not isinstance(state_indices, torch.Tensor):
        raise reference._shape_error("state_indices", f"[batch={inputs['q'].shape[0]}] int32/int64 or None",
                                     state_indices)
    if device.type != "cuda":
        return
    for name, dim in (("d_k", d_k), ("d_v", d_v)):
        if dim not in KERNEL_HEAD_DIMS:
            raise ValueError(f"{name}: the CUDA kernels support {KERNEL_HEAD_DIMS}, got {dim}")
    for name, t in state_tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"{name}: expected a contiguous tensor")
    for name in ("q", "k", "v", "a"):
        if inputs[name].stride(-1) != 1:
            raise ValueError(f"{name}: expected a unit stride on the last axis, got {inputs[name].stride()}")
    for name in ("A_log", "dt_bias"):
        if inputs[name] is not None and not inputs[name].is_contiguous():
            raise ValueError(f"{name}: expected a contiguous tensor")
    if state_indices is not None:
        if not isinstance(state_indices, torch.Tensor) or state_indices.dim() != 1 \
                or state_indices.shape[0] != inputs["q"].shape[0]:
            raise reference._shape_error("state_indices", f"[batch={inputs['q'].shape[0]}] int32/int64", state_indices)
        if state_indices.dtype not in (torch.int32, torch.int64) or state_indices.device != device:
            raise ValueError(f"state_indices: expected int32/int64 on {device}, got {state_indices.dtype} "
                             f"on {state_indices.device}")
    elif inputs["q"].shape[0] > next(iter(state_tensors.values())).shape[0]:
        raise ValueError(f"state_indices: None maps row i to slot i, but batch={inputs['q'].shape[0]} > slots")


def standard_step(kind, per_channel, ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale):
    if not isinstance(ssm_state, torch.Tensor) or ssm_state.dim() != 4:
        raise reference._shape_error("ssm_state", "[slots, HV, d_v, d_k]", ssm_state)
    if not ssm_state.dtype.is_floating_point:
        raise ValueError(f"ssm_state: expected a floating-point tensor, got {ssm_state.dtype}")
    _, HV, d_v, d_k = ssm_state.shape
    reference._check_inputs(q, k, v, a, b, A_log, dt_bias, scale, HV=HV, H=None, d_k=d_k, d_v=d_v,
                            per_channel_decay=per_channel, drafts=False)
    inputs = dict(q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias)
    _check_kernel_layout({"ssm_state": ssm_state}, inputs, state_indices, d_k, d_v)
    op = getattr(torch.ops.replayssm, f"{kind}_standard_step")
    return op(ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, check_pad_slot_id(pad_slot_id),
              None if scale is None else float(scale))


def default_refold(per_channel: bool, batch: int) -> bool:
    """What ``refold=None`` resolves to for a ``batch``-row step of GDN (``per_channel=False``)
    or KDA: the faster of the two folds, both exact while outputs read the checkpoint itself
    (this state has no read copy; GPU test ``test_refold_choice_gpu``: the cached ``u`` are what a
    refold recomputes, to fp32 rounding). A read copy's rounding in ``u`` would force the refold
    (math.md section 4). Both kinds fold the cached ``u`` at every batch (below
    ``decode.WRITE_THROUGH_BELOW`` the write-through step has no flush to choose for). H200,
    amortized over each flush's own cycle (RESULTS.md):

    - GDN: batch 256 / 128 185.5 / 100.4 us against 201.6 / 106.7 refolding;
    - KDA, fold-first (``StagedVariant.fold_first``, a head per flush item): 207.1 against 219.4
      us at 256; 112.6 / 63.7 us against 116.9 / 66.3 at 128 / 64 (staggered 109.4 / 60.9
      against 120.3 / 64.4), the same order in the three plain runs since the whole-head item.
    """
    return False


def replay_step(kind, per_channel, state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold):
    reference._check_state(state, per_channel)
    _, HV, d_v, d_k = state.checkpoint.shape
    reference._check_inputs(q, k, v, a, b, A_log, dt_bias, scale, HV=HV, H=state.ring_k.shape[1], d_k=d_k,
                            d_v=d_v, per_channel_decay=per_channel, drafts=False)
    if refold is None:
        refold = default_refold(per_channel, q.shape[0])
    if not isinstance(refold, bool):
        raise ValueError(f"refold: expected a bool or None, got {type(refold).__name__}")
    inputs = dict(q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias)
    _check_kernel_layout(state.tensors(), inputs, state_indices, d_k, d_v)
    op = getattr(torch.ops.replayssm, f"{kind}_replay_step")
    return op(state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
              state.committed, state.flush_at, state.window, q, k, v, a, b, A_log, dt_bias, state_indices,
              check_pad_slot_id(pad_slot_id), None if scale is None else float(scale), refold)


__all__ = ["KERNEL_HEAD_DIMS", "default_refold", "replay_step", "standard_step"]
