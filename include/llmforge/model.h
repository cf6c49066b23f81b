/*
 * Decoder-only language models: configuration, parameter table (Hugging Face
 * names and shapes), initialisation, forward and backward built from backend
 * ops, for every architecture (lf_arch: GPT-2, Llama). The runtime
 * (src/model/model.c) is architecture-neutral; each architecture is one
 * table (src/model/model_impl.h, one file per architecture).
 *
 * Parameters, gradients and each optimizer moment are one contiguous buffer
 * each, laid out in parameter-table order; the table is a pure function of
 * the configuration (lf_model_param_table), so checkpoint I/O, zero-grad and
 * sharding are operations on ranges.
 */
#ifndef LLMFORGE_MODEL_H
#define LLMFORGE_MODEL_H

#include "llmforge/core.h"
#include "llmforge/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Architectures (model.arch). Each is one table in src/model/<name>.c,
 * registered in LF__ARCHS (src/model/model_impl.h); an lf_arch is its
 * position there (lf_arch_count, lf_arch_parse). The first two are named
 * here for callers that pick one; a family added later needs no value here. */
typedef enum lf_arch {
    LF_ARCH_GPT2 = 0,  /* "gpt2": learned positions, LayerNorm, GELU MLP, tied head (nanoGPT, HF GPT2LMHeadModel) */
    LF_ARCH_LLAMA = 1, /* "llama": RoPE, RMSNorm, SwiGLU MLP, grouped-query attention (HF LlamaForCausalLM) */
} lf_arch;

typedef enum lf_norm {
    LF_NORM_LAYERNORM = 0, /* (x - mean) * rstd * w + b, biased variance (GPT-2) */
    LF_NORM_RMSNORM = 1,   /* x * rsqrt(mean(x^2) + eps) * w (Llama) */
} lf_norm;

/* RoPE frequency scaling (llama), as transformers' modeling_rope_utils.py
 * names the types (src/model/rope.c says what each computes). */
typedef enum lf_rope_type {
    LF_ROPE_DEFAULT = 0, /* plain RoPE: inv_freq[i] = theta^(-2i/HS) */
    LF_ROPE_LINEAR = 1,  /* inv_freq / factor */
    LF_ROPE_DYNAMIC = 2, /* NTK: theta grown with the sequence length past max_pos */
    LF_ROPE_YARN = 3,    /* YaRN: ramp between interpolation and extrapolation, cos/sin scaled */
    LF_ROPE_LLAMA3 = 4,  /* Llama 3.1: low frequencies / factor, a smooth band between */
} lf_rope_type;

/* The parameters of a rope_scaling / rope_parameters object (config.json
 * names); fields a type does not read stay 0. */
typedef struct lf_rope_scaling {
    lf_rope_type type;
    double factor;                            /* linear, dynamic, yarn, llama3 */
    double low_freq_factor, high_freq_factor; /* llama3 */
    int original_max_position_embeddings;     /* llama3, yarn */
    int max_position_embeddings;              /* dynamic, yarn: config.json's (block_size may differ) */
    double attention_factor;                  /* yarn: 0 = from factor, mscale, mscale_all_dim */
    double beta_fast, beta_slow;              /* yarn: 0 = 32, 1 */
    double mscale, mscale_all_dim;            /* yarn */
    int no_truncate;                          /* yarn: "truncate": false */
} lf_rope_scaling;

/* A model's shape and hyper-parameters, for every architecture. A field
 * left 0 takes its architecture's default (lf_model_config_resolve). */
typedef struct lf_model_config {
    lf_arch arch;
    int n_layer;
    int n_head;
    int n_kv_head; /* key/value heads (GQA; 1 = MQA); divides n_head. 0: n_head */
    int n_embd;
    int ffn_hidden;        /* MLP hidden width. 0: 4*n_embd (gpt2); 8*n_embd/3 rounded up to 64 (llama) */
    int block_size;        /* max sequence length (wpe rows; RoPE positions) */
    int vocab_size;        /* real vocabulary (targets < vocab_size) */
    int padded_vocab_size; /* embedding rows; >= vocab_size (0 = same as vocab_size) */
    lf_norm norm;          /* set by the architecture */
    float norm_eps;        /* 0: 1e-5 */
    float rope_theta;      /* llama: RoPE base. 0: 10000 */
    int tie_embeddings;    /* lm_head shares the token embedding (gpt2: always) */
    int bias;              /* gpt2: biases in linears and layernorms; llama: q/k/v biases (Qwen2) */
    float dropout;         /* nanoGPT: embeddings, attention weights, residual branches */
    /* The attention window the model was made with (Mistral's
     * sliding_window: a position attends to the last sliding_window
     * positions); 0: none. llmforge's attention has no window yet, so
     * block_size may not exceed it (lf_model_config_validate refuses it):
     * within it windowed and full attention are the same. */
    int sliding_window;
    int head_dim;         /* llama: channels per head. 0: n_embd / n_head */
    int out_bias;         /* llama: o_proj bias too (HF attention_bias: q/k/v/o; needs bias) */
    int mlp_bias;         /* llama: gate/up/down biases (HF mlp_bias) */
    int qk_norm;          /* llama: RMSNorm of each q and k head before RoPE (Qwen3's q_norm, k_norm) */
    int fused_proj;       /* llama: the tensors are named fused, qkv_proj and gate_up_proj (Phi-3); same compute */
    lf_rope_scaling rope; /* llama: RoPE scaling (HF rope_scaling / rope_parameters) */
} lf_model_config;

