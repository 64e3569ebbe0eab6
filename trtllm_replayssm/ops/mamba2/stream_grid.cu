// Mamba-2 ReplaySSM staged step, the stream launch and the flush rows in one grid (CUDA C++,
// compiled at run time by NVRTC: ops/_nvrtc.py; launched by decode_stream_cuda.stream_grid, which
// documents the arguments and the defines).
//
// Why one grid: the flush's fold runs at copy speed as a grid of small blocks that each fold one
// tile and leave, and 8-12 points slower as any fixed wave of blocks looping over items
// (benchmarks/NOTES_mamba2.md, thirty-third run); a grid launched only for the flush rows costs
// its early exits in every step without flush rows. Here the blocks of the stream launch fold
// their own tile when their row flushes, so the flush rows get the grid's schedule and a step
// without them launches nothing more than the stream launch.
//
// A block is WARPS warps over BR = 8 * WARPS rows of one head of one batch row; a warp owns 8
// rows, a lane 4 columns of each (d_state 128 = 32 lanes x 4). Its checkpoint rows are loaded
// first, so every other operand's latency hides under them.
//   non-flush row: y = Gamma (S C_t) + sum_{j<c} lead_j x_j + last x_t (the ring launch's coef line:
//                  lead_j = w_j (B_j . C_t), last = dt_t (B_t . C_t)), then (y + D x) silu(z);
//   flush row:     S <- Gamma S + sum_{j<c} w_j x_j B_j^T + dt_t x_t B_t^T in fp32 FMAs (the line:
//                  w_j, Gamma, dt_t), stored; y = S C_t, gated.
// Row 0 of head 0 of a live row moves its cursors (committed, flush_at). A padded row's y is 0.

typedef Act<X_KIND> XA;     // x, z, y
typedef Act<BC_KIND> BA;    // B, C
typedef Act<RING_KIND> RA;  // ring_x, ring_B
typedef Act<D_KIND> DA;     // D

#define RW 8                  // rows per warp
#define BR (RW * WARPS)       // rows per block
#define TILES (P / BR)        // blocks per head
#define LINE (CAP + 2)        // a coef line: CAP weights, Gamma, the token's coefficient
#define QUADS (CAP * RW / 4)            // the warp's ring x in fours of rows
#define XR ((QUADS + 31) / 32)            // quads per lane (at most 2: CAP <= 30 at RW 8)

static_assert(N == 128, "a checkpoint row is 32 lanes of 4 columns");
static_assert(P % BR == 0, "whole blocks per head");
static_assert(LINE <= 32, "a coef line is one value per lane");
static_assert(RW == 8, "row_sums8; a lane's ring quads are the rows 4 (lane & 1) .. + 3");

// Four consecutive values (global or shared memory), widened: one 16-byte load for fp32, 8 bytes
// for the 16-bit kinds.
template <int KIND>
__device__ __forceinline__ float4 ld4(const typename Act<KIND>::T* p) {
    if constexpr (KIND == 0) {
        return *reinterpret_cast<const float4*>(p);
    } else {
        const uint2 w = *reinterpret_cast<const uint2*>(p);
        return make_float4(Act<KIND>::of_bits((u16)(w.x & 0xffffu)), Act<KIND>::of_bits((u16)(w.x >> 16)),
                           Act<KIND>::of_bits((u16)(w.y & 0xffffu)), Act<KIND>::of_bits((u16)(w.y >> 16)));
    }
}

__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// The sums over the warp of v[0..7] (one value per row and lane), transposed: lanes 4r .. 4r+3
// end up with row r's sum (r = (lane >> 2) & 7); 4 + 2 + 1 + 2 shuffles.
__device__ __forceinline__ float row_sums8(const float (&v)[8], int lane) {
    const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
    float a[4], b[2];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float send = b4 ? v[i] : v[i + 4], keep = b4 ? v[i + 4] : v[i];
        a[i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float send = b3 ? a[i] : a[i + 2], keep = b3 ? a[i + 2] : a[i];
        b[i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
    }
    float s = (b2 ? b[1] : b[0]) + __shfl_xor_sync(0xffffffffu, b2 ? b[0] : b[1], 4);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    return s;
}

// Shared memory of a block (file scope: the kernel and its flush function both use it).
__shared__ __align__(16) typename RA::T sB[CAP * N];        // flush rows: the group's ring B
__shared__ __align__(16) float sxw[WARPS][(CAP + 1) * RW];  // flush rows: each warp's w_j x_j, dt_t x_t
__shared__ typename XA::T sy[BR];                           // the block's outputs

// The block's BR outputs, s the warp's row sum in this lane (row (lane >> 2) & 7), leave as one
// contiguous store: a warp's 8 alone are half a 32-byte sector, which the L2 would merge with the
// other warp's half.
__device__ __forceinline__ void store_y(typename XA::T* y_block, float s, float d_h, float xr, float zr) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if ((lane & 3) == 0) sy[warp * RW + ((lane >> 2) & 7)] = XA::from(mamba2_gated(s, d_h, xr, zr));
    __syncthreads();
    if ((int)threadIdx.x < BR) y_block[threadIdx.x] = sy[threadIdx.x];
}

