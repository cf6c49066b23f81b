/*
 * Rollback on divergence (monitor.alerts.*.action rollback, issue 17).
 *
 * An injected NaN gradient at step 7 (checkpoints every 4 steps) and an
 * injected loss spike at step 10 roll the run back to the last checkpoint
 * (4, resp. 8) in process and move the data cursor past the window (data
 * steps 4-6, resp. 8-9); the run then continues to the end. Checked:
 *  - log.jsonl has the alert with action rollback and one rollback record
 *    with from_step, to_step, the reason, the skipped batch indices and row
 *    range (global batch 4 rows: rows 16-27 for NaN), and the steps after
 *    it are counted again from the checkpoint's step;
 *  - the final model.safetensors and optimizer.safetensors equal, bit for
 *    bit, those of a run built explicitly never to see those rows: a fresh
 *    run stopped at the checkpoint's step (train.stop_at), resumed with
 *    opts.skip_batches = the window's length;
 *  - and differ from the run without an alert (the skip did move the
 *    data: a rollback that skipped nothing would equal it);
 *  - trainer_state.json carries the new cursor (batch_offset) and the
 *    rollback count.
 * Also: monitor.alerts.max_rollbacks (the alert repeating at every replay,
 * opts.inject_repeat): the rollbacks allowed happen, the next alert stops
 * the run with the history; no checkpoint yet -> a clear stop; the config
 * accepts rollback only for nan and loss_spike and range-checks
 * max_rollbacks; ZeRO-3 is refused.
 */
#include "test_util.h"
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/train.h"

#include "char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(32768);
}

static lf_train_config cfg_of(const char *name) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.model.block_size = 16;
    c.model.dropout = 0.1f; /* keyed by the step: the replay after a rollback must land on the same keys */
    c.micro_batch = 4;
    c.train_batch_size = 4;
    c.train_iters = 16;
    c.warmup_iters = 2;
    c.decay_iters = 16;
    c.lr = 3e-3f;
    c.eval_interval = 0;
    c.eval_iters = 1;
    c.ckpt_interval = 4;
    c.keep_last = 100;
    c.seed = 5;
    c.peak_gflops = 100;
    c.registry_enabled = 0;
    c.alert_nan_action = LF_ALERT_ROLLBACK;
    c.alert_spike_action = LF_ALERT_ROLLBACK;
    c.alert_spike_window = 5;
    c.alert_spike_zscore = 6;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, name);
    return c;
}

