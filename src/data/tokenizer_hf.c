/*
 * The "hf:" tokenizer kind: a Hugging Face tokenizers `tokenizer.json` of the
 * byte-level BPE family (GPT-2, Llama 3, Qwen2, SmolLM), with the ids the
 * tokenizers library gives: `Tokenizer.encode(text, add_special_tokens=False)`
 * (encode_special_tokens = not allow_special), and decode as its ByteLevel
 * decoder (the exact bytes, not U+FFFD replacements).
 *
 * Why here: llmforge has no Python at run time, and the format is plain JSON
 * (cJSON) over machinery the other byte-level kinds already have: the merge
 * tables and algorithms of bpe_merge.c, PCRE2 pre-tokenisers of
 * bpe_pretok.c. The file is read, checked and turned into those tables;
 * nothing of tokenizers' code is reproduced. The one normalizer supported,
 * NFC (Qwen2, Qwen2.5), is Unicode data, not code to write: utf8proc
 * computes it (hf_nfc.c, which also corrects for tokenizers' older Unicode
 * tables).
 *
 * What a file may hold (anything else is refused with a message naming the
 * file and the field; docs/tokenizers.md):
 *   model          type "BPE"; vocab (token string -> id), merges ("A B"
 *                  strings or [A, B] pairs), ignore_merges; no dropout, no
 *                  byte_fallback, no subword prefix/suffix. Token strings are
 *                  in GPT-2's byte alphabet (bytes_to_unicode); all 256
 *                  single bytes must be tokens.
 *   added_tokens   id, content, special, normalized (lstrip/rstrip/
 *                  single_word must be false).
 *   normalizer     null, NFC, or a Sequence (of Sequences) whose members
 *                  are all NFC; any other type (NFKC, NFD, Lowercase, Strip,
 *                  Replace, Prepend, ...) is refused naming it.
 *   truncation, padding: null.
 *   pre_tokenizer  ByteLevel (add_prefix_space false), alone or last in a
 *                  Sequence after Split (pattern Regex or String, behavior
 *                  Isolated, invert false) and Digits steps.
 *   decoder        ByteLevel.
 *   post_processor ignored (encode adds no BOS/EOS, as add_special_tokens=False).
 *
 * Encoding, as tokenizers does it:
 *   1. Added tokens (AddedVocabulary): the text is cut at added tokens with
 *      normalized = false (leftmost, then longest first), in the text as
 *      given. Each stretch between is then normalized on its own (NFC: a
 *      mark right after such a token does not join the letter before it),
 *      and cut at the added tokens with normalized = true, whose content is
 *      looked for in its normalized form (tokenizers normalizes those
 *      patterns too, and its id_to_token, so decode, gives that form). A
 *      special token found while allow_special is 0 stays text, and the
 *      search resumes after it (tokenizers' encode_special_tokens); so it is
 *      normalized with the text around it. Non-special added tokens are
 *      always recognised: they are vocabulary, not control tokens.
 *   2. Each stretch is UTF-8 checked (lf_encode_opts.invalid_utf8 as for the
 *      other byte-level kinds; with NFC the check comes before
 *      normalization, so an error names the caller's byte offset, and with
 *      LF_UTF8_BYTES each invalid byte is kept as it is and the valid runs
 *      between are normalized each alone) and pre-tokenised: every
 *      pre-tokeniser step (a Split or Digits regex, ByteLevel's own GPT-2
 *      regex) cuts each piece of the previous step, matches and the gaps
 *      between them each becoming a piece ("Isolated"); an empty match gives
 *      no piece, and one where the previous match ended is skipped by
 *      stepping one character, as the onig crate's find_iter does.
 *   3. Each piece: with ignore_merges, a piece whose bytes are a token is
 *      that token; otherwise BPE over the merge list (bpe_merge.c with an
 *      explicit list: only listed pairs merge, lowest list position first,
 *      leftmost among equal; tokenizers' Word::merge_all).
 * Decoding: added tokens give their content (with NFC, a normalized one its
 * NFC, as tokenizers' id_to_token); vocabulary tokens their bytes
 * through the byte alphabet, or, for a token with a character outside it,
 * its UTF-8 text (tokenizers' ByteLevel decoder does the same).
 *
 * Ids: the file's ids; vocab_size = the largest id + 1 (unused ids decode to
 * LF_ERR_RANGE). End of text (lf_tokenizer_eot): the first of
 * <|endoftext|>, <|end_of_text|>, <|im_end|>, </s>, <eos> that is an added
 * token or vocabulary entry, else -1.
 *
 * Invariants: an open tokenizer is read-only; per-call state (PCRE2 match
 * data per step, the normalized stretch, the output) lives on the calling
 * thread. Added tokens are non-empty and distinct (with NFC, distinct in
 * their pass's form, else refused), every id names at most one token, and an
 * added token whose id is in the vocabulary has the same text there,
 * standing for the same bytes; so every id has one byte string and
 * decode(encode(x)) == x without a normalizer, == x with each stretch in NFC
 * with one (canonically equivalent to x). File size, ids, token length,
 * normalizer nesting and pre-tokeniser steps are capped. The parallel cut
 * rules hold with NFC too: every cut is before ASCII whitespace, where NFC
 * can cut the same (it has combining class 0 and composes with nothing).
 *
 * Where the ids or text differ from tokenizers' (docs/tokenizers.md): an
 * added token whose text has characters of the byte alphabet beyond ASCII
 * (say "café") decodes here to its text; tokenizers passes it through the
 * ByteLevel decoder ("caf" + byte 0xE9, then U+FFFD). PCRE2 and Oniguruma
 * may differ on constructs bpe_pretok.c does not rewrite (\w, \b, POSIX
 * classes outside ASCII). NFC: tokenizers' Unicode 9 tables are reproduced
 * over utf8proc's (hf_nfc.c) for the marks of Unicode 10..15; a utf8proc
 * with Unicode 16 or later would add marks the table lacks (the test names
 * them).
 *
 * References: huggingface/tokenizers, tokenizers/src/models/bpe/{model.rs,
 * word.rs, serialization.rs}, tokenizer/added_vocabulary.rs
 * (extract_and_normalize, refresh_added_tokens), normalizers/{mod.rs,
 * unicode.rs}, pre_tokenizers/{byte_level.rs, split.rs, digits.rs} (read
 * for their semantics, and checked by experiment with tokenizers 0.23);
 * GPT-2 src/encoder.py (bytes_to_unicode); UAX #15.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "data_impl.h"
#include "hf_nfc.h"

#define HF_FILE_MAX_BYTES ((size_t)256 << 20) /* Llama 3's tokenizer.json is 9 MB */
#define HF_MAX_STEPS 4                        /* regex steps of the pre-tokeniser */
#define HF_MAX_TOKEN_BYTES (1u << 16)         /* one token's text */
#define HF_MAX_NORM_DEPTH 8                   /* Sequence normalizers inside Sequences */

/* The Split regexes of Llama 3 and Qwen2 (as their tokenizer.json files
 * spell them). For these two a safe cut rule is known (hf_cut). */
