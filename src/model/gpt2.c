/*
 * GPT-2 (nanoGPT's architecture): token + position embeddings, L pre-LN
 * blocks (ln_1 -> causal self-attention -> residual, ln_2 -> MLP with GELU
 * -> residual), ln_f, lm_head tied to wte. Dropout as nanoGPT places it: on
 * the embedding sum, on the attention probabilities, and on each residual
 * branch output.
 *
 * One architecture table (lf__arch_gpt2, model_impl.h) of the model
 * runtime (model.c): parameter table, init, activation slots, compute.
 *
 * Invariants:
 *  - Activation gradients are shared by all layers: one residual-stream gradient that layernorm
 *    backwards add into, and per-op buffers their single producer
 *    overwrites (see backend_impl.h), so backward zeroes only N*C floats.
 *  - The fused classifier writes dlogits over the logits during forward when
 *    opts->dloss > 0, so the logits of a training forward are not kept.
 *  - Dropout masks are keyed by (opts->seed, lf_rng_mix(opts->key, site)), so
 *    backward regenerates them and a resumed run draws the same masks.
 *  - Activation recomputation (lf_recompute) only changes where a layer's
 *    tensors live: a tensor the policy does not keep points into the
 *    replica's working set, which every layer shares, and backward writes it
 *    again with the same op on the same input (and the same dropout keys)
 *    right before reading it. Ops are deterministic for a given shape, and
 *    every slot is LF_ALIGN-aligned, so the recomputed values are the
 *    forward's bit for bit and every policy gives the same gradients.
 *  - The residual-branch outputs (attproj, fcproj) are dead once added to the
 *    stream (backward reads neither), so under every policy they share one
 *    working buffer.
 *  - Activation storage (lf_act_dtype): the tensors whose only readers are
 *    matmuls, as their `inp` (ln1, atty, ln2, fch_gelu, lnf: the `act`
 *    pointers below), are fp32 or bf16 for the whole plan (plan_dt). bf16
 *    needs a backend whose act_dtypes has it (backend_impl.h): its ops round
 *    exactly as its products round their operands, so both storages give
 *    the same bits.
 *    The attention output is written in fp32 into the attproj buffer (free
 *    until c_proj overwrites it) and cast from there.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model_impl.h"

/* Indices of one block's tensors in the parameter table (bias ones are -1
 * when the model has no biases). */
enum {
    P_LN1_W,
    P_LN1_B,
    P_ATTN_W,
    P_ATTN_B,
    P_APROJ_W,
    P_APROJ_B,
    P_LN2_W,
    P_LN2_B,
    P_FC_W,
    P_FC_B,
    P_MPROJ_W,
    P_MPROJ_B,
    P_PER_LAYER
};

/* A matmul-input activation: float or uint16_t (bf16 bits) as plan_dt says. */
typedef void act;

typedef struct layer_acts {
    act *ln1;                   /* (N,C) */
    float *ln1_mean, *ln1_rstd; /* (N), (N) */
    float *qkv;                 /* (N,3C) */
    act *atty;                  /* (N,C) attention output before c_proj */
    float *att;                 /* what attention saves (the CPU: (B,NH,T,T) probabilities) */
    float *attproj;             /* (N,C) c_proj output (after dropout); working set */
    float *res2;                /* (N,C) residual after attention */
    act *ln2;                   /* (N,C) */
    float *ln2_mean, *ln2_rstd;
    float *fch;    /* (N,4C) GELU input */
    act *fch_gelu; /* (N,4C) */
    float *fcproj; /* (N,C) after dropout; working set */
    float *res3;   /* (N,C) block output */
} layer_acts;

/* One replica's activations (the runtime's lf__replica.acts). */
typedef struct gpt2_acts {
    layer_acts *la; /* n_layer entries */
    float *encoded; /* (N,C) embeddings (after dropout) */
    act *lnf;       /* (N,C) */
    float *lnf_mean, *lnf_rstd;
    float *att_scratch; /* attention_backward's scratch (s->att_scratch) */
    /* Activation gradients, shared by all layers (backward visits one layer
     * at a time). dresidual is the residual stream's gradient: layernorm
     * backwards add into it, so it carries d(block output) into d(block
     * input) through the whole stack (llm.c's scheme). The others are
     * overwritten by their single producer. */
    float *dresidual;        /* (N,C) */
    float *dbranch;          /* (N,C) residual-branch grad through dropout */
    float *dln;              /* (N,C) grad of a layernorm output */
    float *datty;            /* (N,C) */
    float *dqkv;             /* (N,3C) */
    float *dfch, *dfch_gelu; /* (N,4C) */
} gpt2_acts;

