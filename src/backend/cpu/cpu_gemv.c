/*
 * Matrix-vector products of the CPU backend: matmul_forward with a few rows
 * (N <= LF_CPU_GEMV_MAX_N), the shape of every product of single-stream
 * KV-cache decoding (one new token: out (1,OC) = inp (1,C) @ W).
 *
 * Why ourselves: such a product reads each weight once and does one FMA
 * with it, so its speed is the memory bandwidth. oneDNN's dnnl_sgemm is
 * tuned for GEMM tiles. Here both threads stream disjoint, long, contiguous
 * parts of W straight into FMAs, with nothing packed and nothing written but
 * out. Measured with tests/backend/bench_gemv.c (GPT-2 124M's and
 * SmolLM-135M's products, weights cycled through 1 GB, 2 threads, in a
 * quiet minute of a shared VM): at N = 1 sgemm streamed W at 77-95% of a
 * plain multi-stream read of the same bytes (~30 GB/s), these kernels at
 * 94-100% (1.00-1.23x sgemm); at N = 2..4 sgemm fell to 40-89%, these
 * 71-94% (1.04-2.1x sgemm; worst at N = 4, the lm_heads). Hence
 * LF_CPU_GEMV_MAX_N = 4; N = 5 goes to sgemm, as before.
 *
 * Layouts (backend_impl.h):
 *  - LF_W_OUT_IN, W (OC,C) (nn.Linear, the tied lm_head over wte): out[n,o]
 *    is the dot product of row o of W with inp row n. A thread takes a run
 *    of output rows, cuts it into GEMV_ROWS equal parts and walks them side
 *    by side, a row of each at a time: GEMV_ROWS long sequential streams
 *    per thread, each vector of inp loaded serving GEMV_ROWS rows and each
 *    row of W every input.
 *  - LF_W_IN_OUT, W (C,OC) (GPT-2's Conv1D): the rows are cut into two
 *    fixed halves [0,cm) and [cm,C), cm = C/2 rounded down to GEMV_IO_ROWS;
 *    threads pair up, one of a pair per half (a lone thread does both in
 *    turn), the pairs splitting the columns, so with 2 threads each streams
 *    one contiguous half of W. A thread streams its rows GEMV_IO_ROWS at a
 *    time into a tile of columns per input that stays in L1 (GEMV_IO_ACC
 *    floats of accumulators), tiles as wide as that allows; the first half's
 *    sums go to out, the second's to a stack buffer (hi, at most
 *    LF_CPU_GEMV_MAX_N x GEMV_KS_OC floats), and after a barrier out = (out
 *    + hi) + bias. Wider W (OC > GEMV_KS_OC) or C < 2 GEMV_IO_ROWS: no
 *    halves, the threads split the columns and each streams all C rows.
 *
 * Invariants:
 *  - out is overwritten: product, then + bias[o] (one rounding each, the
 *    order matmul_forward's GEMM path uses).
 *  - Deterministic: each out[n,o] is computed by one thread by an operation
 *    sequence that depends only on (C, the vector path), never on the thread
 *    count, on the tile or row block it falls in, or on N:
 *      OUT_IN: lane l of one vector accumulator sums inp[n,c] * W[o,c] over
 *        c = l (mod lanes) in increasing c with FMA (the C tail through a
 *        masked load, so absent lanes add 0), then the lanes are added in a
 *        fixed tree;
 *      IN_OUT: one FMA chain over c = 0..cm-1 in order, one over c =
 *        cm..C-1, added (cm and whether to halve depend on C and OC only);
 *    So the same bits for any thread count and for a row computed alone or
 *    in a batch of N. The vector path (AVX-512, AVX2+FMA, plain C) is picked
 *    once per call from CPUID; different paths may differ in the last bits.
 *  - Error: a sum of C products in either order, so |out - exact| <=
 *    gamma_(C+1) * (sum_c |inp||W| + |bias|), gamma_k = k u / (1 - k u),
 *    u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms,
 *    ch. 3); test_gemv.c checks that bound against a double reference.
 *  - Threads: a team of omp_get_max_threads() when the product has at least
 *    LF_CPU_PAR_MIN weights; inside the replicas' region (thread count 1)
 *    on the calling thread. Work is dealt in blocks of LF_CPU_CBLK outputs
 *    (lf__cpu_channel_slice), so no two threads write one cache line of out
 *    (or of hi) in one phase.
 *  - Any x86-64 (and any other CPU): the vector kernels are compiled with
 *    target attributes and only called where __builtin_cpu_supports says
 *    the CPU has the ISA; the plain C path needs nothing.
 *  - Never allocates: the IN_OUT tile (16 KB per thread) and hi (64 KB, on
 *    the calling thread's stack) are fixed-size stack buffers.
 *
 * References: Intel 64 and IA-32 Architectures Optimization Reference Manual
 * (hardware prefetchers, streaming loads); the Intel Intrinsics Guide.
 */
