/* The streaming detokenizer (src/data/detok_stream.c) on the GPT-2 BPE:
 *  - CJK, accented and emoji text (ZWJ sequences, flags, 4-byte letters)
 *    whose characters span several tokens: every push is well-formed UTF-8
 *    (an independent validator below), each push emits everything complete
 *    so far (what is held back is an unfinished character only), and the
 *    pushes concatenate to lf_tokenizer_decode of all the ids;
 *  - the same texts fed one byte token per byte (every character split at
 *    every byte);
 *  - ill-formed byte sequences: U+FFFD per maximal subpart, the strings
 *    Python's bytes.decode('utf-8', 'replace') gives (listed with each case);
 *  - flush (an unfinished character is one U+FFFD, the stream starts over),
 *    the end-of-text token, and errors: NULL arguments, an id outside the
 *    vocabulary and allocation failures leave the stream as it was. */
#include "test_util.h"
#include "llmforge/data.h"

#define GPT2_SPEC "gpt2:" LF_SHARED_DIR "/data/gpt2"

static lf_tokenizer *open_gpt2(void) {
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, GPT2_SPEC, NULL));
    return t;
}

/* 1 when s[0..n) is well-formed UTF-8 (RFC 3629 / Unicode table 3-7),
 * written from the table independently of src/data. */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const unsigned c = s[i];
        int len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c <= 0x7F) len = 1;
        else if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) len = 3, lo = 0xA0;
        else if (c >= 0xE1 && c <= 0xEC) len = 3;
        else if (c == 0xED) len = 3, hi = 0x9F;
        else if (c >= 0xEE && c <= 0xEF) len = 3;
        else if (c == 0xF0) len = 4, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else if (c == 0xF4) len = 4, hi = 0x8F;
        else return 0;
        if (i + (size_t)len > n) return 0;
        for (int k = 1; k < len; k++) {
            const unsigned b = s[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
        }
        i += (size_t)len;
    }
    return 1;
}

/* A growing byte string. */
typedef struct buf {
    char *p;
    size_t n, cap;
} buf;
static void buf_add(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* Push ids one by one; check each output; return the concatenation with
 * the flush's output (which must be empty when flush_empty). */
static buf stream_all(const lf_tokenizer *t, const uint32_t *ids, size_t n, int flush_empty, const char *what) {
    lf_detok_stream *s;
    LF_ASSERT_OK(lf_detok_stream_create(&s, t));
    buf all = {0}, raw = {0};
    buf_add(&all, "", 0);
    for (size_t i = 0; i < n; i++) {
        char *out;
        size_t len;
        LF_ASSERT_OK(lf_detok_stream_push(s, ids[i], &out, &len));
        assert_non_null(out);
        assert_int_equal(strlen(out), len); /* NUL-terminated, no NUL inside for these texts */
        if (!utf8_valid((const unsigned char *)out, len))
            fail_msg("%s: push %zu (id %u) emitted ill-formed UTF-8", what, i, ids[i]);
        buf_add(&all, out, len);
        lf_free(out);
        /* everything complete so far is out: the rest of decode(ids[0..i]) is
         * an unfinished character (1-3 bytes, no complete one inside) */
        char *dec;
        size_t dl;
        LF_ASSERT_OK(lf_tokenizer_decode(t, ids + i, 1, &dec, &dl));
        buf_add(&raw, dec, dl);
        lf_free(dec);
        if (utf8_valid((const unsigned char *)raw.p, raw.n)) {
            if (all.n != raw.n || memcmp(all.p, raw.p, raw.n) != 0)
                fail_msg("%s: after push %zu the bytes so far are whole characters, but %zu of %zu are out", what, i,
                         all.n, raw.n);
        } else if (flush_empty) { /* a valid text: the held-back bytes are a prefix of its next character */
            if (!(all.n < raw.n && raw.n - all.n <= 3 && memcmp(all.p, raw.p, all.n) == 0))
                fail_msg("%s: after push %zu, %zu bytes out of %zu decoded", what, i, all.n, raw.n);
        }
    }
    char *out;
    size_t len;
    LF_ASSERT_OK(lf_detok_stream_flush(s, &out, &len));
    if (flush_empty) assert_int_equal(len, 0);
    assert_true(utf8_valid((const unsigned char *)out, len));
    buf_add(&all, out, len);
    lf_free(out);
    lf_detok_stream_free(s);
    free(raw.p);
    return all;
}

static const char *const texts[] = {
    "héllo wörld — naïve café, Ærøskøbing, Đặng Thị",
    "日本語のテキストと中文字符，한국어 텍스트도 있습니다。",
    "emoji: 🙂👍🏽 🇫🇷🇯🇵 👨‍👩‍👧‍👦 🐍🦀🧪 done",
    "math ∑∫≠√∞ and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝓢𝓬𝓻𝓲𝓹𝓽 ℌ — Ω≈ç",
    "mixed: a😀b中céd 🏳️‍🌈 ok",
};

static void test_text_pushes_equal_decode(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        uint32_t *ids;
        size_t n;
        LF_ASSERT_OK(lf_tokenizer_encode(t, texts[k], strlen(texts[k]), &ids, &n));
        /* the case is only a test if some token ends inside a character */
        int split = 0;
        for (size_t i = 0; i < n; i++) {
            char *d;
            size_t dl;
            LF_ASSERT_OK(lf_tokenizer_decode(t, ids + i, 1, &d, &dl));
            split |= !utf8_valid((const unsigned char *)d, dl);
            lf_free(d);
        }
        if (k > 0) assert_true(split); /* (the accented text's characters are whole tokens) */
        char *want;
        size_t wl;
        LF_ASSERT_OK(lf_tokenizer_decode(t, ids, n, &want, &wl));
        assert_int_equal(wl, strlen(texts[k]));
        buf got = stream_all(t, ids, n, 1, texts[k]);
        if (got.n != wl || memcmp(got.p, want, wl) != 0) fail_msg("'%s': stream gave '%s'", want, got.p);
        free(got.p);
        lf_free(want);
        lf_free(ids);
    }
    lf_tokenizer_free(t);
}

