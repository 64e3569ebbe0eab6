// The window fold of bench_fold_ceiling.py as a grid of small hardware-scheduled blocks with an
// exact fp32 FMA product (compiled at run time by NVRTC, launched by benchmarks/_fold_ws.py):
// per head tile
//     S <- a S + X^T Y,   out = S C
// (S [P, N] fp32, X [J, P] fp32, Y [J, N] bf16 and C [N] bf16 shared by HPG heads).
//
// The standard decode step reaches ~98% of copy with one small program per tile, scheduled by
// the hardware; the CUDA flush launch (a fixed wave of blocks walking items) stops at ~89% at
// Nemotron-H dims. This is the standard
// step's schedule with the fold's product: each block owns WARPS x RW rows of one head, every
// thread four columns of its warp's rows; a thread issues its tile loads and the group's Y
// (J x 4 columns, L2 hits after the group's first block) at once, folds in FMAs, stores.
// On an H200, timed warm (benchmarks/NOTES_mamba2.md, thirty-third run), 64-row blocks with X
// and Y through shared memory fold at 100.5% of copy at Nemotron-H dims and 99.3% at Gated
// DeltaNet's; the same blocks as a fixed wave (PERSIST) run 8 points lower, with or without
// AHEAD. Fed by a counter (COUNTER) the wave keeps the grid's rate: on an H100, 99.7% of copy
// against 99.9% as a grid and 95% striding (fifty-fifth run).
//
// Defines: P (rows of a head), N (columns; 128), J (window), HPG (heads per Y / C group),
// RW (rows per warp, a multiple of 4), WARPS (per block), MIN_BLOCKS (blocks per SM asked of
// ptxas), NOFOLD (1: a S alone, no product), XS (1: a warp's X loaded at once, one 16-byte
// chunk per lane, and read back from shared memory; 0: loaded by broadcasts inside the fold,
// where ptxas may leave one L2 round trip per entry), YS (1: the group's Y loaded once per block
// into shared memory; 2: the same, widened to fp32 there; 0: each thread loads its own columns
// of it), PERSIST (1: a fixed wave of blocks, each looping over the blocks' items; 0: one block
// per item), AHEAD (PERSIST: each warp loads its next item's tile into registers before it folds
// this one), COUNTER (PERSIST: a block takes its next item from a counter, counter[0], asked one
// item ahead, instead of striding by the grid; the last block to finish, counted in counter[1],
// puts both back to 0 for the next launch: the tiles in flight stay contiguous, as in
// probe_memory_rates.py's counter form).

typedef unsigned short u16;

#ifndef XS
#define XS 0
#endif
#ifndef YS
#define YS 0
#endif
#ifndef PERSIST
#define PERSIST 0
#endif
#ifndef AHEAD
#define AHEAD 0
#endif
#ifndef COUNTER
#define COUNTER 0
#endif
#define ROWS (RW * WARPS)  // rows of a block
#define X_CHUNKS (J * RW / 4)  // float4 of a warp's X
#define Y_CHUNKS (J * N / 8)   // 16-byte chunks of the group's Y

static_assert(N == 128, "a tile row is 32 lanes of 4 columns");
static_assert(!COUNTER || (PERSIST && !AHEAD), "the counter feeds a fixed wave, without AHEAD's stride");
static_assert(RW % 4 == 0 && P % ROWS == 0, "a block's rows: whole float4 broadcasts, within one head");
static_assert((!XS || X_CHUNKS % 32 == 0) && (!YS || Y_CHUNKS % (WARPS * 32) == 0),
              "X and Y in whole rounds of the lanes");

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

extern "C" __global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
fold_grid(float* __restrict__ S, const float* __restrict__ X, const u16* __restrict__ Y, const float* __restrict__ a,
          const u16* __restrict__ C, float* __restrict__ out, int n_blocks,
          unsigned long long* __restrict__ counter) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#if PERSIST && AHEAD
    float4 next[RW];  // the block's next item's tile, loaded while this one folds
    if (blockIdx.x < n_blocks) {
        const float* t0 = S + ((long long)blockIdx.x * ROWS + warp * RW) * N + 4 * lane;
#pragma unroll
        for (int r = 0; r < RW; ++r) next[r] = *(const float4*)(t0 + r * N);
    }
