/* BLEU against sacreBLEU 2.6.0: every case of tests/fixtures/metrics_bleu.json
 * (written by tools/reference/make_metric_fixtures.py) must agree within
 * 1e-9 for the corpus score, each sentence score and every precision and
 * brevity penalty, and exactly for counts, totals, lengths, signatures and
 * tokenizer output. Also: the streaming API equals the one-shot API, and
 * bad input is an error with a message, never a crash. */
#include "fixture_util.h"
#include "llmforge/eval.h"

#define TOL 1e-9

static double g_worst_corpus, g_worst_sentence;

static lf_bleu_tokenize tok_of(const char *s) {
    if (!strcmp(s, "13a")) return LF_BLEU_TOK_13A;
    if (!strcmp(s, "zh")) return LF_BLEU_TOK_ZH;
    if (!strcmp(s, "char")) return LF_BLEU_TOK_CHAR;
    if (!strcmp(s, "none")) return LF_BLEU_TOK_NONE;
    fail_msg("unknown tokenizer '%s' in fixture", s);
    return LF_BLEU_TOK_13A;
}

static lf_bleu_smooth smooth_of(const char *s) {
    if (!strcmp(s, "exp")) return LF_BLEU_SMOOTH_EXP;
    if (!strcmp(s, "floor")) return LF_BLEU_SMOOTH_FLOOR;
    if (!strcmp(s, "add-k")) return LF_BLEU_SMOOTH_ADD_K;
    if (!strcmp(s, "none")) return LF_BLEU_SMOOTH_NONE;
    fail_msg("unknown smoothing '%s' in fixture", s);
    return LF_BLEU_SMOOTH_EXP;
}

static void check_score(const lf_bleu_score *got, const cJSON *want, const char *name, double *worst) {
    fx_close(got->score, fx_num(want, "score"), TOL, worst, "score", name);
    fx_close(got->bp, fx_num(want, "bp"), TOL, worst, "bp", name);
    const cJSON *counts = fx_get(want, "counts"), *totals = fx_get(want, "totals"), *prec = fx_get(want, "precisions");
    assert_int_equal(cJSON_GetArraySize(counts), LF_BLEU_MAX_ORDER);
    for (int n = 0; n < LF_BLEU_MAX_ORDER; n++) {
        double wc = cJSON_GetArrayItem(counts, n)->valuedouble, wt = cJSON_GetArrayItem(totals, n)->valuedouble;
        if (got->counts[n] != wc || got->totals[n] != wt)
            fail_msg("%s: order %d counts/totals %g/%g, reference %g/%g", name, n + 1, got->counts[n], got->totals[n],
                     wc, wt);
        char what[32];
        snprintf(what, sizeof what, "precision[%d]", n);
        fx_close(got->precisions[n], cJSON_GetArrayItem(prec, n)->valuedouble, TOL, worst, what, name);
    }
    if (got->sys_len != (int64_t)fx_num(want, "sys_len") || got->ref_len != (int64_t)fx_num(want, "ref_len"))
        fail_msg("%s: sys_len/ref_len %lld/%lld, reference %g/%g", name, (long long)got->sys_len,
                 (long long)got->ref_len, fx_num(want, "sys_len"), fx_num(want, "ref_len"));
    if (strcmp(got->signature, fx_str(want, "signature")))
        fail_msg("%s: signature '%s', reference '%s'", name, got->signature, fx_str(want, "signature"));
}

static void test_bleu_tokenizers(void **state) {
    (void)state;
    cJSON *fx = fx_load("metrics_bleu.json");
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, fx_get(fx, "tokenize")) {
        lf_bleu_config cfg = lf_bleu_config_default();
        cfg.tokenize = tok_of(fx_str(e, "tokenize"));
        cfg.lowercase = cJSON_IsTrue(fx_get(e, "lowercase"));
        char *got;
        LF_ASSERT_OK(lf_bleu_tokenize_text(&cfg, fx_str(e, "text"), &got));
        if (strcmp(got, fx_str(e, "tokens")))
            fail_msg("tok %s lc %d of '%s':\n  got  '%s'\n  want '%s'", fx_str(e, "tokenize"), cfg.lowercase,
                     fx_str(e, "text"), got, fx_str(e, "tokens"));
        lf_free(got);
        n++;
    }
    printf("bleu tokenizers: %d texts identical to sacreBLEU's preprocessing\n", n);
    cJSON_Delete(fx);
}

