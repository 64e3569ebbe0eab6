"""The staged delta-rule step (ops/gdn/decode_staged.py: ring launch, stream launch, flush
launch) and its default variants against the float64 reference (harness in
delta_kernel_harness.py). CPU: the Triton interpreter at tiny dims; GPU (``-m gpu``): model dims."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.gdn import decode
from trtllm_replayssm.ops._flush_list import LIST_MAX_BATCH
from trtllm_replayssm.ops.gdn.decode_staged import StagedVariant, flush_config, staged_launch

from delta_kernel_harness import (
    DTYPES, GPU_DIMS, Layer, checkpoints_after_three_windows, check_variant_cpu,
    check_variant_gpu, dims_id, drive, rel_err,
)


# ------------------------------------------------------------------ staged kernels (CPU) -----
# decode_staged.py: a ring launch per (row, key head), then standard-sized streaming programs.
# Same checks as the chunked cases (3+ windows, staggered flushes, a padded row); the KDA cases
# are in test_kda_kernels.py.
STAGED_CPU = [
    # HV, H, d_k, d_v, window, refold, variant, drafts
    pytest.param(4, 2, 16, 8, 4, True, "staged", 0, id="share2-refold-dv8"),
    pytest.param(2, 2, 16, 32, 4, False, StagedVariant(block_v=8, num_warps=1), 0, id="share1-foldu-4tiles"),
    pytest.param(4, 1, 32, 16, 4, True, StagedVariant(block_v=8, fold="u", ring_warps=1, stages=1), 0,
                 id="share4-fold-u"),
    pytest.param(2, 1, 16, 16, 4, True, StagedVariant(max_registers=96), 3, id="share2-wide-ring"),
    pytest.param(4, 2, 16, 16, 4, True, StagedVariant(fold="wy", block_v=8), 0, id="share2-wy-2tiles"),
    pytest.param(4, 1, 32, 16, 6, True, StagedVariant(fold="wy", unroll=True), 2, id="share4-wy-unrolled-wide-ring"),
    # flush_launch: flush rows in a third launch (whole heads per program), the stream launch
    # without any fold; raw_qk: the stream programs read the raw q and the ring's k at c.
    pytest.param(4, 2, 16, 8, 4, True, StagedVariant(flush_launch=True), 0, id="flush-launch-share2-refold-dv8"),
    pytest.param(2, 2, 16, 32, 4, True, StagedVariant(block_v=8, flush_launch=True, raw_qk=True, flush_heads=2,
                                                      flush_block_v=8, flush_split=2), 0,
                 id="flush-launch-rawqk-share1-heads2-split2"),
    pytest.param(4, 1, 32, 16, 4, True, StagedVariant(block_v=8, fold="u", flush_launch=True, raw_qk=True,
                                                      flush_heads=3, flush_warps=1), 2,
                 id="flush-launch-rawqk-fold-u-heads-3-of-4-takes-2"),
    pytest.param(4, 2, 16, 16, 4, True, StagedVariant(fold="wy", block_v=8, flush_launch=True, raw_qk=True,
                                                      flush_heads=2, flush_split=8), 0,
                 id="flush-launch-rawqk-wy-split-cap"),
    pytest.param(4, 2, 32, 16, 4, False, StagedVariant(block_v=8, raw_qk=True), 0, id="rawqk-share2-refold-false"),
    # ring_split: the ring launch spreads a key head's value heads over programs (share 2: one
    # each; share 4 split 2: two each; share 1: capped at one program).
    pytest.param(4, 2, 16, 8, 4, True, StagedVariant(flush_launch=True, raw_qk=True, ring_split=2), 0,
                 id="ring-split2-share2-flush-launch-rawqk"),
    pytest.param(4, 1, 32, 16, 4, False, StagedVariant(block_v=8, ring_split=2), 0, id="ring-split2-share4-refold-false"),
    pytest.param(2, 2, 16, 8, 4, True, StagedVariant(ring_split=4), 0, id="ring-split-cap-share1"),
    # ring_prefetch: the ring launch loads every entry and zeroes those from c on
    pytest.param(4, 2, 16, 8, 4, True, StagedVariant(flush_launch=True, raw_qk=True, ring_split=2, ring_prefetch=True),
                 0, id="ring-prefetch-split2-flush-launch-rawqk"),
    # flush_dot: the cached u folded as one product per tile (BC and BV padded to 16);
    # flush_persistent: the flush launch walks a list of the flush rows' tiles
    pytest.param(4, 2, 16, 32, 4, True, StagedVariant(block_v=8, fold="u", flush_launch=True, raw_qk=True,
                                                      flush_dot=True), 0, id="flush-dot-fold-u-share2-bv16"),
    pytest.param(2, 1, 32, 16, 6, False, StagedVariant(block_v=8, flush_launch=True, flush_dot=True,
                                                       flush_persistent=1), 0, id="flush-dot-list-refold-false"),
    pytest.param(4, 2, 16, 16, 4, True, StagedVariant(block_v=8, flush_launch=True, raw_qk=True, flush_persistent=2,
                                                      flush_block_v=8), 0, id="flush-list-refold"),
    pytest.param(4, 1, 32, 32, 4, True, StagedVariant(block_v=8, fold="wy", flush_launch=True, flush_persistent=1),
                 0, id="flush-list-wy"),
    pytest.param(4, 2, 16, 16, 4, True, StagedVariant(block_v=8, flush_launch=True, flush_stream=True), 0,
                 id="flush-stream-in-order-on-cpu"),
    # the defaults' shapes from batch 32 (8-row stream tiles, one-warp ring and stream; 32-row
    # dot-fold tiles in a list launch, or refolding 16-row tiles two programs per head; the side
    # stream runs in order on the CPU); KDA's in test_kda_kernels.py
    pytest.param(4, 2, 16, 32, 4, False, decode.default_variant(256, False, False, 32), 0, id="default-256-fold-u"),
    pytest.param(4, 2, 16, 32, 4, True, decode.default_variant(256, False, True, 32), 0, id="default-256-refold"),
    # register caps of the ring and flush launches (ptxas .maxnreg; the interpreter runs them uncapped)
    pytest.param(4, 2, 16, 32, 4, False, dataclasses.replace(decode.default_variant(256, False, False, 32),
                                                             ring_max_registers=128, flush_max_registers=168),
                 0, id="default-256-fold-u-register-caps"),
    # pdl: programmatic dependent launch of the stream launch (off in the interpreter: the plumbing)
    pytest.param(4, 2, 16, 32, 4, False, dataclasses.replace(decode.default_variant(256, False, False, 32), pdl=True),
                 0, id="default-256-fold-u-pdl"),
    # the dot fold's 16-row tiles with a head's rows split over programs (split taken after the padding)
    pytest.param(2, 1, 16, 32, 4, True, StagedVariant(block_v=8, fold="u", flush_launch=True, flush_dot=True,
                                                      flush_split=4), 0, id="flush-dot-split-after-padding"),
]


@pytest.mark.parametrize("HV,H,d_k,d_v,window,refold,variant,drafts", STAGED_CPU)
def test_staged_kernel_matches_reference_cpu(HV, H, d_k, d_v, window, refold, variant, drafts):
    check_variant_cpu(False, HV, H, d_k, d_v, window, refold, variant, drafts=drafts)


@pytest.mark.parametrize("refold", [False, True], ids=["fold-u", "refold"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_list_flush_with_several_flush_rows_cpu(per_channel, refold):
    """The list flush launch when several rows flush in one step (aligned phases): one program
    per SM (2 here) walks the tiles of several flush rows, numbered from the ring launch's flags."""
    variant = dataclasses.replace(decode.default_variant(256, per_channel, refold, 32), flush_persistent=1)
    layer = Layer(per_channel, 4, 2, 16, 32, seed=7)
    _, worst_c, flushes = drive(layer, 4, slots=6, steps=2 * 4 + 1, window=4, refold=refold, stagger=False,
                                variant=variant)
    assert flushes >= 2 * 3 and worst_c < 1e-5, (flushes, worst_c)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_flush_tf32x2_cpu(per_channel, dtype):
    """``flush_precision="tf32x2"``: with a 16-bit ring and a scalar decay (GDN, fp16 here: the
    interpreter's bf16 is unreliable) the dot fold moves the decay onto ``u`` and takes the raw
    keys; KDA's per-channel decay and fp32 rings keep tf32x3. Checkpoint within 1e-5 of float64
    over 3+ windows, several rows flushing in one step."""
    variant = dataclasses.replace(decode.default_variant(256, per_channel, False, 32), flush_precision="tf32x2",
                                  flush_persistent=1)
    layer = Layer(per_channel, 4, 2, 16, 32, dtype=dtype, seed=11)
    _, worst_c, flushes = drive(layer, 3, slots=4, steps=3 * 4 + 2, window=4, refold=False, stagger=False,
                                variant=variant)
    assert flushes >= 2 * 3 and worst_c < 1e-5, (flushes, worst_c)


