"""Kimi Delta Attention decode ops (Kimi Linear): GDN's ops with a per-channel decay.

Inputs as ``ops/gdn`` except ``a: [batch, HV, d_k]`` and ``dt_bias: [HV * d_k]`` or None:
``g = -exp(A_log[h]) * softplus(a + dt_bias)`` per key channel. CUDA runs the shared Triton
kernels of ``ops/gdn/decode.py`` with the per-channel switch on; CPU runs the reference.
"""

from __future__ import annotations

import torch

from ..gdn import _wrappers
from ..gdn.state import DeltaRuleReplayState
from ..registry import kda as _registry  # noqa: F401  (registers torch.ops.replayssm.kda_*)
from .state import KDAReplayState, allocate

from .reference import kda_replay_materialize  # plain torch on any device: no kernel needed

__all__ = ["KDAReplayState", "allocate", "kda_replay_step", "kda_standard_step", "kda_replay_materialize"]


def kda_standard_step(ssm_state: torch.Tensor, q, k, v, a, b, A_log, dt_bias=None, state_indices=None,
                      pad_slot_id: int = -1, scale: float | None = None) -> torch.Tensor:
    """One token of the standard KDA recurrence; ``ssm_state [slots, HV, d_v, d_k]`` is read and
    rewritten in place. Returns ``o [batch, HV, d_v]`` in ``v.dtype``."""
    return _wrappers.standard_step("kda", True, ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices,
                                   pad_slot_id, scale)


def kda_replay_step(state: DeltaRuleReplayState, q, k, v, a, b, A_log, dt_bias=None, state_indices=None,
                    pad_slot_id: int = -1, scale: float | None = None, refold: bool | None = None) -> torch.Tensor:
    """One ReplaySSM decode token per row; ``state`` from :func:`allocate` (``ring_g`` per
    channel). ``refold`` as in :func:`trtllm_replayssm.ops.gdn.gdn_replay_step`."""
    return _wrappers.replay_step("kda", True, state, q, k, v, a, b, A_log, dt_bias, state_indices,
                                 pad_slot_id, scale, refold)
