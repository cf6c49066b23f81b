/* The public buffers-and-ops wrappers of backend.h (what src/train and
 * src/checkpoint use instead of the private table): each does its slot's
 * work on "cpu" (copies, zero, scale, add, sum of squares, AdamW, fp16
 * rounding, bf16 gradient conversions); the queries answer for host
 * memory ("cpu") and for memory that is neither host nor a device's
 * ("cpu-fenced"); a missing slot is LF_ERR_UNSUPPORTED with a message; a
 * NULL instance is LF_ERR_INVALID_ARG (or a no-op for the releases); n = 0
 * does nothing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "llmforge/backend.h"

#define N 1000

static void test_ops_on_cpu(void **state) {
    (void)state;
    lf_backend *be = NULL;
    assert_int_equal(lf_backend_open("cpu", &be), LF_OK);
    float host[N], back[N];
    double want = 0;
    for (int i = 0; i < N; i++) {
        host[i] = (float)(i % 7) - 3.0f;
        want += 4.0 * host[i] * host[i]; /* after scale 2 */
    }
    float *x = lf_backend_alloc(be, N * sizeof(float)), *y = lf_backend_alloc(be, N * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    assert_true(lf_backend_allocated(be, x) >= N * sizeof(float));
    assert_int_equal(lf_backend_allocated(be, NULL), 0);
    assert_int_equal(lf_backend_to_device(be, x, host, sizeof host), LF_OK);
    assert_int_equal(lf_backend_scale(be, x, N, 2.0f), LF_OK);
    double ss = -1;
    assert_int_equal(lf_backend_sum_squares(be, x, N, &ss), LF_OK);
    assert_true(fabs(ss - want) <= 1e-9 * want);
    assert_int_equal(lf_backend_copy(be, y, x, N * sizeof(float)), LF_OK);
    assert_int_equal(lf_backend_add(be, y, x, N), LF_OK); /* y = 4 host */
    assert_int_equal(lf_backend_to_host(be, back, y, sizeof back), LF_OK);
    for (int i = 0; i < N; i++) assert_true(back[i] == 4.0f * host[i]);
    assert_int_equal(lf_backend_zero(be, y, N), LF_OK);
    assert_int_equal(lf_backend_to_host(be, back, y, sizeof back), LF_OK);
    for (int i = 0; i < N; i++) assert_true(back[i] == 0.0f);

    /* fp16: 1e6 is beyond its range (inf), 1.5 is exact */
    int nonfinite = -1;
    float big[2] = {1.5f, 1e6f};
    assert_int_equal(lf_backend_to_device(be, x, big, sizeof big), LF_OK);
    assert_int_equal(lf_backend_fp16_round(be, x, 1, &nonfinite), LF_OK);
    assert_int_equal(nonfinite, 0);
    assert_int_equal(lf_backend_fp16_round(be, x, 2, &nonfinite), LF_OK);
    assert_int_equal(nonfinite, 1);

    /* bf16 gradients: values bf16 holds exactly come back unchanged; n = 0 asks */
    assert_int_equal(lf_backend_grad_to_bf16(be, NULL, NULL, 0), LF_OK);
    assert_int_equal(lf_backend_grad_from_bf16(be, NULL, NULL, 0), LF_OK);
    uint16_t *b = lf_backend_alloc(be, N * sizeof(uint16_t));
    assert_non_null(b);
    assert_int_equal(lf_backend_to_device(be, x, host, sizeof host), LF_OK);
    assert_int_equal(lf_backend_grad_to_bf16(be, b, x, N), LF_OK);
    assert_int_equal(lf_backend_grad_from_bf16(be, y, b, N), LF_OK);
    assert_int_equal(lf_backend_to_host(be, back, y, sizeof back), LF_OK);
    for (int i = 0; i < N; i++) assert_true(back[i] == host[i]);

    /* AdamW, one step of torch's: p 1, g 0.5, lr 0.1 -> p = 1 - 0.1 * 0.5 / (0.5 + eps) */
    float p = 1.0f, g = 0.5f, zero2[2] = {0, 0};
    float *dp = lf_backend_alloc(be, sizeof(float)), *dg = lf_backend_alloc(be, sizeof(float));
    float *dm = lf_backend_alloc(be, sizeof(float)), *dv = lf_backend_alloc(be, sizeof(float));
    assert_int_equal(lf_backend_to_device(be, dp, &p, sizeof p), LF_OK);
    assert_int_equal(lf_backend_to_device(be, dg, &g, sizeof g), LF_OK);
    assert_int_equal(lf_backend_to_device(be, dm, zero2, sizeof(float)), LF_OK);
    assert_int_equal(lf_backend_to_device(be, dv, zero2, sizeof(float)), LF_OK);
    assert_int_equal(lf_backend_adamw(be, dp, dg, dm, dv, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1), LF_OK);
    assert_int_equal(lf_backend_to_host(be, &p, dp, sizeof p), LF_OK);
    assert_true(fabsf(p - 0.9f) < 1e-6f);
    lf_backend_params_changed(be); /* cpu derives nothing: a no-op */
    assert_int_equal(lf_backend_sync(be), LF_OK);

    lf_backend_free(be, dp);
    lf_backend_free(be, dg);
    lf_backend_free(be, dm);
    lf_backend_free(be, dv);
    lf_backend_free(be, b);
    lf_backend_free(be, x);
    lf_backend_free(be, y);
    lf_backend_free(be, NULL); /* a no-op */
    lf_backend_close(be);
}

