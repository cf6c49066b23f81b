/*
 * Arrow IPC record source (lf__arrow_source, plugged into lf_reader by
 * reader_jsonl.c): the string columns of an Arrow IPC stream, one record per
 * row, as `datasets` writes them (save_to_disk's data-00000-of-00001.arrow,
 * its cache files, hub repositories' .arrow files). The Arrow IPC file
 * format ("ARROW1" magic) is the same stream behind 8 bytes, with a footer
 * this reader does not need. Reference: the Arrow columnar format
 * specification ("Serialization and Interprocess Communication") and its
 * flatbuffers schemas, Message.fbs and Schema.fbs.
 *
 * Why no library: Debian 12 ships no Arrow C or GLib package (apt-cache
 * knows no libarrow-dev nor libarrow-glib-dev), and what is read here is
 * small: the message framing, three flatbuffers tables (Message, Schema with
 * its Fields, RecordBatch) read by hand with every offset checked, and the
 * validity/offsets/data buffers of utf8 and large_utf8 columns.
 *
 * Stream: messages, each 0xFFFFFFFF, int32 metadata length, a Message
 * flatbuffer (padded), then bodyLength body bytes; a length of 0 ends it.
 * The first message is the Schema, then RecordBatches. Refused, clearly:
 * DictionaryBatch messages (dictionary-encoded columns), compressed bodies
 * (BodyCompression LZ4_FRAME/ZSTD), big-endian streams, and a selected
 * column whose type is not utf8/large_utf8; a column of a type whose buffer
 * layout this reader does not know (union, view, run-end encoded) is refused
 * even when not selected, since the buffers after it could not be found.
 *
 * Invariants:
 *  - Memory: the schema and one message (metadata and body) at a time,
 *    each capped (ARROW_MAX_META_BYTES, ARROW_MAX_BODY_BYTES). Never the file.
 *  - Every offset and length read from the file is checked against what
 *    holds it before use: a flatbuffers offset against the metadata, a
 *    buffer against the body, a string's offsets against its data buffer
 *    and each other. A file that ends early is LF_ERR_FORMAT naming the file
 *    and the byte offset where it stops.
 *  - Record semantics mirror the Parquet reader: pretraining takes column
 *    "text" (or opts->text_field); fine-tuning takes prompt/response,
 *    input_text/target_text, or Alpaca's instruction/input/output (the
 *    prompt joined as docs/readers.md says), or the named pair. A null,
 *    invalid UTF-8, a NUL byte, an empty text or response is a bad record
 *    ("FILE:ROW: column 'c' ..."), skippable with skip_bad_records.
 *  - rec->line is the 1-based row number in the file, rec->index the 0-based
 *    row index.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

#define ARROW_MAX_META_BYTES ((size_t)64 << 20)
#define ARROW_MAX_BODY_BYTES ((size_t)1 << 31)
#define ARROW_MAX_FIELDS 100000
#define ARROW_MAX_DEPTH 64
#define ARROW_COLS 3

enum { HDR_SCHEMA = 1, HDR_DICTIONARY = 2, HDR_RECORD_BATCH = 3 };
/* Schema.fbs Type union */
enum {
    T_NULL = 1,
    T_INT = 2,
    T_FLOAT = 3,
    T_BINARY = 4,
    T_UTF8 = 5,
    T_BOOL = 6,
    T_DECIMAL = 7,
    T_DATE = 8,
    T_TIME = 9,
    T_TIMESTAMP = 10,
    T_INTERVAL = 11,
    T_LIST = 12,
    T_STRUCT = 13,
    T_UNION = 14,
    T_FIXED_BINARY = 15,
    T_FIXED_LIST = 16,
    T_MAP = 17,
    T_DURATION = 18,
    T_LARGE_BINARY = 19,
    T_LARGE_UTF8 = 20,
    T_LARGE_LIST = 21,
    T_RUN_END = 22,
    T_BINARY_VIEW = 23,
    T_UTF8_VIEW = 24,
    T_LIST_VIEW = 25,
    T_LARGE_LIST_VIEW = 26
};

