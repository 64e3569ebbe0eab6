// Mamba-2 ReplaySSM flush rows, one head tile per block item (compiled at run time by NVRTC:
// ops/_nvrtc.py; launched by decode_flush_head.flush_rows_head, which documents the arguments and
// the defines).
//
// The same rows, inputs and outputs as flush_cuda.cu and flush_ws.cu, in the form that folded at
// copy speed in benchmarks/fold_grid.cu: a block of WARPS warps owns one head's checkpoint tile
// (RW rows a warp, four columns a lane), issues the tile's loads first and every operand's after
// them, folds in exact fp32 FMAs and stores the tile from registers. Timed alone on an H100 (the
// fifty-fifth run), such blocks as a fixed wave fed by an item counter folded at 99.7% of copy
// against 99.9% as a hardware-scheduled grid, 95% striding over the items and 96.7% for the
// warp-specialised probe; the wave is what a step's flush launch must be (a grid would pay its
// exits in every non-flush step).
//
// Work: items (flush row k, head h), numbered from the ring launch's flags (info[2 * row + 1]) in
// one order by every block. ORDER 0: block b takes items b, b + gridDim.x, ...; ORDER 1: the next
// item from item_counter (zeroed by the ring launch), asked an item ahead so that the atomic's
// round trip overlaps the item before; ORDER 2: the counter in a step where at least half of the
// batch's rows flush (in phase), else the stride (a staggered step, whose few flush rows run
// beside the stream launch). Per item: S <- Gamma S + dt_t x_t B_t^T + sum_{j<c} w_j x_j B_j^T in
// fp32 (the ring launch's coef line: w_j for j < CAP, Gamma at CAP, dt_t at CAP + 1), in the
// order flush_ws.cu folds it (the same bits); y = S C, (y + D x) silu(z).

// Operand dtypes, chunk widening, the group's operands and number_flush_rows(): ops/_flush_rows.cuh.
typedef Act<X_KIND> XA;     // x, z, y
typedef Act<BC_KIND> BA;    // B, C
typedef Act<RING_KIND> RA;  // ring_x, ring_B
typedef Act<D_KIND> DA;     // D

#define RW (P / WARPS)                 // checkpoint rows of a warp
#define ENTRIES (CAP + 1)              // the ring's entries, then the token's
#define PAIRS (CAP * RW)               // a warp's ring (entry, row) pairs
#define PAIR_ROUNDS ((PAIRS + 31) / 32)
// fp32 words of shared memory ahead of the flush rows: the group's bs [ENTRIES][N] and cs [N],
// then each warp's xw [ENTRIES][RW].
#define OPS (ENTRIES * N + N + WARPS * ENTRIES * RW)

static_assert(N == 128, "a checkpoint row is 32 lanes of 4 columns");
static_assert(P % WARPS == 0 && RW % 4 == 0 && RW <= 32, "whole rows per warp, in fours (float4 broadcasts)");
static_assert(OPS % 2 == 0, "the flush rows' slots (int64) after OPS and 2 x batch words, 8-byte aligned");

