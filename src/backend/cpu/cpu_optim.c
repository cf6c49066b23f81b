/*
 * Optimizer-side ops of the CPU backend: the AdamW update and the sum of
 * squares behind the global gradient norm.
 *
 * AdamW follows torch.optim.AdamW (single-tensor path, torch >= 2.0) in its
 * order of operations, with g = grad * grad_scale (clipping folded in):
 *   p  = p * (1 - lr*wd)                         decoupled weight decay first
 *   m  = m.lerp(g, 1-b1)                         = b1*m + (1-b1)*g
 *   v  = v*b2 + (1-b2)*g*g
 *   p  = p - (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 * Bias corrections are formed in double as torch does with Python floats.
 * torch's lerp(a, b, w) is a + w*(b-a) for |w| < 0.5, else b - (b-a)*(1-w).
 *
 * sum_squares accumulates in double over SS_CHUNKS fixed chunks whose
 * partials are added in chunk order, so the result is bit-identical for any
 * thread count.
 *
 * lf__cpu_adamw_update_shadow also writes the new parameters rounded to
 * bf16 (cpu-bf16's weight copies, cpu_bf16.c), in the same pass.
 *
 * Reference: Loshchilov & Hutter, "Decoupled Weight Decay Regularization"
 * (ICLR 2019); torch/optim/adamw.py _single_tensor_adamw.
 */
#include <math.h>
#include "cpu_internal.h"

/* The constants of one update (t >= 1; the bias corrections divide by
 * 1 - beta^t). */
typedef struct adamw_k {
    float decay, step_size, bc2_sqrt, w1, w1c, b2, omb2, eps, grad_scale;
    int lerp_low;
} adamw_k;

static adamw_k adamw_consts(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                            int t) {
    if (t < 1) t = 1;
    const double bc1 = 1.0 - pow((double)beta1, (double)t);
    const double bc2 = 1.0 - pow((double)beta2, (double)t);
    adamw_k k = {.decay = (float)(1.0 - (double)lr * (double)weight_decay),
                 .step_size = (float)((double)lr / bc1),
                 .bc2_sqrt = (float)sqrt(bc2),
                 .w1 = (float)(1.0 - (double)beta1), /* lerp weight */
                 .b2 = beta2,
                 .omb2 = (float)(1.0 - (double)beta2),
                 .eps = eps,
                 .grad_scale = grad_scale};
    k.w1c = 1.0f - k.w1;
    k.lerp_low = fabsf(k.w1) < 0.5f;
    return k;
}

/* One element: updates *m and *v, returns the new parameter. */
/* k by value: the constants are locals of the loop, never reloaded through a
 * pointer that the stores to m and v might alias, so the loop vectorizes. */
static inline float adamw_elem(const adamw_k k, float param, float grad, float *m, float *v) {
    const float g = grad * k.grad_scale;
    const float p = param * k.decay;
    const float mi = k.lerp_low ? *m + k.w1 * (g - *m) : g - (g - *m) * k.w1c;
    const float vi = *v * k.b2 + k.omb2 * g * g;
    const float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
    *m = mi;
    *v = vi;
    return p + (-k.step_size * mi) / denom;
}

void lf__cpu_adamw_update(float *restrict params, const float *restrict grads, float *restrict m, float *restrict v,
                          size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                          int t) {
    const adamw_k k = adamw_consts(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
#pragma omp parallel if (n >= (size_t)LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) params[i] = adamw_elem(k, params[i], grads[i], &m[i], &v[i]);
}

void lf__cpu_adamw_update_shadow(float *restrict params, const float *restrict grads, float *restrict m,
                                 float *restrict v, size_t n, float lr, float beta1, float beta2, float eps,
                                 float weight_decay, float grad_scale, int t, uint16_t *restrict shadow_bf16,
                                 float *restrict shadow_f32r) {
    const adamw_k k = adamw_consts(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
#pragma omp parallel if (n >= (size_t)LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float p = adamw_elem(k, params[i], grads[i], &m[i], &v[i]);
        const uint16_t h = lf__cpu_bf16_bits(p);
        params[i] = p;
        if (shadow_bf16) shadow_bf16[i] = h;
        if (shadow_f32r) shadow_f32r[i] = lf__cpu_bf16_as_f32(h);
    }
}

#define SS_CHUNKS 256

double lf__cpu_sum_squares(const float *restrict x, size_t n) {
    double partial[SS_CHUNKS];
    /* chunk length a multiple of 16 floats: chunks start on cache lines */
    const size_t chunk = ((n + SS_CHUNKS - 1) / SS_CHUNKS + 15) & ~(size_t)15;
#pragma omp parallel for schedule(static) if (n >= (size_t)LF_CPU_PAR_MIN)
    for (int k = 0; k < SS_CHUNKS; k++) {
        const size_t lo = (size_t)k * chunk < n ? (size_t)k * chunk : n;
        const size_t hi = lo + chunk < n ? lo + chunk : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * (double)x[i];
        partial[k] = s;
    }
    double total = 0.0;
    for (int k = 0; k < SS_CHUNKS; k++) total += partial[k];
    return total;
}
