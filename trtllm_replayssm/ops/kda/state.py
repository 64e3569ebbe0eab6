"""KDA keeps the delta-rule state of ``ops/gdn/state.py`` with a per-channel ``ring_g``."""

from __future__ import annotations

from ..gdn.state import DeltaRuleReplayState

__all__ = ["KDAReplayState", "allocate"]

KDAReplayState = DeltaRuleReplayState


def allocate(slots, heads, d_k, d_v, config=None, *, k_heads=None, **kwargs) -> DeltaRuleReplayState:
    """Zero KDA state: ``ring_g`` is ``[slots, heads, capacity, d_k]``. Kimi Linear has
    ``k_heads == heads``; pass ``k_heads`` for key-head sharing."""
    return DeltaRuleReplayState.allocate(
        slots, heads, k_heads or heads, d_k, d_v, config, per_channel_decay=True, **kwargs
    )
