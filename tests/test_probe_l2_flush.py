"""The L2 flush's modes and the probe that times them (its timing needs a GPU)."""

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_l2_flush as probe  # noqa: E402
from _timing import L2_FLUSH_ENV, L2Flusher  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["--gib", "0"], "argument --gib: expected an int >= 1, got 0"),
    (["--repeats", "0"], "argument --repeats: expected an int >= 1, got 0"),
])
def test_bad_arguments_refused(argv, message, usage_error):
    assert message in usage_error(lambda: probe.main(argv))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu(usage_error):
    assert "needs a CUDA GPU" in usage_error(lambda: probe.main([]))


def test_flush_mode_refused_before_any_allocation(monkeypatch):
    # The mode is checked before the device is asked for its L2 (which a CPU machine has not).
    with pytest.raises(ValueError, match=r"mode: expected one of \('write', 'read'\)"):
        L2Flusher(device="cpu", mode="zero")
    monkeypatch.setenv(L2_FLUSH_ENV, "evict")
    with pytest.raises(ValueError, match="REPLAYSSM_L2_FLUSH.*'evict'"):
        L2Flusher(device="cpu")


def test_bench_refuses_a_flush_mode_without_a_flush(usage_error):
    import bench_mamba2_decode as bench

    assert "--l2-flush: not with --no-l2-flush" in usage_error(
        lambda: bench.main(["--no-l2-flush", "--l2-flush", "read"]))


def test_read_kernel_loads_every_block_and_stores_none():
    # Under the Triton interpreter: a block whose sum is the sentinel stores it, so the loads
    # cannot be dropped; zeros store nothing.
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs under TRITON_INTERPRET=1 (as CI runs the kernel tests)")
    block = 16
    src = torch.zeros(3 * block, dtype=torch.float32)
    src[block + 5] = 1.0e30
    out = torch.full((3,), -1.0)
    probe._read_kernel[(3,)](src, out, src.numel(), BLOCK=block)
    assert out.tolist() == [-1.0, torch.tensor(1.0e30).item(), -1.0]


def test_scale_kernel_rewrites_in_place():
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs under TRITON_INTERPRET=1 (as CI runs the kernel tests)")
    buf = torch.arange(20, dtype=torch.float32)
    probe._scale_kernel[(2,)](buf, 19, 2.0, BLOCK=16)
    assert buf.tolist() == [2.0 * i for i in range(19)] + [19.0]


def test_row_sums_kernel_stores_each_rows_sum():
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs under TRITON_INTERPRET=1 (as CI runs the kernel tests)")
    src = torch.arange(4 * 8, dtype=torch.float32).reshape(4, 8)
    out = torch.zeros(4, dtype=torch.bfloat16)
    probe._row_sums_kernel[(2,)](src, out, ROWS=2, COLS=8)
    assert out.tolist() == src.sum(dim=1).to(torch.bfloat16).tolist()
