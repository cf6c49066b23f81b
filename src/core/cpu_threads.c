/*
 * The default compute thread count: the CPUs this process is granted.
 *
 * Three limits, the smallest wins (at least 1):
 * - the CPUs online (sysconf), the upper bound;
 * - the affinity mask (sched_getaffinity with a CPU_ALLOC'd set, grown until
 *   the kernel accepts its size, so machines past 1024 CPUs count right):
 *   taskset, Slurm's and Open MPI's binding, a cpuset cgroup (the kernel
 *   narrows the mask to the cgroup's cpuset.cpus.effective);
 * - a CPU bandwidth limit, which the mask does not show: cgroup v2 cpu.max
 *   ("QUOTA PERIOD" or "max PERIOD", microseconds) or cgroup v1
 *   cpu.cfs_quota_us (-1: none) with cpu.cfs_period_us, in the process's
 *   cgroup and in every ancestor up to the mount point (a parent's limit
 *   binds its children: the tightest quota/period of the chain wins), as
 *   ceil(quota / period) threads.
 *
 * The cgroup is found as runtimes do (Go 1.25's runtime/cgroup, the JDK's
 * CgroupSubsystemFactory): /proc/self/cgroup gives the path ("0::/p" on v2,
 * "N:cpu,cpuacct:/p" on v1), /proc/self/mountinfo the mount of that
 * hierarchy and the cgroup path it shows at its mount point (field 4, "/"
 * inside a cgroup namespace, "/docker/ID" for a container that bind-mounts
 * its own cgroup without one); the path under that root is read below the
 * mount point. Hybrid hosts (v1 controllers with an empty v2 "unified"
 * hierarchy, as systemd set them up before v2 became the default) have both
 * mounts: both are read and the tighter limit wins; a v2 hierarchy without
 * the cpu controller has no cpu.max files, which reads as no limit.
 *
 * Edges: a missing or unreadable file is no limit (containers without the
 * controller, /proc not mounted). A file whose content is not what the
 * kernel writes is skipped (that cgroup counts as unlimited) and named in
 * out->ignored, so the caller can warn: a default thread count is no
 * reason to refuse to run. A cgroup path outside the mount's root (a
 * process moved out of its cgroup namespace: "/../x") is not searched.
 * Nothing here records an error message (lf_fail) except
 * lf_cpu_affinity_list: the detection never fails.
 *
 * Reference: Documentation/admin-guide/cgroup-v2.rst (cpu.max),
 * Documentation/scheduler/sched-bwc.rst (CFS bandwidth, v1 files),
 * proc(5) (/proc/self/mountinfo fields, octal escapes).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_ALLOC */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/cpu_threads_impl.h"
#include "llmforge/core.h"

#define PROC_FILE_MAX ((size_t)4 << 20) /* mountinfo on a busy Kubernetes node: thousands of lines */
#define LIMIT_FILE_MAX 256              /* cpu.max is "max 100000\n"; anything longer is not a limit */
#define AFFINITY_MAX_CPUS (1 << 20)     /* CPU_ALLOC sizes tried, doubling from 1024 */
#define MOUNTINFO_MAX_FIELDS 64

