"""Mamba-2 decode kernels (ops/mamba2/decode.py) against the float64 reference.

CPU: the Triton kernels run in the interpreter at tiny dims with fp32 activations.
GPU (``gpu`` marker): a grid of dims, activation dtypes, batches, padded rows and every flush
phase over 3+ windows; CUDA-graph capture and torch.compile.
"""

import dataclasses

import pytest
import torch

from mamba2_kernel_harness import (allocate, check_replay, check_standard, graph_vs_eager, kernel_replay, make_inputs,
                                   make_params, switching_replay)
from trtllm_replayssm.ops.mamba2 import decode, mamba2_replay_step, mamba2_standard_step
from trtllm_replayssm.ops.mamba2.decode_staged import flush_heads_per_program

HAS_CUDA = torch.cuda.is_available()


# -- CPU: the kernels in the Triton interpreter -------------------------------------------------------


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize(
    "fold_dot,prefetch,cursor_kernel,rows_fastest",
    [(True, False, False, False), (False, True, False, True), (False, False, True, False), (True, True, True, True)],
)
@pytest.mark.parametrize("dims", [(4, 16, 16, 2), (3, 20, 24, 1)])
def test_replay_kernel_interpreter(dims, fold_dot, prefetch, cursor_kernel, rows_fastest):
    # window 4, 3 windows + the staggered first one; (3, 20, 24) exercises masked tiles
    cfg = decode.LaunchConfig(16, 4, fold_dot, prefetch, cursor_kernel=cursor_kernel, rows_fastest=rows_fastest)
    check_replay(dims, torch.float32, 3, 4, 14, "cpu", run=kernel_replay(cfg))


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("batch", [1, 17])
def test_replay_kernel_interpreter_default_configs(batch):
    # batch 1 (write-through) and 17 (staged, one head per flush program) take different default
    # launch configurations (decode.launch_config)
    through = decode.launch_config("replay", 16, 16, batch).kernel == "write_through"
    check_replay((2, 16, 16, 1), torch.float32, batch, 4, 13, "cpu", run=kernel_replay(None),
                 write_through_from=0 if through else None)


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("gate,with_D", [(False, True), (False, False), (True, False)])
def test_replay_staged_flush_launch_interpreter_without_gate_or_D(gate, with_D):
    # Engines that gate in a norm after the layer pass no z (and some no D): the staged step with
    # its flush launch, flush and non-flush rows, against the reference without them.
    cfg = decode.LaunchConfig(kernel="staged", block_p=16, num_warps=2, flush_launch=True, flush_heads=2,
                              flush_block_p=16)
    check_replay((4, 32, 16, 2), torch.float32, 3, 4, 13, "cpu", run=kernel_replay(cfg), stagger=True, gate=gate,
                 with_D=with_D)


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
def test_replay_kernel_interpreter_fp16_batch1():
    check_replay((2, 16, 16, 1), torch.float16, 1, 4, 9, "cpu", run=kernel_replay(decode.LaunchConfig(16, 4, True)))


V4_INTERPRETER = [
    # (dims, LaunchConfig keywords): head_dim 80 = 5 tiles of 16 (split 1, 2 -> 3 + 2, 3 -> 2 + 2 + 1),
    # d_state 24 masks columns; every fold, both pipelines, both cursor mechanisms, both grid orders.
    ((3, 80, 16, 1), dict(block_p=16, fold="fma", pipeline="regs", ahead=1, p_split=1)),
    ((2, 80, 24, 2), dict(block_p=16, fold="ieee", pipeline="regs", ahead=2, p_split=2, cursor_kernel=True)),
    ((2, 80, 16, 1), dict(block_p=16, fold="tf32x3", pipeline="range", num_stages=3, p_split=3, rows_fastest=True)),
    ((4, 64, 24, 2), dict(block_p=32, fold="loop", pipeline="range", p_split=1, cursor_kernel=True, rows_fastest=True)),
    ((4, 64, 16, 2), dict(block_p=16, fold="fma", pipeline="regs", ahead=2, p_split=4)),
    # non-flush and flush rows in two launches
    ((2, 80, 16, 1), dict(block_p=16, fold="loop", pipeline="regs", ahead=2, p_split=2, cursor_kernel=True,
                          split_flush=True)),
    ((3, 48, 24, 3), dict(block_p=16, fold="ieee", pipeline="range", cursor_kernel=True, rows_fastest=True,
                          split_flush=True)),
    # one tile per program walked in column chunks: 5 tiles of 16 rows x 2 chunks of 32 columns;
    # a whole 64-row head with d_state 24 in one masked 32-column chunk
    ((3, 80, 64, 1), dict(block_p=16, fold="tf32x3", pipeline="cols", num_stages=2)),
    ((2, 64, 24, 2), dict(block_p=64, fold="ieee", pipeline="cols", num_stages=3, cursor_kernel=True,
                          rows_fastest=True)),
]


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("dims,params", V4_INTERPRETER, ids=lambda v: str(v).replace(" ", ""))
def test_replay_v4_kernel_interpreter(dims, params):
    # window 4 over 13 steps with staggered first flushes: every ring position flushes in some
    # launch next to non-flush rows; row 1 of 3 is padded; 3+ windows per slot.
    cfg = decode.LaunchConfig(num_warps=4, kernel="v4", **params)
    check_replay(dims, torch.float32, 3, 4, 13, "cpu", run=kernel_replay(cfg), stagger=True)


