/* Communicator, one process: rank discovery from fake environments, opening
 * by kind, the single communicator's collectives and argument checks, the
 * partition rule and the rank-order reductions every kind shares. The mpi
 * kind runs as 1-4 ranks in mpi_comm.c (through mpirun). */
#include "test_util.h"
#include "llmforge/comm.h"
#include "comm/comm_impl.h"

/* ---------------------------------------------------------------- fake environment */
typedef struct fake_env {
    const char *kv[32][2];
    int n;
} fake_env;

static const char *fake_getenv(const char *name, void *user) {
    fake_env *e = user;
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->kv[i][0], name) == 0) return e->kv[i][1];
    return NULL;
}

static void put(fake_env *e, const char *k, const char *v) {
    e->kv[e->n][0] = k;
    e->kv[e->n][1] = v;
    e->n++;
}

static lf_status detect(fake_env *e, lf_comm_env *out) { return lf_comm_env_detect(out, fake_getenv, e); }

static void test_env_none(void **state) {
    (void)state;
    fake_env e = {0};
    put(&e, "HOME", "/root");
    put(&e, "RANK", ""); /* empty counts as unset */
    lf_comm_env v;
    LF_ASSERT_OK(detect(&e, &v));
    assert_int_equal(v.launcher, LF_COMM_LAUNCHER_NONE);
    assert_int_equal(v.rank, 0);
    assert_int_equal(v.size, 1);
    assert_int_equal(v.local_rank, -1);
    assert_int_equal(v.local_size, -1);
    assert_string_equal(lf_comm_launcher_name(v.launcher), "none");
    assert_int_equal(lf_comm_env_detect(NULL, fake_getenv, &e), LF_ERR_INVALID_ARG);
}

