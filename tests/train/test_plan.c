/*
 * The memory plan and out-of-memory as a planned error:
 *  - the plan's items add up; its activation item is what the model
 *    allocates (the trainer checks this on every start) and drops with each
 *    recompute policy;
 *  - a plan over memory.limit_bytes stops lf_trainer_create before the model
 *    exists: LF_ERR_NOMEM, a message naming the limit, the largest consumers
 *    and the changes that would fit, each with its saving; nothing trained or
 *    checkpointed; the advised micro-batch then fits under the same limit;
 *  - checkpoint.async's snapshot is planned on the writing rank;
 *  - an allocation failure injected at every allocation of the trainer's
 *    setup in turn is reported as LF_ERR_NOMEM and frees everything (the
 *    ASan build checks the leaks).
 */
#include "test_util.h"
#include <sys/stat.h>
#include "llmforge/data.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"
#include "llmforge/backend_cpu.h"

#include "char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(65536);
}

static lf_train_config cfg_of(const char *name) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 4;
    c.model.n_head = 4;
    c.model.n_embd = 64;
    c.model.block_size = 64;
    c.micro_batch = 16;
    c.train_batch_size = 16;
    c.train_iters = 2;
    c.warmup_iters = 0;
    c.decay_iters = 2;
    c.eval_interval = 0;
    c.eval_iters = 1;
    c.ckpt_interval = 0;
    c.peak_gflops = 100;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, name);
    return c;
}

static void test_plan_adds_up(void **state) {
    (void)state;
    lf_train_config c = cfg_of("p");
    lf_model_config m = c.model;
    m.vocab_size = 65;
    lf_mem_plan p;
    LF_ASSERT_OK(lf_mem_plan_make(&p, &c, &m, 2, 0));
    size_t sum = 0;
    for (int i = 0; i < p.n_items; i++) sum += p.items[i].bytes;
    assert_int_equal(sum, p.total);
    assert_true(p.act_policy[0] > p.act_policy[1] && p.act_policy[1] > p.act_policy[2]);
    assert_int_equal(p.act.total, p.act_policy[0]);
    assert_int_equal(p.items[0].bytes, p.params * 4);
    /* the model allocates exactly the activation item, in fp32 and with bf16
     * (cpu-bf16 stores the matmul inputs in bf16: less, by policy) */
    lf_backend_cpu_set_threads(2);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        lf_model *model = NULL;
        LF_ASSERT_OK(lf_model_create(&model, &m, lf_backend_get(bf16 ? "cpu-bf16" : "cpu")));
        c.bf16 = bf16;
        for (int k = 0; k < 3; k++) {
            size_t got = 0;
            c.recompute = k;
            LF_ASSERT_OK(lf_mem_plan_make(&p, &c, &m, 2, 0));
            LF_ASSERT_OK(lf_model_set_recompute(model, (lf_recompute)k));
            LF_ASSERT_OK(lf_model_plan(model, c.micro_batch, m.block_size, &got));
            assert_int_equal(got, p.act.total);
            assert_int_equal(p.act_dtype, bf16 ? LF_ACT_BF16 : LF_ACT_FP32);
            assert_int_equal(lf_model_act_dtype(model), p.act_dtype);
            assert_int_equal(p.act_policy[k], p.act_by_dtype[p.act_dtype][k]);
            assert_true(p.act_by_dtype[LF_ACT_BF16][k] < p.act_by_dtype[LF_ACT_FP32][k]);
        }
        lf_model_free(model);
    }
    int named = 0;
    for (int i = 0; i < p.n_items; i++)
        named += strstr(p.items[i].name, "activations (recompute full, bf16)") != NULL;
    assert_int_equal(named, 1);
    c.bf16 = 0;
    char text[4096];
    size_t n = lf_mem_plan_format(&p, text, sizeof text);
    assert_true(n > 0 && n < sizeof text);
    assert_non_null(strstr(text, "activations (recompute full, bf16)"));
    assert_non_null(strstr(text, "<- configured, bf16"));
    assert_non_null(strstr(text, "selective"));
}

