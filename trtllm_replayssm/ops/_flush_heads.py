"""Heads per program of the per-row flush launches (Mamba-2's and the delta rules' staged steps):
one program per (row, a run of consecutive heads), so that a non-flush step pays fewer early exits
and a flush row's heads share what the program loads once."""

from __future__ import annotations

__all__ = ["flush_heads_per_program"]


def flush_heads_per_program(heads: int, flush_heads: int) -> int:
    """The largest divisor of ``heads`` not above ``flush_heads``: ``heads`` is what a program's
    heads must tile (Mamba-2: the heads of one group, which share its ring ``B``; the delta rules:
    the value heads), e.g. 8 -> 8 of Nemotron-H's 16 heads per group, 6 of Nemotron-3-Nano's 12."""
    if heads < 1 or flush_heads < 1:
        raise ValueError(f"flush_heads: expected >= 1 heads per program and per group, got {flush_heads} "
                         f"and {heads}")
    return max(d for d in range(1, min(flush_heads, heads) + 1) if heads % d == 0)
