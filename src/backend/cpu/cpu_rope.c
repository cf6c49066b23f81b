/*
 * Rotary position embedding (RoPE) of the CPU backend, as HF
 * transformers applies it (fp32), for the model families with rotary
 * positions.
 *
 * RoPE (Su et al., "RoFormer", 2021), as HF modeling_llama.py applies it:
 * the rotate_half convention, in which channel i of a head pairs with
 * channel i + HS/2 (not the paper's interleaved pairs 2i, 2i+1; the
 * checkpoints' q/k projection rows are permuted to match). For i < HS/2:
 *   angle = p * inv_freq[i],  p = pos0 + t,  cs = cos(angle) s,  sn = sin(angle) s,
 *   out[i]      = x[i] cs - x[i+HS/2] sn,
 *   out[i+HS/2] = x[i+HS/2] cs + x[i] sn.
 * inv_freq is the caller's table (src/model/rope.c: plain RoPE's
 * 1 / theta^(2i/HS) or a scaled variant), s its cos/sin factor (YaRN's
 * attention factor; 1 otherwise), both as HF computes them.
 * backward applies the transposed rotation (sin negated).
 * Why the float arithmetic: HF computes inv_freq in float32 (rope.c
 * rounds where HF rounds), the angle as the float product p * inv_freq, and cos/sin of
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
 * Invariants:
 *  - rope_backward rewrites the q and k parts of dqkv in place and never
 *    touches v; rope_forward likewise on qkv.
 *  - Deterministic for any thread count: the factors depend only on
 *    (position, i), and each element is written by one thread.
 *  - HS is even (callers validate); pos0 + T <= 2^24, so positions are
 *    exact as floats (HF converts the int64 positions to float too).
 *
 * References: Su et al. 2021, RoFormer (arXiv:2104.09864); HF transformers
 * modeling_llama.py (LlamaRotaryEmbedding, rotate_half,
 * apply_rotary_pos_emb).
 */
#include <math.h>
#include <omp.h>
#include "cpu_internal.h"

/* ------------------------------------------------------------- RoPE */

/* Frequencies whose factors are computed together (a stack tile). */
#define ROPE_CHUNK 64

/* Rotate the q and k heads of every row by the position's angles; `sgn`
 * -1 applies the transpose (backward). The NH q heads and NKV k heads are
 * contiguous at the start of each row, NH + NKV heads of HS channels. */
static void rope_apply(float *x, int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq, float scale,
                       float sgn) {
    const int half = HS / 2, nrot = NH + NKV;
    const long W = (long)(NH + 2 * NKV) * HS;
#pragma omp parallel if ((long)B * T * nrot * HS >= LF_CPU_PAR_MIN)
    {
        float inv[ROPE_CHUNK], cs[ROPE_CHUNK], sn[ROPE_CHUNK];
        for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
            const int m = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
            for (int i = 0; i < m; i++) inv[i] = inv_freq[i0 + i];
                /* chunks touch disjoint channels: no barrier between them */
#pragma omp for schedule(static) nowait
            for (int t = 0; t < T; t++) {
                const float p = (float)(pos0 + t);
                for (int i = 0; i < m; i++) {
                    const float ang = p * inv[i];            /* the float product, as HF */
                    cs[i] = (float)cos((double)ang) * scale; /* HF: emb.cos() * attention_scaling */
                    sn[i] = sgn * ((float)sin((double)ang) * scale);
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

/* Packed rows: each (b,t) at its own position pos[b,t], so the factors are
 * computed per row (no sharing across the batch); the same float
 * operations as rope_apply, so a row with pos[b,t] = pos0 + t gets the same
 * bits. */
void lf__cpu_rope_packed(float *x, const int32_t *pos, int B, int T, int NH, int NKV, int HS, const float *inv_freq,
                         float scale, float sgn) {
    const int half = HS / 2, nrot = NH + NKV;
    const long W = (long)(NH + 2 * NKV) * HS, N = (long)B * T;
#pragma omp parallel if (N * nrot * HS >= LF_CPU_PAR_MIN)
    {
        float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
#pragma omp for schedule(static)
        for (long n = 0; n < N; n++) {
            const int t = (int)(n % T), pt = pos[n];
            const float p = (float)(pt >= 0 && pt <= t ? pt : t); /* clamped: backend_impl.h */
            float *row = x + (size_t)n * W;
            for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
                const int m = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
                for (int i = 0; i < m; i++) {
                    const float ang = p * inv_freq[i0 + i];
                    cs[i] = (float)cos((double)ang) * scale;
                    sn[i] = sgn * ((float)sin((double)ang) * scale);
                }
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

void lf__cpu_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq,
                          float scale) {
    rope_apply(qkv, B, T, NH, NKV, HS, pos0, inv_freq, scale, 1.0f);
}

void lf__cpu_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq,
                           float scale) {
    rope_apply(dqkv, B, T, NH, NKV, HS, pos0, inv_freq, scale, -1.0f);
}
