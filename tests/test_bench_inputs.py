"""``bench_mamba2_decode.py``'s input distributions (``--inputs``) and ``dt`` dtype (``--dt-dtype``):
the values each kind draws, and the options' checks."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_mamba2_decode as bench  # noqa: E402

DIMS = (16, 8, 32, 2)  # heads, head_dim, d_state, groups


def _draw(kind, dt_dtype=None, dtype=torch.float16):
    return bench._inputs(64, *DIMS, dtype, device="cpu", kind=kind, dt_dtype=dt_dtype)


def test_dt_takes_the_activation_dtype_unless_given():
    x, dt, *_ = _draw("unit")
    assert x.dtype == dt.dtype == torch.float16
    assert _draw("unit", dt_dtype=torch.float32)[1].dtype == torch.float32
    # the same draw either way: only dt's rounding differs
    assert torch.equal(_draw("unit")[1], _draw("unit", torch.float32)[1].to(torch.float16))


def test_each_kind_draws_its_documented_ranges():
    _, _, A, _, _, D, _, _ = _draw("unit")
    assert -1.5 <= A.min() and A.max() <= -0.5
    _, _, A, _, _, _, _, _ = _draw("slow_decay")
    assert -1.0 <= A.min() and A.max() <= 0.0
    _, dt, A, _, _, D, _, dt_bias = _draw("model", dt_dtype=torch.float32)
    assert -16.0 <= A.min() and A.max() <= -1.0 and torch.equal(D, torch.ones_like(D))
    # dt_bias is softplus^-1 of Mamba-2's dt initialisation: softplus(dt_bias) in [1e-3, 1e-1]
    init = torch.nn.functional.softplus(dt_bias.double())
    assert 1e-3 * (1 - 1e-6) <= init.min() and init.max() <= 1e-1 * (1 + 1e-6)
    assert float(dt.std()) < 0.75  # N(0, 0.25): half the unit kind's spread
    assert math.isclose(float(torch.log(init).mean()), (math.log(1e-3) + math.log(1e-1)) / 2, abs_tol=0.8)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="^inputs: expected one of"):
        _draw("uniform")


@pytest.mark.parametrize("argv", [["--variants", "--inputs", "model"], ["--sweep", "--dt-dtype", "float32"]])
def test_inputs_options_are_the_plain_runs_only(argv, usage_error):
    assert "--inputs / --dt-dtype: the plain run only" in usage_error(lambda: bench.main(argv))
