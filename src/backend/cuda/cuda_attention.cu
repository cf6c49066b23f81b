/*
 * Causal self-attention kernels of the CUDA backend (cuda_attention.h):
 * the fused flash-attention forward and backward the backend's table uses,
 * the unfused reference they are tested against, and the KV-cache ops.
 *
 * Why our own: cuDNN's fused attention (and FlashAttention itself) are
 * C++/Python packages with fp16/bf16 tensor-core kernels and their own
 * dropout RNG; llmforge needs fp32 first, dropout masks equal to the CPU
 * backend's Philox draws, grouped-query heads in its qkv row layout,
 * deterministic gradients, and kernels that also run on the CUDA-on-CPU
 * shim (no inline PTX, no wmma).
 *
 * Fused forward (att_fwd_flash): one block per (tile of ATT_BR query rows,
 * query head, batch row); each query row belongs to TPR = HSMAX/32
 * adjacent lanes (HSMAX = 32, 64 or 128, the smallest >= HS), each holding
 * 32 of the row's q channels and output accumulators in registers (fully
 * unrolled loops), a dot product being the lanes' partial sums added by
 * an xor-shuffle butterfly under the lane group's mask. Key/value rows
 * come in tiles of ATT_BC rows through shared memory (coalesced loads
 * along HS; the lane groups of a warp then read adjacent words of one
 * row: no bank conflicts). Per tile the row computes its scores, the tile maximum,
 * rescales its running sum and accumulator once (online softmax, Milakov
 * & Gimelshein 2018; Dao et al. 2022), and adds exp(s - m) * v. Only the
 * tiles a block's causal triangle needs are visited. It saves the row's
 * log-sum-exp lse = m + log(l): B*NH*T floats, O(T) per head.
 *
 * Fused backward (Dao 2023, FlashAttention-2's split, without atomics):
 *  - att_bwd_dq: the same grid as forward, a lane group per query row; pass 1
 *    over the key tiles recomputes P = exp(s - lse) and accumulates
 *    D = sum_j P~_ij (dout_i . v_j) (= rowsum(dout * out), which needs out,
 *    not saved: the signature hands backward dout, qkv and att only), into
 *    the scratch; pass 2 accumulates dq_i = scale * sum_j P_ij (dP_ij - D_i) k_j.
 *  - att_bwd_dkdv: one block per (tile of ATT_BK key rows, kv head, batch
 *    row), a lane group per key row holding k, v, dk, dv; it loops over the
 *    group's query heads in order h = g*G .. g*G+G-1 and, per head, over
 *    tiles of ATT_BQ query rows (q, dout, lse, D through shared memory)
 *    from its own diagonal to T: dv_j += P~_ij dout_i, dk_j += scale *
 *    P_ij (dP_ij - D_i) q_i. So the group's sum has a fixed order and no
 *    float atomics exist anywhere.
 *  Here P~ = P * mask * 1/(1-p) (dropout), dP_ij = mask * 1/(1-p) *
 *  (dout_i . v_j): the CPU backend's arithmetic (cpu_attention.c) in
 *  another association.
 *
 * Packed rows (lf__cuk_attention_*_packed, backend_impl.h): att_shape.pos
 * gives each query row t its first key lo = t - pos[b,t]. The fused
 * kernels visit a key tile only where it meets [lo, t] (so a row's first
 * visited tile always has a key: the online softmax never starts from an
 * empty tile), mask the scores before lo, and att_bwd_dkdv skips the query
 * rows of later examples (a row's lo from shared memory, alike for its lane
 * group). pos NULL is the causal mask (lo = 0): the plain op's arithmetic.
 * The unfused reference stays causal only; tests compare the packed fused
 * kernels with the CPU backend's packed ops.
 *
 * Unfused reference (att_ref_*): the CPU's algorithm step by step, one
 * output element (or one row, a warp) per thread: scores and a
 * max-subtracted softmax into att (B,NH,T,T), P~ @ v; backward
 * dP = mask*dscale*(dout @ v^T), the softmax gradient in place, then dq,
 * dk, dv as plain sums. It materialises T x T per head: the reference, not
 * for training.
 *
 * KV cache: kv_append a thread per copied float; attention_cached a warp
 * per query row, lanes over keys (scores, max and sum by xor-shuffle
 * butterflies, whose result every lane shares bit for bit), then lanes
 * over channels (o_d = sum_j p_j v_jd, keys in increasing order). A row's
 * arithmetic depends on nothing but its own length, so splitting the
 * positions into calls never changes a bit.
 *
 * Invariants:
 *  - Every output element is written by exactly one thread, its sums in
 *    a fixed order: the same bits on every run and under any schedule of
 *    the shim (no atomics, no order-dependent reductions). The lanes of a
 *    row's group hold bit-identical scores, maxima and sums (a + b == b + a
 *    in the butterfly), so they branch alike and call every shuffle
 *    together.
 *  - Every thread of a block reaches every __syncthreads: rows past T are
 *    guarded around the work, never returned from before a barrier; the
 *    warp-per-row kernels have no block barrier and retire whole warps.
 *  - Warp functions run in complete warps (blocks of 64*TPR and 128
 *    threads): the fused kernels' shuffles name exactly their lane group,
 *    the warp-per-row kernels' the full warp.
 *  - Shared tiles are read only at rows that were loaded (j < T).
 *  - fp32 everywhere: products and sums in fp32, expf/logf the accurate
 *    library functions (not the __expf intrinsic).
 *
 * References: Vaswani et al. 2017; Milakov & Gimelshein 2018, "Online
 * normalizer calculation for softmax"; Dao et al. 2022, "FlashAttention";
 * Dao 2023, "FlashAttention-2"; Ainslie et al. 2023 (GQA);
 * src/backend/cpu/cpu_attention.c and cpu_kv.c (the semantics).
 */
