/*
 * Fuzz harness: the byte-level BPE tokenizers (src/data/tokenizer_bpe.c,
 * bpe_merge.c, bpe_pretok.c, utf8.c) and the tiktoken rank-file loader.
 *
 * Loaded once per process (an error there is a broken setup: abort):
 *   - GPT-2, "gpt2:DIR", DIR = $LF_FUZZ_GPT2_DIR, else LF_FUZZ_GPT2_DEFAULT
 *     (../shared/data/gpt2 next to the source tree, set by fuzz/CMakeLists.txt);
 *   - a small trained BPE, "bpe:FILE", FILE = $LF_FUZZ_BPE_FILE, else
 *     LF_FUZZ_BPE_DEFAULT (tests/fixtures/tiktoken_bpe_shakespeare.tiktoken,
 *     1023 ranks written by `llmforge tokenizer train`).
 * At load every id below vocab_size must decode, so for these two "every id
 * < V is in use" is the oracle of the decode check.
 *
 * Input: one selector byte, then the payload.
 *   sel & 3    0, 1: GPT-2; 2: the trained BPE; 3: the payload is
 *              "rank file, NUL, text": the rank file is opened from a memfd
 *              (fuzz_util.h) as "tiktoken:" ("bpe:" when sel & 4); when it
 *              opens, the text checks run on that tokenizer.
 *   sel & 8    the decode check reads the text as u16 ids (else u32).
 *
 * Checks on the text x (all through the public API unless noted):
 *   1. encode(x), defaults: OK exactly when x is valid UTF-8 (checked here
 *      independently, RFC 3629), else LF_ERR_FORMAT with a message and no
 *      ids. On OK: n <= len, every id < V and not <|endoftext|>, and
 *      decode(ids) == x byte for byte.
 *   2. allow_special: as 1, and the <|endoftext|> ids are exactly the
 *      occurrences of its text in x.
 *   3. LF_UTF8_BYTES: always OK, decode == x, and the ids are those of the
 *      maximal valid runs encoded alone, each invalid byte as the token of
 *      that single byte (data.h's promise; the first 32 runs are compared).
 *      For valid x, the ids of check 1.
 *   4. LF_UTF8_BYTES + allow_special: always OK, decode == x.
 *   5. The parallel encoder's cut rule (lf__bpe_cut, internal): x cut at
 *      every place the rule allows (the first 64), the parts encoded alone
 *      and concatenated, gives the ids of x (options of 4).
 *   6. The merge (lf__bpe_merge, internal): the first 256 bytes of x as one
 *      piece gives the same ids with tiktoken's quadratic scan and with the
 *      heap, on tables rebuilt from the tokenizer's own decoded tokens
 *      (built for the two fixed tokenizers and for rank files of <= 4096 ids).
 *   7. The text read as little-endian u16/u32 ids modulo V + 2 (at most 1024
 *      ids): decode is OK exactly when every id is in use, its bytes are the
 *      concatenation of the ids' bytes (where the tables are rebuilt), the
 *      string is NUL-terminated at its length, and encoding those bytes
 *      (LF_UTF8_BYTES + allow_special) decodes back to them.
 */
#include "fuzz_util.h"
#include "llmforge/data.h"
#include "data/data_impl.h"

#ifndef LF_FUZZ_GPT2_DEFAULT
#define LF_FUZZ_GPT2_DEFAULT "../shared/data/gpt2"
#endif
#ifndef LF_FUZZ_BPE_DEFAULT
#define LF_FUZZ_BPE_DEFAULT "tests/fixtures/tiktoken_bpe_shakespeare.tiktoken"
#endif

#define EOT_TEXT "<|endoftext|>"
#define EOT_LEN (sizeof EOT_TEXT - 1)
#define MERGE_CHECK_BYTES 256
#define REBUILD_MAX_VOCAB 4096
#define DECODE_MAX_IDS 1024
#define MAX_CUTS 64
#define MAX_RUNS 32 /* check 3 compares the first runs only: each is an encode call */

typedef struct tok {
    lf_tokenizer *t;
    uint32_t V, eot;
    int all_in_use; /* every id < V decodes (checked at load) */
    lf__bpe *b;     /* ranks rebuilt from decode for checks 6 and 7; NULL when not built */
} tok;

/* Longest valid UTF-8 prefix of s[0, n), RFC 3629 (no overlongs, surrogates,
 * code points above U+10FFFF or truncated sequences; U+0000 is valid).
 * Written here rather than calling utf8.c so the two are checked against
 * each other. */
static size_t utf8_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            k = 2, cp = c & 0x1Fu, min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 3, cp = c & 0x0Fu, min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 4, cp = c & 0x07u, min = 0x10000;
        } else {
            return i;
        }
        if (n - i < k) return i;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + j] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k;
    }
    return n;
}

