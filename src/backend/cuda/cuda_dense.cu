/*
 * Kernels of the dense op family (cuda_dense.h): the bias gradient of the
 * matmul pair, the forward's bias add where cuBLASLt's epilogue is not used,
 * scale and add_inplace. The matrix products themselves are
 * cuBLASLt's (cuda_ops_dense.c); these are the few element-wise and
 * reduction passes around them, and the fp32 -> bf16 cast of cuda-bf16's
 * operands and of convert.
 *
 * Why our own bias-gradient kernel instead of cuBLASLt's BGRADB epilogue:
 * the contract accumulates parameter gradients (dbias += ...), BGRADB
 * overwrites its output, and cuBLASLt does not document the order in which
 * it reduces (it may depend on the algorithm the heuristic picks, hence on
 * N); a scratch for BGRADB plus an add would cost a buffer the ops may not
 * allocate. This kernel is one pass over dout with a reduction whose shape
 * is fixed by (N, OC) alone.
 *
 * Launch shapes:
 *   bias_backward  grid (ceil(OC/32)), block (32, 32): threadIdx.x is the
 *                  column inside a 32-column tile, so each warp reads one
 *                  row's 32 consecutive floats (128 bytes, coalesced);
 *                  threadIdx.y strides the rows (y, y+32, ...), summed in
 *                  row order in fp32; then a shared-memory tree over the
 *                  32 row lanes (5 levels, fixed pairing) and one += into
 *                  dbias by the y == 0 row.
 *   bias_add, scale, add, cast_bf16
 *                  grid-stride loops, 256-thread blocks, at most 8192
 *                  blocks (enough to fill an H100 several times over).
 *
 * Invariants: deterministic (no atomics; every partial sum has a fixed
 * place in a fixed tree), so two runs and every shim schedule give the same
 * bits; every thread reaches every __syncthreads (the work is guarded, not
 * the barrier); indices are 64-bit where N*OC may exceed 2^31.
 *
 * Error of bias_backward (for the tests): each column sum goes through at
 * most ceil(N/32) + 5 fp32 additions, then one for the +=, so it is within
 * gamma_{ceil(N/32)+6} * (sum_n |dout[n,o]| + |dbias[o]|) of the exact
 * value (Higham, Accuracy and Stability, 4.2).
 */
#include <stdint.h>
#include "cuda_compat.h"
#include "cuda_dense.h"

#define BB_COLS 32 /* columns per block: one warp's width */
#define BB_ROWS 32 /* row lanes per block (a power of two for the tree) */

__global__ void dense_bias_backward(float *__restrict__ dbias, const float *__restrict__ dout, int N, int OC) {
    __shared__ float part[BB_ROWS][BB_COLS + 1]; /* +1: the tree reads columns, avoid bank conflicts */
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int col = (int)blockIdx.x * BB_COLS + tx;
    float acc = 0.0f;
    if (col < OC)
        for (long n = ty; n < N; n += BB_ROWS) acc += dout[n * (long)OC + col];
    part[ty][tx] = acc;
    __syncthreads();
    for (int stride = BB_ROWS / 2; stride > 0; stride >>= 1) {
        if (ty < stride) part[ty][tx] += part[ty + stride][tx];
        __syncthreads();
    }
    if (ty == 0 && col < OC) dbias[col] += part[0][tx];
}

/* one thread per element, grid-stride; o = i mod OC: consecutive threads
 * read consecutive bias entries (cached) and out elements (coalesced) */
__global__ void dense_bias_add(float *__restrict__ out, const float *__restrict__ bias, size_t n, int OC) {
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) out[i] += bias[i % (size_t)OC];
}

__global__ void dense_scale(float *__restrict__ x, size_t n, float s) {
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) x[i] *= s;
}

/* fp32 -> bf16 bits, round to nearest even (cvt.rn.bf16.f32): the one
 * conversion cuda-bf16 applies to matmul operands and activations */
__global__ void dense_cast_bf16(uint16_t *__restrict__ out, const float *__restrict__ inp, size_t n) {
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(inp[i]));
}

/* bf16 bits -> fp32, exact */
__global__ void dense_widen_bf16(float *__restrict__ out, const uint16_t *__restrict__ inp, size_t n) {
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[i] = __bfloat162float(__ushort_as_bfloat16(inp[i]));
}

/* y and x may be the same pointer (y += y), so no __restrict__ */
__global__ void dense_add_inplace(float *y, const float *x, size_t n) {
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) y[i] += x[i];
}

#define EW_BLOCK 256
#define EW_MAX_GRID 8192

static unsigned ew_grid(size_t n) {
    size_t g = (n + EW_BLOCK - 1) / EW_BLOCK;
    return (unsigned)(g < EW_MAX_GRID ? g : EW_MAX_GRID);
}

extern "C" cudaError_t lf__cuk_bias_backward(float *dbias, const float *dout, int N, int OC, cudaStream_t stream) {
    if (N < 0 || OC < 0) return cudaErrorInvalidValue;
    if (N == 0 || OC == 0) return cudaSuccess;
    const unsigned grid = (unsigned)((OC + BB_COLS - 1) / BB_COLS);
    LF_CUDA_LAUNCH(dense_bias_backward, dim3(grid), dim3(BB_COLS, BB_ROWS), 0, stream, dbias, dout, N, OC);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_bias_add(float *out, const float *bias, int N, int OC, cudaStream_t stream) {
    if (N < 0 || OC < 0) return cudaErrorInvalidValue;
    if (N == 0 || OC == 0) return cudaSuccess;
    const size_t n = (size_t)N * (size_t)OC;
    LF_CUDA_LAUNCH(dense_bias_add, ew_grid(n), EW_BLOCK, 0, stream, out, bias, n, OC);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_scale(float *x, size_t n, float s, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(dense_scale, ew_grid(n), EW_BLOCK, 0, stream, x, n, s);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_cast_bf16(uint16_t *out, const float *inp, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(dense_cast_bf16, ew_grid(n), EW_BLOCK, 0, stream, out, inp, n);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_widen_bf16(float *out, const uint16_t *inp, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(dense_widen_bf16, ew_grid(n), EW_BLOCK, 0, stream, out, inp, n);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_add_inplace(float *y, const float *x, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(dense_add_inplace, ew_grid(n), EW_BLOCK, 0, stream, y, x, n);
    return cudaGetLastError();
}
