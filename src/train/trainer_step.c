/*
 * One optimizer step of the training loop (lf__trainer_step): the step's
 * batches from the loader, forward/backward over its micro-batches, the
 * gradient sums over the ranks (trainer_dp.c, trainer_zero.c), fp16
 * overflow handling, the alerts on the loss and the gradient, and AdamW.
 *
 * Invariants:
 *  - Step s (0-based) reads global rows s*A*B .. (s+1)*A*B-1 of the train
 *    split (A accumulation steps, B micro-batch); micro-batch a takes rows
 *    s*A*B + a*B ... So the data cursor is a function of the step alone and a
 *    resumed run reads exactly the batches the uninterrupted run would.
 *  - The loss of a step is the mean over every non-ignored target of all its
 *    micro-batches: each micro-batch's dlogits are scaled by 1/(targets in the
 *    whole step), so A micro-batches of B equal one batch of A*B.
 *  - Every random stream is counter-based (seed, purpose, index): dropout
 *    keys are (step, micro-batch), evaluation rows are (step, batch). Nothing
 *    random is carried in memory, so resume is bit-exact.
 *  - Gradient clipping as torch.nn.utils.clip_grad_norm_: coef =
 *    min(1, max_norm / (norm + 1e-6)), folded into the AdamW update.
 *  - Alerts: a non-finite loss or gradient stops the run (no checkpoint),
 *    skips the step or rolls back; a loss spike (z-score over the previous
 *    accepted steps) is logged, skips the step or rolls back (the rollback
 *    itself is lf__trainer_rollback, trainer_watch.c; a stall is the
 *    watchdog's, also there). A skipped step advances the data but not
 *    AdamW's step count (opt_t), as DeepSpeed's skipped steps do; both
 *    counters and the spike window are saved, so resume stays exact.
 *  - Every decision of a step (overflow, alert, skip) is taken from values
 *    reduced over the ranks, so it is the same on every rank.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

/* An alert whose action is rollback: allowed while the run has rolled back
 * fewer than monitor.alerts.max_rollbacks times (then lf_trainer_run does
 * it, before the step counts); past that, the run stops with the history.
 * Decided from reduced values: alike on every rank. */
static lf_status rollback_request(lf_trainer *t, step_result *o, const char *kind, const char *msg) {
    if (t->n_rollbacks >= t->cfg.alert_max_rollbacks) {
        lf__trainer_alert(t, kind, "stop", msg);
        return lf_fail(LF_ERR_NUMERIC,
                       "%s; stopped without a checkpoint: monitor.alerts.max_rollbacks is %d and the "
                       "run has rolled back %d time%s (%s)",
                       msg, t->cfg.alert_max_rollbacks, t->n_rollbacks, t->n_rollbacks == 1 ? "" : "s",
                       t->n_rollbacks ? t->rb_hist : "no history");
    }
    lf__trainer_alert(t, kind, "rollback", msg);
    o->rollback = kind;
    snprintf(o->alert_msg, sizeof o->alert_msg, "%s", msg);
    return LF_OK;
}

/* fp16 on the CPU: the (scaled) gradients are rounded to fp16, as an fp16
 * gradient buffer would hold them; a value beyond fp16's range becomes inf.
 * buf holds flat elements [lo, lo+n). Returns the index (in the parameter
 * table) of the first tensor holding a non-finite gradient, -1 when all are
 * finite. The buffer is backend memory (the backend's fp16_round). */
int lf__fp16_round_range(lf_trainer *t, float *buf, size_t lo, size_t n) {
    int count = 0;
    const lf_param_info *table = lf_model_train_table(t->model, &count);
    int bad = -1;
    for (int k = 0; k < count; k++) {
        size_t a = table[k].offset, b = a + table[k].numel;
        if (a < lo) a = lo;
        if (b > lo + n) b = lo + n;
        if (a >= b) continue;
        int nonfinite = 0;
        (void)lf_backend_fp16_round(t->be, buf + (a - lo), b - a, &nonfinite); /* backend memory */
        if (nonfinite && bad < 0) bad = k;
    }
    return bad;
}

