"""The benchmarks' ``--derive`` parsing: a listed launch configuration with fields replaced."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _delta_variants  # noqa: E402
import bench_gdn_decode  # noqa: E402
from _derive import field_value, parse_fields, parse_fields_of  # noqa: E402

from trtllm_replayssm.ops.gdn.decode_staged import StagedVariant  # noqa: E402
from trtllm_replayssm.ops.mamba2 import decode as mamba2_decode  # noqa: E402


def test_field_values_and_unknown_fields():
    assert [field_value(t) for t in ("4", " True", "none", "tf32x3")] == [4, True, None, "tf32x3"]
    assert parse_fields("ring_warps=1, flush_stream=false, fold=u,", StagedVariant) == {
        "ring_warps": 1, "flush_stream": False, "fold": "u"}
    with pytest.raises(SystemExit, match="'warps=1' is not field=value of StagedVariant"):
        parse_fields("warps=1", StagedVariant)
    with pytest.raises(SystemExit, match="is not field=value"):
        parse_fields("ring_warps", StagedVariant)
    # "none" is None for an optional field, the word for a string field
    assert parse_fields("flush_max_registers=none, flush_l2_prefetch=none", mamba2_decode.LaunchConfig) == {
        "flush_max_registers": None, "flush_l2_prefetch": "none"}


def test_mamba2_fields_build_a_checked_config():
    base = dataclasses.asdict(mamba2_decode.launch_config("replay", 64, 128, 256))
    cfg = mamba2_decode.LaunchConfig(**dict(base, **parse_fields("flush_warps=2, ring_warps=1", mamba2_decode.LaunchConfig)))
    assert (cfg.flush_warps, cfg.ring_warps, cfg.kernel) == (2, 1, "staged")
    # the config's own validation still applies to a derived one
    with pytest.raises(ValueError, match="flush_block_p"):
        mamba2_decode.LaunchConfig(**dict(base, **parse_fields("flush_block_p=8", mamba2_decode.LaunchConfig)))


def test_gdn_derive_appends_a_named_variant(monkeypatch):
    monkeypatch.setattr(_delta_variants, "VARIANTS", list(_delta_variants.VARIANTS))
    base = "staged flush raw_qk list x4 BV=32 4 warps fold u dot side stream"
    (name,) = _delta_variants.derive_variants([f"{base}: ring_warps=1, block_v=8"])
    assert name == f"{base} + ring_warps=1, block_v=8"
    entry = _delta_variants.VARIANTS[-1]
    parent = dict((n, v) for n, v, _ in _delta_variants.VARIANTS)[base]
    assert entry[0] == name and entry[1] == dataclasses.replace(parent, ring_warps=1, block_v=8)
    for bad in ("rowwise: block_v=8", "no such variant: block_v=8", f"{base} block_v=8"):
        with pytest.raises(SystemExit, match="--derive"):
            _delta_variants.derive_variants([bad])
    # "default" names the ops' choice, not a dataclass: a named refusal pointing at --default-with
    with pytest.raises(SystemExit, match="--derive: .*--default-with"):
        _delta_variants.derive_variants(["default: ring_token_first=true"])


def test_derive_without_variants_is_an_error(usage_error):
    """``--derive`` only feeds a ``--variants`` run; alone it is refused before anything runs."""
    import bench_mamba2_decode

    spec = "staged flush raw_qk list x4 BV=32 4 warps fold u dot side stream: ring_warps=1"
    assert "--derive: only with --variants" in usage_error(lambda: bench_gdn_decode.main("gdn", ["--derive", spec]))
    assert "--derive: only with --variants" in usage_error(lambda: bench_mamba2_decode.main(["--derive", "ring_warps=1"]))


def test_default_with_replaces_fields_of_the_ops_default(usage_error):
    """``bench_gdn_decode.py --default-with``: the ops' default launch at each batch with fields
    replaced, none where that batch's default is another kind of launch or lacks the fields."""
    import _delta_layer

    from trtllm_replayssm.ops.gdn import decode
    from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant

    class KDA:
        per_channel, d_v, window = True, 128, 16

    class GDN:
        per_channel, d_v, window = False, 128, 16

    got = _delta_layer.default_with(KDA, 256, False, {"block_v": 64, "read_stages": 3})
    assert got == dataclasses.replace(decode.default_variant(256, True, False, 128, 16), block_v=64, read_stages=3)
    assert _delta_layer.default_with(KDA, 1, False, {"block_v": 64}) is None  # write-through there
    assert _delta_layer.default_with(GDN, 256, False, {"read_stages": 3}) is None  # one-launch: no such field
    assert _delta_layer.default_with(GDN, 256, False, {"stages": 2}) == FusedVariant(block_v=64, stages=2,
                                                                                       flush_stages=0)
    assert "--default-with: 'bogus=1' is not 'field=value, ...' of StagedVariant or of FusedVariant" in usage_error(
        lambda: bench_gdn_decode.main("kda", ["--default-with", "bogus=1"]))


