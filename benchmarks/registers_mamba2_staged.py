"""Compile the two-launch Mamba-2 kernels (``ops/mamba2/decode_staged.py``) for sm_90 without a
GPU and print ptxas's registers, spills and shared memory for each staged config of
``_mamba2_variants.VARIANTS`` (the counts quoted in that list's comments).

Same method as ``registers_gdn_staged.py`` (whose ``_compile`` this reuses). Must run without
``TRITON_INTERPRET``.

    python benchmarks/registers_mamba2_staged.py            # Nemotron-H dims, bf16 activations
    python benchmarks/registers_mamba2_staged.py --sm 100   # the same for sm_100 (B200)
"""

from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import triton  # noqa: E402

import registers_gdn_staged  # noqa: E402
from registers_gdn_staged import _compile  # noqa: E402
from trtllm_replayssm.ops.mamba2 import decode  # noqa: E402
from trtllm_replayssm.ops.mamba2 import decode_staged as staged  # noqa: E402
from trtllm_replayssm.ops._prefetch import PREFETCH_MODES  # noqa: E402

#: The kernels' stride arguments: all multiples of 16 at the benchmarks' dims (Nemotron-H and
#: Nemotron-3-Nano, bf16 activations), so compiled as the launcher specialises them.
STRIDES = ("s_ck_slot", "s_ck_head", "s_ck_p", "s_rx_slot", "s_rx_head", "s_rx_j", "s_rdt_slot", "s_rdt_head",
           "s_rB_slot", "s_rB_group", "s_rB_j", "s_x_row", "s_x_head", "s_dt_row", "s_B_row", "s_B_group",
           "s_C_row", "s_C_group", "s_z_row", "s_z_head", "s_y_row", "s_y_head")


def _types(fn, act: str) -> dict[str, str]:
    """Argument types of ``fn`` as the benchmark launches it (bf16 activations and rings)."""
    fixed = {"ckpt_ptr": "*fp32", "ring_dt_ptr": "*fp32", "coef_ptr": "*fp32", "A_ptr": "*fp32", "D_ptr": "*fp32",
             "dt_ptr": "*fp32", "dt_bias_ptr": "*fp32", "committed_ptr": "*i32", "flush_at_ptr": "*i32",
             "idx_ptr": "*i32", "info_ptr": "*i32", "dt_min": "fp32", "dt_max": "fp32", "terms_ptr": "*fp32",
             "scores_ptr": "*fp32", "count_ptr": "*i32"}
    out = {}
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    for name in fn.arg_names:
        if name in constexprs:
            continue
        if name in fixed:
            out[name] = fixed[name]
        elif name.endswith("_ptr"):
            out[name] = f"*{act}"
        elif name in STRIDES or name in ("window", "pad_slot_id", "batch", "total_tiles"):
            out[name] = "i32"
    return out


#: SMs of the GPU whose register-cap choice the report shows (a tuple of caps in the config is
#: resolved as the launcher would on that GPU; 132: the H200 the benchmarks ran on).
SMS = 132


def resources(cfg: decode.LaunchConfig, heads=128, head_dim=64, d_state=128, groups=8, cap=16, act="bf16",
              batch=256):
    block_n = triton.next_power_of_2(d_state)
    block_j = max(16, triton.next_power_of_2(cap))
    flags = dict(HAS_INDICES=True)
    ring_x = cfg.ring_x_in_ring  # LaunchConfig allows it only with flush_launch
    ring = _compile(staged._ring_kernel, _types(staged._ring_kernel, act), dict(
        GROUPS=groups, HEADS_PER_GROUP=heads // groups, N=d_state, CAP=cap,
        BLOCK_HG=triton.next_power_of_2(heads // groups), BLOCK_N=block_n, BLOCK_J=block_j,
        HAS_DT_BIAS=True, DT_SOFTPLUS=True, HAS_CLAMP=True, P=head_dim, BLOCK_P=triton.next_power_of_2(head_dim),
        RING_X=ring_x, COMPACT=cfg.compact_coef, DT_SECTOR=cfg.ring_dt_sector, s_rdt_j=1, **flags), cfg.ring_warps,
        divisible=STRIDES)
    stream_consts = dict(
        HEADS=heads, HEADS_PER_GROUP=heads // groups, P=head_dim, N=d_state, CAP=cap, BLOCK_P=cfg.block_p,
        BLOCK_N=block_n, BLOCK_J=block_j, HAS_D=True, HAS_Z=True, FOLD=cfg.fold, RING_PREFETCH=cfg.ring_prefetch,
        RING_X_STORED=ring_x, COMPACT=cfg.compact_coef, s_rdt_j=1, **flags)  # the state's ring_dt: heads outermost
    if cfg.stream_tiles > 1:
        fn, stream_consts = staged._stream_walk, dict(stream_consts, TILES=triton.cdiv(head_dim, cfg.block_p),
                                                       WALK=cfg.stream_tiles)
    else:
        fn, stream_consts = staged._stream_kernel, dict(stream_consts, ROWS_FASTEST=cfg.rows_fastest,
                                                        FLUSH_HERE=not cfg.flush_launch)
    stream = _compile(fn, _types(fn, act), stream_consts, cfg.num_warps, cfg.max_registers, divisible=STRIDES)
    if not cfg.flush_launch:
        return ring, stream, ""
    hpg = heads // groups
    consts = dict(s_ck_p=d_state, s_rx_j=head_dim, s_rB_j=d_state)  # the cache's contiguous layout
    per_program = staged.flush_heads_per_program(hpg, cfg.flush_heads)
    row_consts = dict(**consts, HEADS=heads, HEADS_PER_GROUP=hpg, HEADS_PER_PROGRAM=per_program,
                      P=head_dim, N=d_state, CAP=cap, BLOCK_P=cfg.flush_block_p, BLOCK_N=block_n, BLOCK_J=block_j,
                      HAS_D=True, HAS_Z=True, FOLD=cfg.fold, STAGES=cfg.flush_stages,
                      PREFETCH=PREFETCH_MODES[cfg.flush_l2_prefetch] if head_dim % cfg.flush_block_p == 0 else 0,
                      AHEAD=cfg.flush_l2_ahead, **flags)
    items = (staged.ROW_GRID if not cfg.flush_persistent
             else staged.LIST_HEADS if cfg.flush_list_items == "heads" else staged.LIST_TILES)
    programs = batch * heads // per_program if items == staged.ROW_GRID else None
    flush = _compile(staged._flush_kernel, _types(staged._flush_kernel, act),
                     dict(row_consts, ITEMS=items, BLOCK_B=256 if items != staged.ROW_GRID else 1), cfg.flush_warps,
                     staged.flush_register_cap(cfg, programs, SMS), divisible=STRIDES)
    return ring, stream, flush


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sm", type=int, default=90, help="compute capability to compile for (90, 100, 103, ...)")
    args = p.parse_args(argv)
    registers_gdn_staged.set_target(args.sm)
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: the interpreter does not compile")
    from _mamba2_variants import VARIANTS, short

    configs = [decode.launch_config("replay", 64, 128, 256)]
    configs.append(dataclasses.replace(configs[0], compact_coef=True))
    configs += [dataclasses.replace(configs[0], stream_tiles=n) for n in (8, 32, 64)]
    configs += [decode.LaunchConfig(**kw) for kw in VARIANTS if kw.get("kernel") == "staged"]
    for cfg in configs:
        ring, stream, flush = resources(cfg)
        print(f"{short(cfg)}: ring {ring}; stream {stream}" + (f"; flush {flush}" if flush else ""), flush=True)


if __name__ == "__main__":
    main()
