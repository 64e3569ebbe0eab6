// Mamba-2 ReplaySSM flush rows in CUDA C++ (compiled at run time by NVRTC: ops/_nvrtc.py;
// launched by decode_flush_cuda.py, which documents the arguments and the defines).
//
// Why not Triton: the flush moves the checkpoint once each way and folds the window into it
// (16 FMAs per element). Triton's forms of it keep 16 warps per SM in flight at most (the tl.dot
// fold's registers and shared memory) and measured 89% of copy bandwidth; its FMA folds issue
// several instructions per FMA. Here a thread keeps PASSES float4s of a tile in registers and
// folds them with one shared-memory load of the entry's B and one broadcast of each row's
// weighted x: about 1.2 instructions per FMA, 56-64 registers, 32 warps per SM.
//
// Work: items (flush row, head, TILE_P-row tile), walked by a fixed wave of blocks that number
// the flush rows from the ring launch's flags (info[2 * row + 1]) in the same order.
// Per item: S <- Gamma S + dt_t x_t B_t^T + sum_{j<c} w_j x_j B_j^T in fp32 (coef line of the
// ring launch: w_j for j < CAP, Gamma at CAP, dt_t at CAP + 1), stored; y = S C, (y + D x) silu(z).

typedef unsigned short u16;

// Operand dtypes: 0 fp32, 1 bf16, 2 fp16 (16-bit types as raw bits: no headers needed).
template <int KIND> struct Act;
template <> struct Act<0> {
    typedef float T;
    static __device__ __forceinline__ float load(const T* p) { return *p; }
    static __device__ __forceinline__ T from(float v) { return v; }
};
template <> struct Act<1> {
    typedef u16 T;
    static __device__ __forceinline__ float load(const T* p) { return __uint_as_float(((unsigned)*p) << 16); }
    static __device__ __forceinline__ T from(float v) {
        u16 r;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
        return r;
    }
};
template <> struct Act<2> {
    typedef u16 T;
    static __device__ __forceinline__ float load(const T* p) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(*p));
        return f;
    }
    static __device__ __forceinline__ T from(float v) {
        u16 r;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
        return r;
    }
};

typedef Act<X_KIND> XA;     // x, z, y
typedef Act<BC_KIND> BA;    // B, C
typedef Act<RING_KIND> RA;  // ring_x, ring_B
typedef Act<D_KIND> DA;     // D
#if IDX_64
typedef long long IdxT;
#else
typedef int IdxT;
#endif

// A 16-byte chunk of an operand row, widened to fp32.
template <int KIND> struct Chunk;
template <> struct Chunk<0> {
    static constexpr int WIDTH = 4;
    static __device__ __forceinline__ void widen(uint4 v, float* out) {
        out[0] = __uint_as_float(v.x); out[1] = __uint_as_float(v.y);
        out[2] = __uint_as_float(v.z); out[3] = __uint_as_float(v.w);
    }
};
template <> struct Chunk<1> {
    static constexpr int WIDTH = 8;
    static __device__ __forceinline__ void widen(uint4 v, float* out) {
        const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[2 * i] = __uint_as_float(w[i] << 16);
            out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
};
template <> struct Chunk<2> {
    static constexpr int WIDTH = 8;
    static __device__ __forceinline__ void widen(uint4 v, float* out) {
        const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            asm("cvt.f32.f16 %0, %1;" : "=f"(out[2 * i]) : "h"((u16)(w[i] & 0xffffu)));
            asm("cvt.f32.f16 %0, %1;" : "=f"(out[2 * i + 1]) : "h"((u16)(w[i] >> 16)));
        }
    }
};

#define LANES (N / 4)                      // float4 columns of a checkpoint row
#define ROWS_PER_PASS (THREADS / LANES)    // rows one pass of the block covers
#define PASSES (TILE_P / ROWS_PER_PASS)    // float4s a thread holds: rows row0 * PASSES + k, k < PASSES
#define TILES (P / TILE_P)
#define ITEMS_PER_ROW (HEADS * TILES)
#define ENTRIES (CAP + 1)                  // the ring's entries, then the token's

