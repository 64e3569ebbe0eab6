"""What the Mamba-2 flush launch asks of the L2 ahead of its loads (``LaunchConfig.flush_l2_prefetch``,
``ops/mamba2/decode_staged.py``) changes no bit: a prefetch moves no data the kernel computes
with, so outputs and state equal those of the same launch without it; every launch also within
1e-5 of float64 (``check_replay``). GPU only (the interpreter has no prefetch)."""

import pytest
import torch

from trtllm_replayssm.ops.mamba2 import decode

from mamba2_kernel_harness import check_replay, kernel_replay


def _same_bits(dims, base, changed):
    """The launch ``base`` and ``base`` with ``changed``, 26 bf16 steps at window 8, batch 64,
    staggered: outputs and state bit for bit equal (and each within 1e-5 of float64)."""
    def recorded(cfg, ys):
        launch = kernel_replay(cfg)

        def run(*args):
            ys.append(launch(*args).clone())
            return ys[-1]
        return run

    ys_plain, ys_changed = [], []
    plain, _ = check_replay(dims, torch.bfloat16, 64, 8, 26, "cuda", stagger=True,
                            run=recorded(decode.LaunchConfig(**base), ys_plain))
    other, _ = check_replay(dims, torch.bfloat16, 64, 8, 26, "cuda", stagger=True,
                            run=recorded(decode.LaunchConfig(**base, **changed), ys_changed))
    assert len(ys_plain) == len(ys_changed) == 26
    assert all(torch.equal(a, b) for a, b in zip(ys_plain, ys_changed))
    for name, t in plain.tensors().items():
        assert torch.equal(t, getattr(other, name)), name


def _flush_base(dims):
    # head_dim 80 takes 16-row flush tiles, as the default does.
    rows = 16 if dims[1] % 32 else 32
    return dict(block_p=16, num_warps=2, kernel="staged", fold="tf32x2", flush_launch=True, flush_stream=True,
                flush_max_registers=(128, 96), flush_heads=4, flush_block_p=rows, flush_warps=2 if rows == 16 else 4)


GPU_DIMS = [(16, 64, 128, 2), (12, 80, 128, 2), (8, 64, 64, 1), (6, 80, 80, 3)]


@pytest.mark.gpu
@pytest.mark.parametrize("mode,ahead", [("lines", 1), ("bulk", 1), ("lines", 2), ("bulk", 3)])
@pytest.mark.parametrize("dims", GPU_DIMS)
def test_flush_l2_prefetch_changes_nothing_gpu(dims, mode, ahead):
    _same_bits(dims, _flush_base(dims), dict(flush_l2_prefetch=mode, flush_l2_ahead=ahead))
