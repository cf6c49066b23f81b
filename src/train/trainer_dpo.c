/*
 * The DPO objective in the trainer (train.objective dpo; docs/training.md
 * "DPO"): the pair index of each split, the reference log-probs, a step's
 * batches of pairs, its micro-batches (dpo.c), and the evaluation figures.
 *
 * Invariants:
 *  - Reference log-probs are TRL's precompute_ref_log_probs: one forward of
 *    the initial model over every pair of train and val before the first
 *    step (for LoRA the initial model is the base: adapters start at B = 0).
 *    They are written once to out_dir/dpo_ref_logps.bin (magic, version,
 *    pair and token counts of the splits, block size, then per split and
 *    pair the chosen's and the rejected's log-prob as little-endian doubles)
 *    and read back by a resumed run, whose weights are no longer the initial
 *    ones; a resume without the file, or with one made for other data or
 *    another block size, is refused.
 *  - Micro-batch rows: 2i chosen, 2i+1 rejected of pair slot i; P = B/2
 *    pair slots. Slot i of micro-batch a of rank r at data step s reads
 *    global pair row g = lf_loader_row(opts with micro_batch P, s, a, i), and
 *    pair lf_dataset_packed_window(g, n_pairs, seed, LF_RNG_DATA): epochs
 *    of the train pairs in a seeded permutation, a pure function of the step
 *    (resume reads the same pairs).
 *  - The step's loss is the mean pair loss over the global batch: dloss =
 *    loss scale / (P * A * world); the metrics are sums reduced over the
 *    ranks, divided by the pairs.
 *  - Evaluation rows are keyed by (step, batch) as for the lm objective.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

#define REF_FILE "dpo_ref_logps.bin"
#define REF_MAGIC "LFDPOREF"
#define REF_VERSION 1u
#define REF_HEADER 56

struct lf__dpo {
    lf_pairs *pairs[2];   /* train, val (NULL when the dataset has no val split) */
    double *ref[2];       /* (2 * pairs) chosen, rejected */
    lf_dpo_stats acc;     /* the current step's sums */
    uint64_t rows_served; /* pair rows taken by this run's steps, all ranks (epoch) */
    double *ref_batch;    /* (A * B) the step's reference log-probs, in row order */
};

void lf__dpo_free(lf__dpo *d) {
    if (!d) return;
    for (int s = 0; s < 2; s++) {
        lf_pairs_free(d->pairs[s]);
        free(d->ref[s]);
    }
    free(d->ref_batch);
    free(d);
}

static uint64_t n_pairs(const lf__dpo *d, int s) { return lf_pairs_count(d->pairs[s]); }

