/*
 * Streaming token-shard writers: lf_shard_writer (one shard whose tokens
 * arrive in pieces) and lf_split_writer (the shards of one split, rolling to
 * the next file every max_tokens tokens). The byte layout is specified in
 * include/llmforge/data.h; the files are byte for byte what lf_shard_write
 * (shard.c) gives for the same tokens and mask.
 *
 * Invariants:
 *  - Memory is fixed: one LF_SHARD_WRITER_BUF_BYTES token buffer and one
 *    mask buffer of a quarter of that, whatever the number of tokens.
 *  - The header goes in last. path.tmp starts with 64 zero bytes; tokens are
 *    encoded little-endian into the buffer, and each full buffer is added to
 *    the CRC and written. The mask cannot be written in place before the
 *    token count is known, so it goes to a side file (path.mask.tmp) and is
 *    copied after the tokens at close, continuing the same CRC. Then the
 *    header, fsync, rename path.tmp -> path, fsync of the directory: a reader
 *    of path sees the old file or the complete new one, never a part.
 *  - Every token is checked against vocab_size before it is buffered, so a
 *    shard on disk never holds an id its header says is out of range.
 *  - A failure leaves the writer "failed": nothing more is written, and
 *    close or free removes the temporary files.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data_impl.h"

#define MASK_BUF_BYTES (LF_SHARD_WRITER_BUF_BYTES / 4)

struct lf_shard_writer {
    char *path, *tmp, *mtmp; /* mtmp: NULL without a mask */
    char *dir;
    int fd, mfd; /* mfd: -1 without a mask */
    uint32_t vocab_size;
    unsigned bpt;       /* 2 or 4 */
    uint64_t n;         /* tokens appended */
    uint32_t crc;       /* CRC-32 of the token bytes written to fd so far */
    unsigned char *buf; /* (LF_SHARD_WRITER_BUF_BYTES) token bytes not yet written */
    size_t blen;
    unsigned char *mbuf; /* (MASK_BUF_BYTES) mask bytes not yet written */
    size_t mlen;
    int failed;
};

/* ---------------------------------------------------------------- small helpers */
static void st_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void st_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static lf_status write_full(int fd, const char *shard, const char *file, const unsigned char *p, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return lf_fail(LF_ERR_IO, "shard '%s': write to '%s' failed: %s", shard, file, strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return LF_OK;
}

static char *concat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (s) {
        memcpy(s, a, na);
        memcpy(s + na, b, nb + 1);
    }
    return s;
}

/* ---------------------------------------------------------------- lf_shard_writer */
void lf_shard_writer_free(lf_shard_writer *w) {
    if (!w) return;
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp);
    }
    if (w->mfd >= 0) {
        close(w->mfd);
        unlink(w->mtmp);
    }
    free(w->path);
    free(w->tmp);
    free(w->mtmp);
    free(w->dir);
    free(w->buf);
    free(w->mbuf);
    free(w);
}

lf_status lf_shard_writer_open(lf_shard_writer **out, const char *path, uint32_t vocab_size, int has_mask) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_shard_writer_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return lf_fail(LF_ERR_INVALID_ARG, "lf_shard_writer_open: empty path");
    if (vocab_size == 0) return lf_fail(LF_ERR_INVALID_ARG, "shard '%s': vocab_size must be at least 1", path);
    lf_status st = LF_OK;
    lf_shard_writer *w = calloc(1, sizeof *w);
    if (!w) return lf_fail(LF_ERR_NOMEM, "shard '%s': out of memory", path);
    w->fd = w->mfd = -1;
    w->vocab_size = vocab_size;
    w->bpt = vocab_size <= 65536u ? 2u : 4u;
    w->crc = lf_crc32(0, NULL, 0);
    w->path = concat(path, "");
    w->tmp = concat(path, ".tmp");
    w->dir = lf__path_dir(path);
    w->buf = malloc(LF_SHARD_WRITER_BUF_BYTES);
    if (has_mask) {
        w->mtmp = concat(path, ".mask.tmp");
        w->mbuf = malloc(MASK_BUF_BYTES);
    }
    if (!w->path || !w->tmp || !w->dir || !w->buf || (has_mask && (!w->mtmp || !w->mbuf))) {
        st = lf_fail(LF_ERR_NOMEM, "shard '%s': out of memory", path);
        goto fail;
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': cannot create '%s': %s", path, w->tmp, strerror(errno));
        goto fail;
    }
    if (has_mask) {
        w->mfd = open(w->mtmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (w->mfd < 0) {
            st = lf_fail(LF_ERR_IO, "shard '%s': cannot create '%s': %s", path, w->mtmp, strerror(errno));
            goto fail;
        }
    }
    unsigned char hdr[LF_SHARD_HEADER_BYTES] = {0};
    if ((st = write_full(w->fd, path, w->tmp, hdr, sizeof hdr)) != LF_OK) goto fail;
    *out = w;
    return LF_OK;
fail:
    lf_shard_writer_free(w);
    return st;
}