@pytest.mark.parametrize("tiles", [2, 8], ids=["2-tiles", "8-capped"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_flush_item_tiles_cpu(per_channel, dtype, tiles):
    """``flush_item_tiles``: a list item folds several 16-row tiles of one value head with the key
    side formed once (KDA: ``Kd`` and its TF32 split, the three products by hand); at ``d_v = 64``
    2 tiles make 2 items per head and 8 is capped at the head's 4. Checkpoint within 1e-5 of
    float64 over 3+ windows, several rows flushing in one step, one program per SM so that each
    walks several items."""
    variant = dataclasses.replace(decode.default_variant(256, per_channel, False, 64, 32), flush_block_v=16,
                                  flush_warps=1, flush_persistent=1, flush_item_tiles=tiles)
    layer = Layer(per_channel, 2, 1, 16, 64, dtype=dtype, seed=11)
    _, worst_c, flushes = drive(layer, 3, slots=4, steps=3 * 4 + 2, window=4, refold=False, stagger=False,
                                variant=variant)
    assert flushes >= 2 * 3 and worst_c < 1e-5, (flushes, worst_c)


@pytest.mark.parametrize("dtype,reread,d_k,launch", [
    (torch.float16, 16, 32, "list"), (torch.float32, 16, 32, "per-row"),
    (torch.float32, 32, 32, "list"), (torch.float16, 64, 16, "per-row"),
], ids=["fp16-2-chunks-list", "fp32-2-chunks-per-row", "fp32-1-chunk-list", "fp16-capped-per-row"])
def test_flush_reread_cpu(dtype, reread, d_k, launch):
    """``flush_reread``: the cached-u fold reads its tile again in ``reread``-column chunks (capped
    at ``d_k``) after ``u_t`` (the list launch, and the per-row flush launch), in two TF32 passes
    for 16-bit keys, tf32x3 for fp32. Checkpoint within 1e-5 of float64 over 3+ windows, several
    rows flushing in one step and staggered, a padded row."""
    base = decode.default_variant(decode.REREAD_FROM, False, False, 32)
    variant = dataclasses.replace(base, flush_reread=reread, flush_persistent=1 if launch == "list" else 0)
    layer = Layer(False, 4, 2, d_k, 32, dtype=dtype, seed=13)
    for stagger in (False, True):
        _, worst_c, flushes = drive(layer, 3, slots=4, steps=3 * 4 + 2, window=4, refold=False, stagger=stagger,
                                    variant=variant)
        assert flushes >= 2 * 3 and worst_c < 1e-5, (stagger, flushes, worst_c)


@pytest.mark.parametrize("refold", [False, True], ids=["fold-u", "refold"])
@pytest.mark.parametrize("read_stages,block_v,d_k", [(1, 16, 64), (2, 32, 64), (3, 16, 16)],
                         ids=["s1-bv16-2-chunks", "s2-bv32-2-chunks", "s3-bv16-1-chunk"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_read_stages_cpu(per_channel, dtype, read_stages, block_v, d_k, refold):
    """``read_stages``: the stream launch walks its tile in 32-column chunks (capped at ``d_k``)
    through a pipeline, the products summed in-thread; outputs and checkpoints against float64
    at every step over 3+ windows, staggered phases and a padded row. (fp16: the tile-whole
    form's checkpoint error is 3e-5 here as well; checked to fail with ``S k_t`` replaced by
    ``S q_t`` in the chunk sums.)"""
    base = decode.default_variant(256, per_channel, refold, 32, 32)
    variant = dataclasses.replace(base, block_v=block_v, read_stages=read_stages)
    layer = Layer(per_channel, 4, 2, d_k, 32, dtype=dtype, seed=17)
    worst_o, worst_c, flushes = drive(layer, 4, slots=6, steps=3 * 4 + 2, window=4, refold=refold, variant=variant)
    fp32 = dtype == torch.float32
    assert flushes >= 3 * 3 and worst_c < (1e-5 if fp32 else 1e-4) and worst_o < (2e-5 if fp32 else 2e-3), (
        flushes, worst_c, worst_o)


@pytest.mark.parametrize("halves", [True, False], ids=["halves", "whole"])
@pytest.mark.parametrize("window", [4, 7, 12], ids=["cap4", "cap7", "cap12"])
@pytest.mark.parametrize("refold", [False, True], ids=["fold-u", "refold"])
def test_ring_halves_cpu(refold, window, halves):
    """KDA's ring terms over two halves of the ring (``ring_halves``, the default; the later
    half only once the window reaches it) and over the whole ring, against float64 through 3+
    windows: capacity 4 (halves of 2 rows; a non-flush step never reaches the second), 7 (halves
    of 4, the second padded past the capacity, reached at c = 5) and 12 (halves of 8, reached
    from c = 9); the ops' KDA defaults otherwise."""
    variant = dataclasses.replace(decode.default_variant(256, True, refold, 32), ring_halves=halves)
    check_variant_cpu(True, 4, 4, 16, 32, window, refold, variant)


@pytest.mark.parametrize("prefetch", [1, 0], ids=["entry_ahead", "in_order"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_refold_prefetch_cpu(per_channel, prefetch):
    """The refolding flush with each update's ring entry loaded one update ahead
    (``refold_prefetch=1``, the default; the last prefetch is the token's entry) and in turn (0),
    against float64 through 3+ windows (ring capacity 12, staggered phases, a padded row)."""
    variant = dataclasses.replace(decode.default_variant(256, per_channel, True, 32), refold_prefetch=prefetch)
    check_variant_cpu(per_channel, 4, 2, 16, 32, 12, True, variant)


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_ring_split_is_bitwise_cpu(per_channel):
    """``ring_split`` moves a value head's ring work to another program and ``ring_prefetch``
    only moves loads earlier: the outputs and every state field equal the plain ring launch's
    bit for bit, across a flush."""
    layer = Layer(per_channel, 4, 1, 16, 8, seed=5)
    config = ReplaySSMConfig(window=4)
    variants = [StagedVariant(block_v=8), StagedVariant(block_v=8, ring_split=4),
                StagedVariant(block_v=8, ring_prefetch=True)]
    states = [layer.state(3, config) for _ in variants]
    idx = torch.tensor([2, -1, 0], dtype=torch.int32, device=layer.device)
    for t in range(5):
        inputs = layer.tokens(3)
        outs = [decode.delta_replay_step(
            st.checkpoint, st.ring_k, st.ring_v, st.ring_beta, st.ring_g, st.ring_u, st.committed, st.flush_at,
            st.window, **inputs, **layer.params(layer.device), state_indices=idx, pad_slot_id=-1, scale=None,
            refold=True, variant=variant) for st, variant in zip(states, variants)]
        for other in outs[1:]:
            assert torch.equal(outs[0], other), f"step {t}: outputs differ"
    for name in ("checkpoint", "ring_k", "ring_v", "ring_beta", "ring_g", "ring_u", "committed", "flush_at"):
        for other in states[1:]:
            assert torch.equal(getattr(states[0], name), getattr(other, name)), name


def test_staged_launch_constexprs():
    """What ``staged_launch`` hands the kernels (the launcher and the register report share it):
    the fold that runs, the flush kernel by batch, the shared constexprs."""
    dims = (256, 32, 16, 128, 128, 16)
    kw = dict(has_bias=True, has_indices=True, pdl=False)
    refolding = staged_launch(decode.default_variant(256, False, True, 128), *dims, per_channel=False, refold=True, **kw)
    assert refolding.flush_list and refolding.flush["PREFETCH"] == 1 and not refolding.flush["DOT"]
    assert refolding.common["REFOLD"] and refolding.ring["RAW_QK"] and refolding.stream == dict(
        BV=8, FLUSH_HERE=False, PDL=False, READ_STAGES=0, KC=32)
    chunked = dataclasses.replace(decode.default_variant(256, True, True, 128), block_v=64, read_stages=3)
    assert staged_launch(chunked, *dims, per_channel=True, refold=True, **kw).stream == dict(
        BV=64, FLUSH_HERE=False, PDL=False, READ_STAGES=3, KC=32)
    # GDN's staged cached-u default at 256 (with a ring wider than the one-launch step takes)
    folding = staged_launch(decode.default_variant(256, False, False, 128, 32), *dims, per_channel=False,
                            refold=False, **kw)
    assert folding.flush["DOT"] and folding.flush["FOLD_PRECISION"] == "bf16x3" and folding.flush["PREFETCH"] == 0
    assert not folding.common["REFOLD"] and folding.flush_warps == 1
    # the re-read fold from REREAD_FROM rows, for the cached-u fold only, capped at d_k
    assert folding.flush["REREAD"] == 64 and refolding.flush["REREAD"] == 0
    below = decode.default_variant(decode.REREAD_FROM - 1, False, False, 128, 32)
    assert staged_launch(below, *dims, per_channel=False, refold=False, **kw).flush["REREAD"] == 0
    assert staged_launch(decode.default_variant(256, False, False, 32), 256, 4, 2, 16, 32, 4, per_channel=False,
                         refold=False, **kw).flush["REREAD"] == 16
    # "wy" only where the flush refolds (the cached-u fold has no window solve)
    wy = StagedVariant(fold="wy", flush_launch=True)
    assert staged_launch(wy, *dims, per_channel=False, refold=True, **kw).common["WY"]
    assert not staged_launch(wy, *dims, per_channel=False, refold=False, **kw).common["WY"]
    # KDA: per-channel decays, ring halves; the list launch only up to LIST_MAX_BATCH rows
    kda = decode.default_variant(256, True, True, 128)
    big = staged_launch(kda, LIST_MAX_BATCH + 1, 32, 32, 128, 128, 16, per_channel=True, refold=True, **kw)
    assert big.ring["RING_HALVES"] and big.ring["PER_CHANNEL"] and not big.ring["RAW_QK"]
    assert not big.flush_list and big.flush["HEADS_PER_PROGRAM"] == big.flush_heads
    assert staged_launch(StagedVariant(), *dims, per_channel=False, refold=True, **kw).flush == {}
    # heads per per-row flush program: the largest divisor of the value heads not above flush_heads
    for v_heads, asked, want in ((4, 3, 2), (32, 12, 8), (32, 5, 4), (6, 4, 3), (5, 4, 1)):
        variant = StagedVariant(flush_launch=True, flush_heads=asked)
        assert flush_config(256, v_heads, 16, 32, variant)[2] == want, (v_heads, asked)
        assert staged_launch(variant, 256, v_heads, 1, 16, 32, 4, per_channel=False, refold=True,
                             **kw).flush["HEADS_PER_PROGRAM"] == want


# (fields, the error's start) of options StagedVariant refuses
STAGED_BAD_OPTIONS = [
    (dict(ring_halves=True, ring_prefetch=True), "^ring_halves:"),
    (dict(refold_prefetch=2), "^refold_prefetch:"),
    (dict(fold="chunked"), "^fold:"),
    (dict(block_v=12), "^block_v:"),
    (dict(num_warps=3), "^num_warps:"),
    (dict(ring_warps=0), "^ring_warps:"),
    (dict(stages=0), "^stages:"),
    (dict(unroll=True), "^unroll:"),
    (dict(flush_launch=True, flush_block_v=24), "^flush_block_v:"),
    (dict(ring_split=3), "^ring_split:"),
    (dict(flush_launch=True, flush_heads=0), "^flush_heads:"),
    (dict(flush_launch=True, flush_split=3), "^flush_split:"),
    (dict(flush_launch=True, flush_warps=5), "^flush_warps:"),
    (dict(flush_heads=2), "only with flush_launch=True"),
    (dict(flush_persistent=4), "flush_persistent"),
    (dict(flush_stream=True), "flush_stream"),
    (dict(flush_launch=True, flush_persistent=-1), "flush_persistent"),
    (dict(flush_launch=True, flush_dot=True, flush_block_v=8), "flush_block_v"),
    (dict(ring_max_registers=300), "^ring_max_registers: expected None or 24..255"),
    (dict(max_registers=8), "^max_registers:"),
    (dict(flush_max_registers=128), "^flush_max_registers: only with flush_launch"),
    (dict(flush_launch=True, flush_dot=True, flush_precision="tf32"), "^flush_precision: expected one of"),
    (dict(flush_launch=True, flush_precision="tf32x2"), "^flush_precision: only with flush_dot"),
    (dict(flush_launch=True, flush_dot=True, flush_persistent=4, flush_item_tiles=3), "^flush_item_tiles: expected"),
    (dict(flush_launch=True, flush_dot=True, flush_item_tiles=2), "^flush_item_tiles: only with flush_dot"),
    (dict(flush_launch=True, flush_persistent=4, flush_item_tiles=2), "^flush_item_tiles: only with flush_dot"),
    (dict(flush_launch=True, fold="u", fold_first=True), "^fold_first: only with flush_dot"),
    (dict(flush_launch=True, flush_dot=True, flush_reread=24), "^flush_reread: expected 0, or a power of two"),
    (dict(flush_launch=True, flush_reread=32), "^flush_reread: expected 0, or a power of two >= 16 with flush_dot"),
    (dict(read_stages=2), "^read_stages: only with flush_launch=True"),
    (dict(flush_launch=True, read_stages=-1), "^read_stages: expected an int >= 0"),
]


@pytest.mark.parametrize("fields,error", STAGED_BAD_OPTIONS, ids=lambda v: str(v) if isinstance(v, str) else None)
def test_staged_variant_rejects_bad_options(fields, error):
    with pytest.raises(ValueError, match=error):
        StagedVariant(**fields)


# ------------------------------------------------------------------ GPU ----------------------
@pytest.mark.gpu
@pytest.mark.parametrize("refold", [False, True])
def test_default_large_batch_gpu(refold, monkeypatch):
    """Batch 128 through the public op with no variant named: with refold=False the staged list
    launch folding the cached u as one product (the default there), else the row-wise kernel."""
    check_variant_gpu(False, GPU_DIMS[0], "fp32", 128, None, monkeypatch, refold=refold)


def test_pdl_only_for_compiled_sm90_launches():
    """Programmatic dependent launch stays off off-GPU and in the interpreter (no such instructions)."""
    from trtllm_replayssm.ops._pdl import pdl_supported

    assert not pdl_supported(torch.device("cpu"))
    assert StagedVariant().pdl is False


@pytest.mark.gpu
@pytest.mark.parametrize("refold", [False, True])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_staged_defaults_pdl_gpu(per_channel, refold, monkeypatch):
    """The staged defaults with the stream launch as a programmatic dependent launch (bf16, batch 64)."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    variant = dataclasses.replace(decode.default_variant(256, per_channel, refold, dims[3], 32), pdl=True)
    check_variant_gpu(per_channel, dims, "bf16", 64, variant, monkeypatch, refold=refold)


@pytest.mark.gpu
@pytest.mark.parametrize("refold", [False, True])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_staged_defaults_one_list_program_per_sm_gpu(per_channel, refold, monkeypatch):
    """The staged defaults with one list flush program per SM, so that each walks the tiles of
    several flush rows (bf16, batch 64: ~4 flush rows per step)."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    variant = dataclasses.replace(decode.default_variant(256, per_channel, refold, dims[3], 32), flush_persistent=1)
    check_variant_gpu(per_channel, dims, "bf16", 64, variant, monkeypatch, refold=refold)


@pytest.mark.gpu
@pytest.mark.parametrize("refold", [False, True])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_ring_whole_gpu(dtype, refold, monkeypatch):
    """KDA's defaults with the ring terms over the whole ring (``ring_halves=False``; the
    defaults' halves run in every default-variant test) at Kimi-Linear dims, batch 64, 3+
    windows against float64."""
    variant = dataclasses.replace(decode.default_variant(256, True, refold, 128), ring_halves=False)
    check_variant_gpu(True, (32, 32, 128, 128), dtype, 64, variant, monkeypatch, refold=refold)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_refold_in_order_gpu(per_channel, dtype, monkeypatch):
    """The refolding defaults with the ring entries loaded in turn (``refold_prefetch=0``; the
    defaults load each one an update ahead), batch 64 at model dims, 3+ windows against float64."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    variant = dataclasses.replace(decode.default_variant(256, per_channel, True, dims[3]), refold_prefetch=0)
    check_variant_gpu(per_channel, dims, dtype, 64, variant, monkeypatch, refold=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_staged_defaults_flush_tf32x2_gpu(per_channel, dtype, monkeypatch):
    """The ``refold=False`` defaults with ``flush_precision="tf32x2"`` (GDN's default before
    bf16x3, and bf16x3's choice for fp16 rings; KDA and fp32 rings fall back to tf32x3), batch 64,
    every activation dtype, against float64."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    variant = dataclasses.replace(decode.default_variant(256, per_channel, False, dims[3], 32), flush_precision="tf32x2")
    check_variant_gpu(per_channel, dims, dtype, 64, variant, monkeypatch, refold=False)


@pytest.mark.gpu
@pytest.mark.parametrize("read_stages,block_v,warps", [(2, 32, 1), (3, 64, 1), (2, 32, 2), (2, 64, 2)],
                         ids=["s2-bv32", "s3-bv64", "s2-bv32-w2", "s2-bv64-w2"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_read_stages_gpu(per_channel, dtype, read_stages, block_v, warps, monkeypatch):
    """The staged defaults (KDA's, GDN's with a ring the one-launch step does not take) with the
    stream launch's tile walked in chunks (``read_stages``; one or two warps), model dims, batch
    64, against float64."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    variant = dataclasses.replace(decode.default_variant(256, per_channel, False, dims[3], 32), block_v=block_v,
                                  read_stages=read_stages, num_warps=warps)
    check_variant_gpu(per_channel, dims, dtype, 64, variant, monkeypatch, refold=False)


@pytest.mark.gpu
def test_flush_tf32x2_agrees_with_tf32x3_gpu():
    """GDN, bf16 rings, batch 64, 3 windows at L=16 from the same inputs: the checkpoints of the
    two-pass TF32, the three-pass bf16 and the three-pass TF32 dot folds agree to fp32 level
    (``check_variant_gpu``'s 16-bit tolerance, set by the reference's own key rounding, could not
    tell a one-pass TF32 fold)."""
    base = decode.default_variant(256, False, False, GPU_DIMS[0][3], 32)
    ck = checkpoints_after_three_windows(False, [dataclasses.replace(base, flush_precision=p)
                                                 for p in ("tf32x3", "tf32x2", "bf16x3")])
    assert rel_err(ck[1], ck[0]) < 2e-6 and rel_err(ck[2], ck[0]) < 2e-6, (rel_err(ck[1], ck[0]), rel_err(ck[2], ck[0]))


@pytest.mark.gpu
def test_flush_reread_agrees_gpu():
    """GDN, bf16, batch 64, 3 windows at L=16 from the same inputs: the fold that reads its tile
    again (64- and 32-column chunks, and 32-row two-warp tiles) and the one that holds it give
    the same checkpoints to fp32 level."""
    base = decode.default_variant(256, False, False, GPU_DIMS[0][3], 32)
    ck = checkpoints_after_three_windows(False, [
        dataclasses.replace(base, flush_reread=0), dataclasses.replace(base, flush_reread=64),
        dataclasses.replace(base, flush_reread=32, flush_block_v=32, flush_warps=2, flush_persistent=6)])
    assert rel_err(ck[1], ck[0]) < 2e-6 and rel_err(ck[2], ck[0]) < 2e-6, (rel_err(ck[1], ck[0]), rel_err(ck[2], ck[0]))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_flush_reread_gpu(dtype, monkeypatch):
    """The staged batch-256 default (the re-read fold; the one-launch step takes 16-entry rings) at
    model dims through the public op against the float64 reference, batch 64 (the list launch
    walks several rows per program)."""
    variant = decode.default_variant(decode.REREAD_FROM, False, False, GPU_DIMS[0][3], 32)
    assert variant.flush_reread == 64
    check_variant_gpu(False, GPU_DIMS[0], dtype, 64, variant, monkeypatch, refold=False)


@pytest.mark.gpu
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_flush_item_tiles_agrees_gpu(per_channel):
    """``flush_item_tiles`` 2 and 4 (KDA: ``Kd`` split once per item, the three TF32 products by
    hand) against one tile per item: checkpoints agree to fp32 level after 3 windows."""
    base = decode.default_variant(256, per_channel, False, 128, 32)
    ck = checkpoints_after_three_windows(per_channel, [
        dataclasses.replace(base, flush_item_tiles=1),
        dataclasses.replace(base, flush_block_v=32, flush_warps=4, flush_persistent=2, flush_item_tiles=2),
        dataclasses.replace(base, flush_block_v=32, flush_warps=4, flush_persistent=2, flush_item_tiles=4)])
    assert rel_err(ck[1], ck[0]) < 2e-6 and rel_err(ck[2], ck[0]) < 2e-6, (rel_err(ck[1], ck[0]), rel_err(ck[2], ck[0]))


@pytest.mark.gpu
@pytest.mark.parametrize("fields", [dict(flush_block_v=32, flush_warps=2, flush_item_tiles=2),
                                    dict(flush_block_v=32, flush_warps=4, flush_persistent=2, flush_item_tiles=4),
                                    dict(flush_block_v=16, flush_warps=2, flush_item_tiles=2)],
                         ids=["32r2w-x2", "32r4w-x4", "16r2w-x2"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_flush_item_tiles_gpu(per_channel, fields, monkeypatch):
    """The ``refold=False`` defaults with several tiles per list item, bf16, batch 64, against
    float64 (padded rows, staggered phases, 3+ windows)."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    variant = dataclasses.replace(decode.default_variant(256, per_channel, False, dims[3], 32), **fields)
    check_variant_gpu(per_channel, dims, "bf16", 64, variant, monkeypatch, refold=False)


@pytest.mark.gpu
@pytest.mark.parametrize("refold", [False, True])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_staged_defaults_at_batch_32_gpu(per_channel, refold, monkeypatch):
    """The staged defaults at batch 32, named (the ops write through up to 32 and take them from
    33; GDN's cached-u step from FUSED_FROM is the one-launch step), bf16."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    variant = decode.default_variant(64, per_channel, refold, dims[3])
    check_variant_gpu(per_channel, dims, "bf16", 32, variant, monkeypatch, refold=refold)


@pytest.mark.gpu
@pytest.mark.parametrize("refold", [False, True])
@pytest.mark.parametrize("per_channel,dtype", [(False, "bf16"), (True, "fp32"), (True, "bf16")],
                         ids=["gdn-bf16", "kda-fp32", "kda-bf16"])
def test_default_large_batch_kinds_gpu(per_channel, dtype, refold, monkeypatch):
    """The defaults at batch 128 (one-warp ring and stream programs, the flush launch on a side
    stream: a list launch with the dot fold, or refolding 16-row tiles) in 16-bit activations and
    for KDA (Kimi-Linear dims)."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    check_variant_gpu(per_channel, dims, dtype, 128, None, monkeypatch, refold=refold)


@pytest.mark.gpu
@pytest.mark.parametrize("dims", GPU_DIMS, ids=dims_id)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_staged_kernel_gpu(dims, dtype, batch, monkeypatch):
    if dims != GPU_DIMS[0] and (batch != 3 or dtype == "fp16"):
        pytest.skip("other dims: batch 3, bf16 and fp32 (device time)")
    check_variant_gpu(False, dims, dtype, batch, "staged", monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("variant,refold", [
    pytest.param(StagedVariant(block_v=8, num_warps=1), True, id="bv8-1warp"),
    pytest.param(StagedVariant(fold="u"), True, id="fold-u"),
    pytest.param(StagedVariant(block_v=16, max_registers=64), False, id="bv16-max64-refold-false"),
    pytest.param(StagedVariant(fold="wy", block_v=16, num_warps=4), True, id="wy-bv16"),
    pytest.param(StagedVariant(fold="wy", block_v=32, num_warps=8), True, id="wy-bv32-8warps"),
    pytest.param(StagedVariant(fold="wy", block_v=16, num_warps=4, unroll=True), True, id="wy-unrolled-bv16"),
    pytest.param(StagedVariant(block_v=16, num_warps=2, flush_launch=True, flush_split=8), True,
                 id="flush-launch-bv16-2warps-split8"),
    pytest.param(StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True), True,
                 id="flush-launch-rawqk-bv16-2warps"),
    pytest.param(StagedVariant(block_v=32, num_warps=4, flush_launch=True, raw_qk=True, flush_heads=4,
                               flush_block_v=16, flush_warps=2), False,
                 id="flush-launch-rawqk-bv32-heads4-refold-false"),
    pytest.param(StagedVariant(fold="wy", block_v=16, num_warps=2, flush_launch=True, flush_heads=2), True,
                 id="flush-launch-wy-heads2"),
    pytest.param(StagedVariant(fold="u", block_v=8, flush_launch=True, raw_qk=True), True,
                 id="flush-launch-rawqk-fold-u"),
    pytest.param(StagedVariant(block_v=8, raw_qk=True), True, id="rawqk-bv8"),
    pytest.param(StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, ring_split=2), True,
                 id="flush-launch-rawqk-bv16-ring-split2"),
    pytest.param(StagedVariant(fold="u", block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_dot=True,
                               flush_persistent=8, flush_warps=4), True, id="flush-dot-list-rawqk-fold-u"),
    pytest.param(StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_dot=True,
                               flush_block_v=32, flush_warps=4), False, id="flush-dot-bv32-refold-false"),
    pytest.param(StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_persistent=4), True,
                 id="flush-list-refold"),
    pytest.param(StagedVariant(fold="u", block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_dot=True,
                               flush_persistent=4, flush_block_v=32, flush_warps=4, flush_stream=True), True,
                 id="flush-stream-list-dot"),
])
def test_staged_variants_gpu(variant, refold, monkeypatch):
    check_variant_gpu(False, GPU_DIMS[0], "fp32", 3, variant, monkeypatch, refold=refold)


@pytest.mark.gpu
@pytest.mark.parametrize("dims", [GPU_DIMS[0], GPU_DIMS[1]], ids=dims_id)
def test_staged_flush_launch_gpu(dims, monkeypatch):
    """The flush-launch, raw_qk step at batch 64 (bf16; many rows flush in the same step) and at
    d_k != d_v with GQA 4."""
    variant = StagedVariant(block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_heads=2, flush_split=4)
    check_variant_gpu(False, dims, "bf16", 64 if dims == GPU_DIMS[0] else 3, variant, monkeypatch)
    variant = StagedVariant(fold="u", block_v=16, num_warps=2, flush_launch=True, raw_qk=True, flush_dot=True,
                            flush_persistent=8, flush_warps=4)
    check_variant_gpu(False, dims, "bf16", 64 if dims == GPU_DIMS[0] else 3, variant, monkeypatch)


@pytest.mark.parametrize("stagger", [True, False], ids=["staggered", "aligned"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_fold_first_cpu(per_channel, dtype, stagger):
    """``fold_first``: the row whose token would fill the window folds the ring's entries alone,
    then starts the next window with the token (the reference flushes those slots before the step).
    Outputs, cursors and checkpoints against float64 at every step over 3+ windows per slot, a
    padded row; aligned phases put several flush rows in one list launch (one program per SM)."""
    base = dataclasses.replace(decode.default_variant(256, per_channel, False, 32), flush_persistent=1)
    variant = dataclasses.replace(base, fold_first=True)
    # Seed 11 as test_flush_tf32x2_cpu: with seed 13 one fp16 key rounds one ulp apart in the
    # kernel (fp32 l2norm) and the float64 reference, which either fold carries into the checkpoint.
    layer = Layer(per_channel, 4, 2, 16, 32, dtype=dtype, seed=11)
    _, worst_c, flushes = drive(layer, 3, slots=4, steps=3 * 4 + 3, window=4, refold=False, stagger=stagger,
                                variant=variant)
    assert flushes >= 2 * 3 and worst_c < 1e-5, (flushes, worst_c)


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_fold_first_per_row_launch_and_refold_call_cpu(per_channel):
    """``fold_first`` in the per-row flush launch (``flush_persistent=0``, two heads per program)
    and called with ``refold=True`` on a ``fold="u"`` variant; a ``refold=True`` call of the
    defaults (a refold) ignores it (the harness then expects the usual flush)."""
    layer = Layer(per_channel, 4, 2, 16, 32, seed=17)
    variant = dataclasses.replace(decode.default_variant(256, per_channel, False, 32), flush_persistent=0,
                                  flush_item_tiles=1, flush_heads=2, fold="u", fold_first=True)
    _, worst_c, flushes = drive(layer, 3, slots=4, steps=3 * 4 + 3, window=4, refold=True, variant=variant)
    assert flushes >= 2 * 3 and worst_c < 1e-5, (flushes, worst_c)
    refolding = dataclasses.replace(decode.default_variant(256, per_channel, True, 32), fold_first=True,
                                    flush_dot=True)
    assert not staged_launch(refolding, 3, 4, 2, 16, 32, 4, per_channel=per_channel, refold=True, has_bias=True,
                             has_indices=True, pdl=False).common["FOLD_FIRST"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_fold_first_gpu(per_channel, dtype, monkeypatch):
    """``fold_first`` at model dims, batch 64 with staggered phases and a padded row, 52 steps at
    L=16: GDN's default shapes with it, and KDA's default (which folds first); outputs, cursors and
    checkpoints against float64 (the reference flushes a row before the token that fills it)."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    variant = dataclasses.replace(decode.default_variant(256, per_channel, False, dims[3], 32), fold_first=True)
    check_variant_gpu(per_channel, dims, dtype, 64, variant, monkeypatch, refold=False)
