"""``benchmarks/ncu_flush_step.py``: its arguments are checked before any step is built (the
steps themselves need a GPU and run under Nsight Compute on the device machine); its cursor
fills, and ``probe_flush_step_parts.py``'s stand-in for the ring launch's flags, which share them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from ncu_flush_step import main  # noqa: E402


@pytest.mark.parametrize("argv,message", [
    (["--kind", "mamba2", "--fused", ""], "--fused / --paper-root: Gated DeltaNet only (--kind gdn), got --kind mamba2"),
    (["--kind", "kda", "--paper-root", "somewhere"], "--fused / --paper-root: Gated DeltaNet only"),
    (["--kind", "gdn", "--batch", "0"], "--batch: expected >= 1, got 0"),
    (["--kind", "kda", "--standard"], "--standard: Mamba-2 only (--kind mamba2), got --kind kda"),
    (["--kind", "mamba2", "--staged", ""], "--staged: the delta rules only"),
    (["--kind", "mamba2", "--committed", "15"], "--committed: expected 0 <= C < 15 (a non-flush step), got 15"),
    (["--kind", "kda", "--committed", "15"], "--committed: expected 0 <= C < 15 (a non-flush step), got 15"),
    (["--kind", "gdn", "--staged", "", "--fused", ""], "--staged: not with --fused"),
    (["--kind", "gdn", "--launch", "flush_impl=cuda_ws"], "--launch: the Mamba-2 replay step only"),
    (["--standard", "--launch", "flush_impl=cuda_ws"], "--launch: the Mamba-2 replay step only"),
])
def test_bad_arguments_are_named(argv, message, usage_error):
    assert message in usage_error(lambda: main(argv))


def test_staged_fields_replace_the_default():
    """``--staged`` builds the ops' default StagedVariant at the batch with fields replaced, and
    refuses a batch whose default is another launch kind."""
    import dataclasses

    from ncu_flush_step import staged_variant
    from trtllm_replayssm.ops.gdn import decode

    got = staged_variant("kda", 256, False, "ring_fast_exp=true, ring_max_registers=96")
    assert got == dataclasses.replace(decode.default_variant(256, True, False, 128), ring_fast_exp=True,
                                      ring_max_registers=96)
    with pytest.raises(SystemExit, match="not a StagedVariant"):
        staged_variant("gdn", 256, False, "")  # GDN's batch-256 default is the one-launch step


def test_launch_fields_are_checked_before_a_step_is_built():
    with pytest.raises(SystemExit, match="'flush_ws=4' is not field=value of LaunchConfig"):
        main(["--launch", "flush_ws=4"])


def test_cursor_fills_put_every_slot_at_one_length():
    from ncu_flush_step import WINDOW, cursor_fills

    committed = torch.tensor([0, 3, 9], dtype=torch.int32)
    flush_at = torch.tensor([16, 4, 12], dtype=torch.int32)
    fill = cursor_fills(committed, flush_at)
    committed += 1  # the step moves them; every fill puts them back
    fill()
    assert committed.tolist() == [WINDOW - 1] * 3 and flush_at.tolist() == [WINDOW] * 3
    cursor_fills(committed, flush_at, 7)()
    assert committed.tolist() == [7] * 3


def test_probe_flags_kernel_skips_padded_rows():
    # probe_flush_step_parts' stand-in for the ring launch's info: c and the flush flag by row, a
    # padded row (slot -1) 0 and 0 without reading a cursor.
    from probe_flush_step_parts import _flags_kernel

    committed = torch.tensor([15, 3, 7], dtype=torch.int32)
    flush_at = torch.tensor([16, 4, 16], dtype=torch.int32)
    idx = torch.tensor([2, -1, 0, 1], dtype=torch.int32)
    info = torch.full((4, 2), 99, dtype=torch.int32)
    _flags_kernel[(1,)](committed, flush_at, idx, info, 4, -1, BLOCK=8)
    assert info.tolist() == [[7, 0], [0, 0], [15, 1], [3, 1]]


@pytest.mark.parametrize("argv, message", [
    (["--committed", "15"], "--committed: expected a ring length from 0 to 14"),
    (["--committed", "-1"], "--committed: expected a ring length from 0 to 14"),
    (["--committed", "3", "--stages", "3"], "--committed: the non-flush parts only"),
])
def test_probe_parts_rejects_committed(argv, message, usage_error):
    # Checked before any GPU is asked for: a ring length the non-flush step cannot have (15 would
    # flush every row), or all-flush parts beside it.
    from probe_flush_step_parts import main

    assert message in usage_error(lambda: main(argv))


def _recorded_ring_launch(monkeypatch, seed, config, ring_dt_uniform=False):
    """One staged step on the CPU (3 slots, 4 heads x 32 x 16, 2 groups, fp32, every slot at ring
    length 5) with its ring launch recorded by probe_flush_step_parts' ``Recorder``; returns
    ``(state, recorder, x)``, the cursors as the step left them."""
    from mamba2_kernel_harness import allocate, make_inputs, make_params
    from probe_flush_step_parts import Recorder
    from trtllm_replayssm.ops.mamba2 import decode, decode_staged

    gen = torch.Generator().manual_seed(seed)
    st, _ = allocate(3, 4, 32, 16, 2, 16, torch.float32, "cpu", gen)
    A, D, dt_bias = make_params(4, "cpu", gen)
    x, dt, B, C, z = make_inputs(3, 4, 32, 16, 2, torch.float32, "cpu", gen)
    if ring_dt_uniform:
        st.ring_dt.uniform_(0, 0.1, generator=gen)
    st.committed.fill_(5)
    ring = Recorder(decode_staged._ring_kernel, True)
    monkeypatch.setattr(decode_staged, "_ring_kernel", ring)
    decode.replay_step(st.checkpoint, st.ring_x, st.ring_dt, st.ring_B, st.committed, st.flush_at, st.window,
                       x, dt, A, B, C, D, z, dt_bias, True, None, None, None, -1, config=config)
    return st, ring, x


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test of the replays; the probe itself runs on CUDA")
def test_probe_ring_dt_forms_store_the_token_dt(monkeypatch):
    # probe_flush_step_parts' replays of a recorded ring launch: as a whole sector (S) and into an
    # entries-outermost copy of the ring's dt (E), each storing the same token dt at entry c.
    from probe_flush_step_parts import ring_dt_forms
    from trtllm_replayssm.ops.mamba2 import decode

    st, ring, _ = _recorded_ring_launch(monkeypatch, 0, decode.LaunchConfig(kernel="staged", block_p=16, num_warps=2),
                                        ring_dt_uniform=True)
    written = st.ring_dt.clone()
    forms = ring_dt_forms(ring)
    entry_major = forms["E"].ring_dt
    assert entry_major.stride(2) == 4 and torch.equal(entry_major, written)
    entry_major[:, :, 5:] = 7.0
    st.committed.fill_(5)  # the step moved the cursors; the ring launch reads them
    forms["E"]()
    assert torch.equal(entry_major[:, :, :6], written[:, :, :6]) and torch.all(entry_major[:, :, 6:] == 7.0)
    st.ring_dt[:, :, 5:] = 7.0
    forms["S"]()
    assert torch.equal(st.ring_dt[:, :, :6], written[:, :, :6])
    assert torch.all(st.ring_dt[:, :, 6:8] == 0) and torch.all(st.ring_dt[:, :, 8:] == 7.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test of the replays; the probe itself runs on CUDA")
def test_probe_ring_store_forms_leave_out_their_stores(monkeypatch):
    # probe_flush_step_parts' replays of a recorded ring launch that stores the token's x entry
    # (ring_x_in_ring): D writes the lines into a spare buffer and leaves the recorded ones as they
    # are; X writes the lines but no x entry.
    from probe_flush_step_parts import ring_store_forms
    from trtllm_replayssm.ops.mamba2 import decode

    st, ring, x = _recorded_ring_launch(monkeypatch, 1, decode.LaunchConfig(
        kernel="staged", block_p=16, num_warps=2, fold="tf32x3", flush_launch=True, ring_x_in_ring=True))
    lines = ring.arg("coef_ptr")
    recorded, entry = lines.clone(), st.ring_x[:, :, 5].clone()
    assert torch.equal(entry, x) and torch.isfinite(recorded).all()
    forms = ring_store_forms(ring)
    lines.fill_(-1.0)
    st.committed.fill_(5)  # the step moved the cursors; the ring launch reads them
    forms["D"]()
    assert torch.all(lines == -1.0) and torch.equal(forms["D"].lines, recorded)
    st.ring_x[:, :, 5] = 7.0
    forms["X"]()
    assert torch.equal(lines, recorded) and torch.all(st.ring_x[:, :, 5] == 7.0)
