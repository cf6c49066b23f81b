/*
 * Encoding of prepare's records on any thread (prepare.c reads them into
 * batches and commits them in input order): a record's fields tokenized,
 * pretraining text, a fine-tuning pair (through the chat template when
 * there is one), a conversation (prepare_chat.c) or a DPO triple, masked
 * and given its split; and the pool of helper threads that encodes a batch
 * while the calling thread fills the next.
 *
 * Invariants: an encoding thread writes only the items it claimed (an
 * atomic counter per batch) and reads the prep state, never writes it; a
 * bad record is noted on its item (msg, bad or st), reported at commit.
 * The layouts (fine-tuning, preference) are described in prepare.c.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat_template.h"
#include "data_impl.h"
#include "prepare_impl.h"

/* ---------------------------------------------------------------- encoding (any thread) */
/* After encoding one field: 0 when st is LF_OK, else the failure noted on
 * the item as encode_field says. */
static int encode_failed(const prep *p, const batch *b, item *it, lf_status st, size_t key_off) {
    if (st == LF_OK) return 0;
    char msg[1024];
    const source *src = &p->src[it->src];
    if (st == LF_ERR_NOMEM || st == LF_ERR_INVALID_ARG || st == LF_ERR_INTERNAL) {
        snprintf(msg, sizeof msg, "%s", lf_last_error());
        it->st = st;
    } else {
        if (key_off != NO_KEY)
            snprintf(msg, sizeof msg, "%s:%llu: field '%s': %s", src->path, (unsigned long long)it->line,
                     b->arena + key_off, lf_last_error());
        else snprintf(msg, sizeof msg, "%s:%llu: %s", src->path, (unsigned long long)it->line, lf_last_error());
        if (p->o->skip_bad_records) it->bad = 1;
        else it->st = LF_ERR_FORMAT;
    }
    it->msg = strdup(msg);
    if (!it->msg) it->st = LF_ERR_NOMEM;
    return -1;
}

/* Encode one field of an item. A failure that makes the record bad sets
 * it->msg ("FILE:LINE: field 'F': ...") and it->bad (skip_bad_records) or
 * it->st; other failures (memory, internal) set it->st. */
static int encode_field(const prep *p, const batch *b, item *it, const char *s, size_t n, size_t key_off, int n_threads,
                        uint32_t **ids, size_t *m) {
    lf_status st = lf_tokenizer_encode_parallel(p->tok, s, n, NULL, n_threads, ids, m);
    return encode_failed(p, b, it, st, key_off);
}

/* Append ids[0, n) to the lf_alloc'd *dst of *dn ids. */
static int append_ids(uint32_t **dst, size_t *dn, const uint32_t *ids, size_t n) {
    if (n == 0) return 0;
    uint32_t *q = lf_alloc((*dn + n) * sizeof *q);
    if (!q) return -1;
    if (*dn) memcpy(q, *dst, *dn * sizeof *q);
    memcpy(q + *dn, ids, n * sizeof *q);
    lf_free(*dst);
    *dst = q;
    *dn += n;
    return 0;
}

/* A pair through the chat template: the rendered prompt part into ia, the
 * response and the assistant's suffix into ib, each span tokenized on its
 * own as the server does (special tokens read in template text only). */
static int encode_templated(const prep *p, const batch *b, item *it, int n_threads, uint32_t **ia, size_t *na,
                            uint32_t **ib, size_t *nb) {
    char *out = NULL;
    size_t len = 0, cut = 0;
    lf__chat_span *sp = NULL;
    int n_sp = 0, bad = 0;
    lf_status st = lf__chat_template_render_pair(&p->tpl, b->arena + it->a_off, it->a_len, b->arena + it->b_off,
                                                 it->b_len, &out, &len, &cut, &sp, &n_sp);
    if (st != LF_OK) return encode_failed(p, b, it, st, it->ka_off);
    for (int i = 0; i < n_sp && !bad; i++) {
        lf_encode_opts o = lf_encode_opts_default();
        o.allow_special = sp[i].from_template;
        uint32_t *ids = NULL;
        size_t n = 0;
        const int resp = sp[i].off >= cut;
        st = lf_tokenizer_encode_parallel(p->tok, out + sp[i].off, sp[i].len, &o, n_threads, &ids, &n);
        if (encode_failed(p, b, it, st, resp ? it->kb_off : it->ka_off) != 0) bad = 1;
        else if (append_ids(resp ? ib : ia, resp ? nb : na, ids, n) != 0) {
            it->st = LF_ERR_NOMEM;
            it->msg = strdup("out of memory tokenizing a templated pair");
            bad = 1;
        }
        lf_free(ids);
    }
    free(out);
    free(sp);
    if (bad) {
        lf_free(*ia);
        lf_free(*ib);
        *ia = *ib = NULL;
        return -1;
    }
    return 0;
}

