/*
 * The "hf:" tokenizer kind (src/data/tokenizer_hf.c) against Hugging Face
 * tokenizers itself: the fixtures of tests/fixtures/hf_tok/ (written by
 * tools/reference/make_hf_tokenizer_fixture.py with tokenizers 0.23: five
 * trained tokenizer.json files shaped like GPT-2, Llama 3, Qwen2, SmolLM and
 * one exercising the regex rewriting, and the ids tokenizers gives for 64
 * strings each, with and without special tokens; a sixth with Qwen2's NFC
 * normalizer and its ids for 87 strings, many of them decomposed), GPT-2
 * itself as a tokenizer.json against tiktoken's ids, the rewritten Split
 * patterns' Unicode classes on every code point, NFC's tables (hf_nfc.c)
 * against tokenizers' on every code point, the safe cut points of the
 * parallel encoder, special tokens and the end-of-text rule, and bad files.
 */
#include <utf8proc.h>
#include "test_bpe_util.h"
#include "data/data_impl.h"
#include "data/hf_nfc.h"

#define HF_DIR LF_SOURCE_DIR "/tests/fixtures/hf_tok"

static const char *const g_names[] = {"gpt2", "llama3", "qwen2", "smollm", "oniguruma"};
#define N_NAMES (sizeof g_names / sizeof g_names[0])
/* the same and nfc (Qwen2 with its NFC normalizer: decode gives the normalized text) */
static const char *const g_all[] = {"gpt2", "llama3", "qwen2", "smollm", "oniguruma", "nfc"};
#define N_ALL (sizeof g_all / sizeof g_all[0])

static lf_tokenizer *open_spec(const char *spec) {
    lf_tokenizer *t = NULL;
    LF_ASSERT_OK(lf_tokenizer_open(&t, spec, NULL));
    return t;
}

static lf_tokenizer *open_fixture(const char *name) {
    char spec[512];
    snprintf(spec, sizeof spec, "hf:" HF_DIR "/%s.json", name);
    return open_spec(spec);
}

static void encode_o(const lf_tokenizer *t, const char *s, size_t len, const lf_encode_opts *o, uint32_t **ids,
                     size_t *n) {
    LF_ASSERT_OK(lf_tokenizer_encode_opts(t, s, len, o, ids, n));
}

static int ids_equal(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* The id tokenizer.json gives an added token (read with cJSON, not through llmforge). */
static int json_added_id(const char *name, const char *content) {
    char path[512], *buf;
    size_t len;
    snprintf(path, sizeof path, HF_DIR "/%s.json", name);
    LF_ASSERT_OK(lf_file_read_all(path, 0, &buf, &len));
    cJSON *root = cJSON_ParseWithLength(buf, len);
    assert_non_null(root);
    int id = -1;
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(root, "added_tokens")) {
        if (strcmp(cJSON_GetObjectItem(a, "content")->valuestring, content) == 0)
            id = (int)cJSON_GetObjectItem(a, "id")->valuedouble;
    }
    cJSON_Delete(root);
    lf_free(buf);
    return id;
}

/* ---------------------------------------------------------------- the fixtures */
static void test_fixture_ids(void **state) {
    (void)state;
    for (size_t k = 0; k < N_NAMES; k++) {
        lf_tokenizer *t = open_fixture(g_names[k]);
        char path[512];
        snprintf(path, sizeof path, HF_DIR "/%s.jsonl", g_names[k]);
        size_t n;
        bpe_case *cs = bpe_cases_load(path, &n);
        assert_true(n >= 100);
        bpe_check_cases(t, cs, n, g_names[k]); /* ids equal tokenizers', decode gives the text */
        bpe_cases_free(cs, n);
        lf_tokenizer_free(t);
    }
}

/* GPT-2 as a tokenizer.json built here from ../shared/data/gpt2 (the JSON the
 * fixture script builds and checks against tiktoken with tokenizers): the ids
 * of every tiktoken_gpt2.jsonl case. */
static char *gpt2_tokenizer_json(void) {
    char *enc, *bpe;
    size_t enc_len, bpe_len;
    LF_ASSERT_OK(lf_file_read_all(LF_SHARED_DIR "/data/gpt2/encoder.json", 0, &enc, &enc_len));
    LF_ASSERT_OK(lf_file_read_all(LF_SHARED_DIR "/data/gpt2/vocab.bpe", 0, &bpe, &bpe_len));
    cJSON *root = cJSON_Parse(
        "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":50256,\"content\":"
        "\"<|endoftext|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":"
        "true}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
        "\"trim_offsets\":true,\"use_regex\":true},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\","
        "\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},\"model\":{\"type\":\"BPE\","
        "\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\","
        "\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":false}}");
    assert_non_null(root);
    cJSON *model = cJSON_GetObjectItem(root, "model");
    cJSON_AddItemToObject(model, "vocab", cJSON_ParseWithLength(enc, enc_len));
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    char *line = strchr(bpe, '\n') + 1; /* after "#version: 0.2" */
    while (*line) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        if (*line) cJSON_AddItemToArray(merges, cJSON_CreateString(line));
        if (!eol) break;
        line = eol + 1;
    }
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    lf_free(enc);
    lf_free(bpe);
    return out;
}

static char *write_tmp(const char *dir, const char *name, const char *text) {
    char *path = lf__path_join(dir, name);
    LF_ASSERT_OK(lf_file_write_all(path, text, strlen(text)));
    return path;
}

static void test_gpt2_full(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir(), *json = gpt2_tokenizer_json();
    char *path = write_tmp(dir, "tokenizer.json", json);
    cJSON_free(json);
    char spec[600];
    snprintf(spec, sizeof spec, "hf:%s", path);
    lf_tokenizer *t = open_spec(spec);
    assert_int_equal(lf_tokenizer_vocab_size(t), 50257);
    assert_int_equal(lf_tokenizer_eot(t), 50256);
    size_t n;
    bpe_case *cs = bpe_cases_load(LF_SOURCE_DIR "/tests/fixtures/tiktoken_gpt2.jsonl", &n);
    assert_true(n > 2000);
    bpe_check_cases(t, cs, n, "GPT-2 as hf:tokenizer.json vs tiktoken");
    bpe_cases_free(cs, n);
    lf_tokenizer_free(t);
    free(path);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- Unicode classes of rewritten patterns */
static uint8_t *class_bitmap(const cJSON *root, const char *name) {
    uint8_t *m = calloc(0x110000, 1);
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(root, name)) {
        uint32_t a = (uint32_t)cJSON_GetArrayItem(r, 0)->valuedouble;
        uint32_t b = (uint32_t)cJSON_GetArrayItem(r, 1)->valuedouble;
        for (uint32_t c = a; c <= b; c++) m[c] = 1;
    }
    return m;
}

static int n_matches(lf__pretok_scan *sc, const unsigned char *s, size_t len) {
    int k = 0;
    size_t pos = 0, a, e;
    while (pos < len && lf__pretok_next(sc, s, len, pos, &a, &e) == LF_OK && e > a) {
        k++;
        pos = e;
    }
    return k;
}

static const char g_llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The Llama 3 pattern as llmforge compiles it, on every code point X, against
 * the classes the fixture script found equal in tokenizers (Oniguruma) and
 * tiktoken: "a"X is one piece iff X is \p{L}; "1"X iff \p{N}; "!"X iff X is
 * \p{L}, or neither \s nor \p{N}, or CR/LF (which [\r\n]* takes). */
