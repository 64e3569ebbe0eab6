"""The list flush launches (``flush_persistent``): a fixed wave of programs that walks the flush
rows' tiles, numbered on the device from the ring launch's per-row flags.

The wave is sized on the host from the device's SM count, never from the flags (a CUDA graph
replays the grid it captured); its programs read at most :data:`LIST_MAX_BATCH` flags each and
number the flush rows with :func:`flush_ranks` / :func:`flush_row`. The flags are the int32
``info[2 * row + 1]`` both kinds' ring launches write (0 for padded rows).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

__all__ = ["LIST_MAX_BATCH", "flush_ranks", "flush_row", "list_grid"]

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


@triton.jit
def flush_ranks(info_ptr, batch, BLOCK_B: tl.constexpr):
    """``(ranks, n)``: ``ranks[r]`` the flush rows among rows ``0..r`` (``[BLOCK_B]`` int32), ``n``
    the flush rows of the batch."""
    offs_b = tl.arange(0, BLOCK_B)
    flags = (tl.load(info_ptr + 2 * offs_b + 1, mask=offs_b < batch, other=0) != 0).to(tl.int32)
    return tl.cumsum(flags, axis=0), tl.sum(flags, axis=0)


@triton.jit
def flush_row(ranks, k):
    """The batch row of the ``k``-th flush row (from 0): the rows whose rank is ``<= k``."""
    return tl.sum((ranks <= k).to(tl.int32), axis=0)
