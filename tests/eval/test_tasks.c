/*
 * Task harness (src/eval/tasks.c, task_ll.c, task_gen.c) on a tiny
 * random-weight model with a character tokenizer built here. Every metric is
 * checked against a separate, plain path: one forward per sequence (B = 1),
 * log-softmax by hand, greedy decoding by argmax, the metrics library on the
 * expected predictions. Bad input must fail with file:line in the message.
 */
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/backend.h"
#include "llmforge/data.h"
#include "llmforge/eval.h"
#include "llmforge/model.h"

#define BLOCK 16

static char *g_dir;
static lf_tokenizer *g_tok;      /* char vocabulary of the corpus; its end-of-text is "\n" */
static lf_tokenizer *g_tok_nonl; /* a char vocabulary without "\n": no end-of-text token */
static int32_t g_nl;             /* id of "\n" in g_tok */
static lf_model *g_m;
static int g_V;

/* ---------------------------------------------------------------- fixture */
static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static char *path_in(const char *name) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 1024, "%s/%s", g_dir, name);
    return p;
}

static int setup(void **state) {
    (void)state;
    g_dir = lf_test_tmpdir();
    if (!g_dir) return -1;
    /* a corpus holding every character the tasks use (and two non-ASCII ones) */
    char *corpus = malloc(1 << 16);
    size_t n = 0;
    for (int r = 0; r < 30; r++)
        n += (size_t)sprintf(corpus + n,
                             "the quick brown fox jumps over the lazy dog. is it a cat? yes! no, it's a dog: "
                             "12+34=46 5*6=30 caf\xc3\xa9 \xc3\xbc\nQ: where? A: here.\n");
    write_file(path_in("corpus.txt"), corpus);
    free(corpus);
    lf_prepare_stats ps;
    LF_ASSERT_OK(lf_prepare_char(path_in("corpus.txt"), path_in("data"), &ps));
    char spec[1200];
    snprintf(spec, sizeof spec, "char:%s/data/vocab.json", g_dir);
    LF_ASSERT_OK(lf_tokenizer_open(&g_tok, spec, NULL));
    g_V = lf_tokenizer_vocab_size(g_tok);
    uint32_t *nl;
    size_t nn;
    LF_ASSERT_OK(lf_tokenizer_encode(g_tok, "\n", 1, &nl, &nn));
    g_nl = (int32_t)nl[0];
    lf_free(nl);
    assert_int_equal(lf_tokenizer_eot(g_tok), g_nl);
    write_file(path_in("vocab_nonl.json"), "{\"type\":\"char\",\"chars\":[\" \",\"a\",\"e\",\"f\",\"h\",\"o\",\"t\",\"x\"]}");
    snprintf(spec, sizeof spec, "char:%s/vocab_nonl.json", g_dir);
    LF_ASSERT_OK(lf_tokenizer_open(&g_tok_nonl, spec, NULL));
    assert_int_equal(lf_tokenizer_eot(g_tok_nonl), -1);
    lf_model_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = BLOCK, .vocab_size = g_V, .bias = 1};
    LF_ASSERT_OK(lf_model_create(&g_m, &cfg, lf_backend_get("cpu")));
    LF_ASSERT_OK(lf_model_init_weights(g_m, 7));
    /* a sharper model than the 0.02 init gives: log-likelihoods far apart */
    float *p = lf_model_params(g_m);
    for (size_t i = 0; i < lf_model_num_params(g_m); i++) p[i] *= 6.0f;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    lf_model_free(g_m);
    lf_tokenizer_free(g_tok);
    lf_tokenizer_free(g_tok_nonl);
    lf_test_rmrf(g_dir);
    free(g_dir);
    return 0;
}

/* ---------------------------------------------------------------- the separate path */
static int32_t *encode(const char *s, size_t *n) {
    uint32_t *ids;
    LF_ASSERT_OK(lf_tokenizer_encode(g_tok, s, strlen(s), &ids, n));
    int32_t *o = malloc(sizeof(int32_t) * (*n + 1));
    for (size_t i = 0; i < *n; i++) o[i] = (int32_t)ids[i];
    lf_free(ids);
    return o;
}

/* Sum of log p(seq[k] | seq[<k]) for k in [n - n_cont, n): one B = 1 forward. */
static double ref_seq_ll(const int32_t *seq, int n, int n_cont) {
    LF_ASSERT_OK(lf_model_forward(g_m, seq, NULL, 1, n - 1, NULL, NULL, NULL));
    const float *lg = lf_model_logits(g_m);
    double ll = 0;
    for (int k = n - n_cont; k < n; k++) {
        const float *row = lg + (size_t)(k - 1) * (size_t)g_V;
        double mx = -INFINITY, se = 0;
        for (int v = 0; v < g_V; v++) mx = fmax(mx, (double)row[v]);
        for (int v = 0; v < g_V; v++) se += exp((double)row[v] - mx);
        ll += (double)row[seq[k]] - mx - log(se);
    }
    return ll;
}

/* LL of cont after ctx as the harness defines it, for a char tokenizer and a
 * non-empty context: trailing spaces of ctx move to cont; the sequence keeps
 * its last BLOCK+1 tokens. *n_cont: continuation tokens (= characters). */
static double ref_ll(const char *ctx, const char *cont, int *n_cont) {
    size_t cl = strlen(ctx);
    while (cl > 0 && (ctx[cl - 1] == ' ' || ctx[cl - 1] == '\n')) cl--;
    char *c0 = strndup(ctx, cl);
    char *c1 = malloc(strlen(ctx) - cl + strlen(cont) + 1);
    sprintf(c1, "%s%s", ctx + cl, cont);
    size_t na, nb;
    int32_t *a = encode(c0, &na), *b = encode(c1, &nb);
    size_t total = na + nb, keep = total < BLOCK + 1 ? total : BLOCK + 1;
    int32_t *seq = malloc(sizeof(int32_t) * total);
    memcpy(seq, a, na * sizeof(int32_t));
    memcpy(seq + na, b, nb * sizeof(int32_t));
    double ll = ref_seq_ll(seq + (total - keep), (int)keep, (int)nb);
    if (n_cont) *n_cont = (int)nb;
    free(c0);
    free(c1);
    free(a);
    free(b);
    free(seq);
    return ll;
}

/* Greedy continuation of prompt: n_new characters, or fewer when "\n" (the
 * end-of-text) comes first (not part of the text). */
