/*
 * Llama-family models with scaled RoPE, an explicit head_dim and biases,
 * against transformers 5.25 (tests/fixtures/hf_rope, written by
 * tools/reference/make_hf_rope_fixtures.py with save_pretrained): llama3,
 * yarn (5.x rope_parameters), linear, dynamic and yarn (4.x rope_scaling),
 * and head_dim 16 with hidden 48 / 4 heads plus attention_bias and
 * mlp_bias. For each, on a 90-token prompt whose positions run past the
 * original 32 (dynamic: past max_position_embeddings 32):
 *   - the loss of one forward and every parameter's gradient, as weighted
 *     sums sum(g[i] ((i % 13) + 1)): within 1e-5 of the loss and 2e-5 of
 *     the weighted sum of |g| (fp32 sums in another order, ~1e-6 relative;
 *     the weights are bf16, exact in fp32, so nothing else differs);
 *   - the logits at a few positions within 1e-5 of the largest;
 *   - 32 greedy tokens from a KV-cache session, identical (transformers'
 *     generate with its cache: for dynamic NTK each new token is rotated
 *     with the table of its own length; the fixture's greedy continuations
 *     keep top-1/top-2 gaps above 1e-3, far above fp32 noise);
 *   - the config.json llmforge writes for the model reads back to the same
 *     configuration (rope scaling, head_dim, biases).
 * The head_dim model also runs on cpu-bf16 (bf16 matmul operands: logits
 * within 3e-2 of the largest) and cpu-fenced (the fp32 numbers again).
 * The same checks on the families of tests/fixtures/hf_family
 * (tools/reference/make_hf_family_fixtures.py): Qwen3 (per-head q/k
 * RMSNorm; also cpu-fenced and cpu-bf16) and Phi-3 (fused qkv_proj and
 * gate_up_proj, a sliding_window above the 122 positions used).
 * And Mistral with sliding_window 16 under its 90-token prompt
 * (tests/fixtures/hf_window, tools/reference/make_hf_window_fixture.py;
 * transformers' window: query t sees keys t-15..t): the windowed attention
 * forward and backward on cpu, cpu-fenced and cpu-bf16, and 32 greedy
 * tokens from a session of 128 positions whose KV cache is a ring of 16
 * (the prompt's prefill and every decoded token past the window).
 */
#include <math.h>
#include <cjson/cJSON.h>
#include "test_util.h"
#include "llmforge/hf.h"
#include "llmforge/model.h"

#define ROOT LF_SOURCE_DIR "/tests/fixtures/hf_rope"
#define FAMILY_ROOT LF_SOURCE_DIR "/tests/fixtures/hf_family"
#define WINDOW_ROOT LF_SOURCE_DIR "/tests/fixtures/hf_window"
#define BLOCK 128 /* prompt 90 + 32 new tokens; dynamic's config says 32 */

/* The block of a loaded model: BLOCK, a sliding window or not (Mistral's
 * 16 runs the windowed attention and the KV cache's ring past it). */
static int block_of(const lf_model_config *c) {
    (void)c;
    return BLOCK;
}

static cJSON *read_json(const char *path) {
    char *text = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(path, 16u << 20, &text, &len));
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    assert_non_null(o);
    return o;
}

static void copy_file(const char *from, const char *to) {
    char *data = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(from, 0, &data, &len));
    LF_ASSERT_OK(lf_file_write_all(to, data, len));
    lf_free(data);
}

/* The variant's directory; one that shares another's weights is put
 * together in a temporary directory (*tmp set: remove it afterwards). */
static void variant_dir(const char *root, const char *name, const cJSON *e, char *dir, size_t cap, char **tmp) {
    const cJSON *wf = cJSON_GetObjectItem(e, "weights_from");
    *tmp = NULL;
    if (!cJSON_IsString(wf)) {
        snprintf(dir, cap, "%s/%s", root, name);
        return;
    }
    *tmp = lf_test_tmpdir();
    assert_non_null(*tmp);
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/%s/config.json", root, name);
    snprintf(b, sizeof b, "%s/config.json", *tmp);
    copy_file(a, b);
    snprintf(a, sizeof a, "%s/%s/model.safetensors", root, wf->valuestring);
    snprintf(b, sizeof b, "%s/model.safetensors", *tmp);
    copy_file(a, b);
    snprintf(dir, cap, "%s", *tmp);
}

