/* The training loader and the packed-epoch sampler:
 *  - prefetch depths 0, 1, 3 all give the batches the sampler gives for the
 *    rows ((s*accum + a)*world + r)*B + b, step after step;
 *  - opening at step s (a resume) gives exactly what step s of a fresh loader gave;
 *  - ranks read disjoint rows whose concatenation is the world-1 batch of W*B rows;
 *  - packed: each epoch visits every window once (a permutation), epochs and
 *    seeds shuffle differently, the same (seed, epoch) always the same way;
 *    ranks together cover an epoch without overlap;
 *  - an error in the thread reaches the caller with its message; bad options;
 *  - llm.c's shard files: read as shards and as a dataset directory, equal to
 *    the same tokens in llmforge's format; truncated/bad-version files refused. */
#include "test_util.h"
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "llmforge/data.h"

#define V 60000u /* large enough that token = position identifies a window */

typedef struct fx {
    char *dir;
    lf_dataset *d;
    size_t n;
} fx;

/* dataset of one train split holding tokens 0..n-1 (position = token), optional val */
static void fx_make(fx *f, size_t n) {
    f->dir = lf_test_tmpdir();
    f->n = n;
    uint32_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++) tok[i] = (uint32_t)i;
    char path[1024];
    snprintf(path, sizeof path, "%s/train.bin", f->dir);
    LF_ASSERT_OK(lf_shard_write(path, tok, NULL, n, V));
    free(tok);
    char js[512];
    snprintf(js, sizeof js,
             "{\"format\":\"llmforge-dataset\",\"version\":1,\"tokenizer\":{\"spec\":\"char:vocab.json\"},"
             "\"vocab_size\":%u,\"splits\":{\"train\":{\"shards\":[\"train.bin\"],\"tokens\":%zu}}}",
             V, n);
    snprintf(path, sizeof path, "%s/dataset.json", f->dir);
    LF_ASSERT_OK(lf_file_write_all(path, js, strlen(js)));
    LF_ASSERT_OK(lf_dataset_open(&f->d, f->dir));
}

static void fx_free(fx *f) {
    lf_dataset_close(f->d);
    lf_test_rmrf(f->dir);
    free(f->dir);
}

static lf_loader_opts opts(lf_sampling smp, int B, int T, int A, int rank, int world, int prefetch) {
    lf_loader_opts o = lf_loader_opts_default();
    o.sampling = smp;
    o.seed = 1234;
    o.micro_batch = B;
    o.block_size = T;
    o.accum = A;
    o.rank = rank;
    o.world = world;
    o.prefetch = prefetch;
    return o;
}

/* the loader's steps first..first+steps-1 against the sampler called row by row */
static void check_against_sampler(const fx *f, lf_sampling smp, int prefetch, uint64_t first, int steps) {
    const int B = 3, T = 8, A = 2;
    lf_loader_opts o = opts(smp, B, T, A, 0, 1, prefetch);
    lf_loader *l = NULL;
    LF_ASSERT_OK(lf_loader_open(&l, f->d, &o, first));
    size_t E = (size_t)A * B * T;
    int32_t *x = malloc(E * sizeof *x), *y = malloc(E * sizeof *y), rx[8], ry[8];
    for (int s = 0; s < steps; s++) {
        assert_int_equal(lf_loader_step(l), first + (uint64_t)s);
        double w = -1;
        LF_ASSERT_OK(lf_loader_next(l, x, y, &w));
        assert_true(w >= 0);
        for (int a = 0; a < A; a++)
            for (int b = 0; b < B; b++) {
                uint64_t row = (first + (uint64_t)s) * A * B + (uint64_t)a * B + (uint64_t)b; /* world 1 */
                assert_int_equal(lf_loader_row(&o, first + (uint64_t)s, a, b), row);
                LF_ASSERT_OK(lf_dataset_get_batch(f->d, LF_SPLIT_TRAIN, smp, 1234, LF_RNG_DATA, row, 1, T, rx, ry));
                assert_memory_equal(x + ((size_t)a * B + b) * T, rx, sizeof rx);
                assert_memory_equal(y + ((size_t)a * B + b) * T, ry, sizeof ry);
            }
    }
    assert_true(lf_loader_wait_total(l) >= 0);
    lf_loader_close(l);
    free(x);
    free(y);
}

