/* Helpers shared by the CLI's subcommands (cli_util.c). */
#ifndef LF_TOOLS_CLI_UTIL_H
#define LF_TOOLS_CLI_UTIL_H
#include <stdint.h>
#include "llmforge/core.h"

/* "llmforge: WHAT: <last error or status>" on stderr. */
void die_status(lf_status st, const char *what);
/* The CPU backend's threads (n <= 0: OpenMP's default), then its kernel
 * check: 2 after a message when LLMFORGE_FP32_GEMM is bad, else 0; with
 * `warn`, the slow-kernel warning (lf_backend_cpu_kernel_warning) goes to
 * stderr. */
int cli_backend_setup(const char *cmd, long threads, int warn);
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
