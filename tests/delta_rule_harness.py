"""Shared checks of the GDN and KDA ReplaySSM references (tests/test_{gdn,kda}_reference.py).

Every check drives the ReplaySSM ops and, beside them, the standard recurrence
(``*_standard_step`` on a plain ``[slots, HV, d_v, d_k]`` state) with the same tokens, and
compares outputs and states in float64.
"""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import pytest
import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.gdn import reference as gdn
from trtllm_replayssm.ops.gdn.state import DeltaRuleReplayState
from trtllm_replayssm.ops.kda import reference as kda

F64 = torch.float64
TOL = 1e-10

GDN = SimpleNamespace(
    name="gdn", per_channel=False, standard=gdn.gdn_standard_step, step=gdn.gdn_replay_step,
    verify=gdn.gdn_replay_verify, commit=gdn.gdn_replay_commit, flush=gdn.gdn_replay_flush,
    materialize=gdn.gdn_replay_materialize,
)
KDA = SimpleNamespace(
    name="kda", per_channel=True, standard=kda.kda_standard_step, step=kda.kda_replay_step,
    verify=kda.kda_replay_verify, commit=kda.kda_replay_commit, flush=kda.kda_replay_flush,
    materialize=kda.kda_replay_materialize,
)


@dataclasses.dataclass
class Layer:
    """Shapes and gate parameters of one test layer, plus a token generator."""

    kind: SimpleNamespace
    HV: int
    H: int
    d_k: int
    d_v: int
    gen: torch.Generator
    dtype: torch.dtype = F64

    def __post_init__(self):
        self.A_log = torch.empty(self.HV, dtype=F64).uniform_(-1.0, 1.0, generator=self.gen).to(self.dtype)
        bias_len = self.HV * self.d_k if self.kind.per_channel else self.HV
        self.dt_bias = (torch.randn(bias_len, generator=self.gen, dtype=F64) * 0.5).to(self.dtype)

    def tokens(self, batch: int, T: int | None = None) -> dict[str, torch.Tensor]:
        """Raw inputs of one step (``T=None``) or of ``T`` drafts, as the ops take them."""
        pre = (batch,) if T is None else (batch, T)
        a_shape = (self.HV, self.d_k) if self.kind.per_channel else (self.HV,)

        def rnd(*shape):
            return torch.randn(*pre, *shape, generator=self.gen, dtype=F64).to(self.dtype)

        return {"q": rnd(self.H, self.d_k), "k": rnd(self.H, self.d_k), "v": rnd(self.HV, self.d_v),
                "a": rnd(*a_shape), "b": rnd(self.HV)}

    def replay_state(self, slots: int, config: ReplaySSMConfig, float64_rings: bool = True) -> DeltaRuleReplayState:
        """A float64 state; ``float64_rings`` also widens the fp32 ``beta / g / u`` rings so that
        the comparisons with the float64 recurrence can hold to ``TOL``."""
        state = DeltaRuleReplayState.allocate(
            slots, self.HV, self.H, self.d_k, self.d_v, config, per_channel_decay=self.kind.per_channel,
            activation_dtype=self.dtype, checkpoint_dtype=F64,
        )
        if float64_rings:
            for name in ("ring_beta", "ring_g", "ring_u"):
                setattr(state, name, getattr(state, name).to(F64))
        return state

    def plain_state(self, slots: int) -> torch.Tensor:
        return torch.zeros(slots, self.HV, self.d_v, self.d_k, dtype=F64)

    def standard(self, ssm_state, inputs, state_indices):
        return self.kind.standard(ssm_state, **inputs, A_log=self.A_log, dt_bias=self.dt_bias,
                                  state_indices=state_indices)

    def step(self, state, inputs, state_indices, **kw):
        return self.kind.step(state, **inputs, A_log=self.A_log, dt_bias=self.dt_bias,
                              state_indices=state_indices, **kw)

    def verify(self, state, inputs, state_indices):
        return self.kind.verify(state, **inputs, A_log=self.A_log, dt_bias=self.dt_bias,
                                state_indices=state_indices)


def indices(slot_list) -> torch.Tensor:
    return torch.tensor(slot_list, dtype=torch.int32)


def assert_close(actual, expected, what, tol=TOL):
    err = (actual.to(F64) - expected.to(F64)).abs().max().item() if actual.numel() else 0.0
    scale = max(1.0, expected.to(F64).abs().max().item() if expected.numel() else 0.0)
    assert err <= tol * scale, f"{what}: max error {err:.3e} > {tol * scale:.1e}"