static const char g_llama3_re[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char g_qwen2_re[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *const g_eot_names[] = {"<|endoftext|>", "<|end_of_text|>", "<|im_end|>", "</s>", "<eos>"};

/* Where lf_tokenizer_encode_parallel may cut (ops->cut), weakest first:
 * each step has one, the tokenizer the strictest of its steps'. */
enum {
    CUT_ANY = 0,   /* the step cuts anywhere the same (Digits: single-character matches) */
    CUT_GPT2 = 1,  /* lf__bpe_cut: ASCII whitespace after ASCII non-whitespace */
    CUT_ALNUM = 2, /* ASCII whitespace after an ASCII letter or digit (Llama 3, Qwen2) */
    CUT_NEVER = 3, /* no rule known: encode on one thread */
};

typedef struct added_tok {
    uint32_t id;
    uint32_t off, len;   /* the text matched and decoded in added_blob: the content, normalized for pass 1 */
    uint32_t coff, clen; /* the content as the file has it (lf_tokenizer_special_id) */
    uint8_t special;
    uint8_t pass;  /* 0: normalized = false, 1: normalized = true */
    uint8_t first; /* the content's first byte */
} added_tok;

typedef struct hf_tok {
    char *path;
    lf__bpe b; /* the vocabulary's byte-alphabet tokens and the merge list */
    lf__pretok *step[HF_MAX_STEPS];
    int n_steps;
    int nfc; /* the normalizer is NFC (alone or in a Sequence) */
    int ignore_merges;
    int cut;
    uint32_t vocab_size;
    uint32_t *dec_off, *dec_len; /* (vocab_size) bytes of each id in dec_blob; length 0: unused id */
    unsigned char *dec_blob;
    added_tok *added; /* sorted by (pass, first byte, length descending) */
    size_t n_added;
    unsigned char *added_blob;
    uint32_t lo[2][256], hi[2][256]; /* added[lo .. hi) of a pass start with a byte */
    size_t n_pass[2];
    int eot;
} hf_tok;

static void hf_free(void *state) {
    hf_tok *t = state;
    if (!t) return;
    lf__bpe_release(&t->b);
    for (int i = 0; i < t->n_steps; i++) lf__pretok_free(t->step[i]);
    free(t->dec_off);
    free(t->dec_len);
    free(t->dec_blob);
    free(t->added);
    free(t->added_blob);
    free(t->path);
    free(t);
}

/* ---------------------------------------------------------------- the byte alphabet */

/* GPT-2's bytes_to_unicode (tokenizers' ByteLevel uses the same): the bytes
 * ! .. ~, U+00A1 .. U+00AC and U+00AE .. U+00FF stand for the code point of
 * their own value, the other 68 for U+0100 + their index among those.
 * cp_byte[cp] is the byte a code point stands for, -1 for none. */
static void byte_alphabet(int16_t cp_byte[324]) {
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    int extra = 0;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
        if (printable) cp_byte[c] = (int16_t)c;
        else cp_byte[256 + extra++] = (int16_t)c;
    }
}

/* Bytes of a token string s[0, n) in the byte alphabet into out (room for n);
 * the length, or -1 when a character is outside the alphabet (or s is not
 * UTF-8). */
static long unmap(const int16_t cp_byte[324], const char *s, size_t n, unsigned char *out) {
    size_t i = 0, m = 0;
    while (i < n) {
        uint32_t cp;
        const char *why;
        int k = lf__utf8_decode((const unsigned char *)s + i, n - i, &cp, &why);
        if (k == 0 || cp >= 324 || cp_byte[cp] < 0) return -1;
        out[m++] = (unsigned char)cp_byte[cp];
        i += (size_t)k;
    }
    return (long)m;
}

/* ---------------------------------------------------------------- loading */

/* Loader state: the file's JSON and the tables being built. */
typedef struct loader {
    const char *what; /* "hf tokenizer 'PATH'" */
    int16_t cp_byte[324];
    hf_tok *t;
    const char **id_text; /* (vocab_size) the vocabulary's string for each id, NULL if none */
    uint8_t *id_mapped;   /* (vocab_size) 1: the string is in the byte alphabet */
    const char **raw;     /* vocabulary strings outside the alphabet, sorted (strcmp) */
    uint32_t *raw_id;
    size_t n_raw;
    unsigned char *scratch; /* room for any token's bytes */
    size_t scratch_cap;
} loader;

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

/* JSON type name for messages. */
static const char *json_kind(const cJSON *v) {
    if (!v) return "missing";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

/* A boolean field: absent or null gives def; anything else but a boolean is an error. */
static lf_status get_bool(const loader *L, const cJSON *o, const char *where, const char *key, int def, int *out) {
    const cJSON *v = get(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return LF_OK;
    }
    if (!cJSON_IsBool(v))
        return lf_fail(LF_ERR_FORMAT, "%s: %s.%s must be true or false, not %s", L->what, where, key, json_kind(v));
    *out = cJSON_IsTrue(v);
    return LF_OK;
}

/* An id: an integer in [0, LF_BPE_MAX_RANKS). */
static int id_value(const cJSON *v, uint32_t *id) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < LF_BPE_MAX_RANKS) ||
        v->valuedouble != (double)(uint32_t)v->valuedouble)
        return 0;
    *id = (uint32_t)v->valuedouble;
    return 1;
}

