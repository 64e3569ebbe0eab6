"""How fast does this GPU read, update in place and copy a checkpoint-sized buffer, by access form?

The Mamba-2 non-flush step is a read of the checkpoint (plus the ring) that writes a little
(``y``, the token's ring entry); the flush and the standard step read the checkpoint and write
it back in place. ``bench_read_ceiling.py`` times Triton's read forms (``y = S C`` over tiles:
~258-260 us for 1 GiB on an H200). This probe times plain CUDA kernels (NVRTC) over the same
bytes, to separate what the memory system allows from what a kernel's form costs:

- ``read``: each thread keeps ``U`` 16-byte loads in flight and sums them (nothing stored);
- ``rows``: as ``read``, each warp's 128-float row summed across the warp and stored (one float
  per row: 1/128 of the bytes read, as ``bench_read_ceiling.py``'s ``y``);
- ``rows_kept``: the same sums, not stored; ``rows_smem``: stored as consecutive floats by the
  block's first threads (whole sectors); ``rows_every``: only every ``--every``-th row's;
  ``rows_small``: into a 1 MiB window (the row index wrapped; a line comes round again only
  every 128 MiB read, so these stores do not stay in L2 either); ``rows_bf16``: as bf16;
  ``rows_end`` (``loop`` only): kept in shared memory and written after the block's last pass;
- ``rows_ops``: as ``rows``, each row's sum the non-flush step's ``y`` (:data:`OPS_LAYOUT`: the
  group's ``C``, the head's coef line, 8 bf16 ring ``x`` entries); ``rows_ops_end`` (``loop``
  only): the same kept in shared memory until the block's last pass, as ``rows_end``. They ask
  whether the stores after the reads still save their time once a row reads what the stream
  launch's rows read;
- ``rmw``: each vector scaled by a runtime 1.0 and stored back in place (the standard step's
  traffic without its arithmetic); ``copy``: into a second buffer;

with the load forms of :data:`LOADS`, the store forms of :data:`STORES`, ``U`` vectors per thread
per pass, threads per block, and one pass over the buffer (``grid``), one wave looping (``loop``)
or one wave taking its passes from a counter (``counter``). H200 findings
(``results/memory_rates_2026-12-04_h200_*``, NOTES_mamba2.md, thirty-sixth run): a plain read
of 1 GiB takes 244-246 us with ``ld.global`` (``plain``, ``ca``, ``cg``, ``nc``), 253-260 us with
``.L1::no_allocate``, ``.cs``, ``.lu`` or an ``.L2::256B`` prefetch size; storing the row sums
costs 12-14 us however they are stored, about as much when only every 16th is, and ~3 us over a
looping read (248 us) when a wave of blocks keeps them until its last pass (``rows_end``:
250.7-252.3 us; thirty-seventh run). An in-place update or a copy of 1 GiB as one striding wave
takes 541-579 us against 519-541 as a grid; taking the passes from a counter brings it back to
522-552 (the read alone goes the other way: 271 against 248; thirty-eighth run,
``results/memory_rates_2026-12-04_h200_counter.txt``).

    PYTHONPATH=$PWD python3 benchmarks/probe_memory_rates.py [--mib 1024] [--rounds 10]
    PYTHONPATH=$PWD python3 benchmarks/probe_memory_rates.py --kinds read rows --loads plain --units 4 8

Each form's graph is replayed with L2 flushed between replays; GB/s count bytes read plus bytes
written. The Triton copy and ``torch.Tensor.copy_`` of ``_timing.copy_bandwidths_gbps`` are timed
in the same run.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import positive_int, require_cuda  # noqa: E402
from _timing import L2Flusher, capture_graph, copy_bandwidths_gbps, device_info, warmed_median  # noqa: E402

#: Load forms: the PTX instruction of each (``cpp``: a C++ dereference of a ``const __restrict__``
#: pointer, which NVRTC emits as ``ld.global.nc``; ``plain`` is what Triton's ``tl.load`` emits).
LOADS = {
    "cpp": None,
    "plain": "ld.global.v4.f32",
    "nc": "ld.global.nc.v4.f32",
    "nc_na": "ld.global.nc.L1::no_allocate.v4.f32",
    "ca": "ld.global.ca.v4.f32",
    "cg": "ld.global.cg.v4.f32",
    "cs": "ld.global.cs.v4.f32",
    "lu": "ld.global.lu.v4.f32",
    "l2p": "ld.global.L2::256B.v4.f32",
    "nc_l2p": "ld.global.nc.L2::256B.v4.f32",
}
STORES = {"st": "st.global.v4.f32", "cs": "st.global.cs.v4.f32", "na": "st.global.L1::no_allocate.v4.f32"}
KINDS = {"read": 0, "rmw": 1, "copy": 2, "rows": 3, "rows_kept": 4, "rows_smem": 5, "rows_every": 6,
         "rows_small": 7, "rows_bf16": 8, "rows_end": 9, "rows_ops": 10, "rows_ops_end": 11}
#: The kinds that read the step's small operands beside each row (:data:`OPS_LAYOUT`).
OPS_KINDS = ("rows_ops", "rows_ops_end")
#: The kinds that keep a block's row sums in shared memory until its last pass (``loop`` only).
END_KINDS = ("rows_end", "rows_ops_end")
#: rows_ops / rows_ops_end: the buffer as a Nemotron-H checkpoint (rows of 128 fp32, 64 rows a
#: head, 128 heads a batch row, 16 heads a group) and, beside it, the operands a non-flush
#: step's stream launch reads for each row: the group's C (fp32 here, L2-resident), the head's
#: coef line (RING_CAP + 2 fp32: the ring weights, Gamma, the token's weight) and RING_C bf16 ring
#: x entries of a RING_CAP-entry ring laid out [batch row, entry, head, row].
OPS_LAYOUT = {"P": 64, "HEADS": 128, "HPG": 16, "RING_CAP": 16, "RING_C": 8}
#: Grid forms: one pass over the buffer; one wave striding over it; one wave taking passes from a
#: counter (the passes in flight stay contiguous).
GRIDS = {"grid": 0, "loop": 1, "counter": 2}
#: rows_end: the most row sums a block keeps in shared memory (fp32) before it writes them out.
END_ROWS = 4096


def source(load: str, store: str) -> str:
    """The kernel's CUDA source with ``load`` / ``store`` (keys of :data:`LOADS` / :data:`STORES`)."""
    op = LOADS[load]
    body = ("    v = *p;" if op is None else
            f'    asm volatile("{op} {{%0,%1,%2,%3}}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));')
    st = (f'    asm volatile("{STORES[store]} [%0], {{%1,%2,%3,%4}};" '
          ':: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");')
    return (SOURCE.replace("@LOAD@", body).replace("@STORE@", st))


