/*
 * The file-system calls of llmforge's durable writers (checkpoints,
 * safetensors files, lf_file_write_all, lf_fsync_dir, lf_mkdirs), routed
 * through one counter so a test can fail the k-th of them (lf_io_fail_after
 * in core.h) and prove that a save interrupted at any point leaves the
 * previous state intact.
 *
 * Each wrapper behaves as the system call it names (same arguments, return
 * value and errno). When the hook fires, the call is not made and -1 is
 * returned with the injected errno, except lf__io_close, which still closes
 * the descriptor (a failed close must not leak it) and then reports the
 * failure. Every call, made or failed, counts once (lf_io_op_count).
 */
#ifndef LF_CORE_IO_IMPL_H
#define LF_CORE_IO_IMPL_H

#include <sys/types.h>

int lf__io_open(const char *path, int flags, mode_t mode); /* counted only with O_WRONLY/O_RDWR/O_CREAT */
ssize_t lf__io_write(int fd, const void *buf, size_t len);
ssize_t lf__io_pwrite(int fd, const void *buf, size_t len, off_t off);
int lf__io_ftruncate(int fd, off_t len);
int lf__io_fsync(int fd);
int lf__io_close(int fd);
int lf__io_rename(const char *from, const char *to);
int lf__io_mkdir(const char *path, mode_t mode);
/* renameat2(AT_FDCWD, from, AT_FDCWD, to, flags) where the kernel has it;
 * -1 with ENOSYS where the C library does not. */
int lf__io_renameat2(const char *from, const char *to, unsigned flags);

#endif
