/*
 * Parquet record source (lf__parquet_source, plugged into lf_reader by
 * reader_jsonl.c): the string columns of a flat Parquet file, one record per
 * row. What is supported and what is not: docs/parquet.md. Reference: the
 * Apache Parquet format (parquet.thrift, Encodings.md, README "File format")
 * and the Thrift compact protocol specification.
 *
 * File layout: "PAR1", column chunks (pages), FileMetaData (Thrift compact),
 * u32 LE footer length, "PAR1". A column chunk is a run of pages, each a
 * PageHeader (Thrift compact) followed by compressed_page_size bytes: at most
 * one dictionary page first, then data pages v1 (levels and values compressed
 * together) or v2 (levels uncompressed, values compressed unless
 * is_compressed is false).
 *
 * Invariants:
 *  - Streaming: memory holds the parsed footer (freed after open except the
 *    per-row-group offsets of the selected columns), and per selected column
 *    one page (compressed and decompressed), its dictionary and the value
 *    handed out. Never the whole file. Every size the file states is checked
 *    against what holds it (the file, the chunk, the page, the footer) before
 *    it is used, and pages and footers are capped (PQ_MAX_PAGE_BYTES,
 *    PQ_MAX_FOOTER_BYTES): a length is never trusted.
 *  - The Thrift decoder is a cursor over a buffer that can only move
 *    forward; every element of a list, set or map consumes at least one
 *    byte and nesting is capped (PQ_THRIFT_MAX_DEPTH), so decoding any
 *    input ends after O(bytes) steps. The first defect is kept (sticky) and
 *    reported with its byte offset in the file.
 *  - Values are decoded lazily, one row at a time: definition levels and
 *    dictionary indices go through an RLE/bit-packed hybrid cursor that
 *    checks every run against the end of its data.
 *  - Record semantics mirror the JSONL reader: pretraining takes column
 *    "text" (or opts->text_field); fine-tuning takes prompt/response or
 *    input_text/target_text or Alpaca's instruction/output/input (prompt =
 *    instruction + "\n\n" + input when input is not empty or null; chosen
 *    from the schema) or the named pair. A
 *    null, invalid UTF-8, a NUL byte, an empty text or response is a bad
 *    record ("FILE:ROW: row ROW (row group G): column 'c' ..."), skippable
 *    with skip_bad_records. A broken file is fatal (LF_ERR_FORMAT naming the
 *    file and the byte offset, row group, column and page); a feature this
 *    reader lacks is LF_ERR_UNSUPPORTED naming the column and the codec,
 *    encoding or type.
 *  - rec->line is the 1-based row number in the file, rec->index the 0-based
 *    row index (skipped rows included).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <brotli/decode.h>
#include <lz4.h>
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>
#include "data_impl.h"

#define PQ_MAGIC "PAR1"
#define PQ_MAX_FOOTER_BYTES ((size_t)64 << 20) /* FileMetaData */
#define PQ_MAX_PAGE_BYTES ((size_t)1 << 30)    /* one page, compressed or not */
#define PQ_MAX_HEADER_BYTES ((size_t)16 << 20) /* one PageHeader (statistics may be large) */
#define PQ_HEADER_READ ((size_t)4096)          /* first read of a page header */
#define PQ_THRIFT_MAX_DEPTH 32
#define PQ_SCHEMA_MAX_DEPTH 64
#define PQ_MAX_COLS 3 /* text; prompt, response; Alpaca's instruction, output, input; DPO's prompt, chosen, rejected */

/* parquet.thrift enums (the values used here) */
enum { PT_BOOLEAN, PT_INT32, PT_INT64, PT_INT96, PT_FLOAT, PT_DOUBLE, PT_BYTE_ARRAY, PT_FIXED_LEN_BYTE_ARRAY };
enum { REP_REQUIRED = 0, REP_OPTIONAL = 1, REP_REPEATED = 2 };
enum { CODEC_UNCOMPRESSED = 0, CODEC_SNAPPY = 1, CODEC_GZIP = 2, CODEC_BROTLI = 4, CODEC_ZSTD = 6, CODEC_LZ4_RAW = 7 };
enum {
    ENC_PLAIN = 0,
    ENC_PLAIN_DICTIONARY = 2,
    ENC_RLE = 3,
    ENC_BIT_PACKED = 4,
    ENC_DELTA_LENGTH_BYTE_ARRAY = 6,
    ENC_DELTA_BYTE_ARRAY = 7,
    ENC_RLE_DICTIONARY = 8
};
enum { PAGE_DATA = 0, PAGE_INDEX = 1, PAGE_DICTIONARY = 2, PAGE_DATA_V2 = 3 };
enum { CT_UTF8 = 0, CT_ENUM = 4, CT_JSON = 19 };   /* ConvertedType */
enum { LT_STRING = 1, LT_ENUM = 4, LT_JSON = 12 }; /* LogicalType union field ids */

