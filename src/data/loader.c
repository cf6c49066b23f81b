/*
 * The training loader: a step's batches (accum micro-batches of B x T) for
 * one rank, prepared ahead by a background thread.
 *
 * The sampler (dataset.c) is a pure function of the global row index, so the
 * loader's only state is the next step: row b of micro-batch a of rank r at
 * step s is
 *     g = ((s * accum + a) * world + r) * B + b,
 * which for world = 1 is s*accum*B + a*B + b, the rows a single process
 * reads. Ranks read disjoint rows of the same global sequence (for packed
 * epochs: disjoint windows of each epoch), and resuming at step s is opening
 * the loader at s: O(1), nothing to replay.
 *
 * With prefetch = K > 0 a thread fills a ring of K step slots ahead of the
 * consumer; lf_loader_next copies the next slot out (a few hundred KiB at
 * most) and reports how long it waited for it. With K = 0 the batches are
 * made in the caller, and the "wait" is the time that took. An error in the
 * thread (a batch the dataset refuses) is kept in its slot with its message
 * and returned by the lf_loader_next that reaches that step.
 *
 * With a pack (lf_loader_opts.pack: rows of whole SFT examples, sft_pack.c)
 * the rows come from the pack instead of the dataset's sampler, each with
 * its tokens' positions (lf_loader_next_pos), the ring holding them too;
 * the row index formula is the same.
 *
 * Written here rather than taken from a library: it is a bounded
 * producer/consumer ring over the project's own sampler, some eighty lines of
 * pthreads.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

typedef struct slot {
    uint64_t step;
    int ready;
    lf_status st;
    char msg[512];
    int32_t *inputs, *targets, *pos; /* (accum*B*T) each */
} slot;

struct lf_loader {
    const lf_dataset *ds;
    lf_loader_opts o;
    size_t step_elems; /* accum * B * T */
    uint64_t next;     /* the step lf_loader_next returns next */
    /* prefetch ring */
    int depth;
    slot *ring;
    uint64_t fill; /* the step the thread fills next */
    int stop, thread_started;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_ready, cv_free;
    double wait_total;
};

uint64_t lf_loader_row(const lf_loader_opts *o, uint64_t step, int micro, int b) {
    return ((step * (uint64_t)o->accum + (uint64_t)micro) * (uint64_t)o->world + (uint64_t)o->rank) *
               (uint64_t)o->micro_batch +
           (uint64_t)b;
}

/* pos: NULL, or each token's position in its example (0..T-1 per row
 * without a pack). */
