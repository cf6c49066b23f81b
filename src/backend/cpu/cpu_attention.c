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
 * Reference: Vaswani et al. 2017 (scaled dot-product attention); nanoGPT
 * CausalSelfAttention; llm.c attention_backward for the softmax gradient
 * dpre = att * (datt - sum_j att*datt); Ainslie et al. 2023, "GQA: Training
 * Generalized Multi-Query Transformer Models from Multi-Head Checkpoints"
 * (grouped-query attention), Shazeer 2019 (multi-query); Hugging Face
 * modeling_llama.py repeat_kv (query head h reads kv head h / G).
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

#define ATT_RB 64      /* rows per block (64 measured best of 32..256 at T=256/1024) */
#define ATT_TILE 16384 /* floats in the forward's dropout tile (64 KiB of stack) */
#define ATT_VW 16      /* softmax row loops run over whole vectors of this many floats */

/* Columns a softmax row t of a block ending at r1 works on: t+1 rounded up
 * to ATT_VW, at most r1 (the columns past t are masked). */
static inline int att_width(int t, int r1) {
    const int n = (t + ATT_VW) & ~(ATT_VW - 1);
    return n < r1 ? n : r1;
}

/* out_blk (rows,HS; ld C) = dropout(A) (rows x r1; ld T) @ v (r1,HS; ld W).
 * The dropped probabilities go through a stack tile, ATT_TILE/rows columns
 * at a time, because att must keep the undropped values. */
