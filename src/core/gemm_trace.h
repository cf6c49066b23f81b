/*
 * The GEMM trace: how the test suite knows which tests pass through an fp32
 * matrix product, so the label `gemm` that selects them (tests/CMakeLists.txt,
 * the CI pass on OpenBLAS's generic kernel) cannot silently miss one.
 *
 * Every fp32 GEMM entry point (lf__cpu_sgemm, the CUDA shim's cuBLASLt
 * matmul) calls lf__gemm_trace_mark() first. When the environment variable
 * LF_GEMM_TRACE names a file, the first call in each translation unit of the
 * process creates it (empty); nothing else happens, ever, so the cost on the
 * hot path is one relaxed load. CTest gives each test its own file name
 * (<build>/gemm-trace/<test name>), and tests/check_gemm_label.sh fails when
 * a test left a file but lacks the label.
 *
 * Header-only and C/C++-neutral (GCC's __atomic builtins), because the shim
 * is C++ and links no llmforge C module for this.
 */
#ifndef LF_CORE_GEMM_TRACE_H
#define LF_CORE_GEMM_TRACE_H

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static inline void lf__gemm_trace_mark(void) {
    static int marked;
    if (__atomic_load_n(&marked, __ATOMIC_RELAXED) || __atomic_exchange_n(&marked, 1, __ATOMIC_RELAXED)) return;
    const char *path = getenv("LF_GEMM_TRACE");
    if (!path || !*path) return;
    const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
}

#endif
