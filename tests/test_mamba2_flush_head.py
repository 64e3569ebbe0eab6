"""The head-tile flush launch of the staged Mamba-2 step (ops/mamba2/decode_flush_head.py,
``flush_head.cu``, ``LaunchConfig(flush_impl="cuda_head")``).

CPU: its block shapes, shared memory and the steps it serves, the configuration's and the
launcher's checks, and, where an NVRTC library is installed, that the kernel compiles for sm_90 /
sm_100 / sm_103 and, assembled by Triton's ptxas, does not spill. GPU (``gpu``): the steps against
the float64 reference over dims, dtypes, batches, padded rows and staggered phases, 4 windows at
Nemotron-H dims, NaN in unwritten ring entries, a captured step against eager calls, and one
launch against the warp-specialised launch's tiles and ``y`` bit for bit (one fold order).
"""

from __future__ import annotations

import pytest
import torch

from ptx_resources import HAVE_PTXAS, assemble
from mamba2_kernel_harness import allocate, check_replay, graph_vs_eager, kernel_replay
from test_mamba2_flush_cuda import CUDA_FLUSH, NEEDS_NVRTC, _ws_flush, _ws_flush_operands
from trtllm_replayssm.ops import _nvrtc
from trtllm_replayssm.ops.mamba2 import decode
from trtllm_replayssm.ops.mamba2 import decode_flush_cuda as fc
from trtllm_replayssm.ops.mamba2 import decode_flush_head as fh
from trtllm_replayssm.ops.mamba2.launch import WS_ORDERS

HEAD_FLUSH = dict(CUDA_FLUSH, flush_impl="cuda_head", ring_x_in_ring=True)


# -- CPU ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_dim,rows,threads", [(64, 8, 256), (80, 8, 320), (128, 8, 512), (256, 16, 512),
                                                   (96, 8, 384), (72, 8, 288)])
def test_block_shapes(head_dim, rows, threads):
    # 8-row warps (the probe's 64-row blocks at Nemotron-H) up to 16 warps, then 16-row warps.
    assert fh.head_rows(head_dim) == rows and fh.head_threads(head_dim) == threads


@pytest.mark.parametrize("head_dim", [60, 12, 512, 260])
def test_block_shapes_refuse(head_dim):
    assert fh.head_rows(head_dim) is None
    assert f"head_dim {head_dim}" in fh.head_unsupported(torch.zeros(1, 1, head_dim, 128))


def test_unsupported_and_shared_memory():
    assert fh.head_unsupported(torch.zeros(4, 2, 64, 128)) is None
    assert "d_state 64" in fh.head_unsupported(torch.zeros(4, 2, 64, 64))
    # The group's 17 B rows and C (fp32), 17 weighted x per head row (fp32); per batch row its
    # index and c (int32) and slot (int64).
    assert fh.head_shared_bytes(256, 64, 128, 16) == 4 * (17 * 128 + 128 + 17 * 64) + 256 * 16
    assert fh.head_shared_bytes(3, 80, 128, 8) == 4 * (9 * 128 + 128 + 9 * 80) + 3 * 16


def test_defines():
    d = fh.head_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, True,
                        False, torch.int64, (128, 64, 128), "auto", 2)
    assert d == dict(CK_P=128, RX_J=64, RB_J=128, P=64, N=128, CAP=16, HEADS=128, HPG=16, THREADS=256,
                     MIN_BLOCKS=2, X_KIND=1, BC_KIND=1, RING_KIND=0, D_KIND=0, HAS_D=1, HAS_Z=0, HAS_INDICES=1,
                     IDX_64=1, ORDER=2, MAX_REGS=0)
    # 512-thread blocks: registers bounded for one a SM (two leave 64 registers: the rows spill).
    assert fh.head_defines(8, 2, 128, 128, 16, torch.float16, torch.float16, torch.float16, None, False, True, None,
                           (128, 128, 128), "stride", 2)["MIN_BLOCKS"] == 1
    with pytest.raises(ValueError, match="order: expected one of"):
        fh.head_defines(8, 2, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.bfloat16, None, False, False, None,
                        (128, 64, 128), "random")
    with pytest.raises(ValueError, match="d_state 64"):
        fh.head_defines(8, 2, 64, 64, 16, torch.bfloat16, torch.bfloat16, torch.bfloat16, None, False, False, None,
                        (64, 64, 64))
    with pytest.raises(ValueError, match="ring: expected one of"):
        fh.head_defines(8, 2, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.int8, None, False, False, None,
                        (128, 64, 128))


