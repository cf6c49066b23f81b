/*
 * The CUDA-on-CPU shim's own rules (src/backend/cuda/shim, README there),
 * with kernels planted here to break them:
 *  - a missing __syncthreads: the result differs from the reference under
 *    forward, reverse and the default shuffled schedule, identically on a
 *    second run; with the barrier the same kernel is right under all three;
 *    a tree reduction missing its first barrier is caught by forward and
 *    shuffle and, as the README says of races a schedule misses, not by
 *    reverse;
 *  - wrong shuffle masks: a lane outside its own mask, lanes disagreeing on
 *    the mask, a read outside the mask, a read of a lane a partial warp
 *    lacks, a read of an exited lane, a bad width: each a failed launch
 *    naming the kernel, block, thread, source line and rule, the error
 *    sticky until cudaDeviceReset;
 *  - deadlocks: __syncthreads inside a branch only some threads take, two
 *    __syncthreads sites, a warp barrier waiting on lanes at a block
 *    barrier: reported, never hung;
 *  - launch configuration and dynamic shared memory limits
 *    (cudaFuncSetAttribute), bad streams, a launch from inside a kernel;
 *  - what kernels rely on: the built-in variables on 3-D grids, barrier and
 *    vote results, shuffles against PTX's lane arithmetic (widths, clamps,
 *    the 5-bit lane operand), partial warps, atomics, shared memory poison
 *    at every block's start, the schedule's orders (and that a correct
 *    reduction gives the same bits under every schedule);
 *  - the runtime API: device properties, memory accounting and
 *    out-of-memory, range checks of copies and memsets, streams, events,
 *    error strings;
 *  - the fiber switch: exactly two switches per fiber per scheduling point
 *    (and one pair at its end), and its cost against swapcontext (printed).
 * Run as `test_shim env-bad` / `test_shim env-reverse` (CTest does, with
 * LF_SHIM_SCHEDULE set) it checks the environment variable instead.
 */
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
extern "C" {
#include <cmocka.h>
}
#include "backend/cuda/cuda_compat.h"
#include "backend/cuda/cuda_samples.h"

#define CK(expr)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess) fail_msg("%s -> %s", #expr, cudaGetErrorString(e_));                \
    } while (0)

/* the launch failed with `code` and its detail mentions every needle */
static void expect_failure(cudaError_t code, std::initializer_list<const char *> needles) {
    cudaError_t e = cudaGetLastError();
    if (e != code) fail_msg("expected %s, got %s", cudaGetErrorName(code), cudaGetErrorString(e));
    std::string d = lf_shim_last_error_detail();
    printf("expected %s: %s\n", cudaGetErrorName(code), d.c_str());
    for (const char *n : needles)
        if (d.find(n) == std::string::npos) fail_msg("detail '%s' lacks '%s'", d.c_str(), n);
}

template <typename T> static T *dev(size_t n) {
    void *p = nullptr;
    CK(cudaMalloc(&p, n * sizeof(T)));
    return static_cast<T *>(p);
}
template <typename T> static std::vector<T> get(const T *d, size_t n) {
    std::vector<T> v(n);
    CK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}
template <typename T> static void put(T *d, const std::vector<T> &v) {
    CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
}

static int reset(void **state) {
    (void)state;
    cudaDeviceReset();
    lf_shim_set_schedule(LF_SHIM_SCHEDULE_SHUFFLE, LF_SHIM_DEFAULT_SEED);
    lf_shim_set_poison(0xff);
    lf_shim_set_device_memory((size_t)8 << 30);
    return 0;
}

static int teardown(void **state) { /* the last test's memory */
    (void)state;
    cudaDeviceReset();
    return 0;
}

static std::string line_tag(int line) { return "test_shim.cpp:" + std::to_string(line); }

/* ------------------------------------------------------------ planted: a missing __syncthreads */
__global__ void reverse_with_sync(float *out, const float *in) {
    __shared__ float s[256];
    unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
    s[t] = in[base + t];
    __syncthreads();
    out[base + t] = s[n - 1 - t];
}
__global__ void reverse_missing_sync(float *out, const float *in) {
    __shared__ float s[256];
    unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
    s[t] = in[base + t];
    /* the __syncthreads() belongs here */
    out[base + t] = s[n - 1 - t];
}

static const lf_shim_schedule_kind kAllKinds[] = {LF_SHIM_SCHEDULE_FORWARD, LF_SHIM_SCHEDULE_REVERSE,
                                                  LF_SHIM_SCHEDULE_SHUFFLE};

static void test_missing_syncthreads_is_caught(void **state) {
    (void)state;
    const unsigned B = 256, G = 4, N = B * G;
    std::vector<float> in(N), ref(N);
    for (unsigned i = 0; i < N; i++) in[i] = (float)i;
    for (unsigned g = 0; g < G; g++)
        for (unsigned t = 0; t < B; t++) ref[g * B + t] = in[g * B + B - 1 - t];
    float *din = dev<float>(N), *dout = dev<float>(N);
    put(din, in);
    for (lf_shim_schedule_kind kind : kAllKinds) {
        lf_shim_set_schedule(kind, LF_SHIM_DEFAULT_SEED);
        LF_CUDA_LAUNCH(reverse_with_sync, G, B, 0, 0, dout, din);
        CK(cudaGetLastError());
        std::vector<float> good = get(dout, N);
        assert_memory_equal(good.data(), ref.data(), N * sizeof(float));

        std::vector<float> runs[2];
        for (auto &r : runs) {
            LF_CUDA_LAUNCH(reverse_missing_sync, G, B, 0, 0, dout, din);
            CK(cudaGetLastError());
            r = get(dout, N);
        }
        unsigned wrong = 0;
        for (unsigned i = 0; i < N; i++) wrong += memcmp(&runs[0][i], &ref[i], sizeof(float)) != 0;
        if (wrong == 0) fail_msg("schedule %d: the missing __syncthreads went unnoticed", (int)kind);
        /* thread t reads slot B-1-t; whoever of the pair runs first reads the poison: half the slots */
        if (kind != LF_SHIM_SCHEDULE_SHUFFLE) assert_int_equal(wrong, N / 2);
        assert_memory_equal(runs[0].data(), runs[1].data(), N * sizeof(float)); /* deterministic */
    }
}

