"""The ReplaySSM decode state of delta-rule layers (Gated DeltaNet; KDA reuses it).

The contract between ``reference.py``, the Triton kernels and ``ReplayStateCache``.
``HV`` value heads, ``H`` key heads (value head ``h`` reads key head ``h // (HV // H)``):

==================  ===========================================  ===================================
field               shape                                        meaning
==================  ===========================================  ===================================
``checkpoint``      ``[slots, HV, d_v, d_k]``                    ``S_c`` (TensorRT-LLM's GDN layout;
                                                                 fla's is the transpose)
``ring_k``          ``[slots, H, capacity, d_k]``                ``k_j`` after l2-normalisation
``ring_v``          ``[slots, HV, capacity, d_v]``               raw ``v_j``
``ring_beta``       ``[slots, HV, capacity]`` fp32               ``beta_j = sigmoid(b_j)``
``ring_g``          GDN ``[slots, HV, capacity]`` fp32,          log-decay ``g_j`` (``<= 0``)
                    KDA ``[slots, HV, capacity, d_k]`` fp32
``ring_u``          ``[slots, HV, capacity, d_v]`` fp32          corrected value ``u_j`` as computed
                                                                 when the entry was appended
``committed``       ``[slots]`` int32                            committed ring entries
``flush_at``        ``[slots]`` int32                            committed length of the next flush
==================  ===========================================  ===================================

``ring_k`` / ``ring_v`` use the activation dtype. ``ring_u`` serves outputs only; a flush may
refold the window from ``checkpoint`` and the raw ``k, v, beta, g`` instead (math.md section 4),
so that a read copy's rounding, which ``u`` carries, never enters the recurrence.

Step semantics as Mamba-2's (see ``ops/mamba2/state.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...config import ReplaySSMConfig
from .._state import ReplayStateBase

__all__ = ["DeltaRuleReplayState"]


@dataclass
class DeltaRuleReplayState(ReplayStateBase):
    """Tensors of one GDN / KDA layer's ReplaySSM state (layouts in the module docstring)."""

    ring_k: torch.Tensor = None
    ring_v: torch.Tensor = None
    ring_beta: torch.Tensor = None
    ring_g: torch.Tensor = None
    ring_u: torch.Tensor = None

    def ring_shapes(self) -> dict[str, tuple[int, ...]]:
        slots, v_heads, d_v, d_k = self.checkpoint.shape
        cap, k_heads = self._dim("ring_v", 4, 2), self._dim("ring_k", 4, 1)
        if not isinstance(self.ring_g, torch.Tensor):
            raise ValueError(f"state.ring_g: expected a tensor, got {type(self.ring_g).__name__}")
        per_head = (slots, v_heads, cap)
        return {"ring_k": (slots, k_heads, cap, d_k), "ring_v": (slots, v_heads, cap, d_v), "ring_beta": per_head,
                "ring_g": per_head + (d_k,) if self.per_channel_decay else per_head,
                "ring_u": (slots, v_heads, cap, d_v)}

    @property
    def per_channel_decay(self) -> bool:
        """True for KDA (a d_k-vector of log-decays per token and head)."""
        return self.ring_g.dim() == 4

    @classmethod
    def allocate(
        cls,
        slots: int,
        v_heads: int,
        k_heads: int,
        d_k: int,
        d_v: int,
        config: ReplaySSMConfig | None = None,
        *,
        per_channel_decay: bool = False,
        activation_dtype: torch.dtype = torch.float32,
        checkpoint_dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> "DeltaRuleReplayState":
        """Zero state for ``slots`` slots, every slot reset. ``per_channel_decay`` for KDA."""
        config = config or ReplaySSMConfig()
        if v_heads % k_heads != 0:
            raise ValueError(f"v_heads: expected a multiple of k_heads={k_heads}, got {v_heads}")
        cap = config.ring_capacity
        g_shape = (slots, v_heads, cap, d_k) if per_channel_decay else (slots, v_heads, cap)
        f32 = torch.float32
        state = cls(
            checkpoint=torch.zeros(slots, v_heads, d_v, d_k, dtype=checkpoint_dtype, device=device),
            ring_k=torch.zeros(slots, k_heads, cap, d_k, dtype=activation_dtype, device=device),
            ring_v=torch.zeros(slots, v_heads, cap, d_v, dtype=activation_dtype, device=device),
            ring_beta=torch.zeros(slots, v_heads, cap, dtype=f32, device=device),
            ring_g=torch.zeros(g_shape, dtype=f32, device=device),
            ring_u=torch.zeros(slots, v_heads, cap, d_v, dtype=f32, device=device),
            window=config.window,
            **cls._cursors(slots, device),
        )
        state.reset_slots(range(slots), config)
        return state
