/*
 * CSV record source (RFC 4180) for lf_reader: one record per data row, the
 * fields chosen by column name from the header row. Contract in
 * include/llmforge/data.h ("record readers") and data_impl.h ("record
 * sources"); behaviour in docs/readers.md. Reference: RFC 4180, "Common
 * Format and MIME Type for Comma-Separated Values (CSV) Files".
 *
 * Grammar accepted (RFC 4180 with LF as well as CRLF line breaks):
 *   file   = [BOM] *(blank-line) header *(row | blank-line)
 *   row    = field *("," field) (CRLF | LF | end of file)
 *   field  = quoted | unquoted
 *   quoted = '"' *(any byte but '"' | '""') '"'     (may hold ",", CR, LF)
 *   unquoted = *(any byte but '"', ",", CR, LF)
 * A blank line (nothing but its line break) is no row. A lone CR outside
 * quotes, a quote inside an unquoted field and anything but ",", a line break
 * or the end of the file after a closing quote are syntax errors.
 *
 * Invariants:
 *  - Memory is bounded by the cap (opts->max_record_bytes, else
 *    LF_READER_MAX_RECORD_BYTES), never by the file: input goes through a
 *    fixed 64 KiB buffer, and only the selected columns of the current row
 *    are kept (the header keeps every name, at most LF_CSV_MAX_COLUMNS). A
 *    row whose bytes exceed the cap is consumed without being stored and is
 *    a bad record.
 *  - A syntax error inside a row makes the row bad but never loses the row
 *    boundary: the offending byte is taken as data and the scan goes on to
 *    the row's line break (quotes after the error are plain bytes until
 *    then), so skip_bad_records resumes at the next row. Only an unterminated
 *    quoted field (end of file inside quotes) is fatal: there is no row
 *    boundary left to resume from.
 *  - Lines are physical: every LF consumed counts, including those inside
 *    quoted fields, so a record's line is the line where its row starts and
 *    error positions are (line, byte column) as an editor shows them.
 *  - The header is read at open: a missing header, a syntax error or
 *    duplicate names in it, or a selected column it lacks, is an error at
 *    open, never a bad record.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data_impl.h"

#define IN_BUF_BYTES ((size_t)1 << 16)
#define LF_CSV_MAX_COLUMNS ((size_t)1 << 20) /* header names kept at most */

enum { S_START, S_UNQ, S_Q, S_QQ, S_CR }; /* field start, unquoted, quoted, quote in quoted, CR seen */

typedef struct buf {
    char *p;
    size_t len, alloc;
} buf;

/* One row as scanned. */
typedef struct row {
    uint64_t line;  /* physical line where the row starts */
    uint64_t bytes; /* bytes consumed, line break included */
    uint64_t raw;   /* bytes of the row without its line break */
    size_t nfields;
    int too_long;  /* raw > cap: selected fields not stored */
    int blank;     /* only a line break: no row */
    int eof;       /* nothing left: no row */
    char err[320]; /* first syntax error ("" when none) */
} row;

typedef struct csv {
    char *path;
    int fd;
    lf_reader_opts o;
    size_t cap;
    unsigned char *in;
    size_t in_pos, in_len;
    uint64_t off;      /* bytes consumed */
    uint64_t line;     /* line of the next byte */
    uint64_t line_off; /* offset where that line starts */
    /* header */
    size_t ncols;
    buf names;        /* NUL-separated column names */
    size_t *name_off; /* (ncols) offset of each name in names.p */
    size_t name_alloc;
    /* selected columns: [0] text or prompt, [1] response (pretraining: -1), [2] Alpaca's input (-1 when none) */
    long sel[3];
    const char *key[3];
    buf field[3];      /* values of the selected columns of the current row */
    int header_mode;   /* scanning the header: every field goes to names */
    uint64_t index;    /* data rows seen (good and bad) */
    uint64_t *skipped; /* the reader's counter (next()) */
    int skip_now;
} csv;

/* ---------------------------------------------------------------- input */
static lf_status fill(csv *c) {
    c->in_pos = 0;
    c->in_len = 0;
    for (;;) {
        ssize_t n = read(c->fd, c->in, IN_BUF_BYTES);
        if (n < 0) {
            if (errno == EINTR) continue;
            return lf_fail(LF_ERR_IO, "%s: read failed: %s", c->path, strerror(errno));
        }
        c->in_len = (size_t)n;
        return LF_OK;
    }
}

