/*
 * Unicode NFC as Hugging Face tokenizers' NFC normalizer computes it (Qwen2
 * and Qwen2.5 tokenizer.json files have "normalizer": {"type": "NFC"}), for
 * the "hf:" tokenizer kind (tokenizer_hf.c).
 *
 * Why utf8proc: NFC needs the Unicode Character Database (canonical
 * combining classes, canonical decompositions, composition exclusions, the
 * Hangul algorithm), which utf8proc holds and Debian packages
 * (libutf8proc-dev); carrying our own copy of those tables would be a second
 * Unicode database to keep current. utf8proc_map(UTF8PROC_STABLE |
 * UTF8PROC_COMPOSE) is what utf8proc_NFC does, with a length instead of a
 * NUL terminator (the text may hold U+0000).
 *
 * Why not utf8proc alone: tokenizers normalizes with the
 * unicode-normalization-alignments crate, whose tables are Unicode 9's,
 * while Debian 12's utf8proc 2.8 has Unicode 15's. For a code point
 * assigned since Unicode 9 tokenizers knows no combining class and no
 * composition: it is a plain starter that blocks reordering and composition
 * across it. So are the code points of g_pass[] below (derived over every
 * code point by tools/reference/make_hf_tokenizer_fixture.py into
 * tests/fixtures/hf_tok/nfc_unicode.json; test_hf_tokenizer.c checks the
 * table against that file): the combining marks added in Unicode 10..15,
 * U+11930 (tokenizers does not compose U+11935 U+11930 into U+11938, new
 * in Unicode 13), and U+11A7, the Hangul TBase, which utf8proc before 2.11
 * composes into a preceding LV syllable, deleting it
 * (JuliaStrings/utf8proc#317; Unicode and tokenizers do not). The text is
 * cut before and after each such code point, the pieces between are
 * normalized by utf8proc and the code point itself is kept: that is exactly
 * tokenizers' result, since a starter without compositions is a boundary
 * of normalization (UAX #15, section 9). The fixture script checks this
 * equality on every code point in eight contexts.
 *
 * Invariants: the input is valid UTF-8 (the caller cuts out invalid bytes);
 * a long text is normalized in pieces of at least NFC_PIECE bytes, each cut
 * before the first ASCII byte after that (ASCII has combining class 0 and
 * composes with nothing before it, so such a cut changes nothing), which
 * bounds utf8proc's working memory (4 bytes per decomposed code point) by
 * the piece, not the text, wherever the text has ASCII; a piece without a
 * byte >= 0xCC is copied (lf__hf_nfc_needed). The output is at most 3 times
 * the input (the NFC expansion bound of UAX #15).
 *
 * References: UAX #15 (Unicode Normalization Forms), Unicode 15 chapter 3.11
 * and 3.12 (canonical ordering, composition, Hangul); utf8proc.h;
 * tokenizers/src/normalizers/unicode.rs and tokenizer/normalizer.rs (nfc()
 * over unicode-normalization-alignments), read for their semantics.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "hf_nfc.h"
#include "data_impl.h"

#define NFC_PIECE ((size_t)64 << 10)

/* Code points NFC keeps and cuts around (see above); sorted, inclusive. */
static const uint32_t g_pass[][2] = {
    {0x07FD, 0x07FD},   {0x0898, 0x089F},   {0x08CA, 0x08D3},   {0x09FE, 0x09FE},   {0x0C3C, 0x0C3C},
    {0x0D3B, 0x0D3C},   {0x0EBA, 0x0EBA},   {0x11A7, 0x11A7},   {0x1715, 0x1715},   {0x1ABF, 0x1ACE},
    {0x1DF6, 0x1DFA},   {0xA82C, 0xA82C},   {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF},
    {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E},
    {0x11839, 0x1183A}, {0x11930, 0x11930}, {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0},
    {0x11A34, 0x11A34}, {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45},
    {0x11D97, 0x11D97}, {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
};
#define N_PASS (sizeof g_pass / sizeof g_pass[0])

int lf__hf_nfc_pass_through(uint32_t cp) {
    size_t lo = 0, hi = N_PASS;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < g_pass[mid][0]) hi = mid;
        else if (cp > g_pass[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int lf__hf_nfc_needed(const unsigned char *s, size_t n) {
    unsigned char any = 0;
    for (size_t i = 0; i < n; i++) any |= (unsigned char)(s[i] >= 0xCC); /* no branch: vectorizes */
    return any;
}

lf_status lf__nfc_buf_put(lf__nfc_buf *b, const void *s, size_t n) {
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) return lf_fail(LF_ERR_NOMEM, "NFC: a text of more than %zu bytes", SIZE_MAX / 2);
            cap *= 2;
        }
        unsigned char *p = realloc(b->p, cap);
        if (!p) return lf_fail(LF_ERR_NOMEM, "NFC: out of memory for %zu bytes", cap);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    return LF_OK;
}

/* One piece without pass-through code points: utf8proc, or a copy. */
static lf_status piece(const unsigned char *s, size_t n, lf__nfc_buf *b) {
    if (n == 0) return LF_OK;
    if (!lf__hf_nfc_needed(s, n)) return lf__nfc_buf_put(b, s, n);
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t m = utf8proc_map(s, (utf8proc_ssize_t)n, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0) {
        free(out);
        return lf_fail(m == UTF8PROC_ERROR_NOMEM ? LF_ERR_NOMEM : LF_ERR_FORMAT, "NFC of %zu bytes: utf8proc: %s", n,
                       utf8proc_errmsg(m));
    }
    lf_status st = lf__nfc_buf_put(b, out, (size_t)m);
    free(out);
    return st;
}

lf_status lf__hf_nfc_append(const unsigned char *s, size_t n, lf__nfc_buf *b) {
    size_t start = 0, i = 0;
    lf_status st;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            if (i - start >= NFC_PIECE) { /* a cut before ASCII changes nothing */
                if ((st = piece(s + start, i - start, b)) != LF_OK) return st;
                start = i;
            }
            i++;
            continue;
        }
        uint32_t cp;
        const char *why = "";
        int k = lf__utf8_decode(s + i, n - i, &cp, &why);
        if (k == 0) return lf_fail(LF_ERR_FORMAT, "NFC: invalid UTF-8 at byte offset %zu (%s)", i, why);
        if (cp >= g_pass[0][0] && lf__hf_nfc_pass_through(cp)) { /* normalized apart from both sides, kept */
            if ((st = piece(s + start, i - start, b)) != LF_OK) return st;
            if ((st = lf__nfc_buf_put(b, s + i, (size_t)k)) != LF_OK) return st;
            start = i + (size_t)k;
        }
        i += (size_t)k;
    }
    return piece(s + start, n - start, b);
}
