/*
 * Token shards: the byte layout is specified in include/llmforge/data.h
 * (64-byte little-endian header, tokens as u16 or u32, optional loss mask,
 * CRC-32 of everything after the header).
 *
 * Writing streams the payload through a fixed 64 KiB buffer to path.tmp with
 * a zero header, computing the CRC on the way; the real header is written
 * last, then the file is fsynced and renamed into place, so a reader never
 * sees a shard whose header claims more than was written.
 *
 * Reading maps the whole file read-only. Every header field is checked
 * against the file before anything is read through it: magic, version,
 * bytes_per_token, flags, reserved bytes, vocab_size and the exact file size
 * implied by n_tokens. Tokens are not range-checked at open (a scan of a
 * large shard on every open would be too slow); the writer refuses tokens
 * >= vocab_size and the CRC guards the payload from then on.
 *
 * llm.c's shards (magic 20240520) open through the same call; see open_llmc.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data_impl.h"

struct lf_shard {
    char *path;
    void *map; /* the whole file, PROT_READ */
    size_t map_len;
    const unsigned char *tokens; /* map + 64 */
    const unsigned char *mask;   /* NULL without a mask */
    size_t n;
    unsigned bpt;
    uint32_t vocab_size;
    int llmc; /* llm.c's format: no mask, no checksum, vocab_size = max token + 1 */
};

/* ---------------------------------------------------------------- write */
static void st_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void st_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static lf_status write_full(int fd, const char *path, const unsigned char *p, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return lf_fail(LF_ERR_IO, "shard '%s': write failed: %s", path, strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return LF_OK;
}

#define WRITE_BUF_BYTES (1u << 16)

lf_status lf_shard_write(const char *path, const uint32_t *tokens, const uint8_t *mask, size_t n, uint32_t vocab_size) {
    if (!path || !*path) return lf_fail(LF_ERR_INVALID_ARG, "lf_shard_write: empty path");
    if (n > 0 && !tokens) return lf_fail(LF_ERR_INVALID_ARG, "shard '%s': %zu tokens but no token array", path, n);
    if (vocab_size == 0) return lf_fail(LF_ERR_INVALID_ARG, "shard '%s': vocab_size must be at least 1", path);
    if (n > (SIZE_MAX - LF_SHARD_HEADER_BYTES) / 5)
        return lf_fail(LF_ERR_RANGE, "shard '%s': %zu tokens is too many for one file", path, n);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= vocab_size)
            return lf_fail(LF_ERR_RANGE, "shard '%s': token %u at index %zu is not below vocab_size %u", path,
                           (unsigned)tokens[i], i, (unsigned)vocab_size);

    const unsigned bpt = vocab_size <= 65536u ? 2u : 4u;
    lf_status st = LF_OK;
    int fd = -1;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    char *dir = lf__path_dir(path);
    unsigned char *buf = malloc(WRITE_BUF_BYTES);
    if (!tmp || !dir || !buf) {
        st = lf_fail(LF_ERR_NOMEM, "shard '%s': out of memory", path);
        goto fail;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': cannot create '%s': %s", path, tmp, strerror(errno));
        goto fail;
    }
    unsigned char hdr[LF_SHARD_HEADER_BYTES] = {0};
    if ((st = write_full(fd, path, hdr, sizeof hdr)) != LF_OK) goto fail;

    uint32_t crc = lf_crc32(0, NULL, 0);
    const size_t per = WRITE_BUF_BYTES / bpt;
    for (size_t i = 0; i < n; i += per) {
        size_t m = n - i < per ? n - i : per;
        if (bpt == 2)
            for (size_t k = 0; k < m; k++) {
                buf[2 * k] = (unsigned char)tokens[i + k];
                buf[2 * k + 1] = (unsigned char)(tokens[i + k] >> 8);
            }
        else
            for (size_t k = 0; k < m; k++) st_u32(buf + 4 * k, tokens[i + k]);
        crc = lf_crc32(crc, buf, m * bpt);
        if ((st = write_full(fd, path, buf, m * bpt)) != LF_OK) goto fail;
    }
    if (mask) {
        for (size_t i = 0; i < n; i += WRITE_BUF_BYTES) {
            size_t m = n - i < WRITE_BUF_BYTES ? n - i : WRITE_BUF_BYTES;
            for (size_t k = 0; k < m; k++) buf[k] = mask[i + k] ? 1 : 0; /* stored as exactly 0/1 */
            crc = lf_crc32(crc, buf, m);
            if ((st = write_full(fd, path, buf, m)) != LF_OK) goto fail;
        }
    }

    memcpy(hdr, LF_SHARD_MAGIC, sizeof LF_SHARD_MAGIC); /* 7 chars + NUL = 8 bytes */
    st_u32(hdr + 8, LF_SHARD_VERSION);
    st_u32(hdr + 12, bpt);
    st_u64(hdr + 16, (uint64_t)n);
    st_u32(hdr + 24, mask ? LF_SHARD_FLAG_MASK : 0u);
    st_u32(hdr + 28, vocab_size);
    st_u32(hdr + 32, crc);
    if (lseek(fd, 0, SEEK_SET) != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': seek failed: %s", path, strerror(errno));
        goto fail;
    }
    if ((st = write_full(fd, path, hdr, sizeof hdr)) != LF_OK) goto fail;
    if (fsync(fd) != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': fsync failed: %s", path, strerror(errno));
        goto fail;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': close failed: %s", path, strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': cannot rename '%s' into place: %s", path, tmp, strerror(errno));
        goto fail;
    }
    st = lf_fsync_dir(dir);
    free(tmp);
    free(dir);
    free(buf);
    return st;

fail:
    if (fd >= 0) close(fd);
    if (tmp) unlink(tmp);
    free(tmp);
    free(dir);
    free(buf);
    return st;
}

