/*
 * checkpoint.async and checkpoint.on_error (issue 17).
 *
 *  - Byte identity: the same run saved synchronously and asynchronously
 *    (every 2 steps, on a model whose files are a few hundred KiB) leaves
 *    the same step directories with the same files, byte for byte,
 *    trainer_state.json included, and the same `latest`; the async run's
 *    log says every save was a background one.
 *  - Write faults in the background: a sink arms lf_io_fail_after when it
 *    sees the train record of a checkpoint step, so the k-th file-system
 *    operation after the snapshot (they are all the writer's: nothing else
 *    in the step loop goes through the hook) fails with ENOSPC, for every k
 *    of the two saves that follow. on_error stop: either the fault fell in
 *    the rotation (logged; the run completes) or the run fails with a
 *    message naming the step, a file under the root and the errno's text;
 *    `latest` (read strictly) always names a complete checkpoint, never the
 *    failed one (except when only the directory fsync after latest's rename
 *    failed, where the new one is complete), and a plain resume completes
 *    the run with the uninterrupted run's bytes.
 *  - on_error continue, async and sync: the run completes, log.jsonl holds a
 *    checkpoint_error record with the step, the file and the errno's text,
 *    the failed step is not on disk as a checkpoint, the next save is
 *    latest, and the final weights are the uninterrupted run's (a failed
 *    save changes nothing in training).
 *  - Two failures at one boundary (a disk that stays full, the step-8
 *    write held back by the writer-delay hook until step 12's save reaps
 *    it): two checkpoint_error records, one per save_step.
 *  - Preemption with async on: the stop waits for the write in flight and
 *    leaves a complete checkpoint of the step reached; resuming gives the
 *    uninterrupted run's bytes.
 *  - Bad values of the new keys are configuration errors naming the key;
 *    async with ZeRO or eval.suite is refused with a message.
 */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include "test_util.h"
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/train.h"

#include "char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(32768);
}

static lf_train_config cfg_of(const char *name, int async) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 64; /* ~110 k parameters: model + optimizer files of ~1.3 MB */
    c.model.block_size = 16;
    c.model.dropout = 0.1f;
    c.micro_batch = 4;
    c.train_batch_size = 4;
    c.train_iters = 12;
    c.warmup_iters = 2;
    c.decay_iters = 12;
    c.lr = 3e-3f;
    c.eval_interval = 0;
    c.eval_iters = 1;
    c.ckpt_interval = 2;
    c.keep_last = 100;
    c.seed = 11;
    c.peak_gflops = 100;
    c.registry_enabled = 0;
    c.ckpt_async = async;
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

/* Two files hold the same bytes. */
static void assert_same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    if (na != nb || memcmp(x, y, na) != 0) fail_msg("'%s' (%zu bytes) and '%s' (%zu bytes) differ", a, na, b, nb);
    lf_free(x);
    lf_free(y);
}

/* Sorted names of the entries of dir (no . and ..), joined by spaces. */
static void list_dir(const char *dir, char *out, size_t cap) {
    char names[64][128];
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 64)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) snprintf(names[n++], 128, "%s", de->d_name);
    closedir(d);
    qsort(names, (size_t)n, 128, (int (*)(const void *, const void *))strcmp);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(out, names[i], cap - strlen(out) - 1);
        if (i + 1 < n) strncat(out, " ", cap - strlen(out) - 1);
    }
}

static lf_status run(const lf_train_config *c, const lf_trainer_opts *o, char *err, size_t cap) {
    lf_trainer *t = NULL;
    lf_status st = lf_trainer_create(&t, c, o);
    if (st != LF_OK) fail_msg("create: %s", lf_trainer_errmsg(t));
    st = lf_trainer_run(t);
    if (err) snprintf(err, cap, "%s", lf_trainer_errmsg(t));
    lf_trainer_free(t);
    return st;
}

