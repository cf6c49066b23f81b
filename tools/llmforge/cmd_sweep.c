/*
 * llmforge sweep: hyperparameter sweeps with early stopping, each trial an
 * ordinary `llmforge train` process (this binary, re-executed) with
 * overrides, each a registry run linked to its sweep and trial.
 *
 *   llmforge sweep SWEEP.json [--dir DIR] [--parallel N] [--threads T] [--dry-run]
 *   llmforge sweep SWEEP.json --slurm [--workers N] [--wait] [--dir DIR]
 *   llmforge sweep worker DIR [--parallel N] [--threads T]     (what each Slurm array task runs)
 *   llmforge sweep status DIR [--json]
 *   llmforge sweep best DIR [--out-dir D]
 *
 * The sweep directory holds everything: state.json (the sweep file, with
 * its base configuration inline, and every trial; written atomically by
 * src/sweep/state.c), base.json (the base configuration the trials read),
 * trials/tNNN/ (each trial's run directory), logs/tNNN.log (its processes'
 * output), locks/ and slurm/.
 *
 * Workers. Whatever runs trials is a worker: the local driver (N slots,
 * --parallel) and each task of a Slurm job array (one slot). A worker takes
 * the state lock (flock of state.lock, held for a read-modify-write of
 * state.json, never while training), asks the scheduler for a job
 * (lf_sweep_next_job), marks the trial running in state.json, takes the
 * trial's own lock (flock of locks/tNNN.lock) and starts `llmforge train`,
 * which inherits that lock. Invariants that follow:
 *  - A trial is created in state.json, with its point, before its process
 *    starts: a driver killed at any instant leaves no trial that ran without
 *    being recorded, and a restart never draws a new point for it.
 *  - A trial's lock is held as long as its worker or its training process
 *    lives (the kernel drops a flock with the last descriptor, at any death,
 *    SIGKILL included). A "running" trial whose lock can be taken has nobody
 *    working on it: its run directory says what happened (an evaluation and
 *    a checkpoint at the target rung: the result is taken; a checkpoint
 *    short of it: resumed with --resume; nothing: restarted from scratch).
 *    A running trial whose lock is held is waited for, never started again:
 *    no trial is ever trained by two processes, and none twice as two
 *    trials.
 *  - A training failure (non-zero exit) fails the trial and is not retried
 *    (it is deterministic: a diverging learning rate diverges again); a
 *    process killed by a signal is picked up again as above (up to 3
 *    attempts).
 * flock over NFS is emulated with POSIX locks by Linux's client, so the
 * same holds for Slurm workers on several hosts of a shared file system.
 *
 * Exit status: 0 done; 1 a bad sweep file, a failed sweep directory or
 * Slurm submission; 2 usage; 130/143 interrupted (the sweep resumes from
 * where it stood).
 */
#define _GNU_SOURCE /* strsignal */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "llmforge/registry.h"
#include "llmforge/sweep.h"
#include "llmforge/train.h"
#include "cli_util.h"
#include "commands.h"

#define MAX_ATTEMPTS 3
#define PATHN 4096

static volatile sig_atomic_t g_stop; /* SIGINT / SIGTERM */

static void on_signal(int sig) { g_stop = sig; }

static void sweep_usage(FILE *f) {
    fprintf(f, "usage: llmforge sweep SWEEP.json [--dir DIR] [--parallel N] [--threads T] [--dry-run]\n"
               "       llmforge sweep SWEEP.json --slurm [--workers N] [--wait] [--dir DIR]\n"
               "       llmforge sweep status DIR [--json]\n"
               "       llmforge sweep best DIR [--out-dir D]\n"
               "       llmforge sweep worker DIR [--parallel N] [--threads T]\n"
               "  Runs a hyperparameter sweep: each trial is `llmforge train` on the sweep file's base\n"
               "  configuration with the trial's values as overrides, stopped at the early-stopping rungs\n"
               "  and resumed from its checkpoint when promoted. Running it again on the same directory\n"
               "  resumes the sweep (no trial is run twice). docs/sweeps.md describes the sweep file.\n"
               "  DIR: --dir, else the file's out_dir, else sweeps/<file name without .json>.\n"
               "  --parallel N   trials at once (default: the file's parallel, else 1); the threads\n"
               "                 (--threads, else the file's threads, else the CPUs granted: affinity mask,\n"
               "                 cgroup CPU limit) are divided among them\n"
               "  --slurm        submit a job array of --workers (else slurm.workers, else --parallel) tasks,\n"
               "                 each `llmforge sweep worker DIR`, with the file's slurm.sbatch options;\n"
               "                 --wait: until the array ends, then print the status\n"
               "  --dry-run      check the file and print the rungs and the first trial's command\n"
               "  status         the table: trial, state, steps used, rung, objective, params (--json: all)\n"
               "  best           the best trial's full training configuration as JSON (out_dir D,\n"
               "                 default DIR/best), ready for `llmforge train`\n");
}

/* ---------------------------------------------------------------- small helpers */

static void path_join(char *out, size_t cap, const char *a, const char *b) { snprintf(out, cap, "%s/%s", a, b); }

static int abs_path(const char *p, char *out, size_t cap) {
    if (p[0] == '/') {
        snprintf(out, cap, "%s", p);
    } else {
        char cwd[PATHN];
        if (!getcwd(cwd, sizeof cwd)) return -1;
        snprintf(out, cap, "%s/%s", cwd, p);
    }
    char *rp = realpath(out, NULL);
    if (rp) {
        snprintf(out, cap, "%s", rp);
        free(rp);
    }
    return 0;
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* CPUs this process is granted (a Slurm task's allocation, a taskset, a
 * container's CPU limit): lf_cpu_threads_detect. */
static int cpu_count(void) {
    lf_cpu_threads t;
    return lf_cpu_threads_detect(&t);
}

/* The point as "key=value ..." for people. */
static void params_text(const lf_sweep_spec *s, const lf_sweep_trial *t, char *out, size_t cap) {
    size_t at = 0;
    out[0] = 0;
    for (int d = 0; d < lf_sweep_spec_n_dims(s) && at < cap; d++) {
        char v[256];
        lf_sweep_value_text(s, d, t->x[d], v, sizeof v);
        at += (size_t)snprintf(out + at, cap - at, "%s%s=%s", d ? " " : "", lf_sweep_spec_dim(s, d)->key, v);
    }
}

/* The last line of a file that looks like an error (for a failed trial's message). */
static void last_error_line(const char *path, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (strstr(line, "llmforge") && (strstr(line, "error") || strstr(line, ": ")) &&
            !strncmp(line, "llmforge: ", 10))
            snprintf(out, cap, "%s", line);
    }
    fclose(f);
}

/* ---------------------------------------------------------------- the sweep directory */

typedef struct sweep_dir {
    char dir[PATHN]; /* absolute */
    char state[PATHN + 16];
    char lock[PATHN + 16];
    char base[PATHN + 16];
    lf_sweep_spec *spec; /* as the state file has it */
} sweep_dir;

static int lock_file(const char *path, int nonblock) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0)) != 0) {
        if (errno == EINTR && !nonblock) continue;
        close(fd);
        return -1;
    }
    return fd;
}

