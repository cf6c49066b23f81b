/*
 * WebDataset record source for lf_reader: a tar shard, plain or gzip, read
 * member by member; consecutive members sharing a key form one sample, and
 * each sample is one record. Contract in include/llmforge/data.h ("record
 * readers") and data_impl.h ("record sources"); behaviour in
 * docs/readers.md. References: POSIX.1-2017 pax/ustar (the "ustar
 * Interchange Format" and "pax Header Block"), GNU tar's format notes
 * (base-256 sizes, 'L' long names), RFC 1952 (gzip), and webdataset's
 * tariterators.py (keys, grouping, skipped meta files).
 *
 * Samples (as webdataset's base_plus_ext and group_by_keys):
 *  - a member's key is its path up to the first dot of its last component,
 *    its extension the rest after that dot, compared case-insensitively
 *    ("a/b.seg.TXT" -> key "a/b", extension "seg.txt"); a member whose last
 *    component has no dot or starts with one, or whose path matches
 *    ^__[^/]*__($|/), belongs to no sample and is ignored;
 *  - consecutive members with the same key are one sample;
 *  - the text: pretraining takes the ".txt" member when there is one and no
 *    text field was named, else the field (text_field, "text") of the
 *    ".json" member; fine-tuning takes the prompt/response fields of the
 *    ".json" member (named, or auto-detected as for JSON Lines). Other
 *    members (images, labels, "x.prompt.txt") are skipped unread.
 *
 * Tar (ustar, GNU and pax, as Python's tarfile writes them):
 *  - every 512-byte header's checksum is verified (unsigned or signed byte
 *    sum); sizes are octal or GNU base-256;
 *  - regular files are typeflags '0', '\0' and '7' ('\0' with a trailing
 *    slash is a directory); 'L' (GNU long name) and 'x' (pax: "path" and
 *    "size" are honoured) apply to the next member; 'g', 'K' and unknown
 *    types are skipped with their data; links, directories, devices and
 *    FIFOs carry no data; GNU sparse members ('S') are refused;
 *  - the archive ends at its first all-zero block; the end of the file
 *    before that block (anywhere: in a header, in data, in padding, or
 *    between members) is an error: a truncated shard never passes for a
 *    shorter one.
 *
 * Invariants:
 *  - Memory is bounded by the record cap (opts->max_record_bytes, else
 *    LF_READER_MAX_RECORD_BYTES), never by the file: input goes through
 *    64 KiB buffers (gzip inflated by zlib as a stream), only the ".txt" and
 *    ".json" members a sample needs are kept, each at most the cap (a larger
 *    one is a bad record, consumed unread), and pax/long-name headers are
 *    capped at LF_WDS_MAX_META_BYTES. Buffers grow with the bytes that
 *    arrive, never by what a header claims.
 *  - Offsets in messages are byte offsets in the tar stream (after gzip
 *    decompression for a .tar.gz), where the member's header starts.
 *  - A record's line is its 1-based sample number and messages read
 *    "FILE:N: sample 'KEY': ...". Structural damage (a bad checksum or
 *    size, a truncated archive, corrupt gzip) is fatal even with
 *    skip_bad_records: there is no member boundary left to trust.
 *  - gzip is recognised by its magic bytes 1f 8b, not by the name;
 *    concatenated gzip members are one stream; after the end-of-archive
 *    block the rest of the gzip member is still inflated, so its CRC and
 *    length are checked.
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
#include <zlib.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

#define IN_BUF_BYTES ((size_t)1 << 16)
#define BLOCK 512
#define LF_WDS_MAX_META_BYTES ((size_t)1 << 20) /* a pax header or GNU long name */

typedef struct buf {
    char *p;
    size_t len, alloc;
} buf;

/* A regular member whose header has been read (its data not yet). */
typedef struct member {
    buf name; /* effective path */
    uint64_t size;
    uint64_t hdr_off; /* offset of its (first) header */
} member;

/* One selected member of the current sample (.txt or .json). */
typedef struct part {
    buf data;     /* contents when kept */
    int seen;     /* members with this extension in the sample */
    int kept;     /* data holds the member */
    int too_long; /* larger than the cap (not kept) */
    uint64_t size;
    buf name; /* the member's path (for messages) */
} part;