const char *lf_threads_source_name(lf_threads_source s) {
    switch (s) {
    case LF_THREADS_SOURCE_ONLINE: return "online CPUs";
    case LF_THREADS_SOURCE_AFFINITY: return "affinity";
    case LF_THREADS_SOURCE_CGROUP: return "cgroup cpu.max";
    case LF_THREADS_SOURCE_CGROUP_V1: return "cgroup cpu.cfs_quota_us";
    case LF_THREADS_SOURCE_ENV: return "OMP_NUM_THREADS";
    case LF_THREADS_SOURCE_REQUESTED: return "requested";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- reading */
/* The whole of a small file, NUL-terminated (malloc'd), read to EOF: /proc
 * and cgroupfs files report size 0. -1 when it cannot be opened or read, or
 * holds more than cap bytes. No error message is recorded. */
static int read_text(const char *path, size_t cap, char **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    size_t n = 0, size = 4096;
    char *buf = malloc(size + 1);
    while (buf) {
        if (n == size) {
            if (size >= cap) break;
            size = size * 2 > cap ? cap : size * 2;
            char *nb = realloc(buf, size + 1);
            if (!nb) break;
            buf = nb;
        }
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        if (r == 0) {
            close(fd);
            buf[n] = 0;
            *out = buf;
            return 0;
        }
        n += (size_t)r;
    }
    close(fd);
    free(buf);
    return -1;
}

/* proc(5): mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

/* Is `item` one of the comma-separated entries of list[0, len)? */
static int has_item(const char *list, size_t len, const char *item) {
    const size_t n = strlen(item);
    for (size_t i = 0; i <= len;) {
        size_t j = i;
        while (j < len && list[j] != ',') j++;
        if (j - i == n && !memcmp(list + i, item, n)) return 1;
        i = j + 1;
    }
    return 0;
}

typedef struct cg_mount {
    int found;
    char root[LF_CPU_PATH_MAX];  /* the cgroup path seen at the mount point */
    char point[LF_CPU_PATH_MAX]; /* where it is mounted */
} cg_mount;

static void take_mount(cg_mount *m, const char *root, const char *point) {
    if (m->found || strlen(root) >= sizeof m->root || strlen(point) >= sizeof m->point) return;
    strcpy(m->root, root);
    strcpy(m->point, point);
    unescape_octal(m->root);
    unescape_octal(m->point);
    m->found = 1;
}

/* The first cgroup2 mount and the first cgroup (v1) mount with the cpu
 * controller. Each line: ID PARENT MAJ:MIN ROOT POINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS. */
static void find_mounts(char *text, cg_mount *v2, cg_mount *v1) {
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *f[MOUNTINFO_MAX_FIELDS], *save = NULL;
        int nf = 0, sep = -1;
        for (char *t = strtok_r(line, " ", &save); t && nf < MOUNTINFO_MAX_FIELDS; t = strtok_r(NULL, " ", &save)) {
            if (sep < 0 && nf >= 6 && !strcmp(t, "-")) sep = nf;
            f[nf++] = t;
        }
        if (sep < 0 || nf < sep + 4) continue;
        if (!strcmp(f[sep + 1], "cgroup2")) take_mount(v2, f[3], f[4]);
        else if (!strcmp(f[sep + 1], "cgroup") && has_item(f[sep + 3], strlen(f[sep + 3]), "cpu"))
            take_mount(v1, f[3], f[4]);
    }
}

/* The v2 path ("0::PATH") and the v1 cpu controller's ("N:...,cpu,...:PATH")
 * in /proc/self/cgroup's text; "" when absent. */
static void find_paths(char *text, char *v2, char *v1, size_t cap) {
    v2[0] = v1[0] = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || strlen(c2 + 1) >= cap) continue;
        if (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1) snprintf(v2, cap, "%s", c2 + 1);
        else if (has_item(c1 + 1, (size_t)(c2 - c1 - 1), "cpu")) snprintf(v1, cap, "%s", c2 + 1);
    }
}

/* The directory of cgroup `path` under mount m into dir; its length, or -1
 * when the path lies outside what the mount shows. *stop: the mount point's
 * length (the walk up ends there). */
static int cgroup_dir(const cg_mount *m, const char *path, char *dir, size_t cap, size_t *stop) {
    if (path[0] != '/') return -1;
    for (const char *p = strstr(path, "/.."); p; p = strstr(p + 1, "/.."))
        if (p[3] == 0 || p[3] == '/') return -1; /* outside our cgroup namespace */
    const char *rel = path;
    if (strcmp(m->root, "/") != 0) {
        const size_t n = strlen(m->root);
        if (strncmp(path, m->root, n) != 0 || (path[n] && path[n] != '/')) return -1;
        rel = path + n;
    }
    size_t pl = strlen(m->point);
    while (pl > 0 && m->point[pl - 1] == '/') pl--; /* a mount at "/" joins as "" + "/a/b" */
    const int w = snprintf(dir, cap, "%.*s%s", (int)pl, m->point, *rel ? rel : "/");
    if (w < 0 || (size_t)w >= cap) return -1;
    size_t len = (size_t)w;
    if (pl == 0) pl = 1;
    while (len > pl && dir[len - 1] == '/') dir[--len] = 0;
    *stop = pl;
    return (int)len;
}

/* ---------------------------------------------------------------- limits */
int lf__cpu_quota_threads(int64_t quota_us, int64_t period_us) {
    if (quota_us <= 0 || period_us <= 0) return 1;
    const int64_t q = quota_us / period_us + (quota_us % period_us != 0);
    return q < 1 ? 1 : q > INT_MAX ? INT_MAX : (int)q;
}

/* "'FILE': \"CONTENT\" is not WHAT" into out->ignored, the content cut to
 * one printable line. */
static void note_ignored(lf_cpu_threads *out, const char *file, const char *content, const char *what) {
    char shown[41];
    size_t n = 0;
    for (const char *c = content; *c && *c != '\n' && n + 1 < sizeof shown; c++)
        shown[n++] = (*c >= 0x20 && *c < 0x7f) ? *c : '?';
    shown[n] = 0;
    snprintf(out->ignored, sizeof out->ignored, "'%.*s': \"%s\" is not %s", LF_CPU_PATH_MAX - 1, file, shown, what);
}

