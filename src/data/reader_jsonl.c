/*
 * Record readers: JSON Lines, a JSON array of objects, and plain text files
 * (one document per file). Contract and error model in include/llmforge/data.h
 * ("record readers"); the formats in docs/data.md.
 *
 * Invariants:
 *  - Memory is bounded by the largest record, never by the file: input goes
 *    through a fixed 64 KiB buffer; a record's bytes are collected into one
 *    growing buffer capped at max_record_bytes (JSON) or
 *    LF_READER_MAX_TEXT_BYTES (text). A JSONL line or array element over the
 *    cap is consumed without being stored and reported as a bad record.
 *  - A JSON array is streamed: a small scanner tracks strings, escapes and
 *    bracket depth to find where each top-level element ends (a ',' or ']'
 *    at depth 0 outside strings); each element is then parsed on its own
 *    with cJSON. Structural damage the scanner sees (no '[', an empty slot,
 *    end of file inside the array, text after ']') is fatal even with
 *    skip_bad_records: there is no record boundary left to resume from.
 *  - Line numbers are 1-based and count every '\n' consumed, so messages
 *    read "FILE:LINE: ..." like a compiler's and point at the line where
 *    the record starts (or, for JSON syntax errors, where the error is).
 *  - cJSON's parser stops at the end of the first value; anything but blanks
 *    after it makes the record bad (cJSON alone would accept `{} junk`).
 *  - cJSON does not check UTF-8 and turns the escape \u0000 into a string
 *    terminator; both are checked here (the selected fields' bytes after
 *    unescaping, and every \u0000 escape of the record).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

#define IN_BUF_BYTES ((size_t)1 << 16)

enum { ARR_BEFORE = 0, ARR_IN = 1, ARR_DONE = 2 };

struct lf_reader {
    char *path;
    int fd;
    lf_input_format fmt;
    lf_reader_opts o;
    size_t cap;        /* record byte cap */
    unsigned char *in; /* (IN_BUF_BYTES) input buffer */
    size_t in_pos, in_len;
    int in_eof;
    uint64_t bytes; /* bytes consumed */
    uint64_t line;  /* line of the next unconsumed byte */
    char *rec;      /* current record's raw bytes, NUL-terminated */
    size_t rec_len, rec_alloc;
    cJSON *root;    /* parsed current record */
    char *msgs;     /* its "messages" list as compact JSON (fine-tuning), or NULL */
    uint64_t index; /* records seen (good and skipped) */
    uint64_t skipped;
    int seen_any;                 /* a non-blank JSONL line / an array element / the text */
    int arr_state, arr_first;     /* JSON array scanner */
    int failed;                   /* a fatal error was returned; the reader is done */
    int skip_now;                 /* set by bad(): the current record was skipped */
    const lf__record_source *src; /* CSV, Parquet, WebDataset: the format's own reader */
    void *src_state;
    int use_doc; /* JSON read as one document (reader_json_doc.c) */
    lf__json_doc doc;
    char *joined; /* an Alpaca record's prompt: instruction, "\n\n", input */
    size_t joined_cap;
};

/* ---------------------------------------------------------------- input */
static lf_status fill(lf_reader *r) {
    if (r->in_eof) return LF_OK;
    r->in_pos = 0;
    r->in_len = 0;
    for (;;) {
        ssize_t n = read(r->fd, r->in, IN_BUF_BYTES);
        if (n < 0) {
            if (errno == EINTR) continue;
            return lf_fail(LF_ERR_IO, "%s: read failed: %s", r->path, strerror(errno));
        }
        if (n == 0) r->in_eof = 1;
        r->in_len = (size_t)n;
        return LF_OK;
    }
}