static size_t count_eot(const uint8_t *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i + EOT_LEN <= n; i++)
        if (s[i] == '<' && memcmp(s + i, EOT_TEXT, EOT_LEN) == 0) {
            c++;
            i += EOT_LEN - 1; /* the text has no border: occurrences never overlap */
        }
    return c;
}

/* decode(ids) must succeed and give exactly s[0, n). */
static void check_decodes_to(const tok *k, const uint32_t *ids, size_t m, const uint8_t *s, size_t n) {
    char *back = NULL;
    size_t blen = 0;
    lf_status st = lf_tokenizer_decode(k->t, ids, m, &back, &blen);
    fuzz_note("lf_tokenizer_decode (round trip)", st);
    FUZZ_CHECK(st == LF_OK);
    FUZZ_CHECK(back != NULL && blen == n && back[blen] == 0);
    FUZZ_CHECK(n == 0 || memcmp(back, s, n) == 0);
    lf_free(back);
}

static lf_status encode(const tok *k, const uint8_t *s, size_t n, int special, lf_utf8_policy pol, uint32_t **ids,
                        size_t *m) {
    lf_encode_opts o = lf_encode_opts_default();
    o.allow_special = special;
    o.invalid_utf8 = pol;
    return lf_tokenizer_encode_opts(k->t, (const char *)s, n, &o, ids, m);
}

/* ------------------------------------------------------------ rebuilt tables */

static void rebuilt_free(lf__bpe *b) {
    if (!b) return;
    lf__bpe_release(b);
    free(b);
}

/* The tokenizer's ranks as an lf__bpe (the id of <|endoftext|> and unused
 * ranks are holes), from single-id decodes: the tables bpe_merge.c builds
 * for the merge check, independent of the loader's parsing. */
static lf__bpe *rebuild(const tok *k) {
    lf__bpe *b = calloc(1, sizeof *b);
    size_t cap = 4096, at = 0;
    if (!b) return NULL;
    b->n_ranks = k->V;
    b->tok_off = calloc(k->V, sizeof *b->tok_off);
    b->tok_len = calloc(k->V, sizeof *b->tok_len);
    b->blob = malloc(cap);
    if (!b->tok_off || !b->tok_len || !b->blob) goto fail;
    for (uint32_t id = 0; id < k->V; id++) {
        if (id == k->eot) continue;
        char *s = NULL;
        size_t n = 0;
        if (lf_tokenizer_decode(k->t, &id, 1, &s, &n) != LF_OK) continue; /* unused rank */
        FUZZ_CHECK(n > 0);
        if (at + n > cap) {
            while (at + n > cap) cap *= 2;
            unsigned char *nb = realloc(b->blob, cap);
            if (!nb) {
                lf_free(s);
                goto fail;
            }
            b->blob = nb;
        }
        memcpy(b->blob + at, s, n);
        b->tok_off[id] = (uint32_t)at;
        b->tok_len[id] = (uint32_t)n;
        at += n;
        lf_free(s);
    }
    /* the loader accepted these tokens, so the same tokens must build again */
    FUZZ_CHECK(lf__bpe_build(b, "fuzz_bpe rebuilt ranks") == LF_OK);
    return b;
fail:
    rebuilt_free(b);
    return NULL;
}

/* ------------------------------------------------------------ tokenizers */

/* Invariants of any open BPE tokenizer: <|endoftext|> is the last id. */
static void tok_init(tok *k, lf_tokenizer *t) {
    memset(k, 0, sizeof *k);
    k->t = t;
    int V = lf_tokenizer_vocab_size(t);
    FUZZ_CHECK(V >= 257); /* the 256 bytes and <|endoftext|> */
    k->V = (uint32_t)V;
    uint32_t eot = 0;
    FUZZ_CHECK(lf_tokenizer_special_id(t, EOT_TEXT, &eot) == LF_OK);
    FUZZ_CHECK(eot == k->V - 1 && lf_tokenizer_eot(t) == (int)eot);
    FUZZ_CHECK(lf_tokenizer_special_id(t, "<|startoftext|>", &eot) == LF_ERR_NOT_FOUND);
    k->eot = k->V - 1;
}

static void load_fixed(tok *k, const char *env, const char *def, const char *kind) {
    const char *arg = getenv(env);
    if (!arg || !*arg) arg = def;
    char spec[4200];
    snprintf(spec, sizeof spec, "%s:%s", kind, arg);
    lf_tokenizer *t = NULL;
    if (lf_tokenizer_open(&t, spec, NULL) != LF_OK) {
        fprintf(stderr, "fuzz_bpe: cannot open '%s' (%s); set %s\n", spec, lf_last_error(), env);
        abort();
    }
    tok_init(k, t);
    k->b = rebuild(k);
    FUZZ_CHECK(k->b != NULL);
    for (uint32_t id = 0; id < k->V; id++) FUZZ_CHECK(id == k->eot || k->b->tok_len[id] > 0);
    k->all_in_use = 1;
}

