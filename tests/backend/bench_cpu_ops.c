/* Micro-benchmark of the CPU backend ops at GPT-2 small shapes (not a test:
 * build by hand, see the command at the end of this comment). Prints ms per
 * call and the achieved GFLOP/s or GB/s.
 *   cc -O3 -march=native -fopenmp -Iinclude -Isrc -I/usr/include/x86_64-linux-gnu/openblas-openmp \
 *      tests/backend/bench_cpu_ops.c build-backend/liblf_backend_cpu.a build-backend/liblf_core.a \
 *      -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lcjson -lcrypto -lz -lm -o /tmp/bench
 *   /tmp/bench [B] [T]                                                                        */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "backend/backend_impl.h"
#include "llmforge/backend_cpu.h"

static float *rnd(size_t n, float s, uint64_t k) {
    float *x = lf_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = s * lf_rng_normal(k, LF_RNG_BENCH, i);
    return x;
}

#define TIME(label, reps, work, unit, call)                                                \
    do {                                                                                   \
        call;                                                                              \
        double t0_ = lf_time_now();                                                        \
        for (int r_ = 0; r_ < (reps); r_++) call;                                          \
        double dt_ = (lf_time_now() - t0_) / (reps);                                       \
        printf("%-28s %9.3f ms  %8.1f %s\n", label, dt_ * 1e3, (work) / dt_ / 1e9, unit);  \
    } while (0)

int main(int argc, char **argv) {
    lf_backend *o = lf_backend_get("cpu");
    int B = argc > 1 ? atoi(argv[1]) : 4, T = argc > 2 ? atoi(argv[2]) : 1024;
    const int C = 768, NH = 12, V = 50257, Vp = 50304, N = B * T;
    printf("B=%d T=%d C=%d NH=%d threads=%d\n", B, T, C, NH, lf_backend_cpu_threads());
    float *x = rnd((size_t)N * 4 * C, 1, 1), *y = rnd((size_t)N * 4 * C, 1, 2);
    float *w = rnd((size_t)4 * C * C, 0.02f, 3), *bias = rnd(4 * C, 0.02f, 4);
    float *out = rnd((size_t)N * 4 * C, 1, 5), *dx = rnd((size_t)N * 4 * C, 1, 6);
    float *dw = rnd((size_t)4 * C * C, 1, 7), *db = rnd(4 * C, 1, 8);
    float *mean = rnd(N, 1, 9), *rstd = rnd(N, 1, 10);
    float *att = lf_alloc((size_t)B * NH * T * T * 4), *scr = lf_alloc((size_t)B * NH * T * T * 4);
    double nc = (double)N * C, mmf = 2.0 * N * C * 3 * C;
    TIME("matmul fwd C->3C", 5, mmf, "GFLOP/s", o->ops->matmul_forward(o, out, x, LF_DT_F32, w, bias, N, C, 3 * C, LF_W_IN_OUT));
    TIME("matmul bwd C->3C", 5, 2 * mmf, "GFLOP/s", o->ops->matmul_backward(o, dx, dw, db, y, x, LF_DT_F32, w, N, C, 3 * C, LF_W_IN_OUT));
    double af = 4.0 * B * NH * (double)T * T * (C / NH) / 2; /* causal half: QK^T and AV */
    lf_dropout d0 = {0, 1, 2}, d1 = {0.1f, 1, 2};
    TIME("attention fwd", 3, af, "GFLOP/s", o->ops->attention_forward(o, out, att, x, B, T, C, NH, NH, d0));
    TIME("attention bwd", 3, 2 * af, "GFLOP/s", o->ops->attention_backward(o, dx, scr, y, x, att, B, T, C, NH, NH, d0));
    TIME("attention fwd p=0.1", 1, af, "GFLOP/s", o->ops->attention_forward(o, out, att, x, B, T, C, NH, NH, d1));
    TIME("attention bwd p=0.1", 1, 2 * af, "GFLOP/s", o->ops->attention_backward(o, dx, scr, y, x, att, B, T, C, NH, NH, d1));
    TIME("layernorm fwd", 10, nc * 8, "GB/s", o->ops->layernorm_forward(o, out, LF_DT_F32, mean, rstd, x, w, bias, N, C));
    TIME("layernorm bwd", 10, nc * 16, "GB/s", o->ops->layernorm_backward(o, dx, dw, db, y, x, w, mean, rstd, N, C));
    TIME("gelu fwd 4C", 10, nc * 32, "GB/s", o->ops->gelu_forward(o, out, LF_DT_F32, x, (size_t)N * 4 * C));
    TIME("gelu bwd 4C", 10, nc * 48, "GB/s", o->ops->gelu_backward(o, dx, x, y, (size_t)N * 4 * C));
    TIME("residual fwd", 10, nc * 12, "GB/s", o->ops->residual_forward(o, out, x, y, (size_t)N * C));
    TIME("residual bwd", 10, nc * 20, "GB/s", o->ops->residual_backward(o, dx, out, y, (size_t)N * C));
    TIME("dropout fwd p=0.1", 3, nc * 8, "GB/s", o->ops->dropout_forward(o, out, x, (size_t)N * C, d1));
    int32_t *tok = malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(lf_rng_u64(1, LF_RNG_BENCH, i) % V);
    float *wte = rnd((size_t)Vp * C, 0.02f, 11), *dwte = rnd((size_t)Vp * C, 0.02f, 12);
    TIME("encoder fwd", 10, nc * 12, "GB/s", o->ops->encoder_forward(o, out, tok, wte, w, B, T, C));
    TIME("encoder bwd", 10, nc * 16, "GB/s", o->ops->encoder_backward(o, dwte, dw, y, tok, B, T, C));
    float *logits = rnd((size_t)N * Vp, 2, 13), *losses = malloc(N * 4);
    float *dl = lf_alloc((size_t)N * Vp * 4);
    TIME("lm_head fwd (wte^T)", 2, 2.0 * N * C * Vp, "GFLOP/s", o->ops->matmul_forward(o, dl, x, LF_DT_F32, wte, NULL, N, C, Vp, LF_W_OUT_IN));
    TIME("crossentropy fwd+bwd", 3, (double)N * Vp * 8, "GB/s", o->ops->crossentropy_forward_backward(o, losses, dl, logits, tok, N, V, Vp, 1.0f / N));
    size_t np = 124000000;
    float *p = lf_alloc(np * 4), *g = lf_alloc(np * 4), *m = lf_alloc(np * 4), *v = lf_alloc(np * 4);
    o->ops->zero(o, p, np); o->ops->zero(o, g, np); o->ops->zero(o, m, np); o->ops->zero(o, v, np);
    TIME("adamw 124M", 3, np * 28.0, "GB/s", o->ops->adamw_update(o, p, g, m, v, np, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 3));
    TIME("sum_squares 124M", 3, np * 4.0, "GB/s", (void)o->ops->sum_squares(o, g, np));
    return 0;
}
