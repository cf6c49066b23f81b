/*
 * The sweep module without processes: the sweep file's checks (each bad
 * file refused with a message naming the key), the grid (every point once),
 * random and TPE points (pure functions of the seed, different for another
 * seed, inside their bounds, TPE drawn towards the good observations),
 * ASHA and median stopping against small brackets worked by hand in the
 * comments below, the state file (a round trip, a damaged file refused), a
 * trial's `llmforge train` arguments, and reading log.jsonl.
 */
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/sweep.h"

static char *g_dir;

static int setup(void **state) {
    (void)state;
    g_dir = lf_test_tmpdir();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    lf_test_rmrf(g_dir);
    free(g_dir);
    return 0;
}

/* A sweep file around an inline base configuration with train_iters R and
 * eval.interval E; `rest` is the remaining members (",..." JSON). */
static lf_sweep_spec *parse_ok(long R, long E, const char *rest) {
    char json[8192];
    snprintf(json, sizeof json,
             "{\"base\": {\"data\": {\"dataset\": \"unused\"}, \"train_iters\": %ld, \"eval\": {\"interval\": %ld}}%s}",
             R, E, rest);
    lf_sweep_spec *s = NULL;
    LF_ASSERT_OK(lf_sweep_spec_parse(&s, json, "test.json", NULL, NULL));
    return s;
}

/* The same, expected to fail with LF_ERR_CONFIG (or `code`) naming `needle`. */
static void parse_bad(const char *json, lf_status code, const char *needle) {
    lf_sweep_spec *s = NULL;
    lf_status st = lf_sweep_spec_parse(&s, json, "bad.json", NULL, NULL);
    if (st == LF_OK) fail_msg("accepted: %s", json);
    assert_null(s);
    if (st != code) fail_msg("status %s, expected %s: %s", lf_status_str(st), lf_status_str(code), lf_last_error());
    LF_ASSERT_ERR_CONTAINS(needle);
    LF_ASSERT_ERR_CONTAINS("bad.json");
}

#define BASE "\"base\": {\"data\": {\"dataset\": \"unused\"}, \"train_iters\": 100, \"eval\": {\"interval\": 10}}"

static void test_bad_files(void **state) {
    (void)state;
    parse_bad("{" BASE ", \"space\": {\"optimizer.params.lrr\": [0.1, 0.2]}}", LF_ERR_CONFIG, "optimizer.params.lrr");
    parse_bad("{" BASE ", \"space\": {}}", LF_ERR_CONFIG, "'space' is empty");
    parse_bad("{" BASE "}", LF_ERR_CONFIG, "'space' is missing");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]}, \"objective\": \"val_acc\"}", LF_ERR_CONFIG,
              "objective 'val_acc' is not logged");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]}, \"objective\": \"arith/exact_match\"}", LF_ERR_CONFIG,
              "eval.tasks is empty");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]}, \"method\": \"bayes\"}", LF_ERR_CONFIG, "'method' is 'bayes'");
    parse_bad("{" BASE ", \"space\": {\"optimizer.params.lr\": {\"type\": \"loguniform\", \"low\": 0, \"high\": 1}},"
              " \"method\": \"random\", \"trials\": 2}",
              LF_ERR_CONFIG, "loguniform needs 0 < low");
    parse_bad("{" BASE ", \"space\": {\"optimizer.params.lr\": {\"type\": \"uniform\", \"low\": 0.1, \"high\": 0.01}},"
              " \"method\": \"random\", \"trials\": 2}",
              LF_ERR_CONFIG, "low 0.1 must be below high 0.01");
    /* a value the configuration refuses (lr must be > 0), named with its key */
    parse_bad("{" BASE ", \"space\": {\"optimizer.params.lr\": [0.001, -1]}}", LF_ERR_CONFIG,
              "space key 'optimizer.params.lr' = -1");
    parse_bad("{" BASE ", \"space\": {\"optimizer.params.lr\": {\"type\": \"uniform\", \"low\": 0.001, \"high\": 0.1}}}",
              LF_ERR_CONFIG, "method grid needs every dimension");
    parse_bad("{" BASE ", \"space\": {\"seed\": {\"type\": \"normal\", \"low\": 1, \"high\": 2}}}", LF_ERR_CONFIG,
              "type 'normal'");
    parse_bad("{" BASE ", \"space\": {\"seed\": {\"type\": \"int\", \"low\": 1.5, \"high\": 4}}, \"method\": \"random\","
              " \"trials\": 1}",
              LF_ERR_CONFIG, "int bounds must be integers");
    parse_bad("{" BASE ", \"space\": {\"seed\": []}}", LF_ERR_CONFIG, "'values' is empty");
    parse_bad("{" BASE ", \"space\": {\"out_dir\": [\"a\", \"b\"]}}", LF_ERR_CONFIG, "sets out_dir");
    parse_bad("{" BASE ", \"space\": {\"max_iters\": [50, 100]}, \"early_stopping\": \"asha\"}", LF_ERR_CONFIG,
              "changes train_iters");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]}, \"colour\": 1}", LF_ERR_CONFIG, "unknown key 'colour'");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]}, \"method\": \"random\"}", LF_ERR_CONFIG, "needs 'trials'");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1, 2]}, \"trials\": 3}", LF_ERR_CONFIG, "grid has 2 points");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1, 2]}, \"early_stopping\": {\"type\": \"asha\", \"min_resource\": 15}}",
              LF_ERR_CONFIG, "not a multiple of eval.interval 10");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1, 2]}, \"early_stopping\": {\"type\": \"asha\", \"eta\": 3}}",
              LF_ERR_CONFIG, "too few for any to reach train_iters");
    parse_bad("{\"base\": {\"data\": {\"dataset\": \"u\"}, \"eval\": {\"interval\": 0}}, \"space\": {\"seed\": [1, 2]},"
              " \"early_stopping\": \"median\"}",
              LF_ERR_CONFIG, "eval.interval is 0");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]}, \"early_stopping\": {\"type\": \"asha\", \"interval\": 10}}",
              LF_ERR_CONFIG, "unknown key 'early_stopping.interval'");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]}, \"objective\": {\"metric\": \"val_loss\", \"mode\": \"up\"}}",
              LF_ERR_CONFIG, "minimize or maximize");
    parse_bad("{\"space\": {\"seed\": [1]}}", LF_ERR_CONFIG, "'base' is missing");
    parse_bad("{\"base\": \"/nonexistent/base.json\", \"space\": {\"seed\": [1]}}", LF_ERR_CONFIG, "/nonexistent/base.json");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]},}", LF_ERR_FORMAT, "not valid JSON");
    parse_bad("{" BASE ", \"space\": {\"seed\": [1]}, \"slurm\": {\"sbatch\": [\"--array=0-3\"]}}", LF_ERR_CONFIG,
              "sets --array");
}

