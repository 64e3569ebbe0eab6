"""The one-launch Gated DeltaNet step with its flush rows in CUDA C++ (ops/gdn/flush_cuda.cu,
``FusedVariant(flush_impl="cuda")``).

CPU: the launcher's defines, shared memory and fallbacks (the fused kernel's split under the
Triton interpreter, its flush rows in ``flush_rows_torch``, is among test_gdn_fused_kernels.py's
cases); where NVRTC is installed, the kernel compiled for sm_90 /
sm_100 / sm_103 and assembled without spills. GPU (``-m gpu``): the NVRTC-built kernel through the
public op against float64 over dims, dtypes and batches, against the Triton fold, and in a CUDA
graph."""

from __future__ import annotations

import pytest
import torch

from delta_kernel_harness import GPU_DIMS, check_variant_gpu, checkpoints_after_three_windows, rel_err
from ptx_resources import HAVE_PTXAS, assemble
from trtllm_replayssm.ops import _nvrtc
from trtllm_replayssm.ops._flush_list import LIST_MAX_BATCH
from trtllm_replayssm.ops.gdn import decode_flush_cuda as fc
from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant

DEFAULT_CUDA = FusedVariant(block_v=64, stages=3, flush_stages=0, flush_impl="cuda")
NEEDS_NVRTC = pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC library (nvidia-cuda-nvrtc wheel)")


def test_warp_rows_and_shared_bytes():
    assert fc.warp_rows(128, 128) == 4 and fc.warp_rows(64, 256) == 8 and fc.warp_rows(32, 64) == 16
    assert fc.warp_rows(128, 96, passes=8) == 8 and fc.warp_rows(256, 128) is None and fc.warp_rows(48, 64) is None
    # ks [17][128] + qs + dk, dq (20 words each) + gs, wl [2 x 16] + hs [2 x 4] + 8 warps x uw/sd (76 words),
    # then 16 bytes per batch row.
    assert fc.shared_bytes(256, 128, 16, 4, 2) == 4 * (17 * 128 + 128 + 40 + 64 + 8 + 8 * 76) + 16 * 256


def test_defines_name_the_bad_argument():
    dts = dict(qk=torch.bfloat16, v=torch.bfloat16, ring_k=torch.bfloat16, ring_v=torch.bfloat16,
               gate=torch.bfloat16, A_log=torch.float32, dt_bias=torch.float32)
    d = fc.defines(32, 16, 128, 128, 16, dts, True, torch.int64, (128, 128, 128))
    assert (d["G"], d["HPI"], d["PASSES"], d["QK_KIND"], d["ALOG_KIND"], d["IDX_64"]) == (2, 2, 4, 1, 0, 1)
    with pytest.raises(ValueError, match="^d_k 256: the CUDA flush takes d_k 32, 64 or 128"):
        fc.defines(32, 16, 256, 128, 16, dts, True, None, (256, 256, 128))
    with pytest.raises(ValueError, match="^heads_per_item: expected a divisor of the key head's 2 value heads, got 3"):
        fc.defines(32, 16, 128, 128, 16, dts, True, None, (128, 128, 128), heads_per_item=3)
    with pytest.raises(ValueError, match="^gate: expected one of"):
        fc.defines(32, 16, 128, 128, 16, {**dts, "gate": torch.int8}, True, None, (128, 128, 128))


def test_unsupported_names_the_reason():
    ck = torch.zeros(2, 4, 16, 128)
    bf = dict(q=torch.zeros(2, 2, 128, dtype=torch.bfloat16), k=torch.zeros(2, 2, 128, dtype=torch.bfloat16))
    assert "fp32 checkpoints" in fc.unsupported(ck.half(), 2)
    assert fc.unsupported(torch.zeros(2, 4, 16, 256), 2).startswith("d_k 256")
    assert fc.unsupported(ck, LIST_MAX_BATCH + 1) == f"batch {LIST_MAX_BATCH + 1} > {LIST_MAX_BATCH}"
    assert fc.unsupported(ck, 2, {**bf, "k": bf["k"].half()}).startswith("q is torch.bfloat16 and k torch.float16")
    assert fc.unsupported(ck, 2, {"v": torch.zeros(2, 128, 4).transpose(1, 2)}) == (
        "v's last dimension is not contiguous")
    assert fc.unsupported(ck, 2, {"ring_k": torch.zeros(2, 2, 16, 130)[..., 1:129]}) == (
        "ring_k's rows do not start on 16-byte boundaries")
    assert fc.unsupported(ck, 2, {"ring_g": torch.zeros(2, 4, 16, dtype=torch.int32)}) == "ring_g is torch.int32"
    assert fc.unsupported(ck, 2, bf) == "the checkpoint is not on a CUDA device"


@pytest.mark.parametrize("fields,error", [
    (dict(flush_impl="nvrtc"), "^FusedVariant.flush_impl: expected one of"),
    (dict(flush_cuda_blocks=0), r"^FusedVariant.flush_cuda_blocks: expected an int in \[1, 8\], got 0"),
    (dict(flush_cuda_prefetch="yes"), "^FusedVariant.flush_cuda_prefetch: expected a bool, got 'yes'"),
])
def test_variant_rejects_bad_cuda_fields(fields, error):
    with pytest.raises(ValueError, match=error):
        FusedVariant(**fields)


