"""Builder pieces in isolation: presets and option checks, the byte accounting against the state
dataclasses, the repairs of ModelOpt's export, the TensorRT-LLM option list, calibration data."""

from __future__ import annotations

import json

import pytest
import torch

from trtllm_replayssm.builder import TARGETS, BuildError, BuildOptions, resolve_options
from trtllm_replayssm.builder import memory
from trtllm_replayssm.builder.trtllm_options import ALLOWED_OPTIONS, check_options
from trtllm_replayssm.config import ReplaySSMConfig


# -- presets and options ------------------------------------------------------------------------

def test_target_presets_and_overrides(tmp_path):
    resolved = resolve_options(BuildOptions(output=tmp_path / "o", target="b300"))
    assert resolved.target.sm == "sm_103" and resolved.target.native_fp4
    assert (resolved.quantization, resolved.replay.checkpoint_spec, resolved.replay.read_format) == ("nvfp4", "fp16-sr", "nvfp4")
    assert set(resolved.preset_fields) == {"quantization", "ssm_checkpoint", "ssm_read"}
    assert TARGETS["b200"].sm == "sm_100" and TARGETS["h200"].sm == TARGETS["h100"].sm == "sm_90"
    assert not TARGETS["h100"].native_fp4 and "dequantized" in TARGETS["h100"].weight_path_note
    over = resolve_options(BuildOptions(output=tmp_path / "o", target="h100", quantization="fp8", ssm_checkpoint="fp32",
                                        ssm_read="none", window=8, max_draft_tokens=3))
    assert (over.quantization, over.replay.checkpoint_spec, over.replay.read_format) == ("fp8", "fp32", "none")
    assert (over.replay.window, over.replay.max_draft_tokens, over.preset_fields) == (8, 3, ())


@pytest.mark.parametrize("changes, option", [
    (dict(ssm_checkpoint="fp8-sr", ssm_read="bf16"), "--ssm-read"),  # read copy wider than the checkpoint
    (dict(max_draft_tokens=17), "--max-draft-tokens"),
    (dict(window=4, max_draft_tokens=5), "--max-draft-tokens"),
    (dict(window=0), "--window"),
    (dict(ssm_checkpoint="fp64"), "--ssm-checkpoint"),
    (dict(ssm_read="int4"), "--ssm-read"),
    (dict(quantization="int8"), "--quantization"),
    (dict(target="a100"), "--target"),
    (dict(calib_samples=0), "--calib-samples"),
    (dict(exclude=[""]), "--exclude"),
])
def test_option_errors_name_the_option(tmp_path, changes, option):
    with pytest.raises(BuildError) as err:
        resolve_options(BuildOptions(output=tmp_path / "o", **changes))
    assert err.value.option == option and str(err.value).startswith(option)
    assert not (tmp_path / "o").exists()


