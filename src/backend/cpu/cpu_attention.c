/*
 * Causal self-attention of the CPU backend: multi-head (GPT-2) and
 * grouped-query (Llama; multi-query as the case of one key/value head).
 *
 * Layout: qkv (B,T,W) rows hold [q: NH*HS | k: NKV*HS | v: NKV*HS],
 * W = C + 2*NKV*HS; head h uses channels h*HS..h*HS+HS-1 of q, and query
 * head h reads key/value head g = h / G, G = NH/NKV query heads per group.
 * So a head's q, k and v are (T,HS) strided views with leading dimension W,
 * and its output is a (T,HS) view of out (B,T,C) with leading dimension C.
 * NKV == NH is GPT-2's [q | k | v], each C wide (W = 3C, g = h): the code
 * then performs exactly the operations it did before grouped-query support,
 * so the results are the same bits. att (B,NH,T,T) holds the softmax
 * probabilities before dropout, zero above the diagonal.
 *
 * Invariants:
 *  - Forward: one thread owns one (b,h) pair at a time (OpenMP over
 *    B*NH). Backward: one thread owns one (b,g) pair (OpenMP over B*NKV)
 *    and runs the group's query heads h = g*G .. g*G+G-1 in order: dq of
 *    each head is its own, while dk and dv of the group sum the heads'
 *    contributions in that fixed order, so there are no races and no
 *    dependence on the thread count. The fp32 GEMM (lf__cpu_sgemm) called
 *    inside these parallel regions runs on the calling thread.
 *  - Rows are processed in blocks of ATT_RB; block [r0,r1) only needs key
 *    columns 0..r1-1, which skips about half of the T x T work.
 *  - Softmax is max-subtracted in fp32; exp is lf__cpu_expf_f32
 *    (cpu_math.h: float arithmetic, <= 2 ulp, as PyTorch's vectorized
 *    softmax; the double-precision lf__cpu_expf_nonpos cost a quarter of
 *    the forward at T = 64). Row loops run over whole vectors with the
 *    columns above the diagonal masked (att_width).
 *  - Attention dropout: element (b,h,t,j) has flat index ((b*NH+h)*T+t)*T+j
 *    in the (B,NH,T,T) tensor; the mask is recomputed in backward.
 *  - backward overwrites dqkv: each (b,g) zeroes its dk, dv slices before
 *    its first head (GEMM path) or has its first head store rather than add
 *    (small-T path), and dq rows are written once per row block with
 *    beta = 0; scratch (B,NH,T,T) holds, per row block, first the dropped
 *    probabilities (for dv) and then datt/dpreatt.
 *
 *  - Packed rows (lf__cpu_attention_forward_packed, backend_impl.h): row t
 *    of batch row b sees key columns t - pos[b,t] .. t, the same masked
 *    loops with a lower bound as well as the diagonal (the scores of
 *    earlier examples are computed, then masked: the row blocks' GEMMs stay
 *    whole). The saved probabilities are 0 outside the example, and every
 *    backward term (dv, the softmax gradient, dq, dk, dropout) is a
 *    multiple of them, so backward is the plain one: it needs no pos.
 *
 * Reference: Vaswani et al. 2017 (scaled dot-product attention); nanoGPT
 * CausalSelfAttention; llm.c attention_backward for the softmax gradient
 * dpre = att * (datt - sum_j att*datt); Ainslie et al. 2023, "GQA: Training
 * Generalized Multi-Query Transformer Models from Multi-Head Checkpoints"
 * (grouped-query attention), Shazeer 2019 (multi-query); Hugging Face
 * modeling_llama.py repeat_kv (query head h reads kv head h / G).
 */
#include <math.h>
#include <stdatomic.h>
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

/* First key column query row t sees: 0 (causal), or the start of its
 * example in a packed row, t - pos[t] clamped into [0, t]. */
static inline int att_lo(const int32_t *pos, int t) {
    if (!pos) return 0;
    const int p = pos[t];
    return p >= 0 && p <= t ? t - p : 0;
}

/* out_blk (rows,HS; ld C) = dropout(A) (rows x r1; ld T) @ v (r1,HS; ld W).
 * The dropped probabilities go through a stack tile, ATT_TILE/rows columns
 * at a time, because att must keep the undropped values. */