static const char *type_name(int t) {
    static const char *n[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                              "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
    return t >= 0 && t < 8 ? n[t] : "an unknown type";
}
static const char *codec_name(int c) {
    static const char *n[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
    return c >= 0 && c < 8 ? n[c] : "an unknown codec";
}
static const char *encoding_name(int e) {
    static const char *n[] = {"PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
                              "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                              "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
    return e >= 0 && e < 10 ? n[e] : "an unknown encoding";
}
static const char *converted_name(int c) {
    static const char *n[] = {"UTF8",
                              "MAP",
                              "MAP_KEY_VALUE",
                              "LIST",
                              "ENUM",
                              "DECIMAL",
                              "DATE",
                              "TIME_MILLIS",
                              "TIME_MICROS",
                              "TIMESTAMP_MILLIS",
                              "TIMESTAMP_MICROS",
                              "UINT_8",
                              "UINT_16",
                              "UINT_32",
                              "UINT_64",
                              "INT_8",
                              "INT_16",
                              "INT_32",
                              "INT_64",
                              "JSON",
                              "BSON",
                              "INTERVAL"};
    return c >= 0 && c < 22 ? n[c] : "an unknown converted type";
}
static const char *logical_name(int l) {
    static const char *n[] = {"?",    "STRING",    "MAP",     "LIST",     "ENUM",     "DECIMAL", "DATE",
                              "TIME", "TIMESTAMP", "?",       "INTEGER",  "UNKNOWN",  "JSON",    "BSON",
                              "UUID", "FLOAT16",   "VARIANT", "GEOMETRY", "GEOGRAPHY"};
    return l >= 1 && l < 19 && l != 9 ? n[l] : "an unknown logical type";
}

/* ================================================================ Thrift compact protocol */
enum {
    TC_STOP = 0,
    TC_TRUE = 1,
    TC_FALSE = 2,
    TC_BYTE = 3,
    TC_I16 = 4,
    TC_I32 = 5,
    TC_I64 = 6,
    TC_DOUBLE = 7,
    TC_BINARY = 8,
    TC_LIST = 9,
    TC_SET = 10,
    TC_MAP = 11,
    TC_STRUCT = 12,
};

typedef struct tc {
    const unsigned char *start, *p, *end;
    int depth;
    const char *err; /* first defect (a fixed description), NULL while fine */
    size_t err_at;   /* its offset from start */
    int err_short;   /* the defect is running out of bytes (more input may fix it) */
} tc;

static void tc_init(tc *c, const unsigned char *p, size_t n) {
    memset(c, 0, sizeof *c);
    c->start = c->p = p;
    c->end = p + n;
}

static void tc_fail(tc *c, const char *why) {
    if (c->err) return;
    c->err = why;
    c->err_at = (size_t)(c->p - c->start);
}

static void tc_short(tc *c, const char *why) {
    if (c->err) return;
    tc_fail(c, why);
    c->err_short = 1;
}

static size_t tc_left(const tc *c) { return (size_t)(c->end - c->p); }

/* Unsigned varint of at most `bits` (32 or 64) bits. */
static uint64_t tc_varint(tc *c, int bits) {
    const int max_bytes = (bits + 6) / 7;
    uint64_t v = 0;
    for (int i = 0;; i++) {
        if (c->err) return 0;
        if (c->p >= c->end) {
            tc_short(c, "the data ends inside a varint");
            return 0;
        }
        if (i == max_bytes) {
            tc_fail(c, "varint longer than its type allows (overflow)");
            return 0;
        }
        unsigned b = *c->p++;
        if (i == max_bytes - 1 && (b & 0x7f) >> (bits - 7 * i) != 0) {
            c->p--;
            tc_fail(c, "varint overflows its type");
            return 0;
        }
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) return v;
    }
}

static int64_t tc_zigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }
static int32_t tc_i32(tc *c) { return (int32_t)tc_zigzag(tc_varint(c, 32)); }
static int64_t tc_i64(tc *c) { return tc_zigzag(tc_varint(c, 64)); }

static void tc_need(tc *c, size_t n, const char *why) {
    if (!c->err && tc_left(c) < n) tc_short(c, why);
}

/* Binary/string: a length then bytes (pointers into the buffer). */
static void tc_binary(tc *c, const unsigned char **s, uint32_t *n) {
    *s = NULL;
    *n = 0;
    uint64_t len = tc_varint(c, 32);
    if (c->err) return;
    if (len > tc_left(c)) {
        tc_short(c, "a string is longer than the data left");
        return;
    }
    *s = c->p;
    *n = (uint32_t)len;
    c->p += len;
}

/* List/set header: element type and count (each element takes >= 1 byte,
 * so a count above the bytes left is a defect). */
static uint32_t tc_list(tc *c, int *elem_type) {
    *elem_type = 0;
    tc_need(c, 1, "the data ends inside a list header");
    if (c->err) return 0;
    unsigned b = *c->p++;
    uint64_t n = b >> 4;
    *elem_type = (int)(b & 0x0f);
    if (n == 15) n = tc_varint(c, 32);
    if (c->err) return 0;
    if (n > tc_left(c)) {
        tc_short(c, "a list has more elements than the data left can hold");
        return 0;
    }
    return (uint32_t)n;
}

/* The next field header of a struct: 1 and its type and id, 0 at STOP or
 * on a defect. */
static int tc_field(tc *c, int *last_id, int *type, int *id) {
    tc_need(c, 1, "the data ends inside a struct (no STOP)");
    if (c->err) return 0;
    unsigned b = *c->p++;
    if (b == TC_STOP) return 0;
    *type = (int)(b & 0x0f);
    unsigned delta = b >> 4;
    if (delta) {
        *id = *last_id + (int)delta;
    } else {
        int32_t v = tc_i32(c);
        if (c->err) return 0;
        if (v < -32768 || v > 32767) {
            tc_fail(c, "a field id is outside the i16 range");
            return 0;
        }
        *id = v;
    }
    *last_id = *id;
    if (*type == TC_STOP || *type > TC_STRUCT) {
        tc_fail(c, "a field has an unknown type code");
        return 0;
    }
    return 1;
}

static void tc_skip(tc *c, int type, int in_collection);

static void tc_enter(tc *c) {
    if (++c->depth > PQ_THRIFT_MAX_DEPTH) tc_fail(c, "values are nested too deeply");
}

/* Skip a struct's fields up to its STOP. */
static void tc_skip_struct(tc *c) {
    tc_enter(c);
    int last = 0, type, id;
    while (!c->err && tc_field(c, &last, &type, &id)) tc_skip(c, type, 0);
    c->depth--;
}

/* Skip one value. Booleans are held in the field header inside structs, but
 * take one byte as elements of a collection. */
static void tc_skip(tc *c, int type, int in_collection) {
    if (c->err) return;
    switch (type) {
    case TC_TRUE:
    case TC_FALSE:
        if (in_collection) {
            tc_need(c, 1, "the data ends inside a boolean");
            if (!c->err) c->p++;
        }
        return;
    case TC_BYTE:
        tc_need(c, 1, "the data ends inside a byte");
        if (!c->err) c->p++;
        return;
    case TC_I16:
    case TC_I32: (void)tc_varint(c, 32); return;
    case TC_I64: (void)tc_varint(c, 64); return;
    case TC_DOUBLE:
        tc_need(c, 8, "the data ends inside a double");
        if (!c->err) c->p += 8;
        return;
    case TC_BINARY: {
        const unsigned char *s;
        uint32_t n;
        tc_binary(c, &s, &n);
        return;
    }
    case TC_LIST:
    case TC_SET: {
        int et;
        uint32_t n = tc_list(c, &et);
        tc_enter(c);
        for (uint32_t i = 0; i < n && !c->err; i++) tc_skip(c, et, 1);
        c->depth--;
        return;
    }
    case TC_MAP: {
        uint64_t n = tc_varint(c, 32);
        if (c->err || n == 0) return;
        tc_need(c, 1, "the data ends inside a map header");
        if (c->err) return;
        unsigned kv = *c->p++;
        if (n > tc_left(c) / 2) {
            tc_short(c, "a map has more entries than the data left can hold");
            return;
        }
        tc_enter(c);
        for (uint64_t i = 0; i < n && !c->err; i++) {
            tc_skip(c, (int)(kv >> 4), 1);
            tc_skip(c, (int)(kv & 0x0f), 1);
        }
        c->depth--;
        return;
    }
    case TC_STRUCT: tc_skip_struct(c); return;
    default: tc_fail(c, "a value has an unknown type code"); return;
    }
}

/* A field of the expected type, or a defect. */
static int tc_want(tc *c, int type, int want) {
    if (c->err) return 0;
    if (type == want || (want == TC_TRUE && type == TC_FALSE)) return 1;
    tc_fail(c, "a known field has an unexpected type");
    return 0;
}

/* An i32 field read into an int (enum values and sizes). */
static int tc_field_i32(tc *c, int type, int32_t *out) {
    if (!tc_want(c, type, TC_I32)) return 0;
    *out = tc_i32(c);
    return !c->err;
}
static int tc_field_i64(tc *c, int type, int64_t *out) {
    if (!tc_want(c, type, TC_I64)) return 0;
    *out = tc_i64(c);
    return !c->err;
}

/* ================================================================ metadata structures */
typedef struct pq_schema_el {
    int32_t type, rep, num_children, converted; /* -1: absent */
    int logical;                                /* LogicalType union field id, 0: absent */
    const unsigned char *name;                  /* into the footer buffer */
    uint32_t name_len;
} pq_schema_el;

typedef struct pq_chunk {
    int codec;
    uint64_t start, end; /* file byte range of the chunk's pages */
} pq_chunk;

typedef struct pq_rg {
    uint64_t num_rows;
    pq_chunk ch[PQ_MAX_COLS];
} pq_rg;

typedef struct pq_page_hdr {
    int32_t type, usize, csize;
    int has_crc;
    uint32_t crc;
    int has_v1, has_dict, has_v2;
    int32_t num_values, encoding, def_enc, num_nulls, num_rows, def_len, rep_len;
    int is_compressed;
} pq_page_hdr;

/* ================================================================ RLE / bit-packed hybrid */
typedef struct rle {
    const unsigned char *p, *end;
    int bw;                  /* bit width 0..32 */
    uint64_t run;            /* values left in the current run */
    int packed;              /* the current run is bit-packed */
    int cut;                 /* the last bit-packed run was cut by the end of the data */
    uint32_t val;            /* value of an RLE run */
    const unsigned char *bp; /* bit-packed values */
    uint64_t bp_i;           /* index of the next one */
} rle;

static void rle_init(rle *r, const unsigned char *p, size_t n, int bw) {
    memset(r, 0, sizeof *r);
    r->p = p;
    r->end = p + n;
    r->bw = bw;
}

/* The next value: 1, or 0 with *why set. */
static int rle_next(rle *r, uint32_t *v, const char **why) {
    while (r->run == 0) {
        if (r->p >= r->end) {
            *why = r->cut ? "a bit-packed run extends past the end of its data"
                          : "the run-length/bit-packed data ends before all its values";
            return 0;
        }
        uint64_t h = 0;
        for (int i = 0;; i++) {
            if (r->p >= r->end) {
                *why = "a run header extends past the end of its data";
                return 0;
            }
            unsigned b = *r->p++;
            if (i == 4 && (b & 0x80 || (b & 0x7f) > 0x0f)) { /* a 5th byte may hold 4 more bits, and end */
                *why = "a run header varint overflows 32 bits";
                return 0;
            }
            h |= (uint64_t)(b & 0x7f) << (7 * i);
            if (!(b & 0x80)) break;
        }
        if (h & 1) { /* bit-packed: (h >> 1) groups of 8 values, bw bytes per group */
            uint64_t groups = h >> 1, bytes = groups * (uint64_t)r->bw, n = groups * 8;
            size_t avail = (size_t)(r->end - r->p);
            if (bytes > avail) { /* keep the values that are there; needing more is a defect */
                bytes = avail;
                r->cut = 1;
                n = r->bw ? bytes * 8 / (uint64_t)r->bw : n;
            }
            r->bp = r->p;
            r->bp_i = 0;
            r->run = n;
            r->packed = 1;
            r->p += bytes;
        } else { /* RLE: (h >> 1) repeats of one value in ceil(bw / 8) bytes */
            size_t nb = ((size_t)r->bw + 7) / 8;
            if ((size_t)(r->end - r->p) < nb) {
                *why = "an RLE run's value extends past the end of its data";
                return 0;
            }
            uint32_t x = 0;
            for (size_t k = 0; k < nb; k++) x |= (uint32_t)r->p[k] << (8 * k);
            r->p += nb;
            r->val = x;
            r->run = h >> 1;
            r->packed = 0;
        }
    }
    r->run--;
    if (!r->packed) {
        *v = r->val;
        return 1;
    }
    uint64_t bit = r->bp_i++ * (uint64_t)r->bw;
    const unsigned char *q = r->bp + (bit >> 3);
    unsigned sh = (unsigned)(bit & 7), nbytes = (sh + (unsigned)r->bw + 7) / 8;
    uint64_t w = 0;
    for (unsigned k = 0; k < nbytes; k++) w |= (uint64_t)q[k] << (8 * k);
    *v = r->bw ? (uint32_t)((w >> sh) & ((r->bw == 32) ? 0xffffffffu : ((1u << r->bw) - 1))) : 0;
    return 1;
}

/* ================================================================ reader state */
typedef struct pq_col {
    const char *name; /* from the options or a literal: outlives the reader */
    int leaf;         /* index among the schema's leaves (= column chunk index) */
    int max_def;      /* 0 REQUIRED, 1 OPTIONAL */
    /* the current chunk */
    uint64_t pos, end; /* pages left */
    int codec;
    uint64_t rows_left; /* values still to hand out from the chunk */
    int seen_data;      /* a data page was read (a dictionary page must come first) */
    /* its dictionary */
    unsigned char *dict;
    size_t dict_cap;
    uint32_t *dict_off, *dict_len;
    size_t dict_n, dict_alloc;
    int has_dict;
    /* the current data page */
    unsigned char *raw, *buf; /* compressed bytes, decompressed bytes */
    size_t raw_cap, buf_cap;
    uint64_t page_at;    /* file offset of its header (messages) */
    uint64_t page_left;  /* values left in it */
    uint64_t page_total; /* values in it */
    rle def;             /* definition levels (max_def 1) */
    int dict_enc;        /* values are dictionary indices */
    rle idx;
    int delta_enc; /* values are the page's DELTA-decoded strings */
    lf__pq_delta delta;
    const unsigned char *vp, *vend; /* PLAIN values */
    /* the value handed out, NUL-terminated */
    char *out;
    size_t out_cap;
} pq_col;

typedef struct pq {
    char *path;
    int fd;
    uint64_t size;
    lf_reader_opts o;
    int ncol;
    int alpaca; /* fine-tuning from Alpaca columns (instruction, output, input) */
    pq_col col[PQ_MAX_COLS];
    pq_rg *rg;
    size_t n_rg, rg_next;
    uint32_t rg_cur;
    uint64_t rg_rows_left, row, total_rows;
    unsigned char *hdr;
    size_t hdr_cap;
    uint64_t reached; /* furthest byte of a page read (progress) */
    int at_end;       /* next() reported the end */
} pq;

/* Grow *buf to hold n bytes (contents not kept). */
static lf_status grow(pq *q, unsigned char **buf, size_t *cap, size_t n) {
    if (n <= *cap && *buf) return LF_OK;
    size_t want = n < 256 ? 256 : n;
    free(*buf);
    *buf = malloc(want);
    *cap = *buf ? want : 0;
    if (!*buf) return lf_fail(LF_ERR_NOMEM, "%s: out of memory for a buffer of %zu bytes", q->path, n);
    return LF_OK;
}

/* Read n bytes at offset off (within the file, checked by the caller). */
static lf_status read_at(pq *q, void *dst, size_t n, uint64_t off) {
    unsigned char *d = dst;
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(q->fd, d + done, n - done, (off_t)(off + done));
        if (k < 0) {
            if (errno == EINTR) continue;
            return lf_fail(LF_ERR_IO, "%s: read of %zu bytes at byte offset %llu failed: %s", q->path, n,
                           (unsigned long long)off, strerror(errno));
        }
        if (k == 0)
            return lf_fail(LF_ERR_FORMAT,
                           "%s: the file ends at byte offset %llu, before the %zu bytes at %llu "
                           "(it changed while being read?)",
                           q->path, (unsigned long long)(off + done), n, (unsigned long long)off);
        done += (size_t)k;
    }
    return LF_OK;
}

