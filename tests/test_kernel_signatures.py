"""Every Triton function of the package: no parameter defaults to a string.

Triton 3.6 (the GPU machine's) does not make a string default of a ``tl.constexpr`` parameter a
constexpr when a caller leaves the argument out, and the kernel fails to compile there
("'str' object has no attribute 'type'"); Triton 3.9 here compiles it and the interpreter never
compiles, so only this scan catches it on the CPU. Strings are passed explicitly instead.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import triton

import trtllm_replayssm

try:  # under TRITON_INTERPRET=1 triton.jit returns these instead of JITFunction
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:
    InterpretedFunction = triton.runtime.JITFunction


def _jit_functions():
    seen = {}
    for info in pkgutil.walk_packages(trtllm_replayssm.__path__, "trtllm_replayssm."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional integration (TensorRT-LLM, Triton server) not installed
            continue
        for name, obj in vars(module).items():
            fn = getattr(obj, "fn", None)
            if isinstance(obj, (triton.runtime.JITFunction, InterpretedFunction)) and inspect.isfunction(fn):
                seen[f"{fn.__module__}.{fn.__qualname__}"] = fn
    return seen


def test_no_triton_parameter_defaults_to_a_string():
    functions = _jit_functions()
    assert len(functions) > 50  # the scan reaches the kernels
    bad = [f"{where}({p.name}={p.default!r})" for where, fn in functions.items()
           for p in inspect.signature(fn).parameters.values() if isinstance(p.default, str)]
    assert not bad, bad
