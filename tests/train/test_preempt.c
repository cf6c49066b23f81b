/*
 * Preemption in the library: a stop request (lf_trainer_request_stop, or the
 * caller's flag in lf_trainer_opts.stop_flag, which is what the CLI's signal
 * handlers set) is honoured at the next step boundary: the step in progress
 * finishes, a checkpoint of exactly that step is written (once, also when
 * the step was a checkpoint step anyway), lf_trainer_run returns
 * LF_ERR_PREEMPTED, log.jsonl and the registry say "preempted"; resuming
 * (LF_RESUME_AUTO) gives the uninterrupted run's weights and losses bit for
 * bit. Also: --resume auto on an empty out_dir starts fresh (on a damaged
 * one it refuses), and
 * checkpoint.keep_every keeps every N-th step past keep_last.
 *
 * The request is made from a sink on the trainer's bus when it sees the
 * train record of step k, i.e. while step k's boundary has not been reached:
 * the run must stop at k, not k+1, and not earlier.
 */
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include "test_util.h"
#include "llmforge/data.h"
#include "llmforge/checkpoint.h"
#include "llmforge/registry.h"
#include "llmforge/train.h"

#include "char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(32768);
}

static lf_train_config tiny_config(const char *out_name) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.model.block_size = 16;
    c.model.dropout = 0.1f; /* dropout keyed by step: resume must land on the same keys */
    c.micro_batch = 4;
    c.train_batch_size = 4;
    c.train_iters = 20;
    c.warmup_iters = 3;
    c.decay_iters = 20;
    c.lr = 3e-3f;
    c.min_lr = 3e-4f;
    c.eval_interval = 0;
    c.eval_iters = 1;
    c.ckpt_interval = 5;
    c.keep_last = 2;
    c.seed = 7;
    c.registry_enabled = 0;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, out_name);
    return c;
}

/* A sink that asks the trainer to stop when it sees step `at`'s record. */
static lf_trainer *g_t;
static long g_stop_at;
static int g_reason;
static void stop_emit(lf_obs_sink *s, const lf_obs_record *r) {
    (void)s;
    if (r->kind == LF_OBS_TRAIN && r->step == g_stop_at) lf_trainer_request_stop(g_t, g_reason);
}
static void stop_close(lf_obs_sink *s) { (void)s; }
static lf_obs_sink g_stop_sink = {.name = "stopper", .emit = stop_emit, .close = stop_close};

typedef struct run_out {
    lf_status st;
    long step;
    int reason;
    float *w; /* final parameters (malloc) */
    size_t n;
} run_out;

static run_out run(const lf_train_config *c, int resume, long stop_at, volatile sig_atomic_t *flag) {
    run_out o = {0};
    lf_trainer_opts opts = {.resume = resume, .stop_flag = flag};
    g_stop_at = stop_at;
    if (stop_at > 0) {
        opts.sinks[0] = &g_stop_sink;
        opts.n_sinks = 1;
    }
    lf_trainer *t = NULL;
    lf_status st = lf_trainer_create(&t, c, &opts);
    if (st != LF_OK) fail_msg("create: %s", lf_trainer_errmsg(t));
    g_t = t;
    o.st = lf_trainer_run(t);
    if (o.st != LF_OK && o.st != LF_ERR_PREEMPTED) fail_msg("run: %s", lf_trainer_errmsg(t));
    if (o.st == LF_ERR_PREEMPTED && !strstr(lf_trainer_errmsg(t), "resume"))
        fail_msg("the preemption message does not say to resume: %s", lf_trainer_errmsg(t));
    o.step = lf_trainer_step(t);
    o.reason = lf_trainer_stop_reason(t);
    lf_model *m = lf_trainer_model(t);
    o.n = lf_model_num_params(m);
    o.w = malloc(o.n * sizeof(float));
    LF_ASSERT_OK(lf_trainer_copy_params(t, o.w));
    lf_trainer_free(t);
    g_t = NULL;
    return o;
}

static void read_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

static void latest_of(const lf_train_config *c, char *name, size_t cap) {
    char path[LF_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/ckpt/latest", c->out_dir);
    read_file(path, name, cap);
    name[strcspn(name, "\n")] = 0;
}

/* Lines of log.jsonl containing `needle`, and the step of the last train record. */
static int count_lines(const lf_train_config *c, const char *needle, long *last_train) {
    char path[LF_PATH_MAX + 32], line[8192];
    snprintf(path, sizeof path, "%s/log.jsonl", c->out_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, needle)) n++;
        if (last_train && strstr(line, "\"type\":\"train\"")) *last_train = atol(strstr(line, "\"step\":") + 7);
    }
    fclose(f);
    return n;
}

