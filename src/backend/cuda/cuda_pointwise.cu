/*
 * Element-wise kernels of the CUDA backend (cuda_pointwise.h): the token and
 * position embedding with its backward, GELU (tanh form), SwiGLU, RoPE
 * (rotate_half), the residual add, standalone dropout, and the RNG probe the
 * tests use to pin cuda_rng.cuh to rng.c.
 *
 * Launch shapes: element-wise ops run 256 threads a block over a capped
 * grid with grid-stride loops (coalesced: consecutive threads, consecutive
 * floats). RoPE runs a thread per (position, frequency), which computes its
 * cos/sin once and rotates that channel pair in every batch row and head.
 * encoder_backward: dwpe a thread per (t, c) adding the B rows in order;
 * dwte a block per row n that first asks whether an earlier row holds the
 * same token (__syncthreads_or) and, only if none does (n is the token's
 * first row), gathers the token's rows n..N-1 in order (ballot compaction
 * into shared memory, one tile at a time) and adds them, channels across
 * the threads. No atomics: each (token, channel) is owned by one thread,
 * which adds the rows in increasing order starting from the existing value:
 * exactly the CPU's sequence of float additions (cpu_pointwise.c), so the
 * CPU's bits.
 *
 * GELU's and SwiGLU's forward write fp32 or (the cuda-bf16 table's bf16
 * activation storage) that fp32 value rounded to bf16 at the store.
 *
 * Invariants:
 *  - Arithmetic is the CPU's expression by expression (GELU's sigmoid form
 *    x / (1 + exp(-2u)) with the CPU's Cephes exp, SwiGLU's
 *    g / (1 + exp(-g)) * u, RoPE's float inv_freq from the host and the
 *    float product p * inv_freq, cos/sin in double of that float angle),
 *    so results differ from the CPU's only by FMA contraction (nvcc fuses
 *    a*b+c; the host compiler may or may not).
 *  - Pointers that may alias (residual out/a/b, dropout out/inp) carry no
 *    __restrict__.
 *  - Every __syncthreads is reached by the whole block (the row loops'
 *    conditions are block-uniform).
 *
 * Reference: llm.c train_gpt2.cu (encoder, gelu, residual kernels);
 * Hugging Face modeling_llama.py (rotate_half); Shazeer 2020 (SwiGLU).
 */
#include "cuda_compat.h"
#include "cuda_pointwise.h"
#include "cuda_pw_common.cuh"
#include "cuda_rng.cuh"

#define PW_BLOCK 256

/* ------------------------------------------------------------- RNG probe */

__global__ void pw_rng_uniform(float *__restrict__ out, const uint64_t *__restrict__ index, int n, uint64_t seed,
                               uint32_t purpose) {
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (int)(gridDim.x * blockDim.x))
        out[i] = lf_cuda_rng_uniform(seed, purpose, index[i]);
}

extern "C" cudaError_t lf__cuk_rng_uniform(float *out, const uint64_t *index, int n, uint64_t seed, uint32_t purpose,
                                          cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_rng_uniform, pw_blocks((size_t)n, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, out, index, n,
                   seed, purpose);
    return cudaGetLastError();
}

/* ------------------------------------------------------------- encoder */

__global__ void pw_encoder_forward(float *__restrict__ out, const int32_t *__restrict__ inp,
                                   const float *__restrict__ wte, const float *__restrict__ wpe, int T, int C,
                                   size_t total) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / (size_t)C, c = i - n * (size_t)C;
        const float w = wte[(size_t)inp[n] * C + c];
        out[i] = wpe ? w + wpe[(n % (size_t)T) * C + c] : w;
    }
}

/* dwpe[t,c] += dout[b,t,c] for b = 0..B-1 in order */
__global__ void pw_encoder_backward_wpe(float *__restrict__ dwpe, const float *__restrict__ dout, int B, int T, int C) {
    const size_t total = (size_t)T * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dout[(size_t)b * total + i];
        dwpe[i] = acc;
    }
}

#define ENC_BLOCK 128 /* threads of the dwte kernel: the tile of rows gathered at once */

/* Row n's key: its token, or with T > 0 (dwpe of packed rows) its position
 * inp[n] clamped into [0, n mod T] (backend_impl.h). */
static __device__ __forceinline__ int32_t pw_enc_key(const int32_t *inp, int n, int T) {
    const int32_t v = inp[n];
    if (T <= 0) return v;
    const int t = n % T;
    return v >= 0 && v <= t ? v : t;
}