static int cmp_raw(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The id of a vocabulary string, LF_BPE_NONE when the vocabulary lacks it;
 * *mapped = 1 when it is in the byte alphabet (its bytes in L->scratch,
 * length *len). */
static uint32_t vocab_find(loader *L, const char *s, size_t n, int *mapped, size_t *len) {
    long m = n <= L->scratch_cap ? unmap(L->cp_byte, s, n, L->scratch) : -1;
    *mapped = m > 0;
    if (m > 0) {
        *len = (size_t)m;
        return lf__bpe_lookup(&L->t->b, L->scratch, (size_t)m);
    }
    /* binary search of the sorted strings for s[0, n) (not NUL-terminated) */
    size_t lo = 0, hi = L->n_raw;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *r = L->raw[mid];
        int c = strncmp(s, r, n);
        if (c == 0 && r[n] != 0) c = -1; /* r starts with s and is longer: s sorts first */
        if (c == 0) return L->raw_id[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return LF_BPE_NONE;
}

/* model.vocab -> id tables, the byte-alphabet tokens into t->b. */
static lf_status load_vocab(loader *L, const cJSON *vocab, const cJSON *added) {
    hf_tok *t = L->t;
    /* the largest id over the vocabulary and the added tokens */
    uint32_t max_id = 0;
    size_t n_vocab = 0, text_bytes = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        uint32_t id;
        if (!id_value(it, &id))
            return lf_fail(LF_ERR_FORMAT, "%s: model.vocab[\"%.200s\"] must be an integer id in [0, %u)", L->what,
                           it->string, (unsigned)LF_BPE_MAX_RANKS);
        size_t n = strlen(it->string);
        if (n == 0) return lf_fail(LF_ERR_FORMAT, "%s: model.vocab has an empty token (id %u)", L->what, (unsigned)id);
        if (n > HF_MAX_TOKEN_BYTES)
            return lf_fail(LF_ERR_RANGE, "%s: model.vocab token with id %u is %zu bytes, more than %u allowed", L->what,
                           (unsigned)id, n, (unsigned)HF_MAX_TOKEN_BYTES);
        if (id > max_id) max_id = id;
        n_vocab++;
        text_bytes += n;
    }
    if (n_vocab == 0) return lf_fail(LF_ERR_FORMAT, "%s: model.vocab is empty", L->what);
    cJSON_ArrayForEach(it, added) {
        uint32_t id;
        if (cJSON_IsObject(it) && id_value(get(it, "id"), &id) && id > max_id) max_id = id;
    }
    t->vocab_size = max_id + 1;
    L->id_text = calloc(t->vocab_size, sizeof *L->id_text);
    L->id_mapped = calloc(t->vocab_size, 1);
    L->scratch_cap = HF_MAX_TOKEN_BYTES;
    L->scratch = malloc(L->scratch_cap);
    lf__bpe *b = &t->b;
    b->n_ranks = t->vocab_size;
    b->tok_off = calloc(t->vocab_size, sizeof *b->tok_off);
    b->tok_len = calloc(t->vocab_size, sizeof *b->tok_len);
    b->blob = malloc(text_bytes + 1);
    if (!L->id_text || !L->id_mapped || !L->scratch || !b->tok_off || !b->tok_len || !b->blob)
        return lf_fail(LF_ERR_NOMEM, "%s: out of memory for %zu tokens", L->what, n_vocab);
    size_t at = 0;
    cJSON_ArrayForEach(it, vocab) {
        uint32_t id = (uint32_t)it->valuedouble;
        if (L->id_text[id]) {
            if (strcmp(L->id_text[id], it->string) == 0)
                return lf_fail(LF_ERR_FORMAT, "%s: model.vocab has the token \"%.200s\" twice", L->what, it->string);
            return lf_fail(LF_ERR_FORMAT, "%s: model.vocab gives id %u to both \"%.200s\" and \"%.200s\"", L->what,
                           (unsigned)id, L->id_text[id], it->string);
        }
        L->id_text[id] = it->string;
        long m = unmap(L->cp_byte, it->string, strlen(it->string), b->blob + at);
        if (m > 0) {
            b->tok_off[id] = (uint32_t)at;
            b->tok_len[id] = (uint32_t)m;
            at += (size_t)m;
            L->id_mapped[id] = 1;
        } else {
            L->n_raw++;
        }
    }
    /* strings outside the alphabet (never produced by encoding; kept for
     * decoding and for the merge check) */
    if (L->n_raw) {
        L->raw = malloc(L->n_raw * sizeof *L->raw);
        L->raw_id = malloc(L->n_raw * sizeof *L->raw_id);
        if (!L->raw || !L->raw_id) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", L->what);
        size_t k = 0;
        for (uint32_t id = 0; id < t->vocab_size; id++)
            if (L->id_text[id] && !L->id_mapped[id]) L->raw[k++] = L->id_text[id];
        qsort(L->raw, L->n_raw, sizeof *L->raw, cmp_raw);
        for (size_t i = 0; i < L->n_raw; i++) {
            if (i > 0 && strcmp(L->raw[i - 1], L->raw[i]) == 0)
                return lf_fail(LF_ERR_FORMAT, "%s: model.vocab has the token \"%.200s\" twice", L->what, L->raw[i]);
        }
        /* ids in sorted order: look each up again (n_raw is small in practice) */
        for (uint32_t id = 0; id < t->vocab_size; id++) {
            if (!L->id_text[id] || L->id_mapped[id]) continue;
            const char *k2 = L->id_text[id];
            const char **hit = bsearch(&k2, L->raw, L->n_raw, sizeof *L->raw, cmp_raw);
            L->raw_id[hit - L->raw] = id;
        }
    }
    return lf__bpe_build_map(b, L->what); /* refuses a missing single byte, naming it */
}

/* One merge's two token strings. */
static lf_status merge_parts(const loader *L, const cJSON *m, size_t i, const char **a, size_t *na, const char **b,
                             size_t *nb) {
    if (cJSON_IsString(m)) { /* "A B": split at the first space */
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || sp == s || sp[1] == 0)
            return lf_fail(LF_ERR_FORMAT, "%s: model.merges[%zu] \"%.200s\" is not two tokens separated by a space",
                           L->what, i, s);
        *a = s;
        *na = (size_t)(sp - s);
        *b = sp + 1;
        *nb = strlen(sp + 1);
        return LF_OK;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
        cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
        *a = cJSON_GetArrayItem(m, 0)->valuestring;
        *b = cJSON_GetArrayItem(m, 1)->valuestring;
        *na = strlen(*a);
        *nb = strlen(*b);
        if (*na && *nb) return LF_OK;
    }
    return lf_fail(LF_ERR_FORMAT, "%s: model.merges[%zu] must be a string \"A B\" or a pair [\"A\", \"B\"] of tokens",
                   L->what, i);
}

static lf_status load_merges(loader *L, const cJSON *merges) {
    size_t n = (size_t)cJSON_GetArraySize(merges);
    if (n >= LF_BPE_MAX_RANKS)
        return lf_fail(LF_ERR_RANGE, "%s: model.merges has %zu entries, more than %u allowed", L->what, n,
                       (unsigned)LF_BPE_MAX_RANKS - 1);
    uint32_t *left = malloc((n + 1) * sizeof *left), *right = malloc((n + 1) * sizeof *right),
             *result = malloc((n + 1) * sizeof *result);
    unsigned char *both = malloc(2 * (size_t)HF_MAX_TOKEN_BYTES);
    char *joined = malloc(2 * (size_t)HF_MAX_TOKEN_BYTES + 1);
    lf_status st = LF_OK;
    if (!left || !right || !result || !both || !joined) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory for %zu merges", L->what, n);
        goto done;
    }
    size_t i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0, la = 0, lb = 0;
        if ((st = merge_parts(L, m, i, &a, &na, &b, &nb)) != LF_OK) goto done;
        if (na > HF_MAX_TOKEN_BYTES || nb > HF_MAX_TOKEN_BYTES) {
            st = lf_fail(LF_ERR_FORMAT, "%s: model.merges[%zu]: a token longer than any in model.vocab", L->what, i);
            goto done;
        }
        int ma, mb = 0;
        uint32_t ia = vocab_find(L, a, na, &ma, &la);
        if (ma) memcpy(both, L->scratch, la);
        uint32_t ib = ia == LF_BPE_NONE ? LF_BPE_NONE : vocab_find(L, b, nb, &mb, &lb);
        if (ia == LF_BPE_NONE || ib == LF_BPE_NONE) {
            int first = ia == LF_BPE_NONE;
            st = lf_fail(LF_ERR_FORMAT, "%s: model.merges[%zu] (\"%.*s\" \"%.*s\"): \"%.*s\" is not in model.vocab",
                         L->what, i, (int)(na > 200 ? 200 : na), a, (int)(nb > 200 ? 200 : nb), b,
                         first ? (int)(na > 200 ? 200 : na) : (int)(nb > 200 ? 200 : nb), first ? a : b);
            goto done;
        }
        uint32_t ir;
        int mr = 0;
        size_t lr = 0;
        if (ma && mb) { /* the concatenation's bytes */
            memcpy(both + la, L->scratch, lb);
            ir = lf__bpe_lookup(&L->t->b, both, la + lb);
            mr = 1;
        } else { /* a token outside the alphabet: such a merge never applies, but must name a token */
            memcpy(joined, a, na);
            memcpy(joined + na, b, nb);
            ir = vocab_find(L, joined, na + nb, &mr, &lr);
            mr = 0;
        }
        if (ir == LF_BPE_NONE) {
            st = lf_fail(LF_ERR_FORMAT,
                         "%s: model.merges[%zu] (\"%.*s\" \"%.*s\"): the merged token \"%.*s%.*s\" is not in "
                         "model.vocab",
                         L->what, i, (int)(na > 200 ? 200 : na), a, (int)(nb > 200 ? 200 : nb), b,
                         (int)(na > 200 ? 200 : na), a, (int)(nb > 200 ? 200 : nb), b);
            goto done;
        }
        left[i] = mr ? ia : LF_BPE_NONE;
        right[i] = mr ? ib : LF_BPE_NONE;
        result[i] = ir;
        i++;
    }
    st = lf__bpe_set_merges(&L->t->b, left, right, result, (uint32_t)n, L->what);