static void dir_paths(sweep_dir *d, const char *dir) {
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    path_join(d->state, sizeof d->state, d->dir, "state.json");
    path_join(d->lock, sizeof d->lock, d->dir, "state.lock");
    path_join(d->base, sizeof d->base, d->dir, "base.json");
}

/* The spec from the directory's state file. */
static int dir_open(sweep_dir *d, const char *dir, const char *cmd) {
    char abs[PATHN];
    if (abs_path(dir, abs, sizeof abs) != 0 || !file_exists(abs)) {
        fprintf(stderr, "llmforge: sweep %s: '%s' does not exist\n", cmd, dir);
        return 1;
    }
    dir_paths(d, abs);
    if (!file_exists(d->state)) {
        fprintf(stderr, "llmforge: sweep %s: '%s' holds no sweep (no state.json)\n", cmd, d->dir);
        return 1;
    }
    char *text = NULL, *cwd = NULL;
    lf_status st = lf_sweep_state_spec_text(d->state, &text, &cwd);
    if (st == LF_OK) st = lf_sweep_spec_parse(&d->spec, text, d->state, NULL, cwd);
    lf_free(text);
    lf_free(cwd);
    if (st != LF_OK) {
        die_status(st, "sweep");
        return 1;
    }
    return 0;
}

/* Create the directory for spec (or check that it holds the same sweep);
 * d->spec becomes the directory's. */
