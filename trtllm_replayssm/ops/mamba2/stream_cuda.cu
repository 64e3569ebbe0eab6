// Mamba-2 ReplaySSM non-flush rows in CUDA C++: the staged step's stream launch as a persistent
// kernel whose outputs are written after its last read (compiled at run time by NVRTC:
// ops/_nvrtc.py; launched by decode_stream_cuda.py, which documents the arguments and defines).
//
// Why: on an H200 a read of the 1 GiB Nemotron-H batch-256 checkpoint takes 244 us, and the
// same read storing one value per 128 read among its loads (the step's y) takes 258 us however
// the stores are formed; kept in shared memory and written once a block's reads are done, 251 us
// (benchmarks/probe_memory_rates.py, rows / rows_end; NOTES_mamba2.md, thirty-seventh run).
//
// Work: warp items (batch row, head, 8 checkpoint rows), in row, head, row order. Each warp takes
// CHUNK consecutive items at a time from a counter the ring launch zeroes (a warp that starts
// late, beside the flush launch's blocks, takes fewer: no static share to finish), and walks
// them with no barrier. Per item of a live non-flush row (c ring entries, the ring launch's coef
// line: coef_j = w_j (B_j . C_t) for j < c, Gamma at CAP, dt_t (B_t . C_t) at CAP + 1):
//     y = Gamma S C_t + sum_{j<c} coef_j x_j + coef_now x_t,   (y + D x_t) silu(z_t)
// kept in the warp's shared memory (`stage` items; past that, stored at once) and stored after the
// warp's last item. Flush rows' items only move the cursors (the flush launch writes their
// tiles and y); a padded row's y is zero. A lane holds 4 columns of each of the item's 8 rows;
// the ring terms join the row sums before one transposed warp reduction (9 shuffles for 8 rows).

// Operand dtypes: ops/_flush_rows.cuh.
typedef Act<X_KIND> XA;     // x, z, y
typedef Act<BC_KIND> BA;    // C
typedef Act<RING_KIND> RA;  // ring_x
typedef Act<D_KIND> DA;     // D
#define ROWS 8                       // checkpoint rows of a warp item
#define SLABS (P / ROWS)             // warp items of a head
#define J_ROUNDS ((CAP + 15) / 16)   // ring entries a lane takes (16 per round: 2 lanes an entry)
#define Y_BYTES (ROWS * (int)sizeof(typename XA::T))  // a staged item's outputs

static_assert(N == 128, "a checkpoint row is 32 lanes of 4 columns");
static_assert(P % ROWS == 0, "whole warp items per head");
static_assert(Y_BYTES % 16 == 0, "a staged item is whole 16-byte chunks");

template <int KIND> struct Four;  // four consecutive operand values, widened to fp32
template <> struct Four<0> {
    static __device__ __forceinline__ float4 load(const float* p) { return *reinterpret_cast<const float4*>(p); }
};
template <int KIND> struct Four {
    static __device__ __forceinline__ float4 load(const u16* p) {
        const uint2 w = *reinterpret_cast<const uint2*>(p);
        return make_float4(Act<KIND>::of_bits((u16)(w.x & 0xffffu)), Act<KIND>::of_bits((u16)(w.x >> 16)),
                           Act<KIND>::of_bits((u16)(w.y & 0xffffu)), Act<KIND>::of_bits((u16)(w.y >> 16)));
    }
};

