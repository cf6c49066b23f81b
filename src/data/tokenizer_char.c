/*
 * Character-level tokenizer (nanoGPT shakespeare_char): one token per Unicode
 * code point; id i is the i-th entry of vocab.json's "chars" array.
 *
 *   vocab.json  {"type":"char","chars":["\n"," ","!",...]}
 *
 * Each entry is exactly one code point, written as a UTF-8 JSON string; no
 * entry repeats. prepare writes them sorted by code point (Python's
 * sorted(set(text))), but any order is read as given.
 *
 * Encoding decodes UTF-8 strictly (core/utf8.c); an invalid sequence is an error
 * naming its byte offset, and so is a character outside the vocabulary (named
 * as U+XXXX with its printable form). Lookup is a dense table over
 * [0, largest code point in the vocabulary], at most 4.4 MB for a vocabulary
 * reaching U+10FFFF and 512 bytes for ASCII text.
 *
 * End of text (lf_tokenizer_eot): the id of "\n", -1 when the vocabulary
 * lacks it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

#define VOCAB_FILE_MAX_BYTES (64u << 20)
#define VOCAB_MAX_CHARS 0x110000 /* every code point once */

typedef struct char_tok {
    char *path;
    int V;
    uint32_t *cps;          /* (V) id -> code point */
    unsigned char (*u8)[4]; /* (V) id -> UTF-8 bytes */
    unsigned char *u8len;   /* (V) */
    int32_t *lookup;        /* (max_cp+1) code point -> id, -1 when absent */
    uint32_t max_cp;
} char_tok;

static void char_free(void *state) {
    char_tok *c = state;
    if (!c) return;
    free(c->path);
    free(c->cps);
    free(c->u8);
    free(c->u8len);
    free(c->lookup);
    free(c);
}

static lf_status char_open(void **state, int *vocab_size, const char *path) {
    *state = NULL;
    *vocab_size = 0;
    char *buf = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    char_tok *c = NULL;
    lf_status st = lf_file_read_all(path, VOCAB_FILE_MAX_BYTES, &buf, &len);
    if (st != LF_OK) {
        lf_error_prefix("char vocabulary '%s'", path);
        return st;
    }
    root = cJSON_ParseWithLength(buf, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= buf && at <= buf + len ? (size_t)(at - buf) : 0;
        st = lf_fail(LF_ERR_FORMAT, "char vocabulary '%s': invalid JSON near byte %zu", path, off);
        goto fail;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "type");
    if (!cJSON_IsObject(root) || !cJSON_IsString(type) || strcmp(type->valuestring, "char") != 0) {
        st = lf_fail(LF_ERR_FORMAT, "char vocabulary '%s': key 'type' must be \"char\"", path);
        goto fail;
    }
    const cJSON *chars = cJSON_GetObjectItemCaseSensitive(root, "chars");
    if (!cJSON_IsArray(chars)) {
        st = lf_fail(LF_ERR_FORMAT, "char vocabulary '%s': key 'chars' must be an array of strings", path);
        goto fail;
    }
    int V = cJSON_GetArraySize(chars);
    if (V <= 0 || V > VOCAB_MAX_CHARS) {
        st = lf_fail(LF_ERR_FORMAT, "char vocabulary '%s': 'chars' holds %d entries, must hold 1..%d", path, V,
                     VOCAB_MAX_CHARS);
        goto fail;
    }
    c = calloc(1, sizeof *c);
    if (c) {
        c->path = malloc(strlen(path) + 1);
        c->cps = malloc((size_t)V * sizeof *c->cps);
        c->u8 = malloc((size_t)V * sizeof *c->u8);
        c->u8len = malloc((size_t)V);
    }
    if (!c || !c->path || !c->cps || !c->u8 || !c->u8len) {
        st = lf_fail(LF_ERR_NOMEM, "char vocabulary '%s': out of memory", path);
        goto fail;
    }
    strcpy(c->path, path);
    c->V = V;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, chars) {
        const unsigned char *s = cJSON_IsString(e) ? (const unsigned char *)e->valuestring : NULL;
        size_t sl = s ? strlen((const char *)s) : 0;
        uint32_t cp = 0;
        const char *why = "empty string";
        int k = sl > 0 ? lf__utf8_decode(s, sl, &cp, &why) : 0;
        if (!s || k == 0 || (size_t)k != sl) {
            st = lf_fail(LF_ERR_FORMAT, "char vocabulary '%s': chars[%d] is not a single UTF-8 character%s%s%s", path,
                         i, k == 0 && s ? " (" : "", k == 0 && s ? why : "", k == 0 && s ? ")" : "");
            goto fail;
        }
        c->cps[i] = cp;
        memcpy(c->u8[i], s, (size_t)k);
        c->u8len[i] = (unsigned char)k;
        if (cp > c->max_cp) c->max_cp = cp;
        i++;
    }
    c->lookup = malloc(((size_t)c->max_cp + 1) * sizeof *c->lookup);
    if (!c->lookup) {
        st = lf_fail(LF_ERR_NOMEM, "char vocabulary '%s': out of memory", path);
        goto fail;
    }
    memset(c->lookup, 0xFF, ((size_t)c->max_cp + 1) * sizeof *c->lookup); /* all -1 */
    for (i = 0; i < V; i++) {
        int32_t prev = c->lookup[c->cps[i]];
        if (prev >= 0) {
            char d[48];
            lf__utf8_describe(c->cps[i], d, sizeof d);
            st = lf_fail(LF_ERR_FORMAT, "char vocabulary '%s': chars[%d] %s repeats chars[%d]", path, i, d, (int)prev);
            goto fail;
        }
        c->lookup[c->cps[i]] = i;
    }
    cJSON_Delete(root);
    lf_free(buf);
    *state = c;
    *vocab_size = V;
    return LF_OK;

