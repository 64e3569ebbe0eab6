"""Mamba-2 decode: this package's ReplaySSM step against the paper's public kernels.

The paper's code (github.com/Johnny-Liou/ReplaySSM, a vLLM fork) serves a Mamba-2 decode step
with one of two kernels, each handling a batch's flush and non-flush rows in one call:
``selective_state_update_replayssm_output_only`` (a small precompute launch of the ring's ``B .
C`` products, then the step) and ``selective_state_update_replayssm_state_and_output``.
``--paper-root`` points at a checkout of that repository; the two files are loaded alone
(``_paper_code.py``), with their own launch defaults for L=16 (``--output-only-config``,
``--state-and-output-config``: ``BLOCK_M,WARPS``).

Per batch (Nemotron-H dims, bf16 activations with the gate ``z``, fp32 state, L=16; CUDA-graph
replays with L2 flushed): the in-project standard step (the baseline of
``bench_mamba2_decode.py``), this package's ReplaySSM step and each paper kernel at every ring
position (the host sets the paper's ``write_pos`` / ``is_flush``, as vLLM does): non-flush (mean
of 0..14), flush (15), amortized (the window's 16) and mixed (slots at phases ``slot % 16``;
for this package, the cache's staggered phases).

    python benchmarks/bench_mamba2_paper.py --paper-root ../ReplaySSM --json mamba2_paper.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _cli import check_output, positive_int, require_cuda  # noqa: E402

from _paper_code import load_paper_function  # noqa: E402
from _timing import (WARMUP_ROUNDS, L2Flusher, capture_graph, copy_bandwidth_gbps, device_info, median,  # noqa: E402
                     time_replays)
from bench_mamba2_decode import DIMS, WINDOW as L, _inputs, time_replay, time_standard  # noqa: E402

OPS = "vllm/model_executor/layers/mamba/ops/"
KERNELS = {
    "output_only": (OPS + "selective_state_update_replayssm_output_only.py",
                    "selective_state_update_replayssm_output_only", "mamba2_output_only"),
    "state_and_output": (OPS + "selective_state_update_replayssm_state_and_output.py",
                         "selective_state_update_replayssm_state_and_output", "mamba2_state_and_output"),
}


class PaperStep:
    """One paper kernel on its own buffers (slot 0 is its null block): ``[slots + 1, ...]``
    state and rings (``x`` and ``B`` in the activation dtype, ``dt`` fp32), per-head ``A``,
    ``D``, ``dt`` and ``dt_bias`` broadcast over ``head_dim`` with zero strides as vLLM passes
    them; ``write_pos`` / ``is_flush`` per row."""

    def __init__(self, fn, kind, dims, batch, dtype):
        heads, P, N, G = dims
        self.fn, self.kind = fn, kind
        slots = batch + 1
        gen = torch.Generator(device="cuda").manual_seed(3)
        x, dt, A, B, C, D, z, dt_bias = _inputs(batch, *dims, dtype)
        self.state = torch.randn(slots, heads, P, N, device="cuda", generator=gen) * 0.1
        self.x, self.B, self.C, self.z = x, B, C, z
        self.dt = dt[:, :, None].expand(batch, heads, P)
        self.A = A[:, None, None].expand(heads, P, N)
        self.D = D[:, None].expand(heads, P)
        self.dt_bias = dt_bias[:, None].expand(heads, P)
        self.x_cache = (torch.randn(slots, heads, L, P, device="cuda", generator=gen) * 0.1).to(dtype)
        self.dt_cache = torch.rand(slots, heads, L, device="cuda", generator=gen) * 0.1
        self.B_cache = (torch.randn(slots, G, L, N, device="cuda", generator=gen) / N ** 0.5).to(dtype)
        self.bc_pre = torch.empty(batch, G, L, device="cuda")
        self.write_pos = torch.zeros(batch, dtype=torch.int32, device="cuda")
        self.is_flush = torch.zeros(batch, dtype=torch.bool, device="cuda")
        self.idx = torch.arange(1, batch + 1, dtype=torch.int32, device="cuda")
        self.out = torch.empty_like(x)

    def __call__(self):
        extra = {"bc_pre": self.bc_pre} if self.kind == "output_only" else {}
        self.fn(self.state, self.x, self.dt, self.A, self.B, self.C, D=self.D, dt_bias=self.dt_bias, z=self.z,
                dt_softplus=True,
                x_cache=self.x_cache, dt_cache=self.dt_cache, B_cache=self.B_cache, write_pos=self.write_pos,
                is_flush=self.is_flush, max_cache_len=L, state_batch_indices=self.idx, out=self.out, **extra)


class Phase:
    """Before each replay (untimed): flush L2, set every row's ring position (and flush flag)."""

    def __init__(self, step, positions, flush):
        self.step, self.positions, self.flush = step, positions, flush

    def __call__(self):
        self.step.write_pos.copy_(self.positions)
        self.step.is_flush.copy_(self.positions == L - 1)
        self.flush()


