// Mamba-2 ReplaySSM flush rows, warp-specialised (sm_90 and later; compiled at run time by NVRTC:
// ops/_nvrtc.py; launched by decode_flush_cuda.flush_rows_ws, which documents the arguments and
// the defines).
//
// The same rows, inputs and outputs as flush_cuda.cu, in another form. Timed alone on an H200
// (benchmarks/NOTES_mamba2.md, thirty-third run), a fold run as a fixed wave of blocks that load,
// fold and store in turn stops at 88-93% of copy bandwidth, whatever the residency; a wave in which
// one producer thread keeps whole head tiles in flight by bulk copies reaches 97.6%. This kernel is
// that wave with the flush's operands: one block per SM, STAGES (row, head) items in shared memory
// at once (the head's checkpoint tile with every operand the item reads), CW consumer warps that
// fold a tile's rows in exact fp32 FMAs and write them back into the stage, and the producer
// sending each folded tile out by one bulk copy before it refills the stage. Alone it runs at its
// probe's speed (575 us at Nemotron-H batch 256 under Nsight Compute, 841 us while the consumers
// still loaded the ring x, x, z and coef line themselves); it is the staged step's flush launch
// from batch 256 at d_state 128 (LaunchConfig(flush_impl="cuda_ws"), launch.py).

// Operand dtypes, chunk widening and number_flush_rows(): ops/_flush_rows.cuh; barriers and bulk
// copies: ops/_bulk_copy.cuh.
typedef Act<X_KIND> XA;     // x, z, y
typedef Act<BC_KIND> BA;    // B, C
typedef Act<RING_KIND> RA;  // ring_x, ring_B
typedef Act<D_KIND> DA;     // D

#define RW (P / CW)                                  // rows of a head tile per consumer warp
#define ENTRIES (CAP + 1)                            // the ring's entries, then the token's
#define LINE (CAP + 2)                               // a coef line: w_j (j < CAP), Gamma, dt_t
// A stage, in bytes: the head's checkpoint tile, the group's ring B, the token's B and C, the
// head's ring x, the token's x and z, and the 16-byte-aligned window around the coef line.
#define OFF_RB (P * N * 4)
#define OFF_BT (OFF_RB + CAP * N * (RING_KIND == 0 ? 4 : 2))
#define OFF_CT (OFF_BT + N * (BC_KIND == 0 ? 4 : 2))
#define OFF_RX (OFF_CT + N * (BC_KIND == 0 ? 4 : 2))
#define OFF_XT (OFF_RX + CAP * P * (RING_KIND == 0 ? 4 : 2))
#define OFF_ZT (OFF_XT + P * (X_KIND == 0 ? 4 : 2))
#define OFF_COEF (OFF_ZT + HAS_Z * P * (X_KIND == 0 ? 4 : 2))
#define COEF_BYTES ((12 + 4 * LINE + 15) / 16 * 16)  // the window's most: 12 bytes before the line
#define STAGE_BYTES (OFF_COEF + COEF_BYTES)
#define BARRIER_BYTES 128                            // full[STAGES], empty[STAGES]
#define WARP_OPS (ENTRIES * RW)                      // a warp's weighted x (fp32)
#define XR ((CAP * RW + 31) / 32)                    // rounds of the lanes over a warp's ring x

static_assert(N == 128, "a checkpoint row is 32 lanes of 4 columns");
static_assert(THREADS == (CW + 1) * 32 && P % CW == 0 && RW <= 32, "CW consumer warps and a producer; whole rows per warp");
static_assert(P % 16 == 0 && OFF_COEF % 16 == 0 && STAGE_BYTES % 16 == 0 && 16 * STAGES <= BARRIER_BYTES,
              "bulk copies move 16-byte multiples to 16-byte boundaries");

// Where the coef line of (row, h) starts in the coef scratch, in fp32 words. The producer copies
// it in the 16-byte window from (at & ~3); the consumers read it (at & 3) words into that window.
__device__ __forceinline__ long long coef_line_at(long long row, int h) { return (row * HEADS + h) * LINE; }

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

// acc[r] += a[r] b over the warp's rows (a: weights in shared memory, read as broadcasts, four
// at a time where the rows come in fours).
__device__ __forceinline__ void add_outer(float4 (&acc)[RW], const float* a, float4 b) {
#if RW % 4 == 0
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
#else
#pragma unroll
    for (int r = 0; r < RW; ++r) {
        const float w = a[r];
        acc[r].x = fmaf(w, b.x, acc[r].x);
        acc[r].y = fmaf(w, b.y, acc[r].y);
        acc[r].z = fmaf(w, b.z, acc[r].z);
        acc[r].w = fmaf(w, b.w, acc[r].w);
    }
#endif
}

