/*
 * DeepSpeed configuration files as they are (docs/deepspeed.md):
 *  - DeepSpeed's schedulers against their formulas at chosen steps
 *    (tests/fixtures/deepspeed/sched_lr.txt, written by
 *    tools/reference/make_ds_sched_fixture.py, whose transcription was
 *    checked against DeepSpeed 0.19.8's own classes with --check);
 *  - every documented DeepSpeed key has a state (documented_keys.txt), and
 *    docs/deepspeed.md's table names each one;
 *  - each fixture file (configs/NAME.json) resolves to its expected effective
 *    configuration or its expected problems, all in one load
 *    (configs/NAME.expected; LF_DS_FIXTURES_WRITE=1 rewrites them for review);
 *  - "auto", the defaults of a DeepSpeed file, and a preset's unchanged.
 */
#include <dirent.h>
#include <math.h>
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/backend.h"
#include "llmforge/model.h"
#include "llmforge/train.h"

#define DS_DIR LF_SOURCE_DIR "/tests/fixtures/deepspeed"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* Error model: the parameters are floats (relative rounding 2^-24 each), the
 * formulas run in double, the result is rounded to float once more; a sum
 * of a few such terms stays within 4 x 2^-24 relative to the largest term,
 * which is at most the peak lr. Tolerance: 3e-7 x max(|want|, lr scale). */
static void test_schedulers_match_deepspeed(void **state) {
    (void)state;
    char *text = slurp(DS_DIR "/sched_lr.txt");
    assert_non_null(text);
    lf_train_config cfg;
    int cases = 0, points = 0;
    double scale = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "# case ", 7)) {
            char name[64];
            int at = 0;
            assert_int_equal(sscanf(line + 7, "%63s %n", name, &at), 1);
            char json[2048];
            snprintf(json, sizeof json,
                     "{\"data\": {\"dataset\": \"x\"}, \"optimizer\": {\"params\": {\"lr\": 0.002, \"betas\": [0.9, "
                     "0.999]}}, \"scheduler\": %s}",
                     line + 7 + at);
            LF_ASSERT_OK(lf_train_config_parse_world(&cfg, json, name, 1, 0, NULL));
            scale = fmax(fmax(cfg.ds.warmup_max_lr, cfg.ds.cycle_max_lr), fmax(cfg.lr, cfg.ds.lr_range_test_min_lr));
            cases++;
            continue;
        }
        if (line[0] == '#') continue;
        char name[64], mom[64];
        long it;
        double want;
        assert_int_equal(sscanf(line, "%63s %ld %lf %63s", name, &it, &want, mom), 4);
        double got = lf_lr_at(&cfg, it), tol = 3e-7 * fmax(fabs(want), scale);
        if (!(fabs(got - want) <= tol)) fail_msg("%s step %ld: lr %.9g, DeepSpeed %.9g", name, it, got, want);
        float b1, b2;
        lf_betas_at(&cfg, it, &b1, &b2);
        if (strcmp(mom, "-")) {
            double wm = strtod(mom, NULL);
            if (!(fabs(b1 - wm) <= 3e-7 * wm)) fail_msg("%s step %ld: beta1 %.9g, DeepSpeed %.9g", name, it, b1, wm);
            assert_true(b2 == 0.99f);
        } else {
            assert_true(b1 == 0.9f && b2 == 0.999f);
        }
        points++;
    }
    assert_int_equal(cases, 13);
    assert_true(points >= 13 * 20);
    free(text);
}

/* Every key of DeepSpeed's reference has a state, and docs/deepspeed.md's
 * table names it. */
