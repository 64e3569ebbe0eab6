// Mamba-2 ReplaySSM flush rows in CUDA C++ (compiled at run time by NVRTC: ops/_nvrtc.py;
// launched by decode_flush_cuda.py, which documents the arguments and the defines).
//
// The Triton flush launch with a CUDA C++ twin: the same rows, inputs and outputs, an exact fp32
// FMA fold instead of the bf16x3 tensor-core product, and warps that each walk their own items
// (no block-wide barrier between a block's loads of the group's operands). On an H200 it runs
// within 1% of the Triton launch at Nemotron-H dims and 2% faster at Nemotron-3-Nano dims
// (benchmarks/NOTES_mamba2.md, twenty-fifth run): both stop at ~89% of copy bandwidth. It is
// also the form of the flush that engines without Triton can take as it is.

// Operand dtypes, chunk widening, put() and number_flush_rows(): ops/_flush_rows.cuh.
typedef Act<X_KIND> XA;     // x, z, y
typedef Act<BC_KIND> BA;    // B, C
typedef Act<RING_KIND> RA;  // ring_x, ring_B
typedef Act<D_KIND> DA;     // D
#define LANES (N / 4)                       // float4 columns of a checkpoint row
#define ROWS_PER_INSTR (32 / LANES)         // rows one warp instruction covers
#define WARP_ROWS (ROWS_PER_INSTR * PASSES) // rows of a warp item
#define ENTRIES (CAP + 1)                   // the ring's entries, then the token's
#define WARP_ITEMS (HEADS_PER_ITEM * (P / WARP_ROWS))  // warp items of a block item
#define ITEMS_PER_ROW (HEADS / HEADS_PER_ITEM)          // block items of a flush row
#define PAIRS (ENTRIES * WARP_ROWS)         // weighted x of a warp item
#define PAIR_ROUNDS ((PAIRS + 31) / 32)

// The group's operands of a block item as 16-byte chunks: ring B rows (CAP x RB_CH), the token's
// B (BC_CH), C (BC_CH).
#define RB_CH (N / Chunk<RING_KIND>::WIDTH)
#define BC_CH (N / Chunk<BC_KIND>::WIDTH)
#define G_B (CAP * RB_CH)
#define G_C (G_B + BC_CH)
#define G_CHUNKS (G_C + BC_CH)
#define G_ROUNDS ((G_CHUNKS + THREADS - 1) / THREADS)
// fp32 words of shared memory: the group's bs [ENTRIES][N] and cs [N], then per warp
// xw [ENTRIES][WARP_ROWS], xs [WARP_ROWS], zs [WARP_ROWS].
#define WARP_OPS (ENTRIES * WARP_ROWS + 2 * WARP_ROWS)
#define OPS (ENTRIES * N + N + WARPS * WARP_OPS)

static_assert(N % 8 == 0 && LANES <= 32 && 32 % LANES == 0, "a checkpoint row spans a power-of-two part of a warp");
static_assert(THREADS % 32 == 0 && P % WARP_ROWS == 0 && HEADS % HEADS_PER_ITEM == 0 && HPG % HEADS_PER_ITEM == 0,
              "item shapes");

