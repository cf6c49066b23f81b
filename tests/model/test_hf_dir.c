/*
 * Hugging Face model directories (src/model/hf.c) against a directory that
 * transformers wrote: tests/fixtures/hf_llama_bf16/ (save_pretrained of a
 * tiny bf16 Llama in 3 shards, by tools/reference/make_llama_golden.py) and
 * its expected.json (config values, per-tensor shapes, shards, exact fp64
 * sums and element values computed in Python from the bf16 values).
 *
 * Checked: the config mapping; every tensor's shard, shape and values (the
 * widening is exact, so elements compare equal and each fp32 value has zero
 * low 16 bits; the C sums of the values must match math.fsum within the error
 * bound of a sequential double sum, (n-1) * 2^-53 * sum|x|); the one-file
 * layout; F16 widening of all 65536 bit patterns against ldexp; and broken
 * copies of the fixture (a missing or truncated shard, an index naming a
 * tensor no shard holds or the wrong shard, a tensor in two shards, a shard
 * path leaving the directory, unsupported config options), each of which
 * must fail with its status and a message naming the file, key or tensor.
 * Allocation failures during open are injected one by one (nothing may leak
 * under ASan, nothing may be returned).
 */
#include <dirent.h>
#include <float.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "test_util.h"
#include "llmforge/hf.h"
#include "llmforge/safetensors.h"

#define FIXTURE LF_SOURCE_DIR "/tests/fixtures/hf_llama_bf16"
#define SHARD1 "model-00001-of-00003.safetensors"
#define SHARD2 "model-00002-of-00003.safetensors"
#define SHARD3 "model-00003-of-00003.safetensors"
#define INDEX "model.safetensors.index.json"

static cJSON *expected;

static char *path2(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static cJSON *read_json_file(const char *path) {
    char *text = NULL;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &text, NULL));
    cJSON *j = cJSON_Parse(text);
    lf_free(text);
    if (!j) fail_msg("cannot parse %s", path);
    return j;
}

static void write_json_file(const char *path, const cJSON *j) {
    char *text = cJSON_Print(j);
    assert_non_null(text);
    LF_ASSERT_OK(lf_file_write_all(path, text, strlen(text)));
    cJSON_free(text);
}

/* A fresh temporary copy of the fixture directory (regular files only). */
static char *copy_fixture(void) {
    char *dst = lf_test_tmpdir();
    assert_non_null(dst);
    DIR *d = opendir(FIXTURE);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char *src = path2(FIXTURE, de->d_name), *to = path2(dst, de->d_name);
        char *data = NULL;
        size_t len = 0;
        LF_ASSERT_OK(lf_file_read_all(src, 0, &data, &len));
        LF_ASSERT_OK(lf_file_write_all(to, data, len));
        lf_free(data);
        free(src);
        free(to);
    }
    closedir(d);
    return dst;
}

/* Edit one JSON file of a directory in place. */
typedef void (*json_edit)(cJSON *root);
static void edit_json(const char *dir, const char *name, json_edit fn) {
    char *p = path2(dir, name);
    cJSON *j = read_json_file(p);
    fn(j);
    write_json_file(p, j);
    cJSON_Delete(j);
    free(p);
}

static void set_item(cJSON *obj, const char *key, cJSON *value) {
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, value);
    else cJSON_AddItemToObject(obj, key, value);
}

static void remove_file(const char *dir, const char *name) {
    char *p = path2(dir, name);
    assert_int_equal(unlink(p), 0);
    free(p);
}

static int setup(void **state) {
    (void)state;
    expected = read_json_file(FIXTURE "/expected.json");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(expected);
    return 0;
}

static double jnum(const cJSON *obj, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(j)) fail_msg("expected.json: '%s' is not a number", key);
    return j->valuedouble;
}

/* ---------------------------------------------------------------- the fixture as written */

static void check_fixture_config(const lf_model_config *c) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(expected, "config");
    assert_int_equal(c->arch, LF_ARCH_LLAMA);
    assert_int_equal(c->norm, LF_NORM_RMSNORM);
    assert_int_equal(c->n_layer, (int)jnum(e, "n_layer"));
    assert_int_equal(c->n_head, (int)jnum(e, "n_head"));
    assert_int_equal(c->n_kv_head, (int)jnum(e, "n_kv_head"));
    assert_int_equal(c->n_embd, (int)jnum(e, "n_embd"));
    assert_int_equal(c->ffn_hidden, (int)jnum(e, "ffn_hidden"));
    assert_int_equal(c->vocab_size, (int)jnum(e, "vocab_size"));
    assert_int_equal(c->padded_vocab_size, c->vocab_size);
    assert_int_equal(c->block_size, (int)jnum(e, "block_size"));
    assert_true(c->norm_eps == (float)jnum(e, "norm_eps"));
    assert_true(c->rope_theta == (float)jnum(e, "rope_theta"));
    assert_int_equal(c->tie_embeddings, (int)jnum(e, "tie_embeddings"));
    assert_int_equal(c->bias, 0);
    assert_true(c->dropout == 0.0f);
    /* the generator's shape, so that expected.json cannot drift silently */
    assert_int_equal(c->n_layer, 2);
    assert_int_equal(c->n_head, 6);
    assert_int_equal(c->n_kv_head, 2);
    assert_int_equal(c->n_embd, 48);
    assert_int_equal(c->ffn_hidden, 96);
    assert_int_equal(c->vocab_size, 73);
    assert_int_equal(c->block_size, 64);
    assert_true(c->rope_theta == 500000.0f);
    assert_true(c->norm_eps == 1e-5f);
}

static void test_fixture_config(void **state) {
    (void)state;
    lf_hf_model *h = NULL;
    LF_ASSERT_OK(lf_hf_open(&h, FIXTURE));
    assert_string_equal(lf_hf_model_type(h), "llama");
    assert_string_equal(lf_hf_dir(h), FIXTURE);
    assert_non_null(strstr(lf_hf_config_text(h), "\"num_key_value_heads\": 2"));
    lf_model_config c;
    LF_ASSERT_OK(lf_hf_model_config(h, &c));
    check_fixture_config(&c);
    lf_hf_close(h);
    lf_hf_close(NULL);
}