static int dir_create(sweep_dir *d, lf_sweep_spec *spec, const char *dir) {
    lf_status st = lf_mkdirs(dir);
    char abs[PATHN];
    if (st != LF_OK || abs_path(dir, abs, sizeof abs) != 0) {
        die_status(st, "sweep: cannot create the sweep directory");
        return 1;
    }
    dir_paths(d, abs);
    static const char *const subs[] = {"trials", "logs", "locks", "slurm"};
    for (int i = 0; i < 4; i++) {
        char p[PATHN + 16];
        path_join(p, sizeof p, d->dir, subs[i]);
        if ((st = lf_mkdirs(p)) != LF_OK) {
            die_status(st, "sweep");
            return 1;
        }
    }
    int fd = lock_file(d->lock, 0);
    if (fd < 0) {
        fprintf(stderr, "llmforge: sweep: cannot lock '%s': %s\n", d->lock, strerror(errno));
        return 1;
    }
    int rc = 0;
    if (file_exists(d->state)) {
        char *text = NULL, *cwd = NULL;
        st = lf_sweep_state_spec_text(d->state, &text, &cwd);
        if (st != LF_OK) {
            die_status(st, "sweep");
            rc = 1;
        } else if (strcmp(text, lf_sweep_spec_text(spec)) != 0) {
            fprintf(stderr,
                    "llmforge: sweep: '%s' holds a sweep of another sweep file, or its base configuration changed "
                    "since it started; resume it unchanged, or give another --dir (or remove the directory)\n",
                    d->dir);
            rc = 1;
        } else {
            if (strcmp(cwd, lf_sweep_spec_cwd(spec)) != 0)
                printf("sweep: trials run in '%s', where the sweep started\n", cwd);
            st = lf_sweep_spec_parse(&d->spec, text, d->state, NULL, cwd);
            if (st != LF_OK) {
                die_status(st, "sweep");
                rc = 1;
            }
        }
        lf_free(text);
        lf_free(cwd);
    } else {
        const char *inline_json = NULL;
        lf_sweep_spec_base(spec, &inline_json);
        st = lf_file_write_all(d->base, inline_json, strlen(inline_json));
        if (st == LF_OK) st = lf_sweep_state_save(d->state, spec, NULL, 0);
        if (st == LF_OK)
            st = lf_sweep_spec_parse(&d->spec, lf_sweep_spec_text(spec), d->state, NULL, lf_sweep_spec_cwd(spec));
        if (st != LF_OK) {
            die_status(st, "sweep");
            rc = 1;
        }
    }
    /* base.json is the trials' configuration: a copy of the state's, so a lost one is rewritten */
    if (rc == 0 && !file_exists(d->base)) {
        const char *inline_json = NULL;
        lf_sweep_spec_base(d->spec, &inline_json);
        if ((st = lf_file_write_all(d->base, inline_json, strlen(inline_json))) != LF_OK) {
            die_status(st, "sweep");
            rc = 1;
        }
    }
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------- the registry */

typedef struct reg_link {
    int off, warned; /* registry.enabled false; the warning given */
    lf_registry *reg;
} reg_link;

/* Link a trial's runs to the sweep (a warning when the registry is unusable, once). */
static void link_runs(reg_link *rl, const sweep_dir *d, const lf_sweep_trial *t, const char *trial_dir) {
    if (t->pid <= 0 || rl->off) return;
    if (!rl->reg) { /* until it opens: the first trial's run creates the file */
        const char *inline_json = NULL;
        lf_sweep_spec_base(d->spec, &inline_json);
        const char *const *sets;
        int n = lf_sweep_spec_sets(d->spec, &sets);
        lf_train_config cfg;
        char path[PATHN];
        lf_status st = lf_train_config_parse_world(&cfg, inline_json, "base", 1, n, sets);
        if (st == LF_OK && !cfg.registry_enabled) {
            rl->off = 1;
            return;
        }
        if (st == LF_OK) st = lf_registry_path_resolve(cfg.registry_path, path, sizeof path);
        if (st == LF_OK) st = lf_registry_open(&rl->reg, path, 0);
        if (st != LF_OK) {
            if (!rl->warned)
                fprintf(stderr,
                        "llmforge: sweep: warning: model registry: %s; trials are not linked to the sweep "
                        "there\n",
                        lf_last_error());
            rl->warned = 1;
            rl->reg = NULL;
            return;
        }
    }
    if (!rl->reg) return;
    char name[32];
    lf_sweep_trial_name(t->id, name, sizeof name);
    if (lf_registry_run_link_sweep(rl->reg, trial_dir, t->pid, t->host[0] ? t->host : NULL, d->dir, name, NULL) !=
        LF_OK)
        fprintf(stderr, "llmforge: sweep: warning: model registry: %s\n", lf_last_error());
}

/* ---------------------------------------------------------------- the worker */

extern char **environ;

/* A trial is one process. The worker itself may be a task of a Slurm job
 * (an array task, SLURM_PROCID=0 without SLURM_NTASKS) or of an MPI launch:
 * the launchers' rank variables (what lf_comm_env_detect reads) must not
 * make the trial believe it is a rank of a job. Called in the child. */
static void drop_launcher_env(void) {
    static const char *const exact[] = {"SLURM_PROCID",
                                        "SLURM_NTASKS",
                                        "SLURM_LOCALID",
                                        "SLURM_NODEID",
                                        "SLURM_TASKS_PER_NODE",
                                        "SLURM_STEP_TASKS_PER_NODE",
                                        "RANK",
                                        "WORLD_SIZE",
                                        "LOCAL_RANK",
                                        "MASTER_ADDR",
                                        "MASTER_PORT",
                                        "MPI_LOCALNRANKS",
                                        "MPI_LOCALRANKID",
                                        NULL};
    static const char *const prefix[] = {"OMPI_", "PMI_", "PMIX_", "SLURM_STEP_", NULL};
    char names[256][128];
    int n = 0;
    for (char **e = environ; e && *e && n < 256; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (len >= sizeof names[0]) continue;
        int drop = 0;
        for (int i = 0; exact[i] && !drop; i++) drop = strlen(exact[i]) == len && !strncmp(*e, exact[i], len);
        for (int i = 0; prefix[i] && !drop; i++) drop = !strncmp(*e, prefix[i], strlen(prefix[i]));
        if (drop) {
            memcpy(names[n], *e, len);
            names[n++][len] = 0;
        }
    }
    for (int i = 0; i < n; i++) unsetenv(names[i]);
}

typedef struct slot {
    pid_t pid; /* 0: free */
    long trial;
    int rung;
    int lock_fd;
    double t0;
} slot;

typedef struct worker {
    sweep_dir *d;
    char exe[PATHN];
    int nslots, threads; /* threads per trial */
    slot *slots;
    int busy;
    reg_link reg;
    const char *who; /* "sweep" or "worker <task>" in progress lines */
} worker;

static void trial_paths(const worker *w, long id, char *run_dir, char *log, char *lock) {
    char name[32];
    lf_sweep_trial_name(id, name, sizeof name);
    char rel[64];
    snprintf(rel, sizeof rel, "trials/%s", name);
    path_join(run_dir, PATHN + 64, w->d->dir, rel);
    snprintf(rel, sizeof rel, "logs/%s.log", name);
    path_join(log, PATHN + 64, w->d->dir, rel);
    snprintf(rel, sizeof rel, "locks/%s.lock", name);
    path_join(lock, PATHN + 64, w->d->dir, rel);
}

static int my_slot_of(const worker *w, long trial) {
    for (int i = 0; i < w->nslots; i++)
        if (w->slots[i].pid && w->slots[i].trial == trial) return i;
    return -1;
}

static int free_slot(const worker *w) {
    for (int i = 0; i < w->nslots; i++)
        if (!w->slots[i].pid) return i;
    return -1;
}

/* Start trial i towards rung `rung` in slot k, its lock (lock_fd) already
 * held. Resumes from the run directory's checkpoint when there is one,
 * else starts it afresh (removing what a killed attempt left). */
static int launch(worker *w, lf_sweep_trial *t, int k, int rung, int lock_fd) {
    const lf_sweep_spec *s = w->d->spec;
    char run_dir[PATHN + 64], log[PATHN + 64], lock[PATHN + 64];
    trial_paths(w, t->id, run_dir, log, lock);
    long ck = 0;
    int resume = lf_sweep_checkpoint_step(run_dir, &ck) == LF_OK;
    if (!resume && file_exists(run_dir) && lf_remove_tree(run_dir) != 0) {
        fprintf(stderr, "llmforge: sweep: cannot remove '%s' to restart trial %ld: %s\n", run_dir, t->id,
                strerror(errno));
        return 1;
    }
    char **targs = NULL;
    int targc = 0;
    lf_status st = lf_sweep_train_args(s, t, rung, run_dir, w->d->base, resume, w->threads, &targs, &targc);
    if (st != LF_OK) {
        die_status(st, "sweep");
        return 1;
    }
    char **argv = calloc((size_t)targc + 2, sizeof *argv);
    if (!argv) {
        lf_free(targs);
        return 1;
    }
    argv[0] = "llmforge";
    for (int i = 0; i < targc; i++) argv[i + 1] = targs[i];
    char threads[16], from[64] = "";
    snprintf(threads, sizeof threads, "%d", w->threads);
    if (resume) snprintf(from, sizeof from, ", resumed from its checkpoint at step %ld", ck);
    const long *rungs;
    lf_sweep_spec_rungs(s, &rungs);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "llmforge: sweep: fork: %s\n", strerror(errno));
        free(argv);
        lf_free(targs);
        return 1;
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (nul >= 0) dup2(nul, 0);
        fcntl(lock_fd, F_SETFD, 0); /* the training process holds the trial's lock too */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (chdir(lf_sweep_spec_cwd(s)) != 0) {
            dprintf(2, "llmforge: sweep: cannot enter '%s': %s\n", lf_sweep_spec_cwd(s), strerror(errno));
            _exit(126);
        }
        setenv("OMP_NUM_THREADS", threads, 1);
        drop_launcher_env();
        dprintf(1, "== llmforge sweep: trial %ld towards step %ld%s\n", t->id, rungs[rung], from);
        execv(w->exe, argv);
        dprintf(2, "llmforge: sweep: cannot run '%s': %s\n", w->exe, strerror(errno));
        _exit(127);
    }
    free(argv);
    lf_free(targs);
    char pt[1024];
    params_text(s, t, pt, sizeof pt);
    char name[32];
    lf_sweep_trial_name(t->id, name, sizeof name);
    printf("%s: %s -> step %ld%s: %s\n", w->who, name, rungs[rung], from, pt);
    fflush(stdout);
    t->state = LF_TRIAL_RUNNING;
    t->target = rung;
    t->pid = (long)pid;
    if (gethostname(t->host, sizeof t->host - 1) != 0) t->host[0] = 0;
    t->attempts++;
    t->tries++;
    w->slots[k] = (slot){pid, t->id, rung, lock_fd, lf_time_now()};
    w->busy++;
    return 0;
}

