"""The Mamba-2 ReplaySSM reference equals the plain recurrence, in float64.

Oracles: an explicit per-head float64 loop written here from replayssm-math.md section 1, and
``mamba2_standard_step`` (itself checked against that loop). Every ReplaySSM output, every
materialised state and every checkpoint written by a flush must agree to ~1e-10, for every window
position and flush phase, with padded rows mixed in, for speculative verify/commit with every
accepted length, and over a seeded grid of small shapes.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.mamba2.reference import (
    mamba2_replay_commit,
    mamba2_replay_flush,
    mamba2_replay_materialize,
    mamba2_replay_step,
    mamba2_replay_verify,
    mamba2_standard_step,
)
from trtllm_replayssm.ops.mamba2.state import Mamba2ReplayState

F64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-10)


# -- fixtures of the tests: shapes, parameters, inputs ---------------------------------------------


@dataclasses.dataclass
class Layer:
    heads: int = 4
    head_dim: int = 3
    d_state: int = 5
    groups: int = 2
    use_D: bool = True
    use_z: bool = True
    use_dt_bias: bool = True
    dt_softplus: bool = True
    dt_min: float | None = None
    dt_max: float | None = None
    seed: int = 0

    def __post_init__(self):
        g = torch.Generator().manual_seed(self.seed)
        # Decays per token in about [0.5, 0.99]: the state remembers across several windows.
        self.A = -torch.empty(self.heads, dtype=F64).uniform_(0.05, 1.0, generator=g)
        self.D = torch.randn(self.heads, dtype=F64, generator=g) if self.use_D else None
        self.dt_bias = torch.empty(self.heads, dtype=F64).uniform_(-2.0, 0.0, generator=g) if self.use_dt_bias else None
        self.generator = g

    def params(self):
        return dict(
            A=self.A, D=self.D, dt_bias=self.dt_bias, dt_softplus=self.dt_softplus, dt_min=self.dt_min, dt_max=self.dt_max
        )

    def inputs(self, batch: int, T: int | None = None, dtype=F64) -> dict:
        """Random per-token inputs ``x, dt, B, C, z``; with ``T``, a draft axis after batch."""
        lead = (batch,) if T is None else (batch, T)
        g = self.generator
        dt = torch.randn(*lead, self.heads, dtype=F64, generator=g)
        if not self.dt_softplus:
            dt = 0.05 + dt.abs() * 0.3  # used as is: keep it a positive step size
        out = dict(
            x=torch.randn(*lead, self.heads, self.head_dim, dtype=F64, generator=g),
            dt=dt,
            B=torch.randn(*lead, self.groups, self.d_state, dtype=F64, generator=g),
            C=torch.randn(*lead, self.groups, self.d_state, dtype=F64, generator=g),
            z=torch.randn(*lead, self.heads, self.head_dim, dtype=F64, generator=g) if self.use_z else None,
        )
        return {k: (None if v is None else v.to(dtype)) for k, v in out.items()}

    def state(self, slots: int, config: ReplaySSMConfig, dtype=F64) -> Mamba2ReplayState:
        state = Mamba2ReplayState.allocate(
            slots, self.heads, self.head_dim, self.d_state, self.groups, config,
            activation_dtype=dtype, checkpoint_dtype=dtype,
        )
        if dtype == F64:
            # The contract's fp32 ring_dt would round dt; float64 here isolates reassociation.
            state = dataclasses.replace(state, ring_dt=state.ring_dt.to(F64))
        return state


def explicit_step(S, x, dt, B, C, layer: Layer, z=None):
    """One token of math.md section 1 for one sequence, head by head. ``S [heads, P, N]`` in place."""
    dt = dt.to(F64)
    if layer.dt_bias is not None:
        dt = dt + layer.dt_bias
    if layer.dt_softplus:
        dt = torch.log1p(torch.exp(dt))
    if layer.dt_min is not None or layer.dt_max is not None:
        dt = dt.clamp(layer.dt_min, layer.dt_max)
    heads_per_group = layer.heads // layer.groups
    y = torch.empty(layer.heads, layer.head_dim, dtype=F64)
    for h in range(layer.heads):
        g = h // heads_per_group
        a = torch.exp(dt[h] * layer.A[h])
        S[h] = a * S[h] + dt[h] * torch.outer(x[h].to(F64), B[g].to(F64))
        y[h] = S[h] @ C[g].to(F64)
        if layer.D is not None:
            y[h] += layer.D[h] * x[h].to(F64)
        if z is not None:
            y[h] *= z[h].to(F64) * torch.sigmoid(z[h].to(F64))
    return y


def row_slice(inputs: dict, row: int, t: int | None = None) -> dict:
    return {k: (None if v is None else (v[row] if t is None else v[row, t])) for k, v in inputs.items()}


def snapshot(state: Mamba2ReplayState) -> dict:
    return {k: v.clone() for k, v in state.tensors().items()}


def assert_slots_unchanged(state: Mamba2ReplayState, before: dict, slots) -> None:
    for name, tensor in state.tensors().items():
        for s in slots:
            assert torch.equal(tensor[s], before[name][s]), f"{name}[{s}] changed"


# -- standard recurrence ----------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [(True, True, True, True), (False, False, False, False), (True, False, True, False)])
def test_standard_step_is_the_recurrence(flags):
    use_D, use_z, use_dt_bias, softplus = flags
    layer = Layer(heads=6, groups=3, use_D=use_D, use_z=use_z, use_dt_bias=use_dt_bias, dt_softplus=softplus,
                  dt_min=0.1 if softplus else None, dt_max=1.5 if softplus else None)
    slots, state_indices = 5, torch.tensor([3, -1, 0, -1], dtype=torch.int32)
    ssm_state = torch.zeros(slots, layer.heads, layer.head_dim, layer.d_state, dtype=F64)
    expected = {3: torch.zeros(ssm_state.shape[1:], dtype=F64), 0: torch.zeros(ssm_state.shape[1:], dtype=F64)}
    for _ in range(6):
        inputs = layer.inputs(4)
        y = mamba2_standard_step(ssm_state, **inputs, **layer.params(), state_indices=state_indices)
        assert y.dtype == F64 and y.shape == inputs["x"].shape
        for row, slot in ((0, 3), (2, 0)):
            torch.testing.assert_close(y[row], explicit_step(expected[slot], **row_slice(inputs, row), layer=layer), **TOL)
            torch.testing.assert_close(ssm_state[slot], expected[slot], **TOL)
        assert torch.count_nonzero(y[[1, 3]]) == 0
        assert torch.count_nonzero(ssm_state[[1, 2, 4]]) == 0


# -- ReplaySSM decode over many windows --------------------------------------------------------------


@pytest.mark.parametrize("window", [1, 3, 4, 16])
@pytest.mark.parametrize("stagger", [True, False])
def test_replay_step_equals_recurrence_every_position_and_phase(window, stagger):
    layer = Layer(seed=window)
    config = ReplaySSMConfig(window=window, flush_stagger=stagger)
    slots = 6
    state = layer.state(slots, config)
    ssm_state = torch.zeros(slots, layer.heads, layer.head_dim, layer.d_state, dtype=F64)
    # Four sequences in slots 5, 0, 2, 3 (every stagger phase mod 4), padded rows between them.
    state_indices = torch.tensor([5, -1, 0, 2, -1, 3], dtype=torch.int32)
    live = [(0, 5), (2, 0), (3, 2), (5, 3)]
    tokens_since_flush = {s: 0 for _, s in live}
    flush_due = {s: config.first_flush_at(s) for _, s in live}
    flushes = {s: 0 for _, s in live}
    steps = 5 * window + window + 2  # more than five windows for every slot, whatever its phase
    for _ in range(steps):
        inputs = layer.inputs(len(state_indices))
        before = snapshot(state)
        y_replay = mamba2_replay_step(state, **inputs, **layer.params(), state_indices=state_indices)
        y_standard = mamba2_standard_step(ssm_state, **inputs, **layer.params(), state_indices=state_indices)
        torch.testing.assert_close(y_replay, y_standard, **TOL)
        assert torch.count_nonzero(y_replay[[1, 4]]) == 0
        assert_slots_unchanged(state, before, [1, 4])
        materialized = mamba2_replay_materialize(state, state_indices, A=layer.A)
        for row, slot in live:
            torch.testing.assert_close(materialized[row], ssm_state[slot], **TOL)
            tokens_since_flush[slot] += 1
            if tokens_since_flush[slot] == flush_due[slot]:
                # This step was the slot's flush: the checkpoint itself is the state now.
                assert int(state.committed[slot]) == 0 and int(state.flush_at[slot]) == window
                torch.testing.assert_close(state.checkpoint[slot], ssm_state[slot], **TOL)
                tokens_since_flush[slot], flush_due[slot] = 0, window
                flushes[slot] += 1
            else:
                assert int(state.committed[slot]) == tokens_since_flush[slot]
        assert torch.count_nonzero(materialized[[1, 4]]) == 0
    assert all(n >= 5 for n in flushes.values()), flushes


def test_replay_step_fp32_state_matches_float64_recurrence():
    """The contract's dtypes (fp32 activations, ring_dt and checkpoint): agreement to fp32 rounding."""
    layer = Layer(heads=4, groups=1, head_dim=8, d_state=16)
    state = layer.state(3, ReplaySSMConfig(window=4), dtype=torch.float32)
    ssm_state = torch.zeros(3, layer.heads, layer.head_dim, layer.d_state, dtype=F64)
    for _ in range(20):
        inputs = layer.inputs(3, dtype=torch.float32)
        y = mamba2_replay_step(state, **inputs, **layer.params())
        y_ref = mamba2_standard_step(ssm_state, **inputs, **layer.params())
        assert y.dtype == torch.float32 and state.checkpoint.dtype == torch.float32
        torch.testing.assert_close(y, y_ref.float(), rtol=1e-5, atol=1e-5 * y_ref.abs().max().item())


