/*
 * The backend operations table (private interface; see DESIGN.md "Backend").
 *
 * A backend is an operations table (lf_backend_ops, one per kind of
 * backend) and instances of it (lf_backend: the table plus the instance's
 * own context: a device's stream, library handles and workspace; the
 * fenced backend's region list). Every slot takes the instance first.
 *
 * Every op is a forward/backward pair with llm.c's argument order: outputs,
 * saved statistics, inputs, weights, then dimensions. Dimension vocabulary:
 * B batch, T time, C channels, OC output channels, V vocab, NH (query)
 * heads, NKV key/value heads (NKV == NH: multi-head attention; NH % NKV == 0),
 * HS = C/NH head size, F feed-forward width, N = B*T rows.
 *
 * Invariants the model relies on:
 *  - All tensors are float32, row-major, contiguous, in backend memory,
 *    except the activations whose storage an lf_dtype argument names (the
 *    outputs of the norms, GELU, SwiGLU and convert, and the `inp` of the
 *    matmul pair): LF_DT_BF16 is uint16_t bf16 bits, the fp32 value rounded
 *    to nearest, ties to even, NaN kept NaN. A backend accepts the dtypes
 *    in its act_dtypes; any other records LF_ERR_UNSUPPORTED (no silent
 *    conversion).
 *  - Parameter gradients always ACCUMULATE (+=): micro-batches add up until
 *    the model zeroes them before a step's first micro-batch.
 *  - Activation gradients with a single producer are OVERWRITTEN (=):
 *    matmul_backward's dinp, attention_backward's dqkv, gelu_backward's,
 *    swiglu_backward's and dropout_backward's dinp, and the fused
 *    classifier's dlogits. So no activation gradient needs zeroing before
 *    backward. rope_backward transforms dqkv in place (its q and k parts).
 *  - The residual stream's gradient ACCUMULATES: layernorm_backward,
 *    rmsnorm_backward and residual_backward add (+=) into dinp, and
 *    encoder_backward into its parameter gradients.
 *  - Parameters change only through to_device and adamw_update, or are
 *    followed by params_changed: a backend may keep derived copies of the
 *    weights (cpu-bf16 keeps bf16 ones) until one of those is called.
 *  - Matmul precision is the backend's: "cpu" computes in fp32; "cpu-bf16"
 *    rounds both operands of every matmul product to bf16 and accumulates
 *    in fp32 (gradients, weights and every other op stay fp32).
 *  - Weights use the Hugging Face GPT-2 layout: Conv1D weights are (C, OC)
 *    ("in, out") and y = x @ W + b. The tied lm_head uses wte (V, C) with
 *    y = x @ wte^T, which is matmul with layout LF_W_OUT_IN.
 *  - Ops never allocate; scratch is passed in by the caller.
 *  - Errors are sticky. An op that cannot do its work (a precondition the
 *    caller should have checked, a kernel library that refuses, a device
 *    error) records it on the instance with lf__backend_fail and returns;
 *    the first failure is kept, later ones are dropped. Ops may be queued
 *    (a device stream), so callers learn of a failure at a sync point:
 *    lf_backend_sync, which the model calls at the end of every forward,
 *    backward and optimizer step and which every copy to the host implies
 *    for the data it returns. After a failure the instance stays failed
 *    (results undefined) until it is closed, as a CUDA context does. There
 *    are no silent fallbacks: a slower path taken because the fast one
 *    failed is reported the same way.
 *  - Ops of one instance may run concurrently only from run_replicas'
 *    tasks; lf__backend_fail is thread-safe.
 *  - A NULL slot means "unsupported"; callers check and return
 *    LF_ERR_UNSUPPORTED.
 *  - Dropout masks are a pure function of (seed, key, element index) through
 *    the counter-based RNG (core.h, LF_RNG_DROPOUT), so backward recomputes
 *    the mask instead of storing it: element i of a tensor is kept when
 *    lf_rng_uniform(seed, LF_RNG_DROPOUT, lf_rng_mix(key, offset + i)) >= p
 *    and then scaled by 1/(1-p) (PyTorch's inverted dropout). p == 0 means
 *    identity. `offset` places a slice of rows inside the whole tensor, so a
 *    batch split across model replicas draws the masks of the unsplit batch.
 */
