/*
 * `llmforge launch [options] -- SUBCOMMAND ARGS...`: a torchrun/deepspeed
 * style front end over Open MPI's mpirun. It builds one mpirun command line
 * (ranks, hosts, mapping, the flags Open MPI needs here), prints it
 * shell-quoted on stderr, and execs it, so signals and the exit status are
 * mpirun's. Reference: docs/launch.md; the ranks find each other through
 * Open MPI's OMPI_COMM_WORLD_* variables (docs/distributed.md).
 *
 * Decisions the code relies on:
 * - One host: `mpirun -np G`. A hostfile (deepspeed's and Open MPI's
 *   "HOST slots=N" lines): `-np G*N --hostfile F --map-by ppr:G:node`, or
 *   `--host h1:G,...` when --nnodes takes only the first N of its hosts.
 * - Open MPI cannot join launches started separately on each node (torchrun's
 *   rendezvous): mpirun on node rank 0 starts every node's ranks over ssh.
 *   So --nnodes > 1 needs --hostfile (otherwise exit 2 with what to do), and
 *   on node ranks > 0 there is nothing to start (message, exit 0).
 * - `--bind-to none` unless the user binds: a rank runs several OpenMP
 *   threads, and Open MPI's default for 2 ranks binds each to one core.
 * - Every usage error exits 2 before anything runs; nothing here waits.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli_util.h"
#include "commands.h"

#define LAUNCH_MAX_HOSTS 16384 /* hard caps on what a hostfile may hold (duplicates: n^2/2 compares) */
#define LAUNCH_MAX_LINE 4096
#define LAUNCH_MAX_SLOTS (1L << 20)

/* ---------------------------------------------------------------- options */
typedef enum {
    LAUNCH_OPT_NPROC,
    LAUNCH_OPT_NNODES,
    LAUNCH_OPT_NODE_RANK,
    LAUNCH_OPT_MASTER_ADDR,
    LAUNCH_OPT_MASTER_PORT,
    LAUNCH_OPT_STANDALONE,
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
    {LAUNCH_OPT_NPROC, {"--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num-gpus"}, "G", 1, 4096,
     "ranks per node (torchrun --nproc_per_node, deepspeed --num_gpus); default 1,\n"
     "or with --hostfile every slot of the hosts (deepspeed's default)"},
    {LAUNCH_OPT_NNODES, {"--nnodes", "--num_nodes", "--num-nodes"}, "N", 1, LAUNCH_MAX_HOSTS,
     "nodes (deepspeed --num_nodes); default 1, or the hosts of --hostfile;\n"
     "with a hostfile of more hosts, its first N"},
    {LAUNCH_OPT_NODE_RANK, {"--node-rank", "--node_rank"}, "R", 0, LAUNCH_MAX_HOSTS - 1,
     "this node's rank, 0..N-1 (default 0); only node rank 0 starts anything"},
    {LAUNCH_OPT_MASTER_ADDR, {"--master-addr", "--master_addr"}, "A", 1, 0,
     "node rank 0's address (checked, then unused: Open MPI needs no rendezvous)"},
    {LAUNCH_OPT_MASTER_PORT, {"--master-port", "--master_port"}, "P", 1, 65535, "node rank 0's port (the same)"},
    {LAUNCH_OPT_STANDALONE, {"--standalone"}, NULL, 0, 0, "torchrun's single-node mode: one node"},
    {LAUNCH_OPT_HOSTFILE, {"--hostfile"}, "F", 1, 0,
     "\"HOST slots=N\" lines (deepspeed's and Open MPI's format); mpirun starts\n"
     "the ranks on the other hosts over ssh, rank 0 on the first host"},
    {LAUNCH_OPT_MPIRUN, {"--mpirun"}, "PATH", 1, 0, "the mpirun to run (default: `mpirun` on PATH)"},
    {LAUNCH_OPT_MPI_ARG, {"--mpi-arg", "--mpi_arg"}, "ARG", 1, 0,
     "one more argument for mpirun, before the program; repeat it\n"
     "(--mpi-arg=--mca --mpi-arg=btl --mpi-arg=tcp,self)"},
    {LAUNCH_OPT_DRY_RUN, {"--dry-run", "--dry_run"}, NULL, 0, 0, "print the mpirun command and exit 0"},
    {LAUNCH_OPT_HELP, {"--help", "-h"}, NULL, 0, 0, "this text"},
};
#define LAUNCH_N_OPTS (int)(sizeof launch_opts / sizeof launch_opts[0])

