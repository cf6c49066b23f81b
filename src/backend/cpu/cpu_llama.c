/*
 * The ops a Llama-family model adds to GPT-2's (Hugging Face
 * LlamaForCausalLM semantics, fp32): RMSNorm, rotary position embedding
 * (RoPE) and the SwiGLU activation. Grouped-query attention is
 * cpu_attention.c's attention with NKV < NH; the embedding without a
 * position table is cpu_pointwise.c's encoder with wpe == NULL.
 *
 * RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm):
 *   rstd = 1 / sqrt(mean_c(x^2) + eps),  out = weight * (x * rstd).
 *   With n = x * rstd and dn = weight * dout, the backward is
 *   dinp += rstd * (dn - n * mean_c(dn * n)),  dweight += sum_rows dout * n.
 *
 * RoPE (Su et al., "RoFormer", 2021), as HF modeling_llama.py applies it:
 * the rotate_half convention, in which channel i of a head pairs with
 * channel i + HS/2 (not the paper's interleaved pairs 2i, 2i+1; the
 * checkpoints' q/k projection rows are permuted to match). For i < HS/2:
 *   inv_freq[i] = 1 / theta^(2i/HS),  angle = p * inv_freq[i],  p = pos0 + t,
 *   out[i]      = x[i] cos(angle) - x[i+HS/2] sin(angle),
 *   out[i+HS/2] = x[i+HS/2] cos(angle) + x[i] sin(angle).
 * backward applies the transposed rotation (sin negated).
 * Why the float arithmetic: HF computes inv_freq in float32 (the exponent
 * 2i/HS as a float division, theta ** it as a float pow, then the float
 * reciprocal), the angle as the float product p * inv_freq, and cos/sin of
 * that float angle. Those roundings are part of the model the checkpoints
 * were trained with: at position p the angle's rounding is up to
 * p * 2^-24 radians (inv_freq's) plus half an ulp of the angle (1e-3 rad
 * at p = 16384), so a double-precision angle would give cos/sin that
 * differ from HF's by ~1e-3 at long positions, far outside fp32 noise. We
 * therefore round exactly where HF rounds (powf, 1.0f/x, the float
 * product), and evaluate cos/sin of the float angle in double and round
 * once (correctly rounded but for ties; PyTorch's float cos/sin are within
 * 1 ulp), so the rotation factors agree with HF's to about 1 ulp.
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
 *  - rmsnorm_backward accumulates (+=) into dinp (the residual stream) and
 *    dweight; swiglu_backward overwrites dinp (its input has one
 *    producer, the fused gate/up matmul); rope_backward rewrites the q and
 *    k parts of dqkv in place and never touches v.
 *  - Deterministic for any thread count: RMSNorm's dinp and every
 *    element-wise loop are row-parallel (each element written by one
 *    thread); dweight is channel-parallel with each channel's sum over
 *    rows taken in row order in a double accumulator, as
 *    layernorm_backward does (cpu_norm.c). RoPE's factors depend only on
 *    (position, i).
 *  - Parallel regions follow cpu_internal.h: `omp parallel if` around
 *    worksharing loops whose inner loops are `omp simd`.
 *  - HS is even (callers validate); pos0 + T <= 2^24, so positions are
 *    exact as floats (HF converts the int64 positions to float too).
 *
 * References: HF transformers models/llama/modeling_llama.py
 * (LlamaRMSNorm, LlamaRotaryEmbedding, rotate_half, apply_rotary_pos_emb,
 * LlamaMLP); Su et al. 2021, RoFormer (arXiv:2104.09864); Shazeer 2020
 * (arXiv:2002.05202); Zhang & Sennrich 2019, Root Mean Square Layer
 * Normalization; Ainslie et al. 2023, GQA (arXiv:2305.13245).
 */
#include <math.h>
#include <omp.h>
#include "cpu_internal.h"
#include "cpu_math.h"

/* Channels summed together in one pass over the rows of a channel slice. */
#define RMS_ACC_W 64

/* ------------------------------------------------------------- RMSNorm */

/* One row of the forward, into fp32 (o) or bf16 (ob); not inlined, so the
 * plain forwards and the residual-fused one give the same bits. */
__attribute__((noinline)) static void rms_row(float *restrict o, uint16_t *restrict ob, float *restrict rstd,
                                              const float *restrict x, const float *restrict weight, int C,
                                              float eps) {
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
        rms_row(out_bf16 ? NULL : (float *)out + o, out_bf16 ? (uint16_t *)out + o : NULL, rstd + n, res + o, weight,
                C, eps);
    }
}

void lf__cpu_rmsnorm_backward(float *restrict dinp, float *restrict dweight, const float *restrict dout,
                              const float *restrict inp, const float *restrict weight,
                              const float *restrict rstd, int N, int C) {
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

        /* dweight: channel-parallel, rows summed in order */
        int c0, c1;
        lf__cpu_channel_slice(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
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

/* ------------------------------------------------------------- RoPE */

/* Frequencies whose factors are computed together (a stack tile). */
#define ROPE_CHUNK 64

/* inv_freq[i] as HF computes it in float32: the exponent (2i)/HS as a
 * float division, theta to that power (powf), the float reciprocal. */
static float rope_inv_freq(int i, int HS, float theta) {
    const float e = (float)(2 * i) / (float)HS;
    return 1.0f / powf(theta, e);
}

/* Rotate the q and k heads of every row by the position's angles; `sgn`
 * -1 applies the transpose (backward). The NH q heads and NKV k heads are
 * contiguous at the start of each row, NH + NKV heads of HS channels. */
static void rope_apply(float *x, int B, int T, int NH, int NKV, int HS, int pos0, float theta, float sgn) {
    const int half = HS / 2, nrot = NH + NKV;
    const long W = (long)(NH + 2 * NKV) * HS;
#pragma omp parallel if ((long)B * T * nrot * HS >= LF_CPU_PAR_MIN)
    {
        float inv[ROPE_CHUNK], cs[ROPE_CHUNK], sn[ROPE_CHUNK];
        for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
            const int m = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
            for (int i = 0; i < m; i++) inv[i] = rope_inv_freq(i0 + i, HS, theta);
            /* chunks touch disjoint channels: no barrier between them */
#pragma omp for schedule(static) nowait
            for (int t = 0; t < T; t++) {
                const float p = (float)(pos0 + t);
                for (int i = 0; i < m; i++) {
                    const float ang = p * inv[i]; /* the float product, as HF */
                    cs[i] = (float)cos((double)ang);
                    sn[i] = sgn * (float)sin((double)ang);
                }
                for (int b = 0; b < B; b++) {
                    float *row = x + ((size_t)b * T + t) * W;
                    for (int hd = 0; hd < nrot; hd++) {
                        float *restrict x1 = row + (size_t)hd * HS + i0;
                        float *restrict x2 = x1 + half;
#pragma omp simd
                        for (int i = 0; i < m; i++) {
                            const float a = x1[i], c = x2[i];
                            x1[i] = a * cs[i] - c * sn[i];
                            x2[i] = c * cs[i] + a * sn[i];
                        }
                    }
                }
            }
        }
    }
}

void lf__cpu_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
    rope_apply(qkv, B, T, NH, NKV, HS, pos0, theta, 1.0f);
}

void lf__cpu_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
    rope_apply(dqkv, B, T, NH, NKV, HS, pos0, theta, -1.0f);
}

/* ------------------------------------------------------------- SwiGLU */

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