static lf_status buf_reserve(csv *c, buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->alloc) return LF_OK;
    size_t want = b->alloc ? b->alloc : 256;
    while (want < b->len + extra + 1) want *= 2;
    char *t = realloc(b->p, want);
    if (!t)
        return lf_fail(LF_ERR_NOMEM, "%s:%llu: out of memory holding a row of %zu bytes", c->path,
                       (unsigned long long)c->line, b->len + extra);
    b->p = t;
    b->alloc = want;
    return LF_OK;
}

/* Append byte ch of field f (when the field is kept). */
static lf_status put(csv *c, const row *rw, size_t f, unsigned char ch) {
    if (rw->too_long) return LF_OK;
    buf *b;
    if (c->header_mode) b = &c->names;
    else if ((long)f == c->sel[0]) b = &c->field[0];
    else if ((long)f == c->sel[1]) b = &c->field[1];
    else if ((long)f == c->sel[2]) b = &c->field[2];
    else return LF_OK;
    if (b->len + 2 > b->alloc) {
        lf_status st = buf_reserve(c, b, 1);
        if (st != LF_OK) return st;
    }
    b->p[b->len++] = (char)ch;
    return LF_OK;
}

/* Field f ended. In the header: terminate the name and remember where it starts. */
static lf_status end_field(csv *c, const row *rw, size_t f, size_t *name_start) {
    if (!c->header_mode || rw->too_long) return LF_OK;
    if (f >= LF_CSV_MAX_COLUMNS)
        return lf_fail(LF_ERR_RANGE, "%s:%llu: the header has more than %zu columns", c->path,
                       (unsigned long long)rw->line, LF_CSV_MAX_COLUMNS);
    if (f >= c->name_alloc) {
        size_t want = c->name_alloc ? c->name_alloc * 2 : 16;
        size_t *t = realloc(c->name_off, want * sizeof *t);
        if (!t) return lf_fail(LF_ERR_NOMEM, "%s: out of memory reading the header", c->path);
        c->name_off = t;
        c->name_alloc = want;
    }
    c->name_off[f] = *name_start;
    lf_status st = buf_reserve(c, &c->names, 1);
    if (st != LF_OK) return st;
    c->names.p[c->names.len++] = 0;
    *name_start = c->names.len;
    return LF_OK;
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
/* Note the row's first syntax error, at the byte `back` bytes before the
 * next unconsumed one. */
static void
syntax_error(const csv *c, row *rw, size_t f, uint64_t back, const char *fmt, ...) {
    if (rw->err[0]) return;
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    uint64_t at = c->off - back;
    snprintf(rw->err, sizeof rw->err, "line %llu, column %llu (field %zu): %s", (unsigned long long)c->line,
             (unsigned long long)(at - c->line_off + 1), f + 1, what);
}

/* Scan one row (or a blank line, or nothing at the end of the file). */
static lf_status read_row(csv *c, row *rw) {
    memset(rw, 0, sizeof *rw);
    rw->line = c->line;
    c->field[0].len = c->field[1].len = c->field[2].len = 0;
    size_t f = 0, name_start = c->names.len;
    uint64_t qline = 0, qcol = 0;
    int state = S_START, content = 0; /* content: a byte other than a line break */
    lf_status st;
    for (;;) {
        if (c->in_pos == c->in_len) {
            if ((st = fill(c)) != LF_OK) return st;
            if (c->in_len == 0) { /* end of file */
                if (state == S_Q)
                    return lf_fail(LF_ERR_FORMAT,
                                   "%s:%llu: unterminated quoted field: the quote opened at line %llu, column %llu "
                                   "(field %zu) is not closed before the end of the file",
                                   c->path, (unsigned long long)rw->line, (unsigned long long)qline,
                                   (unsigned long long)qcol, f + 1);
                if (rw->bytes == 0) {
                    rw->eof = 1;
                    return LF_OK;
                }
                break;
            }
        }
        unsigned char b = c->in[c->in_pos++];
        c->off++;
        rw->bytes++;
        if (b == '\n') {
            c->line++;
            c->line_off = c->off;
            if (state != S_Q) break; /* the row ends (after CR, after a field, or a blank line) */
            if (++rw->raw > c->cap) rw->too_long = 1;
            content = 1;
            if ((st = put(c, rw, f, b)) != LF_OK) return st;
            continue;
        }
        if (state == S_CR) { /* a CR not followed by LF: data, and an error */
            syntax_error(c, rw, f, 2, "a carriage return (CR) not followed by a line feed outside quotes");
            if (++rw->raw > c->cap) rw->too_long = 1; /* the CR */
            content = 1;
            if ((st = put(c, rw, f, '\r')) != LF_OK) return st;
            state = S_UNQ;
        }
        if (b == '\r' && state != S_Q) {
            state = S_CR; /* a line break if LF follows, counted then */
            continue;
        }
        if (++rw->raw > c->cap) rw->too_long = 1;
        content = 1;
        switch (state) {
        case S_START:
            if (b == '"') {
                state = S_Q;
                qline = c->line;
                qcol = c->off - c->line_off;
            } else if (b == ',') {
                if ((st = end_field(c, rw, f, &name_start)) != LF_OK) return st;
                f++;
            } else {
                state = S_UNQ;
                if ((st = put(c, rw, f, b)) != LF_OK) return st;
            }
            break;
        case S_UNQ:
            if (b == ',') {
                if ((st = end_field(c, rw, f, &name_start)) != LF_OK) return st;
                f++;
                state = S_START;
            } else {
                if (b == '"') syntax_error(c, rw, f, 1, "a quote (\") inside an unquoted field");
                if ((st = put(c, rw, f, b)) != LF_OK) return st;
            }
            break;
        case S_Q:
            if (b == '"') state = S_QQ;
            else if ((st = put(c, rw, f, b)) != LF_OK) return st;
            break;
        default:            /* S_QQ */
            if (b == '"') { /* "" stands for one quote */
                state = S_Q;
                if ((st = put(c, rw, f, b)) != LF_OK) return st;
            } else if (b == ',') {
                if ((st = end_field(c, rw, f, &name_start)) != LF_OK) return st;
                f++;
                state = S_START;
            } else {
                syntax_error(c, rw, f, 1, "text after the closing quote of a quoted field");
                state = S_UNQ;
                if ((st = put(c, rw, f, b)) != LF_OK) return st;
            }
            break;
        }
    }
    if ((st = end_field(c, rw, f, &name_start)) != LF_OK) return st;
    rw->nfields = f + 1;
    rw->blank = !content;
    for (int k = 0; k < 3; k++)
        if (c->field[k].p) c->field[k].p[c->field[k].len] = 0;
    return LF_OK;
}

/* ---------------------------------------------------------------- header */
static const char *col_name(const csv *c, size_t i) { return c->names.p + c->name_off[i]; }

typedef struct named {
    const char *name;
    size_t col;
} named;

static int cmp_named(const void *a, const void *b) {
    const named *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    if (r) return r;
    return x->col < y->col ? -1 : x->col > y->col;
}

static long find_col(const csv *c, const char *name) {
    for (size_t i = 0; i < c->ncols; i++)
        if (strcmp(col_name(c, i), name) == 0) return (long)i;
    return -1;
}

/* "'a', 'b', 'c'" (shortened to fit). */
static void list_cols(const csv *c, char *out, size_t size) {
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < c->ncols && n + 8 < size; i++) {
        int w = snprintf(out + n, size - n, "%s'%s'", i ? ", " : "", col_name(c, i));
        if (w < 0 || (size_t)w >= size - n) {
            snprintf(out + n, size - n, ", ...");
            return;
        }
        n += (size_t)w;
    }
}

