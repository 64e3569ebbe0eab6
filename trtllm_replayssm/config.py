"""User-facing ReplaySSM state configuration.

One :class:`ReplaySSMConfig` describes how every SSM layer of a model keeps its decode state:
the window ``L`` between flushes, the room reserved for speculative draft tokens, the precision
of the recurrence checkpoint (optionally with stochastic rounding), the format of the read copy
used for outputs, and whether flushes are staggered across slots.

The same object is written by the builder to ``replayssm.yaml`` and read back by the runtime
integration, so it round-trips through :meth:`ReplaySSMConfig.to_dict` /
:meth:`ReplaySSMConfig.from_dict` and YAML.
"""

from __future__ import annotations

import numbers

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "CHECKPOINT_DTYPES",
    "READ_FORMATS",
    "MAX_DRAFT_TOKENS",
    "ReplaySSMConfig",
]

#: Recurrence checkpoint precisions. ``fp8`` is FP8 E4M3 with a per-row FP32 scale.
CHECKPOINT_DTYPES = ("fp32", "fp16", "bf16", "fp8")
#: Read-copy formats. ``none`` means outputs read the recurrence checkpoint itself.
READ_FORMATS = ("none", "bf16", "fp8", "nvfp4")
#: Drafts are verified with a per-head triangular solve of this size at most (math.md section 3).
MAX_DRAFT_TOKENS = 16

# Spellings users type on the command line (``--ssm-checkpoint fp16-sr``) mapped to fields.
_CHECKPOINT_ALIASES = {
    "fp32": ("fp32", False),
    "float32": ("fp32", False),
    "fp16": ("fp16", False),
    "float16": ("fp16", False),
    "bf16": ("bf16", False),
    "bfloat16": ("bf16", False),
    "fp8": ("fp8", False),
    "fp16-sr": ("fp16", True),
    "bf16-sr": ("bf16", True),
    "fp8-sr": ("fp8", True),
}


