/*
 * Running on the "cuda" backend: how a run selects it, its memory plan
 * against the device's memory, out-of-memory as the planned error, and
 * determinism at size. One source, two programs: cuda.test_cuda_run on the
 * CUDA-on-CPU shim (every CI run; small sizes, the shim's fake device memory
 * and its allocation-failure injection) and gpu.test_cuda_run on a real GPU
 * (SKIPPED where none answers; sizes from cudaMemGetInfo, GPT-2 124M's shape).
 *
 * Checked:
 *  - selection: "cuda" selects the registered table; "auto" is LLMFORGE_BACKEND
 *    when set, else cuda (a device answers here); a name given wins over the
 *    environment; an unknown name fails naming the backends there are;
 *  - the plan on a device backend: the device items (parameters, gradients,
 *    moments, activations) add up to device_total, the host items to
 *    host_total; device_free is cudaMemGetInfo's free after the instance
 *    opened; the formatted plan names the device and says DOES NOT FIT when
 *    the device part exceeds it;
 *  - the trainer refuses such a run before allocating the model: LF_ERR_NOMEM,
 *    the message naming device memory, the largest consumers and the CPU
 *    plan's advice (a smaller micro-batch, a recompute policy, ...); the
 *    advised micro-batch then fits; a model too large for the device at
 *    micro-batch 1 is told to shrink;
 *  - an allocation that fails at run time although the plan fit (the shim:
 *    lf_shim_fail_malloc at every cudaMalloc of the setup in turn; the GPU:
 *    a request past the free memory) is LF_ERR_NOMEM with the plan's advice,
 *    leaves the instance usable and leaks no device memory;
 *  - determinism: two training runs of the same model (dropout on) give the
 *    same bits, losses and parameters (fixed-order reductions, no float
 *    atomics: src/backend/cuda/README.md), at GPT-2 124M's shape on a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../test_util.h"
#include "backend/backend_impl.h"
#include "llmforge/data.h"
#include "llmforge/model.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"
#include "llmforge/backend_cuda.h"
#include "cuda_test_util.h"
#ifdef LF_CUDA_SHIM
#include "shim/lf_shim.h"
#endif

/* The run's data: a char dataset of generated text in a temporary directory
 * (65 distinct characters, as Tiny Shakespeare's), so the gpu program needs
 * no file beside the bundle scripts/gpu-check.sh carries. */
static char *tmp;
static char data_dir[600];
enum { VOCAB = 65, TEXT_BYTES = 65536 };

static int make_data(void) {
    static const char alphabet[VOCAB + 1] = "\n !$&',-.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz3";
    tmp = lf_test_tmpdir();
    char *text = malloc(TEXT_BYTES);
    if (!text) return -1;
    for (int i = 0; i < TEXT_BYTES; i++) /* every character once, then a seeded stream of them */
        text[i] = alphabet[i < VOCAB ? i : (int)(lf_rng_u64(5, LF_RNG_TEST, (uint64_t)i) % VOCAB)];
    char path[700];
    snprintf(path, sizeof path, "%s/text.txt", tmp);
    lf_status st = lf_file_write_all(path, text, TEXT_BYTES);
    free(text);
    if (st != LF_OK) return -1;
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp);
    lf_prepare_stats ps;
    return lf_prepare_char(path, data_dir, &ps) == LF_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    lf_test_rmrf(tmp);
    free(tmp);
    return 0;
}

static int setup(void **state) {
    (void)state;
    if (lf_backend_cuda_register() != LF_OK) return -1;
    return make_data();
}

/* a small GPT-2 run on the char data */
static lf_train_config cfg_of(const char *name, int L, int C, int NH, int T, int B) {
    lf_train_config c = lf_train_config_default();
    snprintf(c.backend, sizeof c.backend, "cuda");
    c.model.n_layer = L;
    c.model.n_head = NH;
    c.model.n_embd = C;
    c.model.block_size = T;
    c.micro_batch = B;
    c.train_batch_size = B;
    c.train_iters = 1;
    c.warmup_iters = 0;
    c.decay_iters = 1;
    c.eval_interval = 0;
    c.eval_iters = 1;
    c.ckpt_interval = 0;
    c.peak_gflops = 100;
    c.registry_enabled = 0;
    c.report_enabled = 0;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, name);
    return c;
}

