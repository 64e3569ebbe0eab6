"""Bad input to the public API is refused with a ValueError that names the argument, before
anything in a state, a cache or an output directory is written (CPU: the reference paths)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trtllm_replayssm.cache import ReplayStateCache, SSMLayerSpec, register_state_allocator, STATE_ALLOCATORS
from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.gdn import DeltaRuleReplayState, gdn_replay_materialize, gdn_replay_step, gdn_standard_step
from trtllm_replayssm.ops.gdn.reference import gdn_replay_commit, gdn_replay_flush
from trtllm_replayssm.ops.kda import kda_replay_step
from trtllm_replayssm.ops.kda.state import allocate as kda_allocate
from trtllm_replayssm.ops.mamba2 import (
    Mamba2ReplayState, mamba2_replay_materialize, mamba2_replay_step, mamba2_standard_step,
)

H, P, N, G, SLOTS, BATCH = 4, 8, 8, 2, 4, 2
CFG = ReplaySSMConfig(window=4, max_draft_tokens=2)


def _random(state):
    gen = torch.Generator().manual_seed(0)
    for t in state.tensors().values():
        if t.is_floating_point():
            t.copy_(torch.randn(t.shape, generator=gen))
    return state


def _mamba2_state():
    return _random(Mamba2ReplayState.allocate(SLOTS, H, P, N, G, CFG))


def _mamba2_inputs(batch=BATCH):
    gen = torch.Generator().manual_seed(1)
    return dict(x=torch.randn(batch, H, P, generator=gen), dt=torch.randn(batch, H, generator=gen),
                A=-torch.rand(H, generator=gen), B=torch.randn(batch, G, N, generator=gen),
                C=torch.randn(batch, G, N, generator=gen))


def _delta_state(kda=False):
    if kda:
        return _random(kda_allocate(SLOTS, H, 16, 16, CFG))
    return _random(DeltaRuleReplayState.allocate(SLOTS, H, 2, 16, 16, CFG))


def _delta_inputs(kda=False, batch=BATCH):
    gen = torch.Generator().manual_seed(2)
    hk = H if kda else 2
    return dict(q=torch.randn(batch, hk, 16, generator=gen), k=torch.randn(batch, hk, 16, generator=gen),
                v=torch.randn(batch, H, 16, generator=gen),
                a=torch.randn((batch, H, 16) if kda else (batch, H), generator=gen),
                b=torch.randn(batch, H, generator=gen), A_log=torch.randn(H, generator=gen))


def _unchanged(state, call, match):
    before = {k: v.clone() for k, v in state.tensors().items()}
    with pytest.raises(ValueError, match=match):
        call()
    for name, t in state.tensors().items():
        assert torch.equal(t, before[name]), f"{name} was written by a refused call"


# -- states that break their layout: refused before the rings are written ------------------------------


@pytest.mark.parametrize("field,make,match", [
    ("ring_B", lambda s: s.ring_B[:, :, :3].contiguous(), r"^state\.ring_B: expected a floating-point tensor of shape"),
    ("ring_dt", lambda s: s.ring_dt[:, :, :3].contiguous(), r"^state\.ring_dt: expected"),
    ("ring_x", lambda s: s.ring_x[:, :2].contiguous(), r"^state\.ring_x: expected"),
    ("committed", lambda s: s.committed[:2].clone(), r"^state\.committed: expected int32 \[slots=4\]"),
    ("flush_at", lambda s: s.flush_at.to(torch.int64), r"^state\.flush_at: expected int32"),
    ("checkpoint", lambda s: s.checkpoint.to(torch.int32), r"^state\.checkpoint: expected a 4-d floating-point"),
    ("window", lambda s: 0, r"^state\.window: expected an int in \[1, capacity=6\]"),
    ("window", lambda s: 7, r"^state\.window: expected an int in \[1, capacity=6\]"),
    ("ring_B", lambda s: s.ring_B.to(torch.int16), r"^state\.ring_B: expected a floating-point tensor"),
])
def test_mamba2_malformed_state_is_refused_before_any_write(field, make, match):
    state = _mamba2_state()
    setattr(state, field, make(state))
    _unchanged(state, lambda: mamba2_replay_step(state, **_mamba2_inputs()), match)
    with pytest.raises(ValueError, match=match):
        mamba2_replay_materialize(state, A=-torch.rand(H))


@pytest.mark.parametrize("kda", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("field,make,match", [
    ("ring_beta", lambda s: s.ring_beta[:, :, :3].contiguous(), r"^state\.ring_beta: expected"),
    ("ring_u", lambda s: s.ring_u[:, :, :3].contiguous(), r"^state\.ring_u: expected"),
    ("ring_v", lambda s: s.ring_v[:, :2].contiguous(), r"^state\.ring_v: expected"),
    ("committed", lambda s: s.committed[:2].clone(), r"^state\.committed: expected int32 \[slots=4\]"),
    ("window", lambda s: 0, r"^state\.window: expected an int"),
])
def test_delta_malformed_state_is_refused_before_any_write(kda, field, make, match):
    state = _delta_state(kda)
    setattr(state, field, make(state))
    step = kda_replay_step if kda else gdn_replay_step
    _unchanged(state, lambda: step(state, **_delta_inputs(kda)), match)


def test_delta_state_key_heads_must_divide_value_heads():
    state = _delta_state()
    state.ring_k = torch.zeros(SLOTS, 3, state.capacity, 16)
    _unchanged(state, lambda: gdn_replay_step(state, **_delta_inputs()), r"^state\.ring_k: its 3 key heads")


# -- scalar arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize("pad", [1.5, "x", True, None])
def test_pad_slot_id_must_be_an_int(pad):
    # 1.5 used to be truncated to slot 1, whose row then got a zero output and no update.
    state = _mamba2_state()
    idx = torch.tensor([1, 2])
    _unchanged(state, lambda: mamba2_replay_step(state, **_mamba2_inputs(), state_indices=idx, pad_slot_id=pad),
               r"^pad_slot_id: expected an int")
    ss = torch.randn(SLOTS, H, P, N)
    before = ss.clone()
    with pytest.raises(ValueError, match=r"^pad_slot_id: expected an int"):
        mamba2_standard_step(ss, **_mamba2_inputs(), state_indices=idx, pad_slot_id=pad)
    assert torch.equal(ss, before)
    with pytest.raises(ValueError, match=r"^pad_slot_id: expected an int"):
        mamba2_replay_materialize(state, idx, pad, A=-torch.rand(H))
    delta = _delta_state()
    _unchanged(delta, lambda: gdn_replay_step(delta, **_delta_inputs(), state_indices=idx, pad_slot_id=pad),
               r"^pad_slot_id: expected an int")
    with pytest.raises(ValueError, match=r"^pad_slot_id: expected an int"):
        gdn_replay_materialize(delta, idx, pad)


def test_numpy_and_tensor_free_int_pad_slot_ids_still_work():
    np = pytest.importorskip("numpy")
    state = _mamba2_state()
    y = mamba2_replay_step(state, **_mamba2_inputs(), state_indices=torch.tensor([1, 3]), pad_slot_id=np.int64(3))
    assert torch.equal(y[1], torch.zeros_like(y[1])) and not torch.equal(y[0], torch.zeros_like(y[0]))


@pytest.mark.parametrize("kwargs,match", [
    (dict(dt_softplus="no"), r"^dt_softplus: expected a bool"),
    (dict(dt_softplus=1), r"^dt_softplus: expected a bool"),
    (dict(dt_min=float("nan")), r"^dt_min: expected a float \(not NaN\)"),
    (dict(dt_max=float("nan")), r"^dt_max: expected a float \(not NaN\)"),
])
def test_mamba2_flags_and_clamps(kwargs, match):
    state = _mamba2_state()
    _unchanged(state, lambda: mamba2_replay_step(state, **_mamba2_inputs(), **kwargs), match)
    ss = torch.randn(SLOTS, H, P, N)
    before = ss.clone()
    with pytest.raises(ValueError, match=match):
        mamba2_standard_step(ss, **_mamba2_inputs(), **kwargs)
    assert torch.equal(ss, before)


def test_integer_standard_states_are_refused():
    ss = torch.zeros(SLOTS, H, P, N, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^ssm_state: expected a floating-point tensor, got torch.int32"):
        mamba2_standard_step(ss, **_mamba2_inputs())
    assert not ss.any()
    ds = torch.zeros(SLOTS, H, 16, 16, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^ssm_state: expected a floating-point tensor"):
        gdn_standard_step(ds, **_delta_inputs())
    assert not ds.any()


@pytest.mark.parametrize("change,match", [
    (dict(A_log=torch.tensor([1, 2, 3, 4])), r"^A_log: expected a floating-point tensor"),
    (dict(dt_bias=torch.tensor([1, 2, 3, 4])), r"^dt_bias: expected a floating-point tensor"),
    (dict(scale=float("inf")), r"^scale: expected a positive finite float"),
    (dict(state_indices=[0, 1]), r"^state_indices: expected"),
])
def test_delta_step_arguments(change, match):
    state = _delta_state()
    _unchanged(state, lambda: gdn_replay_step(state, **{**_delta_inputs(), **change}), match)


def test_delta_refold_must_be_a_bool_everywhere():
    state = _delta_state()
    idx = torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"^refold: expected a bool"):
        gdn_replay_materialize(state, idx, refold="no")
    _unchanged(state, lambda: gdn_replay_flush(state, idx, refold=1), r"^refold: expected a bool")
    _unchanged(state, lambda: gdn_replay_commit(state, torch.ones(2, dtype=torch.int32), idx, refold="yes"),
               r"^refold: expected a bool")


# -- the cache ----------------------------------------------------------------------------------------


def _cache(slots=4, **kwargs):
    return ReplayStateCache({0: SSMLayerSpec.mamba2(4, 8, 16, 2)}, slots, **kwargs)


@pytest.mark.parametrize("slot", [1.7, torch.tensor(2.9), torch.tensor(True), "1", torch.tensor([0, 1]), None])
def test_cache_slot_ids_must_be_ints(slot):
    # A float used to be truncated: free(1.7) freed slot 1, reset(tensor(2.9)) zeroed slot 2.
    cache = _cache()
    for _ in range(3):
        cache.allocate()
    state = _random(cache.layer(0))
    before = {k: v.clone() for k, v in state.tensors().items()}
    for call in (cache.free, cache.reset, cache.is_allocated):
        with pytest.raises(ValueError, match=r"^slot: expected an int"):
            call(slot)
    assert cache.num_free == 1 and all(torch.equal(t, before[k]) for k, t in state.tensors().items())
    with pytest.raises(ValueError, match=r"^slots: expected int slot ids"):
        state.reset_slots([1.5])
    assert all(torch.equal(t, before[k]) for k, t in state.tensors().items())


def test_cache_integer_slot_ids_of_every_form_still_work():
    np = pytest.importorskip("numpy")
    cache = _cache()
    a, b = cache.allocate(), cache.allocate()
    assert cache.is_allocated(np.int64(a)) and cache.layer(0).reset_slots(np.array([2, 3])) is None
    assert ReplaySSMConfig(window=4, flush_stagger=True).first_flush_at(np.int32(3)) == 1
    assert cache.is_allocated(torch.tensor(b, dtype=torch.int32)) and not cache.is_allocated(3)
    cache.free(torch.tensor([a]))
    assert not cache.is_allocated(a)
    cache.layer(0).reset_slots(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"^slot: slot 4 out of range"):
        cache.is_allocated(4)


@pytest.mark.parametrize("kwargs,match", [
    (dict(activation_dtype=torch.int32), r"^activation_dtype: expected a floating-point torch.dtype"),
    (dict(activation_dtype="bf16"), r"^activation_dtype: expected"),
    (dict(device="foo"), r"^device: expected a torch.device or a device string, got 'foo'"),
    (dict(config={"window": 8}), r"^config: expected a ReplaySSMConfig or None, got dict"),
])
def test_cache_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _cache(**kwargs)


@pytest.mark.parametrize("layers,match", [
    ([SSMLayerSpec.mamba2(4, 8, 16, 2)], r"^layers: expected a mapping of layer index -> SSMLayerSpec, got list"),
    ({-1: SSMLayerSpec.mamba2(4, 8, 16, 2)}, r"^layers: expected layer indices that are ints >= 0, got -1"),
    ({"a": SSMLayerSpec.mamba2(4, 8, 16, 2)}, r"^layers: expected layer indices that are ints >= 0, got 'a'"),
])
def test_cache_layers_argument(layers, match):
    with pytest.raises(ValueError, match=match):
        ReplayStateCache(layers, 2)


@pytest.mark.parametrize("args,kwargs,match", [
    (("mamba2", {"heads": 4}), {}, r"^SSMLayerSpec\.dims: a mamba2 layer expects .*missing \['head_dim', 'd_state'"),
    (("gdn", {"v_heads": 4, "k_heads": 2, "d_k": 8, "d_v": 8, "bogus": 1}), {}, r"unknown \['bogus'\]"),
    (("kda", ["heads"]), {}, r"^SSMLayerSpec\.dims: expected a mapping"),
    (("kda", {"heads": 4, "d_k": 8, "d_v": 8}), dict(d_conv=True), r"^SSMLayerSpec\.d_conv: expected an int >= 1"),
    (("kda", {"heads": 4, "d_k": 8, "d_v": 8}), dict(conv_dim=2.5), r"^SSMLayerSpec\.conv_dim: expected an int >= 0"),
    (("kda", {"heads": 4, "d_k": 8, "d_v": 8}), dict(conv_dim="8"), r"^SSMLayerSpec\.conv_dim: expected"),
])
def test_layer_spec_checks_dims_and_conv_fields(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        SSMLayerSpec(*args, **kwargs)


def test_layer_spec_accepts_kda_key_heads_and_unchecked_new_kinds():
    SSMLayerSpec("kda", {"heads": 4, "d_k": 8, "d_v": 8, "k_heads": 2})
    register_state_allocator("toy", STATE_ALLOCATORS["mamba2"])
    try:
        SSMLayerSpec("toy", {"anything": 3})  # a kind registered without its dims names is not checked
        register_state_allocator("toy", STATE_ALLOCATORS["mamba2"], dims=(("heads",), ()))
        with pytest.raises(ValueError, match=r"missing \['heads'\]"):
            SSMLayerSpec("toy", {"anything": 3})
    finally:
        STATE_ALLOCATORS.pop("toy")
        register_state_allocator.__globals__["STATE_DIMS"].pop("toy", None)


@pytest.mark.parametrize("budget", [-100, "abc", 1.5, True])
def test_slots_for_bytes_budget(budget):
    with pytest.raises(ValueError, match=r"^budget_bytes: expected an int >= 0"):
        _cache().slots_for_bytes(budget)


def test_from_hf_config_names_hf_config():
    class Lacking:
        model_type = "nemotron_h"

    with pytest.raises(ValueError, match=r"^hf_config: a 'nemotron_h' config lacks a field its reader needs"):
        ReplayStateCache.from_hf_config(Lacking(), 2)
    from transformers import NemotronHConfig

    no_ssm = NemotronHConfig(hidden_size=64, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=8, n_groups=2,
                             layers_block_type=["mlp", "full_attention"])
    with pytest.raises(ValueError, match=r"^hf_config: this 'nemotron_h' config has no SSM layers"):
        ReplayStateCache.from_hf_config(no_ssm, 2)


# -- the configuration --------------------------------------------------------------------------------


def test_config_from_yaml_sources(tmp_path):
    with pytest.raises(ValueError, match=r"^source: no such YAML file: '.*nope\.yaml'"):
        ReplaySSMConfig.from_yaml(str(tmp_path / "nope.yaml"))
    with pytest.raises(ValueError, match=r"^source: no such YAML file"):
        ReplaySSMConfig.from_yaml(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match=r"^source: expected a YAML file path or YAML text, got int"):
        ReplaySSMConfig.from_yaml(8)
    with pytest.raises(ValueError, match=r"^source: the text given is not valid YAML"):
        ReplaySSMConfig.from_yaml("window: [8\nmax_draft_tokens: 2")
    colon = tmp_path / "cfg:v1.yaml"  # a name with a colon is still a path when the file exists
    colon.write_text("replayssm:\n  window: 8\n")
    assert ReplaySSMConfig.from_yaml(str(colon)).window == 8
    assert ReplaySSMConfig.from_yaml("window: 8").window == 8
    bad = tmp_path / "bad.yml"
    bad.write_text("window: [8\n")
    with pytest.raises(ValueError, match=r"^source: '.*bad\.yml' is not valid YAML"):
        ReplaySSMConfig.from_yaml(bad)


@pytest.mark.parametrize("slot", [-1, 1.5, "a", True])
def test_first_flush_at_slot(slot):
    with pytest.raises(ValueError, match=r"^slot: expected an int >= 0"):
        ReplaySSMConfig(window=16, flush_stagger=True).first_flush_at(slot)


def test_from_checkpoint_spec_of_a_non_string():
    with pytest.raises(ValueError, match=r"^ssm checkpoint: unknown value \['fp32'\]"):
        ReplaySSMConfig.from_checkpoint_spec(["fp32"])


def test_dataclass_replace_keeps_checks():
    state = _mamba2_state()
    broken = dataclasses.replace(state, window=9)
    _unchanged(broken, lambda: mamba2_replay_step(broken, **_mamba2_inputs()), r"^state\.window")


# -- the decode-side mixers ---------------------------------------------------------------------------

_MAMBA2_MIXER = dict(hidden_size=32, num_heads=4, head_dim=8, d_state=16, n_groups=2, d_conv=4, slots=3)


@pytest.mark.parametrize("change,match", [
    (dict(dt_limit=(1.0, 0.5)), r"^dt_limit: expected \(dt_min, dt_max\) with 0 <= dt_min <= dt_max"),
    (dict(dt_limit=(0.0, float("nan"))), r"^dt_limit: expected"),
    (dict(dt_limit=(-1.0, 2.0)), r"^dt_limit: expected"),
    (dict(norm_group_size=5), r"^norm_group_size: expected None or a positive divisor of num_heads \* head_dim = 32"),
    (dict(norm_group_size=0), r"^norm_group_size: expected"),
    (dict(norm_group_size=-4), r"^norm_group_size: expected"),
    (dict(config={}), r"^config: expected a ReplaySSMConfig or None, got dict"),
    (dict(n_groups=0), r"^n_groups: expected a positive int, got 0"),
    (dict(slots=-1), r"^slots: expected a positive int, got -1"),
    (dict(dtype=torch.int32), r"^dtype: expected a floating-point torch.dtype"),
])
def test_mamba2_mixer_constructor_arguments(change, match):
    # dt_limit (1.0, 0.5) and norm_group_size 5 used to be accepted and fail in decode, after the
    # conv state and the rings had been written.
    from trtllm_replayssm.layers.mamba2 import ReplayMamba2Mixer

    with pytest.raises(ValueError, match=match):
        ReplayMamba2Mixer(**{**_MAMBA2_MIXER, **change})


@pytest.mark.parametrize("kind,change,match", [
    ("gdn", dict(num_k_heads=0), r"^num_k_heads: expected a positive int, got 0"),
    ("gdn", dict(config={"window": 4}), r"^config: expected a ReplaySSMConfig or None, got dict"),
    ("kda", dict(num_heads=0), r"^num_heads: expected a positive int, got 0"),
    ("kda", dict(dtype="bf16"), r"^dtype: expected a floating-point torch.dtype"),
])
def test_delta_mixer_constructor_arguments(kind, change, match):
    from trtllm_replayssm.layers.gdn import ReplayGatedDeltaNet
    from trtllm_replayssm.layers.kda import ReplayKimiDeltaAttention

    base = dict(hidden_size=32, num_k_heads=2, num_v_heads=4, head_k_dim=8, head_v_dim=8, d_conv=4, slots=3) \
        if kind == "gdn" else dict(hidden_size=32, num_heads=2, head_dim=8, d_conv=4, slots=3)
    with pytest.raises(ValueError, match=match):
        (ReplayGatedDeltaNet if kind == "gdn" else ReplayKimiDeltaAttention)(**{**base, **change})


def test_mixer_slot_ids_and_empty_prompts():
    from trtllm_replayssm.layers.mamba2 import ReplayMamba2Mixer

    mixer = ReplayMamba2Mixer(**_MAMBA2_MIXER)
    mixer.decode(torch.randn(3, 32))
    before = {k: v.clone() for k, v in {**mixer.replay_state.tensors(), "conv": mixer.conv_state}.items()}
    for slots in ([1.7], torch.tensor([2.9]), ["0"]):
        with pytest.raises(ValueError, match=r"^slots: expected int slot ids"):
            mixer.reset_slots(slots)
    with pytest.raises(ValueError, match=r"^hidden: expected \[batch, seq >= 1, hidden_size=32\], got \(3, 0, 32\)"):
        mixer.prefill(torch.randn(3, 0, 32))
    after = {**mixer.replay_state.tensors(), "conv": mixer.conv_state}
    assert all(torch.equal(after[k], v) for k, v in before.items())
    mixer.reset_slots(torch.tensor([1]))  # integer tensors still name slots
    assert not mixer.conv_state[1].any() and mixer.conv_state[0].any()


# -- number formats -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_quantizers_refuse_non_finite_input(bad):
    # One NaN or infinity used to become the derived scale: no value of the tensor decoded.
    from trtllm_replayssm.formats import fp8_quantize, nvfp4_quantize

    x = torch.randn(2, 32)
    x[1, 3] = bad
    with pytest.raises(ValueError, match=r"^x: expected finite values"):
        nvfp4_quantize(x)
    with pytest.raises(ValueError, match=r"^x: expected finite values"):
        fp8_quantize(x)


def test_format_codecs_refuse_what_they_cannot_encode_or_decode():
    from trtllm_replayssm.formats import fp8_dequantize, fp8_quantize, nvfp4_dequantize, nvfp4_quantize
    from trtllm_replayssm.formats.nvfp4 import e2m1_decode, e2m1_encode
    from trtllm_replayssm.formats.stochastic import stochastic_round

    with pytest.raises(ValueError, match=r"^x: expected values that are not NaN"):
        e2m1_encode(torch.tensor([float("nan"), 1.0]))
    assert e2m1_encode(torch.tensor([float("inf")])).item() == 7  # saturation, as documented
    with pytest.raises(ValueError, match=r"^codes: expected 4-bit codes in \[0, 16\), got 17"):
        e2m1_decode(torch.tensor([3, 17], dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"^codes: expected a uint8 tensor"):
        e2m1_decode([1, 2])
    with pytest.raises(ValueError, match=r"^x: expected a float32, float16 or bfloat16 tensor \[\.\.\., n\] with n >= 1"):
        fp8_quantize(torch.zeros(3, 0))
    with pytest.raises(ValueError, match=r"^x: expected a non-empty tensor"):
        nvfp4_quantize(torch.zeros(0, 16))
    with pytest.raises(ValueError, match=r"^offset, stream: .*pass a seed"):
        fp8_quantize(torch.randn(2, 8), offset=5)
    q, scale = fp8_quantize(torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"^dtype: expected a floating-point torch.dtype"):
        fp8_dequantize(q, scale, torch.int32)
    with pytest.raises(ValueError, match=r"^scale: expected positive finite values"):
        fp8_dequantize(q, scale * float("nan"))
    t = nvfp4_quantize(torch.randn(2, 32))
    with pytest.raises(ValueError, match=r"^dtype: expected a floating-point torch.dtype"):
        nvfp4_dequantize(t.packed, t.block_scale, t.global_scale, "float16")
    with pytest.raises(ValueError, match=r"^offset: expected an int in \[-2\*\*63, 2\*\*63\)"):
        stochastic_round(torch.randn(4), torch.bfloat16, 1, 2**63)


# -- speculative decoding and the raw ops (CPU: the reference) ------------------------------------------


def test_delta_step_refuses_refold_before_the_verify_writes():
    # The commit refused a bad refold only after the verify had written the rings.
    from trtllm_replayssm.ops.gdn.reference import gdn_replay_step as reference_step
    from trtllm_replayssm.ops.kda.reference import kda_replay_step as kda_reference_step

    state = _delta_state()
    _unchanged(state, lambda: reference_step(state, **_delta_inputs(), refold=None), r"^refold: expected a bool")
    kda = _delta_state(kda=True)
    _unchanged(kda, lambda: kda_reference_step(kda, **_delta_inputs(kda=True), refold="yes"), r"^refold: expected a bool")


@pytest.mark.parametrize("kind", ["mamba2", "gdn", "kda"])
def test_commit_refuses_more_than_the_verified_drafts(kind):
    # With num_drafts (the verify's T) a commit of more entries than were verified is refused:
    # it would fold ring entries that hold no verified draft.
    from trtllm_replayssm.ops.gdn.reference import gdn_replay_commit, gdn_replay_verify
    from trtllm_replayssm.ops.kda.reference import kda_replay_commit, kda_replay_verify
    from trtllm_replayssm.ops.mamba2.reference import mamba2_replay_commit, mamba2_replay_verify

    if kind == "mamba2":
        state = _mamba2_state()
        inputs = {k: v.unsqueeze(1).expand(-1, 2, *v.shape[1:]).contiguous() if k != "A" else v
                  for k, v in _mamba2_inputs().items()}
        mamba2_replay_verify(state, **inputs)
        commit = lambda n, t: mamba2_replay_commit(state, n, A=inputs["A"], num_drafts=t)  # noqa: E731
    else:
        kda = kind == "kda"
        state = _delta_state(kda)
        inputs = {k: v.unsqueeze(1).expand(-1, 2, *v.shape[1:]).contiguous() if k != "A_log" else v
                  for k, v in _delta_inputs(kda).items()}
        (kda_replay_verify if kda else gdn_replay_verify)(state, **inputs)
        commit = lambda n, t: (kda_replay_commit if kda else gdn_replay_commit)(state, n, num_drafts=t)  # noqa: E731
    three = torch.full((BATCH,), 3, dtype=torch.int32)
    _unchanged(state, lambda: commit(three, 2), r"^num_accepted: expected values <= num_drafts=2")
    for bad in ("2", 0, True):
        _unchanged(state, lambda: commit(three, bad), r"^num_drafts: expected None or an int >= 1")
    commit(torch.full((BATCH,), 2, dtype=torch.int32), 2)
    assert state.committed[:BATCH].tolist() == [2, 2]  # the verified drafts commit


def test_mamba2_reference_verify_checks_flags_and_clamps():
    from trtllm_replayssm.ops.mamba2.reference import mamba2_replay_verify

    state = _mamba2_state()
    inputs = {k: v.unsqueeze(1) if k != "A" else v for k, v in _mamba2_inputs().items()}
    _unchanged(state, lambda: mamba2_replay_verify(state, **inputs, dt_min=float("nan")), r"^dt_min: expected a float")
    _unchanged(state, lambda: mamba2_replay_verify(state, **inputs, dt_softplus="no"), r"^dt_softplus: expected a bool")


def test_cursor_values_are_checked_on_the_cpu():
    state = _mamba2_state()
    state.committed[0] = -1
    _unchanged(state, lambda: mamba2_replay_step(state, **_mamba2_inputs()), r"^state\.committed: expected values in \[0, 6\]")
    with pytest.raises(ValueError, match=r"^state\.committed: expected values"):
        mamba2_replay_materialize(state, A=-torch.rand(H))
    delta = _delta_state()
    delta.flush_at[1] = 9
    _unchanged(delta, lambda: gdn_replay_step(delta, **_delta_inputs()), r"^state\.flush_at: expected values in \[1, 4\]")


def test_raw_gdn_op_refuses_a_kda_decay():
    # The raw op used to take a KDA-shaped `a` for KDA and run KDA's math on a GDN state.
    ss = torch.randn(SLOTS, H, 16, 16, dtype=torch.float64)
    before = ss.clone()
    inputs = _delta_inputs(kda=True)
    inputs = {k: v.double() for k, v in inputs.items()}
    inputs["k"], inputs["q"] = inputs["k"][:, :2], inputs["q"][:, :2]
    with pytest.raises(ValueError, match=r"^a: expected"):
        torch.ops.replayssm.gdn_standard_step(ss, inputs["q"], inputs["k"], inputs["v"], inputs["a"], inputs["b"],
                                              inputs["A_log"], None, None, -1, None)
    assert torch.equal(ss, before)
