/*
 * The bf16 collectives (lf_comm_*_bf16) checked on any kind, for the MPI
 * test programs (tests/comm/mpi_comm.c on host memory, nccl_comm.c on
 * device memory through the memory hooks below). Include after
 * mpi_check.h.
 *
 * The error model (comm.h "bf16"): the inputs are bf16 values; a host kind
 * and the NCCL shim widen them to fp32 (exact), fold in rank order in fp32
 * and round once, so the result must be bf16(the fp32 rank-order fold of
 * the widened inputs) bit for bit — this file computes that fold itself.
 * Real NCCL rounds to bf16 after every one of the P - 1 additions of its
 * ring or tree: each partial sum's rounding is at most 2^-9 of a value no
 * larger than sum_p |x_p|, so |result - exact sum| <= (P - 1) 2^-9 sum|x|;
 * the check allows twice that ((P - 1) 2^-8 sum|x|) for AVG's scaling.
 * MAX, MIN, gathers and broadcasts are bit-exact everywhere, and every rank
 * must hold the same bits.
 */
#ifndef LF_TEST_BF16_CHECK_H
#define LF_TEST_BF16_CHECK_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "llmforge/comm.h"
#include "llmforge/core.h"
#include "core/bf16.h"

/* Where the buffers of the collectives live (host or device). */
typedef struct bf16_mem {
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    void (*put)(void *dst, const void *host_src, size_t bytes);
    void (*get)(void *host_dst, const void *src, size_t bytes);
} bf16_mem;

/* Element i of rank p's input: a bf16 with magnitudes 2^-8 .. 2^7 (so an
 * fp32 fold and a bf16 one differ), never NaN. */
static uint16_t bf16_val(uint64_t salt, int p, size_t i) {
    uint64_t h = lf_rng_mix(lf_rng_mix(salt ^ 0xbf16u, (uint64_t)p), (uint64_t)i);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f) - 0.5f;
    return lf__bf16_from_f32(ldexpf(u, (int)((h >> 8) & 15) - 8));
}

/* The fp32 rank-order fold of element i (the host kinds' and the shim's
 * before their one rounding), its exact value in double, and sum |x_p|. */
static float bf16_fold(uint64_t salt, int P, size_t i, lf_comm_op op, double *exact, double *abs_sum) {
    float e = lf__bf16_to_f32(bf16_val(salt, 0, i));
    double x = e, a = fabs((double)e);
    for (int p = 1; p < P; p++) {
        float v = lf__bf16_to_f32(bf16_val(salt, p, i));
        x += v;
        a += fabs((double)v);
        if (op == LF_COMM_SUM || op == LF_COMM_AVG) e = e + v;
        else if (op == LF_COMM_MAX) e = v > e ? v : e;
        else e = v < e ? v : e;
    }
    if (op == LF_COMM_MAX || op == LF_COMM_MIN) x = e;
    *exact = op == LF_COMM_AVG ? x / P : x;
    *abs_sum = op == LF_COMM_AVG ? a / P : a;
    return op == LF_COMM_AVG ? e / (float)P : e;
}

static void bf16_compare(const uint16_t *got, uint64_t salt, int P, size_t from, size_t n, lf_comm_op op,
                         int exact, const char *what, size_t total) {
    for (size_t i = 0; i < n; i++) {
        double x = 0, a = 0;
        uint16_t want = lf__bf16_from_f32(bf16_fold(salt, P, from + i, op, &x, &a));
        int ok = exact || op == LF_COMM_MAX || op == LF_COMM_MIN
                     ? got[i] == want
                     : fabs((double)lf__bf16_to_f32(got[i]) - x) <= (P - 1) * ldexp(1.0, -8) * a;
        if (!ok)
            fail_at(__FILE__, __LINE__, "bf16 %s n=%zu op %d: element %zu is 0x%04x (%.6g), expected 0x%04x (%.6g)%s",
                    what, total, (int)op, from + i, got[i], (double)lf__bf16_to_f32(got[i]), want,
                    (double)lf__bf16_to_f32(want), exact ? " (bf16 of the fp32 rank-order fold, bit for bit)" : "");
    }
}

