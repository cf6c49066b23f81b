/* The batch sampler: random rows (nanoGPT's randint(N - T)), the sequential
 * formula, x/y shifted by one, loss mask -> -1 targets, too-small splits, and
 * windows crossing shard boundaries (including an empty shard and a u16/u32
 * mix of masked and unmasked shards), all against a naive reference. */
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/data.h"

typedef struct split_def {
    int n_shards;
    const size_t *sizes;  /* (n_shards) tokens per shard */
    const int *masked;    /* (n_shards) 1: the shard carries a mask; NULL: none do */
} split_def;

/* The concatenated contents of one split, as the test expects to read it. */
typedef struct ref_split {
    size_t n;
    uint32_t *tok;
    uint8_t *mask;
} ref_split;

typedef uint32_t (*tok_fn)(size_t p, uint32_t vocab);
static uint32_t tok_identity(size_t p, uint32_t vocab) { return (uint32_t)(p % vocab); }
static uint32_t tok_random(size_t p, uint32_t vocab) { return (uint32_t)(lf_rng_u64(9, LF_RNG_TEST, p) % vocab); }
static uint32_t tok_high(size_t p, uint32_t vocab) { return (uint32_t)(65536 + p) % vocab; }

/* Write dir/<name>_<k>.bin for every shard of the split; fill ref; add the split to the manifest. */
static void make_split(const char *dir, const char *name, const split_def *def, uint32_t vocab, tok_fn fn,
                       ref_split *ref, cJSON *splits) {
    size_t total = 0;
    for (int k = 0; k < def->n_shards; k++) total += def->sizes[k];
    ref->n = total;
    ref->tok = malloc(total * sizeof *ref->tok + 4);
    ref->mask = malloc(total + 1);
    cJSON *js = cJSON_AddObjectToObject(splits, name);
    cJSON *shards = cJSON_AddArrayToObject(js, "shards");
    cJSON_AddNumberToObject(js, "tokens", (double)total);
    size_t p = 0;
    for (int k = 0; k < def->n_shards; k++) {
        size_t n = def->sizes[k];
        int masked = def->masked && def->masked[k];
        for (size_t i = 0; i < n; i++) {
            ref->tok[p + i] = fn(p + i, vocab);
            ref->mask[p + i] = masked ? (uint8_t)(lf_rng_u64(5, LF_RNG_TEST, p + i) % 4 != 0) : 1;
        }
        char file[64], path[1024];
        snprintf(file, sizeof file, "%s_%d.bin", name, k);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        LF_ASSERT_OK(lf_shard_write(path, ref->tok + p, masked ? ref->mask + p : NULL, n, vocab));
        cJSON_AddItemToArray(shards, cJSON_CreateString(file));
        p += n;
    }
}

typedef struct fixture {
    char *dir;
    lf_dataset *d;
    ref_split train, val;
} fixture;

static void fx_make(fixture *f, uint32_t vocab, tok_fn fn, const split_def *train, const split_def *val) {
    memset(f, 0, sizeof *f);
    f->dir = lf_test_tmpdir();
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", "llmforge-dataset");
    cJSON_AddNumberToObject(m, "version", 1);
    cJSON *tok = cJSON_AddObjectToObject(m, "tokenizer");
    cJSON_AddStringToObject(tok, "spec", "char:vocab.json"); /* no sha256: the file is not needed */
    cJSON_AddNumberToObject(m, "vocab_size", vocab);
    cJSON *splits = cJSON_AddObjectToObject(m, "splits");
    make_split(f->dir, "train", train, vocab, fn, &f->train, splits);
    if (val) make_split(f->dir, "val", val, vocab, fn, &f->val, splits);
    char *s = cJSON_Print(m);
    char path[1024];
    snprintf(path, sizeof path, "%s/dataset.json", f->dir);
    LF_ASSERT_OK(lf_file_write_all(path, s, strlen(s)));
    cJSON_free(s);
    cJSON_Delete(m);
    LF_ASSERT_OK(lf_dataset_open(&f->d, f->dir));
}

