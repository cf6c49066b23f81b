/*
 * DPO against TRL 1.16 (tests/fixtures/dpo/dpo.json, written by
 * tools/reference/make_dpo_fixture.py, which calls TRL's own
 * DPOTrainer._compute_loss, loss_type "sigmoid"):
 *   - fixed sequence log-probs: lf_dpo_pair's loss (mean over pairs), its
 *     derivatives d loss / d logp (divided by the pairs, as TRL's mean) and
 *     the logged metrics rewards/chosen, rejected, accuracies, margins and
 *     logps/chosen, rejected, within 1e-12 relative (both in double; |z|
 *     up to 64 exercises the saturated sigmoid);
 *   - the tiny Llama of tests/fixtures/hf_direct (fp32, cpu backend), two
 *     pairs of 12-token rows with the reference log-probs the fixture gives:
 *     lf_dpo_forward_backward's loss, metrics and every parameter's
 *     gradient. Error model: the forward is fp32 in both, summed in other
 *     orders: each token's log-prob carries ~1e-6 relative error (log-softmax
 *     over 608 logits), a row's sum of ~9 of them ~1e-5 absolute at |logp|
 *     ~100, so the loss (beta 0.1 times a difference of such sums) is within
 *     1e-5 and the logps within 1e-4. Gradients: per tensor, the norm within
 *     1e-4 relative, the dot product with a fixed +-1 weight vector within
 *     1e-4 of sum |g w| (its condition), sampled elements within 1e-4 of the
 *     tensor's largest |g| (fp32 sums of 48 rows x up to 608 columns in
 *     another order: ~1e-6 relative to the largest term, a 100x margin).
 *   - lf_dpo_logps equals the per-row log-probs torch computed.
 *   - lf_prepare with LF_RECORD_DPO and lf_pairs: each triple as two rows
 *     with the mask on the responses, padding and truncation, refusals.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "test_util.h"
#include "llmforge/data.h"
#include "llmforge/hf.h"
#include "llmforge/model.h"
#include "llmforge/train.h"

#define FIXTURE LF_SOURCE_DIR "/tests/fixtures/dpo/dpo.json"

static cJSON *doc;

static int setup(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    if (lf_file_read_all(FIXTURE, 0, &text, &len) != LF_OK) return -1;
    doc = cJSON_ParseWithLength(text, len);
    lf_free(text);
    return doc ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(doc);
    return 0;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("fixture: '%s' is not a number", k);
    return v->valuedouble;
}
static double at(const cJSON *o, const char *k, int i) {
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, k), i);
    if (!cJSON_IsNumber(v)) fail_msg("fixture: '%s'[%d] is not a number", k, i);
    return v->valuedouble;
}

static void near(const char *what, double got, double want, double tol) {
    if (!(fabs(got - want) <= tol)) fail_msg("%s: %.17g, TRL %.17g (tolerance %.3g)", what, got, want, tol);
}

/* The metrics TRL logs, from the sums. */
static void check_metrics(const lf_dpo_stats *s, const cJSON *m, double rel, double abs_logp) {
    const double n = s->pairs;
    const double r = rel * (1 + fabs(num(m, "rewards/chosen")) + fabs(num(m, "rewards/rejected")));
    near("rewards/chosen", s->reward_chosen / n, num(m, "rewards/chosen"), r);
    near("rewards/rejected", s->reward_rejected / n, num(m, "rewards/rejected"), r);
    near("rewards/margins", s->margin / n, num(m, "rewards/margins"), 2 * r);
    near("rewards/accuracies", s->accuracy / n, num(m, "rewards/accuracies"), 0);
    near("logps/chosen", s->logp_chosen / n, num(m, "logps/chosen"), abs_logp + rel * fabs(num(m, "logps/chosen")));
    near("logps/rejected", s->logp_rejected / n, num(m, "logps/rejected"),
         abs_logp + rel * fabs(num(m, "logps/rejected")));
}