/* ---------------------------------------------------------------- grid */

static void test_grid_every_point_once(void **state) {
    (void)state;
    lf_sweep_spec *s = parse_ok(100, 10,
                                ", \"space\": {\"optimizer.params.lr\": [0.001, 0.002, 0.003],"
                                " \"scheduler.type\": {\"type\": \"choice\", \"values\": [\"cosine\", \"constant\"]},"
                                " \"model.n_layer\": {\"type\": \"int\", \"low\": 2, \"high\": 4}}");
    assert_int_equal(lf_sweep_spec_method(s), LF_SWEEP_GRID);
    assert_int_equal(lf_sweep_grid_size(s), 18);
    assert_int_equal(lf_sweep_spec_trials(s), 18);
    int seen[3][2][3] = {{{0}}};
    double x[LF_SWEEP_MAX_DIMS];
    for (long i = 0; i < 18; i++) {
        LF_ASSERT_OK(lf_sweep_grid_point(s, i, x));
        assert_true(x[0] >= 0 && x[0] < 3 && x[1] >= 0 && x[1] < 2 && x[2] >= 2 && x[2] <= 4);
        seen[(int)x[0]][(int)x[1]][(int)x[2] - 2]++;
    }
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++) assert_int_equal(seen[a][b][c], 1);
    /* the first dimension varies slowest, the last fastest */
    LF_ASSERT_OK(lf_sweep_grid_point(s, 1, x));
    assert_true(x[0] == 0 && x[1] == 0 && x[2] == 3);
    LF_ASSERT_OK(lf_sweep_grid_point(s, 6, x));
    assert_true(x[0] == 1 && x[1] == 0 && x[2] == 2);
    assert_int_equal(lf_sweep_grid_point(s, 18, x), LF_ERR_INVALID_ARG);
    /* what a trial's configuration receives */
    char v[64];
    lf_sweep_value_text(s, 0, 2, v, sizeof v);
    assert_string_equal(v, "0.003");
    lf_sweep_value_text(s, 1, 1, v, sizeof v);
    assert_string_equal(v, "\"constant\"");
    lf_sweep_value_text(s, 2, 4, v, sizeof v);
    assert_string_equal(v, "4");
    /* through lf_sweep_suggest as the driver asks: the same points in order */
    lf_sweep_trial t[18];
    for (long i = 0; i < 18; i++) {
        double y[LF_SWEEP_MAX_DIMS];
        LF_ASSERT_OK(lf_sweep_suggest(s, t, i, y));
        LF_ASSERT_OK(lf_sweep_grid_point(s, i, x));
        assert_memory_equal(x, y, sizeof(double) * 3);
        lf_sweep_trial_init(&t[i], i, y, 3);
    }
    lf_sweep_spec_free(s);
}

/* ---------------------------------------------------------------- random */

