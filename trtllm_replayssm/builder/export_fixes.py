"""Repairs of ModelOpt's Hugging Face export, so that TensorRT-LLM reads the checkpoint as
ModelOpt meant it.

* **Tensor names.** ModelOpt renames exported tensors back to the checkpoint's own names
  (transformers' reverse conversion) but gives up on the whole model when one fused tensor is
  3-D, taking any 3-D tensor for stacked experts; Kimi Linear's short convolution
  (``[channels, 1, width]``) triggers it and the export keeps the in-memory names
  (``self_attn.conv1d``, ``mlp.experts.<i>.gate_proj``, ...). :func:`restore_hub_names` redoes
  the reversal with transformers and maps the per-expert names ModelOpt expands fused experts into.
* **Exclusion list.** ModelOpt appends a sentinel to each name before applying the rename rules; a
  rule on the word ``model`` (Nemotron-H's ``model -> backbone``) rewrites the sentinel, which is
  then not stripped (``"lm_head.\\x00backbone.pt_name_sentinel"``). :func:`fix_quant_config`
  rebuilds ``exclude_modules`` from the tensors actually written: every module with a weight
  of two or more dimensions and no quantization scale.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

__all__ = ["clean_module_name", "excluded_modules", "fix_quant_config", "restore_hub_names"]

#: ModelOpt exports fused experts one module per expert, under these leaf names.
_MODELOPT_EXPERT_LEAVES = {"gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",), "up_proj": ("up_proj",)}
_SCALE_SUFFIXES = (".weight_scale", ".weight_scale_2", ".input_scale")
NVFP4_GROUP_SIZE = 16


def clean_module_name(name: str) -> str:
    """``name`` without ModelOpt's sentinel residue (everything from the NUL on) or a trailing dot."""
    if "\x00" in name:
        name = name.split("\x00", 1)[0]
    return name.rstrip(".")


def excluded_modules(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Modules kept unquantized: a ``.weight`` of at least 2 dims (Linear, embedding, conv) and no
    ``.weight_scale`` beside it."""
    out = []
    for key, tensor in tensors.items():
        if key.endswith(".weight") and tensor.dim() >= 2:
            module = key[: -len(".weight")]
            if module + ".weight_scale" not in tensors:
                out.append(module)
    return sorted(out)


def _read_shards(export_dir: Path) -> dict[Path, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    return {path: load_file(str(path)) for path in sorted(export_dir.glob("*.safetensors"))}


def _expert_leaf_renames(model) -> dict[str, str]:
    """ModelOpt's per-expert leaf -> the checkpoint's leaf, from the model's conversion mapping
    (e.g. Kimi Linear: ``gate_proj -> w1``, ``up_proj -> w3``, ``down_proj -> w2``)."""
    from transformers.conversion_mapping import get_model_conversion_mapping

    renames = {}
    for rule in get_model_conversion_mapping(model, add_legacy=False) or []:
        targets = getattr(rule, "target_patterns", None) or []
        sources = getattr(rule, "source_patterns", None) or []
        for target in targets:
            fused = re.search(r"experts\.(\w+)$", target.replace("\\", ""))
            if not fused or fused.group(1) not in _MODELOPT_EXPERT_LEAVES:
                continue
            leaves = [re.search(r"experts\.\*\.(\w+)\.weight", s.replace("\\", "")) for s in sources]
            modelopt_leaves = _MODELOPT_EXPERT_LEAVES[fused.group(1)]
            if all(leaves) and len(leaves) == len(modelopt_leaves):
                renames.update({m: leaf.group(1) for m, leaf in zip(modelopt_leaves, leaves)})
    return renames


def restore_hub_names(export_dir: str | Path, model) -> bool:
    """Rename an export left in the model's in-memory names to the checkpoint's names.

    Does nothing (returns False) when the tensors already carry names that are not in-memory
    module names, i.e. when ModelOpt's own reversal worked.
    """
    from transformers.core_model_loading import revert_weight_conversion

    export_dir = Path(export_dir)
    shards = _read_shards(export_dir)
    memory_modules = {name for name, _ in model.named_modules()}
    keys = [k for tensors in shards.values() for k in tensors]
    in_memory = [k.rsplit(".", 1)[0] in memory_modules for k in keys if ".experts." not in k]
    if not in_memory or not all(in_memory):
        return False
    leaf_renames = _expert_leaf_renames(model)
    expert_leaf = re.compile(r"(\.experts\.\d+\.)(\w+)(\.)")
    index = {}
    from safetensors.torch import save_file

    for path, tensors in shards.items():
        hub = revert_weight_conversion(model, dict(tensors))
        renamed = {expert_leaf.sub(lambda m: m.group(1) + leaf_renames.get(m.group(2), m.group(2)) + m.group(3), k): v.contiguous()
                   for k, v in hub.items()}
        save_file(renamed, str(path), metadata={"format": "pt"})
        index.update({k: path.name for k in renamed})
    index_path = export_dir / "model.safetensors.index.json"
    if index_path.is_file():
        data = json.loads(index_path.read_text())
        data["weight_map"] = dict(sorted(index.items()))
        index_path.write_text(json.dumps(data, indent=2) + "\n")
    return True


def fix_quant_config(export_dir: str | Path) -> dict:
    """Make ``hf_quant_config.json`` and ``config.json``'s ``quantization_config`` describe the
    tensors written, identically.

    ``exclude_modules`` (``ignore`` inline) becomes :func:`excluded_modules` of the checkpoint;
    NVFP4 gets ``group_size`` 16 in both, so TensorRT-LLM's comparison of the two copies finds
    nothing to warn about. Returns the ``hf_quant_config.json`` content.
    """
    export_dir = Path(export_dir)
    tensors = {k: v for shard in _read_shards(export_dir).values() for k, v in shard.items()}
    hf_path = export_dir / "hf_quant_config.json"
    hf = json.loads(hf_path.read_text())
    quant = hf["quantization"]
    quant["exclude_modules"] = excluded_modules(tensors)
    if quant.get("quant_algo") == "NVFP4":
        quant["group_size"] = NVFP4_GROUP_SIZE
    if isinstance(quant.get("quantized_layers"), dict):
        quant["quantized_layers"] = {clean_module_name(k): v for k, v in quant["quantized_layers"].items()}
    hf_path.write_text(json.dumps(hf, indent=4) + "\n")

    cfg_path = export_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    inline = cfg.get("quantization_config") or {}
    inline["quant_method"] = "modelopt"
    inline["quant_algo"] = quant.get("quant_algo")
    inline["ignore"] = list(quant["exclude_modules"])
    if "group_size" in quant:
        inline["group_size"] = quant["group_size"]
    inline.setdefault("producer", hf.get("producer"))
    cfg["quantization_config"] = inline
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return hf