static char *ref_greedy(const char *prompt, int n_new) {
    size_t n;
    int32_t *p = encode(prompt, &n);
    int32_t *seq = malloc(sizeof(int32_t) * (n + (size_t)n_new));
    memcpy(seq, p, n * sizeof(int32_t));
    free(p);
    int n_gen = 0;
    for (int k = 0; k < n_new; k++) {
        int T = n > BLOCK ? BLOCK : (int)n;
        LF_ASSERT_OK(lf_model_forward(g_m, seq + n - T, NULL, 1, T, NULL, NULL, NULL));
        const float *row = lf_model_logits(g_m) + (size_t)(T - 1) * (size_t)g_V;
        int best = 0;
        for (int v = 1; v < g_V; v++)
            if (row[v] > row[best]) best = v;
        if (best == g_nl) break; /* the end-of-text of a char vocabulary ends generation */
        seq[n++] = best;
        n_gen++;
    }
    uint32_t *gen = malloc(sizeof(uint32_t) * (size_t)(n_gen + 1));
    for (int k = 0; k < n_gen; k++) gen[k] = (uint32_t)seq[n - (size_t)n_gen + (size_t)k];
    char *text;
    size_t len;
    LF_ASSERT_OK(lf_tokenizer_decode(g_tok, gen, (size_t)n_gen, &text, &len));
    char *o = strdup(text);
    lf_free(text);
    free(gen);
    free(seq);
    return o;
}

/* s as the inside of a JSON string (rotating static buffers). */
static const char *jesc(const char *s) {
    static char buf[8][2048];
    static int k;
    char *o = buf[k++ % 8];
    size_t n = 0;
    for (; *s && n < sizeof buf[0] - 3; s++) {
        if (*s == '\n') {
            o[n++] = '\\';
            o[n++] = 'n';
        } else {
            if (*s == '"' || *s == '\\') o[n++] = '\\';
            o[n++] = *s;
        }
    }
    o[n] = 0;
    return o;
}

/* Load one task file and run it; returns the results (caller frees). */
static lf_eval_results *run_file(const char *name, const char *content, int batch) {
    write_file(path_in(name), content);
    const char *paths[] = {path_in(name)};
    lf_eval_tasks *ts;
    LF_ASSERT_OK(lf_eval_tasks_load(&ts, paths, 1, NULL));
    lf_eval_results *res;
    LF_ASSERT_OK(lf_eval_results_create(&res));
    lf_eval_run_opts ro = lf_eval_run_opts_default();
    ro.batch = batch;
    LF_ASSERT_OK(lf_eval_tasks_run(ts, g_m, g_tok, &ro, res));
    lf_eval_tasks_free(ts);
    return res;
}

static double metric(const lf_eval_results *r, const char *name) {
    double v;
    LF_ASSERT_OK(lf_eval_results_get(r, name, &v));
    return v;
}

