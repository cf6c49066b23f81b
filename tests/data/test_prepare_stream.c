/* Streaming output and threads of preparation (src/data/shard_writer.c,
 * src/data/prepare.c, src/data/prepare_char.c), and the progress of every
 * reader (lf_reader_bytes_read):
 *  - lf_shard_writer gives byte for byte the file of lf_shard_write (u16 and
 *    u32, with and without mask, pieces across its buffer), refuses a token
 *    out of range naming its index, leaves no temporary file behind;
 *  - lf_split_writer cuts shards at exactly max_tokens and never writes an
 *    empty one;
 *  - lf_prepare with a small shard_tokens: several shards whose counts add
 *    up, whose concatenation equals the single-shard output, read back by
 *    lf_dataset_open; u32 shards for a vocabulary over 65,536;
 *  - n_threads 1, 2 and 3 give identical files, counts, skip messages and
 *    first errors (bad records found by the reader and by the tokenizer,
 *    a record larger than a batch, GPT-2 BPE when its files are here);
 *  - a failed run leaves no dataset.json and no shard of its own;
 *  - progress reports are monotone and end at the input size;
 *  - lf_reader_bytes_read moves through CSV, Parquet, plain and gzip
 *    WebDataset files and ends at the file size. */
#include "test_util.h"
#include <dirent.h>
#include <sys/stat.h>
#include <zlib.h>
#include <cjson/cJSON.h>
#include "llmforge/data.h"

#include "prepare_fixture.h"

static int exists(const char *path) { return access(path, F_OK) == 0; }

static uint64_t file_size(const char *path) {
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

/* 1 when the files hold the same bytes. */
static int same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    LF_ASSERT_OK(lf_file_read_all(a, 0, &x, &nx));
    LF_ASSERT_OK(lf_file_read_all(b, 0, &y, &ny));
    int same = nx == ny && memcmp(x, y, nx) == 0;
    lf_free(x);
    lf_free(y);
    return same;
}

/* Files of dir whose names end with suffix. */
static int count_suffix(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    size_t ns = strlen(suffix);
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (nl >= ns && strcmp(e->d_name + nl - ns, suffix) == 0) n++;
    }
    closedir(d);
    return n;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) { /* xorshift64: deterministic test data */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A growing text buffer. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_write(sbuf *b, const char *path) {
    LF_ASSERT_OK(lf_file_write_all(path, b->p, b->n));
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Words from a small alphabet, so "char" vocabularies stay small. */
static void sb_words(sbuf *b, size_t bytes) {
    static const char *words[] = {"the", "king", "shall", "speak", "of", "love", "and", "war", "my", "lord",
                                  "to", "be", "or", "not", "good", "night", "sweet", "prince", "O", "thou"};
    size_t start = b->n;
    while (b->n - start < bytes) {
        sb_str(b, words[rnd() % 20]);
        uint64_t r = rnd() % 16;
        sb_str(b, r == 0 ? ", " : r == 1 ? ". " : r == 2 ? "\\n" : " ");
    }
}

static cJSON *read_json(const char *path) {
    char *buf = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &buf, &len));
    cJSON *j = cJSON_ParseWithLength(buf, len);
    lf_free(buf);
    assert_non_null(j);
    return j;
}

static double split_num(const cJSON *man, const char *split, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "splits"), split), key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* All tokens (and mask bytes) of one split over its shards, in manifest order. */
typedef struct split_data {
    size_t n, n_shards, max_shard;
    uint32_t *tok;
    uint8_t *mask;
    unsigned bpt;
} split_data;

static void load_split(const char *dir, const cJSON *man, const char *name, split_data *sd) {
    memset(sd, 0, sizeof *sd);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "splits"), name);
    const cJSON *sh;
    cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(sp, "shards")) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, sh->valuestring);
        lf_shard *s = NULL;
        LF_ASSERT_OK(lf_shard_open(&s, p, 1));
        size_t m = lf_shard_num_tokens(s);
        sd->bpt = (unsigned)((file_size(p) - LF_SHARD_HEADER_BYTES - (lf_shard_has_mask(s) ? m : 0)) / (m ? m : 1));
        sd->tok = realloc(sd->tok, (sd->n + m + 1) * sizeof *sd->tok);
        sd->mask = realloc(sd->mask, sd->n + m + 1);
        for (size_t i = 0; i < m; i++) {
            sd->tok[sd->n + i] = lf_shard_token(s, i);
            sd->mask[sd->n + i] = (uint8_t)lf_shard_mask(s, i);
        }
        sd->n += m;
        sd->n_shards++;
        if (m > sd->max_shard) sd->max_shard = m;
        lf_shard_close(s);
    }
}

static void free_split(split_data *sd) {
    free(sd->tok);
    free(sd->mask);
}