def time_paper(fn, kind, dims, batch, dtype, flusher, rounds):
    step = PaperStep(fn, kind, dims, batch, dtype)
    graph = capture_graph(step)
    # untimed replays first, as every timing here (a graph's first replays run slow on the H200)
    time_replays([graph], WARMUP_ROUNDS, Phase(step, torch.zeros_like(step.write_pos), flusher))
    per = [median([r[0] for r in time_replays([graph], rounds, Phase(step, torch.full_like(step.write_pos, c),
                                                                       flusher))]) for c in range(L)]
    mixed = median([r[0] for r in time_replays([graph], rounds, Phase(
        step, torch.arange(batch, dtype=torch.int32, device="cuda") % L, flusher))])
    return per, mixed


def summary(batch, mode, per, mixed, standard):
    amortized = sum(per) / L
    return {"batch": batch, "mode": mode, "nonflush": sum(per[:-1]) / (L - 1), "flush": per[-1],
            "amortized": amortized, "mixed": mixed, "x_standard": standard / amortized,
            "mixed_x_standard": standard / mixed, "per_phase": per}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paper-root", required=True, help="a checkout of the paper's repository (its vLLM fork)")
    p.add_argument("--output-only-config", default="16,1", metavar="BLOCK_M,WARPS")
    p.add_argument("--state-and-output-config", default="32,1", metavar="BLOCK_M,WARPS")
    p.add_argument("--batches", type=positive_int, nargs="+", default=[1, 128, 256])
    p.add_argument("--dims", default="nemotron_h", choices=sorted(DIMS))
    p.add_argument("--rounds", type=positive_int, default=15)
    p.add_argument("--json", help="write the rows and the machine description here")
    args = p.parse_args(argv)
    configs = {}
    for kind, text in (("output_only", args.output_only_config), ("state_and_output", args.state_and_output_config)):
        try:
            configs[KERNELS[kind][2]] = tuple(int(v) for v in text.split(","))
            assert len(configs[KERNELS[kind][2]]) == 2
        except (ValueError, AssertionError):
            p.error(f"--{kind.replace('_', '-')}-config: expected BLOCK_M,WARPS integers, got {text!r}")
    check_output(p, args.json)
    fns = {kind: load_paper_function(args.paper_root, path, name, lambda kernel, **shape: configs[kernel])
           for kind, (path, name, _) in KERNELS.items()}
    require_cuda(p)
    dims, dtype = DIMS[args.dims], torch.bfloat16
    info = device_info()
    copy_bw = copy_bandwidth_gbps()
    print(f"{info}  copy bandwidth {copy_bw:.0f} GB/s")
    flusher = L2Flusher()
    rows = []
    for batch in args.batches:
        standard = time_standard(dims, batch, dtype, flusher, args.rounds)
        rows.append({"batch": batch, "mode": "standard", "us": standard})
        per = time_replay(dims, batch, dtype, flusher, args.rounds, False)
        mixed = time_replay(dims, batch, dtype, flusher, args.rounds, True)
        rows.append(summary(batch, "replay default", per, sum(mixed) / L, standard))
        for kind, fn in fns.items():
            rows.append(summary(batch, f"paper {kind}", *time_paper(fn, kind, dims, batch, dtype, flusher,
                                                                   args.rounds), standard))
        torch.cuda.empty_cache()
    print(f"\n{args.dims}, bf16, fp32 state, L={L}")
    print("| batch | step | non-flush us | flush us | amortized us (x standard) | mixed us (x standard) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r["mode"] == "standard":
            print(f"| {r['batch']} | standard | | | {r['us']:.1f} (1.00) | |")
        else:
            print(f"| {r['batch']} | {r['mode']} | {r['nonflush']:.1f} | {r['flush']:.1f} | {r['amortized']:.1f} "
                  f"({r['x_standard']:.2f}) | {r['mixed']:.1f} ({r['mixed_x_standard']:.2f}) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dims": dims, "window": L, "device": info, "copy_GBps": copy_bw, "rows": rows,
                       "paper_configs": configs}, f, indent=1)


if __name__ == "__main__":
    main()
