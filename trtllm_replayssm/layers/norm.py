"""Gated RMSNorm as the SSM mixers apply it before their output projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["gated_rms_norm"]


def gated_rms_norm(
    x: torch.Tensor,
    gate: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
) -> torch.Tensor:
    """RMS-normalise ``x`` over groups of its last axis, gated by ``silu(gate)``.

    Mamba-2 (Hugging Face's ``MambaRMSNormGated`` / NemotronH, ``norm_before_gate=False``):
    ``weight * rmsnorm_groups(x * silu(gate))``. Gated DeltaNet / KDA (``norm_before_gate=True``):
    ``weight * rmsnorm_groups(x) * silu(gate)``.

    Args:
        x: ``[..., dim]`` float.
        gate: ``[..., dim]`` float or None (plain grouped RMSNorm).
        weight: ``[dim]``.
        eps: added to the mean square.
        group_size: elements per normalisation group, dividing ``dim``; None = one group.
        norm_before_gate: where the gate applies, see above.

    Returns:
        ``[..., dim]`` in ``x.dtype``; computed in float32 (float64 for float64 input), as the
        Hugging Face modules compute it, with the weight applied after the cast back.
    """
    dim = x.shape[-1]
    group_size = dim if group_size is None else group_size
    if group_size < 1 or dim % group_size != 0:
        raise ValueError(f"group_size: expected a divisor of the last dim {dim}, got {group_size}")
    if tuple(weight.shape) != (dim,):
        raise ValueError(f"weight: expected [{dim}], got {tuple(weight.shape)}")
    if gate is not None and gate.shape != x.shape:
        raise ValueError(f"gate: expected the shape of x {tuple(x.shape)}, got {tuple(gate.shape)}")
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    h = x.to(compute)
    if gate is not None and not norm_before_gate:
        h = h * F.silu(gate.to(compute))
    grouped = h.reshape(*h.shape[:-1], dim // group_size, group_size)
    grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
    h = grouped.reshape(h.shape)
    if gate is not None and norm_before_gate:
        h = h * F.silu(gate.to(compute))
    return weight * h.to(x.dtype)
