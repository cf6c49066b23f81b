/*
 * GPT-2 (nanoGPT's architecture): token + position embeddings, L pre-LN
 * blocks (ln_1 -> causal self-attention -> residual, ln_2 -> MLP with GELU
 * -> residual), ln_f, lm_head tied to wte. Dropout as nanoGPT places it: on
 * the embedding sum, on the attention probabilities, and on each residual
 * branch output.
 *
 * Invariants:
 *  - Parameters and gradients are one contiguous buffer each, in the order of
 *    lf_gpt2_param_table; tensors are addressed by offset only.
 *  - Activations live in one block planned for (B, T) by lf_model_plan; a
 *    forward with a smaller B or T uses a prefix of each slot. Nothing is
 *    allocated in forward or backward.
 *  - Parameter gradients accumulate across backward calls until
 *    lf_model_zero_grad (so micro-batches add up). Activation gradients are
 *    shared by all layers: one residual-stream gradient that layernorm
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
 *    needs the backend's bf16 slots (backend_impl.h), which round exactly as
 *    its products round their operands, so both storages give the same bits.
 *    The attention output is written in fp32 into the attproj buffer (free
 *    until c_proj overwrites it) and cast from there.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/backend_impl.h"
#include "llmforge/model.h"

/* Indices of one block's tensors in the parameter table (bias ones are -1
 * when the model has no biases). */
enum {
    P_LN1_W, P_LN1_B, P_ATTN_W, P_ATTN_B, P_APROJ_W, P_APROJ_B,
    P_LN2_W, P_LN2_B, P_FC_W, P_FC_B, P_MPROJ_W, P_MPROJ_B, P_PER_LAYER
};

/* A matmul-input activation: float or uint16_t (bf16 bits) as plan_dt says. */
typedef void act;

typedef struct layer_acts {
    act *ln1;                         /* (N,C) */
    float *ln1_mean, *ln1_rstd;       /* (N), (N) */
    float *qkv;                       /* (N,3C) */
    act *atty;                        /* (N,C) attention output before c_proj */
    float *att;                       /* (B,NH,T,T) softmax probabilities */
    float *attproj;                   /* (N,C) c_proj output (after dropout); working set */
    float *res2;                      /* (N,C) residual after attention */
    act *ln2;                         /* (N,C) */
    float *ln2_mean, *ln2_rstd;
    float *fch;                       /* (N,4C) GELU input */
    act *fch_gelu;                    /* (N,4C) */
    float *fcproj;                    /* (N,C) after dropout; working set */
    float *res3;                      /* (N,C) block output */
} layer_acts;

/* One model replica: the activations of a slice of the batch's rows. The
 * CPU backend runs one replica per thread, each calling the ops from inside
 * the model's parallel region (so the ops and BLAS run single-threaded);
 * with one replica the ops use every thread themselves. */
typedef struct replica {
    int b0, B;                        /* rows [b0, b0+B) of the current batch */
    layer_acts *la;
    float *encoded;                   /* (N,C) embeddings (after dropout) */
    act *lnf;                         /* (N,C) */
    float *lnf_mean, *lnf_rstd;
    float *att_scratch;               /* (B,NH,T,T) */
    float *logits, *losses;           /* views at row b0 of the model's buffers */
    int32_t *inputs, *targets;        /* likewise */
    /* Activation gradients, shared by all layers (backward visits one layer
     * at a time). dresidual is the residual stream's gradient: layernorm
     * backwards add into it, so it carries d(block output) into d(block
     * input) through the whole stack (llm.c's scheme). The others are
     * overwritten by their single producer. */
    float *dresidual;                 /* (N,C) */
    float *dbranch;                   /* (N,C) residual-branch grad through dropout */
    float *dln;                       /* (N,C) grad of a layernorm output */
    float *datty;                     /* (N,C) */
    float *dqkv;                      /* (N,3C) */
    float *dfch, *dfch_gelu;          /* (N,4C) */
    /* Parameter gradients: replica 0 adds into the model's whole buffer
     * (gfull); the others, and replica 0 under ZeRO-2/3, into unit buffers:
     * gemb for unit 0 (held through the whole backward, which starts and ends
     * with it), gblk for the unit being visited. */
    float *gfull, *gemb, *gblk;
    double loss_sum;
    long n_valid;
} replica;

struct lf_model {
    lf_gpt2_config cfg;
    const lf_backend_ops *be;
    lf_param_info *table;
    int n_tensors;
    size_t num_params;
    float *params, *grads;
    int wte, wpe, lnf_w, lnf_b;       /* table indices */
    int (*lp)[P_PER_LAYER];           /* per-layer table indices */
    int n_units;                      /* L + 2 (lf_model_num_units) */
    size_t *unit_lo, *unit_n;         /* flat range of each unit */
    int *unit_of;                     /* unit of each tensor */
    size_t unit0_n, max_other_n;

    /* ZeRO (lf_model_set_zero) */
    lf_model_zero zero;
    float *pemb, *pblk;               /* ZeRO-3: gathered parameters of unit 0 / of slot_unit */
    int emb_valid, blk_unit;          /* what they hold (blk_unit -1: nothing) */
    float *gemb0, *gblk0;             /* ZeRO-2/3: replica 0's unit gradients */
    int task_l;                       /* the layer the replicas' tasks work on */

    /* activation plan */
    lf_recompute recompute;           /* policy of the next plan */
    lf_recompute plan_rc;             /* policy of the plan in place */
    lf_act_dtype act_dt;              /* matmul-input storage of the next plan */
    lf_act_dtype plan_dt;             /* ... of the plan in place */
    int plan_B, plan_T, n_rep, rep_B; /* rep_B: rows each replica is planned for */
    lf_act_bytes act;                 /* what the plan in place allocated */
    void *act_block;
    replica *rep;
    float *logits;                    /* (B,T,Vp), becomes dlogits in training */
    float *losses;                    /* (B,T) */
    int32_t *inputs, *targets;        /* copies of the last forward's batch */

    /* last forward */
    int cur_B, cur_T, cur_rep, cur_with_targets;
    int have_dlogits;
    lf_forward_opts opts;
    char errmsg[1024];
};

/* ---------------------------------------------------------------- config and table */

lf_status lf_gpt2_config_validate(const lf_gpt2_config *c) {
    if (c->n_layer < 1 || c->n_layer > 1024) return lf_fail(LF_ERR_RANGE, "model.n_layer %d is out of range [1, 1024]", c->n_layer);
    if (c->n_head < 1 || c->n_head > 1024) return lf_fail(LF_ERR_RANGE, "model.n_head %d is out of range [1, 1024]", c->n_head);
    if (c->n_embd < 1 || c->n_embd > 65536) return lf_fail(LF_ERR_RANGE, "model.n_embd %d is out of range [1, 65536]", c->n_embd);
    if (c->n_embd % c->n_head != 0)
        return lf_fail(LF_ERR_CONFIG, "model.n_embd %d is not divisible by model.n_head %d", c->n_embd, c->n_head);
    if (c->block_size < 1 || c->block_size > (1 << 20))
        return lf_fail(LF_ERR_RANGE, "model.block_size %d is out of range [1, 1048576]", c->block_size);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 24))
        return lf_fail(LF_ERR_RANGE, "model.vocab_size %d is out of range [1, 16777216]", c->vocab_size);
    if (c->padded_vocab_size != 0 && c->padded_vocab_size < c->vocab_size)
        return lf_fail(LF_ERR_RANGE, "padded vocab size %d is smaller than vocab_size %d", c->padded_vocab_size, c->vocab_size);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return lf_fail(LF_ERR_RANGE, "model.dropout %g is out of range [0, 1)", (double)c->dropout);
    return LF_OK;
}

