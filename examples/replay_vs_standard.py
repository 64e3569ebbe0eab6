"""ReplaySSM decode next to standard decode, one layer of each kind, on the reference ops.

Decodes a few windows of random tokens through a Mamba-2, a Gated DeltaNet and a KDA layer
twice: once with the standard recurrence (state read and written every token), once with
ReplaySSM (checkpoint + ring of inputs, a flush every ``--window`` tokens, staggered across
slots), and prints how far apart the outputs and final states are, with the state bytes each
scheme moves per token.

    python examples/replay_vs_standard.py --slots 4 --tokens 48 --window 16
"""

from __future__ import annotations

import argparse

import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops.gdn import reference as gdn
from trtllm_replayssm.ops.gdn.state import DeltaRuleReplayState
from trtllm_replayssm.ops.kda import reference as kda
from trtllm_replayssm.ops.kda.state import allocate as allocate_kda
from trtllm_replayssm.ops.mamba2 import reference as mamba2
from trtllm_replayssm.ops.mamba2.state import Mamba2ReplayState


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def run_mamba2(cfg: ReplaySSMConfig, slots: int, tokens: int, gen: torch.Generator) -> tuple[float, float]:
    H, P, N, G = 8, 16, 32, 2
    A = -torch.rand(H, dtype=torch.float64, generator=gen) - 0.5
    D = torch.randn(H, dtype=torch.float64, generator=gen)
    dt_bias = torch.randn(H, dtype=torch.float64, generator=gen) * 0.5
    standard = torch.zeros(slots, H, P, N, dtype=torch.float64)
    replay = Mamba2ReplayState.allocate(
        slots, H, P, N, G, cfg, activation_dtype=torch.float64, checkpoint_dtype=torch.float64
    )
    replay.ring_dt = replay.ring_dt.double()  # fp32 by contract; float64 isolates reassociation
    worst = 0.0
    for _ in range(tokens):
        x = torch.randn(slots, H, P, dtype=torch.float64, generator=gen)
        dt = torch.randn(slots, H, dtype=torch.float64, generator=gen)
        B = torch.randn(slots, G, N, dtype=torch.float64, generator=gen)
        C = torch.randn(slots, G, N, dtype=torch.float64, generator=gen)
        args = dict(A=A, B=B, C=C, D=D, dt_bias=dt_bias, dt_softplus=True)
        y_std = mamba2.mamba2_standard_step(standard, x, dt, **args)
        y_rep = mamba2.mamba2_replay_step(replay, x, dt, **args)
        worst = max(worst, _rel(y_rep, y_std))
    final = mamba2.mamba2_replay_materialize(replay, torch.arange(slots), A=A)
    return worst, _rel(final, standard)


def run_delta(cfg: ReplaySSMConfig, slots: int, tokens: int, gen: torch.Generator, kda_layer: bool):
    HV, H, K, V = 4, 2, 16, 16
    ops = kda if kda_layer else gdn
    prefix = "kda" if kda_layer else "gdn"
    A_log = torch.rand(HV, dtype=torch.float64, generator=gen)
    dt_bias = torch.randn(HV * K if kda_layer else HV, dtype=torch.float64, generator=gen)
    standard = torch.zeros(slots, HV, V, K, dtype=torch.float64)
    f64 = dict(activation_dtype=torch.float64, checkpoint_dtype=torch.float64)
    if kda_layer:
        replay = allocate_kda(slots, HV, K, V, cfg, k_heads=H, **f64)
    else:
        replay = DeltaRuleReplayState.allocate(slots, HV, H, K, V, cfg, **f64)
    # The ring keeps beta, g and u in fp32 by contract; float64 here isolates reassociation.
    replay.ring_beta, replay.ring_g, replay.ring_u = (
        replay.ring_beta.double(), replay.ring_g.double(), replay.ring_u.double()
    )
    worst = 0.0
    for _ in range(tokens):
        q = torch.randn(slots, H, K, dtype=torch.float64, generator=gen)
        k = torch.randn(slots, H, K, dtype=torch.float64, generator=gen)
        v = torch.randn(slots, HV, V, dtype=torch.float64, generator=gen)
        a_shape = (slots, HV, K) if kda_layer else (slots, HV)
        a = torch.randn(a_shape, dtype=torch.float64, generator=gen)
        b = torch.randn(slots, HV, dtype=torch.float64, generator=gen)
        o_std = getattr(ops, f"{prefix}_standard_step")(standard, q, k, v, a, b, A_log, dt_bias)
        o_rep = getattr(ops, f"{prefix}_replay_step")(replay, q, k, v, a, b, A_log, dt_bias)
        worst = max(worst, _rel(o_rep, o_std))
    final = getattr(ops, f"{prefix}_replay_materialize")(replay, torch.arange(slots))
    return worst, _rel(final, standard)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=4, help="cache slots decoded together")
    parser.add_argument("--tokens", type=int, default=48, help="tokens decoded per slot")
    parser.add_argument("--window", type=int, default=16, help="ReplaySSM window L")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.slots < 1 or args.tokens < 1:
        parser.error("--slots and --tokens: expected positive integers")
    try:
        cfg = ReplaySSMConfig(window=args.window)
    except ValueError as err:
        parser.error(f"--window: {err}")
    gen = torch.Generator().manual_seed(args.seed)

    print(f"ReplaySSM vs standard decode, float64 reference ops: {args.slots} slots x {args.tokens} "
          f"tokens, window L={cfg.window}, staggered flushes")
    print(f"{'layer':<10}{'max rel. output diff':>22}{'rel. final state diff':>24}")
    rows = [
        ("mamba2", run_mamba2(cfg, args.slots, args.tokens, gen)),
        ("gdn", run_delta(cfg, args.slots, args.tokens, gen, kda_layer=False)),
        ("kda", run_delta(cfg, args.slots, args.tokens, gen, kda_layer=True)),
    ]
    for name, (out_diff, state_diff) in rows:
        print(f"{name:<10}{out_diff:>22.2e}{state_diff:>24.2e}")
    ideal = 2 * cfg.window / (cfg.window + 1)
    print(f"state traffic per window: standard {2 * cfg.window}|S|, ReplaySSM {cfg.window + 1}|S| "
          f"-> ideal saving {ideal:.2f}x")
    agree = all(o < 1e-9 and s < 1e-9 for _, (o, s) in rows)
    print("AGREE: ReplaySSM equals standard decode to float64 rounding" if agree else "MISMATCH")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
