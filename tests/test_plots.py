"""The benchmark plot script on a synthetic result file (no GPU needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _plot_script(name: str):
    """``benchmarks/<name>.py`` loaded as a module (the benchmarks folder is no package)."""
    spec = importlib.util.spec_from_file_location(name, _BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(dims, batch, speedup):
    return {"dims": dims, "batch": batch, "speedup_amortized": speedup, "speedup_mixed": speedup - 0.02,
            "standard_pct_copy": 100.0, "nonflush_pct_copy": 90.0, "flush_pct_copy": 50.0}


def test_plot_writes_a_png(tmp_path):
    data = {"device": {"gpu": "test GPU"}, "activation": "bfloat16", "window": 16,
            "results": [_record(d, b, 1.0 + b / 1000) for d in ("nemotron_h", "nemotron3_nano") for b in (1, 128, 512)]}
    src = tmp_path / "run.json"
    src.write_text(json.dumps(data))
    mod = _plot_script("plot_mamba2")
    mod.main([str(src), "--out", str(tmp_path / "plots" / "run.png")])
    png = (tmp_path / "plots" / "run.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_plot_scripts_name_unreadable_inputs(tmp_path, usage_error):
    # A missing file, a file that is not JSON, and another benchmark's JSON (rows without the
    # fields the plot reads) are usage errors naming the input, not tracebacks.
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "other.json").write_text(json.dumps({"rows": [{"batch": 1, "mode": "fla"}]}))  # no "us"
    for name in ("plot_mamba2", "plot_delta", "plot_paper"):
        out = ["--out", str(tmp_path / "x.png")]
        mod = _plot_script(name)
        assert "json: no such file" in usage_error(lambda: mod.main([str(tmp_path / "missing.json"), *out]))
        assert "json: not JSON" in usage_error(lambda: mod.main([str(tmp_path / "text.json"), *out]))
    paper = _plot_script("plot_paper")
    assert "json: a row lacks the field" in usage_error(
        lambda: paper.main([str(tmp_path / "other.json"), "--out", str(tmp_path / "x.png")]))
    assert not (tmp_path / "x.png").exists()


def test_plot_rejects_a_file_without_results(tmp_path, usage_error):
    src = tmp_path / "variants.json"
    src.write_text(json.dumps({"variants": []}))
    assert "json: expected the output of bench_mamba2_decode.py --json" in usage_error(
        lambda: _plot_script("plot_mamba2").main([str(src)]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["variants.json"]


def _variants_file(path, batches, fla_us):
    rows = []
    for b in batches:
        rows.append({"batch": b, "mode": "fla", "amortized_us": fla_us * b})
        rows.append({"batch": b, "mode": "standard", "amortized_us": 2.0 * b})
        for mode, us in (("rowwise", 1.0), ("staged + ring_warps=1", 0.5)):
            rows.append({"batch": b, "mode": mode, "nonflush_us": us * b, "amortized_us": us * b,
                         "staggered_us": 2 * us * b, "nonflush_pct_copy": 50.0 / us})
    path.write_text(json.dumps({"kind": "gdn", "dtype": "bf16", "window": 16, "device": {"gpu": "test GPU"},
                                "rows": rows}))
    return path


def test_delta_plot_merges_files_with_their_own_baselines(tmp_path):
    mod = _plot_script("plot_delta")
    a = _variants_file(tmp_path / "a.json", (32, 64), fla_us=1.0)
    b = _variants_file(tmp_path / "b.json", (128,), fla_us=3.0)
    _, rows = mod.load_rows([a, b])
    x = {(r["batch"], r["mode"]): r["x_fla"] for r in rows}
    # each ratio from its own file's fla time: 1.0 / 0.5 in a, 3.0 / 0.5 in b
    assert x[64, "staged + ring_warps=1"] == pytest.approx(2.0) and x[128, "staged + ring_warps=1"] == pytest.approx(6.0)
    assert {r["mode"] for r in rows} == {"rowwise", "staged + ring_warps=1"}
    mod.main([str(a), str(b), "--out", str(tmp_path / "d.png"), "--name", "ring_warps=1", "one warp"])
    png = (tmp_path / "d.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert mod.label_of("staged + ring_warps=1", [("ring_warps", "one warp")]) == "one warp"
    assert mod.label_of("rowwise", [("ring_warps", "one warp")]) is None


def test_delta_plot_rejects_other_files_and_missing_baselines(tmp_path, usage_error):
    mod = _plot_script("plot_delta")
    src = tmp_path / "mamba2.json"
    src.write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match="'rows' list"):
        mod.load_rows([src])
    data = json.loads(_variants_file(tmp_path / "a.json", (32,), fla_us=1.0).read_text())
    data["rows"] = [r for r in data["rows"] if r["mode"] != "fla"]
    (tmp_path / "nofla.json").write_text(json.dumps(data))
    assert "--baseline fla" in usage_error(lambda: mod.main([str(tmp_path / "nofla.json"), "--out", str(tmp_path / "x.png")]))
    # --name matching no kernel is named as such, not blamed on the baseline
    assert "--name: no row's kernel name contains 'zzz'" in usage_error(
        lambda: mod.main([str(tmp_path / "a.json"), "--out", str(tmp_path / "x.png"), "--name", "zzz", "none"]))
    assert not (tmp_path / "x.png").exists()


def test_delta_plot_reads_plain_runs(tmp_path):
    """A plain run's per-step rows become one row per (batch, kernel): amortized and non-flush from
    their rows, the staggered line from the steady-state row where there is one."""
    mod = _plot_script("plot_delta")
    rows = [{"batch": 256, "mode": "fla", "us": 260.0}, {"batch": 256, "mode": "standard", "us": 265.0}]
    for kernel, scale in (("replay", 1.0), ("replay refold", 1.2)):
        for step, us, pct in (("non-flush", 160.0, 89.0), ("flush", 410.0, 68.0), ("amortized", 175.0, 86.0),
                              ("staggered", 180.0, 83.0), ("steady", 178.0, 84.0)):
            if not (kernel == "replay refold" and step == "steady"):
                rows.append({"batch": 256, "mode": f"{kernel} {step}", "us": us * scale, "pct_copy": pct})
    rows.append({"batch": 1, "mode": "replay non-flush", "us": 6.7, "pct_copy": 15.0})  # no amortized row: dropped
    for step in ("non-flush", "flush", "amortized"):  # a --sweep row (forced BV): not a kernel line
        rows.append({"batch": 256, "mode": f"replay BV=16 {step}", "us": 300.0, "pct_copy": 50.0})
    src = tmp_path / "gdn.json"
    src.write_text(json.dumps({"kind": "gdn", "dtype": "bf16", "window": 16, "device": {"gpu": "test GPU"},
                               "rows": rows}))
    _, timed = mod.load_rows([src])
    by_mode = {r["mode"]: r for r in timed}
    assert set(by_mode) == {"replay", "replay refold"}
    assert by_mode["replay"]["x_fla"] == pytest.approx(260.0 / 175.0)
    assert by_mode["replay"]["x_fla_staggered"] == pytest.approx(260.0 / 178.0)  # steady, not one offset
    assert by_mode["replay refold"]["x_fla_staggered"] == pytest.approx(260.0 / (180.0 * 1.2))
    assert by_mode["replay"]["nonflush_pct_copy"] == 89.0 and by_mode["replay"]["x_standard"] == pytest.approx(265 / 175)
    mod.main([str(src), "--out", str(tmp_path / "plain.png")])
    assert (tmp_path / "plain.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_delta_plot_reads_a_recorded_plain_run():
    """The H200 plain run recorded in benchmarks/results: its ratios as the benchmark printed them."""
    mod = _plot_script("plot_delta")
    _, timed = mod.load_rows([_BENCHMARKS / "results" / "gdn_2026-12-02_h200_plain_twentieth.json"])
    replay = {r["batch"]: r for r in timed if r["mode"] == "replay"}
    assert sorted(replay) == [1, 128, 256, 512]
    assert {r["mode"] for r in timed} == {"replay", "replay refold"}  # no --sweep rows
    assert replay[256]["x_fla"] == pytest.approx(261.3 / 174.3, rel=2e-3)  # RESULTS.md: 1.50x
    assert replay[256]["x_fla_staggered"] == pytest.approx(261.3 / 177.4, rel=2e-3)  # steady state: 1.47x


def _paper_file(path, baseline, stagger_key):
    rows = []
    for b in (1, 128, 256):
        rows.append({"batch": b, "mode": baseline, "us": 2.0 * b})
        rows.append({"batch": b, "mode": "replay default", "nonflush": b, "flush": 3.0 * b, "amortized": 1.0 * b,
                     stagger_key: 1.25 * b})
        rows.append({"batch": b, "mode": "paper 64,1,3,2", "nonflush": b, "flush": 2.0 * b, "amortized": 1.6 * b,
                     stagger_key: 1.6 * b})
    path.write_text(json.dumps({"device": {"gpu": "test GPU"}, "window": 16, "rows": rows}))
    return path


@pytest.mark.parametrize("baseline,stagger_key", [("fla", "staggered"), ("standard", "mixed")])
def test_paper_plot_ratios_and_png(tmp_path, baseline, stagger_key):
    """Both paper benchmarks' files: ratios against the file's own baseline per batch, a PNG."""
    mod = _plot_script("plot_paper")
    src = _paper_file(tmp_path / "paper.json", baseline, stagger_key)
    _, found, steps = mod.load(src)
    assert found == baseline and set(steps) == {"ours", "paper 64,1,3,2"}
    assert steps["ours"][128] == pytest.approx((2.0, 1.6)) and steps["paper 64,1,3,2"][256] == pytest.approx((1.25, 1.25))
    mod.main([str(src), "--out", str(tmp_path / "p.png")])
    png = (tmp_path / "p.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_paper_plot_rejects_other_files(tmp_path, usage_error):
    mod = _plot_script("plot_paper")
    (tmp_path / "other.json").write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match="'rows' list"):
        mod.load(tmp_path / "other.json")
    data = json.loads(_paper_file(tmp_path / "a.json", "fla", "staggered").read_text())
    data["rows"] = [r for r in data["rows"] if not (r["mode"] == "fla" and r["batch"] == 128)]
    (tmp_path / "gap.json").write_text(json.dumps(data))
    assert "batch 128 has no fla step" in usage_error(
        lambda: mod.main([str(tmp_path / "gap.json"), "--out", str(tmp_path / "x.png")]))
    assert not (tmp_path / "x.png").exists()
