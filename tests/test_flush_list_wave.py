"""The list flush launches keep their wave resident: ``programs_per_sm`` (what fits an SM) and
``list_grid``'s cap from the kernels compiled so far (``note_resident``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trtllm_replayssm.config import ReplaySSMConfig
from trtllm_replayssm.ops import _flush_list
from trtllm_replayssm.ops._flush_list import launch_key, list_grid, programs_per_sm
from trtllm_replayssm.ops.gdn import decode

from delta_kernel_harness import Layer


@pytest.mark.parametrize("n_regs,warps,shared,fit", [
    (128, 1, 0, 16),     # the refolding delta-rule flush: 16 one-warp programs per SM
    (168, 1, 0, 12),     # the same uncapped with its ring entries prefetched
    (96, 4, 0, 5),       # the Mamba-2 flush: 4 warps at the 96-register cap
    (250, 2, 0, 4),      # KDA's dot-fold flush, two-warp programs
    (32, 1, 0, 32),      # capped by the 32 resident blocks per SM, not registers or threads
    (32, 8, 0, 8),       # capped by 2048 threads
    (64, 4, 100 * 1024, 2),   # capped by shared memory (plus 1 KiB reserved per block)
    (255, 1, 0, 8),
])
def test_programs_per_sm(n_regs, warps, shared, fit):
    assert programs_per_sm(n_regs, warps, shared) == fit


def test_list_grid_without_a_record():
    """No compiled kernel noted for a key: ``per_sm`` per SM (2 SMs off the GPU), at most one per item."""
    dev = torch.device("cpu")
    assert list_grid(1000, 16, dev) == 32
    assert list_grid(1000, 16, dev, key=("never", "noted")) == 32
    assert list_grid(5, 16, dev) == 5
    assert list_grid(0, 16, dev) == 1


def test_launch_key_layout():
    """The key's fields in order (the GPU test below finds its launch by kind and register cap)."""
    key = launch_key("delta", (torch.bfloat16, torch.bfloat16, torch.float32), 1, 128, {"TILES": 2, "BV": 16})
    assert key == ("delta", torch.bfloat16, torch.bfloat16, torch.float32, 1, 128, ("BV", 16), ("TILES", 2))
    assert key != launch_key("delta", (torch.bfloat16, torch.bfloat16, torch.float32), 1, None, {"TILES": 2, "BV": 16})


@pytest.mark.gpu
def test_list_wave_capped_by_compiled_registers(monkeypatch):
    """KDA's refolding flush with prefetched ring entries and no register cap compiles to more than
    128 registers: after its first launch, list launches of that kernel keep to the programs that
    fit an SM (fewer than the 16 asked for); the capped default keeps its 16."""
    monkeypatch.setattr(_flush_list, "_RESIDENT", {})  # launches by earlier tests in this process
    layer = Layer(True, 32, 32, 128, 128, dtype=torch.bfloat16, seed=2)
    base = decode.default_variant(256, True, True, 128)
    assert base.flush_persistent == 16 and base.flush_max_registers == 128
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for variant, capped in ((dataclasses.replace(base, flush_max_registers=None), True), (base, False)):
        before = dict(_flush_list._RESIDENT)
        st = layer.state(64, ReplaySSMConfig(window=16))
        st.committed.fill_(st.window - 1)  # every row flushes in this step
        idx = torch.arange(64, dtype=torch.int32, device="cuda")
        decode.delta_replay_step(
            st.checkpoint, st.ring_k, st.ring_v, st.ring_beta, st.ring_g, st.ring_u, st.committed, st.flush_at,
            st.window, **layer.tokens(64), **layer.params("cuda"), state_indices=idx, pad_slot_id=-1, scale=None,
            refold=True, variant=variant)
        torch.cuda.synchronize()
        new = {k: v for k, v in _flush_list._RESIDENT.items() if k not in before}
        key = next(k for k in new if k[0] == "delta" and k[5] == variant.flush_max_registers)
        assert (new[key] < 16) == capped
        assert list_grid(10 ** 6, 16, torch.device("cuda"), key) == sms * min(16, new[key])
