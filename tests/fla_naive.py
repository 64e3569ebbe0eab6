"""Agreement of our delta-rule recurrences with fla's naive references (fla/ops/*/naive.py).

fla keeps the state as ``[B, HV, K, V]`` (ours is ``[..., V, K]``), takes already-normalised q/k,
already-computed ``g`` / ``beta`` (its own ``naive_*_gate`` functions compute them from the raw
projections) and a ``[B, T, ...]`` sequence; it computes in float32, hence the tolerance.
"""

from __future__ import annotations

import torch

from delta_rule_harness import F64, Layer, ReplaySSMConfig, indices

FLA_TOL = 2e-5


def _fla_l2norm(x: torch.Tensor) -> torch.Tensor:
    # fla's l2norm kernels compute x / sqrt(sum(x^2) + eps) with eps = 1e-6.
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def check_against_fla_naive(layer: Layer, batch: int = 2, T: int = 21) -> None:
    """Our standard steps and our ReplaySSM decode, from the same random initial state, match
    fla's naive recurrent reference on a ``T``-token sequence."""
    if layer.kind.per_channel:
        from fla.ops.kda.gate import naive_kda_gate as fla_gate
        from fla.ops.kda.naive import naive_recurrent_kda as fla_recurrent
    else:
        from fla.ops.gated_delta_rule.gate import naive_gdn_gate as fla_gate
        from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule as fla_recurrent

    seq = layer.tokens(batch, T)
    gen = torch.Generator().manual_seed(1)
    initial = 0.3 * torch.randn(batch, layer.HV, layer.d_v, layer.d_k, generator=gen, dtype=F64)

    q, k = _fla_l2norm(seq["q"]), _fla_l2norm(seq["k"])
    g = fla_gate(seq["a"], layer.A_log, layer.dt_bias, output_dtype=torch.float32)
    beta = seq["b"].sigmoid()
    if layer.kind.per_channel:
        o_fla, S_fla = fla_recurrent(q, k, seq["v"], g, beta, initial_state=initial.transpose(-1, -2),
                                     output_final_state=True)
    else:
        # fla's naive GDN has no key-head sharing: expand the key heads to value heads first.
        share = layer.HV // layer.H
        o_fla, S_fla = fla_recurrent(q.repeat_interleave(share, 2), k.repeat_interleave(share, 2), seq["v"],
                                     beta, g, initial_state=initial.transpose(-1, -2), output_final_state=True)

    _decode_against(layer, seq, initial, o_fla, final=S_fla.transpose(-1, -2))


def check_against_fla_fused_recurrent(layer: Layer, batch: int = 2, T: int = 6) -> None:
    """fla's fused_recurrent Triton kernel (run by the Triton interpreter on CPU, fp32) from the
    raw projections -- gate, beta sigmoid and q/k l2norm all in-kernel, state in our
    ``[V, K]`` layout (``state_v_first``) -- against our standard steps and ReplaySSM decode."""
    if layer.kind.per_channel:
        from fla.ops.kda import fused_recurrent_kda as fla_fused
    else:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_fused

    seq = layer.tokens(batch, T)
    gen = torch.Generator().manual_seed(2)
    initial = 0.3 * torch.randn(batch, layer.HV, layer.d_v, layer.d_k, generator=gen, dtype=F64)
    f32 = {name: x.float() for name, x in seq.items()}
    o_fla, S_fla = fla_fused(
        f32["q"], f32["k"], f32["v"], g=f32["a"], beta=f32["b"], A_log=layer.A_log.float(),
        dt_bias=layer.dt_bias.float(), initial_state=initial.float(), output_final_state=True,
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, state_v_first=True,
    )
    _decode_against(layer, seq, initial, o_fla, final=S_fla)


def _decode_against(layer: Layer, seq: dict, initial: torch.Tensor, o_fla: torch.Tensor, final: torch.Tensor) -> None:
    """Our standard steps and ReplaySSM decode (window 4) from ``initial [batch, HV, d_v, d_k]``
    over ``seq``: every output equals ``o_fla [batch, T, HV, d_v]``, and the standard state and
    the materialized replay state equal ``final [batch, HV, d_v, d_k]``."""
    batch, T = seq["q"].shape[:2]
    all_rows = indices(range(batch))
    plain = initial.clone()
    state = layer.replay_state(batch, ReplaySSMConfig(window=4))
    state.checkpoint.copy_(initial)
    for t in range(T):
        token = {name: x[:, t] for name, x in seq.items()}
        expected = o_fla[:, t].to(F64)
        torch.testing.assert_close(layer.standard(plain, token, all_rows), expected, rtol=FLA_TOL, atol=FLA_TOL)
        torch.testing.assert_close(layer.step(state, token, all_rows), expected, rtol=FLA_TOL, atol=FLA_TOL)
    final = final.to(F64)
    torch.testing.assert_close(plain, final, rtol=FLA_TOL, atol=FLA_TOL)
    torch.testing.assert_close(layer.kind.materialize(state, all_rows), final, rtol=FLA_TOL, atol=FLA_TOL)
