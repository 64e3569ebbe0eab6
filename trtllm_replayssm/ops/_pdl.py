"""Programmatic dependent launch (PDL, sm_90+) for the staged steps' launch pairs.

A launch made with ``launch_pdl=True`` may start while the previous kernel in its stream is still
running, once every program of that kernel has called ``gdc_launch_dependents`` (or exited); its
programs then call ``gdc_wait`` before touching anything that kernel writes, which returns when
it has finished and its writes are visible. What is gained is the gap between the two launches:
the dependent launch's programs are dispatched and resident when the first kernel ends.

``gdc_wait`` / ``gdc_launch_dependents`` are Triton's (``triton.language.extra.cuda``); the
interpreter does not run them and pre-sm_90 GPUs have no such instructions, so a kernel takes
them behind a ``PDL`` constexpr that :func:`pdl_supported` decides per launch.
"""

from __future__ import annotations

import os

import torch

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # a Triton without grid dependency control: PDL stays off (pdl_supported)
    gdc_launch_dependents = gdc_wait = None

__all__ = ["gdc_launch_dependents", "gdc_wait", "pdl_supported"]


def pdl_supported(device: torch.device) -> bool:
    """Whether launches on ``device`` can use PDL: a CUDA device of compute capability 9.0 or
    newer, compiled kernels (not ``TRITON_INTERPRET=1``) and a Triton that has the instructions."""
    if device.type != "cuda" or gdc_wait is None or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9
