"""End-to-end builds of tiny models of each hybrid family, on CPU, checked from the outside:
the exported tensors against the source checkpoint, the quantization config as TensorRT-LLM
reads it, the serve options against TensorRT-LLM's option names, the Triton configuration
against Triton's own protobuf schema, and a reload with transformers."""

from __future__ import annotations

import fnmatch
import json
import warnings

import pytest
import torch
import yaml

transformers = pytest.importorskip("transformers")
pytest.importorskip("modelopt")

from trtllm_replayssm.builder import BuildOptions, build  # noqa: E402
from trtllm_replayssm.builder.checkpoint_io import dequantized_weights, read_quant_algo, read_tensors  # noqa: E402
from trtllm_replayssm.builder.model_io import byte_tokenizer, find_ssm_layers, tiny_hybrid_model  # noqa: E402
from trtllm_replayssm.builder.trtllm_options import check_options  # noqa: E402
from trtllm_replayssm.config import ReplaySSMConfig  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)

_COMMON = dict(vocab_size=272, hidden_size=64, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _tiny_config(family: str):
    if family == "qwen3_5":
        cfg = transformers.Qwen3_5TextConfig(
            **_COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
            num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], linear_key_head_dim=16,
            linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4)
        cfg.architectures = ["Qwen3_5ForCausalLM"]
    elif family == "qwen3_next":
        cfg = transformers.Qwen3NextConfig(
            **_COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
            num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], linear_key_head_dim=16,
            linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
        cfg.architectures = ["Qwen3NextForCausalLM"]
    elif family == "kimi_linear":
        cfg = transformers.KimiLinearConfig(
            **_COMMON, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], mlp_layer_types=["dense", "sparse"],
            kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, num_local_experts=4,
            num_experts_per_tok=2, linear_head_dim=16, linear_num_heads=4)
        cfg.architectures = ["KimiLinearForCausalLM"]
    else:
        raise ValueError(family)
    return cfg


def save_tiny_family(family: str, directory, seed: int = 0):
    """A tiny random model of ``family`` saved as a Hugging Face checkpoint with a tokenizer."""
    if family == "nemotron_h":
        model, tokenizer = tiny_hybrid_model()
    else:
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(_tiny_config(family), dtype=torch.bfloat16)
        tokenizer = byte_tokenizer()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model


# family -> build options beyond the defaults; nemotron_h builds the embedded model (no --model).
BUILDS = {
    "nemotron_h": dict(),
    "qwen3_5": dict(max_draft_tokens=4, target="h100"),
    "qwen3_next": dict(ssm_checkpoint="fp32", ssm_read="nvfp4", window=8, target="b200"),
    "kimi_linear": dict(ssm_checkpoint="bf16-sr", ssm_read="fp8"),
}
EXPECTED_KINDS = {"nemotron_h": "mamba2", "qwen3_5": "gdn", "qwen3_next": "gdn", "kimi_linear": "kda"}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def built(request, tmp_path_factory):
    family = request.param
    root = tmp_path_factory.mktemp(family)
    source = root / "source"
    save_tiny_family(family, source)
    out = root / "out"
    options = BuildOptions(output=out, model=None if family == "nemotron_h" else source, calib_samples=2,
                           calib_seq_len=32, **BUILDS[family])
    report = build(options, progress=False)
    return family, source, out, report, options


def test_output_layout(built):
    _, _, out, report, _ = built
    for rel in ("checkpoint/config.json", "checkpoint/hf_quant_config.json", "checkpoint/tokenizer.json",
                "replayssm.yaml", "trtllm-serve.yaml", "build_report.json", "triton_model_repo/tensorrt_llm/config.pbtxt",
                "triton_model_repo/tensorrt_llm/1/model.py", "triton_model_repo/tensorrt_llm/1/model.yaml"):
        assert (out / rel).is_file(), rel
    assert json.loads((out / "build_report.json").read_text())["weights"] == report["weights"]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".out.")], "temporary directories left behind"