static void launch_help(void) {
    printf("usage: llmforge launch [--nproc-per-node G] [--nnodes N --node-rank R --master-addr A --master-port P\n"
           "                       | --hostfile F] [--mpirun PATH] [--mpi-arg ARG]... [--dry-run] -- SUBCOMMAND ARGS...\n"
           "  Starts G ranks per node of `llmforge SUBCOMMAND ARGS...` through Open MPI's mpirun (for example\n"
           "  `llmforge launch --nproc-per-node 4 -- train cfg.json`), prints the mpirun command on stderr\n"
           "  and runs it; the exit status is mpirun's. Several nodes need --hostfile, given on node rank 0\n"
           "  only: mpirun starts the other nodes' ranks over ssh. See docs/launch.md.\n\n"
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
                hostfile_error(path, line, "unexpected '%s' after host '%s' (one host a line: HOST slots=N)", tok, name);
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
                hostfile_error(path, line, "unknown field '%s=%s' (expected slots=N; Open MPI also takes "
                               "max_slots=N, user=NAME, port=N)", key, val);
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
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? n : 1;
    }
    int cpus = CPU_COUNT(&set), n = 0;
    long *ids = malloc((size_t)(cpus > 0 ? cpus : 1) * sizeof *ids);
    if (!ids) return cpus > 0 ? cpus : 1;
    for (int c = 0; c < CPU_SETSIZE && n >= 0; c++) {
        if (!CPU_ISSET(c, &set)) continue;
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
        for (int i = 0; i < n && !seen; i++) seen = ids[i] == id;
        if (!seen) ids[n++] = id;
    }
    free(ids);
    if (n <= 0) n = cpus;
    return n > 0 ? n : 1;
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

/* The command on stderr, each word quoted for a POSIX shell when needed. */
static void print_command(char *const *av) {
    fputs("llmforge: launch:", stderr);
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

/* ---------------------------------------------------------------- the command */
int cmd_launch(int argc, char **argv) {
    long nproc = 0, nnodes = 0, node_rank = 0, port = 0;
    const char *master_addr = NULL, *hostfile = NULL, *mpirun = "mpirun";
    const char *nproc_name = "--nproc-per-node", *nnodes_name = "--nnodes", *rank_name = "--node-rank";
    int standalone = 0, dry_run = 0, sub = -1, n_mpi = 0, rc = 2;
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
                fprintf(stderr, "llmforge: launch: missing '--' before the subcommand '%s': "
                        "llmforge launch [options] -- %s ...\n", argv[i], argv[i]);
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
        case LAUNCH_OPT_HOSTFILE: hostfile = v; break;
        case LAUNCH_OPT_MPIRUN: mpirun = v; break;
        case LAUNCH_OPT_MPI_ARG: mpi_args[n_mpi++] = v; break;
        case LAUNCH_OPT_DRY_RUN: dry_run = 1; break;
        case LAUNCH_OPT_HELP: launch_help(); rc = 0; goto done;
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
        fprintf(stderr, "llmforge: launch: already inside an Open MPI job (OMPI_COMM_WORLD_SIZE=%s); "
                "run `llmforge %s ...` directly instead\n", getenv("OMPI_COMM_WORLD_SIZE"), argv[sub]);
        goto done;
    }
    if (standalone && (nnodes > 1 || hostfile)) {
        fprintf(stderr, "llmforge: launch: --standalone is one node; it excludes %s\n",
                hostfile ? "--hostfile" : nnodes_name);
        goto done;
    }

    /* nodes: the hostfile's (its first N with --nnodes N), else --nnodes */
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
                "--kill-on-bad-exit=1 llmforge %s ...\n",
                g, argv[sub], nnodes > 2 ? "s" : "", nnodes > 2 ? others : "1",
                getenv("SLURM_JOB_NODELIST") ? " (this shell is in one)" : "", nnodes, g, argv[sub]);
        goto done;
    }
    if (node_rank > 0) {
        fprintf(stderr, "llmforge: launch: %s %ld: nothing to start here; `llmforge launch --hostfile %s` on node "
                "rank 0%s%s%s starts this node's ranks over ssh\n", rank_name, node_rank, hostfile,
                master_addr ? " (" : "", master_addr ? master_addr : "", master_addr ? ")" : "");
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
            fprintf(stderr, "llmforge: launch: hostfile '%s': %ld host%s with %ld slot%s in all, fewer than the %ld "
                    "ranks of %s %ld × %ld node%s (add --mpi-arg=--oversubscribe to run more ranks than slots)\n",
                    hostfile, nnodes, nnodes == 1 ? "" : "s", total_slots, total_slots == 1 ? "" : "s", world,
                    nproc_name, nproc, nnodes, nnodes == 1 ? "" : "s");
            goto done;
        }
        for (int i = 0; i < nnodes; i++)
            if (hf.hosts[i].slots < nproc) {
                fprintf(stderr, "llmforge: launch: hostfile '%s': line %d: host '%s' has %ld slot%s, fewer than "
                        "%s %ld (add --mpi-arg=--oversubscribe to run more ranks than slots)\n", hostfile,
                        hf.hosts[i].line, hf.hosts[i].name, hf.hosts[i].slots, hf.hosts[i].slots == 1 ? "" : "s",
                        nproc_name, nproc);
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
            fprintf(stderr, "llmforge: launch: '%s' not found on PATH: install Open MPI (Debian: apt-get install "
                    "openmpi-bin) or name it with --mpirun PATH\n", mpirun);
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
    if (geteuid() == 0 && !mpi_arg_given(mpi_args, n_mpi, "allow-run-as-root") &&
        argv_push(&av, "--allow-run-as-root"))
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
    if (!mpi_arg_given(mpi_args, n_mpi, "bind-to") && (argv_push(&av, "--bind-to") || argv_push(&av, "none")))
        goto oom;
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
