"""Gated DeltaNet decode: this package's ReplaySSM step against the paper's public kernel and fla.

The paper's code (github.com/Johnny-Liou/ReplaySSM, a vLLM fork) keeps the GDN decode step in
``vllm/model_executor/layers/fla/ops/fused_recurrent_replayssm.py``: one launch per step, the
ring's corrected values ``d`` and keys in the activation dtype, the state rebuilt per tile by a
16-bit tensor-core product. ``--paper-root`` points at a checkout of that repository; the file is
loaded alone (two small stand-ins replace the vLLM modules it imports), nothing of it is copied
here (``_paper_code.py``). Without ``--paper-root`` only this package's steps and fla's are timed.

Per batch (Qwen3.5-4B dims, bf16 activations, fp32 state, L=16; CUDA-graph replays with L2
flushed before each, as ``bench_gdn_decode.py``): fla's ``fused_recurrent_gated_delta_rule``;
the ops' default step and, with ``--fused``, the one-launch step (``ops/gdn/decode_fused.py``);
the paper's kernel at each ``--paper-configs`` launch (``block_v,num_warps,num_stages,nk``; its
own default first). Each ReplaySSM step is timed at every ring length (the host moves the
paper's ``write_pos``, as vLLM does): non-flush (mean of 0..14), flush (15), amortized (the
window's 16) and staggered (slots at phases ``slot % 16``).

Accuracy (``--accuracy``, fp32 activations so that no input rounding differs): the checkpoint
after 3 windows (48 steps, batch 256, every slot flushing at the same steps) against the float64
standard recurrence from the same initial state, for this package's default step and the paper's
kernel.

    python benchmarks/bench_gdn_paper.py --paper-root ../ReplaySSM --accuracy --json gdn_paper.json
    python benchmarks/bench_gdn_paper.py --paper-root ../ReplaySSM --fused "block_v=64, stages=2, precision=tf32x2" --batches 256
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

from _delta_layer import (AdvanceWritePos, Cursors, Layer, WritePos, fla_fn, steady_mean, steady_start,  # noqa: E402
                          window_cycle)
from _derive import label, parse_fields  # noqa: E402
from _paper_code import load_paper_function  # noqa: E402
from _timing import (WARMUP_ROUNDS, L2Flusher, capture_graph, copy_bandwidth_gbps, device_info, median,  # noqa: E402
                     time_replays)

from trtllm_replayssm.config import ReplaySSMConfig  # noqa: E402
from trtllm_replayssm.ops.gdn import decode  # noqa: E402
from trtllm_replayssm.ops.gdn import reference as gdn_ref  # noqa: E402
from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant  # noqa: E402
from trtllm_replayssm.ops.gdn.state import DeltaRuleReplayState  # noqa: E402

PAPER_FILE = "vllm/model_executor/layers/fla/ops/fused_recurrent_replayssm.py"
DIMS = (32, 16, 128, 128)  # HV, H, d_k, d_v
L = 16


def load_paper_kernel(root: str):
    """The paper's ``fused_recurrent_gated_delta_rule_replayssm`` from a checkout at ``root``
    (its launch-config lookup is overridden by the explicit launch arguments passed below)."""
    return load_paper_function(root, PAPER_FILE, "fused_recurrent_gated_delta_rule_replayssm",
                               lambda kernel, **shape: (None, None, None, None))


class PaperStep:
    """The paper's kernel on its own buffers: ``[slots + 1, ...]`` (slot 0 is its padding id),
    ring caches ``d`` / ``k`` in the activation dtype, ``g`` fp32; ``write_pos`` per row."""

    def __init__(self, kernel, layer, batch, cfg, gen):
        HV, H, K, V = layer.HV, layer.H, layer.d_k, layer.d_v
        slots = batch + 1
        dev = "cuda"
        self.kernel, self.layer, self.cfg = kernel, layer, cfg
        self.h0 = torch.randn(slots, HV, V, K, device=dev, generator=gen) * 0.05
        self.d = (torch.randn(slots, HV, L, V, device=dev, generator=gen) * 0.1).to(layer.dtype)
        self.k = (torch.randn(slots, H, L, K, device=dev, generator=gen) * 0.1).to(layer.dtype)
        self.g = torch.empty(slots, HV, L, device=dev).uniform_(-0.5, 0, generator=gen)
        self.idx = torch.arange(1, batch + 1, dtype=torch.int32, device=dev)
        self.write_pos = torch.zeros(batch, dtype=torch.int32, device=dev)
        self.out = torch.empty(batch, HV, V, device=dev, dtype=layer.dtype)

    def __call__(self, x):
        b = x["q"].shape[0]
        mixed = torch.cat([x["q"].reshape(b, -1), x["k"].reshape(b, -1), x["v"].reshape(b, -1)], 1)
        bv, nw, ns, nk = self.cfg
        self.kernel(mixed, x["a"], x["b"], self.layer.A_log, self.layer.dt_bias, self.layer.d_k ** -0.5, self.h0,
                    self.d, self.k, self.g, self.out, self.idx, self.write_pos, use_qk_l2norm_in_kernel=True,
                    block_v=bv, num_warps=nw, num_stages=ns, nk=nk)
        return self.out


def phases(graph, batch, before, cycle, rounds, steady=None):
    """Median us per ring length, and the staggered step; ``before(c)`` sets phases ``c`` (a
    tensor of per-row lengths) and flushes L2. ``cycle``: the ring lengths of one window, the
    last flushing (``None``: the write-through step, every token a flush at length 0).
    ``steady``: ``(start, advance)``, called once and before each replay, for the steady-state
    staggered step (the mean over a window of consecutive replays from the staggered start)."""
    # untimed replays first, as every timing here (a graph's first replays run slow on the H200)
    time_replays([graph], WARMUP_ROUNDS, before(torch.zeros(batch, dtype=torch.int32, device="cuda")))
    if cycle is None:
        us = median([r[0] for r in time_replays([graph], rounds, before(torch.zeros(batch, dtype=torch.int32,
                                                                                     device="cuda")))])
        return {"nonflush": us, "flush": us, "amortized": us, "staggered": us, "steady": us, "per_phase": [us]}
    per = {c: median([r[0] for r in time_replays([graph], rounds, before(torch.full((batch,), c, dtype=torch.int32,
                                                                                     device="cuda")))])
           for c in range(L)}
    stagger = (cycle[0] + torch.arange(batch, dtype=torch.int32, device="cuda") % len(cycle))
    st = median([r[0] for r in time_replays([graph], rounds, before(stagger))])
    out = {"nonflush": sum(per[c] for c in cycle[:-1]) / (len(cycle) - 1), "flush": per[L - 1],
           "amortized": sum(per[c] for c in cycle) / len(cycle), "staggered": st,
           "per_phase": [per[c] for c in range(L)]}
    if steady is not None:
        start, advance = steady
        start()
        out["steady"] = steady_mean(time_replays([graph] * len(cycle), rounds, advance))
    return out


def time_ours(layer, batch, x, idx, variant, flusher, rounds):
    """The phases of this package's step (``variant``: None for the ops' default)."""
    state = layer.state(batch)
    graph = capture_graph(lambda: decode.delta_replay_step(
        state.checkpoint, state.ring_k, state.ring_v, state.ring_beta, state.ring_g, state.ring_u,
        state.committed, state.flush_at, state.window, **x, A_log=layer.A_log, dt_bias=layer.dt_bias,
        state_indices=idx, pad_slot_id=-1, scale=None, refold=False, variant=variant))
    launched = decode.default_variant(batch, False, False, layer.d_v) if variant is None else variant
    cycle = None if launched == "write_through" else window_cycle(launched, False, L)
    return phases(graph, batch, lambda p: Cursors(state, [p], flusher), cycle, rounds,
                  steady=(lambda: steady_start(state, L), flusher))


def time_paper(kernel, layer, batch, x, cfg, flusher, rounds):
    """The phases of the paper's kernel at launch ``cfg``."""
    step = PaperStep(kernel, layer, batch, cfg, torch.Generator(device="cuda").manual_seed(1))
    graph = capture_graph(lambda: step(x))
    rows = torch.arange(batch, dtype=torch.int32, device="cuda")
    return phases(graph, batch, lambda p: WritePos(step.write_pos, p, flusher), list(range(L)), rounds,
                  steady=(lambda: step.write_pos.copy_(rows % L), AdvanceWritePos(step.write_pos, L, flusher)))