static void test_bleu_reference_cases(void **state) {
    (void)state;
    cJSON *fx = fx_load("metrics_bleu.json");
    const cJSON *c;
    int n_cases = 0, n_sent = 0;
    cJSON_ArrayForEach(c, fx_get(fx, "cases")) {
        const char *name = fx_str(c, "name");
        lf_bleu_config cfg = lf_bleu_config_default();
        cfg.tokenize = tok_of(fx_str(c, "tokenize"));
        cfg.smooth = smooth_of(fx_str(c, "smooth_method"));
        const cJSON *sv = fx_get(c, "smooth_value");
        cfg.smooth_value = cJSON_IsNumber(sv) ? sv->valuedouble : -1;
        cfg.lowercase = cJSON_IsTrue(fx_get(c, "lowercase"));
        int eff = cJSON_IsTrue(fx_get(c, "effective_order"));
        cfg.effective_order = eff ? LF_BLEU_EFF_YES : LF_BLEU_EFF_AUTO;

        const cJSON *hyps = fx_get(c, "hyps"), *refs = fx_get(c, "refs");
        size_t n = (size_t)cJSON_GetArraySize(hyps), nr = (size_t)cJSON_GetArraySize(refs);
        const char **h = calloc(n, sizeof *h);
        const char ***r = calloc(nr, sizeof *r);
        for (size_t i = 0; i < n; i++) h[i] = cJSON_GetArrayItem(hyps, (int)i)->valuestring;
        for (size_t k = 0; k < nr; k++) {
            r[k] = calloc(n, sizeof **r);
            const cJSON *stream = cJSON_GetArrayItem(refs, (int)k);
            for (size_t i = 0; i < n; i++) {
                const cJSON *x = cJSON_GetArrayItem(stream, (int)i);
                r[k][i] = cJSON_IsString(x) ? x->valuestring : NULL; /* null: no reference */
            }
        }
        /* one-shot corpus score */
        lf_bleu_score got;
        LF_ASSERT_OK(lf_bleu_corpus_score(&cfg, h, n, (const char *const *const *)r, nr, &got));
        check_score(&got, fx_get(c, "corpus"), name, &g_worst_corpus);

        /* streaming: same corpus score, and each segment's sentence score */
        lf_bleu *b;
        lf_bleu_config scfg = cfg;
        scfg.effective_order = eff ? LF_BLEU_EFF_YES : LF_BLEU_EFF_AUTO;
        LF_ASSERT_OK(lf_bleu_create(&b, &scfg));
        const char **seg = calloc(nr, sizeof *seg);
        const cJSON *sents = fx_get(c, "sentences");
        for (size_t i = 0; i < n; i++) {
            for (size_t k = 0; k < nr; k++) seg[k] = r[k][i];
            lf_bleu_score s1, s2;
            LF_ASSERT_OK(lf_bleu_add(b, h[i], seg, nr, &s1));
            /* sacrebleu.sentence_bleu: effective order, only the present references */
            lf_bleu_config sc = cfg;
            sc.effective_order = LF_BLEU_EFF_AUTO;
            LF_ASSERT_OK(lf_bleu_sentence_score(&sc, h[i], seg, nr, &s2));
            char sname[256];
            snprintf(sname, sizeof sname, "%s sentence %zu", name, i + 1);
            check_score(&s2, cJSON_GetArrayItem(sents, (int)i), sname, &g_worst_sentence);
            check_score(&s1, cJSON_GetArrayItem(sents, (int)i), sname, &g_worst_sentence);
            n_sent++;
        }
        lf_bleu_score stream;
        LF_ASSERT_OK(lf_bleu_corpus(b, &stream));
        assert_int_equal(lf_bleu_num_segments(b), n);
        assert_memory_equal(&stream, &got, sizeof got);
        lf_bleu_free(b);
        free(seg);
        for (size_t k = 0; k < nr; k++) free(r[k]);
        free(r);
        free(h);
        n_cases++;
    }
    printf("bleu vs sacreBLEU 2.6.0: %d corpus cases, %d sentence scores; max |diff| corpus %.3g, sentence %.3g\n",
           n_cases, n_sent, g_worst_corpus, g_worst_sentence);
    cJSON_Delete(fx);
}

