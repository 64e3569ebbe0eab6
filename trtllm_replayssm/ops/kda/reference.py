"""Plain-PyTorch reference of Kimi Delta Attention decode, standard and ReplaySSM: the oracle.

KDA is the gated delta rule with one log-decay per key channel instead of one per head::

    g = -exp(A_log[h]) * softplus(a + dt_bias)          a: [HV, d_k], dt_bias: [HV * d_k]
    S_t = S_{t-1} Diag(e^{g_t}) (I - beta k k^T) + beta v k^T

The algebra (normalisation, the recurrence, the window's triangular solve, outputs, folding)
lives once in ``ops/gdn/reference.py``, written with the decay broadcast over ``d_k``; these
functions call it with ``per_channel_decay=True``. Conventions (float64 inside, padded rows,
checks before writes) as there.
"""

from __future__ import annotations

import torch

from ..gdn import reference as _delta
from ..gdn.state import DeltaRuleReplayState

__all__ = [
    "kda_standard_step",
    "kda_replay_step",
    "kda_replay_verify",
    "kda_replay_commit",
    "kda_replay_flush",
    "kda_replay_materialize",
]


def kda_standard_step(
    ssm_state: torch.Tensor, q, k, v, a, b, A_log, dt_bias=None, state_indices=None, pad_slot_id: int = -1,
    scale: float | None = None,
) -> torch.Tensor:
    """One token of the standard KDA recurrence: reads and writes ``ssm_state`` in place.

    Args:
        ssm_state: ``[slots, HV, d_v, d_k]``, any float dtype (rewritten in it).{inputs}

    Returns:
        ``o [batch, HV, d_v]`` in ``v.dtype``.
    """
    return _delta.delta_rule_standard_step(
        ssm_state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, True
    )


def kda_replay_step(
    state: DeltaRuleReplayState, q, k, v, a, b, A_log, dt_bias=None, state_indices=None, pad_slot_id: int = -1,
    scale: float | None = None, refold: bool = True,
) -> torch.Tensor:
    """One ReplaySSM decode token per row (``kda_replay_verify`` with ``T = 1`` + commit of 1).

    Args:
        state: a KDA :class:`DeltaRuleReplayState` (``ring_g [slots, HV, capacity, d_k]``).{inputs}
        refold: how a flush made by this step folds the window (see :func:`kda_replay_flush`).

    Returns:
        ``o [batch, HV, d_v]`` in ``v.dtype``.
    """
    return _delta.delta_rule_replay_step(
        state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, refold, True
    )


def kda_replay_verify(
    state: DeltaRuleReplayState, q, k, v, a, b, A_log, dt_bias=None, state_indices=None, pad_slot_id: int = -1,
    scale: float | None = None,
) -> torch.Tensor:
    """Append ``T`` drafts and return their outputs, output-only (one triangular solve per
    head for the drafts' corrected values); ``committed`` is unchanged.

    Args:
        state: a KDA :class:`DeltaRuleReplayState`; needs ``committed + T <= capacity``.{inputs}

    Returns:
        ``o [batch, T, HV, d_v]`` in ``v.dtype``.
    """
    return _delta.delta_rule_replay_verify(
        state, q, k, v, a, b, A_log, dt_bias, state_indices, pad_slot_id, scale, True
    )


def kda_replay_commit(
    state: DeltaRuleReplayState, num_accepted: torch.Tensor, state_indices=None, pad_slot_id: int = -1,
    refold: bool = True, *, num_drafts: int | None = None,
) -> None:
    """``committed += num_accepted``; slots reaching ``flush_at`` flush their committed entries.

    Args:
        state: a KDA :class:`DeltaRuleReplayState`.
        num_accepted: ``[batch]`` int32/int64 in ``[0, capacity - committed]``.
        state_indices: ``[batch]`` int32/int64 or None.  pad_slot_id: rows left alone.
        refold: how the flushes fold (see :func:`kda_replay_flush`).
        num_drafts: the ``T`` of the preceding verify; when given, ``num_accepted <= T`` is checked.
    """
    _delta.delta_rule_replay_commit(state, num_accepted, state_indices, pad_slot_id, refold, True, num_drafts)


def kda_replay_flush(
    state: DeltaRuleReplayState, state_indices: torch.Tensor, pad_slot_id: int = -1, refold: bool = True
) -> None:
    """Fold the committed entries of these slots into the checkpoint now (``refold=True``:
    recompute the corrected values from the checkpoint and raw ``k, v, beta, g``, math.md
    section 4; ``False``: fold the cached ``ring_u``).

    Args:
        state: a KDA :class:`DeltaRuleReplayState`.
        state_indices: ``[batch]`` int32/int64 slots (``pad_slot_id`` entries skipped).
    """
    _delta.delta_rule_replay_flush(state, state_indices, pad_slot_id, refold, True)


def kda_replay_materialize(
    state: DeltaRuleReplayState, state_indices: torch.Tensor, pad_slot_id: int = -1, refold: bool = True
) -> torch.Tensor:
    """The current state ``S_t`` of each slot, nothing written.

    Args:
        state: a KDA :class:`DeltaRuleReplayState`.
        state_indices: ``[batch]`` int32/int64 slots.  refold: as in :func:`kda_replay_flush`.

    Returns:
        ``[batch, HV, d_v, d_k]`` in the checkpoint dtype; zero for padded rows.
    """
    return _delta.delta_rule_replay_materialize(state, state_indices, pad_slot_id, refold, True)


for _op in (kda_standard_step, kda_replay_step, kda_replay_verify):
    _op.__doc__ = _op.__doc__.format(inputs=_delta.inputs_doc(True, drafts=_op is kda_replay_verify))
del _op