done:
    free(left);
    free(right);
    free(result);
    free(both);
    free(joined);
    return st;
}

/* Sort key of the added tokens: pass, first byte, longer first (so the first
 * match found at a position is the longest), then id. */
static int cmp_added(const void *x, const void *y) {
    const added_tok *a = x, *b = y;
    if (a->pass != b->pass) return a->pass < b->pass ? -1 : 1;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static lf_status load_added(loader *L, const cJSON *added) {
    hf_tok *t = L->t;
    size_t n = added ? (size_t)cJSON_GetArraySize(added) : 0, i = 0;
    if (n == 0) return LF_OK;
    const cJSON *it;
    cJSON_ArrayForEach(it, added) {
        uint32_t id;
        const cJSON *c = cJSON_IsObject(it) ? get(it, "content") : NULL;
        if (!cJSON_IsObject(it))
            return lf_fail(LF_ERR_FORMAT, "%s: added_tokens[%zu] must be an object, not %s", L->what, i, json_kind(it));
        if (!id_value(get(it, "id"), &id))
            return lf_fail(LF_ERR_FORMAT, "%s: added_tokens[%zu].id must be an integer id in [0, %u)", L->what, i,
                           (unsigned)LF_BPE_MAX_RANKS);
        if (!cJSON_IsString(c) || c->valuestring[0] == 0)
            return lf_fail(LF_ERR_FORMAT, "%s: added_tokens[%zu].content must be a non-empty string", L->what, i);
        size_t len = strlen(c->valuestring);
        if (len > HF_MAX_TOKEN_BYTES)
            return lf_fail(LF_ERR_RANGE, "%s: added_tokens[%zu].content is %zu bytes, more than %u allowed", L->what, i,
                           len, (unsigned)HF_MAX_TOKEN_BYTES);
        i++;
    }
    t->added = calloc(n, sizeof *t->added);
    const char **texts = malloc(n * sizeof *texts);
    uint8_t *seen = calloc(t->vocab_size, 1);
    lf__nfc_buf blob = {NULL, 0, 0}; /* the contents, and the normalized texts that differ from them */
    lf_status st = LF_OK;
    if (!t->added || !texts || !seen) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory for %zu added tokens", L->what, n);
        goto done;
    }
    i = 0;
    cJSON_ArrayForEach(it, added) {
        const char *c = get(it, "content")->valuestring;
        uint32_t id = (uint32_t)get(it, "id")->valuedouble;
        int special, normalized, lstrip, rstrip, single;
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if ((st = get_bool(L, it, where, "special", 0, &special)) != LF_OK ||
            (st = get_bool(L, it, where, "normalized", !special, &normalized)) != LF_OK ||
            (st = get_bool(L, it, where, "lstrip", 0, &lstrip)) != LF_OK ||
            (st = get_bool(L, it, where, "rstrip", 0, &rstrip)) != LF_OK ||
            (st = get_bool(L, it, where, "single_word", 0, &single)) != LF_OK)
            goto done;
        if (lstrip || rstrip || single) {
            st = lf_fail(LF_ERR_UNSUPPORTED, "%s: %s \"%.200s\": %s true is not supported (only false)", L->what, where,
                         c,
                         lstrip   ? "lstrip"
                         : rstrip ? "rstrip"
                                  : "single_word");
            goto done;
        }
        if (seen[id]) {
            st = lf_fail(LF_ERR_FORMAT, "%s: %s \"%.200s\": id %u is already an added token's", L->what, where, c,
                         (unsigned)id);
            goto done;
        }
        seen[id] = 1;
        if (L->id_text[id] && strcmp(L->id_text[id], c) != 0) {
            st = lf_fail(LF_ERR_FORMAT, "%s: %s \"%.200s\" has id %u, which model.vocab gives to \"%.200s\"", L->what,
                         where, c, (unsigned)id, L->id_text[id]);
            goto done;
        }
        size_t len = strlen(c);
        const lf__bpe *bt = &t->b;
        if (L->id_mapped[id] && (bt->tok_len[id] != len || memcmp(bt->blob + bt->tok_off[id], c, len) != 0)) {
            /* encoding makes the id from the bytes the vocabulary string stands for, the added token from its
             * text: one id cannot decode to both */
            st = lf_fail(LF_ERR_UNSUPPORTED,
                         "%s: %s \"%.200s\" (id %u) is also a vocabulary token standing for other bytes (the byte "
                         "alphabet maps its text); not supported",
                         L->what, where, c, (unsigned)id);
            goto done;
        }
        added_tok *a = &t->added[i];
        a->id = id;
        a->special = (uint8_t)special;
        a->pass = (uint8_t)(normalized ? 1 : 0);
        a->coff = a->off = (uint32_t)blob.len;
        a->clen = a->len = (uint32_t)len;
        if ((st = lf__nfc_buf_put(&blob, c, len)) != LF_OK) goto done;
        if (normalized && t->nfc) { /* tokenizers looks for the normalized content in the normalized text */
            if (lf__utf8_valid_prefix((const unsigned char *)c, len) != len) {
                st = lf_fail(LF_ERR_FORMAT, "%s: %s.content is not valid UTF-8 (the NFC normalizer reads text)",
                             L->what, where);
                goto done;
            }
            size_t at = blob.len;
            if ((st = lf__hf_nfc_append((const unsigned char *)c, len, &blob)) != LF_OK) {
                lf_error_prefix("%s: %s \"%.200s\"", L->what, where, c);
                goto done;
            }
            size_t m = blob.len - at;
            if (m == len && memcmp(blob.p + at, c, len) == 0) {
                blob.len = at; /* NFC already */
            } else if (m > HF_MAX_TOKEN_BYTES) {
                st = lf_fail(LF_ERR_RANGE, "%s: %s.content is %zu bytes in NFC, more than %u allowed", L->what, where,
                             m, (unsigned)HF_MAX_TOKEN_BYTES);
                goto done;
            } else {
                a->off = (uint32_t)at;
                a->len = (uint32_t)m;
            }
        }
        texts[i++] = c;
    }
    qsort(texts, n, sizeof *texts, cmp_raw);
    for (i = 1; i < n; i++)
        if (strcmp(texts[i - 1], texts[i]) == 0) {
            st = lf_fail(LF_ERR_FORMAT, "%s: added_tokens has \"%.200s\" twice", L->what, texts[i]);
            goto done;
        }
    t->added_blob = blob.p;
    blob.p = NULL;
    if (!t->added_blob) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", L->what);
        goto done;
    }
    for (i = 0; i < n; i++) t->added[i].first = t->added_blob[t->added[i].off];
    t->n_added = n;
    qsort(t->added, n, sizeof *t->added, cmp_added);
    /* the same text twice in a pass: only distinct contents that NFC makes equal (tokenizers would take the one it
     * registered first; refused rather than guessed) */
    for (i = 1; i < n; i++) {
        const added_tok *a = &t->added[i - 1], *b = &t->added[i];
        if (a->pass == b->pass && a->len == b->len &&
            memcmp(t->added_blob + a->off, t->added_blob + b->off, a->len) == 0) {
            st = lf_fail(LF_ERR_UNSUPPORTED,
                         "%s: added tokens \"%.*s\" (id %u) and \"%.*s\" (id %u) are the same text in NFC; not "
                         "supported",
                         L->what, (int)(a->clen > 200 ? 200 : a->clen), (const char *)t->added_blob + a->coff,
                         (unsigned)a->id, (int)(b->clen > 200 ? 200 : b->clen), (const char *)t->added_blob + b->coff,
                         (unsigned)b->id);
            goto done;
        }
    }
    for (i = 0; i < n; i++) {
        const added_tok *a = &t->added[i];
        if (t->hi[a->pass][a->first] == 0) t->lo[a->pass][a->first] = (uint32_t)i;
        t->hi[a->pass][a->first] = (uint32_t)i + 1;
        t->n_pass[a->pass]++;
    }
