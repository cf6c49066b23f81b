/*
 * The "cuda" backend instance (src/backend/cuda/cuda_backend.c) on the
 * CUDA-on-CPU shim (cuda.test_cuda_backend) and, with LF_CUDA, on a real
 * GPU (gpu.test_cuda_backend: SKIPPED where none answers).
 *
 * Checked:
 *  - registration: lf_backend_open("cuda") finds the table only after
 *    lf_backend_cuda_register, and registering twice is harmless;
 *  - memory: alloc/allocated/free account the exact bytes asked for; a round
 *    trip host -> device -> device (copy) -> host returns every byte; zero
 *    writes 0.0f over exactly n floats and leaves the next one alone;
 *  - out of memory (shim: a device smaller than the request) is NULL from
 *    alloc with the instance still usable (the planner reports it), never a
 *    sticky failure;
 *  - a bad device number (LLMFORGE_CUDA_DEVICE=7 on a one-device machine)
 *    fails open with a message naming the device.
 */
#include <stdlib.h>
#include <string.h>
#include "../test_util.h"
#include "backend/cuda/cuda_internal.h"
#include "cuda_test_util.h"
#include "llmforge/backend_cuda.h"

static void test_register(void **state) {
    (void)state;
    lf_backend *be = NULL;
    NEED_DEVICE();
    assert_int_equal(lf_backend_cuda_register(), LF_OK);
    assert_int_equal(lf_backend_cuda_register(), LF_OK);
    assert_int_equal(lf_backend_open("cuda", &be), LF_OK);
    assert_string_equal(lf_backend_name(be), "cuda");
    assert_int_equal(lf_backend_host_memory(be), 0);
    lf_backend_close(be);
    /* the shared instance (what LLMFORGE_BACKEND=cuda gives the trainer) */
    lf_backend *s1 = lf_backend_get("cuda"), *s2 = lf_backend_get("cuda");
    assert_non_null(s1);
    assert_ptr_equal(s1, s2);
    assert_string_equal(lf_backend_name(s1), "cuda");
}

static void test_memory(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = NULL;
    assert_int_equal(lf__backend_open_ops(lf__backend_cuda(), &be), LF_OK);
    const size_t n = 1000;
    float *a = be->ops->alloc(be, (n + 1) * sizeof(float));
    float *b = be->ops->alloc(be, (n + 1) * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(be->ops->allocated(be, a), (n + 1) * sizeof(float));
    float *h = malloc((n + 1) * sizeof(float)), *back = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i <= n; i++) h[i] = (float)i * 0.5f - 7.0f;
    be->ops->to_device(be, a, h, (n + 1) * sizeof(float));
    be->ops->copy(be, b, a, (n + 1) * sizeof(float));
    be->ops->zero(be, a, n); /* all but the last */
    be->ops->to_host(be, back, b, (n + 1) * sizeof(float));
    assert_memory_equal(back, h, (n + 1) * sizeof(float));
    be->ops->to_host(be, back, a, (n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) assert_true(back[i] == 0.0f);
    assert_true(back[n] == h[n]);
    assert_int_equal(lf_backend_sync(be), LF_OK);
    be->ops->free(be, a);
    be->ops->free(be, b);
    assert_int_equal(be->ops->allocated(be, NULL), 0);
    free(h);
    free(back);
    lf_backend_close(be);
}

static void test_oom(void **state) {
    (void)state;
    NEED_DEVICE();
#ifdef LF_CUDA_SHIM
    lf_backend *be = NULL;
    assert_int_equal(lf__backend_open_ops(lf__backend_cuda(), &be), LF_OK);
    /* 128 MiB: 32 for this instance's workspace, 32 for the shared one of test_register */
    lf_shim_set_device_memory((size_t)128 << 20);
    void *p = be->ops->alloc(be, (size_t)256 << 20);
    assert_null(p);
    assert_int_equal(lf_backend_sync(be), LF_OK); /* not sticky: the planner reports it */
    void *q = be->ops->alloc(be, 1 << 20);
    assert_non_null(q);
    be->ops->free(be, q);
    lf_backend_close(be);
    lf_shim_set_device_memory((size_t)8 << 30);
#else
    print_message("SKIPPED: the device-size control is the shim's\n");
    skip();
#endif
}

static void test_bad_device(void **state) {
    (void)state;
    NEED_DEVICE();
    int n = 0;
    assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
    char num[16];
    snprintf(num, sizeof num, "%d", n + 6);
    setenv("LLMFORGE_CUDA_DEVICE", num, 1);
    lf_backend *be = NULL;
    lf_status st = lf__backend_open_ops(lf__backend_cuda(), &be);
    unsetenv("LLMFORGE_CUDA_DEVICE");
    assert_int_equal(st, LF_ERR_RANGE);
    assert_null(be);
    assert_non_null(strstr(lf_last_error(), num));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_bad_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
