/*
 * Byte-level BPE tokenizers: the "gpt2:", "tiktoken:" and "bpe:" kinds.
 *
 *   gpt2:DIR       DIR/encoder.json + DIR/vocab.bpe, the files OpenAI
 *                  published with GPT-2. Ranks as tiktoken's
 *                  data_gym_to_mergeable_bpe_ranks makes them: the 256 single
 *                  bytes first, in GPT-2's bytes_to_unicode order (the 188
 *                  printable bytes ascending, then the other 68 ascending),
 *                  then one rank per vocab.bpe line (its first line, the
 *                  "#version" comment, is skipped). encoder.json must agree
 *                  with those ranks on every token (tiktoken asserts the
 *                  same); its "<|endoftext|>" (50256) is the special token.
 *   tiktoken:FILE  a tiktoken rank file: per line "base64(token bytes) rank"
 *                  (tiktoken.load.load_tiktoken_bpe); empty lines ignored.
 *   bpe:FILE       a rank file written by lf_bpe_train (bpe_train.c).
 * For the rank-file kinds the special token <|endoftext|> is the id after
 * the largest rank (as r50k_base: ranks 0..50255, <|endoftext|> 50256). No
 * sidecar file: the rank file alone is the tokenizer, so hashing or copying
 * that one file captures it, and tiktoken reads it unchanged.
 *
 * Encoding (tiktoken CoreBPE::encode / encode_ordinary): with allow_special
 * the text is cut at each special-token occurrence (leftmost first); each
 * stretch between them is pre-tokenised on its own (bpe_pretok.c) and each
 * piece becomes one id when its bytes are a token, else the BPE merge of its
 * bytes (bpe_merge.c). UTF-8 is checked once per text (ASCII 8 bytes at a
 * time); invalid bytes follow lf_encode_opts.invalid_utf8 (data.h).
 *
 * Invariants: a loaded tokenizer is read-only (tables, compiled pattern);
 * per-call state (the PCRE2 match data, the output buffer) lives on the
 * calling thread, so concurrent calls are safe. Every single byte has a token
 * (checked at load), so any valid text encodes and decoding is
 * concatenation. Files are capped in size (vocab files 64 MiB, rank files
 * 512 MiB) and ranks below 2^24.
 *
 * References: GPT-2 src/encoder.py (bytes_to_unicode, bpe); tiktoken
 * src/lib.rs (byte_pair_merge, CoreBPE), tiktoken/load.py,
 * tiktoken_ext/openai_public.py (the "gpt2" encoding).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

const char *const lf__gpt2_files[2] = {"encoder.json", "vocab.bpe"};

#define VOCAB_FILE_MAX_BYTES (64u << 20)
#define RANK_FILE_MAX_BYTES (512u << 20)
#define EOT_TEXT "<|endoftext|>"

typedef struct bpe_tok {
    const char *kind; /* "gpt2", "tiktoken", "bpe": for messages */
    char *path;
    lf__bpe b;
    lf__pretok *pt;
    uint32_t vocab_size;
    uint32_t eot; /* id of <|endoftext|> */
} bpe_tok;

static void bpe_free(void *state) {
    bpe_tok *t = state;
    if (!t) return;
    lf__bpe_release(&t->b);
    lf__pretok_free(t->pt);
    free(t->path);
    free(t);
}

static bpe_tok *tok_new(const char *kind, const char *path) {
    bpe_tok *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->path = strdup(path);
    if (!t->path) {
        free(t);
        return NULL;
    }
    return t;
}

/* After the ranks are in t->b: tables, pattern, special token, vocab size. */
static lf_status tok_finish(bpe_tok *t, uint32_t eot, const char *what) {
    lf_status st = lf__bpe_build(&t->b, what);
    if (st != LF_OK) return st;
    if (eot < t->b.n_ranks && t->b.tok_len[eot] > 0)
        return lf_fail(LF_ERR_FORMAT, "%s: " EOT_TEXT " has id %u, which is also an ordinary token's rank", what,
                       (unsigned)eot);
    if (eot >= LF_BPE_MAX_RANKS)
        return lf_fail(LF_ERR_FORMAT, "%s: " EOT_TEXT " id %u is not below %u", what, (unsigned)eot,
                       (unsigned)LF_BPE_MAX_RANKS);
    t->eot = eot;
    t->vocab_size = eot + 1 > t->b.n_ranks ? eot + 1 : t->b.n_ranks;
    return lf__pretok_create(&t->pt);
}

