/*
 * What guards a run: the stall watchdog, the stop request agreed at a step
 * boundary (preemption), and the rollback to the last checkpoint that an
 * alert can ask for.
 *
 * Invariants:
 *  - Stall: a watchdog thread reports a stall (no step for N seconds) once
 *    per stall, and may end the process through opts.on_fatal.
 *  - Preemption: a stop request (the caller's signal flag, or
 *    lf_trainer_request_stop) is read only at the top of the loop, i.e. at a
 *    step boundary after the previous step's evaluation and checkpoint, and
 *    agreed over the ranks there (an all-reduce of the maximum), so every
 *    rank leaves at the same step, the checkpoint holds exactly that step,
 *    and nobody waits in a collective the others never reach. A signal that
 *    arrives during a save changes nothing but the flag: the save finishes
 *    (temporary directory, fsync, rename), then the run stops.
 *  - Rollback: the alert's update is not applied; the last complete
 *    checkpoint is loaded in process by the resume code (lf__trainer_resume),
 *    and the data cursor moves past the window: the loader reads data step
 *    step + data_off, and a rollback from step k to checkpoint c adds
 *    k - c to data_off (see lf__trainer_rollback()). data_off and the
 *    rollback count are saved in trainer_state.json, so a resume keeps them;
 *    a run resumed from c with opts.skip_batches = k - c is the rolled-back
 *    run, bit for bit (PaLM, Chowdhery et al. 2022, sec. 5.1; OPT's logbook:
 *    restart from a checkpoint before the spike and skip the batches that
 *    preceded it).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

void lf__trainer_progress(lf_trainer *t) {
    pthread_mutex_lock(&t->wd_mu);
    t->last_progress = lf_time_now();
    t->stall_reported = 0;
    pthread_mutex_unlock(&t->wd_mu);
}

/* The stall watchdog: wakes a few times per stall period; reports once per
 * stall (again only after progress resumes). */
static void *watchdog_main(void *arg) {
    lf_trainer *t = arg;
    double limit = t->cfg.alert_stall_seconds;
    double tick = limit / 4 < 1.0 ? limit / 4 : 1.0;
    pthread_mutex_lock(&t->wd_mu);
    while (!t->wd_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double when = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + tick;
        ts.tv_sec = (time_t)when;
        ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&t->wd_cv, &t->wd_mu, &ts);
        if (t->wd_stop) break;
        double idle = lf_time_now() - t->last_progress;
        if (idle > limit && !t->stall_reported) {
            t->stall_reported = 1;
            long step = t->step;
            pthread_mutex_unlock(&t->wd_mu);
            char msg[256];
            int ex = t->cfg.alert_stall_action == LF_ALERT_EXIT;
            snprintf(msg, sizeof msg, "no training step finished for %.0f s (last finished step %ld; limit %g s)", idle,
                     step, limit);
            lf__trainer_alert(t, "stall", ex ? "exit" : "log", msg);
            if (ex && t->opts.on_fatal) {
                pthread_mutex_lock(&t->obs_mu);
                lf_obs_flush(t->obs);
                pthread_mutex_unlock(&t->obs_mu);
                t->opts.on_fatal(msg, t->opts.user);
            }
            pthread_mutex_lock(&t->wd_mu);
        }
    }
    pthread_mutex_unlock(&t->wd_mu);
    return NULL;
}

