/* ROUGE against rouge-score 0.1.2: every item of tests/fixtures/
 * metrics_rouge.json (tools/reference/make_metric_fixtures.py) must agree
 * within 1e-9 for each precision, recall and F of each type, and so must
 * the means over items; the tokenizer and nltk's Porter stemmer must give
 * identical strings. Then the CJK-aware tokenizer and its AUTO rule, by
 * hand, and bad input. */
#include "fixture_util.h"
#include "llmforge/eval.h"

#define TOL 1e-9

static double g_worst_item, g_worst_mean;

static void check_prf(const lf_rouge_prf *got, const cJSON *want, const char *name, const char *type, double *worst) {
    char what[64];
    static const char *const f[] = {"precision", "recall", "fmeasure"};
    double g[3] = {got->precision, got->recall, got->fmeasure};
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof what, "%s %s", type, f[k]);
        fx_close(g[k], cJSON_GetArrayItem(want, k)->valuedouble, TOL, worst, what, name);
    }
}

static void test_rouge_reference_cases(void **state) {
    (void)state;
    cJSON *fx = fx_load("metrics_rouge.json");
    const cJSON *c;
    int n_items = 0, n_values = 0;
    cJSON_ArrayForEach(c, fx_get(fx, "cases")) {
        const char *name = fx_str(c, "name");
        lf_rouge_config cfg = lf_rouge_config_default();
        cfg.use_stemmer = cJSON_IsTrue(fx_get(c, "use_stemmer"));
        cfg.types = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, fx_get(c, "types")) {
            int ty = lf_rouge_type_from_name(t->valuestring);
            assert_true(ty >= 0);
            cfg.types |= LF_ROUGE_BIT(ty);
        }
        const cJSON *items = fx_get(c, "items");
        size_t n = (size_t)cJSON_GetArraySize(items), i = 0;
        lf_rouge_score *scores = calloc(n, sizeof *scores);
        const cJSON *it;
        cJSON_ArrayForEach(it, items) {
            const cJSON *refs = fx_get(it, "references");
            size_t nr = (size_t)cJSON_GetArraySize(refs);
            const char **r = calloc(nr, sizeof *r);
            for (size_t k = 0; k < nr; k++) r[k] = cJSON_GetArrayItem(refs, (int)k)->valuestring;
            LF_ASSERT_OK(lf_rouge_score_text(&cfg, r, nr, fx_str(it, "prediction"), &scores[i]));
            assert_int_equal(scores[i].tokenizer, LF_ROUGE_TOK_DEFAULT);
            char iname[256];
            snprintf(iname, sizeof iname, "%s item %zu", name, i + 1);
            const cJSON *want = fx_get(it, "scores");
            cJSON_ArrayForEach(t, fx_get(c, "types")) {
                int ty = lf_rouge_type_from_name(t->valuestring);
                check_prf(&scores[i].type[ty], fx_get(want, t->valuestring), iname, t->valuestring, &g_worst_item);
                n_values += 3;
            }
            free(r);
            i++;
            n_items++;
        }
        lf_rouge_score mean;
        LF_ASSERT_OK(lf_rouge_mean(scores, n, &mean));
        cJSON_ArrayForEach(t, fx_get(c, "types")) {
            int ty = lf_rouge_type_from_name(t->valuestring);
            check_prf(&mean.type[ty], fx_get(fx_get(c, "mean"), t->valuestring), name, t->valuestring, &g_worst_mean);
        }
        free(scores);
    }
    printf("rouge vs rouge-score 0.1.2: %d items, %d P/R/F values; max |diff| per item %.3g, mean %.3g\n", n_items,
           n_values, g_worst_item, g_worst_mean);
    cJSON_Delete(fx);
}