/* The architectures are the registered tables (src/model/model_impl.h,
 * LF__ARCHS): lf_arch values 0 .. lf_arch_count() - 1, in registration
 * order (the first is model.arch's default). */
int lf_arch_count(void);
/* Its name ("gpt2", "llama"); "?" for other values. */
const char *lf_arch_name(lf_arch arch);
/* Every name, in lf_arch order, NULL-terminated (static; the config's
 * model.arch choices). */
const char *const *lf_arch_names(void);
/* The names as a list for messages: "gpt2, llama" (static). */
const char *lf_arch_list(void);
/* 1 when the architecture can store its matmul inputs in bf16 (lf_act_dtype),
 * 0 when they stay fp32. */
int lf_arch_bf16_acts(lf_arch arch);
/* 1 when the architecture's context length is fixed by a position table
 * (an imported model's block_size is its own), 0 when any works (RoPE). */
int lf_arch_fixed_context(lf_arch arch);
/* Parse an architecture name (exact, lower case). LF_ERR_CONFIG names the
 * value and the choices. */
lf_status lf_arch_parse(const char *name, lf_arch *out);

/* Which model.* keys a configuration set by hand (lf_train_config.model_given,
 * lf_model_config_given). */
enum {
    LF_MODEL_GIVEN_ARCH = 1u << 0,
    LF_MODEL_GIVEN_N_LAYER = 1u << 1,
    LF_MODEL_GIVEN_N_HEAD = 1u << 2,
    LF_MODEL_GIVEN_N_KV_HEAD = 1u << 3,
    LF_MODEL_GIVEN_N_EMBD = 1u << 4,
    LF_MODEL_GIVEN_FFN_HIDDEN = 1u << 5,
    LF_MODEL_GIVEN_BLOCK_SIZE = 1u << 6,
    LF_MODEL_GIVEN_VOCAB_SIZE = 1u << 7,
    LF_MODEL_GIVEN_NORM_EPS = 1u << 8,
    LF_MODEL_GIVEN_ROPE_THETA = 1u << 9,
    LF_MODEL_GIVEN_TIE = 1u << 10,
    LF_MODEL_GIVEN_BIAS = 1u << 11,
    LF_MODEL_GIVEN_SLIDING_WINDOW = 1u << 12,
};

/* The architecture's rules on the keys a configuration set by hand (given:
 * LF_MODEL_GIVEN_* bits), before lf_model_config_validate: defaults that
 * hold only for keys left out (llama: no biases), then values the family
 * refuses. NULL when the config stands; else why (a phrase naming the
 * family, e.g. "gpt2's lm_head is always tied to wte"), with *key the
 * model.* key at fault. An unknown arch: NULL (validate reports it). */
const char *lf_model_config_given(lf_model_config *cfg, unsigned given, const char **key);

/* Fill the fields left 0 with the architecture's defaults (n_kv_head,
 * ffn_hidden, norm, norm_eps, rope_theta; GPT-2 ties its embeddings).
 * LF_ERR_CONFIG for an unknown arch. Idempotent. */
lf_status lf_model_config_resolve(lf_model_config *cfg);

/* Resolves a copy and checks ranges and divisibility; the message names
 * the key (model.n_head, model.n_kv_head, ...). A block_size larger than
 * sliding_window (when set) is LF_ERR_UNSUPPORTED naming both. */
lf_status lf_model_config_validate(const lf_model_config *cfg);

#define LF_PARAM_NAME_MAX 64
typedef struct lf_param_info {
    char name[LF_PARAM_NAME_MAX]; /* e.g. "h.3.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2];
    size_t offset; /* in floats, into the parameter buffer */
    size_t numel;
    int decay; /* nanoGPT: weight decay on tensors with >= 2 dims */
    int unit;  /* ZeRO unit (lf_model_num_units): 0 embeddings, 1..L blocks, L+1 head */
} lf_param_info;

