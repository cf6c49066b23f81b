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
 */
#include <string.h>
#include "model_impl.h"

/* The packed slots this model's forward and backward would call. */
static const char *missing_op(const lf_model *m) {
    const lf_backend_ops *o = m->be->ops;
    if (!o->attention_forward_packed) return "attention_forward_packed";
    if (!o->attention_backward_packed) return "attention_backward_packed";
    if (!o->encoder_forward_packed) return "encoder_forward_packed";
    if (!o->encoder_backward_packed) return "encoder_backward_packed";
    if (!o->rope_forward_packed) return "rope_forward_packed";
    if (!o->rope_backward_packed) return "rope_backward_packed";
    return NULL;
}

lf_status lf__packed_set(lf_model *m, const int32_t *pos, int B, int T) {
    const size_t N = (size_t)B * T;
    if (!pos) {
        for (int r = 0; r < m->n_rep; r++) m->rep[r].pos = NULL;
        return LF_OK;
    }
    const char *op = missing_op(m);
    if (op)
        return lf_fail(LF_ERR_UNSUPPORTED, "packed rows: backend '%s' has no %s (train with data.packing false)",
                       m->be->ops->name, op);
    if (m->kv && m->kv->active)
        return lf_fail(LF_ERR_UNSUPPORTED, "packed rows: not with a session's KV cache active (generation)");
    for (int b = 0; b < B; b++) {
        const int32_t *p = pos + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            const int32_t want = t ? p[t - 1] + 1 : 0;
            if (p[t] != 0 && p[t] != want)
                return lf_fail(LF_ERR_RANGE,
                               "packed rows: row %d column %d has position %d (must be 0, starting an example, or %d)",
                               b, t, (int)p[t], (int)want);
        }
    }
    if (N > m->pos_cap) {
        if (m->pos) m->be->ops->free(m->be, m->pos);
        m->pos_cap = 0;
        m->pos = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        if (!m->pos) return lf_fail(LF_ERR_NOMEM, "packed rows: out of memory for %zu positions", N);
        m->pos_cap = N;
    }
    m->be->ops->to_device(m->be, m->pos, pos, N * sizeof(int32_t));
    return LF_OK;
}

void lf__packed_free(lf_model *m) {
    if (m->pos) m->be->ops->free(m->be, m->pos);
    m->pos = NULL;
    m->pos_cap = 0;
}
