"""Triton Inference Server Python-backend model for a ReplaySSM build (copied to ``1/model.py``).

It reads ``model.yaml`` beside it (TensorRT-LLM LLM-API options plus ``triton_config``), imports
the ReplaySSM TensorRT-LLM integration so the hybrid architectures use ReplaySSM decode, starts
``tensorrt_llm.LLM`` and answers each request's ``text_input`` with ``text_output``.

Importable without Triton or TensorRT-LLM: both are imported when the server initializes it.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

MODEL_YAML = "model.yaml"
#: Set to 1 to serve a ReplaySSM build with TensorRT-LLM's own SSM decode where this
#: trtllm-replayssm has no TensorRT-LLM integration to register.
ALLOW_PLAIN_DECODE = "REPLAYSSM_ALLOW_PLAIN_DECODE"
_SAMPLING_INPUTS = {
    "sampling_param_max_tokens": "max_tokens",
    "sampling_param_temperature": "temperature",
    "sampling_param_top_p": "top_p",
    "sampling_param_top_k": "top_k",
    "sampling_param_seed": "seed",
}


def load_model_yaml(model_dir: str | Path) -> tuple[dict, dict]:
    """``(llm_options, triton_config)`` from ``model_dir/model.yaml``; a relative ``model`` path
    is resolved against ``model_dir``."""
    model_dir = Path(model_dir)
    options = yaml.safe_load((model_dir / os.environ.get("LLM_CONFIG_PATH", MODEL_YAML)).read_text()) or {}
    triton_config = options.pop("triton_config", {}) or {}
    model = Path(str(options.get("model", "")))
    if options.get("model") and not model.is_absolute():
        options["model"] = str((model_dir / model).resolve())
    return options, triton_config


class TritonPythonModel:
    """One request in, one completion out (``max_batch_size: 0``, not decoupled)."""

    def initialize(self, args):
        import triton_python_backend_utils as pb_utils

        self._pb = pb_utils
        options, _ = load_model_yaml(Path(__file__).parent)
        # Registers the ReplaySSM model classes and cache manager with TensorRT-LLM.
        import trtllm_replayssm.integrations.tensorrt_llm as integration

        register = getattr(integration, "register", None)
        if callable(register):
            register()
        elif (options.get("model_kwargs") or {}).get("replayssm") and os.environ.get(ALLOW_PLAIN_DECODE) != "1":
            # model.yaml asks for a ReplaySSM state (its precision, its read copy); serving the
            # model without it would change the numbers this build was made for, so say so.
            raise RuntimeError(
                "model.yaml asks for ReplaySSM decode (model_kwargs.replayssm), but this trtllm-replayssm has no "
                "TensorRT-LLM integration to register (trtllm_replayssm.integrations.tensorrt_llm.register); set "
                f"{ALLOW_PLAIN_DECODE}=1 to serve with TensorRT-LLM's own SSM decode instead"
            )
        from tensorrt_llm import LLM, SamplingParams

        self._sampling_params = SamplingParams
        self._llm = LLM(**options)

    def _scalar(self, request, name):
        tensor = self._pb.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy().reshape(-1)[0].item()

    def execute(self, requests):
        import numpy as np

        responses = []
        for request in requests:
            try:
                text = self._pb.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
                text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
                kwargs = {}
                for name, param in _SAMPLING_INPUTS.items():
                    value = self._scalar(request, name)
                    if value is not None:
                        kwargs[param] = value
                output = self._llm.generate(text, self._sampling_params(**kwargs))
                answer = output.outputs[0].text
                tensor = self._pb.Tensor("text_output", np.array([answer.encode("utf-8")], dtype=object))
                responses.append(self._pb.InferenceResponse(output_tensors=[tensor]))
            except Exception as err:  # noqa: BLE001 - report per request, keep serving
                responses.append(self._pb.InferenceResponse(output_tensors=[], error=self._pb.TritonError(str(err))))
        return responses

    def finalize(self):
        llm = getattr(self, "_llm", None)
        if llm is not None:
            llm.shutdown()
