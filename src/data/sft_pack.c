/*
 * Rows of whole fine-tuning examples (llmforge/data.h "SFT rows of whole
 * examples"; docs/training.md "Packing"): the index of a split's examples
 * (records between end-of-text tokens) and their layout into rows of T
 * positions, packed first-fit or one per row, with each token's position
 * inside its example for the model's packed ops.
 *
 * Invariants:
 *  - An example of L tokens at split offset s holds n = min(L-1, T)
 *    positions: inputs tok[s .. s+n-1], targets tok[s+1 .. s+n] (masked as
 *    the sampler masks them). A row's examples never overlap and never
 *    straddle rows; their positions restart at 0, the padding's too.
 *  - The layout is a pure function of (split tokens, T, mode): built once,
 *    read-only afterwards, so batches may be made from several threads and
 *    a resume at any row needs nothing replayed. Row r of the sampler is
 *    lf_dataset_packed_window(r, rows, seed, purpose): epochs of shuffled
 *    rows, every row once per epoch.
 *  - Packed mode is first-fit over the last LF_SFT_PACK_WINDOW rows still
 *    open (a row closes when a new row pushes it out of the window): O(n
 *    window) time, examples in corpus order inside each row. TRL's SFT
 *    packing ("bfd") sorts by length over the whole set first; a window
 *    keeps nearby examples together and needs no sort.
 *  - Memory: 12 bytes per example and 8 per row, plus 8 per example while
 *    building; the index never holds tokens.
 */
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

struct lf_sft_pack {
    const lf_dataset *d;
    lf_split split;
    int T;
    int32_t pad; /* padding input token: the end-of-text */
    uint64_t *ex_start;
    int32_t *ex_len;     /* positions, in row order */
    uint64_t *row_first; /* (rows + 1) first example of each row */
    lf_sft_pack_stats st;
};

#define CHUNK 8192

/* Grow arrays of examples (start, positions, targets) to hold one more. */
typedef struct ex_list {
    uint64_t *start;
    int32_t *len;
    size_t n, cap;
} ex_list;

static int ex_push(ex_list *e, uint64_t start, int32_t len) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 1024;
        uint64_t *s = realloc(e->start, cap * sizeof *s);
        if (!s) return 0;
        e->start = s;
        int32_t *l = realloc(e->len, cap * sizeof *l);
        if (!l) return 0;
        e->len = l;
        e->cap = cap;
    }
    e->start[e->n] = start;
    e->len[e->n++] = len;
    return 1;
}

/* One pass over the split: every record with at least one position. */
static lf_status index_examples(lf_sft_pack *p, ex_list *e, size_t N) {
    const int eot = lf_dataset_eot(p->d);
    int32_t *tok = malloc(2 * CHUNK * sizeof *tok), *tgt = tok + CHUNK;
    if (!tok) return lf_fail(LF_ERR_NOMEM, "sft packing: out of memory");
    lf_status st = LF_OK;
    uint64_t start = 0;
    for (size_t pos = 0; pos < N && st == LF_OK; pos += CHUNK) {
        const size_t m = N - pos < CHUNK ? N - pos : CHUNK;
        st = lf__dataset_copy(p->d, p->split, pos, m, tok, 0);
        if (st == LF_OK) st = lf__dataset_copy(p->d, p->split, pos, m, tgt, 1);
        for (size_t j = 0; j < m && st == LF_OK; j++) {
            const uint64_t at = pos + j;
            /* token at is a target of the current example when it is not its first token */
            if (at > start && tgt[j] >= 0 && at - start <= (uint64_t)p->T) p->st.targets++;
            if (tok[j] != eot && at + 1 < N) continue;
            const uint64_t L = at - start + 1; /* the record [start, at] */
            if (L >= 2) {
                const uint64_t n = L - 1 > (uint64_t)p->T ? (uint64_t)p->T : L - 1;
                p->st.truncated += L - 1 > n;
                p->st.tokens += n;
                if (!ex_push(e, start, (int32_t)n)) st = lf_fail(LF_ERR_NOMEM, "sft packing: out of memory");
            }
            start = at + 1;
        }
    }
    free(tok);
    return st;
}

/* Row of each example: packed first-fit over the last LF_SFT_PACK_WINDOW
 * open rows, or one per row. */
static lf_status assign_rows(const lf_sft_pack *p, lf_sft_pack_mode mode, const ex_list *e, uint64_t *row,
                             uint64_t *n_rows) {
    int fill[LF_SFT_PACK_WINDOW] = {0};
    uint64_t rows = 0; /* rows opened so far; the open ones are the last min(rows, WINDOW) */
    for (size_t i = 0; i < e->n; i++) {
        uint64_t r = rows;
        if (mode == LF_SFT_PACKED) {
            const uint64_t first = rows > LF_SFT_PACK_WINDOW ? rows - LF_SFT_PACK_WINDOW : 0;
            for (uint64_t k = first; k < rows; k++)
                if (fill[k % LF_SFT_PACK_WINDOW] + e->len[i] <= p->T) {
                    r = k;
                    break;
                }
        }
        if (r == rows) fill[rows++ % LF_SFT_PACK_WINDOW] = 0;
        fill[r % LF_SFT_PACK_WINDOW] += e->len[i];
        row[i] = r;
    }
    *n_rows = rows;
    return LF_OK;
}