/* Make at least one byte available; *eof = 1 when the file is exhausted. */
static lf_status avail(lf_reader *r, int *eof) {
    *eof = 0;
    while (r->in_pos == r->in_len) {
        if (r->in_eof) {
            *eof = 1;
            return LF_OK;
        }
        lf_status st = fill(r);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static int is_blank(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Consume blanks (counting lines); *c = the next byte (not consumed) or -1 at end of file. */
static lf_status peek_nonblank(lf_reader *r, int *c) {
    for (;;) {
        int eof;
        lf_status st = avail(r, &eof);
        if (st != LF_OK) return st;
        if (eof) {
            *c = -1;
            return LF_OK;
        }
        unsigned char b = r->in[r->in_pos];
        if (!is_blank(b)) {
            *c = b;
            return LF_OK;
        }
        if (b == '\n') r->line++;
        r->in_pos++;
        r->bytes++;
    }
}

static lf_status rec_append(lf_reader *r, const unsigned char *p, size_t n) {
    if (r->rec_len + n + 1 > r->rec_alloc) {
        size_t want = r->rec_alloc ? r->rec_alloc : 4096;
        while (want < r->rec_len + n + 1) want *= 2;
        char *t = realloc(r->rec, want);
        if (!t)
            return lf_fail(LF_ERR_NOMEM, "%s:%llu: out of memory holding a record of %zu bytes", r->path,
                           (unsigned long long)r->line, r->rec_len + n);
        r->rec = t;
        r->rec_alloc = want;
    }
    memcpy(r->rec + r->rec_len, p, n);
    r->rec_len += n;
    r->rec[r->rec_len] = 0;
    return LF_OK;
}

/* ---------------------------------------------------------------- bad records */
/* A bad record at `line`: an error, or with skip_bad_records a counted skip
 * (r->skip_now = 1, LF_OK). */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static lf_status
bad(lf_reader *r, lf_status st, uint64_t line, const char *fmt, ...) {
    char what[768], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "%s:%llu: %s", r->path, (unsigned long long)line, what);
    return lf__reader_bad(&r->o, &r->skipped, &r->skip_now, st, msg);
}

/* Line of byte offset `off` of the current record, which starts at `line`. */
static uint64_t line_at(const lf_reader *r, uint64_t line, size_t off) {
    for (size_t i = 0; i < off && i < r->rec_len; i++)
        if (r->rec[i] == '\n') line++;
    return line;
}

/* A selected string field of the current record; *s NULL after a skip. */
static lf_status get_field(lf_reader *r, const cJSON *obj, const char *name, uint64_t line, int need_text,
                           const char **s, size_t *len) {
    *s = NULL;
    *len = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v) return bad(r, LF_ERR_FORMAT, line, "field '%s' is missing", name);
    if (!cJSON_IsString(v) || !v->valuestring)
        return bad(r, LF_ERR_FORMAT, line, "field '%s' is %s, expected a string", name, lf__json_type_name(v));
    size_t n = strlen(v->valuestring);
    const char *why = "";
    size_t at = lf__utf8_check((const unsigned char *)v->valuestring, n, &why);
    if (at < n)
        return bad(r, LF_ERR_FORMAT, line,
                   "field '%s': invalid UTF-8 at byte offset %zu of the value (byte 0x%02X: %s)", name, at,
                   (unsigned)(unsigned char)v->valuestring[at], why);
    if (n == 0 && need_text) return bad(r, LF_ERR_FORMAT, line, "field '%s' is empty", name);
    *s = v->valuestring;
    *len = n;
    return LF_OK;
}

/* An Alpaca record: prompt = instruction, followed by "\n\n" and input when
 * input is present, not null and not empty (docs/readers.md), response =
 * output. */
static lf_status alpaca_record(lf_reader *r, const cJSON *root, uint64_t line, lf_record *rec) {
    const char *ins, *in = "", *out;
    size_t ni, nin = 0, no;
    lf_status st;
    if ((st = get_field(r, root, "instruction", line, 0, &ins, &ni)) != LF_OK || r->skip_now) return st;
    const cJSON *iv = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (iv && !cJSON_IsNull(iv) && ((st = get_field(r, root, "input", line, 0, &in, &nin)) != LF_OK || r->skip_now))
        return st;
    if ((st = get_field(r, root, "output", line, 1, &out, &no)) != LF_OK || r->skip_now) return st;
    size_t need = ni + (nin ? 2 + nin : 0) + 1;
    if (need > r->joined_cap) {
        char *j = realloc(r->joined, need);
        if (!j)
            return lf_fail(LF_ERR_NOMEM, "%s:%llu: out of memory joining an Alpaca prompt", r->path,
                           (unsigned long long)line);
        r->joined = j;
        r->joined_cap = need;
    }
    memcpy(r->joined, ins, ni);
    if (nin) {
        memcpy(r->joined + ni, "\n\n", 2);
        memcpy(r->joined + ni + 2, in, nin);
    }
    r->joined[need - 1] = 0;
    rec->prompt = r->joined;
    rec->prompt_len = need - 1;
    rec->prompt_key = "instruction";
    rec->response = out;
    rec->response_len = no;
    rec->response_key = "output";
    return LF_OK;
}

/* A fine-tuning record's "messages": a non-empty list of objects, each
 * with a string "role", one of them the assistant's; kept as compact JSON
 * for the chat template (invalid UTF-8 cannot get here: the record was
 * checked whole). */
static lf_status take_messages(lf_reader *r, const cJSON *msgs, uint64_t line, lf_record *rec) {
    if (!cJSON_IsArray(msgs) || !msgs->child)
        return bad(r, LF_ERR_FORMAT, line, "field 'messages' must be a non-empty list of {\"role\", \"content\"}");
    int i = 0, assistant = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return bad(r, LF_ERR_FORMAT, line, "field 'messages': message %d is not an object with a string 'role'", i);
        assistant |= !strcmp(role->valuestring, "assistant");
    }
    if (!assistant) return bad(r, LF_ERR_FORMAT, line, "field 'messages' has no assistant message (nothing to learn)");
    if (!(r->msgs = cJSON_PrintUnformatted(msgs))) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", r->path);
    rec->messages = r->msgs;
    rec->messages_len = strlen(r->msgs);
    rec->prompt_key = "messages";
    return LF_OK;
}