#include <stddef.h>
#include <stdatomic.h>
#include <omp.h>
#include "cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GEMV_X86 1
#else
#define GEMV_X86 0
#endif

/* Tuning, measured with tests/backend/bench_gemv.c on one Sapphire-Rapids-
 * class VM (2 cores; weights cycled through 1 GB) with the variants
 * interleaved pass by pass, as the machine is shared and its bandwidth
 * moves by 2x from one second to the next:
 *  - OUT_IN: GEMV_ROWS rows at a time (more concurrent streams): 8 rows were
 *    1-3% faster than 4 and clearly faster than 2; taking them from 8
 *    distant parts of the thread's rows (8 streams that run on for
 *    megabytes) instead of 8 adjacent rows (24 KB, then a new start for
 *    the prefetchers) was another 6-12%, within a few % of a plain read of
 *    the same bytes (bench_gemv's read line); at most GEMV_OI_ACC
 *    (rows x inputs) vector accumulators, so 3 and 4 inputs take 5 and 4 rows
 *    and stay in AVX-512's 32 registers. The AVX2 kernel (16 registers)
 *    takes 4 rows, 2 for 3 or 4 inputs.
 *  - IN_OUT: GEMV_IO_ROWS rows of W per pass over the accumulator tile:
 *    8 beat 4 by 2-10% and 2 was slower; tiles as wide as GEMV_IO_ACC floats
 *    of accumulators allow (16 KB of L1): one run per row and thread at
 *    GPT-2's widths beat 1024-column tiles by ~15%; the two halves of the
 *    rows (each thread one contiguous half of W, full rows) beat each thread
 *    taking half of every row by 2-16% (N = 1 and 4, GPT-2's four shapes).
 *  - Software prefetch (4 or 8 rows ahead for IN_OUT, 512-2048 floats ahead
 *    along the rows for OUT_IN, to L1 or L2) was slower than the hardware
 *    prefetchers alone, so there is none. */
#define GEMV_ROWS 8
#define GEMV_OI_ACC 16
#define GEMV_ROWS_256 4
#define GEMV_IO_ROWS 8
#define GEMV_IO_ACC 4096
#define GEMV_KS_OC 4096

static atomic_int g_force = -1; /* < 0: what the CPU has; else at most this path */

void lf__cpu_gemv_force(int vec) { atomic_store(&g_force, vec); }

lf__cpu_vec lf__cpu_gemv_vec(void) {
    lf__cpu_vec v = LF_CPU_VEC_NONE;
#if GEMV_X86
    if (__builtin_cpu_supports("avx512f")) v = LF_CPU_VEC_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) v = LF_CPU_VEC_AVX2;
#endif
    const int f = atomic_load(&g_force);
    if (f >= 0 && (int)v > f) v = f >= LF_CPU_VEC_AVX2 ? LF_CPU_VEC_AVX2 : LF_CPU_VEC_NONE;
    return v;
}

/* IN_OUT: the width of the column tiles a block of `width` columns is cut
 * into for NI inputs: equal tiles, a multiple of 16, at most GEMV_IO_ACC / NI
 * (the accumulators stay in L1), so each row of W is read in as few and as
 * long contiguous runs as that allows. */