static void test_prefetch_matches_sampler(void **state) {
    (void)state;
    fx f;
    fx_make(&f, 5000);
    const lf_sampling modes[] = {LF_SAMPLING_RANDOM, LF_SAMPLING_SEQUENTIAL, LF_SAMPLING_PACKED};
    for (int m = 0; m < 3; m++)
        for (int depth = 0; depth <= 3; depth += (depth == 1 ? 2 : 1)) {
            check_against_sampler(&f, modes[m], depth, 0, 60);
            check_against_sampler(&f, modes[m], depth, 977, 10); /* a resume far in */
        }
    fx_free(&f);
}

/* Reading steps 0..19 in one go and 0..6 + a reopened loader at 7..19 are identical. */
static void test_resume_is_exact(void **state) {
    (void)state;
    fx f;
    fx_make(&f, 3000);
    const int B = 2, T = 16, A = 3, S = 20, cut = 7;
    size_t E = (size_t)A * B * T;
    int32_t *all_x = malloc(S * E * sizeof(int32_t)), *all_y = malloc(S * E * sizeof(int32_t));
    int32_t *x = malloc(E * sizeof *x), *y = malloc(E * sizeof *y);
    lf_loader_opts o = opts(LF_SAMPLING_PACKED, B, T, A, 0, 1, 2);
    lf_loader *l = NULL;
    LF_ASSERT_OK(lf_loader_open(&l, f.d, &o, 0));
    for (int s = 0; s < S; s++) LF_ASSERT_OK(lf_loader_next(l, all_x + s * E, all_y + s * E, NULL));
    lf_loader_close(l);
    LF_ASSERT_OK(lf_loader_open(&l, f.d, &o, 0));
    for (int s = 0; s < cut; s++) LF_ASSERT_OK(lf_loader_next(l, x, y, NULL));
    uint64_t cursor = lf_loader_step(l);
    assert_int_equal(cursor, cut);
    lf_loader_close(l); /* with slots still filled ahead: closing must not hang */
    LF_ASSERT_OK(lf_loader_open(&l, f.d, &o, cursor));
    for (int s = cut; s < S; s++) {
        LF_ASSERT_OK(lf_loader_next(l, x, y, NULL));
        assert_memory_equal(x, all_x + s * E, E * sizeof(int32_t));
        assert_memory_equal(y, all_y + s * E, E * sizeof(int32_t));
    }
    lf_loader_close(l);
    free(all_x);
    free(all_y);
    free(x);
    free(y);
    fx_free(&f);
}

