/*
 * Packed rows (SFT packing): the positions a forward's rows carry when
 * several whole examples share a row (lf_forward_opts.pos; docs/training.md
 * "Packing"), checked and copied to backend memory for the packed ops
 * (backend_impl.h "packed rows").
 *
 * Invariants:
 *  - A row's positions start at 0 and each next one is 0 (a new example) or
 *    the previous + 1, so every token's example starts at column t - pos[t]
 *    of its row and no position reaches T (<= block_size rows of wpe or of
 *    the RoPE table). A row that breaks this is refused before anything
 *    runs, naming the row and column.
 *  - The positions buffer is the model's, outside the activation plan (4
 *    bytes a token, allocated at the first packed forward and again only
 *    when a larger batch comes), freed with the plan.
 *  - A forward without positions leaves every replica's pos NULL: the plain
 *    ops, bit for bit what the model ran before packing existed.
 *  - Sliding window (model.sliding_window W > 0, transformers' Mistral /
 *    Qwen2 convention: query t attends keys j with t - j < W): a window is a
 *    lower bound on the keys of the same kind as a packed example's start,
 *    so the attention ops take "attention positions" apos[t] = min(pos[t],
 *    W - 1) (pos[t] = t in an unpacked row) and the packed attention ops
 *    run the window; RoPE and wpe still read pos (absolute positions). apos
 *    is built only when a row is longer than the window (T > W) and no KV
 *    cache is active (the cache keeps a ring of W positions instead,
 *    model.c lf__attention); otherwise apos is pos (NULL: the plain ops,
 *    whose speed and bits are unchanged). apos lives after pos in the same
 *    buffer; an unpacked window's is written once per batch shape.
 */
#include <stdlib.h>
#include <string.h>
#include "model_impl.h"

/* The packed slots this model's forward and backward would call (only the
 * attention ones for a window without packing). */
static const char *missing_op(const lf_model *m, int packed) {
    const lf_backend_ops *o = m->be->ops;
    if (!o->attention_forward_packed) return "attention_forward_packed";
    if (!o->attention_backward_packed) return "attention_backward_packed";
    if (!packed) return NULL;
    if (!o->encoder_forward_packed) return "encoder_forward_packed";
    if (!o->encoder_backward_packed) return "encoder_backward_packed";
    if (!o->rope_forward_packed) return "rope_forward_packed";
    if (!o->rope_backward_packed) return "rope_backward_packed";
    return NULL;
}

/* Rows longer than the window: the attention positions min(pos, W - 1). */
static lf_status window_positions(lf_model *m, const int32_t *pos, int B, int T, int32_t *dst) {
    const size_t N = (size_t)B * T;
    const int32_t W = m->cfg.sliding_window;
    int32_t *h = malloc(N * sizeof *h);
    if (!h) return lf_fail(LF_ERR_NOMEM, "sliding window: out of memory for %zu positions", N);
    for (size_t i = 0; i < N; i++) {
        const int32_t p = pos ? pos[i] : (int32_t)(i % (size_t)T);
        h[i] = p < W ? p : W - 1;
    }
    m->be->ops->to_device(m->be, dst, h, N * sizeof(int32_t));
    lf_status st = lf_backend_sync(m->be); /* h is freed next: a copy must have left it */
    free(h);
    return st;
}

lf_status lf__packed_set(lf_model *m, const int32_t *pos, int B, int T) {
    const size_t N = (size_t)B * T;
    const int active = m->kv && m->kv->active;
    const int win = m->cfg.sliding_window > 0 && T > m->cfg.sliding_window && !active;
    m->apos = NULL;
    if (!pos && !win) {
        for (int r = 0; r < m->n_rep; r++) m->rep[r].pos = m->rep[r].apos = NULL;
        return LF_OK;
    }
    const char *op = missing_op(m, pos != NULL);
    if (op && pos)
        return lf_fail(LF_ERR_UNSUPPORTED, "packed rows: backend '%s' has no %s (train with data.packing false)",
                       m->be->ops->name, op);
    if (op)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "sliding window: backend '%s' has no %s, so it cannot run rows of %d positions past the "
                       "model's sliding_window %d (use a context of at most %d)",
                       m->be->ops->name, op, T, m->cfg.sliding_window, m->cfg.sliding_window);
    if (pos && active)
        return lf_fail(LF_ERR_UNSUPPORTED, "packed rows: not with a session's KV cache active (generation)");
    for (int b = 0; pos && b < B; b++) {
        const int32_t *p = pos + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            const int32_t want = t ? p[t - 1] + 1 : 0;
            if (p[t] != 0 && p[t] != want)
                return lf_fail(LF_ERR_RANGE,
                               "packed rows: row %d column %d has position %d (must be 0, starting an example, or %d)",
                               b, t, (int)p[t], (int)want);
        }
    }
    if (!pos && m->win_B == B && m->win_T == T) { /* an unpacked window of this shape: already there */
        m->apos = m->pos;
        return LF_OK;
    }
    m->win_B = m->win_T = 0;
    const size_t need = (pos ? N : 0) + (win ? N : 0);
    if (need > m->pos_cap) {
        if (m->pos) m->be->ops->free(m->be, m->pos);
        m->pos_cap = 0;
        m->pos = m->be->ops->alloc(m->be, need * sizeof(int32_t));
        if (!m->pos) return lf_fail(LF_ERR_NOMEM, "packed rows: out of memory for %zu positions", need);
        m->pos_cap = need;
    }
    if (pos) m->be->ops->to_device(m->be, m->pos, pos, N * sizeof(int32_t));
    m->apos = m->pos;
    if (win) {
        m->apos = m->pos + (pos ? N : 0);
        lf_status st = window_positions(m, pos, B, T, m->apos);
        if (st == LF_OK && !pos) m->win_B = B, m->win_T = T;
        return st;
    }
    return LF_OK;
}

void lf__packed_free(lf_model *m) {
    if (m->pos) m->be->ops->free(m->be, m->pos);
    m->pos = m->apos = NULL;
    m->pos_cap = 0;
    m->win_B = m->win_T = 0;
}
