/*
 * The SwiGLU activation of the CPU backend, for the model families with a
 * gated MLP (fp32, with a bf16-output forward).
 *
 * SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"; HF LlamaMLP's
 * act_fn(gate_proj(x)) * up_proj(x) with the two projections fused):
 *   out = silu(g) * u,  silu(g) = g * sigmoid(g) = g / (1 + exp(-g)),
 *   dg = dout * u * s * (1 + g (1 - s)),  du = dout * silu(g),  s = sigmoid(g).
 * exp is lf__cpu_expf_f32 (cpu_math.h: float arithmetic, <= 2 ulp, the
 * argument clamped to +-87, which leaves silu's value for |g| > 87 at
 * g * sigmoid(+-87): exact to fp32 for g > 87, and below 1e-36 in magnitude
 * for g < -87, where the true value is below 1e-36 too).
 *
 * Invariants:
 *  - swiglu_backward overwrites dinp (its input has one producer, the
 *    fused gate/up matmul).
 *  - Row-parallel: every element is written by one thread, so the result
 *    does not depend on the thread count.
 *  - The bf16-output forward evaluates the same expression and rounds it:
 *    convert of the fp32 op's output, bit for bit.
 *
 * References: Shazeer 2020, GLU Variants Improve Transformer
 * (arXiv:2002.05202); HF transformers modeling_llama.py (LlamaMLP).
 */
#include <omp.h>
#include "cpu_internal.h"
#include "cpu_math.h"

void lf__cpu_swiglu_forward(float *restrict out, const float *restrict inp, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict g = inp + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        float *restrict o = out + (size_t)n * F;
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = g[j] / (1.0f + lf__cpu_expf_f32(-g[j])) * u[j];
    }
}

/* The same SwiGLU rounded to bf16 (as rmsnorm_forward_bf16 is to its op). */
void lf__cpu_swiglu_forward_bf16(uint16_t *restrict out, const float *restrict inp, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict g = inp + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        uint16_t *restrict o = out + (size_t)n * F;
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = lf__cpu_bf16_bits(g[j] / (1.0f + lf__cpu_expf_f32(-g[j])) * u[j]);
    }
}

void lf__cpu_swiglu_backward(float *restrict dinp, const float *restrict inp, const float *restrict dout, int N,
                             int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= LF_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict g = inp + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        const float *restrict d = dout + (size_t)n * F;
        float *restrict dg = dinp + (size_t)n * 2 * F;
        float *restrict du = dg + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            const float x = g[j];
            const float s = 1.0f / (1.0f + lf__cpu_expf_f32(-x));
            dg[j] = d[j] * u[j] * (s * (1.0f + x * (1.0f - s)));
            du[j] = d[j] * (x * s);
        }
    }
}
