"""Resolving a batch's ``state_indices`` into the cache slots its rows address.

Every op and layer shares this convention (ops/README.md): row ``i`` of a batch works on slot
``state_indices[i]``; a row whose index equals ``pad_slot_id`` is a padded CUDA-graph row that
gets a zero output and touches no slot.
"""

from __future__ import annotations

import numbers

import torch

__all__ = ["check_num_drafts", "check_pad_slot_id", "live_rows", "slot_list"]


def slot_list(slots, n_slots: int) -> list[int]:
    """``slots`` (ints, numpy ints or an integer tensor) as a list of ints in ``[0, n_slots)``;
    ValueError naming ``slots`` otherwise (a float id would be truncated onto another slot)."""
    ids = list(slots.flatten().tolist() if isinstance(slots, torch.Tensor) else slots)
    for s in ids:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise ValueError(f"slots: expected int slot ids, got {s!r}")
    ids = [int(s) for s in ids]
    for s in ids:
        if not 0 <= s < n_slots:
            raise ValueError(f"slots: slot {s} out of range [0, {n_slots})")
    return ids


def check_num_drafts(num_drafts) -> None:
    """``num_drafts`` of a commit: None or an int >= 1 (the ``T`` of the verify it follows)."""
    if num_drafts is not None and (isinstance(num_drafts, bool) or not isinstance(num_drafts, numbers.Integral)
                                   or num_drafts < 1):
        raise ValueError(f"num_drafts: expected None or an int >= 1, got {num_drafts!r}")


def check_pad_slot_id(pad_slot_id) -> int:
    """``pad_slot_id`` as an int; raises ValueError naming it otherwise (a float such as 1.5
    would be truncated onto a real slot and silently pad its row)."""
    if isinstance(pad_slot_id, bool) or not isinstance(pad_slot_id, numbers.Integral):
        raise ValueError(f"pad_slot_id: expected an int, got {pad_slot_id!r}")
    return int(pad_slot_id)


def live_rows(
    state_indices: torch.Tensor | None, batch: int, slots: int, pad_slot_id: int = -1, *, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows that are not padding and the slots they address, both ``[live]`` int64.

    ``state_indices``: ``[batch]`` int32/int64, or None for row ``i`` -> slot ``i``. Raises
    ValueError naming ``state_indices`` for a wrong shape or dtype, a slot outside
    ``[0, slots)`` that is not ``pad_slot_id``, or a slot addressed by two rows (their updates
    would race). A ``pad_slot_id`` that is not an int is refused (:func:`check_pad_slot_id`).
    """
    pad_slot_id = check_pad_slot_id(pad_slot_id)
    if state_indices is None:
        if batch > slots:
            raise ValueError(f"state_indices: None maps row i to slot i, but batch={batch} > slots={slots}")
        rows = torch.arange(batch, device=device)
        return rows, rows.clone()
    if not isinstance(state_indices, torch.Tensor) or state_indices.dim() != 1 or state_indices.shape[0] != batch:
        got = tuple(state_indices.shape) if isinstance(state_indices, torch.Tensor) else type(state_indices).__name__
        raise ValueError(f"state_indices: expected a [batch={batch}] tensor, got {got}")
    if state_indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"state_indices: expected int32 or int64, got {state_indices.dtype}")
    idx = state_indices.to(torch.int64)
    live = idx != pad_slot_id
    bad = live & ((idx < 0) | (idx >= slots))
    if bool(bad.any()):
        raise ValueError(
            f"state_indices: slot {int(idx[bad][0])} out of range [0, {slots}) and not pad_slot_id={pad_slot_id}"
        )
    rows = torch.nonzero(live).flatten()
    chosen = idx[rows]
    if chosen.unique().numel() != chosen.numel():
        raise ValueError(f"state_indices: a slot is addressed by more than one row: {chosen.tolist()}")
    return rows, chosen
