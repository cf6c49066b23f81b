/* Data-parallel training as N ranks, started by mpirun (CTest runs it through
 * lf_add_mpi_test; see tests/CMakeLists.txt):
 *
 *   mpi_dp equiv     any N: the same global batch (8 rows: micro-batch 8/(2N)
 *                    with accumulation 2, and 8/N with accumulation 1) as one
 *                    process: the 20 per-step losses and the evaluations
 *                    within 1e-5 relative, the final parameters (the step-20
 *                    checkpoints' model.safetensors) within 1e-5; every
 *                    rank's replica bit-identical; log.jsonl written once.
 *   (LF_TEST_STEPS and LF_TEST_BLOCK shorten every mode: steps and
 *   model.block_size; nccl_dp runs one layout, accumulation 2, in equiv;
 *   LF_TEST_TIMEOUT_S raises the 120 s barrier timeout of slow builds;
 *   LF_TEST_OFFLOAD=1 offloads the optimizer on every run; LF_TEST_OVERLAP=0
 *   turns comm.overlap off)
 *   nccl_dp overlap S 2 ranks, ZeRO stage S: comm.overlap true and false
 *                    give bit-identical losses, replicas and checkpoints;
 *                    the step records carry time/comm_ms and
 *                    time/comm_exposed_ms, exposed <= issued.
 *   mpi_dp resume    2 ranks: a checkpoint saved at step 10 (HALF) by 2 ranks
 *                    resumes with 1 rank, and one saved by 1 rank resumes
 *                    with 2; steps 11-20 continue the uninterrupted 2-rank
 *                    run within 1e-5.
 *   mpi_dp equiv S   the same with zero_optimization.stage S (1-3); also
 *   mpi_dp skips S   for the skips below.
 *   mpi_dp memory    any N, a GPT of ~2.7M parameters (with LF_TEST_ARCH=llama
 *                    a Llama of the same width, GQA, untied head): each rank's bytes of
 *                    parameters, gradients and moments by the allocator's
 *                    count equal its memory plan for ZeRO 0-3, and fall
 *                    with the stage.
 *   mpi_dp skips     2 ranks: an fp16 overflow injected on rank 1 only skips
 *                    the step on both ranks (the event names rank 1 and the
 *                    tensor; loss scale and skips as the single-process run
 *                    with the same injection); a NaN gradient on rank 1 only
 *                    with nan.action skip_step skips it everywhere; the
 *                    replicas stay identical.
 *   mpi_dp bf16 S    N ranks, ZeRO stage S, accumulation 1:
 *                    communication_data_type bf16 against fp32. Step 1's
 *                    loss is the same bits (the forward precedes any
 *                    collective); its gradient norm differs (the rounding
 *                    happened) by at most 2^-8 kappa relative, kappa = 4
 *                    (below); every rank's replica is identical; and for
 *                    S > 0 the bf16 run equals the bf16 stage-0 run within
 *                    TOL (losses, final parameters): every summed element
 *                    is bf16(the rank-order fold of the ranks' bf16
 *                    gradients) whatever the stage, so only fp32's own
 *                    stage differences remain.
 *                    The norm bound: element i of the bf16 sum is within
 *                    2^-9 sum_r |g_r,i| (the inputs' roundings) + 2^-9 |g_i|
 *                    (the result's) of g_i, so ||g_bf16 - g|| <= 2^-8
 *                    sum_r ||g_r||; kappa bounds sum_r ||g_r|| / ||g||,
 *                    which is 1 when the ranks' gradients are parallel and
 *                    P when they are orthogonal (P = 2, 4 here): 4 covers both.
 *   mpi_dp ckpt17    2 ranks (issue 17): a NaN injected on rank 1 only with
 *                    nan.action rollback rolls both ranks back to step 4 and
 *                    past the window, with ZeRO 0 and 2; the final
 *                    parameters equal, bit for bit, a 2-rank run stopped at
 *                    4 and resumed with skip_batches 3; checkpoint.async
 *                    writes what a synchronous run writes; a write fault on
 *                    rank 0 alone (lf_io_fail_after, on_error stop) makes
 *                    both ranks fail at the same step with LF_ERR_IO.
 *   mpi_dp fenced S  2 ranks, ZeRO stage S: the same training (20 steps,
 *                    micro-batch 2 x accumulation 2) once on "cpu" (one
 *                    thread per rank, so one model replica) and once on
 *                    "cpu-fenced" (LLMFORGE_BACKEND switched with setenv on
 *                    every rank between the runs), whose memory faults when
 *                    touched outside a backend call, so its collectives are
 *                    staged through host memory: per-step losses,
 *                    evaluations, every rank's replica (S < 3) and the
 *                    checkpoints' parameters and moments equal bit for bit.
 *
 * Every mode runs on the backend LLMFORGE_BACKEND names (the trainer's
 * default), e.g. cpu-fenced for the dp.fenced_* tests; parameters are read
 * through lf_trainer_copy_params, never in place.
 *
 * Built a second time as nccl_dp (LF_TEST_NCCL: linked with the CUDA
 * backend and the nccl communicator, on their shims for label `nccl`, on
 * the real libraries for label `gpu`) and run with LLMFORGE_BACKEND=cuda:
 * "auto" must then open "nccl" on several ranks (checked), so the same
 * equivalence, resume and stall checks cover the GPU path. The NCCL shim
 * folds in rank order, so the tolerance stays TOL; on real NCCL each
 * gradient sum differs from the fold by at most 2 (P - 1) u sum|g| (ring
 * or tree order), which the same 1e-5 on 20 steps' losses covers as the
 * one-process reference's own order differences do (micro-batch and
 * accumulation change the sums' order there too).
 *
 * The single-process reference runs on rank 0 (communicator "single", world
 * size 1) while the other ranks wait in a barrier of the test's own handle.
 * Not a cmocka program: a failed check on one rank must end every rank
 * (lf_comm_abort), or the others would wait for it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmforge/backend.h"
#include "llmforge/comm.h"
#include "llmforge/data.h"
#include "llmforge/plan.h"
#include "llmforge/safetensors.h"
#include "llmforge/train.h"
#include "llmforge/backend_cpu.h"
#include "llmforge/backend_cuda.h"
#include "llmforge/comm_nccl.h"
#ifdef LF_TEST_NCCL
#include "cuda_api.h"
#endif

/* steps of a run (20; LF_TEST_STEPS: an even number 4..60, what the slower
 * nccl_dp runs on the CUDA shim use); evaluations and checkpoints at half */
static int g_steps = 20;
static int g_block = 32; /* model.block_size (LF_TEST_BLOCK: 8..32) */
#define STEPS g_steps
#define HALF (g_steps / 2)
#define GLOBAL 8 /* rows per step */
#define TOL 1e-5

#include "comm/mpi_check.h"

static int g_size = 0;
static lf_comm *g_c; /* the test's own handle: coordination, and the abort on a failure (g_abort_via) */
static char g_tmp[512], g_data[600];
static int g_stage; /* zero_optimization.stage of the runs under test (equiv STAGE) */

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-12); }

/* ---------------------------------------------------------------- setup */

