/* Byte-level BPE tokenizers (gpt2:, tiktoken:): ids equal tiktoken's on the
 * committed fixture (tools/reference/make_tiktoken_fixture.py) and decode
 * restores the text; the pre-tokeniser's Unicode classes equal tiktoken's on
 * every code point; the quadratic and heap merges agree; the multi-threaded
 * encoder and every cut point it may use give the serial ids; invalid UTF-8
 * (both policies), long runs, concurrent calls, special tokens, decode
 * errors, and malformed vocabulary files. */
#include "test_bpe_util.h"
#include <pthread.h>
#include "data/data_impl.h"

#define GPT2_SPEC "gpt2:" LF_SHARED_DIR "/data/gpt2"
#define GPT2_FIXTURE LF_SOURCE_DIR "/tests/fixtures/tiktoken_gpt2.jsonl"

static lf_tokenizer *open_gpt2(void) {
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, GPT2_SPEC, NULL));
    assert_int_equal(lf_tokenizer_vocab_size(t), 50257);
    return t;
}

static void encode(const lf_tokenizer *t, const char *s, size_t len, int allow, uint32_t **ids, size_t *n) {
    lf_encode_opts o = lf_encode_opts_default();
    o.allow_special = allow;
    LF_ASSERT_OK(lf_tokenizer_encode_opts(t, s, len, &o, ids, n));
}

static void assert_ids_equal(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, const char *what) {
    if (na != nb) fail_msg("%s: %zu ids vs %zu", what, na, nb);
    for (size_t i = 0; i < na; i++)
        if (a[i] != b[i]) fail_msg("%s: id %zu differs (%u vs %u)", what, i, a[i], b[i]);
}

/* ---------------------------------------------------------------- tiktoken equality */
static void test_gpt2_fixture(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    size_t n;
    bpe_case *cs = bpe_cases_load(GPT2_FIXTURE, &n);
    assert_true(n >= 2300);
    bpe_check_cases(t, cs, n, "tiktoken_gpt2.jsonl");
    /* the plain entry point is encode_ordinary */
    for (size_t i = 0; i < n; i++) {
        if (cs[i].allow_special) continue;
        uint32_t *ids;
        size_t m;
        LF_ASSERT_OK(lf_tokenizer_encode(t, cs[i].text, cs[i].len, &ids, &m));
        assert_ids_equal(ids, m, cs[i].ids, cs[i].n, "lf_tokenizer_encode");
        lf_free(ids);
    }
    bpe_cases_free(cs, n);
    lf_tokenizer_free(t);
}

/* The same ranks from a tiktoken rank file (r50k_base's format, written here
 * from the gpt2 vocabulary) give the same ids. */
static void test_tiktoken_rank_file(void **state) {
    (void)state;
    lf_tokenizer *g = open_gpt2();
    char *dir = lf_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/r50k.tiktoken", dir);
    FILE *f = fopen(path, "w");
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (uint32_t r = 0; r < 50256; r++) {
        char *s;
        size_t len;
        LF_ASSERT_OK(lf_tokenizer_decode(g, &r, 1, &s, &len));
        const unsigned char *p = (const unsigned char *)s;
        for (size_t i = 0; i < len; i += 3) {
            uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < len ? p[i + 2] : 0);
            fputc(b64[w >> 18 & 63], f);
            fputc(b64[w >> 12 & 63], f);
            fputc(i + 1 < len ? b64[w >> 6 & 63] : '=', f);
            fputc(i + 2 < len ? b64[w & 63] : '=', f);
        }
        fprintf(f, " %u\n", r);
        lf_free(s);
    }
    fclose(f);
    char spec[1100];
    snprintf(spec, sizeof spec, "tiktoken:%s", path);
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, spec, NULL));
    assert_int_equal(lf_tokenizer_vocab_size(t), 50257);
    uint32_t eot;
    LF_ASSERT_OK(lf_tokenizer_special_id(t, "<|endoftext|>", &eot));
    assert_int_equal(eot, 50256);
    size_t n;
    bpe_case *cs = bpe_cases_load(GPT2_FIXTURE, &n);
    bpe_check_cases(t, cs, n, "tiktoken_gpt2.jsonl via tiktoken:FILE");
    bpe_cases_free(cs, n);
    lf_tokenizer_free(t);
    lf_tokenizer_free(g);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- Unicode classes */