static inline int io_tile_width(int width, int NI) {
    const int maxw = GEMV_IO_ACC / NI / 16 * 16;
    const int nt = (width + maxw - 1) / maxw;
    const int tw = (width + nt - 1) / nt;
    return (tw + 15) & ~15;
}

/* ------------------------------------------------------------- plain C */

/* One dot product, 8 partial sums (lane l takes c = l mod 8), added in a
 * fixed tree: the vector kernels' order at 8 lanes, written so that any
 * compiler can vectorize it; one function for every output, so one
 * instruction sequence. */
static float dot_c(const float *restrict w, const float *restrict x, int C) {
    float s[8] = {0};
    int c = 0;
    for (; c + 8 <= C; c += 8)
        for (int l = 0; l < 8; l++) s[l] += w[c + l] * x[c + l];
    for (int l = 0; c + l < C; l++) s[l] += w[c + l] * x[c + l];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static void oi_c(float *restrict out, const float *restrict inp, const float *restrict w,
                 const float *restrict bias, int N, int C, int OC, int o0, int o1) {
    for (int o = o0; o < o1; o++)
        for (int n = 0; n < N; n++) {
            const float s = dot_c(w + (size_t)o * C, inp + (size_t)n * C, C);
            out[(size_t)n * OC + o] = bias ? s + bias[o] : s;
        }
}

static void io_c(float *restrict out, const float *restrict inp, int ldx, const float *restrict w,
                 const float *restrict bias, int N, int C, int OC, int j0, int j1) {
    float acc[GEMV_IO_ACC];
    const int tws = io_tile_width(j1 - j0, 1);
    for (int n = 0; n < N; n++)
        for (int t0 = j0; t0 < j1; t0 += tws) {
            const int tw = j1 - t0 < tws ? j1 - t0 : tws;
            for (int j = 0; j < tw; j++) acc[j] = 0.0f;
            for (int c = 0; c < C; c++) {
                const float x = inp[(size_t)n * ldx + c];
                const float *restrict wr = w + (size_t)c * OC + t0;
                for (int j = 0; j < tw; j++) acc[j] += x * wr[j];
            }
            float *restrict o = out + (size_t)n * OC + t0;
            for (int j = 0; j < tw; j++) o[j] = bias ? acc[j] + bias[t0 + j] : acc[j];
        }
}

#if GEMV_X86
/* ------------------------------------------------------------- AVX-512 */

#define T512 __attribute__((target("avx512f")))
#define T512I __attribute__((target("avx512f"), always_inline)) static inline

/* R rows of W (OUT_IN) times NI inputs; R and NI are constants where this
 * is inlined, so acc lives in registers. res[r * NI + n] = dot(row r, inp n). */
T512I void oi512_block(float *res, const float *restrict w, size_t rs, const float *restrict inp, int C,
                       const int R, const int NI) {
    __m512 acc[GEMV_ROWS][LF_CPU_GEMV_MAX_N];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NI; n++) acc[r][n] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 16 <= C; c += 16) {
        __m512 x[LF_CPU_GEMV_MAX_N];
        for (int n = 0; n < NI; n++) x[n] = _mm512_loadu_ps(inp + (size_t)n * C + c);
        for (int r = 0; r < R; r++) {
            const __m512 wv = _mm512_loadu_ps(w + r * rs + c);
            for (int n = 0; n < NI; n++) acc[r][n] = _mm512_fmadd_ps(wv, x[n], acc[r][n]);
        }
    }
    if (c < C) {
        const __mmask16 m = (__mmask16)((1u << (C - c)) - 1u);
        __m512 x[LF_CPU_GEMV_MAX_N];
        for (int n = 0; n < NI; n++) x[n] = _mm512_maskz_loadu_ps(m, inp + (size_t)n * C + c);
        for (int r = 0; r < R; r++) {
            const __m512 wv = _mm512_maskz_loadu_ps(m, w + r * rs + c);
            for (int n = 0; n < NI; n++) acc[r][n] = _mm512_fmadd_ps(wv, x[n], acc[r][n]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NI; n++) res[r * NI + n] = _mm512_reduce_add_ps(acc[r][n]);
}

T512I void oi512_n(float *restrict out, const float *restrict inp, const float *restrict w,
                   const float *restrict bias, int C, int OC, int o0, int o1, const int NI) {
    const int R = GEMV_ROWS * NI <= GEMV_OI_ACC ? GEMV_ROWS : GEMV_OI_ACC / NI;
    float res[GEMV_ROWS * LF_CPU_GEMV_MAX_N];
    const int P = (o1 - o0) / R; /* rows per stream */
    for (int i = 0; i < P; i++) {
        oi512_block(res, w + (size_t)(o0 + i) * C, (size_t)P * C, inp, C, R, NI);
        for (int r = 0; r < R; r++)
            for (int n = 0; n < NI; n++) {
                const int o = o0 + r * P + i;
                out[(size_t)n * OC + o] = bias ? res[r * NI + n] + bias[o] : res[r * NI + n];
            }
    }
    for (int o = o0 + R * P; o < o1; o++) {
        oi512_block(res, w + (size_t)o * C, C, inp, C, 1, NI);
        for (int n = 0; n < NI; n++) out[(size_t)n * OC + o] = bias ? res[n] + bias[o] : res[n];
    }
}

T512 static void oi_512(float *restrict out, const float *restrict inp, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int o0, int o1) {
    switch (N) {
    case 1: oi512_n(out, inp, w, bias, C, OC, o0, o1, 1); break;
    case 2: oi512_n(out, inp, w, bias, C, OC, o0, o1, 2); break;
    case 3: oi512_n(out, inp, w, bias, C, OC, o0, o1, 3); break;
    default: oi512_n(out, inp, w, bias, C, OC, o0, o1, 4); break;
    }
}

/* IN_OUT: the tile acc[n][0..tw) += sum over rows c..c+R-1 of inp[n,c] * W[c, t0..],
 * one FMA at a time in increasing c. m masks the last vector's columns. */
T512I void io512_rows(float *restrict acc, int ld, const float *restrict inp, int ldx, const float *restrict w,
                      int OC, int c, int t0, int tw, const int R, const int NI) {
    __m512 x[GEMV_IO_ROWS][LF_CPU_GEMV_MAX_N];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NI; n++) x[r][n] = _mm512_set1_ps(inp[(size_t)n * ldx + c + r]);
    const float *restrict w0 = w + (size_t)c * OC + t0;
    int j = 0;
    for (; j + 16 <= tw; j += 16)
        for (int n = 0; n < NI; n++) {
            __m512 a = _mm512_load_ps(acc + n * ld + j);
            for (int r = 0; r < R; r++) a = _mm512_fmadd_ps(x[r][n], _mm512_loadu_ps(w0 + (size_t)r * OC + j), a);
            _mm512_store_ps(acc + n * ld + j, a);
        }
    if (j < tw) {
        const __mmask16 m = (__mmask16)((1u << (tw - j)) - 1u);
        for (int n = 0; n < NI; n++) {
            __m512 a = _mm512_load_ps(acc + n * ld + j);
            for (int r = 0; r < R; r++)
                a = _mm512_fmadd_ps(x[r][n], _mm512_maskz_loadu_ps(m, w0 + (size_t)r * OC + j), a);
            _mm512_store_ps(acc + n * ld + j, a);
        }
    }
}

