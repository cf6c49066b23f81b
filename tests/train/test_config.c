/*
 * Training configuration: defaults, the checked-in configs, overrides (dotted,
 * bare leaf, nanoGPT alias, ambiguous), unknown keys with suggestions, type
 * and range errors with their exact messages, the batch identity, DeepSpeed
 * features accepted only when off, the to_json/parse round trip, malformed
 * and missing files, help text, and lf_lr_at against nanoGPT's get_lr.
 */
#include <dirent.h>
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/data.h"
#include "llmforge/train.h"

static lf_status parse_ov(lf_train_config *cfg, const char *json, int n, const char *const *ov) {
    return lf_train_config_parse(cfg, json, "cfg.json", n, ov);
}

/* parse a JSON text that sets data.dataset plus `extra` members */
static lf_status parse_with(lf_train_config *cfg, const char *extra) {
    char text[2048];
    snprintf(text, sizeof text, "{\"data\": {\"dataset\": \"d\"}%s%s}", *extra ? ", " : "", extra);
    return parse_ov(cfg, text, 0, NULL);
}

#define ASSERT_ERR_EQ(expr, status, msg)                                                       \
    do {                                                                                       \
        lf_status s2_ = (expr);                                                                \
        if (s2_ != (status))                                                                   \
            fail_msg("%s -> %s (want %s): %s", #expr, lf_status_str(s2_), lf_status_str(status), \
                     lf_last_error());                                                         \
        if (msg) assert_string_equal(lf_last_error(), (const char *)(msg));                    \
    } while (0)

static void test_defaults(void **state) {
    (void)state;
    lf_train_config c = lf_train_config_default();
    assert_string_equal(c.arch, "gpt2");
    assert_int_equal(c.model.n_layer, 4);
    assert_int_equal(c.model.n_head, 4);
    assert_int_equal(c.model.n_embd, 128);
    assert_int_equal(c.model.block_size, 64);
    assert_int_equal(c.model.bias, 1);
    assert_true(c.model.dropout == 0.0f);
    assert_int_equal(c.model.vocab_size, 0);
    assert_string_equal(c.dataset, "");
    assert_int_equal(c.sampling, LF_SAMPLING_RANDOM);
    assert_int_equal(c.micro_batch, 12);
    assert_int_equal(c.grad_accum, 1);
    assert_int_equal(c.train_batch_size, 12);
    assert_int_equal(c.train_iters, 2000);
    assert_string_equal(c.optimizer_type, "AdamW");
    assert_true(c.lr == 1e-3f);
    assert_true(c.beta1 == 0.9f && c.beta2 == 0.99f);
    assert_true(c.eps == 1e-8f);
    assert_true(c.weight_decay == 0.1f);
    assert_int_equal(c.sched_type, LF_SCHED_COSINE);
    assert_int_equal(c.warmup_iters, 100);
    assert_int_equal(c.decay_iters, 2000);
    assert_true(c.min_lr == (float)((double)1e-3f / 10));
    assert_true(c.grad_clip == 1.0f);
    assert_int_equal(c.eval_interval, 250);
    assert_int_equal(c.eval_iters, 20);
    assert_int_equal(c.ckpt_interval, 500);
    assert_int_equal(c.keep_last, 3);
    assert_int_equal(c.steps_per_print, 10);
    assert_true(c.seed == 1337);
    assert_string_equal(c.out_dir, "out");

    /* no file: defaults + overrides; dataset is required */
    lf_train_config l;
    ASSERT_ERR_EQ(lf_train_config_load(&l, NULL, 0, NULL), LF_ERR_CONFIG,
                  "key 'data.dataset' is required and was not set");
    const char *ov[] = {"data.dataset=some/dir"};
    LF_ASSERT_OK(lf_train_config_load(&l, NULL, 1, ov));
    assert_string_equal(l.dataset, "some/dir");
    snprintf(c.dataset, sizeof c.dataset, "some/dir");
    char *a = lf_train_config_to_json(&c), *b = lf_train_config_to_json(&l);
    assert_string_equal(a, b);
    lf_free(a);
    lf_free(b);
    /* decay_iters and min_lr follow train_iters and lr unless given */
    const char *ov2[] = {"data.dataset=d", "train_iters=300", "lr=6e-4"};
    LF_ASSERT_OK(lf_train_config_load(&l, NULL, 3, ov2));
    assert_int_equal(l.decay_iters, 300);
    assert_true(l.min_lr == (float)((double)6e-4f / 10));
}