static int vp_of(const lf_gpt2_config *c) { return c->padded_vocab_size > 0 ? c->padded_vocab_size : c->vocab_size; }

static void add_param(lf_param_info *t, int *n, size_t *off, const char *name, int ndim, int64_t d0, int64_t d1) {
    lf_param_info *p = &t[*n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim > 1 ? d1 : 0;
    p->numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
    p->offset = *off;
    p->decay = ndim >= 2;
    *off += p->numel;
    (*n)++;
}

lf_status lf_gpt2_param_table(const lf_gpt2_config *c, lf_param_info **out, int *count, size_t *total) {
    *out = NULL;
    lf_status st = lf_gpt2_config_validate(c);
    if (st != LF_OK) return st;
    int L = c->n_layer, C = c->n_embd;
    int cap = 2 + L * P_PER_LAYER + 2;
    lf_param_info *t = lf_calloc(sizeof *t * (size_t)cap);
    if (!t) return LF_ERR_NOMEM;
    int n = 0;
    size_t off = 0;
    char name[LF_PARAM_NAME_MAX];
    add_param(t, &n, &off, "wte.weight", 2, vp_of(c), C);
    add_param(t, &n, &off, "wpe.weight", 2, c->block_size, C);
    for (int l = 0; l < L; l++) {
#define ADD(suffix, nd, a, b)                                    \
    do {                                                         \
        snprintf(name, sizeof name, "h.%d.%s", l, suffix);       \
        add_param(t, &n, &off, name, nd, a, b);                  \
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
    add_param(t, &n, &off, "ln_f.weight", 1, C, 0);
    if (c->bias) add_param(t, &n, &off, "ln_f.bias", 1, C, 0);
    *out = t;
    *count = n;
    *total = off;
    return LF_OK;
}

size_t lf_gpt2_num_params_nonembedding(const lf_gpt2_config *c) {
    lf_param_info *t;
    int n;
    size_t total;
    if (lf_gpt2_param_table(c, &t, &n, &total) != LF_OK) return 0;
    size_t wpe = (size_t)c->block_size * (size_t)c->n_embd;
    lf_free(t);
    return total - wpe;
}

/* Units (lf_model_num_units): the flat range of each, from the table. The
 * first tensor of each block starts it; ln_f follows the last block. */
static void unit_ranges(const lf_param_info *t, int count, int L, size_t total, size_t *lo, size_t *n) {
    lo[0] = 0;
    int u = 1;
    for (int i = 0; i < count && u <= L + 1; i++) {
        char want[32];
        if (u <= L) snprintf(want, sizeof want, "h.%d.", u - 1);
        else snprintf(want, sizeof want, "ln_f.");
        if (strncmp(t[i].name, want, strlen(want)) == 0) lo[u++] = t[i].offset;
    }
    for (int k = 0; k < L + 2; k++) n[k] = (k + 1 < L + 2 ? lo[k + 1] : total) - lo[k];
}

size_t lf_gpt2_unit_sizes(const lf_gpt2_config *cfg, size_t *unit0, size_t *max_other) {
    *unit0 = *max_other = 0;
    lf_param_info *t;
    int count;
    size_t total;
    if (lf_gpt2_param_table(cfg, &t, &count, &total) != LF_OK) return 0;
    int L = cfg->n_layer;
    size_t *lo = malloc(2 * sizeof(size_t) * (size_t)(L + 2));
    if (!lo) {
        lf_free(t);
        return 0;
    }
    unit_ranges(t, count, L, total, lo, lo + L + 2);
    *unit0 = lo[L + 2];
    for (int k = 1; k < L + 2; k++)
        if (lo[L + 2 + k] > *max_other) *max_other = lo[L + 2 + k];
    free(lo);
    lf_free(t);
    return total;
}

size_t lf_gpt2_zero_work_bytes(const lf_gpt2_config *cfg, int partition_grads, int partition_params) {
    size_t u0, mo;
    if (!lf_gpt2_unit_sizes(cfg, &u0, &mo)) return 0;
    size_t one = lf_arena_round(u0 * sizeof(float)) + lf_arena_round(mo * sizeof(float));
    return (partition_grads ? one : 0) + (partition_params ? one : 0);
}

double lf_gpt2_flops_per_token(const lf_gpt2_config *c, int T) {
    double N = (double)lf_gpt2_num_params_nonembedding(c);
    return 6.0 * N + 12.0 * c->n_layer * (double)c->n_embd * T;
}

/* ---------------------------------------------------------------- lifecycle */

/* The backend can store matmul inputs in bf16 (all five slots, or none). */
static int bf16_acts_supported(const lf_backend_ops *be) {
    return be->cast_bf16 && be->layernorm_forward_bf16 && be->gelu_forward_bf16 && be->matmul_forward_bf16 &&
           be->matmul_backward_bf16;
}

static int find_index(const lf_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->table[i].name, name) == 0) return i;
    return -1;
}

lf_status lf_model_create(lf_model **out, const lf_gpt2_config *cfg, const lf_backend_ops *be) {
    *out = NULL;
    if (!be) return lf_fail(LF_ERR_INVALID_ARG, "no backend given");
    lf_model *m = calloc(1, sizeof *m);
    if (!m) return lf_fail(LF_ERR_NOMEM, "out of memory creating the model");
    m->cfg = *cfg;
    m->be = be;
    lf_status st = lf_gpt2_param_table(cfg, &m->table, &m->n_tensors, &m->num_params);
    if (st != LF_OK) goto fail;
    m->lp = calloc((size_t)cfg->n_layer, sizeof *m->lp);
    if (!m->lp) { st = lf_fail(LF_ERR_NOMEM, "out of memory"); goto fail; }
    m->wte = find_index(m, "wte.weight");
    m->wpe = find_index(m, "wpe.weight");
    m->lnf_w = find_index(m, "ln_f.weight");
    m->lnf_b = find_index(m, "ln_f.bias");
    static const char *suffix[P_PER_LAYER] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                              "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                              "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    for (int l = 0; l < cfg->n_layer; l++)
        for (int k = 0; k < P_PER_LAYER; k++) {
            char name[LF_PARAM_NAME_MAX];
            snprintf(name, sizeof name, "h.%d.%s", l, suffix[k]);
            m->lp[l][k] = find_index(m, name);
        }
    int L = cfg->n_layer;
    m->n_units = L + 2;
    m->unit_lo = calloc(2 * (size_t)m->n_units, sizeof(size_t));
    m->unit_of = calloc((size_t)m->n_tensors, sizeof(int));
    if (!m->unit_lo || !m->unit_of) { st = lf_fail(LF_ERR_NOMEM, "out of memory"); goto fail; }
    m->unit_n = m->unit_lo + m->n_units;
    unit_ranges(m->table, m->n_tensors, L, m->num_params, m->unit_lo, m->unit_n);
    m->unit0_n = m->unit_n[0];
    for (int u = 1; u < m->n_units; u++)
        if (m->unit_n[u] > m->max_other_n) m->max_other_n = m->unit_n[u];
    for (int i = 0; i < m->n_tensors; i++) {
        int u = 0;
        while (u + 1 < m->n_units && m->table[i].offset >= m->unit_lo[u + 1]) u++;
        m->unit_of[i] = u;
    }
    m->blk_unit = -1;
    m->act_dt = bf16_acts_supported(be) ? LF_ACT_BF16 : LF_ACT_FP32;
    size_t bytes = m->num_params * sizeof(float);
    m->params = be->alloc(bytes);
    m->grads = be->alloc(bytes);
    if (!m->params || !m->grads) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory allocating %zu parameters (%.1f MB each for weights and gradients)",
                     m->num_params, bytes / 1e6);
        goto fail;
    }
    be->zero(m->params, m->num_params);
    be->zero(m->grads, m->num_params);
    *out = m;
    return LF_OK;