__global__ void tree_missing_first_sync(float *out, const float *in) {
    __shared__ float s[256];
    unsigned t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    /* the __syncthreads() belongs here */
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

static void test_schedule_decides_which_races_show(void **state) {
    (void)state;
    const unsigned B = 256, G = 3;
    std::vector<float> in(B * G);
    for (unsigned i = 0; i < B * G; i++) in[i] = (float)(i % 17); /* integer sums: exact */
    float *din = dev<float>(B * G), *dout = dev<float>(G);
    put(din, in);
    for (lf_shim_schedule_kind kind : kAllKinds) {
        lf_shim_set_schedule(kind, LF_SHIM_DEFAULT_SEED);
        LF_CUDA_LAUNCH(tree_missing_first_sync, G, B, 0, 0, dout, din);
        CK(cudaGetLastError());
        std::vector<float> out = get(dout, G);
        bool right = true;
        for (unsigned g = 0; g < G; g++) {
            float ref = 0;
            for (unsigned t = 0; t < B; t++) ref += in[g * B + t];
            right = right && out[g] == ref;
        }
        /* reverse runs the higher threads first, so every s[t + stride] of the
         * first level is written before it is read: the race stays hidden */
        if (kind == LF_SHIM_SCHEDULE_REVERSE) {
            if (!right) fail_msg("reverse: expected the race to stay hidden");
        } else if (right) {
            fail_msg("schedule %d: the missing first __syncthreads went unnoticed", (int)kind);
        }
    }
}

static void test_correct_kernel_same_bits_every_schedule(void **state) {
    (void)state;
    const int n = 10007, grid = 5, block = 128;
    std::vector<float> x(n);
    for (int i = 0; i < n; i++) x[i] = sinf((float)i) * 3.0f;
    float *dx = dev<float>(n), *dp = dev<float>(grid), *dout = dev<float>(1);
    put(dx, x);
    float first = 0;
    int k = 0;
    for (lf_shim_schedule_kind kind : kAllKinds) {
        for (uint64_t seed : {1ull, 2ull}) {
            lf_shim_set_schedule(kind, seed);
            CK(lf__cuda_sample_block_sum(dout, dp, dx, n, grid, block, 0));
            float v = get(dout, 1)[0];
            if (k++ == 0) first = v;
            if (memcmp(&v, &first, 4) != 0) fail_msg("schedule %d seed %d: %.9g, first %.9g", (int)kind, (int)seed, v, first);
        }
    }
}

/* ------------------------------------------------------------ planted: wrong shuffle masks */
static int g_line;

__global__ void shfl_mask_excludes_caller(float *out) {
    float v = (float)threadIdx.x;
    g_line = __LINE__; v += __shfl_xor_sync(0x0000ffffu, v, 1); /* lanes 16..31 are not in the mask */
    out[threadIdx.x] = v;
}

static void test_wrong_mask_is_a_launch_error(void **state) {
    (void)state;
    float *d = dev<float>(32);
    lf_shim_set_schedule(LF_SHIM_SCHEDULE_FORWARD, 0);
    LF_CUDA_LAUNCH(shfl_mask_excludes_caller, 1, 32, 0, 0, d);
    expect_failure(cudaErrorLaunchFailure,
                   {"kernel 'shfl_mask_excludes_caller' block (0,0,0) thread (16,0,0)", "__shfl_xor_sync",
                    line_tag(g_line).c_str(), "mask 0x0000ffff, which does not include the calling lane 16"});
    /* sticky, as a faulted context: every call fails until the reset */
    void *p = nullptr;
    assert_int_equal(cudaMalloc(&p, 16), cudaErrorLaunchFailure);
    assert_int_equal(cudaGetLastError(), cudaErrorLaunchFailure);
    assert_int_equal(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    assert_non_null(strstr(cudaGetErrorString(cudaErrorLaunchFailure), "does not include the calling lane"));
    CK(cudaDeviceReset());
    CK(cudaMalloc(&p, 16));
    CK(cudaFree(p));
}

__global__ void shfl_masks_disagree(float *out) {
    unsigned lane = threadIdx.x & 31;
    unsigned mask = lane < 16 ? 0x0000ffffu : 0xffffffffu; /* overlapping, different */
    g_line = __LINE__; out[threadIdx.x] = __shfl_xor_sync(mask, (float)lane, 1);
}

static void test_masks_that_disagree(void **state) {
    (void)state;
    float *d = dev<float>(32);
    /* reverse: lanes 31..16 wait with the full mask when lane 15 comes with its own */
    lf_shim_set_schedule(LF_SHIM_SCHEDULE_REVERSE, 0);
    LF_CUDA_LAUNCH(shfl_masks_disagree, 1, 32, 0, 0, d);
    expect_failure(cudaErrorLaunchFailure,
                   {"thread (15,0,0)", "__shfl_xor_sync", line_tag(g_line).c_str(), "with mask 0x0000ffff while lanes 0xffff0000",
                    "must name the same mask"});
    CK(cudaDeviceReset());
    d = dev<float>(32);
    lf_shim_set_schedule(LF_SHIM_SCHEDULE_SHUFFLE, LF_SHIM_DEFAULT_SEED);
    LF_CUDA_LAUNCH(shfl_masks_disagree, 1, 32, 0, 0, d);
    expect_failure(cudaErrorLaunchFailure, {"must name the same mask"});
}

__global__ void shfl_reads_outside_mask(float *out) {
    unsigned lane = threadIdx.x & 31;
    float v = (float)lane;
    g_line = __LINE__; if (lane < 16) v = __shfl_down_sync(0x0000ffffu, v, 8); /* 8..15 read 16..23 */
    out[threadIdx.x] = v;
}

__global__ void shfl_partial_warp(float *out) {
    float v = (float)threadIdx.x;
    g_line = __LINE__; v += __shfl_xor_sync(0xffffffffu, v, 16);
    out[threadIdx.x] = v;
}

__global__ void shfl_reads_exited(float *out) {
    unsigned lane = threadIdx.x;
    if (lane >= 24) return;
    g_line = __LINE__; out[lane] = __shfl_down_sync(0xffffffffu, (float)lane, 4); /* 20..23 read 24..27 */
}

__global__ void shfl_bad_width(float *out) {
    g_line = __LINE__; out[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 0, 12);
}

static void test_shuffle_reads(void **state) {
    (void)state;
    for (lf_shim_schedule_kind kind : kAllKinds) {
        reset(nullptr);
        lf_shim_set_schedule(kind, 7);
        float *d = dev<float>(64);
        LF_CUDA_LAUNCH(shfl_reads_outside_mask, 1, 32, 0, 0, d);
        expect_failure(cudaErrorLaunchFailure, {"thread (8,0,0)", line_tag(g_line).c_str(),
                                                "reads lane 16, outside its mask 0x0000ffff"});
        CK(cudaDeviceReset());
        d = dev<float>(64);
        LF_CUDA_LAUNCH(shfl_partial_warp, 1, 48, 0, 0, d); /* warp 1 has lanes 0..15 */
        expect_failure(cudaErrorLaunchFailure,
                       {"thread (32,0,0)", "reads lane 16, which is not a thread of this block (its last warp has 16 lanes)"});
        CK(cudaDeviceReset());
        d = dev<float>(64);
        LF_CUDA_LAUNCH(shfl_reads_exited, 1, 32, 0, 0, d);
        expect_failure(cudaErrorLaunchFailure, {"thread (20,0,0)", "reads lane 24, which has exited"});
        CK(cudaDeviceReset());
        d = dev<float>(64);
        LF_CUDA_LAUNCH(shfl_bad_width, 1, 32, 0, 0, d);
        expect_failure(cudaErrorLaunchFailure, {"width 12: the width must be a power of two"});
        CK(cudaDeviceReset());
    }
}

/* ------------------------------------------------------------ planted: deadlocks */
__global__ void sync_in_branch(float *out) {
    __shared__ float s[64];
    unsigned t = threadIdx.x;
    s[t] = (float)t;
    g_line = __LINE__; if (t < 16) __syncthreads(); /* the others never come */
    out[t] = s[63 - t];
}

__global__ void sync_two_sites(float *out) {
    unsigned t = threadIdx.x;
    if (t & 1) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[t] = 1.0f;
}

__global__ void syncwarp_vs_syncthreads(float *out) {
    unsigned t = threadIdx.x;
    if (t < 16)
        __syncwarp(); /* waits for lanes 16..31, which wait below */
    else
        __syncthreads();
    out[t] = 1.0f;
}

static void test_deadlocks_are_reported(void **state) {
    (void)state;
    for (lf_shim_schedule_kind kind : kAllKinds) {
        reset(nullptr);
        lf_shim_set_schedule(kind, 3);
        float *d = dev<float>(64);
        LF_CUDA_LAUNCH(sync_in_branch, 2, 64, 0, 0, d);
        std::string where = "exited without reaching __syncthreads at " + line_tag(g_line) +
                            ", which 16 of the block's 64 threads wait at (deadlock)";
        expect_failure(cudaErrorLaunchFailure, {"kernel 'sync_in_branch'", "thread (16,0,0)", where.c_str()});
        CK(cudaDeviceReset());
        d = dev<float>(64);
        LF_CUDA_LAUNCH(sync_two_sites, 1, 64, 0, 0, d);
        expect_failure(cudaErrorLaunchFailure, {"every thread of a block must reach the same __syncthreads"});
        CK(cudaDeviceReset());
        d = dev<float>(64);
        LF_CUDA_LAUNCH(syncwarp_vs_syncthreads, 1, 32, 0, 0, d);
        expect_failure(cudaErrorLaunchFailure, {"thread (0,0,0): waits in __syncwarp", "mask 0xffffffff",
                                                "never reaches __syncthreads", "16 of the block's 32 threads", "(deadlock)"});
        CK(cudaDeviceReset());
    }
}

/* ------------------------------------------------------------ launch configuration */
__global__ void fill_kernel(float *out, float v) { out[blockIdx.x * blockDim.x + threadIdx.x] = v; }

__global__ void big_dynamic_shared(float *out, int n) {
    LF_CUDA_DYNAMIC_SHARED(float, s);
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) s[i] = (float)(i & 3);
    __syncthreads();
    if (threadIdx.x == 0) {
        float acc = 0;
        for (int i = 0; i < n; i++) acc += s[i];
        out[0] = acc;
    }
}

__global__ void no_args_kernel() {}

__global__ void child_kernel(float *out) { out[0] = 1.0f; }
__global__ void parent_kernel(float *out) {
    if (threadIdx.x == 0) LF_CUDA_LAUNCH(child_kernel, 1, 1, 0, 0, out);
}

template <int V> __global__ void template_kernel(float *out) { out[threadIdx.x] = (float)V; }

static void test_launch_configuration(void **state) {
    (void)state;
    float *d = dev<float>(1u << 16);
    struct {
        dim3 grid, block;
        const char *what;
    } bad[] = {
        {dim3(1), dim3(1025), "block (1025,1,1)"},  {dim3(1), dim3(32, 33), "block (32,33,1)"},
        {dim3(1), dim3(1, 1, 65), "block (1,1,65)"}, {dim3(1), dim3(0), "block (0,1,1)"},
        {dim3(0), dim3(32), "grid (0,1,1)"},         {dim3(1, 65536), dim3(32), "grid (1,65536,1)"},
    };
    for (auto &b : bad) {
        LF_CUDA_LAUNCH(fill_kernel, b.grid, b.block, 0, 0, d, 1.0f);
        expect_failure(cudaErrorInvalidConfiguration, {"kernel 'fill_kernel'", b.what});
        assert_int_equal(cudaGetLastError(), cudaSuccess); /* not sticky */
    }
    LF_CUDA_LAUNCH(fill_kernel, 2, 1024, 0, 0, d, 2.0f);
    CK(cudaGetLastError());
    assert_true(get(d, 2048)[2047] == 2.0f);

    /* dynamic shared memory: 48 KiB without the attribute, up to the opt-in maximum with it */
    const int n = 25000; /* 100000 bytes */
    LF_CUDA_LAUNCH(big_dynamic_shared, 1, 256, n * sizeof(float), 0, d, n);
    expect_failure(cudaErrorInvalidValue, {"100000 bytes of dynamic shared memory", "limit of 49152"});
    CK(cudaFuncSetAttribute(big_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4));
    LF_CUDA_LAUNCH(big_dynamic_shared, 1, 256, n * sizeof(float), 0, d, n);
    CK(cudaGetLastError());
    assert_true(get(d, 1)[0] == 1.5f * n); /* 0+1+2+3 per 4: an integer sum below 2^24, exact */
    assert_int_equal(cudaFuncSetAttribute(big_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 232449),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);

    /* a stream that does not exist */
    LF_CUDA_LAUNCH(fill_kernel, 1, 32, 0, (cudaStream_t)(uintptr_t)0x1234, d, 1.0f);
    expect_failure(cudaErrorInvalidResourceHandle, {"not a live stream"});
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    LF_CUDA_LAUNCH(fill_kernel, 1, 32, 0, s, d, 3.0f);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));

    LF_CUDA_LAUNCH(no_args_kernel, 1, 1, 0, 0);
    CK(cudaGetLastError());
    auto *tk = &template_kernel<7>;
    LF_CUDA_LAUNCH(tk, 1, 4, 0, 0, d);
    CK(cudaGetLastError());
    assert_true(get(d, 4)[3] == 7.0f);

    LF_CUDA_LAUNCH(parent_kernel, 1, 2, 0, 0, d);
    expect_failure(cudaErrorNotSupported, {"kernel 'child_kernel' launched from inside a kernel"});
}

