/*
 * The small-T attention kernels (cpu_attention.c's header says when they
 * run and why), written once for a vector width ATT_VL and compiled once
 * per ISA:
 *  - cpu_attention_v8.c:  ATT_VL 8, with -mavx2 -mfma (16 ymm registers);
 *  - cpu_attention_v16.c: ATT_VL 16, with -mavx512f/bw/vl/dq (32 zmm).
 * cpu_attention.c picks one at run time from the backend's ISA level
 * (cpu_isa.c). The 16-lane code on AVX2 compiled to pairs of ymm registers:
 * a 4x4 tile of 16-lane accumulators is 32 ymm of 16, and the spills made
 * shakespeare_char's step 0.64-0.78x nanoGPT's on an AVX2 EPYC.
 *
 * Register tiles (accumulators + operands within the register file; the
 * products' terms are fused multiply-adds, vfma below, one rounding each:
 * the instruction AVX2+FMA and AVX-512 both have, so either width gives
 * the same bits; the rest of the backend is built -ffp-contract=off, so
 * the fusion is spelled out here, where it measured 15-20% faster):
 *  - 16 lanes: 4 rows x 4 vectors = 16 accumulators + 4 + 2 of 32 zmm;
 *  - 8 lanes:  4 rows x 2 vectors =  8 accumulators + 2 + 2 of 16 ymm.
 * Wider rows are cut into column chunks of that many vectors.
 *
 * Same bits at either width: every output element is computed by the same
 * sequence of fp32 operations whatever the vector width and tile:
 *  - products: one fused multiply-add per term, terms in increasing d
 *    (scores) or i (P @ Y) order, then one multiply by alpha;
 *  - softmax sums and the softmax-backward dot: lane l of a 16-column block
 *    accumulates columns l, l+16, l+32, ... (at 8 lanes two accumulators,
 *    one per half block), and the 16 lanes are added in lane order;
 *  - max: exact in any order; exp: lf__cpu_expf_f32's operations lane by lane.
 * So LLMFORGE_CPU_ISA=avx2 and avx512 give the same attention bits
 * (tests/backend/test_isa.c checks it), by the same operation sequence as
 * the one 16-lane version before the split.
 *
 * Layout and conventions: as cpu_attention.c (q, k, v and their gradients
 * strided views of qkv with leading dimension W; out and dout ld C; att and
 * scratch (T,T) per (b,h)); column counts are padded to TP = T rounded up
 * to 16, and a row's softmax covers its first n = att_width(t) columns
 * (t+1 rounded up to 16, at most T), the ones past t masked.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
/* The vector types are passed by value only between always-inline static
 * functions, so the ABI note -Wpsabi gives for them concerns no real call. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#include "cpu_internal.h"

#if ATT_VL == 16
#define ATT_TILE_NV 4 /* vectors per row in a register tile */
#define ATT_FN(name) name##_v16
#elif ATT_VL == 8
#define ATT_TILE_NV 2
#define ATT_FN(name) name##_v8
#else
#error "ATT_VL must be 8 or 16"
#endif
#define ATT_BLK 16                 /* softmax columns per block (lanes of the fixed summation order) */
#define ATT_VPB (ATT_BLK / ATT_VL) /* vectors per block */
#define ATT_FAST_R 4               /* rows per register tile */
#define ATT_INL static inline __attribute__((always_inline))

typedef float att_v __attribute__((vector_size(4 * ATT_VL)));
/* The same vector at float alignment, allowed to alias floats: loads and
 * stores straight from the float arrays. */
typedef float att_vu __attribute__((vector_size(4 * ATT_VL), aligned(4), may_alias));
typedef int32_t att_vi __attribute__((vector_size(4 * ATT_VL)));
typedef uint32_t att_vw __attribute__((vector_size(4 * ATT_VL)));

