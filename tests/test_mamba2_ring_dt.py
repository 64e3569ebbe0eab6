"""The token's ``dt`` entry in the Mamba-2 ring: stored as its whole 32-byte sector
(``LaunchConfig.ring_dt_sector``) and ``ring_dt`` stored entries outermost
(``Mamba2ReplayState.allocate(ring_dt_layout="entries")``), every kernel against the float64
reference.

CPU: the Triton kernels in the interpreter at tiny dims with fp32 activations. GPU (``gpu``
marker): the op's default launch at each batch on an entries-outermost state; other strides refused.
"""

import pytest
import torch

from mamba2_kernel_harness import (allocate, check_replay, kernel_replay, make_inputs, make_params,
                                   switching_replay)
from trtllm_replayssm.ops.mamba2 import decode, mamba2_replay_step

HAS_CUDA = torch.cuda.is_available()


# -- CPU: the kernels in the Triton interpreter -------------------------------------------------------


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("params", [
    dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_heads=3, flush_block_p=16,
         ring_x_in_ring=True),
    dict(block_p=16, fold="loop", num_warps=2),
], ids=["flush-launch", "in-stream"])
def test_replay_ring_dt_sector_interpreter(params):
    # ring_dt_sector over a 16-entry ring (two 8-entry sectors a head), 40 steps with staggered
    # phases and a padded row: outputs, checkpoints, cursors and committed entries as the reference.
    cfg = decode.LaunchConfig(kernel="staged", ring_dt_sector=True, **params)
    check_replay((6, 32, 16, 2), torch.float32, 3, 16, 40, "cpu", run=kernel_replay(cfg), stagger=True)


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("c", [0, 5, 8, 13])
def test_ring_dt_sector_writes_its_window(c):
    # One non-flush step at ring length c: entries below c keep their bits, entry c gets the
    # token's dt, the rest of its 8-entry window zeros, and no entry outside the window is written.
    gen = torch.Generator().manual_seed(c)
    heads, head_dim, d_state, groups, batch = 6, 32, 16, 2, 2
    st, _ = allocate(batch, heads, head_dim, d_state, groups, 16, torch.float32, "cpu", gen)
    st.ring_dt.copy_(torch.rand(st.ring_dt.shape, generator=gen))
    st.ring_dt[:, :, c:] = 7.0  # uncommitted entries: anything (never read)
    st.committed.fill_(c)
    st.flush_at.fill_(16)
    before = st.ring_dt.clone()
    A, D, dt_bias = make_params(heads, "cpu", gen)
    x, dt, B, C, z = make_inputs(batch, heads, head_dim, d_state, groups, torch.float32, "cpu", gen)
    cfg = decode.LaunchConfig(kernel="staged", block_p=16, num_warps=2, ring_dt_sector=True)
    decode.replay_step(st.checkpoint, st.ring_x, st.ring_dt, st.ring_B, st.committed, st.flush_at, st.window,
                       x, dt, A, B, C, D, z, dt_bias, True, None, None, None, -1, config=cfg)
    lo = c // 8 * 8
    token_dt = torch.nn.functional.softplus(dt + dt_bias)
    assert torch.equal(st.ring_dt[:, :, :c], before[:, :, :c])
    assert torch.allclose(st.ring_dt[:, :, c], token_dt, rtol=1e-6, atol=0)
    assert torch.all(st.ring_dt[:, :, c + 1:lo + 8] == 0)
    assert torch.all(st.ring_dt[:, :, lo + 8:] == 7.0)
    assert st.committed.tolist() == [c + 1] * batch


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("params", [
    dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_heads=3, flush_block_p=16,
         ring_x_in_ring=True),
    dict(block_p=16, fold="tf32x3", num_warps=2, flush_launch=True, flush_heads=3, flush_block_p=16,
         ring_x_in_ring=True, compact_coef=True),
    dict(block_p=16, fold="loop", num_warps=2),
], ids=["flush-launch", "compact", "in-stream"])
def test_replay_staged_entry_major_ring_dt_interpreter(params):
    # The staged step's launches take ring_dt's entry stride: an entries-outermost layout (a
    # group's heads' entry in one run of memory) gives the reference's outputs and state.
    run = kernel_replay(decode.LaunchConfig(kernel="staged", **params))
    check_replay((6, 32, 16, 2), torch.float32, 3, 16, 40, "cpu", run=run, stagger=True, ring_dt_layout="entries")


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("params", [
    dict(block_p=16, num_warps=4, fold_dot=True),
    dict(block_p=16, num_warps=4, fold_dot=False, cursor_kernel=True),
    dict(block_p=16, num_warps=4, kernel="v4", fold="fma", p_split=2),
    dict(block_p=16, num_warps=4, kernel="v4", fold="loop", cursor_kernel=True, split_flush=True),
    dict(block_p=16, num_warps=4, kernel="v4", fold="ieee", pipeline="range", num_stages=2),
], ids=["v3-dot", "v3-fma", "v4-fma", "v4-loop-split", "v4-ieee"])
def test_replay_entry_major_ring_dt_interpreter(params):
    # The other kernels (their appends, ring loads and the folds that reload dt per entry) on an
    # entries-outermost ring_dt: window 4 over 13 steps, staggered phases, a padded row.
    check_replay((6, 32, 16, 2), torch.float32, 3, 4, 13, "cpu", run=kernel_replay(decode.LaunchConfig(**params)),
                 stagger=True, ring_dt_layout="entries")


