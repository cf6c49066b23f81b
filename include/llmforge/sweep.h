/*
 * Hyperparameter sweeps: a search space over training configuration keys,
 * a search method that proposes points in it, and an early-stopping rule
 * that decides, at fixed steps ("rungs"), which trials go on training.
 * `llmforge sweep` (tools/llmforge/cmd_sweep.c) runs each trial as an
 * ordinary `llmforge train` process with overrides; this module is the
 * part with no processes in it: the sweep file, the search methods, the
 * schedulers, the sweep directory's state file and reading a trial's
 * log.jsonl. docs/sweeps.md specifies the sweep file.
 *
 * The sweep file (JSON; lf_sweep_spec_parse):
 *   {"base": "cfg.json" | {...inline config...},  the training configuration
 *    "set": {"train_iters": 1000, ...},           overrides every trial gets
 *    "space": {"optimizer.params.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
 *              "scheduler.warmup_iters": {"type": "grid", "values": [0, 100]}, ...},
 *    "method": "grid" | "random" | "tpe",  "trials": N,  "seed": S,
 *    "objective": {"metric": "val_loss", "mode": "minimize" | "maximize"},
 *    "early_stopping": {"type": "asha", "eta": 3, "min_resource": 100}
 *                    | {"type": "median", "min_resource": 200, "interval": 100, "min_trials": 3}
 *                    | "none",
 *    "tpe": {"startup": 10, "gamma": 0.25, "candidates": 24},
 *    "out_dir": "sweeps/NAME",  "parallel": 1,  "threads": 0,
 *    "slurm": {"workers": 4, "sbatch": ["--time=01:00:00", ...]}}
 *
 * Points. A point is one double per dimension, in the space's order: the
 * value itself for uniform, loguniform and int dimensions (an int's is an
 * integer), the index of the value for grid and choice dimensions.
 *
 * Rungs. Every trial trains to the steps of its rungs in turn, stopping at
 * each (train.stop_at: evaluated and checkpointed there, the learning-rate
 * schedule still train_iters') and continuing from that checkpoint
 * (--resume) when the scheduler lets it. Without early stopping the only
 * rung is train_iters. ASHA (Li et al., "A System for Massively Parallel
 * Hyperparameter Tuning", MLSys 2020): rungs R/eta^k for k = K..0, R =
 * train_iters, the smallest the first at least min_resource, each rounded to
 * the nearest multiple of eval.interval; a trial paused at rung k is
 * promoted when it is among the best floor(n_k/eta) of the n_k trials that
 * have reached rung k (highest rung first); otherwise a new trial starts.
 * Median stopping (Golovin et al., "Google Vizier", KDD 2017, as Optuna's
 * MedianPruner): rungs every `interval` steps from min_resource; a trial
 * whose value at a rung is worse than the median of the other trials'
 * values at that rung (once at least min_trials have one) stops there.
 *
 * Ownership and threads: an lf_sweep_spec is immutable after parsing and
 * may be shared by threads; every other function works on its arguments
 * only. Errors are negative statuses with a message naming the file and
 * key (lf_last_error): LF_ERR_CONFIG (a bad sweep file: unknown key, empty
 * space, bad bounds, unknown method, an objective that is not logged),
 * LF_ERR_FORMAT (not JSON, a damaged state file), LF_ERR_NOT_FOUND /
 * LF_ERR_IO (files), LF_ERR_INVALID_ARG, LF_ERR_NOMEM.
 */
#ifndef LLMFORGE_SWEEP_H
#define LLMFORGE_SWEEP_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LF_SWEEP_MAX_DIMS 32      /* dimensions of a space */
#define LF_SWEEP_MAX_RUNGS 64     /* rungs of a schedule */
#define LF_SWEEP_MAX_TRIALS 10000 /* trials of a sweep (the state is rewritten whole at each change) */
#define LF_SWEEP_MAX_VALUES 4096  /* values of one grid or choice dimension */

