/*
 * Element-wise ops of the CPU backend: token + position embedding (or the
 * token embedding alone: wpe == NULL, models with rotary positions), GELU
 * (tanh approximation), residual add, standalone dropout.
 *
 * Invariants:
 *  - Backward ops accumulate (+=) into dinp / da / db / dwte / dwpe.
 *  - encoder_backward is race-free and deterministic: threads own disjoint
 *    channel slices and every (token, channel) sum runs over (b,t) in order,
 *    so the result is bit-identical to the serial loop for any thread count.
 *  - Dropout keeps element i when lf_rng_uniform(seed, LF_RNG_DROPOUT,
 *    lf_rng_mix(key, i)) >= p and scales it by 1/(1-p); backward recomputes
 *    the same mask (inlined RNG, cpu_internal.h). dropout_forward may run in
 *    place (out == inp).
 *  - gelu_forward_bf16 (cpu-bf16's bf16 activation storage) evaluates the
 *    same inline GELU as gelu_forward and rounds it: cast_bf16 of the fp32
 *    op's output, bit for bit.
 *  - GELU is cpu_gelu.h's (its sigmoid form with a vectorizable float exp,
 *    no libm call), built here for the baseline and in cpu_gelu_v16.c for
 *    AVX-512; both builds give the same bits.
 *
 * Reference: llm.c train_gpt2.c (encoder, gelu, residual); PyTorch
 * nn.GELU(approximate='tanh') and nn.Dropout (inverted dropout).
 */
#include <string.h>
#include <math.h>
#include <stdatomic.h>
#include <omp.h>
#include "cpu_internal.h"
#include "cpu_math.h"
#include "cpu_gelu.h"

/* ------------------------------------------------------------- encoder */

void lf__cpu_encoder_forward(float *restrict out, const int32_t *restrict inp, const float *restrict wte,
                             const float *restrict wpe, int B, int T, int C) {
    const long N = (long)B * T;
#pragma omp parallel for schedule(static) if (N * C >= LF_CPU_PAR_MIN)
    for (long n = 0; n < N; n++) {
        float *restrict o = out + n * C;
        const float *restrict we = wte + (size_t)inp[n] * C;
        if (!wpe) {
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = we[c];
            continue;
        }
        const float *restrict wp = wpe + (size_t)(n % T) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = we[c] + wp[c];
    }
}

