"""Argument checks shared by the format codecs: messages name the argument and what it holds."""

from __future__ import annotations

import torch

FLOAT_INPUTS = (torch.float32, torch.float16, torch.bfloat16)


def describe(value) -> str:
    """``float32 of shape (4, 16)`` for a tensor, the type name for anything else."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} of shape {tuple(value.shape)}"
    return type(value).__name__


def check_scale(name: str, scale, dtype: torch.dtype, shape: tuple, what: str) -> None:
    """Raise unless ``scale`` is a tensor of ``dtype`` and ``shape`` with positive finite values."""
    if not isinstance(scale, torch.Tensor) or scale.dtype != dtype or tuple(scale.shape) != shape:
        raise ValueError(
            f"{name}: expected a {dtype} tensor of shape {shape} ({what}), got {describe(scale)}"
        )
    if not bool(((scale > 0) & torch.isfinite(scale)).all()):
        raise ValueError(f"{name}: expected positive finite values")
