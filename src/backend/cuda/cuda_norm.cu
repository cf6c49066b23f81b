/*
 * LayerNorm and RMSNorm kernels of the CUDA backend (cuda_pointwise.h),
 * forward and backward, fp32 with fp32 row statistics as the CPU computes
 * them (cpu_norm.c, cpu_rmsnorm.c). The forward's output is fp32 or, for the
 * cuda-bf16 table's bf16 activation storage, the same fp32 value rounded
 * to bf16 at the store (pw_store).
 *
 * The residual-fused forwards (residual_layernorm_forward,
 * residual_rmsnorm_forward) are the same kernels with the residual add in
 * their first pass (ln_forward / rms_forward with Res = true).
 *
 * Launch shapes:
 *  - forward and backward's dinp: a warp per row, 8 rows a 256-thread
 *    block; each lane walks the row at stride 32 (coalesced), the row sums
 *    are butterfly shuffles. LayerNorm's statistics are two passes (mean,
 *    then centred squares) as the CPU's, so no cancellation.
 *  - backward's dweight/dbias: a block per slice of 8 channels (one 32-byte
 *    sector of a row), 512 threads in 64 row groups; group g adds rows g,
 *    g+64, ... of its slice in order into a per-thread double accumulator
 *    (the CPU accumulates each channel in double too), then the 64
 *    partials are added in group order in shared memory and the float
 *    result added to dweight once (C/8 blocks: 96 at C = 768). Channels
 *    are owned by one thread: no atomics, a fixed order, the same bits
 *    every run.
 *
 * Precision: the row reductions are fp32 as on the CPU, in a different
 * order (lane-strided then a shuffle tree, against the CPU's vectorized
 * loop): results differ within the summation error bound of C terms. The
 * parameter gradients are double sums of the CPU's float terms: they equal
 * the CPU's to within one ulp of the float result.
 *
 * Invariants: backward adds (+=) into dinp, dweight, dbias (the residual
 * stream and the parameter gradients); bias / dbias may be NULL; rows past
 * N exit only whole warps (the forward and dinp kernels have no
 * __syncthreads), and the parameter kernel guards the work, not the
 * barrier.
 *
 * Reference: Ba, Kiros, Hinton 2016 (LayerNorm); Zhang & Sennrich 2019
 * (RMSNorm); llm.c layernorm_forward / layernorm_backward kernels.
 */
#include "cuda_compat.h"
#include "cuda_pointwise.h"
#include "cuda_pw_common.cuh"

#define NORM_BLOCK 256 /* 8 warps: 8 rows a block */
#define NORM_ROWS (NORM_BLOCK / 32)
#define PARAM_SLICE 8   /* channels of one parameter-gradient block: one 32-byte sector of a row */
#define PARAM_GROUPS 64 /* row groups of one parameter-gradient block (512 threads) */
#define LN_EPS 1e-5f

/* ------------------------------------------------------------- LayerNorm */

/* Res: the residual-fused form. Its first pass computes res = a + b and
 * stores it while summing, and the later passes read the row back from
 * res (this lane's own stores, so still in L1): the values are those
 * residual_forward stores and ln_forward reads, so the bits are the
 * unfused pair's, with one pass over the row fewer. res may equal a or b
 * (each element is read, then written, by one lane): no __restrict__. */
