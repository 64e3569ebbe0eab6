"""The benchmark plot script on a synthetic result file (no GPU needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "plot_mamba2.py"


def _module():
    spec = importlib.util.spec_from_file_location("plot_mamba2", _SCRIPT)
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
    mod = _module()
    mod.main([str(src), "--out", str(tmp_path / "plots" / "run.png")])
    png = (tmp_path / "plots" / "run.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_plot_rejects_a_file_without_results(tmp_path):
    src = tmp_path / "variants.json"
    src.write_text(json.dumps({"variants": []}))
    with pytest.raises(ValueError, match="^json: expected the output of bench_mamba2_decode.py --json"):
        _module().main([str(src)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["variants.json"]