static void test_checked_in_configs(void **state) {
    (void)state;
    lf_train_config c;
    LF_ASSERT_OK(lf_train_config_load(&c, LF_SOURCE_DIR "/configs/shakespeare_char.json", 0, NULL));
    assert_int_equal(c.model.n_layer, 6);
    assert_int_equal(c.model.n_head, 6);
    assert_int_equal(c.model.n_embd, 384);
    assert_int_equal(c.model.block_size, 256);
    assert_int_equal(c.model.bias, 0);
    assert_true(c.model.dropout == 0.2f);
    assert_int_equal(c.micro_batch, 64);
    assert_int_equal(c.grad_accum, 1);
    assert_int_equal(c.train_batch_size, 64);
    assert_int_equal(c.train_iters, 5000);
    assert_int_equal(c.decay_iters, 5000);
    assert_true(c.lr == 1e-3f && c.min_lr == 1e-4f);
    assert_true(c.beta1 == 0.9f && c.beta2 == 0.99f);
    assert_int_equal(c.warmup_iters, 100);
    assert_int_equal(c.eval_interval, 250);
    assert_int_equal(c.eval_iters, 200);
    assert_int_equal(c.ckpt_interval, 250);
    assert_true(c.seed == 1337);
    assert_string_equal(c.dataset, "out/data/shakespeare_char");
    assert_string_equal(c.out_dir, "out/shakespeare_char");

    LF_ASSERT_OK(lf_train_config_load(&c, LF_SOURCE_DIR "/configs/shakespeare_char_cpu.json", 0, NULL));
    assert_int_equal(c.model.n_layer, 4);
    assert_int_equal(c.model.n_embd, 128);
    assert_int_equal(c.model.block_size, 64);
    assert_int_equal(c.model.bias, 1);
    assert_int_equal(c.micro_batch, 12);
    assert_int_equal(c.train_iters, 2000);
    assert_int_equal(c.eval_iters, 20);
    assert_int_equal(c.ckpt_interval, 500);

    LF_ASSERT_OK(lf_train_config_load(&c, LF_SOURCE_DIR "/configs/default_run.json", 0, NULL));
    assert_string_equal(c.dataset, "out/run/data");
    assert_string_equal(c.out_dir, "out/run");

    /* every config in configs/ loads and round-trips */
    DIR *d = opendir(LF_SOURCE_DIR "/configs");
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/configs/%s", LF_SOURCE_DIR, e->d_name);
        lf_train_config x, y;
        LF_ASSERT_OK(lf_train_config_load(&x, path, 0, NULL));
        char *j = lf_train_config_to_json(&x);
        assert_non_null(j);
        LF_ASSERT_OK(lf_train_config_parse(&y, j, "resolved", 0, NULL));
        char *j2 = lf_train_config_to_json(&y);
        assert_string_equal(j, j2);
        lf_free(j);
        lf_free(j2);
        n++;
    }
    closedir(d);
    assert_true(n >= 3);
}

static void test_overrides(void **state) {
    (void)state;
    lf_train_config c;
    const char *ov[] = {"optimizer.params.lr=3e-4", "model.n_layer=6", "n_head=8", "n_embd=256",
                        "max_iters=123", "optimizer.params.betas=[0.9,0.95]", "bias=False",
                        "scheduler.type=constant", "out_dir=2024", "data.sampling=sequential",
                        "seed=18446744073709551615", "dropout=0.1", "--eval_iters=7"};
    LF_ASSERT_OK(lf_train_config_load(&c, LF_SOURCE_DIR "/configs/shakespeare_char.json", 13, ov));
    assert_true(c.lr == 3e-4f);
    assert_true(c.min_lr == 1e-4f); /* given in the file: not re-derived */
    assert_int_equal(c.model.n_layer, 6);
    assert_int_equal(c.model.n_head, 8);
    assert_int_equal(c.model.n_embd, 256);
    assert_int_equal(c.train_iters, 123);
    assert_int_equal(c.decay_iters, 5000);
    assert_true(c.beta1 == 0.9f && c.beta2 == 0.95f);
    assert_int_equal(c.model.bias, 0);
    assert_int_equal(c.sched_type, LF_SCHED_CONSTANT);
    assert_string_equal(c.out_dir, "2024");
    assert_int_equal(c.sampling, LF_SAMPLING_SEQUENTIAL);
    assert_true(c.seed == UINT64_MAX);
    assert_true(c.model.dropout == 0.1f);
    assert_int_equal(c.eval_iters, 7);

    /* later overrides win; a section given as a JSON object */
    const char *ov2[] = {"data.dataset=x", "n_layer=2", "model.n_layer=3", "model={\"n_head\": 2, \"n_embd\": 64}"};
    LF_ASSERT_OK(lf_train_config_load(&c, NULL, 4, ov2));
    assert_int_equal(c.model.n_layer, 3);
    assert_int_equal(c.model.n_head, 2);
    assert_int_equal(c.model.n_embd, 64);

    /* ambiguous bare keys list the candidates */
    const char *amb[] = {"data.dataset=x", "type=constant"};
    ASSERT_ERR_EQ(lf_train_config_load(&c, NULL, 2, amb), LF_ERR_CONFIG,
                  "ambiguous key 'type' on the command line: it names optimizer.type, scheduler.type; write the full path");
    const char *amb2[] = {"data.dataset=x", "interval=5"};
    ASSERT_ERR_EQ(lf_train_config_load(&c, NULL, 2, amb2), LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("eval.interval, checkpoint.interval");

    /* errors from overrides say "on the command line" */
    const char *bad[] = {"data.dataset=x", "model.n_layer=0"};
    ASSERT_ERR_EQ(lf_train_config_load(&c, NULL, 2, bad), LF_ERR_CONFIG,
                  "key 'model.n_layer' on the command line: 0 is out of range [1, 1024]");
    const char *bad2[] = {"data.dataset=x", "train_iters=abc"};
    ASSERT_ERR_EQ(lf_train_config_load(&c, NULL, 2, bad2), LF_ERR_CONFIG,
                  "key 'train_iters' on the command line: expected an integer, got \"abc\"");
    const char *bad3[] = {"data.dataset=x", "n_layer"};
    ASSERT_ERR_EQ(lf_train_config_load(&c, NULL, 2, bad3), LF_ERR_CONFIG,
                  "override 'n_layer' on the command line: expected key=value");
    const char *bad4[] = {"data.dataset=x", "lrr=1"};
    ASSERT_ERR_EQ(lf_train_config_load(&c, NULL, 2, bad4), LF_ERR_CONFIG,
                  "unknown key 'lrr' on the command line (did you mean 'optimizer.params.lr'?)");

    /* the whole result is validated once: a bad file value fixed on the command line passes */
    const char *fix[] = {"model.dropout=0.1"};
    LF_ASSERT_OK(parse_ov(&c, "{\"data\": {\"dataset\": \"d\"}, \"model\": {\"dropout\": 1.5}}", 1, fix));
    assert_true(c.model.dropout == 0.1f);
    /* *cfg untouched on failure */
    c.model.n_layer = 77;
    assert_int_equal(lf_train_config_load(&c, NULL, 2, bad), LF_ERR_CONFIG);
    assert_int_equal(c.model.n_layer, 77);
}

static void test_unknown_keys(void **state) {
    (void)state;
    lf_train_config c;
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"params\": {\"lrr\": 1}}"), LF_ERR_CONFIG,
                  "unknown key 'optimizer.params.lrr' in 'cfg.json' (did you mean 'optimizer.params.lr'?)");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"lr\": 1}"), LF_ERR_CONFIG,
                  "unknown key 'model.lr' in 'cfg.json' (did you mean 'optimizer.params.lr'?)");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_layers\": 1}"), LF_ERR_CONFIG,
                  "unknown key 'model.n_layers' in 'cfg.json' (did you mean 'model.n_layer'?)");
    ASSERT_ERR_EQ(parse_with(&c, "\"frobnicate\": {\"xyzzy\": 1}"), LF_ERR_CONFIG,
                  "unknown key 'frobnicate' in 'cfg.json'");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": 5"), LF_ERR_CONFIG,
                  "key 'model' in 'cfg.json': expected an object (a section), got 5");
    ASSERT_ERR_EQ(parse_with(&c, "\"seed\": 1, \"seed\": 2"), LF_ERR_CONFIG, "duplicate key 'seed' in 'cfg.json'");
    ASSERT_ERR_EQ(parse_ov(&c, "[1, 2]", 0, NULL), LF_ERR_CONFIG,
                  "config 'cfg.json': expected a JSON object at the top level");
}

