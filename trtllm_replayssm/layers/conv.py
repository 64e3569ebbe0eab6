"""The short causal convolution of SSM layers at decode time: one token per row, slot-indexed.

Mamba-2, Gated DeltaNet and KDA run a depthwise causal convolution of width ``d_conv`` over
their projected inputs before the recurrence. At decode time each slot keeps the last
``d_conv - 1`` inputs (TensorRT-LLM's conv-state layout ``[slots, conv_dim, d_conv - 1]``);
one step shifts the new token in and returns the convolution at that token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops._slots import live_rows

__all__ = ["causal_conv1d_update"]

_ACTIVATIONS = {None: lambda t: t, "silu": F.silu, "swish": F.silu}


def causal_conv1d_update(
    conv_state: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
) -> torch.Tensor:
    """One decode step of a depthwise causal conv1d; updates ``conv_state`` in place.

    Args:
        conv_state: ``[slots, conv_dim, d_conv - 1]``, the last ``d_conv - 1`` inputs of each
            slot, oldest first.
        x: ``[batch, conv_dim]``, this token's inputs.
        weight: ``[conv_dim, d_conv]`` (an ``nn.Conv1d`` weight ``[conv_dim, 1, d_conv]`` is
            accepted too); tap ``d_conv - 1`` multiplies the newest input.
        bias: ``[conv_dim]`` or None.
        activation: None, ``"silu"`` or ``"swish"``.
        state_indices: ``[batch]`` int32/int64 slot per row, or None for row ``i`` -> slot ``i``.
        pad_slot_id: rows with this index get a zero output and leave every slot untouched.

    Returns:
        ``[batch, conv_dim]`` in ``x.dtype``. The sum runs in float32 (float64 for float64
        inputs), as Hugging Face's torch path does in the weight dtype.
    """
    if weight.dim() == 3 and weight.shape[1] == 1:
        weight = weight.squeeze(1)
    if conv_state.dim() != 3:
        raise ValueError(f"conv_state: expected [slots, conv_dim, d_conv - 1], got {tuple(conv_state.shape)}")
    slots, conv_dim, width = conv_state.shape
    if weight.dim() != 2 or weight.shape != (conv_dim, width + 1):
        raise ValueError(f"weight: expected [conv_dim={conv_dim}, d_conv={width + 1}], got {tuple(weight.shape)}")
    if x.dim() != 2 or x.shape[1] != conv_dim:
        raise ValueError(f"x: expected [batch, conv_dim={conv_dim}], got {tuple(x.shape)}")
    if bias is not None and tuple(bias.shape) != (conv_dim,):
        raise ValueError(f"bias: expected [conv_dim={conv_dim}] or None, got {tuple(bias.shape)}")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation: expected one of {list(_ACTIVATIONS)}, got {activation!r}")
    rows, slot_ids = live_rows(state_indices, x.shape[0], slots, pad_slot_id, device=x.device)

    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    window = torch.cat([conv_state[slot_ids].to(compute), x[rows].to(compute)[:, :, None]], dim=-1)
    out_live = (window * weight.to(compute)).sum(-1)
    if bias is not None:
        out_live = out_live + bias.to(compute)
    out = torch.zeros_like(x)
    out[rows] = _ACTIVATIONS[activation](out_live).to(x.dtype)
    conv_state[slot_ids] = window[:, :, 1:].to(conv_state.dtype)
    return out
