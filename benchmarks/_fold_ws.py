"""Launches of ``fold_ws.cu`` (the warp-specialised window fold), ``fold_grid.cu`` (the fold as a
grid of small blocks) and ``fold_mma.cu`` (that grid with the product on the tensor cores) for
``bench_fold_ceiling.py``.

Warp-specialised shapes are named ``cuda ws c<consumer warps> s<stages> b<blocks per SM> h<heads per
stage> <stores>[ l<load chunks>][ none]`` (``none``: no product); grid shapes ``cuda grid r<rows per
warp> w<warps> b<blocks per SM>[ xs][ ys| ys32][ persist[ ahead| counter]][ none]`` (`` full``: a persistent
shape's wave at every block that fits); tensor-core shapes ``cuda mma w<warps> b<blocks per SM>
x<bf16 parts of X>[ yf][ persist]``. Timed warm on an H200 (benchmarks/NOTES_mamba2.md, thirty-third
run) at Nemotron-H dims: the grid fold at 100.5% of copy, the warp-specialised fixed wave at 97.6%,
the MMA grid at 96.0%, fixed waves of the grid's blocks at 88-93% (striding). On an H100 (fifty-fifth
run) the 64-row blocks ran at 99.9% as a grid, 95% as a striding wave and 99.7% as a wave that takes
its items from a counter (`` counter``), the warp-specialised form at 96.8%.

The kernels are compiled by NVRTC for the device's architecture (``trtllm_replayssm/ops/_nvrtc.py``);
``fold_ws`` needs ``cp.async.bulk`` and mbarrier transaction counts (sm_90 and later).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

KERNEL_FILE = Path(__file__).with_name("fold_ws.cu")
BULK_COPY_FILE = Path(__file__).resolve().parents[1] / "trtllm_replayssm" / "ops" / "_bulk_copy.cuh"
GRID_FILE = Path(__file__).with_name("fold_grid.cu")
MMA_FILE = Path(__file__).with_name("fold_mma.cu")
#: (rows per warp, warps per block, blocks per SM asked of ptxas, no product, X through shared
#: memory, Y through shared memory (2: widened to fp32 there)[, persistent (2: each warp's next tile
#: loaded ahead; 3: the items taken from a counter)]) of ``fold_grid``.
GRID_SHAPES = ((8, 2, 8, False, False, False), (8, 2, 8, True, False, False), (4, 2, 16, False, False, False),
               (4, 4, 8, False, False, False), (8, 4, 4, False, False, False), (16, 1, 8, False, False, False),
               (8, 1, 16, False, False, False), (8, 2, 8, False, True, False), (8, 1, 16, False, True, False),
               (8, 2, 8, False, True, True), (8, 4, 4, False, True, True), (8, 8, 2, False, True, True),
               (16, 4, 2, False, True, True), (4, 8, 4, False, False, True), (16, 2, 4, False, True, True),
               (8, 2, 12, False, True, True), (8, 4, 6, False, True, True), (8, 8, 3, False, True, True),
               (8, 8, 2, False, True, 2), (16, 4, 2, False, True, 2), (8, 4, 4, False, True, 2),
               (8, 8, 2, False, True, True, True), (16, 4, 2, False, True, True, True),
               (8, 4, 4, False, True, True, True), (8, 8, 3, False, True, 2, True),
               (8, 1, 16, False, True, True), (8, 1, 16, True, False, False), (8, 1, 16, False, True, True, True),
               (8, 2, 8, False, True, True, True), (8, 1, 12, False, True, True, 2), (8, 2, 6, False, True, True, 2),
               (8, 8, 2, False, True, True, 2), (8, 4, 3, False, True, True, 2),
               (8, 8, 2, False, True, True, 3), (8, 4, 4, False, True, True, 3), (8, 2, 8, False, True, True, 3),
               (16, 4, 2, False, True, True, 3), (8, 1, 16, False, True, True, 3), (8, 8, 2, True, True, True, 3))
#: (warps per block, blocks per SM asked of ptxas, bf16 parts of X, Y pre-arranged as B fragments,
#: persistent) of ``fold_mma``.
MMA_SHAPES = ((4, 4, 3, False, False), (4, 4, 3, True, False), (4, 3, 3, True, False), (2, 8, 3, False, False),
              (2, 8, 3, True, False), (1, 16, 3, True, False), (4, 4, 2, True, False),
              (4, 4, 3, True, True), (2, 8, 3, True, True), (4, 4, 3, False, True), (8, 2, 3, True, True))
#: ``fold_ws``'s parameters: S, X, Y, a, C, out, then the number of head tiles.
SIGNATURE = (ctypes.c_void_p,) * 6 + (ctypes.c_int32,)
#: ``fold_mma``'s: the same pointers, then the number of blocks' items (rows / (rows per warp x warps)).
MMA_SIGNATURE = (ctypes.c_void_p,) * 6 + (ctypes.c_int32,)
#: ``fold_grid``'s: those, then the counter of its counter-fed wave (two uint64, zero between launches).
GRID_SIGNATURE = MMA_SIGNATURE + (ctypes.c_void_p,)
BARRIER_BYTES = 128
#: Stores: from registers, by a bulk copy per warp out of the stage (``lag``: the stage released a
#: tile later, the copy left in flight meanwhile), or none (a read ceiling).
STORES = {"reg": 0, "bulk": 1, "nostore": 2, "lag": 1, "pstore": 3, "plag": 3}
#: (consumer warps, stages, blocks per SM, no product, store, load chunks, heads per stage). A block
#: holds at most 227 KB of stages: Nemotron-H's 36 KB head stages (tile and X) fit 5, two heads
#: (76 KB) fit 2; Gated DeltaNet's 72 KB head stages 2.
SHAPES = ((16, 5, 1, False, "bulk", 1, 1), (16, 5, 1, True, "bulk", 1, 1), (16, 5, 1, True, "nostore", 1, 1),
          (16, 5, 1, False, "reg", 1, 1), (16, 5, 1, False, "lag", 1, 1), (8, 5, 1, False, "bulk", 1, 1),
          (16, 2, 1, False, "bulk", 1, 2), (16, 2, 1, False, "bulk", 1, 1), (8, 2, 1, False, "bulk", 1, 1),
          (16, 2, 1, True, "bulk", 1, 1), (16, 2, 1, True, "nostore", 1, 1),
          (16, 5, 1, False, "pstore", 1, 1), (16, 5, 1, True, "pstore", 1, 1), (16, 5, 1, False, "plag", 1, 1),
          (8, 5, 1, False, "pstore", 1, 1), (16, 4, 1, False, "pstore", 1, 1), (16, 2, 1, False, "pstore", 1, 1),
          (16, 2, 1, True, "pstore", 1, 1), (16, 2, 1, False, "plag", 1, 1), (8, 2, 1, False, "pstore", 1, 1))


def ws_source() -> str:
    """``fold_ws.cu`` behind the package's barrier and bulk-copy helpers."""
    return BULK_COPY_FILE.read_text() + "\n" + KERNEL_FILE.read_text()


