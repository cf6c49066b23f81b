/*
 * In-run alerts through the trainer's test hooks: a NaN gradient (stop: the
 * run ends non-zero with no checkpoint; skip_step: the step is dropped and
 * AdamW's count does not advance), a loss spike (log / skip_step), a stall
 * (the watchdog reports it and calls on_fatal for "exit"). Each alert must
 * show in log.jsonl and on /metrics (llmforge_alerts_total,
 * llmforge_skipped_steps_total), fetched from the live endpoint after the
 * run while the trainer still holds it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "test_util.h"
#include "llmforge/data.h"
#include "llmforge/train.h"

#include "char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(32768);
}

static lf_train_config tiny(const char *name) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.model.block_size = 16;
    c.micro_batch = 4;
    c.train_batch_size = 4;
    c.train_iters = 12;
    c.warmup_iters = 0;
    c.decay_iters = 12;
    c.eval_interval = 0;
    c.eval_iters = 1;
    c.ckpt_interval = 0;
    c.peak_gflops = 100; /* no FMA probe in tests */
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, name);
    return c;
}

static char *read_log(const lf_train_config *c) {
    char path[1200], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/log.jsonl", c->out_dir);
    LF_ASSERT_OK(lf_file_read_all(path, 0, &text, &len));
    return text;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* GET /metrics from 127.0.0.1:port (HTTP/1.0, whole response). */
static char *fetch_metrics(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while ((got = read(fd, buf + len, cap - 1 - len)) > 0) len += (size_t)got;
    buf[len] = 0;
    close(fd);
    return buf;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &sl) != 0) {
        close(fd);
        return 0;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static void test_nan_stop(void **state) {
    (void)state;
    lf_train_config c = tiny("nan-stop");
    c.ckpt_interval = 2; /* checkpoints before the NaN exist; none after it */
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.inject_nan_step = 5};
    LF_ASSERT_OK(lf_trainer_create(&t, &c, &o));
    assert_int_equal(lf_trainer_run(t), LF_ERR_NUMERIC);
    assert_non_null(strstr(lf_trainer_errmsg(t), "non-finite"));
    assert_non_null(strstr(lf_trainer_errmsg(t), "step 5"));
    lf_trainer_free(t);
    char *log = read_log(&c);
    assert_int_equal(count(log, "\"type\":\"alert\""), 1);
    assert_non_null(strstr(log, "\"kind\":\"nan\",\"action\":\"stop\""));
    assert_non_null(strstr(log, "\"type\":\"end\""));
    assert_non_null(strstr(log, "\"status\":\"error\""));
    assert_int_equal(count(log, "\"type\":\"train\""), 4); /* steps 1-4 only */
    lf_free(log);
    char ck[1300];
    snprintf(ck, sizeof ck, "%s/ckpt/step_00000004", c.out_dir);
    assert_int_equal(access(ck, F_OK), 0);
    snprintf(ck, sizeof ck, "%s/ckpt/step_00000005", c.out_dir);
    assert_int_equal(access(ck, F_OK), -1);
}

static void test_nan_skip_and_metrics(void **state) {
    (void)state;
    lf_train_config c = tiny("nan-skip");
    c.alert_nan_action = LF_ALERT_SKIP;
    int port = free_port();
    assert_true(port > 0);
    c.prom_port = port;
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.inject_nan_step = 3};
    LF_ASSERT_OK(lf_trainer_create(&t, &c, &o));
    LF_ASSERT_OK(lf_trainer_run(t));
    /* weights stayed finite: the poisoned update was never applied */
    lf_model *m = lf_trainer_model(t);
    const float *p = lf_model_params(m);
    for (size_t i = 0; i < lf_model_num_params(m); i++) assert_true(isfinite(p[i]));
    char *metrics = fetch_metrics(port);
    lf_trainer_free(t);
    assert_non_null(strstr(metrics, "200 OK"));
    assert_non_null(strstr(metrics, "llmforge_skipped_steps_total{"));
    const char *sk = strstr(metrics, "llmforge_skipped_steps_total{");
    assert_non_null(sk);
    assert_int_equal(atoi(strchr(sk, '}') + 2), 1);
    const char *al = strstr(metrics, "kind=\"nan\"} "); /* llmforge_alerts_total{rank=..,job=..,kind="nan"} */
    assert_non_null(al);
    assert_int_equal(atoi(strchr(al, '}') + 2), 1);
    assert_non_null(strstr(metrics, "kind=\"stall\"} 0"));
    const char *st = strstr(metrics, "llmforge_steps_total{");
    assert_non_null(st);
    assert_int_equal(atoi(strchr(st, '}') + 2), 12);
    free(metrics);
    char *log = read_log(&c);
    assert_non_null(strstr(log, "\"kind\":\"nan\",\"action\":\"skip_step\""));
    assert_int_equal(count(log, "\"type\":\"skipped_step\""), 1);
    assert_int_equal(count(log, "\"train/skipped\":1"), 1);
    assert_int_equal(count(log, "\"type\":\"train\""), 12);
    lf_free(log);
    /* AdamW counted 11 updates */
    char path[1300], *state_text;
    snprintf(path, sizeof path, "%s/ckpt/step_00000012/trainer_state.json", c.out_dir);
    LF_ASSERT_OK(lf_file_read_all(path, 0, &state_text, NULL));
    const char *os = strstr(state_text, "\"optimizer_steps\":"), *ss = strstr(state_text, "\"skipped_steps\":");
    assert_non_null(os);
    assert_non_null(ss);
    assert_int_equal(strtol(os + 18, NULL, 10), 11);
    assert_int_equal(strtol(ss + 16, NULL, 10), 1);
    lf_free(state_text);
}

