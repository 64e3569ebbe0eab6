"""The CUDA C++ flush launch of the staged Mamba-2 step (ops/mamba2/decode_flush_cuda.py,
``flush_cuda.cu``, ``LaunchConfig(flush_impl="cuda")``).

CPU: its launch choices (tile rows, defines, shared memory, which steps it serves), the
configuration's checks, and, where an NVRTC library is installed (the ``nvidia-cuda-nvrtc`` wheel),
that the kernel compiles for sm_90 / sm_100 / sm_103 and, assembled by Triton's ptxas, does not
spill at the defaults; the same for the warp-specialised form (``flush_impl="cuda_ws"``,
``flush_ws.cu``) with its shared-memory plan and the steps it serves. GPU (``gpu``): the steps of
both forms against the float64 reference over dims, dtypes, batches, padded rows and staggered
flush phases, 4 windows at Nemotron-H dims, and a captured step against eager calls.
"""

from __future__ import annotations

import pytest
import torch

from ptx_resources import HAVE_PTXAS, assemble
from mamba2_kernel_harness import allocate, check_replay, graph_vs_eager, kernel_replay
from trtllm_replayssm.ops import _nvrtc
from trtllm_replayssm.ops.mamba2 import decode
from trtllm_replayssm.ops.mamba2 import decode_flush_cuda as fc
from trtllm_replayssm.ops.mamba2.launch import WS_ORDERS

CUDA_FLUSH = dict(block_p=16, num_warps=2, kernel="staged", fold="bf16x3", flush_launch=True, flush_stream=True,
                  flush_impl="cuda")


# -- CPU ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_dim,d_state,asked,want", [
    (64, 128, None, 4), (80, 128, None, 4), (256, 128, None, 4), (64, 64, None, 8), (80, 64, None, 8),
    (64, 128, 2, 2), (64, 128, 1, 1), (80, 80, None, None), (64, 256, None, None), (64, 32, None, 16)])
def test_warp_rows(head_dim, d_state, asked, want):
    assert fc.warp_rows(head_dim, d_state, asked) == want


@pytest.mark.parametrize("d_state,asked", [(128, 3), (128, 16), (64, 32), (64, 1)])
def test_warp_rows_rejects(d_state, asked):
    # Not a divisor of head_dim 64 (3), more than 8 instructions (16 rows at d_state 128, 32 at 64),
    # or not a whole number of instructions (1 at d_state 64: two rows per instruction).
    with pytest.raises(ValueError, match="flush_cuda_rows"):
        fc.warp_rows(64, d_state, asked)


def test_defines_and_shared_memory():
    d = fc.defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, True, False,
                   torch.int64, (128, 64, 128), min_blocks=3, heads_per_item=16)
    assert d == dict(CK_P=128, RX_J=64, RB_J=128, P=64, N=128, CAP=16, HEADS=128, HPG=16, HEADS_PER_ITEM=16,
                     THREADS=256, PASSES=4, MIN_BLOCKS=3, X_KIND=1, BC_KIND=1, RING_KIND=0, D_KIND=0,
                     HAS_D=1, HAS_Z=0, HAS_INDICES=1, IDX_64=1)
    assert fc.defines(8, 2, 80, 64, 8, torch.float16, torch.float16, torch.float16, None, False, True, None,
                      (64, 80, 64))["PASSES"] == 4  # 8 rows, two per instruction
    # The group's 17 B rows and C, each of 8 warps' 17 x 4 weighted x with x and z (fp32); 256 rows,
    # ring lengths and slots.
    assert fc.shared_bytes(256, 128, 16, 4) == 4 * (17 * 128 + 128 + 8 * (17 * 4 + 2 * 4)) + 256 * (4 + 4 + 8)
    with pytest.raises(ValueError, match="x: expected one of"):
        fc.defines(8, 2, 64, 128, 16, torch.int8, torch.bfloat16, torch.bfloat16, None, False, False, None,
                   (128, 64, 128))
    with pytest.raises(ValueError, match="heads_per_item"):
        fc.defines(8, 2, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.bfloat16, None, False, False, None,
                   (128, 64, 128), heads_per_item=3)


def test_unsupported_names_each_reason():
    ck = torch.zeros(4, 2, 64, 128)
    assert "float16" in fc.unsupported(ck.half(), 4)
    assert "d_state 80" in fc.unsupported(torch.zeros(4, 2, 64, 80), 4)
    assert "16-byte" in fc.unsupported(torch.zeros(4, 2, 64, 129)[..., :128], 4)
    assert "batch 5000" in fc.unsupported(ck, 5000)
    assert "CUDA device" in fc.unsupported(ck, 4)


def test_launch_config_checks_cuda_flush_fields():
    assert decode.LaunchConfig(**CUDA_FLUSH).flush_impl == "cuda"
    for bad, match in [(dict(CUDA_FLUSH, flush_impl="cutlass"), "flush_impl: expected one of"),
                       (dict(CUDA_FLUSH, flush_launch=False, flush_stream=False), "needs flush_launch=True"),
                       (dict(CUDA_FLUSH, flush_cuda_blocks=0), "flush_cuda_blocks"),
                       (dict(CUDA_FLUSH, flush_cuda_rows=0), "flush_cuda_rows")]:
        with pytest.raises(ValueError, match=match):
            decode.LaunchConfig(**bad)