def stage_bytes(head_dim: int, d_state: int, window: int, heads: int = 1) -> int:
    """Bytes of one stage of ``heads`` heads: their ``[head_dim, d_state]`` fp32 tiles and ``X``
    ``[window, head_dim]`` fp32, the group's ``Y`` ``[window, d_state]`` and ``C`` ``[d_state]`` bf16."""
    return heads * (head_dim * d_state * 4 + window * head_dim * 4) + window * d_state * 2 + d_state * 2


def defines(head_dim: int, d_state: int, window: int, hpg: int, warps: int, stages: int, blocks: int,
            nofold: bool, store: str = "reg", chunks: int = 1, heads: int = 1) -> dict:
    return dict(P=head_dim, N=d_state, J=window, HPG=hpg, CW=warps, STAGES=stages, MIN_BLOCKS=blocks,
                NOFOLD=int(nofold), STORE=STORES[store], STORE_LAG=int(store in ("lag", "plag")), LOAD_CHUNKS=chunks,
                HS=heads)


def grid_defines(head_dim: int, d_state: int, window: int, hpg: int, rows_per_warp: int, warps: int, blocks: int,
                 nofold: bool, x_shared: bool = False, y_shared: int = 0, persistent: int = 0) -> dict:
    return dict(P=head_dim, N=d_state, J=window, HPG=hpg, RW=rows_per_warp, WARPS=warps, MIN_BLOCKS=blocks,
                NOFOLD=int(nofold), XS=int(x_shared), YS=int(y_shared), PERSIST=int(bool(persistent)),
                AHEAD=int(persistent == 2), COUNTER=int(persistent == 3))


