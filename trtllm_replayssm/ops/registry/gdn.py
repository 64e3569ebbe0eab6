"""``torch.ops.replayssm.gdn_*``: the Gated DeltaNet decode ops as ``torch.library`` custom ops.

KDA's ops (``registry/kda.py``) are the same two ops under other names, made by
:func:`define_delta_rule_ops`: the reference is told the kind, the kernels tell it by the rank of
``a`` and ``ring_g``, which the CUDA dispatch checks against the op's kind. Each op takes the
state as flat tensors (custom ops cannot take dataclasses), declares what it writes in
``mutates_args`` and has a fake implementation, so ``torch.compile(fullgraph=True)`` and
CUDA-graph capture trace it. CUDA tensors go to the Triton kernels of ``ops/gdn/decode.py``, CPU
tensors to the float64 reference. Arguments are validated by the public wrappers
(``ops/gdn/__init__.py``, ``ops/kda/__init__.py``), not here.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["define_delta_rule_ops", "gdn_replay_step", "gdn_standard_step"]

_REPLAY_MUTATES = ("checkpoint", "ring_k", "ring_v", "ring_beta", "ring_g", "ring_u", "committed", "flush_at")


def define_delta_rule_ops(kind: str):
    """Register ``replayssm::{kind}_standard_step`` and ``{kind}_replay_step``; returns both."""
    from ..gdn import reference

    @torch.library.custom_op(f"replayssm::{kind}_standard_step", mutates_args=("ssm_state",))
    def standard_step(
        ssm_state: Tensor, q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, A_log: Tensor,
        dt_bias: Optional[Tensor], state_indices: Optional[Tensor], pad_slot_id: int, scale: Optional[float],
    ) -> Tensor:
        return reference.delta_rule_standard_step(
            ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, kind == "kda"
        )

    def check_kind(a):
        if (a.dim() == 3) != (kind == "kda"):
            shape = "[batch, HV, d_k] (a decay per channel)" if kind == "kda" else "[batch, HV] (a decay per head)"
            raise ValueError(f"a: replayssm::{kind} expects {shape}, got {tuple(a.shape)}")

    @standard_step.register_kernel("cuda")
    def _(ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale):
        from ..gdn import decode

        check_kind(a)
        return decode.delta_standard_step(ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale)

    @standard_step.register_fake
    def _(ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale):
        return torch.empty_like(v)

    @torch.library.custom_op(f"replayssm::{kind}_replay_step", mutates_args=_REPLAY_MUTATES)
    def replay_step(
        checkpoint: Tensor, ring_k: Tensor, ring_v: Tensor, ring_beta: Tensor, ring_g: Tensor, ring_u: Tensor,
        committed: Tensor, flush_at: Tensor, window: int, q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor,
        A_log: Tensor, dt_bias: Optional[Tensor], state_indices: Optional[Tensor], pad_slot_id: int,
        scale: Optional[float], refold: bool,
    ) -> Tensor:
        from ..gdn.state import DeltaRuleReplayState

        state = DeltaRuleReplayState(
            checkpoint=checkpoint, committed=committed, flush_at=flush_at, window=window, ring_k=ring_k,
            ring_v=ring_v, ring_beta=ring_beta, ring_g=ring_g, ring_u=ring_u,
        )
        return reference.delta_rule_replay_step(
            state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold, kind == "kda"
        )

    @replay_step.register_kernel("cuda")
    def _(checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window, q, k, v, a, b,
          A_log, dt_bias, state_indices, pad_slot_id, scale, refold):
        from ..gdn import decode

        check_kind(a)
        return decode.delta_replay_step(
            checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window,
            q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold,
        )

    @replay_step.register_fake
    def _(checkpoint, ring_k, ring_v, ring_beta, ring_g, ring_u, committed, flush_at, window, q, k, v, a, b,
          A_log, dt_bias, state_indices, pad_slot_id, scale, refold):
        return torch.empty_like(v)

    return standard_step, replay_step


gdn_standard_step, gdn_replay_step = define_delta_rule_ops("gdn")