typedef enum lf_sweep_dim_type {
    LF_SWEEP_DIM_GRID = 0,       /* every value, as a grid axis (random/tpe: like choice) */
    LF_SWEEP_DIM_CHOICE = 1,     /* one of the values */
    LF_SWEEP_DIM_UNIFORM = 2,    /* a real in [low, high] */
    LF_SWEEP_DIM_LOGUNIFORM = 3, /* a real in [low, high], uniform in its logarithm (0 < low < high) */
    LF_SWEEP_DIM_INT = 4,        /* an integer in [low, high] (grid method: every one of them) */
} lf_sweep_dim_type;

typedef enum lf_sweep_method { LF_SWEEP_GRID = 0, LF_SWEEP_RANDOM = 1, LF_SWEEP_TPE = 2 } lf_sweep_method;
typedef enum lf_sweep_stopper {
    LF_SWEEP_STOP_NONE = 0,
    LF_SWEEP_STOP_ASHA = 1,
    LF_SWEEP_STOP_MEDIAN = 2
} lf_sweep_stopper;

/* "grid", "choice", ...; "random", "tpe"; "asha", "median", "none". */
const char *lf_sweep_dim_type_name(lf_sweep_dim_type t);
const char *lf_sweep_method_name(lf_sweep_method m);
const char *lf_sweep_stopper_name(lf_sweep_stopper s);

typedef struct lf_sweep_dim {
    const char *key; /* the configuration key ("optimizer.params.lr") */
    lf_sweep_dim_type type;
    double low, high;          /* uniform, loguniform, int */
    int n_values;              /* grid, choice */
    const char *const *values; /* grid, choice: each value as JSON text ("0.001", "\"cosine\"", "true") */
} lf_sweep_dim;

typedef struct lf_sweep_spec lf_sweep_spec;

/* Parse and check a sweep file's text. origin names it in messages; dir is
 * the directory relative paths in it are taken from (the base config; NULL:
 * the working directory); cwd (NULL: the working directory) is where
 * trials run (relative paths inside the base config, e.g. data.dataset, are
 * the trainer's, from there). Checked: every key of the file; every
 * dimension's key is a training configuration key (the base config with the
 * `set` overrides, then the dimension's lowest or first value, must load);
 * bounds (low < high, loguniform low > 0, int bounds integers); values
 * non-empty; out_dir, train.stop_at and (with early stopping) train_iters
 * and eval.interval are the sweep's, not the space's; the objective is
 * logged at every evaluation (train_loss, val_loss, or <task>/<metric> of a
 * task in eval.tasks with a metric of its kind); the method and its options;
 * the rungs (early stopping needs eval.interval > 0, min_resource a multiple
 * of it below train_iters). LF_ERR_CONFIG naming the key otherwise. */
lf_status lf_sweep_spec_parse(lf_sweep_spec **out, const char *json, const char *origin, const char *dir,
                              const char *cwd);
/* lf_sweep_spec_parse of a file (dir: the file's directory). */
lf_status lf_sweep_spec_load(lf_sweep_spec **out, const char *path, const char *cwd);
void lf_sweep_spec_free(lf_sweep_spec *s); /* NULL is a no-op */

int lf_sweep_spec_n_dims(const lf_sweep_spec *s);
const lf_sweep_dim *lf_sweep_spec_dim(const lf_sweep_spec *s, int i); /* NULL when out of range */
lf_sweep_method lf_sweep_spec_method(const lf_sweep_spec *s);
lf_sweep_stopper lf_sweep_spec_stopper(const lf_sweep_spec *s);
/* Trials the sweep runs: the grid's size for grid, `trials` otherwise. */
long lf_sweep_spec_trials(const lf_sweep_spec *s);
uint64_t lf_sweep_spec_seed(const lf_sweep_spec *s);
const char *lf_sweep_spec_objective(const lf_sweep_spec *s);
int lf_sweep_spec_maximize(const lf_sweep_spec *s);
/* The rungs' steps, increasing, the last train_iters; returns their number. */
int lf_sweep_spec_rungs(const lf_sweep_spec *s, const long **steps);
double lf_sweep_spec_eta(const lf_sweep_spec *s);     /* ASHA's reduction factor */
int lf_sweep_spec_min_trials(const lf_sweep_spec *s); /* median: other trials needed at a rung */
/* The base configuration: a file path (absolute), or NULL with the inline
 * configuration's JSON text in *inline_json. */
