"""The persistent CUDA C++ stream launch of the staged Mamba-2 step (ops/mamba2/decode_stream_cuda.py,
``stream_cuda.cu``, ``LaunchConfig(stream_impl="cuda")``).

CPU: the configuration's checks, which steps the kernel serves (each refusal named), its stage
sizing and defines, that off CUDA the step takes the Triton stream launch, and, where an NVRTC
library is installed, that the kernel compiles for sm_90 / sm_100 / sm_103 and, assembled by
Triton's ptxas, fits its launch bounds without spills. GPU (``gpu``): its steps against the
float64 reference over dims, dtypes, batches, padded rows and staggered flush phases beside
each flush launch; 4 windows at Nemotron-H dims; a NaN-poisoned ring; warps whose stage
overflows; a captured step against eager calls.
"""

from __future__ import annotations

import pytest
import torch

from ptx_resources import HAVE_PTXAS, assemble
from test_mamba2_kernels import _graph_vs_eager, _kernel_replay, allocate, check_replay
from trtllm_replayssm.ops import _nvrtc
from trtllm_replayssm.ops.mamba2 import decode, decode_staged
from trtllm_replayssm.ops.mamba2 import decode_stream_cuda as sc

STREAM_CUDA = dict(block_p=16, num_warps=2, kernel="staged", fold="bf16x3", flush_launch=True, flush_stream=True,
                   ring_x_in_ring=True, stream_impl="cuda")


# -- CPU ---------------------------------------------------------------------------------------------


def test_launch_config_checks_stream_impl():
    assert decode.LaunchConfig(**STREAM_CUDA).stream_impl == "cuda"
    with pytest.raises(ValueError, match=r"stream_impl: expected one of \('triton', 'cuda'\), got 'cuda_ws'"):
        decode.LaunchConfig(**dict(STREAM_CUDA, stream_impl="cuda_ws"))
    with pytest.raises(ValueError, match="stream_impl: 'cuda' needs ring_x_in_ring=True"):
        decode.LaunchConfig(**dict(STREAM_CUDA, ring_x_in_ring=False))
    with pytest.raises(ValueError, match="ring_x_in_ring: needs flush_launch=True"):
        decode.LaunchConfig(kernel="staged", ring_x_in_ring=True, stream_impl="cuda")


def _operands(slots=4, heads=4, head_dim=64, d_state=128, groups=2, cap=16, dtype=torch.bfloat16):
    ck = torch.zeros(slots, heads, head_dim, d_state)
    ring_x = torch.zeros(slots, heads, cap, head_dim, dtype=dtype)
    x = torch.zeros(3, heads, head_dim, dtype=dtype)
    C = torch.zeros(3, groups, d_state, dtype=dtype)
    return dict(checkpoint=ck, ring_x=ring_x, x=x, C=C, z=x.clone(), y=x.clone(), D=torch.zeros(heads))


@pytest.mark.parametrize("change,reason", [
    (dict(checkpoint=torch.zeros(4, 4, 64, 128, dtype=torch.float16)), "fp32 checkpoints"),
    (dict(checkpoint=torch.zeros(4, 4, 64, 64)), "d_state 64"),
    (dict(checkpoint=torch.zeros(4, 4, 12, 128)), "head_dim 12"),
    (dict(ring_x=torch.zeros(4, 4, 33, 64, dtype=torch.bfloat16)), "a ring of 33 entries"),
    (dict(checkpoint=torch.zeros(4, 4, 64, 129)[..., :128]), "16-byte aligned fp32 rows"),
    (dict(x=torch.zeros(3, 4, 64, dtype=torch.float64)), "x is torch.float64"),
    (dict(y=torch.zeros(3, 4, 68, dtype=torch.bfloat16)[..., 2:66]), "y's rows do not start on 16-byte boundaries"),
    (dict(y=torch.zeros(3, 4, 64)), "x, z and y differ in dtype"),
    ({}, "not on a CUDA device"),
])
def test_stream_unsupported_names_each_reason(change, reason):
    ops = dict(_operands(), **change)
    assert reason in sc.stream_unsupported(**ops)