static lf_model *load_model(const char *dir, const char *backend, lf_model_config *cfg) {
    lf_hf_model *hf = NULL;
    LF_ASSERT_OK(lf_hf_open(&hf, dir));
    LF_ASSERT_OK(lf_hf_model_config(hf, cfg));
    cfg->block_size = block_of(cfg); /* RoPE: any block size; dynamic reads its own max_position_embeddings */
    lf_backend *be = lf_backend_get(backend);
    assert_non_null(be);
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, cfg, be));
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

/* The config llmforge exports reads back to the same configuration. */
static void check_export(const lf_model_config *c, const char *weights_dir) {
    int n = lf_model_hf_config_json(c, NULL, 0);
    assert_true(n > 0);
    char *json = malloc((size_t)n + 1);
    lf_model_hf_config_json(c, json, (size_t)n + 1);
    char *tmp = lf_test_tmpdir(), a[1024], b[1024];
    snprintf(a, sizeof a, "%s/config.json", tmp);
    LF_ASSERT_OK(lf_file_write_all(a, json, strlen(json)));
    snprintf(a, sizeof a, "%s/model.safetensors", weights_dir);
    snprintf(b, sizeof b, "%s/model.safetensors", tmp);
    copy_file(a, b);
    lf_hf_model *hf = NULL;
    LF_ASSERT_OK(lf_hf_open(&hf, tmp));
    lf_model_config back;
    LF_ASSERT_OK(lf_hf_model_config(hf, &back));
    back.block_size = c->block_size;
    lf_model_config want = *c;
    want.padded_vocab_size = back.padded_vocab_size;
    if (memcmp(&want.rope, &back.rope, sizeof want.rope) != 0 || want.head_dim != back.head_dim ||
        want.bias != back.bias || want.out_bias != back.out_bias || want.mlp_bias != back.mlp_bias ||
        want.qk_norm != back.qk_norm || want.fused_proj != back.fused_proj ||
        want.sliding_window != back.sliding_window || want.rope_theta != back.rope_theta ||
        want.tie_embeddings != back.tie_embeddings)
        fail_msg("export does not read back the same:\n%s", json);
    lf_hf_close(hf);
    lf_test_rmrf(tmp);
    free(tmp);
    free(json);
}

static int vp(const lf_model *m) {
    const lf_model_config *c = lf_model_get_config(m);
    return c->padded_vocab_size > 0 ? c->padded_vocab_size : c->vocab_size;
}

static double num(const cJSON *o, const char *k) { return cJSON_GetObjectItem(o, k)->valuedouble; }

static void check_loss_and_grads(lf_model *m, const cJSON *e, const int32_t *in, const int32_t *tg, int T) {
    lf_forward_opts fo = {.dloss = 1.0f / (float)(T - 1)}; /* the mean over the T - 1 targets, as F.cross_entropy */
    double sum;
    long cnt;
    lf_model_zero_grad(m);
    LF_ASSERT_OK(lf_model_forward(m, in, tg, 1, T, &fo, &sum, &cnt));
    const double got = sum / (double)cnt, want = num(e, "loss");
    printf("  loss %.9g, transformers %.9g\n", got, want);
    assert_true(fabs(got - want) <= 1e-5 * fabs(want));
    LF_ASSERT_OK(lf_model_backward(m));
    const size_t n = lf_model_num_params(m);
    float *g = lf_alloc(sizeof(float) * n);
    LF_ASSERT_OK(lf_backend_to_host(lf_model_backend(m), g, lf_model_grads(m), sizeof(float) * n));
    int count;
    const lf_param_info *t = lf_model_params_table(m, &count);
    const cJSON *grads = cJSON_GetObjectItem(e, "grads");
    assert_int_equal(cJSON_GetArraySize(grads), count);
    double worst = 0;
    for (int i = 0; i < count; i++) {
        const cJSON *w = cJSON_GetObjectItem(grads, t[i].name);
        if (!w) fail_msg("no gradient for %s in the fixture", t[i].name);
        double s = 0;
        for (size_t j = 0; j < t[i].numel; j++) s += (double)g[t[i].offset + j] * (double)((j % 13) + 1);
        const double ws = cJSON_GetArrayItem(w, 0)->valuedouble, wa = cJSON_GetArrayItem(w, 1)->valuedouble;
        const double err = fabs(s - ws) / wa;
        if (err > worst) worst = err;
        if (err > 2e-5)
            fail_msg("gradient of %s: weighted sum %.9g, transformers %.9g (%.3g of sum |g|)", t[i].name, s, ws, err);
    }
    printf("  gradients: worst weighted-sum error %.3g of sum |g|\n", worst);
    lf_free(g);
}

