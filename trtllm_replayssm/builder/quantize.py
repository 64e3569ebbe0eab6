"""Weight quantization with NVIDIA ModelOpt and the export TensorRT-LLM loads.

``mtq.quantize`` inserts quantizers, then max-calibrates them: during calibration ModelOpt
collects amax statistics with fake quantization switched off, so the forward loop runs on CPU
as well (only a forward with quantization enabled needs CUDA). ``export_hf_checkpoint`` then
packs the weights (NVFP4: two E2M1 codes per byte, an E4M3 scale per 16 weights, an FP32 scale
per tensor) and writes ``hf_quant_config.json`` plus ``quantization_config`` in ``config.json``.
``export_fixes`` repairs what that export gets wrong.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Iterable

import torch

__all__ = [
    "DEFAULT_EXCLUDES",
    "calibration_batches",
    "quant_config_for",
    "quantize_and_export",
]

#: Modules kept in the checkpoint's precision (``fnmatch`` patterns on quantizer names). The SSM
#: parameters ``A_log``, ``D``, ``dt_bias`` are not Linear layers and are never quantized; the
#: projections listed here feed the decay and the write strength of the recurrence, where a
#: rounding error is applied again at every token.
DEFAULT_EXCLUDES = (
    "*conv1d*",  # short convolution before the SSM (Mamba-2, GDN, KDA)
    "*in_proj_a*",  # GDN decay input a (Qwen3.5)
    "*in_proj_b*",  # GDN beta input b (Qwen3.5); also matches Qwen3-Next's fused in_proj_ba
    "*forget_gate*",  # KDA per-channel decay projections f_a_proj / f_b_proj
    "*self_attn.b_proj*",  # KDA beta projection
    "*norm*",  # RMSNorms, gated norms
    "*mlp.gate.*",  # MoE routers
    "*mixer.gate.*",
    "*shared_expert_gate*",
    "*router*",
    "*lm_head*",
    "*embed*",
)


def quant_config_for(quantization: str, exclude: Iterable[str] = (), default_excludes: bool = True) -> dict:
    """The ``mtq.quantize`` config: ModelOpt's recipe, then our exclusions (later entries win)."""
    import modelopt.torch.quantization as mtq

    recipe = {"nvfp4": mtq.NVFP4_DEFAULT_CFG, "fp8": mtq.FP8_DEFAULT_CFG}[quantization]
    config = copy.deepcopy(recipe)
    entries = list(config["quant_cfg"])
    if not default_excludes:
        # Keep the enabling entries and the class-based disables (embeddings, batch norms cannot
        # be exported quantized); drop the disables by module name.
        entries = [
            e for e in entries
            if e.get("enable", True) or "parent_class" in e or e.get("quantizer_name") == "*"
        ]
    patterns = (list(DEFAULT_EXCLUDES) if default_excludes else []) + list(exclude)
    entries += [{"quantizer_name": p if p.endswith("*") else p + "*", "enable": False} for p in patterns]
    config["quant_cfg"] = entries
    return config


def calibration_batches(tokenizer, lines: list[str], samples: int, seq_len: int) -> list[torch.Tensor]:
    """Pack the calibration text into ``samples`` rows of ``seq_len`` token ids ``[1, seq_len]``.

    The text is tokenized as one stream (lines joined by newlines) and cut into rows, wrapping
    around when it is shorter than ``samples * seq_len`` tokens.
    """
    text = "\n".join(line.strip() for line in lines if line.strip())
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < seq_len:
        raise ValueError(f"calibration text: {len(ids)} tokens, expected at least one row of {seq_len}")
    stream = torch.tensor(ids, dtype=torch.long)
    rows = []
    for i in range(samples):
        start = (i * seq_len) % max(1, len(ids) - seq_len + 1)
        rows.append(stream[start : start + seq_len].unsqueeze(0))
    return rows


def quantize_and_export(model, quantization: str, batches: list[torch.Tensor], export_dir: Path, *,
                        exclude: Iterable[str] = (), default_excludes: bool = True, progress=None) -> dict:
    """Quantize ``model`` in place, calibrate on ``batches`` and export to ``export_dir``.

    Returns the repaired ``hf_quant_config.json`` content. ``progress(n)`` is called after each
    calibration batch.
    """
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    from .export_fixes import fix_quant_config, restore_hub_names
    from .model_io import reference_sequence_kernels

    device = next(model.parameters()).device
    config = quant_config_for(quantization, exclude, default_excludes)

    def forward_loop(m):
        for row in batches:
            m(row.to(device))
            if progress is not None:
                progress(1)

    on_cpu = device.type == "cpu"
    kernels = reference_sequence_kernels(model) if on_cpu else contextlib.nullcontext()
    with kernels, torch.inference_mode(False), torch.no_grad():
        mtq.quantize(model, config, forward_loop)
        export_hf_checkpoint(model, export_dir=export_dir)
    restore_hub_names(export_dir, model)
    return fix_quant_config(export_dir)