#endif
#if COUNTER
    __shared__ long long taken[2];  // this item's and the next one's, asked while this one folds
    if (threadIdx.x == 0) taken[0] = (long long)atomicAdd(counter, 1ull);
    __syncthreads();
    for (int it = 0;; ++it) {
        const long long blk = taken[it & 1];
        if (blk >= n_blocks) break;
        if (threadIdx.x == 0) taken[(it + 1) & 1] = (long long)atomicAdd(counter, 1ull);
#elif PERSIST
    for (long long blk = blockIdx.x; blk < n_blocks; blk += gridDim.x) {
#else
    {
        const long long blk = blockIdx.x;
#endif
    const long long row0 = blk * ROWS + warp * RW;  // row of S ([heads * P, N])
    const long long head = row0 / P, g = head / HPG;
    const int p0 = (int)(row0 % P);
    float* tile = S + row0 * N + 4 * lane;
    float4 acc[RW];
#if PERSIST && AHEAD
#pragma unroll
    for (int r = 0; r < RW; ++r) acc[r] = next[r];
    if (blk + gridDim.x < n_blocks) {
        const float* tn = tile + (long long)gridDim.x * ROWS * N;
#pragma unroll
        for (int r = 0; r < RW; ++r) next[r] = *(const float4*)(tn + r * N);
    }
#else
#pragma unroll
    for (int r = 0; r < RW; ++r) acc[r] = *(const float4*)(tile + r * N);
#endif
#if !NOFOLD
#if XS
    __shared__ __align__(16) float xs_all[WARPS][J * RW];  // [j][row] of each warp
    float* xs = xs_all[warp];
    {
        float4 xv[X_CHUNKS / 32];
#pragma unroll
        for (int k = 0; k < X_CHUNKS / 32; ++k) {
            const int q = lane + 32 * k, j = q / (RW / 4), r = (q % (RW / 4)) * 4;
            xv[k] = __ldg((const float4*)(X + (head * J + j) * P + p0 + r));
        }
#pragma unroll
        for (int k = 0; k < X_CHUNKS / 32; ++k) *(float4*)(xs + (lane + 32 * k) * 4) = xv[k];
    }
#endif
#if YS
#if YS == 2
    __shared__ __align__(16) float ys[J * N];  // widened once: no conversions in the fold
#else
    __shared__ __align__(16) u16 ys[J * N];
#endif
    {
        uint4 yv[Y_CHUNKS / (WARPS * 32)];
#pragma unroll
        for (int k = 0; k < Y_CHUNKS / (WARPS * 32); ++k)
            yv[k] = __ldg((const uint4*)(Y + g * J * N) + threadIdx.x + k * WARPS * 32);
#pragma unroll
        for (int k = 0; k < Y_CHUNKS / (WARPS * 32); ++k) {
#if YS == 2
            const uint4 w = yv[k];
            float4* dst = (float4*)ys + 2 * (threadIdx.x + k * WARPS * 32);
            dst[0] = make_float4(bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y));
            dst[1] = make_float4(bf16_lo(w.z), bf16_hi(w.z), bf16_lo(w.w), bf16_hi(w.w));
#else
            ((uint4*)ys)[threadIdx.x + k * WARPS * 32] = yv[k];
#endif
        }
    }
    __syncthreads();
#else
    uint2 yb[J];
#pragma unroll
    for (int j = 0; j < J; ++j) yb[j] = __ldg((const uint2*)(Y + (g * J + j) * N + 4 * lane));
#if XS
    __syncwarp();
#endif
#endif
#endif
    const uint2 cb = __ldg((const uint2*)(C + g * N + 4 * lane));
    const float ah = __ldg(a + head);
#pragma unroll
    for (int r = 0; r < RW; ++r) {
        acc[r].x *= ah; acc[r].y *= ah; acc[r].z *= ah; acc[r].w *= ah;
    }
#if !NOFOLD
#if !XS
    const float* xh = X + head * J * P + p0;
#endif
#pragma unroll
    for (int j = 0; j < J; ++j) {
#if YS == 2
        const float4 yf = *(const float4*)(ys + j * N + 4 * lane);
        const float y0 = yf.x, y1 = yf.y, y2 = yf.z, y3 = yf.w;
#else
#if YS
        const uint2 yj = *(const uint2*)(ys + j * N + 4 * lane);
#else
        const uint2 yj = yb[j];
#endif
        const float y0 = bf16_lo(yj.x), y1 = bf16_hi(yj.x), y2 = bf16_lo(yj.y), y3 = bf16_hi(yj.y);
#endif
#pragma unroll
        for (int r4 = 0; r4 < RW; r4 += 4) {
#if XS
            const float4 xv = *(const float4*)(xs + j * RW + r4);  // a broadcast
#else
            const float4 xv = __ldg((const float4*)(xh + j * P + r4));  // a broadcast
#endif
            const float x[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[r4 + i].x = fmaf(x[i], y0, acc[r4 + i].x);
                acc[r4 + i].y = fmaf(x[i], y1, acc[r4 + i].y);
                acc[r4 + i].z = fmaf(x[i], y2, acc[r4 + i].z);
                acc[r4 + i].w = fmaf(x[i], y3, acc[r4 + i].w);
            }
        }
    }
#endif
    const float c0 = bf16_lo(cb.x), c1 = bf16_hi(cb.x), c2 = bf16_lo(cb.y), c3 = bf16_hi(cb.y);
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < RW; ++r) {
        *(float4*)(tile + r * N) = acc[r];
        float part = acc[r].x * c0 + acc[r].y * c1 + acc[r].z * c2 + acc[r].w * c3;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) part += __shfl_xor_sync(0xffffffffu, part, off);
        mine = lane == r ? part : mine;
    }
    if (lane < RW) out[row0 + lane] = mine;
#if COUNTER
    __syncthreads();  // the next item's number is in taken[]; ys and xs are rewritten by it
#elif !NOFOLD && YS
    __syncthreads();  // the next block item rewrites ys (and xs)
#elif !NOFOLD && XS
    __syncwarp();
#endif
    }
#if COUNTER
    if (threadIdx.x == 0) {
        __threadfence();  // this block's last take lands before it counts itself finished
        if (atomicAdd(counter + 1, 1ull) == gridDim.x - 1) {
            counter[0] = 0;
            counter[1] = 0;
        }
    }
#endif
}
