"""A high-priority side stream per device, for a launch that may overlap the next one.

The staged steps' flush launch (latency-bound: a few long programs per flush row) and stream
launch (bandwidth-bound: many short programs) touch disjoint rows, so the flush launch can be
issued first on a side stream forked from the current one and run under the stream launch,
which is then issued on the current stream; the current stream waits for the side stream before
the step returns. Under CUDA-graph capture the fork and the join are captured as graph edges.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["fork", "join"]


@functools.lru_cache(maxsize=None)
def _side(device: torch.device) -> torch.cuda.Stream:
    low, high = torch.cuda.Stream.priority_range()
    # The flush programs are few and long: dispatched first, they run under the stream launch.
    return torch.cuda.Stream(device=device, priority=high)


def fork(device: torch.device) -> torch.cuda.Stream | None:
    """The side stream of ``device`` after it waits for the current stream (``None`` off CUDA)."""
    if device.type != "cuda":
        return None
    side = _side(device)
    side.wait_stream(torch.cuda.current_stream(device))
    return side


def join(side: torch.cuda.Stream | None, device: torch.device) -> None:
    """Make the current stream wait for ``side`` (no-op for ``None``)."""
    if side is not None:
        torch.cuda.current_stream(device).wait_stream(side)
