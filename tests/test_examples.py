"""The examples run and report agreement (they are what a new user tries first)."""

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_vs_standard_agrees(capsys):
    demo = _load("replay_vs_standard")
    assert demo.main(["--slots", "3", "--tokens", "20", "--window", "4"]) == 0
    out = capsys.readouterr().out
    assert "AGREE" in out
    for layer in ("mamba2", "gdn", "kda"):
        assert layer in out


def test_replay_vs_standard_rejects_bad_window(usage_error):
    demo = _load("replay_vs_standard")
    assert "--window: ReplaySSMConfig.window: expected an int >= 1, got 0" in usage_error(
        lambda: demo.main(["--window", "0"]))