def test_output_under_a_file_or_empty_is_refused_at_option_check(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(BuildError, match=r"^--output: '.*afile' is not a directory, so") as err:
        resolve_options(BuildOptions(output=tmp_path / "afile" / "sub", force=True))
    assert err.value.option == "--output" and (tmp_path / "afile").read_text() == "x"
    with pytest.raises(BuildError, match=r"^--output: expected a directory path, got an empty string"):
        resolve_options(BuildOptions(output=""))


def test_output_and_model_paths(tmp_path):
    (tmp_path / "exists").mkdir()
    with pytest.raises(BuildError, match="--force") as err:
        resolve_options(BuildOptions(output=tmp_path / "exists"))
    assert err.value.option == "--output"
    assert resolve_options(BuildOptions(output=tmp_path / "exists", force=True)).output == tmp_path / "exists"
    model = tmp_path / "exists" / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(BuildError) as err:  # --force would delete the model it reads
        resolve_options(BuildOptions(output=tmp_path / "exists", model=model, force=True))
    assert err.value.option == "--output"
    with pytest.raises(BuildError) as err:
        resolve_options(BuildOptions(output=tmp_path / "o", model=tmp_path / "missing"))
    assert err.value.option == "--model"
    with pytest.raises(BuildError) as err:
        resolve_options(BuildOptions(output=tmp_path / "o", model=tmp_path / "exists"))  # no config.json
    assert err.value.option == "--model"
    with pytest.raises(BuildError) as err:
        resolve_options(BuildOptions(output=tmp_path / "o", calib_data=tmp_path / "none.txt"))
    assert err.value.option == "--calib-data"


# -- byte accounting ------------------------------------------------------------------------------

def _allocated_bytes(state) -> dict[str, int]:
    out = {"checkpoint": 0, "ring": 0, "cursors": 0}
    for name, t in state.tensors().items():
        key = "checkpoint" if name == "checkpoint" else "ring" if name.startswith("ring_") else "cursors"
        out[key] += t[0].numel() * t.element_size()
    return out


@pytest.mark.parametrize("kind", ["mamba2", "gdn", "kda"])
@pytest.mark.parametrize("checkpoint", ["fp32", "bf16"])
def test_state_bytes_match_the_allocated_state(kind, checkpoint):
    config = ReplaySSMConfig(window=8, max_draft_tokens=3, checkpoint_dtype=checkpoint)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[checkpoint]
    kw = dict(activation_dtype=torch.bfloat16, checkpoint_dtype=dtype)
    if kind == "mamba2":
        from trtllm_replayssm.ops.mamba2.state import Mamba2ReplayState

        state = Mamba2ReplayState.allocate(2, 8, 16, 32, 2, config, **kw)
        dims = memory.LayerDims("mamba2", heads=8, P=16, N=32, k_groups=2, conv_dim=8 * 16 + 2 * 2 * 32, d_conv=4)
    else:
        from trtllm_replayssm.ops.gdn.state import DeltaRuleReplayState

        k_heads = 2 if kind == "gdn" else 4
        state = DeltaRuleReplayState.allocate(2, 4, k_heads, 32, 16, config, per_channel_decay=kind == "kda", **kw)
        dims = memory.LayerDims(kind, heads=4, P=16, N=32, k_groups=k_heads, conv_dim=96, d_conv=4)
    got = memory.state_bytes(dims, config)
    want = _allocated_bytes(state)
    assert {k: got[k] for k in want} == want
    assert got["read_copy"] == 0 and got["total"] == sum(want.values()) + got["conv"]


def test_read_copy_and_standard_bytes():
    dims = memory.LayerDims("mamba2", heads=128, P=64, N=128, k_groups=8, conv_dim=128 * 64 + 2 * 8 * 128, d_conv=4)
    standard = memory.state_bytes(dims, None)
    assert standard["checkpoint"] == 4 * 2**20  # math.md section 5: 4 MiB per Nemotron-H layer
    assert memory.state_bytes(dims, None, draft_snapshots=3)["checkpoint"] == 4 * standard["checkpoint"]
    split = memory.state_bytes(dims, ReplaySSMConfig.from_checkpoint_spec("fp16-sr", read_format="nvfp4"))
    elems = 128 * 64 * 128
    assert split["checkpoint"] == 2 * elems
    assert split["read_copy"] == elems // 2 + elems // 16 + 128 * 4  # codes + E4M3 block scales + FP32 per head
    fp8 = memory.state_bytes(dims, ReplaySSMConfig.from_checkpoint_spec("fp8-sr", read_format="fp8"))
    assert fp8["checkpoint"] == elems + 128 * 64 * 4 and fp8["read_copy"] == elems + 128 * 64 * 4
    assert memory.sequences_that_fit(100, 50, 10) == 4 and memory.sequences_that_fit(100, 95, 10) == 0


# -- ModelOpt export repairs ------------------------------------------------------------------------

def test_clean_module_name_strips_modelopt_sentinel_residue():
    from trtllm_replayssm.builder.export_fixes import clean_module_name

    # what ModelOpt 0.47 writes for Nemotron-H (its sentinel rewritten by the model -> backbone rule)
    assert clean_module_name("lm_head.\x00backbone.pt_name_sentinel") == "lm_head"
    assert clean_module_name("backbone.layers.1.mixer.gate.\x00backbone.pt_name_sentinel") == "backbone.layers.1.mixer.gate"
    assert clean_module_name("model.layers.0.self_attn.forget_gate*") == "model.layers.0.self_attn.forget_gate*"


def test_fix_quant_config_rebuilds_exclusions_from_the_tensors(tmp_path):
    from safetensors.torch import save_file

    from trtllm_replayssm.builder.export_fixes import fix_quant_config

    tensors = {
        "backbone.layers.0.mixer.in_proj.weight": torch.zeros(32, 8, dtype=torch.uint8),
        "backbone.layers.0.mixer.in_proj.weight_scale": torch.zeros(32, 1).to(torch.float8_e4m3fn),
        "backbone.layers.0.mixer.in_proj.weight_scale_2": torch.tensor(1.0),
        "backbone.layers.0.mixer.conv1d.weight": torch.zeros(16, 1, 4),
        "backbone.layers.0.mixer.A_log": torch.zeros(4),
        "backbone.layers.0.norm.weight": torch.zeros(16),
        "backbone.embeddings.weight": torch.zeros(10, 16),
        "lm_head.weight": torch.zeros(10, 16),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    bad = ["lm_head.\x00backbone.pt_name_sentinel", "backbone.embeddings.\x00backbone.pt_name_sentinel",
           "backbone.layers.0.mixer.conv1d.\x00backbone.pt_name_sentinel"]
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt", "version": "0.47.0"},
         "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16, "exclude_modules": bad}}))
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "nemotron_h", "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": bad}}))
    fix_quant_config(tmp_path)
    hf = json.loads((tmp_path / "hf_quant_config.json").read_text())["quantization"]
    want = ["backbone.embeddings", "backbone.layers.0.mixer.conv1d", "lm_head"]
    assert hf["exclude_modules"] == want and hf["group_size"] == 16 and hf["quant_algo"] == "NVFP4"
    inline = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert inline["ignore"] == want and inline["group_size"] == 16 and inline["quant_method"] == "modelopt"