// The operands of an item as 16-byte chunks, numbered in this order: ring x rows (CAP x RX_CH),
// the token's x (X_CH), ring B rows (CAP x RB_CH), the token's B (BC_CH), C (BC_CH), z (X_CH).
#define RX_CH (TILE_P / Chunk<RING_KIND>::WIDTH)
#define X_CH (TILE_P / Chunk<X_KIND>::WIDTH)
#define RB_CH (N / Chunk<RING_KIND>::WIDTH)
#define BC_CH (N / Chunk<BC_KIND>::WIDTH)
#define C_RX 0
#define C_X (C_RX + CAP * RX_CH)
#define C_RB (C_X + X_CH)
#define C_B (C_RB + CAP * RB_CH)
#define C_C (C_B + BC_CH)
#define C_Z (C_C + BC_CH)
#define CHUNKS (C_Z + (HAS_Z ? X_CH : 0))
#define CHUNK_ROUNDS ((CHUNKS + THREADS - 1) / THREADS)

static_assert(N % 4 == 0 && LANES <= 32 && 32 % LANES == 0, "a checkpoint row spans a power-of-two part of a warp");
static_assert(THREADS % 32 == 0 && P % TILE_P == 0 && TILE_P % ROWS_PER_PASS == 0, "tile shape");
static_assert(TILE_P % 8 == 0 && N % 8 == 0, "16-byte operand chunks");

// fp32 words of one item's operands in shared memory (two buffers: the next item's are written
// while this item's are read).
#define OPS (ENTRIES * (TILE_P + N) + N + 2 * TILE_P)

struct Params {
    float* ckpt; const typename RA::T* ring_x; const typename RA::T* ring_B; const float* coef;
    const typename XA::T* x; const typename BA::T* Bm; const typename BA::T* Cm; const typename XA::T* z;
    long long s_ck_slot, s_ck_head, s_rx_slot, s_rx_head, s_rB_slot, s_rB_group, s_x_row, s_x_head;
    long long s_B_row, s_B_group, s_C_row, s_C_group, s_z_row, s_z_head;
};

// Where an item is: its flush row (k-th of the batch's), head and first checkpoint row.
struct Item {
    long long row, slot;
    int c, h, pt;
};

__device__ __forceinline__ Item item_at(int it, const int* rows, const int* ring_len, const long long* slots) {
    Item m;
    const int k = it / ITEMS_PER_ROW, rem = it % ITEMS_PER_ROW;
    m.row = rows[k];
    m.slot = slots[k];
    m.c = ring_len[k];
    m.h = rem / TILES;
    m.pt = (rem % TILES) * TILE_P;
    return m;
}

__device__ __forceinline__ float* tile_of(const Params& a, const Item& m) {
    return a.ckpt + m.slot * a.s_ck_slot + m.h * a.s_ck_head + m.pt * CK_P;
}

// The item's operand chunks into registers: every load issued before any is used (one round
// trip). The ring's entries are all loaded (no wait for c); widen() zeroes those from c on.
__device__ __forceinline__ void load_chunks(const Params& a, const Item& m, int tid, uint4* raw, float* weight,
                                            float& gamma) {
    const float* line = a.coef + (m.row * HEADS + m.h) * (CAP + 2);
    const int g = m.h / HPG;
    const typename RA::T* rx = a.ring_x + m.slot * a.s_rx_slot + m.h * a.s_rx_head + m.pt;
    const typename RA::T* rB = a.ring_B + m.slot * a.s_rB_slot + g * a.s_rB_group;
    const typename XA::T* xrow = a.x + m.row * a.s_x_row + m.h * a.s_x_head + m.pt;
    const typename BA::T* brow = a.Bm + m.row * a.s_B_row + g * a.s_B_group;
    const typename BA::T* crow = a.Cm + m.row * a.s_C_row + g * a.s_C_group;
    const typename XA::T* zrow = a.z + m.row * a.s_z_row + m.h * a.s_z_head + m.pt;
    gamma = line[CAP];
#pragma unroll
    for (int r = 0; r < CHUNK_ROUNDS; ++r) {
        const int q = tid + r * THREADS;
        const void* src = nullptr;
        weight[r] = 1.f;
        if (q < C_X) {
            src = rx + (q / RX_CH) * RX_J + (q % RX_CH) * Chunk<RING_KIND>::WIDTH;
            weight[r] = line[q / RX_CH];
        } else if (q < C_RB) {
            src = xrow + (q - C_X) * Chunk<X_KIND>::WIDTH;
            weight[r] = line[CAP + 1];
        } else if (q < C_B) {
            src = rB + ((q - C_RB) / RB_CH) * RB_J + ((q - C_RB) % RB_CH) * Chunk<RING_KIND>::WIDTH;
        } else if (q < C_C) {
            src = brow + (q - C_B) * Chunk<BC_KIND>::WIDTH;
        } else if (q < C_Z) {
            src = crow + (q - C_C) * Chunk<BC_KIND>::WIDTH;
        } else if (q < CHUNKS) {
            src = zrow + (q - C_Z) * Chunk<X_KIND>::WIDTH;
        }
        raw[r] = src ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
    }
}

