"""CPU checks of benchmarks/probe_ring_in_stream.py: its watchdog and its cases."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import probe_ring_in_stream as probe  # noqa: E402


def test_a_case_that_does_not_end_is_reported_as_a_hang():
    line, took = probe.in_child(time.sleep, (30,), 3.0)
    assert line == "HANG: no result in 3 s"
    assert 3.0 <= took < 25


def test_a_case_passes_its_line_or_its_error_back():
    assert probe.in_child(str.upper, ("ok: y 1e-3",), 60)[0] == "OK: Y 1E-3"
    line, _ = probe.in_child(int, ("not a number",), 60)
    assert line.startswith("ERROR: ValueError: invalid literal for int()")


@pytest.mark.parametrize("name,fields", probe.CASES, ids=[c[0] for c in probe.CASES])
def test_cases_are_the_default_step_with_the_ring_in_the_stream_launch(name, fields):
    cfg = probe._config(256, 64, 128, fields)
    assert cfg.ring_in_stream and cfg.flush_impl == "cuda_ws"
    assert cfg.flush_stream == ("after" not in name)