/* The tensors outside the layers (model_params order), and one layer's
 * (layer_params order, P_* above). */
enum { G_WTE, G_WPE, G_LNF_W, G_LNF_B, G_N };
static const char *const k_model_params[G_N] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
static const char *const k_layer_params[P_PER_LAYER] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                                                        "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                                        "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                                                        "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

static gpt2_acts *ACTS(const lf__replica *rp) { return rp->acts; }

/* ---------------------------------------------------------------- config and table */

static void gpt2_resolve(lf_model_config *c) {
    if (c->n_kv_head == 0) c->n_kv_head = c->n_head;
    if (c->ffn_hidden == 0) c->ffn_hidden = 4 * c->n_embd;
    c->norm = LF_NORM_LAYERNORM;
    if (c->norm_eps == 0.0f) c->norm_eps = 1e-5f;
    c->tie_embeddings = 1;
}

static lf_status gpt2_validate(const lf_model_config *c) {
    if (c->n_kv_head != c->n_head)
        return lf_fail(LF_ERR_CONFIG,
                       "model.n_kv_head %d: gpt2 has one key/value head per query head (%d); "
                       "grouped-query attention is model.arch llama",
                       c->n_kv_head, c->n_head);
    if (c->ffn_hidden != 4 * c->n_embd)
        return lf_fail(LF_ERR_CONFIG, "model.ffn_hidden %d: gpt2's MLP is 4 * n_embd = %d wide", c->ffn_hidden,
                       4 * c->n_embd);
    if (c->norm_eps != 1e-5f)
        return lf_fail(LF_ERR_CONFIG, "model.norm_eps %g: gpt2's layernorm uses 1e-5", (double)c->norm_eps);
    if (c->rope_theta != 0.0f) return lf_fail(LF_ERR_CONFIG, "model.rope_theta: gpt2 has learned positions, no RoPE");
    if (c->head_dim != 0 || c->out_bias || c->mlp_bias || c->qk_norm || c->fused_proj ||
        c->rope.type != LF_ROPE_DEFAULT)
        return lf_fail(LF_ERR_CONFIG,
                       "gpt2 has no head_dim, o_proj/MLP bias flags, q/k norms, fused names or RoPE scaling (llama's)");
    return LF_OK;
}

static lf_status gpt2_param_table(const lf_model_config *c, lf_param_info **out, int *count, size_t *total) {
    *out = NULL;
    int L = c->n_layer, C = c->n_embd;
    int cap = 2 + L * P_PER_LAYER + 2;
    lf_param_info *t = lf_calloc(sizeof *t * (size_t)cap);
    if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory for the parameter table");
    int n = 0;
    size_t off = 0;
    char name[LF_PARAM_NAME_MAX];
    lf__add_param(t, &n, &off, "wte.weight", 2, lf__vp(c), C, 0);
    lf__add_param(t, &n, &off, "wpe.weight", 2, c->block_size, C, 0);
    for (int l = 0; l < L; l++) {
#define ADD(suffix, nd, a, b) \
    do { \
        snprintf(name, sizeof name, "h.%d.%s", l, suffix); \
        lf__add_param(t, &n, &off, name, nd, a, b, 1 + l); \
    } while (0)
        ADD("ln_1.weight", 1, C, 0);
        if (c->bias) ADD("ln_1.bias", 1, C, 0);
        ADD("attn.c_attn.weight", 2, C, 3 * C);
        if (c->bias) ADD("attn.c_attn.bias", 1, 3 * C, 0);
        ADD("attn.c_proj.weight", 2, C, C);
        if (c->bias) ADD("attn.c_proj.bias", 1, C, 0);
        ADD("ln_2.weight", 1, C, 0);
        if (c->bias) ADD("ln_2.bias", 1, C, 0);
        ADD("mlp.c_fc.weight", 2, C, 4 * C);
        if (c->bias) ADD("mlp.c_fc.bias", 1, 4 * C, 0);
        ADD("mlp.c_proj.weight", 2, 4 * C, C);
        if (c->bias) ADD("mlp.c_proj.bias", 1, C, 0);
#undef ADD
    }
    lf__add_param(t, &n, &off, "ln_f.weight", 1, C, 0, L + 1);
    if (c->bias) lf__add_param(t, &n, &off, "ln_f.bias", 1, C, 0, L + 1);
    *out = t;
    *count = n;
    *total = off;
    return LF_OK;
}