/* ---------------------------------------------------------------- open */
static uint64_t ld_u64(const unsigned char *p) {
    return (uint64_t)lf__ld_u32le(p) | (uint64_t)lf__ld_u32le(p + 4) << 32;
}

/* llm.c's shard (dev/data/data_common.py write_datafile): 256 little-endian
 * int32 header words, [0] = magic 20240520, [1] = version (1: u16 GPT-2
 * tokens, 2: u32 tokens), [2] = number of tokens; then the tokens. It has
 * no vocabulary size and no checksum, so open scans the tokens once and
 * records max + 1 as the shard's vocab_size (the dataset checks it against
 * the vocabulary it was given). */
static lf_status open_llmc(lf_shard *s, const char *path, const unsigned char *h, size_t size) {
    if (size < LF_LLMC_HEADER_BYTES)
        return lf_fail(LF_ERR_FORMAT, "shard '%s': llm.c shard of %zu bytes, less than its %d-byte header", path, size,
                       LF_LLMC_HEADER_BYTES);
    uint32_t version = lf__ld_u32le(h + 4), n = lf__ld_u32le(h + 8);
    if (version != 1 && version != 2)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "shard '%s': llm.c shard version %u, this build reads versions 1 (u16 "
                       "tokens) and 2 (u32 tokens)",
                       path, (unsigned)version);
    if (n > INT32_MAX)
        return lf_fail(LF_ERR_FORMAT, "shard '%s': llm.c header says %u tokens, a negative int32", path, (unsigned)n);
    const unsigned bpt = version == 1 ? 2u : 4u;
    uint64_t expect = LF_LLMC_HEADER_BYTES + (uint64_t)n * bpt;
    if (expect != (uint64_t)size)
        return lf_fail(LF_ERR_FORMAT, "shard '%s': llm.c header says %u tokens (%llu bytes), file holds %zu bytes",
                       path, (unsigned)n, (unsigned long long)expect, size);
    const unsigned char *tok = h + LF_LLMC_HEADER_BYTES;
    uint32_t max = 0;
    if (bpt == 2) {
        for (size_t i = 0; i < n; i++) {
            uint32_t v = lf__ld_u16le(tok + 2 * i);
            max = v > max ? v : max;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint32_t v = lf__ld_u32le(tok + 4 * i);
            max = v > max ? v : max;
        }
        if (max == UINT32_MAX)
            return lf_fail(LF_ERR_FORMAT, "shard '%s': llm.c shard holds token id %u", path, (unsigned)max);
    }
    s->n = n;
    s->bpt = bpt;
    s->vocab_size = max + 1;
    s->tokens = tok;
    s->mask = NULL;
    s->llmc = 1;
    return LF_OK;
}

