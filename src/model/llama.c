/*
 * Llama-family decoder (Hugging Face LlamaForCausalLM; Llama 2/3, SmolLM,
 * Mistral, its sliding window no shorter than block_size; with model.bias,
 * Qwen2ForCausalLM):
 * token embedding, L pre-norm blocks (RMSNorm -> grouped-query attention
 * with RoPE -> residual, RMSNorm -> SwiGLU MLP -> residual), a final RMSNorm
 * and an lm_head, tied to the embedding or not. No position embedding; no
 * biases but, with model.bias, those of the q, k and v projections
 * (Qwen2's; consecutive like the weights, so the fused product adds them),
 * with out_bias also o_proj's (HF attention_bias), and with mlp_bias those
 * of gate, up (consecutive: one fused product) and down. The head size
 * HS is head_dim when set (Mistral-Nemo, Qwen3: NH*HS need not be C): q is
 * NH*HS wide, k and v NKV*HS, and o_proj maps NH*HS back to C. RoPE's
 * frequencies come from rope.c (plain, linear, dynamic, yarn, llama3).
 * Two config.json-only flags make the rest of the family: qk_norm (Qwen3:
 * q_norm / k_norm, an RMSNorm of each q and k head over its HS channels
 * before RoPE, the backend's qknorm op on the projection's output) and
 * fused_proj (Phi-3: the checkpoint names the q/k/v and gate/up matrices
 * as one tensor each, qkv_proj and gate_up_proj; the same rows, so the
 * same products).
 * One architecture table (lf__arch_llama, model_impl.h) of the model
 * runtime (model.c).
 *
 * Layout: Hugging Face names and nn.Linear's (out, in) weights, y = x @ W^T
 * (LF_W_OUT_IN). A block's q, k and v projections are consecutive in the
 * flat buffer, so together they are one ((NH + 2 NKV) HS, C) matrix and one
 * product gives rows [q | k | v], the layout the attention op reads;
 * likewise gate and up are one (2F, C) matrix giving [gate | up] for the
 * SwiGLU op. The checkpoint's model.safetensors is therefore exactly what
 * transformers loads.
 *
 * Invariants:
 *  - RoPE is applied in place to the q and k parts of qkv right after the
 *    projection (positions 0..T-1), so qkv holds the rotated q and k that
 *    attention and its backward read; backward rotates dq and dk back
 *    before the projection's backward. With qk_norm the projection writes
 *    qkr and the norms write qkv (then rotated); backward turns d(qkv)
 *    into d(qkr) in place after rotating back.
 *  - Activation gradients are shared by all layers, as in gpt2.c: the
 *    residual stream's gradient (dresidual) that the RMSNorm backwards add
 *    into, and per-op buffers their single producer overwrites.
 *  - Recomputation (lf_recompute) as in gpt2.c: selective recomputes the two
 *    RMSNorm outputs and the SwiGLU output; full keeps each block's input and
 *    re-runs the block (up to SwiGLU) in backward. Same ops on the same
 *    inputs: every policy gives the same bits.
 *  - Activation storage (lf_act_dtype), as in gpt2.c: the tensors whose
 *    only readers are matmuls, as their `inp` (h1, atty, h2, sw, hf: the
 *    `act` pointers below), are fp32 or bf16 for the whole plan (plan_dt),
 *    bf16 on a backend that offers it (cpu-bf16) with the same bits as fp32
 *    storage. The attention output is written in fp32 into the oproj buffer
 *    (free until o_proj overwrites it) and converted from there.
 *  - Dropout: HF Llama has attention dropout only (attention_dropout), which
 *    is model.dropout here; there is none on the residual branches.
 *
 * References: Touvron et al. 2023 (Llama); Hugging Face transformers
 * modeling_llama.py (LlamaRMSNorm, rotate_half, LlamaMLP, repeat_kv);
 * Ainslie et al. 2023 (GQA); Shazeer 2020 (GLU variants).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model_impl.h"

/* Indices of one block's tensors in the parameter table (a bias is -1
 * when the config has none). */
enum {
    P_IN_NORM,
    P_Q,
    P_K,
    P_V,
    P_QB,
    P_KB,
    P_VB,
    P_O,
    P_OB,
    P_POST_NORM,
    P_GATE,
    P_UP,
    P_GATEB,
    P_UPB,
    P_DOWN,
    P_DOWNB,
    P_QNORM, /* Qwen3's per-head norms */
    P_KNORM,
    P_QKV, /* Phi-3's fused names: one tensor each for q/k/v and gate/up */
    P_GATE_UP,
    P_PER_LAYER
};

/* A matmul-input activation: float or uint16_t (bf16 bits) as plan_dt says. */
typedef void act;

typedef struct layer_acts {
    act *h1;      /* (N,C): input_layernorm output */
    float *rstd1; /* (N) its statistics */
    float *qkv;   /* (N,W) [q | k | v], q and k normalised (qk_norm) and rotated */
    float *qkr;   /* qk_norm: (N,W) the projection's output, before the q/k norms */
    float *rstdq; /* qk_norm: (N,NH+NKV) their statistics */
    float *att;   /* what attention saves (the CPU: (B,NH,T,T) probabilities) */
    act *atty;    /* (N,Q) attention output before o_proj (Q = NH*HS) */
    float *oproj; /* (N,max(C,Q)) o_proj / down_proj outputs, the fp32 attention output; working set */
    float *res2;  /* (N,C) residual after attention */
    act *h2;      /* post_attention_layernorm output */
    float *rstd2;
    float *gu;   /* (N,2F) [gate | up] */
    act *sw;     /* (N,F) SwiGLU output */
    float *res3; /* (N,C) block output */
} layer_acts;

typedef struct llama_acts {
    layer_acts *la;
    float *encoded; /* (N,C) token embeddings */
    act *hf;        /* (N,C) final norm output */
    float *rstdf;
    float *att_scratch;     /* attention_backward's scratch (s->att_scratch) */
    float *dresidual, *dln; /* (N,C) */
    float *datty;           /* (N,Q) */
    float *dqkv;            /* (N,W) */
    float *dgu;             /* (N,2F) */
    float *dsw;             /* (N,F) */
} llama_acts;

