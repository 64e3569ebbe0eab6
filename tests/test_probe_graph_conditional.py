"""``benchmarks/probe_graph_conditional.py`` and its ``_graph_conditional.py`` without a GPU: the
driver structure's layout, the argument checks, and (where an NVRTC library is installed) that the
setter kernel compiles for sm_90 and sm_100 with the device-side ``cudaGraphSetConditional`` call
left to the loader."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _graph_conditional as gc  # noqa: E402
import probe_graph_conditional as probe  # noqa: E402
from trtllm_replayssm.ops import _nvrtc  # noqa: E402


def test_node_params_match_the_driver_layout():
    # CUgraphNodeParams: type, 3 reserved ints, a 232-byte union, a reserved long long; the
    # conditional member: handle, type, size, the body graphs' array, the context.
    assert ctypes.sizeof(gc._NodeParams) == 256
    assert gc._NodeParams.u.offset == 16
    cond = gc._ConditionalParams
    assert (cond.handle.offset, cond.type.offset, cond.size.offset, cond.phGraph_out.offset, cond.ctx.offset) == (
        0, 8, 12, 16, 24)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU build's answer")
def test_unavailable_without_a_device():
    assert not gc.available()


@pytest.mark.parametrize("argv,match", [(["--mib", "0"], "--mib / --rounds"), (["--rounds", "0"], "--mib / --rounds"),
                                        (["--priority", "middle"], "invalid choice")])
def test_refuses_bad_arguments(argv, match, usage_error):
    assert match in usage_error(lambda: probe.main(argv))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU build's answer")
def test_refuses_to_run_without_a_gpu(usage_error):
    assert "needs a CUDA GPU" in usage_error(lambda: probe.main([]))


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC library (nvidia-cuda-nvrtc wheel)")
@pytest.mark.parametrize("sm", [90, 100])
def test_setter_compiles_with_the_device_call(sm):
    ptx = _nvrtc.compile_ptx(probe.SOURCE, "probe_graph_conditional.cu", sm)
    assert ".extern .func cudaGraphSetConditional" in ptx
    assert "call.uni" in ptx and "cudaGraphSetConditional" in ptx.split("call.uni", 1)[1][:80]
    cubin = _nvrtc.compile_cubin(probe.SOURCE, "set_if", sm)
    assert cubin[:4] == b"\x7fELF" and b"set_if" in cubin
