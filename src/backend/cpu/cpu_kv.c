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
 *    times V, keys in increasing position; its loops depend only on the
 *    row's own length), a single out-of-line copy of the code: a row at absolute position p gives the same bits whether it
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
/* The GCC vector types below are passed and returned by value only between
 * always-inline static functions, so the ABI note -Wpsabi gives for them
 * (built without -march=native, e.g. LF_NATIVE=OFF) concerns no call that
 * exists. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#include "cpu_internal.h"
#include "cpu_math.h"

void lf__cpu_kv_append(float *kcache, float *vcache, const float *qkv, int B, int Tn, int NH, int NKV, int HS, int pos0,
                       int Tmax) {
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

/* Eight floats as one GCC vector (one AVX register, two SSE ones, or half
 * an AVX-512 one: no ISA dispatch), loaded at float alignment. */
typedef float kv_v8 __attribute__((vector_size(32)));
typedef float kv_v8u __attribute__((vector_size(32), aligned(4), may_alias));

static inline __attribute__((always_inline)) kv_v8 v8_load(const float *p) { return *(const kv_v8u *)p; }
static inline __attribute__((always_inline)) void v8_store(float *p, kv_v8 v) { *(kv_v8u *)p = v; }

/* The lanes summed in a fixed tree (the same bits every run). */
static inline __attribute__((always_inline)) float v8_hsum(kv_v8 a) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

/* q . k over HS channels: lanes of 8 over the first H8 = HS & ~7, then the
 * rest in order. Every key goes through this same expression (inlined into
 * both the 4-key and the 1-key loop below), so a score does not depend on
 * which loop computed it. */
#define KV_DOT_TAIL(d, q, k, H8, HS) \
    do { \
        for (int i_ = (H8); i_ < (HS); i_++) (d) += (q)[i_] * (k)[i_]; \
    } while (0)

/* One query row q (HS) against keys/values 0..n-1 (rows of K, V with
 * stride HS): s (n) = softmax(scale * q . K_j), o (HS) = sum_j s_j V_j.
 * Keys go four at a time: four independent dot products hide the FMA
 * latency a single running sum waits on, and the axpy touches o once per
 * four value rows. noinline: one compiled copy for every row (see the
 * invariants at the top). */
__attribute__((noinline)) static void attend_row(float *restrict o, float *restrict s, const float *restrict q,
                                                 const float *restrict K, const float *restrict V, int n, int HS,
                                                 float scale) {
    const int H8 = HS & ~7;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *k0 = K + (size_t)j * HS, *k1 = k0 + HS, *k2 = k1 + HS, *k3 = k2 + HS;
        kv_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int i = 0; i < H8; i += 8) {
            const kv_v8 x = v8_load(q + i);
            a0 += x * v8_load(k0 + i);
            a1 += x * v8_load(k1 + i);
            a2 += x * v8_load(k2 + i);
            a3 += x * v8_load(k3 + i);
        }
        float d0 = v8_hsum(a0), d1 = v8_hsum(a1), d2 = v8_hsum(a2), d3 = v8_hsum(a3);
        KV_DOT_TAIL(d0, q, k0, H8, HS);
        KV_DOT_TAIL(d1, q, k1, H8, HS);
        KV_DOT_TAIL(d2, q, k2, H8, HS);
        KV_DOT_TAIL(d3, q, k3, H8, HS);
        s[j] = d0 * scale, s[j + 1] = d1 * scale, s[j + 2] = d2 * scale, s[j + 3] = d3 * scale;
    }
    for (; j < n; j++) {
        const float *k0 = K + (size_t)j * HS;
        kv_v8 a0 = {0};
        for (int i = 0; i < H8; i += 8) a0 += v8_load(q + i) * v8_load(k0 + i);
        float d0 = v8_hsum(a0);
        KV_DOT_TAIL(d0, q, k0, H8, HS);
        s[j] = d0 * scale;
    }

    /* max-subtracted softmax in fp32, exp as attention_forward's */
    float mx = -INFINITY;
    for (int t = 0; t < n; t++) mx = s[t] > mx ? s[t] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int t = 0; t < n; t++) {
        const float e = lf__cpu_expf_f32(s[t] - mx);
        s[t] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int t = 0; t < n; t++) s[t] *= inv;

    /* o = sum_j s_j V_j, keys in increasing position */
    for (int i = 0; i < HS; i++) o[i] = 0.0f;
    j = 0;
    for (; j + 4 <= n; j += 4) {
        const float p0 = s[j], p1 = s[j + 1], p2 = s[j + 2], p3 = s[j + 3];
        const float *v0 = V + (size_t)j * HS, *v1 = v0 + HS, *v2 = v1 + HS, *v3 = v2 + HS;
        for (int i = 0; i < H8; i += 8) {
            kv_v8 x = v8_load(o + i);
            x += p0 * v8_load(v0 + i);
            x += p1 * v8_load(v1 + i);
            x += p2 * v8_load(v2 + i);
            x += p3 * v8_load(v3 + i);
            v8_store(o + i, x);
        }
        for (int i = H8; i < HS; i++) {
            float x = o[i];
            x += p0 * v0[i];
            x += p1 * v1[i];
            x += p2 * v2[i];
            x += p3 * v3[i];
            o[i] = x;
        }
    }
    for (; j < n; j++) {
        const float p0 = s[j];
        const float *v0 = V + (size_t)j * HS;
        for (int i = 0; i < H8; i += 8) v8_store(o + i, v8_load(o + i) + p0 * v8_load(v0 + i));
        for (int i = H8; i < HS; i++) o[i] += p0 * v0[i];
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
