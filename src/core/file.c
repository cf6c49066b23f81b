/* Files (read/write with fsync, mkdir -p), hashing (SHA-256 through OpenSSL,
 * CRC-32 through zlib) and the monotonic clock. The writers go through
 * core/io_impl.h, so the write-fault hook (lf_io_fail_after) reaches them;
 * a write that fails removes what it half wrote. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <zlib.h>
#include "core/io_impl.h"
#include "llmforge/core.h"

/* Open a regular file for reading. O_NONBLOCK keeps a FIFO from blocking
 * the open itself (it is then refused as not regular); devices such as
 * /dev/zero are refused too, so no read here can run forever. */
static lf_status open_regular(const char *path, FILE **out, struct stat *st) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return lf_fail(LF_ERR_IO, "'%s' is not a regular file", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return lf_fail(LF_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    }
    *out = f;
    return LF_OK;
}

lf_status lf_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    FILE *f;
    struct stat st;
    lf_status os = open_regular(path, &f, &st);
    if (os != LF_OK) return os;
    size_t size = (size_t)st.st_size;
    if (max_bytes && size > max_bytes) {
        fclose(f);
        return lf_fail(LF_ERR_RANGE, "'%s' is %zu bytes, more than the %zu allowed", path, size, max_bytes);
    }
    char *buf = lf_alloc(size + 1);
    if (!buf) {
        fclose(f);
        return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s' (%zu bytes)", path, size);
    }
    size_t got = fread(buf, 1, size, f);
    int err = ferror(f);
    fclose(f);
    if (got != size || err) {
        lf_free(buf);
        return lf_fail(LF_ERR_IO, "short read on '%s': %zu of %zu bytes", path, got, size);
    }
    buf[size] = 0;
    *out = buf;
    if (len) *len = size;
    return LF_OK;
}

lf_status lf_file_write_all(const char *path, const void *data, size_t len) {
    int fd = lf__io_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return lf_fail(LF_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    const unsigned char *p = data;
    size_t left = len;
    int e = 0;
    const char *what = NULL;
    while (left > 0) {
        ssize_t w = lf__io_write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            e = errno;
            what = "write to";
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (!what && lf__io_fsync(fd) != 0) {
        e = errno;
        what = "fsync of";
    }
    if (lf__io_close(fd) != 0 && !what) {
        e = errno;
        what = "close of";
    }
    if (!what) return LF_OK;
    unlink(path); /* no half-written file stays behind (an empty latest.tmp, say) */
    return lf_fail(LF_ERR_IO, "%s '%s' failed: %s", what, path, strerror(e));
}

lf_status lf_fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return lf_fail(LF_ERR_IO, "cannot open directory '%s': %s", path, strerror(errno));
    int rc = lf__io_fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) return lf_fail(LF_ERR_IO, "fsync of directory '%s' failed: %s", path, strerror(e));
    return LF_OK;
}

lf_status lf_mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return lf_fail(LF_ERR_INVALID_ARG, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (lf__io_mkdir(buf, 0755) != 0 && errno != EEXIST)
                return lf_fail(LF_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return lf_fail(LF_ERR_IO, "'%s' exists and is not a directory", path);
    if (access(path, W_OK) != 0) return lf_fail(LF_ERR_IO, "directory '%s' is not writable: %s", path, strerror(errno));
    return LF_OK;
}

static void to_hex(const unsigned char *d, unsigned n, char *hex) {
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * n] = 0;
}

void lf_sha256_hex(const void *data, size_t len, char hex[65]) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_Digest(data, len, d, &n, EVP_sha256(), NULL);
    to_hex(d, n, hex);
}

lf_status lf_sha256_file_hex(const char *path, char hex[65]) {
    FILE *f;
    struct stat sb;
    lf_status os = open_regular(path, &f, &sb);
    if (os != LF_OK) return os;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) {
        fclose(f);
        return lf_fail(LF_ERR_NOMEM, "out of memory hashing '%s'", path);
    }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) EVP_DigestUpdate(ctx, buf, got);
    int err = ferror(f);
    fclose(f);
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_DigestFinal_ex(ctx, d, &n);
    EVP_MD_CTX_free(ctx);
    if (err) return lf_fail(LF_ERR_IO, "read error hashing '%s'", path);
    to_hex(d, n, hex);
    return LF_OK;
}

uint32_t lf_crc32(uint32_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    uLong c = crc;
    while (len > 0) { /* zlib takes uInt lengths */
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return (uint32_t)c;
}

double lf_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- removing a tree */

int lf_remove_tree_at(int dfd, const char *name, int depth) {
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return unlinkat(dfd, name, 0);
    if (depth > 16) {
        errno = ELOOP;
        return -1;
    }
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        if (lf_remove_tree_at(dirfd(d), de->d_name, depth + 1) != 0) rc = -1;
    }
    closedir(d);
    return rc != 0 ? -1 : unlinkat(dfd, name, AT_REMOVEDIR);
}

int lf_remove_tree(const char *path) { return lf_remove_tree_at(AT_FDCWD, path, 0); }
