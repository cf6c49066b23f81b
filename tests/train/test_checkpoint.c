/*
 * Checkpoints: save/load round trip (weights, both moments, state JSON with
 * per-file SHA-256), re-saving a step, resolve from a root / run dir / step
 * dir / latest file, corruption and missing-file detection (named in the
 * message, caller's buffers untouched), rotation with keep_last and protect,
 * lf_weights_load with HF names (prefix, tied lm_head, attention buffers) and
 * its all-problems-in-one-message reporting, unwritable roots.
 * The parameter table is built by hand (no dependency on src/model).
 *
 * Set LF_CKPT_KEEP=/some/dir to keep one saved checkpoint root there (for
 * tools/check_safetensors.py).
 */
#include "test_util.h"
#include <dirent.h>
#include <sys/stat.h>
#include "llmforge/checkpoint.h"
#include "llmforge/safetensors.h"

static char *g_dir;

static int setup(void **state) {
    (void)state;
    g_dir = lf_test_tmpdir();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    chmod(g_dir, 0700);
    lf_test_rmrf(g_dir);
    free(g_dir);
    return 0;
}

/* A small GPT-2-like table: C = 3, vocab 5, block 4. */
static const struct {
    const char *name;
    int ndim;
    int64_t s0, s1;
} k_params[] = {
    {"wte.weight", 2, 5, 3},
    {"wpe.weight", 2, 4, 3},
    {"h.0.ln_1.weight", 1, 3, 0},
    {"h.0.ln_1.bias", 1, 3, 0},
    {"h.0.attn.c_attn.weight", 2, 3, 9},
    {"h.0.attn.c_attn.bias", 1, 9, 0},
    {"ln_f.weight", 1, 3, 0},
    {"ln_f.bias", 1, 3, 0},
};
#define NP ((int)(sizeof k_params / sizeof k_params[0]))

typedef struct {
    lf_param_info info[NP + 1];
    lf_ckpt_tensors tt;
} table;

static void make_table(table *t, int count) {
    memset(t, 0, sizeof *t);
    size_t off = 0;
    for (int i = 0; i < count; i++) {
        lf_param_info *p = &t->info[i];
        snprintf(p->name, sizeof p->name, "%s", k_params[i].name);
        p->ndim = k_params[i].ndim;
        p->shape[0] = k_params[i].s0;
        p->shape[1] = k_params[i].s1;
        p->numel = (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
        p->offset = off;
        p->decay = p->ndim >= 2;
        off += p->numel;
    }
    t->tt.table = t->info;
    t->tt.count = count;
    t->tt.total = off;
}

static float *filled(size_t n, float base) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = base + 0.25f * (float)i - (float)(i % 7) * 1e-3f;
    return x;
}

static void path2(char *out, size_t cap, const char *a, const char *b) { snprintf(out, cap, "%s/%s", a, b); }

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

/* names in a directory, sorted, joined by ' ' */
static void list_dir(const char *dir, char *out, size_t cap) {
    char names[32][64];
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 32) {
        if (de->d_name[0] == '.' && (de->d_name[1] == 0 || (de->d_name[1] == '.' && de->d_name[2] == 0))) continue;
        snprintf(names[n++], 64, "%s", de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 64, (int (*)(const void *, const void *))strcmp);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i) strncat(out, " ", cap - strlen(out) - 1);
        strncat(out, names[i], cap - strlen(out) - 1);
    }
}