typedef struct wds {
    char *path;
    int fd;
    lf_reader_opts o;
    size_t cap;
    /* input */
    int gz;
    z_stream zs;
    int zs_init, z_end; /* zlib ready; the current gzip member ended */
    unsigned char *zin; /* (IN_BUF_BYTES) compressed input */
    uint64_t zin_off;   /* compressed bytes read */
    unsigned char *in;  /* (IN_BUF_BYTES) tar bytes */
    size_t in_pos, in_len;
    int in_eof;
    uint64_t off; /* tar bytes consumed */
    /* tar */
    unsigned char hdr[BLOCK];
    buf longname, paxpath;
    int has_longname, has_paxpath, has_paxsize;
    uint64_t paxsize;
    member m;
    int pending; /* m holds a member whose data is unread */
    int ended;   /* the end-of-archive block was read */
    /* samples */
    buf key;
    int in_sample;
    part txt, json;
    cJSON *root;
    uint64_t samples;
    uint64_t *skipped;
    int skip_now;
    /* progress */
    uint64_t size; /* of the file, at open */
    int at_end;    /* next() reported the end */
} wds;

/* ---------------------------------------------------------------- small helpers */
static lf_status buf_reserve(wds *w, buf *b, size_t need) {
    if (need + 1 <= b->alloc) return LF_OK;
    size_t want = b->alloc ? b->alloc : 256;
    while (want < need + 1) want *= 2;
    char *t = realloc(b->p, want);
    if (!t) return lf_fail(LF_ERR_NOMEM, "%s: out of memory holding %zu bytes", w->path, need);
    b->p = t;
    b->alloc = want;
    return LF_OK;
}

static lf_status buf_set(wds *w, buf *b, const char *s, size_t n) {
    lf_status st = buf_reserve(w, b, n);
    if (st != LF_OK) return st;
    memcpy(b->p, s, n);
    b->p[n] = 0;
    b->len = n;
    return LF_OK;
}

/* A member name for messages: at most 200 bytes, control bytes as '?'. */
static const char *show(const char *s, char out[216]) {
    size_t n = 0;
    for (; s[n] && n < 200; n++) out[n] = ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) ? '?' : s[n];
    out[n] = 0;
    if (s[n]) strcpy(out + n, "...");
    return out;
}

/* ---------------------------------------------------------------- input: plain or gzip */
static lf_status read_fd(wds *w, unsigned char *dst, size_t cap, size_t *got) {
    for (;;) {
        ssize_t n = read(w->fd, dst, cap);
        if (n < 0) {
            if (errno == EINTR) continue;
            return lf_fail(LF_ERR_IO, "%s: read failed: %s", w->path, strerror(errno));
        }
        *got = (size_t)n;
        return LF_OK;
    }
}

/* Refill w->in with tar bytes; in_len 0 (and in_eof) at the end of the input. */
static lf_status fill(wds *w) {
    lf_status st;
    w->in_pos = w->in_len = 0;
    if (w->in_eof) return LF_OK;
    if (!w->gz) {
        if ((st = read_fd(w, w->in, IN_BUF_BYTES, &w->in_len)) != LF_OK) return st;
        if (w->in_len == 0) w->in_eof = 1;
        return LF_OK;
    }
    z_stream *z = &w->zs;
    z->next_out = w->in;
    z->avail_out = (uInt)IN_BUF_BYTES;
    while (z->avail_out == IN_BUF_BYTES) {
        if (z->avail_in == 0) {
            size_t got = 0;
            if ((st = read_fd(w, w->zin, IN_BUF_BYTES, &got)) != LF_OK) return st;
            w->zin_off += got;
            z->next_in = w->zin;
            z->avail_in = (uInt)got;
            if (got == 0) {
                if (!w->z_end)
                    return lf_fail(LF_ERR_FORMAT,
                                   "%s: the gzip stream is truncated (it ends after %llu compressed "
                                   "bytes, %llu bytes of tar)",
                                   w->path, (unsigned long long)w->zin_off,
                                   (unsigned long long)(w->off + (IN_BUF_BYTES - z->avail_out)));
                w->in_eof = 1;
                break;
            }
        }
        if (w->z_end) {
            /* another gzip member follows (concatenated gzip), or the rest
             * is not gzip and is ignored, as gzip(1) does */
            if (z->next_in[0] != 0x1f) {
                w->in_eof = 1;
                break;
            }
            if (inflateReset(z) != Z_OK) return lf_fail(LF_ERR_INTERNAL, "%s: inflateReset failed", w->path);
            w->z_end = 0;
        }
        int ret = inflate(z, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) {
            w->z_end = 1;
        } else if (ret == Z_DATA_ERROR) {
            return lf_fail(LF_ERR_FORMAT, "%s: corrupt gzip data near compressed byte %llu: %s", w->path,
                           (unsigned long long)(w->zin_off - z->avail_in), z->msg ? z->msg : "invalid data");
        } else if (ret == Z_MEM_ERROR) {
            return lf_fail(LF_ERR_NOMEM, "%s: out of memory inflating gzip", w->path);
        } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
            return lf_fail(LF_ERR_FORMAT, "%s: gzip error %d: %s", w->path, ret, z->msg ? z->msg : "");
        }
    }
    w->in_len = IN_BUF_BYTES - z->avail_out;
    return LF_OK;
}

