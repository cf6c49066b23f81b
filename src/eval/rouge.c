/*
 * ROUGE exactly as Google's rouge-score 0.1.2 (rouge_score/rouge_scorer.py,
 * tokenize.py, scoring.py), plus an optional CJK-aware tokenizer.
 *
 * Tokens are interned to ids once per call, so n-gram counting and the LCS
 * tables compare integers. rougeL only needs the LCS length and keeps two
 * rows of the table; rougeLsum back-tracks through the whole table of each
 * (reference sentence, candidate sentence) pair exactly as _backtrack_norec
 * does, because which LCS is read out changes the union and the score.
 * The quadratic work is bounded by LF_ROUGE_MAX_LCS_CELLS and
 * LF_ROUGE_MAX_LSUM_CELLS.
 *
 * Float operations follow the Python expressions in order (for example
 * F = 2 * P * R / (P + R) is (2P)R / (P+R)), so scores are bit-identical.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "eval/eval_impl.h"

lf_rouge_config lf_rouge_config_default(void) {
    lf_rouge_config c;
    c.types = LF_ROUGE_BIT(LF_ROUGE_1) | LF_ROUGE_BIT(LF_ROUGE_2) | LF_ROUGE_BIT(LF_ROUGE_L) |
              LF_ROUGE_BIT(LF_ROUGE_LSUM);
    c.use_stemmer = 0;
    c.tokenizer = LF_ROUGE_TOK_DEFAULT;
    return c;
}

int lf_rouge_type_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "rougeL")) return LF_ROUGE_L;
    if (!strcmp(name, "rougeLsum")) return LF_ROUGE_LSUM;
    if (!strncmp(name, "rouge", 5) && name[5] >= '1' && name[5] <= '9' && name[6] == 0)
        return LF_ROUGE_1 + (name[5] - '1');
    return -1;
}

const char *lf_rouge_type_name(int type) {
    static const char *const names[] = {"rouge1", "rouge2", "rouge3", "rouge4", "rouge5",   "rouge6",
                                        "rouge7", "rouge8", "rouge9", "rougeL", "rougeLsum"};
    if (type < 0 || type >= LF_ROUGE_NUM_TYPES) return NULL;
    return names[type];
}

const char *lf_rouge_tokenizer_name(lf_rouge_tokenizer t) {
    switch (t) {
    case LF_ROUGE_TOK_DEFAULT: return "default";
    case LF_ROUGE_TOK_CJK: return "cjk";
    case LF_ROUGE_TOK_AUTO: return "auto";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- tokenizers */
static const lf__u_range cjk_ranges[] = {
    {0x1100, 0x11FF}, {0x2E80, 0x2FDF}, {0x3005, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303B},   {0x3040, 0x30FF},
    {0x3100, 0x312F}, {0x3130, 0x318F}, {0x31A0, 0x31BF}, {0x31F0, 0x31FF}, {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},
    {0xA960, 0xA97F}, {0xAC00, 0xD7FF}, {0xF900, 0xFAFF}, {0xFF66, 0xFF9F}, {0x20000, 0x323AF},
};

static int is_cjk(uint32_t c) {
    if (c < 0x1100) return 0;
    for (size_t i = 0; i < sizeof cjk_ranges / sizeof cjk_ranges[0]; i++)
        if (c >= cjk_ranges[i].lo && c <= cjk_ranges[i].hi) return 1;
    return 0;
}

