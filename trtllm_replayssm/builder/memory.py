"""Byte accounting for the build summary: weights before/after, SSM state per sequence under
each state configuration, and how many sequences' states fit on the target GPU.

The per-layer formulas follow the state layouts of ``ops/*/state.py`` (checkpoint
``[heads, P, N]``, input rings of ``window + max_draft_tokens`` entries) plus the read copy of
split precision (replayssm-math.md section 4) and the short-convolution state every engine keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import ReplaySSMConfig

__all__ = [
    "GPU_MEMORY_FRACTION",
    "LayerDims",
    "checkpoint_weight_bytes",
    "layer_dims",
    "sequences_that_fit",
    "state_bytes",
    "state_configurations",
]

#: Share of HBM the engine may use (TensorRT-LLM's default ``free_gpu_memory_fraction``).
GPU_MEMORY_FRACTION = 0.9
_CHECKPOINT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class LayerDims:
    """State dimensions of one SSM layer.

    ``heads``: value heads (Mamba-2 heads); ``P``: head_dim / d_v; ``N``: d_state / d_k;
    ``k_groups``: Mamba-2 B/C groups or GDN/KDA key heads; ``conv_dim``, ``d_conv``: short conv.
    """

    kind: str
    heads: int
    P: int
    N: int
    k_groups: int
    conv_dim: int
    d_conv: int


def layer_dims(module, kind: str) -> LayerDims:
    """Read the dimensions from a Hugging Face mixer module (Mamba-2, GDN or KDA)."""
    if kind == "mamba2":
        return LayerDims(kind, module.num_heads, module.head_dim, module.ssm_state_size, module.n_groups,
                         module.conv_dim, module.conv_kernel_size)
    if kind == "gdn":
        return LayerDims(kind, module.num_v_heads, module.head_v_dim, module.head_k_dim, module.num_k_heads,
                         module.conv_dim, module.conv_kernel_size)
    if kind == "kda":
        return LayerDims(kind, module.num_heads, module.head_dim, module.head_dim, module.num_heads,
                         module.conv_dim, module.conv_kernel_size)
    raise ValueError(f"kind: expected 'mamba2', 'gdn' or 'kda', got {kind!r}")


def state_bytes(dims: LayerDims, replay: ReplaySSMConfig | None, activation_bytes: int = 2,
                draft_snapshots: int = 0) -> dict[str, int]:
    """Bytes one sequence's state of one layer takes.

    Args:
        dims: the layer.
        replay: ``None`` for standard decode (FP32 state, no ring), else the ReplaySSM config.
        activation_bytes: bytes of one ring entry element of ``x``/``B``/``k``/``v`` (BF16: 2).
        draft_snapshots: standard decode only: extra FP32 state snapshots kept for speculative
            verification (one per draft token, as engines without ReplaySSM do).

    Returns:
        ``checkpoint`` (incl. FP8 row scales), ``read_copy`` (incl. scales), ``ring``,
        ``cursors``, ``conv`` and ``total``.
    """
    elems = dims.heads * dims.P * dims.N
    rows = dims.heads * dims.P
    conv = dims.conv_dim * (dims.d_conv - 1) * activation_bytes
    if replay is None:
        out = {"checkpoint": elems * 4 * (1 + draft_snapshots), "read_copy": 0, "ring": 0, "cursors": 0, "conv": conv}
    else:
        checkpoint = elems * _CHECKPOINT_BYTES[replay.checkpoint_dtype]
        if replay.checkpoint_dtype == "fp8":
            checkpoint += rows * 4
        read = {
            "none": 0,
            "bf16": elems * 2,
            "fp8": elems + rows * 4,
            # two E2M1 codes per byte, one E4M3 scale per 16 elements, one FP32 scale per head
            "nvfp4": elems // 2 + elems // 16 + dims.heads * 4,
        }[replay.read_format]
        cap = replay.ring_capacity
        if dims.kind == "mamba2":
            ring = cap * (dims.heads * dims.P * activation_bytes + dims.heads * 4 + dims.k_groups * dims.N * activation_bytes)
        else:
            g_per_entry = dims.heads * (dims.N if dims.kind == "kda" else 1) * 4
            ring = cap * (
                dims.k_groups * dims.N * activation_bytes  # k
                + dims.heads * dims.P * activation_bytes  # v
                + dims.heads * 4  # beta
                + g_per_entry  # g
                + dims.heads * dims.P * 4  # u
            )
        out = {"checkpoint": checkpoint, "read_copy": read, "ring": ring, "cursors": 8, "conv": conv}
    out["total"] = sum(out.values())
    return out


def state_configurations(replay: ReplaySSMConfig) -> dict[str, ReplaySSMConfig | str | None]:
    """The configurations the summary compares: standard FP32 decode (``None``), with speculative
    decoding also standard decode with one FP32 snapshot per draft token (``"snapshots"``),
    ReplaySSM with an FP32 checkpoint and its ring, and the configured (split-precision) state."""
    plain = ReplaySSMConfig(window=replay.window, max_draft_tokens=replay.max_draft_tokens)
    out: dict[str, ReplaySSMConfig | str | None] = {"standard_fp32": None}
    if replay.max_draft_tokens:
        out["standard_fp32_draft_snapshots"] = "snapshots"
    out.update({"replayssm_fp32": plain, "replayssm_configured": replay})
    return out


def sequences_that_fit(memory_bytes: int, weight_bytes: int, state_bytes_per_sequence: int) -> int:
    """Sequences whose SSM state fits next to the weights in ``GPU_MEMORY_FRACTION`` of HBM
    (attention KV cache not counted: it is the same for every state configuration)."""
    budget = int(memory_bytes * GPU_MEMORY_FRACTION) - int(weight_bytes)
    return max(0, budget // max(1, int(state_bytes_per_sequence)))


def checkpoint_weight_bytes(directory: Path) -> int:
    """Bytes of every tensor stored in the ``*.safetensors`` files of ``directory``."""
    from safetensors import safe_open

    total = 0
    for path in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for key in f.keys():
                sl = f.get_slice(key)
                numel = 1
                for d in sl.get_shape():
                    numel *= d
                total += numel * _dtype_bytes(sl.get_dtype())
    return total


def _dtype_bytes(name: str) -> int:
    return {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
            "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}[name]
