/*
 * GPT-2 pre-tokeniser: the regular expression that cuts text into the pieces
 * byte-level BPE merges inside, run by PCRE2 (UTF + UCP, JIT-compiled).
 *
 * Pattern. GPT-2's encoder.py uses
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * and tiktoken's "gpt2"/r50k_base encoding the equivalent, faster
 *   '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s
 * (tiktoken_ext/openai_public.py). We use the latter with `$` written `\z`
 * (PCRE2's `$` also matches before a final newline; Rust's does not — the
 * possessive `\s++` makes the two agree anyway, `\z` says what is meant).
 *
 * Character classes. The ids must equal tiktoken's, whose regex engine
 * (Rust regex-syntax) carries Unicode 16 tables; Debian's PCRE2 10.42 carries
 * Unicode 14. So the classes are spelled out:
 *   - \s is Unicode White_Space (25 code points) exactly. PCRE2's own \s
 *     adds U+180E, which Unicode 6.3 moved out of White_Space.
 *   - \p{L} and \p{N} are PCRE2's properties plus the code points that
 *     Unicode 15.0 .. 16.0 made letters/numbers (35 and 10 ranges below).
 *     With a newer PCRE2 the additions are redundant, not wrong.
 * tools/reference/make_tiktoken_fixture.py writes the three classes as
 * tiktoken's engine sees them (tests/fixtures/tiktoken_unicode_classes.json)
 * and tests/data/test_bpe.c checks every code point through this pattern.
 *
 * Concurrency: the compiled pattern is shared read-only; each caller holds
 * an lf__pretok_scan (its match data, and a JIT stack only when a match
 * needs more than PCRE2's default 32 KiB of machine stack).
 *
 * Patterns from a file (lf__pretok_create_custom: a Hugging Face
 * tokenizer.json Split regex, Digits) are written for the engine tokenizers
 * uses, Oniguruma in its default Ruby syntax, whose Unicode tables are also
 * Unicode 16 (tools/reference/make_hf_tokenizer_fixture.py checks that they
 * equal tiktoken's). Before PCRE2 compiles such a pattern it is rewritten
 * where the two engines read the same text differently:
 *   - \s, \p{L}, \p{N} (also \pL, \pN, \P{..}, \p{^..}) become the
 *     spelled-out classes above, outside and inside [...]; \S outside a class
 *     becomes [^WS]. Negated forms inside a class are left to PCRE2 (they
 *     differ only on U+180E and the Unicode 15-16 additions).
 *   - Ruby's \h/\H are hex digits (PCRE2: horizontal space): [0-9a-fA-F].
 *   - Ruby's option (?m) is dot-matches-newline: PCRE2's (?s).
 *   - Ruby's ^ and $ always match at line breaks: PCRE2_MULTILINE.
 *   - Ruby's class set operations (&&, a [ nested in a class) have no PCRE2
 *     form: refused with a message naming the offset.
 * Everything else (\w, \b, \d, ...) is compiled as PCRE2 reads it.
 *
 * Subjects are valid UTF-8 (the caller checks, once per text): the JIT
 * matcher does no UTF check, and the interpreter fallback (no JIT on this
 * platform) is told PCRE2_NO_UTF_CHECK, so a text is never rescanned per
 * piece.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include "core/strbuf.h"
#include "data_impl.h"

/* Unicode White_Space: 0009..000D 0020 0085 00A0 1680 2000..200A 2028 2029 202F 205F 3000 */
#define WS "\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* General category L added by Unicode 15.0, 15.1 and 16.0 (absent from PCRE2 10.42's tables). */
#define L_EXTRA \
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}" \
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}" \
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}" \
    "\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}" \
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}" \
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
/* General category N added by Unicode 15.0 .. 16.0. */
#define N_EXTRA \
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}" \
    "\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}"

static const char g_pattern[] = "'(?:[sdmt]|ll|ve|re)"
                                "| ?[\\p{L}" L_EXTRA "]++"
                                "| ?[\\p{N}" N_EXTRA "]++"
                                "| ?[^" WS "\\p{L}" L_EXTRA "\\p{N}" N_EXTRA "]++"
                                "|[" WS "]++\\z"
                                "|[" WS "]+(?![^" WS "])"
                                "|[" WS "]";

