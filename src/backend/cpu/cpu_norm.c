/*
 * LayerNorm over the last dimension (PyTorch nn.LayerNorm semantics):
 * biased variance, eps 1e-5, optional bias (bias=false models pass NULL).
 *
 * Invariants:
 *  - forward saves mean and rstd = 1/sqrt(var + eps) per row for backward.
 *  - the bf16 forward (cpu-bf16's bf16 activation storage) computes the same
 *    statistics and values with the same code and rounds each output to
 *    bf16: its output is cast_bf16 of the fp32 forward's, bit for bit.
 *  - backward accumulates (+=) into dinp, dweight and dbias.
 *  - dweight/dbias sums run over rows in order inside a per-channel double
 *    accumulator; threads own disjoint channel slices, so the result is
 *    bit-identical for any thread count. dinp is row-parallel (each row is
 *    written by one thread). On one thread (a replica's ops) the same sums
 *    are made in the rows' pass, the same bits in one pass.
 *
 * Reference: Ba, Kiros, Hinton, "Layer Normalization" (2016); the backward
 * formula is llm.c's layernorm_backward:
 *   dinp += rstd * (w*dout - mean(w*dout) - norm * mean(w*dout*norm)).
 */
#include <math.h>
#include <omp.h>
#include "cpu_internal.h"

#define LN_EPS 1e-5f
/* Channels summed together in one pass over the rows of a channel slice. */
#define LN_ACC_W 64

/* mean and 1/sqrt(var + eps) of one row: two passes (mean, then centred
 * squares), so no cancellation. Shared by both forwards, so their statistics
 * and outputs are the same bits. */
static inline void ln_stats(const float *restrict x, int C, float *mean, float *rstd) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    const float m = s / (float)C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        v += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(v / (float)C + LN_EPS);
}

/* One output element (bias: add b; the no-bias form is a separate
 * expression, as in the fp32 op, so both forwards contract alike). */
static inline float ln_out(float x, float m, float r, float w) { return (x - m) * r * w; }
static inline float ln_out_b(float x, float m, float r, float w, float b) { return (x - m) * r * w + b; }

/* One row of the forward, into fp32 (o) or bf16 (ob). Not inlined, so the
 * plain forwards and the residual-fused one run the same instructions on
 * a row and give the same bits. */
__attribute__((noinline)) static void ln_row(float *restrict o, uint16_t *restrict ob, float *restrict mean,
                                             float *restrict rstd, const float *restrict x,
                                             const float *restrict weight, const float *restrict bias, int C) {
    float m, r;
    ln_stats(x, C, &m, &r);
    if (ob) {
        if (bias) {
#pragma omp simd
            for (int c = 0; c < C; c++) ob[c] = lf__cpu_bf16_bits(ln_out_b(x[c], m, r, weight[c], bias[c]));
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) ob[c] = lf__cpu_bf16_bits(ln_out(x[c], m, r, weight[c]));
        }
    } else if (bias) {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = ln_out_b(x[c], m, r, weight[c], bias[c]);
    } else {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = ln_out(x[c], m, r, weight[c]);
    }
    *mean = m;
    *rstd = r;
}

void lf__cpu_layernorm_forward(float *restrict out, float *restrict mean, float *restrict rstd,
                               const float *restrict inp, const float *restrict weight, const float *restrict bias,
                               int N, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++)
        ln_row(out + (size_t)n * C, NULL, mean + n, rstd + n, inp + (size_t)n * C, weight, bias, C);
}

/* The same layernorm, its output rounded to bf16 (the fp32 op's values,
 * rounded as cast_bf16 rounds). */
void lf__cpu_layernorm_forward_bf16(uint16_t *restrict out, float *restrict mean, float *restrict rstd,
                                    const float *restrict inp, const float *restrict weight, const float *restrict bias,
                                    int N, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++)
        ln_row(NULL, out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, weight, bias, C);
}

/* res = a + b, then the layernorm of res, a row at a time: the row is
 * still in cache when the statistics read it. res may equal a or b (each
 * element is read before it is written). out is fp32, or bf16 bits with
 * out_bf16. */
