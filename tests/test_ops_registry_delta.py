"""``torch.ops.replayssm.{gdn,kda}_*``: CPU dispatch is the reference, fake impls trace under
torch.compile(fullgraph=True), and the public wrappers reject bad input without side effects."""

from __future__ import annotations

import pytest
import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.gdn import gdn_replay_step, gdn_standard_step
from trtllm_replayssm.ops.gdn import reference as gdn_ref
from trtllm_replayssm.ops.gdn._wrappers import default_refold
from trtllm_replayssm.ops.gdn.state import DeltaRuleReplayState
from trtllm_replayssm.ops.kda import kda_replay_step
from trtllm_replayssm.ops.kda import reference as kda_ref


def _setup(per_channel, batch=3, slots=4, HV=4, H=2, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    state = DeltaRuleReplayState.allocate(slots, HV, H, d, d, ReplaySSMConfig(window=3), per_channel_decay=per_channel)
    x = {"q": torch.randn(batch, H, d, generator=gen), "k": torch.randn(batch, H, d, generator=gen),
         "v": torch.randn(batch, HV, d, generator=gen),
         "a": torch.randn(batch, HV, d, generator=gen) if per_channel else torch.randn(batch, HV, generator=gen),
         "b": torch.randn(batch, HV, generator=gen), "A_log": torch.randn(HV, generator=gen),
         "dt_bias": torch.randn(HV * d if per_channel else HV, generator=gen)}
    return state, x, torch.tensor([2, -1, 0], dtype=torch.int32)


@pytest.mark.parametrize("per_channel", [False, True])
def test_cpu_dispatch_is_the_reference(per_channel):
    state, x, idx = _setup(per_channel)
    oracle = state.clone()
    op, ref = (kda_replay_step, kda_ref.kda_replay_step) if per_channel else (gdn_replay_step, gdn_ref.gdn_replay_step)
    for _ in range(4):
        torch.testing.assert_close(op(state, **x, state_indices=idx),
                                   ref(oracle, **x, state_indices=idx, refold=False), rtol=0, atol=0)
    for name, t in state.tensors().items():
        assert torch.equal(t, getattr(oracle, name)), name


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_default_flush_fold_per_kind(per_channel):
    """``refold=None`` (the ops' default) on a checkpoint-only state: both kinds fold the cached
    ``u`` at every batch (their faster flushes). With ``ring_u`` made inconsistent with the raw
    ring the two folds' checkpoints differ, and the default's (batch 3) equals the cached-``u``
    fold bit for bit."""
    op = kda_replay_step if per_channel else gdn_replay_step
    state, x, idx = _setup(per_channel)
    for _ in range(2):
        op(state, **x, state_indices=idx, refold=True)
    state.ring_u.add_(1.0)
    folds = {}
    for refold in (None, False, True):
        st = state.clone()
        op(st, **x, state_indices=idx, refold=refold)
        assert int(st.committed[0]) == 0, "the step was expected to flush slot 0"
        folds[refold] = st.checkpoint
    assert not torch.allclose(folds[False], folds[True], atol=1e-3)
    assert torch.equal(folds[None], folds[False])
    assert all(default_refold(per_channel, batch) is False for batch in (1, 33, 64, 128, 256, 512))


def test_standard_op_cpu():
    _, x, idx = _setup(False)
    ssm, oracle = torch.randn(4, 4, 8, 8), None
    oracle = ssm.clone()
    got = gdn_standard_step(ssm, **x, state_indices=idx)
    want = gdn_ref.gdn_standard_step(oracle, **x, state_indices=idx)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(ssm, oracle, rtol=0, atol=0)


def test_opcheck_fake_impls():
    state, x, idx = _setup(False)
    args = (state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
            state.committed, state.flush_at, state.window, x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"],
            x["dt_bias"], idx, -1, None, True)
    torch.library.opcheck(torch.ops.replayssm.gdn_replay_step.default, args,
                          test_utils=("test_schema", "test_faketensor"))


def test_compile_fullgraph():
    state, x, idx = _setup(True)
    oracle = state.clone()

    @torch.compile(fullgraph=True, backend="aot_eager")
    def two_steps(st, inputs):
        o1 = kda_replay_step(st, **inputs, state_indices=idx)
        return o1 + kda_replay_step(st, **inputs, state_indices=idx)

    got = two_steps(state, x)
    want = kda_ref.kda_replay_step(oracle, **x, state_indices=idx) + kda_ref.kda_replay_step(oracle, **x, state_indices=idx)
    torch.testing.assert_close(got, want)
    assert torch.equal(state.committed, oracle.committed)


@pytest.mark.parametrize("bad,match", [
    ({"q": torch.randn(3, 2, 4)}, "q"), ({"v": torch.randn(3, 4, 7)}, "v"), ({"a": torch.randn(3, 4, 8)}, "a"),
    ({"A_log": torch.randn(3)}, "A_log"), ({"dt_bias": torch.randn(5)}, "dt_bias"), ({"refold": 1}, "refold"), ({"refold": "u"}, "refold"),
])
def test_bad_input_rejected_without_change(bad, match):
    state, x, idx = _setup(False)
    before = state.clone()
    kwargs = {**x, **bad}
    with pytest.raises(ValueError, match=match):
        gdn_replay_step(state, **kwargs, state_indices=idx)
    for name, t in state.tensors().items():
        assert torch.equal(t, getattr(before, name)), name


def test_kind_mismatch_rejected():
    state, x, idx = _setup(True)
    with pytest.raises(ValueError, match="state"):
        gdn_replay_step(state, **{**x, "a": torch.randn(3, 4), "dt_bias": torch.randn(4)}, state_indices=idx)


def test_cache_reads_delta_rule_configs():
    from transformers import KimiLinearConfig, Qwen3NextConfig
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config

    from trtllm_replayssm.cache import ReplayStateCache

    qwen = Qwen3NextConfig(num_hidden_layers=4)  # layers 0-2 linear attention, 3 full attention
    cache = ReplayStateCache.from_hf_config(qwen, slots=2)
    assert sorted(cache.states) == [i for i, t in enumerate(qwen.layer_types) if t == "linear_attention"] == [0, 1, 2]
    st = cache.layer(0)
    assert tuple(st.checkpoint.shape) == (2, 32, 128, 128) and tuple(st.ring_k.shape[:2]) == (2, 16)
    assert not st.per_channel_decay
    q35 = ReplayStateCache.from_hf_config(Qwen3_5Config(text_config={"num_hidden_layers": 4}), slots=1)
    assert sorted(q35.states) == [0, 1, 2]
    kimi = ReplayStateCache.from_hf_config(KimiLinearConfig(num_hidden_layers=2), slots=1)
    st = kimi.layer(0)
    assert st.per_channel_decay and tuple(st.ring_g.shape) == (1, 32, 16, 128)