static lf_status flush_tokens(lf_shard_writer *w) {
    if (w->blen == 0) return LF_OK;
    w->crc = lf_crc32(w->crc, w->buf, w->blen);
    lf_status st = write_full(w->fd, w->path, w->tmp, w->buf, w->blen);
    w->blen = 0;
    return st;
}

static lf_status flush_mask(lf_shard_writer *w) {
    if (w->mlen == 0) return LF_OK;
    lf_status st = write_full(w->mfd, w->path, w->mtmp, w->mbuf, w->mlen);
    w->mlen = 0;
    return st;
}

lf_status lf_shard_writer_append(lf_shard_writer *w, const uint32_t *tokens, const uint8_t *mask, size_t n) {
    if (!w) return lf_fail(LF_ERR_INVALID_ARG, "lf_shard_writer_append: writer is NULL");
    if (w->failed) return lf_fail(LF_ERR_INVALID_ARG, "shard '%s': the writer stopped at an earlier error", w->path);
    if (n == 0) return LF_OK;
    if (!tokens) return lf_fail(LF_ERR_INVALID_ARG, "shard '%s': %zu tokens but no token array", w->path, n);
    lf_status st = LF_OK;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= w->vocab_size) {
            st = lf_fail(LF_ERR_RANGE, "shard '%s': token %u at index %llu is not below vocab_size %u", w->path,
                         (unsigned)tokens[i], (unsigned long long)(w->n + i), (unsigned)w->vocab_size);
            goto fail;
        }
    const size_t per = LF_SHARD_WRITER_BUF_BYTES / w->bpt;
    for (size_t i = 0; i < n;) {
        size_t room = per - w->blen / w->bpt, m = n - i < room ? n - i : room;
        unsigned char *b = w->buf + w->blen;
        if (w->bpt == 2)
            for (size_t k = 0; k < m; k++) {
                b[2 * k] = (unsigned char)tokens[i + k];
                b[2 * k + 1] = (unsigned char)(tokens[i + k] >> 8);
            }
        else
            for (size_t k = 0; k < m; k++) st_u32(b + 4 * k, tokens[i + k]);
        w->blen += m * w->bpt;
        i += m;
        if (w->blen == LF_SHARD_WRITER_BUF_BYTES && (st = flush_tokens(w)) != LF_OK) goto fail;
    }
    if (w->mfd >= 0) {
        for (size_t i = 0; i < n;) {
            size_t room = MASK_BUF_BYTES - w->mlen, m = n - i < room ? n - i : room;
            if (mask)
                for (size_t k = 0; k < m; k++) w->mbuf[w->mlen + k] = mask[i + k] ? 1 : 0; /* stored as 0/1 */
            else memset(w->mbuf + w->mlen, 1, m);
            w->mlen += m;
            i += m;
            if (w->mlen == MASK_BUF_BYTES && (st = flush_mask(w)) != LF_OK) goto fail;
        }
    }
    w->n += n;
    return LF_OK;
