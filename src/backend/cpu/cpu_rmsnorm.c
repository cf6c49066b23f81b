/*
 * RMSNorm of the CPU backend (HF LlamaRMSNorm semantics, fp32), for the
 * model families that normalise by the root mean square.
 *
 * RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm):
 *   rstd = 1 / sqrt(mean_c(x^2) + eps),  out = weight * (x * rstd).
 *   With n = x * rstd and dn = weight * dout, the backward is
 *   dinp += rstd * (dn - n * mean_c(dn * n)),  dweight += sum_rows dout * n.
 *
 * Invariants:
 *  - rmsnorm_backward accumulates (+=) into dinp (the residual stream) and
 *    dweight.
 *  - Deterministic for any thread count: dinp is row-parallel (each row
 *    written by one thread); dweight is channel-parallel with each channel's
 *    sum over rows taken in row order in a double accumulator, as
 *    layernorm_backward does (cpu_norm.c).
 *  - The bf16-output forward computes the same row with the same code and
 *    rounds it: convert of the fp32 op's output, bit for bit.
 *  - qknorm (Qwen3's q_norm / k_norm) is the same row code on each q and k
 *    head's HS channels of a qkv row; its backward overwrites d(out) with
 *    d(inp) in place, after every thread has summed dwq and dwk from d(out).
 *  - Parallel regions follow cpu_internal.h: `omp parallel if` around
 *    worksharing loops whose inner loops are `omp simd`.
 *
 * References: Zhang & Sennrich 2019, Root Mean Square Layer Normalization;
 * HF transformers modeling_llama.py (LlamaRMSNorm).
 */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "cpu_internal.h"

/* Channels summed together in one pass over the rows of a channel slice. */
#define RMS_ACC_W 64

/* ------------------------------------------------------------- RMSNorm */

/* One row of the forward, into fp32 (o) or bf16 (ob); not inlined, so the
 * plain forwards and the residual-fused one give the same bits. */
__attribute__((noinline)) static void rms_row(float *restrict o, uint16_t *restrict ob, float *restrict rstd,
                                              const float *restrict x, const float *restrict weight, int C, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    const float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (ob) {
#pragma omp simd
        for (int c = 0; c < C; c++) ob[c] = lf__cpu_bf16_bits(weight[c] * (x[c] * r));
    } else {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = weight[c] * (x[c] * r);
    }
    *rstd = r;
}

void lf__cpu_rmsnorm_forward(float *restrict out, float *restrict rstd, const float *restrict inp,
                             const float *restrict weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) rms_row(out + (size_t)n * C, NULL, rstd + n, inp + (size_t)n * C, weight, C, eps);
}

/* The same RMSNorm, its output rounded to bf16 (cpu-bf16's bf16 activation
 * storage): the fp32 op's statistics and values by the same expressions,
 * rounded as convert rounds, so it is convert of the fp32 op's output bit
 * for bit. */
void lf__cpu_rmsnorm_forward_bf16(uint16_t *restrict out, float *restrict rstd, const float *restrict inp,
                                  const float *restrict weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) rms_row(NULL, out + (size_t)n * C, rstd + n, inp + (size_t)n * C, weight, C, eps);
}

/* res = a + b, then the RMSNorm of res, a row at a time (res may equal a
 * or b); out fp32, or bf16 bits with out_bf16. */
void lf__cpu_residual_rmsnorm_forward(float *res, void *out, int out_bf16, float *restrict rstd, const float *a,
                                      const float *b, const float *restrict weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * C;
        lf__cpu_residual_row(res + o, a + o, b + o, C);
        rms_row(out_bf16 ? NULL : (float *)out + o, out_bf16 ? (uint16_t *)out + o : NULL, rstd + n, res + o, weight, C,
                eps);
    }
}