static void test_unicode_classes(void **state) {
    (void)state;
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(LF_SOURCE_DIR "/tests/fixtures/tiktoken_unicode_classes.json", 0, &buf, &len));
    cJSON *root = cJSON_ParseWithLength(buf, len);
    assert_non_null(root);
    uint8_t *L = class_bitmap(root, "L"), *N = class_bitmap(root, "N"), *S = class_bitmap(root, "S");
    lf__pretok *p;
    LF_ASSERT_OK(lf__pretok_create_custom(&p, g_llama3, strlen(g_llama3), 0, "test"));
    lf__pretok_scan sc;
    LF_ASSERT_OK(lf__pretok_scan_init(&sc, p));
    size_t bad = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        unsigned char s[5];
        int k = lf__utf8_encode(cp, s + 1);
        int want[3] = {L[cp], N[cp], L[cp] || (!S[cp] && !N[cp]) || cp == '\r' || cp == '\n'};
        static const char lead[3] = {'a', '1', '!'};
        for (int c = 0; c < 3; c++) {
            s[0] = (unsigned char)lead[c];
            int one = n_matches(&sc, s, (size_t)k + 1) == 1;
            if (one != want[c] && bad++ < 10)
                print_error("U+%04X: lead '%c': one piece %d, want %d\n", cp, lead[c], one, want[c]);
        }
    }
    assert_int_equal(bad, 0);
    lf__pretok_scan_done(&sc);
    lf__pretok_free(p);
    free(L);
    free(N);
    free(S);
    cJSON_Delete(root);
    lf_free(buf);
}

/* The rewriting itself (bpe_pretok.c) on small patterns. */
static void check_pieces(const char *pattern, const char *text, const char *const *want, size_t n_want) {
    lf__pretok *p;
    LF_ASSERT_OK(lf__pretok_create_custom(&p, pattern, strlen(pattern), 0, "test"));
    lf__pretok_scan sc;
    LF_ASSERT_OK(lf__pretok_scan_init(&sc, p));
    size_t pos = 0, a, e, k = 0, len = strlen(text);
    while (pos <= len && lf__pretok_next(&sc, (const unsigned char *)text, len, pos, &a, &e) == LF_OK) {
        if (e == a) { /* the tests below have no empty matches */
            pos = a + 1;
            continue;
        }
        if (k >= n_want || e - a != strlen(want[k]) || memcmp(text + a, want[k], e - a) != 0)
            fail_msg("pattern %s on '%s': match %zu is '%.*s'", pattern, text, k, (int)(e - a), text + a);
        k++;
        pos = e;
    }
    assert_int_equal(k, n_want);
    lf__pretok_scan_done(&sc);
    lf__pretok_free(p);
}

