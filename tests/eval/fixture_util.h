/* Helpers for the metric tests that read the reference fixtures written by
 * tools/reference/make_metric_fixtures.py (tests/fixtures/metrics_*.json). */
#ifndef LF_EVAL_FIXTURE_UTIL_H
#define LF_EVAL_FIXTURE_UTIL_H
#include "test_util.h"
#include <cjson/cJSON.h>

static inline cJSON *fx_load(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", LF_SOURCE_DIR, name);
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &buf, &len));
    cJSON *j = cJSON_ParseWithLength(buf, len);
    lf_free(buf);
    if (!j) fail_msg("%s: not valid JSON", path);
    return j;
}

static inline const cJSON *fx_get(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) fail_msg("fixture: missing key '%s'", key);
    return v;
}

static inline double fx_num(const cJSON *o, const char *key) {
    const cJSON *v = fx_get(o, key);
    if (!cJSON_IsNumber(v)) fail_msg("fixture: '%s' is not a number", key);
    return v->valuedouble;
}

static inline const char *fx_str(const cJSON *o, const char *key) {
    const cJSON *v = fx_get(o, key);
    if (!cJSON_IsString(v)) fail_msg("fixture: '%s' is not a string", key);
    return v->valuestring;
}

/* Track the largest |got - want| and fail beyond tol. */
static inline void fx_close(double got, double want, double tol, double *worst, const char *what, const char *case_name) {
    double d = fabs(got - want);
    if (d != d) d = INFINITY;
    if (d > *worst) *worst = d;
    if (d > tol) fail_msg("%s: %s = %.17g, reference %.17g (|diff| %.3g > %.1g)", case_name, what, got, want, d, tol);
}
#endif
