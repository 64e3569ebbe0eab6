"""The Python side of the CUDA C++ flush-row launches (``mamba2/decode_flush_cuda.py``,
``gdn/decode_flush_cuda.py``): the text NVRTC compiles, the operand checks both make, and the
launch plan (kernel and wave of blocks) found once per compilation, device and size."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from ._flush_list import LIST_MAX_BATCH

__all__ = ["KINDS", "checkpoint_reason", "chunked", "launch_plan", "source", "wave_blocks"]

#: Operand dtypes the kernels take, as their ``*_KIND`` defines (``_flush_rows.cuh``'s ``Act``).
KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


@functools.lru_cache(maxsize=None)
def source(kernel_file: str) -> str:
    """The text NVRTC compiles for a flush-row kernel file: ``_flush_rows.cuh`` (the device code
    the launches share) and ``_bulk_copy.cuh`` (barriers and bulk copies, for the warp-specialised
    launch; inline functions the others never call), then the file's own."""
    here = Path(__file__)
    return "\n".join(p.read_text() for p in (here.with_name("_flush_rows.cuh"), here.with_name("_bulk_copy.cuh"),
                                              Path(kernel_file)))


def chunked(t: torch.Tensor) -> bool:
    """Rows of ``t`` (contiguous in its last dimension) start on 16-byte boundaries."""
    size = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all((s * size) % 16 == 0 for s in t.stride()[:-1])


def checkpoint_reason(checkpoint: torch.Tensor, batch: int, dims_reason: str | None) -> str | None:
    """Why a step's checkpoint keeps the Triton flush (``None`` when it does not): not fp32, dims
    the kernel does not take (``dims_reason``, the caller's), rows not contiguous and 16-byte
    aligned, or a batch above ``LIST_MAX_BATCH``."""
    if checkpoint.dtype != torch.float32:
        return f"the checkpoint is {checkpoint.dtype}, the CUDA flush folds fp32 checkpoints"
    if dims_reason is not None:
        return dims_reason
    if checkpoint.stride(3) != 1 or any(s % 4 for s in checkpoint.stride()[:3]) or checkpoint.data_ptr() % 16:
        return "the checkpoint's rows are not contiguous 16-byte aligned fp32 rows"
    if batch > LIST_MAX_BATCH:
        return f"batch {batch} > {LIST_MAX_BATCH}"
    return None


def wave_blocks(kernel, items: int, shared: int, device: torch.device, threads: int) -> int:
    """Blocks of a launch: as many as fit the device at once, at most one per block item of a step
    in which every row flushes (``items``; the grid is fixed for a CUDA graph, the flush rows are
    not)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(items, kernel.blocks_per_sm(threads, shared) * sms))


@functools.lru_cache(maxsize=256)
def launch_plan(kernel_file: str, name: str, signature: tuple, defs: tuple, device_index: int, items: int,
                shared: int, threads: int):
    """``(kernel, blocks)`` of a launch, found once per compilation, device, item count and shared
    memory rather than on every step (the occupancy query is a driver call)."""
    from ._nvrtc import load_kernel

    device = torch.device("cuda", device_index)
    kernel = load_kernel(source(kernel_file), name, dict(defs), signature, device)
    return kernel, wave_blocks(kernel, items, shared, device, threads)
