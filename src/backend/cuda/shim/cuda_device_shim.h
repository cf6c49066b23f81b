/*
 * The CUDA C++ language of the CUDA-on-CPU shim: what a .cu kernel file
 * sees when the host C++ compiler builds it (../cuda_compat.h includes this
 * when LF_CUDA_SHIM is defined; no CUDA header is needed or read).
 *
 * What it provides, with CUDA's names and meanings:
 *  - the qualifiers (__global__ __device__ __host__ __forceinline__
 *    __launch_bounds__ __constant__ __align__; __restrict__ is the host
 *    compiler's own), dim3, threadIdx/blockIdx/blockDim/gridDim, warpSize;
 *  - __shared__: a function-local static thread_local, which the
 *    scheduler fills with the poison byte at every block's start (found
 *    from the ELF symbol table, so in a stripped binary it is not
 *    poisoned). Blocks run one at a time on the launching thread
 *    (shim_fiber.cpp), so that thread's copy is the block's storage. Host
 *    code compiled into the shim library must therefore declare no
 *    function-local thread_local of its own (CUDA device code has none);
 *    a namespace-scope __shared__ works but is not poisoned. Dynamic
 *    shared memory is LF_CUDA_DYNAMIC_SHARED
 *    (cuda_compat.h): `extern __shared__` cannot be expressed with a macro
 *    and fails to compile here (extern and static), by design;
 *  - the scheduling points: __syncthreads(_count/_and/_or), __syncwarp,
 *    __shfl(_up/_down/_xor)_sync, __ballot_sync, __any_sync, __all_sync,
 *    __reduce_{add,min,max}_sync. Each is a macro that records the source
 *    line (for the error messages) and calls into shim_fiber.cpp, which
 *    checks the rules listed in ../README.md and reports a broken one as
 *    a failed launch, never a hang;
 *  - atomics (the overloads CUDA has: no float atomicMax, as on a GPU),
 *    __threadfence*, the math CUDA adds to the C library's (rsqrtf, the
 *    fast intrinsics, which here are the accurate functions), bit
 *    intrinsics, cache-hinted loads and stores (plain accesses here);
 *  - __half and __nv_bfloat16 (and the 2-wide __half2 / __nv_bfloat162)
 *    with CUDA's conversions: float to either rounds to nearest even, a NaN
 *    becomes the canonical 0x7fff, fp16 overflow becomes infinity; either
 *    to float is exact. Arithmetic on them goes through float and rounds
 *    once, which is exact for +, -, * and the fma-free ops (the float result
 *    of two bf16/fp16 operands is exact or far from a tie) and may differ
 *    from the hardware in the last bit for / only;
 *  - the launcher behind LF_CUDA_LAUNCH (cuda_compat.h): the arguments are
 *    evaluated once and converted to the kernel's parameter types, as
 *    <<<>>> does, then every thread calls the kernel with its own copy.
 *
 * Not provided, on purpose (see ../README.md): __activemask (there is no
 * implicit convergence to report), inline PTX, warp-matrix (wmma/mma)
 * functions, cooperative groups, textures.
 *
 * Reference: CUDA C++ Programming Guide (built-in variables, synchronization
 * and warp functions, atomics), PTX ISA (shfl.sync, bar.sync semantics).
 */
#ifndef LF_CUDA_DEVICE_SHIM_H
#define LF_CUDA_DEVICE_SHIM_H

#ifndef __cplusplus
#error "cuda_device_shim.h is C++ (the .cu files); host C code includes cuda_api.h"
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include "cuda_runtime_shim.h"
#include "lf_shim.h"

/* ------------------------------------------------------------ qualifiers */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* A function-local static thread_local: one copy per OS thread, and a
 * launch runs all its blocks on one OS thread, one block at a time. The
 * scheduler finds these variables (for the poison) in the ELF symbol
 * table: TLS symbols with function-local names (_ZZ...). A section
 * attribute cannot mark them: GCC ignores it on the statics of template
 * instantiations. */
#define __shared__ static thread_local

/* ------------------------------------------------------------ dim3 and the built-in variables */
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