static void test_documented_keys_have_states(void **state) {
    (void)state;
    char *keys = slurp(DS_DIR "/documented_keys.txt"), *doc = slurp(LF_SOURCE_DIR "/docs/deepspeed.md");
    assert_non_null(keys);
    assert_non_null(doc);
    int n = 0, counts[5] = {0};
    for (char *line = strtok(keys, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || !line[0]) continue;
        const char *why = NULL;
        lf_config_key_state s = lf_train_config_key_state(line, &why);
        if (s == LF_CONFIG_KEY_UNKNOWN) fail_msg("DeepSpeed key '%s' has no state in llmforge", line);
        if (s != LF_CONFIG_KEY_HONOURED && (!why || !*why)) fail_msg("'%s': no reason given", line);
        static const char *const names[] = {"unknown", "honoured", "ignored", "refused", "only"};
        char cell[300];
        snprintf(cell, sizeof cell, "| `%s` | %s |", line, names[s]);
        if (!strstr(doc, cell)) fail_msg("docs/deepspeed.md's key table lacks a row '%s'", cell);
        counts[s]++;
        n++;
    }
    assert_true(n > 140);
    assert_true(counts[LF_CONFIG_KEY_HONOURED] > 40 && counts[LF_CONFIG_KEY_IGNORED] > 30 &&
                counts[LF_CONFIG_KEY_REFUSED] > 20 && counts[LF_CONFIG_KEY_ONLY] > 5);
    assert_int_equal(lf_train_config_key_state("zero_optimization.no_such_key", NULL), LF_CONFIG_KEY_UNKNOWN);
    assert_int_equal(lf_train_config_key_state("wandb.project", NULL), LF_CONFIG_KEY_IGNORED);
    free(keys);
    free(doc);
}

/* The effective configuration of a fixture as the test compares it: the
 * report's notes, then the keys a DeepSpeed file sets, or the problems. */
static const char *const k_effective[] = {"train_batch_size",
                                          "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps",
                                          "optimizer.type",
                                          "optimizer.params.lr",
                                          "optimizer.params.betas",
                                          "optimizer.params.eps",
                                          "optimizer.params.weight_decay",
                                          "scheduler",
                                          "gradient_clipping",
                                          "fp16.enabled",
                                          "bf16.enabled",
                                          "zero_optimization.stage",
                                          "zero_optimization.offload_optimizer.device",
                                          "steps_per_print",
                                          "wall_clock_breakdown",
                                          "tensorboard",
                                          NULL};

static void effective(const char *path, char *out, size_t cap) {
    lf_train_config cfg;
    lf_train_config_report *rep = calloc(1, sizeof *rep);
    assert_non_null(rep);
    const char *ov[] = {"data.dataset=x"};
    lf_status st = lf_train_config_load_report(&cfg, path, 1, 1, ov, rep);
    size_t at = (size_t)snprintf(out, cap, "deepspeed_file %d\n", rep->deepspeed_file);
    if (st != LF_OK) {
        at += (size_t)snprintf(out + at, cap - at, "status %s\nproblems %d\n", lf_status_str(st), rep->n_errors);
        for (char *p = rep->errors; *p;) {
            char *e = strchr(p, '\n');
            int n = e ? (int)(e - p) : (int)strlen(p);
            /* the file's path differs by checkout: keep its name only */
            char line[1200];
            snprintf(line, sizeof line, "%.*s", n, p);
            char *dir = strstr(line, LF_SOURCE_DIR "/tests/fixtures/deepspeed/configs/");
            if (dir)
                memmove(dir, dir + strlen(LF_SOURCE_DIR "/tests/fixtures/deepspeed/configs/"),
                        strlen(dir + strlen(LF_SOURCE_DIR "/tests/fixtures/deepspeed/configs/")) + 1);
            at += (size_t)snprintf(out + at, cap - at, "error: %s\n", line);
            p = e ? e + 1 : p + n;
        }
        free(rep);
        return;
    }
    for (char *p = rep->notes; *p;) {
        char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        at += (size_t)snprintf(out + at, cap - at, "note: %.*s\n", n, p);
        p = e ? e + 1 : p + n;
    }
    char *js = lf_train_config_to_json(&cfg);
    assert_non_null(js);
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    for (int i = 0; k_effective[i]; i++) {
        const cJSON *v = root;
        char key[128];
        snprintf(key, sizeof key, "%s", k_effective[i]);
        for (char *seg = strtok(key, "."); seg && v; seg = strtok(NULL, "."))
            v = cJSON_GetObjectItemCaseSensitive(v, seg);
        char *s = v ? cJSON_PrintUnformatted(v) : NULL;
        at += (size_t)snprintf(out + at, cap - at, "%s = %s\n", k_effective[i], s ? s : "(absent)");
        cJSON_free(s);
    }
    cJSON_Delete(root);
    lf_free(js);
    free(rep);
}

