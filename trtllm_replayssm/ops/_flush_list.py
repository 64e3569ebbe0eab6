"""Launch size of the list flush launches (``flush_persistent``): a fixed wave of programs that
walks the flush rows' tiles, numbered on the device from the ring launch's per-row flags.

The wave is sized on the host from the device's SM count, never from the flags (a CUDA graph
replays the grid it captured); its programs read at most :data:`LIST_MAX_BATCH` flags each.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["LIST_MAX_BATCH", "list_grid"]

#: Largest batch whose flags one program holds in registers (``[next_pow2(batch)]`` int32);
#: larger batches take the per-row flush launch.
LIST_MAX_BATCH = 4096


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 2  # the interpreter: a small wave, so that each program walks several items
    return torch.cuda.get_device_properties(device).multi_processor_count


def list_grid(items: int, per_sm: int, device: torch.device) -> int:
    """Programs of a list flush launch: ``per_sm`` per SM, at most one per item (``items``: the
    tiles of a step in which every row flushes)."""
    return max(1, min(items, _sm_count(device) * per_sm))
