"""CUDA C++ kernels compiled at run time by NVRTC and launched through the CUDA driver API.

For the few launches Triton's code generation does not serve well (``ops/mamba2/flush_cuda.cu``):
the source is compiled once per (source, defines, device architecture) into a cubin for that
device's own ``sm_XX``, loaded into the device's primary context (the one PyTorch uses) and
launched with ``cuLaunchKernel`` on the current PyTorch stream, so the launch is captured like
any other inside ``torch.cuda.graph``. Compile and load before capture (an eager call first), as
with Triton's kernels.

NVRTC is the ``libnvrtc.so.<major>`` that CUDA builds of PyTorch depend on (the
``nvidia-cuda-nvrtc`` wheel); ``$TRTLLM_REPLAYSSM_NVRTC`` names another. Everything here is
``ctypes``: no compiler toolchain, headers or ninja are needed on the serving machine.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import os
import sys

__all__ = ["CudaKernel", "NvrtcError", "allow_dynamic_shared", "compile_cubin", "compile_ptx", "find_nvrtc",
           "function_blocks_per_sm", "load_kernel"]


class NvrtcError(RuntimeError):
    """NVRTC or the CUDA driver refused a source, an option or a launch (its log in the message)."""


def _nvrtc_names(cuda_major: int | None) -> list[str]:
    names = [os.environ["TRTLLM_REPLAYSSM_NVRTC"]] if os.environ.get("TRTLLM_REPLAYSSM_NVRTC") else []
    majors = [cuda_major] if cuda_major else []
    majors += [m for m in (13, 12) if m not in majors]
    names += [f"libnvrtc.so.{m}" for m in majors]
    # The pip wheels' layout (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib), not on the loader's path.
    for base in sys.path:
        names += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libnvrtc.so.*")))
    return names + ["libnvrtc.so"]


@functools.lru_cache(maxsize=None)
def find_nvrtc() -> ctypes.CDLL | None:
    """The NVRTC library, or ``None`` where none loads (a CPU-only install)."""
    try:
        import torch

        major = int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None
    except Exception:  # noqa: BLE001 -- any torch build: only the preferred library name depends on it
        major = None
    for name in _nvrtc_names(major):
        if "builtins" in os.path.basename(name):
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        return lib
    return None


def _nvrtc_check(lib, result: int, what: str, log: str = "") -> None:
    if result != 0:
        msg = lib.nvrtcGetErrorString(result).decode()
        raise NvrtcError(f"NVRTC {what}: {msg}" + (f"\n{log}" if log else ""))


def nvrtc_version() -> tuple[int, int] | None:
    """``(major, minor)`` of the NVRTC found, ``None`` without one."""
    lib = find_nvrtc()
    if lib is None:
        return None
    major, minor = ctypes.c_int(), ctypes.c_int()
    _nvrtc_check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "version")
    return major.value, minor.value


def _compile(source: str, name: str, target: str, defines, options, output: str) -> bytes:
    """``source`` compiled by NVRTC for ``--gpu-architecture=<target>``; ``output`` "cubin" or "ptx"."""
    lib = find_nvrtc()
    if lib is None:
        raise NvrtcError("NVRTC: no libnvrtc found (install the nvidia-cuda-nvrtc wheel that matches torch's CUDA, "
                         "or name the library in $TRTLLM_REPLAYSSM_NVRTC)")
    prog = ctypes.c_void_p()
    _nvrtc_check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
                 "create program")
    try:
        opts = [f"--gpu-architecture={target}", "--std=c++17", "-default-device"]
        opts += [f"-D{k}={v}" for k, v in defines] + list(options)
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        result = lib.nvrtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        _nvrtc_check(lib, result, f"compile {name} for {target}", log.value.decode(errors="replace"))
        get_size, get = ((lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if output == "cubin"
                         else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX))
        _nvrtc_check(lib, get_size(prog, ctypes.byref(size)), f"{output} size")
        image = ctypes.create_string_buffer(size.value)
        _nvrtc_check(lib, get(prog, image), output)
        return image.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


@functools.lru_cache(maxsize=64)
def compile_cubin(source: str, name: str, arch: int, defines: tuple[tuple[str, str], ...] = (),
                  options: tuple[str, ...] = ()) -> bytes:
    """Compile ``source`` (``name`` for messages) for ``sm_<arch>`` (``90``, ``100``, ``103``) with
    ``-D`` ``defines`` and extra NVRTC ``options``; the cubin's bytes. Raises :class:`NvrtcError`
    with the compiler's log on an error, or when no NVRTC is installed."""
    return _compile(source, name, f"sm_{arch}", defines, options, "cubin")


def compile_ptx(source: str, name: str, arch: int, defines: tuple[tuple[str, str], ...] = (),
                options: tuple[str, ...] = ()) -> str:
    """As :func:`compile_cubin`, the PTX for ``compute_<arch>`` (for an assembler of one's own:
    register and spill counts without a GPU)."""
    return _compile(source, name, f"compute_{arch}", defines, options, "ptx").rstrip(b"\0").decode()


