"""``ReplayStateCache``: the slot pool that holds every SSM layer's ReplaySSM decode state.

One cache serves one model. For each of its SSM layers it keeps the kind's state dataclass
(``Mamba2ReplayState`` / ``DeltaRuleReplayState``: checkpoint, input rings, cursors) and the
short-convolution state ``[slots, conv_dim, d_conv - 1]`` (TensorRT-LLM's layout). A *slot* is
one sequence's row in all of them at once; the engine allocates a slot when a sequence starts,
passes slot ids to the ops as ``state_indices`` and frees the slot when the sequence ends.

Layers are described by :class:`SSMLayerSpec`. Two registries keep the cache open to new kinds
and new model families without editing this module:

- :data:`STATE_ALLOCATORS` maps a layer kind (``"mamba2"``, ``"gdn"``, ``"kda"``) to a function
  that allocates that kind's state;
- :data:`CONFIG_READERS` maps a Hugging Face ``model_type`` to a function that lists the SSM
  layers of such a config (see :func:`register_config_reader`).
"""

from __future__ import annotations

import numbers

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from .config import ReplaySSMConfig
from .ops._state import ReplayStateBase

__all__ = [
    "CONFIG_READERS",
    "STATE_ALLOCATORS",
    "ReplayStateCache",
    "SSMLayerSpec",
    "register_config_reader",
    "register_state_allocator",
]

_TORCH_CHECKPOINT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


@dataclass(frozen=True)
class SSMLayerSpec:
    """Dimensions of one SSM layer's decode state.

    Attributes:
        kind: ``"mamba2"``, ``"gdn"`` or ``"kda"`` (a key of :data:`STATE_ALLOCATORS`).
        dims: the kind's allocator keywords. Mamba-2: ``heads, head_dim, d_state, groups``;
            GDN: ``v_heads, k_heads, d_k, d_v``; KDA: ``heads, d_k, d_v`` (+ ``k_heads``).
        conv_dim: channels of the short convolution (0: the layer has none).
        d_conv: width of the short convolution; the cache keeps ``d_conv - 1`` past inputs.
    """

    kind: str
    dims: Mapping[str, int] = field(default_factory=dict)
    conv_dim: int = 0
    d_conv: int = 4

    def __post_init__(self) -> None:
        if self.kind not in STATE_ALLOCATORS:
            raise ValueError(f"SSMLayerSpec.kind: expected one of {sorted(STATE_ALLOCATORS)}, got {self.kind!r}")
        if not isinstance(self.dims, Mapping):
            raise ValueError(f"SSMLayerSpec.dims: expected a mapping of name -> int, got {type(self.dims).__name__}")
        for name, value in self.dims.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SSMLayerSpec.dims[{name!r}]: expected a positive int, got {value!r}")
        if self.kind in STATE_DIMS:
            required, optional = STATE_DIMS[self.kind]
            missing = [n for n in required if n not in self.dims]
            unknown = [n for n in self.dims if n not in required + optional]
            if missing or unknown:
                raise ValueError(
                    f"SSMLayerSpec.dims: a {self.kind} layer expects {list(required)}"
                    + (f" (optionally {list(optional)})" if optional else "")
                    + (f"; missing {missing}" if missing else "") + (f"; unknown {unknown}" if unknown else "")
                )
        for name, least in (("conv_dim", 0), ("d_conv", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"SSMLayerSpec.{name}: expected an int >= {least}, got {value!r}")

    @classmethod
    def mamba2(cls, heads: int, head_dim: int, d_state: int, groups: int, d_conv: int = 4) -> "SSMLayerSpec":
        """A Mamba-2 layer; its convolution runs over ``x, B, C``: ``heads*head_dim + 2*groups*d_state``."""
        return cls(
            "mamba2",
            {"heads": heads, "head_dim": head_dim, "d_state": d_state, "groups": groups},
            conv_dim=heads * head_dim + 2 * groups * d_state,
            d_conv=d_conv,
        )


Allocator = Callable[..., ReplayStateBase]
ConfigReader = Callable[[Any], dict[int, SSMLayerSpec]]


def _allocate_mamba2(slots, dims, config, **kwargs):
    from .ops.mamba2.state import Mamba2ReplayState

    return Mamba2ReplayState.allocate(slots, config=config, **dims, **kwargs)


def _allocate_gdn(slots, dims, config, **kwargs):
    from .ops.gdn.state import DeltaRuleReplayState

    return DeltaRuleReplayState.allocate(slots, config=config, **dims, **kwargs)


def _allocate_kda(slots, dims, config, **kwargs):
    from .ops.kda.state import allocate

    return allocate(slots, config=config, **dims, **kwargs)


#: layer kind -> ``fn(slots, dims, config, *, activation_dtype, checkpoint_dtype, device)``.
STATE_ALLOCATORS: dict[str, Allocator] = {"mamba2": _allocate_mamba2, "gdn": _allocate_gdn, "kda": _allocate_kda}
#: layer kind -> (required, optional) names of :attr:`SSMLayerSpec.dims` (kinds not listed: unchecked).
STATE_DIMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "mamba2": (("heads", "head_dim", "d_state", "groups"), ()),
    "gdn": (("v_heads", "k_heads", "d_k", "d_v"), ()),
    "kda": (("heads", "d_k", "d_v"), ("k_heads",)),
}
#: Hugging Face ``model_type`` -> ``fn(hf_config) -> {layer_idx: SSMLayerSpec}``.
CONFIG_READERS: dict[str, ConfigReader] = {}


