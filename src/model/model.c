/*
 * The architecture-neutral model runtime: lifecycle, flat parameter and
 * gradient buffers, ZeRO units and hooks, model replicas, the activation
 * planner, and the forward/backward drivers. What differs between
 * architectures is behind lf__model_arch (model_impl.h): gpt2.c, llama.c;
 * the registry and what a config is before a model exists are arch.c's.
 *
 * Invariants:
 *  - Parameters and gradients are one contiguous buffer each, in the order of
 *    the architecture's parameter table; tensors are addressed by offset only.
 *  - Activations live in one block planned for (B, T) by lf_model_plan; a
 *    forward with a smaller B or T uses a prefix of each slot. Nothing is
 *    allocated in forward or backward.
 *  - Parameter gradients accumulate across backward calls until
 *    lf_model_zero_grad (so micro-batches add up).
 *  - The fused classifier writes dlogits over the logits during forward when
 *    opts->dloss > 0, so the logits of a training forward are not kept.
 *  - Dropout masks are keyed by (opts->seed, lf_rng_mix(opts->key, site)), so
 *    backward regenerates them and a resumed run draws the same masks.
 *  - The replicas' losses are summed in replica order, their gradients added
 *    in replica order into replica 0's: results do not depend on timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model_impl.h"

/* Units (lf_model_num_units): the flat range of each, from the table's unit
 * numbers (contiguous and increasing: the architectures lay them out so). */
static void unit_ranges(const lf_param_info *t, int count, int n_units, size_t total, size_t *lo, size_t *n) {
    for (int u = 0; u < n_units; u++) lo[u] = total;
    for (int i = count - 1; i >= 0; i--) lo[t[i].unit] = t[i].offset;
    for (int u = n_units - 2; u >= 0; u--)
        if (lo[u] > lo[u + 1]) lo[u] = lo[u + 1]; /* an empty unit */
    for (int u = 0; u < n_units; u++) n[u] = (u + 1 < n_units ? lo[u + 1] : total) - lo[u];
}

size_t lf_model_unit_sizes(const lf_model_config *cfg, size_t *unit0, size_t *max_other) {
    *unit0 = *max_other = 0;
    lf_param_info *t;
    int count;
    size_t total;
    if (lf_model_param_table(cfg, &t, &count, &total) != LF_OK) return 0;
    int U = cfg->n_layer + 2;
    size_t *lo = malloc(2 * sizeof(size_t) * (size_t)U);
    if (!lo) {
        lf_free(t);
        return 0;
    }
    unit_ranges(t, count, U, total, lo, lo + U);
    *unit0 = lo[U];
    for (int k = 1; k < U; k++)
        if (lo[U + k] > *max_other) *max_other = lo[U + k];
    free(lo);
    lf_free(t);
    return total;
}

size_t lf_model_zero_work_bytes(const lf_model_config *cfg, int partition_grads, int partition_params) {
    size_t u0, mo;
    if (!lf_model_unit_sizes(cfg, &u0, &mo)) return 0;
    size_t one = lf_arena_round(u0 * sizeof(float)) + lf_arena_round(mo * sizeof(float));
    return (partition_grads ? one : 0) + (partition_params ? one : 0);
}

size_t lf_model_zero_block_bytes(const lf_model_config *cfg) {
    size_t u0, mo;
    if (!lf_model_unit_sizes(cfg, &u0, &mo)) return 0;
    return lf_arena_round(mo * sizeof(float));
}

/* ---------------------------------------------------------------- lifecycle */

/* The backend can store matmul inputs in bf16 (its activation dtypes). */
static int bf16_acts_supported(const lf_model *m) {
    return m->arch->bf16_acts && (m->be->ops->act_dtypes & LF_DT_BIT(LF_DT_BF16));
}

lf_status lf_model_create(lf_model **out, const lf_model_config *cfg, lf_backend *be) {
    *out = NULL;
    if (!be) return lf_fail(LF_ERR_INVALID_ARG, "no backend given");
    lf_model_config c;
    const lf__model_arch *a;
    lf_status st = lf__model_resolved(cfg, &c, &a);
    if (st != LF_OK) return st;
    lf_model *m = calloc(1, sizeof *m);
    if (!m) return lf_fail(LF_ERR_NOMEM, "out of memory creating the model");
    m->cfg = c;
    m->arch = a;
    m->be = be;
    if ((st = a->param_table(&m->cfg, &m->table, &m->n_tensors, &m->num_params)) != LF_OK) goto fail;
    if ((st = lf__model_bind(m)) != LF_OK) goto fail;
    m->n_units = c.n_layer + 2;
    m->unit_lo = calloc(2 * (size_t)m->n_units, sizeof(size_t));
    if (!m->unit_lo) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory");
        goto fail;
    }
    m->unit_n = m->unit_lo + m->n_units;
    unit_ranges(m->table, m->n_tensors, m->n_units, m->num_params, m->unit_lo, m->unit_n);
    m->unit0_n = m->unit_n[0];
    for (int u = 1; u < m->n_units; u++)
        if (m->unit_n[u] > m->max_other_n) m->max_other_n = m->unit_n[u];
    m->blk_unit = -1;
    m->pf_unit = -1;
    m->act_dt = bf16_acts_supported(m) ? LF_ACT_BF16 : LF_ACT_FP32;
    size_t bytes = m->num_params * sizeof(float);
    m->params = be->ops->alloc(be, bytes);
    m->grads = be->ops->alloc(be, bytes);
    if (!m->params || !m->grads) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory allocating %zu parameters (%.1f MB each for weights and gradients)",
                     m->num_params, bytes / 1e6);
        goto fail;
    }
    be->ops->zero(be, m->params, m->num_params);
    be->ops->zero(be, m->grads, m->num_params);
    *out = m;
    return LF_OK;
fail:
    lf_model_free(m);
    return st;
}

static void free_plan(lf_model *m) {
    if (m->act_block) m->be->ops->free(m->be, m->act_block);
    m->act_block = NULL;
    if (m->lora_u) m->be->ops->free(m->be, m->lora_u);
    m->lora_u = m->lora_du = m->lora_x = m->lora_dx = NULL;
    if (m->rep)
        for (int r = 0; r < m->n_rep; r++) free(m->rep[r].acts);
    free(m->rep);
    m->rep = NULL;
    m->plan_B = m->plan_T = m->n_rep = m->rep_B = 0;
    memset(&m->act, 0, sizeof m->act);
    m->have_dlogits = 0; /* the activations a backward would read are gone */
    lf__packed_free(m);
}

