// Mamba-2 ReplaySSM flush rows, warp-specialised (sm_90 and later; compiled at run time by NVRTC:
// ops/_nvrtc.py; launched by decode_flush_cuda.flush_rows_ws, which documents the arguments and
// the defines).
//
// The same rows, inputs and outputs as flush_cuda.cu, in another form. Timed alone on an H200
// (benchmarks/NOTES_mamba2.md, thirty-third run), a fold run as a fixed wave of blocks that load,
// fold and store in turn stops at 88-93% of copy bandwidth, whatever the residency; a wave in which
// one producer thread keeps whole head tiles in flight by bulk copies reaches 97.6%. This kernel is
// that wave with the flush's operands: one block per SM, STAGES head tiles (with the group's ring
// B, the token's B and C) in shared memory at once, CW consumer warps that fold a tile's rows in
// exact fp32 FMAs and write them back into the stage, and the producer sending each folded tile
// out by one bulk copy before it refills the stage. In the step it is correct but not yet fast:
// 856 us at Nemotron-H batch 256 against 614 us for the default Triton launch, ~280 us behind
// the probe of its form (same notes); hence an option (LaunchConfig(flush_impl="cuda_ws")).

// Operand dtypes, chunk widening and number_flush_rows(): ops/_flush_rows.cuh; barriers and bulk
// copies: ops/_bulk_copy.cuh.
typedef Act<X_KIND> XA;     // x, z, y
typedef Act<BC_KIND> BA;    // B, C
typedef Act<RING_KIND> RA;  // ring_x, ring_B
typedef Act<D_KIND> DA;     // D

#define RW (P / CW)                                  // rows of a head tile per consumer warp
#define ENTRIES (CAP + 1)                            // the ring's entries, then the token's
#define TILE_BYTES (P * N * 4)
#define RB_BYTES (CAP * N * (RING_KIND == 0 ? 4 : 2))  // the group's ring B
#define BC_BYTES (N * (BC_KIND == 0 ? 4 : 2))          // the token's B, then C
#define STAGE_BYTES (TILE_BYTES + RB_BYTES + 2 * BC_BYTES)
#define BARRIER_BYTES 128                            // full[STAGES], empty[STAGES]
#define WARP_OPS (ENTRIES * RW + 2 * RW)             // a warp's weighted x, x_t and z_t (fp32)
#define XR ((CAP * RW + 31) / 32)                    // rounds of the lanes over a warp's ring x

static_assert(N == 128, "a checkpoint row is 32 lanes of 4 columns");
static_assert(THREADS == (CW + 1) * 32 && P % CW == 0 && RW <= 32, "CW consumer warps and a producer; whole rows per warp");
static_assert(CAP + 2 <= 32, "a coef line across the lanes of a warp");
static_assert(RB_BYTES % 16 == 0 && BC_BYTES % 16 == 0 && STAGE_BYTES % 16 == 0 && 16 * STAGES <= BARRIER_BYTES,
              "bulk copies move 16-byte multiples");

// Four consecutive values of a 16-bit or fp32 row in shared memory, widened.
template <int KIND>
__device__ __forceinline__ float4 load4(const typename Act<KIND>::T* p) {
    if constexpr (KIND == 0) {
        return *reinterpret_cast<const float4*>(p);
    } else {
        const uint2 w = *reinterpret_cast<const uint2*>(p);
        return make_float4(Act<KIND>::of_bits((u16)(w.x & 0xffffu)), Act<KIND>::of_bits((u16)(w.x >> 16)),
                           Act<KIND>::of_bits((u16)(w.y & 0xffffu)), Act<KIND>::of_bits((u16)(w.y >> 16)));
    }
}

// acc[r] += a[r] b over the warp's rows (a: weights in shared memory, read as broadcasts).
__device__ __forceinline__ void add_outer(float4 (&acc)[RW], const float* a, float4 b) {
#pragma unroll
    for (int r = 0; r < RW; ++r) {
        const float w = a[r];
        acc[r].x = fmaf(w, b.x, acc[r].x);
        acc[r].y = fmaf(w, b.y, acc[r].y);
        acc[r].z = fmaf(w, b.z, acc[r].z);
        acc[r].w = fmaf(w, b.w, acc[r].w);
    }
}