/* A positive decimal integer with nothing after it but white space; -1 otherwise. */
static int64_t parse_positive(const char *s, const char **end) {
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    char *e;
    long long v = strtoll(s, &e, 10);
    if (errno || v <= 0) return -1;
    *end = e;
    return v;
}

static int only_space(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n') s++;
    return *s == 0;
}

static void offer(lf_cpu_threads *out, int *version, int v, int64_t q, int64_t p, const char *file) {
    /* q/p < cur_q/cur_p, in double: quotas may reach 2^63 */
    if (out->quota_us && (double)q / (double)p >= (double)out->quota_us / (double)out->period_us) return;
    out->quota_us = q;
    out->period_us = p;
    snprintf(out->limit_file, sizeof out->limit_file, "%s", file);
    *version = v;
}

/* cgroup v2: DIR/cpu.max, "max PERIOD" or "QUOTA PERIOD". */
static void read_cpu_max(const char *dir, lf_cpu_threads *out, int *version) {
    char file[LF_CPU_PATH_MAX + 16], *text;
    snprintf(file, sizeof file, "%s/cpu.max", dir);
    if (read_text(file, LIMIT_FILE_MAX, &text) != 0) return;
    const char *s = text, *e = NULL;
    while (*s == ' ' || *s == '\t') s++;
    if (!strncmp(s, "max", 3) && (s[3] == ' ' || s[3] == '\t')) {
        if (parse_positive(s + 3, &e) < 0 || !only_space(e)) note_ignored(out, file, text, "'max PERIOD'");
        free(text);
        return;
    }
    const int64_t q = parse_positive(s, &e);
    const int64_t p = q > 0 ? parse_positive(e, &e) : -1;
    if (q > 0 && p > 0 && only_space(e)) offer(out, version, 2, q, p, file);
    else note_ignored(out, file, text, "'QUOTA PERIOD' or 'max PERIOD'");
    free(text);
}

/* cgroup v1: DIR/cpu.cfs_quota_us (-1: none) and DIR/cpu.cfs_period_us. */
static void read_cfs_quota(const char *dir, lf_cpu_threads *out, int *version) {
    char qfile[LF_CPU_PATH_MAX + 24], pfile[LF_CPU_PATH_MAX + 24], *qt, *pt;
    snprintf(qfile, sizeof qfile, "%s/cpu.cfs_quota_us", dir);
    if (read_text(qfile, LIMIT_FILE_MAX, &qt) != 0) return;
    const char *s = qt, *e = NULL;
    while (*s == ' ' || *s == '\t') s++;
    if (!strncmp(s, "-1", 2) && only_space(s + 2)) {
        free(qt);
        return;
    }
    const int64_t q = parse_positive(s, &e);
    if (q <= 0 || !only_space(e)) {
        note_ignored(out, qfile, qt, "-1 or a positive count of microseconds");
        free(qt);
        return;
    }
    free(qt);
    snprintf(pfile, sizeof pfile, "%s/cpu.cfs_period_us", dir);
    if (read_text(pfile, LIMIT_FILE_MAX, &pt) != 0) return;
    const int64_t p = parse_positive(pt, &e);
    if (p > 0 && only_space(e)) offer(out, version, 1, q, p, qfile);
    else note_ignored(out, pfile, pt, "a positive count of microseconds");
    free(pt);
}

/* Every cgroup from `path` up to the mount point of m. */
static void walk(const cg_mount *m, const char *path, int v, lf_cpu_threads *out, int *version) {
    char dir[LF_CPU_PATH_MAX];
    size_t stop;
    int len = cgroup_dir(m, path, dir, sizeof dir, &stop);
    if (len < 0) return;
    for (;;) {
        if (v == 2) read_cpu_max(dir, out, version);
        else read_cfs_quota(dir, out, version);
        if ((size_t)len <= stop) break;
        char *slash = strrchr(dir, '/');
        len = slash && (size_t)(slash - dir) > stop ? (int)(slash - dir) : (int)stop;
        dir[len] = 0;
    }
}