static void test_pattern_rewriting(void **state) {
    (void)state;
    static const char *const hex[] = {"ab12", "f"};
    check_pieces("\\h+", "ab12 fg", hex, 2); /* Ruby: hex digits (PCRE2's \h is horizontal space) */
    static const char *const dot[] = {"a\nb"};
    check_pieces("(?m:a.b)", "a\nb", dot, 1); /* Ruby's m: dot matches newline */
    static const char *const eol[] = {"a", "a"};
    check_pieces("a$", "a\nba", eol, 2); /* $ at every line end */
    static const char *const bol[] = {"b"};
    check_pieces("^b", "a\nb", bol, 1);
    static const char *const mvs[] = {"a\xe1\xa0\x8e" "b"};
    check_pieces("\\S+", "a\xe1\xa0\x8e" "b", mvs, 1); /* U+180E is not \s (PCRE2's own \s takes it) */
    static const char *const cls[] = {"x", " "};
    check_pieces("[x\\s]+", "x\xe1\xa0\x8e ", cls, 2); /* \s inside a class too (\S inside one is left as is) */
    static const char *const lit[] = {"\\s"};
    check_pieces("\\Q\\s\\E", "a\\s", lit, 1); /* \Q..\E kept as it is */
    static const char *const newl[] = {"\xf0\x9e\x80\xb0"}; /* U+1E030, a letter since Unicode 15 */
    check_pieces("\\pL+", "1\xf0\x9e\x80\xb0", newl, 1);
    lf__pretok *p = NULL;
    assert_int_equal(lf__pretok_create_custom(&p, "[a-z&&[^b]]", 11, 0, "test"), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("set operations");
    assert_int_equal(lf__pretok_create_custom(&p, "(ab", 3, 0, "test"), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("offset");
    assert_null(p);
    LF_ASSERT_OK(lf__pretok_create_custom(&p, "[[:alpha:]\\s]+", 14, 0, "test"));
    assert_non_null(strstr(lf__pretok_source(p), "[:alpha:]"));
    assert_null(strstr(lf__pretok_source(p), "\\s"));
    lf__pretok_free(p);
}

/* ---------------------------------------------------------------- the NFC normalizer */

/* One case of nfc.jsonl: the text, tokenizers' ids, and the decode llmforge
 * must give (the normalized text; the script checks it is tokenizers'). */
typedef struct nfc_case {
    char *text, *decode; /* malloc'd, may hold NUL */
    size_t len, dlen;
    uint32_t *ids;
    size_t n;
    int allow_special;
} nfc_case;

static char *json_bytes(const cJSON *j, const char *key, const char *hex_key, size_t *len) {
    const cJSON *t = cJSON_GetObjectItem(j, key), *h = cJSON_GetObjectItem(j, hex_key);
    char *out;
    if (cJSON_IsString(t)) {
        *len = strlen(t->valuestring);
        out = malloc(*len + 1);
        memcpy(out, t->valuestring, *len + 1);
        return out;
    }
    assert_true(cJSON_IsString(h));
    *len = strlen(h->valuestring) / 2;
    out = malloc(*len + 1);
    for (size_t i = 0; i < *len; i++)
        out[i] = (char)(bpe_hexval(h->valuestring[2 * i]) << 4 | bpe_hexval(h->valuestring[2 * i + 1]));
    out[*len] = 0;
    return out;
}

static nfc_case *nfc_cases_load(size_t *count) {
    char *buf;
    size_t len, n = 0, cap = 64;
    LF_ASSERT_OK(lf_file_read_all(HF_DIR "/nfc.jsonl", 0, &buf, &len));
    nfc_case *cs = malloc(cap * sizeof *cs);
    for (char *line = buf; line < buf + len;) {
        char *eol = memchr(line, '\n', (size_t)(buf + len - line));
        if (!eol) eol = buf + len;
        if (eol > line) {
            cJSON *j = cJSON_ParseWithLength(line, (size_t)(eol - line));
            assert_non_null(j);
            if (n == cap) cs = realloc(cs, (cap *= 2) * sizeof *cs);
            nfc_case *c = &cs[n++];
            c->text = json_bytes(j, "text", "hex", &c->len);
            c->decode = json_bytes(j, "decode", "decode_hex", &c->dlen);
            c->allow_special = cJSON_IsTrue(cJSON_GetObjectItem(j, "allow_special"));
            const cJSON *ids = cJSON_GetObjectItem(j, "ids"), *e;
            c->n = (size_t)cJSON_GetArraySize(ids);
            c->ids = malloc((c->n + 1) * sizeof *c->ids);
            size_t k = 0;
            cJSON_ArrayForEach(e, ids) c->ids[k++] = (uint32_t)e->valuedouble;
            cJSON_Delete(j);
        }
        line = eol + 1;
    }
    lf_free(buf);
    *count = n;
    return cs;
}

static void nfc_cases_free(nfc_case *cs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(cs[i].text);
        free(cs[i].decode);
        free(cs[i].ids);
    }
    free(cs);
}

/* NFC of a valid UTF-8 text as hf_nfc.c computes it (malloc'd, NUL-terminated). */
static char *nfc_of(const char *s, size_t n, size_t *out_len) {
    lf__nfc_buf b = {NULL, 0, 0};
    LF_ASSERT_OK(lf__hf_nfc_append((const unsigned char *)s, n, &b));
    LF_ASSERT_OK(lf__nfc_buf_put(&b, "", 1));
    *out_len = b.len - 1;
    return (char *)b.p;
}

/* nfc.json (Qwen2's normalizer {"type": "NFC"}): tokenizers' ids on every
 * case, decode giving the normalized text, and the cases are not vacuous:
 * many texts change under NFC. */
static void test_nfc_fixture(void **state) {
    (void)state;
    lf_tokenizer *t = open_fixture("nfc");
    size_t n, changed = 0, specials = 0;
    nfc_case *cs = nfc_cases_load(&n);
    assert_true(n >= 150);
    int eot = json_added_id("nfc", "<|endoftext|>");
    assert_int_equal(lf_tokenizer_eot(t), eot);
    for (size_t i = 0; i < n; i++) {
        lf_encode_opts o = lf_encode_opts_default();
        o.allow_special = cs[i].allow_special;
        uint32_t *ids;
        size_t m;
        encode_o(t, cs[i].text, cs[i].len, &o, &ids, &m);
        size_t first = 0;
        while (first < m && first < cs[i].n && ids[first] == cs[i].ids[first]) first++;
        if (m != cs[i].n || first < m)
            fail_msg("nfc case %zu (%.60s): %zu ids, want %zu; first difference at %zu (%u vs %u)", i, cs[i].text, m,
                     cs[i].n, first, first < m ? ids[first] : 0, first < cs[i].n ? cs[i].ids[first] : 0);
        char *back;
        size_t bl;
        LF_ASSERT_OK(lf_tokenizer_decode(t, ids, m, &back, &bl));
        if (bl != cs[i].dlen || memcmp(back, cs[i].decode, bl) != 0)
            fail_msg("nfc case %zu (%.60s): decode is '%.60s', want '%.60s'", i, cs[i].text, back, cs[i].decode);
        changed += cs[i].len != cs[i].dlen || memcmp(cs[i].text, cs[i].decode, cs[i].len) != 0;
        for (size_t k = 0; k < m; k++) specials += ids[k] == (uint32_t)eot;
        lf_free(back);
        lf_free(ids);
    }
    print_message("nfc: %zu cases equal tokenizers' ids, %zu of them normalized\n", n, changed);
    assert_true(changed >= 30); /* 19 of the strings are not NFC, and each is there twice */
    assert_true(specials >= 4);
    nfc_cases_free(cs, n);
    lf_tokenizer_free(t);
}

static uint8_t *ranges_bitmap(const cJSON *ranges) {
    uint8_t *m = calloc(0x110000, 1);
    const cJSON *r;
    cJSON_ArrayForEach(r, ranges) {
        uint32_t a = (uint32_t)cJSON_GetArrayItem(r, 0)->valuedouble;
        uint32_t b = (uint32_t)cJSON_GetArrayItem(r, 1)->valuedouble;
        assert_true(a <= b && b < 0x110000);
        for (uint32_t c = a; c <= b; c++) m[c] = 1;
    }
    return m;
}

static char *utf8proc_nfc(const char *s, size_t n, size_t *out_len) {
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    assert_true(m >= 0);
    *out_len = (size_t)m;
    return (char *)out;
}

/* hf_nfc.c's tables against tests/fixtures/hf_tok/nfc_unicode.json (what
 * the fixture script found by comparing tokenizers' NFC with utf8proc's on
 * every code point): the pass-through table is the file's, and every mark
 * and composite of the utf8proc linked here is one tokenizers has or is
 * passed through (a newer utf8proc, with marks of a later Unicode, fails
 * here, naming them). Then the premises of hf_nfc.c: code points below
 * U+0300 never change, cutting before ASCII changes nothing, pass-through
 * code points are kept and cut the text. */
static void test_nfc_tables(void **state) {
    (void)state;
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(HF_DIR "/nfc_unicode.json", 0, &buf, &len));
    cJSON *root = cJSON_ParseWithLength(buf, len);
    assert_non_null(root);
    uint8_t *pass = ranges_bitmap(cJSON_GetObjectItem(root, "pass_through"));
    uint8_t *marks = ranges_bitmap(cJSON_GetObjectItem(root, "tokenizers_marks"));
    uint8_t *comp = calloc(0x110000, 1);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "tokenizers_composites")) comp[(uint32_t)c->valuedouble] = 1;
    size_t bad = 0, n_pass = 0, n_comp = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        n_pass += pass[cp];
        if (lf__hf_nfc_pass_through(cp) != pass[cp] && bad++ < 10)
            print_error("U+%04X: hf_nfc.c passes it through: %d, nfc_unicode.json: %d\n", cp,
                        lf__hf_nfc_pass_through(cp), pass[cp]);
        if (utf8proc_get_property((utf8proc_int32_t)cp)->combining_class > 0 && !marks[cp] && !pass[cp] &&
            bad++ < 10)
            print_error("U+%04X is a combining mark in utf8proc %s (Unicode %s), not in tokenizers' tables nor "
                        "passed through: extend hf_nfc.c's table (the fixture script derives it)\n",
                        cp, utf8proc_version(), utf8proc_unicode_version());
        utf8proc_int32_t d[4];
        int last = 0;
        utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)cp, d, 4, UTF8PROC_DECOMPOSE, &last);
        if (k == 2 && !(cp >= 0xAC00 && cp <= 0xD7A3)) {
            unsigned char pair[8];
            size_t pl = (size_t)lf__utf8_encode((uint32_t)d[0], pair);
            pl += (size_t)lf__utf8_encode((uint32_t)d[1], pair + pl);
            size_t ml;
            char *m = utf8proc_nfc((const char *)pair, pl, &ml);
            unsigned char one[4];
            int ol = lf__utf8_encode(cp, one);
            if (ml == (size_t)ol && memcmp(m, one, ml) == 0) { /* a primary composite */
                n_comp++;
                if (!comp[cp] && !pass[d[1]] && bad++ < 10)
                    print_error("U+%04X: utf8proc composes it, tokenizers does not, and U+%04X is not passed "
                                "through\n", cp, (unsigned)d[1]);
            }
            free(m);
        }
    }
    assert_int_equal(bad, 0);
    assert_true(n_pass >= 100 && n_comp >= 680);
    /* every string of one or two code points below U+0300 is NFC (lf__hf_nfc_needed) */
    for (uint32_t a = 0; a < 0x300; a++) {
        assert_int_equal(utf8proc_get_property((utf8proc_int32_t)a)->combining_class, 0);
        for (uint32_t b = 0; b < 0x300; b++) {
            unsigned char s[4];
            size_t sl = (size_t)lf__utf8_encode(a, s);
            sl += (size_t)lf__utf8_encode(b, s + sl);
            size_t ml;
            char *m = utf8proc_nfc((const char *)s, sl, &ml);
            if (ml != sl || memcmp(m, s, sl) != 0) fail_msg("U+%04X U+%04X changes under NFC", a, b);
            free(m);
            assert_int_equal(lf__hf_nfc_needed(s, sl), 0);
        }
    }
    assert_int_equal(lf__hf_nfc_needed((const unsigned char *)"\xcc\x80", 2), 1); /* U+0300 */
    /* pieces: 300 KB of decomposed words between ASCII, and 200 KB without ASCII, equal utf8proc on the whole */
    static const char *const words[] = {"cafe\xcc\x81", " ",     "A\xcc\x8angstro\xcc\x88m",
                                        "\n",            "\xe1\x84\x80\xe1\x85\xa1", "q\xcc\x87\xcc\xa3",
                                        "plain",         "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"};
    size_t cap = 320000, at = 0;
    char *big = malloc(cap);
    for (unsigned k = 0; at + 16 < cap; k = k * 1103515245u + 12345u) {
        const char *w = words[(k >> 16) % 8];
        memcpy(big + at, w, strlen(w));
        at += strlen(w);
    }
    size_t l1, l2;
    char *ours = nfc_of(big, at, &l1), *theirs = utf8proc_nfc(big, at, &l2);
    assert_true(l1 == l2 && memcmp(ours, theirs, l1) == 0 && l1 < at);
    free(ours);
    free(theirs);
    for (at = 0; at + 6 <= 200000; at += 6) /* L V: one syllable each */
        memcpy(big + at, "\xe1\x84\x80\xe1\x85\xa1", 6);
    ours = nfc_of(big, at, &l1);
    theirs = utf8proc_nfc(big, at, &l2);
    assert_true(l1 == l2 && memcmp(ours, theirs, l1) == 0 && l1 == at / 2);
    free(ours);
    free(theirs);
    free(big);
    /* pass-through code points: kept, and nothing joins across them */
