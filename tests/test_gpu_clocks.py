"""benchmarks/gpu_clocks.py: nvidia-smi's samples summarized part by part (run_gpu_suite.sh clocks)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_clocks  # noqa: E402

# nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,
# temperature.memory,clocks_event_reasons.active --format=csv,noheader,nounits
SAMPLES = """\
2026/12/06 20:45:00.000, 345, 3201, 90.12, 30, 35, 0x0000000000000001
2026/12/06 20:45:00.050, 345, 3201, 91.00, 30, 35, 0x0000000000000001
2026/12/06 20:45:02.000, 1980, 3201, 610.50, 48, [N/A], 0x0000000000000000
2026/12/06 20:45:02.050, 1755, 3201, 700.20, 52, 66, 0x0000000000000004
2026/12/06 20:45:02.100, 1710, 3201, 699.80, 53, 67, 0x0000000000000004
2026/12/06 20:45:02.150, 1800, 3201, 690.00, 53, 68, 0x0000000000000004
2026/12/06 20:45:05.000, 1980, 3201, 500.00, 50, 62, 0x0000000000000000
2026/12/06 20:45:05
"""
MARKS = """\
2026/12/06 20:45:00.000000001 idle
2026/12/06 20:45:01.999999999 all-flush-512
2026/12/06 20:45:04.500000000 plain-table
"""


@pytest.fixture
def out(tmp_path):
    (tmp_path / "clocks.csv").write_text(SAMPLES)
    (tmp_path / "clock_marks.txt").write_text(MARKS)
    return tmp_path


def test_parts_summarized(out):
    samples = gpu_clocks.read_samples(out / "clocks.csv")
    # The cut last line is skipped; "[N/A]" in the memory temperature is not a reason to drop a sample.
    assert len(samples) == 7
    rows = gpu_clocks.summarize(samples, gpu_clocks.read_marks(out / "clock_marks.txt"))
    assert [r["part"] for r in rows] == ["idle", "all-flush-512", "plain-table"]
    # The mark's nanoseconds are cut to microseconds: 20:45:00.000000 is the first sample's time,
    # which belongs to the part that starts then.
    idle, flush, plain = rows
    assert idle["samples"] == 2 and idle["reasons"] == {"idle": 1.0}
    assert flush["samples"] == 4
    assert flush["sm_median"] == pytest.approx((1755 + 1800) / 2) and flush["sm_min"] == 1710
    assert flush["power_max"] == pytest.approx(700.20)
    assert flush["mem_c_max"] == 68  # the first sample's "[N/A]" left out, not taken as the most
    assert flush["reasons"] == {"sw power cap": 0.75}
    assert plain["samples"] == 1 and plain["reasons"] == {}
    # Under the cap: the three samples with bit 0x4, not the one at 1980 MHz before it.
    assert flush["sm_capped_median"] == 1755
    assert gpu_clocks.math.isnan(plain["sm_capped_median"])
    text = gpu_clocks.table(rows)
    assert "| all-flush-512 | 4 | 1778 (1710) | 1755 |" in text and "sw power cap 75%" in text
    assert "| plain-table | 1 | 1980 (1980) |  |" in text


def test_part_without_samples(out):
    (out / "clock_marks.txt").write_text(MARKS + "2026/12/06 21:00:00.0 after\n")
    rows = gpu_clocks.summarize(gpu_clocks.read_samples(out / "clocks.csv"),
                                gpu_clocks.read_marks(out / "clock_marks.txt"))
    assert rows[-1] == {"part": "after", "samples": 0}
    assert "| after | 0 | | | | | |" in gpu_clocks.table(rows)


def test_main_prints_the_table(out, capsys):
    gpu_clocks.main([str(out)])
    assert "| idle | 2 | 345 (345) |" in capsys.readouterr().out


@pytest.mark.parametrize("missing, message", [
    ("clocks.csv", "out: expected clocks.csv in"),
    ("clock_marks.txt", "out: expected clock_marks.txt in"),
])
def test_missing_files_refused(out, missing, message, usage_error):
    (out / missing).unlink()
    assert message in usage_error(lambda: gpu_clocks.main([str(out)]))


def test_no_sample_refused(out, usage_error):
    (out / "clocks.csv").write_text("timestamp, clocks.current.sm [MHz]\n")
    assert "holds no sample" in usage_error(lambda: gpu_clocks.main([str(out)]))


def test_no_marks_refused(out):
    with pytest.raises(ValueError, match="marks: expected at least one part"):
        gpu_clocks.summarize(gpu_clocks.read_samples(out / "clocks.csv"), [])
