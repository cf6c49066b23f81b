/*
 * LoRA against PEFT 0.21 (tests/fixtures/peft, written by
 * tools/reference/make_peft_fixtures.py): a tiny Llama with adapters on
 * q_proj and v_proj (r 4, alpha 8) and on "all-linear" (r 4, alpha 16,
 * use_rslora), and a tiny GPT-2 with adapters on c_attn, c_proj (both) and
 * c_fc (Conv1D: fan_in_fan_out), on one batch of 2 x 16 tokens:
 *   - PEFT's adapter_config.json reads (lf_lora_adapter_config) to the
 *     config, and the adapters llmforge attaches are PEFT's: the same
 *     tensors (names, shapes) as PEFT's adapter_model.safetensors, which
 *     lf_lora_adapter_load reads; A within PEFT's init bound 1/sqrt(in), B
 *     zero;
 *   - at PEFT's init (B zero): the loss equals the base's (the adapters
 *     add exactly 0) and PEFT's, dA is exactly zero, dB is PEFT's;
 *   - at a nonzero state (PEFT's A, B = 0.1 randn): the loss and every
 *     lora_A / lora_B gradient;
 *   - 3 AdamW steps from there (lr 1e-2, betas 0.9/0.99, eps 1e-8, weight
 *     decay 0.1, no clipping; torch.optim.AdamW): the loss before each step
 *     and the adapters after the last;
 *   - lf_model_lora_merge of the nonzero state: the targeted weights equal
 *     PEFT's merge_and_unload within 1e-6 of each tensor's largest entry.
 * Tolerances (fp32 throughout; the same operands, summed in another order):
 * losses within 1e-5 relative; gradients within 2e-5 of the case's largest
 * |g| (each is a sum over 32 rows of products through two layers: a few
 * ulps of the largest terms; measured <= 2e-6); the weights after 3 steps
 * within 1e-4 absolute, 1/300 of the 3 lr the adapters can move in 3 steps
 * (AdamW's update lr m / sqrt(v) divides each element's gradient error by
 * that element's own gradient, so an element whose gradient is 1/100 of the
 * largest sees ~1e-4 relative noise; measured <= 1.5e-5).
 */
#include <math.h>
#include <cjson/cJSON.h>
#include "test_util.h"
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"
#include "llmforge/hf.h"
#include "llmforge/model.h"
#include "llmforge/safetensors.h"
#include "llmforge/train.h"

#define ROOT LF_SOURCE_DIR "/tests/fixtures/peft"
#define NB 2
#define NT 16

static cJSON *read_json(const char *path) {
    char *text = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(path, 16u << 20, &text, &len));
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    assert_non_null(o);
    return o;
}

static lf_model *load_base(const char *kind) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/base_%s", ROOT, kind);
    lf_hf_model *hf = NULL;
    LF_ASSERT_OK(lf_hf_open(&hf, dir));
    lf_model_config cfg;
    LF_ASSERT_OK(lf_hf_model_config(hf, &cfg));
    if (cfg.block_size <= 0 || cfg.block_size > 64) cfg.block_size = 64;
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

/* The tensor of PEFT name (prefix + name) for train tensor i, checked against its shape. */
static const lf_st_tensor *ref_tensor(const lf_safetensors *st, const lf_model *m, int i, const char *prefix) {
    int count;
    const lf_param_info *t = lf_model_train_table(m, &count);
    char name[256], full[300];
    lf_model_lora_peft_name(m, i, name, sizeof name);
    snprintf(full, sizeof full, "%s%s", prefix, name);
    const lf_st_tensor *x = lf_safetensors_find(st, full);
    if (!x) fail_msg("the fixture has no tensor %s", full);
    if (x->dtype != LF_ST_F32 || x->ndim != 2 || x->shape[0] != t[i].shape[0] || x->shape[1] != t[i].shape[1])
        fail_msg("%s: fixture shape [%lld, %lld], llmforge [%lld, %lld]", full, (long long)x->shape[0],
                 (long long)x->shape[1], (long long)t[i].shape[0], (long long)t[i].shape[1]);
    return x;
}