#define NFC_EX(a, b) {a, sizeof a - 1, b, sizeof b - 1}
    static const struct {
        const char *in;
        size_t inl;
        const char *want;
        size_t wl;
    } ex[] = {
        NFC_EX("a\xcc\x81", "\xc3\xa1"),                                 /* a U+0301 -> U+00E1 */
        NFC_EX("a\xe1\xb7\xba\xcc\x81", "a\xe1\xb7\xba\xcc\x81"),       /* U+1DFA blocks (utf8proc: U+00E1 U+1DFA) */
        NFC_EX("x\xcc\x81\xe1\xb7\xba", "x\xcc\x81\xe1\xb7\xba"),       /* no reordering across it */
        NFC_EX("\xea\xb0\x80\xe1\x86\xa7", "\xea\xb0\x80\xe1\x86\xa7"), /* U+AC00 U+11A7 (utf8proc < 2.11: U+AC00) */
        NFC_EX("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"), /* L V T -> U+AC01 */
        NFC_EX("\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0", "\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0"), /* U+11935 U+11930 stay */
        NFC_EX("e\xcc\x81\xe1\xb7\xba" "e\xcc\x81", "\xc3\xa9\xe1\xb7\xba\xc3\xa9"), /* both sides normalized */
        NFC_EX("\xe2\x84\xa6", "\xce\xa9"),                               /* U+2126 OHM -> U+03A9 */
        NFC_EX("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"),               /* U+0958, excluded: stays decomposed */
        NFC_EX("a\x00\xcc\x81", "a\x00\xcc\x81"),                         /* NUL is a starter like any */
    };
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        char *got = nfc_of(ex[i].in, ex[i].inl, &l1);
        if (l1 != ex[i].wl || memcmp(got, ex[i].want, l1) != 0) fail_msg("NFC example %zu: got %zu bytes", i, l1);
        free(got);
    }
    /* invalid UTF-8 is the caller's to cut out: refused, not a crash */
    lf__nfc_buf b = {NULL, 0, 0};
    assert_int_equal(lf__hf_nfc_append((const unsigned char *)"e\xcc\x81\xff", 4, &b), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("invalid UTF-8 at byte offset 3");
    free(b.p);
    print_message("NFC tables: %zu code points passed through, %zu composites checked (utf8proc %s, Unicode %s)\n",
                  n_pass, n_comp, utf8proc_version(), utf8proc_unicode_version());
    free(pass);
    free(marks);
    free(comp);
    cJSON_Delete(root);
    lf_free(buf);
}

/* ---------------------------------------------------------------- cuts and threads */

/* The cut rule of each fixture (tokenizer_hf.c): GPT-2's for the ByteLevel
 * regex (gpt2, smollm), "whitespace after an ASCII letter or digit" for the
 * Llama 3 and Qwen2 patterns (nfc has Qwen2's), none for the unknown
 * oniguruma pattern. */