struct lf__pretok {
    pcre2_code *re;
    int jit;          /* 1 when JIT compilation succeeded */
    const char *name; /* for messages */
    char *source;     /* the PCRE2 pattern compiled (custom patterns; NULL: g_pattern) */
};

const char *lf__pretok_pattern(void) { return g_pattern; }

const char *lf__pretok_source(const lf__pretok *p) { return p->source ? p->source : g_pattern; }

static lf_status compile(lf__pretok *p, const char *src, size_t len, uint32_t options, lf_status bad) {
    int err = 0;
    PCRE2_SIZE erroff = 0;
    p->re = pcre2_compile((PCRE2_SPTR)src, len, options, &err, &erroff, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return lf_fail(bad, "%s: PCRE2 cannot compile the pattern at offset %zu: %s", p->name, (size_t)erroff,
                       (const char *)msg);
    }
    /* JIT is an optimisation: without it (a platform PCRE2's JIT does not
     * support) the interpreter gives the same matches. */
    p->jit = pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE) == 0;
    return LF_OK;
}

lf_status lf__pretok_create(lf__pretok **out) {
    *out = NULL;
    lf__pretok *p = calloc(1, sizeof *p);
    if (!p) return lf_fail(LF_ERR_NOMEM, "GPT-2 pre-tokeniser: out of memory");
    p->name = "GPT-2 pre-tokeniser";
    lf_status st = compile(p, g_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, LF_ERR_INTERNAL);
    if (st != LF_OK) {
        free(p);
        return st;
    }
    *out = p;
    return LF_OK;
}

/* ---------------------------------------------------------------- patterns from files (Oniguruma, Ruby syntax) */

/* The class items standing for property L or N (inside [...]). */
static const char *prop_items(char c) { return c == 'L' ? "\\p{L}" L_EXTRA : "\\p{N}" N_EXTRA; }