T512I void io512_n(float *restrict out, const float *restrict inp, int ldx, const float *restrict w,
                   const float *restrict bias, int C, int OC, int j0, int j1, const int NI) {
    _Alignas(64) float acc[GEMV_IO_ACC];
    const int ld = io_tile_width(j1 - j0, NI);
    for (int t0 = j0; t0 < j1; t0 += ld) {
        const int tw = j1 - t0 < ld ? j1 - t0 : ld;
        const int twv = (tw + 15) & ~15; /* whole vectors: the masked lanes stay 0 */
        for (int n = 0; n < NI; n++)
            for (int j = 0; j < twv; j += 16) _mm512_store_ps(acc + n * ld + j, _mm512_setzero_ps());
        int c = 0;
        for (; c + GEMV_IO_ROWS <= C; c += GEMV_IO_ROWS) io512_rows(acc, ld, inp, ldx, w, OC, c, t0, tw, GEMV_IO_ROWS, NI);
        for (; c < C; c++) io512_rows(acc, ld, inp, ldx, w, OC, c, t0, tw, 1, NI);
        for (int n = 0; n < NI; n++) {
            float *restrict o = out + (size_t)n * OC + t0;
            const float *restrict a = acc + n * ld;
            if (bias)
                for (int j = 0; j < tw; j++) o[j] = a[j] + bias[t0 + j];
            else
                for (int j = 0; j < tw; j++) o[j] = a[j];
        }
    }
}

