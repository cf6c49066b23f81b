/*
 * DeepSpeed's loss scaler (semantics in include/llmforge/loss_scaler.h).
 * A dozen lines of state machine: there is no C library for it, and the exact
 * sequence matters (checkpoints carry it), so it is written here and tested
 * against DeepSpeed's own output.
 */
#include <math.h>
#include "llmforge/loss_scaler.h"

void lf_loss_scaler_init(lf_loss_scaler *s, double static_scale, int initial_scale_power, long window, int hysteresis,
                         int consecutive_hysteresis, double min_scale) {
    *s = (lf_loss_scaler){0};
    s->dynamic = !(static_scale > 0);
    s->scale = s->dynamic ? ldexp(1.0, initial_scale_power) : static_scale;
    s->min_scale = min_scale;
    s->factor = 2.0;
    s->window = window > 0 ? window : 1;
    s->hysteresis = hysteresis > 0 ? hysteresis : 1;
    s->cur_hysteresis = s->hysteresis;
    s->consecutive_hysteresis = consecutive_hysteresis != 0;
    s->last_overflow_iter = -1;
}

lf_status lf_loss_scaler_update(lf_loss_scaler *s, int overflow) {
    if (!s->dynamic) return LF_OK;
    if (overflow) {
        if (s->hysteresis == 1 || s->cur_hysteresis == 1) {
            if (s->scale == s->min_scale)
                return lf_fail(LF_ERR_NUMERIC, "gradient overflow with the loss scale already at its minimum %g",
                               s->min_scale);
            double next = s->scale / s->factor;
            s->scale = next > s->min_scale ? next : s->min_scale;
        } else {
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->iter;
    } else {
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
        if ((s->iter - s->last_overflow_iter) % s->window == 0) {
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
            s->scale *= s->factor;
        }
    }
    s->iter++;
    return LF_OK;
}