static void test_type_errors(void **state) {
    (void)state;
    lf_train_config c;
    ASSERT_ERR_EQ(parse_with(&c, "\"train_iters\": \"abc\""), LF_ERR_CONFIG,
                  "key 'train_iters' in 'cfg.json': expected an integer, got \"abc\"");
    ASSERT_ERR_EQ(parse_with(&c, "\"train_iters\": 12.5"), LF_ERR_CONFIG,
                  "key 'train_iters' in 'cfg.json': expected an integer, got 12.5");
    LF_ASSERT_OK(parse_with(&c, "\"train_iters\": 1e3, \"eval\": {\"iters\": 12.0}"));
    assert_int_equal(c.train_iters, 1000);
    assert_int_equal(c.eval_iters, 12);
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_layer\": 1e30}"), LF_ERR_CONFIG,
                  "key 'model.n_layer' in 'cfg.json': 1e30 is out of range [1, 1024]");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_layer\": 99999999999999999999}"), LF_ERR_CONFIG,
                  "key 'model.n_layer' in 'cfg.json': 99999999999999999999 is out of range [1, 1024]");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_layer\": 4294967297}"), LF_ERR_CONFIG,
                  "key 'model.n_layer' in 'cfg.json': 4294967297 is out of range [1, 1024]");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"bias\": 1}"), LF_ERR_CONFIG,
                  "key 'model.bias' in 'cfg.json': expected true or false, got 1");
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"params\": {\"lr\": \"fast\"}}"), LF_ERR_CONFIG,
                  "key 'optimizer.params.lr' in 'cfg.json': expected a number, got \"fast\"");
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"params\": {\"betas\": [0.9]}}"), LF_ERR_CONFIG,
                  "key 'optimizer.params.betas' in 'cfg.json': expected an array of 2 numbers, got [0.9]");
    ASSERT_ERR_EQ(parse_with(&c, "\"scheduler\": {\"type\": \"linear\"}"), LF_ERR_CONFIG,
                  "key 'scheduler.type' in 'cfg.json': \"linear\" is not one of: cosine, constant, WarmupLR, "
                  "WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"arch\": \"mamba\"}"), LF_ERR_CONFIG,
                  "key 'model.arch' in 'cfg.json': \"mamba\" is not one of: gpt2, llama");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"tie_embeddings\": false}"), LF_ERR_CONFIG,
                  "key 'model.tie_embeddings' in 'cfg.json': gpt2's lm_head is always tied to wte");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"arch\": \"llama\", \"n_head\": 4, \"n_kv_head\": 3}"),
                  LF_ERR_CONFIG, "model.n_head 4 is not divisible by model.n_kv_head 3 (each key/value head serves a "
                  "whole group of query heads)");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"arch\": \"llama\", \"n_head\": 8, \"n_embd\": 72}"),
                  LF_ERR_CONFIG, "head size model.n_embd / model.n_head = 72 / 8 = 9 is odd: RoPE rotates pairs of "
                  "channels");
    LF_ASSERT_OK(parse_with(&c, "\"model\": {\"arch\": \"llama\", \"bias\": true}")); /* Qwen2's q/k/v biases */
    assert_int_equal(c.model.bias, 1);
    LF_ASSERT_OK(parse_with(&c, "\"model\": {\"arch\": \"llama\"}"));
    assert_int_equal(c.model.bias, 0); /* llama's default, though gpt2's is true */
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_kv_head\": 2}"), LF_ERR_CONFIG,
                  "model.n_kv_head 2: gpt2 has one key/value head per query head (4); grouped-query attention is "
                  "model.arch llama");
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"type\": \"SGD\"}"), LF_ERR_CONFIG,
                  "key 'optimizer.type' in 'cfg.json': \"SGD\": SGD is not implemented in llmforge; use AdamW");
    LF_ASSERT_OK(parse_with(&c, "\"optimizer\": {\"type\": \"adamw\"}, \"scheduler\": {\"type\": \"Constant\"}"));
    assert_string_equal(c.optimizer_type, "AdamW");
    assert_int_equal(c.sched_type, LF_SCHED_CONSTANT);
    ASSERT_ERR_EQ(parse_with(&c, "\"out_dir\": 3"), LF_ERR_CONFIG,
                  "key 'out_dir' in 'cfg.json': expected a string, got 3");
    ASSERT_ERR_EQ(parse_with(&c, "\"eval\": {\"iters\": null}"), LF_ERR_CONFIG,
                  "key 'eval.iters' in 'cfg.json': expected an integer, got null");

    /* seed: a 64-bit integer, exact, integer literals only */
    LF_ASSERT_OK(parse_with(&c, "\"seed\": 18446744073709551615"));
    assert_true(c.seed == UINT64_MAX);
    LF_ASSERT_OK(parse_with(&c, "\"seed\": 9007199254740993"));
    assert_true(c.seed == 9007199254740993ull); /* 2^53 + 1: not a double */
    ASSERT_ERR_EQ(parse_with(&c, "\"seed\": 18446744073709551616"), LF_ERR_CONFIG,
                  "key 'seed' in 'cfg.json': 18446744073709551616 is out of range [0, 18446744073709551615]");
    ASSERT_ERR_EQ(parse_with(&c, "\"seed\": -1"), LF_ERR_CONFIG,
                  "key 'seed' in 'cfg.json': -1 is out of range [0, 18446744073709551615]");
    ASSERT_ERR_EQ(parse_with(&c, "\"seed\": 1.5"), LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("key 'seed' in 'cfg.json': expected an unsigned 64-bit integer");

    /* strings longer than the field */
    char big[LF_PATH_MAX + 64];
    memset(big, 'a', sizeof big);
    memcpy(big, "\"out_dir\": \"", 12);
    big[sizeof big - 2] = '"';
    big[sizeof big - 1] = 0;
    ASSERT_ERR_EQ(parse_with(&c, big), LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("is longer than the 1023 allowed");
}

static void test_range_errors(void **state) {
    (void)state;
    lf_train_config c;
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"dropout\": 1.5}"), LF_ERR_CONFIG,
                  "key 'model.dropout' in 'cfg.json': 1.5 is out of range [0, 1)");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"dropout\": 1}"), LF_ERR_CONFIG,
                  "key 'model.dropout' in 'cfg.json': 1.0 is out of range [0, 1)");
    LF_ASSERT_OK(parse_with(&c, "\"model\": {\"dropout\": 0.99}"));
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_layer\": 1025}"), LF_ERR_CONFIG,
                  "key 'model.n_layer' in 'cfg.json': 1025 is out of range [1, 1024]");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_head\": 0}"), LF_ERR_CONFIG,
                  "key 'model.n_head' in 'cfg.json': 0 is out of range [1, 1024]");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_embd\": 65537}"), LF_ERR_CONFIG,
                  "key 'model.n_embd' in 'cfg.json': 65537 is out of range [1, 65536]");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"block_size\": 0}"), LF_ERR_CONFIG,
                  "key 'model.block_size' in 'cfg.json': 0 is out of range [1, 1048576]");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_embd\": 100, \"n_head\": 6}"), LF_ERR_CONFIG,
                  "key 'model.n_embd' in 'cfg.json': 100 is not divisible by model.n_head 6 (set in 'cfg.json')");
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"n_embd\": 130}"), LF_ERR_CONFIG,
                  "key 'model.n_embd' in 'cfg.json': 130 is not divisible by model.n_head 4 (set by default)");
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"params\": {\"lr\": 0}}"), LF_ERR_CONFIG,
                  "key 'optimizer.params.lr' in 'cfg.json': 0.0 is out of range (0, inf)");
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"params\": {\"lr\": 1e300}}"), LF_ERR_CONFIG,
                  "key 'optimizer.params.lr' in 'cfg.json': 1e300 is out of range (0, inf)");
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"params\": {\"betas\": [0.9, 1.0]}}"), LF_ERR_CONFIG,
                  "key 'optimizer.params.betas' in 'cfg.json': element 1 (1.0) is out of range [0, 1)");
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"params\": {\"eps\": 0}}"), LF_ERR_CONFIG, NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"optimizer\": {\"params\": {\"weight_decay\": -0.1}}"), LF_ERR_CONFIG,
                  "key 'optimizer.params.weight_decay' in 'cfg.json': -0.1 is out of range [0, inf)");
    ASSERT_ERR_EQ(parse_with(&c, "\"gradient_clipping\": -1"), LF_ERR_CONFIG, NULL);
    LF_ASSERT_OK(parse_with(&c, "\"gradient_clipping\": 0"));
    ASSERT_ERR_EQ(parse_with(&c, "\"train_iters\": 0"), LF_ERR_CONFIG,
                  "key 'train_iters' in 'cfg.json': 0 is out of range [1, 9223372036854775807]");
    ASSERT_ERR_EQ(parse_with(&c, "\"eval\": {\"iters\": 0}"), LF_ERR_CONFIG,
                  "key 'eval.iters' in 'cfg.json': 0 is out of range [1, 2147483647]");
    ASSERT_ERR_EQ(parse_with(&c, "\"checkpoint\": {\"keep_last\": 0}"), LF_ERR_CONFIG, NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"steps_per_print\": 0"), LF_ERR_CONFIG, NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"train_micro_batch_size_per_gpu\": 65537"), LF_ERR_CONFIG,
                  "key 'train_micro_batch_size_per_gpu' in 'cfg.json': 65537 is out of range [1, 65536]");
    ASSERT_ERR_EQ(parse_with(&c, "\"train_micro_batch_size_per_gpu\": 0"), LF_ERR_CONFIG, NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"data\": {\"dataset\": \"\"}"), LF_ERR_CONFIG, NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"scheduler\": {\"warmup_iters\": -1}"), LF_ERR_CONFIG, NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"model\": {\"vocab_size\": -1}"), LF_ERR_CONFIG, NULL);
    LF_ASSERT_OK(parse_with(&c, "\"model\": {\"vocab_size\": 50304}"));
    assert_int_equal(c.model.vocab_size, 50304);
}

