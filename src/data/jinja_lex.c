/*
 * Jinja lexer (jinja.h): template source -> tokens, with whitespace
 * control applied to the text between tags, as jinja2's lexer does with
 * transformers' settings:
 *  - newlines are normalized ("\r\n", "\r" -> "\n") and one trailing
 *    newline of the source is dropped (keep_trailing_newline off);
 *  - "{{-", "{%-", "{#-" strip all whitespace before the tag; "-}}",
 *    "-%}", "-#}" all whitespace after it;
 *  - lstrip_blocks: the spaces and tabs between a line's start and a "{%"
 *    or "{#" are dropped ("{%+" keeps them);
 *  - trim_blocks: one newline right after "%}" or "#}" is dropped ("+%}"
 *    keeps it);
 *  - comments vanish; "}}" and "%}" close a tag only outside brackets.
 * String literals decode Python's escapes (\n \t \r \\ \' \" \a \b \f \v
 * \0 \xHH \uHHHH \UHHHHHHHH; an unknown escape stays as written).
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"
#include "jinja_impl.h"

typedef struct lexer {
    const char *s; /* normalized source */
    size_t n, i;
    int line;
    const char *what;
    jpool *pool;
    jtok *t;
    int nt, cap;
} lexer;

static lf_status push(lexer *x, jtok tk) {
    if (x->nt == x->cap) {
        int nc = x->cap ? 2 * x->cap : 256;
        jtok *q = lf__jpool_alloc(x->pool, (size_t)nc * sizeof *q);
        if (!q) return lf_fail(LF_ERR_NOMEM, "%s: out of memory lexing the template", x->what);
        if (x->nt) memcpy(q, x->t, (size_t)x->nt * sizeof *q);
        x->t = q;
        x->cap = nc;
    }
    x->t[x->nt++] = tk;
    return LF_OK;
}

static int count_lines(const char *p, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += p[i] == '\n';
    return k;
}

static void put_utf8(char *o, size_t *k, uint32_t cp) {
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*k)++] = (char)(0xC0 | (cp >> 6));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18));
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A quoted string starting at x->i (the quote). */
static lf_status lex_string(lexer *x) {
    char q = x->s[x->i];
    size_t j = x->i + 1;
    int line = x->line;
    while (j < x->n && x->s[j] != q) j += (x->s[j] == '\\' && j + 1 < x->n) ? 2 : 1;
    if (j >= x->n) return lf_fail(LF_ERR_FORMAT, "%s:%d: unterminated string literal", x->what, line);
    const char *p = x->s + x->i + 1;
    size_t n = j - x->i - 1;
    char *o = lf__jpool_alloc(x->pool, n + 1);
    if (!o) return lf_fail(LF_ERR_NOMEM, "%s: out of memory lexing the template", x->what);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 >= n) {
            o[k++] = p[i];
            continue;
        }
        char e = p[++i];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case '\n': break; /* a backslash-newline continues the line */
        default:
            if (digits) {
                uint32_t cp = 0;
                if (i + (size_t)digits >= n)
                    return lf_fail(LF_ERR_FORMAT, "%s:%d: truncated \\%c escape in a string literal", x->what, line, e);
                for (int d = 1; d <= digits; d++) {
                    int h = hexval(p[i + (size_t)d]);
                    if (h < 0)
                        return lf_fail(LF_ERR_FORMAT, "%s:%d: bad \\%c escape in a string literal", x->what, line, e);
                    cp = cp * 16 + (uint32_t)h;
                }
                if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0)
                    return lf_fail(LF_ERR_UNSUPPORTED, "%s:%d: escape \\%c in a string literal names U+%04X", x->what,
                                   line, e, (unsigned)cp);
                put_utf8(o, &k, cp);
                i += (size_t)digits;
            } else {
                o[k++] = '\\';
                o[k++] = e;
            }
        }
    }
    o[k] = 0;
    x->line += count_lines(x->s + x->i, j + 1 - x->i);
    x->i = j + 1;
    return push(x, (jtok){JT_STRING, line, o, k, 0, 0});
}