static lf_model_config model_of(const lf_train_config *c) {
    lf_model_config m = c->model;
    m.vocab_size = VOCAB;
    return m;
}

static size_t device_free(lf_backend *be) {
    size_t f = 0, t = 0;
    LF_ASSERT_OK(lf_backend_mem_info(be, &f, &t));
    assert_true(f > 0 && f <= t);
    return f;
}

/* ---------------------------------------------------------------- selection */

static void test_select(void **state) {
    (void)state;
    NEED_DEVICE();
    const char *n = NULL;
    unsetenv("LLMFORGE_BACKEND");
    LF_ASSERT_OK(lf_backend_select("cuda", &n));
    assert_string_equal(n, "cuda");
    LF_ASSERT_OK(lf_backend_select("auto", &n)); /* a device answers: auto is cuda */
    assert_string_equal(n, "cuda");
    LF_ASSERT_OK(lf_backend_select(NULL, &n));
    assert_string_equal(n, "cuda");
    setenv("LLMFORGE_BACKEND", "cpu-fenced", 1);
    LF_ASSERT_OK(lf_backend_select("auto", &n)); /* auto defers to the environment */
    assert_string_equal(n, "cpu-fenced");
    LF_ASSERT_OK(lf_backend_select("cpu", &n)); /* a name given wins over it */
    assert_string_equal(n, "cpu");
    LF_ASSERT_OK(lf_backend_set_default("cuda")); /* --backend wins over the environment too */
    assert_string_equal(lf_backend_default_name(), "cuda");
    LF_ASSERT_OK(lf_backend_set_default(NULL));
    assert_string_equal(lf_backend_default_name(), "cpu-fenced");
    unsetenv("LLMFORGE_BACKEND");
    assert_int_equal(lf_backend_select("cuda-fp8", &n), LF_ERR_NOT_FOUND);
    assert_non_null(strstr(lf_last_error(), "cpu, cpu-bf16, cpu-fenced, cuda"));
    assert_int_equal(lf_backend_set_default("tpu"), LF_ERR_NOT_FOUND);

    /* the config key: validated against what this program has */
    lf_train_config c;
    const char *ov[] = {"backend=cuda", "data.dataset=x"};
    LF_ASSERT_OK(lf_train_config_parse(&c, "{}", "t", 2, ov));
    assert_string_equal(c.backend, "cuda");
    const char *bad[] = {"backend=gpu", "data.dataset=x"};
    assert_int_equal(lf_train_config_parse(&c, "{}", "t", 2, bad), LF_ERR_CONFIG);
    assert_non_null(strstr(lf_last_error(), "backend"));
    assert_non_null(strstr(lf_last_error(), "cuda"));

    /* the trainer's instance is the selected one */
    lf_train_config tc = cfg_of("sel", 1, 32, 2, 16, 2);
    lf_trainer *t = NULL;
    lf_trainer_opts o = {0};
    LF_ASSERT_OK(lf_trainer_create(&t, &tc, &o));
    assert_string_equal(lf_backend_name(lf_trainer_backend(t)), "cuda");
    assert_non_null(strstr(lf_backend_device_name(lf_trainer_backend(t)), "(device 0)"));
    LF_ASSERT_OK(lf_trainer_run(t));
    lf_trainer_free(t);
}

/* ---------------------------------------------------------------- the plan */

/* The smallest power-of-two micro-batch (up to 65536) whose plan needs more
 * than twice the device's free memory: activations dominate, so the
 * micro-batch advice has something to fit. 0 when none does. */
