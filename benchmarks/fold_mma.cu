// The window fold of bench_fold_ceiling.py with its product on the tensor cores (compiled at run
// time by NVRTC, launched by benchmarks/_fold_ws.py): per head tile
//     S <- a S + X^T Y,   out = S C
// (S [P, N] fp32, X [J, P] fp32, Y [J, N] bf16 and C [N] bf16 shared by HPG heads).
//
// fold_grid.cu folds in exact fp32 FMAs: 16 per state element, ~20% of an H200's issue slots at
// copy speed. Here each warp owns 16 rows of a head and keeps them in the accumulator layout of
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate): the tile is loaded from global memory straight
// into that layout and stored from it, so no shared memory or layout change touches the state.
// Y is bf16 and exact as an operand; X (fp32) is split into SPLIT bf16 parts (three carry its 24
// bits), one MMA per part: J x SPLIT multiply-adds per element at a 32nd of the FMA form's
// instructions. On an H200, timed warm (benchmarks/NOTES_mamba2.md, thirty-third run), it folds
// at 96.0% of copy at Nemotron-H dims against the FMA grid's 100.5%: no gain.
//
// Layout: a thread (group gq = lane / 4, q = lane % 4) holds rows gq and gq + 8 of its warp's
// 16, columns 16 pr + 4 q .. + 3 of every 16-column pair pr (one float4 each). The MMA's columns
// are permuted to match: its n-tile 2 pr + h holds columns 16 pr + 4 (c / 2) + c % 2 + 2 h for
// c = 0..7, and its k index the window entries j = 4 (k / 2) + k % 2 (k < 8), 4 ((k - 8) / 2) +
// 2 + k % 2 (k >= 8), so a thread's operands are X[4q .. 4q + 3] of its two rows and
// Y[4q .. 4q + 3] of one column: whole 8- and 16-byte pieces.
//
// Defines: P, N (128), J (16), HPG, WARPS (per block; every block within one head), MIN_BLOCKS,
// SPLIT (bf16 parts of X: 3 exact to fp32, 2 or 1 to time the product's share), YF (1: Y comes
// pre-arranged as the B fragments, [groups][16 n-tiles][32 lanes] x 4 bf16, read by each warp
// from global memory; 0: the block gathers them from Y [J, N] into shared memory), PERSIST (1: a
// fixed wave of blocks looping over the items; 0: one block per item).

typedef unsigned short u16;

#ifndef PERSIST
#define PERSIST 0
#endif
#ifndef YF
#define YF 0
#endif
#ifndef SPLIT
#define SPLIT 3
#endif
#define ROWS (16 * WARPS)
#define TILES (N / 8)

static_assert(N == 128 && J == 16, "16-column pairs across a row of 32 lanes x 4; one k16 MMA per window");
static_assert(P % ROWS == 0, "a block's rows within one head");
static_assert(SPLIT >= 1 && SPLIT <= 3, "one to three bf16 parts of X");

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// x's SPLIT bf16 parts, largest first (round to nearest even; each remainder is exact in fp32).
__device__ __forceinline__ void split_bf16(float x, unsigned part[SPLIT]) {
#pragma unroll
    for (int s = 0; s < SPLIT; ++s) {
        const unsigned u = __float_as_uint(x);
        const unsigned b = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        part[s] = b >> 16;
        x -= __uint_as_float(b);
    }
}