#include "cuda_compat.h"
#include "cuda_attention.h"
#include "cuda_rng.cuh"

#define ATT_BR 64  /* query rows (threads) per block: forward, dq */
#define ATT_BC 32  /* key rows per shared tile: forward, dq */
#define ATT_BK 64  /* key rows (threads) per block: dk/dv */
#define ATT_BQ 32  /* query rows per shared tile: dk/dv (ATT_BK a multiple of it) */
#define ATT_WPB 4  /* warps per block of the warp-per-row kernels */
#define ATT_EW 256 /* threads per block of the element-wise kernels */

struct att_shape {
    int B, T, C, NH, NKV, HS, G; /* G = NH/NKV query heads per kv head */
    long W;                      /* qkv row width C + 2*NKV*HS */
    float scale;                 /* 1/sqrt(HS) */
    const int32_t *pos;          /* NULL (causal) or packed rows' positions (B,T): backend_impl.h */
};

struct att_drop {
    int on;                      /* p > 0 */
    float p, dscale;             /* dscale = 1/(1-p) */
    uint64_t seed, key, offset;
};

static __device__ __forceinline__ int att_imin(int a, int b) { return a < b ? a : b; }

/* First key query row t of batch row b sees: 0 (causal), or its example's
 * start t - pos[b,t] in a packed row, clamped into [0, t]. */
static __device__ __forceinline__ int att_lo(const att_shape &s, int b, int t) {
    if (!s.pos) return 0;
    const int p = s.pos[(size_t)b * s.T + t];
    return p >= 0 && p <= t ? t - p : 0;
}

/* The dropout factor of entry idx of the (B,NH,T,T) probabilities:
 * 1/(1-p) kept, 0 dropped, 1 without dropout. */
static __device__ __forceinline__ float att_factor(const att_drop &dr, uint64_t idx) {
    if (!dr.on) return 1.0f;
    return lf_cuda_dropout_keep(dr.seed, dr.key, dr.offset + idx, dr.p) ? dr.dscale : 0.0f;
}

/* ------------------------------------------------------------------ fused kernels: rows split over TPR lanes
 *
 * A row (a query row in forward and dq, a key row in dk/dv) belongs to TPR
 * adjacent lanes of one warp (TPR = 1, 2, 4), lane `sub` of them owning the
 * channels d = c*TPR + sub, c < HSMAX/TPR: 32 channels a lane at every
 * HSMAX, so the register arrays stay 32 floats each. Interleaved channels
 * put the group's shared-memory reads in adjacent banks. A dot product is
 * the lanes' partial sums added by an xor butterfly under the group's own
 * mask; a + b and b + a are the same float, so every lane of the group
 * holds the same bits and takes the same branches (the whole group always
 * calls the shuffle together). */

template <int TPR>
static __device__ __forceinline__ unsigned att_group_mask() {
    const unsigned lane = threadIdx.x & 31u;
    return (((1u << TPR) - 1u) << (lane & ~(unsigned)(TPR - 1)));
}

template <int TPR>
static __device__ __forceinline__ float att_group_sum(float x, unsigned mask) {
#pragma unroll
    for (int off = 1; off < TPR; off <<= 1) x += __shfl_xor_sync(mask, x, off);
    return x;
}

/* ------------------------------------------------------------------ fused forward */