void lf_model_free(lf_model *m) {
    if (!m) return;
    free_plan(m);
    if (m->borrowed) { /* a session's view: everything else is the model's */
        free(m);
        return;
    }
    lf__lora_free(m);
    lf__lora_bank_free(m);
    if (m->params) m->be->ops->free(m->be, m->params);
    if (m->grads) m->be->ops->free(m->be, m->grads);
    if (m->pblk1 && m->pf_unit >= 0)
        (void)m->zero.gather_wait(m->zero.user, m->pf_ticket); /* nothing writes a freed buffer */
    float *work[6] = {m->pemb, m->pblk1 ? m->pblk_a : m->pblk, m->gemb0, m->gblk0, m->gblk1, m->pblk1};
    for (int i = 0; i < 6; i++)
        if (work[i]) m->be->ops->free(m->be, work[i]);
    free(m->ix);
    lf_free(m->table);
    free(m->unit_lo);
    free(m);
}

lf_status lf_model_init_weights(lf_model *m, uint64_t seed) {
    float *host = lf_alloc(m->num_params * sizeof(float));
    if (!host) return lf_fail(LF_ERR_NOMEM, "out of memory initialising %zu parameters", m->num_params);
    m->arch->init_weights(&m->cfg, m->table, m->n_tensors, host, seed);
    m->be->ops->to_device(m->be, m->params, host, m->num_params * sizeof(float));
    lf_free(host);
    return LF_OK;
}

const lf_model_config *lf_model_get_config(const lf_model *m) { return &m->cfg; }
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
    lf_backend *be = m->be;
    if (z->prefetch_params && (!z->partition_params || !z->gather_start || !z->gather_wait))
        return lf_fail(LF_ERR_INVALID_ARG,
                       "lf_model_set_zero: prefetch needs partitioned parameters and its callbacks");
    float *buf[6] = {NULL, NULL, NULL, NULL, NULL, NULL}; /* pemb, pblk, gemb0, gblk0, gblk1, pblk1 */
    int ok = 1;
    for (int i = 0; i < 6; i++) {
        int want = i < 2    ? z->partition_params
                   : i < 4  ? z->partition_grads
                   : i == 4 ? z->partition_grads && z->double_buffer_grads
                            : z->partition_params && z->prefetch_params;
        if (!want) continue;
        buf[i] = be->ops->alloc(be, (i % 2 || i >= 4 ? m->max_other_n : m->unit0_n) * sizeof(float));
        ok &= buf[i] != NULL;
    }
    if (!ok) {
        for (int i = 0; i < 6; i++)
            if (buf[i]) be->ops->free(be, buf[i]);
        return lf_fail(LF_ERR_NOMEM, "out of memory allocating the ZeRO unit buffers");
    }
    free_plan(m); /* replica 0's gradient pointers change */
    m->zero = *z;
    m->pemb = buf[0];
    m->pblk = buf[1];
    m->gemb0 = buf[2];
    m->gblk0 = buf[3];
    m->gblk1 = buf[4];
    m->pblk_a = buf[1];
    m->pblk1 = buf[5];
    m->pf_unit = -1;
    if (z->partition_grads) {
        be->ops->free(be, m->grads);
        m->grads = NULL;
    }
    if (z->partition_params) {
        be->ops->free(be, m->params);
        m->params = NULL;
    }
    m->emb_valid = 0;
    m->blk_unit = -1;
    return LF_OK;
}

void lf_model_state_bytes(const lf_model *m, size_t *params, size_t *grads) {
    lf_backend *be = m->be;
    size_t (*n)(lf_backend *, const void *) = be->ops->allocated;
    *params = n(be, m->params) + n(be, m->pemb) + n(be, m->pblk1 ? m->pblk_a : m->pblk) + n(be, m->pblk1);
    *grads = n(be, m->grads) + n(be, m->gemb0) + n(be, m->gblk0) + n(be, m->gblk1);
    if (m->lora) {
        *params += n(be, m->lora->params);
        *grads += n(be, m->lora->grads);
    }
}

void lf_model_params_changed(lf_model *m) {
    m->emb_valid = 0;
    m->blk_unit = -1;
    if (m->pblk1 &&
        m->pf_unit >= 0) { /* gathered from the old shard: dropped, once complete (its errors surface later) */
        (void)m->zero.gather_wait(m->zero.user, m->pf_ticket);
        m->pf_unit = -1;
    }
}
const lf_param_info *lf_model_find_param(const lf_model *m, const char *name) {
    int i = lf__param_index(m, name);
    return i < 0 ? NULL : &m->table[i];
}
const float *lf_model_logits(const lf_model *m) { return m->logits; }
const char *lf_model_errmsg(const lf_model *m) { return m->errmsg; }
void lf_model_zero_grad(lf_model *m) {
    if (m->grads) m->be->ops->zero(m->be, m->grads, m->num_params);
    if (m->lora) m->be->ops->zero(m->be, m->lora->grads, m->lora->total);
}

/* ---------------------------------------------------------------- activation plan */

/* Two passes over the same list of slots: the first sums sizes, the second
 * hands out pointers. Keeping one list means the plan and the allocation
 * cannot disagree, and lf_model_plan_bytes runs the first pass alone. */
void *lf__slot_bytes(lf__planner *p, int cat, size_t bytes) {
    bytes = lf_arena_round(bytes);
    void *ptr = p->base ? p->base + p->used : NULL;
    p->used += bytes;
    p->cat[cat] += bytes;
    return ptr;
}

float *lf__slot(lf__planner *p, int cat, size_t floats) { return lf__slot_bytes(p, cat, floats * sizeof(float)); }

/* Replica r's slots: the architecture's activations, then (r > 0) its unit
 * gradient buffers; replica 0 uses the model's. rp is NULL while sizing. */