static void dropped_av(float *out_blk, const float *A, const float *v, int r0, int rows, int r1, int T, int C, long W,
                       int HS, uint64_t base, lf_dropout drop, float dscale) {
    float tile[ATT_TILE];
    const int jc = ATT_TILE / rows;
    for (int j0 = 0; j0 < r1; j0 += jc) {
        const int w = r1 - j0 < jc ? r1 - j0 : jc;
        for (int i = 0; i < rows; i++) {
            const int t = r0 + i;
            const float *a = A + (size_t)i * T;
            float *o = tile + (size_t)i * w;
            const uint64_t row = base + (uint64_t)t * T;
#pragma omp simd
            for (int j = j0; j < j0 + w; j++)
                o[j - j0] = ((j <= t) & lf__cpu_dropout_keep(drop, row + (uint64_t)j)) ? a[j] * dscale : 0.0f;
        }
        lf__cpu_sgemm(0, 0, rows, HS, w, 1.0f, tile, w, v + (size_t)j0 * W, (int)W, j0 ? 1.0f : 0.0f, out_blk, C);
    }
}

/* ------------------------------------------------------------------ small-T path
 *
 * For short sequences (T <= ATT_FAST_TMAX) and head sizes that are whole
 * vectors (HS % 16 == 0, HS <= 128) without attention dropout, each (b,h)
 * pair runs register-tiled loops instead of ~6 small GEMM calls: at
 * shakespeare_char's T = 64, HS = 32 a per-head product is 64x64x32 and the
 * library call's packing and dispatch cost as much as its arithmetic.
 * Measured on one core (B 6, T 64, C 128, NH 4: one replica's layer of
 * shakespeare_char): forward 158 us against the GEMM path's 272, backward
 * 238 against 355; 6% of the whole step. At T = 256, HS = 64 (GPT-2 124M)
 * the library's GEMMs are as fast or faster (forward 2.15 ms against 1.85),
 * hence the limit T <= 128. The softmax runs on the same vectors.
 * The kernels (cpu_attention_fast.h) are written for the vector width of
 * the ISA and compiled twice: 8 lanes in 16 ymm registers (AVX2) and 16
 * lanes in 32 zmm (AVX-512), both in every x86-64 binary, chosen at run
 * time by the backend's ISA level (cpu_isa.c: CPUID capped by
 * LLMFORGE_CPU_ISA). (Written once on 16-lane vectors, as before, AVX2 got
 * each as two ymm registers and its 4x4 tiles spilled.) Same mathematics
 * as the GEMM path: fp32 products accumulated in fp32, in a fixed order per
 * output element (not the same order as the GEMM, so the two paths agree to
 * rounding, not bit for bit); the order is the same at both widths, so
 * AVX2 and AVX-512 give the same bits (cpu_attention_fast.h says how).
 * Two kernels:
 *  - fast_abt: R rows of X (ld ldx) times a transposed tile Yt (HS x TP,
 *    column j = row j of Y) -> scores for 16-wide column blocks;
 *  - fast_ab: R output rows o[r] = alpha * sum_{i in [lo,hi)} P(r,i) * Y[i]
 *    with P(r,i) = P[r*rs + i*is] (so it also multiplies by a transposed P:
 *    dk and dv sum over rows t of the probabilities' columns).
 * Entries of att and of the softmax gradient above the diagonal are exact
 * zeros, so row groups may sum over them.
 */
static int att_fast_ok(int T, int HS, lf_dropout drop) {
    const int TP = (T + 15) & ~15;
    return drop.p == 0.0f && T <= LF_CPU_ATT_FAST_TMAX && HS % 16 == 0 && HS <= 128 &&
           (long)HS * TP <= LF_CPU_ATT_FAST_TILE;
}

/* The kernels: cpu_attention_fast.h, compiled at 16 lanes (AVX-512) and at
 * 8 lanes (AVX2); the ISA level (cpu_isa.c) picks. NULL: none runs here (an
 * x86-64 CPU without AVX2, under a build with LF_ARCH=x86-64), so the GEMM
 * path does the work. Off x86 the 16-lane kernels are plain GCC vector code
 * for any CPU. */
typedef struct att_fast_kernels {
    void (*forward_bh)(float *out_bh, float *att_bh, const float *q, const float *k, const float *v, const int32_t *pos,
                       int T, int C, int W, int HS, float scale);
    void (*backward_bh)(float *dq, float *dk, float *dv, float *S_bh, const float *dout_bh, const float *q,
                        const float *k, const float *v, const float *att_bh, int T, int C, int W, int HS, float scale,
                        int add);
    int lanes;
} att_fast_kernels;