static lf_status make_step(const lf_loader *l, uint64_t step, int32_t *inputs, int32_t *targets, int32_t *pos) {
    const lf_loader_opts *o = &l->o;
    const size_t BT = (size_t)o->micro_batch * (size_t)o->block_size;
    for (int a = 0; a < o->accum; a++) {
        if (o->pack) {
            lf_status st = lf_sft_pack_get_batch(o->pack, o->seed, o->purpose, lf_loader_row(o, step, a, 0),
                                                 o->micro_batch, inputs + (size_t)a * BT, targets + (size_t)a * BT,
                                                 pos + (size_t)a * BT);
            if (st != LF_OK) return st;
            continue;
        }
        if (pos)
            for (size_t i = 0; i < BT; i++) pos[(size_t)a * BT + i] = (int32_t)(i % (size_t)o->block_size);
        lf_status st = lf_dataset_get_batch(l->ds, o->split, o->sampling, o->seed, o->purpose,
                                            lf_loader_row(o, step, a, 0), o->micro_batch, o->block_size,
                                            inputs + (size_t)a * BT, targets + (size_t)a * BT);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static void *producer(void *arg) {
    lf_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        /* the slot for step `fill` is free once the consumer has taken step fill - depth */
        while (!l->stop && l->fill >= l->next + (uint64_t)l->depth) pthread_cond_wait(&l->cv_free, &l->mu);
        if (l->stop) break;
        uint64_t step = l->fill;
        slot *s = &l->ring[step % (uint64_t)l->depth];
        pthread_mutex_unlock(&l->mu);
        lf_status st = make_step(l, step, s->inputs, s->targets, s->pos);
        pthread_mutex_lock(&l->mu);
        s->step = step;
        s->st = st;
        if (st != LF_OK) snprintf(s->msg, sizeof s->msg, "%s", lf_last_error());
        s->ready = 1;
        l->fill++;
        pthread_cond_broadcast(&l->cv_ready);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

lf_loader_opts lf_loader_opts_default(void) {
    return (lf_loader_opts){.split = LF_SPLIT_TRAIN,
                            .sampling = LF_SAMPLING_RANDOM,
                            .purpose = LF_RNG_DATA,
                            .micro_batch = 1,
                            .block_size = 1,
                            .accum = 1,
                            .rank = 0,
                            .world = 1,
                            .prefetch = 2};
}

lf_status lf_loader_open(lf_loader **out, const lf_dataset *ds, const lf_loader_opts *o, uint64_t first_step) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_loader_open: out is NULL");
    *out = NULL;
    if (!ds || !o) return lf_fail(LF_ERR_INVALID_ARG, "lf_loader_open: NULL argument");
    if (o->micro_batch < 1 || o->block_size < 1 || o->accum < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "loader: micro-batch %d, block_size %d and accumulation %d must be positive",
                       o->micro_batch, o->block_size, o->accum);
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return lf_fail(LF_ERR_INVALID_ARG, "loader: rank %d is not in 0..world_size-1 (world_size %d)", o->rank,
                       o->world);
    if (o->pack) {
        lf_sft_pack_stats ps;
        lf_sft_pack_stats_get(o->pack, &ps);
        if (ps.block_size != o->block_size)
            return lf_fail(LF_ERR_INVALID_ARG, "loader: block_size %d, but the pack's rows are %d tokens long",
                           o->block_size, ps.block_size);
    }
    if (o->prefetch < 0 || o->prefetch > 64)
        return lf_fail(LF_ERR_INVALID_ARG, "loader: prefetch depth %d is not in 0..64", o->prefetch);
    const size_t elems = (size_t)o->accum * (size_t)o->micro_batch * (size_t)o->block_size;
    lf_loader *l = calloc(1, sizeof *l);
    if (!l) return lf_fail(LF_ERR_NOMEM, "loader: out of memory");
    l->ds = ds;
    l->o = *o;
    l->step_elems = elems;
    l->next = l->fill = first_step;
    l->depth = o->prefetch;

    /* refuse now what every batch would refuse (split too small, no record index, ...) */
    int32_t *probe = malloc(3 * (size_t)o->block_size * sizeof *probe);
    lf_status st = !probe    ? lf_fail(LF_ERR_NOMEM, "loader: out of memory")
                   : o->pack ? lf_sft_pack_get_batch(o->pack, o->seed, o->purpose, lf_loader_row(o, first_step, 0, 0),
                                                     1, probe, probe + o->block_size, probe + 2 * o->block_size)
                             : lf_dataset_get_batch(ds, o->split, o->sampling, o->seed, o->purpose,
                                                    lf_loader_row(o, first_step, 0, 0), 1, o->block_size, probe,
                                                    probe + o->block_size);
    free(probe);
    if (st != LF_OK) {
        free(l);
        return st;
    }
    if (l->depth > 0) {
        l->ring = calloc((size_t)l->depth, sizeof *l->ring);
        if (!l->ring) goto nomem;
        for (int i = 0; i < l->depth; i++) {
            l->ring[i].inputs = malloc(elems * sizeof(int32_t));
            l->ring[i].targets = malloc(elems * sizeof(int32_t));
            l->ring[i].pos = o->pack ? malloc(elems * sizeof(int32_t)) : NULL;
            if (!l->ring[i].inputs || !l->ring[i].targets || (o->pack && !l->ring[i].pos)) goto nomem;
        }
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->cv_ready, NULL);
        pthread_cond_init(&l->cv_free, NULL);
        if (pthread_create(&l->thread, NULL, producer, l) != 0) {
            pthread_mutex_destroy(&l->mu);
            pthread_cond_destroy(&l->cv_ready);
            pthread_cond_destroy(&l->cv_free);
            lf_loader_close(l);
            return lf_fail(LF_ERR_IO, "loader: cannot start the prefetch thread");
        }
        l->thread_started = 1;
    }
    *out = l;
    return LF_OK;
nomem:
    lf_loader_close(l);
    return lf_fail(LF_ERR_NOMEM, "loader: out of memory for %d prefetch slots of %zu tokens", o->prefetch, elems);
}

lf_status lf_loader_next(lf_loader *l, int32_t *inputs, int32_t *targets, double *wait_s) {
    return lf_loader_next_pos(l, inputs, targets, NULL, wait_s);
}

lf_status lf_loader_next_pos(lf_loader *l, int32_t *inputs, int32_t *targets, int32_t *pos, double *wait_s) {
    if (!l || !inputs || !targets) return lf_fail(LF_ERR_INVALID_ARG, "lf_loader_next: NULL argument");
    if (!pos && l->o.pack) return lf_fail(LF_ERR_INVALID_ARG, "lf_loader_next: a packing loader needs pos");
    double t0 = lf_time_now();
    lf_status st;
    if (l->depth == 0) {
        st = make_step(l, l->next, inputs, targets, pos);
    } else {
        pthread_mutex_lock(&l->mu);
        slot *s = &l->ring[l->next % (uint64_t)l->depth];
        while (!(s->ready && s->step == l->next)) pthread_cond_wait(&l->cv_ready, &l->mu);
        pthread_mutex_unlock(&l->mu);
        st = s->st;
        if (st != LF_OK) return lf_fail(st, "%s", s->msg); /* the slot stays: a retry gets the same error */
        memcpy(inputs, s->inputs, l->step_elems * sizeof(int32_t));
        memcpy(targets, s->targets, l->step_elems * sizeof(int32_t));
        if (pos && s->pos) memcpy(pos, s->pos, l->step_elems * sizeof(int32_t));
        else if (pos)
            for (size_t i = 0; i < l->step_elems; i++) pos[i] = (int32_t)(i % (size_t)l->o.block_size);
        pthread_mutex_lock(&l->mu);
        s->ready = 0;
        pthread_mutex_unlock(&l->mu);
    }
    double w = lf_time_now() - t0;
    if (st != LF_OK) return st;
    if (l->depth > 0) {
        pthread_mutex_lock(&l->mu);
        l->next++;
        pthread_cond_signal(&l->cv_free);
        pthread_mutex_unlock(&l->mu);
    } else {
        l->next++;
    }
    l->wait_total += w;
    if (wait_s) *wait_s = w;
    return LF_OK;
}

uint64_t lf_loader_step(const lf_loader *l) { return l ? l->next : 0; }
double lf_loader_wait_total(const lf_loader *l) { return l ? l->wait_total : 0; }

double lf_loader_epoch(const lf_loader *l) {
    if (!l) return 0;
    const lf_loader_opts *o = &l->o;
    double rows = (double)l->next * o->accum * o->world * o->micro_batch; /* rows taken so far, all ranks */
    if (o->pack) {
        lf_sft_pack_stats ps;
        lf_sft_pack_stats_get(o->pack, &ps);
        return ps.rows ? rows / (double)ps.rows : 0;
    }
    if (o->sampling == LF_SAMPLING_PACKED) {
        uint64_t w = lf_dataset_packed_windows(l->ds, o->split, o->block_size);
        return w ? rows / (double)w : 0;
    }
    size_t n = lf_dataset_num_tokens(l->ds, o->split);
    return n ? rows * o->block_size / (double)n : 0;
}

void lf_loader_close(lf_loader *l) {
    if (!l) return;
    if (l->thread_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->cv_free);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv_ready);
        pthread_cond_destroy(&l->cv_free);
    }
    if (l->ring)
        for (int i = 0; i < l->depth; i++) {
            free(l->ring[i].inputs);
            free(l->ring[i].targets);
            free(l->ring[i].pos);
        }
    free(l->ring);
    free(l);
}