static void test_env_openmpi(void **state) {
    (void)state;
    fake_env e = {0};
    put(&e, "OMPI_COMM_WORLD_RANK", "5");
    put(&e, "OMPI_COMM_WORLD_SIZE", "8");
    put(&e, "OMPI_COMM_WORLD_LOCAL_RANK", "1");
    put(&e, "OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    /* mpirun inside a Slurm allocation: OMPI_* wins */
    put(&e, "SLURM_PROCID", "0");
    put(&e, "SLURM_NTASKS", "1");
    lf_comm_env v;
    LF_ASSERT_OK(detect(&e, &v));
    assert_int_equal(v.launcher, LF_COMM_LAUNCHER_OPENMPI);
    assert_int_equal(v.rank, 5);
    assert_int_equal(v.size, 8);
    assert_int_equal(v.local_rank, 1);
    assert_int_equal(v.local_size, 4);
    assert_string_equal(v.nodelist, "");
    assert_string_equal(lf_comm_launcher_name(v.launcher), "openmpi");
}

static void test_env_mpich(void **state) {
    (void)state;
    fake_env e = {0};
    put(&e, "PMI_RANK", "2");
    put(&e, "PMI_SIZE", "3");
    put(&e, "MPI_LOCALRANKID", "0");
    put(&e, "SLURM_PROCID", "2"); /* srun --mpi=pmi2 sets both */
    put(&e, "SLURM_NTASKS", "3");
    lf_comm_env v;
    LF_ASSERT_OK(detect(&e, &v));
    assert_int_equal(v.launcher, LF_COMM_LAUNCHER_MPICH);
    assert_int_equal(v.rank, 2);
    assert_int_equal(v.size, 3);
    assert_int_equal(v.local_rank, 0);
    assert_int_equal(v.local_size, -1);
}

static void test_env_slurm(void **state) {
    (void)state;
    fake_env e = {0};
    put(&e, "SLURM_PROCID", "7");
    put(&e, "SLURM_NTASKS", "16");
    put(&e, "SLURM_LOCALID", "3");
    put(&e, "SLURM_JOB_NODELIST", "node[01-04]");
    lf_comm_env v;
    LF_ASSERT_OK(detect(&e, &v));
    assert_int_equal(v.launcher, LF_COMM_LAUNCHER_SLURM);
    assert_int_equal(v.rank, 7);
    assert_int_equal(v.size, 16);
    assert_int_equal(v.local_rank, 3);
    assert_int_equal(v.local_size, -1);
    assert_string_equal(v.nodelist, "node[01-04]");

    /* tasks on this node: SLURM_STEP_TASKS_PER_NODE at index SLURM_NODEID, runs compressed as N(xK) */
    static const struct {
        const char *list, *node;
        int want;
    } per_node[] = {{"4(x4)", "1", 4}, {"5,6(x2),4", "0", 5}, {"5,6(x2),4", "2", 6}, {"5,6(x2),4", "3", 4}};
    for (size_t i = 0; i < sizeof per_node / sizeof per_node[0]; i++) {
        fake_env f = e;
        put(&f, "SLURM_STEP_TASKS_PER_NODE", per_node[i].list);
        put(&f, "SLURM_NODEID", per_node[i].node);
        LF_ASSERT_OK(detect(&f, &v));
        assert_int_equal(v.local_size, per_node[i].want);
    }
    fake_env f = e; /* the job's list when the step's is absent */
    put(&f, "SLURM_TASKS_PER_NODE", "4(x4)");
    put(&f, "SLURM_NODEID", "3");
    LF_ASSERT_OK(detect(&f, &v));
    assert_int_equal(v.local_size, 4);

    /* a node list longer than the field is capped, marked with "..." */
    char longlist[1000];
    memset(longlist, 'n', sizeof longlist - 1);
    longlist[sizeof longlist - 1] = '\0';
    e.kv[3][1] = longlist;
    LF_ASSERT_OK(detect(&e, &v));
    assert_int_equal(strlen(v.nodelist), sizeof v.nodelist - 1);
    assert_string_equal(v.nodelist + sizeof v.nodelist - 4, "...");
}

static void test_env_torchrun(void **state) {
    (void)state;
    fake_env e = {0};
    put(&e, "RANK", "3");
    put(&e, "WORLD_SIZE", "4");
    put(&e, "LOCAL_RANK", "1");
    put(&e, "LOCAL_WORLD_SIZE", "2");
    put(&e, "MASTER_ADDR", "10.0.0.1");
    put(&e, "MASTER_PORT", "29500");
    lf_comm_env v;
    LF_ASSERT_OK(detect(&e, &v));
    assert_int_equal(v.launcher, LF_COMM_LAUNCHER_TORCHRUN);
    assert_int_equal(v.rank, 3);
    assert_int_equal(v.size, 4);
    assert_int_equal(v.local_rank, 1);
    assert_int_equal(v.local_size, 2);
    assert_string_equal(v.master_addr, "10.0.0.1");
    assert_int_equal(v.master_port, 29500);
}

/* One inconsistent environment: detection fails with LF_ERR_CONFIG and a
 * message holding every needle. */
static void expect_env_error(const char *const *kv, int nkv, const char *n1, const char *n2) {
    fake_env e = {0};
    for (int i = 0; i < nkv; i++) put(&e, kv[2 * i], kv[2 * i + 1]);
    lf_comm_env v;
    lf_status st = detect(&e, &v);
    if (st != LF_ERR_CONFIG) fail_msg("expected LF_ERR_CONFIG for %s, got %s", n1, lf_status_str(st));
    LF_ASSERT_ERR_CONTAINS(n1);
    if (n2) LF_ASSERT_ERR_CONTAINS(n2);
}

static void test_env_errors(void **state) {
    (void)state;
    const char *rank_ge_size[] = {"OMPI_COMM_WORLD_RANK", "4", "OMPI_COMM_WORLD_SIZE", "4"};
    expect_env_error(rank_ge_size, 2, "OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4");
    const char *no_size[] = {"SLURM_PROCID", "1"};
    expect_env_error(no_size, 1, "SLURM_PROCID=1", "SLURM_NTASKS is not");
    const char *no_rank[] = {"PMI_SIZE", "2"};
    expect_env_error(no_rank, 1, "PMI_SIZE=2", "PMI_RANK is not");
    const char *not_int[] = {"RANK", "zero", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1"};
    expect_env_error(not_int, 4, "RANK='zero'", NULL);
    const char *negative[] = {"PMI_RANK", "-1", "PMI_SIZE", "2"};
    expect_env_error(negative, 2, "PMI_RANK='-1'", NULL);
    const char *trailing[] = {"PMI_RANK", "1x", "PMI_SIZE", "2"};
    expect_env_error(trailing, 2, "PMI_RANK='1x'", NULL);
    const char *past_end[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "8", "SLURM_STEP_TASKS_PER_NODE", "2(x3)",
                              "SLURM_NODEID", "3"};
    expect_env_error(past_end, 4, "SLURM_STEP_TASKS_PER_NODE='2(x3)' does not list node SLURM_NODEID=3", NULL);
    const char *garbled[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "8", "SLURM_STEP_TASKS_PER_NODE", "2(y3)",
                             "SLURM_NODEID", "0"};
    expect_env_error(garbled, 4, "SLURM_STEP_TASKS_PER_NODE='2(y3)'", NULL);
    const char *too_many[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_STEP_TASKS_PER_NODE", "4",
                              "SLURM_NODEID", "0"};
    expect_env_error(too_many, 4, "4 tasks on this node", "SLURM_NTASKS=2");
    const char *size0[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "0"};
    expect_env_error(size0, 2, "SLURM_NTASKS=0", NULL);
    const char *huge[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "99999999999999999999"};
    expect_env_error(huge, 2, "SLURM_NTASKS", NULL);
    const char *local_ge[] = {"OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "4",
                              "OMPI_COMM_WORLD_LOCAL_RANK", "2", "OMPI_COMM_WORLD_LOCAL_SIZE", "2"};
    expect_env_error(local_ge, 4, "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2");
    const char *local_big[] = {"RANK", "0", "WORLD_SIZE", "2", "LOCAL_WORLD_SIZE", "3", "MASTER_ADDR", "h",
                               "MASTER_PORT", "1"};
    expect_env_error(local_big, 5, "LOCAL_WORLD_SIZE=3", "WORLD_SIZE=2");
    const char *no_master[] = {"RANK", "0", "WORLD_SIZE", "2", "MASTER_PORT", "29500"};
    expect_env_error(no_master, 3, "MASTER_ADDR", "WORLD_SIZE=2");
    const char *bad_port[] = {"RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "70000"};
    expect_env_error(bad_port, 4, "MASTER_PORT=70000", NULL);
    /* a torchrun of one process needs no master */
    fake_env e = {0};
    put(&e, "RANK", "0");
    put(&e, "WORLD_SIZE", "1");
    lf_comm_env v;
    LF_ASSERT_OK(detect(&e, &v));
    assert_int_equal(v.launcher, LF_COMM_LAUNCHER_TORCHRUN);
}

/* ---------------------------------------------------------------- open */
static void test_open_kinds(void **state) {
    (void)state;
    lf_comm *c = NULL;
    fake_env e = {0};
    lf_comm_options o = lf_comm_options_default();
    assert_true(o.timeout_s == 300.0);
    o.getenv_fn = fake_getenv;
    o.getenv_user = &e;

    /* auto with no launcher: single */
    LF_ASSERT_OK(lf_comm_open(&c, "auto", &o));
    assert_string_equal(lf_comm_name(c), "single");
    assert_int_equal(lf_comm_rank(c), 0);
    assert_int_equal(lf_comm_size(c), 1);
    assert_int_equal(lf_comm_local_rank(c), 0);
    assert_int_equal(lf_comm_local_size(c), 1);
    assert_true(lf_comm_timeout(c) == 300.0);
    assert_int_equal(lf_comm_launch_env(c)->launcher, LF_COMM_LAUNCHER_NONE);
    lf_comm_close(c);

    /* auto under a launcher of one process: single, launcher recorded */
    put(&e, "OMPI_COMM_WORLD_RANK", "0");
    put(&e, "OMPI_COMM_WORLD_SIZE", "1");
    LF_ASSERT_OK(lf_comm_open(&c, NULL, &o));
    assert_string_equal(lf_comm_name(c), "single");
    assert_int_equal(lf_comm_launch_env(c)->launcher, LF_COMM_LAUNCHER_OPENMPI);
    lf_comm_close(c);

    /* auto with an inconsistent environment: the discovery error */
    e.n = 0;
    put(&e, "SLURM_PROCID", "3");
    put(&e, "SLURM_NTASKS", "2");
    assert_int_equal(lf_comm_open(&c, "auto", &o), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("SLURM_PROCID=3");
    assert_null(c);

    /* auto under torchrun: the tcp kind, whose open is the rendezvous; with
     * no rank 0 listening (port 1 of this host) it times out saying where
     * it looked (comm.test_comm_tcp runs real ranks) */
    e.n = 0;
    put(&e, "RANK", "1");
    put(&e, "WORLD_SIZE", "2");
    put(&e, "MASTER_ADDR", "localhost");
    put(&e, "MASTER_PORT", "1");
    double keep = o.timeout_s;
    o.timeout_s = 0.3;
    assert_int_equal(lf_comm_open(&c, "auto", &o), LF_ERR_TIMEOUT);
    LF_ASSERT_ERR_CONTAINS("rank 1 could not reach rank 0 at MASTER_ADDR:MASTER_PORT = localhost:1 ");
    assert_null(c);
    /* torchrun's agent holds MASTER_PORT itself: the rendezvous takes the next port */
    put(&e, "TORCHELASTIC_USE_AGENT_STORE", "True");
    assert_int_equal(lf_comm_open(&c, "auto", &o), LF_ERR_TIMEOUT);
    LF_ASSERT_ERR_CONTAINS("MASTER_ADDR:MASTER_PORT = localhost:2 ");
    o.timeout_s = keep;
    /* tcp under another launcher needs MASTER_ADDR and MASTER_PORT exported */
    e.n = 0;
    put(&e, "OMPI_COMM_WORLD_RANK", "0");
    put(&e, "OMPI_COMM_WORLD_SIZE", "2");
    assert_int_equal(lf_comm_open(&c, "tcp", &o), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("MASTER_ADDR is not set (launched by openmpi");
    put(&e, "MASTER_ADDR", "localhost");
    put(&e, "MASTER_PORT", "0x10");
    assert_int_equal(lf_comm_open(&c, "tcp", &o), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("MASTER_PORT='0x10'");
    /* explicit single under any launcher is the caller's choice */
    LF_ASSERT_OK(lf_comm_open(&c, "single", &o));
    assert_int_equal(lf_comm_size(c), 1);
    assert_int_equal(lf_comm_device_buffers(c), 0); /* host buffers */
    LF_ASSERT_OK(lf_comm_set_stream(c, NULL));      /* nothing to order: accepted */
    lf_comm_close(c);
    /* device tensors on one process: single (nccl is for several ranks) */
    e.n = 0;
    o.device_tensors = 1;
    LF_ASSERT_OK(lf_comm_open(&c, "auto", &o));
    assert_string_equal(lf_comm_name(c), "single");
    lf_comm_close(c);
    o.device_tensors = 0;

    assert_int_equal(lf_comm_open(&c, "nccl", NULL), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("lf_comm_nccl_register");
    assert_int_equal(lf_comm_device_buffers(NULL), 0);
    assert_int_equal(lf_comm_set_stream(NULL, NULL), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_comm_open(&c, "gloo", NULL), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("'gloo'");
    assert_int_equal(lf_comm_open(NULL, "single", NULL), LF_ERR_INVALID_ARG);
    lf_comm_options bad = lf_comm_options_default();
    bad.timeout_s = 0;
    assert_int_equal(lf_comm_open(&c, "single", &bad), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("timeout_s");
    bad.timeout_s = NAN;
    assert_int_equal(lf_comm_open(&c, "single", &bad), LF_ERR_RANGE);
    bad = lf_comm_options_default();
    bad.segment_elems = ((size_t)1 << 30) + 1;
    assert_int_equal(lf_comm_open(&c, "single", &bad), LF_ERR_RANGE);

    /* NULL handle accessors and close are harmless */
    lf_comm_close(NULL);
    assert_int_equal(lf_comm_size(NULL), 1);
    assert_string_equal(lf_comm_errmsg(NULL), "");
    assert_int_equal(lf_comm_abort(NULL, 1), LF_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- single collectives */
static void test_single_collectives(void **state) {
    (void)state;
    lf_comm *c;
    LF_ASSERT_OK(lf_comm_open(&c, "single", NULL));
    float x[7], y[7], z[7];
    for (int i = 0; i < 7; i++) x[i] = y[i] = 0.1f * (float)i - 0.3f;
    const lf_comm_op ops[] = {LF_COMM_SUM, LF_COMM_AVG, LF_COMM_MAX, LF_COMM_MIN};
    for (int k = 0; k < 4; k++) {
        LF_ASSERT_OK(lf_comm_all_reduce(c, x, 7, ops[k]));
        assert_memory_equal(x, y, sizeof x);
        memset(z, 0, sizeof z);
        LF_ASSERT_OK(lf_comm_reduce_scatter(c, x, z, 7, ops[k]));
        assert_memory_equal(z, y, sizeof z);
        LF_ASSERT_OK(lf_comm_reduce_scatter(c, x, x, 7, ops[k])); /* in place */
        assert_memory_equal(x, y, sizeof x);
    }
    /* a started reduce-scatter on a kind without asynchronous collectives:
     * done at the start, ticket 0, the waits free */
    assert_false(lf_comm_async(c));
    int64_t ticket = -1;
    memset(z, 0, sizeof z);
    LF_ASSERT_OK(lf_comm_reduce_scatter_start(c, x, z, 7, LF_COMM_SUM, &ticket));
    assert_int_equal(ticket, 0);
    assert_memory_equal(z, y, sizeof z);
    LF_ASSERT_OK(lf_comm_wait(c, ticket));
    LF_ASSERT_OK(lf_comm_wait_all(c));
    assert_int_equal(lf_comm_reduce_scatter_start(c, x, z, 7, LF_COMM_SUM, NULL), LF_ERR_INVALID_ARG);
    /* lf_comm_times: nothing runs behind the caller here, so the busy time is
     * the exposed time, the same sums of the same host intervals */
    double busy = -1, exposed = -1;
    lf_comm_times(c, &busy, &exposed);
    assert_true(busy >= 0 && busy == exposed);
    lf_comm_times(NULL, &busy, &exposed);
    assert_true(busy == 0 && exposed == 0);
    memset(z, 0, sizeof z);
    LF_ASSERT_OK(lf_comm_all_gather(c, x, z, 7));
    assert_memory_equal(z, y, sizeof z);
    LF_ASSERT_OK(lf_comm_all_gather(c, x, x, 7));
    LF_ASSERT_OK(lf_comm_broadcast(c, x, 7, 0));
    char bytes[5] = "abcd";
    LF_ASSERT_OK(lf_comm_broadcast_bytes(c, bytes, 5, 0));
    assert_string_equal(bytes, "abcd");
    LF_ASSERT_OK(lf_comm_barrier(c));
    double d[3] = {1.5, -2, 1e300};
    LF_ASSERT_OK(lf_comm_all_reduce_f64(c, d, 3, LF_COMM_AVG));
    assert_true(d[0] == 1.5 && d[1] == -2 && d[2] == 1e300);
    int64_t l[2] = {INT64_MAX, -7};
    LF_ASSERT_OK(lf_comm_all_reduce_i64(c, l, 2, LF_COMM_SUM));
    assert_true(l[0] == INT64_MAX && l[1] == -7);
    LF_ASSERT_OK(lf_comm_all_reduce(c, NULL, 0, LF_COMM_SUM)); /* nothing to do */
    assert_int_equal(lf_comm_seq(c), 21); /* the started reduce-scatter counts as one */

    /* argument errors: refused before numbering, the handle stays usable */
    assert_int_equal(lf_comm_broadcast(c, x, 7, 1), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("root 1");
    assert_string_equal(lf_comm_errmsg(c), lf_last_error());
    assert_int_equal(lf_comm_broadcast(c, x, 7, -1), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_comm_all_reduce(c, NULL, 3, LF_COMM_SUM), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("NULL");
    assert_int_equal(lf_comm_all_reduce(c, x, 3, (lf_comm_op)9), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_comm_all_reduce_i64(c, l, 2, LF_COMM_AVG), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_comm_all_reduce_f64(c, d, LF_COMM_SCALARS_MAX + 1, LF_COMM_SUM), LF_ERR_RANGE);
    assert_int_equal(lf_comm_reduce_scatter(c, x, x + 1, 6, LF_COMM_SUM), LF_ERR_INVALID_ARG); /* overlap */
    LF_ASSERT_ERR_CONTAINS("overlaps");
    assert_int_equal(lf_comm_all_gather(c, x + 2, x, 7), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_comm_reduce_scatter(c, x, z, (size_t)1 << 31, LF_COMM_SUM), LF_ERR_RANGE);
    assert_int_equal(lf_comm_all_reduce(NULL, x, 3, LF_COMM_SUM), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_comm_seq(c), 21); /* the started reduce-scatter counts as one */
    LF_ASSERT_OK(lf_comm_barrier(c));

    lf_comm_set_context(c, "step %d", 12);
    LF_ASSERT_OK(lf_comm_abort(c, 3)); /* single: the caller exits */
    lf_comm_set_context(c, NULL);
    lf_comm_close(c);
}

/* The bf16 collectives on one rank (the host path of comm.c: widen, the
 * kind's fp32 collective, one rounding): identities that must keep every
 * bit, the argument checks of the fp32 calls, and the bf16 count named in
 * messages. */
static void test_single_bf16(void **state) {
    (void)state;
    lf_comm *c = NULL;
    LF_ASSERT_OK(lf_comm_open(&c, "single", NULL));
    enum { N = 37 };
    uint16_t a[N], b[N], keep[N];
    for (int i = 0; i < N; i++) keep[i] = (uint16_t)(0x3f80u + 977u * (unsigned)i); /* finite values, and inf/NaN bits past 0x7f80 */
    keep[5] = 0x7f80u;  /* +inf */
    keep[6] = 0xffc0u;  /* a quiet NaN: stays that NaN */
    keep[7] = 0x0001u;  /* the smallest subnormal */
    keep[8] = 0x8000u;  /* -0 */
    const lf_comm_op ops[4] = {LF_COMM_SUM, LF_COMM_AVG, LF_COMM_MAX, LF_COMM_MIN};
    for (int k = 0; k < 4; k++) {
        memcpy(a, keep, sizeof a);
        LF_ASSERT_OK(lf_comm_all_reduce_bf16(c, a, N, ops[k]));
        for (int i = 0; i < N; i++)
            if ((keep[i] & 0x7fffu) <= 0x7f80u || (keep[i] & 0x40u)) assert_int_equal(a[i], keep[i]);
        memcpy(a, keep, sizeof a);
        memset(b, 0, sizeof b);
        LF_ASSERT_OK(lf_comm_reduce_scatter_bf16(c, a, b, N, ops[k]));
        assert_int_equal(b[0], keep[0]);
        assert_int_equal(b[N - 1], keep[N - 1]);
    }
    memset(b, 0, sizeof b);
    LF_ASSERT_OK(lf_comm_all_gather_bf16(c, keep, b, N));
    assert_memory_equal(b, keep, sizeof b);
    int64_t t = -1;
    LF_ASSERT_OK(lf_comm_reduce_scatter_start_bf16(c, keep, b, N, LF_COMM_SUM, &t));
    assert_int_equal(t, 0); /* not asynchronous here: ran to completion */
    LF_ASSERT_OK(lf_comm_all_gather_start_bf16(c, keep, b, N, &t));
    assert_int_equal(t, 0);
    memcpy(a, keep, sizeof a);
    LF_ASSERT_OK(lf_comm_broadcast_bf16(c, a, N, 0));
    assert_memory_equal(a, keep, sizeof a);
    assert_int_equal(lf_comm_reduce_scatter_start_bf16(c, keep, b, N, LF_COMM_SUM, NULL), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_comm_broadcast_bf16(c, a, N, 1), LF_ERR_INVALID_ARG); /* root 1 of 1 rank */
    assert_non_null(strstr(lf_comm_errmsg(c), "lf_comm_broadcast_bf16: root 1"));
    lf_comm_close(c);

    /* the refusals: each makes the handle unusable, so one handle each */
    LF_ASSERT_OK(lf_comm_open(&c, "single", NULL));
    assert_int_equal(lf_comm_all_reduce_bf16(c, a, N, (lf_comm_op)42), LF_ERR_INVALID_ARG);
    assert_non_null(strstr(lf_comm_errmsg(c), "lf_comm_all_reduce_bf16: op 42 is not a reduction"));
    lf_comm_close(c);
    LF_ASSERT_OK(lf_comm_open(&c, "single", NULL));
    assert_int_equal(lf_comm_all_reduce_bf16(c, NULL, N, LF_COMM_SUM), LF_ERR_INVALID_ARG);
    assert_non_null(strstr(lf_comm_errmsg(c), "buffer is NULL for 37 elements"));
    lf_comm_close(c);
    LF_ASSERT_OK(lf_comm_open(&c, "single", NULL));
    assert_int_equal(lf_comm_reduce_scatter_bf16(c, a, a + 1, N, LF_COMM_SUM), LF_ERR_INVALID_ARG);
    assert_non_null(strstr(lf_comm_errmsg(c), "recv overlaps send without being send + 0"));
    lf_comm_close(c);
    LF_ASSERT_OK(lf_comm_open(&c, "single", NULL));
    assert_int_equal(lf_comm_all_gather_bf16(c, a + 3, a, N), LF_ERR_INVALID_ARG);
    assert_non_null(strstr(lf_comm_errmsg(c), "send overlaps recv without being recv + 0"));
    lf_comm_close(c);
    LF_ASSERT_OK(lf_comm_open(&c, "single", NULL));
    assert_int_equal(lf_comm_reduce_scatter_bf16(c, a, b, (size_t)1 << 31, LF_COMM_SUM), LF_ERR_RANGE);
    lf_comm_close(c);
}

static void test_partition(void **state) {
    (void)state;
    size_t off, cnt;
    const size_t want_cnt[4] = {3, 3, 2, 2}, want_off[4] = {0, 3, 6, 8};
    for (int r = 0; r < 4; r++) {
        lf_comm_partition(10, 4, r, &off, &cnt);
        assert_int_equal(cnt, want_cnt[r]);
        assert_int_equal(off, want_off[r]);
    }
    lf_comm_partition(2, 4, 3, &off, &cnt);
    assert_int_equal(cnt, 0);
    assert_int_equal(off, 2);
    lf_comm_partition(5, 4, 7, &off, &cnt); /* rank outside: empty */
    assert_int_equal(cnt, 0);
    for (size_t n = 0; n < 40; n++)
        for (int P = 1; P <= 9; P++) {
            size_t next = 0;
            for (int r = 0; r < P; r++) {
                lf_comm_partition(n, P, r, &off, &cnt);
                assert_int_equal(off, next); /* contiguous, in rank order */
                assert_true(cnt == n / (size_t)P || cnt == n / (size_t)P + 1);
                next = off + cnt;
            }
            assert_int_equal(next, n);
        }
}

/* The fold is ((r0 + r1) + r2) + r3 in float: order-sensitive values give
 * exactly the bits of that expression, AVG divides, MAX/MIN keep NaN. */
static void test_rank_order_reduce(void **state) {
    (void)state;
    float rows[4][3] = {{1e8f, 1.0f, NAN}, {1.0f, -3.0f, 2.0f}, {-1e8f, 0.5f, 1.0f}, {1.0f, 1e-3f, -1.0f}};
    float out[3];
    lf__comm_reduce_f32(out, &rows[0][0], 3, 4, 3, LF_COMM_SUM);
    float s0 = ((rows[0][0] + rows[1][0]) + rows[2][0]) + rows[3][0];
    float s1 = ((rows[0][1] + rows[1][1]) + rows[2][1]) + rows[3][1];
    assert_memory_equal(&out[0], &s0, sizeof s0);
    assert_memory_equal(&out[1], &s1, sizeof s1);
    assert_true(out[0] == 1.0f); /* 1e8 + 1 rounds away the 1 */
    lf__comm_reduce_f32(out, &rows[0][0], 3, 4, 3, LF_COMM_AVG);
    float a1 = s1 / 4.0f;
    assert_memory_equal(&out[1], &a1, sizeof a1);
    lf__comm_reduce_f32(out, &rows[0][0], 3, 4, 3, LF_COMM_MAX);
    assert_true(out[0] == 1e8f && out[1] == 1.0f && isnan(out[2]));
    lf__comm_reduce_f32(out, &rows[0][0], 3, 4, 3, LF_COMM_MIN);
    assert_true(out[0] == -1e8f && out[1] == -3.0f && isnan(out[2]));
    double dr[2][2] = {{1.0, 2.0}, {3.0, NAN}}, dout[2];
    lf__comm_reduce_f64(dout, &dr[0][0], 2, 2, 2, LF_COMM_AVG);
    assert_true(dout[0] == 2.0 && isnan(dout[1]));
    lf__comm_reduce_f64(dout, &dr[0][0], 2, 2, 2, LF_COMM_MIN);
    assert_true(dout[0] == 1.0 && isnan(dout[1]));
    int64_t ir[3][1] = {{5}, {-2}, {9}}, iout[1];
    lf__comm_reduce_i64(iout, &ir[0][0], 1, 3, 1, LF_COMM_SUM);
    assert_true(iout[0] == 12);
    lf__comm_reduce_i64(iout, &ir[0][0], 1, 3, 1, LF_COMM_MAX);
    assert_true(iout[0] == 9);
    lf__comm_reduce_i64(iout, &ir[0][0], 1, 3, 1, LF_COMM_MIN);
    assert_true(iout[0] == -2);
}

static void test_status_and_grace(void **state) {
    (void)state;
    assert_non_null(strstr(lf_status_str(LF_ERR_TIMEOUT), "LF_ERR_TIMEOUT"));
    assert_true(lf__comm_grace_s(2) == LF_COMM_GRACE_MIN_S);
    assert_true(lf__comm_grace_s(30) == 3.0);
    assert_true(lf__comm_grace_s(300) == LF_COMM_GRACE_MAX_S);
    assert_string_equal(lf__comm_coll_name(LF_COMM_COLL_REDUCE_SCATTER), "reduce_scatter");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_none),          cmocka_unit_test(test_env_openmpi),
        cmocka_unit_test(test_env_mpich),         cmocka_unit_test(test_env_slurm),
        cmocka_unit_test(test_env_torchrun),      cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_open_kinds),        cmocka_unit_test(test_single_collectives),
        cmocka_unit_test(test_single_bf16),
        cmocka_unit_test(test_partition),         cmocka_unit_test(test_rank_order_reduce),
        cmocka_unit_test(test_status_and_grace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
