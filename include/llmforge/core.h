/*
 * llmforge core: status codes, error messages, logging, counter-based RNG,
 * aligned allocation and arenas.
 *
 * Error model (curl/SQLite style): every fallible library function returns an
 * lf_status; LF_OK is 0 and every error is negative. The function that fails
 * also records a human-readable message naming the object and the fact
 * ("shard 'x.bin': header says 1000 tokens, file holds 768"), readable with
 * lf_last_error() from the same thread until the next failing call. Handles
 * that live longer (trainer, model) keep their own copy. Library code never
 * prints to stdout and never exits; tools/ talk to the person.
 */
#ifndef LLMFORGE_CORE_H
#define LLMFORGE_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes are part of the API: never renumbered. */
typedef enum lf_status {
    LF_OK = 0,
    LF_ERR_INVALID_ARG = -1, /* a caller passed a bad argument */
    LF_ERR_NOMEM = -2,       /* an allocation failed */
    LF_ERR_IO = -3,          /* open/read/write/rename/fsync failed */
    LF_ERR_FORMAT = -4,      /* a file is malformed (bad magic, truncated, bad JSON) */
    LF_ERR_CHECKSUM = -5,    /* a payload does not match its recorded checksum */
    LF_ERR_CONFIG = -6,      /* unknown key or bad value in a configuration */
    LF_ERR_MISMATCH = -7,    /* shapes/names/sizes disagree (e.g. checkpoint vs model) */
    LF_ERR_UNSUPPORTED = -8, /* a feature the backend or format does not support */
    LF_ERR_RANGE = -9,       /* a value is out of its allowed range */
    LF_ERR_NOT_FOUND = -10,  /* a named file, key or tensor does not exist */
    LF_ERR_NUMERIC = -11,    /* non-finite loss or gradient */
    LF_ERR_INTERNAL = -12,   /* a broken invariant inside llmforge (a bug) */
    LF_ERR_TIMEOUT = -13,    /* a peer did not arrive at a collective within its deadline */
    LF_ERR_DEVICE = -14,     /* the backend (a device, a kernel library) failed an operation */
    LF_ERR_BUSY = -15,       /* at capacity (a full queue, shutting down): retry later */
    LF_ERR_PREEMPTED = -16,  /* stopped on request (a signal) after saving its state: resume it */
} lf_status;

/* The CPU baseline this build assumes (its -march: "x86-64-v3" by default,
 * "native" with LF_NATIVE, LF_ARCH's value otherwise; "default" off x86),
 * checked against the running CPU: LF_OK, or LF_ERR_UNSUPPORTED with msg
 * (the caller's buffer; cap 256 is ample) naming the baseline and the
 * features this CPU lacks. A program built with the baseline's flags may
 * die with SIGILL before its first line on a CPU below it, so this check
 * must run first: it is compiled for plain x86-64, touches nothing else of
 * llmforge and records nothing (not lf_last_error). The llmforge CLI runs
 * it before main; a program of one's own calls it first thing from code
 * compiled without the baseline's flags. Thread-safe. */
lf_status lf_cpu_baseline_check(char *msg, size_t cap);
const char *lf_cpu_baseline_name(void);

/* Short fixed name of a status ("LF_ERR_IO: input/output error"). Never NULL. */
const char *lf_status_str(lf_status s);

/* The message recorded by the last failing call on this thread ("" if none).
 * The pointer stays valid until the next failing call on this thread. */
const char *lf_last_error(void);

/* Record a message for the current thread and return `s` (for `return lf_fail(...)`).
 * printf-style; the message is truncated at 1023 bytes. Messages (these,
 * lf_error_prefix's and lf_log's) are made valid UTF-8 with lf_str_escape, so
 * a name read from a corrupt file never puts raw bytes into one. */