def test_launch_config_takes_the_head_flush():
    cfg = decode.LaunchConfig(**HEAD_FLUSH)
    assert (cfg.flush_impl, cfg.flush_head_order, cfg.flush_head_blocks) == ("cuda_head", "auto", 2)
    assert decode.LaunchConfig(**dict(HEAD_FLUSH, flush_head_order="stride", flush_head_blocks=4)).flush_head_blocks == 4
    for bad, match in [(dict(flush_head_order="random"), "flush_head_order: expected one of"),
                       (dict(flush_head_blocks=0), r"flush_head_blocks: expected an int in \[1, 8\], got 0"),
                       (dict(flush_head_blocks=2.0), "flush_head_blocks: expected an int"),
                       (dict(flush_head_max_registers=16), "flush_head_max_registers: expected None or an int"),
                       (dict(flush_launch=False, flush_stream=False), "needs flush_launch=True")]:
        with pytest.raises(ValueError, match=match):
            decode.LaunchConfig(**dict(HEAD_FLUSH, **bad))


def test_launcher_refuses_a_counter_that_does_not_match_the_order():
    # Checked before anything is compiled or launched: the checkpoint stays as it was.
    ck = torch.randn(2, 2, 64, 128)
    before = ck.clone()
    args = [torch.zeros(1)] * 11
    for kw, match in [(dict(order="auto"), "counter: expected a tensor for order 'auto'"),
                      (dict(counter=torch.zeros(1, dtype=torch.int32), order="stride"), "counter: expected None"),
                      (dict(counter=torch.zeros(2, dtype=torch.int32)), "counter: expected one int32"),
                      (dict(order="sorted"), "order: expected one of"),
                      (dict(blocks=0), r"blocks: expected an int in \[1, 8\]")]:
        with pytest.raises(ValueError, match=match):
            fh.flush_rows_head(ck, *args, 2, (0,) * 16, 16, **kw)
    assert torch.equal(ck, before)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path; the GPU tests run the kernel")
def test_head_flush_config_off_cuda_takes_the_triton_launch():
    run = kernel_replay(decode.LaunchConfig(**dict(HEAD_FLUSH, fold="tf32x3")))
    check_replay((2, 32, 16, 2), torch.float32, 3, 4, 10, "cpu", run=run, stagger=True)


@NEEDS_NVRTC
@pytest.mark.skipif(not HAVE_PTXAS, reason="Triton's ptxas is not installed")
@pytest.mark.parametrize("sm", [90, 100, 103])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("order", WS_ORDERS)
def test_head_kernel_assembles_without_spills(sm, dtype, order, tmp_path):
    # Within the registers of its blocks per SM, no spill, at the dims it serves (the last case
    # without z and D); the counter's orders take items by atomics, the stride touches none.
    for heads, groups, head_dim, gated in [(128, 8, 64, True), (96, 8, 80, True), (8, 2, 128, True),
                                           (6, 3, 256, True), (128, 8, 64, False)]:
        defs = fh.head_defines(heads, groups, head_dim, 128, 16, dtype, dtype, dtype,
                               torch.float32 if gated else None, gated, gated, torch.int32,
                               (128, head_dim, 128), order, 2)
        ptx = _nvrtc.compile_ptx(fc.source(fh.HEAD_FILE), "flush_head.cu", sm,
                                 tuple((k, str(v)) for k, v in defs.items()))
        assert ("atom.global.add.u32" in ptx) == (order != "stride"), order
        regs, spills, log = assemble(ptx, sm, tmp_path / f"flush_head_{sm}_{head_dim}_{gated}.ptx")
        assert regs * defs["THREADS"] * defs["MIN_BLOCKS"] <= 65536 and spills == 0, (sm, head_dim, log)


@NEEDS_NVRTC
@pytest.mark.skipif(not HAVE_PTXAS, reason="Triton's ptxas is not installed")
@pytest.mark.parametrize("sm", [90, 100])
def test_head_kernel_takes_a_register_cap(sm, tmp_path):
    # flush_head_max_registers: __maxnreg__ in place of the blocks-per-SM bound.
    defs = fh.head_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float32, True,
                           True, torch.int32, (128, 64, 128), "auto", 2, 80)
    ptx = _nvrtc.compile_ptx(fc.source(fh.HEAD_FILE), "flush_head.cu", sm, tuple((k, str(v)) for k, v in defs.items()))
    assert ".maxnreg 80" in ptx and ".minnctapersm" not in ptx
    regs, _, log = assemble(ptx, sm, tmp_path / "flush_head_cap.ptx")
    assert regs <= 80, log


