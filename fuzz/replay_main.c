/*
 * Corpus replay driver: a main() for the fuzz harnesses when they are built
 * without libFuzzer (any compiler, e.g. the default gcc build), so the
 * committed corpus runs as an ordinary CTest test.
 *
 *   replay_<name> PATH...
 *
 * Each PATH is a file (run once) or a directory (every regular file in it,
 * in sorted name order, not recursing; names starting with '.' and README*
 * are skipped). Each input is read into a buffer of exactly its size, so a
 * sanitizer build catches reads past the end, and passed to
 * LLVMFuzzerTestOneInput. A harness invariant that fails traps, so the
 * process dies and the test fails; the name of the input being run is
 * printed first, so the log says which file did it.
 *
 * Exit status: 0 when every input ran; 1 when a path cannot be read or the
 * paths hold no input at all (a missing corpus must not pass silently).
 *
 * LF_FUZZ_REPLAY_ALARM_US=N (N > 0) delivers a SIGALRM every N microseconds
 * to a handler that does nothing, installed without SA_RESTART, as
 * libFuzzer's -timeout check does (once every timeout/2 + 1 seconds): a
 * harness that waits on a socket or a timer must retry what an EINTR
 * interrupts instead of taking it for a timeout or a close
 * (fuzz.replay_http_eintr runs the http corpus this way).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open '%s': %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "replay: '%s' is not a regular file\n", path);
        fclose(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading '%s' (%zu bytes)\n", path, size);
        fclose(f);
        return -1;
    }
    size_t got = fread(buf, 1, size, f);
    fclose(f);
    if (got != size) {
        fprintf(stderr, "replay: short read on '%s': %zu of %zu bytes\n", path, got, size);
        free(buf);
        return -1;
    }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    return 0;
}

static int skip_name(const char *name) { return name[0] == '.' || strncmp(name, "README", 6) == 0; }

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs every file of dir; adds the count to *n. -1 on an unreadable entry. */
static int run_dir(const char *dir, size_t *n) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open directory '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t count = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (skip_name(e->d_name)) continue;
        size_t len = strlen(dir) + 1 + strlen(e->d_name) + 1;
        char *p = malloc(len);
        if (!p) {
            rc = -1;
            break;
        }
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) { /* subdirectories are not corpus entries */
            free(p);
            continue;
        }
        if (count == cap) {
            cap = cap ? 2 * cap : 64;
            char **q = realloc(names, cap * sizeof *q);
            if (!q) {
                free(p);
                rc = -1;
                break;
            }
            names = q;
        }
        names[count++] = p;
    }
    closedir(d);
    if (rc == 0) {
        qsort(names, count, sizeof *names, cmp_str);
        for (size_t i = 0; i < count && rc == 0; i++) {
            rc = run_file(names[i]);
            if (rc == 0) (*n)++;
        }
    } else {
        fprintf(stderr, "replay: out of memory listing '%s'\n", dir);
    }
    for (size_t i = 0; i < count; i++) free(names[i]);
    free(names);
    return rc;
}

static void on_alarm(int sig) { (void)sig; }

/* LF_FUZZ_REPLAY_ALARM_US: 0 when unset, -1 when not a number in 1..10^7. */
static int start_alarms(void) {
    const char *v = getenv("LF_FUZZ_REPLAY_ALARM_US");
    if (!v || !*v) return 0;
    char *end = NULL;
    errno = 0;
    long us = strtol(v, &end, 10);
    if (errno || *end || us < 1 || us > 10000000) {
        fprintf(stderr, "replay: LF_FUZZ_REPLAY_ALARM_US='%s' is not a number of microseconds in 1..10000000\n", v);
        return -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: interrupted calls fail with EINTR */
    sigemptyset(&sa.sa_mask);
    struct itimerval it = {{us / 1000000, us % 1000000}, {us / 1000000, us % 1000000}};
    if (sigaction(SIGALRM, &sa, NULL) != 0 || setitimer(ITIMER_REAL, &it, NULL) != 0) {
        fprintf(stderr, "replay: cannot start the SIGALRM timer: %s\n", strerror(errno));
        return -1;
    }
    fprintf(stderr, "replay: a SIGALRM every %ld us\n", us);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    if (start_alarms() != 0) return 1;
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: '%s': %s\n", argv[i], strerror(errno));
            return 1;
        }
        int rc = S_ISDIR(st.st_mode) ? run_dir(argv[i], &n) : run_file(argv[i]);
        if (rc == 0 && !S_ISDIR(st.st_mode)) n++;
        if (rc != 0) return 1;
    }
    if (n == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    printf("replay: %zu inputs ran without a crash\n", n);
    return 0;
}