/* The id of the single-byte token for byte c (what LF_UTF8_BYTES encodes
 * an invalid byte to; ASCII encodes to its own single token too). */
static uint32_t byte_id(const lf_tokenizer *t, unsigned char c) {
    lf_encode_opts o = lf_encode_opts_default();
    o.invalid_utf8 = LF_UTF8_BYTES;
    uint32_t *ids;
    size_t n;
    const char s[1] = {(char)c};
    LF_ASSERT_OK(lf_tokenizer_encode_opts(t, s, 1, &o, &ids, &n));
    assert_int_equal(n, 1);
    const uint32_t id = ids[0];
    lf_free(ids);
    return id;
}

static void test_byte_by_byte(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        const size_t n = strlen(texts[k]);
        uint32_t *ids = malloc(sizeof(uint32_t) * n);
        for (size_t i = 0; i < n; i++) ids[i] = byte_id(t, (unsigned char)texts[k][i]);
        buf got = stream_all(t, ids, n, 1, texts[k]);
        if (got.n != n || memcmp(got.p, texts[k], n) != 0) fail_msg("'%s' byte by byte gave '%s'", texts[k], got.p);
        free(got.p);
        free(ids);
    }
    lf_tokenizer_free(t);
}

/* ------------------------------------------------------------- ill-formed sequences */

#define R "\xEF\xBF\xBD" /* U+FFFD */

static void test_ill_formed(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    /* input bytes -> Python's bytes.decode('utf-8', 'replace') (re-encoded) */
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"\xe4\xb8" "A", R "A"},                   /* truncated by an ASCII byte */
        {"\xed\xa0\x80", R R R},                   /* surrogate: ED's second byte is 80..9F */
        {"\xc0\xaf", R R},                         /* overlong lead */
        {"\xe0\x80\x80", R R R},                   /* overlong 3-byte */
        {"\xf4\x90\x80\x80", R R R R},             /* above U+10FFFF */
        {"\xe4\xb8\xe4\xb8\xad", R "\xe4\xb8\xad"}, /* a broken 中 then a whole one */
        {"\x80\xbf", R R},                         /* stray continuation bytes */
        {"a\xff\xfe" "b", "a" R R "b"},            /* never-valid bytes */
        {"\xf0\x9f\x98", R},                       /* unfinished at the end: flush */
        {"\xe2\x82", R},
        {"x\xf0\x9f\x98\x80y", "x\xf0\x9f\x98\x80y"}, /* 😀 whole across four byte tokens */
        {"\xf0\x9f\x98\xe4\xb8\xad", R "\xe4\xb8\xad"},
    };
    lf_encode_opts o = lf_encode_opts_default();
    o.invalid_utf8 = LF_UTF8_BYTES;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint32_t *ids;
        size_t n;
        LF_ASSERT_OK(lf_tokenizer_encode_opts(t, cases[c].in, strlen(cases[c].in), &o, &ids, &n));
        buf got = stream_all(t, ids, n, 0, cases[c].in);
        if (got.n != strlen(cases[c].want) || memcmp(got.p, cases[c].want, got.n) != 0)
            fail_msg("case %zu: got %zu bytes '%s', want '%s'", c, got.n, got.p, cases[c].want);
        free(got.p);
        lf_free(ids);
    }
    lf_tokenizer_free(t);
}