def test_quant_config_as_tensorrt_llm_reads_it(built):
    _, _, out, _, _ = built
    hf = json.loads((out / "checkpoint/hf_quant_config.json").read_text())
    quant = hf["quantization"]
    assert hf["producer"]["name"] == "modelopt"
    assert quant["quant_algo"] == "NVFP4" and quant["group_size"] == 16
    assert "kv_cache_quant_algo" in quant
    names = quant["exclude_modules"]
    assert names and len(names) == len(set(names))
    keys = set(read_tensors(out / "checkpoint"))
    modules = {k.rsplit(".", 1)[0] for k in keys}
    for name in names:
        assert "\x00" not in name and not name.endswith(".") and "sentinel" not in name, name
        # every exclusion (a module name or an fnmatch pattern, as TensorRT-LLM matches them)
        # names modules of the checkpoint, and none of them is quantized
        matched = [m for m in modules if fnmatch.fnmatch(m, name)]
        assert matched, name
        assert not [m for m in matched if m + ".weight_scale" in keys], name
    assert "lm_head" in names
    inline = json.loads((out / "checkpoint/config.json").read_text())["quantization_config"]
    assert inline["quant_method"] == "modelopt" and inline["quant_algo"] == "NVFP4" and inline["group_size"] == 16
    assert inline["ignore"] == names


def _nvfp4_error_bound(original: torch.Tensor, block_scale: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """Largest error round-to-nearest E2M1 can make per element: half the spacing of the E2M1
    grid around ``|x| / s`` (0.25, 0.5 or 1 times the block's scale ``s``), or the clipping
    ``|x| - 6 s`` where the rounded-down E4M3 block scale leaves ``|x|`` above the grid."""
    s = (block_scale.float() * global_scale.float()).repeat_interleave(16, dim=-1)
    x = original.float().abs()
    q = x / s
    half_step = torch.where(q <= 2, 0.25, torch.where(q <= 4, 0.5, 1.0)) * s
    return torch.maximum(half_step, x - 6 * s) * (1 + 1e-6) + 1e-12


def test_weights_quantized_within_bound_and_excluded_bit_identical(built):
    _, source, out, _, _ = built
    original = read_tensors(source)
    exported = read_tensors(out / "checkpoint")
    dequant = dequantized_weights(exported, read_quant_algo(out / "checkpoint"))
    assert dequant, "no quantized weights"
    assert set(original) <= set(exported)
    quantized = 0
    for key, tensor in original.items():
        if key in dequant:
            base = key[: -len(".weight")]
            bound = _nvfp4_error_bound(tensor, exported[base + ".weight_scale"], exported[base + ".weight_scale_2"])
            err = (dequant[key] - tensor.float()).abs()
            assert bool((err <= bound).all()), f"{key}: max excess {(err - bound).max().item():.3g}"
            quantized += 1
        else:
            assert exported[key].dtype == tensor.dtype and torch.equal(exported[key], tensor), key
    assert quantized == len(dequant)
    # the SSM parameters and the short convolutions are among the untouched tensors
    for key in original:
        if key.rsplit(".", 1)[-1] in ("A_log", "D", "dt_bias") or ".conv1d." in key:
            assert key not in dequant, key


def test_reload_with_transformers(built, tmp_path):
    family, source, out, _, _ = built
    exported = read_tensors(out / "checkpoint")
    dequant = dequantized_weights(exported, read_quant_algo(out / "checkpoint"))
    original = read_tensors(source)
    state = {k: dequant.get(k, exported[k]).to(original[k].dtype) for k in original}
    config = json.loads((out / "checkpoint/config.json").read_text())
    config.pop("quantization_config")
    (tmp_path / "config.json").write_text(json.dumps(config))
    from safetensors.torch import save_file

    save_file(state, str(tmp_path / "model.safetensors"))
    reloaded, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    reference = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    assert [type(l.module).__name__ for l in find_ssm_layers(reloaded)] == [type(l.module).__name__ for l in find_ssm_layers(reference)]
    ids = torch.randint(3, 259, (1, 24), generator=torch.Generator().manual_seed(1))
    from trtllm_replayssm.builder.model_io import reference_sequence_kernels

    with torch.no_grad(), reference_sequence_kernels(reloaded), reference_sequence_kernels(reference):
        got, want = reloaded(ids).logits, reference(ids).logits
    assert torch.isfinite(got).all()
    # NVFP4 weights perturb the logits a little, not into something else
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0).item()
    assert cos > 0.9, cos


