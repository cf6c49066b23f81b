/*
 * Write-fault injection for the durable writers (io_impl.h): one process-wide
 * countdown, like lf_alloc_fail_after's, and a count of every operation made,
 * so a test can first count the operations of a save and then fail each of
 * them in turn ("fault injection is ordinary testing", STYLE.md, after
 * SQLite's I/O error tests).
 *
 * Invariants: with the hook off (the default) every wrapper is the system
 * call plus one relaxed atomic increment; the hook fires once and turns
 * itself off; the injected errno is what the caller sees, so its message is
 * the one a real ENOSPC or EIO would produce.
 */
#define _GNU_SOURCE /* renameat2 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/io_impl.h"
#include "llmforge/core.h"

static _Atomic long g_countdown = -1; /* operations left before the failure; -1 = off */
static _Atomic int g_errno = EIO;
static _Atomic long g_ops;
static _Atomic int g_sticky; /* lf_io_fail_all_after: the failure repeats */

void lf_io_fail_after(long n, int err) {
    atomic_store(&g_errno, err > 0 ? err : EIO);
    atomic_store(&g_sticky, 0);
    atomic_store(&g_countdown, n < 0 ? -1 : n);
}

void lf_io_fail_all_after(long n, int err) {
    atomic_store(&g_errno, err > 0 ? err : EIO);
    atomic_store(&g_sticky, 1);
    atomic_store(&g_countdown, n < 0 ? -1 : n);
}

long lf_io_op_count(void) { return atomic_load_explicit(&g_ops, memory_order_relaxed); }

/* Counts one operation; 1 when this one is to fail (errno set). */
static int inject(void) {
    atomic_fetch_add_explicit(&g_ops, 1, memory_order_relaxed);
    if (atomic_load(&g_countdown) < 0) return 0;
    if (atomic_load(&g_sticky)) {
        /* counts down to 0 and stays there: every later operation fails */
        long c = atomic_load(&g_countdown);
        while (c > 0 && !atomic_compare_exchange_weak(&g_countdown, &c, c - 1)) {
        }
        if (c > 0) return 0;
    } else if (atomic_fetch_sub(&g_countdown, 1) != 0) {
        return 0;
    }
    errno = atomic_load(&g_errno);
    return 1;
}

int lf__io_open(const char *path, int flags, mode_t mode) {
    if ((flags & (O_WRONLY | O_RDWR | O_CREAT)) && inject()) return -1;
    return open(path, flags, mode);
}

ssize_t lf__io_write(int fd, const void *buf, size_t len) { return inject() ? -1 : write(fd, buf, len); }

ssize_t lf__io_pwrite(int fd, const void *buf, size_t len, off_t off) {
    return inject() ? -1 : pwrite(fd, buf, len, off);
}

int lf__io_ftruncate(int fd, off_t len) { return inject() ? -1 : ftruncate(fd, len); }

int lf__io_fsync(int fd) { return inject() ? -1 : fsync(fd); }

int lf__io_close(int fd) {
    if (inject()) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return close(fd);
}

int lf__io_rename(const char *from, const char *to) { return inject() ? -1 : rename(from, to); }

int lf__io_mkdir(const char *path, mode_t mode) { return inject() ? -1 : mkdir(path, mode); }

int lf__io_renameat2(const char *from, const char *to, unsigned flags) {
    if (inject()) return -1;
#ifdef RENAME_EXCHANGE
    return renameat2(AT_FDCWD, from, AT_FDCWD, to, flags);
#else
    (void)from;
    (void)to;
    (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}