/* Logits at the fixture's positions; the largest error over the largest |logit|. */
static double logits_error(lf_model *m, const cJSON *e, const int32_t *in, int T, int V) {
    lf_forward_opts fo = {0};
    LF_ASSERT_OK(lf_model_forward(m, in, NULL, 1, T, &fo, NULL, NULL));
    const int Vp = vp(m);
    float *lg = lf_alloc(sizeof(float) * (size_t)T * (size_t)Vp);
    LF_ASSERT_OK(lf_backend_to_host(lf_model_backend(m), lg, lf_model_logits(m), sizeof(float) * (size_t)T * Vp));
    const cJSON *pos = cJSON_GetObjectItem(e, "positions"), *want = cJSON_GetObjectItem(e, "logits");
    double mx = 0, err = 0;
    for (int k = 0; k < cJSON_GetArraySize(pos); k++) {
        const cJSON *row = cJSON_GetArrayItem(want, k);
        for (int v = 0; v < V; v++) mx = fmax(mx, fabs(cJSON_GetArrayItem(row, v)->valuedouble));
    }
    for (int k = 0; k < cJSON_GetArraySize(pos); k++) {
        const int p = cJSON_GetArrayItem(pos, k)->valueint;
        const cJSON *row = cJSON_GetArrayItem(want, k);
        for (int v = 0; v < V; v++)
            err = fmax(err, fabs(lg[(size_t)p * Vp + v] - cJSON_GetArrayItem(row, v)->valuedouble) / mx);
    }
    lf_free(lg);
    return err;
}

/* 32 greedy tokens with the KV cache: prefill, then one token at a time. */
static void check_greedy(lf_model *m, const cJSON *e, const int32_t *in, int T, int V) {
    const cJSON *want = cJSON_GetObjectItem(e, "greedy");
    const int n = cJSON_GetArraySize(want);
    lf_session *s = NULL;
    LF_ASSERT_OK(lf_session_create(&s, m, 1, block_of(lf_model_get_config(m)), 1));
    assert_true(lf_session_has_cache(s));
    float *row = lf_alloc(sizeof(float) * (size_t)vp(m));
    LF_ASSERT_OK(lf_session_forward(s, in, 1, T, 1));
    LF_ASSERT_OK(lf_session_copy_logits(s, (size_t)T - 1, 1, row));
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        const int w = cJSON_GetArrayItem(want, k)->valueint;
        if (best != w) fail_msg("greedy token %d: %d, transformers %d", k, best, w);
        if (k + 1 == n) break;
        const int32_t tok = best;
        LF_ASSERT_OK(lf_session_forward(s, &tok, 1, 1, 1));
        LF_ASSERT_OK(lf_session_copy_logits(s, 0, 1, row));
    }
    printf("  %d greedy tokens identical (KV cache)\n", n);
    lf_free(row);
    lf_session_free(s);
}

static void run_in(const char *root, const char *name, const char *backend, double logit_tol, int full) {
    char path[1024], dir[1024];
    snprintf(path, sizeof path, "%s/%s/expected.json", root, name);
    cJSON *e = read_json(path);
    char *tmp = NULL;
    variant_dir(root, name, e, dir, sizeof dir, &tmp);
    printf("%s on %s:\n", name, backend);
    lf_model_config c;
    lf_model *m = load_model(dir, backend, &c);
    const cJSON *pr = cJSON_GetObjectItem(e, "prompt");
    const int T = cJSON_GetArraySize(pr), V = c.vocab_size;
    int32_t in[BLOCK], tg[BLOCK];
    for (int t = 0; t < T; t++) in[t] = cJSON_GetArrayItem(pr, t)->valueint;
    for (int t = 0; t < T; t++) tg[t] = t + 1 < T ? in[t + 1] : -1;
    if (full) check_loss_and_grads(m, e, in, tg, T);
    const double err = logits_error(m, e, in, T, V);
    printf("  logits: max error %.3g of the largest\n", err);
    assert_true(err <= logit_tol);
    if (full) {
        check_greedy(m, e, in, T, V);
        check_export(&c, dir);
    }
    lf_model_free(m);
    if (tmp) {
        lf_test_rmrf(tmp);
        free(tmp);
    }
    cJSON_Delete(e);
}

