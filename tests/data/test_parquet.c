/* Parquet record source (src/data/reader_parquet.c) through lf_reader:
 *  - every fixture of tests/fixtures/parquet (written by pyarrow, see
 *    tools/reference/make_parquet_fixtures.py) read with and without
 *    skip_bad_records and compared with what pyarrow read, exactly;
 *  - files built here byte by byte (a small Thrift compact writer) for the
 *    defects pyarrow never writes: dictionary index out of range, RLE runs
 *    past the page, levels past the page, varint overflow, deep nesting,
 *    huge list counts, offsets outside the file, size mismatches after
 *    decompression, unknown fields of every Thrift type (skipped);
 *  - corruptions of good fixtures: truncation at every length, bad magic,
 *    bad footer lengths, every footer byte flipped, every page byte flipped
 *    in a checksummed file (never silently different data). Each must end
 *    in an error naming the file, or (for flips that change nothing the
 *    reader checks) in records; never a crash. */
#include "test_util.h"
#include <dirent.h>
#include <cjson/cJSON.h>
#include <snappy-c.h>
#include <zstd.h>
#include "llmforge/data.h"

#define FIX_DIR LF_SOURCE_DIR "/tests/fixtures/parquet"

/* ---------------------------------------------------------------- helpers */
typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n) c *= 2;
        b->p = realloc(b->p, c);
        assert_non_null(b->p);
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put8(buf *b, unsigned v) {
    unsigned char c = (unsigned char)v;
    put(b, &c, 1);
}
static void put32le(buf *b, uint32_t v) {
    for (int i = 0; i < 4; i++) put8(b, (v >> (8 * i)) & 0xff);
}
static void putvar(buf *b, uint64_t v) {
    while (v >= 0x80) {
        put8(b, (unsigned)(v & 0x7f) | 0x80);
        v >>= 7;
    }
    put8(b, (unsigned)v);
}
static void putzz(buf *b, int64_t v) { putvar(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }
static void buf_free(buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static char *read_file(const char *path, size_t *len) {
    char *d = NULL;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &d, len));
    return d;
}

typedef struct tmp {
    char *dir;
    char path[1024];
} tmp;

/* (no fsync: thousands of corrupted copies are written). Each copy is a new file: ext4 writes back
 * a file truncated and rewritten when it is closed (auto_da_alloc, the replace-by-truncate
 * heuristic), which made every copy a disk write (test_flips: ~50 s of I/O wait on a busy disk) */
