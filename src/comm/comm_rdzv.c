/*
 * TCP rendezvous at MASTER_ADDR:MASTER_PORT: rank 0 listens, the other
 * ranks connect and introduce themselves; the result is the star of sockets
 * the "tcp" communicator runs on. Protocol, checks and the reason for plain
 * POSIX sockets: comm_rdzv.h.
 *
 * Invariants:
 *  - Every wait is a poll() bounded by the deadline (timeout_s from the
 *    start; peers add one grace period to hear rank 0's account of a
 *    timeout). Sockets are non-blocking from creation; writes use
 *    MSG_NOSIGNAL so a vanished peer is an error status, never SIGPIPE.
 *  - Rank 0 fails on anything that says the launch is inconsistent (two
 *    ranks with one number, world sizes that differ) instead of waiting for
 *    a "right" peer: the job cannot be run as started. It tells every peer
 *    that joined why, so all of them report it, not just rank 0.
 *  - A connection that is not an llmforge rank (wrong magic, or it closes
 *    before its hello) is dropped; the wait goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "comm/comm_rdzv.h"

#define RZ_MAGIC 0x5A52464Cu /* "LFRZ" little-endian */
#define RZ_VERSION 1u
#define RZ_HELLO 96 /* magic, version, rank, size, 1.0f, pid (6 x 4) + host (64) + pad */
#define RZ_REPLY 16 /* magic, version, status, payload bytes */
#define RZ_MSG_MAX 1024
#define RZ_PENDING_MAX 64 /* connections accepted but not yet introduced, at once */

int lf__poll_ms(double deadline, int cap_ms) {
    double left = deadline - lf__comm_now_s();
    if (left <= 0) return 0;
    double ms = left * 1e3 + 0.999;
    return ms >= (double)cap_ms ? cap_ms : (int)ms;
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void tune(int fd) {
    int one = 1; /* small frames (headers, scalars) must not wait for Nagle */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

/* Write all of buf before the deadline. 0, or -1 with errno (ETIMEDOUT). */
static int write_full(int fd, const void *buf, size_t len, double deadline) {
    const char *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w > 0) {
            p += w, len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        struct pollfd pf = {fd, POLLOUT, 0};
        int ms = lf__poll_ms(deadline, 1000);
        if (ms == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (poll(&pf, 1, ms) < 0 && errno != EINTR) return -1;
    }
    return 0;
}

/* Read exactly len bytes before the deadline. 0; -1 with errno; EOF is -1
 * with errno = EPIPE. */
static int read_full(int fd, void *buf, size_t len, double deadline) {
    char *p = buf;
    while (len) {
        ssize_t r = recv(fd, p, len, 0);
        if (r > 0) {
            p += r, len -= (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = EPIPE;
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        struct pollfd pf = {fd, POLLIN, 0};
        int ms = lf__poll_ms(deadline, 1000);
        if (ms == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (poll(&pf, 1, ms) < 0 && errno != EINTR) return -1;
    }
    return 0;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* "2, 3, 5-9" of the ranks p in [1, size) with !have[p], at most cap bytes. */
static int list_missing(const int *fd, int size, char *out, size_t cap) {
    out[0] = '\0';
    int n = 0;
    size_t at = 0;
    for (int p = 1; p < size; p++) {
        if (fd[p] >= 0) continue;
        int q = p;
        while (q + 1 < size && fd[q + 1] < 0) q++;
        n += q - p + 1;
        if (at + 32 < cap) {
            int w = q == p ? snprintf(out + at, cap - at, "%s%d", at ? ", " : "", p)
                           : snprintf(out + at, cap - at, "%s%d-%d", at ? ", " : "", p, q);
            if (w > 0) at += (size_t)w;
        } else if (at + 5 < cap && strcmp(out + at - 3, "...") != 0) {
            snprintf(out + at, cap - at, ", ...");
            at += strlen(out + at);
        }
        p = q;
    }
    return n;
}

/* ---------------------------------------------------------------- rank 0 */
static void put_reply(unsigned char *b, lf_status st, uint32_t len) {
    lf__put_u32(b, RZ_MAGIC);
    lf__put_u32(b + 4, RZ_VERSION);
    lf__put_u32(b + 8, (uint32_t)(int32_t)st);
    lf__put_u32(b + 12, len);
}

/* Tell a peer why it is refused (best effort, at most `wait` seconds). */
static void refuse_peer(int fd, lf_status st, const char *msg, double wait) {
    unsigned char h[RZ_REPLY];
    size_t len = strlen(msg);
    if (len > RZ_MSG_MAX) len = RZ_MSG_MAX;
    put_reply(h, st, (uint32_t)len);
    double dl = lf__comm_now_s() + wait;
    if (write_full(fd, h, sizeof h, dl) == 0) write_full(fd, msg, len, dl);
}

typedef struct pending {
    int fd;
    size_t got;
    unsigned char b[RZ_HELLO];
    char from[64];
} pending;

static void peer_name(int fd, char *out, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[NI_MAXHOST];
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, NULL, 0, NI_NUMERICHOST) == 0)
        snprintf(out, cap, "%s", h);
    else snprintf(out, cap, "an unknown address");
}

static lf_status listen_on(int port, int backlog, int *out) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), v6 = fd >= 0;
    if (fd < 0) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* a kernel without IPv6 */
    if (fd < 0) return lf_fail(LF_ERR_IO, "rendezvous: socket: %s", strerror(errno));
    int one = 1, zero = 0;
    /* a previous job's connections in TIME_WAIT must not block the port */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); /* IPv4 peers too */
        struct sockaddr_in6 a;
        memset(&a, 0, sizeof a);
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons((uint16_t)port);
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)port);
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc != 0 || listen(fd, backlog) != 0 || set_nonblock(fd) != 0) {
        int e = errno;
        close(fd);
        return lf_fail(LF_ERR_IO, "rendezvous: rank 0 cannot listen on MASTER_PORT=%d: %s%s", port, strerror(e),
                       e == EADDRINUSE ? " (another job or program on this host uses the port: pick another "
                                         "MASTER_PORT)"
                                       : "");
    }
    *out = fd;
    return LF_OK;
}