/* A fatal defect of the current page of column c. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static lf_status
page_fail(const pq *q, const pq_col *c, lf_status st, const char *fmt, ...) {
    char what[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return lf_fail(st, "%s: row group %u, column '%s', page at byte offset %llu: %s", q->path, q->rg_cur, c->name,
                   (unsigned long long)c->page_at, what);
}

/* ================================================================ footer */
static lf_status meta_fail(const pq *q, const tc *c, uint64_t base, const char *what) {
    return lf_fail(LF_ERR_FORMAT, "%s: file metadata (footer) is corrupt: %s: %s at byte offset %llu", q->path, what,
                   c->err, (unsigned long long)(base + c->err_at));
}

/* LogicalType (a union): the id of its one field. */
static int parse_logical(tc *c) {
    tc_enter(c);
    int last = 0, type, id, got = 0;
    while (!c->err && tc_field(c, &last, &type, &id)) {
        if (!got) got = id;
        tc_skip(c, type, 0);
    }
    c->depth--;
    return got;
}

static void parse_schema_el(tc *c, pq_schema_el *e) {
    e->type = e->rep = e->num_children = e->converted = -1;
    e->logical = 0;
    e->name = NULL;
    e->name_len = 0;
    tc_enter(c);
    int last = 0, type, id;
    while (!c->err && tc_field(c, &last, &type, &id)) {
        switch (id) {
        case 1: tc_field_i32(c, type, &e->type); break;
        case 3: tc_field_i32(c, type, &e->rep); break;
        case 4:
            if (tc_want(c, type, TC_BINARY)) tc_binary(c, &e->name, &e->name_len);
            break;
        case 5: tc_field_i32(c, type, &e->num_children); break;
        case 6: tc_field_i32(c, type, &e->converted); break;
        case 10:
            if (tc_want(c, type, TC_STRUCT)) e->logical = parse_logical(c);
            break;
        default: tc_skip(c, type, 0); break;
        }
    }
    c->depth--;
    if (!c->err && !e->name) tc_fail(c, "a schema element has no name");
}

/* FileMetaData, first pass: the schema, num_rows and where the row groups
 * list starts (parsed once the columns are chosen). */
typedef struct pq_meta {
    pq_schema_el *schema;
    uint32_t n_schema;
    int64_t num_rows;
    int has_num_rows;
    const unsigned char *rg_list; /* the row_groups field's value, NULL when absent */
} pq_meta;

static void parse_file_meta(tc *c, pq_meta *m) {
    tc_enter(c);
    int last = 0, type, id;
    while (!c->err && tc_field(c, &last, &type, &id)) {
        if (id == 2 && tc_want(c, type, TC_LIST)) {
            if (m->schema) {
                tc_fail(c, "the schema appears twice");
                break;
            }
            int et;
            uint32_t n = tc_list(c, &et);
            if (c->err) break;
            if (et != TC_STRUCT) {
                tc_fail(c, "the schema is not a list of structs");
                break;
            }
            m->schema = calloc(n ? n : 1, sizeof *m->schema);
            if (!m->schema) {
                tc_fail(c, "out of memory");
                break;
            }
            m->n_schema = n;
            tc_enter(c);
            for (uint32_t i = 0; i < n && !c->err; i++) parse_schema_el(c, &m->schema[i]);
            c->depth--;
        } else if (id == 3) {
            if (tc_field_i64(c, type, &m->num_rows)) m->has_num_rows = 1;
        } else if (id == 4 && tc_want(c, type, TC_LIST)) {
            m->rg_list = c->p;
            tc_skip(c, TC_LIST, 0);
        } else {
            tc_skip(c, type, 0);
        }
    }
    c->depth--;
}

/* One top-level field of the schema. */
typedef struct pq_top {
    const pq_schema_el *el;
    int first_leaf;
    int leaves;
} pq_top;

/* Walk the schema tree (depth first, as the column chunks are ordered):
 * top-level fields, their first leaf, and the number of leaves. */
static lf_status walk_schema(pq *q, const pq_meta *m, pq_top **tops, size_t *n_tops, int *n_leaves) {
    *tops = NULL;
    *n_tops = 0;
    *n_leaves = 0;
    if (m->n_schema == 0) return lf_fail(LF_ERR_FORMAT, "%s: file metadata has an empty schema", q->path);
    const pq_schema_el *root = &m->schema[0];
    if (root->num_children < 0 || (uint32_t)root->num_children > m->n_schema - 1)
        return lf_fail(LF_ERR_FORMAT,
                       "%s: file metadata: the schema root claims %d fields, the schema holds %u "
                       "elements",
                       q->path, (int)root->num_children, m->n_schema - 1);
    pq_top *t = calloc(root->num_children ? (size_t)root->num_children : 1, sizeof *t);
    if (!t) return lf_fail(LF_ERR_NOMEM, "%s: out of memory reading the schema", q->path);
    int32_t left[PQ_SCHEMA_MAX_DEPTH]; /* children left at each open level */
    int depth = 0, leaves = 0;
    size_t nt = 0;
    left[0] = root->num_children;
    uint32_t i = 1;
    for (; i < m->n_schema && depth >= 0; i++) {
        while (depth >= 0 && left[depth] == 0) depth--;
        if (depth < 0) break;
        left[depth]--;
        const pq_schema_el *e = &m->schema[i];
        if (depth == 0) {
            t[nt].el = e;
            t[nt].first_leaf = leaves;
            nt++;
        }
        if (e->num_children > 0) {
            if (depth + 1 >= PQ_SCHEMA_MAX_DEPTH) {
                free(t);
                return lf_fail(LF_ERR_UNSUPPORTED, "%s: the schema nests deeper than %d levels", q->path,
                               PQ_SCHEMA_MAX_DEPTH);
            }
            left[++depth] = e->num_children;
        } else {
            leaves++;
            t[nt - 1].leaves++;
        }
    }
    while (depth >= 0 && left[depth] == 0) depth--;
    if (depth >= 0 || i != m->n_schema) {
        free(t);
        return lf_fail(LF_ERR_FORMAT, "%s: file metadata: the schema's child counts do not match its %u elements",
                       q->path, m->n_schema);
    }
    *tops = t;
    *n_tops = nt;
    *n_leaves = leaves;
    return LF_OK;
}

static int name_is(const pq_schema_el *e, const char *name) {
    size_t n = strlen(name);
    return e->name_len == n && memcmp(e->name, name, n) == 0;
}