static void test_bleu_hand(void **state) {
    (void)state;
    lf_bleu_config cfg = lf_bleu_config_default();
    lf_bleu_score s;
    const char *refs[] = {"the cat sat on the mat"};
    LF_ASSERT_OK(lf_bleu_sentence_score(&cfg, "the cat sat on the mat", refs, 1, &s));
    assert_true(fabs(s.score - 100.0) < 1e-12);
    assert_string_equal(s.signature, "nrefs:1|case:mixed|eff:yes|tok:13a|smooth:exp|version:2.6.0");
    /* closest reference length, ties to the shorter: hyp 3 tokens, refs 2 and 4 */
    const char *r2[] = {"a b c d", "a b"};
    LF_ASSERT_OK(lf_bleu_sentence_score(&cfg, "a b c", r2, 2, &s));
    assert_int_equal(s.ref_len, 2);
    assert_int_equal(s.sys_len, 3);
    /* signatures carry the smoothing value */
    cfg.smooth = LF_BLEU_SMOOTH_FLOOR;
    cfg.smooth_value = 0.25;
    cfg.lowercase = 1;
    cfg.tokenize = LF_BLEU_TOK_CHAR;
    LF_ASSERT_OK(lf_bleu_sentence_score(&cfg, "x", refs, 1, &s));
    assert_string_equal(s.signature, "nrefs:1|case:lc|eff:yes|tok:char|smooth:floor[0.25]|version:2.6.0");
}

static void test_bleu_bad_input(void **state) {
    (void)state;
    lf_bleu_config cfg = lf_bleu_config_default();
    lf_bleu_score s;
    const char *refs[] = {"ok"};
    static const char *bad[] = {"\xC0\xAF", "abc\xE2\x82", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xFF"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(lf_bleu_sentence_score(&cfg, bad[i], refs, 1, &s), LF_ERR_FORMAT);
        LF_ASSERT_ERR_CONTAINS("hypothesis: invalid UTF-8 at byte");
        const char *br[] = {"fine", bad[i]};
        assert_int_equal(lf_bleu_sentence_score(&cfg, "fine", br, 2, &s), LF_ERR_FORMAT);
        LF_ASSERT_ERR_CONTAINS("reference 2: invalid UTF-8");
    }
    const char *none[] = {NULL, NULL};
    assert_int_equal(lf_bleu_sentence_score(&cfg, "x", none, 2, &s), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_bleu_sentence_score(&cfg, "x", refs, 0, &s), LF_ERR_INVALID_ARG);
    lf_bleu *b;
    LF_ASSERT_OK(lf_bleu_create(&b, &cfg));
    assert_int_equal(lf_bleu_corpus(b, &s), LF_ERR_INVALID_ARG);
    lf_bleu_free(b);
    lf_bleu_free(NULL);
    cfg.tokenize = (lf_bleu_tokenize)9;
    assert_int_equal(lf_bleu_create(&b, &cfg), LF_ERR_INVALID_ARG);
    cfg = lf_bleu_config_default();
    cfg.smooth_value = NAN;
    assert_int_equal(lf_bleu_create(&b, &cfg), LF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bleu_tokenizers),
        cmocka_unit_test(test_bleu_reference_cases),
        cmocka_unit_test(test_bleu_hand),
        cmocka_unit_test(test_bleu_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