/* Parse r->rec (a record starting at `line`) and select its fields. */
static lf_status parse_record(lf_reader *r, uint64_t line, lf_record *rec) {
    cJSON_Delete(r->root);
    r->root = NULL;
    cJSON_free(r->msgs);
    r->msgs = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(r->rec, r->rec_len, &end, 0);
    if (!root) {
        size_t off = end && end >= r->rec && end <= r->rec + r->rec_len ? (size_t)(end - r->rec) : 0;
        uint64_t el = line_at(r, line, off);
        size_t col = off;
        for (size_t i = off; i > 0; i--)
            if (r->rec[i - 1] == '\n') {
                col = off - i;
                break;
            }
        return bad(r, LF_ERR_FORMAT, el, "not valid JSON (error near column %zu)", col + 1);
    }
    r->root = root;
    size_t off = end ? (size_t)(end - r->rec) : r->rec_len;
    while (off < r->rec_len && is_blank((unsigned char)r->rec[off])) off++;
    if (off < r->rec_len)
        return bad(r, LF_ERR_FORMAT, line_at(r, line, off), "not valid JSON (text after the end of the value)");
    if (!cJSON_IsObject(root))
        return bad(r, LF_ERR_FORMAT, line, "not a JSON object (%s); each record must be an object",
                   lf__json_type_name(root));
    if (lf_json_find_nul_escape(r->rec, r->rec_len) < r->rec_len)
        return bad(r, LF_ERR_FORMAT, line, "a string holds the escape \\u0000 (U+0000), which text cannot hold");

    lf_status st;
    if (r->o.mode == LF_RECORD_PRETRAIN) {
        const char *f = r->o.text_field ? r->o.text_field : "text";
        if ((st = get_field(r, root, f, line, 1, &rec->text, &rec->text_len)) != LF_OK || r->skip_now) return st;
        rec->text_key = f;
        return LF_OK;
    }
    const char *pf = r->o.prompt_field, *rf = r->o.response_field;
    if (r->o.mode == LF_RECORD_DPO) { /* prompt, chosen, rejected: all three non-empty */
        const char *jf = r->o.rejected_field ? r->o.rejected_field : "rejected";
        pf = pf ? pf : "prompt";
        rf = rf ? rf : "chosen";
        if ((st = get_field(r, root, pf, line, 1, &rec->prompt, &rec->prompt_len)) != LF_OK || r->skip_now) return st;
        if ((st = get_field(r, root, rf, line, 1, &rec->response, &rec->response_len)) != LF_OK || r->skip_now)
            return st;
        if ((st = get_field(r, root, jf, line, 1, &rec->rejected, &rec->rejected_len)) != LF_OK || r->skip_now)
            return st;
        rec->prompt_key = pf;
        rec->response_key = rf;
        rec->rejected_key = jf;
        return LF_OK;
    }
    const cJSON *msgs = pf ? NULL : cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (msgs) return take_messages(r, msgs, line, rec);
    if (!pf) {
        if (cJSON_GetObjectItemCaseSensitive(root, "prompt") || cJSON_GetObjectItemCaseSensitive(root, "response")) {
            pf = "prompt";
            rf = "response";
        } else if (cJSON_GetObjectItemCaseSensitive(root, "input_text") ||
                   cJSON_GetObjectItemCaseSensitive(root, "target_text")) {
            pf = "input_text";
            rf = "target_text";
        } else if (cJSON_GetObjectItemCaseSensitive(root, "instruction") &&
                   cJSON_GetObjectItemCaseSensitive(root, "output")) {
            return alpaca_record(r, root, line, rec);
        } else {
            return bad(r, LF_ERR_FORMAT, line,
                       "no fine-tuning fields: expected 'prompt' and 'response', 'input_text' and 'target_text', or "
                       "Alpaca's 'instruction', 'input' and 'output' (or name them with "
                       "--prompt-field/--response-field)");
        }
    }
    if ((st = get_field(r, root, pf, line, 0, &rec->prompt, &rec->prompt_len)) != LF_OK || r->skip_now) return st;
    if ((st = get_field(r, root, rf, line, 1, &rec->response, &rec->response_len)) != LF_OK || r->skip_now) return st;
    rec->prompt_key = pf;
    rec->response_key = rf;
    return LF_OK;
}

