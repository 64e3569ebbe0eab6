"""The delta-rule Triton kernels (ops/gdn/decode.py; KDA shares them) against the float64
reference and fla: the row-wise replay kernel, the write-through step, the chunked kernel, the
standard step, the default choice by batch. The staged step's tests are in
test_gdn_staged_kernels.py, the KDA cases in test_kda_kernels.py; the harness in
delta_kernel_harness.py.

CPU (CI): the kernels run in the Triton interpreter at tiny dims with fp32 activations. GPU
(``-m gpu``): the model dims, bf16/fp16/fp32 activations, batch 1/3/64, fla's fused_recurrent
kernel, CUDA-graph capture.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.gdn import decode
from trtllm_replayssm.ops.gdn import reference as gdn_ref
from trtllm_replayssm.ops.gdn.decode_chunked import ChunkedVariant
from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant
from trtllm_replayssm.ops.gdn.decode_staged import StagedVariant

from delta_kernel_harness import (
    CHUNKED_GPU, DEV, DTYPES, F64, GPU_DIMS, Layer, assert_decode_matches_fla, check_variant_cpu,
    check_variant_gpu, check_write_through, dims_id, drive, fla_naive_check, rel_err, standard_check,
)


# ------------------------------------------------------------------ CPU (interpreter) ---------
@pytest.mark.parametrize("variant", ["rowwise", None], ids=["rowwise", "default"])
@pytest.mark.parametrize("refold", [True, False])
@pytest.mark.parametrize("HV,H", [(2, 2), (4, 2)])
def test_replay_kernel_matches_reference_cpu(HV, H, refold, variant):
    layer = Layer(False, HV, H, 16, 16, seed=HV + refold)
    worst_o, worst_c, flushes = drive(layer, batch=4, slots=6, steps=13, window=4, refold=refold, variant=variant)
    assert flushes >= 6 and worst_c < 1e-5


@pytest.mark.parametrize("refold", [True, False])
def test_replay_kernel_row_blocks_cpu(refold):
    """Programs that stream several row blocks of a head, and heads split over programs."""
    layer = Layer(False, 2, 1, 16, 32, seed=7)
    _, worst_c, _ = drive(layer, batch=3, slots=4, steps=9, window=4, refold=refold, block_v=8, split=2)
    assert worst_c < 1e-5


def test_standard_kernel_matches_reference_cpu():
    standard_check(Layer(False, 4, 2, 16, 32, seed=3), batch=3, slots=5)


@pytest.mark.parametrize("variant", [None, "staged"], ids=["default", "staged"])
def test_kernels_match_fla_naive_cpu(variant, monkeypatch):
    monkeypatch.setattr(decode, "REPLAY_VARIANT", variant)
    fla_naive_check(Layer(False, 4, 2, 16, 16, seed=4))


def test_no_bias_and_custom_scale_cpu():
    layer = Layer(False, 2, 1, 16, 16, seed=5)
    config = ReplaySSMConfig(window=2)
    state, oracle = layer.state(2, config), layer.state(2, config, checkpoint_dtype=F64, device="cpu")
    idx = torch.tensor([1, 0], dtype=torch.int32)
    for _ in range(3):
        x = layer.tokens(2)
        got = decode.delta_replay_step(
            state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
            state.committed, state.flush_at, state.window, **x, A_log=layer.A_log, dt_bias=None,
            state_indices=idx, pad_slot_id=-1, scale=0.3, refold=True)
        want = gdn_ref.gdn_replay_step(oracle, **x, A_log=layer.A_log, dt_bias=None, state_indices=idx, scale=0.3)
        assert rel_err(got, want) < 2e-5


# ------------------------------------------------------------------ chunked kernel (CPU) -----
# decode_chunked.py: the flush as products over the state (WY form), full-ring loads. Every case
# runs 3+ windows with staggered first flushes and a padded row; tl.dot needs 16-row blocks.
CHUNKED_CPU = [
    # per_channel, HV, H, d_k, d_v, window, refold, variant
    pytest.param(False, 2, 1, 16, 16, 4, True, ChunkedVariant(), id="gdn-share2-refold"),
    pytest.param(False, 2, 2, 16, 16, 4, False, ChunkedVariant(loads_ahead=False, k_chunk=None),
                 id="gdn-share1-foldu-late-loads-tiles"),
    pytest.param(False, 2, 1, 32, 64, 6, True,
                 ChunkedVariant(block_v=16, split=2, stages=3, precision="ieee", k_chunk=16, max_registers=96),
                 id="gdn-split2-blocks2-kchunks2"),
    pytest.param(False, 1, 1, 16, 16, 16, True, ChunkedVariant(k_chunk=None), id="gdn-window16-tiles"),
]


def test_chunked_kernel_wide_ring_cpu():
    """A ring wider than the window (speculative decoding, 20 entries): 32-row window tiles."""
    check_variant_cpu(False, 2, 1, 16, 16, 16, True, ChunkedVariant(), drafts=4)


@pytest.mark.parametrize("per_channel,HV,H,d_k,d_v,window,refold,variant", CHUNKED_CPU)
def test_chunked_kernel_matches_reference_cpu(per_channel, HV, H, d_k, d_v, window, refold, variant):
    check_variant_cpu(per_channel, HV, H, d_k, d_v, window, refold, variant)


def test_chunked_variant_rejects_bad_options():
    with pytest.raises(ValueError, match="^precision:"):
        ChunkedVariant(precision="tf32")
    with pytest.raises(ValueError, match="^block_v:"):
        ChunkedVariant(block_v=8)
    with pytest.raises(ValueError, match="^stages:"):
        ChunkedVariant(stages=0)
    with pytest.raises(ValueError, match="^k_chunk:"):
        ChunkedVariant(k_chunk=24)
    with pytest.raises(ValueError, match="^variant:"):
        drive(Layer(False, 2, 1, 16, 16), batch=1, slots=2, steps=1, variant="tiles")


# ------------------------------------------------------------------ write-through step -------
@pytest.mark.parametrize("after", [0, 5], ids=["from-reset", "after-5-steps"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_write_through_cpu(per_channel, dtype, after):
    """``variant="write_through"``: from reset (staggered flush_at) or after 5 row-wise steps
    (slots arrive with ring entries), every step folds its token into the checkpoint; the first
    refolds the ring and moves the cursors, the later ones leave (0, window). Checkpoint within
    1e-5 of float64."""
    worst_c = check_write_through(per_channel, (4, 2, 16, 32), dtype, 3, after, 4, window=4)
    assert worst_c < 1e-5, worst_c


@pytest.mark.gpu
@pytest.mark.parametrize("after", [0, 20])
@pytest.mark.parametrize("batch", [1, 3, 15])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_write_through_gpu(per_channel, batch, after):
    """``variant="write_through"`` at model dims, bf16, window 16: from reset or after 20 steps of
    the row-wise replay, 3+ windows of write-through steps against float64."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    worst_c = check_write_through(per_channel, dims, torch.bfloat16, batch, after, 50, window=16)
    assert worst_c < 5e-3, worst_c