/* The tensors outside the layers (model_params order), and one layer's
 * (layer_params order, P_* above). */
enum { G_EMB, G_NORM, G_LM_HEAD, G_N };
static const char *const k_model_params[G_N] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
static const char *const k_layer_params[P_PER_LAYER] = {"input_layernorm.weight",    "self_attn.q_proj.weight",
                                                        "self_attn.k_proj.weight",   "self_attn.v_proj.weight",
                                                        "self_attn.q_proj.bias",     "self_attn.k_proj.bias",
                                                        "self_attn.v_proj.bias",     "self_attn.o_proj.weight",
                                                        "self_attn.o_proj.bias",     "post_attention_layernorm.weight",
                                                        "mlp.gate_proj.weight",      "mlp.up_proj.weight",
                                                        "mlp.gate_proj.bias",        "mlp.up_proj.bias",
                                                        "mlp.down_proj.weight",      "mlp.down_proj.bias",
                                                        "self_attn.q_norm.weight",   "self_attn.k_norm.weight",
                                                        "self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"};

static llama_acts *ACTS(const lf__replica *rp) { return rp->acts; }
/* The head's weights: lm_head.weight, or the embedding when tied (no lm_head). */
static int head_ix(const lf_model *m) {
    const int h = lf__model_ix(m, G_LM_HEAD);
    return h >= 0 ? h : lf__model_ix(m, G_EMB);
}

/* The fused q/k/v and gate/up weights: the first of the three (two)
 * consecutive tensors, or Phi-3's one fused tensor; the same matrix. */
static int qkv_ix(const int *ix) { return ix[P_Q] >= 0 ? ix[P_Q] : ix[P_QKV]; }
static int gate_up_ix(const int *ix) { return ix[P_GATE] >= 0 ? ix[P_GATE] : ix[P_GATE_UP]; }

static int head_size(const lf_model_config *c) { return lf__head_size(c); }
/* Query channels NH*HS (C unless head_dim says otherwise). */
static int q_width(const lf_model_config *c) { return c->n_head * head_size(c); }
/* Width of a qkv row: NH*HS query channels, NKV*HS each for keys and values. */
static int qkv_width(const lf_model_config *c) { return q_width(c) + 2 * c->n_kv_head * head_size(c); }

/* ---------------------------------------------------------------- config and table */

static void llama_resolve(lf_model_config *c) {
    if (c->n_kv_head == 0) c->n_kv_head = c->n_head;
    if (c->ffn_hidden == 0) c->ffn_hidden = ((8 * c->n_embd / 3) + 63) / 64 * 64;
    c->norm = LF_NORM_RMSNORM;
    if (c->norm_eps == 0.0f) c->norm_eps = 1e-5f;
    if (c->rope_theta == 0.0f) c->rope_theta = 10000.0f;
}

static lf_status llama_validate(const lf_model_config *c) {
    if (c->n_kv_head < 1 || c->n_kv_head > c->n_head)
        return lf_fail(LF_ERR_RANGE, "model.n_kv_head %d is out of range [1, model.n_head %d]", c->n_kv_head,
                       c->n_head);
    if (c->n_head % c->n_kv_head != 0)
        return lf_fail(LF_ERR_CONFIG,
                       "model.n_head %d is not divisible by model.n_kv_head %d (each key/value head "
                       "serves a whole group of query heads)",
                       c->n_head, c->n_kv_head);
    if (c->head_dim < 0 || c->head_dim > 2 * LF__ROPE_MAX_HALF)
        return lf_fail(LF_ERR_RANGE, "head_dim %d is out of range [1, %d]", c->head_dim, 2 * LF__ROPE_MAX_HALF);
    if (c->head_dim && c->head_dim % 2 != 0)
        return lf_fail(LF_ERR_CONFIG, "head_dim %d is odd: RoPE rotates pairs of channels", c->head_dim);
    if (head_size(c) % 2 != 0)
        return lf_fail(LF_ERR_CONFIG,
                       "head size model.n_embd / model.n_head = %d / %d = %d is odd: RoPE rotates pairs "
                       "of channels",
                       c->n_embd, c->n_head, head_size(c));
    if (head_size(c) > 2 * LF__ROPE_MAX_HALF)
        return lf_fail(LF_ERR_UNSUPPORTED, "head size model.n_embd / model.n_head = %d is above %d", head_size(c),
                       2 * LF__ROPE_MAX_HALF);
    if (c->out_bias && !c->bias)
        return lf_fail(LF_ERR_CONFIG, "an o_proj bias (attention_bias) needs the q/k/v biases (model.bias)");
    if (c->fused_proj && (c->bias || c->mlp_bias))
        return lf_fail(LF_ERR_CONFIG, "fused qkv_proj/gate_up_proj names (Phi-3) come without biases (model.bias)");
    lf_status rs = lf__rope_validate(c);
    if (rs != LF_OK) return rs;
    if (c->ffn_hidden < 1 || c->ffn_hidden > (1 << 20))
        return lf_fail(LF_ERR_RANGE, "model.ffn_hidden %d is out of range [1, 1048576]", c->ffn_hidden);
    if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f))
        return lf_fail(LF_ERR_RANGE, "model.norm_eps %g is out of range (0, 1)", (double)c->norm_eps);
    if (!(c->rope_theta > 1.0f && isfinite(c->rope_theta)))
        return lf_fail(LF_ERR_RANGE, "model.rope_theta %g must be a finite number > 1", (double)c->rope_theta);
    return LF_OK;
}