/* Reference log-probs of every pair of split s, P pairs per forward. */
static lf_status compute_ref(lf_trainer *t, int s) {
    lf__dpo *d = t->dpo;
    const int P = t->cfg.micro_batch / 2, T = t->cfg.model.block_size;
    const uint64_t n = n_pairs(d, s);
    for (uint64_t k0 = 0; k0 < n; k0 += (uint64_t)P) {
        const int np = n - k0 < (uint64_t)P ? (int)(n - k0) : P;
        lf_status st = LF_OK;
        for (int i = 0; i < np && st == LF_OK; i++)
            st = lf_pairs_get(d->pairs[s], k0 + (uint64_t)i, T, t->inputs + (size_t)2 * i * T,
                              t->targets + (size_t)2 * i * T);
        if (st == LF_OK) st = lf_dpo_logps(t->model, t->inputs, t->targets, np, T, d->ref[s] + 2 * k0);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static lf_status write_ref(lf_trainer *t, const char *path) {
    lf__dpo *d = t->dpo;
    const uint64_t n0 = n_pairs(d, 0), n1 = n_pairs(d, 1), nv = 2 * (n0 + n1);
    const size_t bytes = REF_HEADER + (size_t)nv * 8;
    unsigned char *buf = calloc(1, bytes);
    if (!buf) return lf_fail(LF_ERR_NOMEM, "dpo: out of memory writing '%s'", path);
    memcpy(buf, REF_MAGIC, 8);
    put_u64(buf + 8, REF_VERSION);
    put_u64(buf + 16, n0);
    put_u64(buf + 24, n1);
    put_u64(buf + 32, lf_dataset_num_tokens(t->ds, LF_SPLIT_TRAIN));
    put_u64(buf + 40, lf_dataset_num_tokens(t->ds, LF_SPLIT_VAL));
    put_u64(buf + 48, (uint64_t)t->cfg.model.block_size);
    unsigned char *p = buf + REF_HEADER;
    for (int s = 0; s < 2; s++)
        for (uint64_t k = 0; k < 2 * n_pairs(d, s); k++, p += 8) {
            uint64_t bits;
            memcpy(&bits, &d->ref[s][k], 8);
            put_u64(p, bits);
        }
    char tmp[LF_PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    lf_status st = lf_file_write_all(tmp, buf, bytes);
    free(buf);
    if (st == LF_OK && rename(tmp, path) != 0)
        st = lf_fail(LF_ERR_IO, "dpo: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    return st;
}

static lf_status read_ref(lf_trainer *t, const char *path) {
    lf__dpo *d = t->dpo;
    char *buf = NULL;
    size_t len = 0;
    lf_status st = lf_file_read_all(path, 0, &buf, &len);
    if (st != LF_OK)
        return lf_fail(st,
                       "train.objective dpo: a resumed run needs the reference log-probs of its first step, "
                       "'%s': %s",
                       path, lf_last_error());
    const unsigned char *u = (const unsigned char *)buf;
    const uint64_t n0 = n_pairs(d, 0), n1 = n_pairs(d, 1);
    if (len < REF_HEADER || memcmp(u, REF_MAGIC, 8) != 0 || get_u64(u + 8) != REF_VERSION)
        st = lf_fail(LF_ERR_FORMAT, "'%s': not a version-%u DPO reference file", path, REF_VERSION);
    else if (get_u64(u + 16) != n0 || get_u64(u + 24) != n1 || len != REF_HEADER + 16 * (n0 + n1) ||
             get_u64(u + 32) != lf_dataset_num_tokens(t->ds, LF_SPLIT_TRAIN) ||
             get_u64(u + 40) != lf_dataset_num_tokens(t->ds, LF_SPLIT_VAL))
        st = lf_fail(LF_ERR_MISMATCH,
                     "'%s' holds reference log-probs of %llu train and %llu val pairs (%llu and %llu tokens, %zu "
                     "bytes); dataset '%s' has %llu and %llu pairs (%zu and %zu tokens): it was made for other data",
                     path, (unsigned long long)get_u64(u + 16), (unsigned long long)get_u64(u + 24),
                     (unsigned long long)get_u64(u + 32), (unsigned long long)get_u64(u + 40), len, t->cfg.dataset,
                     (unsigned long long)n0, (unsigned long long)n1, lf_dataset_num_tokens(t->ds, LF_SPLIT_TRAIN),
                     lf_dataset_num_tokens(t->ds, LF_SPLIT_VAL));
    else if (get_u64(u + 48) != (uint64_t)t->cfg.model.block_size)
        st = lf_fail(LF_ERR_MISMATCH,
                     "'%s' holds reference log-probs of rows cut to model.block_size %llu, the run has %d: resume "
                     "with the same block size",
                     path, (unsigned long long)get_u64(u + 48), t->cfg.model.block_size);
    const unsigned char *p = u + REF_HEADER;
    for (int s = 0; s < 2 && st == LF_OK; s++)
        for (uint64_t k = 0; k < 2 * n_pairs(d, s); k++, p += 8) {
            uint64_t bits = get_u64(p);
            memcpy(&d->ref[s][k], &bits, 8);
        }
    lf_free(buf);
    return st;
}

lf_status lf__dpo_open(lf_trainer *t) {
    const int dpo_data = strcmp(lf_dataset_mode(t->ds), "dpo") == 0;
    if (t->cfg.objective != LF_OBJECTIVE_DPO) {
        if (!dpo_data) return LF_OK;
        return lf_fail(LF_ERR_CONFIG,
                       "dataset '%s' holds preference pairs (prepared with --mode dpo): train it with "
                       "train.objective dpo",
                       t->cfg.dataset);
    }
    lf__dpo *d = calloc(1, sizeof *d);
    if (!d) return lf_fail(LF_ERR_NOMEM, "dpo: out of memory");
    t->dpo = d;
    const size_t rows = (size_t)t->cfg.grad_accum * (size_t)t->cfg.micro_batch;
    if (!(d->ref_batch = malloc(sizeof(double) * rows))) return lf_fail(LF_ERR_NOMEM, "dpo: out of memory");
    lf_status st = lf_pairs_open(&d->pairs[0], t->ds, LF_SPLIT_TRAIN);
    if (st == LF_OK && lf_dataset_num_tokens(t->ds, LF_SPLIT_VAL) > 0)
        st = lf_pairs_open(&d->pairs[1], t->ds, LF_SPLIT_VAL);
    if (st != LF_OK) {
        lf_error_prefix("train.objective dpo");
        return st;
    }
    for (int s = 0; s < 2; s++) {
        const uint64_t n = n_pairs(d, s);
        if (n && !(d->ref[s] = malloc(sizeof(double) * 2 * n)))
            return lf_fail(LF_ERR_NOMEM, "dpo: out of memory for the reference log-probs of %llu pairs",
                           (unsigned long long)n);
    }
    for (int s = 0; s < 2 && t->rank == 0; s++) { /* a row past the block loses its tail: say so */
        const uint64_t T1 = (uint64_t)t->cfg.model.block_size + 1;
        uint64_t longer = 0, longest = lf_pairs_longest(d->pairs[s], T1, &longer);
        if (longer)
            lf_log(LF_LOG_WARN,
                   "dpo: %llu of the %llu %s rows are longer than model.block_size + 1 = %llu tokens (the longest "
                   "%llu) and are cut there: their completions' tails carry no loss",
                   (unsigned long long)longer, (unsigned long long)(2 * n_pairs(d, s)), s ? "val" : "train",
                   (unsigned long long)T1, (unsigned long long)longest);
    }
    char path[LF_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", t->cfg.out_dir, REF_FILE);
    if (t->step > 0) return read_ref(t, path); /* resumed: the weights are not the initial ones any more */
    double t0 = lf_time_now();
    for (int s = 0; s < 2 && st == LF_OK; s++)
        if (n_pairs(d, s)) st = compute_ref(t, s);
    if (st == LF_OK && t->rank == 0) st = write_ref(t, path);
    if (st == LF_OK && t->rank == 0)
        lf_log(LF_LOG_INFO, "dpo: reference log-probs of %llu train and %llu val pairs in %.1f s (%s)",
               (unsigned long long)n_pairs(d, 0), (unsigned long long)n_pairs(d, 1), lf_time_now() - t0, path);
    return st;
}

lf_status lf__dpo_step_load(lf_trainer *t, int64_t *count) {
    lf__dpo *d = t->dpo;
    const int P = t->cfg.micro_batch / 2, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    const size_t B = (size_t)t->cfg.micro_batch;
    lf_loader_opts lo = lf_loader_opts_default();
    lo.micro_batch = P;
    lo.accum = A;
    lo.rank = t->rank;
    lo.world = t->world;
    const uint64_t step = (uint64_t)(t->step + t->data_off), n = n_pairs(d, 0);
    memset(&d->acc, 0, sizeof d->acc);
    for (int a = 0; a < A; a++)
        for (int i = 0; i < P; i++) {
            const uint64_t pair = lf_dataset_packed_window(lf_loader_row(&lo, step, a, i), n, t->cfg.seed, LF_RNG_DATA);
            const size_t row = (size_t)a * B + 2 * (size_t)i;
            lf_status st = lf_pairs_get(d->pairs[0], pair, T, t->inputs + row * T, t->targets + row * T);
            if (st != LF_OK) return st;
            /* the pair's reference log-probs travel in the batch's own order */
            d->ref_batch[row] = d->ref[0][2 * pair];
            d->ref_batch[row + 1] = d->ref[0][2 * pair + 1];
        }
    *count = (int64_t)P * A * t->world;
    d->rows_served = (step + 1) * (uint64_t)P * (uint64_t)A * (uint64_t)t->world;
    return LF_OK;
}

lf_status lf__dpo_micro(lf_trainer *t, int a, const lf_forward_opts *fo, double *loss_sum) {
    lf__dpo *d = t->dpo;
    const int P = t->cfg.micro_batch / 2, T = t->cfg.model.block_size;
    const size_t off = (size_t)a * (size_t)t->cfg.micro_batch;
    const double before = d->acc.loss;
    lf_status st = lf_dpo_forward_backward(t->model, t->inputs + off * T, t->targets + off * T, P, T,
                                           d->ref_batch + off, t->cfg.dpo_beta, fo, &d->acc);
    *loss_sum = d->acc.loss - before;
    return st;
}

lf_status lf__dpo_step_stats(lf_trainer *t, step_result *o) {
    o->dpo = t->dpo->acc;
    o->has_dpo = 1;
    if (t->world > 1) return lf__step_sum_f64(t, o, &o->dpo.pairs, LF_DPO_STATS_N);
    return LF_OK;
}

double lf__dpo_epoch(const lf_trainer *t) {
    const uint64_t n = n_pairs(t->dpo, 0);
    return n ? (double)t->dpo->rows_served / (double)n : 0;
}

lf_status lf__dpo_estimate(lf_trainer *t, lf_split split, double *loss, lf_dpo_stats *out) {
    lf__dpo *d = t->dpo;
    const int s = split == LF_SPLIT_TRAIN ? 0 : 1;
    const int P = t->cfg.micro_batch / 2, T = t->cfg.model.block_size, iters = t->cfg.eval_iters;
    const uint64_t n = n_pairs(d, s);
    memset(out, 0, sizeof *out);
    *loss = NAN;
    if (!n) return LF_OK;
    double *ref = d->ref_batch;
    lf_forward_opts fo = {0};
    for (int k = 0; k < iters; k++) {
        const uint64_t batch = (uint64_t)t->step * (uint64_t)iters + (uint64_t)k;
        const uint64_t first = (batch * (uint64_t)t->world + (uint64_t)t->rank) * (uint64_t)P;
        for (int i = 0; i < P; i++) {
            const uint64_t pair = lf_rng_u64(t->cfg.seed, s ? LF_RNG_EVAL + 16 : LF_RNG_EVAL, first + (uint64_t)i) % n;
            lf_status st = lf_pairs_get(d->pairs[s], pair, T, t->inputs + (size_t)2 * i * T,
                                        t->targets + (size_t)2 * i * T);
            if (st != LF_OK) return st;
            ref[2 * i] = d->ref[s][2 * pair];
            ref[2 * i + 1] = d->ref[s][2 * pair + 1];
        }
        lf_status st = lf_dpo_forward_backward(t->model, t->inputs, t->targets, P, T, ref, t->cfg.dpo_beta, &fo, out);
        if (st != LF_OK) return st;
    }
    if (t->world > 1) {
        lf_status st = lf_comm_all_reduce_f64(t->comm, &out->pairs, LF_DPO_STATS_N, LF_COMM_SUM);
        if (st != LF_OK) return st;
    }
    *loss = out->pairs > 0 ? out->loss / out->pairs : NAN;
    return LF_OK;
}

int lf__dpo_metrics(const lf_dpo_stats *s, const char *prefix, lf_obs_scalar *sc, char (*names)[160], int n_max) {
    static const char *const keys[] = {"rewards/chosen",  "rewards/rejected", "rewards/accuracies",
                                       "rewards/margins", "logps/chosen",     "logps/rejected"};
    if (!(s->pairs > 0) || n_max < 6) return 0;
    const double v[6] = {s->reward_chosen, s->reward_rejected, s->accuracy,
                         s->margin,        s->logp_chosen,     s->logp_rejected};
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof names[i], "%s/%s", prefix, keys[i]);
        sc[i] = (lf_obs_scalar){names[i], v[i] / s->pairs};
    }
    return 6;
}