/* ---------------------------------------------------------------- lf_shard_writer */
static void check_writer_equals_write(uint32_t V, int with_mask) {
    const size_t n = 700001; /* u16: 1.4 MB, u32: 2.8 MB of tokens: several buffers */
    uint32_t *tok = malloc(n * sizeof *tok);
    uint8_t *mask = malloc(n);
    for (size_t i = 0; i < n; i++) {
        tok[i] = (uint32_t)(rnd() % V);
        mask[i] = (uint8_t)(rnd() % 3 == 0 ? 0 : rnd() % 2 ? 1 : 7); /* nonzero values are stored as 1 */
    }
    const char *ref = path_in("ref.bin"), *got = path_in("got.bin");
    unlink(got); /* from the previous call */
    LF_ASSERT_OK(lf_shard_write(ref, tok, with_mask ? mask : NULL, n, V));
    lf_shard_writer *w = NULL;
    LF_ASSERT_OK(lf_shard_writer_open(&w, got, V, with_mask));
    assert_true(exists(path_in("got.bin.tmp")));
    assert_false(exists(got)); /* not before close */
    static const size_t pieces[] = {1, 3, 65536, 100003, 0, 524288, 7};
    size_t at = 0;
    for (int k = 0; at < n; k = (k + 1) % 7) {
        size_t m = pieces[k] < n - at ? pieces[k] : n - at;
        LF_ASSERT_OK(lf_shard_writer_append(w, tok + at, mask + at, m));
        at += m;
    }
    assert_int_equal(lf_shard_writer_num_tokens(w), n);
    LF_ASSERT_OK(lf_shard_writer_close(w));
    assert_true(same_file(ref, got));
    assert_false(exists(path_in("got.bin.tmp")));
    assert_false(exists(path_in("got.bin.mask.tmp")));
    assert_int_equal(file_size(got), LF_SHARD_HEADER_BYTES + n * (V <= 65536 ? 2 : 4) + (with_mask ? n : 0));
    lf_shard *s = NULL;
    LF_ASSERT_OK(lf_shard_open(&s, got, 1));
    assert_int_equal(lf_shard_num_tokens(s), n);
    assert_int_equal(lf_shard_vocab_size(s), V);
    assert_int_equal(lf_shard_token(s, n - 1), tok[n - 1]);
    lf_shard_close(s);
    free(tok);
    free(mask);
}

static void test_shard_writer_u16(void **state) {
    (void)state;
    check_writer_equals_write(50257, 0);
    check_writer_equals_write(65536, 1); /* the largest u16 vocabulary */
}

static void test_shard_writer_u32(void **state) {
    (void)state;
    check_writer_equals_write(65537, 0);
    check_writer_equals_write(100000, 1);
}

