/*
 * Checks for the MPI test programs (tests/comm/mpi_comm.c, tests/train/mpi_dp.c),
 * which are not cmocka programs: a failed check on one rank must end every
 * rank (lf_comm_abort through g_abort_via), or the others would wait for it.
 */
#ifndef LF_TEST_MPI_CHECK_H
#define LF_TEST_MPI_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "llmforge/comm.h"

static int g_rank = -1;      /* this process's rank, for messages */
static lf_comm *g_abort_via; /* handle used to end the job on a failure (NULL: just exit) */

static void fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
static void fail_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d: FAIL (%s:%d): ", g_rank, file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    if (g_abort_via) lf_comm_abort(g_abort_via, 1);
    exit(1);
}

#define CHECK(cond, ...)                                       \
    do {                                                       \
        if (!(cond)) fail_at(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define OK(expr)                                                                       \
    do {                                                                               \
        lf_status s_ = (expr);                                                         \
        CHECK(s_ == LF_OK, "%s -> %s: %s", #expr, lf_status_str(s_), lf_last_error()); \
    } while (0)

#endif