static int overflowing_batch(lf_train_config *c, lf_backend *be, size_t free_b) {
    for (int B = 1; B <= 65536; B *= 2) {
        c->micro_batch = B;
        c->train_batch_size = B;
        lf_model_config m = model_of(c);
        lf_mem_plan p;
        LF_ASSERT_OK(lf_mem_plan_make_backend(&p, c, &m, be, 0));
        if (p.device_total / 2 > free_b) return B;
    }
    return 0;
}

static void test_plan_on_device(void **state) {
    (void)state;
    NEED_DEVICE();
#ifdef LF_CUDA_SHIM
    lf_shim_set_device_memory((size_t)96 << 20); /* 96 MiB: the run below needs more */
    lf_train_config c = cfg_of("plan", 2, 64, 4, 64, 1);
#else
    lf_train_config c = cfg_of("plan", 8, 1024, 16, 64, 1); /* 100 M parameters; activations decide */
#endif
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cuda", &be));
    const size_t free_b = device_free(be);
    const int B = overflowing_batch(&c, be, free_b);
    assert_true(B > 1);
    lf_model_config m = model_of(&c);
    lf_mem_plan p;
    LF_ASSERT_OK(lf_mem_plan_make_backend(&p, &c, &m, be, 0));
    assert_true(p.on_device);
#ifdef LF_CUDA_SHIM
    assert_int_equal(p.device_free, device_free(be));
#else
    assert_true(p.device_free <= free_b + ((size_t)64 << 20) && p.device_free + ((size_t)64 << 20) >= free_b);
#endif
    size_t dev = 0, host = 0;
    int n_dev = 0;
    for (int i = 0; i < p.n_items; i++) {
        if (p.items[i].device) dev += p.items[i].bytes, n_dev++;
        else host += p.items[i].bytes;
    }
    assert_int_equal(dev, p.device_total);
    assert_int_equal(host, p.host_total);
    assert_int_equal(dev + host, p.total);
    assert_int_equal(n_dev, 4); /* parameters, gradients, moments, activations */
    assert_true(p.items[0].device && p.items[0].bytes == p.params * 4);
    assert_non_null(strstr(p.device, "cuda: "));
    char text[8192];
    lf_mem_plan_format(&p, text, sizeof text);
    print_message("%s", text);
    assert_non_null(strstr(text, "device free (cudaMemGetInfo)"));
    assert_non_null(strstr(text, "DOES NOT FIT"));
    assert_non_null(strstr(text, p.device));
    assert_int_equal(lf_mem_plan_check(&p, &c, &m), LF_ERR_NOMEM);
    assert_non_null(strstr(lf_last_error(), "of device memory, more than the"));
    lf_backend_close(be);

    /* the trainer refuses it before the model exists, with the CPU plan's advice */
    lf_trainer *t = NULL;
    lf_trainer_opts o = {0};
    assert_int_equal(lf_trainer_create(&t, &c, &o), LF_ERR_NOMEM);
    const char *msg = lf_trainer_errmsg(t);
    print_message("refused: %s\n", msg);
    assert_non_null(strstr(msg, "of device memory, more than the"));
    assert_non_null(strstr(msg, "largest activations"));
    assert_non_null(strstr(msg, "To fit:"));
    assert_non_null(strstr(msg, "activation_checkpointing.policy"));
    const char *adv = strstr(msg, "train_micro_batch_size_per_gpu ");
    assert_non_null(adv);
    int nb = 0, na = 0;
    assert_int_equal(sscanf(adv, "train_micro_batch_size_per_gpu %d with gradient_accumulation_steps %d", &nb, &na),
                     2);
    const int enough = strstr(adv, "(not enough alone)") == NULL; /* adv lives in t */
    lf_trainer_free(t);
    assert_true(nb >= 1 && nb < B && na * nb == B);
    if (enough) { /* the advised micro-batch fits the same device */
        c.micro_batch = nb;
        c.grad_accum = na;
        LF_ASSERT_OK(lf_backend_open("cuda", &be));
        m = model_of(&c);
        LF_ASSERT_OK(lf_mem_plan_make_backend(&p, &c, &m, be, 0));
        assert_true(p.device_total <= p.device_free);
        lf_backend_close(be);
    }

    /* too large at micro-batch 1 with full recompute: a smaller model */
    lf_train_config big = cfg_of("big", 48, 8192, 64, 64, 1); /* 38.7 G parameters: 620 GB of state */
    assert_int_equal(lf_trainer_create(&t, &big, &o), LF_ERR_NOMEM);
    print_message("refused: %s\n", lf_trainer_errmsg(t));
    assert_non_null(strstr(lf_trainer_errmsg(t), "of device memory"));
    assert_non_null(strstr(lf_trainer_errmsg(t), "a smaller model"));
    /* the moments are half of it: offloading them is advised, with their bytes */
    lf_model_config bm = model_of(&big);
    LF_ASSERT_OK(lf_model_config_resolve(&bm));
    char want[96], fb[32];
    size_t u0 = 0, u1 = 0;
    snprintf(want, sizeof want, "offload_optimizer.device cpu saves %s",
             lf_fmt_bytes(2 * lf_model_unit_sizes(&bm, &u0, &u1) * sizeof(float), fb, sizeof fb));
    assert_non_null(strstr(lf_trainer_errmsg(t), want));
    lf_trainer_free(t);
#ifdef LF_CUDA_SHIM
    lf_shim_set_device_memory((size_t)8 << 30);
#endif
}