/* Mode dpo: the rejected response's ids (ic), as the chosen's were made
 * (through the template when there is one). */
static int encode_rejected(const prep *p, const batch *b, item *it, int n_threads, uint32_t **ic, size_t *nc) {
    if (!p->has_tpl) return encode_field(p, b, it, b->arena + it->c_off, it->c_len, it->kc_off, n_threads, ic, nc);
    item tmp = *it; /* the same pair rendering with the rejected response in the chosen's place */
    tmp.b_off = it->c_off;
    tmp.b_len = it->c_len;
    tmp.kb_off = it->kc_off;
    uint32_t *ia = NULL;
    size_t na = 0;
    const int r = encode_templated(p, b, &tmp, n_threads, &ia, &na, ic, nc);
    lf_free(ia); /* the prompt part is the chosen's, token for token */
    it->st = tmp.st;
    it->bad = tmp.bad;
    it->msg = tmp.msg;
    return r;
}

/* Mode dpo: ids = prompt, chosen, eot, prompt, rejected, eot; the mask 1
 * on each response and its eot (two rows; lf_pairs in pairs.c reads them). */
static void join_dpo(const prep *p, item *it, const uint32_t *ia, size_t na, const uint32_t *ib, size_t nb,
                     const uint32_t *ic, size_t nc) {
    const size_t n = 2 * na + nb + nc + 2;
    it->ids = lf_alloc(n * sizeof *it->ids);
    it->mask = malloc(n);
    if (!it->ids || !it->mask) {
        it->st = LF_ERR_NOMEM;
        it->msg = strdup("out of memory joining a preference triple");
        return;
    }
    size_t at = 0;
    const uint32_t *resp[2] = {ib, ic};
    const size_t rn[2] = {nb, nc};
    for (int r = 0; r < 2; r++) {
        if (na) memcpy(it->ids + at, ia, na * sizeof *ia);
        memset(it->mask + at, 0, na);
        at += na;
        if (rn[r]) memcpy(it->ids + at, resp[r], rn[r] * sizeof *ia);
        it->ids[at + rn[r]] = (uint32_t)p->eot;
        memset(it->mask + at, 1, rn[r] + 1);
        at += rn[r] + 1;
    }
    it->n = n;
    it->targets = nb + nc + 2;
}

/* A record whose rendering failed (a template's raise_exception, a
 * conversation it cannot hold): "FILE:LINE: field 'messages': ...", bad
 * (skip_bad_records) or fatal; memory and internal failures are fatal. */
static void conversation_failed(const prep *p, const batch *b, item *it, lf_status st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s:%llu: field '%s': %s", p->src[it->src].path, (unsigned long long)it->line,
             it->ka_off != NO_KEY ? b->arena + it->ka_off : "messages", lf_last_error());
    if (st == LF_ERR_NOMEM || st == LF_ERR_INTERNAL) it->st = st;
    else if (p->o->skip_bad_records) it->bad = 1;
    else it->st = st == LF_ERR_INVALID_ARG || st == LF_ERR_UNSUPPORTED || st == LF_ERR_RANGE ? st : LF_ERR_FORMAT;
    if (!(it->msg = strdup(msg))) it->st = LF_ERR_NOMEM;
}

/* A conversation (prepare_chat.c): mask 1 exactly on the assistant turns. */
static void encode_messages(const prep *p, const batch *b, item *it, int n_threads) {
    lf_status st = lf__prepare_conversation(&p->tpl, p->tok, b->arena + it->a_off, it->a_len, (uint32_t)p->eot,
                                            n_threads, &it->ids, &it->mask, &it->n, &it->targets);
    if (st != LF_OK) conversation_failed(p, b, it, st);
    it->split = p->o->keep_splits
                    ? p->src[it->src].split
                    : lf__split_pick(lf__split_unit(b->arena + it->a_off, it->a_len + 1 + it->b_len), p->w);
}

