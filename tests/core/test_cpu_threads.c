/*
 * The default thread count (src/core/cpu_threads.c).
 *
 * The cgroup search runs on fake trees: a temporary directory holding a
 * /proc/self/cgroup, a /proc/self/mountinfo whose cgroup2 and cgroup v1
 * "cpu" mount points lie inside the directory, and the limit files. Checked:
 * cpu.max "150000 100000" gives 2 threads (ceil), "max" none, the tightest
 * of nested limits wins whichever level holds it, a malformed file is
 * skipped and named (the cgroup counts as unlimited; nothing fails), cgroup
 * v1's cpu.cfs_quota_us (-1: none), a hybrid host (v2 mounted without the
 * cpu controller next to v1's), a mount whose root is the container's own
 * cgroup ("/docker/ID"), paths outside the mount's root, mountinfo's octal
 * escapes and optional fields, and missing /proc files. On the machine
 * itself: the count lies in [1, online], the affinity list agrees with the
 * count, narrowing this thread's mask to one CPU gives 1 thread from
 * "affinity", and --threads / OMP_NUM_THREADS take precedence as documented.
 * The real cgroup limit is tested end to end by tests/cli/threads.sh.
 */
#define _GNU_SOURCE /* sched_setaffinity */
#include <limits.h>
#include <sched.h>
#include <sys/stat.h>
#include "test_util.h"
#include "core/cpu_threads_impl.h"

typedef struct fake {
    char *dir;
    char self[600], mountinfo[600];
} fake;

static void put(const char *dir, const char *rel, const char *text) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    /* mkdir -p of the parent */
    char d[1200];
    snprintf(d, sizeof d, "%s", p);
    char *slash = strrchr(d, '/');
    *slash = 0;
    LF_ASSERT_OK(lf_mkdirs(d));
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A tree with a cgroup2 mount at DIR/cg2 and a v1 cpu mount at DIR/cpu
 * (roots v2_root and v1_root), and /proc/self/cgroup holding `self`. */
static void fake_make(fake *fk, const char *v2_root, const char *v1_root, const char *self) {
    fk->dir = lf_test_tmpdir();
    assert_non_null(fk->dir);
    char mi[4096];
    snprintf(mi, sizeof mi,
             "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw\n"
             "30 22 0:26 %s %s/cg2 rw,nosuid,nodev shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
             "31 22 0:27 / %s/cpuset rw,relatime shared:5 - cgroup cgroup rw,cpuset\n"
             "32 22 0:28 %s %s/cpu rw,relatime shared:6 - cgroup cgroup rw,cpu,cpuacct\n",
             v2_root, fk->dir, fk->dir, v1_root, fk->dir);
    put(fk->dir, "proc/mountinfo", mi);
    put(fk->dir, "proc/cgroup", self);
    snprintf(fk->self, sizeof fk->self, "%s/proc/cgroup", fk->dir);
    snprintf(fk->mountinfo, sizeof fk->mountinfo, "%s/proc/mountinfo", fk->dir);
}

static void fake_free(fake *fk) {
    lf_test_rmrf(fk->dir);
    free(fk->dir);
}

static int probe(const fake *fk, lf_cpu_threads *t) {
    memset(t, 0x5a, sizeof *t); /* every field it reports is set, whatever was there */
    return lf__cpu_cgroup_limit(fk->self, fk->mountinfo, t);
}

static void assert_ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), m = strlen(tail);
    if (n < m || strcmp(s + n - m, tail) != 0) fail_msg("'%s' does not end with '%s'", s, tail);
}

static void test_quota_threads(void **state) {
    (void)state;
    assert_int_equal(lf__cpu_quota_threads(150000, 100000), 2); /* 1.5 CPUs: 2 threads */
    assert_int_equal(lf__cpu_quota_threads(100000, 100000), 1);
    assert_int_equal(lf__cpu_quota_threads(100001, 100000), 2);
    assert_int_equal(lf__cpu_quota_threads(1000, 100000), 1); /* a hundredth of a CPU: still 1 */
    assert_int_equal(lf__cpu_quota_threads(400000, 50000), 8);
    assert_int_equal(lf__cpu_quota_threads(INT64_MAX, 1), INT_MAX);
    assert_int_equal(lf__cpu_quota_threads(0, 100000), 1);
}