lf_status lf_shard_open(lf_shard **out, const char *path, int verify_checksum) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_shard_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return lf_fail(LF_ERR_INVALID_ARG, "lf_shard_open: empty path");

    lf_status st = LF_OK;
    void *map = MAP_FAILED;
    size_t size = 0;
    lf_shard *s = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
    if (fd < 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "shard '%s': cannot open: %s", path,
                       strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = lf_fail(LF_ERR_IO, "shard '%s': not a regular file", path);
        goto fail;
    }
    size = (size_t)sb.st_size;
    if (size < LF_SHARD_HEADER_BYTES) {
        st = lf_fail(LF_ERR_FORMAT, "shard '%s': file holds %zu bytes, less than the %d-byte header", path, size,
                     LF_SHARD_HEADER_BYTES);
        goto fail;
    }
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        st = lf_fail(LF_ERR_IO, "shard '%s': mmap of %zu bytes failed: %s", path, size, strerror(errno));
        goto fail;
    }
    close(fd); /* the mapping keeps the file */
    fd = -1;

    const unsigned char *h = map;
    if (lf__ld_u32le(h) == LF_LLMC_MAGIC) {
        s = calloc(1, sizeof *s);
        if (!s || !(s->path = malloc(strlen(path) + 1))) {
            st = lf_fail(LF_ERR_NOMEM, "shard '%s': out of memory", path);
            goto fail;
        }
        strcpy(s->path, path);
        if ((st = open_llmc(s, path, h, size)) != LF_OK) goto fail;
        s->map = map;
        s->map_len = size;
        *out = s;
        return LF_OK;
    }
    if (memcmp(h, LF_SHARD_MAGIC, sizeof LF_SHARD_MAGIC) != 0) {
        st = lf_fail(LF_ERR_FORMAT, "shard '%s': bad magic (neither an llmforge token shard nor an llm.c one)", path);
        goto fail;
    }
    uint32_t version = lf__ld_u32le(h + 8), bpt = lf__ld_u32le(h + 12);
    uint64_t n = ld_u64(h + 16);
    uint32_t flags = lf__ld_u32le(h + 24), vocab = lf__ld_u32le(h + 28), crc = lf__ld_u32le(h + 32);
    if (version != LF_SHARD_VERSION) {
        st = lf_fail(LF_ERR_UNSUPPORTED, "shard '%s': format version %u, this build reads version %d", path,
                     (unsigned)version, LF_SHARD_VERSION);
        goto fail;
    }
    if (bpt != 2 && bpt != 4) {
        st = lf_fail(LF_ERR_FORMAT, "shard '%s': bytes_per_token is %u, must be 2 or 4", path, (unsigned)bpt);
        goto fail;
    }
    if (flags & ~LF_SHARD_FLAG_MASK) {
        st = lf_fail(LF_ERR_FORMAT, "shard '%s': unknown flag bits 0x%X", path,
                     (unsigned)(flags & ~LF_SHARD_FLAG_MASK));
        goto fail;
    }
    for (int i = 36; i < LF_SHARD_HEADER_BYTES; i++) {
        if (h[i] != 0) {
            st = lf_fail(LF_ERR_FORMAT, "shard '%s': reserved header byte %d is 0x%02X, must be 0", path, i, h[i]);
            goto fail;
        }
    }
    if (vocab == 0) {
        st = lf_fail(LF_ERR_FORMAT, "shard '%s': vocab_size is 0", path);
        goto fail;
    }
    if (bpt == 2 && vocab > 65536u) {
        st = lf_fail(LF_ERR_FORMAT, "shard '%s': vocab_size %u does not fit 2-byte tokens", path, (unsigned)vocab);
        goto fail;
    }
    const int has_mask = (flags & LF_SHARD_FLAG_MASK) != 0;
    const unsigned per_token = bpt + (has_mask ? 1u : 0u);
    if (n > (UINT64_MAX - LF_SHARD_HEADER_BYTES) / per_token) {
        st = lf_fail(LF_ERR_FORMAT,
                     "shard '%s': header says %llu tokens, more than any file can hold, file holds %zu bytes", path,
                     (unsigned long long)n, size);
        goto fail;
    }
    uint64_t expect = LF_SHARD_HEADER_BYTES + n * per_token;
    if (expect != (uint64_t)size) {
        st = lf_fail(LF_ERR_FORMAT, "shard '%s': header says %llu tokens%s (%llu bytes), file holds %zu bytes", path,
                     (unsigned long long)n, has_mask ? " with a loss mask" : "", (unsigned long long)expect, size);
        goto fail;
    }
    if (verify_checksum) {
        uint32_t got = lf_crc32(0, h + LF_SHARD_HEADER_BYTES, size - LF_SHARD_HEADER_BYTES);
        if (got != crc) {
            st = lf_fail(LF_ERR_CHECKSUM, "shard '%s': payload checksum mismatch (header 0x%08X, computed 0x%08X)",
                         path, (unsigned)crc, (unsigned)got);
            goto fail;
        }
    }

    s = calloc(1, sizeof *s);
    size_t plen = strlen(path);
    if (!s || !(s->path = malloc(plen + 1))) {
        st = lf_fail(LF_ERR_NOMEM, "shard '%s': out of memory", path);
        goto fail;
    }
    memcpy(s->path, path, plen + 1);
    s->map = map;
    s->map_len = size;
    s->n = (size_t)n;
    s->bpt = bpt;
    s->vocab_size = vocab;
    s->tokens = h + LF_SHARD_HEADER_BYTES;
    s->mask = has_mask ? s->tokens + (size_t)n * bpt : NULL;
    *out = s;
    return LF_OK;