int lf__cpu_cgroup_limit(const char *self_cgroup, const char *mountinfo, lf_cpu_threads *out) {
    out->quota_us = out->period_us = 0;
    out->limit_file[0] = out->ignored[0] = 0;
    int version = 0;
    char *cg = NULL, *mi = NULL;
    cg_mount *mounts = calloc(2, sizeof *mounts); /* 2 KiB: off the stack of whatever thread calls */
    char *paths = malloc(2 * LF_CPU_PATH_MAX);
    if (!mounts || !paths || read_text(self_cgroup, PROC_FILE_MAX, &cg) != 0 ||
        read_text(mountinfo, PROC_FILE_MAX, &mi) != 0)
        goto done;
    char *v2 = paths, *v1 = paths + LF_CPU_PATH_MAX;
    find_paths(cg, v2, v1, LF_CPU_PATH_MAX);
    find_mounts(mi, &mounts[0], &mounts[1]);
    if (mounts[0].found && v2[0]) walk(&mounts[0], v2, 2, out, &version);
    if (mounts[1].found && v1[0]) walk(&mounts[1], v1, 1, out, &version);
done:
    free(cg);
    free(mi);
    free(mounts);
    free(paths);
    return version;
}

/* ---------------------------------------------------------------- affinity */
/* The calling thread's mask (CPU_FREE it) and its size in bytes; NULL when
 * sched_getaffinity refuses every size tried or memory runs out. */
static cpu_set_t *affinity_mask(size_t *bytes) {
    for (int ncpu = 1024; ncpu <= AFFINITY_MAX_CPUS; ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC(ncpu);
        if (!set) return NULL;
        const size_t size = CPU_ALLOC_SIZE(ncpu);
        CPU_ZERO_S(size, set);
        if (sched_getaffinity(0, size, set) == 0) {
            *bytes = size;
            return set;
        }
        CPU_FREE(set);
        if (errno != EINVAL) return NULL; /* EINVAL: the kernel's mask is larger than ours */
    }
    return NULL;
}

lf_status lf_cpu_affinity_list(int **cpus, int *n) {
    *cpus = NULL;
    *n = 0;
    size_t size;
    cpu_set_t *set = affinity_mask(&size);
    if (!set) return lf_fail(LF_ERR_IO, "sched_getaffinity: %s", strerror(errno));
    const int count = CPU_COUNT_S(size, set);
    int *list = lf_alloc(sizeof *list * (size_t)(count > 0 ? count : 1));
    if (!list) {
        CPU_FREE(set);
        return lf_fail(LF_ERR_NOMEM, "out of memory listing %d CPUs", count);
    }
    int k = 0;
    for (int c = 0; c < (int)(size * 8) && k < count; c++)
        if (CPU_ISSET_S((size_t)c, size, set)) list[k++] = c;
    CPU_FREE(set);
    *cpus = list;
    *n = k;
    return LF_OK;
}

/* ---------------------------------------------------------------- the choice */
int lf_cpu_threads_detect(lf_cpu_threads *out) {
    memset(out, 0, sizeof *out);
    const long on = sysconf(_SC_NPROCESSORS_ONLN);
    out->online = on < 1 ? 1 : on > INT_MAX ? INT_MAX : (int)on;
    size_t size;
    cpu_set_t *set = affinity_mask(&size);
    if (set) {
        out->affinity = CPU_COUNT_S(size, set);
        CPU_FREE(set);
    }
    out->threads = out->online;
    out->source = LF_THREADS_SOURCE_ONLINE;
    if (out->affinity > 0 && out->affinity < out->threads) {
        out->threads = out->affinity;
        out->source = LF_THREADS_SOURCE_AFFINITY;
    }
    const int v = lf__cpu_cgroup_limit("/proc/self/cgroup", "/proc/self/mountinfo", out);
    if (v) {
        const int q = lf__cpu_quota_threads(out->quota_us, out->period_us);
        if (q < out->threads) {
            out->threads = q;
            out->source = v == 2 ? LF_THREADS_SOURCE_CGROUP : LF_THREADS_SOURCE_CGROUP_V1;
        }
    }
    return out->threads;
}

/* OMP_NUM_THREADS's first value ("8" or "8,2" for nested levels), as libgomp
 * reads it; 0 when unset or not an integer in [1, 4096]. */
static int omp_env_threads(void) {
    const char *s = getenv("OMP_NUM_THREADS");
    if (!s) return 0;
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return 0;
    errno = 0;
    char *e;
    const long v = strtol(s, &e, 10);
    while (*e == ' ' || *e == '\t') e++;
    if (errno || v < 1 || v > 4096 || (*e && *e != ',')) return 0;
    return (int)v;
}

int lf_cpu_threads_choose(lf_cpu_threads *out, int requested) {
    lf_cpu_threads_detect(out);
    const int env = omp_env_threads();
    if (requested > 0) {
        out->threads = requested;
        out->source = LF_THREADS_SOURCE_REQUESTED;
    } else if (env > 0) {
        out->threads = env;
        out->source = LF_THREADS_SOURCE_ENV;
    }
    return out->threads;
}
