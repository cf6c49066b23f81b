/* Benchmark of bf16 activation storage (not a test: build by hand after
 * building build, see below): two GPT-2 124M models on "cpu-bf16" in one
 * process, one storing the matmul inputs in fp32, the other in bf16, run
 * forward + backward on the same batch alternately, step by step, so both
 * see the same machine load. Prints the mean forward and backward times and
 * the best forward + backward of each, and the planned activation bytes.
 * The OpenMP thread count is the first argument (each thread a replica).
 *   cc -O3 -march=native -fopenmp -Iinclude -Isrc tests/model/bench_bf16_acts.c \
 *      build/liblf_model.a build/liblf_backend.a build/liblf_backend_cpu.a build/liblf_core.a \
 *      -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl -lcjson -lcrypto -lz -lm \
 *      -o /tmp/bench_bf16_acts
 *   /tmp/bench_bf16_acts [threads] [steps] [B] [T]      (default 2 5 4 256) */
#include <stdio.h>
#include <stdlib.h>
#include "llmforge/backend.h"
#include "llmforge/model.h"
#include "llmforge/backend_cpu.h"

static void check(lf_status st, const char *what) {
    if (st == LF_OK) return;
    fprintf(stderr, "%s: %s\n", what, lf_last_error());
    exit(1);
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2, steps = argc > 2 ? atoi(argv[2]) : 5;
    const int B = argc > 3 ? atoi(argv[3]) : 4, T = argc > 4 ? atoi(argv[4]) : 256;
    if (threads < 1 || steps < 1 || B < 1 || T < 1 || T > 1024) {
        fprintf(stderr, "usage: bench_bf16_acts [threads] [steps] [B] [T<=1024]\n");
        return 2;
    }
    lf_backend_cpu_set_threads(threads);
    const lf_model_config c = {.n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024, .vocab_size = 50257,
                              .padded_vocab_size = 50304, .bias = 1};
    lf_backend *be = lf_backend_get("cpu-bf16");
    lf_model *m[2];
    size_t bytes[2];
    for (int d = 0; d < 2; d++) {
        check(lf_model_create(&m[d], &c, be), "create");
        check(lf_model_init_weights(m[d], 1), "init");
        check(lf_model_set_act_dtype(m[d], (lf_act_dtype)d), "act dtype");
        check(lf_model_plan(m[d], B, T, &bytes[d]), "plan");
    }
    int32_t *x = malloc(sizeof(int32_t) * (size_t)B * T), *y = malloc(sizeof(int32_t) * (size_t)B * T);
    if (!x || !y) return 1;
    for (int i = 0; i < B * T; i++) {
        x[i] = (int32_t)(lf_rng_u64(3, LF_RNG_BENCH, (uint64_t)i) % 50257);
        y[i] = (int32_t)(lf_rng_u64(4, LF_RNG_BENCH, (uint64_t)i) % 50257);
    }
    double fwd[2] = {0, 0}, bwd[2] = {0, 0}, best[2] = {1e30, 1e30};
    for (int s = 0; s <= steps; s++) /* step 0 warms up (weight copies, primitives, scratch) */
        for (int d = 0; d < 2; d++) {
            lf_forward_opts fo = {.dloss = 1.0f / (float)(B * T), .train = 1};
            double t0 = lf_time_now();
            check(lf_model_forward(m[d], x, y, B, T, &fo, NULL, NULL), "forward");
            double t1 = lf_time_now();
            check(lf_model_backward(m[d]), "backward");
            double t2 = lf_time_now();
            if (s == 0) continue;
            fwd[d] += t1 - t0;
            bwd[d] += t2 - t1;
            if (t2 - t0 < best[d]) best[d] = t2 - t0;
        }
    printf("GPT-2 124M, batch %d x %d, %d threads, %d steps each, alternating\n", B, T, threads, steps);
    for (int d = 0; d < 2; d++)
        printf("%s storage: activations %.1f MB; forward %.1f ms, backward %.1f ms (means); best forward+backward "
               "%.1f ms\n",
               lf_act_dtype_name((lf_act_dtype)d), bytes[d] / 1e6, fwd[d] / steps * 1e3, bwd[d] / steps * 1e3,
               best[d] * 1e3);
    for (int d = 0; d < 2; d++) lf_model_free(m[d]);
    free(x);
    free(y);
    return 0;
}
