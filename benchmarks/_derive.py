"""``field=value, ...`` strings to keyword arguments of a launch-configuration dataclass, for the
benchmarks' ``--derive`` options (a listed configuration with some fields replaced)."""

from __future__ import annotations

import dataclasses


def field_value(text: str):
    """``"4"`` -> 4, ``"true"`` -> True, ``"none"`` -> None, anything else the stripped string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    try:
        return int(low)
    except ValueError:
        return text.strip()


def parse_fields(text: str, cls) -> dict:
    """``"a=1, b=true"`` -> ``{"a": 1, "b": True}``, every key a field of dataclass ``cls``."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    fields = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in defaults:
            raise SystemExit(f"--derive: {item!r} is not field=value of {cls.__name__} (fields: {sorted(defaults)})")
        parsed = field_value(value)
        # A string field keeps "none" as the word (e.g. flush_l2_prefetch="none"), not None.
        if parsed is None and isinstance(defaults[key.strip()], str):
            parsed = value.strip()
        fields[key.strip()] = parsed
    return fields


def label(fields: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in fields.items())


def parse_fields_of(text: str, classes) -> tuple[type, dict]:
    """``(cls, fields)``: ``text`` parsed as :func:`parse_fields` of the first dataclass of
    ``classes`` that has every key it names (``SystemExit`` naming them all where none has)."""
    keys = {item.partition("=")[0].strip() for item in text.split(",") if item.strip()}
    for cls in classes:
        if keys and keys <= {f.name for f in dataclasses.fields(cls)}:
            return cls, parse_fields(text, cls)
    raise SystemExit(f"--derive: {text!r} is not field=value of {' or of '.join(c.__name__ for c in classes)}")
