"""ReplaySSMConfig: validation names the field, derived values, dict / YAML round trips."""

import pytest

from trtllm_replayssm.config import CHECKPOINT_DTYPES, READ_FORMATS, ReplaySSMConfig


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"window": 0}, "window"),
        ({"window": -3}, "window"),
        ({"window": 2.5}, "window"),
        ({"window": True}, "window"),
        ({"max_draft_tokens": -1}, "max_draft_tokens"),
        ({"window": 4, "max_draft_tokens": 5}, "max_draft_tokens"),
        ({"window": 32, "max_draft_tokens": 17}, "max_draft_tokens"),
        ({"checkpoint_dtype": "fp64"}, "checkpoint_dtype"),
        ({"checkpoint_dtype": "int8"}, "checkpoint_dtype"),
        ({"read_format": "mxfp4"}, "read_format"),
        ({"stochastic_rounding": True}, "stochastic_rounding"),
        ({"stochastic_rounding": 1, "checkpoint_dtype": "fp16"}, "stochastic_rounding"),
        ({"sr_seed": -1}, "sr_seed"),
        ({"flush_stagger": "yes"}, "flush_stagger"),
        ({"checkpoint_dtype": "fp8", "read_format": "bf16"}, "read_format"),
    ],
)
def test_invalid_combinations_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"ReplaySSMConfig\.{field}"):
        ReplaySSMConfig(**kwargs)


def test_unknown_field_in_dict_is_rejected():
    with pytest.raises(ValueError, match="unknown field.*windw"):
        ReplaySSMConfig.from_dict({"windw": 8})


_WIDTH = {"none": 0, "fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "nvfp4": 4.5}
_VALID = [(d, r) for d in CHECKPOINT_DTYPES for r in READ_FORMATS if _WIDTH[r] <= _WIDTH[d]]


@pytest.mark.parametrize("dtype, read", _VALID)
def test_every_valid_combination_round_trips(dtype, read, tmp_path):
    cfg = ReplaySSMConfig(
        window=8,
        max_draft_tokens=3,
        checkpoint_dtype=dtype,
        stochastic_rounding=dtype != "fp32",
        sr_seed=1234,
        read_format=read,
        flush_stagger=False,
    )
    assert ReplaySSMConfig.from_dict(cfg.to_dict()) == cfg
    assert ReplaySSMConfig.from_yaml(cfg.to_yaml()) == cfg
    path = tmp_path / "replayssm.yaml"
    cfg.to_yaml(path)
    assert ReplaySSMConfig.from_yaml(path) == cfg
    assert ReplaySSMConfig.from_yaml(str(path)) == cfg


def test_derived_values():
    cfg = ReplaySSMConfig(window=16, max_draft_tokens=4)
    assert cfg.ring_capacity == 20
    assert [cfg.first_flush_at(s) for s in (0, 1, 15, 16, 17)] == [16, 15, 1, 16, 15]
    assert cfg.replace(flush_stagger=False).first_flush_at(5) == 16
    assert ReplaySSMConfig.from_checkpoint_spec("bf16-sr").checkpoint_spec == "bf16-sr"
    assert ReplaySSMConfig.from_checkpoint_spec("fp32", read_format="nvfp4").read_format == "nvfp4"
    with pytest.raises(ValueError, match="ssm checkpoint"):
        ReplaySSMConfig.from_checkpoint_spec("fp32-sr")
    with pytest.raises(ValueError, match="ReplaySSMConfig.window"):
        cfg.replace(window=0)