/* Read n tar bytes into dst (NULL: discard). *got < n only at the end of the input. */
static lf_status take(wds *w, unsigned char *dst, uint64_t n, uint64_t *got) {
    *got = 0;
    while (*got < n) {
        if (w->in_pos == w->in_len) {
            lf_status st = fill(w);
            if (st != LF_OK) return st;
            if (w->in_len == 0) return LF_OK;
        }
        size_t k = w->in_len - w->in_pos;
        if ((uint64_t)k > n - *got) k = (size_t)(n - *got);
        if (dst) memcpy(dst + *got, w->in + w->in_pos, k);
        w->in_pos += k;
        w->off += k;
        *got += k;
    }
    return LF_OK;
}

static uint64_t padding(uint64_t size) { return (BLOCK - size % BLOCK) % BLOCK; }

/* Read (into dst, NUL-terminated) or skip (dst NULL) a member's data and
 * its padding. dst grows with the bytes that actually arrive, so a header
 * that claims a large size costs no memory unless the data is there. */
static lf_status member_data(wds *w, const char *name, uint64_t hdr_off, uint64_t size, buf *dst) {
    uint64_t done = 0, got = 0, pad = padding(size);
    lf_status st = LF_OK;
    if (!dst) {
        st = take(w, NULL, size, &done);
    } else {
        dst->len = 0;
        while (st == LF_OK && done < size) {
            size_t chunk = size - done < IN_BUF_BYTES ? (size_t)(size - done) : IN_BUF_BYTES;
            if ((st = buf_reserve(w, dst, dst->len + chunk)) != LF_OK) return st;
            st = take(w, (unsigned char *)dst->p + dst->len, chunk, &got);
            dst->len += (size_t)got;
            done += got;
            if (got < chunk) break;
        }
        if (dst->p) dst->p[dst->len] = 0;
    }
    if (st == LF_OK && done == size) {
        st = take(w, NULL, pad, &got);
        done = got;
        size = pad;
    }
    if (st != LF_OK) return st;
    if (done < size) {
        char s[216];
        return lf_fail(LF_ERR_FORMAT,
                       "%s: truncated archive: member '%s' (header at offset %llu) is cut off at "
                       "offset %llu",
                       w->path, show(name, s), (unsigned long long)hdr_off, (unsigned long long)w->off);
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- tar headers */
/* Parse a numeric field: octal digits (leading spaces, ending at NUL or
 * space; empty = 0) or GNU base-256 (first byte 0x80). 0 on success. */
static int parse_num(const unsigned char *f, size_t n, uint64_t *v) {
    *v = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80) return -1; /* negative or over 2^(8*(n-1)) */
        for (size_t i = 1; i < n; i++) {
            if (*v >> 55) return -1;
            *v = *v << 8 | f[i];
        }
        return 0;
    }
    size_t i = 0;
    while (i < n && f[i] == ' ') i++;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (*v >> 60) return -1;
        *v = *v << 3 | (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != 0 && f[i] != ' ') return -1;
    return 0;
}

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* The header's own name field (for messages before the name is resolved). */
static const char *raw_name(const unsigned char *h, char out[216]) {
    char tmp[101];
    memcpy(tmp, h, 100);
    tmp[100] = 0;
    return show(tmp, out);
}