static int may_cut(const char *name, const char *s, size_t len, size_t p) {
    if (!strcmp(name, "oniguruma")) return 0;
    if (!strcmp(name, "llama3") || !strcmp(name, "qwen2") || !strcmp(name, "nfc")) {
        unsigned char c = (unsigned char)s[p], d = (unsigned char)s[p - 1];
        int ws = c == ' ' || (c >= '\t' && c <= '\r');
        int alnum = (d >= '0' && d <= '9') || (d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z');
        return ws && alnum;
    }
    return lf__bpe_cut(s, len, p) == p;
}

/* Every allowed cut of every fixture text: both sides encoded alone give the
 * ids of the whole. */
static void test_cut_points(void **state) {
    (void)state;
    for (size_t k = 0; k < N_ALL; k++) {
        lf_tokenizer *t = open_fixture(g_all[k]);
        char path[512];
        snprintf(path, sizeof path, HF_DIR "/%s.jsonl", g_all[k]);
        size_t n, cuts = 0;
        bpe_case *cs = bpe_cases_load(path, &n);
        for (size_t i = 0; i < n; i++) {
            lf_encode_opts o = lf_encode_opts_default();
            o.allow_special = cs[i].allow_special;
            o.invalid_utf8 = LF_UTF8_BYTES;
            uint32_t *all, *l, *r;
            size_t na, nl, nr;
            encode_o(t, cs[i].text, cs[i].len, &o, &all, &na);
            for (size_t p = 1; p < cs[i].len; p++) {
                if (!may_cut(g_all[k], cs[i].text, cs[i].len, p)) continue;
                encode_o(t, cs[i].text, p, &o, &l, &nl);
                encode_o(t, cs[i].text + p, cs[i].len - p, &o, &r, &nr);
                if (nl + nr != na || !ids_equal(all, nl, l, nl) || !ids_equal(all + nl, nr, r, nr))
                    fail_msg("%s case %zu: cut at %zu changes the ids", g_all[k], i, p);
                lf_free(l);
                lf_free(r);
                cuts++;
            }
            lf_free(all);
        }
        print_message("%s: %zu cut points checked\n", g_all[k], cuts);
        if (strcmp(g_all[k], "oniguruma") != 0) assert_true(cuts > 100);
        bpe_cases_free(cs, n);
        lf_tokenizer_free(t);
    }
    /* GPT-2's rule is not safe for the Llama 3 pattern: ".\n" is one piece there */
    lf_tokenizer *t = open_fixture("llama3");
    lf_encode_opts o = lf_encode_opts_default();
    uint32_t *all, *l, *r;
    size_t na, nl, nr;
    encode_o(t, "x.\n\ny", 5, &o, &all, &na);
    encode_o(t, "x.", 2, &o, &l, &nl);
    encode_o(t, "\n\ny", 3, &o, &r, &nr);
    assert_true(nl + nr != na || !ids_equal(all, nl, l, nl));
    lf_free(all);
    lf_free(l);
    lf_free(r);
    lf_tokenizer_free(t);
}

/* A text of at least `min` bytes: tinyshakespeare, then the fixture texts
 * (specials, CJK, emoji) joined by newlines. */
static char *big_text(const char *name, size_t *len) {
    char *shakes;
    size_t sl;
    LF_ASSERT_OK(lf_file_read_all(LF_SHARED_DIR "/data/tinyshakespeare.txt", 0, &shakes, &sl));
    char path[512];
    snprintf(path, sizeof path, HF_DIR "/%s.jsonl", name);
    size_t n;
    bpe_case *cs = bpe_cases_load(path, &n);
    size_t cap = sl + 1, at = 0;
    for (size_t i = 0; i < n; i++) cap += 4 * (cs[i].len + 1);
    char *s = malloc(cap);
    memcpy(s, shakes, sl);
    at = sl;
    for (int rep = 0; rep < 4; rep++)
        for (size_t i = 0; i < n; i++) {
            memcpy(s + at, cs[i].text, cs[i].len);
            at += cs[i].len;
            s[at++] = '\n';
        }
    bpe_cases_free(cs, n);
    lf_free(shakes);
    *len = at;
    return s;
}

static void test_parallel_equals_serial(void **state) {
    (void)state;
    for (size_t k = 0; k < N_ALL; k++) {
        lf_tokenizer *t = open_fixture(g_all[k]);
        size_t len;
        char *text = big_text(g_all[k], &len);
        for (int allow = 0; allow < 2; allow++) {
            lf_encode_opts o = lf_encode_opts_default();
            o.allow_special = allow;
            uint32_t *a, *b;
            size_t na, nb;
            LF_ASSERT_OK(lf_tokenizer_encode_opts(t, text, len, &o, &a, &na));
            LF_ASSERT_OK(lf_tokenizer_encode_parallel(t, text, len, &o, 3, &b, &nb));
            if (!ids_equal(a, na, b, nb)) fail_msg("%s: parallel ids differ from serial", g_all[k]);
            char *back;
            size_t bl;
            LF_ASSERT_OK(lf_tokenizer_decode(t, a, na, &back, &bl));
            if (strcmp(g_all[k], "nfc") != 0) {
                assert_true(bl == len && memcmp(back, text, len) == 0);
            } else { /* the normalized text: canonically equivalent to the text, and changed */
                size_t l1, l2;
                char *n1 = nfc_of(back, bl, &l1), *n2 = nfc_of(text, len, &l2);
                assert_true(l1 == l2 && memcmp(n1, n2, l1) == 0);
                assert_true(bl != len || memcmp(back, text, len) != 0);
                free(n1);
                free(n2);
            }
            lf_free(back);
            lf_free(a);
            lf_free(b);
        }
        free(text);
        lf_tokenizer_free(t);
    }
}

/* ---------------------------------------------------------------- model options, specials, end of text */

static void test_ignore_merges(void **state) {
    (void)state;
    static const char w[] = " Supercalifragilistic zyzzyva quixotic";
    lf_tokenizer *t = open_fixture("llama3");
    lf_encode_opts o = lf_encode_opts_default();
    uint32_t *on, *off;
    size_t n_on, n_off;
    encode_o(t, w, strlen(w), &o, &on, &n_on);
    assert_int_equal(n_on, 3); /* the fixture adds each word to model.vocab; no merge makes it */
    /* the same file with ignore_merges false: the words are merged from bytes */
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(HF_DIR "/llama3.json", 0, &buf, &len));
    static const char key[] = "\"ignore_merges\":true";
    char *flag = strstr(buf, key);
    assert_non_null(flag);
    char *edited = malloc(len + 8);
    size_t head = (size_t)(flag - buf), tail = len - head - (sizeof key - 1);
    memcpy(edited, buf, head);
    memcpy(edited + head, "\"ignore_merges\":0", 17); /* not a boolean: refused */
    memcpy(edited + head + 17, flag + sizeof key - 1, tail);
    edited[head + 17 + tail] = 0;
    char *dir = lf_test_tmpdir(), *path = write_tmp(dir, "tokenizer.json", edited);
    char spec[600];
    snprintf(spec, sizeof spec, "hf:%s", path);
    lf_tokenizer *t2 = NULL;
    assert_int_equal(lf_tokenizer_open(&t2, spec, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("model.ignore_merges must be true or false");
    memcpy(edited + head, "\"ignore_merges\":false", 21);
    memcpy(edited + head + 21, flag + sizeof key - 1, tail);
    edited[head + 21 + tail] = 0;
    free(path);
    path = write_tmp(dir, "tokenizer.json", edited);
    t2 = open_spec(spec);
    encode_o(t2, w, strlen(w), &o, &off, &n_off);
    assert_true(n_off > n_on);
    lf_free(on);
    lf_free(off);
    lf_tokenizer_free(t2);
    lf_tokenizer_free(t);
    free(edited);
    lf_free(buf);
    free(path);
    lf_test_rmrf(dir);
    free(dir);
}

static void test_specials_and_eot(void **state) {
    (void)state;
    static const char *const eot_name[N_NAMES] = {"<|endoftext|>", "<|end_of_text|>", "<|endoftext|>",
                                                  "<|endoftext|>", "<|endoftext|>"};
    for (size_t k = 0; k < N_NAMES; k++) {
        lf_tokenizer *t = open_fixture(g_names[k]);
        int want = json_added_id(g_names[k], eot_name[k]);
        assert_true(want >= 0);
        assert_int_equal(lf_tokenizer_eot(t), want);
        uint32_t id;
        LF_ASSERT_OK(lf_tokenizer_special_id(t, eot_name[k], &id));
        assert_int_equal(id, (uint32_t)want);
        assert_int_equal(lf_tokenizer_special_id(t, "<|nope|>", &id), LF_ERR_NOT_FOUND);
        LF_ASSERT_ERR_CONTAINS("no added token '<|nope|>'");
        lf_tokenizer_free(t);
    }
    lf_tokenizer *t = open_fixture("qwen2");
    lf_encode_opts plain = lf_encode_opts_default(), allow = plain;
    allow.allow_special = 1;
    uint32_t *ids;
    size_t n;
    /* a special token is text unless allowed */
    encode_o(t, "<|im_start|>", 12, &plain, &ids, &n);
    assert_true(n > 1);
    lf_free(ids);
    encode_o(t, "<|im_start|>", 12, &allow, &ids, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], (uint32_t)json_added_id("qwen2", "<|im_start|>"));
    lf_free(ids);
    /* a non-special added token is vocabulary: always one id (as tokenizers) */
    encode_o(t, "<tool_call>", 11, &plain, &ids, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], (uint32_t)json_added_id("qwen2", "<tool_call>"));
    lf_free(ids);
    /* the public default entry point is the plain one */
    LF_ASSERT_OK(lf_tokenizer_encode(t, "<|im_end|>", 10, &ids, &n));
    assert_true(n > 1);
    lf_free(ids);
    lf_tokenizer_free(t);
}

/* ---------------------------------------------------------------- hand-made files */

/* GPT-2's byte alphabet: the code point byte c stands for, as UTF-8. */
static void byte_char(int c, char out[4]) {
    int printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    int cp = c;
    if (!printable) {
        int k = 0;
        for (int d = 0; d < c; d++)
            if (!((d >= 0x21 && d <= 0x7E) || (d >= 0xA1 && d <= 0xAC) || (d >= 0xAE && d <= 0xFF))) k++;
        cp = 256 + k;
    }
    int n = lf__utf8_encode((uint32_t)cp, (unsigned char *)out);
    out[n] = 0;
}

/* A tokenizer.json: the 256 byte tokens as ids 0..255 (all but `drop_byte`
 * when >= 0), then the entries of extra_vocab (a JSON object), and the given
 * JSON texts (NULL: a default) for the other parts. */
typedef struct mini {
    const char *model_type, *extra_vocab, *merges, *added, *pre, *normalizer, *decoder, *model_extra;
    int drop_byte;
} mini;