# ------------------------------------------------------------------ GPU ----------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dims", GPU_DIMS, ids=dims_id)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_replay_kernel_gpu(dims, dtype, batch):
    HV, H, d_k, d_v = dims
    if batch == 64 and dims != GPU_DIMS[0]:
        pytest.skip("batch 64 runs at the model dims only (device time)")
    dtype = DTYPES[dtype]
    layer = Layer(False, HV, H, d_k, d_v, dtype=dtype, seed=batch)
    # 16-token windows, 3+ windows: every slot passes every flush phase. Batch 64 runs the
    # float64 reference on the GPU.
    worst_o, worst_c, flushes = drive(layer, batch, slots=max(batch + 2, 4), steps=52, window=16,
                                      use_wrapper=True, oracle_device="cuda" if batch > 3 else "cpu")
    assert flushes >= 3 * (batch - (batch > 1))
    # 16-bit activations: k is l2-normalised in fp32 here and in float64 by the reference before
    # both round it to the ring dtype; the rare ties that round apart move the checkpoint by
    # ~1e-3. With fp32 activations the target is fp32 accumulation error.
    assert worst_c < (1e-5 if dtype == torch.float32 else 5e-3), f"checkpoint error {worst_c:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("refold", [True, False])
def test_refold_choice_gpu(refold):
    """The row-wise kernel's two flushes (refold from the raw ring, fold the cached u) against
    float64 at fp32 activations."""
    layer = Layer(False, 32, 16, 128, 128, dtype=torch.float32, seed=9)
    _, worst_c, _ = drive(layer, 8, slots=16, steps=50, window=16, refold=refold, variant="rowwise")
    assert worst_c < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [3, 64])