/* What a trial's run directory says about rung `rung`: 1 and *v when it
 * holds an evaluation and a checkpoint there. */
static int rung_result(const worker *w, long id, int rung, double *v) {
    const long *rungs;
    lf_sweep_spec_rungs(w->d->spec, &rungs);
    char run_dir[PATHN + 64], log[PATHN + 64], lock[PATHN + 64], jl[PATHN + 80];
    trial_paths(w, id, run_dir, log, lock);
    long ck = 0;
    if (lf_sweep_checkpoint_step(run_dir, &ck) != LF_OK || ck != rungs[rung]) return 0;
    path_join(jl, sizeof jl, run_dir, "log.jsonl");
    return lf_sweep_log_metric(jl, lf_sweep_spec_objective(w->d->spec), rungs[rung], v) == LF_OK;
}

static void report(const worker *w, const lf_sweep_trial *t, int rung) {
    const lf_sweep_spec *s = w->d->spec;
    const long *rungs;
    lf_sweep_spec_rungs(s, &rungs);
    char name[32];
    lf_sweep_trial_name(t->id, name, sizeof name);
    printf("%s: %s at step %ld: %s %.6g -> %s%s%s\n", w->who, name, rungs[rung], lf_sweep_spec_objective(s),
           t->value[rung], lf_trial_state_name(t->state), t->message[0] ? ": " : "", t->message);
    fflush(stdout);
}

/* A finished process of slot k (status from waitpid): the trial's result, under the state lock. */
static void harvest(worker *w, lf_sweep_trial *trials, long n, int k, int status) {
    slot *sl = &w->slots[k];
    lf_sweep_trial *t = NULL;
    for (long i = 0; i < n; i++)
        if (trials[i].id == sl->trial) t = &trials[i];
    char run_dir[PATHN + 64], log[PATHN + 64], lock[PATHN + 64];
    trial_paths(w, sl->trial, run_dir, log, lock);
    if (t) {
        t->seconds += lf_time_now() - sl->t0;
        double v;
        char name[32];
        lf_sweep_trial_name(t->id, name, sizeof name);
        if (rung_result(w, t->id, sl->rung, &v)) {
            lf_sweep_on_result(w->d->spec, trials, n, t - trials, sl->rung, v);
            report(w, t, sl->rung);
        } else if (WIFEXITED(status)) {
            const long *rungs;
            lf_sweep_spec_rungs(w->d->spec, &rungs);
            char line[600];
            last_error_line(log, line, sizeof line);
            t->state = LF_TRIAL_FAILED;
            if (WEXITSTATUS(status))
                snprintf(t->message, sizeof t->message, "llmforge train exited with status %d%s%s (%s)",
                         WEXITSTATUS(status), line[0] ? ": " : "", line, log);
            else
                snprintf(t->message, sizeof t->message,
                         "llmforge train ended without an evaluation of %s and a "
                         "checkpoint at step %ld (%s)",
                         lf_sweep_spec_objective(w->d->spec), rungs[sl->rung], log);
            printf("%s: %s failed: %s\n", w->who, name, t->message);
        } else if (!g_stop) {
            /* killed: it stays "running" with its lock free; the next look at the state picks it up */
            if (t->tries >= MAX_ATTEMPTS) {
                t->state = LF_TRIAL_FAILED;
                snprintf(t->message, sizeof t->message,
                         "its training process was killed (%s), %d times towards "
                         "this rung",
                         strsignal(WTERMSIG(status)), t->tries);
            }
            printf("%s: %s: its training process was killed (%s)%s\n", w->who, name, strsignal(WTERMSIG(status)),
                   t->state == LF_TRIAL_FAILED ? "; failed" : "; it is started again");
        }
        fflush(stdout);
        link_runs(&w->reg, w->d, t, run_dir);
    }
    close(sl->lock_fd);
    sl->pid = 0;
    w->busy--;
}

/* One look at the state: results of finished processes, orphans, new jobs.
 * Returns 1 when the sweep is done (and this worker runs nothing), -1 on an
 * error, 0 otherwise; *idle = 1 when a free slot found nothing to start. */
