"""Reading a built checkpoint back: its tensors, and its quantized weights in floating point.

NVFP4 weights are stored as ModelOpt exports them: ``<name>.weight`` ``[out, in/2]`` uint8 (two
E2M1 codes per byte), ``<name>.weight_scale`` ``[out, in/16]`` float8_e4m3fn and
``<name>.weight_scale_2`` ``[]`` float32; FP8 weights as ``<name>.weight`` float8_e4m3fn with a
per-tensor ``<name>.weight_scale``. Decoding uses :mod:`trtllm_replayssm.formats`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

__all__ = ["dequantized_weights", "read_tensors", "read_quant_algo"]


def read_tensors(directory: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files in ``directory``, by name."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(Path(directory).glob("*.safetensors")):
        tensors.update(load_file(str(path)))
    return tensors


def read_quant_algo(directory: str | Path) -> str | None:
    path = Path(directory) / "hf_quant_config.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())["quantization"].get("quant_algo")


def dequantized_weights(tensors: dict[str, torch.Tensor], quant_algo: str | None,
                        dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """``{"<name>.weight": floating-point weight}`` for every quantized weight in ``tensors``."""
    from ..formats.nvfp4 import nvfp4_dequantize

    out = {}
    for key, tensor in tensors.items():
        if not key.endswith(".weight"):
            continue
        base = key[: -len(".weight")]
        scale = tensors.get(base + ".weight_scale")
        if scale is None:
            continue
        if quant_algo == "NVFP4":
            global_scale = tensors[base + ".weight_scale_2"].float()
            out[key] = nvfp4_dequantize(tensor, scale, global_scale, dtype)
        elif quant_algo == "FP8":
            out[key] = (tensor.float() * scale.float()).to(dtype)
        else:
            raise ValueError(f"quant_algo: expected 'NVFP4' or 'FP8' for a checkpoint with weight scales, got {quant_algo!r}")
    return out
