/*
 * What every CUDA test shares: whether a device answers, and the skip that
 * the gpu.* instances print where none does (CTest's SKIP_REGULAR_EXPRESSION
 * matches "SKIPPED:"). Each test source is built twice: against the
 * CUDA-on-CPU shim (cuda.*, a device always answers) and, with LF_CUDA,
 * against the real runtime (gpu.*).
 */
#ifndef LF_CUDA_TEST_UTIL_H
#define LF_CUDA_TEST_UTIL_H

#include "../test_util.h"
#include "cuda_api.h"

static inline int have_device(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return 0;
    }
    return 1;
}

#define NEED_DEVICE()                                                                              \
    do {                                                                                           \
        if (!have_device()) {                                                                      \
            print_message("SKIPPED: no CUDA device\n");                                            \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

#endif