static uint8_t *class_bitmap(const cJSON *root, const char *name) {
    uint8_t *m = calloc(0x110000, 1);
    const cJSON *ranges = cJSON_GetObjectItem(root, name), *r;
    assert_true(cJSON_IsArray(ranges));
    cJSON_ArrayForEach(r, ranges) {
        uint32_t a = (uint32_t)cJSON_GetArrayItem(r, 0)->valuedouble, b = (uint32_t)cJSON_GetArrayItem(r, 1)->valuedouble;
        for (uint32_t c = a; c <= b; c++) m[c] = 1;
    }
    return m;
}

static int n_pieces(lf__pretok_scan *sc, const unsigned char *s, size_t len) {
    int k = 0;
    size_t pos = 0, a, e;
    while (pos < len && lf__pretok_next(sc, s, len, pos, &a, &e) == LF_OK) {
        k++;
        pos = e;
    }
    return k;
}

/* "a"X is one piece iff X is \p{L}, "1"X iff \p{N}, "\t"X iff \s: checked for
 * every code point against the classes tiktoken's regex engine has. */
static void test_unicode_classes(void **state) {
    (void)state;
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(LF_SOURCE_DIR "/tests/fixtures/tiktoken_unicode_classes.json", 0, &buf, &len));
    cJSON *root = cJSON_ParseWithLength(buf, len);
    assert_non_null(root);
    uint8_t *L = class_bitmap(root, "L"), *N = class_bitmap(root, "N"), *S = class_bitmap(root, "S");
    lf__pretok *p;
    LF_ASSERT_OK(lf__pretok_create(&p));
    lf__pretok_scan sc;
    LF_ASSERT_OK(lf__pretok_scan_init(&sc, p));
    size_t bad = 0, nL = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        unsigned char s[5];
        int k = lf__utf8_encode(cp, s + 1);
        static const char lead[3] = {'a', '1', '\t'};
        const uint8_t *cls[3] = {L, N, S};
        for (int c = 0; c < 3; c++) {
            s[0] = (unsigned char)lead[c];
            int one = n_pieces(&sc, s, (size_t)k + 1) == 1;
            if (one != cls[c][cp]) {
                if (bad++ < 10) print_error("U+%04X: class %c is %d here, %d in tiktoken\n", cp, "LNS"[c], one, cls[c][cp]);
            }
        }
        nL += L[cp];
    }
    assert_int_equal(bad, 0);
    assert_true(nL > 140000);
    lf__pretok_scan_done(&sc);
    lf__pretok_free(p);
    free(L);
    free(N);
    free(S);
    cJSON_Delete(root);
    lf_free(buf);
}

