/*
 * Tests of the run report (src/obs/report.c): a run directory written here
 * record by record (as the trainer writes one: a first attempt, a resume
 * after a crash, NaN steps skipped with their alerts, evaluations with a
 * task metric, checkpoints rotated away, the best one kept) gives a report
 * whose charts drew exactly the points and markers the records imply, whose
 * checkpoint table marks the best and shows the registry's ids and tags,
 * and that loads nothing from anywhere; each chart also as its own SVG. A
 * torn or corrupt log gives the readable part with a warning naming each
 * bad line; a missing directory or log, or an output that cannot be
 * written, fails with the path named. Downsampling keeps a spike. Several
 * runs compare, with the configuration keys that differ.
 *
 * tests/cli/test_report.sh does the same on real training runs, and
 * tests/cli/test_dashboard_browser.sh opens a report in Chromium.
 */
#define _GNU_SOURCE
#include "test_util.h"

#include <limits.h>
#include <sys/stat.h>

#include "llmforge/obs.h"

/* ---------------------------------------------------------------- a run directory */

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

__attribute__((noinline)) static char *slurp(const char *path) {
    char *t = NULL;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &t, NULL));
    return t;
}

static void mkdir_p(const char *path) { LF_ASSERT_OK(lf_mkdirs(path)); }

typedef struct run {
    char *root;      /* the temporary directory */
    char dir[600];   /* root/run */
    char log[700];
    char data[600];  /* root/data, the dataset */
} run;

static void config(const run *r, const char *lr) {
    char path[800], text[2000];
    snprintf(path, sizeof path, "%s/config.resolved.json", r->dir);
    snprintf(text, sizeof text,
             "{\"model\":{\"arch\":\"gpt2\",\"n_layer\":2,\"n_head\":2,\"n_kv_head\":0,\"n_embd\":64,\"block_size\":32,"
             "\"vocab_size\":65},\"data\":{\"dataset\":\"%s\"},\"train_batch_size\":4,\"train_micro_batch_size_per_gpu\":4,"
             "\"gradient_accumulation_steps\":1,\"train_iters\":40,\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"lr\":%s}},"
             "\"bf16\":{\"enabled\":false},\"fp16\":{\"enabled\":false},\"out_dir\":\"%s\"}\n",
             r->data, lr, r->dir);
    put(path, text);
}