/* dwte[v,c] += dout[n,c] over the rows n with key v (pw_enc_key), in row order. */
__global__ void pw_encoder_backward_wte(float *__restrict__ dwte, const float *__restrict__ dout,
                                        const int32_t *__restrict__ inp, int N, int C, int T) {
    __shared__ int rows[ENC_BLOCK];
    __shared__ int warp_base[ENC_BLOCK / 32 + 1];
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = (int)blockDim.x >> 5;
    for (int n = (int)blockIdx.x; n < N; n += (int)gridDim.x) { /* block-uniform */
        const int32_t v = pw_enc_key(inp, n, T);
        int seen = 0;
        for (int m = tid; m < n && !seen; m += (int)blockDim.x) seen = pw_enc_key(inp, m, T) == v;
        if (__syncthreads_or(seen)) continue; /* an earlier row owns token v */
        float *__restrict__ dw = dwte + (size_t)v * C;
        for (int m0 = n; m0 < N; m0 += (int)blockDim.x) {
            const int m = m0 + tid;
            const int match = m < N && pw_enc_key(inp, m, T) == v;
            const unsigned bal = __ballot_sync(PW_FULL, match);
            if (lane == 0) warp_base[warp + 1] = __popc(bal);
            __syncthreads();
            if (tid == 0) {
                warp_base[0] = 0;
                for (int w = 1; w <= nw; w++) warp_base[w] += warp_base[w - 1];
            }
            __syncthreads();
            if (match) rows[warp_base[warp] + __popc(bal & ((1u << lane) - 1u))] = m;
            __syncthreads();
            const int cnt = warp_base[nw];
            if (cnt > 0) {
                for (int c = tid; c < C; c += (int)blockDim.x) {
                    float acc = dw[c];
                    for (int k = 0; k < cnt; k++) acc += dout[(size_t)rows[k] * C + c];
                    dw[c] = acc;
                }
            }
            __syncthreads(); /* rows and warp_base are rewritten by the next tile */
        }
    }
}

extern "C" cudaError_t lf__cuk_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                                              int B, int T, int C, cudaStream_t stream) {
    if (B < 0 || T < 0 || C < 0) return cudaErrorInvalidValue;
    const size_t total = (size_t)B * T * C;
    if (total == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_encoder_forward, pw_blocks(total, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, out, inp, wte,
                   wpe, T, C, total);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                               int B, int T, int C, cudaStream_t stream) {
    if (B < 0 || T < 0 || C < 0 || (long)B * T > 0x7fffffffL) return cudaErrorInvalidValue;
    const int N = B * T;
    if (N == 0 || C == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_encoder_backward_wte, pw_blocks((size_t)N, 1, PW_GRID_CAP), ENC_BLOCK, 0, stream, dwte, dout,
                   inp, N, C, 0);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || !dwpe) return e;
    LF_CUDA_LAUNCH(pw_encoder_backward_wpe, pw_blocks((size_t)T * C, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream,
                   dwpe, dout, B, T, C);
    return cudaGetLastError();
}

/* Packed rows: wpe row pos[n], clamped into [0, t] (backend_impl.h). */
static __device__ __forceinline__ size_t pw_packed_pos(const int32_t *pos, size_t n, int T) {
    const int t = (int)(n % (size_t)T), p = pos[n];
    return (size_t)(p >= 0 && p <= t ? p : t);
}

__global__ void pw_encoder_forward_packed(float *__restrict__ out, const int32_t *__restrict__ inp,
                                          const int32_t *__restrict__ pos, const float *__restrict__ wte,
                                          const float *__restrict__ wpe, int T, int C, size_t total) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / (size_t)C, c = i - n * (size_t)C;
        out[i] = wte[(size_t)inp[n] * C + c] + wpe[pw_packed_pos(pos, n, T) * C + c];
    }
}

extern "C" cudaError_t lf__cuk_encoder_forward_packed(float *out, const int32_t *inp, const int32_t *pos,
                                                     const float *wte, const float *wpe, int B, int T, int C,
                                                     cudaStream_t stream) {
    if (B < 0 || T < 0 || C < 0 || !pos || !wpe) return cudaErrorInvalidValue;
    const size_t total = (size_t)B * T * C;
    if (total == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_encoder_forward_packed, pw_blocks(total, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, out, inp,
                   pos, wte, wpe, T, C, total);
    return cudaGetLastError();
}

/* dwpe: the dwte kernel keyed by the clamped positions instead of the
 * tokens (the rows sharing a position gathered in row order). */
extern "C" cudaError_t lf__cuk_encoder_backward_packed(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                                      const int32_t *pos, int B, int T, int C, cudaStream_t stream) {
    if (B < 0 || T < 0 || C < 0 || (long)B * T > 0x7fffffffL || !pos || !dwpe) return cudaErrorInvalidValue;
    const int N = B * T;
    if (N == 0 || C == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_encoder_backward_wte, pw_blocks((size_t)N, 1, PW_GRID_CAP), ENC_BLOCK, 0, stream, dwte, dout,
                   inp, N, C, 0);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    LF_CUDA_LAUNCH(pw_encoder_backward_wte, pw_blocks((size_t)N, 1, PW_GRID_CAP), ENC_BLOCK, 0, stream, dwpe, dout,
                   pos, N, C, T);
    return cudaGetLastError();
}

/* ------------------------------------------------------------- GELU */

#define GELU_BETA 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_KAPPA 0.044715f

template <typename OutT>
__global__ void pw_gelu_forward(OutT *__restrict__ out, const float *__restrict__ inp, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float x = inp[i];
        const float inner = GELU_BETA * (x + GELU_KAPPA * x * x * x);
        pw_store(out, i, x / (1.0f + pw_expf_f32(-2.0f * inner)));
    }
}

