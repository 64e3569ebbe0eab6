"""The staged step's ring-launch options ``ring_token_first`` (the token's loads beside the slot)
and ``ring_fast_exp`` (KDA's decayed keys through ``ex2.approx.ftz``, ``ops/_fast_exp.py``).
CPU: the interpreter at tiny dims (where the fast exponential falls back to ``tl.exp``); GPU
(``-m gpu``): model dims, against float64 and against the ring launch without them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops._fast_exp import fast_exp_supported
from trtllm_replayssm.ops.gdn import decode
from trtllm_replayssm.ops.gdn.decode_staged import StagedVariant, staged_launch

from delta_kernel_harness import (
    GPU_DIMS, Layer, checkpoints_after_three_windows, check_variant_cpu, check_variant_gpu, rel_err,
)

STATE_FIELDS = ("checkpoint", "ring_k", "ring_v", "ring_beta", "ring_g", "ring_u", "committed", "flush_at")


def _run_side_by_side(layer, variants, steps, window=4, device=None):
    """Outputs and states of ``variants`` from the same tokens, a padded row among three."""
    device = device or layer.device
    states = [layer.state(3, ReplaySSMConfig(window=window), device=device) for _ in variants]
    idx = torch.tensor([2, -1, 0], dtype=torch.int32, device=device)
    outs = [[] for _ in variants]
    for _ in range(steps):
        inputs = {n: t.to(device) for n, t in layer.tokens(3).items()}
        for st, variant, out in zip(states, variants, outs):
            out.append(decode.delta_replay_step(
                st.checkpoint, st.ring_k, st.ring_v, st.ring_beta, st.ring_g, st.ring_u, st.committed,
                st.flush_at, st.window, **inputs, **layer.params(device), state_indices=idx, pad_slot_id=-1,
                scale=None, refold=False, variant=variant))
    return outs, states


@pytest.mark.parametrize("per_channel,HV,H", [(False, 4, 2), (True, 2, 2)], ids=["gdn-share2", "kda"])
def test_token_first_is_bitwise_cpu(per_channel, HV, H):
    """``ring_token_first`` only moves loads and arithmetic earlier: outputs and every state
    field equal the plain ring launch's bit for bit across flushes (Gated DeltaNet with two value
    heads per ring program, so that the second head's gate is still loaded in the loop)."""
    layer = Layer(per_channel, HV, H, 16, 32, seed=7)
    base = decode.default_variant(256, per_channel, False, 32, 4)  # staged: d_v = 32 is not the one-launch step's
    assert isinstance(base, StagedVariant)
    variants = [base, dataclasses.replace(base, ring_token_first=True)]
    outs, states = _run_side_by_side(layer, variants, steps=6)
    for t, (a, b) in enumerate(zip(*outs)):
        assert torch.equal(a, b), f"step {t}: outputs differ"
    for name in STATE_FIELDS:
        assert torch.equal(getattr(states[0], name), getattr(states[1], name)), name


@pytest.mark.parametrize("refold", [False, True], ids=["fold-u", "refold"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_ring_options_against_float64_cpu(per_channel, refold):
    """Both options on the staged defaults (batch 64 for Gated DeltaNet, whose batch-256 default
    is the one-launch step), 3+ windows, staggered phases, a padded row, against float64."""
    base = decode.default_variant(256 if per_channel else 64, per_channel, refold, 32)
    variant = dataclasses.replace(base, ring_token_first=True, ring_fast_exp=True)
    check_variant_cpu(per_channel, 4, 2, 16, 32, 7, refold, variant)


def test_ring_option_constexprs_and_errors():
    """The ring kernel's constexprs (the fast exponential only where decays are per channel)
    and the fields' type checks; the interpreter never takes the inline-PTX exponential."""
    v = StagedVariant(ring_fast_exp=True, ring_token_first=True)
    kw = dict(per_channel=True, refold=False, has_bias=True, has_indices=True, pdl=False)
    kda = staged_launch(v, 8, 4, 4, 16, 16, 4, **kw)
    gdn = staged_launch(v, 8, 4, 2, 16, 16, 4, **dict(kw, per_channel=False))
    assert kda.ring["FAST_EXP"] and kda.ring["TOKEN_FIRST"]
    assert not gdn.ring["FAST_EXP"] and gdn.ring["TOKEN_FIRST"]
    assert not staged_launch(StagedVariant(), 8, 4, 4, 16, 16, 4, **kw).ring["FAST_EXP"]
    assert not fast_exp_supported(torch.device("cpu"))
    for name in ("ring_fast_exp", "ring_token_first"):
        with pytest.raises(ValueError, match=f"^{name}: expected a bool"):
            StagedVariant(**{name: 1})


# ------------------------------------------------------------------------------- GPU -----
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_ring_options_gpu(per_channel, dtype, monkeypatch):
    """The staged defaults with both options (Gated DeltaNet's from batch 64, where it is the
    staged step) at model dims through the public op, batch 64, against float64."""
    dims = (32, 32, 128, 128) if per_channel else GPU_DIMS[0]
    base = decode.default_variant(256 if per_channel else 64, per_channel, False, dims[3], 32)
    variant = dataclasses.replace(base, ring_token_first=True, ring_fast_exp=True, ring_max_registers=96)
    check_variant_gpu(per_channel, dims, dtype, 64, variant, monkeypatch, refold=False)


@pytest.mark.gpu
def test_ring_options_agree_gpu():
    """KDA, bf16, batch 64, 3 windows at L=16 from the same inputs: the token-first ring launch
    equals the plain one bit for bit; with the ``.ftz`` exponentials the checkpoints agree to fp32
    level (their exponentials differ from ``tl.exp``'s only below ``2^-126``)."""
    base = decode.default_variant(256, True, False, 128, 32)
    ck = checkpoints_after_three_windows(True, [
        base, dataclasses.replace(base, ring_token_first=True),
        dataclasses.replace(base, ring_token_first=True, ring_fast_exp=True, ring_max_registers=96)])
    assert torch.equal(ck[1], ck[0])
    assert rel_err(ck[2], ck[0]) < 2e-6, rel_err(ck[2], ck[0])
    assert fast_exp_supported(torch.device("cuda"))