/* ---------------------------------------------------------------- gpt2:DIR */

/* GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the
 * other 68 for U+0100 + their index among those. rank_of[b] is tiktoken's
 * single-byte rank (printables first). */
static void gpt2_byte_alphabet(int16_t cp_to_byte[324], uint32_t rank_of[256]) {
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    int n = 0, r = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (printable) {
            cp_to_byte[b] = (int16_t)b;
            rank_of[b] = (uint32_t)r++;
        }
    }
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (!printable) {
            cp_to_byte[256 + n++] = (int16_t)b;
            rank_of[b] = (uint32_t)r++;
        }
    }
}

/* Decode a GPT-2 token string (s[0, n), UTF-8 over the byte alphabet) into
 * out (room for n bytes); returns the length or -1 (the bad code point in *bad). */
static long gpt2_unmap(const int16_t cp_to_byte[324], const unsigned char *s, size_t n, unsigned char *out,
                       uint32_t *bad) {
    size_t i = 0, m = 0;
    while (i < n) {
        uint32_t cp;
        const char *why;
        int k = lf__utf8_decode(s + i, n - i, &cp, &why);
        if (k == 0) {
            *bad = 0xFFFFFFFFu;
            return -1;
        }
        if (cp >= 324 || cp_to_byte[cp] < 0) {
            *bad = cp;
            return -1;
        }
        out[m++] = (unsigned char)cp_to_byte[cp];
        i += (size_t)k;
    }
    return (long)m;
}

static lf_status bad_char(const char *what, const char *where, uint32_t cp) {
    if (cp == 0xFFFFFFFFu) return lf_fail(LF_ERR_FORMAT, "%s: %s is not valid UTF-8", what, where);
    char d[48];
    lf__utf8_describe(cp, d, sizeof d);
    return lf_fail(LF_ERR_FORMAT, "%s: %s holds %s, which is not in GPT-2's byte alphabet", what, where, d);
}