static char *mini_json(const mini *m) {
    cJSON *root = cJSON_CreateObject(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
    for (int c = 0; c < 256; c++) {
        char s[4];
        byte_char(c, s);
        if (c != m->drop_byte) cJSON_AddNumberToObject(vocab, s, c);
    }
    if (m->extra_vocab) {
        cJSON *ex = cJSON_Parse(m->extra_vocab), *it;
        assert_non_null(ex);
        cJSON_ArrayForEach(it, ex) cJSON_AddNumberToObject(vocab, it->string, it->valuedouble);
        cJSON_Delete(ex);
    }
    cJSON_AddItemToObject(root, "added_tokens", cJSON_Parse(m->added ? m->added : "[]"));
    cJSON_AddItemToObject(root, "normalizer", cJSON_Parse(m->normalizer ? m->normalizer : "null"));
    cJSON_AddItemToObject(root, "pre_tokenizer",
                          cJSON_Parse(m->pre ? m->pre : "{\"type\":\"ByteLevel\",\"add_prefix_space\":false}"));
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse(m->decoder ? m->decoder : "{\"type\":\"ByteLevel\"}"));
    cJSON_AddStringToObject(model, "type", m->model_type ? m->model_type : "BPE");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddItemToObject(model, "merges", cJSON_Parse(m->merges ? m->merges : "[]"));
    if (m->model_extra) { /* replaces or adds model fields */
        cJSON *ex = cJSON_Parse(m->model_extra), *it;
        assert_non_null(ex);
        while ((it = ex->child) != NULL) {
            cJSON_DetachItemViaPointer(ex, it);
            char key[64]; /* the replace frees it->string before copying the key */
            snprintf(key, sizeof key, "%s", it->string);
            if (cJSON_GetObjectItemCaseSensitive(model, key))
                cJSON_ReplaceItemInObjectCaseSensitive(model, key, it);
            else
                cJSON_AddItemToObject(model, key, it);
        }
        cJSON_Delete(ex);
    }
    cJSON_AddItemToObject(root, "model", model);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* Open `json` written to DIR/tokenizer.json; returns the status. */
static lf_status open_json(const char *dir, const char *json, lf_tokenizer **t) {
    char *path = write_tmp(dir, "tokenizer.json", json);
    char spec[600];
    snprintf(spec, sizeof spec, "hf:%s", path);
    free(path);
    return lf_tokenizer_open(t, spec, NULL); /* which sets *t to NULL on failure */
}

static lf_status open_mini(const char *dir, const mini *m, lf_tokenizer **t) {
    char *json = mini_json(m);
    lf_status st = open_json(dir, json, t);
    cJSON_free(json);
    return st;
}

static void test_minimal_files(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    lf_tokenizer *t;
    /* merges only where listed: "ab" is a token, but without its merge "ab" stays two bytes */
    mini m = {.extra_vocab = "{\"ab\":256,\"abc\":257,\"bc\":258}", .merges = "[[\"a\", \"b\"], [\"ab\", \"c\"]]",
              .drop_byte = -1};
    LF_ASSERT_OK(open_mini(dir, &m, &t));
    uint32_t *ids;
    size_t n;
    LF_ASSERT_OK(lf_tokenizer_encode(t, "abc bc", 6, &ids, &n));
    uint32_t want[] = {257, ' ', 'b', 'c'}; /* no merge makes "bc": two bytes, though it is a token */
    assert_true(ids_equal(ids, n, want, 4));
    lf_free(ids);
    assert_int_equal(lf_tokenizer_eot(t), -1); /* no end-of-text candidate */
    lf_tokenizer_free(t);
    /* end-of-text order: <|im_end|> before </s>; an unused id (holes) decodes to an error */
    m = (mini){.added = "[{\"id\":300,\"content\":\"</s>\",\"special\":true},{\"id\":301,\"content\":\"<|im_end|>\","
                        "\"special\":true}]",
               .drop_byte = -1};
    LF_ASSERT_OK(open_mini(dir, &m, &t));
    assert_int_equal(lf_tokenizer_eot(t), 301);
    assert_int_equal(lf_tokenizer_vocab_size(t), 302);
    char *s;
    size_t sl;
    uint32_t hole = 280, past = 302, ok[2] = {301, 'x'};
    assert_int_equal(lf_tokenizer_decode(t, &hole, 1, &s, &sl), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("token id 280 at position 0");
    assert_int_equal(lf_tokenizer_decode(t, &past, 1, &s, &sl), LF_ERR_RANGE);
    LF_ASSERT_OK(lf_tokenizer_decode(t, ok, 2, &s, &sl));
    assert_string_equal(s, "<|im_end|>x");
    lf_free(s);
    lf_tokenizer_free(t);
    /* a merge list naming a pair twice keeps the later position (tokenizers' hash map) */
    m = (mini){.extra_vocab = "{\"ab\":256,\"bc\":257}", .merges = "[\"a b\", \"b c\", \"a b\"]", .drop_byte = -1};
    LF_ASSERT_OK(open_mini(dir, &m, &t));
    LF_ASSERT_OK(lf_tokenizer_encode(t, "abc", 3, &ids, &n));
    uint32_t want2[] = {'a', 257};
    assert_true(ids_equal(ids, n, want2, 2));
    lf_free(ids);
    lf_tokenizer_free(t);
    lf_test_rmrf(dir);
    free(dir);
}

typedef struct bad_case {
    const char *what;
    mini m;
    lf_status st;
    const char *needle;
} bad_case;

static void test_bad_files(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    static const bad_case cases[] = {
        {"model type", {.model_type = "WordPiece", .drop_byte = -1}, LF_ERR_UNSUPPORTED,
         "model type 'WordPiece' is not supported (byte-level BPE only)"},
        {"merge token missing", {.extra_vocab = "{\"ab\":256}", .merges = "[\"a b\", \"ab zz\"]", .drop_byte = -1},
         LF_ERR_FORMAT, "model.merges[1] (\"ab\" \"zz\"): \"zz\" is not in model.vocab"},
        {"merge result missing", {.merges = "[[\"a\", \"b\"]]", .drop_byte = -1}, LF_ERR_FORMAT,
         "the merged token \"ab\" is not in model.vocab"},
        {"merge shape", {.extra_vocab = "{\"ab\":256}", .merges = "[\"ab\"]", .drop_byte = -1}, LF_ERR_FORMAT,
         "model.merges[0] \"ab\" is not two tokens"},
        {"missing byte", {.drop_byte = 'q'}, LF_ERR_FORMAT, "byte 0x71 has no token"},
        {"duplicate id", {.extra_vocab = "{\"ab\":97}", .drop_byte = -1}, LF_ERR_FORMAT, "gives id 97 to both"},
        {"normalizer", {.normalizer = "{\"type\":\"NFKC\"}", .drop_byte = -1}, LF_ERR_UNSUPPORTED,
         "normalizer 'NFKC' is not supported (only NFC"},
        {"normalizer in a sequence",
         {.normalizer = "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Lowercase\"}]}",
          .drop_byte = -1},
         LF_ERR_UNSUPPORTED, "normalizer.normalizers[1] 'Lowercase' is not supported"},
        {"normalizer null member", {.normalizer = "{\"type\":\"Sequence\",\"normalizers\":[null]}", .drop_byte = -1},
         LF_ERR_FORMAT, "normalizer.normalizers[0] is null"},
        {"normalizer without type", {.normalizer = "{\"normalizers\":[]}", .drop_byte = -1}, LF_ERR_FORMAT,
         "normalizer must be an object with a string \"type\""},
        {"normalizer sequence list", {.normalizer = "{\"type\":\"Sequence\"}", .drop_byte = -1}, LF_ERR_FORMAT,
         "normalizer.normalizers must be an array, not missing"},
        {"added equal in NFC",
         {.normalizer = "{\"type\":\"NFC\"}",
          .added = "[{\"id\":300,\"content\":\"\\u00e9\",\"normalized\":true},{\"id\":301,\"content\":\"e\\u0301\","
                   "\"normalized\":true}]",
          .drop_byte = -1},
         LF_ERR_UNSUPPORTED, "(id 300) and \"e\xcc\x81\" (id 301) are the same text in NFC"},
        {"decoder", {.decoder = "{\"type\":\"WordPiece\"}", .drop_byte = -1}, LF_ERR_UNSUPPORTED,
         "decoder 'WordPiece' is not supported"},
        {"pre-tokenizer", {.pre = "{\"type\":\"Whitespace\"}", .drop_byte = -1}, LF_ERR_UNSUPPORTED,
         "the pre-tokenizer must end with ByteLevel"},
        {"no pre-tokenizer", {.pre = "null", .drop_byte = -1}, LF_ERR_UNSUPPORTED, "pre_tokenizer is null"},
        {"split behavior",
         {.pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
                 "\"behavior\":\"Removed\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
          .drop_byte = -1},
         LF_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0]: behavior 'Removed' is not supported"},
        {"bad regex",
         {.pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},"
                 "\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
          .drop_byte = -1},
         LF_ERR_FORMAT, "pre_tokenizer.pretokenizers[0]: tokenizer.json pre-tokeniser: PCRE2 cannot compile"},
        {"prefix space", {.pre = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}", .drop_byte = -1},
         LF_ERR_UNSUPPORTED, "add_prefix_space true is not supported"},
        {"byte fallback", {.model_extra = "{\"byte_fallback\":true}", .drop_byte = -1}, LF_ERR_UNSUPPORTED,
         "byte_fallback"},
        {"dropout", {.model_extra = "{\"dropout\":0.1}", .drop_byte = -1}, LF_ERR_UNSUPPORTED, "model.dropout"},
        {"added id taken", {.added = "[{\"id\":97,\"content\":\"<s>\",\"special\":true}]", .drop_byte = -1},
         LF_ERR_FORMAT, "has id 97, which model.vocab gives to \"a\""},
        {"added twice",
         {.added = "[{\"id\":300,\"content\":\"<s>\"},{\"id\":301,\"content\":\"<s>\"}]", .drop_byte = -1},
         LF_ERR_FORMAT, "added_tokens has \"<s>\" twice"},
        {"added lstrip", {.added = "[{\"id\":300,\"content\":\"<s>\",\"lstrip\":true}]", .drop_byte = -1},
         LF_ERR_UNSUPPORTED, "lstrip true is not supported"},
        {"added bytes differ",
         {.extra_vocab = "{\"\xc4\xa0x\":256}", .added = "[{\"id\":256,\"content\":\"\xc4\xa0x\"}]", .drop_byte = -1},
         LF_ERR_UNSUPPORTED, "standing for other bytes"},
        {"vocab not object", {.model_extra = "{\"vocab\":[1,2]}", .drop_byte = -1}, LF_ERR_FORMAT,
         "model.vocab is an array, not an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lf_tokenizer *t = (lf_tokenizer *)1;
        lf_status st = open_mini(dir, &cases[i].m, &t);
        if (st != cases[i].st || !strstr(lf_last_error(), cases[i].needle) || !strstr(lf_last_error(), dir))
            fail_msg("%s: status %s, message '%s' (want %s with '%s' and the file)", cases[i].what, lf_status_str(st),
                     lf_last_error(), lf_status_str(cases[i].st), cases[i].needle);
        assert_null(t);
    }
    /* not JSON, truncated, a missing file */
    lf_tokenizer *t;
    assert_int_equal(open_json(dir, "{\"model\": [}", &t), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("tokenizer.json': not valid JSON");
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(HF_DIR "/gpt2.json", 0, &buf, &len));
    buf[len / 2] = 0;
    assert_int_equal(open_json(dir, buf, &t), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("tokenizer.json': not valid JSON");
    LF_ASSERT_ERR_CONTAINS("truncated?");
    lf_free(buf);
    assert_int_equal(open_json(dir, "[1, 2]", &t), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("not a JSON object");
    char spec[600];
    snprintf(spec, sizeof spec, "hf:%s/nope/tokenizer.json", dir);
    assert_true(lf_tokenizer_open(&t, spec, NULL) != LF_OK);
    LF_ASSERT_ERR_CONTAINS("nope/tokenizer.json");
    assert_null(t);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- invalid UTF-8, decode */
static void test_invalid_utf8_and_decode(void **state) {
    (void)state;
    lf_tokenizer *t = open_fixture("gpt2");
    static const char bad[] = "ok <|endoftext|> \xff tail";
    lf_encode_opts o = lf_encode_opts_default();
    uint32_t *ids;
    size_t n;
    assert_int_equal(lf_tokenizer_encode_opts(t, bad, sizeof bad - 1, &o, &ids, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("invalid UTF-8 at byte offset 17 (byte 0xFF");
    o.invalid_utf8 = LF_UTF8_BYTES;
    o.allow_special = 1;
    encode_o(t, bad, sizeof bad - 1, &o, &ids, &n);
    int eots = 0;
    for (size_t i = 0; i < n; i++) eots += ids[i] == (uint32_t)lf_tokenizer_eot(t);
    assert_int_equal(eots, 1);
    char *s;
    size_t sl;
    LF_ASSERT_OK(lf_tokenizer_decode(t, ids, n, &s, &sl));
    assert_true(sl == sizeof bad - 1 && memcmp(s, bad, sl) == 0);
    lf_free(s);
    lf_free(ids);
    /* ids one at a time may cut a character: the pieces concatenate to the text */
    static const char cjk[] = "日本語のテキスト 😀";
    LF_ASSERT_OK(lf_tokenizer_encode(t, cjk, sizeof cjk - 1, &ids, &n));
    char joined[64];
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        LF_ASSERT_OK(lf_tokenizer_decode(t, &ids[i], 1, &s, &sl));
        assert_true(at + sl < sizeof joined);
        memcpy(joined + at, s, sl);
        at += sl;
        lf_free(s);
    }
    assert_true(at == sizeof cjk - 1 && memcmp(joined, cjk, at) == 0);
    lf_free(ids);
    uint32_t out = (uint32_t)lf_tokenizer_vocab_size(t);
    assert_int_equal(lf_tokenizer_decode(t, &out, 1, &s, &sl), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("not in the vocabulary");
    lf_tokenizer_free(t);
}

/* Hand-made files with an NFC normalizer: the three spellings tokenizers
 * accepts (NFC, a Sequence of it, Sequences nested with NFC twice and an
 * empty one) give the same ids, the bytes of the NFC text; added tokens with
 * normalized true are found in the normalized text by their normalized
 * content and decode to it, those with false only as written; a special
 * token cuts the text before it is normalized. An empty Sequence and null
 * change nothing. */
static void test_nfc_files(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    static const char added[] =
        "[{\"id\":300,\"content\":\"e\\u0301x\",\"normalized\":true},{\"id\":301,\"content\":\"o\\u0301\","
        "\"normalized\":false},{\"id\":302,\"content\":\"<e\",\"special\":true,\"normalized\":false}]";
    static const char *const forms[] = {
        "{\"type\":\"NFC\"}",
        "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}",
        "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Sequence\",\"normalizers\":[]},{\"type\":\"NFC\"},"
        "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}]}",
        "{\"type\":\"Sequence\",\"normalizers\":[]}",
        "null",
    };
    lf_encode_opts plain = lf_encode_opts_default(), allow = plain;
    allow.allow_special = 1;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        int nfc = f < 3;
        mini m = {.added = added, .normalizer = forms[f], .drop_byte = -1};
        lf_tokenizer *t;
        LF_ASSERT_OK(open_mini(dir, &m, &t));
        uint32_t *ids;
        size_t n;
        encode_o(t, "e\xcc\x81", 3, &plain, &ids, &n);
        uint32_t composed[] = {0xC3, 0xA9}, as_is[] = {'e', 0xCC, 0x81};
        assert_true(nfc ? ids_equal(ids, n, composed, 2) : ids_equal(ids, n, as_is, 3));
        lf_free(ids);
        encode_o(t, "\xc3\xa9x e\xcc\x81x", 8, &plain, &ids, &n); /* normalized: both spellings are the token */
        uint32_t both[] = {300, ' ', 300}, only_raw[] = {0xC3, 0xA9, 'x', ' ', 300};
        assert_true(nfc ? ids_equal(ids, n, both, 3) : ids_equal(ids, n, only_raw, 5));
        lf_free(ids);
        encode_o(t, "o\xcc\x81 \xc3\xb3", 6, &plain, &ids, &n); /* not normalized: only as written */
        uint32_t raw[] = {301, ' ', 0xC3, 0xB3};
        assert_true(ids_equal(ids, n, raw, 4));
        lf_free(ids);
        encode_o(t, "<e\xcc\x81", 4, &allow, &ids, &n); /* the special token first: the mark stays alone */
        uint32_t cut[] = {302, 0xCC, 0x81};
        assert_true(ids_equal(ids, n, cut, 3));
        lf_free(ids);
        encode_o(t, "<e\xcc\x81", 4, &plain, &ids, &n); /* as text, normalized with what follows */
        uint32_t joined[] = {'<', 0xC3, 0xA9}, apart[] = {'<', 'e', 0xCC, 0x81};
        assert_true(nfc ? ids_equal(ids, n, joined, 3) : ids_equal(ids, n, apart, 4));
        lf_free(ids);
        char *s;
        size_t sl;
        uint32_t tok = 300;
        LF_ASSERT_OK(lf_tokenizer_decode(t, &tok, 1, &s, &sl));
        if (nfc) assert_true(sl == 3 && memcmp(s, "\xc3\xa9x", 3) == 0); /* tokenizers' id_to_token */
        else assert_true(sl == 4 && memcmp(s, "e\xcc\x81x", 4) == 0);
        lf_free(s);
        tok = 301;
        LF_ASSERT_OK(lf_tokenizer_decode(t, &tok, 1, &s, &sl));
        assert_true(sl == 3 && memcmp(s, "o\xcc\x81", 3) == 0);
        lf_free(s);
        uint32_t id;
        LF_ASSERT_OK(lf_tokenizer_special_id(t, "e\xcc\x81x", &id)); /* by the file's content, as token_to_id */
        assert_int_equal(id, 300);
        assert_int_equal(lf_tokenizer_special_id(t, "\xc3\xa9x", &id), LF_ERR_NOT_FOUND);
        lf_tokenizer_free(t);
    }
    /* a normalized added token's content must be text */
    mini m = {.added = "[{\"id\":300,\"content\":\"a\xff\",\"normalized\":true}]", .normalizer = forms[0],
              .drop_byte = -1};
    lf_tokenizer *t;
    assert_int_equal(open_mini(dir, &m, &t), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("added_tokens[0].content is not valid UTF-8");
    assert_null(t);
    m.normalizer = NULL; /* without a normalizer it is bytes, as before */
    LF_ASSERT_OK(open_mini(dir, &m, &t));
    lf_tokenizer_free(t);
    /* Sequences nested 8 deep are read, 9 deep refused */
    for (int depth = 8; depth <= 9; depth++) {
        char norm[1024] = "";
        for (int i = 0; i < depth; i++) strcat(norm, "{\"type\":\"Sequence\",\"normalizers\":[");
        strcat(norm, "{\"type\":\"NFC\"}");
        for (int i = 0; i < depth; i++) strcat(norm, "]}");
        m = (mini){.normalizer = norm, .drop_byte = -1};
        lf_status st = open_mini(dir, &m, &t);
        if (depth == 8) {
            LF_ASSERT_OK(st);
            uint32_t *ids;
            size_t n;
            encode_o(t, "A\xcc\x8a", 3, &plain, &ids, &n);
            uint32_t ring[] = {0xC3, 0x85}; /* U+00C5 */
            assert_true(ids_equal(ids, n, ring, 2));
            lf_free(ids);
            lf_tokenizer_free(t);
        } else {
            assert_int_equal(st, LF_ERR_UNSUPPORTED);
            LF_ASSERT_ERR_CONTAINS("nested more than 8 deep");
        }
    }
    lf_test_rmrf(dir);
    free(dir);
}

/* Invalid UTF-8 with the NFC normalizer, as without one: an error naming the
 * caller's byte offset (not one in the normalized text), or with
 * LF_UTF8_BYTES each invalid byte its byte token and each valid run encoded
 * (and normalized) as it would be alone. */
static void test_nfc_invalid_utf8(void **state) {
    (void)state;
    lf_tokenizer *t = open_fixture("nfc");
    lf_encode_opts o = lf_encode_opts_default();
    uint32_t *ids;
    size_t n;
    static const char a[] = "e\xcc\x81 \xff";
    assert_int_equal(lf_tokenizer_encode_opts(t, a, sizeof a - 1, &o, &ids, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("invalid UTF-8 at byte offset 4 (byte 0xFF");
    static const char b[] = "<|endoftext|>e\xcc\x81\xc3";
    o.allow_special = 1;
    assert_int_equal(lf_tokenizer_encode_opts(t, b, sizeof b - 1, &o, &ids, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("invalid UTF-8 at byte offset 16 (byte 0xC3");
    static const char c[] = "ab \x80"; /* nothing to normalize: read in place */
    assert_int_equal(lf_tokenizer_encode_opts(t, c, sizeof c - 1, &o, &ids, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("invalid UTF-8 at byte offset 3 (byte 0x80");
    o.invalid_utf8 = LF_UTF8_BYTES;
    static const char x[] = "e\xcc\x81\xff" "e\xcc\x81 \xed\xa0\x80 A\xcc\x8a";
    static const char *const parts[] = {"e\xcc\x81", "\xff", "e\xcc\x81 ", "\xed", "\xa0", "\x80", " A\xcc\x8a"};
    uint32_t want[64];
    size_t nw = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        uint32_t *p;
        size_t np;
        encode_o(t, parts[i], strlen(parts[i]), &o, &p, &np);
        assert_true(nw + np <= 64);
        memcpy(want + nw, p, np * sizeof *p);
        nw += np;
        lf_free(p);
    }
    encode_o(t, x, sizeof x - 1, &o, &ids, &n);
    assert_true(ids_equal(ids, n, want, nw));
    char *s;
    size_t sl;
    LF_ASSERT_OK(lf_tokenizer_decode(t, ids, n, &s, &sl));
    static const char nfc[] = "\xc3\xa9\xff\xc3\xa9 \xed\xa0\x80 \xc3\x85";
    assert_true(sl == sizeof nfc - 1 && memcmp(s, nfc, sl) == 0);
    lf_free(s);
    lf_free(ids);
    /* and normalization happened: the decomposed and composed spellings give the same ids */
    uint32_t *d, *p;
    size_t nd, np;
    encode_o(t, "e\xcc\x81", 3, &o, &d, &nd);
    encode_o(t, "\xc3\xa9", 2, &o, &p, &np);
    assert_true(ids_equal(d, nd, p, np));
    lf_free(d);
    lf_free(p);
    lf_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_ids),
        cmocka_unit_test(test_gpt2_full),
        cmocka_unit_test(test_unicode_classes),
        cmocka_unit_test(test_pattern_rewriting),
        cmocka_unit_test(test_cut_points),
        cmocka_unit_test(test_parallel_equals_serial),
        cmocka_unit_test(test_ignore_merges),
        cmocka_unit_test(test_specials_and_eot),
        cmocka_unit_test(test_minimal_files),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_invalid_utf8_and_decode),
        cmocka_unit_test(test_nfc_fixture),
        cmocka_unit_test(test_nfc_tables),
        cmocka_unit_test(test_nfc_files),
        cmocka_unit_test(test_nfc_invalid_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