static void test_batch_identity(void **state) {
    (void)state;
    lf_train_config c;
    LF_ASSERT_OK(parse_with(&c, "\"train_micro_batch_size_per_gpu\": 12, \"gradient_accumulation_steps\": 2"));
    assert_int_equal(c.train_batch_size, 24);
    LF_ASSERT_OK(parse_with(&c, "\"train_batch_size\": 48, \"train_micro_batch_size_per_gpu\": 12"));
    assert_int_equal(c.grad_accum, 4);
    assert_int_equal(c.micro_batch, 12);
    LF_ASSERT_OK(parse_with(&c, "\"train_batch_size\": 48, \"gradient_accumulation_steps\": 2"));
    assert_int_equal(c.micro_batch, 24);
    assert_int_equal(c.grad_accum, 2);
    LF_ASSERT_OK(parse_with(&c, "\"train_batch_size\": 48"));
    assert_int_equal(c.micro_batch, 48);
    assert_int_equal(c.grad_accum, 1);
    LF_ASSERT_OK(parse_with(&c, "\"train_batch_size\": 0, \"train_micro_batch_size_per_gpu\": 5"));
    assert_int_equal(c.train_batch_size, 5);
    LF_ASSERT_OK(parse_with(&c, "\"train_batch_size\": 24, \"train_micro_batch_size_per_gpu\": 12, "
                                "\"gradient_accumulation_steps\": 2"));
    ASSERT_ERR_EQ(parse_with(&c, "\"train_batch_size\": 100, \"train_micro_batch_size_per_gpu\": 12, "
                                 "\"gradient_accumulation_steps\": 1"),
                  LF_ERR_CONFIG,
                  "key 'train_batch_size' in 'cfg.json': train_batch_size 100 != train_micro_batch_size_per_gpu 12 "
                  "× gradient_accumulation_steps 1 × world size 1 = 12");
    ASSERT_ERR_EQ(parse_with(&c, "\"train_batch_size\": 50, \"train_micro_batch_size_per_gpu\": 12"), LF_ERR_CONFIG,
                  "key 'train_batch_size' in 'cfg.json': train_batch_size 50 is not divisible by "
                  "train_micro_batch_size_per_gpu 12 × world size 1");
    ASSERT_ERR_EQ(parse_with(&c, "\"train_batch_size\": 50, \"gradient_accumulation_steps\": 3"), LF_ERR_CONFIG,
                  NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"train_batch_size\": 100000"), LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("out of range [1, 65536]");
    /* mixed origins: the file gives two, the command line the third */
    const char *ov[] = {"train_batch_size=36"};
    LF_ASSERT_OK(parse_ov(&c, "{\"data\": {\"dataset\": \"d\"}, \"train_micro_batch_size_per_gpu\": 12}", 1, ov));
    assert_int_equal(c.grad_accum, 3);
}