/* Rank 0 makes a small character dataset in a fresh directory; every rank learns its path. */
static void setup(void) {
    char buf[512] = "";
    if (g_rank == 0) {
        const char *base = getenv("TMPDIR");
        snprintf(buf, sizeof buf, "%s/lfdp.XXXXXX", base && *base ? base : "/tmp");
        CHECK(mkdtemp(buf), "mkdtemp failed");
        char *text;
        size_t len;
        OK(lf_file_read_all(LF_SHARED_DIR "/data/tinyshakespeare.txt", 0, &text, &len));
        char path[700];
        snprintf(path, sizeof path, "%s/small.txt", buf);
        OK(lf_file_write_all(path, text, len < 65536 ? len : 65536));
        lf_free(text);
        char data[700];
        snprintf(data, sizeof data, "%s/data", buf);
        lf_prepare_stats ps;
        OK(lf_prepare_char(path, data, &ps));
    }
    OK(lf_comm_broadcast_bytes(g_c, buf, sizeof buf, 0));
    snprintf(g_tmp, sizeof g_tmp, "%s", buf);
    snprintf(g_data, sizeof g_data, "%s/data", g_tmp);
}

static void cleanup(void) {
    OK(lf_comm_barrier(g_c));
    if (g_rank == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) { /* best effort */
        }
    }
}

/* The run's configuration for `world` ranks with accumulation A (micro-batch GLOBAL / (A*world)). */
static lf_train_config config(const char *name, int world, int A, long iters) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 32;
    c.model.block_size = g_block;
    const char *arch = getenv("LF_TEST_ARCH"); /* llama: the same checks on a multi-query Llama */
    if (arch && !strcmp(arch, "llama")) {
        snprintf(c.arch, sizeof c.arch, "llama");
        c.model.arch = LF_ARCH_LLAMA;
        c.model.bias = 0;
        c.model.n_kv_head = 1;
        c.model.ffn_hidden = 64;
        static int said;
        if (!said++ && g_rank == 0) printf("architecture llama (1 KV head, SwiGLU 64)\n");
    }
    c.world_size = world;
    c.grad_accum = A;
    c.micro_batch = GLOBAL / (A * world);
    c.train_batch_size = GLOBAL;
    c.train_iters = iters;
    c.warmup_iters = 2;
    c.decay_iters = STEPS; /* the same schedule for a run cut at step 10 */
    c.lr = 3e-3f;
    c.eval_interval = HALF;
    c.eval_iters = 3;
    c.ckpt_interval = HALF;
    c.keep_last = 5;
    c.peak_gflops = 100;
    c.prefetch = 1;
    c.zero_stage = world > 1 || g_stage ? g_stage : 0;
    /* LF_TEST_OFFLOAD=1: zero_optimization.offload_optimizer.device cpu on every
     * run (ZeRO-Offload on a device backend: the shard's moments and AdamW on the host) */
    const char *off = getenv("LF_TEST_OFFLOAD");
    c.offload_optimizer = off && !strcmp(off, "1");
    const char *ov = getenv("LF_TEST_OVERLAP"); /* 0: comm.overlap false (default true) */
    if (ov && !strcmp(ov, "0")) c.comm_overlap = 0;
    snprintf(c.comm_backend, sizeof c.comm_backend, "%s", world == 1 ? "single" : "auto");
    snprintf(c.dataset, sizeof c.dataset, "%s", g_data);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", g_tmp, name);
    return c;
}

/* Train; returns a hash of the final parameters (every rank's replica). */
static int64_t run(const lf_train_config *c, const lf_trainer_opts *o) {
    lf_trainer *t = NULL;
    lf_status st = lf_trainer_create(&t, c, o);
    CHECK(st == LF_OK, "create %s: %s", c->out_dir, lf_trainer_errmsg(t));
    st = lf_trainer_run(t);
    CHECK(st == LF_OK, "run %s: %s", c->out_dir, lf_trainer_errmsg(t));
    CHECK(lf_comm_size(lf_trainer_comm(t)) == c->world_size, "communicator of %d ranks, expected %d",
          lf_comm_size(lf_trainer_comm(t)), c->world_size);
#ifdef LF_TEST_NCCL
    if (c->world_size > 1) /* device tensors on several ranks: "auto" is nccl, collectives in place on the device */
        CHECK(strcmp(lf_comm_name(lf_trainer_comm(t)), "nccl") == 0, "communicator '%s', expected nccl",
              lf_comm_name(lf_trainer_comm(t)));
    if (c->world_size > 1) { /* nccl reduces device buffers in place: the plan has no host staging or scratch */
        lf_mem_plan p;
        lf_model_config mc = *lf_model_get_config(lf_trainer_model(t));
        OK(lf_mem_plan_make_backend(&p, c, &mc, lf_trainer_backend(t), g_rank));
        for (int i = 0; i < p.n_items; i++)
            CHECK(!strstr(p.items[i].name, "collective staging") && !strstr(p.items[i].name, "communication scratch"),
                  "nccl: the plan counts '%s' (%zu bytes), which the nccl kind does not allocate", p.items[i].name,
                  p.items[i].bytes);
        /* the gradients as planned: with comm.overlap under ZeRO-2/3 the second unit buffer too */
        size_t pb = 0, gb = 0, ob = 0;
        lf_trainer_state_bytes(t, &pb, &gb, &ob);
        CHECK(gb == p.grads_bytes, "nccl, ZeRO-%d, overlap %d: %zu bytes of gradients allocated, %zu planned",
              c->zero_stage, c->comm_overlap, gb, p.grads_bytes);
        /* ZeRO-3 with overlap: every block unit of a pass after the first comes from a prefetch */
        const long hits = lf_model_prefetch_hits(lf_trainer_model(t));
        if (c->zero_stage == 3 && c->comm_overlap)
            CHECK(hits >= (long)c->model.n_layer * c->train_iters, "ZeRO-3 prefetch: %ld units used from a prefetch "
                  "in %ld steps of %d layers", hits, c->train_iters, c->model.n_layer);
        else
            CHECK(hits == 0, "no prefetch expected, %ld units used from one", hits);
        /* and the parameters: with ZeRO-3's prefetch the second unit buffer */
        CHECK(pb == p.params_bytes, "nccl, ZeRO-%d, overlap %d: %zu bytes of parameters allocated, %zu planned",
              c->zero_stage, c->comm_overlap, pb, p.params_bytes);
        static int said;
        if (!said++ && g_rank == 0)
            printf("nccl, ZeRO-%d, comm.overlap %d (async kind %d): %zu bytes of gradients, %zu of parameters, as "
                   "planned\n", c->zero_stage, c->comm_overlap, lf_comm_async(lf_trainer_comm(t)), gb, pb);
    }
    if (c->offload_optimizer) { /* offloaded: no moments in the device's memory */
        size_t pb = 0, gb = 0, ob = 1;
        lf_trainer_state_bytes(t, &pb, &gb, &ob);
        CHECK(ob == 0, "offload_optimizer cpu: %zu bytes of moments on the device", ob);
        /* pinned host memory (cudaMallocHost): the moments, the gradient copy (moments-sized) and the whole
         * parameter staging that AdamW writes */
        lf_mem_plan p;
        lf_model_config mc = *lf_model_get_config(lf_trainer_model(t));
        OK(lf_mem_plan_make_backend(&p, c, &mc, lf_trainer_backend(t), g_rank));
        const size_t want = p.optim_bytes / 2 * 3 + lf_model_num_params(lf_trainer_model(t)) * sizeof(float);
        CHECK(lf_trainer_pinned_bytes(t) == want, "offload_optimizer cpu: %zu bytes of pinned host memory, expected "
              "%zu (moments, gradient copy, parameter staging)", lf_trainer_pinned_bytes(t), want);
    }
#endif
    lf_model *m = lf_trainer_model(t);
    char hex[65] = "0";
    if (lf_model_params(m)) { /* ZeRO-3 keeps no whole copy: nothing to compare */
        size_t n = lf_model_num_params(m);
        float *host = malloc(n * sizeof(float)); /* backend memory is read through a copy */
        CHECK(host, "out of memory");
        OK(lf_trainer_copy_params(t, host));
        lf_sha256_hex(host, n * sizeof(float), hex);
        free(host);
    } else {
        float one;
        CHECK(lf_trainer_copy_params(t, &one) == LF_ERR_UNSUPPORTED, "ZeRO-3: lf_trainer_copy_params did not refuse");
    }
    hex[15] = 0;
    lf_trainer_free(t);
    return (int64_t)strtoll(hex, NULL, 16);
}