STAGED_INTERPRETER = [
    # (dims, LaunchConfig keywords): every fold; head_dim 80 in 16-row tiles, 20 in a masked
    # 32-row tile; d_state 24 masks columns; 3 heads per group (a masked head lane in the ring
    # launch); both grid orders.
    ((3, 80, 16, 1), dict(block_p=16, fold="fma")),
    ((6, 20, 24, 2), dict(block_p=32, fold="loop", rows_fastest=True)),
    ((2, 80, 24, 2), dict(block_p=16, fold="ieee", ring_warps=2)),
    ((4, 32, 16, 2), dict(block_p=16, fold="tf32x3", rows_fastest=True)),
    ((4, 64, 16, 2), dict(block_p=8, fold="fma", num_warps=2)),
    ((3, 80, 24, 1), dict(block_p=16, fold="pipe", num_warps=2)),
    ((6, 20, 16, 2), dict(block_p=8, fold="loop", num_warps=2, rows_fastest=True, ring_prefetch=True)),
    # flush rows in their own launch: 2 heads of a group per program, masked last tile, every fold
    ((4, 80, 24, 1), dict(block_p=8, fold="loop", num_warps=2, flush_launch=True, flush_heads=2, flush_block_p=32)),
    ((6, 32, 16, 2), dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_heads=2, flush_block_p=16)),
    ((2, 48, 16, 1), dict(block_p=16, fold="fma", num_warps=2, flush_launch=True, flush_heads=4)),
    # 6 heads per group, flush_heads 4: 3 heads per program (flush_heads_per_program)
    ((6, 32, 16, 1), dict(block_p=16, fold="loop", num_warps=2, flush_launch=True, flush_heads=4, flush_block_p=16)),
    ((4, 40, 16, 2), dict(block_p=8, fold="tf32x3", num_warps=2, flush_launch=True, flush_heads=2, flush_block_p=16,
                          flush_stages=3)),
    # the flush launch as a list of flush tiles walked by a fixed wave (2 programs per "SM" on CPU)
    ((4, 80, 24, 1), dict(block_p=8, fold="loop", num_warps=2, flush_launch=True, flush_persistent=2, flush_block_p=32)),
    ((6, 32, 16, 2), dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_persistent=1,
                          flush_block_p=16)),
    # ... or of (row, head chunk) items, each what a per-row flush program does (3 heads per item)
    ((6, 32, 16, 2), dict(block_p=16, fold="tf32x2", num_warps=2, flush_launch=True, flush_persistent=1,
                          flush_list_items="heads", flush_heads=3, flush_block_p=16, flush_stream=True)),
    # flush_stream (a side stream on CUDA; on the CPU the launches run in order); the L2 prefetch
    # is no prefetch in the interpreter (prefetch_mode), the launch otherwise the same
    ((4, 32, 16, 2), dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_stream=True,
                          flush_max_registers=128, flush_l2_prefetch="lines", flush_heads=2)),
    # the default's shape for d_state 256 (4-row tiles, capped registers)
    ((2, 16, 32, 1), dict(block_p=4, fold="loop", num_warps=2, max_registers=56)),
    # the token's ring x entry stored by the ring launch: head_dim 80 in a masked 128-wide block, 3
    # heads per group (a masked head lane)
    ((6, 80, 16, 2), dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_heads=3,
                          flush_block_p=16, ring_x_in_ring=True)),
    # a non-flush row's ring terms as group scores and head terms (compact_coef), the weights
    # formed in the stream launch; with the flush list and with the per-row flush launch
    ((6, 80, 16, 2), dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_heads=3,
                          flush_block_p=16, ring_x_in_ring=True, compact_coef=True)),
    ((4, 32, 24, 1), dict(block_p=8, fold="loop", num_warps=2, flush_launch=True, flush_persistent=1,
                          flush_list_items="heads", flush_heads=2, flush_block_p=16, compact_coef=True)),
    # stream programs that walk 4 / 8 tiles each and store their y rows at the end (stream_tiles):
    # 90 tiles in 23 programs (a part-filled last one); the ring entry stored by the stream tiles;
    # compact terms with a masked 32-row tile of head_dim 20
    ((6, 80, 16, 2), dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_heads=3,
                          flush_block_p=16, stream_tiles=4)),
    ((6, 20, 16, 2), dict(block_p=32, fold="loop", num_warps=2, flush_launch=True, flush_persistent=1,
                          flush_list_items="heads", flush_heads=3, flush_block_p=16, ring_x_in_ring=True,
                          compact_coef=True, stream_tiles=8)),
]


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("dims,params", STAGED_INTERPRETER, ids=lambda v: str(v).replace(" ", ""))
def test_replay_staged_kernel_interpreter(dims, params):
    # As the v4 test: window 4 over 13 steps, staggered first flushes, a padded row, 3+ windows.
    cfg = decode.LaunchConfig(**{"num_warps": 4, "kernel": "staged", **params})
    check_replay(dims, torch.float32, 3, 4, 13, "cpu", run=kernel_replay(cfg), stagger=True)


