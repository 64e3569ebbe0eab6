"""Decode-side Kimi Delta Attention mixer that keeps its state the ReplaySSM way.

Weight-compatible with Hugging Face's ``KimiLinearDeltaAttention`` (Kimi Linear): build it with
:meth:`ReplayKimiDeltaAttention.from_hf`. One decode step per row is

    q_proj, k_proj, v_proj -> causal conv1d update (silu) -> (q, k, v)
    f_b_proj(f_a_proj(h)) -> per-channel decay input a;  b_proj -> beta logits
        -> KDA op (ReplaySSM step, or the standard recurrence)
        -> RMSNorm per head gated by sigmoid(g_b_proj(g_a_proj(h))) -> o_proj

State and modes as the GDN mixer's (``layers/gdn.py``, :class:`DeltaRuleMixer`).
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from ..config import ReplaySSMConfig
from ._common import check_mixer_args
from .gdn import DeltaRuleMixer, _check_hf_module

__all__ = ["ReplayKimiDeltaAttention"]


class ReplayKimiDeltaAttention(DeltaRuleMixer):
    """Kimi Delta Attention mixer for decoding, one token per row.

    Args:
        hidden_size: model width.
        num_heads: heads (Kimi Linear uses as many key heads as value heads).
        head_dim: ``d_k = d_v``.
        d_conv: conv kernel width.
        slots: cache slots to allocate state for.
        config: the :class:`ReplaySSMConfig`.
        mode: ``"replay"`` or ``"standard"``.
        backend: a name in ``DELTA_RULE_BACKENDS["kda"]`` or a module with the ``kda_*`` functions.
        activation: conv activation (``"silu"``).  norm_eps: output RMSNorm epsilon.
        dtype: parameter and activation dtype.
    """

    kind = "kda"
    norm_gate = "sigmoid"

    def __init__(
        self, *, hidden_size: int, num_heads: int, head_dim: int, d_conv: int, slots: int,
        config: ReplaySSMConfig | None = None, mode: str = "replay", backend: str | ModuleType = "reference",
        activation: str = "silu", norm_eps: float = 1e-6, dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        config = check_mixer_args(config, dtype=dtype, hidden_size=hidden_size, num_heads=num_heads, head_dim=head_dim,
                                  d_conv=d_conv, slots=slots)
        inner = num_heads * head_dim
        self._init_state(
            num_v_heads=num_heads, num_k_heads=num_heads, head_k_dim=head_dim, head_v_dim=head_dim,
            conv_dim=3 * inner, d_conv=d_conv, slots=slots, config=config, mode=mode, backend=backend,
            dtype=dtype, device=device,
        )
        self.hidden_size, self.activation, self.norm_eps = hidden_size, activation, norm_eps
        factory = dict(dtype=dtype, device=device)
        self.q_proj = nn.Linear(hidden_size, inner, bias=False, **factory)
        self.k_proj = nn.Linear(hidden_size, inner, bias=False, **factory)
        self.v_proj = nn.Linear(hidden_size, inner, bias=False, **factory)
        self.conv_weight = nn.Parameter(torch.zeros(3 * inner, d_conv, **factory))
        self.f_a_proj = nn.Linear(hidden_size, head_dim, bias=False, **factory)
        self.f_b_proj = nn.Linear(head_dim, inner, bias=False, **factory)
        self.b_proj = nn.Linear(hidden_size, num_heads, bias=False, **factory)
        self.g_a_proj = nn.Linear(hidden_size, head_dim, bias=False, **factory)
        self.g_b_proj = nn.Linear(head_dim, inner, bias=False, **factory)
        # Kimi Linear keeps dt_bias in fp32 whatever the model dtype.
        self.dt_bias = nn.Parameter(torch.zeros(inner, dtype=torch.float32, device=device))
        self.A_log = nn.Parameter(torch.zeros(num_heads, **factory))
        self.norm_weight = nn.Parameter(torch.ones(head_dim, **factory))
        self.out_proj = nn.Linear(inner, hidden_size, bias=False, **factory)

    @classmethod
    def from_hf(
        cls, module: nn.Module, config: ReplaySSMConfig | None = None, slots: int = 1, *, mode: str = "replay",
        backend: str | ModuleType = "reference",
    ) -> "ReplayKimiDeltaAttention":
        """Copy the weights of a Hugging Face ``KimiLinearDeltaAttention``."""
        required = ("q_proj", "k_proj", "v_proj", "conv1d", "forget_gate", "b_proj", "g_a_proj", "g_b_proj",
                    "o_norm", "o_proj", "num_heads", "head_dim")
        _check_hf_module(module, required, "a Hugging Face KimiLinearDeltaAttention")
        weight = module.o_proj.weight
        mixer = cls(
            hidden_size=module.hidden_size, num_heads=module.num_heads, head_dim=module.head_dim,
            d_conv=module.conv_kernel_size, slots=slots, config=config, mode=mode, backend=backend,
            activation=module.activation, norm_eps=module.o_norm.variance_epsilon, dtype=weight.dtype,
            device=weight.device,
        )
        gate = module.forget_gate
        with torch.no_grad():
            for name in ("q_proj", "k_proj", "v_proj", "b_proj", "g_a_proj", "g_b_proj"):
                getattr(mixer, name).weight.copy_(getattr(module, name).weight)
            mixer.f_a_proj.weight.copy_(gate.f_a_proj.weight)
            mixer.f_b_proj.weight.copy_(gate.f_b_proj.weight)
            mixer.dt_bias.copy_(gate.dt_bias)
            mixer.A_log.copy_(gate.A_log.reshape(-1))
            mixer.conv_weight.copy_(module.conv1d.weight.squeeze(1))
            mixer.norm_weight.copy_(module.o_norm.weight)
            mixer.out_proj.weight.copy_(module.o_proj.weight)
        return mixer

    def _project(self, hidden):
        batch = hidden.shape[0]
        mixed_qkv = torch.cat([self.q_proj(hidden), self.k_proj(hidden), self.v_proj(hidden)], dim=-1)
        a = self.f_b_proj(self.f_a_proj(hidden)).reshape(batch, self.num_v_heads, self.head_k_dim)
        gate = self.g_b_proj(self.g_a_proj(hidden)).reshape(batch, self.num_v_heads, self.head_v_dim)
        return mixed_qkv, a, self.b_proj(hidden), gate