/* Ranks 0..W-1 with B rows each = world 1 with W*B rows; packed windows never repeat across ranks. */
static void test_ranks_disjoint(void **state) {
    (void)state;
    fx f;
    fx_make(&f, 4001); /* (4001-1)/8 = 500 windows */
    const int B = 2, T = 8, W = 3, A = 2;
    const lf_sampling modes[] = {LF_SAMPLING_RANDOM, LF_SAMPLING_PACKED};
    for (int m = 0; m < 2; m++) {
        lf_loader *one = NULL, *rk[3] = {0};
        lf_loader_opts o1 = opts(modes[m], W * B, T, A, 0, 1, 0);
        LF_ASSERT_OK(lf_loader_open(&one, f.d, &o1, 5));
        for (int r = 0; r < W; r++) {
            lf_loader_opts o = opts(modes[m], B, T, A, r, W, 2);
            LF_ASSERT_OK(lf_loader_open(&rk[r], f.d, &o, 5));
        }
        int32_t x1[2 * 6 * 8], y1[2 * 6 * 8], xr[3][2 * 2 * 8], yr[3][2 * 2 * 8];
        for (int s = 0; s < 4; s++) {
            LF_ASSERT_OK(lf_loader_next(one, x1, y1, NULL));
            for (int r = 0; r < W; r++) LF_ASSERT_OK(lf_loader_next(rk[r], xr[r], yr[r], NULL));
            for (int a = 0; a < A; a++)
                for (int r = 0; r < W; r++) {
                    /* micro-batch a of the world-1 loader holds rank 0's rows, then rank 1's, ... */
                    assert_memory_equal(x1 + ((size_t)a * W * B + (size_t)r * B) * T, xr[r] + (size_t)a * B * T,
                                        (size_t)B * T * sizeof(int32_t));
                    assert_memory_equal(y1 + ((size_t)a * W * B + (size_t)r * B) * T, yr[r] + (size_t)a * B * T,
                                        (size_t)B * T * sizeof(int32_t));
                }
        }
        lf_loader_close(one);
        for (int r = 0; r < W; r++) lf_loader_close(rk[r]);
    }
    /* packed: one epoch = 500 windows; steps of W*A*B = 12 rows; the first 41 steps (492 rows)
     * of all ranks together never read a window twice */
    {
        static unsigned char seen[500];
        memset(seen, 0, sizeof seen);
        for (int r = 0; r < W; r++) {
            lf_loader_opts o = opts(LF_SAMPLING_PACKED, B, T, A, r, W, 1);
            lf_loader *l = NULL;
            LF_ASSERT_OK(lf_loader_open(&l, f.d, &o, 0));
            int32_t x[2 * 2 * 8], y[2 * 2 * 8];
            for (int s = 0; s < 41; s++) {
                LF_ASSERT_OK(lf_loader_next(l, x, y, NULL));
                for (int k = 0; k < A * B; k++) {
                    int32_t start = x[k * T];
                    assert_int_equal(start % T, 0);
                    assert_int_equal(seen[start / T], 0);
                    seen[start / T] = 1;
                }
            }
            lf_loader_close(l);
        }
    }
    fx_free(&f);
}

static void test_packed_permutation(void **state) {
    (void)state;
    const uint64_t sizes[] = {1, 2, 3, 5, 64, 100, 1000, 4097};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint64_t n = sizes[k];
        unsigned char *seen = calloc(n, 1);
        uint64_t *order0 = malloc(n * sizeof *order0);
        for (uint64_t e = 0; e < 3; e++) {
            memset(seen, 0, n);
            int same_as_e0 = 1, identity = 1;
            for (uint64_t i = 0; i < n; i++) {
                uint64_t w = lf_dataset_packed_window(e * n + i, n, 77, LF_RNG_DATA);
                assert_true(w < n);
                assert_int_equal(seen[w], 0); /* a bijection */
                seen[w] = 1;
                assert_int_equal(lf_dataset_packed_window(e * n + i, n, 77, LF_RNG_DATA), w); /* pure */
                if (e == 0) order0[i] = w;
                same_as_e0 &= order0[i] == w;
                identity &= w == i;
            }
            if (n >= 64) {
                assert_false(identity); /* shuffled */
                if (e > 0) assert_false(same_as_e0); /* each epoch its own order */
            }
        }
        if (n >= 64) { /* another seed, another order */
            int same = 1;
            for (uint64_t i = 0; i < n; i++) same &= lf_dataset_packed_window(i, n, 78, LF_RNG_DATA) == order0[i];
            assert_false(same);
        }
        free(seen);
        free(order0);
    }
    /* huge counts stay O(1) and in range */
    uint64_t big = UINT64_C(1) << 40;
    for (uint64_t i = 0; i < 100; i++) assert_true(lf_dataset_packed_window(i * 7919, big, 1, 2) < big);
}