/* The step `latest` names, strictly (-1: none or broken). */
static long latest_step(const lf_train_config *c) {
    char root[LF_PATH_MAX + 16], *dir = NULL;
    snprintf(root, sizeof root, "%s/ckpt", c->out_dir);
    if (lf_checkpoint_resolve_flags(root, LF_CKPT_RESOLVE_STRICT, &dir) != LF_OK) return -1;
    long s = atol(strrchr(dir, '/') + 6);
    LF_ASSERT_OK(lf_checkpoint_verify(dir, NULL));
    lf_free(dir);
    return s;
}

static void step_file(const lf_train_config *c, long step, const char *file, char *out, size_t cap) {
    snprintf(out, cap, "%s/ckpt/step_%08ld/%s", c->out_dir, step, file);
}

static void test_async_bytes_equal_sync(void **state) {
    (void)state;
    /* one out_dir (trainer_state.json holds the resolved configuration, out_dir included): the
     * synchronous run is moved aside before the asynchronous one */
    lf_train_config s = cfg_of("bytes", 0), a = cfg_of("bytes", 1);
    LF_ASSERT_OK(run(&s, NULL, NULL, 0));
    char moved[LF_PATH_MAX + 16];
    snprintf(moved, sizeof moved, "%s-sync", s.out_dir);
    assert_int_equal(rename(s.out_dir, moved), 0);
    snprintf(s.out_dir, sizeof s.out_dir, "%s", moved);
    LF_ASSERT_OK(run(&a, NULL, NULL, 0));
    char ls[4096], la[4096];
    snprintf(ls, sizeof ls, "%s/ckpt", s.out_dir);
    snprintf(la, sizeof la, "%s/ckpt", a.out_dir);
    char ns[4096], na[4096];
    list_dir(ls, ns, sizeof ns);
    list_dir(la, na, sizeof na);
    assert_string_equal(ns, na);
    assert_non_null(strstr(ns, "step_00000002"));
    assert_non_null(strstr(ns, "step_00000012"));
    for (long step = 2; step <= 12; step += 2) {
        char ds[LF_PATH_MAX + 64], da[LF_PATH_MAX + 64];
        snprintf(ds, sizeof ds, "%s/step_%08ld", ls, step);
        snprintf(da, sizeof da, "%s/step_%08ld", la, step);
        list_dir(ds, ns, sizeof ns);
        list_dir(da, na, sizeof na);
        assert_string_equal(ns, na);
        assert_non_null(strstr(ns, "model.safetensors"));
        assert_non_null(strstr(ns, "optimizer.safetensors"));
        assert_non_null(strstr(ns, "trainer_state.json"));
        char *save = NULL, *tok = strtok_r(ns, " ", &save);
        for (; tok; tok = strtok_r(NULL, " ", &save)) {
            char fs[LF_PATH_MAX + 256], fa[LF_PATH_MAX + 256];
            snprintf(fs, sizeof fs, "%s/%s", ds, tok);
            snprintf(fa, sizeof fa, "%s/%s", da, tok);
            assert_same_file(fs, fa);
        }
    }
    char ps[LF_PATH_MAX + 64], pa[LF_PATH_MAX + 64];
    snprintf(ps, sizeof ps, "%s/latest", ls);
    snprintf(pa, sizeof pa, "%s/latest", la);
    assert_same_file(ps, pa);
    char *log = read_log(&a);
    assert_int_equal(count(log, "\"type\":\"checkpoint\""), 6);
    assert_int_equal(count(log, "\"async\":true,\"snapshot_ms\""), 6); /* the records of background saves */
    assert_int_equal(count(log, "checkpoint_error"), 0);
    lf_free(log);
    log = read_log(&s);
    assert_int_equal(count(log, "\"type\":\"checkpoint\""), 6);
    assert_int_equal(count(log, "\"snapshot_ms\""), 0);
    lf_free(log);
}

/* A sink that arms the write-fault hook when it sees the checkpoint record
 * of step g_arm_step (k < 0: only notes the operation count there). That
 * record comes when the save is complete (async: when the writer has been
 * joined), so no write is in flight: the next operations counted are the
 * next save's, in the training thread or the writer. */
