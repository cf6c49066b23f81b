/*
 * The architecture registry (include/llmforge/model.h, src/model/arch.c):
 * the names come from the registered tables in lf_arch order, every name
 * parses back to its value, the lists for messages and presets are built
 * from the tables, and the per-family facts the rest of llmforge asks for
 * (the rules on hand-set keys, lookup-only tables, a fixed context) come
 * from the family's table.
 */
#include <string.h>
#include "test_util.h"
#include "llmforge/model.h"

static void test_names_parse_back(void **state) {
    (void)state;
    const int n = lf_arch_count();
    assert_true(n >= 2);
    const char *const *names = lf_arch_names();
    for (int i = 0; i < n; i++) {
        assert_non_null(names[i]);
        assert_string_equal(names[i], lf_arch_name((lf_arch)i));
        lf_arch a = (lf_arch)-1;
        LF_ASSERT_OK(lf_arch_parse(names[i], &a));
        assert_int_equal((int)a, i);
        assert_non_null(strstr(lf_arch_list(), names[i]));
    }
    assert_null(names[n]);
    assert_string_equal(lf_arch_name((lf_arch)n), "?");
    assert_string_equal(lf_arch_name(LF_ARCH_GPT2), "gpt2");
    assert_string_equal(lf_arch_name(LF_ARCH_LLAMA), "llama");
    assert_string_equal(lf_arch_list(), "gpt2, llama");
    lf_arch a;
    assert_int_equal(lf_arch_parse("mamba", &a), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("model.arch 'mamba' is not one of gpt2, llama");
    lf_model_config c = {.arch = (lf_arch)n, .n_layer = 1, .n_head = 1, .n_embd = 8, .block_size = 8,
                         .vocab_size = 8};
    assert_int_equal(lf_model_config_resolve(&c), LF_ERR_CONFIG);
}

static void test_presets_from_tables(void **state) {
    (void)state;
    assert_string_equal(lf_model_preset_names(), "gpt2-124m, shakespeare-char-cpu, smollm-135m, llama-3.2-1b");
    lf_model_config c;
    LF_ASSERT_OK(lf_model_preset("smollm-135m", &c));
    assert_int_equal(c.arch, LF_ARCH_LLAMA);
    assert_int_equal(c.n_kv_head, 3);
    LF_ASSERT_OK(lf_model_preset("gpt2-124m", &c));
    assert_int_equal(c.arch, LF_ARCH_GPT2);
    assert_int_equal(c.vocab_size, 50304);
    assert_int_equal(lf_model_preset("nope", &c), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("gpt2-124m, shakespeare-char-cpu, smollm-135m, llama-3.2-1b");
}

static void test_family_facts(void **state) {
    (void)state;
    /* hand-set keys: llama's bias defaults to false unless given; gpt2 refuses an untied head */
    lf_model_config c = {.arch = LF_ARCH_LLAMA, .bias = 1, .tie_embeddings = 1};
    const char *key = "x";
    assert_null(lf_model_config_given(&c, 0, &key));
    assert_int_equal(c.bias, 0);
    c.bias = 1;
    assert_null(lf_model_config_given(&c, LF_MODEL_GIVEN_BIAS, &key));
    assert_int_equal(c.bias, 1);
    lf_model_config g = {.arch = LF_ARCH_GPT2, .bias = 1, .tie_embeddings = 0};
    const char *why = lf_model_config_given(&g, LF_MODEL_GIVEN_TIE, &key);
    assert_non_null(why);
    assert_string_equal(key, "model.tie_embeddings");
    assert_string_equal(why, "gpt2's lm_head is always tied to wte");

    /* lookup-only tables: GPT-2's wpe; an untied Llama's embedding; a tied one's none */
    lf_model_config m = {.arch = LF_ARCH_GPT2, .n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 32,
                         .vocab_size = 50, .bias = 1, .tie_embeddings = 1};
    assert_int_equal(lf_model_lookup_params(&m), 32 * 16);
    m.arch = LF_ARCH_LLAMA;
    m.bias = 0;
    assert_int_equal(lf_model_lookup_params(&m), 0);
    m.tie_embeddings = 0;
    m.padded_vocab_size = 64;
    assert_int_equal(lf_model_lookup_params(&m), 64 * 16);

    assert_int_equal(lf_arch_fixed_context(LF_ARCH_GPT2), 1);
    assert_int_equal(lf_arch_fixed_context(LF_ARCH_LLAMA), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_parse_back),
        cmocka_unit_test(test_presets_from_tables),
        cmocka_unit_test(test_family_facts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