/* Rank 0 needs a descriptor per peer: raise the soft limit when it is short. */
static lf_status need_fds(int size) {
    struct rlimit rl;
    rlim_t want = (rlim_t)size + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return LF_OK;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
        return lf_fail(LF_ERR_RANGE,
                       "rendezvous: rank 0 needs %llu file descriptors for %d ranks, but the hard limit "
                       "(ulimit -Hn) is %llu",
                       (unsigned long long)want, size, (unsigned long long)rl.rlim_max);
    rl.rlim_cur = want;
    setrlimit(RLIMIT_NOFILE, &rl);
    return LF_OK;
}

static lf_status hub_join(lf__rdzv *r, int port, double timeout_s) {
    int P = r->size, lfd = -1, npend = 0, joined = 0, dropped = 0;
    int failed_fd = -1; /* the refused peer's socket, kept to tell it why */
    double deadline = lf__comm_now_s() + timeout_s;
    pending *pend = NULL;
    int *pid = lf_calloc((size_t)P * sizeof *pid);
    struct pollfd *pf = lf_calloc((size_t)(RZ_PENDING_MAX + 1) * sizeof *pf);
    char msg[RZ_MSG_MAX], from_drop[64] = "";
    lf_status st = (!pid || !pf) ? LF_ERR_NOMEM : need_fds(P);
    if (st == LF_OK) st = listen_on(port, P < SOMAXCONN ? P : SOMAXCONN, &lfd);
    if (st == LF_OK && !(pend = lf_calloc(RZ_PENDING_MAX * sizeof *pend))) st = LF_ERR_NOMEM;
    if (st != LF_OK) goto done;
    while (joined < P - 1) {
        pf[0] = (struct pollfd){lfd, POLLIN, 0};
        for (int i = 0; i < npend; i++) pf[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
        int ms = lf__poll_ms(deadline, 1000);
        if (ms == 0) {
            char miss[600];
            int n = list_missing(r->fd, P, miss, sizeof miss);
            snprintf(msg, sizeof msg,
                     "rendezvous on MASTER_PORT=%d timed out on rank 0 after %g s (comm.timeout_s):"
                     " %d of %d ranks joined; rank%s that never arrived: %s",
                     port, timeout_s, joined + 1, P, n > 1 ? "s" : "", miss);
            if (dropped)
                snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
                         "; %d connection%s that spoke no llmforge "
                         "rendezvous dropped (the last from %s)",
                         dropped, dropped > 1 ? "s" : "", from_drop);
            st = lf_fail(LF_ERR_TIMEOUT, "%s", msg);
            goto refuse_all;
        }
        if (poll(pf, (nfds_t)(1 + npend), ms) < 0 && errno != EINTR) {
            st = lf_fail(LF_ERR_IO, "rendezvous: poll: %s", strerror(errno));
            goto refuse_all;
        }
        if (pf[0].revents & POLLIN) {
            for (;;) {
                int fd = accept(lfd, NULL, NULL);
                if (fd < 0) break;                                      /* EAGAIN, or a connection that vanished */
                if (npend == RZ_PENDING_MAX || set_nonblock(fd) != 0) { /* a flood: it may retry */
                    close(fd);
                    continue;
                }
                fcntl(fd, F_SETFD, FD_CLOEXEC);
                tune(fd);
                pend[npend] = (pending){.fd = fd, .got = 0};
                peer_name(fd, pend[npend].from, sizeof pend[npend].from);
                npend++;
            }
        }
        for (int i = 0; i < npend; i++) {
            pending *q = &pend[i];
            ssize_t got = recv(q->fd, q->b + q->got, RZ_HELLO - q->got, 0);
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
            int drop = got <= 0;
            if (got > 0) q->got += (size_t)got;
            if (!drop && q->got >= 4 && lf__get_u32(q->b) != RZ_MAGIC) drop = 1;
            if (drop) {
                dropped++;
                snprintf(from_drop, sizeof from_drop, "%s", q->from);
                close(q->fd);
                pend[i--] = pend[--npend];
                continue;
            }
            if (q->got < RZ_HELLO) continue;
            /* a whole hello: check it */
            uint32_t ver = lf__get_u32(q->b + 4), rk = lf__get_u32(q->b + 8), sz = lf__get_u32(q->b + 12),
                     fbits = lf__get_u32(q->b + 16), ppid = lf__get_u32(q->b + 20);
            char host[LF_RDZV_HOST_MAX];
            memcpy(host, q->b + 24, sizeof host);
            host[sizeof host - 1] = '\0';
            float one = 1.0f;
            uint32_t mine;
            memcpy(&mine, &one, sizeof mine);
            msg[0] = '\0';
            if (ver != RZ_VERSION)
                snprintf(msg, sizeof msg,
                         "rendezvous: a rank from %s (host %s, pid %u) speaks rendezvous protocol "
                         "version %u, rank 0 version %u: every rank must run the same llmforge build",
                         q->from, host, ppid, ver, RZ_VERSION);
            else if (fbits != mine)
                snprintf(msg, sizeof msg,
                         "rendezvous: rank %u (host %s) stores floats differently from rank 0 (1.0f is "
                         "0x%08x there, 0x%08x here): collectives send floats as they are in memory",
                         rk, host, fbits, mine);
            else if ((int64_t)sz != P)
                snprintf(msg, sizeof msg,
                         "rendezvous: world size mismatch: rank %u (host %s, pid %u) has WORLD_SIZE=%u, "
                         "rank 0 has WORLD_SIZE=%d: every rank of a job must be started with the same world size",
                         rk, host, ppid, sz, P);
            else if (rk == 0 || rk >= (uint32_t)P)
                snprintf(msg, sizeof msg, "rendezvous: a process from %s (host %s, pid %u) says RANK=%u, %s", q->from,
                         host, ppid, rk,
                         rk == 0 ? "but this process is rank 0: two ranks 0 (two launches on one "
                                   "MASTER_PORT?)"
                                 : "outside the world");
            else if (r->fd[rk] >= 0)
                snprintf(msg, sizeof msg,
                         "rendezvous: rank %u joined twice: from host %s (pid %u) and from host %s "
                         "(pid %d): two processes were started with RANK=%u",
                         rk, r->host[rk], (unsigned)pid[rk], host, (int)ppid, rk);
            if (msg[0]) {
                st = lf_fail(LF_ERR_MISMATCH, "%s", msg);
                failed_fd = q->fd;
                pend[i] = pend[--npend];
                goto refuse_all;
            }
            r->fd[rk] = q->fd;
            pid[rk] = (int)ppid;
            memcpy(r->host[rk], host, sizeof host);
            joined++;
            pend[i--] = pend[--npend];
        }
    }
    /* everyone is here: stop listening (a later rendezvous may reuse the
     * port), then the welcome carries every host name */
    close(lfd);
    lfd = -1;
    {
        size_t tb = (size_t)P * LF_RDZV_HOST_MAX;
        unsigned char h[RZ_REPLY];
        put_reply(h, LF_OK, (uint32_t)tb);
        for (int p = 1; p < P; p++)
            if (write_full(r->fd[p], h, sizeof h, deadline) != 0 || write_full(r->fd[p], r->host, tb, deadline) != 0) {
                st = lf_fail(errno == ETIMEDOUT ? LF_ERR_TIMEOUT : LF_ERR_IO,
                             "rendezvous: rank 0 could not send the welcome to rank %d (host %s): %s", p, r->host[p],
                             strerror(errno));
                snprintf(msg, sizeof msg, "%s", lf_last_error());
                goto refuse_all;
            }
    }
    goto done;

refuse_all:
    /* every peer that joined (and the refused one) learns why, then the
     * sockets close */
    snprintf(msg, sizeof msg, "%s", lf_last_error());
    {
        double wait = lf__comm_grace_s(timeout_s) < 1.0 ? lf__comm_grace_s(timeout_s) : 1.0;
        if (failed_fd >= 0) {
            refuse_peer(failed_fd, st, msg, wait);
            close(failed_fd);
        }
        for (int p = 1; p < P; p++)
            if (r->fd[p] >= 0) {
                refuse_peer(r->fd[p], st, msg, wait);
                close(r->fd[p]);
                r->fd[p] = -1;
            }
    }
    lf_fail(st, "%s", msg);
done:
    for (int i = 0; i < npend; i++) close(pend[i].fd);
    if (lfd >= 0) close(lfd);
    lf_free(pend);
    lf_free(pf);
    lf_free(pid);
    return st;
}