static const char *type_name(int t) {
    static const char *n[] = {"none",
                              "null",
                              "int",
                              "floating point",
                              "binary",
                              "utf8",
                              "bool",
                              "decimal",
                              "date",
                              "time",
                              "timestamp",
                              "interval",
                              "list",
                              "struct",
                              "union",
                              "fixed-size binary",
                              "fixed-size list",
                              "map",
                              "duration",
                              "large binary",
                              "large_utf8",
                              "large list",
                              "run-end encoded",
                              "binary view",
                              "utf8 view",
                              "list view",
                              "large list view"};
    return t >= 0 && t < (int)(sizeof n / sizeof n[0]) ? n[t] : "unknown";
}

/* ---------------------------------------------------------------- flatbuffers */
/* A view of one flatbuffer; `bad` is sticky. */
typedef struct fb {
    const unsigned char *p;
    size_t n;
    int bad;
} fb;

static uint32_t fb_u32(fb *b, size_t at) {
    if (at > b->n || b->n - at < 4) {
        b->bad = 1;
        return 0;
    }
    return lf__ld_u32le(b->p + at);
}
static uint16_t fb_u16(fb *b, size_t at) {
    if (at > b->n || b->n - at < 2) {
        b->bad = 1;
        return 0;
    }
    return (uint16_t)lf__ld_u16le(b->p + at);
}
static uint64_t fb_u64(fb *b, size_t at) {
    uint64_t lo = fb_u32(b, at), hi = fb_u32(b, at + 4);
    return lo | hi << 32;
}

/* The position of field `id` of the table at t, 0 when absent. */
static size_t fb_field(fb *b, size_t t, int id) {
    int32_t so = (int32_t)fb_u32(b, t);
    int64_t vt = (int64_t)t - so;
    if (b->bad || vt < 0 || (uint64_t)vt >= b->n) {
        b->bad = 1;
        return 0;
    }
    uint16_t vsize = fb_u16(b, (size_t)vt);
    if ((size_t)(4 + 2 * id) + 2 > vsize) return 0;
    uint16_t off = fb_u16(b, (size_t)vt + 4 + 2 * (size_t)id);
    if (!off) return 0;
    if ((size_t)off >= b->n - t) {
        b->bad = 1;
        return 0;
    }
    return t + off;
}

/* Follow the offset stored at position at (0 when at is 0). */
static size_t fb_deref(fb *b, size_t at) {
    if (!at) return 0;
    uint32_t o = fb_u32(b, at);
    if (b->bad || o == 0 || (uint64_t)at + o >= b->n) {
        b->bad = 1;
        return 0;
    }
    return at + o;
}

/* A vector at position v: *len elements starting at the return value. */
static size_t fb_vector(fb *b, size_t v, uint32_t *len, size_t elem) {
    *len = 0;
    if (!v) return 0;
    uint32_t n = fb_u32(b, v);
    if (b->bad || (uint64_t)n * elem > b->n - v - 4) {
        b->bad = 1;
        return 0;
    }
    *len = n;
    return v + 4;
}

static int64_t fb_i64_field(fb *b, size_t t, int id, int64_t dflt) {
    size_t at = fb_field(b, t, id);
    return at ? (int64_t)fb_u64(b, at) : dflt;
}
static int fb_u8_field(fb *b, size_t t, int id, int dflt) {
    size_t at = fb_field(b, t, id);
    return at ? b->p[at] : dflt;
}

/* ---------------------------------------------------------------- state */
typedef struct column {
    char *name;
    int type;    /* top-level type (T_*) */
    size_t node; /* index of its FieldNode */
    size_t buf;  /* index of its first buffer */
    int sel;     /* which selected slot, -1 when not selected */
} column;

typedef struct arrow {
    char *path;
    FILE *f;
    lf_reader_opts o;
    uint64_t off, size; /* bytes consumed, file size */
    uint64_t *skipped;
    int skip_now;
    column *col;
    size_t n_col, n_nodes, n_bufs; /* over the whole field tree */
    int sel[ARROW_COLS];           /* selected top-level columns, -1 when none */
    const char *key[ARROW_COLS];
    int alpaca; /* sel = instruction, input (may be -1), output */
    unsigned char *meta, *body;
    size_t meta_cap, body_cap, body_len;
    /* the current record batch */
    int64_t rows, row;
    const unsigned char *valid[ARROW_COLS], *offs[ARROW_COLS], *data[ARROW_COLS];
    uint64_t data_len[ARROW_COLS];
    int large[ARROW_COLS];
    uint64_t row_base, index;
    char *joined;
    size_t joined_cap;
    int done;
} arrow;

