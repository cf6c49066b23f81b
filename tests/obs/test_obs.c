/* The metrics bus (src/obs/obs.c, contract in include/llmforge/obs.h):
 * fan-out to every sink in the order added, flush and close exactly once,
 * NULL safety, the 16-sink capacity (the rejected sink is closed, not
 * leaked), lf_obs_sink_error dispatch and the wall clock. */
#include "test_util.h"
#include <time.h>
#include "llmforge/obs.h"

/* A recording sink: every call appends "<id>:<what>" to a shared journal. */
typedef struct journal {
    char text[4096];
    int emits, flushes, closes;
} journal;

typedef struct rec_sink {
    lf_obs_sink base;
    journal *j;
    int id;
    const char *err;
} rec_sink;

static void jadd(journal *j, int id, const char *what) {
    size_t n = strlen(j->text);
    snprintf(j->text + n, sizeof j->text - n, "%d:%s ", id, what);
}

static void rs_emit(lf_obs_sink *s, const lf_obs_record *r) {
    rec_sink *rs = s->impl;
    char what[64];
    snprintf(what, sizeof what, "emit%ld", r->step);
    jadd(rs->j, rs->id, what);
    rs->j->emits++;
}
static void rs_flush(lf_obs_sink *s) {
    rec_sink *rs = s->impl;
    jadd(rs->j, rs->id, "flush");
    rs->j->flushes++;
}
static void rs_close(lf_obs_sink *s) {
    rec_sink *rs = s->impl;
    jadd(rs->j, rs->id, "close");
    rs->j->closes++;
    free(rs);
}
static const char *rs_error(lf_obs_sink *s) { return ((rec_sink *)s->impl)->err; }

static lf_obs_sink *new_sink(journal *j, int id, int with_emit, int with_flush) {
    rec_sink *rs = calloc(1, sizeof *rs);
    assert_non_null(rs);
    rs->j = j;
    rs->id = id;
    rs->base.name = "recorder";
    rs->base.emit = with_emit ? rs_emit : NULL;
    rs->base.flush = with_flush ? rs_flush : NULL;
    rs->base.close = rs_close;
    rs->base.error = rs_error;
    rs->base.impl = rs;
    return &rs->base;
}

static lf_obs_record train_rec(long step) {
    static const lf_obs_scalar sc[] = {{"train/loss", 2.5}};
    lf_obs_record r = {LF_OBS_TRAIN, step, 1700000000.0, sc, 1, NULL, NULL, NULL};
    return r;
}

static void test_fanout_in_order(void **state) {
    (void)state;
    journal j = {0};
    lf_obs *o;
    LF_ASSERT_OK(lf_obs_create(&o));
    for (int id = 1; id <= 3; id++) LF_ASSERT_OK(lf_obs_add_sink(o, new_sink(&j, id, 1, 1)));
    lf_obs_record r1 = train_rec(1), r2 = train_rec(2);
    lf_obs_emit(o, &r1);
    lf_obs_emit(o, &r2);
    assert_string_equal(j.text, "1:emit1 2:emit1 3:emit1 1:emit2 2:emit2 3:emit2 ");
    j.text[0] = 0;
    lf_obs_flush(o);
    assert_string_equal(j.text, "1:flush 2:flush 3:flush ");
    j.text[0] = 0;
    lf_obs_free(o);
    /* free flushes each sink once, then closes each once */
    assert_string_equal(j.text, "1:flush 2:flush 3:flush 1:close 2:close 3:close ");
    assert_int_equal(j.emits, 6);
    assert_int_equal(j.flushes, 6);
    assert_int_equal(j.closes, 3);
}

static void test_optional_slots(void **state) {
    (void)state;
    journal j = {0};
    lf_obs *o;
    LF_ASSERT_OK(lf_obs_create(&o));
    LF_ASSERT_OK(lf_obs_add_sink(o, new_sink(&j, 1, 0, 0))); /* close only */
    LF_ASSERT_OK(lf_obs_add_sink(o, new_sink(&j, 2, 1, 0)));
    lf_obs_record r = train_rec(7);
    lf_obs_emit(o, &r);
    lf_obs_flush(o);
    lf_obs_free(o);
    assert_string_equal(j.text, "2:emit7 1:close 2:close ");
}

static void test_null_safety(void **state) {
    (void)state;
    journal j = {0};
    lf_obs_free(NULL);
    lf_obs_flush(NULL);
    lf_obs_record r = train_rec(1);
    lf_obs_emit(NULL, &r);
    assert_null(lf_obs_sink_error(NULL));
    assert_int_equal(lf_obs_create(NULL), LF_ERR_INVALID_ARG);

    lf_obs *o;
    LF_ASSERT_OK(lf_obs_create(&o));
    lf_obs_emit(o, NULL); /* no sinks, no record: nothing happens */
    assert_int_equal(lf_obs_add_sink(o, NULL), LF_ERR_INVALID_ARG);
    /* a bus of NULL still takes ownership: the sink is closed, not leaked */
    assert_int_equal(lf_obs_add_sink(NULL, new_sink(&j, 9, 1, 1)), LF_ERR_INVALID_ARG);
    assert_int_equal(j.closes, 1);
    /* a sink without close cannot be owned; refused and left to the caller */
    lf_obs_sink bare = {"bare", NULL, NULL, NULL, NULL, NULL};
    assert_int_equal(lf_obs_add_sink(o, &bare), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("bare");
    LF_ASSERT_ERR_CONTAINS("no close");
    lf_obs_emit(o, NULL);
    lf_obs_free(o);
    assert_int_equal(j.emits, 0);
}

static void test_capacity_limit(void **state) {
    (void)state;
    journal j = {0};
    lf_obs *o;
    LF_ASSERT_OK(lf_obs_create(&o));
    for (int id = 0; id < 16; id++) LF_ASSERT_OK(lf_obs_add_sink(o, new_sink(&j, id, 1, 1)));
    assert_int_equal(lf_obs_add_sink(o, new_sink(&j, 16, 1, 1)), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("full (16 sinks)");
    assert_int_equal(j.closes, 1); /* the 17th was closed at once */
    lf_obs_record r = train_rec(4);
    lf_obs_emit(o, &r);
    assert_int_equal(j.emits, 16);
    assert_null(strstr(j.text, "16:emit"));
    lf_obs_free(o);
    assert_int_equal(j.closes, 17);
    assert_int_equal(j.flushes, 16);
}

static void test_sink_error_dispatch(void **state) {
    (void)state;
    journal j = {0};
    lf_obs_sink *s = new_sink(&j, 1, 1, 1);
    assert_null(lf_obs_sink_error(s));
    ((rec_sink *)s->impl)->err = "disk full";
    assert_string_equal(lf_obs_sink_error(s), "disk full");
    s->error = NULL; /* a sink without the slot never reports one */
    assert_null(lf_obs_sink_error(s));
    s->close(s);
}

static void test_wall_time(void **state) {
    (void)state;
    double t = lf_obs_wall_time();
    double now = (double)time(NULL);
    assert_true(t > 1.6e9);
    assert_true(fabs(t - now) < 2.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fanout_in_order), cmocka_unit_test(test_optional_slots),
        cmocka_unit_test(test_null_safety),     cmocka_unit_test(test_capacity_limit),
        cmocka_unit_test(test_sink_error_dispatch), cmocka_unit_test(test_wall_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