def test_ws_shared_memory_and_stages():
    # Nemotron-H, bf16 with z: five 39776-byte stages (the head's 32 KB tile, 16 ring B rows and
    # 16 ring x entries, B_t, C_t, x_t, z_t, a 96-byte coef window), 16 warps x 17 x 4 weighted x
    # and 128 heads' D (fp32), 16 bytes per batch row; Nemotron-3-Nano's 40 KB tiles fit four.
    stage = 64 * 128 * 4 + 16 * 128 * 2 + 16 * 64 * 2 + 2 * 128 * 2 + 2 * 64 * 2 + 96
    assert fc.ws_stage_bytes(64, 128, 16, 2, 2, 2, True) == stage == 39776
    assert fc.ws_stage_bytes(64, 128, 16, 2, 2, 2, False) == stage - 128
    assert fc.ws_shared_bytes(256, 128, 64, 128, 16, 2, 2, 2, True, 5) == (
        128 + 5 * stage + 4 * (16 * 17 * 4 + 128) + 16 * 256)
    assert fc.ws_stages(256, 128, 64, 128, 16, 2, 2, 2, True, 232448) == 5
    assert fc.ws_stages(256, 96, 80, 128, 16, 2, 2, 2, True, 232448) == 4
    assert fc.ws_stages(256, 8, 256, 128, 16, 2, 2, 2, True, 232448) == 0  # a 128 KB tile: not two stages
    assert fc.ws_stages(2048, 8, 128, 128, 16, 4, 4, 4, True, 232448) == 2  # 32 KB of rows leave two fp32 stages
    assert fc.ws_stages(2048, 8, 128, 128, 16, 4, 4, 4, True, 200000) == 0
    assert fc.ws_stages(4096, 8, 128, 128, 16, 4, 4, 4, True, 232448) == 0  # 64 KB of rows: not two
    # An H200's SM (228 KB, 227 KB a block): 56 KB stay free for the stream launch, so Nemotron-H
    # takes four stages and Nemotron-3-Nano three.
    limit = fc.ws_shared_limit(232448, 233472)
    assert limit == 233472 - 1024 - 56 * 1024
    assert fc.ws_stages(256, 128, 64, 128, 16, 2, 2, 2, True, limit) == 4
    assert fc.ws_stages(256, 96, 80, 128, 16, 2, 2, 2, True, limit) == 3
    assert fc.ws_shared_limit(101376, 102400) == 102400 - 1024 - 56 * 1024  # a smaller SM: the reserve still holds
    d = fc.ws_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, True, False,
                      None, 5)
    assert (d["CW"], d["THREADS"], d["STAGES"], d["HPG"], d["RING_KIND"], d["HAS_INDICES"]) == (16, 544, 5, 16, 0, 0)
    assert d["ORDER"] == 0
    assert fc.ws_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, None, False, False, None, 5,
                         "counter")["ORDER"] == 1
    assert fc.ws_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, None, False, False, None, 5,
                         "auto")["ORDER"] == 2
    with pytest.raises(ValueError, match="order: expected one of"):
        fc.ws_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, None, False, False, None, 5,
                      "random")
    with pytest.raises(ValueError, match="ring: expected one of"):
        fc.ws_defines(8, 2, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.int8, None, False, False, None, 2)
    assert d["TAPER"] == 0
    assert fc.ws_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, None, False, False, None, 5,
                         "auto", 4, 2)["TAPER"] == 2
    with pytest.raises(ValueError, match="taper: expected >= 0, got -1"):
        fc.ws_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, None, False, False, None, 5,
                      "auto", 4, -1)
    assert d["L2_AHEAD"] == 0
    assert fc.ws_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, None, False, False, None, 4,
                         "auto", 4, 0, 2)["L2_AHEAD"] == 2
    for bad in (3, True):
        with pytest.raises(ValueError, match="l2_ahead: expected 0, 1 or 2, got"):
            fc.ws_defines(128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.float32, None, False, False, None,
                          4, "auto", 4, 0, bad)


def test_ws_consumer_warps():
    # Fewer consumer warps fold more rows each; the block's threads follow, its shared memory does
    # not (the weighted x holds the head's rows whoever folds them).
    args = (128, 8, 64, 128, 16, torch.bfloat16, torch.bfloat16, torch.bfloat16, None, False, True, None, 4, "auto", 2,
            2, 0)
    for cw, threads in [(16, 544), (8, 288), (4, 160)]:
        d = fc.ws_defines(*args, cw)
        assert (d["CW"], d["THREADS"], d["P"] // d["CW"]) == (cw, threads, 64 // cw)
    assert fc.ws_defines(*args)["CW"] == fc.WS_CONSUMERS == 16
    for bad in (2, 12, 32, True, 8.0):
        with pytest.raises(ValueError, match=r"consumers: expected one of \(4, 8, 16\), got"):
            fc.ws_defines(*args, bad)
    # Nemotron-3-Nano's head_dim 80: 20 rows for each of 4 warps.
    assert fc.ws_defines(96, 8, 80, *args[3:], 4)["CW"] == 4
    with pytest.raises(ValueError, match="consumers: 4 warps do not split head_dim 256 into whole rows, at most 32"):
        fc.ws_defines(8, 2, 256, *args[3:], 4)
    with pytest.raises(ValueError, match="consumers: 16 warps do not split head_dim 72"):
        fc.ws_defines(8, 2, 72, *args[3:], 16)
    cfg = decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_consumers=8))
    assert cfg.flush_ws_consumers == 8
    for bad in (0, 6, 32, "8", 8.0):
        with pytest.raises(ValueError, match=r"LaunchConfig.flush_ws_consumers: expected one of \(4, 8, 16\), got"):
            decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_consumers=bad))
    with pytest.raises(ValueError, match="flush_ws_consumers: 8 needs flush_impl='cuda_ws', got 'cuda'"):
        decode.LaunchConfig(**dict(CUDA_FLUSH, flush_ws_consumers=8))