@pytest.mark.parametrize("per_channel,dtype", [(False, "bf16"), (False, "fp32"), (True, "bf16")],
                         ids=["gdn-bf16", "gdn-fp32", "kda-bf16"])
def test_rowwise_kernel_gpu(per_channel, dtype, batch):
    """The row-wise replay kernel by name at model dims (the ops take it by default only where
    ``d_v`` is not a multiple of 32 from batch 33): 3+ windows, staggered phases, a padded row."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    layer = Layer(per_channel, *dims, dtype=DTYPES[dtype], seed=batch + 60)
    _, worst_c, flushes = drive(layer, batch, slots=batch + 2, steps=52, window=16, variant="rowwise",
                                oracle_device="cuda" if batch > 3 else "cpu")
    assert flushes >= 3 * (batch - 1)
    assert worst_c < (1e-5 if dtype == "fp32" else 5e-3), f"checkpoint error {worst_c:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_standard_kernel_gpu(dtype):
    standard_check(Layer(False, 32, 16, 128, 128, dtype=DTYPES[dtype], seed=11), batch=5, slots=9)


def test_default_variant_by_batch_kind_and_fold():
    """What the ops launch when no variant is named (measured choices, decode.default_variant)."""
    for per_channel in (False, True):  # up to 32: write-through, any d_v, either fold
        for batch, refold, d_v in ((1, True, 128), (16, False, 48), (32, True, 128)):
            assert decode.default_variant(batch, per_channel, refold, d_v) == "write_through"
    assert decode.default_variant(33, True, True, 128) == decode.default_variant(4096, True, True, 128)
    for per_channel in (False, True):
        # (GDN's cached-u step is the one-launch step from FUSED_FROM: below)
        fold_u = decode.default_variant(256 if per_channel else decode.FUSED_FROM - 1, per_channel, False, 128)
        assert isinstance(fold_u, StagedVariant) and fold_u.flush_dot
        # GDN: 16-row one-warp tiles, the product in three bf16 passes; KDA: a head's four 32-row
        # four-warp tiles per item, tf32x3, folding first
        assert (fold_u.flush_warps, fold_u.flush_block_v, fold_u.flush_persistent, fold_u.flush_precision,
                fold_u.flush_item_tiles) == ((4, 32, 4, "tf32x3", 4) if per_channel else (1, 16, 8, "bf16x3", 1))
        # KDA's list kernel held to 128 registers: 4 programs per SM instead of 3
        assert fold_u.flush_max_registers == (128 if per_channel else None)
        assert fold_u.fold_first == per_channel
        refolding = decode.default_variant(256, per_channel, True, 128)
        assert isinstance(refolding, StagedVariant) and not refolding.flush_dot and refolding.fold == "refold"
        assert (refolding.flush_persistent, refolding.flush_block_v, refolding.flush_warps) == (16, 16, 1)
        # ring entries loaded one update ahead, held to the 128 registers of 16 programs per SM
        assert refolding.refold_prefetch == 1 and refolding.flush_max_registers == 128
        assert fold_u.refold_prefetch == 0
        # the flush launch under the stream launch on a side stream
        assert refolding.flush_stream and fold_u.flush_stream
        for big in (fold_u, refolding):
            # one-warp ring and stream programs (their reductions over d_k stay inside a warp), 8-row
            # tiles read whole, except KDA's cached-u step from KDA_READ_STAGES_FROM: 32-row tiles in
            # pipelined 32-column chunks
            assert big.flush_launch and (big.ring_warps, big.num_warps) == (1, 1)
            chunked = per_channel and big is fold_u
            assert (big.block_v, big.read_stages) == ((32, 2) if chunked else (8, 0))
            assert big.raw_qk == (not per_channel)
            assert big.ring_halves == per_channel  # KDA's ring terms over two halves of the ring
        for refold in (False, True):
            assert decode.default_variant(256, per_channel, refold, 48) is None  # d_v not a multiple of 32
    below = decode.default_variant(decode.KDA_READ_STAGES_FROM - 1, True, False, 128)
    assert (below.block_v, below.read_stages) == (8, 0)
    assert decode.default_variant(decode.KDA_READ_STAGES_FROM, True, False, 128) == fold_u
    # From FUSED_FROM, GDN's cached-u step is the one-launch step where its 64-row programs and a
    # 16-entry ring fit; KDA, a refold, d_v 96 or a wider ring keep the staged step
    from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant

    assert decode.default_variant(decode.FUSED_FROM, False, False, 128) == FusedVariant(block_v=64, stages=3, flush_stages=0)
    assert decode.default_variant(4096, False, False, 64, 16) == FusedVariant(block_v=64, stages=3, flush_stages=0)
    for args in ((decode.FUSED_FROM - 1, False, False, 128), (512, True, False, 128), (512, False, True, 128),
                 (512, False, False, 96), (512, False, False, 128, 20)):
        assert isinstance(decode.default_variant(*args), StagedVariant), args


@pytest.mark.gpu
@pytest.mark.parametrize("dims", [GPU_DIMS[0], GPU_DIMS[2]], ids=dims_id)
@pytest.mark.parametrize("dtype,variant", CHUNKED_GPU)
@pytest.mark.parametrize("batch", [1, 3])
def test_chunked_kernel_gpu(dims, dtype, variant, batch, monkeypatch):
    if dims != GPU_DIMS[0] and (batch == 1 or variant != ChunkedVariant()):
        pytest.skip("other dims: batch 3, default variant (device time)")
    check_variant_gpu(False, dims, dtype, batch, variant, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [None, "staged"], ids=["default", "staged"])
def test_matches_fla_fused_recurrent_gpu(variant, monkeypatch):
    """Our standard and ReplaySSM kernels against fla's fused_recurrent_gated_delta_rule (fp32)."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    monkeypatch.setattr(decode, "REPLAY_VARIANT", variant)
    layer = Layer(False, 32, 16, 128, 128, dtype=torch.float32, seed=12)
    batch, T = 4, 20
    seq = layer.tokens(batch, T)
    o_fla, S_fla = fused_recurrent_gated_delta_rule(
        seq["q"], seq["k"], seq["v"], g=seq["a"], beta=seq["b"], A_log=layer.A_log, dt_bias=layer.dt_bias,
        use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        output_final_state=True, state_v_first=True,
    )
    assert_decode_matches_fla(layer, seq, o_fla, S_fla)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [
    None, "chunked", "staged", "fused",
    StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_split=8),
    StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_stream=True),
    dataclasses.replace(decode.default_variant(256, False, True, 128), pdl=True),
    FusedVariant(block_v=64, stages=3, flush_stages=0, flush_impl="cuda"),
], ids=["rowwise", "chunked", "staged", "fused", "staged-flush-launch", "staged-flush-stream", "staged-default-pdl",
        "fused-cuda-flush"])