static const att_fast_kernels g_fast_v16 = {lf__cpu_att_fast_forward_bh_v16, lf__cpu_att_fast_backward_bh_v16, 16};
static const att_fast_kernels g_fast_v8 = {lf__cpu_att_fast_forward_bh_v8, lf__cpu_att_fast_backward_bh_v8, 8};
static atomic_int g_fast_force; /* test hook: 0 = the ISA level's kernels, else 8 or 16 lanes */

void lf__cpu_attention_force_lanes(int lanes) { atomic_store(&g_fast_force, lanes); }

static const att_fast_kernels *att_fast_pick(void) {
    const int f = atomic_load_explicit(&g_fast_force, memory_order_relaxed);
#if defined(__x86_64__) || defined(__i386__)
    const lf__cpu_isa_level isa = lf__cpu_isa();
    if (isa >= LF_CPU_ISA_AVX512 && f != 8) return &g_fast_v16;
    if (isa >= LF_CPU_ISA_AVX2) return &g_fast_v8;
    return NULL;
#else
    return f == 8 ? &g_fast_v8 : &g_fast_v16;
#endif
}

int lf__cpu_attention_lanes(int T, int HS) {
    const att_fast_kernels *fk = att_fast_pick();
    const lf_dropout none = {0};
    return fk && att_fast_ok(T, HS, none) ? fk->lanes : 0;
}

/* pos: NULL (causal) or packed rows' positions (B,T): row t's softmax then
 * covers columns lo = t - pos[b,t] .. t (lo clamped into [0,t]); lo = 0 is
 * the causal mask itself, so the plain op's bits are unchanged. */
static void attention_forward(float *out, float *att, const float *qkv, const int32_t *pos, int B, int T, int C, int NH,
                              int NKV, lf_dropout drop) {
    const int HS = C / NH, G = NH / NKV;
    const long W = (long)C + 2L * NKV * HS, KV = (long)NKV * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = drop.p > 0.0f;
    const float dscale = use_drop ? 1.0f / (1.0f - drop.p) : 1.0f;
    const att_fast_kernels *fk = att_fast_ok(T, HS, drop) ? att_fast_pick() : NULL;

#pragma omp parallel for collapse(2) schedule(static) if ((long)B * NH * T * T * HS >= LF_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * W + (size_t)h * HS;
            const float *k = qkv + (size_t)b * T * W + C + (size_t)(h / G) * HS;
            const float *v = k + KV;
            float *att_bh = att + ((size_t)b * NH + h) * T * T;
            float *out_bh = out + (size_t)b * T * C + (size_t)h * HS;
            const uint64_t base = ((uint64_t)b * NH + h) * T * T;
            const int32_t *pos_b = pos ? pos + (size_t)b * T : NULL;
            if (fk) {
                fk->forward_bh(out_bh, att_bh, q, k, v, pos_b, T, C, (int)W, HS, scale);
                continue;
            }

            for (int r0 = 0; r0 < T; r0 += ATT_RB) {
                const int r1 = r0 + ATT_RB < T ? r0 + ATT_RB : T, rows = r1 - r0;
                float *A = att_bh + (size_t)r0 * T;
                /* pre-softmax scores for rows r0..r1-1, key columns 0..r1-1 */
                lf__cpu_sgemm(0, 1, rows, r1, HS, scale, q + (size_t)r0 * W, (int)W, k, (int)W, 0.0f, A, T);
                for (int t = r0; t < r1; t++) {
                    float *row = att_bh + (size_t)t * T;
                    /* whole vectors: columns 0..n-1, n = t+1 rounded up to ATT_VW (at most r1), the
                     * ones above the diagonal masked; short rows of variable length left the loops
                     * mostly in their scalar remainders (T = 64: 2x slower) */
                    const int n = att_width(t, r1), lo = att_lo(pos_b, t);
                    /* columns lo..n-1 (lo: the example's start in a packed row, else 0: the loops
                     * are then exactly the causal ones); those before lo are zeros */
                    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
                    for (int j = lo; j < n; j++) {
                        const float x = j <= t ? row[j] : -INFINITY;
                        mx = x > mx ? x : mx;
                    }
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (int j = lo; j < n; j++) {
                        const float e = j <= t ? lf__cpu_expf_f32(row[j] - mx) : 0.0f;
                        row[j] = e;
                        sum += e;
                    }
                    const float inv = 1.0f / sum;
#pragma omp simd
                    for (int j = lo; j < n; j++) row[j] *= inv;
                    if (lo > 0) memset(row, 0, sizeof(float) * (size_t)lo);
                    if (n < T) memset(row + n, 0, sizeof(float) * (size_t)(T - n));
                }
                if (!use_drop)
                    lf__cpu_sgemm(0, 0, rows, HS, r1, 1.0f, A, T, v, (int)W, 0.0f, out_bh + (size_t)r0 * C, C);
                else dropped_av(out_bh + (size_t)r0 * C, A, v, r0, rows, r1, T, C, W, HS, base, drop, dscale);
            }
        }
    }
}