static long g_arm_step, g_arm_k, g_ops_at_arm, g_ops_at_next;
static int g_arm_sticky; /* arm lf_io_fail_all_after: a disk that stays full */
static void arm_emit(lf_obs_sink *sk, const lf_obs_record *r) {
    (void)sk;
    if (r->kind != LF_OBS_EVENT || !r->event || strcmp(r->event, "checkpoint")) return;
    if (g_arm_k < 0 && r->step > g_arm_step && !g_ops_at_next) g_ops_at_next = lf_io_op_count();
    if (r->step != g_arm_step) return;
    g_ops_at_arm = lf_io_op_count();
    if (g_arm_k >= 0) (g_arm_sticky ? lf_io_fail_all_after : lf_io_fail_after)(g_arm_k, ENOSPC);
}
static void arm_close(lf_obs_sink *sk) { (void)sk; }
static lf_obs_sink g_arm_sink = {.name = "arm", .emit = arm_emit, .close = arm_close};

static lf_status run_armed(const lf_train_config *c, long step, long k, char *err, size_t cap) {
    g_arm_step = step;
    g_arm_k = k;
    lf_trainer_opts o = {.n_sinks = 1};
    o.sinks[0] = &g_arm_sink;
    lf_status st = run(c, &o, err, cap);
    lf_io_fail_after(-1, 0);
    return st;
}

/* Components of out_dir/ckpt: the mkdir calls lf_mkdirs makes for it. */
static long root_depth(const lf_train_config *c) {
    long n = 0;
    for (const char *p = c->out_dir; *p; p++) n += *p == '/';
    return n + 1;
}

static void assert_final_equals(const lf_train_config *c, const lf_train_config *ref) {
    char a[LF_PATH_MAX + 64], b[LF_PATH_MAX + 64];
    step_file(c, 12, "model.safetensors", a, sizeof a);
    step_file(ref, 12, "model.safetensors", b, sizeof b);
    assert_same_file(a, b);
    step_file(c, 12, "optimizer.safetensors", a, sizeof a);
    step_file(ref, 12, "optimizer.safetensors", b, sizeof b);
    assert_same_file(a, b);
}

/* Every fault of the save of step 8 (armed after step 4's save), async, on_error stop. */
static lf_train_config sweep_cfg(const char *name, int async) {
    lf_train_config c = cfg_of(name, async);
    c.model.n_layer = 1; /* many runs: the smallest model */
    c.model.n_embd = 16;
    c.ckpt_interval = 4;
    return c;
}