template <int HSMAX, int TPR>
__global__ void __launch_bounds__(ATT_BR * TPR) att_fwd_flash(float *__restrict__ out, float *__restrict__ lse,
                                                              const float *__restrict__ qkv, att_shape s,
                                                              att_drop dr) {
    constexpr int NC = HSMAX / TPR; /* channels a lane */
    __shared__ float Ks[ATT_BC][HSMAX];
    __shared__ float Vs[ATT_BC][HSMAX];
    const int b = (int)blockIdx.z, h = (int)blockIdx.y, r0 = (int)blockIdx.x * ATT_BR;
    const int sub = (int)threadIdx.x % TPR, t = r0 + (int)threadIdx.x / TPR, T = s.T, HS = s.HS;
    const unsigned gmask = att_group_mask<TPR>();
    const bool row = t < T;
    const float *base = qkv + (size_t)b * T * s.W;
    const float *kg = base + s.C + (size_t)(h / s.G) * HS, *vg = kg + (size_t)s.NKV * HS;
    float q[NC], o[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int d = c * TPR + sub;
        q[c] = row && d < HS ? base[(size_t)t * s.W + (size_t)h * HS + d] : 0.0f;
        o[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const uint64_t mrow = (((uint64_t)b * s.NH + h) * T + (uint64_t)(row ? t : 0)) * T;
    const int kend = att_imin(T, r0 + ATT_BR); /* keys the block's rows reach */
    const int lo = row ? att_lo(s, b, t) : 0;  /* the row's first key (packed rows) */
    for (int j0 = 0; j0 < kend; j0 += ATT_BC) {
        const int nk = att_imin(ATT_BC, kend - j0);
        __syncthreads(); /* the previous tile's readers are done */
        for (int i = (int)threadIdx.x; i < nk * HS; i += (int)blockDim.x) {
            const int jj = i / HS, d = i - jj * HS;
            Ks[jj][d] = kg[(size_t)(j0 + jj) * s.W + d];
            Vs[jj][d] = vg[(size_t)(j0 + jj) * s.W + d];
        }
        __syncthreads();
        if (row && j0 <= t && j0 + nk > lo) { /* the same for every lane of the row's group */
            const int nv = att_imin(nk, t - j0 + 1); /* this tile's keys at or before t */
            const int jlo = lo - j0;                  /* and at or after lo: at least one */
            float sc[ATT_BC];
            float mt = m;
#pragma unroll
            for (int jj = 0; jj < ATT_BC; jj++) {
                float x = -INFINITY;
                if (jj < nv && jj >= jlo) {
                    float acc = 0.0f;
#pragma unroll
                    for (int c = 0; c < NC; c++)
                        if (c * TPR + sub < HS) acc += q[c] * Ks[jj][c * TPR + sub];
                    x = att_group_sum<TPR>(acc, gmask) * s.scale;
                }
                sc[jj] = x;
                mt = fmaxf(mt, x);
            }
            const float corr = expf(m - mt); /* 0 at the first tile (m = -inf) */
            l *= corr;
#pragma unroll
            for (int c = 0; c < NC; c++) o[c] *= corr;
#pragma unroll
            for (int jj = 0; jj < ATT_BC; jj++) {
                if (jj < nv && jj >= jlo) {
                    const float e = expf(sc[jj] - mt);
                    l += e;
                    const float pe = e * att_factor(dr, mrow + (uint64_t)(j0 + jj));
#pragma unroll
                    for (int c = 0; c < NC; c++)
                        if (c * TPR + sub < HS) o[c] += pe * Vs[jj][c * TPR + sub];
                }
            }
            m = mt;
        }
    }
    if (row) {
        const float inv = 1.0f / l;
        float *ot = out + ((size_t)b * T + t) * s.C + (size_t)h * HS;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (c * TPR + sub < HS) ot[c * TPR + sub] = o[c] * inv;
        if (sub == 0) lse[((size_t)b * s.NH + h) * T + t] = m + logf(l);
    }
}

/* ------------------------------------------------------------------ fused backward */

/* D (scratch) and dq of one query row per lane group; grid as the forward's. */
template <int HSMAX, int TPR>
__global__ void __launch_bounds__(ATT_BR * TPR) att_bwd_dq(float *__restrict__ dqkv, float *__restrict__ Dbuf,
                                                           const float *__restrict__ dout,
                                                           const float *__restrict__ qkv,
                                                           const float *__restrict__ lse, att_shape s, att_drop dr) {
    constexpr int NC = HSMAX / TPR;
    __shared__ float Ks[ATT_BC][HSMAX];
    __shared__ float Vs[ATT_BC][HSMAX];
    const int b = (int)blockIdx.z, h = (int)blockIdx.y, r0 = (int)blockIdx.x * ATT_BR;
    const int sub = (int)threadIdx.x % TPR, t = r0 + (int)threadIdx.x / TPR, T = s.T, HS = s.HS;
    const unsigned gmask = att_group_mask<TPR>();
    const bool row = t < T;
    const float *base = qkv + (size_t)b * T * s.W;
    const float *kg = base + s.C + (size_t)(h / s.G) * HS, *vg = kg + (size_t)s.NKV * HS;
    float q[NC], g[NC], dq[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int d = c * TPR + sub;
        q[c] = row && d < HS ? base[(size_t)t * s.W + (size_t)h * HS + d] : 0.0f;
        g[c] = row && d < HS ? dout[((size_t)b * T + t) * s.C + (size_t)h * HS + d] : 0.0f;
        dq[c] = 0.0f;
    }
    const size_t srow = ((size_t)b * s.NH + h) * T + (size_t)(row ? t : 0);
    const float L = row ? lse[srow] : 0.0f;
    const uint64_t mrow = (uint64_t)srow * T;
    const int kend = att_imin(T, r0 + ATT_BR);
    const int lo = row ? att_lo(s, b, t) : 0;
    float D = 0.0f;
    for (int pass = 0; pass < 2; pass++) { /* 0: D, 1: dq (needs the whole row's D) */
        for (int j0 = 0; j0 < kend; j0 += ATT_BC) {
            const int nk = att_imin(ATT_BC, kend - j0);
            __syncthreads();
            for (int i = (int)threadIdx.x; i < nk * HS; i += (int)blockDim.x) {
                const int jj = i / HS, d = i - jj * HS;
                Ks[jj][d] = kg[(size_t)(j0 + jj) * s.W + d];
                Vs[jj][d] = vg[(size_t)(j0 + jj) * s.W + d];
            }
            __syncthreads();
            if (row && j0 <= t && j0 + nk > lo) {
                const int nv = att_imin(nk, t - j0 + 1);
                for (int jj = lo > j0 ? lo - j0 : 0; jj < nv; jj++) {
                    float qk = 0.0f, gv = 0.0f;
#pragma unroll
                    for (int c = 0; c < NC; c++)
                        if (c * TPR + sub < HS) {
                            qk += q[c] * Ks[jj][c * TPR + sub];
                            gv += g[c] * Vs[jj][c * TPR + sub];
                        }
                    qk = att_group_sum<TPR>(qk, gmask);
                    gv = att_group_sum<TPR>(gv, gmask);
                    const float P = expf(qk * s.scale - L);
                    const float dP = gv * att_factor(dr, mrow + (uint64_t)(j0 + jj));
                    if (pass == 0) {
                        D += P * dP;
                    } else {
                        const float ds = P * (dP - D);
#pragma unroll
                        for (int c = 0; c < NC; c++)
                            if (c * TPR + sub < HS) dq[c] += ds * Ks[jj][c * TPR + sub];
                    }
                }
            }
        }
    }
    if (row) {
        float *dqt = dqkv + ((size_t)b * T + t) * s.W + (size_t)h * HS;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (c * TPR + sub < HS) dqt[c * TPR + sub] = dq[c] * s.scale;
        if (sub == 0) Dbuf[srow] = D;
    }
}

/* dk and dv of one key row per lane group, over the group's query heads in order. */
template <int HSMAX, int TPR>
__global__ void __launch_bounds__(ATT_BK * TPR) att_bwd_dkdv(float *__restrict__ dqkv, const float *__restrict__ dout,
                                                             const float *__restrict__ qkv,
                                                             const float *__restrict__ lse,
                                                             const float *__restrict__ Dbuf, att_shape s,
                                                             att_drop dr) {
    constexpr int NC = HSMAX / TPR;
    __shared__ float Qs[ATT_BQ][HSMAX];
    __shared__ float Gs[ATT_BQ][HSMAX];
    __shared__ float Ls[ATT_BQ], Ds[ATT_BQ];
    __shared__ int Lo[ATT_BQ]; /* each query row's first key (packed rows; 0 causal) */
    const int b = (int)blockIdx.z, kvh = (int)blockIdx.y, c0 = (int)blockIdx.x * ATT_BK;
    const int sub = (int)threadIdx.x % TPR, j = c0 + (int)threadIdx.x / TPR, T = s.T, HS = s.HS;
    const unsigned gmask = att_group_mask<TPR>();
    const bool col = j < T;
    const float *base = qkv + (size_t)b * T * s.W;
    const size_t koff = (size_t)s.C + (size_t)kvh * HS, voff = koff + (size_t)s.NKV * HS;
    float k[NC], v[NC], dk[NC], dv[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int d = c * TPR + sub;
        k[c] = col && d < HS ? base[(size_t)j * s.W + koff + d] : 0.0f;
        v[c] = col && d < HS ? base[(size_t)j * s.W + voff + d] : 0.0f;
        dk[c] = 0.0f;
        dv[c] = 0.0f;
    }
    for (int h = kvh * s.G; h < kvh * s.G + s.G; h++) {
        const size_t hrow = ((size_t)b * s.NH + h) * T; /* (b,h) row 0 in (B,NH,T) */
        for (int i0 = c0 - c0 % ATT_BQ; i0 < T; i0 += ATT_BQ) {
            const int nq = att_imin(ATT_BQ, T - i0);
            __syncthreads();
            for (int i = (int)threadIdx.x; i < nq * HS; i += (int)blockDim.x) {
                const int ii = i / HS, d = i - ii * HS;
                Qs[ii][d] = base[(size_t)(i0 + ii) * s.W + (size_t)h * HS + d];
                Gs[ii][d] = dout[((size_t)b * T + i0 + ii) * s.C + (size_t)h * HS + d];
            }
            for (int ii = (int)threadIdx.x; ii < nq; ii += (int)blockDim.x) {
                Ls[ii] = lse[hrow + i0 + ii];
                Ds[ii] = Dbuf[hrow + i0 + ii];
                Lo[ii] = att_lo(s, b, i0 + ii);
            }
            __syncthreads();
            if (col && i0 + nq - 1 >= j) {
                for (int ii = j > i0 ? j - i0 : 0; ii < nq; ii++) { /* query rows i >= j */
                    if (Lo[ii] > j) continue; /* row i is in a later example: the same for the lane group */
                    float qk = 0.0f, gv = 0.0f;
#pragma unroll
                    for (int c = 0; c < NC; c++)
                        if (c * TPR + sub < HS) {
                            qk += Qs[ii][c * TPR + sub] * k[c];
                            gv += Gs[ii][c * TPR + sub] * v[c];
                        }
                    qk = att_group_sum<TPR>(qk, gmask);
                    gv = att_group_sum<TPR>(gv, gmask);
                    const float P = expf(qk * s.scale - Ls[ii]);
                    const float f = att_factor(dr, (hrow + (uint64_t)(i0 + ii)) * T + (uint64_t)j);
                    const float pt = P * f, ds = P * (gv * f - Ds[ii]);
#pragma unroll
                    for (int c = 0; c < NC; c++)
                        if (c * TPR + sub < HS) {
                            dv[c] += pt * Gs[ii][c * TPR + sub];
                            dk[c] += ds * Qs[ii][c * TPR + sub];
                        }
                }
            }
        }
    }
    if (col) {
        float *rowp = dqkv + ((size_t)b * T + j) * s.W;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (c * TPR + sub < HS) {
                rowp[koff + c * TPR + sub] = dk[c] * s.scale;
                rowp[voff + c * TPR + sub] = dv[c];
            }
    }
}

/* ------------------------------------------------------------------ unfused reference */

/* A warp per (b,h,t) row: att row t = softmax of the scaled scores, 0 past t. */
__global__ void att_ref_softmax(float *__restrict__ att, const float *__restrict__ qkv, att_shape s) {
    const int lane = (int)(threadIdx.x & 31u), T = s.T, HS = s.HS;
    const long rows = (long)s.B * s.NH * T, step = (long)gridDim.x * ATT_WPB;
    /* a whole warp takes one row (lanes agree on r): full-mask shuffles */
    for (long r = (long)blockIdx.x * ATT_WPB + (long)(threadIdx.x >> 5); r < rows; r += step) {
        const int t = (int)(r % T), h = (int)((r / T) % s.NH), b = (int)(r / ((long)T * s.NH));
        const float *base = qkv + (size_t)b * T * s.W;
        const float *q = base + (size_t)t * s.W + (size_t)h * HS;
        const float *kg = base + s.C + (size_t)(h / s.G) * HS;
        float *a = att + (size_t)r * T;
        float mx = -INFINITY;
        for (int j = lane; j <= t; j += 32) {
            float acc = 0.0f;
            for (int d = 0; d < HS; d++) acc += q[d] * kg[(size_t)j * s.W + d];
            a[j] = acc * s.scale;
            mx = fmaxf(mx, a[j]);
        }
        for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        float sum = 0.0f;
        for (int j = lane; j <= t; j += 32) {
            const float e = expf(a[j] - mx);
            a[j] = e;
            sum += e;
        }
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        const float inv = 1.0f / sum;
        for (int j = lane; j < T; j += 32) a[j] = j <= t ? a[j] * inv : 0.0f;
    }
}

/* out[b,t,h*HS+d] = sum_{j<=t} P~[b,h,t,j] v[b,j,g,d]; a thread per element. */
__global__ void att_ref_av(float *__restrict__ out, const float *__restrict__ att, const float *__restrict__ qkv,
                           att_shape s, att_drop dr) {
    const long n = (long)s.B * s.T * s.C;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int c = (int)(i % s.C), t = (int)((i / s.C) % s.T), b = (int)(i / ((long)s.C * s.T));
        const int h = c / s.HS, d = c % s.HS;
        const float *vg = qkv + (size_t)b * s.T * s.W + s.C + (size_t)s.NKV * s.HS + (size_t)(h / s.G) * s.HS + d;
        const size_t arow = (((size_t)b * s.NH + h) * s.T + t) * s.T;
        float acc = 0.0f;
        for (int j = 0; j <= t; j++) acc += att[arow + j] * att_factor(dr, arow + j) * vg[(size_t)j * s.W];
        out[i] = acc;
    }
}

/* dp[b,h,t,j] = mask*dscale * (dout_t . v_j) for j <= t, 0 past t. */
__global__ void att_ref_dp(float *__restrict__ dp, const float *__restrict__ dout, const float *__restrict__ qkv,
                           att_shape s, att_drop dr) {
    const long n = (long)s.B * s.NH * s.T * s.T;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int jc = (int)(i % s.T), t = (int)((i / s.T) % s.T);
        const int h = (int)((i / ((long)s.T * s.T)) % s.NH), b = (int)(i / ((long)s.T * s.T * s.NH));
        float acc = 0.0f;
        if (jc <= t) {
            const float *g = dout + ((size_t)b * s.T + t) * s.C + (size_t)h * s.HS;
            const float *v = qkv + ((size_t)b * s.T + jc) * s.W + s.C + (size_t)s.NKV * s.HS + (size_t)(h / s.G) * s.HS;
            for (int d = 0; d < s.HS; d++) acc += g[d] * v[d];
            acc *= att_factor(dr, (uint64_t)i);
        }
        dp[i] = acc;
    }
}