static void test_deepspeed_off_features(void **state) {
    (void)state;
    lf_train_config c;
    LF_ASSERT_OK(parse_with(&c, "\"fp16\": {\"enabled\": false, \"loss_scale\": 0, \"initial_scale_power\": 16, "
                                "\"loss_scale_window\": 1000, \"hysteresis\": 2, \"min_loss_scale\": 1}, "
                                "\"bf16\": {\"enabled\": false}, \"zero_optimization\": {\"stage\": 0}, "
                                "\"wall_clock_breakdown\": false, \"tensorboard\": {\"enabled\": false}"));
    /* fp16 is a real setting now (DeepSpeed's loss scaler); bf16 with it is an error */
    LF_ASSERT_OK(parse_with(&c, "\"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 12}"));
    assert_int_equal(c.fp16, 1);
    assert_int_equal(c.fp16_scale_power, 12);
    ASSERT_ERR_EQ(parse_with(&c, "\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}"), LF_ERR_CONFIG,
                  NULL);
    LF_ASSERT_ERR_CONTAINS("choose one");
    /* bf16 is a real setting now (the cpu-bf16 backend) */
    assert_int_equal(c.bf16, 0);
    LF_ASSERT_OK(parse_with(&c, "\"bf16\": {\"enabled\": true}"));
    assert_int_equal(c.bf16, 1);
    ASSERT_ERR_EQ(parse_with(&c, "\"bf16\": {\"enabled\": 1}"), LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("bf16.enabled");
    /* ZeRO is a real setting now: stages 0-3, offload_optimizer none/cpu, DeepSpeed's tuning keys accepted */
    LF_ASSERT_OK(parse_with(&c, "\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": "
                                "\"cpu\", \"pin_memory\": true}, \"overlap_comm\": true, \"reduce_bucket_size\": 5e8}"));
    assert_int_equal(c.zero_stage, 2);
    assert_int_equal(c.offload_optimizer, 1);
    ASSERT_ERR_EQ(parse_with(&c, "\"zero_optimization\": {\"stage\": 4}"), LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("key 'zero_optimization.stage' in 'cfg.json': 4 is out of range [0, 3]");
    ASSERT_ERR_EQ(parse_with(&c, "\"zero_optimization\": {\"stage\": -1}"), LF_ERR_CONFIG, NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"nvme\"}}"),
                  LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("zero_optimization.offload_optimizer.device");
    /* monitoring keys are real settings now */
    LF_ASSERT_OK(parse_with(&c, "\"wall_clock_breakdown\": true, \"tensorboard\": {\"enabled\": true, "
                                "\"output_path\": \"tb\", \"job_name\": \"j\"}"));
    assert_int_equal(c.wall_clock_breakdown, 1);
    assert_int_equal(c.tb_enabled, 1);
    assert_string_equal(c.tb_output_path, "tb");
    assert_string_equal(c.tb_job_name, "j");
    LF_ASSERT_OK(parse_with(&c, "\"monitor\": {\"prometheus\": {\"port\": 9400, \"host\": \"0.0.0.0\"}, "
                                "\"alerts\": {\"nan\": {\"action\": \"skip_step\"}, \"loss_spike\": "
                                "{\"action\": \"skip_step\", \"zscore\": 4, \"window\": 20}, "
                                "\"stall\": {\"seconds\": 30, \"action\": \"exit\"}}}"));
    assert_int_equal(c.prom_port, 9400);
    assert_string_equal(c.prom_host, "0.0.0.0");
    assert_int_equal(c.alert_nan_action, LF_ALERT_SKIP);
    assert_int_equal(c.alert_spike_action, LF_ALERT_SKIP);
    assert_int_equal(c.alert_spike_window, 20);
    assert_int_equal(c.alert_stall_action, LF_ALERT_EXIT);
    ASSERT_ERR_EQ(parse_with(&c, "\"monitor\": {\"alerts\": {\"nan\": {\"action\": \"log\"}}}"), LF_ERR_CONFIG,
                  NULL);
    LF_ASSERT_ERR_CONTAINS("monitor.alerts.nan.action");
    LF_ASSERT_ERR_CONTAINS("stop, skip_step");
    ASSERT_ERR_EQ(parse_with(&c, "\"monitor\": {\"prometheus\": {\"port\": 70000}}"), LF_ERR_CONFIG, NULL);
    /* eval.tasks: an array of strings in the file, a comma-separated list on the command line */
    LF_ASSERT_OK(parse_with(&c, "\"eval\": {\"tasks\": [\"a.jsonl\", \"b/c.jsonl\"]}, \"checkpoint\": "
                                "{\"best_metric\": \"arith/exact_match\", \"greater_is_better\": true}"));
    assert_string_equal(c.eval_tasks, "a.jsonl\nb/c.jsonl");
    assert_string_equal(c.best_metric, "arith/exact_match");
    assert_int_equal(c.greater_is_better, 1);
    char *js = lf_train_config_to_json(&c);
    assert_non_null(strstr(js, "\"tasks\": [\"a.jsonl\", \"b/c.jsonl\"]"));
    lf_train_config back;
    LF_ASSERT_OK(lf_train_config_parse(&back, js, "dump", 0, NULL));
    assert_string_equal(back.eval_tasks, c.eval_tasks);
    lf_free(js);
    const char *ovt[] = {"data.dataset=d", "eval.tasks=x.jsonl,y.jsonl"};
    LF_ASSERT_OK(lf_train_config_load(&c, NULL, 2, ovt));
    assert_string_equal(c.eval_tasks, "x.jsonl\ny.jsonl");
    ASSERT_ERR_EQ(parse_with(&c, "\"eval\": {\"tasks\": [\"a\", 3]}"), LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("eval.tasks");
    ASSERT_ERR_EQ(parse_with(&c, "\"fp16\": {\"enabled\": \"yes\"}"), LF_ERR_CONFIG, NULL);
    ASSERT_ERR_EQ(parse_with(&c, "\"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": {\"dev\": 1}}"),
                  LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("unknown key 'zero_optimization.offload_optimizer.dev'");
    const char *ov[] = {"data.dataset=d", "zero_optimization.stage=3"};
    LF_ASSERT_OK(lf_train_config_load(&c, NULL, 2, ov));
    assert_int_equal(c.zero_stage, 3);
    const char *ov5[] = {"data.dataset=d", "zero_optimization.stage=5"};
    ASSERT_ERR_EQ(lf_train_config_load(&c, NULL, 2, ov5), LF_ERR_CONFIG, NULL);
    LF_ASSERT_ERR_CONTAINS("zero_optimization.stage");
}

static void assert_config_equal(const lf_train_config *a, const lf_train_config *b) {
    assert_string_equal(a->arch, b->arch);
    assert_memory_equal(&a->model, &b->model, sizeof a->model);
    assert_string_equal(a->dataset, b->dataset);
    assert_int_equal(a->sampling, b->sampling);
    assert_int_equal(a->train_batch_size, b->train_batch_size);
    assert_int_equal(a->micro_batch, b->micro_batch);
    assert_int_equal(a->grad_accum, b->grad_accum);
    assert_int_equal(a->train_iters, b->train_iters);
    assert_string_equal(a->optimizer_type, b->optimizer_type);
    assert_memory_equal(&a->lr, &b->lr, sizeof(float));
    assert_memory_equal(&a->beta1, &b->beta1, sizeof(float));
    assert_memory_equal(&a->beta2, &b->beta2, sizeof(float));
    assert_memory_equal(&a->eps, &b->eps, sizeof(float));
    assert_memory_equal(&a->weight_decay, &b->weight_decay, sizeof(float));
    assert_int_equal(a->sched_type, b->sched_type);
    assert_int_equal(a->warmup_iters, b->warmup_iters);
    assert_int_equal(a->decay_iters, b->decay_iters);
    assert_memory_equal(&a->min_lr, &b->min_lr, sizeof(float));
    assert_memory_equal(&a->grad_clip, &b->grad_clip, sizeof(float));
    assert_int_equal(a->eval_interval, b->eval_interval);
    assert_int_equal(a->eval_iters, b->eval_iters);
    assert_int_equal(a->ckpt_interval, b->ckpt_interval);
    assert_int_equal(a->keep_last, b->keep_last);
    assert_int_equal(a->steps_per_print, b->steps_per_print);
    assert_true(a->seed == b->seed);
    assert_string_equal(a->out_dir, b->out_dir);
}

static void test_round_trip(void **state) {
    (void)state;
    lf_train_config a, b;
    const char *ov[] = {"optimizer.params.lr=3e-4", "optimizer.params.betas=[0.9,0.95]", "eps=1.2345678e-7",
                        "weight_decay=0.123456789", "seed=18446744073709551615", "data.sampling=sequential",
                        "scheduler.type=constant", "model.vocab_size=65", "model.dropout=0.3333333",
                        "data.dataset=dir with \"quotes\" and \\backslash\\ and \ttab", "gradient_clipping=0",
                        "train_micro_batch_size_per_gpu=12", "gradient_accumulation_steps=4", "scheduler.min_lr=1.1754944e-38"};
    LF_ASSERT_OK(lf_train_config_load(&a, LF_SOURCE_DIR "/configs/shakespeare_char.json", 14, ov));
    assert_int_equal(a.train_batch_size, 48);
    char *j = lf_train_config_to_json(&a);
    assert_non_null(j);
    LF_ASSERT_OK(lf_train_config_parse(&b, j, "resolved", 0, NULL));
    assert_config_equal(&a, &b);
    char *j2 = lf_train_config_to_json(&b);
    assert_string_equal(j, j2);

    /* nested layout with DeepSpeed top-level keys; floats printed short */
    cJSON *o = cJSON_Parse(j);
    assert_non_null(o);
    cJSON *opt = cJSON_GetObjectItemCaseSensitive(o, "optimizer");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(opt, "type")->valuestring, "AdamW");
    cJSON *params = cJSON_GetObjectItemCaseSensitive(opt, "params");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(params, "betas")), 2);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "model"), "vocab_size"));
    const char *top[] = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                         "gradient_clipping", "steps_per_print", "seed", "out_dir", "train_iters",
                         "model", "data", "scheduler", "eval", "checkpoint"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        assert_non_null(cJSON_GetObjectItemCaseSensitive(o, top[i]));
    cJSON_Delete(o);
    assert_non_null(strstr(j, "\"lr\": 0.0003,"));
    assert_non_null(strstr(j, "\"seed\": 18446744073709551615"));
    assert_non_null(strstr(j, "\"gradient_clipping\": 0.0"));
    lf_free(j);
    lf_free(j2);

    /* defaults round-trip too (dataset set) */
    a = lf_train_config_default();
    snprintf(a.dataset, sizeof a.dataset, "d");
    j = lf_train_config_to_json(&a);
    LF_ASSERT_OK(lf_train_config_parse(&b, j, "resolved", 0, NULL));
    assert_config_equal(&a, &b);
    lf_free(j);
}

