/*
 * Rank discovery: which launcher started this process, and this process's
 * rank, world size and rank on its host, from environment variables only.
 *
 * A pure function of the environment, read through a getenv-like callback
 * (tests pass a fake one). Launchers are tried in a fixed order and the first
 * whose rank or size variable is present wins: Open MPI's mpirun, MPICH's
 * Hydra, Slurm's srun, torchrun. Order matters where variables coexist:
 * mpirun inside a Slurm allocation sees SLURM_* of the allocation as well as
 * its own OMPI_* ones, and srun with --mpi=pmi2 sets PMI_RANK/PMI_SIZE next
 * to SLURM_PROCID (the two agree).
 *
 * References: Open MPI mpirun(1) "Environment variables"; MPICH Hydra
 * (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS); Slurm srun(1)
 * "OUTPUT ENVIRONMENT VARIABLES"; torch.distributed.run ("torchrun")
 * environment variables.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

typedef struct launcher_vars {
    lf_comm_launcher launcher;
    const char *label;
    const char *rank, *size, *local_rank, *local_size;
} launcher_vars;

static const launcher_vars k_launchers[] = {
    {LF_COMM_LAUNCHER_OPENMPI, "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {LF_COMM_LAUNCHER_MPICH, "MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {LF_COMM_LAUNCHER_SLURM, "Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
    {LF_COMM_LAUNCHER_TORCHRUN, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};
#define N_LAUNCHERS (sizeof k_launchers / sizeof k_launchers[0])

const char *lf_comm_launcher_name(lf_comm_launcher l) {
    switch (l) {
    case LF_COMM_LAUNCHER_NONE: return "none";
    case LF_COMM_LAUNCHER_OPENMPI: return "openmpi";
    case LF_COMM_LAUNCHER_MPICH: return "mpich";
    case LF_COMM_LAUNCHER_SLURM: return "slurm";
    case LF_COMM_LAUNCHER_TORCHRUN: return "torchrun";
    }
    return "unknown";
}

void lf__comm_env_vars(lf_comm_launcher l, const char **rank_var, const char **size_var) {
    *rank_var = "";
    *size_var = "";
    for (size_t i = 0; i < N_LAUNCHERS; i++)
        if (k_launchers[i].launcher == l) {
            *rank_var = k_launchers[i].rank;
            *size_var = k_launchers[i].size;
        }
}

static const char *process_getenv(const char *name, void *user) {
    (void)user;
    return getenv(name);
}

/* Empty counts as unset: `export RANK=` is how shells clear a variable. */
static const char *get_var(lf_getenv_fn get, void *user, const char *name) {
    if (!name) return NULL;
    const char *v = get(name, user);
    return v && *v ? v : NULL;
}

/* Parse a non-negative int (surrounding blanks allowed), naming the variable. */
static lf_status parse_count(const char *name, const char *v, long lo, long hi, int *out) {
    const char *p = v;
    while (*p == ' ' || *p == '\t') p++;
    char *end = NULL;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p) return lf_fail(LF_ERR_CONFIG, "%s='%s' is not a non-negative integer", name, v);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (*end || errno == ERANGE || *p == '-' || *p == '+')
        return lf_fail(LF_ERR_CONFIG, "%s='%s' is not a non-negative integer", name, v);
    if (x < lo || x > hi) return lf_fail(LF_ERR_CONFIG, "%s=%ld is outside %ld..%ld", name, x, lo, hi);
    *out = (int)x;
    return LF_OK;
}

static void copy_capped(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n < cap) {
        memcpy(dst, src, n + 1);
        return;
    }
    memcpy(dst, src, cap - 4);
    memcpy(dst + cap - 4, "...", 4); /* a hard cap; the list is for messages only */
}

/* Slurm has no single "tasks on this node" variable: SLURM_STEP_TASKS_PER_NODE
 * (srun's step; SLURM_TASKS_PER_NODE for the job) lists the tasks of each
 * node in order, runs compressed as "N(xK)" ("2(x3),1": 2, 2, 2, 1), and
 * SLURM_NODEID is this node's index in it. *out stays -1 when either is
 * unset. */
static lf_status slurm_local_size(lf_getenv_fn get, void *user, int *out) {
    const char *name = "SLURM_STEP_TASKS_PER_NODE", *list = get_var(get, user, name);
    if (!list) list = get_var(get, user, name = "SLURM_TASKS_PER_NODE");
    const char *vid = get_var(get, user, "SLURM_NODEID");
    if (!list || !vid) return LF_OK;
    int node = 0;
    lf_status st = parse_count("SLURM_NODEID", vid, 0, INT_MAX, &node);
    if (st != LF_OK) return st;
    long at = 0; /* nodes covered so far */
    for (const char *p = list; *p;) {
        char *end = NULL;
        errno = 0;
        long n = strtol(p, &end, 10), k = 1;
        if (end == p || n < 1 || n > INT_MAX || errno) break;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') break;
            k = strtol(p + 2, &end, 10);
            if (end == p + 2 || k < 1 || *end != ')' || errno) break;
            p = end + 1;
        }
        if (node < at + k) {
            *out = (int)n;
            return LF_OK;
        }
        at += k;
        if (*p == ',') p++;
        else if (*p) break;
    }
    return lf_fail(LF_ERR_CONFIG,
                   "Slurm launch: %s='%s' does not list node SLURM_NODEID=%d (expected counts like "
                   "\"2(x3),1\")",
                   name, list, node);
}