static int argmax_first(const double *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* The top two entries differ by more than any batching noise. */
static void assert_margin(const double *v, int n, const char *what) {
    int b = argmax_first(v, n);
    for (int i = 0; i < n; i++)
        if (i != b && fabs(v[i] - v[b]) < 1e-4)
            fail_msg("%s: near tie (%.9g vs %.9g): pick other test data", what, v[i], v[b]);
}

/* ---------------------------------------------------------------- multiple choice */
typedef struct mc_case {
    const char *ctx;
    const char *choices[4];
    int gold;
} mc_case;

static const mc_case mc_cases[] = {
    {"the quick brown", {"fox", "dog", "cat jumps"}, 0},
    {"is it a", {"cat?", "dog", "fox. the lazy"}, 1},
    {"Q: where? A:", {"here.", "there", "caf\xc3\xa9"}, 0},
    {"12+34=", {"46", "30", "12"}, 0},
    /* longer than the block: cut on the left */
    {"the quick brown fox jumps over the lazy dog. is it a cat? yes! no, it's", {"a dog", "a cat", "the fox"}, 0},
    {"yes! no, it's a ", {"dog:", "cat", "\xc3\xbc\xc3\xbc"}, 2}, /* trailing space moves to the choice */
    {"5*6=", {"30", "31", "3"}, 2},
    {"over the lazy", {"dog.", "fox", "caf\xc3\xa9 \xc3\xbc"}, 1},
};
#define N_MC (int)(sizeof mc_cases / sizeof mc_cases[0])

static void test_multiple_choice_matches_separate_path(void **state) {
    (void)state;
    char buf[8192];
    size_t k = (size_t)sprintf(buf, "{\"task\":\"multiple_choice\",\"name\":\"mc\"}\n");
    double acc = 0, acc_norm = 0;
    for (int i = 0; i < N_MC; i++) {
        const mc_case *c = &mc_cases[i];
        k += (size_t)sprintf(buf + k, "{\"context\":\"%s\",\"choices\":[", c->ctx);
        double ll[4], nl[4];
        int n = 0;
        for (; n < 4 && c->choices[n]; n++) {
            k += (size_t)sprintf(buf + k, "%s\"%s\"", n ? "," : "", c->choices[n]);
            char cont[128];
            snprintf(cont, sizeof cont, " %s", c->choices[n]); /* target_delimiter " " */
            int nc;
            ll[n] = ref_ll(c->ctx, cont, &nc);
            size_t chars;
            free(encode(c->choices[n], &chars)); /* characters = tokens of a char tokenizer */
            nl[n] = ll[n] / (double)chars;
        }
        k += (size_t)sprintf(buf + k, "],\"gold\":%d}\n", c->gold);
        assert_margin(ll, n, "ll");
        assert_margin(nl, n, "ll/len");
        acc += argmax_first(ll, n) == c->gold;
        acc_norm += argmax_first(nl, n) == c->gold;
    }
    acc /= N_MC;
    acc_norm /= N_MC;
    int batches[] = {1, 3, 0};
    for (int b = 0; b < 3; b++) {
        lf_eval_results *r = run_file("mc.jsonl", buf, batches[b]);
        assert_true(metric(r, "mc/acc") == acc);
        assert_true(metric(r, "mc/acc_norm") == acc_norm);
        lf_eval_results_free(r);
    }
    print_message("multiple choice: acc %.4f, acc_norm %.4f over %d examples\n", acc, acc_norm, N_MC);
}

/* ---------------------------------------------------------------- batching */
static void test_batching_does_not_change_lls(void **state) {
    (void)state;
    const char *ctx[] = {"the", "is it a cat?", "Q: where? A:", "12+34", "the quick brown fox jumps over the lazy dog.",
                         "no, it's a ", "caf\xc3\xa9", "x"};
    const char *cont[] = {" quick", " yes!", " here.", "=46", " is it a cat?", "dog", " \xc3\xbc", " the quick"};
    enum { N = 8 };
    lf_eval_ll_request a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (lf_eval_ll_request){.context = ctx[i], .continuation = cont[i]};
        b[i] = c[i] = a[i];
    }
    LF_ASSERT_OK(lf_eval_loglikelihood(g_m, g_tok, a, N, 1));
    LF_ASSERT_OK(lf_eval_loglikelihood(g_m, g_tok, b, N, 5));
    LF_ASSERT_OK(lf_eval_loglikelihood(g_m, g_tok, c, N, 0));
    double worst = 0;
    for (int i = 0; i < N; i++) {
        int nc;
        double want = ref_ll(ctx[i], cont[i], &nc);
        assert_int_equal(a[i].n_tokens, nc);
        assert_int_equal(b[i].n_tokens, nc);
        worst = fmax(worst, fmax(fabs(a[i].ll - want), fmax(fabs(b[i].ll - want), fabs(c[i].ll - want))));
        if (fabs(a[i].ll - want) > 1e-5 || fabs(b[i].ll - want) > 1e-5 || fabs(c[i].ll - want) > 1e-5)
            fail_msg("request %d: batch 1 %.9g, batch 5 %.9g, auto %.9g, separate path %.9g", i, a[i].ll, b[i].ll,
                     c[i].ll, want);
        assert_true(a[i].ll < 0);
    }
    print_message("log-likelihoods: batches 1, 5 and auto within %.3g of the separate path\n", worst);
    /* an empty context is the end-of-text ("\n" here); its whitespace joins the continuation */
    lf_eval_ll_request e = {.context = "  ", .continuation = "dog"};
    LF_ASSERT_OK(lf_eval_loglikelihood(g_m, g_tok, &e, 1, 0));
    size_t nd;
    int32_t *d = encode("  dog", &nd);
    int32_t seq[8] = {g_nl};
    memcpy(seq + 1, d, nd * sizeof(int32_t));
    free(d);
    assert_int_equal(e.n_tokens, 5);
    assert_true(fabs(e.ll - ref_seq_ll(seq, 6, 5)) < 1e-5);
    /* without an end-of-text token it is an error */
    e = (lf_eval_ll_request){.context = "", .continuation = "fox"};
    assert_int_equal(lf_eval_loglikelihood(g_m, g_tok_nonl, &e, 1, 0), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("request 0: the context is empty");
}

/* ---------------------------------------------------------------- classification */
static void test_classification(void **state) {
    (void)state;
    /* labels pos/neg/meh; pos is said "yes!", neg "no,", meh is itself */
    const char *texts[] = {"is it a cat?", "the lazy dog.", "Q: where?", "12+34=46", "it's a dog:", "the quick fox"};
    const char *gold[] = {"pos", "neg", "meh", "pos", "neg", "pos"};
    const char *labels[] = {"pos", "neg", "meh"};
    const char *verb[] = {" yes!", " no,", " meh"};
    char buf[4096];
    size_t k = (size_t)sprintf(buf, "{\"task\":\"classification\",\"labels\":[\"pos\",\"neg\",\"meh\"],"
                                    "\"verbalizers\":{\"pos\":\"yes!\",\"neg\":\"no,\"}}\n");
    lf_confusion *cm;
    LF_ASSERT_OK(lf_confusion_create(&cm));
    for (int i = 0; i < 6; i++) {
        if (i == 5) k += (size_t)sprintf(buf + k, "{\"text\":\"%s\",\"label\":0}\n", texts[i]); /* index form */
        else k += (size_t)sprintf(buf + k, "{\"text\":\"%s\",\"label\":\"%s\"}\n", texts[i], gold[i]);
        double ll[3];
        for (int j = 0; j < 3; j++) ll[j] = ref_ll(texts[i], verb[j], NULL);
        assert_margin(ll, 3, texts[i]);
        LF_ASSERT_OK(lf_confusion_add(cm, gold[i], labels[argmax_first(ll, 3)]));
    }
    double acc;
    lf_prf macro;
    LF_ASSERT_OK(lf_confusion_accuracy(cm, &acc));
    LF_ASSERT_OK(lf_confusion_average(cm, LF_AVERAGE_MACRO, NULL, &macro));
    lf_eval_results *r = run_file("cls.jsonl", buf, 2);
    assert_true(fabs(metric(r, "cls/accuracy") - acc) < 1e-15);
    assert_true(fabs(metric(r, "cls/macro_f1") - macro.f1) < 1e-15);
    assert_true(fabs(metric(r, "cls/macro_precision") - macro.precision) < 1e-15);
    assert_true(fabs(metric(r, "cls/macro_recall") - macro.recall) < 1e-15);
    /* the confusion matrix in the JSON equals the library's */
    char *js;
    LF_ASSERT_OK(lf_eval_results_json(r, &js));
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "tasks"), "cls");
    const cJSON *conf = cJSON_GetObjectItem(t, "confusion"), *lab = cJSON_GetObjectItem(t, "labels");
    assert_int_equal(cJSON_GetArraySize(lab), (int)lf_confusion_num_labels(cm));
    long total = 0;
    for (size_t i = 0; i < lf_confusion_num_labels(cm); i++) {
        assert_string_equal(cJSON_GetArrayItem(lab, (int)i)->valuestring, lf_confusion_label(cm, i));
        for (size_t j = 0; j < lf_confusion_num_labels(cm); j++) {
            double v = cJSON_GetArrayItem(cJSON_GetArrayItem(conf, (int)i), (int)j)->valuedouble;
            assert_true(v == (double)lf_confusion_count(cm, i, j));
            total += (long)v;
        }
    }
    assert_int_equal(total, 6);
    char *table;
    LF_ASSERT_OK(lf_eval_results_table(r, &table));
    assert_non_null(strstr(table, "confusion matrix"));
    assert_non_null(strstr(table, "macro_f1"));
    print_message("classification: accuracy %.4f, macro-F1 %.4f\n%s", acc, macro.f1, table);
    lf_free(table);
    cJSON_Delete(root);
    lf_free(js);
    lf_eval_results_free(r);
    lf_confusion_free(cm);
}