static void test_shard_writer_edges(void **state) {
    (void)state;
    /* an empty shard and a NULL mask (every token a target) */
    lf_shard_writer *w = NULL;
    LF_ASSERT_OK(lf_shard_writer_open(&w, path_in("e.bin"), 10, 1));
    LF_ASSERT_OK(lf_shard_writer_close(w));
    LF_ASSERT_OK(lf_shard_write(path_in("e_ref.bin"), NULL, NULL, 0, 10));
    lf_shard *s = NULL;
    LF_ASSERT_OK(lf_shard_open(&s, path_in("e.bin"), 1));
    assert_int_equal(lf_shard_num_tokens(s), 0);
    lf_shard_close(s);
    const uint32_t t[4] = {1, 2, 3, 4};
    const uint8_t ones[4] = {1, 1, 1, 1};
    LF_ASSERT_OK(lf_shard_writer_open(&w, path_in("m.bin"), 10, 1));
    LF_ASSERT_OK(lf_shard_writer_append(w, t, NULL, 4));
    LF_ASSERT_OK(lf_shard_writer_close(w));
    LF_ASSERT_OK(lf_shard_write(path_in("m_ref.bin"), t, ones, 4, 10));
    assert_true(same_file(path_in("m.bin"), path_in("m_ref.bin")));

    /* a token out of range: named with its index in the shard; nothing is left */
    const uint32_t bad[3] = {1, 10, 2};
    LF_ASSERT_OK(lf_shard_writer_open(&w, path_in("bad.bin"), 10, 0));
    LF_ASSERT_OK(lf_shard_writer_append(w, t, NULL, 4));
    assert_int_equal(lf_shard_writer_append(w, bad, NULL, 3), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("bad.bin");
    LF_ASSERT_ERR_CONTAINS("token 10 at index 5");
    assert_int_not_equal(lf_shard_writer_append(w, t, NULL, 1), LF_OK); /* stopped */
    assert_int_not_equal(lf_shard_writer_close(w), LF_OK);
    assert_false(exists(path_in("bad.bin")));
    assert_false(exists(path_in("bad.bin.tmp")));
    /* free discards an unfinished shard */
    LF_ASSERT_OK(lf_shard_writer_open(&w, path_in("drop.bin"), 10, 1));
    LF_ASSERT_OK(lf_shard_writer_append(w, t, NULL, 4));
    lf_shard_writer_free(w);
    assert_false(exists(path_in("drop.bin")));
    assert_false(exists(path_in("drop.bin.tmp")));
    assert_false(exists(path_in("drop.bin.mask.tmp")));
    /* a directory that does not exist, bad arguments, NULL */
    assert_int_equal(lf_shard_writer_open(&w, path_in("nodir/x.bin"), 10, 0), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("nodir/x.bin");
    assert_null(w);
    assert_int_equal(lf_shard_writer_open(&w, path_in("z.bin"), 0, 0), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_shard_writer_open(&w, "", 10, 0), LF_ERR_INVALID_ARG);
    LF_ASSERT_OK(lf_shard_writer_close(NULL));
    lf_shard_writer_free(NULL);
}

/* ---------------------------------------------------------------- lf_split_writer */
static void test_split_writer(void **state) {
    (void)state;
    uint32_t tok[3500];
    for (size_t i = 0; i < 3500; i++) tok[i] = (uint32_t)(i % 997);
    lf_split_writer *w = NULL;
    LF_ASSERT_OK(lf_split_writer_open(&w, g_dir, "x", 1000, 0, 1000));
    assert_int_equal(count_suffix(g_dir, ".bin"), 0); /* nothing before the first token */
    size_t at = 0, step = 1;
    while (at < 3500) {
        size_t m = step < 3500 - at ? step : 3500 - at;
        LF_ASSERT_OK(lf_split_writer_append(w, tok + at, NULL, m));
        at += m;
        step = step * 3 + 1;
    }
    LF_ASSERT_OK(lf_split_writer_finish(w));
    LF_ASSERT_OK(lf_split_writer_finish(w)); /* again: nothing open */
    assert_int_equal(lf_split_writer_num_shards(w), 4);
    assert_int_equal(lf_split_writer_num_tokens(w), 3500);
    char name[32];
    LF_ASSERT_OK(lf_split_writer_shard_name(w, 3, name, sizeof name));
    assert_string_equal(name, "x_003.bin");
    assert_int_equal(lf_split_writer_shard_name(w, 3, name, 5), LF_ERR_RANGE);
    const size_t want[4] = {1000, 1000, 1000, 500};
    size_t k = 0;
    for (int i = 0; i < 4; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "x_%03d.bin", i);
        lf_shard *s = NULL;
        LF_ASSERT_OK(lf_shard_open(&s, path_in(nm), 1));
        assert_int_equal(lf_shard_num_tokens(s), want[i]);
        for (size_t j = 0; j < want[i]; j++, k++) assert_int_equal(lf_shard_token(s, j), tok[k]);
        lf_shard_close(s);
    }
    lf_split_writer_remove_shards(w);
    assert_int_equal(count_suffix(g_dir, ".bin"), 0);
    lf_split_writer_free(w);

    /* an exact multiple of max_tokens: no empty last shard; masks carried */
    uint8_t mask[3000];
    for (size_t i = 0; i < 3000; i++) mask[i] = (uint8_t)(i % 2);
    LF_ASSERT_OK(lf_split_writer_open(&w, g_dir, "y", 1000, 1, 1000));
    LF_ASSERT_OK(lf_split_writer_append(w, tok, mask, 2999));
    LF_ASSERT_OK(lf_split_writer_append(w, tok + 2999, mask + 2999, 1));
    assert_int_equal(lf_split_writer_num_shards(w), 3);
    LF_ASSERT_OK(lf_split_writer_finish(w));
    assert_int_equal(lf_split_writer_num_shards(w), 3);
    assert_false(exists(path_in("y_003.bin")));
    lf_shard *s = NULL;
    LF_ASSERT_OK(lf_shard_open(&s, path_in("y_002.bin"), 1));
    assert_int_equal(lf_shard_mask(s, 1), (2000 + 1) % 2);
    lf_shard_close(s);
    /* free discards the shard in progress only */
    LF_ASSERT_OK(lf_split_writer_append(w, tok, NULL, 10));
    lf_split_writer_free(w);
    assert_false(exists(path_in("y_003.bin.tmp")));
    assert_true(exists(path_in("y_002.bin")));
    lf_split_writer_free(NULL);
    assert_int_equal(lf_split_writer_open(&w, g_dir, "", 10, 0, 1), LF_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- rollover through lf_prepare */
static void check_rollover(lf_record_mode mode) {
    rng_state = 12345;
    sbuf b = {0};
    for (int i = 0; i < 600; i++) {
        if (mode == LF_RECORD_SFT) {
            sb_str(&b, "{\"prompt\": \"");
            sb_words(&b, 5 + rnd() % 30);
            sb_str(&b, "\", \"response\": \"");
            sb_words(&b, 1 + rnd() % 40);
            sb_str(&b, "\"}\n");
        } else {
            sb_str(&b, "{\"text\": \"");
            sb_words(&b, 1 + rnd() % 120);
            sb_str(&b, "\"}\n");
        }
    }
    const char *in = path_in("r.jsonl");
    sb_write(&b, in);
    lf_prepare_opts o = opts1(in, mode, "char");
    o.split[0] = 7;
    o.split[1] = 2;
    o.split[2] = 1;
    const char *one = path_in("one"), *many = path_in("many");
    lf_prepare_result r1, r2;
    LF_ASSERT_OK(lf_prepare(&o, one, &r1));
    o.shard_tokens = 1009;
    LF_ASSERT_OK(lf_prepare(&o, many, &r2));
    cJSON *m1 = read_json(join2(one, "dataset.json")), *m2 = read_json(join2(many, "dataset.json"));
    static const char *names[3] = {"train", "val", "test"};
    for (int s = 0; s < 3; s++) {
        assert_int_equal(r1.shards[s], r1.tokens[s] ? 1 : 0);
        assert_int_equal(r1.tokens[s], r2.tokens[s]);
        assert_int_equal(r1.records[s], r2.records[s]);
        assert_int_equal(r1.target_tokens[s], r2.target_tokens[s]);
        assert_int_equal(r2.shards[s], (r2.tokens[s] + 1008) / 1009);
        assert_true(r2.tokens[s] > 0);
        split_data a, c;
        load_split(one, m1, names[s], &a);
        load_split(many, m2, names[s], &c);
        assert_int_equal(c.n_shards, r2.shards[s]);
        assert_true(c.n_shards > 1);
        assert_int_equal(c.max_shard, 1009);
        assert_int_equal(a.n, c.n);
        assert_int_equal((double)c.n, split_num(m2, names[s], "tokens"));
        assert_int_equal((double)r2.records[s], split_num(m2, names[s], "records"));
        assert_memory_equal(a.tok, c.tok, a.n * sizeof *a.tok);
        assert_memory_equal(a.mask, c.mask, a.n);
        free_split(&a);
        free_split(&c);
    }
    cJSON_Delete(m1);
    cJSON_Delete(m2);
    /* what the trainer reads: the same tokens and the same batches */
    lf_dataset *d1 = NULL, *d2 = NULL;
    LF_ASSERT_OK(lf_dataset_open(&d1, one));
    LF_ASSERT_OK(lf_dataset_open(&d2, many));
    for (int sp = 0; sp < 2; sp++) {
        assert_int_equal(lf_dataset_num_tokens(d1, (lf_split)sp), lf_dataset_num_tokens(d2, (lf_split)sp));
        enum { B = 4, T = 32 };
        int32_t x1[B * T], y1[B * T], x2[B * T], y2[B * T];
        LF_ASSERT_OK(lf_dataset_get_batch(d1, (lf_split)sp, LF_SAMPLING_RANDOM, 3, LF_RNG_DATA, 0, B, T, x1, y1));
        LF_ASSERT_OK(lf_dataset_get_batch(d2, (lf_split)sp, LF_SAMPLING_RANDOM, 3, LF_RNG_DATA, 0, B, T, x2, y2));
        assert_memory_equal(x1, x2, sizeof x1);
        assert_memory_equal(y1, y2, sizeof y1);
    }
    lf_dataset_close(d1);
    lf_dataset_close(d2);
}

static void test_prepare_rollover_pretrain(void **state) {
    (void)state;
    check_rollover(LF_RECORD_PRETRAIN);
}

static void test_prepare_rollover_sft(void **state) {
    (void)state;
    check_rollover(LF_RECORD_SFT);
}

/* ---------------------------------------------------------------- u32 shards */
static void test_prepare_u32(void **state) {
    (void)state;
    /* one record of 70,000 distinct code points (U+10000 ..): vocabulary > 65,536 */
    sbuf b = {0};
    sb_str(&b, "{\"text\": \"start ");
    for (uint32_t cp = 0x10000; cp < 0x10000 + 70000; cp++) {
        char u[4] = {(char)(0xF0 | (cp >> 18)), (char)(0x80 | ((cp >> 12) & 0x3F)), (char)(0x80 | ((cp >> 6) & 0x3F)),
                     (char)(0x80 | (cp & 0x3F))};
        sb_add(&b, u, 4);
    }
    sb_str(&b, "\"}\n{\"text\": \"short one\"}\n");
    const char *in = path_in("big.jsonl");
    sbuf text = {0};
    sb_add(&text, b.p + 10, b.n - 10 - strlen("\"}\n{\"text\": \"short one\"}\n")); /* the first text */
    sb_write(&b, in);
    lf_prepare_opts o = opts1(in, LF_RECORD_PRETRAIN, "char");
    o.split[1] = 0;
    o.shard_tokens = 30000;
    o.n_threads = 2;
    const char *out = path_in("u32");
    lf_prepare_result r;
    LF_ASSERT_OK(lf_prepare(&o, out, &r));
    assert_true(r.vocab_size > 65536);
    assert_int_equal(r.tokens[0], 6 + 70000 + 1 + 9 + 1);
    assert_int_equal(r.shards[0], 3);
    cJSON *man = read_json(join2(out, "dataset.json"));
    split_data sd;
    load_split(out, man, "train", &sd);
    assert_int_equal(sd.bpt, 4);
    assert_int_equal(sd.n, r.tokens[0]);
    /* the ids decode back to the text, its end-of-text, the second text */
    lf_tokenizer *t = NULL;
    LF_ASSERT_OK(lf_tokenizer_open(&t, "char:vocab.json", out));
    char *dec = NULL;
    size_t dlen = 0;
    LF_ASSERT_OK(lf_tokenizer_decode(t, sd.tok, sd.n, &dec, &dlen));
    sb_str(&text, "\nshort one\n");
    assert_int_equal(dlen, text.n);
    assert_memory_equal(dec, text.p, dlen);
    lf_free(dec);
    free(text.p);
    lf_tokenizer_free(t);
    free_split(&sd);
    cJSON_Delete(man);
    lf_dataset *d = NULL;
    LF_ASSERT_OK(lf_dataset_open(&d, out));
    assert_int_equal(lf_dataset_vocab_size(d), r.vocab_size);
    lf_dataset_close(d);
}

/* ---------------------------------------------------------------- threads */
typedef struct skips {
    sbuf all; /* messages, one per line */
    int n;
} skips;

static void collect_skip(const char *msg, void *user) {
    skips *s = user;
    sb_str(&s->all, msg);
    sb_str(&s->all, "\n");
    s->n++;
}

/* Run o with n threads in g_dir/run, then rename that to out: messages
 * name the vocabulary copied into the output directory, so every run uses
 * the same one. Returns the status; msg gets the error message. */
static lf_status run_threads(lf_prepare_opts o, const char *out, int n, skips *sk, lf_prepare_result *r, char *msg,
                             size_t msg_size) {
    o.n_threads = n;
    o.on_skip = collect_skip;
    o.on_skip_user = sk;
    const char *run = path_in("run");
    lf_status st = lf_prepare(&o, run, r);
    snprintf(msg, msg_size, "%s", st == LF_OK ? "" : lf_last_error());
    assert_int_equal(rename(run, out), 0);
    return st;
}

static void assert_same_dataset(const char *a, const char *b) {
    static const char *files[] = {"dataset.json", "vocab.json"};
    for (int i = 0; i < 2; i++)
        if (exists(join2(a, files[i]))) assert_true(same_file(join2(a, files[i]), join2(b, files[i])));
    cJSON *man = read_json(join2(a, "dataset.json"));
    const cJSON *sp, *sh;
    int n = 0;
    cJSON_ArrayForEach(sp, cJSON_GetObjectItemCaseSensitive(man, "splits")) {
        cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(sp, "shards")) {
            char pa[1200], pb[1200];
            snprintf(pa, sizeof pa, "%s/%s", a, sh->valuestring);
            snprintf(pb, sizeof pb, "%s/%s", b, sh->valuestring);
            if (!same_file(pa, pb)) fail_msg("shard %s differs between %s and %s", sh->valuestring, a, b);
            n++;
        }
    }
    assert_true(n > 0);
    cJSON_Delete(man);
}

/* ~4 MB of JSONL: many batches, bad records of both kinds, a record larger
 * than a batch. */
static const char *make_mixed_input(lf_record_mode mode) {
    rng_state = 777;
    sbuf b = {0};
    for (int i = 0; i < 12000; i++) {
        uint64_t r = rnd() % 1000;
        if (r == 0) {
            sb_str(&b, "{not json}\n"); /* bad for the reader */
        } else if (r == 1) {
            sb_str(&b, mode == LF_RECORD_SFT ? "{\"prompt\": \"x\", \"response\": \"the Ω sign\"}\n"
                                             : "{\"text\": \"the Ω sign\"}\n"); /* bad for char:FILE */
        } else if (i == 5000) {
            sb_str(&b, mode == LF_RECORD_SFT ? "{\"prompt\": \"long\", \"response\": \"" : "{\"text\": \"");
            sb_words(&b, LF_PREPARE_LARGE_RECORD_BYTES + 12345);
            sb_str(&b, "\"}\n");
        } else if (mode == LF_RECORD_SFT) {
            sb_str(&b, "{\"prompt\": \"");
            sb_words(&b, rnd() % 100);
            sb_str(&b, "\", \"response\": \"");
            sb_words(&b, 1 + rnd() % 200);
            sb_str(&b, "\"}\n");
        } else {
            sb_str(&b, "{\"text\": \"");
            sb_words(&b, 1 + rnd() % 500);
            sb_str(&b, "\"}\n");
        }
    }
    const char *in = path_in(mode == LF_RECORD_SFT ? "mixed_sft.jsonl" : "mixed.jsonl");
    sb_write(&b, in);
    return in;
}

/* A character vocabulary without 'Ω': records holding it are bad. */
static const char *make_vocab(void) {
    const char *v = path_in("vocab_in.json");
    const char *chars = "\n !,.ILOTabcdefghiklmnoprstuvwxyz";
    sbuf b = {0};
    sb_str(&b, "{\"type\":\"char\",\"chars\":[");
    for (const char *c = chars; *c; c++) {
        char item[16];
        snprintf(item, sizeof item, "%s\"%s\"", c == chars ? "" : ",", *c == '\n' ? "\\n" : (char[]){*c, 0});
        sb_str(&b, item);
    }
    sb_str(&b, "]}");
    sb_write(&b, v);
    return v;
}

static void check_threads(lf_record_mode mode) {
    const char *in = make_mixed_input(mode);
    char spec[1300];
    snprintf(spec, sizeof spec, "char:%s", make_vocab());
    lf_prepare_opts o = opts1(in, mode, spec);
    o.split[0] = 7;
    o.split[1] = 2;
    o.split[2] = 1;
    o.shard_tokens = 300000;
    o.skip_bad_records = 1;
    const int threads[3] = {1, 2, 3};
    skips sk[3];
    lf_prepare_result r[3];
    const char *out[3] = {path_in("t1"), path_in("t2"), path_in("t3")};
    char msg[3][1024];
    memset(sk, 0, sizeof sk);
    for (int i = 0; i < 3; i++) LF_ASSERT_OK(run_threads(o, out[i], threads[i], &sk[i], &r[i], msg[i], sizeof msg[i]));
    assert_true(r[0].skipped >= 10);
    assert_true(r[0].tokens[0] > LF_PREPARE_LARGE_RECORD_BYTES);
    for (int i = 1; i < 3; i++) {
        assert_memory_equal(&r[0], &r[i], sizeof r[0]);
        assert_int_equal(sk[0].n, sk[i].n);
        assert_string_equal(sk[0].all.p, sk[i].all.p); /* the same messages in the same order */
        assert_same_dataset(out[0], out[i]);
    }
    /* skips of both kinds, named FILE:LINE */
    assert_non_null(strstr(sk[0].all.p, "not valid JSON"));
    assert_non_null(strstr(sk[0].all.p, "U+03A9"));
    for (int i = 0; i < 3; i++) free(sk[i].all.p);

    /* without skipping: the first bad record in input order is the error,
     * whichever stage finds it and however many threads there are */
    o.skip_bad_records = 0;
    for (int i = 0; i < 3; i++) {
        memset(&sk[i], 0, sizeof sk[i]);
        char en[16];
        snprintf(en, sizeof en, "err%d", i);
        const char *e = path_in(en);
        assert_int_equal(run_threads(o, e, threads[i], &sk[i], &r[i], msg[i], sizeof msg[i]), LF_ERR_FORMAT);
        assert_false(exists(join2(e, "dataset.json")));
        assert_int_equal(count_suffix(e, ".bin"), 0); /* the shards it had finished are gone */
        assert_int_equal(count_suffix(e, ".tmp"), 0);
        free(sk[i].all.p);
    }
    assert_non_null(strstr(msg[0], in));
    assert_string_equal(msg[0], msg[1]);
    assert_string_equal(msg[0], msg[2]);
}

static void test_threads_pretrain(void **state) {
    (void)state;
    check_threads(LF_RECORD_PRETRAIN);
}

static void test_threads_sft(void **state) {
    (void)state;
    check_threads(LF_RECORD_SFT);
}

/* "char" (two passes) with threads, and GPT-2 BPE (the large record is cut
 * and encoded on several threads) when its files are here. */
static void test_threads_char_gpt2(void **state) {
    (void)state;
    rng_state = 99;
    sbuf b = {0};
    for (int i = 0; i < 3000; i++) {
        sb_str(&b, "{\"text\": \"");
        if (i == 1500) sb_words(&b, LF_PREPARE_LARGE_RECORD_BYTES + 777);
        else sb_words(&b, 1 + rnd() % 400);
        sb_str(&b, "\"}\n");
    }
    const char *in = path_in("g.jsonl");
    sb_write(&b, in);
    lf_prepare_opts o = opts1(in, LF_RECORD_PRETRAIN, "char");
    o.shard_tokens = 500000;
    lf_prepare_result r1, r2;
    skips s1, s2;
    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    char m[1024];
    LF_ASSERT_OK(run_threads(o, path_in("c1"), 1, &s1, &r1, m, sizeof m));
    LF_ASSERT_OK(run_threads(o, path_in("c2"), 2, &s2, &r2, m, sizeof m));
    assert_memory_equal(&r1, &r2, sizeof r1);
    assert_same_dataset(path_in("c1"), path_in("c2"));

    char dir[1200], enc[1300], spec[1300];
    snprintf(dir, sizeof dir, "%s/data/gpt2", LF_SHARED_DIR);
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    if (access(enc, R_OK) != 0) {
        print_message("gpt2 part skipped: no GPT-2 files in %s\n", dir);
        return;
    }
    snprintf(spec, sizeof spec, "gpt2:%s", dir);
    o.tokenizer = spec;
    LF_ASSERT_OK(run_threads(o, path_in("g1"), 1, &s1, &r1, m, sizeof m));
    LF_ASSERT_OK(run_threads(o, path_in("g2"), 2, &s2, &r2, m, sizeof m));
    assert_memory_equal(&r1, &r2, sizeof r1);
    assert_same_dataset(path_in("g1"), path_in("g2"));
}

/* ---------------------------------------------------------------- failures leave no dataset */
static void test_prepare_unwritable(void **state) {
    (void)state;
    rng_state = 5;
    sbuf b = {0};
    for (int i = 0; i < 2000; i++) {
        sb_str(&b, "{\"text\": \"");
        sb_words(&b, 1 + rnd() % 200);
        sb_str(&b, "\"}\n");
    }
    const char *in = path_in("u.jsonl");
    sb_write(&b, in);
    lf_prepare_opts o = opts1(in, LF_RECORD_PRETRAIN, "char");
    o.split[0] = 0.5;
    o.split[1] = 0.5;
    o.shard_tokens = 5000;

    /* an output directory that cannot be made (below a regular file) */
    LF_ASSERT_OK(lf_file_write_all(path_in("plain"), "x", 1));
    assert_int_not_equal(lf_prepare(&o, path_in("plain/out"), NULL), LF_OK);
    LF_ASSERT_ERR_CONTAINS("plain/out");

    /* a shard that cannot be created half-way (its temporary name is a
     * directory: open(O_CREAT) fails): every shard this run finished is
     * removed, no temporary file is left, no dataset.json is written */
    const char *fresh = path_in("fresh");
    assert_int_equal(mkdir(fresh, 0755), 0);
    assert_int_equal(mkdir(join2(fresh, "val_001.bin.tmp"), 0755), 0);
    lf_prepare_result r;
    assert_int_equal(lf_prepare(&o, fresh, &r), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("val_001.bin");
    assert_false(exists(join2(fresh, "dataset.json")));
    assert_int_equal(count_suffix(fresh, ".bin"), 0);
    assert_int_equal(count_suffix(fresh, ".tmp"), 1); /* the directory */
    assert_int_equal(r.records[0] + r.records[1], 0);  /* no result on failure */

    /* the same in a directory holding an earlier dataset: its dataset.json
     * goes too (it would describe shards this run replaced) */
    const char *out = path_in("half");
    LF_ASSERT_OK(lf_prepare(&o, out, NULL));
    assert_true(exists(join2(out, "dataset.json")));
    assert_true(count_suffix(out, ".bin") > 2);
    assert_int_equal(mkdir(join2(out, "val_001.bin.tmp"), 0755), 0);
    assert_int_equal(lf_prepare(&o, out, NULL), LF_ERR_IO);
    assert_false(exists(join2(out, "dataset.json")));
    assert_false(exists(join2(out, "train_000.bin.tmp")));
    assert_false(exists(join2(out, "val_000.bin.tmp")));
    /* repaired, it works again */
    assert_int_equal(rmdir(join2(out, "val_001.bin.tmp")), 0);
    LF_ASSERT_OK(lf_prepare(&o, out, NULL));
    lf_dataset *d = NULL;
    LF_ASSERT_OK(lf_dataset_open(&d, out));
    lf_dataset_close(d);

    /* bad options */
    o.n_threads = -1;
    assert_int_equal(lf_prepare(&o, out, NULL), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("n_threads");
    o.n_threads = LF_PREPARE_MAX_THREADS + 1;
    assert_int_equal(lf_prepare(&o, out, NULL), LF_ERR_RANGE);
    assert_true(exists(join2(out, "dataset.json"))); /* options are checked before anything is touched */
}

/* ---------------------------------------------------------------- progress */
typedef struct prog {
    int calls, done_calls, last_pass;
    uint64_t last_bytes, total, records, tokens;
    int monotone;
} prog;

static void on_prog(const lf_prepare_progress *g, void *user) {
    prog *p = user;
    if (g->bytes_done < p->last_bytes || g->pass < p->last_pass || g->bytes_done > g->bytes_total) p->monotone = 0;
    if (p->calls && g->bytes_total != p->total) p->monotone = 0;
    if (g->seconds < 0) p->monotone = 0;
    p->calls++;
    p->done_calls += g->done;
    p->last_bytes = g->bytes_done;
    p->last_pass = g->pass;
    p->total = g->bytes_total;
    p->records = g->records;
    p->tokens = g->tokens;
}

static void test_progress(void **state) {
    (void)state;
    rng_state = 11;
    sbuf b = {0};
    for (int i = 0; i < 40000; i++) {
        sb_str(&b, "{\"text\": \"");
        sb_words(&b, 1 + rnd() % 300);
        sb_str(&b, "\"}\n");
    }
    const char *in = path_in("p.jsonl");
    sb_write(&b, in);
    const uint64_t size = file_size(in);
    char spec[1300];
    snprintf(spec, sizeof spec, "char:%s", make_vocab());
    const char *toks[2] = {"char", spec};
    for (int k = 0; k < 2; k++) {
        prog p = {.monotone = 1};
        lf_prepare_opts o = opts1(in, LF_RECORD_PRETRAIN, toks[k]);
        o.progress = on_prog;
        o.progress_user = &p;
        o.n_threads = 2;
        lf_prepare_result r;
        LF_ASSERT_OK(lf_prepare(&o, path_in(k ? "p2" : "p1"), &r));
        const int passes = k == 0 ? 2 : 1;
        assert_true(p.monotone);
        assert_true(p.calls >= 4); /* batches of ~2 MiB over a ~6 MB input, per pass */
        assert_int_equal(p.done_calls, 1);
        assert_int_equal(p.total, size * passes);
        assert_int_equal(p.last_bytes, p.total);
        assert_int_equal(p.last_pass, passes);
        assert_int_equal(p.records, r.records[0] + r.records[1] + r.records[2]);
        assert_int_equal(p.tokens, r.tokens[0] + r.tokens[1] + r.tokens[2]);
    }
}

/* ---------------------------------------------------------------- lf_reader_bytes_read */
/* Read every record of path; the position never goes back, moves at least
 * min_moves times strictly inside the file, and ends at the file's size. */
static void check_bytes_read(const char *path, lf_input_format fmt, const char *text_field, int min_moves) {
    lf_reader_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.format = fmt;
    ro.text_field = text_field;
    ro.skip_bad_records = 1; /* the Parquet fixtures hold nulls and empty values */
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, path, &ro));
    const uint64_t size = file_size(path);
    uint64_t last = lf_reader_bytes_read(r), records = 0;
    int moves = 0;
    for (;;) {
        lf_record rec;
        int eof = 0;
        LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
        uint64_t at = lf_reader_bytes_read(r);
        if (at < last) fail_msg("%s: bytes_read went back from %llu to %llu", path, (unsigned long long)last,
                                (unsigned long long)at);
        if (at > size) fail_msg("%s: bytes_read %llu beyond the size %llu", path, (unsigned long long)at,
                                (unsigned long long)size);
        if (at > last && at < size) moves++;
        last = at;
        if (eof) break;
        records++;
    }
    assert_true(records > 0);
    if (last != size) fail_msg("%s: bytes_read ends at %llu, the file holds %llu", path, (unsigned long long)last,
                               (unsigned long long)size);
    if (moves < min_moves) fail_msg("%s: bytes_read moved %d times inside the file, expected >= %d", path, moves,
                                    min_moves);
    lf_reader_close(r);
}

/* A ustar member header for a regular file. */
static void tar_header(unsigned char h[512], const char *name, size_t size) {
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)size);
    memcpy(h + 136, "00000000000", 12);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* A WebDataset shard of n samples (KEY.txt), plain or gzip. */
static void make_tar(const char *path, int n, int gz) {
    sbuf t = {0};
    rng_state = 31;
    for (int i = 0; i < n; i++) {
        sbuf body = {0};
        sb_words(&body, 200 + rnd() % 800);
        char name[64];
        snprintf(name, sizeof name, "s%05d.txt", i);
        unsigned char h[512];
        tar_header(h, name, body.n);
        sb_add(&t, (const char *)h, 512);
        sb_add(&t, body.p, body.n);
        static const char zeros[512] = {0};
        sb_add(&t, zeros, (512 - body.n % 512) % 512);
        free(body.p);
    }
    static const char end[1024] = {0};
    sb_add(&t, end, sizeof end);
    if (!gz) {
        sb_write(&t, path);
        return;
    }
    gzFile f = gzopen(path, "wb6");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, t.p, (unsigned)t.n), (int)t.n);
    assert_int_equal(gzclose(f), Z_OK);
    free(t.p);
}