static void test_v2_quota(void **state) {
    (void)state;
    fake fk;
    fake_make(&fk, "/", "/", "0::/kubepods/pod1/ctr\n");
    put(fk.dir, "cg2/kubepods/pod1/ctr/cpu.max", "150000 100000\n");
    put(fk.dir, "cg2/kubepods/pod1/cpu.max", "max 100000\n");
    put(fk.dir, "cg2/kubepods/cpu.max", "max 100000\n");
    lf_cpu_threads t;
    assert_int_equal(probe(&fk, &t), 2);
    assert_int_equal(t.quota_us, 150000);
    assert_int_equal(t.period_us, 100000);
    assert_ends_with(t.limit_file, "/cg2/kubepods/pod1/ctr/cpu.max");
    assert_string_equal(t.ignored, "");
    fake_free(&fk);
}

static void test_v2_max(void **state) {
    (void)state;
    fake fk;
    fake_make(&fk, "/", "/", "0::/a/b\n");
    put(fk.dir, "cg2/a/b/cpu.max", "max 100000\n");
    put(fk.dir, "cg2/a/cpu.max", "max 100000\n");
    lf_cpu_threads t;
    assert_int_equal(probe(&fk, &t), 0);
    assert_int_equal(t.quota_us, 0);
    assert_int_equal(t.period_us, 0);
    assert_string_equal(t.limit_file, "");
    assert_string_equal(t.ignored, "");
    fake_free(&fk);
}

/* A parent's limit binds its children: the smallest quota/period wins,
 * whether it sits at the leaf or above, compared as a ratio (periods differ). */
static void test_v2_nested(void **state) {
    (void)state;
    fake fk;
    fake_make(&fk, "/", "/", "0::/a/b/c\n");
    put(fk.dir, "cg2/a/b/c/cpu.max", "400000 100000\n");
    put(fk.dir, "cg2/a/b/cpu.max", "max 100000\n");
    put(fk.dir, "cg2/a/cpu.max", "150000 50000\n"); /* 3 CPUs */
    put(fk.dir, "cg2/cpu.max", "bogus\n");
    lf_cpu_threads t;
    assert_int_equal(probe(&fk, &t), 2);
    assert_int_equal(t.quota_us, 150000);
    assert_int_equal(t.period_us, 50000);
    assert_ends_with(t.limit_file, "/cg2/a/cpu.max");
    /* the walk reaches the mount point itself, whose file here is malformed */
    assert_ends_with(t.ignored, "/cg2/cpu.max': \"bogus\" is not 'QUOTA PERIOD' or 'max PERIOD'");
    /* the leaf tighter than its parent */
    put(fk.dir, "cg2/a/b/c/cpu.max", "50000 100000\n");
    assert_int_equal(probe(&fk, &t), 2);
    assert_int_equal(t.quota_us, 50000);
    assert_ends_with(t.limit_file, "/cg2/a/b/c/cpu.max");
    fake_free(&fk);
}

/* A malformed file is skipped (that cgroup counts as unlimited) and named;
 * the other levels still count. */
static void test_v2_malformed(void **state) {
    (void)state;
    static const char *bad[] = {"garbage\n", "", "150000\n", "0 100000\n", "-5 100000\n", "150000 0\n",
                                "150000 100000 7\n", "max\n", "max abc\n", "99999999999999999999999 100000\n",
                                "15\x01" "0000 100000\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        fake fk;
        fake_make(&fk, "/", "/", "0::/a/b\n");
        put(fk.dir, "cg2/a/b/cpu.max", bad[i]);
        lf_cpu_threads t;
        assert_int_equal(probe(&fk, &t), 0);
        assert_int_equal(t.quota_us, 0);
        if (!strstr(t.ignored, "/cg2/a/b/cpu.max': \"")) fail_msg("case %zu: ignored is '%s'", i, t.ignored);
        put(fk.dir, "cg2/a/cpu.max", "200000 100000\n");
        assert_int_equal(probe(&fk, &t), 2);
        assert_int_equal(t.quota_us, 200000);
        assert_ends_with(t.limit_file, "/cg2/a/cpu.max");
        assert_non_null(strstr(t.ignored, "/cg2/a/b/cpu.max"));
        fake_free(&fk);
    }
    /* control bytes in the content are not copied into the message */
    fake fk;
    fake_make(&fk, "/", "/", "0::/a\n");
    put(fk.dir, "cg2/a/cpu.max", "\x1b[31mred\n");
    lf_cpu_threads t;
    assert_int_equal(probe(&fk, &t), 0);
    assert_non_null(strstr(t.ignored, "\"?[31mred\""));
    fake_free(&fk);
}