/* Named model shapes (`llmforge bench --preset`, `llmforge plan --preset`):
 * gpt2-124m, shakespeare-char-cpu, smollm-135m (Llama: 30 layers, 576
 * channels, 9 heads, 3 KV heads, ffn 1536, vocab 49152, tied) and
 * llama-3.2-1b (16 layers, 2048 channels, 32/8 heads, ffn 8192, vocab
 * 128256, tied, rope_theta 500000; its rope_scaling is not applied).
 * LF_ERR_NOT_FOUND lists the names. */
lf_status lf_model_preset(const char *name, lf_model_config *out);
const char *lf_model_preset_names(void); /* "gpt2-124m, ..." */
/* The config as configuration overrides ("model.arch=llama\nmodel.n_layer=30\n..."),
 * one per line, like snprintf. */
int lf_model_config_overrides(const lf_model_config *cfg, char *buf, size_t cap);

/* The fields of a config that no model.* key sets (they come from a Hugging
 * Face config.json: head_dim, out_bias, mlp_bias, qk_norm, fused_proj, rope):
 * as a JSON object {"head_dim", "out_bias", "mlp_bias", "qk_norm",
 * "fused_proj" (both written only when true), "rope_theta",
 * "max_position_embeddings" (the RoPE's own), "rope_scaling": config.json's
 * object or null}, like snprintf; lf_model_config_extras_default says
 * whether they are all at their defaults (trainer_state.json then leaves
 * them out). lf_model_config_extras_parse reads that object back into cfg
 * (those fields and rope_theta; `where` names the file in messages):
 * LF_ERR_CONFIG / LF_ERR_UNSUPPORTED as for config.json. */
int lf_model_config_extras_json(const lf_model_config *cfg, char *buf, size_t cap);
int lf_model_config_extras_default(const lf_model_config *cfg);
lf_status lf_model_config_extras_parse(const char *json, const char *where, lf_model_config *cfg);

/* Parameter table of a config: *out is allocated (lf_free), *count entries,
 * *total floats.
 * gpt2: wte, wpe, then per layer ln_1.{weight,bias}, attn.c_attn.{weight,bias},
 * attn.c_proj.{weight,bias}, ln_2.{weight,bias}, mlp.c_fc.{weight,bias},
 * mlp.c_proj.{weight,bias}; then ln_f.{weight,bias} (biases absent when
 * cfg->bias == 0). Conv1D layout (in, out).
 * llama: model.embed_tokens.weight, then per layer
 * model.layers.{i}.input_layernorm.weight, self_attn.{q,k,v,o}_proj.weight,
 * post_attention_layernorm.weight, mlp.{gate,up,down}_proj.weight; then
 * model.norm.weight and (untied) lm_head.weight. nn.Linear layout (out, in). */
lf_status lf_model_param_table(const lf_model_config *cfg, lf_param_info **out, int *count, size_t *total);

/* Parameters without those that do not count in 6N (GPT-2's position
 * embedding: nanoGPT's get_num_params). */
size_t lf_model_num_params_nonembedding(const lf_model_config *cfg);

/* Parameters in lookup-only tables, read by no product: the total less
 * lf_model_num_params_nonembedding (GPT-2's wpe, an untied Llama's
 * embedding). 0 for an invalid config. */
size_t lf_model_lookup_params(const lf_model_config *cfg);

/* Model FLOPs per token for training: 6N + attention (12*L*C*T for GPT-2,
 * 12*L*NH*HS*T for Llama: nanoGPT/PaLM counting). */
double lf_model_flops_per_token(const lf_model_config *cfg, int T);

/* Hugging Face config.json of a config (GPT2LMHeadModel, LlamaForCausalLM),
 * like snprintf: the length it needed; 0 when the architecture's config has
 * no HF equivalent (GPT-2 without biases). */
int lf_model_hf_config_json(const lf_model_config *cfg, char *buf, size_t cap);

typedef struct lf_model lf_model;

/* Allocates parameters and gradients (zeroed). */
/* cfg is resolved (lf_model_config_resolve) into the model's copy. */
lf_status lf_model_create(lf_model **out, const lf_model_config *cfg, lf_backend *be);
void lf_model_free(lf_model *m);

/* The architecture's init, deterministic in seed (counter RNG, purpose INIT).
 * gpt2: normal(0, 0.02) for weights, residual projections (attn.c_proj,
 * mlp.c_proj weights) normal(0, 0.02/sqrt(2*n_layer)), zero biases, ones for
 * layernorm weights. llama (HF LlamaPreTrainedModel): normal(0, 0.02) for
 * every matrix, ones for the RMSNorm weights. */
