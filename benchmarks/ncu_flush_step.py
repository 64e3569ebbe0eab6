"""One all-flush ReplaySSM step at serving batch, twice (compile, then the run to profile), for
Nsight Compute: every live slot at ``committed = L - 1`` so that the step's flush launch folds
every row. Mamba-2 at Nemotron-H dims, GDN / KDA at the benchmarks' dims, bf16, the ops' default
launch (``--launch "flush_impl=cuda_ws"``: Mamba-2's with ``LaunchConfig`` fields replaced;
``--refold`` for the delta rules' refolding flush, else the cached ``u``).

    ncu --clock-control none -k regex:flush --launch-skip 1 -c 1 --set full \\
        python3 benchmarks/ncu_flush_step.py --kind kda --batch 256

Gated DeltaNet's one-launch step (its kernel ``_fused_step_kernel``) with ``--fused "block_v=64,
stages=3, flush_stages=0"`` (fields of ``FusedVariant``), and the paper's public GDN kernel at every row's
``write_pos = L - 1`` with ``--paper-root CHECKOUT`` (``--paper-config BV,WARPS,STAGES,NK``)::

    ncu --clock-control none -k regex:fused --launch-skip 1 -c 1 --set full \\
        python3 benchmarks/ncu_flush_step.py --kind gdn --fused "block_v=64, stages=3, flush_stages=0"
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

WINDOW = 16


def cursor_fills(committed: torch.Tensor, flush_at: torch.Tensor, length: int = WINDOW - 1):
    """A function that puts every slot at ring length ``length`` (``flush_at`` ``WINDOW``: with the
    default, the next step flushes every row). By copies, not ``fill_``: an L2 flusher's ``zero_``
    is a fill kernel, by which ``_timing.graph_timeline`` tells one replay from the next
    (``probe_flush_step_parts.py``)."""
    values = torch.full_like(committed, length), torch.full_like(flush_at, WINDOW)

    def fill():
        committed.copy_(values[0])
        flush_at.copy_(values[1])
    return fill


def mamba2_step(batch: int, standard: bool = False, fields: dict | None = None, committed: int | None = None):
    """The all-flush replay step, or with ``standard`` the standard step on the same checkpoint
    (the kernel whose memory throughput the flush launch is measured against); ``fields``: the
    default ``LaunchConfig`` at ``batch`` with these fields replaced (``--launch``); ``committed``:
    every slot at that ring length instead, a non-flush step."""
    import dataclasses

    from trtllm_replayssm.config import ReplaySSMConfig
    from trtllm_replayssm.ops.mamba2 import Mamba2ReplayState, decode

    heads, head_dim, d_state, groups = 128, 64, 128, 8
    gen = torch.Generator(device="cuda").manual_seed(0)
    st = Mamba2ReplayState.allocate(batch, heads, head_dim, d_state, groups, ReplaySSMConfig(window=WINDOW),
                                    activation_dtype=torch.bfloat16, device="cuda")
    st.checkpoint.normal_(0, 0.05, generator=gen)
    for t in (st.ring_x, st.ring_B):
        t.normal_(0, 0.1, generator=gen)
    st.ring_dt.uniform_(0, 0.1, generator=gen)

    def rnd(*shape):
        return torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)

    x, z = rnd(batch, heads, head_dim), rnd(batch, heads, head_dim)
    dt, B, C = rnd(batch, heads), rnd(batch, groups, d_state), rnd(batch, groups, d_state)
    A = -torch.rand(heads, device="cuda", generator=gen)
    D, dt_bias = torch.randn(heads, device="cuda", generator=gen), torch.randn(heads, device="cuda", generator=gen)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")

    def standard_step():
        decode.standard_step(st.checkpoint, x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1)

    default = decode.launch_config("replay", head_dim, d_state, batch, gpu=decode.gpu_name("cuda"))
    cfg = dataclasses.replace(default, **(fields or {}))

    fills = cursor_fills(st.committed, st.flush_at, WINDOW - 1 if committed is None else committed)

    def step():
        fills()
        decode.replay_step(st.checkpoint, st.ring_x, st.ring_dt, st.ring_B, st.committed, st.flush_at, st.window,
                           x, dt, A, B, C, D, z, dt_bias, True, None, None, idx, -1, config=cfg)
    return standard_step if standard else step


def delta_step(kind: str, batch: int, refold: bool, variant=None, committed: int | None = None):
    from _delta_layer import Layer
    from trtllm_replayssm.ops.gdn import decode

    dims = (32, 32, 128, 128) if kind == "kda" else (32, 16, 128, 128)
    layer = Layer(kind, *dims, torch.bfloat16, WINDOW)
    st, x = layer.state(batch), layer.tokens(batch)
    idx = torch.arange(batch, dtype=torch.int32, device="cuda")

    def step():
        st.committed.fill_(WINDOW - 1 if committed is None else committed)
        st.flush_at.fill_(WINDOW)
        decode.delta_replay_step(st.checkpoint, st.ring_k, st.ring_v, st.ring_beta, st.ring_g, st.ring_u,
                                 st.committed, st.flush_at, st.window, **x, A_log=layer.A_log,
                                 dt_bias=layer.dt_bias, state_indices=idx, pad_slot_id=-1, scale=None, refold=refold,
                                 variant=variant)
    return step


def staged_variant(kind: str, batch: int, refold: bool, fields: str):
    """The ops' default :class:`StagedVariant` at ``batch`` with ``fields`` replaced (the
    benchmarks' ``--default-with``, ``_delta_layer.default_with``, at the dims this script runs)."""
    import types

    from _delta_layer import default_with
    from _derive import parse_fields
    from trtllm_replayssm.ops.gdn import decode
    from trtllm_replayssm.ops.gdn.decode_staged import StagedVariant

    dims = types.SimpleNamespace(per_channel=kind == "kda", d_v=128, window=WINDOW)
    variant = default_with(dims, batch, refold, parse_fields(fields, StagedVariant))
    if not isinstance(variant, StagedVariant):
        default = decode.default_variant(batch, dims.per_channel, refold, dims.d_v, dims.window)
        raise SystemExit(f"--staged: the default at batch {batch} is {default!r}, not a StagedVariant")
    return variant