def test_default_with_reaches_each_batch(monkeypatch):
    """The CLI hands ``--default-with``'s fields to every batch's timing (an early version let
    ``--derive``'s list shadow them, so the rows never appeared); the GPU timing itself is
    replaced by a recorder here."""
    seen = []
    monkeypatch.setattr(bench_gdn_decode, "Layer", lambda *a, **k: None)
    monkeypatch.setattr(bench_gdn_decode, "require_cuda", lambda p: None)  # the GPU work below is stubbed
    monkeypatch.setattr(bench_gdn_decode, "device_info", lambda: {})
    monkeypatch.setattr(bench_gdn_decode, "copy_bandwidth_gbps", lambda: 1.0)
    modes = []  # the flush mode the CLI asks for
    monkeypatch.setattr(bench_gdn_decode, "L2Flusher",
                        lambda mode=None: modes.append(mode) or types.SimpleNamespace(mode=mode or "write"))
    monkeypatch.setattr(bench_gdn_decode, "graph_floor_us", lambda *a: 0.0)
    monkeypatch.setattr(bench_gdn_decode, "SameSizeCopy", lambda *a: type("C", (), {"cache": {}})())
    monkeypatch.setattr(bench_gdn_decode, "print_table", lambda rows, kind: None)
    monkeypatch.setattr(bench_gdn_decode, "bench_batch",
                        lambda layer, batch, *a: seen.append((batch, a[-3], a[-2], a[-1])) or [
                            {"batch": batch, "mode": "standard", "us": 1.0}])
    bench_gdn_decode.main("gdn", ["--batches", "128", "256", "--default-with", "block_v=32, read_stages=2",
                                  "stages=3", "--fused", "block_v=64, stages=2", "", "--staged", "read_stages=2",
                                  "--l2-flush", "read"])
    assert modes == ["read"]
    want = [{"block_v": 32, "read_stages": 2}, {"stages": 3}]
    fused = [{"block_v": 64, "stages": 2}, {}]
    staged = [{"read_stages": 2}]
    assert seen == [(128, want, fused, staged), (256, want, fused, staged)]


@pytest.mark.parametrize("kind,spec,error", [
    ("gdn", "read_stages=2", "--fused: 'read_stages=2' is not 'field=value, ...' of FusedVariant"),
    ("gdn", "stages=-1", "--fused: 'stages=-1' is not 'field=value, ...' of FusedVariant (FusedVariant.stages: "
                         "expected"),
    ("kda", "stages=2", "--fused: Gated DeltaNet only"),
])
def test_fused_rows_reject_bad_fields(kind, spec, error, usage_error):
    """``--fused``: fields of ``FusedVariant`` only, Gated DeltaNet only, checked before anything runs."""
    assert error in usage_error(lambda: bench_gdn_decode.main(kind, ["--fused", spec]))


def test_parse_fields_of_picks_the_class_with_every_key():
    from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant

    classes = (StagedVariant, FusedVariant)
    assert parse_fields_of("read_stages=2, block_v=32", classes) == (StagedVariant, {"read_stages": 2, "block_v": 32})
    assert parse_fields_of("stages=3, flush_stages=0", classes) == (FusedVariant, {"stages": 3, "flush_stages": 0})
    for bad in ("read_stages=2, flush_stages=0", "", "bogus=1"):
        with pytest.raises(SystemExit, match="is not field=value of StagedVariant or of FusedVariant"):
            parse_fields_of(bad, classes)


@pytest.mark.parametrize("kind,spec,error", [
    ("gdn", "stages=2, fold_chunk=16", "--staged: 'stages=2, fold_chunk=16' is not 'field=value, ...' of StagedVariant"),
    ("gdn", "read_stages=-1", "--staged: 'read_stages=-1' is not 'field=value, ...' of StagedVariant"),
    ("kda", "read_stages=2", "--staged: Gated DeltaNet only"),
])
def test_staged_rows_reject_bad_fields(kind, spec, error, usage_error):
    """``--staged``: fields of ``StagedVariant`` that its default accepts, Gated DeltaNet only,
    checked before anything runs."""
    assert error in usage_error(lambda: bench_gdn_decode.main(kind, ["--staged", spec]))


def test_staged_with_is_the_staged_default_where_the_one_launch_step_serves():
    """At 128-256 the ops take the one-launch step; ``staged_with`` gives the staged step they
    take below it (its list flush, the re-read fold from batch 160) with the fields replaced."""
    import types

    from _delta_layer import staged_with

    from trtllm_replayssm.ops.gdn import decode
    from trtllm_replayssm.ops.gdn.decode_fused import FusedVariant

    gdn = types.SimpleNamespace(per_channel=False, d_v=128, window=16)
    assert isinstance(decode.default_variant(256, False, False, 128, 16), FusedVariant)
    at_256 = staged_with(gdn, 256, {"block_v": 32, "read_stages": 2})
    assert isinstance(at_256, StagedVariant) and (at_256.block_v, at_256.read_stages) == (32, 2)
    assert dataclasses.replace(at_256, block_v=8, read_stages=0) == decode.default_variant(256, False, False, 128, 17)
    assert at_256.flush_reread and not staged_with(gdn, 128, {}).flush_reread
    assert staged_with(gdn, 4, {}) is None  # the write-through step


