"""The spread of repeated benchmark records (``--repeats``): min / median / max per group.

The H200s of a pool differ by ~1% in the same step, about the margin some targets are met or
missed by; timing each configuration several times in turn in one call shows how much of a
difference between two rows is the machine's own noise."""

from __future__ import annotations

from _timing import median

__all__ = ["spread", "spread_lines"]


def spread(records: list[dict], group_by: tuple[str, ...], values: tuple[str, ...]) -> list[dict]:
    """One entry per distinct ``group_by`` of ``records``, in first-seen order: those fields,
    ``repeats`` (records in the group) and, for each of ``values`` present in the group (``None``
    skipped), ``{"min", "median", "max"}``."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(tuple(r[k] for k in group_by), []).append(r)
    out = []
    for key, recs in groups.items():
        entry = dict(zip(group_by, key), repeats=len(recs))
        for name in values:
            vals = [r[name] for r in recs if r.get(name) is not None]
            if vals:
                entry[name] = {"min": min(vals), "median": median(vals), "max": max(vals)}
        out.append(entry)
    return out


def spread_lines(entries: list[dict], group_by: tuple[str, ...], values: tuple[str, ...], digits: int = 3) -> str:
    """``entries`` of :func:`spread` as printed lines: the group, ``xN`` repeats, then
    ``name median (min-max)`` per value."""
    lines = ["# spread over repeats: median (min-max)"]
    for e in entries:
        cells = [f"{v} {e[v]['median']:.{digits}f} ({e[v]['min']:.{digits}f}-{e[v]['max']:.{digits}f})"
                 for v in values if v in e]
        lines.append(" ".join(str(e[k]) for k in group_by) + f" x{e['repeats']} | " + " | ".join(cells))
    return "\n".join(lines)