/* ---------------------------------------------------------------- ranking */
static void test_ranking(void **state) {
    (void)state;
    const char *q[] = {"the quick brown", "is it a", "Q: where? A:", "12+34="};
    const char *cand[][5] = {{"fox", "dog", "cat", "yes", "no"},
                             {"cat?", "dog", "fox", NULL, NULL},
                             {"here.", "there", "no", "yes", "caf\xc3\xa9"},
                             {"46", "30", "12", "5", NULL}};
    int gold[] = {2, 0, 4, 1};
    char buf[4096];
    size_t k = (size_t)sprintf(buf, "{\"task\":\"ranking\",\"hits\":[1,2,3]}\n");
    double h1 = 0, h2 = 0, h3 = 0, mrr = 0, mr = 0;
    for (int i = 0; i < 4; i++) {
        k += (size_t)sprintf(buf + k, "{\"query\":\"%s\",\"candidates\":[", q[i]);
        double ll[5];
        int n = 0;
        for (; n < 5 && cand[i][n]; n++) {
            k += (size_t)sprintf(buf + k, "%s\"%s\"", n ? "," : "", cand[i][n]);
            char cont[64];
            snprintf(cont, sizeof cont, " %s", cand[i][n]);
            ll[n] = ref_ll(q[i], cont, NULL);
        }
        k += (size_t)sprintf(buf + k, "],\"gold\":%d}\n", gold[i]);
        int rank = 1; /* pessimistic: every other candidate scoring >= the gold's */
        for (int j = 0; j < n; j++) {
            if (j != gold[i] && fabs(ll[j] - ll[gold[i]]) < 1e-4) fail_msg("ranking: near tie, pick other data");
            if (j != gold[i] && ll[j] >= ll[gold[i]]) rank++;
        }
        h1 += rank <= 1;
        h2 += rank <= 2;
        h3 += rank <= 3;
        mrr += 1.0 / rank;
        mr += rank;
    }
    lf_eval_results *r = run_file("rank.jsonl", buf, 3);
    assert_true(metric(r, "rank/hits@1") == h1 / 4);
    assert_true(metric(r, "rank/hits@2") == h2 / 4);
    assert_true(metric(r, "rank/hits@3") == h3 / 4);
    assert_true(fabs(metric(r, "rank/mrr") - mrr / 4) < 1e-15);
    assert_true(fabs(metric(r, "rank/mean_rank") - mr / 4) < 1e-15);
    print_message("ranking: hits@1 %.2f hits@3 %.2f mrr %.4f\n", h1 / 4, h3 / 4, mrr / 4);
    lf_eval_results_free(r);

    /* ties are pessimistic: a duplicate of the gold ranks above it (batch 1:
     * identical sequences, identical forwards, equal scores) */
    r = run_file("tie.jsonl",
                 "{\"task\":\"ranking\",\"query\":\"is it a\",\"candidates\":[\"cat?\",\"cat?\"],\"gold\":0}\n", 1);
    assert_true(metric(r, "tie/hits@1") == 0.0);
    assert_true(metric(r, "tie/mrr") == 0.5);
    lf_eval_results_free(r);
    /* the filtered setting removes the duplicate */
    r = run_file("filt.jsonl",
                 "{\"task\":\"ranking\",\"query\":\"is it a\",\"candidates\":[\"cat?\",\"cat?\"],\"gold\":0,"
                 "\"filtered\":[1]}\n",
                 1);
    assert_true(metric(r, "filt/hits@1") == 1.0);
    lf_eval_results_free(r);
}

/* ---------------------------------------------------------------- generation and exact match */
static void test_generation_and_exact_match(void **state) {
    (void)state;
    const char *prompts[] = {"the quick brown", "Q: where? A:", "12+34=", "is it a cat? yes! no, it's a dog: 12+34="};
    enum { NP = 4, NEW = 12 };
    char *full[NP], *pred[NP];
    char stop[NP][8];
    for (int i = 0; i < NP; i++) {
        full[i] = ref_greedy(prompts[i], NEW);
        if (strlen(full[i]) < 4) fail_msg("greedy output '%s' is too short for this test: pick other prompts", full[i]);
        /* the stop string: the 4th generated character; the prediction ends before its first occurrence */
        const char *c4 = full[i];
        for (int ch = 0; ch < 3; ch++) /* to the 4th character (UTF-8) */
            do c4++;
            while ((*c4 & 0xC0) == 0x80);
        int cl = 1;
        while ((c4[cl] & 0xC0) == 0x80) cl++;
        snprintf(stop[i], sizeof stop[i], "%.*s", cl, c4);
        char *at = strstr(full[i], stop[i]);
        pred[i] = strndup(full[i], (size_t)(at - full[i]));
        print_message("greedy after \"%s\": \"%s\", stop \"%s\" -> \"%s\"\n", prompts[i], jesc(full[i]),
                      jesc(stop[i]), jesc(pred[i]));
    }
    /* exact_match with a stop string: the prediction is cut before it */
    char buf[8192];
    size_t k;
    double em = 0, f1 = 0;
    k = (size_t)sprintf(buf, "{\"task\":\"exact_match\",\"name\":\"em\",\"max_new_tokens\":%d,\"stop\":[\"%s\"]}\n", NEW,
                        jesc(stop[0]));
    k += (size_t)sprintf(buf + k, "{\"prompt\":\"%s\",\"answer\":\"%s\"}\n", prompts[0], jesc(pred[0]));
    const char *ans0 = pred[0];
    LF_ASSERT_OK(lf_squad_score(pred[0], &ans0, 1, &em, &f1));
    lf_eval_results *r = run_file("em.jsonl", buf, 0);
    assert_true(metric(r, "em/exact_match") == em);
    assert_true(fabs(metric(r, "em/f1") - f1) < 1e-12);
    lf_eval_results_free(r);

    /* no stop strings ("stop": []): max_new_tokens characters (or up to the
     * end-of-text); a wrong answer scores 0 */
    k = (size_t)sprintf(buf, "{\"task\":\"exact_match\",\"name\":\"em2\",\"max_new_tokens\":%d,\"stop\":[]}\n", NEW);
    em = f1 = 0;
    for (int i = 0; i < NP; i++) {
        const char *a = i % 2 == 0 ? full[i] : "zzz qqq";
        k += (size_t)sprintf(buf + k, "{\"prompt\":\"%s\",\"answers\":[\"%s\"]}\n", prompts[i], jesc(a));
        double e, f;
        LF_ASSERT_OK(lf_squad_score(full[i], &a, 1, &e, &f));
        em += e;
        f1 += f;
    }
    r = run_file("em2.jsonl", buf, 0);
    assert_true(fabs(metric(r, "em2/exact_match") - em / NP) < 1e-15);
    assert_true(fabs(metric(r, "em2/f1") - f1 / NP) < 1e-12);
    lf_eval_results_free(r);

    /* generation: one task file per example so each has its own stop string;
     * the metrics equal the library's on the expected predictions */
    for (int i = 0; i < NP; i++) {
        const char *refs_text = "the quick brown fox jumps";
        k = (size_t)sprintf(buf,
                            "{\"task\":\"generation\",\"name\":\"gen\",\"max_new_tokens\":%d,\"stop\":[\"%s\"]}\n"
                            "{\"prompt\":\"%s\",\"references\":[\"%s\",\"%s\"]}\n",
                            NEW, jesc(stop[i]), prompts[i], refs_text, jesc(pred[i]));
        r = run_file("gen.jsonl", buf, 0);
        const char *refs[2] = {refs_text, pred[i]};
        lf_bleu_config bc = lf_bleu_config_default();
        lf_bleu_score bs;
        const char *hyps[1] = {pred[i]};
        const char *r0[1] = {refs[0]}, *r1[1] = {refs[1]};
        const char *const *streams[2] = {r0, r1};
        LF_ASSERT_OK(lf_bleu_corpus_score(&bc, hyps, 1, streams, 2, &bs));
        lf_rouge_config rc = lf_rouge_config_default();
        lf_rouge_score rs;
        LF_ASSERT_OK(lf_rouge_score_text(&rc, refs, 2, pred[i], &rs));
        assert_true(fabs(metric(r, "gen/bleu") - bs.score) < 1e-12);
        assert_true(fabs(metric(r, "gen/rouge1") - rs.type[LF_ROUGE_1].fmeasure) < 1e-12);
        assert_true(fabs(metric(r, "gen/rouge2") - rs.type[LF_ROUGE_2].fmeasure) < 1e-12);
        assert_true(fabs(metric(r, "gen/rougeL") - rs.type[LF_ROUGE_L].fmeasure) < 1e-12);
        assert_true(fabs(metric(r, "gen/rougeLsum") - rs.type[LF_ROUGE_LSUM].fmeasure) < 1e-12);
        lf_eval_results_free(r);
    }
    /* per-example predictions in the JSON with samples on */
    k = (size_t)sprintf(buf, "{\"task\":\"exact_match\",\"name\":\"s\",\"max_new_tokens\":%d,\"stop\":[\"%s\"]}\n"
                             "{\"prompt\":\"%s\",\"answer\":\"x\"}\n",
                        NEW, jesc(stop[1]), prompts[1]);
    write_file(path_in("s.jsonl"), buf);
    const char *paths[] = {path_in("s.jsonl")};
    lf_eval_tasks *ts;
    LF_ASSERT_OK(lf_eval_tasks_load(&ts, paths, 1, NULL));
    LF_ASSERT_OK(lf_eval_results_create(&r));
    lf_eval_run_opts ro = lf_eval_run_opts_default();
    ro.samples = 1;
    LF_ASSERT_OK(lf_eval_tasks_run(ts, g_m, g_tok, &ro, r));
    char *js;
    LF_ASSERT_OK(lf_eval_results_json(r, &js));
    cJSON *root = cJSON_Parse(js);
    const cJSON *smp = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "tasks"), "s"), "samples");
    assert_int_equal(cJSON_GetArraySize(smp), 1);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(smp, 0), "prediction")->valuestring, pred[1]);
    assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetArrayItem(smp, 0), "line")->valuedouble, 2);
    cJSON_Delete(root);
    lf_free(js);
    lf_eval_results_free(r);
    lf_eval_tasks_free(ts);
    for (int i = 0; i < NP; i++) {
        free(full[i]);
        free(pred[i]);
    }
}