def test_ws_stages_taken():
    # An exact count is taken as asked, and refused past what fits; 0 takes what fits, at most the
    # cap (launch_config's "at most 3" below batch 192 must still launch where only 2 fit: head_dim
    # 128 on an H200, bf16 at batch 130).
    limit = fc.ws_shared_limit(232448, 233472)
    two = fc.ws_stages(130, 4, 128, 128, 16, 2, 2, 2, True, limit)
    four = fc.ws_stages(130, 128, 64, 128, 16, 2, 2, 2, True, limit)
    assert (two, four) == (2, 4)
    assert [fc.ws_pick_stages(0, cap, two) for cap in (0, 3)] == [2, 2]
    assert [fc.ws_pick_stages(0, cap, four) for cap in (0, 2, 3, 5)] == [4, 2, 3, 4]
    assert fc.ws_pick_stages(3, 0, four) == 3 and fc.ws_pick_stages(2, 3, two) == 2
    for asked in (3, 1, -1):
        with pytest.raises(ValueError, match=r"LaunchConfig.flush_ws_stages: expected 0 or 2 to 2 \(what fits"):
            fc.ws_pick_stages(asked, 0, two)
    for cap in (1, -2):
        with pytest.raises(ValueError, match="LaunchConfig.flush_ws_max_stages: expected 0 or 2 to 5"):
            fc.ws_pick_stages(0, cap, four)
    assert decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_max_stages=3)).flush_ws_max_stages == 3
    for bad in (1, 6, -1):
        with pytest.raises(ValueError, match="LaunchConfig.flush_ws_max_stages: expected 0 or 2 to 5"):
            decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_max_stages=bad))


def _ws_reason(checkpoint, ring_B, ring_x=None, batch=4, consumers=fc.WS_CONSUMERS):
    heads, head_dim = checkpoint.shape[1], checkpoint.shape[2]
    ring_x = torch.zeros(4, heads, ring_B.shape[2], head_dim, device=checkpoint.device) if ring_x is None else ring_x
    x = torch.zeros(batch, heads, head_dim, device=checkpoint.device)
    B = torch.zeros(batch, ring_B.shape[1], checkpoint.shape[3], device=checkpoint.device)
    return fc.ws_unsupported(checkpoint, ring_x, ring_B, x, B, x, batch, consumers)


def test_ws_unsupported_names_each_reason():
    ring_B = torch.zeros(4, 2, 16, 128)
    assert "d_state 64" in _ws_reason(torch.zeros(4, 2, 64, 64), torch.zeros(4, 2, 16, 64))
    assert "not contiguous" in _ws_reason(torch.zeros(4, 2, 64, 256)[..., :128], ring_B)
    assert "not contiguous" in _ws_reason(torch.zeros(4, 2, 64, 128), torch.zeros(4, 2, 16, 256)[..., :128])
    assert "not contiguous" in _ws_reason(torch.zeros(4, 2, 64, 128), ring_B, torch.zeros(4, 2, 16, 128)[..., :64])
    assert "head_dim 72" in _ws_reason(torch.zeros(4, 2, 72, 128), ring_B)
    # 256 rows are 64 a warp over 4 consumer warps: more than a warp's 32 lanes hold.
    assert "head_dim 256: expected a multiple of 4, at most 128 (4 consumer warps)" in _ws_reason(
        torch.zeros(4, 2, 256, 128), ring_B, consumers=4)
    assert "CUDA device" in _ws_reason(torch.zeros(4, 2, 256, 128), ring_B, consumers=8)
    # A ring of 32 entries is served (its coef lines are bulk-copied, not spread over one warp's lanes).
    assert "CUDA device" in _ws_reason(torch.zeros(4, 2, 64, 128), torch.zeros(4, 2, 32, 128))


