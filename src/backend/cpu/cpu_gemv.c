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
 *    once per call from the backend's ISA level (cpu_isa.c: CPUID capped by
 *    LLMFORGE_CPU_ISA); different paths may differ in the last bits.
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
 *    target attributes and only called where the ISA level (from CPUID)
 *    says the CPU has the ISA; the plain C path needs nothing.
 *  - Never allocates: the IN_OUT tile (16 KB per thread) and hi (64 KB, on
 *    the calling thread's stack) are fixed-size stack buffers.
 *
 * Batch-invariant GEMM (lf__cpu_gemm_invariant): any N, every out[n,o]
 * computed by exactly the sequence lf__cpu_gemv uses for it, so a row's bits
 * are the same alone (N = 1, the matrix-vector path) or among any number of
 * others: what `llmforge serve` needs for per-request determinism under
 * continuous batching (oneDNN's sgemm picks its blocking, and so each
 * output's summation order, from M). The rows go through the same kernels
 * LF_CPU_GEMV_MAX_N at a time; W is cut into tiles that stay in L2
 * (GEMM_TILE_BYTES) and each tile serves every block of rows before the
 * next is read, so W comes from memory once and the kernels run from cache,
 * each W vector loaded serving up to 4 rows. IN_OUT keeps lf__cpu_gemv's
 * halves: out = (sum over [0,cm) + sum over [cm,C)) + bias with the same cm
 * (the second half's sums in a per-thread stack buffer of
 * LF_CPU_GEMV_MAX_N x GEMM_IO_TILE floats).
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
/* Batch-invariant GEMM: the bytes of W one tile holds (in L2 while every
 * block of rows passes over it; 2 MB L2 per core where this was written)
 * and the widest IN_OUT column tile. */
#define GEMM_TILE_BYTES (512 * 1024)
#define GEMM_IO_TILE 1024

static atomic_int g_force = -1; /* < 0: what the CPU has; else at most this path */

void lf__cpu_gemv_force(int vec) { atomic_store(&g_force, vec); }

lf__cpu_vec lf__cpu_gemv_vec(void) {
    /* the backend's one ISA choice (cpu_isa.c: CPUID capped by LLMFORGE_CPU_ISA) */
    const lf__cpu_isa_level isa = lf__cpu_isa();
    lf__cpu_vec v = LF_CPU_VEC_NONE;
#if GEMV_X86
    if (isa >= LF_CPU_ISA_AVX512) v = LF_CPU_VEC_AVX512;
    else if (isa >= LF_CPU_ISA_AVX2) v = LF_CPU_VEC_AVX2;
#else
    (void)isa;
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

static void oi_c(float *restrict out, const float *restrict inp, const float *restrict w, const float *restrict bias,
                 int N, int C, int OC, int o0, int o1) {
    for (int o = o0; o < o1; o++)
        for (int n = 0; n < N; n++) {
            const float s = dot_c(w + (size_t)o * C, inp + (size_t)n * C, C);
            out[(size_t)n * OC + o] = bias ? s + bias[o] : s;
        }
}

static void io_c(float *restrict out, int ldo, const float *restrict inp, int ldx, const float *restrict w,
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
            float *restrict o = out + (size_t)n * ldo + t0;
            for (int j = 0; j < tw; j++) o[j] = bias ? acc[j] + bias[t0 + j] : acc[j];
        }
}

#if GEMV_X86
/* ------------------------------------------------------------- AVX-512 */

#define T512 __attribute__((target("avx512f")))
#define T512I __attribute__((target("avx512f"), always_inline)) static inline

/* R rows of W (OUT_IN) times NI inputs; R and NI are constants where this
 * is inlined, so acc lives in registers. res[r * NI + n] = dot(row r, inp n). */
T512I void oi512_block(float *res, const float *restrict w, size_t rs, const float *restrict inp, int C, const int R,
                       const int NI) {
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

T512I void oi512_n(float *restrict out, const float *restrict inp, const float *restrict w, const float *restrict bias,
                   int C, int OC, int o0, int o1, const int NI) {
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
T512I void io512_rows(float *restrict acc, int ld, const float *restrict inp, int ldx, const float *restrict w, int OC,
                      int c, int t0, int tw, const int R, const int NI) {
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

T512I void io512_n(float *restrict out, int ldo, const float *restrict inp, int ldx, const float *restrict w,
                   const float *restrict bias, int C, int OC, int j0, int j1, const int NI) {
    _Alignas(64) float acc[GEMV_IO_ACC];
    const int ld = io_tile_width(j1 - j0, NI);
    for (int t0 = j0; t0 < j1; t0 += ld) {
        const int tw = j1 - t0 < ld ? j1 - t0 : ld;
        const int twv = (tw + 15) & ~15; /* whole vectors: the masked lanes stay 0 */
        for (int n = 0; n < NI; n++)
            for (int j = 0; j < twv; j += 16) _mm512_store_ps(acc + n * ld + j, _mm512_setzero_ps());
        int c = 0;
        for (; c + GEMV_IO_ROWS <= C; c += GEMV_IO_ROWS)
            io512_rows(acc, ld, inp, ldx, w, OC, c, t0, tw, GEMV_IO_ROWS, NI);
        for (; c < C; c++) io512_rows(acc, ld, inp, ldx, w, OC, c, t0, tw, 1, NI);
        for (int n = 0; n < NI; n++) {
            float *restrict o = out + (size_t)n * ldo + t0;
            const float *restrict a = acc + n * ld;
            if (bias)
                for (int j = 0; j < tw; j++) o[j] = a[j] + bias[t0 + j];
            else
                for (int j = 0; j < tw; j++) o[j] = a[j];
        }
    }
}

T512 static void io_512(float *restrict out, int ldo, const float *restrict inp, int ldx, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int j0, int j1) {
    switch (N) {
    case 1: io512_n(out, ldo, inp, ldx, w, bias, C, OC, j0, j1, 1); break;
    case 2: io512_n(out, ldo, inp, ldx, w, bias, C, OC, j0, j1, 2); break;
    case 3: io512_n(out, ldo, inp, ldx, w, bias, C, OC, j0, j1, 3); break;
    default: io512_n(out, ldo, inp, ldx, w, bias, C, OC, j0, j1, 4); break;
    }
}

/* Batch-invariant GEMM, IN_OUT, AVX-512: NI (<= 4) rows of inp times V (<= 4)
 * vectors of columns [j, j + 16 V) of W (the last vector's lanes masked by
 * m), over W's rows [c0,c1), the accumulators in registers for the run of
 * rows. Each out[n,o] continues the chain io512_rows makes (0, then one FMA
 * per row in increasing c): it starts from 0 (first) or from the partial
 * sum p holds (rows before c0; fp32 stored and reloaded exactly), and
 * stores the new partial sum to p, or, at the end of the chain, the result:
 *   END_SUM out = sum (+ bias);
 *   END_ADD out = (out + sum) (+ bias) (out holds the first half's sum).
 * p and out are rows ldp and ldo apart, p at column 0 = j. */
enum { IO_PART, IO_END_SUM, IO_END_ADD };
/* The 16 accumulators are named variables, not an array: GCC kept an array of them on the stack, storing
 * every one at each row (store-bound at a third of the FMA rate). */
#define IO_MV(v) ((v) == V - 1 ? m : (__mmask16)0xFFFF)
T512I void io512_reg(float *restrict p, int ldp, float *restrict out, int ldo, const float *restrict inp, int ldx,
                     const float *restrict w, const float *restrict bias, int OC, int c0, int c1, int j, __mmask16 m,
                     int first, int end, const int V, const int NI) {
    const __m512 z = _mm512_setzero_ps();
    __m512 a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z, a20 = z, a21 = z, a22 = z, a23 = z,
           a30 = z, a31 = z, a32 = z, a33 = z;
    if (!first) {
        if (NI > 0 && V > 0) a00 = _mm512_maskz_loadu_ps(IO_MV(0), p + (size_t)0 * ldp + 0);
        if (NI > 0 && V > 1) a01 = _mm512_maskz_loadu_ps(IO_MV(1), p + (size_t)0 * ldp + 16);
        if (NI > 0 && V > 2) a02 = _mm512_maskz_loadu_ps(IO_MV(2), p + (size_t)0 * ldp + 32);
        if (NI > 0 && V > 3) a03 = _mm512_maskz_loadu_ps(IO_MV(3), p + (size_t)0 * ldp + 48);
        if (NI > 1 && V > 0) a10 = _mm512_maskz_loadu_ps(IO_MV(0), p + (size_t)1 * ldp + 0);
        if (NI > 1 && V > 1) a11 = _mm512_maskz_loadu_ps(IO_MV(1), p + (size_t)1 * ldp + 16);
        if (NI > 1 && V > 2) a12 = _mm512_maskz_loadu_ps(IO_MV(2), p + (size_t)1 * ldp + 32);
        if (NI > 1 && V > 3) a13 = _mm512_maskz_loadu_ps(IO_MV(3), p + (size_t)1 * ldp + 48);
        if (NI > 2 && V > 0) a20 = _mm512_maskz_loadu_ps(IO_MV(0), p + (size_t)2 * ldp + 0);
        if (NI > 2 && V > 1) a21 = _mm512_maskz_loadu_ps(IO_MV(1), p + (size_t)2 * ldp + 16);
        if (NI > 2 && V > 2) a22 = _mm512_maskz_loadu_ps(IO_MV(2), p + (size_t)2 * ldp + 32);
        if (NI > 2 && V > 3) a23 = _mm512_maskz_loadu_ps(IO_MV(3), p + (size_t)2 * ldp + 48);
        if (NI > 3 && V > 0) a30 = _mm512_maskz_loadu_ps(IO_MV(0), p + (size_t)3 * ldp + 0);
        if (NI > 3 && V > 1) a31 = _mm512_maskz_loadu_ps(IO_MV(1), p + (size_t)3 * ldp + 16);
        if (NI > 3 && V > 2) a32 = _mm512_maskz_loadu_ps(IO_MV(2), p + (size_t)3 * ldp + 32);
        if (NI > 3 && V > 3) a33 = _mm512_maskz_loadu_ps(IO_MV(3), p + (size_t)3 * ldp + 48);
    }
    const float *restrict x0 = inp, *restrict x1 = inp + (size_t)ldx, *restrict x2 = inp + 2 * (size_t)ldx,
                          *restrict x3 = inp + 3 * (size_t)ldx;
    for (int c = c0; c < c1; c++) {
        const float *restrict wr = w + (size_t)c * OC + j;
        __m512 w0 = z, w1 = z, w2 = z, w3 = z;
        if (V > 0) w0 = V - 1 == 0 ? _mm512_maskz_loadu_ps(m, wr + 0) : _mm512_loadu_ps(wr + 0);
        if (V > 1) w1 = V - 1 == 1 ? _mm512_maskz_loadu_ps(m, wr + 16) : _mm512_loadu_ps(wr + 16);
        if (V > 2) w2 = V - 1 == 2 ? _mm512_maskz_loadu_ps(m, wr + 32) : _mm512_loadu_ps(wr + 32);
        if (V > 3) w3 = V - 1 == 3 ? _mm512_maskz_loadu_ps(m, wr + 48) : _mm512_loadu_ps(wr + 48);
#define IO_FMA_ROW(n) \
    if (NI > n) { \
        const __m512 x = _mm512_set1_ps(x##n[c]); \
        if (V > 0) a##n##0 = _mm512_fmadd_ps(x, w0, a##n##0); \
        if (V > 1) a##n##1 = _mm512_fmadd_ps(x, w1, a##n##1); \
        if (V > 2) a##n##2 = _mm512_fmadd_ps(x, w2, a##n##2); \
        if (V > 3) a##n##3 = _mm512_fmadd_ps(x, w3, a##n##3); \
    }
        IO_FMA_ROW(0)
        IO_FMA_ROW(1)
        IO_FMA_ROW(2)
        IO_FMA_ROW(3)
#undef IO_FMA_ROW
    }
#define IO_FIN(n, v, a) \
    if (NI > (n) && V > (v)) { \
        __m512 r = (a); \
        if (end == IO_PART) { \
            _mm512_mask_storeu_ps(p + (size_t)(n)*ldp + 16 * (v), IO_MV(v), r); \
        } else { \
            float *o = out + (size_t)(n)*ldo + j + 16 * (v); \
            if (end == IO_END_ADD) r = _mm512_add_ps(_mm512_maskz_loadu_ps(IO_MV(v), o), r); \
            if (bias) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(IO_MV(v), bias + j + 16 * (v))); \
            _mm512_mask_storeu_ps(o, IO_MV(v), r); \
        } \
    }
    IO_FIN(0, 0, a00)
    IO_FIN(0, 1, a01)
    IO_FIN(0, 2, a02)
    IO_FIN(0, 3, a03)
    IO_FIN(1, 0, a10)
    IO_FIN(1, 1, a11)
    IO_FIN(1, 2, a12)
    IO_FIN(1, 3, a13)
    IO_FIN(2, 0, a20)
    IO_FIN(2, 1, a21)
    IO_FIN(2, 2, a22)
    IO_FIN(2, 3, a23)
    IO_FIN(3, 0, a30)
    IO_FIN(3, 1, a31)
    IO_FIN(3, 2, a32)
    IO_FIN(3, 3, a33)
#undef IO_FIN
}
#undef IO_MV


/* io512_reg over the nb <= 4 rows of a block, columns [j, j + width), width <= 64. */
T512 static void io512_block(float *restrict p, int ldp, float *restrict out, int ldo, const float *restrict inp,
                             int ldx, const float *restrict w, const float *restrict bias, int OC, int c0, int c1,
                             int j, int width, int first, int end, int nb) {
    const int V = (width + 15) / 16;
    const __mmask16 m = (__mmask16)(0xFFFFu >> (16 * V - width));
#define IO512_V(NI) \
    switch (V) { \
    case 1: io512_reg(p, ldp, out, ldo, inp, ldx, w, bias, OC, c0, c1, j, m, first, end, 1, NI); break; \
    case 2: io512_reg(p, ldp, out, ldo, inp, ldx, w, bias, OC, c0, c1, j, m, first, end, 2, NI); break; \
    case 3: io512_reg(p, ldp, out, ldo, inp, ldx, w, bias, OC, c0, c1, j, m, first, end, 3, NI); break; \
    default: io512_reg(p, ldp, out, ldo, inp, ldx, w, bias, OC, c0, c1, j, m, first, end, 4, NI); break; \
    }
    switch (nb) {
    case 1: IO512_V(1) break;
    case 2: IO512_V(2) break;
    case 3: IO512_V(3) break;
    default: IO512_V(4) break;
    }
#undef IO512_V
}

/* The invariant IN_OUT product on one thread's columns [j0,j1): rows of inp
 * in groups of GEMM_IO_G, columns in blocks of 64, W's rows in runs of
 * GEMM_IO_KB; every block of 4 rows of a group passes over a run before
 * the next, so the run (at most 64 KB of W, contiguous rows of 256 bytes at
 * W's stride: an L2 tile whatever the stride's cache-set aliasing) is read
 * from memory once per group. Partial sums of the first half (or of the one
 * chain) wait in out, those of the second half in part (the group's rows,
 * 64 apart). */
#define GEMM_IO_G 64
#define GEMM_IO_KB 128
T512 static void io512_invariant(float *restrict out, const float *restrict inp, const float *restrict w,
                                 const float *restrict bias, int N, int C, int OC, int j0, int j1, int halves, int cm) {
    _Alignas(64) float part[GEMM_IO_G * 64];
    const int NB = LF_CPU_GEMV_MAX_N;
    for (int g0 = 0; g0 < N; g0 += GEMM_IO_G) {
        const int g1 = N - g0 < GEMM_IO_G ? N : g0 + GEMM_IO_G;
        for (int j = j0; j < j1; j += 64) {
            const int width = j1 - j < 64 ? j1 - j : 64;
            /* the first half (or the whole chain): partial sums in out at column j */
            const int e0 = halves ? cm : C;
            for (int k0 = 0; k0 < e0; k0 += GEMM_IO_KB) {
                const int k1 = e0 - k0 < GEMM_IO_KB ? e0 : k0 + GEMM_IO_KB;
                const int last = k1 == e0;
                for (int n0 = g0; n0 < g1; n0 += NB) {
                    float *o = out + (size_t)n0 * OC;
                    const int nb = g1 - n0 < NB ? g1 - n0 : NB;
                    io512_block(o + j, OC, o, OC, inp + (size_t)n0 * C, C, w, halves ? NULL : bias, OC, k0, k1, j,
                                width, k0 == 0, last ? (halves ? IO_PART : IO_END_SUM) : IO_PART, nb);
                }
            }
            if (!halves) continue;
            for (int k0 = cm; k0 < C; k0 += GEMM_IO_KB) {
                const int k1 = C - k0 < GEMM_IO_KB ? C : k0 + GEMM_IO_KB;
                for (int n0 = g0; n0 < g1; n0 += NB) {
                    float *o = out + (size_t)n0 * OC;
                    const int nb = g1 - n0 < NB ? g1 - n0 : NB;
                    io512_block(part + (size_t)(n0 - g0) * 64, 64, o, OC, inp + (size_t)n0 * C, C, w, bias, OC, k0, k1,
                                j, width, k0 == cm, k1 == C ? IO_END_ADD : IO_PART, nb);
                }
            }
        }
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

T256I void oi256_block(float *res, const float *restrict w, size_t rs, const float *restrict inp, int C, const int R,
                       const int NI) {
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

T256I void oi256_n(float *restrict out, const float *restrict inp, const float *restrict w, const float *restrict bias,
                   int C, int OC, int o0, int o1, const int NI, const int R) {
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

T256I void io256_rows(float *restrict acc, int ld, const float *restrict inp, int ldx, const float *restrict w, int OC,
                      int c, int t0, int tw, const int R, const int NI) {
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
            for (int r = 0; r < R; r++) a = _mm256_fmadd_ps(x[r][n], _mm256_maskload_ps(w0 + (size_t)r * OC + j, m), a);
            _mm256_store_ps(acc + n * ld + j, a);
        }
    }
}

T256I void io256_n(float *restrict out, int ldo, const float *restrict inp, int ldx, const float *restrict w,
                   const float *restrict bias, int C, int OC, int j0, int j1, const int NI) {
    _Alignas(64) float acc[GEMV_IO_ACC];
    const int ld = io_tile_width(j1 - j0, NI);
    for (int t0 = j0; t0 < j1; t0 += ld) {
        const int tw = j1 - t0 < ld ? j1 - t0 : ld;
        const int twv = (tw + 7) & ~7;
        for (int n = 0; n < NI; n++)
            for (int j = 0; j < twv; j += 8) _mm256_store_ps(acc + n * ld + j, _mm256_setzero_ps());
        int c = 0;
        for (; c + GEMV_IO_ROWS <= C; c += GEMV_IO_ROWS)
            io256_rows(acc, ld, inp, ldx, w, OC, c, t0, tw, GEMV_IO_ROWS, NI);
        for (; c < C; c++) io256_rows(acc, ld, inp, ldx, w, OC, c, t0, tw, 1, NI);
        for (int n = 0; n < NI; n++) {
            float *restrict o = out + (size_t)n * ldo + t0;
            const float *restrict a = acc + n * ld;
            if (bias)
                for (int j = 0; j < tw; j++) o[j] = a[j] + bias[t0 + j];
            else
                for (int j = 0; j < tw; j++) o[j] = a[j];
        }
    }
}

T256 static void io_256(float *restrict out, int ldo, const float *restrict inp, int ldx, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int j0, int j1) {
    switch (N) {
    case 1: io256_n(out, ldo, inp, ldx, w, bias, C, OC, j0, j1, 1); break;
    case 2: io256_n(out, ldo, inp, ldx, w, bias, C, OC, j0, j1, 2); break;
    case 3: io256_n(out, ldo, inp, ldx, w, bias, C, OC, j0, j1, 3); break;
    default: io256_n(out, ldo, inp, ldx, w, bias, C, OC, j0, j1, 4); break;
    }
}
#endif /* GEMV_X86 */

/* ------------------------------------------------------------- dispatch */

typedef void (*gemv_oi)(float *restrict out, const float *restrict inp, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int o0, int o1);
/* IN_OUT over rows [0,C) of w (its first row is the chunk's; its rows OC apart), inp rows ldx apart, out rows ldo apart */
typedef void (*gemv_io)(float *restrict out, int ldo, const float *restrict inp, int ldx, const float *restrict w,
                        const float *restrict bias, int N, int C, int OC, int j0, int j1);

/* The kernels of the vector path this CPU gets (lf__cpu_gemv_vec). */
static void pick_kernels(gemv_oi *oi, gemv_io *io) {
    const lf__cpu_vec v = lf__cpu_gemv_vec();
    *oi = oi_c;
    *io = io_c;
#if GEMV_X86
    if (v == LF_CPU_VEC_AVX512) *oi = oi_512, *io = io_512;
    else if (v == LF_CPU_VEC_AVX2) *oi = oi_256, *io = io_256;
#else
    (void)v;
#endif
}

/* Whether lf__cpu_gemv splits the rows of an IN_OUT product in halves (and where): both depend on C and OC only. */
static int io_halves(int C, int OC) { return !(OC > GEMV_KS_OC || C < 2 * GEMV_IO_ROWS); }
static int io_half_row(int C) { return C / 2 / GEMV_IO_ROWS * GEMV_IO_ROWS; }

int lf__cpu_gemv(float *restrict out, const float *restrict inp, const float *restrict weight,
                 const float *restrict bias, int N, int C, int OC, lf_weight_layout layout) {
    if (N < 1 || N > LF_CPU_GEMV_MAX_N || C < 1 || OC < 1) return 0;
    gemv_oi oi;
    gemv_io io;
    pick_kernels(&oi, &io);
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
    if (!io_halves(C, OC)) {
#pragma omp parallel if (par)
        {
            int j0, j1;
            lf__cpu_channel_slice(OC, omp_get_thread_num(), omp_get_num_threads(), &j0, &j1);
            if (j0 < j1) io(out, OC, inp, C, weight, bias, N, C, OC, j0, j1);
        }
        return 1;
    }
    /* IN_OUT, rows in two fixed halves [0,cm) and [cm,C): out gets the first
     * half's sums, hi the second's, then out = out + hi (+ bias). Threads
     * pair up, one of each pair per half, the pairs splitting the columns;
     * one thread does both halves in turn. */
    _Alignas(64) float hi[LF_CPU_GEMV_MAX_N * GEMV_KS_OC];
    const int cm = io_half_row(C);
#pragma omp parallel if (par)
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        if (nt == 1) {
            io(out, OC, inp, C, weight, NULL, N, cm, OC, 0, OC);
            io(hi, OC, inp + cm, C, weight + (size_t)cm * OC, NULL, N, C - cm, OC, 0, OC);
        } else if (t / 2 < nt / 2) {
            int j0, j1;
            lf__cpu_channel_slice(OC, t / 2, nt / 2, &j0, &j1);
            if (j0 < j1 && t % 2 == 0) io(out, OC, inp, C, weight, NULL, N, cm, OC, j0, j1);
            if (j0 < j1 && t % 2 == 1) io(hi, OC, inp + cm, C, weight + (size_t)cm * OC, NULL, N, C - cm, OC, j0, j1);
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

/* ------------------------------------------------------------- batch-invariant GEMM */

int lf__cpu_gemm_invariant(float *restrict out, const float *restrict inp, const float *restrict weight,
                           const float *restrict bias, int N, int C, int OC, lf_weight_layout layout) {
    if (N < 1 || C < 1 || OC < 1) return 0;
    if (N <= LF_CPU_GEMV_MAX_N) return lf__cpu_gemv(out, inp, weight, bias, N, C, OC, layout);
    gemv_oi oi;
    gemv_io io;
    pick_kernels(&oi, &io);
    const int par = (long)N * C * OC >= LF_CPU_PAR_MIN;
    const int NB = LF_CPU_GEMV_MAX_N;
    if (layout == LF_W_OUT_IN) {
        /* tiles of output rows of W (whole rows of C), a multiple of LF_CPU_CBLK so threads never share a line of out */
        long tr = GEMM_TILE_BYTES / ((long)C * (long)sizeof(float));
        tr = tr / LF_CPU_CBLK * LF_CPU_CBLK;
        if (tr < LF_CPU_CBLK) tr = LF_CPU_CBLK;
        const int TR = tr > OC ? OC : (int)tr;
#pragma omp parallel if (par)
        {
            int o0, o1;
            lf__cpu_channel_slice(OC, omp_get_thread_num(), omp_get_num_threads(), &o0, &o1);
            for (int t0 = o0; t0 < o1; t0 += TR) {
                const int t1 = o1 - t0 < TR ? o1 : t0 + TR;
                for (int n0 = 0; n0 < N; n0 += NB)
                    oi(out + (size_t)n0 * OC, inp + (size_t)n0 * C, weight, bias, N - n0 < NB ? N - n0 : NB, C, OC, t0,
                       t1);
            }
        }
        return 1;
    }
    /* IN_OUT: tiles of columns of W (all C rows of them) */
    long tc = GEMM_TILE_BYTES / ((long)C * (long)sizeof(float));
    tc = tc / LF_CPU_CBLK * LF_CPU_CBLK;
    if (tc < LF_CPU_CBLK) tc = LF_CPU_CBLK;
    if (tc > GEMM_IO_TILE) tc = GEMM_IO_TILE;
    const int TC = (int)tc;
    const int halves = io_halves(C, OC), cm = io_half_row(C);
#if GEMV_X86
    if (lf__cpu_gemv_vec() == LF_CPU_VEC_AVX512) {
#pragma omp parallel if (par)
        {
            int j0, j1;
            lf__cpu_channel_slice(OC, omp_get_thread_num(), omp_get_num_threads(), &j0, &j1);
            if (j0 < j1) io512_invariant(out, inp, weight, bias, N, C, OC, j0, j1, halves, cm);
        }
        return 1;
    }
#endif
#pragma omp parallel if (par)
    {
        _Alignas(64) float hi[LF_CPU_GEMV_MAX_N * GEMM_IO_TILE];
        int j0, j1;
        lf__cpu_channel_slice(OC, omp_get_thread_num(), omp_get_num_threads(), &j0, &j1);
        for (int t0 = j0; t0 < j1; t0 += TC) {
            const int t1 = j1 - t0 < TC ? j1 : t0 + TC, w = t1 - t0;
            for (int n0 = 0; n0 < N; n0 += NB) {
                const int nb = N - n0 < NB ? N - n0 : NB;
                float *restrict o = out + (size_t)n0 * OC;
                const float *restrict x = inp + (size_t)n0 * C;
                if (!halves) {
                    io(o, OC, x, C, weight, bias, nb, C, OC, t0, t1);
                    continue;
                }
                /* hi: columns [t0,t1) of the nb rows, w apart (W seen from its column t0 on, columns [0,w)) */
                io(o, OC, x, C, weight, NULL, nb, cm, OC, t0, t1);
                io(hi, w, x + cm, C, weight + (size_t)cm * OC + t0, NULL, nb, C - cm, OC, 0, w);
                for (int n = 0; n < nb; n++) {
                    float *restrict on = o + (size_t)n * OC + t0;
                    const float *restrict h = hi + (size_t)n * w;
                    const float *restrict b = bias ? bias + t0 : NULL;
                    if (b)
                        for (int j = 0; j < w; j++) on[j] = (on[j] + h[j]) + b[j];
                    else
                        for (int j = 0; j < w; j++) on[j] = on[j] + h[j];
                }
            }
        }
    }
    return 1;
}