/* Every rank's replica holds the same bits. */
static void same_replicas(int64_t h, const char *what) {
    int64_t v[2] = {h, -h};
    OK(lf_comm_all_reduce_i64(g_c, v, 2, LF_COMM_MAX));
    CHECK(v[0] == -v[1], "%s: the ranks' parameters differ after training (hash %015llx on rank %d)", what,
          (unsigned long long)h, g_rank);
}

/* ---------------------------------------------------------------- reading a run */

typedef struct rec {
    long step;
    double loss, scale, gnorm;
    int skipped;
} rec;

typedef struct runlog {
    rec train[64];
    int n_train;
    double eval_train[8], eval_val[8];
    int n_eval, n_start, n_overflow, n_alert_skip;
    char overflow_json[512];
} runlog;

static double num_after(const char *line, const char *key) {
    const char *p = strstr(line, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static void read_log(const char *out_dir, runlog *L) {
    memset(L, 0, sizeof *L);
    char path[1200], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/log.jsonl", out_dir);
    OK(lf_file_read_all(path, 0, &text, &len));
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"type\":\"start\"")) L->n_start++;
        if (strstr(line, "\"reason\":\"fp16_overflow\"")) {
            L->n_overflow++;
            snprintf(L->overflow_json, sizeof L->overflow_json, "%s", line);
        }
        if (strstr(line, "\"reason\":\"alert\"")) L->n_alert_skip++;
        if (strstr(line, "\"type\":\"eval\"") && L->n_eval < 8) {
            L->eval_train[L->n_eval] = num_after(line, "\"train_loss\":");
            L->eval_val[L->n_eval++] = num_after(line, "\"val_loss\":");
        }
        if (!strstr(line, "\"type\":\"train\"") || L->n_train >= 64) continue;
        rec *r = &L->train[L->n_train++];
        r->step = (long)num_after(line, "\"step\":");
        r->loss = num_after(line, "\"loss\":");
        r->scale = num_after(line, "\"train/loss_scale\":");
        r->gnorm = num_after(line, "\"grad_norm\":");
        r->skipped = strstr(line, "\"train/skipped\"") != NULL;
    }
    lf_free(text);
}

/* Steps from..to of two logs (records in step order, possibly from a resumed run). */
static void same_losses(const runlog *got, const runlog *want, long from, long to, double tol, const char *what) {
    for (long s = from; s <= to; s++) {
        const rec *g = NULL, *w = NULL;
        for (int i = 0; i < got->n_train; i++)
            if (got->train[i].step == s) g = &got->train[i];
        for (int i = 0; i < want->n_train; i++)
            if (want->train[i].step == s) w = &want->train[i];
        CHECK(g && w, "%s: step %ld missing from a log", what, s);
        CHECK(rel(g->loss, w->loss) <= tol, "%s: step %ld loss %.9g, reference %.9g (relative %.2g > %g)", what, s,
              g->loss, w->loss, rel(g->loss, w->loss), tol);
        CHECK(g->skipped == w->skipped, "%s: step %ld skipped %d, reference %d", what, s, g->skipped, w->skipped);
        if (!isnan(w->scale))
            CHECK(g->scale == w->scale, "%s: step %ld loss scale %g, reference %g", what, s, g->scale, w->scale);
    }
}

/* How far the step's checkpoint weights of run a are from run b's: the
 * largest, over tensors, of ||a - b|| / ||b|| (L2). The key third of each
 * c_attn.bias is measured apart, as max |a - b| (absolute): its gradient is
 * zero in exact arithmetic (a bias added to every key shifts all of a query's
 * scores alike, and softmax ignores that), so the values it holds (~1e-6)
 * are rounding noise that AdamW turned into steps, and they differ as much
 * between two single-process runs with accumulation 1 and 2. *elem gets the
 * largest element-wise |a - b| / max(|b|, 1e-2) (reported, not checked). */
static double param_diff(const char *dir_a, const char *dir_b, long step, double *kbias, double *elem) {
    char pa[1200], pb[1200];
    snprintf(pa, sizeof pa, "%s/ckpt/step_%08ld/model.safetensors", dir_a, step);
    snprintf(pb, sizeof pb, "%s/ckpt/step_%08ld/model.safetensors", dir_b, step);
    lf_safetensors *a = NULL, *b = NULL;
    OK(lf_safetensors_open(&a, pa));
    OK(lf_safetensors_open(&b, pb));
    CHECK(lf_safetensors_count(a) == lf_safetensors_count(b), "tensor counts differ: %s, %s", pa, pb);
    double worst = 0;
    *kbias = *elem = 0;
    for (int i = 0; i < lf_safetensors_count(b); i++) {
        const lf_st_tensor *tb = lf_safetensors_at(b, i), *ta = lf_safetensors_find(a, tb->name);
        CHECK(ta && ta->numel == tb->numel && ta->dtype == LF_ST_F32 && tb->dtype == LF_ST_F32,
              "tensor '%s' missing or different in %s", tb->name, pa);
        const float *x = ta->data, *y = tb->data;
        size_t n = tb->numel, k0 = n, k1 = n; /* [k0, k1): the key bias */
        size_t len = strlen(tb->name);
        if (len > 16 && !strcmp(tb->name + len - 16, "attn.c_attn.bias")) k0 = n / 3, k1 = 2 * n / 3;
        double dd = 0, yy = 0;
        for (size_t k = 0; k < n; k++) {
            double d = (double)x[k] - (double)y[k];
            double e = fabs(d) / fmax(fabs((double)y[k]), 1e-2);
            if (!(e <= *elem)) *elem = e; /* NaN propagates */
            if (k >= k0 && k < k1) {
                if (!(fabs(d) <= *kbias)) *kbias = fabs(d);
                continue;
            }
            dd += d * d;
            yy += (double)y[k] * (double)y[k];
        }
        double r = yy > 0 ? sqrt(dd / yy) : sqrt(dd);
        if (!(r <= worst)) worst = r;
    }
    lf_safetensors_close(a);
    lf_safetensors_close(b);
    return worst;
}