static void test_fixture_files(void **state) {
    (void)state;
    DIR *d = opendir(DS_DIR "/configs");
    assert_non_null(d);
    int n = 0, write = getenv("LF_DS_FIXTURES_WRITE") != NULL;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
        char path[1024], exp_path[1024];
        snprintf(path, sizeof path, "%s/configs/%s", DS_DIR, e->d_name);
        snprintf(exp_path, sizeof exp_path, "%s/configs/%.*s.expected", DS_DIR, (int)(len - 5), e->d_name);
        static char got[65536];
        effective(path, got, sizeof got);
        if (write) {
            FILE *f = fopen(exp_path, "w");
            assert_non_null(f);
            fputs(got, f);
            fclose(f);
        }
        char *want = slurp(exp_path);
        if (!want) fail_msg("%s: no expected file %s", e->d_name, exp_path);
        if (strcmp(got, want)) fail_msg("%s resolves to:\n%s\nexpected (%s):\n%s", e->d_name, got, exp_path, want);
        free(want);
        n++;
    }
    closedir(d);
    assert_true(n >= 12);
}

static lf_status ds_parse(lf_train_config *c, const char *json, lf_train_config_report *rep, int n,
                          const char *const *ov) {
    (void)rep;
    return lf_train_config_parse_world(c, json, "ds.json", 2, n, ov);
}

/* "auto" from the command line and the world size; a DeepSpeed file's
 * defaults; llmforge's own file keeps its defaults. */