/* The adapters from the fixture's tensors under prefix ("" = adapter_model.safetensors). */
static void set_adapters(lf_model *m, const lf_safetensors *st, const char *prefix) {
    int count;
    const lf_param_info *t = lf_model_train_table(m, &count);
    const size_t n = lf_model_train_num_params(m);
    float *host = lf_alloc(sizeof(float) * n);
    for (int i = 0; i < count; i++) memcpy(host + t[i].offset, ref_tensor(st, m, i, prefix)->data, t[i].numel * 4);
    LF_ASSERT_OK(lf_backend_to_device(lf_model_backend(m), lf_model_train_params(m), host, sizeof(float) * n));
    lf_free(host);
}

static float *train_host(lf_model *m, int grads) {
    const size_t n = lf_model_train_num_params(m);
    float *h = lf_alloc(sizeof(float) * n);
    LF_ASSERT_OK(lf_backend_to_host(lf_model_backend(m), h, grads ? lf_model_train_grads(m) : lf_model_train_params(m),
                                    sizeof(float) * n));
    return h;
}

/* Largest |llmforge - PEFT| over every adapter tensor; *scale: the largest |PEFT|. */
static double max_diff(lf_model *m, const float *got, const lf_safetensors *st, const char *prefix, double *scale) {
    int count;
    const lf_param_info *t = lf_model_train_table(m, &count);
    double err = 0, mx = 0;
    for (int i = 0; i < count; i++) {
        const float *ref = ref_tensor(st, m, i, prefix)->data;
        for (size_t j = 0; j < t[i].numel; j++) {
            err = fmax(err, fabs((double)got[t[i].offset + j] - ref[j]));
            mx = fmax(mx, fabs((double)ref[j]));
        }
    }
    *scale = mx;
    return err;
}

static void batch_of(const cJSON *e, int32_t *in, int32_t *tg) {
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < NT; t++) {
            in[b * NT + t] = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "inputs"), b), t)->valueint;
            tg[b * NT + t] = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "targets"), b), t)->valueint;
        }
}

/* Forward (mean cross-entropy) and backward into zeroed gradients. */
static double loss_and_grads(lf_model *m, const int32_t *in, const int32_t *tg) {
    lf_forward_opts fo = {.dloss = 1.0f / (float)(NB * NT)};
    double sum;
    long cnt;
    lf_model_zero_grad(m);
    LF_ASSERT_OK(lf_model_forward(m, in, tg, NB, NT, &fo, &sum, &cnt));
    assert_int_equal(cnt, NB * NT);
    LF_ASSERT_OK(lf_model_backward(m));
    return sum / (double)cnt;
}

static void check_loss(const char *what, double got, double want) {
    printf("  %s: loss %.9g, PEFT %.9g\n", what, got, want);
    if (fabs(got - want) > 1e-5 * fabs(want)) fail_msg("%s: loss %.9g, PEFT %.9g", what, got, want);
}

static void check_grads(lf_model *m, const lf_safetensors *st, const char *prefix, const char *what) {
    float *g = train_host(m, 1);
    double scale, err = max_diff(m, g, st, prefix, &scale);
    printf("  %s gradients: max error %.3g of the largest |g| %.3g\n", what, err / scale, scale);
    if (!(err <= 2e-5 * scale)) fail_msg("%s gradients: max error %.3g of the largest |g|", what, err / scale);
    lf_free(g);
}

/* The base weights after lf_model_lora_merge against PEFT's merge_and_unload
 * ("merged.<HF name>"): every tensor the fixture has, within 1e-6 of its
 * largest entry (W + scale B A: one product of r = 4 terms, rounded once). */
static void check_merged(lf_model *m, const lf_safetensors *st, const char *kind) {
    int count, n_checked = 0;
    const lf_param_info *t = lf_model_params_table(m, &count);
    float *w = lf_alloc(sizeof(float) * lf_model_num_params(m));
    LF_ASSERT_OK(
        lf_backend_to_host(lf_model_backend(m), w, lf_model_params(m), sizeof(float) * lf_model_num_params(m)));
    double worst = 0;
    for (int i = 0; i < count; i++) {
        char name[256];
        snprintf(name, sizeof name, "merged.%s%s", strcmp(kind, "gpt2") ? "" : "transformer.", t[i].name);
        const lf_st_tensor *x = lf_safetensors_find(st, name);
        if (!x) continue;
        assert_int_equal(x->numel, t[i].numel);
        const float *ref = x->data;
        double mx = 0, err = 0;
        for (size_t j = 0; j < t[i].numel; j++) {
            mx = fmax(mx, fabs(ref[j]));
            err = fmax(err, fabs((double)w[t[i].offset + j] - ref[j]));
        }
        worst = fmax(worst, err / mx);
        if (err > 1e-6 * mx)
            fail_msg("merged %s: %.3g from PEFT's merge_and_unload (largest %.3g)", t[i].name, err, mx);
        n_checked++;
    }
    int n_ref = 0;
    for (int i = 0; i < lf_safetensors_count(st); i++) n_ref += !strncmp(lf_safetensors_at(st, i)->name, "merged.", 7);
    assert_int_equal(n_checked, n_ref);
    printf("  merged: %d weights within %.3g of PEFT's merge_and_unload\n", n_checked, worst);
    lf_free(w);
}

