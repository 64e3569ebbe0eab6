// The window fold of bench_fold_ceiling.py, warp-specialised (Hopper and later; compiled at run
// time by NVRTC, launched by benchmarks/_fold_ws.py): per head tile
//     S <- a S + X^T Y,   out = S C
// (S [P, N] fp32, X [J, P] fp32, Y [J, N] bf16 and C [N] bf16 shared by HPG heads).
//
// Every Triton and CUDA fold timed so far loads a tile, folds it, then stores it from the same
// warps, so a tile's bytes are in flight only between its fold and the next; the folds stop at
// ~86-89% of copy where the same tiles without a product reach 95%. Here one producer thread
// keeps STAGES whole head tiles (and their X, Y, C) in flight by bulk copies into shared memory
// (cp.async.bulk, completion counted on an mbarrier per stage), whatever the consumers do;
// the CW consumer warps read a tile from shared memory, fold it in exact fp32 FMAs, release the
// stage and store the tile from registers. NOFOLD=1 skips the product (a S alone).
//
// Defines: P (rows of a head), N (columns; 128), J (window), HPG (heads per Y / C group),
// CW (consumer warps), STAGES, MIN_BLOCKS (blocks per SM asked of ptxas), NOFOLD,
// STORE (0: each thread stores its rows from registers; 1: the folded rows go back into the stage
// and each warp stores its rows by one bulk copy; 2: no store, the output only: a read ceiling;
// 3: the folded rows go back into the stage and the producer sends the whole tile by one bulk
// copy, so no consumer waits on a store), STORE_LAG (with STORE 1: a stage is released one tile
// later, its store left in flight meanwhile; with STORE 3: the producer refills a stage one store
// later), LOAD_CHUNKS (bulk copies the tile is loaded in), HS (consecutive heads of one group per
// stage: a stage's tile is HS head tiles, contiguous in S).
#ifndef HS
#define HS 1
#endif
#ifndef STORE_LAG
#define STORE_LAG 0
#endif

typedef unsigned short u16;

#define THREADS ((CW + 1) * 32)
#define RW (HS * P / CW)             // rows of a stage's tile per consumer warp
#define TILE_F (HS * P * N)          // fp32 words of a stage's tile
#define OFF_X (TILE_F * 4)           // byte offsets inside a stage
#define OFF_Y (OFF_X + HS * J * P * 4)
#define OFF_C (OFF_Y + J * N * 2)
#define STAGE_BYTES (OFF_C + N * 2)
#define BARRIER_BYTES 128            // full[STAGES], empty[STAGES] (STORE 3: folded) ahead of the stages

static_assert(N == 128, "a tile row is 32 lanes of 4 columns");
static_assert((HS * P) % CW == 0 && RW % 4 == 0 && RW <= 32 && P % RW == 0 && HPG % HS == 0,
              "rows per consumer warp: a multiple of 4, at most 32, within one head");
static_assert(STAGE_BYTES % 16 == 0 && 16 * STAGES <= BARRIER_BYTES, "bulk copies move 16-byte multiples");
static_assert((TILE_F * 4 / LOAD_CHUNKS) % 16 == 0 && TILE_F % LOAD_CHUNKS == 0, "tile chunks of 16-byte multiples");

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// Tile t with its X, Y and C into stage s, counted on full[s].
__device__ __forceinline__ void load_stage(int s, unsigned char* stages, const float* S, const float* X,
                                           const u16* Y, const u16* C, u64* full, int t) {
    unsigned char* st = stages + s * STAGE_BYTES;
    const long long g = (long long)t * HS / HPG;
    bar_arrive_expect(&full[s], STAGE_BYTES);
#pragma unroll
    for (int k = 0; k < LOAD_CHUNKS; ++k)
        bulk_load(st + k * (TILE_F * 4 / LOAD_CHUNKS), S + (long long)t * TILE_F + k * (TILE_F / LOAD_CHUNKS),
                  TILE_F * 4 / LOAD_CHUNKS, &full[s]);
    bulk_load(st + OFF_X, X + (long long)t * HS * J * P, HS * J * P * 4, &full[s]);
    bulk_load(st + OFF_Y, Y + g * J * N, J * N * 2, &full[s]);
    bulk_load(st + OFF_C, C + g * N, N * 2, &full[s]);
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
fold_ws(float* __restrict__ S, const float* __restrict__ X, const u16* __restrict__ Y, const float* __restrict__ a,
        const u16* __restrict__ C, float* __restrict__ out, int n_tiles) {
    extern __shared__ __align__(128) unsigned char buf[];
    u64* full = (u64*)buf;
    u64* empty = full + STAGES;
    unsigned char* stages = buf + BARRIER_BYTES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], CW);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == CW) {  // the producer: one thread keeps the stages filled
#if STORE == 3
        // ...and empties them: a folded stage goes out by one bulk copy, and the stage is
        // refilled once that copy has read it (STORE_LAG: the copy before it), so the consumers
        // never wait on a store. empty[] counts the consumer warps that have folded a stage.
        if (lane == 0) {
            const int mine = blockIdx.x < n_tiles ? (n_tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
            int next = 0;
            for (; next < mine && next < STAGES; ++next)
                load_stage(next, stages, S, X, Y, C, full, blockIdx.x + next * gridDim.x);
            for (int is = 0; is < mine; ++is) {
                const int s = is % STAGES;
                bar_wait(&empty[s], (is / STAGES) & 1);
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                                 S + (long long)(blockIdx.x + is * gridDim.x) * TILE_F),
                             "r"(smem_addr(stages + s * STAGE_BYTES)), "r"(TILE_F * 4)
                             : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                if (is >= STORE_LAG && next < mine) {  // next's stage is tile (is - STORE_LAG)'s
#if STORE_LAG
                    asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
#else
                    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
                    load_stage(next % STAGES, stages, S, X, Y, C, full, blockIdx.x + next * gridDim.x);
                    ++next;
                }
            }
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
        return;
#else
        if (lane == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++it) {
                const int s = it % STAGES, use = it / STAGES;
                if (use > 0) bar_wait(&empty[s], (use - 1) & 1);
                load_stage(s, stages, S, X, Y, C, full, t);
            }
        }
        return;
#endif
    }

    const int row0 = warp * RW, head = row0 / P;  // a warp's rows lie in one head of the stage
    int it = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++it) {
        const int s = it % STAGES, use = it / STAGES;
        const float ah = __ldg(a + (long long)t * HS + head);  // in flight while the stage fills
        bar_wait(&full[s], use & 1);
        const unsigned char* st = stages + s * STAGE_BYTES;
        const float* sS = (const float*)st;
        float acc[RW][4];
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            const float4 v = *(const float4*)(sS + (row0 + r) * N + 4 * lane);
            acc[r][0] = ah * v.x;
            acc[r][1] = ah * v.y;
            acc[r][2] = ah * v.z;
            acc[r][3] = ah * v.w;
        }