static const char *tmp_write(tmp *t, const char *name, const void *d, size_t n) {
    if (!t->dir) t->dir = lf_test_tmpdir();
    assert_non_null(t->dir);
    snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
    unlink(t->path);
    FILE *f = fopen(t->path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(d, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    return t->path;
}
static void tmp_free(tmp *t) {
    if (t->dir) lf_test_rmrf(t->dir);
    free(t->dir);
    t->dir = NULL;
}

/* Read a whole file; returns the status of the first failure (open or
 * next) or LF_OK; *n_rec records, texts joined with '|' into out (may be NULL). */
static lf_status read_all(const char *path, const lf_reader_opts *o, size_t *n_rec, buf *out) {
    lf_reader *r = NULL;
    *n_rec = 0;
    lf_status st = lf_reader_open(&r, path, o);
    if (st != LF_OK) {
        assert_null(r);
        return st;
    }
    for (int guard = 0; guard < 1000000; guard++) {
        lf_record rec;
        int eof;
        st = lf_reader_next(r, &rec, &eof);
        if (st != LF_OK || eof) break;
        if (o && o->mode == LF_RECORD_SFT) {
            assert_non_null(rec.prompt);
            assert_int_equal(strlen(rec.prompt), rec.prompt_len);
            assert_int_equal(strlen(rec.response), rec.response_len);
        } else {
            assert_non_null(rec.text);
            assert_int_equal(strlen(rec.text), rec.text_len);
            if (out) {
                if (out->n) put(out, "|", 1);
                put(out, rec.text, rec.text_len);
            }
        }
        (*n_rec)++;
    }
    lf_reader_close(r);
    return st;
}

/* ---------------------------------------------------------------- fixtures */
/* Expected value of a cell: *s (malloc'd) and *bad (null or not text). */
static void cell(const cJSON *v, char **s, size_t *n, int *is_null, int *not_text) {
    *s = NULL;
    *n = 0;
    *is_null = cJSON_IsNull(v);
    *not_text = 0;
    if (*is_null) return;
    if (cJSON_IsString(v)) {
        *n = strlen(v->valuestring);
        *s = strdup(v->valuestring);
        return;
    }
    const cJSON *hex = cJSON_GetObjectItemCaseSensitive(v, "hex");
    if (hex) {
        *not_text = 1;
        return;
    }
    const cJSON *rep = cJSON_GetObjectItemCaseSensitive(v, "repeat");
    const cJSON *times = cJSON_GetObjectItemCaseSensitive(v, "times");
    assert_true(cJSON_IsString(rep) && cJSON_IsNumber(times));
    size_t ul = strlen(rep->valuestring), k = (size_t)times->valuedouble;
    *s = malloc(ul * k + 1);
    for (size_t i = 0; i < k; i++) memcpy(*s + i * ul, rep->valuestring, ul);
    (*s)[ul * k] = 0;
    *n = ul * k;
}

typedef struct skip_log {
    int n;
    char first[1024];
} skip_log;

static void on_skip(const char *msg, void *user) {
    skip_log *l = user;
    if (l->n++ == 0) snprintf(l->first, sizeof l->first, "%s", msg);
}

static lf_status status_of(const char *name) {
    static const struct {
        const char *n;
        lf_status s;
    } t[] = {{"LF_ERR_FORMAT", LF_ERR_FORMAT},
             {"LF_ERR_UNSUPPORTED", LF_ERR_UNSUPPORTED},
             {"LF_ERR_RANGE", LF_ERR_RANGE}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(t[i].n, name) == 0) return t[i].s;
    fail_msg("unknown status %s", name);
    return LF_OK;
}

static void check_fixture(const char *json_name, int use_auto) {
    char jpath[1024], ppath[1024];
    snprintf(jpath, sizeof jpath, "%s/%s", FIX_DIR, json_name);
    size_t jl;
    char *js = read_file(jpath, &jl);
    cJSON *d = cJSON_Parse(js);
    assert_non_null(d);
    const char *file = cJSON_GetObjectItemCaseSensitive(d, "file")->valuestring;
    snprintf(ppath, sizeof ppath, "%s/%s", FIX_DIR, file);
    const char *mode = cJSON_GetObjectItemCaseSensitive(d, "mode")->valuestring;
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.format = use_auto ? LF_INPUT_AUTO : LF_INPUT_PARQUET;
    o.mode = strcmp(mode, "sft") == 0 ? LF_RECORD_SFT : LF_RECORD_PRETRAIN;
    const cJSON *f;
    if ((f = cJSON_GetObjectItemCaseSensitive(d, "text_field"))) o.text_field = f->valuestring;
    if ((f = cJSON_GetObjectItemCaseSensitive(d, "prompt_field"))) o.prompt_field = f->valuestring;
    if ((f = cJSON_GetObjectItemCaseSensitive(d, "response_field"))) o.response_field = f->valuestring;
    const cJSON *cols = cJSON_GetObjectItemCaseSensitive(d, "columns");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(d, "error");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(d, "rows");
    const int ncol = cJSON_GetArraySize(cols), nrows = cJSON_GetArraySize(rows);

    if (err && !cJSON_IsNull(err)) {
        lf_status want = status_of(cJSON_GetObjectItemCaseSensitive(err, "status")->valuestring);
        size_t n;
        lf_status st = read_all(ppath, &o, &n, NULL);
        if (st != want)
            fail_msg("%s: status %s, expected %s (%s)", json_name, lf_status_str(st), lf_status_str(want),
                     lf_last_error());
        LF_ASSERT_ERR_CONTAINS(file);
        const cJSON *w;
        cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(err, "contains")) LF_ASSERT_ERR_CONTAINS(w->valuestring);
        cJSON_Delete(d);
        lf_free(js);
        return;
    }

    /* which rows are bad records, and the first */
    int n_bad = 0, first_bad = -1;
    int *bad = calloc((size_t)nrows + 1, sizeof *bad);
    for (int i = 0; i < nrows; i++) {
        const cJSON *row = cJSON_GetArrayItem(rows, i);
        for (int k = 0; k < ncol; k++) {
            char *s;
            size_t n;
            int is_null, not_text;
            cell(cJSON_GetArrayItem(row, k), &s, &n, &is_null, &not_text);
            int need_text = o.mode == LF_RECORD_PRETRAIN || k == 1;
            if (is_null || not_text || (n == 0 && need_text)) bad[i] = 1;
            free(s);
        }
        if (bad[i]) {
            n_bad++;
            if (first_bad < 0) first_bad = i;
        }
    }

    /* pass 1: skipping bad records, every good row in order and exactly */
    skip_log log;
    memset(&log, 0, sizeof log);
    o.skip_bad_records = 1;
    o.on_skip = on_skip;
    o.on_skip_user = &log;
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, ppath, &o));
    assert_int_equal(lf_reader_format(r), LF_INPUT_PARQUET);
    for (int i = 0; i <= nrows; i++) {
        if (i < nrows && bad[i]) continue;
        lf_record rec;
        int eof;
        LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
        if (i == nrows) {
            if (!eof)
                fail_msg("%s: a record after the last row (index %llu)", json_name, (unsigned long long)rec.index);
            break;
        }
        if (eof) fail_msg("%s: end of file before row %d", json_name, i);
        if (rec.index != (uint64_t)i || rec.line != (uint64_t)i + 1)
            fail_msg("%s: record index %llu line %llu, expected row %d", json_name, (unsigned long long)rec.index,
                     (unsigned long long)rec.line, i);
        const cJSON *row = cJSON_GetArrayItem(rows, i);
        for (int k = 0; k < ncol; k++) {
            char *s;
            size_t n;
            int is_null, not_text;
            cell(cJSON_GetArrayItem(row, k), &s, &n, &is_null, &not_text);
            const char *got = o.mode == LF_RECORD_PRETRAIN ? rec.text : k == 0 ? rec.prompt : rec.response;
            size_t gl = o.mode == LF_RECORD_PRETRAIN ? rec.text_len : k == 0 ? rec.prompt_len : rec.response_len;
            const char *key = o.mode == LF_RECORD_PRETRAIN ? rec.text_key : k == 0 ? rec.prompt_key : rec.response_key;
            assert_non_null(got);
            if (gl != n || memcmp(got, s, n) != 0 || got[gl] != 0)
                fail_msg("%s: row %d column %d: got '%.60s' (%zu bytes), expected '%.60s' (%zu bytes)", json_name, i, k,
                         got, gl, s, n);
            assert_string_equal(key, cJSON_GetArrayItem(cols, k)->valuestring);
            free(s);
        }
    }
    assert_int_equal(lf_reader_skipped(r), (uint64_t)n_bad);
    assert_int_equal(log.n, n_bad);
    lf_reader_close(r);
    if (n_bad) {
        char want[1200];
        snprintf(want, sizeof want, "%s:%d: row %d (row group ", ppath, first_bad + 1, first_bad + 1);
        if (!strstr(log.first, want)) fail_msg("%s: first skip '%s' lacks '%s'", json_name, log.first, want);
    }

    /* pass 2: without skipping, the first bad row is an error naming file, row and column */
    o.skip_bad_records = 0;
    o.on_skip = NULL;
    size_t got_n;
    lf_status st = read_all(ppath, &o, &got_n, NULL);
    if (n_bad) {
        assert_int_equal(st, LF_ERR_FORMAT);
        assert_int_equal(got_n, (size_t)first_bad);
        char want[1200];
        snprintf(want, sizeof want, "%s:%d: row %d", ppath, first_bad + 1, first_bad + 1);
        LF_ASSERT_ERR_CONTAINS(want);
        LF_ASSERT_ERR_CONTAINS("column '");
    } else {
        LF_ASSERT_OK(st);
        assert_int_equal(got_n, (size_t)nrows);
    }
    free(bad);
    cJSON_Delete(d);
    lf_free(js);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_fixtures(void **state) {
    (void)state;
    DIR *dir = opendir(FIX_DIR);
    assert_non_null(dir);
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".json") == 0) names[n++] = strdup(e->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    assert_true(n >= 30);
    int matrix = 0;
    for (int i = 0; i < n; i++) {
        check_fixture(names[i], i % 2);
        if (strncmp(names[i], "matrix_", 7) == 0) matrix++;
        free(names[i]);
    }
    assert_int_equal(matrix, 16); /* 4 codecs x dictionary on/off x page v1/v2 */
}