# -- GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("params", [{}, dict(flush_head_order="stride"), dict(flush_head_order="counter"),
                                    dict(flush_head_blocks=1), dict(flush_head_blocks=4, ring_x_in_ring=False),
                                    dict(compact_coef=True), dict(flush_head_max_registers=80)],
                         ids=["auto", "stride", "counter", "blocks1", "blocks4-stream-x", "compact", "regs80"])
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("dims", [(8, 64, 128, 2), (8, 80, 128, 8), (4, 128, 128, 1), (6, 256, 128, 3)])
def test_head_flush_steps_gpu(dims, dtype, batch, params):
    run = kernel_replay(decode.LaunchConfig(**dict(HEAD_FLUSH, **params)))
    check_replay(dims, dtype, batch, window=8, steps=26, device="cuda", run=run, stagger=True)
    check_replay(dims, dtype, batch, window=4, steps=13, device="cuda", run=run, seed=1)


@pytest.mark.gpu
@pytest.mark.parametrize("order", WS_ORDERS)
def test_head_flush_nemotron_dims_four_windows_gpu(order):
    # The accuracy target: the fp32 checkpoint within 1e-5 of float64 over 4 windows at L=16.
    run = kernel_replay(decode.LaunchConfig(**dict(HEAD_FLUSH, flush_head_order=order)))
    check_replay((128, 64, 128, 8), torch.bfloat16, 3, 16, 66, "cuda", run=run, ckpt_tol=1e-5)


@pytest.mark.gpu
def test_head_flush_ignores_unwritten_ring_entries_gpu():
    run = kernel_replay(decode.LaunchConfig(**HEAD_FLUSH))
    check_replay((8, 64, 128, 2), torch.bfloat16, 3, 8, 26, "cuda", run=run, poison_ring=True)


@pytest.mark.gpu
@pytest.mark.parametrize("order", WS_ORDERS)
def test_head_flush_cuda_graph_equals_eager_gpu(order):
    dims = (16, 64, 128, 2)
    gen = torch.Generator().manual_seed(8)
    base, _ = allocate(6, *dims, 4, torch.bfloat16, "cuda", gen)
    eager, graph = graph_vs_eager(kernel_replay(decode.LaunchConfig(**dict(HEAD_FLUSH, flush_head_order=order))),
                                  base.clone, 5, *dims, torch.bfloat16)
    for name, t in eager.tensors().items():
        assert torch.equal(t, getattr(graph, name)), name


@pytest.mark.gpu
@pytest.mark.parametrize("flushing", [36, 5])
@pytest.mark.parametrize("order,blocks", [("stride", 2), ("counter", 2), ("auto", 2), ("auto", 1), ("counter", 3)])
def test_head_flush_equals_the_ws_flush_bit_for_bit_gpu(flushing, order, blocks):
    # One launch on the operands of the warp-specialised launch's tests (36 or 5 of 40 rows flush,
    # 64 heads, random c): the same fold order, so the same checkpoint tiles and y, bit for bit,
    # and the rows that do not flush untouched; the counter's orders count every item.
    ck, args, strides, folded = _ws_flush_operands(40, 64, 8, flushing, 13)
    ck_ws, y_ws = _ws_flush(ck, args, strides)
    counter = None if order == "stride" else torch.zeros(1, dtype=torch.int32, device="cuda")
    out, y = ck.clone(), torch.zeros_like(args[4])
    fh.flush_rows_head(out, *args, y, 40, strides, 16, counter=counter, order=order, blocks=blocks)
    torch.cuda.synchronize()
    assert not torch.equal(ck_ws[folded], ck[folded]) and torch.equal(out[~folded], ck[~folded])
    assert torch.equal(out, ck_ws) and torch.equal(y, y_ws)
    if order == "counter" or (order == "auto" and 2 * flushing >= 40):
        assert counter.item() >= flushing * 64, counter.item()
    elif counter is not None:
        assert counter.item() == 0


@pytest.mark.gpu
def test_head_flush_serves_the_model_dims_gpu():
    # The steps above run flush_head.cu where it serves (not the per-warp CUDA launch's fallback).
    for head_dim in (64, 80, 128, 256):
        ck = torch.zeros(4, 2, head_dim, 128, device="cuda")
        assert fc.unsupported(ck, 4) is None and fh.head_unsupported(ck) is None, head_dim