static lf_status gpt2_open(void **state, int *vocab_size, const char *dir) {
    *state = NULL;
    *vocab_size = 0;
    char *bpe_path = lf__path_join(dir, lf__gpt2_files[1]), *enc_path = lf__path_join(dir, lf__gpt2_files[0]);
    char *merges = NULL, *enc = NULL;
    size_t merges_len = 0, enc_len = 0;
    cJSON *root = NULL;
    bpe_tok *t = tok_new("gpt2", dir);
    char what[64 + 4096];
    lf_status st;
    snprintf(what, sizeof what, "gpt2 tokenizer '%s'", dir);
    if (!bpe_path || !enc_path || !t) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
        goto fail;
    }
    if ((st = lf_file_read_all(bpe_path, VOCAB_FILE_MAX_BYTES, &merges, &merges_len)) != LF_OK) {
        lf_error_prefix("%s", what);
        goto fail;
    }
    if ((st = lf_file_read_all(enc_path, VOCAB_FILE_MAX_BYTES, &enc, &enc_len)) != LF_OK) {
        lf_error_prefix("%s", what);
        goto fail;
    }
    int16_t cp_to_byte[324];
    uint32_t rank_of[256];
    gpt2_byte_alphabet(cp_to_byte, rank_of);

    /* vocab.bpe: count the merge lines, then decode them */
    size_t n_lines = 0;
    for (size_t i = 0; i < merges_len; i++) n_lines += merges[i] == '\n';
    size_t cap = 256 + n_lines + 1;
    if (cap >= LF_BPE_MAX_RANKS) {
        st = lf_fail(LF_ERR_FORMAT, "%s: vocab.bpe has %zu lines, more than %u ranks allow", what, n_lines,
                     (unsigned)LF_BPE_MAX_RANKS);
        goto fail;
    }
    lf__bpe *b = &t->b;
    b->tok_off = calloc(cap, sizeof *b->tok_off);
    b->tok_len = calloc(cap, sizeof *b->tok_len);
    b->blob = malloc(256 + merges_len);
    if (!b->tok_off || !b->tok_len || !b->blob) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
        goto fail;
    }
    size_t blob_at = 0;
    for (int c = 0; c < 256; c++) {
        b->blob[blob_at] = (unsigned char)c;
        b->tok_off[rank_of[c]] = (uint32_t)blob_at++;
        b->tok_len[rank_of[c]] = 1;
    }
    uint32_t rank = 256;
    size_t line_no = 0, at = 0;
    while (at < merges_len) {
        size_t eol = at;
        while (eol < merges_len && merges[eol] != '\n') eol++;
        line_no++;
        size_t end = eol;
        while (end > at && (merges[end - 1] == '\r' || merges[end - 1] == ' ' || merges[end - 1] == '\t')) end--;
        const char *line = merges + at;
        size_t ll = end - at;
        at = eol + 1;
        if (line_no == 1 && ll > 0 && line[0] == '#') continue; /* "#version: 0.2" */
        if (ll == 0) {                                          /* only at the end of the file */
            size_t k = eol;
            while (k < merges_len && (merges[k] == '\n' || merges[k] == '\r' || merges[k] == ' ' || merges[k] == '\t'))
                k++;
            if (k >= merges_len) break;
        }
        size_t sp = 0;
        while (sp < ll && line[sp] != ' ') sp++;
        size_t second = sp;
        while (second < ll && line[second] == ' ') second++;
        int bad_shape = sp == 0 || second == ll;
        for (size_t k = second; k < ll && !bad_shape; k++) bad_shape = line[k] == ' ' || line[k] == '\t';
        if (bad_shape) {
            st = lf_fail(LF_ERR_FORMAT, "%s: vocab.bpe line %zu: expected two tokens separated by a space", what,
                         line_no);
            goto fail;
        }
        uint32_t bad = 0;
        long n1 = gpt2_unmap(cp_to_byte, (const unsigned char *)line, sp, b->blob + blob_at, &bad);
        long n2 = n1 < 0 ? -1
                         : gpt2_unmap(cp_to_byte, (const unsigned char *)line + second, ll - second,
                                      b->blob + blob_at + n1, &bad);
        if (n1 < 0 || n2 < 0) {
            char where[64];
            snprintf(where, sizeof where, "vocab.bpe line %zu", line_no);
            st = bad_char(what, where, bad);
            goto fail;
        }
        b->tok_off[rank] = (uint32_t)blob_at;
        b->tok_len[rank] = (uint32_t)(n1 + n2);
        blob_at += (size_t)(n1 + n2);
        rank++;
    }
    b->n_ranks = rank;

    /* encoder.json: must give every token the rank vocab.bpe gives it */
    root = cJSON_ParseWithLength(enc, enc_len);
    if (!cJSON_IsObject(root)) {
        const char *e = cJSON_GetErrorPtr();
        size_t off = e && e >= enc && e <= enc + enc_len ? (size_t)(e - enc) : 0;
        st = lf_fail(LF_ERR_FORMAT, "%s: encoder.json is not a JSON object (invalid near byte %zu)", what, off);
        goto fail;
    }
    uint32_t eot = rank; /* the id after the last rank when encoder.json has none */
    size_t n_plain = 0;
    unsigned char *tmp = NULL;
    /* check after build (needs the lookup table); first the specials */
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= LF_BPE_MAX_RANKS ||
            it->valuedouble != (double)(uint32_t)it->valuedouble) {
            st = lf_fail(LF_ERR_FORMAT, "%s: encoder.json key \"%.200s\" must map to an integer id in [0, %u)", what,
                         it->string, (unsigned)LF_BPE_MAX_RANKS);
            goto fail;
        }
        if (strcmp(it->string, EOT_TEXT) == 0) {
            eot = (uint32_t)it->valuedouble;
        } else if (strcmp(it->string, "<|startoftext|>") != 0) {
            n_plain++;
        }
    }
    if ((st = tok_finish(t, eot, what)) != LF_OK) goto fail;
    tmp = malloc(enc_len + 1);
    if (!tmp) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
        goto fail;
    }
    cJSON_ArrayForEach(it, root) {
        if (strcmp(it->string, EOT_TEXT) == 0 || strcmp(it->string, "<|startoftext|>") == 0) continue;
        uint32_t bad = 0;
        size_t kl = strlen(it->string);
        long n = gpt2_unmap(cp_to_byte, (const unsigned char *)it->string, kl, tmp, &bad);
        if (n <= 0) {
            char where[300];
            snprintf(where, sizeof where, "encoder.json key \"%.200s\"", it->string);
            free(tmp);
            st = n == 0 ? lf_fail(LF_ERR_FORMAT, "%s: encoder.json has an empty key", what)
                        : bad_char(what, where, bad);
            goto fail;
        }
        uint32_t r = lf__bpe_lookup(b, tmp, (size_t)n), want = (uint32_t)it->valuedouble;
        if (r != want) {
            free(tmp);
            if (r == LF_BPE_NONE)
                st = lf_fail(LF_ERR_FORMAT, "%s: encoder.json key \"%.200s\" (id %u) is not a token vocab.bpe makes",
                             what, it->string, (unsigned)want);
            else
                st = lf_fail(LF_ERR_FORMAT, "%s: encoder.json maps \"%.200s\" to %u but vocab.bpe gives it rank %u",
                             what, it->string, (unsigned)want, (unsigned)r);
            goto fail;
        }
    }
    free(tmp);
    if (n_plain != b->n_tokens) {
        st = lf_fail(LF_ERR_FORMAT, "%s: encoder.json has %zu tokens besides the special ones, vocab.bpe makes %zu",
                     what, n_plain, b->n_tokens);
        goto fail;
    }
    cJSON_Delete(root);
    lf_free(merges);
    lf_free(enc);
    free(bpe_path);
    free(enc_path);
    *state = t;
    *vocab_size = (int)t->vocab_size;
    return LF_OK;
