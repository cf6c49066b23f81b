/*
 * llmforge train: a training run from a configuration (lf_train_config_load
 * and its overrides), the trainer, a console sink for progress, and the
 * run's end: exit statuses, signals, and a Slurm requeue.
 *
 * train and signals: SIGTERM, SIGINT and SIGUSR1 (what Slurm, Kubernetes,
 * spot-instance agents and a person at the terminal send) make the run
 * finish its step, save a checkpoint and exit LF_EXIT_PREEMPTED (75). The
 * signal number goes into a sig_atomic_t that the trainer polls at each
 * step boundary (lf_trainer_opts.stop_flag); a second signal during the
 * save is noted and changes nothing (the save completes).
 * The three signals are blocked in every thread the run creates and taken
 * by one thread of ours with sigwait, so no signal is ever delivered on a
 * thread that computes: oneDNN's JIT sgemm (2.x, through 3.11) points rsp
 * into the heap while it runs, so a signal frame pushed there corrupts the
 * heap (oneDNN issue #4845; reproduced here: a no-op SIGUSR2 handler and
 * 200 signals during training aborted every run). A handler stays
 * installed for threads that existed before the block (none here today).
 */
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <errno.h>
#include <limits.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"
#include "llmforge/comm.h"
#include "llmforge/data.h"
#include "llmforge/model.h"
#include "llmforge/train.h"
#include "llmforge/backend_cpu.h"
#include "llmforge/backend_cuda.h"
#include "llmforge/comm_nccl.h"
#include "cli_util.h"
#include "commands.h"

/* Exit status of a run stopped by a signal after saving its checkpoint:
 * "preempted, resume me". 75 is EX_TEMPFAIL of sysexits.h ("a temporary
 * failure; the user is invited to retry"): distinct from 0 (finished), 1
 * (failed), 2 (usage), 3 (stall exit) and from 128+N, what a shell reports
 * for a process that a signal killed before it could save; a batch script
 * or an orchestrator tests for it to requeue (docs/checkpoints.md: "Long runs and
 * preemption"). */
#define LF_EXIT_PREEMPTED 75

extern char **environ;

/* The console: a sink on the trainer's bus. On a terminal a progress line
 * is redrawn every step and kept every steps_per_print steps; on a pipe
 * only the kept lines are printed. */
typedef struct console_sink {
    lf_obs_sink base;
    int tty;
    long every, total;
    double t_start;
    long first_step;
} console_sink;

static void fmt_eta(double s, char *buf, size_t cap) {
    if (!isfinite(s) || s < 0) s = 0;
    long v = (long)(s + 0.5);
    if (v >= 3600) snprintf(buf, cap, "%ldh%02ldm", v / 3600, (v % 3600) / 60);
    else if (v >= 60) snprintf(buf, cap, "%ldm%02lds", v / 60, v % 60);
    else snprintf(buf, cap, "%lds", v);
}

static double scalar(const lf_obs_record *r, const char *tag) {
    for (int i = 0; i < r->n_scalars; i++)
        if (!strcmp(r->scalars[i].tag, tag)) return r->scalars[i].value;
    return NAN;
}

static void console_emit(lf_obs_sink *s, const lf_obs_record *r) {
    console_sink *c = (console_sink *)s;
    if (r->kind == LF_OBS_TRAIN) {
        double loss = scalar(r, "train/loss"), lr = scalar(r, "train/lr"), norm = scalar(r, "train/grad_norm");
        double tps = scalar(r, "train/tokens_per_sec"), ms = scalar(r, "time/step_ms");
        if (c->first_step < 0) {
            c->first_step = r->step - 1;
            c->t_start = lf_time_now() - ms / 1e3;
        }
        double per = (lf_time_now() - c->t_start) / (double)(r->step - c->first_step);
        char eta[32];
        fmt_eta(per * (double)(c->total - r->step), eta, sizeof eta);
        int full = r->step % c->every == 0 || r->step == c->total || r->step == c->first_step + 1;
        if (c->tty) {
            int width = 24, filled = (int)((double)width * r->step / (double)c->total);
            char bar[64];
            for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
            bar[width] = 0;
            printf("\r[%s] step %ld/%ld | loss %.4f | lr %.2e | %.0f tok/s | ETA %s   ", bar, r->step, c->total, loss,
                   lr, tps, eta);
            if (full) printf("\n");
            fflush(stdout);
        } else if (full) {
            printf("step %ld/%ld | loss %.4f | lr %.3e | grad norm %.4f | %.1f ms | %.0f tok/s | ETA %s\n", r->step,
                   c->total, loss, lr, norm, ms, tps, eta);
            fflush(stdout);
        }
    } else if (r->kind == LF_OBS_EVAL) {
        if (c->tty) printf("\r%90s\r", "");
        printf("eval at step %ld: train loss %.4f, val loss %.4f\n", r->step, scalar(r, "eval/train_loss"),
               scalar(r, "eval/val_loss"));
        fflush(stdout);
    } else if (r->event && !strcmp(r->event, "checkpoint")) {
        if (c->tty) printf("\r%90s\r", "");
        const char *p = r->json ? strstr(r->json, "\"path\":\"") : NULL;
        if (p) {
            p += 8;
            const char *e = strchr(p, '"');
            printf("checkpoint saved: %.*s\n", (int)(e ? e - p : 0), p);
        }
        fflush(stdout);
    } else if (r->event && !strcmp(r->event, "alert") && c->tty) {
        printf("\r%90s\r", ""); /* the alert itself goes to stderr through the log */
        fflush(stdout);
    }
}