def test_step_is_verify_one_then_commit_one():
    layer = Layer(seed=7)
    config = ReplaySSMConfig(window=3)
    a, b = layer.state(4, config), layer.state(4, config)
    state_indices = torch.tensor([2, -1, 1, 3])
    for _ in range(8):
        inputs = layer.inputs(4)
        y_step = mamba2_replay_step(a, **inputs, **layer.params(), state_indices=state_indices)
        drafts = {k: (None if v is None else v[:, None]) for k, v in inputs.items()}
        y_verify = mamba2_replay_verify(b, **drafts, **layer.params(), state_indices=state_indices)
        mamba2_replay_commit(b, torch.ones(4, dtype=torch.int32), state_indices, A=layer.A, num_drafts=1)
        assert torch.equal(y_step, y_verify[:, 0])
        for name, tensor in a.tensors().items():
            assert torch.equal(tensor, b.tensors()[name]), name


# -- speculative decoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("T", range(1, 9))
def test_verify_equals_sequential_decoding_for_every_accepted_length(T):
    layer = Layer(heads=4, groups=2, seed=100 + T)
    window = 8
    config = ReplaySSMConfig(window=window, max_draft_tokens=8, flush_stagger=True)
    slots = 4
    state = layer.state(slots, config)
    ssm_state = torch.zeros(slots, layer.heads, layer.head_dim, layer.d_state, dtype=F64)
    state_indices = torch.tensor([3, -1, 0, 1], dtype=torch.int32)
    live = [(0, 3), (2, 0), (3, 1)]
    seen_accepted = {row: set() for row, _ in live}
    flushes_past_flush_at = 0
    for round_ in range(2 * (T + 1) + 3):
        # Put some slots right before their flush so drafts straddle the flush boundary.
        for _ in range(round_ % 3):
            inputs = layer.inputs(len(state_indices))
            y = mamba2_replay_step(state, **inputs, **layer.params(), state_indices=state_indices)
            torch.testing.assert_close(
                y, mamba2_standard_step(ssm_state, **inputs, **layer.params(), state_indices=state_indices), **TOL
            )
        drafts = layer.inputs(len(state_indices), T)
        before = snapshot(state)
        y_verify = mamba2_replay_verify(state, **drafts, **layer.params(), state_indices=state_indices)
        assert y_verify.shape == drafts["x"].shape and torch.count_nonzero(y_verify[1]) == 0
        assert torch.equal(state.committed, before["committed"]) and torch.equal(state.checkpoint, before["checkpoint"])
        # Sequential decoding of the drafts, keeping the state after each.
        states_after = []
        sequential = ssm_state.clone()
        for t in range(T):
            step_inputs = {k: (None if v is None else v[:, t]) for k, v in drafts.items()}
            y_seq = mamba2_standard_step(sequential, **step_inputs, **layer.params(), state_indices=state_indices)
            torch.testing.assert_close(y_verify[:, t], y_seq, **TOL)
            states_after.append(sequential.clone())
        # Every row accepts a different count; over the rounds each row sees every count 0..T.
        accepted = torch.tensor([(round_ + 3 * row) % (T + 1) for row in range(len(state_indices))], dtype=torch.int32)
        committed_before = state.committed.clone()
        flush_at_before = state.flush_at.clone()
        mamba2_replay_commit(state, accepted, state_indices, A=layer.A, num_drafts=T)
        for row, slot in live:
            n = int(accepted[row])
            seen_accepted[row].add(n)
            if n:
                ssm_state[slot] = states_after[n - 1][slot]
            new_committed = int(committed_before[slot]) + n
            if new_committed >= int(flush_at_before[slot]):
                assert int(state.committed[slot]) == 0 and int(state.flush_at[slot]) == window
                torch.testing.assert_close(state.checkpoint[slot], ssm_state[slot], **TOL)
                flushes_past_flush_at += new_committed > int(flush_at_before[slot])
            else:
                assert int(state.committed[slot]) == new_committed
        assert_slots_unchanged(state, before, [2])
        materialized = mamba2_replay_materialize(state, state_indices, A=layer.A)
        for row, slot in live:
            torch.testing.assert_close(materialized[row], ssm_state[slot], **TOL)
    assert all(seen == set(range(T + 1)) for seen in seen_accepted.values()), seen_accepted
    if T > 1:
        assert flushes_past_flush_at > 0, "no commit crossed a flush boundary"