/* ---------------------------------------------------------------- modes */

static int run_equiv(void) {
#ifdef LF_TEST_NCCL
    const int A_last = 2; /* the communicator is under test, not accumulation: one layout, half the time */
#else
    const int A_last = 1;
#endif
    for (int A = 2; A >= A_last; A--) {
        if (GLOBAL % (A * g_size)) continue;
        char name[64];
        snprintf(name, sizeof name, "dp_a%d", A);
        lf_train_config dp = config(name, g_size, A, STEPS);
        same_replicas(run(&dp, NULL), name);
        OK(lf_comm_barrier(g_c));
        if (g_rank == 0) {
            /* the reference: one process, the same rows per step, accumulation 2, no ZeRO */
            int stage = g_stage;
            g_stage = 0;
            lf_train_config ref = config("ref", 1, 2, STEPS);
            g_stage = stage;
            if (A == 2) (void)run(&ref, NULL);
            runlog got, want;
            read_log(dp.out_dir, &got);
            read_log(ref.out_dir, &want);
            CHECK(got.n_train == STEPS && got.n_start == 1,
                  "%s: log.jsonl has %d train records and %d start events (expected %d and 1: rank 0 alone writes)",
                  name, got.n_train, got.n_start, STEPS);
            same_losses(&got, &want, 1, STEPS, TOL, name);
            double worst_eval = 0;
            if (A == 2) { /* evaluation batches are micro-batch x ranks rows: the reference's only with A == 2 */
                CHECK(got.n_eval == 2 && want.n_eval == 2, "%s: %d and %d evaluations", name, got.n_eval, want.n_eval);
                for (int e = 0; e < 2; e++) {
                    worst_eval = fmax(worst_eval, rel(got.eval_train[e], want.eval_train[e]));
                    worst_eval = fmax(worst_eval, rel(got.eval_val[e], want.eval_val[e]));
                }
                CHECK(worst_eval <= TOL, "%s: evaluation losses differ by %.2g relative", name, worst_eval);
            }
            double worst_loss = 0;
            for (int s = 0; s < STEPS; s++) worst_loss = fmax(worst_loss, rel(got.train[s].loss, want.train[s].loss));
            double kb, el, dp_params = param_diff(dp.out_dir, ref.out_dir, STEPS, &kb, &el);
            CHECK(dp_params <= TOL && kb <= TOL, "%s: final parameters differ by %.3g (relative L2 of a tensor) and "
                  "%.3g (key bias, absolute) > %g", name, dp_params, kb, TOL);
            char ev[64] = "evaluations not compared (other rows)";
            if (A == 2) snprintf(ev, sizeof ev, "evaluations within %.2g", worst_eval);
            printf("PASS equiv ZeRO-%d, %d rank%s, micro-batch %d x accumulation %d: %d losses within %.2g, %s, final "
                   "parameters within %.2g (relative L2 per tensor; key bias %.2g absolute; element-wise %.2g) of one "
                   "process (micro-batch 4 x accumulation 2)\n", g_stage, g_size, g_size == 1 ? "" : "s", dp.micro_batch, A,
                   STEPS, worst_loss, ev, dp_params, kb, el);
        }
        OK(lf_comm_barrier(g_c));
    }
    return 0;
}

/* The bytes of dir/ckpt/step_%08ld/file (lf_free). */
static char *ckpt_file(const char *dir, long step, const char *file, size_t *len) {
    char path[1200], *text = NULL;
    snprintf(path, sizeof path, "%s/ckpt/step_%08ld/%s", dir, step, file);
    OK(lf_file_read_all(path, 0, &text, len));
    return text;
}

/* comm.overlap on and off: the same collectives in the same order, the
 * gradient parts added into the shard in the same order per unit, so the
 * runs must agree bit for bit (no tolerance: any difference is a bug in the
 * overlap, e.g. a buffer reused while its reduce-scatter was in flight):
 * every step's loss as logged (17 significant digits), every rank's replica,
 * and the checkpoints' parameters and moments byte for byte. Also: the step
 * records carry time/comm_ms (issued) and time/comm_exposed_ms (waited for),
 * exposed <= issued. (The overlap copy's bytes in the memory plan: the
 * memory mode, where comm.overlap is on by default.) */
static int run_overlap(void) {
    const int A = 2;
    int64_t h[2];
    char dir[2][1100];
    for (int on = 1; on >= 0; on--) {
        char name[64];
        snprintf(name, sizeof name, "overlap_%s", on ? "on" : "off");
        lf_train_config c = config(name, g_size, A, STEPS);
        c.comm_overlap = on;
        c.wall_clock_breakdown = 1;
        snprintf(dir[on], sizeof dir[on], "%s", c.out_dir);
        h[on] = run(&c, NULL);
        same_replicas(h[on], name);
        OK(lf_comm_barrier(g_c));
    }
    CHECK(h[0] == h[1], "comm.overlap on and off: rank %d's parameters differ (hash %015llx vs %015llx)", g_rank,
          (unsigned long long)h[1], (unsigned long long)h[0]);
    if (g_rank == 0) {
        runlog got, want;
        read_log(dir[1], &got);
        read_log(dir[0], &want);
        CHECK(got.n_train == STEPS && want.n_train == STEPS, "%d and %d train records", got.n_train, want.n_train);
        for (int s = 0; s < STEPS; s++)
            CHECK(got.train[s].loss == want.train[s].loss, "step %ld: loss %.17g with comm.overlap, %.17g without",
                  got.train[s].step, got.train[s].loss, want.train[s].loss);
        static const char *files[] = {"model.safetensors", "optimizer.safetensors"};
        for (int f = 0; f < 2; f++) {
            size_t la = 0, lb = 0;
            char *a = ckpt_file(dir[1], STEPS, files[f], &la), *b = ckpt_file(dir[0], STEPS, files[f], &lb);
            CHECK(la == lb && memcmp(a, b, la) == 0, "step %d checkpoint: %s differs with comm.overlap", STEPS,
                  files[f]);
            lf_free(a);
            lf_free(b);
        }
        /* the step metrics: issued and exposed communication */
        char path[1200], *text;
        size_t len;
        snprintf(path, sizeof path, "%s/log.jsonl", dir[1]);
        OK(lf_file_read_all(path, 0, &text, &len));
        int n = 0;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (!strstr(line, "\"type\":\"train\"")) continue;
            double tot = num_after(line, "\"time/comm_ms\":"), exp = num_after(line, "\"time/comm_exposed_ms\":");
            CHECK(tot >= 0 && exp >= 0 && exp <= tot, "step record without time/comm_ms >= time/comm_exposed_ms "
                  ">= 0: %s", line);
            n++;
        }
        lf_free(text);
        CHECK(n == STEPS, "%d step records", n);
        printf("PASS overlap ZeRO-%d, %d ranks, accumulation %d: comm.overlap on and off give the same %d losses, "
               "replicas and step-%d checkpoints bit for bit\n", g_stage, g_size, A, STEPS, STEPS);
    }
    OK(lf_comm_barrier(g_c));
    return 0;
}

