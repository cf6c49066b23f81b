/*
 * Classification metrics over string labels: accuracy, per-class and
 * averaged precision/recall/F1, confusion matrix — scikit-learn's
 * definitions with zero_division=0 (see eval.h).
 *
 * Storage: labels are interned in arrival order (hash table name -> id);
 * a second array keeps the ids in ascending byte order so everything the
 * caller sees is indexed by sorted position. Per label we keep the gold
 * count, the predicted count and tp; the (gold, pred) pair counts live in a
 * sparse hash table, so memory grows with the pairs that occur, not with
 * labels squared.
 */
#include <stdlib.h>
#include <string.h>
#include "eval/eval_impl.h"

struct lf_confusion {
    char **name; /* by id */
    uint64_t *n_gold, *n_pred, *tp;
    size_t *sorted; /* sorted position -> id */
    size_t n, cap;
    uint32_t *slot; /* name hash: id + 1, 0 empty */
    size_t nslot;
    struct pair {
        uint64_t key; /* (gold id + 1) << 32 | pred id */
        uint64_t count;
    } * pairs;
    size_t npairs_slot, npairs;
    uint64_t total, correct;
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

lf_status lf_confusion_create(lf_confusion **out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "confusion: NULL argument");
    *out = calloc(1, sizeof **out);
    if (!*out) return lf_fail(LF_ERR_NOMEM, "confusion: out of memory");
    return LF_OK;
}

void lf_confusion_free(lf_confusion *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) free(c->name[i]);
    free(c->name);
    free(c->n_gold);
    free(c->n_pred);
    free(c->tp);
    free(c->sorted);
    free(c->slot);
    free(c->pairs);
    free(c);
}

static lf_status rehash_names(lf_confusion *c, size_t nslot) {
    uint32_t *slot = calloc(nslot, sizeof *slot);
    if (!slot) return lf_fail(LF_ERR_NOMEM, "confusion: out of memory");
    for (size_t id = 0; id < c->n; id++) {
        size_t k = (size_t)hash_str(c->name[id]) & (nslot - 1);
        while (slot[k]) k = (k + 1) & (nslot - 1);
        slot[k] = (uint32_t)id + 1;
    }
    free(c->slot);
    c->slot = slot;
    c->nslot = nslot;
    return LF_OK;
}

/* id of label s, creating it when create != 0; SIZE_MAX when absent. */
static lf_status label_id(lf_confusion *c, const char *s, int create, size_t *id) {
    *id = SIZE_MAX;
    if (c->nslot) {
        size_t k = (size_t)hash_str(s) & (c->nslot - 1);
        while (c->slot[k]) {
            if (!strcmp(c->name[c->slot[k] - 1], s)) {
                *id = c->slot[k] - 1;
                return LF_OK;
            }
            k = (k + 1) & (c->nslot - 1);
        }
    }
    if (!create) return LF_OK;
    if (c->n >= LF_CONFUSION_MAX_LABELS)
        return lf_fail(LF_ERR_RANGE, "confusion: more than %d distinct labels", LF_CONFUSION_MAX_LABELS);
    lf_status st;
    if ((c->n + 1) * 2 > c->nslot && (st = rehash_names(c, c->nslot ? c->nslot * 2 : 64)) != LF_OK) return st;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        char **name = realloc(c->name, cap * sizeof *name);
        if (name) c->name = name;
        uint64_t *g = realloc(c->n_gold, cap * sizeof *g);
        if (g) c->n_gold = g;
        uint64_t *p = realloc(c->n_pred, cap * sizeof *p);
        if (p) c->n_pred = p;
        uint64_t *t = realloc(c->tp, cap * sizeof *t);
        if (t) c->tp = t;
        size_t *so = realloc(c->sorted, cap * sizeof *so);
        if (so) c->sorted = so;
        if (!name || !g || !p || !t || !so) return lf_fail(LF_ERR_NOMEM, "confusion: out of memory");
        c->cap = cap;
    }
    char *copy = strdup(s);
    if (!copy) return lf_fail(LF_ERR_NOMEM, "confusion: out of memory");
    size_t nid = c->n;
    c->name[nid] = copy;
    c->n_gold[nid] = c->n_pred[nid] = c->tp[nid] = 0;
    /* sorted insert (binary search on byte order) */
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(c->name[c->sorted[mid]], s) < 0) lo = mid + 1;
        else hi = mid;
    }
    memmove(c->sorted + lo + 1, c->sorted + lo, (c->n - lo) * sizeof *c->sorted);
    c->sorted[lo] = nid;
    c->n++;
    size_t k = (size_t)hash_str(s) & (c->nslot - 1);
    while (c->slot[k]) k = (k + 1) & (c->nslot - 1);
    c->slot[k] = (uint32_t)nid + 1;
    *id = nid;
    return LF_OK;
}