/* packed batches: inputs = window tokens, targets shifted by one, window-aligned */
static void test_packed_batches(void **state) {
    (void)state;
    fx f;
    fx_make(&f, 1001); /* (1001-1)/10 = 100 windows */
    assert_int_equal(lf_dataset_packed_windows(f.d, LF_SPLIT_TRAIN, 10), 100);
    assert_int_equal(lf_dataset_packed_windows(f.d, LF_SPLIT_VAL, 10), 0);
    int32_t x[100 * 10], y[100 * 10];
    LF_ASSERT_OK(lf_dataset_get_batch(f.d, LF_SPLIT_TRAIN, LF_SAMPLING_PACKED, 3, LF_RNG_DATA, 100, 100, 10, x, y));
    unsigned char seen[100] = {0};
    for (int r = 0; r < 100; r++) {
        int32_t s = x[r * 10];
        assert_int_equal(s % 10, 0);
        seen[s / 10]++;
        for (int t = 0; t < 10; t++) {
            assert_int_equal(x[r * 10 + t], s + t);
            assert_int_equal(y[r * 10 + t], s + t + 1);
        }
    }
    for (int w = 0; w < 100; w++) assert_int_equal(seen[w], 1); /* epoch 1 covers every window */
    /* epoch progress: 5 steps x 4 rows of 100 windows */
    lf_loader_opts o = opts(LF_SAMPLING_PACKED, 4, 10, 1, 0, 1, 0);
    lf_loader *l = NULL;
    LF_ASSERT_OK(lf_loader_open(&l, f.d, &o, 0));
    for (int s = 0; s < 5; s++) LF_ASSERT_OK(lf_loader_next(l, x, y, NULL));
    assert_true(fabs(lf_loader_epoch(l) - 0.2) < 1e-12);
    lf_loader_close(l);
    fx_free(&f);
}