SOURCE = r"""
// bf16 by round-to-nearest-even on the bits (NVRTC here has no cuda_bf16.h on its include path).
__device__ __forceinline__ unsigned short to_bf16(float x) {
    unsigned int b = __float_as_uint(x);
    return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float4 load16(const float4* p) {
    float4 v;
@LOAD@
    return v;
}

// A warp's 128-float row (a float4 a lane) summed across the warp.
__device__ __forceinline__ float row_sum(float4 v) {
    float s = (v.x + v.y) + (v.z + v.w);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

__device__ __forceinline__ void store16(float4* p, float4 v) {
@STORE@
}

// KIND: 0 read, 1 rmw in place, 2 copy. One block covers U * blockDim consecutive vectors a pass;
// LOOP 1: the grid is one wave and strides over the buffer; LOOP 2: one wave whose blocks take
// their next pass from a counter (sink's words 2-5: the counter and the finished blocks, put back
// to 0 by the last block), so that the passes in flight stay the buffer's next ones.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) mem_rate(
        const float4* __restrict__ src, float4* __restrict__ dst, float* sink, long long n_vec, float scale,
        const unsigned char* ops) {
    const long long step = (long long)U * THREADS;
    long long base = (long long)blockIdx.x * step + threadIdx.x;
    float acc = 0.f;
#if KIND == 9 || KIND == 11
#define ROWS_PER_PASS (U * THREADS / 32)
    __shared__ float end_sums[END_ROWS];
    int pass = 0;
#endif
#if KIND == 10 || KIND == 11
    // ops: C [groups][128] fp32, then the coef lines [heads][RING_CAP + 2] fp32, then the ring's x.
    const long long heads_all = (n_vec >> 5) / P;
    const float* op_lines = (const float*)(ops + heads_all / HPG * 128 * 4);
    const unsigned short* op_ring = (const unsigned short*)(op_lines + heads_all * (RING_CAP + 2));
    const int lane = threadIdx.x & 31;
#endif
#if LOOP == 2
    unsigned long long* counter = (unsigned long long*)(sink + 2);
    __shared__ long long taken[2];  // this pass's index and the next one's
    if (threadIdx.x == 0) taken[0] = (long long)atomicAdd(counter, 1ull);
    __syncthreads();
    for (int it = 0;; ++it) {
        const long long at = taken[it & 1];
        if (at * step >= n_vec) break;
        if (threadIdx.x == 0) taken[(it + 1) & 1] = (long long)atomicAdd(counter, 1ull);
        base = at * step + threadIdx.x;
#elif LOOP
    for (; base < n_vec; base += (long long)gridDim.x * step)
#endif
    {
        float4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = load16(src + base + (long long)u * THREADS);
#if KIND == 0
#pragma unroll
        for (int u = 0; u < U; ++u) acc += (v[u].x + v[u].y) + (v[u].z + v[u].w);
#elif KIND == 3 || (KIND >= 6 && KIND <= 8)
        // A row of 128 fp32 per warp and pass, summed across the warp, one value out per row: the
        // Triton read kernel's y = S C without the C (1/128 of the bytes read is written). 6: only
        // every EVERY-th row's; 7: into a 1 MiB window (the row index wrapped); 8: as bf16 (half
        // the bytes, the step's y).
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float s = row_sum(v[u]);
            const long long row = (base + (long long)u * THREADS) >> 5;
            if ((threadIdx.x & 31) == 0 && (KIND != 6 || row % EVERY == 0)) {
                if (KIND == 8) ((unsigned short*)dst)[row] = to_bf16(s * scale);
                else ((float*)dst)[KIND == 7 ? (row & ((1 << 18) - 1)) : row] = s * scale;
            }
        }
#elif KIND == 9
        // As KIND 3, each row sum kept in shared memory and written after the block's last pass
        // (LOOP only): no store among the block's reads.
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float s = row_sum(v[u]);
            if ((threadIdx.x & 31) == 0)
                end_sums[pass * ROWS_PER_PASS + u * (THREADS / 32) + (threadIdx.x >> 5)] = s * scale;
        }
        ++pass;
#elif KIND == 10 || KIND == 11
        // The stream launch's work for a row: y = Gamma (S_row . C) + sum_{j<RING_C} coef_j x_j,
        // the ring terms on lanes 0 .. RING_C-1 before the warp's sum. 10: y stored as it comes;
        // 11: kept in shared memory and written after the block's last pass (LOOP only).
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long row = (base + (long long)u * THREADS) >> 5;
            const long long hd = row / P;
            const long long b = hd / HEADS;
            const int head = (int)(hd % HEADS), p = (int)(row % P);
            const float4 cv = ((const float4*)ops)[(hd / HPG) * 32 + lane];
            const float* line = op_lines + hd * (RING_CAP + 2);
            float s = ((v[u].x * cv.x + v[u].y * cv.y) + (v[u].z * cv.z + v[u].w * cv.w)) * line[RING_CAP];
            if (lane < RING_C)
                s += line[lane] * __uint_as_float((unsigned int)op_ring[((b * RING_CAP + lane) * HEADS + head) * P + p] << 16);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
#if KIND == 10
            if (lane == 0) ((float*)dst)[row] = s * scale;
#else
            if (lane == 0) end_sums[pass * ROWS_PER_PASS + u * (THREADS / 32) + (threadIdx.x >> 5)] = s * scale;
#endif
        }
#if KIND == 11
        ++pass;
#endif
#elif KIND == 4 || KIND == 5
        // As KIND 3, the row sums kept (4: summed into acc, nothing stored) or staged in shared
        // memory and written by the block's first threads as consecutive floats (5: whole sectors).
        __shared__ float sums[U * THREADS / 32];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float s = row_sum(v[u]);
            if (KIND == 4) acc += s;
            else if ((threadIdx.x & 31) == 0) sums[u * (THREADS / 32) + (threadIdx.x >> 5)] = s * scale;
        }
        if (KIND == 5) {
            __syncthreads();
            if (threadIdx.x < U * THREADS / 32)
                ((float*)dst)[((long long)blockIdx.x * step >> 5) + threadIdx.x] = sums[threadIdx.x];
        }
#else
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float4 w = make_float4(v[u].x * scale, v[u].y * scale, v[u].z * scale, v[u].w * scale);
            store16((KIND == 1 ? (float4*)src : dst) + base + (long long)u * THREADS, w);
        }
#endif
    }
#if LOOP == 2
        __syncthreads();  // every thread has read taken[it & 1] before thread 0 refills it
    }
    if (threadIdx.x == 0 && atomicAdd(counter + 1, 1ull) == gridDim.x - 1) {
        counter[0] = 0;
        counter[1] = 0;
    }
#endif
#if KIND == 9 || KIND == 11
    __syncthreads();
    for (int i = threadIdx.x; i < pass * ROWS_PER_PASS; i += THREADS)
        ((float*)dst)[((long long)blockIdx.x + (long long)(i / ROWS_PER_PASS) * gridDim.x) * ROWS_PER_PASS
                      + i % ROWS_PER_PASS] = end_sums[i];
#endif
    // Never true for the runs here (scale 1, sink value not a sum of the data): keeps the loads alive.
    if (acc == scale * 1e30f) sink[0] = acc;
}
"""

