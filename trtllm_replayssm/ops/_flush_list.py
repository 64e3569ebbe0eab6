"""The list flush launches (``flush_persistent``): a fixed wave of programs that walks the flush
rows' tiles, numbered on the device from the ring launch's per-row flags.

The wave is sized on the host from the device's SM count, never from the flags (a CUDA graph
replays the grid it captured); its programs read at most :data:`LIST_MAX_BATCH` flags each and
number the flush rows with :func:`flush_ranks` / :func:`flush_row`. The flags are the int32
``info[2 * row + 1]`` both kinds' ring launches write (0 for padded rows).

A wave larger than what fits an SM at once runs its surplus programs after the first ones have
walked their whole item lists: a second wave of the flush (on an H200, a list launch of a
168-register one-warp kernel at 16 programs per SM took 1.2-1.35x the time it took at the 12 that
fit). So each launch site reports its compiled kernel (:func:`note_resident`) and later waves
keep to what fits.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

__all__ = ["LIST_MAX_BATCH", "flush_ranks", "flush_row", "launch_key", "list_grid", "note_resident",
           "programs_per_sm"]

#: Largest batch whose flags one program holds in registers (``[next_pow2(batch)]`` int32);
#: larger batches take the per-row flush launch.
LIST_MAX_BATCH = 4096


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 2  # the interpreter: a small wave, so that each program walks several items
    return torch.cuda.get_device_properties(device).multi_processor_count


#: Programs per SM that fit at once, per launch key, from the kernels compiled so far.
_RESIDENT: dict = {}


def programs_per_sm(n_regs: int, num_warps: int, shared: int, regs_per_sm: int = 65536,
                    threads_per_sm: int = 2048, shared_per_sm: int = 233472, max_blocks: int = 32) -> int:
    """Programs of a kernel (``n_regs`` registers per thread, ``num_warps`` warps, ``shared``
    bytes of shared memory per program) that one SM holds at once; the defaults are sm_90's.
    Registers go to warps in units of 256 (8 per thread)."""
    per_warp = -(-max(n_regs, 1) * 32 // 256) * 256
    fit = min(regs_per_sm // per_warp // num_warps, threads_per_sm // (32 * num_warps), max_blocks)
    if shared:
        fit = min(fit, shared_per_sm // (shared + 1024))  # the runtime reserves 1 KiB per block
    return max(1, fit)


def launch_key(kind: str, dtypes: tuple, num_warps: int, max_registers, constexprs: dict) -> tuple:
    """The key under which :func:`note_resident` / :func:`list_grid` keep a list launch's
    residency: ``(kind, *dtypes, num_warps, max_registers, *sorted constexpr items)``, what its
    compilation depends on besides Triton's own argument specialisations."""
    return (kind, *dtypes, num_warps, max_registers, *sorted(constexprs.items()))


def note_resident(key, compiled, device: torch.device) -> None:
    """Record for :func:`list_grid` how many programs of ``compiled`` (what a Triton launch
    returns; ``None`` under the interpreter) fit one SM of ``device``; ``key`` names the launch
    (everything its compilation depends on)."""
    n_regs = getattr(compiled, "n_regs", None)
    if key is None or not n_regs or device.type != "cuda" or key in _RESIDENT:
        return
    props = torch.cuda.get_device_properties(device)
    _RESIDENT[key] = programs_per_sm(
        n_regs, compiled.metadata.num_warps, compiled.metadata.shared,
        regs_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
        threads_per_sm=getattr(props, "max_threads_per_multi_processor", 2048),
        shared_per_sm=getattr(props, "shared_memory_per_multiprocessor", 233472))


def list_grid(items: int, per_sm: int, device: torch.device, key=None) -> int:
    """Programs of a list flush launch: ``per_sm`` per SM (fewer where :func:`note_resident`
    found that the launch ``key``'s kernel fits fewer), at most one per item (``items``: the
    tiles of a step in which every row flushes)."""
    per_sm = min(per_sm, _RESIDENT.get(key, per_sm))
    return max(1, min(items, _sm_count(device) * per_sm))


@triton.jit
def flush_ranks(info_ptr, batch, BLOCK_B: tl.constexpr):
    """``(ranks, n)``: ``ranks[r]`` the flush rows among rows ``0..r`` (``[BLOCK_B]`` int32), ``n``
    the flush rows of the batch."""
    offs_b = tl.arange(0, BLOCK_B)
    flags = (tl.load(info_ptr + 2 * offs_b + 1, mask=offs_b < batch, other=0) != 0).to(tl.int32)
    return tl.cumsum(flags, axis=0), tl.sum(flags, axis=0)


@triton.jit
def flush_row(ranks, k):
    """The batch row of the ``k``-th flush row (from 0): the rows whose rank is ``<= k``."""
    return tl.sum((ranks <= k).to(tl.int32), axis=0)