/* ------------------------------------------------------------ checks */

static void check_text(const tok *k, const uint8_t *x, size_t n) {
    const size_t valid = utf8_prefix(x, n);
    uint32_t *ids[4] = {NULL, NULL, NULL, NULL};
    size_t m[4] = {0, 0, 0, 0};
    static const struct {
        int special;
        lf_utf8_policy pol;
    } mode[4] = {{0, LF_UTF8_STRICT}, {1, LF_UTF8_STRICT}, {0, LF_UTF8_BYTES}, {1, LF_UTF8_BYTES}};

    for (int c = 0; c < 4; c++) {
        lf_status st = encode(k, x, n, mode[c].special, mode[c].pol, &ids[c], &m[c]);
        fuzz_note("lf_tokenizer_encode_opts", st);
        if (mode[c].pol == LF_UTF8_STRICT && valid < n) { /* checks 1, 2: invalid UTF-8 is refused */
            FUZZ_CHECK(st == LF_ERR_FORMAT);
            FUZZ_CHECK(ids[c] == NULL && m[c] == 0 && lf_last_error()[0] != 0);
            continue;
        }
        FUZZ_CHECK(st == LF_OK && ids[c] != NULL && m[c] <= n);
        size_t eots = 0;
        for (size_t i = 0; i < m[c]; i++) {
            FUZZ_CHECK(ids[c][i] < k->V);
            eots += ids[c][i] == k->eot;
        }
        FUZZ_CHECK(eots == (mode[c].special ? count_eot(x, n) : 0));
        check_decodes_to(k, ids[c], m[c], x, n);
    }
    /* check 3: valid text encodes the same either way */
    if (valid == n) FUZZ_CHECK(m[2] == m[0] && memcmp(ids[2], ids[0], m[0] * sizeof *ids[0]) == 0);
    /* check 3: runs alone, invalid bytes as single-byte tokens */
    size_t at = 0, j = 0;
    for (int runs = 0; at < n && runs < MAX_RUNS; runs++) {
        size_t v = utf8_prefix(x + at, n - at);
        uint32_t *r = NULL;
        size_t rn = 0;
        FUZZ_CHECK(encode(k, x + at, v, 0, LF_UTF8_STRICT, &r, &rn) == LF_OK);
        FUZZ_CHECK(j + rn <= m[2] && memcmp(ids[2] + j, r, rn * sizeof *r) == 0);
        lf_free(r);
        j += rn;
        at += v;
        if (at == n) break;
        FUZZ_CHECK(j < m[2]);
        check_decodes_to(k, ids[2] + j, 1, x + at, 1);
        j++;
        at++;
    }
    FUZZ_CHECK(at < n || j == m[2]);

    /* check 5: cutting at every place the parallel encoder may cut (the
     * first MAX_CUTS of them) and encoding the parts alone gives the ids of
     * the whole */
    size_t got = 0, begin = 0;
    for (int cuts = 0; begin < n; cuts++) {
        size_t end = n;
        if (cuts < MAX_CUTS) {
            end = lf__bpe_cut((const char *)x, n, begin + 1);
            FUZZ_CHECK(end > begin && end <= n);
        }
        uint32_t *part = NULL;
        size_t pn = 0;
        FUZZ_CHECK(encode(k, x + begin, end - begin, 1, LF_UTF8_BYTES, &part, &pn) == LF_OK);
        FUZZ_CHECK(got + pn <= m[3] && memcmp(part, ids[3] + got, pn * sizeof *part) == 0);
        got += pn;
        lf_free(part);
        begin = end;
    }
    FUZZ_CHECK(got == m[3]);
    for (int c = 0; c < 4; c++) lf_free(ids[c]);

    /* check 6: quadratic scan and heap agree on one piece of raw bytes */
    size_t pn = n < MERGE_CHECK_BYTES ? n : MERGE_CHECK_BYTES;
    if (k->b && pn > 0) {
        uint32_t *s1 = malloc(pn * sizeof *s1), *s2 = malloc(pn * sizeof *s2);
        if (s1 && s2) {
            size_t n1 = lf__bpe_merge(k->b, x, pn, s1, 1), n2 = lf__bpe_merge(k->b, x, pn, s2, 2);
            FUZZ_CHECK(n1 != SIZE_MAX && n1 == n2 && n1 >= 1 && n1 <= pn);
            FUZZ_CHECK(memcmp(s1, s2, n1 * sizeof *s1) == 0);
            size_t off = 0;
            for (size_t i = 0; i < n1; i++) {
                FUZZ_CHECK(s1[i] < k->b->n_ranks && k->b->tok_len[s1[i]] > 0);
                FUZZ_CHECK(off + k->b->tok_len[s1[i]] <= pn);
                FUZZ_CHECK(memcmp(k->b->blob + k->b->tok_off[s1[i]], x + off, k->b->tok_len[s1[i]]) == 0);
                off += k->b->tok_len[s1[i]];
            }
            FUZZ_CHECK(off == pn);
        }
        free(s1);
        free(s2);
    }
}