/* ------------------------------------------------------------ what kernels rely on */
__global__ void builtins_3d(unsigned *out) {
    unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
    unsigned *o = out + 4 * (bid * nthreads + tid);
    o[0] = threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16;
    o[1] = blockIdx.x | blockIdx.y << 8 | blockIdx.z << 16;
    o[2] = blockDim.x | blockDim.y << 8 | blockDim.z << 16;
    o[3] = (gridDim.x | gridDim.y << 8 | gridDim.z << 16) + (o[3] == 0xffffffffu ? 0 : 0x10000000u);
}

static void test_builtin_variables(void **state) {
    (void)state;
    const dim3 g(3, 2, 2), b(4, 3, 2);
    const unsigned total = 12 * 24;
    unsigned *d = dev<unsigned>(4 * total); /* poisoned: every slot written exactly once below */
    LF_CUDA_LAUNCH(builtins_3d, g, b, 0, 0, d);
    CK(cudaGetLastError());
    std::vector<unsigned> o = get(d, 4 * total);
    for (unsigned bz = 0; bz < 2; bz++)
        for (unsigned by = 0; by < 2; by++)
            for (unsigned bx = 0; bx < 3; bx++)
                for (unsigned tz = 0; tz < 2; tz++)
                    for (unsigned ty = 0; ty < 3; ty++)
                        for (unsigned tx = 0; tx < 4; tx++) {
                            unsigned bid = bx + 3 * (by + 2 * bz), tid = tx + 4 * (ty + 3 * tz);
                            const unsigned *r = &o[4 * (bid * 24 + tid)];
                            assert_int_equal(r[0], tx | ty << 8 | tz << 16);
                            assert_int_equal(r[1], bx | by << 8 | bz << 16);
                            assert_int_equal(r[2], 4u | 3u << 8 | 2u << 16);
                            assert_int_equal(r[3], 3u | 2u << 8 | 2u << 16); /* slot was the poison: written once */
                        }
}

