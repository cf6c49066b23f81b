/*
 * Parquet's DELTA encodings for the string columns reader_parquet.c reads
 * (Apache Parquet Encodings.md):
 *
 *   DELTA_BINARY_PACKED (5)      integers: a header <block size> <miniblocks
 *                                per block> <value count> <first value,
 *                                zigzag>, then blocks of <min delta, zigzag>
 *                                <one bit width per miniblock> <miniblocks,
 *                                bit-packed LSB first, each padded to its full
 *                                size>; value[i] = value[i-1] + min delta +
 *                                packed[i-1]
 *   DELTA_LENGTH_BYTE_ARRAY (6)  the lengths (DELTA_BINARY_PACKED), then the
 *                                values' bytes one after another
 *   DELTA_BYTE_ARRAY (7)         prefix lengths and suffix lengths (each
 *                                DELTA_BINARY_PACKED), then the suffixes'
 *                                bytes; value[i] = the first prefix[i] bytes
 *                                of value[i-1], then suffix[i]
 *
 * A page's values are decoded at once into one buffer (the prefixes of
 * DELTA_BYTE_ARRAY refer back to the previous value) with an offset and a
 * length per value; the caller hands them out one by one.
 *
 * Invariants: every count, width and length is checked against the data
 * before it is used; integer arithmetic wraps in uint64_t as the format's
 * does (a writer's deltas may overflow int64 and wrap back); the decoded
 * bytes are capped (max_bytes) so that prefix sharing cannot turn a small
 * page into an unbounded buffer. Errors come back as a static string.
 */
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

#define DBP_MAX_MINIBLOCKS 1024
#define DBP_MAX_BLOCK 65536

static int uleb(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    uint64_t r = 0;
    for (int s = 0; s < 64; s += 7) {
        if (*p >= end) return 0;
        unsigned char b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) {
            *v = r;
            return 1;
        }
    }
    return 0;
}

static uint64_t unzigzag(uint64_t v) { return (v >> 1) ^ (uint64_t) - (int64_t)(v & 1); }

/* Decode one DELTA_BINARY_PACKED run at p[0, n): at most max values into
 * *vals (malloc'd), *count of them, *used bytes consumed. */
static const char *dbp(const unsigned char *p, size_t n, size_t max, int64_t **vals, size_t *count, size_t *used) {
    const unsigned char *q = p, *end = p + n;
    uint64_t block, mbs, total, first;
    *vals = NULL;
    *count = 0;
    if (!uleb(&q, end, &block) || !uleb(&q, end, &mbs) || !uleb(&q, end, &total) || !uleb(&q, end, &first))
        return "DELTA_BINARY_PACKED: the header runs past the end of the page";
    if (block == 0 || block > DBP_MAX_BLOCK || block % 128 || mbs == 0 || mbs > DBP_MAX_MINIBLOCKS || block % mbs ||
        (block / mbs) % 32)
        return "DELTA_BINARY_PACKED: a block size or miniblock count the format does not allow";
    if (total > max) return "DELTA_BINARY_PACKED: more values than the page holds";
    int64_t *v = malloc((total ? total : 1) * sizeof *v);
    if (!v) return "out of memory decoding DELTA_BINARY_PACKED";
    const uint64_t per_mb = block / mbs;
    uint64_t cur = unzigzag(first);
    size_t k = 0;
    if (total) v[k++] = (int64_t)cur;
    while (k < total) {
        uint64_t mind;
        if (!uleb(&q, end, &mind)) goto short_;
        mind = unzigzag(mind);
        if ((size_t)(end - q) < mbs) goto short_;
        const unsigned char *widths = q;
        q += mbs;
        for (uint64_t m = 0; m < mbs && k < total; m++) {
            unsigned bw = widths[m];
            if (bw > 64) {
                free(v);
                return "DELTA_BINARY_PACKED: a miniblock bit width over 64";
            }
            uint64_t bytes = per_mb * bw / 8;
            if ((uint64_t)(end - q) < bytes) goto short_;
            for (uint64_t i = 0; i < per_mb && k < total; i++) {
                uint64_t bit = i * bw, x = 0;
                for (unsigned b = 0; b < bw; b++, bit++) x |= (uint64_t)(q[bit >> 3] >> (bit & 7) & 1) << b;
                cur += mind + x;
                v[k++] = (int64_t)cur;
            }
            q += bytes;
        }
    }
    *vals = v;
    *count = (size_t)total;
    *used = (size_t)(q - p);
    return NULL;
short_:
    free(v);
    return "DELTA_BINARY_PACKED: a block runs past the end of the page";
}

void lf__pq_delta_free(lf__pq_delta *d) {
    free(d->buf);
    free(d->off);
    free(d->len);
    memset(d, 0, sizeof *d);
}

const char *lf__pq_delta_decode(lf__pq_delta *d, int enc, const unsigned char *p, size_t n, size_t max_values,
                                size_t max_bytes) {
    lf__pq_delta_free(d);
    int64_t *pre = NULL, *len = NULL;
    size_t np = 0, nl = 0, used = 0;
    const char *why = NULL;
    if (enc == LF__PQ_DELTA_BYTE_ARRAY) {
        if ((why = dbp(p, n, max_values, &pre, &np, &used)) != NULL) return why;
        p += used;
        n -= used;
    }
    if ((why = dbp(p, n, max_values, &len, &nl, &used)) != NULL) goto done;
    p += used;
    n -= used;
    if (pre && np != nl) {
        why = "DELTA_BYTE_ARRAY: prefix and suffix lengths differ in count";
        goto done;
    }
    uint64_t total = 0, data = 0;
    for (size_t i = 0; i < nl; i++) {
        if (len[i] < 0 || (pre && pre[i] < 0)) {
            why = "a negative length";
            goto done;
        }
        if (pre && (uint64_t)pre[i] > (i ? (uint64_t)(len[i - 1] + pre[i - 1]) : 0)) {
            why = "DELTA_BYTE_ARRAY: a prefix longer than the value before it";
            goto done;
        }
        data += (uint64_t)len[i];
        total += (uint64_t)len[i] + (pre ? (uint64_t)pre[i] : 0);
        if (data > n) {
            why = "the values' bytes run past the end of the page";
            goto done;
        }
        if (total > max_bytes) {
            why = "the decoded values are larger than the reader's page limit";
            goto done;
        }
    }
    d->buf = malloc(total ? (size_t)total : 1);
    d->off = malloc((nl ? nl : 1) * sizeof *d->off);
    d->len = malloc((nl ? nl : 1) * sizeof *d->len);
    if (!d->buf || !d->off || !d->len) {
        why = "out of memory decoding a DELTA page";
        goto done;
    }
    size_t at = 0, src = 0;
    for (size_t i = 0; i < nl; i++) {
        size_t pl = pre ? (size_t)pre[i] : 0, sl = (size_t)len[i];
        if (pl) memcpy(d->buf + at, d->buf + d->off[i - 1], pl); /* the previous value's first bytes */
        memcpy(d->buf + at + pl, p + src, sl);
        d->off[i] = at;
        d->len[i] = pl + sl;
        at += pl + sl;
        src += sl;
    }
    d->n = nl;
    d->next = 0;
done:
    free(pre);
    free(len);
    if (why) lf__pq_delta_free(d);
    return why;
}
