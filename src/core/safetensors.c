/*
 * safetensors reader (mmap) and writer.
 *
 * Format (https://huggingface.co/docs/safetensors, reference implementation
 * github.com/huggingface/safetensors, safetensors/src/tensor.rs):
 *   bytes [0, 8)        u64 little-endian N, the header length
 *   bytes [8, 8+N)      UTF-8 JSON object:
 *                       {"__metadata__": {"k": "v", ...},          (optional)
 *                        "NAME": {"dtype": "F32", "shape": [d0, ...],
 *                                 "data_offsets": [begin, end]}, ...}
 *                       padded with spaces (the reference writer pads N to a
 *                       multiple of 8 so the data region starts 8-aligned)
 *   bytes [8+N, EOF)    the data region; offsets are relative to its start,
 *                       tensors are row-major, little-endian.
 *
 * Reader invariants (every one checked, because the file may be hostile and
 * a bad file must never crash the host process):
 *   - file >= 8 bytes; N <= 100,000,000 (the reference MAX_HEADER_SIZE) and
 *     N <= file size - 8;
 *   - the header is valid UTF-8, parses as one JSON object followed only by
 *     whitespace;
 *   - __metadata__, when present, is an object whose values are all strings
 *     (or null, which the reference reads as no metadata);
 *   - every other key is a tensor: an object with a known string "dtype", a
 *     "shape" array of at most LF_ST_MAX_DIMS non-negative integers (scalars
 *     have shape []), and "data_offsets" [begin, end] with begin <= end <=
 *     data region size; numel * dtype size is computed with overflow checks
 *     and must equal end - begin;
 *   - tensor names are unique and shorter than LF_ST_NAME_MAX; no two
 *     tensors' byte ranges overlap. Gaps and trailing bytes are tolerated
 *     (the reference is stricter; accepting them costs nothing here).
 * Every error message names the file and, where there is one, the tensor.
 * The mapping is read-only and private; a file truncated by another process
 * while mapped can still raise SIGBUS (no portable defence). Tensor data
 * pointers may be unaligned (other writers need not pad): copy with memcpy.
 *
 * Writer: header keys in the order __metadata__ (when given, as the reference
 * writes it), then the tensors in the caller's order with data_offsets packed
 * back to back in that order; header padded with spaces to a multiple of 8;
 * then the data; fsync. Host byte order is written as is, so big-endian hosts
 * are refused at compile time.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "core/strbuf.h"
#include "core/io_impl.h"
#include "core/utf8.h"
#include "llmforge/safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this implementation assumes a little-endian host"
#endif

#define ST_HEADER_CAP 100000000ull
#define ST_JSON_INT_MAX 9007199254740992.0 /* 2^53: larger integers do not survive a double */

static const struct {
    const char *name;
    size_t size;
} k_dtypes[] = {
    [LF_ST_F32] = {"F32", 4},   [LF_ST_F16] = {"F16", 2}, [LF_ST_BF16] = {"BF16", 2}, [LF_ST_F64] = {"F64", 8},
    [LF_ST_I32] = {"I32", 4},   [LF_ST_I64] = {"I64", 8}, [LF_ST_I16] = {"I16", 2},   [LF_ST_I8] = {"I8", 1},
    [LF_ST_U8] = {"U8", 1},     [LF_ST_U16] = {"U16", 2}, [LF_ST_U32] = {"U32", 4},   [LF_ST_U64] = {"U64", 8},
    [LF_ST_BOOL] = {"BOOL", 1},
};
#define ST_N_DTYPES ((int)(sizeof k_dtypes / sizeof k_dtypes[0]))

const char *lf_st_dtype_name(lf_st_dtype d) {
    if ((int)d < 0 || (int)d >= ST_N_DTYPES) return "?";
    return k_dtypes[d].name;
}

size_t lf_st_dtype_size(lf_st_dtype d) {
    if ((int)d < 0 || (int)d >= ST_N_DTYPES) return 0;
    return k_dtypes[d].size;
}

static int dtype_parse(const char *s, lf_st_dtype *out) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) {
            *out = (lf_st_dtype)i;
            return 1;
        }
    return 0;
}