def test_verify_fills_the_ring_to_capacity_and_not_beyond():
    layer = Layer(seed=11)
    config = ReplaySSMConfig(window=4, max_draft_tokens=4, flush_stagger=False)
    state = layer.state(2, config)
    ssm_state = torch.zeros(2, layer.heads, layer.head_dim, layer.d_state, dtype=F64)
    for _ in range(3):  # committed = 3, one short of the flush
        inputs = layer.inputs(2)
        mamba2_replay_step(state, **inputs, **layer.params())
        mamba2_standard_step(ssm_state, **inputs, **layer.params())
    room = state.capacity - 3
    before = snapshot(state)
    with pytest.raises(ValueError, match=r"^x\b.*capacity"):
        mamba2_replay_verify(state, **layer.inputs(2, room + 1), **layer.params())
    assert all(torch.equal(t, before[k]) for k, t in state.tensors().items())
    drafts = layer.inputs(2, room)
    y = mamba2_replay_verify(state, **drafts, **layer.params())
    for t in range(room):
        step_inputs = {k: (None if v is None else v[:, t]) for k, v in drafts.items()}
        torch.testing.assert_close(y[:, t], mamba2_standard_step(ssm_state, **step_inputs, **layer.params()), **TOL)
    mamba2_replay_commit(state, torch.full((2,), room, dtype=torch.int32), A=layer.A, num_drafts=room)
    # committed reached the ring's capacity (past flush_at): all of it was folded.
    assert state.committed.tolist() == [0, 0]
    torch.testing.assert_close(state.checkpoint, ssm_state, **TOL)