static lf_status llama_param_table(const lf_model_config *c, lf_param_info **out, int *count, size_t *total) {
    *out = NULL;
    const int L = c->n_layer, C = c->n_embd, HS = head_size(c), F = c->ffn_hidden;
    const int KV = c->n_kv_head * HS, Q = c->n_head * HS;
    const int W = Q + 2 * KV;
    lf_param_info *t = lf_calloc(sizeof *t * (size_t)(1 + L * P_PER_LAYER + 2));
    if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory for the parameter table");
    int n = 0;
    size_t off = 0;
    char name[LF_PARAM_NAME_MAX];
    lf__add_param(t, &n, &off, "model.embed_tokens.weight", 2, lf__vp(c), C, 0);
    for (int l = 0; l < L; l++) {
#define ADD(suffix, nd, a, b) \
    do { \
        snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix); \
        lf__add_param(t, &n, &off, name, nd, a, b, 1 + l); \
    } while (0)
        ADD("input_layernorm.weight", 1, C, 0);
        if (c->fused_proj) { /* Phi-3: the same (W, C) matrix under one name */
            ADD("self_attn.qkv_proj.weight", 2, W, C);
        } else {
            ADD("self_attn.q_proj.weight", 2, Q, C);
            ADD("self_attn.k_proj.weight", 2, KV, C);
            ADD("self_attn.v_proj.weight", 2, KV, C);
        }
        if (c->bias) { /* Qwen2: q/k/v biases, consecutive as the weights are (one fused product) */
            ADD("self_attn.q_proj.bias", 1, Q, 0);
            ADD("self_attn.k_proj.bias", 1, KV, 0);
            ADD("self_attn.v_proj.bias", 1, KV, 0);
        }
        ADD("self_attn.o_proj.weight", 2, C, Q);
        if (c->out_bias) ADD("self_attn.o_proj.bias", 1, C, 0);
        if (c->qk_norm) { /* Qwen3: one RMSNorm weight over a head's channels, for every q (k) head */
            ADD("self_attn.q_norm.weight", 1, HS, 0);
            ADD("self_attn.k_norm.weight", 1, HS, 0);
        }
        ADD("post_attention_layernorm.weight", 1, C, 0);
        if (c->fused_proj) {
            ADD("mlp.gate_up_proj.weight", 2, 2 * (int64_t)F, C);
        } else {
            ADD("mlp.gate_proj.weight", 2, F, C);
            ADD("mlp.up_proj.weight", 2, F, C);
        }
        if (c->mlp_bias) { /* consecutive as gate and up are: one fused (2F) bias */
            ADD("mlp.gate_proj.bias", 1, F, 0);
            ADD("mlp.up_proj.bias", 1, F, 0);
        }
        ADD("mlp.down_proj.weight", 2, C, F);
        if (c->mlp_bias) ADD("mlp.down_proj.bias", 1, C, 0);
#undef ADD
    }
    lf__add_param(t, &n, &off, "model.norm.weight", 1, C, 0, L + 1);
    if (!c->tie_embeddings) lf__add_param(t, &n, &off, "lm_head.weight", 2, lf__vp(c), C, L + 1);
    *out = t;
    *count = n;
    *total = off;
    return LF_OK;
}

/* An untied embedding is a lookup, no FLOPs; the tied one is also the head. */
static size_t llama_embedding_only(const lf_model_config *c) {
    return c->tie_embeddings ? 0 : (size_t)lf__vp(c) * (size_t)c->n_embd;
}

/* QK^T and AV: 2 * 2 * T * (NH*HS) per token and layer forward, x3 with backward. */
static double llama_attn_flops(const lf_model_config *c, int T) {
    return 12.0 * c->n_layer * (double)c->n_head * head_size(c) * T;
}

/* HF LlamaPreTrainedModel._init_weights: normal(0, initializer_range 0.02)
 * for every linear and the embedding, RMSNorm weights 1, biases 0. */
static void llama_init(const lf_model_config *c, const lf_param_info *t, int n, float *host, uint64_t seed) {
    (void)c;
    for (int i = 0; i < n; i++) {
        const lf_param_info *p = &t[i];
        float *w = host + p->offset;
        const size_t len = strlen(p->name);
        if (len > 5 && strcmp(p->name + len - 5, ".bias") == 0) {
            for (size_t j = 0; j < p->numel; j++) w[j] = 0.0f;
        } else if (p->ndim == 1) {
            for (size_t j = 0; j < p->numel; j++) w[j] = 1.0f;
        } else {
            for (size_t j = 0; j < p->numel; j++) w[j] = 0.02f * lf_rng_normal(seed, LF_RNG_INIT, p->offset + j);
        }
    }
}

/* max_position_embeddings for config.json: block_size, but for a RoPE type
 * that reads transformers' own value (dynamic; yarn without a factor). */
static int hf_max_positions(const lf_model_config *c) {
    const lf_rope_scaling *r = &c->rope;
    if (r->type == LF_ROPE_DYNAMIC || (r->type == LF_ROPE_YARN && r->factor == 0)) return r->max_position_embeddings;
    return c->block_size;
}

/* config.json: Qwen2ForCausalLM for q/k/v biases alone, else
 * LlamaForCausalLM (attention_bias = q/k/v/o biases, mlp_bias); the RoPE
 * scaling as transformers 4.x's rope_scaling (5.x reads it too); 0 for a
 * bias combination neither class has. */