static void test_random_deterministic(void **state) {
    (void)state;
    lf_sweep_spec *s = parse_ok(100, 10,
                                ", \"method\": \"random\", \"trials\": 4, \"seed\": 7, \"space\": {"
                                "\"optimizer.params.lr\": {\"type\": \"loguniform\", \"low\": 1e-5, \"high\": 1e-1},"
                                "\"model.dropout\": {\"type\": \"uniform\", \"low\": 0, \"high\": 0.5},"
                                "\"model.n_layer\": {\"type\": \"int\", \"low\": 1, \"high\": 6},"
                                "\"scheduler.type\": {\"type\": \"choice\", \"values\": [\"cosine\", \"constant\"]}}");
    enum { N = 4000 };
    double sum_log = 0, sum_u = 0, x[LF_SWEEP_MAX_DIMS], y[LF_SWEEP_MAX_DIMS];
    int ints[7] = {0}, cats[2] = {0}, differs = 0;
    for (long i = 0; i < N; i++) {
        lf_sweep_random_point(s, 7, i, x);
        lf_sweep_random_point(s, 7, i, y);
        assert_memory_equal(x, y, sizeof(double) * 4); /* the same (seed, index): the same point */
        lf_sweep_random_point(s, 8, i, y);
        differs += memcmp(x, y, sizeof(double) * 4) != 0;
        assert_true(x[0] >= 1e-5 && x[0] <= 1e-1);
        assert_true(x[1] >= 0 && x[1] <= 0.5);
        assert_true(x[2] == floor(x[2]) && x[2] >= 1 && x[2] <= 6);
        assert_true(x[3] == 0 || x[3] == 1);
        sum_log += log10(x[0]);
        sum_u += x[1];
        ints[(int)x[2]]++;
        cats[(int)x[3]]++;
    }
    assert_int_equal(differs, N); /* another seed: other points (a repeat has probability ~0) */
    /* uniform in the logarithm: mean of log10 lr is -3, its standard error 4/sqrt(12 N) = 0.018; 5 of them */
    assert_true(fabs(sum_log / N + 3) < 5 * 4 / sqrt(12.0 * N));
    /* uniform: mean 0.25, standard error 0.5/sqrt(12 N) */
    assert_true(fabs(sum_u / N - 0.25) < 5 * 0.5 / sqrt(12.0 * N));
    /* each integer and each choice equally likely: counts within 5 binomial standard deviations */
    for (int k = 1; k <= 6; k++) assert_true(fabs(ints[k] - N / 6.0) < 5 * sqrt(N * (1 / 6.0) * (5 / 6.0)));
    assert_true(fabs(cats[0] - N / 2.0) < 5 * sqrt(N * 0.25));
    /* lf_sweep_suggest: the spec's seed */
    LF_ASSERT_OK(lf_sweep_suggest(s, NULL, 0, y));
    lf_sweep_random_point(s, 7, 0, x);
    assert_memory_equal(x, y, sizeof(double) * 4);
    lf_sweep_spec_free(s);
}

/* ---------------------------------------------------------------- TPE */

/* Two objectives, one per dimension: the learning rate's distance (in
 * decades) from 1e-3 squared, and the choice being anything but its third
 * value (plus a tie-breaking trace of the rate). */
static double tpe_objective(const double *x, int which) {
    return which == 0 ? pow(log10(x[0]) + 3, 2) : (x[1] == 2 ? 0 : 1) + 1e-3 * fabs(log10(x[0]) + 3);
}

static void test_tpe(void **state) {
    (void)state;
    lf_sweep_spec *s = parse_ok(100, 10,
                                ", \"method\": \"tpe\", \"trials\": 60, \"seed\": 3, \"tpe\": {\"startup\": 10}, "
                                "\"space\": {\"optimizer.params.lr\": {\"type\": \"loguniform\", \"low\": 1e-5, "
                                "\"high\": 1e-1}, \"scheduler.warmup_iters\": {\"type\": \"choice\", \"values\": [0, 10, "
                                "20, 30]}}");
    enum { NOBS = 30 };
    double pts[NOBS][LF_SWEEP_MAX_DIMS];
    lf_sweep_obs obs[NOBS], obs_cat[NOBS];
    for (int i = 0; i < NOBS; i++) {
        lf_sweep_random_point(s, 11, i, pts[i]);
        obs[i] = (lf_sweep_obs){pts[i], tpe_objective(pts[i], 0)};
        obs_cat[i] = (lf_sweep_obs){pts[i], tpe_objective(pts[i], 1)};
    }
    lf_sweep_tpe_opts o = lf_sweep_spec_tpe(s);
    assert_int_equal(o.startup, 10);
    /* start-up: fewer than `startup` observations give the random point */
    double x[LF_SWEEP_MAX_DIMS], y[LF_SWEEP_MAX_DIMS];
    LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, 9, NULL, 0, 3, 9, x));
    lf_sweep_random_point(s, 3, 9, y);
    assert_memory_equal(x, y, sizeof(double) * 2);
    /* deterministic in (observations, seed, index); another seed or index: another point */
    double dist_tpe = 0, dist_rand = 0;
    int best_cat = 0, other_seed_differs = 0;
    for (long idx = NOBS; idx < NOBS + 20; idx++) {
        LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, NOBS, NULL, 0, 3, idx, x));
        LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, NOBS, NULL, 0, 3, idx, y));
        assert_memory_equal(x, y, sizeof(double) * 2);
        LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, NOBS, NULL, 0, 4, idx, y));
        other_seed_differs += memcmp(x, y, sizeof(double) * 2) != 0;
        assert_true(x[0] >= 1e-5 && x[0] <= 1e-1);
        assert_true(x[1] == 0 || x[1] == 1 || x[1] == 2 || x[1] == 3);
        dist_tpe += fabs(log10(x[0]) + 3);
        LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs_cat, NOBS, NULL, 0, 3, idx, y));
        best_cat += y[1] == 2;
        lf_sweep_random_point(s, 3, idx, y);
        dist_rand += fabs(log10(y[0]) + 3);
    }
    assert_true(other_seed_differs >= 15);
    /* drawn towards the good observations: random points are on average 1
     * decade from the optimum (|u| for u uniform on [-2, 2]); TPE's good
     * density sits on the best 8 of 30, all near it */
    print_message("TPE: mean distance to the optimum %.3f decades (random %.3f); best choice %d of 20\n",
                  dist_tpe / 20, dist_rand / 20, best_cat);
    assert_true(dist_tpe / 20 < 0.5 * (dist_rand / 20));
    /* the choice's objective: the good set holds (nearly) only the third value, the
     * bad set (nearly) none of it, so l/g favours it by a factor of ~10 */
    assert_true(best_cat >= 15); /* random picks it 1 time in 4 */
    lf_sweep_spec_free(s);
}

