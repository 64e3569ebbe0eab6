// Device code shared by the CUDA C++ flush-row launches (ops/mamba2/flush_cuda.cu,
// ops/gdn/flush_cuda.cu): operand dtypes, 16-byte chunk widening, and the numbering of a step's
// flush rows. The Python launchers put this text in front of the kernel's (NVRTC compiles one
// source with no include path). Expects THREADS, HAS_INDICES and IDX_64 among the defines.

typedef unsigned short u16;

// Operand dtypes: 0 fp32, 1 bf16, 2 fp16 (16-bit types as raw bits: no headers needed).
template <int KIND> struct Act;
template <> struct Act<0> {
    typedef float T;
    static __device__ __forceinline__ float load(const T* p) { return *p; }
    static __device__ __forceinline__ T from(float v) { return v; }
    static __device__ __forceinline__ float round(float v) { return v; }
};
template <> struct Act<1> {
    typedef u16 T;
    static __device__ __forceinline__ float of_bits(u16 b) { return __uint_as_float(((unsigned)b) << 16); }
    static __device__ __forceinline__ float load(const T* p) { return of_bits(*p); }
    static __device__ __forceinline__ T from(float v) {
        u16 r;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
        return r;
    }
    static __device__ __forceinline__ float round(float v) { return of_bits(from(v)); }
};
template <> struct Act<2> {
    typedef u16 T;
    static __device__ __forceinline__ float of_bits(u16 b) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
        return f;
    }
    static __device__ __forceinline__ float load(const T* p) { return of_bits(*p); }
    static __device__ __forceinline__ T from(float v) {
        u16 r;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
        return r;
    }
    static __device__ __forceinline__ float round(float v) { return of_bits(from(v)); }
};

#if IDX_64
typedef long long IdxT;
#else
typedef int IdxT;
#endif

// A 16-byte chunk of an operand row, widened to fp32: eight 16-bit values (bf16, fp16) ...
template <int KIND> struct Chunk {
    static constexpr int WIDTH = 8;
    static __device__ __forceinline__ void widen(uint4 v, float* out) {
        const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[2 * i] = Act<KIND>::of_bits((u16)(w[i] & 0xffffu));
            out[2 * i + 1] = Act<KIND>::of_bits((u16)(w[i] >> 16));
        }
    }
};
// ... or four fp32 values.
template <> struct Chunk<0> {
    static constexpr int WIDTH = 4;
    static __device__ __forceinline__ void widen(uint4 v, float* out) {
        out[0] = __uint_as_float(v.x); out[1] = __uint_as_float(v.y);
        out[2] = __uint_as_float(v.z); out[3] = __uint_as_float(v.w);
    }
};

#define WARPS (THREADS / 32)

// W widened values into shared memory, or zeros where `keep` is false (a select, not a product:
// ring entries past c may hold anything, NaN included).
template <int W>
__device__ __forceinline__ void put(float* dst, const float* v, bool keep = true) {
#pragma unroll
    for (int i = 0; i < W; i += 4)
        *reinterpret_cast<float4*>(dst + i) = keep ? make_float4(v[i], v[i + 1], v[i + 2], v[i + 3])
                                                   : make_float4(0.f, 0.f, 0.f, 0.f);
}

// The step's flush rows in row order, with their c and slot, into the block's shared arrays;
// every block numbers them alike, so a wave of blocks can walk (flush row, part) items by index.
// row_info(r, c, slot) says whether row r flushes and sets its c and slot. Returns the number of
// flush rows.
template <class RowInfo>
__device__ __forceinline__ int number_flush_rows(RowInfo row_info, int batch, int* rows, int* ring_len,
                                                 long long* slots, int* warp_count) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int flushing = 0;
    for (int base = 0; base < batch; base += THREADS) {
        const int r = base + tid;
        int c = 0;
        long long slot = 0;
        const bool f = r < batch && row_info(r, c, slot);
        const unsigned m = __ballot_sync(0xffffffffu, f);
        if (lane == 0) warp_count[warp] = __popc(m);
        __syncthreads();
        int before = flushing, total = 0;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            before += w < warp ? warp_count[w] : 0;
            total += warp_count[w];
        }
        if (f) {
            const int at = before + __popc(m & ((1u << lane) - 1u));
            rows[at] = r;
            ring_len[at] = c;
            slots[at] = slot;
        }
        flushing += total;
        __syncthreads();
    }
    return flushing;
}

// The parameters of Mamba-2's flush-row kernels (ops/mamba2/flush_cuda.cu, flush_ws.cu; the
// launchers in decode_flush_cuda.py document them). Expects the operand types RA, XA, BA, DA.
#define MAMBA2_FLUSH_PARAMS                                                                          \
    float *__restrict__ ckpt, const typename RA::T *__restrict__ ring_x,                             \
        const typename RA::T *__restrict__ ring_B, const float *__restrict__ coef,                   \
        const int *__restrict__ info, const typename XA::T *__restrict__ x,                          \
        const typename BA::T *__restrict__ Bm, const typename BA::T *__restrict__ Cm,                \
        const typename DA::T *__restrict__ Dv, const typename XA::T *__restrict__ z,                 \
        const IdxT *__restrict__ idx, typename XA::T *__restrict__ y, int batch, long long s_ck_slot, \
        long long s_ck_head, long long s_rx_slot, long long s_rx_head, long long s_rB_slot,          \
        long long s_rB_group, long long s_x_row, long long s_x_head, long long s_B_row,              \
        long long s_B_group, long long s_C_row, long long s_C_group, long long s_z_row,              \
        long long s_z_head, long long s_y_row, long long s_y_head

// Mamba-2's flush rows, from the ring launch's info ([batch, 2]: c, then whether the row flushes)
// and the rows' slots (idx, or the row itself).
__device__ __forceinline__ int mamba2_number_flush_rows(const int* info, const IdxT* idx, int batch, int* rows,
                                                        int* ring_len, long long* slots, int* warp_count) {
    return number_flush_rows(
        [&](int r, int& c, long long& s) {
            c = info[2 * r];
#if HAS_INDICES
            s = (long long)idx[r];
#else
            s = r;
#endif
            return info[2 * r + 1] != 0;
        },
        batch, rows, ring_len, slots, warp_count);
}

// Mamba-2's output gate on a row's y = S C: (y + D x) silu(z), as HAS_D and HAS_Z say.
__device__ __forceinline__ float mamba2_gated(float y, float d_h, float x, float z) {
#if HAS_D
    y += d_h * x;
#endif
#if HAS_Z
    y = y * z / (1.f + __expf(-z));
#endif
    return y;
}