static int is_alnum_lc(uint32_t c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/* Append one [a-z0-9]+ run as a token, stemmed when asked and longer than 3
 * characters. buf/cap: scratch for the word and its stem. */
static lf_status add_run(lf__toks *t, const uint32_t *c, size_t n, int stem, char **buf, size_t *cap) {
    if (!stem || n <= 3) return lf__toks_add(t, c, n);
    size_t need = 2 * (n + 2);
    if (need > *cap) {
        char *b = realloc(*buf, need);
        if (!b) return lf_fail(LF_ERR_NOMEM, "rouge: out of memory");
        *buf = b;
        *cap = need;
    }
    char *w = *buf, *s = *buf + n + 2;
    for (size_t i = 0; i < n; i++) w[i] = (char)c[i];
    size_t k = lf__porter_stem(w, n, s);
    return lf__toks_add_ascii(t, s, k);
}

/* tokenize.tokenize(text, stemmer) (or the CJK variant) of in[0..n). */
static lf_status rouge_tokens(lf_rouge_tokenizer tok, int stem, const uint32_t *in, size_t n, lf__toks *t, lf__cps *low,
                              char **buf, size_t *cap) {
    low->n = 0;
    lf_status st = lf__u_lower(in, n, low);
    if (st != LF_OK) return st;
    const uint32_t *v = low->v;
    size_t m = low->n;
    if (tok == LF_ROUGE_TOK_CJK) /* fullwidth ASCII letters and digits read as ASCII */
        for (size_t i = 0; i < m; i++) {
            uint32_t c = low->v[i];
            if ((c >= 0xFF10 && c <= 0xFF19) || (c >= 0xFF41 && c <= 0xFF5A)) low->v[i] = c - 0xFEE0;
            else if (c >= 0xFF21 && c <= 0xFF3A) low->v[i] = c - 0xFEE0 + 32;
        }
    size_t i = 0;
    while (i < m && st == LF_OK) {
        if (is_alnum_lc(v[i])) {
            size_t s = i;
            while (i < m && is_alnum_lc(v[i])) i++;
            st = add_run(t, v + s, i - s, stem, buf, cap);
        } else {
            if (tok == LF_ROUGE_TOK_CJK && is_cjk(v[i])) st = lf__toks_add(t, v + i, 1);
            i++;
        }
    }
    return st;
}

/* Count CJK and non-whitespace characters of a text (AUTO's rule). */
static lf_status count_cjk(const char *text, const char *what, uint64_t *cjk, uint64_t *nonspace, lf__cps *tmp) {
    lf_status st = lf__u_decode_str(text, what, tmp);
    if (st != LF_OK) return st;
    for (size_t i = 0; i < tmp->n; i++) {
        if (lf__u_isspace(tmp->v[i])) continue;
        (*nonspace)++;
        *cjk += (uint64_t)is_cjk(tmp->v[i]);
    }
    return LF_OK;
}

lf_status lf_rouge_detect_tokenizer(const char *const *texts, size_t n, lf_rouge_tokenizer *out) {
    uint64_t cjk = 0, nonspace = 0;
    lf__cps tmp = {0};
    lf_status st = LF_OK;
    if (!texts || !out) return lf_fail(LF_ERR_INVALID_ARG, "rouge: NULL argument");
    for (size_t i = 0; i < n && st == LF_OK; i++) {
        char what[40];
        snprintf(what, sizeof what, "text %zu", i + 1);
        if (texts[i]) st = count_cjk(texts[i], what, &cjk, &nonspace, &tmp);
    }
    lf__cps_free(&tmp);
    if (st == LF_OK) *out = cjk * 2 > nonspace ? LF_ROUGE_TOK_CJK : LF_ROUGE_TOK_DEFAULT;
    return st;
}

/* ---------------------------------------------------------------- scoring */
typedef struct rouge_ctx {
    lf_rouge_tokenizer tok;
    int stem;
    lf__strtab tab;
    lf__toks toks;
    lf__cps dec, low;
    char *buf;
    size_t cap;
    lf__ngrams a, b;
    uint32_t *table;
    size_t table_cap;
} rouge_ctx;

static void ctx_free(rouge_ctx *c) {
    lf__strtab_free(&c->tab);
    lf__toks_free(&c->toks);
    lf__cps_free(&c->dec);
    lf__cps_free(&c->low);
    free(c->buf);
    lf__ngrams_free(&c->a);
    lf__ngrams_free(&c->b);
    free(c->table);
}

/* A tokenized text: all tokens, and per "\n"-separated non-empty line. */
typedef struct ttext {
    uint32_t *ids;
    size_t n;
    size_t *sent_off; /* sentence k = ids_s[sent_off[k] .. sent_off[k+1]) */
    uint32_t *ids_s;
    size_t n_sent;
} ttext;

static void ttext_free(ttext *t) {
    free(t->ids);
    free(t->sent_off);
    free(t->ids_s);
    memset(t, 0, sizeof *t);
}

static lf_status toks_to_ids(rouge_ctx *c, uint32_t **ids, size_t *n) {
    *n = c->toks.n;
    return lf__strtab_ids(&c->tab, &c->toks, ids);
}

static lf_status tokenize_text(rouge_ctx *c, const char *text, const char *what, int want_sents, ttext *out) {
    memset(out, 0, sizeof *out);
    lf_status st = lf__u_decode_str(text, what, &c->dec);
    if (st != LF_OK) return st;
    lf__toks_reset(&c->toks);
    if ((st = rouge_tokens(c->tok, c->stem, c->dec.v, c->dec.n, &c->toks, &c->low, &c->buf, &c->cap)) != LF_OK)
        return st;
    if ((st = toks_to_ids(c, &out->ids, &out->n)) != LF_OK) return st;
    if (!want_sents) return LF_OK;
    /* get_sents: text.split("\n"), dropping empty strings; each tokenized */
    size_t nl = 1;
    for (size_t i = 0; i < c->dec.n; i++) nl += c->dec.v[i] == '\n';
    out->sent_off = malloc((nl + 1) * sizeof *out->sent_off);
    if (!out->sent_off) return lf_fail(LF_ERR_NOMEM, "rouge: out of memory");
    out->sent_off[0] = 0;
    size_t total = 0, s = 0;
    uint32_t *ids = NULL;
    for (size_t i = 0; i <= c->dec.n; i++) {
        if (i < c->dec.n && c->dec.v[i] != '\n') continue;
        if (i > s) {
            lf__toks_reset(&c->toks);
            size_t k;
            if ((st = rouge_tokens(c->tok, c->stem, c->dec.v + s, i - s, &c->toks, &c->low, &c->buf, &c->cap)) !=
                    LF_OK ||
                (st = toks_to_ids(c, &ids, &k)) != LF_OK)
                break;
            uint32_t *v = realloc(out->ids_s, (total + k + 1) * sizeof *v);
            if (!v) {
                st = lf_fail(LF_ERR_NOMEM, "rouge: out of memory");
                break;
            }
            out->ids_s = v;
            if (k) memcpy(v + total, ids, k * sizeof *v);
            total += k;
            out->sent_off[++out->n_sent] = total;
        }
        s = i + 1;
    }
    free(ids);
    return st;
}

static double fmeasure(double p, double r) { return p + r > 0 ? 2 * p * r / (p + r) : 0.0; }

static lf_status score_ngrams(rouge_ctx *c, const ttext *ref, const ttext *pred, int n, lf_rouge_prf *out) {
    lf__ngrams_reset(&c->a);
    lf__ngrams_reset(&c->b);
    lf_status st;
    if ((st = lf__ngrams_count(&c->a, ref->ids, ref->n, n, n)) != LF_OK) return st;
    if ((st = lf__ngrams_count(&c->b, pred->ids, pred->n, n, n)) != LF_OK) return st;
    int64_t inter = 0;
    for (size_t i = 0; i < c->a.nslot; i++) {
        const lf__ngram_slot *s = &c->a.slot[i];
        if (!s->key) continue;
        int64_t pc = lf__ngrams_get(&c->b, s->key, s->n);
        inter += s->count < pc ? s->count : pc;
    }
    int64_t tc = ref->n >= (size_t)n ? (int64_t)(ref->n - (size_t)n + 1) : 0;
    int64_t pc = pred->n >= (size_t)n ? (int64_t)(pred->n - (size_t)n + 1) : 0;
    out->precision = (double)inter / (double)(pc > 1 ? pc : 1);
    out->recall = (double)inter / (double)(tc > 1 ? tc : 1);
    out->fmeasure = fmeasure(out->precision, out->recall);
    return LF_OK;
}

static lf_status score_lcs(const ttext *ref, const ttext *pred, lf_rouge_prf *out) {
    memset(out, 0, sizeof *out);
    if (!ref->n || !pred->n) return LF_OK;
    if ((uint64_t)ref->n * (uint64_t)pred->n > LF_ROUGE_MAX_LCS_CELLS)
        return lf_fail(LF_ERR_RANGE, "rougeL: %zu x %zu tokens exceeds the LCS cap of %llu cells", ref->n, pred->n,
                       (unsigned long long)LF_ROUGE_MAX_LCS_CELLS);
    size_t cols = pred->n;
    uint32_t *row = calloc(2 * (cols + 1), sizeof *row);
    if (!row) return lf_fail(LF_ERR_NOMEM, "rougeL: out of memory for %zu columns", cols);
    uint32_t *prev = row, *cur = row + cols + 1;
    for (size_t i = 1; i <= ref->n; i++) {
        cur[0] = 0;
        uint32_t r = ref->ids[i - 1];
        for (size_t j = 1; j <= cols; j++) {
            if (r == pred->ids[j - 1]) cur[j] = prev[j - 1] + 1;
            else cur[j] = prev[j] > cur[j - 1] ? prev[j] : cur[j - 1];
        }
        uint32_t *t = prev;
        prev = cur;
        cur = t;
    }
    double lcs = (double)prev[cols];
    free(row);
    out->precision = lcs / (double)pred->n;
    out->recall = lcs / (double)ref->n;
    out->fmeasure = fmeasure(out->precision, out->recall);
    return LF_OK;
}

/* lcs_ind(ref, can): mark in `in_union` the ref indices of the LCS that
 * _backtrack_norec reads out. */
static lf_status lcs_mark(rouge_ctx *c, const uint32_t *ref, size_t rows, const uint32_t *can, size_t cols,
                          unsigned char *in_union) {
    if (!rows || !cols) return LF_OK;
    uint64_t cells = (uint64_t)(rows + 1) * (uint64_t)(cols + 1);
    if (cells > LF_ROUGE_MAX_LSUM_CELLS)
        return lf_fail(LF_ERR_RANGE, "rougeLsum: sentence pair of %zu x %zu tokens exceeds the cap of %llu cells", rows,
                       cols, (unsigned long long)LF_ROUGE_MAX_LSUM_CELLS);
    if (cells > c->table_cap) {
        uint32_t *t = realloc(c->table, (size_t)cells * sizeof *t);
        if (!t) return lf_fail(LF_ERR_NOMEM, "rougeLsum: out of memory for %llu cells", (unsigned long long)cells);
        c->table = t;
        c->table_cap = (size_t)cells;
    }
    uint32_t *t = c->table;
    size_t w = cols + 1;
#define T(i, j) t[(i)*w + (j)]
    for (size_t j = 0; j <= cols; j++) T(0, j) = 0;
    for (size_t i = 1; i <= rows; i++) {
        T(i, 0) = 0;
        for (size_t j = 1; j <= cols; j++) {
            if (ref[i - 1] == can[j - 1]) T(i, j) = T(i - 1, j - 1) + 1;
            else T(i, j) = T(i - 1, j) > T(i, j - 1) ? T(i - 1, j) : T(i, j - 1);
        }
    }
    size_t i = rows, j = cols;
    while (i > 0 && j > 0) {
        if (ref[i - 1] == can[j - 1]) {
            in_union[i - 1] = 1;
            i--;
            j--;
        } else if (T(i, j - 1) > T(i - 1, j)) {
            j--;
        } else {
            i--;
        }
    }
#undef T
    return LF_OK;
}

/* _summary_level_lcs(ref_sents, can_sents) */
static lf_status score_lsum(rouge_ctx *c, const ttext *ref, const ttext *pred, lf_rouge_prf *out) {
    memset(out, 0, sizeof *out);
    if (!ref->n_sent || !pred->n_sent) return LF_OK;
    size_t m = ref->sent_off[ref->n_sent], n = pred->sent_off[pred->n_sent];
    if (!n || !m) return LF_OK;
    size_t ntab = c->tab.n;
    int64_t *cnt = calloc(2 * ntab, sizeof *cnt);
    unsigned char *in_union = NULL;
    size_t max_sent = 0;
    for (size_t k = 0; k < ref->n_sent; k++) {
        size_t len = ref->sent_off[k + 1] - ref->sent_off[k];
        if (len > max_sent) max_sent = len;
    }
    in_union = malloc(max_sent + 1);
    if (!cnt || !in_union) {
        free(cnt);
        free(in_union);
        return lf_fail(LF_ERR_NOMEM, "rougeLsum: out of memory");
    }
    int64_t *cnt_r = cnt, *cnt_c = cnt + ntab;
    for (size_t i = 0; i < m; i++) cnt_r[ref->ids_s[i]]++;
    for (size_t i = 0; i < n; i++) cnt_c[pred->ids_s[i]]++;
    int64_t hits = 0;
    lf_status st = LF_OK;
    for (size_t k = 0; k < ref->n_sent && st == LF_OK; k++) {
        const uint32_t *r = ref->ids_s + ref->sent_off[k];
        size_t rl = ref->sent_off[k + 1] - ref->sent_off[k];
        memset(in_union, 0, rl + 1);
        for (size_t q = 0; q < pred->n_sent && st == LF_OK; q++)
            st = lcs_mark(c, r, rl, pred->ids_s + pred->sent_off[q], pred->sent_off[q + 1] - pred->sent_off[q],
                          in_union);
        for (size_t i = 0; i < rl && st == LF_OK; i++) { /* sorted union, in ref order */
            if (!in_union[i]) continue;
            uint32_t tkn = r[i];
            if (cnt_c[tkn] > 0 && cnt_r[tkn] > 0) {
                hits++;
                cnt_c[tkn]--;
                cnt_r[tkn]--;
            }
        }
    }
    free(cnt);
    free(in_union);
    if (st != LF_OK) return st;
    out->recall = (double)hits / (double)m;
    out->precision = (double)hits / (double)n;
    out->fmeasure = fmeasure(out->precision, out->recall);
    return LF_OK;
}

/* RougeScorer.score(target, prediction) with pre-tokenized texts. */
static lf_status score_pair(rouge_ctx *c, unsigned types, const ttext *ref, const ttext *pred, lf_rouge_score *out) {
    memset(out->type, 0, sizeof out->type);
    lf_status st = LF_OK;
    for (int t = 0; t < LF_ROUGE_NUM_TYPES && st == LF_OK; t++) {
        if (!(types & LF_ROUGE_BIT(t))) continue;
        if (t == LF_ROUGE_L) st = score_lcs(ref, pred, &out->type[t]);
        else if (t == LF_ROUGE_LSUM) st = score_lsum(c, ref, pred, &out->type[t]);
        else st = score_ngrams(c, ref, pred, t - LF_ROUGE_1 + 1, &out->type[t]);
    }
    return st;
}

lf_status lf_rouge_score_text(const lf_rouge_config *cfg, const char *const *refs, size_t n_refs,
                              const char *prediction, lf_rouge_score *out) {
    if (!cfg || !refs || !prediction || !out) return lf_fail(LF_ERR_INVALID_ARG, "rouge: NULL argument");
    if (n_refs == 0) return lf_fail(LF_ERR_INVALID_ARG, "rouge: no reference");
    if (!cfg->types || (cfg->types >> LF_ROUGE_NUM_TYPES))
        return lf_fail(LF_ERR_INVALID_ARG, "rouge: bad set of rouge types 0x%x", cfg->types);
    if ((unsigned)cfg->tokenizer > LF_ROUGE_TOK_AUTO)
        return lf_fail(LF_ERR_INVALID_ARG, "rouge: unknown tokenizer %d", (int)cfg->tokenizer);
    for (size_t r = 0; r < n_refs; r++)
        if (!refs[r]) return lf_fail(LF_ERR_INVALID_ARG, "rouge: reference %zu is NULL", r + 1);
    rouge_ctx c;
    memset(&c, 0, sizeof c);
    c.stem = cfg->use_stemmer;
    c.tok = cfg->tokenizer;
    lf_status st = LF_OK;
    ttext pred = {0}, ref = {0};
    if (c.tok == LF_ROUGE_TOK_AUTO) {
        uint64_t cjk = 0, nonspace = 0;
        st = count_cjk(prediction, "prediction", &cjk, &nonspace, &c.dec);
        for (size_t r = 0; r < n_refs && st == LF_OK; r++)
            st = count_cjk(refs[r], "reference", &cjk, &nonspace, &c.dec);
        c.tok = cjk * 2 > nonspace ? LF_ROUGE_TOK_CJK : LF_ROUGE_TOK_DEFAULT;
    }
    int want_sents = (cfg->types & LF_ROUGE_BIT(LF_ROUGE_LSUM)) != 0;
    if (st == LF_OK) st = tokenize_text(&c, prediction, "prediction", want_sents, &pred);
    lf_rouge_score best, cur;
    memset(&best, 0, sizeof best);
    for (size_t r = 0; r < n_refs && st == LF_OK; r++) {
        char what[40];
        snprintf(what, sizeof what, "reference %zu", r + 1);
        ttext_free(&ref);
        st = tokenize_text(&c, refs[r], what, want_sents, &ref);
        if (st == LF_OK) st = score_pair(&c, cfg->types, &ref, &pred, &cur);
        if (st != LF_OK) break;
        /* score_multi: per type the first reference with the highest F */
        for (int t = 0; t < LF_ROUGE_NUM_TYPES; t++)
            if (r == 0 || cur.type[t].fmeasure > best.type[t].fmeasure) best.type[t] = cur.type[t];
    }
    ttext_free(&ref);
    ttext_free(&pred);
    ctx_free(&c);
    if (st != LF_OK) return st;
    best.tokenizer = c.tok;
    *out = best;
    return LF_OK;
}

lf_status lf_rouge_mean(const lf_rouge_score *items, size_t n, lf_rouge_score *out) {
    if (!items || !out) return lf_fail(LF_ERR_INVALID_ARG, "rouge: NULL argument");
    if (n == 0) return lf_fail(LF_ERR_INVALID_ARG, "rouge: no items to average");
    lf_rouge_score m;
    memset(&m, 0, sizeof m);
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < LF_ROUGE_NUM_TYPES; t++) {
            m.type[t].precision += items[i].type[t].precision;
            m.type[t].recall += items[i].type[t].recall;
            m.type[t].fmeasure += items[i].type[t].fmeasure;
        }
    for (int t = 0; t < LF_ROUGE_NUM_TYPES; t++) {
        m.type[t].precision /= (double)n;
        m.type[t].recall /= (double)n;
        m.type[t].fmeasure /= (double)n;
    }
    m.tokenizer = items[0].tokenizer;
    *out = m;
    return LF_OK;
}