/* What the scheduler sets for the running fiber (shim_fiber.cpp). */
struct lf_shim_block_info {
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};
extern __thread const lf_shim_block_info *lf_shim_tls_block;
extern __thread const uint3 *lf_shim_tls_thread_idx;
extern __thread void *lf_shim_tls_dynamic_shared;

#define threadIdx (*lf_shim_tls_thread_idx)
#define blockIdx (lf_shim_tls_block->block_idx)
#define blockDim (lf_shim_tls_block->block_dim)
#define gridDim (lf_shim_tls_block->grid_dim)
constexpr int warpSize = 32;

/* ------------------------------------------------------------ fp16 and bf16 */
namespace lf_shim {
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

/* float -> bf16, nearest even; NaN -> 0x7fff (what cvt.rn.bf16.f32 gives) */
static inline uint16_t f32_to_bf16_rn(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16); /* carries into the exponent round up to inf */
}
static inline uint16_t f32_to_bf16_rz(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    return (uint16_t)(u >> 16);
}
static inline float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* float -> fp16 (1-5-10), nearest even, overflow to inf, subnormals kept;
 * NaN -> 0x7fff. */
static inline uint16_t f32_to_f16_rn(float f) {
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7fffu;
    if (a == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
    int exp = (int)(a >> 23) - 127;              /* unbiased */
    uint32_t mant = (a & 0x7fffffu) | 0x800000u; /* 24 significant bits */
    if (a < 0x00800000u) return (uint16_t)sign;  /* float subnormals are far below fp16's range */
    uint32_t q;                                  /* the fp16 magnitude before rounding, in units of its last place */
    uint32_t rem;                                /* the dropped bits */
    int shift;                                   /* how many low bits of mant are dropped */
    if (exp >= -14) {
        shift = 13; /* normal: keep 11 of the 24 bits */
        q = ((uint32_t)(exp + 15) << 10) | ((mant >> 13) & 0x3ffu);
    } else {
        shift = 13 + (-14 - exp);              /* subnormal: the unit is 2^-24 */
        if (shift > 24) return (uint16_t)sign; /* below half the smallest subnormal */
        q = mant >> shift;
    }
    rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++; /* may carry into the exponent or to inf */
    if (q >= 0x7c00u) q = 0x7c00u;
    return (uint16_t)(sign | q);
}
static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        float v = std::ldexp((float)m, -24); /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}
} // namespace lf_shim

struct __half_raw {
    unsigned short x;
};
struct __nv_bfloat16_raw {
    unsigned short x;
};