static lf_status no_column(const csv *c, const char *name, const char *hint) {
    char cols[512];
    list_cols(c, cols, sizeof cols);
    return lf_fail(LF_ERR_FORMAT, "%s: no column '%s' in the header (columns: %s)%s", c->path, name, cols, hint);
}

static lf_status read_header(csv *c) {
    row rw;
    lf_status st;
    c->header_mode = 1;
    do {
        c->names.len = 0;
        if ((st = read_row(c, &rw)) != LF_OK) return st;
        if (rw.eof) return lf_fail(LF_ERR_FORMAT, "%s: the file is empty (a CSV file needs a header row)", c->path);
    } while (rw.blank);
    c->header_mode = 0;
    if (rw.too_long)
        return lf_fail(LF_ERR_RANGE, "%s:%llu: the header row is longer than the limit of %zu bytes", c->path,
                       (unsigned long long)rw.line, c->cap);
    if (rw.err[0])
        return lf_fail(LF_ERR_FORMAT, "%s:%llu: header row: %s", c->path, (unsigned long long)rw.line, rw.err);
    c->ncols = rw.nfields;
    for (size_t i = 0; i < c->ncols; i++) {
        const char *nm = col_name(c, i);
        size_t len = strlen(nm);
        size_t stored = i + 1 < c->ncols ? c->name_off[i + 1] - c->name_off[i] - 1 : c->names.len - c->name_off[i] - 1;
        if (len != stored)
            return lf_fail(LF_ERR_FORMAT, "%s:%llu: column %zu of the header holds a NUL byte", c->path,
                           (unsigned long long)rw.line, i + 1);
        const char *why = "";
        size_t at = lf__utf8_check((const unsigned char *)nm, len, &why);
        if (at < len)
            return lf_fail(LF_ERR_FORMAT,
                           "%s:%llu: column %zu of the header: invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)",
                           c->path, (unsigned long long)rw.line, i + 1, at, (unsigned)(unsigned char)nm[at], why);
    }
    /* duplicates: sort the indices by name, compare neighbours */
    named *idx = malloc(c->ncols * sizeof *idx);
    if (!idx) return lf_fail(LF_ERR_NOMEM, "%s: out of memory reading the header", c->path);
    for (size_t i = 0; i < c->ncols; i++) idx[i] = (named){col_name(c, i), i};
    qsort(idx, c->ncols, sizeof *idx, cmp_named);
    for (size_t i = 1; i < c->ncols; i++)
        if (strcmp(idx[i - 1].name, idx[i].name) == 0) {
            st = lf_fail(LF_ERR_FORMAT, "%s:%llu: duplicate column name '%s' in the header (columns %zu and %zu)",
                         c->path, (unsigned long long)rw.line, idx[i].name, idx[i - 1].col + 1, idx[i].col + 1);
            free(idx);
            return st;
        }
    free(idx);

    /* select the columns */
    c->sel[0] = c->sel[1] = c->sel[2] = -1;
    if (c->o.mode == LF_RECORD_PRETRAIN) {
        const char *f = c->o.text_field ? c->o.text_field : "text";
        if ((c->sel[0] = find_col(c, f)) < 0) return no_column(c, f, "; name the text column with --text-field");
        c->key[0] = col_name(c, (size_t)c->sel[0]);
        return LF_OK;
    }
    const char *pf = c->o.prompt_field, *rf = c->o.response_field;
    if (!pf) {
        if (find_col(c, "prompt") >= 0 || find_col(c, "response") >= 0) {
            pf = "prompt";
            rf = "response";
        } else if (find_col(c, "input_text") >= 0 || find_col(c, "target_text") >= 0) {
            pf = "input_text";
            rf = "target_text";
        } else if (find_col(c, "instruction") >= 0 && find_col(c, "output") >= 0) {
            pf = "instruction";
            rf = "output";
            if ((c->sel[2] = find_col(c, "input")) >= 0) c->key[2] = col_name(c, (size_t)c->sel[2]);
        } else {
            char cols[512];
            list_cols(c, cols, sizeof cols);
            return lf_fail(LF_ERR_FORMAT,
                           "%s: no fine-tuning columns: expected 'prompt' and 'response', 'input_text' and "
                           "'target_text', or Alpaca's 'instruction', 'input' and 'output' (columns: %s); name them "
                           "with --prompt-field/--response-field",
                           c->path, cols);
        }
    }
    if ((c->sel[0] = find_col(c, pf)) < 0) return no_column(c, pf, "");
    if ((c->sel[1] = find_col(c, rf)) < 0) return no_column(c, rf, "");
    c->key[0] = col_name(c, (size_t)c->sel[0]);
    c->key[1] = col_name(c, (size_t)c->sel[1]);
    return LF_OK;
}