static lf_status detect_one(const launcher_vars *L, lf_getenv_fn get, void *user, lf_comm_env *e) {
    const char *vr = get_var(get, user, L->rank), *vs = get_var(get, user, L->size);
    if (!vr) return lf_fail(LF_ERR_CONFIG, "%s launch: %s=%s is set but %s is not", L->label, L->size, vs, L->rank);
    if (!vs) return lf_fail(LF_ERR_CONFIG, "%s launch: %s=%s is set but %s is not", L->label, L->rank, vr, L->size);
    lf_status st;
    if ((st = parse_count(L->rank, vr, 0, INT_MAX, &e->rank)) != LF_OK) return st;
    if ((st = parse_count(L->size, vs, 1, INT_MAX, &e->size)) != LF_OK) return st;
    if (e->rank >= e->size)
        return lf_fail(LF_ERR_CONFIG, "%s launch: %s=%d is not below %s=%d", L->label, L->rank, e->rank, L->size,
                       e->size);
    const char *vlr = get_var(get, user, L->local_rank), *vls = get_var(get, user, L->local_size);
    if (vlr && (st = parse_count(L->local_rank, vlr, 0, INT_MAX, &e->local_rank)) != LF_OK) return st;
    if (vls && (st = parse_count(L->local_size, vls, 1, INT_MAX, &e->local_size)) != LF_OK) return st;
    if (vls && e->local_size > e->size)
        return lf_fail(LF_ERR_CONFIG, "%s launch: %s=%d exceeds %s=%d", L->label, L->local_size, e->local_size, L->size,
                       e->size);
    if (vlr && vls && e->local_rank >= e->local_size)
        return lf_fail(LF_ERR_CONFIG, "%s launch: %s=%d is not below %s=%d", L->label, L->local_rank, e->local_rank,
                       L->local_size, e->local_size);

    if (L->launcher == LF_COMM_LAUNCHER_SLURM) {
        if ((st = slurm_local_size(get, user, &e->local_size)) != LF_OK) return st;
        if (e->local_size > e->size || (e->local_size > 0 && vlr && e->local_rank >= e->local_size))
            return lf_fail(LF_ERR_CONFIG,
                           "Slurm launch: %d tasks on this node (SLURM_STEP_TASKS_PER_NODE, "
                           "SLURM_NODEID) does not fit SLURM_NTASKS=%d and SLURM_LOCALID=%d",
                           e->local_size, e->size, e->local_rank);
        const char *nl = get_var(get, user, "SLURM_JOB_NODELIST");
        if (!nl) nl = get_var(get, user, "SLURM_NODELIST"); /* older Slurm */
        if (nl) copy_capped(e->nodelist, sizeof e->nodelist, nl);
    }
    if (L->launcher == LF_COMM_LAUNCHER_TORCHRUN) {
        const char *ma = get_var(get, user, "MASTER_ADDR"), *mp = get_var(get, user, "MASTER_PORT");
        if (e->size > 1 && (!ma || !mp))
            return lf_fail(LF_ERR_CONFIG, "torchrun launch: WORLD_SIZE=%d but %s is not set", e->size,
                           !ma ? "MASTER_ADDR" : "MASTER_PORT");
        if (ma) {
            if (strlen(ma) >= sizeof e->master_addr)
                return lf_fail(LF_ERR_CONFIG, "torchrun launch: MASTER_ADDR is %zu bytes long (at most %zu)",
                               strlen(ma), sizeof e->master_addr - 1);
            memcpy(e->master_addr, ma, strlen(ma) + 1);
        }
        if (mp && (st = parse_count("MASTER_PORT", mp, 1, 65535, &e->master_port)) != LF_OK) return st;
    }
    e->launcher = L->launcher;
    return LF_OK;
}

lf_status lf_comm_env_detect(lf_comm_env *out, lf_getenv_fn get, void *user) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_env_detect: out is NULL");
    if (!get) get = process_getenv;
    lf_comm_env e;
    memset(&e, 0, sizeof e);
    e.launcher = LF_COMM_LAUNCHER_NONE;
    e.rank = 0;
    e.size = 1;
    e.local_rank = -1;
    e.local_size = -1;
    for (size_t i = 0; i < N_LAUNCHERS; i++) {
        const launcher_vars *L = &k_launchers[i];
        if (!get_var(get, user, L->rank) && !get_var(get, user, L->size)) continue;
        lf_status st = detect_one(L, get, user, &e);
        if (st != LF_OK) return st;
        break;
    }
    *out = e;
    return LF_OK;
}