static void check_ids(const tok *k, const uint8_t *x, size_t n, int wide) {
    const size_t w = wide ? 4 : 2;
    size_t m = n / w;
    if (m > DECODE_MAX_IDS) m = DECODE_MAX_IDS;
    uint32_t *ids = malloc((m ? m : 1) * sizeof *ids);
    if (!ids) return;
    int in_use = 1;
    size_t want_len = 0;
    for (size_t i = 0; i < m; i++) {
        const uint8_t *p = x + w * i;
        uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8;
        if (wide) v |= (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        ids[i] = (uint32_t)(v % ((uint64_t)k->V + 2));
        if (ids[i] == k->eot) {
            want_len += EOT_LEN;
        } else if (ids[i] >= k->V) {
            in_use = 0;
        } else if (k->b) {
            in_use &= k->b->tok_len[ids[i]] > 0;
            want_len += k->b->tok_len[ids[i]];
        }
    }
    char *s = NULL;
    size_t slen = 0;
    lf_status st = lf_tokenizer_decode(k->t, ids, m, &s, &slen);
    fuzz_note("lf_tokenizer_decode of the text as ids", st);
    if (k->b) FUZZ_CHECK((st == LF_OK) == in_use);
    if (!in_use) FUZZ_CHECK(st != LF_OK);
    if (st != LF_OK) {
        FUZZ_CHECK(st == LF_ERR_RANGE && s == NULL && lf_last_error()[0] != 0);
        free(ids);
        return;
    }
    FUZZ_CHECK(s != NULL && s[slen] == 0);
    if (k->b) {
        FUZZ_CHECK(slen == want_len);
        size_t off = 0;
        for (size_t i = 0; i < m; i++) {
            const int e = ids[i] == k->eot;
            const unsigned char *tb = e ? (const unsigned char *)EOT_TEXT : k->b->blob + k->b->tok_off[ids[i]];
            size_t tl = e ? EOT_LEN : k->b->tok_len[ids[i]];
            FUZZ_CHECK(memcmp(s + off, tb, tl) == 0);
            off += tl;
        }
    }
    uint32_t *again = NULL;
    size_t an = 0;
    FUZZ_CHECK(encode(k, (const uint8_t *)s, slen, 1, LF_UTF8_BYTES, &again, &an) == LF_OK);
    check_decodes_to(k, again, an, (const uint8_t *)s, slen);
    lf_free(again);
    lf_free(s);
    free(ids);
}

/* ------------------------------------------------------------ entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int loaded = 0;
    static tok gpt2, trained;
    if (!loaded) {
        load_fixed(&gpt2, "LF_FUZZ_GPT2_DIR", LF_FUZZ_GPT2_DEFAULT, "gpt2");
        load_fixed(&trained, "LF_FUZZ_BPE_FILE", LF_FUZZ_BPE_DEFAULT, "bpe");
        loaded = 1;
    }
    if (size < 1) return 0;
    const uint8_t sel = data[0];
    const uint8_t *x = data + 1;
    size_t n = size - 1;

    if ((sel & 3) != 3) {
        const tok *k = (sel & 3) == 2 ? &trained : &gpt2;
        check_text(k, x, n);
        check_ids(k, x, n, !(sel & 8));
        return 0;
    }

    /* rank-file mode: "FILE NUL TEXT" */
    const uint8_t *nul = memchr(x, 0, n);
    size_t flen = nul ? (size_t)(nul - x) : n;
    char spec[80];
    snprintf(spec, sizeof spec, "%s:%s", sel & 4 ? "bpe" : "tiktoken", fuzz_memfile(x, flen));
    lf_tokenizer *t = NULL;
    lf_status st = lf_tokenizer_open(&t, spec, NULL);
    fuzz_note("lf_tokenizer_open (rank file)", st);
    if (st != LF_OK) {
        FUZZ_CHECK(t == NULL);
        FUZZ_CHECK(lf_last_error()[0] != 0);
        return 0;
    }
    tok k;
    tok_init(&k, t);
    if (k.V <= REBUILD_MAX_VOCAB) k.b = rebuild(&k);
    const uint8_t *text = nul ? nul + 1 : x + n;
    size_t tlen = nul ? n - flen - 1 : 0;
    check_text(&k, text, tlen);
    check_ids(&k, text, tlen, !(sel & 8));
    rebuilt_free(k.b);
    lf_tokenizer_free(t);
    return 0;
}