def fused_variant(spec: str):
    """``(row name, variant)`` of the one-launch step for ``--fused`` spec ``"field=value, ..."``
    (fields of ``FusedVariant``; empty: its defaults)."""
    fields = parse_fields(spec, FusedVariant)
    return ("replay fused" + (f" {label(fields)}" if fields else ""), FusedVariant(**fields))


def bench(layer, batch, flusher, rounds, kernel, paper_cfgs, fused):
    x = layer.tokens(batch)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    graph = capture_graph(fla_fn(layer, batch, x))
    # Discarded replays first (WARMUP_ROUNDS): without them fla's first timing here read 289.6 /
    # 291.1 us at batch 256 where a later one read 260.9 us on the H200.
    time_replays([graph], WARMUP_ROUNDS, flusher)
    fla = median([r[0] for r in time_replays([graph], rounds, flusher)])
    rows = [{"batch": batch, "mode": "fla", "us": fla}]
    for name, variant in [("replay default", None)] + [fused_variant(spec) for spec in fused]:
        rows.append({"batch": batch, "mode": name, **time_ours(layer, batch, x, idx, variant, flusher, rounds)})
        torch.cuda.empty_cache()
    for cfg in paper_cfgs:
        rows.append({"batch": batch, "mode": "paper " + ",".join(map(str, cfg)),
                     **time_paper(kernel, layer, batch, x, cfg, flusher, rounds)})
        torch.cuda.empty_cache()
    for r in rows:
        r["x_fla"] = fla / r.get("amortized", r.get("us"))
    return rows