static void lay_out_replica(const lf__model_arch *a, const lf__plan_spec *s, lf__replica *rp, int r, lf__planner *p,
                            const lf_model *m) {
    a->lay_out_replica(s, rp ? rp->acts : NULL, p);
    if (s->infer) {
        if (rp) rp->gfull = rp->gemb = rp->gblk = NULL;
    } else if (r > 0) {
        float *gemb = lf__slot(p, LF__CAT_GRADS, s->unit0_n);
        float *gblk = lf__slot(p, LF__CAT_GRADS, s->max_other_n);
        if (rp) {
            rp->gfull = NULL;
            rp->gemb = gemb;
            rp->gblk = gblk;
        }
    } else if (rp && m) {
        rp->gfull = m->grads; /* NULL under ZeRO-2/3: the unit buffers instead */
        rp->gemb = m->gemb0;
        rp->gblk = m->gblk0;
    }
}

void lf__plan_attention(lf__plan_spec *s, const lf_backend_ops *ops, int with_cache) {
    const int NH = s->cfg->n_head;
    s->att_saved = ops->attention_saved(s->rB, NH, s->T);
    s->att_scratch = s->infer ? 0 : ops->attention_scratch(s->rB, NH, s->T);
    if (with_cache) { /* the saved slot is attention_cached's scratch while decoding (lf__attention) */
        const size_t kv = ops->attention_cached_scratch(s->rB, NH, s->T, 0);
        if (kv > s->att_saved) s->att_saved = kv;
    }
}

/* m is NULL while sizing without a model (lf_model_plan_bytes). */
void lf__lay_out(const lf__model_arch *a, const lf__plan_spec *s, lf_model *m, lf__planner *p) {
    size_t N = (size_t)s->B * s->T, Vp = (size_t)lf__vp(s->cfg);
    float *logits = lf__slot(p, LF__CAT_LOGITS, N * Vp);
    float *losses = lf__slot(p, LF__CAT_LOGITS, N);
    int32_t *inputs = (int32_t *)lf__slot(p, LF__CAT_LOGITS, N);
    int32_t *targets = (int32_t *)lf__slot(p, LF__CAT_LOGITS, N);
    if (m) {
        m->logits = logits;
        m->losses = losses;
        m->inputs = inputs;
        m->targets = targets;
    }
    for (int r = 0; r < s->n_rep; r++) lay_out_replica(a, s, m && m->rep ? &m->rep[r] : NULL, r, p, m);
}

static void act_bytes_of(const lf__planner *p, lf_act_bytes *out) {
    out->total = p->used;
    out->saved = p->cat[LF__CAT_SAVED];
    out->work = p->cat[LF__CAT_WORK];
    out->logits = p->cat[LF__CAT_LOGITS];
    out->replica_grads = p->cat[LF__CAT_GRADS];
}