// A checkpoint chunk by a plain ld.global: in a wave of blocks looping over a 1 GiB read, the
// non-coherent path (ld.global.nc, what a const __restrict__ read compiles to) read 254-265 us
// against 242-244 us (H200, benchmarks/probe_memory_rates.py, results/memory_rates_*_read_rmw).
__device__ __forceinline__ float4 load_tile(const float* p) {
    float4 v;
    asm volatile("ld.global.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

// The row of this lane after transposed_sum: bits 4, 3, 2 of the lane.
__device__ __forceinline__ int summed_row(int lane) { return ((lane >> 4) & 1) * 4 + ((lane >> 3) & 1) * 2 + ((lane >> 2) & 1); }

// Eight per-lane values summed over the warp; lane l ends with the total of row summed_row(l).
__device__ __forceinline__ float transposed_sum(float (&v)[ROWS], int lane) {
    const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float send = b4 ? v[i] : v[i + 4];
        v[i] = (b4 ? v[i + 4] : v[i]) + __shfl_xor_sync(0xffffffffu, send, 16);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float send = b3 ? v[i] : v[i + 2];
        v[i] = (b3 ? v[i + 2] : v[i]) + __shfl_xor_sync(0xffffffffu, send, 8);
    }
    float s = (b2 ? v[1] : v[0]) + __shfl_xor_sync(0xffffffffu, b2 ? v[0] : v[1], 4);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    return s + __shfl_xor_sync(0xffffffffu, s, 1);
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
mamba2_stream_rows(const float* __restrict__ ckpt, const typename RA::T* __restrict__ ring_x,
                   const float* __restrict__ coef, const int* __restrict__ info, int* __restrict__ committed,
                   int* __restrict__ flush_at, const typename XA::T* __restrict__ x,
                   const typename BA::T* __restrict__ Cm, const typename DA::T* __restrict__ Dv,
                   const typename XA::T* __restrict__ z, const IdxT* __restrict__ idx, typename XA::T* __restrict__ y,
                   int* __restrict__ work, int batch, int window, long long pad_slot_id, int stage, long long s_ck_slot,
                   long long s_ck_head, long long s_rx_slot, long long s_rx_head, long long s_x_row,
                   long long s_x_head, long long s_C_row, long long s_C_group, long long s_z_row, long long s_z_head,
                   long long s_y_row, long long s_y_head) {
    extern __shared__ __align__(16) unsigned char stage_mem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // The warp's staged outputs ([stage][ROWS] in y's dtype; stage a multiple of 4, so that each
    // warp's part starts on 16 bytes) and their item numbers.
    unsigned char* mine = stage_mem + (long long)warp * stage * (Y_BYTES + 4);
    typename XA::T* ys = reinterpret_cast<typename XA::T*>(mine);
    int* ids = reinterpret_cast<int*>(mine + stage * Y_BYTES);
    const int items = batch * HEADS * SLABS;
    const int row_here = summed_row(lane);
    int staged = 0;
    int first = 0;
    if (lane == 0) first = atomicAdd(work, CHUNK);
    first = __shfl_sync(0xffffffffu, first, 0);
    while (first < items) {
        int next = 0;
        if (lane == 0) next = atomicAdd(work, CHUNK);  // in flight while this chunk is read
        const int last = min(first + CHUNK, items);
        for (int item = first; item < last; ++item) {
            const int row = item / (HEADS * SLABS), h = (item / SLABS) % HEADS, p0 = (item % SLABS) * ROWS;
#if HAS_INDICES
            long long slot = (long long)idx[row];
#else
            long long slot = row;
#endif
            const bool live = slot != pad_slot_id;
            const int c = info[2 * row];
            const bool flushes = info[2 * row + 1] != 0;
            const bool duty = live && h == 0 && p0 == 0 && lane == 0;  // the row's cursors
            if (live && flushes) {
                if (duty) {
                    committed[slot] = 0;
                    flush_at[slot] = window;
                }
                continue;
            }
            float out = 0.f;
            if (live) {
                const float* tile = ckpt + slot * s_ck_slot + h * s_ck_head + (long long)p0 * CK_P + 4 * lane;
                float4 S[ROWS];
#pragma unroll
                for (int r = 0; r < ROWS; ++r) S[r] = load_tile(tile + r * CK_P);
                const int g = h / HPG;
                const float4 cv = Four<BC_KIND>::load(Cm + row * s_C_row + g * s_C_group + 4 * lane);
                const float* line = coef + ((long long)row * HEADS + h) * (CAP + 2);
                const float gamma = line[CAP], now = line[CAP + 1];
                // Ring terms: lane l takes entry l / 2 (+ 16 a round) of rows 4 (l % 2) .. + 3.
                float lead[J_ROUNDS];
                float4 rxv[J_ROUNDS];
                const typename RA::T* rx = ring_x + slot * s_rx_slot + h * s_rx_head + p0 + 4 * (lane & 1);
#pragma unroll
                for (int k = 0; k < J_ROUNDS; ++k) {
                    const int j = (lane >> 1) + 16 * k;
                    // Entries from c on are not loaded (a select, not a product: they may hold anything).
                    const bool in = j < c;
                    lead[k] = in ? line[j] : 0.f;
                    rxv[k] = in ? Four<RING_KIND>::load(rx + (long long)j * RX_J) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
                const long long xo = row * s_x_row + h * s_x_head + p0 + row_here;
                const float xt = XA::load(x + xo);
                const float d_h = HAS_D ? DA::load(Dv + h) : 0.f;
#if HAS_Z
                const float zt = XA::load(z + row * s_z_row + h * s_z_head + p0 + row_here);
#else
                const float zt = 0.f;
#endif
                const float4 cg = make_float4(gamma * cv.x, gamma * cv.y, gamma * cv.z, gamma * cv.w);
                float v[ROWS];
#pragma unroll
                for (int r = 0; r < ROWS; ++r) v[r] = S[r].x * cg.x + S[r].y * cg.y + S[r].z * cg.z + S[r].w * cg.w;
                const bool upper = lane & 1;  // this lane's ring rows: 4 .. 7, else 0 .. 3
#pragma unroll
                for (int k = 0; k < J_ROUNDS; ++k) {
                    const float t[4] = {lead[k] * rxv[k].x, lead[k] * rxv[k].y, lead[k] * rxv[k].z, lead[k] * rxv[k].w};
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        v[i] += upper ? 0.f : t[i];
                        v[i + 4] += upper ? t[i] : 0.f;
                    }
                }
                out = mamba2_gated(transposed_sum(v, lane) + now * xt, d_h, xt, zt);
                if (duty) committed[slot] = c + 1;
            }
            if (staged < stage) {
                if ((lane & 3) == 0) ys[staged * ROWS + row_here] = XA::from(out);
                if (lane == 0) ids[staged] = item;
                ++staged;
            } else if ((lane & 3) == 0) {
                y[row * s_y_row + h * s_y_head + p0 + row_here] = XA::from(out);
            }
        }
        first = __shfl_sync(0xffffffffu, next, 0);
    }
    __syncwarp();
    // The warp's outputs, after its last read: one item's ROWS values a lane at a time.
    for (int k = lane; k < staged; k += 32) {
        const int item = ids[k];
        const int row = item / (HEADS * SLABS), h = (item / SLABS) % HEADS, p0 = (item % SLABS) * ROWS;
        const uint4* src = reinterpret_cast<const uint4*>(ys + k * ROWS);
        uint4* dst = reinterpret_cast<uint4*>(y + row * s_y_row + h * s_y_head + p0);
#pragma unroll
        for (int q = 0; q < Y_BYTES / 16; ++q) dst[q] = src[q];
    }
}
