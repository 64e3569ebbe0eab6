"""The ReplaySSM decode state of Mamba-2 layers: what one layer keeps per cache slot.

This is the contract between the reference (``reference.py``), the Triton kernels and
``ReplayStateCache``: they all read and write these tensors in these layouts.

Per slot ``s`` the state is a checkpoint ``S_c`` plus the inputs of the tokens decoded since
(replayssm-math.md section 2):

==================  ===========================================  ===================================
field               shape                                        meaning
==================  ===========================================  ===================================
``checkpoint``      ``[slots, heads, head_dim, d_state]``        ``S_c``: the state before the ring's
                                                                 first entry (TensorRT-LLM's layout)
``ring_x``          ``[slots, heads, capacity, head_dim]``       ``x_j`` per ring entry ``j``
``ring_dt``         ``[slots, heads, capacity]`` fp32            ``dt_j`` after bias, softplus, clamp
``ring_B``          ``[slots, groups, capacity, d_state]``       ``B_j``
``committed``       ``[slots]`` int32                            ring entries that are committed;
                                                                 entries past it are drafts or stale
``flush_at``        ``[slots]`` int32                            committed length that triggers the
                                                                 slot's next flush (``window``, or
                                                                 less for a staggered first window)
==================  ===========================================  ===================================

``ring_dt`` may also be stored entries outermost: ``[slots, capacity, heads]`` storage seen as
``[slots, heads, capacity]`` (``allocate(ring_dt_layout="entries")``, strides ``(capacity * heads,
1, heads)``). A token's entry for a group's heads is then one run of memory: a step writes whole
32-byte sectors instead of one 4-byte word per head (``ring.py`` says why that may matter). Every
kernel and the reference take either layout; the ops refuse any other strides.

``capacity = window + max_draft_tokens``. ``ring_x`` / ``ring_B`` use the activation dtype,
``ring_dt`` is fp32 (the decay ``exp(dt * A)`` is sensitive to it). The checkpoint dtype is the
recurrence precision (fp32 here; lower precisions and the read copy come with split precision).

Step semantics (one decode token, ``c = committed[s]``): append the token at ring position
``c``, output from ``checkpoint`` + ring entries ``0..c``, then ``committed = c + 1``; if
``c + 1 >= flush_at[s]`` the step is a *flush*: fold entries ``0..c`` into ``checkpoint``,
``committed = 0``, ``flush_at = window``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...config import ReplaySSMConfig
from .._state import ReplayStateBase

__all__ = ["Mamba2ReplayState", "RING_DT_LAYOUTS", "ring_dt_layout_of"]

#: ``ring_dt``'s storage orders: ``"heads"`` (``[slots, heads, capacity]``, contiguous) and
#: ``"entries"`` (``[slots, capacity, heads]`` storage, the same logical shape).
RING_DT_LAYOUTS = ("heads", "entries")


def ring_dt_layout_of(ring_dt: torch.Tensor) -> str | None:
    """Which of :data:`RING_DT_LAYOUTS` a ``[slots, heads, capacity]`` tensor is stored in, or None
    (``"heads"`` where both describe its memory, as with one head or one entry)."""
    if ring_dt.is_contiguous():
        return "heads"
    if ring_dt.permute(0, 2, 1).is_contiguous():
        return "entries"
    return None


@dataclass
class Mamba2ReplayState(ReplayStateBase):
    """Tensors of one Mamba-2 layer's ReplaySSM state (layouts in the module docstring)."""

    ring_x: torch.Tensor = None
    ring_dt: torch.Tensor = None
    ring_B: torch.Tensor = None

    def ring_shapes(self) -> dict[str, tuple[int, ...]]:
        slots, heads, head_dim, d_state = self.checkpoint.shape
        cap, groups = self._dim("ring_x", 4, 2), self._dim("ring_B", 4, 1)
        return {"ring_x": (slots, heads, cap, head_dim), "ring_dt": (slots, heads, cap),
                "ring_B": (slots, groups, cap, d_state)}

    @classmethod
    def allocate(
        cls,
        slots: int,
        heads: int,
        head_dim: int,
        d_state: int,
        groups: int,
        config: ReplaySSMConfig | None = None,
        *,
        activation_dtype: torch.dtype = torch.float32,
        checkpoint_dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        ring_dt_layout: str = "heads",
    ) -> "Mamba2ReplayState":
        """Zero state for ``slots`` slots, every slot reset (see :meth:`reset_slots`);
        ``ring_dt_layout``: one of :data:`RING_DT_LAYOUTS` (the module docstring)."""
        config = config or ReplaySSMConfig()
        if heads % groups != 0:
            raise ValueError(f"heads: expected a multiple of groups={groups}, got {heads}")
        if ring_dt_layout not in RING_DT_LAYOUTS:
            raise ValueError(f"ring_dt_layout: expected one of {RING_DT_LAYOUTS}, got {ring_dt_layout!r}")
        cap = config.ring_capacity
        if ring_dt_layout == "entries":
            ring_dt = torch.zeros(slots, cap, heads, dtype=torch.float32, device=device).permute(0, 2, 1)
        else:
            ring_dt = torch.zeros(slots, heads, cap, dtype=torch.float32, device=device)
        state = cls(
            checkpoint=torch.zeros(slots, heads, head_dim, d_state, dtype=checkpoint_dtype, device=device),
            ring_x=torch.zeros(slots, heads, cap, head_dim, dtype=activation_dtype, device=device),
            ring_dt=ring_dt,
            ring_B=torch.zeros(slots, groups, cap, d_state, dtype=activation_dtype, device=device),
            window=config.window,
            **cls._cursors(slots, device),
        )
        state.reset_slots(range(slots), config)
        return state
