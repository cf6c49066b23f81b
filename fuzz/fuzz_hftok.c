/*
 * Fuzz harness: Hugging Face tokenizer.json files, the "hf:" kind
 * (src/data/tokenizer_hf.c, with bpe_merge.c, bpe_pretok.c, src/core/utf8.c).
 *
 * Input: one selector byte, then the payload.
 *   sel & 1 == 0  the payload is "tokenizer.json, NUL, text": the JSON is
 *                 written to a memfd (fuzz_util.h) and opened as "hf:PATH";
 *                 a refused file must leave a message and a NULL handle; an
 *                 accepted one gets the text checks below.
 *   sel & 1 == 1  the payload is text for one of the committed fixtures
 *                 (tests/fixtures/hf_tok/{gpt2,llama3,qwen2,smollm,
 *                 oniguruma,nfc}.json, picked by (sel >> 1) % 6, loaded once
 *                 per process; the directory is $LF_FUZZ_HF_DIR, else
 *                 LF_FUZZ_HF_DEFAULT set by fuzz/CMakeLists.txt).
 *
 * An open tokenizer: vocab_size >= 256, lf_tokenizer_eot is -1 or below it.
 * Checks on the text x (first 4096 bytes):
 *   1. encode(x), defaults: OK exactly when x is valid UTF-8, else
 *      LF_ERR_FORMAT with a message and no ids; on OK every id < V and
 *      decode(ids) == x byte for byte; for a file with a normalizer (NFC,
 *      nfc.json), decode(ids) is canonically equivalent to x instead:
 *      N(decode(ids)) == N(x), N = NFC of each maximal valid run (hf_nfc.c),
 *      invalid bytes kept (each stretch the tokenizer normalizes apart is
 *      canonically equivalent to its NFC, so the whole is).
 *   2. allow_special: the same.
 *   3. LF_UTF8_BYTES + allow_special: always OK (a piece over 4 GiB aside,
 *      impossible here), and decode == x.
 *   4. The parallel encoder's cut rule (ops->cut, internal, on a second
 *      handle opened through the kind's table): x cut at each place it
 *      allows (the first 64), the parts encoded alone (options of 3) and
 *      concatenated give the ids of x.
 *   5. x read as little-endian u16 ids modulo V + 2 (at most 512): decode is
 *      OK exactly when every id decodes alone, to the concatenation of those
 *      single decodes, NUL-terminated at its length.
 */
#include <cjson/cJSON.h>
#include "fuzz_util.h"
#include "llmforge/data.h"
#include "data/data_impl.h"
#include "data/hf_nfc.h"

#ifndef LF_FUZZ_HF_DEFAULT
#define LF_FUZZ_HF_DEFAULT "tests/fixtures/hf_tok"
#endif
#define TEXT_MAX 4096
#define MAX_CUTS 64
#define MAX_IDS 512

static const char *const g_fixtures[] = {"gpt2", "llama3", "qwen2", "smollm", "oniguruma", "nfc"};
#define N_FIXTURES (sizeof g_fixtures / sizeof g_fixtures[0])

typedef struct handle {
    lf_tokenizer *t; /* through the public API */
    void *state;     /* the same file through lf__tokenizer_hf_ops (for ops->cut) */
    int normalizes;  /* the file's "normalizer" is not null */
} handle;

static const lf__tokenizer_ops *const ops = &lf__tokenizer_hf_ops;

static void handle_close(handle *h) {
    lf_tokenizer_free(h->t);
    if (h->state) ops->free(h->state);
    h->t = NULL;
    h->state = NULL;
}

/* 1 when the tokenizer.json text has a normalizer (read here with cJSON). */
static int has_normalizer(const char *json, size_t len) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    const cJSON *n = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "normalizer") : NULL;
    int yes = n && !cJSON_IsNull(n);
    cJSON_Delete(root);
    return yes;
}

/* N(x): NFC of each maximal valid run, invalid bytes kept (malloc'd; *n). */
static unsigned char *canonical(const char *x, size_t len, size_t *n) {
    lf__nfc_buf b = {NULL, 0, 0};
    const unsigned char *s = (const unsigned char *)x;
    size_t at = 0;
    while (at < len) {
        size_t v = lf__utf8_valid_prefix(s + at, len - at);
        FUZZ_CHECK(lf__hf_nfc_append(s + at, v, &b) == LF_OK);
        at += v;
        if (at < len) FUZZ_CHECK(lf__nfc_buf_put(&b, s + at++, 1) == LF_OK);
    }
    FUZZ_CHECK(lf__nfc_buf_put(&b, "", 1) == LF_OK); /* never NULL */
    *n = b.len - 1;
    return b.p;
}

