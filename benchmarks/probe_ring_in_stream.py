"""``LaunchConfig.ring_in_stream`` on a GPU, each case in a child process under a time limit, so that
a step that never ends is reported as such instead of stopping the call.

Its stream programs wait for ring programs of the same launch, and its warp-specialised flush
launch for those ring programs from the side stream (``ops/mamba2/ring_sync.py``). The fifty-sixth
run's first device call ran the option's GPU tests and a ``--variants`` timing on an H100 and
printed nothing in 250 + 320 s (``benchmarks/NOTES_mamba2.md``): this probe says which form, if
any, does not finish.

1. Correctness, per case (``CASES``: the flush after the one launch, or beside it waiting for its
   ring programs; ring programs first or ``ring_lead_rows`` ahead; eager steps, then a captured
   graph): ``--steps`` steps at ``--batch`` rows (in phase, then staggered), each checked against
   the default step on a copy of the state (``y`` within ``--y-tol``, the checkpoint within 1e-5
   relative). A case that takes more than ``--limit`` seconds is killed and reported ``HANG``; a
   wait that outlasts ``ring_sync.MAX_POLLS`` reads ends its launch by ``trap`` and is reported
   as the CUDA error it raises (``ERROR: ...``).
2. Timing (``--time``), for the cases that passed at ``--time-batch``: ``bench_mamba2_decode.time_replay`` of the
   default and of each case, in turn, in one child per case (graph replays, L2 flushed before each);
   the non-flush, all-flush, amortized and staggered steps in microseconds.

    PYTHONPATH=$PWD python3 benchmarks/probe_ring_in_stream.py                   # Nemotron-H, batch 3 then 256
    PYTHONPATH=$PWD python3 benchmarks/probe_ring_in_stream.py --time --rounds 20 # and the step times
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: (name, LaunchConfig fields replacing the default's): the flush launch after the one launch on
#: the main stream, or beside it on the side stream waiting for its ring programs.
CASES = [
    ("after", dict(ring_in_stream=True, flush_stream=False)),
    ("beside", dict(ring_in_stream=True)),
    ("beside, lead rows 8", dict(ring_in_stream=True, ring_lead_rows=8)),
    # The stream launch's registers (56, 18 programs a SM at 2 warps): the one launch otherwise takes 64.
    ("after, 56 regs", dict(ring_in_stream=True, flush_stream=False, max_registers=56)),
    ("beside, 56 regs", dict(ring_in_stream=True, max_registers=56)),
    ("beside, lead rows 8, 56 regs", dict(ring_in_stream=True, ring_lead_rows=8, max_registers=56)),
]
#: What a case is checked against: the same config with the ring launch and stream launch apart.
APART = dict(ring_in_stream=False, ring_lead_rows=0)


def _config(batch: int, head_dim: int, d_state: int, fields: dict):
    """The default step's config at ``batch``; a case's fields replace those of the batch-256 config
    (below 128 rows the default is a write-through kernel, which ``ring_in_stream`` does not take)."""
    from trtllm_replayssm.ops.mamba2 import decode

    if not fields:
        return decode.launch_config("replay", head_dim, d_state, batch)
    return dataclasses.replace(decode.launch_config("replay", head_dim, d_state, max(batch, 256)), **fields)


def _state(dims, batch, stagger, seed=0):
    import torch

    from trtllm_replayssm.config import ReplaySSMConfig
    from trtllm_replayssm.ops.mamba2.state import Mamba2ReplayState

    heads, head_dim, d_state, groups = dims
    cfg = ReplaySSMConfig(window=16, flush_stagger=stagger)
    state = Mamba2ReplayState.allocate(batch, heads, head_dim, d_state, groups, cfg, activation_dtype=torch.bfloat16,
                                       device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    state.checkpoint.normal_(0, 0.1, generator=gen)
    return state


def check_case(dims, batch, steps, fields, y_tol, graph) -> str:
    """Steps of the case against the default step on a copy of the same state; a line of text."""
    import torch

    from bench_mamba2_decode import _inputs
    from trtllm_replayssm.ops.mamba2 import decode

    heads, head_dim, d_state, groups = dims
    from trtllm_replayssm.ops.mamba2 import ring_sync

    ours_cfg = _config(batch, head_dim, d_state, fields)
    base_cfg = dataclasses.replace(ours_cfg, flush_stream=True, max_registers=None, **APART)
    worst_y = worst_ck = 0.0
    for stagger in (False, True):
        ours, base = _state(dims, batch, stagger), _state(dims, batch, stagger)
        x, dt, A, B, C, D, z, dt_bias = _inputs(batch, *dims, torch.bfloat16)
        idx = torch.arange(batch, dtype=torch.int32, device="cuda")
        y_ours, y_base = torch.empty_like(x), torch.empty_like(x)

        def step(st, cfg, y):
            decode.replay_step(st.checkpoint, st.ring_x, st.ring_dt, st.ring_B, st.committed, st.flush_at, st.window,
                               x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1, out=y, config=cfg)

        run_ours = lambda: step(ours, ours_cfg, y_ours)  # noqa: E731
        if graph:
            from _timing import capture_graph

            g = capture_graph(run_ours, warmup=1)
            step(base, base_cfg, y_base)  # the warm-up's step, so both states stand at the same phase
            run_ours = g.replay
        for k in range(steps):
            for t in (x, dt, B, C, z):
                t.normal_()
            run_ours()
            step(base, base_cfg, y_base)
            torch.cuda.synchronize()
            if not torch.equal(ours.committed, base.committed) or not torch.equal(ours.flush_at, base.flush_at):
                bad = (ours.committed != base.committed) | (ours.flush_at != base.flush_at)
                rows = bad.nonzero().flatten()[:4].tolist()
                return (f"WRONG: cursors differ at step {k} ({'staggered' if stagger else 'in phase'}), rows {rows}: "
                        f"committed {ours.committed[rows].tolist()} vs {base.committed[rows].tolist()}, "
                        f"flush_at {ours.flush_at[rows].tolist()} vs {base.flush_at[rows].tolist()}")
            dev = torch.device("cuda", torch.cuda.current_device())
            for what, left in (("counters", ring_sync._COUNTERS[dev][:ring_sync.ARRIVALS_AT + batch]),
                               ("word counts", ring_sync._WORDS[dev][:batch * groups] & 0xFFFF)):
                if left.any():  # zero between launches (the words keep c and the flush bit above their counts)
                    at = left.nonzero().flatten()[:6].tolist()
                    return f"WRONG: sync {what} not zero after step {k}: at {at} {left[at].tolist()}"
            worst_y = max(worst_y, ((y_ours.float() - y_base.float()).abs().max() /
                                    y_base.float().abs().max().clamp_min(1e-6)).item())
            worst_ck = max(worst_ck, ((ours.checkpoint - base.checkpoint).abs().max() /
                                      base.checkpoint.abs().max()).item())
    ok = worst_y <= y_tol and worst_ck <= 1e-5
    return f"{'ok' if ok else 'WRONG'}: y {worst_y:.1e}, checkpoint {worst_ck:.1e} (relative to the default step)"


def time_case(dims, batch, rounds, fields) -> str:
    import torch

    from _timing import L2Flusher
    from bench_mamba2_decode import time_replay

    heads, head_dim, d_state, groups = dims
    cfg = _config(batch, head_dim, d_state, fields)
    flush = L2Flusher()
    phases = time_replay(dims, batch, torch.bfloat16, flush, rounds, False, cfg)
    mixed = time_replay(dims, batch, torch.bfloat16, flush, rounds, True, cfg)
    # time_replay: one figure a phase of the window; in phase, the last is the step where every row flushes.
    non_flush = sum(phases[:-1]) / (len(phases) - 1)
    return (f"non-flush {non_flush:.1f} us, flush {phases[-1]:.1f} us, amortized {sum(phases) / len(phases):.1f} us, "
            f"staggered {sum(mixed) / len(mixed):.1f} us")


def _child(conn, fn, args):
    try:
        conn.send(fn(*args))
    except Exception as exc:  # reported, not raised: the parent prints it beside the case's name
        conn.send(f"ERROR: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")


def in_child(fn, args, limit: float) -> tuple[str, float]:
    """``fn(*args)``'s line from a spawned process, or ``HANG`` after ``limit`` seconds."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args), daemon=True)
    start = time.perf_counter()
    proc.start()
    if parent.poll(limit):
        line = parent.recv()
        proc.join(10)
    else:
        line = f"HANG: no result in {limit:.0f} s"
        proc.kill()
        proc.join(10)
    return line, time.perf_counter() - start


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dims", type=int, nargs=4, default=[128, 64, 128, 8], metavar=("HEADS", "HEAD_DIM", "D_STATE", "GROUPS"))
    p.add_argument("--batch", type=int, nargs="+", default=[3, 256], help="batches checked, in order")
    p.add_argument("--steps", type=int, default=18, help="steps per state (in phase, then staggered)")
    p.add_argument("--limit", type=float, default=90.0, help="seconds a case may take before it counts as a hang")
    p.add_argument("--y-tol", type=float, default=2e-2, help="y's largest difference, relative to the largest |y|")
    p.add_argument("--time", action="store_true", help="then time the default and every case that passed")
    p.add_argument("--cases", nargs="+", metavar="NAME", help="only these cases (names as CASES spells them)")
    p.add_argument("--time-batch", type=int, default=256)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    dims = tuple(args.dims)
    passed = []  # the cases whose every check at the timed batch passed
    unknown = set(args.cases or ()) - {name for name, _ in CASES}
    if unknown:
        p.error(f"--cases: expected names from {[name for name, _ in CASES]}, got {sorted(unknown)}")
    for name, fields in CASES:
        if args.cases and name not in args.cases:
            continue
        good = True
        for batch in args.batch:
            for graph in (False, True):
                line, took = in_child(check_case, (dims, batch, args.steps, fields, args.y_tol, graph), args.limit)
                print(f"{name:22s} batch {batch:4d} {'graph' if graph else 'eager'}: {line} [{took:.0f} s]", flush=True)
                good = good and (batch != args.time_batch or line.startswith("ok"))
        if good:
            passed.append((name, fields))
    if args.time:
        for name, fields in [("default", {})] + passed + [("default", {})]:
            line, took = in_child(time_case, (dims, args.time_batch, args.rounds, fields), args.limit * 2)
            print(f"time {name:22s} batch {args.time_batch}: {line} [{took:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