fail:
    lf_model_free(m);
    return st;
}

static void free_plan(lf_model *m) {
    if (m->act_block) m->be->free(m->act_block);
    m->act_block = NULL;
    if (m->rep)
        for (int r = 0; r < m->n_rep; r++) free(m->rep[r].la);
    free(m->rep);
    m->rep = NULL;
    m->plan_B = m->plan_T = m->n_rep = m->rep_B = 0;
    memset(&m->act, 0, sizeof m->act);
    m->have_dlogits = 0; /* the activations a backward would read are gone */
}

void lf_model_free(lf_model *m) {
    if (!m) return;
    free_plan(m);
    if (m->params) m->be->free(m->params);
    if (m->grads) m->be->free(m->grads);
    float *work[4] = {m->pemb, m->pblk, m->gemb0, m->gblk0};
    for (int i = 0; i < 4; i++)
        if (work[i]) m->be->free(work[i]);
    lf_free(m->table);
    free(m->lp);
    free(m->unit_lo);
    free(m->unit_of);
    free(m);
}

lf_status lf_model_init_weights(lf_model *m, uint64_t seed) {
    int L = m->cfg.n_layer;
    float *host = lf_alloc(m->num_params * sizeof(float));
    if (!host) return LF_ERR_NOMEM;
    float proj_std = 0.02f / sqrtf(2.0f * (float)L);
    for (int i = 0; i < m->n_tensors; i++) {
        const lf_param_info *p = &m->table[i];
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
            for (size_t j = 0; j < p->numel; j++)
                w[j] = std * lf_rng_normal(seed, LF_RNG_INIT, p->offset + j);
        }
    }
    m->be->to_device(m->params, host, m->num_params * sizeof(float));
    lf_free(host);
    return LF_OK;
}

const lf_gpt2_config *lf_model_get_config(const lf_model *m) { return &m->cfg; }
const lf_param_info *lf_model_params_table(const lf_model *m, int *count) {
    if (count) *count = m->n_tensors;
    return m->table;
}
size_t lf_model_num_params(const lf_model *m) { return m->num_params; }
float *lf_model_params(lf_model *m) { return m->params; }
float *lf_model_grads(lf_model *m) { return m->grads; }
int lf_model_num_units(const lf_model *m) { return m->n_units; }
void lf_model_unit_range(const lf_model *m, int unit, size_t *lo, size_t *n) {
    *lo = m->unit_lo[unit];
    *n = m->unit_n[unit];
}

lf_status lf_model_set_zero(lf_model *m, const lf_model_zero *z) {
    if (m->zero.partition_grads || m->zero.partition_params)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_model_set_zero: the model is already partitioned");
    if ((z->partition_grads && !z->reduce_grads) || (z->partition_params && !z->gather_params))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_model_set_zero: a partitioned buffer needs its callback");
    if (z->partition_params && !z->partition_grads)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_model_set_zero: partitioned parameters need partitioned gradients");
    const lf_backend_ops *be = m->be;
    float *buf[4] = {NULL, NULL, NULL, NULL}; /* pemb, pblk, gemb0, gblk0 */
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        int want = i < 2 ? z->partition_params : z->partition_grads;
        if (!want) continue;
        buf[i] = be->alloc((i % 2 ? m->max_other_n : m->unit0_n) * sizeof(float));
        ok &= buf[i] != NULL;
    }
    if (!ok) {
        for (int i = 0; i < 4; i++)
            if (buf[i]) be->free(buf[i]);
        return lf_fail(LF_ERR_NOMEM, "out of memory allocating the ZeRO unit buffers");
    }
    free_plan(m); /* replica 0's gradient pointers change */
    m->zero = *z;
    m->pemb = buf[0];
    m->pblk = buf[1];
    m->gemb0 = buf[2];
    m->gblk0 = buf[3];
    if (z->partition_grads) {
        be->free(m->grads);
        m->grads = NULL;
    }
    if (z->partition_params) {
        be->free(m->params);
        m->params = NULL;
    }
    m->emb_valid = 0;
    m->blk_unit = -1;
    return LF_OK;
}

void lf_model_state_bytes(const lf_model *m, size_t *params, size_t *grads) {
    *params = lf_alloc_usable(m->params) + lf_alloc_usable(m->pemb) + lf_alloc_usable(m->pblk);
    *grads = lf_alloc_usable(m->grads) + lf_alloc_usable(m->gemb0) + lf_alloc_usable(m->gblk0);
}

void lf_model_params_changed(lf_model *m) {
    m->emb_valid = 0;
    m->blk_unit = -1;
}
const lf_param_info *lf_model_find_param(const lf_model *m, const char *name) {
    int i = find_index(m, name);
    return i < 0 ? NULL : &m->table[i];
}
const float *lf_model_logits(const lf_model *m) { return m->logits; }
const char *lf_model_errmsg(const lf_model *m) { return m->errmsg; }
void lf_model_zero_grad(lf_model *m) {
    if (m->grads) m->be->zero(m->grads, m->num_params);
}

/* ---------------------------------------------------------------- activation plan */

/* Two passes over the same list of slots: the first sums sizes, the second
 * hands out pointers. Keeping one list means the plan and the allocation
 * cannot disagree, and lf_gpt2_activation_bytes runs the first pass alone. */
enum { CAT_SAVED, CAT_WORK, CAT_LOGITS, CAT_GRADS, CAT_N };

typedef struct planner {
    unsigned char *base; /* NULL while sizing */
    size_t used;
    size_t cat[CAT_N];   /* bytes by lf_act_bytes category */
} planner;

static void *slot_bytes(planner *p, int cat, size_t bytes) {
    bytes = lf_arena_round(bytes);
    void *ptr = p->base ? p->base + p->used : NULL;
    p->used += bytes;
    p->cat[cat] += bytes;
    return ptr;
}

static float *slot(planner *p, int cat, size_t floats) { return slot_bytes(p, cat, floats * sizeof(float)); }