void lf__cpu_encoder_backward(float *restrict dwte, float *restrict dwpe, const float *restrict dout,
                              const int32_t *restrict inp, int B, int T, int C) {
    /* Parallel over channels: rows sharing a token id would race if split
     * across threads, and atomics would make the sum order vary. */
#pragma omp parallel if ((long)B * T * C >= LF_CPU_PAR_MIN)
    {
        int c0, c1;
        lf__cpu_channel_slice(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        if (c0 < c1) {
            for (int b = 0; b < B; b++) {
                for (int t = 0; t < T; t++) {
                    const long n = (long)b * T + t;
                    const float *restrict d = dout + n * C;
                    float *restrict dw = dwte + (size_t)inp[n] * C;
                    if (!dwpe) {
#pragma omp simd
                        for (int c = c0; c < c1; c++) dw[c] += d[c];
                        continue;
                    }
                    float *restrict dp = dwpe + (size_t)t * C;
#pragma omp simd
                    for (int c = c0; c < c1; c++) {
                        dw[c] += d[c];
                        dp[c] += d[c];
                    }
                }
            }
        }
    }
}

/* Packed rows: wpe row pos[b,t] (clamped into [0, t]: backend_impl.h). */
static inline size_t packed_pos(const int32_t *pos, long n, int T) {
    const int t = (int)(n % T), p = pos[n];
    return (size_t)(p >= 0 && p <= t ? p : t);
}

void lf__cpu_encoder_forward_packed(float *restrict out, const int32_t *restrict inp, const int32_t *restrict pos,
                                    const float *restrict wte, const float *restrict wpe, int B, int T, int C) {
    const long N = (long)B * T;
#pragma omp parallel for schedule(static) if (N * C >= LF_CPU_PAR_MIN)
    for (long n = 0; n < N; n++) {
        float *restrict o = out + n * C;
        const float *restrict we = wte + (size_t)inp[n] * C;
        const float *restrict wp = wpe + packed_pos(pos, n, T) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = we[c] + wp[c];
    }
}

void lf__cpu_encoder_backward_packed(float *restrict dwte, float *restrict dwpe, const float *restrict dout,
                                     const int32_t *restrict inp, const int32_t *restrict pos, int B, int T, int C) {
    /* as encoder_backward: threads own channel slices, rows in order */
#pragma omp parallel if ((long)B * T * C >= LF_CPU_PAR_MIN)
    {
        int c0, c1;
        lf__cpu_channel_slice(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (long n = 0; c0 < c1 && n < (long)B * T; n++) {
            const float *restrict d = dout + n * C;
            float *restrict dw = dwte + (size_t)inp[n] * C;
            float *restrict dp = dwpe + packed_pos(pos, n, T) * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                dw[c] += d[c];
                dp[c] += d[c];
            }
        }
    }
}

/* ------------------------------------------------------------- GELU */

/* The element functions and loops are cpu_gelu.h's, shared with the AVX-512
 * build (cpu_gelu_v16.c), which runs at that ISA level or above unless the
 * test hook asks for the baseline (test_isa compares the two). */
static atomic_int g_gelu_baseline;

void lf__cpu_gelu_force_baseline(int on) { atomic_store(&g_gelu_baseline, on); }

static int gelu_v16(void) { return lf__cpu_isa() >= LF_CPU_ISA_AVX512 && !atomic_load(&g_gelu_baseline); }

void lf__cpu_gelu_forward(float *restrict out, const float *restrict inp, size_t n) {
    if (gelu_v16()) {
        lf__cpu_gelu_forward_v16(out, inp, n);
        return;
    }
    gelu_forward_loop(out, inp, n);
}

/* The same values rounded to bf16 (cpu-bf16's bf16 activation storage).
 * GELU goes through a float tile in L1, then the tile is rounded: the fused
 * loop (gelu and rounding in one) measured 1.5x slower than these two. */
#define GELU_TILE 1024

void lf__cpu_gelu_forward_bf16(uint16_t *restrict out, const float *restrict inp, size_t n) {
    const size_t ntiles = (n + GELU_TILE - 1) / GELU_TILE;
#pragma omp parallel for schedule(static) if (n >= (size_t)LF_CPU_PAR_MIN)
    for (size_t k = 0; k < ntiles; k++) {
        float tile[GELU_TILE];
        const size_t lo = k * GELU_TILE, len = n - lo < GELU_TILE ? n - lo : GELU_TILE;
#pragma omp simd
        for (size_t i = 0; i < len; i++) tile[i] = gelu(inp[lo + i]);
#pragma omp simd
        for (size_t i = 0; i < len; i++) out[lo + i] = lf__cpu_bf16_bits(tile[i]);
    }
}

void lf__cpu_gelu_backward(float *restrict dinp, const float *restrict inp, const float *restrict dout, size_t n) {
    if (gelu_v16()) {
        lf__cpu_gelu_backward_v16(dinp, inp, dout, n);
        return;
    }
    gelu_backward_loop(dinp, inp, dout, n);
}

/* ------------------------------------------------------------- residual */

void lf__cpu_residual_forward(float *out, const float *a, const float *b, size_t n) {
    /* out may alias a or b (in-place residual stream); element-wise, so fine. */
#pragma omp parallel if (n >= (size_t)LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* One row of residual_forward, for the residual-fused norms (no threads:
 * their callers parallelise over rows). */
void lf__cpu_residual_row(float *out, const float *a, const float *b, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void lf__cpu_residual_backward(float *da, float *db, const float *dout, size_t n) {
#pragma omp parallel if (n >= (size_t)LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = dout[i];
        da[i] += d;
        db[i] += d;
    }
}

/* ------------------------------------------------------------- dropout */

/* The mask costs a Philox evaluation per element (~30 integer ops), so the
 * threshold for going parallel is lower than for plain element-wise ops. */
#define DROPOUT_PAR_MIN 2048

void lf__cpu_dropout_forward(float *out, const float *inp, size_t n, lf_dropout drop) {
    if (drop.p <= 0.0f) {
        if (out != inp) memmove(out, inp, n * sizeof(float));
        return;
    }
    const float scale = 1.0f / (1.0f - drop.p);
#pragma omp parallel if (n >= DROPOUT_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = lf__cpu_dropout_keep(drop, i) ? inp[i] * scale : 0.0f;
}

void lf__cpu_dropout_backward(float *dinp, const float *dout, size_t n, lf_dropout drop) {
    /* overwrites dinp; dinp may equal dout (element-wise) */
    if (drop.p <= 0.0f) {
        if (dinp != dout) memmove(dinp, dout, n * sizeof(float));
        return;
    }
    const float scale = 1.0f / (1.0f - drop.p);
#pragma omp parallel if (n >= DROPOUT_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] = lf__cpu_dropout_keep(drop, i) ? dout[i] * scale : 0.0f;
}