def test_flush_ws_taper_needs_the_counter():
    ws = dict(kernel="staged", flush_launch=True, flush_impl="cuda_ws")
    assert decode.LaunchConfig(**ws, flush_ws_order="auto", flush_ws_taper=2).flush_ws_taper == 2
    with pytest.raises(ValueError, match="flush_ws_taper: > 0 needs flush_ws_order 'counter' or 'auto'"):
        decode.LaunchConfig(**ws, flush_ws_taper=2)
    for bad in (-1, 17, True, 2.0):
        with pytest.raises(ValueError, match=r"flush_ws_taper: expected an int in \[0, 16\]"):
            decode.LaunchConfig(**ws, flush_ws_order="auto", flush_ws_taper=bad)


def test_flush_ws_l2_ahead_needs_the_ws_flush():
    ws = dict(kernel="staged", flush_launch=True, flush_impl="cuda_ws")
    assert decode.LaunchConfig(**ws, flush_ws_l2_ahead=2).flush_ws_l2_ahead == 2
    assert decode.launch_config("replay", 64, 128, 256).flush_ws_l2_ahead == 0  # no GPU named: not asked
    for bad in (True, 3, -1, 1.0):
        with pytest.raises(ValueError, match=r"flush_ws_l2_ahead: expected 0, 1 or 2, got"):
            decode.LaunchConfig(**ws, flush_ws_l2_ahead=bad)
    with pytest.raises(ValueError, match="flush_ws_l2_ahead: needs flush_impl='cuda_ws', got 'cuda'"):
        decode.LaunchConfig(**dict(ws, flush_impl="cuda"), flush_ws_l2_ahead=1)


H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.mark.parametrize("gpu,head_dim", [(None, 64), (None, 80), (H200, 64), (H200, 128), (H100, 128),
                                          ("NVIDIA H100 PCIe", 64), ("NVIDIA B300", 80)])
def test_flush_l2_prefetch_left_out_where_not_timed_faster(gpu, head_dim):
    # the H200's default at Nemotron-H's head_dim (where the prefetch lost), and that of every GPU
    # and head_dim not timed
    for batch in (128, 192, 256, 512):
        assert (decode.launch_config("replay", head_dim, 128, batch, gpu=gpu)
                == decode.launch_config("replay", head_dim, 128, batch))
    assert decode.launch_config("replay", head_dim, 128, 256, gpu=gpu).flush_ws_l2_ahead == 0


@pytest.mark.parametrize("gpu,head_dims", [(H100, (64, 80)), (H200, (80,))])
def test_flush_l2_prefetch_where_timed_faster(gpu, head_dims):
    # the fiftieth run's form wherever the warp-specialised flush serves: the prefetch, takes of 2
    # with taper 2 at every batch (512 included), the same stage caps; nothing else differs
    for batch in (1, 64, 127, 128, 191, 192, 256, 511, 512, 1024):
        for dims in [(hd, 128) for hd in head_dims] + [(64, 256)]:
            plain, asked = (decode.launch_config("replay", *dims, batch, gpu=g) for g in (None, gpu))
            if plain.flush_impl != "cuda_ws":
                assert asked == plain
                continue
            assert (asked.flush_ws_l2_ahead, asked.flush_ws_taper, asked.flush_ws_chunk) == (1, 2, 2)
            assert asked.flush_ws_max_stages == plain.flush_ws_max_stages == (3 if batch < 192 else 4)
            assert dataclasses.replace(asked, flush_ws_l2_ahead=0, flush_ws_taper=plain.flush_ws_taper,
                                       flush_ws_chunk=plain.flush_ws_chunk) == plain
    assert decode.launch_config("standard", 80, 128, 256, gpu=gpu) == decode.launch_config("standard", 80, 128, 256)


