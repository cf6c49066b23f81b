/* Shared helpers for the cmocka tests. Include after <cmocka.h>'s prerequisites. */
#ifndef LF_TEST_UTIL_H
#define LF_TEST_UTIL_H
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <cmocka.h>
#include "llmforge/core.h"

/* Assert a status is LF_OK, printing lf_last_error() otherwise. */
#define LF_ASSERT_OK(expr)                                                                    \
    do {                                                                                      \
        lf_status s_ = (expr);                                                                \
        if (s_ != LF_OK) fail_msg("%s -> %s: %s", #expr, lf_status_str(s_), lf_last_error()); \
    } while (0)

/* Assert the last error message contains `needle`. */
#define LF_ASSERT_ERR_CONTAINS(needle)                                                        \
    do {                                                                                      \
        if (!strstr(lf_last_error(), (needle)))                                               \
            fail_msg("error message '%s' lacks '%s'", lf_last_error(), (needle));            \
    } while (0)

/* A fresh temporary directory (mkdtemp under $TMPDIR or /tmp); caller frees path. */
static inline char *lf_test_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/lftest.XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    if (!d) return NULL;
    return strdup(d);
}

static inline void lf_test_rmrf(const char *path) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) { /* best effort */ }
}

/* max |a-b| / max(|b|, floor) over n elements */
static inline double lf_test_max_rel_err(const float *a, const float *b, size_t n, double floor_) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double r = d / fmax(fabs((double)b[i]), floor_);
        if (r > worst || r != r) worst = (r != r) ? INFINITY : r;
    }
    return worst;
}
#endif
