"""``ops/_prefetch.prefetch_mode``: which L2 prefetch a launch compiles in. Inline PTX runs only
compiled on a CUDA device, and the per-line form needs a power-of-two count of 128-byte lines;
everywhere else the launch must compile no prefetch at all (the kernels' interpreter tests then
run the same launch without it)."""

import pytest
import torch

from trtllm_replayssm.ops._prefetch import PREFETCH_MODES, prefetch_mode

CUDA = torch.device("cuda")  # a device object only: nothing below queries a GPU for "none" / "lines"


@pytest.fixture
def compiled(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.mark.parametrize("name", sorted(PREFETCH_MODES))
def test_no_prefetch_off_the_gpu(name, monkeypatch):
    assert prefetch_mode(name, torch.device("cpu"), 16384) == 0
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert prefetch_mode(name, CUDA, 16384) == 0


@pytest.mark.parametrize("nbytes,want", [(16384, 1), (8192, 1), (128, 1), (10240, 0), (100, 0), (0, 0), (384, 0)])
def test_lines_need_a_power_of_two_of_lines(compiled, nbytes, want):
    # 32 rows x d_state 80 x fp32 = 10240 B: 80 lines, not a tl.arange length
    assert prefetch_mode("lines", CUDA, nbytes) == want
    assert prefetch_mode("none", CUDA, nbytes) == 0


def test_unknown_mode_is_named():
    with pytest.raises(ValueError, match="prefetch: expected one of .*'lines'.*got 'always'"):
        prefetch_mode("always", torch.device("cpu"), 16384)


@pytest.mark.gpu
def test_bulk_on_the_gpu():
    # sm_90 on: the one-instruction bulk prefetch; older GPUs fall back to lines
    want = 2 if torch.cuda.get_device_capability()[0] >= 9 else 1
    assert prefetch_mode("bulk", CUDA, 16384) == want
