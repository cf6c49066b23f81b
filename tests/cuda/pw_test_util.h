/*
 * Helpers of the pointwise-family tests (test_cuda_pointwise.c,
 * test_cuda_norm_loss.c), each built twice: against the CUDA-on-CPU shim
 * (cuda.*) and, with LF_CUDA, the real GPU (gpu.*, SKIPPED where none
 * answers). The "cuda" instance runs an op, the "cpu" backend runs the same
 * op on host copies of the same inputs, and the two are compared within an
 * error model (each test says which), or bit for bit where the arithmetic
 * is the same sequence of roundings.
 *
 * Determinism: pw_check_repeatable reruns an op (the caller's closure,
 * which re-uploads every input including pre-filled outputs) and requires
 * the same bits; on the shim under the forward, reverse and two shuffle
 * schedules, so a result that depends on the order threads run in (a race,
 * an order-dependent reduction) fails.
 */
#ifndef LF_PW_TEST_UTIL_H
#define LF_PW_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../test_util.h"
#include "backend/cuda/cuda_internal.h"
#include "cuda_test_util.h"
#include "lowp_ref.h"

#define PW_U 5.9604644775390625e-08 /* 2^-24: fp32's unit roundoff */

/* gamma_n = n u / (1 - n u): the bound on the relative error of an
 * n-term float sum in any order (Higham, Accuracy and Stability, 3.1). */
static inline double pw_gamma(double n) { return n * PW_U / (1.0 - n * PW_U); }

#define PW_NEED_DEVICE() NEED_DEVICE()

typedef struct pw_env {
    lf_backend *be;  /* "cuda" */
    lf_backend *cpu; /* the reference */
} pw_env;

static inline void pw_open(pw_env *e) {
    LF_ASSERT_OK(lf__backend_open_ops(lf__backend_cuda(), &e->be));
    LF_ASSERT_OK(lf_backend_open("cpu", &e->cpu));
}

static inline void pw_close(pw_env *e) {
    LF_ASSERT_OK(lf_backend_sync(e->be));
    lf_backend_close(e->be);
    lf_backend_close(e->cpu);
}

/* A device copy of host bytes (freed by pw_free); host NULL: uninitialised
 * (the shim fills new device memory with NaN bytes). */
static inline void *pw_up(lf_backend *be, const void *host, size_t bytes) {
    void *d = be->ops->alloc(be, bytes ? bytes : 1);
    assert_non_null(d);
    if (bytes && host) be->ops->to_device(be, d, host, bytes);
    return d;
}
static inline void pw_put(lf_backend *be, void *dev, const void *host, size_t bytes) {
    if (bytes) be->ops->to_device(be, dev, host, bytes);
}
static inline void pw_down(lf_backend *be, void *host, const void *dev, size_t bytes) {
    if (bytes) be->ops->to_host(be, host, dev, bytes);
    LF_ASSERT_OK(lf_backend_sync(be));
}
static inline void pw_free(lf_backend *be, void *dev) { be->ops->free(be, dev); }

static inline void *pw_dup(const void *p, size_t bytes) {
    void *q = malloc(bytes ? bytes : 1);
    assert_non_null(q);
    memcpy(q, p, bytes);
    return q;
}

/* Host random numbers (the test's own; LF_RNG_TEST streams). */
static inline float pw_uniform(uint64_t seed, uint64_t i, float lo, float hi) {
    return lo + (hi - lo) * lf_rng_uniform(seed, LF_RNG_TEST, i);
}
static inline float *pw_random(size_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = pw_uniform(seed, i, lo, hi);
    return x;
}

/* |got - ref| <= tol[i] for every i (NaN must meet NaN). */
static inline void pw_check_within(const char *what, const float *got, const float *ref, const double *tol,
                                   size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i]) || isnan(got[i])) {
            if (isnan(ref[i]) && isnan(got[i])) continue;
            fail_msg("%s[%zu]: got %.9g, cpu %.9g", what, i, (double)got[i], (double)ref[i]);
        }
        const double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= tol[i]))
            fail_msg("%s[%zu]: got %.9g, cpu %.9g, |diff| %.3g > bound %.3g", what, i, (double)got[i],
                     (double)ref[i], d, tol[i]);
    }
}

