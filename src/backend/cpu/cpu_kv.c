/*
 * KV-cache ops of the CPU backend (generation): kv_append copies the new
 * rows' keys and values into a layer's cache, attention_cached attends new
 * query rows to every cached position up to their own.
 *
 * Why a separate op and not attention_forward over the whole context: a
 * decoded token has one query row, and attention_forward would recompute
 * the keys, values and T x T scores of every earlier position at every step.
 * With a cache the step costs one pass over pos0+1 cached key and value rows
 * per head.
 *
 * Layout: kcache, vcache (B, NKV, Tmax, HS): the keys of one (batch row, kv
 * head) are a (Tmax, HS) matrix, HS contiguous, so a query row's scores are
 * dot products with contiguous key rows and its output an axpy over
 * contiguous value rows (the loops vectorize over HS). qkv rows are
 * attention's [q: NH*HS | k: NKV*HS | v: NKV*HS]; query head h reads kv head
 * h / (NH/NKV).
 *
 * Invariants:
 *  - Each query row is computed alone by one call of attend_row (scores,
 *    max-subtracted softmax with lf__cpu_expf_f32, then the probabilities
 *    times V, keys in increasing position), a single out-of-line copy of the
 *    code: a row at absolute position p gives the same bits whether it
 *    arrives in a prefill of many rows or alone in a decode step, and for
 *    any thread count (OpenMP over (b, h) pairs only decides who runs which
 *    rows, never how a row is summed).
 *  - Arithmetic as attention_forward's: fp32 products and sums, scores
 *    scaled by 1/sqrt(HS), probabilities normalised before multiplying V.
 *    The summation order differs from attention_forward's GEMM/tiled paths,
 *    so the two agree to float rounding, not bit for bit.
 *  - No fp32 GEMM library call: a library product run outside a parallel
 *    region may split its work by the thread count.
 *  - out (B,Tn,C) is overwritten; the scratch row of (b, h, t) holds that
 *    row's probabilities (pos0 + t + 1 of its pos0 + Tn floats).
 *
 * Reference: Vaswani et al. 2017 (scaled dot-product attention); Pope et al.
 * 2022, "Efficiently Scaling Transformer Inference" (KV cache); Hugging Face
 * modeling_llama.py repeat_kv (the kv head of a query head).
 */
#include <math.h>
#include <string.h>
#include <omp.h>
#include "cpu_internal.h"
#include "cpu_math.h"

void lf__cpu_kv_append(float *kcache, float *vcache, const float *qkv, int B, int Tn, int NH, int NKV, int HS,
                       int pos0, int Tmax) {
    const size_t C = (size_t)NH * HS, KV = (size_t)NKV * HS, W = C + 2 * KV;
    const size_t hs_bytes = sizeof(float) * (size_t)HS;
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * Tn * 2 * (long)KV >= LF_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < Tn; t++) {
            const float *row = qkv + ((size_t)b * Tn + t) * W;
            for (int g = 0; g < NKV; g++) {
                const size_t at = (((size_t)b * NKV + g) * (size_t)Tmax + (size_t)pos0 + (size_t)t) * HS;
                memcpy(kcache + at, row + C + (size_t)g * HS, hs_bytes);
                memcpy(vcache + at, row + C + KV + (size_t)g * HS, hs_bytes);
            }
        }
    }
}

/* One query row q (HS) against keys/values 0..n-1 (rows of K, V with
 * stride HS): s (n) = softmax(scale * q . K_j), o (HS) = sum_j s_j V_j.
 * noinline: one compiled copy for every row (see the invariants). */
__attribute__((noinline)) static void attend_row(float *restrict o, float *restrict s, const float *restrict q,
                                                 const float *restrict K, const float *restrict V, int n, int HS,
                                                 float scale) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        const float *k = K + (size_t)j * HS;
        float d = 0.0f;
#pragma omp simd reduction(+ : d)
        for (int i = 0; i < HS; i++) d += q[i] * k[i];
        d *= scale;
        s[j] = d;
        mx = d > mx ? d : mx;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        const float e = lf__cpu_expf_f32(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < n; j++) s[j] *= inv;
#pragma omp simd
    for (int i = 0; i < HS; i++) o[i] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float p = s[j];
        const float *v = V + (size_t)j * HS;
#pragma omp simd
        for (int i = 0; i < HS; i++) o[i] += p * v[i];
    }
}

void lf__cpu_attention_cached(float *out, float *scratch, const float *qkv, const float *kcache, const float *vcache,
                              int B, int Tn, int C, int NH, int NKV, int pos0, int Tmax) {
    const int HS = C / NH, G = NH / NKV;
    const size_t W = (size_t)C + 2 * (size_t)NKV * HS, L = (size_t)pos0 + (size_t)Tn;
    const float scale = 1.0f / sqrtf((float)HS);
    /* work ~ B*NH * Tn * L * HS multiply-adds, twice */
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * NH * Tn * (long)L * HS >= LF_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t cache = ((size_t)b * NKV + (size_t)(h / G)) * (size_t)Tmax * HS;
            for (int t = 0; t < Tn; t++) {
                const float *q = qkv + ((size_t)b * Tn + t) * W + (size_t)h * HS;
                float *o = out + ((size_t)b * Tn + t) * C + (size_t)h * HS;
                float *s = scratch + (((size_t)b * NH + h) * Tn + t) * L;
                attend_row(o, s, q, kcache + cache, vcache + cache, pos0 + t + 1, HS, scale);
            }
        }
    }
}