/* ---------------------------------------------------------------- bench on the device */

/* `llmforge --backend cuda bench`: a step that cannot fit the device is the
 * plan's error with its advice before anything is allocated, and a step
 * that fits runs and reports no MFU unless a peak is given (the CPU's FMA
 * probe says nothing about a GPU). */
static void test_bench_on_device(void **state) {
    (void)state;
    NEED_DEVICE();
#ifdef LF_CUDA_SHIM
    lf_shim_set_device_memory((size_t)96 << 20);
    lf_train_config c = cfg_of("bench", 2, 64, 4, 64, 1);
#else
    lf_train_config c = cfg_of("bench", 8, 1024, 16, 64, 1);
#endif
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cuda", &be));
    const int B = overflowing_batch(&c, be, device_free(be));
    lf_backend_close(be);
    assert_true(B > 1);
    lf_model_config m = model_of(&c);
    LF_ASSERT_OK(lf_backend_set_default("cuda"));
    lf_bench_result r;
    assert_int_equal(lf_bench_train(&m, B, m.block_size, LF_RECOMPUTE_NONE, 0, 1, 0, 0, &r), LF_ERR_NOMEM);
    assert_non_null(strstr(lf_last_error(), "of device memory, more than the"));
    assert_non_null(strstr(lf_last_error(), "To fit:"));
    /* a small step fits: timed, with no peak and no MFU */
    lf_model_config s = m;
    s.n_layer = 1;
    s.n_embd = 32;
    s.n_head = 2;
    s.block_size = 16;
    LF_ASSERT_OK(lf_bench_train(&s, 2, 16, LF_RECOMPUTE_NONE, 0, 1, 0, 0, &r));
    assert_true(r.ms_per_step > 0 && r.tokens_per_sec > 0);
    assert_true(r.peak_flops == 0 && r.mfu == 0);
    LF_ASSERT_OK(lf_bench_train(&s, 2, 16, LF_RECOMPUTE_NONE, 0, 1, 0, 1e9, &r)); /* a given peak */
    assert_true(r.peak_flops == 1e9 && r.mfu > 0 && fabs(r.mfu - r.model_flops_per_sec / 1e9) < 1e-12 * r.mfu);
    LF_ASSERT_OK(lf_backend_set_default(NULL));
#ifdef LF_CUDA_SHIM
    lf_shim_set_device_memory((size_t)8 << 30);
#endif
}

/* A session's planned bytes are sized on the model's own backend: the
 * cuda backend's fused attention keeps O(T) per head where the CPU's keeps
 * the T x T probabilities, so eval's automatic batch is not held to the
 * CPU's sizes on a GPU. */