const char *lf_sweep_spec_base(const lf_sweep_spec *s, const char **inline_json);
/* The `set` overrides, "key=JSON" each. */
int lf_sweep_spec_sets(const lf_sweep_spec *s, const char *const **sets);
/* The sweep file's own settings: out_dir ("" when not given), parallel (0:
 * not given), threads (0: all), slurm workers (0: not given) and sbatch
 * options. */
const char *lf_sweep_spec_out_dir(const lf_sweep_spec *s);
int lf_sweep_spec_parallel(const lf_sweep_spec *s);
int lf_sweep_spec_threads(const lf_sweep_spec *s);
int lf_sweep_spec_slurm_workers(const lf_sweep_spec *s);
int lf_sweep_spec_sbatch(const lf_sweep_spec *s, const char *const **opts);
/* The working directory trials run in (absolute). */
const char *lf_sweep_spec_cwd(const lf_sweep_spec *s);
/* The sweep file's text as parsed (what the state file keeps). */
const char *lf_sweep_spec_text(const lf_sweep_spec *s);

/* ---------------------------------------------------------------- points */

/* The override value of dimension d at point coordinate v, as text for
 * `--key=value` (a grid/choice value's JSON text; an int in decimal; a real
 * with the fewest digits that read back as the same double). Returns the
 * length (snprintf-style). */
int lf_sweep_value_text(const lf_sweep_spec *s, int d, double v, char *buf, size_t cap);

/* The grid's points: every combination of the dimensions' values (grid and
 * choice: each value; int: each integer), the first dimension varying
 * slowest. Point `index` (0 <= index < lf_sweep_grid_size) into x (one per
 * dimension). The grid size is 0 when a dimension is uniform/loguniform. */
long lf_sweep_grid_size(const lf_sweep_spec *s);
lf_status lf_sweep_grid_point(const lf_sweep_spec *s, long index, double *x);
/* A random point, a pure function of (seed, index): every dimension drawn
 * independently (uniform; loguniform: uniform in log; int and grid/choice:
 * each integer or value equally likely). */
void lf_sweep_random_point(const lf_sweep_spec *s, uint64_t seed, long index, double *x);

/* An observation for TPE: a point and its objective, lower is better
 * (negate a maximised metric; NaN or +inf: failed, ranked last). */
typedef struct lf_sweep_obs {
    const double *x;
    double y;
} lf_sweep_obs;

typedef struct lf_sweep_tpe_opts {
    int startup;    /* random points until this many observations exist (default 10) */
    double gamma;   /* the best ceil(gamma * n) observations are "good" (default 0.25; at most 25 of them) */
    int candidates; /* points drawn from the good density, the best l/g kept (default 24) */
} lf_sweep_tpe_opts;

lf_sweep_tpe_opts lf_sweep_tpe_opts_default(void);
/* The TPE point for trial `index` (Bergstra et al., "Algorithms for
 * Hyper-Parameter Optimization", NeurIPS 2011): with fewer than
 * opts.startup observations (or fewer than 2) the random point of (seed, index)
 * (or, when a trial has that point, the first untried one of the stream (seed,
 * index, k));
 * otherwise the observations are split into good (the best ceil(gamma*n))
 * and bad, each dimension gets a Parzen estimator l(x) over the good and
 * g(x) over the bad (a truncated Gaussian at each observation, in log space
 * for loguniform, with the prior's component; smoothed frequencies for
 * grid/choice; int as the mass of its unit bin), `candidates` points are
 * drawn from l, and the one with the largest sum over dimensions of
 * log l(x) - log g(x) is returned (the first on ties). Candidates equal to
 * one of the n_taken points of `taken` (the trials that exist: training
 * is deterministic, so running a point again teaches nothing) are passed
 * over; when every candidate is taken, up to 64 random points (stream
 * (seed, index, k)) are tried for one that is not, and only then a taken
 * point is returned (a finite space exhausted). A pure function of (spec,
 * obs in the given order, taken, seed, index). opts NULL: defaults; taken
 * may be NULL. */