static void logf_(const run *r, const char *fmt, ...) {
    FILE *f = fopen(r->log, "a");
    assert_non_null(f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static void train(const run *r, long s, double loss, int skipped) {
    if (skipped)
        logf_(r, "{\"type\":\"train\",\"step\":%ld,\"loss\":null,\"lr\":0.001,\"grad_norm\":null,\"tokens_per_sec\":900,"
                 "\"ms\":10,\"train/skipped\":1,\"memory/rss_bytes\":5e+07,\"memory/planned_bytes\":4e+07}", s);
    else
        logf_(r, "{\"type\":\"train\",\"step\":%ld,\"loss\":%.17g,\"lr\":0.001,\"grad_norm\":1.25,\"tokens_per_sec\":1000,"
                 "\"ms\":10,\"train/mfu\":0.2,\"time/data_ms\":0.1,\"time/forward_ms\":3,\"time/backward_ms\":6,"
                 "\"time/optimizer_ms\":0.5,\"memory/rss_bytes\":5e+07,\"memory/planned_bytes\":4e+07}", s, loss);
}

static void eval_(const run *r, long s, double vl) {
    logf_(r, "{\"type\":\"eval\",\"step\":%ld,\"train_loss\":%.17g,\"val_loss\":%.17g,\"eval/arith/exact_match\":%.3f,"
             "\"time/eval_ms\":4}", s, vl - 0.1, vl, 0.01 * (double)s);
}

static void ckpt_state(const run *r, long s, const char *best, double best_val) {
    char path[900], text[1200];
    snprintf(path, sizeof path, "%s/ckpt/step_%08ld", r->dir, s);
    mkdir_p(path);
    snprintf(path, sizeof path, "%s/ckpt/step_%08ld/trainer_state.json", r->dir, s);
    snprintf(text, sizeof text,
             "{\"format\":\"llmforge-trainer-state\",\"step\":%ld,\"best_checkpoint\":\"%s\",\"best_metric\":{\"name\":"
             "\"val_loss\",\"value\":%.17g},\"files\":{\"model.safetensors\":{\"sha256\":\"00\",\"bytes\":1048576},"
             "\"optimizer.safetensors\":{\"sha256\":\"11\",\"bytes\":2097152}}}",
             s, best, best_val);
    put(path, text);
}

/* The run described at the top: 30 steps, 5 more that a crash loses, a
 * resume from 30, NaN at steps 33 and 34 (skipped), 40 steps in all. */
static void make_run(run *r, const char *name, const char *lr) {
    if (!r->root) {
        r->root = lf_test_tmpdir();
        assert_non_null(r->root);
    }
    snprintf(r->dir, sizeof r->dir, "%s/%s", r->root, name);
    snprintf(r->log, sizeof r->log, "%s/log.jsonl", r->dir);
    snprintf(r->data, sizeof r->data, "%s/data", r->root);
    mkdir_p(r->dir);
    mkdir_p(r->data);
    char path[800];
    snprintf(path, sizeof path, "%s/dataset.json", r->data);
    put(path, "{\"format\":\"llmforge-dataset\",\"version\":1,\"tokenizer\":{\"spec\":\"char:vocab.json\",\"sha256\":\"abc\"},"
              "\"vocab_size\":65,\"splits\":{\"train\":{\"shards\":[\"train.bin\"],\"tokens\":900000},\"val\":{\"shards\":"
              "[\"val.bin\"],\"tokens\":100000}},\"sources\":[{\"path\":\"input.txt\",\"sha256\":\"def\",\"bytes\":1000000}]}");
    config(r, lr);
    put(r->log, "");
    logf_(r, "{\"type\":\"start\",\"step\":0,\"time\":1700000000,\"num_params\":123456,\"config\":{}}");
    logf_(r, "{\"type\":\"run_info\",\"step\":0,\"time\":1700000000.1,\"hardware\":{\"host\":\"h\",\"cpu\":\"Test CPU 9000\","
             "\"threads\":2,\"backend\":\"cpu\",\"fp32_kernel\":\"oneDNN test-kernel\"},\"memory_plan\":{\"total_bytes\":"
             "40000000,\"items\":[{\"name\":\"parameters (fp32 master weights)\",\"bytes\":500000},{\"name\":\"activations "
             "(recompute none)\",\"bytes\":39500000}],\"text\":\"plan table\"}}");
    for (long s = 1; s <= 35; s++) {
        train(r, s, 4.0 - 0.05 * (double)s, 0);
        if (s % 10 == 0 && s <= 30) {
            eval_(r, s, 3.5 - 0.02 * (double)s);
            logf_(r, "{\"type\":\"checkpoint\",\"step\":%ld,\"time\":1700000%03ld,\"path\":\"%s/ckpt/step_%08ld\",\"ms\":5}",
                  s, s, r->dir, s);
        }
    }
    /* the process died after step 35; resumed from step 30 */
    logf_(r, "{\"type\":\"resume\",\"step\":30,\"time\":1700000100,\"path\":\"%s/ckpt/step_00000030\"}", r->dir);
    logf_(r, "{\"type\":\"run_info\",\"step\":30,\"time\":1700000100.1,\"hardware\":{\"host\":\"h\",\"cpu\":\"Test CPU 9000\","
             "\"threads\":2,\"backend\":\"cpu\",\"fp32_kernel\":\"oneDNN test-kernel\"}}");
    for (long s = 31; s <= 40; s++) {
        int nan = s == 33 || s == 34;
        if (nan) {
            logf_(r, "{\"type\":\"alert\",\"step\":%ld,\"time\":1700000200,\"kind\":\"nan\",\"action\":\"skip_step\","
                     "\"message\":\"step %ld: non-finite loss\"}", s - 1, s);
            logf_(r, "{\"type\":\"skipped_step\",\"step\":%ld,\"time\":1700000200,\"reason\":\"alert\"}", s - 1);
        }
        train(r, s, 2.5 - 0.01 * (double)s, nan);
    }
    eval_(r, 40, 2.9);
    logf_(r, "{\"type\":\"checkpoint\",\"step\":40,\"time\":1700000300,\"path\":\"%s/ckpt/step_00000040\",\"ms\":5}", r->dir);
    logf_(r, "{\"type\":\"eval_suite\",\"step\":40,\"time\":1700000300,\"path\":\"x\",\"metrics\":{\"suite/acc\":0.75}}");
    logf_(r, "{\"type\":\"end\",\"step\":40,\"time\":1700000400,\"status\":\"ok\"}");
    /* rotation kept 30 (the best) and 40 (the latest) */
    ckpt_state(r, 30, "step_00000030", 2.9);
    ckpt_state(r, 40, "step_00000030", 2.9);
    snprintf(path, sizeof path, "%s/ckpt/latest", r->dir);
    put(path, "step_00000040\n");
}

static void run_free(run *r) {
    lf_test_rmrf(r->root);
    free(r->root);
    memset(r, 0, sizeof *r);
}

/* The opening <svg ...> tag of chart `name` in html (a static copy). */
static const char *svg_tag(const char *html, const char *name) {
    static char tag[1024];
    char key[96];
    snprintf(key, sizeof key, "data-chart=\"%s\"", name);
    const char *p = strstr(html, key);
    if (!p) fail_msg("no chart '%s'", name);
    const char *a = p;
    while (a > html && strncmp(a, "<svg", 4) != 0) a--;
    const char *z = strchr(p, '>');
    size_t n = (size_t)(z - a);
    if (n >= sizeof tag) n = sizeof tag - 1;
    memcpy(tag, a, n);
    tag[n] = '\0';
    return tag;
}

static long attr(const char *tag, const char *name) {
    char key[96];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(tag, key);
    if (!p) fail_msg("no %s in %s", name, tag);
    return strtol(p + strlen(key), NULL, 10);
}

static void assert_contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) fail_msg("the report lacks '%s'", needle);
}