static void test_over_limit_stops_with_advice(void **state) {
    (void)state;
    lf_backend_cpu_set_threads(2);
    lf_train_config c = cfg_of("over");
    lf_model_config m = c.model;
    m.vocab_size = 65;
    lf_mem_plan p;
    LF_ASSERT_OK(lf_mem_plan_make(&p, &c, &m, 2, 0));
    /* a limit the configured run misses by part of its activations */
    c.memory_limit = (long)(p.total - p.act.total / 3);
    lf_trainer *t = NULL;
    lf_trainer_opts o = {0};
    assert_int_equal(lf_trainer_create(&t, &c, &o), LF_ERR_NOMEM);
    const char *msg = lf_trainer_errmsg(t);
    const char *want[] = {"memory.limit_bytes", "largest", "activations", "train_micro_batch_size_per_gpu 8 with "
                          "gradient_accumulation_steps 2 saves", "activation_checkpointing.policy selective saves",
                          "activation_checkpointing.policy full saves", "bf16"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(msg, want[i])) fail_msg("message lacks '%s': %s", want[i], msg);
    lf_trainer_free(t);
    char path[1200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/ckpt", c.out_dir);
    assert_int_not_equal(stat(path, &sb), 0); /* nothing trained, nothing saved */
    /* the advice holds: half the micro-batch, twice the accumulation, same limit */
    lf_train_config c2 = c;
    snprintf(c2.out_dir, sizeof c2.out_dir, "%s/over-fixed", tmp);
    c2.micro_batch = 8;
    c2.grad_accum = 2;
    LF_ASSERT_OK(lf_trainer_create(&t, &c2, &o));
    LF_ASSERT_OK(lf_trainer_run(t));
    lf_trainer_free(t);
    /* so does full recompute */
    lf_train_config c3 = c;
    snprintf(c3.out_dir, sizeof c3.out_dir, "%s/over-full", tmp);
    c3.recompute = LF_RECOMPUTE_FULL;
    LF_ASSERT_OK(lf_trainer_create(&t, &c3, &o));
    lf_trainer_free(t);
    /* a limit nothing can meet says so */
    lf_train_config c4 = c;
    snprintf(c4.out_dir, sizeof c4.out_dir, "%s/never", tmp);
    c4.memory_limit = 4096;
    assert_int_equal(lf_trainer_create(&t, &c4, &o), LF_ERR_NOMEM);
    if (!strstr(lf_trainer_errmsg(t), "even micro-batch 1 with full recompute"))
        fail_msg("message: %s", lf_trainer_errmsg(t));
    lf_trainer_free(t);
}

/* An fp32 run that bf16 would make fit: the advice names bf16 with its net
 * saving (activations stored in bf16, less the weight copies and scratch),
 * and the bf16 run starts under the same limit with its activations exactly
 * as planned. */
/* checkpoint.async's snapshot (three host copies of the model, on the rank
 * that writes) is in the plan: exactly 3 x 4 bytes per parameter more on
 * rank 0, nothing on another rank. */
static void test_async_snapshot_planned(void **state) {
    (void)state;
    lf_train_config c = cfg_of("async");
    c.world_size = 2; /* the batch identity's ranks: 16 = 8 x 1 x 2 */
    c.micro_batch = 8;
    lf_model_config m = c.model;
    m.vocab_size = 65;
    for (int rank = 0; rank < 2; rank++) {
        lf_mem_plan sync, async;
        c.ckpt_async = 0;
        LF_ASSERT_OK(lf_mem_plan_make_rank(&sync, &c, &m, 2, 0, rank));
        c.ckpt_async = 1;
        LF_ASSERT_OK(lf_mem_plan_make_rank(&async, &c, &m, 2, 0, rank));
        assert_int_equal(async.total - sync.total, rank == 0 ? 3 * sync.params * sizeof(float) : 0);
        int named = 0;
        for (int i = 0; i < async.n_items; i++) named += strstr(async.items[i].name, "checkpoint.async snapshot") != NULL;
        assert_int_equal(named, rank == 0);
    }
}

static void test_bf16_advice(void **state) {
    (void)state;
    lf_backend_cpu_set_threads(2);
    lf_train_config c = cfg_of("bf16adv");
    lf_model_config m = c.model;
    m.vocab_size = 65;
    lf_mem_plan p32, p16;
    LF_ASSERT_OK(lf_mem_plan_make(&p32, &c, &m, 2, 0));
    c.bf16 = 1;
    LF_ASSERT_OK(lf_mem_plan_make(&p16, &c, &m, 2, 0));
    c.bf16 = 0;
    assert_true(p16.total < p32.total);
    assert_true(p16.act.total < p32.act.total);
    c.memory_limit = (long)(p16.total + (p32.total - p16.total) / 2);
    LF_ASSERT_OK(lf_mem_plan_make(&p32, &c, &m, 2, 0));
    assert_int_equal(lf_mem_plan_check(&p32, &c, &m), LF_ERR_NOMEM);
    char want[256], b1[32], b2[32];
    snprintf(want, sizeof want, "bf16.enabled true saves %s (%s of activations stored in bf16",
             lf_fmt_bytes(p32.total - p16.total, b1, sizeof b1),
             lf_fmt_bytes(p32.act.total - p16.act.total, b2, sizeof b2));
    LF_ASSERT_ERR_CONTAINS(want);
    /* bf16 alone fits: its advice (up to the next ';') does not say otherwise */
    const char *adv = strstr(lf_last_error(), "bf16.enabled true saves");
    const char *end = strchr(adv, ';'), *nea = strstr(adv, "not enough alone");
    assert_non_null(end);
    if (nea && nea < end) fail_msg("bf16 alone fits, yet the advice says it is not enough: %s", lf_last_error());
    lf_trainer *t = NULL;
    lf_trainer_opts o = {0};
    assert_int_equal(lf_trainer_create(&t, &c, &o), LF_ERR_NOMEM);
    lf_trainer_free(t);
    c.bf16 = 1;
    LF_ASSERT_OK(lf_trainer_create(&t, &c, &o)); /* fits; the trainer checks the model's activations */
    LF_ASSERT_OK(lf_trainer_run(t));
    lf_trainer_free(t);
}

static void test_injected_allocation_failures(void **state) {
    (void)state;
    lf_backend_cpu_set_threads(2);
    int failures = 0, k;
    for (k = 0; k < 200; k++) {
        char name[32];
        snprintf(name, sizeof name, "inj%d", k);
        lf_train_config c = cfg_of(name);
        c.model.n_layer = 1;
        c.micro_batch = 4;
        c.train_batch_size = 4;
        lf_trainer *t = NULL;
        lf_trainer_opts o = {0};
        lf_alloc_fail_after(k);
        lf_status st = lf_trainer_create(&t, &c, &o);
        lf_alloc_fail_after(-1);
        if (st == LF_OK) {
            LF_ASSERT_OK(lf_trainer_run(t));
            lf_trainer_free(t);
            break; /* k is past the setup's last allocation */
        }
        if (st != LF_ERR_NOMEM) fail_msg("failure at allocation %d gave %s: %s", k, lf_status_str(st), lf_trainer_errmsg(t));
        if (!strstr(lf_trainer_errmsg(t), "out of memory")) fail_msg("allocation %d: %s", k, lf_trainer_errmsg(t));
        lf_trainer_free(t);
        failures++;
    }
    assert_true(failures >= 8); /* model, activations, optimizer state, staging, batches, ... each failed once */
    assert_true(k < 200);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_adds_up),
        cmocka_unit_test(test_over_limit_stops_with_advice),
        cmocka_unit_test(test_bf16_advice),
        cmocka_unit_test(test_async_snapshot_planned),
        cmocka_unit_test(test_injected_allocation_failures),
    };
    return cmocka_run_group_tests(tests, setup, char_fixture_teardown);
}
