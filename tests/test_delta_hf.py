"""Whole-layer agreement of the GDN and KDA decode mixers with Hugging Face transformers.

Tiny random Qwen3.5 / Qwen3-Next gated delta nets and a Kimi Linear KDA layer, fp32: a prompt
(Hugging Face's chunked torch path vs our token-by-token prefill), then 40+ decoded tokens
(Hugging Face's recurrent torch path with its own cache vs our mixer, in ReplaySSM and standard
mode), compared to ~1e-5 relative, plus the final recurrent and conv states.

Hugging Face binds each recurrence and conv function at import time to fla's / causal-conv1d's
kernels when those packages import (``use_kernel_func_from_hub_with_fallback`` in
``transformers/integrations/hub_kernels.py``); fla is installed here and its Triton kernels
cannot run on a CPU. The decorator keeps the pure-torch function as ``__wrapped__``
(``functools.wraps``) and the modules look the names up at call time, so the ``hf_torch_path``
fixture points those module attributes back at the torch functions for the test's duration.
"""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import DynamicCache  # noqa: E402
from transformers.models.kimi_linear import modeling_kimi_linear  # noqa: E402
from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig  # noqa: E402
from transformers.models.qwen3_5 import modeling_qwen3_5  # noqa: E402
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig  # noqa: E402

from trtllm_replayssm.config import ReplaySSMConfig  # noqa: E402
from trtllm_replayssm.layers.gdn import ReplayGatedDeltaNet  # noqa: E402
from trtllm_replayssm.layers.kda import ReplayKimiDeltaAttention  # noqa: E402

HIDDEN, PROMPT, DECODE = 32, 10, 44
REL_TOL = 1e-5
_KERNEL_BOUND = {
    modeling_qwen3_5: ("torch_recurrent_gated_delta_rule", "torch_chunk_gated_delta_rule"),
    modeling_qwen3_next: ("torch_recurrent_gated_delta_rule", "torch_chunk_gated_delta_rule"),
    modeling_kimi_linear: ("recurrent_kimi_delta_attention", "chunk_kimi_delta_attention"),
}


@pytest.fixture
def hf_torch_path(monkeypatch):
    for module, names in _KERNEL_BOUND.items():
        for name in names + ("causal_conv1d_fn", "causal_conv1d_update"):
            torch_function = getattr(getattr(module, name), "__wrapped__", getattr(module, name))
            assert torch_function.__module__ == module.__name__, f"{name} is not Hugging Face's torch path"
            monkeypatch.setattr(module, name, torch_function)


def _qwen_linear_fields(H, HV, d_k, d_v):
    return dict(
        hidden_size=HIDDEN, num_hidden_layers=1, layer_types=["linear_attention"], vocab_size=16,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, intermediate_size=16,
        linear_num_key_heads=H, linear_num_value_heads=HV, linear_key_head_dim=d_k, linear_value_head_dim=d_v,
        linear_conv_kernel_dim=4,
    )


def qwen3_5_layer(H=2, HV=4, d_k=8, d_v=6):
    """A Qwen3.5 gated delta net and its config (the cache is built from it)."""
    config = Qwen3_5TextConfig(**_qwen_linear_fields(H, HV, d_k, d_v))
    return modeling_qwen3_5.Qwen3_5GatedDeltaNet(config, 0), config


def qwen3_next_layer(H=2, HV=4, d_k=8, d_v=6):
    config = Qwen3NextConfig(**_qwen_linear_fields(H, HV, d_k, d_v), num_experts=2, num_experts_per_tok=1,
                             moe_intermediate_size=8, shared_expert_intermediate_size=8)
    return modeling_qwen3_next.Qwen3NextGatedDeltaNet(config, 0), config


def kimi_layer(heads=2, head_dim=8):
    config = KimiLinearConfig(
        hidden_size=HIDDEN, num_hidden_layers=1, vocab_size=16, num_attention_heads=2, num_key_value_heads=1,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
        linear_attn_config={"head_dim": head_dim, "num_heads": heads, "short_conv_kernel_size": 4,
                            "kda_layers": [1], "full_attn_layers": []},
    )
    return modeling_kimi_linear.KimiLinearDeltaAttention(config, 0), config


def randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Deterministic random weights (Kimi's module leaves some uninitialised); decays kept
    moderate (``exp(A_log)`` in ``(0.05, 1)``) so the state carries over many tokens."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("A_log"):
                param.copy_(torch.empty(param.shape).uniform_(-3.0, 0.0, generator=gen))
            elif name.endswith("norm.weight"):
                param.copy_(1 + 0.2 * torch.randn(param.shape, generator=gen))
            else:
                fan_in = param.shape[-1] if param.dim() > 1 else 4
                param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(fan_in))
    return module.eval()


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).abs().max() / expected.abs().max()).item()


