/*
 * Small file-system helpers of the data module: joining paths and writing a
 * file atomically (path.tmp, fsync, rename, fsync of the directory), so a
 * reader sees either the old file or the complete new one, never a torn one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

char *lf__path_join(const char *dir, const char *name) {
    size_t nd = dir ? strlen(dir) : 0, nn = strlen(name);
    if (nd == 0 || name[0] == '/') {
        char *p = malloc(nn + 1);
        if (p) memcpy(p, name, nn + 1);
        return p;
    }
    int slash = dir[nd - 1] != '/';
    char *p = malloc(nd + (size_t)slash + nn + 1);
    if (!p) return NULL;
    memcpy(p, dir, nd);
    if (slash) p[nd] = '/';
    memcpy(p + nd + slash, name, nn + 1);
    return p;
}

char *lf__path_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return lf__path_join(NULL, ".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

lf_status lf__file_write_atomic(const char *path, const void *data, size_t len) {
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    char *dir = lf__path_dir(path);
    lf_status st = LF_OK;
    if (!tmp || !dir) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory writing '%s'", path);
        goto done;
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    st = lf_file_write_all(tmp, data, len);
    if (st != LF_OK) {
        remove(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        st = lf_fail(LF_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        remove(tmp);
        goto done;
    }
    st = lf_fsync_dir(dir);
done:
    free(tmp);
    free(dir);
    return st;
}