def test_stage_items_and_defines(monkeypatch):
    # Nemotron-H batch 256: 262144 warp items over 132 SMs x 4 blocks x 8 warps.
    share = -(-262144 // 4224)
    stage = sc.stage_items(262144, 4224, 16)
    assert stage == (2 * share + 2 * sc.CHUNK) // 4 * 4 and stage % 4 == 0
    # The block's stage stays within MAX_STAGE_BYTES; at least 4 items even for a huge batch.
    assert sc.stage_items(10 ** 8, 4224, 16) * 8 * 20 <= sc.MAX_STAGE_BYTES
    assert sc.stage_items(1, 10 ** 6, 32) == (2 + 2 * sc.CHUNK) // 4 * 4
    monkeypatch.setattr(sc, "MAX_STAGE_BYTES", 100)
    assert sc.stage_items(262144, 4224, 16) == 4
    monkeypatch.undo()
    defs = sc.stream_defines(96, 8, 80, 128, 16, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float32, True,
                             torch.int64, (128, 80))
    assert (defs["HPG"], defs["CK_P"], defs["RX_J"], defs["X_KIND"], defs["D_KIND"], defs["HAS_D"],
            defs["IDX_64"]) == (12, 128, 80, 1, 0, 1, 1)
    nod = sc.stream_defines(96, 8, 80, 128, 16, torch.float16, torch.float16, torch.float32, None, False, None,
                            (128, 80))
    assert (nod["HAS_D"], nod["HAS_Z"], nod["HAS_INDICES"], nod["X_KIND"], nod["RING_KIND"]) == (0, 0, 0, 2, 0)
    with pytest.raises(ValueError, match="ring: expected one of"):
        sc.stream_defines(96, 8, 80, 128, 16, torch.bfloat16, torch.bfloat16, torch.float64, None, False, None,
                          (128, 80))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the off-CUDA path; the GPU tests run the kernel")
def test_stream_cuda_config_off_cuda_takes_the_triton_launch(monkeypatch):
    def compiled_launch(*args, **kwargs):
        raise AssertionError("the CUDA stream kernel was taken off CUDA")

    monkeypatch.setattr(decode_staged, "stream_rows_cuda", compiled_launch)
    check_replay((2, 16, 16, 1), torch.float32, 3, 4, 9, "cpu", run=_kernel_replay(decode.LaunchConfig(**STREAM_CUDA)))


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC library here (the nvidia-cuda-nvrtc wheel)")
@pytest.mark.parametrize("sm", [90, 100, 103])
@pytest.mark.parametrize("dtype,head_dim,gated,idx", [(torch.bfloat16, 64, True, torch.int32),
                                                      (torch.float16, 80, False, None),
                                                      (torch.float32, 128, True, torch.int64)])
def test_kernel_assembles_within_its_bounds(sm, dtype, head_dim, gated, idx, tmp_path):
    defs = sc.stream_defines(128, 8, head_dim, 128, 16, dtype, dtype, dtype, torch.float32 if gated else None, gated,
                             idx, (128, head_dim))
    ptx = _nvrtc.compile_ptx(sc.source(), "stream_cuda.cu", sm, tuple((k, str(v)) for k, v in defs.items()))
    # The counter, and a warp item's 8 checkpoint chunks by plain ld.global (not the non-coherent path).
    assert "atom.global.add" in ptx and ptx.count("ld.global.v4.f32") == 8
    if not HAVE_PTXAS:
        pytest.skip("no ptxas here (Triton's)")
    regs, spills, log = assemble(ptx, sm, tmp_path / f"stream_{sm}_{head_dim}.ptx")
    assert regs * defs["THREADS"] * defs["MIN_BLOCKS"] <= 65536 and spills == 0, (sm, head_dim, log)


# -- GPU ---------------------------------------------------------------------------------------------


@pytest.fixture
def taken(monkeypatch):
    """How many steps launched the CUDA stream kernel (the real launch, counted)."""
    calls = []
    real = decode_staged.stream_rows_cuda

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode_staged, "stream_rows_cuda", counted)
    return calls