/* Parse a pax extended header's records ("LEN key=value\n"). */
static lf_status parse_pax(wds *w, const char *p, size_t n, uint64_t hdr_off) {
    size_t i = 0;
    while (i < n) {
        if (p[i] == 0 && all_zero((const unsigned char *)p + i, n - i)) break; /* NUL padding */
        size_t len = 0, j = i;
        while (j < n && p[j] >= '0' && p[j] <= '9' && len < n) len = len * 10 + (size_t)(p[j++] - '0');
        const char *eq = NULL;
        if (j == i || j >= n || p[j] != ' ' || len <= j - i + 1 || len > n - i || p[i + len - 1] != '\n' ||
            !(eq = memchr(p + j + 1, '=', i + len - 1 - (j + 1))))
            return lf_fail(LF_ERR_FORMAT, "%s: malformed pax header at offset %llu (record at byte %zu)", w->path,
                           (unsigned long long)hdr_off, i);
        const char *k = p + j + 1, *v = eq + 1;
        size_t klen = (size_t)(eq - k), vlen = (size_t)(p + i + len - 1 - v);
        lf_status st;
        if (klen == 4 && memcmp(k, "path", 4) == 0) {
            if (memchr(v, 0, vlen))
                return lf_fail(LF_ERR_FORMAT, "%s: pax header at offset %llu: the path holds a NUL byte", w->path,
                               (unsigned long long)hdr_off);
            if ((st = buf_set(w, &w->paxpath, v, vlen)) != LF_OK) return st;
            w->has_paxpath = 1;
        } else if (klen == 4 && memcmp(k, "size", 4) == 0) {
            uint64_t s = 0;
            size_t d = 0;
            for (; d < vlen && v[d] >= '0' && v[d] <= '9'; d++) {
                if (s > (UINT64_MAX >> 4) / 10)
                    return lf_fail(LF_ERR_FORMAT, "%s: pax header at offset %llu: size out of range", w->path,
                                   (unsigned long long)hdr_off);
                s = s * 10 + (uint64_t)(v[d] - '0');
            }
            if (d == 0 || d != vlen)
                return lf_fail(LF_ERR_FORMAT, "%s: pax header at offset %llu: invalid size '%.*s'", w->path,
                               (unsigned long long)hdr_off, (int)(vlen < 40 ? vlen : 40), v);
            w->paxsize = s;
            w->has_paxsize = 1;
        }
        i += len;
    }
    return LF_OK;
}

/* Read headers up to the next regular member (w->m, w->pending = 1) or the
 * end of the archive (w->ended = 1). */