static void console_close(lf_obs_sink *s) { free(s); }

static lf_obs_sink *console_open(long every, long total) {
    console_sink *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    /* a rank started by mpirun writes to mpirun's forwarding pty even when
     * mpirun's own output goes to a file: lines, not a redrawn bar, there */
    lf_comm_env env;
    int launched = lf_comm_env_detect(&env, NULL, NULL) == LF_OK && env.size > 1;
    c->tty = isatty(STDOUT_FILENO) && !launched;
    c->every = every;
    c->total = total;
    c->first_step = -1;
    c->base.name = "console";
    c->base.emit = console_emit;
    c->base.close = console_close;
    c->base.impl = c;
    return &c->base;
}

/* A trainer failure, reported by this rank. With several ranks it names the
 * rank, and the whole job is then ended (lf_comm_abort, MPI_Abort for mpi):
 * a rank failing alone would leave the others waiting in their next
 * collective until comm.timeout_s. */
static void train_failed(lf_trainer *t, const char *hint) {
    lf_comm *c = lf_trainer_comm(t);
    int world = c ? lf_comm_size(c) : 1;
    if (world > 1)
        fprintf(stderr, "llmforge: train: rank %d of %d: %s\n", lf_comm_rank(c), world, lf_trainer_errmsg(t));
    else fprintf(stderr, "llmforge: train: %s\n", lf_trainer_errmsg(t));
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    if (world > 1) {
        fprintf(stderr, "llmforge: train: rank %d ends the job\n", lf_comm_rank(c));
        fflush(stdout);
        fflush(stderr);
        lf_comm_abort(c, 1); /* does not return for mpi */
    }
}

/* The stop flag the trainer polls, written by the signal thread (or, for a
 * thread that had the signals unblocked, by the async-signal-safe handler: a
 * store, and on a repeat one write(2) of a fixed line). */
static volatile sig_atomic_t g_stop_signal;
static sigset_t g_stop_set;
static const char k_again[] = "llmforge: train: stop already requested; finishing the step and its checkpoint\n";

static void on_stop_signal(int sig) {
    if (g_stop_signal) {
        ssize_t w = write(STDERR_FILENO, k_again, sizeof k_again - 1);
        (void)w;
        return;
    }
    g_stop_signal = sig;
}

static void *stop_signal_thread(void *arg) {
    (void)arg;
    for (;;) {
        int sig = 0;
        if (sigwait(&g_stop_set, &sig) != 0) continue;
        if (g_stop_signal) {
            fputs(k_again, stderr);
            fflush(stderr);
        } else {
            g_stop_signal = sig;
        }
    }
    return NULL;
}

/* Before the run creates any thread (the backend's, the loader's, MPI's):
 * they inherit the blocked mask, and only the signal thread takes them. */
static void install_stop_handlers(void) {
    sigemptyset(&g_stop_set);
    sigaddset(&g_stop_set, SIGTERM);
    sigaddset(&g_stop_set, SIGINT);
    sigaddset(&g_stop_set, SIGUSR1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    pthread_sigmask(SIG_BLOCK, &g_stop_set, NULL);
    pthread_attr_t at;
    pthread_t th;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, stop_signal_thread, NULL) != 0) /* then the handler takes them, on this thread */
        pthread_sigmask(SIG_UNBLOCK, &g_stop_set, NULL);
    pthread_attr_destroy(&at);
}

static const char *signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a stop request";
}

/* checkpoint.requeue under Slurm: `scontrol requeue $SLURM_JOB_ID` (rank 0,
 * after the checkpoint). Returns 0 when scontrol succeeded. */