static void test_auto_and_defaults(void **state) {
    (void)state;
    lf_train_config c;
    const char
        *hf = "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\", "
              "\"gradient_accumulation_steps\": \"auto\", \"optimizer\": {\"type\": \"AdamW\", \"params\": "
              "{\"lr\": \"auto\"}}, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_max_lr\": "
              "\"auto\", \"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}}}";
    const char *ov[] = {"data.dataset=x",
                        "train_micro_batch_size_per_gpu=3",
                        "gradient_accumulation_steps=5",
                        "optimizer.params.lr=0.01",
                        "train_iters=70",
                        "scheduler.warmup_iters=7"};
    LF_ASSERT_OK(ds_parse(&c, hf, NULL, 6, ov));
    assert_int_equal(c.micro_batch, 3);
    assert_int_equal(c.grad_accum, 5);
    assert_int_equal(c.train_batch_size, 3 * 5 * 2); /* world 2 */
    assert_true(c.ds.warmup_max_lr == 0.01f);
    assert_int_equal(c.ds.warmup_num_steps, 7);
    assert_int_equal(c.ds.total_num_steps, 70);
    assert_true(c.beta1 == 0.9f && c.beta2 == 0.999f && c.weight_decay == 0.01f && c.grad_clip == 0.0f);
    /* no warmup given: HF's max(1, 0) */
    LF_ASSERT_OK(ds_parse(&c, hf, NULL, 5, ov));
    assert_int_equal(c.ds.warmup_num_steps, 1);
    /* a DeepSpeed file without scheduler: constant lr */
    LF_ASSERT_OK(ds_parse(&c, "{\"train_micro_batch_size_per_gpu\": 2}", NULL, 1, ov));
    assert_int_equal(c.sched_type, LF_SCHED_CONSTANT);
    assert_true(lf_lr_at(&c, 0) == c.lr && lf_lr_at(&c, 1999) == c.lr);
    /* llmforge's own keys beside: llmforge's defaults (cosine, betas 0.99, decay 0.1) */
    LF_ASSERT_OK(ds_parse(&c, "{\"train_micro_batch_size_per_gpu\": 2, \"model\": {\"n_layer\": 2}}", NULL, 1, ov));
    assert_int_equal(c.sched_type, LF_SCHED_COSINE);
    assert_true(c.beta2 == 0.99f && c.weight_decay == 0.1f && c.grad_clip == 1.0f);
    /* "auto" where HF Trainer fills nothing, on the command line, and a scheduler's missing parameter */
    lf_status st = ds_parse(&c, "{\"train_iters\": \"auto\"}", NULL, 1, ov);
    assert_int_equal(st, LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("\"auto\" is resolved only for the keys HF Trainer fills");
    st = ds_parse(&c, "{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_max_lr\": 0.1}}}", NULL, 1, ov);
    assert_int_equal(st, LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("key 'scheduler.params.cycle_min_lr' is required by scheduler.type OneCycle");
    /* the dump of a DeepSpeed scheduler reads back as the same configuration */
    LF_ASSERT_OK(ds_parse(&c, hf, NULL, 6, ov));
    char *js = lf_train_config_to_json(&c);
    lf_train_config back;
    LF_ASSERT_OK(lf_train_config_parse_world(&back, js, "dump", 2, 0, NULL));
    assert_memory_equal(&back.ds, &c.ds, sizeof c.ds);
    assert_int_equal(back.sched_type, LF_SCHED_WARMUP_DECAY_LR);
    lf_free(js);
}

/* Several problems: all named in one load, the message counts them. */
static void test_all_problems_at_once(void **state) {
    (void)state;
    lf_train_config c;
    lf_train_config_report *rep = calloc(1, sizeof *rep);
    assert_non_null(rep);
    const char *ov[] = {"data.dataset=x", "model.n_layer=0", "nonsense=1"};
    lf_status st = lf_train_config_load_report(&c, DS_DIR "/configs/bad_adam_l2.json", 1, 3, ov, rep);
    assert_int_equal(st, LF_ERR_CONFIG);
    assert_int_equal(rep->n_errors, 3);
    assert_non_null(strstr(rep->errors, "adam_w_mode"));
    assert_non_null(strstr(rep->errors, "unknown key 'nonsense' on the command line"));
    assert_non_null(strstr(rep->errors, "key 'model.n_layer' on the command line: 0 is out of range"));
    LF_ASSERT_ERR_CONTAINS("3 problems in the configuration: (1) key 'optimizer.params.adam_w_mode'");
    free(rep);
}

/* OneCycle's momentum reaches AdamW: one step (t = 2, so the bias
 * corrections hold beta1^2) on given gradients and zero moments against the
 * update in double with the betas of lf_betas_at, which differ from the
 * configured ones. Error model: fp32 AdamW, relative 1e-5 of the step. */
static void test_one_cycle_momentum_reaches_adamw(void **state) {
    (void)state;
    lf_train_config c;
    const char *js = "{\"data\": {\"dataset\": \"x\"}, \"optimizer\": {\"params\": {\"weight_decay\": 0}}, "
                     "\"gradient_clipping\": 0, \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                     "{\"cycle_min_lr\": 1e-3, \"cycle_max_lr\": 1e-2, \"cycle_first_step_size\": 4, "
                     "\"cycle_min_mom\": 0.5, \"cycle_max_mom\": 0.7}}}";
    LF_ASSERT_OK(lf_train_config_parse_world(&c, js, "oc", 1, 0, NULL));
    float b1, b2;
    lf_betas_at(&c, 1, &b1, &b2);
    assert_true(fabsf(b1 - 0.65f) < 1e-6f && b2 == 0.99f); /* 0.7 - 0.2 x 1/4 */
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cpu", &be));
    lf_model_config mc = {.arch = LF_ARCH_GPT2,
                          .n_layer = 1,
                          .n_head = 2,
                          .n_embd = 8,
                          .block_size = 4,
                          .vocab_size = 11,
                          .bias = 1,
                          .tie_embeddings = 1};
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &mc, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 3));
    size_t n = lf_model_num_params(m);
    float *p0 = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *p1 = malloc(n * sizeof(float));
    float *zero = calloc(n, sizeof(float));
    assert_true(p0 && g && p1 && zero);
    for (size_t i = 0; i < n; i++) g[i] = (float)((double)((i * 2654435761u) % 1000) / 500.0 - 1.0) * 0.01f;
    LF_ASSERT_OK(lf_backend_to_host(be, p0, lf_model_params(m), n * sizeof(float)));
    LF_ASSERT_OK(lf_backend_to_device(be, lf_model_grads(m), g, n * sizeof(float)));
    float *m1 = lf_backend_alloc(be, n * sizeof(float)), *m2 = lf_backend_alloc(be, n * sizeof(float));
    assert_true(m1 && m2);
    LF_ASSERT_OK(lf_backend_to_device(be, m1, zero, n * sizeof(float)));
    LF_ASSERT_OK(lf_backend_to_device(be, m2, zero, n * sizeof(float)));
    const float lr = 1e-2f;
    double norm;
    LF_ASSERT_OK(lf_adamw_step(m, be, m1, m2, 2, lr, &c, &norm));
    LF_ASSERT_OK(lf_backend_to_host(be, p1, lf_model_params(m), n * sizeof(float)));
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) {
        double mh = (1.0 - b1) * g[i] / (1.0 - (double)b1 * b1),
               vh = (1.0 - b2) * (double)g[i] * g[i] / (1.0 - (double)b2 * b2);
        double step = lr * mh / (sqrt(vh) + c.eps), want = p0[i] - step;
        /* with the configured beta1 0.9 instead, the step differs by ~20 % */
        if (fabs(p1[i] - want) > 1e-5 * fabs(step) + 1e-7 * fabs(p0[i]))
            fail_msg("parameter %zu: %.9g after the step, %.9g with beta1 %g", i, p1[i], want, b1);
        moved += step != 0;
    }
    assert_true(moved > n / 2);
    lf_backend_free(be, m1);
    lf_backend_free(be, m2);
    lf_model_free(m);
    lf_backend_close(be);
    free(p0);
    free(g);
    free(p1);
    free(zero);
}