__global__ void pw_gelu_backward(float *__restrict__ dinp, const float *__restrict__ inp,
                                 const float *__restrict__ dout, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float x = inp[i];
        const float x2 = x * x;
        const float s = 1.0f / (1.0f + pw_expf_f32(-2.0f * GELU_BETA * (x + GELU_KAPPA * x2 * x)));
        const float grad = s + 2.0f * x * s * (1.0f - s) * GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * x2);
        dinp[i] = dout[i] * grad;
    }
}

extern "C" cudaError_t lf__cuk_gelu_forward(void *out, int out_bf16, const float *inp, size_t n,
                                           cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const unsigned grid = pw_blocks(n, PW_BLOCK, PW_GRID_CAP);
    if (out_bf16) {
        auto *pw_gelu_forward_bf16 = &pw_gelu_forward<uint16_t>;
        LF_CUDA_LAUNCH(pw_gelu_forward_bf16, grid, PW_BLOCK, 0, stream, (uint16_t *)out, inp, n);
    } else {
        auto *pw_gelu_forward_f32 = &pw_gelu_forward<float>;
        LF_CUDA_LAUNCH(pw_gelu_forward_f32, grid, PW_BLOCK, 0, stream, (float *)out, inp, n);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                                            cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_gelu_backward, pw_blocks(n, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, dinp, inp, dout, n);
    return cudaGetLastError();
}

/* ------------------------------------------------------------- SwiGLU */

template <typename OutT>
__global__ void pw_swiglu_forward(OutT *__restrict__ out, const float *__restrict__ inp, int F, size_t total) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / (size_t)F, j = i - n * (size_t)F;
        const float g = inp[n * 2 * F + j], u = inp[n * 2 * F + F + j];
        pw_store(out, i, g / (1.0f + pw_expf_f32(-g)) * u);
    }
}

__global__ void pw_swiglu_backward(float *__restrict__ dinp, const float *__restrict__ inp,
                                   const float *__restrict__ dout, int F, size_t total) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / (size_t)F, j = i - n * (size_t)F;
        const size_t gi = n * 2 * F + j, ui = gi + F;
        const float x = inp[gi], u = inp[ui], d = dout[i];
        const float s = 1.0f / (1.0f + pw_expf_f32(-x));
        dinp[gi] = d * u * (s * (1.0f + x * (1.0f - s)));
        dinp[ui] = d * (x * s);
    }
}