static void assert_lacks(const char *hay, const char *needle) {
    const char *p = strstr(hay, needle);
    if (p) fail_msg("the report holds '%s': ...%.80s", needle, p);
}

/* ---------------------------------------------------------------- tests */

static void test_report_of_a_run(void **state) {
    (void)state;
    run r = {0};
    make_run(&r, "run", "0.001");
    char reg[2000], abs_ckpt[PATH_MAX], ckpt[800];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", r.dir);
    assert_non_null(realpath(ckpt, abs_ckpt));
    snprintf(reg, sizeof reg,
             "[{\"id\":\"c7\",\"run\":\"r3\",\"step\":30,\"path\":\"%s/step_00000030\",\"tags\":[\"prod\"],\"best\":true},"
             "{\"id\":\"c9\",\"run\":\"r9\",\"step\":30,\"path\":\"/elsewhere/ckpt/step_00000030\",\"tags\":[\"other-run\"]}]",
             abs_ckpt);
    char svg[800];
    snprintf(svg, sizeof svg, "%s/svg", r.root);
    lf_report_opts o = {.registry_json = reg, .svg_dir = svg};
    lf_report_result res;
    LF_ASSERT_OK(lf_report_write(r.dir, &o, &res));
    assert_int_equal(res.warnings, 0);
    /* read: start, run_info, train 1-35, 3 evals, 3 checkpoints, resume, run_info, 2 x (alert, skipped_step),
     * train 31-40, eval, checkpoint, eval_suite, end (the crashed attempt's 31-35 are read, then superseded) */
    assert_int_equal(res.records, 2 + 35 + 3 + 3 + 2 + 4 + 10 + 4);
    char want[800];
    snprintf(want, sizeof want, "%s/report.html", r.dir);
    assert_string_equal(res.out_path, want);
    char *html = slurp(want);

    /* the loss chart: 38 finite train losses + 4 val + 4 train (eval); the markers */
    const char *loss = svg_tag(html, "loss");
    assert_int_equal(attr(loss, "data-points"), 38 + 4 + 4);
    assert_int_equal(attr(loss, "data-markers-alert"), 2);
    assert_int_equal(attr(loss, "data-markers-skip"), 2);
    assert_int_equal(attr(loss, "data-markers-resume"), 1);
    assert_int_equal(attr(loss, "data-markers-checkpoint"), 4);
    assert_int_equal(attr(loss, "data-markers"), 9);
    assert_contains(html, "step 33: alert nan (skip_step)");
    assert_contains(html, "resumed at step 30 from");
    /* the other charts: what each series has */
    assert_int_equal(attr(svg_tag(html, "eval"), "data-points"), 4);
    assert_int_equal(attr(svg_tag(html, "lr"), "data-points"), 40);
    assert_int_equal(attr(svg_tag(html, "grad_norm"), "data-points"), 38);
    assert_int_equal(attr(svg_tag(html, "loss_scale"), "data-points"), 0); /* fp32: no loss scale */
    assert_int_equal(attr(svg_tag(html, "throughput"), "data-points"), 40);
    assert_int_equal(attr(svg_tag(html, "mfu"), "data-points"), 38);
    assert_int_equal(attr(svg_tag(html, "step_time"), "data-points"), 40 + 4 * 38);
    assert_int_equal(attr(svg_tag(html, "memory"), "data-points"), 80);
    assert_int_equal(res.charts, 8);

    /* the header */
    assert_contains(html, "gpt2 2L 2H 64C, block 32, vocab 65, 123k params");
    assert_contains(html, "4 × accum 1 × 1 rank(s) = 4 (128 tokens/step)");
    assert_contains(html, "2 alerts, 2 skipped steps, 1 resumes");
    assert_contains(html, "class=\"badge ok\"");
    /* checkpoints: the best marked, rotated ones named, sizes, the registry's id and tags (this run's only) */
    assert_contains(html, "<tr class=\"best\" data-best=\"1\"><td>★</td><td>step_00000030</td>");
    assert_contains(html, "<td>step_00000010</td><td class=\"num\">10</td><td>removed (rotation)</td>");
    assert_contains(html, "<td>step_00000040</td><td class=\"num\">40</td><td>on disk, latest</td>");
    assert_contains(html, "3.0 MiB");
    assert_contains(html, "<td>c7</td><td>prod</td>");
    assert_lacks(html, "other-run");
    assert_contains(html, "suite/acc 0.75");
    /* evaluations, events, memory plan, hardware, dataset, configuration */
    assert_contains(html, "<th>arith/exact_match</th>");
    assert_contains(html, "<tr data-event=\"alert\"><td class=\"num\">33</td>");
    assert_contains(html, "<tr data-event=\"skipped_step\"><td class=\"num\">34</td>");
    assert_contains(html, "activations (recompute none)");
    assert_contains(html, "oneDNN test-kernel");
    assert_contains(html, "Test CPU 9000");
    assert_contains(html, "char:vocab.json");
    assert_contains(html, "900k tokens in 1 shard(s)");
    assert_contains(html, "&quot;optimizer&quot;");
    /* self-contained: nothing to fetch, nothing to run */
    assert_lacks(html, "http://");
    assert_lacks(html, "https://");
    assert_lacks(html, "<script");
    for (const char *h = strstr(html, "href=\""); h; h = strstr(h + 1, "href=\"")) /* data: only */
        if (strncmp(h + 6, "data:", 5) != 0) fail_msg("a reference to fetch: %.60s", h);
    assert_lacks(html, " src=");
    assert_lacks(html, "url(");
    free(html);

    /* each chart as an SVG of its own, with the same counts */
    static const char *names[] = {"loss", "eval", "lr", "grad_norm", "loss_scale", "throughput", "mfu", "step_time", "memory"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[900];
        snprintf(p, sizeof p, "%s/%s.svg", svg, names[i]);
        char *t = slurp(p);
        assert_int_equal(strncmp(t, "<?xml", 5), 0);
        assert_contains(t, "xmlns=\"http://www.w3.org/2000/svg\"");
        if (!strcmp(names[i], "loss")) assert_int_equal(attr(svg_tag(t, "loss"), "data-markers"), 9);
        free(t);
    }
    /* --out elsewhere */
    snprintf(want, sizeof want, "%s/elsewhere.html", r.root);
    o = (lf_report_opts){.out_path = want, .title = "my title"};
    LF_ASSERT_OK(lf_report_write(r.dir, &o, &res));
    html = slurp(want);
    assert_contains(html, "<title>llmforge report · my title</title>");
    assert_lacks(html, "<th>registry</th>"); /* no registry given: no registry column */
    free(html);
    run_free(&r);
}

