"""The one-launch Gated DeltaNet step (ops/gdn/decode_fused.py) against the float64 reference
(harness in delta_kernel_harness.py). CPU: the Triton interpreter at tiny dims; GPU (``-m gpu``):
model dims through the public op."""

from __future__ import annotations

import pytest
import torch

from trtllm_replayssm.ops.gdn import decode
from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant, fused_config

from delta_kernel_harness import GPU_DIMS, Layer, check_variant_gpu, checkpoints_after_three_windows, drive, rel_err


FUSED_CPU = [
    # HV, H, d_k, d_v, dtype, variant
    pytest.param(4, 2, 32, 32, torch.float32, FusedVariant(block_v=16, fold_chunk=16), id="share2-2parts-2chunks"),
    pytest.param(2, 1, 32, 32, torch.float16, FusedVariant(block_v=16, fold_chunk=16), id="share2-fp16-tf32x2"),
    pytest.param(2, 2, 16, 16, torch.float32, "fused", id="share1-defaults-capped"),
    pytest.param(4, 1, 16, 32, torch.float32, FusedVariant(block_v=32, precision="ieee"), id="share4-ieee"),
    pytest.param(4, 2, 32, 32, torch.float32, FusedVariant(block_v=16, fold_chunk=16, stages=2),
                 id="share2-chunk-loop"),
    pytest.param(2, 1, 32, 16, torch.float16, FusedVariant(block_v=16, fold_chunk=16, stages=3),
                 id="share2-fp16-chunk-loop"),
    pytest.param(2, 1, 64, 16, torch.float16, FusedVariant(block_v=16, fold_chunk=32, stages=2),
                 id="share2-fp16-chunk-loop-kc32"),
    pytest.param(4, 2, 32, 32, torch.float32, FusedVariant(block_v=16, fold_chunk=16, stages=2, flush_stages=0),
                 id="share2-chunk-loop-flush-unrolled"),
    pytest.param(2, 1, 32, 16, torch.float16, FusedVariant(block_v=16, fold_chunk=16, stages=3, flush_stages=1),
                 id="share2-fp16-chunk-loop-flush-rolled"),
    # flush_impl="cuda": the kernel without its fold, the flush rows first in flush_rows_torch
    # (decode_flush_cuda.py's reading of the CUDA kernel; on a GPU the kernel itself,
    # test_gdn_flush_cuda.py).
    pytest.param(4, 2, 32, 32, torch.float32, FusedVariant(block_v=16, fold_chunk=16, flush_impl="cuda"),
                 id="share2-flush-rows-apart"),
    pytest.param(2, 1, 32, 16, torch.float16, FusedVariant(block_v=16, fold_chunk=16, stages=3, flush_impl="cuda"),
                 id="share2-fp16-chunk-loop-flush-rows-apart"),
]


@pytest.mark.parametrize("HV,H,d_k,d_v,dtype,variant", FUSED_CPU)
def test_fused_kernel_matches_reference_cpu(HV, H, d_k, d_v, dtype, variant):
    """Outputs, cursors, checkpoints and the materialised ring against float64 every step, 3+
    windows per live slot, with staggered phases and with every slot flushing at once, a padded
    row; the fp32 checkpoint within 1e-5."""
    layer = Layer(False, HV, H, d_k, d_v, dtype=dtype, seed=HV + d_v)
    for stagger in (True, False):
        _, worst_c, flushes = drive(layer, 4, slots=6, steps=3 * 4 + 2, window=4, refold=False, stagger=stagger,
                                    variant=variant)
        assert flushes >= 3 * 3 and worst_c < 1e-5, (stagger, flushes, worst_c)


def test_fused_wide_ring_cpu():
    """A ring wider than the window (draft slots): entries are addressed by the capacity."""
    layer = Layer(False, 2, 1, 16, 16, seed=5)
    _, worst_c, flushes = drive(layer, 3, slots=4, steps=3 * 5 + 2, window=5, drafts=3, refold=False,
                                variant=FusedVariant())
    assert flushes >= 3 * 2 and worst_c < 1e-5


