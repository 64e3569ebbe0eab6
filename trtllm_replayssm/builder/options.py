"""Build options: what the user asked for, the target preset filling the rest, and validation.

Every check here runs before anything is loaded or written, so a rejected build leaves the
output directory exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import ReplaySSMConfig
from .targets import TARGETS, Target

__all__ = [
    "QUANTIZATIONS",
    "SSM_CHECKPOINTS",
    "SSM_READS",
    "BuildError",
    "BuildOptions",
    "ResolvedOptions",
    "resolve_options",
]

QUANTIZATIONS = ("nvfp4", "fp8", "none")
SSM_CHECKPOINTS = ("fp32", "fp16-sr", "bf16-sr", "fp8-sr")
SSM_READS = ("none", "bf16", "fp8", "nvfp4")


class BuildError(ValueError):
    """A build refused for a reason the user can fix; ``option`` names the command-line option."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option


@dataclass
class BuildOptions:
    """The options of ``trtllm-replayssm build``; ``None`` means "the target preset's value".

    Attributes:
        model: Hugging Face checkpoint directory, or ``None`` for the embedded tiny hybrid model.
        output: directory to create (written to a temporary sibling, moved into place at the end).
        quantization / ssm_checkpoint / ssm_read: see :data:`QUANTIZATIONS`, :data:`SSM_CHECKPOINTS`,
            :data:`SSM_READS`.
        window: ReplaySSM window ``L`` (default 16).
        max_draft_tokens: speculative draft tokens per step (0: no speculative decoding).
        target: a key of :data:`~.targets.TARGETS`.
        calib_data: UTF-8 text file, one calibration passage per line (default: the bundled text).
        force: replace an existing ``output``.
        exclude: extra module-name patterns (``fnmatch``) kept in the original precision.
        default_excludes: keep the SSM-safe default exclusions (see ``quantize.DEFAULT_EXCLUDES``).
        calib_samples / calib_seq_len: calibration batch: sequences and tokens per sequence.
        decode_check: run the ReplaySSM-vs-standard decode check after the build.
    """

    output: str | Path
    model: str | Path | None = None
    quantization: str | None = None
    ssm_checkpoint: str | None = None
    ssm_read: str | None = None
    window: int = 16
    max_draft_tokens: int = 0
    target: str = "b300"
    calib_data: str | Path | None = None
    force: bool = False
    exclude: list[str] = field(default_factory=list)
    default_excludes: bool = True
    calib_samples: int = 16
    calib_seq_len: int = 64
    decode_check: bool = True


@dataclass(frozen=True)
class ResolvedOptions:
    """Options after the target preset is applied and everything is validated."""

    options: BuildOptions
    target: Target
    quantization: str
    replay: ReplaySSMConfig
    output: Path
    model: Path | None
    calib_data: Path | None
    preset_fields: tuple[str, ...]


def _choice(option: str, value, choices) -> None:
    if value not in choices:
        raise BuildError(option, f"expected one of {', '.join(choices)}, got {value!r}")


def resolve_options(options: BuildOptions) -> ResolvedOptions:
    """Apply the target preset and validate; raises :class:`BuildError` naming the option."""
    _choice("--target", options.target, tuple(TARGETS))
    target = TARGETS[options.target]
    preset = []
    quantization = options.quantization
    if quantization is None:
        quantization, _ = target.quantization, preset.append("quantization")
    ssm_checkpoint = options.ssm_checkpoint
    if ssm_checkpoint is None:
        ssm_checkpoint, _ = target.ssm_checkpoint, preset.append("ssm_checkpoint")
    ssm_read = options.ssm_read
    if ssm_read is None:
        ssm_read, _ = target.ssm_read, preset.append("ssm_read")
    _choice("--quantization", quantization, QUANTIZATIONS)
    _choice("--ssm-checkpoint", ssm_checkpoint, SSM_CHECKPOINTS)
    _choice("--ssm-read", ssm_read, SSM_READS)
    for option, value in (("--window", options.window), ("--max-draft-tokens", options.max_draft_tokens)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise BuildError(option, f"expected an integer, got {value!r}")
    for option, value, low in (("--calib-samples", options.calib_samples, 1), ("--calib-seq-len", options.calib_seq_len, 8)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BuildError(option, f"expected an integer >= {low}, got {value!r}")

    try:
        replay = ReplaySSMConfig.from_checkpoint_spec(
            ssm_checkpoint, read_format=ssm_read, window=options.window, max_draft_tokens=options.max_draft_tokens
        )
    except ValueError as err:
        raise BuildError(_option_of(str(err)), str(err)) from None

    model = None
    if options.model is not None:
        model = Path(options.model)
        if not model.is_dir():
            raise BuildError("--model", f"no checkpoint directory at {str(model)!r}")
        if not (model / "config.json").is_file():
            raise BuildError("--model", f"{str(model)!r} has no config.json: not a Hugging Face checkpoint")
    calib = None
    if options.calib_data is not None:
        calib = Path(options.calib_data)
        if not calib.is_file():
            raise BuildError("--calib-data", f"no file at {str(calib)!r}")
    if not str(options.output).strip():
        raise BuildError("--output", "expected a directory path, got an empty string")
    output = Path(options.output)
    for parent in output.absolute().parents:
        if parent.exists() and not parent.is_dir():
            raise BuildError("--output", f"{str(parent)!r} is not a directory, so {str(output)!r} cannot be created")
    if output.exists() and not options.force:
        raise BuildError("--output", f"{str(output)!r} exists; pass --force to replace it")
    if output.exists() and not output.is_dir():
        raise BuildError("--output", f"{str(output)!r} exists and is not a directory")
    if model is not None and _inside(model, output):
        raise BuildError("--output", "must not be the --model directory or a directory containing it")
    for pattern in options.exclude:
        if not isinstance(pattern, str) or not pattern.strip():
            raise BuildError("--exclude", f"expected a non-empty module-name pattern, got {pattern!r}")
    return ResolvedOptions(options, target, quantization, replay, output, model, calib, tuple(preset))


def _option_of(message: str) -> str:
    """The command-line option a ReplaySSMConfig error is about (named in its message)."""
    for fieldname, option in (
        ("max_draft_tokens", "--max-draft-tokens"),
        ("window", "--window"),
        ("read_format", "--ssm-read"),
        ("checkpoint_dtype", "--ssm-checkpoint"),
        ("stochastic_rounding", "--ssm-checkpoint"),
    ):
        if fieldname in message:
            return option
    return "--ssm-checkpoint"


def _inside(path: Path, parent: Path) -> bool:
    """``path`` is ``parent`` or lies under it."""
    path, parent = path.resolve(), parent.resolve()
    return path == parent or parent in path.parents
