// Gated DeltaNet ReplaySSM flush rows in CUDA C++ (compiled at run time by NVRTC behind
// ops/_flush_rows.cuh; launched by decode_flush_cuda.py, which documents the arguments and the
// defines).
//
// The one-launch step (decode_fused.py) with FusedVariant(flush_impl="cuda") leaves its flush
// rows to this launch, which runs first and lets the fused kernel start beside it at once
// (griddepcontrol.launch_dependents): its blocks read every row's cursors and fold the flush rows;
// the fused kernel serves the other rows and moves every row's cursors once this launch is done.
// For one flush row, value head h (key head h / G), with c the committed entries and D_j the
// cumulative log-decay through ring entry j, per checkpoint row i (a d_k vector S_i):
//
//   w_j = e^{D_t - D_j} (j < c),  a^k_j = (k_j . k_t) w_j,  a^q_j = (k_j . q_t) w_j
//   u_i = beta_t (v_i - e^{D_t} S_i . k_t - sum_j a^k_j U_ji)
//   o_i = e^{D_t} S_i . q_t + sum_j a^q_j U_ji + u_i (k_t . q_t)
//   S_i <- e^{D_t} S_i + sum_{j<c} U_ji w_j k_j + u_i k_t        (exact fp32 FMAs)
//
// with q_t, k_t l2-normalised (k_t rounded as the ring stores keys) and g_t, beta_t from the raw
// gate projections, as decode.py's _load_qk / _load_gate. The row-local form is what lets a warp
// own a few rows: their two dot products reduce inside the warp, u_i and o_i are a lane's, and the
// rank-(c+1) fold needs only the key head's ring keys, which the block holds.

typedef Act<QK_KIND> QA;     // q, k
typedef Act<V_KIND> VA;      // v, out
typedef Act<RING_KIND> RA;   // ring_k (the token's key is rounded to it)
typedef Act<RV_KIND> RVA;    // ring_v's dtype (the token's v is rounded to it)
typedef Act<GATE_KIND> GA;   // a, b
typedef Act<ALOG_KIND> LA;   // A_log
typedef Act<BIAS_KIND> BIA;  // dt_bias

#define LANES (K / 4)                        // float4 columns of a checkpoint row
#define ROWS_PER_INSTR (32 / LANES)          // rows one warp instruction covers
#define WARP_ROWS (ROWS_PER_INSTR * PASSES)  // rows of a warp item
#define ENTRIES (CAP + 1)                    // the ring's entries, then the token's
#define WARP_ITEMS (HPI * (V / WARP_ROWS))   // warp items of a block item
#define ITEMS_PER_ROW (HV / HPI)             // block items of a flush row
#define PAIRS (CAP * WARP_ROWS)              // cached u of a warp item
#define PAIR_ROUNDS ((PAIRS + 31) / 32)
#define QK_PER_LANE ((K + 31) / 32)
#define RK_CH (K / Chunk<RING_KIND>::WIDTH)  // 16-byte chunks of a ring key
#define K_CHUNKS (CAP * RK_CH)
#define K_ROUNDS ((K_CHUNKS + THREADS - 1) / THREADS)
#define R4(n) (((n) + 3) / 4 * 4)
// fp32 words of shared memory, each region a multiple of 4 words: the key head's ks [ENTRIES][K]
// (ring keys, zero from c on; entry CAP: k_t) and qs [K]; dk, dq [ENTRIES] (ring keys . k_t, . q_t;
// dq[CAP] = k_t . q_t); per head of the item gs [CAP] (ring log-decays), wl [CAP] (w_j) and
// hs [4] (g_t, beta_t, e^{D_t}); per warp uw [ENTRIES][WARP_ROWS] (U_ji w_j; entry CAP: u_i) and
// sd [2][WARP_ROWS] (S_i . k_t, S_i . q_t).
#define O_QS (ENTRIES * K)
#define O_DK (O_QS + K)
#define O_DQ (O_DK + R4(ENTRIES))
#define O_GS (O_DQ + R4(ENTRIES))
#define O_WL (O_GS + R4(HPI * CAP))
#define O_HS (O_WL + R4(HPI * CAP))
#define O_WARPS (O_HS + 4 * HPI)
#define WARP_OPS R4(ENTRIES * WARP_ROWS + 2 * WARP_ROWS)
#define OPS (O_WARPS + WARPS * WARP_OPS)
// Threads of the load phase: warps 0 and 1 take k_t and q_t, then HPI * CAP ring log-decays and
// HPI gate lines.
#define T_GS 64
#define T_GATE (T_GS + HPI * CAP)