/* wpe does not count in 6N (nanoGPT's get_num_params). */
static size_t gpt2_embedding_only(const lf_model_config *c) { return (size_t)c->block_size * (size_t)c->n_embd; }

static double gpt2_attn_flops(const lf_model_config *c, int T) { return 12.0 * c->n_layer * (double)c->n_embd * T; }

static void gpt2_init(const lf_model_config *c, const lf_param_info *t, int n, float *host, uint64_t seed) {
    float proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
    for (int i = 0; i < n; i++) {
        const lf_param_info *p = &t[i];
        float *w = host + p->offset;
        const char *nm = p->name;
        size_t len = strlen(nm);
        int is_bias = len > 5 && strcmp(nm + len - 5, ".bias") == 0;
        int is_ln = strstr(nm, "ln_") != NULL;
        if (is_bias) {
            memset(w, 0, p->numel * sizeof(float));
        } else if (is_ln) {
            for (size_t j = 0; j < p->numel; j++) w[j] = 1.0f;
        } else {
            float std = strstr(nm, "c_proj.weight") ? proj_std : 0.02f;
            for (size_t j = 0; j < p->numel; j++) w[j] = std * lf_rng_normal(seed, LF_RNG_INIT, p->offset + j);
        }
    }
}

/* Hugging Face's GPT2Config for this model; GPT-2 always has biases, so only then. */
static int gpt2_hf_config(const lf_model_config *c, char *buf, size_t cap) {
    if (!c->bias) return 0;
    return snprintf(buf, cap,
                    "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                    "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
                    "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                    "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": %.9g,\n"
                    "  \"embd_pdrop\": %.9g,\n  \"attn_pdrop\": %.9g,\n  \"layer_norm_epsilon\": 1e-05,\n"
                    "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
                    "  \"torch_dtype\": \"float32\"\n}\n",
                    lf__vp(c), c->block_size, c->block_size, c->n_embd, c->n_layer, c->n_head, (double)c->dropout,
                    (double)c->dropout, (double)c->dropout);
}

/* ---------------------------------------------------------------- activation slots */

/* One replica's activations for up to rB rows; acts is NULL while sizing.
 * Layer tensors the policy does not keep all point into `w`, the working set. */