static void test_session_plan_on_device(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_train_config c = cfg_of("sess", 2, 64, 4, 64, 1);
    lf_model_config mc = model_of(&c);
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cuda", &be));
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &mc, be));
    assert_ptr_equal(lf_model_backend(m), be);
    size_t cpu_b = 0, dev_b = 0;
    const int B = 4, T = 64;
    LF_ASSERT_OK(lf_session_plan_bytes(&mc, B, T, 0, &cpu_b));
    LF_ASSERT_OK(lf_model_session_plan_bytes(m, B, T, 0, &dev_b));
    /* the CPU's attention keeps the B*NH*T*T probabilities of a layer where
     * the fused one keeps a row statistic, B*NH*T floats */
    const size_t tt = (size_t)B * mc.n_head * T * T * sizeof(float), stats = (size_t)B * mc.n_head * T * sizeof(float);
    print_message("session B %d x T %d: %zu bytes on cuda, %zu on cpu\n", B, T, dev_b, cpu_b);
    assert_true(dev_b > 0 && dev_b + tt - stats <= cpu_b);
    lf_model_free(m);
    lf_backend_close(be);
}

/* ---------------------------------------------------------------- ZeRO-Offload */

/* The parameters of a trainer run of cfg c (train_iters steps), with
 * offload_optimizer cpu or not; resume: continue out_dir's checkpoint. */
static float *offload_run(lf_train_config *c, int offload, int resume, size_t *n_out, size_t *optim_dev) {
    c->offload_optimizer = offload;
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.resume = resume ? LF_RESUME_YES : LF_RESUME_NO};
    LF_ASSERT_OK(lf_trainer_create(&t, c, &o));
    LF_ASSERT_OK(lf_trainer_run(t));
    size_t pb = 0, gb = 0;
    lf_trainer_state_bytes(t, &pb, &gb, optim_dev);
    const size_t n = pb / sizeof(float);
    float *p = malloc(n * sizeof(float));
    assert_non_null(p);
    LF_ASSERT_OK(lf_trainer_copy_params(t, p));
    lf_trainer_free(t);
    *n_out = n;
    return p;
}

/* offload_optimizer.device cpu on the GPU: the moments in host memory (none
 * on the device, and the plan says so), AdamW on the CPU. One step against
 * the same step with the moments and AdamW on the device: the gradients are
 * the same bits (the same parameters, the same kernels), and the CPU's and
 * the CUDA kernel's AdamW are one expression differing by FMA contractions,
 * a few roundings of the update (~lr) and of the parameter, so each new
 * parameter agrees within 2^-21 |p| + 2^-19 lr. (Later steps amplify that
 * through AdamW's 1/sqrt(v) at near-zero gradients: test_cuda_train's loss
 * tolerance covers those; here the resumed run is compared bit for bit.) A
 * resumed offloaded run equals the uninterrupted one bit for bit (the host
 * moments are checkpointed and restored). */
static void test_offload_optimizer(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_train_config c = cfg_of("off_dev", 2, 32, 2, 16, 2);
    size_t n = 0, n2 = 0, optim_dev = 0, optim_off = 0;
    float *dev = offload_run(&c, 0, 0, &n, &optim_dev);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/off_host", tmp);
    float *off = offload_run(&c, 1, 0, &n2, &optim_off);
    assert_int_equal(n, n2);
    assert_true(optim_dev >= 2 * n * sizeof(float)); /* two moments on the device */
    assert_int_equal(optim_off, 0);                  /* none there when offloaded */
    int moved = 0, outside = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)dev[i] - off[i]);
        worst = fmax(worst, d);
        moved += d > 0;
        outside += d > 0x1p-21 * fabs(dev[i]) + 0x1p-19 * c.lr;
    }
    print_message("offload, one step: %zu parameters, %d differ, by at most %.3g (lr %g)\n", n, moved, worst, c.lr);
    assert_int_equal(outside, 0);
    free(dev);
    free(off);
    /* the plan: the moments among the host items */
    lf_model_config mc = model_of(&c);
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cuda", &be));
    lf_mem_plan p;
    LF_ASSERT_OK(lf_mem_plan_make_backend(&p, &c, &mc, be, 0));
    lf_backend_close(be);
    int found = 0;
    for (int i = 0; i < p.n_items; i++)
        if (strstr(p.items[i].name, "AdamW moments")) {
            found = 1;
            assert_non_null(strstr(p.items[i].name, "offloaded"));
            assert_int_equal(p.items[i].device, 0);
        }
    assert_true(found);
    /* 4 steps; then 2 steps and a checkpoint, resumed to 4: the same bits */
    c.train_iters = c.decay_iters = 4;
    snprintf(c.out_dir, sizeof c.out_dir, "%s/off_full", tmp);
    float *full = offload_run(&c, 1, 0, &n2, &optim_off);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/off_resume", tmp);
    c.train_iters = 2;
    c.ckpt_interval = 2;
    free(offload_run(&c, 1, 0, &n2, &optim_off));
    c.train_iters = 4;
    float *res = offload_run(&c, 1, 1, &n2, &optim_off);
    assert_memory_equal(res, full, n * sizeof(float));
    free(res);
    free(full);
}