__attribute__((noinline)) static char *slurp(const char *path, size_t *len) {
    char *text = NULL;
    size_t n = 0;
    if (lf_file_read_all(path, 0, &text, &n) != LF_OK) fail_msg("cannot read %s: %s", path, lf_last_error());
    if (len) *len = n;
    return text;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

static char *read_log(const lf_train_config *c) {
    char path[LF_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/log.jsonl", c->out_dir);
    return slurp(path, NULL);
}

static lf_status run(const lf_train_config *c, const lf_trainer_opts *o, char *err, size_t cap) {
    lf_trainer *t = NULL;
    lf_status st = lf_trainer_create(&t, c, o);
    if (st != LF_OK) fail_msg("create: %s", lf_trainer_errmsg(t));
    st = lf_trainer_run(t);
    if (err) snprintf(err, cap, "%s", lf_trainer_errmsg(t));
    else if (st != LF_OK) fail_msg("run: %s", lf_trainer_errmsg(t));
    lf_trainer_free(t);
    return st;
}

static int same_file(const lf_train_config *a, const lf_train_config *b, long step, const char *file) {
    char pa[LF_PATH_MAX + 64], pb[LF_PATH_MAX + 64];
    snprintf(pa, sizeof pa, "%s/ckpt/step_%08ld/%s", a->out_dir, step, file);
    snprintf(pb, sizeof pb, "%s/ckpt/step_%08ld/%s", b->out_dir, step, file);
    size_t na, nb;
    char *x = slurp(pa, &na), *y = slurp(pb, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    lf_free(x);
    lf_free(y);
    return same;
}

/* The value after "key": in a trainer_state.json (printed with tabs), whitespace skipped. */
static const char *value_of(const char *json, const char *key) {
    char k[128];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(json, k);
    if (!p) fail_msg("no %s in trainer_state.json", k);
    p += strlen(k);
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

/* The one line of the log holding `needle` (copied into out). */
static void line_of(const char *log, const char *needle, char *out, size_t cap) {
    const char *p = strstr(log, needle);
    if (!p) fail_msg("no '%s' in the log", needle);
    while (p > log && p[-1] != '\n') p--;
    const char *e = strchr(p, '\n');
    snprintf(out, cap, "%.*s", (int)(e ? e - p : (long)strlen(p)), p);
}

/* kind: "nan" or "loss_spike"; the alert at step k, the checkpoint before it at c; zero: ZeRO stage (one rank). */
static void rollback_case(const char *kind, long k, long c, int zero) {
    int nan = !strcmp(kind, "nan");
    char name[64];
    snprintf(name, sizeof name, "rb-%s-z%d", kind, zero);
    lf_train_config rb = cfg_of(name);
    rb.zero_stage = zero;
    lf_trainer_opts o = {0};
    if (nan)
        o.inject_nan_step = k;
    else
        o.inject_spike_step = k;
    LF_ASSERT_OK(run(&rb, &o, NULL, 0));

    char *log = read_log(&rb), line[4096], want[256];
    char alert[128];
    snprintf(alert, sizeof alert, "\"kind\":\"%s\",\"action\":\"rollback\"", kind);
    assert_int_equal(count(log, alert), 1);
    assert_int_equal(count(log, "\"type\":\"alert\""), 1);
    assert_int_equal(count(log, "\"type\":\"rollback\""), 1);
    line_of(log, "\"type\":\"rollback\"", line, sizeof line);
    const long G = 4, first = c, last = k - 1; /* data steps skipped: the batches of steps c+1..k */
    snprintf(want, sizeof want,
             "\"from_step\":%ld,\"to_step\":%ld,\"reason\":\"%s\",\"checkpoint\":\"%s/ckpt/step_%08ld\","
             "\"skipped_batches\":[%ld,%ld],\"skipped_rows\":[%ld,%ld],\"batch_offset\":%ld,\"rollbacks\":1",
             k, c, kind, rb.out_dir, c, first, last, first * G, (last + 1) * G - 1, k - c);
    if (!strstr(line, want)) fail_msg("rollback record\n  %s\nlacks\n  %s", line, want);
    /* steps 1..k-1, then c+1..16 again; the offending step k has no train record */
    assert_int_equal(count(log, "\"type\":\"train\""), (int)(k - 1 + 16 - c));
    assert_non_null(strstr(log, "\"status\":\"ok\""));
    lf_free(log);
    char path[LF_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/ckpt/step_00000016/trainer_state.json", rb.out_dir);
    char *st = slurp(path, NULL);
    assert_int_equal(atol(value_of(st, "batch_offset")), k - c);
    assert_int_equal(atol(value_of(st, "next_step")), 16 + k - c); /* the data step the next step reads */
    assert_int_equal(atol(value_of(strstr(st, "\"rollbacks\""), "count")), 1);
    lf_free(st);

    /* the run that never saw those rows, constructed explicitly */
    snprintf(name, sizeof name, "ref-%s-z%d", kind, zero);
    lf_train_config ref = cfg_of(name);
    ref.zero_stage = zero;
    ref.stop_at = c;
    LF_ASSERT_OK(run(&ref, NULL, NULL, 0));
    ref.stop_at = 0;
    lf_trainer_opts ro = {.resume = LF_RESUME_YES, .skip_batches = k - c};
    LF_ASSERT_OK(run(&ref, &ro, NULL, 0));
    assert_true(same_file(&rb, &ref, 16, "model.safetensors"));
    assert_true(same_file(&rb, &ref, 16, "optimizer.safetensors"));
    /* and the skip did matter: a run with no alert ends elsewhere */
    snprintf(name, sizeof name, "plain-%s-z%d", kind, zero);
    lf_train_config plain = cfg_of(name);
    plain.zero_stage = zero;
    LF_ASSERT_OK(run(&plain, NULL, NULL, 0));
    assert_false(same_file(&rb, &plain, 16, "model.safetensors"));
    /* the checkpoint the rollback started from is the plain run's too (nothing before it changed) */
    assert_true(same_file(&rb, &plain, c, "model.safetensors"));
}

static void test_rollback_nan(void **state) {
    (void)state;
    rollback_case("nan", 7, 4, 0);
}

/* ZeRO stages 1 and 2 (one rank): the rollback reloads through zero_resume_read, the moments into the shard */
static void test_rollback_zero(void **state) {
    (void)state;
    rollback_case("nan", 7, 4, 1);
    rollback_case("loss_spike", 10, 8, 2);
}

static void test_rollback_spike(void **state) {
    (void)state;
    rollback_case("loss_spike", 10, 8, 0);
}

/* The NaN at step 7 comes back at every replay: max_rollbacks 2 allows two, the third alert stops. */
static void test_max_rollbacks(void **state) {
    (void)state;
    lf_train_config c = cfg_of("max-rb");
    c.alert_max_rollbacks = 2;
    lf_trainer_opts o = {.inject_nan_step = 7, .inject_repeat = 1};
    char err[1024];
    assert_int_equal(run(&c, &o, err, sizeof err), LF_ERR_NUMERIC);
    if (!strstr(err, "step 7: non-finite") || !strstr(err, "max_rollbacks is 2") ||
        !strstr(err, "rolled back 2 times") ||
        !strstr(err, "step 7 -> 4 (nan; batches 4-6 skipped); step 7 -> 4 (nan; batches 7-9 skipped)"))
        fail_msg("message: %s", err);
    char *log = read_log(&c);
    assert_int_equal(count(log, "\"type\":\"rollback\""), 2);
    assert_int_equal(count(log, "\"kind\":\"nan\",\"action\":\"rollback\""), 2);
    assert_int_equal(count(log, "\"kind\":\"nan\",\"action\":\"stop\""), 1);
    assert_int_equal(count(log, "\"type\":\"train\""), 6 + 2 + 2); /* 1-6, then 5-6 twice */
    lf_free(log);
    /* max_rollbacks 0: the first alert stops */
    c = cfg_of("max-rb0");
    c.alert_max_rollbacks = 0;
    assert_int_equal(run(&c, &o, err, sizeof err), LF_ERR_NUMERIC);
    if (!strstr(err, "max_rollbacks is 0") || !strstr(err, "no history")) fail_msg("message: %s", err);
}

static void test_no_checkpoint(void **state) {
    (void)state;
    lf_train_config c = cfg_of("no-ckpt");
    c.ckpt_interval = 10;
    lf_trainer_opts o = {.inject_nan_step = 3};
    char err[1024];
    assert_int_equal(run(&c, &o, err, sizeof err), LF_ERR_NUMERIC);
    if (!strstr(err, "step 3: non-finite") || !strstr(err, "no checkpoint to roll back to") ||
        !strstr(err, "monitor.alerts.nan.action is rollback"))
        fail_msg("message: %s", err);
    char *log = read_log(&c);
    assert_int_equal(count(log, "\"type\":\"rollback\""), 0);
    assert_non_null(strstr(log, "\"status\":\"error\""));
    lf_free(log);
}

/* A rollback across an earlier resume keeps the cursor: resume from the rolled-back run's step 12
 * and run on; the run's state carries the offset and the count. */
static void test_rollback_survives_resume(void **state) {
    (void)state;
    lf_train_config c = cfg_of("rb-resume");
    c.stop_at = 12;
    lf_trainer_opts o = {.inject_nan_step = 7};
    LF_ASSERT_OK(run(&c, &o, NULL, 0));
    c.stop_at = 0;
    lf_trainer_opts r = {.resume = LF_RESUME_YES};
    LF_ASSERT_OK(run(&c, &r, NULL, 0));
    lf_train_config whole = cfg_of("rb-whole");
    LF_ASSERT_OK(run(&whole, &o, NULL, 0));
    assert_true(same_file(&c, &whole, 16, "model.safetensors"));
    char path[LF_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/ckpt/step_00000016/trainer_state.json", c.out_dir);
    char *st = slurp(path, NULL);
    assert_int_equal(atol(value_of(st, "batch_offset")), 3);
    const char *h = value_of(st, "history"), *want = "\"step 7 -> 4 (nan; batches 4-6 skipped)\"";
    assert_int_equal(strncmp(h, want, strlen(want)), 0);
    lf_free(st);
}

/* With checkpoint.async the rollback waits for the write in flight (the checkpoint it goes back
 * to may still be being written when the NaN comes): the same bytes as the synchronous run. */
static void test_rollback_async(void **state) {
    (void)state;
    lf_train_config s = cfg_of("rb-sync"), a = cfg_of("rb-async");
    a.ckpt_async = 1;
    a.ckpt_interval = s.ckpt_interval = 6; /* the NaN comes one step after the save of step 6 */
    lf_trainer_opts o = {.inject_nan_step = 7};
    LF_ASSERT_OK(run(&s, &o, NULL, 0));
    LF_ASSERT_OK(run(&a, &o, NULL, 0));
    assert_true(same_file(&s, &a, 16, "model.safetensors"));
    assert_true(same_file(&s, &a, 16, "optimizer.safetensors"));
    char *log = read_log(&a), line[4096];
    line_of(log, "\"type\":\"rollback\"", line, sizeof line);
    assert_non_null(strstr(line, "\"from_step\":7,\"to_step\":6,"));
    lf_free(log);
}

static void test_config(void **state) {
    (void)state;
    char ds[700], od[700];
    snprintf(ds, sizeof ds, "data.dataset=%s", data_dir);
    snprintf(od, sizeof od, "out_dir=%s/cfg", tmp);
    lf_train_config c;
    {
        const char *ov[] = {ds, od, "monitor.alerts.nan.action=rollback", "monitor.alerts.loss_spike.action=rollback",
                            "monitor.alerts.max_rollbacks=7"};
        LF_ASSERT_OK(lf_train_config_load_world(&c, NULL, 1, 5, ov));
        assert_int_equal(c.alert_nan_action, LF_ALERT_ROLLBACK);
        assert_int_equal(c.alert_spike_action, LF_ALERT_ROLLBACK);
        assert_int_equal(c.alert_max_rollbacks, 7);
        assert_int_equal(lf_train_config_default().alert_max_rollbacks, 3);
    }
    static const struct {
        const char *ov, *needle;
    } bad[] = {
        {"monitor.alerts.stall.action=rollback", "monitor.alerts.stall.action"},
        {"monitor.alerts.nan.action=undo", "monitor.alerts.nan.action"},
        {"monitor.alerts.max_rollbacks=-1", "monitor.alerts.max_rollbacks"},
        {"monitor.alerts.max_rollbacks=1.5", "monitor.alerts.max_rollbacks"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *ov[] = {ds, od, bad[i].ov};
        assert_int_equal(lf_train_config_load_world(&c, NULL, 1, 3, ov), LF_ERR_CONFIG);
        LF_ASSERT_ERR_CONTAINS(bad[i].needle);
    }
    const char *ov[] = {ds, od, "monitor.alerts.loss_spike.action=rollback", "zero_optimization.stage=3"};
    assert_int_equal(lf_train_config_load_world(&c, NULL, 1, 4, ov), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("monitor.alerts.loss_spike.action");
    LF_ASSERT_ERR_CONTAINS("ZeRO-3");
    /* a negative skip is a bad argument */
    lf_train_config h = cfg_of("neg-skip");
    lf_trainer_opts o = {.skip_batches = -2};
    lf_trainer *t = NULL;
    assert_int_equal(lf_trainer_create(&t, &h, &o), LF_ERR_INVALID_ARG);
    assert_non_null(strstr(lf_trainer_errmsg(t), "skip_batches"));
    lf_trainer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_rollback_nan),
        cmocka_unit_test(test_rollback_spike),
        cmocka_unit_test(test_rollback_zero),
        cmocka_unit_test(test_max_rollbacks),
        cmocka_unit_test(test_no_checkpoint),
        cmocka_unit_test(test_rollback_survives_resume),
        cmocka_unit_test(test_rollback_async),
    };
    return cmocka_run_group_tests(tests, setup, getenv("LF_TEST_KEEP") ? NULL : char_fixture_teardown);
}
