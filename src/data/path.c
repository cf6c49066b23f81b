/*
 * Small file-system helpers of the data module: joining paths and writing a
 * file atomically (path.tmp, fsync, rename, fsync of the directory), so a
 * reader sees either the old file or the complete new one, never a torn one.
 */
#include <dirent.h>
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

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

lf_status lf__list_dir_sorted(const char *dir, int skip_hidden, char ***names_out, size_t *n_out) {
    *names_out = NULL;
    *n_out = 0;
    lf_status st = LF_OK;
    char **names = NULL;
    size_t n = 0, cap = 0;
    DIR *d = opendir(dir);
    if (!d) return lf_fail(LF_ERR_IO, "input directory '%s': cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (skip_hidden && e->d_name[0] == '.') continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) {
                st = lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", dir);
                break;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = malloc(strlen(e->d_name) + 1))) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", dir);
            break;
        }
        strcpy(names[n++], e->d_name);
        errno = 0;
    }
    if (st == LF_OK && errno != 0)
        st = lf_fail(LF_ERR_IO, "input directory '%s': cannot list: %s", dir, strerror(errno));
    closedir(d);
    if (st != LF_OK) {
        lf__free_names(names, n);
        return st;
    }
    if (n) qsort(names, n, sizeof *names, cmp_name);
    *names_out = names;
    *n_out = n;
    return LF_OK;
}

void lf__free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}