/* ---------------------------------------------------------------- out of memory at run time */

static void test_oom_at_run_time(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cuda", &be));
    const size_t free0 = device_free(be);
    /* past the free memory: NULL, and the instance is not failed by it */
    void *p = be->ops->alloc(be, free0 + ((size_t)1 << 30));
    assert_null(p);
    LF_ASSERT_OK(lf_backend_sync(be));
    float *q = be->ops->alloc(be, 1024 * sizeof(float));
    assert_non_null(q);
    be->ops->zero(be, q, 1024);
    LF_ASSERT_OK(lf_backend_sync(be));
    be->ops->free(be, q);
#ifdef LF_CUDA_SHIM
    assert_int_equal(device_free(be), free0); /* the shim counts every byte */
    /* the trainer's setup with each of its cudaMallocs failing in turn: the
     * first is the backend's workspace (before any plan), every later one
     * comes after the plan fit and must carry its advice */
    int failures = 0, k;
    for (k = 0; k < 64; k++) {
        char name[32];
        snprintf(name, sizeof name, "oom%d", k);
        lf_train_config c = cfg_of(name, 2, 32, 2, 16, 2);
        lf_trainer *t = NULL;
        lf_trainer_opts o = {0};
        lf_shim_fail_malloc(k);
        lf_status st = lf_trainer_create(&t, &c, &o);
        lf_shim_fail_malloc(-1);
        if (st == LF_OK) {
            LF_ASSERT_OK(lf_trainer_run(t));
            lf_trainer_free(t);
            break; /* past the setup's last cudaMalloc */
        }
        const char *msg = lf_trainer_errmsg(t);
        if (st != LF_ERR_NOMEM) fail_msg("cudaMalloc %d failing gave %s: %s", k, lf_status_str(st), msg);
        if (k > 0 && (!strstr(msg, "device memory ran out on cuda") || !strstr(msg, "To fit:") ||
                      !strstr(msg, "train_micro_batch_size_per_gpu 1")))
            fail_msg("cudaMalloc %d: no plan advice in: %s", k, msg);
        if (k == 1) print_message("run-time allocation failure: %s\n", msg);
        lf_trainer_free(t);
        assert_int_equal(device_free(be), free0); /* nothing of the failed setup stays on the device */
        failures++;
    }
    assert_true(failures >= 5); /* workspace, parameters, gradients, activations, moments */
    assert_true(k < 64);
#else
    /* a driver reports free memory in pages and may keep a freed page in its pool */
    const size_t now = device_free(be), slack = (size_t)64 << 20;
    assert_true(now + slack >= free0 && now <= free0 + slack);
#endif
    lf_backend_close(be);
}

/* ---------------------------------------------------------------- determinism */

enum { STEPS = 3 };

typedef struct det_run {
    double loss[STEPS];
    float *params;
    size_t n;
} det_run;

