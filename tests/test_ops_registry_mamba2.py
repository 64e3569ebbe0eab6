"""``torch.ops.replayssm.mamba2_*``: schema and fake implementations (opcheck), the CPU path
against an independent float64 recurrence, torch.compile, and the wrappers' argument checks."""

import pytest
import torch
import torch.nn.functional as F

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, mamba2_replay_step, mamba2_standard_step
from trtllm_replayssm.ops.mamba2.state import RING_DT_LAYOUTS, ring_dt_layout_of

H, P, N, G = 4, 6, 5, 2


def _inputs(batch, gen, dtype=torch.float32):
    x = torch.randn(batch, H, P, generator=gen, dtype=dtype)
    dt = torch.randn(batch, H, generator=gen)
    B = torch.randn(batch, G, N, generator=gen, dtype=dtype)
    C = torch.randn(batch, G, N, generator=gen)
    z = torch.randn(batch, H, P, generator=gen)
    return x, dt, B, C, z


def _params(gen):
    return -(0.5 + torch.rand(H, generator=gen)), torch.randn(H, generator=gen), torch.randn(H, generator=gen)


def _state(slots, window=4, ring_dt_layout="heads"):
    st = Mamba2ReplayState.allocate(slots, H, P, N, G, ReplaySSMConfig(window=window), ring_dt_layout=ring_dt_layout)
    st.checkpoint.normal_()
    return st


def _flat(st):
    return [st.checkpoint, st.ring_x, st.ring_dt, st.ring_B, st.committed, st.flush_at, st.window]


@pytest.mark.parametrize("ring_dt_layout", RING_DT_LAYOUTS)
def test_opcheck_replay_step(ring_dt_layout):
    gen = torch.Generator().manual_seed(0)
    A, D, bias = _params(gen)
    x, dt, B, C, z = _inputs(3, gen)
    idx = torch.tensor([2, -1, 0], dtype=torch.int32)
    args = (*_flat(_state(4, ring_dt_layout=ring_dt_layout)), x, dt, A, B, C, D, z, bias, True, None, None, idx, -1)
    torch.library.opcheck(torch.ops.replayssm.mamba2_replay_step.default, args)


def test_opcheck_standard_step():
    gen = torch.Generator().manual_seed(1)
    A, D, bias = _params(gen)
    x, dt, B, C, z = _inputs(3, gen)
    args = (torch.randn(4, H, P, N), x, dt, A, B, C, D, z, bias, True, 1e-3, 5.0, None, -1)
    torch.library.opcheck(torch.ops.replayssm.mamba2_standard_step.default, args)


def _plain_recurrence(S, x, dt, A, B, C, D, z, bias):
    """One float64 step of the Mamba-2 recurrence for every row, written out longhand."""
    heads_per_group = H // G
    y = torch.zeros(x.shape, dtype=torch.float64)
    for r in range(x.shape[0]):
        for h in range(H):
            g = h // heads_per_group
            d = F.softplus(dt[r, h].double() + bias[h].double())
            S[r, h] = torch.exp(d * A[h].double()) * S[r, h] + d * torch.outer(x[r, h].double(), B[r, g].double())
            y[r, h] = S[r, h] @ C[r, g].double() + D[h].double() * x[r, h].double()
    return y * F.silu(z.double())


