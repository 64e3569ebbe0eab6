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
])
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2
    assert message in capsys.readouterr().err
