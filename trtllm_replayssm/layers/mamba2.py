"""A decode-side Mamba-2 mixer that keeps its SSM state the ReplaySSM way.

Weight-compatible with Hugging Face's ``NemotronHMamba2Mixer`` (Nemotron-H) and
``Mamba2Mixer``: build it with :meth:`ReplayMamba2Mixer.from_hf`. One decode step per row is

    in_proj -> (gate, xBC, dt) -> causal conv1d update (silu) -> (x, B, C)
            -> SSM op (ReplaySSM step, or the standard recurrence) -> grouped gated RMSNorm
            -> out_proj

Per cache slot the mixer holds the conv state ``[slots, conv_dim, d_conv - 1]`` and either a
:class:`Mamba2ReplayState` (``mode="replay"``) or a plain ``ssm_state``
``[slots, heads, head_dim, d_state]`` (``mode="standard"``), so the two can be run side by side
on the same weights.
"""

from __future__ import annotations

import math
from types import ModuleType

import torch
from torch import nn

from ..config import ReplaySSMConfig
from ..ops._slots import live_rows
from ..ops.mamba2.state import Mamba2ReplayState
from ._common import SlotStateMixin, check_mixer_args, check_prompt, plain_checkpoint_dtype, resolve_backend
from .conv import causal_conv1d_update
from .norm import gated_rms_norm

__all__ = ["ReplayMamba2Mixer", "MAMBA2_BACKENDS"]

#: Op backends by name: modules that define the ``mamba2_*`` functions of ops/README.md.
MAMBA2_BACKENDS = {
    "reference": "trtllm_replayssm.ops.mamba2.reference",
    # the replayssm:: custom ops: Triton kernels on CUDA, the reference on the CPU
    "triton": "trtllm_replayssm.ops.mamba2",
}