static void fx_free(fixture *f) {
    lf_dataset_close(f->d);
    free(f->train.tok);
    free(f->train.mask);
    free(f->val.tok);
    free(f->val.mask);
    lf_test_rmrf(f->dir);
    free(f->dir);
}

static uint64_t ref_start(lf_sampling sampling, uint64_t seed, uint32_t purpose, uint64_t row, uint64_t N, uint64_t T) {
    if (sampling == LF_SAMPLING_RANDOM) return lf_rng_u64(seed, purpose, row) % (N - T);
    return (uint64_t)(((unsigned __int128)row * T) % (N - T - 1));
}

/* Fetch a batch and compare it, element by element, with the reference. */
static void check_batch(const fixture *f, lf_split split, lf_sampling sampling, uint64_t seed, uint32_t purpose,
                        uint64_t first_row, int B, int T) {
    const ref_split *r = split == LF_SPLIT_TRAIN ? &f->train : &f->val;
    int32_t *x = malloc((size_t)B * T * sizeof *x), *y = malloc((size_t)B * T * sizeof *y);
    LF_ASSERT_OK(lf_dataset_get_batch(f->d, split, sampling, seed, purpose, first_row, B, T, x, y));
    for (int b = 0; b < B; b++) {
        uint64_t s = ref_start(sampling, seed, purpose, first_row + (uint64_t)b, r->n, (uint64_t)T);
        assert_true(s + (uint64_t)T + 1 <= r->n);
        for (int t = 0; t < T; t++) {
            size_t p = (size_t)s + (size_t)t;
            int32_t wx = (int32_t)r->tok[p];
            int32_t wy = r->mask[p + 1] ? (int32_t)r->tok[p + 1] : -1;
            if (x[(size_t)b * T + t] != wx || y[(size_t)b * T + t] != wy)
                fail_msg("row %llu (start %llu) t=%d: got x=%d y=%d, want x=%d y=%d", (unsigned long long)(first_row + b),
                         (unsigned long long)s, t, x[(size_t)b * T + t], y[(size_t)b * T + t], wx, wy);
        }
    }
    free(x);
    free(y);
}

/* ---------------------------------------------------------------- tests */
static void test_random_rows(void **state) {
    (void)state;
    const size_t sizes[1] = {5000}, vsizes[1] = {700};
    split_def tr = {1, sizes, NULL}, va = {1, vsizes, NULL};
    fixture f;
    fx_make(&f, 5000, tok_identity, &tr, &va); /* token = position: x[b][0] is the start */
    const int B = 8, T = 64;
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1337, LF_RNG_DATA, 100, B, T);
    check_batch(&f, LF_SPLIT_VAL, LF_SAMPLING_RANDOM, 1337, LF_RNG_EVAL, 0, B, T);

    int32_t x[8 * 64], y[8 * 64], x2[8 * 64], y2[8 * 64];
    /* deterministic; row r is the same whatever batch it falls in */
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1337, LF_RNG_DATA, 100, B, T, x, y));
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1337, LF_RNG_DATA, 100, B, T, x2, y2));
    assert_memory_equal(x, x2, sizeof x);
    assert_memory_equal(y, y2, sizeof y);
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1337, LF_RNG_DATA, 103, 1, T, x2, y2));
    assert_memory_equal(x + 3 * T, x2, (size_t)T * sizeof *x);
    /* x/y shifted by one */
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++) assert_int_equal(y[b * T + t], x[b * T + t + 1]);
    /* another seed, another batch */
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1338, LF_RNG_DATA, 100, B, T, x2, y2));
    assert_memory_not_equal(x, x2, sizeof x);

    /* every start in [0, N-T), and the range is covered */
    int32_t xs[64], ys[64];
    int32_t lo = INT32_MAX, hi = -1;
    for (uint64_t r = 0; r < 3000; r++) {
        LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 7, LF_RNG_DATA, r, 1, T, xs, ys));
        assert_true(xs[0] >= 0 && xs[0] < 5000 - T);
        if (xs[0] < lo) lo = xs[0];
        if (xs[0] > hi) hi = xs[0];
    }
    assert_true(lo < 20);
    assert_true(hi > 5000 - T - 20);
    fx_free(&f);
}