template <int W>
__device__ __forceinline__ void put(float* dst, const float* v, float scale) {
#pragma unroll
    for (int i = 0; i < W; i += 4)
        *reinterpret_cast<float4*>(dst + i) = make_float4(scale * v[i], scale * v[i + 1], scale * v[i + 2], scale * v[i + 3]);
}

// The chunks widened to fp32 into an operand buffer: xw [ENTRIES][TILE_P] (w_j x_j; entry CAP
// dt_t x_t), bs [ENTRIES][N] (B_j; entry CAP B_t), cs [N], xs [TILE_P] (x_t), zs [TILE_P].
__device__ __forceinline__ void widen(float* ops, int tid, int c, const uint4* raw, const float* weight) {
    float* xw = ops;
    float* bs = xw + ENTRIES * TILE_P;
    float* cs = bs + ENTRIES * N;
    float* xs = cs + N;
    float* zs = xs + TILE_P;
#pragma unroll
    for (int r = 0; r < CHUNK_ROUNDS; ++r) {
        const int q = tid + r * THREADS;
        float v[8];
        if (q < C_X) {
            const int j = q / RX_CH;
            Chunk<RING_KIND>::widen(raw[r], v);
            put<Chunk<RING_KIND>::WIDTH>(xw + j * TILE_P + (q % RX_CH) * Chunk<RING_KIND>::WIDTH, v, j < c ? weight[r] : 0.f);
        } else if (q < C_RB) {
            const int at = (q - C_X) * Chunk<X_KIND>::WIDTH;
            Chunk<X_KIND>::widen(raw[r], v);
            put<Chunk<X_KIND>::WIDTH>(xw + CAP * TILE_P + at, v, weight[r]);
            put<Chunk<X_KIND>::WIDTH>(xs + at, v, 1.f);
        } else if (q < C_B) {
            const int j = (q - C_RB) / RB_CH;
            Chunk<RING_KIND>::widen(raw[r], v);
            put<Chunk<RING_KIND>::WIDTH>(bs + j * N + ((q - C_RB) % RB_CH) * Chunk<RING_KIND>::WIDTH, v, j < c ? 1.f : 0.f);
        } else if (q < C_C) {
            Chunk<BC_KIND>::widen(raw[r], v);
            put<Chunk<BC_KIND>::WIDTH>(bs + CAP * N + (q - C_B) * Chunk<BC_KIND>::WIDTH, v, 1.f);
        } else if (q < C_Z) {
            Chunk<BC_KIND>::widen(raw[r], v);
            put<Chunk<BC_KIND>::WIDTH>(cs + (q - C_C) * Chunk<BC_KIND>::WIDTH, v, 1.f);
        } else if (q < CHUNKS) {
            Chunk<X_KIND>::widen(raw[r], v);
            put<Chunk<X_KIND>::WIDTH>(zs + (q - C_Z) * Chunk<X_KIND>::WIDTH, v, 1.f);
        }
    }
}