static void test_tpe_skips_tried_points(void **state) {
    (void)state;
    /* a finite space of 2 x 2 points: with three of them tried, TPE's choice (which would be the best
     * tried one, (0, 0), where every candidate is drawn) is the fourth; with all four tried, one of them */
    lf_sweep_spec *s = parse_ok(100, 10,
                                ", \"method\": \"tpe\", \"trials\": 8, \"tpe\": {\"startup\": 2}, \"space\": {"
                                "\"seed\": {\"type\": \"choice\", \"values\": [1, 2]}, \"scheduler.warmup_iters\": "
                                "{\"type\": \"choice\", \"values\": [0, 10]}}");
    double p[4][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    lf_sweep_obs obs[3] = {{p[0], 1.0}, {p[1], 5.0}, {p[2], 6.0}};
    const double *taken[4] = {p[0], p[1], p[2], p[3]};
    double x[2];
    const lf_sweep_tpe_opts o = lf_sweep_spec_tpe(s); /* start-up 2: three observations are enough */
    LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, 3, NULL, 0, 9, 3, x));
    assert_true(x[0] == 0 && x[1] == 0); /* without the tried points: the best one again */
    for (uint64_t seed = 0; seed < 20; seed++) {
        LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, 3, taken, 3, seed, 3, x));
        assert_true(x[0] == 1 && x[1] == 1);
        LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, 3, taken, 4, seed, 3, x)); /* exhausted: any of them */
        assert_true((x[0] == 0 || x[0] == 1) && (x[1] == 0 || x[1] == 1));
    }
    /* start-up (1 observation < 2): the random point, or another one when a trial has it */
    double r[2], y[2];
    lf_sweep_random_point(s, 5, 1, r);
    LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, 1, NULL, 0, 5, 1, x));
    assert_memory_equal(x, r, sizeof r);
    const double *mine[1] = {r};
    LF_ASSERT_OK(lf_sweep_tpe_suggest(s, &o, obs, 1, mine, 1, 5, 1, y));
    assert_memory_not_equal(y, r, sizeof r);
    lf_sweep_spec_free(s);
}

/* ---------------------------------------------------------------- ASHA */

typedef struct sim_step {
    lf_sweep_job_kind kind;
    long trial;
    int rung;
} sim_step;

/* One worker: ask for a job, "train" it (the value is table[trial][rung]),
 * report it, until DONE; the jobs are compared with `want`. */
static void simulate(const lf_sweep_spec *s, const double table[][4], const sim_step *want, int n_want,
                     lf_sweep_trial *trials, long *n_trials) {
    long n = 0;
    for (int step = 0;; step++) {
        lf_sweep_job j = lf_sweep_next_job(s, trials, n);
        if (step >= n_want) fail_msg("job %d: %d beyond the %d expected", step, j.kind, n_want);
        long who = j.kind == LF_SWEEP_JOB_NEW ? n : j.trial;
        if (j.kind != want[step].kind || who != want[step].trial || j.rung != want[step].rung)
            fail_msg("job %d: kind %d trial %ld rung %d; expected kind %d trial %ld rung %d", step, j.kind, who,
                     j.rung, want[step].kind, want[step].trial, want[step].rung);
        if (j.kind == LF_SWEEP_JOB_DONE) break;
        assert_int_not_equal(j.kind, LF_SWEEP_JOB_WAIT); /* one worker: nothing else runs */
        if (j.kind == LF_SWEEP_JOB_NEW) {
            double x[1] = {(double)n};
            lf_sweep_trial_init(&trials[n], n, x, 0);
            n++;
        }
        trials[who].state = LF_TRIAL_RUNNING;
        trials[who].target = j.rung;
        lf_sweep_on_result(s, trials, n, who, j.rung, table[who][j.rung]);
    }
    lf_sweep_finish(trials, n);
    *n_trials = n;
}

#define NEW(t) {LF_SWEEP_JOB_NEW, t, 0}
#define PROMOTE(t, k) {LF_SWEEP_JOB_PROMOTE, t, k}
#define DONE {LF_SWEEP_JOB_DONE, -1, 0}