#ifndef LLMFORGE_BACKEND_IMPL_H
#define LLMFORGE_BACKEND_IMPL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include "llmforge/backend.h"

/* Storage of an activation tensor (see act_dtypes). */
typedef enum lf_dtype {
    LF_DT_F32 = 0,  /* float32 */
    LF_DT_BF16 = 1, /* bfloat16 bits (uint16_t) */
} lf_dtype;
#define LF_DT_BIT(dt) (1u << (unsigned)(dt))
static inline size_t lf_dtype_size(lf_dtype dt) { return dt == LF_DT_BF16 ? 2 : 4; }

typedef enum lf_weight_layout {
    LF_W_IN_OUT = 0, /* weight (C, OC): y = x @ W   (HF Conv1D) */
    LF_W_OUT_IN = 1, /* weight (OC, C): y = x @ W^T (nn.Linear, tied lm_head) */
} lf_weight_layout;

/* Key of one dropout site: the mask for element i is drawn from
 * (seed, LF_RNG_DROPOUT, lf_rng_mix(key, i)). */
typedef struct lf_dropout {
    float p; /* drop probability in [0,1); 0 = off */
    uint64_t seed;
    uint64_t key;    /* distinct per (step, micro-step, layer, site) */
    uint64_t offset; /* flat index of this tensor's element 0 in the whole batch's tensor */
} lf_dropout;

struct lf_backend_ops {
    const char *name;

    /* ---- instance lifecycle. open sets be->ctx (the instance's context;
     * NULL slot: no context) and returns LF_OK or an error (message
     * recorded); close frees it. sync waits until every op queued on the
     * instance has finished (NULL: ops are synchronous, as on the CPU). */
    lf_status (*open)(lf_backend *be);
    void (*close)(lf_backend *be);
    void (*sync)(lf_backend *be);

    /* ---- activation storage this backend's ops accept (LF_DT_BIT of each
     * lf_dtype). bf16 is offered only by a backend whose matmul rounds its
     * operands to bf16 anyway (cpu-bf16), so storing a matmul input in bf16
     * changes no result bit: each op computes exactly its fp32 result and
     * rounds it as convert does, and the matmul pair given a bf16 inp
     * computes exactly what it computes from the fp32 inp that rounds to
     * it. */
    unsigned act_dtypes;

    /* ---- 1: matmul_forward can be made batch-invariant on an instance
     * (lf_backend_set_batch_invariant): each output row's bits then depend
     * on that row of inp and on W only, never on N or the other rows, and
     * equal those of the same row computed alone (N = 1). Every other
     * forward op must already be row-wise so (norms, pointwise, the cached
     * attention: each row on its own). */
    int batch_invariant;

