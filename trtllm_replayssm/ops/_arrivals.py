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

__all__ = ["arrival_counters"]


def arrival_counters(
    cache: dict[torch.device, torch.Tensor], count: int, device: torch.device, capture_error: Callable[[], Exception]
) -> torch.Tensor:
    """At least ``count`` (and 1024) zeroed int32 counters on ``device``, kept in ``cache``.

    ``capture_error``: builds the exception raised when the buffer would have to grow inside a
    CUDA-graph capture (the caller names its own argument in it)."""
    buf = cache.get(device)
    if buf is None or buf.numel() < count:
        if device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise capture_error()
        buf = torch.zeros(max(count, 1024), dtype=torch.int32, device=device)
        cache[device] = buf
    return buf
