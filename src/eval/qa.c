/*
 * Exact match and token F1 as the official SQuAD v1.1 evaluate script
 * (normalize_answer, exact_match_score, f1_score,
 * metric_max_over_ground_truths). Definitions in eval.h.
 *
 * remove_articles is re.sub(r'\b(a|an|the)\b', ' ', s) on a Python str: \b
 * is a boundary between a \w and a non-\w character (Unicode \w), so the
 * pattern removes exactly the maximal \w runs equal to "a", "an" or "the";
 * that is how it is implemented here.
 */
#include <stdlib.h>
#include <string.h>
#include "eval/eval_impl.h"

static int is_ascii_punct(uint32_t c) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

static int is_article(const uint32_t *s, size_t n) {
    if (n == 1) return s[0] == 'a';
    if (n == 2) return s[0] == 'a' && s[1] == 'n';
    if (n == 3) return s[0] == 't' && s[1] == 'h' && s[2] == 'e';
    return 0;
}

/* normalize_answer(text) split into tokens (toks reset first). */
static lf_status normalize_tokens(const char *text, const char *what, lf__toks *toks) {
    lf__cps a = {0}, b = {0};
    lf__toks_reset(toks);
    lf_status st = lf__u_decode_str(text, what, &a);
    if (st == LF_OK) st = lf__u_lower(a.v, a.n, &b); /* lower */
    if (st != LF_OK) goto done;
    a.n = 0; /* remove_punc */
    for (size_t i = 0; i < b.n && st == LF_OK; i++)
        if (!is_ascii_punct(b.v[i])) st = lf__cps_push(&a, b.v[i]);
    b.n = 0; /* remove_articles */
    for (size_t i = 0; i < a.n && st == LF_OK;) {
        if (lf__u_isword(a.v[i])) {
            size_t s = i;
            while (i < a.n && lf__u_isword(a.v[i])) i++;
            st = is_article(a.v + s, i - s) ? lf__cps_push(&b, ' ') : lf__cps_append(&b, a.v + s, i - s);
        } else {
            st = lf__cps_push(&b, a.v[i++]);
        }
    }
    if (st == LF_OK) st = lf__toks_split(toks, b.v, b.n); /* white_space_fix */
done:
    lf__cps_free(&a);
    lf__cps_free(&b);
    return st;
}

lf_status lf_squad_normalize(const char *s, char **out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "squad: NULL argument");
    *out = NULL;
    lf__toks t = {0};
    lf_status st = normalize_tokens(s, "text", &t);
    if (st == LF_OK) st = lf__toks_join(&t, out);
    lf__toks_free(&t);
    return st;
}

static int toks_equal(const lf__toks *a, const lf__toks *b) {
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++) {
        size_t la = a->off[i + 1] - a->off[i], lb = b->off[i + 1] - b->off[i];
        if (la != lb || memcmp(a->text.v + a->off[i], b->text.v + b->off[i], la * sizeof(uint32_t))) return 0;
    }
    return 1;
}

lf_status lf_squad_score(const char *pred, const char *const *gold, size_t n_gold, double *em, double *f1) {
    if (!pred || !gold || !em || !f1) return lf_fail(LF_ERR_INVALID_ARG, "squad: NULL argument");
    if (n_gold == 0) return lf_fail(LF_ERR_INVALID_ARG, "squad: no gold answer");
    lf__toks tp = {0}, tg = {0};
    lf__strtab tab = {0};
    uint32_t *ip = NULL, *ig = NULL;
    uint64_t *cnt = NULL;
    double best_em = 0, best_f1 = 0;
    lf_status st = normalize_tokens(pred, "prediction", &tp);
    if (st == LF_OK) st = lf__strtab_ids(&tab, &tp, &ip);
    for (size_t g = 0; g < n_gold && st == LF_OK; g++) {
        if (!gold[g]) {
            st = lf_fail(LF_ERR_INVALID_ARG, "squad: gold answer %zu is NULL", g + 1);
            break;
        }
        if ((st = normalize_tokens(gold[g], "gold answer", &tg)) != LF_OK) break;
        if ((st = lf__strtab_ids(&tab, &tg, &ig)) != LF_OK) break;
        double e = toks_equal(&tp, &tg) ? 1.0 : 0.0;
        /* Counter(pred) & Counter(gold) */
        free(cnt);
        cnt = calloc(tab.n + 1, sizeof *cnt);
        if (!cnt) {
            st = lf_fail(LF_ERR_NOMEM, "squad: out of memory");
            break;
        }
        for (size_t i = 0; i < tp.n; i++) cnt[ip[i]]++;
        uint64_t same = 0;
        for (size_t i = 0; i < tg.n; i++)
            if (cnt[ig[i]]) {
                cnt[ig[i]]--;
                same++;
            }
        double f = 0.0;
        if (same) {
            double precision = 1.0 * (double)same / (double)tp.n;
            double recall = 1.0 * (double)same / (double)tg.n;
            f = (2 * precision * recall) / (precision + recall);
        }
        if (g == 0 || e > best_em) best_em = e;
        if (g == 0 || f > best_f1) best_f1 = f;
    }
    free(cnt);
    free(ip);
    free(ig);
    lf__strtab_free(&tab);
    lf__toks_free(&tp);
    lf__toks_free(&tg);
    if (st != LF_OK) return st;
    *em = best_em;
    *f1 = best_f1;
    return LF_OK;
}