def test_replayssm_yaml_and_report(built):
    family, _, out, report, options = built
    replay = ReplaySSMConfig.from_yaml(out / "replayssm.yaml")
    assert replay.window == options.window and replay.max_draft_tokens == options.max_draft_tokens
    if options.ssm_checkpoint:
        assert replay.checkpoint_spec == options.ssm_checkpoint and replay.read_format == options.ssm_read
    else:  # preset: FP16+SR recurrence, NVFP4 read copy
        assert (replay.checkpoint_spec, replay.read_format) == ("fp16-sr", "nvfp4")
    assert report["ssm_layers"]["by_kind"] and set(report["ssm_layers"]["by_kind"]) == {EXPECTED_KINDS[family]}
    assert report["weights"]["bytes_after"] < report["weights"]["bytes_before"]
    # the standard state is the FP32 [heads, P, N] matrix plus the conv window, summed over layers
    hf = transformers.AutoConfig.from_pretrained(out / "checkpoint")
    states = report["ssm_state"]
    expected = sum(4 * d["heads"] * d["P"] * d["N"] + 2 * d["conv_dim"] * (d["d_conv"] - 1) for d in report["ssm_layers"]["dims"])
    assert states["standard_fp32"]["bytes_per_sequence"]["total"] == expected
    assert hf.model_type == report["model_type"]
    configured, plain = states["replayssm_configured"], states["replayssm_fp32"]
    assert configured["bytes_per_sequence"]["read_copy"] > 0
    assert configured["bytes_per_sequence"]["ring"] == plain["bytes_per_sequence"]["ring"]
    if replay.checkpoint_dtype != "fp32":  # a half-width checkpoint saves more than the read copy costs
        assert configured["bytes_per_sequence"]["total"] < plain["bytes_per_sequence"]["total"]
        assert configured["sequences_fit"] > plain["sequences_fit"]
    for check in report["decode_check"]:
        assert check["status"] in ("passed", "skipped"), check
    if family == "nemotron_h":
        (check,) = report["decode_check"]
        assert check["status"] == "passed" and check["tokens"] >= 3 * replay.window


def test_serve_options_use_only_tensorrt_llm_names(built):
    _, _, out, _, options = built
    serve = yaml.safe_load((out / "trtllm-serve.yaml").read_text())
    check_options(serve)
    assert serve["model_kwargs"]["replayssm"] == ReplaySSMConfig.from_yaml(out / "replayssm.yaml").to_dict()
    assert serve["kv_cache_config"]["mamba_ssm_cache_dtype"] in ("float32", "float16", "bfloat16", "auto")
    if options.max_draft_tokens:
        assert serve["speculative_config"]["decoding_type"] in ("MTP", "NGram")
    else:
        assert "speculative_config" not in serve
    model_yaml = yaml.safe_load((out / "triton_model_repo/tensorrt_llm/1/model.yaml").read_text())
    assert model_yaml.pop("triton_config") == {"max_batch_size": 0, "decoupled": False}
    assert model_yaml.pop("model") == "../../../checkpoint"
    assert model_yaml == serve


def test_triton_config_parses_with_tritons_schema(built):
    _, _, out, _, _ = built
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse((out / "triton_model_repo/tensorrt_llm/config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.name == "tensorrt_llm" and config.backend == "python"
    assert [i.name for i in config.input][0] == "text_input"
    assert config.input[0].data_type == model_config_pb2.TYPE_STRING
    assert [o.name for o in config.output] == ["text_output"]
    from trtllm_replayssm.builder.triton_python_model import load_model_yaml

    options, triton = load_model_yaml(out / "triton_model_repo/tensorrt_llm/1")
    assert triton["max_batch_size"] == config.max_batch_size
    assert (out / "checkpoint").resolve() == type(out)(options["model"])


def test_triton_model_refuses_to_serve_without_the_integration(built, monkeypatch):
    # The build asks for a ReplaySSM state in model.yaml; where the installed package has no
    # TensorRT-LLM integration to register, the model refuses to start rather than serve with
    # TensorRT-LLM's own SSM decode, unless REPLAYSSM_ALLOW_PLAIN_DECODE=1 says so.
    import importlib.util
    import sys
    import types

    _, _, out, _, _ = built
    started = []
    llm_module = types.ModuleType("tensorrt_llm")
    llm_module.LLM = lambda **options: started.append(options)
    llm_module.SamplingParams = dict
    monkeypatch.setitem(sys.modules, "tensorrt_llm", llm_module)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))
    import trtllm_replayssm.integrations.tensorrt_llm as integration

    if callable(getattr(integration, "register", None)):
        pytest.skip("this trtllm-replayssm has a TensorRT-LLM integration to register")
    path = out / "triton_model_repo/tensorrt_llm/1/model.py"
    spec = importlib.util.spec_from_file_location("replayssm_triton_model", path)
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    monkeypatch.delenv(model.ALLOW_PLAIN_DECODE, raising=False)
    with pytest.raises(RuntimeError, match="REPLAYSSM_ALLOW_PLAIN_DECODE=1"):
        model.TritonPythonModel().initialize({})
    assert started == []
    monkeypatch.setenv(model.ALLOW_PLAIN_DECODE, "1")
    model.TritonPythonModel().initialize({})
    assert len(started) == 1 and started[0]["model_kwargs"]["replayssm"]