/* Read every tensor of h and compare with expected.json. */
static void check_all_tensors(const lf_hf_model *h, int sharded) {
    const cJSON *tens = cJSON_GetObjectItemCaseSensitive(expected, "tensors");
    int n_exp = cJSON_GetArraySize(tens);
    assert_int_equal(n_exp, (int)jnum(expected, "num_tensors"));
    assert_int_equal(lf_hf_num_tensors(h), n_exp);
    assert_null(lf_hf_tensor_name(h, -1));
    assert_null(lf_hf_tensor_name(h, n_exp));
    for (int i = 0; i < n_exp; i++) {
        if (!cJSON_GetObjectItemCaseSensitive(tens, lf_hf_tensor_name(h, i)))
            fail_msg("tensor '%s' is not in expected.json", lf_hf_tensor_name(h, i));
        if (i > 0) assert_true(strcmp(lf_hf_tensor_name(h, i - 1), lf_hf_tensor_name(h, i)) < 0);
    }
    int shards_seen[3] = {0, 0, 0};
    for (const cJSON *t = tens->child; t; t = t->next) {
        const char *name = t->string;
        const char *file = cJSON_GetObjectItemCaseSensitive(t, "file")->valuestring;
        if (sharded) {
            assert_string_equal(lf_hf_tensor_file(h, name), file);
            for (int s = 0; s < 3; s++) {
                char want[64];
                snprintf(want, sizeof want, "model-%05d-of-00003.safetensors", s + 1);
                if (strcmp(file, want) == 0) shards_seen[s] = 1;
            }
        } else {
            assert_string_equal(lf_hf_tensor_file(h, name), "model.safetensors");
        }
        int ndim = -1;
        int64_t shape[4];
        LF_ASSERT_OK(lf_hf_tensor_shape(h, name, &ndim, shape));
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(t, "shape");
        assert_int_equal(ndim, cJSON_GetArraySize(js));
        size_t numel = 1;
        for (int d = 0; d < ndim; d++) {
            assert_int_equal(shape[d], (int64_t)cJSON_GetArrayItem(js, d)->valuedouble);
            numel *= (size_t)shape[d];
        }
        assert_int_equal(numel, (size_t)jnum(t, "numel"));
        float *v = malloc(numel * sizeof *v);
        assert_non_null(v);
        LF_ASSERT_OK(lf_hf_read_f32(h, name, v, numel));
        double sum = 0, wsum = 0;
        for (size_t j = 0; j < numel; j++) {
            uint32_t bits;
            memcpy(&bits, &v[j], 4);
            if (bits & 0xffffu) fail_msg("%s[%zu] = %a is not a widened bf16 value", name, j, (double)v[j]);
            sum += v[j];
            wsum += (double)v[j] * (double)((j % 13) + 1);
        }
        /* Python's fsum is exact; a sequential double sum of n terms errs by
         * at most (n-1) * 2^-53 * sum|x| (each product x*w is exact: 8 + 4
         * significant bits). */
        double tol = (double)numel * DBL_EPSILON * 0.5 * jnum(t, "sum_abs");
        double wtol = (double)numel * DBL_EPSILON * 0.5 * jnum(t, "wsum_abs");
        if (fabs(sum - jnum(t, "sum")) > tol) fail_msg("%s: sum %.17g, expected %.17g", name, sum, jnum(t, "sum"));
        if (fabs(wsum - jnum(t, "wsum")) > wtol)
            fail_msg("%s: weighted sum %.17g, expected %.17g", name, wsum, jnum(t, "wsum"));
        const cJSON *el = cJSON_GetObjectItemCaseSensitive(t, "elements");
        assert_true(cJSON_GetArraySize(el) >= 4);
        for (const cJSON *p = el->child; p; p = p->next) {
            size_t at = (size_t)cJSON_GetArrayItem(p, 0)->valuedouble;
            double want = cJSON_GetArrayItem(p, 1)->valuedouble;
            assert_true(at < numel);
            if ((double)v[at] != want) fail_msg("%s[%zu] = %.9g, expected %.9g", name, at, (double)v[at], want);
        }
        free(v);
    }
    if (sharded) assert_true(shards_seen[0] && shards_seen[1] && shards_seen[2]);
}

static void test_fixture_tensors(void **state) {
    (void)state;
    lf_hf_model *h = NULL;
    LF_ASSERT_OK(lf_hf_open(&h, FIXTURE));
    check_all_tensors(h, 1);
    /* the names llmforge's llama will ask for, including the untied head */
    assert_string_equal(lf_hf_tensor_file(h, "lm_head.weight"), SHARD3);
    assert_null(lf_hf_tensor_file(h, "model.layers.2.mlp.up_proj.weight"));
    int ndim;
    int64_t shape[4];
    LF_ASSERT_OK(lf_hf_tensor_shape(h, "model.layers.1.self_attn.k_proj.weight", &ndim, shape));
    assert_int_equal(ndim, 2);
    assert_int_equal(shape[0], 16); /* 2 kv heads x 8, nn.Linear (out, in) */
    assert_int_equal(shape[1], 48);
    lf_hf_close(h);
}

/* The same tensors as one model.safetensors (bf16 bytes copied as they are). */
static void test_single_file_layout(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    assert_non_null(dir);
    lf_safetensors *sh[3];
    const char *names[3] = {SHARD1, SHARD2, SHARD3};
    lf_st_tensor all[64];
    int n = 0;
    for (int s = 0; s < 3; s++) {
        char *p = path2(FIXTURE, names[s]);
        LF_ASSERT_OK(lf_safetensors_open(&sh[s], p));
        free(p);
        for (int i = 0; i < lf_safetensors_count(sh[s]); i++) {
            assert_true(n < 64);
            all[n++] = *lf_safetensors_at(sh[s], i);
        }
    }
    char *out = path2(dir, "model.safetensors"), *cfg = path2(dir, "config.json");
    LF_ASSERT_OK(lf_safetensors_write(out, all, n, NULL, 0));
    char *text = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(FIXTURE "/config.json", 0, &text, &len));
    LF_ASSERT_OK(lf_file_write_all(cfg, text, len));
    lf_free(text);
    for (int s = 0; s < 3; s++) lf_safetensors_close(sh[s]);

    lf_hf_model *h = NULL;
    LF_ASSERT_OK(lf_hf_open(&h, dir));
    check_all_tensors(h, 0);
    lf_hf_close(h);
    free(out);
    free(cfg);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- dtypes */