/* ---------------------------------------------------------------- records */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
/* A bad record at `line`: an error, or with skip_bad_records a counted skip. */
static lf_status
bad(csv *c, lf_status st, uint64_t line, const char *fmt, ...) {
    char what[768], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "%s:%llu: %s", c->path, (unsigned long long)line, what);
    return lf__reader_bad(&c->o, c->skipped, &c->skip_now, st, msg);
}

/* Check the value of selected column k; *s NULL after a skip. */
static lf_status get_field(csv *c, int k, uint64_t line, int need_text, const char **s, size_t *len) {
    /* the same column twice (prompt and response): one buffer */
    const buf *b = (k == 1 && c->sel[1] == c->sel[0]) ? &c->field[0] : &c->field[k];
    const char *p = b->p ? b->p : "";
    size_t n = b->len;
    *s = NULL;
    *len = 0;
    const char *nul = memchr(p, 0, n);
    if (nul)
        return bad(c, LF_ERR_FORMAT, line, "column '%s': NUL byte at byte offset %zu of the value", c->key[k],
                   (size_t)(nul - p));
    const char *why = "";
    size_t at = lf__utf8_check((const unsigned char *)p, n, &why);
    if (at < n)
        return bad(c, LF_ERR_FORMAT, line,
                   "column '%s': invalid UTF-8 at byte offset %zu of the value (byte 0x%02X: %s)", c->key[k], at,
                   (unsigned)(unsigned char)p[at], why);
    if (n == 0 && need_text) return bad(c, LF_ERR_FORMAT, line, "column '%s' is empty", c->key[k]);
    *s = p;
    *len = n;
    return LF_OK;
}