@dataclass(frozen=True)
class ReplaySSMConfig:
    """How ReplaySSM keeps the decode state of every SSM layer.

    Attributes:
        window: ``L``, the number of committed tokens between two flushes of a slot. The input
            ring holds ``window + max_draft_tokens`` entries. Default 16. (A fold-first flush,
            KDA's default on the GPU, folds the ring before the token that would fill it and
            keeps that token as the next window's first entry: ``L - 1`` entries per flush in
            steady state.)
        max_draft_tokens: most speculative draft tokens verified in one step (0 = no
            speculative decoding). At most ``min(window, 16)``.
        checkpoint_dtype: precision of the recurrence checkpoint, one of
            :data:`CHECKPOINT_DTYPES`.
        stochastic_rounding: round the checkpoint with stochastic rounding when it is written at
            a flush. Only meaningful for a low-precision checkpoint; refused with ``fp32``.
        sr_seed: seed of the counter-based generator that draws the rounding bits, so a run is
            reproducible.
        read_format: format of the read copy that non-flush steps read, one of
            :data:`READ_FORMATS`. ``none`` reads the checkpoint.
        flush_stagger: slot ``i`` makes its first flush after ``window - (i % window)`` tokens,
            so a batch flushes about ``1/window`` of its slots at every step instead of all of
            them every ``window``-th step.
    """

    window: int = 16
    max_draft_tokens: int = 0
    checkpoint_dtype: str = "fp32"
    stochastic_rounding: bool = False
    sr_seed: int = 0
    read_format: str = "none"
    flush_stagger: bool = True
    _extra: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._extra:
            raise ValueError(
                f"ReplaySSMConfig: unknown field(s) {sorted(self._extra)}; expected a subset of "
                f"{[f.name for f in dataclasses.fields(self) if not f.name.startswith('_')]}"
            )
        _check_int("window", self.window, low=1)
        _check_int("max_draft_tokens", self.max_draft_tokens, low=0)
        if self.max_draft_tokens > min(self.window, MAX_DRAFT_TOKENS):
            raise ValueError(
                f"ReplaySSMConfig.max_draft_tokens: {self.max_draft_tokens} draft tokens do not fit "
                f"the buffer; expected at most min(window={self.window}, {MAX_DRAFT_TOKENS})"
            )
        if self.checkpoint_dtype not in CHECKPOINT_DTYPES:
            raise ValueError(
                f"ReplaySSMConfig.checkpoint_dtype: unknown format {self.checkpoint_dtype!r}; "
                f"expected one of {CHECKPOINT_DTYPES}"
            )
        if self.read_format not in READ_FORMATS:
            raise ValueError(
                f"ReplaySSMConfig.read_format: unknown format {self.read_format!r}; "
                f"expected one of {READ_FORMATS}"
            )
        if not isinstance(self.stochastic_rounding, bool):
            raise ValueError(
                f"ReplaySSMConfig.stochastic_rounding: expected a bool, got "
                f"{type(self.stochastic_rounding).__name__}"
            )
        if self.stochastic_rounding and self.checkpoint_dtype == "fp32":
            raise ValueError(
                "ReplaySSMConfig.stochastic_rounding: stochastic rounding needs a low-precision "
                "checkpoint (fp16, bf16 or fp8); checkpoint_dtype is fp32"
            )
        _check_int("sr_seed", self.sr_seed, low=0, high=2**63 - 1)
        if not isinstance(self.flush_stagger, bool):
            raise ValueError(
                f"ReplaySSMConfig.flush_stagger: expected a bool, got {type(self.flush_stagger).__name__}"
            )
        if self.read_format != "none" and _bits(self.read_format) > _bits(self.checkpoint_dtype):
            raise ValueError(
                f"ReplaySSMConfig.read_format: a {self.read_format} read copy is wider than the "
                f"{self.checkpoint_dtype} checkpoint it is made from; expected a format no wider "
                "than the checkpoint, or 'none'"
            )

    # -- derived --------------------------------------------------------------------------------
    @property
    def ring_capacity(self) -> int:
        """Entries in each slot's input ring: a full window plus room for drafts."""
        return self.window + self.max_draft_tokens

    @property
    def checkpoint_spec(self) -> str:
        """The command-line spelling of the checkpoint, e.g. ``fp16-sr``."""
        return self.checkpoint_dtype + ("-sr" if self.stochastic_rounding else "")

    def first_flush_at(self, slot: int) -> int:
        """Ring length at which ``slot`` makes its first flush after a reset."""
        if isinstance(slot, bool) or not isinstance(slot, numbers.Integral) or slot < 0:
            raise ValueError(f"slot: expected an int >= 0, got {slot!r}")
        slot = int(slot)
        if self.flush_stagger:
            return self.window - (slot % self.window)
        return self.window

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_checkpoint_spec(cls, spec: str, **kwargs: Any) -> "ReplaySSMConfig":
        """Build from a command-line checkpoint spelling such as ``fp32`` or ``bf16-sr``."""
        if not isinstance(spec, str) or spec not in _CHECKPOINT_ALIASES:
            raise ValueError(
                f"ssm checkpoint: unknown value {spec!r}; expected one of {sorted(_CHECKPOINT_ALIASES)}"
            )
        dtype, sr = _CHECKPOINT_ALIASES[spec]
        return cls(checkpoint_dtype=dtype, stochastic_rounding=sr, **kwargs)

    def replace(self, **changes: Any) -> "ReplaySSMConfig":
        """A copy with ``changes`` applied and validated."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReplaySSMConfig":
        if not isinstance(data, Mapping):
            raise ValueError(f"ReplaySSMConfig: expected a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        extra = {k: data[k] for k in data if k not in known}
        return cls(**{k: data[k] for k in data if k in known}, _extra=extra)

    def to_yaml(self, path: str | Path | None = None) -> str:
        import yaml

        text = yaml.safe_dump({"replayssm": self.to_dict()}, sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_yaml(cls, source: str | Path) -> "ReplaySSMConfig":
        """Read from a YAML file path or a YAML string (top-level key ``replayssm`` optional).

        A one-line string that names an existing file, or ends in ``.yaml`` / ``.yml``, is a path."""
        import yaml

        if not isinstance(source, (str, Path)):
            raise ValueError(f"source: expected a YAML file path or YAML text, got {type(source).__name__}")
        path = _as_path(source)
        if path is not None and not path.is_file():
            raise ValueError(f"source: no such YAML file: {str(path)!r}")
        text = path.read_text() if path is not None else source
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            where = f"{str(path)!r}" if path is not None else "the text given"
            raise ValueError(f"source: {where} is not valid YAML: {err}") from err
        if isinstance(data, Mapping) and "replayssm" in data:
            data = data["replayssm"]
        return cls.from_dict(data)


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"ReplaySSMConfig.{name}: expected an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"ReplaySSMConfig.{name}: expected an int {bound}, got {value}")


def _bits(fmt: str) -> float:
    return {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "nvfp4": 4.5}[fmt]


def _as_path(source: str | Path) -> Path | None:
    """``source`` as a file path, or None where it is YAML text."""
    if isinstance(source, Path):
        return source
    if "\n" in source or not source.strip():
        return None
    path = Path(source)
    return path if path.is_file() or path.suffix.lower() in (".yaml", ".yml") else None