/* ---------------------------------------------------------------- perplexity */
/* NLL of tokens tok[0..M) under windows of BLOCK+1 tokens every S tokens,
 * each target scored once (the definition in eval.h), by one B = 1 forward
 * per window. */
static double ref_ppl_nll(const int32_t *tok, size_t M, size_t S, long *n_scored) {
    double nll = 0;
    size_t prev_end = 1;
    *n_scored = 0;
    for (size_t begin = 0;; begin += S) {
        size_t end = begin + BLOCK + 1 < M ? begin + BLOCK + 1 : M;
        size_t first = prev_end > begin + 1 ? prev_end : begin + 1;
        if (end > first) {
            nll -= ref_seq_ll(tok + begin, (int)(end - begin), (int)(end - first));
            *n_scored += (long)(end - first);
        }
        prev_end = end;
        if (end == M) break;
    }
    return nll;
}

static void test_perplexity_text(void **state) {
    (void)state;
    const char *text = "the quick brown fox jumps over the lazy dog. is it a cat? yes! no, it's a dog: 12+34=46\n"
                       "Q: where? A: here. caf\xc3\xa9 \xc3\xbc";
    size_t nt;
    int32_t *t0 = encode(text, &nt);
    size_t M = nt + 1; /* the text is prefixed with the end-of-text, "\n" */
    int32_t *tok = malloc(sizeof(int32_t) * M);
    tok[0] = g_nl;
    memcpy(tok + 1, t0, nt * sizeof(int32_t));
    free(t0);
    long stride[] = {0, 5, 16, 1};
    for (int s = 0; s < 4; s++) {
        long S = stride[s] ? stride[s] : BLOCK, n;
        double nll = ref_ppl_nll(tok, M, (size_t)S, &n);
        assert_int_equal(n, (long)nt); /* every character is scored */
        char esc[1200];
        if (stride[s])
            snprintf(esc, sizeof esc, "{\"task\":\"perplexity\",\"stride\":%ld}\n{\"text\":\"%s\"}\n", S, jesc(text));
        else snprintf(esc, sizeof esc, "{\"task\":\"perplexity\",\"text\":\"%s\"}\n", jesc(text));
        lf_eval_results *r = run_file("ppl.jsonl", esc, s == 3 ? 1 : 0);
        double want = exp(nll / (double)n), got = metric(r, "ppl/perplexity");
        if (fabs(got - want) > 1e-5 * want) fail_msg("stride %ld: perplexity %.10g, separate path %.10g", S, got, want);
        assert_true(fabs(metric(r, "ppl/nll") - nll / (double)n) < 1e-6);
        /* bits per byte: the scored characters' bytes, here the whole text's */
        double bpb = nll / (M_LN2 * (double)strlen(text));
        assert_true(fabs(metric(r, "ppl/bits_per_byte") - bpb) < 1e-6);
        char *js;
        LF_ASSERT_OK(lf_eval_results_json(r, &js));
        cJSON *root = cJSON_Parse(js);
        const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "tasks"), "ppl");
        assert_int_equal((long)cJSON_GetObjectItem(t, "tokens")->valuedouble, n);
        assert_int_equal((long)cJSON_GetObjectItem(t, "bytes")->valuedouble, (long)strlen(text));
        assert_int_equal((long)cJSON_GetObjectItem(t, "stride")->valuedouble, S);
        cJSON_Delete(root);
        lf_free(js);
        lf_eval_results_free(r);
    }
    free(tok);
}

