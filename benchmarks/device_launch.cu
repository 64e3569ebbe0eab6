// What a grid launched from the device costs inside a CUDA graph (benchmarks/probe_device_launch.py,
// which builds this file with nvcc into a shared library and documents the forms it times).
//
// The warp-specialised flush runs as one wave of blocks; a grid of short blocks moves the same
// read-modify-write bytes at the standard step's rate, but a grid launched in every step pays its
// blocks' early exits in the steps that have nothing to fold (benchmarks/NOTES_mamba2.md,
// thirty-third and thirty-eighth runs). With CUDA dynamic parallelism (CDP2) one block can decide
// on the device and launch the grid only when it has work. Built twice: relocatable with the
// launchers (-rdc=true, libcudadevrt), and plain without them (-DNO_DEVICE_LAUNCH), so that the
// host-launched grid can be timed in both and the cost of relocatable code read apart.

#include <cuda_runtime.h>

#define THREADS 256
#define PER_THREAD 8  // float4 a thread: 32 KB a block, a Nemotron-H head tile

// x <- x + add over a block's 32 KB piece, where *flag (a null flag: always).
__global__ void __launch_bounds__(THREADS) update_grid(const int* __restrict__ flag, float4* __restrict__ x,
                                                      long long n4, float add) {
    if (flag != nullptr && *flag == 0) return;
    long long i = (long long)blockIdx.x * THREADS * PER_THREAD + threadIdx.x;
    float4 v[PER_THREAD];
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k)
        if (i + k * THREADS < n4) v[k] = x[i + k * THREADS];
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k)
        if (i + k * THREADS < n4)
            x[i + k * THREADS] = make_float4(v[k].x + add, v[k].y + add, v[k].z + add, v[k].w + add);
}

static int blocks_for(long long n4) { return (int)((n4 + THREADS * PER_THREAD - 1) / (THREADS * PER_THREAD)); }

#ifndef NO_DEVICE_LAUNCH
// One block: launches the update grid when *flag, as a tail launch (it starts once this grid has
// ended) or fire-and-forget (it may start at once). Whether the stream's next work waits for the
// child is what the probe's order check reads.
__global__ void launcher(const int* __restrict__ flag, float4* __restrict__ x, long long n4, float add, int blocks,
                         int fire_and_forget) {
    if (threadIdx.x != 0 || *flag == 0) return;
    if (fire_and_forget)
        update_grid<<<blocks, THREADS, 0, cudaStreamFireAndForget>>>(nullptr, x, n4, add);
    else
        update_grid<<<blocks, THREADS, 0, cudaStreamTailLaunch>>>(nullptr, x, n4, add);
}
#endif

extern "C" {

// Host launches on `stream` (a cudaStream_t, as torch.cuda.Stream.cuda_stream gives it); each
// returns the launch's cudaError_t.
int launch_update(const int* flag, float* x, long long n4, float add, cudaStream_t stream) {
    update_grid<<<blocks_for(n4), THREADS, 0, stream>>>(flag, reinterpret_cast<float4*>(x), n4, add);
    return (int)cudaGetLastError();
}

int launch_launcher(const int* flag, float* x, long long n4, float add, int fire_and_forget, cudaStream_t stream) {
#ifdef NO_DEVICE_LAUNCH
    return (int)cudaErrorNotSupported;
#else
    launcher<<<1, 32, 0, stream>>>(flag, reinterpret_cast<float4*>(x), n4, add, blocks_for(n4), fire_and_forget);
    return (int)cudaGetLastError();
#endif
}

int has_device_launch(void) {
#ifdef NO_DEVICE_LAUNCH
    return 0;
#else
    return 1;
#endif
}

}  // extern "C"
