/*
 * BLEU exactly as sacreBLEU 2.6.0 (sacrebleu/metrics/bleu.py and
 * sacrebleu/tokenizers/tokenizer_{13a,re,zh,char,none}.py), max order 4.
 *
 * The tokenizers work on code points. The four regexes of tokenizer_re.py
 * are applied one after the other as re.sub does: scan left to right, and
 * after a match continue behind it (matches never overlap). Each pattern is
 * one or two fixed-width character classes, so a two-character window is
 * all a pass needs. "[^0-9]" is any code point but the ASCII digits (Python
 * re on str: [0-9] is a literal range).
 *
 * Arithmetic follows BLEU.compute_bleu() operation by operation (same
 * operands, same order, same libm exp/log), so the scores are bit-identical
 * to sacreBLEU's, not just close. Segment statistics are integers summed in
 * segment order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "eval/eval_impl.h"

lf_bleu_config lf_bleu_config_default(void) {
    lf_bleu_config c;
    c.tokenize = LF_BLEU_TOK_13A;
    c.smooth = LF_BLEU_SMOOTH_EXP;
    c.smooth_value = -1;
    c.lowercase = 0;
    c.effective_order = LF_BLEU_EFF_AUTO;
    return c;
}

/* ---------------------------------------------------------------- tokenizers */
static int is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* tokenizer_re.py, pattern 1: ([\{-\~\[-\` -\&\(-\+\:-\@\/]) */
static int re1_class(uint32_t c) {
    return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
           (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

/* The four substitutions of TokenizerRegexp, in -> out (out reset first). */
static lf_status regexp_passes(lf__cps *a, lf__cps *b) {
    lf_status st = LF_OK;
    /* 1: ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> " \1 " */
    b->n = 0;
    for (size_t i = 0; i < a->n && st == LF_OK; i++) {
        uint32_t c = a->v[i];
        if (re1_class(c)) {
            uint32_t r[3] = {' ', c, ' '};
            st = lf__cps_append(b, r, 3);
        } else {
            st = lf__cps_push(b, c);
        }
    }
    /* 2: ([^0-9])([\.,]) -> "\1 \2 " */
    a->n = 0;
    for (size_t i = 0; i < b->n && st == LF_OK;) {
        uint32_t c = b->v[i];
        if (i + 1 < b->n && !is_digit(c) && (b->v[i + 1] == '.' || b->v[i + 1] == ',')) {
            uint32_t r[4] = {c, ' ', b->v[i + 1], ' '};
            st = lf__cps_append(a, r, 4);
            i += 2;
        } else {
            st = lf__cps_push(a, c);
            i++;
        }
    }
    /* 3: ([\.,])([^0-9]) -> " \1 \2" */
    b->n = 0;
    for (size_t i = 0; i < a->n && st == LF_OK;) {
        uint32_t c = a->v[i];
        if (i + 1 < a->n && (c == '.' || c == ',') && !is_digit(a->v[i + 1])) {
            uint32_t r[4] = {' ', c, ' ', a->v[i + 1]};
            st = lf__cps_append(b, r, 4);
            i += 2;
        } else {
            st = lf__cps_push(b, c);
            i++;
        }
    }
    /* 4: ([0-9])(-) -> "\1 \2 " */
    a->n = 0;
    for (size_t i = 0; i < b->n && st == LF_OK;) {
        uint32_t c = b->v[i];
        if (i + 1 < b->n && is_digit(c) && b->v[i + 1] == '-') {
            uint32_t r[4] = {c, ' ', '-', ' '};
            st = lf__cps_append(a, r, 4);
            i += 2;
        } else {
            st = lf__cps_push(a, c);
            i++;
        }
    }
    return st;
}

/* str.replace(old, new) with ASCII old/new, a -> b. */
static lf_status replace_ascii(const lf__cps *a, lf__cps *b, const char *old, const char *rep) {
    size_t lo = strlen(old), lr = strlen(rep);
    lf_status st = LF_OK;
    b->n = 0;
    for (size_t i = 0; i < a->n && st == LF_OK;) {
        size_t k = 0;
        if (i + lo <= a->n)
            while (k < lo && a->v[i + k] == (unsigned char)old[k]) k++;
        if (k == lo) {
            for (size_t j = 0; j < lr && st == LF_OK; j++) st = lf__cps_push(b, (unsigned char)rep[j]);
            i += lo;
        } else {
            st = lf__cps_push(b, a->v[i]);
            i++;
        }
    }
    return st;
}

/* Swap two buffers (the result of a pass becomes the input of the next). */
static void swap_cps(lf__cps *a, lf__cps *b) {
    lf__cps t = *a;
    *a = *b;
    *b = t;
}

/* _UCODE_RANGES of tokenizer_zh.py, as Python evaluates them: two of the
 * bounds are two-character strings ('\u20000' is U+2000 followed by '0'),
 * so with single characters compared against them those ranges become
 * U+2001..U+2A6D and U+2F81..U+2FA1. */
static const lf__u_range zh_ranges[] = {
    {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A}, {0xFA70, 0xFAD9},
    {0x2001, 0x2A6D}, {0x2F81, 0x2FA1}, {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF}, {0x3000, 0x303F}, {0x31C0, 0x31EF},
    {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF}, {0x3100, 0x312F}, {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F},
    {0x2600, 0x26FF}, {0x2700, 0x27BF}, {0x3200, 0x32FF}, {0x3300, 0x33FF},
};

static int is_zh_char(uint32_t c) {
    for (size_t i = 0; i < sizeof zh_ranges / sizeof zh_ranges[0]; i++)
        if (c >= zh_ranges[i].lo && c <= zh_ranges[i].hi) return 1;
    return 0;
}

/* BLEU._preprocess_segment(text) split into tokens (appended to toks). */
static lf_status bleu_tokens(const lf_bleu_config *cfg, const char *text, const char *what, lf__toks *toks) {
    lf__cps a = {0}, b = {0};
    lf_status st = lf__u_decode_str(text, what, &a);
    if (st != LF_OK) goto done;
    if (cfg->lowercase) {
        b.n = 0;
        if ((st = lf__u_lower(a.v, a.n, &b)) != LF_OK) goto done;
        swap_cps(&a, &b);
    }
    while (a.n > 0 && lf__u_isspace(a.v[a.n - 1])) a.n--; /* sent.rstrip() */
    switch (cfg->tokenize) {
    case LF_BLEU_TOK_13A: {
        static const char *const rep[][2] = {{"<skipped>", ""}, {"-\n", ""}, {"\n", " "}};
        for (size_t r = 0; r < 3; r++) {
            if ((st = replace_ascii(&a, &b, rep[r][0], rep[r][1])) != LF_OK) goto done;
            swap_cps(&a, &b);
        }
        int amp = 0;
        for (size_t i = 0; i < a.n; i++) amp |= a.v[i] == '&';
        if (amp) {
            static const char *const ent[][2] = {{"&quot;", "\""}, {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}};
            for (size_t r = 0; r < 4; r++) {
                if ((st = replace_ascii(&a, &b, ent[r][0], ent[r][1])) != LF_OK) goto done;
                swap_cps(&a, &b);
            }
        }
        b.n = 0;
        if ((st = lf__cps_push(&b, ' ')) != LF_OK || (st = lf__cps_append(&b, a.v, a.n)) != LF_OK ||
            (st = lf__cps_push(&b, ' ')) != LF_OK)
            goto done;
        swap_cps(&a, &b);
        if ((st = regexp_passes(&a, &b)) != LF_OK) goto done;
        st = lf__toks_split(toks, a.v, a.n);
        break;
    }
    case LF_BLEU_TOK_ZH: {
        size_t s = 0, e = a.n; /* line.strip() */
        while (s < e && lf__u_isspace(a.v[s])) s++;
        while (e > s && lf__u_isspace(a.v[e - 1])) e--;
        b.n = 0;
        for (size_t i = s; i < e && st == LF_OK; i++) {
            if (is_zh_char(a.v[i])) {
                uint32_t r[3] = {' ', a.v[i], ' '};
                st = lf__cps_append(&b, r, 3);
            } else {
                st = lf__cps_push(&b, a.v[i]);
            }
        }
        if (st != LF_OK) goto done;
        swap_cps(&a, &b);
        if ((st = regexp_passes(&a, &b)) != LF_OK) goto done;
        st = lf__toks_split(toks, a.v, a.n);
        break;
    }
    case LF_BLEU_TOK_CHAR:
        for (size_t i = 0; i < a.n && st == LF_OK; i++)
            if (!lf__u_isspace(a.v[i])) st = lf__toks_add(toks, a.v + i, 1);
        break;
    case LF_BLEU_TOK_NONE: st = lf__toks_split(toks, a.v, a.n); break;
    default: st = lf_fail(LF_ERR_INVALID_ARG, "bleu: unknown tokenizer %d", (int)cfg->tokenize);
    }
done:
    lf__cps_free(&a);
    lf__cps_free(&b);
    return st;
}

static lf_status check_config(const lf_bleu_config *cfg) {
    if (!cfg) return lf_fail(LF_ERR_INVALID_ARG, "bleu: NULL config");
    if ((unsigned)cfg->tokenize > LF_BLEU_TOK_NONE)
        return lf_fail(LF_ERR_INVALID_ARG, "bleu: unknown tokenizer %d", (int)cfg->tokenize);
    if ((unsigned)cfg->smooth > LF_BLEU_SMOOTH_NONE)
        return lf_fail(LF_ERR_INVALID_ARG, "bleu: unknown smoothing method %d", (int)cfg->smooth);
    if ((unsigned)cfg->effective_order > LF_BLEU_EFF_YES)
        return lf_fail(LF_ERR_INVALID_ARG, "bleu: bad effective_order %d", (int)cfg->effective_order);
    if (!isfinite(cfg->smooth_value) && !(cfg->smooth_value < 0))
        return lf_fail(LF_ERR_INVALID_ARG, "bleu: smooth_value must be finite");
    return LF_OK;
}

lf_status lf_bleu_tokenize_text(const lf_bleu_config *cfg, const char *text, char **out) {
    lf__toks t = {0};
    *out = NULL;
    lf_status st = check_config(cfg);
    if (st == LF_OK) st = bleu_tokens(cfg, text, "text", &t);
    if (st == LF_OK) st = lf__toks_join(&t, out);
    lf__toks_free(&t);
    return st;
}

/* ---------------------------------------------------------------- scoring */
static const char *tok_name(lf_bleu_tokenize t) {
    static const char *const names[] = {"13a", "zh", "char", "none"};
    return names[t];
}

static double smooth_value_of(const lf_bleu_config *cfg) {
    if (cfg->smooth_value >= 0) return cfg->smooth_value;
    return cfg->smooth == LF_BLEU_SMOOTH_FLOOR ? 0.1 : cfg->smooth == LF_BLEU_SMOOTH_ADD_K ? 1.0 : 0.0;
}

/* BLEUSignature.format(): nrefs, case, eff, tok, smooth, version. */
static void signature(const lf_bleu_config *cfg, long nrefs, int eff, char *out, size_t cap) {
    char nr[32], sm[48];
    if (nrefs < 0) snprintf(nr, sizeof nr, "var");
    else snprintf(nr, sizeof nr, "%ld", nrefs);
    switch (cfg->smooth) {
    case LF_BLEU_SMOOTH_FLOOR: snprintf(sm, sizeof sm, "floor[%.2f]", smooth_value_of(cfg)); break;
    case LF_BLEU_SMOOTH_ADD_K: snprintf(sm, sizeof sm, "add-k[%.2f]", smooth_value_of(cfg)); break;
    case LF_BLEU_SMOOTH_NONE: snprintf(sm, sizeof sm, "none"); break;
    default: snprintf(sm, sizeof sm, "exp"); break;
    }
    snprintf(out, cap, "nrefs:%s|case:%s|eff:%s|tok:%s|smooth:%s|version:%s", nr, cfg->lowercase ? "lc" : "mixed",
             eff ? "yes" : "no", tok_name(cfg->tokenize), sm, LF_BLEU_VERSION);
}

/* utils.my_log */
static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

/* BLEU.compute_bleu(), statement by statement. */
static void compute_bleu(const int64_t correct_in[LF_BLEU_MAX_ORDER], const int64_t total_in[LF_BLEU_MAX_ORDER],
                         int64_t sys_len, int64_t ref_len, const lf_bleu_config *cfg, int eff, lf_bleu_score *out) {
    double correct[LF_BLEU_MAX_ORDER], total[LF_BLEU_MAX_ORDER], prec[LF_BLEU_MAX_ORDER];
    double v = smooth_value_of(cfg);
    int any = 0;
    for (int i = 0; i < LF_BLEU_MAX_ORDER; i++) {
        correct[i] = (double)correct_in[i];
        total[i] = (double)total_in[i];
        prec[i] = 0.0;
        any |= correct_in[i] != 0;
    }
    double bp = 1.0;
    if (sys_len < ref_len) bp = sys_len > 0 ? exp(1.0 - (double)ref_len / (double)sys_len) : 0.0;
    double score = 0.0;
    if (any) {
        double smooth_mteval = 1.0;
        int eff_order = LF_BLEU_MAX_ORDER;
        for (int n = 1; n <= LF_BLEU_MAX_ORDER; n++) {
            if (cfg->smooth == LF_BLEU_SMOOTH_ADD_K && n > 1) {
                correct[n - 1] += v;
                total[n - 1] += v;
            }
            if (total[n - 1] == 0) break;
            if (eff) eff_order = n;
            if (correct[n - 1] == 0) {
                if (cfg->smooth == LF_BLEU_SMOOTH_EXP) {
                    smooth_mteval *= 2;
                    prec[n - 1] = 100. / (smooth_mteval * total[n - 1]);
                } else if (cfg->smooth == LF_BLEU_SMOOTH_FLOOR) {
                    prec[n - 1] = 100. * v / total[n - 1];
                }
            } else {
                prec[n - 1] = 100. * correct[n - 1] / total[n - 1];
            }
        }
        double sum = 0.0;
        for (int i = 0; i < eff_order; i++) sum += my_log(prec[i]);
        score = bp * exp(sum / eff_order);
    }
    out->score = score;
    for (int i = 0; i < LF_BLEU_MAX_ORDER; i++) {
        out->counts[i] = correct[i];
        out->totals[i] = total[i];
        out->precisions[i] = prec[i];
    }
    out->bp = bp;
    out->sys_len = sys_len;
    out->ref_len = ref_len;
    out->ratio = ref_len ? (double)sys_len / (double)ref_len : 0.0;
}

struct lf_bleu {
    lf_bleu_config cfg;
    int64_t correct[LF_BLEU_MAX_ORDER], total[LF_BLEU_MAX_ORDER];
    int64_t sys_len, ref_len;
    size_t n_seg;
    long min_refs, max_refs;
    /* scratch, reused across segments */
    lf__toks toks;
    lf__strtab tab;
    uint32_t *hyp_ids, **ref_ids;
    size_t ref_ids_cap;
    lf__ngrams ref_ng, one_ng, hyp_ng;
};

lf_status lf_bleu_create(lf_bleu **out, const lf_bleu_config *cfg) {
    *out = NULL;
    lf_status st = check_config(cfg);
    if (st != LF_OK) return st;
    lf_bleu *b = calloc(1, sizeof *b);
    if (!b) return lf_fail(LF_ERR_NOMEM, "bleu: out of memory");
    b->cfg = *cfg;
    b->min_refs = -1;
    *out = b;
    return LF_OK;
}

void lf_bleu_free(lf_bleu *b) {
    if (!b) return;
    lf__toks_free(&b->toks);
    lf__strtab_free(&b->tab);
    free(b->hyp_ids);
    if (b->ref_ids)
        for (size_t i = 0; i < b->ref_ids_cap; i++) free(b->ref_ids[i]);
    free(b->ref_ids);
    lf__ngrams_free(&b->ref_ng);
    lf__ngrams_free(&b->one_ng);
    lf__ngrams_free(&b->hyp_ng);
    free(b);
}

size_t lf_bleu_num_segments(const lf_bleu *b) { return b ? b->n_seg : 0; }

/* Tokens of `text` as ids in *ids; *len tokens. */
static lf_status text_ids(lf_bleu *b, const char *text, const char *what, uint32_t **ids, size_t *len) {
    lf__toks_reset(&b->toks);
    lf_status st = bleu_tokens(&b->cfg, text, what, &b->toks);
    if (st == LF_OK) st = lf__strtab_ids(&b->tab, &b->toks, ids);
    *len = b->toks.n;
    return st;
}

lf_status lf_bleu_add(lf_bleu *b, const char *hyp, const char *const *refs, size_t n_refs, lf_bleu_score *sentence) {
    if (!b) return lf_fail(LF_ERR_INVALID_ARG, "bleu: NULL handle");
    if (!hyp) return lf_fail(LF_ERR_INVALID_ARG, "bleu: NULL hypothesis");
    if (!refs) return lf_fail(LF_ERR_INVALID_ARG, "bleu: NULL references");
    size_t present = 0;
    for (size_t r = 0; r < n_refs; r++) present += refs[r] != NULL;
    if (present == 0) return lf_fail(LF_ERR_INVALID_ARG, "bleu: a segment needs at least one reference");
    if (n_refs > b->ref_ids_cap) {
        uint32_t **v = realloc(b->ref_ids, n_refs * sizeof *v);
        if (!v) return lf_fail(LF_ERR_NOMEM, "bleu: out of memory");
        for (size_t r = b->ref_ids_cap; r < n_refs; r++) v[r] = NULL;
        b->ref_ids = v;
        b->ref_ids_cap = n_refs;
    }
    /* The interning table only needs to live for one segment; keeping it
     * across a corpus would grow it with every new word. */
    lf__strtab_free(&b->tab);
    lf__ngrams_reset(&b->ref_ng);
    lf_status st;
    int64_t ref_lens_closest = -1, hyp_len;
    size_t len;
    if ((st = text_ids(b, hyp, "hypothesis", &b->hyp_ids, &len)) != LF_OK) return st;
    hyp_len = (int64_t)len;
    int64_t closest_diff = -1;
    for (size_t r = 0; r < n_refs; r++) {
        if (!refs[r]) continue;
        char what[48];
        snprintf(what, sizeof what, "reference %zu", r + 1);
        if ((st = text_ids(b, refs[r], what, &b->ref_ids[r], &len)) != LF_OK) return st;
        /* _get_closest_ref_len: smallest |hyp - ref|, ties to the shorter */
        int64_t rl = (int64_t)len, diff = hyp_len > rl ? hyp_len - rl : rl - hyp_len;
        if (closest_diff == -1 || diff < closest_diff) {
            closest_diff = diff;
            ref_lens_closest = rl;
        } else if (diff == closest_diff && rl < ref_lens_closest) {
            ref_lens_closest = rl;
        }
        /* reference n-grams: maximum count over the references */
        lf__ngrams_reset(&b->one_ng);
        if ((st = lf__ngrams_count(&b->one_ng, b->ref_ids[r], len, 1, LF_BLEU_MAX_ORDER)) != LF_OK) return st;
        for (size_t i = 0; i < b->one_ng.nslot; i++) {
            const lf__ngram_slot *s = &b->one_ng.slot[i];
            if (s->key && (st = lf__ngrams_put(&b->ref_ng, s->key, s->n, s->count, 1)) != LF_OK) return st;
        }
    }
    lf__ngrams_reset(&b->hyp_ng);
    if ((st = lf__ngrams_count(&b->hyp_ng, b->hyp_ids, (size_t)hyp_len, 1, LF_BLEU_MAX_ORDER)) != LF_OK) return st;
    int64_t correct[LF_BLEU_MAX_ORDER] = {0}, total[LF_BLEU_MAX_ORDER] = {0};
    for (size_t i = 0; i < b->hyp_ng.nslot; i++) {
        const lf__ngram_slot *s = &b->hyp_ng.slot[i];
        if (!s->key) continue;
        total[s->n - 1] += s->count;
        int64_t rc = lf__ngrams_get(&b->ref_ng, s->key, s->n);
        correct[s->n - 1] += s->count < rc ? s->count : rc;
    }
    for (int n = 0; n < LF_BLEU_MAX_ORDER; n++) {
        b->correct[n] += correct[n];
        b->total[n] += total[n];
    }
    b->sys_len += hyp_len;
    b->ref_len += ref_lens_closest;
    b->n_seg++;
    if (b->min_refs < 0 || (long)present < b->min_refs) b->min_refs = (long)present;
    if ((long)present > b->max_refs) b->max_refs = (long)present;
    if (sentence) {
        int eff = b->cfg.effective_order != LF_BLEU_EFF_NO;
        memset(sentence, 0, sizeof *sentence);
        compute_bleu(correct, total, hyp_len, ref_lens_closest, &b->cfg, eff, sentence);
        signature(&b->cfg, (long)present, eff, sentence->signature, sizeof sentence->signature);
    }
    return LF_OK;
}

lf_status lf_bleu_corpus(const lf_bleu *b, lf_bleu_score *out) {
    if (!b || !out) return lf_fail(LF_ERR_INVALID_ARG, "bleu: NULL argument");
    if (b->n_seg == 0) return lf_fail(LF_ERR_INVALID_ARG, "bleu: no segments to score");
    int eff = b->cfg.effective_order == LF_BLEU_EFF_YES;
    memset(out, 0, sizeof *out);
    compute_bleu(b->correct, b->total, b->sys_len, b->ref_len, &b->cfg, eff, out);
    signature(&b->cfg, b->min_refs == b->max_refs ? b->min_refs : -1, eff, out->signature, sizeof out->signature);
    return LF_OK;
}

lf_status lf_bleu_corpus_score(const lf_bleu_config *cfg, const char *const *hyps, size_t n,
                               const char *const *const *refs, size_t n_refs, lf_bleu_score *out) {
    if (!hyps || !refs || !out) return lf_fail(LF_ERR_INVALID_ARG, "bleu: NULL argument");
    if (n_refs == 0) return lf_fail(LF_ERR_INVALID_ARG, "bleu: no reference streams");
    lf_bleu *b;
    lf_status st = lf_bleu_create(&b, cfg);
    if (st != LF_OK) return st;
    const char **seg = calloc(n_refs, sizeof *seg);
    if (!seg) {
        lf_bleu_free(b);
        return lf_fail(LF_ERR_NOMEM, "bleu: out of memory");
    }
    for (size_t i = 0; i < n && st == LF_OK; i++) {
        for (size_t r = 0; r < n_refs; r++) seg[r] = refs[r][i];
        st = lf_bleu_add(b, hyps[i], seg, n_refs, NULL);
        if (st != LF_OK) lf_error_prefix("segment %zu", i + 1);
    }
    if (st == LF_OK) st = lf_bleu_corpus(b, out);
    free(seg);
    lf_bleu_free(b);
    return st;
}

lf_status lf_bleu_sentence_score(const lf_bleu_config *cfg, const char *hyp, const char *const *refs, size_t n_refs,
                                 lf_bleu_score *out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "bleu: NULL argument");
    lf_bleu *b;
    lf_status st = lf_bleu_create(&b, cfg);
    if (st != LF_OK) return st;
    st = lf_bleu_add(b, hyp, refs, n_refs, out);
    lf_bleu_free(b);
    return st;
}
