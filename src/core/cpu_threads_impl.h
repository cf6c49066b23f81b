/* Internal to src/core/cpu_threads.c and its tests: the cgroup search with
 * the two /proc files it starts from given as paths, so a test can point it
 * at a fake tree (a mountinfo whose mount points lie in a temporary
 * directory) instead of the machine's. */
#ifndef LF_CORE_CPU_THREADS_IMPL_H
#define LF_CORE_CPU_THREADS_IMPL_H
#include "llmforge/core.h"

/* The tightest CPU bandwidth limit on the cgroup named in `self_cgroup` (the
 * format of /proc/self/cgroup) and its ancestors, found through the cgroup2
 * mount and the cgroup v1 mount holding the "cpu" controller listed in
 * `mountinfo` (the format of /proc/self/mountinfo): fills out->quota_us,
 * period_us, limit_file and ignored (all cleared first), and returns 2 (v2
 * cpu.max), 1 (v1 cpu.cfs_quota_us) or 0 (no limit). Unreadable files count
 * as no limit. */
int lf__cpu_cgroup_limit(const char *self_cgroup, const char *mountinfo, lf_cpu_threads *out);

/* ceil(quota / period) as a thread count, in [1, INT_MAX]. */
int lf__cpu_quota_threads(int64_t quota_us, int64_t period_us);
#endif
