"""The grid-exit probe's argument checks (its timing needs a GPU)."""

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_flush_grid_exits as probe  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["--items", "0"], "argument --items: expected an int >= 1, got 0"),
    (["--batches", "256", "0"], "argument --batches: expected an int >= 1, got 0"),
    (["--warps", "3"], "--warps: expected a power of two up to 32, got 3"),
    (["--committed", "15"], "--committed: expected a non-flush ring length in [0, 14], got 15"),
])
def test_bad_arguments_refused(argv, message, usage_error):
    assert message in usage_error(lambda: probe.main(argv))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu(usage_error):
    assert "needs a CUDA GPU" in usage_error(lambda: probe.main([]))


def test_exit_blocks_count_only_flushing_rows():
    # Under the Triton interpreter: rows 0 and 2 flush at this step (c + 1 >= flush_at), row 1 not;
    # each row's ITEMS blocks count once each.
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs under TRITON_INTERPRET=1 (as CI runs the kernel tests)")
    committed = torch.tensor([15, 3, 7], dtype=torch.int32)
    flush_at = torch.tensor([16, 16, 8], dtype=torch.int32)
    word = torch.zeros(1, dtype=torch.int32)
    probe._exit_blocks[(3 * 4,)](committed, flush_at, word, ITEMS=4)
    assert int(word) == 8