def test_quant_config_exclusions():
    pytest.importorskip("modelopt")
    from trtllm_replayssm.builder.quantize import DEFAULT_EXCLUDES, quant_config_for

    config = quant_config_for("nvfp4", exclude=["*mixer.out_proj"])
    disabled = [e["quantizer_name"] for e in config["quant_cfg"] if e.get("enable") is False]
    assert set(DEFAULT_EXCLUDES) <= set(disabled) and "*mixer.out_proj*" in disabled
    # weights stay NVFP4 for everything not excluded: the enabling entry precedes the exclusions
    order = [e["quantizer_name"] for e in config["quant_cfg"]]
    assert order.index("*weight_quantizer") < order.index("*conv1d*")
    bare = quant_config_for("fp8", default_excludes=False)
    names = [e["quantizer_name"] for e in bare["quant_cfg"] if e.get("enable") is False and "parent_class" not in e]
    assert names == ["*"]  # only the leading disable-all of the recipe remains
    assert any(e.get("parent_class") == "nn.Embedding" for e in bare["quant_cfg"])


# -- calibration and tokenizer --------------------------------------------------------------------

def test_byte_tokenizer_round_trip_and_calibration_batches():
    pytest.importorskip("transformers")
    from trtllm_replayssm.builder.model_io import byte_tokenizer
    from trtllm_replayssm.builder.quantize import calibration_batches

    tok = byte_tokenizer()
    text = "Ünïcödé, tabs\tand emoji 🚀 survive."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text.encode("utf-8")) and min(ids) >= 3 and max(ids) <= 258
    assert tok.decode(ids) == text
    rows = calibration_batches(tok, ["first line of prose", "second line"] * 10, samples=5, seq_len=16)
    assert len(rows) == 5 and all(r.shape == (1, 16) and r.dtype == torch.long for r in rows)
    with pytest.raises(ValueError, match="calibration text"):
        calibration_batches(tok, ["short"], samples=1, seq_len=64)


def test_ssm_layers_found_and_kernels_restored():
    pytest.importorskip("transformers")
    import sys

    from trtllm_replayssm.builder.model_io import find_ssm_layers, reference_sequence_kernels, tiny_hybrid_model

    model, _ = tiny_hybrid_model()
    layers = find_ssm_layers(model)
    assert [(l.name, l.kind) for l in layers] == [(f"model.layers.{i}.mixer", "mamba2") for i in (0, 2, 4)]
    again, _ = tiny_hybrid_model()  # seeded: the same weights every time
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    module = sys.modules[type(model).__module__]
    before = dict(vars(module))
    with reference_sequence_kernels(model):
        pass
    assert all(vars(module)[k] is v for k, v in before.items())


# -- the TensorRT-LLM option list -----------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    ({"max_batch_size": 8, "replayssm": {}}, "'replayssm' is not"),
    ({"kv_cache_config": {"mamba_cache_dtype": "float32"}}, "kv_cache_config.mamba_cache_dtype"),
    ({"kv_cache_config": {"mamba_ssm_cache_dtype": "fp8"}}, "mamba_ssm_cache_dtype"),
    ({"max_batch_size": {"x": 1}}, "takes a value"),
    ({"speculative_config": {"decoding_type": "Medusa", "max_draft_len": 2}}, "decoding_type"),
    ({"speculative_config": {"decoding_type": "MTP", "max_matching_ngram_size": 2}}, "do not belong to MTP"),
])
def test_check_options_rejects_unknown_names(options, message):
    with pytest.raises(ValueError, match=message):
        check_options(options)


def test_serve_options_speculative_choice():
    from types import SimpleNamespace

    from trtllm_replayssm.builder.deploy import serve_options

    replay = ReplaySSMConfig(window=16, max_draft_tokens=3)
    mtp = serve_options(replay, SimpleNamespace(num_nextn_predict_layers=2))
    assert mtp["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    ngram = serve_options(replay, SimpleNamespace())
    assert ngram["speculative_config"]["decoding_type"] == "NGram" and ngram["speculative_config"]["max_draft_len"] == 3
    assert "speculative_config" not in serve_options(ReplaySSMConfig(), SimpleNamespace())
    fp8 = serve_options(ReplaySSMConfig.from_checkpoint_spec("fp8-sr"), SimpleNamespace())
    assert fp8["kv_cache_config"]["mamba_ssm_cache_dtype"] == "auto"
    assert set(mtp) <= set(ALLOWED_OPTIONS)
