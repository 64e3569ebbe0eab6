"""``benchmarks/_fold_gluon.py``: the Gluon folds compile for sm_90 without a GPU (Triton builds
the PTX on the CPU, ptxas from Triton's wheel assembles it) into what they are meant to be: the
accumulator-layout fold into tensor-core MMAs, the register-blocked fold into vector loads and
``SPT_P * SPT_N`` FMAs per entry, neither spilling. The GPU run that times and checks them
against float64 is ``bench_fold_ceiling.py``.

The compiles run in a child process without ``TRITON_INTERPRET``: the CPU suite sets it before
Triton is imported, which turns Triton's own helpers (the reductions' combine functions) into
interpreted ones that a compiled kernel cannot call."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon.language.nvidia.ampere")  # mma_v2
if not hasattr(pytest.importorskip("triton.experimental.gluon._runtime"), "GluonASTSource"):
    pytest.skip("this Triton's Gluon has no GluonASTSource to compile from", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas-blackwell"
pytestmark = pytest.mark.skipif(not PTXAS.exists(), reason="Triton's ptxas for sm_90+ is not installed")

# Compiles each kernel for sm_90a at Nemotron-H's shape (head_dim 64, d_state 128, 16 heads per
# group, a 16-entry window) and prints {name: {"ptx": ..., "ptxas": ...}} as JSON.
_CHILD = r'''
import json, os, subprocess, sys, tempfile
sys.path.insert(0, sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
import _fold_gluon as fg

TYPES = {"S_ptr": "*fp32", "X_ptr": "*fp32", "Y_ptr": "*bf16", "a_ptr": "*fp32", "C_ptr": "*bf16",
         "out_ptr": "*fp32", "n_tiles": "i32"}
DIMS = dict(HPG=16, P=64, N=128, J=16)


def build(fn, consts, warps):
    sig = {n: TYPES.get(n, "constexpr") for n in fn.arg_names}
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in TYPES.items()
             if t.startswith("*") and n in fn.arg_names}
    src = GluonASTSource(fn, sig, constexprs=dict(DIMS, **consts), attrs=attrs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}).asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    run = subprocess.run([sys.argv[2], "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
    os.unlink(f.name)
    return {"ptx": ptx, "ptxas": run.stderr, "rc": run.returncode}


out = {"mma": build(fg.fold_gluon_kernel, dict(BLOCK_P=32, WARPS_M=2, WARPS_N=2, PREFETCH=False), 4)}
for shape in fg.FMA_SHAPES[:2]:
    bp, spt_p, spt_n, tpw_p, wp, wn, unroll = shape
    out["fma " + "x".join(map(str, shape))] = build(fg.fold_gluon_fma_kernel, dict(
        BLOCK_P=bp, SPT_P=spt_p, SPT_N=spt_n, TPW_P=tpw_p, WARPS_P=wp, WARPS_N=wn, UNROLL=unroll), wp * wn)
try:
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # no Hopper TMA in this Triton's Gluon
    pass
else:
    # The TMA-streamed fold: the descriptor's type is what the launcher would pass.
    bp, chunk, stages, lag, wm, wn, _ = fg.TMA_SHAPES[0]
    layout = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    TYPES["S_desc"] = TensorDescriptor.from_tensor(torch.zeros(4096, 128), [bp, chunk], layout).__mangle__()
    out["tma"] = build(fg.fold_gluon_tma_kernel, dict(BLOCK_P=bp, CHUNK=chunk, STAGES=stages, LAG=lag, WARPS_M=wm,
                                                      WARPS_N=wn), wm * wn)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def compiled():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    run = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT / "benchmarks"), str(PTXAS)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _spills(entry: dict) -> int:
    assert entry["rc"] == 0, entry["ptxas"][-2000:]
    return int(re.search(r"(\d+) bytes spill stores", entry["ptxas"]).group(1))


def test_accumulator_layout_fold_is_mma_without_spills(compiled):
    ptx = compiled["mma"]["ptx"]
    # [32, 128] over 2 x 2 warps: a warp's 16 x 64 block is 8 n-tiles x 2 k-steps, two TF32 passes
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32", ptx)) == 8 * 2 * 2
    assert _spills(compiled["mma"]) == 0


def test_tma_fold_streams_through_shared_memory_without_spills(compiled):
    if "tma" not in compiled:
        pytest.skip("this Triton's Gluon has no Hopper TMA descriptors")
    entry = compiled["tma"]
    ptx = entry["ptx"]
    # four 32-column chunks per tile, each a TMA load and a TMA store, waited on by mbarriers;
    # the fold on the tensor cores (per chunk: [32, 32] over 2 x 2 warps = 2 n-tiles x 2 k-steps,
    # two TF32 passes)
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global\.mbarrier", ptx)
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx)
    # a buffer is refilled once the store from it has read it, not once it has landed
    assert "cp.async.bulk.wait_group.read" in ptx and "mbarrier.try_wait" in ptx
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32", ptx)) == 4 * 2 * 2 * 2
    assert _spills(entry) == 0


@pytest.mark.parametrize("shape", ["32x4x4x4x2x2x4", "32x4x4x4x2x2x16"])
def test_register_blocked_fold_is_fp32_fma_without_spills(compiled, shape):
    bp, spt_p, spt_n, tpw_p, wp, wn, unroll = map(int, shape.split("x"))
    entry = compiled[f"fma {shape}"]
    ptx = entry["ptx"]
    per_thread = bp * 128 // (32 * wp * wn)
    # the unrolled body: one fp32 FMA per element a thread holds, per entry; no TF32 anywhere
    assert len(re.findall(r"\bfma\.rn\.f32\b", ptx)) >= unroll * per_thread
    assert "mma.sync" not in ptx and ".tf32" not in ptx
    # x_j (SPT_P consecutive fp32) arrives as one vector load per thread and entry
    assert re.search(r"ld\.global(\.\w+)*\.v4\.(b32|f32)", ptx)
    assert _spills(entry) == 0