ATT_INL att_v vload(const float *p) { return *(const att_vu *)p; }
/* a * b + c with one rounding (vfmadd231ps at either width) */
#if ATT_VL == 16
ATT_INL att_v vfma(att_v a, att_v b, att_v c) { return (att_v)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#else
ATT_INL att_v vfma(att_v a, att_v b, att_v c) { return (att_v)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#endif
ATT_INL void vstore(float *p, att_v v) { *(att_vu *)p = v; }
/* f in every lane, one vbroadcastss from memory. (`(att_v){0} + f` is not
 * that: under strict IEEE semantics 0 + f is an addition (-0 becomes +0), so
 * GCC emitted a scalar vaddss and a register broadcast per element, two
 * dependent instructions in the products' inner loops.) The products' bits
 * are unchanged: a -0 operand there only meets the +0-started accumulators
 * of round-to-nearest sums, where +0 + -0 = +0. */
#if ATT_VL == 16
ATT_INL att_v vsplat(float f) { return (att_v)_mm512_set1_ps(f); }
#else
ATT_INL att_v vsplat(float f) { return (att_v)_mm256_set1_ps(f); }
#endif
ATT_INL att_v vselect(att_vi m, att_v a, att_v b) { return (att_v)(((att_vi)a & m) | ((att_vi)b & ~m)); }
ATT_INL att_vi vlane(void) {
    att_vi l;
    for (int i = 0; i < ATT_VL; i++) l[i] = i;
    return l;
}

/* lf__cpu_expf_f32 (cpu_math.h) lane by lane: the same operations. */
ATT_INL att_v vexpf(att_v x) {
    const att_vw xb = (att_vw)x, ab = xb & 0x7fffffffu, lim = (att_vw){0} + 0x42AE0000u;
    const att_vw m = (att_vw)(ab < lim);
    x = (att_v)(((ab & m) | (lim & ~m)) | (xb & 0x80000000u));
    const att_v t = x * 1.44269504088896341f + 12582912.0f;
    const att_vw ki = (att_vw)t - 0x4B400000u;
    const att_v k = t - 12582912.0f;
    att_v r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    att_v p = (att_v){0} + 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    return p * (att_v)((ki + 127u) << 23);
}

/* The 16 lanes of a block's accumulators (ATT_VPB vectors) added in lane
 * order: the fixed order at either width. */
static inline float blk_hsum(const att_v *acc) {
    float s = 0.0f;
    for (int j = 0; j < ATT_VPB; j++)
        for (int l = 0; l < ATT_VL; l++) s += acc[j][l];
    return s;
}

/* Softmax of row t over the nb 16-column blocks of s (columns before lo
 * and past t masked; lo = 0 but in packed rows), in place. */
static void fast_softmax(float *s, int lo, int t, int nb) {
    const att_vi lane = vlane();
    const att_v ninf = (att_v){0} - INFINITY;
    const int nv = nb * ATT_VPB;
    att_v mx = ninf;
    for (int k = 0; k < nv; k++) {
        const att_vi col = lane + ATT_VL * k, in = (col >= lo) & (col <= t);
        const att_v x = vselect(in, vload(s + ATT_VL * k), ninf);
        mx = vselect(x > mx, x, mx);
    }
    float m = mx[0];
    for (int l = 1; l < ATT_VL; l++) m = mx[l] > m ? mx[l] : m;
    att_v sum[ATT_VPB];
    for (int j = 0; j < ATT_VPB; j++) sum[j] = (att_v){0};
    for (int k = 0; k < nv; k++) {
        const att_vi col = lane + ATT_VL * k, in = (col >= lo) & (col <= t);
        const att_v e = vselect(in, vexpf(vload(s + ATT_VL * k) - m), (att_v){0});
        sum[k % ATT_VPB] += e;
        vstore(s + ATT_VL * k, e);
    }
    const float inv = 1.0f / blk_hsum(sum);
    for (int k = 0; k < nv; k++) vstore(s + ATT_VL * k, vload(s + ATT_VL * k) * inv);
}

/* Softmax backward of row t: s = a * (ds - sum_j a*ds) over nb blocks, a's
 * entries past t being 0 (ds is read from dsr, the result written to s). */
static void fast_softmax_backward(float *s, const float *a, const float *dsr, int t, int nb) {
    const att_vi lane = vlane();
    const int nv = nb * ATT_VPB;
    att_v dot[ATT_VPB];
    for (int j = 0; j < ATT_VPB; j++) dot[j] = (att_v){0};
    for (int k = 0; k < nv; k++) {
        const att_v x = vload(a + ATT_VL * k), y = vload(dsr + ATT_VL * k);
        dot[k % ATT_VPB] += vselect(lane + ATT_VL * k <= t, x * y, (att_v){0});
    }
    const float d = blk_hsum(dot);
    for (int k = 0; k < nv; k++) {
        const att_v x = vload(a + ATT_VL * k), y = vload(dsr + ATT_VL * k);
        vstore(s + ATT_VL * k, vselect(lane + ATT_VL * k <= t, x * (y - d), (att_v){0}));
    }
}

/* Columns a softmax row t works on: t+1 rounded up to 16, at most T. */
static inline int att_width(int t, int T) {
    const int n = (t + ATT_BLK) & ~(ATT_BLK - 1);
    return n < T ? n : T;
}

/* One stage of the in-register transpose of ATT_VL rows: rows i and i+h
 * (i & h == 0) swap their off-diagonal h-lane blocks (lane l of the pair's
 * lower row takes b[l-h] where l & h, the upper row a[l+h] where not).
 * After the stages h = ATT_VL/2, ..., 2, 1, row i holds column i. Constant
 * masks, so two-source shuffles (vpermt2ps, vshufps, vunpck*). */
#if ATT_VL == 16
#define ATT_TR_LO8 ((att_vi){0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23})
#define ATT_TR_HI8 ((att_vi){8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31})
#define ATT_TR_LO4 ((att_vi){0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27})
#define ATT_TR_HI4 ((att_vi){4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31})
#define ATT_TR_LO2 ((att_vi){0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29})
#define ATT_TR_HI2 ((att_vi){2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31})
#define ATT_TR_LO1 ((att_vi){0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30})
#define ATT_TR_HI1 ((att_vi){1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31})
#else
#define ATT_TR_LO4 ((att_vi){0, 1, 2, 3, 8, 9, 10, 11})
#define ATT_TR_HI4 ((att_vi){4, 5, 6, 7, 12, 13, 14, 15})
#define ATT_TR_LO2 ((att_vi){0, 1, 8, 9, 4, 5, 12, 13})
#define ATT_TR_HI2 ((att_vi){2, 3, 10, 11, 6, 7, 14, 15})
#define ATT_TR_LO1 ((att_vi){0, 8, 2, 10, 4, 12, 6, 14})
#define ATT_TR_HI1 ((att_vi){1, 9, 3, 11, 5, 13, 7, 15})
#endif
#define ATT_TR_STAGE(r, h) \
    for (int i_ = 0; i_ < ATT_VL; i_++) \
        if (!(i_ & (h))) { \
            const att_v a_ = r[i_], b_ = r[i_ + (h)]; \
            r[i_] = __builtin_shuffle(a_, b_, ATT_TR_LO##h); \
            r[i_ + (h)] = __builtin_shuffle(a_, b_, ATT_TR_HI##h); \
        }

ATT_INL void vtranspose(att_v *r) {
#if ATT_VL == 16
    ATT_TR_STAGE(r, 8)
#endif
    ATT_TR_STAGE(r, 4)
    ATT_TR_STAGE(r, 2)
    ATT_TR_STAGE(r, 1)
}

/* Yt[d*TP + j] = Y[j*ldy + d] for j < T, zero for T <= j < TP. A copy, so
 * the bits are the same on either path: whole ATT_VL x ATT_VL blocks go
 * through registers (the scalar strided loop was a fifth of the forward's
 * own time at shakespeare_char's shapes), HS not a multiple of ATT_VL
 * element by element. */
static void att_transpose(float *Yt, const float *Y, int ldy, int T, int TP, int HS) {
    if (HS % ATT_VL == 0) {
        for (int j0 = 0; j0 < TP; j0 += ATT_VL) /* TP is a multiple of 16, so of ATT_VL */
            for (int d0 = 0; d0 < HS; d0 += ATT_VL) {
                att_v r[ATT_VL];
                if (j0 + ATT_VL <= T) {
                    for (int i = 0; i < ATT_VL; i++) r[i] = vload(Y + (size_t)(j0 + i) * ldy + d0);
                } else {
                    for (int i = 0; i < ATT_VL; i++)
                        r[i] = j0 + i < T ? vload(Y + (size_t)(j0 + i) * ldy + d0) : (att_v){0};
                }
                vtranspose(r);
                for (int i = 0; i < ATT_VL; i++) vstore(Yt + (size_t)(d0 + i) * TP + j0, r[i]);
            }
        return;
    }
    for (int d = 0; d < HS; d++) {
        float *row = Yt + (size_t)d * TP;
        for (int j = 0; j < T; j++) row[j] = Y[(size_t)j * ldy + d];
        for (int j = T; j < TP; j++) row[j] = 0.0f;
    }
}

/* S[r*lds + c0 + VL*v + l] = alpha * sum_d X[r*ldx + d] * Yt[d*TP + c0 + VL*v + l]
 * for r < R, v < NV (a register tile of R rows x NV vectors from column c0). */
ATT_INL void fast_abt_tile(float *S, int lds, const float *X, int ldx, const float *Yt, int TP, int HS, int c0,
                           float alpha, const int R, const int NV) {
    att_v acc[ATT_FAST_R][ATT_TILE_NV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = (att_v){0};
    for (int d = 0; d < HS; d++) {
        att_v y[ATT_TILE_NV];
        for (int v = 0; v < NV; v++) y[v] = vload(Yt + (size_t)d * TP + c0 + ATT_VL * v);
        for (int r = 0; r < R; r++) {
            const att_v x = vsplat(X[(size_t)r * ldx + d]);
            for (int v = 0; v < NV; v++) acc[r][v] = vfma(x, y[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) vstore(S + (size_t)r * lds + c0 + ATT_VL * v, acc[r][v] * alpha);
}

/* One tile of R (1..4) rows by NV (1..ATT_TILE_NV) vectors through
 * constant arguments, so each shape is compiled with its registers. */
#if ATT_TILE_NV == 4
#define ATT_SWITCH_NV(CALL, R, nv) \
    switch (nv) { \
    case 1: CALL(R, 1); break; \
    case 2: CALL(R, 2); break; \
    case 3: CALL(R, 3); break; \
    default: CALL(R, 4); break; \
    }
#else
#define ATT_SWITCH_NV(CALL, R, nv) \
    switch (nv) { \
    case 1: CALL(R, 1); break; \
    default: CALL(R, 2); break; \
    }
#endif
#define ATT_SWITCH(CALL, R, nv) \
    switch (R) { \
    case 1: ATT_SWITCH_NV(CALL, 1, nv) break; \
    case 2: ATT_SWITCH_NV(CALL, 2, nv) break; \
    case 3: ATT_SWITCH_NV(CALL, 3, nv) break; \
    default: ATT_SWITCH_NV(CALL, 4, nv) break; \
    }

/* Rows [0,R) of S (ld lds >= 16*nb) over column blocks [0, nb). */
static void fast_abt(float *S, int lds, const float *X, int ldx, const float *Yt, int TP, int HS, int nb, float alpha,
                     int R) {
    const int nvt = nb * ATT_VPB;
    for (int v0 = 0; v0 < nvt; v0 += ATT_TILE_NV) {
        const int nv = nvt - v0 < ATT_TILE_NV ? nvt - v0 : ATT_TILE_NV, c0 = ATT_VL * v0;
#define LF_ABT(RR, VV) fast_abt_tile(S, lds, X, ldx, Yt, TP, HS, c0, alpha, RR, VV)
        ATT_SWITCH(LF_ABT, R, nv)
#undef LF_ABT
    }
}

/* O[r*ldo + c0 + :VL*NV] = alpha * sum_{i=lo}^{hi-1} P[r*rs + i*is] * Y[i*ldy + c0 + :VL*NV], r < R;
 * with `add`, O[...] += that instead (the later heads of a key/value group). */
ATT_INL void fast_ab_tile(float *O, int ldo, const float *P, long rs, long is, int lo, int hi, const float *Y, int ldy,
                          int c0, float alpha, int add, const int R, const int NV) {
    att_v acc[ATT_FAST_R][ATT_TILE_NV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = (att_v){0};
    for (int i = lo; i < hi; i++) {
        att_v y[ATT_TILE_NV];
        for (int v = 0; v < NV; v++) y[v] = vload(Y + (size_t)i * ldy + c0 + ATT_VL * v);
        for (int r = 0; r < R; r++) {
            const att_v p = vsplat(P[r * rs + i * is]);
            for (int v = 0; v < NV; v++) acc[r][v] = vfma(p, y[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) {
            float *o = O + (size_t)r * ldo + c0 + ATT_VL * v;
            vstore(o, add ? vload(o) + acc[r][v] * alpha : acc[r][v] * alpha);
        }
}

/* R (<= 4) rows of O over the head's HS columns, in column chunks of a tile. */
static void fast_ab(float *O, int ldo, const float *P, long rs, long is, int lo, int hi, const float *Y, int ldy,
                    int HS, float alpha, int add, int R) {
    const int nvt = HS / ATT_VL;
    for (int v0 = 0; v0 < nvt; v0 += ATT_TILE_NV) {
        const int nv = nvt - v0 < ATT_TILE_NV ? nvt - v0 : ATT_TILE_NV, c0 = ATT_VL * v0;
#define LF_AB(RR, VV) fast_ab_tile(O, ldo, P, rs, is, lo, hi, Y, ldy, c0, alpha, add, RR, VV)
        ATT_SWITCH(LF_AB, R, nv)
#undef LF_AB
    }
}

/* Forward of one (b,h) pair: q, k, v have leading dimension W. */
/* pos: NULL, or the packed row's positions (T): row t sees columns
 * t - pos[t] .. t (cpu_attention.c att_lo). */
void ATT_FN(lf__cpu_att_fast_forward_bh)(float *out_bh, float *att_bh, const float *q, const float *k, const float *v,
                                         const int32_t *pos, int T, int C, int W, int HS, float scale) {
    const int TP = (T + 15) & ~15;
    float Kt[LF_CPU_ATT_FAST_TILE];
    float S[ATT_FAST_R * LF_CPU_ATT_FAST_TMAX];
    att_transpose(Kt, k, W, T, TP, HS);
    for (int t0 = 0; t0 < T; t0 += ATT_FAST_R) {
        const int R = T - t0 < ATT_FAST_R ? T - t0 : ATT_FAST_R;
        const int nb = (t0 + R + 15) / 16; /* key columns 0..t0+R-1 */
        fast_abt(S, TP, q + (size_t)t0 * W, W, Kt, TP, HS, nb, scale, R);
        for (int r = 0; r < R; r++) {
            const int t = t0 + r;
            float *row = att_bh + (size_t)t * T;
            const int n = att_width(t, T);
            const int p = pos ? pos[t] : t, lo = p >= 0 && p <= t ? t - p : 0;
            fast_softmax(S + (size_t)r * TP, lo, t, (n + 15) / 16);
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
void ATT_FN(lf__cpu_att_fast_backward_bh)(float *dq, float *dk, float *dv, float *S_bh, const float *dout_bh,
                                          const float *q, const float *k, const float *v, const float *att_bh, int T,
                                          int C, int W, int HS, float scale, int add) {
    const int TP = (T + 15) & ~15;
    float Vt[LF_CPU_ATT_FAST_TILE];
    float S[ATT_FAST_R * LF_CPU_ATT_FAST_TMAX], At[LF_CPU_ATT_FAST_TMAX];
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