/* The record that starts at `line` is in r->rec (or was over the cap and
 * dropped: too_long, `what` naming it, "line" or "array element"): number
 * it, parse it into *rec or report it bad (r->skip_now after a skip). */
static lf_status take_record(lf_reader *r, uint64_t line, int too_long, const char *what, lf_record *rec) {
    r->seen_any = 1;
    memset(rec, 0, sizeof *rec);
    rec->line = line;
    rec->index = r->index++;
    r->skip_now = 0;
    if (too_long)
        return bad(r, LF_ERR_RANGE, line, "%s is longer than the limit of %zu bytes for one record", what, r->cap);
    return parse_record(r, line, rec);
}

/* ---------------------------------------------------------------- JSON Lines */
/* Read one line into r->rec (without its '\n'); *too_long when it exceeded
 * the cap (then only counted); *eof when nothing was left. */
static lf_status read_line(lf_reader *r, int *too_long, int *eof) {
    *too_long = 0;
    *eof = 0;
    r->rec_len = 0;
    if (r->rec) r->rec[0] = 0;
    size_t total = 0;
    int any = 0;
    for (;;) {
        int e;
        lf_status st = avail(r, &e);
        if (st != LF_OK) return st;
        if (e) {
            if (!any) *eof = 1;
            return LF_OK;
        }
        any = 1;
        const unsigned char *p = r->in + r->in_pos;
        size_t n = r->in_len - r->in_pos;
        const unsigned char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        total += take;
        if (!*too_long && total > r->cap) {
            *too_long = 1;
        } else if (!*too_long && (st = rec_append(r, p, take)) != LF_OK) {
            return st;
        }
        r->in_pos += take + (nl ? 1 : 0);
        r->bytes += take + (nl ? 1 : 0);
        if (nl) {
            r->line++;
            return LF_OK;
        }
    }
}

static lf_status next_jsonl(lf_reader *r, lf_record *rec, int *eof) {
    for (;;) {
        uint64_t line = r->line;
        int too_long, e;
        lf_status st = read_line(r, &too_long, &e);
        if (st != LF_OK) return st;
        if (e) {
            if (!r->seen_any) return lf_fail(LF_ERR_FORMAT, "%s: the file is empty (no JSON lines)", r->path);
            *eof = 1;
            return LF_OK;
        }
        if (!too_long) {
            size_t i = 0;
            while (i < r->rec_len && is_blank((unsigned char)r->rec[i])) i++;
            if (i == r->rec_len) continue; /* a blank line is no record */
        }
        if ((st = take_record(r, line, too_long, "line", rec)) != LF_OK) return st;
        if (r->skip_now) continue;
        return LF_OK;
    }
}

/* ---------------------------------------------------------------- JSON array */
/* Scan one element into r->rec. *closed = 1 when the element ended the array
 * (']'); *too_long when it exceeded the cap. */