static void test_v1(void **state) {
    (void)state;
    fake fk;
    fake_make(&fk, "/", "/", "12:cpuset:/\n5:cpu,cpuacct:/job/7\n0::/\n");
    put(fk.dir, "cpu/job/7/cpu.cfs_quota_us", "50000\n");
    put(fk.dir, "cpu/job/7/cpu.cfs_period_us", "100000\n");
    put(fk.dir, "cpu/job/cpu.cfs_quota_us", "-1\n");
    put(fk.dir, "cpu/job/cpu.cfs_period_us", "100000\n");
    put(fk.dir, "cpu/cpu.cfs_quota_us", "-1\n");
    put(fk.dir, "cpu/cpu.cfs_period_us", "100000\n");
    lf_cpu_threads t;
    assert_int_equal(probe(&fk, &t), 1);
    assert_int_equal(t.quota_us, 50000);
    assert_int_equal(t.period_us, 100000);
    assert_ends_with(t.limit_file, "/cpu/job/7/cpu.cfs_quota_us");
    put(fk.dir, "cpu/job/7/cpu.cfs_quota_us", "-1\n");
    assert_int_equal(probe(&fk, &t), 0);
    put(fk.dir, "cpu/job/7/cpu.cfs_quota_us", "0\n");
    assert_int_equal(probe(&fk, &t), 0);
    assert_non_null(strstr(t.ignored, "cpu.cfs_quota_us': \"0\" is not -1 or a positive"));
    put(fk.dir, "cpu/job/7/cpu.cfs_quota_us", "300000\n");
    put(fk.dir, "cpu/job/7/cpu.cfs_period_us", "none\n");
    assert_int_equal(probe(&fk, &t), 0);
    assert_non_null(strstr(t.ignored, "cpu.cfs_period_us': \"none\""));
    fake_free(&fk);
}

/* v2 mounted without the cpu controller (no cpu.max files) next to v1's cpu
 * hierarchy, as on hybrid systemd hosts; with both limiting, the tighter. */
static void test_hybrid(void **state) {
    (void)state;
    fake fk;
    fake_make(&fk, "/", "/", "4:cpu,cpuacct:/x\n0::/user.slice\n");
    put(fk.dir, "cg2/user.slice/cgroup.procs", "1\n");
    put(fk.dir, "cpu/x/cpu.cfs_quota_us", "250000\n");
    put(fk.dir, "cpu/x/cpu.cfs_period_us", "100000\n");
    lf_cpu_threads t;
    assert_int_equal(probe(&fk, &t), 1);
    assert_int_equal(t.quota_us, 250000);
    put(fk.dir, "cg2/user.slice/cpu.max", "100000 100000\n");
    assert_int_equal(probe(&fk, &t), 2);
    assert_int_equal(t.quota_us, 100000);
    put(fk.dir, "cg2/user.slice/cpu.max", "400000 100000\n");
    assert_int_equal(probe(&fk, &t), 1);
    assert_int_equal(t.quota_us, 250000);
    fake_free(&fk);
}

/* A container that mounts its own cgroup (mount root "/docker/ID") without
 * a cgroup namespace: /proc/self/cgroup shows the host's path, read below
 * the mount point; the walk stops there (the host's levels are not
 * visible). A path outside the root, or leaving the namespace, is not searched. */
static void test_mount_root(void **state) {
    (void)state;
    fake fk;
    fake_make(&fk, "/docker/abc", "/docker/abc", "0::/docker/abc\n");
    put(fk.dir, "cg2/cpu.max", "300000 100000\n");
    lf_cpu_threads t;
    assert_int_equal(probe(&fk, &t), 2);
    assert_int_equal(t.quota_us, 300000);
    assert_ends_with(t.limit_file, "/cg2/cpu.max");
    put(fk.dir, "proc/cgroup", "0::/docker/abc/sub\n");
    put(fk.dir, "cg2/sub/cpu.max", "max 100000\n");
    assert_int_equal(probe(&fk, &t), 2);
    assert_int_equal(t.quota_us, 300000);
    put(fk.dir, "proc/cgroup", "0::/docker/abcd\n"); /* a prefix of the name is not the root */
    assert_int_equal(probe(&fk, &t), 0);
    put(fk.dir, "proc/cgroup", "0::/../other\n");
    assert_int_equal(probe(&fk, &t), 0);
    put(fk.dir, "proc/cgroup", "0::relative\n");
    assert_int_equal(probe(&fk, &t), 0);
    fake_free(&fk);
}

