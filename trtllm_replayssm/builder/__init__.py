"""The builder: a Hugging Face hybrid checkpoint in, a directory to serve out.

Loads the model (or the embedded tiny hybrid), quantizes its weights with NVIDIA ModelOpt
(NVFP4 or FP8, SSM-safe exclusions), exports a checkpoint TensorRT-LLM loads, and writes the
ReplaySSM state configuration, a ``trtllm-serve`` options file and a Triton model repository.
``trtllm-replayssm build`` and ``build_scripts/build_engine.py`` are thin front ends to
:func:`build`.
"""

from .options import BuildError, BuildOptions, resolve_options
from .pipeline import build, format_summary
from .targets import TARGETS, Target

__all__ = ["TARGETS", "BuildError", "BuildOptions", "Target", "build", "format_summary", "resolve_options"]
