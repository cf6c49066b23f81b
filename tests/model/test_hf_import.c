/*
 * Import from a Hugging Face directory: the sharded bf16 Llama that
 * transformers' save_pretrained wrote (tests/fixtures/hf_llama_bf16,
 * tools/reference/make_llama_golden.py) becomes an llmforge model whose
 * first loss on the fixture's batch equals transformers' (the float32 model
 * loaded from the same bf16 weights: bf16 -> fp32 is exact, so the only
 * difference is fp32 summation order: 1e-5 relative), and whose last logits
 * of row 0 agree within 1e-5 of the largest. A model of another shape gets
 * every mismatching tensor listed by name.
 */
#include <cjson/cJSON.h>
#include "test_util.h"
#include "llmforge/hf.h"
#include "llmforge/model.h"

#define DIR LF_SOURCE_DIR "/tests/fixtures/hf_llama_bf16"

static cJSON *expected(void) {
    char *text = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(DIR "/expected.json", 16u << 20, &text, &len));
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    assert_non_null(o);
    return o;
}

/* B rows of T ids (nested lists) into out. */
static void ints(const cJSON *a, int32_t *out, int B, int T) {
    assert_int_equal(cJSON_GetArraySize(a), B);
    for (int b = 0; b < B; b++) {
        const cJSON *row = cJSON_GetArrayItem(a, b);
        assert_int_equal(cJSON_GetArraySize(row), T);
        for (int t = 0; t < T; t++) out[b * T + t] = (int32_t)cJSON_GetArrayItem(row, t)->valuedouble;
    }
}

static void test_first_loss_equals_transformers(void **state) {
    (void)state;
    lf_hf_model *hf = NULL;
    LF_ASSERT_OK(lf_hf_open(&hf, DIR));
    lf_model_config c;
    LF_ASSERT_OK(lf_hf_model_config(hf, &c));
    assert_int_equal(c.arch, LF_ARCH_LLAMA);
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    int count;
    const lf_param_info *table = lf_model_params_table(m, &count);
    float *host = lf_alloc(sizeof(float) * lf_model_num_params(m));
    LF_ASSERT_OK(lf_hf_load_params(hf, table, count, lf_model_get_config(m)->tie_embeddings, host));
    memcpy(lf_model_params(m), host, sizeof(float) * lf_model_num_params(m)); /* CPU backend: host memory */
    cJSON *e = expected(), *b = cJSON_GetObjectItem(e, "batch");
    const int B = cJSON_GetObjectItem(b, "B")->valueint, T = cJSON_GetObjectItem(b, "T")->valueint;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)B * T), *tg = malloc(sizeof(int32_t) * (size_t)B * T);
    ints(cJSON_GetObjectItem(b, "inputs"), in, B, T);
    ints(cJSON_GetObjectItem(b, "targets"), tg, B, T);
    const int ign = cJSON_GetObjectItem(b, "ignore_index")->valueint;
    for (int i = 0; i < B * T; i++)
        if (tg[i] == ign) tg[i] = -1;
    double sum;
    long cnt;
    lf_forward_opts fo = {0};
    LF_ASSERT_OK(lf_model_forward(m, in, tg, B, T, &fo, &sum, &cnt));
    const double want = cJSON_GetObjectItem(e, "loss")->valuedouble, got = sum / (double)cnt;
    printf("first loss %.9g, transformers %.9g\n", got, want);
    assert_true(fabs(got - want) <= 1e-5 * fabs(want));
    /* logits of row 0's last position (a forward without targets keeps them) */
    LF_ASSERT_OK(lf_model_forward(m, in, NULL, B, T, &fo, NULL, NULL));
    const cJSON *ll = cJSON_GetObjectItem(e, "last_logits_row0");
    const int V = c.vocab_size;
    assert_int_equal(cJSON_GetArraySize(ll), V);
    const float *row = lf_model_logits(m) + (size_t)(T - 1) * V;
    double mx = 0, err = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, fabs(cJSON_GetArrayItem(ll, v)->valuedouble));
    for (int v = 0; v < V; v++) err = fmax(err, fabs(row[v] - cJSON_GetArrayItem(ll, v)->valuedouble) / mx);
    printf("last logits of row 0: max error %.3g of the largest\n", err);
    assert_true(err <= 1e-5);
    cJSON_Delete(e);
    free(in);
    free(tg);
    lf_free(host);
    lf_model_free(m);
    lf_hf_close(hf);
}

static void test_shape_mismatch_listed(void **state) {
    (void)state;
    lf_hf_model *hf = NULL;
    LF_ASSERT_OK(lf_hf_open(&hf, DIR));
    lf_model_config c;
    LF_ASSERT_OK(lf_hf_model_config(hf, &c));
    c.n_layer = 3;       /* one layer the directory does not have */
    c.ffn_hidden += 32;  /* and every MLP matrix the wrong shape */
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    int count;
    const lf_param_info *table = lf_model_params_table(m, &count);
    float *host = lf_alloc(sizeof(float) * lf_model_num_params(m));
    assert_int_equal(lf_hf_load_params(hf, table, count, 0, host), LF_ERR_MISMATCH);
    LF_ASSERT_ERR_CONTAINS("missing model.layers.2.input_layernorm.weight");
    LF_ASSERT_ERR_CONTAINS("model.layers.0.mlp.gate_proj.weight has shape");
    LF_ASSERT_ERR_CONTAINS("hf_llama_bf16");
    lf_free(host);
    lf_model_free(m);
    lf_hf_close(hf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_loss_equals_transformers),
        cmocka_unit_test(test_shape_mismatch_listed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
