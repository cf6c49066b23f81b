/*
 * LoRA's low-rank path on the CPU (backend_impl.h lora_forward /
 * lora_backward): four or five small GEMMs through lf__cpu_sgemm, fp32.
 *
 * Invariants:
 *  - out/dout address n columns of a wider (N, ldo) output: the adapted
 *    rows of a fused weight (Llama's q|k|v, gate|up) are a column range of
 *    the matmul's output.
 *  - dA, dB and dinp accumulate (+=); u and du are overwritten scratch.
 *  - The scale multiplies u B^T (forward) and dout (backward), which is
 *    PEFT's lora_B(lora_A(x)) * scaling up to the rounding of one product.
 */
#include "cpu_internal.h"

void lf__cpu_lora_forward(float *out, int ldo, float *u, const float *inp, const float *A, const float *B, int N, int C,
                          int n, int r, float scale) {
    if (N <= 0 || n <= 0 || r <= 0 || C <= 0) return;
    lf__cpu_sgemm(0, 1, N, r, C, 1.0f, inp, C, A, C, 0.0f, u, r);    /* u (N,r) = inp A^T */
    lf__cpu_sgemm(0, 1, N, n, r, scale, u, r, B, r, 1.0f, out, ldo); /* out += scale u B^T */
}

void lf__cpu_lora_backward(float *dinp, float *dA, float *dB, float *u, float *du, const float *dout, int ldo,
                           const float *inp, const float *A, const float *B, int N, int C, int n, int r, float scale) {
    if (N <= 0 || n <= 0 || r <= 0 || C <= 0) return;
    lf__cpu_sgemm(0, 1, N, r, C, 1.0f, inp, C, A, C, 0.0f, u, r);             /* u (N,r) = inp A^T */
    lf__cpu_sgemm(1, 0, n, r, N, scale, dout, ldo, u, r, 1.0f, dB, r);        /* dB (n,r) += scale dout^T u */
    lf__cpu_sgemm(0, 0, N, r, n, scale, dout, ldo, B, r, 0.0f, du, r);        /* du (N,r) = scale dout B */
    lf__cpu_sgemm(1, 0, r, C, N, 1.0f, du, r, inp, C, 1.0f, dA, C);           /* dA (r,C) += du^T inp */
    if (dinp) lf__cpu_sgemm(0, 0, N, C, r, 1.0f, du, r, A, C, 1.0f, dinp, C); /* dinp += du A */
}