/* A warp per row: ds = P * (dp - sum_j P*dp), in place over dp. */
__global__ void att_ref_softmax_bwd(float *__restrict__ ds, const float *__restrict__ att, att_shape s) {
    const int lane = (int)(threadIdx.x & 31u), T = s.T;
    const long rows = (long)s.B * s.NH * T, step = (long)gridDim.x * ATT_WPB;
    for (long r = (long)blockIdx.x * ATT_WPB + (long)(threadIdx.x >> 5); r < rows; r += step) {
        const int t = (int)(r % T);
        const float *a = att + (size_t)r * T;
        float *g = ds + (size_t)r * T;
        float dot = 0.0f;
        for (int j = lane; j <= t; j += 32) dot += a[j] * g[j];
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        for (int j = lane; j < T; j += 32) g[j] = j <= t ? a[j] * (g[j] - dot) : 0.0f;
    }
}

/* dq[b,t,h,d] = scale * sum_{j<=t} ds[b,h,t,j] k[b,j,g,d]. */
__global__ void att_ref_dq(float *__restrict__ dqkv, const float *__restrict__ ds, const float *__restrict__ qkv,
                           att_shape s) {
    const long n = (long)s.B * s.T * s.C;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int c = (int)(i % s.C), t = (int)((i / s.C) % s.T), b = (int)(i / ((long)s.C * s.T));
        const int h = c / s.HS, d = c % s.HS;
        const float *kg = qkv + (size_t)b * s.T * s.W + s.C + (size_t)(h / s.G) * s.HS + d;
        const float *g = ds + (((size_t)b * s.NH + h) * s.T + t) * s.T;
        float acc = 0.0f;
        for (int j = 0; j <= t; j++) acc += g[j] * kg[(size_t)j * s.W];
        dqkv[((size_t)b * s.T + t) * s.W + c] = acc * s.scale;
    }
}