/* A corrupt line, a line without a step and a torn last line: the rest is reported, each named. */
static void test_damaged_log(void **state) {
    (void)state;
    run r = {0};
    make_run(&r, "run", "0.001");
    /* corrupt line 5 in place, then a torn last line */
    char *text = slurp(r.log);
    char *p = text;
    for (int i = 0; i < 4; i++) p = strchr(p, '\n') + 1;
    char *e = strchr(p, '\n');
    memset(p, '#', (size_t)(e - p));
    put(r.log, text);
    free(text);
    FILE *f = fopen(r.log, "a");
    fputs("{\"type\":\"train\",\"step\":41,\"loss\":1.0,\"lr\"", f); /* line 64, no newline */
    fclose(f);
    lf_report_result res;
    LF_ASSERT_OK(lf_report_write(r.dir, NULL, &res));
    assert_int_equal(res.warnings, 2);
    assert_non_null(strstr(res.first_warning, "log.jsonl:5: not a JSON object"));
    assert_int_equal(res.records, 2 + 35 + 3 + 3 + 2 + 4 + 10 + 4 - 1); /* train step 3 was line 5 */
    char out[800];
    snprintf(out, sizeof out, "%s/report.html", r.dir);
    char *html = slurp(out);
    assert_contains(html, "Warnings (2)");
    assert_contains(html, "log.jsonl:5: not a JSON object (truncated or corrupt); left out");
    assert_contains(html, "log.jsonl:64: the last line is cut short");
    assert_int_equal(attr(svg_tag(html, "lr"), "data-points"), 39);
    free(html);
    /* an unreadable config and dataset are warnings, not failures */
    char cfg[800];
    snprintf(cfg, sizeof cfg, "%s/config.resolved.json", r.dir);
    put(cfg, "{not json");
    LF_ASSERT_OK(lf_report_write(r.dir, NULL, &res));
    assert_int_equal(res.warnings, 3);
    assert_non_null(strstr(res.first_warning, "is not JSON"));
    run_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    run r = {0};
    make_run(&r, "run", "0.001");
    char path[800];
    assert_int_equal(lf_report_write(NULL, NULL, NULL), LF_ERR_INVALID_ARG);
    snprintf(path, sizeof path, "%s/nope", r.root);
    assert_int_equal(lf_report_write(path, NULL, NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("does not exist");
    LF_ASSERT_ERR_CONTAINS(path);
    snprintf(path, sizeof path, "%s/data", r.root); /* a directory without log.jsonl */
    assert_int_equal(lf_report_write(path, NULL, NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("/data/log.jsonl");
    snprintf(path, sizeof path, "%s/log.jsonl", r.dir); /* a file, not a directory */
    assert_int_equal(lf_report_write(path, NULL, NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("is not a directory");
    snprintf(path, sizeof path, "%s/no/such/dir/r.html", r.root);
    lf_report_opts o = {.out_path = path};
    assert_int_equal(lf_report_write(r.dir, &o, NULL), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("cannot write");
    snprintf(path, sizeof path, "%s/log.jsonl/svg", r.dir); /* --svg where a file is */
    o = (lf_report_opts){.svg_dir = path};
    assert_true(lf_report_write(r.dir, &o, NULL) != LF_OK);
    LF_ASSERT_ERR_CONTAINS("--svg directory");
    const char *dirs[1] = {r.dir};
    assert_int_equal(lf_report_compare(dirs, 0, NULL, NULL), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_report_compare(dirs, 17, NULL, NULL), LF_ERR_INVALID_ARG);
    run_free(&r);
}

/* 20000 steps with one spike: at most 1500 points drawn per series, and the spike is among them. */
static void test_downsampling_keeps_spikes(void **state) {
    (void)state;
    run r = {0};
    make_run(&r, "run", "0.001");
    put(r.log, "");
    FILE *f = fopen(r.log, "w");
    for (long s = 1; s <= 20000; s++)
        fprintf(f, "{\"type\":\"train\",\"step\":%ld,\"loss\":%g,\"lr\":0.001,\"grad_norm\":1,\"tokens_per_sec\":1,\"ms\":1}\n", s,
                s == 12345 ? 1000.0 : 2.0 + 0.5 * sin((double)s));
    fclose(f);
    LF_ASSERT_OK(lf_report_write(r.dir, NULL, NULL));
    char out[800];
    snprintf(out, sizeof out, "%s/report.html", r.dir);
    char *html = slurp(out);
    const char *loss = svg_tag(html, "loss");
    long pts = attr(loss, "data-points");
    if (pts > 1500 || pts < 1000) fail_msg("%ld points drawn for 20000 steps", pts);
    /* the y axis reaches the spike: a tick at 1000 */
    const char *chart = strstr(html, "data-chart=\"loss\"");
    const char *end = strstr(chart, "</svg>");
    char *t = strndup(chart, (size_t)(end - chart));
    assert_non_null(strstr(t, ">1000</text>"));
    free(t);
    free(html);
    run_free(&r);
}

static void test_compare(void **state) {
    (void)state;
    run a = {0}, b = {0};
    make_run(&a, "lr_small", "0.001");
    b.root = a.root; /* the same temporary directory */
    make_run(&b, "lr_big", "0.003");
    const char *dirs[2] = {a.dir, b.dir};
    char out[800], svg[800];
    snprintf(out, sizeof out, "%s/cmp.html", a.root);
    snprintf(svg, sizeof svg, "%s/cmp_svg", a.root);
    lf_report_opts o = {.out_path = out, .svg_dir = svg};
    lf_report_result res;
    LF_ASSERT_OK(lf_report_compare(dirs, 2, &o, &res));
    char *html = slurp(out);
    assert_int_equal(attr(svg_tag(html, "loss"), "data-points"), 2 * 38);
    assert_int_equal(attr(svg_tag(html, "val_loss"), "data-points"), 2 * 4);
    assert_contains(html, "<th>optimizer.params.lr</th><td><code>0.001</code></td><td><code>0.003</code></td>");
    assert_contains(html, "<th>out_dir</th>");
    assert_lacks(html, "<th>model.n_layer</th>"); /* the same in both */
    assert_contains(html, "lr_small");
    assert_contains(html, "lr_big");
    assert_lacks(html, "http://");
    free(html);
    char p[900];
    snprintf(p, sizeof p, "%s/val_loss.svg", svg);
    char *t = slurp(p);
    assert_int_equal(strncmp(t, "<?xml", 5), 0);
    free(t);
    /* a missing run fails the comparison, naming it */
    char bad[800];
    snprintf(bad, sizeof bad, "%s/missing", a.root);
    dirs[1] = bad;
    assert_int_equal(lf_report_compare(dirs, 2, &o, NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("missing");
    run_free(&a);
}

int main(void) {
    lf_log_set_level(LF_LOG_ERROR); /* the damaged-log warnings are expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_of_a_run),
        cmocka_unit_test(test_damaged_log),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_downsampling_keeps_spikes),
        cmocka_unit_test(test_compare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
