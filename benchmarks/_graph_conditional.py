"""CUDA graph conditional nodes added to a PyTorch graph capture, through the CUDA driver API
(``probe_graph_conditional.py``'s; no launch of the package uses them: NOTES_mamba2.md,
thirty-eighth run, has what one costs).

A captured step has a fixed set of launches, so a launch that only some replays need (the grid
form of a flush, which folds at copy speed when most rows flush but costs a wave of early exits
when none do) would run in every replay. A conditional ``IF`` node (CUDA 12.4+) runs its body
graph only when its handle is non-zero when the node is reached; a kernel upstream in the same
graph sets the handle with ``cudaGraphSetConditional`` (device code: the declaration is
:data:`DEVICE_DECLARATION`). With :func:`if_node` the body is captured from ordinary launches on
a private stream, so the body's kernels are launched exactly as they would be eagerly.

Use, inside ``torch.cuda.graph`` capture, on the capturing stream ``stream``::

    handle = create_handle(stream)          # 0 at the start of every replay
    setter_kernel(..., handle)              # sets it to 1 when the body must run
    if_node(stream, handle, lambda: body_kernels())

Everything is ``ctypes`` over ``libcuda.so.1``; :func:`available` says whether the driver has
the entry points. Off capture there is no graph: callers take their eager path instead.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from trtllm_replayssm.ops._nvrtc import NvrtcError, _cu_check, _libcuda

__all__ = ["DEVICE_DECLARATION", "available", "body_stream", "create_handle", "if_node"]

#: Device-side declaration of ``cudaGraphSetConditional`` for an NVRTC source (no toolkit headers
#: on the include path): the runtime's own declaration, a builtin the loader resolves.
DEVICE_DECLARATION = (
    "typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;\n"
    'extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle, '
    "unsigned int value);\n")

# cuda.h values.
_CAPTURE_ACTIVE = 1                  # CU_STREAM_CAPTURE_STATUS_ACTIVE
_CAPTURE_MODE_RELAXED = 2            # CU_STREAM_CAPTURE_MODE_RELAXED
_SET_DEPENDENCIES = 1                # CU_STREAM_SET_CAPTURE_DEPENDENCIES
_NODE_CONDITIONAL = 13               # CU_GRAPH_NODE_TYPE_CONDITIONAL
_COND_IF = 0                         # CU_GRAPH_COND_TYPE_IF
_COND_ASSIGN_DEFAULT = 1             # CU_GRAPH_COND_ASSIGN_DEFAULT


class _ConditionalParams(ctypes.Structure):
    """``CUDA_CONDITIONAL_NODE_PARAMS``."""
    _fields_ = [("handle", ctypes.c_uint64), ("type", ctypes.c_int), ("size", ctypes.c_uint),
                ("phGraph_out", ctypes.POINTER(ctypes.c_void_p)), ("ctx", ctypes.c_void_p)]


class _NodeUnion(ctypes.Union):
    _fields_ = [("reserved1", ctypes.c_longlong * 29), ("conditional", _ConditionalParams)]


class _NodeParams(ctypes.Structure):
    """``CUgraphNodeParams`` (256 bytes)."""
    _fields_ = [("type", ctypes.c_int), ("reserved0", ctypes.c_int * 3), ("u", _NodeUnion),
                ("reserved2", ctypes.c_longlong)]


assert ctypes.sizeof(_NodeParams) == 256


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether the driver has the entry points (CUDA 12.4 or later) and a device is present."""
    if not torch.cuda.is_available():
        return False
    try:
        lib = _libcuda()
    except OSError:
        return False
    return all(hasattr(lib, n) for n in ("cuGraphConditionalHandleCreate", "cuGraphAddNode",
                                         "cuStreamBeginCaptureToGraph", "cuStreamGetCaptureInfo_v2",
                                         "cuStreamUpdateCaptureDependencies"))


def _capture_info(stream: torch.cuda.Stream):
    """The graph ``stream`` captures into and its current dependencies (node handles)."""
    status, graph = ctypes.c_int(), ctypes.c_void_p()
    deps, count = ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_size_t()
    _cu_check(_libcuda().cuStreamGetCaptureInfo_v2(ctypes.c_void_p(stream.cuda_stream), ctypes.byref(status), None,
                                                   ctypes.byref(graph), ctypes.byref(deps), ctypes.byref(count)),
              "capture info")
    if status.value != _CAPTURE_ACTIVE:
        raise NvrtcError("a conditional node needs a stream under graph capture")
    return graph, (ctypes.c_void_p * count.value)(*[deps[i] for i in range(count.value)])


def create_handle(stream: torch.cuda.Stream, default: int = 0) -> int:
    """A conditional handle of the graph ``stream`` captures into, reset to ``default`` at the
    start of every launch of the graph."""
    graph, _ = _capture_info(stream)
    ctx, handle = ctypes.c_void_p(), ctypes.c_uint64()
    lib = _libcuda()
    _cu_check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "current context")
    _cu_check(lib.cuGraphConditionalHandleCreate(ctypes.byref(handle), graph, ctx, ctypes.c_uint(default),
                                                 ctypes.c_uint(_COND_ASSIGN_DEFAULT)), "conditional handle")
    return handle.value


@functools.lru_cache(maxsize=None)
def _body_stream(device: torch.device) -> torch.cuda.Stream:
    return torch.cuda.Stream(device=device)


def body_stream(device: torch.device) -> torch.cuda.Stream:
    """The private stream bodies are captured on (create it before the capture: an eager call)."""
    return _body_stream(torch.device(device))


def if_node(stream: torch.cuda.Stream, handle: int, body, device: torch.device | None = None) -> None:
    """Add an ``IF`` node on ``handle`` after ``stream``'s captured work, its body the launches
    ``body()`` makes (on the current stream it sees, a private one captured into the node's body
    graph); ``stream``'s later work depends on the node."""
    lib = _libcuda()
    graph, deps = _capture_info(stream)
    ctx = ctypes.c_void_p()
    _cu_check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "current context")
    params = _NodeParams()
    params.type = _NODE_CONDITIONAL
    params.u.conditional.handle = handle
    params.u.conditional.type = _COND_IF
    params.u.conditional.size = 1
    params.u.conditional.ctx = ctx
    node = ctypes.c_void_p()
    _cu_check(lib.cuGraphAddNode(ctypes.byref(node), graph, deps, ctypes.c_size_t(len(deps)), ctypes.byref(params)),
              "add a conditional node")
    body_graph = ctypes.c_void_p(params.u.conditional.phGraph_out[0])
    side = body_stream(device if device is not None else torch.device("cuda", torch.cuda.current_device()))
    _cu_check(lib.cuStreamBeginCaptureToGraph(ctypes.c_void_p(side.cuda_stream), body_graph, None, None,
                                              ctypes.c_size_t(0), ctypes.c_int(_CAPTURE_MODE_RELAXED)),
              "capture a conditional body")
    try:
        with torch.cuda.stream(side):
            body()
    finally:
        out = ctypes.c_void_p()
        _cu_check(lib.cuStreamEndCapture(ctypes.c_void_p(side.cuda_stream), ctypes.byref(out)),
                  "end a conditional body's capture")
    one = (ctypes.c_void_p * 1)(node)
    _cu_check(lib.cuStreamUpdateCaptureDependencies(ctypes.c_void_p(stream.cuda_stream), one, ctypes.c_size_t(1),
                                                    ctypes.c_uint(_SET_DEPENDENCIES)), "depend on a conditional node")