static void gpt2_lay_out(const lf__plan_spec *s, void *acts, lf__planner *p) {
    const lf_model_config *c = s->cfg;
    size_t N = (size_t)s->rB * s->T, C = (size_t)c->n_embd, NH = (size_t)c->n_head;
    (void)NH;
    const size_t att = s->att_saved;               /* what the backend's attention saves (backend_impl.h) */
    int keep_outputs = s->rc == LF_RECOMPUTE_NONE; /* layernorm and GELU outputs */
    int keep_block = s->rc != LF_RECOMPUTE_FULL;   /* everything else a block's backward reads */
    const size_t A = lf__act_size(s->dt);          /* bytes per element of a matmul input */
    gpt2_acts dummy = {0};
    gpt2_acts *rp = acts ? acts : &dummy;

    layer_acts w = {0}; /* the working set: what no layer keeps */
    w.attproj = w.fcproj = lf__slot(p, LF__CAT_WORK, N * C);
    if (!keep_outputs) {
        w.ln1 = lf__slot_bytes(p, LF__CAT_WORK, N * C * A);
        /* selective recomputes ln_2's output, then ln_1's, one after the
         * other: one buffer; full recomputes the block at once: two */
        w.ln2 = keep_block ? w.ln1 : lf__slot_bytes(p, LF__CAT_WORK, N * C * A);
        w.fch_gelu = lf__slot_bytes(p, LF__CAT_WORK, N * 4 * C * A);
    }
    if (!keep_block) {
        w.ln1_mean = lf__slot(p, LF__CAT_WORK, N);
        w.ln1_rstd = lf__slot(p, LF__CAT_WORK, N);
        w.qkv = lf__slot(p, LF__CAT_WORK, N * 3 * C);
        w.atty = lf__slot_bytes(p, LF__CAT_WORK, N * C * A);
        w.att = lf__slot(p, LF__CAT_WORK, att);
        w.res2 = lf__slot(p, LF__CAT_WORK, N * C);
        w.ln2_mean = lf__slot(p, LF__CAT_WORK, N);
        w.ln2_rstd = lf__slot(p, LF__CAT_WORK, N);
        w.fch = lf__slot(p, LF__CAT_WORK, N * 4 * C);
    }

    rp->encoded = lf__slot(p, LF__CAT_SAVED, N * C);
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts la_dummy;
        layer_acts *a = rp->la ? &rp->la[l] : &la_dummy;
        *a = w;
        if (keep_block) {
            a->ln1_mean = lf__slot(p, LF__CAT_SAVED, N);
            a->ln1_rstd = lf__slot(p, LF__CAT_SAVED, N);
            a->qkv = lf__slot(p, LF__CAT_SAVED, N * 3 * C);
            a->atty = lf__slot_bytes(p, LF__CAT_SAVED, N * C * A);
            a->att = lf__slot(p, LF__CAT_SAVED, att);
            a->res2 = lf__slot(p, LF__CAT_SAVED, N * C);
            a->ln2_mean = lf__slot(p, LF__CAT_SAVED, N);
            a->ln2_rstd = lf__slot(p, LF__CAT_SAVED, N);
            a->fch = lf__slot(p, LF__CAT_SAVED, N * 4 * C);
        }
        if (keep_outputs) {
            a->ln1 = lf__slot_bytes(p, LF__CAT_SAVED, N * C * A);
            a->ln2 = lf__slot_bytes(p, LF__CAT_SAVED, N * C * A);
            a->fch_gelu = lf__slot_bytes(p, LF__CAT_SAVED, N * 4 * C * A);
        }
        a->res3 = lf__slot(p, LF__CAT_SAVED, N * C); /* the next block's input: kept by every policy */
    }
    rp->lnf = lf__slot_bytes(p, LF__CAT_SAVED, N * C * A);
    rp->lnf_mean = lf__slot(p, LF__CAT_SAVED, N);
    rp->lnf_rstd = lf__slot(p, LF__CAT_SAVED, N);
    if (s->infer) return; /* a session: forward only */
    rp->att_scratch = lf__slot(p, LF__CAT_WORK, s->att_scratch);
    rp->dresidual = lf__slot(p, LF__CAT_WORK, N * C);
    rp->dbranch = lf__slot(p, LF__CAT_WORK, N * C);
    rp->dln = lf__slot(p, LF__CAT_WORK, N * C);
    rp->datty = lf__slot(p, LF__CAT_WORK, N * C);
    rp->dqkv = lf__slot(p, LF__CAT_WORK, N * 3 * C);
    rp->dfch = lf__slot(p, LF__CAT_WORK, N * 4 * C);
    rp->dfch_gelu = lf__slot(p, LF__CAT_WORK, N * 4 * C);
}

/* ---------------------------------------------------------------- compute */

/* Weights of a table index (NULL for an absent bias), and where this
 * replica adds its gradient (m and rp in scope). */
#define PW(idx) lf__param_at(m, idx)
#define GR(idx) lf__grad_at(m, rp, idx)

enum { SITE_ATT = 0, SITE_ATT_RESID = 1, SITE_MLP_RESID = 2, SITE_EMB = 7 };

/* The block input of layer l: the embeddings, or the previous block's output. */
static const float *block_input(const gpt2_acts *x, int l) { return l == 0 ? x->encoded : x->la[l - 1].res3; }

static void gelu_forward(const lf_model *m, act *out, const float *inp, size_t n) {
    m->be->ops->gelu_forward(m->be, out, m->plan_dt == LF_ACT_BF16 ? LF_DT_BF16 : LF_DT_F32, inp, n);
}