@pytest.mark.gpu
@pytest.mark.parametrize("flush_impl", ["triton", "cuda_ws"])
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("dims", [(8, 64, 128, 2), (8, 80, 128, 8), (6, 256, 128, 3), (12, 64, 128, 1)])
def test_stream_cuda_steps_gpu(dims, dtype, batch, flush_impl, taken):
    run = _kernel_replay(decode.LaunchConfig(**dict(STREAM_CUDA, flush_impl=flush_impl)))
    check_replay(dims, dtype, batch, window=8, steps=26, device="cuda", run=run, stagger=True)
    check_replay(dims, dtype, batch, window=4, steps=13, device="cuda", run=run, seed=1)
    assert len(taken) == 39


@pytest.mark.gpu
def test_stream_cuda_nemotron_dims_four_windows_gpu(taken):
    # The accuracy target: the fp32 checkpoint within 1e-5 of float64 over 4 windows at L=16.
    cfg = decode.LaunchConfig(**dict(STREAM_CUDA, flush_persistent=4, flush_list_items="heads", flush_heads=16,
                                     flush_impl="cuda_ws"))
    check_replay((128, 64, 128, 8), torch.bfloat16, 3, 16, 66, "cuda", run=_kernel_replay(cfg), ckpt_tol=1e-5)
    assert len(taken) == 66


@pytest.mark.gpu
@pytest.mark.parametrize("gate,with_D", [(True, True), (False, True), (False, False)])
def test_stream_cuda_ignores_unwritten_ring_entries_gpu(gate, with_D, taken):
    # Window 8 of a 16-entry ring, NaN in every entry until written: entries past c never reach y.
    run = _kernel_replay(decode.LaunchConfig(**dict(STREAM_CUDA, flush_impl="cuda_ws")))
    check_replay((8, 64, 128, 2), torch.bfloat16, 3, 8, 26, "cuda", run=run, poison_ring=True, gate=gate,
                 with_D=with_D, stagger=True)
    assert taken


@pytest.mark.gpu
def test_stream_cuda_stage_overflow_gpu(monkeypatch, taken):
    # A block's stage of 4 items a warp: most outputs are stored at once, the rest after the reads.
    monkeypatch.setattr(sc, "MAX_STAGE_BYTES", 8 * 4 * 20)
    assert sc.stage_items(10 ** 6, 100, 16) == 4
    run = _kernel_replay(decode.LaunchConfig(**STREAM_CUDA))
    check_replay((16, 64, 128, 2), torch.bfloat16, 64, 4, 13, "cuda", run=run, stagger=True)
    assert len(taken) == 13


@pytest.mark.gpu
def test_stream_cuda_falls_back_where_unsupported_gpu(taken):
    # d_state 64: the Triton stream launch serves the step.
    run = _kernel_replay(decode.LaunchConfig(**STREAM_CUDA))
    check_replay((6, 64, 64, 3), torch.bfloat16, 3, 4, 13, "cuda", run=run)
    assert not taken


@pytest.mark.gpu
def test_stream_cuda_cuda_graph_equals_eager_gpu(taken):
    dims = (16, 64, 128, 2)
    gen = torch.Generator().manual_seed(8)
    base, _ = allocate(6, *dims, 4, torch.bfloat16, "cuda", gen)
    eager, graph = _graph_vs_eager(_kernel_replay(decode.LaunchConfig(**dict(STREAM_CUDA, flush_impl="cuda_ws"))),
                                   base.clone, 5, *dims, torch.bfloat16)
    for name, t in eager.tensors().items():
        assert torch.equal(t, getattr(graph, name)), name
    assert taken