struct __half {
    unsigned short __x;
    __half() = default;
    constexpr __half(__half_raw r) : __x(r.x) {}
    __half(float f) : __x(lf_shim::f32_to_f16_rn(f)) {}
    __half(double d) : __x(lf_shim::f32_to_f16_rn((float)d)) {}
    __half(int i) : __x(lf_shim::f32_to_f16_rn((float)i)) {}
    operator float() const { return lf_shim::f16_to_f32(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
    __half &operator=(float f) {
        __x = lf_shim::f32_to_f16_rn(f);
        return *this;
    }
};
struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    constexpr __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(lf_shim::f32_to_bf16_rn(f)) {}
    __nv_bfloat16(double d) : __x(lf_shim::f32_to_bf16_rn((float)d)) {}
    __nv_bfloat16(int i) : __x(lf_shim::f32_to_bf16_rn((float)i)) {}
    operator float() const { return lf_shim::bf16_to_f32(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
    __nv_bfloat16 &operator=(float f) {
        __x = lf_shim::f32_to_bf16_rn(f);
        return *this;
    }
};
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
struct __align__(4) __half2 {
    __half x, y;
};
struct __align__(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

/* arithmetic through float, one rounding */
#define LF_SHIM_LOWP_OPS(T) \
    static inline T operator+(T a, T b) { return T((float)a + (float)b); } \
    static inline T operator-(T a, T b) { return T((float)a - (float)b); } \
    static inline T operator*(T a, T b) { return T((float)a * (float)b); } \
    static inline T operator/(T a, T b) { return T((float)a / (float)b); } \
    static inline T operator-(T a) { \
        T r = a; \
        r.__x ^= 0x8000u; \
        return r; \
    } \
    static inline T &operator+=(T &a, T b) { return a = a + b; } \
    static inline T &operator-=(T &a, T b) { return a = a - b; } \
    static inline T &operator*=(T &a, T b) { return a = a * b; } \
    static inline T &operator/=(T &a, T b) { return a = a / b; } \
    static inline bool operator==(T a, T b) { return (float)a == (float)b; } \
    static inline bool operator!=(T a, T b) { return (float)a != (float)b; } \
    static inline bool operator<(T a, T b) { return (float)a < (float)b; } \
    static inline bool operator<=(T a, T b) { return (float)a <= (float)b; } \
    static inline bool operator>(T a, T b) { return (float)a > (float)b; } \
    static inline bool operator>=(T a, T b) { return (float)a >= (float)b; } \
    static inline T __hadd(T a, T b) { return a + b; } \
    static inline T __hsub(T a, T b) { return a - b; } \
    static inline T __hmul(T a, T b) { return a * b; } \
    static inline T __hdiv(T a, T b) { return a / b; } \
    static inline T __hneg(T a) { return -a; } \
    static inline T __hfma(T a, T b, T c) { return T(std::fma((float)a, (float)b, (float)c)); } \
    static inline T __hmax(T a, T b) { return T(std::fmax((float)a, (float)b)); } \
    static inline T __hmin(T a, T b) { return T(std::fmin((float)a, (float)b)); }
LF_SHIM_LOWP_OPS(__half)
LF_SHIM_LOWP_OPS(__nv_bfloat16)
#undef LF_SHIM_LOWP_OPS

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline float __half2float(__half h) { return lf_shim::f16_to_f32(h.__x); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
static inline __half2 __float22half2_rn(float2 v) { return __half2{__half(v.x), __half(v.y)}; }
static inline __half2 __float2half2_rn(float a) { return __half2{__half(a), __half(a)}; }
static inline float2 __half22float2(__half2 h) { return make_float2((float)h.x, (float)h.y); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
static inline float __low2float(__half2 h) { return (float)h.x; }
static inline float __high2float(__half2 h) { return (float)h.y; }

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rz(float f) {
    return __nv_bfloat16(__nv_bfloat16_raw{lf_shim::f32_to_bf16_rz(f)});
}
static inline float __bfloat162float(__nv_bfloat16 h) { return lf_shim::bf16_to_f32(h.__x); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)};
}
static inline __nv_bfloat162 __float22bfloat162_rn(float2 v) {
    return __nv_bfloat162{__nv_bfloat16(v.x), __nv_bfloat16(v.y)};
}
static inline __nv_bfloat162 __float2bfloat162_rn(float a) {
    return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(a)};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2((float)h.x, (float)h.y); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
static inline float __low2float(__nv_bfloat162 h) { return (float)h.x; }
static inline float __high2float(__nv_bfloat162 h) { return (float)h.y; }

/* ------------------------------------------------------------ scheduling points */
namespace lf_shim {
/* what a warp-level call asks for (shim_fiber.cpp) */
enum warp_op {
    WARP_SYNC = 0,
    WARP_SHFL_IDX,
    WARP_SHFL_UP,
    WARP_SHFL_DOWN,
    WARP_SHFL_XOR,
    WARP_BALLOT,
    WARP_ANY,
    WARP_ALL,
    WARP_REDUCE_ADD_U,
    WARP_REDUCE_MIN_U,
    WARP_REDUCE_MAX_U,
    WARP_REDUCE_MIN_I,
    WARP_REDUCE_MAX_I,
};
enum block_op { BLOCK_SYNC = 0, BLOCK_COUNT, BLOCK_AND, BLOCK_OR };

/* The scheduling points. `file`/`line` name the call site. They return to
 * the calling fiber only when the barrier completed; a broken rule ends
 * the launch and never returns. */
int block_barrier(const char *file, int line, int op, int pred);
uint64_t warp_collective(const char *file, int line, int op, unsigned mask, uint64_t value, int b, int width);

template <typename T> struct is_shfl_type : std::false_type {};
#define LF_SHIM_SHFL_TYPE(T) \
    template <> struct is_shfl_type<T> : std::true_type {};
LF_SHIM_SHFL_TYPE(int)
LF_SHIM_SHFL_TYPE(unsigned int)
LF_SHIM_SHFL_TYPE(long)
LF_SHIM_SHFL_TYPE(unsigned long)
LF_SHIM_SHFL_TYPE(long long)
LF_SHIM_SHFL_TYPE(unsigned long long)
LF_SHIM_SHFL_TYPE(float)
LF_SHIM_SHFL_TYPE(double)
LF_SHIM_SHFL_TYPE(__half)
LF_SHIM_SHFL_TYPE(__half2)
LF_SHIM_SHFL_TYPE(__nv_bfloat16)
LF_SHIM_SHFL_TYPE(__nv_bfloat162)
#undef LF_SHIM_SHFL_TYPE

/* A call site: __syncthreads() expands to site{__FILE__, __LINE__}.syncthreads(). */
struct site {
    const char *file;
    int line;

    void syncthreads() const { (void)block_barrier(file, line, BLOCK_SYNC, 0); }
    int syncthreads_count(int pred) const { return block_barrier(file, line, BLOCK_COUNT, pred != 0); }
    int syncthreads_and(int pred) const { return block_barrier(file, line, BLOCK_AND, pred != 0); }
    int syncthreads_or(int pred) const { return block_barrier(file, line, BLOCK_OR, pred != 0); }

    void syncwarp(unsigned mask = 0xffffffffu) const { (void)warp_collective(file, line, WARP_SYNC, mask, 0, 0, 32); }
    unsigned ballot(unsigned mask, int pred) const {
        return (unsigned)warp_collective(file, line, WARP_BALLOT, mask, pred != 0, 0, 32);
    }
    int any(unsigned mask, int pred) const {
        return (int)warp_collective(file, line, WARP_ANY, mask, pred != 0, 0, 32);
    }
    int all(unsigned mask, int pred) const {
        return (int)warp_collective(file, line, WARP_ALL, mask, pred != 0, 0, 32);
    }
    unsigned reduce_add(unsigned mask, unsigned v) const {
        return (unsigned)warp_collective(file, line, WARP_REDUCE_ADD_U, mask, v, 0, 32);
    }
    int reduce_add(unsigned mask, int v) const {
        return (int)(unsigned)warp_collective(file, line, WARP_REDUCE_ADD_U, mask, (unsigned)v, 0, 32);
    }
    unsigned reduce_min(unsigned mask, unsigned v) const {
        return (unsigned)warp_collective(file, line, WARP_REDUCE_MIN_U, mask, v, 0, 32);
    }
    int reduce_min(unsigned mask, int v) const {
        return (int)(unsigned)warp_collective(file, line, WARP_REDUCE_MIN_I, mask, (unsigned)v, 0, 32);
    }
    unsigned reduce_max(unsigned mask, unsigned v) const {
        return (unsigned)warp_collective(file, line, WARP_REDUCE_MAX_U, mask, v, 0, 32);
    }
    int reduce_max(unsigned mask, int v) const {
        return (int)(unsigned)warp_collective(file, line, WARP_REDUCE_MAX_I, mask, (unsigned)v, 0, 32);
    }

    template <typename T> T shfl(int op, unsigned mask, T var, int b, int width) const {
        static_assert(is_shfl_type<T>::value, "CUDA has no warp shuffle of this type");
        uint64_t bits = 0;
        std::memcpy(&bits, &var, sizeof(T));
        bits = warp_collective(file, line, op, mask, bits, b, width);
        T out;
        std::memcpy(&out, &bits, sizeof(T));
        return out;
    }
#define LF_SHIM_SHFL_OVERLOADS(T) \
    T shfl_idx(unsigned m, T v, int src, int w = 32) const { return shfl<T>(WARP_SHFL_IDX, m, v, src, w); } \
    T shfl_up(unsigned m, T v, unsigned d, int w = 32) const { return shfl<T>(WARP_SHFL_UP, m, v, (int)d, w); } \
    T shfl_down(unsigned m, T v, unsigned d, int w = 32) const { return shfl<T>(WARP_SHFL_DOWN, m, v, (int)d, w); } \
    T shfl_xor(unsigned m, T v, int lm, int w = 32) const { return shfl<T>(WARP_SHFL_XOR, m, v, lm, w); }
    LF_SHIM_SHFL_OVERLOADS(int)
    LF_SHIM_SHFL_OVERLOADS(unsigned int)
    LF_SHIM_SHFL_OVERLOADS(long)
    LF_SHIM_SHFL_OVERLOADS(unsigned long)
    LF_SHIM_SHFL_OVERLOADS(long long)
    LF_SHIM_SHFL_OVERLOADS(unsigned long long)
    LF_SHIM_SHFL_OVERLOADS(float)
    LF_SHIM_SHFL_OVERLOADS(double)
    LF_SHIM_SHFL_OVERLOADS(__half)
    LF_SHIM_SHFL_OVERLOADS(__half2)
    LF_SHIM_SHFL_OVERLOADS(__nv_bfloat16)
    LF_SHIM_SHFL_OVERLOADS(__nv_bfloat162)
#undef LF_SHIM_SHFL_OVERLOADS
};
} // namespace lf_shim

#define LF_SHIM_SITE (lf_shim::site{__FILE__, __LINE__})
#define __syncthreads LF_SHIM_SITE.syncthreads
#define __syncthreads_count LF_SHIM_SITE.syncthreads_count
#define __syncthreads_and LF_SHIM_SITE.syncthreads_and
#define __syncthreads_or LF_SHIM_SITE.syncthreads_or
#define __syncwarp LF_SHIM_SITE.syncwarp
#define __ballot_sync LF_SHIM_SITE.ballot
#define __any_sync LF_SHIM_SITE.any
#define __all_sync LF_SHIM_SITE.all
#define __shfl_sync LF_SHIM_SITE.shfl_idx
#define __shfl_up_sync LF_SHIM_SITE.shfl_up
#define __shfl_down_sync LF_SHIM_SITE.shfl_down
#define __shfl_xor_sync LF_SHIM_SITE.shfl_xor
#define __reduce_add_sync LF_SHIM_SITE.reduce_add
#define __reduce_min_sync LF_SHIM_SITE.reduce_min
#define __reduce_max_sync LF_SHIM_SITE.reduce_max

/* ------------------------------------------------------------ memory fences, atomics */
/* Fibers of a launch run on one OS thread and switch only at scheduling
 * points, so every read-modify-write below is already atomic with respect
 * to the other CUDA threads; the __atomic builtins keep them so should
 * launches ever run blocks on several OS threads. */
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

#define LF_SHIM_ATOMIC_INT(T) \
    static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicCAS(T *p, T cmp, T v) { \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
        return cmp; \
    } \
    static inline T atomicMax(T *p, T v) { \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED); \
        while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { \
        } \
        return old; \
    } \
    static inline T atomicMin(T *p, T v) { \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED); \
        while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { \
        } \
        return old; \
    }
LF_SHIM_ATOMIC_INT(int)
LF_SHIM_ATOMIC_INT(unsigned int)
LF_SHIM_ATOMIC_INT(unsigned long long)
#undef LF_SHIM_ATOMIC_INT
static inline long long atomicMax(long long *p, long long v) {
    long long old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
static inline long long atomicMin(long long *p, long long v) {
    long long old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
namespace lf_shim {
template <typename F, typename U> static inline F atomic_float_add(F *p, F v) {
    U *q = reinterpret_cast<U *>(p);
    U old = __atomic_load_n(q, __ATOMIC_RELAXED), nw;
    F of;
    do {
        std::memcpy(&of, &old, sizeof of);
        F sum = of + v;
        std::memcpy(&nw, &sum, sizeof nw);
    } while (!__atomic_compare_exchange_n(q, &old, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return of;
}
} // namespace lf_shim
static inline float atomicAdd(float *p, float v) { return lf_shim::atomic_float_add<float, uint32_t>(p, v); }
static inline double atomicAdd(double *p, double v) { return lf_shim::atomic_float_add<double, uint64_t>(p, v); }
static inline float atomicExch(float *p, float v) {
    uint32_t nv = lf_shim::f32_bits(v);
    return lf_shim::bits_f32(__atomic_exchange_n(reinterpret_cast<uint32_t *>(p), nv, __ATOMIC_RELAXED));
}
static inline unsigned short atomicCAS(unsigned short *p, unsigned short cmp, unsigned short v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}

/* ------------------------------------------------------------ math beyond the C library */
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
/* glibc's <math.h> declares these names itself (its internal
 * aliases, not exported), so they are macros here; nothing takes the
 * address of a device intrinsic */
#define __expf(x) (std::exp((float)(x)))
#define __exp10f(x) (std::pow(10.0f, (float)(x)))
#define __logf(x) (std::log((float)(x)))
#define __log2f(x) (std::log2((float)(x)))
#define __log10f(x) (std::log10((float)(x)))
#define __sinf(x) (std::sin((float)(x)))
#define __cosf(x) (std::cos((float)(x)))
#define __tanf(x) (std::tan((float)(x)))
#define __powf(x, y) (std::pow((float)(x), (float)(y)))
#define __sincosf(x, s, c) (*(s) = std::sin((float)(x)), *(c) = std::cos((float)(x)), (void)0)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return std::sqrt(x); }
static inline float __saturatef(float x) { return x != x ? 0.0f : std::fmin(std::fmax(x, 0.0f), 1.0f); }
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
/* _rn forms forbid contraction into an fma: keep them out of line */
inline __attribute__((noinline)) float __fmul_rn(float a, float b) { return a * b; }
inline __attribute__((noinline)) float __fadd_rn(float a, float b) { return a + b; }
static inline int __float_as_int(float f) {
    int i;
    std::memcpy(&i, &f, 4);
    return i;
}
static inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
static inline unsigned int __float_as_uint(float f) { return lf_shim::f32_bits(f); }
static inline float __uint_as_float(unsigned int u) { return lf_shim::bits_f32(u); }
static inline long long __double_as_longlong(double d) {
    long long i;
    std::memcpy(&i, &d, 8);
    return i;
}
static inline double __longlong_as_double(long long i) {
    double d;
    std::memcpy(&d, &i, 8);
    return d;
}

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return std::fmin(a, b); }
static inline float max(float a, float b) { return std::fmax(a, b); }
static inline double min(double a, double b) { return std::fmin(a, b); }
static inline double max(double a, double b) { return std::fmax(a, b); }

static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}

/* cache-hinted loads and stores are plain accesses */
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline T __ldca(const T *p) { return *p; }
template <typename T> static inline T __ldcs(const T *p) { return *p; }
template <typename T> static inline T __ldlu(const T *p) { return *p; }
template <typename T> static inline T __ldcv(const T *p) { return *p; }
template <typename T> static inline void __stcg(T *p, T v) { *p = v; }
template <typename T> static inline void __stcs(T *p, T v) { *p = v; }
template <typename T> static inline void __stwb(T *p, T v) { *p = v; }
template <typename T> static inline void __stwt(T *p, T v) { *p = v; }

/* ------------------------------------------------------------ launches */
namespace lf_shim {
typedef void (*launch_body)(void *ctx);
/* Checks the configuration as a GPU does, then runs every block (see
 * lf_shim.h for the schedule); the result goes where cudaGetLastError
 * finds it. key identifies the kernel for cudaFuncSetAttribute. */
void launch(const char *name, const void *key, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
            launch_body body, void *ctx);

template <typename... P> struct launcher {
    const char *name;
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;

    template <typename... A> void operator()(A &&...args) const {
        static_assert(sizeof...(A) == sizeof...(P), "LF_CUDA_LAUNCH: the argument count differs from the kernel's");
        typedef std::tuple<typename std::decay<P>::type...> params_t;
        params_t params(std::forward<A>(args)...); /* evaluated once, converted as <<<>>> converts */
        struct call {
            void (*kernel)(P...);
            const params_t *params;
        } c = {kernel, &params};
        launch(
            name, reinterpret_cast<const void *>(kernel), grid, block, shmem, stream,
            [](void *p) {
                const call *k = static_cast<const call *>(p);
                params_t copy = *k->params; /* each thread its own copy of the parameters */
                std::apply(k->kernel, copy);
            },
            &c);
    }
};
template <typename... P>
static inline launcher<P...> make_launcher(const char *name, void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem,
                                           cudaStream_t stream) {
    return launcher<P...>{name, kernel, grid, block, shmem, stream};
}
} // namespace lf_shim

#endif