static int fp16_round_grads(lf_trainer *t) {
    return lf__fp16_round_range(t, lf_model_train_grads(t->model), 0, lf_model_train_num_params(t->model));
}

static void scale_grads(lf_trainer *t, float f) {
    lf_backend_scale(t->be, lf_model_train_grads(t->model), lf_model_train_num_params(t->model), f);
}

/* z-score of x against the window of accepted losses (0 while the window
 * is not yet full or has no spread). */
static double spike_z(const lf_trainer *t, double x) {
    int n = t->spike_n;
    if (n < t->cfg.alert_spike_window) return 0;
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += t->spike_win[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (t->spike_win[i] - mean) * (t->spike_win[i] - mean);
    double sd = sqrt(var / (n - 1));
    return sd > 0 ? (x - mean) / sd : 0;
}

static void spike_push(lf_trainer *t, double x) {
    t->spike_win[t->spike_pos] = x;
    t->spike_pos = (t->spike_pos + 1) % t->cfg.alert_spike_window;
    if (t->spike_n < t->cfg.alert_spike_window) t->spike_n++;
}

/* The training loader at the current step (a resume opens it at the checkpoint's step: O(1)). */
lf_status lf__trainer_open_loader(lf_trainer *t) {
    lf_loader_close(t->loader);
    t->loader = NULL;
    lf_loader_opts lo = lf_loader_opts_default();
    lo.sampling = (lf_sampling)t->cfg.sampling;
    lo.seed = t->cfg.seed;
    lo.micro_batch = t->cfg.micro_batch;
    lo.block_size = t->cfg.model.block_size;
    lo.accum = t->cfg.grad_accum;
    lo.rank = t->rank; /* this rank's rows of each step's global batch */
    lo.world = t->world;
    lo.prefetch = t->cfg.prefetch;
    lo.pack = t->pack[LF_SPLIT_TRAIN];
    return lf_loader_open(&t->loader, t->ds, &lo, (uint64_t)(t->step + t->data_off));
}

/* Collectives of a step, timed into o->comm_ms. */
static lf_status step_sum_i64(lf_trainer *t, step_result *o, int64_t *v, size_t n) {
    double t0 = lf_time_now();
    lf_status st = lf_comm_all_reduce_i64(t->comm, v, n, LF_COMM_SUM);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

lf_status lf__step_sum_f64(lf_trainer *t, step_result *o, double *v, size_t n) {
    double t0 = lf_time_now();
    lf_status st = lf_comm_all_reduce_f64(t->comm, v, n, LF_COMM_SUM);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* fp16: the step's gradients overflowed (on rank `rank`, in tensor k; rank
 * -1: in the sum over ranks). Skips the step on every rank alike (the
 * decision comes from reduced values); fails at the minimum scale. */
static lf_status fp16_skip(lf_trainer *t, step_result *o, long step1, double scale, int rank, int k) {
    int count = 0;
    const lf_param_info *table = lf_model_train_table(t->model, &count);
    char which[LF_PARAM_NAME_MAX + 64];
    if (rank < 0) snprintf(which, sizeof which, "%s' (the sum over ranks", k >= 0 && k < count ? table[k].name : "?");
    else if (t->world > 1)
        snprintf(which, sizeof which, "%s' (on rank %d", k >= 0 && k < count ? table[k].name : "?", rank);
    else snprintf(which, sizeof which, "%s", k >= 0 && k < count ? table[k].name : "?");
    int paren = rank < 0 || t->world > 1;
    lf_status st = lf_loss_scaler_update(&t->scaler, 1);
    if (st != LF_OK)
        return lf_fail(LF_ERR_NUMERIC,
                       "step %ld: fp16 gradient overflow in '%s%s with the loss scale already at "
                       "its minimum %g (fp16.min_loss_scale); stopped without a checkpoint. The gradients "
                       "exceed fp16's range even unscaled: use bf16 (\"bf16\": {\"enabled\": true}), which "
                       "has fp32's range, or lower optimizer.params.lr",
                       step1, which, paren ? ")" : "'", scale);
    o->overflow = o->skipped = 1;
    o->norm = NAN;
    o->lr = lf_lr_at(&t->cfg, t->step);
    t->skipped++;
    char json[512], rank_json[32] = "";
    if (t->world > 1) snprintf(rank_json, sizeof rank_json, ",\"rank\":%d", rank);
    snprintf(json, sizeof json,
             "{\"reason\":\"fp16_overflow\",\"tensor\":\"%s\"%s,\"loss_scale\":%.17g,"
             "\"next_loss_scale\":%.17g}",
             k >= 0 && k < count ? table[k].name : "?", rank_json, scale, t->scaler.scale);
    lf__trainer_event(t, "skipped_step", NULL, json);
    return LF_OK;
}

/* The step's batches (all micro-batches) from the loader, reopened where
 * the data step moved, and the global count of targets. */
static lf_status step_load(lf_trainer *t, step_result *o, long step1, int64_t *count) {
    const size_t n = (size_t)t->cfg.grad_accum * t->cfg.micro_batch * t->cfg.model.block_size;
    lf_status st;
    if (t->loader && lf_loader_step(t->loader) != (uint64_t)(t->step + t->data_off)) {
        lf_loader_close(t->loader); /* the data step moved (a resume, a rollback): reopen there, O(1) */
        t->loader = NULL;
    }
    if (!t->loader) {
        st = lf__trainer_open_loader(t);
        if (st != LF_OK) return st;
    }
    double wait = 0;
    st = lf_loader_next_pos(t->loader, t->inputs, t->targets, t->pos, &wait);
    if (st != LF_OK) return st;
    int64_t sums[2] = {0, (int64_t)n}; /* targets, example (non-padding) tokens */
    for (size_t i = 0; i < n; i++) sums[0] += t->targets[i] >= 0;
    if (t->pos) /* a row's padding: its last run of positions when that starts with the end-of-text */
        for (size_t r0 = 0; r0 < n; r0 += (size_t)t->cfg.model.block_size) {
            size_t s = r0 + (size_t)t->cfg.model.block_size - 1;
            while (s > r0 && t->pos[s] != 0) s--;
            if (t->inputs[s] == lf_dataset_eot(t->ds)) sums[1] -= (int64_t)(r0 + (size_t)t->cfg.model.block_size - s);
        }
    o->data_ms = wait * 1e3; /* time the step waited for data (the copy out of the prefetch ring included) */
    /* every rank divides by the global count: the sum over ranks is then the
     * mean over the global batch, whatever each rank's share of targets */
    if (t->world > 1 && (st = step_sum_i64(t, o, sums, 2)) != LF_OK) return st;
    *count = sums[0];
    t->real_tokens = sums[1];
    if (*count == 0)
        return lf_fail(LF_ERR_NUMERIC, "step %ld: every target of the batch is masked out; nothing to learn from",
                       step1);
    return LF_OK;
}

/* Forward and backward over the step's micro-batches, the gradients adding
 * up (ZeRO-2/3: in the shard, summed over ranks unit by unit); *loss_sum:
 * this rank's sum of target losses. */
static lf_status step_accumulate(lf_trainer *t, step_result *o, int64_t count, double scale, double *loss_sum) {
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    size_t BT = (size_t)B * T;
    lf_status st;
    lf_model_zero_grad(t->model);
    if (t->gshard) lf_backend_zero(t->be, t->gshard, t->shard_n);
    t->zbad = -1;
    *loss_sum = 0;
    for (int a = 0; a < A; a++) {
        /* dropout keyed by the global micro-batch index of the step (a*W + r) */
        lf_forward_opts fo = {.dloss = (float)(scale / (double)count),
                              .train = 1,
                              .seed = t->cfg.seed,
                              .key = lf_rng_mix((uint64_t)t->step,
                                                (uint64_t)a * (uint64_t)t->world + (uint64_t)t->rank),
                              .pos = t->pos ? t->pos + a * BT : NULL};
        double s, ta = lf_time_now();
        long c;
        t->hook_comm_ms = 0; /* ZeRO-2/3: collectives inside forward and backward */
        if (t->dpo) {        /* forward, per-row weights, backward in one (trainer_dpo.c): timed as forward */
            t->dp_armed = t->overlap01 && a == A - 1;
            st = lf__dpo_micro(t, a, &fo, &s);
            t->dp_armed = 0;
            if (st != LF_OK) return st;
            *loss_sum += s;
            o->forward_ms += (lf_time_now() - ta) * 1e3 - t->hook_comm_ms;
            o->comm_ms += t->hook_comm_ms;
            continue;
        }
        st = lf_model_forward(t->model, t->inputs + a * BT, t->targets + a * BT, B, T, &fo, &s, &c);
        if (st != LF_OK) return st;
        double tb = lf_time_now(), fwd_comm = t->hook_comm_ms;
        *loss_sum += s;
        t->dp_armed = t->overlap01 && a == A - 1; /* stages 0-1 overlapped: the sums start in this backward */
        st = lf_model_backward(t->model);
        t->dp_armed = 0;
        if (st != LF_OK) return st;
        o->forward_ms += (tb - ta) * 1e3 - fwd_comm;
        o->backward_ms += (lf_time_now() - tb) * 1e3 - (t->hook_comm_ms - fwd_comm);
        o->comm_ms += t->hook_comm_ms;
    }
    return LF_OK;
}

/* The test hooks that act on this rank's share, before the sums (an
 * injection on one rank reaches every rank through the reductions), and
 * fp16's rounding of this rank's gradients: the first tensor whose rounded
 * gradients are not finite on this rank, -1 if none (or not fp16). */
static int step_local_checks(lf_trainer *t, long step1, double *loss_sum) {
    if (t->opts.inject_nan_step == step1 && (t->opts.inject_repeat || !t->nan_fired)) {
        /* a poisoned gradient (ZeRO-2/3: in this rank's summed shard) */
        t->nan_fired = 1;
        float nan = NAN, *g = t->gshard ? t->gshard : lf_model_train_grads(t->model);
        if (!t->gshard || t->shard_n) lf_backend_to_device(t->be, g, &nan, sizeof nan);
    }
    if (t->opts.inject_spike_step == step1 && (t->opts.inject_repeat || !t->spike_fired)) {
        t->spike_fired = 1;
        *loss_sum *= 100.0; /* an inflated loss */
    }
    if (!t->cfg.fp16) return -1;
    for (int i = 0; i < t->opts.n_inject_overflow && i < 16; i++) {
        if (t->opts.inject_overflow_steps[i] != step1) continue; /* test hook: an overflowing gradient */
        const lf_param_info *pi = lf_model_find_param(t->model, "h.0.mlp.c_fc.weight");
        const lf_param_info *table = lf_model_train_table(t->model, NULL);
        if (pi && lf_model_train_grads(t->model)) {
            const float inf = INFINITY;
            lf_backend_to_device(t->be, lf_model_train_grads(t->model) + pi->offset, &inf, sizeof inf);
        } else if (pi && t->zbad < 0) t->zbad = (int)(pi - table); /* ZeRO-2/3: the local gradient is gone */
    }
    return t->zstage >= 2 ? t->zbad : fp16_round_grads(t);
}

/* The sums over ranks: the loss and whether any rank overflowed (then every
 * rank skips: *skipped), the gradients (stage 0 buckets, stage 1
 * reduce-scatter, or waiting for the overlapped sums), fp16's check of the
 * sums and unscaling, and the gradient norm and learning rate. */
static lf_status step_reduce(lf_trainer *t, step_result *o, long step1, double scale, int64_t count, double loss_sum,
                             int bad, int *skipped) {
    lf_status st;
    *skipped = 0;
    /* one small reduction: the loss sum, and how many ranks overflowed */
    double red[2] = {loss_sum, bad >= 0 ? 1.0 : 0.0};
    if (t->world > 1 && (st = lf__step_sum_f64(t, o, red, 2)) != LF_OK) return st;
    o->loss = red[0] / (double)count;
    if (red[1] > 0) { /* some rank overflowed: every rank skips. Which one (the lowest) and where: */
        int64_t code = bad >= 0 ? (int64_t)(t->world - t->rank) << 32 | (int64_t)bad : 0;
        if (t->world > 1) {
            double tc = lf_time_now();
            st = lf_comm_all_reduce_i64(t->comm, &code, 1, LF_COMM_MAX); /* max: the lowest rank that overflowed */
            o->comm_ms += (lf_time_now() - tc) * 1e3;
            if (st != LF_OK) return st;
        }
        *skipped = 1;
        return fp16_skip(t, o, step1, scale, t->world - (int)(code >> 32), (int)(code & 0xffffffff));
    }
    if (t->overlap01) { /* stages 0-1: every unit's started sum complete, under the watchdog */
        double tw = lf_time_now();
        st = lf_comm_wait_all(t->comm);
        o->comm_ms += (lf_time_now() - tw) * 1e3;
        if (st != LF_OK) return st;
    } else if (t->zstage == 0 && t->world > 1) {
        st = lf__dp_all_reduce_grads(t, o);
        if (st != LF_OK) return st;
        /* an fp16 all-reduce leaves fp16 sums, which may overflow themselves;
         * the sums are the same bits on every rank, and so is the decision */
        if (t->cfg.fp16 && (bad = fp16_round_grads(t)) >= 0) {
            *skipped = 1;
            return fp16_skip(t, o, step1, scale, -1, bad);
        }
    }
    if (t->zstage) {
        if (t->overlap) { /* every started reduce-scatter complete, under the watchdog */
            double tw = lf_time_now();
            st = lf_comm_wait_all(t->comm);
            o->comm_ms += (lf_time_now() - tw) * 1e3;
            if (st != LF_OK) return st;
        }
        /* stage 1 sums now (reduce-scatter); stages 2-3 summed unit by unit in backward */
        if (t->zstage == 1 && !t->overlap01 && (st = lf__zero_reduce_scatter_all(t, o)) != LF_OK) return st;
        if (t->cfg.fp16) {
            if ((st = lf__zero_fp16_sum_check(t, o, &bad)) != LF_OK) return st;
            if (bad >= 0) {
                *skipped = 1;
                return fp16_skip(t, o, step1, scale, -1, bad);
            }
            if (scale != 1.0) lf__zero_scale_grads(t, (float)(1.0 / scale));
        }
        if ((st = lf__zero_grad_norm(t, o, &o->norm)) != LF_OK) return st;
    } else {
        if (t->cfg.fp16 && scale != 1.0) scale_grads(t, (float)(1.0 / scale));
        o->norm = lf_grad_norm(t->model, t->be); /* of the summed gradients: the same on every rank */
    }
    o->lr = lf_lr_at(&t->cfg, t->step);
    return LF_OK;
}

/* The alerts on the reduced loss and norm (alike on every rank): a
 * non-finite value stops, rolls back or skips; a loss spike logs, skips or
 * rolls back. *ended: the step ends here (a rollback was requested). */
static lf_status step_alerts(lf_trainer *t, step_result *o, long step1, int *ended) {
    *ended = 0;
    if (!isfinite(o->loss) || !isfinite(o->norm)) {
        char msg[256];
        snprintf(msg, sizeof msg, "step %ld: non-finite %s (loss %g, gradient norm %g)", step1,
                 !isfinite(o->loss) ? "loss" : "gradient", o->loss, o->norm);
        if (t->cfg.alert_nan_action == LF_ALERT_STOP) {
            lf__trainer_alert(t, "nan", "stop", msg);
            return lf_fail(LF_ERR_NUMERIC,
                           "%s; stopped without a checkpoint (monitor.alerts.nan.action = stop); "
                           "lower optimizer.params.lr, check the data, or resume from the last checkpoint",
                           msg);
        }
        if (t->cfg.alert_nan_action == LF_ALERT_ROLLBACK) {
            *ended = 1;
            return rollback_request(t, o, "nan", msg);
        }
        lf__trainer_alert(t, "nan", "skip_step", msg);
        o->skipped = 1;
    } else if (t->cfg.alert_spike_action != LF_ALERT_OFF) {
        double z = spike_z(t, o->loss);
        if (z > t->cfg.alert_spike_zscore) {
            char msg[256];
            int skip = t->cfg.alert_spike_action == LF_ALERT_SKIP;
            snprintf(msg, sizeof msg, "step %ld: loss %.6g is %.1f standard deviations above the last %d steps", step1,
                     o->loss, z, t->spike_n);
            if (t->cfg.alert_spike_action == LF_ALERT_ROLLBACK) {
                *ended = 1;
                return rollback_request(t, o, "loss_spike", msg);
            }
            lf__trainer_alert(t, "loss_spike", skip ? "skip_step" : "log", msg);
            o->skipped = skip;
        }
        if (!o->skipped) spike_push(t, o->loss);
    }
    return LF_OK;
}

/* The update: AdamW (whole model, ZeRO shard or offloaded), or the skip an
 * alert asked for. */
static lf_status step_apply(lf_trainer *t, step_result *o) {
    if (t->cfg.fp16) (void)lf_loss_scaler_update(&t->scaler, 0); /* a clean step (cannot fail) */
    if (o->skipped) {
        t->skipped++;
        lf__trainer_event(t, "skipped_step", NULL, "{\"reason\":\"alert\"}");
        return LF_OK;
    }
    t->opt_t++;
    return t->zstage    ? lf__zero_adamw(t, o, o->lr, o->norm)
           : t->offload ? lf__offload_adamw_all(t, o->lr, o->norm)
                        : lf_adamw_apply(t->model, t->be, t->m, t->v, t->opt_t, o->lr, &t->cfg, o->norm);
}

lf_status lf__trainer_step(lf_trainer *t, step_result *o) {
    long step1 = t->step + 1;
    int64_t count = 0;
    lf_comm_set_context(t->comm, "step %ld", step1); /* named by any collective that fails */
    lf_status st = t->dpo ? lf__dpo_step_load(t, &count) : step_load(t, o, step1, &count);
    if (st != LF_OK) return st;
    const double scale = t->cfg.fp16 ? t->scaler.scale : 1.0;
    o->loss_scale = scale;
    double loss_sum = 0;
    if ((st = step_accumulate(t, o, count, scale, &loss_sum)) != LF_OK) return st;
    if (t->dpo && (st = lf__dpo_step_stats(t, o)) != LF_OK) return st;
    double t2 = lf_time_now(), comm_before = o->comm_ms;
    int bad = step_local_checks(t, step1, &loss_sum), ended = 0;
    st = step_reduce(t, o, step1, scale, count, loss_sum, bad, &ended);
    if (st == LF_OK && !ended) st = step_alerts(t, o, step1, &ended);
    if (st == LF_OK && !ended) st = step_apply(t, o);
    if (st == LF_OK && !ended && t->opts.inject_stall_step == step1 && t->opts.inject_stall_seconds > 0)
        lf__trainer_sleep(t->opts.inject_stall_seconds); /* test hook */
    o->optimizer_ms = (lf_time_now() - t2) * 1e3 - (o->comm_ms - comm_before);
    return st;
}