lf_status lf_model_init_weights(lf_model *m, uint64_t seed);

const lf_model_config *lf_model_get_config(const lf_model *m); /* resolved */
const lf_param_info *lf_model_params_table(const lf_model *m, int *count);
size_t lf_model_num_params(const lf_model *m);
float *lf_model_params(lf_model *m); /* backend memory, num_params floats */
float *lf_model_grads(lf_model *m);
const lf_param_info *lf_model_find_param(const lf_model *m, const char *name);

/* ---------------------------------------------------------------- activation memory
 *
 * Activation recomputation (DeepSpeed's "activation checkpointing") trades
 * compute in backward for activation memory. Every policy gives the same
 * losses and gradients bit for bit in fp32: recomputation re-runs the same
 * ops on the same inputs, and dropout masks are a pure function of
 * (seed, key, element), so backward redraws the masks forward drew.
 *
 * Per layer and token (row), with C channels, NH heads and T positions, a
 * block keeps these floats: none 16C + NH*T + 4 (GPT-2 small at T 256: 20C);
 * selective 10C + NH*T + 4 (drops both layernorm outputs and the GELU output
 * and recomputes them in backward: one more layernorm and GELU pass per
 * layer); full C (the block's input only; backward runs the forward of every
 * block but the last again, up to its GELU: (L-1)(16C^2 + 4TC) FLOPs per
 * token on top of a step's 6N + 12LCT, e.g. +15% for GPT-2 small at T 256).
 * Each replica adds one block's working set, shared by all layers.
 * With bf16 activation storage (lf_act_dtype) the 7C of those that only
 * feed matrix products (ln_1, ln_2, attention and GELU outputs) take 2
 * bytes instead of 4, in the saved tensors and the working set alike.
 */
typedef enum lf_recompute {
    LF_RECOMPUTE_NONE = 0,      /* keep what backward reads (default) */
    LF_RECOMPUTE_SELECTIVE = 1, /* recompute layernorm and GELU outputs */
    LF_RECOMPUTE_FULL = 2,      /* keep block inputs; recompute each block */
} lf_recompute;

/* "none", "selective", "full"; "?" for other values. */
const char *lf_recompute_name(lf_recompute policy);
/* Parse one of those names (exact, lower case). LF_ERR_INVALID_ARG names the
 * value and the choices. */
lf_status lf_recompute_parse(const char *name, lf_recompute *out);

/* What an activation plan allocates, in bytes (one block; this breakdown
 * adds up to total). */
typedef struct lf_act_bytes {
    size_t total;         /* the whole block lf_model_plan allocates */
    size_t saved;         /* kept from forward for backward, all replicas: per-layer
                             activations, embeddings, ln_f (what the policy changes) */
    size_t work;          /* per replica, shared by the layers: one block's working
                             set, attention scratch, activation gradients */
    size_t logits;        /* logits (dlogits in training) and losses, (B,T,Vp) + (B,T),
                             and the model's copy of the batch */
    size_t replica_grads; /* parameter-gradient buffers of replicas 1.. (CPU threads) */
} lf_act_bytes;

/* Storage of the activations whose only use is as the input of a matrix
 * product: the ln_1, ln_2 and ln_f outputs, the attention output (c_proj's
 * input) and the GELU output (mlp.c_proj's input). Everything else a step
 * keeps (the residual stream, layernorm statistics, qkv, the attention
 * probabilities, the GELU input, logits and losses) is fp32 either way.
 * LF_ACT_BF16 needs a backend whose products round their operands to bf16
 * anyway ("cpu-bf16"): there it halves those tensors and changes no bit of
 * any loss or gradient. */
typedef enum lf_act_dtype {
    LF_ACT_FP32 = 0,
    LF_ACT_BF16 = 1,
} lf_act_dtype;

/* "fp32", "bf16"; "?" for other values. */
const char *lf_act_dtype_name(lf_act_dtype dtype);

/* Activation bytes of a plan for (cfg, B, T, policy, dtype) with the batch
 * split over n_replicas model replicas, computed without allocating
 * anything: the same layout lf_model_plan allocates, so for the same
 * arguments the totals are equal. dtype is the storage of the matmul inputs
 * (lf_act_dtype; a model on "cpu-bf16" uses LF_ACT_BF16 unless told
 * otherwise, on "cpu" LF_ACT_FP32). n_replicas is what the backend splits B
 * rows into: 1 on accelerators; the CPU backend runs
 * min(lf_backend_cpu_threads(), B). It is reduced as lf_model_plan reduces
 * it (no replica without rows). Returns LF_OK; LF_ERR_RANGE / LF_ERR_CONFIG
 * (invalid cfg, T > block_size); LF_ERR_INVALID_ARG (B, T or n_replicas < 1,
 * unknown policy or dtype). Pure and thread-safe. */
