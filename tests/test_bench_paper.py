"""The paper-code loader of ``benchmarks/bench_gdn_paper.py`` / ``bench_mamba2_paper.py``
(``_paper_code.py``): a checkout without the file is refused by name, and a file is loaded alone
with stand-ins for the vLLM modules it imports (a stand-in file here, the paper's code being no
part of this repository)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import bench_gdn_paper  # noqa: E402

STAND_IN = '''
from vllm.model_executor.layers.mamba.ops.replayssm_config import get_replayssm_config
from vllm.triton_utils import tl, triton


def fused_recurrent_gated_delta_rule_replayssm(*args, block_v=None, num_warps=None, num_stages=None, nk=None, **kw):
    cfg = get_replayssm_config("gdn_decode", L=16)
    return cfg, tl.constexpr, triton.cdiv(5, 2), (block_v, num_warps, num_stages, nk)
'''


def test_missing_checkout_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--paper-root: expected a checkout"):
        bench_gdn_paper.load_paper_kernel(str(tmp_path))


def test_kernel_file_loads_alone(tmp_path):
    path = tmp_path / bench_gdn_paper.PAPER_FILE
    path.parent.mkdir(parents=True)
    path.write_text(STAND_IN)
    kernel = bench_gdn_paper.load_paper_kernel(str(tmp_path))
    cfg, constexpr, cdiv, launch = kernel(block_v=32, num_warps=1, num_stages=3, nk=2)
    import triton.language as tl

    assert cfg == (None, None, None, None) and constexpr is tl.constexpr and cdiv == 3 and launch == (32, 1, 3, 2)


def test_bad_launch_configs_are_named(usage_error):
    assert "--paper-configs: expected BV,WARPS,STAGES,NK integers, got ['64,1,3']" in usage_error(
        lambda: bench_gdn_paper.main(["--paper-configs", "64,1,3"]))


def test_mamba2_paper_bench_names_bad_configs(tmp_path, usage_error):
    """``bench_mamba2_paper.py`` refuses a malformed launch config before loading anything."""
    import bench_mamba2_paper

    assert "--output-only-config: expected BLOCK_M,WARPS integers, got '16'" in usage_error(
        lambda: bench_mamba2_paper.main(["--paper-root", str(tmp_path), "--output-only-config", "16"]))
    with pytest.raises(SystemExit, match="--paper-root: expected a checkout"):
        bench_mamba2_paper.main(["--paper-root", str(tmp_path)])


def test_fused_specs_become_variants():
    """``--fused`` rows: the one-launch step's defaults, or a ``FusedVariant`` with fields replaced."""
    from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant

    assert bench_gdn_paper.fused_variant("") == ("replay fused", FusedVariant())
    name, variant = bench_gdn_paper.fused_variant("precision=tf32x3, block_v=16")
    assert name == "replay fused precision=tf32x3, block_v=16"
    assert variant == FusedVariant(block_v=16, precision="tf32x3")


@pytest.mark.parametrize("spec, message", [("precision=fp8", "precision"), ("no_such_field=1", "no_such")])
def test_bad_fused_specs_are_named(spec, message, capsys):
    with pytest.raises(SystemExit) as refused:
        bench_gdn_paper.main(["--fused", spec])
    # argparse's error goes to stderr, parse_fields' message is the exit code
    assert message in capsys.readouterr().err + str(refused.value.code)