__global__ void barrier_and_votes(int *out) {
    unsigned t = threadIdx.x, lane = t & 31;
    int *o = out + 16 * t;
    o[0] = __syncthreads_count(t % 3 == 0);
    o[1] = __syncthreads_and(t < 100);
    o[2] = __syncthreads_and(t < 99);
    o[3] = __syncthreads_or(t == 57);
    o[4] = __syncthreads_or(0);
    if (t < 96) { /* three full warps */
        o[5] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
        o[6] = __any_sync(0xffffffffu, lane == 31);
        o[7] = __all_sync(0xffffffffu, lane < 31);
        o[8] = __all_sync(0xffffffffu, 1);
        o[9] = (int)__reduce_add_sync(0xffffffffu, lane);
        o[10] = __reduce_min_sync(0xffffffffu, (int)lane - 7);
        o[11] = __reduce_max_sync(0xffffffffu, (int)lane - 7);
    } else { /* the last warp has 4 lanes (100 threads): the missing lanes count as exited */
        o[5] = (int)__ballot_sync(0xffffffffu, 1);
    }
}

static void test_barrier_and_vote_results(void **state) {
    (void)state;
    int *d = dev<int>(16 * 100);
    LF_CUDA_LAUNCH(barrier_and_votes, 1, 100, 0, 0, d);
    CK(cudaGetLastError());
    std::vector<int> o = get(d, 16 * 100);
    for (int t = 0; t < 100; t++) {
        const int *r = &o[16 * t];
        assert_int_equal(r[0], 34);
        assert_int_equal(r[1], 1);
        assert_int_equal(r[2], 0);
        assert_int_equal(r[3], 1);
        assert_int_equal(r[4], 0);
        if (t < 96) {
            assert_int_equal((unsigned)r[5], 0x49249249u);
            assert_int_equal(r[6], 1);
            assert_int_equal(r[7], 0);
            assert_int_equal(r[8], 1);
            assert_int_equal(r[9], 496);
            assert_int_equal(r[10], -7);
            assert_int_equal(r[11], 24);
        } else {
            assert_int_equal((unsigned)r[5], 0xfu);
        }
    }
}