// Work: items (flush row k, head h), numbered from the ring launch's flags (info[2 * row + 1]) in
// one order by every block; block b takes items b, b + gridDim.x, ... Per item: S <- Gamma S +
// dt_t x_t B_t^T + sum_{j<c} w_j x_j B_j^T in fp32 (the coef line of the ring launch: w_j for
// j < CAP, Gamma at CAP, dt_t at CAP + 1), stored; y = S C, (y + D x) silu(z).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
mamba2_flush_ws(MAMBA2_FLUSH_PARAMS) {
    extern __shared__ __align__(128) unsigned char buf[];
    u64* full = (u64*)buf;
    u64* empty = full + STAGES;
    unsigned char* stages = buf + BARRIER_BYTES;
    float* ops = (float*)(stages + STAGES * STAGE_BYTES);  // [CW][WARP_OPS]
    long long* slots = (long long*)(ops + CW * WARP_OPS + (CW * WARP_OPS) % 2);  // [batch], 8-byte aligned
    int* rows = (int*)(slots + batch);                     // [batch]: the flush rows, in row order
    int* ring_len = rows + batch;                          // [batch]: their c
    __shared__ int warp_count[WARPS];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], CW);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    // (its barriers make the initialisation visible to every thread)
    const int flushing = mamba2_number_flush_rows(info, idx, batch, rows, ring_len, slots, warp_count);
    const int items = flushing * HEADS;
    const int mine = (int)blockIdx.x < items ? (items - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;

    if (warp == CW) {  // the producer: one thread fills the stages and sends the folded tiles out
        if (lane == 0) {
            auto tile_of = [&](int i, int& k, int& h) {
                const int it = blockIdx.x + i * gridDim.x;
                k = it / HEADS;
                h = it % HEADS;
                return ckpt + slots[k] * s_ck_slot + h * s_ck_head;
            };
            auto load = [&](int i) {
                int k, h;
                float* tile = tile_of(i, k, h);
                const int s = i % STAGES, g = h / HPG;
                unsigned char* st = stages + s * STAGE_BYTES;
                bar_arrive_expect(&full[s], STAGE_BYTES);
                bulk_load(st, tile, TILE_BYTES, &full[s]);
                // The ring's CAP entries whole (those from c on are never read: they may hold anything).
                bulk_load(st + TILE_BYTES, ring_B + slots[k] * s_rB_slot + g * s_rB_group, RB_BYTES, &full[s]);
                bulk_load(st + TILE_BYTES + RB_BYTES, Bm + rows[k] * s_B_row + g * s_B_group, BC_BYTES, &full[s]);
                bulk_load(st + TILE_BYTES + RB_BYTES + BC_BYTES, Cm + rows[k] * s_C_row + g * s_C_group, BC_BYTES,
                          &full[s]);
            };
            int next = 0;
            for (; next < mine && next < STAGES; ++next) load(next);
            for (int i = 0; i < mine; ++i) {
                const int s = i % STAGES;
                int k, h;
                float* tile = tile_of(i, k, h);
                bar_wait(&empty[s], (i / STAGES) & 1);  // every consumer warp's rows are back in the stage
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(tile),
                             "r"(smem_addr(stages + s * STAGE_BYTES)), "r"(TILE_BYTES)
                             : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                if (next < mine) {  // next's stage is this one: refill it once the store has read it
                    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                    load(next);
                    ++next;
                }
            }
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
        return;
    }

    float* xw = ops + warp * WARP_OPS;  // [ENTRIES][RW]: w_j x_j (0 from c on); entry CAP: dt_t x_t
    float* xs = xw + ENTRIES * RW;      // [RW]: x_t
    float* zs = xs + RW;                // [RW]: z_t
    const int pt = warp * RW;           // the warp's rows of the head
    // An item's operands in registers, loaded one item ahead: its coef line (lane j holds entry j),
    // the ring's x of the warp's rows (entry q / RW, row q % RW at lane q % 32, round q / 32),
    // x_t and z_t (lane p < RW), D. Loaded when the item starts they would add a DRAM round trip to
    // every item of the warp's walk.
    float lv = 0.f, rv[XR], xv = 0.f, zv = 0.f, dv = 0.f;
    auto fetch = [&](int i) {
        const int it = blockIdx.x + i * gridDim.x, k = it / HEADS, h = it % HEADS;
        const long long row = rows[k], slot = slots[k];
        const int c = ring_len[k];
        const float* line = coef + (row * HEADS + h) * (CAP + 2);
        lv = lane < CAP + 2 ? line[lane] : 0.f;
        dv = HAS_D ? DA::load(Dv + h) : 0.f;
        const typename RA::T* rx = ring_x + slot * s_rx_slot + h * s_rx_head + pt;
#pragma unroll
        for (int r = 0; r < XR; ++r) {
            const int q = lane + 32 * r;
            rv[r] = q < CAP * RW && q / RW < c ? RA::load(rx + (q / RW) * RX_J + q % RW) : 0.f;
        }
        if (lane < RW) {
            xv = XA::load(x + row * s_x_row + h * s_x_head + pt + lane);
#if HAS_Z
            zv = XA::load(z + row * s_z_row + h * s_z_head + pt + lane);
#endif
        }
    };
    if (mine > 0) fetch(0);
    for (int i = 0; i < mine; ++i) {
        const int it = blockIdx.x + i * gridDim.x, k = it / HEADS, h = it % HEADS, s = i % STAGES;
        const long long row = rows[k];
        const int c = ring_len[k];
        // This item's weights into the warp's scratch, then the next item's operands in flight.
        const float gamma = __shfl_sync(0xffffffffu, lv, CAP), dt_t = __shfl_sync(0xffffffffu, lv, CAP + 1);
#pragma unroll
        for (int r = 0; r < XR; ++r) {
            const int q = lane + 32 * r;
            const float w = __shfl_sync(0xffffffffu, lv, (q / RW) & 31);
            if (q < CAP * RW) xw[q] = q / RW < c ? w * rv[r] : 0.f;  // a select: entries past c may be NaN
        }
        if (lane < RW) {
            xw[CAP * RW + lane] = dt_t * xv;
            xs[lane] = xv;
            zs[lane] = zv;
        }
        const float d_h = dv;
        __syncwarp();
        if (i + 1 < mine) fetch(i + 1);

        bar_wait(&full[s], (i / STAGES) & 1);
        unsigned char* st = stages + s * STAGE_BYTES;
        float* sS = (float*)st + pt * N + 4 * lane;
        const typename RA::T* sB = (const typename RA::T*)(st + TILE_BYTES) + 4 * lane;
        const typename BA::T* sBt = (const typename BA::T*)(st + TILE_BYTES + RB_BYTES) + 4 * lane;
        const typename BA::T* sC = (const typename BA::T*)(st + TILE_BYTES + RB_BYTES + BC_BYTES) + 4 * lane;
        float4 acc[RW];
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            const float4 v = *reinterpret_cast<const float4*>(sS + r * N);
            acc[r] = make_float4(gamma * v.x, gamma * v.y, gamma * v.z, gamma * v.w);
        }
#pragma unroll 4
        for (int j = 0; j < c; ++j) add_outer(acc, xw + j * RW, load4<RING_KIND>(sB + j * N));
        add_outer(acc, xw + CAP * RW, load4<BC_KIND>(sBt));
        const float4 cv = load4<BC_KIND>(sC);
        // The warp's rows back into the stage (its own part), visible to the producer's bulk store.
#pragma unroll
        for (int r = 0; r < RW; ++r) *reinterpret_cast<float4*>(sS + r * N) = acc[r];
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) bar_arrive(&empty[s]);

        float mine_y = 0.f;
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            float part = acc[r].x * cv.x + acc[r].y * cv.y + acc[r].z * cv.z + acc[r].w * cv.w;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
            mine_y = lane == r ? part : mine_y;
        }
        if (lane < RW)
            y[row * s_y_row + h * s_y_head + pt + lane] = XA::from(mamba2_gated(mine_y, d_h, xs[lane], zs[lane]));
        __syncwarp();  // the warp's weights are rewritten by its next item
    }
}