/* Sleeps s seconds (the test hooks' stalls), through signals. */
void lf__trainer_sleep(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The watchdog thread, when monitor.alerts.stall is on and none runs yet. */
void lf__trainer_watchdog_start(lf_trainer *t) {
    if (t->cfg.alert_stall_seconds > 0 && !t->wd_running) {
        t->wd_stop = 0;
        if (pthread_create(&t->wd, NULL, watchdog_main, t) == 0) t->wd_running = 1;
        else lf_log(LF_LOG_WARN, "could not start the stall watchdog thread; stall alerts are off");
    }
}

void lf__trainer_watchdog_stop(lf_trainer *t) {
    if (!t->wd_running) return;
    pthread_mutex_lock(&t->wd_mu);
    t->wd_stop = 1;
    pthread_cond_signal(&t->wd_cv);
    pthread_mutex_unlock(&t->wd_mu);
    pthread_join(t->wd, NULL);
    t->wd_running = 0;
}

/* The stop request agreed at this step boundary: this rank's (the caller's
 * flag, lf_trainer_request_stop's), the largest over the ranks; and whether
 * any rank holds a failed save (checkpoint.on_error is then decided alike
 * everywhere, at this boundary). One all-reduce of two values. */
lf_status lf__trainer_stop_agreed(lf_trainer *t, int *reason, int *ckerr) {
    long last = 0; /* the latest failed save here (lf__ckpt_error_decide's "was it the final one") */
    for (int k = 0; k < t->ckerr_pending; k++)
        if (t->ckerr[k].step > last) last = t->ckerr[k].step;
    int64_t v[3] = {t->stop_req, t->ckerr_pending, last};
    if (t->opts.stop_flag) {
        int64_t f = *t->opts.stop_flag;
        if (f > v[0]) v[0] = f;
    }
    if (t->world > 1) {
        lf_comm_set_context(t->comm, "stop check after step %ld", t->step);
        lf_status st = lf_comm_all_reduce_i64(t->comm, v, 3, LF_COMM_MAX);
        if (st != LF_OK) return st;
    }
    *reason = (int)v[0];
    *ckerr = v[1] != 0;
    t->ckerr_last = (long)v[2];
    return LF_OK;
}

/* Rollback (monitor.alerts.*.action rollback) after the alert at step
 * bad_step (1-based; its update was not applied): the last complete
 * checkpoint is loaded in process through the resume path (weights,
 * moments, loss scaler, counters, spike window: lf_checkpoint_resolve, so a
 * failed save is passed over), and the data cursor moves past the window
 * that led to the alert. With c the checkpoint's step and off the offset
 * before, steps c+1 .. bad_step read data steps c+off .. bad_step-1+off
 * (0-based); the offset becomes off + (bad_step - c), so step c+1 now reads
 * data step bad_step+off, the batch that would have followed the offending
 * one, and the rows of the window, [(c+off)*G, (bad_step+off)*G) with G the
 * global batch, are never read again. Everything random is keyed by the
 * step (dropout) or by the row (the sampler), so the run after a rollback
 * is the run resumed from c with opts.skip_batches = bad_step - c, bit for
 * bit. */
lf_status lf__trainer_rollback(lf_trainer *t, long bad_step, const char *kind, const char *alert_msg) {
    lf__ckpt_wait(t, "the rollback");
    const long off = t->data_off;
    const int n_rb = t->n_rollbacks;
    char hist[sizeof t->rb_hist];
    memcpy(hist, t->rb_hist, sizeof hist);
    lf_status st = lf__trainer_resume(t, t->ckpt_root, 1);
    if (st != LF_OK) {
        if (st == LF_ERR_NOT_FOUND)
            return lf_fail(LF_ERR_NUMERIC,
                           "%s; monitor.alerts.%s.action is rollback but '%s' holds no checkpoint to "
                           "roll back to (none saved yet; checkpoint.interval is %ld); stopped",
                           alert_msg, !strcmp(kind, "nan") ? "nan" : "loss_spike", t->ckpt_root, t->cfg.ckpt_interval);
        lf_error_prefix("%s; rolling back to the last checkpoint failed", alert_msg);
        return st;
    }
    const long to = t->step, rows = (long)t->cfg.micro_batch * t->cfg.grad_accum * t->world;
    /* evaluations after the checkpoint are undone with it: none may mark a replayed step's save the best */
    if (t->best_eval_step > to) t->best_eval_step = -1;
    if (t->last_eval_step > to) t->last_eval_step = -1;
    const long first = to + off, last = bad_step - 1 + off; /* data steps skipped, inclusive */
    t->data_off = off + (bad_step - to);
    t->n_rollbacks = n_rb + 1;
    size_t hl = strlen(hist);
    snprintf(hist + hl, sizeof hist - hl, "%sstep %ld -> %ld (%s; batches %ld-%ld skipped)", hl ? "; " : "", bad_step,
             to, kind, first, last);
    memcpy(t->rb_hist, hist, sizeof hist);
    if (t->rank == 0) {
        lf_log(LF_LOG_WARN,
               "rollback %d of at most %d: step %ld -> checkpoint step %ld ('%s'); the batches of data "
               "steps %ld-%ld (rows %ld-%ld) are skipped: step %ld reads data step %ld",
               t->n_rollbacks, t->cfg.alert_max_rollbacks, bad_step, to, t->rollback_dir, first, last, first * rows,
               (last + 1) * rows - 1, to + 1, to + t->data_off);
        char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 512];
        lf__trainer_json_escape(esc, sizeof esc, t->rollback_dir);
        snprintf(json, sizeof json,
                 "{\"from_step\":%ld,\"to_step\":%ld,\"reason\":\"%s\",\"checkpoint\":\"%s\","
                 "\"skipped_batches\":[%ld,%ld],\"skipped_rows\":[%ld,%ld],\"batch_offset\":%ld,\"rollbacks\":%d}",
                 bad_step, to, kind, esc, first, last, first * rows, (last + 1) * rows - 1, t->data_off,
                 t->n_rollbacks);
        lf_obs_record r = {.kind = LF_OBS_EVENT, .step = to, .event = "rollback", .json = json};
        lf__trainer_emit(t, &r);
    }
    return LF_OK;
}

