/*
 * Sessions (include/llmforge/model.h): a forward-only context on a
 * model's weights with its own activation plan, logits and, optionally, a
 * per-layer KV cache in backend memory; the ragged forward of continuous
 * batching. A session is a borrowed view of the model (lf_model with
 * borrowed = 1) whose forwards are the runtime's (model.c).
 *
 * Invariants:
 *  - The view shares the parent's table, units, tensor indices and
 *    parameter buffer; it owns only its plan (and the session its cache),
 *    and reads the parent's params pointer again before every forward.
 *  - A cached forward appends to and attends over the cache only while
 *    kv.active is set, for the duration of that forward.
 *  - filled[slot] counts the positions a slot's cache holds; a run may start
 *    at any position up to it (reusing a slot starts again at 0).
 *  - A model with a sliding window W and a context T > W keeps a ring of W
 *    positions per layer (kv.Tmax = W, memory O(W)); position p in slot
 *    p % W (model.c cached_run). Positions stay absolute (RoPE), the
 *    context still T; a ragged run may then restart only at 0 or at the
 *    last position or later, the older ones being overwritten.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model_impl.h"

struct lf_session {
    lf_model *parent;
    lf_model *view; /* the parent's weights, this session's plan */
    lf__kv kv;
    void *kv_block;
    int B, T;
    int pos;     /* cached positions filled (lf_session_forward with use_cache) */
    int *filled; /* per slot: positions filled by ragged forwards (B) */
    int *row0;   /* scratch: each run's first row (B) */
};

/* Positions a layer's cache holds for a context of T: a sliding window's
 * ring of W when the context is longer (model.c cached_run), else T. */
static int kv_positions(const lf_model_config *c, int T) {
    return c->sliding_window > 0 && T > c->sliding_window ? c->sliding_window : T;
}

lf_status lf_session_create(lf_session **out, lf_model *m, int B, int T, int with_cache) {
    *out = NULL;
    if (B < 1 || T < 1) return lf_fail(LF_ERR_INVALID_ARG, "session: batch %d x %d is empty", B, T);
    if (T > m->cfg.block_size)
        return lf_fail(LF_ERR_RANGE, "session: context %d exceeds model.block_size %d", T, m->cfg.block_size);
    if (!m->params)
        return lf_fail(LF_ERR_UNSUPPORTED, "session: the model's parameters are partitioned (ZeRO-3); "
                                           "a session needs whole weights");
    lf_session *s = calloc(1, sizeof *s);
    lf_model *v = s ? malloc(sizeof *v) : NULL;
    if (!v) {
        free(s);
        return lf_fail(LF_ERR_NOMEM, "out of memory creating a session");
    }
    *v = *m; /* borrowed: table, units, tensor indices, parameters */
    v->borrowed = 1;
    v->grads = NULL;
    memset(&v->zero, 0, sizeof v->zero);
    v->pemb = v->pblk = v->gemb0 = v->gblk0 = v->gblk1 = v->pblk_a = v->pblk1 = NULL;
    v->pf_unit = -1;
    v->act_block = NULL;
    v->lora_u = v->lora_du = v->lora_x = v->lora_dx = NULL; /* the view's plan has its own LoRA scratch */
    v->rep = NULL;
    v->n_rep = 0;
    v->have_dlogits = 0;
    v->kv = NULL;
    v->pos = v->apos = NULL; /* the view's own positions buffer (packed.c), not the parent's */
    v->pos_cap = 0;
    v->win_B = v->win_T = 0;
    /* forward only: every layer's tensors in the working set, only block
     * outputs kept (the full-recompute layout; nothing is recomputed) */
    v->recompute = LF_RECOMPUTE_FULL;
    v->kv_planned = with_cache;
    s->parent = m;
    s->view = v;
    s->B = B;
    s->T = T;
    s->filled = calloc((size_t)B, sizeof *s->filled);
    s->row0 = calloc((size_t)B, sizeof *s->row0);
    if (!s->filled || !s->row0) {
        lf_session_free(s);
        return lf_fail(LF_ERR_NOMEM, "out of memory creating a session");
    }
    lf_status st = lf_model_plan(v, B, T, NULL);
    const lf_model_config *c = &m->cfg;
    const int L = c->n_layer, HS = lf__head_size(c);
    const int Tmax = kv_positions(c, T);
    const size_t per = (size_t)B * c->n_kv_head * Tmax * HS;
    if (st == LF_OK && with_cache && m->be->ops->kv_append && m->be->ops->attention_cached) {
        s->kv.k = calloc(2 * (size_t)L, sizeof(float *));
        s->kv_block = s->kv.k ? m->be->ops->alloc(m->be, 2 * (size_t)L * per * sizeof(float)) : NULL;
        if (!s->kv_block) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory allocating the KV cache (%.1f MB for %d x %d positions)",
                         2.0 * L * per * sizeof(float) / 1e6, B, T);
        } else {
            s->kv.v = s->kv.k + L;
            for (int l = 0; l < L; l++) {
                s->kv.k[l] = (float *)s->kv_block + (size_t)(2 * l) * per;
                s->kv.v[l] = (float *)s->kv_block + (size_t)(2 * l + 1) * per;
            }
            s->kv.B = B;
            s->kv.Tmax = Tmax;
        }
    }
    if (st != LF_OK) {
        lf_session_free(s);
        return st;
    }
    *out = s;
    return LF_OK;
}