/* numel and nbytes of a shape, overflow-checked; 0 on overflow. */
static int shape_size(const int64_t *shape, int ndim, size_t elsize, size_t *numel, size_t *nbytes) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return 0;
        if (__builtin_mul_overflow(n, (size_t)shape[i], &n)) return 0;
    }
    size_t b;
    if (__builtin_mul_overflow(n, elsize, &b)) return 0;
    *numel = n;
    *nbytes = b;
    return 1;
}

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t at = 0;
    at += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* ================================================================ reader */

struct lf_safetensors {
    char *path;
    void *map;
    size_t map_len;
    int n;
    lf_st_tensor *t;
    const lf_st_tensor **by_name; /* sorted by name, for find */
    int n_meta;
    char **meta; /* key, value, key, value, ... */
};

static int cmp_tensor_name(const void *a, const void *b) {
    const lf_st_tensor *x = *(const lf_st_tensor *const *)a, *y = *(const lf_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

typedef struct {
    size_t begin, end;
    int idx;
} st_range;

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* A JSON number that is a non-negative integer no larger than 2^53. */
static int json_uint(const cJSON *j, double *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= ST_JSON_INT_MAX) || d != (double)(uint64_t)d) return 0;
    *out = d;
    return 1;
}

/* Parse one tensor entry into *t (name already set). */
static lf_status parse_tensor(const char *path, const cJSON *e, size_t data_len, lf_st_tensor *t, size_t *begin,
                              size_t *end) {
    const char *nm = t->name;
    if (!cJSON_IsObject(e))
        return lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s': entry is not a JSON object", path, nm);

    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!jd) return lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s': missing 'dtype'", path, nm);
    if (!cJSON_IsString(jd) || !jd->valuestring)
        return lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s': 'dtype' is not a string", path, nm);
    if (!dtype_parse(jd->valuestring, &t->dtype))
        return lf_fail(LF_ERR_UNSUPPORTED, "safetensors '%s': tensor '%.200s': unknown dtype '%.40s'", path, nm,
                       jd->valuestring);

    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!js) return lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s': missing 'shape'", path, nm);
    if (!cJSON_IsArray(js))
        return lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s': 'shape' is not an array", path, nm);
    int nd = cJSON_GetArraySize(js);
    if (nd > LF_ST_MAX_DIMS)
        return lf_fail(LF_ERR_UNSUPPORTED, "safetensors '%s': tensor '%.200s': %d dimensions, at most %d supported",
                       path, nm, nd, LF_ST_MAX_DIMS);
    t->ndim = 0;
    const cJSON *jx;
    cJSON_ArrayForEach(jx, js) {
        double d;
        if (!json_uint(jx, &d))
            return lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s': shape[%d] is not a non-negative integer",
                           path, nm, t->ndim);
        t->shape[t->ndim++] = (int64_t)d;
    }
    char sh[160];
    shape_str(t->shape, t->ndim, sh, sizeof sh);
    if (!shape_size(t->shape, t->ndim, lf_st_dtype_size(t->dtype), &t->numel, &t->nbytes))
        return lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s': shape %s overflows the address space", path,
                       nm, sh);

    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!jo) return lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s': missing 'data_offsets'", path, nm);
    double ob, oe;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(cJSON_GetArrayItem(jo, 0), &ob) ||
        !json_uint(cJSON_GetArrayItem(jo, 1), &oe))
        return lf_fail(LF_ERR_FORMAT,
                       "safetensors '%s': tensor '%.200s': 'data_offsets' is not an array of two non-negative integers",
                       path, nm);
    uint64_t b = (uint64_t)ob, en = (uint64_t)oe;
    if (en < b)
        return lf_fail(LF_ERR_FORMAT,
                       "safetensors '%s': tensor '%.200s': data_offsets [%llu, %llu] end before they begin", path, nm,
                       (unsigned long long)b, (unsigned long long)en);
    if (en > data_len)
        return lf_fail(
            LF_ERR_FORMAT,
            "safetensors '%s': tensor '%.200s': data_offsets [%llu, %llu] reach beyond the data region of %zu "
            "bytes (file truncated?)",
            path, nm, (unsigned long long)b, (unsigned long long)en, data_len);
    if (en - b != t->nbytes)
        return lf_fail(
            LF_ERR_FORMAT,
            "safetensors '%s': tensor '%.200s': data_offsets [%llu, %llu] span %llu bytes, but %s %s needs %zu", path,
            nm, (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b), lf_st_dtype_name(t->dtype),
            sh, t->nbytes);
    *begin = (size_t)b;
    *end = (size_t)en;
    return LF_OK;
}