#if MAX_REGS
#define HEAD_BOUNDS __maxnreg__(MAX_REGS)
#else
#define HEAD_BOUNDS __launch_bounds__(THREADS, MIN_BLOCKS)
#endif
extern "C" __global__ void HEAD_BOUNDS
mamba2_flush_head(MAMBA2_FLUSH_PARAMS, int* __restrict__ item_counter) {
    extern __shared__ __align__(16) float smem[];
    float* bs = smem;                       // [ENTRIES][N]: B_j (zero from c on); entry CAP: B_t
    float* cs = bs + ENTRIES * N;           // [N]: C_t
    int* rows = (int*)(smem + OPS);         // [batch]: the flush rows, in row order
    int* ring_len = rows + batch;           // [batch]: their c
    long long* slots = (long long*)(ring_len + batch);  // [batch]: their slots (OPS and 2 x batch words: 8-byte aligned)
    __shared__ int warp_count[WARPS];
    __shared__ int taken[2];                // ORDER 1 / 2: this item, and the next one, asked ahead

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float* xw = cs + N + warp * (ENTRIES * RW);  // [ENTRIES][RW]: w_j x_j (0 from c on); entry CAP: dt_t x_t
    const int pt = warp * RW;                     // the warp's first row of the head
    const int flushing = mamba2_number_flush_rows(info, idx, batch, rows, ring_len, slots, warp_count);
    const int items = flushing * HEADS;
#if ORDER == 2
    const bool counted = 2 * flushing >= batch;
#else
    const bool counted = ORDER == 1;
#endif
    if (counted) {
        if (tid == 0) taken[0] = items ? atomicAdd(item_counter, 1) : items;
        __syncthreads();
    }
    for (int i = 0;; ++i) {
        const int it = counted ? taken[i & 1] : (int)blockIdx.x + i * (int)gridDim.x;
        if (it >= items) break;
        // (read by every thread before the barrier below; rewritten only after the one at the end)
        if (counted && tid == 0) taken[(i + 1) & 1] = atomicAdd(item_counter, 1);
        const int k = it / HEADS, h = it % HEADS, g = h / HPG;
        const long long row = rows[k], slot = slots[k];
        const int c = ring_len[k];

        // Every load first, the tile's ahead of the rest: the tile is what the item waits on.
        float* tile = ckpt + slot * s_ck_slot + h * s_ck_head + pt * CK_P + 4 * lane;
        float4 acc[RW];
#pragma unroll
        for (int r = 0; r < RW; ++r) acc[r] = *reinterpret_cast<const float4*>(tile + r * CK_P);
        uint4 raw[G_ROUNDS];
        mamba2_group_load<RA, BA>(raw, ring_B + slot * s_rB_slot + g * s_rB_group, Bm + row * s_B_row + g * s_B_group,
                                  Cm + row * s_C_row + g * s_C_group);
        const float* line = coef + (row * HEADS + h) * (CAP + 2);
        const typename RA::T* rx = ring_x + slot * s_rx_slot + h * s_rx_head + pt;
        float wv[PAIR_ROUNDS], xv[PAIR_ROUNDS];
#pragma unroll
        for (int r = 0; r < PAIR_ROUNDS; ++r) {
            const int q = lane + r * 32, j = q / RW;
            wv[r] = q < PAIRS ? line[j] : 0.f;
            xv[r] = q < PAIRS ? RA::load(rx + j * RX_J + q % RW) : 0.f;
        }
        const float gamma = line[CAP], dt_t = line[CAP + 1];
        float xt = 0.f, zt = 0.f;  // lane r < RW: row r's x_t and z_t
        if (lane < RW) {
            xt = XA::load(x + row * s_x_row + h * s_x_head + pt + lane);
#if HAS_Z
            zt = XA::load(z + row * s_z_row + h * s_z_head + pt + lane);
#endif
        }
        const float d_h = HAS_D ? DA::load(Dv + h) : 0.f;

        // Then the operands into shared memory: the group's, widened, and the warp's weighted x.
        mamba2_group_put(raw, bs, cs, c);
#pragma unroll
        for (int r = 0; r < PAIR_ROUNDS; ++r) {
            const int q = lane + r * 32;
            if (q < PAIRS) xw[q] = q / RW < c ? wv[r] * xv[r] : 0.f;
        }
        if (lane < RW) xw[CAP * RW + lane] = dt_t * xt;
        __syncthreads();

#pragma unroll
        for (int r = 0; r < RW; ++r) {
            acc[r].x *= gamma; acc[r].y *= gamma; acc[r].z *= gamma; acc[r].w *= gamma;
        }
        for (int j = 0; j < ENTRIES; ++j) {
            if (j < c || j == CAP) {  // uniform over the block
                const float4 b = *reinterpret_cast<const float4*>(bs + j * N + 4 * lane);
#pragma unroll
                for (int r4 = 0; r4 < RW; r4 += 4) {
                    const float4 w4 = *reinterpret_cast<const float4*>(xw + j * RW + r4);  // a broadcast
                    const float w[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        acc[r4 + q].x = fmaf(w[q], b.x, acc[r4 + q].x);
                        acc[r4 + q].y = fmaf(w[q], b.y, acc[r4 + q].y);
                        acc[r4 + q].z = fmaf(w[q], b.z, acc[r4 + q].z);
                        acc[r4 + q].w = fmaf(w[q], b.w, acc[r4 + q].w);
                    }
                }
            }
        }
        const float4 cv = *reinterpret_cast<const float4*>(cs + 4 * lane);
        float mine = 0.f;
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            *reinterpret_cast<float4*>(tile + r * CK_P) = acc[r];
            float part = acc[r].x * cv.x + acc[r].y * cv.y + acc[r].z * cv.z + acc[r].w * cv.w;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
            mine = lane == r ? part : mine;
        }
        if (lane < RW) y[row * s_y_row + h * s_y_head + pt + lane] = XA::from(mamba2_gated(mine, d_h, xt, zt));
        __syncthreads();  // bs, cs and xw are rewritten by the next item; taken[] holds its number
    }
}
