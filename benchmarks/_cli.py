"""Argument checks the benchmark and probe scripts share: a bad value is refused, naming its
option, before any GPU work (a run of minutes must not end in a traceback that loses its rows)."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

__all__ = ["check_output", "positive_int", "require_cuda"]


def positive_int(text: str) -> int:
    """argparse ``type`` of counts (batches, rounds, dims): an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {value}")
    return value


def check_output(p: argparse.ArgumentParser, path, option: str = "--json") -> None:
    """``path`` (None: not asked for) can be written: its folder exists and it is not a folder."""
    if path is None:
        return
    path = Path(path)
    if not path.parent.is_dir():
        p.error(f"{option}: {str(path.parent)!r} is not a directory, so {str(path)!r} cannot be written")
    if path.is_dir():
        p.error(f"{option}: {str(path)!r} is a directory")


def require_cuda(p: argparse.ArgumentParser) -> None:
    """Stop with a usage error where no CUDA GPU is visible (the scripts time GPU kernels)."""
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