static const char *k_tiny_llama =
    "{\"model_type\": \"llama\", \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
    " \"intermediate_size\": 16, \"vocab_size\": 5, \"max_position_embeddings\": 4}";

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* binary16 by its definition: (-1)^s * 2^(e-15) * 1.m, subnormals 2^-14 * 0.m */
static float f16_reference(uint16_t x) {
    int s = x >> 15, e = (x >> 10) & 31, m = x & 1023;
    float v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexpf((float)m, -24);
    else v = ldexpf((float)(1024 + m), e - 25);
    return s ? -v : v;
}

static void test_dtypes(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    assert_non_null(dir);
    static uint16_t h16[65536];
    for (int i = 0; i < 65536; i++) h16[i] = (uint16_t)i;
    const uint16_t b16[6] = {0x3f80, 0xbf80, 0x8000, 0x7f80, 0x7fc1, 0x0001}; /* 1, -1, -0, inf, nan, min subnormal */
    const float f32[3] = {1.5f, -0.0f, 3.0e38f};
    const int32_t i32[2] = {1, 2};
    const float five[1] = {0};
    lf_st_tensor t[5] = {
        {.name = "h", .dtype = LF_ST_F16, .ndim = 2, .shape = {256, 256}, .data = h16},
        {.name = "b", .dtype = LF_ST_BF16, .ndim = 1, .shape = {6}, .data = b16},
        {.name = "f", .dtype = LF_ST_F32, .ndim = 1, .shape = {3}, .data = f32},
        {.name = "i", .dtype = LF_ST_I32, .ndim = 1, .shape = {2}, .data = i32},
        {.name = "five", .dtype = LF_ST_F32, .ndim = 5, .shape = {1, 1, 1, 1, 1}, .data = five},
    };
    for (int i = 0; i < 5; i++) {
        t[i].numel = 1;
        for (int d = 0; d < t[i].ndim; d++) t[i].numel *= (size_t)t[i].shape[d];
        t[i].nbytes = t[i].numel * lf_st_dtype_size(t[i].dtype);
    }
    char *st = path2(dir, "model.safetensors"), *cfg = path2(dir, "config.json");
    LF_ASSERT_OK(lf_safetensors_write(st, t, 5, NULL, 0));
    LF_ASSERT_OK(lf_file_write_all(cfg, k_tiny_llama, strlen(k_tiny_llama)));
    lf_hf_model *h = NULL;
    LF_ASSERT_OK(lf_hf_open(&h, dir));
    assert_int_equal(lf_hf_num_tensors(h), 5);

    static float out[65536];
    LF_ASSERT_OK(lf_hf_read_f32(h, "h", out, 65536));
    /* fixed points of the format */
    assert_int_equal(to_bits(out[0x0000]), 0x00000000u);
    assert_int_equal(to_bits(out[0x8000]), 0x80000000u);  /* -0 */
    assert_true(out[0x0001] == 5.9604644775390625e-08f);  /* 2^-24, smallest subnormal */
    assert_true(out[0x03ff] == 6.09755516052246094e-05f); /* largest subnormal */
    assert_true(out[0x0400] == 6.103515625e-05f);         /* smallest normal */
    assert_true(out[0x3c00] == 1.0f);
    assert_true(out[0xc000] == -2.0f);
    assert_true(out[0x3555] == 0.333251953125f);
    assert_true(out[0x7bff] == 65504.0f);
    assert_true(isinf(out[0x7c00]) && out[0x7c00] > 0);
    assert_true(isinf(out[0xfc00]) && out[0xfc00] < 0);
    assert_int_equal(to_bits(out[0x7e00]), 0x7fc00000u); /* quiet NaN stays quiet */
    assert_true(isnan(out[0x7c01]) && isnan(out[0xfe00]) && signbit(out[0xfe00]));
    for (int i = 0; i < 65536; i++) {
        float want = f16_reference((uint16_t)i);
        if (isnan(want)) {
            if (!isnan(out[i]) || !signbit(out[i]) != !signbit(want))
                fail_msg("f16 0x%04x: %a, want NaN", i, (double)out[i]);
            /* payload: the 10 mantissa bits land in the top of the fp32 mantissa */
            assert_int_equal(to_bits(out[i]) & 0x007fe000u, (uint32_t)(i & 0x3ff) << 13);
        } else if (to_bits(out[i]) != to_bits(want)) {
            fail_msg("f16 0x%04x -> %a, want %a", i, (double)out[i], (double)want);
        }
    }

    float b[6];
    LF_ASSERT_OK(lf_hf_read_f32(h, "b", b, 6));
    assert_true(b[0] == 1.0f && b[1] == -1.0f);
    assert_int_equal(to_bits(b[2]), 0x80000000u);
    assert_true(isinf(b[3]));
    assert_int_equal(to_bits(b[4]), 0x7fc10000u);
    assert_true(b[5] == from_bits(0x00010000u));

    float f[3];
    LF_ASSERT_OK(lf_hf_read_f32(h, "f", f, 3));
    assert_memory_equal(f, f32, sizeof f32);

    int32_t junk[2];
    assert_int_equal(lf_hf_read_f32(h, "i", (float *)junk, 2), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("'i'");
    LF_ASSERT_ERR_CONTAINS("I32");
    assert_int_equal(lf_hf_read_f32(h, "f", f, 2), LF_ERR_MISMATCH);
    LF_ASSERT_ERR_CONTAINS("'f'");
    LF_ASSERT_ERR_CONTAINS("model.safetensors");
    assert_int_equal(lf_hf_read_f32(h, "nope", f, 3), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("'nope'");
    int ndim;
    int64_t shape[4];
    assert_int_equal(lf_hf_tensor_shape(h, "five", &ndim, shape), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("'five'");
    assert_int_equal(lf_hf_tensor_shape(h, "nope", &ndim, shape), LF_ERR_NOT_FOUND);
    LF_ASSERT_OK(lf_hf_tensor_shape(h, "h", &ndim, shape));
    assert_int_equal(ndim, 2);
    assert_int_equal(shape[0], 256);

    /* the tiny config maps with transformers' defaults for what it omits */
    lf_model_config c;
    LF_ASSERT_OK(lf_hf_model_config(h, &c));
    assert_int_equal(c.n_kv_head, 2);      /* num_key_value_heads absent: n_head */
    assert_true(c.norm_eps == 1e-6f);      /* LlamaConfig's rms_norm_eps */
    assert_true(c.rope_theta == 10000.0f); /* no rope_theta anywhere */
    assert_int_equal(c.tie_embeddings, 0); /* LlamaConfig's tie_word_embeddings */
    lf_hf_close(h);
    free(st);
    free(cfg);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- broken directories */

/* Expect lf_hf_open to fail with status s and a message holding both needles. */
static void expect_open_fails(const char *dir, lf_status s, const char *needle1, const char *needle2) {
    lf_hf_model *h = (lf_hf_model *)(uintptr_t)1;
    lf_status got = lf_hf_open(&h, dir);
    if (got != s) fail_msg("lf_hf_open: %s (%s), expected %s", lf_status_str(got), lf_last_error(), lf_status_str(s));
    assert_null(h);
    if (needle1) LF_ASSERT_ERR_CONTAINS(needle1);
    if (needle2) LF_ASSERT_ERR_CONTAINS(needle2);
}

/* Expect the directory to open and its config to be refused. */
static void expect_config_fails(const char *dir, lf_status s, const char *needle1, const char *needle2) {
    lf_hf_model *h = NULL;
    LF_ASSERT_OK(lf_hf_open(&h, dir));
    lf_model_config c;
    lf_status got = lf_hf_model_config(h, &c);
    if (got != s)
        fail_msg("lf_hf_model_config: %s (%s), expected %s", lf_status_str(got), lf_last_error(), lf_status_str(s));
    LF_ASSERT_ERR_CONTAINS("config.json");
    if (needle1) LF_ASSERT_ERR_CONTAINS(needle1);
    if (needle2) LF_ASSERT_ERR_CONTAINS(needle2);
    lf_hf_close(h);
}

static void done(char *dir) {
    lf_test_rmrf(dir);
    free(dir);
}

static void test_missing_shard(void **state) {
    (void)state;
    char *dir = copy_fixture();
    remove_file(dir, SHARD2);
    expect_open_fails(dir, LF_ERR_NOT_FOUND, SHARD2, INDEX);
    done(dir);
}

static void edit_index_add_ghost(cJSON *j) {
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(j, "weight_map"), "model.layers.7.mlp.up_proj.weight",
                            SHARD1);
}
static void test_index_names_absent_tensor(void **state) {
    (void)state;
    char *dir = copy_fixture();
    edit_json(dir, INDEX, edit_index_add_ghost);
    expect_open_fails(dir, LF_ERR_MISMATCH, "model.layers.7.mlp.up_proj.weight", SHARD1);
    done(dir);
}

static void edit_index_wrong_shard(cJSON *j) {
    set_item(cJSON_GetObjectItemCaseSensitive(j, "weight_map"), "lm_head.weight", cJSON_CreateString(SHARD1));
}
static void test_index_wrong_shard(void **state) {
    (void)state;
    char *dir = copy_fixture();
    edit_json(dir, INDEX, edit_index_wrong_shard);
    expect_open_fails(dir, LF_ERR_MISMATCH, "'lm_head.weight'", "but '" SHARD3 "' holds it");
    done(dir);
}

static void edit_index_extra_shard(cJSON *j) {
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(j, "weight_map"), "extra.weight",
                            "model-extra.safetensors");
}
static void test_tensor_in_two_shards(void **state) {
    (void)state;
    char *dir = copy_fixture();
    const float v[48] = {0};
    lf_st_tensor t[2] = {
        {.name = "extra.weight", .dtype = LF_ST_F32, .ndim = 1, .shape = {48}, .numel = 48, .nbytes = 192, .data = v},
        {.name = "model.norm.weight",
         .dtype = LF_ST_F32,
         .ndim = 1,
         .shape = {48},
         .numel = 48,
         .nbytes = 192,
         .data = v},
    };
    char *p = path2(dir, "model-extra.safetensors");
    LF_ASSERT_OK(lf_safetensors_write(p, t, 2, NULL, 0));
    free(p);
    edit_json(dir, INDEX, edit_index_extra_shard);
    expect_open_fails(dir, LF_ERR_MISMATCH, "'model.norm.weight' is in two shards", "model-extra.safetensors");
    done(dir);
}

static void edit_index_escape(cJSON *j) {
    set_item(cJSON_GetObjectItemCaseSensitive(j, "weight_map"), "model.norm.weight",
             cJSON_CreateString("../hf_llama_bf16/" SHARD3));
}
static void edit_index_no_map(cJSON *j) { cJSON_DeleteItemFromObjectCaseSensitive(j, "weight_map"); }
static void edit_index_number(cJSON *j) {
    set_item(cJSON_GetObjectItemCaseSensitive(j, "weight_map"), "model.norm.weight", cJSON_CreateNumber(3));
}
static void test_bad_index(void **state) {
    (void)state;
    char *dir = copy_fixture();
    edit_json(dir, INDEX, edit_index_escape);
    expect_open_fails(dir, LF_ERR_FORMAT, "not a file name inside the directory", "model.norm.weight");
    done(dir);

    dir = copy_fixture();
    edit_json(dir, INDEX, edit_index_no_map);
    expect_open_fails(dir, LF_ERR_FORMAT, "'weight_map' missing", INDEX);
    done(dir);

    dir = copy_fixture();
    edit_json(dir, INDEX, edit_index_number);
    expect_open_fails(dir, LF_ERR_FORMAT, "weight_map['model.norm.weight'] is not a string", NULL);
    done(dir);

    dir = copy_fixture();
    char *p = path2(dir, INDEX);
    LF_ASSERT_OK(lf_file_write_all(p, "{\"weight_map\": {", 16));
    free(p);
    expect_open_fails(dir, LF_ERR_FORMAT, "not valid JSON", INDEX);
    done(dir);
}

static void test_truncated_shard(void **state) {
    (void)state;
    char *dir = copy_fixture();
    char *p = path2(dir, SHARD3);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(truncate(p, st.st_size / 2), 0);
    free(p);
    expect_open_fails(dir, LF_ERR_FORMAT, SHARD3, NULL);
    done(dir);
}

static void test_missing_files(void **state) {
    (void)state;
    char *dir = copy_fixture();
    remove_file(dir, "config.json");
    expect_open_fails(dir, LF_ERR_NOT_FOUND, "config.json missing", NULL);
    done(dir);

    dir = copy_fixture(); /* shards without their index: nothing says what they are */
    remove_file(dir, INDEX);
    expect_open_fails(dir, LF_ERR_NOT_FOUND, "neither model.safetensors nor " INDEX, NULL);
    done(dir);

    expect_open_fails(LF_SOURCE_DIR "/tests/fixtures/no_such_dir", LF_ERR_NOT_FOUND, "not a directory", NULL);

    dir = copy_fixture();
    char *p = path2(dir, "config.json");
    LF_ASSERT_OK(lf_file_write_all(p, "{\"model_type\": \"llama\",", 23));
    free(p);
    expect_open_fails(dir, LF_ERR_FORMAT, "config.json", "not valid JSON");
    done(dir);

    dir = copy_fixture();
    p = path2(dir, "config.json");
    LF_ASSERT_OK(lf_file_write_all(p, "{\"hidden_size\": 48}", 19));
    free(p);
    expect_open_fails(dir, LF_ERR_FORMAT, "'model_type' missing", NULL);
    done(dir);
}

/* One config.json edit and the refusal it must cause. */
static const char *g_key;
static cJSON *g_value;
static void edit_set(cJSON *j) { set_item(j, g_key, g_value); }
static void edit_del(cJSON *j) { cJSON_DeleteItemFromObjectCaseSensitive(j, g_key); }

static void config_case(const char *key, cJSON *value, lf_status s, const char *n1, const char *n2) {
    char *dir = copy_fixture();
    g_key = key;
    g_value = value;
    edit_json(dir, "config.json", value ? edit_set : edit_del);
    expect_config_fails(dir, s, n1, n2);
    done(dir);
}

static cJSON *obj2(const char *k1, cJSON *v1, const char *k2, cJSON *v2) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, k1, v1);
    if (k2) cJSON_AddItemToObject(o, k2, v2);
    return o;
}