#: The kinds that store what they read (the others store at most a row sum: no store form).
STORING = ("rmw", "copy")


def forms(kinds, loads, stores, units, threads, grids):
    """``(kind, load, store, U, threads, grid)`` for every combination that means something: a
    read stores nothing; an in-place update reads through ``nc`` forms only as asked (each thread
    reads its vectors before it writes them, so no load can see its own write), never ``cpp``."""
    for kind, ld, st, u, t, g in itertools.product(kinds, loads, stores, units, threads, grids):
        if kind not in STORING and st != stores[0]:
            continue
        if kind == "rmw" and ld == "cpp":
            continue
        if kind == "rows_smem" and g != "grid":
            continue  # its row index assumes one pass
        if kind in END_KINDS and g != "loop":
            continue  # one pass per block: nothing to keep
        yield kind, ld, st if kind in STORING else "-", u, t, g


def defines_for(kind, u, threads, grid, every=4, min_blocks=1) -> dict:
    """The ``-D`` values ``mem_rate`` is compiled with for one form (``min_blocks``: the
    ``__launch_bounds__`` blocks per SM the registers must allow)."""
    return {"KIND": KINDS[kind], "U": u, "THREADS": threads, "LOOP": GRIDS[grid], "EVERY": every,
            "END_ROWS": END_ROWS, "MIN_BLOCKS": min_blocks, **OPS_LAYOUT}