/* proc(5) escapes a space in a mount point as \040. */
static void test_escaped_mount_point(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    assert_non_null(dir);
    char mi[1400];
    snprintf(mi, sizeof mi, "30 22 0:26 / %s/my\\040cg rw shared:4 - cgroup2 cgroup2 rw\n", dir);
    put(dir, "mountinfo", mi);
    put(dir, "cgroup", "0::/a\n");
    put(dir, "my cg/a/cpu.max", "100000 100000\n");
    char self[600], mip[600];
    snprintf(self, sizeof self, "%s/cgroup", dir);
    snprintf(mip, sizeof mip, "%s/mountinfo", dir);
    lf_cpu_threads t;
    assert_int_equal(lf__cpu_cgroup_limit(self, mip, &t), 2);
    assert_ends_with(t.limit_file, "/my cg/a/cpu.max");
    /* no /proc: no limit, and no error */
    snprintf(self, sizeof self, "%s/none", dir);
    assert_int_equal(lf__cpu_cgroup_limit(self, mip, &t), 0);
    assert_int_equal(lf__cpu_cgroup_limit(mip, self, &t), 0);
    lf_test_rmrf(dir);
    free(dir);
}

static void test_machine(void **state) {
    (void)state;
    lf_cpu_threads t;
    const int n = lf_cpu_threads_detect(&t);
    assert_int_equal(n, t.threads);
    assert_true(t.threads >= 1 && t.threads <= t.online);
    assert_true(t.affinity >= 1 && t.affinity <= t.online);
    assert_true(t.threads <= t.affinity);
    assert_true(t.source <= LF_THREADS_SOURCE_CGROUP_V1);
    int *cpus = NULL, ncpu = 0;
    LF_ASSERT_OK(lf_cpu_affinity_list(&cpus, &ncpu));
    assert_int_equal(ncpu, t.affinity);
    for (int i = 1; i < ncpu; i++) assert_true(cpus[i] > cpus[i - 1]);
    /* this thread on its first CPU only: 1 thread, from the affinity mask
     * (unless a cgroup already allows 1, or the machine has 1 CPU) */
    cpu_set_t one, saved;
    assert_int_equal(sched_getaffinity(0, sizeof saved, &saved), 0);
    CPU_ZERO(&one);
    CPU_SET(cpus[0], &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    lf_cpu_threads_detect(&t);
    assert_int_equal(sched_setaffinity(0, sizeof saved, &saved), 0);
    assert_int_equal(t.threads, 1);
    assert_int_equal(t.affinity, 1);
    if (t.online > 1 && t.quota_us == 0) assert_int_equal(t.source, LF_THREADS_SOURCE_AFFINITY);
    lf_free(cpus);
}

static void test_choose(void **state) {
    (void)state;
    lf_cpu_threads m, t;
    lf_cpu_threads_detect(&m);
    const char *saved = getenv("OMP_NUM_THREADS");
    char *keep = saved ? strdup(saved) : NULL;
    setenv("OMP_NUM_THREADS", "3,2", 1);
    assert_int_equal(lf_cpu_threads_choose(&t, 5), 5); /* --threads over the environment */
    assert_int_equal(t.source, LF_THREADS_SOURCE_REQUESTED);
    assert_int_equal(t.online, m.online);
    assert_int_equal(lf_cpu_threads_choose(&t, 0), 3);
    assert_int_equal(t.source, LF_THREADS_SOURCE_ENV);
    static const char *bad[] = {"", "0", "abc", "4x", "-2", "99999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("OMP_NUM_THREADS", bad[i], 1);
        assert_int_equal(lf_cpu_threads_choose(&t, 0), m.threads);
        assert_int_equal(t.source, m.source);
    }
    unsetenv("OMP_NUM_THREADS");
    assert_int_equal(lf_cpu_threads_choose(&t, 0), m.threads);
    if (keep) setenv("OMP_NUM_THREADS", keep, 1);
    free(keep);
    assert_string_equal(lf_threads_source_name(LF_THREADS_SOURCE_CGROUP), "cgroup cpu.max");
    assert_string_equal(lf_threads_source_name(LF_THREADS_SOURCE_AFFINITY), "affinity");
    assert_string_equal(lf_threads_source_name((lf_threads_source)99), "unknown");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quota_threads), cmocka_unit_test(test_v2_quota),
        cmocka_unit_test(test_v2_max),        cmocka_unit_test(test_v2_nested),
        cmocka_unit_test(test_v2_malformed),  cmocka_unit_test(test_v1),
        cmocka_unit_test(test_hybrid),        cmocka_unit_test(test_mount_root),
        cmocka_unit_test(test_escaped_mount_point), cmocka_unit_test(test_machine),
        cmocka_unit_test(test_choose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