static void test_config_refusals(void **state) {
    (void)state;
    config_case("model_type", cJSON_CreateString("bert"), LF_ERR_UNSUPPORTED, "'bert' is not supported",
                "llama, mistral, qwen2, qwen3, phi3, gpt2");
    /* kin of the Llama family that it does not implement: what each lacks */
    config_case("model_type", cJSON_CreateString("gemma2"), LF_ERR_UNSUPPORTED,
                "'gemma2' is not supported: Gemma 2 needs the embedding scaled by sqrt(hidden_size)", "soft-capping");
    config_case("model_type", cJSON_CreateString("gemma"), LF_ERR_UNSUPPORTED, "'gemma' is not supported: Gemma",
                "(1 + weight)");
    config_case("rope_scaling", obj2("rope_type", cJSON_CreateString("longrope"), "factor", cJSON_CreateNumber(8)),
                LF_ERR_UNSUPPORTED, "'rope_scaling.rope_type' is 'longrope'", "llama3");
    config_case("rope_scaling", obj2("type", cJSON_CreateString("linear"), NULL, NULL), LF_ERR_CONFIG,
                "needs 'rope_scaling.factor'", NULL);
    config_case("rope_scaling", obj2("rope_type", cJSON_CreateString("llama3"), "factor", cJSON_CreateNumber(8)),
                LF_ERR_CONFIG, "'llama3' needs 'rope_scaling.", "_freq_factor'");
    config_case("rope_parameters", obj2("rope_type", cJSON_CreateString("linear"), "beta_fast", cJSON_CreateNumber(8)),
                LF_ERR_UNSUPPORTED, "'rope_parameters.beta_fast' is not a key of RoPE type 'linear'", NULL);
    config_case("rope_parameters", obj2("rope_type", cJSON_CreateString("dynamic"), "factor", cJSON_CreateNumber(0.5)),
                LF_ERR_UNSUPPORTED, "'rope_parameters.factor' is 0.5", NULL);
    config_case("rope_parameters",
                obj2("rope_type", cJSON_CreateString("default"), "partial_rotary_factor", cJSON_CreateNumber(0.5)),
                LF_ERR_UNSUPPORTED, "'rope_parameters.partial_rotary_factor'", NULL);
    config_case("partial_rotary_factor", cJSON_CreateNumber(0.5), LF_ERR_UNSUPPORTED, "'partial_rotary_factor' is 0.5",
                NULL);
    config_case("rope_scaling", cJSON_CreateNumber(2), LF_ERR_CONFIG, "'rope_scaling' is not an object", NULL);
    config_case("num_key_value_heads", cJSON_CreateNumber(4), LF_ERR_UNSUPPORTED, "'num_key_value_heads' 4",
                "not divisible");
    config_case("hidden_act", cJSON_CreateString("gelu"), LF_ERR_UNSUPPORTED, "'hidden_act'", "gelu");
    config_case("attention_bias", cJSON_CreateNumber(1), LF_ERR_CONFIG, "'attention_bias'", NULL);
    config_case("head_dim", cJSON_CreateNumber(15), LF_ERR_UNSUPPORTED, "'head_dim' 15 is odd", NULL);
    config_case("head_dim", cJSON_CreateNumber(2048), LF_ERR_UNSUPPORTED, "'head_dim' 2048", NULL);
    config_case("hidden_size", NULL, LF_ERR_CONFIG, "'hidden_size' missing", NULL);
    config_case("hidden_size", cJSON_CreateNumber(48.5), LF_ERR_CONFIG, "'hidden_size'", "not an integer");
    config_case("num_hidden_layers", cJSON_CreateString("2"), LF_ERR_CONFIG, "'num_hidden_layers' is not a number",
                NULL);
    config_case("vocab_size", cJSON_CreateNumber(-1), LF_ERR_CONFIG, "'vocab_size'", NULL);
    config_case("rms_norm_eps", cJSON_CreateNumber(0), LF_ERR_CONFIG, "'rms_norm_eps'", "out of range");
    config_case("tie_word_embeddings", cJSON_CreateNumber(1), LF_ERR_CONFIG, "'tie_word_embeddings'", NULL);
    config_case("rope_theta", cJSON_CreateNumber(10000), LF_ERR_CONFIG, "'rope_theta'", "disagree");
}