/* Rewrite pat[0, n) (see the header); *out malloc'd and NUL-terminated. */
static lf_status translate(const char *pat, size_t n, const char *name, char **out) {
    lf__sb b = {0};
    int in_class = 0;    /* inside [...] */
    size_t class_at = 0; /* where the class's items start (a ']' there is literal) */
    size_t i = 0;
    *out = NULL;
    while (i < n) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char d = pat[i + 1];
            if (d == 'Q') { /* literal text up to \E */
                size_t e = i + 2;
                while (e + 1 < n && !(pat[e] == '\\' && pat[e + 1] == 'E')) e++;
                e = e + 1 < n ? e + 2 : n;
                lf__sb_put(&b, pat + i, e - i);
                i = e;
                continue;
            }
            if (d == 's') {
                lf__sb_puts(&b, in_class ? WS : "[" WS "]");
                i += 2;
                continue;
            }
            if (d == 'S' && !in_class) {
                lf__sb_puts(&b, "[^" WS "]");
                i += 2;
                continue;
            }
            if (d == 'h' || (d == 'H' && !in_class)) {
                lf__sb_puts(&b, d == 'H' ? "[^0-9a-fA-F]" : in_class ? "0-9a-fA-F" : "[0-9a-fA-F]");
                i += 2;
                continue;
            }
            if (d == 'H') {
                free(b.p);
                return lf_fail(LF_ERR_UNSUPPORTED, "%s: \\H inside a character class (offset %zu) is not supported",
                               name, i);
            }
            if (d == 'p' || d == 'P') {
                /* \pL, \p{L}, \p{^L}: the property letter and its negation */
                size_t e = i + 2;
                int neg = d == 'P', braced = e < n && pat[e] == '{';
                char prop = 0;
                if (braced) {
                    size_t q = e + 1;
                    if (q < n && pat[q] == '^') {
                        neg = !neg;
                        q++;
                    }
                    if (q + 1 < n && (pat[q] == 'L' || pat[q] == 'N') && pat[q + 1] == '}') {
                        prop = pat[q];
                        e = q + 2;
                    }
                } else if (e < n && (pat[e] == 'L' || pat[e] == 'N')) {
                    prop = pat[e];
                    e++;
                }
                if (prop && !(in_class && neg)) {
                    if (!in_class) lf__sb_puts(&b, neg ? "[^" : "[");
                    lf__sb_puts(&b, prop_items(prop));
                    if (!in_class) lf__sb_puts(&b, "]");
                    i = e;
                    continue;
                }
            }
            lf__sb_put(&b, pat + i, 2); /* any other escape: as PCRE2 reads it */
            i += 2;
            continue;
        }
        if (in_class) {
            if (c == ']' && i > class_at) {
                in_class = 0;
            } else if (c == '[' && i + 1 < n && pat[i + 1] == ':') { /* [:alpha:] */
                size_t e = i + 2;
                while (e + 1 < n && !(pat[e] == ':' && pat[e + 1] == ']')) e++;
                e = e + 1 < n ? e + 2 : n;
                lf__sb_put(&b, pat + i, e - i);
                i = e;
                continue;
            } else if (c == '[' || (c == '&' && i + 1 < n && pat[i + 1] == '&')) {
                free(b.p);
                return lf_fail(LF_ERR_UNSUPPORTED,
                               "%s: character class set operations ('&&' or a nested '[', offset %zu) are not "
                               "supported",
                               name, i);
            }
            lf__sb_put(&b, &c, 1);
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            lf__sb_put(&b, &c, 1);
            i++;
            if (i < n && pat[i] == '^') lf__sb_put(&b, pat + i++, 1);
            class_at = i;
            continue;
        }
        if (c == '(' && i + 1 < n && pat[i + 1] == '?') {
            /* (?imx-imx) or (?imx-imx:...): Ruby's m is PCRE2's s */
            size_t e = i + 2;
            while (e < n && (pat[e] == 'i' || pat[e] == 'm' || pat[e] == 'x' || pat[e] == '-')) e++;
            if (e > i + 2 && e < n && (pat[e] == ')' || pat[e] == ':')) {
                for (size_t k = i; k < e; k++) lf__sb_put(&b, pat[k] == 'm' && k >= i + 2 ? "s" : pat + k, 1);
                i = e;
                continue;
            }
        }
        lf__sb_put(&b, &c, 1);
        i++;
    }
    if (b.failed || !b.p) {
        free(b.p);
        if (b.failed) return lf_fail(LF_ERR_NOMEM, "%s: out of memory translating the pattern", name);
        b.p = calloc(1, 1);
        if (!b.p) return lf_fail(LF_ERR_NOMEM, "%s: out of memory translating the pattern", name);
    }
    *out = b.p;
    return LF_OK;
}

lf_status lf__pretok_create_custom(lf__pretok **out, const char *pattern, size_t len, int literal, const char *name) {
    *out = NULL;
    if (len > LF_PRETOK_MAX_PATTERN)
        return lf_fail(LF_ERR_RANGE, "%s: the pattern is %zu bytes, more than %u allowed", name, len,
                       (unsigned)LF_PRETOK_MAX_PATTERN);
    if (lf__utf8_valid_prefix((const unsigned char *)pattern, len) != len)
        return lf_fail(LF_ERR_FORMAT, "%s: the pattern is not valid UTF-8", name);
    lf__pretok *p = calloc(1, sizeof *p);
    if (!p) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", name);
    p->name = name;
    lf_status st;
    if (literal) {
        p->source = malloc(len + 1);
        if (!p->source) {
            st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", name);
            goto fail;
        }
        memcpy(p->source, pattern, len);
        p->source[len] = 0;
        st = compile(p, p->source, len, PCRE2_LITERAL | PCRE2_UTF, LF_ERR_FORMAT);
    } else {
        if ((st = translate(pattern, len, name, &p->source)) != LF_OK) goto fail;
        st = compile(p, p->source, strlen(p->source), PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, LF_ERR_FORMAT);
    }
    if (st != LF_OK) goto fail;
    *out = p;
    return LF_OK;
fail:
    lf__pretok_free(p);
    return st;
}

