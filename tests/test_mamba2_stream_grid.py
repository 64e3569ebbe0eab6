"""The staged Mamba-2 step's stream launch and flush rows as one CUDA C++ grid
(ops/mamba2/decode_stream_cuda.py, ``stream_grid.cu``, ``LaunchConfig(stream_impl="cuda_grid")``).

CPU: the configuration's checks, the defines, which steps the grid serves (each reason named),
and, where an NVRTC library is installed, that the kernel compiles for sm_90 / sm_100 / sm_103.
GPU (``gpu``): steps against the float64 reference over dims, dtypes, batches, padded rows and
staggered flush phases, 4 windows at Nemotron-H dims, a NaN-poisoned ring, the Triton fallback
(d_state 64), and a captured step against eager calls.
"""

from __future__ import annotations

import pytest
import torch

from test_mamba2_kernels import _graph_vs_eager, _kernel_replay, allocate, check_replay
from trtllm_replayssm.ops import _nvrtc
from trtllm_replayssm.ops._flush_rows import source
from trtllm_replayssm.ops.mamba2 import decode
from trtllm_replayssm.ops.mamba2 import decode_stream_cuda as sg

GRID = dict(block_p=16, num_warps=2, kernel="staged", fold="bf16x3", ring_x_in_ring=True, stream_impl="cuda_grid")


def test_launch_config_checks_the_grid_fields():
    assert decode.LaunchConfig(**GRID).stream_impl == "cuda_grid"
    for bad, match in [(dict(GRID, stream_impl="cutlass"), "stream_impl: expected one of"),
                       (dict(GRID, flush_launch=True), "'cuda_grid' needs kernel='staged', flush_launch=False"),
                       (dict(GRID, ring_x_in_ring=False), "ring_x_in_ring=True, got"),
                       (dict(GRID, stream_grid_warps=3), "stream_grid_warps"),
                       (dict(GRID, stream_grid_blocks=0), "stream_grid_blocks")]:
        with pytest.raises(ValueError, match=match):
            decode.LaunchConfig(**bad)
    with pytest.raises(ValueError, match="ring_x_in_ring: needs flush_launch=True or stream_impl='cuda_grid'"):
        decode.LaunchConfig(kernel="staged", ring_x_in_ring=True)


def test_grid_defines():
    d = sg.grid_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, True,
                        False, torch.int64, 2, 16)
    assert d == dict(P=64, N=128, CAP=16, HEADS=128, HPG=16, WARPS=2, THREADS=64, MINB=16, X_KIND=1, BC_KIND=1,
                     RING_KIND=0, D_KIND=0, HAS_D=1, HAS_Z=0, HAS_INDICES=1, IDX_64=1)
    with pytest.raises(ValueError, match="x: expected one of"):
        sg.grid_defines(8, 2, 64, 128, 16, torch.int8, torch.bfloat16, torch.bfloat16, None, False, False, None, 2, 16)