__device__ __forceinline__ void load_tile(const float* tile, int row0, int col4, float4* t) {
#pragma unroll
    for (int k = 0; k < PASSES; ++k)
        t[k] = *reinterpret_cast<const float4*>(tile + (row0 * PASSES + k) * CK_P + 4 * col4);
}

// Zero-weight entries from c on are skipped unless c reaches them (a NaN-safe 0 x B is never formed:
// their weights and B are exact zeros).
__device__ __forceinline__ void fold(float4* acc, const float* ops, int c, float gamma, int row0, int col4) {
    const float* xw = ops;
    const float* bs = xw + ENTRIES * TILE_P;
#pragma unroll
    for (int k = 0; k < PASSES; ++k) {
        acc[k].x *= gamma; acc[k].y *= gamma; acc[k].z *= gamma; acc[k].w *= gamma;
    }
#pragma unroll
    for (int j = 0; j < ENTRIES; ++j) {
        if (j < c || j == CAP) {  // uniform over the block
            const float4 b = *reinterpret_cast<const float4*>(bs + j * N + 4 * col4);
            // The thread's rows are consecutive: their weighted x in PASSES / 4 vector loads.
            float w[PASSES];
            const float* xj = xw + j * TILE_P + row0 * PASSES;
            if constexpr (PASSES % 4 == 0) {
#pragma unroll
                for (int k = 0; k < PASSES; k += 4) {
                    const float4 w4 = *reinterpret_cast<const float4*>(xj + k);
                    w[k] = w4.x; w[k + 1] = w4.y; w[k + 2] = w4.z; w[k + 3] = w4.w;
                }
            } else {
#pragma unroll
                for (int k = 0; k < PASSES; ++k) w[k] = xj[k];
            }
#pragma unroll
            for (int k = 0; k < PASSES; ++k) {
                acc[k].x = fmaf(w[k], b.x, acc[k].x);
                acc[k].y = fmaf(w[k], b.y, acc[k].y);
                acc[k].z = fmaf(w[k], b.z, acc[k].z);
                acc[k].w = fmaf(w[k], b.w, acc[k].w);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
mamba2_flush_rows(float* __restrict__ ckpt, const typename RA::T* __restrict__ ring_x,
                  const typename RA::T* __restrict__ ring_B, const float* __restrict__ coef,
                  const int* __restrict__ info, const typename XA::T* __restrict__ x,
                  const typename BA::T* __restrict__ Bm, const typename BA::T* __restrict__ Cm,
                  const typename DA::T* __restrict__ Dv, const typename XA::T* __restrict__ z,
                  const IdxT* __restrict__ idx, typename XA::T* __restrict__ y,
                  int batch, long long s_ck_slot, long long s_ck_head,
                  long long s_rx_slot, long long s_rx_head,
                  long long s_rB_slot, long long s_rB_group,
                  long long s_x_row, long long s_x_head, long long s_B_row, long long s_B_group,
                  long long s_C_row, long long s_C_group, long long s_z_row, long long s_z_head,
                  long long s_y_row, long long s_y_head) {
    // The rows' strides are compile-time (CK_P, RX_J, RB_J: the cache's layout), so a thread's
    // PASSES tile addresses are one base plus constants rather than live 64-bit registers.
    extern __shared__ float smem[];
    int* rows = (int*)(smem + 2 * OPS);     // [batch]: the flush rows, in row order
    int* ring_len = rows + batch;           // [batch]: their c
    long long* slots = (long long*)(ring_len + batch);  // [batch]: their slots (8-byte aligned)
    __shared__ int warp_count[THREADS / 32];
    const Params a{ckpt, ring_x, ring_B, coef, x, Bm, Cm, z, s_ck_slot, s_ck_head, s_rx_slot, s_rx_head,
                   s_rB_slot, s_rB_group, s_x_row, s_x_head, s_B_row, s_B_group, s_C_row, s_C_group,
                   s_z_row, s_z_head};

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Number the flush rows, with their c and slot, so that an item's loads wait for nothing.
    int flushing = 0;
    for (int base = 0; base < batch; base += THREADS) {
        const int r = base + tid;
        const bool f = r < batch && info[2 * r + 1] != 0;
        const unsigned m = __ballot_sync(0xffffffffu, f);
        if (lane == 0) warp_count[warp] = __popc(m);
        __syncthreads();
        int before = flushing, total = 0;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) {
            before += w < warp ? warp_count[w] : 0;
            total += warp_count[w];
        }
        if (f) {
            const int at = before + __popc(m & ((1u << lane) - 1u));
            rows[at] = r;
            ring_len[at] = info[2 * r];
#if HAS_INDICES
            slots[at] = (long long)idx[r];  // a flush row is live
#else
            slots[at] = r;
#endif
        }
        flushing += total;
        __syncthreads();
    }

    const int col4 = tid % LANES, row0 = tid / LANES;
    const int items = flushing * ITEMS_PER_ROW;
    int it = blockIdx.x;
    if (it >= items) return;
    // A block's items one after the other, software-pipelined: while item i folds from registers
    // and one operand buffer, item i + 1's tile loads into registers and its operands into the
    // other buffer, so its DRAM latency overlaps this item's work.
    uint4 raw[CHUNK_ROUNDS];
    float weight[CHUNK_ROUNDS];
    float4 acc[PASSES], nxt[PASSES];
    Item cur = item_at(it, rows, ring_len, slots);
    float gamma, gamma_next = 0.f;
    load_tile(tile_of(a, cur), row0, col4, acc);
    load_chunks(a, cur, tid, raw, weight, gamma);
    widen(smem, tid, cur.c, raw, weight);
    __syncthreads();
    for (int b = 0; it < items; it += gridDim.x, b ^= 1) {
        const float* ops = smem + b * OPS;
        const bool more = it + gridDim.x < items;  // uniform
        Item next = cur;
        if (more) {
            next = item_at(it + gridDim.x, rows, ring_len, slots);
            load_tile(tile_of(a, next), row0, col4, nxt);
            load_chunks(a, next, tid, raw, weight, gamma_next);
#if PREFETCH
            // The item after that asked of the L2 (its tile and ring x, DRAM reads).
            if (it + 2 * gridDim.x < items) {
                const Item far = item_at(it + 2 * gridDim.x, rows, ring_len, slots);
                constexpr int LINES_PER_ROW = (N * 4 + 127) / 128;
                const float* ftile = tile_of(a, far);
                for (int l = tid; l < TILE_P * LINES_PER_ROW; l += THREADS)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(ftile + (l / LINES_PER_ROW) * CK_P + (l % LINES_PER_ROW) * 32));
                if (tid < CAP)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(ring_x + far.slot * s_rx_slot + far.h * s_rx_head + far.pt + tid * RX_J));
            }
#endif
        }
        fold(acc, ops, cur.c, gamma, row0, col4);

        float* tile = tile_of(a, cur);
        const float* cs = ops + ENTRIES * (TILE_P + N);
        const float* xs = cs + N;
        const float* zs = xs + TILE_P;
        const float4 cv = *reinterpret_cast<const float4*>(cs + 4 * col4);
#if HAS_D
        const float d_h = DA::load(Dv + cur.h);
#endif
#pragma unroll
        for (int k = 0; k < PASSES; ++k) {
            const int p = row0 * PASSES + k;
            *reinterpret_cast<float4*>(tile + p * CK_P + 4 * col4) = acc[k];
            float s = acc[k].x * cv.x + acc[k].y * cv.y + acc[k].z * cv.z + acc[k].w * cv.w;
#pragma unroll
            for (int o = LANES / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (col4 == 0) {
#if HAS_D
                s += d_h * xs[p];
#endif
#if HAS_Z
                const float zv = zs[p];
                s = s * zv / (1.f + __expf(-zv));
#endif
                y[cur.row * s_y_row + cur.h * s_y_head + cur.pt + p] = XA::from(s);
            }
        }
        if (more) widen(smem + (b ^ 1) * OPS, tid, next.c, raw, weight);
        // The next buffer complete, and this one read by every thread before it is written again.
        __syncthreads();
#pragma unroll
        for (int k = 0; k < PASSES; ++k) acc[k] = nxt[k];
        cur = next;
        gamma = gamma_next;
    }
}
