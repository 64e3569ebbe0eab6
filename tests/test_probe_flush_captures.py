"""The flush-capture timing probe's CPU-side pieces: its configurations and argument checks (the
probe itself needs a GPU)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_flush_captures as probe  # noqa: E402

from trtllm_replayssm.ops.mamba2 import decode  # noqa: E402


def test_configs_are_the_default_with_fields_replaced():
    (l0, c0), (l1, c1) = probe.configs_for(["", "flush_ws_order=counter, flush_ws_chunk=8"], 64, 128, 256)
    default = decode.launch_config("replay", 64, 128, 256)
    assert (l0, c0) == ("default", default)
    assert l1 == "flush_ws_order=counter, flush_ws_chunk=8"
    assert (c1.flush_ws_order, c1.flush_ws_chunk) == ("counter", 8)
    assert c1.flush_impl == default.flush_impl == "cuda_ws"


def test_configs_refuse_an_unknown_field():
    with pytest.raises(SystemExit, match="not field=value of LaunchConfig"):
        probe.configs_for(["flush_order=counter"], 64, 128, 256)


@pytest.mark.parametrize("arg", ["--allocations", "--captures", "--rounds", "--batch"])
def test_counts_must_be_positive(arg):
    with pytest.raises(SystemExit, match=f"{arg}: expected >= 1, got 0"):
        probe.main([arg, "0"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        probe.main(["--derive", ""])


def test_mixed_count_must_not_be_negative():
    with pytest.raises(SystemExit, match="--mixed: expected >= 0, got -1"):
        probe.main(["--mixed", "-1"])
