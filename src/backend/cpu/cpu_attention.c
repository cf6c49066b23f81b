/*
 * Causal multi-head self-attention of the CPU backend.
 *
 * Layout: qkv (B,T,3C) rows hold [q | k | v]; head h uses channels
 * h*HS..h*HS+HS-1 of each part, so a head's q, k and v are (T,HS) strided
 * views with leading dimension 3C, and its output is a (T,HS) view of out
 * (B,T,C) with leading dimension C. att (B,NH,T,T) holds the softmax
 * probabilities before dropout, zero above the diagonal.
 *
 * Invariants:
 *  - One thread owns one (b,h) pair at a time (OpenMP over B*NH); the fp32
 *    GEMM (lf__cpu_sgemm) called inside that parallel region runs on the
 *    calling thread. Each
 *    pair writes disjoint parts of out/att/dqkv/scratch, so no races, and
 *    the arithmetic per pair does not depend on the thread count.
 *  - Rows are processed in blocks of ATT_RB; block [r0,r1) only needs key
 *    columns 0..r1-1, which skips about half of the T x T work.
 *  - Softmax is max-subtracted in fp32; exp is lf__cpu_expf_f32
 *    (cpu_math.h: float arithmetic, <= 2 ulp, as PyTorch's vectorized
 *    softmax; the double-precision lf__cpu_expf_nonpos cost a quarter of
 *    the forward at T = 64). Row loops run over whole vectors with the
 *    columns above the diagonal masked (att_width).
 *  - Attention dropout: element (b,h,t,j) has flat index ((b*NH+h)*T+t)*T+j
 *    in the (B,NH,T,T) tensor; the mask is recomputed in backward.
 *  - backward overwrites dqkv (each (b,h) zeroes its dk, dv slices, and dq
 *    rows are written once per row block with beta = 0); scratch (B,NH,T,T) holds, per row
 *    block, first the dropped probabilities (for dv) and then datt/dpreatt.
 *
 * Reference: Vaswani et al. 2017 (scaled dot-product attention); nanoGPT
 * CausalSelfAttention; llm.c attention_backward for the softmax gradient
 * dpre = att * (datt - sum_j att*datt).
 */
#include <math.h>
#include <string.h>
#include <omp.h>
#include "cpu_internal.h"
#include "cpu_math.h"

#define ATT_RB 64      /* rows per block (64 measured best of 32..256 at T=256/1024) */
#define ATT_TILE 16384 /* floats in the forward's dropout tile (64 KiB of stack) */
#define ATT_VW 16      /* softmax row loops run over whole vectors of this many floats */

/* Columns a softmax row t of a block ending at r1 works on: t+1 rounded up
 * to ATT_VW, at most r1 (the columns past t are masked). */
static inline int att_width(int t, int r1) {
    const int n = (t + ATT_VW) & ~(ATT_VW - 1);
    return n < r1 ? n : r1;
}

/* out_blk (rows,HS; ld C) = dropout(A) (rows x r1; ld T) @ v (r1,HS; ld 3C).
 * The dropped probabilities go through a stack tile, ATT_TILE/rows columns
 * at a time, because att must keep the undropped values. */
static void dropped_av(float *out_blk, const float *A, const float *v, int r0, int rows, int r1,
                       int T, int C, int HS, uint64_t base, lf_dropout drop, float dscale) {
    float tile[ATT_TILE];
    const int jc = ATT_TILE / rows;
    const long C3 = 3L * C;
    for (int j0 = 0; j0 < r1; j0 += jc) {
        const int w = r1 - j0 < jc ? r1 - j0 : jc;
        for (int i = 0; i < rows; i++) {
            const int t = r0 + i;
            const float *a = A + (size_t)i * T;
            float *o = tile + (size_t)i * w;
            const uint64_t row = base + (uint64_t)t * T;
#pragma omp simd
            for (int j = j0; j < j0 + w; j++)
                o[j - j0] = ((j <= t) & lf__cpu_dropout_keep(drop, row + (uint64_t)j)) ? a[j] * dscale
                                                                                      : 0.0f;
        }
        lf__cpu_sgemm(0, 0, rows, HS, w, 1.0f, tile, w, v + (size_t)j0 * C3, (int)C3, j0 ? 1.0f : 0.0f, out_blk, C);
    }
}