static void test_rouge_tokenizer_and_stemmer(void **state) {
    (void)state;
    cJSON *fx = fx_load("metrics_rouge.json");
    const cJSON *e;
    int n_tok = 0, n_stem = 0;
    cJSON_ArrayForEach(e, fx_get(fx, "tokenize")) {
        char *got;
        int stem = cJSON_IsTrue(fx_get(e, "use_stemmer"));
        LF_ASSERT_OK(lf_rouge_tokenize_text(LF_ROUGE_TOK_DEFAULT, stem, fx_str(e, "text"), &got));
        if (strcmp(got, fx_str(e, "tokens")))
            fail_msg("stem %d '%s':\n  got  '%s'\n  want '%s'", stem, fx_str(e, "text"), got, fx_str(e, "tokens"));
        lf_free(got);
        n_tok++;
    }
    cJSON_ArrayForEach(e, fx_get(fx, "stems")) {
        const char *w = cJSON_GetArrayItem(e, 0)->valuestring, *want = cJSON_GetArrayItem(e, 1)->valuestring;
        char *got;
        LF_ASSERT_OK(lf_porter_stem(w, &got));
        if (strcmp(got, want)) fail_msg("stem('%s') = '%s', nltk says '%s'", w, got, want);
        lf_free(got);
        n_stem++;
    }
    printf("rouge tokenizer: %d texts identical; Porter stemmer: %d words identical to nltk %s\n", n_tok, n_stem,
           fx_str(fx, "nltk_version"));
    cJSON_Delete(fx);
}

static void tok_is(lf_rouge_tokenizer tok, int stem, const char *text, const char *want) {
    char *got;
    LF_ASSERT_OK(lf_rouge_tokenize_text(tok, stem, text, &got));
    if (strcmp(got, want)) fail_msg("tokenize('%s') = '%s', want '%s'", text, got, want);
    lf_free(got);
}

static void test_rouge_cjk(void **state) {
    (void)state;
    /* rouge-score's tokenizer deletes every non-ASCII character */
    tok_is(LF_ROUGE_TOK_DEFAULT, 0, "今天天气很好 GPT-4", "gpt 4");
    /* the CJK tokenizer keeps each CJK character, ASCII runs as before, fullwidth read as ASCII */
    tok_is(LF_ROUGE_TOK_CJK, 0, "今天天气很好，GPT-4模型！Ｒｕｎｎｉｎｇ２０２３", "今 天 天 气 很 好 gpt 4 模 型 running2023");
    tok_is(LF_ROUGE_TOK_CJK, 1, "我们 running quickly", "我 们 run quickli");
    tok_is(LF_ROUGE_TOK_CJK, 0, "ひらがな カタカナ 한국어", "ひ ら が な カ タ カ ナ 한 국 어");
    /* identical to the default on text without CJK or fullwidth characters */
    tok_is(LF_ROUGE_TOK_CJK, 1, "The Runners' café, 3 times!", "the runner caf 3 time");
    tok_is(LF_ROUGE_TOK_DEFAULT, 1, "The Runners' café, 3 times!", "the runner caf 3 time");
    /* AUTO: CJK when more than half of the non-space characters are CJK */
    lf_rouge_tokenizer t;
    const char *zh[] = {"今天天气很好", "ok"};
    LF_ASSERT_OK(lf_rouge_detect_tokenizer(zh, 2, &t));
    assert_int_equal(t, LF_ROUGE_TOK_CJK);
    const char *half[] = {"中文", "ab"}; /* exactly half: not more than half */
    LF_ASSERT_OK(lf_rouge_detect_tokenizer(half, 2, &t));
    assert_int_equal(t, LF_ROUGE_TOK_DEFAULT);
    const char *en[] = {"mostly English 文"};
    LF_ASSERT_OK(lf_rouge_detect_tokenizer(en, 1, &t));
    assert_int_equal(t, LF_ROUGE_TOK_DEFAULT);

    /* Chinese scored: default gives 0, CJK counts characters. see the counts below */
    lf_rouge_config cfg = lf_rouge_config_default();
    const char *ref[] = {"今天天气很好啊"};
    lf_rouge_score s;
    LF_ASSERT_OK(lf_rouge_score_text(&cfg, ref, 1, "今天天气不错", &s));
    assert_true(s.type[LF_ROUGE_1].fmeasure == 0.0);
    cfg.tokenizer = LF_ROUGE_TOK_AUTO;
    LF_ASSERT_OK(lf_rouge_score_text(&cfg, ref, 1, "今天天气不错", &s));
    assert_int_equal(s.tokenizer, LF_ROUGE_TOK_CJK);
    /* ref tokens 今 天 天 气 很 好 啊 (7), pred 今 天 天 气 不 错 (6): overlap 4 */
    assert_true(fabs(s.type[LF_ROUGE_1].precision - 4.0 / 6.0) < 1e-15);
    assert_true(fabs(s.type[LF_ROUGE_1].recall - 4.0 / 7.0) < 1e-15);
    /* bigrams: ref 今天 天天 天气 气很 很好 好啊 (6), pred 今天 天天 天气 气不 不错 (5): overlap 3 */
    assert_true(fabs(s.type[LF_ROUGE_2].precision - 3.0 / 5.0) < 1e-15);
    assert_true(fabs(s.type[LF_ROUGE_2].recall - 3.0 / 6.0) < 1e-15);
    assert_true(fabs(s.type[LF_ROUGE_L].fmeasure - 2 * (4.0 / 6) * (4.0 / 7) / (4.0 / 6 + 4.0 / 7)) < 1e-15);
}