T512 static void io_512(float *restrict out, const float *restrict inp, int ldx, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int j0, int j1) {
    switch (N) {
    case 1: io512_n(out, inp, ldx, w, bias, C, OC, j0, j1, 1); break;
    case 2: io512_n(out, inp, ldx, w, bias, C, OC, j0, j1, 2); break;
    case 3: io512_n(out, inp, ldx, w, bias, C, OC, j0, j1, 3); break;
    default: io512_n(out, inp, ldx, w, bias, C, OC, j0, j1, 4); break;
    }
}

/* ------------------------------------------------------------- AVX2 + FMA */

#define T256 __attribute__((target("avx2,fma")))
#define T256I __attribute__((target("avx2,fma"), always_inline)) static inline

/* Mask of the first k (0..8) lanes, for vmaskmovps. */
T256I __m256i mask256(int k) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lane);
}

/* The lanes of v added in a fixed tree: (l + l+4), then pairs, then the two. */
T256I float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

T256I void oi256_block(float *res, const float *restrict w, size_t rs, const float *restrict inp, int C,
                       const int R, const int NI) {
    __m256 acc[GEMV_ROWS_256][LF_CPU_GEMV_MAX_N];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NI; n++) acc[r][n] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= C; c += 8) {
        __m256 x[LF_CPU_GEMV_MAX_N];
        for (int n = 0; n < NI; n++) x[n] = _mm256_loadu_ps(inp + (size_t)n * C + c);
        for (int r = 0; r < R; r++) {
            const __m256 wv = _mm256_loadu_ps(w + r * rs + c);
            for (int n = 0; n < NI; n++) acc[r][n] = _mm256_fmadd_ps(wv, x[n], acc[r][n]);
        }
    }
    if (c < C) {
        const __m256i m = mask256(C - c);
        __m256 x[LF_CPU_GEMV_MAX_N];
        for (int n = 0; n < NI; n++) x[n] = _mm256_maskload_ps(inp + (size_t)n * C + c, m);
        for (int r = 0; r < R; r++) {
            const __m256 wv = _mm256_maskload_ps(w + r * rs + c, m);
            for (int n = 0; n < NI; n++) acc[r][n] = _mm256_fmadd_ps(wv, x[n], acc[r][n]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NI; n++) res[r * NI + n] = hsum256(acc[r][n]);
}

T256I void oi256_n(float *restrict out, const float *restrict inp, const float *restrict w,
                   const float *restrict bias, int C, int OC, int o0, int o1, const int NI, const int R) {
    float res[GEMV_ROWS_256 * LF_CPU_GEMV_MAX_N];
    const int P = (o1 - o0) / R; /* rows per stream */
    for (int i = 0; i < P; i++) {
        oi256_block(res, w + (size_t)(o0 + i) * C, (size_t)P * C, inp, C, R, NI);
        for (int r = 0; r < R; r++)
            for (int n = 0; n < NI; n++) {
                const int o = o0 + r * P + i;
                out[(size_t)n * OC + o] = bias ? res[r * NI + n] + bias[o] : res[r * NI + n];
            }
    }
    for (int o = o0 + R * P; o < o1; o++) {
        oi256_block(res, w + (size_t)o * C, C, inp, C, 1, NI);
        for (int n = 0; n < NI; n++) out[(size_t)n * OC + o] = bias ? res[n] + bias[o] : res[n];
    }
}

T256 static void oi_256(float *restrict out, const float *restrict inp, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int o0, int o1) {
    switch (N) {
    case 1: oi256_n(out, inp, w, bias, C, OC, o0, o1, 1, GEMV_ROWS_256); break;
    case 2: oi256_n(out, inp, w, bias, C, OC, o0, o1, 2, GEMV_ROWS_256); break;
    case 3: oi256_n(out, inp, w, bias, C, OC, o0, o1, 3, GEMV_ROWS_256 / 2); break;
    default: oi256_n(out, inp, w, bias, C, OC, o0, o1, 4, GEMV_ROWS_256 / 2); break;
    }
}

T256I void io256_rows(float *restrict acc, int ld, const float *restrict inp, int ldx, const float *restrict w,
                      int OC, int c, int t0, int tw, const int R, const int NI) {
    __m256 x[GEMV_IO_ROWS][LF_CPU_GEMV_MAX_N];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NI; n++) x[r][n] = _mm256_set1_ps(inp[(size_t)n * ldx + c + r]);
    const float *restrict w0 = w + (size_t)c * OC + t0;
    int j = 0;
    for (; j + 8 <= tw; j += 8)
        for (int n = 0; n < NI; n++) {
            __m256 a = _mm256_load_ps(acc + n * ld + j);
            for (int r = 0; r < R; r++) a = _mm256_fmadd_ps(x[r][n], _mm256_loadu_ps(w0 + (size_t)r * OC + j), a);
            _mm256_store_ps(acc + n * ld + j, a);
        }
    if (j < tw) {
        const __m256i m = mask256(tw - j);
        for (int n = 0; n < NI; n++) {
            __m256 a = _mm256_load_ps(acc + n * ld + j);
            for (int r = 0; r < R; r++)
                a = _mm256_fmadd_ps(x[r][n], _mm256_maskload_ps(w0 + (size_t)r * OC + j, m), a);
            _mm256_store_ps(acc + n * ld + j, a);
        }
    }
}

