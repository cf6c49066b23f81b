/*
 * Preference pairs of a DPO dataset (lf_pairs; layout in
 * include/llmforge/data.h, "preference pairs"; user guide docs/data.md).
 *
 * The split is read as the concatenation of its shards (lf__dataset_copy),
 * once, to find where each row starts: a token with loss mask 0 right after
 * one with mask 1 (or the split's first token). prepare --mode dpo writes a
 * non-empty prompt (mask 0) at the head of every row and the completion and
 * its end-of-text (mask 1) after it, so the rows found are exactly the rows
 * written, whatever token ids the texts hold (a char vocabulary's
 * end-of-text is "\n", which may occur inside a text).
 *
 * Invariants:
 *  - start[] holds n_rows + 1 entries, start[n_rows] = the split's tokens;
 *    n_rows is even (pairs), else open fails.
 *  - lf_pairs_get allocates nothing and keeps no state: safe from several
 *    threads at once.
 */
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

#define SCAN_CHUNK 4096

struct lf_pairs {
    const lf_dataset *d;
    lf_split split;
    uint64_t *start; /* (n_rows + 1) */
    uint64_t n_rows;
    int pad; /* input id of padding: the end-of-text, else 0 */
};

static const char *split_name(lf_split s) { return s == LF_SPLIT_TRAIN ? "train" : "val"; }

lf_status lf_pairs_open(lf_pairs **out, const lf_dataset *d, lf_split split) {
    if (!out || !d) return lf_fail(LF_ERR_INVALID_ARG, "lf_pairs_open: NULL argument");
    *out = NULL;
    if (strcmp(lf_dataset_mode(d), "dpo") != 0)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "dataset '%s' was prepared in mode '%s', not 'dpo': preference pairs come from "
                       "`llmforge prepare --mode dpo` on prompt/chosen/rejected records",
                       lf_dataset_dir(d), lf_dataset_mode(d)[0] ? lf_dataset_mode(d) : "pretrain");
    const size_t N = lf_dataset_num_tokens(d, split);
    if (N == 0)
        return lf_fail(LF_ERR_NOT_FOUND, "dataset '%s': has no split '%s'", lf_dataset_dir(d), split_name(split));
    lf_pairs *p = calloc(1, sizeof *p);
    int32_t *buf = malloc(SCAN_CHUNK * sizeof *buf);
    size_t cap = 1024;
    if (p) p->start = malloc(cap * sizeof *p->start);
    if (!p || !buf || !p->start) goto nomem;
    p->d = d;
    p->split = split;
    p->pad = lf_dataset_eot(d) >= 0 ? lf_dataset_eot(d) : 0;
    int prev_completion = 1; /* position 0 starts a row */
    for (size_t pos = 0; pos < N; pos += SCAN_CHUNK) {
        size_t m = N - pos < SCAN_CHUNK ? N - pos : SCAN_CHUNK;
        lf_status st = lf__dataset_copy(d, split, pos, m, buf, 1);
        if (st != LF_OK) {
            lf_pairs_free(p);
            free(buf);
            return st;
        }
        for (size_t j = 0; j < m; j++) {
            const int completion = buf[j] >= 0;
            if (!completion && prev_completion) {
                if (p->n_rows + 1 == cap) {
                    uint64_t *bigger = realloc(p->start, 2 * cap * sizeof *bigger);
                    if (!bigger) goto nomem;
                    p->start = bigger;
                    cap *= 2;
                }
                p->start[p->n_rows++] = pos + j;
            }
            prev_completion = completion;
        }
    }
    free(buf);
    buf = NULL;
    p->start[p->n_rows] = N;
    if (p->n_rows == 0 || p->n_rows % 2 || p->start[0] != 0) {
        lf_status st = lf_fail(LF_ERR_FORMAT,
                               "dataset '%s': split '%s' holds %llu prompt/completion rows%s; a DPO split holds "
                               "pairs of rows (chosen, rejected), each a prompt then its completion",
                               lf_dataset_dir(d), split_name(split), (unsigned long long)p->n_rows,
                               p->n_rows && p->start[0] != 0 ? " and starts with a completion" : "");
        lf_pairs_free(p);
        return st;
    }
    *out = p;
    return LF_OK;
nomem:
    free(buf);
    lf_pairs_free(p);
    return lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory indexing the pairs of split '%s'", lf_dataset_dir(d),
                   split_name(split));
}

uint64_t lf_pairs_count(const lf_pairs *p) { return p ? p->n_rows / 2 : 0; }

uint64_t lf_pairs_longest(const lf_pairs *p, uint64_t limit, uint64_t *n_longer) {
    uint64_t longest = 0, n = 0;
    for (uint64_t r = 0; p && r < p->n_rows; r++) {
        const uint64_t len = p->start[r + 1] - p->start[r];
        if (len > longest) longest = len;
        n += len > limit;
    }
    if (n_longer) *n_longer = n;
    return longest;
}

/* Row r into inputs[0, T) and targets[0, T). */
static lf_status get_row(const lf_pairs *p, uint64_t r, int T, int32_t *in, int32_t *tg) {
    const uint64_t s = p->start[r], len = p->start[r + 1] - s;
    const size_t n_in = len < (uint64_t)T ? (size_t)len : (size_t)T;           /* x[0 .. n_in) */
    const size_t n_tg = len - 1 < (uint64_t)T ? (size_t)(len - 1) : (size_t)T; /* x[1 .. n_tg] */
    lf_status st = lf__dataset_copy(p->d, p->split, (size_t)s, n_in, in, 0);
    if (st == LF_OK) st = lf__dataset_copy(p->d, p->split, (size_t)s + 1, n_tg, tg, 1);
    if (st != LF_OK) return st;
    for (size_t t = n_in; t < (size_t)T; t++) in[t] = p->pad;
    for (size_t t = n_tg; t < (size_t)T; t++) tg[t] = -1;
    return LF_OK;
}

lf_status lf_pairs_get(const lf_pairs *p, uint64_t pair, int T, int32_t *inputs, int32_t *targets) {
    if (!p || !inputs || !targets || T < 1) return lf_fail(LF_ERR_INVALID_ARG, "lf_pairs_get: bad argument");
    if (pair >= p->n_rows / 2)
        return lf_fail(LF_ERR_RANGE, "dataset '%s': pair %llu of split '%s' is past its %llu pairs",
                       lf_dataset_dir(p->d), (unsigned long long)pair, split_name(p->split),
                       (unsigned long long)(p->n_rows / 2));
    lf_status st = get_row(p, 2 * pair, T, inputs, targets);
    if (st == LF_OK) st = get_row(p, 2 * pair + 1, T, inputs + T, targets + T);
    return st;
}

void lf_pairs_free(lf_pairs *p) {
    if (!p) return;
    free(p->start);
    free(p);
}
