/*
 * Sample kernels (cuda_samples.h): a vector add, a shared-memory block
 * reduction, a warp-shuffle reduction and the bf16/fp16 round trip, each
 * behind a C wrapper. Compiled by nvcc into lf_backend_cuda and by the host
 * C++ compiler against the shim into lf_backend_cuda_shim; the tests in
 * tests/cuda run them on both against host references. They exercise what
 * every later op kernel uses: bounds checks for sizes that are not a
 * multiple of the block, grid-stride loops, dynamic and static shared
 * memory, __syncthreads, full-warp shuffles, the 16-bit conversions, and
 * launches through LF_CUDA_LAUNCH.
 *
 * Invariants: the reductions are deterministic (fixed tree shapes, no
 * atomics); every __syncthreads is reached by every thread of the block
 * (no early return before one); warp shuffles name the full mask and run
 * in warps that are complete (block a multiple of 32).
 */
#include "cuda_compat.h"
#include "cuda_samples.h"

__global__ void sample_vadd(float *__restrict__ out, const float *__restrict__ a, const float *__restrict__ b,
                            int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = a[i] + b[i];
}

/* a grid-stride slice of x, this thread's part */
__device__ __forceinline__ float slice_sum(const float *__restrict__ x, int n) {
    float acc = 0.0f;
    long step = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) acc += x[i];
    return acc;
}

__global__ void sample_block_sum(float *__restrict__ partial, const float *__restrict__ x, int n) {
    LF_CUDA_DYNAMIC_SHARED(float, s); /* blockDim.x floats */
    unsigned t = threadIdx.x;
    s[t] = slice_sum(x, n);
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}

__device__ __forceinline__ float warp_sum_down(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

__global__ void sample_warp_sum(float *__restrict__ partial, const float *__restrict__ x, int n) {
    __shared__ float warp_sums[32];
    unsigned t = threadIdx.x, lane = t & 31u, warp = t >> 5;
    float v = warp_sum_down(slice_sum(x, n));
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) w += __shfl_xor_sync(0xffffffffu, w, off);
        if (lane == 0) partial[blockIdx.x] = w;
    }
}

__global__ void sample_lowp_round(unsigned short *__restrict__ bf_bits, float *__restrict__ bf_back,
                                  unsigned short *__restrict__ h_bits, float *__restrict__ h_back,
                                  const float *__restrict__ x, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    __nv_bfloat16 b = __float2bfloat16(x[i]);
    bf_bits[i] = __bfloat16_as_ushort(b);
    bf_back[i] = __bfloat162float(b);
    __half h = __float2half(x[i]);
    h_bits[i] = __half_as_ushort(h);
    h_back[i] = __half2float(h);
}

static int blocks_for(int n, int block) { return block > 0 && n > 0 ? (n + block - 1) / block : 1; }

extern "C" cudaError_t lf__cuda_sample_vadd(float *out, const float *a, const float *b, int n, int block,
                                           cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(sample_vadd, blocks_for(n, block), (unsigned)block, 0, stream, out, a, b, n);
    return cudaGetLastError();
}

static int pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

extern "C" cudaError_t lf__cuda_sample_block_sum(float *out, float *partial, const float *x, int n, int grid,
                                                int block, cudaStream_t stream) {
    if (n < 0 || grid < 1 || !pow2(block) || block > 1024) return cudaErrorInvalidValue;
    size_t shmem = (size_t)block * sizeof(float);
    LF_CUDA_LAUNCH(sample_block_sum, grid, block, shmem, stream, partial, x, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    LF_CUDA_LAUNCH(sample_block_sum, 1, block, shmem, stream, out, partial, grid);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuda_sample_warp_sum(float *out, float *partial, const float *x, int n, int grid,
                                               int block, cudaStream_t stream) {
    if (n < 0 || grid < 1 || block < 32 || block > 1024 || block % 32) return cudaErrorInvalidValue;
    LF_CUDA_LAUNCH(sample_warp_sum, grid, block, 0, stream, partial, x, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    LF_CUDA_LAUNCH(sample_warp_sum, 1, block, 0, stream, out, partial, grid);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuda_sample_lowp_round(uint16_t *bf16_bits, float *bf16_back, uint16_t *f16_bits,
                                                 float *f16_back, const float *x, int n, int block,
                                                 cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(sample_lowp_round, blocks_for(n, block), (unsigned)block, 0, stream, bf16_bits, bf16_back,
                   f16_bits, f16_back, x, n);
    return cudaGetLastError();
}