static void test_bad_options_and_errors(void **state) {
    (void)state;
    fx f;
    fx_make(&f, 100);
    lf_loader *l = NULL;
    lf_loader_opts o = opts(LF_SAMPLING_RANDOM, 2, 8, 1, 2, 2, 1);
    assert_int_equal(lf_loader_open(&l, f.d, &o, 0), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("rank 2");
    assert_null(l);
    o = opts(LF_SAMPLING_RANDOM, 0, 8, 1, 0, 1, 1);
    assert_int_equal(lf_loader_open(&l, f.d, &o, 0), LF_ERR_INVALID_ARG);
    o = opts(LF_SAMPLING_RANDOM, 2, 8, 1, 0, 1, 65);
    assert_int_equal(lf_loader_open(&l, f.d, &o, 0), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("prefetch");
    o = opts(LF_SAMPLING_RANDOM, 2, 99, 1, 0, 1, 1); /* split of 100 tokens < T + 2 */
    assert_int_equal(lf_loader_open(&l, f.d, &o, 0), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("fewer than block_size+2");
    o = opts(LF_SAMPLING_RECORDS, 2, 8, 1, 0, 1, 1); /* no record index */
    assert_int_equal(lf_loader_open(&l, f.d, &o, 0), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("record index");
    o = opts(LF_SAMPLING_RANDOM, 2, 8, 1, 0, 1, 1);
    o.split = LF_SPLIT_VAL;
    assert_int_equal(lf_loader_open(&l, f.d, &o, 0), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("no split 'val'");
    fx_free(&f);
}

/* ---------------------------------------------------------------- llm.c files */
static void write_llmc(const char *path, int version, const uint32_t *tok, size_t n, long claim) {
    int32_t h[256] = {0};
    h[0] = 20240520;
    h[1] = version;
    h[2] = (int32_t)(claim >= 0 ? claim : (long)n);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(h, sizeof h, 1, fp), 1); /* little-endian host */
    for (size_t i = 0; i < n; i++) {
        if (version == 1) {
            uint16_t v = (uint16_t)tok[i];
            assert_int_equal(fwrite(&v, 2, 1, fp), 1);
        } else {
            assert_int_equal(fwrite(&tok[i], 4, 1, fp), 1);
        }
    }
    fclose(fp);
}

static void test_llmc_shards(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char path[1024];
    const size_t n = 3000;
    uint32_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++) tok[i] = (uint32_t)(lf_rng_u64(3, LF_RNG_TEST, i) % 50257);
    tok[17] = 50256;
    /* llm.c layout: name_val_000000.bin, name_train_000001.bin, name_train_000002.bin */
    snprintf(path, sizeof path, "%s/tiny_val_000000.bin", dir);
    write_llmc(path, 1, tok, 500, -1);
    snprintf(path, sizeof path, "%s/tiny_train_000001.bin", dir);
    write_llmc(path, 1, tok + 500, 1500, -1);
    snprintf(path, sizeof path, "%s/tiny_train_000002.bin", dir);
    write_llmc(path, 1, tok + 2000, 1000, -1);
    snprintf(path, sizeof path, "%s/README.txt", dir); /* other files are ignored */
    LF_ASSERT_OK(lf_file_write_all(path, "x", 1));

    lf_shard *s = NULL;
    snprintf(path, sizeof path, "%s/tiny_train_000001.bin", dir);
    LF_ASSERT_OK(lf_shard_open(&s, path, 1));
    assert_true(lf_shard_is_llmc(s));
    assert_int_equal(lf_shard_num_tokens(s), 1500);
    assert_false(lf_shard_has_mask(s));
    uint32_t mx = 0;
    for (size_t i = 0; i < 1500; i++) {
        assert_int_equal(lf_shard_token(s, i), tok[500 + i]);
        mx = tok[500 + i] > mx ? tok[500 + i] : mx;
    }
    assert_int_equal(lf_shard_vocab_size(s), mx + 1);
    lf_shard_close(s);

    lf_dataset *d = NULL;
    LF_ASSERT_OK(lf_dataset_open(&d, dir));
    assert_true(lf_dataset_is_llmc(d));
    assert_int_equal(lf_dataset_vocab_size(d), 50257);
    assert_int_equal(lf_dataset_eot(d), 50256);
    assert_null(lf_dataset_tokenizer_spec(d));
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_TRAIN), 2500);
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_VAL), 500);
    /* sequential rows cross the shard boundary at 1500: compare to the raw tokens */
    int32_t x[64 * 16], y[64 * 16];
    LF_ASSERT_OK(lf_dataset_get_batch(d, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, 0, 0, 64, 16, x, y));
    for (int r = 0; r < 64; r++)
        for (int t = 0; t < 16; t++) {
            size_t p = ((size_t)r * 16) % (2500 - 16 - 1);
            assert_int_equal(x[r * 16 + t], (int32_t)tok[500 + p + t]);
            assert_int_equal(y[r * 16 + t], (int32_t)tok[500 + p + t + 1]);
        }
    /* a tokenizer must have the dataset's vocab size */
    assert_int_equal(lf_dataset_set_tokenizer(d, "char:/nonexistent/vocab.json"), LF_ERR_NOT_FOUND);
    char gpt2[1200];
    snprintf(gpt2, sizeof gpt2, "gpt2:%s/data/gpt2", LF_SHARED_DIR);
    LF_ASSERT_OK(lf_dataset_set_tokenizer(d, gpt2));
    assert_string_equal(lf_dataset_tokenizer_spec(d), gpt2);
    LF_ASSERT_OK(lf_dataset_set_tokenizer(d, gpt2)); /* the same again is fine */
    lf_dataset_close(d);

    /* truncated file: header claims more than the file holds */
    snprintf(path, sizeof path, "%s/tiny_train_000002.bin", dir);
    write_llmc(path, 1, tok, 1000, 1001);
    assert_int_not_equal(lf_dataset_open(&d, dir), LF_OK);
    LF_ASSERT_ERR_CONTAINS("tiny_train_000002.bin");
    LF_ASSERT_ERR_CONTAINS("1001 tokens");
    assert_null(d);
    assert_int_equal(lf_shard_open(&s, path, 0), LF_ERR_FORMAT);
    /* unknown version */
    write_llmc(path, 7, tok, 10, -1);
    assert_int_equal(lf_shard_open(&s, path, 0), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("version 7");
    /* version 2 (u32) mixed with version 1 files */
    write_llmc(path, 2, tok, 1000, -1);
    LF_ASSERT_OK(lf_shard_open(&s, path, 0));
    assert_int_equal(lf_shard_token(s, 5), tok[5]);
    lf_shard_close(s);
    assert_int_equal(lf_dataset_open(&d, dir), LF_ERR_MISMATCH);
    LF_ASSERT_ERR_CONTAINS("version");
    /* only val files: no train split */
    lf_test_rmrf(dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/x_val.bin", dir);
    write_llmc(path, 1, tok, 100, -1);
    assert_int_equal(lf_dataset_open(&d, dir), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("train");
    /* no llm.c files and no dataset.json: the manifest is what is missing */
    snprintf(path, sizeof path, "%s/x_val.bin", dir);
    remove(path);
    assert_int_not_equal(lf_dataset_open(&d, dir), LF_OK);
    LF_ASSERT_ERR_CONTAINS("dataset.json");
    lf_test_rmrf(dir);
    free(dir);
    free(tok);
}

/* dataset.json's tokenizer.files: each GPT-2 file's SHA-256, checked at open */
static void test_gpt2_file_hashes(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char path[1024], js[2048];
    uint32_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint32_t)i * 500;
    snprintf(path, sizeof path, "%s/train.bin", dir);
    LF_ASSERT_OK(lf_shard_write(path, tok, NULL, 100, 50257));
    char enc[65], bpe[65];
    LF_ASSERT_OK(lf_sha256_file_hex(LF_SHARED_DIR "/data/gpt2/encoder.json", enc));
    LF_ASSERT_OK(lf_sha256_file_hex(LF_SHARED_DIR "/data/gpt2/vocab.bpe", bpe));
    for (int bad = 0; bad < 2; bad++) {
        if (bad) bpe[0] = bpe[0] == 'a' ? 'b' : 'a';
        snprintf(js, sizeof js,
                 "{\"format\":\"llmforge-dataset\",\"version\":1,\"tokenizer\":{\"spec\":\"gpt2:%s/data/gpt2\","
                 "\"files\":{\"encoder.json\":\"%s\",\"vocab.bpe\":\"%s\"}},\"vocab_size\":50257,"
                 "\"splits\":{\"train\":{\"shards\":[\"train.bin\"],\"tokens\":100}}}",
                 LF_SHARED_DIR, enc, bpe);
        snprintf(path, sizeof path, "%s/dataset.json", dir);
        LF_ASSERT_OK(lf_file_write_all(path, js, strlen(js)));
        lf_dataset *d = NULL;
        if (!bad) {
            LF_ASSERT_OK(lf_dataset_open(&d, dir));
            lf_dataset_close(d);
        } else {
            assert_int_equal(lf_dataset_open(&d, dir), LF_ERR_CHECKSUM);
            LF_ASSERT_ERR_CONTAINS("tokenizer.files.vocab.bpe");
            assert_null(d);
        }
    }
    lf_test_rmrf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefetch_matches_sampler), cmocka_unit_test(test_resume_is_exact),
        cmocka_unit_test(test_ranks_disjoint),           cmocka_unit_test(test_packed_permutation),
        cmocka_unit_test(test_packed_batches),           cmocka_unit_test(test_bad_options_and_errors),
        cmocka_unit_test(test_llmc_shards),              cmocka_unit_test(test_gpt2_file_hashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