fail:
    char_free(c);
    cJSON_Delete(root);
    lf_free(buf);
    return st;
}

static lf_status char_encode(const void *state, const char *text, size_t len, uint32_t **ids, size_t *n) {
    const char_tok *c = state;
    if (len > SIZE_MAX / sizeof(uint32_t))
        return lf_fail(LF_ERR_RANGE, "char tokenizer: text of %zu bytes is too long", len);
    uint32_t *out = lf_alloc(len * sizeof *out);
    if (!out) return lf_fail(LF_ERR_NOMEM, "char tokenizer: out of memory encoding %zu bytes", len);
    const unsigned char *s = (const unsigned char *)text;
    const int32_t *lookup = c->lookup;
    const uint32_t max_cp = c->max_cp;
    size_t i = 0, m = 0;
    while (i < len) {
        uint32_t cp;
        int k = 1;
        if (s[i] < 0x80) {
            cp = s[i];
        } else {
            const char *why = "";
            k = lf__utf8_decode(s + i, len - i, &cp, &why);
            if (k == 0) {
                lf_free(out);
                return lf_fail(LF_ERR_FORMAT, "char tokenizer: invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)", i,
                               s[i], why);
            }
        }
        int32_t id = cp <= max_cp ? lookup[cp] : -1;
        if (id < 0) {
            char d[48];
            lf__utf8_describe(cp, d, sizeof d);
            lf_free(out);
            return lf_fail(LF_ERR_NOT_FOUND,
                           "char tokenizer: character %s at byte offset %zu is not in the vocabulary '%s'", d, i,
                           c->path);
        }
        out[m++] = (uint32_t)id;
        i += (size_t)k;
    }
    *ids = out;
    *n = m;
    return LF_OK;
}

static lf_status char_decode(const void *state, const uint32_t *ids, size_t n, char **text, size_t *len) {
    const char_tok *c = state;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= (uint32_t)c->V)
            return lf_fail(LF_ERR_RANGE, "char tokenizer: token id %u at position %zu is out of range (vocab_size %d)",
                           (unsigned)ids[i], i, c->V);
        total += c->u8len[ids[i]];
    }
    char *out = lf_alloc(total + 1);
    if (!out) return lf_fail(LF_ERR_NOMEM, "char tokenizer: out of memory decoding %zu tokens", n);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + at, c->u8[ids[i]], c->u8len[ids[i]]);
        at += c->u8len[ids[i]];
    }
    out[at] = 0;
    *text = out;
    *len = at;
    return LF_OK;
}

/* A character vocabulary has no special tokens; "\n" ends a text (what
 * prepare appends after each document and response, where generation stops). */
static int char_eot(const void *state) {
    const char_tok *c = state;
    return '\n' <= c->max_cp ? (int)c->lookup['\n'] : -1;
}

const lf__tokenizer_ops lf__tokenizer_char_ops = {
    .prefix = "char:",
    .open = char_open,
    .free = char_free,
    .encode = char_encode,
    .decode = char_decode,
    .arg_is_path = 1,
    .eot = char_eot,
};

lf_status lf__char_vocab_json(const uint32_t *cps, size_t n, char **json) {
    *json = NULL;
    lf_status st = LF_OK;
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = NULL;
    if (!root || !cJSON_AddStringToObject(root, "type", "char") || !(arr = cJSON_AddArrayToObject(root, "chars"))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory building a char vocabulary");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char u[5] = {0};
        int k = lf__utf8_encode(cps[i], u);
        if (k == 0 || cps[i] == 0) { /* U+0000 would end the JSON string early */
            st = lf_fail(LF_ERR_INTERNAL, "char vocabulary: U+%04X cannot be stored", (unsigned)cps[i]);
            goto done;
        }
        cJSON *s = cJSON_CreateString((const char *)u);
        if (!s || !cJSON_AddItemToArray(arr, s)) {
            cJSON_Delete(s);
            st = lf_fail(LF_ERR_NOMEM, "out of memory building a char vocabulary");
            goto done;
        }
    }
    *json = cJSON_Print(root);
    if (!*json) st = lf_fail(LF_ERR_NOMEM, "out of memory printing a char vocabulary");
done:
    cJSON_Delete(root);
    return st;
}