static void test_async_fault_sweep(void **state) {
    (void)state;
    lf_train_config ref = sweep_cfg("sweep-ref", 0);
    LF_ASSERT_OK(run(&ref, NULL, NULL, 0));
    /* the operations of step 8's save (between the records of 4 and 8), counted on a run without a fault */
    lf_train_config c = sweep_cfg("sweep-count", 1);
    char none[8];
    g_ops_at_next = 0;
    LF_ASSERT_OK(run_armed(&c, 4, -1, none, sizeof none));
    long ops_run = g_ops_at_next - g_ops_at_arm;
    assert_true(ops_run > 30);
    const char *want = strerror(ENOSPC);
    int failed = 0, completed = 0;
    for (long k = 0; k < ops_run; k++) {
        char name[64], err[1024];
        snprintf(name, sizeof name, "sweep-%ld", k);
        c = sweep_cfg(name, 1);
        lf_status st = run_armed(&c, 4, k, err, sizeof err);
        long l = latest_step(&c);
        if (st == LF_OK) {
            completed++;
            assert_int_equal(l, 12); /* a fault in the rotation (or none left to hit) */
        } else {
            failed++;
            assert_int_equal(st, LF_ERR_IO);
            char root[LF_PATH_MAX + 16];
            snprintf(root, sizeof root, "%s/ckpt", c.out_dir);
            if (!strstr(err, root) || !strstr(err, want) || !strstr(err, "the checkpoint of step "))
                fail_msg("fault %ld: the message names no file under the root, no step or no '%s': %s", k, want, err);
            long bad = atol(strstr(err, "the checkpoint of step ") + 23);
            if (bad != 8 && bad != 12) fail_msg("fault %ld: %s", k, err);
            /* latest is a complete checkpoint (latest_step verified it): never the failed one, except when only the
             * fsync after latest's rename failed; the previous one, or the next when a save started before the
             * failure was found (a write slower than the steps up to the next save) */
            if (l < bad - 4 || (l == bad && !strstr(err, "fsync of directory")))
                fail_msg("fault %ld: the save of step %ld failed but latest names step %ld: %s", k, bad, l, err);
            /* resumable: a plain resume ends with the uninterrupted run's bytes (every third fault: time) */
            if (k % 3 == 0) {
                lf_trainer_opts o = {.resume = LF_RESUME_YES};
                c.ckpt_async = 0;
                LF_ASSERT_OK(run(&c, &o, NULL, 0));
                assert_final_equals(&c, &ref);
            }
        }
        char root[LF_PATH_MAX + 16];
        snprintf(root, sizeof root, "%s/ckpt", c.out_dir);
        char names[4096];
        list_dir(root, names, sizeof names);
        if (strstr(names, ".tmp_") || strstr(names, "latest.tmp")) fail_msg("fault %ld left %s", k, names);
        lf_test_rmrf(c.out_dir);
    }
    printf("async fault sweep: %ld operations in step 8's save, %d faults failed the run, %d completed\n", ops_run,
           failed, completed);
    assert_true(failed >= ops_run - 4); /* every operation of the save but the rotation's */
}

static void test_on_error_continue(void **state) {
    (void)state;
    lf_train_config ref = cfg_of("continue-ref", 0);
    LF_ASSERT_OK(run(&ref, NULL, NULL, 0));
    for (int async = 0; async < 2; async++) {
        lf_train_config c = cfg_of(async ? "continue-async" : "continue-sync", async);
        c.ckpt_on_error = LF_CKPT_ON_ERROR_CONTINUE;
        /* the save of step 6 fails creating its model file: after one mkdir per component of
         * the root (lf_mkdirs) and the mkdir of .tmp_step_00000006 */
        char err[1024];
        LF_ASSERT_OK(run_armed(&c, 4, root_depth(&c) + 1, err, sizeof err));
        char *log = read_log(&c);
        assert_int_equal(count(log, "\"type\":\"checkpoint_error\""), 1);
        const char *r = strstr(log, "\"type\":\"checkpoint_error\"");
        const char *eol = strchr(r, '\n');
        char line[4096];
        snprintf(line, sizeof line, "%.*s", (int)(eol - r), r);
        char file[LF_PATH_MAX + 64];
        snprintf(file, sizeof file, "\"file\":\"%s/ckpt/.tmp_step_00000006/model.safetensors\"", c.out_dir);
        if (!strstr(line, "\"save_step\":6,\"file\"") || !strstr(line, "\"errno\":\"No space left on device\"") ||
            !strstr(line, file))
            fail_msg("checkpoint_error record: %s", line);
        assert_int_equal(count(log, "\"type\":\"checkpoint\""), 5); /* 2, 4, 8, 10, 12 */
        assert_non_null(strstr(log, "\"status\":\"ok\""));
        lf_free(log);
        char d6[LF_PATH_MAX + 64];
        snprintf(d6, sizeof d6, "%s/ckpt/step_00000006", c.out_dir);
        assert_int_equal(access(d6, F_OK), -1);
        assert_int_equal(latest_step(&c), 12);
        assert_final_equals(&c, &ref);
    }
}

/* A disk that stays full under async saves, on_error continue: the write of
 * step 8 is held back (the writer's delay hook) until the save of step 12
 * starts and reaps it, so its failure and step 12's (found by the end of
 * the run's wait) meet at the last boundary. Each gets its checkpoint_error
 * record, with its own save_step; latest stays step 4; and since the failed
 * save is the final one, which nothing can retry, the run ends with the
 * error and its end record is not "ok" (issue 31: it used to end ok). */