static void test_reader_bytes_read(void **state) {
    (void)state;
    /* CSV across many 64 KiB reads */
    rng_state = 17;
    sbuf c = {0};
    sb_str(&c, "id,text\n");
    for (int i = 0; i < 3000; i++) {
        char head[32];
        snprintf(head, sizeof head, "%d,\"", i);
        sb_str(&c, head);
        sb_words(&c, 10 + rnd() % 200);
        sb_str(&c, "\"\n");
    }
    const char *csv = path_in("p.csv");
    sb_write(&c, csv);
    check_bytes_read(csv, LF_INPUT_CSV, NULL, 5);

    /* WebDataset: a plain tar and a gzip one, larger than the read buffers */
    make_tar(path_in("w.tar"), 2000, 0);
    make_tar(path_in("w.tar.gz"), 2000, 1);
    check_bytes_read(path_in("w.tar"), LF_INPUT_WDS, NULL, 5);
    check_bytes_read(path_in("w.tar.gz"), LF_INPUT_WDS, NULL, 2);
    check_bytes_read(LF_SOURCE_DIR "/tests/fixtures/wds/basic.tar.gz", LF_INPUT_WDS, NULL, 0);

    /* Parquet: several row groups and pages, plain and compressed */
    check_bytes_read(LF_SOURCE_DIR "/tests/fixtures/parquet/matrix_none_plain_v1.parquet", LF_INPUT_PARQUET, NULL, 2);
    check_bytes_read(LF_SOURCE_DIR "/tests/fixtures/parquet/matrix_zstd_dict_v2.parquet", LF_INPUT_PARQUET, NULL, 2);
    check_bytes_read(LF_SOURCE_DIR "/tests/fixtures/parquet/mixed_body.parquet", LF_INPUT_PARQUET, "body", 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shard_writer_u16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_writer_u32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_writer_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_rollover_pretrain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_rollover_sft, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_u32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_pretrain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_sft, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_char_gpt2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_unwritable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_bytes_read, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
