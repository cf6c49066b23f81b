/*
 * Matmul + bias of the CPU backend, through the backend's fp32 GEMM
 * (lf__cpu_sgemm, cpu_gemm.c: oneDNN by default, OpenBLAS as the fallback).
 *
 * Layouts (backend_impl.h): LF_W_IN_OUT weight (C,OC), out = inp @ W (the
 * Hugging Face Conv1D of GPT-2); LF_W_OUT_IN weight (OC,C), out = inp @ W^T
 * (nn.Linear, the tied lm_head over wte).
 *
 * Invariants:
 *  - forward overwrites out: the product (beta = 0), then the bias added
 *    row by row while the rows are still in cache (writing the bias first
 *    and multiplying with beta = 1 cost a memcpy per row and a read of out
 *    inside the GEMM: 4.7% of a shakespeare_char step).
 *  - backward overwrites dinp = dout @ W^T (beta = 0; skipped when dinp is
 *    NULL) and accumulates the parameter gradients: dW += inp^T @ dout
 *    (IN_OUT) or dout^T @ inp (OUT_IN) with beta = 1, dbias += column sums.
 *  - dbias is channel-parallel with rows summed in order in double, so it is
 *    bit-identical for any thread count.
 *
 * Reference: llm.c matmul_forward/backward; BLAS sgemm semantics.
 */
#include <string.h>
#include <omp.h>
#include "cpu_internal.h"

#define BIAS_ACC_W 64

void lf__cpu_matmul_forward(float *restrict out, const float *restrict inp, const float *restrict weight,
                            const float *restrict bias, int N, int C, int OC, lf_weight_layout layout) {
    if (lf__cpu_gemv(out, inp, weight, bias, N, C, OC, layout)) return; /* N <= LF_CPU_GEMV_MAX_N: cpu_gemv.c */
    if (N <= 0 || OC <= 0) return;
    if (layout == LF_W_IN_OUT) lf__cpu_sgemm(0, 0, N, OC, C, 1.0f, inp, C, weight, OC, 0.0f, out, OC);
    else lf__cpu_sgemm(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (!bias) return;
#pragma omp parallel for schedule(static) if ((long)N * OC >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *restrict o = out + (size_t)n * OC;
#pragma omp simd
        for (int c = 0; c < OC; c++) o[c] += bias[c];
    }
}

/* dbias[o] += sum_n dout[n,o]: each thread sums its own channels over all rows
 * (also the bf16 matmul's dbias, from its fp32 dout). */
void lf__cpu_bias_backward(float *restrict dbias, const float *restrict dout, int N, int OC) {
#pragma omp parallel if ((long)N * OC >= LF_CPU_PAR_MIN)
    {
        int c0, c1;
        lf__cpu_channel_slice(OC, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int s0 = c0; s0 < c1; s0 += BIAS_ACC_W) {
            const int w = c1 - s0 < BIAS_ACC_W ? c1 - s0 : BIAS_ACC_W;
            double acc[BIAS_ACC_W] = {0};
            for (int n = 0; n < N; n++) {
                const float *restrict d = dout + (size_t)n * OC + s0;
#pragma omp simd
                for (int c = 0; c < w; c++) acc[c] += (double)d[c];
            }
            for (int c = 0; c < w; c++) dbias[s0 + c] += (float)acc[c];
        }
    }
}

void lf__cpu_matmul_backward(float *restrict dinp, float *restrict dweight, float *restrict dbias,
                             const float *restrict dout, const float *restrict inp, const float *restrict weight, int N,
                             int C, int OC, lf_weight_layout layout) {
    if (N <= 0 || OC <= 0 || C <= 0) return;
    if (layout == LF_W_IN_OUT) {
        /* W (C,OC): dinp (N,C) = dout (N,OC) @ W^T; dW (C,OC) += inp^T @ dout */
        if (dinp) lf__cpu_sgemm(0, 1, N, C, OC, 1.0f, dout, OC, weight, OC, 0.0f, dinp, C);
        if (dweight) lf__cpu_sgemm(1, 0, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, OC);
    } else {
        /* W (OC,C): dinp (N,C) = dout @ W; dW (OC,C) += dout^T @ inp */
        if (dinp) lf__cpu_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
        if (dweight) lf__cpu_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    }
    if (dbias) lf__cpu_bias_backward(dbias, dout, N, OC);
}