static void test_loss_spike(void **state) {
    (void)state;
    for (int skip = 0; skip < 2; skip++) {
        lf_train_config c = tiny(skip ? "spike-skip" : "spike-log");
        c.alert_spike_action = skip ? LF_ALERT_SKIP : LF_ALERT_LOG;
        c.alert_spike_window = 5;
        c.alert_spike_zscore = 4;
        lf_trainer *t = NULL;
        lf_trainer_opts o = {.inject_spike_step = 9};
        LF_ASSERT_OK(lf_trainer_create(&t, &c, &o));
        LF_ASSERT_OK(lf_trainer_run(t));
        lf_trainer_free(t);
        char *log = read_log(&c);
        assert_int_equal(count(log, "\"kind\":\"loss_spike\""), 1);
        assert_non_null(strstr(log, skip ? "\"action\":\"skip_step\"" : "\"action\":\"log\""));
        assert_non_null(strstr(log, "step 9: loss"));
        assert_int_equal(count(log, "\"type\":\"skipped_step\""), skip);
        lf_free(log);
    }
}

static int fatal_calls;
static void on_fatal(const char *msg, void *user) {
    (void)user;
    if (strstr(msg, "no training step finished")) fatal_calls++;
}

static void test_stall(void **state) {
    (void)state;
    for (int ex = 0; ex < 2; ex++) {
        lf_train_config c = tiny(ex ? "stall-exit" : "stall-log");
        c.train_iters = 5;
        c.alert_stall_seconds = 0.4f;
        c.alert_stall_action = ex ? LF_ALERT_EXIT : LF_ALERT_LOG;
        fatal_calls = 0;
        lf_trainer *t = NULL;
        lf_trainer_opts o = {.inject_stall_step = 3, .inject_stall_seconds = 1.5, .on_fatal = on_fatal};
        LF_ASSERT_OK(lf_trainer_create(&t, &c, &o));
        LF_ASSERT_OK(lf_trainer_run(t)); /* the hook in a test returns instead of exiting */
        lf_trainer_free(t);
        assert_int_equal(fatal_calls, ex);
        char *log = read_log(&c);
        assert_int_equal(count(log, "\"kind\":\"stall\""), 1);
        assert_non_null(strstr(log, ex ? "\"action\":\"exit\"" : "\"action\":\"log\""));
        lf_free(log);
    }
}

/* A monitoring sink that cannot start stops the run, unless
 * monitor.required is false: then the run starts without it. */
static void test_sink_failures(void **state) {
    (void)state;
    /* hold a port so the endpoint cannot bind it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    int port = ntohs(a.sin_port);
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);

    lf_train_config c = tiny("port-busy");
    c.prom_port = port;
    lf_trainer *t = NULL;
    assert_int_equal(lf_trainer_create(&t, &c, NULL), LF_ERR_IO);
    assert_non_null(strstr(lf_trainer_errmsg(t), "monitor.prometheus"));
    assert_non_null(strstr(lf_trainer_errmsg(t), portstr));
    lf_trainer_free(t);
    c.monitor_required = 0;
    t = NULL;
    LF_ASSERT_OK(lf_trainer_create(&t, &c, NULL));
    lf_trainer_free(t);
    close(fd);

    c = tiny("bad-host");
    c.prom_port = free_port();
    snprintf(c.prom_host, sizeof c.prom_host, "not a host");
    t = NULL;
    assert_true(lf_trainer_create(&t, &c, NULL) != LF_OK);
    assert_non_null(strstr(lf_trainer_errmsg(t), "not a host"));
    lf_trainer_free(t);

    c = tiny("tb-blocked");
    c.tb_enabled = 1;
    char file[1300];
    snprintf(file, sizeof file, "%s/plain-file", tmp);
    LF_ASSERT_OK(lf_file_write_all(file, "x", 1));
    snprintf(c.tb_output_path, sizeof c.tb_output_path, "%s/tb", file); /* under a file: fails even as root */
    t = NULL;
    assert_true(lf_trainer_create(&t, &c, NULL) != LF_OK);
    assert_non_null(strstr(lf_trainer_errmsg(t), "plain-file"));
    lf_trainer_free(t);
    c.monitor_required = 0;
    snprintf(c.out_dir, sizeof c.out_dir, "%s/tb-blocked-optional", tmp);
    t = NULL;
    LF_ASSERT_OK(lf_trainer_create(&t, &c, NULL));
    LF_ASSERT_OK(lf_trainer_run(t));
    lf_trainer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_stop),
        cmocka_unit_test(test_nan_skip_and_metrics),
        cmocka_unit_test(test_loss_spike),
        cmocka_unit_test(test_stall),
        cmocka_unit_test(test_sink_failures),
    };
    return cmocka_run_group_tests(tests, setup, char_fixture_teardown);
}