static int llama_hf_config(const lf_model_config *c, char *buf, size_t cap) {
    char rope[512];
    lf__rope_hf_json(c, rope, sizeof rope);
    if (c->qk_norm && c->fused_proj) return 0;
    if (c->qk_norm) { /* Qwen3: attention_bias is all four biases or none, no MLP biases, no window */
        if (c->bias != c->out_bias || c->mlp_bias || c->sliding_window > 0) return 0;
        return snprintf(buf, cap,
                        "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"model_type\": \"qwen3\",\n"
                        "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                        "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
                        "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.9g,\n"
                        "  \"rope_theta\": %.9g,\n  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n"
                        "  \"hidden_act\": \"silu\",\n  \"attention_bias\": %s,\n  \"use_sliding_window\": false,\n"
                        "  \"sliding_window\": null,\n  \"max_window_layers\": %d,\n  \"attention_dropout\": %.9g,\n"
                        "  \"initializer_range\": 0.02,\n  \"use_cache\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
                        lf__vp(c), c->n_embd, c->ffn_hidden, c->n_layer, c->n_head, c->n_kv_head, head_size(c),
                        hf_max_positions(c), (double)c->norm_eps, (double)c->rope_theta, rope,
                        c->tie_embeddings ? "true" : "false", c->bias ? "true" : "false", c->n_layer,
                        (double)c->dropout);
    }
    /* Phi-3: no biases (validate), plain RoPE only (Phi3Config reads others as longrope); the token ids
     * null, not Phi3Config's defaults (pad 32000 lies outside a smaller vocabulary) */
    if (c->fused_proj) {
        if (c->rope.type != LF_ROPE_DEFAULT) return 0;
        char win[24] = "null";
        if (c->sliding_window > 0) snprintf(win, sizeof win, "%d", c->sliding_window);
        return snprintf(
            buf, cap,
            "{\n  \"architectures\": [\"Phi3ForCausalLM\"],\n  \"model_type\": \"phi3\",\n"
            "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
            "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n"
            "  \"original_max_position_embeddings\": %d,\n  \"sliding_window\": %s,\n"
            "  \"rms_norm_eps\": %.9g,\n  \"rope_theta\": %.9g,\n  \"rope_scaling\": null,\n"
            "  \"partial_rotary_factor\": 1.0,\n  \"tie_word_embeddings\": %s,\n  \"hidden_act\": \"silu\",\n"
            "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attention_dropout\": %.9g,\n"
            "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n  \"pad_token_id\": null,\n"
            "  \"initializer_range\": 0.02,\n  \"use_cache\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
            lf__vp(c), c->n_embd, c->ffn_hidden, c->n_layer, c->n_head, c->n_kv_head, head_size(c), hf_max_positions(c),
            hf_max_positions(c), win, (double)c->norm_eps, (double)c->rope_theta, c->tie_embeddings ? "true" : "false",
            (double)c->dropout);
    }
    if (c->sliding_window > 0 && (c->bias || c->mlp_bias)) return 0; /* a window and biases: no HF class here */
    if (c->sliding_window > 0) /* a window: Mistral's (LlamaForCausalLM has none; validate keeps block <= window) */
        return snprintf(buf, cap,
                        "{\n  \"architectures\": [\"MistralForCausalLM\"],\n  \"model_type\": \"mistral\",\n"
                        "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                        "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
                        "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n  \"sliding_window\": %d,\n"
                        "  \"rms_norm_eps\": %.9g,\n  \"rope_theta\": %.9g,\n  \"rope_scaling\": %s,\n"
                        "  \"tie_word_embeddings\": %s,\n"
                        "  \"hidden_act\": \"silu\",\n  \"attention_dropout\": %.9g,\n  \"initializer_range\": 0.02,\n"
                        "  \"use_cache\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
                        lf__vp(c), c->n_embd, c->ffn_hidden, c->n_layer, c->n_head, c->n_kv_head, head_size(c),
                        hf_max_positions(c), c->sliding_window, (double)c->norm_eps, (double)c->rope_theta, rope,
                        c->tie_embeddings ? "true" : "false", (double)c->dropout);
    if (c->bias && !c->out_bias) { /* q/k/v biases only: Qwen2 */
        if (c->mlp_bias) return 0;
        return snprintf(buf, cap,
                        "{\n  \"architectures\": [\"Qwen2ForCausalLM\"],\n  \"model_type\": \"qwen2\",\n"
                        "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                        "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
                        "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.9g,\n"
                        "  \"rope_theta\": %.9g,\n  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n"
                        "  \"hidden_act\": \"silu\",\n  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
                        "  \"max_window_layers\": %d,\n  \"attention_dropout\": %.9g,\n  \"initializer_range\": 0.02,\n"
                        "  \"use_cache\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
                        lf__vp(c), c->n_embd, c->ffn_hidden, c->n_layer, c->n_head, c->n_kv_head, head_size(c),
                        hf_max_positions(c), (double)c->norm_eps, (double)c->rope_theta, rope,
                        c->tie_embeddings ? "true" : "false", c->n_layer, (double)c->dropout);
    }
    return snprintf(buf, cap,
                    "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                    "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                    "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
                    "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.9g,\n"
                    "  \"rope_theta\": %.9g,\n  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n"
                    "  \"hidden_act\": \"silu\",\n  \"attention_bias\": %s,\n  \"mlp_bias\": %s,\n"
                    "  \"attention_dropout\": %.9g,\n  \"initializer_range\": 0.02,\n  \"use_cache\": true,\n"
                    "  \"torch_dtype\": \"float32\"\n}\n",
                    lf__vp(c), c->n_embd, c->ffn_hidden, c->n_layer, c->n_head, c->n_kv_head, head_size(c),
                    hf_max_positions(c), (double)c->norm_eps, (double)c->rope_theta, rope,
                    c->tie_embeddings ? "true" : "false", c->bias ? "true" : "false", c->mlp_bias ? "true" : "false",
                    (double)c->dropout);
}

/* ---------------------------------------------------------------- activation slots */

/* Per layer and token, under none: 5C + W + 3F + NH*T + 2 floats (W the qkv
 * width); selective drops h1, h2 and sw (2C + F); full keeps only res3. */
