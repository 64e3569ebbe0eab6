"""``benchmarks/probe_memory_rates.py`` without a GPU: which forms it times, the source each form
compiles from, its argument checks, and (where an NVRTC library is installed) that every form
compiles for sm_90 and sm_100 with the load and store instructions it names."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import probe_memory_rates as probe  # noqa: E402
from trtllm_replayssm.ops import _nvrtc  # noqa: E402


def test_forms_store_only_where_the_kind_stores():
    forms = list(probe.forms(list(probe.KINDS), list(probe.LOADS), list(probe.STORES), [2, 4], [256], list(probe.GRIDS)))
    for kind, load, store, *_ in forms:
        assert (store == "-") == (kind not in ("rmw", "copy")), (kind, store)
    kinds = {f[0] for f in forms}
    assert kinds == set(probe.KINDS)
    # The C++ dereference of a const __restrict__ pointer may not read a buffer the kernel writes.
    assert not any(kind == "rmw" and load == "cpp" for kind, load, *_ in forms)
    assert any(kind == "rmw" and load == "nc" for kind, load, *_ in forms)
    # rows_smem indexes its rows by block: one pass only; rows_end keeps a block's passes.
    assert not any(kind == "rows_smem" and grid != "grid" for kind, *_, grid in forms)
    assert {grid for kind, *_, grid in forms if kind == "rows_end"} == {"loop"}
    assert {grid for kind, *_, grid in forms if kind == "rows_ops_end"} == {"loop"}
    assert {grid for kind, *_, grid in forms if kind == "rows_ops"} == set(probe.GRIDS)
    # Each read-like form once per (load, U, threads, grid), not once per store form.
    reads = [f for f in forms if f[0] == "read"]
    assert len(reads) == len(probe.LOADS) * 2 * 1 * len(probe.GRIDS)


@pytest.mark.parametrize("load", list(probe.LOADS))
def test_source_carries_the_named_load(load):
    src = probe.source(load, "cs")
    op = probe.LOADS[load]
    if op is None:
        assert "v = *p;" in src
    else:
        assert f'asm volatile("{op} {{%0,%1,%2,%3}}, [%4];"' in src
    assert "st.global.cs.v4.f32 [%0]" in src
    assert "@LOAD@" not in src and "@STORE@" not in src


@pytest.mark.parametrize("argv,match", [
    (["--units", "3"], "--units takes powers of two"),
    (["--threads", "0"], "--threads takes powers of two"),
    (["--mib", "0"], "--mib must be positive"),
    (["--every", "0"], "--every must be positive"),
    (["--min-blocks", "0"], "--min-blocks must be positive"),
    (["--kinds", "rows_ops", "--mib", "6"], "--mib: rows_ops needs whole batch rows of 4 MiB"),
    (["--kinds", "scan"], "invalid choice"),
])
def test_bad_arguments_name_the_option(argv, match, usage_error):
    assert match in usage_error(lambda: probe.main(argv))


def _ptx(kind, load, store, u, threads, grid, arch):
    """The probe's PTX for one form, compiled by NVRTC for ``arch``."""
    defines = tuple((k, str(v)) for k, v in probe.defines_for(kind, u, threads, grid).items())
    return _nvrtc.compile_ptx(probe.source(load, store), "mem_rate", arch, defines)


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC library here (the nvidia-cuda-nvrtc wheel)")
@pytest.mark.parametrize("arch", [90, 100])
def test_every_form_compiles_with_its_instructions(arch):
    for kind, load, store, u, threads, grid in probe.forms(list(probe.KINDS), list(probe.LOADS), list(probe.STORES),
                                                           [4], [256], list(probe.GRIDS)):
        ptx = _ptx(kind, load, store if store in probe.STORES else "st", u, threads, grid, arch)
        loads = set(re.findall(r"\bld\.global[\w.:]*\.v4\.f32", ptx))
        # NVRTC emits the non-coherent load for a C++ read through a const __restrict__ pointer.
        named = probe.LOADS[load] or "ld.global.nc.v4.f32"
        if kind in probe.OPS_KINDS:
            # Beside the rows, the group's C is one plain 16-byte load a lane.
            assert loads <= {named, "ld.global.v4.f32"} and named in loads, (kind, load, loads)
        else:
            assert loads == {named}, (kind, load, loads)
        stores = set(re.findall(r"\bst\.global[\w.:]*\.v4\.f32", ptx))
        assert stores == ({probe.STORES[store]} if kind in ("rmw", "copy") else set()), (kind, store, stores)
        # The counter form takes each pass from one 64-bit counter and counts its finished blocks.
        assert len(re.findall(r"\batom\.global\.add\.u64", ptx)) == (3 if grid == "counter" else 0), (kind, grid)


def _ptx_lines(kind):
    """The probe's sm_90 PTX, line by line, for ``kind`` as a plain-load ``loop`` form (U 4, 256 threads)."""
    return _ptx(kind, "plain", "st", 4, 256, "loop", 90).splitlines()


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC library here (the nvidia-cuda-nvrtc wheel)")
@pytest.mark.parametrize("kind", probe.END_KINDS)
def test_end_kinds_store_only_after_the_reads(kind):
    lines = _ptx_lines(kind)
    loads = [i for i, line in enumerate(lines) if re.search(r"\bld\.global", line)]
    stores = [i for i, line in enumerate(lines) if re.search(r"\bst\.global", line)]
    barrier = [i for i, line in enumerate(lines) if "bar.sync" in line]
    # The sums go to shared memory inside the loop and to global memory after the block's barrier.
    assert loads and stores and barrier
    assert max(loads) < min(barrier) < min(stores)
    assert any(re.search(r"\bst\.shared", line) for line in lines[:min(barrier)])


def test_ops_bytes_lay_out_whole_batch_rows():
    # 8 MiB: two batch rows of 128 heads x 64 rows of 128 fp32.
    c, lines, ring = probe.ops_bytes((8 << 20) // 16)
    heads = 2 * 128
    assert c == heads // 16 * 128 * 4
    assert lines == heads * 18 * 4
    assert ring == 2 * 16 * 128 * 64 * 2
    with pytest.raises(ValueError, match="whole batch rows"):
        probe.ops_bytes((2 << 20) // 16)


@pytest.mark.skipif(_nvrtc.find_nvrtc() is None, reason="no NVRTC library here (the nvidia-cuda-nvrtc wheel)")
def test_rows_ops_reads_ring_entries_and_stores_among_its_loads():
    lines = _ptx_lines("rows_ops_end")
    # The ring entries are 16-bit loads; the stored-as-they-come form stores among its loads.
    assert any(re.search(r"\bld\.global(\.nc)?\.u16", line) for line in lines)
    lines = _ptx_lines("rows_ops")
    loads = [i for i, line in enumerate(lines) if re.search(r"\bld\.global", line)]
    stores = [i for i, line in enumerate(lines) if re.search(r"\bst\.global\.f32", line)]
    assert stores and min(stores) < max(loads)
