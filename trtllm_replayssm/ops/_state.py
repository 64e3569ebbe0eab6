"""What every kind's ReplaySSM state shares: a checkpoint, rings of inputs, per-slot cursors."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable

import torch

from ..config import ReplaySSMConfig
from ._slots import slot_list as _slot_list

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
        slot_list = _slot_list(slots, self.slots)
        if not slot_list:
            return
        idx = torch.tensor(slot_list, dtype=torch.long, device=self.checkpoint.device)
        self.checkpoint[idx] = 0
        self.committed[idx] = 0
        self.flush_at[idx] = torch.tensor(
            [config.first_flush_at(s) for s in slot_list], dtype=torch.int32, device=idx.device
        )

    def ring_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape each ``ring_*`` field must have, from the checkpoint's and the rings' dims
        (each kind says how its rings relate)."""
        raise NotImplementedError

    def _dim(self, name: str, ndim: int, axis: int) -> int:
        """Axis ``axis`` of field ``name``, which must be an ``ndim``-d tensor."""
        t = getattr(self, name)
        if not isinstance(t, torch.Tensor) or t.dim() != ndim:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"state.{name}: expected a {ndim}-d tensor, got {got}")
        return t.shape[axis]

    def check(self) -> None:
        """Raise ValueError naming the first field that breaks the layout contract (the module
        docstring of the kind's ``state.py``); ops call it before they write anything."""
        ck = self.checkpoint
        if not isinstance(ck, torch.Tensor) or ck.dim() != 4 or not ck.dtype.is_floating_point:
            got = f"{ck.dtype} {tuple(ck.shape)}" if isinstance(ck, torch.Tensor) else type(ck).__name__
            raise ValueError(f"state.checkpoint: expected a 4-d floating-point tensor, got {got}")
        for name in ("committed", "flush_at"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != (self.slots,) or t.dtype != torch.int32:
                got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"state.{name}: expected int32 [slots={self.slots}], got {got}")
        for name, t in self.tensors().items():
            if t.device != ck.device:
                raise ValueError(f"state.{name}: expected a tensor on {ck.device} (the checkpoint's), got {t.device}")
        for name, shape in self.ring_shapes().items():
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point or tuple(t.shape) != shape:
                got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"state.{name}: expected a floating-point tensor of shape {shape}, got {got}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or not 1 <= self.window <= self.capacity:
            raise ValueError(f"state.window: expected an int in [1, capacity={self.capacity}], got {self.window!r}")
        if ck.device.type == "cpu" and not torch.compiler.is_compiling():
            # The cursors' values only where reading them is free: on CUDA it would synchronise
            # (and break graph capture), and the kernels keep the cursors they read; under
            # torch.compile the op's CPU body checks them when it runs.
            for name, low, high in (("committed", 0, self.capacity), ("flush_at", 1, self.window)):
                t = getattr(self, name)
                if bool(((t < low) | (t > high)).any()):
                    raise ValueError(f"state.{name}: expected values in [{low}, {high}], got {t.tolist()}")

    @staticmethod
    def _cursors(slots: int, device) -> dict[str, torch.Tensor]:
        return {
            "committed": torch.zeros(slots, dtype=torch.int32, device=device),
            "flush_at": torch.zeros(slots, dtype=torch.int32, device=device),
        }