lf_status lf_model_plan_bytes(const lf_model_config *cfg, int B, int T, lf_recompute policy, lf_act_dtype dtype,
                              int n_replicas, lf_act_bytes *out);

/* Recompute policy of the next lf_model_plan (the plan in place keeps the
 * policy it was made with until then; lf_model_forward plans by itself only
 * when the model has no plan large enough). Default LF_RECOMPUTE_NONE.
 * Returns LF_OK or LF_ERR_INVALID_ARG (unknown policy; nothing changes). */
lf_status lf_model_set_recompute(lf_model *m, lf_recompute policy);
/* The policy of the plan in place (of the next plan when there is none). */
lf_recompute lf_model_recompute(const lf_model *m);

/* Storage of the matmul inputs for the next lf_model_plan, like
 * lf_model_set_recompute. The default is LF_ACT_BF16 on a backend that
 * offers bf16 activation storage ("cpu-bf16"), else LF_ACT_FP32; fp32 there
 * gives the same results with more memory (the tests compare the two).
 * Returns LF_OK, LF_ERR_UNSUPPORTED (bf16 on a backend without it, e.g.
 * "cpu") or LF_ERR_INVALID_ARG (unknown dtype); on error nothing changes. */
lf_status lf_model_set_act_dtype(lf_model *m, lf_act_dtype dtype);
/* The storage of the plan in place (of the next plan when there is none). */
lf_act_dtype lf_model_act_dtype(const lf_model *m);

/* Plan and allocate activations for up to B x T (T <= block_size) with the
 * policy lf_model_set_recompute chose and the storage of
 * lf_model_set_act_dtype. Bytes the plan takes are returned in *bytes (may
 * be NULL): lf_model_plan_bytes(cfg, B, T, policy, dtype, replicas)
 * .total, all of it in one allocation through the backend. Re-planning frees
 * the old plan (and any pending backward). */
lf_status lf_model_plan(lf_model *m, int B, int T, size_t *bytes);
/* Breakdown of the plan in place (all zero when there is none). */
void lf_model_activation_bytes(const lf_model *m, lf_act_bytes *out);