def register_state_allocator(kind: str, fn: Allocator, dims: tuple[tuple[str, ...], tuple[str, ...]] | None = None
                             ) -> None:
    """Teach the cache a new layer kind; ``dims``: its (required, optional) dims names, checked by
    :class:`SSMLayerSpec` (None: unchecked)."""
    STATE_ALLOCATORS[kind] = fn
    if dims is not None:
        STATE_DIMS[kind] = (tuple(dims[0]), tuple(dims[1]))
    else:
        STATE_DIMS.pop(kind, None)


def register_config_reader(model_type: str, fn: ConfigReader) -> None:
    """Teach :meth:`ReplayStateCache.from_hf_config` a new model family."""
    CONFIG_READERS[model_type] = fn


def _read_nemotron_h(cfg) -> dict[int, SSMLayerSpec]:
    # Nemotron-H names its Mamba-2 blocks "linear_attention" (legacy pattern letter "M").
    spec = SSMLayerSpec.mamba2(cfg.mamba_num_heads, cfg.mamba_head_dim, cfg.ssm_state_size, cfg.n_groups, cfg.conv_kernel)
    return {i: spec for i, t in enumerate(cfg.layers_block_type) if t in ("linear_attention", "mamba")}


def _read_mamba2(cfg) -> dict[int, SSMLayerSpec]:
    spec = SSMLayerSpec.mamba2(cfg.num_heads, cfg.head_dim, cfg.state_size, cfg.n_groups, cfg.conv_kernel)
    return {i: spec for i in range(cfg.num_hidden_layers)}


register_config_reader("nemotron_h", _read_nemotron_h)
register_config_reader("mamba2", _read_mamba2)


def _read_gated_deltanet(cfg) -> dict[int, SSMLayerSpec]:
    # Qwen3-Next / Qwen3.5: the short convolution runs over q, k (key dims) and v (value dims).
    hv, h, d_k, d_v = (cfg.linear_num_value_heads, cfg.linear_num_key_heads, cfg.linear_key_head_dim,
                       cfg.linear_value_head_dim)
    spec = SSMLayerSpec("gdn", {"v_heads": hv, "k_heads": h, "d_k": d_k, "d_v": d_v},
                        conv_dim=2 * h * d_k + hv * d_v, d_conv=cfg.linear_conv_kernel_dim)
    return {i: spec for i, t in enumerate(cfg.layer_types) if t == "linear_attention"}


def _read_kimi_linear(cfg) -> dict[int, SSMLayerSpec]:
    # Kimi Linear's KDA: as many key heads as value heads, one short convolution over q, k, v.
    heads, d = cfg.linear_num_heads, cfg.linear_head_dim
    spec = SSMLayerSpec("kda", {"heads": heads, "d_k": d, "d_v": d}, conv_dim=3 * heads * d,
                        d_conv=cfg.linear_conv_kernel_dim)
    return {i: spec for i, t in enumerate(cfg.layer_types) if t == "linear_attention"}