/* ---------------------------------------------------------------- merge algorithms */
static void test_merge_algorithms(void **state) {
    (void)state;
    /* a vocabulary built here: all bytes plus merges of a small alphabet */
    lf_tokenizer *g = open_gpt2();
    lf__bpe b;
    memset(&b, 0, sizeof b);
    /* copy gpt2's ranks through decode */
    b.n_ranks = 50256;
    b.tok_off = calloc(b.n_ranks, sizeof *b.tok_off);
    b.tok_len = calloc(b.n_ranks, sizeof *b.tok_len);
    size_t cap = 1 << 20, at = 0;
    b.blob = malloc(cap);
    for (uint32_t r = 0; r < b.n_ranks; r++) {
        char *s;
        size_t len;
        LF_ASSERT_OK(lf_tokenizer_decode(g, &r, 1, &s, &len));
        if (at + len > cap) b.blob = realloc(b.blob, cap *= 2);
        memcpy(b.blob + at, s, len);
        b.tok_off[r] = (uint32_t)at;
        b.tok_len[r] = (uint32_t)len;
        at += len;
        lf_free(s);
    }
    LF_ASSERT_OK(lf__bpe_build(&b, "test vocabulary"));
    static const char alpha[] = "aaabbe tthn,.!0123\xe4\xb8\xad";
    uint32_t *o1 = malloc(6000 * sizeof *o1), *o2 = malloc(6000 * sizeof *o2), *o0 = malloc(6000 * sizeof *o0);
    unsigned char *p = malloc(6000);
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = 1 + lf_rng_u64(7, LF_RNG_TEST, (uint64_t)trial * 2) % (trial < 2900 ? 300 : 6000);
        for (size_t i = 0; i < n; i++)
            p[i] = (unsigned char)alpha[lf_rng_u64(7, LF_RNG_TEST, (uint64_t)trial << 20 | i) % (sizeof alpha - 1)];
        size_t m1 = lf__bpe_merge(&b, p, n, o1, 1), m2 = lf__bpe_merge(&b, p, n, o2, 2), m0 = lf__bpe_merge(&b, p, n, o0, 0);
        assert_ids_equal(o1, m1, o2, m2, "scan vs heap");
        assert_ids_equal(o1, m1, o0, m0, "scan vs auto");
        /* the parts spell the piece */
        size_t k = 0;
        for (size_t i = 0; i < m1; i++) {
            assert_true(o1[i] < b.n_ranks);
            assert_memory_equal(b.blob + b.tok_off[o1[i]], p + k, b.tok_len[o1[i]]);
            k += b.tok_len[o1[i]];
        }
        assert_int_equal(k, n);
    }
    free(p);
    free(o0);
    free(o1);
    free(o2);
    lf__bpe_release(&b);
    lf_tokenizer_free(g);
}

/* ---------------------------------------------------------------- long runs */
static void test_long_runs(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    const size_t n = 1 << 20;
    char *s = malloc(n + 2);
    static const char fill[] = {' ', 'a', '7', '\n', '!', '\t'};
    for (size_t f = 0; f < sizeof fill; f++) {
        memset(s, fill[f], n);
        s[n] = 'x';
        uint32_t *ids, *pids;
        size_t m, pm;
        double t0 = lf_time_now();
        encode(t, s, n + 1, 0, &ids, &m);
        double dt = lf_time_now() - t0;
        assert_true(m > 0);
        char *back;
        size_t bl;
        LF_ASSERT_OK(lf_tokenizer_decode(t, ids, m, &back, &bl));
        assert_int_equal(bl, n + 1);
        assert_memory_equal(back, s, bl);
        LF_ASSERT_OK(lf_tokenizer_encode_parallel(t, s, n + 1, NULL, 3, &pids, &pm));
        assert_ids_equal(pids, pm, ids, m, "long run, parallel");
        print_message("1 MiB run of 0x%02x: %zu ids in %.3f s\n", (unsigned)fill[f], m, dt);
        lf_free(back);
        lf_free(ids);
        lf_free(pids);
    }
    free(s);
    lf_tokenizer_free(t);
}

/* ---------------------------------------------------------------- parallel encoding and cut points */
static char *fixture_corpus(const bpe_case *cs, size_t n, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += cs[i].len + 1;
    char *s = malloc(total + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + at, cs[i].text, cs[i].len);
        at += cs[i].len;
        s[at++] = '\n';
    }
    *len = at;
    return s;
}

static void test_parallel_equals_serial(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    size_t n, len, slen;
    bpe_case *cs = bpe_cases_load(GPT2_FIXTURE, &n);
    char *fx = fixture_corpus(cs, n, &len);
    char *shk;
    LF_ASSERT_OK(lf_file_read_all(LF_SHARED_DIR "/data/tinyshakespeare.txt", 0, &shk, &slen));
    char *all = malloc(len + slen + 1);
    memcpy(all, fx, len);
    memcpy(all + len, shk, slen);
    size_t alen = len + slen;
    for (int allow = 0; allow < 2; allow++) {
        uint32_t *ids;
        size_t m;
        encode(t, all, alen, allow, &ids, &m);
        static const int threads[] = {2, 3, 4, 7};
        for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
            lf_encode_opts o = lf_encode_opts_default();
            o.allow_special = allow;
            uint32_t *pids;
            size_t pm;
            LF_ASSERT_OK(lf_tokenizer_encode_parallel(t, all, alen, &o, threads[k], &pids, &pm));
            assert_ids_equal(pids, pm, ids, m, "parallel vs serial");
            lf_free(pids);
        }
        lf_free(ids);
    }
    free(all);
    free(fx);
    lf_free(shk);
    bpe_cases_free(cs, n);
    lf_tokenizer_free(t);
}