// Work: items (flush row k, head h), numbered from the ring launch's flags (info[2 * row + 1]) in
// one order by every block; block b takes items b, b + gridDim.x, ... (ORDER 0) or the next one
// from a counter (ORDER 1, below). Per item: S <- Gamma S +
// dt_t x_t B_t^T + sum_{j<c} w_j x_j B_j^T in fp32 (the coef line of the ring launch: w_j for
// j < CAP, Gamma at CAP, dt_t at CAP + 1), stored; y = S C, (y + D x) silu(z). Every operand of an
// item reaches the block in the item's stage, by the producer's bulk copies: a consumer's own
// global load queues behind the tiles in flight (with five stages per SM on an H200, longer than
// an item takes), and with the ring x, x, z and coef line loaded by the consumers, an item ahead,
// Nsight Compute put half of their cycles on waiting for those loads (benchmarks/NOTES_mamba2.md,
// thirty-fourth run).
//
// ORDER 1: a block's producer takes its next CHUNK items from item_counter (zeroed by the ring
// launch) instead of striding over the items, so that the tiles in flight on the whole device
// stay the checkpoint's next ones. ORDER 2 chooses per step, from the number of flush rows every
// block counts alike: the counter when at least half of the batch's rows flush (an in-phase step),
// else the stride, one item a take (a staggered step: a server's slots flush about 1/16 of the rows
// at a time, and there the counter read 7% slower in some captures at Nemotron-H 512). On an H200
// an in-place update of 1 GiB as one wave of blocks striding over it takes 543-579 us against
// 525-541 us as a grid, and 529-544 us with the passes taken from a counter (probe_memory_rates.py,
// the thirty-eighth run).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
mamba2_flush_ws(MAMBA2_FLUSH_PARAMS, int* __restrict__ item_counter) {
    extern __shared__ __align__(128) unsigned char buf[];
    u64* full = (u64*)buf;
    u64* empty = full + STAGES;
    unsigned char* stages = buf + BARRIER_BYTES;
    float* ops = (float*)(stages + STAGES * STAGE_BYTES);  // [CW][WARP_OPS]
    float* d_of = ops + CW * WARP_OPS;                     // [HEADS]: D
    long long* slots = (long long*)(d_of + HEADS + (CW * WARP_OPS + HEADS) % 2);  // [batch], 8-byte aligned
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
#if ORDER
    // A producer takes CHUNK consecutive items at a time from the counter and asks for its next take
    // when it starts one, so the atomic's round trip (long under a saturated memory system) overlaps
    // the items of the one before.
    __shared__ int stage_item[STAGES];  // the item in each stage; -1: no more
    __shared__ int first_item, first_end;  // the block's first take: items [first_item, first_end)
#if ORDER == 2
    const bool counted = 2 * flushing >= batch;
#else
    const bool counted = true;
#endif
    // A block's n-th take: items [start, *end) from the counter, or by the grid stride (ORDER 0's
    // items, in its order). `seen`: the start of the block's last take. The counter counts items:
    // CHUNK a take, and with TAPER, one once (by the last start the block saw) fewer than TAPER
    // chunks a block remain. With CHUNK a take to the end, the step's last chunks leave some blocks
    // folding up to CHUNK items (~9 us at Nemotron-H dims) while the rest have finished; one at a
    // time, at most one.
    const int taper_from = TAPER ? items - TAPER * CHUNK * (int)gridDim.x : items;
    auto take = [&](int n, int seen, int* end) {
        const int size = counted && seen < taper_from ? CHUNK : 1;
        const int start = counted ? atomicAdd(item_counter, size) : (int)blockIdx.x + n * (int)gridDim.x;
        *end = start + size;
        return start;
    };
    if (tid == 0) first_item = items ? take(0, 0, &first_end) : 0;
    __syncthreads();
    if (first_item >= items) return;  // no flush rows (or none left): leave the SM to the stream launch
#else
    const int mine = (int)blockIdx.x < items ? (items - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    if (mine == 0) return;  // a step without flush rows: its blocks leave the SMs to the stream launch
#endif
#if HAS_D
    for (int i = tid; i < HEADS; i += THREADS) d_of[i] = DA::load(Dv + i);
    __syncthreads();
#endif

    if (warp == CW) {  // the producer: one thread fills the stages and sends the folded tiles out
        if (lane == 0) {
            auto tile_of_item = [&](int it, int& k, int& h) {
                k = it / HEADS;
                h = it % HEADS;
                return ckpt + slots[k] * s_ck_slot + h * s_ck_head;
            };
#if ORDER
            auto load = [&](int i, int it) {  // the stage of sequence number i gets item it
                int k, h;
                float* tile = tile_of_item(it, k, h);
                const int s = i % STAGES;
                stage_item[s] = it;  // published to the consumers by the barrier's arrival (release)
#else
            auto tile_of = [&](int i, int& k, int& h) { return tile_of_item(blockIdx.x + i * gridDim.x, k, h); };
            auto load = [&](int i) {
                int k, h;
                float* tile = tile_of(i, k, h);
                const int s = i % STAGES;
#endif
                const long long row = rows[k], slot = slots[k];
                const int g = h / HPG;
                unsigned char* st = stages + s * STAGE_BYTES;
                // The coef line's window: from the 16-byte boundary at or before it, whole 16-byte
                // chunks (the launcher leaves 12 readable bytes past the last line).
                const long long at = coef_line_at(row, h), first = at & ~3LL;
                const unsigned window = (unsigned)(((at - first) * 4 + 4 * LINE + 15) & ~15LL);
                bar_arrive_expect(&full[s], OFF_COEF + window);
                bulk_load(st, tile, OFF_RB, &full[s]);
                // The ring's CAP entries whole (those from c on are never read: they may hold anything).
                bulk_load(st + OFF_RB, ring_B + slot * s_rB_slot + g * s_rB_group, OFF_BT - OFF_RB, &full[s]);
                bulk_load(st + OFF_BT, Bm + row * s_B_row + g * s_B_group, OFF_CT - OFF_BT, &full[s]);
                bulk_load(st + OFF_CT, Cm + row * s_C_row + g * s_C_group, OFF_RX - OFF_CT, &full[s]);
                bulk_load(st + OFF_RX, ring_x + slot * s_rx_slot + h * s_rx_head, OFF_XT - OFF_RX, &full[s]);
                bulk_load(st + OFF_XT, x + row * s_x_row + h * s_x_head, OFF_ZT - OFF_XT, &full[s]);
#if HAS_Z
                bulk_load(st + OFF_ZT, z + row * s_z_row + h * s_z_head, OFF_COEF - OFF_ZT, &full[s]);
#endif
                bulk_load(st + OFF_COEF, coef + first, window, &full[s]);
            };
            // L2_AHEAD (1 or 2): the tile and ring x of the item the producer loads next (and of the
            // one after it) asked of the L2 while every stage is still busy, so that its bulk load,
            // issued when a stage frees, waits for an L2 hit rather than DRAM (an item's reads more
            // in flight per SM, without its shared memory: five stages leave the stream launch too
            // little beside the block). Each item is asked for once, L2_AHEAD loads before its own.
            auto ask_l2 = [&](int it) {
                int k, h;
                const float* tile = tile_of_item(it, k, h);
                bulk_prefetch_l2(tile, OFF_RB);
                bulk_prefetch_l2(ring_x + slots[k] * s_rx_slot + h * s_rx_head, OFF_XT - OFF_RX);
            };
            // Once every consumer warp's rows of sequence number i are back in its stage, the folded
            // tile goes out by one bulk store.
            auto send_out = [&](int i, float* tile) {
                const int s = i % STAGES;
                bar_wait(&empty[s], (i / STAGES) & 1);
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(tile),
                             "r"(smem_addr(stages + s * STAGE_BYTES)), "r"(OFF_RB)
                             : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            };
#if ORDER
            // Items until the counter runs past them; then a stage marked -1 ends the consumers' loop.
            auto finish = [&](int i) {
                stage_item[i % STAGES] = -1;
                bar_arrive(&full[i % STAGES]);
            };
            int it = first_item, chunk_end = min(first_end, items), taken = 1, pending_end;
            int pending = take(taken++, it, &pending_end);
            auto advance = [&]() {  // it: the next item, or items when there is none
                if (++it < chunk_end) return;
                it = min(pending, items);
                chunk_end = min(pending_end, items);
                if (it < items) pending = take(taken++, it, &pending_end);
            };
            int next = 0;
            for (; next < STAGES && it < items; ++next) {
                load(next, it);
                advance();
            }
            bool ended = next < STAGES;
            if (ended) finish(next);
            // The item after `it`: the next in its take, else the first of the take after (asked
            // of the counter when this one started), or items where there is none.
            auto after_it = [&]() { return it + 1 < chunk_end ? it + 1 : min(pending, items); };
            // Only in a counted (in-phase) step: in a staggered one the flush runs beside the stream
            // launch, which keeps the memory system busy, and the forms asking ahead in every step
            // read the staggered step 0.4-1.2 us longer at Nemotron-H 384-512 on an H100
            // (benchmarks/NOTES_mamba2.md, fiftieth run).
            const bool ask_ahead = L2_AHEAD && counted;
            if (ask_ahead && it < items) {
                ask_l2(it);
                if (L2_AHEAD == 2 && after_it() < items) ask_l2(after_it());
            }
            for (int i = 0; i < next; ++i) {
                int k, h;
                send_out(i, tile_of_item(stage_item[i % STAGES], k, h));
                if (it < items) {  // next's stage is this one: refill it once the store has read it
                    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                    load(next, it);
                    ++next;
                    advance();
                    if (ask_ahead && it < items) {
                        const int ahead = L2_AHEAD == 2 ? after_it() : it;
                        if (ahead < items) ask_l2(ahead);
                    }
                } else if (!ended) {
                    finish(next);
                    ended = true;
                }
            }
#else
            int next = 0;
            for (; next < mine && next < STAGES; ++next) load(next);
            for (int d = 0; d < L2_AHEAD && next + d < mine; ++d) ask_l2(blockIdx.x + (next + d) * gridDim.x);
            for (int i = 0; i < mine; ++i) {
                int k, h;
                send_out(i, tile_of(i, k, h));
                if (next < mine) {  // next's stage is this one: refill it once the store has read it
                    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                    load(next);
                    ++next;
                    if (L2_AHEAD && next + L2_AHEAD - 1 < mine) ask_l2(blockIdx.x + (next + L2_AHEAD - 1) * gridDim.x);
                }
            }
#endif
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
        return;
    }

    float* xw = ops + warp * WARP_OPS;  // [ENTRIES][RW]: w_j x_j (0 from c on); entry CAP: dt_t x_t
    const int pt = warp * RW;           // the warp's rows of the head
    for (int i = 0;; ++i) {
        const int s = i % STAGES;
#if ORDER
        bar_wait(&full[s], (i / STAGES) & 1);
        const int it = stage_item[s];
        if (it < 0) break;
#else
        if (i >= mine) break;
        const int it = blockIdx.x + i * gridDim.x;
#endif
        const int k = it / HEADS, h = it % HEADS;
        const long long row = rows[k];
        const int c = ring_len[k], lead = (int)(coef_line_at(row, h) & 3);  // the line in its window
        const float d_h = HAS_D ? d_of[h] : 0.f;
#if !ORDER
        bar_wait(&full[s], (i / STAGES) & 1);
#endif
        unsigned char* st = stages + s * STAGE_BYTES;
        // This item's weights into the warp's scratch; its rows' x and z kept for the output (the
        // stage is refilled once the folded rows are back in it).
        const float* line = (const float*)(st + OFF_COEF) + lead;
        const typename RA::T* sx = (const typename RA::T*)(st + OFF_RX) + pt;
        const float gamma = line[CAP], dt_t = line[CAP + 1];
#pragma unroll
        for (int r = 0; r < XR; ++r) {
            const int q = lane + 32 * r, j = q / RW;
            // A select, not a product: entries past c may hold NaN.
            if (q < CAP * RW) xw[q] = j < c ? line[j] * RA::load(sx + j * P + q % RW) : 0.f;
        }
        float xv = 0.f, zv = 0.f;
        if (lane < RW) {
            xv = XA::load((const typename XA::T*)(st + OFF_XT) + pt + lane);
#if HAS_Z
            zv = XA::load((const typename XA::T*)(st + OFF_ZT) + pt + lane);
#endif
            xw[CAP * RW + lane] = dt_t * xv;
        }
        __syncwarp();

        float* sS = (float*)st + pt * N + 4 * lane;
        const typename RA::T* sB = (const typename RA::T*)(st + OFF_RB) + 4 * lane;
        const typename BA::T* sBt = (const typename BA::T*)(st + OFF_BT) + 4 * lane;
        const typename BA::T* sC = (const typename BA::T*)(st + OFF_CT) + 4 * lane;
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
            y[row * s_y_row + h * s_y_head + pt + lane] = XA::from(mamba2_gated(mine_y, d_h, xv, zv));
        __syncwarp();  // the warp's weights are rewritten by its next item
    }
}
