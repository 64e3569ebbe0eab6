"""The device-launch probe's CPU-side pieces: its nvcc lines, both builds compiled and loaded where
nvcc is present, and its argument checks (the timing itself needs a GPU)."""

import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_device_launch as probe  # noqa: E402


def test_nvcc_lines():
    rdc = probe.nvcc_command("nvcc", "sm_90", "rdc", Path("a.cu"), Path("a.so"))
    plain = probe.nvcc_command("nvcc", "sm_100", "plain", Path("a.cu"), Path("b.so"))
    assert "-rdc=true" in rdc and rdc[-1] == "-lcudadevrt" and "-DNO_DEVICE_LAUNCH" not in rdc
    assert "-DNO_DEVICE_LAUNCH" in plain and "-rdc=true" not in plain and "-lcudadevrt" not in plain
    assert "-arch=sm_100" in plain and plain[plain.index("-o") + 1] == "b.so"
    with pytest.raises(ValueError, match=r"build: expected one of \('rdc', 'plain'\), got 'cdp'"):
        probe.nvcc_command("nvcc", "sm_90", "cdp", Path("a.cu"), Path("a.so"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_both_builds_compile_and_export_their_launchers():
    # the relocatable build holds the device launcher, the plain one refuses it
    rdc, plain = (probe.library(build, "sm_90") for build in probe.BUILDS)
    assert rdc.has_device_launch() == 1 and plain.has_device_launch() == 0
    for lib in (rdc, plain):
        assert callable(lib.launch_update) and callable(lib.launch_launcher)
    # cudaErrorNotSupported (801), before any CUDA call
    assert plain.launch_launcher(None, None, 0, 1.0, 0, None) == 801


@pytest.mark.parametrize("arg", ["--mib", "--rounds"])
def test_counts_must_be_positive(arg, usage_error):
    assert f"argument {arg}: expected an int >= 1, got 0" in usage_error(lambda: probe.main([arg, "0"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_needs_a_gpu(usage_error):
    assert "needs a CUDA GPU" in usage_error(lambda: probe.main([]))


def test_order_check_reads_every_element():
    # reads after a form that updated all of x see min = max = the replays' count; a part left
    # behind (a child grid still running beside the reads) shows in either extreme
    x = torch.zeros(1000)
    check = probe._OrderCheck(x)
    check.reset(1.0)
    for _ in range(3):
        x += 1
        check()
    assert check.verdict() == "ok"
    x[-10:] -= 1  # the last blocks' part not yet updated at the next read
    x += 1
    check()
    assert check.verdict() == "not kept (min-count -1, max-count 0)"
    check.reset(0.0)  # a clear flag: nothing gained, whatever x held
    x.zero_()
    check()
    assert check.verdict() == "ok"


def test_sequences_start_with_a_checked_form():
    # each timed sequence is one of the checked flag-1 forms followed by the grid or the word write
    for name in probe.SEQUENCES:
        first, second = name.split(";")
        assert first in probe.FLAG1_FORMS and second in ("rmw", "mark"), name