static lf_status next_member(wds *w) {
    lf_status st;
    for (;;) {
        uint64_t hdr_off = w->off, got;
        unsigned char *h = w->hdr;
        char s[216];
        if ((st = take(w, h, BLOCK, &got)) != LF_OK) return st;
        if (got == 0) {
            if (hdr_off == 0) return lf_fail(LF_ERR_FORMAT, "%s: the file is empty (not a tar archive)", w->path);
            return lf_fail(LF_ERR_FORMAT,
                           "%s: truncated archive: the file ends at offset %llu without the "
                           "end-of-archive block",
                           w->path, (unsigned long long)hdr_off);
        }
        if (got < BLOCK)
            return lf_fail(LF_ERR_FORMAT,
                           "%s: truncated archive: the header at offset %llu is cut off after %llu "
                           "bytes",
                           w->path, (unsigned long long)hdr_off, (unsigned long long)got);
        if (all_zero(h, BLOCK)) {
            if (w->has_longname || w->has_paxpath || w->has_paxsize)
                return lf_fail(LF_ERR_FORMAT, "%s: the archive ends at offset %llu right after an extended header",
                               w->path, (unsigned long long)hdr_off);
            w->ended = 1;
            return LF_OK;
        }
        uint64_t stored;
        unsigned usum = 0;
        int ssum = 0;
        for (int i = 0; i < BLOCK; i++) {
            unsigned char b = (i >= 148 && i < 156) ? ' ' : h[i];
            usum += b;
            ssum += (signed char)b;
        }
        if (parse_num(h + 148, 8, &stored) != 0)
            return lf_fail(LF_ERR_CHECKSUM,
                           "%s: tar header at offset %llu (member '%s'): bad checksum (the checksum "
                           "field is not an octal number)%s",
                           w->path, (unsigned long long)hdr_off, raw_name(h, s),
                           hdr_off == 0 ? "; not a tar archive?" : "");
        if (stored != usum && (int64_t)stored != (int64_t)ssum)
            return lf_fail(LF_ERR_CHECKSUM,
                           "%s: tar header at offset %llu (member '%s'): bad checksum (the header "
                           "says %#llo, the bytes sum to %#o)%s",
                           w->path, (unsigned long long)hdr_off, raw_name(h, s), (unsigned long long)stored, usum,
                           hdr_off == 0 ? "; not a tar archive?" : "");
        uint64_t size;
        if (parse_num(h + 124, 12, &size) != 0 || size > (UINT64_MAX >> 2))
            return lf_fail(LF_ERR_FORMAT, "%s: tar header at offset %llu (member '%s'): invalid size field", w->path,
                           (unsigned long long)hdr_off, raw_name(h, s));
        char type = (char)h[156];
        if (type == 'x' || type == 'L' || type == 'g' || type == 'K') {
            int keep = type == 'x' || type == 'L';
            if (keep && size > LF_WDS_MAX_META_BYTES)
                return lf_fail(LF_ERR_RANGE, "%s: tar header at offset %llu: %s of %llu bytes (the limit is %zu)",
                               w->path, (unsigned long long)hdr_off, type == 'x' ? "pax header" : "GNU long name",
                               (unsigned long long)size, LF_WDS_MAX_META_BYTES);
            buf *b = type == 'L' ? &w->longname : &w->m.name; /* m.name as scratch for pax */
            if ((st = buf_reserve(w, b, 0)) != LF_OK) return st;
            if ((st = member_data(w, raw_name(h, s), hdr_off, size, keep ? b : NULL)) != LF_OK) return st;
            if (type == 'L') {
                b->len = strlen(b->p); /* the name ends at its first NUL */
                w->has_longname = 1;
            } else if (type == 'x') {
                if ((st = parse_pax(w, b->p, (size_t)size, hdr_off)) != LF_OK) return st;
            }
            continue;
        }
        if (type == 'S')
            return lf_fail(LF_ERR_UNSUPPORTED,
                           "%s: tar header at offset %llu (member '%s'): GNU sparse members are "
                           "not supported",
                           w->path, (unsigned long long)hdr_off, raw_name(h, s));
        if (w->has_paxsize) size = w->paxsize;
        /* the effective name: pax path, else GNU long name, else ustar prefix/name */
        if (w->has_paxpath) {
            st = buf_set(w, &w->m.name, w->paxpath.p, w->paxpath.len);
        } else if (w->has_longname) {
            st = buf_set(w, &w->m.name, w->longname.p, w->longname.len);
        } else {
            char full[BLOCK];
            size_t n = 0;
            if (memcmp(h + 257, "ustar\0", 6) == 0 && h[345]) { /* POSIX ustar: prefix "/" name */
                size_t pl = strnlen((const char *)h + 345, 155);
                memcpy(full, h + 345, pl);
                n = pl;
                full[n++] = '/';
            }
            size_t nl = strnlen((const char *)h, 100);
            memcpy(full + n, h, nl);
            n += nl;
            st = buf_set(w, &w->m.name, full, n);
        }
        if (st != LF_OK) return st;
        w->has_longname = w->has_paxpath = w->has_paxsize = 0;
        w->m.size = size;
        w->m.hdr_off = hdr_off;
        int regular = type == '0' || type == '\0' || type == '7';
        if (type == '\0' && w->m.name.len && w->m.name.p[w->m.name.len - 1] == '/') regular = 0; /* old directory */
        if (regular) {
            w->pending = 1;
            return LF_OK;
        }
        /* links, directories, devices and FIFOs carry no data (whatever
         * their size field says, as tarfile reads them); other types do */
        if (type >= '1' && type <= '6') continue;
        if ((st = member_data(w, w->m.name.p, hdr_off, size, NULL)) != LF_OK) return st;
    }
}

/* ---------------------------------------------------------------- samples */
/* Split a path into key and extension (webdataset's base_plus_ext); 0 when
 * the member belongs to no sample. */
static int key_ext(const char *name, size_t len, size_t *key_len, const char **ext) {
    /* webdataset's meta files: ^__[^/]*__($|/) */
    if (len >= 4 && name[0] == '_' && name[1] == '_') {
        const char *sl = memchr(name + 2, '/', len - 2);
        size_t end = sl ? (size_t)(sl - name) : len;
        if (end >= 4 && name[end - 1] == '_' && name[end - 2] == '_') return 0;
    }
    const char *last = name;
    for (size_t i = 0; i < len; i++)
        if (name[i] == '/') last = name + i + 1;
    const char *dot = memchr(last, '.', len - (size_t)(last - name));
    if (!dot || dot == last) return 0;
    *key_len = (size_t)(dot - name);
    *ext = dot + 1;
    return 1;
}