fail:
    w->failed = 1;
    return st;
}

uint64_t lf_shard_writer_num_tokens(const lf_shard_writer *w) { return w ? w->n : 0; }

/* Copy the mask side file after the tokens, continuing the CRC. */
static lf_status copy_mask(lf_shard_writer *w) {
    lf_status st = flush_mask(w);
    if (st != LF_OK) return st;
    if (lseek(w->mfd, 0, SEEK_SET) != 0)
        return lf_fail(LF_ERR_IO, "shard '%s': seek in '%s' failed: %s", w->path, w->mtmp, strerror(errno));
    uint64_t left = w->n;
    while (left > 0) {
        size_t want = left < LF_SHARD_WRITER_BUF_BYTES ? (size_t)left : LF_SHARD_WRITER_BUF_BYTES;
        ssize_t got = read(w->mfd, w->buf, want);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return lf_fail(LF_ERR_IO, "shard '%s': read of '%s' failed: %s", w->path, w->mtmp, strerror(errno));
        if (got == 0)
            return lf_fail(LF_ERR_IO, "shard '%s': '%s' ends %llu mask bytes early (changed while written?)", w->path,
                           w->mtmp, (unsigned long long)left);
        w->crc = lf_crc32(w->crc, w->buf, (size_t)got);
        if ((st = write_full(w->fd, w->path, w->tmp, w->buf, (size_t)got)) != LF_OK) return st;
        left -= (uint64_t)got;
    }
    return LF_OK;
}

lf_status lf_shard_writer_close(lf_shard_writer *w) {
    if (!w) return LF_OK;
    lf_status st;
    if (w->failed) {
        st = lf_fail(LF_ERR_INVALID_ARG, "shard '%s': not finished, the writer stopped at an earlier error", w->path);
        goto done;
    }
    if ((st = flush_tokens(w)) != LF_OK) goto done;
    if (w->mfd >= 0 && (st = copy_mask(w)) != LF_OK) goto done;
    unsigned char hdr[LF_SHARD_HEADER_BYTES] = {0};
    memcpy(hdr, LF_SHARD_MAGIC, sizeof LF_SHARD_MAGIC); /* 7 chars + NUL = 8 bytes */
    st_u32(hdr + 8, LF_SHARD_VERSION);
    st_u32(hdr + 12, w->bpt);
    st_u64(hdr + 16, w->n);
    st_u32(hdr + 24, w->mfd >= 0 ? LF_SHARD_FLAG_MASK : 0u);
    st_u32(hdr + 28, w->vocab_size);
    st_u32(hdr + 32, w->crc);
    if (lseek(w->fd, 0, SEEK_SET) != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': seek failed: %s", w->path, strerror(errno));
        goto done;
    }
    if ((st = write_full(w->fd, w->path, w->tmp, hdr, sizeof hdr)) != LF_OK) goto done;
    if (fsync(w->fd) != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': fsync failed: %s", w->path, strerror(errno));
        goto done;
    }
    int rc = close(w->fd);
    w->fd = -1;
    if (rc != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': close failed: %s", w->path, strerror(errno));
        unlink(w->tmp);
        goto done;
    }
    if (rename(w->tmp, w->path) != 0) {
        st = lf_fail(LF_ERR_IO, "shard '%s': cannot rename '%s' into place: %s", w->path, w->tmp, strerror(errno));
        unlink(w->tmp);
        goto done;
    }
    st = lf_fsync_dir(w->dir);
done:
    lf_shard_writer_free(w); /* removes path.tmp (when still open) and path.mask.tmp */
    return st;
}

/* ---------------------------------------------------------------- lf_split_writer */
struct lf_split_writer {
    char *dir, *name;
    uint32_t vocab_size;
    int has_mask;
    uint64_t max_tokens;
    lf_shard_writer *cur; /* the shard being written, NULL between shards */
    uint64_t shards;      /* finished shards */
    uint64_t tokens;      /* tokens appended */
};