@functools.lru_cache(maxsize=None)
def _libcuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _cu_check(result: int, what: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        _libcuda().cuGetErrorString(result, ctypes.byref(text))
        raise NvrtcError(f"CUDA driver {what}: error {result} ({(text.value or b'?').decode()})")


# CUfunction_attribute values (cuda.h).
_ATTR_MAX_THREADS, _ATTR_SHARED, _ATTR_LOCAL, _ATTR_NUM_REGS, _ATTR_MAX_DYN_SHARED = 0, 1, 3, 4, 8


def function_blocks_per_sm(function: ctypes.c_void_p, threads: int, dynamic_shared: int) -> int:
    """Blocks of ``threads`` threads and ``dynamic_shared`` bytes that one SM holds at once, for
    the driver's ``CUfunction`` handle ``function`` (an NVRTC kernel's, or a compiled Triton one's)."""
    blocks = ctypes.c_int()
    _cu_check(_libcuda().cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(blocks), function, threads, ctypes.c_size_t(dynamic_shared)), "occupancy")
    return blocks.value


def allow_dynamic_shared(function: ctypes.c_void_p, dynamic_shared: int, what: str = "shared memory limit") -> None:
    """Let launches of ``function`` (a ``CUfunction`` handle) take ``dynamic_shared`` bytes of
    dynamic shared memory: above 48 KB the driver refuses them, and its occupancy query counts
    zero blocks, until the function's limit is raised."""
    _cu_check(_libcuda().cuFuncSetAttribute(function, _ATTR_MAX_DYN_SHARED, dynamic_shared), what)


class CudaKernel:
    """One ``extern "C"`` kernel of a cubin loaded on one device.

    ``signature``: the ctypes type of each parameter in order (``ctypes.c_void_p`` for a tensor's
    data pointer, ``ctypes.c_int32`` / ``c_int64`` / ``c_float`` for scalars)."""

    def __init__(self, cubin: bytes, name: str, signature: tuple, device_index: int):
        import torch

        self.name, self.signature, self.device_index = name, tuple(signature), device_index
        lib = _libcuda()
        with torch.cuda.device(device_index):
            # A runtime call on the device binds its primary context (PyTorch's) to this thread,
            # which the driver calls below load into.
            torch.cuda.synchronize(device_index)
            self._module = ctypes.c_void_p()
            _cu_check(lib.cuModuleLoadData(ctypes.byref(self._module), cubin), f"load module of {name}")
            self._func = ctypes.c_void_p()
            _cu_check(lib.cuModuleGetFunction(ctypes.byref(self._func), self._module, name.encode()),
                      f"find {name}")
        self._dyn_shared = 48 * 1024

    def attribute(self, attr: int) -> int:
        value = ctypes.c_int()
        _cu_check(_libcuda().cuFuncGetAttribute(ctypes.byref(value), attr, self._func), "function attribute")
        return value.value

    @property
    def num_regs(self) -> int:
        return self.attribute(_ATTR_NUM_REGS)

    @property
    def local_bytes(self) -> int:
        """Bytes of local memory per thread (spills)."""
        return self.attribute(_ATTR_LOCAL)

    def _allow_shared(self, dynamic_shared: int) -> None:
        if dynamic_shared > self._dyn_shared:
            allow_dynamic_shared(self._func, dynamic_shared, f"{self.name}: shared memory limit")
            self._dyn_shared = dynamic_shared

    def blocks_per_sm(self, threads: int, dynamic_shared: int) -> int:
        """Blocks of ``threads`` threads and ``dynamic_shared`` bytes that one SM holds at once."""
        self._allow_shared(dynamic_shared)
        return function_blocks_per_sm(self._func, threads, dynamic_shared)

    def launch(self, grid: int, threads: int, dynamic_shared: int, args: tuple, stream: int) -> None:
        """Launch ``grid`` blocks of ``threads`` on the stream handle ``stream`` (``torch.cuda.Stream.cuda_stream``)."""
        if len(args) != len(self.signature):
            raise ValueError(f"{self.name}: expected {len(self.signature)} arguments, got {len(args)}")
        self._allow_shared(dynamic_shared)
        values = [ctype(a) for ctype, a in zip(self.signature, args)]
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        _cu_check(_libcuda().cuLaunchKernel(self._func, grid, 1, 1, threads, 1, 1, dynamic_shared,
                                            ctypes.c_void_p(stream), params, None), f"launch {self.name}")


_KERNELS: dict = {}


@functools.lru_cache(maxsize=16)
def _digest(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


def load_kernel(source: str, name: str, defines: dict, signature: tuple, device) -> CudaKernel:
    """:class:`CudaKernel` ``name`` of ``source`` compiled with ``defines`` for ``device``'s
    architecture, loaded once per (device, source, defines)."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    items = tuple(sorted((str(k), str(v)) for k, v in defines.items()))
    key = (index, _digest(source), name, items)
    kernel = _KERNELS.get(key)
    if kernel is None:
        cubin = compile_cubin(source, name, major * 10 + minor, items)
        kernel = _KERNELS[key] = CudaKernel(cubin, name, signature, index)
    return kernel