static void test_asha_bracket(void **state) {
    (void)state;
    /* train_iters 9, eval.interval 1, eta 3, min_resource 1: rungs 9/9, 9/3, 9 = steps 1, 3, 9 */
    lf_sweep_spec *s = parse_ok(9, 1,
                                ", \"method\": \"random\", \"trials\": 9, \"space\": {\"seed\": {\"type\": \"int\", "
                                "\"low\": 0, \"high\": 1000}}, \"early_stopping\": {\"type\": \"asha\", \"eta\": 3, "
                                "\"min_resource\": 1}");
    const long *rungs;
    assert_int_equal(lf_sweep_spec_rungs(s, &rungs), 3);
    assert_true(rungs[0] == 1 && rungs[1] == 3 && rungs[2] == 9);
    /* values (lower is better) at rungs 0, 1, 2; NAN where the trial never gets there */
    static const double v[9][4] = {
        {5, NAN, NAN}, {3, 2.5, NAN}, {8, NAN, NAN}, {1, 0.8, 0.5}, {9, NAN, NAN},
        {4, NAN, NAN}, {7, NAN, NAN}, {2, 1.5, NAN}, {0.5, 0.7, 0.6},
    };
    /* Worked by hand. A free worker checks rung 1, then rung 0, for a paused
     * trial among the best floor(n_k / 3) there; else starts a new trial.
     *  t0=5 t1=3 t2=8      n0=3, best 1: {t1}        -> promote t1 (2.5 at rung 1)
     *  t3=1                n0=4, best 1: {t3}        -> promote t3 (0.8)
     *  t4=9 t5=4           n0=5,6: best {t3}, {t3,t1} promoted already
     *  t6=7 t7=2           n0=8, best 2: {t3,t7}     -> promote t7 (1.5)
     *                      n1=3 (0.8, 1.5, 2.5), best 1: {t3} -> promote t3 to rung 2 (0.5: completed)
     *  t8=0.5              n1=3: t3 done; n0=9, best 3: {t8,t3,t7} -> promote t8 (0.7 at rung 1)
     *                      n1=4, best 1: {t8} (0.7 < 0.8) -> promote t8 to rung 2 (0.6: completed)
     *                      nothing promotable, no trials left, none running: done.
     * t1 stays at rung 1 though it is no longer in rung 0's best third (ASHA never demotes). */
    static const sim_step want[] = {
        NEW(0), NEW(1), NEW(2), PROMOTE(1, 1), NEW(3), PROMOTE(3, 1), NEW(4), NEW(5), NEW(6), NEW(7),
        PROMOTE(7, 1), PROMOTE(3, 2), NEW(8), PROMOTE(8, 1), PROMOTE(8, 2), DONE,
    };
    lf_sweep_trial t[9];
    long n = 0;
    simulate(s, v, want, (int)(sizeof want / sizeof want[0]), t, &n);
    assert_int_equal(n, 9);
    static const lf_trial_state final[9] = {LF_TRIAL_STOPPED, LF_TRIAL_STOPPED, LF_TRIAL_STOPPED,
                                            LF_TRIAL_COMPLETED, LF_TRIAL_STOPPED, LF_TRIAL_STOPPED,
                                            LF_TRIAL_STOPPED, LF_TRIAL_STOPPED, LF_TRIAL_COMPLETED};
    static const long steps[9] = {1, 3, 1, 9, 1, 1, 1, 3, 9};
    long total = 0;
    for (int i = 0; i < 9; i++) {
        assert_int_equal(t[i].state, final[i]);
        assert_int_equal(t[i].steps, steps[i]);
        total += t[i].steps;
    }
    assert_int_equal(total, 29); /* against 81 for all nine to step 9 */
    assert_int_equal(lf_sweep_best(s, t, n), 3);
    lf_sweep_spec_free(s);
}