static void test_rouge_hand_and_errors(void **state) {
    (void)state;
    assert_int_equal(lf_rouge_type_from_name("rouge1"), LF_ROUGE_1);
    assert_int_equal(lf_rouge_type_from_name("rouge9"), LF_ROUGE_1 + 8);
    assert_int_equal(lf_rouge_type_from_name("rougeLsum"), LF_ROUGE_LSUM);
    assert_int_equal(lf_rouge_type_from_name("rouge0"), -1);
    assert_int_equal(lf_rouge_type_from_name("rouge10"), -1);
    assert_int_equal(lf_rouge_type_from_name("bleu"), -1);
    assert_string_equal(lf_rouge_type_name(LF_ROUGE_L), "rougeL");
    assert_null(lf_rouge_type_name(99));

    lf_rouge_config cfg = lf_rouge_config_default();
    lf_rouge_score s;
    const char *ref[] = {"the cat sat on the mat"};
    LF_ASSERT_OK(lf_rouge_score_text(&cfg, ref, 1, "the cat sat on the mat", &s));
    for (int t = 0; t < LF_ROUGE_NUM_TYPES; t++)
        if (cfg.types & LF_ROUGE_BIT(t)) assert_true(s.type[t].fmeasure == 1.0);
    /* bad UTF-8 and arguments */
    assert_int_equal(lf_rouge_score_text(&cfg, ref, 1, "ok \xE2\x28\xA1", &s), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("prediction: invalid UTF-8 at byte 3");
    const char *bad_ref[] = {"fine", "\xF8\x88\x80\x80\x80"};
    assert_int_equal(lf_rouge_score_text(&cfg, bad_ref, 2, "x", &s), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("reference 2: invalid UTF-8 at byte 0");
    assert_int_equal(lf_rouge_score_text(&cfg, ref, 0, "x", &s), LF_ERR_INVALID_ARG);
    cfg.types = 0;
    assert_int_equal(lf_rouge_score_text(&cfg, ref, 1, "x", &s), LF_ERR_INVALID_ARG);
    char *o;
    assert_int_equal(lf_porter_stem("caf\xC3\xA9s", &o), LF_ERR_INVALID_ARG);
    /* a pathological stemmer input does not recurse or blow up */
    char y[5001];
    memset(y, 'y', 5000);
    y[5000] = 0;
    LF_ASSERT_OK(lf_porter_stem(y, &o));
    lf_free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rouge_reference_cases),
        cmocka_unit_test(test_rouge_tokenizer_and_stemmer),
        cmocka_unit_test(test_rouge_cjk),
        cmocka_unit_test(test_rouge_hand_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
