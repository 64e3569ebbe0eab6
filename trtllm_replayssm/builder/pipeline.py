"""``build()``: the whole builder, from options to a complete output directory.

Everything is written to a temporary directory beside the output and moved into place only
when complete; on any error the temporary directory is removed and the output is untouched.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..config import ReplaySSMConfig
from . import memory
from .checkpoint_io import dequantized_weights, read_quant_algo, read_tensors
from .decode_check import load_built_weights, run_decode_check, snapshot_first_layers
from .deploy import serve_options, write_serve_yaml, write_triton_repo
from .model_io import find_ssm_layers, load_checkpoint, tiny_hybrid_model
from .options import BuildError, BuildOptions, ResolvedOptions, resolve_options
from .quantize import DEFAULT_EXCLUDES, calibration_batches, quantize_and_export

__all__ = ["BUNDLED_CALIBRATION_TEXT", "build", "format_summary", "package_version"]

BUNDLED_CALIBRATION_TEXT = Path(__file__).with_name("tiny_hybrid") / "calibration.txt"


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trtllm-replayssm")
    except PackageNotFoundError:
        return "unknown"


def build(options: BuildOptions, *, progress: bool = True, stream=None) -> dict:
    """Build ``options.output``; returns the build report (also written as ``build_report.json``).

    Raises :class:`BuildError` (naming the option) for anything the user can fix; the output
    directory is left as it was on every error.
    """
    stream = stream or sys.stderr
    started = time.time()
    if not progress:
        # transformers draws its own bars (e.g. while writing shards); --quiet means none at all
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    resolved = resolve_options(options)
    calib_lines = _calibration_lines(resolved) if resolved.quantization != "none" else []

    bar = tqdm(total=1, desc="load model", disable=not progress, file=stream)
    if resolved.model is None:
        model, tokenizer = tiny_hybrid_model()
        source = "embedded tiny hybrid (Nemotron-H style, seeded random weights)"
    else:
        model, tokenizer = load_checkpoint(resolved.model)
        source = str(resolved.model)
    if torch.cuda.is_available():
        model = model.cuda()
    bar.update(1)
    bar.close()

    ssm_layers = find_ssm_layers(model)
    if not ssm_layers:
        raise BuildError("--model", f"{type(model).__name__} has no SSM layers (Mamba-2, Gated DeltaNet or Kimi Delta "
                                    "Attention); ReplaySSM has nothing to accelerate")
    layer_dims = [memory.layer_dims(layer.module, layer.kind) for layer in ssm_layers]
    weight_bytes_before = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    first_layers = snapshot_first_layers(ssm_layers)

    output = resolved.output
    created = output.parent
    while not created.parent.exists():
        created = created.parent
    created = created if not created.exists() else None  # the outermost directory this build creates
    output.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f".{output.name}.building-", dir=output.parent))
    try:
        report = _build_into(workdir, resolved, model, tokenizer, calib_lines, ssm_layers, layer_dims,
                             weight_bytes_before, first_layers, source, progress, stream)
        report["elapsed_s"] = round(time.time() - started, 2)
        (workdir / "build_report.json").write_text(json.dumps(report, indent=2) + "\n")
        _move_into_place(workdir, output)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    return report


def _calibration_lines(resolved: ResolvedOptions) -> list[str]:
    path = resolved.calib_data or BUNDLED_CALIBRATION_TEXT
    option = "--calib-data"
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError:
        raise BuildError(option, f"{str(path)!r} is not UTF-8 text") from None
    if not lines:
        raise BuildError(option, f"{str(path)!r} holds no text")
    return lines


def _build_into(workdir, resolved, model, tokenizer, calib_lines, ssm_layers, layer_dims, weight_bytes_before,
                first_layers, source, progress, stream) -> dict:
    opts = resolved.options
    checkpoint = workdir / "checkpoint"
    hf_quant = None
    if resolved.quantization == "none":
        bar = tqdm(total=1, desc="export", disable=not progress, file=stream)
        model.save_pretrained(checkpoint)
        bar.update(1)
        bar.close()
    else:
        try:
            batches = calibration_batches(tokenizer, calib_lines, opts.calib_samples, opts.calib_seq_len)
        except ValueError as err:
            raise BuildError("--calib-data", str(err)) from None
        calib_bar = tqdm(total=len(batches), desc="calibrate", disable=not progress, file=stream)
        quant_bar = tqdm(total=2, desc=f"quantize {resolved.quantization} + export", disable=not progress, file=stream)
        quant_bar.update(1)
        hf_quant = quantize_and_export(model, resolved.quantization, batches, checkpoint, exclude=opts.exclude,
                                       default_excludes=opts.default_excludes, progress=calib_bar.update)
        calib_bar.close()
        quant_bar.update(1)
        quant_bar.close()
    tokenizer.save_pretrained(checkpoint)
    weight_bytes_after = memory.checkpoint_weight_bytes(checkpoint)

    replay = resolved.replay
    replay.to_yaml(workdir / "replayssm.yaml")
    options = serve_options(replay, model.config)
    write_serve_yaml(workdir / "trtllm-serve.yaml", options)
    write_triton_repo(workdir / "triton_model_repo", options)

    states = {}
    for label, config in memory.state_configurations(replay).items():
        if config == "snapshots":
            per_layer = [memory.state_bytes(d, None, draft_snapshots=replay.max_draft_tokens) for d in layer_dims]
        else:
            per_layer = [memory.state_bytes(d, config) for d in layer_dims]
        totals = {k: sum(p[k] for p in per_layer) for k in per_layer[0]}
        states[label] = {
            "config": config.to_dict() if isinstance(config, ReplaySSMConfig) else config,
            "bytes_per_sequence": totals,
            "sequences_fit": memory.sequences_that_fit(resolved.target.memory_bytes, weight_bytes_after, totals["total"]),
        }
    base = max(1, states["standard_fp32"]["sequences_fit"])
    for entry in states.values():
        entry["sequences_vs_standard_fp32"] = round(entry["sequences_fit"] / base, 3)

    checks = []
    if opts.decode_check:
        built = read_tensors(checkpoint)
        built.update(dequantized_weights(built, read_quant_algo(checkpoint)))
        bar = tqdm(total=len(first_layers), desc="decode check", disable=not progress, file=stream)
        for name, kind, module in first_layers:
            load_built_weights(module, name, built, model)
            checks.append(asdict(run_decode_check(name, kind, module, replay)))
            bar.update(1)
        bar.close()

    kinds = {}
    for layer in ssm_layers:
        kinds[layer.kind] = kinds.get(layer.kind, 0) + 1
    target = resolved.target
    return {
        "producer": {"name": "trtllm-replayssm", "version": package_version()},
        "source": source,
        "architecture": type(model).__name__,
        "model_type": getattr(model.config, "model_type", None),
        "target": {"name": target.name, "sm": target.sm, "memory_bytes": target.memory_bytes,
                   "native_fp4": target.native_fp4, "note": target.weight_path_note},
        "options": {
            "quantization": resolved.quantization,
            "ssm_checkpoint": replay.checkpoint_spec,
            "ssm_read": replay.read_format,
            "window": replay.window,
            "max_draft_tokens": replay.max_draft_tokens,
            "from_target_preset": list(resolved.preset_fields),
            "calib_data": str(resolved.calib_data) if resolved.calib_data else "bundled",
        },
        "quantization": None if hf_quant is None else {
            **hf_quant["quantization"],
            "exclude_patterns": (list(DEFAULT_EXCLUDES) if opts.default_excludes else []) + list(opts.exclude),
        },
        "ssm_layers": {"count": len(ssm_layers), "by_kind": kinds,
                       "dims": [{"layer": l.name, **asdict(d)} for l, d in zip(ssm_layers, layer_dims)]},
        "weights": {"bytes_before": weight_bytes_before, "bytes_after": weight_bytes_after,
                    "ratio": round(weight_bytes_after / max(1, weight_bytes_before), 4)},
        "ssm_state": states,
        "decode_check": checks,
        "files": {"checkpoint": "checkpoint", "replayssm": "replayssm.yaml", "trtllm_serve": "trtllm-serve.yaml",
                  "triton_model_repo": "triton_model_repo"},
    }


def _move_into_place(workdir: Path, output: Path) -> None:
    if output.exists():
        # Keep the old output until the new one is in place: a failure in between loses nothing.
        old = Path(tempfile.mkdtemp(prefix=f".{output.name}.old-", dir=output.parent))
        old.rmdir()
        output.rename(old)
        workdir.rename(output)
        shutil.rmtree(old, ignore_errors=True)
    else:
        workdir.rename(output)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def format_summary(report: dict, output: str | Path) -> str:
    """The human-readable summary ``trtllm-replayssm build`` prints."""
    opts, target, weights = report["options"], report["target"], report["weights"]
    lines = [
        f"Built {output}",
        f"  model: {report['architecture']} ({report['source']}), {report['ssm_layers']['count']} SSM layers "
        f"{report['ssm_layers']['by_kind']}",
        f"  target: {target['name']} ({target['sm']}): {target['note']}",
        f"  weights: {opts['quantization']}: {_bytes(weights['bytes_before'])} -> {_bytes(weights['bytes_after'])} "
        f"({weights['ratio']:.2f}x)",
        f"  SSM state: {opts['ssm_checkpoint']} checkpoint, {opts['ssm_read']} read copy, window {opts['window']}, "
        f"{opts['max_draft_tokens']} draft tokens",
        "  SSM state per sequence (all layers) and sequences whose state fits in "
        f"{int(memory.GPU_MEMORY_FRACTION * 100)}% of {target['name']} memory next to the weights:",
    ]
    labels = {"standard_fp32": "standard decode, fp32 state",
              "standard_fp32_draft_snapshots": "standard decode + fp32 draft snapshots",
              "replayssm_fp32": "ReplaySSM, fp32 checkpoint + ring",
              "replayssm_configured": "ReplaySSM, configured split precision"}
    for key, entry in report["ssm_state"].items():
        b = entry["bytes_per_sequence"]
        lines.append(f"    {labels[key]:40s} {_bytes(b['total']):>11s}  (checkpoint {_bytes(b['checkpoint'])}, "
                     f"read copy {_bytes(b['read_copy'])}, ring {_bytes(b['ring'])}, conv {_bytes(b['conv'])})  "
                     f"{entry['sequences_fit']:>10d} sequences ({entry['sequences_vs_standard_fp32']:.2f}x)")
    if report["decode_check"]:
        lines.append("  decode check (built SSM weights, ReplaySSM vs standard decode):")
        from .decode_check import DecodeCheck

        lines += [DecodeCheck(**c).line() for c in report["decode_check"]]
    return "\n".join(lines)
