"""``benchmarks/ncu_stalls.py``: Nsight Compute's source page (``--page source --csv``) read and
summarised (stall shares, the instructions holding the most samples)."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from ncu_stalls import main, read_source_page, summarise  # noqa: E402

HEADER = ['"Address"', '"Source"', '"Warp Stall Sampling (All Samples)"', '"Warp Stall Sampling (Not-issued Samples)"',
          '"Instructions Executed"', '"stall_long_sb"', '"stall_mio"', '"stall_wait"', '"stall_long_sb (Not Issued)"']
ROWS = [
    ["0x7f00", "      LDG.E.128 R4, desc[UR4][R2.64]", "10", "9", "1,024", "2", "0", "8", "2"],
    ["0x7f10", "      FMUL R0, R4, 1.4426950216293334961", "70", "70", "1,024", "65", "0", "5", "65"],
    ["0x7f20", "      LDS.128 R8, [R1]", "20", "18", "1,024", "0", "19", "1", "0"],
    ["0x7f30", "      EXIT", "-", "-", "32", "-", "-", "-", "-"],
]


def write_page(path: Path, gz: bool) -> Path:
    text = '"Kernel Name","_flush_list_kernel",\n' + ",".join(HEADER) + "\n"
    text += "".join(",".join(f'"{c}"' for c in row) + "\n" for row in ROWS)
    if gz:
        path = path.with_suffix(".csv.gz")
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("gz", [False, True], ids=["csv", "gz"])
def test_read_and_summarise(tmp_path, gz, capsys):
    path = write_page(tmp_path / "page.csv", gz)
    kernel, instructions = read_source_page(str(path))
    assert kernel == "_flush_list_kernel"
    assert [i.samples for i in instructions] == [10, 70, 20, 0]
    assert instructions[1].stalls == {"long_sb": 65, "mio": 0, "wait": 5}  # "(Not Issued)" columns left out
    assert instructions[0].executed == 1024
    text = summarise(instructions, top=2)
    lines = text.splitlines()
    assert lines[0] == "100 samples, 3,104 warp instructions executed"
    assert lines[1] == "stall reasons: long_sb 67.0%, mio 19.0%, wait 14.0%"
    assert lines[2].startswith(" 70.0%") and "FMUL R0, R4" in lines[2] and lines[2].endswith("long_sb 65, wait 5")
    assert lines[3].startswith(" 20.0%") and "LDS.128" in lines[3]
    assert len(lines) == 4
    main([str(path), "--top", "1"])
    out = capsys.readouterr().out
    assert out.startswith("_flush_list_kernel: 4 SASS instructions") and "FMUL" in out and "LDS.128" not in out


def test_rejects_other_pages(tmp_path):
    path = tmp_path / "details.csv"
    path.write_text('"ID","Kernel Name","Metric Name"\n"0","k","Duration"\n')
    with pytest.raises(ValueError, match="expected ncu's source page"):
        read_source_page(str(path))
