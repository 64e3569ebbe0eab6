"""ReplayStateCache: sizing from configs, slot allocation, reset, byte accounting, errors."""

import pytest
import torch

from trtllm_replayssm.cache import ReplayStateCache, SSMLayerSpec
from trtllm_replayssm.config import ReplaySSMConfig


def _mamba_cache(slots=4, **kwargs):
    spec = SSMLayerSpec.mamba2(heads=4, head_dim=8, d_state=16, groups=2)
    return ReplayStateCache({0: spec, 2: spec}, slots, **kwargs)


def test_nemotron_h_config_sizes_mamba_layers_only():
    from transformers import NemotronHConfig

    cfg = NemotronHConfig(
        hidden_size=64, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=8, n_groups=2,
        layers_block_type=["linear_attention", "mlp", "full_attention", "linear_attention"],
    )
    cache = ReplayStateCache.from_hf_config(cfg, slots=3, activation_dtype=torch.float16)
    assert sorted(cache.states) == [0, 3]
    state = cache.layer(3)
    assert state.checkpoint.shape == (3, 4, 16, 8) and state.checkpoint.dtype == torch.float32
    assert state.ring_x.shape == (3, 4, 16, 16) and state.ring_x.dtype == torch.float16
    assert state.ring_B.shape == (3, 2, 16, 8)
    # conv runs over x, B, C: heads*head_dim + 2*groups*d_state channels, d_conv - 1 taps kept
    assert cache.conv_states[0].shape == (3, 4 * 16 + 2 * 2 * 8, cfg.conv_kernel - 1)


def test_mamba2_config_every_layer():
    from transformers import Mamba2Config

    cfg = Mamba2Config(hidden_size=32, num_heads=4, head_dim=16, state_size=8, n_groups=1, num_hidden_layers=3)
    cache = ReplayStateCache.from_hf_config(cfg, slots=2)
    assert sorted(cache.states) == [0, 1, 2]


def test_bytes_per_slot_counts_every_tensor():
    cache = _mamba_cache(config=ReplaySSMConfig(window=8, max_draft_tokens=4), activation_dtype=torch.bfloat16)
    b = cache.bytes_per_slot()
    cap = 12
    per_layer_ckpt = 4 * 8 * 16 * 4
    per_layer_ring = 4 * cap * 8 * 2 + 4 * cap * 4 + 2 * cap * 16 * 2
    conv = (4 * 8 + 2 * 2 * 16) * 3 * 2
    assert b["checkpoint"] == 2 * per_layer_ckpt
    assert b["ring"] == 2 * per_layer_ring
    assert b["cursors"] == 2 * 2 * 4
    assert b["conv"] == 2 * conv
    assert b["total"] == b["checkpoint"] + b["ring"] + b["cursors"] + b["conv"]
    assert cache.slots_for_bytes(10 * b["total"] + 1) == 10


def test_allocate_free_reset_cycle():
    cache = _mamba_cache(slots=3, config=ReplaySSMConfig(window=4))
    assert [cache.allocate() for _ in range(3)] == [0, 1, 2]
    assert cache.num_free == 0
    with pytest.raises(ValueError, match="in use"):
        cache.allocate()
    state = cache.layer(2)
    state.checkpoint[1].normal_()
    state.committed[1] = 3
    state.flush_at[1] = 4
    cache.conv_states[0][1].fill_(1.0)
    cache.free(1)
    assert cache.allocate() == 1
    assert state.checkpoint[1].abs().sum() == 0 and cache.conv_states[0][1].abs().sum() == 0
    assert int(state.committed[1]) == 0
    # staggered first flush: slot 1 of a window of 4 flushes after 3 tokens
    assert int(state.flush_at[1]) == 3


def test_gdn_and_kda_layers_share_one_cache():
    layers = {
        0: SSMLayerSpec("gdn", {"v_heads": 4, "k_heads": 2, "d_k": 8, "d_v": 8}, conv_dim=48, d_conv=4),
        1: SSMLayerSpec("kda", {"heads": 2, "d_k": 8, "d_v": 8}, conv_dim=48, d_conv=4),
        2: SSMLayerSpec.mamba2(heads=2, head_dim=8, d_state=8, groups=1),
    }
    cache = ReplayStateCache(layers, slots=2)
    assert cache.layer(0).ring_g.dim() == 3 and cache.layer(1).ring_g.dim() == 4
    slot = cache.allocate()
    cache.free(slot)


@pytest.mark.parametrize("bad", [-1, 4, 100])
def test_out_of_range_slot_refused(bad):
    cache = _mamba_cache(slots=4)
    for op in (cache.free, cache.reset):
        with pytest.raises(ValueError, match="out of range"):
            op(bad)


def test_double_free_refused_and_changes_nothing():
    cache = _mamba_cache(slots=2)
    s = cache.allocate()
    cache.free(s)
    with pytest.raises(ValueError, match="not allocated"):
        cache.free(s)
    assert cache.num_free == 2


def test_bad_construction_refused():
    spec = SSMLayerSpec.mamba2(heads=4, head_dim=8, d_state=16, groups=2)
    with pytest.raises(ValueError, match="slots"):
        ReplayStateCache({0: spec}, 0)
    with pytest.raises(ValueError, match="layers"):
        ReplayStateCache({}, 2)
    with pytest.raises(ValueError, match="checkpoint_dtype"):
        ReplayStateCache({0: spec}, 2, ReplaySSMConfig(checkpoint_dtype="fp8"))
    with pytest.raises(ValueError, match="kind"):
        SSMLayerSpec("mamba3", {})
    with pytest.raises(ValueError, match="heads"):
        ReplayStateCache({0: SSMLayerSpec.mamba2(heads=3, head_dim=8, d_state=8, groups=2)}, 2)
    with pytest.raises(ValueError, match="model_type"):
        ReplayStateCache.from_hf_config(type("Cfg", (), {"model_type": "llama"})(), 2)
