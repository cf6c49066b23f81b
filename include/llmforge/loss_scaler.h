/*
 * fp16 loss scaling with DeepSpeed's semantics (DynamicLossScaler and the
 * static LossScaler of deepspeed/runtime/fp16/loss_scaler.py).
 *
 * The loss is multiplied by `scale` before backward; a step whose gradients
 * hold inf/NaN is skipped, otherwise the gradients are divided by `scale`
 * before clipping and the optimizer. After every step, skipped or not,
 * lf_loss_scaler_update(overflow):
 *   overflow:  when hysteresis is 1 (or the counter has run down to 1) the
 *              scale halves (never below min_scale) — or, already at
 *              min_scale, the run must stop (LF_ERR_NUMERIC); otherwise the
 *              hysteresis counter drops by one and the scale stays.
 *              last_overflow_iter = iter.
 *   clean:     with consecutive_hysteresis the counter is restored at once;
 *              when (iter - last_overflow_iter) is a multiple of window the
 *              scale doubles (and without consecutive_hysteresis the counter
 *              is restored then).
 *   iter += 1.
 * A static scaler (loss_scale > 0 in the config) keeps its scale; overflow
 * steps are still skipped. tests/train/test_loss_scaler.c replays sequences
 * DeepSpeed 0.12.6 itself produced (tools/reference/make_loss_scaler_fixture.py).
 */
#ifndef LLMFORGE_LOSS_SCALER_H
#define LLMFORGE_LOSS_SCALER_H

#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_loss_scaler {
    int dynamic;
    double scale; /* cur_scale */
    double min_scale;
    double factor;  /* 2 */
    long window;    /* scale_window */
    int hysteresis; /* delayed_shift */
    int cur_hysteresis;
    int consecutive_hysteresis;
    long iter;               /* cur_iter: updates so far */
    long last_overflow_iter; /* -1: none */
} lf_loss_scaler;

/* static_scale > 0: a static scaler; else dynamic from 2^initial_scale_power. */
void lf_loss_scaler_init(lf_loss_scaler *s, double static_scale, int initial_scale_power, long window, int hysteresis,
                         int consecutive_hysteresis, double min_scale);

/* One step's verdict. LF_ERR_NUMERIC (state unchanged but for nothing) when
 * an overflow finds the scale already at min_scale: DeepSpeed's stop. */
lf_status lf_loss_scaler_update(lf_loss_scaler *s, int overflow);

#ifdef __cplusplus
}
#endif
#endif