extern "C" cudaError_t lf__cuk_swiglu_forward(void *out, int out_bf16, const float *inp, int N, int F,
                                             cudaStream_t stream) {
    if (N < 0 || F < 0) return cudaErrorInvalidValue;
    const size_t total = (size_t)N * F;
    if (total == 0) return cudaSuccess;
    const unsigned grid = pw_blocks(total, PW_BLOCK, PW_GRID_CAP);
    if (out_bf16) {
        auto *pw_swiglu_forward_bf16 = &pw_swiglu_forward<uint16_t>;
        LF_CUDA_LAUNCH(pw_swiglu_forward_bf16, grid, PW_BLOCK, 0, stream, (uint16_t *)out, inp, F, total);
    } else {
        auto *pw_swiglu_forward_f32 = &pw_swiglu_forward<float>;
        LF_CUDA_LAUNCH(pw_swiglu_forward_f32, grid, PW_BLOCK, 0, stream, (float *)out, inp, F, total);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F,
                                              cudaStream_t stream) {
    if (N < 0 || F < 0) return cudaErrorInvalidValue;
    const size_t total = (size_t)N * F;
    if (total == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_swiglu_backward, pw_blocks(total, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, dinp, inp, dout,
                   F, total);
    return cudaGetLastError();
}

/* ------------------------------------------------------------- RoPE */

/* Thread per (t, i): the factors of position pos0 + t and frequency i, then
 * the pair (i, i + HS/2) of every q and k head of every batch row. */
__global__ void pw_rope(float *__restrict__ x, const lf_cuk_rope_freqs freqs, int B, int T, int NH, int NKV, int HS,
                        int pos0, float sgn) {
    const int hh = HS / 2, nrot = NH + NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, total = (size_t)T * hh;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(k / (size_t)hh), i = (int)(k - (size_t)t * hh);
        const float p = (float)(pos0 + t);
        const float ang = p * freqs.inv_freq[i]; /* the float product, as HF and the CPU */
        const float cs = (float)cos((double)ang) * freqs.scale; /* as cpu_rope.c */
        const float sn = sgn * ((float)sin((double)ang) * freqs.scale);
        for (int b = 0; b < B; b++) {
            float *row = x + ((size_t)b * T + t) * W;
            for (int hd = 0; hd < nrot; hd++) {
                float *x1 = row + (size_t)hd * HS + i, *x2 = x1 + hh;
                const float a = *x1, c = *x2;
                *x1 = a * cs - c * sn;
                *x2 = c * cs + a * sn;
            }
        }
    }
}

extern "C" cudaError_t lf__cuk_rope(float *qkv, const lf_cuk_rope_freqs *freqs, int B, int T, int NH, int NKV,
                                   int HS, int pos0, float sgn, cudaStream_t stream) {
    if (B < 0 || T < 0 || NH < 1 || NKV < 1 || HS < 2 || HS % 2 || HS / 2 > LF_CUK_ROPE_MAX_HALF || !freqs)
        return cudaErrorInvalidValue;
    const size_t total = (size_t)T * (HS / 2);
    if (total == 0 || B == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_rope, pw_blocks(total, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, qkv, *freqs, B, T, NH, NKV,
                   HS, pos0, sgn);
    return cudaGetLastError();
}

/* Packed rows: thread per (b, t, i), the factors of position pos[b,t]
 * (clamped into [0, t]) with pw_rope's float operations. */
__global__ void pw_rope_packed(float *__restrict__ x, const int32_t *__restrict__ pos, const lf_cuk_rope_freqs freqs,
                               int B, int T, int NH, int NKV, int HS, float sgn) {
    const int hh = HS / 2, nrot = NH + NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, total = (size_t)B * T * hh;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / (size_t)hh;
        const int i = (int)(k - n * hh);
        const float p = (float)pw_packed_pos(pos, n, T);
        const float ang = p * freqs.inv_freq[i];
        const float cs = (float)cos((double)ang) * freqs.scale;
        const float sn = sgn * ((float)sin((double)ang) * freqs.scale);
        float *row = x + n * W;
        for (int hd = 0; hd < nrot; hd++) {
            float *x1 = row + (size_t)hd * HS + i, *x2 = x1 + hh;
            const float a = *x1, c = *x2;
            *x1 = a * cs - c * sn;
            *x2 = c * cs + a * sn;
        }
    }
}

extern "C" cudaError_t lf__cuk_rope_packed(float *qkv, const int32_t *pos, const lf_cuk_rope_freqs *freqs, int B,
                                          int T, int NH, int NKV, int HS, float sgn, cudaStream_t stream) {
    if (B < 0 || T < 0 || NH < 1 || NKV < 1 || HS < 2 || HS % 2 || HS / 2 > LF_CUK_ROPE_MAX_HALF || !freqs || !pos)
        return cudaErrorInvalidValue;
    const size_t total = (size_t)B * T * (HS / 2);
    if (total == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_rope_packed, pw_blocks(total, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, qkv, pos, *freqs, B,
                   T, NH, NKV, HS, sgn);
    return cudaGetLastError();
}

/* ------------------------------------------------------------- residual, dropout */

__global__ void pw_residual_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void pw_residual_backward(float *__restrict__ da, float *__restrict__ db, const float *__restrict__ dout,
                                     size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float d = dout[i];
        da[i] += d;
        db[i] += d;
    }
}

__global__ void pw_dropout(float *out, const float *inp, size_t n, float p, float scale, uint64_t seed, uint64_t key,
                           uint64_t offset) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = lf_cuda_dropout_keep(seed, key, offset + i, p) ? inp[i] * scale : 0.0f;
}

extern "C" cudaError_t lf__cuk_residual_forward(float *out, const float *a, const float *b, size_t n,
                                               cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_residual_forward, pw_blocks(n, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, out, a, b, n);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_residual_backward(float *da, float *db, const float *dout, size_t n,
                                                cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_residual_backward, pw_blocks(n, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, da, db, dout, n);
    return cudaGetLastError();
}

extern "C" cudaError_t lf__cuk_dropout(float *out, const float *inp, size_t n, float p, float scale, uint64_t seed,
                                      uint64_t key, uint64_t offset, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(pw_dropout, pw_blocks(n, PW_BLOCK, PW_GRID_CAP), PW_BLOCK, 0, stream, out, inp, n, p, scale, seed,
                   key, offset);
    return cudaGetLastError();
}