@pytest.mark.skipif(HAS_CUDA, reason="interpreter test; the GPU grid covers it on CUDA")
@pytest.mark.parametrize("after", [0, 6], ids=["from-reset", "after-6-steps"])
def test_replay_write_through_entry_major_ring_dt_interpreter(after):
    # The write-through step folds a slot's ring entries from an entries-outermost ring_dt.
    plain = decode.LaunchConfig(16, 4, kernel="v4", fold="loop", p_split=2)
    through = decode.LaunchConfig(8, 2, kernel="write_through")
    check_replay((4, 32, 16, 2), torch.float32, 3, 4, after + 4, "cpu", run=switching_replay(plain, through, after),
                 stagger=True, write_through_from=after, ring_dt_layout="entries")


def test_ring_dt_sector_needs_the_staged_kernel():
    with pytest.raises(ValueError, match="ring_dt_sector: needs kernel='staged'"):
        decode.LaunchConfig(kernel="v4", ring_dt_sector=True)
    with pytest.raises(ValueError, match="ring_dt_sector: expected a bool"):
        decode.LaunchConfig(kernel="staged", ring_dt_sector=1)


# -- GPU -----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 3, 64, 130])
@pytest.mark.parametrize("dims", [(8, 64, 128, 2), (6, 80, 80, 3), (2, 256, 256, 2), (4, 128, 128, 2)])
def test_replay_entry_major_ring_dt_gpu(dims, batch):
    # The op's default launch at each batch (write-through, v4, staged, its CUDA flush) on a state
    # whose ring_dt is stored entries outermost (Mamba2ReplayState.allocate(ring_dt_layout="entries")).
    through = decode.launch_config("replay", dims[1], dims[2], batch).kernel == "write_through"
    check_replay(dims, torch.bfloat16, batch, window=8, steps=20, device="cuda", stagger=True,
                 write_through_from=0 if through else None, ring_dt_layout="entries")


@pytest.mark.gpu
def test_replay_refuses_other_ring_dt_strides_gpu():
    gen = torch.Generator().manual_seed(9)
    st, _ = allocate(3, 4, 32, 16, 2, 4, torch.bfloat16, "cuda", gen)
    st.ring_dt = torch.zeros(3, 4, 8, device="cuda")[:, :, ::2]  # every other entry: neither layout
    before = {name: t.clone() for name, t in st.tensors().items()}
    A, D, dt_bias = make_params(4, "cuda", gen)
    x, dt, B, C, z = make_inputs(3, 4, 32, 16, 2, torch.bfloat16, "cuda", gen)
    with pytest.raises(ValueError, match=r"^ring_dt: expected a contiguous tensor or stored entries outermost"):
        mamba2_replay_step(st, x, dt, A, B, C, D, z, dt_bias, True)
    assert all(torch.equal(t, before[name]) for name, t in st.tensors().items())