def checkpoint_errors(kernel, paper_cfg, batch=256, windows=3):
    """Relative checkpoint error after ``windows`` windows against the float64
    standard recurrence, fp32 activations: ``{"replay default": e, "paper ...": e}``."""
    HV, H, K, V = DIMS
    layer = Layer("gdn", HV, H, K, V, torch.float32, L)
    gen = torch.Generator(device="cuda").manual_seed(7)
    h0 = torch.randn(batch, HV, V, K, device="cuda", generator=gen) * 0.1
    exact = h0.double().clone()
    mine = DeltaRuleReplayState.allocate(batch, HV, H, K, V, ReplaySSMConfig(window=L, flush_stagger=False),
                                         activation_dtype=torch.float32, device="cuda")
    mine.checkpoint.copy_(h0)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")
    paper = None
    if kernel is not None:
        paper = PaperStep(kernel, layer, batch, paper_cfg, gen)
        paper.h0[1:].copy_(h0)
    steps = windows * L
    for t in range(steps):
        x = layer.tokens(batch)
        gdn_ref.gdn_standard_step(exact, **x, A_log=layer.A_log, dt_bias=layer.dt_bias)
        decode.delta_replay_step(mine.checkpoint, mine.ring_k, mine.ring_v, mine.ring_beta, mine.ring_g, mine.ring_u,
                                 mine.committed, mine.flush_at, mine.window, **x, A_log=layer.A_log,
                                 dt_bias=layer.dt_bias, state_indices=idx, pad_slot_id=-1, scale=None, refold=False)
        if paper is not None:
            paper.write_pos.fill_(t % L)
            paper(x)
    assert int(mine.committed[0]) == 0, "the window count must end on a flush"

    def err(s):
        return ((s.double() - exact).abs().max() / exact.abs().max()).item()

    out = {"replay default": err(mine.checkpoint)}
    if paper is not None:
        out["paper " + ",".join(map(str, paper_cfg))] = err(paper.h0[1:])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paper-root", help="a checkout of the paper's repository (its vLLM fork)")
    p.add_argument("--paper-configs", nargs="+", default=["64,1,3,2", "32,1,3,2"], metavar="BV,WARPS,STAGES,NK",
                   help="the paper kernel's launch configs to time (its own default first)")
    p.add_argument("--batches", type=positive_int, nargs="+", default=[1, 128, 256])
    p.add_argument("--rounds", type=positive_int, default=15)
    p.add_argument("--fused", nargs="*", default=None, metavar="FIELDS",
                   help="also time the one-launch step (ops/gdn/decode_fused.py): FusedVariant's field defaults "
                        "(32 rows, the tile whole: not the ops' default, which is 'block_v=64, stages=3, flush_stages=0' and "
                        "the 'replay default' row from launch.FUSED_FROM), or one row per 'field=value, ...' "
                        "of FusedVariant given ('' for the field defaults)")
    p.add_argument("--accuracy", action="store_true", help="checkpoint errors after 3 windows against float64")
    p.add_argument("--json", help="write the rows and the machine description here")
    args = p.parse_args(argv)
    try:
        cfgs = [tuple(int(v) for v in c.split(",")) for c in args.paper_configs]
        assert all(len(c) == 4 for c in cfgs)
    except (ValueError, AssertionError):
        p.error(f"--paper-configs: expected BV,WARPS,STAGES,NK integers, got {args.paper_configs}")
    fused = [] if args.fused is None else (args.fused or [""])
    for spec in fused:
        try:
            fused_variant(spec)
        except ValueError as e:
            p.error(f"--fused: {e}")
    check_output(p, args.json)
    kernel = load_paper_kernel(args.paper_root) if args.paper_root else None
    require_cuda(p)
    info = device_info()
    copy_bw = copy_bandwidth_gbps()
    print(f"{info}  copy bandwidth {copy_bw:.0f} GB/s")
    layer = Layer("gdn", *DIMS, torch.bfloat16, L)
    flusher = L2Flusher()
    rows = []
    for batch in args.batches:
        rows += bench(layer, batch, flusher, args.rounds, kernel, cfgs if kernel else [], fused)
    print("\n| batch | step | non-flush us | flush us | amortized us | staggered us | steady staggered us "
          "| amortized x fla |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["mode"] == "fla":
            print(f"| {r['batch']} | fla | | | {r['us']:.1f} | | | 1.00 |")
        else:
            print(f"| {r['batch']} | {r['mode']} | {r['nonflush']:.1f} | {r['flush']:.1f} | {r['amortized']:.1f} | "
                  f"{r['staggered']:.1f} | {r['steady']:.1f} | {r['x_fla']:.2f} |")
    errors = checkpoint_errors(kernel, cfgs[0]) if args.accuracy else {}
    for name, e in errors.items():
        print(f"checkpoint after 3 windows vs float64 (fp32 activations), {name}: {e:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dims": DIMS, "window": L, "device": info, "copy_GBps": copy_bw, "rows": rows,
                       "checkpoint_errors": errors}, f, indent=1)


if __name__ == "__main__":
    main()