static lf_status scan_element(lf_reader *r, uint64_t start_line, int *closed, int *too_long) {
    int depth = 0, in_str = 0, esc = 0;
    size_t total = 0;
    *closed = 0;
    *too_long = 0;
    r->rec_len = 0;
    if (r->rec) r->rec[0] = 0;
    for (;;) {
        int e;
        lf_status st = avail(r, &e);
        if (st != LF_OK) return st;
        if (e)
            return lf_fail(LF_ERR_FORMAT,
                           "%s:%llu: unexpected end of file inside the array element that starts here "
                           "(the JSON array is not closed)",
                           r->path, (unsigned long long)start_line);
        const unsigned char *p = r->in + r->in_pos;
        size_t n = r->in_len - r->in_pos, i = 0;
        int done = 0;
        for (; i < n; i++) {
            unsigned char b = p[i];
            if (b == '\n') r->line++;
            if (in_str) {
                if (esc) esc = 0;
                else if (b == '\\') esc = 1;
                else if (b == '"') in_str = 0;
            } else if (b == '"') {
                in_str = 1;
            } else if (b == '{' || b == '[') {
                depth++;
            } else if (b == '}' || b == ']') {
                if (depth == 0 && b == ']') {
                    *closed = 1;
                    done = 1;
                    break;
                }
                if (depth > 0) depth--;
            } else if (b == ',' && depth == 0) {
                done = 1;
                break;
            }
        }
        /* bytes p[0, i) belong to the element; p[i] (when done) is its terminator */
        total += i;
        if (!*too_long && total > r->cap) *too_long = 1;
        else if (!*too_long && (st = rec_append(r, p, i)) != LF_OK) return st;
        r->in_pos += i + (size_t)done;
        r->bytes += i + (size_t)done;
        if (done) return LF_OK;
    }
}

static lf_status next_json(lf_reader *r, lf_record *rec, int *eof) {
    for (;;) {
        int c;
        lf_status st = peek_nonblank(r, &c);
        if (st != LF_OK) return st;
        if (r->arr_state == ARR_DONE) {
            if (c >= 0)
                return lf_fail(LF_ERR_FORMAT, "%s:%llu: text after the closing ']' of the JSON array", r->path,
                               (unsigned long long)r->line);
            *eof = 1;
            return LF_OK;
        }
        if (c < 0) {
            if (r->arr_state == ARR_BEFORE)
                return lf_fail(LF_ERR_FORMAT, "%s: the file is empty (no JSON array)", r->path);
            return lf_fail(LF_ERR_FORMAT, "%s:%llu: unexpected end of file: the JSON array is not closed with ']'",
                           r->path, (unsigned long long)r->line);
        }
        if (r->arr_state == ARR_BEFORE) {
            if (c != '[')
                return lf_fail(LF_ERR_FORMAT,
                               "%s:%llu: expected '[' (a JSON array of objects); for one object per line use the "
                               "jsonl format",
                               r->path, (unsigned long long)r->line);
            r->in_pos++;
            r->bytes++;
            r->arr_state = ARR_IN;
            r->arr_first = 1;
            continue;
        }
        if (c == ']' && r->arr_first)
            return lf_fail(LF_ERR_FORMAT, "%s:%llu: the JSON array is empty (no records)", r->path,
                           (unsigned long long)r->line);
        if (c == ']' || c == ',')
            return lf_fail(LF_ERR_FORMAT, "%s:%llu: expected an array element, found '%c'", r->path,
                           (unsigned long long)r->line, c);
        uint64_t line = r->line;
        int closed, too_long;
        if ((st = scan_element(r, line, &closed, &too_long)) != LF_OK) return st;
        r->arr_first = 0;
        if (closed) r->arr_state = ARR_DONE;
        if ((st = take_record(r, line, too_long, "array element", rec)) != LF_OK) return st;
        if (r->skip_now) continue;
        return LF_OK;
    }
}

/* ---------------------------------------------------------------- JSON document */
static lf_status next_doc(lf_reader *r, lf_record *rec, int *eof) {
    for (;;) {
        const char *el = NULL;
        size_t n = 0;
        uint64_t line = 0;
        int e;
        lf_status st = lf__json_doc_next(&r->doc, &el, &n, &line, &e);
        if (st != LF_OK) return st;
        r->bytes = lf__json_doc_offset(&r->doc);
        if (e) {
            *eof = 1;
            return LF_OK;
        }
        const int too_long = n > r->cap;
        r->rec_len = 0;
        if (!too_long && (st = rec_append(r, (const unsigned char *)el, n)) != LF_OK) return st;
        if ((st = take_record(r, line, too_long, "array element", rec)) != LF_OK) return st;
        if (r->skip_now) continue;
        return LF_OK;
    }
}