fail:
    cJSON_Delete(root);
    lf_free(merges);
    lf_free(enc);
    free(bpe_path);
    free(enc_path);
    bpe_free(t);
    return st;
}

/* ---------------------------------------------------------------- rank files */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Strict standard base64 (RFC 4648 section 4, padded) of s[0, n) into out;
 * returns the length or -1. */
static long b64_decode(const unsigned char *s, size_t n, unsigned char *out) {
    if (n == 0 || n % 4 != 0) return -1;
    size_t m = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else {
                if (pad) return -1; /* data after '=' */
                v[k] = b64_value(s[i + k]);
                if (v[k] < 0) return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[m++] = (unsigned char)(w >> 16);
        if (pad < 2) out[m++] = (unsigned char)(w >> 8);
        if (pad < 1) out[m++] = (unsigned char)w;
    }
    return (long)m;
}

static lf_status rank_file_open(void **state, int *vocab_size, const char *path, const char *kind) {
    *state = NULL;
    *vocab_size = 0;
    char *buf = NULL;
    size_t len = 0;
    uint32_t *line_rank = NULL, *line_off = NULL, *line_len = NULL;
    size_t *line_at = NULL;
    bpe_tok *t = tok_new(kind, path);
    char what[64 + 4096];
    snprintf(what, sizeof what, "%s tokenizer '%s'", kind, path);
    lf_status st;
    if (!t) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
        goto fail;
    }
    if ((st = lf_file_read_all(path, RANK_FILE_MAX_BYTES, &buf, &len)) != LF_OK) {
        lf_error_prefix("%s tokenizer", kind);
        goto fail;
    }
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++) n_lines += buf[i] == '\n';
    lf__bpe *b = &t->b;
    line_rank = malloc(n_lines * sizeof *line_rank);
    line_off = malloc(n_lines * sizeof *line_off);
    line_len = malloc(n_lines * sizeof *line_len);
    line_at = malloc(n_lines * sizeof *line_at);
    b->blob = malloc(len + 1);
    if (!line_rank || !line_off || !line_len || !line_at || !b->blob) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
        goto fail;
    }
    size_t n_tok = 0, blob_at = 0, line_no = 0, at = 0;
    uint32_t max_rank = 0;
    while (at < len) {
        size_t eol = at;
        while (eol < len && buf[eol] != '\n') eol++;
        line_no++;
        size_t end = eol;
        if (end > at && buf[end - 1] == '\r') end--;
        const unsigned char *line = (const unsigned char *)buf + at;
        size_t ll = end - at;
        at = eol + 1;
        if (ll == 0) continue;
        size_t sp = 0;
        while (sp < ll && line[sp] != ' ' && line[sp] != '\t') sp++;
        size_t r0 = sp;
        while (r0 < ll && (line[r0] == ' ' || line[r0] == '\t')) r0++;
        size_t r1 = r0;
        while (r1 < ll && line[r1] >= '0' && line[r1] <= '9') r1++;
        if (sp == 0 || r0 == sp || r1 == r0 || r1 != ll) {
            st = lf_fail(LF_ERR_FORMAT, "%s: line %zu: expected \"base64-token rank\"", what, line_no);
            goto fail;
        }
        long n = b64_decode(line, sp, b->blob + blob_at);
        if (n <= 0) {
            st = lf_fail(LF_ERR_FORMAT, "%s: line %zu: the token is not padded standard base64 of 1 or more bytes",
                         what, line_no);
            goto fail;
        }
        uint64_t rank = 0;
        for (size_t k = r0; k < r1 && rank < LF_BPE_MAX_RANKS; k++) rank = rank * 10 + (uint64_t)(line[k] - '0');
        if (rank >= LF_BPE_MAX_RANKS) {
            st = lf_fail(LF_ERR_FORMAT, "%s: line %zu: rank %.*s is not below %u", what, line_no, (int)(r1 - r0),
                         (const char *)line + r0, (unsigned)LF_BPE_MAX_RANKS);
            goto fail;
        }
        line_rank[n_tok] = (uint32_t)rank;
        line_off[n_tok] = (uint32_t)blob_at;
        line_len[n_tok] = (uint32_t)n;
        line_at[n_tok] = line_no;
        n_tok++;
        blob_at += (size_t)n;
        if (rank > max_rank) max_rank = (uint32_t)rank;
    }
    if (n_tok == 0) {
        st = lf_fail(LF_ERR_FORMAT, "%s: the file holds no tokens", what);
        goto fail;
    }
    b->n_ranks = max_rank + 1;
    b->tok_off = calloc(b->n_ranks, sizeof *b->tok_off);
    b->tok_len = calloc(b->n_ranks, sizeof *b->tok_len);
    if (!b->tok_off || !b->tok_len) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
        goto fail;
    }
    for (size_t i = 0; i < n_tok; i++) {
        uint32_t r = line_rank[i];
        if (b->tok_len[r] != 0) {
            st = lf_fail(LF_ERR_FORMAT, "%s: line %zu: rank %u appears twice", what, line_at[i], (unsigned)r);
            goto fail;
        }
        b->tok_off[r] = line_off[i];
        b->tok_len[r] = line_len[i];
    }
    if ((st = tok_finish(t, b->n_ranks, what)) != LF_OK) goto fail;
    free(line_rank);
    free(line_off);
    free(line_len);
    free(line_at);
    lf_free(buf);
    *state = t;
    *vocab_size = (int)t->vocab_size;
    return LF_OK;