done:
    free(blob.p);
    free(texts);
    free(seen);
    return st;
}

/* ---------------------------------------------------------------- pre-tokeniser, decoder, the rest */

typedef struct cut_acc {
    int max, never, boundary; /* strictest rule, a step without one, a step that makes the cut a piece boundary */
} cut_acc;

static void cut_add(cut_acc *c, int rule) {
    if (rule == CUT_NEVER) c->never = 1;
    if (rule == CUT_GPT2 || rule == CUT_ALNUM) c->boundary = 1;
    if (rule > c->max) c->max = rule;
}

static lf_status add_step(loader *L, const char *src, size_t len, int literal, const char *where) {
    hf_tok *t = L->t;
    if (t->n_steps >= HF_MAX_STEPS)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: %s: more than %d splitting steps in pre_tokenizer", L->what, where,
                       HF_MAX_STEPS);
    lf_status st = lf__pretok_create_custom(&t->step[t->n_steps], src, len, literal, "tokenizer.json pre-tokeniser");
    if (st != LF_OK) {
        lf_error_prefix("%s: %s", L->what, where);
        return st;
    }
    t->n_steps++;
    return LF_OK;
}

static lf_status load_step(loader *L, const cJSON *o, const char *where, int last, cut_acc *cut) {
    const cJSON *ty = cJSON_IsObject(o) ? get(o, "type") : NULL;
    if (!cJSON_IsString(ty))
        return lf_fail(LF_ERR_FORMAT, "%s: %s must be an object with a string \"type\"", L->what, where);
    const char *type = ty->valuestring;
    lf_status st;
    if (strcmp(type, "ByteLevel") == 0) {
        int aps, use_regex;
        if (!last)
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: %s: ByteLevel must be the last pre-tokenizer step", L->what, where);
        if ((st = get_bool(L, o, where, "add_prefix_space", 1, &aps)) != LF_OK ||
            (st = get_bool(L, o, where, "use_regex", 1, &use_regex)) != LF_OK)
            return st;
        if (aps)
            return lf_fail(LF_ERR_UNSUPPORTED,
                           "%s: %s: add_prefix_space true is not supported (it inserts a space; only false)", L->what,
                           where);
        if (!use_regex) return LF_OK; /* the byte mapping alone */
        if (L->t->n_steps >= HF_MAX_STEPS)
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: %s: more than %d splitting steps in pre_tokenizer", L->what, where,
                           HF_MAX_STEPS);
        if ((st = lf__pretok_create(&L->t->step[L->t->n_steps])) != LF_OK) return st;
        L->t->n_steps++;
        cut_add(cut, CUT_GPT2);
        return LF_OK;
    }
    if (last)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: %s: the pre-tokenizer must end with ByteLevel (byte-level BPE only), not '%.100s'", L->what,
                       where, type);
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = get(o, "pattern"), *beh = get(o, "behavior");
        const cJSON *re = cJSON_IsObject(pat) ? get(pat, "Regex") : NULL;
        const cJSON *lit = cJSON_IsObject(pat) ? get(pat, "String") : NULL;
        int invert;
        if (!cJSON_IsString(re) && !cJSON_IsString(lit))
            return lf_fail(LF_ERR_FORMAT, "%s: %s.pattern must be {\"Regex\": ...} or {\"String\": ...}", L->what,
                           where);
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: %s: behavior '%.100s' is not supported (only Isolated)", L->what,
                           where, cJSON_IsString(beh) ? beh->valuestring : json_kind(beh));
        if ((st = get_bool(L, o, where, "invert", 0, &invert)) != LF_OK) return st;
        if (invert) return lf_fail(LF_ERR_UNSUPPORTED, "%s: %s: invert true is not supported", L->what, where);
        const char *src = cJSON_IsString(re) ? re->valuestring : lit->valuestring;
        if ((st = add_step(L, src, strlen(src), !cJSON_IsString(re), where)) != LF_OK) return st;
        int known = cJSON_IsString(re) && (strcmp(src, g_llama3_re) == 0 || strcmp(src, g_qwen2_re) == 0);
        cut_add(cut, known ? CUT_ALNUM : CUT_NEVER);
        return LF_OK;
    }
    if (strcmp(type, "Digits") == 0) {
        int individual;
        if ((st = get_bool(L, o, where, "individual_digits", 0, &individual)) != LF_OK) return st;
        /* Rust's char::is_numeric is general category N; runs of it, or each alone */
        const char *src = individual ? "\\p{N}" : "\\p{N}+";
        if ((st = add_step(L, src, strlen(src), 0, where)) != LF_OK) return st;
        cut_add(cut, CUT_ANY);
        return LF_OK;
    }
    return lf_fail(LF_ERR_UNSUPPORTED,
                   "%s: %s: pre-tokenizer type '%.100s' is not supported (ByteLevel, Split, Digits; byte-level BPE "
                   "only)",
                   L->what, where, type);
}

static lf_status load_pretok(loader *L, const cJSON *pt) {
    cut_acc cut = {0, 0, 0};
    lf_status st;
    const cJSON *ty = cJSON_IsObject(pt) ? get(pt, "type") : NULL;
    if (!pt || cJSON_IsNull(pt))
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: pre_tokenizer is null (byte-level BPE needs ByteLevel)", L->what);
    if (cJSON_IsString(ty) && strcmp(ty->valuestring, "Sequence") == 0) {
        const cJSON *list = get(pt, "pretokenizers");
        int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
        if (n == 0) return lf_fail(LF_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers must be a non-empty array", L->what);
        for (int i = 0; i < n; i++) {
            char where[64];
            snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%d]", i);
            if ((st = load_step(L, cJSON_GetArrayItem(list, i), where, i == n - 1, &cut)) != LF_OK) return st;
        }
    } else if ((st = load_step(L, pt, "pre_tokenizer", 1, &cut)) != LF_OK) {
        return st;
    }
    L->t->cut = cut.never || !cut.boundary ? CUT_NEVER : cut.max;
    return LF_OK;
}

/* The normalizer n at `where` (not null): NFC, or a Sequence (of Sequences) of NFC; sets t->nfc when one is
 * there (an empty Sequence changes nothing, NFC twice is NFC once). */
static lf_status load_normalizer(loader *L, const cJSON *n, const char *where, int depth) {
    const cJSON *ty = cJSON_IsObject(n) ? get(n, "type") : NULL;
    if (!cJSON_IsString(ty))
        return lf_fail(LF_ERR_FORMAT, "%s: %s must be an object with a string \"type\", not %s", L->what, where,
                       cJSON_IsObject(n) ? "an object without one" : json_kind(n));
    if (strcmp(ty->valuestring, "NFC") == 0) {
        L->t->nfc = 1;
        return LF_OK;
    }
    if (strcmp(ty->valuestring, "Sequence") != 0)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: %s '%.100s' is not supported (only NFC, alone or in a Sequence: the normalizer rewrites "
                       "the text before the byte-level BPE sees it)",
                       L->what, where, ty->valuestring);
    if (depth >= HF_MAX_NORM_DEPTH)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: %s: Sequence normalizers nested more than %d deep", L->what, where,
                       HF_MAX_NORM_DEPTH);
    const cJSON *list = get(n, "normalizers");
    if (!cJSON_IsArray(list))
        return lf_fail(LF_ERR_FORMAT, "%s: %s.normalizers must be an array, not %s", L->what, where, json_kind(list));
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        char at[160];
        snprintf(at, sizeof at, "%s.normalizers[%d]", where, i++);
        if (cJSON_IsNull(it)) /* tokenizers refuses such a file too */
            return lf_fail(LF_ERR_FORMAT, "%s: %s is null; a Sequence holds normalizers", L->what, at);
        lf_status st = load_normalizer(L, it, at, depth + 1);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