T256I void io256_n(float *restrict out, const float *restrict inp, int ldx, const float *restrict w,
                   const float *restrict bias, int C, int OC, int j0, int j1, const int NI) {
    _Alignas(64) float acc[GEMV_IO_ACC];
    const int ld = io_tile_width(j1 - j0, NI);
    for (int t0 = j0; t0 < j1; t0 += ld) {
        const int tw = j1 - t0 < ld ? j1 - t0 : ld;
        const int twv = (tw + 7) & ~7;
        for (int n = 0; n < NI; n++)
            for (int j = 0; j < twv; j += 8) _mm256_store_ps(acc + n * ld + j, _mm256_setzero_ps());
        int c = 0;
        for (; c + GEMV_IO_ROWS <= C; c += GEMV_IO_ROWS) io256_rows(acc, ld, inp, ldx, w, OC, c, t0, tw, GEMV_IO_ROWS, NI);
        for (; c < C; c++) io256_rows(acc, ld, inp, ldx, w, OC, c, t0, tw, 1, NI);
        for (int n = 0; n < NI; n++) {
            float *restrict o = out + (size_t)n * OC + t0;
            const float *restrict a = acc + n * ld;
            if (bias)
                for (int j = 0; j < tw; j++) o[j] = a[j] + bias[t0 + j];
            else
                for (int j = 0; j < tw; j++) o[j] = a[j];
        }
    }
}

