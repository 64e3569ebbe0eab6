"""``--repeats`` of the decode benchmarks: the spread of repeated records (``_spread.py``), each
benchmark's grouping, and the option's check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_gdn_decode  # noqa: E402
import bench_mamba2_decode  # noqa: E402
from _spread import spread, spread_lines  # noqa: E402


def _mamba2_record(batch, std, amort):
    rec = {k: 1.0 for k in bench_mamba2_decode.SPREAD_KEYS}
    rec.update(dims="nemotron_h", batch=batch, standard_us=std, amortized_us=amort, speedup_amortized=std / amort)
    return rec


def test_spread_groups_in_first_seen_order_and_skips_missing_values():
    recs = [_mamba2_record(256, 538.0, 300.0), _mamba2_record(256, 533.0, 301.5), _mamba2_record(256, 536.0, 299.0),
            _mamba2_record(128, 272.0, 158.0)]
    keys = bench_mamba2_decode.SPREAD_KEYS
    out = spread(recs, ("dims", "batch"), keys)
    assert [(e["batch"], e["repeats"]) for e in out] == [(256, 3), (128, 1)]
    e = out[0]
    assert e["standard_us"] == {"min": 533.0, "median": 536.0, "max": 538.0}
    ratios = sorted(s / a for s, a in ((538.0, 300.0), (533.0, 301.5), (536.0, 299.0)))
    assert e["speedup_amortized"] == {"min": ratios[0], "median": ratios[1], "max": ratios[2]}
    text = spread_lines(out, ("dims", "batch"), keys)
    assert "nemotron_h 256 x3 |" in text and f"speedup_amortized {ratios[1]:.3f}" in text
    # a value no record of a group has (fla skipped) is left out of that group
    none = spread([{"batch": 1, "x_fla": None, "us": 2.0}], ("batch",), ("us", "x_fla"))
    assert none == [{"batch": 1, "repeats": 1, "us": {"min": 2.0, "median": 2.0, "max": 2.0}}]


def test_gdn_rows_take_their_own_calls_baselines():
    """Each call's rows are divided by that call's fla and standard steps, not another repeat's."""
    def call(fla, std, replay):
        return [{"batch": 256, "mode": "fla", "us": fla}, {"batch": 256, "mode": "standard", "us": std},
                {"batch": 256, "mode": "replay amortized", "us": replay}]

    rows = bench_gdn_decode.with_ratios(call(290.8, 270.0, 182.3), 0)
    rows += bench_gdn_decode.with_ratios(call(262.6, 268.9, 180.6), 1)
    replay = [r for r in rows if r["mode"] == "replay amortized"]
    assert [r["repeat"] for r in replay] == [0, 1]
    assert replay[0]["x_fla"] == pytest.approx(290.8 / 182.3) and replay[1]["x_fla"] == pytest.approx(262.6 / 180.6)
    (entry,) = [e for e in spread(rows, ("batch", "mode"), bench_gdn_decode.SPREAD_KEYS)
                if e["mode"] == "replay amortized"]
    assert entry["x_fla"]["min"] == pytest.approx(262.6 / 180.6) and entry["repeats"] == 2
    without_fla = bench_gdn_decode.with_ratios(call(1.0, 270.0, 182.3)[1:])
    assert all(r["x_fla"] is None for r in without_fla)


@pytest.mark.parametrize("main", [bench_mamba2_decode.main, lambda argv: bench_gdn_decode.main("gdn", argv)],
                         ids=["mamba2", "gdn"])
def test_repeats_below_one_is_refused_before_anything_runs(main, usage_error):
    assert "--repeats: expected >= 1, got 0" in usage_error(lambda: main(["--repeats", "0"]))