def test_launch_config_refuses_a_gpu_that_is_not_a_name():
    with pytest.raises(TypeError, match=r"launch_config: gpu: expected a device name \(str\) or None, got device"):
        decode.launch_config("replay", 64, 128, 256, gpu=torch.device("cpu"))


def test_gpu_name_of_a_tensor_device():
    assert decode.gpu_name(torch.device("cpu")) is None
    assert decode.gpu_name("cpu") is None
    if torch.cuda.is_available():
        assert decode.gpu_name("cuda") == torch.cuda.get_device_name()
    else:
        assert decode.gpu_name("cuda") is None


@pytest.mark.parametrize("hpg,asked,want", [(16, 8, 8), (12, 8, 6), (12, 4, 4), (6, 4, 3), (2, 4, 2), (7, 4, 1),
                                               (1, 1, 1)])
def test_flush_heads_per_program(hpg, asked, want):
    # The largest divisor of the group's heads not above flush_heads (Nemotron-H 16, Nano 12).
    assert flush_heads_per_program(hpg, asked) == want


@pytest.mark.parametrize("hpg,asked", [(0, 4), (4, 0)])
def test_flush_heads_per_program_rejects(hpg, asked):
    with pytest.raises(ValueError, match="flush_heads"):
        flush_heads_per_program(hpg, asked)


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("params", [
    dict(kernel="staged", block_p=16, num_warps=2, flush_launch=True, flush_heads=2, flush_block_p=16),
    dict(kernel="staged", block_p=16, num_warps=2, flush_launch=True, flush_persistent=1, flush_block_p=16),
    dict(kernel="staged", block_p=16, num_warps=2),
    dict(kernel="v4", block_p=16, num_warps=4, p_split=2),
    dict(kernel="v4", block_p=32, num_warps=1, pipeline="cols"),
], ids=["flush-launch", "flush-list", "in-stream", "v4", "v4-cols"])
def test_replay_tf32x2_fold_interpreter_fp16(params):
    # fold="tf32x2" with a 16-bit ring B (fp16: the interpreter's bf16 is unreliable): the fold's
    # algebra in each kernel that has it (the interpreter multiplies in full fp32).
    check_replay((4, 32, 16, 2), torch.float16, 3, 4, 13, "cpu", run=kernel_replay(decode.LaunchConfig(
        fold="tf32x2", **params)), stagger=True)


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
def test_replay_v4_kernel_interpreter_batch1_in_phase():
    cfg = decode.LaunchConfig(16, 4, kernel="v4", fold="loop", p_split=2)
    check_replay((2, 32, 16, 1), torch.float32, 1, 4, 13, "cpu", run=kernel_replay(cfg))


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("after", [0, 6], ids=["from-reset", "after-6-steps"])
@pytest.mark.parametrize("dims", [(2, 32, 16, 1), (3, 20, 24, 1)])
@pytest.mark.parametrize("batch", [1, 3])
def test_replay_write_through_interpreter(batch, dims, after):
    """``kernel="write_through"``: after ``after`` ordinary steps (staggered phases: slots
    arrive with ring entries, or from reset with flush_at != window), every step folds its
    token into the checkpoint; the first folds the ring too and moves the cursors, the later
    ones find (0, window) and leave them. Outputs, checkpoints (1e-5) and cursors against the
    float64 reference; (3, 20, 24) masks rows and columns of the tiles."""
    plain = decode.LaunchConfig(16, 4, kernel="v4", fold="loop", p_split=2)
    through = decode.LaunchConfig(8, 2, kernel="write_through")
    state, _ = check_replay(dims, torch.float32, batch, 4, after + 4, "cpu",
                            run=switching_replay(plain, through, after), stagger=True, write_through_from=after)
    assert torch.all(state.committed == 0)


def triton_next_pow2(n):
    return 1 << (n - 1).bit_length()