static int run_bf16(void) {
    const int A = 1;
    char dir[3][1100];
    int64_t h[3];
    const int want_s0 = g_stage != 0;
    for (int k = 0; k < 2 + want_s0; k++) { /* 0: fp32, 1: bf16, 2: bf16 at stage 0 */
        char name[64];
        snprintf(name, sizeof name, "bf16_%d", k);
        int stage = g_stage;
        if (k == 2) g_stage = 0;
        lf_train_config c = config(name, g_size, A, STEPS);
        g_stage = stage;
        c.comm_bf16 = k > 0;
        snprintf(dir[k], sizeof dir[k], "%s", c.out_dir);
        h[k] = run(&c, NULL);
        same_replicas(h[k], name);
        OK(lf_comm_barrier(g_c));
    }
    if (g_rank == 0) {
        runlog f, b, b0;
        read_log(dir[0], &f);
        read_log(dir[1], &b);
        CHECK(f.n_train == STEPS && b.n_train == STEPS, "%d and %d train records", f.n_train, b.n_train);
        CHECK(f.train[0].loss == b.train[0].loss, "step 1: loss %.17g with bf16 communication, %.17g with fp32",
              b.train[0].loss, f.train[0].loss);
        const double gn = rel(b.train[0].gnorm, f.train[0].gnorm), bound = ldexp(1.0, -8) * 4;
        CHECK(!isnan(gn) && gn <= bound, "step 1: gradient norm %.9g with bf16 communication, %.9g with fp32 "
              "(relative %.3g > 2^-8 x 4)", b.train[0].gnorm, f.train[0].gnorm, gn);
        if (g_size > 1) CHECK(gn > 0, "step 1: the gradient norm is the fp32 run's bits: nothing was rounded");
        double worst = 0;
        for (int s = 0; s < STEPS; s++) worst = fmax(worst, rel(b.train[s].loss, f.train[s].loss));
        double kb = 0, el = 0, pd = param_diff(dir[1], dir[0], STEPS, &kb, &el);
        if (g_size > 1) CHECK(pd > 0, "communication_data_type bf16 trained the fp32 run's parameters bit for bit");
        double worst0 = 0, pd0 = 0;
        if (want_s0) {
            read_log(dir[2], &b0);
            same_losses(&b, &b0, 1, STEPS, TOL, "bf16 ZeRO against bf16 stage 0");
            for (int s = 0; s < STEPS; s++) worst0 = fmax(worst0, rel(b.train[s].loss, b0.train[s].loss));
            pd0 = param_diff(dir[1], dir[2], STEPS, &kb, &el);
            CHECK(pd0 <= TOL, "bf16 ZeRO-%d against bf16 stage 0: final parameters differ by %.3g > %g", g_stage, pd0,
                  TOL);
        }
        printf("PASS bf16 communication, ZeRO-%d, %d rank%s: step-1 loss identical, gradient norm %.3g relative from "
               "fp32 (bound %.3g); against fp32 over %d steps: losses within %.3g, final parameters %.3g (relative "
               "L2, reported)%s", g_stage, g_size, g_size == 1 ? "" : "s", gn, bound, STEPS, worst, pd,
               want_s0 ? "" : "\n");
        if (want_s0) printf("; against bf16 stage 0: losses within %.2g, parameters %.2g\n", worst0, pd0);
    }
    OK(lf_comm_barrier(g_c));
    return 0;
}

static int run_resume(void) {
    CHECK(g_size == 2, "resume runs on 2 ranks, not %d", g_size);
    /* the uninterrupted 2-rank run */
    lf_train_config full = config("full", 2, 2, STEPS);
    same_replicas(run(&full, NULL), "full");
    /* 2 ranks to step 10, then 1 rank to 20 */
    lf_train_config a = config("r21", 2, 2, HALF);
    (void)run(&a, NULL);
    OK(lf_comm_barrier(g_c));
    if (g_rank == 0) {
        lf_train_config b = config("r21", 1, 2, STEPS);
        lf_trainer_opts o = {.resume = 1};
        (void)run(&b, &o);
    }
    /* 1 rank to step 10, then 2 ranks to 20 */
    if (g_rank == 0) {
        lf_train_config c = config("r12", 1, 2, HALF);
        (void)run(&c, NULL);
    }
    OK(lf_comm_barrier(g_c));
    lf_train_config d = config("r12", 2, 2, STEPS);
    lf_trainer_opts o = {.resume = 1};
    same_replicas(run(&d, &o), "r12");
    if (g_rank == 0) {
        runlog want, r21, r12;
        read_log(full.out_dir, &want);
        read_log(a.out_dir, &r21);
        read_log(d.out_dir, &r12);
        CHECK(r21.n_train == STEPS && r12.n_train == STEPS, "resumed logs hold %d and %d steps", r21.n_train,
              r12.n_train);
        same_losses(&r21, &want, HALF + 1, STEPS, TOL, "2 ranks -> 1 rank");
        same_losses(&r12, &want, HALF + 1, STEPS, TOL, "1 rank -> 2 ranks");
        double k21, k12, e21, e12;
        double p21 = param_diff(a.out_dir, full.out_dir, STEPS, &k21, &e21);
        double p12 = param_diff(d.out_dir, full.out_dir, STEPS, &k12, &e12);
        CHECK(p21 <= TOL && p12 <= TOL && k21 <= TOL && k12 <= TOL,
              "resumed final parameters differ by %.3g (2->1) and %.3g (1->2); key bias %.3g, %.3g", p21, p12, k21,
              k12);
        printf("PASS resume: a 2-rank checkpoint continued on 1 rank and a 1-rank one on 2 ranks: steps %d-%d and "
               "the final parameters (within %.2g, %.2g) as the uninterrupted 2-rank run\n", HALF + 1, STEPS, p21,
               p12);
    }
    OK(lf_comm_barrier(g_c));
    return 0;
}