static void test_two_failures_one_boundary(void **state) {
    (void)state;
    lf_train_config c = cfg_of("two-failures", 1);
    c.ckpt_interval = 4;
    c.ckpt_on_error = LF_CKPT_ON_ERROR_CONTINUE;
    g_arm_step = 4; /* once step 4 is on disk, every file operation fails */
    g_arm_k = 0;
    g_arm_sticky = 1;
    lf_trainer_opts o = {.n_sinks = 1, .inject_write_delay_seconds = 1.0};
    o.sinks[0] = &g_arm_sink;
    char err[1024];
    lf_status st = run(&c, &o, err, sizeof err);
    lf_io_fail_after(-1, 0);
    g_arm_sticky = 0;
    if (st == LF_OK) fail_msg("the run ended ok although its final save failed");
    if (!strstr(err, "the final checkpoint (step 12) failed") || !strstr(err, "No space left on device"))
        fail_msg("the error does not name the final checkpoint: %s", err);
    char *log = read_log(&c);
    assert_int_equal(count(log, "\"type\":\"checkpoint_error\""), 2);
    for (int s = 8; s <= 12; s += 4) {
        char want[64];
        snprintf(want, sizeof want, "\"save_step\":%d,\"file\"", s);
        if (!strstr(log, want)) fail_msg("no checkpoint_error record for the save of step %d:\n%s", s, log);
    }
    assert_non_null(strstr(log, "No space left on device"));
    assert_null(strstr(log, "\"status\":\"ok\""));
    assert_non_null(strstr(log, "\"status\":\"error\""));
    lf_free(log);
    assert_int_equal(latest_step(&c), 4);
}

static void test_on_error_stop_sync(void **state) {
    (void)state;
    lf_train_config c = cfg_of("stop-sync", 0);
    char err[1024];
    assert_int_equal(run_armed(&c, 4, root_depth(&c) + 1, err, sizeof err), LF_ERR_IO);
    if (!strstr(err, "the checkpoint of step 6 failed") || !strstr(err, "No space left on device") ||
        !strstr(err, "step_00000006"))
        fail_msg("message: %s", err);
    assert_int_equal(latest_step(&c), 4);
    char *log = read_log(&c);
    assert_int_equal(count(log, "\"type\":\"train\""), 6); /* stopped at the boundary after step 6 */
    assert_non_null(strstr(log, "\"status\":\"error\""));
    lf_free(log);
}

/* A stop request when step 6's train record is seen: with async, step 6's save starts in the
 * background and the stop at that boundary waits for it (no second save). */
static lf_trainer *g_t;
static void stop_emit(lf_obs_sink *sk, const lf_obs_record *r) {
    (void)sk;
    if (r->kind == LF_OBS_TRAIN && (r->step == 6 || r->step == 9)) lf_trainer_request_stop(g_t, 15);
}
static lf_obs_sink g_stop_sink = {.name = "stop", .emit = stop_emit, .close = arm_close};

static void test_async_preempt(void **state) {
    (void)state;
    lf_train_config ref = cfg_of("preempt-ref", 0);
    LF_ASSERT_OK(run(&ref, NULL, NULL, 0));
    lf_train_config c = cfg_of("preempt-async", 1);
    for (long want = 6; want <= 9; want += 3) { /* 6: a checkpoint step; 9: not one */
        lf_trainer_opts o = {.resume = want == 6 ? LF_RESUME_NO : LF_RESUME_YES, .n_sinks = 1};
        o.sinks[0] = &g_stop_sink;
        lf_trainer *t = NULL;
        LF_ASSERT_OK(lf_trainer_create(&t, &c, &o));
        g_t = t;
        assert_int_equal(lf_trainer_run(t), LF_ERR_PREEMPTED);
        assert_int_equal(lf_trainer_step(t), want);
        lf_trainer_free(t);
        assert_int_equal(latest_step(&c), want);
    }
    char *log = read_log(&c);
    /* 2, 4, 6 in the background; 8 in the background; 9 by the stop itself */
    assert_int_equal(count(log, "\"type\":\"checkpoint\""), 5);
    assert_int_equal(count(log, "\"type\":\"preempted\""), 2);
    lf_free(log);
    lf_trainer_opts o = {.resume = LF_RESUME_YES};
    LF_ASSERT_OK(run(&c, &o, NULL, 0));
    assert_final_equals(&c, &ref);
}

