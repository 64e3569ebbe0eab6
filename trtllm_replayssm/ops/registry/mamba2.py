"""``torch.ops.replayssm.mamba2_*``: the Mamba-2 decode ops as ``torch.library`` custom ops.

Each op takes the state as flat tensors (custom ops cannot take dataclasses), declares the
tensors it writes in ``mutates_args``, and has a fake implementation beside it so that
``torch.compile(fullgraph=True)`` traces it. CUDA tensors go to the Triton kernels of
``ops/mamba2/decode.py``; CPU tensors go to the float64 reference. Arguments are validated by
the public wrappers in ``ops/mamba2/__init__.py``, not here.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["mamba2_replay_step", "mamba2_standard_step"]

_REPLAY_MUTATES = ("checkpoint", "ring_x", "ring_dt", "ring_B", "committed", "flush_at")


@torch.library.custom_op("replayssm::mamba2_standard_step", mutates_args=("ssm_state",))
def mamba2_standard_step(
    ssm_state: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
    D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor], dt_softplus: bool,
    dt_min: Optional[float], dt_max: Optional[float], state_indices: Optional[Tensor], pad_slot_id: int,
) -> Tensor:
    from ..mamba2 import reference

    return reference.mamba2_standard_step(
        ssm_state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id
    )


@mamba2_standard_step.register_kernel("cuda")
def _(ssm_state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id):
    from ..mamba2 import decode

    return decode.standard_step(
        ssm_state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id
    )


@mamba2_standard_step.register_fake
def _(ssm_state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id):
    return torch.empty_like(x)


@torch.library.custom_op("replayssm::mamba2_replay_step", mutates_args=_REPLAY_MUTATES)
def mamba2_replay_step(
    checkpoint: Tensor, ring_x: Tensor, ring_dt: Tensor, ring_B: Tensor, committed: Tensor, flush_at: Tensor,
    window: int, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
    D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor], dt_softplus: bool,
    dt_min: Optional[float], dt_max: Optional[float], state_indices: Optional[Tensor], pad_slot_id: int,
) -> Tensor:
    from ..mamba2 import reference
    from ..mamba2.state import Mamba2ReplayState

    state = Mamba2ReplayState(
        checkpoint=checkpoint, committed=committed, flush_at=flush_at, window=window,
        ring_x=ring_x, ring_dt=ring_dt, ring_B=ring_B,
    )
    return reference.mamba2_replay_step(
        state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id
    )


@mamba2_replay_step.register_kernel("cuda")
def _(checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, window, x, dt, A, B, C, D, z, dt_bias,
      dt_softplus, dt_min, dt_max, state_indices, pad_slot_id):
    from ..mamba2 import decode

    return decode.replay_step(
        checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, window,
        x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_min, dt_max, state_indices, pad_slot_id,
    )


@mamba2_replay_step.register_fake
def _(checkpoint, ring_x, ring_dt, ring_B, committed, flush_at, window, x, dt, A, B, C, D, z, dt_bias,
      dt_softplus, dt_min, dt_max, state_indices, pad_slot_id):
    return torch.empty_like(x)