static lf_status lex_number(lexer *x) {
    size_t j = x->i;
    int is_float = 0;
    char buf[64];
    size_t k = 0;
    while (j < x->n && (isdigit((unsigned char)x->s[j]) || x->s[j] == '_')) {
        if (x->s[j] != '_' && k < sizeof buf - 1) buf[k++] = x->s[j];
        j++;
    }
    if (j + 1 < x->n && x->s[j] == '.' && isdigit((unsigned char)x->s[j + 1])) {
        is_float = 1;
        buf[k < sizeof buf - 1 ? k++ : k] = '.';
        j++;
        while (j < x->n && (isdigit((unsigned char)x->s[j]) || x->s[j] == '_')) {
            if (x->s[j] != '_' && k < sizeof buf - 1) buf[k++] = x->s[j];
            j++;
        }
    }
    if (j < x->n && (x->s[j] == 'e' || x->s[j] == 'E')) {
        size_t e = j + 1;
        if (e < x->n && (x->s[e] == '+' || x->s[e] == '-')) e++;
        if (e < x->n && isdigit((unsigned char)x->s[e])) {
            is_float = 1;
            while (j < e && k < sizeof buf - 1) buf[k++] = x->s[j++];
            while (j < x->n && isdigit((unsigned char)x->s[j])) {
                if (k < sizeof buf - 1) buf[k++] = x->s[j];
                j++;
            }
        }
    }
    buf[k] = 0;
    if (k >= sizeof buf - 1) return lf_fail(LF_ERR_UNSUPPORTED, "%s:%d: number literal too long", x->what, x->line);
    jtok tk = {is_float ? JT_FLOAT : JT_INT, x->line, NULL, 0, 0, 0};
    errno = 0;
    char *end = NULL;
    if (is_float) tk.f = strtod(buf, &end);
    else tk.i = strtoll(buf, &end, 10);
    if (errno || !end || *end)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s:%d: number literal '%s' out of range", x->what, x->line, buf);
    x->i = j;
    return push(x, tk);
}

static const char *const k_ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                    ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};

/* Tokens inside a tag up to its end ("}}" or "%}" at bracket depth 0).
 * *strip_after: the end was "-}}"/"-%}"; *keep_nl: "+%}". */
static lf_status lex_tag(lexer *x, char close, int *strip_after, int *keep_nl) {
    int depth = 0;
    for (;;) {
        while (x->i < x->n && isspace((unsigned char)x->s[x->i])) {
            if (x->s[x->i] == '\n') x->line++;
            x->i++;
        }
        if (x->i >= x->n)
            return lf_fail(LF_ERR_FORMAT, "%s:%d: unexpected end of template inside a tag", x->what, x->line);
        const char *p = x->s + x->i;
        size_t left = x->n - x->i;
        if (depth == 0) {
            int mod = (p[0] == '-' || p[0] == '+') ? 1 : 0;
            if (left >= (size_t)(2 + mod) && p[mod] == close && p[mod + 1] == '}') {
                *strip_after = p[0] == '-';
                *keep_nl = p[0] == '+';
                x->i += (size_t)(2 + mod);
                return push(x, (jtok){close == '}' ? JT_VAR_END : JT_BLOCK_END, x->line, NULL, 0, 0, 0});
            }
        }
        char ch = p[0];
        if (ch == '\'' || ch == '"') {
            lf_status st = lex_string(x);
            if (st != LF_OK) return st;
            continue;
        }
        if (isdigit((unsigned char)ch)) {
            lf_status st = lex_number(x);
            if (st != LF_OK) return st;
            continue;
        }
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t j = x->i;
            while (j < x->n && (isalnum((unsigned char)x->s[j]) || x->s[j] == '_')) j++;
            lf_status st = push(x, (jtok){JT_NAME, x->line, p, j - x->i, 0, 0});
            if (st != LF_OK) return st;
            x->i = j;
            continue;
        }
        size_t oi = 0, nops = sizeof k_ops / sizeof *k_ops;
        for (; oi < nops; oi++) {
            size_t ol = strlen(k_ops[oi]);
            if (left >= ol && !memcmp(p, k_ops[oi], ol)) break;
        }
        if (oi == nops) {
            if ((unsigned char)ch < 0x20 || (unsigned char)ch >= 0x7f)
                return lf_fail(LF_ERR_FORMAT, "%s:%d: unexpected byte 0x%02x in a tag", x->what, x->line,
                               (unsigned char)ch);
            return lf_fail(LF_ERR_FORMAT, "%s:%d: unexpected character '%c' in a tag", x->what, x->line, ch);
        }
        if (ch == '(' || ch == '[' || ch == '{') depth++;
        if (ch == ')' || ch == ']' || ch == '}') {
            if (depth == 0) return lf_fail(LF_ERR_FORMAT, "%s:%d: unbalanced '%c' in a tag", x->what, x->line, ch);
            depth--;
        }
        size_t ol = strlen(k_ops[oi]);
        lf_status st = push(x, (jtok){JT_OP, x->line, k_ops[oi], ol, 0, 0});
        if (st != LF_OK) return st;
        x->i += ol;
        if (depth > LF__JINJA_DEPTH_MAX)
            return lf_fail(LF_ERR_RANGE, "%s:%d: brackets nest deeper than %d", x->what, x->line, LF__JINJA_DEPTH_MAX);
    }
}