/* ---------------------------------------------------------------- text */
static lf_status next_text(lf_reader *r, lf_record *rec, int *eof) {
    if (r->seen_any) {
        *eof = 1;
        return LF_OK;
    }
    r->seen_any = 1;
    r->rec_len = 0;
    int too_long = 0;
    for (;;) {
        int e;
        lf_status st = avail(r, &e);
        if (st != LF_OK) return st;
        if (e) break;
        size_t n = r->in_len - r->in_pos;
        if (!too_long && r->rec_len + n > LF_READER_MAX_TEXT_BYTES) too_long = 1;
        if (!too_long && (st = rec_append(r, r->in + r->in_pos, n)) != LF_OK) return st;
        r->in_pos += n;
        r->bytes += n;
    }
    rec->line = 1;
    rec->index = r->index++;
    r->skip_now = 0;
    lf_status st = LF_OK;
    if (too_long) {
        st = bad(r, LF_ERR_RANGE, 1, "text file is larger than the limit of %zu bytes for one document",
                 (size_t)LF_READER_MAX_TEXT_BYTES);
    } else if (r->rec_len == 0) {
        return lf_fail(LF_ERR_FORMAT, "%s: the file is empty", r->path);
    } else {
        const char *nul = memchr(r->rec, 0, r->rec_len);
        if (nul)
            return lf_fail(LF_ERR_FORMAT, "%s:%llu: NUL byte at byte offset %zu (a binary file?)", r->path,
                           (unsigned long long)line_at(r, 1, (size_t)(nul - r->rec)), (size_t)(nul - r->rec));
        const char *why = "";
        size_t at = lf__utf8_check((const unsigned char *)r->rec, r->rec_len, &why);
        if (at < r->rec_len)
            st = bad(r, LF_ERR_FORMAT, line_at(r, 1, at), "invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)", at,
                     (unsigned)(unsigned char)r->rec[at], why);
    }
    if (st != LF_OK) return st;
    if (r->skip_now) {
        *eof = 1;
        return LF_OK;
    }
    rec->text = r->rec;
    rec->text_len = r->rec_len;
    return LF_OK;
}

/* ---------------------------------------------------------------- public */
const char *lf_input_format_name(lf_input_format f) {
    switch (f) {
    case LF_INPUT_AUTO: return "auto";
    case LF_INPUT_TEXT: return "text";
    case LF_INPUT_JSONL: return "jsonl";
    case LF_INPUT_JSON: return "json";
    case LF_INPUT_CSV: return "csv";
    case LF_INPUT_PARQUET: return "parquet";
    case LF_INPUT_WDS: return "wds";
    case LF_INPUT_ARROW: return "arrow";
    }
    return NULL;
}

/* The format a file name tells (LF_INPUT_JSON for ".json": sniffed later);
 * LF_INPUT_AUTO when it tells none. */
lf_input_format lf__input_format_of_name(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) return LF_INPUT_TEXT; /* no extension (a leading dot is a hidden name) */
    static const struct {
        const char *ext;
        lf_input_format f;
    } table[] = {
        {".jsonl", LF_INPUT_JSONL}, {".ndjson", LF_INPUT_JSONL}, {".jsonlines", LF_INPUT_JSONL},
        {".json", LF_INPUT_JSON},   {".txt", LF_INPUT_TEXT},     {".text", LF_INPUT_TEXT},
        {".md", LF_INPUT_TEXT},     {".csv", LF_INPUT_CSV},      {".parquet", LF_INPUT_PARQUET},
        {".tar", LF_INPUT_WDS},     {".tgz", LF_INPUT_WDS},      {".arrow", LF_INPUT_ARROW},
    };
    size_t bl = strlen(base);
    if (bl > 7 && strcasecmp(base + bl - 7, ".tar.gz") == 0) return LF_INPUT_WDS;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcasecmp(dot, table[i].ext) == 0) return table[i].f;
    return LF_INPUT_AUTO;
}