__global__ void shuffle_semantics(int *out) {
    int lane = (int)(threadIdx.x & 31);
    int *o = out + 8 * lane;
    o[0] = __shfl_sync(0xffffffffu, lane, 3, 8);       /* width 8: lane 3 of my segment */
    o[1] = __shfl_up_sync(0xffffffffu, lane, 3, 16);   /* first 3 of each 16 keep their own */
    o[2] = __shfl_down_sync(0xffffffffu, lane, 5);     /* last 5 keep their own */
    o[3] = __shfl_xor_sync(0xffffffffu, lane, 4, 8);
    o[4] = __shfl_xor_sync(0xffffffffu, lane, 8, 8);   /* the partner is in a later segment: own value */
    o[5] = __shfl_down_sync(0xffffffffu, lane, 33);    /* the lane operand is taken mod 32 (PTX b[4:0]) */
    o[6] = __shfl_sync(0xffffffffu, lane, 37);         /* likewise: lane 5 */
    double dv = __shfl_sync(0xffffffffu, 1.5 * lane, 31);
    o[7] = (int)(dv * 2);
}

static void test_shuffle_lane_arithmetic(void **state) {
    (void)state;
    int *d = dev<int>(8 * 32);
    LF_CUDA_LAUNCH(shuffle_semantics, 1, 32, 0, 0, d);
    CK(cudaGetLastError());
    std::vector<int> o = get(d, 8 * 32);
    for (int l = 0; l < 32; l++) {
        const int *r = &o[8 * l];
        assert_int_equal(r[0], (l & ~7) + 3);
        assert_int_equal(r[1], l % 16 < 3 ? l : l - 3);
        assert_int_equal(r[2], l + 5 < 32 ? l + 5 : l);
        assert_int_equal(r[3], l ^ 4);
        assert_int_equal(r[4], (l ^ 8) / 8 > l / 8 ? l : (l ^ 8));
        assert_int_equal(r[5], l + 1 < 32 ? l + 1 : l);
        assert_int_equal(r[6], 5);
        assert_int_equal(r[7], 93);
    }
}

__global__ void atomics_kernel(int *ints, unsigned *uints, float *f, unsigned long long *ull) {
    int id = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    atomicAdd(&ints[0], 1);
    atomicMax(&ints[1], id);
    atomicMin(&ints[2], -id);
    if (atomicCAS(&ints[3], 0, id + 1) == 0) atomicAdd(&ints[4], 1); /* exactly one winner */
    atomicSub(&ints[5], 2);
    atomicAdd(&uints[0], 3u);
    atomicMax(&uints[1], (unsigned)id * 2u);
    atomicOr(&uints[2], 1u << (id % 32));
    atomicAdd(&f[0], 0.5f);
    atomicExch(&f[1], 9.0f);
    atomicAdd(&ull[0], 1ull << 33);
}

