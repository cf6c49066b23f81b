/*
 * `llmforge launch [options] -- SUBCOMMAND ARGS...`: a torchrun/deepspeed
 * style front end with two ways of starting ranks (docs/launch.md):
 *
 * --rdzv mpi: over Open MPI's mpirun. It builds one mpirun command line
 * (ranks, hosts, mapping, the flags Open MPI needs here), prints it
 * shell-quoted on stderr, and execs it, so signals and the exit status are
 * mpirun's. The ranks find each other through Open MPI's OMPI_COMM_WORLD_*
 * variables (docs/distributed.md).
 *
 * --rdzv tcp: as torchrun does. This process starts its node's G ranks
 * itself, with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
 * MASTER_ADDR and MASTER_PORT set (a free local port on one node), and the
 * ranks meet in the tcp communicator's rendezvous; several nodes run one
 * launch each. It stays as the ranks' supervisor:
 * - SIGINT, SIGTERM, SIGUSR1, SIGUSR2 and SIGHUP are forwarded to every rank
 *   (the trainer stops at a step boundary, saves, and exits 75); the ranks
 *   run in their own process group so a terminal's Ctrl-C reaches them once,
 *   through here, and they get SIGTERM if this process dies (PDEATHSIG);
 * - the first rank that exits with an error (not 0, not 75) makes it
 *   SIGTERM the others, SIGKILL them LAUNCH_STOP_GRACE_S later, and exit
 *   with that rank's status (128 + N for a signal) — torchrun's behaviour;
 * - otherwise its status is 75 if any rank exited 75 (preempted), else 0.
 * Default: tcp with --standalone or several nodes without a hostfile; mpi
 * with a hostfile, --mpirun or --mpi-arg; on one node otherwise mpi when
 * mpirun is on PATH, else tcp.
 *
 * Decisions the mpirun path relies on:
 * - One host: `mpirun -np G`. A hostfile (deepspeed's and Open MPI's
 *   "HOST slots=N" lines): `-np G*N --hostfile F --map-by ppr:G:node`, or
 *   `--host h1:G,...` when --nnodes takes only the first N of its hosts.
 * - Open MPI cannot join launches started separately on each node (torchrun's
 *   rendezvous): mpirun on node rank 0 starts every node's ranks over ssh.
 *   So --rdzv mpi with --nnodes > 1 needs --hostfile (otherwise exit 2 with
 *   what to do), and on node ranks > 0 there is nothing to start (message,
 *   exit 0).
 * - `--bind-to none` unless the user binds: a rank runs several OpenMP
 *   threads, and Open MPI's default for 2 ranks binds each to one core.
 * - Every usage error exits 2 before anything runs; nothing here waits.
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cli_util.h"
#include "commands.h"

#define LAUNCH_MAX_HOSTS 16384 /* hard caps on what a hostfile may hold (duplicates: n^2/2 compares) */
#define LAUNCH_MAX_LINE 4096
#define LAUNCH_MAX_SLOTS (1L << 20)
#define LAUNCH_STOP_GRACE_S 30    /* after a rank failed: SIGTERM, then SIGKILL this much later (torchrun's 30 s) */
#define LAUNCH_DEFAULT_PORT 29500 /* torchrun's MASTER_PORT default, for several nodes */
#define LAUNCH_EXIT_PREEMPTED 75  /* a rank stopped on a signal with its checkpoint saved (tools/llmforge/main.c) */

/* ---------------------------------------------------------------- options */
typedef enum {
    LAUNCH_OPT_NPROC,
    LAUNCH_OPT_NNODES,
    LAUNCH_OPT_NODE_RANK,
    LAUNCH_OPT_MASTER_ADDR,
    LAUNCH_OPT_MASTER_PORT,
    LAUNCH_OPT_STANDALONE,
    LAUNCH_OPT_RDZV,
    LAUNCH_OPT_HOSTFILE,
    LAUNCH_OPT_MPIRUN,
    LAUNCH_OPT_MPI_ARG,
    LAUNCH_OPT_DRY_RUN,
    LAUNCH_OPT_HELP,
} launch_opt_id;

/* One table drives parsing and --help. lo..hi bound integer options; a
 * string option has lo > hi; a flag has arg == NULL. */
