"""Timing probe: Gated DeltaNet's one-launch step with fewer programs resident per SM.

At batch 128-256 the one-launch step's time is a per-slot part at copy speed plus ~16 us that no
slot adds (NOTES_delta.md, twenty-seventh run), against ~6 us for fla's and the in-project
standard step. Its programs are long (one warp streams a 64-row, 32 KB tile and the key head's
ring; 255 registers, 8 programs per SM share the SM's bandwidth), so the step's last programs run
on alone for up to a program's duration while the others have finished. This probe asks whether
fewer resident programs, each then served faster, shorten that tail without slowing the bulk:
it launches the same compiled kernel with dynamic shared memory padded so that only
``--per-sm`` programs fit an SM (``cuFuncSetAttribute`` + the launch's shared-memory size; the
kernel does not touch the padding). Outputs are the step's own; only the occupancy changes.

    PYTHONPATH=$PWD python3 benchmarks/probe_fused_occupancy.py --per-sm 4 -- --batches 128 256 --sweep --no-fla

Everything after ``--`` goes to ``bench_gdn_decode.py``, whose table this prints; ``--per-sm 0``
leaves the launch as it is. The padding relies on Triton's launch path passing
``CompiledKernel.packed_metadata`` (num_warps, num_ctas, shared, ...) to its launcher, as Triton
3.6-3.9 do: the probe checks the occupancy it asked for and stops if it did not take.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from trtllm_replayssm.ops import _nvrtc  # noqa: E402
from trtllm_replayssm.ops.gdn import decode_fused  # noqa: E402

#: Bytes of shared memory the driver reserves per resident block (sm_80 and later).
_RESERVED_PER_BLOCK = 1024


def padded_shared(per_sm: int, device: torch.device) -> int:
    """Dynamic shared memory per program so that exactly ``per_sm`` fit an SM."""
    per_sm_bytes = torch.cuda.get_device_properties(device).shared_memory_per_multiprocessor
    return per_sm_bytes // per_sm - _RESERVED_PER_BLOCK


def _occupancy(function: int, threads: int, shared: int) -> int:
    return _nvrtc.function_blocks_per_sm(ctypes.c_void_p(function), threads, shared)


def pad_kernel(kernel, per_sm: int, device: torch.device) -> None:
    """Make every later launch of the compiled ``kernel`` hold ``per_sm`` programs per SM."""
    if getattr(kernel, "_probe_per_sm", None) == per_sm:
        return
    kernel._init_handles()
    threads = 32 * kernel.metadata.num_warps
    natural = _occupancy(kernel.function, threads, kernel.metadata.shared)
    shared = padded_shared(per_sm, device)
    if shared < kernel.metadata.shared:
        raise SystemExit(f"--per-sm {per_sm}: the kernel already needs {kernel.metadata.shared} B per program")
    _nvrtc.allow_dynamic_shared(ctypes.c_void_p(kernel.function), shared, "attribute")
    packed = list(kernel.packed_metadata)
    if packed[2] != kernel.metadata.shared:
        raise SystemExit(f"packed_metadata {kernel.packed_metadata}: shared memory not at index 2")
    packed[2] = shared
    kernel.packed_metadata = tuple(packed)
    got = _occupancy(kernel.function, threads, shared)
    print(f"[probe] {kernel.name}: {kernel.metadata.shared} B -> {shared} B of shared memory, "
          f"{natural} -> {got} programs per SM (asked {per_sm})", flush=True)
    if got != per_sm:
        raise SystemExit(f"occupancy {got} != --per-sm {per_sm}")
    kernel._probe_per_sm = per_sm


def install(per_sm: int) -> None:
    """Wrap the one-launch kernel's ``run`` so that each compiled variant is padded after the
    launch that compiles it (the benchmark's untimed warm-up replays come before its captures)."""
    jit = decode_fused._fused_step_kernel
    run = jit.run

    def padded_run(*args, **kwargs):
        kernel = run(*args, **kwargs)
        device = torch.device("cuda", torch.cuda.current_device())
        if kernel is not None and hasattr(kernel, "packed_metadata"):
            pad_kernel(kernel, per_sm, device)
        return kernel

    jit.run = padded_run


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-sm", type=int, default=4, help="programs per SM (0: as compiled)")
    args = p.parse_args(own)
    if args.per_sm < 0:
        raise SystemExit(f"--per-sm: expected >= 0, got {args.per_sm}")
    if not torch.cuda.is_available():
        raise SystemExit("probe_fused_occupancy: needs a CUDA GPU")
    if args.per_sm:
        install(args.per_sm)
    import bench_gdn_decode

    bench_gdn_decode.main(argv=rest)


if __name__ == "__main__":
    main()