/* dk, dv of (b, key row j, kv head g, channel d), summed over the group's
 * heads in order, then over query rows t >= j. */
__global__ void att_ref_dkdv(float *__restrict__ dqkv, const float *__restrict__ ds, const float *__restrict__ att,
                             const float *__restrict__ dout, const float *__restrict__ qkv, att_shape s, att_drop dr) {
    const int KV = s.NKV * s.HS;
    const long n = (long)s.B * s.T * KV;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int c = (int)(i % KV), j = (int)((i / KV) % s.T), b = (int)(i / ((long)KV * s.T));
        const int g = c / s.HS, d = c % s.HS;
        float dk = 0.0f, dv = 0.0f;
        for (int h = g * s.G; h < g * s.G + s.G; h++) {
            const size_t hb = ((size_t)b * s.NH + h) * s.T;
            for (int t = j; t < s.T; t++) {
                const size_t e = (hb + t) * s.T + j;
                dk += ds[e] * qkv[((size_t)b * s.T + t) * s.W + (size_t)h * s.HS + d];
                dv += att[e] * att_factor(dr, e) * dout[((size_t)b * s.T + t) * s.C + (size_t)h * s.HS + d];
            }
        }
        float *row = dqkv + ((size_t)b * s.T + j) * s.W + s.C;
        row[c] = dk * s.scale;
        row[KV + c] = dv;
    }
}