static void test_atomics(void **state) {
    (void)state;
    int *di = dev<int>(6);
    unsigned *du = dev<unsigned>(3);
    float *df = dev<float>(2);
    unsigned long long *dl = dev<unsigned long long>(1);
    CK(cudaMemset(di, 0, 6 * sizeof(int)));
    CK(cudaMemset(du, 0, 3 * sizeof(unsigned)));
    CK(cudaMemset(df, 0, 2 * sizeof(float)));
    CK(cudaMemset(dl, 0, sizeof(unsigned long long)));
    LF_CUDA_LAUNCH(atomics_kernel, 4, 250, 0, 0, di, du, df, dl);
    CK(cudaGetLastError());
    std::vector<int> i = get(di, 6);
    std::vector<unsigned> u = get(du, 3);
    std::vector<float> f = get(df, 2);
    assert_int_equal(i[0], 1000);
    assert_int_equal(i[1], 999);
    assert_int_equal(i[2], -999);
    assert_true(i[3] >= 1 && i[3] <= 1000);
    assert_int_equal(i[4], 1);
    assert_int_equal(i[5], -2000);
    assert_int_equal(u[0], 3000u);
    assert_int_equal(u[1], 1998u);
    assert_int_equal(u[2], 0xffffffffu);
    assert_true(f[0] == 500.0f);
    assert_true(f[1] == 9.0f);
    assert_true(get(dl, 1)[0] == 1000ull << 33);
}

__global__ void read_shared_before_write(unsigned *out) {
    __shared__ unsigned s[8];
    LF_CUDA_DYNAMIC_SHARED(unsigned, dyn);
    unsigned t = threadIdx.x, *o = out + 16 * blockIdx.x;
    o[t] = s[t];       /* never written in this block: the poison */
    o[8 + t] = dyn[t];
    __syncthreads();
    s[t] = blockIdx.x + 1; /* what the next block must not see */
    dyn[t] = blockIdx.x + 1;
}

/* __shared__ in a kernel template and in an inline __device__ helper
 * (COMDAT statics, beside the plain ones of this file) */
__device__ __forceinline__ unsigned helper_read_before_write(unsigned t) {
    __shared__ unsigned h[8];
    unsigned v = h[t];
    __syncthreads();
    h[t] = 1;
    return v;
}
template <int N> __global__ void template_read_before_write(unsigned *out) {
    __shared__ unsigned s[N];
    unsigned t = threadIdx.x;
    out[2 * t] = s[t];
    out[2 * t + 1] = helper_read_before_write(t);
    __syncthreads();
    s[t] = 2;
}

static void test_shared_memory_poison(void **state) {
    (void)state;
    for (unsigned char poison : {(unsigned char)0xff, (unsigned char)0x7f}) {
        lf_shim_set_poison(poison);
        unsigned *d = dev<unsigned>(16 * 3);
        std::vector<unsigned> fresh = get(d, 16 * 3);
        unsigned word = poison * 0x01010101u;
        for (unsigned v : fresh) assert_int_equal(v, word); /* new device memory is poisoned too */
        CK(cudaMemset(d, 0, 16 * 3 * sizeof(unsigned))); /* so what the kernel writes shows */
        LF_CUDA_LAUNCH(read_shared_before_write, 3, 8, 8 * sizeof(unsigned), 0, d);
        CK(cudaGetLastError());
        for (unsigned v : get(d, 16 * 3)) assert_int_equal(v, word);
        auto *tk = &template_read_before_write<8>;
        for (int run = 0; run < 2; run++) { /* the second run must not see the first's writes */
            CK(cudaMemset(d, 0, 16 * sizeof(unsigned)));
            LF_CUDA_LAUNCH(tk, 1, 8, 0, 0, d);
            CK(cudaGetLastError());
            for (unsigned v : get(d, 16)) assert_int_equal(v, word);
        }
        CK(cudaFree(d));
    }
}

__global__ void record_order(int *order, int *counter) {
    order[atomicAdd(counter, 1)] = (int)threadIdx.x;
    __syncthreads();
    order[atomicAdd(counter, 1)] = (int)threadIdx.x;
}
__global__ void record_block_order(int *order, int *counter) {
    order[atomicAdd(counter, 1)] = (int)(blockIdx.x + gridDim.x * blockIdx.y);
}

static std::vector<int> run_order(lf_shim_schedule_kind kind, uint64_t seed) {
    lf_shim_set_schedule(kind, seed);
    int *d = dev<int>(17);
    CK(cudaMemset(d, 0, 17 * sizeof(int)));
    LF_CUDA_LAUNCH(record_order, 1, 8, 0, 0, d + 1, d);
    CK(cudaGetLastError());
    std::vector<int> o = get(d, 17);
    CK(cudaFree(d));
    return std::vector<int>(o.begin() + 1, o.end());
}