static void part_reset(part *p) {
    p->seen = p->kept = p->too_long = 0;
    p->size = 0;
    p->data.len = 0;
}

/* Take the pending member into the current sample. */
static lf_status consume(wds *w, const char *ext) {
    part *p = NULL;
    int want = 0;
    int pre_default = w->o.mode == LF_RECORD_PRETRAIN && !w->o.text_field;
    if (strcasecmp(ext, "txt") == 0) {
        p = &w->txt;
        want = pre_default;
    } else if (strcasecmp(ext, "json") == 0) {
        p = &w->json;
        want = !(pre_default && w->txt.seen); /* the .txt wins: keep no .json after it */
    }
    lf_status st;
    member *m = &w->m;
    w->pending = 0;
    if (p) {
        p->seen++;
        if (p->seen == 1) {
            p->size = m->size;
            if ((st = buf_set(w, &p->name, m->name.p, m->name.len)) != LF_OK) return st;
        }
        if (p == &w->txt && pre_default && w->json.kept) w->json.kept = 0; /* the .txt wins */
        if (want && p->seen == 1) {
            if (m->size > w->cap) {
                p->too_long = 1;
            } else {
                if ((st = buf_reserve(w, &p->data, 0)) != LF_OK) return st;
                if ((st = member_data(w, m->name.p, m->hdr_off, m->size, &p->data)) != LF_OK) return st;
                p->kept = 1;
                return LF_OK;
            }
        }
    }
    return member_data(w, m->name.p, m->hdr_off, m->size, NULL);
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
/* A bad sample: an error, or with skip_bad_records a counted skip. */
static lf_status
bad(wds *w, lf_status st, const char *fmt, ...) {
    char what[700], msg[1024], s[216];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "%s:%llu: sample '%s': %s", w->path, (unsigned long long)w->samples, show(w->key.p, s),
             what);
    return lf__reader_bad(&w->o, w->skipped, &w->skip_now, st, msg);
}

