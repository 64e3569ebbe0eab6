"""``bench_mamba2_decode.py --repeats``: the spread of repeated records, and the option's check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_mamba2_decode as bench  # noqa: E402


def _record(dims, batch, std, amort, repeat):
    rec = {k: float(repeat) for k in bench.SPREAD_KEYS}
    rec.update(dims=dims, batch=batch, standard_us=std, amortized_us=amort, speedup_amortized=std / amort,
               repeat=repeat)
    return rec


def test_spread_groups_by_dims_and_batch():
    recs = [_record("nemotron_h", 256, 538.0, 300.0, 0), _record("nemotron_h", 256, 533.0, 301.5, 1),
            _record("nemotron_h", 256, 536.0, 299.0, 2), _record("nemotron_h", 128, 272.0, 158.0, 0)]
    out = {(e["dims"], e["batch"]): e for e in bench.spread(recs)}
    e = out["nemotron_h", 256]
    assert e["repeats"] == 3
    assert e["standard_us"] == {"min": 533.0, "median": 536.0, "max": 538.0}
    ratios = sorted(s / a for s, a in ((538.0, 300.0), (533.0, 301.5), (536.0, 299.0)))
    assert e["speedup_amortized"] == {"min": ratios[0], "median": ratios[1], "max": ratios[2]}
    assert out["nemotron_h", 128]["repeats"] == 1
    text = bench.spread_table(bench.spread(recs))
    assert "nemotron_h        256 x3" in text and f"speedup_amortized {ratios[1]:.3f}" in text


def test_repeats_below_one_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--repeats", "0"])
    assert "--repeats: expected >= 1, got 0" in capsys.readouterr().err