lf_status lf_fail(lf_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prefix the current thread's message with "prefix: " (adds context on the way up). */
void lf_error_prefix(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* s (len bytes; lf_str_escape: up to its NUL) as valid, printable UTF-8:
 * valid characters are copied, every byte that is not part of a valid UTF-8
 * sequence (RFC 3629: no overlongs, surrogates or code points above
 * U+10FFFF) and every control character (C0, DEL, C1) becomes the four
 * characters \xNN (lowercase hex of the byte). Never splits a character;
 * stops early rather than overflow. Writes at most cap bytes including the
 * NUL (nothing when cap is 0); returns the length written. Thread-safe. */
size_t lf_str_escape_n(char *out, size_t cap, const char *s, size_t len);
size_t lf_str_escape(char *out, size_t cap, const char *s);

/* Check that s[0..len) is well-formed UTF-8 (RFC 3629: no overlong forms,
 * surrogates, code points above U+10FFFF, truncated sequences or stray
 * continuation bytes). On failure returns LF_ERR_FORMAT, records "WHAT:
 * invalid UTF-8 at byte N (reason)" and, when bad_offset != NULL, stores N
 * there. `what` names the text in the message (may be NULL: "text").
 * Thread-safe. */
lf_status lf_utf8_validate(const char *s, size_t len, const char *what, size_t *bad_offset);

/* ---------------------------------------------------------------- logging */
typedef enum lf_log_level {
    LF_LOG_DEBUG = 0,
    LF_LOG_INFO = 1,
    LF_LOG_WARN = 2,
    LF_LOG_ERROR = 3,
} lf_log_level;

typedef void (*lf_log_fn)(lf_log_level level, const char *msg, void *user);

/* Install the log sink (NULL: messages are dropped). Not thread-safe against
 * concurrent lf_log calls; set it once at start-up. */
void lf_log_set_callback(lf_log_fn fn, void *user);
void lf_log_set_level(lf_log_level min_level);
void lf_log(lf_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---------------------------------------------------------------- RNG
 * Counter-based generator (Philox4x32-10, Salmon et al., SC'11): the value is
 * a pure function of (seed, purpose, index), so any element of any random
 * stream can be regenerated without state — dropout masks are recomputed in
 * backward, data order survives resume, and the number of processes never
 * changes a stream. */
typedef enum lf_rng_purpose {
    LF_RNG_INIT = 1,    /* parameter initialisation */
    LF_RNG_DATA = 2,    /* training batch positions */
    LF_RNG_EVAL = 3,    /* evaluation batch positions */
    LF_RNG_DROPOUT = 4, /* dropout masks */
    LF_RNG_SAMPLE = 5,  /* token sampling at generation */
    LF_RNG_BENCH = 6,   /* synthetic benchmark data */
    LF_RNG_TEST = 7,    /* tests */
} lf_rng_purpose;

/* Four 32-bit random words for counter (index, sub). */
void lf_philox4x32(uint64_t seed, uint32_t purpose, uint64_t index, uint32_t sub, uint32_t out[4]);
/* 64 random bits for (seed, purpose, index). */
uint64_t lf_rng_u64(uint64_t seed, uint32_t purpose, uint64_t index);
/* Uniform float in [0,1) with 24 random bits. */
float lf_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t index);
/* Standard normal (Box-Muller over one counter). */
float lf_rng_normal(uint64_t seed, uint32_t purpose, uint64_t index);
/* Combine several small numbers into one stream index (e.g. step, layer). */
static inline uint64_t lf_rng_mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---------------------------------------------------------------- memory */
#define LF_ALIGN 64

/* Bytes of the fixed path buffers of configurations and checkpoints
 * (out_dir, data.dataset, tokenizer specs, checkpoint directories). */
#define LF_PATH_MAX 1024

/* 64-byte aligned allocation; NULL on failure (and lf_fail NOMEM recorded). */
void *lf_alloc(size_t bytes);
/* Test hook: the next n lf_alloc calls succeed and the one after fails with
 * LF_ERR_NOMEM (once); n < 0 turns the hook off. Process-wide. */
void lf_alloc_fail_after(long n);
/* Test hook, the same for the file system: llmforge's durable writers
 * (checkpoints, safetensors files, lf_file_write_all, lf_fsync_dir,
 * lf_mkdirs) count each open for writing, write, ftruncate, fsync, close,
 * rename and mkdir; the next n succeed and the one after fails with errno
 * err (EIO when err <= 0) as the real call would, once; n < 0 turns the hook
 * off. lf_io_op_count: operations counted since the process started (run a
 * save once to learn how many it makes, then fail each k < that count).
 * Process-wide. */
void lf_io_fail_after(long n, int err);
/* The same, but every operation from the (n+1)-th on fails, as on a disk
 * that stays full, until lf_io_fail_after(-1, 0) turns the hook off. */
void lf_io_fail_all_after(long n, int err);
long lf_io_op_count(void);
void *lf_calloc(size_t bytes);
void lf_free(void *p);
/* Bytes the allocator reserved for a block from lf_alloc (its own count,
 * malloc_usable_size: at least what was asked); 0 for NULL. */
size_t lf_alloc_usable(const void *p);

/* Bump arena over one aligned block: everything a training step needs is
 * planned, reserved once, and released together. */
typedef struct lf_arena lf_arena;
lf_status lf_arena_create(lf_arena **out, size_t capacity);
/* 64-byte aligned slice; NULL when the arena is exhausted (message recorded). */
void *lf_arena_push(lf_arena *a, size_t bytes);
size_t lf_arena_used(const lf_arena *a);
size_t lf_arena_capacity(const lf_arena *a);
void lf_arena_reset(lf_arena *a);
void lf_arena_free(lf_arena *a);
/* Bytes lf_arena_push(bytes) consumes (for planning). */
static inline size_t lf_arena_round(size_t bytes) { return (bytes + (LF_ALIGN - 1)) & ~(size_t)(LF_ALIGN - 1); }

/* ---------------------------------------------------------------- files and hashing */
/* Read a whole file (cap: max_bytes, 0 = no cap). *out is NUL-terminated, free with lf_free. */
lf_status lf_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len);
/* Write a file and fsync it. */
lf_status lf_file_write_all(const char *path, const void *data, size_t len);
/* fsync a directory (so a rename inside it is durable). */
lf_status lf_fsync_dir(const char *path);
/* mkdir -p */
lf_status lf_mkdirs(const char *path);
/* rm -r without following symlinks (depth-limited to 16 levels): name
 * relative to the directory fd dfd (AT_FDCWD: the working directory); a
 * missing name is success. Best effort: 0, or -1 with errno (what is left
 * stays). Records no error message (the caller names the path). */
int lf_remove_tree_at(int dfd, const char *name, int depth);
int lf_remove_tree(const char *path);

/* SHA-256 of a buffer / of a file, as 64 lowercase hex chars + NUL. */
void lf_sha256_hex(const void *data, size_t len, char hex[65]);
lf_status lf_sha256_file_hex(const char *path, char hex[65]);
/* CRC-32 (zlib polynomial) — the shard payload checksum. */
uint32_t lf_crc32(uint32_t crc, const void *data, size_t len);

/* Monotonic wall clock in seconds. */
double lf_time_now(void);

/* ---------------------------------------------------------------- CPUs this process may use */
/* How many compute threads to run by default: the CPUs the machine or
 * container actually grants, not the host's online count. A job given a CPU
 * set (taskset, Slurm, a cpuset cgroup) sees it in its affinity mask; a
 * container under a CPU bandwidth limit (Kubernetes' CPU limit: cgroup v2
 * cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us) does not, and one
 * thread per host core there is throttled every period. The count is
 * min(affinity CPUs, ceil(quota / period)) over the process's cgroup and
 * every ancestor up to the cgroup mount (the tightest limit wins), at least
 * 1; ceil as Go 1.25's GOMAXPROCS, .NET's ProcessorCount and the JDK do: a
 * quota of 1.5 CPUs runs 2 threads, which together get the whole 1.5 (the
 * whole group is throttled at once, so fork/join regions lose nothing to a
 * straggler), where 1 thread would leave a third of it unused. src/core/cpu_threads.c. */
typedef enum lf_threads_source {
    LF_THREADS_SOURCE_ONLINE = 0,    /* "online CPUs": sysconf(_SC_NPROCESSORS_ONLN), nothing tighter */
    LF_THREADS_SOURCE_AFFINITY = 1,  /* "affinity": the CPUs in the affinity mask (fewer than online) */
    LF_THREADS_SOURCE_CGROUP = 2,    /* "cgroup cpu.max": a cgroup v2 bandwidth limit */
    LF_THREADS_SOURCE_CGROUP_V1 = 3, /* "cgroup cpu.cfs_quota_us": a cgroup v1 bandwidth limit */
    LF_THREADS_SOURCE_ENV = 4,       /* "OMP_NUM_THREADS": its first value */
    LF_THREADS_SOURCE_REQUESTED = 5, /* "requested": the caller's count (the CLI's --threads) */
} lf_threads_source;

/* Short fixed name of a source (above); never NULL. */
const char *lf_threads_source_name(lf_threads_source s);

#define LF_CPU_PATH_MAX 512
typedef struct lf_cpu_threads {
    int threads;                      /* the count to run, >= 1 */
    lf_threads_source source;         /* what decided it */
    int online;                       /* sysconf(_SC_NPROCESSORS_ONLN), >= 1 */
    int affinity;                     /* CPUs in the calling thread's affinity mask; 0 when unknown */
    int64_t quota_us;                 /* the tightest cgroup limit: quota_us per period_us, */
    int64_t period_us;                /* both 0 when no cgroup limits the CPU */
    char limit_file[LF_CPU_PATH_MAX]; /* the file that holds that limit ("" when none) */
    /* A limit file that was skipped because its content is not what the
     * kernel writes (then that cgroup counts as unlimited): "'FILE': why";
     * "" when none was. */
    char ignored[LF_CPU_PATH_MAX + 96];
} lf_cpu_threads;

/* What the machine grants (affinity mask, cgroup limits, online CPUs) into
 * *out; returns out->threads. Never fails: what cannot be read (no /proc, no
 * cgroup mount) counts as no limit. Reads /proc/self/cgroup,
 * /proc/self/mountinfo and the limit files on every call; thread-safe. */
int lf_cpu_threads_detect(lf_cpu_threads *out);
/* The same, then the choice a compute command makes: `requested` > 0 wins
 * (source REQUESTED), else OMP_NUM_THREADS when its first value is an
 * integer in [1, 4096] (ENV; OpenMP itself reads it), else the machine's.
 * Returns out->threads. */
int lf_cpu_threads_choose(lf_cpu_threads *out, int requested);
/* The CPU numbers in the calling thread's affinity mask, ascending, into
 * *cpus (lf_alloc'd; free with lf_free) and their count into *n. Masks of
 * any size (CPU_ALLOC; machines past 1024 CPUs). LF_ERR_IO when
 * sched_getaffinity fails, LF_ERR_NOMEM; *cpus is NULL then. */
lf_status lf_cpu_affinity_list(int **cpus, int *n);

/* ---------------------------------------------------------------- JSON numbers */
/* Every JSON number llmforge writes reads back (strtod) as the double it
 * wrote. lf_json_number writes v into buf with the fewest significant digits
 * that do so (at most 17; "0.1", "0.30000000000000004"), or "null" when v is
 * not finite (JSON has neither NaN nor infinity). cap >= LF_JSON_NUMBER_MAX
 * always suffices. Returns the length written. Thread-safe; assumes the "C"
 * numeric locale (a decimal point), as the whole library does. */
#define LF_JSON_NUMBER_MAX 32
int lf_json_number(char *buf, size_t cap, double v);
/* cJSON_Print (formatted != 0) or cJSON_PrintUnformatted of item, with every
 * number written by lf_json_number: cJSON 1.7 keeps 15 significant digits
 * whenever they read back within an ulp or two, so its own output does not
 * always read back as the same double. item is not changed. The string comes
 * from cJSON's allocator (free it with cJSON_free); NULL when out of memory.
 * Thread-safe for distinct items. */
struct cJSON;
char *lf_json_print(const struct cJSON *item, int formatted);
/* The byte offset of the first escape \u0000 in the raw JSON text s[0, len)
 * (of its backslash), len when it has none. A backslash escapes the next
 * character, so "\\u0000" is a backslash, then text. Why callers look:
 * cJSON turns \u0000 into a NUL that cuts the string short. Thread-safe. */
size_t lf_json_find_nul_escape(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