static size_t act_size(lf_act_dtype dt) { return dt == LF_ACT_BF16 ? sizeof(uint16_t) : sizeof(float); }

/* The shape a plan is made for. */
typedef struct plan_spec {
    const lf_gpt2_config *cfg;
    size_t num_params;
    size_t unit0_n, max_other_n; /* replica gradient buffers: one per unit slot */
    lf_recompute rc;
    lf_act_dtype dt;     /* storage of the matmul inputs */
    int B, T, n_rep, rB; /* rB: rows of each replica */
} plan_spec;

/* Per-replica activations for up to rB rows; r > 0 also get unit gradient
 * buffers (replica 0 uses the model's). rp is NULL while sizing. Layer
 * tensors the policy does not keep all point into `w`, the working set. */
static void lay_out_replica(const plan_spec *s, replica *rp, int r, planner *p, const lf_model *m) {
    const lf_gpt2_config *c = s->cfg;
    size_t N = (size_t)s->rB * s->T, C = (size_t)c->n_embd, NH = (size_t)c->n_head;
    size_t att = (size_t)s->rB * NH * s->T * s->T;
    int keep_outputs = s->rc == LF_RECOMPUTE_NONE; /* layernorm and GELU outputs */
    int keep_block = s->rc != LF_RECOMPUTE_FULL;   /* everything else a block's backward reads */
    const size_t A = act_size(s->dt);              /* bytes per element of a matmul input */
    replica dummy = {0};
    if (!rp) rp = &dummy;

    layer_acts w = {0}; /* the working set: what no layer keeps */
    w.attproj = w.fcproj = slot(p, CAT_WORK, N * C);
    if (!keep_outputs) {
        w.ln1 = slot_bytes(p, CAT_WORK, N * C * A);
        /* selective recomputes ln_2's output, then ln_1's, one after the
         * other: one buffer; full recomputes the block at once: two */
        w.ln2 = keep_block ? w.ln1 : slot_bytes(p, CAT_WORK, N * C * A);
        w.fch_gelu = slot_bytes(p, CAT_WORK, N * 4 * C * A);
    }
    if (!keep_block) {
        w.ln1_mean = slot(p, CAT_WORK, N);
        w.ln1_rstd = slot(p, CAT_WORK, N);
        w.qkv = slot(p, CAT_WORK, N * 3 * C);
        w.atty = slot_bytes(p, CAT_WORK, N * C * A);
        w.att = slot(p, CAT_WORK, att);
        w.res2 = slot(p, CAT_WORK, N * C);
        w.ln2_mean = slot(p, CAT_WORK, N);
        w.ln2_rstd = slot(p, CAT_WORK, N);
        w.fch = slot(p, CAT_WORK, N * 4 * C);
    }

    rp->encoded = slot(p, CAT_SAVED, N * C);
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts la_dummy;
        layer_acts *a = rp->la ? &rp->la[l] : &la_dummy;
        *a = w;
        if (keep_block) {
            a->ln1_mean = slot(p, CAT_SAVED, N);
            a->ln1_rstd = slot(p, CAT_SAVED, N);
            a->qkv = slot(p, CAT_SAVED, N * 3 * C);
            a->atty = slot_bytes(p, CAT_SAVED, N * C * A);
            a->att = slot(p, CAT_SAVED, att);
            a->res2 = slot(p, CAT_SAVED, N * C);
            a->ln2_mean = slot(p, CAT_SAVED, N);
            a->ln2_rstd = slot(p, CAT_SAVED, N);
            a->fch = slot(p, CAT_SAVED, N * 4 * C);
        }
        if (keep_outputs) {
            a->ln1 = slot_bytes(p, CAT_SAVED, N * C * A);
            a->ln2 = slot_bytes(p, CAT_SAVED, N * C * A);
            a->fch_gelu = slot_bytes(p, CAT_SAVED, N * 4 * C * A);
        }
        a->res3 = slot(p, CAT_SAVED, N * C); /* the next block's input: kept by every policy */
    }
    rp->lnf = slot_bytes(p, CAT_SAVED, N * C * A);
    rp->lnf_mean = slot(p, CAT_SAVED, N);
    rp->lnf_rstd = slot(p, CAT_SAVED, N);
    rp->att_scratch = slot(p, CAT_WORK, att);
    rp->dresidual = slot(p, CAT_WORK, N * C);
    rp->dbranch = slot(p, CAT_WORK, N * C);
    rp->dln = slot(p, CAT_WORK, N * C);
    rp->datty = slot(p, CAT_WORK, N * C);
    rp->dqkv = slot(p, CAT_WORK, N * 3 * C);
    rp->dfch = slot(p, CAT_WORK, N * 4 * C);
    rp->dfch_gelu = slot(p, CAT_WORK, N * 4 * C);
    if (r > 0) {
        rp->gfull = NULL;
        rp->gemb = slot(p, CAT_GRADS, s->unit0_n);
        rp->gblk = slot(p, CAT_GRADS, s->max_other_n);
    } else if (m) {
        rp->gfull = m->grads; /* NULL under ZeRO-2/3: the unit buffers instead */
        rp->gemb = m->gemb0;
        rp->gblk = m->gblk0;
    }
}

/* m is NULL while sizing without a model (lf_gpt2_activation_bytes). */
static void lay_out(const plan_spec *s, lf_model *m, planner *p) {
    size_t N = (size_t)s->B * s->T, Vp = (size_t)vp_of(s->cfg);
    float *logits = slot(p, CAT_LOGITS, N * Vp);
    float *losses = slot(p, CAT_LOGITS, N);
    int32_t *inputs = (int32_t *)slot(p, CAT_LOGITS, N);
    int32_t *targets = (int32_t *)slot(p, CAT_LOGITS, N);
    if (m) {
        m->logits = logits;
        m->losses = losses;
        m->inputs = inputs;
        m->targets = targets;
    }
    for (int r = 0; r < s->n_rep; r++)
        lay_out_replica(s, m && m->rep ? &m->rep[r] : NULL, r, p, m);
}

static void act_bytes_of(const planner *p, lf_act_bytes *out) {
    out->total = p->used;
    out->saved = p->cat[CAT_SAVED];
    out->work = p->cat[CAT_WORK];
    out->logits = p->cat[CAT_LOGITS];
    out->replica_grads = p->cat[CAT_GRADS];
}

/* Rows per replica, and replicas left once none is empty. */
static void split_rows(int B, int n_rep, int *rB, int *n_out) {
    if (n_rep < 1) n_rep = 1;
    if (n_rep > B) n_rep = B;
    *rB = (B + n_rep - 1) / n_rep;
    *n_out = (B + *rB - 1) / *rB;
}

const char *lf_recompute_name(lf_recompute policy) {
    switch (policy) {
    case LF_RECOMPUTE_NONE: return "none";
    case LF_RECOMPUTE_SELECTIVE: return "selective";
    case LF_RECOMPUTE_FULL: return "full";
    }
    return "?";
}

const char *lf_act_dtype_name(lf_act_dtype dtype) {
    switch (dtype) {
    case LF_ACT_FP32: return "fp32";
    case LF_ACT_BF16: return "bf16";
    }
    return "?";
}