static void run_case(const char *name, const char *kind) {
    printf("%s\n", name);
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", ROOT, name);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    cJSON *e = read_json(path);
    lf_safetensors *st = NULL, *ad = NULL;
    snprintf(path, sizeof path, "%s/tensors.safetensors", dir);
    LF_ASSERT_OK(lf_safetensors_open(&st, path));
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    LF_ASSERT_OK(lf_safetensors_open(&ad, path));
    int32_t in[NB * NT], tg[NB * NT];
    batch_of(e, in, tg);
    lf_model *m = load_base(kind);
    lf_lora_config lc; /* PEFT's adapter_config.json, read as `merge` and --init-from read it */
    char base[256], want_base[64];
    LF_ASSERT_OK(lf_lora_adapter_config(dir, &lc, base, sizeof base));
    snprintf(want_base, sizeof want_base, "../base_%s", kind);
    assert_string_equal(base, want_base);

    /* the base alone, then with adapters at llmforge's own init: the same loss (B is zero) */
    lf_forward_opts fo = {0};
    double base_sum;
    long cnt;
    LF_ASSERT_OK(lf_model_forward(m, in, tg, NB, NT, &fo, &base_sum, &cnt));
    LF_ASSERT_OK(lf_model_lora_attach(m, &lc, 1234));
    int count;
    const lf_param_info *t = lf_model_train_table(m, &count);
    assert_int_equal(count, lf_safetensors_count(ad)); /* the same tensors as PEFT's adapter */
    float *p = train_host(m, 0);
    for (int i = 0; i < count; i++) {
        (void)ref_tensor(ad, m, i, ""); /* PEFT's name and shape */
        const int is_b = strstr(t[i].name, ".lora_B.") != NULL;
        const double bound = is_b ? 0.0 : 1.0 / sqrt((double)t[i].shape[1]);
        for (size_t j = 0; j < t[i].numel; j++)
            if (fabs(p[t[i].offset + j]) > bound)
                fail_msg("%s[%zu] = %g beyond %g", t[i].name, j, p[t[i].offset + j], bound);
    }
    lf_free(p);
    double sum;
    LF_ASSERT_OK(lf_model_forward(m, in, tg, NB, NT, &fo, &sum, &cnt));
    assert_true(sum == base_sum);

    /* PEFT's init, read from its adapter_model.safetensors: dA exactly zero, dB PEFT's */
    LF_ASSERT_OK(lf_lora_adapter_load(m, dir));
    check_loss("init", loss_and_grads(m, in, tg), cJSON_GetObjectItem(e, "loss_init")->valuedouble);
    float *g = train_host(m, 1);
    for (int i = 0; i < count; i++)
        if (strstr(t[i].name, ".lora_A."))
            for (size_t j = 0; j < t[i].numel; j++)
                if (g[t[i].offset + j] != 0.0f) fail_msg("%s: gradient %g with B zero", t[i].name, g[t[i].offset + j]);
    lf_free(g);
    check_grads(m, st, "init.grad.", "init");

    /* a nonzero state */
    set_adapters(m, st, "nz.");
    check_loss("nonzero B", loss_and_grads(m, in, tg), cJSON_GetObjectItem(e, "loss_nz")->valuedouble);
    check_grads(m, st, "nz.grad.", "nonzero B");

    /* 3 AdamW steps */
    lf_train_config tc = lf_train_config_default();
    tc.beta1 = 0.9f;
    tc.beta2 = 0.99f;
    tc.eps = 1e-8f;
    tc.weight_decay = 0.1f;
    tc.grad_clip = 0.0f;
    const size_t n = lf_model_train_num_params(m);
    lf_backend *be = lf_model_backend(m);
    float *m1 = lf_backend_alloc(be, n * sizeof(float)), *m2 = lf_backend_alloc(be, n * sizeof(float));
    lf_backend_zero(be, m1, n);
    lf_backend_zero(be, m2, n);
    const cJSON *ls = cJSON_GetObjectItem(e, "losses_steps");
    for (int k = 0; k < cJSON_GetArraySize(ls); k++) {
        char what[32];
        snprintf(what, sizeof what, "step %d", k + 1);
        check_loss(what, loss_and_grads(m, in, tg), cJSON_GetArrayItem(ls, k)->valuedouble);
        double norm;
        LF_ASSERT_OK(lf_adamw_step(m, be, m1, m2, k + 1, 1e-2f, &tc, &norm));
    }
    float *w = train_host(m, 0);
    double scale, err = max_diff(m, w, st, "step3.", &scale);
    printf("  after 3 AdamW steps: adapters within %.3g of PEFT's (largest %.3g)\n", err, scale);
    if (!(err <= 1e-4)) fail_msg("after 3 AdamW steps: adapters %.3g from PEFT's", err);
    lf_free(w);

    /* merge_and_unload of the nonzero state: the targeted base weights */
    set_adapters(m, st, "nz.");
    LF_ASSERT_OK(lf_model_lora_merge(m));
    check_merged(m, st, kind);

    lf_backend_free(be, m1);
    lf_backend_free(be, m2);
    lf_model_free(m);
    lf_safetensors_close(st);
    lf_safetensors_close(ad);
    cJSON_Delete(e);
}

