"""After a build: decode with the built SSM weights, ReplaySSM against standard decode.

For the first SSM layer of each kind, the layer's weights are read back from the built
checkpoint (quantized projections decoded), loaded into the package's decode-side layer, and
the same random inputs are decoded in both modes over a few windows (2 slots, staggered
flushes). The reported agreement is the largest output difference relative to the largest
output; in exact arithmetic the two modes agree exactly (replayssm-math.md section 2).
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass

import torch

from ..config import ReplaySSMConfig

__all__ = ["LAYER_CLASSES", "DecodeCheck", "load_built_weights", "run_decode_check", "snapshot_first_layers"]

#: kind -> (module, class) of the decode-side layer with ``from_hf(module, config, slots, mode=, backend=)``.
LAYER_CLASSES = {
    "mamba2": ("trtllm_replayssm.layers.mamba2", "ReplayMamba2Mixer"),
    "gdn": ("trtllm_replayssm.layers.gdn", "ReplayGatedDeltaNet"),
    "kda": ("trtllm_replayssm.layers.kda", "ReplayKimiDeltaAttention"),
}
#: Relative agreement the check calls a pass (fp32 activations and state).
AGREEMENT_TOLERANCE = 1e-4


@dataclass
class DecodeCheck:
    """Outcome for one layer: ``status`` is ``passed``, ``failed`` or ``skipped``."""

    kind: str
    layer: str
    status: str
    max_rel_diff: float | None = None
    state_rel_diff: float | None = None
    tokens: int = 0
    backend: str = ""
    state_config: str = ""
    note: str = ""

    def line(self) -> str:
        if self.status == "skipped":
            return f"  {self.kind:7s} {self.layer}: skipped ({self.note})"
        state = "" if self.state_rel_diff is None else f", state {self.state_rel_diff:.2e}"
        return (f"  {self.kind:7s} {self.layer}: {self.status}, max |replay - standard| / max |standard|: "
                f"output {self.max_rel_diff:.2e}{state} over {self.tokens} tokens x 2 slots ({self.backend} backend, "
                f"{self.state_config}){' - ' + self.note if self.note else ''}")


def snapshot_first_layers(ssm_layers) -> list[tuple[str, str, torch.nn.Module]]:
    """``(name, kind, float32 copy)`` of the first layer of each kind, taken before quantization
    replaces its Linear modules."""
    seen, out = set(), []
    for layer in ssm_layers:
        if layer.kind not in seen:
            seen.add(layer.kind)
            out.append((layer.name, layer.kind, copy.deepcopy(layer.module).float().cpu()))
    return out


def load_built_weights(module: torch.nn.Module, module_name: str, built: dict[str, torch.Tensor], model) -> None:
    """Copy the built checkpoint's weights of ``module_name`` into ``module``.

    The checkpoint stores tensors under the checkpoint's names (``backbone.`` prefixes, Kimi
    Linear's separate ``q/k/v_conv1d``, ...). Each in-memory parameter is mapped to them with
    transformers' own reverse conversion; a parameter the conversion splits (a fused conv) is
    reassembled along dim 0 in the order the split produced.
    """
    from transformers.core_model_loading import revert_weight_conversion

    with torch.no_grad():
        for name, param in module.state_dict().items():
            full = f"{module_name}.{name}"
            pieces = revert_weight_conversion(model, {full: param})
            try:
                parts = [built[key] for key in pieces]
            except KeyError as err:
                raise ValueError(f"built checkpoint: no tensor {err} for {full}") from None
            source = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
            if source.shape != param.shape:
                raise ValueError(f"built checkpoint: {list(pieces)} give shape {tuple(source.shape)}, {full} has {tuple(param.shape)}")
            param.copy_(source.to(param.dtype))


def _layer_class(kind: str):
    module_name, class_name = LAYER_CLASSES[kind]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    if class_name is not None:
        return getattr(module, class_name, None)
    for value in vars(module).values():
        if isinstance(value, type) and hasattr(value, "from_hf") and value.__module__ == module.__name__:
            return value
    return None


def _from_hf(cls, module, config, mode):
    """The layer on the GPU kernels (``triton`` backend) where CUDA is present and the layer has
    them, else on the reference ops; returns ``(layer, backend name)``."""
    if torch.cuda.is_available():
        try:
            # the layer allocates its state where the module's weights are
            return cls.from_hf(copy.deepcopy(module).cuda(), config, slots=2, mode=mode, backend="triton"), "triton"
        except ValueError as err:
            if "backend" not in str(err):
                raise
    return cls.from_hf(module, config, slots=2, mode=mode, backend="reference"), "reference"


def run_decode_check(name: str, kind: str, module: torch.nn.Module, replay: ReplaySSMConfig,
                     windows: int = 3, seed: int = 0) -> DecodeCheck:
    """Decode ``windows * window + 3`` random tokens with ReplaySSM and standard state.

    Compares the outputs at every token and, where the layer exposes ``current_ssm_state``,
    the recurrent states at the end (the output of a freshly initialised layer can be dominated
    by its skip connection, the state cannot).
    """
    cls = _layer_class(kind)
    if cls is None:
        return DecodeCheck(kind, name, "skipped", note=f"no decode-side {kind} layer in this installation")
    config, note = replay, ""
    try:
        replay_layer, backend = _from_hf(cls, module, config, "replay")
    except ValueError as err:
        if "config" not in str(err):
            raise
        # The layer may not hold the split-precision state yet: check the replay algebra with an
        # FP32 checkpoint and the configured window / draft room.
        config = ReplaySSMConfig(window=replay.window, max_draft_tokens=replay.max_draft_tokens)
        note = f"configured {replay.checkpoint_spec}/{replay.read_format} state not held by this layer; FP32 checkpoint checked"
        replay_layer, backend = _from_hf(cls, module, config, "replay")
    standard_layer, _ = _from_hf(cls, module, config, "standard")
    device = next(replay_layer.parameters()).device
    tokens = windows * config.window + 3
    generator = torch.Generator().manual_seed(seed)
    hidden_size = getattr(replay_layer, "hidden_size", None) or module.hidden_size
    inputs = torch.randn(tokens, 2, hidden_size, generator=generator) * 0.5
    diff, scale = 0.0, 0.0
    for t in range(tokens):
        x = inputs[t].to(device=device, dtype=next(replay_layer.parameters()).dtype)
        y_replay = replay_layer.decode(x).double()
        y_standard = standard_layer.decode(x).double()
        diff = max(diff, (y_replay - y_standard).abs().max().item())
        scale = max(scale, y_standard.abs().max().item())
    rel = diff / max(scale, 1e-30)
    state_rel = None
    if hasattr(replay_layer, "current_ssm_state") and hasattr(standard_layer, "current_ssm_state"):
        slots = torch.arange(2, device=device)
        s_replay = replay_layer.current_ssm_state(slots).double().cpu()
        s_standard = standard_layer.current_ssm_state(slots).double().cpu()
        state_rel = (s_replay - s_standard).abs().max().item() / max(s_standard.abs().max().item(), 1e-30)
    worst = max(rel, state_rel or 0.0)
    status = "passed" if worst <= AGREEMENT_TOLERANCE else "failed"
    return DecodeCheck(kind, name, status, rel, state_rel, tokens, backend,
                       f"{config.checkpoint_spec} checkpoint, L={config.window}", note)
