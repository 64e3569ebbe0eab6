"""The ring-overlap timing probe's CPU-side pieces: the buffers it keeps across steps and its
argument check (the probe itself needs a GPU)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_ring_overlap as probe  # noqa: E402


def test_kept_buffers_one_per_shape_and_dtype():
    kept = probe._KeptBuffers()
    a = kept.empty(6, dtype=torch.float32, device="cpu")
    assert kept.empty(6, dtype=torch.float32, device="cpu") is a
    assert kept.empty(6, dtype=torch.int32, device="cpu") is not a
    assert kept.empty(3, 2, dtype=torch.float32, device="cpu").shape == (3, 2)
    # everything else is torch's own
    assert kept.float32 is torch.float32 and kept.cuda is torch.cuda


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu(usage_error):
    assert "needs a CUDA GPU" in usage_error(lambda: probe.main(["--kind", "kda"]))