static void test_llama_q_v(void **state) {
    (void)state;
    run_case("llama_qv", "llama");
}
static void test_llama_all_linear_rslora(void **state) {
    (void)state;
    run_case("llama_all", "llama");
}
static void test_gpt2_conv1d(void **state) {
    (void)state;
    run_case("gpt2", "gpt2");
}

/* lora.dropout: PEFT's lora_B(lora_A(dropout(x))) draws torch's masks, so
 * no fixture can match it; instead, with the mask fixed (one training
 * forward's key) the gradient of every adapter is the derivative of that
 * loss: central differences (h 3e-3; fp32 per-token losses ~4 round to
 * ~2.4e-7, ~4e-5 of the largest gradient after / 2h; truncation O(h^2),
 * ~1e-4 measured) within 2e-3 of the largest gradient, at elements of
 * the first and last adapters (all-linear: down_proj's input is the widest
 * scratch). The mask acts (the loss moves off the no-dropout one) and is
 * gone when not training (the loss is the no-dropout one bit for bit). */
static void test_dropout_gradcheck(void **state) {
    (void)state;
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/llama_all", ROOT);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    cJSON *e = read_json(path);
    lf_safetensors *st = NULL;
    snprintf(path, sizeof path, "%s/tensors.safetensors", dir);
    LF_ASSERT_OK(lf_safetensors_open(&st, path));
    int32_t in[NB * NT], tg[NB * NT];
    batch_of(e, in, tg);
    lf_model *m = load_base("llama");
    lf_lora_config lc;
    LF_ASSERT_OK(lf_lora_adapter_config(dir, &lc, NULL, 0));
    lc.dropout = 0.3f;
    LF_ASSERT_OK(lf_model_lora_attach(m, &lc, 1));
    set_adapters(m, st, "nz.");
    lf_forward_opts drop = {.dloss = 1.0f / (float)(NB * NT), .train = 1, .seed = 5, .key = 77}, plain = drop;
    plain.train = 0;
    double s0, s1, s2;
    long cnt;
    LF_ASSERT_OK(lf_model_forward(m, in, tg, NB, NT, &plain, &s0, &cnt));
    assert_true(fabs(s0 / cnt - cJSON_GetObjectItem(e, "loss_nz")->valuedouble) <= 1e-5 * s0 / cnt);
    lf_model_zero_grad(m);
    LF_ASSERT_OK(lf_model_forward(m, in, tg, NB, NT, &drop, &s1, &cnt));
    LF_ASSERT_OK(lf_model_backward(m));
    assert_true(fabs(s1 - s0) / cnt > 1e-4); /* the mask changes the loss */
    float *g = train_host(m, 1), *p = train_host(m, 0);
    int count;
    const lf_param_info *t = lf_model_train_table(m, &count);
    double gmax = 0;
    for (size_t j = 0; j < lf_model_train_num_params(m); j++) gmax = fmax(gmax, fabs(g[j]));
    const int tensors[4] = {0, 1, count - 2, count - 1};
    double worst = 0;
    for (int q = 0; q < 4; q++) {
        const lf_param_info *pi = &t[tensors[q]];
        for (size_t j = 0; j < pi->numel; j += pi->numel / 3 + 1) {
            const size_t at = pi->offset + j;
            const float keep = p[at], h = 3e-3f;
            double lp, lm;
            p[at] = keep + h;
            LF_ASSERT_OK(lf_backend_to_device(lf_model_backend(m), lf_model_train_params(m), p,
                                              sizeof(float) * lf_model_train_num_params(m)));
            LF_ASSERT_OK(lf_model_forward(m, in, tg, NB, NT, &drop, &lp, &cnt));
            p[at] = keep - h;
            LF_ASSERT_OK(lf_backend_to_device(lf_model_backend(m), lf_model_train_params(m), p,
                                              sizeof(float) * lf_model_train_num_params(m)));
            LF_ASSERT_OK(lf_model_forward(m, in, tg, NB, NT, &drop, &lm, &cnt));
            p[at] = keep;
            const double fd = (lp - lm) / cnt / (2.0 * h), err = fabs(fd - g[at]) / gmax;
            worst = fmax(worst, err);
            if (err > 2e-3) fail_msg("%s[%zu]: gradient %g, central difference %g", pi->name, j, g[at], fd);
        }
    }
    printf("dropout 0.3: gradients within %.3g of the largest of central differences\n", worst);
    LF_ASSERT_OK(lf_backend_to_device(lf_model_backend(m), lf_model_train_params(m), p,
                                      sizeof(float) * lf_model_train_num_params(m)));
    LF_ASSERT_OK(lf_model_forward(m, in, tg, NB, NT, &plain, &s2, &cnt));
    assert_true(s2 == s0); /* no mask when not training */
    lf_free(g);
    lf_free(p);
    lf_model_free(m);
    lf_safetensors_close(st);
    cJSON_Delete(e);
}