/* ------------------------------------------------------------------ KV cache */

__global__ void att_kv_append(float *__restrict__ kcache, float *__restrict__ vcache, const float *__restrict__ qkv,
                              int B, int Tn, int NH, int NKV, int HS, int pos0, int Tmax) {
    const long KV = (long)NKV * HS, W = (long)NH * HS + 2 * KV, n = (long)B * Tn * KV;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const long c = i % KV, t = (i / KV) % Tn, b = i / (KV * Tn);
        const long g = c / HS, d = c % HS;
        const float *row = qkv + (b * Tn + t) * W + (long)NH * HS;
        const size_t at = (((size_t)b * NKV + g) * (size_t)Tmax + (size_t)pos0 + (size_t)t) * HS + d;
        kcache[at] = row[c];
        vcache[at] = row[KV + c];
    }
}

/* A warp per (b,h,t) query row against cached keys 0..pos0+t. */
__global__ void att_cached_row(float *__restrict__ out, float *__restrict__ scratch, const float *__restrict__ qkv,
                               const float *__restrict__ kcache, const float *__restrict__ vcache, att_shape s,
                               int Tn, int pos0, int Tmax) {
    const int lane = (int)(threadIdx.x & 31u), HS = s.HS;
    const long rows = (long)s.B * s.NH * Tn, step = (long)gridDim.x * ATT_WPB;
    for (long r = (long)blockIdx.x * ATT_WPB + (long)(threadIdx.x >> 5); r < rows; r += step) {
        const int t = (int)(r % Tn), h = (int)((r / Tn) % s.NH), b = (int)(r / ((long)Tn * s.NH));
        const int n = pos0 + t + 1;
        const float *q = qkv + ((size_t)b * Tn + t) * s.W + (size_t)h * HS;
        const size_t cache = ((size_t)b * s.NKV + (size_t)(h / s.G)) * (size_t)Tmax * HS;
        const float *K = kcache + cache, *V = vcache + cache;
        float *p = scratch + (size_t)r * ((size_t)pos0 + Tn);
        float mx = -INFINITY;
        for (int j = lane; j < n; j += 32) {
            float acc = 0.0f;
            for (int d = 0; d < HS; d++) acc += q[d] * K[(size_t)j * HS + d];
            p[j] = acc * s.scale;
            mx = fmaxf(mx, p[j]);
        }
        for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        float sum = 0.0f;
        for (int j = lane; j < n; j += 32) {
            const float e = expf(p[j] - mx);
            p[j] = e;
            sum += e;
        }
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        const float inv = 1.0f / sum;
        for (int j = lane; j < n; j += 32) p[j] *= inv;
        __syncwarp(0xffffffffu); /* every lane's probabilities written before any lane reads them all */
        float *o = out + ((size_t)b * Tn + t) * s.C + (size_t)h * HS;
        for (int d = lane; d < HS; d += 32) {
            float acc = 0.0f;
            for (int j = 0; j < n; j++) acc += p[j] * V[(size_t)j * HS + d];
            o[d] = acc;
        }
    }
}

