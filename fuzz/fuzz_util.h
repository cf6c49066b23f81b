/*
 * Helpers shared by the fuzz harnesses (fuzz code only, never linked into
 * the library).
 *
 * The parsers under test take paths, so each input is written to a file
 * first. fuzz_memfile() keeps one anonymous in-memory file per process
 * (memfd_create; an unlinked mkstemp file under $TMPDIR or /tmp where memfd
 * is unavailable), rewrites it for every input and hands out its
 * /proc/self/fd/N path: nothing touches the disk, nothing is left behind,
 * and parallel fuzzing jobs never share a file.
 *
 * fuzz_note() prints what a parser said about an input when the environment
 * variable LF_FUZZ_VERBOSE is set (replay a corpus file with it to see why
 * the file is accepted or refused); otherwise it costs one cached getenv.
 *
 * FUZZ_CHECK(cond) is a harness invariant: when it fails the process traps,
 * which libFuzzer reports as a crash and the replay test as a failure.
 * Library code never does this; only the harnesses do.
 */
#ifndef LF_FUZZ_UTIL_H
#define LF_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "llmforge/core.h"

#define FUZZ_CHECK(cond)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            __builtin_trap();                                                                 \
        }                                                                                     \
    } while (0)

static inline void fuzz_note(const char *what, lf_status s) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("LF_FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "  %s: %s%s%s\n", what, lf_status_str(s), s != LF_OK ? ": " : "",
                s != LF_OK ? lf_last_error() : "");
}

/* Write all of buf to fd at offset 0 and cut the file there. 0 on success. */
static inline int fuzz_rewrite_fd(int fd, const void *buf, size_t len) {
    if (ftruncate(fd, 0) != 0) return -1;
    const unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t w = pwrite(fd, p + done, len - done, (off_t)done);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

static inline int fuzz_anon_fd(void) {
    int fd = -1;
#if defined(MFD_CLOEXEC)
    fd = memfd_create("lf_fuzz", MFD_CLOEXEC);
#endif
    if (fd < 0) {
        const char *base = getenv("TMPDIR");
        char tmpl[512];
        snprintf(tmpl, sizeof tmpl, "%s/lf_fuzz.XXXXXX", base && *base ? base : "/tmp");
        fd = mkstemp(tmpl);
        if (fd >= 0) unlink(tmpl); /* the open fd keeps it; /proc/self/fd/N still opens it */
    }
    return fd;
}

/* Path of a per-process file holding exactly data[0, size). The file is
 * rewritten by the next call. Aborts when no file can be made (a broken
 * environment, not a finding). */
static inline const char *fuzz_memfile(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = fuzz_anon_fd();
        if (fd < 0) {
            perror("fuzz_memfile: cannot create a temporary file");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (fuzz_rewrite_fd(fd, data, size) != 0) {
        perror("fuzz_memfile: cannot write the temporary file");
        abort();
    }
    return path;
}

/* Read every byte of p[0, n) so an out-of-bounds pointer faults here. */
static inline void fuzz_touch(const void *p, size_t n) {
    const volatile unsigned char *b = p; /* volatile reads are never optimised away */
    for (size_t i = 0; i < n; i++) (void)b[i];
}
#endif