/* Bad configurations are refused naming the key. */
static void test_refusals(void **state) {
    (void)state;
    lf_model *m = load_base("llama");
    const lf_model_config *c = lf_model_get_config(m);
    lf_lora_config lc = lf_lora_config_default();
    snprintf(lc.target_modules, sizeof lc.target_modules, "q_proj\nqproj");
    assert_int_equal(lf_lora_config_check(&lc, c), LF_ERR_CONFIG);
    assert_non_null(strstr(lf_last_error(), "lora.target_modules"));
    assert_non_null(strstr(lf_last_error(), "\"qproj\""));
    assert_non_null(strstr(lf_last_error(), "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj"));
    snprintf(lc.target_modules, sizeof lc.target_modules, "c_attn"); /* a GPT-2 name on a Llama */
    assert_int_equal(lf_lora_config_check(&lc, c), LF_ERR_CONFIG);
    snprintf(lc.target_modules, sizeof lc.target_modules, "self_attn.q_proj"); /* a dotted suffix matches */
    LF_ASSERT_OK(lf_lora_config_check(&lc, c));
    lc.r = 0;
    assert_int_equal(lf_lora_config_check(&lc, c), LF_ERR_CONFIG);
    assert_non_null(strstr(lf_last_error(), "lora.r"));
    lc.r = 4;
    lc.dropout = 1.0f;
    assert_int_equal(lf_lora_config_check(&lc, c), LF_ERR_CONFIG);
    assert_non_null(strstr(lf_last_error(), "lora.dropout"));
    lc.dropout = 0.0f;
    snprintf(lc.bias, sizeof lc.bias, "all");
    assert_int_equal(lf_lora_config_check(&lc, c), LF_ERR_UNSUPPORTED);
    assert_non_null(strstr(lf_last_error(), "lora.bias"));
    assert_null(lf_model_lora(m));
    lf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_q_v),   cmocka_unit_test(test_llama_all_linear_rslora),
        cmocka_unit_test(test_gpt2_conv1d), cmocka_unit_test(test_dropout_gradcheck),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