/* Several config.json edits (NULL value: delete the key) and the refusal they must cause. */
static void config_cases(const char **keys, cJSON **values, int n, lf_status s, const char *n1, const char *n2) {
    char *dir = copy_fixture();
    for (int i = 0; i < n; i++) {
        g_key = keys[i];
        g_value = values[i];
        edit_json(dir, "config.json", values[i] ? edit_set : edit_del);
    }
    expect_config_fails(dir, s, n1, n2);
    done(dir);
}

/* Qwen3's and Phi-3's keys that llmforge does not implement, by their names. */
static void test_family_refusals(void **state) {
    (void)state;
    const char *k2[] = {"model_type", "use_sliding_window"};
    cJSON *v[] = {cJSON_CreateString("qwen3"), cJSON_CreateTrue()};
    config_cases(k2, v, 2, LF_ERR_UNSUPPORTED, "'use_sliding_window' is true", NULL);
    cJSON *lt = cJSON_CreateArray();
    cJSON_AddItemToArray(lt, cJSON_CreateString("full_attention"));
    cJSON_AddItemToArray(lt, cJSON_CreateString("sliding_attention"));
    const char *kl[] = {"model_type", "layer_types"};
    cJSON *vl[] = {cJSON_CreateString("qwen3"), lt};
    config_cases(kl, vl, 2, LF_ERR_UNSUPPORTED, "'layer_types[1]' is 'sliding_attention'", "full_attention");
    const char *km[] = {"model_type", "mlp_bias"};
    cJSON *vm[] = {cJSON_CreateString("qwen3"), cJSON_CreateTrue()};
    config_cases(km, vm, 2, LF_ERR_UNSUPPORTED, "'mlp_bias' is true, but Qwen3ForCausalLM has no such biases", NULL);
    /* Phi-3: its 128k variants' longrope (by the type's name, or yarn/su that Phi3Config reads as it) */
    const char *kr[] = {"model_type", "rope_parameters", "rope_scaling"};
    cJSON *vr[] = {cJSON_CreateString("phi3"), NULL,
                   obj2("rope_type", cJSON_CreateString("longrope"), "short_factor", cJSON_CreateArray())};
    config_cases(kr, vr, 3, LF_ERR_UNSUPPORTED, "'rope_scaling.rope_type' is 'longrope'", NULL);
    cJSON *vy[] = {cJSON_CreateString("phi3"), NULL,
                   obj2("rope_type", cJSON_CreateString("yarn"), "factor", cJSON_CreateNumber(4))};
    config_cases(kr, vy, 3, LF_ERR_UNSUPPORTED, "RoPE type 'yarn'", "Phi3ForCausalLM reads it as 'longrope'");
    const char *kd[] = {"model_type", "resid_pdrop"};
    cJSON *vd[] = {cJSON_CreateString("phi3"), cJSON_CreateNumber(0.1)};
    config_cases(kd, vd, 2, LF_ERR_UNSUPPORTED, "'resid_pdrop' is 0.1", "attention dropout only");
    const char *ke[] = {"model_type", "embd_pdrop"};
    cJSON *ve[] = {cJSON_CreateString("phi3"), cJSON_CreateNumber(0.2)};
    config_cases(ke, ve, 2, LF_ERR_UNSUPPORTED, "'embd_pdrop' is 0.2", NULL);
    const char *ka[] = {"model_type", "attention_bias"};
    cJSON *va[] = {cJSON_CreateString("phi3"), cJSON_CreateTrue()};
    config_cases(ka, va, 2, LF_ERR_UNSUPPORTED, "Phi3ForCausalLM has no such biases", NULL);
}