static void test_queries_and_missing_slots(void **state) {
    (void)state;
    lf_backend *cpu = lf_backend_get("cpu"), *fenced = lf_backend_get("cpu-fenced");
    assert_non_null(cpu);
    assert_non_null(fenced);
    assert_non_null(lf_backend_table(cpu));
    assert_null(lf_backend_table(NULL));
    assert_true(lf_backend_table(cpu) != lf_backend_table(fenced));
    /* host memory, and memory that is neither the host's nor a device's */
    assert_int_equal(lf_backend_is_device(cpu), 0);
    assert_int_equal(lf_backend_is_device(fenced), 0);
    assert_int_equal(lf_backend_host_memory(fenced), 0);
    assert_true(lf_backend_replicas(cpu, 8) >= 1);
    assert_int_equal(lf_backend_replicas(cpu, 0), 1);
    assert_int_equal(lf_backend_replicas(NULL, 8), 1);
    /* no pinned memory, no stream: unsupported, with a message naming the backend */
    assert_int_equal(lf_backend_can_pin(cpu), 0);
    assert_null(lf_backend_host_alloc(cpu, 64));
    assert_non_null(strstr(lf_last_error(), "cpu"));
    lf_backend_host_free(cpu, NULL);
    void *stream = (void *)1;
    assert_int_equal(lf_backend_native_stream(cpu, &stream), LF_ERR_UNSUPPORTED);
    assert_null(stream);
    assert_non_null(strstr(lf_last_error(), "cpu"));
    /* n = 0 is LF_OK and touches nothing */
    assert_int_equal(lf_backend_scale(cpu, NULL, 0, 2.0f), LF_OK);
    assert_int_equal(lf_backend_to_host(cpu, NULL, NULL, 0), LF_OK);
    /* no instance */
    double ss = 1;
    int nf = 1;
    assert_int_equal(lf_backend_zero(NULL, NULL, 4), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_backend_sum_squares(NULL, NULL, 4, &ss), LF_ERR_INVALID_ARG);
    assert_true(ss == 0);
    assert_int_equal(lf_backend_fp16_round(NULL, NULL, 4, &nf), LF_ERR_INVALID_ARG);
    assert_int_equal(nf, 0);
    assert_null(lf_backend_alloc(NULL, 64));
    lf_backend_free(NULL, NULL);
    lf_backend_params_changed(NULL);
    assert_int_equal(lf_backend_allocated(NULL, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_ops_on_cpu),
                                       cmocka_unit_test(test_queries_and_missing_slots)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
