/*
 * The slots every backend table must fill (the compute and memory ops the
 * model and trainer call unconditionally), checked by name so a table that
 * forgets one fails with the slot's name. Shared by the backend tests.
 */
#ifndef LF_TEST_BACKEND_SLOTS_H
#define LF_TEST_BACKEND_SLOTS_H

#include <cmocka.h>
#include "backend/backend_impl.h"

#define LF_TEST_SLOT(t, s) \
    if (!(t)->s) fail_msg("backend '%s': slot " #s " is NULL", (t)->name ? (t)->name : "(unnamed)")

static inline void lf_test_required_slots(const lf_backend_ops *t) {
    if (!t->name) fail_msg("a backend table without a name");
    LF_TEST_SLOT(t, alloc);
    LF_TEST_SLOT(t, free);
    LF_TEST_SLOT(t, allocated);
    LF_TEST_SLOT(t, to_device);
    LF_TEST_SLOT(t, to_host);
    LF_TEST_SLOT(t, copy);
    LF_TEST_SLOT(t, zero);
    LF_TEST_SLOT(t, scale);
    LF_TEST_SLOT(t, encoder_forward);
    LF_TEST_SLOT(t, encoder_backward);
    LF_TEST_SLOT(t, layernorm_forward);
    LF_TEST_SLOT(t, layernorm_backward);
    LF_TEST_SLOT(t, rmsnorm_forward);
    LF_TEST_SLOT(t, rmsnorm_backward);
    LF_TEST_SLOT(t, matmul_forward);
    LF_TEST_SLOT(t, matmul_backward);
    LF_TEST_SLOT(t, rope_forward);
    LF_TEST_SLOT(t, rope_backward);
    LF_TEST_SLOT(t, attention_forward);
    LF_TEST_SLOT(t, attention_backward);
    LF_TEST_SLOT(t, attention_saved);
    LF_TEST_SLOT(t, attention_scratch);
    LF_TEST_SLOT(t, attention_cached_scratch);
    LF_TEST_SLOT(t, kv_append);
    LF_TEST_SLOT(t, attention_cached);
    LF_TEST_SLOT(t, gelu_forward);
    LF_TEST_SLOT(t, gelu_backward);
    LF_TEST_SLOT(t, swiglu_forward);
    LF_TEST_SLOT(t, swiglu_backward);
    LF_TEST_SLOT(t, residual_forward);
    LF_TEST_SLOT(t, residual_backward);
    LF_TEST_SLOT(t, dropout_forward);
    LF_TEST_SLOT(t, dropout_backward);
    LF_TEST_SLOT(t, crossentropy_forward_backward);
    LF_TEST_SLOT(t, adamw_update);
    LF_TEST_SLOT(t, loss_sum);
    LF_TEST_SLOT(t, fp16_round);
    LF_TEST_SLOT(t, sum_squares);
    LF_TEST_SLOT(t, add_inplace);
    LF_TEST_SLOT(t, params_changed);
    LF_TEST_SLOT(t, convert);
    if (!(t->act_dtypes & LF_DT_BIT(LF_DT_F32))) fail_msg("backend '%s' does not take fp32 activations", t->name);
}

#endif