def grid_name(rows_per_warp: int, warps: int, blocks: int, nofold: bool, x_shared: bool, y_shared: int,
              persistent: int = 0) -> str:
    return (f"cuda grid r{rows_per_warp} w{warps} b{blocks}" + " xs" * x_shared + " ys" * (y_shared == 1)
            + " ys32" * (y_shared == 2) + " persist" * bool(persistent) + " ahead" * (persistent == 2)
            + " counter" * (persistent == 3)
            + " none" * nofold)


def mma_name(warps: int, blocks: int, split: int, pre_arranged: bool, persistent: bool) -> str:
    return (f"cuda mma w{warps} b{blocks} x{split}" + " yf" * pre_arranged + " persist" * persistent)


def mma_defines(head_dim: int, hpg: int, warps: int, blocks: int, split: int, pre_arranged: bool,
                persistent: bool) -> dict:
    return dict(P=head_dim, N=128, J=16, HPG=hpg, WARPS=warps, MIN_BLOCKS=blocks, SPLIT=split, YF=int(pre_arranged),
                PERSIST=int(persistent))


def b_fragments(Y):
    """``Y`` ``[groups, 16, 128]`` bf16 as ``fold_mma.cu``'s B fragments, ``[groups, 16 n-tiles, 32
    lanes, 4]``: lane ``(n, q)`` of n-tile ``t`` holds ``Y[4q .. 4q + 3]`` of column
    ``16 (t // 2) + 4 (n // 2) + n % 2 + 2 (t % 2)``."""
    import torch

    t = torch.arange(16, device=Y.device)[:, None]
    lane = torch.arange(32, device=Y.device)[None, :]
    n, q = lane // 4, lane % 4
    col = 16 * (t // 2) + 4 * (n // 2) + n % 2 + 2 * (t % 2)  # [16, 32]
    j = 4 * q[..., None] + torch.arange(4, device=Y.device)  # [1, 32, 4]
    return Y[:, j.expand(16, 32, 4), col[..., None].expand(16, 32, 4)].contiguous()


def shared_bytes(head_dim: int, d_state: int, window: int, stages: int, heads: int = 1) -> int:
    return BARRIER_BYTES + stages * stage_bytes(head_dim, d_state, window, heads)


def launches(S, X, Y, a, C, out, head_dim, hpg, sms, shapes=SHAPES) -> dict:
    """``{name: zero-argument launch}`` for the shapes whose shared memory and layout fit these
    dims (``S`` ``[heads * head_dim, d_state]``, ``X`` ``[heads, J, head_dim]``, ``Y``
    ``[heads / hpg, J, d_state]`` bf16, ``a`` ``[heads]``, ``C`` ``[heads / hpg, d_state]``
    bf16, ``out`` ``[heads * head_dim]``)."""
    import torch

    from trtllm_replayssm.ops import _nvrtc

    if S.device.type != "cuda":
        raise ValueError(f"S: expected a CUDA tensor (the kernel needs sm_90 or later), got one on {S.device}")
    if torch.cuda.get_device_capability(S.device)[0] < 9:
        return {}
    rows, d_state = S.shape
    window = X.shape[1]
    source = ws_source()
    limit = torch.cuda.get_device_properties(S.device).shared_memory_per_block_optin
    out_ = {}
    for warps, stages, blocks, nofold, store, chunks, heads in shapes:
        smem = shared_bytes(head_dim, d_state, window, stages, heads)
        rows_w = heads * head_dim // warps
        if (d_state != 128 or (heads * head_dim) % warps or rows_w % 4 or rows_w > 32 or head_dim % rows_w
                or hpg % heads or smem > limit or (warps + 1) * 32 > 1024):
            continue
        name = f"cuda ws c{warps} s{stages} b{blocks} h{heads} {store}" + (f" l{chunks}" if chunks > 1 else "")
        name += " none" if nofold else ""
        kernel = _nvrtc.load_kernel(source, "fold_ws", defines(head_dim, d_state, window, hpg, warps, stages, blocks,
                                                               nofold, store, chunks, heads), SIGNATURE, S.device)
        n_tiles = rows // (head_dim * heads)
        threads = (warps + 1) * 32
        grid = min(n_tiles, sms * blocks)
        args = (S.data_ptr(), X.data_ptr(), Y.data_ptr(), a.data_ptr(), C.data_ptr(), out.data_ptr(), n_tiles)

        per_sm = kernel.blocks_per_sm(threads, smem)
        if per_sm < blocks:
            print(f"# {name}: {per_sm} block(s) per SM fit ({kernel.num_regs} registers, {smem} B), "
                  f"not {blocks}: skipped")
            continue

        def launch(kernel=kernel, grid=grid, threads=threads, smem=smem, args=args):
            kernel.launch(grid, threads, smem, args, torch.cuda.current_stream().cuda_stream)

        out_[name] = launch
    grid_source = GRID_FILE.read_text()
    for shape in GRID_SHAPES:
        rw, warps = shape[:2]
        x_shared, y_shared = shape[4:6]
        if (d_state != 128 or head_dim % (rw * warps) or (x_shared and (window * rw // 4) % 32)
                or (y_shared and (window * d_state // 8) % (warps * 32))):
            continue
        kernel = _nvrtc.load_kernel(grid_source, "fold_grid", grid_defines(head_dim, d_state, window, hpg, *shape),
                                    GRID_SIGNATURE, S.device)
        name = grid_name(*shape)
        n_blocks = rows // (rw * warps)
        counter = torch.zeros(2, dtype=torch.int64, device=S.device)  # the counter form's; put back by its last block
        args = (S.data_ptr(), X.data_ptr(), Y.data_ptr(), a.data_ptr(), C.data_ptr(), out.data_ptr(), n_blocks,
                counter.data_ptr())
        resident = kernel.blocks_per_sm(warps * 32, 0)
        print(f"# {name}: {kernel.num_regs} registers, {resident} blocks per SM resident")
        persistent = len(shape) > 6 and shape[6]
        # a fixed wave of the blocks asked of ptxas, and one of every block that fits (" full")
        waves = {name: min(n_blocks, sms * shape[2])} if persistent else {name: n_blocks}
        if persistent and resident > shape[2]:
            waves[name + " full"] = min(n_blocks, sms * resident)
        for wave_name, grid in waves.items():
            def launch(kernel=kernel, grid=grid, threads=warps * 32, args=args, keep=counter):  # args points into it
                kernel.launch(grid, threads, 0, args, torch.cuda.current_stream().cuda_stream)

            out_[wave_name] = launch
    mma_source = MMA_FILE.read_text()
    Yf = b_fragments(Y) if Y.shape[1:] == (16, 128) else None
    for warps, blocks, split, pre_arranged, persistent in MMA_SHAPES:
        if d_state != 128 or window != 16 or head_dim % (16 * warps):
            continue
        kernel = _nvrtc.load_kernel(mma_source, "fold_mma", mma_defines(head_dim, hpg, warps, blocks, split,
                                                                        pre_arranged, persistent),
                                    MMA_SIGNATURE, S.device)
        n_blocks = rows // (16 * warps)
        args = (S.data_ptr(), X.data_ptr(), (Yf if pre_arranged else Y).data_ptr(), a.data_ptr(), C.data_ptr(),
                out.data_ptr(), n_blocks)
        grid = min(n_blocks, sms * blocks) if persistent else n_blocks
        name = mma_name(warps, blocks, split, pre_arranged, persistent)
        print(f"# {name}: {kernel.num_regs} registers, {kernel.local_bytes} B local")

        def launch(kernel=kernel, grid=grid, threads=warps * 32, args=args, keep=Yf):  # keep: args points into it
            kernel.launch(grid, threads, 0, args, torch.cuda.current_stream().cuda_stream)

        out_[name] = launch
    return out_