static void llama_lay_out(const lf__plan_spec *s, void *acts, lf__planner *p) {
    const lf_model_config *c = s->cfg;
    const size_t N = (size_t)s->rB * s->T, C = (size_t)c->n_embd, NH = (size_t)c->n_head;
    const size_t W = (size_t)qkv_width(c), F = (size_t)c->ffn_hidden, Q = (size_t)q_width(c);
    const size_t CQ = C > Q ? C : Q; /* oproj also holds the fp32 attention output */
    (void)NH;
    const size_t att = s->att_saved;                     /* what the backend's attention saves (backend_impl.h) */
    const size_t A = lf__act_size(s->dt);                /* bytes per element of a matmul input */
    const int keep_outputs = s->rc == LF_RECOMPUTE_NONE; /* norm and SwiGLU outputs */
    const int keep_block = s->rc != LF_RECOMPUTE_FULL;   /* everything else a block's backward reads */
    llama_acts dummy = {0};
    llama_acts *x = acts ? acts : &dummy;

    layer_acts w = {0}; /* the working set: what no layer keeps */
    w.oproj = lf__slot(p, LF__CAT_WORK, N * CQ);
    if (!keep_outputs) {
        w.h1 = lf__slot_bytes(p, LF__CAT_WORK, N * C * A);
        /* selective recomputes h2, then h1, one after the other: one buffer;
         * full recomputes the block at once: two */
        w.h2 = keep_block ? w.h1 : lf__slot_bytes(p, LF__CAT_WORK, N * C * A);
        w.sw = lf__slot_bytes(p, LF__CAT_WORK, N * F * A);
    }
    const size_t HQK = c->qk_norm ? (size_t)(c->n_head + c->n_kv_head) : 0; /* q/k-norm statistics per row */
    if (!keep_block) {
        w.rstd1 = lf__slot(p, LF__CAT_WORK, N);
        w.qkv = lf__slot(p, LF__CAT_WORK, N * W);
        if (HQK) {
            w.qkr = lf__slot(p, LF__CAT_WORK, N * W);
            w.rstdq = lf__slot(p, LF__CAT_WORK, N * HQK);
        }
        w.att = lf__slot(p, LF__CAT_WORK, att);
        w.atty = lf__slot_bytes(p, LF__CAT_WORK, N * Q * A);
        w.res2 = lf__slot(p, LF__CAT_WORK, N * C);
        w.rstd2 = lf__slot(p, LF__CAT_WORK, N);
        w.gu = lf__slot(p, LF__CAT_WORK, N * 2 * F);
    }

    x->encoded = lf__slot(p, LF__CAT_SAVED, N * C);
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts la_dummy;
        layer_acts *a = x->la ? &x->la[l] : &la_dummy;
        *a = w;
        if (keep_block) {
            a->rstd1 = lf__slot(p, LF__CAT_SAVED, N);
            a->qkv = lf__slot(p, LF__CAT_SAVED, N * W);
            if (HQK) {
                a->qkr = lf__slot(p, LF__CAT_SAVED, N * W);
                a->rstdq = lf__slot(p, LF__CAT_SAVED, N * HQK);
            }
            a->att = lf__slot(p, LF__CAT_SAVED, att);
            a->atty = lf__slot_bytes(p, LF__CAT_SAVED, N * Q * A);
            a->res2 = lf__slot(p, LF__CAT_SAVED, N * C);
            a->rstd2 = lf__slot(p, LF__CAT_SAVED, N);
            a->gu = lf__slot(p, LF__CAT_SAVED, N * 2 * F);
        }
        if (keep_outputs) {
            a->h1 = lf__slot_bytes(p, LF__CAT_SAVED, N * C * A);
            a->h2 = lf__slot_bytes(p, LF__CAT_SAVED, N * C * A);
            a->sw = lf__slot_bytes(p, LF__CAT_SAVED, N * F * A);
        }
        a->res3 = lf__slot(p, LF__CAT_SAVED, N * C); /* the next block's input: kept by every policy */
    }
    x->hf = lf__slot_bytes(p, LF__CAT_SAVED, N * C * A);
    x->rstdf = lf__slot(p, LF__CAT_SAVED, N);
    if (s->infer) return; /* a session: forward only */
    x->att_scratch = lf__slot(p, LF__CAT_WORK, s->att_scratch);
    x->dresidual = lf__slot(p, LF__CAT_WORK, N * C);
    x->dln = lf__slot(p, LF__CAT_WORK, N * C);
    x->datty = lf__slot(p, LF__CAT_WORK, N * Q);
    x->dqkv = lf__slot(p, LF__CAT_WORK, N * W);
    x->dgu = lf__slot(p, LF__CAT_WORK, N * 2 * F);
    x->dsw = lf__slot(p, LF__CAT_WORK, N * F);
}

/* ---------------------------------------------------------------- compute */

#define PW(idx) lf__param_at(m, idx)
#define GR(idx) lf__grad_at(m, rp, idx)

enum { SITE_ATT = 0 };

static const float *block_input(const llama_acts *x, int l) { return l == 0 ? x->encoded : x->la[l - 1].res3; }

static void swiglu_forward(const lf_model *m, act *out, const float *inp, int N, int F) {
    m->be->ops->swiglu_forward(m->be, out, m->plan_dt == LF_ACT_BF16 ? LF_DT_BF16 : LF_DT_F32, inp, N, F);
}

/* Forward of block l; whole = 0 stops after SwiGLU (full recomputation). */
static void block_forward(lf_model *m, lf__replica *rp, int l, int T, int whole) {
    lf_backend *be = m->be;
    llama_acts *x = ACTS(rp);
    const lf_model_config *c = &m->cfg;
    const int B = rp->B, C = c->n_embd, NH = c->n_head;
    const int W = qkv_width(c), F = c->ffn_hidden, N = B * T, Q = q_width(c);
    const size_t NC = (size_t)N * C;
    layer_acts *a = &x->la[l];
    const int *ix = lf__layer_ix(m, l);
    const float *residual = block_input(x, l);
    lf__rms_forward(m, a->h1, a->rstd1, residual, PW(ix[P_IN_NORM]), N, C, c->norm_eps);
    /* q, k, v are consecutive: one (W, C) product */
    if (c->qk_norm) { /* Qwen3: each q and k head RMS-normalised before RoPE */
        lf__mm_forward(m, a->qkr, a->h1, PW(qkv_ix(ix)), PW(ix[P_QB]), N, C, W, LF_W_OUT_IN);
        if (!be->ops->qknorm_forward) {
            lf__backend_fail(be, LF_ERR_UNSUPPORTED,
                             "backend '%s' has no q/k RMSNorm op (qknorm_forward), which Qwen3's q_norm/k_norm "
                             "need",
                             be->ops->name);
            return;
        }
        be->ops->qknorm_forward(be, a->qkv, a->rstdq, a->qkr, PW(ix[P_QNORM]), PW(ix[P_KNORM]), N, NH, c->n_kv_head,
                                head_size(c), c->norm_eps);
    } else {
        lf__mm_forward(m, a->qkv, a->h1, PW(qkv_ix(ix)), PW(ix[P_QB]), N, C, W, LF_W_OUT_IN);
    }
    lf__rope(m, rp, a->qkv, T);
    lf__attention_act(m, rp, l, a->atty, a->oproj, a->att, a->qkv, T,
                      lf__drop_at(m, rp, l, SITE_ATT, (uint64_t)NH * T * T));
    lf__mm_forward(m, a->oproj, a->atty, PW(ix[P_O]), PW(ix[P_OB]), N, Q, C, LF_W_OUT_IN);
    /* res2 = residual + oproj and post_attention_layernorm in one pass (the
     * second residual add is unfused: see gpt2.c's block_forward) */
    lf__res_rms_forward(m, a->res2, a->h2, a->rstd2, residual, a->oproj, PW(ix[P_POST_NORM]), N, C, c->norm_eps);
    /* gate and up are consecutive: one (2F, C) product */
    lf__mm_forward(m, a->gu, a->h2, PW(gate_up_ix(ix)), PW(ix[P_GATEB]), N, C, 2 * F, LF_W_OUT_IN);
    swiglu_forward(m, a->sw, a->gu, N, F);
    if (!whole) return;
    lf__mm_forward(m, a->oproj, a->sw, PW(ix[P_DOWN]), PW(ix[P_DOWNB]), N, F, C, LF_W_OUT_IN);
    be->ops->residual_forward(be, a->res3, a->res2, a->oproj, NC);
}