lf_status lf_reader_open(lf_reader **out, const char *path, const lf_reader_opts *opts) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_reader_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return lf_fail(LF_ERR_INVALID_ARG, "lf_reader_open: empty path");
    lf_reader_opts o;
    if (opts) o = *opts;
    else memset(&o, 0, sizeof o);
    if (!lf_input_format_name(o.format))
        return lf_fail(LF_ERR_INVALID_ARG, "%s: unknown input format %d", path, (int)o.format);
    if (o.mode != LF_RECORD_PRETRAIN && o.mode != LF_RECORD_SFT && o.mode != LF_RECORD_DPO)
        return lf_fail(LF_ERR_INVALID_ARG, "%s: unknown record mode %d", path, (int)o.mode);
    if (o.rejected_field && !*o.rejected_field) return lf_fail(LF_ERR_INVALID_ARG, "%s: an empty field name", path);
    if (o.mode != LF_RECORD_DPO && !o.prompt_field != !o.response_field)
        return lf_fail(LF_ERR_INVALID_ARG, "%s: give both the prompt field and the response field, or neither", path);
    if ((o.text_field && !*o.text_field) || (o.prompt_field && !*o.prompt_field) ||
        (o.response_field && !*o.response_field))
        return lf_fail(LF_ERR_INVALID_ARG, "%s: an empty field name", path);

    lf_input_format fmt = o.format;
    if (fmt == LF_INPUT_AUTO) {
        fmt = lf__input_format_of_name(path);
        if (fmt == LF_INPUT_AUTO)
            return lf_fail(LF_ERR_INVALID_ARG,
                           "%s: cannot tell the format from the file name (.jsonl, .json, .txt, ...); name it (text, "
                           "jsonl, json)",
                           path);
    }
    if (o.mode == LF_RECORD_DPO && fmt != LF_INPUT_JSONL && fmt != LF_INPUT_JSON && fmt != LF_INPUT_PARQUET)
        return lf_fail(LF_ERR_INVALID_ARG,
                       "%s: preference pairs (mode dpo) are read from JSON Lines, a JSON array or Parquet, not %s",
                       path, lf_input_format_name(fmt));
    if (fmt == LF_INPUT_TEXT && o.mode == LF_RECORD_SFT)
        return lf_fail(LF_ERR_INVALID_ARG,
                       "%s: fine-tuning needs prompt/response records (JSON Lines or a JSON array), "
                       "not a text file",
                       path);

    lf_status st = LF_OK;
    lf_reader *r = calloc(1, sizeof *r);
    if (r) r->fd = -1;
    if (!r || !(r->path = malloc(strlen(path) + 1)) || !(r->in = malloc(IN_BUF_BYTES))) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory opening", path);
        goto fail;
    }
    strcpy(r->path, path);
    r->o = o;
    r->cap = o.max_record_bytes ? o.max_record_bytes : LF_READER_MAX_RECORD_BYTES;
    r->line = 1;
    /* O_NONBLOCK keeps a FIFO from blocking the open (it is then refused
     * below, as are devices: no read here can wait or run forever) */
    r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (r->fd < 0) {
        st = lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(r->fd, &sb) != 0) {
        st = lf_fail(LF_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(sb.st_mode)) {
        st = lf_fail(LF_ERR_INVALID_ARG, "%s: is a directory, not a file", path);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = lf_fail(LF_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    int fl = fcntl(r->fd, F_GETFL);
    if (fl >= 0) (void)fcntl(r->fd, F_SETFL, fl & ~O_NONBLOCK);
    if (o.json_field && fmt != LF_INPUT_JSON && fmt != LF_INPUT_JSONL) {
        st = lf_fail(LF_ERR_INVALID_ARG,
                     "%s: a JSON field (--field '%s') names the list of records of a JSON file, "
                     "and this is a %s file",
                     path, o.json_field, lf_input_format_name(fmt));
        goto fail;
    }
    if (fmt == LF_INPUT_CSV || fmt == LF_INPUT_PARQUET || fmt == LF_INPUT_WDS || fmt == LF_INPUT_ARROW) {
        r->src = fmt == LF_INPUT_CSV       ? &lf__csv_source
                 : fmt == LF_INPUT_PARQUET ? &lf__parquet_source
                 : fmt == LF_INPUT_ARROW   ? &lf__arrow_source
                                           : &lf__wds_source;
        close(r->fd);
        r->fd = -1;
        if ((st = r->src->open(&r->src_state, path, &o)) != LF_OK) {
            r->src = NULL;
            goto fail;
        }
        r->fmt = fmt;
        *out = r;
        return LF_OK;
    }
    if ((st = fill(r)) != LF_OK) goto fail;
    /* a UTF-8 byte order mark is not content (a short first read is fine:
     * a file starting with a BOM has it in its first bytes) */
    if (r->in_len >= 3 && memcmp(r->in, "\xEF\xBB\xBF", 3) == 0) {
        r->in_pos = 3;
        r->bytes = 3;
    }
    if (fmt == LF_INPUT_JSON || fmt == LF_INPUT_JSONL) {
        int c, doc = 0;
        if ((st = peek_nonblank(r, &c)) != LF_OK) goto fail;
        const int sniff = c == '{' || (c == '[' && fmt == LF_INPUT_JSONL)
                              ? lf__json_sniff(path, r->cap,
                                               o.mode == LF_RECORD_PRETRAIN ? o.text_field : o.prompt_field)
                              : LF__JSON_SNIFF_LINES;
        if (o.json_field) doc = 2; /* the list under a key of the object */
        else if (sniff == LF__JSON_SNIFF_DOCUMENT && o.format != LF_INPUT_JSONL) doc = 2;
        else if (sniff == LF__JSON_SNIFF_NOT_JSON) /* pretty-printed: one document, if it parses as a whole */
            doc = o.format == LF_INPUT_JSON ? 2 : 1;
        if (doc) {
            int not_json = 0;
            st = lf__json_doc_open(&r->doc, path, o.json_field, &not_json);
            if (st == LF_OK) {
                r->use_doc = 1;
                fmt = LF_INPUT_JSON;
            } else if (doc == 2 || !not_json) {
                goto fail;
            } /* else: not JSON as a whole either: read line by line, which names the bad line */
        }
        if (!r->use_doc && fmt == LF_INPUT_JSON && o.format == LF_INPUT_AUTO && c != '[')
            fmt = LF_INPUT_JSONL; /* a .json file of one object per line */
    }
    r->fmt = fmt;
    *out = r;
    return LF_OK;
fail:
    lf_reader_close(r);
    return st;
}

lf_status lf_reader_next(lf_reader *r, lf_record *rec, int *eof) {
    if (!r || !rec || !eof) return lf_fail(LF_ERR_INVALID_ARG, "lf_reader_next: NULL argument");
    memset(rec, 0, sizeof *rec);
    *eof = 0;
    if (r->failed) return lf_fail(LF_ERR_INVALID_ARG, "%s: the reader stopped at an earlier error", r->path);
    lf_status st;
    switch (r->fmt) {
    case LF_INPUT_CSV:
    case LF_INPUT_PARQUET:
    case LF_INPUT_WDS:
    case LF_INPUT_ARROW: st = r->src->next(r->src_state, rec, eof, &r->skipped); break;
    case LF_INPUT_JSONL: st = next_jsonl(r, rec, eof); break;
    case LF_INPUT_JSON: st = r->use_doc ? next_doc(r, rec, eof) : next_json(r, rec, eof); break;
    default: st = next_text(r, rec, eof); break;
    }
    if (st != LF_OK) {
        r->failed = 1;
        memset(rec, 0, sizeof *rec);
    }
    return st;
}

void lf_reader_close(lf_reader *r) {
    if (!r) return;
    if (r->src) r->src->close(r->src_state);
    if (r->fd >= 0) close(r->fd);
    cJSON_Delete(r->root);
    lf__json_doc_free(&r->doc);
    free(r->joined);
    cJSON_free(r->msgs);
    free(r->rec);
    free(r->in);
    free(r->path);
    free(r);
}

uint64_t lf_reader_skipped(const lf_reader *r) { return r ? r->skipped : 0; }
uint64_t lf_reader_bytes_read(const lf_reader *r) {
    if (!r) return 0;
    if (r->src) return r->src->bytes_read ? r->src->bytes_read(r->src_state) : 0;
    return r->bytes;
}
lf_input_format lf_reader_format(const lf_reader *r) { return r ? r->fmt : LF_INPUT_AUTO; }