/* Edits that must still map, and what they map to. */
static lf_model_config config_after(const char **keys, cJSON **values, int n) {
    char *dir = copy_fixture();
    for (int i = 0; i < n; i++) {
        g_key = keys[i];
        g_value = values[i];
        edit_json(dir, "config.json", values[i] ? edit_set : edit_del);
    }
    lf_hf_model *h = NULL;
    LF_ASSERT_OK(lf_hf_open(&h, dir));
    lf_model_config c;
    LF_ASSERT_OK(lf_hf_model_config(h, &c));
    lf_hf_close(h);
    done(dir);
    return c;
}

static void test_config_variants(void **state) {
    (void)state;
    /* transformers 4.x spelling: rope_theta and rope_scaling at the top level */
    const char *k1[] = {"rope_parameters", "rope_theta", "rope_scaling"};
    cJSON *v1[] = {NULL, cJSON_CreateNumber(123456.0), cJSON_CreateNull()};
    lf_model_config c = config_after(k1, v1, 3);
    assert_true(c.rope_theta == 123456.0f);
    assert_int_equal(c.n_embd, 48);
    assert_int_equal(c.n_kv_head, 2);

    /* defaults for what a config may leave out */
    const char *k2[] = {"num_key_value_heads", "tie_word_embeddings", "rms_norm_eps", "head_dim", "hidden_act"};
    cJSON *v2[] = {cJSON_CreateNull(), NULL, NULL, cJSON_CreateNull(), NULL};
    c = config_after(k2, v2, 5);
    assert_int_equal(c.n_kv_head, 6);
    assert_int_equal(c.tie_embeddings, 0);
    assert_true(c.norm_eps == 1e-6f);
    assert_true(c.rope_theta == 500000.0f);

    const char *k3[] = {"tie_word_embeddings"};
    cJSON *v3[] = {cJSON_CreateTrue()};
    c = config_after(k3, v3, 1);
    assert_int_equal(c.tie_embeddings, 1);

    /* Qwen3: q/k norms; head_dim defaults to Qwen3Config's 128; attention_bias is q/k/v/o */
    const char *kq[] = {"model_type", "head_dim", "attention_bias"};
    cJSON *vq[] = {cJSON_CreateString("qwen3"), NULL, cJSON_CreateTrue()};
    c = config_after(kq, vq, 3);
    assert_true(c.qk_norm && !c.fused_proj && c.head_dim == 128 && c.bias && c.out_bias && !c.mlp_bias);
    /* Phi-3: fused tensor names, its sliding_window kept, no biases */
    const char *kp[] = {"model_type", "sliding_window"};
    cJSON *vp[] = {cJSON_CreateString("phi3"), cJSON_CreateNumber(2047)};
    c = config_after(kp, vp, 2);
    assert_true(c.fused_proj && !c.qk_norm && c.sliding_window == 2047 && !c.bias && !c.mlp_bias);

    /* head_dim other than hidden/heads; Llama's attention_bias (q/k/v/o) and mlp_bias */
    const char *kh[] = {"head_dim", "attention_bias", "mlp_bias"};
    cJSON *vh[] = {cJSON_CreateNumber(16), cJSON_CreateTrue(), cJSON_CreateTrue()};
    c = config_after(kh, vh, 3);
    assert_int_equal(c.head_dim, 16);
    assert_true(c.bias && c.out_bias && c.mlp_bias);
    /* hidden_size not divisible by the heads is fine with an explicit head_dim */
    const char *kd[] = {"hidden_size"};
    cJSON *vd[] = {cJSON_CreateNumber(50)};
    c = config_after(kd, vd, 1);
    assert_int_equal(c.head_dim, 8);
    const char *kd2[] = {"hidden_size", "head_dim"};
    cJSON *vd2[] = {cJSON_CreateNumber(48), cJSON_CreateNumber(8)}; /* = hidden/heads: kept as the default */
    c = config_after(kd2, vd2, 2);
    assert_int_equal(c.head_dim, 0);

    /* RoPE scaling, both spellings; rope_scaling wins over rope_parameters as in transformers */
    cJSON *l3 = obj2("rope_type", cJSON_CreateString("llama3"), "factor", cJSON_CreateNumber(8));
    cJSON_AddNumberToObject(l3, "low_freq_factor", 1);
    cJSON_AddNumberToObject(l3, "high_freq_factor", 4);
    cJSON_AddNumberToObject(l3, "rope_theta", 500000);
    const char *kr[] = {"rope_parameters"};
    cJSON *vr[] = {l3};
    c = config_after(kr, vr, 1);
    assert_int_equal(c.rope.type, LF_ROPE_LLAMA3);
    assert_true(c.rope.factor == 8 && c.rope.low_freq_factor == 1 && c.rope.high_freq_factor == 4);
    assert_int_equal(c.rope.original_max_position_embeddings, 64); /* absent: max_position_embeddings */
    cJSON *yn = obj2("type", cJSON_CreateString("yarn"), "factor", cJSON_CreateNumber(4));
    cJSON_AddNumberToObject(yn, "original_max_position_embeddings", 16);
    cJSON_AddFalseToObject(yn, "truncate");
    const char *ky[] = {"rope_scaling", "rope_theta"};
    cJSON *vy[] = {yn, cJSON_CreateNumber(500000)};
    c = config_after(ky, vy, 2);
    assert_int_equal(c.rope.type, LF_ROPE_YARN);
    assert_int_equal(c.rope.original_max_position_embeddings, 16);
    assert_int_equal(c.rope.max_position_embeddings, 64);
    assert_int_equal(c.rope.no_truncate, 1);
    const char *kn[] = {"rope_scaling", "rope_theta"};
    cJSON *vn[] = {obj2("type", cJSON_CreateString("dynamic"), "factor", cJSON_CreateNumber(2)),
                   cJSON_CreateNumber(500000)};
    c = config_after(kn, vn, 2);
    assert_int_equal(c.rope.type, LF_ROPE_DYNAMIC);
    assert_int_equal(c.rope.max_position_embeddings, 64);

    /* mistral: a llama that keeps its sliding window; a block_size beyond the window is
     * valid (windowed attention, issue 32) whatever sets it: the HF maximum, or a user's
     * block_size over a window equal to that maximum */
    const char *k4[] = {"model_type", "sliding_window"};
    cJSON *v4[] = {cJSON_CreateString("mistral"), cJSON_CreateNull()};
    c = config_after(k4, v4, 2);
    assert_int_equal(c.arch, LF_ARCH_LLAMA);
    assert_int_equal(c.n_kv_head, 2);
    assert_int_equal(c.sliding_window, 0);
    cJSON *v5[] = {cJSON_CreateString("mistral"), cJSON_CreateNumber(64)};
    c = config_after(k4, v5, 2);
    assert_int_equal(c.arch, LF_ARCH_LLAMA);
    assert_int_equal(c.sliding_window, 64);
    assert_int_equal(c.block_size, 64);
    LF_ASSERT_OK(lf_model_config_validate(&c));
    c.block_size = 128; /* --model.block_size=128 */
    LF_ASSERT_OK(lf_model_config_validate(&c));
    char hfj[2048];
    c.block_size = 64;
    assert_true(lf_model_hf_config_json(&c, hfj, sizeof hfj) > 0); /* exported as Mistral, with its window */
    assert_non_null(strstr(hfj, "\"MistralForCausalLM\""));
    assert_non_null(strstr(hfj, "\"sliding_window\": 64"));
    assert_null(strstr(hfj, "LlamaForCausalLM"));
    cJSON *v6w[] = {cJSON_CreateString("mistral"), cJSON_CreateNumber(32)}; /* shorter than max_position_embeddings */
    c = config_after(k4, v6w, 2);
    assert_int_equal(c.sliding_window, 32);
    assert_int_equal(c.block_size, 64); /* the context is max_position_embeddings, not the window */
    LF_ASSERT_OK(lf_model_config_validate(&c));
    cJSON *v4n[] = {cJSON_CreateString("mistral"), cJSON_CreateNull()}; /* (each value goes into one edit) */
    c = config_after(k4, v4n, 2);                                       /* no window: Llama's export, as before */
    assert_true(lf_model_hf_config_json(&c, hfj, sizeof hfj) > 0);
    assert_non_null(strstr(hfj, "\"LlamaForCausalLM\""));

    /* qwen2: a llama with q/k/v biases (attention_bias is not a Qwen2 key and is ignored);
     * a sliding window in use is refused */
    const char *k6[] = {"model_type", "attention_bias"};
    cJSON *v6[] = {cJSON_CreateString("qwen2"), cJSON_CreateTrue()};
    c = config_after(k6, v6, 2);
    assert_int_equal(c.arch, LF_ARCH_LLAMA);
    assert_int_equal(c.bias, 1);
    const char *k7[] = {"model_type"};
    cJSON *v7[] = {cJSON_CreateString("llama")};
    c = config_after(k7, v7, 1);
    assert_int_equal(c.bias, 0);
    char *dir = copy_fixture();
    g_key = "model_type";
    g_value = cJSON_CreateString("qwen2");
    edit_json(dir, "config.json", edit_set);
    g_key = "use_sliding_window";
    g_value = cJSON_CreateTrue();
    edit_json(dir, "config.json", edit_set);
    expect_config_fails(dir, LF_ERR_UNSUPPORTED, "'use_sliding_window' is true", NULL);
    done(dir);
}