@pytest.mark.parametrize("ring_dt_layout", RING_DT_LAYOUTS)
@pytest.mark.parametrize("window", [1, 3])
def test_cpu_ops_follow_the_plain_recurrence(window, ring_dt_layout):
    gen = torch.Generator().manual_seed(2)
    A, D, bias = _params(gen)
    state = _state(3, window, ring_dt_layout)
    standard_state = state.checkpoint.clone()
    plain = state.checkpoint.double().clone()
    for _ in range(3 * window + 2):
        x, dt, B, C, z = _inputs(3, gen)
        y_replay = mamba2_replay_step(state, x, dt, A, B, C, D, z, bias, True)
        y_std = mamba2_standard_step(standard_state, x, dt, A, B, C, D, z, bias, True)
        y_plain = _plain_recurrence(plain, x, dt, A, B, C, D, z, bias)
        torch.testing.assert_close(y_replay.double(), y_plain, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(y_std.double(), y_plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(standard_state.double(), plain, rtol=1e-5, atol=1e-5)


def test_ring_dt_layouts():
    heads_major = _state(2).ring_dt
    entries_major = _state(2, ring_dt_layout="entries").ring_dt
    assert heads_major.shape == entries_major.shape == (2, H, 4)
    assert entries_major.stride() == (4 * H, 1, H)
    assert (ring_dt_layout_of(heads_major), ring_dt_layout_of(entries_major)) == ("heads", "entries")
    assert ring_dt_layout_of(torch.zeros(2, 4, 2 * H)[:, :, ::2].permute(0, 2, 1)) is None
    assert ring_dt_layout_of(_state(2, ring_dt_layout="entries").clone().ring_dt) == "entries"
    with pytest.raises(ValueError, match=r"ring_dt_layout: expected one of \('heads', 'entries'\), got 'slots'"):
        _state(2, ring_dt_layout="slots")


def test_cpu_op_under_torch_compile_fullgraph():
    gen = torch.Generator().manual_seed(3)
    A, D, bias = _params(gen)
    state, twin = _state(2), None
    twin = state.clone()

    def step(ck, rx, rdt, rB, com, fa, x, dt, B, C, z):
        y = torch.ops.replayssm.mamba2_replay_step(ck, rx, rdt, rB, com, fa, 4, x, dt, A, B, C, D, z, bias,
                                                   True, None, None, None, -1)
        return y + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for _ in range(5):
        x, dt, B, C, z = _inputs(2, gen)
        y_c = compiled(*_flat(state)[:6], x, dt, B, C, z)
        y_e = mamba2_replay_step(twin, x, dt, A, B, C, D, z, bias, True) + 1
        torch.testing.assert_close(y_c, y_e, rtol=0, atol=0)
    for name, t in twin.tensors().items():
        assert torch.equal(t, state.tensors()[name]), name


def _bad_calls(state, x, dt, A, B, C, D, z, bias):
    yield "x", dict(x=x[:, :, :-1])
    yield "dt", dict(dt=dt[:, :1])
    yield "B", dict(B=B.double())  # not the ring's dtype
    yield "C", dict(C=C[:, :1])
    yield "z", dict(z=z[:1])
    yield "dt_bias", dict(dt_bias=bias[:2])
    yield "state_indices", dict(state_indices=torch.zeros(2, dtype=torch.int32))
    yield "state_indices", dict(state_indices=torch.zeros(x.shape[0], dtype=torch.float32))
    yield "dt_min", dict(dt_min="small")


@pytest.mark.parametrize("case", range(9))
def test_replay_wrapper_rejects_bad_input_and_changes_nothing(case):
    gen = torch.Generator().manual_seed(4)
    A, D, bias = _params(gen)
    state = _state(3)
    before = state.clone()
    x, dt, B, C, z = _inputs(3, gen)
    kwargs = dict(x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=bias)
    name, change = list(_bad_calls(state, x, dt, A, B, C, D, z, bias))[case]
    kwargs.update(change)
    with pytest.raises(ValueError, match=name):
        mamba2_replay_step(state, **kwargs)
    for key, t in before.tensors().items():
        assert torch.equal(t, state.tensors()[key]), key


def test_standard_wrapper_rejects_bad_state():
    gen = torch.Generator().manual_seed(5)
    A, D, bias = _params(gen)
    x, dt, B, C, z = _inputs(2, gen)
    with pytest.raises(ValueError, match="ssm_state"):
        mamba2_standard_step(torch.zeros(2, H, P), x, dt, A, B, C)
    with pytest.raises(ValueError, match="B"):
        mamba2_standard_step(torch.zeros(2, H, P, N), x, dt, A, B[:, :, None], C)