static const struct launch_opt {
    launch_opt_id id;
    const char *names[4]; /* first is the canonical spelling; NULL-terminated */
    const char *arg;
    long lo, hi;
    const char *help;
} launch_opts[] = {
    {LAUNCH_OPT_NPROC,
     {"--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num-gpus"},
     "G",
     1,
     4096,
     "ranks per node (torchrun --nproc_per_node, deepspeed --num_gpus); default 1,\n"
     "or with --hostfile every slot of the hosts (deepspeed's default)"},
    {LAUNCH_OPT_NNODES,
     {"--nnodes", "--num_nodes", "--num-nodes"},
     "N",
     1,
     LAUNCH_MAX_HOSTS,
     "nodes (deepspeed --num_nodes); default 1, or the hosts of --hostfile;\n"
     "with a hostfile of more hosts, its first N"},
    {LAUNCH_OPT_NODE_RANK,
     {"--node-rank", "--node_rank"},
     "R",
     0,
     LAUNCH_MAX_HOSTS - 1,
     "this node's rank, 0..N-1 (default 0): its ranks are R*G..R*G+G-1 (tcp);\n"
     "with mpi only node rank 0 starts anything"},
    {LAUNCH_OPT_MASTER_ADDR,
     {"--master-addr", "--master_addr"},
     "A",
     1,
     0,
     "node rank 0's address, reachable from every node (tcp; default 127.0.0.1\n"
     "on one node); checked, then unused with mpi"},
    {LAUNCH_OPT_MASTER_PORT,
     {"--master-port", "--master_port"},
     "P",
     1,
     65535,
     "the rendezvous port on node rank 0 (tcp; default a free port on one node,\n"
     "29500 on several); unused with mpi"},
    {LAUNCH_OPT_STANDALONE,
     {"--standalone"},
     NULL,
     0,
     0,
     "torchrun's single-node mode: one node, ranks started here (tcp rendezvous\n"
     "on a free local port) unless --rdzv mpi"},
    {LAUNCH_OPT_RDZV,
     {"--rdzv", "--rdzv-backend", "--rdzv_backend"},
     "tcp|mpi",
     1,
     0,
     "how ranks start and meet: tcp (started here, torchrun's variables, the tcp\n"
     "communicator) or mpi (through mpirun); default: see docs/launch.md"},
    {LAUNCH_OPT_HOSTFILE,
     {"--hostfile"},
     "F",
     1,
     0,
     "\"HOST slots=N\" lines (deepspeed's and Open MPI's format); mpirun starts\n"
     "the ranks on the other hosts over ssh, rank 0 on the first host"},
    {LAUNCH_OPT_MPIRUN, {"--mpirun"}, "PATH", 1, 0, "the mpirun to run (default: `mpirun` on PATH)"},
    {LAUNCH_OPT_MPI_ARG,
     {"--mpi-arg", "--mpi_arg"},
     "ARG",
     1,
     0,
     "one more argument for mpirun, before the program; repeat it\n"
     "(--mpi-arg=--mca --mpi-arg=btl --mpi-arg=tcp,self)"},
    {LAUNCH_OPT_DRY_RUN,
     {"--dry-run", "--dry_run"},
     NULL,
     0,
     0,
     "print the mpirun command (tcp: every rank's variables) and exit 0"},
    {LAUNCH_OPT_HELP, {"--help", "-h"}, NULL, 0, 0, "this text"},
};
#define LAUNCH_N_OPTS (int)(sizeof launch_opts / sizeof launch_opts[0])

static void launch_help(void) {
    printf(
        "usage: llmforge launch [--nproc-per-node G] [--standalone | --nnodes N --node-rank R --master-addr A\n"
        "                       --master-port P | --hostfile F] [--rdzv tcp|mpi] [--mpirun PATH] [--mpi-arg ARG]...\n"
        "                       [--dry-run] -- SUBCOMMAND ARGS...\n"
        "  Starts G ranks per node of `llmforge SUBCOMMAND ARGS...` (for example\n"
        "  `llmforge launch --standalone --nproc-per-node 4 -- train cfg.json`).\n"
        "  tcp: starts this node's ranks itself with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,\n"
        "  MASTER_ADDR, MASTER_PORT), forwards signals to them, stops them all when one fails and exits\n"
        "  with its status; several nodes run one launch each (--nnodes, --node-rank, --master-addr).\n"
        "  mpi: prints the mpirun command on stderr and runs it; the exit status is mpirun's; several\n"
        "  nodes need --hostfile on node rank 0 only (mpirun starts the others over ssh).\n"
        "  See docs/launch.md.\n\n"
        "options:\n");
    for (int k = 0; k < LAUNCH_N_OPTS; k++) {
        const struct launch_opt *o = &launch_opts[k];
        char names[128] = "";
        for (int j = 0; j < 4 && o->names[j]; j++) {
            size_t n = strlen(names);
            snprintf(names + n, sizeof names - n, "%s%s", j ? ", " : "", o->names[j]);
        }
        if (o->arg) {
            size_t n = strlen(names);
            snprintf(names + n, sizeof names - n, " %s", o->arg);
        }
        printf("  %s\n", names);
        for (const char *h = o->help; *h;) { /* each help line indented */
            const char *nl = strchr(h, '\n');
            int len = nl ? (int)(nl - h) : (int)strlen(h);
            printf("      %.*s\n", len, h);
            h += len + (nl != NULL);
        }
    }
}

/* ---------------------------------------------------------------- hostfile */
typedef struct {
    char *name;
    long slots;
    int line;
} launch_host;

typedef struct {
    launch_host *hosts;
    int n;
} launch_hostfile;

static void hostfile_free(launch_hostfile *hf) {
    for (int i = 0; i < hf->n; i++) free(hf->hosts[i].name);
    free(hf->hosts);
    hf->hosts = NULL;
    hf->n = 0;
}