lf_status lf_sweep_tpe_suggest(const lf_sweep_spec *s, const lf_sweep_tpe_opts *opts, const lf_sweep_obs *obs,
                               int n_obs, const double *const *taken, int n_taken, uint64_t seed, long index,
                               double *x);
/* The spec's TPE options (its "tpe" object over the defaults). */
lf_sweep_tpe_opts lf_sweep_spec_tpe(const lf_sweep_spec *s);

/* ---------------------------------------------------------------- trials and scheduling */

typedef enum lf_trial_state {
    LF_TRIAL_RUNNING = 0,   /* training towards rung `target` (or interrupted there: the driver finds out) */
    LF_TRIAL_PAUSED = 1,    /* stopped at rung `rung`, may be promoted */
    LF_TRIAL_STOPPED = 2,   /* stopped early for good */
    LF_TRIAL_COMPLETED = 3, /* reached the last rung */
    LF_TRIAL_FAILED = 4,    /* its training failed */
} lf_trial_state;

/* "running", "paused", "stopped", "completed", "failed"; "unknown". */
const char *lf_trial_state_name(lf_trial_state s);
/* The inverse; -1 for an unknown name. */
int lf_trial_state_parse(const char *name);

typedef struct lf_sweep_trial {
    long id;                     /* 0, 1, ...: the order trials were created in */
    double x[LF_SWEEP_MAX_DIMS]; /* its point */
    lf_trial_state state;
    int rung;                         /* the highest rung it has a value at (-1: none yet) */
    int target;                       /* RUNNING: the rung it trains to */
    double value[LF_SWEEP_MAX_RUNGS]; /* the objective at each rung it reached (NaN: none) */
    long steps;                       /* the step it has trained to */
    int attempts;                     /* processes started for it (restarts included) */
    int tries;                        /* of those, towards the current target (a restart counts) */
    double seconds;                   /* wall time of those processes */
    long pid;                         /* the last process started for it, and its host */
    char host[64];
    char message[512]; /* FAILED: why */
} lf_sweep_trial;

/* A fresh trial record (no values, rung -1, RUNNING towards rung 0). */
void lf_sweep_trial_init(lf_sweep_trial *t, long id, const double *x, int n_dims);

typedef enum lf_sweep_job_kind {
    LF_SWEEP_JOB_WAIT = 0,    /* nothing to start now: trials are running */
    LF_SWEEP_JOB_NEW = 1,     /* start a new trial (the next id) towards rung 0 */
    LF_SWEEP_JOB_PROMOTE = 2, /* continue paused trial `trial` towards rung `rung` */
    LF_SWEEP_JOB_DONE = 3,    /* nothing is running and nothing is left */
} lf_sweep_job_kind;

typedef struct lf_sweep_job {
    lf_sweep_job_kind kind;
    long trial; /* PROMOTE: index into the trial array */
    int rung;   /* NEW: 0; PROMOTE: the rung it now trains to */
} lf_sweep_job;

/* What a free worker does next, from the trials so far (n of them, in id
 * order) and the spec's budget: ASHA promotes (highest rung first) a paused
 * trial among the best floor(n_k/eta) at its rung; median and no-stopping
 * continue any paused trial (the oldest first); else a new trial while
 * fewer than lf_sweep_spec_trials exist; else WAIT while one is running;
 * else DONE. Ties in the ranking go to the lower id; a NaN value ranks
 * last. */
lf_sweep_job lf_sweep_next_job(const lf_sweep_spec *s, const lf_sweep_trial *trials, long n);
/* Trial i reached rung k with objective value v (NaN: not logged / not
 * finite): record it (value[k], rung, steps) and move it to COMPLETED (the
 * last rung), PAUSED (ASHA; median and none when it may go on) or STOPPED
 * (median: worse than the median of the other trials at k). Returns the new
 * state. */
lf_trial_state lf_sweep_on_result(const lf_sweep_spec *s, lf_sweep_trial *trials, long n, long i, int k, double v);
/* The sweep is over (lf_sweep_next_job said DONE): paused trials become STOPPED. */
void lf_sweep_finish(lf_sweep_trial *trials, long n);
/* The best trial: the best value at the highest rung any trial reached
 * (completed trials first), lower id on ties; -1 when no trial has a value. */