static int act_dtype_valid(lf_act_dtype dtype) { return dtype == LF_ACT_FP32 || dtype == LF_ACT_BF16; }

static int recompute_valid(lf_recompute policy) {
    return policy == LF_RECOMPUTE_NONE || policy == LF_RECOMPUTE_SELECTIVE || policy == LF_RECOMPUTE_FULL;
}

lf_status lf_recompute_parse(const char *name, lf_recompute *out) {
    static const lf_recompute all[] = {LF_RECOMPUTE_NONE, LF_RECOMPUTE_SELECTIVE, LF_RECOMPUTE_FULL};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++) {
        if (!strcmp(name, lf_recompute_name(all[i]))) {
            *out = all[i];
            return LF_OK;
        }
    }
    return lf_fail(LF_ERR_INVALID_ARG, "recompute policy '%s' is not one of none, selective, full",
                   name ? name : "(null)");
}

lf_status lf_gpt2_activation_bytes(const lf_gpt2_config *cfg, int B, int T, lf_recompute policy, lf_act_dtype dtype,
                                   int n_replicas, lf_act_bytes *out) {
    memset(out, 0, sizeof *out);
    lf_status st = lf_gpt2_config_validate(cfg);
    if (st != LF_OK) return st;
    if (B < 1 || T < 1 || n_replicas < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "activation plan: batch %d x %d over %d replicas is empty", B, T, n_replicas);
    if (T > cfg->block_size)
        return lf_fail(LF_ERR_RANGE, "sequence length %d exceeds model.block_size %d", T, cfg->block_size);
    if (!recompute_valid(policy)) return lf_fail(LF_ERR_INVALID_ARG, "unknown recompute policy %d", (int)policy);
    if (!act_dtype_valid(dtype)) return lf_fail(LF_ERR_INVALID_ARG, "unknown activation dtype %d", (int)dtype);
    plan_spec s = {.cfg = cfg, .rc = policy, .dt = dtype, .B = B, .T = T};
    s.num_params = lf_gpt2_unit_sizes(cfg, &s.unit0_n, &s.max_other_n);
    if (!s.num_params) return lf_fail(LF_ERR_NOMEM, "out of memory sizing the activation plan");
    split_rows(B, n_replicas, &s.rB, &s.n_rep);
    planner p = {0};
    lay_out(&s, NULL, &p);
    act_bytes_of(&p, out);
    return LF_OK;
}

lf_status lf_model_set_recompute(lf_model *m, lf_recompute policy) {
    if (!recompute_valid(policy)) return lf_fail(LF_ERR_INVALID_ARG, "unknown recompute policy %d", (int)policy);
    m->recompute = policy;
    return LF_OK;
}

lf_recompute lf_model_recompute(const lf_model *m) { return m->act_block ? m->plan_rc : m->recompute; }

lf_status lf_model_set_act_dtype(lf_model *m, lf_act_dtype dtype) {
    if (!act_dtype_valid(dtype)) return lf_fail(LF_ERR_INVALID_ARG, "unknown activation dtype %d", (int)dtype);
    if (dtype == LF_ACT_BF16 && !bf16_acts_supported(m->be))
        return lf_fail(LF_ERR_UNSUPPORTED, "backend '%s' keeps activations in fp32 (bf16 activation storage needs "
                       "cpu-bf16)", m->be->name);
    m->act_dt = dtype;
    return LF_OK;
}

lf_act_dtype lf_model_act_dtype(const lf_model *m) { return m->act_block ? m->plan_dt : m->act_dt; }

void lf_model_activation_bytes(const lf_model *m, lf_act_bytes *out) { *out = m->act; }

lf_status lf_model_plan(lf_model *m, int B, int T, size_t *bytes) {
    if (B < 1 || T < 1) return lf_fail(LF_ERR_INVALID_ARG, "plan: batch %d x %d is empty", B, T);
    if (T > m->cfg.block_size)
        return lf_fail(LF_ERR_RANGE, "sequence length %d exceeds model.block_size %d", T, m->cfg.block_size);
    free_plan(m);
    plan_spec s = {.cfg = &m->cfg, .num_params = m->num_params, .unit0_n = m->unit0_n,
                   .max_other_n = m->max_other_n, .rc = m->recompute, .dt = m->act_dt, .B = B, .T = T};
    split_rows(B, m->be->replicas ? m->be->replicas(B) : 1, &s.rB, &s.n_rep);
    planner p = {0};
    lay_out(&s, m, &p); /* sizing pass */
    m->rep = calloc((size_t)s.n_rep, sizeof *m->rep);
    int ok = m->rep != NULL;
    for (int r = 0; ok && r < s.n_rep; r++) {
        m->rep[r].la = calloc((size_t)m->cfg.n_layer, sizeof(layer_acts));
        ok = m->rep[r].la != NULL;
    }
    m->n_rep = s.n_rep;
    m->act_block = ok ? m->be->alloc(p.used) : NULL;
    if (!m->act_block) {
        size_t need = p.used;
        free_plan(m);
        return lf_fail(LF_ERR_NOMEM,
                       "out of memory allocating %.1f MB of activations for batch %d x %d (recompute %s, %s matmul "
                       "inputs)", need / 1e6, B, T, lf_recompute_name(s.rc), lf_act_dtype_name(s.dt));
    }
    planner q = {.base = m->act_block};
    lay_out(&s, m, &q);
    m->plan_B = B;
    m->plan_T = T;
    m->rep_B = s.rB;
    m->plan_rc = s.rc;
    m->plan_dt = s.dt;
    act_bytes_of(&q, &m->act);
    if (bytes) *bytes = q.used;
    return LF_OK;
}

/* ---------------------------------------------------------------- forward / backward */

/* Weights of tensor idx (NULL for an absent bias): in the whole buffer, or
 * under ZeRO-3 in the working buffer its unit was gathered into. */
static float *param_at(const lf_model *m, int idx) {
    if (idx < 0) return NULL;
    size_t off = m->table[idx].offset;
    if (m->params) return m->params + off;
    int u = m->unit_of[idx];
    return (u == 0 ? m->pemb : m->pblk) + (off - m->unit_lo[u]);
}
#define PW(m, idx) param_at(m, idx)

/* Where replica rp adds the gradient of tensor idx. */
static float *grad_at(const lf_model *m, const replica *rp, int idx) {
    if (idx < 0) return NULL;
    size_t off = m->table[idx].offset;
    if (rp->gfull) return rp->gfull + off;
    int u = m->unit_of[idx];
    return (u == 0 ? rp->gemb : rp->gblk) + (off - m->unit_lo[u]);
}

enum { SITE_ATT = 0, SITE_ATT_RESID = 1, SITE_MLP_RESID = 2, SITE_EMB = 7 };

/* Dropout of one site for a replica; `row_elems` is the tensor's elements per
 * batch row, so the replica's slice draws the unsplit batch's masks. */
static lf_dropout drop_at(const lf_model *m, const replica *rp, int layer, int site, uint64_t row_elems) {
    lf_dropout d = {0};
    if (!m->opts.train || m->cfg.dropout <= 0.0f) return d;
    d.p = m->cfg.dropout;
    d.seed = m->opts.seed;
    d.key = lf_rng_mix(m->opts.key, (uint64_t)layer * 8u + (uint64_t)site);
    d.offset = (uint64_t)rp->b0 * row_elems;
    return d;
}