lf_status lf_sft_pack_create(lf_sft_pack **out, const lf_dataset *d, lf_split split, int T, lf_sft_pack_mode mode) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_sft_pack_create: out is NULL");
    *out = NULL;
    if (!d || T < 1 || (mode != LF_SFT_PACKED && mode != LF_SFT_PADDED))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_sft_pack_create: bad argument");
    const char *name = split == LF_SPLIT_VAL ? "val" : "train";
    if (lf_dataset_eot(d) < 0)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "dataset '%s' names no end-of-text token (\"eot\" in dataset.json), so it has no example "
                       "boundaries to pack",
                       lf_dataset_dir(d));
    const size_t N = lf_dataset_num_tokens(d, split);
    lf_sft_pack *p = calloc(1, sizeof *p);
    if (!p) return lf_fail(LF_ERR_NOMEM, "sft packing: out of memory");
    p->d = d;
    p->split = split;
    p->T = T;
    p->st.block_size = T;
    p->pad = (int32_t)lf_dataset_eot(d);
    ex_list e = {0};
    uint64_t *row = NULL, n_rows = 0;
    lf_status st = index_examples(p, &e, N);
    if (st == LF_OK && e.n == 0)
        st = lf_fail(LF_ERR_RANGE, "dataset '%s': split '%s' holds no example of two or more tokens", lf_dataset_dir(d),
                     name);
    if (st == LF_OK) {
        row = malloc(e.n * sizeof *row);
        st = row ? assign_rows(p, mode, &e, row, &n_rows) : lf_fail(LF_ERR_NOMEM, "sft packing: out of memory");
    }
    if (st == LF_OK) { /* counting sort by row: stable, so corpus order inside a row */
        p->row_first = calloc(n_rows + 1, sizeof *p->row_first);
        p->ex_start = malloc(e.n * sizeof *p->ex_start);
        p->ex_len = malloc(e.n * sizeof *p->ex_len);
        if (!p->row_first || !p->ex_start || !p->ex_len) st = lf_fail(LF_ERR_NOMEM, "sft packing: out of memory");
    }
    if (st == LF_OK) {
        for (size_t i = 0; i < e.n; i++) p->row_first[row[i] + 1]++;
        for (uint64_t r = 0; r < n_rows; r++) p->row_first[r + 1] += p->row_first[r];
        uint64_t *next = row; /* reused: each example's slot, computed before it is overwritten */
        for (size_t i = 0; i < e.n; i++) {
            const uint64_t slot = p->row_first[row[i]]++;
            next[i] = slot;
        }
        for (uint64_t r = n_rows; r > 0; r--) p->row_first[r] = p->row_first[r - 1];
        p->row_first[0] = 0;
        for (size_t i = 0; i < e.n; i++) {
            p->ex_start[next[i]] = e.start[i];
            p->ex_len[next[i]] = e.len[i];
        }
        p->st.examples = e.n;
        p->st.rows = n_rows;
    }
    free(row);
    free(e.start);
    free(e.len);
    if (st != LF_OK) {
        lf_sft_pack_free(p);
        return st;
    }
    *out = p;
    return LF_OK;
}

void lf_sft_pack_free(lf_sft_pack *p) {
    if (!p) return;
    free(p->ex_start);
    free(p->ex_len);
    free(p->row_first);
    free(p);
}

void lf_sft_pack_stats_get(const lf_sft_pack *p, lf_sft_pack_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (p) *out = p->st;
}

lf_status lf_sft_pack_get_batch(const lf_sft_pack *p, uint64_t seed, uint32_t purpose, uint64_t first_row, int B,
                                int32_t *inputs, int32_t *targets, int32_t *pos) {
    if (!p || !inputs || !targets || !pos || B < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_sft_pack_get_batch: bad argument");
    const int T = p->T;
    for (int b = 0; b < B; b++) {
        const uint64_t r = lf_dataset_packed_window(first_row + (uint64_t)b, p->st.rows, seed, purpose);
        int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T, *ps = pos + (size_t)b * T;
        int col = 0;
        for (uint64_t k = p->row_first[r]; k < p->row_first[r + 1]; k++) {
            const int n = p->ex_len[k];
            lf_status st = lf__dataset_copy(p->d, p->split, p->ex_start[k], (size_t)n, in + col, 0);
            if (st == LF_OK) st = lf__dataset_copy(p->d, p->split, p->ex_start[k] + 1, (size_t)n, tg + col, 1);
            if (st != LF_OK) return st;
            for (int i = 0; i < n; i++) ps[col + i] = i;
            col += n;
        }
        for (int t = col; t < T; t++) {
            in[t] = p->pad;
            tg[t] = -1;
            ps[t] = t - col;
        }
    }
    return LF_OK;
}