#if !NOFOLD
        const float* sX = (const float*)(st + OFF_X);
        const u16* sY = (const u16*)(st + OFF_Y);
#pragma unroll 4
        for (int j = 0; j < J; ++j) {
            const uint2 yb = *(const uint2*)(sY + j * N + 4 * lane);
            const float y[4] = {bf16_lo(yb.x), bf16_hi(yb.x), bf16_lo(yb.y), bf16_hi(yb.y)};
#pragma unroll
            for (int r4 = 0; r4 < RW; r4 += 4) {
                const float4 xv = *(const float4*)(sX + (head * J + j) * P + row0 % P + r4);  // a broadcast
                const float x[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int k = 0; k < 4; ++k) acc[r4 + i][k] = fmaf(x[i], y[k], acc[r4 + i][k]);
            }
        }
#endif
        const uint2 cb = *(const uint2*)((const u16*)(st + OFF_C) + 4 * lane);
        const float c[4] = {bf16_lo(cb.x), bf16_hi(cb.x), bf16_lo(cb.y), bf16_hi(cb.y)};
        float part[RW];
#pragma unroll
        for (int r = 0; r < RW; ++r)
            part[r] = acc[r][0] * c[0] + acc[r][1] * c[1] + acc[r][2] * c[2] + acc[r][3] * c[3];
#if STORE == 1 || STORE == 3
        // The warp's rows back into the stage (its own part: no other warp reads it), made
        // visible to the bulk copies that send them out.
        float* wS = (float*)st + row0 * N;
#pragma unroll
        for (int r = 0; r < RW; ++r)
            *(float4*)(wS + r * N + 4 * lane) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
#endif
#if STORE == 3
        if (lane == 0) bar_arrive(&empty[s]);  // the producer sends the tile once every warp's rows are in
#elif STORE == 1
        // Out by one bulk copy per warp; the stage is released once that copy has read them.
        if (lane == 0) {
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                             S + (long long)t * TILE_F + row0 * N),
                         "r"(smem_addr(wS)), "r"(RW * N * 4)
                         : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#if STORE_LAG
            // This tile's store stays in flight; the previous tile's stage is released once its
            // store has read it.
            asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
            if (it > 0) bar_arrive(&empty[(it - 1) % STAGES]);
#else
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            bar_arrive(&empty[s]);
#endif
        }
#else
        __syncwarp();
        if (lane == 0) bar_arrive(&empty[s]);  // the stage's reads are done: the producer may refill it
#if STORE == 0
        float* gS = S + (long long)t * TILE_F;
#pragma unroll
        for (int r = 0; r < RW; ++r)
            *(float4*)(gS + (row0 + r) * N + 4 * lane) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
#endif
#endif
        float mine = 0.f;
#pragma unroll
        for (int r = 0; r < RW; ++r) {
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) part[r] += __shfl_xor_sync(0xffffffffu, part[r], off);
            mine = lane == r ? part[r] : mine;
        }
        if (lane < RW) out[(long long)t * HS * P + row0 + lane] = mine;
    }
#if STORE == 1
    if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}