void lf_session_free(lf_session *s) {
    if (!s) return;
    free(s->filled);
    free(s->row0);
    if (s->kv_block) s->parent->be->ops->free(s->parent->be, s->kv_block);
    free(s->kv.k);
    lf_model_free(s->view);
    free(s);
}

void lf_session_reset(lf_session *s) {
    s->pos = 0;
    memset(s->filled, 0, (size_t)s->B * sizeof *s->filled);
}

int lf_session_slot_pos(const lf_session *s, int slot) { return slot >= 0 && slot < s->B ? s->filled[slot] : -1; }

lf_status lf_session_forward_ragged(lf_session *s, const int32_t *tokens, const lf_segment *seg, int n_seg) {
    lf_model *v = s->view;
    if (!s->kv_block) return lf_fail(LF_ERR_UNSUPPORTED, "backend '%s' has no KV-cache attention", v->be->ops->name);
    if (n_seg < 1 || n_seg > s->B)
        return lf_fail(LF_ERR_INVALID_ARG, "ragged forward: %d runs (1 to the session's %d slots)", n_seg, s->B);
    long total = 0;
    for (int i = 0; i < n_seg; i++) {
        const lf_segment *g = &seg[i];
        if (g->slot < 0 || g->slot >= s->B)
            return lf_fail(LF_ERR_INVALID_ARG, "ragged forward: run %d: slot %d outside [0, %d)", i, g->slot, s->B);
        for (int j = 0; j < i; j++)
            if (seg[j].slot == g->slot)
                return lf_fail(LF_ERR_INVALID_ARG, "ragged forward: runs %d and %d share slot %d", j, i, g->slot);
        if (g->len < 1) return lf_fail(LF_ERR_INVALID_ARG, "ragged forward: run %d is empty (len %d)", i, g->len);
        if (g->adapter < 0 || g->adapter > v->n_bank)
            return lf_fail(LF_ERR_INVALID_ARG, "ragged forward: run %d: adapter %d (0 to the model's %d)", i,
                           g->adapter, v->n_bank);
        if (g->every_row != 0 && g->every_row != 1)
            return lf_fail(LF_ERR_INVALID_ARG, "ragged forward: run %d: every_row is %d (0 or 1)", i, g->every_row);
        if (g->pos < 0 || g->pos > s->filled[g->slot])
            return lf_fail(LF_ERR_RANGE, "ragged forward: run %d starts at position %d, slot %d holds %d", i, g->pos,
                           g->slot, s->filled[g->slot]);
        if (s->kv.Tmax < s->T && g->pos > 0 && g->pos + 1 < s->filled[g->slot] && s->filled[g->slot] > s->kv.Tmax)
            return lf_fail(LF_ERR_RANGE,
                           "ragged forward: run %d starts at position %d, but slot %d's sliding-window cache holds "
                           "positions %d..%d only",
                           i, g->pos, g->slot, s->filled[g->slot] - s->kv.Tmax, s->filled[g->slot] - 1);
        if ((long)g->pos + g->len > s->T)
            return lf_fail(LF_ERR_RANGE, "ragged forward: run %d: positions %d..%d exceed the cache of %d", i, g->pos,
                           g->pos + g->len - 1, s->T);
        s->row0[i] = (int)total;
        total += g->len;
    }
    if (total > s->T)
        return lf_fail(LF_ERR_RANGE, "ragged forward: %ld tokens in one forward, the session holds %d", total, s->T);
    v->params = s->parent->params;
    v->kv = &s->kv;
    s->kv.active = 1;
    s->kv.seg = seg;
    s->kv.row0 = s->row0;
    s->kv.n_seg = n_seg;
    v->cur_pos0 = 0;
    lf_status st = lf_model_forward(v, tokens, NULL, 1, (int)total, NULL, NULL, NULL);
    s->kv.active = 0;
    s->kv.seg = NULL;
    s->kv.n_seg = 0;
    v->kv = NULL;
    if (st == LF_OK)
        for (int i = 0; i < n_seg; i++) s->filled[seg[i].slot] = seg[i].pos + seg[i].len;
    return st;
}
int lf_session_pos(const lf_session *s) { return s->pos; }
int lf_session_has_cache(const lf_session *s) { return s->kv_block != NULL; }