/* Forward of block l. whole = 0 stops after the GELU, with everything the
 * block's backward reads written (full recomputation: c_fc's projection and
 * the block output are not needed again). */
static void block_forward(lf_model *m, lf__replica *rp, int l, int T, int whole) {
    lf_backend *be = m->be;
    gpt2_acts *x = ACTS(rp);
    const lf_model_config *c = &m->cfg;
    int B = rp->B, C = c->n_embd, NH = c->n_head;
    int N = B * T;
    uint64_t rowC = (uint64_t)T * C, rowAtt = (uint64_t)NH * T * T;
    layer_acts *a = &x->la[l];
    const int *ix = lf__layer_ix(m, l);
    const float *residual = block_input(x, l);
    lf__ln_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, residual, PW(ix[P_LN1_W]), PW(ix[P_LN1_B]), N, C);
    lf__mm_forward(m, a->qkv, a->ln1, PW(ix[P_ATTN_W]), PW(ix[P_ATTN_B]), N, C, 3 * C, LF_W_IN_OUT);
    /* attproj is free until c_proj writes it: the fp32 attention output of bf16 storage */
    lf__attention_act(m, rp, l, a->atty, a->attproj, a->att, a->qkv, T, lf__drop_at(m, rp, l, SITE_ATT, rowAtt));
    lf__mm_forward(m, a->attproj, a->atty, PW(ix[P_APROJ_W]), PW(ix[P_APROJ_B]), N, C, C, LF_W_IN_OUT);
    lf_dropout d1 = lf__drop_at(m, rp, l, SITE_ATT_RESID, rowC);
    if (d1.p > 0) be->ops->dropout_forward(be, a->attproj, a->attproj, (size_t)N * C, d1);
    /* res2 = residual + attproj and ln2 in one pass. The block's second
     * residual add stays unfused: the norm that reads res3 is the next
     * block's, whose weights belong to the next unit (ZeRO-3 gathers them
     * there), and the recomputed block l+1 reads res3 from memory anyway. */
    lf__res_ln_forward(m, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, residual, a->attproj, PW(ix[P_LN2_W]),
                       PW(ix[P_LN2_B]), N, C);
    lf__mm_forward(m, a->fch, a->ln2, PW(ix[P_FC_W]), PW(ix[P_FC_B]), N, C, 4 * C, LF_W_IN_OUT);
    gelu_forward(m, a->fch_gelu, a->fch, (size_t)N * 4 * C);
    if (!whole) return;
    lf__mm_forward(m, a->fcproj, a->fch_gelu, PW(ix[P_MPROJ_W]), PW(ix[P_MPROJ_B]), N, 4 * C, C, LF_W_IN_OUT);
    lf_dropout d2 = lf__drop_at(m, rp, l, SITE_MLP_RESID, rowC);
    if (d2.p > 0) be->ops->dropout_forward(be, a->fcproj, a->fcproj, (size_t)N * C, d2);
    be->ops->residual_forward(be, a->res3, a->res2, a->fcproj, (size_t)N * C);
}

static void embed_forward(lf_model *m, lf__replica *rp, int T) {
    lf_backend *be = m->be;
    gpt2_acts *x = ACTS(rp);
    int B = rp->B, C = m->cfg.n_embd, L = m->cfg.n_layer;
    /* positions cur_pos0.. (cached decoding continues a sequence) */
    lf__embed(m, rp, x->encoded, PW(lf__model_ix(m, G_WTE)), PW(lf__model_ix(m, G_WPE)), T);
    lf_dropout de = lf__drop_at(m, rp, L, SITE_EMB, (uint64_t)T * C);
    if (de.p > 0) be->ops->dropout_forward(be, x->encoded, x->encoded, (size_t)B * T * C, de);
}

static void head_forward(lf_model *m, lf__replica *rp, int T, int with_targets) {
    gpt2_acts *x = ACTS(rp);
    const lf_model_config *c = &m->cfg;
    int B = rp->B, C = c->n_embd, L = c->n_layer, Vp = lf__vp(c);
    int N = B * T;
    float *residual = (float *)block_input(x, L);
    N = lf__head_rows(m, residual, N, C); /* a ragged forward: each run's last row only */
    lf__ln_forward(m, x->lnf, x->lnf_mean, x->lnf_rstd, residual, PW(lf__model_ix(m, G_LNF_W)),
                   PW(lf__model_ix(m, G_LNF_B)), N, C);
    lf__mm_forward(m, rp->logits, x->lnf, PW(lf__model_ix(m, G_WTE)), NULL, N, C, Vp, LF_W_OUT_IN);

    lf__classifier(m, rp, N, with_targets);
}

