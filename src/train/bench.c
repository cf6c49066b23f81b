/*
 * Throughput benchmark: timed training steps of a GPT-2 on random tokens
 * (forward, backward, clip, AdamW — the trainer's own step without data I/O),
 * and a probe of the machine's fp32 FMA rate to report MFU against.
 * FLOPs are counted as nanoGPT/PaLM do: 6N + 12*L*C*T per token, N = the
 * parameters without the position embedding.
 * With a LoRA config (lf_bench_train_lora) the adapters are attached before
 * the plan, as the trainer does (trainer_create.c): the base is frozen, the
 * model runs one replica, and AdamW's moments cover the adapters only; the
 * FLOPs stay the model's 6N + 12*L*C*T (the useful work of a full step), so
 * tokens/s compare directly with full fine-tuning.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/backend.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"
#include "llmforge/backend_cpu.h"

/* The FMA probe: the CPU backend's per-ISA kernels (cpu_peak.c), on this
 * process's threads. */
double lf_probe_peak_flops(double seconds) { return lf_backend_cpu_peak_flops(seconds); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

lf_status lf_bench_train(const lf_model_config *cfg, int B, int T, lf_recompute recompute, int bf16, int steps,
                         int warmup, double peak_flops, lf_bench_result *out) {
    return lf_bench_train_lora(cfg, NULL, B, T, recompute, bf16, steps, warmup, peak_flops, out);
}

lf_status lf_bench_train_lora(const lf_model_config *cfg, const lf_lora_config *lora, int B, int T,
                              lf_recompute recompute, int bf16, int steps, int warmup, double peak_flops,
                              lf_bench_result *out) {
    memset(out, 0, sizeof *out);
    if (steps < 1 || warmup < 0) return lf_fail(LF_ERR_RANGE, "bench: steps must be >= 1 and warmup >= 0");
    if (T > cfg->block_size)
        return lf_fail(LF_ERR_RANGE, "bench: sequence length %d exceeds block_size %d", T, cfg->block_size);
    lf_backend *be = lf_backend_get(lf_backend_precision_name(lf_backend_default_name(), bf16));
    if (!be) return LF_ERR_NOT_FOUND;
    if (lf_backend_is_device(be)) {
        /* a device: the trainer's memory plan of the same step (parameters,
         * gradients, two moments, the activations of B x T under the policy)
         * against the device's free memory, so a step that cannot fit is the
         * planned error with its advice, not an allocation failure midway */
        lf_train_config pc = lf_train_config_default();
        pc.model = *cfg;
        pc.model.block_size = T; /* the plan's sequence; wpe is sized by block_size, a few rows less */
        pc.micro_batch = B;
        pc.grad_accum = 1;
        pc.recompute = (int)recompute;
        pc.bf16 = bf16;
        if (lf_lora_enabled(lora)) pc.lora = *lora;
        lf_mem_plan plan;
        lf_status pst = lf_mem_plan_make_backend(&plan, &pc, &pc.model, be, 0);
        if (pst == LF_OK) pst = lf_mem_plan_check(&plan, &pc, &pc.model);
        if (pst != LF_OK) return pst; /* the plan's message; bench's --micro-batch, --recompute, --bf16 are its keys */
    }
    lf_model *m = NULL;
    float *m1 = NULL, *m2 = NULL;
    int32_t *x = NULL, *y = NULL;
    double *times = NULL;
    lf_status st = lf_model_create(&m, cfg, be);
    if (st != LF_OK) goto done;
    /* LoRA before the weights, as the trainer: the base's gradient buffer goes first */
    if (lf_lora_enabled(lora) && (st = lf_model_lora_attach(m, lora, 1337)) != LF_OK) goto done;
    st = lf_model_init_weights(m, 1337);
    if (st != LF_OK) goto done;
    size_t act_bytes = 0;
    st = lf_model_set_recompute(m, recompute);
    if (st == LF_OK) st = lf_model_plan(m, B, T, &act_bytes);
    if (st != LF_OK) goto done;
    size_t n = lf_model_train_num_params(m), BT = (size_t)B * T; /* what AdamW updates */
    m1 = lf_backend_alloc(be, n * sizeof(float));
    m2 = lf_backend_alloc(be, n * sizeof(float));
    x = lf_alloc(BT * sizeof(int32_t));
    y = lf_alloc(BT * sizeof(int32_t));
    times = calloc((size_t)steps, sizeof(double));
    if (!m1 || !m2 || !x || !y || !times) {
        st = lf_fail(LF_ERR_NOMEM, "bench: out of memory");
        goto done;
    }
    lf_backend_zero(be, m1, n);
    lf_backend_zero(be, m2, n);
    lf_train_config tc = lf_train_config_default();
    tc.grad_clip = 1.0f;
    for (int s = 0; s < warmup + steps; s++) {
        for (size_t i = 0; i < BT; i++) {
            x[i] = (int32_t)(lf_rng_u64(7, LF_RNG_BENCH, (uint64_t)s * BT * 2 + i) % (uint64_t)cfg->vocab_size);
            y[i] = (int32_t)(lf_rng_u64(7, LF_RNG_BENCH, (uint64_t)s * BT * 2 + BT + i) % (uint64_t)cfg->vocab_size);
        }
        double t0 = lf_time_now();
        lf_model_zero_grad(m);
        lf_forward_opts fo = {.dloss = 1.0f / (float)BT, .train = 1, .seed = 1, .key = (uint64_t)s};
        double loss;
        long cnt;
        st = lf_model_forward(m, x, y, B, T, &fo, &loss, &cnt);
        if (st != LF_OK) goto done;
        st = lf_model_backward(m);
        if (st != LF_OK) goto done;
        double norm;
        st = lf_adamw_step(m, be, m1, m2, s + 1, 6e-4f, &tc, &norm);
        if (st != LF_OK) goto done;
        double dt = lf_time_now() - t0;
        if (s >= warmup) times[s - warmup] = dt;
    }
    qsort(times, (size_t)steps, sizeof(double), cmp_double);
    double med = steps % 2 ? times[steps / 2] : 0.5 * (times[steps / 2 - 1] + times[steps / 2]);
    out->steps = steps;
    out->ms_per_step = med * 1e3;
    out->ms_min = times[0] * 1e3;
    out->ms_max = times[steps - 1] * 1e3;
    out->tokens_per_sec = (double)BT / med;
    out->flops_per_token = lf_model_flops_per_token(cfg, T);
    out->model_flops_per_sec = out->flops_per_token * out->tokens_per_sec;
    /* the FMA probe measures this host's CPU: on a device no peak is known
     * unless given (scripts/gpu-check.sh passes bench/cuda_peak's GEMM rate) */
    out->peak_flops = peak_flops > 0 ? peak_flops : !lf_backend_is_device(be) ? lf_probe_peak_flops(0.5) : 0;
    out->mfu = out->peak_flops > 0 ? out->model_flops_per_sec / out->peak_flops : 0;
    out->num_params = lf_model_num_params(m);
    out->trainable_params = n;
    out->activation_bytes = act_bytes;
done:
    if (m1) lf_backend_free(be, m1);
    if (m2) lf_backend_free(be, m2);
    lf_free(x);
    lf_free(y);
    free(times);
    lf_model_free(m);
    return st;
}
