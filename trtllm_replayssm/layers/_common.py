"""What every decode-side mixer checks the same way: the state config it supports, its op backend."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Mapping

import torch

from ..config import ReplaySSMConfig
from ..ops._slots import live_rows
from ..ops._slots import slot_list as _slot_list

__all__ = ["MODES", "SlotStateMixin", "check_mixer_args", "check_prompt", "plain_checkpoint_dtype", "resolve_backend"]

#: ``replay``: ReplaySSM state (checkpoint + ring); ``standard``: the state written every token.
MODES = ("replay", "standard")

# Checkpoint precisions of the plain (non-split) state; fp8, stochastic rounding and read copies
# need the split-precision cache.
_CHECKPOINT_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def check_mixer_args(config, *, dtype, **positive_ints) -> ReplaySSMConfig:
    """The arguments every mixer takes: ``config`` a :class:`ReplaySSMConfig` or None (returned,
    None as the default), each of ``positive_ints`` (dims, ``slots``, ``d_conv``) an int >= 1,
    ``dtype`` a floating-point torch dtype. Checked before any size is derived from them."""
    if config is not None and not isinstance(config, ReplaySSMConfig):
        raise ValueError(f"config: expected a ReplaySSMConfig or None, got {type(config).__name__}")
    for name, value in positive_ints.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
    return config if config is not None else ReplaySSMConfig()


def check_prompt(hidden, hidden_size: int) -> None:
    """``hidden`` of :meth:`prefill`: ``[batch, seq >= 1, hidden_size]``."""
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3 or hidden.shape[2] != hidden_size \
            or hidden.shape[1] < 1:
        got = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise ValueError(f"hidden: expected [batch, seq >= 1, hidden_size={hidden_size}], got {got}")


def plain_checkpoint_dtype(config: ReplaySSMConfig, mode: str) -> torch.dtype:
    """Validate ``mode`` and a config for a mixer that keeps one plain checkpoint; its torch dtype."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if config.checkpoint_dtype not in _CHECKPOINT_TORCH_DTYPES or config.stochastic_rounding:
        raise ValueError(
            f"config.checkpoint_dtype: this mixer keeps a plain {sorted(_CHECKPOINT_TORCH_DTYPES)} "
            f"checkpoint without stochastic rounding, got {config.checkpoint_spec!r}"
        )
    if config.read_format != "none":
        raise ValueError(f"config.read_format: this mixer reads the checkpoint itself ('none'), got {config.read_format!r}")
    return _CHECKPOINT_TORCH_DTYPES[config.checkpoint_dtype]


def resolve_backend(backend: str | ModuleType, backends: Mapping[str, str]) -> ModuleType:
    """The ops module for ``backend``: a name in ``backends`` (name -> module path) or a module."""
    if isinstance(backend, ModuleType):
        return backend
    if backend not in backends:
        raise ValueError(f"backend: expected one of {sorted(backends)} or a module, got {backend!r}")
    return importlib.import_module(backends[backend])


class SlotStateMixin:
    """Slot bookkeeping shared by the mixers: ``conv_state [slots, conv_dim, d_conv-1]``, and
    either ``replay_state`` (replay mode) or ``ssm_state [slots, heads, P, N]`` (standard mode)."""

    def reset_slots(self, slots) -> None:
        """Start new sequences in ``slots``: zero their conv and SSM state, empty their rings."""
        slot_list = _slot_list(slots, self.conv_state.shape[0])
        self.conv_state[slot_list] = 0
        if self.replay_state is not None:
            self.replay_state.reset_slots(slot_list, self.config)
        else:
            self.ssm_state[slot_list] = 0

    def _standard_ssm_state(self, state_indices: torch.Tensor | None) -> torch.Tensor:
        """``[batch, heads, P, N]`` copies of the standard-mode state of each row's slot (zero for
        padded rows)."""
        if state_indices is None:
            return self.ssm_state.clone()
        rows, slot_ids = live_rows(state_indices, state_indices.shape[0], self.ssm_state.shape[0])
        out = self.ssm_state.new_zeros((state_indices.shape[0], *self.ssm_state.shape[1:]))
        out[rows] = self.ssm_state[slot_ids]
        return out
