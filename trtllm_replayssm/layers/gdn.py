"""Decode-side Gated DeltaNet mixer that keeps its state the ReplaySSM way.

Weight-compatible with Hugging Face's ``Qwen3_5GatedDeltaNet`` (Qwen3.5) and
``Qwen3NextGatedDeltaNet`` (Qwen3-Next): build it with :meth:`ReplayGatedDeltaNet.from_hf`. One
decode step per row is

    in_proj_{qkv,z,b,a} -> causal conv1d update (silu) on qkv -> (q, k, v)
        -> delta-rule op (ReplaySSM step, or the standard recurrence)
        -> RMSNorm per head gated by silu(z) -> out_proj

Per cache slot the mixer holds the conv state ``[slots, conv_dim, d_conv - 1]`` and either a
:class:`DeltaRuleReplayState` (``mode="replay"``) or a plain ``ssm_state``
``[slots, HV, d_v, d_k]`` (``mode="standard"``), so both run side by side on the same weights.
:class:`DeltaRuleMixer` holds what the GDN and KDA mixers share (``layers/kda.py``).
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ReplaySSMConfig
from ..ops._slots import live_rows
from ..ops.gdn.state import DeltaRuleReplayState
from ._common import SlotStateMixin, check_mixer_args, check_prompt, plain_checkpoint_dtype, resolve_backend
from .conv import causal_conv1d_update

__all__ = ["DeltaRuleMixer", "ReplayGatedDeltaNet", "DELTA_RULE_BACKENDS"]

#: Op backends per kind: modules that define the ``gdn_*`` / ``kda_*`` functions of ops/README.md.
DELTA_RULE_BACKENDS = {
    # "triton": the replayssm:: custom ops (Triton kernels on CUDA, the reference on the CPU)
    "gdn": {"reference": "trtllm_replayssm.ops.gdn.reference", "triton": "trtllm_replayssm.ops.gdn"},
    "kda": {"reference": "trtllm_replayssm.ops.kda.reference", "triton": "trtllm_replayssm.ops.kda"},
}
_GATES = {"silu": F.silu, "swish": F.silu, "sigmoid": torch.sigmoid}


class DeltaRuleMixer(SlotStateMixin, nn.Module):
    """What the GDN and KDA decode mixers share: state, op dispatch, output norm, prefill.

    A subclass sets ``kind`` (``"gdn"`` / ``"kda"``) and ``norm_gate`` (the output norm's gate
    activation), defines its projections and :meth:`_project`, and calls :meth:`_init_state`.
    """

    kind: str
    norm_gate: str

    def _init_state(
        self, *, num_v_heads, num_k_heads, head_k_dim, head_v_dim, conv_dim, d_conv, slots, config, mode, backend,
        dtype, device,
    ) -> None:
        self.config = config  # check_mixer_args has resolved it
        checkpoint_dtype = plain_checkpoint_dtype(self.config, mode)
        if num_v_heads % num_k_heads != 0:
            raise ValueError(f"num_v_heads: expected a multiple of num_k_heads={num_k_heads}, got {num_v_heads}")
        if d_conv < 2:
            raise ValueError(f"d_conv: expected >= 2, got {d_conv}")
        self.ops = resolve_backend(backend, DELTA_RULE_BACKENDS[self.kind])
        self.mode = mode
        self.num_v_heads, self.num_k_heads = num_v_heads, num_k_heads
        self.head_k_dim, self.head_v_dim = head_k_dim, head_v_dim
        self.key_dim, self.value_dim = num_k_heads * head_k_dim, num_v_heads * head_v_dim
        self.conv_dim, self.d_conv = conv_dim, d_conv
        self.register_buffer("conv_state", torch.zeros(slots, conv_dim, d_conv - 1, dtype=dtype, device=device),
                             persistent=False)
        if mode == "replay":
            self.replay_state = DeltaRuleReplayState.allocate(
                slots, num_v_heads, num_k_heads, head_k_dim, head_v_dim, self.config,
                per_channel_decay=self.kind == "kda", activation_dtype=dtype, checkpoint_dtype=checkpoint_dtype,
                device=device,
            )
            self.ssm_state = None
        else:
            self.replay_state = None
            self.register_buffer(
                "ssm_state",
                torch.zeros(slots, num_v_heads, head_v_dim, head_k_dim, dtype=checkpoint_dtype, device=device),
                persistent=False,
            )

    @property
    def slots(self) -> int:
        return self.conv_state.shape[0]

    def _op(self, name: str):
        return getattr(self.ops, f"{self.kind}_{name}")

    # -- state -----------------------------------------------------------------------------------

    def current_ssm_state(self, state_indices: torch.Tensor) -> torch.Tensor:
        """``[batch, HV, d_v, d_k]``: each slot's recurrent state now, in either mode."""
        if self.replay_state is not None:
            return self._op("replay_materialize")(self.replay_state, state_indices)
        return self._standard_ssm_state(state_indices)

    # -- forward ---------------------------------------------------------------------------------

    def _project(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``hidden [batch, hidden_size]`` -> conv input ``[batch, conv_dim]``, raw decay ``a``,
        raw ``b [batch, HV]`` and the output gate ``[batch, HV, d_v]``."""
        raise NotImplementedError

    def _output_norm(self, o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """RMSNorm of each head's output (before the gate), gated; computed in float32 as the
        Hugging Face modules do."""
        compute = torch.float64 if o.dtype == torch.float64 else torch.float32
        h = o.to(compute)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.norm_eps)
        return (self.norm_weight.to(compute) * h * _GATES[self.norm_gate](gate.to(compute))).to(o.dtype)

    @torch.no_grad()
    def decode(self, hidden: torch.Tensor, state_indices: torch.Tensor | None = None, pad_slot_id: int = -1) -> torch.Tensor:
        """One token per row.

        Args:
            hidden: ``[batch, hidden_size]`` in the mixer's dtype.
            state_indices: ``[batch]`` int32/int64 slot per row, or None (row ``i`` -> slot ``i``).
            pad_slot_id: rows with this index get a zero output and touch no state.

        Returns:
            ``[batch, hidden_size]`` in ``hidden.dtype``.
        """
        weight = self.out_proj.weight
        if hidden.dim() != 2 or hidden.shape[1] != self.hidden_size:
            raise ValueError(f"hidden: expected [batch, hidden_size={self.hidden_size}], got {tuple(hidden.shape)}")
        if hidden.dtype != weight.dtype:
            raise ValueError(f"hidden: expected the mixer's dtype {weight.dtype}, got {hidden.dtype}")
        batch = hidden.shape[0]
        # Resolve (and validate) the slots before the conv state is touched.
        rows, _ = live_rows(state_indices, batch, self.slots, pad_slot_id, device=hidden.device)
        mixed_qkv, a, b, gate = self._project(hidden)
        mixed_qkv = causal_conv1d_update(
            self.conv_state, mixed_qkv, self.conv_weight, None, self.activation, state_indices, pad_slot_id
        )
        q, k, v = mixed_qkv.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        op_inputs = dict(
            q=q.reshape(batch, self.num_k_heads, self.head_k_dim),
            k=k.reshape(batch, self.num_k_heads, self.head_k_dim),
            v=v.reshape(batch, self.num_v_heads, self.head_v_dim),
            a=a, b=b, A_log=self.A_log, dt_bias=self.dt_bias,
            state_indices=state_indices, pad_slot_id=pad_slot_id,
        )
        if self.replay_state is not None:
            o = self._op("replay_step")(self.replay_state, **op_inputs)
        else:
            o = self._op("standard_step")(self.ssm_state, **op_inputs)
        out = self.out_proj(self._output_norm(o, gate).reshape(batch, self.value_dim))
        live = torch.zeros(batch, dtype=torch.bool, device=hidden.device)
        live[rows] = True
        return torch.where(live[:, None], out, torch.zeros((), dtype=out.dtype, device=out.device))

    @torch.no_grad()
    def prefill(self, hidden: torch.Tensor, state_indices: torch.Tensor | None = None, pad_slot_id: int = -1) -> torch.Tensor:
        """Run a prompt through the mixer, continuing each slot's current state.

        Correctness first: :meth:`decode` token by token (no chunked prefill). Call
        :meth:`reset_slots` first to start new sequences.

        Args:
            hidden: ``[batch, seq, hidden_size]``.
            state_indices: ``[batch]`` int32/int64 slot per row, or None.

        Returns:
            ``[batch, seq, hidden_size]`` in ``hidden.dtype``.
        """
        check_prompt(hidden, self.hidden_size)
        return torch.stack([self.decode(hidden[:, t], state_indices, pad_slot_id) for t in range(hidden.shape[1])], 1)

    forward = decode


class ReplayGatedDeltaNet(DeltaRuleMixer):
    """Gated DeltaNet mixer (Qwen3.5 / Qwen3-Next) for decoding, one token per row.

    Args:
        hidden_size: model width.
        num_k_heads, num_v_heads: ``H`` key heads, ``HV`` value heads (``H`` divides ``HV``).
        head_k_dim, head_v_dim: ``d_k``, ``d_v``.
        d_conv: conv kernel width.
        slots: cache slots to allocate state for.
        config: the :class:`ReplaySSMConfig` (window, draft room, checkpoint dtype, stagger).
        mode: ``"replay"`` (ReplaySSM state) or ``"standard"`` (write the state every token).
        backend: a name in ``DELTA_RULE_BACKENDS["gdn"]`` or a module with the ``gdn_*`` functions.
        activation: conv activation (``"silu"``).  norm_eps: output RMSNorm epsilon.
        dtype: parameter and activation dtype.

    Parameters use Qwen3.5's split layout (``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``,
    ``in_proj_a``); :meth:`from_hf` converts Qwen3-Next's fused, per-key-head interleaved
    ``in_proj_qkvz`` / ``in_proj_ba``.
    """

    kind = "gdn"
    norm_gate = "silu"

    def __init__(
        self, *, hidden_size: int, num_k_heads: int, num_v_heads: int, head_k_dim: int, head_v_dim: int,
        d_conv: int, slots: int, config: ReplaySSMConfig | None = None, mode: str = "replay",
        backend: str | ModuleType = "reference", activation: str = "silu", norm_eps: float = 1e-6,
        dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        config = check_mixer_args(config, dtype=dtype, hidden_size=hidden_size, num_k_heads=num_k_heads,
                                  num_v_heads=num_v_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim, d_conv=d_conv,
                                  slots=slots)
        conv_dim = 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim
        self._init_state(
            num_v_heads=num_v_heads, num_k_heads=num_k_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim,
            conv_dim=conv_dim, d_conv=d_conv, slots=slots, config=config, mode=mode, backend=backend,
            dtype=dtype, device=device,
        )
        self.hidden_size, self.activation, self.norm_eps = hidden_size, activation, norm_eps
        factory = dict(dtype=dtype, device=device)
        self.in_proj_qkv = nn.Linear(hidden_size, conv_dim, bias=False, **factory)
        self.in_proj_z = nn.Linear(hidden_size, self.value_dim, bias=False, **factory)
        self.in_proj_b = nn.Linear(hidden_size, num_v_heads, bias=False, **factory)
        self.in_proj_a = nn.Linear(hidden_size, num_v_heads, bias=False, **factory)
        self.conv_weight = nn.Parameter(torch.zeros(conv_dim, d_conv, **factory))
        self.dt_bias = nn.Parameter(torch.ones(num_v_heads, **factory))
        self.A_log = nn.Parameter(torch.zeros(num_v_heads, **factory))
        self.norm_weight = nn.Parameter(torch.ones(head_v_dim, **factory))
        self.out_proj = nn.Linear(self.value_dim, hidden_size, bias=False, **factory)

    @classmethod
    def from_hf(
        cls, module: nn.Module, config: ReplaySSMConfig | None = None, slots: int = 1, *, mode: str = "replay",
        backend: str | ModuleType = "reference",
    ) -> "ReplayGatedDeltaNet":
        """Copy the weights of a Hugging Face ``Qwen3_5GatedDeltaNet`` or ``Qwen3NextGatedDeltaNet``."""
        fused = hasattr(module, "in_proj_qkvz")
        projections = ("in_proj_qkvz", "in_proj_ba") if fused else ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")
        required = projections + ("conv1d", "dt_bias", "A_log", "norm", "out_proj", "num_v_heads", "num_k_heads")
        _check_hf_module(module, required, "a Hugging Face Qwen3.5 / Qwen3-Next gated delta net")
        weight = module.out_proj.weight
        mixer = cls(
            hidden_size=module.hidden_size, num_k_heads=module.num_k_heads, num_v_heads=module.num_v_heads,
            head_k_dim=module.head_k_dim, head_v_dim=module.head_v_dim, d_conv=module.conv_kernel_size,
            slots=slots, config=config, mode=mode, backend=backend, activation=module.activation,
            norm_eps=module.norm.variance_epsilon, dtype=weight.dtype, device=weight.device,
        )
        if fused:
            qkv, z, b, a = _split_qwen3_next(module)
        else:
            qkv, z, b, a = (getattr(module, name).weight for name in projections)
        with torch.no_grad():
            for target, source in zip((mixer.in_proj_qkv, mixer.in_proj_z, mixer.in_proj_b, mixer.in_proj_a),
                                      (qkv, z, b, a)):
                target.weight.copy_(source)
            mixer.conv_weight.copy_(module.conv1d.weight.squeeze(1))
            mixer.dt_bias.copy_(module.dt_bias)
            mixer.A_log.copy_(module.A_log)
            mixer.norm_weight.copy_(module.norm.weight)
            mixer.out_proj.weight.copy_(module.out_proj.weight)
        return mixer

    def _project(self, hidden):
        gate = self.in_proj_z(hidden).reshape(hidden.shape[0], self.num_v_heads, self.head_v_dim)
        return self.in_proj_qkv(hidden), self.in_proj_a(hidden), self.in_proj_b(hidden), gate


def _check_hf_module(module: nn.Module, required: tuple[str, ...], expected: str) -> None:
    missing = [name for name in required if not hasattr(module, name)]
    if missing:
        raise ValueError(f"module: expected {expected}, {type(module).__name__} lacks {missing}")
    if module.conv1d.bias is not None:
        # The decode path runs the conv without bias, as both model families define it.
        raise ValueError(f"module: expected {expected} with a bias-free conv1d")


def _split_qwen3_next(module: nn.Module) -> tuple[torch.Tensor, ...]:
    """Qwen3-Next's fused projection weights in Qwen3.5's layout: ``(qkv, z, b, a)``.

    Qwen3-Next groups the rows of ``in_proj_qkvz`` per key head as ``[q | k | v | z]`` (``v`` and
    ``z`` holding the ``HV / H`` value heads of that key head) and ``in_proj_ba`` as ``[b | a]``;
    Qwen3.5 keeps all ``q``, then all ``k``, then all ``v`` rows (value heads in the same order).
    """
    H, HV, d_k, d_v = module.num_k_heads, module.num_v_heads, module.head_k_dim, module.head_v_dim
    share = HV // H
    qkvz = module.in_proj_qkvz.weight.reshape(H, 2 * d_k + 2 * share * d_v, -1)
    q, k, v, z = qkvz.split([d_k, d_k, share * d_v, share * d_v], dim=1)
    b, a = module.in_proj_ba.weight.reshape(H, 2 * share, -1).split([share, share], dim=1)
    width = qkvz.shape[-1]
    qkv = torch.cat([q.reshape(-1, width), k.reshape(-1, width), v.reshape(-1, width)])
    return qkv, z.reshape(-1, width), b.reshape(-1, width), a.reshape(-1, width)
