"""What every kind's ReplaySSM state shares: a checkpoint, rings of inputs, per-slot cursors."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable

import torch

from ..config import ReplaySSMConfig

__all__ = ["ReplayStateBase"]


@dataclass
class ReplayStateBase:
    """Fields common to all kinds; subclasses add their ``ring_*`` tensors.

    ``checkpoint``: ``[slots, heads, P, N]``; ``committed`` / ``flush_at``: ``[slots]`` int32;
    ``window``: the config's ``L`` (a Python int, not a tensor).
    """

    checkpoint: torch.Tensor
    committed: torch.Tensor
    flush_at: torch.Tensor
    window: int

    @property
    def slots(self) -> int:
        return self.checkpoint.shape[0]

    @property
    def capacity(self) -> int:
        ring = next(t for name, t in self.tensors().items() if name.startswith("ring_"))
        return ring.shape[2]

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor field by name (for custom ops, byte accounting, cloning)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)}

    def nbytes_per_slot(self) -> int:
        return sum(t[0].numel() * t.element_size() for t in self.tensors().values())

    def clone(self):
        kwargs = {f.name: getattr(self, f.name) for f in fields(self)}
        kwargs.update({k: v.clone() for k, v in self.tensors().items()})
        return type(self)(**kwargs)

    def reset_slots(self, slots: Iterable[int], config: ReplaySSMConfig | None = None) -> None:
        """Zero the checkpoint and empty the ring of ``slots``: a new sequence starts there."""
        config = config or ReplaySSMConfig(window=self.window)
        slot_list = [int(s) for s in slots]
        for s in slot_list:
            if not 0 <= s < self.slots:
                raise ValueError(f"slots: slot {s} out of range [0, {self.slots})")
        if not slot_list:
            return
        idx = torch.tensor(slot_list, dtype=torch.long, device=self.checkpoint.device)
        self.checkpoint[idx] = 0
        self.committed[idx] = 0
        self.flush_at[idx] = torch.tensor(
            [config.first_flush_at(s) for s in slot_list], dtype=torch.int32, device=idx.device
        )

    @staticmethod
    def _cursors(slots: int, device) -> dict[str, torch.Tensor]:
        return {
            "committed": torch.zeros(slots, dtype=torch.int32, device=device),
            "flush_at": torch.zeros(slots, dtype=torch.int32, device=device),
        }