static void run_variant(const char *name, const char *backend, double logit_tol, int full) {
    run_in(ROOT, name, backend, logit_tol, full);
}

static void test_llama3(void **state) {
    (void)state;
    run_variant("llama3", "cpu", 1e-5, 1);
}
static void test_yarn(void **state) {
    (void)state;
    run_variant("yarn", "cpu", 1e-5, 1);
}
static void test_linear(void **state) {
    (void)state;
    run_variant("linear", "cpu", 1e-5, 1);
}
static void test_dynamic(void **state) {
    (void)state;
    run_variant("dynamic", "cpu", 1e-5, 1);
}
static void test_yarn4x(void **state) {
    (void)state;
    run_variant("yarn4x", "cpu", 1e-5, 1);
}
static void test_headdim_biases(void **state) {
    (void)state;
    run_variant("headdim", "cpu", 1e-5, 1);
    run_variant("headdim", "cpu-fenced", 1e-5, 1);
    run_variant("headdim", "cpu-bf16", 3e-2, 0);
}

/* The gradients of one step under each recompute policy: the same bits
 * (the q/k norms' input and statistics are kept, or recomputed with the
 * block under full recomputation). */
static void check_recompute_bits(const char *root, const char *name) {
    char path[1024], dir[1024];
    snprintf(path, sizeof path, "%s/%s/expected.json", root, name);
    cJSON *e = read_json(path);
    char *tmp = NULL;
    variant_dir(root, name, e, dir, sizeof dir, &tmp);
    lf_model_config c;
    lf_model *m = load_model(dir, "cpu", &c);
    const cJSON *pr = cJSON_GetObjectItem(e, "prompt");
    const int T = cJSON_GetArraySize(pr);
    int32_t in[BLOCK], tg[BLOCK];
    for (int t = 0; t < T; t++) in[t] = cJSON_GetArrayItem(pr, t)->valueint;
    for (int t = 0; t < T; t++) tg[t] = t + 1 < T ? in[t + 1] : -1;
    const size_t n = lf_model_num_params(m);
    float *g[3];
    for (int pol = LF_RECOMPUTE_NONE; pol <= LF_RECOMPUTE_FULL; pol++) {
        LF_ASSERT_OK(lf_model_set_recompute(m, (lf_recompute)pol));
        lf_forward_opts fo = {.dloss = 1.0f / (float)(T - 1)};
        lf_model_zero_grad(m);
        LF_ASSERT_OK(lf_model_forward(m, in, tg, 1, T, &fo, NULL, NULL));
        LF_ASSERT_OK(lf_model_backward(m));
        g[pol] = lf_alloc(sizeof(float) * n);
        LF_ASSERT_OK(lf_backend_to_host(lf_model_backend(m), g[pol], lf_model_grads(m), sizeof(float) * n));
        if (pol > 0 && memcmp(g[pol], g[0], sizeof(float) * n) != 0)
            fail_msg("%s: recompute %s changes the gradients", name, lf_recompute_name((lf_recompute)pol));
    }
    printf("%s: gradients bit-identical under recompute none, selective, full\n", name);
    for (int i = 0; i < 3; i++) lf_free(g[i]);
    lf_model_free(m);
    if (tmp) {
        lf_test_rmrf(tmp);
        free(tmp);
    }
    cJSON_Delete(e);
}

/* Qwen3: q_norm / k_norm per head before RoPE, head_dim 16 with hidden 48,
 * tied; its own backend op (qknorm), so every CPU kind runs it. */