static struct pair *pair_find(const lf_confusion *c, uint64_t key) {
    size_t k = (size_t)mix(key) & (c->npairs_slot - 1);
    while (c->pairs[k].key && c->pairs[k].key != key) k = (k + 1) & (c->npairs_slot - 1);
    return &c->pairs[k];
}

static lf_status pair_add(lf_confusion *c, size_t g, size_t p) {
    if ((c->npairs + 1) * 2 > c->npairs_slot) {
        size_t ns = c->npairs_slot ? c->npairs_slot * 2 : 64;
        struct pair *np = calloc(ns, sizeof *np), *old = c->pairs;
        if (!np) return lf_fail(LF_ERR_NOMEM, "confusion: out of memory");
        size_t old_n = c->npairs_slot;
        c->pairs = np;
        c->npairs_slot = ns;
        for (size_t i = 0; i < old_n; i++)
            if (old[i].key) *pair_find(c, old[i].key) = old[i];
        free(old);
    }
    uint64_t key = ((uint64_t)(g + 1) << 32) | (uint64_t)p;
    struct pair *s = pair_find(c, key);
    if (!s->key) {
        s->key = key;
        c->npairs++;
    }
    s->count++;
    return LF_OK;
}

lf_status lf_confusion_add(lf_confusion *c, const char *gold, const char *pred) {
    if (!c || !gold || !pred) return lf_fail(LF_ERR_INVALID_ARG, "confusion: NULL argument");
    size_t lg = strnlen(gold, LF_EVAL_MAX_TEXT + 1), lp = strnlen(pred, LF_EVAL_MAX_TEXT + 1);
    if (lg > LF_EVAL_MAX_TEXT || lp > LF_EVAL_MAX_TEXT)
        return lf_fail(LF_ERR_RANGE, "confusion: label longer than %zu bytes", (size_t)LF_EVAL_MAX_TEXT);
    lf_status st;
    if ((st = lf_utf8_validate(gold, lg, "gold label", NULL)) != LF_OK) return st;
    if ((st = lf_utf8_validate(pred, lp, "predicted label", NULL)) != LF_OK) return st;
    size_t g, p;
    if ((st = label_id(c, gold, 1, &g)) != LF_OK || (st = label_id(c, pred, 1, &p)) != LF_OK) return st;
    if ((st = pair_add(c, g, p)) != LF_OK) return st;
    c->n_gold[g]++;
    c->n_pred[p]++;
    c->total++;
    if (g == p) {
        c->tp[g]++;
        c->correct++;
    }
    return LF_OK;
}

uint64_t lf_confusion_total(const lf_confusion *c) { return c ? c->total : 0; }
size_t lf_confusion_num_labels(const lf_confusion *c) { return c ? c->n : 0; }

const char *lf_confusion_label(const lf_confusion *c, size_t i) {
    if (!c || i >= c->n) return NULL;
    return c->name[c->sorted[i]];
}

