"""The ``trtllm-replayssm`` command: ``info``, a full ``build`` through the CLI, and every
refused build: exit status 2, a message naming the option, the output directory untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trtllm_replayssm.cli import main

REPO = Path(__file__).resolve().parent.parent


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_info_prints_versions(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"torch" in out and torch.__version__ in out
    assert "nvidia-modelopt" in out and "tensorrt_llm" in out and "cuda" in out


def test_build_script_exposes_the_options():
    help_text = subprocess.run([sys.executable, str(REPO / "build_scripts/build_engine.py"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    for option in ("--model", "--quantization", "--ssm-checkpoint", "--ssm-read", "--window", "--max-draft-tokens",
                   "--target", "--calib-data", "--output", "--force", "--exclude", "--no-default-excludes"):
        assert option in help_text, option
    assert "{b300,b200,h200,h100}" in help_text and "{fp32,fp16-sr,bf16-sr,fp8-sr}" in help_text


def test_invalid_choice_is_a_usage_error(tmp_path, usage_error):
    assert "argument --ssm-read: invalid choice: 'int4'" in usage_error(
        lambda: main(["build", "--output", str(tmp_path / "o"), "--ssm-read", "int4"]))
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A model without SSM layers, a checkpoint with a broken config, one with truncated weights."""
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("checkpoints")
    cfg = transformers.LlamaConfig(vocab_size=272, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2)
    cfg.architectures = ["LlamaForCausalLM"]
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(root / "llama")
    from trtllm_replayssm.builder.model_io import tiny_hybrid_model

    model, tok = tiny_hybrid_model()
    model.save_pretrained(root / "truncated")
    weights = root / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (root / "badconfig").mkdir()
    (root / "badconfig" / "config.json").write_text("{ this is not json")
    (root / "empty.txt").write_text("\n\n")
    return root