fail:
    if (s) free(s->path);
    free(s);
    if (map != MAP_FAILED) munmap(map, size);
    if (fd >= 0) close(fd);
    return st;
}

void lf_shard_close(lf_shard *s) {
    if (!s) return;
    munmap(s->map, s->map_len);
    free(s->path);
    free(s);
}

/* ---------------------------------------------------------------- accessors */
size_t lf_shard_num_tokens(const lf_shard *s) { return s ? s->n : 0; }
uint32_t lf_shard_vocab_size(const lf_shard *s) { return s ? s->vocab_size : 0; }
int lf_shard_has_mask(const lf_shard *s) { return s && s->mask != NULL; }
int lf_shard_is_llmc(const lf_shard *s) { return s && s->llmc; }

uint32_t lf_shard_token(const lf_shard *s, size_t i) {
    if (!s || i >= s->n) return 0;
    return s->bpt == 2 ? lf__ld_u16le(s->tokens + 2 * i) : lf__ld_u32le(s->tokens + 4 * i);
}

int lf_shard_mask(const lf_shard *s, size_t i) {
    if (!s || !s->mask || i >= s->n) return 1;
    return s->mask[i] != 0;
}

const unsigned char *lf__shard_token_bytes(const lf_shard *s) { return s->tokens; }
unsigned lf__shard_bytes_per_token(const lf_shard *s) { return s->bpt; }
const unsigned char *lf__shard_mask_bytes(const lf_shard *s) { return s->mask; }
const char *lf__shard_path(const lf_shard *s) { return s->path; }