static int slurm_requeue(void) {
    const char *job = getenv("SLURM_JOB_ID");
    if (!job || !*job) {
        fprintf(stderr, "llmforge: train: checkpoint.requeue is set but SLURM_JOB_ID is not (not a Slurm job): "
                        "nothing requeued\n");
        return 1;
    }
    char *args[] = {"scontrol", "requeue", (char *)job, NULL};
    pid_t pid;
    fflush(stdout);
    fflush(stderr);
    /* scontrol gets the signals back as a fresh process has them (not blocked, default actions) */
    posix_spawnattr_t at;
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_init(&at);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &g_stop_set);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int e = posix_spawnp(&pid, "scontrol", NULL, &at, args, environ);
    posix_spawnattr_destroy(&at);
    if (e != 0) {
        fprintf(stderr, "llmforge: train: cannot run scontrol requeue %s: %s\n", job, strerror(e));
        return 1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        printf("llmforge train: requeued Slurm job %s (scontrol requeue)\n", job);
        fflush(stdout);
        return 0;
    }
    fprintf(stderr, "llmforge: train: scontrol requeue %s failed (status %d)\n", job,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 1;
}

/* monitor.alerts.stall.action = exit: the watchdog thread ends the process. */
static void on_fatal(const char *msg, void *user) {
    (void)user;
    fprintf(stderr, "\nllmforge: train: %s; exiting (monitor.alerts.stall.action = exit)\n", msg);
    fflush(stderr);
    _exit(3);
}

/* The configuration file of train: the positional CONFIG, --deepspeed_config
 * FILE or --deepspeed FILE (DeepSpeed's and HF Trainer's spellings); two
 * that name different files are refused naming both. 0, or 2 (usage). */
static int train_config_arg(const char **config, const char **config_opt, const char *opt, const char *v) {
    if (*config && strcmp(*config, v)) {
        fprintf(stderr,
                "llmforge train: two configuration files: %s '%s' and %s '%s'; give one (the positional CONFIG, "
                "--deepspeed_config and --deepspeed all name the same file)\n",
                *config_opt, *config, opt, v);
        return 2;
    }
    *config = v;
    *config_opt = opt;
    return 0;
}

/* Each line of a configuration report's text, prefixed. */
static void print_lines(FILE *f, const char *prefix, const char *text) {
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        fprintf(f, "%s%.*s\n", prefix, n, p);
        p = e ? e + 1 : p + n;
    }
}