def ops_bytes(n_vec: int) -> tuple[int, int, int]:
    """Bytes of the rows_ops kinds' C, coef lines and ring ``x`` for a buffer of ``n_vec``
    16-byte vectors (whole batch rows of :data:`OPS_LAYOUT`)."""
    lay = OPS_LAYOUT
    heads = n_vec // 32 // lay["P"]
    if heads == 0 or heads % lay["HEADS"]:
        raise ValueError(f"--mib: rows_ops needs whole batch rows of {lay['HEADS'] * lay['P'] * 512 >> 20} MiB")
    return heads // lay["HPG"] * 128 * 4, heads * (lay["RING_CAP"] + 2) * 4, heads * lay["RING_CAP"] * lay["P"] * 2


def ops_buffer(n_vec: int, device) -> torch.Tensor:
    """The rows_ops kinds' operands (:func:`ops_bytes`): every C, weight and ring entry 1.0."""
    c, lines, ring = ops_bytes(n_vec)
    buf = torch.empty(c + lines + ring, dtype=torch.uint8, device=device)
    buf[:c + lines].view(torch.float32).fill_(1.0)
    buf[c + lines:].view(torch.bfloat16).fill_(1.0)
    return buf


def kernel_for(kind, ld, st, u, threads, grid, device, every=4, min_blocks=1):
    from trtllm_replayssm.ops._nvrtc import load_kernel

    sig = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p)
    return load_kernel(source(ld, st if st in STORES else "st"), "mem_rate", defines_for(kind, u, threads, grid, every, min_blocks),
                       sig, device)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=1024, help="buffer size (1024: the Nemotron-H batch-256 checkpoint)")
    p.add_argument("--rounds", type=positive_int, default=10)
    p.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    p.add_argument("--loads", nargs="+", choices=list(LOADS), default=list(LOADS))
    p.add_argument("--stores", nargs="+", choices=list(STORES), default=list(STORES))
    p.add_argument("--units", nargs="+", type=int, default=[2, 4, 8])
    p.add_argument("--threads", nargs="+", type=int, default=[256, 512])
    p.add_argument("--grids", nargs="+", choices=list(GRIDS), default=["grid", "loop"])
    p.add_argument("--every", type=int, default=4, help="rows_every: store every N-th row's sum")
    p.add_argument("--min-blocks", type=int, nargs="+", default=[1],
                   help="__launch_bounds__ blocks per SM to compile each form for (1: registers unbounded)")
    args = p.parse_args(argv)
    if args.mib <= 0:
        p.error(f"--mib must be positive, got {args.mib}")
    if args.every <= 0:
        p.error(f"--every must be positive, got {args.every}")
    if any(m <= 0 for m in args.min_blocks):
        p.error(f"--min-blocks must be positive, got {args.min_blocks}")
    for name in ("units", "threads"):
        bad = [v for v in getattr(args, name) if v <= 0 or v & (v - 1)]
        if bad:
            p.error(f"--{name} takes powers of two, got {bad}")
    wants_ops = any(k in OPS_KINDS for k in args.kinds)
    if wants_ops:
        try:
            ops_bytes((args.mib << 20) // 16)
        except ValueError as exc:
            p.error(str(exc))

    require_cuda(p)
    dev = torch.device("cuda")
    n_vec = (args.mib << 20) // 16
    src = torch.ones(n_vec * 4, device=dev)
    dst = torch.empty_like(src)
    sink = torch.zeros(8, device=dev)  # word 0: the loads' sink; 2-5: the counter form's two counters
    ops = ops_buffer(n_vec, dev) if wants_ops else sink
    flush = L2Flusher()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    copies = copy_bandwidths_gbps()
    info = device_info()
    print(f"# {info}; {sms} SMs; {args.mib} MiB; copy_bandwidths_gbps (2 GiB): "
          + ", ".join(f"{k} {v:.0f}" for k, v in copies.items()))
    print(f"{'kind':<13}{'load':<8}{'store':<6}{'U':>3}{'thr':>5}{'grid':>6}{'minb':>5}{'blk/SM':>7}{'us':>9}{'GB/s':>8}")
    # Per 512-byte row: its y (4 bytes) and RING_C bf16 ring entries (C and the lines stay in L2).
    ops_moved = 1 + 1 / 128 + OPS_LAYOUT["RING_C"] * 2 / 512
    rows = []
    for (kind, ld, st, u, t, g), mb in itertools.product(
            forms(args.kinds, args.loads, args.stores, args.units, args.threads, args.grids), args.min_blocks):
        per_block = u * t
        if n_vec % per_block:
            continue
        try:
            k = kernel_for(kind, ld, st, u, t, g, dev, args.every, mb)
            resident = k.blocks_per_sm(t, 0)
            blocks = sms * resident if g != "grid" else n_vec // per_block
            if kind in END_KINDS and -(-n_vec // per_block // blocks) * per_block // 32 > END_ROWS:
                raise ValueError(f"a block's row sums exceed END_ROWS ({END_ROWS}): use a smaller --mib")

            def launch(k=k, blocks=blocks, t=t):
                k.launch(blocks, t, 0, (src.data_ptr(), dst.data_ptr(), sink.data_ptr(), n_vec, 1.0, ops.data_ptr()),
                         torch.cuda.current_stream().cuda_stream)

            us = warmed_median(capture_graph(launch), args.rounds, flush)
        except Exception as exc:  # one form the toolchain refuses must not end the run
            print(f"{kind:<13}{ld:<8}{st:<6}{u:>3}{t:>5}{g:>6}{mb:>5}  ERROR {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0][:90] if str(exc) else ''}", flush=True)
            continue
        moved = (args.mib << 20) * {"read": 1, "rows_kept": 1, "rows": 1 + 1 / 128, "rows_smem": 1 + 1 / 128,
                                    "rows_every": 1 + 1 / 128 / args.every, "rows_small": 1 + 1 / 128, "rows_end": 1 + 1 / 128,
                                    "rows_bf16": 1 + 1 / 256, "rows_ops": ops_moved, "rows_ops_end": ops_moved}.get(kind, 2)
        gbps = moved / (us * 1e-6) / 1e9
        rows.append((kind, gbps))
        print(f"{kind:<13}{ld:<8}{st:<6}{u:>3}{t:>5}{g:>6}{mb:>5}{resident:>7}{us:>9.1f}{gbps:>8.0f}", flush=True)
    if float(src[0]) != 1.0 or float(src[-1]) != 1.0:
        raise SystemExit("the in-place updates changed the buffer (scale must be 1.0)")
    print("# best GB/s: " + ", ".join(f"{kind} {max(g for k2, g in rows if k2 == kind):.0f}"
                                      for kind in args.kinds if any(k2 == kind for k2, _ in rows)))


if __name__ == "__main__":
    main()