def test_launch_config_default_kernels_by_batch():
    configs = [decode.launch_config("replay", 64, 128, b) for b in (1, 11, 12, 63, 64, 127, 128, 255, 256, 512)]
    assert [c.kernel for c in configs] == ["write_through"] * 2 + ["staged"] * 8
    # one head per flush program below batch 64 (few flush rows per staggered step), four from
    # 64, eight from 128, whole groups (up to 16 heads) from 256
    assert [c.flush_heads for c in configs[2:]] == [1, 1, 4, 4, 8, 8, 16, 16]
    assert all(c.flush_stream for c in configs[2:])
    # the token's ring x entry stored by the ring launch from batch 128
    assert [c.ring_x_in_ring for c in configs] == [False] * 6 + [True] * 4
    # the warp-specialised flush from batch 128 at d_state 128, its order chosen step by step, at
    # most 3 stages below batch 192 and 4 from there (caps: fewer where fewer fit), never an exact
    # count; below batch 512 the counter's takes 2 items, its last items one at a time (taper 2),
    # from 512 takes of 4 untapered; the producer does not ask the L2 for its next item (that lost
    # on an H200)
    assert [(c.flush_impl, c.flush_ws_order, c.flush_ws_max_stages, c.flush_ws_taper, c.flush_ws_chunk,
             c.flush_ws_l2_ahead) for c in configs[2:]] == (
        [("triton", "stride", 0, 0, 4, 0)] * 4 + [("cuda_ws", "auto", 3, 2, 2, 0)] + [("cuda_ws", "auto", 4, 2, 2, 0)] * 2
        + [("cuda_ws", "auto", 4, 0, 4, 0)])
    assert all(c.flush_ws_stages == 0 for c in configs)
    assert [(c.flush_ws_max_stages, c.flush_ws_taper, c.flush_ws_chunk)
            for c in (decode.launch_config("replay", 64, 128, b) for b in (191, 192, 511, 512))] == [
        (3, 2, 2), (4, 2, 2), (4, 2, 2), (4, 0, 4)]
    assert (decode.launch_config("replay", 64, 256, 128).flush_ws_taper,
            decode.launch_config("replay", 64, 256, 128).flush_ws_l2_ahead) == (0, 0)
    assert decode.launch_config("replay", 80, 128, 128).flush_impl == "cuda_ws"
    assert decode.launch_config("replay", 64, 256, 512).flush_impl == "triton"
    # the flush launch's L2 prefetch of the next tile from batch 128
    assert [c.flush_l2_prefetch for c in configs[2:]] == ["none"] * 4 + ["lines"] * 4
    # from batch 128 the per-row flush programs as list items (4 programs per SM), where 32-row
    # tiles divide head_dim
    assert [(c.flush_persistent, c.flush_list_items) for c in configs[2:]] == [(0, "tiles")] * 4 + [(4, "heads")] * 4
    # the standard step: 4-row tiles for a lone row, 8-row tiles from batch 2 (4 where d_state > 128)
    assert [decode.launch_config("standard", 64, 128, b).block_p for b in (1, 2, 256)] == [4, 8, 8]
    assert [decode.launch_config("standard", 64, 256, b).block_p for b in (1, 2, 256)] == [4, 4, 4]
    assert decode.launch_config("replay", 80, 128, 256).flush_persistent == 0
    # 16-row flush tiles where 32 rows do not divide head_dim (80), from batch 128
    assert [(decode.launch_config("replay", hd, 128, b).flush_block_p, decode.launch_config("replay", hd, 128, b)
             .flush_warps) for hd, b in ((80, 64), (80, 128), (80, 512), (64, 256))] == [(32, 4), (16, 2), (16, 2),
                                                                                        (32, 4)]
    kernels = [decode.launch_config("replay", 64, 256, b).kernel for b in (1, 15, 16, 127, 128)]
    assert kernels == ["write_through", "write_through", "v4", "v4", "staged"]  # d_state 256
    # head_dim 80 (Nemotron-3-Nano) must tile exactly; d_state 256 halves the tile rows
    assert 80 % decode.launch_config("replay", 80, 128, 256).block_p == 0
    assert decode.launch_config("replay", 64, 256, 256).block_p == 4
    for head_dim, d_state in ((64, 128), (80, 128), (64, 256), (256, 64)):
        cfg = decode.launch_config("replay", head_dim, d_state, 256)
        assert head_dim % cfg.block_p == 0 and cfg.block_p * triton_next_pow2(d_state) <= 2048