static void test_perplexity_dataset_and_text_file(void **state) {
    (void)state;
    /* the val split of the prepared dataset, scored as one stream (no prefix) */
    lf_shard *sh;
    LF_ASSERT_OK(lf_shard_open(&sh, path_in("data/val.bin"), 1));
    size_t M = lf_shard_num_tokens(sh);
    int32_t *tok = malloc(sizeof(int32_t) * M);
    for (size_t i = 0; i < M; i++) tok[i] = (int32_t)lf_shard_token(sh, i);
    lf_shard_close(sh);
    long n;
    double nll = ref_ppl_nll(tok, M, 8, &n);
    assert_int_equal(n, (long)M - 1);
    lf_eval_results *r = run_file("ds.jsonl", "{\"task\":\"perplexity\",\"dataset\":\"data\",\"stride\":8}\n", 0);
    double want = exp(nll / (double)n);
    assert_true(fabs(metric(r, "ds/perplexity") - want) < 1e-5 * want);
    lf_eval_results_free(r);
    /* --kind perplexity on a dataset directory and on a plain text file, with a window limit */
    const char *paths[] = {path_in("data"), path_in("corpus.txt")};
    lf_eval_load_opts lo = lf_eval_load_opts_default();
    lo.kind = LF_EVAL_PERPLEXITY;
    lo.limit = 3;
    lf_eval_tasks *ts;
    LF_ASSERT_OK(lf_eval_tasks_load(&ts, paths, 2, &lo));
    assert_string_equal(lf_eval_task_name(ts, 0), "data");
    assert_string_equal(lf_eval_task_name(ts, 1), "corpus");
    LF_ASSERT_OK(lf_eval_results_create(&r));
    LF_ASSERT_OK(lf_eval_tasks_run(ts, g_m, g_tok, NULL, r));
    double nll3 = ref_ppl_nll(tok, 3 * BLOCK + 1, BLOCK, &n); /* 3 windows of BLOCK from the start */
    assert_int_equal(n, 3 * BLOCK);
    assert_true(fabs(metric(r, "data/nll") - nll3 / (double)n) < 1e-6);
    size_t nc;
    char *corpus;
    size_t clen;
    LF_ASSERT_OK(lf_file_read_all(path_in("corpus.txt"), 0, &corpus, &clen));
    corpus[3 * BLOCK] = 0; /* ASCII at the start; with the "\n" prefix 3 * BLOCK + 1 tokens */
    int32_t *c0 = encode(corpus, &nc);
    int32_t *ct = malloc(sizeof(int32_t) * (nc + 1));
    ct[0] = g_nl;
    memcpy(ct + 1, c0, nc * sizeof(int32_t));
    free(c0);
    double nllc = ref_ppl_nll(ct, nc + 1, BLOCK, &n);
    assert_int_equal(n, 3 * BLOCK);
    assert_true(fabs(metric(r, "corpus/nll") - nllc / (double)n) < 1e-6);
    size_t nm;
    const lf_eval_metric *ms = lf_eval_results_metrics(r, &nm);
    assert_int_equal(nm, 6);
    assert_string_equal(ms[0].name, "data/nll");
    assert_int_equal(ms[0].higher_is_better, 0);
    /* a second run into the same results replaces them */
    LF_ASSERT_OK(lf_eval_tasks_run(ts, g_m, g_tok, NULL, r));
    lf_eval_results_metrics(r, &nm);
    assert_int_equal(nm, 6);
    lf_free(corpus);
    free(ct);
    lf_eval_results_free(r);
    lf_eval_tasks_free(ts);
    free(tok);
}

/* ---------------------------------------------------------------- bad input */
typedef struct bad_case {
    const char *name, *content, *needle;
    lf_status st;
    int nonl; /* run with the tokenizer that has no end-of-text */
} bad_case;