static int is_blank(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* A string field of the .json member; *s NULL after a skip. */
static lf_status json_field(wds *w, const char *name, int need_text, const char **s, size_t *len) {
    char mn[216];
    *s = NULL;
    *len = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(w->root, name);
    show(w->json.name.p, mn);
    if (!v) return bad(w, LF_ERR_FORMAT, "member '%s': field '%s' is missing", mn, name);
    if (!cJSON_IsString(v) || !v->valuestring)
        return bad(w, LF_ERR_FORMAT, "member '%s': field '%s' is %s, expected a string", mn, name,
                   lf__json_type_name(v));
    size_t n = strlen(v->valuestring);
    const char *why = "";
    size_t at = lf__utf8_check((const unsigned char *)v->valuestring, n, &why);
    if (at < n)
        return bad(w, LF_ERR_FORMAT,
                   "member '%s': field '%s': invalid UTF-8 at byte offset %zu of the value (byte "
                   "0x%02X: %s)",
                   mn, name, at, (unsigned)(unsigned char)v->valuestring[at], why);
    if (n == 0 && need_text) return bad(w, LF_ERR_FORMAT, "member '%s': field '%s' is empty", mn, name);
    *s = v->valuestring;
    *len = n;
    return LF_OK;
}

/* Turn the finished sample into *rec (or a bad record). */
static lf_status emit(wds *w, lf_record *rec) {
    char mn[216];
    int pre_default = w->o.mode == LF_RECORD_PRETRAIN && !w->o.text_field;
    lf_status st;
    if (pre_default && w->txt.seen) {
        part *p = &w->txt;
        show(p->name.p, mn);
        if (p->seen > 1) return bad(w, LF_ERR_FORMAT, "%d members with the extension 'txt'", p->seen);
        if (p->too_long)
            return bad(w, LF_ERR_RANGE, "member '%s' is %llu bytes, larger than the limit of %zu bytes for one record",
                       mn, (unsigned long long)p->size, w->cap);
        const char *t = p->data.p;
        size_t n = p->data.len;
        if (n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) t += 3, n -= 3; /* a byte order mark is not text */
        const char *nul = memchr(t, 0, n);
        if (nul) return bad(w, LF_ERR_FORMAT, "member '%s': NUL byte at byte offset %zu", mn, (size_t)(nul - t));
        const char *why = "";
        size_t at = lf__utf8_check((const unsigned char *)t, n, &why);
        if (at < n)
            return bad(w, LF_ERR_FORMAT, "member '%s': invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)", mn, at,
                       (unsigned)(unsigned char)t[at], why);
        if (n == 0) return bad(w, LF_ERR_FORMAT, "member '%s' is empty", mn);
        rec->text = t;
        rec->text_len = n;
        rec->text_key = "txt";
        return LF_OK;
    }
    part *p = &w->json;
    if (!p->seen) {
        if (pre_default) return bad(w, LF_ERR_FORMAT, "no .txt or .json member");
        if (w->o.mode == LF_RECORD_SFT)
            return bad(w, LF_ERR_FORMAT, "no .json member (needed for the fine-tuning fields)");
        return bad(w, LF_ERR_FORMAT, "no .json member (needed for the text field '%s')", w->o.text_field);
    }
    show(p->name.p, mn);
    if (p->seen > 1) return bad(w, LF_ERR_FORMAT, "%d members with the extension 'json'", p->seen);
    if (p->too_long)
        return bad(w, LF_ERR_RANGE, "member '%s' is %llu bytes, larger than the limit of %zu bytes for one record", mn,
                   (unsigned long long)p->size, w->cap);
    const char *t = p->data.p;
    size_t n = p->data.len;
    if (n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) t += 3, n -= 3;
    cJSON_Delete(w->root);
    const char *end = NULL;
    w->root = cJSON_ParseWithLengthOpts(t, n, &end, 0);
    if (!w->root) {
        size_t off = end && end >= t && end <= t + n ? (size_t)(end - t) : 0;
        return bad(w, LF_ERR_FORMAT, "member '%s': not valid JSON (error near byte offset %zu)", mn, off);
    }
    size_t off = end ? (size_t)(end - t) : n;
    while (off < n && is_blank((unsigned char)t[off])) off++;
    if (off < n) return bad(w, LF_ERR_FORMAT, "member '%s': not valid JSON (text after the end of the value)", mn);
    if (!cJSON_IsObject(w->root))
        return bad(w, LF_ERR_FORMAT, "member '%s': not a JSON object (%s)", mn, lf__json_type_name(w->root));
    if (lf_json_find_nul_escape(t, n) < n)
        return bad(w, LF_ERR_FORMAT, "member '%s': a string holds the escape \\u0000 (U+0000), which text cannot hold",
                   mn);
    if (w->o.mode == LF_RECORD_PRETRAIN) {
        const char *f = w->o.text_field ? w->o.text_field : "text";
        if ((st = json_field(w, f, 1, &rec->text, &rec->text_len)) != LF_OK || w->skip_now) return st;
        rec->text_key = f;
        return LF_OK;
    }
    const char *pf = w->o.prompt_field, *rf = w->o.response_field;
    if (!pf) {
        if (cJSON_GetObjectItemCaseSensitive(w->root, "prompt") ||
            cJSON_GetObjectItemCaseSensitive(w->root, "response")) {
            pf = "prompt";
            rf = "response";
        } else if (cJSON_GetObjectItemCaseSensitive(w->root, "input_text") ||
                   cJSON_GetObjectItemCaseSensitive(w->root, "target_text")) {
            pf = "input_text";
            rf = "target_text";
        } else {
            return bad(w, LF_ERR_FORMAT,
                       "member '%s': no fine-tuning fields: expected 'prompt' and 'response', or "
                       "'input_text' and 'target_text' (or name them with --prompt-field/--response-field)",
                       mn);
        }
    }
    if ((st = json_field(w, pf, 0, &rec->prompt, &rec->prompt_len)) != LF_OK || w->skip_now) return st;
    if ((st = json_field(w, rf, 1, &rec->response, &rec->response_len)) != LF_OK || w->skip_now) return st;
    rec->prompt_key = pf;
    rec->response_key = rf;
    return LF_OK;
}

/* Inflate the rest of the gzip member after the end of the archive, so its
 * CRC and length are checked (the tar stream may stop short of it). */
static lf_status drain(wds *w) {
    if (!w->gz) return LF_OK;
    while (!w->z_end && !w->in_eof) {
        w->in_pos = w->in_len;
        lf_status st = fill(w);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status src_next(void *state, lf_record *rec, int *eof, uint64_t *skipped) {
    wds *w = state;
    w->skipped = skipped;
    *eof = 0;
    lf_status st;
    for (;;) {
        w->in_sample = 0;
        part_reset(&w->txt);
        part_reset(&w->json);
        for (;;) {
            if (!w->pending) {
                if (w->ended) break;
                if ((st = next_member(w)) != LF_OK) return st;
                if (w->ended) {
                    if ((st = drain(w)) != LF_OK) return st;
                    break;
                }
            }
            size_t klen;
            const char *ext;
            if (!key_ext(w->m.name.p, w->m.name.len, &klen, &ext)) {
                w->pending = 0;
                if ((st = member_data(w, w->m.name.p, w->m.hdr_off, w->m.size, NULL)) != LF_OK) return st;
                continue;
            }
            if (w->in_sample && (klen != w->key.len || memcmp(w->key.p, w->m.name.p, klen) != 0)) break;
            if (!w->in_sample) {
                if ((st = buf_set(w, &w->key, w->m.name.p, klen)) != LF_OK) return st;
                w->in_sample = 1;
            }
            if ((st = consume(w, ext)) != LF_OK) return st;
        }
        if (!w->in_sample) {
            *eof = 1;
            w->at_end = 1;
            return LF_OK;
        }
        memset(rec, 0, sizeof *rec);
        rec->line = ++w->samples;
        rec->index = w->samples - 1;
        w->skip_now = 0;
        if ((st = emit(w, rec)) != LF_OK) return st;
        if (w->skip_now) {
            memset(rec, 0, sizeof *rec);
            continue;
        }
        return LF_OK;
    }
}

/* ---------------------------------------------------------------- open/close */
static void part_free(part *p) {
    free(p->data.p);
    free(p->name.p);
}

static void src_close(void *state) {
    wds *w = state;
    if (!w) return;
    if (w->zs_init) inflateEnd(&w->zs);
    if (w->fd >= 0) close(w->fd);
    free(w->zin);
    free(w->in);
    free(w->path);
    free(w->longname.p);
    free(w->paxpath.p);
    free(w->m.name.p);
    free(w->key.p);
    part_free(&w->txt);
    part_free(&w->json);
    cJSON_Delete(w->root);
    free(w);
}

static lf_status src_open(void **state, const char *path, const lf_reader_opts *opts) {
    *state = NULL;
    lf_status st;
    wds *w = calloc(1, sizeof *w);
    if (w) w->fd = -1;
    if (!w || !(w->path = strdup(path)) || !(w->in = malloc(IN_BUF_BYTES)) || !(w->zin = malloc(IN_BUF_BYTES))) {
        st = lf_fail(LF_ERR_NOMEM, "%s: out of memory opening", path);
        goto fail;
    }
    w->o = *opts;
    w->cap = opts->max_record_bytes ? opts->max_record_bytes : LF_READER_MAX_RECORD_BYTES;
    w->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (w->fd < 0) {
        st = lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(w->fd, &sb) == 0) w->size = (uint64_t)sb.st_size;
    /* gzip by its magic: read the first bytes as compressed input, and hand
     * them to the tar layer unchanged when they are not gzip */
    size_t got = 0, n = 0;
    do {
        if ((st = read_fd(w, w->zin + got, IN_BUF_BYTES - got, &n)) != LF_OK) goto fail;
        got += n;
    } while (n > 0 && got < 2);
    if (got >= 2 && w->zin[0] == 0x1f && w->zin[1] == 0x8b) {
        w->gz = 1;
        w->zin_off = got;
        w->zs.next_in = w->zin;
        w->zs.avail_in = (uInt)got;
        if (inflateInit2(&w->zs, 16 + MAX_WBITS) != Z_OK) {
            st = lf_fail(LF_ERR_NOMEM, "%s: cannot start the gzip decoder", path);
            goto fail;
        }
        w->zs_init = 1;
    } else {
        unsigned char *t = w->in;
        w->in = w->zin;
        w->zin = t;
        w->in_len = got;
        if (got == 0) w->in_eof = 1;
    }
    *state = w;
    return LF_OK;
fail:
    src_close(w);
    return st;
}

/* Progress: bytes of the file consumed: the compressed bytes zlib has taken
 * for a .tar.gz, the tar bytes handed out for a plain tar; the file's size
 * once the end was reported (the zero blocks after the end-of-archive block
 * of a plain tar are never read). */
static uint64_t src_bytes_read(const void *state) {
    const wds *w = state;
    if (!w) return 0;
    if (w->at_end) return w->size;
    return w->gz ? w->zin_off - w->zs.avail_in : w->off;
}

const lf__record_source lf__wds_source = {src_open, src_next, src_close, src_bytes_read};