static void test_asha_async_and_maximize(void **state) {
    (void)state;
    /* two workers: the second asks while the first trial is still running.
     * rungs 1, 3, 9 (eta 3); maximise. */
    lf_sweep_spec *s = parse_ok(9, 1,
                                ", \"method\": \"random\", \"trials\": 9, \"objective\": {\"metric\": \"val_loss\", "
                                "\"mode\": \"maximize\"}, \"space\": {\"seed\": {\"type\": \"int\", \"low\": 0, \"high\": "
                                "9}}, \"early_stopping\": {\"type\": \"asha\", \"min_resource\": 1}");
    lf_sweep_trial t[9];
    double x[1] = {0};
    long n = 0;
    lf_sweep_job j = lf_sweep_next_job(s, t, n);
    assert_int_equal(j.kind, LF_SWEEP_JOB_NEW);
    lf_sweep_trial_init(&t[n++], 0, x, 1);
    j = lf_sweep_next_job(s, t, n); /* t0 running: nothing to promote, start another */
    assert_int_equal(j.kind, LF_SWEEP_JOB_NEW);
    lf_sweep_trial_init(&t[n++], 1, x, 1);
    assert_int_equal(lf_sweep_on_result(s, t, n, 1, 0, 2.0), LF_TRIAL_PAUSED);
    assert_int_equal(lf_sweep_on_result(s, t, n, 0, 0, 5.0), LF_TRIAL_PAUSED);
    lf_sweep_trial_init(&t[n++], 2, x, 1);
    assert_int_equal(lf_sweep_on_result(s, t, n, 2, 0, 1.0), LF_TRIAL_PAUSED);
    /* n0 = 3: the best third is {t0} (5 is the largest) */
    j = lf_sweep_next_job(s, t, n);
    assert_int_equal(j.kind, LF_SWEEP_JOB_PROMOTE);
    assert_int_equal(j.trial, 0);
    assert_int_equal(j.rung, 1);
    t[0].state = LF_TRIAL_RUNNING;
    /* the other six arrive while t0 still runs, all worse than t0, t1, t2 */
    for (; n < 9; n++) {
        lf_sweep_trial_init(&t[n], n, x, 1);
        lf_sweep_on_result(s, t, n + 1, n, 0, 0.5);
    }
    /* n0 = 9, best 3: t0 (running, skipped), t1 (2.0), t2 (1.0): both promotable in turn */
    j = lf_sweep_next_job(s, t, n);
    assert_int_equal(j.kind, LF_SWEEP_JOB_PROMOTE);
    assert_int_equal(j.trial, 1);
    t[1].state = LF_TRIAL_RUNNING;
    j = lf_sweep_next_job(s, t, n);
    assert_int_equal(j.kind, LF_SWEEP_JOB_PROMOTE);
    assert_int_equal(j.trial, 2);
    t[2].state = LF_TRIAL_RUNNING;
    /* no trial left to start, nothing promotable, three running: wait */
    j = lf_sweep_next_job(s, t, n);
    assert_int_equal(j.kind, LF_SWEEP_JOB_WAIT);
    /* a NaN ranks last: t1's is never promoted ahead of a number */
    lf_sweep_on_result(s, t, n, 1, 1, NAN);
    lf_sweep_on_result(s, t, n, 2, 1, 3.0);
    lf_sweep_on_result(s, t, n, 0, 1, 4.0);
    j = lf_sweep_next_job(s, t, n); /* n1 = 3, best 1: t0 (4.0 is the largest) */
    assert_int_equal(j.kind, LF_SWEEP_JOB_PROMOTE);
    assert_int_equal(j.trial, 0);
    assert_int_equal(j.rung, 2);
    t[0].state = LF_TRIAL_RUNNING;
    assert_int_equal(lf_sweep_on_result(s, t, n, 0, 2, 6.0), LF_TRIAL_COMPLETED);
    j = lf_sweep_next_job(s, t, n);
    assert_int_equal(j.kind, LF_SWEEP_JOB_DONE);
    lf_sweep_finish(t, n);
    assert_int_equal(t[1].state, LF_TRIAL_STOPPED);
    assert_int_equal(t[2].state, LF_TRIAL_STOPPED);
    assert_int_equal(lf_sweep_best(s, t, n), 0);
    lf_sweep_spec_free(s);
}

/* ---------------------------------------------------------------- median stopping */

static void test_median_bracket(void **state) {
    (void)state;
    /* train_iters 4, eval.interval 1: rungs at steps 1, 2, 3, 4; min_trials 2 */
    lf_sweep_spec *s = parse_ok(4, 1,
                                ", \"method\": \"random\", \"trials\": 5, \"space\": {\"seed\": {\"type\": \"int\", "
                                "\"low\": 0, \"high\": 9}}, \"early_stopping\": {\"type\": \"median\", \"min_resource\": "
                                "1, \"interval\": 1, \"min_trials\": 2}");
    const long *rungs;
    assert_int_equal(lf_sweep_spec_rungs(s, &rungs), 4);
    assert_true(rungs[0] == 1 && rungs[1] == 2 && rungs[2] == 3 && rungs[3] == 4);
    static const double v[5][4] = {
        {4.0, 3.0, 2.0, 1.5}, {3.5, 2.5, 1.8, 1.2}, {5.0, NAN, NAN, NAN}, {3.8, 2.9, NAN, NAN}, {3.0, 2.0, 2.05, NAN},
    };
    /* Worked by hand (one worker continues a trial that may go on before starting another):
     *  t0, t1: fewer than 2 other trials at each rung: both complete.
     *  t2 rung 0: 5.0 vs median(4.0, 3.5) = 3.75: worse, stopped.
     *  t3 rung 0: 3.8 vs median(4.0, 3.5, 5.0) = 4.0: goes on; rung 1: 2.9 vs median(3.0, 2.5) = 2.75: stopped.
     *  t4 rung 0: 3.0 vs median(4, 3.5, 5, 3.8) = 3.9; rung 1: 2.0 vs median(3.0, 2.5, 2.9) = 2.9;
     *     rung 2: 2.05 vs median(2.0, 1.8) = 1.9: stopped. */
    static const sim_step want[] = {
        NEW(0), PROMOTE(0, 1), PROMOTE(0, 2), PROMOTE(0, 3), NEW(1), PROMOTE(1, 1), PROMOTE(1, 2), PROMOTE(1, 3),
        NEW(2), NEW(3), PROMOTE(3, 1), NEW(4), PROMOTE(4, 1), PROMOTE(4, 2), DONE,
    };
    lf_sweep_trial t[5];
    long n = 0;
    simulate(s, v, want, (int)(sizeof want / sizeof want[0]), t, &n);
    static const lf_trial_state final[5] = {LF_TRIAL_COMPLETED, LF_TRIAL_COMPLETED, LF_TRIAL_STOPPED, LF_TRIAL_STOPPED,
                                            LF_TRIAL_STOPPED};
    static const long steps[5] = {4, 4, 1, 2, 3};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(t[i].state, final[i]);
        assert_int_equal(t[i].steps, steps[i]);
    }
    assert_non_null(strstr(t[2].message, "worse than the median 3.75"));
    assert_int_equal(lf_sweep_best(s, t, n), 1);
    lf_sweep_spec_free(s);
}

