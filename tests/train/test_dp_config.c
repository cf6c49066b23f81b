/*
 * The configuration side of data parallel: the batch identity with the world
 * size given (..._world) and discovered from a launcher's environment (the
 * arithmetic in the message names the launcher), an inconsistent launcher
 * environment, the comm.* keys (defaults, ranges, round trip), and the
 * memory plan's communication scratch for several ranks.
 */
#include "test_util.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"

static const char *k_cfg = "{\"data\": {\"dataset\": \"d\"}, \"train_batch_size\": 16, "
                           "\"gradient_accumulation_steps\": 2}";

static void test_world_given(void **state) {
    (void)state;
    lf_train_config c;
    LF_ASSERT_OK(lf_train_config_parse_world(&c, k_cfg, "cfg.json", 4, 0, NULL));
    assert_int_equal(c.world_size, 4);
    assert_int_equal(c.micro_batch, 2); /* 16 / (2 x 4) */
    LF_ASSERT_OK(lf_train_config_parse_world(&c, k_cfg, "cfg.json", 1, 0, NULL));
    assert_int_equal(c.world_size, 1);
    assert_int_equal(c.micro_batch, 8);
    /* all three given: must agree with the world */
    const char *ov[] = {"train_micro_batch_size_per_gpu=4"};
    assert_int_equal(lf_train_config_parse_world(&c, k_cfg, "cfg.json", 4, 1, ov), LF_ERR_CONFIG);
    assert_string_equal(lf_last_error(), "key 'train_batch_size' in 'cfg.json': train_batch_size 16 != "
                                         "train_micro_batch_size_per_gpu 4 × gradient_accumulation_steps 2 × "
                                         "world size 4 = 32");
    /* not divisible by accumulation x world */
    assert_int_equal(lf_train_config_parse_world(&c, k_cfg, "cfg.json", 3, 0, NULL), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("train_batch_size 16 is not divisible by gradient_accumulation_steps 2 × world size 3");
    assert_int_equal(lf_train_config_parse_world(&c, k_cfg, "cfg.json", -1, 0, NULL), LF_ERR_INVALID_ARG);
    /* defaults: one process */
    assert_int_equal(lf_train_config_default().world_size, 1);
}

static void set_world_env(const char *rank, const char *size) {
    if (rank) setenv("OMPI_COMM_WORLD_RANK", rank, 1);
    else unsetenv("OMPI_COMM_WORLD_RANK");
    if (size) setenv("OMPI_COMM_WORLD_SIZE", size, 1);
    else unsetenv("OMPI_COMM_WORLD_SIZE");
}

static void test_world_from_launcher(void **state) {
    (void)state;
    lf_train_config c;
    set_world_env("1", "2");
    LF_ASSERT_OK(lf_train_config_parse(&c, k_cfg, "cfg.json", 0, NULL));
    assert_int_equal(c.world_size, 2);
    assert_int_equal(c.micro_batch, 4);
    const char *ov[] = {"train_micro_batch_size_per_gpu=4", "gradient_accumulation_steps=4"};
    assert_int_equal(lf_train_config_parse(&c, k_cfg, "cfg.json", 2, ov), LF_ERR_CONFIG);
    assert_string_equal(lf_last_error(), "key 'train_batch_size' in 'cfg.json': train_batch_size 16 != "
                                         "train_micro_batch_size_per_gpu 4 × gradient_accumulation_steps 4 × "
                                         "world size 2 (from openmpi) = 32");
    /* the launcher's variables are inconsistent: an error naming them */
    set_world_env("2", "2");
    assert_int_equal(lf_train_config_parse(&c, k_cfg, "cfg.json", 0, NULL), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("world size for the batch identity");
    LF_ASSERT_ERR_CONTAINS("OMPI_COMM_WORLD_RANK");
    /* a given world size ignores the environment */
    LF_ASSERT_OK(lf_train_config_parse_world(&c, k_cfg, "cfg.json", 1, 0, NULL));
    assert_int_equal(c.micro_batch, 8);
    set_world_env(NULL, NULL);
    LF_ASSERT_OK(lf_train_config_parse(&c, k_cfg, "cfg.json", 0, NULL));
    assert_int_equal(c.world_size, 1);
}

static void test_comm_keys(void **state) {
    (void)state;
    lf_train_config c = lf_train_config_default();
    assert_string_equal(c.comm_backend, "auto");
    assert_true(c.comm_timeout_s == 300.0f);
    assert_int_equal(c.comm_bucket_elems, 4194304);
    const char *ov[] = {"comm.backend=MPI", "comm.timeout_s=2.5", "comm.bucket_elems=1000"};
    LF_ASSERT_OK(lf_train_config_parse(&c, k_cfg, "cfg.json", 3, ov));
    assert_string_equal(c.comm_backend, "mpi");
    assert_true(c.comm_timeout_s == 2.5f);
    assert_int_equal(c.comm_bucket_elems, 1000);
    char *json = lf_train_config_to_json(&c);
    lf_train_config back;
    LF_ASSERT_OK(lf_train_config_parse(&back, json, "dump", 0, NULL));
    lf_free(json);
    assert_string_equal(back.comm_backend, "mpi");
    assert_true(back.comm_timeout_s == 2.5f);
    assert_int_equal(back.comm_bucket_elems, 1000);
    const char *nccl[] = {"comm.backend=nccl"}; /* a choice; opening it needs a CUDA build (lf_comm_nccl_register) */
    LF_ASSERT_OK(lf_train_config_parse(&c, k_cfg, "cfg.json", 1, nccl));
    assert_string_equal(c.comm_backend, "nccl");
    const char *bad1[] = {"comm.backend=gloo"};
    assert_int_equal(lf_train_config_parse(&c, k_cfg, "cfg.json", 1, bad1), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("comm.backend");
    const char *bad2[] = {"comm.timeout_s=0"};
    assert_int_equal(lf_train_config_parse(&c, k_cfg, "cfg.json", 1, bad2), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("comm.timeout_s");
    const char *bad3[] = {"comm.bucket_elems=0"};
    assert_int_equal(lf_train_config_parse(&c, k_cfg, "cfg.json", 1, bad3), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("comm.bucket_elems");
    /* comm.overlap: on by default, a boolean, kept through the dump */
    assert_int_equal(lf_train_config_default().comm_overlap, 1);
    const char *off[] = {"comm.overlap=false"};
    LF_ASSERT_OK(lf_train_config_parse(&c, k_cfg, "cfg.json", 1, off));
    assert_int_equal(c.comm_overlap, 0);
    json = lf_train_config_to_json(&c);
    LF_ASSERT_OK(lf_train_config_parse(&back, json, "dump", 0, NULL));
    lf_free(json);
    assert_int_equal(back.comm_overlap, 0);
    const char *bad4[] = {"comm.overlap=maybe"};
    assert_int_equal(lf_train_config_parse(&c, k_cfg, "cfg.json", 1, bad4), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("comm.overlap");
    /* communication_data_type (DeepSpeed's key): fp32 by default, bf16, kept through the dump; fp16 refused */
    assert_int_equal(lf_train_config_default().comm_bf16, 0);
    const char *bf[] = {"communication_data_type=bf16"};
    LF_ASSERT_OK(lf_train_config_parse(&c, k_cfg, "cfg.json", 1, bf));
    assert_int_equal(c.comm_bf16, 1);
    json = lf_train_config_to_json(&c);
    LF_ASSERT_OK(lf_train_config_parse(&back, json, "dump", 0, NULL));
    lf_free(json);
    assert_int_equal(back.comm_bf16, 1);
    const char *bad5[] = {"communication_data_type=fp16"};
    assert_int_equal(lf_train_config_parse(&c, k_cfg, "cfg.json", 1, bad5), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("communication_data_type");
}

/* One bucket's receive buffer: W parts of ceil(bucket / W) floats, capped by the parameter count. */
static void test_plan_scratch(void **state) {
    (void)state;
    lf_train_config c = lf_train_config_default();
    c.memory_limit = 1L << 40;
    lf_model_config m = {.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 32, .vocab_size = 65, .bias = 1};
    lf_mem_plan p;
    LF_ASSERT_OK(lf_mem_plan_make(&p, &c, &m, 1, 0));
    for (int i = 0; i < p.n_items; i++) assert_null(strstr(p.items[i].name, "communication"));
    size_t one = p.total;
    c.world_size = 3;
    c.comm_bucket_elems = 1000;
    LF_ASSERT_OK(lf_mem_plan_make(&p, &c, &m, 1, 0));
    assert_int_equal(p.total - one, 3 * 334 * sizeof(float));
    assert_non_null(strstr(p.items[p.n_items - 1].name, "communication scratch"));
    c.comm_bucket_elems = 1L << 30; /* larger than the model: the model's size */
    LF_ASSERT_OK(lf_mem_plan_make(&p, &c, &m, 1, 0));
    assert_int_equal(p.total - one, 3 * ((p.params + 2) / 3) * sizeof(float));
    /* communication_data_type bf16: the bucket in bf16 on the backend, and the host kinds' fp32 widening of it */
    c.comm_bf16 = 1;
    c.comm_bucket_elems = 1000;
    LF_ASSERT_OK(lf_mem_plan_make(&p, &c, &m, 1, 0));
    assert_int_equal(p.total - one, 3 * 334 * sizeof(float) + 1000 * sizeof(uint16_t) + 1000 * sizeof(float));
    assert_non_null(strstr(p.items[p.n_items - 2].name, "bf16 gradient staging"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world_given),
        cmocka_unit_test(test_world_from_launcher),
        cmocka_unit_test(test_comm_keys),
        cmocka_unit_test(test_plan_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
