"""What every decode-side mixer checks the same way: the state config it supports, its op backend."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Mapping

import torch

from ..config import ReplaySSMConfig

__all__ = ["MODES", "plain_checkpoint_dtype", "resolve_backend"]

#: ``replay``: ReplaySSM state (checkpoint + ring); ``standard``: the state written every token.
MODES = ("replay", "standard")

# Checkpoint precisions of the plain (non-split) state; fp8, stochastic rounding and read copies
# need the split-precision cache.
_CHECKPOINT_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


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