/* ------------------------------------------------------------- flush, eot, errors */

static void push_expect(lf_detok_stream *s, uint32_t id, const char *want) {
    char *out;
    size_t len;
    LF_ASSERT_OK(lf_detok_stream_push(s, id, &out, &len));
    if (len != strlen(want) || memcmp(out, want, len) != 0) fail_msg("push %u: got '%s', want '%s'", id, out, want);
    lf_free(out);
}

static void flush_expect(lf_detok_stream *s, const char *want) {
    char *out;
    size_t len;
    LF_ASSERT_OK(lf_detok_stream_flush(s, &out, &len));
    if (len != strlen(want) || memcmp(out, want, len) != 0) fail_msg("flush: got '%s', want '%s'", out, want);
    lf_free(out);
}

static void test_flush_eot_errors(void **state) {
    (void)state;
    lf_tokenizer *t = open_gpt2();
    const uint32_t e4 = byte_id(t, 0xe4), b8 = byte_id(t, 0xb8), ad = byte_id(t, 0xad);
    const uint32_t eot = (uint32_t)lf_tokenizer_eot(t);
    lf_detok_stream *s;
    LF_ASSERT_OK(lf_detok_stream_create(&s, t));

    /* flush: an unfinished character is one U+FFFD, then the stream starts over */
    flush_expect(s, "");
    push_expect(s, e4, "");
    push_expect(s, b8, "");
    flush_expect(s, R);
    flush_expect(s, "");
    push_expect(s, e4, "");
    push_expect(s, b8, "");
    push_expect(s, ad, "\xe4\xb8\xad");
    /* the end-of-text token breaks an unfinished character */
    push_expect(s, e4, "");
    push_expect(s, eot, R "<|endoftext|>");

    /* errors leave the held-back bytes where they were */
    push_expect(s, e4, "");
    char *out = (char *)1;
    size_t len = 7;
    assert_int_equal(lf_detok_stream_push(s, 60000, &out, &len), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("60000");
    assert_null(out);
    assert_int_equal(len, 0);
    assert_int_equal(lf_detok_stream_push(s, b8, NULL, &len), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_detok_stream_push(s, b8, &out, NULL), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_detok_stream_push(NULL, b8, &out, &len), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_detok_stream_flush(NULL, &out, &len), LF_ERR_INVALID_ARG);
    for (long k = 0; k < 3; k++) { /* the decode's, the input's, the output's allocation */
        lf_alloc_fail_after(k);
        const lf_status st = lf_detok_stream_push(s, b8, &out, &len);
        lf_alloc_fail_after(-1);
        assert_int_equal(st, LF_ERR_NOMEM);
        assert_null(out);
    }
    lf_alloc_fail_after(0);
    assert_int_equal(lf_detok_stream_flush(s, &out, &len), LF_ERR_NOMEM);
    lf_alloc_fail_after(-1);
    push_expect(s, b8, "");
    push_expect(s, ad, "\xe4\xb8\xad");
    lf_detok_stream_free(s);

    lf_detok_stream *s2 = (lf_detok_stream *)1;
    assert_int_equal(lf_detok_stream_create(&s2, NULL), LF_ERR_INVALID_ARG);
    assert_null(s2);
    assert_int_equal(lf_detok_stream_create(NULL, t), LF_ERR_INVALID_ARG);
    lf_alloc_fail_after(0);
    assert_int_equal(lf_detok_stream_create(&s2, t), LF_ERR_NOMEM);
    lf_alloc_fail_after(-1);
    assert_null(s2);
    lf_detok_stream_free(NULL);
    lf_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_pushes_equal_decode),
        cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_ill_formed),
        cmocka_unit_test(test_flush_eot_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
