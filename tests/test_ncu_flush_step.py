"""``benchmarks/ncu_flush_step.py``: its arguments are checked before any step is built (the
steps themselves need a GPU and run under Nsight Compute on the device machine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2
    assert message in capsys.readouterr().err


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
