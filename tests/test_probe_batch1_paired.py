"""The paired batch-1 probe's argument checks (its timing needs a GPU)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_batch1_paired as probe  # noqa: E402


@pytest.mark.parametrize("argv", [["--batches", "0"], ["--rounds", "1"]])
def test_bad_counts_refused(argv, usage_error):
    assert "--batches: expected >= 1, --rounds: expected >= 2" in usage_error(lambda: probe.main(argv))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu(usage_error):
    assert "needs a CUDA GPU" in usage_error(lambda: probe.main(["--batches", "1"]))


@pytest.mark.parametrize("flag", ["--replay-with", "--standard-with"])
def test_bad_fields_refused(flag, usage_error):
    err = usage_error(lambda: probe.main(["--batches", "1", flag, "num_wraps=2"]))
    assert f"{flag}: 'num_wraps=2' is not field=value of LaunchConfig" in err


def test_configs_replace_only_the_named_fields():
    dims = probe.DIMS["nemotron_h"]
    std, rep = probe.configs(dims, 1, "num_warps=1", "num_warps=2, block_p=16")
    base_std, base_rep = probe.configs(dims, 1)
    assert (std.num_warps, rep.num_warps, rep.block_p) == (1, 2, 16)
    assert rep.kernel == base_rep.kernel == "write_through"
    assert std.block_p == base_std.block_p and base_std.num_warps != 1


def test_no_graphs_refused(usage_error):
    assert "--graphs: expected >= 1, got 0" in usage_error(lambda: probe.main(["--graphs", "0"]))


def test_mamba2_options_refused_for_delta_kinds(usage_error):
    assert "Mamba-2 only, got --kind gdn" in usage_error(lambda: probe.main(["--kind", "gdn", "--replay-with", "num_warps=2"]))


@pytest.mark.parametrize("count", ["1", "-2"])
def test_one_allocation_refused(count, usage_error):
    assert f"--allocations: expected 0 (off) or >= 2, got {count}" in usage_error(lambda: probe.main(["--allocations", count]))


def test_allocations_refused_for_delta_kinds(usage_error):
    assert "--allocations: Mamba-2 only, got --kind kda" in usage_error(lambda: probe.main(["--kind", "kda", "--allocations", "4"]))


def test_no_l2_flush_replaces_only_the_flush():
    calls = []
    flusher = lambda: calls.append("flush")  # noqa: E731
    probe.step_flush(flusher, off=True)()
    assert calls == []
    probe.step_flush(flusher, off=False)()
    assert calls == ["flush"]