def test_fused_config():
    """Rows per program and fold chunks: defaults capped by the dims, bad sizes named."""
    assert fused_config(FusedVariant(), 256, 32, 128, 128) == (32, 32, 1)
    assert fused_config(FusedVariant(), 4, 2, 16, 16) == (16, 16, 1)
    assert fused_config(FusedVariant(block_v=64, fold_chunk=64, num_warps=2), 8, 4, 128, 128) == (64, 64, 2)
    with pytest.raises(ValueError, match="^FusedVariant.block_v: expected a power of two >= 16 dividing d_v=32"):
        fused_config(FusedVariant(block_v=8), 4, 2, 16, 32)
    with pytest.raises(ValueError, match="^FusedVariant.fold_chunk: expected a power of two >= 16 dividing d_k=32"):
        fused_config(FusedVariant(fold_chunk=24), 4, 2, 32, 32)


@pytest.mark.parametrize("fields,error", [
    (dict(block_v=0), "^FusedVariant.block_v: expected a positive int"),
    (dict(num_warps=1.5), "^FusedVariant.num_warps: expected a positive int"),
    (dict(precision="tf32"), "^FusedVariant.precision: expected one of"),
    (dict(stages=-1), "^FusedVariant.stages: expected an int >= 0, got -1"),
    (dict(stages=2, flush_stages=-1), "^FusedVariant.flush_stages: expected an int >= 0 or None, got -1"),
])
def test_fused_variant_rejects_bad_options(fields, error):
    with pytest.raises(ValueError, match=error):
        FusedVariant(**fields)


@pytest.mark.parametrize("per_channel,refold,error", [
    (False, True, "refold=True is not served"),
    (True, False, "per-channel decays"),
])
def test_fused_refuses_what_it_does_not_serve(per_channel, refold, error):
    """A refolding flush and KDA's per-channel decays are refused before anything is written."""
    from trtllm_replayssm.config import ReplaySSMConfig

    layer = Layer(per_channel, 2, 2, 16, 16, seed=2)
    state = layer.state(2, ReplaySSMConfig(window=4))
    before = {n: t.clone() for n, t in state.tensors().items()}
    with pytest.raises(ValueError, match=error):
        decode.delta_replay_step(
            state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
            state.committed, state.flush_at, state.window, **layer.tokens(2), **layer.params(layer.device),
            state_indices=None, pad_slot_id=-1, scale=None, refold=refold, variant="fused")
    for n, t in state.tensors().items():
        assert torch.equal(t, before[n]), n


# ------------------------------------------------------------------ GPU ----------------------
@pytest.mark.gpu
@pytest.mark.parametrize("variant", [
    FusedVariant(), FusedVariant(block_v=16, fold_chunk=64), FusedVariant(block_v=64, num_warps=2),
    FusedVariant(stages=3), FusedVariant(block_v=64, stages=2), FusedVariant(block_v=128, stages=2, num_warps=2),
    FusedVariant(block_v=64, stages=2, precision="tf32x2"), FusedVariant(block_v=64, stages=2, flush_stages=0),
    FusedVariant(block_v=64, stages=3, flush_stages=0), FusedVariant(block_v=64, stages=4, flush_stages=0),
], ids=["default", "bv16-kc64", "bv64-w2", "chunk-loop", "chunk-loop-bv64", "chunk-loop-bv128-w2",
        "chunk-loop-bv64-tf32x2", "chunk-loop-bv64-flush-unrolled", "chunk-loop-bv64-s3-flush-unrolled",
        "chunk-loop-bv64-s4-flush-unrolled"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_fused_kernel_gpu(dtype, variant, monkeypatch):
    """Model dims through the public op against float64: 52 steps at L=16, batch 64, a padded row."""
    check_variant_gpu(False, GPU_DIMS[0], dtype, 64, variant, monkeypatch, refold=False)


@pytest.mark.gpu
def test_fused_agrees_with_staged_gpu():
    """Batch 64, bf16, 3 windows at L=16 from the same inputs: the one-launch step and the staged
    default fold to the same checkpoints at fp32 level (their ``u_t`` differ in the order of
    fp32 operations, and ``u_t`` feeds the state, so not bit for bit; a 16-bit rounding anywhere
    would show as ~1e-3)."""
    ck = checkpoints_after_three_windows(False, [decode.default_variant(256, False, False, 128, 32), FusedVariant()])
    assert rel_err(ck[1], ck[0]) < 1e-5, rel_err(ck[1], ck[0])
