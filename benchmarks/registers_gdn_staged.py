"""Compile the staged delta-rule kernels (``ops/gdn/decode_staged.py``) and Gated DeltaNet's
one-launch step (``decode_fused.py``, with ``--defaults``) for sm_90 (``--sm``: another target)
without a GPU and print ptxas's registers, spills and shared memory per kernel and launch choice.

Triton 3.9's ``triton.compile`` with a ``GPUTarget`` builds PTX on the CPU; ``ptxas -v`` then
reports the resources. Pointers and the row strides carry the 16-byte divisibility that the
launch-time specialisation gives them on the device. Must run without ``TRITON_INTERPRET``.

    python benchmarks/registers_gdn_staged.py            # GDN and KDA, the --variants configs
    python benchmarks/registers_gdn_staged.py --defaults # the ops' defaults at batch 256 (and GDN's one-launch step)
    python benchmarks/registers_gdn_staged.py --defaults --sm 100   # the same for sm_100 (B200)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from trtllm_replayssm.ops.gdn import decode_staged as staged  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
ARCH = "sm_90a"


def set_target(capability: int) -> None:
    """Compile for compute capability ``capability`` (90, 100, 103, ...) from now on: Triton's
    target and ptxas's ``-arch`` (the ``a`` variant, as Triton uses)."""
    global TARGET, ARCH
    TARGET = GPUTarget("cuda", capability, 32)
    ARCH = f"sm_{capability}a"

# The ptxas Triton itself uses for sm_90+ (it accepts the PTX version Triton emits).
PTXAS = os.environ.get("PTXAS", os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                                             "ptxas-blackwell"))


