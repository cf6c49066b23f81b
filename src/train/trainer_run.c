/*
 * The training loop (lf_trainer_run): step after step until train_iters (or
 * train.stop_at), and at each step boundary, in this order: the outcome of
 * a background checkpoint write, the agreed stop request and failed save,
 * the step (trainer_step.c), its record, evaluation, checkpoint.
 *
 * Invariants:
 *  - A step boundary is the only place a stop request or a failed save is
 *    read; every rank reads it there alike (trainer_watch.c).
 *  - Every way out waits for the checkpoint writer: the run never returns
 *    with a write in flight.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

lf_status lf_trainer_run(lf_trainer *t) {
    lf_status st;
    lf__trainer_emit_start(t);
    lf__treg_run_begin(t->treg, &t->cfg, t->world, t->resumed_dir, t->opts.init_from, lf_dataset_tokenizer_spec(t->ds));
    lf__trainer_progress(t);
    lf__trainer_watchdog_start(t);
    st = LF_OK;
    /* train.stop_at ends the run early (evaluated and checkpointed like the
     * last step) without touching the schedule, which follows train_iters */
    const long stop = t->cfg.stop_at > 0 && t->cfg.stop_at < t->cfg.train_iters ? t->cfg.stop_at : t->cfg.train_iters;
    while (t->step < stop) {
        int req = 0, ckerr = 0; /* a step boundary: the only place a stop request or a failed save is read */
        lf__ckpt_poll(t);       /* a background write that is done: its outcome */
        if ((st = lf__trainer_stop_agreed(t, &req, &ckerr)) != LF_OK) break;
        if (ckerr && (st = lf__ckpt_error_decide(t, 0)) != LF_OK) break;
        if (req) {
            st = lf__trainer_preempt(t, req);
            break;
        }
        double t0 = lf_time_now();
        step_result sr = {0};
        double busy0 = 0, exposed0 = 0, busy1 = 0, exposed1 = 0;
        lf_comm_times(t->comm, &busy0, &exposed0);
        st = lf__trainer_step(t, &sr);
        if (st != LF_OK) break;
        /* what ran in the background beyond the waits for it (comm.h lf_comm_times) */
        lf_comm_times(t->comm, &busy1, &exposed1);
        sr.comm_hidden_ms = fmax(0.0, (busy1 - busy0) - (exposed1 - exposed0));
        if (sr.rollback) { /* the step does not count: back to the checkpoint, past the window */
            st = lf__trainer_rollback(t, t->step + 1, sr.rollback, sr.alert_msg);
            if (st != LF_OK) break;
            lf__trainer_progress(t);
            continue;
        }
        double dt = lf_time_now() - t0;
        t->step++;
        lf__trainer_progress(t);
        lf__trainer_emit_step(t, &sr, dt);
        int last = t->step == stop;
        if ((t->cfg.eval_interval > 0 && t->step % t->cfg.eval_interval == 0) || last) {
            st = lf__trainer_eval(t);
            if (st != LF_OK) break;
            lf__trainer_progress(t);
        }
        if ((t->cfg.ckpt_interval > 0 && t->step % t->cfg.ckpt_interval == 0) || last) {
            st = lf__trainer_save(t, 1);
            if (st != LF_OK) { /* checkpoint.on_error decides at the next boundary, alike on every rank */
                lf__ckpt_error_note(t, st, t->step, lf_last_error());
                st = LF_OK;
            } else if (!t->cfg.ckpt_async) { /* async: the writer's reap records it */
                char *suite_json = NULL;     /* the registry's record, and eval.suite on the checkpoint */
                lf__treg_checkpoint(t->treg, t->model, t->step, t->last_eval_step == t->step, t->last_train_eval,
                                    t->last_val, t->task_res, t->best_ckpt, &suite_json);
                if (suite_json) lf__trainer_event(t, "eval_suite", NULL, suite_json);
                free(suite_json);
            }
            lf__trainer_progress(t);
        }
    }
    /* every way out waits for the writer: the run never returns with a write in flight */
    lf__ckpt_wait(t, "the end of the run");
    if (st == LF_OK) { /* the last save's outcome (or a background one found only now), agreed */
        int req = 0, ckerr = 0;
        st = lf__trainer_stop_agreed(t, &req, &ckerr);
        if (st == LF_OK && ckerr) st = lf__ckpt_error_decide(t, 1);
    } else if (t->rank == 0) {
        for (int k = 0; k < t->ckerr_pending; k++)
            lf_log(LF_LOG_WARN, "the checkpoint of step %ld failed too: %s", t->ckerr[k].step, t->ckerr[k].msg);
    }
    lf__trainer_watchdog_stop(t);
    if (st == LF_OK && t->cfg.load_best_model_at_end && t->rank == 0) st = lf__trainer_export_best(t);
    if (st != LF_OK) lf__trainer_fail(t, st);
    lf__trainer_emit_end(t, st);
    lf__treg_run_end(t->treg, st, t->errmsg);
    pthread_mutex_lock(&t->obs_mu);
    lf_obs_flush(t->obs);
    pthread_mutex_unlock(&t->obs_mu);
    if (t->rank == 0) lf__trep_report(&t->cfg); /* monitor.report: a failure is a warning */
    return st;
}