__device__ __forceinline__ void mma16816(float4& d, const unsigned a[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d.x), "+f"(d.y), "+f"(d.z), "+f"(d.w)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
fold_mma(float* __restrict__ S, const float* __restrict__ X, const u16* __restrict__ Y, const float* __restrict__ a,
         const u16* __restrict__ C, float* __restrict__ out, int n_blocks) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, q = lane % 4;
#if !YF
    __shared__ uint2 yf[TILES][32];  // the group's B fragments, [n-tile][lane]
#endif
#if PERSIST
    for (long long blk = blockIdx.x; blk < n_blocks; blk += gridDim.x) {
#else
    {
        const long long blk = blockIdx.x;
#endif
    const long long row0 = blk * ROWS + warp * 16;
    const long long head = row0 / P, g = head / HPG;
    const int p0 = (int)(row0 % P);
    float* ta = S + (row0 + gq) * N + 4 * q;
    float* tb = ta + 8 * N;
    float4 sa[N / 16], sb[N / 16];
#pragma unroll
    for (int pr = 0; pr < N / 16; ++pr) {
        sa[pr] = *(const float4*)(ta + 16 * pr);
        sb[pr] = *(const float4*)(tb + 16 * pr);
    }
    const float* xh = X + head * J * P + p0 + gq;
    float xa[4], xb[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        xa[i] = __ldg(xh + (4 * q + i) * P);
        xb[i] = __ldg(xh + (4 * q + i) * P + 8);
    }
#if YF
    const uint2* yw = (const uint2*)Y + g * TILES * 32 + lane;
#else
    for (int e = threadIdx.x; e < TILES * 32; e += WARPS * 32) {
        const int t = e / 32, n = (e % 32) / 4, qq = e % 4;
        const u16* yc = Y + g * J * N + 16 * (t / 2) + 4 * (n / 2) + n % 2 + 2 * (t % 2) + 4 * qq * N;
        yf[t][e % 32] = make_uint2(__ldg(yc) | ((unsigned)__ldg(yc + N) << 16),
                                   __ldg(yc + 2 * N) | ((unsigned)__ldg(yc + 3 * N) << 16));
    }
    __syncthreads();
#endif
    const float ah = __ldg(a + head);
    unsigned A[SPLIT][4];
    {
        unsigned pa[4][SPLIT], pb[4][SPLIT];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            split_bf16(xa[i], pa[i]);
            split_bf16(xb[i], pb[i]);
        }
#pragma unroll
        for (int s = 0; s < SPLIT; ++s) {
            A[s][0] = pa[0][s] | (pa[1][s] << 16);  // row gq, j = 4q, 4q + 1
            A[s][1] = pb[0][s] | (pb[1][s] << 16);  // row gq + 8
            A[s][2] = pa[2][s] | (pa[3][s] << 16);  // row gq, j = 4q + 2, 4q + 3
            A[s][3] = pb[2][s] | (pb[3][s] << 16);
        }
    }
#pragma unroll
    for (int pr = 0; pr < N / 16; ++pr) {
#if YF
        const uint2 b0 = __ldg(yw + (2 * pr) * 32), b1 = __ldg(yw + (2 * pr + 1) * 32);
#else
        const uint2 b0 = yf[2 * pr][lane], b1 = yf[2 * pr + 1][lane];
#endif
        float4 d0 = make_float4(ah * sa[pr].x, ah * sa[pr].y, ah * sb[pr].x, ah * sb[pr].y);
        float4 d1 = make_float4(ah * sa[pr].z, ah * sa[pr].w, ah * sb[pr].z, ah * sb[pr].w);
        // the smallest part first: the large ones then meet an accumulator that already holds it
#pragma unroll
        for (int s = SPLIT - 1; s >= 0; --s) {
            mma16816(d0, A[s], b0.x, b0.y);
            mma16816(d1, A[s], b1.x, b1.y);
        }
        sa[pr] = make_float4(d0.x, d0.y, d1.x, d1.y);
        sb[pr] = make_float4(d0.z, d0.w, d1.z, d1.w);
    }
    float oa = 0.f, ob = 0.f;
#pragma unroll
    for (int pr = 0; pr < N / 16; ++pr) {
        *(float4*)(ta + 16 * pr) = sa[pr];
        *(float4*)(tb + 16 * pr) = sb[pr];
        const uint2 cb = __ldg((const uint2*)(C + g * N + 16 * pr + 4 * q));
        const float c0 = bf16_lo(cb.x), c1 = bf16_hi(cb.x), c2 = bf16_lo(cb.y), c3 = bf16_hi(cb.y);
        oa += sa[pr].x * c0 + sa[pr].y * c1 + sa[pr].z * c2 + sa[pr].w * c3;
        ob += sb[pr].x * c0 + sb[pr].y * c1 + sb[pr].z * c2 + sb[pr].w * c3;
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        oa += __shfl_xor_sync(0xffffffffu, oa, off);
        ob += __shfl_xor_sync(0xffffffffu, ob, off);
    }
    if (q == 0) {
        out[row0 + gq] = oa;
        out[row0 + gq + 8] = ob;
    }
#if PERSIST && !YF
    __syncthreads();  // the next item rewrites yf
#endif
    }
}