def paper_step(root: str, cfg: tuple[int, ...], batch: int):
    """The paper's GDN kernel with every row at its flush position (``write_pos = L - 1``)."""
    from _delta_layer import Layer
    from bench_gdn_paper import DIMS, PaperStep, load_paper_kernel

    layer = Layer("gdn", *DIMS, torch.bfloat16, WINDOW)
    x = layer.tokens(batch)
    paper = PaperStep(load_paper_kernel(root), layer, batch, cfg, torch.Generator(device="cuda").manual_seed(1))

    def step():
        paper.write_pos.fill_(WINDOW - 1)
        paper(x)
    return step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", default="mamba2", choices=["mamba2", "gdn", "kda"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--standard", action="store_true",
                   help="mamba2: the standard step (_standard_step_kernel) on the same checkpoint instead")
    p.add_argument("--launch", metavar="FIELDS",
                   help='mamba2: the default LaunchConfig with these fields replaced ("flush_impl=cuda_ws")')
    p.add_argument("--refold", action="store_true", help="delta rules: the refolding flush")
    p.add_argument("--fused", metavar="FIELDS", help='gdn: the one-launch step, FusedVariant fields ("" for defaults)')
    p.add_argument("--committed", type=int, metavar="C",
                   help="every slot at ring length C < L - 1, a non-flush step (its ring launch: "
                        "-k regex:_ring_kernel; Mamba-2's stream launch: -k regex:stream)")
    p.add_argument("--staged", metavar="FIELDS",
                   help='delta rules: the default StagedVariant with these fields replaced ("ring_fast_exp=true")')
    p.add_argument("--paper-root", help="gdn: time the paper's kernel from this checkout instead")
    p.add_argument("--paper-config", default="64,1,3,2", help="the paper kernel's BV,WARPS,STAGES,NK")
    args = p.parse_args(argv)
    if args.batch < 1:
        p.error(f"--batch: expected >= 1, got {args.batch}")
    if (args.fused is not None or args.paper_root) and args.kind != "gdn":
        p.error(f"--fused / --paper-root: Gated DeltaNet only (--kind gdn), got --kind {args.kind}")
    if args.staged is not None and args.kind == "mamba2":
        p.error("--staged: the delta rules only (--kind gdn or kda)")
    if args.committed is not None and not 0 <= args.committed < WINDOW - 1:
        p.error(f"--committed: expected 0 <= C < {WINDOW - 1} (a non-flush step), got {args.committed}")
    if args.staged is not None and args.fused is not None:
        p.error("--staged: not with --fused (one launch kind per run)")
    if args.launch is not None and (args.kind != "mamba2" or args.standard):
        p.error("--launch: the Mamba-2 replay step only (--kind mamba2, not --standard)")
    if args.standard and args.kind != "mamba2":
        p.error(f"--standard: Mamba-2 only (--kind mamba2), got --kind {args.kind}")
    if args.paper_root:
        step = paper_step(args.paper_root, tuple(int(v) for v in args.paper_config.split(",")), args.batch)
    elif args.kind == "mamba2":
        from _derive import parse_fields
        from trtllm_replayssm.ops.mamba2.launch import LaunchConfig

        step = mamba2_step(args.batch, args.standard, parse_fields(args.launch or "", LaunchConfig), args.committed)
    else:
        variant = None
        if args.fused is not None:
            from bench_gdn_paper import fused_variant

            variant = fused_variant(args.fused)[1]
        elif args.staged is not None:
            variant = staged_variant(args.kind, args.batch, args.refold, args.staged)
        step = delta_step(args.kind, args.batch, args.refold, variant, args.committed)
    for _ in range(2):
        step()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