static int step(worker *w, int (*finished)[2], int n_finished, int *idle) {
    sweep_dir *d = w->d;
    const lf_sweep_spec *s = d->spec;
    *idle = 0;
    int fd = lock_file(d->lock, 0);
    if (fd < 0) {
        fprintf(stderr, "llmforge: sweep: cannot lock '%s': %s\n", d->lock, strerror(errno));
        return -1;
    }
    lf_sweep_trial *loaded = NULL, *trials = NULL;
    long n = 0;
    int rc = 0, changed = 0;
    lf_status st = lf_sweep_state_load(d->state, s, &loaded, &n);
    if (st != LF_OK) {
        die_status(st, "sweep");
        close(fd);
        return -1;
    }
    /* room for every trial the sweep may create */
    const long cap = lf_sweep_spec_trials(s);
    trials = lf_calloc(sizeof *trials * (size_t)(cap > 0 ? cap : 1));
    if (!trials) {
        lf_free(loaded);
        close(fd);
        return -1;
    }
    memcpy(trials, loaded, sizeof *trials * (size_t)n);
    lf_free(loaded);
    for (int i = 0; i < n_finished; i++) {
        harvest(w, trials, n, finished[i][0], finished[i][1]);
        changed = 1;
    }
    if (g_stop) goto save;
    /* orphans: running trials nobody holds */
    for (long i = 0; i < n; i++) {
        lf_sweep_trial *t = &trials[i];
        if (t->state != LF_TRIAL_RUNNING || my_slot_of(w, t->id) >= 0) continue;
        char run_dir[PATHN + 64], log[PATHN + 64], lock[PATHN + 64];
        trial_paths(w, t->id, run_dir, log, lock);
        int lfd = lock_file(lock, 1);
        if (lfd < 0) continue; /* someone trains it */
        double v;
        if (rung_result(w, t->id, t->target, &v)) {
            lf_sweep_on_result(s, trials, n, i, t->target, v); /* it finished while nobody watched */
            char name[32];
            lf_sweep_trial_name(t->id, name, sizeof name);
            printf("%s: %s finished its rung while no worker was running; result taken\n", w->who, name);
            report(w, t, t->target);
            link_runs(&w->reg, d, t, run_dir);
            close(lfd);
            changed = 1;
            continue;
        }
        int k = free_slot(w);
        if (k < 0) {
            close(lfd);
            continue;
        }
        link_runs(&w->reg, d, t, run_dir); /* the interrupted process's run, before another is started */
        if (t->tries >= MAX_ATTEMPTS) {
            t->state = LF_TRIAL_FAILED;
            snprintf(t->message, sizeof t->message, "interrupted %d times towards this rung", t->tries);
            close(lfd);
            changed = 1;
            continue;
        }
        if (launch(w, t, k, t->target, lfd) != 0) {
            close(lfd);
            rc = -1;
            goto save;
        }
        changed = 1;
    }
    /* new work for the free slots */
    for (int k; (k = free_slot(w)) >= 0;) {
        lf_sweep_job job = lf_sweep_next_job(s, trials, n);
        if (job.kind == LF_SWEEP_JOB_WAIT) {
            *idle = 1;
            break;
        }
        if (job.kind == LF_SWEEP_JOB_DONE) {
            if (w->busy == 0) {
                lf_sweep_finish(trials, n);
                changed = 1;
                rc = 1;
            } else {
                *idle = 1;
            }
            break;
        }
        long i = job.kind == LF_SWEEP_JOB_NEW ? n : job.trial;
        if (job.kind == LF_SWEEP_JOB_NEW) {
            double x[LF_SWEEP_MAX_DIMS];
            if ((st = lf_sweep_suggest(s, trials, n, x)) != LF_OK) {
                die_status(st, "sweep");
                rc = -1;
                break;
            }
            lf_sweep_trial_init(&trials[n], n, x, lf_sweep_spec_n_dims(s));
            n++;
        }
        char run_dir[PATHN + 64], log[PATHN + 64], lock[PATHN + 64];
        trial_paths(w, trials[i].id, run_dir, log, lock);
        int lfd = lock_file(lock, 1);
        if (lfd < 0) { /* cannot happen for a paused or new trial; be safe */
            fprintf(stderr, "llmforge: sweep: trial %ld is locked by another process\n", trials[i].id);
            rc = -1;
            break;
        }
        /* recorded before it starts: a crash from here on leaves a running trial to pick up */
        trials[i].state = LF_TRIAL_RUNNING;
        trials[i].target = job.rung;
        trials[i].tries = 0;
        if ((st = lf_sweep_state_save(d->state, s, trials, n)) != LF_OK) {
            die_status(st, "sweep");
            close(lfd);
            rc = -1;
            break;
        }
        if (launch(w, &trials[i], k, job.rung, lfd) != 0) {
            close(lfd);
            rc = -1;
            break;
        }
        changed = 1;
    }
save:
    if (changed && (st = lf_sweep_state_save(d->state, s, trials, n)) != LF_OK) {
        die_status(st, "sweep");
        rc = -1;
    }
    lf_free(trials);
    close(fd);
    return rc;
}

/* Run the sweep in d with nslots trials at once until it is done. */
static int run_worker(sweep_dir *d, int nslots, int total_threads, const char *who) {
    worker w = {.d = d, .nslots = nslots, .who = who};
    ssize_t len = readlink("/proc/self/exe", w.exe, sizeof w.exe - 1);
    if (len <= 0) {
        fprintf(stderr, "llmforge: sweep: cannot find this program (/proc/self/exe): %s\n", strerror(errno));
        return 1;
    }
    w.exe[len] = 0;
    w.threads = total_threads / nslots > 0 ? total_threads / nslots : 1;
    w.slots = calloc((size_t)nslots, sizeof *w.slots);
    int(*finished)[2] = calloc((size_t)nslots, sizeof *finished);
    if (!w.slots || !finished) return 1;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* a child's end wakes the wait below at once (sigtimedwait); children unblock it before exec */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int rc = 0, nf = 0;
    for (;;) {
        int idle = 0;
        int r = step(&w, finished, nf, &idle);
        nf = 0;
        if (r < 0) {
            rc = 1;
            break;
        }
        if (r == 1 && w.busy == 0) break;
        if (g_stop) break;
        /* wait for a child to end; with a free slot, look at the state again within a second
         * (another worker's results may make a trial promotable, an orphan's lock may be free) */
        double until = lf_time_now() + (w.busy == w.nslots ? 3600 : idle ? 0.5 : 1.0);
        while (!g_stop) {
            int status;
            pid_t p;
            while ((p = waitpid(-1, &status, WNOHANG)) > 0)
                for (int k = 0; k < w.nslots; k++)
                    if (w.slots[k].pid == p) {
                        finished[nf][0] = k;
                        finished[nf][1] = status;
                        nf++;
                    }
            double left = until - lf_time_now();
            if (nf || left <= 0) break;
            if (left > 1) left = 1;
            struct timespec ts = {(time_t)left, (long)((left - floor(left)) * 1e9)};
            sigtimedwait(&chld, NULL, &ts); /* a SIGCHLD, the timeout, or a signal handled (EINTR) */
        }
    }
    if (g_stop) {
        /* interrupted: stop our trials; they stay "running" and the next run resumes them */
        for (int k = 0; k < w.nslots; k++)
            if (w.slots[k].pid) kill(w.slots[k].pid, SIGTERM);
        for (int k = 0; k < w.nslots; k++)
            if (w.slots[k].pid) {
                int status;
                while (waitpid(w.slots[k].pid, &status, 0) < 0 && errno == EINTR) {
                }
                close(w.slots[k].lock_fd);
                w.slots[k].pid = 0;
            }
        fprintf(stderr, "llmforge: sweep: interrupted (%s); run the same command again to resume\n", strsignal(g_stop));
        rc = g_stop == SIGINT ? 130 : 143;
    }
    if (w.reg.reg) lf_registry_close(w.reg.reg);
    free(w.slots);
    free(finished);
    return rc;
}

/* ---------------------------------------------------------------- status and best */

