/*
 * The fp32 FMA peak of this machine, the denominator of MFU
 * (lf_backend_cpu_peak_flops; src/train/bench.c and the trainer report it).
 *
 * A peak is only a peak if the loop keeps every FMA unit busy every cycle:
 * enough independent accumulation chains to cover FMA latency x FMA ports,
 * and no more than the register file holds, or the chains spill to the
 * stack and the loop measures loads and stores instead (the old probe ran 10
 * chains of 16-lane GCC vectors: on AVX2 that is 20 ymm registers of 16, it
 * spilled, and reported 15 GFLOP/s on a Zen 3 whose peak is ~190, hence
 * an MFU of 1036%). So one kernel per ISA level, each in a file compiled for
 * its ISA (CMakeLists.txt) and chosen by the backend's ISA level (cpu_isa.c):
 *  - AVX2 (cpu_peak_avx2.c): 12 chains of 8-lane FMAs + the multiplier and
 *    the addend = 14 of 16 ymm registers; 12 >= latency 4-5 x 2 ports of
 *    current x86 cores;
 *  - AVX-512 (cpu_peak_avx512.c): 24 chains of 16-lane FMAs + 2 = 26 of 32
 *    zmm registers;
 *  - generic (here): 12 chains of 4-lane multiply-adds (SSE has no FMA).
 * tests/backend/test_peak.c checks that the figure is never below what an
 * sgemm of the same process reaches on the same threads (a product cannot
 * beat the FMA units it runs on), and the loops' disassembly was checked to
 * hold the chains in registers (no stack access inside the loop).
 *
 * Threads: one team of omp_get_max_threads() threads, each running the
 * kernel on its own core's units. The figure is the best round's (the flops
 * of all threads over the round's wall time), not the mean over `seconds`:
 * a peak is what the hardware sustains, and on a shared machine a round in
 * which another process held a core measures that process (2 threads on a
 * 2-core VM under a load of 6: the mean was 0.3-0.5x of the best round, and
 * below what an sgemm reached in the same minute).
 */
#include <omp.h>
#include "cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"

typedef float peak_v4 __attribute__((vector_size(16)));

/* The generic kernel: 12 chains of a = a*mul + add (two flops a lane); a
 * chain's multiply then add is ~6 cycles of latency, so 12 chains keep two
 * multipliers and two adders busy (8 chains measured 10.7 flops/cycle on a
 * Zen 4 where oneDNN's SSE4.1 sgemm reached 10.9), in 14 of 16 registers. */
static double peak_kernel_generic(long iters, float seed) {
    peak_v4 mul = (peak_v4){0} + 0.9999999f, add = (peak_v4){0} + 1e-7f;
    peak_v4 a[12];
    for (int c = 0; c < 12; c++) a[c] = (peak_v4){0} + (seed + (float)c);
    for (long i = 0; i < iters; i++) {
        a[0] = a[0] * mul + add;
        a[1] = a[1] * mul + add;
        a[2] = a[2] * mul + add;
        a[3] = a[3] * mul + add;
        a[4] = a[4] * mul + add;
        a[5] = a[5] * mul + add;
        a[6] = a[6] * mul + add;
        a[7] = a[7] * mul + add;
        a[8] = a[8] * mul + add;
        a[9] = a[9] * mul + add;
        a[10] = a[10] * mul + add;
        a[11] = a[11] * mul + add;
    }
    peak_v4 s = a[0];
    for (int c = 1; c < 12; c++) s += a[c];
    const float sink = s[0] + s[1] + s[2] + s[3];
    __asm__ volatile("" ::"r"(&sink) : "memory");
    return (double)iters * 12 * 4 * 2;
}

double lf_backend_cpu_peak_flops(double seconds) {
    const lf__cpu_isa_level isa = lf__cpu_isa();
    double (*kernel)(long, float) = isa >= LF_CPU_ISA_AVX512 ? lf__cpu_peak_kernel_avx512
                                    : isa >= LF_CPU_ISA_AVX2 ? lf__cpu_peak_kernel_avx2
                                                             : peak_kernel_generic;
    const long iters = 1L << 18; /* per round and thread: 0.5-2 ms */
    double best = 0, round_flops = 0, round_start = 0, round_end = 0;
    int done = 0;
    const double t0 = lf_time_now();
    /* one team for all rounds; a round's time runs from its first thread's
     * start to its last thread's end, so the threads' work overlaps in it
     * and fork/join costs stay out */
#pragma omp parallel
    for (int r = 0;; r++) {
#pragma omp barrier
        const double start = lf_time_now();
        const double flops = kernel(iters, (float)omp_get_thread_num());
        const double end = lf_time_now();
#pragma omp critical(lf_peak)
        {
            round_flops += flops;
            if (round_start == 0 || start < round_start) round_start = start;
            if (end > round_end) round_end = end;
        }
#pragma omp barrier
#pragma omp single
        {
            if (round_end > round_start && round_flops / (round_end - round_start) > best)
                best = round_flops / (round_end - round_start);
            round_flops = round_start = round_end = 0;
            done = r >= 1 && lf_time_now() - t0 >= seconds;
        } /* the single's barrier: every thread reads the same done */
        if (done) break;
    }
    return best;
}