/* GPT-2, as llmforge's own checkpoints write config.json. */
static void test_gpt2_config(void **state) {
    (void)state;
    static const char
        *cfg = "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"vocab_size\": 65,"
               " \"n_positions\": 32, \"n_ctx\": 32, \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4, \"n_inner\": null,"
               " \"activation_function\": \"gelu_new\", \"layer_norm_epsilon\": 1e-05, \"tie_word_embeddings\": true}";
    char *dir = lf_test_tmpdir();
    assert_non_null(dir);
    const float v[4] = {1, 2, 3, 4};
    lf_st_tensor t =
        {.name = "wte.weight", .dtype = LF_ST_F32, .ndim = 2, .shape = {2, 2}, .numel = 4, .nbytes = 16, .data = v};
    char *st = path2(dir, "model.safetensors"), *cp = path2(dir, "config.json");
    LF_ASSERT_OK(lf_safetensors_write(st, &t, 1, NULL, 0));
    LF_ASSERT_OK(lf_file_write_all(cp, cfg, strlen(cfg)));
    lf_hf_model *h = NULL;
    LF_ASSERT_OK(lf_hf_open(&h, dir));
    assert_string_equal(lf_hf_model_type(h), "gpt2");
    lf_model_config c;
    LF_ASSERT_OK(lf_hf_model_config(h, &c));
    assert_int_equal(c.arch, LF_ARCH_GPT2);
    assert_int_equal(c.norm, LF_NORM_LAYERNORM);
    assert_int_equal(c.n_embd, 64);
    assert_int_equal(c.n_layer, 2);
    assert_int_equal(c.n_head, 4);
    assert_int_equal(c.n_kv_head, 4);
    assert_int_equal(c.block_size, 32);
    assert_int_equal(c.vocab_size, 65);
    assert_int_equal(c.ffn_hidden, 0);
    assert_int_equal(c.bias, 1);
    assert_int_equal(c.tie_embeddings, 1);
    assert_true(c.norm_eps == 1e-5f);
    float got[4];
    LF_ASSERT_OK(lf_hf_read_f32(h, "wte.weight", got, 4));
    assert_memory_equal(got, v, sizeof v);
    lf_hf_close(h);

    /* refused by their config.json names, not the model.* keys they map to */
    g_key = "n_inner";
    g_value = cJSON_CreateNumber(100);
    edit_json(dir, "config.json", edit_set);
    expect_config_fails(dir, LF_ERR_UNSUPPORTED, "'n_inner' 100 is not supported", NULL);
    assert_null(strstr(lf_last_error(), "model."));
    g_key = "n_inner";
    g_value = cJSON_CreateNumber(256); /* 4 * n_embd: the one width llmforge's gpt2 has */
    edit_json(dir, "config.json", edit_set);
    g_key = "layer_norm_epsilon";
    g_value = cJSON_CreateNumber(1e-6);
    edit_json(dir, "config.json", edit_set);
    expect_config_fails(dir, LF_ERR_UNSUPPORTED, "'layer_norm_epsilon' 1e-06 is not supported", NULL);
    assert_null(strstr(lf_last_error(), "model."));
    g_key = "layer_norm_epsilon";
    g_value = cJSON_CreateNumber(1e-5);
    edit_json(dir, "config.json", edit_set);
    g_key = "activation_function";
    g_value = cJSON_CreateString("relu");
    edit_json(dir, "config.json", edit_set);
    expect_config_fails(dir, LF_ERR_UNSUPPORTED, "'activation_function'", "relu");
    g_key = "activation_function";
    g_value = cJSON_CreateString("gelu_new");
    edit_json(dir, "config.json", edit_set);
    g_key = "tie_word_embeddings";
    g_value = cJSON_CreateFalse();
    edit_json(dir, "config.json", edit_set);
    expect_config_fails(dir, LF_ERR_UNSUPPORTED, "'tie_word_embeddings' is false", NULL);
    g_key = "n_positions";
    edit_json(dir, "config.json", edit_del);
    expect_config_fails(dir, LF_ERR_CONFIG, "'n_positions' missing", NULL);
    free(st);
    free(cp);
    done(dir);
}

