/*
 * The fused softmax + cross-entropy with its logits gradient, and the loss
 * sum, of the CUDA backend (cuda_pointwise.h; the CPU's is cpu_loss.c).
 *
 * crossentropy: a block of 512 threads per row (grid-stride over rows),
 * three passes over the row's V logits, all coalesced: (1) the max (a
 * NaN-ignoring max, exact in any order) and the target's logit, (2)
 * e_j = expf(l_j - max), stored into dlogits and summed in double (a
 * per-thread double, then a fixed butterfly/warp-order block sum), (3)
 * loss = log(sum) + max - l_target in double, and dlogits_j = e_j * (1/sum)
 * * dloss, the target's (p_t - 1) * dloss, the padding columns V..Vp-1 0.
 * The exponentials live in dlogits between passes 2 and 3: no second
 * (N, Vp) buffer. dlogits may alias logits: every thread reads column j
 * before it writes column j, the target's logit is read before the first
 * barrier (so before any write), and p_t is recomputed from that logit
 * (the same expf of the same float, so the same bits as e_target) instead
 * of being read back from a column another thread rewrites.
 * Ignored rows (target < 0): loss 0, dlogits row 0; a target >= V: loss
 * NaN (the caller's non-finite check), dlogits row 0 — as the CPU.
 *
 * loss_sum: one block; each tile of 256 rows is staged in shared memory and
 * thread 0 adds the valid rows' losses in row order in double: the CPU's
 * sequence of additions, so the CPU's bits (the sum is a handful of
 * microseconds for a batch of 16k rows; it is read once a step).
 *
 * Precision: expf here is CUDA's (within 2 ulp; the shim's is the host
 * libm's) where the CPU's is correctly rounded but for ties: each e_j
 * differs by a few ulp, the sum in double adds no error of note, so the
 * loss agrees to a few ulp of 1 absolute and dlogits to a few ulp relative
 * (the tests' error model).
 *
 * Reference: PyTorch F.cross_entropy(ignore_index=-1); llm.c
 * fused_classifier_kernel.
 */
#include "cuda_compat.h"
#include "cuda_pointwise.h"
#include "cuda_pw_common.cuh"

#define CE_BLOCK 512
#define LS_BLOCK 256

__global__ void ce_kernel(float *__restrict__ losses, float *dlogits, const float *logits,
                          const int32_t *__restrict__ targets, int N, int V, int Vp, float dloss) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    const int tid = (int)threadIdx.x, bd = (int)blockDim.x;
    for (int i = (int)blockIdx.x; i < N; i += (int)gridDim.x) { /* block-uniform */
        const float *l = logits + (size_t)i * Vp;
        float *dl = dlogits ? dlogits + (size_t)i * Vp : NULL;
        const int32_t tgt = targets[i];
        if (tgt < 0 || tgt >= V) {
            if (tid == 0) losses[i] = tgt < 0 ? 0.0f : NAN;
            if (dl)
                for (int j = tid; j < Vp; j += bd) dl[j] = 0.0f;
            continue;
        }
        const float lt = l[tgt]; /* before the barrier: before any write to the row */
        float mx = -INFINITY;
        for (int j = tid; j < V; j += bd) {
            const float x = l[j];
            mx = x > mx ? x : mx;
        }
        mx = pw_block_max(mx, shf);
        double sum = 0.0;
        if (dl) {
            for (int j = tid; j < V; j += bd) {
                const float e = expf(l[j] - mx);
                dl[j] = e;
                sum += (double)e;
            }
        } else {
            for (int j = tid; j < V; j += bd) sum += (double)expf(l[j] - mx);
        }
        sum = pw_block_sum_d(sum, shd);
        if (tid == 0) losses[i] = (float)(log(sum) + (double)mx - (double)lt);
        if (dl) {
            const float s = (float)(1.0 / sum);
            const float p_t = expf(lt - mx) * s;
            for (int j = tid; j < V; j += bd) dl[j] = j == tgt ? (p_t - 1.0f) * dloss : dl[j] * s * dloss;
            for (int j = V + tid; j < Vp; j += bd) dl[j] = 0.0f;
        }
    }
}

extern "C" cudaError_t lf__cuk_crossentropy(float *losses, float *dlogits, const float *logits,
                                           const int32_t *targets, int N, int V, int Vp, float dloss,
                                           cudaStream_t stream) {
    if (N < 0 || V < 1 || Vp < V) return cudaErrorInvalidValue;
    if (N == 0) return cudaSuccess;
    LF_CUDA_LAUNCH(ce_kernel, pw_blocks((size_t)N, 1, PW_GRID_CAP), CE_BLOCK, 0, stream, losses, dlogits, logits,
                   targets, N, V, Vp, dloss);
    return cudaGetLastError();
}

__global__ void ls_kernel(lf_cuk_loss_result *__restrict__ out, const float *__restrict__ losses,
                          const int32_t *__restrict__ targets, int N) {
    __shared__ float sl[LS_BLOCK];
    __shared__ int sv[LS_BLOCK];
    const int tid = (int)threadIdx.x;
    double sum = 0.0;
    long long cnt = 0;
    for (int i0 = 0; i0 < N; i0 += LS_BLOCK) {
        const int i = i0 + tid;
        const int valid = i < N && targets[i] >= 0;
        sv[tid] = valid;
        sl[tid] = valid ? losses[i] : 0.0f;
        __syncthreads();
        if (tid == 0) {
            const int m = N - i0 < LS_BLOCK ? N - i0 : LS_BLOCK;
            for (int k = 0; k < m; k++) {
                if (sv[k]) {
                    sum += (double)sl[k];
                    cnt++;
                }
            }
        }
        __syncthreads();
    }
    if (tid == 0) {
        out->sum = sum;
        out->count = cnt;
    }
}

extern "C" cudaError_t lf__cuk_loss_sum(lf_cuk_loss_result *out, const float *losses, const int32_t *targets, int N,
                                       cudaStream_t stream) {
    if (N < 0 || !out) return cudaErrorInvalidValue;
    LF_CUDA_LAUNCH(ls_kernel, 1, LS_BLOCK, 0, stream, out, losses, targets, N);
    return cudaGetLastError();
}