typedef struct lf_forward_opts {
    float dloss;   /* > 0: compute dlogits scaled by dloss for a later backward
                          (1 / number of target tokens in the whole step);
                          0: forward only */
    int train;     /* 1: dropout active */
    uint64_t seed; /* dropout seed */
    uint64_t key;  /* dropout key of this micro-batch (step, micro-step) */
    /* Packed rows (SFT packing, docs/training.md "Packing"): NULL, or (B,T)
     * host int32, each token's position inside its example: 0 at an
     * example's first token, then +1 per token. Position embeddings and
     * RoPE then use these positions, and attention stays inside each
     * example (a block-diagonal causal mask), so a row of several examples
     * computes what each example computes alone. Read during the call only.
     * LF_ERR_RANGE when a row breaks the rule (naming row and column),
     * LF_ERR_UNSUPPORTED on a backend without the packed ops or with a
     * session's KV cache active. */
    const int32_t *pos;
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

/* Per-sequence losses of the last forward with targets: sums[b] (host, B
 * values) = the sum over row b's non-ignored targets of -log p(target), so
 * -sums[b] is the row's log-probability of its targets (DPO's sequence
 * log-prob). Errors: LF_ERR_INVALID_ARG (no forward with targets). */
lf_status lf_model_row_losses(lf_model *m, double *sums);

/* Multiply the dlogits of the last training forward row by row (w: host, B
 * values) before lf_model_backward: a per-sequence weight on the loss whose
 * value is known only after the forward (DPO's d loss / d logp). Errors:
 * LF_ERR_INVALID_ARG (no training forward pending). */
lf_status lf_model_scale_dlogits(lf_model *m, const float *w);

/* Zero all parameter gradients. */
void lf_model_zero_grad(lf_model *m);

/* Free the gradient memory of a model that will only run (sample, eval,
 * serve: lf_checkpoint_load_model does it), halving its parameter memory;
 * lf_model_backward then fails with LF_ERR_INVALID_ARG. */
void lf_model_release_grads(lf_model *m);

/* ---- ZeRO: parameters and gradients by unit -------------------------------
 * The flat parameter vector is cut into units used one after another: unit 0
 * the embeddings (wte, wpe; wte also serves the tied lm_head), units 1..L the
 * blocks, unit L+1 ln_f. Each is a contiguous range of the flat vector
 * (lf_model_param_table's order). Forward uses units 0, 1..L, L+1 and 0 again;
 * backward L+1 and 0 (lm_head), L..1, then 0 (the embeddings). */
int lf_model_num_units(const lf_model *m);
void lf_model_unit_range(const lf_model *m, int unit, size_t *lo, size_t *n);
/* Floats of unit 0 and of the largest other unit (the unit working buffers);
 * returns the number of parameters (0 for an invalid cfg). */
size_t lf_model_unit_sizes(const lf_model_config *cfg, size_t *unit0, size_t *max_other);

typedef struct lf_model_zero {
    /* ZeRO-2/3: no whole-model gradient buffer. After the backward of each
     * unit (every micro-batch), the unit's gradient of that backward, summed
     * over the model's replicas, is handed to reduce_grads (unit_n floats,
     * overwritten by the next backward); lf_model_grads is NULL. */
    int partition_grads;
    /* ZeRO-3: no whole-model parameter buffer. Before a unit is used,
     * gather_params fills its working buffer (unit_n floats); a gathered unit
     * stays valid until lf_model_params_changed or another unit takes its
     * buffer (unit 0 has its own). lf_model_params is NULL. */
    int partition_params;
    lf_status (*gather_params)(void *user, int unit, float *dst);
    lf_status (*reduce_grads)(void *user, int unit, float *grad);
    void *user;
    /* With partition_grads: a second block-unit gradient buffer (the
     * largest block unit's floats), the block units of a backward
     * alternating between the two, so reduce_grads may leave a unit's
     * buffer in use (an overlapped reduce-scatter) while the next unit's
     * backward fills the other; the buffer handed for unit u is next
     * written by the unit after the next. */
    int double_buffer_grads;
    /* With partition_params: a second block-unit parameter buffer and, once
     * a block unit is in use, the next one (forward: u + 1, backward: u - 1)
     * gathered into the other buffer by gather_start while it computes;
     * using it waits for it with gather_wait (ZeRO-3's prefetch). */
    int prefetch_params;
    lf_status (*gather_start)(void *user, int unit, float *dst, int64_t *ticket);
    lf_status (*gather_wait)(void *user, int64_t ticket);
    /* Without partition_grads (ZeRO stages 0-1): after the backward of each
     * unit (every micro-batch), grads_ready gets the unit's range of the
     * whole gradient buffer (unit_n floats at the unit's offset, summed over
     * the replicas; a later backward of the same step adds to it), so the
     * caller can start its sum while the rest of the backward runs. NULL:
     * not called. Nothing is partitioned with only this set. */
    lf_status (*grads_ready)(void *user, int unit, float *grad);
} lf_model_zero;
/* Switch the model to partitioned gradients and/or parameters (once; the
 * whole buffers are freed and unit working buffers allocated: see
 * lf_model_zero_work_bytes). LF_ERR_NOMEM leaves the model as it was. */
lf_status lf_model_set_zero(lf_model *m, const lf_model_zero *z);
/* Block units used from a prefetch (prefetch_params) since the model was made. */
long lf_model_prefetch_hits(const lf_model *m);
/* Bytes of the unit working buffers lf_model_set_zero allocates. */
size_t lf_model_zero_work_bytes(const lf_model_config *cfg, int partition_grads, int partition_params);
/* Bytes of one block-unit buffer (the second gradient buffer of
 * double_buffer_grads). */
size_t lf_model_zero_block_bytes(const lf_model_config *cfg);
/* Bytes the allocator holds for the model's parameters (the whole buffer,
 * or the two gathered-unit buffers under ZeRO-3) and gradients (the whole
 * buffer, or replica 0's two unit buffers under ZeRO-2/3), by
 * lf_alloc_usable: for checking the memory plan against the allocator. */
void lf_model_state_bytes(const lf_model *m, size_t *params, size_t *grads);
/* ZeRO-3: the parameters changed (an optimizer step): gathered units are stale. */
void lf_model_params_changed(lf_model *m);

/* ---- sessions: execution state apart from the weights ---------------------
 * A session is a forward-only context on a model's weights: its own
 * activation plan for up to B x T (forward only: each layer's tensors in one
 * working set, only block outputs kept), its logits, and per-layer KV caches
 * of T positions in backend memory. The model's own plan (the trainer's) is
 * never touched, so evaluation and generation do not re-plan training. The
 * session borrows the weights: the model must outlive it, and optimizer
 * steps are seen by its next forward. Not for ZeRO-3 (partitioned weights). */
typedef struct lf_session lf_session;
/* with_cache 0: no KV cache (scoring); 1: one of T positions per row when the
 * backend has cached attention (lf_session_has_cache says whether it does). */
lf_status lf_session_create(lf_session **out, lf_model *m, int B, int T, int with_cache);
void lf_session_free(lf_session *s);
/* Forward of inputs (B' <= B rows of T tokens). use_cache 0: positions 0..T-1,
 * nothing cached (T <= the session's T). use_cache 1: the rows continue the
 * cached sequence at position lf_session_pos (prefill: T prompt tokens from
 * 0; decode: 1 token): their keys and values are appended and they attend
 * over every cached position before them. LF_ERR_RANGE when the cache would
 * overflow, LF_ERR_UNSUPPORTED when the backend has no cached attention. */
lf_status lf_session_forward(lf_session *s, const int32_t *inputs, int B, int T, int use_cache);
/* One run of a ragged forward: `len` tokens of the sequence held in cache
 * slot `slot` (a batch row of the session, 0 <= slot < B), at positions
 * pos .. pos + len - 1. every_row 0 (the default): the head runs on the
 * run's last row only; 1: on each of its rows (a prompt's own
 * log-probabilities, e.g. a server's echo with logprobs), at the cost of
 * the vocabulary-wide product for each of them. */
typedef struct lf_segment {
    int slot, pos, len;
    int every_row;
    int adapter; /* 0: the base alone; k: the base + serving adapter k (lf_model_lora_bank_add) */
} lf_segment;
/* A forward over several sequences at once, each at its own position
 * (continuous batching): tokens holds the n_seg runs one after the other
 * (sum of len <= the session's T tokens in all). Each run's keys and values
 * go into its slot's cache at its positions, and it attends over that
 * slot's positions 0 .. pos + t; the matrix products run once over all the
 * rows. pos may not exceed what the slot holds (lf_session_slot_pos; 0
 * starts the slot's sequence again); two runs may not share a slot. The
 * head runs on each run's last position only: logits row i is run i's
 * next-token distribution (n_seg rows), unless runs ask for every_row: the
 * logits rows are then the runs in order, one row for each run and len rows
 * for a run with every_row (its row t: the distribution after its token t;
 * lf_session_ragged_rows counts them). Each run's logits equal those of the
 * same tokens run alone in a session of one row, to float rounding (the
 * products see a different row count). LF_ERR_INVALID_ARG / LF_ERR_RANGE
 * name the run and the bound. */
lf_status lf_session_forward_ragged(lf_session *s, const int32_t *tokens, const lf_segment *seg, int n_seg);
/* The first logits row of run i of a ragged forward over seg[0..n_seg)
 * (i == n_seg: the number of rows), by the rule above. */
int lf_session_ragged_rows(const lf_segment *seg, int i);
/* Positions cached in slot `slot` (by ragged forwards; -1 for a bad slot). */
int lf_session_slot_pos(const lf_session *s, int slot);
/* Logits (B', T, Vp) of the last forward (backend memory: read it through
 * lf_session_copy_logits unless the backend's memory is the host's). */
const float *lf_session_logits(const lf_session *s);
/* Rows [row, row + n_rows) of those logits (Vp floats each) into host dst. */
lf_status lf_session_copy_logits(const lf_session *s, size_t row, size_t n_rows, float *dst);
/* 1 when the session's backend memory is host memory (lf_session_logits may
 * then be read in place, without a copy). */
int lf_session_host_memory(const lf_session *s);
/* Start a new cached sequence (position 0); positions filled so far. */
void lf_session_reset(lf_session *s);
int lf_session_pos(const lf_session *s);
int lf_session_has_cache(const lf_session *s);
lf_model *lf_session_model(const lf_session *s);
/* Bytes a session of B x T allocates (activations, and the KV cache when
 * with_cache), without a model: the planner's own sizing pass. */
lf_status lf_session_plan_bytes(const lf_model_config *cfg, int B, int T, int with_cache, size_t *bytes);
/* The same for model m on its own backend (whose attention may save less
 * than the CPU's: the cuda backend's fused attention keeps no T x T). */
lf_status lf_model_session_plan_bytes(const lf_model *m, int B, int T, int with_cache, size_t *bytes);
/* The backend instance the model lives on. */
lf_backend *lf_model_backend(const lf_model *m);

/* ---- LoRA (include/llmforge/model.h; docs/training.md "LoRA") ------------
 * Low-rank adapters after PEFT's LoraConfig (peft/tuners/lora): each
 * targeted linear y = x W^T (+ b) becomes y + scale * (x A^T) B^T with A
 * (r, in) and B (out, r) trainable and the base frozen; scale = alpha / r,
 * or alpha / sqrt(r) with use_rslora. A starts uniform(-1/sqrt(in),
 * 1/sqrt(in)) (PEFT's kaiming_uniform with a = sqrt(5)), B at zero. Targets
 * are Hugging Face module names: Llama q_proj k_proj v_proj o_proj gate_proj
 * up_proj down_proj, GPT-2 c_attn c_proj c_fc (both c_proj), a dotted
 * suffix of the module path ("attn.c_proj"), or "all-linear" (every linear
 * of the blocks; never the lm_head). */
#define LF_LORA_TARGETS_MAX 512
typedef struct lf_lora_config {
    int r;                                    /* rank, > 0 */
    float alpha;                              /* lora_alpha */
    float dropout;                            /* lora_dropout, [0, 1) */
    char target_modules[LF_LORA_TARGETS_MAX]; /* names joined by '\n'; "" = no LoRA */
    char bias[16];                            /* "none" (the only one implemented) */
    int use_rslora;                           /* scale alpha / sqrt(r) */
} lf_lora_config;

/* PEFT's defaults (r 8, alpha 8, dropout 0, bias none), no targets. */
lf_lora_config lf_lora_config_default(void);
/* 1 when lc asks for LoRA (target_modules not empty). */
int lf_lora_enabled(const lf_lora_config *lc);
/* The checks of lc against a model config (r, dropout, bias, every target
 * matching a module of the model; cfg NULL: the values alone); messages
 * name the lora.* key. Nothing to check when lc asks for no LoRA. */
lf_status lf_lora_config_check(const lf_lora_config *lc, const lf_model_config *cfg);
/* Trainable parameters LoRA adds to a model of this config (0 when off). */
size_t lf_lora_num_params(const lf_lora_config *lc, const lf_model_config *cfg);

/* Attach adapters to m (once, after its base weights are in place): A drawn
 * from seed, B zero. From then on the base is frozen (its gradient memory
 * is freed; backward computes no base gradient), the model runs one replica,
 * and lf_model_train_* below are the adapters. LF_ERR_UNSUPPORTED for a
 * backend without the LoRA ops (which also keep activations in fp32) or
 * ZeRO, naming what. lora.dropout drops each adapter's input while training
 * (lf_forward_opts.train), with a mask of its own. */
lf_status lf_model_lora_attach(lf_model *m, const lf_lora_config *lc, uint64_t seed);
/* The adapters' config, or NULL when none is attached. */
const lf_lora_config *lf_model_lora(const lf_model *m);
/* The scale of the adapters' products (alpha / r or alpha / sqrt(r)). */
float lf_model_lora_scale(const lf_model *m);
/* PEFT's name of adapter tensor i of the train table
 * ("base_model.model." + the Hugging Face module path + ".lora_A.weight"),
 * like snprintf. */
int lf_model_lora_peft_name(const lf_model *m, int i, char *buf, size_t cap);

/* Fold the adapters into the base weights (PEFT's merge_and_unload: W +=
 * scale * B A, in the weight's layout), in place; the adapters stay attached
 * (a forward after it would add them again). Host-memory backends only. */
lf_status lf_model_lora_merge(lf_model *m);
/* Serving several adapters on one base (vLLM's multi-LoRA): moves the
 * adapters attached to m (lf_model_lora_attach, then their weights, e.g.
 * lf_lora_adapter_load) into m's bank as adapter *index (1, 2, ...); m then
 * has no attached adapters and another may be attached and added. The bank
 * is for inference: a ragged forward's run with lf_segment.adapter k adds
 * adapter k's low-rank path to its own rows only (the base products run
 * once over all rows), which equals that run alone on base + adapter k up
 * to the float rounding of the delta's order. Freed with m. */
lf_status lf_model_lora_bank_add(lf_model *m, int *index);
/* Adapters in m's bank (0: none). */
int lf_model_lora_bank_count(const lf_model *m);

/* What trains: the whole parameter vector, or with LoRA the adapters (their
 * own table, names like "model.layers.0.self_attn.q_proj.lora_A.weight",
 * offsets into their own buffers). The optimizer, gradient sums and
 * checkpoints of the trainer work on these. */
const lf_param_info *lf_model_train_table(const lf_model *m, int *count);
size_t lf_model_train_num_params(const lf_model *m);
float *lf_model_train_params(lf_model *m); /* backend memory */
float *lf_model_train_grads(lf_model *m);  /* backend memory */

/* Last error message recorded on this model. */
const char *lf_model_errmsg(const lf_model *m);

#ifdef __cplusplus
}
#endif
#endif