static int run_skips(void) {
    CHECK(g_size == 2, "skips runs on 2 ranks, not %d", g_size);
    /* fp16: overflows injected on rank 1 only at steps 3, 5, 6 */
    lf_train_config c = config("fp16", 2, 2, 12);
    c.fp16 = 1;
    c.fp16_scale_power = 8;
    c.fp16_window = 3;
    c.fp16_hysteresis = 2;
    lf_trainer_opts o = {.inject_overflow_steps = {3, 5, 6}, .n_inject_overflow = 3};
    lf_trainer_opts none = {0};
    same_replicas(run(&c, g_rank == 1 ? &o : &none), "fp16");
    /* fp32: a NaN gradient on rank 1 only at step 4, skipped */
    lf_train_config n = config("nan", 2, 2, 8);
    n.alert_nan_action = LF_ALERT_SKIP;
    lf_trainer_opts on = {.inject_nan_step = 4};
    same_replicas(run(&n, g_rank == 1 ? &on : &none), "nan");
    OK(lf_comm_barrier(g_c));
    if (g_rank == 0) {
        lf_train_config rc = config("fp16_ref", 1, 2, 12);
        rc.fp16 = c.fp16;
        rc.fp16_scale_power = c.fp16_scale_power;
        rc.fp16_window = c.fp16_window;
        rc.fp16_hysteresis = c.fp16_hysteresis;
        (void)run(&rc, &o);
        runlog got, want;
        read_log(c.out_dir, &got);
        read_log(rc.out_dir, &want);
        CHECK(got.n_overflow == 3 && want.n_overflow == 3, "fp16: %d and %d overflow events (expected 3)",
              got.n_overflow, want.n_overflow);
        CHECK(strstr(got.overflow_json, "\"tensor\":\"h.0.mlp.c_fc.weight\"") &&
                  strstr(got.overflow_json, "\"rank\":1"),
              "fp16: the overflow event does not name the tensor and rank 1: %s", got.overflow_json);
        for (int s = 0; s < got.n_train; s++)
            CHECK(got.train[s].skipped == (s + 1 == 3 || s + 1 == 5 || s + 1 == 6), "fp16: step %d skipped %d", s + 1,
                  got.train[s].skipped);
        /* the fp16 sum over ranks is rounded once more than one process's
         * gradient: the same skips and scales, losses close, not 1e-5 */
        same_losses(&got, &want, 1, 12, 1e-4, "fp16");
        double worst = 0;
        for (int s = 0; s < got.n_train && s < want.n_train; s++)
            worst = fmax(worst, rel(got.train[s].loss, want.train[s].loss));
        runlog nl;
        read_log(n.out_dir, &nl);
        CHECK(nl.n_alert_skip == 1 && nl.train[3].skipped && !nl.train[2].skipped && !nl.train[4].skipped,
              "nan: %d alert skips, step 4 skipped %d", nl.n_alert_skip, nl.train[3].skipped);
        printf("PASS skips: an fp16 overflow and a NaN gradient on rank 1 alone skip the step on both ranks (scales "
               "and skips as one process with the same injections, fp16 losses within %.2g; replicas identical)\n",
               worst);
    }
    OK(lf_comm_barrier(g_c));
    return 0;
}

/* Per-rank memory by ZeRO stage on a GPT of ~2.7M parameters (6 layers x
 * 192 channels, block 128; the allocator's count and the plan are exact at
 * any size, and six layers keep the two unit buffers of ZeRO-3 a small part
 * of the model, as at 384 channels, which took 4x the time to initialise):
 * what the allocator holds for parameters,
 * gradients and AdamW moments equals this rank's plan (lf_mem_plan_make_rank)
 * for every stage, and falls with the stage as the plan says. */