def snapshot(state: DeltaRuleReplayState) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in state.tensors().items()}


def assert_unchanged(state: DeltaRuleReplayState, before: dict[str, torch.Tensor]) -> None:
    for name, t in state.tensors().items():
        assert torch.equal(t, before[name]), f"{name} changed by a rejected call"


def check_against_recurrence(layer: Layer, config: ReplaySSMConfig, steps: int, slots: int, seed: int) -> int:
    """Decode ``steps`` batches, each a random subset of slots in random order with padded rows
    mixed in; after every step compare outputs, every slot's materialized state and, for slots
    that just flushed, the checkpoint itself. Returns the number of flushes seen."""
    rng = random.Random(seed)
    state, plain = layer.replay_state(slots, config), layer.plain_state(slots)
    flushes = 0
    for t in range(steps):
        rows = [s for s in range(slots) if rng.random() < 0.8] or [0]
        rng.shuffle(rows)
        for _ in range(rng.randint(0, 2)):
            rows.insert(rng.randint(0, len(rows)), -1)
        idx = indices(rows)
        inputs = layer.tokens(len(rows))
        expected = layer.standard(plain, inputs, idx)
        got = layer.step(state, inputs, idx)
        assert got.dtype == inputs["v"].dtype
        assert_close(got, expected, f"step {t} outputs")
        pad = idx == -1
        assert torch.count_nonzero(got[pad]) == 0, "padded rows must get zero outputs"
        all_slots = indices(range(slots))
        assert_close(layer.kind.materialize(state, all_slots), plain, f"step {t} materialized states")
        live = idx[~pad].long()
        just_flushed = live[state.committed[live] == 0]
        flushes += just_flushed.numel()
        assert_close(state.checkpoint[just_flushed], plain[just_flushed], f"step {t} checkpoints after flush")
    return flushes


def check_verify(layer: Layer, config: ReplaySSMConfig, T: int, seed: int) -> int:
    """For every accepted length ``n`` in ``0..T``: verify ``T`` drafts on slots at every ring
    position, compare with sequential decoding, commit ``n``, compare states, decode one more
    token. Returns the number of slots whose commit flushed."""
    slots = config.window
    gen_state = torch.Generator().manual_seed(seed)
    warm = Layer(layer.kind, layer.HV, layer.H, layer.d_k, layer.d_v, gen_state, layer.dtype)
    warm.A_log, warm.dt_bias = layer.A_log, layer.dt_bias
    base, base_plain = layer.replay_state(slots, config), layer.plain_state(slots)
    all_slots = indices(range(slots))
    # Staggered first flushes put the slots at every ring position after one step each way.
    for _ in range(config.window + 1):
        warm_in = warm.tokens(slots)
        warm.standard(base_plain, warm_in, all_slots)
        warm.step(base, warm_in, all_slots)
    flushes = 0
    for n in range(T + 1):
        state, plain = base.clone(), base_plain.clone()
        idx = indices([-1] + list(reversed(range(slots))))
        drafts = layer.tokens(slots + 1, T)
        got = layer.verify(state, drafts, idx)
        assert got.shape == (slots + 1, T, layer.HV, layer.d_v)
        assert torch.count_nonzero(got[0]) == 0
        sequential = plain.clone()
        for t in range(T):
            expected = layer.standard(sequential, {name: x[:, t] for name, x in drafts.items()}, idx)
            assert_close(got[:, t], expected, f"T={T} draft {t} outputs")
            if t + 1 == n:
                plain = sequential.clone()
        before = state.committed.clone()
        layer.kind.commit(state, indices([T] + [n] * slots), idx)
        flushes += int(((before + n) >= base.flush_at).sum()) if n else 0
        assert_close(layer.kind.materialize(state, all_slots), plain, f"T={T} n={n} state after commit")
        follow = layer.tokens(slots)
        assert_close(layer.step(state, follow, all_slots), layer.standard(plain, follow, all_slots),
                     f"T={T} n={n} decode after commit")
    return flushes


