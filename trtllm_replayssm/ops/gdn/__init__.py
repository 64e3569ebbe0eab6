"""Gated DeltaNet decode ops (Qwen3-Next / Qwen3.5): standard and ReplaySSM steps.

The wrappers check their arguments (a ValueError names the argument; a rejected call changes
nothing), then call ``torch.ops.replayssm.gdn_*``: the Triton kernels of ``decode.py`` on CUDA,
the float64 reference of ``reference.py`` on CPU. Inputs are the raw projections (ops/README.md):

    q, k: ``[batch, H, d_k]``;  v: ``[batch, HV, d_v]``;  a, b: ``[batch, HV]``;
    A_log: ``[HV]``;  dt_bias: ``[HV]`` or None;  state_indices: ``[batch]`` int32/int64 or None.

The l2-normalisation of q and k, ``g = -exp(A_log) * softplus(a + dt_bias)`` and
``beta = sigmoid(b)`` are computed inside the op.
"""

from __future__ import annotations

import torch

from ..registry import gdn as _registry  # noqa: F401  (registers torch.ops.replayssm.gdn_*)
from . import _wrappers
from .state import DeltaRuleReplayState

from .reference import gdn_replay_materialize  # plain torch on any device: no kernel needed

__all__ = ["DeltaRuleReplayState", "gdn_replay_step", "gdn_standard_step", "gdn_replay_materialize"]


def gdn_standard_step(ssm_state: torch.Tensor, q, k, v, a, b, A_log, dt_bias=None, state_indices=None,
                      pad_slot_id: int = -1, scale: float | None = None) -> torch.Tensor:
    """One token of the standard gated delta rule; ``ssm_state [slots, HV, d_v, d_k]`` is read
    and rewritten in place. Returns ``o [batch, HV, d_v]`` in ``v.dtype``."""
    return _wrappers.standard_step("gdn", False, ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices,
                                   pad_slot_id, scale)


def gdn_replay_step(state: DeltaRuleReplayState, q, k, v, a, b, A_log, dt_bias=None, state_indices=None,
                    pad_slot_id: int = -1, scale: float | None = None, refold: bool | None = None) -> torch.Tensor:
    """One ReplaySSM decode token per row (non-flush or flush per slot, one launch on CUDA).

    ``state``: a GDN :class:`DeltaRuleReplayState`, updated in place. ``refold=True`` refolds a
    flushing slot's window from the checkpoint and the raw ring; ``False`` folds the cached
    ``ring_u``; ``None`` (default) picks the faster of the two while outputs read the checkpoint
    itself (every state here: no read copy yet), where both are the same fp32 recurrence: the
    cached ``u``, for both kinds (H200, batch 256: GDN 186 against 202 us amortized, KDA
    fold-first 207 against 219 us; ``_wrappers.default_refold``).
    Returns ``o [batch, HV, d_v]`` in ``v.dtype``.
    """
    return _wrappers.replay_step("gdn", False, state, q, k, v, a, b, A_log, dt_bias, state_indices,
                                 pad_slot_id, scale, refold)