/* lm_head (tied to wte) and ln_f. */
static void head_backward(lf_model *m, lf__replica *rp, int T) {
    lf_backend *be = m->be;
    gpt2_acts *x = ACTS(rp);
    const lf_model_config *c = &m->cfg;
    int B = rp->B, C = c->n_embd, L = c->n_layer, Vp = lf__vp(c);
    int N = B * T;
    be->ops->zero(be, x->dresidual, (size_t)N * C);
    lf__mm_backward(m, x->dln, GR(lf__model_ix(m, G_WTE)), NULL, rp->logits, x->lnf, PW(lf__model_ix(m, G_WTE)), N, C,
                    Vp, LF_W_OUT_IN);
    const float *last = block_input(x, L);
    be->ops->layernorm_backward(be, x->dresidual, GR(lf__model_ix(m, G_LNF_W)), GR(lf__model_ix(m, G_LNF_B)), x->dln,
                                last, PW(lf__model_ix(m, G_LNF_W)), x->lnf_mean, x->lnf_rstd, N, C);
}

/* Block l: on entry x->dresidual is d(block output), on exit d(block input). */
static void block_backward(lf_model *m, lf__replica *rp, int l, int T) {
    lf_backend *be = m->be;
    gpt2_acts *x = ACTS(rp);
    const lf_model_config *c = &m->cfg;
    int B = rp->B, C = c->n_embd, NH = c->n_head, L = c->n_layer;
    int N = B * T;
    size_t NC = (size_t)N * C;
    uint64_t rowC = (uint64_t)T * C, rowAtt = (uint64_t)NH * T * T;
    layer_acts *a = &x->la[l];
    const int *ix = lf__layer_ix(m, l);
    const float *residual = block_input(x, l);
    /* Recompute what the plan did not keep, each right before it is read.
     * full: the working set still holds the last block from forward. */
    if (m->plan_rc == LF_RECOMPUTE_FULL && l < L - 1) block_forward(m, rp, l, T, 0);
    if (m->plan_rc == LF_RECOMPUTE_SELECTIVE) {
        lf__ln_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, PW(ix[P_LN2_W]), PW(ix[P_LN2_B]), N, C);
        gelu_forward(m, a->fch_gelu, a->fch, NC * 4);
    }
    /* dresidual = d(res3); res3 = res2 + dropout(fcproj) */
    lf_dropout d2 = lf__drop_at(m, rp, l, SITE_MLP_RESID, rowC);
    const float *dbr = x->dresidual;
    if (d2.p > 0) {
        be->ops->dropout_backward(be, x->dbranch, x->dresidual, NC, d2);
        dbr = x->dbranch;
    }
    lf__mm_backward(m, x->dfch_gelu, GR(ix[P_MPROJ_W]), GR(ix[P_MPROJ_B]), dbr, a->fch_gelu, PW(ix[P_MPROJ_W]), N,
                    4 * C, C, LF_W_IN_OUT);
    be->ops->gelu_backward(be, x->dfch, a->fch, x->dfch_gelu, NC * 4);
    lf__mm_backward(m, x->dln, GR(ix[P_FC_W]), GR(ix[P_FC_B]), x->dfch, a->ln2, PW(ix[P_FC_W]), N, C, 4 * C,
                    LF_W_IN_OUT);
    be->ops->layernorm_backward(be, x->dresidual, GR(ix[P_LN2_W]), GR(ix[P_LN2_B]), x->dln, a->res2, PW(ix[P_LN2_W]),
                                a->ln2_mean, a->ln2_rstd, N, C);
    /* dresidual = d(res2); res2 = residual + dropout(attproj) */
    lf_dropout d1 = lf__drop_at(m, rp, l, SITE_ATT_RESID, rowC);
    dbr = x->dresidual;
    if (d1.p > 0) {
        be->ops->dropout_backward(be, x->dbranch, x->dresidual, NC, d1);
        dbr = x->dbranch;
    }
    lf__mm_backward(m, x->datty, GR(ix[P_APROJ_W]), GR(ix[P_APROJ_B]), dbr, a->atty, PW(ix[P_APROJ_W]), N, C, C,
                    LF_W_IN_OUT);
    lf__attention_backward(m, rp, x->dqkv, x->att_scratch, x->datty, a->qkv, a->att, T, C, NH, NH,
                           lf__drop_at(m, rp, l, SITE_ATT, rowAtt));
    if (m->plan_rc == LF_RECOMPUTE_SELECTIVE) /* ln_1's output shares ln_2's buffer */
        lf__ln_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, residual, PW(ix[P_LN1_W]), PW(ix[P_LN1_B]), N, C);
    lf__mm_backward(m, x->dln, GR(ix[P_ATTN_W]), GR(ix[P_ATTN_B]), x->dqkv, a->ln1, PW(ix[P_ATTN_W]), N, C, 3 * C,
                    LF_W_IN_OUT);
    be->ops->layernorm_backward(be, x->dresidual, GR(ix[P_LN1_W]), GR(ix[P_LN1_B]), x->dln, residual, PW(ix[P_LN1_W]),
                                a->ln1_mean, a->ln1_rstd, N, C);
}