static det_run train_steps(const lf_model_config *mc, int B, int T, lf_backend *be) {
    det_run r = {0};
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, mc, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 11));
    r.n = lf_model_num_params(m);
    size_t act = 0;
    LF_ASSERT_OK(lf_model_plan(m, B, T, &act));
    float *m1 = be->ops->alloc(be, r.n * sizeof(float)), *m2 = be->ops->alloc(be, r.n * sizeof(float));
    assert_non_null(m1);
    assert_non_null(m2);
    be->ops->zero(be, m1, r.n);
    be->ops->zero(be, m2, r.n);
    lf_train_config tc = lf_train_config_default();
    const size_t N = (size_t)B * T;
    int32_t *in = malloc(N * sizeof *in), *tg = malloc(N * sizeof *tg);
    assert_non_null(in);
    assert_non_null(tg);
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < N; i++) {
            in[i] = (int32_t)(lf_rng_u64(4, LF_RNG_TEST, (uint64_t)s * 2 * N + i) % (uint64_t)mc->vocab_size);
            tg[i] = (int32_t)(lf_rng_u64(4, LF_RNG_TEST, (uint64_t)s * 2 * N + N + i) % (uint64_t)mc->vocab_size);
        }
        lf_model_zero_grad(m);
        lf_forward_opts fo = {.dloss = 1.0f / (float)N, .train = 1, .seed = 3, .key = (uint64_t)s};
        long cnt = 0;
        double sum = 0, norm = 0;
        LF_ASSERT_OK(lf_model_forward(m, in, tg, B, T, &fo, &sum, &cnt));
        r.loss[s] = sum / (double)cnt;
        LF_ASSERT_OK(lf_model_backward(m));
        LF_ASSERT_OK(lf_adamw_step(m, be, m1, m2, s + 1, 6e-4f, &tc, &norm));
    }
    r.params = malloc(r.n * sizeof(float));
    assert_non_null(r.params);
    be->ops->to_host(be, r.params, lf_model_params(m), r.n * sizeof(float));
    LF_ASSERT_OK(lf_backend_sync(be));
    free(in);
    free(tg);
    be->ops->free(be, m1);
    be->ops->free(be, m2);
    lf_model_free(m);
    return r;
}

static void test_determinism(void **state) {
    (void)state;
    NEED_DEVICE();
#ifdef LF_CUDA_SHIM
    /* small on the shim (every CUDA thread is a fiber: CI time) */
    lf_model_config mc = {.arch = LF_ARCH_GPT2, .n_layer = 2, .n_head = 2, .n_embd = 48, .block_size = 24,
                          .vocab_size = 97, .bias = 1, .tie_embeddings = 1, .dropout = 0.1f};
    const int B = 2, T = 24;
#else
    /* GPT-2 124M's shape at B 4 x T 1024 */
    lf_model_config mc = {.arch = LF_ARCH_GPT2, .n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024,
                          .vocab_size = 50304, .bias = 1, .tie_embeddings = 1, .dropout = 0.1f};
    const int B = 4, T = 1024;
#endif
    LF_ASSERT_OK(lf_model_config_resolve(&mc));
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cuda", &be));
    det_run a = train_steps(&mc, B, T, be);
    det_run b = train_steps(&mc, B, T, be);
    print_message("determinism: %zu parameters, B %d x T %d: losses %.9g %.9g %.9g\n", a.n, B, T, a.loss[0],
                  a.loss[1], a.loss[2]);
    assert_true(isfinite(a.loss[STEPS - 1]));
    assert_true(a.loss[STEPS - 1] != a.loss[0]); /* the steps moved the model */
    assert_memory_equal(a.loss, b.loss, sizeof a.loss);
    assert_memory_equal(a.params, b.params, a.n * sizeof(float));
    free(a.params);
    free(b.params);
    lf_backend_close(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_plan_on_device),
        cmocka_unit_test(test_bench_on_device),
        cmocka_unit_test(test_session_plan_on_device),
        cmocka_unit_test(test_offload_optimizer),
        cmocka_unit_test(test_oom_at_run_time),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