static void test_bad_input_names_file_and_line(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {"b1.jsonl", "{\"task\":\"multiple_choice\",\"context\":\"a\",\"gold\":0}\n", "b1.jsonl:1: field 'choices' is missing",
         LF_ERR_FORMAT, 0},
        {"b2.jsonl", "{\"task\":\"frobnicate\",\"text\":\"a\"}\n", "b2.jsonl:1: unknown task kind 'frobnicate'", LF_ERR_FORMAT, 0},
        {"b3.jsonl", "", "b3.jsonl: no examples (the file is empty)", LF_ERR_FORMAT, 0},
        {"b3b.jsonl", "\n  \n", "b3b.jsonl: no examples", LF_ERR_FORMAT, 0},
        {"b4.jsonl",
         "{\"task\":\"multiple_choice\"}\n{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"gold\":1}\n"
         "{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"gold\":4}\n",
         "b4.jsonl:3: gold 4 is out of range (2 choices)", LF_ERR_FORMAT, 0},
        {"b5.jsonl", "{\"task\":\"ranking\",\"query\":\"a\",\"candidates\":[\"b\"],\"gold\":-1}\n",
         "b5.jsonl:1: gold -1 is out of range (1 candidates)", LF_ERR_FORMAT, 0},
        {"b6.jsonl", "{\"task\":\"generation\",\"prompt\":\"a\",\"references\":[\"b\"]}\n{\"prompt\": \"a\",,}\n",
         "b6.jsonl:2: invalid JSON", LF_ERR_FORMAT, 0},
        {"b7.jsonl", "{\"context\":\"a\",\"choices\":[\"b\"],\"gold\":0}\n", "b7.jsonl:1: no task kind", LF_ERR_FORMAT, 0},
        {"b8.jsonl", "{\"task\":\"multiple_choice\",\"stride\":4}\n", "b8.jsonl:1: unknown header key 'stride'",
         LF_ERR_FORMAT, 0},
        {"b9.jsonl", "{\"task\":\"classification\",\"labels\":[\"x\",\"y\"]}\n{\"text\":\"a\",\"label\":\"z\"}\n",
         "b9.jsonl:2: label 'z' is not in the label set ('x', 'y')", LF_ERR_FORMAT, 0},
        {"b10.jsonl", "{\"task\":\"exact_match\",\"max_new_tokens\":4}\n", "b10.jsonl: no examples after the header line",
         LF_ERR_FORMAT, 0},
        {"b11.jsonl", "{\"task\":\"perplexity\",\"text\":\"ok\"}\n{\"text\":\"bad \xff\"}\n",
         "b11.jsonl:2: text: invalid UTF-8", LF_ERR_FORMAT, 0},
        {"b12.jsonl",
         "{\"task\":\"multiple_choice\",\"context\":\"a\",\"choices\":[\"b\"],\"gold\":0}\n"
         "{\"task\":\"ranking\",\"query\":\"a\",\"candidates\":[\"b\"],\"gold\":0}\n",
         "b12.jsonl:2: task 'ranking' differs from the file's 'multiple_choice'", LF_ERR_FORMAT, 0},
        {"b13.jsonl", "{\"task\":\"classification\",\"text\":\"a\",\"label\":\"x\"}\n", "b13.jsonl:1: no label set",
         LF_ERR_FORMAT, 0},
        {"b14.jsonl", "{\"task\":\"exact_match\",\"prompt\":\"a\"}\n",
         "b14.jsonl:1: field 'answer' (or 'answers', 'response') is missing", LF_ERR_FORMAT, 0},
        {"b15.jsonl", "[1,2]\n", "b15.jsonl:1: expected a JSON object", LF_ERR_FORMAT, 0},
        {"b16.jsonl", "{\"task\":\"multiple_choice\",\"context\":\"a\",\"choices\":[\"b\",\"\"],\"gold\":0}\n",
         "b16.jsonl:1: field 'choices': entry 1 is empty", LF_ERR_FORMAT, 0},
        {"b17.jsonl", "{\"task\":\"multiple_choice\",\"context\":\"a\",\"choices\":[\"b\"],\"gold\":0.5}\n",
         "b17.jsonl:1: field 'gold' must be an integer index", LF_ERR_FORMAT, 0},
        {"b19.jsonl", "{\"task\":\"generation\",\"prompt\":\"a\",\"references\":\"b\",\"max_new_tokens\":3}\n",
         "b19.jsonl:1: 'max_new_tokens' is a header key", LF_ERR_FORMAT, 0},
        {"b18.jsonl", "{\"task\":\"perplexity\",\"text_file\":\"missing.txt\"}\n", "missing.txt", LF_ERR_NOT_FOUND, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(path_in(cases[i].name), cases[i].content);
        const char *paths[] = {path_in(cases[i].name)};
        lf_eval_tasks *ts = (lf_eval_tasks *)1;
        lf_status st = lf_eval_tasks_load(&ts, paths, 1, NULL);
        if (st != cases[i].st)
            fail_msg("%s: status %s, want %s (%s)", cases[i].name, lf_status_str(st), lf_status_str(cases[i].st),
                     lf_last_error());
        assert_null(ts);
        LF_ASSERT_ERR_CONTAINS(cases[i].needle);
    }
    /* a file that does not exist */
    const char *none[] = {path_in("nope.jsonl")};
    lf_eval_tasks *ts;
    assert_int_equal(lf_eval_tasks_load(&ts, none, 1, NULL), LF_ERR_NOT_FOUND);
    /* two files with one name */
    write_file(path_in("d1.jsonl"), "{\"task\":\"perplexity\",\"name\":\"same\"}\n{\"text\":\"ab\"}\n");
    write_file(path_in("d2.jsonl"), "{\"task\":\"perplexity\",\"name\":\"same\"}\n{\"text\":\"ab\"}\n");
    const char *two[] = {path_in("d1.jsonl"), path_in("d2.jsonl")};
    assert_int_equal(lf_eval_tasks_load(&ts, two, 2, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("task name 'same'");

    /* errors found while running name file:line too */
    static const bad_case run_cases[] = {
        {"r1.jsonl",
         "{\"task\":\"multiple_choice\"}\n{\"context\":\"the\",\"choices\":[\"fox\"],\"gold\":0}\n"
         "{\"context\":\"the ~\",\"choices\":[\"fox\"],\"gold\":0}\n",
         "r1.jsonl:3: context", LF_ERR_NOT_FOUND, 0},
        {"r2.jsonl", "{\"task\":\"ranking\",\"query\":\" \",\"candidates\":[\"fox\"],\"gold\":0}\n",
         "r2.jsonl:1: the context is empty", LF_ERR_FORMAT, 1},
        {"r3.jsonl", "{\"task\":\"exact_match\",\"prompt\":\"\",\"answer\":\"x\"}\n", "r3.jsonl:1: the prompt is empty",
         LF_ERR_FORMAT, 1},
        {"r4.jsonl", "{\"task\":\"perplexity\",\"stride\":17}\n{\"text\":\"the fox\"}\n", "stride 17 is more than",
         LF_ERR_RANGE, 0},
        {"r5.jsonl",
         "{\"task\":\"multiple_choice\",\"context\":\"a\",\"choices\":[\"the quick brown fox jumps\"],\"gold\":0}\n",
         "r5.jsonl:1: the continuation is 26 tokens, more than the model's block_size 16", LF_ERR_RANGE, 0},
    };
    for (size_t i = 0; i < sizeof run_cases / sizeof run_cases[0]; i++) {
        write_file(path_in(run_cases[i].name), run_cases[i].content);
        const char *paths[] = {path_in(run_cases[i].name)};
        LF_ASSERT_OK(lf_eval_tasks_load(&ts, paths, 1, NULL));
        lf_eval_results *r;
        LF_ASSERT_OK(lf_eval_results_create(&r));
        lf_status st = lf_eval_tasks_run(ts, g_m, run_cases[i].nonl ? g_tok_nonl : g_tok, NULL, r);
        if (st != run_cases[i].st)
            fail_msg("%s: status %s, want %s (%s)", run_cases[i].name, lf_status_str(st),
                     lf_status_str(run_cases[i].st), lf_last_error());
        LF_ASSERT_ERR_CONTAINS(run_cases[i].needle);
        size_t nm;
        lf_eval_results_metrics(r, &nm);
        assert_int_equal(nm, 0); /* the failed task left nothing behind */
        lf_eval_results_free(r);
        lf_eval_tasks_free(ts);
    }
}

/* ---------------------------------------------------------------- JSON, kinds, enumeration */
static void test_json_and_enumeration(void **state) {
    (void)state;
    write_file(path_in("j1.jsonl"),
               "{\"task\":\"multiple_choice\",\"context\":\"the\",\"choices\":[\"fox\",\"dog\"],\"gold\":0}\n");
    write_file(path_in("j2.jsonl"), "{\"text\":\"the quick fox\"}\n");
    /* prompt/response pairs (a fine-tuning set) as an exact_match task */
    write_file(path_in("j3.jsonl"), "{\"prompt\":\"12+34=\",\"response\":\"46\"}\n");
    const char *paths[] = {path_in("j1.jsonl"), path_in("j2.jsonl"), path_in("j3.jsonl")};
    lf_eval_load_opts lo = lf_eval_load_opts_default();
    lo.kind = LF_EVAL_PERPLEXITY; /* j2 names no kind; j1's own kind wins */
    lf_eval_kind kinds[] = {LF_EVAL_RANKING, LF_EVAL_KIND_UNSET, LF_EVAL_EXACT_MATCH};
    lo.kinds = kinds;
    lf_eval_tasks *ts;
    LF_ASSERT_OK(lf_eval_tasks_load(&ts, paths, 3, &lo));
    assert_int_equal(lf_eval_tasks_count(ts), 3);
    assert_int_equal(lf_eval_task_kind(ts, 0), LF_EVAL_MULTIPLE_CHOICE);
    assert_int_equal(lf_eval_task_kind(ts, 1), LF_EVAL_PERPLEXITY);
    assert_int_equal(lf_eval_task_kind(ts, 2), LF_EVAL_EXACT_MATCH);
    assert_int_equal((int)lf_eval_task_size(ts, 0), 1);
    lf_eval_results *r;
    LF_ASSERT_OK(lf_eval_results_create(&r));
    LF_ASSERT_OK(lf_eval_tasks_run(ts, g_m, g_tok, NULL, r));
    size_t n;
    const lf_eval_metric *m = lf_eval_results_metrics(r, &n);
    const char *want[] = {"j1/acc",           "j1/acc_norm",    "j2/nll", "j2/perplexity",
                          "j2/bits_per_byte", "j3/exact_match", "j3/f1"};
    assert_int_equal(n, 7);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(m[i].name, want[i]);
        assert_int_equal(m[i].higher_is_better, i < 2 || i > 4);
    }
    char *js;
    LF_ASSERT_OK(lf_eval_results_json(r, &js));
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    const cJSON *t1 = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "tasks"), "j1");
    assert_string_equal(cJSON_GetObjectItem(t1, "kind")->valuestring, "multiple_choice");
    assert_int_equal((int)cJSON_GetObjectItem(t1, "examples")->valuedouble, 1);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(t1, "metrics"), "acc_norm"));
    assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "metrics"), "j2/perplexity")->valuedouble == m[3].value);
    double v;
    assert_int_equal(lf_eval_results_get(r, "j1/nope", &v), LF_ERR_NOT_FOUND);
    cJSON_Delete(root);
    lf_free(js);
    lf_eval_results_free(r);
    lf_eval_tasks_free(ts);
    lf_eval_tasks_free(NULL);
    lf_eval_results_free(NULL);
    lf_eval_kind k;
    assert_int_equal(lf_eval_kind_parse("ranking", &k), LF_OK);
    assert_int_equal(k, LF_EVAL_RANKING);
    assert_int_equal(lf_eval_kind_parse("essay", &k), LF_ERR_INVALID_ARG);
    assert_string_equal(lf_eval_kind_name(LF_EVAL_EXACT_MATCH), "exact_match");
}