// Work: block items (flush row, HEADS_PER_ITEM heads of one group), walked by a fixed wave of
// blocks that number the flush rows from the ring launch's flags (info[2 * row + 1]) in one
// order. A block loads its item's group operands (ring B, B_t, C_t) into shared memory once;
// then each warp walks its own warp items (one head's WARP_ROWS checkpoint rows) with no barrier
// but its own: a warp loads its tile and weights, folds, stores and reduces while the block's
// other warps are anywhere in theirs, as the standard step's many small programs are.
// Per warp item: S <- Gamma S + dt_t x_t B_t^T + sum_{j<c} w_j x_j B_j^T in fp32 (the coef line
// of the ring launch: w_j for j < CAP, Gamma at CAP, dt_t at CAP + 1), stored; y = S C,
// (y + D x) silu(z).
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
mamba2_flush_rows(MAMBA2_FLUSH_PARAMS) {
    // The rows' strides are compile-time (CK_P, RX_J, RB_J: the cache's layout), so a thread's
    // PASSES tile addresses are one base plus constants rather than live 64-bit registers.
    extern __shared__ float smem[];
    float* bs = smem;                       // [ENTRIES][N]: B_j (zero from c on); entry CAP: B_t
    float* cs = bs + ENTRIES * N;           // [N]: C_t
    int* rows = (int*)(smem + OPS);         // [batch]: the flush rows, in row order
    int* ring_len = rows + batch;           // [batch]: their c
    long long* slots = (long long*)(ring_len + batch);  // [batch]: their slots (8-byte aligned)
    __shared__ int warp_count[WARPS];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float* xw = cs + N + warp * WARP_OPS;   // [ENTRIES][WARP_ROWS]: w_j x_j; entry CAP: dt_t x_t
    float* xs = xw + ENTRIES * WARP_ROWS;   // [WARP_ROWS]: x_t
    float* zs = xs + WARP_ROWS;             // [WARP_ROWS]: z_t
    // Number the flush rows, with their c and slot, so that an item's loads wait for nothing.
    const int flushing = mamba2_number_flush_rows(info, idx, batch, rows, ring_len, slots, warp_count);

    const int col4 = lane % LANES, sub = lane / LANES;  // a thread's columns and row in an instruction
    const int items = flushing * ITEMS_PER_ROW;
    for (int it = blockIdx.x; it < items; it += gridDim.x) {
        const int k = it / ITEMS_PER_ROW;
        const long long row = rows[k], slot = slots[k];
        const int c = ring_len[k];
        const int h0 = (it % ITEMS_PER_ROW) * HEADS_PER_ITEM, g = h0 / HPG;
        // The group's operands, shared by the item's heads: one round trip of 16-byte chunks (the
        // ring's entries all loaded, those from c on zeroed: they may hold anything, NaN too).
        {
            const typename RA::T* rB = ring_B + slot * s_rB_slot + g * s_rB_group;
            const typename BA::T* brow = Bm + row * s_B_row + g * s_B_group;
            const typename BA::T* crow = Cm + row * s_C_row + g * s_C_group;
            uint4 raw[G_ROUNDS];
#pragma unroll
            for (int r = 0; r < G_ROUNDS; ++r) {
                const int q = tid + r * THREADS;
                const void* src = nullptr;
                if (q < G_B) src = rB + (q / RB_CH) * RB_J + (q % RB_CH) * Chunk<RING_KIND>::WIDTH;
                else if (q < G_C) src = brow + (q - G_B) * Chunk<BC_KIND>::WIDTH;
                else if (q < G_CHUNKS) src = crow + (q - G_C) * Chunk<BC_KIND>::WIDTH;
                raw[r] = src ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int r = 0; r < G_ROUNDS; ++r) {
                const int q = tid + r * THREADS;
                float v[8];
                if (q < G_B) {
                    Chunk<RING_KIND>::widen(raw[r], v);
                    put<Chunk<RING_KIND>::WIDTH>(bs + (q / RB_CH) * N + (q % RB_CH) * Chunk<RING_KIND>::WIDTH, v,
                                                 q / RB_CH < c);
                } else if (q < G_C) {
                    Chunk<BC_KIND>::widen(raw[r], v);
                    put<Chunk<BC_KIND>::WIDTH>(bs + CAP * N + (q - G_B) * Chunk<BC_KIND>::WIDTH, v);
                } else if (q < G_CHUNKS) {
                    Chunk<BC_KIND>::widen(raw[r], v);
                    put<Chunk<BC_KIND>::WIDTH>(cs + (q - G_C) * Chunk<BC_KIND>::WIDTH, v);
                }
            }
        }
        __syncthreads();
        const float4 cv = *reinterpret_cast<const float4*>(cs + 4 * col4);

        for (int wi = warp; wi < WARP_ITEMS; wi += WARPS) {
            const int h = h0 + wi / (P / WARP_ROWS), pt = (wi % (P / WARP_ROWS)) * WARP_ROWS;
            float* tile = ckpt + slot * s_ck_slot + h * s_ck_head + pt * CK_P;
            float4 acc[PASSES];
#pragma unroll
            for (int i = 0; i < PASSES; ++i)
                acc[i] = *reinterpret_cast<const float4*>(tile + (i * ROWS_PER_INSTR + sub) * CK_P + 4 * col4);
            // The weighted x of the warp's rows: w_j x_j (j < c), dt_t x_t, and x_t, z_t.
            const float* line = coef + (row * HEADS + h) * (CAP + 2);
            const typename RA::T* rx = ring_x + slot * s_rx_slot + h * s_rx_head + pt;
            const typename XA::T* xrow = x + row * s_x_row + h * s_x_head + pt;
            const float gamma = line[CAP];
            float wv[PAIR_ROUNDS], xv[PAIR_ROUNDS];
#pragma unroll
            for (int r = 0; r < PAIR_ROUNDS; ++r) {
                const int q = lane + r * 32, j = q / WARP_ROWS, p = q % WARP_ROWS;
                wv[r] = 0.f;
                xv[r] = 0.f;
                if (q < PAIRS) {
                    if (j < CAP) {
                        wv[r] = line[j];
                        xv[r] = RA::load(rx + j * RX_J + p);
                    } else {
                        wv[r] = line[CAP + 1];
                        xv[r] = XA::load(xrow + p);
                    }
                }
            }
            float zv = 0.f;
#if HAS_Z
            if (lane < WARP_ROWS) zv = XA::load(z + row * s_z_row + h * s_z_head + pt + lane);
#endif
#pragma unroll
            for (int r = 0; r < PAIR_ROUNDS; ++r) {
                const int q = lane + r * 32, j = q / WARP_ROWS;
                if (q < PAIRS) {
                    xw[q] = (j < c || j == CAP) ? wv[r] * xv[r] : 0.f;
                    if (j == CAP) xs[q - CAP * WARP_ROWS] = xv[r];
                }
            }
            if (lane < WARP_ROWS) zs[lane] = zv;
            __syncwarp();

#pragma unroll
            for (int i = 0; i < PASSES; ++i) {
                acc[i].x *= gamma; acc[i].y *= gamma; acc[i].z *= gamma; acc[i].w *= gamma;
            }
#pragma unroll
            for (int j = 0; j < ENTRIES; ++j) {
                if (j < c || j == CAP) {  // uniform over the block
                    const float4 b = *reinterpret_cast<const float4*>(bs + j * N + 4 * col4);
                    float a[PASSES];
                    if constexpr (ROWS_PER_INSTR == 1 && PASSES % 4 == 0) {
                        // A thread's rows are consecutive: their weights in PASSES / 4 broadcasts.
#pragma unroll
                        for (int i = 0; i < PASSES; i += 4) {
                            const float4 a4 = *reinterpret_cast<const float4*>(xw + j * WARP_ROWS + i);
                            a[i] = a4.x; a[i + 1] = a4.y; a[i + 2] = a4.z; a[i + 3] = a4.w;
                        }
                    } else {
#pragma unroll
                        for (int i = 0; i < PASSES; ++i) a[i] = xw[j * WARP_ROWS + i * ROWS_PER_INSTR + sub];
                    }
#pragma unroll
                    for (int i = 0; i < PASSES; ++i) {
                        acc[i].x = fmaf(a[i], b.x, acc[i].x);
                        acc[i].y = fmaf(a[i], b.y, acc[i].y);
                        acc[i].z = fmaf(a[i], b.z, acc[i].z);
                        acc[i].w = fmaf(a[i], b.w, acc[i].w);
                    }
                }
            }
            const float d_h = HAS_D ? DA::load(Dv + h) : 0.f;
#pragma unroll
            for (int i = 0; i < PASSES; ++i) {
                const int p = i * ROWS_PER_INSTR + sub;
                *reinterpret_cast<float4*>(tile + p * CK_P + 4 * col4) = acc[i];
                float s = acc[i].x * cv.x + acc[i].y * cv.y + acc[i].z * cv.z + acc[i].w * cv.w;
#pragma unroll
                for (int o = LANES / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (col4 == 0) y[row * s_y_row + h * s_y_head + pt + p] = XA::from(mamba2_gated(s, d_h, xs[p], zs[p]));
            }
            __syncwarp();  // the warp's weights are rewritten by its next item
        }
        __syncthreads();  // the group's operands are rewritten by the next block item
    }
}