void lf__cpu_rmsnorm_backward(float *restrict dinp, float *restrict dweight, const float *restrict dout,
                              const float *restrict inp, const float *restrict weight, const float *restrict rstd,
                              int N, int C) {
#pragma omp parallel if ((long)N * C >= LF_CPU_PAR_MIN)
    {
        /* dinp: row-parallel; the channel pass below does not read it */
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float *restrict x = inp + (size_t)n * C;
            const float *restrict d = dout + (size_t)n * C;
            float *restrict di = dinp + (size_t)n * C;
            const float r = rstd[n];
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) dot += (weight[c] * d[c]) * (x[c] * r);
            dot /= (float)C;
#pragma omp simd
            for (int c = 0; c < C; c++) di[c] += (weight[c] * d[c] - (x[c] * r) * dot) * r;
        }

        /* dweight: channel-parallel, rows summed in order (none for a frozen
         * weight: NULL) */
        int c0 = 0, c1 = 0;
        if (dweight) lf__cpu_channel_slice(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int s0 = c0; s0 < c1; s0 += RMS_ACC_W) {
            const int w = c1 - s0 < RMS_ACC_W ? c1 - s0 : RMS_ACC_W;
            double acc[RMS_ACC_W] = {0};
            for (int n = 0; n < N; n++) {
                const float *restrict x = inp + (size_t)n * C + s0;
                const float *restrict d = dout + (size_t)n * C + s0;
                const float r = rstd[n];
#pragma omp simd
                for (int c = 0; c < w; c++) acc[c] += (double)(d[c] * (x[c] * r));
            }
            for (int c = 0; c < w; c++) dweight[s0 + c] += (float)acc[c];
        }
    }
}

/* ------------------------------------------------------------- per-head RMSNorm of q and k (Qwen3) */

/* Heads 0..NH-1 of each row with wq, NH..NH+NKV-1 with wk, each as one
 * rms_row over its HS channels; v's (N, NKV*HS) part copied. */
void lf__cpu_qknorm_forward(float *restrict out, float *restrict rstd, const float *restrict inp,
                            const float *restrict wq, const float *restrict wk, int N, int NH, int NKV, int HS,
                            float eps) {
    const int H = NH + NKV, W = (NH + 2 * NKV) * HS;
#pragma omp parallel for schedule(static) if ((long)N * W >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * W;
        for (int h = 0; h < H; h++)
            rms_row(out + o + (size_t)h * HS, NULL, rstd + (size_t)n * H + h, inp + o + (size_t)h * HS,
                    h < NH ? wq : wk, HS, eps);
        memcpy(out + o + (size_t)H * HS, inp + o + (size_t)H * HS, sizeof(float) * (size_t)NKV * HS);
    }
}

/* dwq and dwk first (2*HS channels, each summed over rows then heads in
 * order, in double: deterministic for any thread count), then, once every
 * thread has read d(out), each head's d(inp) in place. */
void lf__cpu_qknorm_backward(float *dqkv, float *restrict dwq, float *restrict dwk, const float *restrict inp,
                             const float *restrict wq, const float *restrict wk, const float *restrict rstd, int N,
                             int NH, int NKV, int HS) {
    const int H = NH + NKV, W = (NH + 2 * NKV) * HS;
#pragma omp parallel if ((long)N * W >= LF_CPU_PAR_MIN)
    {
        int c0, c1;
        lf__cpu_channel_slice(2 * HS, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int cc = c0; cc < c1; cc++) {
            const int isk = cc >= HS, c = isk ? cc - HS : cc;
            const int h0 = isk ? NH : 0, h1 = isk ? H : NH;
            double acc = 0.0;
            for (int n = 0; n < N; n++)
                for (int h = h0; h < h1; h++) {
                    const size_t at = (size_t)n * W + (size_t)h * HS + (size_t)c;
                    acc += (double)(dqkv[at] * (inp[at] * rstd[(size_t)n * H + h]));
                }
            (isk ? dwk : dwq)[c] += (float)acc;
        }
#pragma omp barrier
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++)
            for (int h = 0; h < H; h++) {
                const size_t at = (size_t)n * W + (size_t)h * HS;
                const float *restrict x = inp + at;
                float *d = dqkv + at;
                const float *restrict w = h < NH ? wq : wk;
                const float r = rstd[(size_t)n * H + h];
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int c = 0; c < HS; c++) dot += (w[c] * d[c]) * (x[c] * r);
                dot /= (float)HS;
                for (int c = 0; c < HS; c++) d[c] = (w[c] * d[c] - (x[c] * r) * dot) * r;
            }
    }
}