/* "llmforge: launch: hostfile 'F': line N: <message>" (no line when line is 0). */
static void hostfile_error(const char *path, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void hostfile_error(const char *path, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "llmforge: launch: hostfile '%s': ", path);
    if (line) fprintf(stderr, "line %d: ", line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Integer field of a hostfile line, 1..LAUNCH_MAX_SLOTS. */
static int hostfile_long(const char *path, int line, const char *key, const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > LAUNCH_MAX_SLOTS) {
        hostfile_error(path, line, "%s expects an integer in [1, %ld], got '%s'", key, LAUNCH_MAX_SLOTS, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Open MPI's hostfile, as deepspeed writes it: "HOST slots=N" per line,
 * '#' comments, blank lines. Every host must say its slots (deepspeed's
 * rule; Open MPI would guess the remote host's cores), once. Open MPI's
 * max_slots, user and port fields are accepted and left to mpirun. Prints
 * the error and returns -1 on anything else. */
static int hostfile_read(launch_hostfile *hf, const char *path) {
    char buf[LAUNCH_MAX_LINE + 2];
    int line = 0, cap = 0, rc = -1;
    FILE *f = fopen(path, "r");
    if (!f) {
        hostfile_error(path, 0, "cannot open: %s", strerror(errno));
        return -1;
    }
    while (fgets(buf, sizeof buf, f)) {
        line++;
        size_t len = strlen(buf);
        if (len - (len && buf[len - 1] == '\n') > LAUNCH_MAX_LINE - 1) { /* a full buffer: longer still */
            hostfile_error(path, line, "longer than %d characters", LAUNCH_MAX_LINE - 1);
            goto done;
        }
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char *save = NULL, *tok = strtok_r(buf, " \t\r\n", &save);
        if (!tok) continue;
        if (strchr(tok, '=')) {
            hostfile_error(path, line, "expected a host name first, got '%s' (HOST slots=N)", tok);
            goto done;
        }
        const char *name = tok;
        long slots = 0, max_slots = 0;
        while ((tok = strtok_r(NULL, " \t\r\n", &save))) {
            char *eq = strchr(tok, '=');
            if (!eq) {
                hostfile_error(path, line, "unexpected '%s' after host '%s' (one host a line: HOST slots=N)", tok,
                               name);
                goto done;
            }
            *eq = 0;
            const char *key = tok, *val = eq + 1;
            if (!strcmp(key, "slots") || !strcmp(key, "count") || !strcmp(key, "cpu") || !strcmp(key, "cpus")) {
                if (hostfile_long(path, line, key, val, &slots)) goto done;
            } else if (!strcmp(key, "max_slots") || !strcmp(key, "max-slots") || !strcmp(key, "slots_max") ||
                       !strcmp(key, "slots-max")) {
                if (hostfile_long(path, line, key, val, &max_slots)) goto done;
            } else if (strcmp(key, "user") && strcmp(key, "username") && strcmp(key, "port")) {
                hostfile_error(path, line,
                               "unknown field '%s=%s' (expected slots=N; Open MPI also takes "
                               "max_slots=N, user=NAME, port=N)",
                               key, val);
                goto done;
            }
        }
        if (slots == 0) {
            hostfile_error(path, line, "host '%s' has no slots=N (the ranks it may run)", name);
            goto done;
        }
        if (max_slots && max_slots < slots) {
            hostfile_error(path, line, "host '%s' has max_slots %ld below slots %ld", name, max_slots, slots);
            goto done;
        }
        for (int i = 0; i < hf->n; i++)
            if (!strcmp(hf->hosts[i].name, name)) {
                hostfile_error(path, line, "host '%s' is already on line %d", name, hf->hosts[i].line);
                goto done;
            }
        if (hf->n == LAUNCH_MAX_HOSTS) {
            hostfile_error(path, line, "more than %d hosts", LAUNCH_MAX_HOSTS);
            goto done;
        }
        if (hf->n == cap) {
            int ncap = cap ? 2 * cap : 16;
            launch_host *h = realloc(hf->hosts, (size_t)ncap * sizeof *h);
            if (!h) goto oom;
            hf->hosts = h;
            cap = ncap;
        }
        char *copy = strdup(name);
        if (!copy) goto oom;
        hf->hosts[hf->n++] = (launch_host){.name = copy, .slots = slots, .line = line};
    }
    if (ferror(f)) {
        hostfile_error(path, 0, "read error: %s", strerror(errno));
        goto done;
    }
    if (hf->n == 0) {
        hostfile_error(path, 0, "lists no hosts (one a line: HOST slots=N)");
        goto done;
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "llmforge: launch: out of memory reading hostfile '%s'\n", path);
done:
    fclose(f);
    if (rc) hostfile_free(hf);
    return rc;
}

/* ---------------------------------------------------------------- the host */
/* Cores as Open MPI counts its default slots: physical cores (distinct
 * package and core ids) among the CPUs this process may run on; the CPU
 * count when sysfs does not say. */
static long host_cores(void) {
    int *cpus = NULL, ncpu = 0;
    if (lf_cpu_affinity_list(&cpus, &ncpu) != LF_OK || ncpu <= 0) {
        lf_free(cpus);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? n : 1;
    }
    long *ids = malloc((size_t)ncpu * sizeof *ids);
    int n = 0;
    for (int i = 0; ids && i < ncpu && n >= 0; i++) {
        const int c = cpus[i];
        long v[2];
        static const char *what[2] = {"physical_package_id", "core_id"};
        for (int k = 0; k < 2 && n >= 0; k++) {
            char p[96];
            snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/%s", c, what[k]);
            FILE *f = fopen(p, "r");
            if (!f || fscanf(f, "%ld", &v[k]) != 1) n = -1;
            if (f) fclose(f);
        }
        if (n < 0) break;
        long id = v[0] * 65536 + v[1];
        int seen = 0;
        for (int j = 0; j < n && !seen; j++) seen = ids[j] == id;
        if (!seen) ids[n++] = id;
    }
    free(ids);
    lf_free(cpus);
    if (n <= 0) n = ncpu;
    return n;
}

/* An executable regular file? */
static int is_executable(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* `name` as execvp would find it: itself when it holds a '/', else the first
 * executable of that name in PATH. Fills out (PATH_MAX); -1 when none. */
static int find_program(const char *name, char *out, size_t cap) {
    if (strchr(name, '/')) {
        if (strlen(name) >= cap || !is_executable(name)) return -1;
        strcpy(out, name);
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
        /* an empty entry is the working directory (POSIX) */
        int n = dlen ? snprintf(out, cap, "%.*s/%s", (int)dlen, p, name) : snprintf(out, cap, "%s", name);
        if (n > 0 && (size_t)n < cap && is_executable(out)) return 0;
        if (!colon) break;
        p = colon + 1;
    }
    return -1;
}

/* ---------------------------------------------------------------- the command line */
/* Bytes a shell passes through unquoted. */
static int shell_safe(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-", *s)) return 0;
    return 1;
}

/* The words of av on stderr, each after a space and quoted for a POSIX
 * shell when needed. */
static void print_words(char *const *av) {
    for (int i = 0; av[i]; i++) {
        fputc(' ', stderr);
        if (shell_safe(av[i])) {
            fputs(av[i], stderr);
            continue;
        }
        fputc('\'', stderr);
        for (const char *s = av[i]; *s; s++)
            if (*s == '\'') fputs("'\\''", stderr);
            else fputc(*s, stderr);
        fputc('\'', stderr);
    }
}

/* The command on stderr, one line. */
static void print_command(char *const *av) {
    fputs("llmforge: launch:", stderr);
    print_words(av);
    fputc('\n', stderr);
    fflush(stderr);
}

/* Did the user pass mpirun option `name` (either dash form, or name=value)? */
static int mpi_arg_given(const char *const *args, int n, const char *name) {
    size_t len = strlen(name);
    for (int i = 0; i < n; i++) {
        const char *a = args[i];
        if (a[0] != '-') continue;
        a += a[1] == '-' ? 2 : 1;
        if (!strncmp(a, name, len) && (a[len] == 0 || a[len] == '=')) return 1;
    }
    return 0;
}

/* argv under construction; every element is owned (freed by argv_free). */
typedef struct {
    char **v;
    int n, cap;
} launch_argv;

static int argv_push(launch_argv *a, const char *s) {
    if (a->n + 1 >= a->cap) return -1; /* cap is sized from the input below; never reached */
    if (!(a->v[a->n] = strdup(s))) return -1;
    a->n++;
    return 0;
}

static void argv_free(launch_argv *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
}

/* ---------------------------------------------------------------- tcp: ranks started here */
/* A port nobody listens on now: bind port 0, read it, release it. The
 * ranks' rank 0 binds it a moment later (SO_REUSEADDR); another program
 * taking it in between makes rank 0 fail with "cannot listen". */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t sl = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &sl) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Other launchers' rank variables come first in rank discovery
 * (lf_comm_env_detect: Open MPI, MPICH, Slurm, then torchrun), so a launch
 * inside an srun step or an mpirun would hand every child the outer rank:
 * the children do not inherit them. */
static const char *const k_outer_rank_vars[] = {
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
};

typedef struct {
    pid_t pid;
    int rank, alive, code;
} launch_child;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Start ranks base .. base+G-1 of `world` running `exe sub...`, supervise
 * them, return the launch's exit status. */
static int launch_tcp(long nproc, long nnodes, long node_rank, const char *addr, int port, int dry_run, const char *exe,
                      char **sub, int nsub) {
    long world = nproc * nnodes, base = node_rank * nproc;
    char **av = calloc((size_t)nsub + 2, sizeof *av);
    launch_child *ch = calloc((size_t)nproc, sizeof *ch);
    if (!av || !ch) {
        free(av);
        free(ch);
        fprintf(stderr, "llmforge: launch: out of memory\n");
        return 1;
    }
    av[0] = (char *)exe;
    for (int i = 0; i < nsub; i++) av[1 + i] = sub[i];
    fprintf(stderr, "llmforge: launch: node %ld of %ld: ranks %ld-%ld of %ld, tcp rendezvous at %s:%d:", node_rank,
            nnodes, base, base + nproc - 1, world, addr, port);
    print_words(av);
    fputc('\n', stderr);
    if (dry_run) {
        for (long l = 0; l < nproc; l++)
            fprintf(stderr,
                    "llmforge: launch:   RANK=%ld WORLD_SIZE=%ld LOCAL_RANK=%ld LOCAL_WORLD_SIZE=%ld "
                    "GROUP_RANK=%ld MASTER_ADDR=%s MASTER_PORT=%d\n",
                    base + l, world, l, nproc, node_rank, addr, port);
        free(ch);
        free(av);
        return 0;
    }
    fflush(stdout);
    fflush(stderr);
    /* the signals to forward, and SIGCHLD, are taken synchronously (sigtimedwait) */
    sigset_t set, old;
    sigemptyset(&set);
    const int fwd[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP};
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) sigaddset(&set, fwd[i]);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);
    pid_t me = getpid();
    long started = 0;
    int rc = 0, failed = 0, preempted = 0, killed = 0;
    for (long l = 0; l < nproc; l++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "llmforge: launch: cannot start rank %ld: fork: %s\n", base + l, strerror(errno));
            failed = 1, rc = 1;
            break;
        }
        if (pid == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            setpgid(0, 0); /* a terminal's Ctrl-C reaches the ranks through the launcher only, once */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != me) _exit(1); /* the launcher died before prctl */
            for (size_t i = 0; i < sizeof k_outer_rank_vars / sizeof k_outer_rank_vars[0]; i++)
                unsetenv(k_outer_rank_vars[i]);
            char v[32];
            snprintf(v, sizeof v, "%ld", base + l), setenv("RANK", v, 1);
            snprintf(v, sizeof v, "%ld", world), setenv("WORLD_SIZE", v, 1);
            snprintf(v, sizeof v, "%ld", l), setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%ld", nproc), setenv("LOCAL_WORLD_SIZE", v, 1);
            snprintf(v, sizeof v, "%ld", node_rank), setenv("GROUP_RANK", v, 1);
            snprintf(v, sizeof v, "%ld", nnodes), setenv("GROUP_WORLD_SIZE", v, 1);
            snprintf(v, sizeof v, "%d", port), setenv("MASTER_PORT", v, 1);
            setenv("MASTER_ADDR", addr, 1);
            execv(exe, av);
            fprintf(stderr, "llmforge: launch: rank %ld: cannot run '%s': %s\n", base + l, exe, strerror(errno));
            _exit(127);
        }
        ch[l] = (launch_child){.pid = pid, .rank = (int)(base + l), .alive = 1, .code = -1};
        started++;
    }
    if (failed) /* some ranks started: they would wait for the others until their timeout */
        for (long l = 0; l < started; l++) kill(ch[l].pid, SIGTERM);
    double kill_at = failed ? mono_s() + LAUNCH_STOP_GRACE_S : 0;
    long alive = started;
    while (alive > 0) {
        int status;
        pid_t w;
        while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
            long l = 0;
            while (l < started && ch[l].pid != w) l++;
            if (l == started || !ch[l].alive) continue;
            ch[l].alive = 0;
            alive--;
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            ch[l].code = code;
            if (code == LAUNCH_EXIT_PREEMPTED) preempted = 1;
            if (code == 0 || code == LAUNCH_EXIT_PREEMPTED || failed) continue;
            failed = 1, rc = code;
            kill_at = mono_s() + LAUNCH_STOP_GRACE_S;
            if (WIFSIGNALED(status))
                fprintf(stderr, "llmforge: launch: rank %d (pid %ld) was killed by signal %d (%s)", ch[l].rank, (long)w,
                        WTERMSIG(status), strsignal(WTERMSIG(status)));
            else
                fprintf(stderr, "llmforge: launch: rank %d (pid %ld) exited with status %d", ch[l].rank, (long)w, code);
            if (alive)
                fprintf(stderr, "; stopping the other ranks (SIGTERM, then SIGKILL after %d s)", LAUNCH_STOP_GRACE_S);
            fputc('\n', stderr);
            for (long k = 0; k < started; k++)
                if (ch[k].alive) kill(ch[k].pid, SIGTERM);
        }
        if (alive == 0) break;
        if (failed && !killed && mono_s() >= kill_at) {
            fprintf(stderr, "llmforge: launch: %ld rank%s still running %d s after the failure: SIGKILL\n", alive,
                    alive == 1 ? "" : "s", LAUNCH_STOP_GRACE_S);
            for (long k = 0; k < started; k++)
                if (ch[k].alive) kill(ch[k].pid, SIGKILL);
            killed = 1;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig > 0 && sig != SIGCHLD) { /* a stop request (or hangup): every rank gets it */
            for (long k = 0; k < started; k++)
                if (ch[k].alive) kill(ch[k].pid, sig);
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    free(ch);
    free(av);
    if (failed) return rc ? rc : 1;
    return preempted ? LAUNCH_EXIT_PREEMPTED : 0;
}

/* ---------------------------------------------------------------- the command */
int cmd_launch(int argc, char **argv) {
    long nproc = 0, nnodes = 0, node_rank = 0, port = 0;
    const char *master_addr = NULL, *hostfile = NULL, *mpirun = "mpirun", *rdzv = NULL;
    const char *nproc_name = "--nproc-per-node", *nnodes_name = "--nnodes", *rank_name = "--node-rank";
    int standalone = 0, dry_run = 0, sub = -1, n_mpi = 0, rc = 2, mpirun_given = 0;
    launch_hostfile hf = {0};
    launch_argv av = {0};
    const char **mpi_args = calloc((size_t)argc + 1, sizeof *mpi_args);
    if (!mpi_args) return 1;

    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            sub = i + 1;
            break;
        }
        const struct launch_opt *o = NULL;
        const char *name = NULL, *v = NULL;
        int missing = 0;
        for (int k = 0; k < LAUNCH_N_OPTS && !o && !missing; k++)
            for (int j = 0; j < 4 && launch_opts[k].names[j] && !o && !missing; j++) {
                name = launch_opts[k].names[j];
                if (!launch_opts[k].arg) {
                    if (!strcmp(argv[i], name)) o = &launch_opts[k];
                } else if ((v = opt_value(argc, argv, &i, name, &missing))) {
                    o = &launch_opts[k];
                }
            }
        if (missing) goto done;
        if (!o) {
            if (argv[i][0] == '-')
                fprintf(stderr, "llmforge: launch: unknown option '%s' (see llmforge launch --help)\n", argv[i]);
            else
                fprintf(stderr,
                        "llmforge: launch: missing '--' before the subcommand '%s': "
                        "llmforge launch [options] -- %s ...\n",
                        argv[i], argv[i]);
            goto done;
        }
        long num = 0;
        if (o->arg && o->lo <= o->hi && parse_long(name, v, o->lo, o->hi, &num)) goto done;
        if (o->arg && o->lo > o->hi && !*v) {
            fprintf(stderr, "llmforge: launch: %s needs a non-empty value\n", name);
            goto done;
        }
        switch (o->id) {
        case LAUNCH_OPT_NPROC: nproc = num, nproc_name = name; break;
        case LAUNCH_OPT_NNODES: nnodes = num, nnodes_name = name; break;
        case LAUNCH_OPT_NODE_RANK: node_rank = num, rank_name = name; break;
        case LAUNCH_OPT_MASTER_ADDR: master_addr = v; break;
        case LAUNCH_OPT_MASTER_PORT: port = num; break;
        case LAUNCH_OPT_STANDALONE: standalone = 1; break;
        case LAUNCH_OPT_RDZV:
            if (strcmp(v, "tcp") && strcmp(v, "mpi")) {
                fprintf(stderr, "llmforge: launch: %s expects tcp or mpi, got '%s'\n", name, v);
                goto done;
            }
            rdzv = v;
            break;
        case LAUNCH_OPT_HOSTFILE: hostfile = v; break;
        case LAUNCH_OPT_MPIRUN: mpirun = v, mpirun_given = 1; break;
        case LAUNCH_OPT_MPI_ARG: mpi_args[n_mpi++] = v; break;
        case LAUNCH_OPT_DRY_RUN: dry_run = 1; break;
        case LAUNCH_OPT_HELP:
            launch_help();
            rc = 0;
            goto done;
        }
    }
    if (sub < 0) {
        fprintf(stderr, "llmforge: launch: missing '--' and the subcommand to run: "
                        "llmforge launch [options] -- train cfg.json\n");
        goto done;
    }
    if (sub >= argc) {
        fprintf(stderr, "llmforge: launch: missing the subcommand after '--' (for example: -- train cfg.json)\n");
        goto done;
    }
    if (!strcmp(argv[sub], "launch")) {
        fprintf(stderr, "llmforge: launch: the subcommand after '--' cannot be 'launch' itself\n");
        goto done;
    }
    if (getenv("OMPI_COMM_WORLD_SIZE") && *getenv("OMPI_COMM_WORLD_SIZE")) {
        fprintf(stderr,
                "llmforge: launch: already inside an Open MPI job (OMPI_COMM_WORLD_SIZE=%s); "
                "run `llmforge %s ...` directly instead\n",
                getenv("OMPI_COMM_WORLD_SIZE"), argv[sub]);
        goto done;
    }
    if (standalone && (nnodes > 1 || hostfile)) {
        fprintf(stderr, "llmforge: launch: --standalone is one node; it excludes %s\n",
                hostfile ? "--hostfile" : nnodes_name);
        goto done;
    }

    /* tcp or mpi (docs/launch.md "Which rendezvous") */
    char probe[PATH_MAX];
    if (rdzv && !strcmp(rdzv, "tcp") && (hostfile || mpirun_given || n_mpi)) {
        fprintf(stderr, "llmforge: launch: --rdzv tcp starts the ranks itself; %s is for --rdzv mpi\n",
                hostfile       ? "--hostfile"
                : mpirun_given ? "--mpirun"
                               : "--mpi-arg");
        goto done;
    }
    int use_tcp = rdzv ? !strcmp(rdzv, "tcp")
                       : !(hostfile || mpirun_given || n_mpi) &&
                             (standalone || nnodes > 1 || find_program("mpirun", probe, sizeof probe) != 0);
    if (use_tcp) {
        if (!nnodes) nnodes = 1;
        if (!nproc) nproc = 1;
        if (node_rank >= nnodes) {
            fprintf(stderr, "llmforge: launch: %s %ld is not below the %ld node%s (%s)\n", rank_name, node_rank, nnodes,
                    nnodes == 1 ? "" : "s", nnodes_name);
            goto done;
        }
        if (nnodes > 1 && !master_addr) {
            fprintf(stderr,
                    "llmforge: launch: %s %ld with the tcp rendezvous needs --master-addr: node rank 0's "
                    "address, the same on every node and reachable from each (and --master-port, default %d)\n",
                    nnodes_name, nnodes, LAUNCH_DEFAULT_PORT);
            goto done;
        }
        if (nproc * nnodes > 65536) {
            fprintf(stderr, "llmforge: launch: %ld ranks in all: the tcp rendezvous takes at most 65536\n",
                    nproc * nnodes);
            goto done;
        }
        if (!port) port = nnodes > 1 ? LAUNCH_DEFAULT_PORT : free_port();
        if (port <= 0) {
            fprintf(stderr, "llmforge: launch: cannot find a free port for the rendezvous: %s (give --master-port)\n",
                    strerror(errno));
            rc = 1;
            goto done;
        }
        char self[PATH_MAX];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0 || len >= (ssize_t)sizeof self - 1) {
            fprintf(stderr, "llmforge: launch: cannot find this executable (/proc/self/exe): %s\n",
                    len < 0 ? strerror(errno) : "path too long");
            rc = 1;
            goto done;
        }
        self[len] = 0;
        rc = launch_tcp(nproc, nnodes, node_rank, master_addr ? master_addr : "127.0.0.1", (int)port, dry_run, self,
                        argv + sub, argc - sub);
        goto done;
    }

    /* mpi. Nodes: the hostfile's (its first N with --nnodes N), else --nnodes */
    int oversubscribe_given = mpi_arg_given(mpi_args, n_mpi, "oversubscribe");
    if (hostfile) {
        if (hostfile_read(&hf, hostfile)) goto done;
        if (nnodes > hf.n) {
            fprintf(stderr, "llmforge: launch: %s %ld, but hostfile '%s' lists %d host%s\n", nnodes_name, nnodes,
                    hostfile, hf.n, hf.n == 1 ? "" : "s");
            goto done;
        }
        if (!nnodes) nnodes = hf.n;
    } else if (!nnodes) {
        nnodes = 1;
    }
    if (node_rank >= nnodes) {
        fprintf(stderr, "llmforge: launch: %s %ld is not below the %ld node%s (%s)\n", rank_name, node_rank, nnodes,
                nnodes == 1 ? "" : "s", hostfile ? "the hostfile's hosts" : nnodes_name);
        goto done;
    }
    if (nnodes > 1 && !hostfile) {
        long g = nproc ? nproc : 1;
        fprintf(stderr,
                "llmforge: launch: %s %ld needs --hostfile: Open MPI's mpirun starts every node's ranks itself,\n"
                "  over ssh from one node, and cannot join launches started separately on each node the way\n"
                "  torchrun's rendezvous at --master-addr does. On node rank 0%s%s%s only, write a hostfile with\n"
                "  one line per node, node rank 0 first:\n",
                nnodes_name, nnodes, master_addr ? " (" : "", master_addr ? master_addr : "", master_addr ? ")" : "");
        for (long r = 0; r < nnodes && r < 8; r++) {
            if (r == 0 && master_addr) fprintf(stderr, "      %s slots=%ld\n", master_addr, g);
            else fprintf(stderr, "      NODE%ld slots=%ld\n", r, g);
        }
        if (nnodes > 8) fprintf(stderr, "      ... (%ld lines in all)\n", nnodes);
        char others[32];
        snprintf(others, sizeof others, "1..%ld", nnodes - 1);
        fprintf(stderr,
                "  and run there: llmforge launch --nproc-per-node %ld --hostfile HOSTFILE -- %s ...\n"
                "  On node rank%s %s there is nothing to start (ssh from node 0 must reach them).\n"
                "  Inside a Slurm allocation%s, skip mpirun: srun -N %ld --ntasks-per-node %ld "
                "--kill-on-bad-exit=1 llmforge %s ...\n"
                "  Or, with no MPI, run one launch per node that starts its own ranks: llmforge launch --rdzv tcp\n"
                "  --nnodes %ld --node-rank R --master-addr %s --nproc-per-node %ld -- %s ...\n",
                g, argv[sub], nnodes > 2 ? "s" : "", nnodes > 2 ? others : "1",
                getenv("SLURM_JOB_NODELIST") ? " (this shell is in one)" : "", nnodes, g, argv[sub], nnodes,
                master_addr ? master_addr : "NODE0", g, argv[sub]);
        goto done;
    }
    if (node_rank > 0) {
        fprintf(stderr,
                "llmforge: launch: %s %ld: nothing to start here; `llmforge launch --hostfile %s` on node "
                "rank 0%s%s%s starts this node's ranks over ssh\n",
                rank_name, node_rank, hostfile, master_addr ? " (" : "", master_addr ? master_addr : "",
                master_addr ? ")" : "");
        rc = 0;
        goto done;
    }
    (void)port; /* validated above; Open MPI wires the ranks up itself */

    /* ranks: G per node; with a hostfile and no G, every slot of its first N hosts */
    int by_node = nproc > 0; /* G given: G per node (--map-by ppr:G:node), else slot by slot */
    long total_slots = 0;
    for (int i = 0; i < hf.n && i < nnodes; i++) total_slots += hf.hosts[i].slots;
    long world = by_node ? nproc * nnodes : hostfile ? total_slots : 1;
    if (hostfile && by_node && !oversubscribe_given) {
        if (total_slots < world) {
            fprintf(stderr,
                    "llmforge: launch: hostfile '%s': %ld host%s with %ld slot%s in all, fewer than the %ld "
                    "ranks of %s %ld × %ld node%s (add --mpi-arg=--oversubscribe to run more ranks than slots)\n",
                    hostfile, nnodes, nnodes == 1 ? "" : "s", total_slots, total_slots == 1 ? "" : "s", world,
                    nproc_name, nproc, nnodes, nnodes == 1 ? "" : "s");
            goto done;
        }
        for (int i = 0; i < nnodes; i++)
            if (hf.hosts[i].slots < nproc) {
                fprintf(stderr,
                        "llmforge: launch: hostfile '%s': line %d: host '%s' has %ld slot%s, fewer than "
                        "%s %ld (add --mpi-arg=--oversubscribe to run more ranks than slots)\n",
                        hostfile, hf.hosts[i].line, hf.hosts[i].name, hf.hosts[i].slots,
                        hf.hosts[i].slots == 1 ? "" : "s", nproc_name, nproc);
                goto done;
            }
    }
    if (!nproc) nproc = 1;

    char mpirun_path[PATH_MAX], exe[PATH_MAX];
    if (find_program(mpirun, mpirun_path, sizeof mpirun_path)) {
        if (strchr(mpirun, '/'))
            fprintf(stderr, "llmforge: launch: --mpirun '%s': %s\n", mpirun,
                    access(mpirun, F_OK) ? "no such file" : "not an executable file");
        else
            fprintf(stderr,
                    "llmforge: launch: '%s' not found on PATH: install Open MPI (Debian: apt-get install "
                    "openmpi-bin) or name it with --mpirun PATH\n",
                    mpirun);
        goto done;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || n >= (ssize_t)sizeof exe - 1) {
        fprintf(stderr, "llmforge: launch: cannot find this executable (/proc/self/exe): %s\n",
                n < 0 ? strerror(errno) : "path too long");
        rc = 1;
        goto done;
    }
    exe[n] = 0;

    rc = 1;
    av.cap = argc + n_mpi + 24;
    if (!(av.v = calloc((size_t)av.cap, sizeof *av.v))) goto oom;
    char num[64];
    snprintf(num, sizeof num, "%ld", world);
    /* argv[0] as the user named it: Open MPI reads an absolute argv[0] as --prefix (where remote
     * nodes find its daemons), and the printed command then runs the same mpirun from a shell */
    if (argv_push(&av, mpirun) || argv_push(&av, "-np") || argv_push(&av, num)) goto oom;
    if (geteuid() == 0 && !mpi_arg_given(mpi_args, n_mpi, "allow-run-as-root") && argv_push(&av, "--allow-run-as-root"))
        goto oom;
    if (!hostfile && nproc > host_cores() && !oversubscribe_given && argv_push(&av, "--oversubscribe")) goto oom;
    if (hostfile) {
        if (nnodes == hf.n) {
            if (argv_push(&av, "--hostfile") || argv_push(&av, hostfile)) goto oom;
        } else { /* the first N hosts only */
            size_t len = 1;
            for (int i = 0; i < nnodes; i++) len += strlen(hf.hosts[i].name) + 24;
            char *list = malloc(len);
            if (!list) goto oom;
            size_t at = 0;
            for (int i = 0; i < nnodes; i++)
                at += (size_t)snprintf(list + at, len - at, "%s%s:%ld", i ? "," : "", hf.hosts[i].name,
                                       by_node ? nproc : hf.hosts[i].slots);
            int bad = argv_push(&av, "--host") || argv_push(&av, list);
            free(list);
            if (bad) goto oom;
        }
        if (by_node && !mpi_arg_given(mpi_args, n_mpi, "map-by")) {
            snprintf(num, sizeof num, "ppr:%ld:node", nproc);
            if (argv_push(&av, "--map-by") || argv_push(&av, num)) goto oom;
        }
    }
    if (!mpi_arg_given(mpi_args, n_mpi, "bind-to") && (argv_push(&av, "--bind-to") || argv_push(&av, "none"))) goto oom;
    if (getenv("OMP_NUM_THREADS") && (argv_push(&av, "-x") || argv_push(&av, "OMP_NUM_THREADS"))) goto oom;
    for (int i = 0; i < n_mpi; i++)
        if (argv_push(&av, mpi_args[i])) goto oom;
    if (argv_push(&av, exe)) goto oom;
    for (int i = sub; i < argc; i++)
        if (argv_push(&av, argv[i])) goto oom;

    print_command(av.v);
    if (dry_run) {
        rc = 0;
        goto done;
    }
    fflush(stdout);
    execv(mpirun_path, av.v);
    fprintf(stderr, "llmforge: launch: cannot run '%s': %s\n", mpirun_path, strerror(errno));
    rc = 1;
    goto done;
oom:
    fprintf(stderr, "llmforge: launch: out of memory\n");
    rc = 1;
done:
    argv_free(&av);
    hostfile_free(&hf);
    free((void *)mpi_args);
    return rc;
}