/* Fields that must be absent or null, the normalizer, and the model's options. */
static lf_status check_fields(loader *L, const cJSON *root, const cJSON *model) {
    static const char *const must_be_null[] = {"truncation", "padding"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *v = get(root, must_be_null[i]);
        if (v && !cJSON_IsNull(v))
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: %s is set; only null is supported (it would change the ids)",
                           L->what, must_be_null[i]);
    }
    const cJSON *norm = get(root, "normalizer");
    lf_status st;
    if (norm && !cJSON_IsNull(norm) && (st = load_normalizer(L, norm, "normalizer", 0)) != LF_OK) return st;
    const cJSON *dec = get(root, "decoder"), *dty = cJSON_IsObject(dec) ? get(dec, "type") : NULL;
    if (!cJSON_IsString(dty) || strcmp(dty->valuestring, "ByteLevel") != 0)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: decoder '%.100s' is not supported (only ByteLevel)", L->what,
                       cJSON_IsString(dty) ? dty->valuestring : json_kind(dec));
    const cJSON *v = get(model, "dropout");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: model.dropout is set (random merges); only null is supported", L->what);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        v = get(model, affixes[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == 0))
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: model.%s is set; only null is supported (byte-level BPE)", L->what,
                           affixes[i]);
    }
    int fallback;
    st = get_bool(L, model, "model", "byte_fallback", 0, &fallback);
    if (st != LF_OK) return st;
    if (fallback)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: model.byte_fallback true is not supported (byte-level BPE only)",
                       L->what);
    return get_bool(L, model, "model", "ignore_merges", 0, &L->t->ignore_merges);
}

/* Per-id decode bytes: added tokens their content, vocabulary tokens their
 * bytes (or their text when outside the alphabet). */
static lf_status build_decode(loader *L) {
    hf_tok *t = L->t;
    const lf__bpe *b = &t->b;
    const added_tok **by_id = calloc(t->vocab_size, sizeof *by_id);
    t->dec_off = calloc(t->vocab_size, sizeof *t->dec_off);
    t->dec_len = calloc(t->vocab_size, sizeof *t->dec_len);
    if (!by_id || !t->dec_off || !t->dec_len) {
        free(by_id);
        return lf_fail(LF_ERR_NOMEM, "%s: out of memory", L->what);
    }
    for (size_t i = 0; i < t->n_added; i++) by_id[t->added[i].id] = &t->added[i];
    size_t total = 0;
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        if (by_id[id]) t->dec_len[id] = by_id[id]->len;
        else if (L->id_mapped[id]) t->dec_len[id] = b->tok_len[id];
        else if (L->id_text[id]) t->dec_len[id] = (uint32_t)strlen(L->id_text[id]);
        total += t->dec_len[id];
    }
    t->dec_blob = malloc(total + 1);
    if (!t->dec_blob) {
        free(by_id);
        return lf_fail(LF_ERR_NOMEM, "%s: out of memory", L->what);
    }
    size_t at = 0;
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        const unsigned char *src = by_id[id]          ? t->added_blob + by_id[id]->off
                                   : L->id_mapped[id] ? b->blob + b->tok_off[id]
                                                      : (const unsigned char *)L->id_text[id];
        t->dec_off[id] = (uint32_t)at;
        if (t->dec_len[id]) memcpy(t->dec_blob + at, src, t->dec_len[id]);
        at += t->dec_len[id];
    }
    free(by_id);
    return LF_OK;
}

/* The id of the added token with this text, LF_BPE_NONE when none. */
static uint32_t find_special(const hf_tok *t, const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].clen == n && memcmp(t->added_blob + t->added[i].coff, name, n) == 0) return t->added[i].id;
    return LF_BPE_NONE;
}

static lf_status hf_open(void **state, int *vocab_size, const char *path) {
    *state = NULL;
    *vocab_size = 0;
    loader L;
    memset(&L, 0, sizeof L);
    byte_alphabet(L.cp_byte);
    char *buf = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    char what[64 + 4096];
    snprintf(what, sizeof what, "hf tokenizer '%s'", path);
    L.what = what;
    lf_status st;
    hf_tok *t = calloc(1, sizeof *t);
    if (t) t->path = strdup(path);
    if (!t || !t->path) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
        goto fail;
    }
    L.t = t;
    if ((st = lf_file_read_all(path, HF_FILE_MAX_BYTES, &buf, &len)) != LF_OK) {
        lf_error_prefix("hf tokenizer");
        goto fail;
    }
    root = cJSON_ParseWithLength(buf, len);
    if (!root) {
        const char *e = cJSON_GetErrorPtr();
        size_t off = e && e >= buf && e <= buf + len ? (size_t)(e - buf) : len;
        st = lf_fail(LF_ERR_FORMAT, "%s: not valid JSON (parse error near byte %zu of %zu%s)", what, off, len,
                     off + 1 >= len ? ": the text ends too soon, truncated?" : "");
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        st = lf_fail(LF_ERR_FORMAT, "%s: the file is %s, not a JSON object", what, json_kind(root));
        goto fail;
    }
    const cJSON *model = get(root, "model"), *mtype = cJSON_IsObject(model) ? get(model, "type") : NULL;
    if (!cJSON_IsObject(model)) {
        st = lf_fail(LF_ERR_FORMAT, "%s: \"model\" is %s, not an object", what, json_kind(model));
        goto fail;
    }
    if (!cJSON_IsString(mtype)) {
        st = lf_fail(LF_ERR_FORMAT, "%s: model.type is %s, not a string", what, json_kind(mtype));
        goto fail;
    }
    if (strcmp(mtype->valuestring, "BPE") != 0) {
        st = lf_fail(LF_ERR_UNSUPPORTED, "%s: model type '%.100s' is not supported (byte-level BPE only)", what,
                     mtype->valuestring);
        goto fail;
    }
    if ((st = check_fields(&L, root, model)) != LF_OK) goto fail;
    const cJSON *vocab = get(model, "vocab"), *merges = get(model, "merges"), *added = get(root, "added_tokens");
    if (!cJSON_IsObject(vocab)) {
        st = lf_fail(LF_ERR_FORMAT, "%s: model.vocab is %s, not an object", what, json_kind(vocab));
        goto fail;
    }
    if (merges && !cJSON_IsArray(merges)) {
        st = lf_fail(LF_ERR_FORMAT, "%s: model.merges is %s, not an array", what, json_kind(merges));
        goto fail;
    }
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added)) {
        st = lf_fail(LF_ERR_FORMAT, "%s: added_tokens is %s, not an array", what, json_kind(added));
        goto fail;
    }
    if (added && !cJSON_IsArray(added)) added = NULL;
    if ((st = load_vocab(&L, vocab, added)) != LF_OK) goto fail;
    if (merges && (st = load_merges(&L, merges)) != LF_OK) goto fail;
    if (!merges && (st = lf__bpe_set_merges(&t->b, NULL, NULL, NULL, 0, what)) != LF_OK) goto fail;
    if ((st = load_added(&L, added)) != LF_OK) goto fail;
    if ((st = load_pretok(&L, get(root, "pre_tokenizer"))) != LF_OK) goto fail;
    if ((st = build_decode(&L)) != LF_OK) goto fail;
    /* an added token holding ASCII whitespace could straddle a cut */
    for (size_t i = 0; i < t->n_added && t->cut != CUT_NEVER; i++)
        for (uint32_t k = 0; k < t->added[i].len; k++) {
            unsigned char c = t->added_blob[t->added[i].off + k];
            if (c == ' ' || (c >= '\t' && c <= '\r')) t->cut = CUT_NEVER;
        }
    t->eot = -1;
    for (size_t i = 0; i < sizeof g_eot_names / sizeof g_eot_names[0] && t->eot < 0; i++) {
        uint32_t id = find_special(t, g_eot_names[i]);
        if (id == LF_BPE_NONE)
            id = lf__bpe_lookup(&t->b, (const unsigned char *)g_eot_names[i], strlen(g_eot_names[i]));
        if (id != LF_BPE_NONE) t->eot = (int)id;
    }
    st = LF_OK;
