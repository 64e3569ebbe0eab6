"""Whole-layer agreement of ReplayMamba2Mixer with Hugging Face transformers' own Mamba-2 mixers.

The oracle is transformers' code run on CPU (its torch fallbacks: chunked scan for the prompt,
``selective_state_update`` for decode steps): a tiny random ``NemotronHForCausalLM`` and
``Mamba2ForCausalLM`` decode a prompt and 45 tokens with their cache; forward hooks capture one
Mamba-2 mixer's inputs and outputs, which our mixer (built from the same HF module) must reproduce
in ReplaySSM mode and in standard mode, with its rows scattered over cache slots and padded rows
mixed in.
"""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import Mamba2Config, Mamba2ForCausalLM, NemotronHConfig, NemotronHForCausalLM  # noqa: E402

from trtllm_replayssm.config import ReplaySSMConfig  # noqa: E402
from trtllm_replayssm.layers.mamba2 import ReplayMamba2Mixer  # noqa: E402

PROMPT_LEN, DECODE_STEPS, BATCH, VOCAB = 10, 45, 2, 64
SLOTS = 6
# Rows of the HF batch live in these slots of our cache; decode batches add a padded row between them.
SLOT_OF_ROW = [4, 1]
RTOL = 1e-5


def _nemotron_h():
    config = NemotronHConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
        # get_seq_length needs one attention layer in the cache; the mixer under test is the last.
        layers_block_type=["linear_attention", "full_attention", "linear_attention"],
        mamba_num_heads=6, mamba_head_dim=8, n_groups=2, ssm_state_size=16, conv_kernel=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, chunk_size=4,
        use_conv_bias=True,
    )
    model = NemotronHForCausalLM(config).eval()
    return model, model.model.layers[2].mixer


def _mamba2():
    config = Mamba2Config(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_heads=4, head_dim=8, expand=2,
        n_groups=1, state_size=8, conv_kernel=3, chunk_size=4, use_bias=True,
    )
    model = Mamba2ForCausalLM(config).eval()
    return model, model.backbone.layers[1].mixer


def _randomize_ssm_parameters(mixer, generator):
    """Spread the per-head parameters so every head, the D skip and the norm weight matter.

    The default init gives dt_bias near -5 (dt ~ 0.005: states barely move) and D = 1, norm = 1.
    dt here stays well above NemotronH's dt floor (time_step_min = 1e-3), which HF clamps to only
    in its prompt path, and decays per token lie in about [0.6, 0.97]: the state remembers across
    several ReplaySSM windows.
    """
    heads = mixer.num_heads
    with torch.no_grad():
        mixer.dt_bias.copy_(torch.empty(heads).uniform_(-1.5, 0.0, generator=generator))
        mixer.A_log.copy_(torch.empty(heads).uniform_(math.log(0.1), math.log(0.6), generator=generator))
        mixer.D.copy_(torch.randn(heads, generator=generator))
        mixer.norm.weight.copy_(1 + 0.5 * torch.randn(mixer.norm.weight.shape, generator=generator))
        if mixer.conv1d.bias is not None:
            mixer.conv1d.bias.copy_(0.2 * torch.randn(mixer.conv1d.bias.shape, generator=generator))