static void test_config_keys(void **state) {
    (void)state;
    char ds[700], od[700];
    snprintf(ds, sizeof ds, "data.dataset=%s", data_dir);
    snprintf(od, sizeof od, "out_dir=%s/cfg", tmp);
    lf_train_config c;
    {
        const char *ov[] = {ds, od, "checkpoint.async=true", "checkpoint.on_error=continue"};
        LF_ASSERT_OK(lf_train_config_load_world(&c, NULL, 1, 4, ov));
        assert_int_equal(c.ckpt_async, 1);
        assert_int_equal(c.ckpt_on_error, LF_CKPT_ON_ERROR_CONTINUE);
        char *json = lf_train_config_to_json(&c); /* the dump names the choice, and parses back */
        const char *k = strstr(json, "\"on_error\"");
        assert_non_null(k);
        assert_non_null(strstr(k, "\"continue\""));
        lf_train_config back;
        LF_ASSERT_OK(lf_train_config_parse_world(&back, json, "dump", 1, 0, NULL));
        assert_int_equal(back.ckpt_async, 1);
        assert_int_equal(back.ckpt_on_error, LF_CKPT_ON_ERROR_CONTINUE);
        lf_free(json);
    }
    {
        lf_train_config d = lf_train_config_default();
        assert_int_equal(d.ckpt_async, 0);
        assert_int_equal(d.ckpt_on_error, LF_CKPT_ON_ERROR_STOP);
    }
    static const struct {
        const char *ov, *needle;
    } bad[] = {
        {"checkpoint.on_error=maybe", "checkpoint.on_error"},
        {"checkpoint.async=3", "checkpoint.async"},
        {"checkpoint.async=\"yes\"", "checkpoint.async"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *ov[] = {ds, od, bad[i].ov};
        assert_int_equal(lf_train_config_load_world(&c, NULL, 1, 3, ov), LF_ERR_CONFIG);
        LF_ASSERT_ERR_CONTAINS(bad[i].needle);
    }
    {
        const char *ov[] = {ds, od, "checkpoint.async=true", "zero_optimization.stage=1"};
        assert_int_equal(lf_train_config_load_world(&c, NULL, 2, 4, ov), LF_ERR_CONFIG);
        LF_ASSERT_ERR_CONTAINS("checkpoint.async");
        LF_ASSERT_ERR_CONTAINS("zero_optimization.stage");
    }
    {
        const char *ov[] = {ds, od, "checkpoint.async=true", "eval.suite=/some/dir"};
        assert_int_equal(lf_train_config_load_world(&c, NULL, 1, 4, ov), LF_ERR_CONFIG);
        LF_ASSERT_ERR_CONTAINS("eval.suite");
    }
    /* a struct filled by hand is refused by the trainer too */
    lf_train_config h = cfg_of("hand", 1);
    snprintf(h.eval_suite, sizeof h.eval_suite, "%s", tmp);
    lf_trainer *t = NULL;
    assert_int_equal(lf_trainer_create(&t, &h, NULL), LF_ERR_CONFIG);
    assert_non_null(strstr(lf_trainer_errmsg(t), "checkpoint.async"));
    lf_trainer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_async_bytes_equal_sync),
        cmocka_unit_test(test_on_error_stop_sync),
        cmocka_unit_test(test_on_error_continue),
        cmocka_unit_test(test_two_failures_one_boundary),
        cmocka_unit_test(test_async_preempt),
        cmocka_unit_test(test_async_fault_sweep),
    };
    return cmocka_run_group_tests(tests, setup, char_fixture_teardown);
}
