"""The TensorRT-LLM LLM-API option names ``trtllm-serve.yaml`` may use: the one list.

Taken from ``tensorrt_llm/llmapi/llm_args.py`` (``TorchLlmArgs`` and the config classes it
nests) of the TensorRT-LLM version below. Those pydantic models forbid unknown fields, so a
misspelled or removed option makes ``trtllm-serve`` refuse the file; :func:`check_options`
catches that at build time. Only the options the builder writes are listed, nested as the YAML
nests them; a value of ``None`` means a leaf.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["ALLOWED_OPTIONS", "MAMBA_SSM_CACHE_DTYPES", "SPECULATIVE_DECODING_TYPES", "TRTLLM_VERSION", "check_options"]

#: The TensorRT-LLM line the integration targets (PyTorch backend, ``TorchLlmArgs``).
TRTLLM_VERSION = "1.2"

#: ``KvCacheConfig.mamba_ssm_cache_dtype`` accepts exactly these.
MAMBA_SSM_CACHE_DTYPES = ("auto", "float16", "bfloat16", "float32")

#: ``speculative_config.decoding_type`` -> the fields of that config class the builder may write.
SPECULATIVE_DECODING_TYPES: dict[str, tuple[str, ...]] = {
    "MTP": ("decoding_type", "num_nextn_predict_layers"),
    "NGram": ("decoding_type", "max_draft_len", "max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"),
    "Draft_Target": ("decoding_type", "max_draft_len", "speculative_model"),
}

ALLOWED_OPTIONS: dict[str, Any] = {
    "backend": None,
    "dtype": None,
    "max_batch_size": None,
    "max_num_tokens": None,
    "max_seq_len": None,
    "tensor_parallel_size": None,
    "trust_remote_code": None,
    "enable_chunked_prefill": None,
    "disable_overlap_scheduler": None,
    "kv_cache_config": {
        "enable_block_reuse": None,
        "free_gpu_memory_fraction": None,
        "dtype": None,
        "mamba_ssm_cache_dtype": None,
        "tokens_per_block": None,
    },
    "cuda_graph_config": {"batch_sizes": None, "max_batch_size": None, "enable_padding": None},
    "moe_config": {"backend": None},
    "speculative_config": {name: None for fields in SPECULATIVE_DECODING_TYPES.values() for name in fields},
    # ``model_kwargs`` entries are passed to the model's config; TensorRT-LLM ignores keys it
    # does not know, so this is where the ReplaySSM section travels to the integration.
    "model_kwargs": {"replayssm": "*"},
}


def check_options(options: Mapping[str, Any], allowed: Mapping[str, Any] = ALLOWED_OPTIONS, path: str = "") -> None:
    """Raise ``ValueError`` naming the first option not in :data:`ALLOWED_OPTIONS`.

    A ``"*"`` in the allowed tree accepts any content below it.
    """
    if not isinstance(options, Mapping):
        raise ValueError(f"trtllm-serve options{path and ' ' + path}: expected a mapping, got {type(options).__name__}")
    for key, value in options.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in allowed:
            raise ValueError(f"trtllm-serve options: {where!r} is not a TensorRT-LLM {TRTLLM_VERSION} LLM-API option")
        sub = allowed[key]
        if sub == "*":
            continue
        if sub is None:
            if isinstance(value, Mapping):
                raise ValueError(f"trtllm-serve options: {where!r} takes a value, not a mapping")
            continue
        check_options(value, sub, where)
    spec = options.get("speculative_config") if not path else None
    if isinstance(spec, Mapping):
        kind = spec.get("decoding_type")
        if kind not in SPECULATIVE_DECODING_TYPES:
            raise ValueError(f"trtllm-serve options: speculative_config.decoding_type {kind!r} is not one of "
                             f"{sorted(SPECULATIVE_DECODING_TYPES)}")
        extra = set(spec) - set(SPECULATIVE_DECODING_TYPES[kind])
        if extra:
            raise ValueError(f"trtllm-serve options: speculative_config fields {sorted(extra)} do not belong to {kind}")
    kv = options.get("kv_cache_config") if not path else None
    if isinstance(kv, Mapping) and "mamba_ssm_cache_dtype" in kv and kv["mamba_ssm_cache_dtype"] not in MAMBA_SSM_CACHE_DTYPES:
        raise ValueError(f"trtllm-serve options: kv_cache_config.mamba_ssm_cache_dtype must be one of {MAMBA_SSM_CACHE_DTYPES}")
