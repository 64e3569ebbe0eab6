"""The occupancy probe's argument checks (the probe itself needs a GPU: it pads a compiled
kernel's launch)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_fused_occupancy as probe  # noqa: E402


def test_negative_per_sm_refused():
    with pytest.raises(SystemExit, match="--per-sm: expected >= 0, got -1"):
        probe.main(["--per-sm", "-1", "--", "--batches", "128"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu():
    jit_run = probe.decode_fused._fused_step_kernel.run
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        probe.main(["--per-sm", "4", "--", "--batches", "128"])
    # refused before it wrapped the kernel's launches
    assert probe.decode_fused._fused_step_kernel.run == jit_run