void lf__prep_encode_item(const prep *p, const batch *b, item *it, int n_threads) {
    if (it->msgs) {
        encode_messages(p, b, it, n_threads);
        return;
    }
    const char *a = b->arena + it->a_off;
    uint32_t *ia = NULL, *ib = NULL;
    size_t na = 0, nb = 0;
    size_t klen = it->a_len;
    if (p->sft && p->has_tpl) {
        if (encode_templated(p, b, it, n_threads, &ia, &na, &ib, &nb) != 0) return;
        klen = it->a_len + 1 + it->b_len; /* the split key is the pair's own bytes, whatever the template */
    } else {
        if (encode_field(p, b, it, a, it->a_len, it->ka_off, n_threads, &ia, &na) != 0) return;
        if (p->sft) {
            if (encode_field(p, b, it, b->arena + it->b_off, it->b_len, it->kb_off, n_threads, &ib, &nb) != 0) {
                lf_free(ia);
                return;
            }
            klen = it->a_len + 1 + it->b_len; /* prompt 0x00 response, contiguous in the arena */
        }
    }
    if (p->dpo) {
        uint32_t *ic = NULL;
        size_t nc = 0;
        if (na == 0) { /* a row is found by its prompt (pairs.c); the reader refuses empty prompts already */
            lf_fail(LF_ERR_FORMAT, "the prompt encodes to no token; each DPO row starts with its prompt");
            (void)encode_failed(p, b, it, LF_ERR_FORMAT, it->ka_off);
        } else if (encode_rejected(p, b, it, n_threads, &ic, &nc) == 0) {
            it->split = p->o->keep_splits ? p->src[it->src].split
                                          : lf__split_pick(lf__split_unit(a, it->c_off + it->c_len - it->a_off), p->w);
            join_dpo(p, it, ia, na, ib, nb, ic, nc);
        }
        lf_free(ia);
        lf_free(ib);
        lf_free(ic);
        return;
    }
    it->split = p->o->keep_splits ? p->src[it->src].split : lf__split_pick(lf__split_unit(a, klen), p->w);
    if (!p->sft) {
        it->ids = ia; /* the end-of-text is appended at commit */
        it->n = na;
        it->targets = na + 1;
        return;
    }
    size_t n = na + nb + 1;
    it->ids = lf_alloc(n * sizeof *it->ids);
    it->mask = malloc(n);
    if (!it->ids || !it->mask) {
        it->st = LF_ERR_NOMEM;
        it->msg = strdup("out of memory joining a prompt and its response");
    } else {
        if (na) memcpy(it->ids, ia, na * sizeof *ia);
        if (nb) memcpy(it->ids + na, ib, nb * sizeof *ib);
        it->ids[na + nb] = (uint32_t)p->eot;
        memset(it->mask, 0, na);
        memset(it->mask + na, 1, nb + 1);
        it->n = n;
        it->targets = nb + 1;
    }
    lf_free(ia);
    lf_free(ib);
}

/* Claim and encode records until none is left (large ones are skipped:
 * the calling thread encodes them on all threads afterwards). */
void lf__prep_encode_batch(const prep *p, batch *b) {
    for (;;) {
        size_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->n) break;
        item *it = &b->it[i];
        if (it->kind == ITEM_RECORD && !it->large) lf__prep_encode_item(p, b, it, 1);
    }
}

/* ---------------------------------------------------------------- pool */
static void *pool_main(void *arg) {
    pool *pl = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (!pl->stop && (!pl->cur || pl->gen == seen)) pthread_cond_wait(&pl->wake, &pl->mu);
        if (pl->stop) break;
        batch *b = pl->cur;
        seen = pl->gen;
        pl->busy++;
        pthread_mutex_unlock(&pl->mu);
        lf__prep_encode_batch(pl->p, b);
        pthread_mutex_lock(&pl->mu);
        if (--pl->busy == 0) pthread_cond_broadcast(&pl->idle);
    }
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

void lf__prep_pool_free(pool *pl) {
    if (!pl) return;
    pthread_mutex_lock(&pl->mu);
    pl->stop = 1;
    pthread_cond_broadcast(&pl->wake);
    pthread_mutex_unlock(&pl->mu);
    for (int i = 0; i < pl->n_th; i++) pthread_join(pl->th[i], NULL);
    pthread_cond_destroy(&pl->wake);
    pthread_cond_destroy(&pl->idle);
    pthread_mutex_destroy(&pl->mu);
    free(pl->th);
    free(pl);
}

/* n helper threads; NULL (and no error) when none could be started: the
 * calling thread then does all the work, with the same result. */
pool *lf__prep_pool_create(prep *p, int n) {
    pool *pl = calloc(1, sizeof *pl);
    if (!pl) return NULL;
    pl->p = p;
    if (!(pl->th = calloc((size_t)n, sizeof *pl->th))) {
        free(pl);
        return NULL;
    }
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->wake, NULL);
    pthread_cond_init(&pl->idle, NULL);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&pl->th[i], NULL, pool_main, pl) != 0) break;
        pl->n_th++;
    }
    if (pl->n_th == 0) {
        lf__prep_pool_free(pl);
        return NULL;
    }
    return pl;
}

void lf__prep_pool_start(pool *pl, batch *b) {
    pthread_mutex_lock(&pl->mu);
    pl->cur = b;
    pl->gen++;
    pthread_cond_broadcast(&pl->wake);
    pthread_mutex_unlock(&pl->mu);
}

/* Help encode b, then wait until no helper is inside it. */
void lf__prep_pool_wait(const prep *p, pool *pl, batch *b) {
    lf__prep_encode_batch(p, b);
    pthread_mutex_lock(&pl->mu);
    while (pl->busy > 0) pthread_cond_wait(&pl->idle, &pl->mu);
    pl->cur = NULL;
    pthread_mutex_unlock(&pl->mu);
}