static void dropped_av(float *out_blk, const float *A, const float *v, int r0, int rows, int r1,
                       int T, int C, long W, int HS, uint64_t base, lf_dropout drop, float dscale) {
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
                o[j - j0] = ((j <= t) & lf__cpu_dropout_keep(drop, row + (uint64_t)j)) ? a[j] * dscale
                                                                                      : 0.0f;
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
 * hence the limit T <= 128. The softmax runs on 16-lane vectors too
 * (v16_expf is lf__cpu_expf_f32's arithmetic lane by lane).
 * Written with GCC vector extensions (16 floats), which compile to one
 * AVX-512 register, two AVX2 ones, or four SSE ones, so the path needs no
 * ISA dispatch. Same mathematics as the GEMM path: fp32 products
 * accumulated in fp32, in a fixed order per output element (not the same
 * order as the GEMM, so the two paths agree to rounding, not bit for bit).
 * Two kernels:
 *  - fast_abt: R rows of X (ld ldx) times a transposed tile Yt (HS x TP,
 *    column j = row j of Y) -> scores for 16-wide column blocks;
 *  - fast_ab: R output rows o[r] = alpha * sum_{i in [lo,hi)} P(r,i) * Y[i]
 *    with P(r,i) = P[r*rs + i*is] (so it also multiplies by a transposed P:
 *    dk and dv sum over rows t of the probabilities' columns).
 * Entries of att and of the softmax gradient above the diagonal are exact
 * zeros, so row groups may sum over them.
 */
#define ATT_FAST_TMAX 128
#define ATT_FAST_R 4         /* rows per register tile */
#define ATT_FAST_TILE 16384  /* floats of the transposed K (or V) tile on the stack */

typedef float att_v16 __attribute__((vector_size(64)));
/* The same vector at float alignment, allowed to alias floats: loads and
 * stores straight from the float arrays (a memcpy into att_v16 went through
 * the stack as two 32-byte halves and stalled the 64-byte reload). */
typedef float att_v16u __attribute__((vector_size(64), aligned(4), may_alias));

static inline __attribute__((always_inline)) void v16_load(att_v16 *v, const float *p) { *v = *(const att_v16u *)p; }
static inline __attribute__((always_inline)) void v16_store(float *p, const att_v16 *v) { *(att_v16u *)p = *v; }

typedef int32_t att_i16 __attribute__((vector_size(64)));
typedef uint32_t att_u16 __attribute__((vector_size(64)));

static inline __attribute__((always_inline)) att_v16 v16_select(att_i16 m, att_v16 a, att_v16 b) {
    return (att_v16)(((att_i16)a & m) | ((att_i16)b & ~m));
}

/* lf__cpu_expf_f32 (cpu_math.h) on 16 lanes: the same operations. */
static inline __attribute__((always_inline)) att_v16 v16_expf(att_v16 x) {
    const att_u16 xb = (att_u16)x, ab = xb & 0x7fffffffu, lim = (att_u16){0} + 0x42AE0000u;
    const att_u16 m = (att_u16)(ab < lim);
    x = (att_v16)(((ab & m) | (lim & ~m)) | (xb & 0x80000000u));
    const att_v16 t = x * 1.44269504088896341f + 12582912.0f;
    const att_u16 ki = (att_u16)t - 0x4B400000u;
    const att_v16 k = t - 12582912.0f;
    att_v16 r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    att_v16 p = (att_v16){0} + 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    return p * (att_v16)((ki + 127u) << 23);
}

/* Lanes of a vector reduced in lane order (a fixed order: same bits every run). */
static inline float v16_hsum(att_v16 v) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += v[l];
    return s;
}
static inline float v16_hmax(att_v16 v) {
    float m = v[0];
    for (int l = 1; l < 16; l++) m = v[l] > m ? v[l] : m;
    return m;
}

/* Softmax of row t over the nb 16-wide blocks of s (columns past t masked),
 * in place. */
static void fast_softmax(float *s, int t, int nb) {
    const att_i16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const att_v16 ninf = (att_v16){0} - INFINITY;
    att_v16 mx = ninf;
    for (int b = 0; b < nb; b++) {
        att_v16 x;
        v16_load(&x, s + 16 * b);
        const att_i16 keep = lane + 16 * b <= t;
        x = v16_select(keep, x, ninf);
        mx = v16_select(x > mx, x, mx);
    }
    const float m = v16_hmax(mx);
    att_v16 sum = (att_v16){0};
    for (int b = 0; b < nb; b++) {
        att_v16 x;
        v16_load(&x, s + 16 * b);
        const att_i16 keep = lane + 16 * b <= t;
        const att_v16 e = v16_select(keep, v16_expf(x - m), (att_v16){0});
        sum += e;
        v16_store(s + 16 * b, &e);
    }
    const float inv = 1.0f / v16_hsum(sum);
    for (int b = 0; b < nb; b++) {
        att_v16 x;
        v16_load(&x, s + 16 * b);
        x *= inv;
        v16_store(s + 16 * b, &x);
    }
}

/* Softmax backward of row t: s = a * (ds - sum_j a*ds) over nb blocks, a's
 * entries past t being 0 (ds is read from dsr, the result written to s). */
static void fast_softmax_backward(float *s, const float *a, const float *dsr, int t, int nb) {
    const att_i16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    att_v16 dot = (att_v16){0};
    for (int b = 0; b < nb; b++) {
        att_v16 x, y;
        v16_load(&x, a + 16 * b);
        v16_load(&y, dsr + 16 * b);
        const att_i16 keep = lane + 16 * b <= t;
        dot += v16_select(keep, x * y, (att_v16){0});
    }
    const float d = v16_hsum(dot);
    for (int b = 0; b < nb; b++) {
        att_v16 x, y;
        v16_load(&x, a + 16 * b);
        v16_load(&y, dsr + 16 * b);
        const att_i16 keep = lane + 16 * b <= t;
        const att_v16 o = v16_select(keep, x * (y - d), (att_v16){0});
        v16_store(s + 16 * b, &o);
    }
}

static int att_fast_ok(int T, int HS, lf_dropout drop) {
    const int TP = (T + 15) & ~15;
    return drop.p == 0.0f && T <= ATT_FAST_TMAX && HS % 16 == 0 && HS <= 128 && (long)HS * TP <= ATT_FAST_TILE;
}

/* Yt[d*TP + j] = Y[j*ldy + d] for j < T, zero for T <= j < TP. */
static void att_transpose(float *Yt, const float *Y, int ldy, int T, int TP, int HS) {
    for (int d = 0; d < HS; d++) {
        float *row = Yt + (size_t)d * TP;
        for (int j = 0; j < T; j++) row[j] = Y[(size_t)j * ldy + d];
        for (int j = T; j < TP; j++) row[j] = 0.0f;
    }
}

/* S[r*lds + 16*(b0+b) + l] = alpha * sum_d X[r*ldx + d] * Yt[d*TP + 16*(b0+b) + l]
 * for r < R, b < NB: NB (<= 4) column blocks from block b0. */
static inline __attribute__((always_inline)) void fast_abt_tile(float *S, int lds, const float *X, int ldx,
                                                                const float *Yt, int TP, int HS, int b0, float alpha,
                                                                const int R, const int NB) {
    att_v16 acc[ATT_FAST_R][4];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < NB; b++) acc[r][b] = (att_v16){0};
    for (int d = 0; d < HS; d++) {
        att_v16 y[4];
        for (int b = 0; b < NB; b++) v16_load(&y[b], Yt + (size_t)d * TP + 16 * (b0 + b));
        for (int r = 0; r < R; r++) {
            const float x = X[(size_t)r * ldx + d];
            for (int b = 0; b < NB; b++) acc[r][b] += x * y[b];
        }
    }
    for (int r = 0; r < R; r++)
        for (int b = 0; b < NB; b++) {
            const att_v16 v = acc[r][b] * alpha;
            v16_store(S + (size_t)r * lds + 16 * (b0 + b), &v);
        }
}

/* Rows [0,R) of S (ld lds >= 16*nb) over column blocks [0, nb). */
static void fast_abt(float *S, int lds, const float *X, int ldx, const float *Yt, int TP, int HS, int nb, float alpha,
                     int R) {
    for (int b0 = 0; b0 < nb; b0 += 4) {
        const int k = nb - b0 < 4 ? nb - b0 : 4;
#define LF_ABT(RR, KK) fast_abt_tile(S, lds, X, ldx, Yt, TP, HS, b0, alpha, RR, KK)
        if (R == ATT_FAST_R) {
            switch (k) {
            case 1: LF_ABT(ATT_FAST_R, 1); break;
            case 2: LF_ABT(ATT_FAST_R, 2); break;
            case 3: LF_ABT(ATT_FAST_R, 3); break;
            default: LF_ABT(ATT_FAST_R, 4); break;
            }
        } else {
            for (int r = 0; r < R; r++) {
                float *Sr = S + (size_t)r * lds;
                const float *Xr = X + (size_t)r * ldx;
                switch (k) {
                case 1: fast_abt_tile(Sr, lds, Xr, ldx, Yt, TP, HS, b0, alpha, 1, 1); break;
                case 2: fast_abt_tile(Sr, lds, Xr, ldx, Yt, TP, HS, b0, alpha, 1, 2); break;
                case 3: fast_abt_tile(Sr, lds, Xr, ldx, Yt, TP, HS, b0, alpha, 1, 3); break;
                default: fast_abt_tile(Sr, lds, Xr, ldx, Yt, TP, HS, b0, alpha, 1, 4); break;
                }
            }
        }
#undef LF_ABT
    }
}

/* O[r*ldo + :HS] = alpha * sum_{i=lo}^{hi-1} P[r*rs + i*is] * Y[i*ldy + :HS], r < R;
 * with `add`, O[...] += that instead (the later heads of a key/value group).
 * NV = HS/16 vectors per row, R*NV <= 16 accumulators. */
static inline __attribute__((always_inline)) void fast_ab_tile(float *O, int ldo, const float *P, long rs, long is,
                                                               int lo, int hi, const float *Y, int ldy, float alpha,
                                                               int add, const int R, const int NV) {
    att_v16 acc[ATT_FAST_R][8];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = (att_v16){0};
    for (int i = lo; i < hi; i++) {
        att_v16 y[8];
        for (int v = 0; v < NV; v++) v16_load(&y[v], Y + (size_t)i * ldy + 16 * v);
        for (int r = 0; r < R; r++) {
            const float p = P[r * rs + i * is];
            for (int v = 0; v < NV; v++) acc[r][v] += p * y[v];
        }
    }
    if (add) {
        for (int r = 0; r < R; r++)
            for (int v = 0; v < NV; v++) {
                att_v16 o;
                v16_load(&o, O + (size_t)r * ldo + 16 * v);
                o += acc[r][v] * alpha;
                v16_store(O + (size_t)r * ldo + 16 * v, &o);
            }
        return;
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) {
            const att_v16 o = acc[r][v] * alpha;
            v16_store(O + (size_t)r * ldo + 16 * v, &o);
        }
}

static void fast_ab(float *O, int ldo, const float *P, long rs, long is, int lo, int hi, const float *Y, int ldy,
                    int HS, float alpha, int add, int R) {
    const int NV = HS / 16;
    if (R == ATT_FAST_R && NV <= 4) {
        switch (NV) {
        case 1: fast_ab_tile(O, ldo, P, rs, is, lo, hi, Y, ldy, alpha, add, ATT_FAST_R, 1); break;
        case 2: fast_ab_tile(O, ldo, P, rs, is, lo, hi, Y, ldy, alpha, add, ATT_FAST_R, 2); break;
        case 3: fast_ab_tile(O, ldo, P, rs, is, lo, hi, Y, ldy, alpha, add, ATT_FAST_R, 3); break;
        default: fast_ab_tile(O, ldo, P, rs, is, lo, hi, Y, ldy, alpha, add, ATT_FAST_R, 4); break;
        }
        return;
    }
    /* two rows at a time for wide heads (NV 5..8), single rows at the edge */
    for (int r = 0; r < R;) {
        const int rr = R - r >= 2 ? 2 : 1;
        float *Or = O + (size_t)r * ldo;
        const float *Pr = P + r * rs;
#define LF_AB(RR, VV) fast_ab_tile(Or, ldo, Pr, rs, is, lo, hi, Y, ldy, alpha, add, RR, VV)
        if (rr == 2) {
            switch (NV) {
            case 1: LF_AB(2, 1); break;
            case 2: LF_AB(2, 2); break;
            case 3: LF_AB(2, 3); break;
            case 4: LF_AB(2, 4); break;
            case 5: LF_AB(2, 5); break;
            case 6: LF_AB(2, 6); break;
            case 7: LF_AB(2, 7); break;
            default: LF_AB(2, 8); break;
            }
        } else {
            switch (NV) {
            case 1: LF_AB(1, 1); break;
            case 2: LF_AB(1, 2); break;
            case 3: LF_AB(1, 3); break;
            case 4: LF_AB(1, 4); break;
            case 5: LF_AB(1, 5); break;
            case 6: LF_AB(1, 6); break;
            case 7: LF_AB(1, 7); break;
            default: LF_AB(1, 8); break;
            }
        }
#undef LF_AB
        r += rr;
    }
}

/* Forward of one (b,h) pair: q, k, v have leading dimension W. */
static void fast_forward_bh(float *out_bh, float *att_bh, const float *q, const float *k, const float *v, int T, int C,
                            int W, int HS, float scale) {
    const int TP = (T + 15) & ~15;
    float Kt[ATT_FAST_TILE];
    float S[ATT_FAST_R * ATT_FAST_TMAX];
    att_transpose(Kt, k, W, T, TP, HS);
    for (int t0 = 0; t0 < T; t0 += ATT_FAST_R) {
        const int R = T - t0 < ATT_FAST_R ? T - t0 : ATT_FAST_R;
        const int nb = (t0 + R + 15) / 16; /* key columns 0..t0+R-1 */
        fast_abt(S, TP, q + (size_t)t0 * W, W, Kt, TP, HS, nb, scale, R);
        for (int r = 0; r < R; r++) {
            const int t = t0 + r;
            float *row = att_bh + (size_t)t * T;
            const int n = att_width(t, T);
            fast_softmax(S + (size_t)r * TP, t, (n + 15) / 16);
            memcpy(row, S + (size_t)r * TP, sizeof(float) * (size_t)n);
            if (n < T) memset(row + n, 0, sizeof(float) * (size_t)(T - n));
        }
        /* out rows t0.. = P[t0.., 0..t0+R) @ v: entries past each row's diagonal are 0 */
        fast_ab(out_bh + (size_t)t0 * C, C, att_bh + (size_t)t0 * T, T, 1, 0, t0 + R, v, W, HS, 1.0f, 0, R);
    }
}

/* Backward of one (b,h) pair: S_bh (T,T) scratch ends as the softmax
 * gradient; dq is written, dk and dv are written (add = 0: the group's first
 * head) or added to (add = 1). q, k, v, dq, dk, dv have leading dimension W. */
static void fast_backward_bh(float *dq, float *dk, float *dv, float *S_bh, const float *dout_bh, const float *q,
                             const float *k, const float *v, const float *att_bh, int T, int C, int W, int HS,
                             float scale, int add) {
    const int TP = (T + 15) & ~15;
    float Vt[ATT_FAST_TILE];
    float S[ATT_FAST_R * ATT_FAST_TMAX], At[ATT_FAST_TMAX];
    att_transpose(Vt, v, W, T, TP, HS);
    for (int t0 = 0; t0 < T; t0 += ATT_FAST_R) {
        const int R = T - t0 < ATT_FAST_R ? T - t0 : ATT_FAST_R;
        const int nb = (t0 + R + 15) / 16;
        /* datt rows = dout @ v^T, then softmax backward into S_bh */
        fast_abt(S, TP, dout_bh + (size_t)t0 * C, C, Vt, TP, HS, nb, 1.0f, R);
        for (int r = 0; r < R; r++) {
            const int t = t0 + r;
            const float *a = att_bh + (size_t)t * T;
            float *sr = S + (size_t)r * TP;
            float *s = S_bh + (size_t)t * T;
            const int n = att_width(t, T), nbr = (n + 15) / 16;
            if (16 * nbr <= T) {
                fast_softmax_backward(s, a, sr, t, nbr);
            } else { /* the row's last block passes T: through the tile */
                memcpy(At, a, sizeof(float) * (size_t)T);
                memset(At + T, 0, sizeof(float) * (size_t)(TP - T));
                fast_softmax_backward(sr, At, sr, t, nbr);
                memcpy(s, sr, sizeof(float) * (size_t)n);
            }
            if (n < T) memset(s + n, 0, sizeof(float) * (size_t)(T - n));
        }
        /* dq rows t0.. = scale * dpre[t0.., 0..t0+R) @ k */
        fast_ab(dq + (size_t)t0 * W, W, S_bh + (size_t)t0 * T, T, 1, 0, t0 + R, k, W, HS, scale, 0, R);
    }
    /* dv rows j = sum_{t >= j} att[t][j] dout[t];  dk rows j = scale * sum_{t >= j} dpre[t][j] q[t] */
    for (int j0 = 0; j0 < T; j0 += ATT_FAST_R) {
        const int R = T - j0 < ATT_FAST_R ? T - j0 : ATT_FAST_R;
        fast_ab(dv + (size_t)j0 * W, W, att_bh + j0, 1, T, j0, T, dout_bh, C, HS, 1.0f, add, R);
        fast_ab(dk + (size_t)j0 * W, W, S_bh + j0, 1, T, j0, T, q, W, HS, scale, add, R);
    }
}

void lf__cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH, int NKV, lf_dropout drop) {
    const int HS = C / NH, G = NH / NKV;
    const long W = (long)C + 2L * NKV * HS, KV = (long)NKV * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = drop.p > 0.0f;
    const float dscale = use_drop ? 1.0f / (1.0f - drop.p) : 1.0f;
    const int fast = att_fast_ok(T, HS, drop);

#pragma omp parallel for collapse(2) schedule(static) if ((long)B * NH * T * T * HS >= LF_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * W + (size_t)h * HS;
            const float *k = qkv + (size_t)b * T * W + C + (size_t)(h / G) * HS;
            const float *v = k + KV;
            float *att_bh = att + ((size_t)b * NH + h) * T * T;
            float *out_bh = out + (size_t)b * T * C + (size_t)h * HS;
            const uint64_t base = ((uint64_t)b * NH + h) * T * T;
            if (fast) {
                fast_forward_bh(out_bh, att_bh, q, k, v, T, C, (int)W, HS, scale);
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
                    lf__cpu_sgemm(0, 0, rows, HS, r1, 1.0f, A, T, v, (int)W, 0.0f, out_bh + (size_t)r0 * C, C);
                else
                    dropped_av(out_bh + (size_t)r0 * C, A, v, r0, rows, r1, T, C, W, HS, base, drop,
                               dscale);
            }
        }
    }
}

void lf__cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH, int NKV, lf_dropout drop) {
    const int HS = C / NH, G = NH / NKV;
    const long W = (long)C + 2L * NKV * HS, KV = (long)NKV * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = drop.p > 0.0f;
    const float dscale = use_drop ? 1.0f / (1.0f - drop.p) : 1.0f;
    const int fast = att_fast_ok(T, HS, drop);

    /* one (b, kv head) per thread: dk, dv sum the group's heads in order */
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * NH * T * T * HS >= LF_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            const size_t koff = (size_t)b * T * W + C + (size_t)g * HS;
            const float *k = qkv + koff, *v = k + KV;
            float *dk = dqkv + koff, *dv = dk + KV;
            if (!fast)
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
                if (fast) {
                    fast_backward_bh(dq, dk, dv, S_bh, dout_bh, q, k, v, att_bh, T, C, (int)W, HS, scale, h > g * G);
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
                                s[j] = ((j <= t) & lf__cpu_dropout_keep(drop, row + (uint64_t)j))
                                           ? a[j] * dscale : 0.0f;
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