static lf_status corrupt(const arrow *a, const char *what, ...) {
    char m[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(m, sizeof m, what, ap);
    va_end(ap);
    return lf_fail(LF_ERR_FORMAT, "%s: Arrow IPC stream: %s", a->path, m);
}

static lf_status read_exact(arrow *a, void *dst, size_t n, const char *what) {
    size_t got = n ? fread(dst, 1, n, a->f) : 0;
    if (got != n) {
        if (ferror(a->f)) return lf_fail(LF_ERR_IO, "%s: read failed: %s", a->path, strerror(errno));
        return corrupt(a, "the file ends at byte %llu, inside %s (%zu more bytes needed): cut short?",
                       (unsigned long long)(a->off + got), what, n - got);
    }
    a->off += n;
    return LF_OK;
}

static lf_status grow(arrow *a, unsigned char **p, size_t *cap, size_t n) {
    if (n <= *cap) return LF_OK;
    unsigned char *q = realloc(*p, n);
    if (!q) return lf_fail(LF_ERR_NOMEM, "%s: out of memory holding an Arrow message of %zu bytes", a->path, n);
    *p = q;
    *cap = n;
    return LF_OK;
}

/* The next message: its header type, the Message table (in a->meta) and
 * its body (in a->body). *eos at the end-of-stream marker or end of file. */
static lf_status next_message(arrow *a, fb *m, size_t *msg, int *hdr_type, size_t *hdr, int *eos) {
    *eos = 0;
    unsigned char w[4];
    uint64_t at = a->off;
    if (a->off == a->size)
        return corrupt(a, "the file ends at byte %llu without the end-of-stream marker: cut short?",
                       (unsigned long long)a->off);
    lf_status st = read_exact(a, w, 4, "a message's length");
    if (st != LF_OK) return st;
    uint32_t len = lf__ld_u32le(w);
    if (len == 0xFFFFFFFFu) {
        if ((st = read_exact(a, w, 4, "a message's length")) != LF_OK) return st;
        len = lf__ld_u32le(w);
    }
    if (len == 0) {
        *eos = 1;
        return LF_OK;
    }
    if (len > ARROW_MAX_META_BYTES)
        return corrupt(a, "the message at byte %llu says its metadata is %u bytes (limit %zu)", (unsigned long long)at,
                       len, ARROW_MAX_META_BYTES);
    if ((st = grow(a, &a->meta, &a->meta_cap, len)) != LF_OK) return st;
    if ((st = read_exact(a, a->meta, len, "a message's metadata")) != LF_OK) return st;
    *m = (fb){a->meta, len, 0};
    uint32_t root = fb_u32(m, 0); /* the root table's offset */
    *msg = root >= 4 && root < len ? root : 0;
    if (!*msg) m->bad = 1;
    int version = (int)(short)(fb_field(m, *msg, 0) ? fb_u16(m, fb_field(m, *msg, 0)) : 0);
    *hdr_type = fb_u8_field(m, *msg, 1, 0);
    *hdr = fb_deref(m, fb_field(m, *msg, 2));
    int64_t body = fb_i64_field(m, *msg, 3, 0);
    if (m->bad || !*hdr) return corrupt(a, "the message at byte %llu has broken metadata", (unsigned long long)at);
    if (version < 3) return corrupt(a, "metadata version V%d is older than this reader reads (V4, V5)", version + 1);
    if (body < 0 || (uint64_t)body > ARROW_MAX_BODY_BYTES || (uint64_t)body > a->size - a->off) {
        if (body >= 0 && (uint64_t)body <= ARROW_MAX_BODY_BYTES)
            return corrupt(
                a, "the message at byte %llu has a body of %lld bytes, but the file ends after %llu: cut short?",
                (unsigned long long)at, (long long)body, (unsigned long long)(a->size - a->off));
        return corrupt(a, "the message at byte %llu says its body is %lld bytes", (unsigned long long)at,
                       (long long)body);
    }
    if ((st = grow(a, &a->body, &a->body_cap, (size_t)body ? (size_t)body : 1)) != LF_OK) return st;
    a->body_len = (size_t)body;
    return read_exact(a, a->body, (size_t)body, "a message's body");
}

/* ---------------------------------------------------------------- schema */
/* Count the nodes and buffers of the field at f (and its children). */
static lf_status walk_field(arrow *a, fb *m, size_t f, int depth, int *type, const char *top) {
    if (depth > ARROW_MAX_DEPTH) return corrupt(a, "column '%s' nests deeper than %d", top, ARROW_MAX_DEPTH);
    int t = fb_u8_field(m, f, 2, 0);
    *type = t;
    if (fb_field(m, f, 4))
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: column '%s' is dictionary-encoded, which this "
                       "reader does not read (datasets never writes it)",
                       a->path, top);
    int bufs;
    switch (t) {
    case T_NULL: bufs = 0; break;
    case T_STRUCT:
    case T_FIXED_LIST: bufs = 1; break;
    case T_INT:
    case T_FLOAT:
    case T_BOOL:
    case T_DECIMAL:
    case T_DATE:
    case T_TIME:
    case T_TIMESTAMP:
    case T_INTERVAL:
    case T_FIXED_BINARY:
    case T_DURATION:
    case T_LIST:
    case T_LARGE_LIST:
    case T_MAP: bufs = 2; break;
    case T_BINARY:
    case T_UTF8:
    case T_LARGE_BINARY:
    case T_LARGE_UTF8: bufs = 3; break;
    default:
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: column '%s' holds the Arrow type %s, whose buffers this reader "
                       "cannot find its way past",
                       a->path, top, type_name(t));
    }
    a->n_nodes++;
    a->n_bufs += (size_t)bufs;
    uint32_t n = 0;
    size_t v = fb_vector(m, fb_deref(m, fb_field(m, f, 5)), &n, 4);
    for (uint32_t i = 0; i < n && !m->bad; i++) {
        int ct;
        size_t c = fb_deref(m, v + 4 * (size_t)i);
        lf_status st = walk_field(a, m, c, depth + 1, &ct, top);
        if (st != LF_OK) return st;
    }
    return m->bad ? corrupt(a, "the schema's column '%s' is broken", top) : LF_OK;
}

