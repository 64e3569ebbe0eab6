"""The Mamba-2 flush launch's default register cap (of 128 and 96, the one that fills the
launch's waves best on the device), checked where it matters without a GPU: compiled for sm_90
(Triton builds the PTX on the CPU, ptxas from Triton's wheel assembles it) with the cap chosen
for an H200's 132 SMs, the default flush kernel must not spill at Nemotron-H dims, and the
programs an SM then holds must leave the launch's last wave mostly full at the batches that use
it. The launch has 2048 programs from batch 64 (4096 at 512); 5 per SM made that 3.1 waves and its
nearly empty fourth wave of long programs cost 38 us of a 698-us flush on an H200
(NOTES_mamba2.md, fourteenth run).

The compiles run in a child process without ``TRITON_INTERPRET`` (as ``test_fold_gluon.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
from ptx_resources import HAVE_PTXAS  # noqa: E402

from trtllm_replayssm.ops._flush_heads import flush_heads_per_program, fullest_last_wave_cap  # noqa: E402
from trtllm_replayssm.ops._flush_list import programs_per_sm  # noqa: E402
from trtllm_replayssm.ops.mamba2 import decode  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not HAVE_PTXAS, reason="Triton's ptxas for sm_90+ is not installed")

H200_SMS = 132
DIMS = {"nemotron_h": (128, 64, 128, 8), "nemotron3_nano": (96, 80, 128, 8)}
BATCHES = [64, 128, 256, 512]

_CHILD = r'''
import dataclasses, json, sys
sys.path.insert(0, sys.argv[1])
from registers_mamba2_staged import resources
from trtllm_replayssm.ops.mamba2 import decode
out = {}
for name, (heads, head_dim, d_state, groups) in json.loads(sys.argv[2]).items():
    for batch in json.loads(sys.argv[3]):
        cfg = decode.launch_config("replay", head_dim, d_state, batch)
        out[f"{name} {batch}"] = resources(cfg, heads=heads, head_dim=head_dim, d_state=d_state, groups=groups,
                                           batch=batch)[2]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def flush_resources():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    run = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT / "benchmarks"), json.dumps(DIMS), json.dumps(BATCHES)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    parsed = {}
    for name, line in json.loads(run.stdout.strip().splitlines()[-1]).items():
        regs, spilled, smem = map(int, re.match(r"(\d+) registers, (\d+) B spilled, (\d+) B smem", line).groups())
        parsed[name] = dict(regs=regs, spilled=spilled, smem=smem)
    return parsed


def _programs(dims: str, batch: int) -> int:
    heads, head_dim, d_state, groups = DIMS[dims]
    cfg = decode.launch_config("replay", head_dim, d_state, batch)
    return batch * heads // flush_heads_per_program(heads // groups, cfg.flush_heads)


@pytest.mark.parametrize("dims", list(DIMS))
@pytest.mark.parametrize("batch", BATCHES)
def test_h200_takes_four_programs_per_sm(dims, batch):
    # What the H200 measurements chose (4 programs per SM against 5 at batch 64-512: 112
    # registers then, 128 since the ring B moved out of the tile loop and ptxas takes 114).
    cfg = decode.launch_config("replay", 64, 128, batch)
    assert fullest_last_wave_cap(cfg.flush_max_registers, _programs(dims, batch), cfg.flush_warps, H200_SMS) == 128


@pytest.mark.parametrize("sms,programs,want", [
    (132, 2048, 128),   # 3.9 waves at 4 per SM against 3.1 at 5
    (148, 2048, 96),    # 3.5 against 2.8
    (160, 2048, 96),    # 3.2 against 2.6
    (148, 4096, 128),   # 6.9 against 5.5
    (132, 528, 128),    # one full wave at 4 per SM
    (132, 100, 128),    # under one wave either way: the smaller residency is the fuller wave
])
def test_fullest_last_wave_cap(sms, programs, want):
    assert fullest_last_wave_cap((128, 96), programs, 4, sms) == want


@pytest.mark.parametrize("batch", BATCHES)
def test_default_flush_cap_does_not_spill_at_nemotron_h(flush_resources, batch):
    got = flush_resources[f"nemotron_h {batch}"]
    assert got["regs"] <= 128
    assert got["spilled"] == 0


@pytest.mark.parametrize("dims", list(DIMS))
@pytest.mark.parametrize("batch", BATCHES)
def test_default_flush_last_wave_mostly_full(flush_resources, dims, batch):
    heads, head_dim, d_state, groups = DIMS[dims]
    cfg = decode.launch_config("replay", head_dim, d_state, batch)
    got = flush_resources[f"{dims} {batch}"]
    per_sm = programs_per_sm(got["regs"], cfg.flush_warps, got["smem"])
    waves = _programs(dims, batch) / (H200_SMS * per_sm)
    assert waves - int(waves) >= 0.5 or waves == int(waves), (per_sm, waves)
