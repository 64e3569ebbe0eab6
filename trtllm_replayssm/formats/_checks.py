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


def check_finite(name: str, x: torch.Tensor) -> None:
    """Raise unless every value of ``x`` is finite: one NaN or infinity would become the
    derived scale and leave no value of its block, row or tensor decodable."""
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: expected finite values, got NaN or infinity")


def check_out_dtype(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