static_assert(K % 8 == 0 && LANES <= 32 && 32 % LANES == 0, "a checkpoint row spans a power-of-two part of a warp");
static_assert(THREADS % 32 == 0 && V % WARP_ROWS == 0 && HV % HPI == 0 && G % HPI == 0, "item shapes");
static_assert(T_GATE + HPI <= THREADS, "the load phase's threads");
static_assert(CAP <= 32 && 32 % WARP_ROWS == 0, "a head's ring in one warp's lanes; a warp item's rows divide a warp");

__device__ __forceinline__ float softplus(float x) {
    // as decode._softplus: torch's threshold of 20
    return x > 20.f ? x : logf(1.f + expf(fminf(x, 20.f)));
}

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// Work: block items (flush row, HPI value heads of one key head), walked by a fixed wave of
// blocks that number the flush rows from the cursors in one order. A block forms its key head's terms
// once (k_t, q_t, ring keys, their dot products) and each head's decay weights; then each warp
// walks its own warp items (one head's WARP_ROWS checkpoint rows) with no barrier but its own.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
gdn_flush_rows(float* __restrict__ ckpt, const typename RA::T* __restrict__ ring_k,
               const float* __restrict__ ring_g, const float* __restrict__ ring_u, const int* __restrict__ committed,
               const int* __restrict__ flush_at,
               const typename QA::T* __restrict__ q, const typename QA::T* __restrict__ k,
               const typename VA::T* __restrict__ v, const typename GA::T* __restrict__ a,
               const typename GA::T* __restrict__ b, const typename LA::T* __restrict__ A_log,
               const typename BIA::T* __restrict__ dt_bias, const IdxT* __restrict__ idx,
               typename VA::T* __restrict__ out, float scale, int batch, long long pad_slot_id,
               long long s_ck_slot, long long s_ck_head, long long s_rk_slot, long long s_rk_head,
               long long s_rg_slot, long long s_rg_head, long long s_ru_slot, long long s_ru_head,
               long long s_q_row, long long s_q_head, long long s_k_row, long long s_k_head,
               long long s_v_row, long long s_v_head, long long s_a_row, long long s_b_row,
               long long s_o_row, long long s_o_head) {
    extern __shared__ float smem[];
    float* ks = smem;
    float* qs = smem + O_QS;
    float* dk = smem + O_DK;
    float* dq = smem + O_DQ;
    float* gs = smem + O_GS;
    float* wl = smem + O_WL;
    float* hs = smem + O_HS;
    int* rows = (int*)(smem + OPS);         // [batch]: the flush rows, in row order
    int* ring_len = rows + batch;           // [batch]: their c
    long long* slots = (long long*)(ring_len + batch);  // [batch]: their slots (8-byte aligned)
    __shared__ int warp_count[WARPS];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float* uw = smem + O_WARPS + warp * WARP_OPS;
    float* sd = uw + ENTRIES * WARP_ROWS;
#if __CUDA_ARCH__ >= 900
    // The fused kernel may start beside this launch at once (programmatic dependent launch): it
    // moves a row's cursors only after this launch has finished (its programs wait for it), so the
    // cursors read here are the step's.
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    const int flushing = number_flush_rows(
        [&](int r, int& c, long long& s) {
#if HAS_INDICES
            s = (long long)idx[r];
            if (s == pad_slot_id) return false;
#else
            s = r;
#endif
            c = committed[s];
            return c + 1 >= flush_at[s];
        },
        batch, rows, ring_len, slots, warp_count);

    const int col4 = lane % LANES, sub = lane / LANES;  // a thread's columns and row in an instruction
    const int items = flushing * ITEMS_PER_ROW;
    for (int it = blockIdx.x; it < items; it += gridDim.x) {
        const int n = it / ITEMS_PER_ROW;
        const long long row = rows[n], slot = slots[n];
        const int c = ring_len[n];
        const int h0 = (it % ITEMS_PER_ROW) * HPI, kh = h0 / G;
        // Load phase: the token's k_t (warp 0) and q_t (warp 1) normalised, the key head's ring
        // keys (all threads, 16-byte chunks; entries from c on are zeros, not loads: they may hold
        // anything), the heads' ring log-decays and gate inputs.
        if (warp < 2) {
            const typename QA::T* src = warp == 0 ? k + row * s_k_row + kh * s_k_head : q + row * s_q_row + kh * s_q_head;
            float vals[QK_PER_LANE];
            float ss = 0.f;
#pragma unroll
            for (int i = 0; i < QK_PER_LANE; ++i) {
                const int e = lane + 32 * i;
                vals[i] = e < K ? QA::load(src + e) : 0.f;
                ss = fmaf(vals[i], vals[i], ss);
            }
            const float nrm = sqrtf(warp_sum(ss) + 1e-6f);
#pragma unroll
            for (int i = 0; i < QK_PER_LANE; ++i) {
                const int e = lane + 32 * i;
                if (e < K) {
                    if (warp == 0) ks[CAP * K + e] = RA::round(vals[i] / nrm);
                    else qs[e] = vals[i] / nrm * scale;
                }
            }
        }
        {
            const typename RA::T* rk = ring_k + slot * s_rk_slot + kh * s_rk_head;
            uint4 raw[K_ROUNDS];
#pragma unroll
            for (int r = 0; r < K_ROUNDS; ++r) {
                const int qc = tid + r * THREADS, j = qc / RK_CH;
                raw[r] = qc < K_CHUNKS && j < c
                    ? *reinterpret_cast<const uint4*>(rk + j * RK_J + (qc % RK_CH) * Chunk<RING_KIND>::WIDTH)
                    : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int r = 0; r < K_ROUNDS; ++r) {
                const int qc = tid + r * THREADS, j = qc / RK_CH;
                if (qc < K_CHUNKS) {
                    float vals[8];
                    Chunk<RING_KIND>::widen(raw[r], vals);
                    put<Chunk<RING_KIND>::WIDTH>(ks + j * K + (qc % RK_CH) * Chunk<RING_KIND>::WIDTH, vals, j < c);
                }
            }
        }
        if (tid >= T_GS && tid < T_GATE) {
            const int hl = (tid - T_GS) / CAP, j = (tid - T_GS) % CAP;
            gs[hl * CAP + j] = j < c ? ring_g[slot * s_rg_slot + (h0 + hl) * s_rg_head + j] : 0.f;
        } else if (tid >= T_GATE && tid < T_GATE + HPI) {
            const int hl = tid - T_GATE, hv = h0 + hl;
            float ba = GA::load(a + row * s_a_row + hv);
#if HAS_BIAS
            ba += BIA::load(dt_bias + hv);
#endif
            const float bb = GA::load(b + row * s_b_row + hv);
            hs[hl * 4] = -expf(LA::load(A_log + hv)) * softplus(ba);
            hs[hl * 4 + 1] = 1.f / (1.f + expf(-bb));
        }
        __syncthreads();
        // The key head's dot products (a warp per ring entry) and each head's decay weights.
        for (int j = warp; j < ENTRIES; j += WARPS) {
            if (j < c || j == CAP) {  // uniform over the warp
                float sk = 0.f, sq = 0.f;
#pragma unroll
                for (int i = 0; i < QK_PER_LANE; ++i) {
                    const int e = lane + 32 * i;
                    if (e < K) {
                        sk = fmaf(ks[j * K + e], ks[CAP * K + e], sk);
                        sq = fmaf(ks[j * K + e], qs[e], sq);
                    }
                }
                sk = warp_sum(sk);
                sq = warp_sum(sq);
                if (lane == 0) {
                    dk[j] = sk;
                    dq[j] = sq;
                }
            } else if (lane == 0) {
                dk[j] = 0.f;  // read (times a zero weight) by the ring sums: no stale NaN
                dq[j] = 0.f;
            }
        }
        if (warp == WARPS - 1) {
            // Each head's decay weights: an inclusive scan of its ring log-decays across the lanes
            // (entries from c on are zeros in gs).
            for (int hl = 0; hl < HPI; ++hl) {
                const float gj = lane < CAP ? gs[hl * CAP + lane] : 0.f;
                float cum = gj;
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    const float up = __shfl_up_sync(0xffffffffu, cum, o);
                    if (lane >= o) cum += up;
                }
                const float D = hs[hl * 4] + __shfl_sync(0xffffffffu, cum, 31);
                if (lane < CAP) wl[hl * CAP + lane] = lane < c ? expf(D - cum) : 0.f;
                if (lane == 0) hs[hl * 4 + 2] = expf(D);
            }
        }
        __syncthreads();

        // A warp item's operands: its checkpoint rows, cached u (U_ji for j < c, zeros past c) and v.
        float4 acc[PASSES];
        float uv[PAIR_ROUNDS], vv = 0.f;
        // The item's bases once per block item (64-bit products kept out of the warp items' loop).
        float* const ck_item = ckpt + slot * s_ck_slot + h0 * s_ck_head;
        const float* const ru_item = ring_u + slot * s_ru_slot + h0 * s_ru_head;
        const typename VA::T* const v_item = v + row * s_v_row + h0 * s_v_head;
        auto load_item = [&](int wi, float4* t, float* u, float& vr) {
            const int hl = wi / (V / WARP_ROWS), pt = (wi % (V / WARP_ROWS)) * WARP_ROWS;
            const float* tile = ck_item + hl * s_ck_head + pt * CK_P;
#pragma unroll
            for (int i = 0; i < PASSES; ++i)
                t[i] = *reinterpret_cast<const float4*>(tile + (i * ROWS_PER_INSTR + sub) * CK_P + 4 * col4);
            const float* ru = ru_item + hl * s_ru_head + pt;
#pragma unroll
            for (int r = 0; r < PAIR_ROUNDS; ++r) {
                const int qc = lane + r * 32, j = qc / WARP_ROWS;
                u[r] = qc < PAIRS && j < c ? ru[j * RU_J + qc % WARP_ROWS] : 0.f;
            }
            vr = lane < WARP_ROWS ? RVA::round(VA::load(v_item + hl * s_v_head + pt + lane)) : 0.f;
        };
#if PREFETCH
        float4 nacc[PASSES];
        float nuv[PAIR_ROUNDS], nvv = 0.f;
        if (warp < WARP_ITEMS) load_item(warp, nacc, nuv, nvv);
#endif
        for (int wi = warp; wi < WARP_ITEMS; wi += WARPS) {
            const int hl = wi / (V / WARP_ROWS), h = h0 + hl, pt = (wi % (V / WARP_ROWS)) * WARP_ROWS;
#if PREFETCH
            // This item's operands were loaded during the last one; the next item's go in flight now.
#pragma unroll
            for (int i = 0; i < PASSES; ++i) acc[i] = nacc[i];
#pragma unroll
            for (int r = 0; r < PAIR_ROUNDS; ++r) uv[r] = nuv[r];
            vv = nvv;
            if (wi + WARPS < WARP_ITEMS) load_item(wi + WARPS, nacc, nuv, nvv);
#else
            load_item(wi, acc, uv, vv);
#endif
            // The ring terms of each row, sum_j a^k_j U_ji and sum_j a^q_j U_ji: a lane's pairs (all
            // of one row: WARP_ROWS divides 32), then across the lanes of that row. The fold's
            // weights U_ji w_j go to shared memory.
            float tk = 0.f, tq = 0.f;
#pragma unroll
            for (int r = 0; r < PAIR_ROUNDS; ++r) {
                const int qc = lane + r * 32, j = qc / WARP_ROWS;
                if (qc < PAIRS) {
                    const float wu = uv[r] * wl[hl * CAP + j];
                    tk = fmaf(dk[j], wu, tk);
                    tq = fmaf(dq[j], wu, tq);
                    uw[qc] = wu;
                }
            }
#pragma unroll
            for (int o = WARP_ROWS; o < 32; o <<= 1) {
                tk += __shfl_xor_sync(0xffffffffu, tk, o);
                tq += __shfl_xor_sync(0xffffffffu, tq, o);
            }
            // S_i . k_t and S_i . q_t of the warp's rows, reduced across a row's lanes (k_t, q_t read
            // from shared memory per item rather than held: registers).
            const float4 kt = *reinterpret_cast<const float4*>(ks + CAP * K + 4 * col4);
            const float4 qt = *reinterpret_cast<const float4*>(qs + 4 * col4);
#pragma unroll
            for (int i = 0; i < PASSES; ++i) {
                float sk = acc[i].x * kt.x + acc[i].y * kt.y + acc[i].z * kt.z + acc[i].w * kt.w;
                float sq = acc[i].x * qt.x + acc[i].y * qt.y + acc[i].z * qt.z + acc[i].w * qt.w;
#pragma unroll
                for (int o = LANES / 2; o > 0; o >>= 1) {
                    sk += __shfl_xor_sync(0xffffffffu, sk, o);
                    sq += __shfl_xor_sync(0xffffffffu, sq, o);
                }
                if (col4 == 0) {
                    sd[i * ROWS_PER_INSTR + sub] = sk;
                    sd[WARP_ROWS + i * ROWS_PER_INSTR + sub] = sq;
                }
            }
            __syncwarp();
            const float e_t = hs[hl * 4 + 2];
            if (lane < WARP_ROWS) {
                const float u = hs[hl * 4 + 1] * (vv - sd[lane] * e_t - tk);
                uw[CAP * WARP_ROWS + lane] = u;
                out[row * s_o_row + h * s_o_head + pt + lane] = VA::from(sd[WARP_ROWS + lane] * e_t + tq + u * dq[CAP]);
            }
            __syncwarp();
#pragma unroll
            for (int i = 0; i < PASSES; ++i) {
                acc[i].x *= e_t; acc[i].y *= e_t; acc[i].z *= e_t; acc[i].w *= e_t;
            }
#pragma unroll
            for (int j = 0; j < ENTRIES; ++j) {
                if (j < c || j == CAP) {  // uniform over the block
                    const float4 kv = *reinterpret_cast<const float4*>(ks + j * K + 4 * col4);
#pragma unroll
                    for (int i = 0; i < PASSES; ++i) {
                        const float w = uw[j * WARP_ROWS + i * ROWS_PER_INSTR + sub];
                        acc[i].x = fmaf(w, kv.x, acc[i].x);
                        acc[i].y = fmaf(w, kv.y, acc[i].y);
                        acc[i].z = fmaf(w, kv.z, acc[i].z);
                        acc[i].w = fmaf(w, kv.w, acc[i].w);
                    }
                }
            }
            float* tile = ck_item + hl * s_ck_head + pt * CK_P;
#pragma unroll
            for (int i = 0; i < PASSES; ++i)
                *reinterpret_cast<float4*>(tile + (i * ROWS_PER_INSTR + sub) * CK_P + 4 * col4) = acc[i];
            __syncwarp();  // the warp's weights are rewritten by its next item
        }
        __syncthreads();  // the key head's terms are rewritten by the next block item
    }
}