fail:
    cJSON_Delete(root);
    lf_free(buf);
    free(L.id_text);
    free(L.id_mapped);
    free(L.raw);
    free(L.raw_id);
    free(L.scratch);
    if (st != LF_OK) {
        hf_free(t);
        return st;
    }
    *state = t;
    *vocab_size = (int)t->vocab_size;
    return LF_OK;
}

/* ---------------------------------------------------------------- encode */

typedef struct enc {
    const hf_tok *t;
    const lf_encode_opts *o;
    lf__pretok_scan sc[HF_MAX_STEPS];
    uint32_t *v; /* the ids so far */
    size_t n, cap;
    size_t base;      /* offset of the text in the caller's whole text (messages) */
    lf__nfc_buf norm; /* the normalized stretch pass 1 is reading (reused for each) */
} enc;

static int reserve(enc *e, size_t more) {
    if (e->cap - e->n >= more) return 1;
    size_t cap = e->cap ? e->cap : 64;
    while (cap - e->n < more) {
        if (cap > SIZE_MAX / 2 / sizeof(uint32_t)) return 0;
        cap *= 2;
    }
    uint32_t *v = realloc(e->v, cap * sizeof *v);
    if (!v) return 0;
    e->v = v;
    e->cap = cap;
    return 1;
}

static lf_status oom(void) { return lf_fail(LF_ERR_NOMEM, "hf tokenizer: out of memory encoding"); }

/* One pre-token: its token (ignore_merges) or the BPE of its bytes. */
static lf_status emit_piece(enc *e, const unsigned char *p, size_t n) {
    const lf__bpe *b = &e->t->b;
    if (n >= UINT32_MAX) return lf_fail(LF_ERR_RANGE, "hf tokenizer: a piece of %zu bytes is more than 4 GiB", n);
    if (!reserve(e, n)) return oom();
    if (n == 1) {
        e->v[e->n++] = b->byte_id[p[0]];
        return LF_OK;
    }
    if (e->t->ignore_merges) {
        uint32_t r = lf__bpe_lookup(b, p, n);
        if (r != LF_BPE_NONE) {
            e->v[e->n++] = r;
            return LF_OK;
        }
    }
    size_t m = lf__bpe_merge(b, p, n, e->v + e->n, 0);
    if (m == SIZE_MAX) return lf_fail(LF_ERR_NOMEM, "hf tokenizer: out of memory merging a piece of %zu bytes", n);
    e->n += m;
    return LF_OK;
}

/* Pre-tokeniser step k over the valid UTF-8 piece s[0, n): its matches and
 * the gaps between them, each cut further by the next step. */
static lf_status split_step(enc *e, int k, const unsigned char *s, size_t n) {
    if (k == e->t->n_steps) return emit_piece(e, s, n);
    lf__pretok_scan *sc = &e->sc[k];
    size_t pos = 0, gap = 0, last_end = SIZE_MAX;
    lf_status st;
    while (pos <= n) {
        size_t a, b;
        st = lf__pretok_next(sc, s, n, pos, &a, &b);
        if (st == LF_ERR_NOT_FOUND) break;
        if (st != LF_OK) return st;
        if (a == b && b == last_end) { /* empty, where the last match ended: one character on */
            if (pos >= n) break;
            pos += lf__utf8_lead_len(s[pos]);
            continue;
        }
        if (a > gap && (st = split_step(e, k + 1, s + gap, a - gap)) != LF_OK) return st;
        if (b > a && (st = split_step(e, k + 1, s + a, b - a)) != LF_OK) return st;
        gap = pos = last_end = b;
    }
    if (gap < n) return split_step(e, k + 1, s + gap, n - gap);
    return LF_OK;
}

/* The invalid byte s[at] of a stretch at offset off of the text. */
static lf_status bad_utf8(const enc *e, const unsigned char *s, size_t n, size_t off, size_t at) {
    uint32_t cp;
    const char *why = "";
    lf__utf8_decode(s + at, n - at, &cp, &why);
    return lf_fail(LF_ERR_FORMAT, "hf tokenizer: invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)",
                   e->base + off + at, s[at], why);
}

/* Text between added tokens: UTF-8 checked, invalid bytes per the policy,
 * valid runs pre-tokenised each on its own. off: s's offset in the text. */
static lf_status encode_text(enc *e, const unsigned char *s, size_t n, size_t off) {
    size_t at = 0;
    while (at < n) {
        size_t v = lf__utf8_valid_prefix(s + at, n - at);
        if (v) {
            lf_status st = split_step(e, 0, s + at, v);
            if (st != LF_OK) return st;
        }
        at += v;
        if (at >= n) break;
        if (e->o->invalid_utf8 != LF_UTF8_BYTES) return bad_utf8(e, s, n, off, at);
        if (!reserve(e, 1)) return oom();
        e->v[e->n++] = e->t->b.byte_id[s[at]];
        at++;
    }
    return LF_OK;
}

/* The longest added token of a pass at s[i], or -1. */
static long added_at(const hf_tok *t, int pass, const unsigned char *s, size_t n, size_t i) {
    unsigned c = s[i];
    for (uint32_t k = t->lo[pass][c]; k < t->hi[pass][c]; k++) {
        const added_tok *a = &t->added[k];
        if (a->len <= n - i && memcmp(t->added_blob + a->off, s + i, a->len) == 0) return (long)k;
    }
    return -1;
}

static lf_status encode_pass(enc *e, int pass, const unsigned char *s, size_t n, size_t off);

/* A stretch between added tokens with normalized false, normalized (NFC)
 * before pass 1 reads it. The invalid bytes are checked first, in the text as
 * given, so an error names the caller's offset; with LF_UTF8_BYTES each is
 * kept, and each valid run between them is normalized on its own (as it is
 * encoded on its own). A stretch NFC leaves as it is is read in place. After
 * normalization, offsets of the stretch (used only for invalid UTF-8, which
 * is then gone or kept as bytes) no longer name the caller's bytes. */