static void test_random_tokens_u16(void **state) {
    (void)state;
    const size_t sizes[1] = {3000};
    split_def tr = {1, sizes, NULL};
    fixture f;
    fx_make(&f, 65, tok_random, &tr, NULL);
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 42, LF_RNG_DATA, 0, 12, 256);
    fx_free(&f);
}

static void test_sequential(void **state) {
    (void)state;
    const size_t sizes[1] = {1000};
    split_def tr = {1, sizes, NULL};
    fixture f;
    fx_make(&f, 1000, tok_identity, &tr, NULL);
    const int T = 64, B = 40;
    int32_t x[40 * 64], y[40 * 64];
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 123, LF_RNG_EVAL, 0, B, T, x, y));
    for (int b = 0; b < B; b++) {
        int32_t s = (int32_t)(((uint64_t)b * T) % (1000 - 64 - 1)); /* (i*T) mod (N-T-1) */
        assert_int_equal(x[b * T], s);
        assert_int_equal(y[b * T], s + 1);
        assert_int_equal(x[b * T + T - 1], s + T - 1);
        assert_int_equal(y[b * T + T - 1], s + T);
    }
    /* the seed does not matter */
    int32_t x2[40 * 64], y2[40 * 64];
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 999, LF_RNG_DATA, 0, B, T, x2, y2));
    assert_memory_equal(x, x2, sizeof x);
    /* row * T beyond 2^64 is still computed exactly */
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, 0, (1ull << 62) + 3, 5, T);
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, 0, UINT64_MAX - 4, 5, T);
    fx_free(&f);
}

static void test_mask(void **state) {
    (void)state;
    const size_t sizes[1] = {2000};
    const int masked[1] = {1};
    split_def tr = {1, sizes, masked};
    fixture f;
    fx_make(&f, 2000, tok_identity, &tr, NULL);
    const int B = 16, T = 32;
    int32_t x[16 * 32], y[16 * 32];
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 3, LF_RNG_DATA, 0, B, T, x, y));
    int n_masked = 0;
    for (int i = 0; i < B * T; i++) {
        assert_true(x[i] >= 0); /* inputs are never masked */
        int32_t pos = x[i] + 1; /* identity tokens: the target's position */
        if (f.train.mask[pos]) {
            assert_int_equal(y[i], pos);
        } else {
            assert_int_equal(y[i], -1);
            n_masked++;
        }
    }
    assert_true(n_masked > 0);
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, 0, 0, B, T);
    fx_free(&f);
}

static void test_split_too_small(void **state) {
    (void)state;
    const size_t sizes[1] = {500}, vsizes[1] = {40};
    split_def tr = {1, sizes, NULL}, va = {1, vsizes, NULL};
    fixture f;
    fx_make(&f, 500, tok_identity, &tr, &va);
    int32_t x[64], y[64];
    assert_int_equal(lf_dataset_get_batch(f.d, LF_SPLIT_VAL, LF_SAMPLING_RANDOM, 1, LF_RNG_EVAL, 0, 1, 64, x, y),
                     LF_ERR_RANGE);
    char want[1200];
    snprintf(want, sizeof want, "dataset '%s': split 'val' has 40 tokens, fewer than block_size+2 = 66", f.dir);
    assert_string_equal(lf_last_error(), want);
    assert_int_equal(lf_dataset_get_batch(f.d, LF_SPLIT_VAL, LF_SAMPLING_SEQUENTIAL, 1, LF_RNG_EVAL, 0, 1, 39, x, y),
                     LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("block_size+2 = 41");
    /* exactly T + 2 tokens is enough */
    for (uint64_t r = 0; r < 20; r++) {
        LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_VAL, LF_SAMPLING_RANDOM, 1, LF_RNG_EVAL, r, 1, 38, x, y));
        assert_true(x[0] == 0 || x[0] == 1);
        LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_VAL, LF_SAMPLING_SEQUENTIAL, 1, LF_RNG_EVAL, r, 1, 38, x, y));
        assert_int_equal(x[0], 0);
        assert_int_equal(y[37], 38);
    }
    fx_free(&f);
}