static void flip_byte(const char *path, long from_end) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -from_end, SEEK_END), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, -from_end, SEEK_END), 0);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void test_round_trip(void **state) {
    (void)state;
    table t;
    make_table(&t, NP);
    size_t n = t.tt.total;
    float *p = filled(n, 1.0f), *m = filled(n, -2.0f), *v = filled(n, 0.001f);
    char run[1024], root[1100], buf[4096];
    path2(run, sizeof run, g_dir, "run");
    path2(root, sizeof root, run, "ckpt");

    char *saved = NULL;
    LF_ASSERT_OK(
        lf_checkpoint_save(root, 7, &t.tt, p, m, v, "{\"step\": 7, \"tokens\": 123, \"files\": 1}", NULL, 0, 3, NULL, &saved));
    char want[1200];
    path2(want, sizeof want, root, "step_00000007");
    assert_string_equal(saved, want);
    path2(buf, sizeof buf, root, "latest");
    char latest[256];
    read_text(buf, latest, sizeof latest);
    assert_string_equal(latest, "step_00000007\n");
    list_dir(root, buf, sizeof buf);
    assert_string_equal(buf, "latest step_00000007");
    list_dir(saved, buf, sizeof buf);
    assert_string_equal(buf, "model.safetensors optimizer.safetensors trainer_state.json");

    /* model.safetensors: HF names, shapes, format=pt */
    char mp[1300];
    path2(mp, sizeof mp, saved, "model.safetensors");
    lf_safetensors *st;
    LF_ASSERT_OK(lf_safetensors_open(&st, mp));
    assert_int_equal(lf_safetensors_count(st), NP);
    assert_string_equal(lf_safetensors_meta(st, "format"), "pt");
    const lf_st_tensor *w = lf_safetensors_find(st, "h.0.attn.c_attn.weight");
    assert_non_null(w);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->shape[0], 3);
    assert_int_equal(w->shape[1], 9);
    lf_safetensors_close(st);
    path2(mp, sizeof mp, saved, "optimizer.safetensors");
    LF_ASSERT_OK(lf_safetensors_open(&st, mp));
    assert_int_equal(lf_safetensors_count(st), 2 * NP);
    assert_non_null(lf_safetensors_find(st, "exp_avg.wte.weight"));
    assert_non_null(lf_safetensors_find(st, "exp_avg_sq.ln_f.bias"));
    lf_safetensors_close(st);

    /* resolve from every accepted starting point */
    const char *starts[] = {root, run, saved, NULL, NULL};
    char lp[1200], rslash[1200];
    path2(lp, sizeof lp, root, "latest");
    snprintf(rslash, sizeof rslash, "%s//", root);
    starts[3] = lp;
    starts[4] = rslash;
    for (int i = 0; i < 5; i++) {
        char *dir = NULL;
        LF_ASSERT_OK(lf_checkpoint_resolve(starts[i], &dir));
        assert_string_equal(dir, saved);
        lf_free(dir);
    }

    /* load everything */
    float *p2 = calloc(n, sizeof *p2), *m2 = calloc(n, sizeof *m2), *v2 = calloc(n, sizeof *v2);
    char *sj = NULL;
    LF_ASSERT_OK(lf_checkpoint_load(saved, &t.tt, p2, m2, v2, &sj));
    assert_memory_equal(p, p2, n * sizeof *p);
    assert_memory_equal(m, m2, n * sizeof *m);
    assert_memory_equal(v, v2, n * sizeof *v);
    assert_non_null(strstr(sj, "\"tokens\":\t123"));
    assert_non_null(strstr(sj, "\"model.safetensors\""));
    assert_non_null(strstr(sj, "\"optimizer.safetensors\""));
    assert_non_null(strstr(sj, "\"sha256\""));
    assert_non_null(strstr(sj, "\"bytes\""));
    lf_free(sj);
    /* weights only */
    memset(p2, 0, n * sizeof *p2);
    LF_ASSERT_OK(lf_checkpoint_load(saved, &t.tt, p2, NULL, NULL, NULL));
    assert_memory_equal(p, p2, n * sizeof *p);
    /* the checkpoint's model.safetensors loads as plain weights too */
    memset(p2, 0, n * sizeof *p2);
    path2(mp, sizeof mp, saved, "model.safetensors");
    LF_ASSERT_OK(lf_weights_load(mp, &t.tt, p2));
    assert_memory_equal(p, p2, n * sizeof *p);

    /* save the same step again with new values: replaced, nothing left over */
    for (size_t i = 0; i < n; i++) p[i] += 100.0f;
    lf_free(saved);
    LF_ASSERT_OK(lf_checkpoint_save(root, 7, &t.tt, p, NULL, NULL, "{\"step\": 7}", NULL, 0, 3, NULL, &saved));
    list_dir(root, buf, sizeof buf);
    assert_string_equal(buf, "latest step_00000007");
    list_dir(saved, buf, sizeof buf);
    assert_string_equal(buf, "model.safetensors trainer_state.json");
    LF_ASSERT_OK(lf_checkpoint_load(saved, &t.tt, p2, NULL, NULL, NULL));
    assert_memory_equal(p, p2, n * sizeof *p);
    /* no optimizer state in this one */
    assert_int_equal(lf_checkpoint_load(saved, &t.tt, p2, m2, v2, NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("optimizer.safetensors");

    const char *keep = getenv("LF_CKPT_KEEP");
    if (keep && *keep) LF_ASSERT_OK(lf_checkpoint_save(keep, 7, &t.tt, p, m, v, "{\"step\": 7}", NULL, 0, 3, NULL, NULL));

    lf_free(saved);
    free(p), free(m), free(v), free(p2), free(m2), free(v2);
}

/* Extra files travel inside the checkpoint, are covered by the SHA-256 list,
 * and bad names are refused before anything is written. */
static void test_extra_files(void **state) {
    (void)state;
    table t;
    make_table(&t, NP);
    size_t n = t.tt.total;
    float *p = filled(n, 1.0f), *p2 = filled(n, 0.0f);
    char root[1024], file[1200];
    path2(root, sizeof root, g_dir, "ckpt");
    const char vocab[] = "{\"type\":\"char\",\"chars\":[\"a\",\"b\"]}";
    lf_ckpt_file extra[] = {{"vocab.json", vocab, sizeof vocab - 1}, {"config.json", "{}", 2}};
    char *dir = NULL;
    LF_ASSERT_OK(lf_checkpoint_save(root, 3, &t.tt, p, NULL, NULL, "{}", extra, 2, 0, NULL, &dir));
    path2(file, sizeof file, dir, "vocab.json");
    char *got;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(file, 0, &got, &len));
    assert_int_equal(len, sizeof vocab - 1);
    assert_memory_equal(got, vocab, len);
    lf_free(got);
    LF_ASSERT_OK(lf_checkpoint_load(dir, &t.tt, p2, NULL, NULL, NULL));
    flip_byte(file, 3); /* an extra file is verified like the tensors */
    assert_int_equal(lf_checkpoint_load(dir, &t.tt, p2, NULL, NULL, NULL), LF_ERR_CHECKSUM);
    LF_ASSERT_ERR_CONTAINS("vocab.json");
    static const char *bad[] = {"../x", "model.safetensors", "trainer_state.json", "", ".hidden", "a/b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lf_ckpt_file e = {bad[i], "x", 1};
        assert_int_equal(lf_checkpoint_save(root, 4, &t.tt, p, NULL, NULL, "{}", &e, 1, 0, NULL, NULL),
                         LF_ERR_INVALID_ARG);
    }
    path2(file, sizeof file, root, "step_00000004");
    assert_int_equal(access(file, F_OK), -1); /* nothing written */
    lf_free(dir);
    free(p), free(p2);
}