static lf_status parse_header(lf_safetensors *st, const unsigned char *hdr, size_t hlen, size_t data_len) {
    const char *path = st->path;
    lf_status s = LF_OK;
    char *buf = NULL;
    cJSON *root = NULL;
    st_range *ranges = NULL;

    size_t bad = lf__utf8_valid_prefix(hdr, hlen);
    if (bad != hlen) {
        s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': header is not valid UTF-8 (byte %zu)", path, bad);
        goto done;
    }
    buf = malloc(hlen + 1);
    if (!buf) {
        s = lf_fail(LF_ERR_NOMEM, "safetensors '%s': out of memory for a %zu-byte header", path, hlen);
        goto done;
    }
    memcpy(buf, hdr, hlen);
    buf[hlen] = 0;
    const char *end = NULL;
    root = cJSON_ParseWithOpts(buf, &end, 0);
    if (!root) {
        size_t at = (end && end >= buf && end <= buf + hlen) ? (size_t)(end - buf) : 0;
        s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': header is not valid JSON (near byte %zu of %zu)", path, at, hlen);
        goto done;
    }
    for (const char *p = end; p < buf + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': header has bytes after the JSON object (byte %zu)", path,
                        (size_t)(p - buf));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': header is not a JSON object", path);
        goto done;
    }

    /* count tensors and metadata; validate metadata */
    int nt = 0, nm = 0, seen_meta = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") != 0) {
            nt++;
            continue;
        }
        if (seen_meta++) {
            s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': header has '__metadata__' twice", path);
            goto done;
        }
        if (cJSON_IsNull(e)) continue; /* the reference reads null as "no metadata" */
        if (!cJSON_IsObject(e)) {
            s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': '__metadata__' is not a JSON object", path);
            goto done;
        }
        const cJSON *kv;
        cJSON_ArrayForEach(kv, e) {
            if (!cJSON_IsString(kv) || !kv->valuestring) {
                s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': '__metadata__' value of '%.200s' is not a string", path,
                            kv->string);
                goto done;
            }
            nm++;
        }
    }

    st->t = calloc((size_t)nt + 1, sizeof *st->t);
    st->by_name = calloc((size_t)nt + 1, sizeof *st->by_name);
    st->meta = calloc(2 * (size_t)nm + 1, sizeof *st->meta);
    ranges = calloc((size_t)nt + 1, sizeof *ranges);
    if (!st->t || !st->by_name || !st->meta || !ranges) {
        s = lf_fail(LF_ERR_NOMEM, "safetensors '%s': out of memory for %d tensor entries", path, nt);
        goto done;
    }

    const unsigned char *data = hdr + hlen;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            const cJSON *kv; /* (no children when null) */
            cJSON_ArrayForEach(kv, e) {
                st->meta[2 * st->n_meta] = str_dup(kv->string);
                st->meta[2 * st->n_meta + 1] = str_dup(kv->valuestring);
                st->n_meta++; /* counted before the check, so close() frees a half pair */
                if (!st->meta[2 * st->n_meta - 2] || !st->meta[2 * st->n_meta - 1]) {
                    s = lf_fail(LF_ERR_NOMEM, "safetensors '%s': out of memory copying metadata", path);
                    goto done;
                }
            }
            continue;
        }
        lf_st_tensor *t = &st->t[st->n];
        size_t nlen = strlen(e->string);
        if (nlen >= LF_ST_NAME_MAX) {
            s = lf_fail(LF_ERR_UNSUPPORTED, "safetensors '%s': tensor '%.200s...': name longer than %d bytes", path,
                        e->string, LF_ST_NAME_MAX - 1);
            goto done;
        }
        memcpy(t->name, e->string, nlen + 1);
        size_t b = 0, en = 0;
        s = parse_tensor(path, e, data_len, t, &b, &en);
        if (s != LF_OK) goto done;
        t->data = data + b;
        ranges[st->n] = (st_range){b, en, st->n};
        st->by_name[st->n] = t;
        st->n++;
    }

    qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_tensor_name);
    for (int i = 1; i < st->n; i++) {
        if (strcmp(st->by_name[i - 1]->name, st->by_name[i]->name) == 0) {
            s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': tensor '%.200s' appears twice in the header", path,
                        st->by_name[i]->name);
            goto done;
        }
    }
    qsort(ranges, (size_t)st->n, sizeof *ranges, cmp_range);
    for (int i = 1; i < st->n; i++) {
        const st_range *a = &ranges[i - 1], *r = &ranges[i];
        if (r->begin < a->end) {
            s = lf_fail(
                LF_ERR_FORMAT,
                "safetensors '%s': tensors '%.200s' [%zu, %zu] and '%.200s' [%zu, %zu] overlap in the data region",
                path, st->t[a->idx].name, a->begin, a->end, st->t[r->idx].name, r->begin, r->end);
            goto done;
        }
    }