static void test_qwen3(void **state) {
    (void)state;
    run_in(FAMILY_ROOT, "qwen3", "cpu", 1e-5, 1);
    run_in(FAMILY_ROOT, "qwen3", "cpu-fenced", 1e-5, 1);
    run_in(FAMILY_ROOT, "qwen3", "cpu-bf16", 3e-2, 0);
    check_recompute_bits(FAMILY_ROOT, "qwen3");
}
/* Phi-3: fused qkv_proj and gate_up_proj, its sliding_window kept (and
 * bounding the block). */
static void test_phi3(void **state) {
    (void)state;
    run_in(FAMILY_ROOT, "phi3", "cpu", 1e-5, 1);
    check_recompute_bits(FAMILY_ROOT, "phi3");
}

/* The same greedy tokens through ragged forwards (continuous batching's
 * path), the prompt in two runs (10 tokens, then 80 crossing the window:
 * rows below it in one call, the rest one by one into the ring), then
 * one token a run; a run restarting at a position the ring no longer
 * holds is refused, naming the positions it holds. */
static void check_greedy_ragged(lf_model *m, const cJSON *e, const int32_t *in, int T, int V) {
    const cJSON *want = cJSON_GetObjectItem(e, "greedy");
    const int n = cJSON_GetArraySize(want);
    lf_session *s = NULL;
    LF_ASSERT_OK(lf_session_create(&s, m, 2, BLOCK, 1));
    float *row = lf_alloc(sizeof(float) * (size_t)vp(m));
    lf_segment g = {.slot = 1, .pos = 0, .len = 10};
    LF_ASSERT_OK(lf_session_forward_ragged(s, in, &g, 1));
    g = (lf_segment){.slot = 1, .pos = 10, .len = T - 10};
    LF_ASSERT_OK(lf_session_forward_ragged(s, in + 10, &g, 1));
    LF_ASSERT_OK(lf_session_copy_logits(s, 0, 1, row));
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        const int w = cJSON_GetArrayItem(want, k)->valueint;
        if (best != w) fail_msg("ragged greedy token %d: %d, transformers %d", k, best, w);
        if (k + 1 == n) break;
        const int32_t tok = best;
        g = (lf_segment){.slot = 1, .pos = T + k, .len = 1};
        LF_ASSERT_OK(lf_session_forward_ragged(s, &tok, &g, 1));
        LF_ASSERT_OK(lf_session_copy_logits(s, 0, 1, row));
    }
    printf("  %d greedy tokens identical (ragged, KV ring)\n", n);
    const int32_t tok = 0;
    g = (lf_segment){.slot = 1, .pos = 50, .len = 1};
    assert_int_equal(lf_session_forward_ragged(s, &tok, &g, 1), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("sliding-window cache holds positions");
    lf_free(row);
    lf_session_free(s);
}

/* Mistral with a window of 16 under a 90-token prompt (the same bounds as
 * the RoPE variants: only the mask differs from full attention, which the
 * generator checks moves the logits by 1.8 of the largest). */
static void test_window(void **state) {
    (void)state;
    run_in(WINDOW_ROOT, "mistral", "cpu", 1e-5, 1);
    run_in(WINDOW_ROOT, "mistral", "cpu-fenced", 1e-5, 1);
    run_in(WINDOW_ROOT, "mistral", "cpu-bf16", 3e-2, 0);
    check_recompute_bits(WINDOW_ROOT, "mistral");
    char path[1024];
    snprintf(path, sizeof path, "%s/mistral/expected.json", WINDOW_ROOT);
    cJSON *e = read_json(path);
    lf_model_config c;
    lf_model *m = load_model(WINDOW_ROOT "/mistral", "cpu", &c);
    const cJSON *pr = cJSON_GetObjectItem(e, "prompt");
    const int T = cJSON_GetArraySize(pr);
    int32_t in[BLOCK];
    for (int t = 0; t < T; t++) in[t] = cJSON_GetArrayItem(pr, t)->valueint;
    check_greedy_ragged(m, e, in, T, c.vocab_size);
    lf_model_free(m);
    cJSON_Delete(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3),  cmocka_unit_test(test_yarn),   cmocka_unit_test(test_linear),
        cmocka_unit_test(test_dynamic), cmocka_unit_test(test_yarn4x), cmocka_unit_test(test_headdim_biases),
        cmocka_unit_test(test_qwen3),   cmocka_unit_test(test_phi3),   cmocka_unit_test(test_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