static void llama_block_forward(lf_model *m, lf__replica *rp, int l, int T) { block_forward(m, rp, l, T, 1); }

static void embed_forward(lf_model *m, lf__replica *rp, int T) {
    llama_acts *x = ACTS(rp);
    m->be->ops->encoder_forward(m->be, x->encoded, rp->inputs, PW(lf__model_ix(m, G_EMB)), NULL, rp->B, T,
                                m->cfg.n_embd);
}

static void head_forward(lf_model *m, lf__replica *rp, int T, int with_targets) {
    llama_acts *x = ACTS(rp);
    const lf_model_config *c = &m->cfg;
    const int C = c->n_embd;
    float *last = (float *)block_input(x, c->n_layer);
    const int N = lf__head_rows(m, last, rp->B * T, C); /* a ragged forward: each run's last row only */
    lf__rms_forward(m, x->hf, x->rstdf, last, PW(lf__model_ix(m, G_NORM)), N, C, c->norm_eps);
    lf__mm_forward(m, rp->logits, x->hf, PW(head_ix(m)), NULL, N, C, lf__vp(c), LF_W_OUT_IN);
    lf__classifier(m, rp, N, with_targets);
}

/* lm_head (or the tied embedding) and the final norm. */
static void head_backward(lf_model *m, lf__replica *rp, int T) {
    lf_backend *be = m->be;
    llama_acts *x = ACTS(rp);
    const lf_model_config *c = &m->cfg;
    const int C = c->n_embd, N = rp->B * T;
    be->ops->zero(be, x->dresidual, (size_t)N * C);
    lf__mm_backward(m, x->dln, GR(head_ix(m)), NULL, rp->logits, x->hf, PW(head_ix(m)), N, C, lf__vp(c), LF_W_OUT_IN);
    be->ops->rmsnorm_backward(be, x->dresidual, GR(lf__model_ix(m, G_NORM)), x->dln, block_input(x, c->n_layer),
                              PW(lf__model_ix(m, G_NORM)), x->rstdf, N, C);
}

/* Block l: on entry x->dresidual is d(block output), on exit d(block input). */
static void block_backward(lf_model *m, lf__replica *rp, int l, int T) {
    lf_backend *be = m->be;
    llama_acts *x = ACTS(rp);
    const lf_model_config *c = &m->cfg;
    const int B = rp->B, C = c->n_embd, NH = c->n_head, NKV = c->n_kv_head;
    const int W = qkv_width(c), F = c->ffn_hidden, N = B * T, L = c->n_layer, Q = q_width(c);
    layer_acts *a = &x->la[l];
    const int *ix = lf__layer_ix(m, l);
    const float *residual = block_input(x, l);
    /* Recompute what the plan did not keep, each right before it is read.
     * full: the working set still holds the last block from forward. */
    if (m->plan_rc == LF_RECOMPUTE_FULL && l < L - 1) block_forward(m, rp, l, T, 0);
    if (m->plan_rc == LF_RECOMPUTE_SELECTIVE) {
        lf__rms_forward(m, a->h2, a->rstd2, a->res2, PW(ix[P_POST_NORM]), N, C, c->norm_eps);
        swiglu_forward(m, a->sw, a->gu, N, F);
    }
    /* dresidual = d(res3); res3 = res2 + down(swiglu(gate_up(h2))) */
    lf__mm_backward(m, x->dsw, GR(ix[P_DOWN]), GR(ix[P_DOWNB]), x->dresidual, a->sw, PW(ix[P_DOWN]), N, F, C,
                    LF_W_OUT_IN);
    be->ops->swiglu_backward(be, x->dgu, a->gu, x->dsw, N, F);
    lf__mm_backward(m, x->dln, GR(gate_up_ix(ix)), GR(ix[P_GATEB]), x->dgu, a->h2, PW(gate_up_ix(ix)), N, C, 2 * F,
                    LF_W_OUT_IN);
    be->ops->rmsnorm_backward(be, x->dresidual, GR(ix[P_POST_NORM]), x->dln, a->res2, PW(ix[P_POST_NORM]), a->rstd2, N,
                              C);
    /* dresidual = d(res2); res2 = residual + o(attention(rope(qkv(h1)))) */
    lf__mm_backward(m, x->datty, GR(ix[P_O]), GR(ix[P_OB]), x->dresidual, a->atty, PW(ix[P_O]), N, Q, C, LF_W_OUT_IN);
    lf__attention_backward(m, rp, x->dqkv, x->att_scratch, x->datty, a->qkv, a->att, T, Q, NH, NKV,
                           lf__drop_at(m, rp, l, SITE_ATT, (uint64_t)NH * T * T));
    lf__rope_backward(m, rp, x->dqkv, T);
    if (c->qk_norm && be->ops->qknorm_backward) /* d(normalised q, k) -> d(projection output), in place */
        be->ops->qknorm_backward(be, x->dqkv, GR(ix[P_QNORM]), GR(ix[P_KNORM]), a->qkr, PW(ix[P_QNORM]),
                                 PW(ix[P_KNORM]), a->rstdq, N, NH, NKV, head_size(c));
    if (m->plan_rc == LF_RECOMPUTE_SELECTIVE) /* h1 shares h2's buffer */
        lf__rms_forward(m, a->h1, a->rstd1, residual, PW(ix[P_IN_NORM]), N, C, c->norm_eps);
    lf__mm_backward(m, x->dln, GR(qkv_ix(ix)), GR(ix[P_QB]), x->dqkv, a->h1, PW(qkv_ix(ix)), N, C, W, LF_W_OUT_IN);
    be->ops->rmsnorm_backward(be, x->dresidual, GR(ix[P_IN_NORM]), x->dln, residual, PW(ix[P_IN_NORM]), a->rstd1, N, C);
}