done:
    free(ranges);
    cJSON_Delete(root);
    free(buf);
    return s;
}

lf_status lf_safetensors_open(lf_safetensors **out, const char *path) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_safetensors_open: out is NULL");
    *out = NULL;
    if (!path) return lf_fail(LF_ERR_INVALID_ARG, "lf_safetensors_open: path is NULL");

    lf_status s = LF_OK;
    int fd = -1;
    lf_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = str_dup(path))) {
        s = lf_fail(LF_ERR_NOMEM, "safetensors '%s': out of memory", path);
        goto fail;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
    if (fd < 0) {
        s = lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "safetensors '%s': cannot open: %s", path,
                    strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        s = lf_fail(LF_ERR_IO, "safetensors '%s': not a regular file", path);
        goto fail;
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': file is %zu bytes, shorter than the 8-byte header length", path,
                    size);
        goto fail;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        s = lf_fail(LF_ERR_IO, "safetensors '%s': mmap of %zu bytes failed: %s", path, size, strerror(errno));
        goto fail;
    }
    st->map = map;
    st->map_len = size;
    close(fd);
    fd = -1;

    uint64_t hlen;
    memcpy(&hlen, map, 8);
    if (hlen > ST_HEADER_CAP) {
        s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': header length %llu exceeds the %llu-byte cap", path,
                    (unsigned long long)hlen, ST_HEADER_CAP);
        goto fail;
    }
    if (hlen > size - 8) {
        s = lf_fail(LF_ERR_FORMAT, "safetensors '%s': header length %llu, but only %zu bytes follow the length", path,
                    (unsigned long long)hlen, size - 8);
        goto fail;
    }
    s = parse_header(st, (const unsigned char *)map + 8, (size_t)hlen, size - 8 - (size_t)hlen);
    if (s != LF_OK) goto fail;
    *out = st;
    return LF_OK;

fail:
    if (fd >= 0) close(fd);
    lf_safetensors_close(st);
    return s;
}

void lf_safetensors_close(lf_safetensors *st) {
    if (!st) return;
    if (st->map) munmap(st->map, st->map_len);
    if (st->meta)
        for (int i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
    free(st->meta);
    free(st->by_name);
    free(st->t);
    free(st->path);
    free(st);
}

int lf_safetensors_count(const lf_safetensors *st) { return st ? st->n : 0; }

const lf_st_tensor *lf_safetensors_at(const lf_safetensors *st, int i) {
    if (!st || i < 0 || i >= st->n) return NULL;
    return &st->t[i];
}

const lf_st_tensor *lf_safetensors_find(const lf_safetensors *st, const char *name) {
    if (!st || !name || strlen(name) >= LF_ST_NAME_MAX) return NULL;
    lf_st_tensor key;
    strcpy(key.name, name);
    const lf_st_tensor *kp = &key;
    const lf_st_tensor **hit = bsearch(&kp, st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_tensor_name);
    return hit ? *hit : NULL;
}

const char *lf_safetensors_meta(const lf_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
    return NULL;
}

const char *lf_safetensors_path(const lf_safetensors *st) { return st ? st->path : NULL; }

/* ================================================================ writer */

/* JSON string literal; the input is valid UTF-8 (checked by the caller). */
static void sb_json_str(lf__sb *b, const char *s) {
    lf__sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': lf__sb_put(b, "\\\"", 2); break;
        case '\\': lf__sb_put(b, "\\\\", 2); break;
        case '\n': lf__sb_put(b, "\\n", 2); break;
        case '\r': lf__sb_put(b, "\\r", 2); break;
        case '\t': lf__sb_put(b, "\\t", 2); break;
        case '\b': lf__sb_put(b, "\\b", 2); break;
        case '\f': lf__sb_put(b, "\\f", 2); break;
        default:
            if (*p < 0x20) lf__sb_printf(b, "\\u%04x", *p);
            else lf__sb_put(b, (const char *)p, 1);
        }
    }
    lf__sb_put(b, "\"", 1);
}