def test_ws_launch_refuses_coef_without_its_window():
    # The launcher bulk-copies each coef line in a 16-byte window, so the scratch must leave 12
    # readable bytes past its last line (decode_staged allocates 16); a tight one is refused before
    # anything is launched or written.
    batch, heads, head_dim, cap = 2, 4, 64, 16
    ck = torch.zeros(batch, heads, head_dim, 128)
    before = ck.clone()
    x = torch.zeros(batch, heads, head_dim)
    B = torch.zeros(batch, 1, 128)
    tight = torch.zeros(batch, heads, cap + 2)
    with pytest.raises(ValueError, match="^coef: expected"):
        fc.flush_rows_ws(ck, torch.zeros(batch, heads, cap, head_dim), torch.zeros(batch, 1, cap, 128), tight,
                         torch.zeros(batch, 2, dtype=torch.int32), x, B, B, None, None, None, x.clone(), batch,
                         (0,) * 16, cap)
    assert torch.equal(ck, before)
    # An item counter must be one int32 on the step's device.
    lines = batch * heads * (cap + 2)
    roomy = torch.zeros(lines + 8)[:lines].view(batch, heads, cap + 2)
    for bad in (torch.zeros(1, dtype=torch.int64), torch.zeros(2, dtype=torch.int32)):
        with pytest.raises(ValueError, match="^counter: expected one int32"):
            fc.flush_rows_ws(ck, torch.zeros(batch, heads, cap, head_dim), torch.zeros(batch, 1, cap, 128), roomy,
                             torch.zeros(batch, 2, dtype=torch.int32), x, B, B, None, None, None, x.clone(), batch,
                             (0,) * 16, cap, counter=bad)
    # The order and the counter agree: "auto" and "counter" read one, "stride" none.
    one = torch.zeros(1, dtype=torch.int32)
    for order, counter, expected in [("auto", None, "a tensor"), ("counter", None, "a tensor"), ("stride", one, "None")]:
        with pytest.raises(ValueError, match=f"^counter: expected {expected} for order '{order}'"):
            fc.flush_rows_ws(ck, torch.zeros(batch, heads, cap, head_dim), torch.zeros(batch, 1, cap, 128), roomy,
                             torch.zeros(batch, 2, dtype=torch.int32), x, B, B, None, None, None, x.clone(), batch,
                             (0,) * 16, cap, counter=counter, order=order)
    with pytest.raises(ValueError, match="^order: expected one of"):
        fc.flush_rows_ws(ck, torch.zeros(batch, heads, cap, head_dim), torch.zeros(batch, 1, cap, 128), roomy,
                         torch.zeros(batch, 2, dtype=torch.int32), x, B, B, None, None, None, x.clone(), batch,
                         (0,) * 16, cap, counter=one, order="random")
    assert torch.equal(ck, before)


def test_launch_config_takes_the_ws_flush():
    assert decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws")).flush_impl == "cuda_ws"
    counted = decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_order="counter"))
    assert (counted.flush_ws_order, counted.flush_ws_chunk) == ("counter", 4)
    with pytest.raises(ValueError, match="flush_ws_chunk: expected 1 to 64, got 0"):
        decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_order="counter", flush_ws_chunk=0))
    with pytest.raises(ValueError, match=r"flush_ws_order: expected one of \('stride', 'counter', 'auto'\), got 'random'"):
        decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_order="random"))
    assert decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_stages=3)).flush_ws_stages == 3
    for bad in (1, 6, -1):
        with pytest.raises(ValueError, match="flush_ws_stages: expected 0 or 2 to 5"):
            decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_ws_stages=bad))
    with pytest.raises(ValueError, match="needs flush_launch=True"):
        decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl="cuda_ws", flush_launch=False, flush_stream=False))


@pytest.mark.parametrize("field", ["ring_x_in_ring", "compact_coef"])
def test_launch_config_checks_flush_launch_flags(field):
    # Options of the staged step's ring launch that only serve beside a flush launch.
    assert getattr(decode.LaunchConfig(**dict(CUDA_FLUSH, **{field: True})), field)
    with pytest.raises(ValueError, match=f"{field}: expected a bool, got 1"):
        decode.LaunchConfig(**dict(CUDA_FLUSH, **{field: 1}))
    with pytest.raises(ValueError, match=f"{field}: needs flush_launch=True"):
        decode.LaunchConfig(kernel="staged", **{field: True})


def test_launch_config_checks_stream_tiles():
    assert decode.LaunchConfig(**dict(CUDA_FLUSH, stream_tiles=64)).stream_tiles == 64
    for bad in (0, 3, 512, True, 2.0):
        with pytest.raises(ValueError, match=r"stream_tiles: expected a power of two in \[1, 256\]"):
            decode.LaunchConfig(**dict(CUDA_FLUSH, stream_tiles=bad))
    with pytest.raises(ValueError, match="stream_tiles: > 1 needs flush_launch=True and rows_fastest=False"):
        decode.LaunchConfig(kernel="staged", stream_tiles=4)
    with pytest.raises(ValueError, match="stream_tiles: > 1 needs flush_launch=True and rows_fastest=False"):
        decode.LaunchConfig(**dict(CUDA_FLUSH, stream_tiles=4, rows_fastest=True))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path; the GPU tests run the kernel")
def test_cuda_flush_config_off_cuda_takes_the_triton_launch():
    # Off CUDA the step keeps the Triton flush launch (the interpreter), exactly as without flush_impl.
    run = kernel_replay(decode.LaunchConfig(**dict(CUDA_FLUSH, fold="tf32x3")))
    check_replay((2, 32, 16, 2), torch.float32, 3, 4, 10, "cpu", run=run, stagger=True)




NEEDS_NVRTC = pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC library (nvidia-cuda-nvrtc wheel)")