def test_mamba2_variant_label_names_the_cuda_flush():
    import _mamba2_variants as variants

    default = mamba2_decode.launch_config("replay", 64, 128, 256)
    # the default from batch 192 (its items from a counter in chunks of 2, tapered, when half the
    # rows flush, at most 4 stages), whose ring launch also stores the token's ring x
    assert variants.short(default).endswith("+flush cuda_ws smax4 side auto2t2 ring-x-in-ring")
    cuda = dataclasses.replace(default, flush_impl="cuda", flush_cuda_rows=2)
    assert "+flush cuda h16 b4 rows2 side" in variants.short(cuda)
    # the same with the next item asked of the L2
    base = dataclasses.replace(default, flush_ws_l2_ahead=1)
    assert variants.short(base).endswith("+flush cuda_ws smax4 side auto2t2 l2a1 ring-x-in-ring")
    assert variants.short(dataclasses.replace(base, ring_x_in_ring=False)).endswith(
        "+flush cuda_ws smax4 side auto2t2 l2a1")
    assert variants.short(dataclasses.replace(base, flush_ws_order="stride", flush_ws_taper=0)).endswith(
        "+flush cuda_ws smax4 side l2a1 ring-x-in-ring")
    unasked = dataclasses.replace(base, flush_ws_l2_ahead=0, flush_ws_max_stages=0, flush_ws_taper=0, flush_ws_chunk=4)
    assert variants.short(unasked).endswith("+flush cuda_ws side auto4 ring-x-in-ring")
    assert "s4 side" in variants.short(dataclasses.replace(unasked, flush_ws_stages=4))
    assert variants.short(dataclasses.replace(unasked, flush_ws_consumers=8)).endswith("auto4 cw8 ring-x-in-ring")
    assert " cw" not in variants.short(unasked)
    # the stream launch's register cap, in both CUDA flush forms' labels
    assert variants.short(dataclasses.replace(base, max_registers=48)).startswith("staged bp16 w2 r48 +flush cuda_ws")
    assert variants.short(dataclasses.replace(cuda, max_registers=40)).startswith("staged bp16 w2 r40 +flush cuda h16")
    assert " r" not in variants.short(base).partition("+flush")[0]
    # below batch 192 the default caps the stages at 3
    assert variants.short(mamba2_decode.launch_config("replay", 64, 128, 128)).endswith(
        "cuda_ws smax3 side auto2t2 ring-x-in-ring")
    triton = dataclasses.replace(base, flush_impl="triton", flush_ws_l2_ahead=0)
    assert "cuda" not in variants.short(triton)
    # the ring launch's warps, in every flush form's label
    assert variants.short(dataclasses.replace(base, ring_warps=8)).endswith("side auto2t2 l2a1 rw8 ring-x-in-ring")
    assert " rw2 " in variants.short(dataclasses.replace(triton, ring_warps=2))
    # the token's dt entry stored as its whole sector
    assert variants.short(dataclasses.replace(base, ring_dt_sector=True)).endswith(
        "auto2t2 l2a1 ring-x-in-ring dt-sector")
    # the counter's last items one at a time
    assert "side auto4t2 ring-x-in-ring" in variants.short(dataclasses.replace(unasked, flush_ws_taper=2))
    # the producer's L2 prefetch of its next item
    assert "side auto4 l2a2 ring-x-in-ring" in variants.short(dataclasses.replace(unasked, flush_ws_l2_ahead=2))


def test_mamba2_derive_takes_the_ring_dt_layout():
    """``--derive "ring_dt_layout=entries, ..."``: the state's ring_dt storage beside LaunchConfig
    fields; the variant's label marks it, and a layout that is not one of the state's is refused."""
    import _mamba2_variants as variants

    base = dataclasses.asdict(mamba2_decode.launch_config("replay", 64, 128, 256))
    # alone: the default launch at each batch on that state
    assert variants.split_variant(variants.parse_variant("ring_dt_layout=entries", base)) == ({}, "entries")
    kw = variants.parse_variant("ring_dt_layout=entries, ring_warps=2", base)
    fields, layout = variants.split_variant(kw)
    assert layout == "entries" and fields == dict(base, ring_warps=2)
    assert mamba2_decode.LaunchConfig(**fields).ring_warps == 2
    assert variants.split_variant(variants.parse_variant("ring_dt_sector=true", base)) == (
        dict(base, ring_dt_sector=True), "heads")
    assert variants.split_variant(variants.parse_variant("", base)) == (base, "heads")
    assert variants.layout_label("entries") == " ringE" and variants.layout_label("heads") == ""
    with pytest.raises(SystemExit, match=r"--derive: ring_dt_layout expected one of \('heads', 'entries'\), got 'rows'"):
        variants.parse_variant("ring_dt_layout=rows", base)
    with pytest.raises(SystemExit, match="is not field=value of LaunchConfig"):
        variants.parse_variant("ring_dt_layout=entries, warps=2", base)