static int find_col(const arrow *a, const char *name) {
    for (size_t i = 0; i < a->n_col; i++)
        if (!strcmp(a->col[i].name, name)) return (int)i;
    return -1;
}

static lf_status select_cols(arrow *a) {
    char names[512] = "";
    for (size_t i = 0; i < a->n_col; i++) {
        size_t k = strlen(names);
        snprintf(names + k, sizeof names - k, "%s'%s'", i ? ", " : "", a->col[i].name);
    }
    const char *want[ARROW_COLS] = {NULL, NULL, NULL};
    if (a->o.mode == LF_RECORD_PRETRAIN) {
        want[0] = a->o.text_field ? a->o.text_field : "text";
    } else if (a->o.prompt_field) {
        want[0] = a->o.prompt_field;
        want[1] = a->o.response_field;
    } else if (find_col(a, "prompt") >= 0 || find_col(a, "response") >= 0) {
        want[0] = "prompt";
        want[1] = "response";
    } else if (find_col(a, "input_text") >= 0 || find_col(a, "target_text") >= 0) {
        want[0] = "input_text";
        want[1] = "target_text";
    } else if (find_col(a, "instruction") >= 0 && find_col(a, "output") >= 0) {
        a->alpaca = 1;
        want[0] = "instruction";
        want[1] = "output";
        want[2] = find_col(a, "input") >= 0 ? "input" : NULL;
    } else {
        return lf_fail(LF_ERR_FORMAT,
                       "%s: no fine-tuning columns: expected 'prompt' and 'response', 'input_text' and "
                       "'target_text', or Alpaca's 'instruction', 'input' and 'output' (or name them with "
                       "--prompt-field/--response-field); the columns are: %s",
                       a->path, names);
    }
    for (int k = 0; k < ARROW_COLS; k++) {
        a->sel[k] = -1;
        if (!want[k]) continue;
        int c = find_col(a, want[k]);
        if (c < 0) return lf_fail(LF_ERR_FORMAT, "%s: no column '%s'; the columns are: %s", a->path, want[k], names);
        if (a->col[c].type != T_UTF8 && a->col[c].type != T_LARGE_UTF8)
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: column '%s' holds the Arrow type %s, not a string (utf8)", a->path,
                           want[k], type_name(a->col[c].type));
        a->sel[k] = c;
        a->key[k] = a->col[c].name;
        a->large[k] = a->col[c].type == T_LARGE_UTF8;
    }
    return LF_OK;
}