/* decode(ids) against the text: equal, or with a normalizer canonically equivalent. */
static void check_round_trip(const handle *h, const char *back, size_t bl, const char *x, size_t len) {
    if (!h->normalizes) {
        FUZZ_CHECK(bl == len && memcmp(back, x, len) == 0);
        return;
    }
    size_t n1, n2;
    unsigned char *a = canonical(back, bl, &n1), *b = canonical(x, len, &n2);
    FUZZ_CHECK(n1 == n2 && memcmp(a, b, n1) == 0);
    free(a);
    free(b);
}

/* Open path both ways; 0 when the file is refused (checked consistent). */
static int handle_open(handle *h, const char *path) {
    char spec[4200];
    snprintf(spec, sizeof spec, "hf:%s", path);
    h->t = NULL;
    h->state = NULL;
    h->normalizes = 0;
    lf_status st = lf_tokenizer_open(&h->t, spec, NULL);
    fuzz_note("lf_tokenizer_open", st);
    if (st != LF_OK) {
        FUZZ_CHECK(h->t == NULL);
        FUZZ_CHECK(lf_last_error()[0] != 0);
        return 0;
    }
    int v2 = 0;
    FUZZ_CHECK(ops->open(&h->state, &v2, path) == LF_OK);
    FUZZ_CHECK(v2 == lf_tokenizer_vocab_size(h->t));
    return 1;
}

static const handle *fixture(unsigned k) {
    static handle h[N_FIXTURES];
    static int loaded;
    if (!loaded) {
        const char *dir = getenv("LF_FUZZ_HF_DIR");
        if (!dir || !*dir) dir = LF_FUZZ_HF_DEFAULT;
        for (size_t i = 0; i < N_FIXTURES; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.json", dir, g_fixtures[i]);
            if (!handle_open(&h[i], path)) {
                fprintf(stderr, "fuzz_hftok: cannot open the fixture %s: %s\n", path, lf_last_error());
                abort();
            }
            h[i].normalizes = strcmp(g_fixtures[i], "nfc") == 0;
        }
        loaded = 1;
    }
    return &h[k % N_FIXTURES];
}