lf_status lf_session_forward(lf_session *s, const int32_t *inputs, int B, int T, int use_cache) {
    lf_model *v = s->view;
    if (B < 1 || B > s->B || T < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "session forward: batch %d x %d outside the session's %d x %d", B, T, s->B,
                       s->T);
    v->params = s->parent->params; /* the parent may have been re-planned or stepped: same buffer */
    if (!use_cache) {
        if (T > s->T) return lf_fail(LF_ERR_RANGE, "session forward: %d positions, the session holds %d", T, s->T);
        v->kv = NULL;
        return lf_model_forward(v, inputs, NULL, B, T, NULL, NULL, NULL);
    }
    if (!s->kv_block) return lf_fail(LF_ERR_UNSUPPORTED, "backend '%s' has no KV-cache attention", v->be->ops->name);
    if (s->pos + T > s->T)
        return lf_fail(LF_ERR_RANGE,
                       "session forward: positions %d..%d exceed the cache of %d (lf_session_reset "
                       "starts a new sequence)",
                       s->pos, s->pos + T - 1, s->T);
    v->kv = &s->kv;
    s->kv.active = 1;
    v->cur_pos0 = s->pos;
    lf_status st = lf_model_forward(v, inputs, NULL, B, T, NULL, NULL, NULL);
    s->kv.active = 0;
    v->kv = NULL;
    if (st == LF_OK) s->pos += T;
    return st;
}

const float *lf_session_logits(const lf_session *s) { return s->view->logits; }

int lf_session_host_memory(const lf_session *s) { return s->view->be->ops->host_memory; }

lf_status lf_session_copy_logits(const lf_session *s, size_t row, size_t n_rows, float *dst) {
    const size_t Vp = (size_t)lf__vp(&s->view->cfg);
    lf_backend *be = s->view->be;
    be->ops->to_host(be, dst, s->view->logits + row * Vp, n_rows * Vp * sizeof(float));
    return lf_backend_sync(be);
}
lf_model *lf_session_model(const lf_session *s) { return s->parent; }

static lf_status session_plan_bytes(const lf_model_config *cfg, const lf_backend_ops *ops, int B, int T, int with_cache,
                                    size_t *bytes) {
    *bytes = 0;
    lf_model_config c;
    const lf__model_arch *a;
    lf_status st = lf__model_resolved(cfg, &c, &a);
    if (st != LF_OK) return st;
    if (B < 1 || T < 1 || T > c.block_size)
        return lf_fail(LF_ERR_RANGE, "session: batch %d x %d outside [1, block_size %d]", B, T, c.block_size);
    /* fp32 matmul inputs: the larger storage, an upper bound on either backend */
    lf__plan_spec sp = {.cfg = &c, .rc = LF_RECOMPUTE_FULL, .dt = LF_ACT_FP32, .B = B, .T = T, .infer = 1};
    sp.num_params = lf_model_unit_sizes(&c, &sp.unit0_n, &sp.max_other_n);
    lf__split_rows(B, 1, &sp.rB, &sp.n_rep);
    lf__plan_attention(&sp, ops, with_cache);
    lf__planner p = {0};
    lf__lay_out(a, &sp, NULL, &p);
    const size_t kv = with_cache ? 2 * (size_t)c.n_layer * B * c.n_kv_head * kv_positions(&c, T) *
                                       (size_t)lf__head_size(&c) * sizeof(float)
                                 : 0;
    *bytes = p.used + kv;
    return LF_OK;
}

lf_status lf_session_plan_bytes(const lf_model_config *cfg, int B, int T, int with_cache, size_t *bytes) {
    return session_plan_bytes(cfg, lf__backend_cpu(), B, T, with_cache, bytes);
}

lf_status lf_model_session_plan_bytes(const lf_model *m, int B, int T, int with_cache, size_t *bytes) {
    return session_plan_bytes(&m->cfg, m->be->ops, B, T, with_cache, bytes);
}