static void test_pair_formula(void **state) {
    (void)state;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "pairs"), *c;
    assert_true(cJSON_GetArraySize(cases) >= 3);
    cJSON_ArrayForEach(c, cases) {
        const double beta = num(c, "beta");
        const int P = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "policy_chosen"));
        lf_dpo_stats s = {0};
        for (int i = 0; i < P; i++) {
            lf_dpo_pair_result r;
            const double pc = at(c, "policy_chosen", i), pr = at(c, "policy_rejected", i);
            lf_dpo_pair(beta, pc, pr, at(c, "ref_chosen", i), at(c, "ref_rejected", i), &r);
            char what[64];
            snprintf(what, sizeof what, "beta %g pair %d: d loss / d logp(chosen)", beta, i);
            near(what, r.dlogp_chosen / P, at(c, "dlogp_chosen", i), 1e-12 * (beta + 1e-300));
            snprintf(what, sizeof what, "beta %g pair %d: d loss / d logp(rejected)", beta, i);
            near(what, r.dlogp_rejected / P, at(c, "dlogp_rejected", i), 1e-12 * beta);
            s.pairs += 1;
            s.loss += r.loss;
            s.reward_chosen += r.reward_chosen;
            s.reward_rejected += r.reward_rejected;
            s.accuracy += r.reward_chosen > r.reward_rejected;
            s.margin += r.reward_chosen - r.reward_rejected;
            s.logp_chosen += pc;
            s.logp_rejected += pr;
        }
        near("loss", s.loss / P, num(c, "loss"), 1e-12 * (1 + num(c, "loss")));
        check_metrics(&s, cJSON_GetObjectItemCaseSensitive(c, "metrics"), 1e-12, 0);
    }
    /* far into saturation nothing overflows: loss ~ -z, gradient ~ beta */
    lf_dpo_pair_result r;
    lf_dpo_pair(1.0, -2000, 0, 0, 0, &r);
    near("loss at z = -2000", r.loss, 2000, 1e-9);
    near("gradient at z = -2000", r.dlogp_chosen, -1, 0);
    lf_dpo_pair(1.0, 2000, 0, 0, 0, &r);
    near("loss at z = 2000", r.loss, 0, 1e-300);
    assert_true(isfinite(r.dlogp_chosen) && r.dlogp_chosen <= 0);
}

static lf_model *load_llama(const char *dir, int T) {
    lf_hf_model *hf = NULL;
    LF_ASSERT_OK(lf_hf_open(&hf, dir));
    lf_model_config cfg;
    LF_ASSERT_OK(lf_hf_model_config(hf, &cfg));
    cfg.block_size = T;
    lf_backend *be = lf_backend_get("cpu");
    assert_non_null(be);
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &cfg, be));
    int count;
    const lf_param_info *table = lf_model_params_table(m, &count);
    const size_t n = lf_model_num_params(m);
    float *host = lf_alloc(sizeof(float) * n);
    LF_ASSERT_OK(lf_hf_load_params(hf, table, count, lf_model_get_config(m)->tie_embeddings, host));
    LF_ASSERT_OK(lf_backend_to_device(be, lf_model_params(m), host, sizeof(float) * n));
    lf_model_params_changed(m);
    lf_free(host);
    lf_hf_close(hf);
    return m;
}