static void embed_backward(lf_model *m, lf__replica *rp, int T) {
    lf_backend *be = m->be;
    gpt2_acts *x = ACTS(rp);
    int B = rp->B, C = m->cfg.n_embd, L = m->cfg.n_layer;
    size_t NC = (size_t)B * T * C;
    lf_dropout de = lf__drop_at(m, rp, L, SITE_EMB, (uint64_t)T * C);
    const float *denc = x->dresidual;
    if (de.p > 0) {
        be->ops->dropout_backward(be, x->dbranch, x->dresidual, NC, de);
        denc = x->dbranch;
    }
    lf__embed_backward(m, rp, GR(lf__model_ix(m, G_WTE)), GR(lf__model_ix(m, G_WPE)), denc, T);
}


static void gpt2_block_forward(lf_model *m, lf__replica *rp, int l, int T) { block_forward(m, rp, l, T, 1); }

/* ---------------------------------------------------------------- configuration, Hugging Face, presets */

/* The head is wte itself: a configuration that unties it is refused. */
static const char *gpt2_given(lf_model_config *c, unsigned given, const char **key) {
    (void)given;
    if (!c->tie_embeddings) {
        *key = "model.tie_embeddings";
        return "gpt2's lm_head is always tied to wte";
    }
    return NULL;
}

/* transformers' GPT2Config (configuration_gpt2.py) keys, in reading order. */
#define F(f) offsetof(lf_model_config, f)
static const lf__hf_key k_hf_keys[] = {
    {"n_embd", F(n_embd), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"n_layer", F(n_layer), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"n_head", F(n_head), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"n_positions", F(block_size), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"vocab_size", F(vocab_size), LF__HF_INT, 1, 0, LF__HF_NO_FIELD},
    {"n_inner", F(ffn_hidden), LF__HF_INT, 0, 0, LF__HF_NO_FIELD},
    {"layer_norm_epsilon", F(norm_eps), LF__HF_NUM, 0, 1e-5, LF__HF_NO_FIELD},
};
#undef F

