/* Helpers shared by the CLI's subcommands (cli_util.c). */
#ifndef LF_TOOLS_CLI_UTIL_H
#define LF_TOOLS_CLI_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include "llmforge/core.h"

/* "llmforge: WHAT: <last error or status>" on stderr. */
void die_status(lf_status st, const char *what);
/* The CPU backend's threads (n <= 0: OpenMP's default), then its kernel
 * check: 2 after a message when LLMFORGE_FP32_GEMM is bad, else 0; with
 * `warn`, the slow-kernel warning (lf_backend_cpu_kernel_warning) goes to
 * stderr. */
int cli_backend_setup(const char *cmd, long threads, int warn);
/* The same with the thread count, when neither --threads (threads > 0) nor
 * OMP_NUM_THREADS gives it, being the machine's grant (lf_cpu_threads_choose:
 * affinity mask, cgroup CPU limit, online CPUs) divided among `local_ranks`
 * ranks started on this host (at least 1 each). A limit file that had to be
 * ignored is named in a warning on stderr. */
int cli_backend_setup_ranks(const char *cmd, long threads, int local_ranks, int warn);
/* The run header's line for that choice, with the threads OpenMP will run:
 * "threads: 2 (cgroup cpu.max 200000/100000; 64 online CPUs)",
 * "threads: 1 (affinity 1 CPU; 2 online CPUs)", "threads: 4 (--threads; ...)". */
void cli_threads_line(char *buf, size_t cap);
/* What decided it: "--threads", "OMP_NUM_THREADS", "affinity", "cgroup cpu.max",
 * "cgroup cpu.cfs_quota_us" or "online CPUs". */
const char *cli_threads_source(void);
/* The global option --backend NAME (main.c), NULL when not given: train,
 * plan and bench --config pass it on as the last override "backend=NAME"
 * (so it wins over the file), every other command through
 * lf_backend_set_default. */
extern const char *g_cli_backend;
/* "backend=NAME" of g_cli_backend, or NULL. */
const char *cli_backend_override(void);
/* Strict number parsing; on error print "OPT expects ..." and return -1. */
int parse_long(const char *opt, const char *s, long lo, long hi, long *out);
int parse_double(const char *opt, const char *s, double lo, double hi, double *out);
int parse_u64(const char *opt, const char *s, uint64_t *out);
/* Value of option `name` at argv[*i] ("--name=value" or "--name value",
 * advancing *i); NULL when argv[*i] is another option, or when the value is
 * missing (then *missing = 1 and a message is printed). */
const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing);
#endif