void lf__cpu_residual_layernorm_forward(float *res, void *out, int out_bf16, float *restrict mean, float *restrict rstd,
                                        const float *a, const float *b, const float *restrict weight,
                                        const float *restrict bias, int N, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * C;
        lf__cpu_residual_row(res + o, a + o, b + o, C);
        ln_row(out_bf16 ? NULL : (float *)out + o, out_bf16 ? (uint16_t *)out + o : NULL, mean + n, rstd + n, res + o,
               weight, bias, C);
    }
}

/* One row of dinp: dinp += rstd * (w*dout - mean(w*dout) - norm * mean(w*dout*norm)).
 * With accw/accb (the single-threaded path), the row's dweight/dbias terms
 * are added to the per-channel double sums in the same pass. */
static inline void ln_bwd_row(float *restrict di, double *restrict accw, double *restrict accb, const float *restrict d,
                              const float *restrict x, const float *restrict weight, float m, float r, int C) {
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * r;
        float dnorm = weight[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= (float)C;
    dnorm_norm_mean /= (float)C;
    if (!accw) {
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * r;
            float dnorm = weight[c] * d[c];
            di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
        }
        return;
    }
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * r;
        float dnorm = weight[c] * d[c];
        di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
        accw[c] += (double)(d[c] * norm);
        accb[c] += (double)d[c];
    }
}

/* Widest row of the single-pass path (its two double accumulators are on
 * the stack). */
#define LN_ONE_PASS_MAXC 1024

void lf__cpu_layernorm_backward(float *restrict dinp, float *restrict dweight, float *restrict dbias,
                                const float *restrict dout, const float *restrict inp, const float *restrict weight,
                                const float *restrict mean, const float *restrict rstd, int N, int C) {
    /* One thread (a replica's ops, a small tensor): dinp, dweight and dbias
     * in one pass over the rows, instead of the channel pass reading inp and
     * dout again. Each channel's sum still runs over the rows in order in a
     * double, with the same float terms, so the bits are those of the
     * threaded path below. */
    if (C <= LN_ONE_PASS_MAXC && (omp_get_max_threads() == 1 || (long)N * C < LF_CPU_PAR_MIN)) {
        double accw[LN_ONE_PASS_MAXC], accb[LN_ONE_PASS_MAXC];
        for (int c = 0; c < C; c++) accw[c] = accb[c] = 0.0;
        for (int n = 0; n < N; n++)
            ln_bwd_row(dinp + (size_t)n * C, accw, accb, dout + (size_t)n * C, inp + (size_t)n * C, weight, mean[n],
                       rstd[n], C);
        if (dweight)
            for (int c = 0; c < C; c++) dweight[c] += (float)accw[c];
        if (dbias)
            for (int c = 0; c < C; c++) dbias[c] += (float)accb[c];
        return;
    }
#pragma omp parallel if ((long)N * C >= LF_CPU_PAR_MIN)
    {
        /* dinp: row-parallel. The channel pass below does not read dinp, so
         * threads move on to it without waiting. */
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++)
            ln_bwd_row(dinp + (size_t)n * C, NULL, NULL, dout + (size_t)n * C, inp + (size_t)n * C, weight, mean[n],
                       rstd[n], C);

        /* dweight/dbias: channel-parallel, rows summed in order (none for a
         * frozen weight: both NULL). */
        int c0, c1;
        if (!dweight) c1 = c0 = 0;
        else lf__cpu_channel_slice(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int s0 = c0; s0 < c1; s0 += LN_ACC_W) {
            const int w = c1 - s0 < LN_ACC_W ? c1 - s0 : LN_ACC_W;
            double accw[LN_ACC_W] = {0}, accb[LN_ACC_W] = {0};
            for (int n = 0; n < N; n++) {
                const float *restrict x = inp + (size_t)n * C + s0;
                const float *restrict d = dout + (size_t)n * C + s0;
                const float m = mean[n], r = rstd[n];
#pragma omp simd
                for (int c = 0; c < w; c++) {
                    accw[c] += (double)(d[c] * ((x[c] - m) * r));
                    accb[c] += (double)d[c];
                }
            }
            for (int c = 0; c < w; c++) dweight[s0 + c] += (float)accw[c];
            if (dbias)
                for (int c = 0; c < w; c++) dbias[s0 + c] += (float)accb[c];
        }
    }
}