static inline void pw_check_bits(const char *what, const void *got, const void *ref, size_t bytes) {
    if (memcmp(got, ref, bytes) == 0) return;
    const unsigned char *a = got, *b = ref;
    size_t i = 0;
    while (a[i] == b[i]) i++;
    if (bytes % 4 == 0) {
        const size_t k = i / 4;
        float fa, fb;
        memcpy(&fa, a + 4 * k, 4);
        memcpy(&fb, b + 4 * k, 4);
        fail_msg("%s: word %zu differs: got %.9g (0x%08x), expected %.9g (0x%08x)", what, k, (double)fa,
                 ((const uint32_t *)(const void *)a)[k], (double)fb, ((const uint32_t *)(const void *)b)[k]);
    }
    fail_msg("%s: byte %zu differs", what, i);
}

/* An op to rerun: uploads every input (and pre-filled output), runs the
 * cuda op, downloads `bytes` of results into out. */
typedef void (*pw_run_fn)(void *ctx, void *out);

static inline void pw_check_repeatable(const char *what, pw_run_fn run, void *ctx, const void *ref, size_t bytes) {
    void *o = malloc(bytes ? bytes : 1);
    assert_non_null(o);
#ifdef LF_CUDA_SHIM
    static const struct {
        lf_shim_schedule_kind kind;
        uint64_t seed;
        const char *name;
    } sch[] = {{LF_SHIM_SCHEDULE_FORWARD, 0, "forward"},
               {LF_SHIM_SCHEDULE_REVERSE, 0, "reverse"},
               {LF_SHIM_SCHEDULE_SHUFFLE, 1, "shuffle:1"},
               {LF_SHIM_SCHEDULE_SHUFFLE, 0xabcdefULL, "shuffle:abcdef"}};
    for (size_t k = 0; k < sizeof sch / sizeof sch[0]; k++) {
        lf_shim_set_schedule(sch[k].kind, sch[k].seed);
        memset(o, 0x5a, bytes);
        run(ctx, o);
        char label[160];
        snprintf(label, sizeof label, "%s (schedule %s, against the first run)", what, sch[k].name);
        pw_check_bits(label, o, ref, bytes);
    }
    lf_shim_set_schedule(LF_SHIM_SCHEDULE_SHUFFLE, LF_SHIM_DEFAULT_SEED);
#else
    memset(o, 0x5a, bytes);
    run(ctx, o);
    char label[160];
    snprintf(label, sizeof label, "%s (second run)", what);
    pw_check_bits(label, o, ref, bytes);
#endif
    free(o);
}

/* bf16 activation storage (cuda-bf16): got16[i] holds exactly the
 * reference rounding (nearest even) of the fp32 result f32[i] of the same
 * op on the same instance, the promise of act_dtypes (backend_impl.h). */
static inline void pw_check_bf16_of(const char *what, const uint16_t *got16, const float *f32, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got16[i] != ref_bf16_bits(f32[i]))
            fail_msg("%s[%zu]: bf16 %04x, the rounding of the fp32 output %.9g is %04x", what, i, got16[i],
                     (double)f32[i], ref_bf16_bits(f32[i]));
}

/* a and b are the same bf16 value or adjacent ones: the roundings of two
 * fp32 results within a bf16 step of each other (cuda-bf16 against
 * cpu-bf16, whose fp32 results differ by the op's fp32 error model, far
 * below 2^-8 relative). */
static inline void pw_check_bf16_adjacent(const char *what, const uint16_t *a, const uint16_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const long oa = a[i] & 0x8000 ? -(long)(a[i] & 0x7fff) : (long)a[i];
        const long ob = b[i] & 0x8000 ? -(long)(b[i] & 0x7fff) : (long)b[i];
        if (labs(oa - ob) > 1) fail_msg("%s[%zu]: bf16 %04x, cpu-bf16 %04x: more than one step apart", what, i, a[i], b[i]);
    }
}

static inline void pw_open_bf16(pw_env *e) {
    LF_ASSERT_OK(lf__backend_open_ops(lf__backend_cuda_bf16(), &e->be));
    LF_ASSERT_OK(lf_backend_open("cpu-bf16", &e->cpu));
}

/* A fresh "cuda" instance for an op that must fail: returns it after the
 * caller's op, with the status and message checked by pw_expect_fail. */
static inline void pw_expect_fail(lf_backend *be, lf_status code, const char *needle) {
    const lf_status st = lf_backend_sync(be);
    if (st != code) fail_msg("expected %s, got %s (%s)", lf_status_str(code), lf_status_str(st), lf_last_error());
    LF_ASSERT_ERR_CONTAINS(needle);
    lf_backend_close(be);
}

static inline lf_backend *pw_fresh(void) {
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf__backend_open_ops(lf__backend_cuda(), &be));
    return be;
}

#endif
