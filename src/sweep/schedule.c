/*
 * Scheduling trials: which trial a free worker trains next, and what a
 * trial's value at a rung decides (include/llmforge/sweep.h, "Rungs").
 *
 * ASHA, as Algorithm 2 of Li et al., "A System for Massively Parallel
 * Hyperparameter Tuning" (MLSys 2020): a free worker looks at the rungs
 * from the highest promotable one (the one below the last) down, and
 * promotes the first paused trial found among the best floor(n_k / eta)
 * of the n_k trials that reached rung k; if there is none it starts a new
 * trial at the bottom rung. Trials are never demoted: one promoted while it
 * was in the top fraction stays promoted if later arrivals push it out.
 * With one worker this is successive halving in the order trials arrive;
 * with several, no worker waits for a rung to fill (asynchronous). The
 * budget is a number of trials; when no new trial is left and nothing is
 * promotable, workers wait for the running trials, and when nothing runs
 * the sweep is done and the paused trials are stopped where they are.
 *
 * Median stopping (Golovin et al., "Google Vizier", KDD 2017; in the form of
 * Optuna's MedianPruner, which compares values at the same step): a trial's
 * value at a rung below the last is compared with the median of the values
 * the other trials have at that rung; worse (or NaN) stops it, provided at
 * least min_trials others have a value there (otherwise it goes on).
 *
 * Invariants: functions here read and write only their arguments (the
 * sweep's state lives in the caller's trial array and its state file), and
 * every decision is a deterministic function of that array: ranking ties go
 * to the lower id, NaN ranks last.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sweep/sweep_impl.h"

static const char *const k_states[] = {"running", "paused", "stopped", "completed", "failed"};

const char *lf_trial_state_name(lf_trial_state s) { return (unsigned)s < 5 ? k_states[s] : "unknown"; }

int lf_trial_state_parse(const char *name) {
    for (int i = 0; name && i < 5; i++)
        if (!strcmp(name, k_states[i])) return i;
    return -1;
}

void lf_sweep_trial_init(lf_sweep_trial *t, long id, const double *x, int n_dims) {
    memset(t, 0, sizeof *t);
    t->id = id;
    for (int d = 0; d < n_dims && d < LF_SWEEP_MAX_DIMS; d++) t->x[d] = x ? x[d] : 0;
    t->state = LF_TRIAL_RUNNING;
    t->rung = -1;
    t->target = 0;
    for (int k = 0; k < LF_SWEEP_MAX_RUNGS; k++) t->value[k] = NAN;
}

void lf_sweep_trial_name(long id, char *buf, size_t cap) { snprintf(buf, cap, "t%03ld", id); }

/* a better than b under the objective's direction; NaN is worst. */
static int better(double a, double b, int maximize) {
    if (isnan(a)) return 0;
    if (isnan(b)) return 1;
    return maximize ? a > b : a < b;
}

/* Indices of the trials that reached rung k, best first (ties: lower id). */
static long ranked(const lf_sweep_trial *t, long n, int k, int maximize, long *out) {
    long m = 0;
    for (long i = 0; i < n; i++)
        if (t[i].rung >= k) out[m++] = i;
    /* insertion sort: stable, and n is small (a sweep's trials) */
    for (long i = 1; i < m; i++) {
        long v = out[i], j = i;
        while (j > 0 && better(t[v].value[k], t[out[j - 1]].value[k], maximize)) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = v;
    }
    return m;
}