void lf__cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV,
                               lf_dropout drop) {
    attention_forward(out, att, qkv, NULL, B, T, C, NH, NKV, drop);
}

void lf__cpu_attention_forward_packed(float *out, float *att, const float *qkv, const int32_t *pos, int B, int T, int C,
                                      int NH, int NKV, lf_dropout drop) {
    attention_forward(out, att, qkv, pos, B, T, C, NH, NKV, drop);
}

void lf__cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                                int B, int T, int C, int NH, int NKV, lf_dropout drop) {
    const int HS = C / NH, G = NH / NKV;
    const long W = (long)C + 2L * NKV * HS, KV = (long)NKV * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = drop.p > 0.0f;
    const float dscale = use_drop ? 1.0f / (1.0f - drop.p) : 1.0f;
    const att_fast_kernels *fk = att_fast_ok(T, HS, drop) ? att_fast_pick() : NULL;

    /* one (b, kv head) per thread: dk, dv sum the group's heads in order */
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * NH * T * T * HS >= LF_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            const size_t koff = (size_t)b * T * W + C + (size_t)g * HS;
            const float *k = qkv + koff, *v = k + KV;
            float *dk = dqkv + koff, *dv = dk + KV;
            if (!fk)
                for (int t = 0; t < T; t++) {
                    memset(dk + (size_t)t * W, 0, sizeof(float) * (size_t)HS);
                    memset(dv + (size_t)t * W, 0, sizeof(float) * (size_t)HS);
                }
            for (int h = g * G; h < g * G + G; h++) {
                const size_t qoff = (size_t)b * T * W + (size_t)h * HS;
                const float *q = qkv + qoff;
                float *dq = dqkv + qoff;
                const float *att_bh = att + ((size_t)b * NH + h) * T * T;
                float *S_bh = scratch + ((size_t)b * NH + h) * T * T;
                const float *dout_bh = dout + (size_t)b * T * C + (size_t)h * HS;
                const uint64_t base = ((uint64_t)b * NH + h) * T * T;
                if (fk) {
                    fk->backward_bh(dq, dk, dv, S_bh, dout_bh, q, k, v, att_bh, T, C, (int)W, HS, scale, h > g * G);
                    continue;
                }

                for (int r0 = 0; r0 < T; r0 += ATT_RB) {
                    const int r1 = r0 + ATT_RB < T ? r0 + ATT_RB : T, rows = r1 - r0;
                    const float *A = att_bh + (size_t)r0 * T;
                    float *S = S_bh + (size_t)r0 * T;
                    const float *dO = dout_bh + (size_t)r0 * C;

                    /* dv[0:r1] += dropout(A)^T @ dout[r0:r1] */
                    if (!use_drop) {
                        lf__cpu_sgemm(1, 0, r1, HS, rows, 1.0f, A, T, dO, C, 1.0f, dv, (int)W);
                    } else {
                        for (int t = r0; t < r1; t++) {
                            const float *a = att_bh + (size_t)t * T;
                            float *s = S_bh + (size_t)t * T;
                            const uint64_t row = base + (uint64_t)t * T;
#pragma omp simd
                            for (int j = 0; j < r1; j++)
                                s[j] = ((j <= t) & lf__cpu_dropout_keep(drop, row + (uint64_t)j)) ? a[j] * dscale
                                                                                                  : 0.0f;
                        }
                        lf__cpu_sgemm(1, 0, r1, HS, rows, 1.0f, S, T, dO, C, 1.0f, dv, (int)W);
                    }

                    /* datt (rows x r1) = dout[r0:r1] @ v[0:r1]^T */
                    lf__cpu_sgemm(0, 1, rows, r1, HS, 1.0f, dO, C, v, (int)W, 0.0f, S, T);

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
                    lf__cpu_sgemm(0, 0, rows, HS, r1, scale, S, T, k, (int)W, 0.0f, dq + (size_t)r0 * W, (int)W);
                    lf__cpu_sgemm(1, 0, r1, HS, rows, scale, S, T, q + (size_t)r0 * W, (int)W, 1.0f, dk, (int)W);
                }
            }
        }
    }
}