@NEEDS_NVRTC
@pytest.mark.parametrize("sm", [90, 100, 103])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_kernel_compiles_for_hopper_and_blackwell(sm, dtype):
    for heads, groups, head_dim, d_state in [(128, 8, 64, 128), (96, 8, 80, 128), (8, 2, 64, 64)]:
        defs = fc.defines(heads, groups, head_dim, d_state, 16, dtype, dtype, dtype, torch.float32, True, True,
                          torch.int32, (d_state, head_dim, d_state))
        cubin = _nvrtc.compile_cubin(fc.source(), "mamba2_flush_rows", sm, tuple(sorted(
            (k, str(v)) for k, v in defs.items())))
        assert cubin[:4] == b"\x7fELF" and b"mamba2_flush_rows" in cubin


def test_nvrtc_library_names(monkeypatch):
    # $TRTLLM_REPLAYSSM_NVRTC first, then torch's CUDA major, the other majors, the pip wheels'
    # lib folders, the unversioned name.
    monkeypatch.setenv("TRTLLM_REPLAYSSM_NVRTC", "/opt/cuda/lib64/libnvrtc.so.12")
    names = _nvrtc._nvrtc_names(13)
    assert names[0] == "/opt/cuda/lib64/libnvrtc.so.12"
    assert names.index("libnvrtc.so.13") < names.index("libnvrtc.so.12") and names[-1] == "libnvrtc.so"
    monkeypatch.delenv("TRTLLM_REPLAYSSM_NVRTC")
    assert _nvrtc._nvrtc_names(None)[0] == "libnvrtc.so.13"


def test_compile_reports_the_compiler_log():
    if _nvrtc.find_nvrtc() is None:
        with pytest.raises(_nvrtc.NvrtcError, match="no libnvrtc"):
            _nvrtc.compile_cubin("int x;", "x.cu", 90)
        return
    with pytest.raises(_nvrtc.NvrtcError, match="undefined|identifier"):
        _nvrtc.compile_cubin('extern "C" __global__ void k() { undefined_name(); }', "bad.cu", 90)


@NEEDS_NVRTC
@pytest.mark.skipif(not HAVE_PTXAS, reason="Triton's ptxas is not installed")
@pytest.mark.parametrize("sm", [90, 100, 103])
def test_defaults_assemble_without_spills(sm, tmp_path):
    # What the step compiles at the defaults for Nemotron-H and Nemotron-3-Nano, bf16: within the
    # registers of flush_cuda_blocks blocks per SM and no spill (the PTX's version lowered to what
    # Triton's ptxas reads: the kernel uses no newer instruction).
    cfg = decode.LaunchConfig(**CUDA_FLUSH)
    for heads, groups, head_dim in [(128, 8, 64), (96, 8, 80)]:
        defs = fc.defines(heads, groups, head_dim, 128, 16, torch.bfloat16, torch.bfloat16, torch.bfloat16,
                          torch.float32, True, True, torch.int32, (128, head_dim, 128), cfg.flush_cuda_blocks,
                          cfg.flush_cuda_rows, 16 if heads == 128 else 12)
        ptx = _nvrtc.compile_ptx(fc.source(), "flush_cuda.cu", sm, tuple((k, str(v)) for k, v in defs.items()))
        regs, spills, log = assemble(ptx, sm, tmp_path / f"flush_{sm}_{head_dim}.ptx")
        assert regs * fc.THREADS * cfg.flush_cuda_blocks <= 65536 and spills == 0, (sm, head_dim, log)


@NEEDS_NVRTC
@pytest.mark.skipif(not HAVE_PTXAS, reason="Triton's ptxas is not installed")
@pytest.mark.parametrize("sm", [90, 100, 103])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("order,taper,ahead,consumers", [(order, 0, 0, 16) for order in WS_ORDERS]
                         + [("counter", 2, 0, 16), ("auto", 2, 0, 16), ("stride", 0, 1, 16), ("stride", 0, 2, 16),
                            ("auto", 2, 1, 16), ("auto", 2, 2, 16), ("auto", 2, 0, 8), ("auto", 2, 0, 4)])
def test_ws_kernel_assembles_without_spills(sm, dtype, order, taper, ahead, consumers, tmp_path):
    # One block of (consumers + 1) warps per SM (544 threads by default: within 120 registers a
    # thread), no spill, at the dims it serves. (The last case without z and D: HAS_Z / HAS_D 0.)
    # With L2_AHEAD the producer asks the L2 for the next item's tile and ring x by bulk
    # prefetches, and only then. With fewer consumer warps each holds more rows' accumulators.
    for heads, groups, head_dim, gated in [(128, 8, 64, True), (96, 8, 80, True), (8, 2, 128, True),
                                           (128, 8, 64, False)]:
        stages = fc.ws_stages(256, heads, head_dim, 128, 16, dtype.itemsize, dtype.itemsize, dtype.itemsize, gated,
                              232448)
        defs = fc.ws_defines(heads, groups, head_dim, 128, 16, dtype, dtype, dtype, torch.float32 if gated else None,
                             gated, gated, torch.int32, stages, order, 4, taper, ahead, consumers)
        ptx = _nvrtc.compile_ptx(fc.source(fc.WS_FILE), "flush_ws.cu", sm, tuple((k, str(v)) for k, v in defs.items()))
        assert "cp.async.bulk.shared::cluster.global" in ptx and "mbarrier.try_wait" in ptx
        assert ("cp.async.bulk.prefetch.L2.global" in ptx) == bool(ahead), order
        # The counter order takes items by atomics on the counter; the stride order touches none.
        assert ("atom.global.add.u32" in ptx) == (order != "stride"), order
        regs, spills, log = assemble(ptx, sm, tmp_path / f"flush_ws_{sm}_{head_dim}_{gated}.ptx")
        assert regs * defs["THREADS"] <= 65536 and spills == 0, (sm, head_dim, log)


