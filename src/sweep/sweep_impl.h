/* Private declarations shared by the sweep module's files (spec.c: the
 * sweep file; search.c: grid, random, TPE; schedule.c: ASHA, median;
 * state.c: the state file, trial arguments, log.jsonl). */
#ifndef LF_SWEEP_IMPL_H
#define LF_SWEEP_IMPL_H

#include "llmforge/sweep.h"
#include "llmforge/train.h"

#define LF_SWEEP_OV_MAX 2048 /* one "key=value" override */

typedef struct sweep_dim {
    lf_sweep_dim pub; /* what lf_sweep_spec_dim returns (points into this struct) */
    char key[128];
    char **vals; /* grid, choice: JSON texts */
} sweep_dim;

struct lf_sweep_spec {
    char *text;                  /* normalized sweep file (base inline) */
    char base_file[LF_PATH_MAX]; /* "" for an inline base */
    char base_origin[LF_PATH_MAX + 32];
    char *base_text; /* the base configuration's JSON text */
    char **sets;     /* "key=JSON" */
    int n_sets;
    sweep_dim dims[LF_SWEEP_MAX_DIMS];
    int n_dims;
    lf_sweep_method method;
    long trials;
    uint64_t seed;
    lf_sweep_tpe_opts tpe;
    char objective[256];
    int maximize;
    lf_sweep_stopper stopper;
    double eta;
    int min_trials;
    long rungs[LF_SWEEP_MAX_RUNGS];
    int n_rungs;
    char out_dir[LF_PATH_MAX];
    int parallel, threads, slurm_workers;
    char **sbatch;
    int n_sbatch;
    char cwd[LF_PATH_MAX];
};

/* LF_ERR_CONFIG "sweep 'ORIGIN': MESSAGE". */
lf_status lf__sweep_bad(const char *origin, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* "key=value" of every dimension at point x (ov[d] for dimension d). */
lf_status lf__sweep_point_overrides(const lf_sweep_spec *s, const double *x, char ov[][LF_SWEEP_OV_MAX]);
/* "key=<value as a JSON string>" into buf (so a path is never read as a number). */
lf_status lf__sweep_string_override(const char *key, const char *value, char *buf, size_t cap);
/* A uniform double in [0, 1) from the counter (seed, purpose, index, sub): 53 bits. */
double lf__sweep_unit(uint64_t seed, uint32_t purpose, uint64_t index, uint32_t sub);

/* Stream purposes of the sweep's draws: outside lf_rng_purpose's range, so
 * no stream the trainer reads is ever reused. */
#define LF_SWEEP_RNG_RANDOM 0x53575031u /* "SWP1": random points (and TPE's start-up) */
#define LF_SWEEP_RNG_TPE 0x53575032u    /* "SWP2": TPE's candidates */

#endif