static void print_status(const sweep_dir *d, lf_sweep_trial *t, long n, int json) {
    const lf_sweep_spec *s = d->spec;
    const long *rungs;
    int K = lf_sweep_spec_rungs(s, &rungs);
    long best = lf_sweep_best(s, t, n), total = 0;
    for (long i = 0; i < n; i++) total += t[i].steps;
    /* registry runs of each trial, when the registry can be read */
    cJSON *runs = NULL;
    {
        const char *inline_json = NULL;
        lf_sweep_spec_base(s, &inline_json);
        const char *const *sets;
        int ns = lf_sweep_spec_sets(s, &sets);
        lf_train_config cfg;
        char path[PATHN];
        lf_registry *r = NULL;
        char *rj = NULL;
        if (lf_train_config_parse_world(&cfg, inline_json, "base", 1, ns, sets) == LF_OK && cfg.registry_enabled &&
            lf_registry_path_resolve(cfg.registry_path, path, sizeof path) == LF_OK &&
            lf_registry_open(&r, path, 0) == LF_OK && lf_registry_sweep_runs_json(r, d->dir, &rj) == LF_OK)
            runs = cJSON_Parse(rj);
        lf_free(rj);
        lf_registry_close(r);
    }
    if (json) {
        cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "trials");
        cJSON_AddStringToObject(o, "dir", d->dir);
        cJSON_AddStringToObject(o, "method", lf_sweep_method_name(lf_sweep_spec_method(s)));
        cJSON_AddStringToObject(o, "early_stopping", lf_sweep_stopper_name(lf_sweep_spec_stopper(s)));
        cJSON_AddStringToObject(o, "objective", lf_sweep_spec_objective(s));
        cJSON_AddStringToObject(o, "mode", lf_sweep_spec_maximize(s) ? "maximize" : "minimize");
        cJSON *ra = cJSON_AddArrayToObject(o, "rungs");
        for (int k = 0; k < K; k++) cJSON_AddItemToArray(ra, cJSON_CreateNumber((double)rungs[k]));
        cJSON_AddNumberToObject(o, "trials_planned", (double)lf_sweep_spec_trials(s));
        cJSON_AddNumberToObject(o, "total_steps", (double)total);
        cJSON_AddNumberToObject(o, "full_steps", (double)lf_sweep_spec_trials(s) * (double)rungs[K - 1]);
        for (long i = 0; i < n; i++) {
            char name[32];
            lf_sweep_trial_name(t[i].id, name, sizeof name);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "trial", name);
            cJSON_AddStringToObject(e, "state", lf_trial_state_name(t[i].state));
            cJSON *p = cJSON_AddObjectToObject(e, "params");
            for (int dd = 0; dd < lf_sweep_spec_n_dims(s); dd++) {
                char v[512];
                lf_sweep_value_text(s, dd, t[i].x[dd], v, sizeof v);
                cJSON *pv = cJSON_Parse(v);
                cJSON_AddItemToObject(p, lf_sweep_spec_dim(s, dd)->key, pv ? pv : cJSON_CreateNull());
            }
            cJSON_AddNumberToObject(e, "steps", (double)t[i].steps);
            cJSON_AddNumberToObject(e, "rung", t[i].rung);
            cJSON *vals = cJSON_AddObjectToObject(e, "values");
            for (int k = 0; k <= t[i].rung; k++) {
                char step[32];
                snprintf(step, sizeof step, "%ld", rungs[k]);
                cJSON_AddItemToObject(vals, step,
                                      isfinite(t[i].value[k]) ? cJSON_CreateNumber(t[i].value[k]) : cJSON_CreateNull());
            }
            cJSON_AddItemToObject(e, "metric",
                                  t[i].rung >= 0 && isfinite(t[i].value[t[i].rung])
                                      ? cJSON_CreateNumber(t[i].value[t[i].rung])
                                      : cJSON_CreateNull());
            cJSON_AddNumberToObject(e, "attempts", t[i].attempts);
            cJSON_AddNumberToObject(e, "seconds", t[i].seconds);
            cJSON_AddStringToObject(e, "message", t[i].message);
            cJSON *rr = runs ? cJSON_GetObjectItemCaseSensitive(runs, name) : NULL;
            cJSON_AddItemToObject(e, "runs", rr ? cJSON_Duplicate(rr, 1) : cJSON_CreateArray());
            cJSON_AddItemToArray(arr, e);
        }
        if (best >= 0) {
            char name[32];
            lf_sweep_trial_name(t[best].id, name, sizeof name);
            cJSON_AddStringToObject(o, "best", name);
        } else {
            cJSON_AddNullToObject(o, "best");
        }
        char *p = lf_json_print(o, 1);
        if (p) printf("%s\n", p);
        cJSON_free(p);
        cJSON_Delete(o);
        cJSON_Delete(runs);
        return;
    }
    printf("sweep %s: %s, %ld of %ld trials, early stopping %s, rungs", d->dir,
           lf_sweep_method_name(lf_sweep_spec_method(s)), n, lf_sweep_spec_trials(s),
           lf_sweep_stopper_name(lf_sweep_spec_stopper(s)));
    for (int k = 0; k < K; k++) printf("%s%ld", k ? "," : " ", rungs[k]);
    printf("; objective %s (%s)\n", lf_sweep_spec_objective(s), lf_sweep_spec_maximize(s) ? "maximize" : "minimize");
    printf("%-6s %-10s %7s %5s %14s  %s  [RUNS]\n", "TRIAL", "STATE", "STEPS", "RUNG", lf_sweep_spec_objective(s),
           "PARAMS");
    for (long i = 0; i < n; i++) {
        char name[32], pt[2048], val[32] = "-", rl[256] = "-";
        lf_sweep_trial_name(t[i].id, name, sizeof name);
        params_text(s, &t[i], pt, sizeof pt);
        if (t[i].rung >= 0) snprintf(val, sizeof val, "%.6g", t[i].value[t[i].rung]);
        cJSON *rr = runs ? cJSON_GetObjectItemCaseSensitive(runs, name) : NULL;
        if (cJSON_IsArray(rr) && cJSON_GetArraySize(rr) > 0) {
            size_t at = 0;
            for (cJSON *e = rr->child; e && at < sizeof rl; e = e->next)
                at += (size_t)snprintf(rl + at, sizeof rl - at, "%s%s", at ? "," : "", e->valuestring);
        }
        char rung[16];
        snprintf(rung, sizeof rung, "%d/%d", t[i].rung + 1, K);
        printf("%-6s %-10s %7ld %5s %14s  %s  [%s]%s\n", name, lf_trial_state_name(t[i].state), t[i].steps, rung, val,
               pt, rl, i == best ? "  (best)" : "");
        if (t[i].state == LF_TRIAL_FAILED && t[i].message[0]) printf("       %s\n", t[i].message);
    }
    printf("steps used: %ld (every planned trial to step %ld: %.0f, %.1f%%)\n", total, rungs[K - 1],
           (double)lf_sweep_spec_trials(s) * (double)rungs[K - 1],
           100.0 * (double)total / ((double)lf_sweep_spec_trials(s) * (double)rungs[K - 1]));
    if (best >= 0) {
        char name[32];
        lf_sweep_trial_name(t[best].id, name, sizeof name);
        printf("best: %s, %s %.6g at step %ld\n", name, lf_sweep_spec_objective(s), t[best].value[t[best].rung],
               rungs[t[best].rung]);
    }
    cJSON_Delete(runs);
}