static int is_utf8(const char *s) {
    size_t n = strlen(s);
    return lf__utf8_valid_prefix((const unsigned char *)s, n) == n;
}

static lf_status write_all(int fd, const char *path, const void *data, size_t len) {
    const unsigned char *p = data;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = lf__io_write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return lf_fail(LF_ERR_IO, "safetensors '%s': write failed: %s", path, strerror(errno));
        }
        if (w == 0) return lf_fail(LF_ERR_IO, "safetensors '%s': write made no progress", path);
        p += w;
        len -= (size_t)w;
    }
    return LF_OK;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static lf_status check_write_args(const char *path, const lf_st_tensor *tensors, int n, const char *const *meta,
                                  int n_meta, int need_data) {
    for (int i = 0; i < n; i++) {
        const lf_st_tensor *t = &tensors[i];
        if (!memchr(t->name, 0, LF_ST_NAME_MAX))
            return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': tensor %d: name not NUL-terminated within %d bytes",
                           path, i, LF_ST_NAME_MAX);
        const char *nm = t->name;
        if (!*nm || strcmp(nm, "__metadata__") == 0 || !is_utf8(nm))
            return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': tensor %d: invalid name '%.200s'", path, i, nm);
        if ((int)t->dtype < 0 || (int)t->dtype >= ST_N_DTYPES)
            return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': tensor '%s': invalid dtype %d", path, nm,
                           (int)t->dtype);
        if (t->ndim < 0 || t->ndim > LF_ST_MAX_DIMS)
            return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': tensor '%s': ndim %d outside [0, %d]", path, nm,
                           t->ndim, LF_ST_MAX_DIMS);
        size_t numel, nbytes;
        char sh[160];
        shape_str(t->shape, t->ndim, sh, sizeof sh);
        if (!shape_size(t->shape, t->ndim, lf_st_dtype_size(t->dtype), &numel, &nbytes))
            return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': tensor '%s': bad shape %s", path, nm, sh);
        if (numel != t->numel || nbytes != t->nbytes)
            return lf_fail(LF_ERR_INVALID_ARG,
                           "safetensors '%s': tensor '%s': numel %zu / nbytes %zu disagree with %s %s (%zu / %zu)",
                           path, nm, t->numel, t->nbytes, lf_st_dtype_name(t->dtype), sh, numel, nbytes);
        if (nbytes > 0 && !t->data && need_data)
            return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': tensor '%s': data is NULL", path, nm);
    }
    for (int i = 0; i < 2 * n_meta; i++) {
        if (!meta[i])
            return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': metadata %s %d is NULL", path,
                           i % 2 ? "value" : "key", i / 2);
        if (!is_utf8(meta[i]))
            return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': metadata '%.200s' is not valid UTF-8", path, meta[i]);
    }

    /* unique tensor names and metadata keys */
    int m = n > n_meta ? n : n_meta;
    const char **names = malloc(((size_t)m + 1) * sizeof *names);
    if (!names) return lf_fail(LF_ERR_NOMEM, "safetensors '%s': out of memory", path);
    lf_status s = LF_OK;
    for (int pass = 0; pass < 2 && s == LF_OK; pass++) {
        int k = pass == 0 ? n : n_meta;
        for (int i = 0; i < k; i++) names[i] = pass == 0 ? tensors[i].name : meta[2 * i];
        qsort(names, (size_t)k, sizeof *names, cmp_cstr);
        for (int i = 1; i < k; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                s = lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': %s '%.200s' given twice", path,
                            pass == 0 ? "tensor" : "metadata key", names[i]);
                break;
            }
    }
    free(names);
    return s;
}

/* The header (length prefix not included), padded to 8 bytes; the data
 * region follows in the given order. */