def test_grid_unsupported_names_each_reason():
    ck = torch.zeros(4, 2, 64, 128)
    rx, rb = torch.zeros(4, 2, 16, 64), torch.zeros(4, 1, 16, 128)
    ops = dict(x=torch.zeros(4, 2, 64))
    assert "d_state 80" in sg.grid_unsupported(torch.zeros(4, 2, 64, 80), rx, rb, ops, 2)
    assert "not fp32" in sg.grid_unsupported(ck.half(), rx, rb, ops, 2)
    assert "not contiguous" in sg.grid_unsupported(ck, torch.zeros(4, 2, 16, 72)[..., :64], rb, ops, 2)
    assert "head_dim 64: expected a multiple of 128" in sg.grid_unsupported(ck, rx, rb, ops, 16)
    assert "32 entries" in sg.grid_unsupported(ck, torch.zeros(4, 2, 32, 64), torch.zeros(4, 1, 32, 128), ops, 2)
    assert "x is torch.int8" in sg.grid_unsupported(ck, rx, rb, dict(x=torch.zeros(4, 2, 64, dtype=torch.int8)), 2)
    assert "16-byte" in sg.grid_unsupported(ck, rx, rb, dict(x=torch.zeros(4, 2, 66)[..., :64]), 2)
    assert "CUDA device" in sg.grid_unsupported(ck, rx, rb, ops, 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path; the GPU tests run the kernel")
def test_grid_config_off_cuda_takes_the_triton_stream_launch():
    # Off CUDA the Triton stream launch folds the flush rows itself (ring x stored by the ring launch).
    run = _kernel_replay(decode.LaunchConfig(**dict(GRID, fold="tf32x3")))
    check_replay((2, 32, 16, 2), torch.float32, 3, 4, 10, "cpu", run=run, stagger=True)


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC library (nvidia-cuda-nvrtc wheel)")
@pytest.mark.parametrize("sm", [90, 100, 103])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_grid_kernel_compiles_for_hopper_and_blackwell(sm, dtype):
    for heads, groups, head_dim, gated in [(128, 8, 64, True), (96, 8, 80, True), (8, 2, 256, False)]:
        defs = sg.grid_defines(heads, groups, head_dim, 128, 16, dtype, dtype, dtype, torch.float32 if gated else None,
                               gated, gated, torch.int32, 2, 16)
        cubin = _nvrtc.compile_cubin(source(sg.KERNEL_FILE), "mamba2_stream_grid", sm,
                                     tuple(sorted((k, str(v)) for k, v in defs.items())))
        assert cubin[:4] == b"\x7fELF" and b"mamba2_stream_grid" in cubin


# -- GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("params", [{}, dict(stream_grid_warps=4), dict(stream_grid_blocks=8)],
                         ids=["default", "warps4", "blocks8"])
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("dims", [(8, 64, 128, 2), (8, 80, 128, 8), (6, 256, 128, 3), (12, 64, 128, 1)])
def test_grid_steps_gpu(dims, dtype, batch, params):
    if dims[1] % (8 * params.get("stream_grid_warps", 2)):
        pytest.skip("head_dim not a multiple of the block's rows: the Triton launch serves it")
    run = _kernel_replay(decode.LaunchConfig(**dict(GRID, **params)))
    check_replay(dims, dtype, batch, window=8, steps=26, device="cuda", run=run, stagger=True)
    check_replay(dims, dtype, batch, window=4, steps=13, device="cuda", run=run, seed=1)


@pytest.mark.gpu
def test_grid_nemotron_dims_four_windows_gpu():
    # The accuracy target: the fp32 checkpoint within 1e-5 of float64 over 4 windows at L=16.
    check_replay((128, 64, 128, 8), torch.bfloat16, 3, 16, 66, "cuda", run=_kernel_replay(decode.LaunchConfig(**GRID)),
                 ckpt_tol=1e-5)


@pytest.mark.gpu
def test_grid_ignores_unwritten_ring_entries_gpu():
    # Window 8 of a 16-entry ring, NaN in every entry until written: entries past c never reach a sum.
    check_replay((8, 64, 128, 2), torch.bfloat16, 3, 8, 26, "cuda", run=_kernel_replay(decode.LaunchConfig(**GRID)),
                 poison_ring=True)


@pytest.mark.gpu
@pytest.mark.parametrize("gate,with_D", [(False, True), (False, False)], ids=["no-z", "no-z-no-D"])
def test_grid_without_gate_or_D_gpu(gate, with_D):
    check_replay((8, 64, 128, 2), torch.bfloat16, 64, 4, 13, "cuda", run=_kernel_replay(decode.LaunchConfig(**GRID)),
                 stagger=True, gate=gate, with_D=with_D)


@pytest.mark.gpu
def test_grid_falls_back_where_unsupported_gpu():
    # d_state 64: the Triton stream launch folds the flush rows.
    assert "d_state 64" in sg.grid_unsupported(torch.zeros(4, 2, 64, 64, device="cuda"), torch.zeros(4, 2, 16, 64),
                                               torch.zeros(4, 1, 16, 64), {}, 2)
    check_replay((6, 64, 64, 3), torch.bfloat16, 3, 4, 13, "cuda", run=_kernel_replay(decode.LaunchConfig(**GRID)))


@pytest.mark.gpu
def test_grid_cuda_graph_equals_eager_gpu():
    dims = (16, 64, 128, 2)
    gen = torch.Generator().manual_seed(8)
    base, _ = allocate(6, *dims, 4, torch.bfloat16, "cuda", gen)
    eager, graph = _graph_vs_eager(_kernel_replay(decode.LaunchConfig(**GRID)), base.clone, 5, *dims, torch.bfloat16)
    for name, t in eager.tensors().items():
        assert torch.equal(t, getattr(graph, name)), name