/* The block input of layer l: the embeddings, or the previous block's output. */
static const float *block_input(const replica *rp, int l) { return l == 0 ? rp->encoded : rp->la[l - 1].res3; }

/* The ops that write or read matmul-input activations, in the plan's
 * storage (plan_dt): the fp32 ops, or the backend's bf16 slots. */
static void ln_forward(const lf_model *m, act *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int N, int C) {
    if (m->plan_dt == LF_ACT_BF16) m->be->layernorm_forward_bf16(out, mean, rstd, inp, weight, bias, N, C);
    else m->be->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}

static void gelu_forward(const lf_model *m, act *out, const float *inp, size_t n) {
    if (m->plan_dt == LF_ACT_BF16) m->be->gelu_forward_bf16(out, inp, n);
    else m->be->gelu_forward(out, inp, n);
}

/* Attention output into `out`; in bf16 by way of fp32 in `tmp` (N,C). */
static void attn_forward(const lf_model *m, act *out, float *tmp, float *att, const float *qkv, int B, int T, int C,
                         int NH, lf_dropout drop) {
    if (m->plan_dt == LF_ACT_BF16) {
        m->be->attention_forward(tmp, att, qkv, B, T, C, NH, NH, drop);
        m->be->cast_bf16(out, tmp, (size_t)B * T * C);
    } else {
        m->be->attention_forward(out, att, qkv, B, T, C, NH, NH, drop);
    }
}

static void mm_forward(const lf_model *m, float *out, const act *inp, const float *weight, const float *bias, int N,
                       int C, int OC, lf_weight_layout layout) {
    if (m->plan_dt == LF_ACT_BF16) m->be->matmul_forward_bf16(out, inp, weight, bias, N, C, OC, layout);
    else m->be->matmul_forward(out, inp, weight, bias, N, C, OC, layout);
}

static void mm_backward(const lf_model *m, float *dinp, float *dweight, float *dbias, const float *dout,
                        const act *inp, const float *weight, int N, int C, int OC, lf_weight_layout layout) {
    if (m->plan_dt == LF_ACT_BF16)
        m->be->matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout);
    else
        m->be->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout);
}

/* Forward of block l. whole = 0 stops after the GELU, with everything the
 * block's backward reads written (full recomputation: c_fc's projection and
 * the block output are not needed again). */
static void block_forward(lf_model *m, replica *rp, int l, int T, int whole) {
    const lf_backend_ops *be = m->be;
    const lf_gpt2_config *c = &m->cfg;
    int B = rp->B, C = c->n_embd, NH = c->n_head;
    int N = B * T;
    uint64_t rowC = (uint64_t)T * C, rowAtt = (uint64_t)NH * T * T;
    layer_acts *a = &rp->la[l];
    const int *ix = m->lp[l];
    const float *residual = block_input(rp, l);
    ln_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, residual, PW(m, ix[P_LN1_W]), PW(m, ix[P_LN1_B]), N, C);
    mm_forward(m, a->qkv, a->ln1, PW(m, ix[P_ATTN_W]), PW(m, ix[P_ATTN_B]), N, C, 3 * C, LF_W_IN_OUT);
    /* attproj is free until c_proj writes it: the fp32 attention output of bf16 storage */
    attn_forward(m, a->atty, a->attproj, a->att, a->qkv, B, T, C, NH, drop_at(m, rp, l, SITE_ATT, rowAtt));
    mm_forward(m, a->attproj, a->atty, PW(m, ix[P_APROJ_W]), PW(m, ix[P_APROJ_B]), N, C, C, LF_W_IN_OUT);
    lf_dropout d1 = drop_at(m, rp, l, SITE_ATT_RESID, rowC);
    if (d1.p > 0) be->dropout_forward(a->attproj, a->attproj, (size_t)N * C, d1);
    be->residual_forward(a->res2, residual, a->attproj, (size_t)N * C);
    ln_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, PW(m, ix[P_LN2_W]), PW(m, ix[P_LN2_B]), N, C);
    mm_forward(m, a->fch, a->ln2, PW(m, ix[P_FC_W]), PW(m, ix[P_FC_B]), N, C, 4 * C, LF_W_IN_OUT);
    gelu_forward(m, a->fch_gelu, a->fch, (size_t)N * 4 * C);
    if (!whole) return;
    mm_forward(m, a->fcproj, a->fch_gelu, PW(m, ix[P_MPROJ_W]), PW(m, ix[P_MPROJ_B]), N, 4 * C, C, LF_W_IN_OUT);
    lf_dropout d2 = drop_at(m, rp, l, SITE_MLP_RESID, rowC);
    if (d2.p > 0) be->dropout_forward(a->fcproj, a->fcproj, (size_t)N * C, d2);
    be->residual_forward(a->res3, a->res2, a->fcproj, (size_t)N * C);
}

static void embed_forward(lf_model *m, replica *rp, int T) {
    const lf_backend_ops *be = m->be;
    int B = rp->B, C = m->cfg.n_embd, L = m->cfg.n_layer;
    be->encoder_forward(rp->encoded, rp->inputs, PW(m, m->wte), PW(m, m->wpe), B, T, C);
    lf_dropout de = drop_at(m, rp, L, SITE_EMB, (uint64_t)T * C);
    if (de.p > 0) be->dropout_forward(rp->encoded, rp->encoded, (size_t)B * T * C, de);
}

static void head_forward(lf_model *m, replica *rp, int T, int with_targets) {
    const lf_backend_ops *be = m->be;
    const lf_gpt2_config *c = &m->cfg;
    int B = rp->B, C = c->n_embd, L = c->n_layer, V = c->vocab_size, Vp = vp_of(c);
    int N = B * T;
    const float *residual = block_input(rp, L);
    ln_forward(m, rp->lnf, rp->lnf_mean, rp->lnf_rstd, residual, PW(m, m->lnf_w), PW(m, m->lnf_b), N, C);
    mm_forward(m, rp->logits, rp->lnf, PW(m, m->wte), NULL, N, C, Vp, LF_W_OUT_IN);

    rp->loss_sum = 0;
    rp->n_valid = 0;
    if (with_targets) {
        int grad = m->opts.dloss > 0.0f;
        be->crossentropy_forward_backward(rp->losses, grad ? rp->logits : NULL, rp->logits, rp->targets, N, V, Vp,
                                          m->opts.dloss);
        /* host read of losses: the CPU backend's memory is host memory; other
         * backends copy N floats back here */
        double sum = 0;
        long cnt = 0;
        for (int i = 0; i < N; i++) {
            if (rp->targets[i] >= 0) {
                sum += rp->losses[i];
                cnt++;
            }
        }
        rp->loss_sum = sum;
        rp->n_valid = cnt;
    }
}

/* The replicas' tasks, one unit at a time (m->task_l names the layer). */
static void embed_task(void *arg, int r) {
    lf_model *m = arg;
    embed_forward(m, &m->rep[r], m->cur_T);
}
static void block_task(void *arg, int r) {
    lf_model *m = arg;
    block_forward(m, &m->rep[r], m->task_l, m->cur_T, 1);
}
static void head_task(void *arg, int r) {
    lf_model *m = arg;
    head_forward(m, &m->rep[r], m->cur_T, m->cur_with_targets);
}

