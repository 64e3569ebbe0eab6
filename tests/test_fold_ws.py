"""The warp-specialised fold probe (``benchmarks/fold_ws.cu``): it compiles by NVRTC for sm_90 /
sm_100 / sm_103 and, assembled by Triton's ptxas, holds its registers without spills at the
shapes ``bench_fold_ceiling.py`` times; its shared memory fits an H200's block. On a GPU,
``bench_fold_ceiling.py --only "cuda ws"`` checks its folds against float64."""

import ctypes
import sys
from pathlib import Path

import pytest
import torch

from ptx_resources import HAVE_PTXAS, assemble
from trtllm_replayssm.ops import _nvrtc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _fold_ws as ws  # noqa: E402


H200_BLOCK_SHARED = 232448  # cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90


def _nemotron_h_shapes():
    return [shape for shape in ws.SHAPES if ws.shared_bytes(64, 128, 16, shape[1], shape[6]) <= H200_BLOCK_SHARED]


def test_stage_bytes_are_the_operands():
    # tile [64, 128] fp32 + X [16, 64] fp32 + Y [16, 128] bf16 + C [128] bf16
    assert ws.stage_bytes(64, 128, 16) == 32768 + 4096 + 4096 + 256
    assert ws.shared_bytes(64, 128, 16, 5) == 128 + 5 * 41216
    # Gated DeltaNet's 128-row tiles: two stages fit a block, three do not
    assert ws.shared_bytes(128, 128, 16, 2) <= H200_BLOCK_SHARED < ws.shared_bytes(128, 128, 16, 3)
    # two Nemotron-H heads per stage: one group's Y and C once
    assert ws.stage_bytes(64, 128, 16, heads=2) == 2 * (32768 + 4096) + 4096 + 256


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC")
@pytest.mark.skipif(not HAVE_PTXAS, reason="Triton's ptxas is not installed")
@pytest.mark.parametrize("sm", [90, 100, 103])
def test_assembles_without_spills(sm, tmp_path):
    source = ws.ws_source()
    for warps, stages, blocks, nofold, store, chunks, heads in _nemotron_h_shapes():
        defs = ws.defines(64, 128, 16, 16, warps, stages, blocks, nofold, store, chunks, heads)
        ptx = _nvrtc.compile_ptx(source, "fold_ws.cu", sm, tuple((k, str(v)) for k, v in defs.items()))
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
        name = f"ws_{sm}_{warps}_{stages}_{blocks}_{int(nofold)}_{store}_{chunks}_{heads}.ptx"
        regs, spills, log = assemble(ptx, sm, tmp_path / name)
        assert spills == 0 and regs * (warps + 1) * 32 * blocks <= 65536, (warps, stages, blocks, log)


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC")
def test_shapes_outside_the_kernel_are_refused_at_compile_time():
    # 12 consumer warps do not divide 64 rows into multiples of 4: the static_assert names it
    defs = ws.defines(64, 128, 16, 16, 12, 2, 1, False)
    with pytest.raises(_nvrtc.NvrtcError, match="rows per consumer warp"):
        _nvrtc.compile_ptx(ws.ws_source(), "fold_ws.cu", 90, tuple((k, str(v)) for k, v in defs.items()))


def test_launches_refuse_cpu_tensors():
    S = torch.zeros(64, 128)
    with pytest.raises(ValueError, match="S: expected a CUDA tensor"):
        ws.launches(S, S, S, S, S, S, 64, 16, 1)


def test_b_fragments_are_the_window_product_in_the_kernels_order():
    # fold_mma.cu's thread (n, q) of n-tile t multiplies its A fragment (X at j = 4q .. 4q + 3 of
    # its rows) by these four Y entries of one column; walking that mapping must give X^T Y
    torch.manual_seed(0)
    Y = torch.randn(2, 16, 128).to(torch.bfloat16)
    X = torch.randn(16, 16, dtype=torch.float64)
    frags = ws.b_fragments(Y).double()  # [groups, n-tiles, lanes, 4]
    got = torch.zeros(16, 128, dtype=torch.float64)
    for t in range(16):
        for lane in range(32):
            n, q = divmod(lane, 4)
            col = 16 * (t // 2) + 4 * (n // 2) + n % 2 + 2 * (t % 2)
            got[:, col] += X[4 * q:4 * q + 4].T @ frags[1, t, lane]
    torch.testing.assert_close(got, X.T @ Y[1].double(), rtol=0, atol=1e-12)
    assert ws.b_fragments(Y).shape == (2, 16, 32, 4)


def _grid_kernels():
    # (file, name, [(shape's name, defines, warps, blocks per SM)]) at Nemotron-H's 64-row heads
    grid = [(ws.grid_name(*sh), ws.grid_defines(64, 128, 16, 16, *sh), sh[1], sh[2]) for sh in ws.GRID_SHAPES]
    mma = [(ws.mma_name(*sh), ws.mma_defines(64, 16, *sh), sh[0], sh[1]) for sh in ws.MMA_SHAPES if 64 % (16 * sh[0]) == 0]
    return {"grid": (ws.GRID_FILE, "fold_grid.cu", grid), "mma": (ws.MMA_FILE, "fold_mma.cu", mma)}


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC")
@pytest.mark.skipif(not HAVE_PTXAS, reason="Triton's ptxas is not installed")
@pytest.mark.parametrize("sm", [90, 100, 103])
@pytest.mark.parametrize("kind", ["grid", "mma"])
def test_grid_folds_assemble_within_their_blocks(kind, sm, tmp_path):
    # every shape within its blocks per SM; without spills, except that Blackwell's ptxas spills a
    # few bytes of the 128-register MMA shapes (the H200 timings are sm_90's, in registers)
    path, name, shapes = _grid_kernels()[kind]
    source = path.read_text()
    for shape, defs, warps, blocks in shapes:
        ptx = _nvrtc.compile_ptx(source, name, sm, tuple((k, str(v)) for k, v in defs.items()))
        regs, spills, log = assemble(ptx, sm, tmp_path / f"{shape.replace(' ', '_')}_{sm}.ptx")
        assert (spills == 0 or (kind == "mma" and sm != 90)) and regs * warps * 32 * blocks <= 65536, (shape, log)
        assert kind != "mma" or "mma.sync.aligned.m16n8k16" in ptx


def test_grid_persistence_forms_map_to_their_defines_and_names():
    # persistent 1: striding wave, 2: its next tile loaded ahead, 3: items from a counter
    for persistent, defs, suffix in [(0, dict(PERSIST=0, AHEAD=0, COUNTER=0), ""),
                                     (1, dict(PERSIST=1, AHEAD=0, COUNTER=0), " persist"),
                                     (2, dict(PERSIST=1, AHEAD=1, COUNTER=0), " persist ahead"),
                                     (3, dict(PERSIST=1, AHEAD=0, COUNTER=1), " persist counter")]:
        got = ws.grid_defines(64, 128, 16, 16, 8, 8, 2, False, True, True, persistent)
        assert {k: got[k] for k in defs} == defs
        assert ws.grid_name(8, 8, 2, False, True, True, persistent) == "cuda grid r8 w8 b2 xs ys" + suffix
    # fold_grid takes the counter after the six pointers and the item count; fold_mma does not
    assert ws.GRID_SIGNATURE == ws.MMA_SIGNATURE + (ctypes.c_void_p,)
    assert any(len(shape) > 6 and shape[6] == 3 for shape in ws.GRID_SHAPES)