static lf_status read_schema(arrow *a) {
    fb m;
    size_t msg, hdr;
    int type, eos;
    lf_status st = next_message(a, &m, &msg, &type, &hdr, &eos);
    if (st != LF_OK) return st;
    if (eos || type != HDR_SCHEMA) return corrupt(a, "the stream does not start with a Schema message");
    if (fb_field(&m, hdr, 0) && fb_u16(&m, fb_field(&m, hdr, 0)) != 0)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: a big-endian Arrow stream, which this reader does not read", a->path);
    uint32_t n = 0;
    size_t v = fb_vector(&m, fb_deref(&m, fb_field(&m, hdr, 1)), &n, 4);
    if (m.bad || n == 0 || n > ARROW_MAX_FIELDS) return corrupt(a, "the schema's list of columns is broken or empty");
    if (!(a->col = calloc(n, sizeof *a->col))) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", a->path);
    for (uint32_t i = 0; i < n; i++) {
        size_t f = fb_deref(&m, v + 4 * (size_t)i);
        size_t s = fb_deref(&m, fb_field(&m, f, 0));
        uint32_t sl = 0;
        size_t sp = fb_vector(&m, s, &sl, 1);
        if (m.bad) return corrupt(a, "column %u of the schema is broken", i + 1);
        column *c = &a->col[a->n_col++];
        if (!(c->name = malloc((size_t)sl + 1))) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", a->path);
        if (sl) memcpy(c->name, m.p + sp, sl);
        c->name[sl] = 0;
        c->node = a->n_nodes;
        c->buf = a->n_bufs;
        if ((st = walk_field(a, &m, f, 0, &c->type, c->name)) != LF_OK) return st;
    }
    return select_cols(a);
}

/* ---------------------------------------------------------------- record batches */
static lf_status read_batch(arrow *a, int *eos) {
    for (;;) {
        fb m;
        size_t msg, hdr;
        int type;
        uint64_t at = a->off;
        lf_status st = next_message(a, &m, &msg, &type, &hdr, eos);
        if (st != LF_OK || *eos) return st;
        if (type == HDR_DICTIONARY)
            return lf_fail(LF_ERR_UNSUPPORTED,
                           "%s: a DictionaryBatch at byte %llu: dictionary-encoded columns are not "
                           "read",
                           a->path, (unsigned long long)at);
        if (type != HDR_RECORD_BATCH) continue; /* Tensor messages: not data of this table */
        if (fb_field(&m, hdr, 3))
            return lf_fail(LF_ERR_UNSUPPORTED,
                           "%s: the record batch at byte %llu has compressed buffers (LZ4_FRAME/ZSTD), which this "
                           "reader does not read; write it without compression",
                           a->path, (unsigned long long)at);
        int64_t rows = fb_i64_field(&m, hdr, 0, 0);
        uint32_t nn = 0, nb = 0;
        size_t nodes = fb_vector(&m, fb_deref(&m, fb_field(&m, hdr, 1)), &nn, 16);
        size_t bufs = fb_vector(&m, fb_deref(&m, fb_field(&m, hdr, 2)), &nb, 16);
        if (m.bad || rows < 0 || nn != a->n_nodes || nb != a->n_bufs)
            return corrupt(a,
                           "the record batch at byte %llu does not match the schema (%u nodes, %u buffers; "
                           "expected %zu and %zu)",
                           (unsigned long long)at, nn, nb, a->n_nodes, a->n_bufs);
        for (int k = 0; k < ARROW_COLS; k++) {
            if (a->sel[k] < 0) continue;
            const column *c = &a->col[a->sel[k]];
            int64_t len = (int64_t)fb_u64(&m, nodes + 16 * c->node);
            const unsigned char *b[3];
            uint64_t bl[3];
            for (int j = 0; j < 3; j++) {
                uint64_t o = fb_u64(&m, bufs + 16 * (c->buf + (size_t)j)),
                         l = fb_u64(&m, bufs + 16 * (c->buf + (size_t)j) + 8);
                if (o > a->body_len || l > a->body_len - o)
                    return corrupt(a, "the record batch at byte %llu: a buffer of column '%s' lies outside its body",
                                   (unsigned long long)at, c->name);
                b[j] = a->body + o;
                bl[j] = l;
            }
            const uint64_t ow = a->large[k] ? 8 : 4;
            if (len != rows || bl[1] < ow * ((uint64_t)rows + 1) || (bl[0] && bl[0] < ((uint64_t)rows + 7) / 8))
                return corrupt(a,
                               "the record batch at byte %llu: column '%s' has %lld values and %llu bytes of "
                               "offsets for %lld rows",
                               (unsigned long long)at, c->name, (long long)len, (unsigned long long)bl[1],
                               (long long)rows);
            a->valid[k] = bl[0] ? b[0] : NULL;
            a->offs[k] = b[1];
            a->data[k] = b[2];
            a->data_len[k] = bl[2];
        }
        a->row_base += (uint64_t)a->rows;
        a->rows = rows;
        a->row = 0;
        if (rows > 0) return LF_OK;
    }
}