static void embed_backward(lf_model *m, lf__replica *rp, int T) {
    llama_acts *x = ACTS(rp);
    m->be->ops->encoder_backward(m->be, GR(lf__model_ix(m, G_EMB)), NULL, x->dresidual, rp->inputs, rp->B, T,
                                 m->cfg.n_embd);
}

/* ---------------------------------------------------------------- configuration, Hugging Face, presets */

/* No biases unless model.bias asks for Qwen2's q/k/v ones. */
static const char *llama_given(lf_model_config *c, unsigned given, const char **key) {
    (void)key;
    if (!(given & LF_MODEL_GIVEN_BIAS)) c->bias = 0;
    return NULL;
}

/* transformers' LlamaConfig / MistralConfig / Qwen2Config keys, in reading
 * order (then lf__hf_rope and llama_hf_check). */
#define F(f) offsetof(lf_model_config, f)
static const lf__hf_key k_hf_keys[] = {
    {"hidden_size", F(n_embd), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"num_hidden_layers", F(n_layer), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"num_attention_heads", F(n_head), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"num_key_value_heads", F(n_kv_head), LF__HF_INT, 0, 0, F(n_head)},
    {"intermediate_size", F(ffn_hidden), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"vocab_size", F(vocab_size), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"max_position_embeddings", F(block_size), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"rms_norm_eps", F(norm_eps), LF__HF_NUM, 0, 1e-6, LF__HF_NO_FIELD},
};
#undef F

static const char *const k_hf_types[] = {"llama", "mistral", "qwen2", "qwen3", "phi3", NULL};
enum { HF_LLAMA, HF_MISTRAL, HF_QWEN2, HF_QWEN3, HF_PHI3 }; /* k_hf_types order */

#define TRY(expr) \
    do { \
        lf_status s_ = (expr); \
        if (s_ != LF_OK) return s_; \
    } while (0)

/* Phi-3's keys beyond Llama's: its dropouts (llmforge's llama has attention
 * dropout only) and its RoPE (Phi3Config reads "su" and "yarn" as longrope,
 * and accepts only default and longrope). */
static lf_status hf_phi3(const lf__hf_cfg *c, const lf_model_config *m) {
    TRY(lf__hf_zero(c, "resid_pdrop", "llmforge's llama has attention dropout only (set it to 0.0)"));
    TRY(lf__hf_zero(c, "embd_pdrop", "llmforge's llama has attention dropout only (set it to 0.0)"));
    if (m->rope.type != LF_ROPE_DEFAULT)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: RoPE type '%s': Phi3ForCausalLM reads it as 'longrope' (Phi-3's 128k variants), which "
                       "llmforge does not implement",
                       lf__hf_where(c), lf__rope_type_name(m->rope.type));
    return LF_OK;
}

/* The variants' own keys: Llama's bias flags (Qwen2: q/k/v biases always,
 * Mistral: none), head_dim, the sliding windows, and what llmforge's llama
 * does not implement. */
static lf_status hf_variant(const lf__hf_cfg *c, int kind, lf_model_config *m) {
    const char *where = lf__hf_where(c);
    if (kind == HF_LLAMA || kind == HF_QWEN3) { /* LlamaConfig's and Qwen3Config's flags */
        int ab = 0, mb = 0;
        TRY(lf__hf_bool(c, "attention_bias", 0, &ab));
        m->bias = m->out_bias = ab; /* q/k/v and o_proj biases */
        if (kind == HF_LLAMA) TRY(lf__hf_bool(c, "mlp_bias", 0, &mb));
        m->mlp_bias = mb;
    }
    if (kind == HF_MISTRAL || kind == HF_QWEN3 || kind == HF_PHI3) { /* classes without such biases */
        static const char *const flags[] = {"attention_bias", "mlp_bias"};
        static const char *const cls[] =
            {[HF_MISTRAL] = "MistralForCausalLM", [HF_QWEN3] = "Qwen3ForCausalLM", [HF_PHI3] = "Phi3ForCausalLM"};
        for (int i = kind == HF_QWEN3 ? 1 : 0; i < 2; i++) {
            int on = 0;
            TRY(lf__hf_bool(c, flags[i], 0, &on));
            if (on)
                return lf_fail(LF_ERR_UNSUPPORTED,
                               "%s: '%s' is true, but %s has no such biases (transformers ignores the key); remove "
                               "it or set model_type \"llama\"",
                               where, flags[i], cls[kind]);
        }
    }
    int head_dim = 0;
    TRY(lf__hf_int(c, "head_dim", 0, kind == HF_QWEN3 ? 128 : 0, &head_dim)); /* Qwen3Config's default: 128 */
    if (head_dim == 0 && m->n_embd % m->n_head != 0)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: 'hidden_size' %d is not divisible by 'num_attention_heads' %d (and no 'head_dim')", where,
                       m->n_embd, m->n_head);
    if (head_dim % 2 != 0)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'head_dim' %d is odd (RoPE rotates pairs of channels)", where,
                       head_dim);
    if (head_dim > 1024)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'head_dim' %d is above llmforge's limit of 1024", where, head_dim);
    /* kept only when it differs from the default, so the config stays the same */
    m->head_dim = head_dim && (m->n_embd % m->n_head != 0 || head_dim != m->n_embd / m->n_head) ? head_dim : 0;
    if (m->n_head % m->n_kv_head != 0)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'num_attention_heads' %d is not divisible by 'num_key_value_heads' %d",
                       where, m->n_head, m->n_kv_head);
    if (kind == HF_QWEN2 || kind == HF_QWEN3) {
        int use = 0;
        TRY(lf__hf_bool(c, "use_sliding_window", 0, &use));
        if (use)
            return lf_fail(LF_ERR_UNSUPPORTED,
                           "%s: 'use_sliding_window' is true; llmforge attends to the whole context", where);
    }
    if (kind == HF_QWEN3) /* with use_sliding_window false transformers writes every layer full */
        TRY(lf__hf_all_str(c, "layer_types", "full_attention",
                           "llmforge implements \"full_attention\" layers only (no sliding-window layers)"));
    if (kind == HF_PHI3) TRY(hf_phi3(c, m));
    return LF_OK;
}