lf_status lf_split_writer_open(lf_split_writer **out, const char *dir, const char *name, uint32_t vocab_size,
                               int has_mask, uint64_t max_tokens) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_split_writer_open: out is NULL");
    *out = NULL;
    if (!dir || !*dir || !name || !*name)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_split_writer_open: empty directory or split name");
    if (vocab_size == 0)
        return lf_fail(LF_ERR_INVALID_ARG, "split '%s' in '%s': vocab_size must be at least 1", name, dir);
    lf_split_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = concat(dir, "")) || !(w->name = concat(name, ""))) {
        lf_split_writer_free(w);
        return lf_fail(LF_ERR_NOMEM, "split '%s': out of memory", name);
    }
    w->vocab_size = vocab_size;
    w->has_mask = has_mask != 0;
    w->max_tokens = max_tokens ? max_tokens : LF_PREPARE_SHARD_TOKENS;
    *out = w;
    return LF_OK;
}

lf_status lf_split_writer_shard_name(const lf_split_writer *w, uint64_t k, char *buf, size_t size) {
    if (!w || !buf) return lf_fail(LF_ERR_INVALID_ARG, "lf_split_writer_shard_name: NULL argument");
    int len = snprintf(buf, size, "%s_%03llu.bin", w->name, (unsigned long long)k);
    if (len < 0 || (size_t)len >= size)
        return lf_fail(LF_ERR_RANGE, "split '%s': shard name %llu does not fit %zu bytes", w->name,
                       (unsigned long long)k, size);
    return LF_OK;
}

static char *shard_path(const lf_split_writer *w, uint64_t k) {
    char name[512];
    if (lf_split_writer_shard_name(w, k, name, sizeof name) != LF_OK) return NULL;
    return lf__path_join(w->dir, name);
}

lf_status lf_split_writer_finish(lf_split_writer *w) {
    if (!w) return lf_fail(LF_ERR_INVALID_ARG, "lf_split_writer_finish: writer is NULL");
    if (!w->cur) return LF_OK;
    lf_status st = lf_shard_writer_close(w->cur);
    w->cur = NULL;
    if (st == LF_OK) w->shards++;
    return st;
}

lf_status lf_split_writer_append(lf_split_writer *w, const uint32_t *tokens, const uint8_t *mask, size_t n) {
    if (!w) return lf_fail(LF_ERR_INVALID_ARG, "lf_split_writer_append: writer is NULL");
    lf_status st;
    while (n > 0) {
        if (!w->cur) {
            char *path = shard_path(w, w->shards);
            if (!path) return lf_fail(LF_ERR_NOMEM, "split '%s': out of memory", w->name);
            st = lf_shard_writer_open(&w->cur, path, w->vocab_size, w->has_mask);
            free(path);
            if (st != LF_OK) return st;
        }
        uint64_t have = lf_shard_writer_num_tokens(w->cur), room = w->max_tokens - have;
        size_t take = (uint64_t)n < room ? n : (size_t)room;
        if ((st = lf_shard_writer_append(w->cur, tokens, mask, take)) != LF_OK) return st;
        w->tokens += take;
        tokens += take;
        if (mask) mask += take;
        n -= take;
        if (have + take == w->max_tokens && (st = lf_split_writer_finish(w)) != LF_OK) return st;
    }
    return LF_OK;
}

uint64_t lf_split_writer_num_shards(const lf_split_writer *w) { return w ? w->shards : 0; }
uint64_t lf_split_writer_num_tokens(const lf_split_writer *w) { return w ? w->tokens : 0; }

void lf_split_writer_remove_shards(lf_split_writer *w) {
    if (!w) return;
    for (uint64_t k = 0; k < w->shards; k++) {
        char *path = shard_path(w, k);
        if (path) unlink(path);
        free(path);
    }
    w->shards = 0; /* no fsync of the directory: it could replace the caller's error message */
}

void lf_split_writer_free(lf_split_writer *w) {
    if (!w) return;
    lf_shard_writer_free(w->cur);
    free(w->dir);
    free(w->name);
    free(w);
}