static lf_status gpt2_hf_check(const lf__hf_cfg *c, int variant, lf_model_config *m) {
    (void)variant;
    lf_status st;
    m->norm = LF_NORM_LAYERNORM;
    m->bias = 1;
    m->tie_embeddings = 1;
    m->n_kv_head = m->n_head;
    if (m->n_embd % m->n_head != 0)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'n_embd' %d is not divisible by 'n_head' %d", lf__hf_where(c),
                       m->n_embd, m->n_head);
    /* what llmforge's gpt2 implements, refused by the config.json key (not
     * by the model.* key it would become) */
    if (m->ffn_hidden != 0 && m->ffn_hidden != 4 * m->n_embd)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'n_inner' %d is not supported (llmforge's gpt2 MLP is 4 * n_embd = %d)",
                       lf__hf_where(c), m->ffn_hidden, 4 * m->n_embd);
    if (m->norm_eps != 1e-5f)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'layer_norm_epsilon' %g is not supported (llmforge's gpt2 uses 1e-05)",
                       lf__hf_where(c), (double)m->norm_eps);
    const char *fn = NULL;
    if ((st = lf__hf_str(c, "activation_function", "gelu_new", &fn)) != LF_OK) return st;
    if (strcmp(fn, "gelu_new") != 0 && strcmp(fn, "gelu_pytorch_tanh") != 0)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: 'activation_function' is '%.100s'; llmforge's GPT-2 uses the tanh GELU (gelu_new)",
                       lf__hf_where(c), fn);
    int tie = 1, scale = 1, by_layer = 0;
    if ((st = lf__hf_bool(c, "tie_word_embeddings", 1, &tie)) != LF_OK) return st;
    if (!tie)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'tie_word_embeddings' is false; llmforge's GPT-2 is tied",
                       lf__hf_where(c));
    if ((st = lf__hf_bool(c, "scale_attn_weights", 1, &scale)) != LF_OK) return st;
    if (!scale)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'scale_attn_weights' is false (not supported)", lf__hf_where(c));
    if ((st = lf__hf_bool(c, "scale_attn_by_inverse_layer_idx", 0, &by_layer)) != LF_OK) return st;
    if (by_layer)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'scale_attn_by_inverse_layer_idx' is true (not supported)",
                       lf__hf_where(c));
    return LF_OK;
}

static const char *const k_hf_types[] = {"gpt2", NULL};
/* HF GPT-2 checkpoints: names under "transformer."; the causal-mask buffers
 * of older transformers (attn.bias, attn.masked_bias) are not weights */
/* the attention-mask buffers: the causal mask (4 dims) and masked_bias */
static const struct lf__hf_ignore k_hf_ignored[] = {{"*.attn.bias", 4}, {".attn.masked_bias", 0}, {NULL, 0}};
static const lf__hf_family k_hf = {
    .model_types = k_hf_types,
    .keys = k_hf_keys,
    .n_keys = (int)(sizeof k_hf_keys / sizeof k_hf_keys[0]),
    .check = gpt2_hf_check,
    .tensor_prefix = "transformer.",
    .ignored = k_hf_ignored,
};

static const lf__preset k_presets[] = {
    {"gpt2-124m",
     "GPT-2 small (HF gpt2; vocab padded to 50304 as llm.c does)",
     {.n_layer = 12,
      .n_head = 12,
      .n_embd = 768,
      .block_size = 1024,
      .vocab_size = 50304,
      .bias = 1,
      .tie_embeddings = 1}},
    {"shakespeare-char-cpu",
     "nanoGPT's shakespeare_char CPU model (configs/shakespeare_char_cpu.json)",
     {.n_layer = 4, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 65, .bias = 1, .tie_embeddings = 1}},
};

const lf__model_arch lf__arch_gpt2 = {
    .name = "gpt2",
    .resolve = gpt2_resolve,
    .given = gpt2_given,
    .validate = gpt2_validate,
    .param_table = gpt2_param_table,
    .embedding_only = gpt2_embedding_only,
    .attn_flops_per_token = gpt2_attn_flops,
    .init_weights = gpt2_init,
    .hf_config_json = gpt2_hf_config,
    .hf = &k_hf,
    .fixed_context = 1, /* wpe has block_size rows */
    .presets = k_presets,
    .n_presets = (int)(sizeof k_presets / sizeof k_presets[0]),
    .bf16_acts = 1,
    .linear_in_out = 1, /* Conv1D */
    .model_params = k_model_params,
    .n_model_params = G_N,
    .layer_fmt = "h.%d.",
    .layer_params = k_layer_params,
    .n_layer_params = P_PER_LAYER,
    .acts_size = sizeof(gpt2_acts),
    .layer_size = sizeof(layer_acts),
    .lay_out_replica = gpt2_lay_out,
    .embed_forward = embed_forward,
    .block_forward = gpt2_block_forward,
    .head_forward = head_forward,
    .head_backward = head_backward,
    .block_backward = block_backward,
    .embed_backward = embed_backward,
};