def run_against_hf(module, hf_config, ours_cls, mode: str, config: ReplaySSMConfig, seed: int,
                   backend: str = "reference") -> None:
    """Two sequences (ours in slots 2 and 0 of 3, with a padded row between) against one HF
    batch of two with its own cache."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, PROMPT + DECODE, HIDDEN, generator=gen)
    mixer = ours_cls.from_hf(module, config, slots=3, mode=mode, backend=backend)
    idx = torch.tensor([2, -1, 0], dtype=torch.int32)

    def with_pad_row(h):
        return torch.stack([h[0], torch.randn(h.shape[1:], generator=gen), h[1]])

    cache = DynamicCache(config=hf_config)
    with torch.no_grad():
        expected_prompt = module(hidden[:, :PROMPT], cache=cache)
        got_prompt = mixer.prefill(with_pad_row(hidden[:, :PROMPT]), idx)
        assert relative_error(got_prompt[[0, 2]], expected_prompt) < REL_TOL, "prompt outputs"
        assert torch.count_nonzero(got_prompt[1]) == 0
        for t in range(PROMPT, PROMPT + DECODE):
            expected = module(hidden[:, t : t + 1], cache=cache)[:, 0]
            got = mixer.decode(with_pad_row(hidden[:, t]), idx)
            assert relative_error(got[[0, 2]], expected) < REL_TOL, f"decode token {t}"
            assert torch.count_nonzero(got[1]) == 0
    live = torch.tensor([2, 0], dtype=torch.int32)
    hf_state = cache.get_recurrent_state(0).transpose(-1, -2)  # HF keeps [B, HV, d_k, d_v]
    assert relative_error(mixer.current_ssm_state(live).float(), hf_state.float()) < REL_TOL, "final state"
    width = mixer.conv_state.shape[-1]
    torch.testing.assert_close(mixer.conv_state[live.long()], cache.get_conv_state(0)[..., -width:], rtol=0, atol=0)


MODELS = {
    "qwen3_5": (qwen3_5_layer, ReplayGatedDeltaNet),
    "qwen3_next": (qwen3_next_layer, ReplayGatedDeltaNet),
    "kimi_linear": (kimi_layer, ReplayKimiDeltaAttention),
}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("mode,window", [("replay", 4), ("replay", 16), ("standard", 16)])
def test_decode_matches_hf(hf_torch_path, model, mode, window):
    factory, ours_cls = MODELS[model]
    module, hf_config = factory()
    randomize(module, seed=len(model))
    run_against_hf(module, hf_config, ours_cls, mode, ReplaySSMConfig(window=window), seed=window)


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("mode", ["replay", "standard"])
def test_decode_through_the_registered_ops_matches_hf(hf_torch_path, model, mode):
    """The ``triton`` backend: torch.ops.replayssm (Triton on CUDA, the reference here)."""
    factory, ours_cls = MODELS[model]
    module, hf_config = factory()
    randomize(module, seed=len(model))
    run_against_hf(module, hf_config, ours_cls, mode, ReplaySSMConfig(window=4), seed=7, backend="triton")


@pytest.mark.parametrize("model", ["qwen3_5", "qwen3_next"])
def test_gdn_without_key_head_sharing(hf_torch_path, model):
    module, hf_config = MODELS[model][0](H=2, HV=2, d_k=4, d_v=8)
    randomize(module, seed=3)
    run_against_hf(module, hf_config, ReplayGatedDeltaNet, "replay", ReplaySSMConfig(window=5), seed=5)


def test_from_hf_rejects_other_modules():
    with pytest.raises(ValueError, match="^module:"):
        ReplayGatedDeltaNet.from_hf(torch.nn.Linear(2, 2), ReplaySSMConfig())
    with pytest.raises(ValueError, match="^module:"):
        ReplayKimiDeltaAttention.from_hf(qwen3_5_layer()[0], ReplaySSMConfig())


def test_mixer_argument_errors():
    module, _ = qwen3_5_layer()
    with pytest.raises(ValueError, match="^mode:"):
        ReplayGatedDeltaNet.from_hf(module, ReplaySSMConfig(), mode="fast")
    with pytest.raises(ValueError, match="^backend:"):
        ReplayGatedDeltaNet.from_hf(module, ReplaySSMConfig(), backend="cuda")
    with pytest.raises(ValueError, match="^config.read_format:"):
        ReplayGatedDeltaNet.from_hf(module, ReplaySSMConfig(read_format="bf16"))
    mixer = ReplayGatedDeltaNet.from_hf(module, ReplaySSMConfig(), slots=2)
    before = mixer.conv_state.clone(), mixer.replay_state.clone()
    with pytest.raises(ValueError, match="^hidden:"):
        mixer.decode(torch.randn(2, HIDDEN + 1))
    with pytest.raises(ValueError, match="^state_indices:"):
        mixer.decode(torch.randn(2, HIDDEN), torch.tensor([0, 2], dtype=torch.int32))
    assert torch.equal(mixer.conv_state, before[0])
    for name, tensor in mixer.replay_state.tensors().items():
        assert torch.equal(tensor, before[1].tensors()[name]), name