static int run_memory(void) {
    const char *what[4] = {"ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    size_t got[4][3], want[4][3], P = 0;
    for (int z = 0; z <= 3; z++) {
        char name[32];
        snprintf(name, sizeof name, "mem%d", z);
        lf_train_config c = config(name, g_size, 1, 1);
        c.model.n_layer = 6;
        c.model.n_head = 6;
        c.model.n_embd = 192;
        c.model.block_size = 128;
        if (c.model.arch == LF_ARCH_LLAMA) { /* untied: the last ZeRO unit holds the lm_head */
            c.model.n_kv_head = 2;
            c.model.ffn_hidden = 512;
            c.model.tie_embeddings = 0;
        }
        c.micro_batch = 1;
        c.grad_accum = 1;
        c.train_batch_size = g_size;
        c.zero_stage = z;
        lf_trainer *t = NULL;
        lf_status st = lf_trainer_create(&t, &c, NULL);
        CHECK(st == LF_OK, "create %s: %s", name, lf_trainer_errmsg(t));
        lf_trainer_state_bytes(t, &got[z][0], &got[z][1], &got[z][2]);
        lf_model *m = lf_trainer_model(t);
        P = lf_model_num_params(m);
        lf_mem_plan plan;
        OK(lf_mem_plan_make_rank(&plan, &c, lf_model_get_config(m), 1, 0, g_rank));
        want[z][0] = plan.params_bytes;
        want[z][1] = plan.grads_bytes;
        want[z][2] = plan.optim_bytes;
        lf_trainer_free(t);
        static const char *cat[3] = {"parameters", "gradients", "AdamW moments"};
        for (int k = 0; k < 3; k++) /* the allocator rounds a block up by at most a page */
            CHECK(got[z][k] >= want[z][k] && got[z][k] - want[z][k] <= 3 * 4096,
                  "%s rank %d: %s hold %zu bytes by the allocator's count, the plan says %zu", what[z], g_rank, cat[k],
                  got[z][k], want[z][k]);
    }
    double total[4];
    for (int z = 0; z < 4; z++) total[z] = (double)(want[z][0] + want[z][1] + want[z][2]);
    const double f = sizeof(float), W = g_size;
    /* moments by W from stage 1; gradients and parameters down to a shard and two unit buffers */
    CHECK(want[1][2] <= 2 * f * (P / W + 8) && want[0][2] == 2 * f * P, "moments: %zu and %zu bytes", want[0][2],
          want[1][2]);
    CHECK(want[2][1] < want[1][1] && want[3][0] < want[2][0], "gradients or parameters did not fall");
    for (int z = 1; z < 4; z++) CHECK(total[z] < total[z - 1], "%s holds no less than %s", what[z], what[z - 1]);
    /* every rank prints its line in rank order */
    for (int r = 0; r < g_size; r++) {
        OK(lf_comm_barrier(g_c));
        if (r != g_rank) continue;
        printf("rank %d of %d, %zu parameters: bytes of parameters + gradients + moments (allocator = plan):", g_rank,
               g_size, P);
        for (int z = 0; z < 4; z++)
            printf(" %s %.1f MB (%zu + %zu + %zu, %.2fx of ZeRO-0)%s", what[z], total[z] / 1e6, got[z][0], got[z][1],
                   got[z][2], total[z] / total[0], z < 3 ? ";" : "\n");
        fflush(stdout);
    }
    OK(lf_comm_barrier(g_c));
    if (g_rank == 0) printf("PASS memory: every rank's allocation equals its plan for ZeRO 0-3 and falls with the stage\n");
    return 0;
}

/* Tensors of two safetensors files with the same names, shapes and bytes. */
static void same_tensor_bits(const char *pa, const char *pb) {
    lf_safetensors *a = NULL, *b = NULL;
    OK(lf_safetensors_open(&a, pa));
    OK(lf_safetensors_open(&b, pb));
    CHECK(lf_safetensors_count(a) == lf_safetensors_count(b), "%s and %s: %d and %d tensors", pa, pb,
          lf_safetensors_count(a), lf_safetensors_count(b));
    for (int i = 0; i < lf_safetensors_count(b); i++) {
        const lf_st_tensor *tb = lf_safetensors_at(b, i), *ta = lf_safetensors_find(a, tb->name);
        CHECK(ta && ta->dtype == tb->dtype && ta->nbytes == tb->nbytes, "tensor '%s' missing or different in %s",
              tb->name, pa);
        if (memcmp(ta->data, tb->data, tb->nbytes) != 0) {
            const float *x = ta->data, *y = tb->data;
            size_t k = 0;
            while (k + 1 < tb->numel && x[k] == y[k]) k++;
            CHECK(0, "tensor '%s' of %s differs from %s's: element %zu is %.9g, not %.9g", tb->name, pa, pb, k,
                  (double)x[k], (double)y[k]);
        }
    }
    lf_safetensors_close(a);
    lf_safetensors_close(b);
}

/* Arms the write-fault hook (this process only) at step 8's checkpoint record. */
static void arm17_emit(lf_obs_sink *sk, const lf_obs_record *r) {
    (void)sk;
    if (r->kind == LF_OBS_EVENT && r->event && !strcmp(r->event, "checkpoint") && r->step == 4) lf_io_fail_after(4, 28);
}
static void arm17_close(lf_obs_sink *sk) { (void)sk; }
static lf_obs_sink g_arm17 = {.name = "arm", .emit = arm17_emit, .close = arm17_close};

static int run_ckpt17(void) {
    CHECK(g_size == 2, "ckpt17 runs on 2 ranks, not %d", g_size);
    lf_trainer_opts none = {0}, nan = {.inject_nan_step = 7};
    char pa[1200], pb[1200];
    for (int stage = 0; stage <= 2; stage += 2) {
        g_stage = stage;
        char name[64];
        snprintf(name, sizeof name, "rb_z%d", stage);
        lf_train_config c = config(name, 2, 2, 12);
        c.ckpt_interval = 4;
        c.eval_interval = 0;
        c.alert_nan_action = LF_ALERT_ROLLBACK;
        same_replicas(run(&c, g_rank == 1 ? &nan : &none), "rollback");
        snprintf(name, sizeof name, "rb_ref_z%d", stage);
        lf_train_config r = config(name, 2, 2, 12);
        r.ckpt_interval = 4;
        r.eval_interval = 0;
        r.alert_nan_action = LF_ALERT_ROLLBACK;
        r.stop_at = 4;
        (void)run(&r, &none);
        r.stop_at = 0;
        lf_trainer_opts skip = {.resume = LF_RESUME_YES, .skip_batches = 3};
        same_replicas(run(&r, &skip), "rollback reference");
        OK(lf_comm_barrier(g_c));
        if (g_rank == 0) {
            snprintf(pa, sizeof pa, "%s/ckpt/step_00000012/model.safetensors", c.out_dir);
            snprintf(pb, sizeof pb, "%s/ckpt/step_00000012/model.safetensors", r.out_dir);
            same_tensor_bits(pa, pb);
            snprintf(pa, sizeof pa, "%s/ckpt/step_00000012/optimizer.safetensors", c.out_dir);
            snprintf(pb, sizeof pb, "%s/ckpt/step_00000012/optimizer.safetensors", r.out_dir);
            same_tensor_bits(pa, pb);
            snprintf(pa, sizeof pa, "%s/log.jsonl", c.out_dir);
            char *text = NULL;
            OK(lf_file_read_all(pa, 0, &text, NULL));
            CHECK(strstr(text, "\"from_step\":7,\"to_step\":4,\"reason\":\"nan\""), "no rollback record in %s", pa);
            lf_free(text);
        }
    }
    g_stage = 0;
    /* async against sync, 2 ranks */
    lf_train_config s = config("sync17", 2, 2, 12), a = config("async17", 2, 2, 12);
    s.ckpt_interval = a.ckpt_interval = 4;
    a.ckpt_async = 1;
    same_replicas(run(&s, &none), "sync");
    same_replicas(run(&a, &none), "async");
    OK(lf_comm_barrier(g_c));
    if (g_rank == 0)
        for (long step = 4; step <= 12; step += 4) {
            snprintf(pa, sizeof pa, "%s/ckpt/step_%08ld/model.safetensors", s.out_dir, step);
            snprintf(pb, sizeof pb, "%s/ckpt/step_%08ld/model.safetensors", a.out_dir, step);
            same_tensor_bits(pa, pb);
            snprintf(pa, sizeof pa, "%s/ckpt/step_%08ld/optimizer.safetensors", s.out_dir, step);
            snprintf(pb, sizeof pb, "%s/ckpt/step_%08ld/optimizer.safetensors", a.out_dir, step);
            same_tensor_bits(pa, pb);
        }
    /* a background write fails on rank 0 (ENOSPC, 28): both ranks stop at the same step */
    lf_train_config f = config("fault17", 2, 2, 12);
    f.ckpt_interval = 4;
    f.ckpt_async = 1;
    lf_trainer_opts arm = {.n_sinks = 1};
    arm.sinks[0] = &g_arm17;
    lf_trainer *t = NULL;
    OK(lf_trainer_create(&t, &f, g_rank == 0 ? &arm : &none));
    lf_status st = lf_trainer_run(t);
    lf_io_fail_after(-1, 0);
    CHECK(st == LF_ERR_IO, "fault: rank %d returned %s: %s", g_rank, lf_status_str(st), lf_trainer_errmsg(t));
    CHECK(strstr(lf_trainer_errmsg(t), g_rank == 0 ? "the checkpoint of step 8 failed" : "failed on rank 0"),
          "fault: rank %d's message: %s", g_rank, lf_trainer_errmsg(t));
    int64_t at[2] = {lf_trainer_step(t), -lf_trainer_step(t)};
    lf_trainer_free(t);
    OK(lf_comm_all_reduce_i64(g_c, at, 2, LF_COMM_MAX));
    CHECK(at[0] == -at[1], "fault: the ranks stopped at different steps (rank %d)", g_rank);
    if (g_rank == 0)
        printf("PASS ckpt17: rollback on 2 ranks (ZeRO 0, 2) equals the explicitly skipped run bit for bit; async "
               "saves equal sync ones; a write fault on rank 0 stops both ranks at step %lld\n", (long long)at[0]);
    OK(lf_comm_barrier(g_c));
    return 0;
}

/* The same 2-rank run on "cpu" and on "cpu-fenced": bit for bit. */
static int run_fenced_bits(void) {
    CHECK(g_size == 2, "fenced runs on 2 ranks, not %d", g_size);
    static const char *kind[2] = {"cpu", "cpu-fenced"};
    lf_train_config c[2];
    int64_t h[2];
    for (int k = 0; k < 2; k++) {
        CHECK(setenv("LLMFORGE_BACKEND", kind[k], 1) == 0, "setenv failed");
        CHECK(!strcmp(lf_backend_default_name(), kind[k]), "the trainer's backend would be '%s', not '%s'",
              lf_backend_default_name(), kind[k]);
        CHECK(lf_backend_host_memory(lf_backend_default()) == (k == 0), "backend '%s': host_memory %d", kind[k],
              lf_backend_host_memory(lf_backend_default()));
        /* one model replica per rank on cpu, as cpu-fenced always runs (the
         * CPU ops give the same bits for any thread count; the split of a
         * micro-batch into replicas changes the summation order) */
        if (k == 0) lf_backend_cpu_set_threads(1);
        char name[32];
        snprintf(name, sizeof name, "bits_%s", kind[k]);
        c[k] = config(name, 2, 2, STEPS);
        h[k] = run(&c[k], NULL);
        same_replicas(h[k], name);
    }
    CHECK(h[0] == h[1], "rank %d: the parameters after the cpu-fenced run (hash %015llx) are not the cpu run's "
          "(%015llx)", g_rank, (unsigned long long)h[1], (unsigned long long)h[0]);
    OK(lf_comm_barrier(g_c));
    if (g_rank == 0) {
        runlog a, b;
        read_log(c[0].out_dir, &a);
        read_log(c[1].out_dir, &b);
        CHECK(a.n_train == STEPS && b.n_train == STEPS, "logs hold %d and %d steps", a.n_train, b.n_train);
        for (int s = 0; s < STEPS; s++)
            CHECK(b.train[s].step == a.train[s].step && b.train[s].loss == a.train[s].loss,
                  "step %ld: loss %.17g on cpu-fenced, %.17g on cpu", a.train[s].step, b.train[s].loss,
                  a.train[s].loss);
        CHECK(a.n_eval == 2 && b.n_eval == 2, "%d and %d evaluations", a.n_eval, b.n_eval);
        for (int e = 0; e < 2; e++)
            CHECK(a.eval_train[e] == b.eval_train[e] && a.eval_val[e] == b.eval_val[e],
                  "evaluation %d: %.17g / %.17g on cpu-fenced, %.17g / %.17g on cpu", e, b.eval_train[e],
                  b.eval_val[e], a.eval_train[e], a.eval_val[e]);
        for (long step = 10; step <= STEPS; step += 10) /* both checkpoints: written from staged shards */
            for (int f = 0; f < 2; f++) {
                const char *file = f ? "optimizer.safetensors" : "model.safetensors";
                char pa[1200], pb[1200];
                snprintf(pa, sizeof pa, "%s/ckpt/step_%08ld/%s", c[1].out_dir, step, file);
                snprintf(pb, sizeof pb, "%s/ckpt/step_%08ld/%s", c[0].out_dir, step, file);
                same_tensor_bits(pa, pb);
            }
        printf("PASS fenced ZeRO-%d, 2 ranks: cpu-fenced (collectives staged through host memory) gives the cpu "
               "run's %d losses, evaluations, %sand the step-10 and step-20 checkpoints (parameters and moments) "
               "bit for bit\n", g_stage, STEPS, g_stage < 3 ? "both ranks' replicas " : "");
    }
    OK(lf_comm_barrier(g_c));
    return 0;
}

/* ZeRO-3 on N ranks, rank 2 stalls (the trainer's test hook sleeps 60 s
 * after step 3) with comm.timeout_s 3: every other rank's next collective
 * times out naming rank 2; each prints its message and ends the job
 * (lf_comm_abort). Run by mpi_zero_cli.sh, which checks the messages and
 * that the job ended within the timeout + 10 s. */
static int run_stall(void) {
    CHECK(g_size >= 3, "stall runs on 3 or more ranks");
    lf_train_config c = config("stall", g_size, 1, 10);
    c.micro_batch = 1;
    c.train_batch_size = g_size;
    c.zero_stage = 3;
    c.comm_timeout_s = 3;
    lf_trainer_opts o = {0};
    if (g_rank == 2) {
        o.inject_stall_step = 3;
        o.inject_stall_seconds = 60;
    }
    lf_trainer *t = NULL;
    lf_status st = lf_trainer_create(&t, &c, &o);
    CHECK(st == LF_OK, "create: %s", lf_trainer_errmsg(t));
    st = lf_trainer_run(t);
    printf("rank %d: run ended: %s: %s\n", g_rank, lf_status_str(st), lf_trainer_errmsg(t));
    fflush(stdout);
    lf_comm_abort(lf_trainer_comm(t), 3); /* as the CLI does after a failed step */
    return 3;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "equiv";
    g_stage = argc > 2 ? atoi(argv[2]) : 0;
    const char *ev = getenv("LF_TEST_STEPS");
    if (ev && *ev) {
        long k = strtol(ev, NULL, 10);
        if (k < 4 || k > 60 || k % 2) {
            fprintf(stderr, "LF_TEST_STEPS=%s: an even number of steps 4..60\n", ev);
            return 2;
        }
        g_steps = (int)k;
    }
    ev = getenv("LF_TEST_BLOCK");
    if (ev && *ev) {
        long k = strtol(ev, NULL, 10);
        if (k < 8 || k > 32) {
            fprintf(stderr, "LF_TEST_BLOCK=%s: a block size 8..32\n", ev);
            return 2;
        }
        g_block = (int)k;
    }
#ifdef LF_TEST_NCCL
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 0;
    }
    /* the cuda backend and the nccl kind live above the core libraries: make them findable */
    if (lf_backend_cuda_register() != LF_OK || lf_comm_nccl_register() != LF_OK) {
        fprintf(stderr, "FAIL: registering cuda / nccl: %s\n", lf_last_error());
        return 1;
    }
#endif
    /* the test's own communicator: its barriers wait while rank 0 alone runs
     * a reference (LF_TEST_TIMEOUT_S: longer where a run is slower, ASan) */
    lf_comm_options co = lf_comm_options_default();
    co.timeout_s = 120;
    ev = getenv("LF_TEST_TIMEOUT_S");
    if (ev && *ev) {
        long k = strtol(ev, NULL, 10);
        if (k < 10 || k > 3600) {
            fprintf(stderr, "LF_TEST_TIMEOUT_S=%s: seconds 10..3600\n", ev);
            return 2;
        }
        co.timeout_s = (double)k;
    }
    lf_status st = lf_comm_open(&g_c, "mpi", &co);
    g_abort_via = g_c;
    if (st != LF_OK) {
        fprintf(stderr, "FAIL: lf_comm_open: %s\n", lf_last_error());
        return 1;
    }
    g_rank = lf_comm_rank(g_c);
    g_size = lf_comm_size(g_c);
    setup();
    /* every rank on the same kind of backend (the environment reaches them all) */
    int64_t hm[2] = {lf_backend_host_memory(lf_backend_default()), -lf_backend_host_memory(lf_backend_default())};
    OK(lf_comm_all_reduce_i64(g_c, hm, 2, LF_COMM_MAX));
    CHECK(hm[0] == -hm[1], "the ranks run on different backends (rank %d: '%s')", g_rank, lf_backend_default_name());
    if (g_rank == 0 && strcmp(mode, "fenced")) printf("backend %s\n", lf_backend_default_name());
    int rc;
    if (!strcmp(mode, "equiv")) rc = run_equiv();
    else if (!strcmp(mode, "resume")) rc = run_resume();
    else if (!strcmp(mode, "overlap")) rc = run_overlap();
    else if (!strcmp(mode, "bf16")) rc = run_bf16();
    else if (!strcmp(mode, "skips")) rc = run_skips();
    else if (!strcmp(mode, "memory")) rc = run_memory();
    else if (!strcmp(mode, "stall")) rc = run_stall();
    else if (!strcmp(mode, "fenced")) rc = run_fenced_bits();
    else if (!strcmp(mode, "ckpt17")) rc = run_ckpt17();
    else {
        fprintf(stderr, "usage: mpi_dp equiv [STAGE]|resume|skips|memory|stall|fenced STAGE|ckpt17\n");
        rc = 2;
    }
    cleanup();
    lf_comm_close(g_c);
    return rc;
}