def _compile(fn, types: dict[str, str], constexprs: dict[str, object], num_warps: int, maxnreg=None,
             divisible: tuple[str, ...] = ()) -> str:
    """ptxas's resource line for ``fn`` compiled as a launch would specialise it. ``divisible``:
    integer arguments (besides ``stride*``) whose launch values are multiples of 16, which
    Triton's launcher marks as such; without the mark the compiled kernel differs (the Mamba-2
    flush kernel: scalar instead of vector accesses, 16 B fewer spills)."""
    names = fn.arg_names
    signature = {n: types.get(n, "constexpr") for n in names}
    # Launch-time specialisation: pointers and strides divisible by 16 (as the real tensors are).
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, t in types.items()
             if t.startswith("*") or n.startswith("stride") or n in divisible}
    src = ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": num_warps}
    if maxnreg:
        options["maxnreg"] = maxnreg
    compiled = triton.compile(src, target=TARGET, options=options)  # TARGET read at call time (set_target)
    ptx = compiled.asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        run = subprocess.run([PTXAS, f"-arch={ARCH}", "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"ptxas failed on {fn.__name__}: {run.stderr[-2000:]}")
        res = run.stderr
    finally:
        os.unlink(f.name)
    regs = re.search(r"Used (\d+) registers", res)
    spill = re.search(r"(\d+) bytes spill stores", res)
    # Triton's shared memory is dynamic (ptxas reports only static): its own count, per program.
    # Over 48 KB a block must opt in, and a list flush launch over it slowed the stream launch
    # beside it (NOTES_delta.md, thirteenth run).
    return (f"{regs.group(1) if regs else '?'} registers, {spill.group(1) if spill else '?'} B spilled, "
            f"{compiled.metadata.shared} B smem")


def resources(per_channel: bool, act: str, HV: int, H: int, K: int, V: int, cap: int, variant: staged.StagedVariant,
              rows: int = 256, refold: bool = True) -> dict[str, str]:
    """ptxas's resource line of each kernel (ring, stream, and flush with ``flush_launch``) for
    one launch choice, called with ``refold`` (the benchmarks' ``--variants`` call with True);
    the constexprs are the launcher's own (``staged.staged_launch``)."""
    launch = staged.staged_launch(variant, rows, HV, H, K, V, cap, per_channel=per_channel, refold=refold,
                                  has_bias=True, has_indices=True, pdl=variant.pdl)
    ring_types = {
        "q": f"*{act}", "k": f"*{act}", "a": f"*{act}", "b": f"*{act}", "A_log": "*fp32", "dt_bias": "*fp32",
        "ring_k": f"*{act}", "ring_beta": "*fp32", "ring_g": "*fp32", "committed": "*i32", "flush_at": "*i32",
        "state_indices": "*i32", "pad_slot_id": "i32", "scale": "fp32", "scratch": "*fp32", "row_info": "*i32",
        **{s: "i32" for s in ("stride_q", "stride_qh", "stride_k", "stride_kh", "stride_a", "stride_b")},
    }
    ring = _compile(staged._ring_kernel, ring_types, launch.ring, launch.ring_warps, variant.ring_max_registers)
    tile_types = {
        "q": f"*{act}", "v": f"*{act}", "out": f"*{act}", "checkpoint": "*fp32", "ring_k": f"*{act}",
        "ring_v": f"*{act}", "ring_beta": "*fp32", "ring_g": "*fp32", "ring_u": "*fp32", "committed": "*i32",
        "flush_at": "*i32", "state_indices": "*i32", "pad_slot_id": "i32", "window": "i32", "scratch": "*fp32",
        "row_info": "*i32", **{s: "i32" for s in ("stride_q", "stride_qh", "stride_v", "stride_vh", "stride_o",
                                                   "stride_oh")},
    }
    stream = _compile(staged._stream_kernel, tile_types, dict(launch.stream, **launch.common), launch.warps,
                      variant.max_registers)
    out = {"launch": f"BV={launch.block_v} warps={launch.warps} ring_warps={launch.ring_warps} "
                     f"ring_split={launch.ring_programs}",
           "ring": ring, "stream": stream}
    if variant.flush_launch:
        flush_types = {n: t for n, t in tile_types.items() if n not in ("committed", "flush_at", "window")}
        consts = dict(launch.flush, **launch.common)
        if launch.flush_list:
            list_types = {n: t for n, t in flush_types.items() if n != "pad_slot_id"}
            out["flush"] = _compile(staged._flush_list_kernel, {**list_types, "batch": "i32"}, consts,
                                    launch.flush_warps, variant.flush_max_registers)
            out["launch"] += (f" flush list BV={launch.flush_block_v} warps={launch.flush_warps} "
                              f"x{variant.flush_persistent}/SM")
        else:
            out["flush"] = _compile(staged._flush_kernel, flush_types, consts, launch.flush_warps,
                                    variant.flush_max_registers)
            out["launch"] += (f" flush BV={launch.flush_block_v} warps={launch.flush_warps} "
                              f"heads={launch.flush_heads} split={launch.flush_split}")
    return out


def fused_resources(act: str, HV: int, H: int, K: int, V: int, cap: int, variant=None, rows: int = 256) -> str:
    """ptxas's resource line of Gated DeltaNet's one-launch step (``decode_fused.py``) for
    ``variant`` (the ops' default from ``decode.FUSED_FROM`` when None), as its launch specialises
    it."""
    from trtllm_replayssm.ops.gdn import decode_fused as fused
    from trtllm_replayssm.ops.gdn.launch import FUSED_FROM, default_variant

    variant = variant or default_variant(max(rows, FUSED_FROM), False, False, V, cap)
    consts, warps = fused.fused_constexprs(variant, rows, HV, H, K, V, cap, True, True)
    ptr = {"q": act, "k": act, "v": act, "a": act, "b": act, "out": act, "ring_k": act, "ring_v": act,
           "A_log": "fp32", "dt_bias": "fp32", "checkpoint": "fp32", "ring_beta": "fp32", "ring_g": "fp32",
           "ring_u": "fp32", "committed": "i32", "flush_at": "i32", "arrivals": "i32", "state_indices": "i32"}
    types = {n: f"*{t}" for n, t in ptr.items()}
    types.update({n: "i32" for n in fused._fused_step_kernel.arg_names if n.startswith("stride")})
    types.update(pad_slot_id="i32", window="i32", scale="fp32")
    return _compile(fused._fused_step_kernel, types, consts, warps, variant.max_registers)


def main(argv=None):
    import argparse

    from trtllm_replayssm.ops.gdn import decode

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--defaults", action="store_true",
                   help="only the ops' defaults at batch 256 (decode.default_variant, both flush kinds)")
    p.add_argument("--sm", type=int, default=90, help="compute capability to compile for (90, 100, 103, ...)")
    args = p.parse_args(argv)
    set_target(args.sm)
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: the interpreter does not compile")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _delta_variants import VARIANTS

    dims_of = {"gdn": (32, 16, 128, 128), "kda": (32, 32, 128, 128)}
    if args.defaults:
        for kind, dims in dims_of.items():
            for refold in (False, True):
                # GDN's cached-u default from decode.FUSED_FROM is the one-launch step (below); the
                # staged step serves it for wider rings (capacity 32 here) and d_v not a multiple of 64
                variant = decode.default_variant(256, kind == "kda", refold, dims[3], 32)
                r = resources(kind == "kda", "bf16", *dims, 16, variant, 256, refold)
                print(f"{kind} {'staged ' if kind == 'gdn' and not refold else ''}default refold={refold} "
                      f"(batch 256) {r['launch']}: ring {r['ring']}; stream {r['stream']}; flush {r['flush']}",
                      flush=True)
        print(f"gdn default refold=False (batch 256, one launch) {decode.default_variant(256, False, False, 128)}: "
              f"{fused_resources('bf16', *dims_of['gdn'], 16)}", flush=True)
        return
    for kind, dims in dims_of.items():
        for name, variant, batches in VARIANTS:
            if not isinstance(variant, staged.StagedVariant):
                continue
            for rows in batches or (1, 256):
                r = resources(kind == "kda", "bf16", *dims, 16, variant, rows)
                flush = f"; flush {r['flush']}" if "flush" in r else ""
                print(f"{kind} {name} (batch {rows}) {r['launch']}: ring {r['ring']}; stream {r['stream']}{flush}",
                      flush=True)


if __name__ == "__main__":
    main()