static void test_llama_against_trl(void **state) {
    (void)state;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(doc, "model");
    const int P = (int)num(e, "pairs"), T = (int)num(e, "block");
    const double beta = num(e, "beta");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", LF_SOURCE_DIR, cJSON_GetObjectItemCaseSensitive(e, "dir")->valuestring);
    lf_model *m = load_llama(dir, T);
    int32_t *in = malloc(sizeof(int32_t) * 2 * P * T), *tg = malloc(sizeof(int32_t) * 2 * P * T);
    double ref[64], lp[64];
    assert_true(2 * P <= 64);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(e, "rows");
    assert_int_equal(cJSON_GetArraySize(rows), 2 * P);
    for (int r = 0; r < 2 * P; r++) {
        const cJSON *row = cJSON_GetArrayItem(rows, r);
        for (int t = 0; t < T; t++) {
            in[r * T + t] = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(row, "inputs"), t)->valueint;
            tg[r * T + t] = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(row, "targets"), t)->valueint;
        }
        ref[r] = at(e, "ref", r);
    }
    /* the sequence log-probs */
    LF_ASSERT_OK(lf_dpo_logps(m, in, tg, P, T, lp));
    for (int r = 0; r < 2 * P; r++) near("row log-prob", lp[r], at(e, "policy", r), 1e-4);

    /* loss, metrics and gradients of the mean over pairs */
    lf_model_zero_grad(m);
    lf_forward_opts fo = {.dloss = 1.0f / (float)P, .train = 1, .seed = 1, .key = 0};
    lf_dpo_stats s = {0};
    LF_ASSERT_OK(lf_dpo_forward_backward(m, in, tg, P, T, ref, beta, &fo, &s));
    assert_true(s.pairs == P);
    near("loss", s.loss / P, num(e, "loss"), 1e-5);
    check_metrics(&s, cJSON_GetObjectItemCaseSensitive(e, "metrics"), 1e-5, 1e-4);
    printf("  loss %.9f (TRL %.9f)\n", s.loss / P, num(e, "loss"));

    const size_t n = lf_model_num_params(m);
    float *g = lf_alloc(sizeof(float) * n);
    LF_ASSERT_OK(lf_backend_to_host(lf_model_backend(m), g, lf_model_grads(m), sizeof(float) * n));
    int count;
    const lf_param_info *table = lf_model_params_table(m, &count);
    const cJSON *grads = cJSON_GetObjectItemCaseSensitive(e, "grads");
    assert_int_equal(cJSON_GetArraySize(grads), count);
    double worst = 0;
    for (int k = 0; k < count; k++) {
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(grads, table[k].name);
        if (!want) fail_msg("parameter '%s' has no gradient in the fixture", table[k].name);
        const float *gk = g + table[k].offset;
        const size_t nk = table[k].numel;
        assert_int_equal(nk, (size_t)num(want, "numel"));
        double norm = 0, wdot = 0;
        for (size_t j = 0; j < nk; j++) {
            norm += (double)gk[j] * gk[j];
            wdot += (double)gk[j] * ((double)((j * 7919) % 13) - 6) / 6.0;
        }
        norm = sqrt(norm);
        char what[200];
        snprintf(what, sizeof what, "%s: gradient norm", table[k].name);
        near(what, norm, num(want, "norm"), 1e-4 * num(want, "norm") + 1e-12);
        snprintf(what, sizeof what, "%s: weighted gradient sum", table[k].name);
        near(what, wdot, num(want, "wdot"), 1e-4 * num(want, "wabs") + 1e-12);
        const cJSON *el;
        cJSON_ArrayForEach(el, cJSON_GetObjectItemCaseSensitive(want, "elements")) {
            size_t j = (size_t)cJSON_GetArrayItem(el, 0)->valuedouble;
            double v = cJSON_GetArrayItem(el, 1)->valuedouble;
            assert_true(j < nk);
            snprintf(what, sizeof what, "%s[%zu]", table[k].name, j);
            near(what, gk[j], v, 1e-4 * num(want, "max_abs") + 1e-12);
            if (num(want, "max_abs") > 0) {
                double rel = fabs(gk[j] - v) / num(want, "max_abs");
                if (rel > worst) worst = rel;
            }
        }
    }
    printf("  %d gradients match; worst sampled element %.2e of its tensor's largest\n", count, worst);
    lf_free(g);
    free(in);
    free(tg);
    lf_model_free(m);
}

/* One id of a one-character text. */
static int32_t id_of(const lf_tokenizer *tok, const char *ch) {
    uint32_t *ids = NULL;
    size_t n = 0;
    LF_ASSERT_OK(lf_tokenizer_encode(tok, ch, strlen(ch), &ids, &n));
    assert_int_equal(n, 1);
    int32_t v = (int32_t)ids[0];
    lf_free(ids);
    return v;
}

/* prepare --mode dpo through the library, then lf_pairs: rows, masks,
 * padding and truncation, and the refusals of lf_pairs_open. */
