/*
 * Optimizer-side kernels of the CUDA backend (cuda_pointwise.h; the CPU's
 * are cpu_optim.c and cpu_backend.c's fp16_round): AdamW over a flat
 * buffer, the sum of squares behind the global gradient norm, and the fp16
 * rounding of fp16 training's loss scaler.
 *
 * adamw: a thread per element (grid-stride, 256 a block), the CPU's
 * expression order with the CPU's constants (formed on the host by the
 * same code: torch.optim.AdamW's single-tensor update, lerp for m, the bias
 * corrections in double). Differences from the CPU are FMA contractions
 * only (m's lerp and v's b2*v + (1-b2)*g^2), a rounding each. With a
 * shadow (cuda-bf16) the thread also stores its new parameter rounded to
 * bf16, renewing the cached weight copy in the same pass, as cpu-bf16's
 * AdamW does (cpu_optim.c).
 *
 * sum_squares: at most LF_CUK_SS_BLOCKS blocks of 256 threads; thread t of
 * block b adds x[i]^2 in double over i = b*256 + t + k*(blocks*256), the
 * block adds its threads' sums in a fixed tree into partial[b]; a second
 * launch of one block adds the partials in a fixed tree. The block count is
 * a function of n alone: the same bits every run, whatever the schedule
 * (no atomics). The terms are exact in double (a float squared), so the
 * result is within n * 2^-53 relative of the exact sum, as the CPU's.
 *
 * fp16_round: x = (float)(half)x, round to nearest even, overflow to inf
 * (CUDA's __float2half_rn, IEEE binary16 as the CPU's _Float16); a
 * non-finite result stores 1 into the flag (a plain store of the same
 * value from any thread that finds one: no read-modify-write, no order).
 */
#include "cuda_compat.h"
#include "cuda_pointwise.h"
#include "cuda_pw_common.cuh"

#define OPT_BLOCK 256

__global__ void opt_adamw(float *__restrict__ params, const float *__restrict__ grads, float *__restrict__ m,
                          float *__restrict__ v, uint16_t *__restrict__ shadow, size_t n, lf_cuk_adamw_k k) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = grads[i] * k.grad_scale;
        const float p = params[i] * k.decay;
        const float mo = m[i];
        const float mi = k.lerp_low ? mo + k.w1 * (g - mo) : g - (g - mo) * k.w1c;
        const float vi = v[i] * k.b2 + k.omb2 * g * g;
        const float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
        m[i] = mi;
        v[i] = vi;
        const float np = p + (-k.step_size * mi) / denom;
        params[i] = np;
        if (shadow) pw_store(shadow, i, np);
    }
}

extern "C" cudaError_t lf__cuk_adamw(float *params, const float *grads, float *m, float *v, uint16_t *shadow,
                                    size_t n, lf_cuk_adamw_k k, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(opt_adamw, pw_blocks(n, OPT_BLOCK, PW_GRID_CAP), OPT_BLOCK, 0, stream, params, grads, m, v, shadow,
                   n, k);
    return cudaGetLastError();
}

__global__ void opt_ss_partial(double *__restrict__ partial, const float *__restrict__ x, size_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const double d = (double)x[i];
        s += d * d;
    }
    s = pw_block_sum_d(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void opt_ss_final(double *__restrict__ out, const double *__restrict__ partial, int nb) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = (int)threadIdx.x; i < nb; i += (int)blockDim.x) s += partial[i];
    s = pw_block_sum_d(s, sh);
    if (threadIdx.x == 0) *out = s;
}

extern "C" cudaError_t lf__cuk_sum_squares(double *out, double *partial, const float *x, size_t n,
                                          cudaStream_t stream) {
    if (!out || !partial) return cudaErrorInvalidValue;
    const unsigned nb = pw_blocks(n, OPT_BLOCK * 4, LF_CUK_SS_BLOCKS);
    LF_CUDA_LAUNCH(opt_ss_partial, nb, OPT_BLOCK, 0, stream, partial, x, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    LF_CUDA_LAUNCH(opt_ss_final, 1, OPT_BLOCK, 0, stream, out, partial, (int)nb);
    return cudaGetLastError();
}

__global__ void opt_fp16_round(float *__restrict__ x, size_t n, int *__restrict__ flag) {
    int bad = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float r = __half2float(__float2half_rn(x[i]));
        x[i] = r;
        bad |= (__float_as_uint(r) & 0x7f800000u) == 0x7f800000u;
    }
    if (bad) *flag = 1;
}

extern "C" cudaError_t lf__cuk_fp16_round(float *x, size_t n, int *flag, cudaStream_t stream) {
    if (!flag) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(opt_fp16_round, pw_blocks(n, OPT_BLOCK, PW_GRID_CAP), OPT_BLOCK, 0, stream, x, n, flag);
    return cudaGetLastError();
}