/* llmforge's presets are llmforge files (not DeepSpeed files) and write out
 * every key whose default a DeepSpeed file would change, so they say what
 * they set. */
static void test_presets_say_what_they_set(void **state) {
    (void)state;
    DIR *d = opendir(LF_SOURCE_DIR "/configs");
    assert_non_null(d);
    int n = 0;
    static const char *const keys[] = {
        "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
        "scheduler.type",         "gradient_clipping",    NULL};
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/configs/%s", LF_SOURCE_DIR, e->d_name);
        char *text = slurp(path);
        assert_non_null(text);
        cJSON *root = cJSON_Parse(text);
        assert_non_null(root);
        for (int k = 0; keys[k]; k++) {
            const cJSON *v = root;
            char key[128];
            snprintf(key, sizeof key, "%s", keys[k]);
            for (char *seg = strtok(key, "."); seg && v; seg = strtok(NULL, "."))
                v = cJSON_GetObjectItemCaseSensitive(v, seg);
            if (!v) fail_msg("configs/%s does not say %s", e->d_name, keys[k]);
        }
        lf_train_config c;
        lf_train_config_report *rep = calloc(1, sizeof *rep);
        assert_non_null(rep);
        LF_ASSERT_OK(lf_train_config_load_report(&c, path, 1, 0, NULL, rep));
        assert_int_equal(rep->deepspeed_file, 0);
        assert_null(strstr(rep->notes, "DeepSpeed file:")); /* no DeepSpeed defaults applied */
        free(rep);
        cJSON_Delete(root);
        free(text);
        n++;
    }
    closedir(d);
    assert_true(n >= 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedulers_match_deepspeed),
        cmocka_unit_test(test_documented_keys_have_states),
        cmocka_unit_test(test_fixture_files),
        cmocka_unit_test(test_auto_and_defaults),
        cmocka_unit_test(test_all_problems_at_once),
        cmocka_unit_test(test_one_cycle_momentum_reaches_adamw),
        cmocka_unit_test(test_presets_say_what_they_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
