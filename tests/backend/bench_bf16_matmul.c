/* Micro-benchmark of the matmul op, fp32 ("cpu": cpu_gemm.c's sgemm) against
 * bf16 ("cpu-bf16": oneDNN, or fp32 products without bf16 instructions), at
 * GPT-2 small shapes (not a test: build by hand after building build-bf, see
 * below). Prints ms per call and GFLOP/s for forward, backward (dinp +
 * dweight) with the input given in fp32 and stored in bf16 (what the model
 * hands the op on cpu-bf16), and forward with the weight converted every call
 * (params_changed before each: the cost without the weight-copy cache), with
 * the OpenMP thread count of the environment; run with OMP_NUM_THREADS=1 for
 * what one model replica sees, and with ONEDNN_MAX_CPU_ISA=AVX2 for the path
 * of CPUs without bf16 instructions.
 *   cc -O3 -march=native -fopenmp -Iinclude -Isrc -I/usr/include/x86_64-linux-gnu/openblas-openmp \
 *      tests/backend/bench_bf16_matmul.c build-bf/liblf_backend.a build-bf/liblf_backend_cpu.a build-bf/liblf_core.a \
 *      -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl -lcjson -lcrypto -lz -lm \
 *      -o /tmp/bench_bf16
 *   OMP_NUM_THREADS=1 /tmp/bench_bf16 [N] [C] [OC] [reps]      (default 1024 768 3072 10) */
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include "backend/backend_impl.h"
#include "backend/cpu/cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"

static float *rnd(size_t n, float s, uint64_t k) {
    float *x = lf_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = s * lf_rng_normal(k, LF_RNG_BENCH, i);
    return x;
}

#define TIME(label, reps, flops, call)                                                      \
    do {                                                                                    \
        call;                                                                               \
        double t0_ = lf_time_now();                                                         \
        for (int r_ = 0; r_ < (reps); r_++) call;                                           \
        double dt_ = (lf_time_now() - t0_) / (reps);                                        \
        printf("%-34s %9.3f ms  %8.1f GFLOP/s\n", label, dt_ * 1e3, (flops) / dt_ / 1e9);   \
    } while (0)

int main(int argc, char **argv) {
    const int N = argc > 1 ? atoi(argv[1]) : 1024, C = argc > 2 ? atoi(argv[2]) : 768;
    const int OC = argc > 3 ? atoi(argv[3]) : 3072, reps = argc > 4 ? atoi(argv[4]) : 10;
    lf_backend *f = lf_backend_get("cpu"), *h = lf_backend_get("cpu-bf16");
    float *x = rnd((size_t)N * C, 1.0f, 1), *w = rnd((size_t)C * OC, 0.02f, 2), *b = rnd((size_t)OC, 0.1f, 3);
    float *out = lf_alloc((size_t)N * OC * sizeof(float)), *dout = rnd((size_t)N * OC, 1e-3f, 4);
    float *dx = lf_alloc((size_t)N * C * sizeof(float)), *dw = lf_alloc((size_t)C * OC * sizeof(float));
    uint16_t *xh = lf_alloc((size_t)N * C * sizeof(uint16_t));
    lf__cpu_cast_bf16(xh, x, (size_t)N * C);
    const double fl = 2.0 * N * C * OC;
    printf("matmul %d x %d @ %d x %d, %d threads; bf16 kernel: %s\n", N, C, C, OC, omp_get_max_threads(),
           lf_backend_cpu_bf16_kernel());
    for (int L = 0; L < 2; L++) {
        const lf_weight_layout lay = (lf_weight_layout)L;
        printf("-- layout %s\n", L == 0 ? "IN_OUT (Conv1D: x @ W)" : "OUT_IN (lm_head: x @ W^T)");
        TIME("fp32 forward", reps, fl, f->ops->matmul_forward(f, out, x, LF_DT_F32, w, b, N, C, OC, lay));
        TIME("bf16 forward", reps, fl, h->ops->matmul_forward(h, out, x, LF_DT_F32, w, b, N, C, OC, lay));
        TIME("bf16 forward, input stored bf16", reps, fl,
             h->ops->matmul_forward(h, out, xh, LF_DT_BF16, w, b, N, C, OC, lay));
        TIME("bf16 forward, weight converted", reps, fl,
             (h->ops->params_changed(h), h->ops->matmul_forward(h, out, x, LF_DT_F32, w, b, N, C, OC, lay)));
        TIME("fp32 backward (dinp + dweight)", reps, 2 * fl,
             f->ops->matmul_backward(f, dx, dw, NULL, dout, x, LF_DT_F32, w, N, C, OC, lay));
        TIME("bf16 backward (dinp + dweight)", reps, 2 * fl,
             h->ops->matmul_backward(h, dx, dw, NULL, dout, x, LF_DT_F32, w, N, C, OC, lay));
        TIME("bf16 backward, input stored bf16", reps, 2 * fl,
             h->ops->matmul_backward(h, dx, dw, NULL, dout, xh, LF_DT_BF16, w, N, C, OC, lay));
    }
    lf_free(xh), lf_free(x), lf_free(w), lf_free(b), lf_free(out), lf_free(dout), lf_free(dx), lf_free(dw);
    lf__cpu_bf16_release();
    return 0;
}
