"""Loading the model to build: a Hugging Face checkpoint or the embedded tiny hybrid model.

Also finds the SSM layers (the builder refuses models without any) and, on CPU, routes the
models' sequence kernels to their plain-PyTorch paths.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from .options import BuildError

__all__ = [
    "SSMLayer",
    "byte_tokenizer",
    "find_ssm_layers",
    "load_checkpoint",
    "reference_sequence_kernels",
    "tiny_hybrid_model",
]

TINY_CONFIG = Path(__file__).with_name("tiny_hybrid") / "config.json"
#: Seed of the embedded model's random weights: the default build is reproducible byte for byte.
TINY_SEED = 0
_SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")


@dataclass(frozen=True)
class SSMLayer:
    """One SSM mixer of a loaded model: ``kind`` is ``mamba2``, ``gdn`` or ``kda``."""

    name: str
    kind: str
    module: torch.nn.Module


def byte_tokenizer():
    """A byte-level tokenizer: ids 0-2 are ``<pad> <s> </s>``, ids 3-258 the 256 byte values.

    Any text encodes without unknown tokens, so a model with a vocabulary of at least 259 can be
    calibrated on any text; saved with the checkpoint, it makes the output loadable by
    ``AutoTokenizer``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    # ByteLevel maps byte b to a printable character; order the byte tokens by byte value.
    byte_chars = sorted(alphabet, key=lambda ch: _byte_of_char(ch))
    vocab = {tok: i for i, tok in enumerate(_SPECIAL_TOKENS)}
    vocab.update({ch: len(_SPECIAL_TOKENS) + i for i, ch in enumerate(byte_chars)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", model_max_length=1 << 20
    )


def _byte_of_char(ch: str) -> int:
    # GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to 256 + n.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    code = ord(ch)
    if code in printable:
        return code
    others = [b for b in range(256) if b not in printable]
    return others[code - 256]


def tiny_hybrid_model():
    """The embedded Nemotron-H-style hybrid (Mamba-2, attention, MLP and MoE layers, tiny dims)
    with weights drawn from a fixed seed, and its byte-level tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads(TINY_CONFIG.read_text())
    config = AutoConfig.for_model(**data)
    dtype = getattr(torch, data.get("dtype", "float32"))
    fork_devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=fork_devices):
        torch.manual_seed(TINY_SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval(), byte_tokenizer()


def load_checkpoint(model_dir: Path):
    """Load a Hugging Face checkpoint and its tokenizer; every failure is a ``--model`` error."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        json.loads((model_dir / "config.json").read_text())
        config = AutoConfig.from_pretrained(model_dir)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BuildError("--model", f"cannot read {model_dir / 'config.json'}: {err}") from None
    if getattr(config, "quantization_config", None):
        raise BuildError("--model", f"{str(model_dir)!r} is already quantized; expected an unquantized checkpoint")
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            model_dir, config=config, dtype="auto", output_loading_info=True
        )
    except Exception as err:  # noqa: BLE001 - any loader failure means an unusable checkpoint
        raise BuildError("--model", f"cannot load the weights of {str(model_dir)!r}: {type(err).__name__}: {err}") from None
    missing = list(info.get("missing_keys") or [])
    if missing:
        raise BuildError(
            "--model", f"checkpoint {str(model_dir)!r} lacks {len(missing)} weight(s), e.g. {missing[:3]}: incomplete or corrupt"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except Exception:  # noqa: BLE001 - no tokenizer files: fall back below
        tokenizer = None
    if tokenizer is None:
        if config.vocab_size < len(_SPECIAL_TOKENS) + 256:
            raise BuildError("--model", f"{str(model_dir)!r} has no tokenizer and its vocabulary is too small for bytes")
        tokenizer = byte_tokenizer()
    return model.eval(), tokenizer


def find_ssm_layers(model: torch.nn.Module) -> list[SSMLayer]:
    """Every SSM mixer, in module order, recognised by its class name and its parameters."""
    layers = []
    for name, module in model.named_modules():
        cls = type(module).__name__
        params = {n for n, _ in module.named_parameters(recurse=False)}
        children = dict(module.named_children())
        if "Mamba2Mixer" in cls and {"A_log", "dt_bias"} <= params and "in_proj" in children:
            layers.append(SSMLayer(name, "mamba2", module))
        elif "GatedDeltaNet" in cls and {"A_log", "dt_bias"} <= params:
            layers.append(SSMLayer(name, "gdn", module))
        elif "DeltaAttention" in cls and "forget_gate" in children:
            layers.append(SSMLayer(name, "kda", module))
    return layers


@contextlib.contextmanager
def reference_sequence_kernels(model: torch.nn.Module):
    """Route the model's sequence kernels to their plain-PyTorch versions while inside.

    transformers binds the GPU kernel of a package (fla, mamba_ssm, causal_conv1d) at import time
    when the package is installed; those kernels cannot run on CPU tensors. The decorated
    module-level functions keep the PyTorch path as ``__wrapped__``.
    """
    module = sys.modules[type(model).__module__]
    swapped = {}
    for name, fn in list(vars(module).items()):
        if inspect.isfunction(fn) and hasattr(fn, "__wrapped__") and fn.__module__ == module.__name__:
            swapped[name] = fn
            setattr(module, name, inspect.unwrap(fn))
    try:
        yield
    finally:
        for name, fn in swapped.items():
            setattr(module, name, fn)