// A flush row's block: S <- Gamma S + sum_{j<c} w_j x_j B_j^T + dt_t x_t B_t^T, stored; y from the
// folded rows. Not inlined: the fold's registers (an accumulator tile beside the ring's operands)
// would otherwise set the kernel's, and the non-flush blocks, nearly all of a step's, would spill
// to fit the residency the stream needs (Nsight Compute, H200: 80 MB of local stores a step at
// Nemotron-H batch 256, 267.7 us against the Triton launch's 256.0). Its checkpoint rows are read
// again (the caller's loads have just brought them into the caches).
__device__ __noinline__ void fold_block(float* tile_at, const typename RA::T* rB, const typename BA::T* bt_at,
                                        typename XA::T* y_block, float4 wx0, float4 wx1, float4 cv, float gamma,
                                        float last, float xv, float zv, float d_h, int c) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int PER16 = 16 / sizeof(typename RA::T);
    // The group's ring B, every entry (no wait for c), by cp.async: no registers on the way.
    for (int i = threadIdx.x; i < CAP * N / PER16; i += THREADS)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(sB + i * PER16)),
                     "l"(rB + i * PER16) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
    float* xw = sxw[warp];
    const float4 wx[2] = {wx0, wx1};
#pragma unroll
    for (int k = 0; k < XR; ++k) {
        const int q = lane + 32 * k;
        if (q < QUADS) *reinterpret_cast<float4*>(xw + 4 * q) = wx[k];
    }
    if (lane < RW) xw[CAP * RW + lane] = last * xv;
    const float4 bt = ld4<BC_KIND>(bt_at);
    float4 acc[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(tile_at + r * N);
        acc[r] = make_float4(gamma * v.x, gamma * v.y, gamma * v.z, gamma * v.w);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    auto add_outer = [&](const float* a, float4 b) {
#pragma unroll
        for (int r4 = 0; r4 < RW; r4 += 4) {
            const float4 w4 = *reinterpret_cast<const float4*>(a + r4);
            const float w[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[r4 + i].x = fmaf(w[i], b.x, acc[r4 + i].x);
                acc[r4 + i].y = fmaf(w[i], b.y, acc[r4 + i].y);
                acc[r4 + i].z = fmaf(w[i], b.z, acc[r4 + i].z);
                acc[r4 + i].w = fmaf(w[i], b.w, acc[r4 + i].w);
            }
        }
    };
#pragma unroll 1
    for (int j = 0; j < c; ++j) add_outer(xw + j * RW, ld4<RING_KIND>(sB + j * N + 4 * lane));
    add_outer(xw + CAP * RW, bt);
    float part[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) {
        *reinterpret_cast<float4*>(tile_at + r * N) = acc[r];
        part[r] = dot4(acc[r], cv);
    }
    const int r_out = (lane >> 2) & 7;
    store_y(y_block, row_sums8(part, lane), d_h, __shfl_sync(0xffffffffu, xv, r_out),
            __shfl_sync(0xffffffffu, zv, r_out));
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
mamba2_stream_grid(float* __restrict__ ckpt, const typename RA::T* __restrict__ ring_x,
                   const typename RA::T* __restrict__ ring_B, const float* __restrict__ coef,
                   const int* __restrict__ info, int* __restrict__ committed, int* __restrict__ flush_at,
                   const typename XA::T* __restrict__ x, const typename BA::T* __restrict__ Bm,
                   const typename BA::T* __restrict__ Cm, const typename DA::T* __restrict__ Dv,
                   const typename XA::T* __restrict__ z, const IdxT* __restrict__ idx,
                   typename XA::T* __restrict__ y, int window, long long pad_slot_id, long long s_ck_slot,
                   long long s_ck_head, long long s_rx_slot, long long s_rx_head, long long s_rB_slot,
                   long long s_rB_group, long long s_x_row, long long s_x_head, long long s_B_row,
                   long long s_B_group, long long s_C_row, long long s_C_group, long long s_z_row,
                   long long s_z_head, long long s_y_row, long long s_y_head) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tile = blockIdx.x % TILES, h = (blockIdx.x / TILES) % HEADS, row = blockIdx.x / (TILES * HEADS);
    const int g = h / HPG, p0 = tile * BR + warp * RW;
    typename XA::T* y_block = y + row * s_y_row + h * s_y_head + tile * BR;
#if HAS_INDICES
    const long long slot = (long long)idx[row];
    const bool live = slot != pad_slot_id;
#else
    const long long slot = row;
    const bool live = true;
#endif
    if (!live) {
        if ((int)threadIdx.x < BR) y_block[threadIdx.x] = XA::from(0.f);
        return;
    }
    float* tile_at = ckpt + slot * s_ck_slot + h * s_ck_head + (long long)p0 * N + 4 * lane;
    float4 S[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) S[r] = *reinterpret_cast<const float4*>(tile_at + r * N);

    const float lv = lane < LINE ? coef[((long long)row * HEADS + h) * LINE + lane] : 0.f;
    const float4 cv = ld4<BC_KIND>(Cm + row * s_C_row + g * s_C_group + 4 * lane);
    float xv = 0.f, zv = 0.f;
    if (lane < RW) {
        xv = XA::load(x + row * s_x_row + h * s_x_head + p0 + lane);
#if HAS_Z
        zv = XA::load(z + row * s_z_row + h * s_z_head + p0 + lane);
#endif
    }
    const float d_h = HAS_D ? DA::load(Dv + h) : 0.f;
    // The ring's x of the warp's rows: lane takes the quads (entry q / 2, rows 4 (q & 1) .. + 3)
    // for q = lane + 32 k, one 8-byte load each (16 for fp32 rings). Every entry is loaded without
    // waiting for c (one latency less on the way to y); those from c on are dropped by a select,
    // not a zero weight, as they may hold NaN.
    const typename RA::T* rx = ring_x + slot * s_rx_slot + h * s_rx_head + p0 + 4 * (lane & 1);
    float4 wx[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int q = lane + 32 * k;
        wx[k] = k < XR && q < QUADS ? ld4<RING_KIND>(rx + (q >> 1) * P) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int c = info[2 * row];
    const bool is_flush = info[2 * row + 1] != 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int j = (lane + 32 * k) >> 1;
        const float w = __shfl_sync(0xffffffffu, lv, j < CAP ? j : 0);
        const bool keep = j < c;
        wx[k] = make_float4(keep ? w * wx[k].x : 0.f, keep ? w * wx[k].y : 0.f, keep ? w * wx[k].z : 0.f,
                            keep ? w * wx[k].w : 0.f);
    }
    const float gamma = __shfl_sync(0xffffffffu, lv, CAP), last = __shfl_sync(0xffffffffu, lv, CAP + 1);
    if (threadIdx.x == 0 && tile == 0 && h == 0) {
        committed[slot] = is_flush ? 0 : c + 1;
        if (is_flush) flush_at[slot] = window;
    }
    if (is_flush) {  // the same in every thread of the block: its barriers are reached by all
        fold_block(tile_at, ring_B + slot * s_rB_slot + g * s_rB_group, Bm + row * s_B_row + g * s_B_group + 4 * lane,
                   y_block, wx[0], wx[1], cv, gamma, last, xv, zv, d_h, c);
        return;
    }
    // y = Gamma (S C_t) + the ring terms + last x_t: each lane's ring terms (rows 4 (lane & 1) .. + 3)
    // join its row partials before the one transposed reduction.
    const float4 ring = make_float4(wx[0].x + wx[1].x, wx[0].y + wx[1].y, wx[0].z + wx[1].z, wx[0].w + wx[1].w);
    const float rv[4] = {ring.x, ring.y, ring.z, ring.w};
    const bool odd = lane & 1;
    float part[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) part[r] = gamma * dot4(S[r], cv) + ((r >> 2) == (int)odd ? rv[r & 3] : 0.f);
    const int r_out = (lane >> 2) & 7;
    const float xr = __shfl_sync(0xffffffffu, xv, r_out), zr = __shfl_sync(0xffffffffu, zv, r_out);
    store_y(y_block, row_sums8(part, lane) + last * xr, d_h, xr, zr);
}