template <typename OutT, bool Res>
__global__ void ln_forward(OutT *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                           const float *__restrict__ inp, float *res, const float *a, const float *b,
                           const float *__restrict__ weight, const float *__restrict__ bias, int N, int C) {
    const int lane = (int)(threadIdx.x & 31u);
    const long row = (long)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (row >= N) return; /* a whole warp: no barrier below */
    const size_t ro = (size_t)row * C;
    float s = 0.0f;
    if (Res) {
        for (int c = lane; c < C; c += 32) {
            const float v = a[ro + c] + b[ro + c];
            res[ro + c] = v;
            s += v;
        }
    } else {
        for (int c = lane; c < C; c += 32) s += inp[ro + c];
    }
    const float *x = Res ? res + ro : inp + ro;
    OutT *__restrict__ o = out + ro;
    const float m = pw_warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float d = x[c] - m;
        v += d * d;
    }
    const float r = 1.0f / sqrtf(pw_warp_sum(v) / (float)C + LN_EPS);
    if (bias) {
        for (int c = lane; c < C; c += 32) pw_store(o, (size_t)c, (x[c] - m) * r * weight[c] + bias[c]);
    } else {
        for (int c = lane; c < C; c += 32) pw_store(o, (size_t)c, (x[c] - m) * r * weight[c]);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* dinp += rstd * (w*dout - mean(w*dout) - norm * mean(w*dout*norm)) */
__global__ void ln_backward_dinp(float *__restrict__ dinp, const float *__restrict__ dout,
                                 const float *__restrict__ inp, const float *__restrict__ weight,
                                 const float *__restrict__ mean, const float *__restrict__ rstd, int N, int C) {
    const int lane = (int)(threadIdx.x & 31u);
    const long row = (long)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const float *__restrict__ x = inp + (size_t)row * C;
    const float *__restrict__ d = dout + (size_t)row * C;
    float *__restrict__ di = dinp + (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    float dm = 0.0f, dnm = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float norm = (x[c] - m) * r;
        const float dnorm = weight[c] * d[c];
        dm += dnorm;
        dnm += dnorm * norm;
    }
    dm = pw_warp_sum(dm) / (float)C;
    dnm = pw_warp_sum(dnm) / (float)C;
    for (int c = lane; c < C; c += 32) {
        const float norm = (x[c] - m) * r;
        const float dnorm = weight[c] * d[c];
        di[c] += (dnorm - dm - norm * dnm) * r;
    }
}

/* dweight[c] += sum_n dout*norm, dbias[c] += sum_n dout (or, mean == NULL:
 * RMSNorm's dweight[c] += sum_n dout * (x*rstd), no dbias). Thread t owns
 * channel t % 8 of the block's slice and rows t/8, t/8 + 64, ...: a warp
 * reads 4 rows x 8 channels, four whole 32-byte sectors. */
__global__ void norm_backward_params(float *__restrict__ dweight, float *__restrict__ dbias,
                                     const float *__restrict__ dout, const float *__restrict__ inp,
                                     const float *__restrict__ mean, const float *__restrict__ rstd, int N, int C) {
    __shared__ double sw[PARAM_GROUPS][PARAM_SLICE];
    __shared__ double sb[PARAM_GROUPS][PARAM_SLICE];
    const int ch = (int)(threadIdx.x % PARAM_SLICE), grp = (int)(threadIdx.x / PARAM_SLICE);
    const int c = (int)blockIdx.x * PARAM_SLICE + ch;
    double aw = 0.0, ab = 0.0;
    if (c < C) {
        if (mean) {
            for (int n = grp; n < N; n += PARAM_GROUPS) {
                const size_t i = (size_t)n * C + c;
                const float dv = dout[i];
                aw += (double)(dv * ((inp[i] - mean[n]) * rstd[n]));
                ab += (double)dv;
            }
        } else {
            for (int n = grp; n < N; n += PARAM_GROUPS) {
                const size_t i = (size_t)n * C + c;
                aw += (double)(dout[i] * (inp[i] * rstd[n]));
            }
        }
    }
    sw[grp][ch] = aw;
    sb[grp][ch] = ab;
    __syncthreads();
    if (grp == 0 && c < C) {
        double tw = 0.0, tb = 0.0;
        for (int g = 0; g < PARAM_GROUPS; g++) {
            tw += sw[g][ch];
            tb += sb[g][ch];
        }
        dweight[c] += (float)tw;
        if (dbias) dbias[c] += (float)tb;
    }
}

static cudaError_t launch_ln(void *out, int out_bf16, float *mean, float *rstd, const float *inp, float *res,
                             const float *a, const float *b, const float *weight, const float *bias, int N, int C,
                             cudaStream_t stream) {
    if (N < 0 || C < 0) return cudaErrorInvalidValue;
    if (N == 0 || C == 0) return cudaSuccess;
    const unsigned grid = (unsigned)((N + NORM_ROWS - 1) / NORM_ROWS);
    if (res) {
        if (out_bf16) {
            auto *k = &ln_forward<uint16_t, true>;
            LF_CUDA_LAUNCH(k, grid, NORM_BLOCK, 0, stream, (uint16_t *)out, mean, rstd, inp, res, a, b, weight, bias,
                           N, C);
        } else {
            auto *k = &ln_forward<float, true>;
            LF_CUDA_LAUNCH(k, grid, NORM_BLOCK, 0, stream, (float *)out, mean, rstd, inp, res, a, b, weight, bias, N,
                           C);
        }
    } else if (out_bf16) {
        auto *k = &ln_forward<uint16_t, false>;
        LF_CUDA_LAUNCH(k, grid, NORM_BLOCK, 0, stream, (uint16_t *)out, mean, rstd, inp, res, a, b, weight, bias, N,
                       C);
    } else {
        auto *k = &ln_forward<float, false>;
        LF_CUDA_LAUNCH(k, grid, NORM_BLOCK, 0, stream, (float *)out, mean, rstd, inp, res, a, b, weight, bias, N, C);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_layernorm_forward(void *out, int out_bf16, float *mean, float *rstd,
                                                const float *inp, const float *weight, const float *bias, int N,
                                                int C, cudaStream_t stream) {
    return launch_ln(out, out_bf16, mean, rstd, inp, NULL, NULL, NULL, weight, bias, N, C, stream);
}

extern "C" cudaError_t lf__cuk_residual_layernorm_forward(float *res, void *out, int out_bf16, float *mean,
                                                         float *rstd, const float *a, const float *b,
                                                         const float *weight, const float *bias, int N, int C,
                                                         cudaStream_t stream) {
    if (!res || !a || !b) return cudaErrorInvalidValue;
    return launch_ln(out, out_bf16, mean, rstd, NULL, res, a, b, weight, bias, N, C, stream);
}

static cudaError_t launch_params(float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, int N, int C, cudaStream_t stream) {
    LF_CUDA_LAUNCH(norm_backward_params, (unsigned)((C + PARAM_SLICE - 1) / PARAM_SLICE), PARAM_GROUPS * PARAM_SLICE, 0,
                   stream, dweight, dbias, dout, inp, mean, rstd, N, C);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                                 const float *inp, const float *weight, const float *mean,
                                                 const float *rstd, int N, int C, cudaStream_t stream) {
    if (N < 0 || C < 0 || !mean) return cudaErrorInvalidValue;
    if (N == 0 || C == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(ln_backward_dinp, (unsigned)((N + NORM_ROWS - 1) / NORM_ROWS), NORM_BLOCK, 0, stream, dinp, dout,
                   inp, weight, mean, rstd, N, C);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return launch_params(dweight, dbias, dout, inp, mean, rstd, N, C, stream);
}

/* ------------------------------------------------------------- RMSNorm */

/* Res: the residual-fused form, as ln_forward's. */
template <typename OutT, bool Res>
__global__ void rms_forward(OutT *__restrict__ out, float *__restrict__ rstd, const float *__restrict__ inp,
                            float *res, const float *a, const float *b, const float *__restrict__ weight, int N, int C,
                            float eps) {
    const int lane = (int)(threadIdx.x & 31u);
    const long row = (long)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const size_t ro = (size_t)row * C;
    float ss = 0.0f;
    if (Res) {
        for (int c = lane; c < C; c += 32) {
            const float v = a[ro + c] + b[ro + c];
            res[ro + c] = v;
            ss += v * v;
        }
    } else {
        for (int c = lane; c < C; c += 32) ss += inp[ro + c] * inp[ro + c];
    }
    const float *x = Res ? res + ro : inp + ro;
    OutT *__restrict__ o = out + ro;
    const float r = 1.0f / sqrtf(pw_warp_sum(ss) / (float)C + eps);
    for (int c = lane; c < C; c += 32) pw_store(o, (size_t)c, weight[c] * (x[c] * r));
    if (lane == 0) rstd[row] = r;
}

/* dinp += rstd * (w*dout - n * mean(w*dout*n)), n = x*rstd */
__global__ void rms_backward_dinp(float *__restrict__ dinp, const float *__restrict__ dout,
                                  const float *__restrict__ inp, const float *__restrict__ weight,
                                  const float *__restrict__ rstd, int N, int C) {
    const int lane = (int)(threadIdx.x & 31u);
    const long row = (long)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const float *__restrict__ x = inp + (size_t)row * C;
    const float *__restrict__ d = dout + (size_t)row * C;
    float *__restrict__ di = dinp + (size_t)row * C;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += (weight[c] * d[c]) * (x[c] * r);
    dot = pw_warp_sum(dot) / (float)C;
    for (int c = lane; c < C; c += 32) di[c] += (weight[c] * d[c] - (x[c] * r) * dot) * r;
}

static cudaError_t launch_rms(void *out, int out_bf16, float *rstd, const float *inp, float *res, const float *a,
                              const float *b, const float *weight, int N, int C, float eps, cudaStream_t stream) {
    if (N < 0 || C < 0) return cudaErrorInvalidValue;
    if (N == 0 || C == 0) return cudaSuccess;
    const unsigned grid = (unsigned)((N + NORM_ROWS - 1) / NORM_ROWS);
    if (res) {
        if (out_bf16) {
            auto *k = &rms_forward<uint16_t, true>;
            LF_CUDA_LAUNCH(k, grid, NORM_BLOCK, 0, stream, (uint16_t *)out, rstd, inp, res, a, b, weight, N, C, eps);
        } else {
            auto *k = &rms_forward<float, true>;
            LF_CUDA_LAUNCH(k, grid, NORM_BLOCK, 0, stream, (float *)out, rstd, inp, res, a, b, weight, N, C, eps);
        }
    } else if (out_bf16) {
        auto *k = &rms_forward<uint16_t, false>;
        LF_CUDA_LAUNCH(k, grid, NORM_BLOCK, 0, stream, (uint16_t *)out, rstd, inp, res, a, b, weight, N, C, eps);
    } else {
        auto *k = &rms_forward<float, false>;
        LF_CUDA_LAUNCH(k, grid, NORM_BLOCK, 0, stream, (float *)out, rstd, inp, res, a, b, weight, N, C, eps);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_rmsnorm_forward(void *out, int out_bf16, float *rstd, const float *inp,
                                              const float *weight, int N, int C, float eps, cudaStream_t stream) {
    return launch_rms(out, out_bf16, rstd, inp, NULL, NULL, NULL, weight, N, C, eps, stream);
}

extern "C" cudaError_t lf__cuk_residual_rmsnorm_forward(float *res, void *out, int out_bf16, float *rstd,
                                                       const float *a, const float *b, const float *weight, int N,
                                                       int C, float eps, cudaStream_t stream) {
    if (!res || !a || !b) return cudaErrorInvalidValue;
    return launch_rms(out, out_bf16, rstd, NULL, res, a, b, weight, N, C, eps, stream);
}

extern "C" cudaError_t lf__cuk_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                               const float *weight, const float *rstd, int N, int C,
                                               cudaStream_t stream) {
    if (N < 0 || C < 0) return cudaErrorInvalidValue;
    if (N == 0 || C == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(rms_backward_dinp, (unsigned)((N + NORM_ROWS - 1) / NORM_ROWS), NORM_BLOCK, 0, stream, dinp, dout,
                   inp, weight, rstd, N, C);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return launch_params(dweight, NULL, dout, inp, NULL, rstd, N, C, stream);
}

/* ------------------------------------------------------------- per-head q/k RMSNorm (Qwen3) */

/* A warp per (row, head slot): slots 0..H-1 are the q and k heads (the
 * rms_forward row code on HS channels, wq or wk), slot H copies the row's
 * v part. */
__global__ void qk_forward(float *__restrict__ out, float *__restrict__ rstd, const float *__restrict__ inp,
                           const float *__restrict__ wq, const float *__restrict__ wk, int N, int NH, int NKV, int HS,
                           float eps) {
    const int lane = (int)(threadIdx.x & 31u), H = NH + NKV;
    const long item = (long)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (item >= (long)N * (H + 1)) return;
    const long n = item / (H + 1);
    const int h = (int)(item % (H + 1));
    const size_t o = (size_t)n * (size_t)(NH + 2 * NKV) * HS + (size_t)h * HS;
    if (h == H) {
        for (int c = lane; c < NKV * HS; c += 32) out[o + c] = inp[o + c];
        return;
    }
    const float *__restrict__ w = h < NH ? wq : wk;
    float ss = 0.0f;
    for (int c = lane; c < HS; c += 32) ss += inp[o + c] * inp[o + c];
    const float r = 1.0f / sqrtf(pw_warp_sum(ss) / (float)HS + eps);
    for (int c = lane; c < HS; c += 32) out[o + c] = w[c] * (inp[o + c] * r);
    if (lane == 0) rstd[(size_t)n * H + h] = r;
}

/* dwq / dwk: a block per channel of [wq | wk]; thread t adds the (row,
 * head) terms t, t + QK_PARAM_THREADS, ... in double, then thread 0 adds
 * the partials in thread order: a fixed order, no atomics. */
#define QK_PARAM_THREADS 256
__global__ void qk_backward_params(float *__restrict__ dwq, float *__restrict__ dwk, const float *__restrict__ dout,
                                   const float *__restrict__ inp, const float *__restrict__ rstd, int N, int NH,
                                   int NKV, int HS) {
    __shared__ double part[QK_PARAM_THREADS];
    const int cc = (int)blockIdx.x, isk = cc >= HS, c = isk ? cc - HS : cc;
    const int h0 = isk ? NH : 0, nh = isk ? NKV : NH, H = NH + NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * HS;
    const long M = (long)N * nh;
    double acc = 0.0;
    for (long i = (long)threadIdx.x; i < M; i += QK_PARAM_THREADS) {
        const long n = i / nh;
        const int h = h0 + (int)(i % nh);
        const size_t at = (size_t)n * W + (size_t)h * HS + (size_t)c;
        acc += (double)(dout[at] * (inp[at] * rstd[(size_t)n * H + h]));
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int g = 0; g < QK_PARAM_THREADS; g++) t += part[g];
        (isk ? dwk : dwq)[c] += (float)t;
    }
}

/* In place, a warp per (row, q/k head): every lane reads its channels of
 * d(out) into the dot before any lane writes (the shuffle sum is between). */
__global__ void qk_backward_dinp(float *dqkv, const float *__restrict__ inp, const float *__restrict__ wq,
                                 const float *__restrict__ wk, const float *__restrict__ rstd, int N, int NH, int NKV,
                                 int HS) {
    const int lane = (int)(threadIdx.x & 31u), H = NH + NKV;
    const long item = (long)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (item >= (long)N * H) return;
    const long n = item / H;
    const int h = (int)(item % H);
    const size_t o = (size_t)n * (size_t)(NH + 2 * NKV) * HS + (size_t)h * HS;
    const float *__restrict__ w = h < NH ? wq : wk;
    const float *__restrict__ x = inp + o;
    float *d = dqkv + o;
    const float r = rstd[item];
    float dot = 0.0f;
    for (int c = lane; c < HS; c += 32) dot += (w[c] * d[c]) * (x[c] * r);
    dot = pw_warp_sum(dot) / (float)HS;
    for (int c = lane; c < HS; c += 32) d[c] = (w[c] * d[c] - (x[c] * r) * dot) * r;
}

extern "C" cudaError_t lf__cuk_qknorm_forward(float *out, float *rstd, const float *inp, const float *wq,
                                              const float *wk, int N, int NH, int NKV, int HS, float eps,
                                              cudaStream_t stream) {
    if (N < 0 || NH < 1 || NKV < 1 || HS < 1) return cudaErrorInvalidValue;
    if (N == 0) return cudaSuccess;
    const long items = (long)N * (NH + NKV + 1);
    LF_CUDA_LAUNCH(qk_forward, (unsigned)((items + NORM_ROWS - 1) / NORM_ROWS), NORM_BLOCK, 0, stream, out, rstd, inp,
                   wq, wk, N, NH, NKV, HS, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_qknorm_backward(float *dqkv, float *dwq, float *dwk, const float *inp, const float *wq,
                                               const float *wk, const float *rstd, int N, int NH, int NKV, int HS,
                                               cudaStream_t stream) {
    if (N < 0 || NH < 1 || NKV < 1 || HS < 1) return cudaErrorInvalidValue;
    if (N == 0) return cudaSuccess;
    /* the parameter sums read d(out) before the in-place kernel overwrites it (same stream) */
    LF_CUDA_LAUNCH(qk_backward_params, (unsigned)(2 * HS), QK_PARAM_THREADS, 0, stream, dwq, dwk, dqkv, inp, rstd, N,
                   NH, NKV, HS);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const long items = (long)N * (NH + NKV);
    LF_CUDA_LAUNCH(qk_backward_dinp, (unsigned)((items + NORM_ROWS - 1) / NORM_ROWS), NORM_BLOCK, 0, stream, dqkv, inp,
                   wq, wk, rstd, N, NH, NKV, HS);
    return cudaGetLastError();
}
