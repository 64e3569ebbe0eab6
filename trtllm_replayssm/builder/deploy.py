"""The deployable files next to the checkpoint: ``replayssm.yaml``, ``trtllm-serve.yaml`` and the
Triton model repository (TensorRT-LLM's LLM-API Python-backend layout)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from ..config import ReplaySSMConfig
from .trtllm_options import check_options

__all__ = ["TRITON_MODEL_NAME", "serve_options", "write_serve_yaml", "write_triton_repo"]

TRITON_MODEL_NAME = "tensorrt_llm"
_TRITON_MODEL_PY = Path(__file__).with_name("triton_python_model.py")
# TensorRT-LLM's SSM cache dtype for our recurrence checkpoint; it has no FP8 SSM cache, the
# ReplaySSM cache keeps that one itself.
_MAMBA_CACHE_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "auto"}


def serve_options(replay: ReplaySSMConfig, hf_config, *, max_batch_size: int = 256) -> dict[str, Any]:
    """LLM-API options for ``trtllm-serve --extra_llm_api_options`` (checked against the list).

    Speculative decoding, when ``replay.max_draft_tokens > 0``: the model's own MTP head when the
    checkpoint has one (``num_nextn_predict_layers``, ``mtp_num_hidden_layers``), else n-gram
    drafting, which needs no draft model and runs on TensorRT-LLM's PyTorch backend.
    """
    options: dict[str, Any] = {
        "backend": "pytorch",
        "max_batch_size": max_batch_size,
        "kv_cache_config": {
            "enable_block_reuse": False,  # SSM states cannot be rebuilt from reused KV blocks
            "free_gpu_memory_fraction": 0.9,
            "mamba_ssm_cache_dtype": _MAMBA_CACHE_DTYPE[replay.checkpoint_dtype],
        },
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": max_batch_size},
    }
    drafts = replay.max_draft_tokens
    if drafts:
        mtp_layers = int(getattr(hf_config, "num_nextn_predict_layers", 0) or getattr(hf_config, "mtp_num_hidden_layers", 0) or 0)
        if mtp_layers:
            options["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": min(drafts, mtp_layers)}
        else:
            options["speculative_config"] = {"decoding_type": "NGram", "max_draft_len": drafts, "max_matching_ngram_size": 2}
    options["model_kwargs"] = {"replayssm": replay.to_dict()}
    check_options(options)
    return options


def write_serve_yaml(path: Path, options: dict[str, Any]) -> None:
    header = (
        "# TensorRT-LLM LLM-API options for this build:\n"
        "#   trtllm-serve checkpoint --extra_llm_api_options trtllm-serve.yaml\n"
        "# model_kwargs.replayssm carries the ReplaySSM state configuration to the integration.\n"
    )
    path.write_text(header + yaml.safe_dump(options, sort_keys=False))


def _pbtxt_io(name: str, data_type: str, dims: str, optional: bool) -> str:
    opt = "\n    optional: true" if optional else ""
    return f"  {{\n    name: \"{name}\"\n    data_type: {data_type}\n    dims: [ {dims} ]{opt}\n  }}"


def config_pbtxt() -> str:
    """Triton model configuration of the Python-backend model (one request per call)."""
    inputs = [
        _pbtxt_io("text_input", "TYPE_STRING", "-1", False),
        _pbtxt_io("sampling_param_max_tokens", "TYPE_INT32", "1", True),
        _pbtxt_io("sampling_param_temperature", "TYPE_FP32", "1", True),
        _pbtxt_io("sampling_param_top_p", "TYPE_FP32", "1", True),
        _pbtxt_io("sampling_param_top_k", "TYPE_INT32", "1", True),
        _pbtxt_io("sampling_param_seed", "TYPE_UINT64", "1", True),
    ]
    outputs = [_pbtxt_io("text_output", "TYPE_STRING", "-1", False)]
    return (
        f'name: "{TRITON_MODEL_NAME}"\n'
        'backend: "python"\n'
        "max_batch_size: 0\n"
        "model_transaction_policy {\n  decoupled: false\n}\n"
        "# The Python model owns the GPU through TensorRT-LLM; Triton runs it as a CPU instance.\n"
        "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n"
        "input [\n" + ",\n".join(inputs) + "\n]\n"
        "output [\n" + ",\n".join(outputs) + "\n]\n"
    )


def write_triton_repo(repo: Path, options: dict[str, Any]) -> None:
    """``repo/tensorrt_llm/{config.pbtxt, 1/model.py, 1/model.yaml}``.

    ``model.yaml`` holds the same LLM-API options as ``trtllm-serve.yaml`` with ``model`` given
    relative to ``1/`` (the build directory may be moved as a whole).
    """
    version_dir = repo / TRITON_MODEL_NAME / "1"
    version_dir.mkdir(parents=True)
    (repo / TRITON_MODEL_NAME / "config.pbtxt").write_text(config_pbtxt())
    shutil.copyfile(_TRITON_MODEL_PY, version_dir / "model.py")
    model_yaml = {"model": "../../../checkpoint", **options, "triton_config": {"max_batch_size": 0, "decoupled": False}}
    (version_dir / "model.yaml").write_text(
        "# LLM-API options (as trtllm-serve.yaml); a relative model path is resolved against this directory.\n"
        + yaml.safe_dump(model_yaml, sort_keys=False)
    )