static int cmd_status(int argc, char **argv, int best_mode) {
    const char *dir = NULL, *out_dir = NULL;
    int json = 0;
    const char *cmd = best_mode ? "best" : "status";
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (best_mode && (v = opt_value(argc, argv, &i, "--out-dir", &missing))) out_dir = v;
        else if (missing) return 2;
        else if (!best_mode && !strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else {
            fprintf(stderr, "llmforge sweep %s: unknown argument '%s' (see llmforge sweep --help)\n", cmd, argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "llmforge sweep %s: give the sweep directory\n", cmd);
        return 2;
    }
    sweep_dir d = {0};
    if (dir_open(&d, dir, cmd)) return 1;
    lf_sweep_trial *t = NULL;
    long n = 0;
    lf_status st = lf_sweep_state_load(d.state, d.spec, &t, &n);
    if (st != LF_OK) {
        die_status(st, "sweep");
        lf_sweep_spec_free(d.spec);
        return 1;
    }
    int rc = 0;
    if (!best_mode) {
        print_status(&d, t, n, json);
    } else {
        long b = lf_sweep_best(d.spec, t, n);
        if (b < 0) {
            fprintf(stderr, "llmforge: sweep best: no trial of '%s' has a value yet\n", d.dir);
            rc = 1;
        } else {
            char od[PATHN + 16], *cfg = NULL;
            if (out_dir) snprintf(od, sizeof od, "%s", out_dir);
            else path_join(od, sizeof od, d.dir, "best");
            st = lf_sweep_trial_config_json(d.spec, &t[b], od, &cfg);
            if (st != LF_OK) {
                die_status(st, "sweep best");
                rc = 1;
            } else {
                char name[32], pt[2048];
                const long *rungs;
                lf_sweep_spec_rungs(d.spec, &rungs);
                lf_sweep_trial_name(t[b].id, name, sizeof name);
                params_text(d.spec, &t[b], pt, sizeof pt);
                fprintf(stderr, "best trial %s (%s): %s %.6g at step %ld\n", name, lf_trial_state_name(t[b].state),
                        lf_sweep_spec_objective(d.spec), t[b].value[t[b].rung], rungs[t[b].rung]);
                fputs(cfg, stdout);
                lf_free(cfg);
            }
        }
    }
    lf_free(t);
    lf_sweep_spec_free(d.spec);
    return rc;
}

/* ---------------------------------------------------------------- Slurm */

/* 'text' for sh, with every ' closed, escaped and reopened. */
static void sh_quote(const char *s, char *out, size_t cap) {
    size_t at = 0;
    if (at < cap) out[at++] = '\'';
    for (; *s && at + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(out + at, "'\\''", 4);
            at += 4;
        } else {
            out[at++] = *s;
        }
    }
    if (at + 1 < cap) out[at++] = '\'';
    out[at < cap ? at : cap - 1] = 0;
}