static lf_status build_header(const char *path, const lf_st_tensor *tensors, int n, const char *const *meta, int n_meta,
                              int need_data, lf__sb *out) {
    if (!path) return lf_fail(LF_ERR_INVALID_ARG, "lf_safetensors_write: path is NULL");
    if (n < 0 || (n > 0 && !tensors) || n_meta < 0 || (n_meta > 0 && !meta))
        return lf_fail(LF_ERR_INVALID_ARG, "safetensors '%s': bad tensor or metadata arguments", path);
    lf_status s = check_write_args(path, tensors, n, meta, n_meta, need_data);
    if (s != LF_OK) return s;

    lf__sb h = {0};
    lf__sb_puts(&h, "{");
    if (n_meta > 0) {
        lf__sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) lf__sb_puts(&h, ",");
            sb_json_str(&h, meta[2 * i]);
            lf__sb_puts(&h, ":");
            sb_json_str(&h, meta[2 * i + 1]);
        }
        lf__sb_puts(&h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const lf_st_tensor *t = &tensors[i];
        if (n_meta > 0 || i) lf__sb_puts(&h, ",");
        sb_json_str(&h, t->name);
        lf__sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", lf_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) lf__sb_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        lf__sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                      (unsigned long long)(off + t->nbytes));
        off += t->nbytes;
    }
    lf__sb_puts(&h, "}");
    while (!h.failed && h.len % 8) lf__sb_put(&h, " ", 1);
    if (h.failed) {
        free(h.p);
        return lf_fail(LF_ERR_NOMEM, "safetensors '%s': out of memory building the header", path);
    }
    if (h.len > ST_HEADER_CAP) {
        free(h.p);
        return lf_fail(LF_ERR_RANGE, "safetensors '%s': header of %zu bytes exceeds the %llu-byte cap", path, h.len,
                       ST_HEADER_CAP);
    }
    *out = h;
    return LF_OK;
}

/* Writes header h and then either the tensors' data (with_data) or nothing,
 * extending the file to its full size; fsynced; removed on failure. */
static lf_status write_file(const char *path, const lf__sb *h, const lf_st_tensor *tensors, int n, int with_data) {
    int fd = lf__io_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "safetensors '%s': cannot create: %s", path,
                       strerror(errno));
    uint64_t hlen = h->len, data = 0;
    for (int i = 0; i < n; i++) data += tensors[i].nbytes;
    lf_status s = write_all(fd, path, &hlen, 8);
    if (s == LF_OK) s = write_all(fd, path, h->p, h->len);
    for (int i = 0; with_data && i < n && s == LF_OK; i++) s = write_all(fd, path, tensors[i].data, tensors[i].nbytes);
    if (s == LF_OK && !with_data && lf__io_ftruncate(fd, (off_t)(8 + h->len + data)) != 0)
        s = lf_fail(LF_ERR_IO, "safetensors '%s': cannot extend to %llu bytes: %s", path,
                    (unsigned long long)(8 + h->len + data), strerror(errno));
    if (s == LF_OK && lf__io_fsync(fd) != 0)
        s = lf_fail(LF_ERR_IO, "safetensors '%s': fsync failed: %s", path, strerror(errno));
    if (lf__io_close(fd) != 0 && s == LF_OK)
        s = lf_fail(LF_ERR_IO, "safetensors '%s': close failed: %s", path, strerror(errno));
    if (s != LF_OK) unlink(path); /* never leave a half-written file behind */
    return s;
}

lf_status lf_safetensors_create(const char *path, const lf_st_tensor *tensors, int n, const char *const *meta,
                                int n_meta, size_t *data_start) {
    lf__sb h = {0};
    lf_status s = build_header(path, tensors, n, meta, n_meta, 0, &h);
    if (s == LF_OK) s = write_file(path, &h, tensors, n, 0);
    if (s == LF_OK && data_start) *data_start = 8 + h.len;
    free(h.p);
    return s;
}

lf_status lf_safetensors_write(const char *path, const lf_st_tensor *tensors, int n, const char *const *meta,
                               int n_meta) {
    lf__sb h = {0};
    lf_status s = build_header(path, tensors, n, meta, n_meta, 1, &h);
    if (s == LF_OK) s = write_file(path, &h, tensors, n, 1);
    free(h.p);
    return s;
}