def test_launch_config_rejects_unknown_options():
    for bad in (dict(kernel="v5"), dict(fold="tf32"), dict(pipeline="async"), dict(ahead=3), dict(p_split=0),
                dict(block_p=24), dict(kernel="v4", fold="ieee", block_p=8), dict(kernel="v4", split_flush=True),
                dict(kernel="v4", fold="pipe"), dict(flush_launch=True), dict(kernel="write_through", flush_launch=True),
                dict(kernel="staged", fold="ieee", flush_launch=True, flush_block_p=8),
                dict(kernel="staged", flush_launch=True, flush_persistent=-1),
                dict(kernel="staged", flush_stream=True), dict(kernel="staged", flush_launch=True, flush_heads=0),
                dict(kernel="staged", flush_launch=True, flush_max_registers=()),
                dict(kernel="staged", flush_launch=True, flush_max_registers=(112, 300)),
                dict(kernel="staged", flush_launch=True, flush_max_registers="96"),
                dict(kernel="staged", flush_launch=True, flush_l2_prefetch="always"),
                dict(kernel="staged", flush_launch=True, flush_l2_ahead=0),
                dict(kernel="staged", flush_launch=True, flush_list_items="rows", flush_persistent=4),
                dict(kernel="staged", flush_launch=True, flush_list_items="heads")):
        with pytest.raises(ValueError, match="LaunchConfig"):
            decode.LaunchConfig(**bad)


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("dims", [(4, 16, 16, 2), (3, 20, 24, 3)])
@pytest.mark.parametrize("batch", [1, 3])  # a lone row takes 4-row tiles, more rows 8
def test_standard_kernel_interpreter(dims, batch):
    def run(st, x, dt, A, B, C, D, z, dt_bias, softplus, lo, hi, idx, pad):
        return decode.standard_step(st, x, dt, A, B, C, D, z, dt_bias, softplus, lo, hi, idx, pad)

    check_standard(dims, torch.float32, batch, 3, "cpu", run=run)


# -- GPU -----------------------------------------------------------------------------------------------

GPU_DIMS = [(8, 64, 128, 2), (6, 80, 80, 3), (4, 128, 64, 1), (2, 256, 256, 2), (8, 80, 128, 8)]


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("dims", GPU_DIMS)
def test_replay_step_gpu(dims, dtype, batch):
    # below batch 16 the op writes through (decode.launch_config): the reference flushes every step
    through = decode.launch_config("replay", dims[1], dims[2], batch).kernel == "write_through"
    check_replay(dims, dtype, batch, window=8, steps=26, device="cuda", write_through_from=0 if through else None)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dims", [(4, 64, 128, 2), (6, 80, 80, 3), (4, 80, 128, 2), (4, 128, 128, 2), (4, 64, 256, 2),
                                  (2, 256, 64, 1)])
def test_replay_default_large_batch_gpu(dims, dtype):
    # batch >= 128 takes the staged kernel (with its flush launch where d_state <= 128); the
    # small-batch grid above does not reach it. At d_state 128 its flush is the warp-specialised
    # kernel with at most 3 stages: head_dim 128, and 80 with fp32 activations, fit only 2 on an H200.
    check_replay(dims, dtype, 130, window=8, steps=20, device="cuda", stagger=True)


@pytest.mark.gpu
@pytest.mark.parametrize("fold_dot,prefetch", [(True, False), (False, False), (False, True)])
def test_replay_nemotron_dims_four_windows_gpu(fold_dot, prefetch):
    # The accuracy target: the fp32 checkpoint after flushes within 1e-5 of float64, L=16.
    run = kernel_replay(decode.LaunchConfig(32, 4, fold_dot, prefetch))
    check_replay((128, 64, 128, 8), torch.bfloat16, 3, 16, 66, "cuda", run=run, ckpt_tol=1e-5)


