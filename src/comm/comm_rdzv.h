/*
 * TCP rendezvous of a torchrun-style launch (private to src/comm).
 *
 * torchrun's contract: every process knows RANK, WORLD_SIZE and
 * MASTER_ADDR:MASTER_PORT, and nothing else. Rank 0 listens on MASTER_PORT
 * (all interfaces), the other ranks connect to MASTER_ADDR:MASTER_PORT,
 * retrying until the timeout, and introduce themselves. The result is a
 * star: rank 0 holds one connected socket per peer, each peer one socket to
 * rank 0 — what the "tcp" communicator runs its collectives over and what the
 * "nccl" kind can use to hand out its 128-byte ncclUniqueId (open a "tcp"
 * handle, lf_comm_broadcast_bytes from rank 0).
 *
 * Handshake (every field little-endian, fixed size):
 *   hello  peer -> rank 0   magic "LFRZ", version, rank, world size, the
 *                           bits of 1.0f (byte order and float format:
 *                           collectives send floats as they are in memory),
 *                           pid, host name
 *   reply  rank 0 -> peer   magic, version, status; on success every rank's
 *                           host name (for the local rank and size), else a
 *                           message saying why the peer was refused
 * Rank 0 refuses — and fails itself, naming both values and the ranks — a
 * world size that differs from its own, a rank that is out of range or
 * arrives twice, another protocol version or float format. A connection
 * that does not speak the protocol (a port scanner, another service) is
 * dropped and the wait goes on. On timeout rank 0 names the ranks that never
 * arrived (and tells the ranks that did); a peer says it could not reach
 * MASTER_ADDR:MASTER_PORT, or that it reached rank 0 and rank 0's answer
 * never came.
 *
 * Why POSIX sockets and not a library: the job is a star of one listen and
 * P-1 connects plus two fixed-size messages. Debian's candidates (ZeroMQ,
 * nanomsg/nng, gRPC, libuv) bring their own threads or event loops, framing
 * and reconnect logic that would have to be bounded by our deadlines from
 * the outside; PMIx needs a PMIx server, which torchrun-style launches do
 * not have. The sockets here are a few hundred lines whose every wait is a
 * poll() against the caller's deadline.
 */
#ifndef LLMFORGE_COMM_RDZV_H
#define LLMFORGE_COMM_RDZV_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/core.h"

#define LF_RDZV_HOST_MAX 64 /* host names are cut to 63 bytes (for the local rank only) */
#define LF_RDZV_MAX_WORLD 65536

typedef struct lf__rdzv {
    int rank, size;
    /* fd[p]: the connected socket to rank p, non-blocking, or -1. Rank 0
     * has fd[1..size-1]; rank p > 0 has fd[0] only. */
    int *fd;
    char (*host)[LF_RDZV_HOST_MAX]; /* every rank's host name (gethostname) */
    char where[300];                /* "HOST:PORT" of rank 0, for messages */
} lf__rdzv;

/* Join the rendezvous as `rank` of `size` at addr:port (IPv4/IPv6 literal
 * or a host name, resolved with getaddrinfo; rank 0 listens on every
 * interface and ignores addr). Waits at most timeout_s, plus on a peer up
 * to lf__comm_grace_s(timeout_s) more for rank 0's account of who is
 * missing. size 1 returns at once without a socket. Returns LF_OK;
 * LF_ERR_TIMEOUT (ranks missing; rank 0 unreachable); LF_ERR_MISMATCH
 * (world size, rank, protocol or float format refused — on rank 0 and on
 * the refused peer); LF_ERR_IO (cannot listen, e.g. the port is taken; a
 * connection lost during the handshake); LF_ERR_RANGE (size above
 * LF_RDZV_MAX_WORLD); LF_ERR_NOMEM. Messages name MASTER_ADDR:MASTER_PORT
 * and the ranks. */
lf_status lf__rdzv_join(lf__rdzv **out, const char *addr, int port, int rank, int size, double timeout_s);

/* Close every socket and free; NULL is a no-op. */
void lf__rdzv_close(lf__rdzv *r);

/* Little-endian encoding of the wire formats (rendezvous and tcp frames). */
static inline void lf__put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void lf__put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t lf__get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t lf__get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Milliseconds poll() may wait until `deadline` (lf__comm_now_s clock),
 * rounded up, at most cap_ms; 0 once it passed. */
int lf__poll_ms(double deadline, int cap_ms);

#endif