/* Every allocation lf_hf_open makes through lf_alloc fails once, in turn. */
static void test_alloc_failures(void **state) {
    (void)state;
    int failures = 0;
    for (long k = 0; k < 10000; k++) {
        lf_alloc_fail_after(k);
        lf_hf_model *h = (lf_hf_model *)(uintptr_t)1;
        lf_status s = lf_hf_open(&h, FIXTURE);
        lf_alloc_fail_after(-1);
        if (s == LF_OK) {
            assert_non_null(h);
            lf_hf_close(h);
            break;
        }
        assert_null(h);
        assert_int_equal(s, LF_ERR_NOMEM);
        failures++;
    }
    assert_true(failures >= 5); /* handle, paths, config text, shard table, entries */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_config),     cmocka_unit_test(test_fixture_tensors),
        cmocka_unit_test(test_single_file_layout), cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_missing_shard),      cmocka_unit_test(test_index_names_absent_tensor),
        cmocka_unit_test(test_index_wrong_shard),  cmocka_unit_test(test_tensor_in_two_shards),
        cmocka_unit_test(test_bad_index),          cmocka_unit_test(test_truncated_shard),
        cmocka_unit_test(test_missing_files),      cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_config_variants),    cmocka_unit_test(test_gpt2_config),
        cmocka_unit_test(test_family_refusals),    cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