/* Every rank holds the same bits: a hash compared by max == min. */
static void bf16_same_everywhere(lf_comm *c, const uint16_t *h, size_t n, const char *what) {
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) x = (x ^ h[i]) * 1099511628211ull;
    int64_t mx = (int64_t)(x >> 1), mn = mx;
    OK(lf_comm_all_reduce_i64(c, &mx, 1, LF_COMM_MAX));
    OK(lf_comm_all_reduce_i64(c, &mn, 1, LF_COMM_MIN));
    CHECK(mx == mn, "bf16 %s n=%zu: the ranks hold different bits", what, n);
}

static uint16_t *bf16_host(size_t n) {
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    CHECK(p, "out of memory (%zu bf16 values)", n);
    return p;
}

/* All of it for n elements: all_reduce (every op), reduce_scatter and
 * all_gather in place and not, their started forms, broadcast. */
static void check_bf16_collectives(lf_comm *c, const bf16_mem *m, size_t n, uint64_t salt, int exact) {
    const int P = lf_comm_size(c), r = lf_comm_rank(c);
    const size_t B = (n ? n : 1) * sizeof(uint16_t);
    size_t off = 0, cnt = 0;
    lf_comm_partition(n, P, r, &off, &cnt);
    uint16_t *h = bf16_host(n);
    uint16_t *d = m->alloc(B), *part = m->alloc(B);
    const lf_comm_op ops[4] = {LF_COMM_SUM, LF_COMM_AVG, LF_COMM_MAX, LF_COMM_MIN};
    for (int k = 0; k < 4; k++, salt++) {
        for (size_t i = 0; i < n; i++) h[i] = bf16_val(salt, r, i);
        m->put(d, h, n * 2);
        OK(lf_comm_all_reduce_bf16(c, d, n, ops[k]));
        m->get(h, d, n * 2);
        bf16_compare(h, salt, P, 0, n, ops[k], exact, "all_reduce", n);
        if (k == 0) bf16_same_everywhere(c, h, n, "all_reduce");
        for (int mode = 0; mode < 3; mode++) { /* 0: apart, 1: in place, 2: started (in place) */
            for (size_t i = 0; i < n; i++) h[i] = bf16_val(salt, r, i);
            m->put(d, h, n * 2);
            uint16_t *recv = mode ? d + off : part;
            if (mode == 2) {
                int64_t t = -1;
                OK(lf_comm_reduce_scatter_start_bf16(c, d, recv, n, ops[k], &t));
                OK(lf_comm_wait(c, t));
                OK(lf_comm_wait_all(c));
            } else {
                OK(lf_comm_reduce_scatter_bf16(c, d, recv, n, ops[k]));
            }
            m->get(h, recv, cnt * 2);
            bf16_compare(h, salt, P, off, cnt, ops[k], exact,
                         mode == 0 ? "reduce_scatter" : mode == 1 ? "reduce_scatter (in place)" : "started reduce_scatter",
                         n);
        }
    }
    for (int mode = 0; mode < 3; mode++, salt++) { /* all_gather: 0 apart, 1 in place, 2 started (apart) */
        for (size_t i = 0; i < n; i++) h[i] = 0xFFC1u; /* a NaN nobody sends: every element must be written */
        m->put(d, h, n * 2);
        for (size_t i = 0; i < cnt; i++) h[i] = bf16_val(salt, 77, off + i);
        uint16_t *send = mode == 1 ? d + off : part;
        m->put(send, h, cnt * 2);
        if (mode == 2) {
            int64_t t = -1;
            OK(lf_comm_all_gather_start_bf16(c, send, d, n, &t));
            OK(lf_comm_wait_all(c));
        } else {
            OK(lf_comm_all_gather_bf16(c, send, d, n));
        }
        m->get(h, d, n * 2);
        for (size_t i = 0; i < n; i++)
            CHECK(h[i] == bf16_val(salt, 77, i), "bf16 all_gather (mode %d) n=%zu: element %zu is 0x%04x, expected "
                  "0x%04x", mode, n, i, h[i], bf16_val(salt, 77, i));
    }
    const int root = (int)(n % (size_t)P);
    for (size_t i = 0; i < n; i++) h[i] = r == root ? bf16_val(salt, root, i) : 0;
    m->put(d, h, n * 2);
    OK(lf_comm_broadcast_bf16(c, d, n, root));
    m->get(h, d, n * 2);
    for (size_t i = 0; i < n; i++)
        CHECK(h[i] == bf16_val(salt, root, i), "bf16 broadcast n=%zu root %d: element %zu", n, root, i);
    m->release(part);
    m->release(d);
    free(h);
}

#endif