static lf_status llama_hf_check(const lf__hf_cfg *c, int kind, lf_model_config *m) {
    m->norm = LF_NORM_RMSNORM;
    m->bias = kind == HF_QWEN2; /* Qwen2: q/k/v biases, always */
    m->qk_norm = kind == HF_QWEN3;
    m->fused_proj = kind == HF_PHI3;
    TRY(lf__hf_rope(c, m));
    TRY(lf__hf_bool(c, "tie_word_embeddings", 0, &m->tie_embeddings));
    /* Mistral's window (null or absent: none): lf_model_config_validate
     * refuses a block_size beyond it, whatever sets the block size */
    if (kind == HF_MISTRAL || kind == HF_PHI3) TRY(lf__hf_int(c, "sliding_window", 0, 0, &m->sliding_window));
    const char *fn = NULL;
    TRY(lf__hf_str(c, "hidden_act", "silu", &fn));
    if (strcmp(fn, "silu") != 0)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'hidden_act' is '%.100s'; llmforge's llama MLP uses silu only",
                       lf__hf_where(c), fn);
    return hf_variant(c, kind, m);
}
#undef TRY

/* RoPE's cached inv_freq is a buffer some checkpoints carry, not a weight. */
static const struct lf__hf_ignore k_hf_ignored[] = {{"rotary_emb.inv_freq", 0}, {NULL, 0}};
/* Kin of the family that it does not implement, and what each needs. */
#define GEMMA_NEEDS \
    "the embedding scaled by sqrt(hidden_size), RMSNorm with (1 + weight), a gelu_pytorch_tanh (GeGLU) MLP"
#define GEMMA23_NEEDS \
    GEMMA_NEEDS ", pre- and post-norms around attention and MLP, attention and final logit soft-capping, " \
                "query_pre_attn_scalar and alternating sliding-window layers"
static const struct lf__hf_refused k_hf_refused[] = {
    {"gemma", "Gemma needs " GEMMA_NEEDS ", which llmforge's llama family lacks"},
    {"gemma2", "Gemma 2 needs " GEMMA23_NEEDS ", which llmforge's llama family lacks"},
    {"gemma3", "Gemma 3 needs " GEMMA23_NEEDS ", a per-layer RoPE base and vision weights, which llmforge lacks"},
    {"gemma3_text", "Gemma 3 needs " GEMMA23_NEEDS " and a per-layer RoPE base, which llmforge's llama family lacks"},
    {"phi", "Phi-1/Phi-2 (PhiForCausalLM) need LayerNorm with biases, a parallel attention/MLP block and partial "
            "rotary embeddings, which llmforge's llama family lacks"},
    {"mixtral", "Mixtral's mixture-of-experts MLP is not in llmforge's llama family"},
    {"qwen2_moe", "Qwen2-MoE's mixture-of-experts MLP is not in llmforge's llama family"},
    {"qwen3_moe", "Qwen3-MoE's mixture-of-experts MLP is not in llmforge's llama family"},
    {NULL, NULL},
};
#undef GEMMA23_NEEDS
#undef GEMMA_NEEDS

static const lf__hf_family k_hf = {
    .model_types = k_hf_types,
    .keys = k_hf_keys,
    .n_keys = (int)(sizeof k_hf_keys / sizeof k_hf_keys[0]),
    .check = llama_hf_check,
    .ignored = k_hf_ignored,
    .refused = k_hf_refused,
};

static const lf__preset k_presets[] = {
    {"smollm-135m",
     "HuggingFaceTB/SmolLM-135M's shape (Llama: 9 heads, 3 KV heads, tied)",
     {.n_layer = 30,
      .n_head = 9,
      .n_kv_head = 3,
      .n_embd = 576,
      .ffn_hidden = 1536,
      .block_size = 2048,
      .vocab_size = 49152,
      .norm_eps = 1e-5f,
      .rope_theta = 10000.0f,
      .tie_embeddings = 1}},
    {"llama-3.2-1b",
     "meta-llama/Llama-3.2-1B's shape (GQA 32/8, tied; its rope_scaling is not applied)",
     {.n_layer = 16,
      .n_head = 32,
      .n_kv_head = 8,
      .n_embd = 2048,
      .ffn_hidden = 8192,
      .block_size = 131072,
      .vocab_size = 128256,
      .norm_eps = 1e-5f,
      .rope_theta = 500000.0f,
      .tie_embeddings = 1}},
};

const lf__model_arch lf__arch_llama = {
    .name = "llama",
    .resolve = llama_resolve,
    .given = llama_given,
    .validate = llama_validate,
    .param_table = llama_param_table,
    .embedding_only = llama_embedding_only,
    .attn_flops_per_token = llama_attn_flops,
    .init_weights = llama_init,
    .hf_config_json = llama_hf_config,
    .hf = &k_hf,
    .fixed_context = 0, /* RoPE: any block_size */
    .presets = k_presets,
    .n_presets = (int)(sizeof k_presets / sizeof k_presets[0]),
    .bf16_acts = 1,
    .model_params = k_model_params,
    .n_model_params = G_N,
    .layer_fmt = "model.layers.%d.",
    .layer_params = k_layer_params,
    .n_layer_params = P_PER_LAYER,
    .acts_size = sizeof(llama_acts),
    .layer_size = sizeof(layer_acts),
    .lay_out_replica = llama_lay_out,
    .embed_forward = embed_forward,
    .block_forward = llama_block_forward,
    .head_forward = head_forward,
    .head_backward = head_backward,
    .block_backward = block_backward,
    .embed_backward = embed_backward,
};