def _defines(dtype, dims):
    HV, H, d_k, d_v = dims
    dts = dict(qk=dtype, v=dtype, ring_k=dtype, ring_v=dtype, gate=dtype, A_log=torch.float32, dt_bias=torch.float32)
    return fc.defines(HV, H, d_k, d_v, 16, dts, True, torch.int32, (d_k, d_k, d_v))


@NEEDS_NVRTC
@pytest.mark.parametrize("sm", [90, 100, 103])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_kernel_compiles_for_hopper_and_blackwell(sm, dtype):
    for dims in [(32, 16, 128, 128), (8, 2, 64, 256), (4, 4, 32, 64)]:
        items = tuple(sorted((k, str(v)) for k, v in _defines(dtype, dims).items()))
        cubin = _nvrtc.compile_cubin(fc.source(), "gdn_flush_rows", sm, items)
        assert cubin[:4] == b"\x7fELF" and b"gdn_flush_rows" in cubin


@NEEDS_NVRTC
@pytest.mark.skipif(not HAVE_PTXAS, reason="Triton's ptxas is not installed")
@pytest.mark.parametrize("sm", [90, 100, 103])
def test_defaults_assemble_within_their_registers(sm, tmp_path):
    # Qwen3.5-4B dims and two other shapes, bf16, at FusedVariant's defaults: within the registers
    # of flush_cuda_blocks blocks per SM, and ptxas's spills at most a few words (the PTX's version
    # lowered to what Triton's ptxas reads). On sm_90 the 8-row warp items at 80 registers spill
    # 20 bytes at d_k 128, 12 at d_k 64; they still ran fastest (NOTES_delta, twenty-sixth run).
    variant = FusedVariant(flush_impl="cuda")
    for dims in [(32, 16, 128, 128), (8, 2, 64, 256), (4, 4, 32, 64)]:
        HV, H, d_k, d_v = dims
        dts = dict(qk=torch.bfloat16, v=torch.bfloat16, ring_k=torch.bfloat16, ring_v=torch.bfloat16,
                   gate=torch.bfloat16, A_log=torch.float32, dt_bias=torch.float32)
        defs = fc.defines(HV, H, d_k, d_v, 16, dts, True, torch.int32, (d_k, d_k, d_v), variant.flush_cuda_blocks,
                          variant.flush_cuda_passes)
        ptx = _nvrtc.compile_ptx(fc.source(), "flush_cuda.cu", sm, tuple((k, str(v)) for k, v in defs.items()))
        regs, spills, log = assemble(ptx, sm, tmp_path / f"gdn_flush_{sm}_{d_k}.ptx")
        assert regs * fc.THREADS * defs["MIN_BLOCKS"] <= 65536 and spills <= 32, (sm, dims, log)


# -- GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("dims", [GPU_DIMS[0], (8, 2, 64, 256), (8, 8, 128, 64), (16, 4, 64, 128)],
                         ids=lambda d: "x".join(map(str, d)))
def test_cuda_flush_gpu(dims, dtype, batch, monkeypatch):
    """Model and other dims through the public op against float64: 52 steps at L=16, a padded
    row, the fp32 checkpoint within 1e-5 (fp32 activations)."""
    check_variant_gpu(False, dims, dtype, batch, DEFAULT_CUDA, monkeypatch, refold=False)


@pytest.mark.gpu
def test_cuda_flush_falls_back_at_d_k_256_gpu(monkeypatch):
    """d_k 256 keeps the Triton fold (``unsupported``) and stays right."""
    check_variant_gpu(False, GPU_DIMS[2], "bf16", 3, DEFAULT_CUDA, monkeypatch, refold=False)


@pytest.mark.gpu
def test_cuda_flush_agrees_with_triton_fold_gpu():
    """Batch 64, bf16, every row flushing at the same steps over 3 windows: the CUDA fold (exact
    fp32 FMAs) and the Triton fold (three bf16 passes) give the same checkpoints at fp32 level."""
    ck = checkpoints_after_three_windows(False, [FusedVariant(block_v=64, stages=3, flush_stages=0), DEFAULT_CUDA])
    assert rel_err(ck[1], ck[0]) < 1e-5, rel_err(ck[1], ck[0])


@pytest.mark.gpu
@pytest.mark.parametrize("fields", [dict(flush_cuda_prefetch=True, flush_cuda_blocks=3),
                                    dict(flush_cuda_heads=1, flush_cuda_passes=8, flush_cuda_blocks=2),
                                    dict(flush_cuda_passes=1)], ids=["prefetch", "heads1-passes8", "passes1"])
@pytest.mark.parametrize("dims", [GPU_DIMS[0], (8, 2, 64, 256)], ids=lambda d: "x".join(map(str, d)))
def test_cuda_flush_options_gpu(dims, fields, monkeypatch):
    """The launch's options (a warp's next item loaded ahead, one head per block item, 8 or 1 row
    instructions per warp item) fold the same windows."""
    import dataclasses

    check_variant_gpu(False, dims, "bf16", 64, dataclasses.replace(DEFAULT_CUDA, **fields), monkeypatch,
                      refold=False)
