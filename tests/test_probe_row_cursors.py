"""The row-cursor timing probe's CPU-side pieces: the per-replay cursor setter and its argument
checks (the probe itself needs a GPU; the kernel path it times is tested in
test_gdn_fused_kernels.py)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_row_cursors as probe  # noqa: E402


def test_row_cursors_cycle_phases_then_flush():
    committed, flush_at = torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int32)
    flushed = []
    before = probe.RowCursors(committed, flush_at, 16, [2, 7], lambda: flushed.append(committed.clone()))
    seen = []
    for _ in range(3):
        before()
        seen.append(int(committed[0]))
        assert torch.all(committed == committed[0]) and torch.all(flush_at == 16)
    assert seen == [2, 7, 2] and [int(f[0]) for f in flushed] == seen  # the L2 flush comes after the cursors


def test_bad_batches_refused():
    with pytest.raises(SystemExit, match="--batches: expected positive batch sizes, got \\[0\\]"):
        probe.main(["--batches", "0"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        probe.main(["--batches", "128"])
