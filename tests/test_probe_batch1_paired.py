"""The paired batch-1 probe's argument checks (its timing needs a GPU)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_batch1_paired as probe  # noqa: E402


@pytest.mark.parametrize("argv", [["--batches", "0"], ["--rounds", "1"]])
def test_bad_counts_refused(argv, capsys):
    with pytest.raises(SystemExit):
        probe.main(argv)
    assert "--batches: expected >= 1, --rounds: expected >= 2" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu(capsys):
    with pytest.raises(SystemExit):
        probe.main(["--batches", "1"])
    assert "needs a CUDA GPU" in capsys.readouterr().err
