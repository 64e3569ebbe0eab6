"""Device time of each kernel launch of one Gated DeltaNet / KDA ReplaySSM step (the ring,
stream and flush launches of a staged variant, or the one-launch row-wise kernel) for
non-flush steps, from the CUDA profiler; fla's decode kernel and the in-project standard step
on the same inputs for scale.

    PYTHONPATH=$PWD python3 benchmarks/profile_delta_step.py --kind gdn --batch 256 \\
        --variants rowwise "staged flush raw_qk BV=16 2 warps whole heads"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gdn_decode import VARIANTS, Layer, variant_step  # noqa: E402
from profile_mamba2_step import kernel_times  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", default="gdn", choices=["gdn", "kda"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--variants", nargs="+", default=["rowwise", "staged flush raw_qk BV=16 2 warps whole heads"])
    p.add_argument("--steps", type=int, default=8, help="non-flush steps profiled (ring lengths 0..steps-1)")
    args = p.parse_args(argv)
    dims = {"gdn": (32, 16, 128, 128), "kda": (32, 32, 128, 128)}[args.kind]
    layer = Layer(args.kind, *dims, torch.bfloat16, 16)
    x = layer.tokens(args.batch)
    idx = torch.arange(args.batch, dtype=torch.int32, device="cuda")
    by_name = {name: variant for name, variant, _ in VARIANTS}
    print(f"{args.kind} batch {args.batch}, dims {dims}, bf16, mean device us per step over ring lengths "
          f"0..{args.steps - 1}")
    for name in args.variants:
        variant = by_name[name]
        state = layer.state(args.batch)

        def step():
            variant_step(layer, variant, state, x, idx)

        step()  # compile
        state.committed.zero_()
        state.flush_at.fill_(state.window)
        torch.cuda.synchronize()
        times = kernel_times(step, args.steps)
        print(f"  {name}")
        for kernel, us in sorted(times.items(), key=lambda kv: -kv[1]):
            print(f"    {kernel[:60]:<60} {us:8.1f} us")


if __name__ == "__main__":
    main()
