/* Helpers shared by the byte-level BPE tests (test_bpe*.c): the tiktoken
 * fixtures written by tools/reference/make_tiktoken_fixture.py. */
#ifndef LF_TEST_BPE_UTIL_H
#define LF_TEST_BPE_UTIL_H
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/data.h"

typedef struct bpe_case {
    char *text; /* malloc'd, may hold NUL */
    size_t len;
    uint32_t *ids; /* malloc'd */
    size_t n;
    int allow_special;
} bpe_case;

static inline int bpe_hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Read a fixture: one {"text"|"hex", "ids", ["allow_special"]} per line. */
static inline bpe_case *bpe_cases_load(const char *path, size_t *count) {
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &buf, &len));
    size_t cap = 16, n = 0;
    bpe_case *cs = malloc(cap * sizeof *cs);
    char *line = buf;
    while (line < buf + len) {
        char *eol = memchr(line, '\n', (size_t)(buf + len - line));
        if (!eol) eol = buf + len;
        if (eol > line) {
            cJSON *j = cJSON_ParseWithLength(line, (size_t)(eol - line));
            if (!j) fail_msg("%s: line %zu is not JSON", path, n + 1);
            if (n == cap) cs = realloc(cs, (cap *= 2) * sizeof *cs);
            bpe_case *c = &cs[n++];
            memset(c, 0, sizeof *c);
            const cJSON *t = cJSON_GetObjectItem(j, "text"), *h = cJSON_GetObjectItem(j, "hex");
            if (cJSON_IsString(t)) {
                c->len = strlen(t->valuestring);
                c->text = malloc(c->len + 1);
                memcpy(c->text, t->valuestring, c->len + 1);
            } else {
                assert_true(cJSON_IsString(h));
                size_t hl = strlen(h->valuestring);
                c->len = hl / 2;
                c->text = malloc(c->len + 1);
                for (size_t i = 0; i < c->len; i++)
                    c->text[i] = (char)(bpe_hexval(h->valuestring[2 * i]) << 4 | bpe_hexval(h->valuestring[2 * i + 1]));
                c->text[c->len] = 0;
            }
            c->allow_special = cJSON_IsTrue(cJSON_GetObjectItem(j, "allow_special"));
            const cJSON *ids = cJSON_GetObjectItem(j, "ids"), *e;
            assert_true(cJSON_IsArray(ids));
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

static inline void bpe_cases_free(bpe_case *cs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(cs[i].text);
        free(cs[i].ids);
    }
    free(cs);
}

/* Every case: ids equal the fixture's, and decode gives the text back. */
static inline void bpe_check_cases(const lf_tokenizer *t, const bpe_case *cs, size_t n, const char *name) {
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        lf_encode_opts o = lf_encode_opts_default();
        o.allow_special = cs[i].allow_special;
        uint32_t *ids;
        size_t m;
        LF_ASSERT_OK(lf_tokenizer_encode_opts(t, cs[i].text, cs[i].len, &o, &ids, &m));
        size_t first = 0;
        while (first < m && first < cs[i].n && ids[first] == cs[i].ids[first]) first++;
        if (m != cs[i].n || first < m)
            fail_msg("%s case %zu (%.60s...): %zu ids, want %zu; first difference at %zu (%u vs %u)", name, i,
                     cs[i].text, m, cs[i].n, first, first < m ? ids[first] : 0,
                     first < cs[i].n ? cs[i].ids[first] : 0);
        char *back;
        size_t bl;
        LF_ASSERT_OK(lf_tokenizer_decode(t, ids, m, &back, &bl));
        if (bl != cs[i].len || memcmp(back, cs[i].text, bl) != 0) fail_msg("%s case %zu: round trip differs", name, i);
        lf_free(back);
        lf_free(ids);
        ok++;
    }
    print_message("%s: %zu of %zu cases equal tiktoken's ids and round-trip\n", name, ok, n);
}
#endif