lf_status lf_rouge_tokenize_text(lf_rouge_tokenizer tok, int use_stemmer, const char *text, char **out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "rouge: NULL argument");
    *out = NULL;
    rouge_ctx c;
    memset(&c, 0, sizeof c);
    c.stem = use_stemmer;
    c.tok = tok;
    lf_status st = LF_OK;
    if (tok == LF_ROUGE_TOK_AUTO) st = lf_rouge_detect_tokenizer(&text, 1, &c.tok);
    else if ((unsigned)tok > LF_ROUGE_TOK_AUTO)
        st = lf_fail(LF_ERR_INVALID_ARG, "rouge: unknown tokenizer %d", (int)tok);
    if (st == LF_OK) st = lf__u_decode_str(text, "text", &c.dec);
    if (st == LF_OK) st = rouge_tokens(c.tok, c.stem, c.dec.v, c.dec.n, &c.toks, &c.low, &c.buf, &c.cap);
    if (st == LF_OK) st = lf__toks_join(&c.toks, out);
    ctx_free(&c);
    return st;
}

lf_status lf_porter_stem(const char *word, char **out) {
    if (!word || !out) return lf_fail(LF_ERR_INVALID_ARG, "porter: NULL argument");
    *out = NULL;
    size_t n = strnlen(word, LF_EVAL_MAX_TEXT + 1);
    if (n > LF_EVAL_MAX_TEXT)
        return lf_fail(LF_ERR_RANGE, "porter: word longer than %zu bytes", (size_t)LF_EVAL_MAX_TEXT);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)word[i] >= 0x80)
            return lf_fail(LF_ERR_INVALID_ARG, "porter: '%s' is not ASCII (byte %zu)", word, i);
    char *o = lf_alloc(n + 2);
    if (!o) return LF_ERR_NOMEM;
    lf__porter_stem(word, n, o);
    *out = o;
    return LF_OK;
}