class ReplayMamba2Mixer(SlotStateMixin, nn.Module):
    """Mamba-2 mixer for decoding, one token per row, with slot-indexed state.

    Args:
        hidden_size: model width.
        num_heads, head_dim, d_state, n_groups: SSM dims (``heads * head_dim`` is the inner size).
        d_conv: conv kernel width.
        slots: cache slots to allocate state for.
        config: the :class:`ReplaySSMConfig` (window, draft room, checkpoint dtype, stagger).
        mode: ``"replay"`` (ReplaySSM state) or ``"standard"`` (write the state every token).
        backend: name in :data:`MAMBA2_BACKENDS` or a module with the ``mamba2_*`` functions.
        conv_bias, proj_bias: whether the conv / the two projections carry biases.
        activation: conv activation (``"silu"``).
        norm_eps: gated RMSNorm epsilon; ``norm_group_size``: its group (default
            ``heads * head_dim // n_groups``, as Hugging Face's mixers use).
        dt_limit: ``(dt_min, dt_max)`` clamp after softplus (``(0, inf)`` = none).
        dtype: parameter and activation dtype.
    """

    def __init__(
        self,
        *,
        hidden_size: int,
        num_heads: int,
        head_dim: int,
        d_state: int,
        n_groups: int,
        d_conv: int,
        slots: int,
        config: ReplaySSMConfig | None = None,
        mode: str = "replay",
        backend: str | ModuleType = "reference",
        conv_bias: bool = True,
        proj_bias: bool = False,
        activation: str = "silu",
        norm_eps: float = 1e-5,
        norm_group_size: int | None = None,
        dt_limit: tuple[float, float] = (0.0, math.inf),
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.config = check_mixer_args(config, dtype=dtype, hidden_size=hidden_size, num_heads=num_heads,
                                       head_dim=head_dim, d_state=d_state, n_groups=n_groups, d_conv=d_conv,
                                       slots=slots)
        checkpoint_dtype = plain_checkpoint_dtype(self.config, mode)
        if num_heads % n_groups != 0:
            raise ValueError(f"n_groups: expected a divisor of num_heads={num_heads}, got {n_groups}")
        if d_conv < 2:
            raise ValueError(f"d_conv: expected >= 2, got {d_conv}")
        if norm_group_size is not None and (isinstance(norm_group_size, bool) or not isinstance(norm_group_size, int)
                                            or norm_group_size < 1 or (num_heads * head_dim) % norm_group_size):
            raise ValueError(f"norm_group_size: expected None or a positive divisor of num_heads * head_dim = "
                             f"{num_heads * head_dim}, got {norm_group_size!r}")
        if not (isinstance(dt_limit, (tuple, list)) and len(dt_limit) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) for v in dt_limit)
                and 0 <= dt_limit[0] <= dt_limit[1]):
            raise ValueError(f"dt_limit: expected (dt_min, dt_max) with 0 <= dt_min <= dt_max, no NaN, got {dt_limit!r}")
        self.mode = mode
        self.ops = resolve_backend(backend, MAMBA2_BACKENDS)
        self.hidden_size, self.num_heads, self.head_dim = hidden_size, num_heads, head_dim
        self.d_state, self.n_groups, self.d_conv = d_state, n_groups, d_conv
        self.intermediate_size = num_heads * head_dim
        self.conv_dim = self.intermediate_size + 2 * n_groups * d_state
        self.activation = activation
        self.norm_eps = norm_eps
        self.norm_group_size = self.intermediate_size // n_groups if norm_group_size is None else norm_group_size
        self.dt_min = float(dt_limit[0]) if dt_limit[0] > 0 else None
        self.dt_max = float(dt_limit[1]) if math.isfinite(dt_limit[1]) else None

        factory = dict(dtype=dtype, device=device)
        self.in_proj = nn.Linear(hidden_size, self.intermediate_size + self.conv_dim + num_heads, bias=proj_bias, **factory)
        self.conv_weight = nn.Parameter(torch.zeros(self.conv_dim, d_conv, **factory))
        self.conv_bias = nn.Parameter(torch.zeros(self.conv_dim, **factory)) if conv_bias else None
        self.dt_bias = nn.Parameter(torch.zeros(num_heads, **factory))
        self.A_log = nn.Parameter(torch.zeros(num_heads, **factory))
        self.D = nn.Parameter(torch.ones(num_heads, **factory))
        self.norm_weight = nn.Parameter(torch.ones(self.intermediate_size, **factory))
        self.out_proj = nn.Linear(self.intermediate_size, hidden_size, bias=proj_bias, **factory)

        self.register_buffer("conv_state", torch.zeros(slots, self.conv_dim, d_conv - 1, **factory), persistent=False)
        if mode == "replay":
            self.replay_state = Mamba2ReplayState.allocate(
                slots, num_heads, head_dim, d_state, n_groups, self.config,
                activation_dtype=dtype, checkpoint_dtype=checkpoint_dtype, device=device,
            )
            self.ssm_state = None
        else:
            self.replay_state = None
            self.register_buffer(
                "ssm_state", torch.zeros(slots, num_heads, head_dim, d_state, dtype=checkpoint_dtype, device=device),
                persistent=False,
            )

    @property
    def slots(self) -> int:
        return self.conv_state.shape[0]

    @classmethod
    def from_hf(
        cls,
        module: nn.Module,
        config: ReplaySSMConfig | None = None,
        slots: int = 1,
        *,
        mode: str = "replay",
        backend: str | ModuleType = "reference",
    ) -> "ReplayMamba2Mixer":
        """Copy the weights of a Hugging Face ``NemotronHMamba2Mixer`` or ``Mamba2Mixer``."""
        required = ("in_proj", "conv1d", "dt_bias", "A_log", "D", "norm", "out_proj", "num_heads", "head_dim")
        missing = [name for name in required if not hasattr(module, name)]
        if missing:
            raise ValueError(f"module: expected a Hugging Face Mamba-2 mixer, {type(module).__name__} lacks {missing}")
        weight = module.in_proj.weight
        mixer = cls(
            hidden_size=module.hidden_size,
            num_heads=module.num_heads,
            head_dim=module.head_dim,
            d_state=module.ssm_state_size,
            n_groups=module.n_groups,
            d_conv=module.conv_kernel_size,
            slots=slots,
            config=config,
            mode=mode,
            backend=backend,
            conv_bias=module.conv1d.bias is not None,
            proj_bias=module.in_proj.bias is not None,
            activation=module.activation,
            norm_eps=module.norm.variance_epsilon,
            norm_group_size=module.norm.group_size,
            dt_limit=tuple(module.time_step_limit),
            dtype=weight.dtype,
            device=weight.device,
        )
        with torch.no_grad():
            mixer.in_proj.load_state_dict(module.in_proj.state_dict())
            mixer.out_proj.load_state_dict(module.out_proj.state_dict())
            mixer.conv_weight.copy_(module.conv1d.weight.squeeze(1))
            if mixer.conv_bias is not None:
                mixer.conv_bias.copy_(module.conv1d.bias)
            for name in ("dt_bias", "A_log", "D"):
                getattr(mixer, name).copy_(getattr(module, name))
            mixer.norm_weight.copy_(module.norm.weight)
        return mixer

    # -- state -----------------------------------------------------------------------------------

    def A(self) -> torch.Tensor:
        """``[heads]`` float32: ``-exp(A_log)``."""
        return -torch.exp(self.A_log.float())

    def current_ssm_state(self, state_indices: torch.Tensor | None = None) -> torch.Tensor:
        """``[batch, heads, head_dim, d_state]``: the recurrent state of each slot now (either mode)."""
        if self.replay_state is not None:
            return self.ops.mamba2_replay_materialize(self.replay_state, state_indices, A=self.A())
        return self._standard_ssm_state(state_indices)

    # -- forward ---------------------------------------------------------------------------------

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
        if hidden.dim() != 2 or hidden.shape[1] != self.hidden_size:
            raise ValueError(f"hidden: expected [batch, hidden_size={self.hidden_size}], got {tuple(hidden.shape)}")
        if hidden.dtype != self.in_proj.weight.dtype:
            raise ValueError(f"hidden: expected the mixer's dtype {self.in_proj.weight.dtype}, got {hidden.dtype}")
        batch = hidden.shape[0]
        # Resolve (and validate) the slots before the conv state is touched.
        rows, _ = live_rows(state_indices, batch, self.slots, pad_slot_id, device=hidden.device)
        projected = self.in_proj(hidden)
        gate, xBC, dt = projected.split([self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
        xBC = causal_conv1d_update(
            self.conv_state, xBC, self.conv_weight, self.conv_bias, self.activation, state_indices, pad_slot_id
        )
        x, B, C = xBC.split([self.intermediate_size, self.n_groups * self.d_state, self.n_groups * self.d_state], dim=-1)
        ssm_inputs = dict(
            x=x.reshape(batch, self.num_heads, self.head_dim),
            dt=dt,
            A=self.A(),
            B=B.reshape(batch, self.n_groups, self.d_state),
            C=C.reshape(batch, self.n_groups, self.d_state),
            D=self.D,
            z=None,  # Mamba-2 gates inside the norm, not in the scan
            dt_bias=self.dt_bias,
            dt_softplus=True,
            dt_min=self.dt_min,
            dt_max=self.dt_max,
            state_indices=state_indices,
            pad_slot_id=pad_slot_id,
        )
        if self.replay_state is not None:
            y = self.ops.mamba2_replay_step(self.replay_state, **ssm_inputs)
        else:
            y = self.ops.mamba2_standard_step(self.ssm_state, **ssm_inputs)
        y = gated_rms_norm(y.reshape(batch, self.intermediate_size), gate, self.norm_weight, self.norm_eps, self.norm_group_size)
        out = self.out_proj(y.to(hidden.dtype))
        live = torch.zeros(batch, dtype=torch.bool, device=hidden.device)
        live[rows] = True
        return torch.where(live[:, None], out, torch.zeros((), dtype=out.dtype, device=out.device))

    @torch.no_grad()
    def prefill(self, hidden: torch.Tensor, state_indices: torch.Tensor | None = None, pad_slot_id: int = -1) -> torch.Tensor:
        """Run a prompt through the mixer, continuing each slot's current state.

        Correctness first: this runs :meth:`decode` token by token (no chunked scan), so it is
        O(seq) launches. Call :meth:`reset_slots` first to start new sequences.

        Args:
            hidden: ``[batch, seq, hidden_size]``.
            state_indices: ``[batch]`` int32/int64 slot per row, or None.
            pad_slot_id: rows with this index get zero outputs and touch no state.

        Returns:
            ``[batch, seq, hidden_size]`` in ``hidden.dtype``.
        """
        check_prompt(hidden, self.hidden_size)
        return torch.stack([self.decode(hidden[:, t], state_indices, pad_slot_id) for t in range(hidden.shape[1])], dim=1)

    forward = decode