static const pq_top *find_top(const pq_top *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (name_is(t[i].el, name)) return &t[i];
    return NULL;
}

/* Choose the columns the options ask for and check they are flat strings. */
static lf_status select_columns(pq *q, const pq_top *tops, size_t nt) {
    const char *names[PQ_MAX_COLS];
    if (q->o.mode == LF_RECORD_PRETRAIN) {
        names[0] = q->o.text_field ? q->o.text_field : "text";
        q->ncol = 1;
    } else if (q->o.mode == LF_RECORD_DPO) {
        names[0] = q->o.prompt_field ? q->o.prompt_field : "prompt";
        names[1] = q->o.response_field ? q->o.response_field : "chosen";
        names[2] = q->o.rejected_field ? q->o.rejected_field : "rejected";
        q->ncol = 3;
    } else {
        names[0] = q->o.prompt_field;
        names[1] = q->o.response_field;
        if (!names[0]) {
            if (find_top(tops, nt, "prompt") || find_top(tops, nt, "response")) {
                names[0] = "prompt";
                names[1] = "response";
            } else if (find_top(tops, nt, "input_text") || find_top(tops, nt, "target_text")) {
                names[0] = "input_text";
                names[1] = "target_text";
            } else if (find_top(tops, nt, "instruction") && find_top(tops, nt, "output")) {
                names[0] = "instruction"; /* Alpaca: the prompt joins input (column 2) when present */
                names[1] = "output";
                q->alpaca = 1;
            }
        }
        q->ncol = 2;
        if (q->alpaca && find_top(tops, nt, "input")) {
            names[2] = "input";
            q->ncol = 3;
        }
    }
    char list[400];
    size_t ll = 0;
    list[0] = 0;
    for (size_t i = 0; i < nt && ll + 4 < sizeof list; i++) {
        int k = snprintf(list + ll, sizeof list - ll, "%s%.*s", i ? ", " : "", (int)tops[i].el->name_len,
                         (const char *)tops[i].el->name);
        if (k < 0) break;
        ll += (size_t)k;
        if (ll >= sizeof list) {
            ll = sizeof list - 1;
            memcpy(list + sizeof list - 4, "...", 4);
        }
    }
    if (q->o.mode == LF_RECORD_SFT && !names[0])
        return lf_fail(LF_ERR_FORMAT,
                       "%s: no fine-tuning columns: expected 'prompt' and 'response', 'input_text' and "
                       "'target_text', or Alpaca's 'instruction', 'input' and 'output' (or name them with "
                       "--prompt-field/--response-field); the columns are: %s",
                       q->path, list);
    for (int k = 0; k < q->ncol; k++) {
        pq_col *c = &q->col[k];
        c->name = names[k];
        const pq_top *t = find_top(tops, nt, names[k]);
        if (!t) return lf_fail(LF_ERR_FORMAT, "%s: no column '%s'; the columns are: %s", q->path, names[k], list);
        const pq_schema_el *e = t->el;
        if (e->num_children > 0)
            return lf_fail(LF_ERR_UNSUPPORTED,
                           "%s: column '%s' is a nested column (a group of %d field%s: a list, map "
                           "or struct); only flat string columns can be read",
                           q->path, c->name, (int)e->num_children, e->num_children == 1 ? "" : "s");
        if (e->rep == REP_REPEATED)
            return lf_fail(LF_ERR_UNSUPPORTED,
                           "%s: column '%s' is a repeated (nested) column; only flat string "
                           "columns can be read",
                           q->path, c->name);
        if (e->type != PT_BYTE_ARRAY)
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: column '%s' has type %s, not a string (BYTE_ARRAY)", q->path,
                           c->name, e->type < 0 ? "none" : type_name(e->type));
        if (e->converted >= 0 && e->converted != CT_UTF8 && e->converted != CT_ENUM && e->converted != CT_JSON)
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: column '%s' holds %s values, not strings", q->path, c->name,
                           converted_name(e->converted));
        if (e->logical && e->logical != LT_STRING && e->logical != LT_ENUM && e->logical != LT_JSON)
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: column '%s' holds %s values, not strings", q->path, c->name,
                           logical_name(e->logical));
        c->leaf = t->first_leaf;
        c->max_def = e->rep == REP_OPTIONAL ? 1 : 0;
    }
    return LF_OK;
}

/* ColumnMetaData of a selected column. */
typedef struct pq_colmeta {
    int32_t type, codec;
    int64_t num_values, total_compressed, data_off, dict_off;
    int has_dict_off, has_meta, has_path, path_n;
    const unsigned char *path0;
    uint32_t path0_len;
} pq_colmeta;

static void parse_colmeta(tc *c, pq_colmeta *m) {
    tc_enter(c);
    int last = 0, type, id;
    m->type = m->codec = -1;
    m->num_values = m->total_compressed = m->data_off = -1;
    while (!c->err && tc_field(c, &last, &type, &id)) {
        switch (id) {
        case 1: tc_field_i32(c, type, &m->type); break;
        case 3:
            if (tc_want(c, type, TC_LIST)) {
                int et;
                uint32_t n = tc_list(c, &et);
                if (!c->err && et != TC_BINARY) tc_fail(c, "path_in_schema is not a list of strings");
                m->has_path = 1;
                m->path_n = (int)(n > 1000 ? 1000 : n);
                for (uint32_t i = 0; i < n && !c->err; i++) {
                    const unsigned char *s;
                    uint32_t len;
                    tc_binary(c, &s, &len);
                    if (i == 0) {
                        m->path0 = s;
                        m->path0_len = len;
                    }
                }
            }
            break;
        case 4: tc_field_i32(c, type, &m->codec); break;
        case 5: tc_field_i64(c, type, &m->num_values); break;
        case 7: tc_field_i64(c, type, &m->total_compressed); break;
        case 9: tc_field_i64(c, type, &m->data_off); break;
        case 11:
            if (tc_field_i64(c, type, &m->dict_off)) m->has_dict_off = 1;
            break;
        default: tc_skip(c, type, 0); break;
        }
    }
    c->depth--;
    m->has_meta = 1;
}

/* ColumnChunk: the metadata when `want`, else skipped. *ext: an external file_path. */
static void parse_chunk(tc *c, int want, pq_colmeta *m, int *ext) {
    tc_enter(c);
    int last = 0, type, id;
    while (!c->err && tc_field(c, &last, &type, &id)) {
        if (id == 1 && want) {
            *ext = 1;
            tc_skip(c, type, 0);
        } else if (id == 3 && want && tc_want(c, type, TC_STRUCT)) {
            parse_colmeta(c, m);
        } else {
            tc_skip(c, type, 0);
        }
    }
    c->depth--;
}

/* Check a selected column chunk and record its byte range. */
static lf_status check_chunk(pq *q, size_t g, int k, const pq_colmeta *m, int ext, uint64_t num_rows,
                             uint64_t data_end) {
    const pq_col *c = &q->col[k];
    if (ext)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: row group %zu, column '%s': the column chunk lives in another file "
                       "(file_path), which this reader does not follow",
                       q->path, g, c->name);
    if (!m->has_meta)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: row group %zu, column '%s': the column chunk has no plain metadata "
                       "(an encrypted column?)",
                       q->path, g, c->name);
    if (m->has_path &&
        (m->path_n != 1 || m->path0_len != strlen(c->name) || memcmp(m->path0, c->name, m->path0_len) != 0))
        return lf_fail(LF_ERR_FORMAT, "%s: row group %zu: column chunk %d's path does not name column '%s'", q->path, g,
                       c->leaf, c->name);
    if (m->type != PT_BYTE_ARRAY)
        return lf_fail(LF_ERR_FORMAT,
                       "%s: row group %zu, column '%s': the column chunk has type %s, the schema says "
                       "BYTE_ARRAY",
                       q->path, g, c->name, type_name(m->type));
    if (m->codec != CODEC_UNCOMPRESSED && m->codec != CODEC_SNAPPY && m->codec != CODEC_GZIP &&
        m->codec != CODEC_ZSTD && m->codec != CODEC_BROTLI && m->codec != CODEC_LZ4_RAW)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: row group %zu, column '%s': codec %s is not supported (supported: "
                       "UNCOMPRESSED, SNAPPY, GZIP, ZSTD, BROTLI, LZ4_RAW)",
                       q->path, g, c->name, codec_name(m->codec));
    if (m->num_values < 0 || (uint64_t)m->num_values != num_rows)
        return lf_fail(LF_ERR_FORMAT,
                       "%s: row group %zu, column '%s': the column chunk holds %lld values, the row "
                       "group %llu rows",
                       q->path, g, c->name, (long long)m->num_values, (unsigned long long)num_rows);
    int64_t start = m->data_off;
    if (m->has_dict_off && m->dict_off > 0 && m->dict_off < start) start = m->dict_off;
    if (start < 4 || m->total_compressed < 0 || (uint64_t)start > data_end ||
        (uint64_t)m->total_compressed > data_end - (uint64_t)start)
        return lf_fail(LF_ERR_FORMAT,
                       "%s: row group %zu, column '%s': the column chunk (byte offset %lld, %lld "
                       "bytes) lies outside the file's data (bytes 4 to %llu)",
                       q->path, g, c->name, (long long)start, (long long)m->total_compressed,
                       (unsigned long long)data_end);
    if (m->data_off - start > m->total_compressed)
        return lf_fail(LF_ERR_FORMAT,
                       "%s: row group %zu, column '%s': the first data page (byte offset %lld) lies "
                       "outside the column chunk",
                       q->path, g, c->name, (long long)m->data_off);
    q->rg[g].ch[k].codec = m->codec;
    q->rg[g].ch[k].start = (uint64_t)start;
    q->rg[g].ch[k].end = (uint64_t)start + (uint64_t)m->total_compressed;
    return LF_OK;
}

