"""Arrival counters of the one-launch ReplaySSM kernels.

A kernel whose programs all read a slot's cursors cannot let the first of them move the cursors;
each program instead increments a counter when it is done with them, and the last one to arrive
moves the cursors and zeroes the counter. The counters therefore stay zero between launches and
one buffer per device serves every launch of a kernel family. Growing it allocates, which a
CUDA-graph capture must not do, so the first call at a new size has to come before capture.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from ._pdl import gdc_wait

__all__ = ["arrival_counters", "replay_cursors", "write_through_cursors"]


def arrival_counters(
    cache: dict[torch.device, torch.Tensor], count: int, device: torch.device, capture_error: Callable[[], Exception]
) -> torch.Tensor:
    """At least ``count`` (and 1024) zeroed int32 counters on ``device``, kept in ``cache``; a
    buffer that must grow at least doubles.

    ``capture_error``: builds the exception raised when the buffer would have to grow inside a
    CUDA-graph capture (the caller names its own argument in it). A buffer that a larger one
    replaces is kept alive (:data:`_OUTGROWN`): a graph captured before the growth still replays
    its launches against it, and they leave it zeroed as they found it."""
    buf = cache.get(device)
    if buf is None or buf.numel() < count:
        if device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise capture_error()
        size = max(count, 1024)
        if buf is not None:
            _OUTGROWN.append(buf)
            # At least doubled, so that the outgrown buffers kept alive stay few however the count creeps up.
            size = max(size, 2 * buf.numel())
        buf = torch.zeros(size, dtype=torch.int32, device=device)
        cache[device] = buf
    return buf


#: Buffers :func:`arrival_counters` has replaced by larger ones (few: each growth at least doubles).
_OUTGROWN: list[torch.Tensor] = []


@triton.jit
def write_through_cursors(arrivals_ptr, committed_ptr, flush_at_ptr, slot, c, flush_at, window, programs):
    """The cursors after a write-through step (a flush at the token): ``(0, window)``. A slot
    already there is left alone (no program counts); otherwise each of the slot's ``programs``
    counts its arrival and the last one to arrive sets them and re-zeroes its counter (every
    program read the same ``c`` and ``flush_at``: only the last moves them)."""
    if (c != 0) | (flush_at != window):
        # Every warp has read c (the branch depends on it) before the program counts.
        tl.debug_barrier()
        arrived = tl.atomic_add(arrivals_ptr + slot, 1, sem="relaxed")
        if arrived == programs - 1:
            tl.store(committed_ptr + slot, 0)
            tl.store(flush_at_ptr + slot, window)
            tl.store(arrivals_ptr + slot, 0)


@triton.jit
def replay_cursors(arrivals_ptr, committed_ptr, flush_at_ptr, row, slot, c, flush, window, programs,
                   WAIT: tl.constexpr = False):
    """The cursors after a ReplaySSM step of one row: ``c + 1``, or ``(0, window)`` after a
    flush. Each of the row's ``programs`` counts its arrival; the last one to arrive moves them
    and re-zeroes the row's counter. Relaxed suffices: every program's stores depend on the
    cursors it read, so those reads are complete when it counts. ``WAIT``: the kernel was
    launched beside one that reads every row's cursors (programmatic dependent launch), which
    the last program waits for (``gdc_wait``) before it moves them."""
    arrived = tl.atomic_add(arrivals_ptr + row, 1, sem="relaxed")
    if arrived == programs - 1:
        if WAIT:
            gdc_wait()
        tl.store(committed_ptr + slot, tl.where(flush, 0, c + 1))
        if flush:
            tl.store(flush_at_ptr + slot, window)
        tl.store(arrivals_ptr + row, 0)