/* Fine-tuning on a pretraining-only table: no pair of columns. */
static void test_sft_without_pair(void **state) {
    (void)state;
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.mode = LF_RECORD_SFT;
    size_t n;
    assert_int_equal(read_all(FIX_DIR "/matrix_none_dict_v1.parquet", &o, &n, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("no fine-tuning columns");
    LF_ASSERT_ERR_CONTAINS("text");
    /* a pair with one column missing */
    o.prompt_field = "text";
    o.response_field = "answer";
    assert_int_equal(read_all(FIX_DIR "/matrix_none_dict_v1.parquet", &o, &n, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("no column 'answer'");
}

/* ---------------------------------------------------------------- a tiny Parquet writer */
enum {
    T_TRUE = 1,
    T_FALSE = 2,
    T_BYTE = 3,
    T_I16 = 4,
    T_I32 = 5,
    T_I64 = 6,
    T_DOUBLE = 7,
    T_BINARY = 8,
    T_LIST = 9,
    T_SET = 10,
    T_MAP = 11,
    T_STRUCT = 12
};

static void fld(buf *b, int *last, int id, int type) {
    if (id > *last && id - *last <= 15) {
        put8(b, (unsigned)((id - *last) << 4 | type));
    } else {
        put8(b, (unsigned)type);
        putzz(b, id);
    }
    *last = id;
}
static void fi32(buf *b, int *last, int id, int64_t v) {
    fld(b, last, id, T_I32);
    putzz(b, v);
}
static void fi64(buf *b, int *last, int id, int64_t v) {
    fld(b, last, id, T_I64);
    putzz(b, v);
}
static void fbin(buf *b, int *last, int id, const char *s) {
    fld(b, last, id, T_BINARY);
    putvar(b, strlen(s));
    put(b, s, strlen(s));
}
static void list_hdr(buf *b, int type, uint64_t n) {
    if (n < 15) {
        put8(b, (unsigned)(n << 4 | (uint64_t)type));
    } else {
        put8(b, (unsigned)(0xf0 | type));
        putvar(b, n);
    }
}
/* Unknown fields of every Thrift type, from id `from` (the reader must skip them). */
static void junk_fields(buf *b, int *last, int from) {
    fld(b, last, from, T_TRUE);
    fld(b, last, from + 1, T_FALSE);
    fld(b, last, from + 2, T_BYTE);
    put8(b, 0x7f);
    fld(b, last, from + 3, T_I16);
    putzz(b, -300);
    fld(b, last, from + 4, T_I32);
    putzz(b, -70000);
    fld(b, last, from + 5, T_I64);
    putzz(b, -((int64_t)1 << 50));
    fld(b, last, from + 6, T_DOUBLE);
    put(b, "\0\0\0\0\0\0\xf0\x3f", 8);
    fbin(b, last, from + 7, "junk");
    fld(b, last, from + 8, T_LIST); /* list<bool> */
    list_hdr(b, T_TRUE, 3);
    put8(b, 1);
    put8(b, 2);
    put8(b, 1);
    fld(b, last, from + 9, T_SET); /* set<i32> with 20 elements (long form count) */
    list_hdr(b, T_I32, 20);
    for (int i = 0; i < 20; i++) putzz(b, i * 1000);
    fld(b, last, from + 10, T_MAP); /* map<binary, struct> */
    putvar(b, 2);
    put8(b, T_BINARY << 4 | T_STRUCT);
    for (int i = 0; i < 2; i++) {
        putvar(b, 1);
        put8(b, 'k');
        int l2 = 0;
        fi32(b, &l2, 1, i);
        put8(b, 0);
    }
    fld(b, last, from + 11, T_MAP); /* empty map */
    putvar(b, 0);
    fld(b, last, from + 12, T_STRUCT); /* nested struct with a list of lists */
    {
        int l2 = 0;
        fld(b, &l2, 1, T_LIST);
        list_hdr(b, T_LIST, 2);
        list_hdr(b, T_I64, 1);
        putzz(b, 5);
        list_hdr(b, T_BINARY, 0);
        put8(b, 0);
    }
}

typedef struct pg_spec {
    int type; /* 0 data v1, 2 dictionary, 3 data v2 */
    int num_values;
    int encoding;         /* values */
    int usize_delta;      /* added to the uncompressed size in the header */
    int def_len, rep_len; /* v2 */
    int is_compressed;    /* v2: -1 absent */
    int junk;             /* unknown fields in the header */
    int codec;            /* 0, 1 snappy, 6 zstd: compress the data (v1/dictionary) */
    size_t big_junk;      /* an unknown binary field of this many bytes in the header */
    int def_enc;          /* v1 definition level encoding; 0: RLE (3) */
} pg_spec;

/* A page: header + data (compressed per codec). */
static void page(buf *chunk, const pg_spec *s, const void *data, size_t n) {
    buf comp = {0};
    if (s->codec == 1) {
        size_t cl = snappy_max_compressed_length(n);
        comp.p = malloc(cl);
        assert_int_equal(snappy_compress(data, n, (char *)comp.p, &cl), SNAPPY_OK);
        comp.n = cl;
    } else if (s->codec == 6) {
        size_t cl = ZSTD_compressBound(n);
        comp.p = malloc(cl);
        comp.n = ZSTD_compress(comp.p, cl, data, n, 1);
        assert_false(ZSTD_isError(comp.n));
    } else {
        put(&comp, data, n);
    }
    buf h = {0};
    int last = 0;
    fi32(&h, &last, 1, s->type);
    fi32(&h, &last, 2, (int64_t)n + s->usize_delta);
    fi32(&h, &last, 3, (int64_t)comp.n);
    int id = s->type == 0 ? 5 : s->type == 2 ? 7 : 8;
    fld(&h, &last, id, T_STRUCT);
    int l2 = 0;
    fi32(&h, &l2, 1, s->num_values);
    if (s->type == 0) {
        fi32(&h, &l2, 2, s->encoding);
        fi32(&h, &l2, 3, s->def_enc ? s->def_enc : 3);
        fi32(&h, &l2, 4, 3);
    } else if (s->type == 2) {
        fi32(&h, &l2, 2, s->encoding);
    } else {
        fi32(&h, &l2, 2, 0);
        fi32(&h, &l2, 3, s->num_values);
        fi32(&h, &l2, 4, s->encoding);
        fi32(&h, &l2, 5, s->def_len);
        fi32(&h, &l2, 6, s->rep_len);
        if (s->is_compressed >= 0) fld(&h, &l2, 7, s->is_compressed ? T_TRUE : T_FALSE);
    }
    if (s->junk) junk_fields(&h, &l2, 20);
    put8(&h, 0);
    if (s->junk) junk_fields(&h, &last, 30);
    if (s->big_junk) { /* larger than the reader's first read of a header */
        fld(&h, &last, 50, T_BINARY);
        putvar(&h, s->big_junk);
        for (size_t i = 0; i < s->big_junk; i++) put8(&h, 'J');
    }
    put8(&h, 0);
    put(chunk, h.p, h.n);
    put(chunk, comp.p, comp.n);
    buf_free(&h);
    buf_free(&comp);
}

typedef struct file_spec {
    int rep;              /* 0 REQUIRED, 1 OPTIONAL */
    int64_t num_rows;     /* row group and file */
    int64_t num_values;   /* column chunk; -1: num_rows */
    int has_dict;         /* the chunk starts with a dictionary page (dictionary_page_offset set) */
    int64_t data_off_add; /* added to data_page_offset */
    int64_t total_add;    /* added to total_compressed_size */
    int codec;
    int junk;          /* unknown fields in the metadata */
    int root_children; /* 0: 1 */
    int type;          /* 0: BYTE_ARRAY (6) */
    const unsigned char *extra;
    size_t extra_n; /* raw bytes appended inside FileMetaData before STOP */
} file_spec;

/* "PAR1" + chunk + FileMetaData + length + "PAR1". */
static void file(buf *out, const file_spec *s, const buf *chunk, size_t first_data_page) {
    out->n = 0;
    put(out, "PAR1", 4);
    size_t chunk_at = out->n;
    put(out, chunk->p, chunk->n);
    buf m = {0};
    int last = 0;
    fi32(&m, &last, 1, 1);
    fld(&m, &last, 2, T_LIST);
    list_hdr(&m, T_STRUCT, 2);
    {
        int l = 0;
        fbin(&m, &l, 4, "schema");
        fi32(&m, &l, 5, s->root_children ? s->root_children : 1);
        if (s->junk) junk_fields(&m, &l, 40);
        put8(&m, 0);
        l = 0;
        fi32(&m, &l, 1, s->type ? s->type : 6);
        fi32(&m, &l, 3, s->rep);
        fbin(&m, &l, 4, "text");
        fi32(&m, &l, 6, 0);
        fld(&m, &l, 10, T_STRUCT); /* LogicalType STRING {} */
        {
            int l2 = 0;
            fld(&m, &l2, 1, T_STRUCT);
            put8(&m, 0);
            put8(&m, 0);
        }
        put8(&m, 0);
    }
    fi64(&m, &last, 3, s->num_rows);
    fld(&m, &last, 4, T_LIST);
    list_hdr(&m, T_STRUCT, 1);
    {
        int l = 0;
        fld(&m, &l, 1, T_LIST);
        list_hdr(&m, T_STRUCT, 1);
        {
            int l2 = 0;
            fi64(&m, &l2, 2, (int64_t)chunk_at);
            fld(&m, &l2, 3, T_STRUCT);
            {
                int l3 = 0;
                fi32(&m, &l3, 1, s->type ? s->type : 6);
                fld(&m, &l3, 2, T_LIST);
                list_hdr(&m, T_I32, 2);
                putzz(&m, 0);
                putzz(&m, 3);
                fld(&m, &l3, 3, T_LIST);
                list_hdr(&m, T_BINARY, 1);
                putvar(&m, 4);
                put(&m, "text", 4);
                fi32(&m, &l3, 4, s->codec);
                fi64(&m, &l3, 5, s->num_values >= 0 ? s->num_values : s->num_rows);
                fi64(&m, &l3, 6, (int64_t)chunk->n);
                fi64(&m, &l3, 7, (int64_t)chunk->n + s->total_add);
                if (s->junk) junk_fields(&m, &l3, 60);
                fi64(&m, &l3, 9, (int64_t)(chunk_at + first_data_page) + s->data_off_add);
                if (s->has_dict) fi64(&m, &l3, 11, (int64_t)chunk_at);
                put8(&m, 0);
            }
            put8(&m, 0);
        }
        fi64(&m, &l, 2, (int64_t)chunk->n);
        fi64(&m, &l, 3, s->num_rows);
        put8(&m, 0);
    }
    if (s->junk) junk_fields(&m, &last, 100);
    if (s->extra) put(&m, s->extra, s->extra_n);
    put8(&m, 0);
    put(out, m.p, m.n);
    put32le(out, (uint32_t)m.n);
    put(out, "PAR1", 4);
    buf_free(&m);
}

/* PLAIN byte arrays */
static void plain(buf *b, const char *const *v, int n) {
    for (int i = 0; i < n; i++) {
        put32le(b, (uint32_t)strlen(v[i]));
        put(b, v[i], strlen(v[i]));
    }
}

/* Definition levels of an OPTIONAL column, v1 (length prefix): one bit-packed group. */
static void def_levels_v1(buf *b, unsigned bits) {
    put32le(b, 2);
    put8(b, 1 << 1 | 1); /* one group of 8, bit width 1 */
    put8(b, bits);
}

static tmp g_tmp; /* the built files, removed by the group teardown */

static lf_status read_built(const buf *f, const char *name, size_t *n, buf *texts, int skip) {
    const char *p = tmp_write(&g_tmp, name, f->p, f->n);
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.skip_bad_records = skip;
    lf_status st = read_all(p, &o, n, texts);
    if (st != LF_OK && !strstr(lf_last_error(), name)) fail_msg("error '%s' does not name the file", lf_last_error());
    return st;
}

/* A valid dictionary file: dict [a, b], rows a, null, b, a (OPTIONAL). */
static void build_dict_file(buf *f, const pg_spec *dict_over, const pg_spec *data_over, const void *idx, size_t idx_n,
                            const file_spec *fs_over) {
    buf chunk = {0}, d = {0}, v = {0};
    const char *dv[] = {"a", "b"};
    plain(&d, dv, 2);
    pg_spec ds = {.type = 2, .num_values = 2, .encoding = 0};
    if (dict_over) ds = *dict_over;
    page(&chunk, &ds, d.p, d.n);
    size_t first = chunk.n;
    def_levels_v1(&v, 0x0d); /* 1,0,1,1 */
    put8(&v, 1);             /* bit width */
    if (idx) put(&v, idx, idx_n);
    else {
        put8(&v, 1 << 1 | 1); /* one group: 0,1,0 */
        put8(&v, 0x02);
    }
    pg_spec dp = {.type = 0, .num_values = 4, .encoding = 8};
    if (data_over) dp = *data_over;
    page(&chunk, &dp, v.p, v.n);
    file_spec fs = {.rep = 1, .num_rows = 4, .num_values = -1, .has_dict = 1};
    if (fs_over) fs = *fs_over;
    file(f, &fs, &chunk, first);
    buf_free(&chunk);
    buf_free(&d);
    buf_free(&v);
}

static void test_built_valid(void **state) {
    (void)state;
    buf f = {0}, t = {0};
    size_t n;
    build_dict_file(&f, NULL, NULL, NULL, 0, NULL);
    assert_int_equal(read_built(&f, "dict.parquet", &n, &t, 1), LF_OK);
    assert_int_equal(n, 3);
    assert_int_equal(t.n, 5);
    assert_memory_equal(t.p, "a|b|a", 5);
    /* without skipping, row 2 (null) is an error */
    assert_int_equal(read_built(&f, "dict.parquet", &n, NULL, 0), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("dict.parquet:2: row 2 (row group 0): column 'text' is null");

    /* unknown fields of every type in the metadata and the page headers are skipped */
    pg_spec dj = {.type = 2, .num_values = 2, .encoding = 0, .junk = 1};
    pg_spec pj = {.type = 0, .num_values = 4, .encoding = 8, .junk = 1};
    file_spec fj = {.rep = 1, .num_rows = 4, .num_values = -1, .has_dict = 1, .junk = 1};
    build_dict_file(&f, &dj, &pj, NULL, 0, &fj);
    t.n = 0;
    assert_int_equal(read_built(&f, "junk.parquet", &n, &t, 1), LF_OK);
    assert_int_equal(t.n, 5);
    assert_memory_equal(t.p, "a|b|a", 5);

    /* page headers larger than the first read (statistics can be large) */
    pg_spec db = {.type = 2, .num_values = 2, .encoding = 0, .big_junk = 20000};
    pg_spec pb = {.type = 0, .num_values = 4, .encoding = 8, .big_junk = 100000};
    build_dict_file(&f, &db, &pb, NULL, 0, NULL);
    t.n = 0;
    assert_int_equal(read_built(&f, "bighdr.parquet", &n, &t, 1), LF_OK);
    assert_int_equal(t.n, 5);
    assert_memory_equal(t.p, "a|b|a", 5);

    /* the same values compressed (Snappy, ZSTD) */
    for (int codec = 1; codec <= 6; codec += 5) {
        pg_spec dc = {.type = 2, .num_values = 2, .encoding = 0, .codec = codec};
        pg_spec pc = {.type = 0, .num_values = 4, .encoding = 8, .codec = codec};
        file_spec fc = {.rep = 1, .num_rows = 4, .num_values = -1, .has_dict = 1, .codec = codec};
        build_dict_file(&f, &dc, &pc, NULL, 0, &fc);
        t.n = 0;
        assert_int_equal(read_built(&f, "codec.parquet", &n, &t, 1), LF_OK);
        assert_int_equal(t.n, 5);
        /* decompressed size mismatch */
        dc.usize_delta = 1;
        build_dict_file(&f, &dc, &pc, NULL, 0, &fc);
        assert_int_equal(read_built(&f, "codec.parquet", &n, NULL, 1), LF_ERR_FORMAT);
        LF_ASSERT_ERR_CONTAINS(codec == 1 ? "Snappy data holds 10 bytes, the page header says 11"
                                          : "ZSTD data holds 10 bytes, the page header says 11");
        LF_ASSERT_ERR_CONTAINS("page at byte offset 4");
    }

    /* data page v2: levels uncompressed, values (PLAIN) not compressed */
    buf chunk = {0}, v = {0};
    put8(&v, 1 << 1 | 1); /* levels 1,1,0,1 (no length prefix) */
    put8(&v, 0x0b);
    const char *pv[] = {"x", "yy", "zzz"};
    plain(&v, pv, 3);
    pg_spec p2 = {.type = 3, .num_values = 4, .encoding = 0, .def_len = 2, .is_compressed = 0};
    page(&chunk, &p2, v.p, v.n);
    file_spec f2 = {.rep = 1, .num_rows = 4, .num_values = -1};
    file(&f, &f2, &chunk, 0);
    t.n = 0;
    assert_int_equal(read_built(&f, "v2.parquet", &n, &t, 1), LF_OK);
    assert_int_equal(t.n, 8);
    assert_memory_equal(t.p, "x|yy|zzz", 8);
    /* v2 level lengths larger than the page */
    chunk.n = 0;
    p2.def_len = 1000;
    page(&chunk, &p2, v.p, v.n);
    file(&f, &f2, &chunk, 0);
    assert_int_equal(read_built(&f, "v2.parquet", &n, NULL, 1), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("level lengths (1000 + 0 bytes) do not fit");
    buf_free(&chunk);
    buf_free(&v);
    buf_free(&f);
    buf_free(&t);
}

typedef struct defect {
    const char *name;
    lf_status st;
    const char *msg;
} defect;

static void expect(const buf *f, const char *name, lf_status st, const char *msg) {
    size_t n;
    lf_status got = read_built(f, name, &n, NULL, 1);
    if (got != st) fail_msg("%s: %s, expected %s (%s)", name, lf_status_str(got), lf_status_str(st), lf_last_error());
    LF_ASSERT_ERR_CONTAINS(msg);
}

static void test_built_defects(void **state) {
    (void)state;
    buf f = {0};
    /* dictionary index out of range: indices 0,1,2 with 2 entries */
    unsigned char idx2[] = {1 << 1 | 1, 0x0a, 0x00}; /* bw 2: 2,2,0,0 packed = 0b...1010 */
    buf v = {0};
    def_levels_v1(&v, 0x0f);
    put8(&v, 2);
    put(&v, idx2, 2);
    {
        buf chunk = {0}, d = {0};
        const char *dv[] = {"a", "b"};
        plain(&d, dv, 2);
        pg_spec ds = {.type = 2, .num_values = 2, .encoding = 0};
        page(&chunk, &ds, d.p, d.n);
        size_t first = chunk.n;
        pg_spec dp = {.type = 0, .num_values = 4, .encoding = 8};
        page(&chunk, &dp, v.p, v.n);
        file_spec fs = {.rep = 1, .num_rows = 4, .num_values = -1, .has_dict = 1};
        file(&f, &fs, &chunk, first);
        expect(&f, "idx.parquet", LF_ERR_FORMAT, "dictionary index 2 is out of range (the dictionary holds 2 values)");
        LF_ASSERT_ERR_CONTAINS("row group 0, column 'text', page at byte offset");
        buf_free(&chunk);
        buf_free(&d);
    }
    /* a bit-packed run past the end of the page: bw 8, one group (8 bytes) declared, 2 there, 4 values needed */
    unsigned char cut[] = {1 << 1 | 1, 0, 1};
    pg_spec dp8 = {.type = 0, .num_values = 4, .encoding = 8};
    {
        buf chunk = {0}, d = {0}, w = {0};
        const char *dv[] = {"a", "b"};
        plain(&d, dv, 2);
        pg_spec ds = {.type = 2, .num_values = 2, .encoding = 0};
        page(&chunk, &ds, d.p, d.n);
        size_t first = chunk.n;
        def_levels_v1(&w, 0x0f);
        put8(&w, 8);
        put(&w, cut, sizeof cut);
        page(&chunk, &dp8, w.p, w.n);
        file_spec fs = {.rep = 1, .num_rows = 4, .num_values = -1, .has_dict = 1};
        file(&f, &fs, &chunk, first);
        expect(&f, "cut.parquet", LF_ERR_FORMAT, "bit-packed run extends past the end of its data");
        /* an RLE run whose value is missing: header only */
        chunk.n = first;
        w.n = 0;
        def_levels_v1(&w, 0x0f);
        put8(&w, 16);
        put8(&w, 4 << 1); /* RLE run of 4, value (2 bytes) missing */
        put8(&w, 1);
        page(&chunk, &dp8, w.p, w.n);
        file(&f, &fs, &chunk, first);
        expect(&f, "rle.parquet", LF_ERR_FORMAT, "RLE run's value extends past the end");
        /* run header varint overflowing 32 bits */
        chunk.n = first;
        w.n = 0;
        def_levels_v1(&w, 0x0f);
        put8(&w, 1);
        put(&w, "\xff\xff\xff\xff\x7f", 5);
        page(&chunk, &dp8, w.p, w.n);
        file(&f, &fs, &chunk, first);
        expect(&f, "rlevar.parquet", LF_ERR_FORMAT, "run header varint overflows 32 bits");
        /* ... and one that goes on past 5 bytes (found by fuzz_parquet: a shift past 64 bits) */
        chunk.n = first;
        w.n = 0;
        def_levels_v1(&w, 0x0f);
        put8(&w, 1);
        put(&w, "\xff\xff\xff\xff\x8f\x80\x80\x80\x80\x80\x80\x01", 12);
        page(&chunk, &dp8, w.p, w.n);
        file(&f, &fs, &chunk, first);
        expect(&f, "rlevar2.parquet", LF_ERR_FORMAT, "run header varint overflows 32 bits");
        /* bit width over 32 */
        chunk.n = first;
        w.n = 0;
        def_levels_v1(&w, 0x0f);
        put8(&w, 33);
        page(&chunk, &dp8, w.p, w.n);
        file(&f, &fs, &chunk, first);
        expect(&f, "bw.parquet", LF_ERR_FORMAT, "bit width 33 is over 32");
        /* definition levels longer than the page */
        chunk.n = first;
        w.n = 0;
        put32le(&w, 1000);
        put8(&w, 0);
        page(&chunk, &dp8, w.p, w.n);
        file(&f, &fs, &chunk, first);
        expect(&f, "deflen.parquet", LF_ERR_FORMAT, "definition levels of 1000 bytes run past the end of the page");
        /* definition levels that end early: 4 levels wanted, an RLE run of 2 */
        chunk.n = first;
        w.n = 0;
        put32le(&w, 2);
        put8(&w, 2 << 1);
        put8(&w, 1);
        put8(&w, 1);
        put8(&w, 1 << 1 | 1);
        put8(&w, 0);
        page(&chunk, &dp8, w.p, w.n);
        file(&f, &fs, &chunk, first);
        expect(&f, "defend.parquet", LF_ERR_FORMAT, "definition levels: the run-length/bit-packed data ends");
        /* a second dictionary page */
        chunk.n = first;
        page(&chunk, &ds, d.p, d.n);
        file(&f, &fs, &chunk, first);
        expect(&f, "dict2.parquet", LF_ERR_FORMAT, "a second dictionary page");
        /* dictionary-encoded page with no dictionary */
        chunk.n = 0;
        w.n = 0;
        def_levels_v1(&w, 0x0f);
        put8(&w, 1);
        put8(&w, 1 << 1 | 1);
        put8(&w, 0);
        page(&chunk, &dp8, w.p, w.n);
        file_spec nd = {.rep = 1, .num_rows = 4, .num_values = -1};
        file(&f, &nd, &chunk, 0);
        expect(&f, "nodict.parquet", LF_ERR_FORMAT, "without a dictionary page");
        /* dictionary page claiming more values than it holds */
        chunk.n = 0;
        pg_spec big = {.type = 2, .num_values = 3, .encoding = 0};
        page(&chunk, &big, d.p, d.n);
        first = chunk.n;
        page(&chunk, &dp8, v.p, v.n);
        file(&f, &fs, &chunk, first);
        expect(&f, "dictn.parquet", LF_ERR_FORMAT, "dictionary page claims 3 values in 10 bytes");
        buf_free(&chunk);
        buf_free(&d);
        buf_free(&w);
    }
    /* PLAIN pages: value length past the page; more values than the chunk; chunk ends early */
    {
        buf chunk = {0}, w = {0};
        put32le(&w, 2);
        put(&w, "ab", 2);
        put32le(&w, 99);
        put(&w, "cd", 2);
        pg_spec pp = {.type = 0, .num_values = 2, .encoding = 0};
        page(&chunk, &pp, w.p, w.n);
        file_spec fr = {.rep = 0, .num_rows = 2, .num_values = -1};
        file(&f, &fr, &chunk, 0);
        expect(&f, "plainlen.parquet", LF_ERR_FORMAT, "a PLAIN value of 99 bytes runs past the end of the page");
        w.n = 0;
        const char *pv[] = {"ab", "cd"};
        plain(&w, pv, 2);
        chunk.n = 0;
        page(&chunk, &pp, w.p, w.n);
        file_spec f1 = {.rep = 0, .num_rows = 1, .num_values = -1};
        file(&f, &f1, &chunk, 0);
        expect(&f, "toomany.parquet", LF_ERR_FORMAT, "the page holds 2 values, the column chunk has 1 left");
        file_spec f3 = {.rep = 0, .num_rows = 3, .num_values = -1};
        file(&f, &f3, &chunk, 0);
        expect(&f, "missing.parquet", LF_ERR_FORMAT, "the column chunk ends with 1 of its values missing");
        /* uncompressed page whose sizes disagree */
        chunk.n = 0;
        pg_spec pu = {.type = 0, .num_values = 2, .encoding = 0, .usize_delta = 5};
        page(&chunk, &pu, w.p, w.n);
        file_spec f2 = {.rep = 0, .num_rows = 2, .num_values = -1};
        file(&f, &f2, &chunk, 0);
        expect(&f, "usize.parquet", LF_ERR_FORMAT, "uncompressed page holds 12 bytes, its header says 17");
        /* unsupported value encoding and codec */
        chunk.n = 0;
        pg_spec pd = {.type = 0, .num_values = 2, .encoding = 9};
        page(&chunk, &pd, w.p, w.n);
        file(&f, &f2, &chunk, 0);
        expect(&f, "bss.parquet", LF_ERR_UNSUPPORTED,
               "column 'text', page at byte offset 4: values in encoding BYTE_STREAM_SPLIT");
        /* PLAIN bytes labelled DELTA_BYTE_ARRAY: broken DELTA data, named */
        chunk.n = 0;
        pg_spec pdl = {.type = 0, .num_values = 2, .encoding = 7};
        page(&chunk, &pdl, w.p, w.n);
        file(&f, &f2, &chunk, 0);
        expect(&f, "delta.parquet", LF_ERR_FORMAT, "column 'text', page at byte offset 4: DELTA_BYTE_ARRAY: ");
        chunk.n = 0;
        page(&chunk, &pp, w.p, w.n);
        file_spec fz = {.rep = 0, .num_rows = 2, .num_values = -1, .codec = 3};
        file(&f, &fz, &chunk, 0);
        expect(&f, "lzo.parquet", LF_ERR_UNSUPPORTED, "column 'text': codec LZO is not supported");
        /* offsets outside the file */
        file_spec fo = {.rep = 0, .num_rows = 2, .num_values = -1, .data_off_add = 100000};
        file(&f, &fo, &chunk, 0);
        expect(&f, "off.parquet", LF_ERR_FORMAT, "lies outside the file's data");
        file_spec ft = {.rep = 0, .num_rows = 2, .num_values = -1, .total_add = 100000};
        file(&f, &ft, &chunk, 0);
        expect(&f, "total.parquet", LF_ERR_FORMAT, "lies outside the file's data");
        file_spec fneg = {.rep = 0, .num_rows = 2, .num_values = -1, .data_off_add = -1000};
        file(&f, &fneg, &chunk, 0);
        expect(&f, "neg.parquet", LF_ERR_FORMAT, "lies outside the file's data");
        /* a chunk too short to hold the page header */
        file_spec fs2 = {.rep = 0, .num_rows = 2, .num_values = -1, .total_add = -(int64_t)chunk.n + 3};
        file(&f, &fs2, &chunk, 0);
        expect(&f, "hdrcut.parquet", LF_ERR_FORMAT, "the page header runs past the end of the column chunk");
        /* the page's data past the chunk */
        file_spec fs3 = {.rep = 0, .num_rows = 2, .num_values = -1, .total_add = -2};
        file(&f, &fs3, &chunk, 0);
        expect(&f, "pagecut.parquet", LF_ERR_FORMAT, "bytes run past the end of the column chunk");
        /* chunk value count disagrees with the row group */
        file_spec fv = {.rep = 0, .num_rows = 2, .num_values = 3};
        file(&f, &fv, &chunk, 0);
        expect(&f, "nv.parquet", LF_ERR_FORMAT, "the column chunk holds 3 values, the row group 2 rows");
        /* corrupt compressed data (the writer stores the bytes as they are) */
        static const struct {
            int codec;
            const char *msg;
        } garbage[] = {
            {1, "Snappy data is corrupt (bad length header)"},
            {2, "GZIP data is corrupt (incorrect header check)"},
            {6, "ZSTD data is corrupt (bad frame header)"},
        };
        for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
            buf g = {0};
            put(&g, "\xff\xff\xff\xff\xff\xff\xff\xff\xff", 9);
            chunk.n = 0;
            page(&chunk, &pp, g.p, g.n);
            file_spec fg = {.rep = 0, .num_rows = 2, .num_values = -1, .codec = garbage[i].codec};
            file(&f, &fg, &chunk, 0);
            expect(&f, "garbage.parquet", LF_ERR_FORMAT, garbage[i].msg);
            /* a GZIP page claiming more than deflate can expand to */
            if (garbage[i].codec == 2) {
                chunk.n = 0;
                pg_spec pbig = {.type = 0, .num_values = 2, .encoding = 0, .usize_delta = 1 << 20};
                page(&chunk, &pbig, g.p, g.n);
                file(&f, &fg, &chunk, 0);
                expect(&f, "bomb.parquet", LF_ERR_FORMAT, "more than 9 bytes of GZIP data can hold");
            }
            buf_free(&g);
        }
        /* a page over the size limit; BIT_PACKED definition levels */
        chunk.n = 0;
        pg_spec phuge = {.type = 0, .num_values = 2, .encoding = 0, .usize_delta = 0x40000000};
        page(&chunk, &phuge, w.p, w.n);
        file(&f, &f2, &chunk, 0);
        expect(&f, "huge.parquet", LF_ERR_RANGE, "is over the reader's limit");
        chunk.n = 0;
        pg_spec pbp = {.type = 0, .num_values = 2, .encoding = 0, .def_enc = 4};
        page(&chunk, &pbp, w.p, w.n);
        file_spec fopt = {.rep = 1, .num_rows = 2, .num_values = -1};
        file(&f, &fopt, &chunk, 0);
        expect(&f, "bitpacked.parquet", LF_ERR_UNSUPPORTED, "definition levels in encoding BIT_PACKED");
        /* a dictionary value whose length runs past the page */
        {
            buf dd = {0};
            put(&dd, "\x01\0\0\0a\x09\0\0\0b", 10);
            chunk.n = 0;
            pg_spec ds = {.type = 2, .num_values = 2, .encoding = 0};
            page(&chunk, &ds, dd.p, dd.n);
            size_t first = chunk.n;
            page(&chunk, &pp, w.p, w.n);
            file_spec fd = {.rep = 0, .num_rows = 2, .num_values = -1, .has_dict = 1};
            file(&f, &fd, &chunk, first);
            expect(&f, "dictlen.parquet", LF_ERR_FORMAT, "dictionary value 1 (9 bytes) runs past the end of the page");
            buf_free(&dd);
        }
        /* a repeated column selected */
        chunk.n = 0;
        page(&chunk, &pp, w.p, w.n);
        file_spec frep = {.rep = 2, .num_rows = 2, .num_values = -1};
        file(&f, &frep, &chunk, 0);
        expect(&f, "repeated.parquet", LF_ERR_UNSUPPORTED, "column 'text' is a repeated (nested) column");
        /* schema inconsistencies, a non-string type */
        file_spec fc = {.rep = 0, .num_rows = 2, .num_values = -1, .root_children = 2};
        file(&f, &fc, &chunk, 0);
        expect(&f, "children.parquet", LF_ERR_FORMAT, "the schema root claims 2 fields, the schema holds 1 elements");
        file_spec fi = {.rep = 0, .num_rows = 2, .num_values = -1, .type = 2};
        file(&f, &fi, &chunk, 0);
        expect(&f, "int.parquet", LF_ERR_UNSUPPORTED, "column 'text' has type INT64");
        /* metadata defects appended before the STOP of FileMetaData */
        static const struct {
            const char *bytes;
            size_t n;
            const char *msg;
        } meta[] = {
            /* field 19 (i64): an 11-byte varint; a 10-byte one overflowing 64 bits */
            {"\xf6\xff\xff\xff\xff\xff\xff\xff\xff\xff\x81\x01", 12, "varint longer than its type allows"},
            {"\xf6\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11, "varint overflows its type"},
            /* a list<i32> of 2^31-1 elements, a string of 2^28 bytes, a map of 65535 entries */
            {"\xf9\xf5\xff\xff\xff\xff\x07", 7, "more elements than the data left"},
            {"\xf8\xff\xff\xff\x7f", 5, "string is longer than the data left"},
            {"\xfb\xff\xff\x03\x55", 5, "map has more entries than the data left"},
            /* type code 13; an i32 field eating the STOP */
            {"\xfd", 1, "unknown type code"},
            {"\xf5", 1, "the data ends inside a struct"},
        };
        for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
            file_spec fm = {.rep = 0,
                            .num_rows = 2,
                            .num_values = -1,
                            .extra = (const unsigned char *)meta[i].bytes,
                            .extra_n = meta[i].n};
            file(&f, &fm, &chunk, 0);
            expect(&f, "meta.parquet", LF_ERR_FORMAT, meta[i].msg);
            LF_ASSERT_ERR_CONTAINS("file metadata (footer) is corrupt");
        }
        /* nesting deeper than the decoder allows: 40 structs in an unknown field */
        {
            unsigned char deep[200];
            size_t dn = 0;
            deep[dn++] = 0x0c; /* long-form field header: struct, id follows */
            deep[dn++] = 0xc8;
            deep[dn++] = 0x01;                              /* id 100 (zigzag 200) */
            for (int i = 0; i < 40; i++) deep[dn++] = 0x1c; /* field 1, struct */
            for (int i = 0; i < 41; i++) deep[dn++] = 0x00;
            file_spec fm = {.rep = 0, .num_rows = 2, .num_values = -1, .extra = deep, .extra_n = dn};
            file(&f, &fm, &chunk, 0);
            expect(&f, "deep.parquet", LF_ERR_FORMAT, "nested too deeply");
        }
        buf_free(&chunk);
        buf_free(&w);
    }
    buf_free(&v);
    buf_free(&f);
}

/* ---------------------------------------------------------------- corruptions of real fixtures */
/* Read a corrupted copy: an error must name the file; records are allowed
 * (a flip the reader cannot see) and returned in *texts. */
static lf_status read_corrupt(tmp *t, const void *d, size_t n, lf_record_mode mode, size_t *nrec, buf *texts) {
    const char *p = tmp_write(t, "corrupt.parquet", d, n);
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.skip_bad_records = 1;
    if (texts) texts->n = 0;
    lf_status st = read_all(p, &o, nrec, texts);
    if (st != LF_OK) {
        if (!strstr(lf_last_error(), "corrupt.parquet"))
            fail_msg("error '%s' (%s) does not name the file", lf_last_error(), lf_status_str(st));
    }
    return st;
}

static void footer_range(const unsigned char *d, size_t n, size_t *start) {
    uint32_t fl = (uint32_t)d[n - 8] | (uint32_t)d[n - 7] << 8 | (uint32_t)d[n - 6] << 16 | (uint32_t)d[n - 5] << 24;
    *start = n - 8 - fl;
}

static void test_truncations_and_magic(void **state) {
    (void)state;
    static const char *files[] = {"matrix_snappy_dict_v1.parquet", "matrix_zstd_plain_v2.parquet", "nulls.parquet"};
    tmp t = {0};
    for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", FIX_DIR, files[fi]);
        size_t n;
        unsigned char *d = (unsigned char *)read_file(path, &n);
        size_t nrec;
        /* every truncation is an error */
        for (size_t len = 0; len < n; len++) {
            lf_status st = read_corrupt(&t, d, len, LF_RECORD_PRETRAIN, &nrec, NULL);
            if (st == LF_OK) fail_msg("%s truncated to %zu bytes read without error", files[fi], len);
            assert_int_equal(st, LF_ERR_FORMAT);
        }
        unsigned char *c = malloc(n);
        /* wrong magic at either end */
        memcpy(c, d, n);
        c[0] = 'X';
        assert_int_equal(read_corrupt(&t, c, n, LF_RECORD_PRETRAIN, &nrec, NULL), LF_ERR_FORMAT);
        LF_ASSERT_ERR_CONTAINS("no magic PAR1 at the start");
        memcpy(c, d, n);
        c[n - 1] = '2';
        assert_int_equal(read_corrupt(&t, c, n, LF_RECORD_PRETRAIN, &nrec, NULL), LF_ERR_FORMAT);
        LF_ASSERT_ERR_CONTAINS("no magic PAR1 at the end");
        memcpy(c + n - 4, "PARE", 4);
        assert_int_equal(read_corrupt(&t, c, n, LF_RECORD_PRETRAIN, &nrec, NULL), LF_ERR_UNSUPPORTED);
        LF_ASSERT_ERR_CONTAINS("encrypted");
        /* footer lengths that do not fit, or cut the metadata */
        static const uint32_t bad_len[] = {0, 0xffffffffu, 0x7fffffffu, 1, 2, 7};
        for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0] + 2; i++) {
            uint32_t L = i < 6 ? bad_len[i] : i == 6 ? (uint32_t)n - 11 : (uint32_t)n;
            memcpy(c, d, n);
            c[n - 8] = (unsigned char)L;
            c[n - 7] = (unsigned char)(L >> 8);
            c[n - 6] = (unsigned char)(L >> 16);
            c[n - 5] = (unsigned char)(L >> 24);
            lf_status st = read_corrupt(&t, c, n, LF_RECORD_PRETRAIN, &nrec, NULL);
            if (st == LF_OK) fail_msg("%s with footer length %u read without error", files[fi], L);
        }
        free(c);
        lf_free(d);
    }
    tmp_free(&t);
}

/* Flip each byte of the pages (once) and of the footer (four ways): an
 * error naming the file or records; with page checksums, never records that
 * differ from the original's. */
static void test_flips(void **state) {
    (void)state;
    static const char *files[] = {"matrix_gzip_dict_v2.parquet", "matrix_snappy_plain_v1.parquet",
                                  "matrix_zstd_dict_v1.parquet", "nulls.parquet",
                                  "required_v1.parquet",         "required_v2.parquet",
                                  "sft_prompt_response.parquet"};
    tmp t = {0};
    for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", FIX_DIR, files[fi]);
        size_t n;
        unsigned char *d = (unsigned char *)read_file(path, &n);
        unsigned char *c = malloc(n);
        size_t fstart, nrec0, nrec;
        footer_range(d, n, &fstart);
        buf orig = {0}, got = {0};
        lf_record_mode mode = strncmp(files[fi], "sft_", 4) == 0 ? LF_RECORD_SFT : LF_RECORD_PRETRAIN;
        LF_ASSERT_OK(read_corrupt(&t, d, n, mode, &nrec0, &orig));
        int checksummed = strncmp(files[fi], "required_", 9) == 0;
        size_t errors = 0, total = 0;
        static const unsigned char masks[] = {0xff, 0x01, 0x80, 0x10};
        for (size_t i = 4; i < n - 8; i++) {
            for (size_t m = 0; m < sizeof masks; m++) {
                if (i < fstart && m > 0) break; /* pages: one flip per byte */
                memcpy(c, d, n);
                c[i] ^= masks[m];
                lf_status st = read_corrupt(&t, c, n, mode, &nrec, &got);
                total++;
                if (st != LF_OK) {
                    errors++;
                    continue;
                }
                if (checksummed && i < fstart && (got.n != orig.n || memcmp(got.p, orig.p, orig.n) != 0))
                    fail_msg("%s: byte %zu flipped: different records and no error", files[fi], i);
            }
        }
        /* most flips are caught (some hit statistics, names of other things, or padding) */
        if (errors * 4 < total) fail_msg("%s: only %zu of %zu flips were errors", files[fi], errors, total);
        buf_free(&orig);
        buf_free(&got);
        free(c);
        lf_free(d);
    }
    tmp_free(&t);
}

static int teardown(void **state) {
    (void)state;
    tmp_free(&g_tmp);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_sft_without_pair),
        cmocka_unit_test(test_built_valid),
        cmocka_unit_test(test_built_defects),
        cmocka_unit_test(test_truncations_and_magic),
        cmocka_unit_test(test_flips),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