/* FileMetaData row_groups: the selected columns' chunks. */
static lf_status parse_row_groups(pq *q, const unsigned char *footer, size_t flen, const unsigned char *at,
                                  int n_leaves, uint64_t base, uint64_t data_end) {
    tc c;
    tc_init(&c, footer, flen);
    c.p = at;
    int et;
    uint32_t n = tc_list(&c, &et);
    if (!c.err && n && et != TC_STRUCT) tc_fail(&c, "row_groups is not a list of structs");
    if (c.err) return meta_fail(q, &c, base, "row groups");
    q->rg = calloc(n ? n : 1, sizeof *q->rg);
    if (!q->rg) return lf_fail(LF_ERR_NOMEM, "%s: out of memory for %u row groups", q->path, n);
    q->n_rg = n;
    uint64_t total = 0;
    for (uint32_t g = 0; g < n; g++) {
        pq_colmeta cm[PQ_MAX_COLS];
        int ext[PQ_MAX_COLS] = {0}, n_cols = -1;
        int64_t num_rows = -1;
        memset(cm, 0, sizeof cm);
        c.depth = 1;
        tc_enter(&c);
        int last = 0, type, id;
        while (!c.err && tc_field(&c, &last, &type, &id)) {
            if (id == 1 && tc_want(&c, type, TC_LIST)) {
                int cet;
                uint32_t nc = tc_list(&c, &cet);
                if (!c.err && nc && cet != TC_STRUCT) tc_fail(&c, "columns is not a list of structs");
                tc_enter(&c);
                for (uint32_t i = 0; i < nc && !c.err; i++) {
                    int which = -1;
                    for (int k = 0; k < q->ncol; k++)
                        if ((uint32_t)q->col[k].leaf == i) which = k;
                    if (which >= 0) {
                        parse_chunk(&c, 1, &cm[which], &ext[which]);
                        /* the pair may be one column named twice */
                        for (int k = 0; k < q->ncol; k++)
                            if (k != which && q->col[k].leaf == q->col[which].leaf) {
                                cm[k] = cm[which];
                                ext[k] = ext[which];
                            }
                    } else {
                        parse_chunk(&c, 0, NULL, NULL);
                    }
                }
                c.depth--;
                n_cols = (int)nc;
            } else if (id == 3) {
                tc_field_i64(&c, type, &num_rows);
            } else {
                tc_skip(&c, type, 0);
            }
        }
        c.depth--;
        if (c.err) {
            char what[64];
            snprintf(what, sizeof what, "row group %u", g);
            return meta_fail(q, &c, base, what);
        }
        if (num_rows < 0) return lf_fail(LF_ERR_FORMAT, "%s: file metadata: row group %u has no row count", q->path, g);
        if (n_cols != n_leaves)
            return lf_fail(LF_ERR_FORMAT,
                           "%s: file metadata: row group %u has %d column chunks, the schema %d "
                           "columns",
                           q->path, g, n_cols, n_leaves);
        q->rg[g].num_rows = (uint64_t)num_rows;
        /* a row group without rows is never read (pyarrow writes its chunk with data_page_offset 0) */
        for (int k = 0; k < q->ncol && num_rows > 0; k++) {
            lf_status st = check_chunk(q, g, k, &cm[k], ext[k], (uint64_t)num_rows, data_end);
            if (st != LF_OK) return st;
        }
        total += (uint64_t)num_rows;
    }
    q->total_rows = total;
    return LF_OK;
}

/* Read and parse the footer; choose the columns. */
static lf_status read_footer(pq *q) {
    unsigned char tail[8], head[4];
    if (q->size < 12)
        return lf_fail(LF_ERR_FORMAT,
                       "%s: not a Parquet file: %llu bytes is too small (magic, footer and footer "
                       "length take 12)",
                       q->path, (unsigned long long)q->size);
    lf_status st;
    if ((st = read_at(q, head, 4, 0)) != LF_OK || (st = read_at(q, tail, 8, q->size - 8)) != LF_OK) return st;
    if (memcmp(tail + 4, "PARE", 4) == 0)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: the file is encrypted (magic PARE), which this reader does not "
                       "support",
                       q->path);
    if (memcmp(head, PQ_MAGIC, 4) != 0)
        return lf_fail(LF_ERR_FORMAT, "%s: not a Parquet file: no magic PAR1 at the start (bytes 0-3)", q->path);
    if (memcmp(tail + 4, PQ_MAGIC, 4) != 0)
        return lf_fail(LF_ERR_FORMAT,
                       "%s: not a Parquet file or truncated: no magic PAR1 at the end (byte offset "
                       "%llu)",
                       q->path, (unsigned long long)(q->size - 4));
    uint32_t flen = lf__ld_u32le(tail);
    if (flen == 0 || (uint64_t)flen > q->size - 12)
        return lf_fail(LF_ERR_FORMAT,
                       "%s: footer length %u (at byte offset %llu) does not fit in the file of %llu "
                       "bytes",
                       q->path, flen, (unsigned long long)(q->size - 8), (unsigned long long)q->size);
    if (flen > PQ_MAX_FOOTER_BYTES)
        return lf_fail(LF_ERR_RANGE, "%s: footer of %u bytes is over the reader's limit of %zu bytes", q->path, flen,
                       PQ_MAX_FOOTER_BYTES);
    uint64_t base = q->size - 8 - flen;
    unsigned char *footer = malloc(flen);
    if (!footer) return lf_fail(LF_ERR_NOMEM, "%s: out of memory for a footer of %u bytes", q->path, flen);
    pq_meta m;
    memset(&m, 0, sizeof m);
    pq_top *tops = NULL;
    if ((st = read_at(q, footer, flen, base)) != LF_OK) goto done;
    tc c;
    tc_init(&c, footer, flen);
    parse_file_meta(&c, &m);
    if (c.err) {
        st = meta_fail(q, &c, base, "FileMetaData");
        goto done;
    }
    if (!m.schema || !m.has_num_rows) {
        st = lf_fail(LF_ERR_FORMAT, "%s: file metadata (footer at byte offset %llu) lacks the %s", q->path,
                     (unsigned long long)base, !m.schema ? "schema" : "row count");
        goto done;
    }
    size_t nt;
    int n_leaves;
    if ((st = walk_schema(q, &m, &tops, &nt, &n_leaves)) != LF_OK) goto done;
    if ((st = select_columns(q, tops, nt)) != LF_OK) goto done;
    if (m.rg_list) {
        if ((st = parse_row_groups(q, footer, flen, m.rg_list, n_leaves, base, base)) != LF_OK) goto done;
    }
    if (m.num_rows < 0 || (uint64_t)m.num_rows != q->total_rows)
        st = lf_fail(LF_ERR_FORMAT, "%s: file metadata says %lld rows, its row groups hold %llu", q->path,
                     (long long)m.num_rows, (unsigned long long)q->total_rows);
done:
    free(tops);
    free(m.schema);
    free(footer);
    return st;
}