# -- GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("params", [{}, dict(flush_cuda_rows=8, flush_cuda_blocks=3, flush_heads=2),
                                    dict(flush_impl="cuda_ws"), dict(flush_impl="cuda_ws", flush_ws_stages=2),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="counter"),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, compact_coef=True),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="auto"),
                                    dict(flush_impl="cuda_ws", stream_tiles=8),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, compact_coef=True, stream_tiles=64),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="auto",
                                         ring_dt_sector=True),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="auto",
                                         flush_ws_taper=2),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="auto",
                                         flush_ws_taper=2, flush_ws_chunk=2, flush_ws_max_stages=3),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="auto",
                                         flush_ws_l2_ahead=1),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="auto",
                                         flush_ws_taper=2, flush_ws_chunk=2, flush_ws_l2_ahead=2),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="auto",
                                         flush_ws_taper=2, flush_ws_chunk=2, flush_ws_consumers=8),
                                    dict(flush_impl="cuda_ws", ring_x_in_ring=True, flush_ws_order="auto",
                                         flush_ws_consumers=4)],
                         ids=["default", "rows8-heads2", "ws", "ws2", "ws-ring-x", "ws-counter", "ws-compact",
                              "ws-auto", "ws-walk8", "ws-compact-walk64", "ws-auto-dt-sector",
                              "ws-auto-taper2", "ws-auto-taper2-chunk2", "ws-auto-l2_ahead1",
                              "ws-auto-taper2-chunk2-l2_ahead2", "ws-auto-cw8", "ws-auto-cw4"])
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("dims", [(8, 64, 128, 2), (8, 80, 128, 8), (4, 128, 64, 1), (6, 256, 128, 3)])
def test_cuda_flush_steps_gpu(dims, dtype, batch, params):
    run = kernel_replay(decode.LaunchConfig(**dict(CUDA_FLUSH, **params)))
    check_replay(dims, dtype, batch, window=8, steps=26, device="cuda", run=run, stagger=True)
    check_replay(dims, dtype, batch, window=4, steps=13, device="cuda", run=run, seed=1)


@pytest.mark.gpu
@pytest.mark.parametrize("impl,order,options", [
    ("cuda", "stride", {}), ("cuda_ws", "stride", {}), ("cuda_ws", "stride", dict(ring_x_in_ring=True)),
    ("cuda_ws", "counter", dict(ring_x_in_ring=True)), ("cuda_ws", "stride", dict(ring_x_in_ring=True, compact_coef=True)),
    ("cuda_ws", "auto", dict(ring_x_in_ring=True, compact_coef=True, stream_tiles=32)),
    ("cuda_ws", "auto", dict(ring_x_in_ring=True, ring_dt_sector=True)),
    ("cuda_ws", "auto", dict(ring_x_in_ring=True, flush_ws_taper=2)),
    ("cuda_ws", "auto", dict(ring_x_in_ring=True, flush_ws_taper=2, flush_ws_chunk=2, flush_ws_max_stages=3)),
    ("cuda_ws", "auto", dict(ring_x_in_ring=True, flush_ws_l2_ahead=1)),
    ("cuda_ws", "auto", dict(ring_x_in_ring=True, flush_ws_l2_ahead=2)),
    ("cuda_ws", "auto", dict(ring_x_in_ring=True, flush_ws_taper=2, flush_ws_chunk=2, flush_ws_consumers=8))],
    ids=["cuda", "ws", "ws-ring-x", "ws-counter", "ws-compact", "ws-auto-compact-walk32", "ws-auto-dt-sector",
         "ws-auto-taper2", "ws-auto-taper2-chunk2", "ws-auto-l2_ahead1", "ws-auto-l2_ahead2", "ws-auto-cw8"])
def test_cuda_flush_nemotron_dims_four_windows_gpu(impl, order, options):
    # The accuracy target: the fp32 checkpoint within 1e-5 of float64 over 4 windows at L=16.
    run = kernel_replay(decode.LaunchConfig(**dict(CUDA_FLUSH, flush_persistent=4, flush_list_items="heads",
                                                    flush_heads=16, flush_impl=impl, flush_ws_order=order, **options)))
    check_replay((128, 64, 128, 8), torch.bfloat16, 3, 16, 66, "cuda", run=run, ckpt_tol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["triton", "cuda", "cuda_ws"])
def test_flush_ignores_unwritten_ring_entries_gpu(impl):
    # Window 8 of a 16-entry ring, NaN in every entry until written: entries past c never reach a sum.
    run = kernel_replay(decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl=impl)))
    check_replay((8, 64, 128, 2), torch.bfloat16, 3, 8, 26, "cuda", run=run, poison_ring=True)