lf_sweep_job lf_sweep_next_job(const lf_sweep_spec *s, const lf_sweep_trial *trials, long n) {
    lf_sweep_job job = {LF_SWEEP_JOB_WAIT, -1, 0};
    const int K = s->n_rungs;
    if (s->stopper == LF_SWEEP_STOP_ASHA) {
        long *ord = n > 0 ? malloc(sizeof *ord * (size_t)n) : NULL;
        for (int k = K - 2; k >= 0 && ord; k--) {
            long m = ranked(trials, n, k, s->maximize, ord);
            long top = (long)floor((double)m / s->eta + 1e-9);
            for (long r = 0; r < top; r++) {
                const lf_sweep_trial *t = &trials[ord[r]];
                if (t->state == LF_TRIAL_PAUSED && t->rung == k) {
                    job = (lf_sweep_job){LF_SWEEP_JOB_PROMOTE, ord[r], k + 1};
                    free(ord);
                    return job;
                }
            }
        }
        free(ord);
    } else {
        for (long i = 0; i < n; i++)
            if (trials[i].state == LF_TRIAL_PAUSED && trials[i].rung + 1 < K)
                return (lf_sweep_job){LF_SWEEP_JOB_PROMOTE, i, trials[i].rung + 1};
    }
    if (n < s->trials) return (lf_sweep_job){LF_SWEEP_JOB_NEW, -1, 0};
    for (long i = 0; i < n; i++)
        if (trials[i].state == LF_TRIAL_RUNNING) return job; /* WAIT */
    job.kind = LF_SWEEP_JOB_DONE;
    return job;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

lf_trial_state lf_sweep_on_result(const lf_sweep_spec *s, lf_sweep_trial *trials, long n, long i, int k, double v) {
    lf_sweep_trial *t = &trials[i];
    const int K = s->n_rungs;
    if (k < 0) k = 0;
    if (k >= K) k = K - 1;
    t->value[k] = v;
    if (k > t->rung) t->rung = k;
    t->steps = s->rungs[k];
    t->target = k;
    t->message[0] = 0;
    if (k == K - 1) return t->state = LF_TRIAL_COMPLETED;
    if (s->stopper != LF_SWEEP_STOP_MEDIAN) return t->state = LF_TRIAL_PAUSED;
    if (isnan(v)) {
        snprintf(t->message, sizeof t->message, "no value at step %ld", s->rungs[k]);
        return t->state = LF_TRIAL_STOPPED;
    }
    double *vals = malloc(sizeof *vals * (size_t)(n > 0 ? n : 1));
    long m = 0;
    for (long j = 0; vals && j < n; j++)
        if (j != i && trials[j].rung >= k && !isnan(trials[j].value[k])) vals[m++] = trials[j].value[k];
    if (!vals || m < s->min_trials) {
        free(vals);
        return t->state = LF_TRIAL_PAUSED;
    }
    qsort(vals, (size_t)m, sizeof *vals, cmp_double);
    double med = m % 2 ? vals[m / 2] : 0.5 * (vals[m / 2 - 1] + vals[m / 2]);
    free(vals);
    if (better(med, v, s->maximize)) {
        snprintf(t->message, sizeof t->message, "%.6g at step %ld is worse than the median %.6g of %ld other trials", v,
                 s->rungs[k], med, m);
        return t->state = LF_TRIAL_STOPPED;
    }
    return t->state = LF_TRIAL_PAUSED;
}

void lf_sweep_finish(lf_sweep_trial *trials, long n) {
    for (long i = 0; i < n; i++)
        if (trials[i].state == LF_TRIAL_PAUSED) trials[i].state = LF_TRIAL_STOPPED;
}

long lf_sweep_best(const lf_sweep_spec *s, const lf_sweep_trial *trials, long n) {
    int top = -1;
    for (long i = 0; i < n; i++)
        if (trials[i].rung > top) top = trials[i].rung;
    for (int k = top; k >= 0; k--) {
        long best = -1;
        for (long i = 0; i < n; i++) {
            if (trials[i].rung < k || isnan(trials[i].value[k])) continue;
            if (best < 0 || better(trials[i].value[k], trials[best].value[k], s->maximize)) best = i;
        }
        if (best >= 0) return best;
    }
    return -1;
}

int lf_sweep_observations(const lf_sweep_spec *s, const lf_sweep_trial *trials, long n, lf_sweep_obs *obs) {
    /* a higher rung only once it holds as many values as TPE's start-up asks: moving up must not
     * send TPE back to random points */
    const int need = s->n_dims + 2 > s->tpe.startup ? s->n_dims + 2 : s->tpe.startup;
    int rung = 0;
    for (int k = s->n_rungs - 1; k > 0; k--) {
        long c = 0;
        for (long i = 0; i < n; i++) c += trials[i].rung >= k;
        if (c >= need) {
            rung = k;
            break;
        }
    }
    int m = 0;
    for (long i = 0; i < n; i++) {
        const lf_sweep_trial *t = &trials[i];
        double y;
        if (t->rung >= rung) y = t->value[rung];
        else if (t->state == LF_TRIAL_FAILED) y = INFINITY;
        else continue; /* running towards its first rung: no information yet */
        if (isnan(y)) y = INFINITY;
        if (s->maximize && isfinite(y)) y = -y;
        obs[m++] = (lf_sweep_obs){t->x, y};
    }
    return m;
}

lf_status lf_sweep_suggest(const lf_sweep_spec *s, const lf_sweep_trial *trials, long n, double *x) {
    if (!s || !x || (n > 0 && !trials)) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_suggest: NULL argument");
    switch (s->method) {
    case LF_SWEEP_GRID: return lf_sweep_grid_point(s, n, x);
    case LF_SWEEP_RANDOM: lf_sweep_random_point(s, s->seed, n, x); return LF_OK;
    default: break;
    }
    lf_sweep_obs *obs = malloc(sizeof *obs * (size_t)(n > 0 ? n : 1));
    const double **taken = malloc(sizeof *taken * (size_t)(n > 0 ? n : 1));
    if (!obs || !taken) {
        free(obs);
        free(taken);
        return lf_fail(LF_ERR_NOMEM, "TPE: out of memory");
    }
    int m = lf_sweep_observations(s, trials, n, obs);
    for (long i = 0; i < n; i++) taken[i] = trials[i].x;
    lf_status st = lf_sweep_tpe_suggest(s, &s->tpe, obs, m, taken, (int)n, s->seed, n, x);
    free(obs);
    free(taken);
    return st;
}