/* ================================================================ pages */
static lf_status decompress(const pq *q, const pq_col *c, const unsigned char *src, size_t n, unsigned char *dst,
                            size_t dn) {
    switch (c->codec) {
    case CODEC_SNAPPY: {
        size_t ul;
        if (snappy_uncompressed_length((const char *)src, n, &ul) != SNAPPY_OK)
            return page_fail(q, c, LF_ERR_FORMAT, "Snappy data is corrupt (bad length header)");
        if (ul != dn)
            return page_fail(q, c, LF_ERR_FORMAT, "Snappy data holds %zu bytes, the page header says %zu", ul, dn);
        if (snappy_uncompress((const char *)src, n, (char *)dst, &ul) != SNAPPY_OK || ul != dn)
            return page_fail(q, c, LF_ERR_FORMAT, "Snappy data is corrupt");
        return LF_OK;
    }
    case CODEC_GZIP: {
        /* deflate expands at most ~1032:1; a larger claim is a defect, found before inflating */
        if (dn / 1032 > n + 64)
            return page_fail(q, c, LF_ERR_FORMAT,
                             "the page header says %zu bytes, more than %zu bytes of GZIP "
                             "data can hold",
                             dn, n);
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, 15 + 32) != Z_OK) /* gzip or zlib header */
            return lf_fail(LF_ERR_NOMEM, "%s: cannot start zlib", q->path);
        zs.next_in = (Bytef *)src;
        zs.avail_in = (uInt)n;
        zs.next_out = dst;
        zs.avail_out = (uInt)dn;
        int zr = Z_OK;
        for (;;) {
            zr = inflate(&zs, Z_FINISH);
            if (zr == Z_STREAM_END && zs.avail_in > 0 && zs.avail_out > 0) {
                /* another gzip member follows */
                if (inflateReset(&zs) != Z_OK) break;
                continue;
            }
            break;
        }
        size_t got = (size_t)zs.total_out;
        const char *msg = zs.msg;
        inflateEnd(&zs);
        if (zr == Z_STREAM_END && got == dn) return LF_OK;
        if (zr == Z_STREAM_END || zr == Z_BUF_ERROR)
            return page_fail(q, c, LF_ERR_FORMAT, "GZIP data %s, the page header says %zu bytes",
                             zr == Z_STREAM_END ? "ends early" : "holds more bytes or is truncated", dn);
        return page_fail(q, c, LF_ERR_FORMAT, "GZIP data is corrupt (%s)", msg ? msg : "inflate failed");
    }
    case CODEC_ZSTD: {
        /* a single frame that states its size must state the header's (checked before inflating) */
        unsigned long long fs = ZSTD_getFrameContentSize(src, n);
        if (fs == ZSTD_CONTENTSIZE_ERROR)
            return page_fail(q, c, LF_ERR_FORMAT, "ZSTD data is corrupt (bad frame header)");
        size_t fl = ZSTD_findFrameCompressedSize(src, n);
        if (!ZSTD_isError(fl) && fl == n && fs != ZSTD_CONTENTSIZE_UNKNOWN && fs != (unsigned long long)dn)
            return page_fail(q, c, LF_ERR_FORMAT, "ZSTD data holds %llu bytes, the page header says %zu", fs, dn);
        size_t r = ZSTD_decompress(dst, dn, src, n);
        if (ZSTD_isError(r)) return page_fail(q, c, LF_ERR_FORMAT, "ZSTD data is corrupt (%s)", ZSTD_getErrorName(r));
        if (r != dn)
            return page_fail(q, c, LF_ERR_FORMAT, "ZSTD data holds %zu bytes, the page header says %zu", r, dn);
        return LF_OK;
    }
    case CODEC_BROTLI: {
        size_t got = dn;
        if (BrotliDecoderDecompress(n, src, &got, dst) != BROTLI_DECODER_RESULT_SUCCESS)
            return page_fail(q, c, LF_ERR_FORMAT,
                             "BROTLI data is corrupt or holds more than the page header's %zu bytes", dn);
        if (got != dn)
            return page_fail(q, c, LF_ERR_FORMAT, "BROTLI data holds %zu bytes, the page header says %zu", got, dn);
        return LF_OK;
    }
    case CODEC_LZ4_RAW: {
        if (n > (size_t)LZ4_MAX_INPUT_SIZE || dn > (size_t)LZ4_MAX_INPUT_SIZE)
            return page_fail(q, c, LF_ERR_RANGE, "an LZ4_RAW page over LZ4's limit of %d bytes", LZ4_MAX_INPUT_SIZE);
        int r = LZ4_decompress_safe((const char *)src, (char *)dst, (int)n, (int)dn);
        if (r < 0) return page_fail(q, c, LF_ERR_FORMAT, "LZ4_RAW data is corrupt (or holds more than %zu bytes)", dn);
        if ((size_t)r != dn)
            return page_fail(q, c, LF_ERR_FORMAT, "LZ4_RAW data holds %d bytes, the page header says %zu", r, dn);
        return LF_OK;
    }
    default: return page_fail(q, c, LF_ERR_INTERNAL, "codec %s reached the decoder", codec_name(c->codec));
    }
}

static void parse_page_header(tc *c, pq_page_hdr *h) {
    memset(h, 0, sizeof *h);
    h->type = h->usize = h->csize = -1;
    h->num_values = h->encoding = h->def_enc = h->def_len = h->rep_len = -1;
    h->is_compressed = 1;
    tc_enter(c);
    int last = 0, type, id;
    while (!c->err && tc_field(c, &last, &type, &id)) {
        switch (id) {
        case 1: tc_field_i32(c, type, &h->type); break;
        case 2: tc_field_i32(c, type, &h->usize); break;
        case 3: tc_field_i32(c, type, &h->csize); break;
        case 4: {
            int32_t v;
            if (tc_field_i32(c, type, &v)) {
                h->has_crc = 1;
                h->crc = (uint32_t)v;
            }
            break;
        }
        case 5:
        case 7:
        case 8:
            if (tc_want(c, type, TC_STRUCT)) {
                if (id == 5) h->has_v1 = 1;
                if (id == 7) h->has_dict = 1;
                if (id == 8) h->has_v2 = 1;
                tc_enter(c);
                int l2 = 0, t2, i2;
                while (!c->err && tc_field(c, &l2, &t2, &i2)) {
                    if (i2 == 1) tc_field_i32(c, t2, &h->num_values);
                    else if (id == 5 && i2 == 2) tc_field_i32(c, t2, &h->encoding);
                    else if (id == 5 && i2 == 3) tc_field_i32(c, t2, &h->def_enc);
                    else if (id == 7 && i2 == 2) tc_field_i32(c, t2, &h->encoding);
                    else if (id == 8 && i2 == 2) tc_field_i32(c, t2, &h->num_nulls);
                    else if (id == 8 && i2 == 3) tc_field_i32(c, t2, &h->num_rows);
                    else if (id == 8 && i2 == 4) tc_field_i32(c, t2, &h->encoding);
                    else if (id == 8 && i2 == 5) tc_field_i32(c, t2, &h->def_len);
                    else if (id == 8 && i2 == 6) tc_field_i32(c, t2, &h->rep_len);
                    else if (id == 8 && i2 == 7 && tc_want(c, t2, TC_TRUE)) h->is_compressed = t2 == TC_TRUE;
                    else tc_skip(c, t2, 0);
                }
                c->depth--;
            }
            break;
        default: tc_skip(c, type, 0); break;
        }
    }
    c->depth--;
}

/* Read the page header at c->pos: *h and its length. */
static lf_status read_page_header(pq *q, pq_col *c, pq_page_hdr *h, size_t *hlen) {
    uint64_t avail = c->end - c->pos;
    size_t want = avail < PQ_HEADER_READ ? (size_t)avail : PQ_HEADER_READ;
    for (;;) {
        lf_status st = grow(q, &q->hdr, &q->hdr_cap, want);
        if (st != LF_OK) return st;
        if ((st = read_at(q, q->hdr, want, c->pos)) != LF_OK) return st;
        tc t;
        tc_init(&t, q->hdr, want);
        parse_page_header(&t, h);
        if (!t.err) {
            *hlen = (size_t)(t.p - t.start);
            return LF_OK;
        }
        if (t.err_short && want < avail && want < PQ_MAX_HEADER_BYTES) {
            uint64_t w = (uint64_t)want * 8;
            if (w > avail) w = avail;
            if (w > PQ_MAX_HEADER_BYTES) w = PQ_MAX_HEADER_BYTES;
            want = (size_t)w;
            continue;
        }
        if (t.err_short && want == avail)
            return page_fail(q, c, LF_ERR_FORMAT,
                             "the page header runs past the end of the column chunk (%s at "
                             "byte %zu of the header)",
                             t.err, t.err_at);
        if (t.err_short)
            return page_fail(q, c, LF_ERR_RANGE, "the page header is larger than the reader's limit of %zu bytes",
                             PQ_MAX_HEADER_BYTES);
        return page_fail(q, c, LF_ERR_FORMAT, "the page header is corrupt: %s at byte offset %llu", t.err,
                         (unsigned long long)(c->pos + t.err_at));
    }
}

/* Decoded bytes of the page whose raw bytes are c->raw[from, from + n),
 * usize bytes once decompressed: *out points at them. */
static lf_status page_bytes(pq *q, pq_col *c, size_t from, size_t n, size_t usize, int compressed, unsigned char **buf,
                            size_t *cap, const unsigned char **out) {
    if (c->codec == CODEC_UNCOMPRESSED || !compressed) {
        if (n != usize)
            return page_fail(q, c, LF_ERR_FORMAT, "uncompressed page holds %zu bytes, its header says %zu", n, usize);
        *out = c->raw + from;
        return LF_OK;
    }
    lf_status st = grow(q, buf, cap, usize);
    if (st != LF_OK) return st;
    if ((st = decompress(q, c, c->raw + from, n, *buf, usize)) != LF_OK) return st;
    *out = *buf;
    return LF_OK;
}