static int ids_equal(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* Checks 1-3: one option set; returns the ids (lf_alloc'd) on success. */
static uint32_t *check_encode(const handle *h, const char *x, size_t len, const lf_encode_opts *o, int must_ok,
                              size_t *n) {
    const lf_tokenizer *t = h->t;
    const int V = lf_tokenizer_vocab_size(t);
    uint32_t *ids = NULL;
    *n = 0;
    lf_status st = lf_tokenizer_encode_opts(t, x, len, o, &ids, n);
    fuzz_note("lf_tokenizer_encode_opts", st);
    if (st != LF_OK) {
        FUZZ_CHECK(!must_ok);
        FUZZ_CHECK(ids == NULL && *n == 0 && lf_last_error()[0] != 0);
        return NULL;
    }
    for (size_t i = 0; i < *n; i++) FUZZ_CHECK(ids[i] < (uint32_t)V);
    char *back = NULL;
    size_t bl = 0;
    FUZZ_CHECK(lf_tokenizer_decode(t, ids, *n, &back, &bl) == LF_OK);
    FUZZ_CHECK(back[bl] == 0);
    check_round_trip(h, back, bl, x, len);
    lf_free(back);
    return ids;
}

static void check_text(const handle *h, const char *x, size_t len) {
    const lf_tokenizer *t = h->t;
    const int V = lf_tokenizer_vocab_size(t);
    FUZZ_CHECK(V >= 256);
    int eot = lf_tokenizer_eot(t);
    FUZZ_CHECK(eot >= -1 && eot < V);
    int valid = lf__utf8_valid_prefix((const unsigned char *)x, len) == len;
    lf_encode_opts o = lf_encode_opts_default();
    size_t n;
    uint32_t *ids = check_encode(h, x, len, &o, 0, &n); /* 1 */
    FUZZ_CHECK((ids != NULL) == valid);
    if (!valid) FUZZ_CHECK(strstr(lf_last_error(), "invalid UTF-8 at byte offset") != NULL);
    lf_free(ids);
    o.allow_special = 1;
    ids = check_encode(h, x, len, &o, 0, &n); /* 2 */
    FUZZ_CHECK((ids != NULL) == valid);
    lf_free(ids);
    o.invalid_utf8 = LF_UTF8_BYTES;
    uint32_t *all = check_encode(h, x, len, &o, 1, &n); /* 3 */

    /* 4: the cut rule, through the kind's own table */
    size_t from = 1, cuts = 0, at = 0, m = 0;
    uint32_t *cat = malloc((n + 1) * sizeof *cat);
    FUZZ_CHECK(cat != NULL);
    while (cuts < MAX_CUTS && at < len) {
        size_t c = ops->cut(h->state, x, len, from > at + 1 ? from : at + 1);
        FUZZ_CHECK(c > at && c <= len);
        uint32_t *part = NULL;
        size_t np = 0;
        FUZZ_CHECK(ops->encode_ex(h->state, x + at, c - at, &o, at, &part, &np) == LF_OK);
        FUZZ_CHECK(m + np <= n);
        if (np) memcpy(cat + m, part, np * sizeof *part);
        m += np;
        lf_free(part);
        at = c;
        from = c + 1;
        cuts++;
    }
    if (at < len) {
        uint32_t *part = NULL;
        size_t np = 0;
        FUZZ_CHECK(ops->encode_ex(h->state, x + at, len - at, &o, at, &part, &np) == LF_OK);
        FUZZ_CHECK(m + np <= n);
        if (np) memcpy(cat + m, part, np * sizeof *part);
        m += np;
        lf_free(part);
    }
    FUZZ_CHECK(ids_equal(cat, m, all, n));
    free(cat);
    lf_free(all);

    /* 5: arbitrary ids */
    size_t k = len / 2 > MAX_IDS ? MAX_IDS : len / 2;
    uint32_t *raw = malloc((k + 1) * sizeof *raw);
    FUZZ_CHECK(raw != NULL);
    int all_ok = 1;
    size_t total = 0;
    size_t cap = 4096;
    char *expect = malloc(cap); /* grown below */
    FUZZ_CHECK(expect != NULL);
    for (size_t i = 0; i < k; i++) {
        uint32_t v = (uint32_t)(unsigned char)x[2 * i] | (uint32_t)(unsigned char)x[2 * i + 1] << 8;
        raw[i] = v % ((uint32_t)V + 2);
        char *s = NULL;
        size_t sl = 0;
        if (lf_tokenizer_decode(t, &raw[i], 1, &s, &sl) != LF_OK) {
            FUZZ_CHECK(s == NULL);
            all_ok = 0;
            continue;
        }
        if (total + sl + 1 > cap) {
            while (total + sl + 1 > cap) cap *= 2;
            expect = realloc(expect, cap);
            FUZZ_CHECK(expect != NULL);
        }
        memcpy(expect + total, s, sl);
        total += sl;
        lf_free(s);
    }
    char *s = NULL;
    size_t sl = 0;
    lf_status st = lf_tokenizer_decode(t, raw, k, &s, &sl);
    fuzz_note("lf_tokenizer_decode of the text as ids", st);
    FUZZ_CHECK((st == LF_OK) == all_ok);
    if (st == LF_OK) FUZZ_CHECK(sl == total && s[sl] == 0 && memcmp(s, expect, total) == 0);
    else FUZZ_CHECK(s == NULL);
    lf_free(s);
    free(expect);
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (sel & 1) {
        check_text(fixture(sel >> 1), (const char *)p, n > TEXT_MAX ? TEXT_MAX : n);
        return 0;
    }
    const uint8_t *nul = memchr(p, 0, n);
    size_t jlen = nul ? (size_t)(nul - p) : n;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t tlen = nul ? n - jlen - 1 : 0;
    handle h;
    if (handle_open(&h, fuzz_memfile(p, jlen))) {
        h.normalizes = has_normalizer((const char *)p, jlen);
        check_text(&h, text, tlen > TEXT_MAX ? TEXT_MAX : tlen);
        handle_close(&h);
    }
    return 0;
}