def test_cuda_graph_capture_gpu(variant, monkeypatch):
    """A captured replay step, replayed 40 times, walks the same states as eager calls."""
    monkeypatch.setattr(decode, "REPLAY_VARIANT", variant)
    layer = Layer(False, 32, 16, 128, 128, dtype=torch.bfloat16, seed=13)
    batch = 6
    from trtllm_replayssm.ops.gdn import gdn_replay_step

    eager, graphed = layer.state(8, ReplaySSMConfig()), layer.state(8, ReplaySSMConfig())
    idx = torch.tensor([3, -1, 0, 7, 5, 1], dtype=torch.int32, device=DEV)
    seq = [layer.tokens(batch) for _ in range(40)]
    static = {n: x.clone() for n, x in seq[0].items()}
    gdn_replay_step(layer.state(8, ReplaySSMConfig()), **static, **layer.params(DEV), state_indices=idx)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gdn_replay_step(graphed, **static, **layer.params(DEV), state_indices=idx)
    for x in seq:
        for n in static:
            static[n].copy_(x[n])
        graph.replay()
        want = gdn_replay_step(eager, **x, **layer.params(DEV), state_indices=idx)
        torch.testing.assert_close(out, want, rtol=0, atol=0)
    for name, t in eager.tensors().items():
        assert torch.equal(t, getattr(graphed, name)), name