static lf_status load_dictionary(pq *q, pq_col *c, const pq_page_hdr *h) {
    if (c->has_dict) return page_fail(q, c, LF_ERR_FORMAT, "a second dictionary page in the column chunk");
    if (c->seen_data) return page_fail(q, c, LF_ERR_FORMAT, "a dictionary page after data pages");
    if (!h->has_dict || h->num_values < 0)
        return page_fail(q, c, LF_ERR_FORMAT, "a dictionary page without its header fields");
    if (h->encoding != ENC_PLAIN && h->encoding != ENC_PLAIN_DICTIONARY)
        return page_fail(q, c, LF_ERR_UNSUPPORTED, "dictionary page in encoding %s (supported: PLAIN)",
                         encoding_name(h->encoding));
    const unsigned char *d;
    lf_status st;
    if (c->codec == CODEC_UNCOMPRESSED) { /* keep the page: swap it into the dictionary's buffer */
        if ((size_t)h->csize != (size_t)h->usize)
            return page_fail(q, c, LF_ERR_FORMAT, "uncompressed page holds %d bytes, its header says %d", h->csize,
                             h->usize);
        unsigned char *t = c->dict;
        size_t tc_ = c->dict_cap;
        c->dict = c->raw;
        c->dict_cap = c->raw_cap;
        c->raw = t;
        c->raw_cap = tc_;
        d = c->dict;
    } else if ((st = page_bytes(q, c, 0, (size_t)h->csize, (size_t)h->usize, 1, &c->dict, &c->dict_cap, &d)) != LF_OK) {
        return st;
    }
    size_t len = (size_t)h->usize, n = (size_t)h->num_values;
    if (n > len / 4) return page_fail(q, c, LF_ERR_FORMAT, "dictionary page claims %zu values in %zu bytes", n, len);
    if (n > c->dict_alloc) {
        size_t want = n < 64 ? 64 : n;
        uint32_t *o = realloc(c->dict_off, want * sizeof *o);
        if (o) c->dict_off = o;
        uint32_t *l = o ? realloc(c->dict_len, want * sizeof *l) : NULL;
        if (l) c->dict_len = l;
        if (!o || !l) return lf_fail(LF_ERR_NOMEM, "%s: out of memory for a dictionary of %zu values", q->path, n);
        c->dict_alloc = want;
    }
    size_t p = 0;
    for (size_t i = 0; i < n; i++) {
        if (len - p < 4)
            return page_fail(q, c, LF_ERR_FORMAT, "dictionary value %zu of %zu runs past the end of the page", i, n);
        uint32_t vl = lf__ld_u32le(d + p);
        p += 4;
        if (vl > len - p)
            return page_fail(q, c, LF_ERR_FORMAT, "dictionary value %zu (%u bytes) runs past the end of the page", i,
                             vl);
        c->dict_off[i] = (uint32_t)p;
        c->dict_len[i] = vl;
        p += vl;
    }
    c->dict_n = n;
    c->has_dict = 1;
    return LF_OK;
}

/* Start decoding values from v[0, n) in encoding enc. */
static lf_status start_values(pq *q, pq_col *c, int enc, const unsigned char *v, size_t n) {
    c->delta_enc = 0;
    if (enc == ENC_DELTA_LENGTH_BYTE_ARRAY || enc == ENC_DELTA_BYTE_ARRAY) {
        const char *why = lf__pq_delta_decode(&c->delta, enc, v, n, (size_t)c->page_total, PQ_MAX_PAGE_BYTES);
        if (why) return page_fail(q, c, LF_ERR_FORMAT, "%s: %s", encoding_name(enc), why);
        c->dict_enc = 0;
        c->delta_enc = 1;
        return LF_OK;
    }
    if (enc == ENC_PLAIN) {
        c->dict_enc = 0;
        c->vp = v;
        c->vend = v + n;
        return LF_OK;
    }
    if (enc == ENC_PLAIN_DICTIONARY || enc == ENC_RLE_DICTIONARY) {
        if (!c->has_dict)
            return page_fail(q, c, LF_ERR_FORMAT, "a dictionary-encoded data page without a dictionary page");
        if (n < 1) return page_fail(q, c, LF_ERR_FORMAT, "dictionary-encoded values without their bit width");
        if (v[0] > 32) return page_fail(q, c, LF_ERR_FORMAT, "dictionary index bit width %u is over 32", v[0]);
        c->dict_enc = 1;
        rle_init(&c->idx, v + 1, n - 1, v[0]);
        return LF_OK;
    }
    return page_fail(q, c, LF_ERR_UNSUPPORTED,
                     "values in encoding %s, which this reader does not support (supported: "
                     "PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY)",
                     encoding_name(enc));
}

/* Load the next data page holding values (skipping index pages, reading
 * the dictionary page). */
static lf_status load_page(pq *q, pq_col *c) {
    for (;;) {
        if (c->pos >= c->end)
            return lf_fail(LF_ERR_FORMAT,
                           "%s: row group %u, column '%s': the column chunk ends with %llu of its "
                           "values missing",
                           q->path, q->rg_cur, c->name, (unsigned long long)c->rows_left);
        c->page_at = c->pos;
        pq_page_hdr h;
        size_t hlen = 0;
        lf_status st = read_page_header(q, c, &h, &hlen);
        if (st != LF_OK) return st;
        if (h.type < 0 || h.usize < 0 || h.csize < 0)
            return page_fail(q, c, LF_ERR_FORMAT, "the page header lacks its type or sizes (or they are negative)");
        uint64_t data_at = c->pos + hlen;
        if ((uint64_t)h.csize > c->end - data_at)
            return page_fail(q, c, LF_ERR_FORMAT,
                             "the page's %d bytes run past the end of the column chunk (byte "
                             "offset %llu)",
                             h.csize, (unsigned long long)c->end);
        if ((size_t)h.csize > PQ_MAX_PAGE_BYTES || (size_t)h.usize > PQ_MAX_PAGE_BYTES)
            return page_fail(q, c, LF_ERR_RANGE,
                             "a page of %d bytes (%d compressed) is over the reader's limit of "
                             "%zu bytes",
                             h.usize, h.csize, PQ_MAX_PAGE_BYTES);
        c->pos = data_at + (uint64_t)h.csize;
        if (c->pos > q->reached) q->reached = c->pos;
        if (h.type != PAGE_DATA && h.type != PAGE_DATA_V2 && h.type != PAGE_DICTIONARY) continue; /* index pages */
        if ((st = grow(q, &c->raw, &c->raw_cap, (size_t)h.csize)) != LF_OK) return st;
        if ((st = read_at(q, c->raw, (size_t)h.csize, data_at)) != LF_OK) return st;
        if (h.has_crc) {
            uint32_t crc = lf_crc32(0, c->raw, (size_t)h.csize);
            if (crc != h.crc)
                return page_fail(q, c, LF_ERR_CHECKSUM, "page checksum mismatch (CRC-32 %08x, the header says %08x)",
                                 crc, h.crc);
        }
        if (h.type == PAGE_DICTIONARY) {
            if ((st = load_dictionary(q, c, &h)) != LF_OK) return st;
            continue;
        }
        c->seen_data = 1;
        if (h.num_values < 0 || (h.type == PAGE_DATA && !h.has_v1) || (h.type == PAGE_DATA_V2 && !h.has_v2))
            return page_fail(q, c, LF_ERR_FORMAT, "a data page without its header fields");
        if ((uint64_t)h.num_values > c->rows_left)
            return page_fail(q, c, LF_ERR_FORMAT, "the page holds %d values, the column chunk has %llu left",
                             h.num_values, (unsigned long long)c->rows_left);
        if (h.num_values == 0) continue;
        c->page_total = (uint64_t)h.num_values; /* bounds the values a DELTA page may decode */
        const unsigned char *pg;
        if (h.type == PAGE_DATA) {
            if ((st = page_bytes(q, c, 0, (size_t)h.csize, (size_t)h.usize, 1, &c->buf, &c->buf_cap, &pg)) != LF_OK)
                return st;
            size_t len = (size_t)h.usize, off = 0;
            if (c->max_def) {
                if (h.def_enc != ENC_RLE)
                    return page_fail(q, c, LF_ERR_UNSUPPORTED, "definition levels in encoding %s (supported: RLE)",
                                     encoding_name(h.def_enc));
                if (len < 4) return page_fail(q, c, LF_ERR_FORMAT, "the page ends before its definition levels");
                uint32_t dl = lf__ld_u32le(pg);
                if (dl > len - 4)
                    return page_fail(q, c, LF_ERR_FORMAT,
                                     "definition levels of %u bytes run past the end of the "
                                     "page (%zu bytes)",
                                     dl, len);
                rle_init(&c->def, pg + 4, dl, 1);
                off = 4 + (size_t)dl;
            }
            if ((st = start_values(q, c, h.encoding, pg + off, len - off)) != LF_OK) return st;
        } else {
            if (h.def_len < 0 || h.rep_len < 0 || (int64_t)h.def_len + h.rep_len > h.csize ||
                (int64_t)h.def_len + h.rep_len > h.usize)
                return page_fail(q, c, LF_ERR_FORMAT, "level lengths (%d + %d bytes) do not fit in the page (%d bytes)",
                                 h.def_len, h.rep_len, h.csize);
            size_t lev = (size_t)h.rep_len + (size_t)h.def_len;
            if (c->max_def) rle_init(&c->def, c->raw + h.rep_len, (size_t)h.def_len, 1);
            if ((st = page_bytes(q, c, lev, (size_t)h.csize - lev, (size_t)h.usize - lev, h.is_compressed, &c->buf,
                                 &c->buf_cap, &pg)) != LF_OK)
                return st;
            if ((st = start_values(q, c, h.encoding, pg, (size_t)h.usize - lev)) != LF_OK) return st;
        }
        c->page_left = c->page_total = (uint64_t)h.num_values;
        return LF_OK;
    }
}