int cmd_train(int argc, char **argv) {
    install_stop_handlers(); /* first: before any thread exists, and a signal during set-up is kept */
    const char *config = NULL, *config_opt = "CONFIG", *init_from = NULL, *base = NULL;
    int resume = 0, print_config = 0;
    lf_train_config_report *report = calloc(1, sizeof *report);
    long threads = 0;
    char port_override[64];
    const char **overrides = calloc((size_t)argc + 1, sizeof(char *));
    int n_over = 0, rc = 1;
    lf_trainer *t = NULL;
    if (!overrides || !report) {
        free(overrides);
        free(report);
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            static char help[65536];
            lf_train_config_help(help, sizeof help);
            printf(
                "usage: llmforge train [CONFIG.json] [--key.path=value ...] [--resume [auto]] [--init-from FILE.safetensors]\n"
                "                      [--threads N] [--metrics-port PORT] [--deepspeed_config FILE | --deepspeed FILE]\n"
                "                      [--print-config]\n"
                "  --deepspeed_config FILE, --deepspeed FILE: the configuration file, as DeepSpeed and HF Trainer\n"
                "  name it (a DeepSpeed ds_config.json is read as it is: docs/deepspeed.md); --local_rank N, which\n"
                "  the deepspeed launcher passes, is accepted (the rank comes from LOCAL_RANK).\n"
                "  --print-config: resolve the configuration, print what the run header would say of it and the\n"
                "  resolved JSON, and exit without training.\n"
                "  --init-from: a safetensors file, a Hugging Face directory or checkpoint, or a PEFT LoRA adapter\n"
                "  directory (its base from base_model_name_or_path, or --base DIR; LoRA goes on from its adapters).\n"
                "  Any configuration key can be overridden: --optimizer.params.lr=3e-4, --model.n_layer=6,\n"
                "  --set key=value, or nanoGPT style --n_layer=6 when the leaf name is unique.\n"
                "  --resume: continue from out_dir's checkpoint; --resume auto: continue when out_dir holds\n"
                "  one, start fresh when it holds none (the same command for every start of a batch job).\n"
                "  SIGTERM, SIGINT or SIGUSR1: finish the step, save a checkpoint, exit %d (resume me).\n\n"
                "configuration keys:\n%s",
                LF_EXIT_PREEMPTED, help);
            rc = 0;
            goto done;
        } else if (!strcmp(argv[i], "--resume")) {
            resume = LF_RESUME_YES;
            if (i + 1 < argc && !strcmp(argv[i + 1], "auto")) {
                resume = LF_RESUME_AUTO;
                i++;
            }
        } else if (!strcmp(argv[i], "--resume=auto")) {
            resume = LF_RESUME_AUTO;
        } else if (!strcmp(argv[i], "--print-config")) {
            print_config = 1;
        } else if (!strcmp(argv[i], "--deepspeed") && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
            /* DeepSpeed's launcher flag without a file: how llmforge reads a configuration anyway */
        } else if ((v = opt_value(argc, argv, &i, "--local_rank", &missing))) {
            /* what the deepspeed launcher passes each script; the rank is read from LOCAL_RANK, as torchrun's */
        } else if ((v = opt_value(argc, argv, &i, "--deepspeed_config", &missing))) {
            if (train_config_arg(&config, &config_opt, "--deepspeed_config", v)) {
                rc = 2;
                goto done;
            }
        } else if ((v = opt_value(argc, argv, &i, "--deepspeed", &missing))) {
            if (train_config_arg(&config, &config_opt, "--deepspeed", v)) {
                rc = 2;
                goto done;
            }
        } else if ((v = opt_value(argc, argv, &i, "--init-from", &missing))) {
            init_from = v;
        } else if ((v = opt_value(argc, argv, &i, "--base", &missing))) {
            base = v;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) {
                rc = 2;
                goto done;
            }
        } else if ((v = opt_value(argc, argv, &i, "--set", &missing))) {
            overrides[n_over++] = v;
        } else if ((v = opt_value(argc, argv, &i, "--metrics-port", &missing))) {
            long port;
            if (parse_long("--metrics-port", v, 1, 65535, &port)) {
                rc = 2;
                goto done;
            }
            snprintf(port_override, sizeof port_override, "monitor.prometheus.port=%ld", port);
            overrides[n_over++] = port_override;
        } else if (missing) {
            rc = 2;
            goto done;
        } else if (!strncmp(argv[i], "--", 2) && strchr(argv[i], '=')) {
            overrides[n_over++] = argv[i] + 2;
        } else if (argv[i][0] != '-' && (!config || strcmp(config_opt, "CONFIG"))) {
            if (train_config_arg(&config, &config_opt, "CONFIG", argv[i])) {
                rc = 2;
                goto done;
            }
        } else {
            fprintf(stderr, "llmforge train: unknown argument '%s' (overrides are --key.path=value; see --help)\n",
                    argv[i]);
            rc = 2;
            goto done;
        }
    }
    if (cli_backend_override()) overrides[n_over++] = cli_backend_override(); /* --backend: wins over the file */
    lf_train_config cfg;
    lf_status st = lf_train_config_load_report(&cfg, config, 0, n_over, overrides, report);
    if (st != LF_OK) {
        if (report->n_errors > 1) {
            print_lines(stderr, "llmforge: config: ", report->errors);
            fprintf(stderr, "llmforge: config: %d problems (all of them above); nothing was started\n",
                    report->n_errors);
        } else {
            die_status(st, "config");
        }
        goto done;
    }
    if (print_config) {
        char *json = lf_train_config_to_json(&cfg);
        if (report->deepspeed_file) printf("config %s: a DeepSpeed file\n", config);
        print_lines(stdout, "config: ", report->notes);
        if (json) printf("%s", json);
        lf_free(json);
        rc = json ? 0 : 1;
        goto done;
    }
    /* several ranks on this host: each takes its share of the CPUs granted, not all of them */
    lf_comm_env env;
    const int local_ranks = lf_comm_env_detect(&env, NULL, NULL) == LF_OK && env.local_size > 1 ? env.local_size : 1;
    if (cli_backend_setup_ranks("train", threads, local_ranks, 0)) {
        rc = 2;
        goto done;
    }
    lf_trainer_opts opts = {.resume = resume,
                            .init_from = init_from,
                            .base = base,
                            .on_fatal = on_fatal,
                            .stop_flag = &g_stop_signal};
    opts.sinks[0] = console_open(cfg.steps_per_print, cfg.train_iters);
    opts.n_sinks = opts.sinks[0] != NULL;
    st = lf_trainer_create(&t, &cfg, &opts);
    if (st != LF_OK) {
        char hint[LF_PATH_MAX + 96];
        snprintf(hint, sizeof hint,
                 "--resume needs a checkpoint in %s/ckpt; start without --resume (or with "
                 "--resume auto)",
                 cfg.out_dir);
        train_failed(t, st == LF_ERR_NOT_FOUND && resume ? hint : NULL);
        goto done;
    }
    lf_comm *comm = lf_trainer_comm(t);
    if (lf_comm_rank(comm) == 0) { /* the other ranks print nothing but errors */
        lf_model *m = lf_trainer_model(t);
        const lf_model_config *mc = lf_model_get_config(m);
        char kv[32] = "";
        if (mc->n_kv_head != mc->n_head) snprintf(kv, sizeof kv, " (%d KV)", mc->n_kv_head);
        const char *origin = lf_trainer_block_size_origin(t);
        char block[200];
        snprintf(block, sizeof block, "%d%s%s%s", mc->block_size, *origin ? " (" : "", origin, *origin ? ")" : "");
        printf("llmforge train: %s, %zu parameters (%.2fM), %d layers, %d heads%s, %d channels, block %s, vocab %d; "
               "batch %d x %d x accum %d; %ld iterations; %d threads; out_dir %s\n",
               lf_arch_name(mc->arch), lf_model_num_params(m), lf_model_num_params(m) / 1e6, mc->n_layer, mc->n_head,
               kv, mc->n_embd, block, mc->vocab_size, cfg.micro_batch, mc->block_size, cfg.grad_accum, cfg.train_iters,
               lf_backend_cpu_threads(), cfg.out_dir);
        if (lf_comm_size(comm) > 1)
            printf("data parallel: %d ranks (%s, launched by %s); global batch %ld = micro %d x accum %d x %d ranks\n",
                   lf_comm_size(comm), lf_comm_name(comm), lf_comm_launcher_name(lf_comm_launch_env(comm)->launcher),
                   cfg.train_batch_size, cfg.micro_batch, cfg.grad_accum, lf_comm_size(comm));
        if (cfg.zero_stage) {
            static const char *what[] = {"", "AdamW moments", "AdamW moments and gradients",
                                         "AdamW moments, gradients and parameters"};
            size_t p = 0, g = 0, o = 0;
            lf_trainer_state_bytes(t, &p, &g, &o);
            printf("ZeRO stage %d: %s sharded over %d rank%s; this rank holds %.1f MB of parameters, %.1f MB of "
                   "gradients, %.1f MB of moments\n",
                   cfg.zero_stage, what[cfg.zero_stage], lf_comm_size(comm), lf_comm_size(comm) == 1 ? "" : "s",
                   p / 1e6, g / 1e6, o / 1e6);
        }
        print_lines(stdout, "config: ", report->notes); /* DeepSpeed defaults, "auto" values, ignored keys */
        char thr[256];
        cli_threads_line(thr, sizeof thr);
        printf("%s\n", thr);
        lf_backend *be = lf_trainer_backend(t);
        if (!lf_backend_host_memory(be)) {
            printf("backend: %s%s%s\n", lf_backend_name(be), *lf_backend_device_name(be) ? ", " : "",
                   lf_backend_device_name(be));
        } else {
            printf("cpu isa: %s (%s)\n", lf_backend_cpu_isa(), lf_backend_cpu_isa_source());
            printf("fp32 matmul: %s\n", lf_backend_cpu_fp32_kernel());
            if (cfg.bf16) printf("bf16 matmul: %s\n", lf_backend_cpu_bf16_kernel());
        }
        if (lf_backend_host_memory(be) && lf_backend_cpu_kernel_warning())
            fprintf(stderr, "llmforge: warning: %s\n", lf_backend_cpu_kernel_warning());
        fflush(stdout);
    }
    st = lf_trainer_run(t);
    if (st == LF_ERR_PREEMPTED) {
        /* every rank stopped at the same step, after the checkpoint: no abort */
        if (isatty(STDOUT_FILENO)) printf("\n");
        int sig = lf_trainer_stop_reason(t);
        if (lf_comm_rank(comm) == 0) {
            printf("llmforge train: %s: stopped at step %ld with its checkpoint saved; exit %d (continue with "
                   "--resume or --resume auto)\n",
                   signal_name(sig), lf_trainer_step(t), LF_EXIT_PREEMPTED);
            fflush(stdout);
            if (cfg.ckpt_requeue) slurm_requeue();
        }
        rc = LF_EXIT_PREEMPTED;
        goto done;
    }
    if (st != LF_OK) {
        if (isatty(STDOUT_FILENO)) printf("\n");
        train_failed(t, NULL);
        goto done;
    }
    rc = 0;
done:
    lf_trainer_free(t);
    free(overrides);
    free(report);
    return rc;
}
