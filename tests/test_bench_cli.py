"""The benchmark scripts refuse bad option values before any GPU work, as usage errors (exit 2)
naming the option; on a machine without CUDA they say they need a GPU."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import bench_gdn_decode  # noqa: E402
import bench_mamba2_decode  # noqa: E402
import probe_mamba2_configs  # noqa: E402


@pytest.mark.parametrize("argv,message", [
    (["--batches", "0", "256"], "argument --batches: expected an int >= 1, got 0"),
    (["--rounds", "-1"], "argument --rounds: expected an int >= 1, got -1"),
    (["--variant-batches", "x"], "argument --variant-batches: expected an int >= 1, got 'x'"),
    (["--json", "/nonexistent-dir/x.json"], "--json: '/nonexistent-dir' is not a directory"),
])
def test_mamba2_bench_options(usage_error, argv, message):
    assert message in usage_error(lambda: bench_mamba2_decode.main(argv))


@pytest.mark.parametrize("argv,message", [
    (["--dims", "0", "16", "128", "128"], "argument --dims: expected an int >= 1, got 0"),
    (["--window", "0"], "argument --window: expected an int >= 1, got 0"),
    (["--json", "/nonexistent-dir/x.json"], "--json: '/nonexistent-dir' is not a directory"),
])
def test_delta_bench_options(usage_error, argv, message):
    assert message in usage_error(lambda: bench_gdn_decode.main("gdn", argv))


def test_json_that_is_a_directory(usage_error, tmp_path):
    assert "is a directory" in usage_error(lambda: probe_mamba2_configs.main(["--json", str(tmp_path)]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
@pytest.mark.parametrize("main", [lambda: bench_mamba2_decode.main(["--batches", "1"]),
                                  lambda: bench_gdn_decode.main("gdn", ["--batches", "1"]),
                                  lambda: bench_gdn_decode.main("kda", ["--batches", "1"]),
                                  lambda: probe_mamba2_configs.main([])],
                         ids=["mamba2", "gdn", "kda", "configs"])
def test_without_cuda_the_benchmarks_say_so(usage_error, main):
    assert "needs a CUDA GPU" in usage_error(main)