static uint64_t ld_off(const arrow *a, int k, int64_t i) {
    const unsigned char *p = a->offs[k] + (size_t)i * (a->large[k] ? 8 : 4);
    if (!a->large[k]) return (uint64_t)(int64_t)(int32_t)lf__ld_u32le(p);
    return (uint64_t)lf__ld_u32le(p) | (uint64_t)lf__ld_u32le(p + 4) << 32;
}

static lf_status bad_rec(arrow *a, lf_status st, uint64_t row, const char *col, const char *fmt, const char *why) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s:%llu: row %llu: column '%s' %s%s", a->path, (unsigned long long)row,
             (unsigned long long)row, col, fmt, why ? why : "");
    return lf__reader_bad(&a->o, a->skipped, &a->skip_now, st, msg);
}

/* Value k of the current row; *s NULL after a skip. */
static lf_status get_value(arrow *a, int k, uint64_t row, int need_text, const char **s, size_t *n) {
    *s = NULL;
    *n = 0;
    const int64_t i = a->row;
    const char *col = a->key[k];
    if (a->valid[k] && !(a->valid[k][i >> 3] >> (i & 7) & 1)) {
        if (a->alpaca && k == 2) { /* Alpaca's input: null is no input */
            *s = "";
            return LF_OK;
        }
        return bad_rec(a, LF_ERR_FORMAT, row, col, "is null", 0);
    }
    uint64_t b = ld_off(a, k, i), e = ld_off(a, k, i + 1);
    if (b > e || e > a->data_len[k])
        return corrupt(a, "row %llu: column '%s' has offsets %llu..%llu outside its %llu data bytes",
                       (unsigned long long)row, col, (unsigned long long)b, (unsigned long long)e,
                       (unsigned long long)a->data_len[k]);
    const char *p = (const char *)a->data[k] + b;
    size_t len = (size_t)(e - b), cap = a->o.max_record_bytes ? a->o.max_record_bytes : LF_READER_MAX_RECORD_BYTES;
    const char *why = "";
    if (len > cap) return bad_rec(a, LF_ERR_RANGE, row, col, "is longer than the limit for one record", 0);
    if (memchr(p, 0, len)) return bad_rec(a, LF_ERR_FORMAT, row, col, "holds a NUL byte", 0);
    if (lf__utf8_check((const unsigned char *)p, len, &why) < len)
        return bad_rec(a, LF_ERR_FORMAT, row, col, "holds invalid UTF-8: ", why);
    if (need_text && len == 0) return bad_rec(a, LF_ERR_FORMAT, row, col, "is empty", 0);
    *s = p;
    *n = len;
    return LF_OK;
}

/* The value's bytes NUL-terminated: copied into a->joined (the strings of a
 * batch are not terminated). */
static lf_status terminate(arrow *a, size_t at, const char *s, size_t n, const char *sep, size_t sn) {
    size_t need = at + sn + n + 1;
    if (need > a->joined_cap) {
        size_t cap = a->joined_cap ? a->joined_cap : 4096;
        while (cap < need) cap *= 2;
        char *j = realloc(a->joined, cap);
        if (!j) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", a->path);
        a->joined = j;
        a->joined_cap = cap;
    }
    memcpy(a->joined + at, sep, sn);
    memcpy(a->joined + at + sn, s, n);
    a->joined[at + sn + n] = 0;
    return LF_OK;
}