static void test_shard_boundaries(void **state) {
    (void)state;
    /* 100 | empty | 37 (masked) | 300 | 1 | 62 (masked) */
    const size_t sizes[6] = {100, 0, 37, 300, 1, 62};
    const int masked[6] = {0, 0, 1, 0, 0, 1};
    split_def tr = {6, sizes, masked};
    fixture f;
    fx_make(&f, 1000, tok_identity, &tr, NULL);
    assert_int_equal(lf_dataset_num_tokens(f.d, LF_SPLIT_TRAIN), 500);
    /* sequential rows step through every boundary */
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, 0, 0, 40, 16);
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, 0, 0, 10, 64);
    /* a window wider than several shards */
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, 0, 0, 4, 450);
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 11, LF_RNG_DATA, 0, 64, 150);
    /* a window that starts exactly on a boundary, and one ending on the last token */
    int32_t x[300], y[300];
    const uint64_t N = 500;
    for (uint64_t r = 0; r < 5000; r++) {
        uint64_t s = lf_rng_u64(5, LF_RNG_DATA, r) % (N - 37);
        if (s != 100 && s != 137 && s != N - 37 - 1) continue;
        LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 5, LF_RNG_DATA, r, 1, 37, x, y));
        assert_int_equal(x[0], (int32_t)s);
    }
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 5, LF_RNG_DATA, 0, 300, 37);
    fx_free(&f);
}

static void test_u32_tokens(void **state) {
    (void)state;
    const size_t sizes[3] = {1000, 2000, 500};
    const int masked[3] = {1, 0, 1};
    split_def tr = {3, sizes, masked};
    fixture f;
    fx_make(&f, 100000, tok_high, &tr, NULL); /* ids above 65535 */
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1, LF_RNG_DATA, 0, 32, 128);
    check_batch(&f, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 1, LF_RNG_DATA, 0, 32, 128);
    int32_t x[8], y[8];
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 1, LF_RNG_DATA, 0, 1, 8, x, y));
    assert_int_equal(x[0], 65536);
    fx_free(&f);
}

static void test_bad_args(void **state) {
    (void)state;
    const size_t sizes[1] = {100};
    split_def tr = {1, sizes, NULL};
    fixture f;
    fx_make(&f, 100, tok_identity, &tr, NULL);
    int32_t x[16], y[16];
    assert_int_equal(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1, 2, 0, 0, 8, x, y), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1, 2, 0, 1, 0, x, y), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1, 2, 0, 1, -4, x, y),
                     LF_ERR_INVALID_ARG);
    assert_int_equal(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1, 2, 0, 1, 8, NULL, y),
                     LF_ERR_INVALID_ARG);
    assert_int_equal(lf_dataset_get_batch(NULL, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 1, 2, 0, 1, 8, x, y),
                     LF_ERR_INVALID_ARG);
    assert_int_equal(lf_dataset_get_batch(f.d, (lf_split)7, LF_SAMPLING_RANDOM, 1, 2, 0, 1, 8, x, y), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, (lf_sampling)9, 1, 2, 0, 1, 8, x, y), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_dataset_num_tokens(f.d, (lf_split)7), 0);
    assert_int_equal(lf_dataset_num_tokens(NULL, LF_SPLIT_TRAIN), 0);
    lf_dataset_close(NULL);
    fx_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_rows),
        cmocka_unit_test(test_random_tokens_u16),
        cmocka_unit_test(test_sequential),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_split_too_small),
        cmocka_unit_test(test_shard_boundaries),
        cmocka_unit_test(test_u32_tokens),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