def test_flush_folds_only_committed_entries():
    layer = Layer(seed=3)
    config = ReplaySSMConfig(window=8, max_draft_tokens=4, flush_stagger=False)
    state = layer.state(3, config)
    ssm_state = torch.zeros(3, layer.heads, layer.head_dim, layer.d_state, dtype=F64)
    for _ in range(5):
        inputs = layer.inputs(3)
        mamba2_replay_step(state, **inputs, **layer.params())
        mamba2_standard_step(ssm_state, **inputs, **layer.params())
    mamba2_replay_verify(state, **layer.inputs(3, 4), **layer.params())  # drafts never committed
    slots = torch.tensor([2, -1, 0])
    before = snapshot(state)
    mamba2_replay_flush(state, slots, A=layer.A)
    for s in (0, 2):
        torch.testing.assert_close(state.checkpoint[s], ssm_state[s], **TOL)
        assert int(state.committed[s]) == 0 and int(state.flush_at[s]) == 8
    assert_slots_unchanged(state, before, [1])
    # Decoding continues from the flushed checkpoint.
    for _ in range(10):
        inputs = layer.inputs(3)
        torch.testing.assert_close(
            mamba2_replay_step(state, **inputs, **layer.params()),
            mamba2_standard_step(ssm_state, **inputs, **layer.params()), **TOL,
        )


# -- random grid of small shapes ----------------------------------------------------------------