uint64_t lf_confusion_count(const lf_confusion *c, size_t gold_i, size_t pred_j) {
    if (!c || gold_i >= c->n || pred_j >= c->n || !c->npairs_slot) return 0;
    uint64_t key = ((uint64_t)(c->sorted[gold_i] + 1) << 32) | (uint64_t)c->sorted[pred_j];
    const struct pair *s = pair_find(c, key);
    return s->key ? s->count : 0;
}

lf_status lf_confusion_accuracy(const lf_confusion *c, double *acc) {
    if (!c || !acc) return lf_fail(LF_ERR_INVALID_ARG, "confusion: NULL argument");
    if (!c->total) return lf_fail(LF_ERR_INVALID_ARG, "accuracy: no items");
    *acc = (double)c->correct / (double)c->total;
    return LF_OK;
}

/* P, R, F1 from counts, any 0/0 -> 0 (scikit-learn, zero_division=0). */
static void prf_from(uint64_t tp, uint64_t pred, uint64_t gold, lf_prf *o) {
    o->precision = pred ? (double)tp / (double)pred : 0.0;
    o->recall = gold ? (double)tp / (double)gold : 0.0;
    o->f1 = gold + pred ? 2.0 * (double)tp / (double)(gold + pred) : 0.0;
    o->support = gold;
}

lf_status lf_confusion_class(const lf_confusion *c, size_t i, lf_prf *out) {
    if (!c || !out) return lf_fail(LF_ERR_INVALID_ARG, "confusion: NULL argument");
    if (i >= c->n) return lf_fail(LF_ERR_RANGE, "confusion: class %zu of %zu", i, c->n);
    size_t id = c->sorted[i];
    prf_from(c->tp[id], c->n_pred[id], c->n_gold[id], out);
    return LF_OK;
}

lf_status lf_confusion_average(const lf_confusion *c, lf_average avg, const char *pos_label, lf_prf *out) {
    if (!c || !out) return lf_fail(LF_ERR_INVALID_ARG, "confusion: NULL argument");
    if (!c->total) return lf_fail(LF_ERR_INVALID_ARG, "f1: no items");
    memset(out, 0, sizeof *out);
    switch (avg) {
    case LF_AVERAGE_MICRO: prf_from(c->correct, c->total, c->total, out); return LF_OK;
    case LF_AVERAGE_MACRO: {
        double p = 0, r = 0, f = 0;
        for (size_t i = 0; i < c->n; i++) {
            lf_prf k;
            prf_from(c->tp[c->sorted[i]], c->n_pred[c->sorted[i]], c->n_gold[c->sorted[i]], &k);
            p += k.precision;
            r += k.recall;
            f += k.f1;
        }
        out->precision = p / (double)c->n;
        out->recall = r / (double)c->n;
        out->f1 = f / (double)c->n;
        out->support = c->total;
        return LF_OK;
    }
    case LF_AVERAGE_BINARY: {
        if (!pos_label) return lf_fail(LF_ERR_INVALID_ARG, "f1: average=binary needs a positive label");
        if (c->n > 2)
            return lf_fail(LF_ERR_INVALID_ARG,
                           "f1: average=binary needs at most 2 labels, found %zu (use macro or micro)", c->n);
        size_t id;
        label_id((lf_confusion *)c, pos_label, 0, &id); /* lookup only: cannot fail */
        if (id == SIZE_MAX) {
            if (c->n >= 2)
                return lf_fail(LF_ERR_INVALID_ARG, "f1: positive label '%s' is not one of the labels '%s', '%s'",
                               pos_label, c->name[c->sorted[0]], c->name[c->sorted[1]]);
            return LF_OK; /* as scikit-learn: an absent class scores 0 with support 0 */
        }
        prf_from(c->tp[id], c->n_pred[id], c->n_gold[id], out);
        return LF_OK;
    }
    }
    return lf_fail(LF_ERR_INVALID_ARG, "f1: unknown average %d", (int)avg);
}