def _run_hf(build):
    """Decode with HF's model and cache; return the mixer's per-step (input, output) and its final cache."""
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model, mixer = build()
    generator = torch.Generator().manual_seed(1)
    _randomize_ssm_parameters(mixer, generator)
    captured = []

    def hook(module, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        captured.append((hidden.detach().clone(), output.detach().clone()))

    handle = mixer.register_forward_hook(hook, with_kwargs=True)
    tokens = torch.randint(0, VOCAB, (BATCH, PROMPT_LEN + DECODE_STEPS), generator=generator)
    with torch.no_grad():
        out = model(tokens[:, :PROMPT_LEN], use_cache=True)
        cache = out.cache if "cache" in out else out.past_key_values
        for t in range(PROMPT_LEN, PROMPT_LEN + DECODE_STEPS):
            out = model(tokens[:, t : t + 1], cache=cache, use_cache=True)
            cache = out.cache if "cache" in out else out.past_key_values
    handle.remove()
    assert len(captured) == 1 + DECODE_STEPS
    assert captured[0][0].shape[1] == PROMPT_LEN and all(h.shape[1] == 1 for h, _ in captured[1:])
    final = (cache.get_conv_state(mixer.layer_idx), cache.get_recurrent_state(mixer.layer_idx))
    return mixer, captured, final


@pytest.fixture(scope="module", params=["nemotron_h", "mamba2"])
def hf_run(request):
    return _run_hf({"nemotron_h": _nemotron_h, "mamba2": _mamba2}[request.param])


def _assert_close_rel(actual, expected, what):
    scale = expected.abs().max().item()
    err = (actual - expected).abs().max().item()
    assert err <= RTOL * scale, f"{what}: max abs error {err:.3e} > {RTOL} * max |expected| {scale:.3e}"


CONFIGS = {
    "replay-L16-stagger": ("replay", ReplaySSMConfig()),
    "replay-L5-no-stagger": ("replay", ReplaySSMConfig(window=5, flush_stagger=False)),
    "replay-L1": ("replay", ReplaySSMConfig(window=1)),
    "standard": ("standard", ReplaySSMConfig()),
}


@pytest.mark.parametrize(
    "name, backend", [(name, "reference") for name in CONFIGS] + [("replay-L5-no-stagger", "triton"), ("standard", "triton")]
)
def test_mixer_matches_hf_prompt_then_decode(hf_run, name, backend):
    """``backend="triton"``: through torch.ops.replayssm (Triton on CUDA, the reference here)."""
    hf_mixer, captured, (hf_conv_state, hf_ssm_state) = hf_run
    mode, config = CONFIGS[name]
    ours = ReplayMamba2Mixer.from_hf(hf_mixer, config, slots=SLOTS, mode=mode, backend=backend)
    slots = torch.tensor(SLOT_OF_ROW, dtype=torch.int32)

    prompt_in, prompt_out = captured[0]
    _assert_close_rel(ours.prefill(prompt_in, slots), prompt_out, f"{name}: prompt")

    # Decode with a padded row between the two sequences; it must come back zero.
    padded_slots = torch.tensor([SLOT_OF_ROW[0], -1, SLOT_OF_ROW[1]], dtype=torch.int32)
    for step, (hidden, expected) in enumerate(captured[1:]):
        garbage = torch.randn(1, hidden.shape[-1])
        batch = torch.cat([hidden[0, :, :], garbage, hidden[1, :, :]], dim=0)
        out = ours.decode(batch, padded_slots)
        assert torch.equal(out[1], torch.zeros_like(out[1])), f"{name}: padded row got a nonzero output"
        _assert_close_rel(out[[0, 2]], expected[:, 0], f"{name}: decode step {step}")

    # The state each slot holds now is HF's final cache.
    _assert_close_rel(ours.current_ssm_state(slots), hf_ssm_state, f"{name}: final SSM state")
    width = ours.d_conv - 1
    _assert_close_rel(ours.conv_state[slots.long()], hf_conv_state[..., -width:], f"{name}: final conv state")
    # Slots no row addressed were never touched.
    untouched = [s for s in range(SLOTS) if s not in SLOT_OF_ROW]
    assert torch.count_nonzero(ours.conv_state[untouched]) == 0
    assert torch.count_nonzero(ours.current_ssm_state(torch.tensor(untouched))) == 0


def test_replay_and_standard_modes_agree_closely(hf_run):
    """Both modes compute the SSM in float64; they differ only by the ring's fp32 dt."""
    hf_mixer, captured, _ = hf_run
    layers = {
        mode: ReplayMamba2Mixer.from_hf(hf_mixer, ReplaySSMConfig(window=4), slots=SLOTS, mode=mode)
        for mode in ("replay", "standard")
    }
    slots = torch.tensor(SLOT_OF_ROW, dtype=torch.int64)
    outputs = {mode: [layer.prefill(captured[0][0], slots)] for mode, layer in layers.items()}
    for hidden, _ in captured[1:]:
        for mode, layer in layers.items():
            outputs[mode].append(layer.decode(hidden[:, 0], slots)[:, None])
    replay, standard = (torch.cat(outputs[m], dim=1) for m in ("replay", "standard"))
    torch.testing.assert_close(replay, standard, rtol=1e-6, atol=1e-6 * standard.abs().max().item())
    torch.testing.assert_close(
        layers["replay"].current_ssm_state(slots), layers["standard"].current_ssm_state(slots), rtol=1e-6, atol=1e-7
    )


def test_from_hf_rejects_other_modules():
    with pytest.raises(ValueError, match="module"):
        ReplayMamba2Mixer.from_hf(torch.nn.Linear(4, 4), ReplaySSMConfig(), slots=2)


def test_decode_rejects_bad_input_without_touching_state(hf_run):
    hf_mixer = hf_run[0]
    ours = ReplayMamba2Mixer.from_hf(hf_mixer, ReplaySSMConfig(window=4), slots=SLOTS)
    ours.decode(torch.randn(2, ours.hidden_size), torch.tensor([0, 3]))
    before = {k: v.clone() for k, v in ours.replay_state.tensors().items()}
    conv_before = ours.conv_state.clone()
    bad_calls = {
        "hidden": lambda: ours.decode(torch.randn(2, ours.hidden_size + 1), torch.tensor([0, 3])),
        "state_indices": lambda: ours.decode(torch.randn(2, ours.hidden_size), torch.tensor([0, SLOTS])),
    }
    for name, call in bad_calls.items():
        with pytest.raises(ValueError, match=name):
            call()
    with pytest.raises(ValueError, match="state_indices"):
        ours.decode(torch.randn(2, ours.hidden_size), torch.tensor([3, 3]))
    with pytest.raises(ValueError, match="hidden"):
        ours.decode(torch.randn(2, ours.hidden_size, dtype=torch.float64), torch.tensor([0, 3]))
    assert torch.equal(ours.conv_state, conv_before)
    for k, v in ours.replay_state.tensors().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(ValueError, match="mode"):
        ReplayMamba2Mixer.from_hf(hf_mixer, ReplaySSMConfig(), slots=2, mode="fast")
    with pytest.raises(ValueError, match="backend"):
        ReplayMamba2Mixer.from_hf(hf_mixer, ReplaySSMConfig(), slots=2, backend="nope")