/* The next value of column c: *is_null, or the bytes s[0, n). */
static lf_status col_value(pq *q, pq_col *c, int *is_null, const unsigned char **s, size_t *n) {
    *is_null = 0;
    *s = NULL;
    *n = 0;
    if (c->page_left == 0) {
        lf_status st = load_page(q, c);
        if (st != LF_OK) return st;
    }
    c->page_left--;
    c->rows_left--;
    const char *why = "";
    if (c->max_def) {
        uint32_t d;
        if (!rle_next(&c->def, &d, &why)) return page_fail(q, c, LF_ERR_FORMAT, "definition levels: %s", why);
        if (d > 1) return page_fail(q, c, LF_ERR_FORMAT, "definition level %u is over the column's maximum 1", d);
        if (d == 0) {
            *is_null = 1;
            return LF_OK;
        }
    }
    if (c->dict_enc) {
        uint32_t k;
        if (!rle_next(&c->idx, &k, &why)) return page_fail(q, c, LF_ERR_FORMAT, "dictionary indices: %s", why);
        if (k >= c->dict_n)
            return page_fail(q, c, LF_ERR_FORMAT,
                             "dictionary index %u is out of range (the dictionary holds %zu "
                             "values)",
                             k, c->dict_n);
        *s = c->dict + c->dict_off[k];
        *n = c->dict_len[k];
        return LF_OK;
    }
    if (c->delta_enc) {
        if (c->delta.next >= c->delta.n)
            return page_fail(q, c, LF_ERR_FORMAT, "the DELTA values end before value %llu of the page",
                             (unsigned long long)(c->page_total - c->page_left));
        *s = c->delta.buf + c->delta.off[c->delta.next];
        *n = c->delta.len[c->delta.next++];
        return LF_OK;
    }
    size_t left = (size_t)(c->vend - c->vp);
    if (left < 4)
        return page_fail(q, c, LF_ERR_FORMAT, "the PLAIN values end before value %llu of the page",
                         (unsigned long long)(c->page_total - c->page_left));
    uint32_t len = lf__ld_u32le(c->vp);
    if (len > left - 4)
        return page_fail(q, c, LF_ERR_FORMAT, "a PLAIN value of %u bytes runs past the end of the page", len);
    *s = c->vp + 4;
    *n = len;
    c->vp += 4 + (size_t)len;
    return LF_OK;
}

/* ================================================================ records */
/* Why the value cannot be the record's text (NULL when it can); *at is the
 * byte offset of a defect. */
static const char *value_defect(const unsigned char *s, size_t n, size_t *at, const char **why) {
    for (size_t i = 0; i < n;) {
        if (s[i] == 0) {
            *at = i;
            return "nul";
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int k = lf__utf8_decode(s + i, n - i, &cp, why);
        if (k == 0) {
            *at = i;
            return "utf8";
        }
        i += (size_t)k;
    }
    return NULL;
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static lf_status
bad_row(pq *q, uint64_t row, uint64_t *skipped, int *skip_now, const char *fmt, ...) {
    char what[640], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "%s:%llu: row %llu (row group %u): %s", q->path, (unsigned long long)row,
             (unsigned long long)row, q->rg_cur, what);
    return lf__reader_bad(&q->o, skipped, skip_now, LF_ERR_FORMAT, msg);
}

static lf_status start_row_group(pq *q, size_t g) {
    q->rg_cur = (uint32_t)g;
    q->rg_rows_left = q->rg[g].num_rows;
    for (int k = 0; k < q->ncol; k++) {
        pq_col *c = &q->col[k];
        c->pos = q->rg[g].ch[k].start;
        c->end = q->rg[g].ch[k].end;
        c->codec = q->rg[g].ch[k].codec;
        c->rows_left = q->rg[g].num_rows;
        c->seen_data = 0;
        c->has_dict = 0;
        c->dict_n = 0;
        c->page_left = 0;
        c->page_at = c->pos;
    }
    return LF_OK;
}

static lf_status src_next(void *state, lf_record *rec, int *eof, uint64_t *skipped) {
    pq *q = state;
    *eof = 0;
    for (;;) {
        while (q->rg_rows_left == 0) {
            if (q->rg_next >= q->n_rg) {
                if (q->total_rows == 0)
                    return lf_fail(LF_ERR_FORMAT, "%s: the file holds no rows (%zu row groups)", q->path, q->n_rg);
                *eof = 1;
                q->at_end = 1;
                return LF_OK;
            }
            lf_status st = start_row_group(q, q->rg_next++);
            if (st != LF_OK) return st;
        }
        q->rg_rows_left--;
        uint64_t row = ++q->row; /* 1-based */
        int is_null[PQ_MAX_COLS];
        const unsigned char *s[PQ_MAX_COLS];
        size_t n[PQ_MAX_COLS];
        for (int k = 0; k < q->ncol; k++) {
            /* a pair naming one column twice reads it once */
            int same = -1;
            for (int j = 0; j < k; j++)
                if (q->col[k].leaf == q->col[j].leaf) same = j;
            if (same >= 0) {
                is_null[k] = is_null[same];
                s[k] = s[same];
                n[k] = n[same];
                continue;
            }
            lf_status st = col_value(q, &q->col[k], &is_null[k], &s[k], &n[k]);
            if (st != LF_OK) return st;
        }
        int skip_now = 0;
        lf_status st = LF_OK;
        for (int k = 0; k < q->ncol && !skip_now && st == LF_OK; k++) {
            const char *name = q->col[k].name;
            int need_text = q->o.mode != LF_RECORD_SFT || k == 1; /* dpo: prompt, chosen, rejected */
            size_t at = 0;
            const char *why = "", *d;
            if (is_null[k] && k == 2 &&
                q->o.mode == LF_RECORD_SFT) { /* Alpaca's input: null is no input, as datasets' rows read it */
                n[k] = 0;
            } else if (is_null[k]) {
                st = bad_row(q, row, skipped, &skip_now, "column '%s' is null", name);
            } else if ((d = value_defect(s[k], n[k], &at, &why)) != NULL) {
                if (d[0] == 'n')
                    st = bad_row(q, row, skipped, &skip_now,
                                 "column '%s' holds a NUL byte (U+0000) at byte offset "
                                 "%zu of the value, which text cannot hold",
                                 name, at);
                else
                    st = bad_row(q, row, skipped, &skip_now,
                                 "column '%s': invalid UTF-8 at byte offset %zu of the "
                                 "value (byte 0x%02X: %s)",
                                 name, at, (unsigned)s[k][at], why);
            } else if (n[k] == 0 && need_text) {
                st = bad_row(q, row, skipped, &skip_now, "column '%s' is empty", name);
            }
        }
        if (st != LF_OK) return st;
        if (skip_now) continue;
        memset(rec, 0, sizeof *rec);
        rec->line = row;
        rec->index = row - 1;
        for (int k = 0; k < q->ncol; k++) {
            pq_col *c = &q->col[k];
            const size_t more = k == 0 && q->ncol == 3 && n[2] ? 2 + n[2] : 0; /* "\n\n" + Alpaca's input */
            if ((st = grow(q, (unsigned char **)&c->out, &c->out_cap, n[k] + more + 1)) != LF_OK) return st;
            if (n[k]) memcpy(c->out, s[k], n[k]);
            if (more) {
                memcpy(c->out + n[k], "\n\n", 2);
                memcpy(c->out + n[k] + 2, s[2], n[2]);
            }
            c->out[n[k] + more] = 0;
        }
        if (q->ncol == 3 && n[2]) n[0] += 2 + n[2];
        if (q->o.mode == LF_RECORD_PRETRAIN) {
            rec->text = q->col[0].out;
            rec->text_len = n[0];
            rec->text_key = q->col[0].name;
        } else {
            rec->prompt = q->col[0].out;
            rec->prompt_len = n[0];
            rec->prompt_key = q->col[0].name;
            rec->response = q->col[1].out;
            rec->response_len = n[1];
            rec->response_key = q->col[1].name;
            if (q->o.mode == LF_RECORD_DPO) {
                rec->rejected = q->col[2].out;
                rec->rejected_len = n[2];
                rec->rejected_key = q->col[2].name;
            }
        }
        return LF_OK;
    }
}

/* ================================================================ open / close */
static void src_close(void *state) {
    pq *q = state;
    if (!q) return;
    for (int k = 0; k < PQ_MAX_COLS; k++) {
        pq_col *c = &q->col[k];
        free(c->dict);
        free(c->dict_off);
        free(c->dict_len);
        lf__pq_delta_free(&c->delta);
        free(c->raw);
        free(c->buf);
        free(c->out);
    }
    if (q->fd >= 0) close(q->fd);
    free(q->rg);
    free(q->hdr);
    free(q->path);
    free(q);
}

static lf_status src_open(void **state, const char *path, const lf_reader_opts *opts) {
    *state = NULL;
    lf_status st;
    pq *q = calloc(1, sizeof *q);
    if (!q) return lf_fail(LF_ERR_NOMEM, "%s: out of memory opening", path);
    q->fd = -1;
    if (!(q->path = strdup(path))) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory opening", path);
        goto fail;
    }
    if (opts) q->o = *opts;
    /* the reader checked it is a regular file; O_NONBLOCK still keeps a
     * file swapped for a FIFO meanwhile from blocking the open */
    q->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (q->fd < 0) {
        st = lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(q->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = lf_fail(LF_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    q->size = (uint64_t)sb.st_size;
    if ((st = read_footer(q)) != LF_OK) goto fail;
    *state = q;
    return LF_OK;
fail:
    src_close(q);
    return st;
}

/* Progress: the end of the furthest page read (only the selected columns'
 * pages are read, so it moves page by page and jumps over the other
 * columns' chunks and the footer), the whole file at the end. */
static uint64_t src_bytes_read(const void *state) {
    const pq *q = state;
    if (!q) return 0;
    return q->at_end ? q->size : q->reached < q->size ? q->reached : q->size;
}

const lf__record_source lf__parquet_source = {src_open, src_next, src_close, src_bytes_read};