/* Rows per replica, and replicas left once none is empty. */
void lf__split_rows(int B, int n_rep, int *rB, int *n_out) {
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

lf_status lf_model_plan_bytes(const lf_model_config *cfg, int B, int T, lf_recompute policy, lf_act_dtype dtype,
                              int n_replicas, lf_act_bytes *out) {
    return lf__model_plan_bytes_ops(cfg, B, T, policy, dtype, n_replicas, NULL, out);
}

lf_status lf__model_plan_bytes_ops(const lf_model_config *cfg, int B, int T, lf_recompute policy, lf_act_dtype dtype,
                                   int n_replicas, const lf_backend_ops *ops, lf_act_bytes *out) {
    memset(out, 0, sizeof *out);
    lf_model_config c;
    const lf__model_arch *a;
    lf_status st = lf__model_resolved(cfg, &c, &a);
    if (st != LF_OK) return st;
    if (B < 1 || T < 1 || n_replicas < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "activation plan: batch %d x %d over %d replicas is empty", B, T,
                       n_replicas);
    if (T > c.block_size)
        return lf_fail(LF_ERR_RANGE, "sequence length %d exceeds model.block_size %d", T, c.block_size);
    if (!recompute_valid(policy)) return lf_fail(LF_ERR_INVALID_ARG, "unknown recompute policy %d", (int)policy);
    if (!act_dtype_valid(dtype)) return lf_fail(LF_ERR_INVALID_ARG, "unknown activation dtype %d", (int)dtype);
    if (dtype == LF_ACT_BF16 && !a->bf16_acts)
        return lf_fail(LF_ERR_UNSUPPORTED, "model.arch %s keeps its activations in fp32", a->name);
    lf__plan_spec s = {.cfg = &c, .rc = policy, .dt = dtype, .B = B, .T = T};
    s.num_params = lf_model_unit_sizes(&c, &s.unit0_n, &s.max_other_n);
    if (!s.num_params) return lf_fail(LF_ERR_NOMEM, "out of memory sizing the activation plan");
    lf__split_rows(B, n_replicas, &s.rB, &s.n_rep);
    /* sized as the given backend's attention saves (default: the CPU's) */
    lf__plan_attention(&s, ops ? ops : lf__backend_cpu(), 0);
    lf__planner p = {0};
    lf__lay_out(a, &s, NULL, &p);
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
    if (dtype == LF_ACT_BF16 && !bf16_acts_supported(m))
        return lf_fail(LF_ERR_UNSUPPORTED,
                       m->arch->bf16_acts
                           ? "backend '%s' keeps activations in fp32 (bf16 activation storage needs cpu-bf16)"
                           : "model.arch %s keeps its activations in fp32",
                       m->arch->bf16_acts ? m->be->ops->name : m->arch->name);
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
    const lf__model_arch *a = m->arch;
    lf__plan_spec s = {.cfg = &m->cfg,
                       .num_params = m->num_params,
                       .unit0_n = m->unit0_n,
                       .max_other_n = m->max_other_n,
                       .rc = m->recompute,
                       .dt = m->act_dt,
                       .B = B,
                       .T = T,
                       .infer = m->borrowed};
    /* LoRA: one replica (the adapters' gradients and scratch are not per replica) */
    lf__split_rows(B, m->be->ops->replicas && !m->lora ? m->be->ops->replicas(m->be, B) : 1, &s.rB, &s.n_rep);
    lf__plan_attention(&s, m->be->ops, m->kv_planned);
    lf__planner p = {0};
    lf__lay_out(a, &s, NULL, &p); /* sizing pass */
    m->rep = calloc((size_t)s.n_rep, sizeof *m->rep);
    int ok = m->rep != NULL;
    m->n_rep = ok ? s.n_rep : 0;
    for (int r = 0; ok && r < s.n_rep; r++) {
        m->rep[r].acts = calloc(1, a->acts_size + (size_t)m->cfg.n_layer * a->layer_size);
        ok = m->rep[r].acts != NULL;
        if (ok) *(void **)m->rep[r].acts = (unsigned char *)m->rep[r].acts + a->acts_size; /* its per-layer entries */
    }
    m->act_block = ok ? m->be->ops->alloc(m->be, p.used) : NULL;
    if (m->act_block && (m->lora || m->n_bank)) { /* LoRA's scratch: u, du, and with dropout x and dx */
        const size_t rows = (size_t)B * T, nu = rows * (size_t)lf__lora_max_r(m);
        const size_t drop = m->lora ? lf__lora_scratch_floats(&m->lora->cfg, &m->cfg, rows) -
                                          2 * rows * (size_t)m->lora->cfg.r
                                    : 0; /* lora.dropout's x and dx */
        const size_t all = 2 * nu + drop;
        const size_t nx = (all - 2 * nu) / 2;
        m->lora_u = m->be->ops->alloc(m->be, all * sizeof(float));
        m->lora_du = m->lora_u ? m->lora_u + nu : NULL;
        m->lora_x = m->lora_u && nx ? m->lora_u + 2 * nu : NULL;
        m->lora_dx = m->lora_x ? m->lora_x + nx : NULL;
        if (!m->lora_u) {
            m->be->ops->free(m->be, m->act_block);
            m->act_block = NULL;
        }
    }
    if (!m->act_block) {
        size_t need = p.used;
        free_plan(m);
        return lf_fail(LF_ERR_NOMEM,
                       "out of memory allocating %.1f MB of activations for batch %d x %d (recompute %s, %s matmul "
                       "inputs)",
                       need / 1e6, B, T, lf_recompute_name(s.rc), lf_act_dtype_name(s.dt));
    }
    lf__planner q = {.base = m->act_block};
    lf__lay_out(a, &s, m, &q);
    m->plan_B = B;
    m->plan_T = T;
    m->rep_B = s.rB;
    m->plan_rc = s.rc;
    m->plan_dt = s.dt;
    act_bytes_of(&q, &m->act);
    if (bytes) *bytes = q.used;
    return LF_OK;
}

/* ---------------------------------------------------------------- helpers for the architectures */

float *lf__param_at(const lf_model *m, int idx) {
    if (idx < 0) return NULL;
    size_t off = m->table[idx].offset;
    if (m->params) return m->params + off;
    int u = m->table[idx].unit;
    return (u == 0 ? m->pemb : m->pblk) + (off - m->unit_lo[u]);
}

float *lf__grad_at(const lf_model *m, const lf__replica *rp, int idx) {
    if (idx < 0 || m->lora) return NULL; /* LoRA: the base is frozen */
    size_t off = m->table[idx].offset;
    if (rp->gfull) return rp->gfull + off;
    int u = m->table[idx].unit;
    return (u == 0 ? rp->gemb : rp->gblk) + (off - m->unit_lo[u]);
}

lf_dropout lf__drop_at(const lf_model *m, const lf__replica *rp, int layer, int site, uint64_t row_elems) {
    lf_dropout d = {0};
    if (!m->opts.train || m->cfg.dropout <= 0.0f) return d;
    d.p = m->cfg.dropout;
    d.seed = m->opts.seed;
    d.key = lf_rng_mix(m->opts.key, (uint64_t)layer * 8u + (uint64_t)site);
    d.offset = (uint64_t)rp->b0 * row_elems;
    return d;
}

/* The storage of matmul-input activations in the plan in place. */
static inline lf_dtype act_dt(const lf_model *m) { return m->plan_dt == LF_ACT_BF16 ? LF_DT_BF16 : LF_DT_F32; }

void lf__ln_forward(const lf_model *m, void *out, float *mean, float *rstd, const float *inp, const float *weight,
                    const float *bias, int N, int C) {
    m->be->ops->layernorm_forward(m->be, out, act_dt(m), mean, rstd, inp, weight, bias, N, C);
}

void lf__rms_forward(const lf_model *m, void *out, float *rstd, const float *inp, const float *weight, int N, int C,
                     float eps) {
    m->be->ops->rmsnorm_forward(m->be, out, act_dt(m), rstd, inp, weight, N, C, eps);
}

void lf__res_ln_forward(const lf_model *m, float *res, void *out, float *mean, float *rstd, const float *a,
                        const float *b, const float *weight, const float *bias, int N, int C) {
    lf_backend *be = m->be;
    if (be->ops->residual_layernorm_forward) {
        be->ops->residual_layernorm_forward(be, res, out, act_dt(m), mean, rstd, a, b, weight, bias, N, C);
        return;
    }
    be->ops->residual_forward(be, res, a, b, (size_t)N * C);
    lf__ln_forward(m, out, mean, rstd, res, weight, bias, N, C);
}

void lf__res_rms_forward(const lf_model *m, float *res, void *out, float *rstd, const float *a, const float *b,
                         const float *weight, int N, int C, float eps) {
    lf_backend *be = m->be;
    if (be->ops->residual_rmsnorm_forward) {
        be->ops->residual_rmsnorm_forward(be, res, out, act_dt(m), rstd, a, b, weight, N, C, eps);
        return;
    }
    be->ops->residual_forward(be, res, a, b, (size_t)N * C);
    lf__rms_forward(m, out, rstd, res, weight, N, C, eps);
}

void lf__act_convert(const lf_model *m, void *out, const float *inp, size_t n) {
    m->be->ops->convert(m->be, out, act_dt(m), inp, n);
}

void lf__mm_forward(const lf_model *m, float *out, const void *inp, const float *weight, const float *bias, int N,
                    int C, int OC, lf_weight_layout layout) {
    m->be->ops->matmul_forward(m->be, out, inp, act_dt(m), weight, bias, N, C, OC, layout);
    if (m->lora || m->n_bank) lf__lora_forward(m, out, inp, weight, N, C, OC, layout);
}

void lf__mm_backward(const lf_model *m, float *dinp, float *dweight, float *dbias, const float *dout, const void *inp,
                     const float *weight, int N, int C, int OC, lf_weight_layout layout) {
    m->be->ops->matmul_backward(m->be, dinp, dweight, dbias, dout, inp, act_dt(m), weight, N, C, OC, layout);
    if (m->lora) lf__lora_backward(m, dinp, dout, inp, weight, N, C, OC, layout); /* dweight, dbias NULL: frozen */
}

/* Tn new rows of B batch rows at positions pos0.. against caches kc, vc
 * (B, NKV, Tmax, HS). A sliding window's cache is a ring of Tmax = W slots
 * (session.c): position p lives in slot p % W, and the keys a query at p
 * attends (p - W + 1 .. p) are then exactly the W slots once p >= W - 1,
 * so it attends all of them (attention_cached at pos0 = W - 1; softmax
 * does not care about the keys' order, the RoPE rotation was applied at
 * the absolute position before the append). While every position fits
 * (pos0 + Tn <= Tmax) slot p is position p: the plain call, as without a
 * window. Past that, rows still below Tmax go as one call per batch row,
 * the rest one row at a time (each appended before it attends). */
static void cached_run(const lf_model *m, float *out, float *att, const float *qkv, float *kc, float *vc, int B, int Tn,
                       int pos0, int Tmax) {
    const lf_backend_ops *o = m->be->ops;
    const lf_model_config *c = &m->cfg;
    const int NH = c->n_head, NKV = c->n_kv_head, HS = lf__head_size(c), C = NH * HS;
    if (pos0 + Tn <= Tmax) {
        o->kv_append(m->be, kc, vc, qkv, B, Tn, NH, NKV, HS, pos0, Tmax);
        o->attention_cached(m->be, out, att, qkv, kc, vc, B, Tn, C, NH, NKV, pos0, Tmax);
        return;
    }
    const size_t W = (size_t)C + 2 * (size_t)NKV * HS, row = (size_t)NKV * Tmax * HS;
    const int n0 = pos0 < Tmax ? Tmax - pos0 : 0; /* rows whose position is below Tmax */
    for (int b = 0; b < B; b++) {
        float *kb = kc + (size_t)b * row, *vb = vc + (size_t)b * row;
        const size_t r = (size_t)b * Tn;
        if (n0) {
            o->kv_append(m->be, kb, vb, qkv + r * W, 1, n0, NH, NKV, HS, pos0, Tmax);
            o->attention_cached(m->be, out + r * C, att, qkv + r * W, kb, vb, 1, n0, C, NH, NKV, pos0, Tmax);
        }
        for (int t = n0; t < Tn; t++) {
            const size_t rt = r + (size_t)t;
            o->kv_append(m->be, kb, vb, qkv + rt * W, 1, 1, NH, NKV, HS, (pos0 + t) % Tmax, Tmax);
            o->attention_cached(m->be, out + rt * C, att, qkv + rt * W, kb, vb, 1, 1, C, NH, NKV, Tmax - 1, Tmax);
        }
    }
}

void lf__attention(const lf_model *m, const lf__replica *rp, int l, float *out, float *att, const float *qkv, int T,
                   lf_dropout drop) {
    const lf_model_config *c = &m->cfg;
    const int NH = c->n_head, NKV = c->n_kv_head, HS = lf__head_size(c), C = NH * HS; /* C: q channels */
    if (rp->apos) { /* packed rows or a window (lf_model_forward refuses packing with a cache active) */
        m->be->ops->attention_forward_packed(m->be, out, att, qkv, rp->apos, rp->B, T, C, NH, NKV, drop);
        return;
    }
    if (!m->kv || !m->kv->active) {
        m->be->ops->attention_forward(m->be, out, att, qkv, rp->B, T, C, NH, NKV, drop);
        return;
    }
    const lf__kv *kv = m->kv;
    const size_t row = (size_t)NKV * kv->Tmax * HS; /* one batch row of a cache */
    if (kv->seg) { /* ragged: each run against its own slot, at its own position (one replica) */
        const size_t W = (size_t)C + 2 * (size_t)NKV * HS;
        for (int i = 0; i < kv->n_seg; i++) {
            const lf_segment *g = &kv->seg[i];
            const size_t r0 = (size_t)kv->row0[i];
            float *kc = kv->k[l] + (size_t)g->slot * row, *vc = kv->v[l] + (size_t)g->slot * row;
            cached_run(m, out + r0 * C, att, qkv + r0 * W, kc, vc, 1, g->len, g->pos, kv->Tmax);
        }
        return;
    }
    float *kc = kv->k[l] + (size_t)rp->b0 * row, *vc = kv->v[l] + (size_t)rp->b0 * row;
    cached_run(m, out, att, qkv, kc, vc, rp->B, T, m->cur_pos0, kv->Tmax);
}

void lf__attention_backward(const lf_model *m, const lf__replica *rp, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *att, int T, int C, int NH, int NKV, lf_dropout drop) {
    if (rp->apos)
        m->be->ops->attention_backward_packed(m->be, dqkv, scratch, dout, qkv, att, rp->apos, rp->B, T, C, NH, NKV,
                                              drop);
    else m->be->ops->attention_backward(m->be, dqkv, scratch, dout, qkv, att, rp->B, T, C, NH, NKV, drop);
}

void lf__attention_act(const lf_model *m, const lf__replica *rp, int l, void *out, float *tmp, float *att,
                       const float *qkv, int T, lf_dropout drop) {
    if (m->plan_dt == LF_ACT_BF16) {
        lf__attention(m, rp, l, tmp, att, qkv, T, drop);
        lf__act_convert(m, out, tmp, (size_t)rp->B * T * m->cfg.n_head * lf__head_size(&m->cfg));
    } else {
        lf__attention(m, rp, l, out, att, qkv, T, drop);
    }
}

static int ragged(const lf_model *m) { return m->kv && m->kv->active && m->kv->seg; }

void lf__embed(const lf_model *m, const lf__replica *rp, float *out, const float *wte, const float *wpe, int T) {
    const int C = m->cfg.n_embd;
    if (rp->pos && wpe) {
        m->be->ops->encoder_forward_packed(m->be, out, rp->inputs, rp->pos, wte, wpe, rp->B, T, C);
        return;
    }
    if (!ragged(m)) {
        m->be->ops->encoder_forward(m->be, out, rp->inputs, wte, wpe ? wpe + (size_t)m->cur_pos0 * C : NULL, rp->B, T,
                                    C);
        return;
    }
    const lf__kv *kv = m->kv;
    if (!wpe) { /* no positions: one lookup for every row */
        m->be->ops->encoder_forward(m->be, out, rp->inputs, wte, NULL, 1, T, C);
        return;
    }
    for (int i = 0; i < kv->n_seg; i++) {
        const size_t r0 = (size_t)kv->row0[i];
        m->be->ops->encoder_forward(m->be, out + r0 * C, rp->inputs + r0, wte, wpe + (size_t)kv->seg[i].pos * C, 1,
                                    kv->seg[i].len, C);
    }
}

void lf__embed_backward(const lf_model *m, const lf__replica *rp, float *dwte, float *dwpe, const float *dout, int T) {
    if (rp->pos && dwpe)
        m->be->ops->encoder_backward_packed(m->be, dwte, dwpe, dout, rp->inputs, rp->pos, rp->B, T, m->cfg.n_embd);
    else m->be->ops->encoder_backward(m->be, dwte, dwpe, dout, rp->inputs, rp->B, T, m->cfg.n_embd);
}

int lf__head_rows(const lf_model *m, float *x, int N, int C) {
    if (!ragged(m)) return N;
    const lf__kv *kv = m->kv;
    /* rows move down in order, each to dst <= its source (dst counts one row
     * per earlier run, or its len): never over a row still to move */
    size_t dst = 0;
    for (int i = 0; i < kv->n_seg; i++) {
        const lf_segment *g = &kv->seg[i];
        const size_t first = (size_t)kv->row0[i] + (g->every_row ? 0 : (size_t)g->len - 1);
        const size_t n = g->every_row ? (size_t)g->len : 1;
        if (first != dst)
            for (size_t r = 0; r < n; r++)
                m->be->ops->copy(m->be, x + (dst + r) * C, x + (first + r) * C, (size_t)C * sizeof(float));
        dst += n;
    }
    return (int)dst;
}

int lf_session_ragged_rows(const lf_segment *seg, int i) {
    int rows = 0;
    for (int j = 0; j < i; j++) rows += seg[j].every_row ? seg[j].len : 1;
    return rows;
}

/* The rope op over positions [pos0, pos0 + T), with the table of sequence
 * length pos0 + T (rope.c: only dynamic NTK reads it). */
static void rope_run(const lf_model *m, const int32_t *pos, float *x, int B, int T, int pos0, float sgn) {
    const lf_model_config *c = &m->cfg;
    const int NH = c->n_head, NKV = c->n_kv_head, HS = lf__head_size(c);
    float inv[LF__ROPE_MAX_HALF], scale = 1.0f;
    if (HS / 2 > LF__ROPE_MAX_HALF) { /* the config's validation refuses it */
        lf__backend_fail(m->be, LF_ERR_UNSUPPORTED, "rope: head size %d is above %d", HS, 2 * LF__ROPE_MAX_HALF);
        return;
    }
    lf__rope_freqs(c, HS, pos0 + T, inv, &scale);
    if (pos) { /* packed rows: positions below T, the table of length T */
        if (sgn > 0) m->be->ops->rope_forward_packed(m->be, x, pos, B, T, NH, NKV, HS, inv, scale);
        else m->be->ops->rope_backward_packed(m->be, x, pos, B, T, NH, NKV, HS, inv, scale);
        return;
    }
    if (sgn > 0) m->be->ops->rope_forward(m->be, x, B, T, NH, NKV, HS, pos0, inv, scale);
    else m->be->ops->rope_backward(m->be, x, B, T, NH, NKV, HS, pos0, inv, scale);
}

void lf__rope(const lf_model *m, const lf__replica *rp, float *qkv, int T) {
    const lf_model_config *c = &m->cfg;
    const int NH = c->n_head, NKV = c->n_kv_head, HS = lf__head_size(c);
    if (!ragged(m)) {
        rope_run(m, rp->pos, qkv, rp->B, T, m->cur_pos0, 1.0f);
        return;
    }
    const lf__kv *kv = m->kv;
    const size_t W = (size_t)(NH + 2 * NKV) * HS;
    for (int i = 0; i < kv->n_seg; i++)
        rope_run(m, NULL, qkv + (size_t)kv->row0[i] * W, 1, kv->seg[i].len, kv->seg[i].pos, 1.0f);
}

void lf__rope_backward(const lf_model *m, const lf__replica *rp, float *dqkv, int T) {
    rope_run(m, rp->pos, dqkv, rp->B, T, m->cur_pos0, -1.0f);
}

void lf__classifier(lf_model *m, lf__replica *rp, int N, int with_targets) {
    rp->loss_sum = 0;
    rp->n_valid = 0;
    if (!with_targets) return;
    const int grad = m->opts.dloss > 0.0f;
    m->be->ops->crossentropy_forward_backward(m->be, rp->losses, grad ? rp->logits : NULL, rp->logits, rp->targets, N,
                                              m->cfg.vocab_size, lf__vp(&m->cfg), m->opts.dloss);
    rp->loss_sum = m->be->ops->loss_sum(m->be, rp->losses, rp->targets, N, &rp->n_valid);
}

/* ---------------------------------------------------------------- forward / backward drivers */

/* The replicas' tasks, one unit at a time (m->task_l names the layer). */
static void embed_task(void *arg, int r) {
    lf_model *m = arg;
    m->arch->embed_forward(m, &m->rep[r], m->cur_T);
}
static void block_task(void *arg, int r) {
    lf_model *m = arg;
    m->arch->block_forward(m, &m->rep[r], m->task_l, m->cur_T);
}
static void head_task(void *arg, int r) {
    lf_model *m = arg;
    m->arch->head_forward(m, &m->rep[r], m->cur_T, m->cur_with_targets);
}
static void head_bw_task(void *arg, int r) {
    lf_model *m = arg;
    m->arch->head_backward(m, &m->rep[r], m->cur_T);
}
static void block_bw_task(void *arg, int r) {
    lf_model *m = arg;
    m->arch->block_backward(m, &m->rep[r], m->task_l, m->cur_T);
}
static void embed_bw_task(void *arg, int r) {
    lf_model *m = arg;
    m->arch->embed_backward(m, &m->rep[r], m->cur_T);
}

/* One replica runs in the caller with multi-threaded ops; several run
 * concurrently through the backend, each with single-threaded ops. */
static void run_all(lf_model *m, int n_rep, void (*task)(void *, int)) {
    if (n_rep == 1 || !m->be->ops->run_replicas) {
        for (int r = 0; r < n_rep; r++) task(m, r);
    } else {
        m->be->ops->run_replicas(m->be, n_rep, task, m);
    }
}

/* ZeRO-3: unit u's parameters in place before it is used (unit 0 has its
 * own buffer; the others share one). The gather is a collective, made from
 * the calling thread, outside the replicas' parallel region. */
/* ZeRO-3 prefetch: block unit u is in use; start gathering the pass's
 * next block unit into the other buffer (waiting first for a prefetch of
 * another unit there, which nothing will use). */
static lf_status prefetch_next(lf_model *m, int u) {
    const int n = u + m->pf_dir;
    if (!m->pblk1 || u == 0 || n < 1 || n > m->cfg.n_layer + 1 || m->pf_unit == n) return LF_OK;
    if (m->pf_unit >= 0) {
        m->pf_unit = -1;
        lf_status st = m->zero.gather_wait(m->zero.user, m->pf_ticket);
        if (st != LF_OK) return st;
    }
    float *other = m->pblk == m->pblk_a ? m->pblk1 : m->pblk_a;
    lf_status st = m->zero.gather_start(m->zero.user, n, other, &m->pf_ticket);
    if (st != LF_OK) return st;
    m->pf_unit = n;
    m->pf_buf = other;
    return LF_OK;
}

static lf_status use_unit(lf_model *m, int u) {
    if (m->params) return LF_OK;
    if (u != 0 && m->blk_unit == u) return prefetch_next(m, u);
    if (u == 0 && m->emb_valid) return LF_OK;
    if (u != 0 && m->pblk1 && m->pf_unit == u) { /* prefetched: wait for it (the device waits, not the host) */
        m->pf_unit = -1;
        lf_status st = m->zero.gather_wait(m->zero.user, m->pf_ticket);
        if (st != LF_OK) {
            m->blk_unit = -1;
            return st;
        }
        m->pblk = m->pf_buf;
        m->blk_unit = u;
        m->pf_hits++;
        if (m->be->ops->params_changed) m->be->ops->params_changed(m->be);
        return prefetch_next(m, u);
    }
    lf_status st = m->zero.gather_params(m->zero.user, u, u == 0 ? m->pemb : m->pblk);
    if (st != LF_OK) {
        if (u == 0) m->emb_valid = 0;
        else m->blk_unit = -1;
        return st;
    }
    if (u == 0) m->emb_valid = 1;
    else m->blk_unit = u;
    if (m->be->ops->params_changed) m->be->ops->params_changed(m->be); /* cached copies keyed by the buffer's address */
    return u == 0 ? LF_OK : prefetch_next(m, u);
}

/* With whole parameters nothing happens between units: each replica runs
 * its whole forward in one go (no barrier per unit). */
static void forward_task(void *arg, int r) {
    lf_model *m = arg;
    lf__replica *rp = &m->rep[r];
    m->arch->embed_forward(m, rp, m->cur_T);
    for (int l = 0; l < m->cfg.n_layer; l++) m->arch->block_forward(m, rp, l, m->cur_T);
    m->arch->head_forward(m, rp, m->cur_T, m->cur_with_targets);
}

/* The replicas through the units in order: embeddings, blocks, head. */
static lf_status forward_units(lf_model *m, int n_rep) {
    int L = m->cfg.n_layer;
    if (m->params) {
        run_all(m, n_rep, forward_task);
        return LF_OK;
    }
    m->pf_dir = 1; /* ZeRO-3 prefetch: the blocks in increasing order */
    lf_status st = use_unit(m, 0);
    if (st != LF_OK) return st;
    run_all(m, n_rep, embed_task);
    for (int l = 0; l < L; l++) {
        if ((st = use_unit(m, 1 + l)) != LF_OK) return st;
        m->task_l = l;
        run_all(m, n_rep, block_task);
    }
    if ((st = use_unit(m, L + 1)) != LF_OK) return st;
    run_all(m, n_rep, head_task); /* a tied lm_head: unit 0, still in its own buffer */
    return LF_OK;
}

/* The backend's sticky status at the end of a forward or backward: the
 * first op that failed, with its message kept as the model's error. */
static lf_status sync_point(lf_model *m) {
    const lf_status st = lf_backend_sync(m->be);
    if (st != LF_OK) snprintf(m->errmsg, sizeof m->errmsg, "%s", lf_last_error());
    return st;
}

lf_status lf_model_forward(lf_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                           const lf_forward_opts *opts, double *loss_sum, long *n_valid) {
    const lf_model_config *c = &m->cfg;
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
    lf_status pst = lf__packed_set(m, opts ? opts->pos : NULL, B, T);
    if (pst != LF_OK) {
        snprintf(m->errmsg, sizeof m->errmsg, "%s", lf_last_error());
        return pst;
    }
    m->opts = opts ? *opts : none;
    m->opts.pos = NULL; /* the caller's memory: read above only */
    if (!m->kv || !m->kv->active) m->cur_pos0 = 0;
    m->cur_B = B;
    m->cur_T = T;
    m->be->ops->to_device(m->be, m->inputs, inputs, sizeof(int32_t) * (size_t)N);
    if (targets) m->be->ops->to_device(m->be, m->targets, targets, sizeof(int32_t) * (size_t)N);

    /* split the rows over the replicas (fewer when B is small) */
    int rB = m->rep_B, n_rep = (B + rB - 1) / rB;
    size_t Vp = (size_t)lf__vp(c);
    for (int r = 0; r < n_rep; r++) {
        lf__replica *rp = &m->rep[r];
        rp->b0 = r * rB;
        rp->B = B - rp->b0 < rB ? B - rp->b0 : rB;
        size_t row = (size_t)rp->b0 * T;
        rp->logits = m->logits + row * Vp;
        rp->losses = m->losses + row;
        rp->inputs = m->inputs + row;
        rp->targets = m->targets + row;
        rp->pos = opts && opts->pos ? m->pos + row : NULL;
        rp->apos = m->apos ? m->apos + row : NULL;
    }
    m->cur_rep = n_rep;
    m->cur_with_targets = targets != NULL;
    lf_status st = forward_units(m, n_rep);
    if (st == LF_OK) st = sync_point(m);
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

/* Unit buffers start each backward of their unit at zero (matmul and
 * norm backwards add into the gradient). */
static void zero_unit_grads(lf_model *m, int n_rep, int emb) {
    if (m->lora) return; /* no base gradients */
    for (int r = 0; r < n_rep; r++) {
        lf__replica *rp = &m->rep[r];
        if (rp->gfull) continue;
        if (emb) m->be->ops->zero(m->be, rp->gemb, m->unit0_n);
        else m->be->ops->zero(m->be, rp->gblk, m->max_other_n);
    }
}

/* Unit u's backward is done on every replica: the replicas' gradients are
 * added in replica order (1, 2, ...) into replica 0's: the model's whole
 * buffer, or under ZeRO-2/3 replica 0's unit buffer, which then goes to
 * reduce_grads. */
static lf_status finish_unit(lf_model *m, int n_rep, int u) {
    if (m->lora) return LF_OK; /* one replica; the adapters' gradients are summed by the caller */
    size_t lo = m->unit_lo[u], n = m->unit_n[u];
    float *dst = m->rep[0].gfull ? m->rep[0].gfull + lo : (u == 0 ? m->rep[0].gemb : m->rep[0].gblk);
    for (int r = 1; r < n_rep; r++) m->be->ops->add_inplace(m->be, dst, u == 0 ? m->rep[r].gemb : m->rep[r].gblk, n);
    if (m->zero.partition_grads) return m->zero.reduce_grads(m->zero.user, u, dst);
    return m->zero.grads_ready ? m->zero.grads_ready(m->zero.user, u, dst) : LF_OK;
}

void lf_model_release_grads(lf_model *m) {
    if (!m) return;
    if (m->grads) m->be->ops->free(m->be, m->grads);
    m->grads = NULL;
    m->no_grads = 1;
}

lf_status lf_model_backward(lf_model *m) {
    if (m->no_grads) {
        snprintf(m->errmsg, sizeof m->errmsg, "backward on a model loaded to run only (it has no gradient memory)");
        return lf_fail(LF_ERR_INVALID_ARG, "%s", m->errmsg);
    }
    if (!m->have_dlogits) {
        snprintf(m->errmsg, sizeof m->errmsg,
                 "backward without a training forward (forward needs targets and dloss > 0)");
        return lf_fail(LF_ERR_INVALID_ARG, "%s", m->errmsg);
    }
    m->have_dlogits = 0;
    int n_rep = m->cur_rep, L = m->cfg.n_layer;
    m->pf_dir = -1; /* ZeRO-3 prefetch: the head, then the blocks downwards */
    lf_status st = use_unit(m, 0);
    if (st == LF_OK) st = use_unit(m, L + 1);
    if (st != LF_OK) return st;
    if (m->gblk1) m->rep[0].gblk = m->gblk0; /* the head unit; the blocks then alternate */
    zero_unit_grads(m, n_rep, 1);
    zero_unit_grads(m, n_rep, 0);
    run_all(m, n_rep, head_bw_task);
    if ((st = finish_unit(m, n_rep, L + 1)) != LF_OK) return st;
    for (int l = L - 1; l >= 0; l--) {
        if ((st = use_unit(m, 1 + l)) != LF_OK) return st;
        if (m->gblk1) m->rep[0].gblk = (L - l) % 2 ? m->gblk1 : m->gblk0;
        zero_unit_grads(m, n_rep, 0);
        m->task_l = l;
        run_all(m, n_rep, block_bw_task);
        if ((st = finish_unit(m, n_rep, 1 + l)) != LF_OK) return st;
    }
    if ((st = use_unit(m, 0)) != LF_OK) return st;
    if (!m->lora) run_all(m, n_rep, embed_bw_task); /* LoRA: frozen embeddings, nothing below them */
    if ((st = finish_unit(m, n_rep, 0)) != LF_OK) return st;
    return sync_point(m);
}

lf_backend *lf_model_backend(const lf_model *m) { return m->be; }
long lf_model_prefetch_hits(const lf_model *m) { return m->pf_hits; }

/* ---------------------------------------------------------------- per-sequence losses (DPO) */
lf_status lf_model_row_losses(lf_model *m, double *sums) {
    if (!m || !sums) return lf_fail(LF_ERR_INVALID_ARG, "lf_model_row_losses: NULL argument");
    if (!m->cur_with_targets)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_model_row_losses: the last forward had no targets");
    const int B = m->cur_B, T = m->cur_T;
    float *host = malloc(sizeof(float) * (size_t)B * (size_t)T);
    if (!host) return lf_fail(LF_ERR_NOMEM, "lf_model_row_losses: out of memory for %d x %d losses", B, T);
    lf_status st = lf_backend_to_host(m->be, host, m->losses, sizeof(float) * (size_t)B * (size_t)T);
    for (int b = 0; b < B && st == LF_OK; b++) {
        double s = 0; /* ignored targets hold loss 0 */
        for (int t = 0; t < T; t++) s += host[(size_t)b * T + t];
        sums[b] = s;
    }
    free(host);
    return st;
}

lf_status lf_model_scale_dlogits(lf_model *m, const float *w) {
    if (!m || !w) return lf_fail(LF_ERR_INVALID_ARG, "lf_model_scale_dlogits: NULL argument");
    if (!m->have_dlogits)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_model_scale_dlogits: no training forward to scale (dloss > 0)");
    const size_t row = (size_t)m->cur_T * (size_t)lf__vp(&m->cfg);
    for (int b = 0; b < m->cur_B; b++) {
        if (w[b] == 1.0f) continue;
        lf_status st = lf_backend_scale(m->be, m->logits + (size_t)b * row, row, w[b]);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}
