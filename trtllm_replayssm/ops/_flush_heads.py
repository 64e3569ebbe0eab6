"""Heads per program of the per-row flush launches (Mamba-2's and the delta rules' staged steps):
one program per (row, a run of consecutive heads), so that a non-flush step pays fewer early exits
and a flush row's heads share what the program loads once; and the register cap that fills that
launch's waves best on a given GPU."""

from __future__ import annotations

__all__ = ["flush_heads_per_program", "fullest_last_wave_cap"]


def flush_heads_per_program(heads: int, flush_heads: int) -> int:
    """The largest divisor of ``heads`` not above ``flush_heads``: ``heads`` is what a program's
    heads must tile (Mamba-2: the heads of one group, which share its ring ``B``; the delta rules:
    the value heads), e.g. 8 -> 8 of Nemotron-H's 16 heads per group, 6 of Nemotron-3-Nano's 12."""
    if heads < 1 or flush_heads < 1:
        raise ValueError(f"flush_heads: expected >= 1 heads per program and per group, got {flush_heads} "
                         f"and {heads}")
    return max(d for d in range(1, min(flush_heads, heads) + 1) if heads % d == 0)


def fullest_last_wave_cap(caps, programs: int, num_warps: int, sms: int) -> int:
    """Of the register caps ``caps`` (ints, ptxas ``.maxnreg``), the one whose residency
    (``_flush_list.programs_per_sm``, registers only) runs ``programs`` programs on ``sms`` SMs
    with the fullest waves on average: ``programs / (waves x resident)``, ``waves`` rounded up.
    Ties go to the earlier cap. A long-program launch pays for a nearly empty last wave: Mamba-2's
    flush launch, 2048 programs on an H200's 132 SMs, took 700 us at 5 per SM (3.1 waves) and
    661 us at 4 (3.9 waves; benchmarks/NOTES_mamba2.md, fourteenth run)."""
    from ._flush_list import programs_per_sm

    best, best_fill = None, -1.0
    for cap in caps:
        resident = sms * programs_per_sm(cap, num_warps, 0)
        fill = programs / (-(-programs // resident) * resident)
        if fill > best_fill + 1e-9:
            best, best_fill = cap, fill
    return best
