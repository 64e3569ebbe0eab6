"""Harness of the Mamba-2 kernel tests (test_mamba2_kernels.py, test_mamba2_flush_cuda.py,
test_mamba2_flush_loads.py): random layer parameters and step inputs, slot states beside their
float64 reference, :func:`check_replay` / :func:`check_standard` (a kernel and the reference side
by side over many steps) and the CUDA-graph check."""

from __future__ import annotations

import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.mamba2 import decode, mamba2_replay_step, mamba2_standard_step, reference
from trtllm_replayssm.ops.mamba2.state import Mamba2ReplayState, ring_dt_layout_of


def rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def make_params(heads, device, gen):
    A = -(0.5 + torch.rand(heads, generator=gen))
    D = torch.randn(heads, generator=gen)
    dt_bias = torch.randn(heads, generator=gen) * 0.5
    return [t.to(device) for t in (A, D, dt_bias)]


def make_inputs(batch, heads, head_dim, d_state, groups, dtype, device, gen, gate=True):
    x = torch.randn(batch, heads, head_dim, generator=gen)
    dt = torch.randn(batch, heads, generator=gen)
    B = torch.randn(batch, groups, d_state, generator=gen) / d_state**0.5
    C = torch.randn(batch, groups, d_state, generator=gen)
    z = torch.randn(batch, heads, head_dim, generator=gen) if gate else None
    out = [x.to(dtype), dt, B.to(dtype), C.to(dtype)] + ([z.to(dtype)] if gate else [None])
    return [None if t is None else t.to(device) for t in out]


def make_indices(batch, slots, pad, device, gen):
    """A random permutation of slots with every third row padded when ``pad``."""
    idx = torch.randperm(slots, generator=gen)[:batch].to(torch.int32)
    if pad:
        idx[1::3] = -1
    return idx.to(device)


def allocate(slots, heads, head_dim, d_state, groups, window, dtype, device, gen, stagger=False, ring_dt_layout="heads"):
    """``(kernel_state on device, reference_state on the CPU)``, equal; only the kernel's state
    takes ``ring_dt_layout`` (the reference indexes either layout the same way)."""
    cfg = ReplaySSMConfig(window=window, flush_stagger=stagger)
    state = Mamba2ReplayState.allocate(slots, heads, head_dim, d_state, groups, cfg, activation_dtype=dtype)
    state.checkpoint.copy_(torch.randn(state.checkpoint.shape, generator=gen))
    kernel_state = Mamba2ReplayState.allocate(slots, heads, head_dim, d_state, groups, cfg, activation_dtype=dtype,
                                              device=device, ring_dt_layout=ring_dt_layout)
    for name, t in kernel_state.tensors().items():
        t.copy_(getattr(state, name))
    return kernel_state, state


def check_replay(dims, dtype, batch, window, steps, device, pad=True, run=None, seed=0, y_tol=None, ckpt_tol=1e-5,
                 stagger=False, write_through_from=None, poison_ring=False, gate=True, with_D=True,
                 ring_dt_layout="heads"):
    """Run ``steps`` ReplaySSM steps with ``run`` (a kernel launcher) and the reference; compare
    outputs, checkpoints, cursors and the committed ring entries after every step. With
    ``stagger`` the slots' first flushes come at different steps (flush and non-flush rows
    share launches). From step ``write_through_from`` on, every live row of the reference
    flushes (its ``flush_at`` lowered to ``committed + 1``): a write-through step. ``gate`` /
    ``with_D`` False: no ``z`` / no ``D`` (engines that gate in a norm after the layer pass none).
    ``ring_dt_layout``: the kernel state's (``Mamba2ReplayState.allocate``)."""
    heads, head_dim, d_state, groups = dims
    gen = torch.Generator().manual_seed(seed)
    slots = batch + 2
    state, ref_state = allocate(slots, heads, head_dim, d_state, groups, window, dtype, device, gen, stagger,
                                ring_dt_layout)
    assert ring_dt_layout_of(state.ring_dt) == ring_dt_layout
    if poison_ring:
        # Ring entries a step does not own hold NaN until written: no kernel may read them into a sum.
        for st in (state, ref_state):
            st.ring_x.fill_(float("nan"))
            st.ring_B.fill_(float("nan"))
    A, D, dt_bias = make_params(heads, "cpu", gen)
    D = D if with_D else None
    idx = make_indices(batch, slots, pad and batch > 1, "cpu", gen)
    y_tol = y_tol or {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}[dtype]
    run = run or (lambda st, *a: mamba2_replay_step(st, *a))
    flushes = 0
    for step in range(steps):
        x, dt, B, C, z = make_inputs(batch, heads, head_dim, d_state, groups, dtype, "cpu", gen, gate)
        if write_through_from is not None and step >= write_through_from:
            live = idx[idx >= 0].long()
            ref_state.flush_at[live] = ref_state.committed[live] + 1
        flushes += int((ref_state.committed[idx[idx >= 0].long()] + 1 >= ref_state.flush_at[idx[idx >= 0].long()]).sum())
        y_ref = reference.mamba2_replay_step(ref_state, x, dt, A, B, C, D, z, dt_bias, True, None, 8.0, idx, -1)
        dev = [None if t is None else t.to(device) for t in (x, dt, A, B, C, D, z, dt_bias)]
        y = run(state, *dev[:7], dev[7], True, None, 8.0, idx.to(device), -1)
        assert y.dtype == dtype and y.shape == x.shape
        assert rel(y, y_ref) < y_tol, f"step {step}: y rel err {rel(y, y_ref)}"
        assert torch.all(y[idx.to(device) < 0] == 0)
        assert torch.equal(state.committed.cpu(), ref_state.committed)
        assert torch.equal(state.flush_at.cpu(), ref_state.flush_at)
        err = rel(state.checkpoint, ref_state.checkpoint)
        assert err < ckpt_tol, f"step {step}: checkpoint rel err {err}"
        for s in idx[idx >= 0].tolist():
            c = int(ref_state.committed[s])
            assert torch.equal(state.ring_x[s, :, :c].cpu(), ref_state.ring_x[s, :, :c])
            assert torch.equal(state.ring_B[s, :, :c].cpu(), ref_state.ring_B[s, :, :c])
            assert rel(state.ring_dt[s, :, :c], ref_state.ring_dt[s, :, :c]) < 1e-6 if c else True
    assert steps < 3 * window or flushes >= 3 * int((idx >= 0).sum())
    return state, ref_state