static void test_prepare_and_pairs(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/p.jsonl", dir);
    snprintf(out, sizeof out, "%s/data", dir);
    const char *text = "{\"prompt\": \"ab\", \"chosen\": \"xyz\", \"rejected\": \"q\"}\n"
                       "{\"prompt\": \"b\", \"chosen\": \"y\", \"rejected\": \"zz\"}\n";
    LF_ASSERT_OK(lf_file_write_all(in, text, strlen(text)));
    lf_prepare_opts o = lf_prepare_opts_default();
    const char *inputs[] = {in};
    o.inputs = inputs;
    o.n_inputs = 1;
    o.tokenizer = "char";
    o.mode = LF_RECORD_DPO;
    o.split[0] = 1;
    o.split[1] = 0;
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    assert_int_equal(res.records[0], 2);
    assert_int_equal(res.target_tokens[0], (3 + 1) + (1 + 1) + (1 + 1) + (2 + 1));
    lf_dataset *ds = NULL;
    LF_ASSERT_OK(lf_dataset_open(&ds, out));
    assert_string_equal(lf_dataset_mode(ds), "dpo");
    lf_tokenizer *tok = NULL;
    LF_ASSERT_OK(lf_tokenizer_open(&tok, lf_dataset_tokenizer_spec(ds), NULL));
    const int32_t a = id_of(tok, "a"), b = id_of(tok, "b"), x = id_of(tok, "x"), y = id_of(tok, "y"),
                  z = id_of(tok, "z"), q = id_of(tok, "q"), eot = lf_dataset_eot(ds);
    lf_pairs *pp = NULL;
    LF_ASSERT_OK(lf_pairs_open(&pp, ds, LF_SPLIT_TRAIN));
    assert_int_equal(lf_pairs_count(pp), 2);
    /* which pair is which follows the input order */
    int32_t in8[16], tg8[16];
    LF_ASSERT_OK(lf_pairs_get(pp, 0, 8, in8, tg8));
    const int32_t want_in[16] = {a, b, x, y, z, eot, eot, eot, a, b, q, eot, eot, eot, eot, eot};
    const int32_t want_tg[16] = {-1, x, y, z, eot, -1, -1, -1, -1, q, eot, -1, -1, -1, -1, -1};
    for (int i = 0; i < 16; i++) {
        assert_int_equal(in8[i], want_in[i]);
        assert_int_equal(tg8[i], want_tg[i]);
    }
    int32_t in3[6], tg3[6]; /* cut to T + 1 = 4 tokens */
    LF_ASSERT_OK(lf_pairs_get(pp, 0, 3, in3, tg3));
    const int32_t cut_in[6] = {a, b, x, a, b, q}, cut_tg[6] = {-1, x, y, -1, q, eot};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(in3[i], cut_in[i]);
        assert_int_equal(tg3[i], cut_tg[i]);
    }
    LF_ASSERT_OK(lf_pairs_get(pp, 1, 4, in8, tg8));
    const int32_t p1_in[8] = {b, y, eot, eot, b, z, z, eot}, p1_tg[8] = {y, eot, -1, -1, z, z, eot, -1};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(in8[i], p1_in[i]);
        assert_int_equal(tg8[i], p1_tg[i]);
    }
    assert_int_equal(lf_pairs_get(pp, 2, 4, in8, tg8), LF_ERR_RANGE);
    lf_pairs_free(pp);
    lf_pairs_free(NULL);
    assert_int_equal(lf_pairs_open(&pp, ds, LF_SPLIT_VAL), LF_ERR_NOT_FOUND);
    lf_tokenizer_free(tok);
    lf_dataset_close(ds);

    /* an sft dataset has no pairs */
    const char *sft = "{\"prompt\": \"ab\", \"response\": \"xyz\"}\n";
    LF_ASSERT_OK(lf_file_write_all(in, sft, strlen(sft)));
    o.mode = LF_RECORD_SFT;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    LF_ASSERT_OK(lf_dataset_open(&ds, out));
    assert_int_equal(lf_pairs_open(&pp, ds, LF_SPLIT_TRAIN), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("prepared in mode 'sft', not 'dpo'");
    lf_dataset_close(ds);
    lf_test_rmrf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair_formula),
        cmocka_unit_test(test_llama_against_trl),
        cmocka_unit_test(test_prepare_and_pairs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