static void test_no_stopping(void **state) {
    (void)state;
    lf_sweep_spec *s = parse_ok(50, 10, ", \"space\": {\"seed\": [1, 2, 3]}");
    const long *rungs;
    assert_int_equal(lf_sweep_spec_rungs(s, &rungs), 1);
    assert_int_equal(rungs[0], 50);
    lf_sweep_trial t[3];
    double x[1];
    for (long i = 0; i < 3; i++) {
        lf_sweep_job j = lf_sweep_next_job(s, t, i);
        assert_int_equal(j.kind, LF_SWEEP_JOB_NEW);
        LF_ASSERT_OK(lf_sweep_suggest(s, t, i, x));
        lf_sweep_trial_init(&t[i], i, x, 1);
        assert_int_equal(lf_sweep_on_result(s, t, i + 1, i, 0, 3.0 - (double)i), LF_TRIAL_COMPLETED);
    }
    assert_int_equal(lf_sweep_next_job(s, t, 3).kind, LF_SWEEP_JOB_DONE);
    assert_int_equal(lf_sweep_best(s, t, 3), 2);
    lf_sweep_spec_free(s);
}

/* ---------------------------------------------------------------- state, arguments, log */

static void test_state_round_trip(void **state) {
    (void)state;
    lf_sweep_spec *s = parse_ok(9, 1,
                                ", \"method\": \"tpe\", \"trials\": 9, \"space\": {\"optimizer.params.lr\": {\"type\": "
                                "\"loguniform\", \"low\": 1e-4, \"high\": 1e-2}, \"scheduler.type\": [\"cosine\", "
                                "\"constant\"]}, \"early_stopping\": {\"type\": \"asha\", \"min_resource\": 1}");
    lf_sweep_trial t[3];
    double x0[2] = {0.00123456789012345, 1}, x1[2] = {1e-4, 0}, x2[2] = {0.01, 1};
    lf_sweep_trial_init(&t[0], 0, x0, 2);
    lf_sweep_trial_init(&t[1], 1, x1, 2);
    lf_sweep_trial_init(&t[2], 2, x2, 2);
    lf_sweep_on_result(s, t, 3, 0, 0, 2.25);
    lf_sweep_on_result(s, t, 3, 1, 0, NAN);
    t[0].state = LF_TRIAL_RUNNING;
    t[0].target = 1;
    t[0].attempts = 2;
    t[0].seconds = 1.5;
    t[0].tries = 2;
    t[0].pid = 4242;
    snprintf(t[0].host, sizeof t[0].host, "node-1");
    t[2].state = LF_TRIAL_FAILED;
    snprintf(t[2].message, sizeof t[2].message, "exit status 1: \"quoted\"");
    char path[1024];
    snprintf(path, sizeof path, "%s/state.json", g_dir);
    LF_ASSERT_OK(lf_sweep_state_save(path, s, t, 3));
    lf_sweep_trial *back = NULL;
    long n = 0;
    LF_ASSERT_OK(lf_sweep_state_load(path, s, &back, &n));
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(back[i].id, i);
        assert_memory_equal(back[i].x, t[i].x, sizeof(double) * 2); /* points read back exactly */
        assert_int_equal(back[i].state, t[i].state);
        assert_int_equal(back[i].rung, t[i].rung);
        assert_int_equal(back[i].target, t[i].target);
        assert_int_equal(back[i].steps, t[i].steps);
        assert_string_equal(back[i].message, t[i].message);
    }
    assert_true(back[0].value[0] == 2.25 && isnan(back[1].value[0]) && back[0].attempts == 2 && back[0].seconds == 1.5);
    assert_true(back[0].tries == 2 && back[0].pid == 4242 && !strcmp(back[0].host, "node-1"));
    lf_free(back);
    /* the sweep it belongs to: the normalized text, which rebuilds the same spec */
    char *text = NULL, *cwd = NULL;
    LF_ASSERT_OK(lf_sweep_state_spec_text(path, &text, &cwd));
    lf_sweep_spec *s2 = NULL;
    LF_ASSERT_OK(lf_sweep_spec_parse(&s2, text, "state", NULL, cwd));
    assert_string_equal(lf_sweep_spec_text(s2), lf_sweep_spec_text(s));
    lf_sweep_spec_free(s2);
    lf_free(text);
    lf_free(cwd);
    /* the params, as people read them */
    char *raw = NULL;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &raw, NULL));
    assert_non_null(strstr(raw, "\"scheduler.type\":\t\"constant\""));
    assert_non_null(strstr(raw, "\"optimizer.params.lr\":\t0.00123456789012345"));
    /* damaged: a state that is not one, a truncated file */
    char *p = strstr(raw, "\"state\":\t\"paused\"");
    assert_non_null(p);
    memcpy(p, "\"state\":\t\"parked\"", 17);
    LF_ASSERT_OK(lf_file_write_all(path, raw, strlen(raw)));
    assert_int_equal(lf_sweep_state_load(path, s, &back, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("trial 1");
    LF_ASSERT_ERR_CONTAINS("\"state\"");
    LF_ASSERT_OK(lf_file_write_all(path, raw, strlen(raw) / 2));
    assert_int_equal(lf_sweep_state_load(path, s, &back, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("not JSON");
    lf_free(raw);
    lf_sweep_spec_free(s);
}

static void test_train_args(void **state) {
    (void)state;
    lf_sweep_spec *s = parse_ok(9, 1,
                                ", \"set\": {\"eval.iters\": 2, \"scheduler.type\": \"constant\"}, \"method\": "
                                "\"random\", \"trials\": 9, \"space\": {\"optimizer.params.lr\": [0.001, 0.01]}, "
                                "\"early_stopping\": {\"type\": \"asha\", \"min_resource\": 1}");
    lf_sweep_trial t;
    double x[1] = {1};
    lf_sweep_trial_init(&t, 4, x, 1);
    char **argv = NULL;
    int argc = 0;
    LF_ASSERT_OK(lf_sweep_train_args(s, &t, 1, "/sw/trials/t004", "/sw/base.json", 1, 3, &argv, &argc));
    static const char *const want[] = {"train", "/sw/base.json", "--eval.iters=2", "--scheduler.type=\"constant\"",
                                       "--optimizer.params.lr=0.01", "--out_dir=\"/sw/trials/t004\"",
                                       "--train.stop_at=3", "--resume", "--threads=3"};
    assert_int_equal(argc, 9);
    for (int i = 0; i < argc; i++) assert_string_equal(argv[i], want[i]);
    assert_null(argv[argc]);
    lf_free(argv);
    /* the last rung: no early stop, no resume asked */
    LF_ASSERT_OK(lf_sweep_train_args(s, &t, 2, "/sw/trials/t004", "/sw/base.json", 0, 0, &argv, &argc));
    assert_int_equal(argc, 7);
    assert_string_equal(argv[6], "--train.stop_at=0");
    lf_free(argv);
    char name[16];
    lf_sweep_trial_name(4, name, sizeof name);
    assert_string_equal(name, "t004");
    lf_sweep_trial_name(1234, name, sizeof name);
    assert_string_equal(name, "t1234");
    /* the configuration `sweep best` prints */
    char *json = NULL;
    LF_ASSERT_OK(lf_sweep_trial_config_json(s, &t, "best_run", &json));
    cJSON *o = cJSON_Parse(json);
    lf_free(json);
    assert_non_null(o);
    cJSON *opt = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "optimizer"), "params");
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(opt, "lr")->valuedouble - 0.01) < 1e-9);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "out_dir")->valuestring, "best_run");
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "scheduler"), "type")->valuestring,
        "constant");
    cJSON_Delete(o);
    lf_sweep_spec_free(s);
}

