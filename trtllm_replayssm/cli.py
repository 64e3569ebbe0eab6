"""The ``trtllm-replayssm`` command.

Subcommands: ``build`` (the builder) and ``info`` (versions and what is installed). Others
register through :data:`SUBCOMMANDS`: a name mapped to ``(add_arguments, run)``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

__all__ = ["SUBCOMMANDS", "add_build_arguments", "main", "run_build"]

#: Exit status of a refused command (bad option or input), as argparse uses.
EXIT_USAGE = 2


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """The builder's options (shared with build_scripts/build_engine.py)."""
    from .builder.options import QUANTIZATIONS, SSM_CHECKPOINTS, SSM_READS
    from .builder.targets import TARGETS

    parser.add_argument("--model", metavar="DIR", default=None,
                        help="Hugging Face checkpoint directory (default: the embedded tiny hybrid model)")
    parser.add_argument("--output", metavar="DIR", required=True, help="output directory to create")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                        help="weight format (default: the target's preset, nvfp4)")
    parser.add_argument("--ssm-checkpoint", choices=SSM_CHECKPOINTS, default=None,
                        help="recurrence checkpoint precision (default: the target's preset)")
    parser.add_argument("--ssm-read", choices=SSM_READS, default=None,
                        help="read-copy format of the SSM state (default: the target's preset)")
    parser.add_argument("--window", type=int, default=16, help="ReplaySSM window L between flushes (default 16)")
    parser.add_argument("--max-draft-tokens", type=int, default=0,
                        help="speculative draft tokens per step (default 0: no speculative decoding)")
    parser.add_argument("--target", choices=tuple(TARGETS), default="b300", help="target GPU (default b300)")
    parser.add_argument("--calib-data", metavar="FILE", default=None,
                        help="UTF-8 calibration text, one passage per line (default: bundled text)")
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.add_argument("--exclude", metavar="PATTERN", action="append", default=[],
                        help="module-name pattern to keep unquantized (repeatable)")
    parser.add_argument("--no-default-excludes", dest="default_excludes", action="store_false",
                        help="drop the SSM-safe default exclusions (conv1d, decay/beta projections, norms, routers, "
                             "lm_head, embeddings)")
    parser.add_argument("--calib-samples", type=int, default=16,
                        help="calibration sequences (default 16: enough for the tiny model; use hundreds for real ones)")
    parser.add_argument("--calib-seq-len", type=int, default=64, help="tokens per calibration sequence (default 64)")
    parser.add_argument("--no-decode-check", dest="decode_check", action="store_false",
                        help="skip the ReplaySSM-vs-standard decode check after the build")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run_build(args: argparse.Namespace) -> int:
    from .builder import BuildError, BuildOptions, build, format_summary

    options = BuildOptions(
        output=args.output, model=args.model, quantization=args.quantization, ssm_checkpoint=args.ssm_checkpoint,
        ssm_read=args.ssm_read, window=args.window, max_draft_tokens=args.max_draft_tokens, target=args.target,
        calib_data=args.calib_data, force=args.force, exclude=list(args.exclude), default_excludes=args.default_excludes,
        calib_samples=args.calib_samples, calib_seq_len=args.calib_seq_len, decode_check=args.decode_check,
    )
    try:
        report = build(options, progress=not args.quiet)
    except BuildError as err:
        print(f"trtllm-replayssm build: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(format_summary(report, args.output))
    failed = [c for c in report["decode_check"] if c["status"] == "failed"]
    if failed:
        print(f"trtllm-replayssm build: decode check failed for {[c['layer'] for c in failed]}", file=sys.stderr)
        return 1
    return 0


def _add_info_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def installed_versions() -> dict[str, str]:
    """Versions of the packages the package uses (``not installed`` where absent) and the devices."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("trtllm-replayssm", "torch", "triton", "transformers", "nvidia-modelopt", "tensorrt_llm",
                 "tensorrt", "fla-core", "safetensors", "tritonclient"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    import torch

    out["cuda"] = torch.version.cuda or "none (CPU build of torch)"
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        caps = [".".join(map(str, torch.cuda.get_device_capability(i))) for i in range(torch.cuda.device_count())]
        out["gpus"] = ", ".join(f"{n} (sm {c})" for n, c in zip(names, caps))
    else:
        out["gpus"] = "none visible"
    return out


def run_info(args: argparse.Namespace) -> int:
    for name, value in installed_versions().items():
        print(f"{name:18s} {value}")
    return 0


#: name -> (add_arguments(parser), run(args) -> exit status, help)
SUBCOMMANDS: dict[str, tuple[Callable, Callable, str]] = {
    "build": (add_build_arguments, run_build, "quantize a hybrid checkpoint and write a deployable directory"),
    "info": (_add_info_arguments, run_info, "print versions and what is installed"),
}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trtllm-replayssm", description="ReplaySSM for hybrid LLMs in TensorRT-LLM")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_arguments, run, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    return args._run(args)


if __name__ == "__main__":
    sys.exit(main())