def check_standard(dims, dtype, batch, steps, device, run=None, seed=1):
    heads, head_dim, d_state, groups = dims
    gen = torch.Generator().manual_seed(seed)
    slots = batch + 2
    ref_state = torch.randn(slots, heads, head_dim, d_state, generator=gen)
    state = ref_state.clone().to(device)
    A, D, dt_bias = make_params(heads, "cpu", gen)
    idx = make_indices(batch, slots, batch > 1, "cpu", gen)
    y_tol = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}[dtype]
    run = run or (lambda st, *a: mamba2_standard_step(st, *a))
    for step in range(steps):
        x, dt, B, C, z = make_inputs(batch, heads, head_dim, d_state, groups, dtype, "cpu", gen)
        y_ref = reference.mamba2_standard_step(ref_state, x, dt, A, B, C, D, z, dt_bias, True, 1e-3, None, idx, -1)
        dev = [t.to(device) for t in (x, dt, A, B, C, D, z, dt_bias)]
        y = run(state, *dev, True, 1e-3, None, idx.to(device), -1)
        assert rel(y, y_ref) < y_tol, f"step {step}: y rel err {rel(y, y_ref)}"
        assert rel(state, ref_state) < 1e-5


def kernel_replay(config):
    def run(st, x, dt, A, B, C, D, z, dt_bias, softplus, lo, hi, idx, pad):
        return decode.replay_step(
            st.checkpoint, st.ring_x, st.ring_dt, st.ring_B, st.committed, st.flush_at, st.window,
            x, dt, A, B, C, D, z, dt_bias, softplus, lo, hi, idx, pad, config=config,
        )
    return run


def graph_vs_eager(fn_step, make_state, batch, heads, head_dim, d_state, groups, dtype, steps=10):
    gen = torch.Generator().manual_seed(3)
    A, D, dt_bias = make_params(heads, "cuda", gen)
    eager_state, graph_state = make_state(), make_state()
    static = make_inputs(batch, heads, head_dim, d_state, groups, dtype, "cuda", gen)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    idx[-1] = -1

    def step(state):
        x, dt, B, C, z = static
        return fn_step(state, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1)

    scratch = make_state()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step(scratch)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_graph = step(graph_state)
    for _ in range(steps):
        new = make_inputs(batch, heads, head_dim, d_state, groups, dtype, "cuda", gen)
        for s, n in zip(static, new):
            s.copy_(n)
        graph.replay()
        y_eager = step(eager_state)
        torch.cuda.synchronize()
        assert torch.equal(y_graph, y_eager)
    return eager_state, graph_state


def switching_replay(first, then, after):
    """A launcher that runs config ``first`` for ``after`` steps, then ``then``."""
    calls = [0]

    def run(*args):
        calls[0] += 1
        return kernel_replay(first if calls[0] <= after else then)(*args)
    return run