static int submit_slurm(sweep_dir *d, int workers, int wait) {
    char exe[PATHN];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "llmforge: sweep: cannot find this program (/proc/self/exe)\n");
        return 1;
    }
    exe[len] = 0;
    char qe[PATHN * 2], qd[PATHN * 2], wrap[PATHN * 5], array[64], outp[PATHN + 64], jobname[64];
    sh_quote(exe, qe, sizeof qe);
    sh_quote(d->dir, qd, sizeof qd);
    snprintf(wrap, sizeof wrap, "exec %s sweep worker %s", qe, qd);
    snprintf(array, sizeof array, "--array=0-%d", workers - 1);
    path_join(outp, sizeof outp, d->dir, "slurm/worker_%A_%a.out");
    char ob[PATHN + 80];
    snprintf(ob, sizeof ob, "--output=%s", outp);
    snprintf(jobname, sizeof jobname, "--job-name=llmforge-sweep");
    const char *const *opts;
    int nopt = lf_sweep_spec_sbatch(d->spec, &opts);
    const char **argv = calloc((size_t)nopt + 12, sizeof *argv);
    if (!argv) return 1;
    int n = 0;
    argv[n++] = "sbatch";
    argv[n++] = "--parsable";
    argv[n++] = jobname;
    argv[n++] = array;
    argv[n++] = ob;
    for (int i = 0; i < nopt; i++) argv[n++] = opts[i]; /* the file's options: after ours, so they win */
    if (wait) argv[n++] = "--wait";
    argv[n++] = "--wrap";
    argv[n++] = wrap;
    argv[n] = NULL;
    printf("sweep: submitting a Slurm array of %d worker%s:", workers, workers == 1 ? "" : "s");
    for (int i = 0; i < n; i++) printf(" %s", argv[i]);
    printf("\n");
    fflush(stdout);
    int pfd[2];
    if (pipe(pfd) != 0) {
        free(argv);
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execvp("sbatch", (char *const *)argv);
        dprintf(2, "llmforge: sweep: cannot run sbatch: %s (is Slurm installed?)\n", strerror(errno));
        _exit(127);
    }
    free(argv);
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        return 1;
    }
    char out[256] = "";
    size_t got = 0;
    ssize_t r;
    while ((r = read(pfd[0], out + got, sizeof out - 1 - got)) > 0 && got < sizeof out - 1) got += (size_t)r;
    out[got] = 0;
    close(pfd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    char *nl = strchr(out, '\n');
    if (nl) *nl = 0;
    if (out[0]) {
        printf("sweep: Slurm job %s (%s/slurm/worker_%s_*.out)\n", out, d->dir, strtok(out, ";"));
        char jobs[PATHN + 32];
        path_join(jobs, sizeof jobs, d->dir, "slurm/jobs");
        FILE *f = fopen(jobs, "a");
        if (f) {
            fprintf(f, "%s\n", out);
            fclose(f);
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "llmforge: sweep: sbatch %s (exit status %d)\n", wait && out[0] ? "job failed" : "failed",
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 1;
    }
    if (!wait) printf("sweep: `llmforge sweep status %s` follows it\n", d->dir);
    return 0;
}

/* ---------------------------------------------------------------- entry */

/* Orphaned "running" trials are picked up by the workers themselves (their
 * locks are free); nothing to reset before a submission. */

int cmd_sweep(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        sweep_usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "status")) return cmd_status(argc - 1, argv + 1, 0);
    if (!strcmp(argv[0], "best")) return cmd_status(argc - 1, argv + 1, 1);
    int worker_mode = !strcmp(argv[0], "worker");
    const char *file = NULL, *dir = NULL;
    long parallel = 0, threads = -1, workers = 0;
    int slurm = 0, wait = 0, dry = 0;
    for (int i = worker_mode; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--dir", &missing))) dir = v;
        else if ((v = opt_value(argc, argv, &i, "--parallel", &missing))) {
            if (parse_long("--parallel", v, 1, 1024, &parallel)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--workers", &missing))) {
            if (parse_long("--workers", v, 1, 10000, &workers)) return 2;
        } else if (missing) return 2;
        else if (!strcmp(argv[i], "--slurm")) slurm = 1;
        else if (!strcmp(argv[i], "--wait")) wait = 1;
        else if (!strcmp(argv[i], "--dry-run")) dry = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            sweep_usage(stdout);
            return 0;
        } else if (argv[i][0] != '-' && !file) file = argv[i];
        else {
            fprintf(stderr, "llmforge sweep: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "llmforge sweep: give the %s\n", worker_mode ? "sweep directory" : "sweep file (SWEEP.json)");
        return 2;
    }
    if ((wait || workers) && !slurm) {
        fprintf(stderr, "llmforge sweep: --wait and --workers go with --slurm\n");
        return 2;
    }
    sweep_dir d = {0};
    int rc;
    if (worker_mode) {
        if (dir_open(&d, file, "worker")) return 1;
    } else {
        lf_sweep_spec *spec = NULL;
        lf_status st = lf_sweep_spec_load(&spec, file, NULL);
        if (st != LF_OK) {
            die_status(st, "sweep");
            return 1;
        }
        char def[PATHN];
        if (!dir && lf_sweep_spec_out_dir(spec)[0]) dir = lf_sweep_spec_out_dir(spec);
        if (!dir) {
            const char *b = strrchr(file, '/');
            b = b ? b + 1 : file;
            size_t l = strlen(b);
            if (l > 5 && !strcmp(b + l - 5, ".json")) l -= 5;
            snprintf(def, sizeof def, "sweeps/%.*s", (int)l, b);
            dir = def;
        }
        if (dry) {
            const long *rungs;
            int K = lf_sweep_spec_rungs(spec, &rungs);
            printf("sweep '%s': %s, %ld trials, early stopping %s, rungs", file,
                   lf_sweep_method_name(lf_sweep_spec_method(spec)), lf_sweep_spec_trials(spec),
                   lf_sweep_stopper_name(lf_sweep_spec_stopper(spec)));
            for (int k = 0; k < K; k++) printf("%s%ld", k ? "," : " ", rungs[k]);
            printf("; objective %s (%s); directory %s\n", lf_sweep_spec_objective(spec),
                   lf_sweep_spec_maximize(spec) ? "maximize" : "minimize", dir);
            lf_sweep_trial t0;
            double x[LF_SWEEP_MAX_DIMS];
            char **targs = NULL;
            int targc = 0;
            char td[PATHN + 32], bp[PATHN + 32];
            snprintf(td, sizeof td, "%s/trials/t000", dir);
            snprintf(bp, sizeof bp, "%s/base.json", dir);
            if ((st = lf_sweep_suggest(spec, NULL, 0, x)) == LF_OK) {
                lf_sweep_trial_init(&t0, 0, x, lf_sweep_spec_n_dims(spec));
                st = lf_sweep_train_args(spec, &t0, 0, td, bp, 0, 0, &targs, &targc);
            }
            if (st == LF_OK) {
                printf("first trial: llmforge");
                for (int i = 0; i < targc; i++) printf(" %s", targs[i]);
                printf("\n");
            }
            lf_free(targs);
            lf_sweep_spec_free(spec);
            if (st != LF_OK) die_status(st, "sweep");
            return st == LF_OK ? 0 : 1;
        }
        rc = dir_create(&d, spec, dir);
        lf_sweep_spec_free(spec);
        if (rc) {
            lf_sweep_spec_free(d.spec);
            return rc;
        }
    }
    if (slurm) {
        int w = workers                               ? (int)workers
                : lf_sweep_spec_slurm_workers(d.spec) ? lf_sweep_spec_slurm_workers(d.spec)
                : parallel                            ? (int)parallel
                : lf_sweep_spec_parallel(d.spec)      ? lf_sweep_spec_parallel(d.spec)
                                                      : 1;
        rc = submit_slurm(&d, w, wait);
        if (rc == 0 && wait) {
            char *sargv[1] = {d.dir};
            rc = cmd_status(1, sargv, 0);
        }
        lf_sweep_spec_free(d.spec);
        return rc;
    }
    int slots = parallel ? (int)parallel : lf_sweep_spec_parallel(d.spec) ? lf_sweep_spec_parallel(d.spec) : 1;
    /* --threads (0: the CPUs granted), else the file's threads, else the CPUs granted */
    int total = threads > 0                                    ? (int)threads
                : threads < 0 && lf_sweep_spec_threads(d.spec) ? lf_sweep_spec_threads(d.spec)
                                                               : cpu_count();
    /* a Slurm task: its allocation, when the affinity does not show it (task/none) */
    const char *cpt = getenv("SLURM_CPUS_PER_TASK");
    if (worker_mode && threads < 0 && !lf_sweep_spec_threads(d.spec) && cpt) {
        char *end;
        long v = strtol(cpt, &end, 10);
        if (end != cpt && !*end && v > 0 && v <= 4096) total = (int)v;
    }
    char who[64];
    const char *task = getenv("SLURM_ARRAY_TASK_ID");
    if (worker_mode && task) snprintf(who, sizeof who, "worker %s", task);
    else snprintf(who, sizeof who, "sweep");
    printf("%s: %s, %d trial%s at once, %d thread%s each\n", who, d.dir, slots, slots == 1 ? "" : "s",
           total / slots > 0 ? total / slots : 1, total / slots == 1 ? "" : "s");
    fflush(stdout);
    rc = run_worker(&d, slots, total, who);
    if (rc == 0 && !worker_mode) {
        char *sargv[1] = {d.dir};
        rc = cmd_status(1, sargv, 0);
    }
    lf_sweep_spec_free(d.spec);
    return rc;
}