fail:
    free(line_rank);
    free(line_off);
    free(line_len);
    free(line_at);
    lf_free(buf);
    bpe_free(t);
    return st;
}

static lf_status tiktoken_open(void **state, int *vocab_size, const char *path) {
    return rank_file_open(state, vocab_size, path, "tiktoken");
}

static lf_status bpe_open(void **state, int *vocab_size, const char *path) {
    return rank_file_open(state, vocab_size, path, "bpe");
}

/* ---------------------------------------------------------------- encode */

typedef struct ids_vec {
    uint32_t *v;
    size_t n, cap;
} ids_vec;

static int vec_reserve(ids_vec *o, size_t more) {
    if (o->cap - o->n >= more) return 1;
    size_t cap = o->cap ? o->cap : 64;
    while (cap - o->n < more) {
        if (cap > SIZE_MAX / 2 / sizeof(uint32_t)) return 0;
        cap *= 2;
    }
    uint32_t *v = realloc(o->v, cap * sizeof *v);
    if (!v) return 0;
    o->v = v;
    o->cap = cap;
    return 1;
}

/* Pre-tokenise valid UTF-8 s[0, len) and append the ids of its pieces. */
static lf_status encode_valid(const bpe_tok *t, lf__pretok_scan *sc, const unsigned char *s, size_t len, ids_vec *o,
                              size_t base) {
    const lf__bpe *b = &t->b;
    size_t pos = 0;
    while (pos < len) {
        size_t a, e;
        lf_status st = lf__pretok_next(sc, s, len, pos, &a, &e);
        if (st == LF_ERR_NOT_FOUND) break;
        if (st != LF_OK) return st;
        size_t n = e - a;
        if (n >= UINT32_MAX)
            return lf_fail(LF_ERR_RANGE, "%s tokenizer: the piece at byte offset %zu is %zu bytes, more than 4 GiB",
                           t->kind, base + a, n);
        if (!vec_reserve(o, n))
            return lf_fail(LF_ERR_NOMEM, "%s tokenizer: out of memory encoding %zu bytes", t->kind, len);
        const unsigned char *p = s + a;
        uint32_t r = n == 1 ? b->byte_id[p[0]] : lf__bpe_lookup(b, p, n);
        if (r != LF_BPE_NONE) {
            o->v[o->n++] = r;
        } else {
            size_t m = lf__bpe_merge(b, p, n, o->v + o->n, 0);
            if (m == SIZE_MAX)
                return lf_fail(LF_ERR_NOMEM, "%s tokenizer: out of memory merging a piece of %zu bytes", t->kind, n);
            o->n += m;
        }
        pos = e;
    }
    return LF_OK;
}