def _grid(n: int):
    rng = random.Random(2024)
    for i in range(n):
        groups = rng.choice([1, 2, 3])
        yield dict(
            layer=Layer(
                heads=groups * rng.choice([1, 2, 4]), groups=groups, head_dim=rng.choice([1, 2, 5, 8]),
                d_state=rng.choice([1, 3, 4, 16]), use_D=rng.random() < 0.5, use_z=rng.random() < 0.5,
                use_dt_bias=rng.random() < 0.5, dt_softplus=rng.random() < 0.7,
                dt_max=rng.choice([None, 0.8]), seed=i,
            ),
            window=rng.choice([1, 2, 3, 5, 7, 16]),
            max_draft=rng.choice([0, 1, 3]),
            stagger=rng.random() < 0.5,
            rng=random.Random(i),
        )


@pytest.mark.parametrize("case", list(_grid(24)), ids=lambda c: f"H{c['layer'].heads}G{c['layer'].groups}"
                         f"P{c['layer'].head_dim}N{c['layer'].d_state}L{c['window']}T{c['max_draft']}")
def test_random_shapes_replay_equals_explicit_loop(case):
    layer, window, max_draft, rng = case["layer"], case["window"], min(case["max_draft"], case["window"]), case["rng"]
    config = ReplaySSMConfig(window=window, max_draft_tokens=max_draft, flush_stagger=case["stagger"])
    slots = 3
    state = layer.state(slots, config)
    state_indices = torch.tensor([2, -1, 0], dtype=torch.int32)
    live = [(0, 2), (2, 0)]
    explicit = {s: torch.zeros(layer.heads, layer.head_dim, layer.d_state, dtype=F64) for _, s in live}
    for _ in range(2 * window + 5):
        T = rng.randint(1, max_draft) if max_draft and rng.random() < 0.5 else 0
        if T == 0:
            inputs = layer.inputs(3)
            y = mamba2_replay_step(state, **inputs, **layer.params(), state_indices=state_indices)
            for row, slot in live:
                torch.testing.assert_close(y[row], explicit_step(explicit[slot], **row_slice(inputs, row), layer=layer), **TOL)
        else:
            drafts = layer.inputs(3, T)
            y = mamba2_replay_verify(state, **drafts, **layer.params(), state_indices=state_indices)
            accepted = torch.tensor([rng.randint(0, T) for _ in range(3)], dtype=torch.int32)
            for row, slot in live:
                scratch = explicit[slot].clone()
                for t in range(T):
                    y_t = explicit_step(scratch, **row_slice(drafts, row, t), layer=layer)
                    torch.testing.assert_close(y[row, t], y_t, **TOL)
                    if t + 1 == int(accepted[row]):
                        explicit[slot] = scratch.clone()
            mamba2_replay_commit(state, accepted, state_indices, A=layer.A, num_drafts=T)
        materialized = mamba2_replay_materialize(state, state_indices, A=layer.A)
        for row, slot in live:
            torch.testing.assert_close(materialized[row], explicit[slot], **TOL)
        assert int(state.committed.max()) < window  # every slot flushed when due
    assert torch.count_nonzero(state.checkpoint[1]) == 0 and int(state.committed[1]) == 0


# -- errors -----------------------------------------------------------------------------------------