/* Every place lf__bpe_cut allows, in every fixture text: the two sides
 * encoded apart give the ids of the whole. */
static void test_cut_points(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    size_t n, cuts = 0;
    bpe_case *cs = bpe_cases_load(GPT2_FIXTURE, &n);
    for (size_t i = 0; i < n; i++) {
        const bpe_case *c = &cs[i];
        if (c->len > 5000) continue;
        size_t p = 0;
        while ((p = lf__bpe_cut(c->text, c->len, p + 1)) < c->len) {
            assert_true(p > 0);
            uint32_t *a, *b;
            size_t na, nb;
            encode(t, c->text, p, c->allow_special, &a, &na);
            encode(t, c->text + p, c->len - p, c->allow_special, &b, &nb);
            if (na + nb != c->n || memcmp(a, c->ids, na * sizeof *a) || memcmp(b, c->ids + na, nb * sizeof *b))
                fail_msg("case %zu: cutting at %zu changes the ids", i, p);
            lf_free(a);
            lf_free(b);
            cuts++;
        }
    }
    print_message("%zu cut points checked\n", cuts);
    assert_true(cuts > 1000);
    bpe_cases_free(cs, n);
    lf_tokenizer_free(t);
}

/* Several threads on one tokenizer at once. */
typedef struct conc_arg {
    const lf_tokenizer *t;
    const bpe_case *cs;
    size_t n, first;
    int bad;
} conc_arg;

static void *conc_worker(void *p) {
    conc_arg *a = p;
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = a->first; i < a->n; i += 4) {
            lf_encode_opts o = lf_encode_opts_default();
            o.allow_special = a->cs[i].allow_special;
            uint32_t *ids;
            size_t m;
            if (lf_tokenizer_encode_opts(a->t, a->cs[i].text, a->cs[i].len, &o, &ids, &m) != LF_OK ||
                m != a->cs[i].n || memcmp(ids, a->cs[i].ids, m * sizeof *ids) != 0)
                a->bad++;
            lf_free(ids);
        }
    return NULL;
}