static void test_schedule_orders(void **state) {
    (void)state;
    std::vector<int> fwd = run_order(LF_SHIM_SCHEDULE_FORWARD, 0);
    std::vector<int> rev = run_order(LF_SHIM_SCHEDULE_REVERSE, 0);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(fwd[(size_t)i], i % 8);
        assert_int_equal(rev[(size_t)i], 7 - i % 8);
    }
    std::vector<int> a = run_order(LF_SHIM_SCHEDULE_SHUFFLE, 11), b = run_order(LF_SHIM_SCHEDULE_SHUFFLE, 11),
                     c = run_order(LF_SHIM_SCHEDULE_SHUFFLE, 12);
    assert_true(a == b); /* fixed by the seed */
    assert_true(a != c);
    for (int rnd = 0; rnd < 2; rnd++) { /* each round a permutation of the 8 threads */
        std::vector<int> r(a.begin() + 8 * rnd, a.begin() + 8 * rnd + 8);
        std::vector<int> sorted = r;
        std::sort(sorted.begin(), sorted.end());
        for (int i = 0; i < 8; i++) assert_int_equal(sorted[(size_t)i], i);
    }
    assert_false(std::vector<int>(a.begin(), a.begin() + 8) == std::vector<int>(a.begin() + 8, a.end()));

    /* blocks: every block once, in the schedule's order */
    for (lf_shim_schedule_kind kind : kAllKinds) {
        lf_shim_set_schedule(kind, 5);
        const int G = 7 * 143; /* 1001 blocks */
        int *d = dev<int>(G + 1);
        CK(cudaMemset(d, 0, (G + 1) * sizeof(int)));
        LF_CUDA_LAUNCH(record_block_order, dim3(7, 143), 1, 0, 0, d + 1, d);
        CK(cudaGetLastError());
        std::vector<int> o = get(d, G + 1);
        std::vector<int> seen(G, 0);
        for (int i = 1; i <= G; i++) seen[(size_t)o[(size_t)i]]++;
        for (int v : seen) assert_int_equal(v, 1);
        if (kind == LF_SHIM_SCHEDULE_FORWARD) assert_int_equal(o[1], 0);
        if (kind == LF_SHIM_SCHEDULE_REVERSE) assert_int_equal(o[1], G - 1);
        if (kind == LF_SHIM_SCHEDULE_SHUFFLE) {
            int ascending = 1;
            for (int i = 1; i < G; i++) ascending &= o[(size_t)i + 1] == o[(size_t)i] + 1;
            assert_false(ascending);
        }
        CK(cudaFree(d));
    }
}