/* ------------------------------------------------------------------ C wrappers */

static int att_shape_of(att_shape *s, int B, int T, int C, int NH, int NKV) {
    if (B < 0 || T < 0 || NH < 1 || NKV < 1 || NH % NKV || C < 1 || C % NH) return 0;
    const int HS = C / NH;
    if (HS > LF_CUDA_ATT_HS_MAX) return 0;
    s->B = B, s->T = T, s->C = C, s->NH = NH, s->NKV = NKV, s->HS = HS, s->G = NH / NKV;
    s->W = (long)C + 2L * NKV * HS;
    s->scale = 1.0f / sqrtf((float)HS);
    s->pos = NULL;
    return 1;
}

static int att_drop_of(att_drop *dr, float p, uint64_t seed, uint64_t key, uint64_t offset) {
    if (!(p >= 0.0f && p < 1.0f)) return 0; /* NaN too */
    dr->on = p > 0.0f;
    dr->p = p;
    dr->dscale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    dr->seed = seed, dr->key = key, dr->offset = offset;
    return 1;
}

static unsigned att_blocks(long n, int per) {
    long g = (n + per - 1) / per;
    return (unsigned)(g < 1 ? 1 : g > 65535L * 16 ? 65535L * 16 : g); /* grid-stride loops cover the rest */
}

size_t lf__cuda_attention_saved(int B, int NH, int T) { return (size_t)B * (size_t)NH * (size_t)T; }
size_t lf__cuda_attention_scratch(int B, int NH, int T) { return (size_t)B * (size_t)NH * (size_t)T; }
size_t lf__cuda_attention_cached_scratch(int B, int NH, int Tn, int pos0) {
    return (size_t)B * (size_t)NH * (size_t)Tn * ((size_t)pos0 + (size_t)Tn);
}

/* TPR lanes a row: 32 channels a lane */
template <int HSMAX>
static cudaError_t att_forward_hs(float *out, float *lse, const float *qkv, const att_shape &s, const att_drop &dr,
                                  cudaStream_t stream) {
    constexpr int TPR = HSMAX / 32;
    auto *att_fwd_flash_k = &att_fwd_flash<HSMAX, TPR>;
    const dim3 grid((unsigned)((s.T + ATT_BR - 1) / ATT_BR), (unsigned)s.NH, (unsigned)s.B);
    LF_CUDA_LAUNCH(att_fwd_flash_k, grid, ATT_BR * TPR, 0, stream, out, lse, qkv, s, dr);
    return cudaGetLastError();
}

template <int HSMAX>
static cudaError_t att_backward_hs(float *dqkv, float *Dbuf, const float *dout, const float *qkv, const float *lse,
                                   const att_shape &s, const att_drop &dr, cudaStream_t stream) {
    constexpr int TPR = HSMAX / 32;
    auto *att_bwd_dq_k = &att_bwd_dq<HSMAX, TPR>;
    auto *att_bwd_dkdv_k = &att_bwd_dkdv<HSMAX, TPR>;
    const dim3 gq((unsigned)((s.T + ATT_BR - 1) / ATT_BR), (unsigned)s.NH, (unsigned)s.B);
    LF_CUDA_LAUNCH(att_bwd_dq_k, gq, ATT_BR * TPR, 0, stream, dqkv, Dbuf, dout, qkv, lse, s, dr);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const dim3 gk((unsigned)((s.T + ATT_BK - 1) / ATT_BK), (unsigned)s.NKV, (unsigned)s.B);
    LF_CUDA_LAUNCH(att_bwd_dkdv_k, gk, ATT_BK * TPR, 0, stream, dqkv, dout, qkv, lse, Dbuf, s, dr);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                                int NH, int NKV, float p, uint64_t seed, uint64_t key,
                                                uint64_t offset, cudaStream_t stream) {
    return lf__cuk_attention_forward_packed(out, lse, qkv, NULL, B, T, C, NH, NKV, p, seed, key, offset, stream);
}

extern "C" cudaError_t lf__cuk_attention_forward_packed(float *out, float *lse, const float *qkv, const int32_t *pos,
                                                       int B, int T, int C, int NH, int NKV, float p, uint64_t seed,
                                                       uint64_t key, uint64_t offset, cudaStream_t stream) {
    att_shape s;
    att_drop dr;
    if (!att_shape_of(&s, B, T, C, NH, NKV) || !att_drop_of(&dr, p, seed, key, offset)) return cudaErrorInvalidValue;
    s.pos = pos;
    if (B == 0 || T == 0) return cudaSuccess;
    if (s.HS <= 32) return att_forward_hs<32>(out, lse, qkv, s, dr, stream);
    if (s.HS <= 64) return att_forward_hs<64>(out, lse, qkv, s, dr, stream);
    return att_forward_hs<128>(out, lse, qkv, s, dr, stream);
}