/* ---------------------------------------------------------------- the other ranks */
/* One attempt to connect to any address of addr:port before `until`. */
static int try_connect(const char *addr, int port, double until, char *err, size_t cap) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(addr, ps, &hints, &res);
    if (g != 0) {
        snprintf(err, cap, "MASTER_ADDR '%s' does not resolve: %s", addr, gai_strerror(g));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            snprintf(err, cap, "socket: %s", strerror(errno));
            continue;
        }
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen), e = rc == 0 ? 0 : errno;
        if (rc != 0 && e == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            socklen_t sl = sizeof e;
            int pr = poll(&pf, 1, lf__poll_ms(until, 5000)); /* at the deadline: a last look */
            if (pr == 0) e = ETIMEDOUT;
            else if (pr < 0) e = errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) != 0) e = errno;
        }
        if (e != 0) {
            snprintf(err, cap, "%s", strerror(e));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static lf_status peer_join(lf__rdzv *r, const char *addr, int port, double timeout_s) {
    double t0 = lf__comm_now_s(), deadline = t0 + timeout_s;
    /* rank 0 answers when the last rank arrived, or at its own deadline with
     * who is missing: wait for that a little past ours */
    double answer_by = deadline + lf__comm_grace_s(timeout_s);
    char err[256] = "no attempt finished";
    int fd = -1, tries = 0;
    lf_status st = LF_OK;
    unsigned char b[RZ_HELLO], h[RZ_REPLY];
    memset(b, 0, sizeof b);
    float one = 1.0f;
    uint32_t fbits;
    memcpy(&fbits, &one, sizeof fbits);
    lf__put_u32(b, RZ_MAGIC);
    lf__put_u32(b + 4, RZ_VERSION);
    lf__put_u32(b + 8, (uint32_t)r->rank);
    lf__put_u32(b + 12, (uint32_t)r->size);
    lf__put_u32(b + 16, fbits);
    lf__put_u32(b + 20, (uint32_t)getpid());
    memcpy(b + 24, r->host[r->rank], LF_RDZV_HOST_MAX);
    /* Rank 0 may start later than this rank: retry, backing off to 1 s. A
     * connection that ends before rank 0's answer began — the listen queue
     * of a previous rendezvous on the port, closing — is retried too. */
    for (;;) {
        fd = try_connect(addr, port, deadline, err, sizeof err);
        tries++;
        if (fd >= 0) {
            tune(fd);
            if (write_full(fd, b, sizeof b, deadline) == 0 && read_full(fd, h, sizeof h, answer_by) == 0) break;
            int e = errno;
            close(fd);
            fd = -1;
            if (e == ETIMEDOUT)
                return lf_fail(LF_ERR_TIMEOUT,
                               "rendezvous: rank %d reached rank 0 at MASTER_ADDR:MASTER_PORT = %s, but "
                               "the rendezvous did not complete within %g s (comm.timeout_s): rank 0 is still waiting "
                               "for other ranks (its message names them), or it is stalled",
                               r->rank, r->where, timeout_s);
            snprintf(err, sizeof err, "connected, then %s before rank 0 answered",
                     e == EPIPE ? "the connection closed" : strerror(e));
        }
        double left = deadline - lf__comm_now_s(), pause = tries < 10 ? 0.05 * tries : 1.0;
        if (left <= 0)
            return lf_fail(LF_ERR_TIMEOUT,
                           "rendezvous: rank %d could not reach rank 0 at MASTER_ADDR:MASTER_PORT = %s "
                           "within %g s (comm.timeout_s; %d attempts, last: %s): rank 0 is not running, or is not "
                           "at that address, or a firewall is in between",
                           r->rank, r->where, timeout_s, tries, err);
        sleep_s(pause < left ? pause : left);
    }
    if (lf__get_u32(h) != RZ_MAGIC || lf__get_u32(h + 4) != RZ_VERSION) {
        st = lf_fail(LF_ERR_MISMATCH,
                     "rendezvous: rank %d: what answers at MASTER_ADDR:MASTER_PORT = %s is not an "
                     "llmforge rank 0 of this version (another program on that port?)",
                     r->rank, r->where);
        goto fail;
    }
    lf_status their = (lf_status)(int32_t)lf__get_u32(h + 8);
    uint32_t len = lf__get_u32(h + 12);
    if (their != LF_OK) {
        char msg[RZ_MSG_MAX + 1];
        if (len > RZ_MSG_MAX || read_full(fd, msg, len, lf__comm_now_s() + 1.0) != 0) len = 0;
        msg[len] = '\0';
        st = lf_fail(their == LF_ERR_TIMEOUT || their == LF_ERR_MISMATCH ? their : LF_ERR_IO,
                     "rendezvous: rank %d was turned away by rank 0 at %s: %s", r->rank, r->where,
                     len ? msg : lf_status_str(their));
        goto fail;
    }
    if (len != (uint32_t)r->size * LF_RDZV_HOST_MAX || read_full(fd, r->host, len, answer_by) != 0) {
        st = lf_fail(LF_ERR_IO, "rendezvous: rank %d: rank 0's welcome at %s was cut short", r->rank, r->where);
        goto fail;
    }
    for (int p = 0; p < r->size; p++) r->host[p][LF_RDZV_HOST_MAX - 1] = '\0';
    r->fd[0] = fd;
    return LF_OK;
fail:
    close(fd);
    return st;
}

/* ---------------------------------------------------------------- public */
lf_status lf__rdzv_join(lf__rdzv **out, const char *addr, int port, int rank, int size, double timeout_s) {
    *out = NULL;
    if (size < 1 || size > LF_RDZV_MAX_WORLD)
        return lf_fail(LF_ERR_RANGE, "rendezvous: world size %d is outside 1..%d", size, LF_RDZV_MAX_WORLD);
    if (rank < 0 || rank >= size) return lf_fail(LF_ERR_RANGE, "rendezvous: rank %d is outside 0..%d", rank, size - 1);
    if (size > 1 && (port < 1 || port > 65535))
        return lf_fail(LF_ERR_RANGE, "rendezvous: MASTER_PORT=%d is outside 1..65535", port);
    if (size > 1 && rank > 0 && (!addr || !*addr)) return lf_fail(LF_ERR_CONFIG, "rendezvous: MASTER_ADDR is empty");
    lf__rdzv *r = lf_calloc(sizeof *r);
    if (!r) return LF_ERR_NOMEM;
    r->rank = rank;
    r->size = size;
    r->fd = lf_alloc((size_t)size * sizeof *r->fd);
    r->host = lf_calloc((size_t)size * sizeof *r->host);
    if (!r->fd || !r->host) {
        lf__rdzv_close(r);
        return LF_ERR_NOMEM;
    }
    for (int p = 0; p < size; p++) r->fd[p] = -1;
    if (gethostname(r->host[rank], LF_RDZV_HOST_MAX - 1) != 0) snprintf(r->host[rank], LF_RDZV_HOST_MAX, "unknown");
    r->host[rank][LF_RDZV_HOST_MAX - 1] = '\0';
    snprintf(r->where, sizeof r->where, "%s:%d", addr && *addr ? addr : "*", port);
    lf_status st = LF_OK;
    if (size > 1) st = rank == 0 ? hub_join(r, port, timeout_s) : peer_join(r, addr, port, timeout_s);
    if (st != LF_OK) {
        lf__rdzv_close(r);
        return st;
    }
    *out = r;
    return LF_OK;
}

void lf__rdzv_close(lf__rdzv *r) {
    if (!r) return;
    if (r->fd)
        for (int p = 0; p < r->size; p++)
            if (r->fd[p] >= 0) close(r->fd[p]);
    lf_free(r->fd);
    lf_free(r->host);
    lf_free(r);
}
