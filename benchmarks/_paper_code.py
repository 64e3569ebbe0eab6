"""Loading single kernel files of the paper's public code (github.com/Johnny-Liou/ReplaySSM, a
vLLM fork) from a checkout, for ``bench_gdn_paper.py`` / ``bench_mamba2_paper.py``.

Each file is executed alone: the few vLLM modules it imports are replaced by stand-ins (Triton
itself, a launch-config lookup answering with the values the benchmark passes, a softplus, the
null block id), so neither vLLM nor the rest of the fork is needed. Nothing of the paper's code
is copied into this repository.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import Callable

import triton
import triton.language as tl

__all__ = ["load_paper_function"]


@triton.jit
def _softplus(dt):
    # log(1 + e^dt), linear past 20 (as torch's threshold).
    return tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))), dt)


def _install_standins(config: Callable[..., tuple]) -> None:
    utils = types.ModuleType("vllm.triton_utils")
    utils.tl, utils.triton = tl, triton
    cfg = types.ModuleType("vllm.model_executor.layers.mamba.ops.replayssm_config")
    cfg.get_replayssm_config = config
    ssm = types.ModuleType("vllm.model_executor.layers.mamba.ops.mamba_ssm")
    ssm.softplus = _softplus
    backends = types.ModuleType("vllm.v1.attention.backends.utils")
    backends.NULL_BLOCK_ID = 0
    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.layers", "vllm.model_executor.layers.mamba",
                 "vllm.model_executor.layers.mamba.ops", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.backends"):
        sys.modules.setdefault(name, types.ModuleType(name))
    for module in (utils, cfg, ssm, backends):
        sys.modules[module.__name__] = module


def load_paper_function(root: str, relpath: str, name: str, config: Callable[..., tuple]):
    """``name`` from the paper's file ``relpath`` under the checkout ``root``; ``config`` answers
    the file's ``get_replayssm_config(kernel, **shape)`` calls."""
    path = os.path.join(root, relpath)
    if not os.path.isfile(path):
        raise SystemExit(f"--paper-root: expected a checkout of the paper's repository with {relpath}, "
                         f"found no such file under {root!r}")
    _install_standins(config)
    spec = importlib.util.spec_from_file_location("paper_" + os.path.splitext(os.path.basename(relpath))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)