extern "C" cudaError_t lf__cuk_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                                 const float *lse, int B, int T, int C, int NH, int NKV, float p,
                                                 uint64_t seed, uint64_t key, uint64_t offset, cudaStream_t stream) {
    return lf__cuk_attention_backward_packed(dqkv, scratch, dout, qkv, lse, NULL, B, T, C, NH, NKV, p, seed, key,
                                             offset, stream);
}

extern "C" cudaError_t lf__cuk_attention_backward_packed(float *dqkv, float *scratch, const float *dout,
                                                        const float *qkv, const float *lse, const int32_t *pos, int B,
                                                        int T, int C, int NH, int NKV, float p, uint64_t seed,
                                                        uint64_t key, uint64_t offset, cudaStream_t stream) {
    att_shape s;
    att_drop dr;
    if (!att_shape_of(&s, B, T, C, NH, NKV) || !att_drop_of(&dr, p, seed, key, offset)) return cudaErrorInvalidValue;
    s.pos = pos;
    if (B == 0 || T == 0) return cudaSuccess;
    if (s.HS <= 32) return att_backward_hs<32>(dqkv, scratch, dout, qkv, lse, s, dr, stream);
    if (s.HS <= 64) return att_backward_hs<64>(dqkv, scratch, dout, qkv, lse, s, dr, stream);
    return att_backward_hs<128>(dqkv, scratch, dout, qkv, lse, s, dr, stream);
}

extern "C" cudaError_t lf__cuk_attention_ref_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                                    int NH, int NKV, float p, uint64_t seed, uint64_t key,
                                                    uint64_t offset, cudaStream_t stream) {
    att_shape s;
    att_drop dr;
    if (!att_shape_of(&s, B, T, C, NH, NKV) || !att_drop_of(&dr, p, seed, key, offset)) return cudaErrorInvalidValue;
    if (B == 0 || T == 0) return cudaSuccess;
    const long rows = (long)B * NH * T;
    LF_CUDA_LAUNCH(att_ref_softmax, att_blocks(rows, ATT_WPB), 32 * ATT_WPB, 0, stream, att, qkv, s);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    LF_CUDA_LAUNCH(att_ref_av, att_blocks((long)B * T * C, ATT_EW), ATT_EW, 0, stream, out, att, qkv, s, dr);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_attention_ref_backward(float *dqkv, float *scratch, const float *dout,
                                                     const float *qkv, const float *att, int B, int T, int C, int NH,
                                                     int NKV, float p, uint64_t seed, uint64_t key, uint64_t offset,
                                                     cudaStream_t stream) {
    att_shape s;
    att_drop dr;
    if (!att_shape_of(&s, B, T, C, NH, NKV) || !att_drop_of(&dr, p, seed, key, offset)) return cudaErrorInvalidValue;
    if (B == 0 || T == 0) return cudaSuccess;
    const long rows = (long)B * NH * T;
    LF_CUDA_LAUNCH(att_ref_dp, att_blocks(rows * T, ATT_EW), ATT_EW, 0, stream, scratch, dout, qkv, s, dr);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    LF_CUDA_LAUNCH(att_ref_softmax_bwd, att_blocks(rows, ATT_WPB), 32 * ATT_WPB, 0, stream, scratch, att, s);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    LF_CUDA_LAUNCH(att_ref_dq, att_blocks((long)B * T * C, ATT_EW), ATT_EW, 0, stream, dqkv, scratch, qkv, s);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    LF_CUDA_LAUNCH(att_ref_dkdv, att_blocks((long)B * T * NKV * s.HS, ATT_EW), ATT_EW, 0, stream, dqkv, scratch, att,
                   dout, qkv, s, dr);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_kv_append(float *kcache, float *vcache, const float *qkv, int B, int Tn, int NH,
                                        int NKV, int HS, int pos0, int Tmax, cudaStream_t stream) {
    if (B < 1 || Tn < 1 || NH < 1 || NKV < 1 || NH % NKV || HS < 1 || pos0 < 0 || (long)pos0 + Tn > Tmax)
        return cudaErrorInvalidValue;
    const long n = (long)B * Tn * NKV * HS;
    LF_CUDA_LAUNCH(att_kv_append, att_blocks(n, ATT_EW), ATT_EW, 0, stream, kcache, vcache, qkv, B, Tn, NH, NKV, HS,
                   pos0, Tmax);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_attention_cached(float *out, float *scratch, const float *qkv, const float *kcache,
                                               const float *vcache, int B, int Tn, int C, int NH, int NKV, int pos0,
                                               int Tmax, cudaStream_t stream) {
    att_shape s;
    if (!att_shape_of(&s, B, Tn, C, NH, NKV) || B < 1 || Tn < 1 || pos0 < 0 || (long)pos0 + Tn > Tmax)
        return cudaErrorInvalidValue;
    const long rows = (long)B * NH * Tn;
    LF_CUDA_LAUNCH(att_cached_row, att_blocks(rows, ATT_WPB), 32 * ATT_WPB, 0, stream, out, scratch, qkv, kcache,
                   vcache, s, Tn, pos0, Tmax);
    return cudaGetLastError();
}