void lf__pretok_free(lf__pretok *p) {
    if (!p) return;
    if (p->re) pcre2_code_free(p->re);
    free(p->source);
    free(p);
}

lf_status lf__pretok_scan_init(lf__pretok_scan *s, const lf__pretok *p) {
    memset(s, 0, sizeof *s);
    s->p = p;
    s->md = pcre2_match_data_create_from_pattern(p->re, NULL);
    if (!s->md) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", p->name);
    return LF_OK;
}

void lf__pretok_scan_done(lf__pretok_scan *s) {
    if (s->md) pcre2_match_data_free(s->md);
    if (s->mc) pcre2_match_context_free(s->mc);
    if (s->js) pcre2_jit_stack_free(s->js);
    memset(s, 0, sizeof *s);
}

/* Give the scanner a JIT stack of up to 64 MiB (a whitespace run of millions
 * of characters backtracks over all of them). */
static lf_status grow_jit_stack(lf__pretok_scan *s) {
    if (s->js) return lf_fail(LF_ERR_RANGE, "%s: a piece needs more than 64 MiB of JIT stack", s->p->name);
    s->mc = pcre2_match_context_create(NULL);
    s->js = pcre2_jit_stack_create(32 * 1024, 64u << 20, NULL);
    if (!s->mc || !s->js) return lf_fail(LF_ERR_NOMEM, "%s: out of memory for the JIT stack", s->p->name);
    pcre2_jit_stack_assign(s->mc, NULL, s->js);
    return LF_OK;
}

lf_status lf__pretok_next(lf__pretok_scan *s, const unsigned char *text, size_t len, size_t pos, size_t *start,
                          size_t *end) {
    for (;;) {
        int rc;
        if (s->p->jit) rc = pcre2_jit_match(s->p->re, text, len, pos, 0, s->md, s->mc);
        else rc = pcre2_match(s->p->re, text, len, pos, PCRE2_NO_UTF_CHECK, s->md, s->mc);
        if (rc > 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            *start = ov[0];
            *end = ov[1];
            return LF_OK;
        }
        if (rc == PCRE2_ERROR_NOMATCH) return LF_ERR_NOT_FOUND;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            lf_status st = grow_jit_stack(s);
            if (st != LF_OK) return st;
            continue;
        }
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        /* a pattern from a file may backtrack past PCRE2's limits: the pattern's fault, not ours */
        int limit = rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT;
        return lf_fail(rc == PCRE2_ERROR_NOMEMORY ? LF_ERR_NOMEM
                       : limit                    ? LF_ERR_RANGE
                                                  : LF_ERR_INTERNAL,
                       "%s: PCRE2 match at byte %zu failed: %s", s->p->name, pos, (const char *)msg);
    }
}

/* ASCII whitespace as the pattern sees it (a subset of WS). */
static int ascii_ws(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/*
 * Why the cut is safe. Let text[p-1] be an ASCII character other than
 * whitespace and text[p] ASCII whitespace. The piece holding text[p-1]
 * cannot reach text[p]: whitespace joins a following non-space piece only as
 * its first character (" ?X"), and whitespace pieces hold only whitespace.
 * So some piece ends at p in the whole text, the pattern has no lookbehind,
 * and matching from p sees the same text either way; to the left, no piece
 * looks past its end except `(?!\S)`/`\z` after whitespace, which never
 * reaches p because text[p-1] is not whitespace. Special tokens contain no
 * whitespace, so none straddles p; a cut between ASCII characters is never
 * inside a multi-byte sequence.
 */
size_t lf__bpe_cut(const char *text, size_t len, size_t from) {
    const unsigned char *s = (const unsigned char *)text;
    size_t p = from < 1 ? 1 : from;
    for (; p < len; p++) {
        if (!ascii_ws(s[p])) continue;
        unsigned char c = s[p - 1];
        if (c > 0x20 && c < 0x7F) return p;
    }
    return len;
}