static lf_status src_next(void *state, lf_record *rec, int *eof, uint64_t *skipped) {
    arrow *a = state;
    a->skipped = skipped;
    *eof = 0;
    for (;;) {
        if (a->done || a->row >= a->rows) {
            int eos = 0;
            lf_status st = a->done ? LF_OK : read_batch(a, &eos);
            if (st != LF_OK) return st;
            if (a->done || eos) {
                a->done = 1;
                *eof = 1;
                return LF_OK;
            }
        }
        const uint64_t row = a->row_base + (uint64_t)a->row + 1;
        memset(rec, 0, sizeof *rec);
        rec->line = row;
        rec->index = a->index++;
        a->skip_now = 0;
        const char *s[ARROW_COLS] = {NULL, NULL, NULL};
        size_t n[ARROW_COLS] = {0, 0, 0};
        lf_status st = LF_OK;
        const int pre = a->o.mode == LF_RECORD_PRETRAIN;
        for (int k = 0; k < ARROW_COLS && st == LF_OK && !a->skip_now; k++)
            if (a->sel[k] >= 0) st = get_value(a, k, row, pre ? 1 : k == 1, &s[k], &n[k]);
        a->row++;
        if (st != LF_OK) return st;
        if (a->skip_now) continue;
        if (pre) {
            if ((st = terminate(a, 0, s[0], n[0], "", 0)) != LF_OK) return st;
            rec->text = a->joined;
            rec->text_len = n[0];
            rec->text_key = a->key[0];
            return LF_OK;
        }
        /* prompt [+ "\n\n" + input], NUL, response: one buffer */
        size_t pl = n[0];
        if ((st = terminate(a, 0, s[0], n[0], "", 0)) != LF_OK) return st;
        if (a->alpaca && n[2]) {
            if ((st = terminate(a, pl, s[2], n[2], "\n\n", 2)) != LF_OK) return st;
            pl += 2 + n[2];
        }
        if ((st = terminate(a, pl + 1, s[1], n[1], "", 0)) != LF_OK) return st;
        rec->prompt = a->joined;
        rec->prompt_len = pl;
        rec->response = a->joined + pl + 1;
        rec->response_len = n[1];
        rec->prompt_key = a->key[0];
        rec->response_key = a->key[1];
        return LF_OK;
    }
}

/* ---------------------------------------------------------------- open/close */
static void src_close(void *state) {
    arrow *a = state;
    if (!a) return;
    if (a->f) fclose(a->f);
    for (size_t i = 0; i < a->n_col; i++) free(a->col[i].name);
    free(a->col);
    free(a->meta);
    free(a->body);
    free(a->joined);
    free(a->path);
    free(a);
}

static lf_status src_open(void **state, const char *path, const lf_reader_opts *opts) {
    *state = NULL;
    lf_status st;
    arrow *a = calloc(1, sizeof *a);
    if (!a || !(a->path = strdup(path))) {
        free(a);
        return lf_fail(LF_ERR_NOMEM, "%s: out of memory opening", path);
    }
    a->o = *opts;
    if (!(a->f = fopen(path, "rb"))) {
        st = lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (fseek(a->f, 0, SEEK_END) != 0 || (long long)(a->size = (uint64_t)ftell(a->f)) < 0 ||
        fseek(a->f, 0, SEEK_SET) != 0) {
        st = lf_fail(LF_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
        goto fail;
    }
    if (a->size == 0) {
        st = lf_fail(LF_ERR_FORMAT, "%s: the file is empty (no Arrow stream)", path);
        goto fail;
    }
    unsigned char magic[8];
    if (a->size >= 8 && fread(magic, 1, 8, a->f) == 8 && !memcmp(magic, "ARROW1\0\0", 8)) a->off = 8; /* file format */
    else if (fseek(a->f, 0, SEEK_SET) != 0) {
        st = lf_fail(LF_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
        goto fail;
    }
    if ((st = read_schema(a)) != LF_OK) goto fail;
    *state = a;
    return LF_OK;
fail:
    src_close(a);
    return st;
}

static uint64_t src_bytes_read(const void *state) {
    const arrow *a = state;
    return !a ? 0 : a->done ? a->size : a->off;
}

const lf__record_source lf__arrow_source = {src_open, src_next, src_close, src_bytes_read};