V4_GPU_CONFIGS = [
    dict(block_p=32, fold="loop", pipeline="regs", ahead=1, p_split=1, num_warps=8),
    dict(block_p=16, fold="ieee", pipeline="regs", ahead=2, p_split=2, cursor_kernel=True, rows_fastest=True),
    dict(block_p=16, fold="tf32x3", pipeline="range", num_stages=3, p_split=4),
    dict(block_p=32, fold="loop", num_warps=8, cursor_kernel=True, rows_fastest=True, split_flush=True),
    dict(block_p=16, fold="bf16x3", pipeline="cols", num_stages=2, num_warps=1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("params", V4_GPU_CONFIGS, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dims", [(8, 64, 128, 2), (8, 80, 128, 8)])
def test_replay_v4_gpu(dims, dtype, batch, params):
    run = kernel_replay(decode.LaunchConfig(**{"num_warps": 4, "kernel": "v4", **params}))
    check_replay(dims, dtype, batch, window=8, steps=26, device="cuda", run=run, stagger=True)


@pytest.mark.gpu
@pytest.mark.parametrize("fold", ["fma", "loop", "ieee", "tf32x3", "tf32x2", "bf16x3"])
def test_replay_v4_nemotron_dims_four_windows_gpu(fold):
    # The accuracy target for every fold of the v4 kernel: fp32 checkpoint within 1e-5 of float64, L=16.
    run = kernel_replay(decode.LaunchConfig(32, 4, kernel="v4", fold=fold))
    check_replay((128, 64, 128, 8), torch.bfloat16, 3, 16, 66, "cuda", run=run, ckpt_tol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("fold", ["tf32x2", "bf16x3"])
@pytest.mark.parametrize("dims", [(128, 64, 128, 8), (96, 80, 128, 8)], ids=["nemotron-h", "nemotron3-nano"])
def test_replay_v4_cols_four_windows_gpu(dims, fold):
    # pipeline="cols" at model dims (a whole 64-row head per program; Nano's 80 rows in 16-row
    # tiles): checkpoint within 1e-5 of float64 over 4 windows at L=16, staggered phases.
    block_p = 64 if dims[1] % 64 == 0 else 16
    run = kernel_replay(decode.LaunchConfig(block_p, 1, kernel="v4", pipeline="cols", fold=fold, num_stages=2))
    check_replay(dims, torch.bfloat16, 3, 16, 66, "cuda", run=run, stagger=True, ckpt_tol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("after", [0, 20])
@pytest.mark.parametrize("batch", [1, 3, 15])
@pytest.mark.parametrize("dims", [(128, 64, 128, 8), (96, 80, 128, 8)], ids=["nemotron-h", "nemotron3-nano"])
def test_replay_write_through_gpu(dims, batch, after):
    """``kernel="write_through"`` (8-row tiles, 2 warps), bf16, window 16: from reset or after
    20 steps of the v4 kernel (slots then arrive with ring entries), 3+ windows of write-through
    steps against float64; checkpoint within 1e-5."""
    plain = decode.LaunchConfig(16, 4, kernel="v4", p_split=4, fold="tf32x3")
    through = decode.LaunchConfig(8, 2, kernel="write_through")
    check_replay(dims, torch.bfloat16, batch, 16, after + 50, "cuda", run=switching_replay(plain, through, after),
                 stagger=True, write_through_from=after, ckpt_tol=1e-5)


STAGED_GPU_CONFIGS = [
    dict(block_p=8, num_warps=2, fold="loop"),
    dict(block_p=16, num_warps=4, fold="tf32x3", rows_fastest=True),
    dict(block_p=32, num_warps=8, fold="fma"),
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_heads=2),
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_persistent=4, flush_block_p=16),
    dict(block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, flush_stream=True, flush_max_registers=128),
    dict(block_p=16, num_warps=2, fold="tf32x2", flush_launch=True, flush_stream=True, flush_max_registers=128),
    # the batch >= 128 default's shape: (row, head chunk) list items, the next tile prefetched
    dict(block_p=16, num_warps=2, fold="bf16x3", flush_launch=True, flush_stream=True, flush_max_registers=(128, 96),
         flush_persistent=4, flush_list_items="heads", flush_heads=4, flush_l2_prefetch="lines"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("params", STAGED_GPU_CONFIGS, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dims", [(8, 64, 128, 2), (8, 80, 128, 8)])
def test_replay_staged_gpu(dims, dtype, batch, params):
    run = kernel_replay(decode.LaunchConfig(kernel="staged", **params))
    check_replay(dims, dtype, batch, window=8, steps=26, device="cuda", run=run, stagger=True)


@pytest.mark.gpu
@pytest.mark.parametrize("fold,flush_launch,persistent", [
    ("fma", False, 0), ("loop", False, 0), ("ieee", False, 0), ("tf32x3", False, 0), ("tf32x3", True, 0),
    ("loop", True, 0), ("tf32x3", True, 4), ("ieee", True, 8), ("tf32x2", False, 0), ("tf32x2", True, 0),
    ("tf32x2", True, 4), ("bf16x3", True, 4)])
def test_replay_staged_nemotron_dims_four_windows_gpu(fold, flush_launch, persistent):
    # The accuracy target for every fold of the staged kernel: fp32 checkpoint within 1e-5 of float64, L=16.
    run = kernel_replay(decode.LaunchConfig(16, 4, kernel="staged", fold=fold, flush_launch=flush_launch,
                                             flush_persistent=persistent))
    check_replay((128, 64, 128, 8), torch.bfloat16, 3, 16, 66, "cuda", run=run, ckpt_tol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dims", GPU_DIMS)
def test_standard_step_gpu(dims, dtype, batch):
    check_standard(dims, dtype, batch, steps=3, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "cfg",
    [
        decode.LaunchConfig(16, 2, True), decode.LaunchConfig(32, 8, False), decode.LaunchConfig(64, 4, True),
        decode.LaunchConfig(64, 8, False, True, 96), decode.LaunchConfig(32, 4, False, False, 128, True, False),
        decode.LaunchConfig(16, 4, True, True, None, True, True), decode.LaunchConfig(64, 4, False, True, None, False, True),
    ],
    ids=str,
)
def test_launch_configs_gpu(cfg):
    check_replay((8, 80, 128, 2), torch.bfloat16, 5, 4, 13, "cuda", run=kernel_replay(cfg))


@pytest.mark.gpu
def test_replay_step_cuda_graph_equals_eager():
    dims = (16, 64, 128, 2)
    gen = torch.Generator().manual_seed(5)
    base, _ = allocate(6, *dims, 4, torch.bfloat16, "cuda", gen)
    eager, graph = graph_vs_eager(lambda st, *a: mamba2_replay_step(st, *a), base.clone, 5, *dims, torch.bfloat16)
    for name, t in eager.tensors().items():
        assert torch.equal(t, getattr(graph, name)), name


SIDE_STREAM_GRAPH_CONFIGS = [
    # the flush launch on a side stream (fork / join captured as graph edges)
    dict(fold="tf32x3", flush_max_registers=128),
    # the (row, head chunk) list flush launch, its L2 prefetch on: its grid sized before capture
    dict(fold="tf32x2", flush_max_registers=(128, 96), flush_persistent=4, flush_list_items="heads", flush_heads=4,
         flush_l2_prefetch="lines"),
    # the token's ring x stored by the ring launch (the default from batch 128)
    dict(fold="bf16x3", flush_heads=4, ring_x_in_ring=True),
    # ... and a non-flush row's ring terms compact (compact_coef)
    dict(fold="bf16x3", flush_heads=4, ring_x_in_ring=True, compact_coef=True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("seed,params", list(enumerate(SIDE_STREAM_GRAPH_CONFIGS, start=6)),
                         ids=["side_stream", "heads_list", "ring_x_in_ring", "compact_coef"])
def test_staged_flush_stream_cuda_graph_equals_eager(seed, params):
    # Window 4; a captured step replayed against eager calls, state and outputs bit for bit.
    dims = (16, 64, 128, 2)
    gen = torch.Generator().manual_seed(seed)
    base, _ = allocate(6, *dims, 4, torch.bfloat16, "cuda", gen)
    cfg = decode.LaunchConfig(block_p=16, num_warps=2, kernel="staged", flush_launch=True, flush_stream=True, **params)
    eager, graph = graph_vs_eager(kernel_replay(cfg), base.clone, 5, *dims, torch.bfloat16)
    for name, t in eager.tensors().items():
        assert torch.equal(t, getattr(graph, name)), name


@pytest.mark.gpu
def test_standard_step_cuda_graph_equals_eager():
    dims = (16, 64, 128, 2)
    base = torch.randn(6, 16, 64, 128, device="cuda")
    eager, graph = graph_vs_eager(lambda st, *a: mamba2_standard_step(st, *a), base.clone, 5, *dims, torch.float16)
    assert torch.equal(eager, graph)


@pytest.mark.gpu
def test_replay_step_torch_compile_fullgraph_gpu():
    dims = (8, 64, 128, 2)
    gen = torch.Generator().manual_seed(9)
    state, _ = allocate(4, *dims, 4, torch.bfloat16, "cuda", gen)
    twin = state.clone()
    A, D, dt_bias = make_params(8, "cuda", gen)

    def step(ck, rx, rdt, rB, com, fa, x, dt, B, C, z):
        y = torch.ops.replayssm.mamba2_replay_step(ck, rx, rdt, rB, com, fa, 4, x, dt, A, B, C, D, z, dt_bias,
                                                   True, None, None, None, -1)
        return y * 2

    compiled = torch.compile(step, fullgraph=True)
    for _ in range(6):
        x, dt, B, C, z = make_inputs(4, *dims, torch.bfloat16, "cuda", gen)
        y_c = compiled(*[state.tensors()[k] for k in ("checkpoint", "ring_x", "ring_dt", "ring_B", "committed", "flush_at")],
                       x, dt, B, C, z)
        y_e = 2 * mamba2_replay_step(twin, x, dt, A, B, C, D, z, dt_bias, True)
        assert torch.equal(y_c, y_e)
    for name, t in twin.tensors().items():
        assert torch.equal(t, state.tensors()[name]), name