long lf_sweep_best(const lf_sweep_spec *s, const lf_sweep_trial *trials, long n);
/* The TPE observations from the trials: each trial's value at the highest
 * rung that holds at least max(n_dims + 2, tpe startup) values (else rung
 * 0), failed trials as +inf; maximised objectives negated. obs must hold n entries; returns how
 * many were written. */
int lf_sweep_observations(const lf_sweep_spec *s, const lf_sweep_trial *trials, long n, lf_sweep_obs *obs);
/* The point of the next new trial (id n): the grid's point n, the random
 * point (seed, n), or TPE's suggestion from lf_sweep_observations (the n
 * trials' points taken). */
lf_status lf_sweep_suggest(const lf_sweep_spec *s, const lf_sweep_trial *trials, long n, double *x);

/* ---------------------------------------------------------------- the sweep directory's state */

/* state.json, written atomically (a temporary file, fsync, rename, fsync of
 * the directory), so a killed driver leaves the old state or the new one:
 *   {"format":"llmforge-sweep-state","version":1,"sweep":<the sweep file>,
 *    "cwd":"/abs","trials":[{"id":0,"name":"t000","params":{"key":value},
 *    "x":[...],"state":"paused","rung":0,"target":0,"values":[2.1,null],
 *    "steps":100,"attempts":1,"tries":1,"seconds":12.5,
 *    "pid":4242,"host":"node1","message":""}, ...]}
 * lf_sweep_state_load checks the trials against the spec (dimensions,
 * rungs, states) and fails with LF_ERR_FORMAT naming state.json and the
 * trial otherwise. *trials is lf_alloc'd (lf_free). */
lf_status lf_sweep_state_save(const char *path, const lf_sweep_spec *s, const lf_sweep_trial *trials, long n);
lf_status lf_sweep_state_load(const char *path, const lf_sweep_spec *s, lf_sweep_trial **trials, long *n);
/* The sweep file text a state file was written for (lf_alloc'd), to build
 * the spec from before loading the trials. */
lf_status lf_sweep_state_spec_text(const char *path, char **json, char **cwd);

/* The trial's name: "t000", "t001", ... "t1000" (at least 3 digits). */
void lf_sweep_trial_name(long id, char *buf, size_t cap);
/* The `llmforge train` arguments (argv[0] is "train") of trial t towards
 * rung `rung` in run directory trial_dir: base_path (the sweep directory's
 * copy of the base configuration, which the caller writes from
 * lf_sweep_spec_base's text), "--key=value" for each `set` override and
 * each dimension, then the sweep's own: --out_dir=trial_dir,
 * --train.stop_at=<the rung's step> (0 at the last rung), --resume when
 * resume, --threads=N when threads > 0. *argv is one lf_alloc'd block
 * (strings inside it), NULL-terminated; *argc its count. */
lf_status lf_sweep_train_args(const lf_sweep_spec *s, const lf_sweep_trial *t, int rung, const char *trial_dir,
                              const char *base_path, int resume, int threads, char ***argv, int *argc);
/* The step of run_dir/ckpt/latest (its trainer_state.json); LF_ERR_NOT_FOUND
 * when the run has no checkpoint. */
lf_status lf_sweep_checkpoint_step(const char *run_dir, long *step);
/* The training configuration of trial t as the overrides of
 * lf_sweep_train_args (without out_dir and stop_at) resolve it, as JSON
 * (lf_train_config_to_json; lf_free): what `llmforge sweep best` prints. */
lf_status lf_sweep_trial_config_json(const lf_sweep_spec *s, const lf_sweep_trial *t, const char *out_dir, char **json);
/* The objective at `step` in a run's log.jsonl: the last "eval" record of
 * that step; metric "val_loss"/"train_loss" or "<task>/<metric>" (logged
 * as "eval/<task>/<metric>"). *v is NaN when the record holds null.
 * LF_ERR_NOT_FOUND when no eval record of that step exists. */
lf_status lf_sweep_log_metric(const char *log_path, const char *metric, long step, double *v);

#ifdef __cplusplus
}
#endif
#endif