T256 static void io_256(float *restrict out, const float *restrict inp, int ldx, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int j0, int j1) {
    switch (N) {
    case 1: io256_n(out, inp, ldx, w, bias, C, OC, j0, j1, 1); break;
    case 2: io256_n(out, inp, ldx, w, bias, C, OC, j0, j1, 2); break;
    case 3: io256_n(out, inp, ldx, w, bias, C, OC, j0, j1, 3); break;
    default: io256_n(out, inp, ldx, w, bias, C, OC, j0, j1, 4); break;
    }
}
#endif /* GEMV_X86 */

/* ------------------------------------------------------------- dispatch */

typedef void (*gemv_oi)(float *restrict out, const float *restrict inp, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int o0, int o1);
/* IN_OUT over rows [0,C) of w (its first row is the chunk's), inp rows ldx apart */
typedef void (*gemv_io)(float *restrict out, const float *restrict inp, int ldx, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int j0, int j1);

int lf__cpu_gemv(float *restrict out, const float *restrict inp, const float *restrict weight,
                 const float *restrict bias, int N, int C, int OC, lf_weight_layout layout) {
    if (N < 1 || N > LF_CPU_GEMV_MAX_N || C < 1 || OC < 1) return 0;
    const lf__cpu_vec v = lf__cpu_gemv_vec();
    gemv_oi oi = oi_c;
    gemv_io io = io_c;
#if GEMV_X86
    if (v == LF_CPU_VEC_AVX512) oi = oi_512, io = io_512;
    else if (v == LF_CPU_VEC_AVX2) oi = oi_256, io = io_256;
#else
    (void)v;
#endif
    const int par = (long)C * OC >= LF_CPU_PAR_MIN;
    if (layout == LF_W_OUT_IN) {
#pragma omp parallel if (par)
        {
            int o0, o1;
            lf__cpu_channel_slice(OC, omp_get_thread_num(), omp_get_num_threads(), &o0, &o1);
            if (o0 < o1) oi(out, inp, weight, bias, N, C, OC, o0, o1);
        }
        return 1;
    }
    if (OC > GEMV_KS_OC || C < 2 * GEMV_IO_ROWS) {
#pragma omp parallel if (par)
        {
            int j0, j1;
            lf__cpu_channel_slice(OC, omp_get_thread_num(), omp_get_num_threads(), &j0, &j1);
            if (j0 < j1) io(out, inp, C, weight, bias, N, C, OC, j0, j1);
        }
        return 1;
    }
    /* IN_OUT, rows in two fixed halves [0,cm) and [cm,C): out gets the first
     * half's sums, hi the second's, then out = out + hi (+ bias). Threads
     * pair up, one of each pair per half, the pairs splitting the columns;
     * one thread does both halves in turn. */
    _Alignas(64) float hi[LF_CPU_GEMV_MAX_N * GEMV_KS_OC];
    const int cm = C / 2 / GEMV_IO_ROWS * GEMV_IO_ROWS;
#pragma omp parallel if (par)
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        if (nt == 1) {
            io(out, inp, C, weight, NULL, N, cm, OC, 0, OC);
            io(hi, inp + cm, C, weight + (size_t)cm * OC, NULL, N, C - cm, OC, 0, OC);
        } else if (t / 2 < nt / 2) {
            int j0, j1;
            lf__cpu_channel_slice(OC, t / 2, nt / 2, &j0, &j1);
            if (j0 < j1 && t % 2 == 0) io(out, inp, C, weight, NULL, N, cm, OC, j0, j1);
            if (j0 < j1 && t % 2 == 1) io(hi, inp + cm, C, weight + (size_t)cm * OC, NULL, N, C - cm, OC, j0, j1);
        }
#pragma omp barrier
        int j0, j1;
        lf__cpu_channel_slice(OC, t, nt, &j0, &j1);
        for (int n = 0; n < N; n++) {
            float *restrict o = out + (size_t)n * OC;
            const float *restrict h = hi + (size_t)n * OC;
            if (bias)
                for (int j = j0; j < j1; j++) o[j] = (o[j] + h[j]) + bias[j];
            else
                for (int j = j0; j < j1; j++) o[j] = o[j] + h[j];
        }
    }
    return 1;
}