/* Alpaca: the prompt (field[0]) gets "\n\n" + input when input is not empty. */
static lf_status join_input(csv *c, uint64_t line, lf_record *rec) {
    const char *in;
    size_t n;
    lf_status st = get_field(c, 2, line, 0, &in, &n);
    if (st != LF_OK || c->skip_now || n == 0) return st;
    buf *b = &c->field[0];
    if ((st = buf_reserve(c, b, 2 + n)) != LF_OK) return st;
    memcpy(b->p + b->len, "\n\n", 2);
    memcpy(b->p + b->len + 2, in, n);
    b->len += 2 + n;
    b->p[b->len] = 0;
    rec->prompt = b->p;
    rec->prompt_len = b->len;
    return LF_OK;
}

static lf_status src_next(void *state, lf_record *rec, int *eof, uint64_t *skipped) {
    csv *c = state;
    c->skipped = skipped;
    *eof = 0;
    for (;;) {
        row rw;
        lf_status st = read_row(c, &rw);
        if (st != LF_OK) return st;
        if (rw.eof) {
            *eof = 1;
            return LF_OK;
        }
        if (rw.blank) continue;
        memset(rec, 0, sizeof *rec);
        rec->line = rw.line;
        rec->index = c->index++;
        c->skip_now = 0;
        if (rw.too_long)
            st = bad(c, LF_ERR_RANGE, rw.line, "row is longer than the limit of %zu bytes for one record", c->cap);
        else if (rw.err[0]) st = bad(c, LF_ERR_FORMAT, rw.line, "%s", rw.err);
        else if (rw.nfields != c->ncols)
            st = bad(c, LF_ERR_FORMAT, rw.line, "row has %zu field%s, the header has %zu", rw.nfields,
                     rw.nfields == 1 ? "" : "s", c->ncols);
        else if (c->o.mode == LF_RECORD_PRETRAIN) {
            if ((st = get_field(c, 0, rw.line, 1, &rec->text, &rec->text_len)) == LF_OK && !c->skip_now)
                rec->text_key = c->key[0];
        } else {
            if ((st = get_field(c, 0, rw.line, 0, &rec->prompt, &rec->prompt_len)) == LF_OK && !c->skip_now &&
                (st = get_field(c, 1, rw.line, 1, &rec->response, &rec->response_len)) == LF_OK && !c->skip_now) {
                rec->prompt_key = c->key[0];
                rec->response_key = c->key[1];
                if (c->sel[2] >= 0) st = join_input(c, rw.line, rec);
            }
        }
        if (st != LF_OK) return st;
        if (c->skip_now) continue;
        return LF_OK;
    }
}

/* ---------------------------------------------------------------- open/close */
static void src_close(void *state) {
    csv *c = state;
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    free(c->in);
    free(c->path);
    free(c->names.p);
    free(c->name_off);
    free(c->field[0].p);
    free(c->field[1].p);
    free(c->field[2].p);
    free(c);
}

static lf_status src_open(void **state, const char *path, const lf_reader_opts *opts) {
    *state = NULL;
    lf_status st;
    csv *c = calloc(1, sizeof *c);
    if (c) c->fd = -1;
    if (!c || !(c->path = strdup(path)) || !(c->in = malloc(IN_BUF_BYTES))) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory opening", path);
        goto fail;
    }
    c->o = *opts;
    c->cap = opts->max_record_bytes ? opts->max_record_bytes : LF_READER_MAX_RECORD_BYTES;
    c->line = 1;
    c->sel[0] = c->sel[1] = c->sel[2] = -1;
    c->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0) {
        st = lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if ((st = fill(c)) != LF_OK) goto fail;
    /* a UTF-8 byte order mark is not content (a file starting with one has it in its first read) */
    if (c->in_len >= 3 && memcmp(c->in, "\xEF\xBB\xBF", 3) == 0) {
        c->in_pos = 3;
        c->off = c->line_off = 3;
    }
    if ((st = read_header(c)) != LF_OK) goto fail;
    *state = c;
    return LF_OK;
fail:
    src_close(c);
    return st;
}

static uint64_t src_bytes_read(const void *state) { return state ? ((const csv *)state)->off : 0; }

const lf__record_source lf__csv_source = {src_open, src_next, src_close, src_bytes_read};