/* ------------------------------------------------------------ the runtime API */
static void test_runtime_api(void **state) {
    (void)state;
    int count = 0, dev_id = -1;
    CK(cudaGetDeviceCount(&count));
    assert_int_equal(count, 1);
    CK(cudaSetDevice(0));
    CK(cudaGetDevice(&dev_id));
    assert_int_equal(dev_id, 0);
    assert_int_equal(cudaSetDevice(1), cudaErrorInvalidDevice);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    assert_non_null(strstr(prop.name, "shim"));
    assert_int_equal(prop.warpSize, 32);
    assert_int_equal(prop.maxThreadsPerBlock, 1024);
    int v = 0;
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    assert_int_equal(v, 232448);

    /* memory accounting and out of memory */
    size_t fr0, tot;
    CK(cudaMemGetInfo(&fr0, &tot));
    assert_true(tot == (size_t)8 << 30 && fr0 == tot);
    void *p = nullptr;
    CK(cudaMalloc(&p, 1000));
    assert_int_equal((uintptr_t)p % 256, 0);
    size_t fr1;
    CK(cudaMemGetInfo(&fr1, &tot));
    assert_true(fr0 - fr1 == 1024);
    lf_shim_set_device_memory(1 << 20);
    void *q = (void *)0x1;
    assert_int_equal(cudaMalloc(&q, 2 << 20), cudaErrorMemoryAllocation);
    assert_true(q == (void *)0x1); /* nothing handed out */
    assert_non_null(strstr(lf_shim_last_error_detail(), "cudaMalloc(2097152)"));
    assert_int_equal(cudaGetLastError(), cudaErrorMemoryAllocation);
    lf_shim_set_device_memory((size_t)8 << 30);
    assert_int_equal(cudaFree((char *)p + 4), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);

    /* copies and memsets stay inside one allocation */
    std::vector<char> host(2000, 1);
    assert_int_equal(cudaMemcpy(p, host.data(), 1001, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    assert_non_null(strstr(cudaGetErrorString(cudaErrorInvalidValue), "not inside one device allocation"));
    CK(cudaMemcpy(p, host.data(), 1000, cudaMemcpyHostToDevice));
    assert_int_equal(cudaMemcpy(host.data(), host.data() + 1000, 10, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemset((char *)p + 990, 0, 11), cudaErrorInvalidValue);
    CK(cudaMemset((char *)p + 990, 7, 10));
    CK(cudaMemcpy(host.data(), p, 1000, cudaMemcpyDeviceToHost));
    assert_int_equal(host[989], 1);
    assert_int_equal(host[999], 7);
    assert_int_equal(cudaMemcpy(p, host.data(), 4, (cudaMemcpyKind)9), cudaErrorInvalidMemcpyDirection);
    cudaGetLastError();
    CK(cudaFree(p));
    CK(cudaFree(nullptr));
    void *h = nullptr;
    CK(cudaMallocHost(&h, 100));
    assert_int_equal(cudaFreeHost(host.data()), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    CK(cudaFreeHost(h));

    /* streams and events */
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1, e2, notime;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreate(&e2));
    CK(cudaEventCreateWithFlags(&notime, cudaEventDisableTiming));
    float *d = dev<float>(1 << 16);
    CK(cudaEventRecord(e0, s));
    LF_CUDA_LAUNCH(fill_kernel, 64, 1024, 0, s, d, 1.0f);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1, s));
    CK(cudaStreamWaitEvent(0, e1, 0));
    CK(cudaEventSynchronize(e1));
    float ms = -1;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    assert_true(ms >= 0.0f);
    CK(cudaEventRecord(notime, s));
    assert_int_equal(cudaEventElapsedTime(&ms, e0, notime), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaEventElapsedTime(&ms, e0, e2), cudaErrorInvalidResourceHandle); /* e2 never recorded */
    CK(cudaEventDestroy(e2));
    assert_int_equal(cudaEventDestroy(e2), cudaErrorInvalidResourceHandle);
    CK(cudaStreamDestroy(s));
    assert_int_equal(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaMemcpyAsync(d, d, 4, cudaMemcpyDeviceToDevice, s), cudaErrorInvalidResourceHandle);
    cudaGetLastError();
    assert_string_equal(cudaGetErrorName(cudaErrorInvalidConfiguration), "cudaErrorInvalidConfiguration");
    assert_string_equal(cudaGetErrorString(cudaSuccess), "no error");
}

/* ------------------------------------------------------------ the fiber switch */
__global__ void ten_barriers(int *out) {
    int acc = 0;
    for (int i = 0; i < 10; i++) {
        acc += (int)threadIdx.x;
        __syncthreads();
    }
    out[threadIdx.x] = acc;
}

static void test_switches(void **state) {
    (void)state;
    int *d = dev<int>(64);
    LF_CUDA_LAUNCH(ten_barriers, 1, 64, 0, 0, d); /* warm: every fiber exists */
    CK(cudaGetLastError());
    uint64_t before = lf_shim_fiber_switches();
    LF_CUDA_LAUNCH(ten_barriers, 1, 64, 0, 0, d);
    CK(cudaGetLastError());
    /* each fiber: resumed from its park, then once after each of the 10 barriers; a yield each time */
    assert_int_equal(lf_shim_fiber_switches() - before, 64u * 11u * 2u);
    assert_int_equal(get(d, 64)[63], 630);
    double ns_shim = 0, ns_uc = 0;
    assert_int_equal(lf_shim_measure_switch(200000, &ns_shim, &ns_uc), 0);
#if defined(__SANITIZE_ADDRESS__)
    assert_true(ns_shim > 0);
#else
    assert_true(ns_shim > 0 && ns_uc > 0);
#endif
    printf("fiber switch: %.1f ns (_setjmp/_longjmp), %.1f ns (swapcontext)\n", ns_shim, ns_uc);
}

/* ------------------------------------------------------------ the environment */
static int env_check(const char *what) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (!strcmp(what, "env-bad")) {
        const char *d = lf_shim_last_error_detail();
        if (e != cudaErrorInitializationError || !strstr(d, "LF_SHIM_SCHEDULE='bogus'")) {
            printf("expected cudaErrorInitializationError naming LF_SHIM_SCHEDULE, got %s / '%s'\n",
                   cudaGetErrorName(e), d);
            return 1;
        }
        void *p = nullptr;
        if (cudaMalloc(&p, 4) != cudaErrorInitializationError) return 1;
        printf("ok: %s\n", cudaGetErrorString(cudaErrorInitializationError));
        return 0;
    }
    lf_shim_schedule_kind kind;
    uint64_t seed;
    lf_shim_get_schedule(&kind, &seed);
    if (e != cudaSuccess || kind != LF_SHIM_SCHEDULE_REVERSE) {
        printf("expected the reverse schedule from LF_SHIM_SCHEDULE\n");
        return 1;
    }
    std::vector<int> o;
    {
        int *d = nullptr;
        if (cudaMalloc((void **)&d, 17 * sizeof(int)) != cudaSuccess) return 1;
        cudaMemset(d, 0, 17 * sizeof(int));
        LF_CUDA_LAUNCH(record_order, 1, 8, 0, 0, d + 1, d);
        o.resize(17);
        cudaMemcpy(o.data(), d, 17 * sizeof(int), cudaMemcpyDeviceToHost);
        cudaFree(d);
    }
    for (int i = 0; i < 16; i++)
        if (o[(size_t)i + 1] != 7 - i % 8) return 1;
    printf("ok: LF_SHIM_SCHEDULE=reverse ran the threads last first\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1) return env_check(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_missing_syncthreads_is_caught, reset),
        cmocka_unit_test_setup(test_schedule_decides_which_races_show, reset),
        cmocka_unit_test_setup(test_correct_kernel_same_bits_every_schedule, reset),
        cmocka_unit_test_setup(test_wrong_mask_is_a_launch_error, reset),
        cmocka_unit_test_setup(test_masks_that_disagree, reset),
        cmocka_unit_test_setup(test_shuffle_reads, reset),
        cmocka_unit_test_setup(test_deadlocks_are_reported, reset),
        cmocka_unit_test_setup(test_launch_configuration, reset),
        cmocka_unit_test_setup(test_builtin_variables, reset),
        cmocka_unit_test_setup(test_barrier_and_vote_results, reset),
        cmocka_unit_test_setup(test_shuffle_lane_arithmetic, reset),
        cmocka_unit_test_setup(test_atomics, reset),
        cmocka_unit_test_setup(test_shared_memory_poison, reset),
        cmocka_unit_test_setup(test_schedule_orders, reset),
        cmocka_unit_test_setup(test_runtime_api, reset),
        cmocka_unit_test_setup(test_switches, reset),
    };
    return cmocka_run_group_tests(tests, nullptr, teardown);
}
