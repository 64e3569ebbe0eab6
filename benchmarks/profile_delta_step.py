"""Device time of each kernel launch of one Gated DeltaNet / KDA ReplaySSM step (the ring,
stream and flush launches of a staged variant, or the one-launch row-wise kernel) for
non-flush steps, from the CUDA profiler; fla's decode kernel and the in-project standard step
on the same inputs for scale.

    PYTHONPATH=$PWD python3 benchmarks/profile_delta_step.py --kind gdn --batch 256 \\
        --variants rowwise "staged flush raw_qk BV=16 2 warps whole heads" \\
        --derive "staged flush raw_qk BV=16 2 warps whole heads: ring_warps=2, max_registers=64"

``--timeline``: each variant's step also replayed as the benchmark does (a CUDA graph, L2 flushed
before each replay) under the profiler, kernel starts and ends within the replay printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from trtllm_replayssm.ops.gdn._wrappers import default_refold

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _delta_layer import Layer, fla_fn, standard_fn  # noqa: E402
from _delta_variants import VARIANTS, derive_variants, variant_step  # noqa: E402
from profile_mamba2_step import kernel_times, timeline  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", default="gdn", choices=["gdn", "kda"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--variants", nargs="+", default=["rowwise", "staged flush raw_qk BV=16 2 warps whole heads"])
    p.add_argument("--derive", nargs="+", default=[], metavar="SPEC",
                   help="also profile 'BASE: field=value, ...' (a VARIANTS entry with fields replaced)")
    p.add_argument("--steps", type=int, default=8, help="non-flush steps profiled (ring lengths 0..steps-1)")
    p.add_argument("--flush", action="store_true",
                   help="profile flush steps instead (every row at ring length window - 1; the cursor "
                        "fill appears as its own kernel)")
    p.add_argument("--timeline", action="store_true", help="also trace graph replays kernel by kernel")
    p.add_argument("--refold", choices=["default", "true", "false"], default="default",
                   help="the flush's fold: the ops' default at --batch (refold=None), the raw ring's refold, or "
                        "the cached u's fold; it also picks the 'default' entry's launch")
    args = p.parse_args(argv)
    args.variants += derive_variants(args.derive)
    dims = {"gdn": (32, 16, 128, 128), "kda": (32, 32, 128, 128)}[args.kind]
    layer = Layer(args.kind, *dims, torch.bfloat16, 16)
    x = layer.tokens(args.batch)
    idx = torch.arange(args.batch, dtype=torch.int32, device="cuda")
    by_name = {name: variant for name, variant, _ in VARIANTS}
    what = "flush steps" if args.flush else f"non-flush steps over ring lengths 0..{args.steps - 1}"
    print(f"{args.kind} batch {args.batch}, dims {dims}, bf16, mean device us per step, {what}")
    # One fold for the kernel times and the timeline; the ops' own (refold=None) picks the
    # launch of the "default" entry (Gated DeltaNet's one-launch step folds the cached u).
    refold = default_refold(args.kind == "kda", args.batch) if args.refold == "default" else args.refold == "true"
    for name in args.variants:
        variant = by_name[name]
        state = layer.state(args.batch)

        def step():
            if args.flush:
                state.committed.fill_(state.window - 1)
            variant_step(layer, variant, state, x, idx, refold=refold)

        step()  # compile
        state.committed.zero_()
        state.flush_at.fill_(state.window)
        torch.cuda.synchronize()
        times = kernel_times(step, args.steps)
        print(f"  {name}")
        for kernel, us in sorted(times.items(), key=lambda kv: -kv[1]):
            print(f"    {kernel[:60]:<60} {us:8.1f} us")
        if args.timeline:
            state.committed.zero_()
            timeline(lambda: variant_step(layer, variant, state, x, idx, refold=refold), state.window)
    # For scale: fla's decode kernel and the in-project standard step on the same tokens.
    ssm = torch.randn(args.batch, layer.HV, layer.d_v, layer.d_k, device="cuda") * 0.05
    scale = {"standard": standard_fn(layer, ssm, x, idx)}
    try:
        scale["fla"] = fla_fn(layer, args.batch, x)
    except ImportError as exc:  # fla-core not installed
        print(f"  fla: not timed ({exc})")
    for name, fn in scale.items():
        fn()
        torch.cuda.synchronize()
        print(f"  {name}")
        for kernel, us in sorted(kernel_times(fn, args.steps).items(), key=lambda kv: -kv[1]):
            print(f"    {kernel[:60]:<60} {us:8.1f} us")


if __name__ == "__main__":
    main()