/* Ordinary text (no special tokens recognised): UTF-8 checked, invalid bytes
 * handled per policy, valid runs pre-tokenised each on its own. */
static lf_status encode_ordinary(const bpe_tok *t, lf__pretok_scan *sc, const unsigned char *s, size_t len,
                                 const lf_encode_opts *o, ids_vec *out, size_t base) {
    size_t at = 0;
    while (at < len) {
        size_t v = lf__utf8_valid_prefix(s + at, len - at);
        lf_status st = encode_valid(t, sc, s + at, v, out, base + at);
        if (st != LF_OK) return st;
        at += v;
        if (at >= len) break;
        if (o->invalid_utf8 != LF_UTF8_BYTES) {
            uint32_t cp;
            const char *why = "";
            lf__utf8_decode(s + at, len - at, &cp, &why);
            return lf_fail(LF_ERR_FORMAT, "%s tokenizer: invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)", t->kind,
                           base + at, s[at], why);
        }
        if (!vec_reserve(out, 1))
            return lf_fail(LF_ERR_NOMEM, "%s tokenizer: out of memory encoding %zu bytes", t->kind, len);
        out->v[out->n++] = t->b.byte_id[s[at]];
        at++;
    }
    return LF_OK;
}

/* First occurrence of <|endoftext|> in s[0, len), NULL when none. */
static const unsigned char *find_special(const unsigned char *s, size_t len) {
    const size_t el = sizeof EOT_TEXT - 1;
    const unsigned char *p = s, *end = s + len;
    while ((size_t)(end - p) >= el) {
        p = memchr(p, '<', (size_t)(end - p) - el + 1);
        if (!p) return NULL;
        if (memcmp(p, EOT_TEXT, el) == 0) return p;
        p++;
    }
    return NULL;
}