def check_refold(layer: Layer, config: ReplaySSMConfig, seed: int) -> None:
    """Refolding and folding the cached ``u`` agree in float64; with ``ring_u`` perturbed (a
    read copy's rounding), only the refold still yields the exact checkpoint."""
    slots = 4
    state, plain = layer.replay_state(slots, config), layer.plain_state(slots)
    all_slots = indices(range(slots))
    for _ in range(config.window + config.window // 2):
        inputs = layer.tokens(slots)
        layer.standard(plain, inputs, all_slots)
        layer.step(state, inputs, all_slots)
    assert bool((state.committed > 0).all()), "every slot should hold committed entries"
    refolded, cached = state.clone(), state.clone()
    layer.kind.flush(refolded, all_slots, refold=True)
    layer.kind.flush(cached, all_slots, refold=False)
    assert_close(refolded.checkpoint, plain, "refolded checkpoint")
    assert_close(cached.checkpoint, plain, "cached-u checkpoint")
    assert bool((refolded.committed == 0).all()) and bool((refolded.flush_at == config.window).all())

    perturbed = state.clone()
    gen = torch.Generator().manual_seed(seed)
    perturbed.ring_u.mul_(1 + 1e-3 * torch.randn(perturbed.ring_u.shape, generator=gen, dtype=F64))
    exact, drifted = perturbed.clone(), perturbed.clone()
    layer.kind.flush(exact, all_slots, refold=True)
    layer.kind.flush(drifted, all_slots, refold=False)
    assert_close(exact.checkpoint, plain, "refold after perturbed ring_u")
    drift = (drifted.checkpoint - plain).abs().max().item()
    assert drift > 1e-6, f"folding a perturbed ring_u should move the checkpoint (drift {drift:.1e})"
    # Materialize follows the same rule.
    assert_close(layer.kind.materialize(perturbed, all_slots, refold=True), plain, "materialize refold")


def check_random_program(layer: Layer, config: ReplaySSMConfig, seed: int, ops: int = 24) -> None:
    """A random mix of steps, verify + commit, explicit flushes and materializations."""
    rng = random.Random(seed)
    slots = 3
    state, plain = layer.replay_state(slots, config), layer.plain_state(slots)
    for _ in range(ops):
        rows = rng.sample(range(slots), rng.randint(1, slots))
        idx = indices(rows)
        choice = rng.random()
        if choice < 0.5 or config.max_draft_tokens == 0:
            inputs = layer.tokens(len(rows))
            assert_close(layer.step(state, inputs, idx, refold=rng.random() < 0.5),
                         layer.standard(plain, inputs, idx), "random step")
        elif choice < 0.85:
            T = rng.randint(1, config.max_draft_tokens)
            drafts = layer.tokens(len(rows), T)
            got = layer.verify(state, drafts, idx)
            accepted = [rng.randint(0, T) for _ in rows]
            sequential = plain.clone()
            for t in range(T):
                expected = layer.standard(sequential, {n: x[:, t] for n, x in drafts.items()}, idx)
                assert_close(got[:, t], expected, "random verify")
                for r, slot in enumerate(rows):
                    if accepted[r] == t + 1:
                        plain[slot] = sequential[slot]
            layer.kind.commit(state, indices(accepted), idx, refold=rng.random() < 0.5)
        else:
            layer.kind.flush(state, idx, refold=rng.random() < 0.5)
        assert bool((state.committed < state.flush_at).all())
        assert_close(layer.kind.materialize(state, indices(range(slots))), plain, "random program state")


def check_errors(layer: Layer) -> None:
    """Each malformed call raises a ValueError naming the argument; nothing changes."""
    config = ReplaySSMConfig(window=4, max_draft_tokens=2)
    state = layer.replay_state(3, config)
    idx = indices([0, 2])
    for _ in range(3):
        layer.step(state, layer.tokens(2), idx)
    before = snapshot(state)
    good = layer.tokens(2)
    kw = dict(A_log=layer.A_log, dt_bias=layer.dt_bias, state_indices=idx)

    def rejected(match, fn, *args, **kwargs):
        with pytest.raises(ValueError, match=match):
            fn(*args, **kwargs)
        assert_unchanged(state, before)

    step = layer.kind.step
    rejected("^q:", step, state, **{**good, "q": good["q"][:, :, :-1]}, **kw)
    rejected("^k:", step, state, **{**good, "k": good["k"][:1]}, **kw)
    rejected("^v:", step, state, **{**good, "v": good["v"][..., :-1]}, **kw)
    rejected("^a:", step, state, **{**good, "a": good["a"][..., None]}, **kw)
    rejected("^b:", step, state, **{**good, "b": good["b"][:, :-1]}, **kw)
    rejected("^v:", step, state, **{**good, "v": good["v"].to(torch.int64)}, **kw)
    rejected("^A_log:", step, state, **good, **{**kw, "A_log": layer.A_log[:-1]})
    rejected("^dt_bias:", step, state, **good, **{**kw, "dt_bias": layer.dt_bias[:-1]})
    rejected("^scale:", step, state, **good, **kw, scale=-1.0)
    rejected("^state_indices:", step, state, **good, **{**kw, "state_indices": indices([0, 3])})
    rejected("^state_indices:", step, state, **good, **{**kw, "state_indices": indices([1, 1])})
    rejected("^state_indices:", step, state, **good, **{**kw, "state_indices": idx.float()})
    rejected("^state:", step, state.checkpoint, **good, **kw)
    other = GDN if layer.kind is KDA else KDA
    rejected("^state:", other.step, state, **good, **kw)
    # One draft more than the ring can hold behind the committed entries.
    T = state.capacity - int(state.committed[idx.long()].min()) + 1
    rejected("^q:", layer.kind.verify, state, **layer.tokens(2, T), **kw)
    rejected("^q:", layer.kind.verify, state, **layer.tokens(2, 0), **kw)
    commit = layer.kind.commit
    rejected("^num_accepted:", commit, state, indices([1, -1]), idx)
    rejected("^num_accepted:", commit, state, indices([state.capacity, 0]), idx)
    rejected("^num_accepted:", commit, state, torch.ones(2), idx)
    rejected("^state_indices:", layer.kind.flush, state, indices([[0]]))
    rejected("^state_indices:", layer.kind.materialize, state, indices([5]))
    rejected("^ssm_state:", layer.kind.standard, state.checkpoint[0], **good, **kw)


class DeltaRuleReferenceChecks:
    """The test suite of one delta-rule kind; a test module subclasses it with ``kind`` set."""

    kind: SimpleNamespace

    def layer(self, HV=4, H=2, d_k=6, d_v=5, seed=0, dtype=F64) -> Layer:
        return Layer(self.kind, HV, H, d_k, d_v, torch.Generator().manual_seed(seed), dtype)

    @pytest.mark.parametrize("window", [1, 3, 16])
    @pytest.mark.parametrize("stagger", [True, False])
    def test_replay_equals_recurrence(self, window, stagger):
        config = ReplaySSMConfig(window=window, flush_stagger=stagger)
        # Rows join a batch with probability 0.8: 6.5 windows of steps give each slot >= 5 windows.
        slots, steps = 5, int(6.5 * window) + 3
        flushes = check_against_recurrence(self.layer(seed=window), config, steps, slots, seed=window)
        assert flushes >= 4 * slots, f"expected about 5 flushes per slot, saw {flushes} in all"

    @pytest.mark.parametrize("T", range(1, 9))
    def test_verify_equals_sequential(self, T):
        config = ReplaySSMConfig(window=8, max_draft_tokens=8)
        flushes = check_verify(self.layer(seed=T), config, T, seed=100 + T)
        assert flushes > 0, "some commit should cross a flush boundary"

    def test_refold(self):
        check_refold(self.layer(seed=7), ReplaySSMConfig(window=6, max_draft_tokens=2, flush_stagger=False), seed=7)

    def test_random_small_shapes(self):
        for case in range(16):
            gen = torch.Generator().manual_seed(case)
            H = [1, 2][case % 2]
            HV = H * [1, 2, 4][case % 3]
            d_k, d_v = (int(x) for x in torch.randint(1, 6, (2,), generator=gen))
            window = [1, 2, 5, 8][case % 4]
            drafts = int(torch.randint(0, min(window, 4) + 1, (1,), generator=gen))
            config = ReplaySSMConfig(window=window, max_draft_tokens=drafts, flush_stagger=case % 3 != 0)
            check_random_program(self.layer(HV, H, d_k, d_v, seed=case), config, seed=case)

    def test_errors(self):
        check_errors(self.layer())

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_low_precision_activations(self, dtype):
        """Outputs come back in ``v.dtype``, the checkpoint stays in its own; with the contract's
        fp32 rings the replay stays within rounding of the float64 recurrence on the same inputs."""
        layer = self.layer(seed=3, dtype=dtype)
        state = layer.replay_state(2, ReplaySSMConfig(window=4), float64_rings=False)
        state.checkpoint = state.checkpoint.float()
        plain = layer.plain_state(2)
        idx = indices([1, 0])
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
        for _ in range(10):
            inputs = layer.tokens(2)
            expected = layer.standard(plain, inputs, idx)
            got = layer.step(state, inputs, idx)
            assert got.dtype == dtype and state.checkpoint.dtype == torch.float32
            torch.testing.assert_close(got.double(), expected.double(), rtol=tol, atol=tol)