static void head_backward(lf_model *m, replica *rp, int T);
static void block_backward(lf_model *m, replica *rp, int l, int T);
static void embed_backward(lf_model *m, replica *rp, int T);
static void head_bw_task(void *arg, int r) {
    lf_model *m = arg;
    head_backward(m, &m->rep[r], m->cur_T);
}
static void block_bw_task(void *arg, int r) {
    lf_model *m = arg;
    block_backward(m, &m->rep[r], m->task_l, m->cur_T);
}
static void embed_bw_task(void *arg, int r) {
    lf_model *m = arg;
    embed_backward(m, &m->rep[r], m->cur_T);
}

/* One replica runs in the caller with multi-threaded ops; several run
 * concurrently through the backend, each with single-threaded ops. */
static void run_all(lf_model *m, int n_rep, void (*task)(void *, int)) {
    if (n_rep == 1 || !m->be->run_replicas) {
        for (int r = 0; r < n_rep; r++) task(m, r);
    } else {
        m->be->run_replicas(n_rep, task, m);
    }
}

/* ZeRO-3: unit u's parameters in place before it is used (unit 0 has its
 * own buffer; the others share one). The gather is a collective, made from
 * the calling thread, outside the replicas' parallel region. */
static lf_status use_unit(lf_model *m, int u) {
    if (m->params) return LF_OK;
    if (u == 0 ? m->emb_valid : m->blk_unit == u) return LF_OK;
    lf_status st = m->zero.gather_params(m->zero.user, u, u == 0 ? m->pemb : m->pblk);
    if (st != LF_OK) {
        if (u == 0) m->emb_valid = 0;
        else m->blk_unit = -1;
        return st;
    }
    if (u == 0) m->emb_valid = 1;
    else m->blk_unit = u;
    if (m->be->params_changed) m->be->params_changed(); /* cached copies keyed by the buffer's address */
    return LF_OK;
}

/* With whole parameters nothing happens between units: each replica runs
 * its whole forward in one go (no barrier per unit). */
static void forward_task(void *arg, int r) {
    lf_model *m = arg;
    replica *rp = &m->rep[r];
    embed_forward(m, rp, m->cur_T);
    for (int l = 0; l < m->cfg.n_layer; l++) block_forward(m, rp, l, m->cur_T, 1);
    head_forward(m, rp, m->cur_T, m->cur_with_targets);
}

/* The replicas through the units in order: embeddings, blocks, head. */
static lf_status forward_units(lf_model *m, int n_rep) {
    int L = m->cfg.n_layer;
    if (m->params) {
        run_all(m, n_rep, forward_task);
        return LF_OK;
    }
    lf_status st = use_unit(m, 0);
    if (st != LF_OK) return st;
    run_all(m, n_rep, embed_task);
    for (int l = 0; l < L; l++) {
        if ((st = use_unit(m, 1 + l)) != LF_OK) return st;
        m->task_l = l;
        run_all(m, n_rep, block_task);
    }
    if ((st = use_unit(m, L + 1)) != LF_OK) return st;
    run_all(m, n_rep, head_task); /* lm_head: wte, still in unit 0's buffer */
    return LF_OK;
}

lf_status lf_model_forward(lf_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                           const lf_forward_opts *opts, double *loss_sum, long *n_valid) {
    const lf_gpt2_config *c = &m->cfg;
    if (!m->act_block || B > m->plan_B || T > m->plan_T) {
        lf_status st = lf_model_plan(m, B > m->plan_B ? B : m->plan_B, T > m->plan_T ? T : m->plan_T, NULL);
        if (st != LF_OK) return st;
    }
    int V = c->vocab_size, N = B * T;
    for (int i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) {
            snprintf(m->errmsg, sizeof m->errmsg, "input token %d at position %d is outside the vocabulary [0, %d)",
                     inputs[i], i, V);
            return lf_fail(LF_ERR_RANGE, "%s", m->errmsg);
        }
        if (targets && targets[i] >= V) {
            snprintf(m->errmsg, sizeof m->errmsg, "target token %d at position %d is outside the vocabulary [0, %d)",
                     targets[i], i, V);
            return lf_fail(LF_ERR_RANGE, "%s", m->errmsg);
        }
    }
    lf_forward_opts none = {0};
    m->opts = opts ? *opts : none;
    m->cur_B = B;
    m->cur_T = T;
    memcpy(m->inputs, inputs, sizeof(int32_t) * (size_t)N);
    if (targets) memcpy(m->targets, targets, sizeof(int32_t) * (size_t)N);

    /* split the rows over the replicas (fewer when B is small) */
    int rB = m->rep_B, n_rep = (B + rB - 1) / rB;
    size_t Vp = (size_t)vp_of(c);
    for (int r = 0; r < n_rep; r++) {
        replica *rp = &m->rep[r];
        rp->b0 = r * rB;
        rp->B = B - rp->b0 < rB ? B - rp->b0 : rB;
        size_t row = (size_t)rp->b0 * T;
        rp->logits = m->logits + row * Vp;
        rp->losses = m->losses + row;
        rp->inputs = m->inputs + row;
        rp->targets = m->targets + row;
    }
    m->cur_rep = n_rep;
    m->cur_with_targets = targets != NULL;
    lf_status st = forward_units(m, n_rep);
    if (st != LF_OK) {
        m->have_dlogits = 0;
        return st;
    }
    double sum = 0;
    long cnt = 0;
    for (int r = 0; r < n_rep; r++) { /* fixed order: deterministic */
        sum += m->rep[r].loss_sum;
        cnt += m->rep[r].n_valid;
    }
    m->have_dlogits = targets && m->opts.dloss > 0.0f;
    if (loss_sum) *loss_sum = sum;
    if (n_valid) *n_valid = cnt;
    return LF_OK;
}

#define GR(m, rp, idx) grad_at(m, rp, idx)

/* lm_head (tied to wte) and ln_f. */
static void head_backward(lf_model *m, replica *rp, int T) {
    const lf_backend_ops *be = m->be;
    const lf_gpt2_config *c = &m->cfg;
    int B = rp->B, C = c->n_embd, L = c->n_layer, Vp = vp_of(c);
    int N = B * T;
    be->zero(rp->dresidual, (size_t)N * C);
    mm_backward(m, rp->dln, GR(m, rp, m->wte), NULL, rp->logits, rp->lnf, PW(m, m->wte), N, C, Vp, LF_W_OUT_IN);
    const float *last = block_input(rp, L);
    be->layernorm_backward(rp->dresidual, GR(m, rp, m->lnf_w), GR(m, rp, m->lnf_b), rp->dln, last, PW(m, m->lnf_w),
                           rp->lnf_mean, rp->lnf_rstd, N, C);
}