for _model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):
    register_config_reader(_model_type, _read_gated_deltanet)
for _model_type in ("qwen3_5", "qwen3_5_moe"):  # the multimodal wrappers keep the LM in text_config
    register_config_reader(_model_type, lambda cfg: _read_gated_deltanet(cfg.text_config))
register_config_reader("kimi_linear", _read_kimi_linear)


class ReplayStateCache:
    """Per-layer ReplaySSM states and conv states of a model, addressed by slot.

    Args:
        layers: ``{layer_idx: SSMLayerSpec}`` for every SSM layer of the model.
        slots: how many sequences the cache holds at once.
        config: the ReplaySSM configuration (window, drafts, checkpoint precision, stagger).
        activation_dtype: dtype of the input rings and conv states (the model's dtype).
        device: where every tensor lives.

    Attributes:
        states: ``{layer_idx: state}``, the kind's state dataclass of each layer.
        conv_states: ``{layer_idx: [slots, conv_dim, d_conv - 1]}`` in ``activation_dtype``.
    """

    def __init__(
        self,
        layers: Mapping[int, SSMLayerSpec],
        slots: int,
        config: ReplaySSMConfig | None = None,
        *,
        activation_dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str | None = None,
    ) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots: expected a positive int, got {slots!r}")
        if not isinstance(layers, Mapping):
            raise ValueError(f"layers: expected a mapping of layer index -> SSMLayerSpec, got {type(layers).__name__}")
        if not layers:
            raise ValueError("layers: expected at least one SSM layer, got none")
        for idx, spec in layers.items():
            if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
                raise ValueError(f"layers: expected layer indices that are ints >= 0, got {idx!r}")
            if not isinstance(spec, SSMLayerSpec):
                raise ValueError(f"layers[{idx}]: expected an SSMLayerSpec, got {type(spec).__name__}")
        if config is not None and not isinstance(config, ReplaySSMConfig):
            raise ValueError(f"config: expected a ReplaySSMConfig or None, got {type(config).__name__}")
        if not isinstance(activation_dtype, torch.dtype) or not activation_dtype.is_floating_point:
            raise ValueError(f"activation_dtype: expected a floating-point torch.dtype, got {activation_dtype!r}")
        try:
            device = torch.device(device) if device is not None else torch.device("cpu")
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"device: expected a torch.device or a device string, got {device!r}") from err
        self.config = config or ReplaySSMConfig()
        if self.config.checkpoint_dtype not in _TORCH_CHECKPOINT_DTYPES:
            raise ValueError(
                f"config.checkpoint_dtype: {self.config.checkpoint_dtype!r} needs block scales this cache does "
                f"not allocate yet; expected one of {sorted(_TORCH_CHECKPOINT_DTYPES)}"
            )
        if self.config.read_format != "none":
            raise ValueError(
                f"config.read_format: read copies are not allocated yet; expected 'none', got "
                f"{self.config.read_format!r}"
            )
        self.layers = dict(sorted(layers.items()))
        self.num_slots = slots
        self.activation_dtype = activation_dtype
        self.device = device
        ckpt_dtype = _TORCH_CHECKPOINT_DTYPES[self.config.checkpoint_dtype]
        self.states: dict[int, ReplayStateBase] = {
            idx: STATE_ALLOCATORS[spec.kind](
                slots,
                dict(spec.dims),
                self.config,
                activation_dtype=activation_dtype,
                checkpoint_dtype=ckpt_dtype,
                device=self.device,
            )
            for idx, spec in self.layers.items()
        }
        self.conv_states: dict[int, torch.Tensor] = {
            idx: torch.zeros(slots, spec.conv_dim, spec.d_conv - 1, dtype=activation_dtype, device=self.device)
            for idx, spec in self.layers.items()
            if spec.conv_dim > 0
        }
        self._in_use: set[int] = set()

    @classmethod
    def from_hf_config(cls, hf_config, slots: int, config: ReplaySSMConfig | None = None, **kwargs) -> "ReplayStateCache":
        """Size the cache from a Hugging Face config (``model_type`` in :data:`CONFIG_READERS`)."""
        model_type = getattr(hf_config, "model_type", None)
        if model_type not in CONFIG_READERS:
            raise ValueError(
                f"hf_config: no reader for model_type {model_type!r}; expected one of {sorted(CONFIG_READERS)} "
                "(add one with register_config_reader)"
            )
        try:
            layers = CONFIG_READERS[model_type](hf_config)
        except AttributeError as err:
            raise ValueError(f"hf_config: a {model_type!r} config lacks a field its reader needs: {err}") from err
        if not layers:
            raise ValueError(f"hf_config: this {model_type!r} config has no SSM layers")
        return cls(layers, slots, config, **kwargs)

    # -- slot bookkeeping ---------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self.num_slots - len(self._in_use)

    def is_allocated(self, slot: int) -> bool:
        return self._check_slot(slot) in self._in_use

    def allocate(self) -> int:
        """Take the lowest free slot, reset it for a new sequence and return its id."""
        for slot in range(self.num_slots):
            if slot not in self._in_use:
                self.reset(slot)
                self._in_use.add(slot)
                return slot
        raise ValueError(f"allocate: all {self.num_slots} slots are in use; free one first")

    def free(self, slot: int) -> None:
        """Return ``slot`` to the pool (its contents are reset when it is allocated again)."""
        slot = self._check_slot(slot)
        if slot not in self._in_use:
            raise ValueError(f"slot: slot {slot} is not allocated (already freed or never allocated)")
        self._in_use.remove(slot)

    def reset(self, slot: int) -> None:
        """Zero every layer's checkpoint and conv state of ``slot`` and empty its rings."""
        slot = self._check_slot(slot)
        for state in self.states.values():
            state.reset_slots([slot], self.config)
        for conv in self.conv_states.values():
            conv[slot] = 0

    def _check_slot(self, slot) -> int:
        if isinstance(slot, torch.Tensor) and slot.numel() == 1 and slot.dtype in _INT_DTYPES:
            slot = int(slot)
        if isinstance(slot, bool) or not isinstance(slot, numbers.Integral):
            got = f"a {slot.dtype} tensor of {slot.numel()} elements" if isinstance(slot, torch.Tensor) else repr(slot)
            raise ValueError(f"slot: expected an int (or a one-element integer tensor), got {got}")
        slot = int(slot)
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"slot: slot {slot} out of range [0, {self.num_slots})")
        return slot

    # -- access and accounting ----------------------------------------------------------------------
    def layer(self, layer_idx: int) -> ReplayStateBase:
        if layer_idx not in self.states:
            raise ValueError(f"layer_idx: {layer_idx} is not an SSM layer; expected one of {list(self.states)}")
        return self.states[layer_idx]

    def bytes_per_slot(self) -> dict[str, int]:
        """Bytes one slot takes over all layers: ``checkpoint``, ``ring`` (input rings),
        ``cursors`` (committed / flush_at), ``conv`` and their ``total``."""
        out = {"checkpoint": 0, "ring": 0, "cursors": 0, "conv": 0}
        for state in self.states.values():
            for name, t in state.tensors().items():
                key = "checkpoint" if name == "checkpoint" else "ring" if name.startswith("ring_") else "cursors"
                out[key] += t[0].numel() * t.element_size()
        out["conv"] = sum(t[0].numel() * t.element_size() for t in self.conv_states.values())
        out["total"] = sum(out.values())
        return out

    def slots_for_bytes(self, budget_bytes: int) -> int:
        """How many slots of this layout fit in ``budget_bytes``."""
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
            raise ValueError(f"budget_bytes: expected an int >= 0, got {budget_bytes!r}")
        return budget_bytes // self.bytes_per_slot()["total"]

    def __repr__(self) -> str:
        kinds = sorted({s.kind for s in self.layers.values()})
        return (
            f"ReplayStateCache(layers={len(self.layers)} {kinds}, slots={self.num_slots}, free={self.num_free}, "
            f"window={self.config.window}, bytes_per_slot={self.bytes_per_slot()['total']})"
        )