static void test_files(void **state) {
    (void)state;
    lf_train_config c;
    ASSERT_ERR_EQ(parse_ov(&c, "{\n  \"model\": {\n    \"n_layer\": 4,,\n  }\n}", 0, NULL), LF_ERR_FORMAT,
                  "config 'cfg.json': invalid JSON near line 3, column 19");
    ASSERT_ERR_EQ(parse_ov(&c, "", 0, NULL), LF_ERR_FORMAT, NULL);
    ASSERT_ERR_EQ(parse_ov(&c, "{\"seed\": 1} trailing", 0, NULL), LF_ERR_FORMAT, NULL);

    char *dir = lf_test_tmpdir();
    assert_non_null(dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.json", dir);
    const char *bad = "{\"data\": {\"dataset\": \"d\"},\n\"train_iters\": }\n";
    LF_ASSERT_OK(lf_file_write_all(path, bad, strlen(bad)));
    ASSERT_ERR_EQ(lf_train_config_load(&c, path, 0, NULL), LF_ERR_FORMAT, NULL);
    LF_ASSERT_ERR_CONTAINS(path);
    LF_ASSERT_ERR_CONTAINS("line 2");

    snprintf(path, sizeof path, "%s/unknown.json", dir);
    const char *unk = "{\"data\": {\"dataset\": \"d\"}, \"optimizer\": {\"params\": {\"lrr\": 1}}}";
    LF_ASSERT_OK(lf_file_write_all(path, unk, strlen(unk)));
    ASSERT_ERR_EQ(lf_train_config_load(&c, path, 0, NULL), LF_ERR_CONFIG, NULL);
    char want[1200];
    snprintf(want, sizeof want, "unknown key 'optimizer.params.lrr' in '%s' (did you mean 'optimizer.params.lr'?)",
             path);
    assert_string_equal(lf_last_error(), want);

    snprintf(path, sizeof path, "%s/missing.json", dir);
    ASSERT_ERR_EQ(lf_train_config_load(&c, path, 0, NULL), LF_ERR_NOT_FOUND, NULL);
    LF_ASSERT_ERR_CONTAINS(path);
    lf_test_rmrf(dir);
    free(dir);
}

static void test_help(void **state) {
    (void)state;
    size_t n = lf_train_config_help(NULL, 0);
    assert_true(n > 500);
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    assert_int_equal(lf_train_config_help(buf, n + 1), n);
    assert_int_equal(strlen(buf), n);
    const char *want[] = {"model.n_layer", "integer in [1, 1024]; default 4", "optimizer.params.betas",
                          "scheduler.min_lr", "optimizer.params.lr / 10", "(also --max_iters)", "fp16.enabled",
                          "zero_optimization.stage         integer in [0, 3]; default 0", "integer >= 1; default 2000", "one of: cosine constant WarmupLR",
                          "zero_optimization.stage3_prefetch_bucket_size", "scheduler.params.cycle_momentum"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(buf, want[i])) fail_msg("help lacks '%s':\n%s", want[i], buf);
    char small[16];
    assert_int_equal(lf_train_config_help(small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_true(n < 65536); /* the CLI's buffer */
    free(buf);
}

/* backend: the choices, their validation against what this program has (no
 * CUDA backend is registered in this test: "cuda" is refused naming the
 * key), and the command line over the file. */
static void test_backend_key(void **state) {
    (void)state;
    lf_train_config c;
    LF_ASSERT_OK(parse_with(&c, ""));
    assert_string_equal(c.backend, "auto");
    LF_ASSERT_OK(parse_with(&c, "\"backend\": \"cpu-fenced\""));
    assert_string_equal(c.backend, "cpu-fenced");
    LF_ASSERT_OK(parse_with(&c, "\"backend\": \"CPU\""));
    assert_string_equal(c.backend, "cpu");
    ASSERT_ERR_EQ(parse_with(&c, "\"backend\": \"gpu\""), LF_ERR_CONFIG, NULL);
    const char *e = lf_last_error();
    if (!strstr(e, "'backend'") || !strstr(e, "auto") || !strstr(e, "cuda") || !strstr(e, "cpu-fenced"))
        fail_msg("the error names neither the key nor the choices: %s", e);
    ASSERT_ERR_EQ(parse_with(&c, "\"backend\": \"cuda\""), LF_ERR_CONFIG, NULL);
    e = lf_last_error();
    if (!strstr(e, "key 'backend' in 'cfg.json'") || !strstr(e, "this build has no CUDA backend"))
        fail_msg("'cuda' without a CUDA backend: %s", e);
    const char *ov[] = {"--backend=cpu"};
    LF_ASSERT_OK(parse_ov(&c, "{\"data\": {\"dataset\": \"d\"}, \"backend\": \"cpu-fenced\"}", 1, ov));
    assert_string_equal(c.backend, "cpu");
    const char *bad[] = {"--backend=cuda"};
    ASSERT_ERR_EQ(parse_ov(&c, "{\"data\": {\"dataset\": \"d\"}}", 1, bad), LF_ERR_CONFIG, NULL);
    if (!strstr(lf_last_error(), "key 'backend' on the command line")) fail_msg("%s", lf_last_error());
    /* the dump carries it and reads back */
    LF_ASSERT_OK(parse_with(&c, "\"backend\": \"cpu\""));
    char *json = lf_train_config_to_json(&c);
    assert_non_null(strstr(json, "\"backend\""));
    lf_train_config d;
    LF_ASSERT_OK(lf_train_config_parse(&d, json, "dump", 0, NULL));
    assert_string_equal(d.backend, "cpu");
    lf_free(json);
}

static void test_lr_schedule(void **state) {
    (void)state;
    lf_train_config c = lf_train_config_default();
    c.lr = 1e-3f;
    c.min_lr = 1e-4f;
    c.warmup_iters = 100;
    c.decay_iters = 5000;
    /* nanoGPT get_lr(it) with learning_rate=1e-3, min_lr=1e-4, warmup 100, decay 5000 (Python doubles) */
    struct { long it; double want; } k[] = {
        {0, 9.900990099009901e-06},   {50, 0.000504950495049505},   {99, 0.0009900990099009901},
        {100, 0.001},                 {1000, 0.0009271396472013282}, {2550, 0.00055},
        {4999, 0.00010000009248900101}, {5000, 0.0001},              {5001, 0.0001},
        {100000, 0.0001},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        double got = lf_lr_at(&c, k[i].it);
        if (fabs(got - k[i].want) > 1e-6 * k[i].want)
            fail_msg("lr at %ld: %.10g, want %.10g", k[i].it, got, k[i].want);
    }
    /* the ends exactly */
    assert_true(lf_lr_at(&c, 100) == 1e-3f);
    assert_true(lf_lr_at(&c, 5000) == 1e-4f);
    /* constant */
    c.sched_type = LF_SCHED_CONSTANT;
    assert_true(lf_lr_at(&c, 0) == 1e-3f);
    assert_true(lf_lr_at(&c, 99999) == 1e-3f);
    /* no warmup; warmup == decay does not divide by zero */
    c.sched_type = LF_SCHED_COSINE;
    c.warmup_iters = 0;
    assert_true(lf_lr_at(&c, 0) == 1e-3f);
    c.warmup_iters = 100;
    c.decay_iters = 100;
    assert_true(lf_lr_at(&c, 100) == 1e-4f);
    assert_true(isfinite(lf_lr_at(&c, 100)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),       cmocka_unit_test(test_checked_in_configs),
        cmocka_unit_test(test_overrides),      cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_type_errors),    cmocka_unit_test(test_range_errors),
        cmocka_unit_test(test_batch_identity), cmocka_unit_test(test_deepspeed_off_features),
        cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_files),
        cmocka_unit_test(test_help),           cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_backend_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