static void test_corruption(void **state) {
    (void)state;
    table t;
    make_table(&t, NP);
    size_t n = t.tt.total;
    float *p = filled(n, 1.0f), *m = filled(n, -2.0f), *v = filled(n, 0.5f);
    float *p2 = filled(n, 9.0f), *sentinel = filled(n, 9.0f), *m2 = calloc(n, 4), *v2 = calloc(n, 4);
    char root[1024], file[1200];
    path2(root, sizeof root, g_dir, "ckpt");
    char *dir = NULL;
    LF_ASSERT_OK(lf_checkpoint_save(root, 1, &t.tt, p, m, v, "{}", NULL, 0, 0, NULL, &dir));

    /* one flipped byte in the weights: checksum error naming the file, buffers untouched */
    path2(file, sizeof file, dir, "model.safetensors");
    flip_byte(file, 5);
    assert_int_equal(lf_checkpoint_load(dir, &t.tt, p2, m2, v2, NULL), LF_ERR_CHECKSUM);
    LF_ASSERT_ERR_CONTAINS("model.safetensors");
    LF_ASSERT_ERR_CONTAINS("SHA-256");
    LF_ASSERT_ERR_CONTAINS(dir);
    assert_memory_equal(p2, sentinel, n * sizeof *p2);
    flip_byte(file, 5); /* undo */
    LF_ASSERT_OK(lf_checkpoint_load(dir, &t.tt, p2, m2, v2, NULL));

    /* a truncated file: size mismatch */
    assert_int_equal(truncate(file, 100), 0);
    assert_int_equal(lf_checkpoint_load(dir, &t.tt, p2, NULL, NULL, NULL), LF_ERR_CHECKSUM);
    LF_ASSERT_ERR_CONTAINS("'model.safetensors' is 100 bytes");

    /* a missing optimizer file */
    path2(file, sizeof file, dir, "optimizer.safetensors");
    assert_int_equal(unlink(file), 0);
    assert_int_equal(lf_checkpoint_load(dir, &t.tt, p2, m2, v2, NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("'optimizer.safetensors' is missing");

    /* a broken trainer_state.json */
    free(dir);
    LF_ASSERT_OK(lf_checkpoint_save(root, 2, &t.tt, p, m, v, "{}", NULL, 0, 0, NULL, &dir));
    path2(file, sizeof file, dir, "trainer_state.json");
    FILE *f = fopen(file, "wb");
    fputs("{\"files\": ", f);
    fclose(f);
    assert_int_equal(lf_checkpoint_load(dir, &t.tt, p2, NULL, NULL, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("trainer_state.json");
    f = fopen(file, "wb");
    fputs("{\"files\": {\"../../etc/passwd\": {\"sha256\": \"00\", \"bytes\": 1}, \"model.safetensors\": {}}}", f);
    fclose(f);
    assert_int_equal(lf_checkpoint_load(dir, &t.tt, p2, NULL, NULL, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("../../etc/passwd");
    unlink(file);
    assert_int_equal(lf_checkpoint_load(dir, &t.tt, p2, NULL, NULL, NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("trainer_state.json");

    /* a model without one of the checkpoint's tensors, and one with a wrong shape: named */
    free(dir);
    LF_ASSERT_OK(lf_checkpoint_save(root, 3, &t.tt, p, m, v, "{}", NULL, 0, 0, NULL, &dir));
    table small;
    make_table(&small, NP - 1); /* no ln_f.bias */
    float *ps = calloc(small.tt.total, 4);
    assert_int_equal(lf_checkpoint_load(dir, &small.tt, ps, NULL, NULL, NULL), LF_ERR_MISMATCH);
    LF_ASSERT_ERR_CONTAINS("unexpected: ln_f.bias");
    table shaped;
    make_table(&shaped, NP);
    shaped.info[1].shape[0] = 3; /* wpe (3,4) instead of (4,3) */
    shaped.info[1].shape[1] = 4;
    assert_int_equal(lf_checkpoint_load(dir, &shaped.tt, p2, NULL, NULL, NULL), LF_ERR_MISMATCH);
    LF_ASSERT_ERR_CONTAINS("wpe.weight (file [4, 3], model [3, 4])");

    /* bad arguments */
    assert_int_equal(lf_checkpoint_load(dir, &t.tt, p2, m2, NULL, NULL), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_checkpoint_save(root, 4, &t.tt, p, m, NULL, "{}", NULL, 0, 0, NULL, NULL), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_checkpoint_save(root, 4, &t.tt, p, NULL, NULL, "[1]", NULL, 0, 0, NULL, NULL), LF_ERR_INVALID_ARG);
    table bad;
    make_table(&bad, NP);
    bad.tt.total -= 1; /* last param overruns the buffer */
    assert_int_equal(lf_checkpoint_save(root, 4, &bad.tt, p, NULL, NULL, "{}", NULL, 0, 0, NULL, NULL), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("ln_f.bias");
    make_table(&bad, NP);
    snprintf(bad.info[2].name, sizeof bad.info[2].name, "wte.weight");
    assert_int_equal(lf_checkpoint_save(root, 4, &bad.tt, p, NULL, NULL, "{}", NULL, 0, 0, NULL, NULL), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("twice");
    path2(file, sizeof file, root, "step_00000004");
    assert_false(exists(file));

    free(dir);
    free(ps), free(p), free(m), free(v), free(p2), free(sentinel), free(m2), free(v2);
}

static void test_rotation(void **state) {
    (void)state;
    table t;
    make_table(&t, NP);
    float *p = filled(t.tt.total, 0.0f);
    char root[1024], buf[4096], lp[1200], latest[256];

    path2(root, sizeof root, g_dir, "a");
    for (long s = 1; s <= 5; s++) LF_ASSERT_OK(lf_checkpoint_save(root, s, &t.tt, p, NULL, NULL, "{}", NULL, 0, 2, NULL, NULL));
    list_dir(root, buf, sizeof buf);
    assert_string_equal(buf, "latest step_00000004 step_00000005");
    path2(lp, sizeof lp, root, "latest");
    read_text(lp, latest, sizeof latest);
    assert_string_equal(latest, "step_00000005\n");

    /* protect, by name or by path, survives */
    path2(root, sizeof root, g_dir, "b");
    for (long s = 1; s <= 5; s++)
        LF_ASSERT_OK(lf_checkpoint_save(root, s, &t.tt, p, NULL, NULL, "{}", NULL, 0, 2, "step_00000001", NULL));
    list_dir(root, buf, sizeof buf);
    assert_string_equal(buf, "latest step_00000001 step_00000004 step_00000005");
    char prot[1200];
    path2(prot, sizeof prot, root, "step_00000004/");
    for (long s = 6; s <= 7; s++) LF_ASSERT_OK(lf_checkpoint_save(root, s, &t.tt, p, NULL, NULL, "{}", NULL, 0, 1, prot, NULL));
    list_dir(root, buf, sizeof buf);
    assert_string_equal(buf, "latest step_00000004 step_00000007");

    /* saving an older step: latest names it, and it survives rotation */
    LF_ASSERT_OK(lf_checkpoint_save(root, 2, &t.tt, p, NULL, NULL, "{}", NULL, 0, 1, NULL, NULL));
    list_dir(root, buf, sizeof buf);
    assert_string_equal(buf, "latest step_00000002 step_00000007");

    /* keep_last 0 keeps all; stale temporaries from a crash are cleaned */
    path2(root, sizeof root, g_dir, "c");
    char junk[1200];
    path2(junk, sizeof junk, root, ".tmp_step_00000009");
    LF_ASSERT_OK(lf_mkdirs(junk));
    path2(junk, sizeof junk, root, "notes.txt");
    FILE *f = fopen(junk, "w");
    fputs("mine", f);
    fclose(f);
    for (long s = 1; s <= 3; s++) LF_ASSERT_OK(lf_checkpoint_save(root, s, &t.tt, p, NULL, NULL, "{}", NULL, 0, 0, NULL, NULL));
    list_dir(root, buf, sizeof buf);
    assert_string_equal(buf, "latest notes.txt step_00000001 step_00000002 step_00000003");
    free(p);
}

static void test_resolve_errors(void **state) {
    (void)state;
    char *dir = (char *)1;
    char p[1200];
    path2(p, sizeof p, g_dir, "nothing");
    assert_int_equal(lf_checkpoint_resolve(p, &dir), LF_ERR_NOT_FOUND);
    assert_null(dir);
    LF_ASSERT_ERR_CONTAINS(p);
    assert_int_equal(lf_checkpoint_resolve(g_dir, &dir), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("no checkpoint");

    path2(p, sizeof p, g_dir, "latest");
    FILE *f = fopen(p, "w");
    fputs("step_00000042\n", f);
    fclose(f);
    assert_int_equal(lf_checkpoint_resolve(g_dir, &dir), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("step_00000042");
    f = fopen(p, "w");
    fputs("../elsewhere\n", f);
    fclose(f);
    assert_int_equal(lf_checkpoint_resolve(p, &dir), LF_ERR_FORMAT);
    f = fopen(p, "w");
    fclose(f);
    assert_int_equal(lf_checkpoint_resolve(p, &dir), LF_ERR_FORMAT);
    assert_int_equal(lf_checkpoint_resolve(NULL, &dir), LF_ERR_INVALID_ARG);
}

/* An HF-style file: "transformer." prefix, tied lm_head, attention buffers. */
static void test_weights_load_hf(void **state) {
    (void)state;
    table t;
    make_table(&t, NP);
    size_t n = t.tt.total;
    float *src = filled(n, 3.0f), *dst = calloc(n, 4), *mask = filled(16, 1.0f);
    lf_st_tensor ts[NP + 3];
    memset(ts, 0, sizeof ts);
    int k = 0;
    for (int i = NP - 1; i >= 0; i--, k++) { /* order differs from the table */
        const lf_param_info *pi = &t.info[i];
        lf_st_tensor *x = &ts[k];
        snprintf(x->name, sizeof x->name, "%s%s", i % 2 ? "transformer." : "", pi->name);
        x->dtype = LF_ST_F32;
        x->ndim = pi->ndim;
        x->shape[0] = pi->shape[0];
        x->shape[1] = pi->shape[1];
        x->numel = pi->numel;
        x->nbytes = pi->numel * 4;
        x->data = src + pi->offset;
    }
    lf_st_tensor *lm = &ts[k++];
    *lm = ts[NP - 1]; /* wte data, shape (5,3) */
    snprintf(lm->name, sizeof lm->name, "lm_head.weight");
    lf_st_tensor *ab = &ts[k++];
    snprintf(ab->name, sizeof ab->name, "transformer.h.0.attn.bias");
    ab->dtype = LF_ST_F32;
    ab->ndim = 4;
    ab->shape[0] = ab->shape[1] = 1;
    ab->shape[2] = ab->shape[3] = 4;
    ab->numel = 16;
    ab->nbytes = 64;
    ab->data = mask;
    lf_st_tensor *mb = &ts[k++];
    snprintf(mb->name, sizeof mb->name, "transformer.h.0.attn.masked_bias");
    mb->dtype = LF_ST_F32;
    mb->ndim = 0;
    mb->numel = 1;
    mb->nbytes = 4;
    mb->data = mask;
    char path[1200];
    path2(path, sizeof path, g_dir, "hf.safetensors");
    LF_ASSERT_OK(lf_safetensors_write(path, ts, k, NULL, 0));
    LF_ASSERT_OK(lf_weights_load(path, &t.tt, dst));
    assert_memory_equal(src, dst, n * 4);
    free(src), free(dst), free(mask);
}

static void test_weights_load_mismatch(void **state) {
    (void)state;
    table t;
    make_table(&t, NP);
    size_t n = t.tt.total;
    float *src = filled(n, 3.0f), *dst = filled(n, 7.0f), *keep = filled(n, 7.0f);
    uint16_t half[3] = {0, 0, 0};
    lf_st_tensor ts[NP + 2];
    memset(ts, 0, sizeof ts);
    int k = 0;
    for (int i = 0; i < NP; i++) {
        const lf_param_info *pi = &t.info[i];
        if (strcmp(pi->name, "ln_f.bias") == 0) continue; /* missing */
        lf_st_tensor *x = &ts[k++];
        snprintf(x->name, sizeof x->name, "%s", pi->name);
        x->dtype = LF_ST_F32;
        x->ndim = pi->ndim;
        x->shape[0] = pi->shape[0];
        x->shape[1] = pi->shape[1];
        x->numel = pi->numel;
        x->nbytes = pi->numel * 4;
        x->data = src + pi->offset;
        if (strcmp(pi->name, "wte.weight") == 0) { /* transposed */
            x->shape[0] = pi->shape[1];
            x->shape[1] = pi->shape[0];
        }
        if (strcmp(pi->name, "h.0.ln_1.bias") == 0) { /* half precision */
            x->dtype = LF_ST_F16;
            x->nbytes = 6;
            x->data = half;
        }
    }
    lf_st_tensor *u = &ts[k++];
    snprintf(u->name, sizeof u->name, "transformer.h.0.mlp.c_fc.weight");
    u->dtype = LF_ST_F32;
    u->ndim = 1;
    u->shape[0] = 3;
    u->numel = 3;
    u->nbytes = 12;
    u->data = src;
    lf_st_tensor *ab = &ts[k++]; /* attn.bias with 2 dims is not the HF mask buffer */
    snprintf(ab->name, sizeof ab->name, "h.0.attn.bias");
    ab->dtype = LF_ST_F32;
    ab->ndim = 1;
    ab->shape[0] = 3;
    ab->numel = 3;
    ab->nbytes = 12;
    ab->data = src;

    char path[1200];
    path2(path, sizeof path, g_dir, "bad.safetensors");
    LF_ASSERT_OK(lf_safetensors_write(path, ts, k, NULL, 0));
    assert_int_equal(lf_weights_load(path, &t.tt, dst), LF_ERR_MISMATCH);
    LF_ASSERT_ERR_CONTAINS(path);
    LF_ASSERT_ERR_CONTAINS("1 missing, 2 unexpected, 1 wrong shape, 1 not F32");
    LF_ASSERT_ERR_CONTAINS("missing: ln_f.bias");
    LF_ASSERT_ERR_CONTAINS("transformer.h.0.mlp.c_fc.weight");
    LF_ASSERT_ERR_CONTAINS("h.0.attn.bias");
    LF_ASSERT_ERR_CONTAINS("wte.weight (file [3, 5], model [5, 3])");
    LF_ASSERT_ERR_CONTAINS("h.0.ln_1.bias (F16)");
    assert_memory_equal(dst, keep, n * 4); /* nothing written */

    /* both "x" and "transformer.x" */
    ts[0] = ts[1];
    snprintf(ts[0].name, sizeof ts[0].name, "transformer.wpe.weight");
    LF_ASSERT_OK(lf_safetensors_write(path, ts, 2, NULL, 0));
    assert_int_equal(lf_weights_load(path, &t.tt, dst), LF_ERR_MISMATCH);
    LF_ASSERT_ERR_CONTAINS("duplicate: 'transformer.wpe.weight' and 'wpe.weight'");

    /* not a safetensors file at all */
    FILE *f = fopen(path, "wb");
    fputs("hello", f);
    fclose(f);
    assert_int_equal(lf_weights_load(path, &t.tt, dst), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS(path);
    free(src), free(dst), free(keep);
}

static void test_unwritable_root(void **state) {
    (void)state;
    table t;
    make_table(&t, NP);
    float *p = filled(t.tt.total, 0.0f);
    char root[1200], file[1200];

    /* under a regular file: fails for every user, root included */
    path2(file, sizeof file, g_dir, "plainfile");
    FILE *f = fopen(file, "w");
    fputs("x", f);
    fclose(f);
    path2(root, sizeof root, file, "ckpt");
    assert_int_equal(lf_checkpoint_save(root, 1, &t.tt, p, NULL, NULL, "{}", NULL, 0, 2, NULL, NULL), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS(file);

    if (geteuid() != 0) { /* root ignores permission bits */
        char ro[1200];
        path2(ro, sizeof ro, g_dir, "ro");
        assert_int_equal(mkdir(ro, 0500), 0);
        path2(root, sizeof root, ro, "ckpt");
        assert_int_equal(lf_checkpoint_save(root, 1, &t.tt, p, NULL, NULL, "{}", NULL, 0, 2, NULL, NULL), LF_ERR_IO);
        LF_ASSERT_ERR_CONTAINS(ro);
        /* an existing root that became read-only */
        path2(root, sizeof root, g_dir, "ckpt_ro");
        LF_ASSERT_OK(lf_checkpoint_save(root, 1, &t.tt, p, NULL, NULL, "{}", NULL, 0, 2, NULL, NULL));
        assert_int_equal(chmod(root, 0500), 0);
        assert_int_equal(lf_checkpoint_save(root, 2, &t.tt, p, NULL, NULL, "{}", NULL, 0, 2, NULL, NULL), LF_ERR_IO);
        chmod(root, 0700);
        char *dir = NULL;
        LF_ASSERT_OK(lf_checkpoint_resolve(root, &dir)); /* the old one is intact */
        assert_non_null(strstr(dir, "step_00000001"));
        lf_free(dir);
    }
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extra_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rotation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resolve_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weights_load_hf, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weights_load_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_root, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