void lf__cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH, lf_dropout drop) {
    const int HS = C / NH;
    const long C3 = 3L * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = drop.p > 0.0f;
    const float dscale = use_drop ? 1.0f / (1.0f - drop.p) : 1.0f;

#pragma omp parallel for collapse(2) schedule(static) if ((long)B * NH * T * T * HS >= LF_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *att_bh = att + ((size_t)b * NH + h) * T * T;
            float *out_bh = out + (size_t)b * T * C + (size_t)h * HS;
            const uint64_t base = ((uint64_t)b * NH + h) * T * T;

            for (int r0 = 0; r0 < T; r0 += ATT_RB) {
                const int r1 = r0 + ATT_RB < T ? r0 + ATT_RB : T, rows = r1 - r0;
                float *A = att_bh + (size_t)r0 * T;
                /* pre-softmax scores for rows r0..r1-1, key columns 0..r1-1 */
                lf__cpu_sgemm(0, 1, rows, r1, HS, scale, q + (size_t)r0 * C3, (int)C3, k, (int)C3, 0.0f, A, T);
                for (int t = r0; t < r1; t++) {
                    float *row = att_bh + (size_t)t * T;
                    /* whole vectors: columns 0..n-1, n = t+1 rounded up to ATT_VW (at most r1), the
                     * ones above the diagonal masked; short rows of variable length left the loops
                     * mostly in their scalar remainders (T = 64: 2x slower) */
                    const int n = att_width(t, r1);
                    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
                    for (int j = 0; j < n; j++) {
                        const float x = j <= t ? row[j] : -INFINITY;
                        mx = x > mx ? x : mx;
                    }
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (int j = 0; j < n; j++) {
                        const float e = j <= t ? lf__cpu_expf_f32(row[j] - mx) : 0.0f;
                        row[j] = e;
                        sum += e;
                    }
                    const float inv = 1.0f / sum;
#pragma omp simd
                    for (int j = 0; j < n; j++) row[j] *= inv;
                    if (n < T) memset(row + n, 0, sizeof(float) * (size_t)(T - n));
                }
                if (!use_drop)
                    lf__cpu_sgemm(0, 0, rows, HS, r1, 1.0f, A, T, v, (int)C3, 0.0f, out_bh + (size_t)r0 * C, C);
                else
                    dropped_av(out_bh + (size_t)r0 * C, A, v, r0, rows, r1, T, C, HS, base, drop,
                               dscale);
            }
        }
    }
}

void lf__cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH, lf_dropout drop) {
    const int HS = C / NH;
    const long C3 = 3L * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = drop.p > 0.0f;
    const float dscale = use_drop ? 1.0f / (1.0f - drop.p) : 1.0f;

#pragma omp parallel for collapse(2) schedule(static) if ((long)B * NH * T * T * HS >= LF_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * HS;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *att_bh = att + ((size_t)b * NH + h) * T * T;
            float *S_bh = scratch + ((size_t)b * NH + h) * T * T;
            const float *dout_bh = dout + (size_t)b * T * C + (size_t)h * HS;
            const uint64_t base = ((uint64_t)b * NH + h) * T * T;
            for (int t = 0; t < T; t++) {
                memset(dk + (size_t)t * C3, 0, sizeof(float) * (size_t)HS);
                memset(dv + (size_t)t * C3, 0, sizeof(float) * (size_t)HS);
            }

            for (int r0 = 0; r0 < T; r0 += ATT_RB) {
                const int r1 = r0 + ATT_RB < T ? r0 + ATT_RB : T, rows = r1 - r0;
                const float *A = att_bh + (size_t)r0 * T;
                float *S = S_bh + (size_t)r0 * T;
                const float *dO = dout_bh + (size_t)r0 * C;

                /* dv[0:r1] += dropout(A)^T @ dout[r0:r1] */
                if (!use_drop) {
                    lf__cpu_sgemm(1, 0, r1, HS, rows, 1.0f, A, T, dO, C, 1.0f, dv, (int)C3);
                } else {
                    for (int t = r0; t < r1; t++) {
                        const float *a = att_bh + (size_t)t * T;
                        float *s = S_bh + (size_t)t * T;
                        const uint64_t row = base + (uint64_t)t * T;
#pragma omp simd
                        for (int j = 0; j < r1; j++)
                            s[j] = ((j <= t) & lf__cpu_dropout_keep(drop, row + (uint64_t)j))
                                       ? a[j] * dscale : 0.0f;
                    }
                    lf__cpu_sgemm(1, 0, r1, HS, rows, 1.0f, S, T, dO, C, 1.0f, dv, (int)C3);
                }

                /* datt (rows x r1) = dout[r0:r1] @ v[0:r1]^T */
                lf__cpu_sgemm(0, 1, rows, r1, HS, 1.0f, dO, C, v, (int)C3, 0.0f, S, T);

                /* through dropout, then softmax backward, in place: S = dpreatt */
                for (int t = r0; t < r1; t++) {
                    const float *a = att_bh + (size_t)t * T;
                    float *s = S_bh + (size_t)t * T;
                    if (use_drop) {
                        const uint64_t row = base + (uint64_t)t * T;
#pragma omp simd
                        for (int j = 0; j <= t; j++)
                            s[j] = lf__cpu_dropout_keep(drop, row + (uint64_t)j) ? s[j] * dscale : 0.0f;
                    }
                    /* whole vectors as in forward; a[j] = 0 above the diagonal */
                    const int n = att_width(t, r1);
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int j = 0; j < n; j++) dot += j <= t ? a[j] * s[j] : 0.0f;
#pragma omp simd
                    for (int j = 0; j < n; j++) s[j] = j <= t ? a[j] * (s[j] - dot) : 0.0f;
                    if (n < r1) memset(s + n, 0, sizeof(float) * (size_t)(r1 - n));
                }

                /* dq[r0:r1] = scale * dpre @ k[0:r1];  dk[0:r1] += scale * dpre^T @ q[r0:r1] */
                lf__cpu_sgemm(0, 0, rows, HS, r1, scale, S, T, k, (int)C3, 0.0f, dq + (size_t)r0 * C3, (int)C3);
                lf__cpu_sgemm(1, 0, r1, HS, rows, scale, S, T, q + (size_t)r0 * C3, (int)C3, 1.0f, dk, (int)C3);
            }
        }
    }
}