/* The text [from, to) as a token, with whitespace control: strip_before
 * (the next tag is "{x-"), lstrip (the next tag is a block or comment
 * without '+'), skip_first_nl / strip_lead (the previous tag's end). */
static lf_status emit_text(lexer *x, size_t from, size_t to, int line, int strip_lead, int skip_nl, int strip_before,
                           int lstrip) {
    if (strip_lead)
        while (from < to && isspace((unsigned char)x->s[from])) from++;
    else if (skip_nl && from < to && x->s[from] == '\n') from++;
    if (strip_before) {
        while (to > from && isspace((unsigned char)x->s[to - 1])) to--;
    } else if (lstrip) {
        size_t k = to;
        while (k > from && (x->s[k - 1] == ' ' || x->s[k - 1] == '\t')) k--;
        if ((k > from && x->s[k - 1] == '\n') || (k == from && (k == 0 || x->s[k - 1] == '\n'))) to = k;
    }
    if (to <= from) return LF_OK;
    return push(x, (jtok){JT_TEXT, line, x->s + from, to - from, 0, 0});
}

lf_status lf__jinja_lex(const char *src, size_t len, const char *what, jpool *pool, jtok **toks, int *n_toks) {
    if (len > LF__JINJA_SOURCE_MAX)
        return lf_fail(LF_ERR_RANGE, "%s: template of %zu bytes (at most %u)", what, len, LF__JINJA_SOURCE_MAX);
    lf_status st = lf_utf8_validate(src, len, what, NULL);
    if (st != LF_OK) return st;
    char *s = lf__jpool_alloc(pool, len + 1);
    if (!s) return lf_fail(LF_ERR_NOMEM, "%s: out of memory lexing the template", what);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == 0) return lf_fail(LF_ERR_FORMAT, "%s: template holds a NUL byte at offset %zu", what, i);
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    lexer x = {s, n, 0, 1, what, pool, NULL, 0, 0};
    int strip_lead = 0, skip_nl = 0;
    for (;;) {
        size_t from = x.i, j = x.i;
        while (j + 1 < x.n && !(x.s[j] == '{' && (x.s[j + 1] == '{' || x.s[j + 1] == '%' || x.s[j + 1] == '#'))) j++;
        if (j + 1 >= x.n) j = x.n;
        int text_line = x.line;
        if (j == x.n) {
            if ((st = emit_text(&x, from, x.n, text_line, strip_lead, skip_nl, 0, 0)) != LF_OK) return st;
            break;
        }
        char kind = x.s[j + 1];
        char mod = j + 2 < x.n ? x.s[j + 2] : 0;
        int strip_before = mod == '-';
        int lstrip = kind != '{' && mod != '+';
        if ((st = emit_text(&x, from, j, text_line, strip_lead, skip_nl, strip_before, lstrip)) != LF_OK) return st;
        x.line += count_lines(x.s + from, j - from);
        x.i = j + 2 + (mod == '-' || mod == '+');
        int tag_line = x.line;
        int strip_after = 0, keep_nl = 0;
        if (kind == '#') {
            size_t k = x.i;
            while (k + 1 < x.n && !(x.s[k] == '#' && x.s[k + 1] == '}')) k++;
            if (k + 1 >= x.n) return lf_fail(LF_ERR_FORMAT, "%s:%d: unterminated comment", what, tag_line);
            strip_after = k > x.i && x.s[k - 1] == '-';
            keep_nl = k > x.i && x.s[k - 1] == '+';
            x.line += count_lines(x.s + x.i, k - x.i);
            x.i = k + 2;
        } else {
            if ((st = push(&x, (jtok){kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, tag_line, NULL, 0, 0, 0})) != LF_OK)
                return st;
            if ((st = lex_tag(&x, kind == '{' ? '}' : '%', &strip_after, &keep_nl)) != LF_OK) return st;
        }
        strip_lead = strip_after;
        skip_nl = kind != '{' && !keep_nl;
    }
    if ((st = push(&x, (jtok){JT_EOF, x.line, NULL, 0, 0, 0})) != LF_OK) return st;
    *toks = x.t;
    *n_toks = x.nt;
    return LF_OK;
}