    /* ---- memory */
    int host_memory;                              /* 1: backend memory is host memory (callers may
                                                read and write it in place, no staging copy) */
    void *(*alloc)(lf_backend *be, size_t bytes); /* NULL on failure */
    void (*free)(lf_backend *be, void *p);
    /* bytes the backend reserved for p (from alloc; 0 for NULL): what memory
     * accounting compares with the plan */
    size_t (*allocated)(lf_backend *be, const void *p);
    void (*to_device)(lf_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(lf_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(lf_backend *be, void *dst, const void *src, size_t bytes); /* backend to backend memory */
    void (*zero)(lf_backend *be, float *x, size_t n);
    void (*scale)(lf_backend *be, float *x, size_t n, float s); /* x *= s */

    /* ---- the device behind backend memory (all three NULL where it is the
     * host's). mem_info: the device's free and total bytes now (cuda:
     * cudaMemGetInfo, after the instance's own context and workspace were
     * taken), what the memory plan holds a run's device part against; LF_OK,
     * or the failure with its message recorded (lf_fail, not sticky).
     * device_name: "NVIDIA H200 (device 0)", for plans and banners.
     * devices: how many devices the table could open an instance on now
     * (cuda: cudaGetDeviceCount; 0 when none answers), with no instance:
     * what backend "auto" asks. */
    lf_status (*mem_info)(lf_backend *be, size_t *free_bytes, size_t *total_bytes);
    const char *(*device_name)(lf_backend *be);
    int (*devices)(void);

    /* ---- embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]; wpe == NULL
     * (no position embedding, Llama): out[b,t,:] = wte[inp[b,t],:], and
     * backward's dwpe must then be NULL too. */
    void (*encoder_forward)(lf_backend *be, float *out, // (B,T,C)
                            const int32_t *inp,         // (B,T)
                            const float *wte,           // (V,C)
                            const float *wpe,           // (maxT,C)
                            int B, int T, int C);
    void (*encoder_backward)(lf_backend *be, float *dwte, // (V,C) +=
                             float *dwpe,                 // (maxT,C) += or NULL
                             const float *dout,           // (B,T,C)
                             const int32_t *inp,          // (B,T)
                             int B, int T, int C);

    /* ---- layernorm over the last dim, eps 1e-5, biased variance (PyTorch).
     * bias may be NULL (bias=false models). */
    void (*layernorm_forward)(lf_backend *be, void *out, // (N,C) in out_dt
                              lf_dtype out_dt,
                              float *mean,         // (N)
                              float *rstd,         // (N)
                              const float *inp,    // (N,C)
                              const float *weight, // (C)
                              const float *bias,   // (C) or NULL
                              int N, int C);
    void (*layernorm_backward)(lf_backend *be, float *dinp, // (N,C) +=
                               float *dweight,              // (C) +=
                               float *dbias,                // (C) += or NULL
                               const float *dout,           // (N,C)
                               const float *inp,            // (N,C)
                               const float *weight,         // (C)
                               const float *mean,           // (N)
                               const float *rstd,           // (N)
                               int N, int C);

    /* ---- RMSNorm over the last dim (HF LlamaRMSNorm, fp32):
     * rstd = 1/sqrt(mean(x^2) + eps), out = weight * (x * rstd). No mean, no
     * bias. rstd is saved for backward. */
    void (*rmsnorm_forward)(lf_backend *be, void *out, // (N,C) in out_dt
                            lf_dtype out_dt,
                            float *rstd,         // (N)
                            const float *inp,    // (N,C)
                            const float *weight, // (C)
                            int N, int C, float eps);
    void (*rmsnorm_backward)(lf_backend *be, float *dinp, // (N,C) +=
                             float *dweight,              // (C) +=
                             const float *dout,           // (N,C)
                             const float *inp,            // (N,C)
                             const float *weight,         // (C)
                             const float *rstd,           // (N) from forward
                             int N, int C);

    /* ---- RMSNorm of each query and key head of a qkv activation (Qwen3's
     * q_norm and k_norm, before RoPE). A row is [q | k | v], W = (NH + 2 NKV)
     * HS wide: heads 0..NH-1 are normalised over their HS channels with wq,
     * heads NH..NH+NKV-1 with wk, as rmsnorm_forward does a row; the v part
     * is copied. out and inp do not overlap. The backward works in place:
     * dqkv holds d(out) on entry and d(inp) on exit (v's part unchanged);
     * dwq and dwk accumulate (+=). NULL: the backend has no such op (the
     * model refuses a q/k-norm family on it). */
    void (*qknorm_forward)(lf_backend *be, float *out, // (N,W)
                           float *rstd,                // (N,NH+NKV)
                           const float *inp,           // (N,W)
                           const float *wq,            // (HS)
                           const float *wk,            // (HS)
                           int N, int NH, int NKV, int HS, float eps);
    void (*qknorm_backward)(lf_backend *be, float *dqkv,      // (N,W) d(out) in, d(inp) out
                            float *dwq, float *dwk,           // (HS) each, +=
                            const float *inp,                 // (N,W) forward's input
                            const float *wq, const float *wk, // (HS)
                            const float *rstd,                // (N,NH+NKV) from forward
                            int N, int NH, int NKV, int HS);

    /* ---- the residual add fused into the norm that reads it: res = a + b
     * (residual_forward's values), then layernorm_forward / rmsnorm_forward
     * of res, row by row in one pass, so res is not read back from memory.
     * The bits are those of the two ops called in turn (tests check it).
     * res may equal a or b; out, mean and rstd as the plain norms. NULL:
     * the model calls residual_forward and the norm. Backward needs no
     * fused form: the norm's backward adds into the residual stream's
     * gradient, which residual_backward then passes on. */
    void (*residual_layernorm_forward)(lf_backend *be, float *res,     // (N,C)
                                       void *out, lf_dtype out_dt,     // (N,C)
                                       float *mean, float *rstd,       // (N)
                                       const float *a, const float *b, // (N,C)
                                       const float *weight,            // (C)
                                       const float *bias,              // (C) or NULL
                                       int N, int C);
    void (*residual_rmsnorm_forward)(lf_backend *be, float *res,     // (N,C)
                                     void *out, lf_dtype out_dt,     // (N,C)
                                     float *rstd,                    // (N)
                                     const float *a, const float *b, // (N,C)
                                     const float *weight,            // (C)
                                     int N, int C, float eps);

    /* ---- matmul + bias: out = inp @ W (+ bias), W in `layout`. bias may be NULL. */
    void (*matmul_forward)(lf_backend *be, float *out, // (N,OC)
                           const void *inp,            // (N,C) in inp_dt
                           lf_dtype inp_dt,
                           const float *weight, // (C,OC) or (OC,C)
                           const float *bias,   // (OC) or NULL
                           int N, int C, int OC, lf_weight_layout layout);
    /* dinp may be NULL (gradient not needed, e.g. nothing below). dbias may be NULL. */
    void (*matmul_backward)(lf_backend *be, float *dinp, // (N,C) = (overwritten) or NULL
                            float *dweight,              // same shape as weight, +=
                            float *dbias,                // (OC) += or NULL
                            const float *dout,           // (N,OC)
                            const void *inp,             // (N,C) in inp_dt
                            lf_dtype inp_dt, const float *weight, int N, int C, int OC, lf_weight_layout layout);

    /* ---- LoRA (PEFT): the low-rank path of an adapted linear over n of its
     * output columns (out and dout point at the first, row stride ldo):
     * u = inp A^T, out += scale * u B^T. Backward recomputes u, then
     * dB += scale * dout^T u, du = scale * dout B, dA += du^T inp, and
     * dinp += du A (dinp NULL: not needed). inp is fp32. NULL slots: the
     * backend has no LoRA (lf_model_lora_attach refuses it). */
    void (*lora_forward)(lf_backend *be, float *out, int ldo, // (N,n) +=, row stride ldo
                         float *u,                            // (N,r) scratch, overwritten
                         const float *inp,                    // (N,C)
                         const float *A, const float *B,      // (r,C), (n,r)
                         int N, int C, int n, int r, float scale);
    void (*lora_backward)(lf_backend *be, float *dinp,    // (N,C) += or NULL
                          float *dA, float *dB,           // (r,C) +=, (n,r) +=
                          float *u, float *du,            // (N,r) scratch each
                          const float *dout, int ldo,     // (N,n), row stride ldo
                          const float *inp,               // (N,C)
                          const float *A, const float *B, // (r,C), (n,r)
                          int N, int C, int n, int r, float scale);

    /* ---- rotary position embedding, Hugging Face Llama's convention
     * (rotate_half: channel i pairs with i + HS/2, NOT interleaved pairs),
     * applied in place to the q and k parts of qkv rows laid out as for
     * attention ([q: NH*HS | k: NKV*HS | v: NKV*HS]; v untouched). Row t is
     * at position pos0 + t (pos0: position of the first row, for KV-cache
     * decoding). For each head and i < HS/2, with
     * angle = (float)(pos0+t) * inv_freq[i], cs = cos(angle) * scale and
     * sn = sin(angle) * scale (float products):
     *   out[i]      = x[i] * cs - x[i+HS/2] * sn
     *   out[i+HS/2] = x[i+HS/2] * cs + x[i] * sn.
     * inv_freq (HS/2 floats, host memory, read during the call) is the
     * model's table (src/model/rope.c: plain 1 / theta^(2i/HS) or a
     * scaled RoPE), scale its cos/sin factor (1 but for YaRN); the angle
     * is the float product as HF computes it, cos/sin of that float angle
     * accurate to float rounding: see cpu_rope.c for why. HS must be even and
     * pos0 + T <= 2^24 (positions exact as floats; callers validate).
     * backward applies the transposed rotation to dqkv in place (the
     * gradient w.r.t. the rotated q, k becomes the gradient w.r.t. the
     * unrotated ones; the v part is untouched). */
    void (*rope_forward)(lf_backend *be, float *qkv, // (B,T,(NH+2*NKV)*HS) in place
                         int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq, float scale);
    void (*rope_backward)(lf_backend *be, float *dqkv, // (B,T,(NH+2*NKV)*HS) in place
                          int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq, float scale);

    /* ---- causal self-attention (scaled by 1/sqrt(HS)), multi-head or
     * grouped-query. qkv rows are W = C + 2*NKV*HS wide: [q: NH*HS | k: NKV*HS |
     * v: NKV*HS], head h of each part at channels h*HS..h*HS+HS-1 of it.
     * Query head h uses key/value head h / (NH/NKV) (grouped-query
     * attention; NKV == 1 is multi-query). NKV == NH is nanoGPT's c_attn split
     * [q | k | v], each C wide (GPT-2). NH % NKV == 0 (callers validate).
     * att is what forward saves for backward, attention_saved(B, NH, T)
     * floats in a layout of the backend's own: the CPU saves the softmax
     * probabilities BEFORE dropout, (B,NH,T,T), entries above the diagonal
     * written as 0; a fused (flash) attention saves O(T) per head (the row
     * maxima and sums) and recomputes the rest. Dropout (attn_dropout)
     * applies to the probabilities before they multiply v. backward
     * overwrites all of dqkv; the k and v parts of a key/value head hold the
     * sum over its query heads; its scratch is attention_scratch(B, NH, T)
     * floats. */
    void (*attention_forward)(lf_backend *be, float *out, // (B,T,C)
                              float *att,                 // attention_saved(B,NH,T)
                              const float *qkv,           // (B,T,W)
                              int B, int T, int C, int NH, int NKV, lf_dropout drop);
    void (*attention_backward)(lf_backend *be, float *dqkv, // (B,T,W) = (overwritten)
                               float *scratch,              // attention_scratch(B,NH,T), contents undefined after
                               const float *dout,           // (B,T,C)
                               const float *qkv,            // (B,T,W)
                               const float *att,            // from forward
                               int B, int T, int C, int NH, int NKV, lf_dropout drop);

    /* ---- packed rows (SFT packing: several whole examples share a row of T
     * tokens; docs/training.md "Packing"). pos (B,T) int32, backend memory,
     * holds each token's position inside its example: 0 at an example's
     * first token, then +1 per token (callers validate: pos[b,0] == 0 and
     * pos[b,t] is 0 or pos[b,t-1] + 1; the model does so on the host before
     * it copies pos in). Token t's example starts at column t - pos[b,t] of
     * its row. Each op equals its plain form with per-token positions and a
     * block-diagonal causal mask:
     *  - encoder_*_packed: out[b,t,:] = wte[inp[b,t],:] + wpe[pos[b,t],:]
     *    (wpe never NULL: a model without position embeddings calls the plain
     *    encoder); backward adds dout[b,t,:] into dwpe[pos[b,t],:] and dwte
     *    as encoder_backward;
     *  - rope_*_packed: row t rotated at position pos[b,t] (for pos0 + t);
     *    the inv_freq table is the one of sequence length T;
     *  - attention_*_packed: query t of row b attends to keys j with
     *    t - pos[b,t] <= j <= t, never to an earlier example of the row
     *    (these two take any 0 <= pos[b,t] <= t beyond the packing rule: a
     *    sliding window W passes min(pos, W - 1), model/packed.c, so a
     *    kernel uses pos only as each row's lower bound);
     *    saved probabilities outside that range are 0 where the backend
     *    saves them (CPU), dropout indices as attention_forward's; att and
     *    scratch sized as for the plain op.
     * A row holding one example (pos[b,t] = t) gives the plain ops'
     * results: the same bits on the CPU (the masked columns are exactly
     * those above the diagonal). Kernels clamp t - pos[b,t] into [0, t] and
     * a wpe index into [0, t], so a pos that breaks the rule is wrong
     * output, never an out-of-bounds access. NULL slots: the backend cannot
     * train on packed rows, and the model refuses them naming the op. */
    void (*encoder_forward_packed)(lf_backend *be, float *out, // (B,T,C)
                                   const int32_t *inp,         // (B,T)
                                   const int32_t *pos,         // (B,T)
                                   const float *wte,           // (V,C)
                                   const float *wpe,           // (maxT,C)
                                   int B, int T, int C);
    void (*encoder_backward_packed)(lf_backend *be, float *dwte, // (V,C) +=
                                    float *dwpe,                 // (maxT,C) +=
                                    const float *dout,           // (B,T,C)
                                    const int32_t *inp,          // (B,T)
                                    const int32_t *pos,          // (B,T)
                                    int B, int T, int C);
    void (*rope_forward_packed)(lf_backend *be, float *qkv, // (B,T,(NH+2*NKV)*HS) in place
                                const int32_t *pos,         // (B,T)
                                int B, int T, int NH, int NKV, int HS, const float *inv_freq, float scale);
    void (*rope_backward_packed)(lf_backend *be, float *dqkv, // (B,T,(NH+2*NKV)*HS) in place
                                 const int32_t *pos,          // (B,T)
                                 int B, int T, int NH, int NKV, int HS, const float *inv_freq, float scale);
    void (*attention_forward_packed)(lf_backend *be, float *out, // (B,T,C)
                                     float *att,                 // attention_saved(B,NH,T)
                                     const float *qkv,           // (B,T,W)
                                     const int32_t *pos,         // (B,T)
                                     int B, int T, int C, int NH, int NKV, lf_dropout drop);
    void (*attention_backward_packed)(lf_backend *be, float *dqkv, // (B,T,W) = (overwritten)
                                      float *scratch,              // attention_scratch(B,NH,T)
                                      const float *dout,           // (B,T,C)
                                      const float *qkv,            // (B,T,W)
                                      const float *att,            // from forward
                                      const int32_t *pos,          // (B,T)
                                      int B, int T, int C, int NH, int NKV, lf_dropout drop);

    /* ---- sizes (floats) of attention's saved tensor and backward scratch
     * for a call of B rows, NH query heads, T positions; and of
     * attention_cached's scratch for Tn rows at position pos0. Pure
     * functions of the shape (no instance: plans are made before one
     * exists); the model plans every layer's slots with them. */
    size_t (*attention_saved)(int B, int NH, int T);
    size_t (*attention_scratch)(int B, int NH, int T);
    size_t (*attention_cached_scratch)(int B, int NH, int Tn, int pos0);

    /* ---- KV cache (generation). The cache of one layer is two tensors
     * kcache, vcache (B, NKV, Tmax, HS): per (batch row, key/value head) the
     * keys (values) of positions 0..Tmax-1, HS contiguous, so one decoded
     * query row reads each key and value row as one contiguous run.
     * kv_append copies the k and v parts of Tn new qkv rows (laid out as for
     * attention, W = (NH + 2*NKV)*HS) into positions pos0 .. pos0+Tn-1, bit
     * for bit; positions outside that range are untouched. Callers check
     * 0 <= pos0, Tn >= 1, pos0 + Tn <= Tmax, NH % NKV == 0. */
    void (*kv_append)(lf_backend *be, float *kcache, // (B,NKV,Tmax,HS)
                      float *vcache,                 // (B,NKV,Tmax,HS)
                      const float *qkv,              // (B,Tn,W)
                      int B, int Tn, int NH, int NKV, int HS, int pos0, int Tmax);
    /* Causal attention of Tn new query rows (absolute positions pos0 ..
     * pos0+Tn-1; the q part of the qkv rows) against the cached keys and
     * values 0 .. pos0+t (the new rows' k, v already appended by kv_append).
     * Query head h reads key/value head h / (NH/NKV), scaled by 1/sqrt(HS),
     * as attention_forward; no dropout (inference). out (B,Tn,C) is
     * overwritten, C = NH*HS. scratch: attention_cached_scratch(B, NH, Tn,
     * pos0) floats, contents undefined after. Same arithmetic as
     * attention_forward (fp32 scores, max-subtracted softmax with the
     * backend's exp, fp32 sums), so a prefill of T rows at pos0 = 0 gives
     * attention_forward's out to float rounding and one row at pos0 = p gives
     * row p of the whole sequence's attention to float rounding. The CPU
     * backend computes each row alone (the same bits however the positions
     * are split into calls, and for any thread count). Callers check the
     * conditions of kv_append and C % NH == 0. */
    void (*attention_cached)(lf_backend *be, float *out, // (B,Tn,C)
                             float *scratch,             // attention_cached_scratch floats
                             const float *qkv,           // (B,Tn,W)
                             const float *kcache,        // (B,NKV,Tmax,HS)
                             const float *vcache,        // (B,NKV,Tmax,HS)
                             int B, int Tn, int C, int NH, int NKV, int pos0, int Tmax);

    /* ---- GELU, tanh approximation (GPT-2 / nanoGPT's nn.GELU(approximate='tanh')). */
    void (*gelu_forward)(lf_backend *be, void *out, lf_dtype out_dt, const float *inp, size_t n);
    void (*gelu_backward)(lf_backend *be, float *dinp, /* = */ const float *inp, const float *dout, size_t n);

    /* ---- SwiGLU on a fused [gate | up] input (Llama's MLP, Shazeer 2020):
     * out[n,j] = silu(inp[n,j]) * inp[n,F+j], silu(x) = x * sigmoid(x).
     * backward overwrites dinp's gate and up halves. */
    void (*swiglu_forward)(lf_backend *be, void *out, // (N,F) in out_dt
                           lf_dtype out_dt,
                           const float *inp, // (N,2F): gate cols 0..F-1, up cols F..2F-1
                           int N, int F);
    void (*swiglu_backward)(lf_backend *be, float *dinp, // (N,2F) = (overwritten)
                            const float *inp,            // (N,2F)
                            const float *dout,           // (N,F)
                            int N, int F);

    /* ---- residual: out = a + b;  backward: da += dout, db += dout */
    void (*residual_forward)(lf_backend *be, float *out, const float *a, const float *b, size_t n);
    void (*residual_backward)(lf_backend *be, float *da, float *db, const float *dout, size_t n);

    /* ---- dropout as a standalone op (embeddings, residual branches).
     * out may equal inp. backward: dinp = mask * dout / (1-p) (overwritten;
     * dinp may equal dout). */
    void (*dropout_forward)(lf_backend *be, float *out, const float *inp, size_t n, lf_dropout drop);
    void (*dropout_backward)(lf_backend *be, float *dinp, const float *dout, size_t n, lf_dropout drop);

    /* ---- fused softmax + cross-entropy over V (of a row padded to Vp >= V;
     * columns V..Vp-1 are ignored and their dlogits written as 0).
     * losses[i] = -log softmax(logits[i])[targets[i]]; targets[i] < 0 means
     * "ignored": loss 0 and dlogits row 0. When dlogits != NULL it is written
     * (overwritten) with (softmax - onehot) * dloss for non-ignored rows; dlogits
     * may alias logits. Returns nothing; the caller sums losses. */
    void (*crossentropy_forward_backward)(lf_backend *be, float *losses, // (N)
                                          float *dlogits,                // (N,Vp) or NULL
                                          const float *logits,           // (N,Vp)
                                          const int32_t *targets,        // (N)
                                          int N, int V, int Vp, float dloss);

    /* ---- AdamW exactly as torch.optim.AdamW (decoupled weight decay applied
     * first: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)). t >= 1.
     * grad_scale multiplies g first (gradient clipping folded in). */
    void (*adamw_update)(lf_backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);

    /* ---- the loss of a forward: the sum of losses[i] over the rows whose
     * target is not ignored (targets[i] >= 0), in row order in double, and
     * their count in *n_valid (a host variable). */
    double (*loss_sum)(lf_backend *be, const float *losses, const int32_t *targets, int N, long *n_valid);

    /* ---- fp16 training: x rounded to the nearest fp16 value (IEEE binary16,
     * ties to even; out of range -> inf) in place; returns 1 when any result
     * is not finite (the loss scaler's overflow test), else 0. */
    int (*fp16_round)(lf_backend *be, float *x, size_t n);

    /* ---- sum of squares of x (accumulated in double). */
    double (*sum_squares)(lf_backend *be, const float *x, size_t n);

    /* ---- how many model replicas a batch of B rows should be split into
     * (the CPU backend: one per thread, each running single-threaded ops;
     * accelerators: 1). NULL means 1. */
    int (*replicas)(lf_backend *be, int B);
    /* ---- run fn(arg, i) for i in [0, n), concurrently, one replica each;
     * ops called from fn must run single-threaded. NULL: a plain loop. */
    void (*run_replicas)(lf_backend *be, int n, void (*fn)(void *arg, int i), void *arg);
    /* ---- y += x, element-wise (gradient reduction across replicas). */
    void (*add_inplace)(lf_backend *be, float *y, const float *x, size_t n);

    /* ---- out (n, in out_dt) = inp (n, fp32): a copy for LF_DT_F32, the
     * rounding for LF_DT_BF16 (an activation computed in fp32 elsewhere,
     * e.g. the attention output, into the plan's storage). */
    void (*convert)(lf_backend *be, void *out, lf_dtype out_dt, const float *inp, size_t n);

    /* ---- gradients on the wire in bf16 (the trainer's
     * communication_data_type: bf16), on every backend whatever its
     * activation storage: out (n bf16 bits) = inp (n fp32) rounded to the
     * nearest bf16 (ties to even, as convert), out and inp disjoint; and
     * back, out (n fp32) = inp (n bf16), exact. NULL: the backend cannot,
     * and the trainer refuses bf16 communication on it. */
    void (*grad_to_bf16)(lf_backend *be, uint16_t *out, const float *inp, size_t n);
    void (*grad_from_bf16)(lf_backend *be, float *out, const uint16_t *inp, size_t n);

    /* ---- pinned (page-locked) host memory, for host buffers that to_host /
     * to_device move often (ZeRO-Offload's moments, gradient copy and
     * parameter staging): the copies run by DMA at full bus speed instead
     * of through a bounce buffer. cuda: cudaMallocHost / cudaFreeHost.
     * NULL on host-memory backends (nothing to pin); a NULL return is an
     * allocation failure. host_free takes only host_alloc's pointers. */
    void *(*host_alloc)(lf_backend *be, size_t bytes);
    void (*host_free)(lf_backend *be, void *p);

    /* ---- parameters were written by a route other than to_device or
     * adamw_update (e.g. a collective into backend memory, or a host write
     * on the CPU): drop whatever the backend derived from them (cpu-bf16's
     * bf16 weight copies). Never called while ops run. */
    void (*params_changed)(lf_backend *be);

    /* ---- the device stream every op of the instance is queued on (a
     * cudaStream_t as void *), for a communicator that moves backend memory
     * itself: the nccl kind orders its collectives against it
     * (lf_comm_set_stream). NULL slot: no stream (host memory, synchronous
     * ops). */
    void *(*native_stream)(lf_backend *be);
};

/* An instance (see the header comment). Public code holds it opaque
 * (llmforge/backend.h); ops and model code reach the table through it. */
struct lf_backend {
    const lf_backend_ops *ops;
    void *ctx;           /* the backend's context (ops->open) */
    int shared;          /* lf_backend_get's process-wide instance: lf_backend_close leaves it open */
    int batch_invariant; /* lf_backend_set_batch_invariant: matmul_forward row results independent of N */
    _Atomic int status;  /* sticky: LF_OK or the first failure */
    char msg[512];       /* its message, written once by whoever set status */
};

/* Record a failure on the instance (the first one wins; thread-safe; no
 * effect after the first). The message should name the op and what it was
 * given. Returns `code`. Inline, so the backends below the registry's
 * library (lf_backend_cpu) need nothing from above them. The message is
 * written by the thread that won the swap before its op returns; it is read
 * only after a sync point (lf_backend_sync, after the replicas joined). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline lf_status
lf__backend_fail(lf_backend *be, lf_status code, const char *fmt, ...) {
    int expected = LF_OK;
    if (code == LF_OK) code = LF_ERR_INTERNAL;
    if (!atomic_compare_exchange_strong(&be->status, &expected, (int)code)) return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->msg, sizeof be->msg, fmt, ap);
    va_end(ap);
    return code;
}
static inline int lf__backend_failed(const lf_backend *be) { return be->status != LF_OK; }

/* An instance of a table that is not registered by name (tests' counting
 * backends); closed with lf_backend_close. */
lf_status lf__backend_open_ops(const lf_backend_ops *ops, lf_backend **out);

/* Adds a table to the names lf_backend_open finds (backend.c's one table
 * of kinds: the built-in CPU kinds below are registered there at first use;
 * a library above, e.g. "cuda", calls this); registering the same table
 * again is a no-op. LF_OK or LF_ERR_RANGE when the registry is full. */
lf_status lf__backend_register(const lf_backend_ops *ops);

/* The built-in kinds' tables (registered by backend.c at first use). */
const lf_backend_ops *lf__backend_cpu(void);
const lf_backend_ops *lf__backend_cpu_bf16(void);
const lf_backend_ops *lf__backend_cpu_fenced(void); /* tests: memory unreadable outside ops (cpu_fenced.c) */

#endif