/* Stop at this boundary: a checkpoint of the step reached (unless it was
 * just saved or resumed from), then LF_ERR_PREEMPTED. */
lf_status lf__trainer_preempt(lf_trainer *t, int reason) {
    t->stop_reason = reason;
    lf__ckpt_wait(t, "the stop"); /* async: the write in flight completes before anything else */
    if (t->ckerr_pending) {       /* it failed: this step is saved again below, synchronously */
        for (int k = 0; k < t->ckerr_pending && t->rank == 0; k++)
            lf_log(LF_LOG_WARN, "the checkpoint of step %ld failed: %s", t->ckerr[k].step, t->ckerr[k].msg);
        t->ckerr_pending = 0;
    }
    if (t->saved_step != t->step) {
        lf_status st = lf__trainer_save(t, 0);
        if (st != LF_OK) {
            lf_error_prefix("stopping at step %ld on request (%d): the checkpoint failed", t->step, reason);
            return st;
        }
        lf__treg_checkpoint(t->treg, t->model, t->step, t->last_eval_step == t->step, t->last_train_eval, t->last_val,
                            t->task_res, t->best_ckpt, NULL);
    }
    char json[LF_PATH_MAX + 160], esc[LF_PATH_MAX * 2] = "";
    char where[LF_PATH_MAX + 40];
    snprintf(where, sizeof where, "%s/step_%08ld", t->ckpt_root, t->step);
    lf__trainer_json_escape(esc, sizeof esc, where);
    snprintf(json, sizeof json, "{\"reason\":%d,\"path\":\"%s\"}", reason, esc);
    lf__trainer_event(t, "preempted", NULL, json);
    if (t->rank == 0)
        lf_log(LF_LOG_INFO, "stop requested (%d): stopped at step %ld of %ld with checkpoint '%s'", reason, t->step,
               t->cfg.train_iters, where);
    return lf_fail(LF_ERR_PREEMPTED,
                   "stopped at step %ld of %ld on request (%d); checkpoint '%s' holds that step: "
                   "resume to continue",
                   t->step, t->cfg.train_iters, reason, where);
}