static lf_status encode_normalized(enc *e, const unsigned char *s, size_t n, size_t off) {
    if (!lf__hf_nfc_needed(s, n)) return encode_pass(e, 1, s, n, off);
    e->norm.len = 0;
    lf_status st;
    size_t at = 0;
    while (at < n) {
        size_t v = lf__utf8_valid_prefix(s + at, n - at);
        if (v && (st = lf__hf_nfc_append(s + at, v, &e->norm)) != LF_OK) {
            lf_error_prefix("hf tokenizer: the text at byte offset %zu", e->base + off + at);
            return st;
        }
        at += v;
        if (at >= n) break;
        if (e->o->invalid_utf8 != LF_UTF8_BYTES) return bad_utf8(e, s, n, off, at);
        if ((st = lf__nfc_buf_put(&e->norm, s + at, 1)) != LF_OK) return st;
        at++;
    }
    return encode_pass(e, 1, e->norm.p, e->norm.len, off);
}

/* After pass `pass` (0 or 1), a stretch goes to the next: normalized first
 * when the normalizer is NFC and pass 1 is next. */
static lf_status next_pass(enc *e, int pass, const unsigned char *s, size_t n, size_t off) {
    if (pass == 0 && e->t->nfc) return encode_normalized(e, s, n, off);
    return encode_pass(e, pass + 1, s, n, off);
}

/* Pass 0 (added tokens with normalized false, in the text as given), pass 1
 * (normalized true, in the normalized text), then the text: leftmost
 * matches, longest first, without overlap. */
static lf_status encode_pass(enc *e, int pass, const unsigned char *s, size_t n, size_t off) {
    const hf_tok *t = e->t;
    if (pass == 2) return encode_text(e, s, n, off);
    if (t->n_pass[pass] == 0) return next_pass(e, pass, s, n, off);
    size_t seg = 0, i = 0;
    lf_status st;
    while (i < n) {
        if (t->hi[pass][s[i]] == 0) {
            i++;
            continue;
        }
        long k = added_at(t, pass, s, n, i);
        if (k < 0) {
            i++;
            continue;
        }
        const added_tok *a = &t->added[k];
        if (a->special && !e->o->allow_special) { /* stays text; the search goes on after it */
            i += a->len;
            continue;
        }
        if ((st = next_pass(e, pass, s + seg, i - seg, off + seg)) != LF_OK) return st;
        if (!reserve(e, 1)) return oom();
        e->v[e->n++] = a->id;
        i += a->len;
        seg = i;
    }
    return next_pass(e, pass, s + seg, n - seg, off + seg);
}

static lf_status hf_encode_ex(const void *state, const char *text, size_t len, const lf_encode_opts *o, size_t base,
                              uint32_t **ids, size_t *n) {
    const hf_tok *t = state;
    enc e;
    memset(&e, 0, sizeof e);
    e.t = t;
    e.o = o;
    e.base = base;
    lf_status st = LF_OK;
    for (int k = 0; k < t->n_steps; k++)
        if ((st = lf__pretok_scan_init(&e.sc[k], t->step[k])) != LF_OK) goto done;
    if (!reserve(&e, len / 4 + 16)) {
        st = oom();
        goto done;
    }
    if ((st = encode_pass(&e, 0, (const unsigned char *)text, len, 0)) != LF_OK) goto done;
    *ids = lf_alloc(e.n * sizeof **ids);
    if (!*ids) {
        st = oom();
        goto done;
    }
    if (e.n) memcpy(*ids, e.v, e.n * sizeof **ids);
    *n = e.n;
done:
    for (int k = 0; k < t->n_steps; k++) lf__pretok_scan_done(&e.sc[k]); /* a zeroed scan is a no-op */
    free(e.v);
    free(e.norm.p);
    return st;
}

static lf_status hf_encode(const void *state, const char *text, size_t len, uint32_t **ids, size_t *n) {
    lf_encode_opts o = lf_encode_opts_default();
    return hf_encode_ex(state, text, len, &o, 0, ids, n);
}

/* ---------------------------------------------------------------- decode, cuts, special tokens */

static lf_status hf_decode(const void *state, const uint32_t *ids, size_t n, char **text, size_t *len) {
    const hf_tok *t = state;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->vocab_size || t->dec_len[id] == 0)
            return lf_fail(LF_ERR_RANGE, "hf tokenizer: token id %u at position %zu is not in the vocabulary (%s)",
                           (unsigned)id, i,
                           id < t->vocab_size ? "an id the file does not use" : "vocab_size too small");
        total += t->dec_len[id];
    }
    char *out = lf_alloc(total + 1);
    if (!out) return lf_fail(LF_ERR_NOMEM, "hf tokenizer: out of memory decoding %zu tokens", n);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + at, t->dec_blob + t->dec_off[ids[i]], t->dec_len[ids[i]]);
        at += t->dec_len[ids[i]];
    }
    out[at] = 0;
    *text = out;
    *len = at;
    return LF_OK;
}

static int ascii_ws(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int ascii_alnum(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*
 * Why CUT_ALNUM is safe for the Llama 3 and Qwen2 patterns: let text[p-1] be
 * an ASCII letter or digit and text[p] ASCII whitespace. No alternative
 * holds a letter or digit followed by whitespace (letters-only,
 * digits-only, contractions ending in a letter, punctuation runs without
 * letters or digits, whitespace-only runs), so a piece ends at p in the
 * whole text, and no lookahead reaches p from a piece ending before it (only
 * \s+(?!\S) looks ahead, from whitespace, and text[p-1] is not). Nothing
 * looks behind, so matching resumes at p as it starts on the right part.
 * Added tokens hold no whitespace (else CUT_NEVER), so none straddles p.
 * (CUT_GPT2 is lf__bpe_cut's rule, argued in bpe_pretok.c; Digits steps,
 * single-character matches, cut the same either way.)
 */
static size_t hf_cut(const void *state, const char *text, size_t len, size_t from) {
    const hf_tok *t = state;
    if (t->cut == CUT_NEVER) return len;
    if (t->cut != CUT_ALNUM) return lf__bpe_cut(text, len, from);
    const unsigned char *s = (const unsigned char *)text;
    for (size_t p = from < 1 ? 1 : from; p < len; p++)
        if (ascii_ws(s[p]) && ascii_alnum(s[p - 1])) return p;
    return len;
}

static lf_status hf_special_id(const void *state, const char *name, uint32_t *id) {
    const hf_tok *t = state;
    uint32_t r = find_special(t, name);
    if (r == LF_BPE_NONE) {
        char list[256] = "";
        size_t at = 0;
        for (size_t i = 0; i < t->n_added && i < 4 && at + 1 < sizeof list; i++) {
            const added_tok *a = &t->added[i];
            int w = snprintf(list + at, sizeof list - at, "%s'%.*s'", i ? ", " : "", (int)(a->clen > 40 ? 40 : a->clen),
                             (const char *)t->added_blob + a->coff);
            if (w < 0) break;
            at += (size_t)w;
        }
        (void)at;
        return lf_fail(LF_ERR_NOT_FOUND, "hf tokenizer '%s': no added token '%s' (it has %zu%s%s%s)", t->path, name,
                       t->n_added, t->n_added ? ": " : "", list, t->n_added > 4 ? ", ..." : "");
    }
    *id = r;
    return LF_OK;
}

static int hf_eot(const void *state) {
    const hf_tok *t = state;
    return t->eot;
}

const lf__tokenizer_ops lf__tokenizer_hf_ops = {
    .prefix = "hf:",
    .open = hf_open,
    .free = hf_free,
    .encode = hf_encode,
    .decode = hf_decode,
    .arg_is_path = 1,
    .encode_ex = hf_encode_ex,
    .cut = hf_cut,
    .special_id = hf_special_id,
    .eot = hf_eot,
};