static void test_log_metric(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/log.jsonl", g_dir);
    const char *log = "{\"type\":\"train\",\"step\":10,\"loss\":3.0}\n"
                      "{\"type\":\"eval\",\"step\":10,\"train_loss\":2.5,\"val_loss\":2.75,\"eval/arith/exact_match\":0.5}\n"
                      "{\"type\":\"eval\",\"step\":20,\"train_loss\":2.0,\"val_loss\":null}\n"
                      "{\"type\":\"eval\",\"step\":10,\"train_loss\":2.5,\"val_loss\":2.625}\n"
                      "{\"type\":\"end\",\"step\":20,\"time\":1}";
    LF_ASSERT_OK(lf_file_write_all(path, log, strlen(log)));
    double v;
    LF_ASSERT_OK(lf_sweep_log_metric(path, "val_loss", 10, &v));
    assert_true(v == 2.625); /* the last record of the step */
    LF_ASSERT_OK(lf_sweep_log_metric(path, "train_loss", 20, &v));
    assert_true(v == 2.0);
    LF_ASSERT_OK(lf_sweep_log_metric(path, "val_loss", 20, &v));
    assert_true(isnan(v));
    assert_int_equal(lf_sweep_log_metric(path, "arith/exact_match", 20, &v), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("at step 20");
    assert_int_equal(lf_sweep_log_metric(path, "val_loss", 30, &v), LF_ERR_NOT_FOUND);
    snprintf(path, sizeof path, "%s/none.jsonl", g_dir);
    assert_int_equal(lf_sweep_log_metric(path, "val_loss", 10, &v), LF_ERR_NOT_FOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_grid_every_point_once),
        cmocka_unit_test(test_random_deterministic),
        cmocka_unit_test(test_tpe),
        cmocka_unit_test(test_tpe_skips_tried_points),
        cmocka_unit_test(test_asha_bracket),
        cmocka_unit_test(test_asha_async_and_maximize),
        cmocka_unit_test(test_median_bracket),
        cmocka_unit_test(test_no_stopping),
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_train_args),
        cmocka_unit_test(test_log_metric),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