/* Every metric in lf_eval_results_json reads back as the same double: values
 * that need 16 or 17 significant digits, both sides of the 1e6 and 1e-4
 * boundaries of the table's format, subnormals, and the extremes. (cJSON 1.7
 * prints 15 digits whenever they read back within about an ulp, which 0.1+0.2
 * and 1/3 do.) */
static void test_json_numbers_read_back(void **state) {
    (void)state;
    write_file(path_in("n1.jsonl"), "{\"text\":\"the quick fox\"}\n");
    const char *paths[] = {path_in("n1.jsonl")};
    lf_eval_load_opts lo = lf_eval_load_opts_default();
    lo.kind = LF_EVAL_PERPLEXITY;
    lf_eval_tasks *ts;
    LF_ASSERT_OK(lf_eval_tasks_load(&ts, paths, 1, &lo));
    lf_eval_results *r;
    LF_ASSERT_OK(lf_eval_results_create(&r));
    LF_ASSERT_OK(lf_eval_tasks_run(ts, g_m, g_tok, NULL, r));
    size_t n;
    const lf_eval_metric *m = lf_eval_results_metrics(r, &n);
    assert_int_equal(n, 3); /* nll, perplexity, bits_per_byte */
    const double vals[] = {1.0 / 3,
                           0.1 + 0.2,
                           2.0 / 3 * 1e-5,
                           1e-300,
                           4.9406564584124654e-324,
                           2.2250738585072009e-308,
                           1.7976931348623157e308,
                           nextafter(1e6, 0),
                           1e6,
                           nextafter(1e6, 2e6),
                           nextafter(1e-4, 0),
                           1e-4,
                           nextafter(1e-4, 1),
                           1e23,
                           271828.18284590452,
                           (double)0.1f,
                           -123.45678901234567,
                           m[0].value,
                           m[1].value,
                           m[2].value};
    const size_t nv = sizeof vals / sizeof vals[0];
    /* the results hold the metrics in memory the caller may not change; the
     * test sets them directly, three values per round */
    lf_eval_metric *mm = (lf_eval_metric *)m;
    for (size_t i = 0; i < nv; i += 3) {
        for (size_t k = 0; k < 3; k++) mm[k].value = vals[(i + k) % nv];
        char *js;
        LF_ASSERT_OK(lf_eval_results_json(r, &js));
        cJSON *root = cJSON_Parse(js);
        assert_non_null(root);
        const cJSON *all = cJSON_GetObjectItem(root, "metrics");
        const cJSON *task = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "tasks"), "n1");
        const cJSON *own = cJSON_GetObjectItem(task, "metrics");
        for (size_t k = 0; k < 3; k++) {
            const cJSON *a = cJSON_GetObjectItem(all, m[k].name);
            const cJSON *b = cJSON_GetObjectItem(own, m[k].name + 3); /* after "n1/" */
            if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble != m[k].value ||
                b->valuedouble != m[k].value)
                fail_msg("%s = %.17g reads back as %.17g / %.17g from %s", m[k].name, m[k].value,
                         a ? a->valuedouble : NAN, b ? b->valuedouble : NAN, js);
        }
        cJSON_Delete(root);
        lf_free(js);
    }
    lf_eval_results_free(r);
    lf_eval_tasks_free(ts);
}

/* eval.tasks text as the trainer and the sweep split it */
static void test_tasks_split(void **state) {
    (void)state;
    char text[] = "a.jsonl\nsums.jsonl#exact_match\ndir/b#c.jsonl#perplexity";
    const char *paths[4];
    lf_eval_kind kinds[4];
    int n = -1;
    const char *bad = NULL;
    LF_ASSERT_OK(lf_eval_tasks_split(text, 4, paths, kinds, &n, &bad));
    assert_int_equal(n, 3);
    assert_string_equal(paths[0], "a.jsonl");
    assert_int_equal(kinds[0], LF_EVAL_KIND_UNSET);
    assert_string_equal(paths[1], "sums.jsonl");
    assert_int_equal(kinds[1], LF_EVAL_EXACT_MATCH);
    assert_string_equal(paths[2], "dir/b#c.jsonl"); /* the last '#' names the kind */
    assert_int_equal(kinds[2], LF_EVAL_PERPLEXITY);
    char two[] = "x.jsonl\ny.jsonl\nz.jsonl";
    LF_ASSERT_OK(lf_eval_tasks_split(two, 2, paths, kinds, &n, NULL)); /* at most cap */
    assert_int_equal(n, 2);
    assert_string_equal(paths[1], "y.jsonl");
    char trailing[] = "x.jsonl\n";
    LF_ASSERT_OK(lf_eval_tasks_split(trailing, 4, paths, kinds, &n, NULL));
    assert_int_equal(n, 1);
    char wrong[] = "x.jsonl\ny.jsonl#nonsense\nz.jsonl";
    assert_int_equal(lf_eval_tasks_split(wrong, 4, paths, kinds, &n, &bad), LF_ERR_INVALID_ARG);
    assert_int_equal(n, 1);
    assert_string_equal(paths[n], "y.jsonl");
    assert_string_equal(bad, "nonsense");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tasks_split),
        cmocka_unit_test(test_multiple_choice_matches_separate_path),
        cmocka_unit_test(test_batching_does_not_change_lls),
        cmocka_unit_test(test_classification),
        cmocka_unit_test(test_ranking),
        cmocka_unit_test(test_generation_and_exact_match),
        cmocka_unit_test(test_perplexity_text),
        cmocka_unit_test(test_perplexity_dataset_and_text_file),
        cmocka_unit_test(test_bad_input_names_file_and_line),
        cmocka_unit_test(test_json_and_enumeration),
        cmocka_unit_test(test_json_numbers_read_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