static lf_status bpe_encode_ex(const void *state, const char *text, size_t len, const lf_encode_opts *o, size_t base,
                               uint32_t **ids, size_t *n) {
    const bpe_tok *t = state;
    const unsigned char *s = (const unsigned char *)text;
    ids_vec out = {0};
    lf__pretok_scan sc;
    lf_status st = lf__pretok_scan_init(&sc, t->pt);
    if (st != LF_OK) return st;
    if (!vec_reserve(&out, len / 4 + 16)) { /* GPT-2 on English: about 4 bytes per id */
        st = lf_fail(LF_ERR_NOMEM, "%s tokenizer: out of memory encoding %zu bytes", t->kind, len);
        goto done;
    }
    size_t at = 0;
    const size_t el = sizeof EOT_TEXT - 1;
    while (at <= len) {
        const unsigned char *sp = NULL;
        if (o->allow_special) sp = find_special(s + at, len - at);
        size_t end = sp ? (size_t)(sp - s) : len;
        if ((st = encode_ordinary(t, &sc, s + at, end - at, o, &out, base + at)) != LF_OK) goto done;
        if (!sp) break;
        if (!vec_reserve(&out, 1)) {
            st = lf_fail(LF_ERR_NOMEM, "%s tokenizer: out of memory encoding %zu bytes", t->kind, len);
            goto done;
        }
        out.v[out.n++] = t->eot;
        at = end + el;
    }
    /* hand back an lf_alloc'd array of the exact size */
    *ids = lf_alloc(out.n * sizeof **ids);
    if (!*ids) {
        st = lf_fail(LF_ERR_NOMEM, "%s tokenizer: out of memory encoding %zu bytes", t->kind, len);
        goto done;
    }
    if (out.n) memcpy(*ids, out.v, out.n * sizeof **ids);
    *n = out.n;
done:
    free(out.v);
    lf__pretok_scan_done(&sc);
    return st;
}

static lf_status bpe_encode(const void *state, const char *text, size_t len, uint32_t **ids, size_t *n) {
    lf_encode_opts o = lf_encode_opts_default();
    return bpe_encode_ex(state, text, len, &o, 0, ids, n);
}

static lf_status bpe_decode(const void *state, const uint32_t *ids, size_t n, char **text, size_t *len) {
    const bpe_tok *t = state;
    const lf__bpe *b = &t->b;
    const size_t el = sizeof EOT_TEXT - 1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id == t->eot) {
            total += el;
        } else if (id < b->n_ranks && b->tok_len[id] > 0) {
            total += b->tok_len[id];
        } else {
            return lf_fail(LF_ERR_RANGE, "%s tokenizer: token id %u at position %zu is not in the vocabulary (%s)",
                           t->kind, (unsigned)id, i, id < t->vocab_size ? "an unused rank" : "vocab_size too small");
        }
    }
    char *out = lf_alloc(total + 1);
    if (!out) return lf_fail(LF_ERR_NOMEM, "%s tokenizer: out of memory decoding %zu tokens", t->kind, n);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id == t->eot) {
            memcpy(out + at, EOT_TEXT, el);
            at += el;
        } else {
            memcpy(out + at, b->blob + b->tok_off[id], b->tok_len[id]);
            at += b->tok_len[id];
        }
    }
    out[at] = 0;
    *text = out;
    *len = at;
    return LF_OK;
}

static size_t bpe_cut(const void *state, const char *text, size_t len, size_t from) {
    (void)state;
    return lf__bpe_cut(text, len, from);
}

static lf_status bpe_special_id(const void *state, const char *name, uint32_t *id) {
    const bpe_tok *t = state;
    if (strcmp(name, EOT_TEXT) != 0)
        return lf_fail(LF_ERR_NOT_FOUND, "%s tokenizer: no special token '%s' (it has " EOT_TEXT ")", t->kind, name);
    *id = t->eot;
    return LF_OK;
}

#define BPE_OPS(prefix_, open_) \
    { \
        .prefix = prefix_, .open = open_, .free = bpe_free, .encode = bpe_encode, .decode = bpe_decode, \
        .arg_is_path = 1, .encode_ex = bpe_encode_ex, .cut = bpe_cut, .special_id = bpe_special_id, \
    }

const lf__tokenizer_ops lf__tokenizer_gpt2_ops = BPE_OPS("gpt2:", gpt2_open);
const lf__tokenizer_ops lf__tokenizer_tiktoken_ops = BPE_OPS("tiktoken:", tiktoken_open);
const lf__tokenizer_ops lf__tokenizer_bpe_ops = BPE_OPS("bpe:", bpe_open);
