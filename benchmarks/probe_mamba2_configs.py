"""Time a few Mamba-2 replay launch configurations against the standard step at chosen batches
and dims: in phase (15 non-flush + 1 flush) and with staggered flush phases, each checked
against the standard kernel first (``_mamba2_variants.check_against_standard``).

    PYTHONPATH=$PWD python3 benchmarks/probe_mamba2_configs.py --dims nemotron_h nemotron3_nano \\
        --batches 8 12 16 24 32 48 64 --json probe.json

Configurations: the op's default (``decode.launch_config``), the write-through step, the v4
one-launch kernel with 16-row tiles, and the staged step with one or four heads per flush
program (``CONFIGS``). Prints one line per (dims, batch); ratios are against the standard step
timed in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import check_output, positive_int, require_cuda  # noqa: E402
import bench_mamba2_decode as bench  # noqa: E402
from _mamba2_variants import check_against_standard  # noqa: E402

from trtllm_replayssm.ops.mamba2 import decode  # noqa: E402

_STAGED = dict(block_p=16, num_warps=2, kernel="staged", fold="bf16x3", flush_launch=True, flush_max_registers=(128, 96),
               flush_stream=True)
CONFIGS = {
    "default": None,
    "write-through bp8 w1": dict(block_p=8, num_warps=1, kernel="write_through"),
    "v4 bp16 w4": dict(block_p=16, num_warps=4, max_registers=128, cursor_kernel=True, rows_fastest=True,
                       kernel="v4", p_split=1, fold="loop"),
    "staged flush h1": dict(**_STAGED, flush_heads=1),
    "staged flush h4": dict(**_STAGED, flush_heads=4),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dims", nargs="+", default=["nemotron_h"], choices=list(bench.DIMS))
    p.add_argument("--batches", type=positive_int, nargs="+", default=[8, 16, 32, 64])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--rounds", type=positive_int, default=15)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    check_output(p, args.json)
    require_cuda(p)
    flush, dtype, rows = bench.L2Flusher(), torch.bfloat16, []
    print(f"# {bench.device_info()}")
    for dims_name in args.dims:
        dims = bench.DIMS[dims_name]
        for batch in args.batches:
            std = bench.time_standard(dims, batch, dtype, flush, args.rounds)
            line = [f"{dims_name} {batch}: standard {std:.1f} us"]
            for name in args.configs:
                cfg = decode.LaunchConfig(**CONFIGS[name]) if CONFIGS[name] else decode.launch_config(
                    "replay", dims[1], dims[2], batch)
                ok, msg = check_against_standard(dims, batch, dtype, cfg)
                if not ok:
                    line.append(f"{name} WRONG ({msg[:80]})")
                    continue
                phases = bench.time_replay(dims, batch, dtype, flush, args.rounds, False, cfg)
                mixed = bench.time_replay(dims, batch, dtype, flush, args.rounds, True, cfg)
                amortized, staggered = sum(phases) / len(phases), sum(mixed) / len(mixed)
                rows.append(dict(dims=dims_name, batch=batch, config_name=name, config=repr(cfg), standard_us=std,
                                 amortized_us=amortized, staggered_us=staggered, phase_us=phases,
                                 mixed_phase_us=mixed))
                line.append(f"{name} {amortized:.1f} us ({std / amortized:.2f}x, staggered {std / staggered:.2f}x)")
            print(" | ".join(line), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": bench.device_info(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