def _error_cases(layer: Layer, state: Mamba2ReplayState):
    """(argument named in the message, call) pairs; each call must raise and change nothing."""
    good = layer.inputs(2)
    drafts = layer.inputs(2, 3)
    p = layer.params()
    idx = torch.tensor([0, 1], dtype=torch.int32)

    def step(**override):
        kwargs = {**good, **p, "state_indices": idx, **override}
        return lambda: mamba2_replay_step(state, **kwargs)

    def verify(**override):
        kwargs = {**drafts, **p, "state_indices": idx, **override}
        return lambda: mamba2_replay_verify(state, **kwargs)

    def commit(n, **kw):
        return lambda: mamba2_replay_commit(state, n, idx, A=layer.A, **kw)

    H, P, N, G = layer.heads, layer.head_dim, layer.d_state, layer.groups
    return [
        ("x", step(x=torch.randn(2, H + 1, P, dtype=F64))),
        ("x", step(x=good["x"].float())),
        ("x", verify(x=torch.randn(2, 0, H, P, dtype=F64), dt=torch.randn(2, 0, H, dtype=F64))),
        ("dt", step(dt=torch.randn(2, H + 1, dtype=F64))),
        ("A", step(A=torch.randn(H + 1, dtype=F64))),
        ("B", step(B=torch.randn(2, G, N + 1, dtype=F64))),
        ("B", step(B=good["B"].float())),
        ("C", step(C=torch.randn(2, G + 1, N, dtype=F64))),
        ("D", step(D=torch.randn(H - 1, dtype=F64))),
        ("z", step(z=torch.randn(2, H, P + 1, dtype=F64))),
        ("dt_bias", step(dt_bias=torch.randn(H, 2, dtype=F64))),
        ("dt_min", step(dt_min=2.0, dt_max=1.0)),
        ("state_indices", step(state_indices=torch.tensor([0, 5]))),
        ("state_indices", step(state_indices=torch.tensor([1, 1]))),
        ("state_indices", step(state_indices=torch.tensor([0, 1, 2]))),
        ("state_indices", step(state_indices=torch.tensor([0.0, 1.0]))),
        ("x", verify(**layer.inputs(2, state.capacity))),  # committed + T > capacity
        ("num_accepted", commit(torch.tensor([1, 4], dtype=torch.int32), num_drafts=3)),
        ("num_accepted", commit(torch.tensor([-1, 0], dtype=torch.int32))),
        ("num_accepted", commit(torch.tensor([state.capacity, 0], dtype=torch.int32))),
        ("num_accepted", commit(torch.tensor([1.0, 1.0]))),
        ("A", lambda: mamba2_replay_flush(state, idx, A=torch.randn(H + 2, dtype=F64))),
        ("A", lambda: mamba2_replay_commit(state, torch.tensor([1, 1]), idx, A=layer.A[:1])),
        ("state_indices", lambda: mamba2_replay_materialize(state, torch.tensor([[0]]), A=layer.A)),
        ("state", lambda: mamba2_replay_step(state.checkpoint, **good, **p)),
    ]


def test_bad_arguments_raise_and_change_nothing():
    layer = Layer(heads=4, groups=2)
    state = layer.state(3, ReplaySSMConfig(window=6, max_draft_tokens=3))
    for _ in range(4):  # a state with history, mid-window
        mamba2_replay_step(state, **layer.inputs(3), **layer.params())
    before = snapshot(state)
    for name, call in _error_cases(layer, state):
        with pytest.raises(ValueError, match=rf"^{name}\b"):
            call()
        for field, tensor in state.tensors().items():
            assert torch.equal(tensor, before[field]), f"{field} changed by a rejected call on {name}"


def test_standard_step_rejects_bad_arguments_and_keeps_state():
    layer = Layer(heads=4, groups=2)
    ssm_state = torch.randn(3, layer.heads, layer.head_dim, layer.d_state, dtype=F64)
    before = ssm_state.clone()
    good = layer.inputs(2)
    cases = [
        ("ssm_state", dict(ssm_state=ssm_state[0])),
        ("B", dict(B=torch.randn(2, 3, layer.d_state, dtype=F64))),  # 3 groups do not divide 4 heads
        ("x", dict(x=torch.randn(2, layer.heads, layer.head_dim + 1, dtype=F64))),
        ("state_indices", dict(state_indices=torch.tensor([0, 3]))),
    ]
    for name, override in cases:
        kwargs = {"ssm_state": ssm_state, **good, **layer.params(), **override}
        with pytest.raises(ValueError, match=rf"^{name}\b"):
            mamba2_standard_step(**kwargs)
        assert torch.equal(ssm_state, before)


def test_low_precision_activations_and_checkpoint_keep_their_dtypes():
    layer = Layer(heads=2, groups=1, use_z=True)
    state = Mamba2ReplayState.allocate(
        2, layer.heads, layer.head_dim, layer.d_state, layer.groups, ReplaySSMConfig(window=2),
        activation_dtype=torch.float16, checkpoint_dtype=torch.bfloat16,
    )
    for _ in range(3):
        y = mamba2_replay_step(state, **layer.inputs(2, dtype=torch.float16), **layer.params())
        assert y.dtype == torch.float16
    assert state.checkpoint.dtype == torch.bfloat16 and state.ring_dt.dtype == torch.float32
    assert torch.count_nonzero(state.checkpoint) > 0  # the flush at token 2 wrote it
    assert mamba2_replay_materialize(state, A=layer.A).dtype == torch.bfloat16
