/*
 * Helpers shared by the CLI's subcommands: status messages and strict
 * number/option parsing (strtol/strtod, range-checked; never atoi).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli_util.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"

void die_status(lf_status st, const char *what) {
    fprintf(stderr, "llmforge: %s: %s\n", what, lf_last_error()[0] ? lf_last_error() : lf_status_str(st));
}

/* The choice the last cli_backend_setup made, for the run headers. */
static lf_cpu_threads g_threads;
static int g_local_ranks = 1; /* > 1: the machine's count was divided among these ranks */

int cli_backend_setup_ranks(const char *cmd, long threads, int local_ranks, int warn) {
    lf_cpu_threads_choose(&g_threads, (int)threads);
    int n = g_threads.threads;
    g_local_ranks = 1;
    if (g_threads.source == LF_THREADS_SOURCE_ENV) {
        n = 0; /* OpenMP reads OMP_NUM_THREADS itself (its nested levels too) */
    } else if (g_threads.source != LF_THREADS_SOURCE_REQUESTED && local_ranks > 1) {
        /* several ranks on this host: each takes its share, not all of it */
        g_local_ranks = local_ranks;
        n = n / local_ranks > 0 ? n / local_ranks : 1;
    }
    lf_backend_cpu_set_threads(n);
    if (g_threads.ignored[0]) fprintf(stderr, "llmforge: warning: CPU limit file ignored: %s\n", g_threads.ignored);
    if (lf_backend_cpu_check() != LF_OK) {
        fprintf(stderr, "llmforge %s: %s\n", cmd, lf_last_error());
        return 2;
    }
    const char *w = lf_backend_cpu_kernel_warning();
    if (warn && w) fprintf(stderr, "llmforge: warning: %s\n", w);
    return 0;
}

int cli_backend_setup(const char *cmd, long threads, int warn) {
    return cli_backend_setup_ranks(cmd, threads, 1, warn);
}

const char *cli_threads_source(void) {
    return g_threads.source == LF_THREADS_SOURCE_REQUESTED ? "--threads" : lf_threads_source_name(g_threads.source);
}

void cli_threads_line(char *buf, size_t cap) {
    const lf_cpu_threads *t = &g_threads;
    char why[160], share[48] = "", cpus[64];
    switch (t->source) {
    case LF_THREADS_SOURCE_AFFINITY:
        snprintf(why, sizeof why, "affinity %d CPU%s", t->affinity, t->affinity == 1 ? "" : "s");
        break;
    case LF_THREADS_SOURCE_CGROUP:
    case LF_THREADS_SOURCE_CGROUP_V1:
        snprintf(why, sizeof why, "%s %lld/%lld", cli_threads_source(), (long long)t->quota_us,
                 (long long)t->period_us);
        break;
    default: snprintf(why, sizeof why, "%s", cli_threads_source()); break;
    }
    if (g_local_ranks > 1) snprintf(share, sizeof share, " / %d local ranks", g_local_ranks);
    if (t->affinity > 0 && t->affinity < t->online && t->source != LF_THREADS_SOURCE_AFFINITY)
        snprintf(cpus, sizeof cpus, "affinity %d of %d online CPUs", t->affinity, t->online);
    else snprintf(cpus, sizeof cpus, "%d online CPU%s", t->online, t->online == 1 ? "" : "s");
    if (t->source == LF_THREADS_SOURCE_ONLINE && g_local_ranks == 1)
        snprintf(buf, cap, "threads: %d (%s)", lf_backend_cpu_threads(), cpus);
    else snprintf(buf, cap, "threads: %d (%s%s; %s)", lf_backend_cpu_threads(), why, share, cpus);
}

const char *g_cli_backend = NULL;

const char *cli_backend_override(void) {
    static char ov[64];
    if (!g_cli_backend) return NULL;
    snprintf(ov, sizeof ov, "backend=%s", g_cli_backend);
    return ov;
}

/* ---------------------------------------------------------------- number parsing */
int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "llmforge: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int parse_double(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "llmforge: %s expects a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int parse_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) goto bad;
    *out = v;
    return 0;
bad:
    fprintf(stderr, "llmforge: %s expects a non-negative integer, got '%s'\n", opt, s);
    return -1;
}

/* Value of option `name` at argv[*i]: "--name=value" or "--name value". NULL if not this option. */
const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != 0) return NULL;
    if (*i + 1 >= argc) {
        fprintf(stderr, "llmforge: option %s needs a value\n", name);
        *missing = 1;
        return NULL;
    }
    (*i)++;
    return argv[*i];
}
