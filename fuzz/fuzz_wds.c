/*
 * libFuzzer harness for the WebDataset tar record source
 * (src/data/reader_wds.c) through lf_reader. The first input byte chooses
 * the options, the rest is the shard:
 *   bit 0  fine-tuning (prompt/response from the .json) instead of pretraining
 *   bit 1  skip_bad_records
 *   bit 2  a tiny record cap (16 bytes)
 *   bit 3  text_field "text" (the .json only) / prompt "p", response "r"
 *   bit 4  repair the header checksums first, so the fuzzer gets past them:
 *          walk the 512-byte headers (sizes octal or base-256) and rewrite
 *          each checksum field (as fuzz_shard recomputes its CRC)
 *   bit 5  gzip the (repaired) bytes first, so the tar parser is also
 *          reached through the inflate path
 * Invariants: a refused file leaves the reader NULL with a message; every
 * record is valid UTF-8 without NUL, NUL-terminated at its length, non-empty
 * where text is required, at most the cap; line = index + 1 and indices
 * count up; after an error the reader stays stopped.
 */
#include <zlib.h>
#include "fuzz_util.h"
#include "llmforge/data.h"
#include "data/data_impl.h"

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        const char *why;
        if ((unsigned char)s[i] < 0x80) {
            if (!s[i]) return 0;
            i++;
            continue;
        }
        int k = lf__utf8_decode((const unsigned char *)s + i, n - i, &cp, &why);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

static uint64_t field_size(const unsigned char *f) {
    uint64_t v = 0;
    if (f[0] & 0x80) {
        for (int i = 1; i < 12; i++) v = v << 8 | f[i];
        return v;
    }
    for (int i = 0; i < 12 && f[i] >= '0' && f[i] <= '7'; i++) v = v << 3 | (uint64_t)(f[i] - '0');
    return v;
}

static void repair(unsigned char *p, size_t n) {
    size_t off = 0;
    while (off + 512 <= n) {
        unsigned char *h = p + off;
        int zero = 1;
        for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
        if (zero) return;
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < 512; i++) sum += h[i];
        char ck[8];
        snprintf(ck, sizeof ck, "%06o", sum & 0777777);
        memcpy(h + 148, ck, 7);
        uint64_t size = field_size(h + 124);
        if (h[156] >= '1' && h[156] <= '6') size = 0;
        if (size > n) return;
        off += 512 + (size_t)((size + 511) / 512 * 512);
    }
}

/* gzip of p[0, n) into a malloc'd buffer; NULL on failure. */
static unsigned char *gzip(const unsigned char *p, size_t n, size_t *out_len) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return NULL;
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    unsigned char *out = malloc(cap);
    if (!out) {
        deflateEnd(&z);
        return NULL;
    }
    z.next_in = (unsigned char *)p;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int ret = deflate(&z, Z_FINISH);
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    if (ret != Z_STREAM_END) {
        free(out);
        return NULL;
    }
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t sel = data[0];
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.format = LF_INPUT_WDS;
    o.mode = sel & 1 ? LF_RECORD_SFT : LF_RECORD_PRETRAIN;
    o.skip_bad_records = (sel >> 1) & 1;
    o.max_record_bytes = (sel >> 2) & 1 ? 16 : 0;
    if ((sel >> 3) & 1) {
        if (o.mode == LF_RECORD_SFT) {
            o.prompt_field = "p";
            o.response_field = "r";
        } else {
            o.text_field = "text";
        }
    }
    unsigned char *buf = malloc(size);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    size_t n = size - 1;
    if ((sel >> 4) & 1) repair(buf, n);
    if ((sel >> 5) & 1) {
        size_t zl;
        unsigned char *z = gzip(buf, n, &zl);
        if (z) {
            free(buf);
            buf = z;
            n = zl;
        }
    }
    const char *path = fuzz_memfile(buf, n);
    free(buf);
    lf_reader *r = NULL;
    lf_status st = lf_reader_open(&r, path, &o);
    fuzz_note("lf_reader_open", st);
    if (st != LF_OK) {
        FUZZ_CHECK(r == NULL);
        FUZZ_CHECK(lf_last_error()[0]);
        return 0;
    }
    FUZZ_CHECK(lf_reader_format(r) == LF_INPUT_WDS);
    uint64_t count = 0;
    for (int i = 0; i < 100000; i++) {
        lf_record rec;
        int eof;
        st = lf_reader_next(r, &rec, &eof);
        if (st != LF_OK) {
            fuzz_note("lf_reader_next", st);
            FUZZ_CHECK(lf_last_error()[0]);
            FUZZ_CHECK(lf_reader_next(r, &rec, &eof) != LF_OK);
            break;
        }
        if (eof) break;
        FUZZ_CHECK(rec.line == rec.index + 1);
        FUZZ_CHECK(rec.index == count + lf_reader_skipped(r));
        count++;
        if (o.mode == LF_RECORD_PRETRAIN) {
            FUZZ_CHECK(rec.text && strlen(rec.text) == rec.text_len && rec.text_len > 0);
            FUZZ_CHECK(valid_utf8(rec.text, rec.text_len));
            FUZZ_CHECK(rec.text_key && !rec.prompt && !rec.response);
            if (o.max_record_bytes) FUZZ_CHECK(rec.text_len <= o.max_record_bytes);
        } else {
            FUZZ_CHECK(rec.prompt && strlen(rec.prompt) == rec.prompt_len);
            FUZZ_CHECK(rec.response && strlen(rec.response) == rec.response_len && rec.response_len > 0);
            FUZZ_CHECK(valid_utf8(rec.prompt, rec.prompt_len) && valid_utf8(rec.response, rec.response_len));
            FUZZ_CHECK(rec.prompt_key && rec.response_key && !rec.text);
        }
    }
    if (!o.skip_bad_records) FUZZ_CHECK(lf_reader_skipped(r) == 0);
    lf_reader_close(r);
    return 0;
}
