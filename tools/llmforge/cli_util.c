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

void die_status(lf_status st, const char *what) {
    fprintf(stderr, "llmforge: %s: %s\n", what, lf_last_error()[0] ? lf_last_error() : lf_status_str(st));
}

int cli_backend_setup(const char *cmd, long threads, int warn) {
    lf_backend_cpu_set_threads((int)threads);
    if (lf_backend_cpu_check() != LF_OK) {
        fprintf(stderr, "llmforge %s: %s\n", cmd, lf_last_error());
        return 2;
    }
    const char *w = lf_backend_cpu_kernel_warning();
    if (warn && w) fprintf(stderr, "llmforge: warning: %s\n", w);
    return 0;
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