/* The train losses as printed, by step (1-based). */
static void losses(const lf_train_config *c, char out[][40], int cap) {
    char path[LF_PATH_MAX + 32], line[8192];
    snprintf(path, sizeof path, "%s/log.jsonl", c->out_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"type\":\"train\"")) continue;
        long s = atol(strstr(line, "\"step\":") + 7);
        assert_true(s >= 1 && s <= cap);
        sscanf(strstr(line, "\"loss\":") + 7, "%39[^,]", out[s - 1]);
    }
    fclose(f);
}

static float *g_ref; /* the uninterrupted run's final weights */
static size_t g_ref_n;
static char g_ref_losses[20][40];

static void reference(void) {
    if (g_ref) return;
    lf_train_config c = tiny_config("straight");
    run_out o = run(&c, LF_RESUME_NO, 0, NULL);
    assert_int_equal(o.st, LF_OK);
    assert_int_equal(o.step, 20);
    g_ref = o.w;
    g_ref_n = o.n;
    losses(&c, g_ref_losses, 20);
}

/* Stop at step k, check what was left, resume, compare with the reference. */
static void stop_and_resume(const char *name, long k, int reason) {
    reference();
    lf_train_config c = tiny_config(name);
    g_reason = reason;
    run_out o = run(&c, LF_RESUME_NO, k, NULL);
    assert_int_equal(o.st, LF_ERR_PREEMPTED);
    assert_int_equal(o.step, k);
    assert_int_equal(o.reason, reason);
    char want[64], got[64];
    snprintf(want, sizeof want, "step_%08ld", k);
    latest_of(&c, got, sizeof got);
    assert_string_equal(got, want);
    char dir[LF_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/ckpt/%s", c.out_dir, want);
    LF_ASSERT_OK(lf_checkpoint_verify(dir, NULL));
    long last = -1;
    /* one checkpoint record for step k, also when k is a checkpoint step */
    char rec[96];
    snprintf(rec, sizeof rec, "\"type\":\"checkpoint\",\"step\":%ld,", k);
    assert_int_equal(count_lines(&c, rec, &last), 1);
    assert_int_equal(last, k); /* no step past k ran */
    assert_int_equal(count_lines(&c, "\"type\":\"preempted\"", NULL), 1);
    assert_int_equal(count_lines(&c, "\"status\":\"preempted\"", NULL), 1);
    free(o.w);

    run_out r = run(&c, LF_RESUME_AUTO, 0, NULL);
    assert_int_equal(r.st, LF_OK);
    assert_int_equal(r.step, 20);
    assert_int_equal(r.n, g_ref_n);
    assert_memory_equal(r.w, g_ref, g_ref_n * sizeof(float));
    char l[20][40];
    memset(l, 0, sizeof l);
    losses(&c, l, 20);
    for (int i = 0; i < 20; i++) assert_string_equal(l[i], g_ref_losses[i]);
    free(r.w);
}

static void test_stop_between_checkpoints(void **state) {
    (void)state;
    stop_and_resume("mid", 7, SIGTERM);
}

static void test_stop_on_a_checkpoint_step(void **state) {
    (void)state;
    stop_and_resume("on_ckpt", 10, SIGUSR1); /* saved by the interval already: not saved twice */
}

static void test_stop_before_the_first_step(void **state) {
    (void)state;
    reference();
    lf_train_config c = tiny_config("at_zero");
    volatile sig_atomic_t flag = SIGINT; /* a signal during set-up: the caller's flag is already set */
    run_out o = run(&c, LF_RESUME_NO, 0, &flag);
    assert_int_equal(o.st, LF_ERR_PREEMPTED);
    assert_int_equal(o.step, 0);
    assert_int_equal(o.reason, SIGINT);
    char got[64];
    latest_of(&c, got, sizeof got);
    assert_string_equal(got, "step_00000000");
    free(o.w);
    /* resumed at once, again stopped: the step-0 checkpoint is not written again */
    o = run(&c, LF_RESUME_AUTO, 0, &flag);
    assert_int_equal(o.st, LF_ERR_PREEMPTED);
    assert_int_equal(o.step, 0);
    long last = -1;
    assert_int_equal(count_lines(&c, "\"type\":\"checkpoint\",\"step\":0,", &last), 1);
    free(o.w);
    flag = 0;
    run_out r = run(&c, LF_RESUME_AUTO, 0, &flag);
    assert_int_equal(r.st, LF_OK);
    assert_memory_equal(r.w, g_ref, g_ref_n * sizeof(float));
    free(r.w);
}

/* The registry records a preempted run as "preempted", with the message. */
static void test_registry_says_preempted(void **state) {
    (void)state;
    lf_train_config c = tiny_config("reg");
    c.registry_enabled = 1;
    snprintf(c.registry_path, sizeof c.registry_path, "%s/reg.db", tmp);
    g_reason = SIGTERM;
    run_out o = run(&c, LF_RESUME_NO, 3, NULL);
    assert_int_equal(o.st, LF_ERR_PREEMPTED);
    free(o.w);
    lf_registry *reg = NULL;
    LF_ASSERT_OK(lf_registry_open(&reg, c.registry_path, 0));
    char *json = NULL;
    LF_ASSERT_OK(lf_registry_list_json(reg, NULL, &json));
    if (!strstr(json, "\"step\":3") || !strstr(json, "\"run_status\":\"preempted\""))
        fail_msg("registry: %s", json);
    lf_free(json);
    lf_registry_close(reg);
}

/* --resume auto: an out_dir without a checkpoint starts fresh (and equals a plain run). */
static void test_resume_auto_fresh(void **state) {
    (void)state;
    reference();
    lf_train_config c = tiny_config("auto_fresh");
    run_out r = run(&c, LF_RESUME_AUTO, 0, NULL);
    assert_int_equal(r.st, LF_OK);
    assert_memory_equal(r.w, g_ref, g_ref_n * sizeof(float));
    free(r.w);
    /* and a plain fresh start in that out_dir is still refused (it holds a run now) */
    lf_trainer *t = NULL;
    lf_trainer_opts opts = {.resume = LF_RESUME_NO};
    assert_int_equal(lf_trainer_create(&t, &c, &opts), LF_ERR_CONFIG);
    assert_non_null(strstr(lf_trainer_errmsg(t), "already holds a run"));
    lf_trainer_free(t);
}

/* --resume auto on an out_dir whose only checkpoint is damaged (and latest gone) is an error,
 * not a fresh start over it. */
static void test_resume_auto_damaged(void **state) {
    (void)state;
    lf_train_config c = tiny_config("auto_damaged");
    c.train_iters = 4;
    c.decay_iters = 4;
    c.ckpt_interval = 2;
    c.keep_last = 1;
    run_out r = run(&c, LF_RESUME_NO, 0, NULL);
    assert_int_equal(r.st, LF_OK);
    free(r.w);
    char p[LF_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/ckpt/latest", c.out_dir);
    assert_int_equal(unlink(p), 0);
    snprintf(p, sizeof p, "%s/ckpt/step_00000004/model.safetensors", c.out_dir);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, -4, SEEK_END);
    fputc(0x7f, f);
    fclose(f);
    lf_trainer *t = NULL;
    lf_trainer_opts opts = {.resume = LF_RESUME_AUTO};
    assert_int_equal(lf_trainer_create(&t, &c, &opts), LF_ERR_CHECKSUM);
    if (!strstr(lf_trainer_errmsg(t), "--resume auto") || !strstr(lf_trainer_errmsg(t), "step_00000004"))
        fail_msg("message: %s", lf_trainer_errmsg(t));
    lf_trainer_free(t);
}

/* keep_last 1 with keep_every 4, a checkpoint every 2 steps over 12: steps
 * 4, 8 and 12 stay (12 is the newest; the rest are multiples of 4). */
static void test_keep_every(void **state) {
    (void)state;
    lf_train_config c = tiny_config("keep_every");
    c.train_iters = 12;
    c.decay_iters = 12;
    c.ckpt_interval = 2;
    c.keep_last = 1;
    c.keep_every = 4;
    run_out r = run(&c, LF_RESUME_NO, 0, NULL);
    assert_int_equal(r.st, LF_OK);
    free(r.w);
    char root[LF_PATH_MAX + 16], names[512] = "";
    snprintf(root, sizeof root, "%s/ckpt", c.out_dir);
    DIR *d = opendir(root);
    assert_non_null(d);
    struct dirent *de;
    char list[16][64];
    int n = 0;
    while ((de = readdir(d)) && n < 16)
        if (de->d_name[0] != '.') snprintf(list[n++], 64, "%s", de->d_name);
    closedir(d);
    qsort(list, (size_t)n, 64, (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++) {
        strcat(names, list[i]);
        strcat(names, " ");
    }
    assert_string_equal(names, "latest step_00000004 step_00000008 step_00000012 ");
}

static int teardown(void **state) {
    free(g_ref);
    return char_fixture_teardown(state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_between_checkpoints),
        cmocka_unit_test(test_stop_on_a_checkpoint_step),
        cmocka_unit_test(test_stop_before_the_first_step),
        cmocka_unit_test(test_registry_says_preempted),
        cmocka_unit_test(test_resume_auto_fresh),
        cmocka_unit_test(test_resume_auto_damaged),
        cmocka_unit_test(test_keep_every),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