static void test_concurrent_calls(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    size_t n;
    bpe_case *cs = bpe_cases_load(GPT2_FIXTURE, &n);
    pthread_t th[4];
    conc_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = (conc_arg){.t = t, .cs = cs, .n = n, .first = (size_t)k};
        assert_int_equal(pthread_create(&th[k], NULL, conc_worker, &args[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(args[k].bad, 0);
    }
    bpe_cases_free(cs, n);
    lf_tokenizer_free(t);
}

/* ---------------------------------------------------------------- invalid UTF-8 */
static void test_invalid_utf8_strict(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    static const struct {
        const char *s;
        size_t len, off;
        const char *why;
    } cases[] = {
        {"abc\xff" "def", 7, 3, "byte never valid"},
        {"ok \xc0\x80", 5, 3, "overlong"},
        {"\xed\xa0\x80 surrogate", 13, 0, "surrogate"},
        {"end \xe4\xb8", 6, 4, "truncated"},
        {"x\x80", 2, 1, "continuation"},
        {"\xf4\x90\x80\x80", 4, 0, "above U+10FFFF"},
        {"\xe4\xb8\xad\xe6\x96\x87 \xf5", 8, 7, "never valid"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t *ids = (uint32_t *)1;
        size_t m = 99;
        assert_int_equal(lf_tokenizer_encode(t, cases[i].s, cases[i].len, &ids, &m), LF_ERR_FORMAT);
        assert_null(ids);
        assert_int_equal(m, 0);
        char want[64];
        snprintf(want, sizeof want, "byte offset %zu", cases[i].off);
        LF_ASSERT_ERR_CONTAINS(want);
        LF_ASSERT_ERR_CONTAINS(cases[i].why);
    }
    /* parallel: the first error in text order, offset in the whole text */
    size_t n = 1 << 20;
    char *s = malloc(n);
    for (size_t i = 0; i < n; i++) s[i] = i % 7 == 6 ? ' ' : 'a' + (char)(i % 5);
    s[900000] = (char)0xC3; /* then 'a' or ' ': incomplete */
    s[950000] = (char)0xFF;
    assert_int_equal(lf_tokenizer_encode(t, s, n, &(uint32_t *){0}, &(size_t){0}), LF_ERR_FORMAT);
    char serial_msg[1024];
    snprintf(serial_msg, sizeof serial_msg, "%s", lf_last_error());
    uint32_t *ids;
    size_t m;
    assert_int_equal(lf_tokenizer_encode_parallel(t, s, n, NULL, 4, &ids, &m), LF_ERR_FORMAT);
    assert_string_equal(lf_last_error(), serial_msg);
    LF_ASSERT_ERR_CONTAINS("byte offset 900000");
    free(s);
    lf_tokenizer_free(t);
}

static void test_invalid_utf8_bytes(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    lf_encode_opts o = lf_encode_opts_default();
    o.invalid_utf8 = LF_UTF8_BYTES;
    /* "abc" 0xFF "def": the valid runs alone, the byte as its own token */
    uint32_t *ids, *a, *b;
    size_t m, na, nb;
    LF_ASSERT_OK(lf_tokenizer_encode_opts(t, "abc \xff  def", 10, &o, &ids, &m));
    encode(t, "abc ", 4, 0, &a, &na);
    encode(t, "  def", 5, 0, &b, &nb);
    assert_int_equal(m, na + 1 + nb);
    assert_memory_equal(ids, a, na * sizeof *a);
    uint32_t id_ff;
    {
        uint32_t *x;
        size_t nx;
        LF_ASSERT_OK(lf_tokenizer_encode_opts(t, "\xff", 1, &o, &x, &nx));
        assert_int_equal(nx, 1);
        id_ff = x[0];
        lf_free(x);
    }
    assert_int_equal(ids[na], id_ff);
    assert_memory_equal(ids + na + 1, b, nb * sizeof *b);
    lf_free(ids);
    lf_free(a);
    lf_free(b);
    /* any bytes round-trip, serial and parallel alike */
    size_t n = 300000;
    unsigned char *s = malloc(n);
    for (int trial = 0; trial < 40; trial++) {
        size_t len = trial < 39 ? 1 + lf_rng_u64(3, LF_RNG_TEST, (uint64_t)trial) % 2000 : n;
        for (size_t i = 0; i < len; i++) {
            uint64_t r = lf_rng_u64(5, LF_RNG_TEST, (uint64_t)trial << 32 | i);
            s[i] = (r & 3) ? (unsigned char)(" aZ\n9'\xc3\xa9\xe4\xb8\xad"[(r >> 8) % 12]) : (unsigned char)(r >> 16);
        }
        LF_ASSERT_OK(lf_tokenizer_encode_opts(t, (const char *)s, len, &o, &ids, &m));
        char *back;
        size_t bl;
        LF_ASSERT_OK(lf_tokenizer_decode(t, ids, m, &back, &bl));
        assert_int_equal(bl, len);
        assert_memory_equal(back, s, len);
        uint32_t *pids;
        size_t pm;
        LF_ASSERT_OK(lf_tokenizer_encode_parallel(t, (const char *)s, len, &o, 3, &pids, &pm));
        assert_ids_equal(pids, pm, ids, m, "bytes policy, parallel");
        lf_free(pids);
        lf_free(back);
        lf_free(ids);
    }
    free(s);
    lf_tokenizer_free(t);
}

/* ---------------------------------------------------------------- special tokens, decode, NUL */
static void test_special_and_decode(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    uint32_t eot;
    LF_ASSERT_OK(lf_tokenizer_special_id(t, "<|endoftext|>", &eot));
    assert_int_equal(eot, 50256);
    assert_int_equal(lf_tokenizer_special_id(t, "<|startoftext|>", &eot), LF_ERR_NOT_FOUND);
    uint32_t *ids;
    size_t m;
    encode(t, "a<|endoftext|>b", 15, 1, &ids, &m);
    assert_int_equal(m, 3);
    assert_int_equal(ids[1], 50256);
    lf_free(ids);
    encode(t, "a<|endoftext|>b", 15, 0, &ids, &m);
    assert_true(m > 3);
    for (size_t i = 0; i < m; i++) assert_int_not_equal(ids[i], 50256);
    lf_free(ids);
    /* decode */
    uint32_t seq[] = {15496, 50256, 50257};
    char *s;
    size_t len;
    LF_ASSERT_OK(lf_tokenizer_decode(t, seq, 2, &s, &len));
    assert_string_equal(s, "Hello<|endoftext|>");
    assert_int_equal(len, 18);
    lf_free(s);
    assert_int_equal(lf_tokenizer_decode(t, seq, 3, &s, &len), LF_ERR_RANGE);
    assert_null(s);
    LF_ASSERT_ERR_CONTAINS("50257");
    LF_ASSERT_ERR_CONTAINS("position 2");
    /* one id of a multi-byte character decodes to its bytes alone */
    encode(t, "\xe4\xb8\xad", 3, 0, &ids, &m);
    size_t total = 0;
    for (size_t i = 0; i < m; i++) {
        LF_ASSERT_OK(lf_tokenizer_decode(t, ids + i, 1, &s, &len));
        total += len;
        lf_free(s);
    }
    assert_int_equal(total, 3);
    lf_free(ids);
    /* NUL is an ordinary character */
    LF_ASSERT_OK(lf_tokenizer_encode(t, "a\0b", 3, &ids, &m));
    LF_ASSERT_OK(lf_tokenizer_decode(t, ids, m, &s, &len));
    assert_int_equal(len, 3);
    assert_memory_equal(s, "a\0b", 3);
    lf_free(s);
    lf_free(ids);
    /* empty text */
    LF_ASSERT_OK(lf_tokenizer_encode(t, NULL, 0, &ids, &m));
    assert_int_equal(m, 0);
    lf_free(ids);
    LF_ASSERT_OK(lf_tokenizer_encode_parallel(t, "", 0, NULL, 4, &ids, &m));
    assert_int_equal(m, 0);
    lf_free(ids);
    /* bad options */
    lf_encode_opts o = lf_encode_opts_default();
    o.invalid_utf8 = (lf_utf8_policy)7;
    assert_int_equal(lf_tokenizer_encode_opts(t, "a", 1, &o, &ids, &m), LF_ERR_INVALID_ARG);
    lf_tokenizer_free(t);
}

/* The char kind through the new entry points. */
static void test_char_kind_options(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char path[1024], spec[1100];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    const char *v = "{\"type\":\"char\",\"chars\":[\"\\n\",\" \",\"a\",\"b\"]}";
    LF_ASSERT_OK(lf_file_write_all(path, v, strlen(v)));
    snprintf(spec, sizeof spec, "char:%s", path);
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, spec, NULL));
    uint32_t *ids;
    size_t m;
    LF_ASSERT_OK(lf_tokenizer_encode_opts(t, "ab a\n", 5, NULL, &ids, &m));
    assert_int_equal(m, 5);
    lf_free(ids);
    size_t n = 200000;
    char *s = malloc(n);
    for (size_t i = 0; i < n; i++) s[i] = "ab \n"[i % 4];
    LF_ASSERT_OK(lf_tokenizer_encode_parallel(t, s, n, NULL, 3, &ids, &m));
    assert_int_equal(m, n);
    lf_free(ids);
    free(s);
    lf_encode_opts o = lf_encode_opts_default();
    o.invalid_utf8 = LF_UTF8_BYTES;
    assert_int_equal(lf_tokenizer_encode_opts(t, "ab", 2, &o, &ids, &m), LF_ERR_UNSUPPORTED);
    uint32_t eot;
    assert_int_equal(lf_tokenizer_special_id(t, "<|endoftext|>", &eot), LF_ERR_NOT_FOUND);
    lf_tokenizer_free(t);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- malformed files */
static void write_file(const char *dir, const char *name, const char *s, size_t len) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    LF_ASSERT_OK(lf_file_write_all(p, s, len));
}

static lf_status open_kind(const char *kind, const char *dir, const char *name) {
    char spec[1200];
    snprintf(spec, sizeof spec, "%s:%s%s%s", kind, dir, name ? "/" : "", name ? name : "");
    lf_tokenizer *t = (lf_tokenizer *)1;
    lf_status st = lf_tokenizer_open(&t, spec, NULL);
    if (st == LF_OK) lf_tokenizer_free(t);
    else assert_null(t);
    return st;
}

static void test_gpt2_files_malformed(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    assert_int_equal(open_kind("gpt2", dir, NULL), LF_ERR_NOT_FOUND); /* no files */
    LF_ASSERT_ERR_CONTAINS("vocab.bpe");
    char *enc, *merges;
    size_t enc_len, merges_len;
    LF_ASSERT_OK(lf_file_read_all(LF_SHARED_DIR "/data/gpt2/encoder.json", 0, &enc, &enc_len));
    LF_ASSERT_OK(lf_file_read_all(LF_SHARED_DIR "/data/gpt2/vocab.bpe", 0, &merges, &merges_len));
    write_file(dir, "encoder.json", enc, enc_len);
    /* a merge line with one token (line 3) */
    char *m2 = malloc(merges_len + 16);
    memcpy(m2, merges, merges_len);
    char *l3 = strchr(strchr(m2, '\n') + 1, '\n') + 1; /* start of line 3 */
    char *sp = strchr(l3, ' ');
    memmove(sp, sp + 1, merges_len - (size_t)(sp + 1 - m2));
    write_file(dir, "vocab.bpe", m2, merges_len - 1);
    assert_int_equal(open_kind("gpt2", dir, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("vocab.bpe line 3");
    /* a character outside the byte alphabet */
    memcpy(m2, merges, merges_len);
    l3 = strchr(strchr(m2, '\n') + 1, '\n') + 1;
    memcpy(l3, "\xc8\x80", 2); /* U+0200 for U+0120 */
    write_file(dir, "vocab.bpe", m2, merges_len);
    assert_int_equal(open_kind("gpt2", dir, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("byte alphabet");
    /* truncated merges: encoder.json no longer agrees */
    write_file(dir, "vocab.bpe", merges, (size_t)(strchr(merges + merges_len / 2, '\n') + 1 - merges));
    assert_int_equal(open_kind("gpt2", dir, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("encoder.json");
    /* encoder.json: bad JSON, a wrong id */
    write_file(dir, "vocab.bpe", merges, merges_len);
    write_file(dir, "encoder.json", enc, enc_len / 2);
    assert_int_equal(open_kind("gpt2", dir, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("not a JSON object");
    char *e2 = malloc(enc_len + 1);
    memcpy(e2, enc, enc_len);
    char *the = strstr(e2, "\"\\u0120the\": 262");
    assert_non_null(the);
    memcpy(strstr(the, "262"), "263", 3);
    write_file(dir, "encoder.json", e2, enc_len);
    assert_int_equal(open_kind("gpt2", dir, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("encoder.json maps");
    write_file(dir, "encoder.json", enc, enc_len);
    assert_int_equal(open_kind("gpt2", dir, NULL), LF_OK);
    free(e2);
    free(m2);
    lf_free(enc);
    lf_free(merges);
    lf_test_rmrf(dir);
    free(dir);
}

static void test_rank_file_malformed(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    /* the 256 single bytes, base64 */
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char base[256 * 12];
    size_t at = 0;
    for (int c = 0; c < 256; c++)
        at += (size_t)sprintf(base + at, "%c%c== %d\n", b64[c >> 2], b64[(c & 3) << 4], c);
    char buf[sizeof base + 256];
    struct {
        const char *extra;
        lf_status st;
        const char *msg;
    } cases[] = {
        {"", LF_OK, NULL},
        {"YWI= 256\n\nYWJj 257\r\n", LF_OK, NULL}, /* empty line, CRLF */
        {"YWI 256\n", LF_ERR_FORMAT, "line 257"},       /* not padded */
        {"Y!I= 256\n", LF_ERR_FORMAT, "line 257"},      /* bad character */
        {"YWI=256\n", LF_ERR_FORMAT, "line 257"},       /* no separator */
        {"YWI= 2x\n", LF_ERR_FORMAT, "line 257"},       /* bad rank */
        {"YWI= 256 7\n", LF_ERR_FORMAT, "line 257"},    /* extra field */
        {"YWI= 99999999\n", LF_ERR_FORMAT, "not below"},
        {"YWI= 255\n", LF_ERR_FORMAT, "line 257: rank 255 appears twice"},
        {"YQ== 256\n", LF_ERR_FORMAT, "same bytes"},    /* "a" again */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = snprintf(buf, sizeof buf, "%s%s", base, cases[i].extra);
        write_file(dir, "r.tiktoken", buf, (size_t)n);
        lf_status st = open_kind("tiktoken", dir, "r.tiktoken");
        if (st != cases[i].st) fail_msg("case %zu: %s, want %s (%s)", i, lf_status_str(st), lf_status_str(cases[i].st), lf_last_error());
        if (cases[i].msg) LF_ASSERT_ERR_CONTAINS(cases[i].msg);
    }
    /* a missing single byte; an empty file; a missing file */
    const char *line2 = strchr(base, '\n') + 1; /* without "AA== 0" */
    write_file(dir, "r.tiktoken", line2, at - (size_t)(line2 - base));
    assert_int_equal(open_kind("bpe", dir, "r.tiktoken"), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("byte 0x00 has no token");
    write_file(dir, "r.tiktoken", "", 0);
    assert_int_equal(open_kind("bpe", dir, "r.tiktoken"), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("no tokens");
    assert_int_equal(open_kind("bpe", dir, "absent.tiktoken"), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("absent.tiktoken");
    /* holes: vocab size is largest rank + 2, a hole does not decode */
    int n = snprintf(buf, sizeof buf, "%sYWI= 300\n", base);
    write_file(dir, "r.tiktoken", buf, (size_t)n);
    char spec[1200];
    snprintf(spec, sizeof spec, "tiktoken:%s/r.tiktoken", dir);
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, spec, NULL));
    assert_int_equal(lf_tokenizer_vocab_size(t), 302);
    uint32_t eot, hole = 280, *ids;
    size_t m;
    LF_ASSERT_OK(lf_tokenizer_special_id(t, "<|endoftext|>", &eot));
    assert_int_equal(eot, 301);
    char *s;
    size_t len;
    assert_int_equal(lf_tokenizer_decode(t, &hole, 1, &s, &len), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("unused rank");
    LF_ASSERT_OK(lf_tokenizer_encode(t, "abab", 4, &ids, &m));
    assert_int_equal(m, 2);
    assert_int_equal(ids[0], 300);
    lf_free(ids);
    lf_tokenizer_free(t);
    lf_test_rmrf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_fixture),
        cmocka_unit_test(test_tiktoken_rank_file),
        cmocka_unit_test(test_unicode_classes),
        cmocka_unit_test(test_merge_algorithms),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_parallel_equals_serial),
        cmocka_unit_test(test_cut_points),
        cmocka_unit_test(test_concurrent_calls),
        cmocka_unit_test(test_invalid_utf8_strict),
        cmocka_unit_test(test_invalid_utf8_bytes),
        cmocka_unit_test(test_special_and_decode),
        cmocka_unit_test(test_char_kind_options),
        cmocka_unit_test(test_gpt2_files_malformed),
        cmocka_unit_test(test_rank_file_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
