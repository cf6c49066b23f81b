/*
 * GPT-2 model: configuration, parameter table (Hugging Face GPT-2 names and
 * shapes), initialisation, forward and backward built from backend ops.
 *
 * Parameters, gradients and each optimizer moment are one contiguous buffer
 * each, laid out in parameter-table order; the table is a pure function of
 * the configuration (lf_gpt2_param_table), so checkpoint I/O, zero-grad and
 * sharding are operations on ranges.
 */
#ifndef LLMFORGE_MODEL_H
#define LLMFORGE_MODEL_H

#include "llmforge/core.h"
#include "llmforge/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_gpt2_config {
    int n_layer;
    int n_head;
    int n_embd;
    int block_size;       /* max sequence length (wpe rows) */
    int vocab_size;       /* real vocabulary (targets < vocab_size) */
    int padded_vocab_size;/* wte rows; >= vocab_size (0 = same as vocab_size) */
    int bias;             /* biases in linears and layernorms */
    float dropout;        /* nanoGPT: embeddings, attention weights, residual branches */
} lf_gpt2_config;

/* Checks ranges and divisibility; message names the field. */
lf_status lf_gpt2_config_validate(const lf_gpt2_config *cfg);

#define LF_PARAM_NAME_MAX 64
typedef struct lf_param_info {
    char name[LF_PARAM_NAME_MAX]; /* e.g. "h.3.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2];
    size_t offset;                /* in floats, into the parameter buffer */
    size_t numel;
    int decay;                    /* nanoGPT: weight decay on tensors with >= 2 dims */
} lf_param_info;

/* Parameter table of a config: *out is allocated (lf_free), *count entries,
 * *total floats. Order: wte, wpe, then per layer ln_1.{weight,bias},
 * attn.c_attn.{weight,bias}, attn.c_proj.{weight,bias}, ln_2.{weight,bias},
 * mlp.c_fc.{weight,bias}, mlp.c_proj.{weight,bias}; then ln_f.{weight,bias}.
 * Biases are absent when cfg->bias == 0. */
lf_status lf_gpt2_param_table(const lf_gpt2_config *cfg, lf_param_info **out, int *count, size_t *total);

/* Parameters without the position embedding (nanoGPT's get_num_params). */
size_t lf_gpt2_num_params_nonembedding(const lf_gpt2_config *cfg);

/* Model FLOPs per token for training (6N + 12*L*C*T; nanoGPT/PaLM counting). */
double lf_gpt2_flops_per_token(const lf_gpt2_config *cfg, int T);

typedef struct lf_model lf_model;

/* Allocates parameters and gradients (zeroed). */
lf_status lf_model_create(lf_model **out, const lf_gpt2_config *cfg, const lf_backend_ops *be);
void lf_model_free(lf_model *m);

/* GPT-2 init: normal(0, 0.02) for weights, residual projections (attn.c_proj,
 * mlp.c_proj weights) normal(0, 0.02/sqrt(2*n_layer)), zero biases, ones for
 * layernorm weights. Deterministic in seed (counter RNG, purpose INIT). */
lf_status lf_model_init_weights(lf_model *m, uint64_t seed);

const lf_gpt2_config *lf_model_config(const lf_model *m);
const lf_param_info *lf_model_params_table(const lf_model *m, int *count);
size_t lf_model_num_params(const lf_model *m);
float *lf_model_params(lf_model *m); /* backend memory, num_params floats */
float *lf_model_grads(lf_model *m);
const lf_param_info *lf_model_find_param(const lf_model *m, const char *name);

/* Plan and allocate activations for up to B x T (T <= block_size). Bytes the
 * plan takes are returned in *bytes (may be NULL). Re-planning frees the old. */
lf_status lf_model_plan(lf_model *m, int B, int T, size_t *bytes);

typedef struct lf_forward_opts {
    float dloss;       /* > 0: compute dlogits scaled by dloss for a later backward
                          (1 / number of target tokens in the whole step);
                          0: forward only */
    int train;         /* 1: dropout active */
    uint64_t seed;     /* dropout seed */
    uint64_t key;      /* dropout key of this micro-batch (step, micro-step) */
} lf_forward_opts;

/* Forward on inputs (B,T). With targets (B,T; < 0 = ignored), returns the sum
 * of per-token losses in *loss_sum and the number of non-ignored targets in
 * *n_valid. Without targets only logits are computed (lf_model_logits). */
lf_status lf_model_forward(lf_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                           const lf_forward_opts *opts, double *loss_sum, long *n_valid);

/* Logits (B,T,Vp) of the last forward without targets (backend memory). */
const float *lf_model_logits(const lf_model *m);

/* Backward of the last forward (which must have had dloss > 0): gradients are
 * ADDED to lf_model_grads (so micro-batches accumulate). */
lf_status lf_model_backward(lf_model *m);

/* Zero all parameter gradients. */
void lf_model_zero_grad(lf_model *m);

/* Last error message recorded on this model. */
const char *lf_model_errmsg(const lf_model *m);

#ifdef __cplusplus
}
#endif
#endif