@pytest.mark.gpu
def test_cuda_flush_falls_back_where_unsupported_gpu():
    # d_state 80: the Triton flush launch serves the step.
    run = kernel_replay(decode.LaunchConfig(**CUDA_FLUSH))
    check_replay((6, 80, 80, 3), torch.bfloat16, 3, 4, 13, "cuda", run=run)


@pytest.mark.gpu
@pytest.mark.parametrize("gate,with_D", [(False, True), (False, False)], ids=["no-z", "no-z-no-D"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_default_flush_without_gate_or_D_gpu(dtype, gate, with_D):
    # The default step from batch 128 (the warp-specialised flush, HAS_Z / HAS_D 0: no z staged, no
    # D loaded) as engines that gate in a norm after the layer call it; staggered phases, 3 windows.
    cfg = decode.launch_config("replay", 64, 128, 256)
    assert cfg.flush_impl == "cuda_ws"
    check_replay((8, 64, 128, 2), dtype, 256, 4, 13, "cuda", run=kernel_replay(cfg), stagger=True, gate=gate,
                 with_D=with_D)


@pytest.mark.gpu
def test_flush_without_nvrtc_takes_the_triton_launch_gpu(monkeypatch):
    # The default from batch 128 is the NVRTC-compiled warp-specialised flush; a machine where no
    # NVRTC loads must still step (the Triton launch), not fail at the first flush.
    ck = torch.zeros(4, 2, 64, 128, device="cuda")
    assert fc.unsupported(ck, 4) is None
    monkeypatch.setattr(fc, "have_nvrtc", lambda: False)
    assert "NVRTC" in fc.unsupported(ck, 4)
    from trtllm_replayssm.ops.mamba2 import decode_staged

    def compiled_launch(*args, **kwargs):
        raise AssertionError("a CUDA flush launch was taken without NVRTC")

    monkeypatch.setattr(decode_staged, "flush_rows_ws", compiled_launch)
    monkeypatch.setattr(decode_staged, "flush_rows_cuda", compiled_launch)
    cfg = decode.launch_config("replay", 64, 128, 256)
    assert cfg.flush_impl == "cuda_ws"
    check_replay((8, 64, 128, 2), torch.bfloat16, 3, 4, 13, "cuda", run=kernel_replay(cfg))


@pytest.mark.gpu
@pytest.mark.parametrize("impl,order,walk", [("cuda", "stride", 1), ("cuda_ws", "stride", 1), ("cuda_ws", "counter", 1),
                                             ("cuda_ws", "auto", 1), ("cuda_ws", "stride", 16)])
def test_cuda_flush_cuda_graph_equals_eager_gpu(impl, order, walk):
    dims = (16, 64, 128, 2)
    gen = torch.Generator().manual_seed(8)
    base, _ = allocate(6, *dims, 4, torch.bfloat16, "cuda", gen)
    eager, graph = graph_vs_eager(kernel_replay(decode.LaunchConfig(**dict(CUDA_FLUSH, flush_impl=impl,
                                                                                 flush_ws_order=order,
                                                                                 stream_tiles=walk))),
                                   base.clone, 5, *dims, torch.bfloat16)
    for name, t in eager.tensors().items():
        assert torch.equal(t, getattr(graph, name)), name


def _ws_flush_operands(batch, heads, groups, flushing, seed):
    """Random operands of one warp-specialised flush launch (head_dim 64, d_state 128, a 16-entry
    ring, bf16) in which ``flushing`` random rows flush; returns ``(checkpoint, args, strides,
    folded)``: ``args`` as ``flush_rows_ws`` takes them after the checkpoint, ``folded`` the flush
    rows' mask."""
    head_dim, d_state, cap = 64, 128, 16
    gen = torch.Generator(device="cuda").manual_seed(seed)
    act = dict(device="cuda", dtype=torch.bfloat16)
    ck = torch.randn(batch, heads, head_dim, d_state, device="cuda", generator=gen)
    ring_x = torch.randn(batch, heads, cap, head_dim, generator=gen, **act)
    ring_B = torch.randn(batch, groups, cap, d_state, generator=gen, **act)
    lines = batch * heads * (cap + 2)
    scratch = torch.zeros(lines + 8, device="cuda")  # 12 readable bytes past the lines
    coef = scratch[:lines].view(batch, heads, cap + 2)
    coef.copy_(0.1 * torch.rand(batch, heads, cap + 2, device="cuda", generator=gen))
    info = torch.zeros(batch, 2, dtype=torch.int32, device="cuda")
    info[:, 0] = torch.randint(0, cap, (batch,), device="cuda", generator=gen, dtype=torch.int32)
    rows = torch.randperm(batch, device="cuda", generator=gen)[:flushing]
    info[rows, 1] = 1
    x, z = (torch.randn(batch, heads, head_dim, generator=gen, **act) for _ in range(2))
    B, C = (torch.randn(batch, groups, d_state, generator=gen, **act) for _ in range(2))
    D = torch.randn(heads, device="cuda", generator=gen)
    assert fc.ws_unsupported(ck, ring_x, ring_B, x, B, z, batch) is None
    strides = (ck.stride(0), ck.stride(1), ring_x.stride(0), ring_x.stride(1), ring_B.stride(0), ring_B.stride(1),
               x.stride(0), x.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1), z.stride(0), z.stride(1),
               x.stride(0), x.stride(1))
    folded = torch.zeros(batch, dtype=torch.bool, device="cuda")
    folded[rows] = True
    return ck, (ring_x, ring_B, coef, info, x, B, C, D, z, None), strides, folded


def _ws_flush(ck, args, strides, **kw):
    """``(checkpoint, y)`` after one ``flush_rows_ws`` launch on copies of ``ck``."""
    out, y = ck.clone(), torch.zeros_like(args[4])
    fc.flush_rows_ws(out, *args, y, ck.shape[0], strides, args[0].shape[2], **kw)
    torch.cuda.synchronize()
    return out, y


@pytest.mark.gpu
@pytest.mark.parametrize("flushing,counted", [(8, True), (4, True), (3, False), (1, False)])
def test_ws_auto_order_takes_the_counter_when_half_the_rows_flush_gpu(flushing, counted):
    # Batch 8: "auto" takes its items from the counter when at least half of the rows flush (the
    # counter then counts the blocks' takes), else by the grid stride (it stays 0); either way the
    # folded tiles and y are the stride order's, bit for bit (each item is folded alone).
    ck, args, strides, folded = _ws_flush_operands(8, 8, 2, flushing, flushing)
    ck_stride, y_stride = _ws_flush(ck, args, strides)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    ck_auto, y_auto = _ws_flush(ck, args, strides, counter=counter, order="auto")
    assert not torch.equal(ck_stride[folded], ck[folded]) and torch.equal(ck_stride[~folded], ck[~folded])
    assert torch.equal(ck_auto, ck_stride) and torch.equal(y_auto, y_stride)
    assert (counter.item() > 0) == counted, counter.item()


@pytest.mark.gpu
@pytest.mark.parametrize("chunk,taper", [(4, 1), (4, 2), (8, 3), (1, 2)])
def test_ws_taper_folds_every_item_once_gpu(chunk, taper):
    # 36 of 40 rows flush, 64 heads: 2304 items. On a 132-SM GPU blocks take chunks until 2304 -
    # taper x chunk x 132 items are gone (1776 and 1248 for chunk 4), then one item at a time; with
    # chunks of 8 and taper 3 they take single items from the start. Each item is folded once (the
    # stride order's tiles and y, bit for bit), and the counter counts items: it ends past them.
    ck, args, strides, folded = _ws_flush_operands(40, 64, 8, 36, 11)
    ck_stride, y_stride = _ws_flush(ck, args, strides)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    ck_taper, y_taper = _ws_flush(ck, args, strides, counter=counter, order="counter", chunk=chunk, taper=taper)
    assert not torch.equal(ck_stride[folded], ck[folded]) and torch.equal(ck_stride[~folded], ck[~folded])
    assert torch.equal(ck_taper, ck_stride) and torch.equal(y_taper, y_stride)
    assert counter.item() >= 36 * 64, counter.item()


@pytest.mark.gpu
@pytest.mark.parametrize("order,chunk,taper", [("stride", 4, 0), ("counter", 4, 0), ("counter", 2, 2), ("counter", 1, 0)])
@pytest.mark.parametrize("ahead", [1, 2])
def test_ws_l2_ahead_changes_no_bit_gpu(order, chunk, taper, ahead):
    # The producer's L2 prefetches move no data into the stages: the folded tiles and y are the
    # same bits with and without them (36 of 40 rows flush, 64 heads: every block walks many items,
    # across takes of 1, 2 and 4 and the taper's single items).
    ck, args, strides, folded = _ws_flush_operands(40, 64, 8, 36, 12)

    def run(l2_ahead):
        if order == "stride":
            return _ws_flush(ck, args, strides, l2_ahead=l2_ahead)
        counter = torch.zeros(1, dtype=torch.int32, device="cuda")
        return _ws_flush(ck, args, strides, counter=counter, order=order, chunk=chunk, taper=taper,
                         l2_ahead=l2_ahead)

    plain, asked = run(0), run(ahead)
    assert not torch.equal(plain[0][folded], ck[folded])
    assert torch.equal(asked[0], plain[0]) and torch.equal(asked[1], plain[1])


@pytest.mark.gpu
def test_ws_flush_serves_the_model_dims_gpu():
    # The GPU tests above run flush_ws.cu only where it serves: Nemotron-H's, Nemotron-3-Nano's and
    # the 128-row heads' steps must take it (not fall back to the per-warp CUDA launch).
    for head_dim, ring_dtype in [(64, torch.bfloat16), (80, torch.bfloat16), (128, torch.float32), (64, torch.float32)]:
        ck = torch.zeros(64, 8, head_dim, 128, device="cuda")
        ring_B = torch.zeros(64, 2, 16, 128, device="cuda", dtype=ring_dtype)
        ring_x = torch.zeros(64, 8, 16, head_dim, device="cuda", dtype=ring_dtype)
        assert _ws_reason(ck, ring_B, ring_x, 64) is None, head_dim
    assert "d_state 64" in _ws_reason(torch.zeros(4, 2, 128, 64, device="cuda"),
                                      torch.zeros(4, 1, 16, 64, device="cuda"))