/* Block l: on entry rp->dresidual is d(block output), on exit d(block input). */
static void block_backward(lf_model *m, replica *rp, int l, int T) {
    const lf_backend_ops *be = m->be;
    const lf_gpt2_config *c = &m->cfg;
    int B = rp->B, C = c->n_embd, NH = c->n_head, L = c->n_layer;
    int N = B * T;
    size_t NC = (size_t)N * C;
    uint64_t rowC = (uint64_t)T * C, rowAtt = (uint64_t)NH * T * T;
    layer_acts *a = &rp->la[l];
    const int *ix = m->lp[l];
    const float *residual = block_input(rp, l);
    /* Recompute what the plan did not keep, each right before it is read.
     * full: the working set still holds the last block from forward. */
    if (m->plan_rc == LF_RECOMPUTE_FULL && l < L - 1) block_forward(m, rp, l, T, 0);
    if (m->plan_rc == LF_RECOMPUTE_SELECTIVE) {
        ln_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, PW(m, ix[P_LN2_W]), PW(m, ix[P_LN2_B]), N, C);
        gelu_forward(m, a->fch_gelu, a->fch, NC * 4);
    }
    /* dresidual = d(res3); res3 = res2 + dropout(fcproj) */
    lf_dropout d2 = drop_at(m, rp, l, SITE_MLP_RESID, rowC);
    const float *dbr = rp->dresidual;
    if (d2.p > 0) {
        be->dropout_backward(rp->dbranch, rp->dresidual, NC, d2);
        dbr = rp->dbranch;
    }
    mm_backward(m, rp->dfch_gelu, GR(m, rp, ix[P_MPROJ_W]), GR(m, rp, ix[P_MPROJ_B]), dbr, a->fch_gelu,
                PW(m, ix[P_MPROJ_W]), N, 4 * C, C, LF_W_IN_OUT);
    be->gelu_backward(rp->dfch, a->fch, rp->dfch_gelu, NC * 4);
    mm_backward(m, rp->dln, GR(m, rp, ix[P_FC_W]), GR(m, rp, ix[P_FC_B]), rp->dfch, a->ln2, PW(m, ix[P_FC_W]), N, C,
                4 * C, LF_W_IN_OUT);
    be->layernorm_backward(rp->dresidual, GR(m, rp, ix[P_LN2_W]), GR(m, rp, ix[P_LN2_B]), rp->dln, a->res2,
                           PW(m, ix[P_LN2_W]), a->ln2_mean, a->ln2_rstd, N, C);
    /* dresidual = d(res2); res2 = residual + dropout(attproj) */
    lf_dropout d1 = drop_at(m, rp, l, SITE_ATT_RESID, rowC);
    dbr = rp->dresidual;
    if (d1.p > 0) {
        be->dropout_backward(rp->dbranch, rp->dresidual, NC, d1);
        dbr = rp->dbranch;
    }
    mm_backward(m, rp->datty, GR(m, rp, ix[P_APROJ_W]), GR(m, rp, ix[P_APROJ_B]), dbr, a->atty,
                PW(m, ix[P_APROJ_W]), N, C, C, LF_W_IN_OUT);
    be->attention_backward(rp->dqkv, rp->att_scratch, rp->datty, a->qkv, a->att, B, T, C, NH, NH,
                           drop_at(m, rp, l, SITE_ATT, rowAtt));
    if (m->plan_rc == LF_RECOMPUTE_SELECTIVE) /* ln_1's output shares ln_2's buffer */
        ln_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, residual, PW(m, ix[P_LN1_W]), PW(m, ix[P_LN1_B]), N, C);
    mm_backward(m, rp->dln, GR(m, rp, ix[P_ATTN_W]), GR(m, rp, ix[P_ATTN_B]), rp->dqkv, a->ln1, PW(m, ix[P_ATTN_W]),
                N, C, 3 * C, LF_W_IN_OUT);
    be->layernorm_backward(rp->dresidual, GR(m, rp, ix[P_LN1_W]), GR(m, rp, ix[P_LN1_B]), rp->dln, residual,
                           PW(m, ix[P_LN1_W]), a->ln1_mean, a->ln1_rstd, N, C);
}

static void embed_backward(lf_model *m, replica *rp, int T) {
    const lf_backend_ops *be = m->be;
    int B = rp->B, C = m->cfg.n_embd, L = m->cfg.n_layer;
    size_t NC = (size_t)B * T * C;
    lf_dropout de = drop_at(m, rp, L, SITE_EMB, (uint64_t)T * C);
    const float *denc = rp->dresidual;
    if (de.p > 0) {
        be->dropout_backward(rp->dbranch, rp->dresidual, NC, de);
        denc = rp->dbranch;
    }
    be->encoder_backward(GR(m, rp, m->wte), GR(m, rp, m->wpe), denc, rp->inputs, B, T, C);
}

/* Unit buffers start each backward of their unit at zero (matmul and
 * layernorm backwards add into the gradient). */
static void zero_unit_grads(lf_model *m, int n_rep, int emb) {
    for (int r = 0; r < n_rep; r++) {
        replica *rp = &m->rep[r];
        if (rp->gfull) continue;
        if (emb) m->be->zero(rp->gemb, m->unit0_n);
        else m->be->zero(rp->gblk, m->max_other_n);
    }
}

/* Unit u's backward is done on every replica: the replicas' gradients are
 * added in replica order (1, 2, ...) into replica 0's: the model's whole
 * buffer, or under ZeRO-2/3 replica 0's unit buffer, which then goes to
 * reduce_grads. */
static lf_status finish_unit(lf_model *m, int n_rep, int u) {
    size_t lo = m->unit_lo[u], n = m->unit_n[u];
    float *dst = m->rep[0].gfull ? m->rep[0].gfull + lo : (u == 0 ? m->rep[0].gemb : m->rep[0].gblk);
    for (int r = 1; r < n_rep; r++) m->be->add_inplace(dst, u == 0 ? m->rep[r].gemb : m->rep[r].gblk, n);
    return m->zero.partition_grads ? m->zero.reduce_grads(m->zero.user, u, dst) : LF_OK;
}

lf_status lf_model_backward(lf_model *m) {
    if (!m->have_dlogits) {
        snprintf(m->errmsg, sizeof m->errmsg, "backward without a training forward (forward needs targets and dloss > 0)");
        return lf_fail(LF_ERR_INVALID_ARG, "%s", m->errmsg);
    }
    m->have_dlogits = 0;
    int n_rep = m->cur_rep, L = m->cfg.n_layer;
    lf_status st = use_unit(m, 0);
    if (st == LF_OK) st = use_unit(m, L + 1);
    if (st != LF_OK) return st;
    zero_unit_grads(m, n_rep, 1);
    zero_unit_grads(m, n_rep, 0);
    run_all(m, n_rep, head_bw_task);
    if ((st = finish_unit(m, n_rep, L + 1)) != LF_OK) return st;
    for (int l = L - 1; l >= 0; l--) {
        if ((st = use_unit(m, 1 + l)) != LF_OK) return st;
        zero_unit_grads(m, n_rep, 0);
        m->task_l = l;
        run_all(m, n_rep, block_bw_task);
        if ((st = finish_unit(m, n_rep, 1 + l)) != LF_OK) return st;
    }
    if ((st = use_unit(m, 0)) != LF_OK) return st;
    run_all(m, n_rep, embed_bw_task);
    return finish_unit(m, n_rep, 0);
}