@pytest.mark.parametrize("args, option, message", [
    (["--model", "{root}/missing"], "--model", "no checkpoint directory"),
    (["--model", "{root}/badconfig"], "--model", "cannot read"),
    (["--model", "{root}/truncated"], "--model", "cannot load the weights"),
    (["--model", "{root}/llama"], "--model", "no SSM layers"),
    (["--ssm-checkpoint", "fp8-sr", "--ssm-read", "bf16"], "--ssm-read", "wider"),
    (["--max-draft-tokens", "17"], "--max-draft-tokens", "draft tokens"),
    (["--window", "0"], "--window", "window"),
    (["--calib-data", "{root}/empty.txt"], "--calib-data", "no text"),
])
@pytest.mark.parametrize("existing", [False, True])
def test_refused_builds_leave_the_output_untouched(checkpoints, tmp_path, capsys, args, option, message, existing):
    out = tmp_path / "out"
    if existing:  # an earlier build that --force would replace: it must survive a failed build
        out.mkdir()
        (out / "marker.txt").write_text("earlier build")
    before = _snapshot(tmp_path)
    argv = ["build", "--output", str(out), "--quiet", "--calib-samples", "1", "--calib-seq-len", "16"]
    argv += [a.format(root=checkpoints) for a in args] + (["--force"] if existing else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {option}:" in err and message in err, err
    assert _snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out"] if existing else [])


def test_existing_output_needs_force(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "marker.txt").write_text("keep me")
    assert main(["build", "--output", str(out), "--quiet"]) == 2
    assert "--output" in capsys.readouterr().err and (out / "marker.txt").read_text() == "keep me"


def test_fp8_build_through_the_cli_replaces_with_force(tmp_path, capsys):
    pytest.importorskip("modelopt")
    out = tmp_path / "out"
    out.mkdir()
    (out / "marker.txt").write_text("old")
    status = main(["build", "--output", str(out), "--force", "--quiet", "--quantization", "fp8", "--target", "h200",
                   "--max-draft-tokens", "2", "--calib-samples", "2", "--calib-seq-len", "32",
                   "--exclude", "*mixer.out_proj"])
    captured = capsys.readouterr().out
    assert status == 0, captured
    assert not (out / "marker.txt").exists() and [p.name for p in tmp_path.iterdir()] == ["out"]
    for text in ("weights: fp8", "h200 (sm_90)", "sequences", "draft snapshots", "decode check", "passed"):
        assert text in captured, text
    hf = json.loads((out / "checkpoint/hf_quant_config.json").read_text())["quantization"]
    assert hf["quant_algo"] == "FP8" and "lm_head" in hf["exclude_modules"]
    # --exclude keeps the Mamba-2 output projections in BF16, on top of the default exclusions
    assert {"backbone.layers.0.mixer.out_proj", "backbone.layers.2.mixer.out_proj"} <= set(hf["exclude_modules"])
    # FP8 E4M3 with a per-tensor scale: relative error at most 2**-4, or half a subnormal step
    from trtllm_replayssm.builder.checkpoint_io import dequantized_weights, read_tensors
    from trtllm_replayssm.builder.model_io import tiny_hybrid_model

    exported = read_tensors(out / "checkpoint")
    dequant = dequantized_weights(exported, "FP8")
    model, _ = tiny_hybrid_model()
    model.save_pretrained(tmp_path / "src")
    original = read_tensors(tmp_path / "src")
    assert dequant and set(dequant) <= set(original)
    assert exported["backbone.layers.0.mixer.out_proj.weight"].dtype == torch.bfloat16
    assert torch.equal(exported["backbone.layers.0.mixer.out_proj.weight"], original["backbone.layers.0.mixer.out_proj.weight"])
    for key, value in dequant.items():
        scale = exported[key + "_scale"].float()
        x = original[key].float()
        assert bool(((value - x).abs() <= x.abs() * 2**-4 + scale * 2**-10 + 1e-12).all()), key
    report = json.loads((out / "build_report.json").read_text())
    assert report["ssm_state"]["standard_fp32_draft_snapshots"]["bytes_per_sequence"]["checkpoint"] == \
        3 * report["ssm_state"]["standard_fp32"]["bytes_per_sequence"]["checkpoint"]


def test_unquantized_build_copies_the_weights(tmp_path, capsys):
    pytest.importorskip("transformers")
    out = tmp_path / "out"
    assert main(["build", "--output", str(out), "--quiet", "--quantization", "none", "--no-decode-check",
                 "--ssm-checkpoint", "fp32", "--ssm-read", "none"]) == 0
    assert "weights: none" in capsys.readouterr().out
    from trtllm_replayssm.builder.checkpoint_io import read_tensors
    from trtllm_replayssm.builder.model_io import tiny_hybrid_model

    model, _ = tiny_hybrid_model()
    model.save_pretrained(tmp_path / "src")
    original, built = read_tensors(tmp_path / "src"), read_tensors(out / "checkpoint")
    assert set(original) == set(built) and all(torch.equal(original[k], built[k]) for k in original)
    assert not (out / "checkpoint/hf_quant_config.json").exists()
    report = json.loads((out / "build_report.json").read_text())
    assert report["quantization"] is None and report["decode_check"] == []
    assert report["weights"]["bytes_after"] == report["weights"]["bytes_before"]


@pytest.mark.gpu
def test_default_build_on_the_gpu(tmp_path, capsys):
    """The default build with the model, calibration and decode check on CUDA."""
    pytest.importorskip("modelopt")
    out = tmp_path / "out"
    assert main(["build", "--output", str(out), "--quiet", "--max-draft-tokens", "2"]) == 0, capsys.readouterr().err
    report = json.loads((out / "build_report.json").read_text())
    assert report["quantization"]["quant_algo"] == "NVFP4"
    (check,) = report["decode_check"]
    assert check["status"] == "passed", check
    assert check["backend"] == "triton", check  # the GPU kernels, not the reference ops
    assert check["tokens"] >= 2 * 16, check  # over more than one window, so flushes ran


def test_build_failing_midway_removes_what_it_created(tmp_path, capsys):
    """A calibration text shorter than one row is found only after the work directory exists."""
    pytest.importorskip("modelopt")
    short = tmp_path / "short.txt"
    short.write_text("too short\n")
    out = tmp_path / "a" / "b" / "out"
    assert main(["build", "--output", str(out), "--quiet", "--calib-data", str(short), "--calib-seq-len", "64"]) == 2
    assert "--calib-data: calibration text" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["short.txt"]
