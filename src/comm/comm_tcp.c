/*
 * The "tcp" communicator: ranks started torchrun-style (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT; no MPI), joined by the TCP rendezvous of
 * comm_rdzv.c, float buffers in host memory. It is the host control path
 * beside NCCL when MPI did not launch the job, and a complete CPU
 * communicator by itself.
 *
 * Topology: a star through rank 0 (the hub). In every collective each peer
 * sends its contribution to rank 0, rank 0 folds or assembles, and sends
 * each peer its result. Cost per collective of n floats on P ranks: a peer
 * moves n out and n in (reduce_scatter / all_gather: n and n/P); rank 0
 * moves (P-1)·n each way, so rank 0's link bounds the job at about
 * 1/(2·(P-1)) of a ring's all-reduce bandwidth. That is fine for the control
 * path (scalars, hashes, ids) and for small CPU jobs; the GPU data path is
 * NCCL's.
 *
 * Same bits as the mpi kind. Rank 0 folds the P contributions of an element
 * with lf__comm_reduce_f32 in rank order, ((x_0 + x_1) + x_2) + ..., AVG
 * dividing the sum by P — the fold comm_mpi.c applies to its parts — and
 * sends the result itself, so every rank holds the same bits, equal to the
 * mpi kind's for the same inputs. f64/i64 likewise (lf__comm_reduce_f64/i64).
 *
 * Wire: frames of a 40-byte little-endian header (magic "LFTF", type,
 * collective, status, number, element count, payload bytes) and a payload:
 *   DATA   a contribution (peer -> hub) or a result (hub -> peer) of
 *          collective #seq; the receiver checks number, kind, element count
 *          and payload size against its own call (LF_ERR_MISMATCH, naming
 *          the rank and both calls, when they differ);
 *   QUERY  a peer whose deadline passed asks the hub where it is;
 *   WHERE  the hub's answer: its collective and the ranks it waits for;
 *   FAIL   "this collective failed": status and message. The hub sends it to
 *          every peer when its collective fails; a rank that ends the job
 *          (lf_comm_abort) sends it too, so the others stop at once.
 * Buffers larger than opts.segment_elems go in rounds (one DATA frame per
 * rank and direction a round), so rank 0's scratch stays about
 * segment_elems floats; floats travel as they are in memory (the
 * rendezvous checked that every rank stores 1.0f alike).
 *
 * Never a hang, never SIGPIPE. Sockets are non-blocking; every wait is a
 * poll() against the collective's deadline (opts.timeout_s from its start);
 * writes use MSG_NOSIGNAL. A peer that dies is EOF or ECONNRESET: LF_ERR_IO
 * at once, naming the collective, its number, the context and the rank. On
 * timeout the hub names the ranks whose data did not come (with the last
 * collective heard from each) or that stopped reading; a peer asks the hub
 * (QUERY) and waits lf__comm_grace_s for the answer, so its message says
 * whom the hub waits for, or that the hub itself did not answer (not at
 * the collective, or dead). A failed hub tells every peer (FAIL) before it
 * returns, so all ranks fail the same collective with the same story.
 *
 * Ordering invariant the frames rely on: a peer is never ahead of the hub by
 * more than one collective (it needs the hub's result — or, for a broadcast
 * it roots, the hub's acknowledgement — to finish each one), so a DATA
 * header the hub reads before it posted the receive belongs to the next
 * collective: it is held, unread beyond the header, until that receive is
 * posted.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "comm/comm_rdzv.h"

#define FR_MAGIC 0x4654464Cu /* "LFTF" little-endian */
#define FR_HDR 40
#define CTL_MAX 1024 /* payload of a QUERY/WHERE/FAIL frame */

enum { FR_DATA = 1, FR_QUERY = 2, FR_WHERE = 3, FR_FAIL = 4 };

typedef struct frame {
    uint32_t type, coll;
    int32_t status;
    int64_t seq;
    uint64_t count, len;
} frame;

typedef struct conn {
    int fd, rank;
    /* reading: the header of the frame in progress, then its payload */
    unsigned char rh[FR_HDR];
    size_t rh_got;
    int held; /* rh holds a header read ahead: DATA for a receive not posted
                  * yet, or FAIL while nothing is posted (it fails the next
                  * collective, not one this connection already finished) */
    int in_body;
    frame rf;
    char *body; /* rbuf for DATA, ctl for the others */
    size_t body_got;
    char *ctl; /* CTL_MAX + 1 bytes, allocated for a control frame */
    /* the posted receive: one DATA frame of this collective */
    int rposted, rdone;
    char *rbuf;
    size_t rlen;
    /* writing: one frame at a time */
    int wposted;
    unsigned char wh[FR_HDR];
    size_t wh_sent;
    const char *wsrc;
    size_t wlen, wsent;
    /* the last DATA header read from this rank (the hub's "last heard from") */
    int64_t seen_seq;
    uint32_t seen_coll;
    /* the connection ended while nothing was posted on it (a peer that
     * finished its last collective and exited while the hub was still
     * writing to the others): an error only if something is posted later */
    int eof, eof_err;
} conn;

typedef struct tcp_state {
    lf__rdzv *rz;
    conn *conns; /* rank 0: conns[p - 1] is rank p; a peer: conns[0] is rank 0 */
    int nconn;
    struct pollfd *pfd;
    double started, deadline;
    void *scratch;
    size_t scratch_bytes;
    /* what the last pump failure was about */
    int bad; /* conn index, or -1 */
    char why[CTL_MAX + 256];
    /* hub: the text of WHERE answers in flight (shared), and of FAIL */
    char where_out[CTL_MAX];
    int where_busy;
    char fail_out[CTL_MAX];
    int lingered; /* linger() ran (lf_comm_abort) */
    /* peer: the hub's WHERE answer */
    int got_where;
    char where_in[CTL_MAX + 1];
} tcp_state;

/* ---------------------------------------------------------------- frames */
static void frame_put(unsigned char *b, const frame *f) {
    lf__put_u32(b, FR_MAGIC);
    lf__put_u32(b + 4, f->type);
    lf__put_u32(b + 8, f->coll);
    lf__put_u32(b + 12, (uint32_t)f->status);
    lf__put_u64(b + 16, (uint64_t)f->seq);
    lf__put_u64(b + 24, f->count);
    lf__put_u64(b + 32, f->len);
}

static int frame_get(const unsigned char *b, frame *f) {
    if (lf__get_u32(b) != FR_MAGIC) return -1;
    f->type = lf__get_u32(b + 4);
    f->coll = lf__get_u32(b + 8);
    f->status = (int32_t)lf__get_u32(b + 12);
    f->seq = (int64_t)lf__get_u64(b + 16);
    f->count = lf__get_u64(b + 24);
    f->len = lf__get_u64(b + 32);
    return 0;
}

static const char *coll_name(uint32_t coll) {
    return lf__comm_coll_name(coll < LF_COMM_COLL_COUNT_ ? (lf_comm_coll)coll : LF_COMM_COLL_COUNT_);
}

/* "rank 3" or "rank 0 (the hub)" */
static const char *who(int rank, char *buf, size_t cap) {
    snprintf(buf, cap, rank == 0 ? "rank 0 (the hub)" : "rank %d", rank);
    return buf;
}

static lf_status pump_fail(tcp_state *t, int i, lf_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static lf_status pump_fail(tcp_state *t, int i, lf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->why, sizeof t->why, fmt, ap);
    va_end(ap);
    t->bad = i;
    return st;
}

static void post_send(const lf_comm *c, conn *k, uint32_t type, int32_t status, const void *buf, size_t len) {
    frame f = {type, (uint32_t)c->coll, status, c->seq, (uint64_t)c->count, (uint64_t)len};
    frame_put(k->wh, &f);
    k->wh_sent = 0;
    k->wsrc = buf;
    k->wlen = len;
    k->wsent = 0;
    k->wposted = 1;
}

static void post_recv(conn *k, void *buf, size_t len) {
    k->rposted = 1;
    k->rdone = 0;
    k->rbuf = buf;
    k->rlen = len;
}

/* ---------------------------------------------------------------- reading and writing */
static lf_status conn_lost(tcp_state *t, int i, int err) {
    conn *k = &t->conns[i];
    char w[32], extra[96] = "";
    if (k->rposted && !k->rdone && k->in_body && k->rf.type == FR_DATA)
        snprintf(extra, sizeof extra, " after %zu of %zu bytes of its data", k->body_got, k->rlen);
    if (err == 0 || err == ECONNRESET || err == EPIPE)
        return pump_fail(t, i, LF_ERR_IO, "%s closed its connection%s (it exited, crashed or was killed)",
                         who(k->rank, w, sizeof w), extra);
    return pump_fail(t, i, LF_ERR_IO, "the connection to %s failed%s: %s", who(k->rank, w, sizeof w), extra,
                     strerror(err));
}

static void describe_missing(const lf_comm *c, const tcp_state *t, char *out, size_t cap);

/* A DATA header for the posted receive: check it against this rank's call. */
static lf_status start_data(lf_comm *c, tcp_state *t, int i) {
    conn *k = &t->conns[i];
    const frame *f = &k->rf;
    char w[32];
    k->held = 0;
    if (f->seq != c->seq || f->coll != (uint32_t)c->coll || f->count != (uint64_t)c->count)
        return pump_fail(t, i, LF_ERR_MISMATCH, "%s called %s #%lld with %llu elements (this rank: %s #%lld with %zu)",
                         who(k->rank, w, sizeof w), coll_name(f->coll), (long long)f->seq, (unsigned long long)f->count,
                         lf__comm_coll_name(c->coll), (long long)c->seq, c->count);
    if (f->len != (uint64_t)k->rlen)
        return pump_fail(t, i, LF_ERR_MISMATCH,
                         "%s sent %llu bytes where this rank expects %zu (the ranks disagree on "
                         "the broadcast root or the sizes)",
                         who(k->rank, w, sizeof w), (unsigned long long)f->len, k->rlen);
    k->in_body = 1;
    k->body = k->rbuf;
    k->body_got = 0;
    return LF_OK;
}

/* A frame's payload is complete. */
static lf_status end_body(lf_comm *c, tcp_state *t, int i) {
    conn *k = &t->conns[i];
    char w[32];
    k->in_body = 0;
    k->rh_got = 0;
    if (k->rf.type == FR_DATA) {
        k->rdone = 1;
        return LF_OK;
    }
    k->ctl[k->rf.len] = '\0';
    if (k->rf.type == FR_WHERE) {
        if (c->rank != 0) {
            memcpy(t->where_in, k->ctl, (size_t)k->rf.len + 1);
            t->got_where = 1;
        }
        lf_free(k->ctl);
        k->ctl = NULL;
        return LF_OK;
    }
    /* FAIL: that rank's collective failed, or it ended the job */
    lf_status st = k->rf.status == LF_ERR_TIMEOUT || k->rf.status == LF_ERR_MISMATCH ? k->rf.status : LF_ERR_IO;
    pump_fail(t, i, st, "%s reports: %s", who(k->rank, w, sizeof w), k->ctl);
    lf_free(k->ctl);
    k->ctl = NULL;
    return st;
}

/* A QUERY reached the hub: answer where it is, unless a frame is being
 * written to that peer (then the query is dropped: the peer is about to
 * receive something anyway). */
static void answer_query(lf_comm *c, tcp_state *t, conn *k) {
    if (c->rank != 0 || k->wposted) return;
    if (!t->where_busy) {
        char desc[256], miss[CTL_MAX - 300];
        lf__comm_describe(c, desc, sizeof desc);
        describe_missing(c, t, miss, sizeof miss);
        snprintf(t->where_out, sizeof t->where_out, "rank 0 is in %s%s", desc,
                 miss[0] ? miss : "; every rank's data has arrived");
    }
    t->where_busy++;
    post_send(c, k, FR_WHERE, 0, t->where_out, strlen(t->where_out));
}

static int pending(const conn *k) { return (k->rposted && !k->rdone) || k->wposted; }

/* The payload of a control frame goes to k->ctl. */
static lf_status start_ctl(tcp_state *t, int i) {
    conn *k = &t->conns[i];
    char w[32];
    k->held = 0;
    if (!k->ctl && !(k->ctl = lf_alloc(CTL_MAX + 1)))
        return pump_fail(t, i, LF_ERR_NOMEM, "out of memory reading a message from %s", who(k->rank, w, sizeof w));
    k->in_body = 1;
    k->body = k->ctl;
    k->body_got = 0;
    return LF_OK;
}

static lf_status do_read(lf_comm *c, tcp_state *t, int i) {
    conn *k = &t->conns[i];
    char w[32];
    for (;;) {
        if (k->held) { /* the next collective's: only once something is posted for it */
            lf_status st;
            if (k->rf.type == FR_DATA) {
                if (!k->rposted || k->rdone) return LF_OK;
                st = start_data(c, t, i);
            } else {
                if (!pending(k)) return LF_OK;
                st = start_ctl(t, i);
            }
            if (st != LF_OK) return st;
        }
        ssize_t r;
        if (!k->in_body) r = recv(k->fd, k->rh + k->rh_got, FR_HDR - k->rh_got, 0);
        else if (k->rf.len > k->body_got) r = recv(k->fd, k->body + k->body_got, (size_t)k->rf.len - k->body_got, 0);
        else r = 0, errno = 0;
        if (k->in_body && k->rf.len == k->body_got) { /* an empty payload */
            lf_status st = end_body(c, t, i);
            if (st != LF_OK) return st;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return LF_OK;
        if (r <= 0) {
            int err = r == 0 ? 0 : errno;
            if ((!k->rposted || k->rdone) && !k->wposted && !k->in_body && k->rh_got == 0) {
                k->eof = 1;
                k->eof_err = err;
                return LF_OK;
            }
            return conn_lost(t, i, err);
        }
        if (k->in_body) {
            k->body_got += (size_t)r;
            if (k->body_got == k->rf.len) {
                lf_status st = end_body(c, t, i);
                if (st != LF_OK) return st;
            }
            continue;
        }
        k->rh_got += (size_t)r;
        if (k->rh_got < FR_HDR) continue;
        if (frame_get(k->rh, &k->rf) != 0)
            return pump_fail(t, i, LF_ERR_IO, "%s sent bytes that are no llmforge frame (protocol error)",
                             who(k->rank, w, sizeof w));
        switch (k->rf.type) {
        case FR_DATA:
            k->seen_seq = k->rf.seq;
            k->seen_coll = k->rf.coll;
            k->held = 1; /* started above when the receive is posted */
            break;
        case FR_QUERY:
            k->rh_got = 0;
            answer_query(c, t, k);
            break;
        case FR_WHERE:
        case FR_FAIL: {
            if (k->rf.len > CTL_MAX)
                return pump_fail(t, i, LF_ERR_IO, "%s sent a %llu-byte message (at most %d: protocol error)",
                                 who(k->rank, w, sizeof w), (unsigned long long)k->rf.len, CTL_MAX);
            if (k->rf.type == FR_FAIL && !pending(k)) {
                k->held = 1;
                return LF_OK;
            }
            lf_status st = start_ctl(t, i);
            if (st != LF_OK) return st;
            break;
        }
        default:
            return pump_fail(t, i, LF_ERR_IO, "%s sent a frame of unknown type %u (protocol error)",
                             who(k->rank, w, sizeof w), k->rf.type);
        }
    }
}

static lf_status do_write(lf_comm *c, tcp_state *t, int i) {
    conn *k = &t->conns[i];
    while (k->wposted) {
        struct iovec iov[2];
        int n = 0;
        if (k->wh_sent < FR_HDR) iov[n++] = (struct iovec){k->wh + k->wh_sent, FR_HDR - k->wh_sent};
        if (k->wsent < k->wlen) {
            size_t left = k->wlen - k->wsent;
            iov[n++] = (struct iovec){(void *)(k->wsrc + k->wsent), left < ((size_t)1 << 30) ? left : (size_t)1 << 30};
        }
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)n;
        ssize_t w = n ? sendmsg(k->fd, &m, MSG_NOSIGNAL) : 0;
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return LF_OK;
            return conn_lost(t, i, errno);
        }
        size_t a = (size_t)w;
        if (k->wh_sent < FR_HDR) {
            size_t h = FR_HDR - k->wh_sent < a ? FR_HDR - k->wh_sent : a;
            k->wh_sent += h;
            a -= h;
        }
        k->wsent += a;
        if (k->wh_sent == FR_HDR && k->wsent == k->wlen) {
            k->wposted = 0;
            if (k->wsrc == t->where_out && t->where_busy > 0) t->where_busy--;
        }
    }
    (void)c;
    return LF_OK;
}

/* Drive every connection until each posted receive and write is done (or,
 * with until_where, the hub's WHERE answer arrived), the deadline passes
 * (LF_ERR_TIMEOUT), or something fails (its status; t->why says what). */
static lf_status pump(lf_comm *c, tcp_state *t, double deadline, int until_where) {
    t->bad = -1;
    t->why[0] = '\0'; /* stays empty for this rank's own timeout */
    for (;;) {
        int busy = 0;
        for (int i = 0; i < t->nconn; i++) {
            conn *k = &t->conns[i];
            if (k->eof && ((k->rposted && !k->rdone) || k->wposted)) return conn_lost(t, i, k->eof_err);
            if (k->held && pending(k)) { /* a header read ahead of what is posted now */
                lf_status st = do_read(c, t, i);
                if (st != LF_OK) return st;
            }
            short ev = k->held ? 0 : POLLIN; /* always: FAIL frames and EOF come any time */
            if (k->wposted) ev |= POLLOUT;
            t->pfd[i] = (struct pollfd){k->eof ? -1 : k->fd, ev, 0};
            if ((k->rposted && !k->rdone) || k->wposted) busy = 1;
        }
        if (!busy || (until_where && t->got_where)) return LF_OK;
        int ms = lf__poll_ms(deadline, 1000);
        if (ms == 0) return LF_ERR_TIMEOUT;
        int n = poll(t->pfd, (nfds_t)t->nconn, ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            return pump_fail(t, -1, LF_ERR_IO, "poll: %s", strerror(errno));
        }
        for (int i = 0; i < t->nconn && n > 0; i++) {
            short re = t->pfd[i].revents;
            if (!re) continue;
            n--;
            lf_status st = LF_OK;
            if (re & (POLLIN | POLLHUP | POLLERR)) st = do_read(c, t, i);
            if (st == LF_OK && (re & (POLLOUT | POLLERR)) && t->conns[i].wposted) st = do_write(c, t, i);
            if (st != LF_OK) return st;
        }
    }
}

/* Push out the frames being written, ignoring errors, until `until`. */
static void flush_writes(lf_comm *c, tcp_state *t, double until) {
    for (;;) {
        int busy = 0;
        for (int i = 0; i < t->nconn; i++) {
            if (t->conns[i].eof) t->conns[i].wposted = 0;
            t->pfd[i] = (struct pollfd){t->conns[i].wposted ? t->conns[i].fd : -1, POLLOUT, 0};
            busy |= t->conns[i].wposted;
        }
        int ms = lf__poll_ms(until, 100);
        if (!busy || ms == 0) return;
        if (poll(t->pfd, (nfds_t)t->nconn, ms) < 0 && errno != EINTR) return;
        for (int i = 0; i < t->nconn; i++)
            if (t->pfd[i].revents && do_write(c, t, i) != LF_OK) t->conns[i].wposted = 0;
    }
}

/* ---------------------------------------------------------------- failures */

/* The hub's account of the collective in progress: ranks whose data has not
 * come, ranks that stopped taking their results. "" when none. */
static void describe_missing(const lf_comm *c, const tcp_state *t, char *out, size_t cap) {
    out[0] = '\0';
    char list[700] = "", slow[400] = "";
    int missing = 0, stuck = 0;
    for (int i = 0; i < t->nconn; i++) {
        const conn *k = &t->conns[i];
        if (k->rposted && !k->rdone) {
            if (missing++ >= 12) continue;
            lf__comm_append(list, sizeof list, "%s%d", missing > 1 ? ", " : "", k->rank);
            if (k->in_body && k->rf.type == FR_DATA)
                lf__comm_append(list, sizeof list, " (arrived; its data stalled after %zu of %zu bytes)", k->body_got,
                                k->rlen);
            else if (k->seen_seq > 0)
                lf__comm_append(list, sizeof list, " (last heard from in %s #%lld)", coll_name(k->seen_coll),
                                (long long)k->seen_seq);
            else lf__comm_append(list, sizeof list, " (no collective heard from it yet)");
        } else if (k->wposted && k->wsrc != t->where_out) {
            if (stuck++ >= 8) continue;
            lf__comm_append(slow, sizeof slow, "%s%d (%zu of %zu bytes taken)", stuck > 1 ? ", " : "", k->rank,
                            k->wsent, k->wlen);
        }
    }
    if (missing) {
        lf__comm_append(out, cap, "; rank%s that did not arrive: %s", missing > 1 ? "s" : "", list);
        if (missing > 12) lf__comm_append(out, cap, " and %d more", missing - 12);
    }
    if (stuck) {
        lf__comm_append(out, cap, "; rank%s not taking %s result: %s", stuck > 1 ? "s" : "",
                        stuck > 1 ? "their" : "its", slow);
        if (stuck > 8) lf__comm_append(out, cap, " and %d more", stuck - 8);
        lf__comm_append(out, cap, " (stalled or dead)");
    }
    (void)c;
}

/* Hub: send FAIL with msg to every peer (a peer being written to mid-frame
 * gets its connection shut instead: it sees EOF). At most a second. */
static void hub_tell_all(lf_comm *c, tcp_state *t, lf_status st, const char *msg) {
    snprintf(t->fail_out, sizeof t->fail_out, "%s", msg);
    for (int i = 0; i < t->nconn; i++) {
        conn *k = &t->conns[i];
        if (k->wposted && k->wsrc == t->where_out && k->wsent == 0 && k->wh_sent == 0) k->wposted = 0;
        if (k->wposted) shutdown(k->fd, SHUT_RDWR);
        else post_send(c, k, FR_FAIL, (int32_t)st, t->fail_out, strlen(t->fail_out));
    }
    double g = lf__comm_grace_s(c->opts.timeout_s);
    flush_writes(c, t, lf__comm_now_s() + (g < 1.0 ? g : 1.0));
}

/* After a failure: shut the sending side (the frames written so far still
 * arrive, then EOF) and read what the peers still send until they close or
 * `secs` pass. Closing a socket with unread bytes in it would send a TCP
 * reset instead, and a reset discards what the peer has not read yet — the
 * FAIL frame that says why. */
static void linger(tcp_state *t, double secs) {
    double until = lf__comm_now_s() + secs;
    for (int i = 0; i < t->nconn; i++) {
        t->conns[i].wposted = 0;
        if (!t->conns[i].eof) shutdown(t->conns[i].fd, SHUT_WR);
    }
    char sink[16384];
    for (;;) {
        int open = 0;
        for (int i = 0; i < t->nconn; i++) {
            t->pfd[i] = (struct pollfd){t->conns[i].eof ? -1 : t->conns[i].fd, POLLIN, 0};
            open += !t->conns[i].eof;
        }
        int ms = lf__poll_ms(until, 100);
        if (!open || ms == 0) return;
        if (poll(t->pfd, (nfds_t)t->nconn, ms) < 0 && errno != EINTR) return;
        for (int i = 0; i < t->nconn; i++) {
            if (!t->pfd[i].revents) continue;
            ssize_t r;
            while ((r = recv(t->conns[i].fd, sink, sizeof sink, 0)) > 0) {
            }
            if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) t->conns[i].eof = 1;
        }
    }
}

/* Peer at its deadline: what is rank 0 doing? */
static void peer_diagnose(lf_comm *c, tcp_state *t, char *out, size_t cap) {
    conn *k = &t->conns[0];
    char desc[256];
    lf__comm_describe(c, desc, sizeof desc);
    out[0] = '\0';
    if (k->wposted) {
        lf__comm_append(out, cap,
                        "; rank that did not arrive: 0 (the hub; it took %zu of this rank's %zu bytes and stopped "
                        "reading: it has not reached %s, or is stalled)",
                        k->wsent, k->wlen, desc);
        return;
    }
    if (k->rposted && !k->rdone && k->in_body && k->rf.type == FR_DATA) {
        lf__comm_append(out, cap, "; rank 0 (the hub) sent %zu of the result's %zu bytes and stalled", k->body_got,
                        k->rlen);
        return;
    }
    double grace = lf__comm_grace_s(c->opts.timeout_s);
    t->got_where = 0;
    post_send(c, k, FR_QUERY, 0, NULL, 0);
    lf_status st = pump(c, t, lf__comm_now_s() + grace, 1);
    if (st == LF_OK && t->got_where) lf__comm_append(out, cap, "; rank 0 (the hub) answers: %s", t->where_in);
    else if (st == LF_OK) lf__comm_append(out, cap, "; rank 0's result arrived only after the deadline");
    else if (st == LF_ERR_TIMEOUT && !t->why[0])
        lf__comm_append(out, cap,
                        "; rank that did not arrive: 0 (the hub; no answer within %.1f s means it has not reached "
                        "this collective — stalled outside the communicator — or is dead)",
                        grace);
    else lf__comm_append(out, cap, "; then: %s", t->why);
}

/* The collective failed with st (from pump, t->why set unless a timeout). */
static lf_status fail_collective(lf_comm *c, tcp_state *t, lf_status st) {
    char desc[256], diag[CTL_MAX + 300], msg[2 * CTL_MAX];
    double waited = lf__comm_now_s() - t->started;
    lf__comm_describe(c, desc, sizeof desc);
    if (st == LF_ERR_TIMEOUT && !t->why[0]) { /* this rank's deadline, not a timeout reported by another */
        if (c->rank == 0) describe_missing(c, t, diag, sizeof diag);
        else peer_diagnose(c, t, diag, sizeof diag);
        if (c->rank == 0 && !diag[0]) snprintf(diag, sizeof diag, "; every rank arrived, so the network is stuck");
        snprintf(msg, sizeof msg, "%s timed out on rank %d after %.1f s (comm.timeout_s = %g)%s", desc, c->rank, waited,
                 c->opts.timeout_s, diag);
    } else {
        snprintf(msg, sizeof msg, "%s failed on rank %d: %s", desc, c->rank, t->why);
    }
    if (c->rank == 0) hub_tell_all(c, t, st, msg);
    return lf_fail(st, "%s", msg);
}

/* ---------------------------------------------------------------- helpers of the collectives */
static void start_clock(lf_comm *c, tcp_state *t) {
    t->started = lf__comm_now_s();
    t->deadline = t->started + c->opts.timeout_s;
}

static void clear_posts(tcp_state *t) {
    for (int i = 0; i < t->nconn; i++) t->conns[i].rposted = t->conns[i].rdone = 0;
}

static lf_status run(lf_comm *c, tcp_state *t) {
    lf_status st = pump(c, t, t->deadline, 0);
    if (st == LF_OK) {
        clear_posts(t);
        return LF_OK;
    }
    return fail_collective(c, t, st);
}

static lf_status need_scratch(lf_comm *c, tcp_state *t, size_t bytes) {
    if (bytes <= t->scratch_bytes) return LF_OK;
    void *p = lf_alloc(bytes);
    if (!p) {
        pump_fail(t, -1, LF_ERR_NOMEM, "out of memory for %zu bytes of scratch", bytes);
        return fail_collective(c, t, LF_ERR_NOMEM);
    }
    lf_free(t->scratch);
    t->scratch = p;
    t->scratch_bytes = bytes;
    return LF_OK;
}

/* Floats per round: a round's P rows fit segment_elems (rounded up). */
static size_t round_elems(const lf_comm *c) {
    size_t s = (c->opts.segment_elems + (size_t)c->size - 1) / (size_t)c->size;
    return s ? s : 1;
}

/* Peer: send len bytes from src, receive rlen bytes into dst, in one round. */
static lf_status peer_round(lf_comm *c, tcp_state *t, const void *src, size_t len, void *dst, size_t rlen) {
    conn *k = &t->conns[0];
    post_send(c, k, FR_DATA, 0, src, len);
    post_recv(k, dst, rlen);
    return run(c, t);
}

/* Hub: every peer's len bytes into rows (row p at rows + p*len; row 0 is
 * the hub's own, filled by the caller). */
static lf_status hub_gather_rows(lf_comm *c, tcp_state *t, char *rows, size_t len) {
    for (int i = 0; i < t->nconn; i++)
        post_recv(&t->conns[i], rows ? rows + (size_t)t->conns[i].rank * len : NULL, len);
    return run(c, t);
}

/* Hub: the same len bytes to every peer. */
static lf_status hub_send_all(lf_comm *c, tcp_state *t, const void *src, size_t len) {
    for (int i = 0; i < t->nconn; i++) post_send(c, &t->conns[i], FR_DATA, 0, src, len);
    return run(c, t);
}

static size_t lo_of(size_t a, size_t b) { return a < b ? a : b; }
static size_t hi_of(size_t a, size_t b) { return a > b ? a : b; }

/* ---------------------------------------------------------------- collectives */
static lf_status tcp_all_reduce(lf_comm *c, float *buf, size_t n, lf_comm_op op) {
    tcp_state *t = c->impl;
    start_clock(c, t);
    if (c->size == 1) return LF_OK;
    size_t s = round_elems(c), P = (size_t)c->size;
    if (c->rank == 0) {
        lf_status st = need_scratch(c, t, P * (n < s ? (n ? n : 1) : s) * sizeof(float));
        if (st != LF_OK) return st;
    }
    for (size_t a = 0; a < n; a += s) {
        size_t len = n - a < s ? n - a : s, bytes = len * sizeof(float);
        lf_status st;
        if (c->rank != 0) {
            st = peer_round(c, t, buf + a, bytes, buf + a, bytes);
        } else {
            float *rows = t->scratch;
            memcpy(rows, buf + a, bytes);
            st = hub_gather_rows(c, t, (char *)rows, bytes);
            if (st == LF_OK) {
                lf__comm_reduce_f32(buf + a, rows, len, c->size, len, op);
                st = hub_send_all(c, t, buf + a, bytes);
            }
        }
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status tcp_reduce_scatter(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op) {
    tcp_state *t = c->impl;
    start_clock(c, t);
    if (c->size == 1) {
        if (n && recv != send) memcpy(recv, send, n * sizeof *recv);
        return LF_OK;
    }
    size_t s = round_elems(c), P = (size_t)c->size, off, cnt;
    lf_comm_partition(n, c->size, c->rank, &off, &cnt);
    if (c->rank == 0) {
        lf_status st = need_scratch(c, t, (P + 1) * (n < s ? (n ? n : 1) : s) * sizeof(float));
        if (st != LF_OK) return st;
    }
    for (size_t a = 0; a < n; a += s) {
        size_t len = n - a < s ? n - a : s, e = a + len;
        /* this rank's part within the round: [lo, hi) */
        size_t lo = hi_of(off, a), hi = lo_of(off + cnt, e);
        if (hi < lo) hi = lo;
        lf_status st;
        if (c->rank != 0) {
            st = peer_round(c, t, send + a, len * sizeof(float), hi > lo ? recv + (lo - off) : NULL,
                            (hi - lo) * sizeof(float));
            if (st != LF_OK) return st;
            continue;
        }
        float *rows = t->scratch, *sum = rows + P * len;
        memcpy(rows, send + a, len * sizeof(float));
        if ((st = hub_gather_rows(c, t, (char *)rows, len * sizeof(float))) != LF_OK) return st;
        lf__comm_reduce_f32(sum, rows, len, c->size, len, op);
        for (int i = 0; i < t->nconn; i++) {
            size_t qo, qc;
            lf_comm_partition(n, c->size, t->conns[i].rank, &qo, &qc);
            size_t ql = hi_of(qo, a), qh = lo_of(qo + qc, e);
            if (qh < ql) qh = ql;
            post_send(c, &t->conns[i], FR_DATA, 0, sum + (ql - a), (qh - ql) * sizeof(float));
        }
        if (hi > lo) memcpy(recv + (lo - off), sum + (lo - a), (hi - lo) * sizeof(float));
        if ((st = run(c, t)) != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status tcp_all_gather(lf_comm *c, const float *send, float *recv, size_t n) {
    tcp_state *t = c->impl;
    start_clock(c, t);
    if (c->size == 1) {
        if (n && recv != send) memcpy(recv, send, n * sizeof *recv);
        return LF_OK;
    }
    size_t s = round_elems(c), off, cnt;
    lf_comm_partition(n, c->size, c->rank, &off, &cnt);
    for (size_t a = 0; a < n; a += s) {
        size_t len = n - a < s ? n - a : s, e = a + len;
        size_t lo = hi_of(off, a), hi = lo_of(off + cnt, e);
        if (hi < lo) hi = lo;
        lf_status st;
        if (c->rank != 0) {
            st = peer_round(c, t, hi > lo ? send + (lo - off) : NULL, (hi - lo) * sizeof(float), recv + a,
                            len * sizeof(float));
            if (st != LF_OK) return st;
            continue;
        }
        for (int i = 0; i < t->nconn; i++) {
            size_t qo, qc;
            lf_comm_partition(n, c->size, t->conns[i].rank, &qo, &qc);
            size_t ql = hi_of(qo, a), qh = lo_of(qo + qc, e);
            if (qh < ql) qh = ql;
            post_recv(&t->conns[i], recv + ql, (qh - ql) * sizeof(float));
        }
        if (hi > lo && send + (lo - off) != recv + lo) memcpy(recv + lo, send + (lo - off), (hi - lo) * sizeof(float));
        if ((st = run(c, t)) != LF_OK) return st;
        if ((st = hub_send_all(c, t, recv + a, len * sizeof(float))) != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status tcp_broadcast(lf_comm *c, void *buf, size_t bytes, int root) {
    tcp_state *t = c->impl;
    start_clock(c, t);
    if (c->size == 1) return LF_OK;
    size_t chunk = c->opts.segment_elems * sizeof(float);
    char *b = buf;
    for (size_t a = 0; a < bytes; a += chunk) {
        size_t len = bytes - a < chunk ? bytes - a : chunk;
        lf_status st;
        if (c->rank == root && root != 0) { /* to the hub, which acknowledges */
            st = peer_round(c, t, b + a, len, NULL, 0);
        } else if (c->rank != 0) {
            post_recv(&t->conns[0], b + a, len);
            st = run(c, t);
        } else {
            if (root != 0) {
                post_recv(&t->conns[root - 1], b + a, len);
                if ((st = run(c, t)) != LF_OK) return st;
            }
            for (int i = 0; i < t->nconn; i++)
                post_send(c, &t->conns[i], FR_DATA, 0, b + a, t->conns[i].rank == root ? 0 : len);
            st = run(c, t);
        }
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status tcp_barrier(lf_comm *c) {
    tcp_state *t = c->impl;
    start_clock(c, t);
    if (c->size == 1) return LF_OK;
    if (c->rank != 0) return peer_round(c, t, NULL, 0, NULL, 0);
    lf_status st = hub_gather_rows(c, t, NULL, 0);
    return st == LF_OK ? hub_send_all(c, t, NULL, 0) : st;
}

/* n 8-byte values: gathered on the hub, folded there by fold, sent back. */
static lf_status small_reduce(lf_comm *c, void *v, size_t n, lf_comm_op op, int is_f64) {
    tcp_state *t = c->impl;
    start_clock(c, t);
    if (c->size == 1 || n == 0) return LF_OK;
    size_t bytes = n * 8;
    if (c->rank != 0) return peer_round(c, t, v, bytes, v, bytes);
    lf_status st = need_scratch(c, t, (size_t)c->size * bytes);
    if (st != LF_OK) return st;
    memcpy(t->scratch, v, bytes);
    if ((st = hub_gather_rows(c, t, t->scratch, bytes)) != LF_OK) return st;
    if (is_f64) lf__comm_reduce_f64(v, t->scratch, n, c->size, n, op);
    else lf__comm_reduce_i64(v, t->scratch, n, c->size, n, op);
    return hub_send_all(c, t, v, bytes);
}

static lf_status tcp_all_reduce_f64(lf_comm *c, double *v, size_t n, lf_comm_op op) {
    return small_reduce(c, v, n, op, 1);
}

static lf_status tcp_all_reduce_i64(lf_comm *c, int64_t *v, size_t n, lf_comm_op op) {
    return small_reduce(c, v, n, op, 0);
}

/* ---------------------------------------------------------------- open / close */
static const char *env_get(const lf_comm *c, const char *name) {
    const char *v = c->opts.getenv_fn ? c->opts.getenv_fn(name, c->opts.getenv_user) : getenv(name);
    return v && *v ? v : NULL;
}

/* MASTER_ADDR and MASTER_PORT: torchrun's, as rank discovery read them, or
 * exported next to another launcher's rank variables (srun + a script). */
static lf_status agent_store_port(const lf_comm *c, int *port) {
    /* torchrun's agent can host a TCPStore of its own on MASTER_PORT for its
     * workers (it says so with TORCHELASTIC_USE_AGENT_STORE=True): the port
     * is taken, so rank 0 listens on the next one */
    const char *v = env_get(c, "TORCHELASTIC_USE_AGENT_STORE");
    if (!v || strcmp(v, "True") != 0) return LF_OK;
    if (*port >= 65535)
        return lf_fail(LF_ERR_CONFIG,
                       "tcp communicator: MASTER_PORT=%d is torchrun's agent store "
                       "(TORCHELASTIC_USE_AGENT_STORE=True) and the rendezvous would use the next port, beyond 65535",
                       *port);
    ++*port;
    return LF_OK;
}

static lf_status master(const lf_comm *c, const char **addr, int *port) {
    const lf_comm_env *e = &c->env;
    if (e->launcher == LF_COMM_LAUNCHER_TORCHRUN) {
        *addr = e->master_addr;
        *port = e->master_port;
        return agent_store_port(c, port);
    }
    const char *a = env_get(c, "MASTER_ADDR"), *p = env_get(c, "MASTER_PORT");
    if (!a || !p)
        return lf_fail(LF_ERR_CONFIG,
                       "tcp communicator: %s is not set (launched by %s with %d ranks): the tcp "
                       "rendezvous needs MASTER_ADDR and MASTER_PORT, which torchrun and `llmforge launch "
                       "--rdzv tcp` set",
                       !a ? "MASTER_ADDR" : "MASTER_PORT", lf_comm_launcher_name(e->launcher), e->size);
    char *end = NULL;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || *end || errno || v < 1 || v > 65535)
        return lf_fail(LF_ERR_CONFIG, "tcp communicator: MASTER_PORT='%s' is not a port in 1..65535", p);
    *addr = a;
    *port = (int)v;
    return agent_store_port(c, port);
}

static void free_state(tcp_state *t) {
    if (!t) return;
    lf__rdzv_close(t->rz);
    if (t->conns)
        for (int i = 0; i < t->nconn; i++) lf_free(t->conns[i].ctl);
    lf_free(t->conns);
    lf_free(t->pfd);
    lf_free(t->scratch);
    lf_free(t);
}

static lf_status tcp_open(lf_comm *c) {
    c->rank = c->env.rank;
    c->size = c->env.size;
    const char *addr = "";
    int port = 0;
    lf_status st = c->size > 1 ? master(c, &addr, &port) : LF_OK;
    if (st != LF_OK) return st;
    tcp_state *t = lf_calloc(sizeof *t);
    if (!t) return LF_ERR_NOMEM;
    t->bad = -1;
    c->coll = LF_COMM_COLL_OPEN;
    if ((st = lf__rdzv_join(&t->rz, addr, port, c->rank, c->size, c->opts.timeout_s)) != LF_OK) goto fail;
    t->nconn = c->size == 1 ? 0 : c->rank == 0 ? c->size - 1 : 1;
    t->conns = lf_calloc((size_t)(t->nconn ? t->nconn : 1) * sizeof *t->conns);
    t->pfd = lf_calloc((size_t)(t->nconn ? t->nconn : 1) * sizeof *t->pfd);
    if (!t->conns || !t->pfd) {
        st = LF_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < t->nconn; i++) {
        int p = c->rank == 0 ? i + 1 : 0;
        t->conns[i].rank = p;
        t->conns[i].fd = t->rz->fd[p];
    }
    /* the launcher's local rank and size (torchrun's LOCAL_RANK and
     * LOCAL_WORLD_SIZE), else the ranks on a host of our name */
    if (c->env.local_rank >= 0 && c->env.local_size > 0 && c->env.local_rank < c->env.local_size) {
        c->local_rank = c->env.local_rank;
        c->local_size = c->env.local_size;
    } else {
        c->local_rank = 0;
        c->local_size = 0;
        for (int p = 0; p < c->size; p++)
            if (strcmp(t->rz->host[p], t->rz->host[c->rank]) == 0) {
                if (p < c->rank) c->local_rank++;
                c->local_size++;
            }
    }
    c->impl = t;
    return LF_OK;
fail:
    free_state(t);
    return st;
}

static void tcp_close(lf_comm *c) {
    /* no transfer outlives its call here (unlike MPI's), so a failed handle
     * is freed like any other; the peers see the sockets close, after what
     * they sent was read (no reset over this rank's last words) */
    tcp_state *t = c->impl;
    if (t && c->failed != LF_OK && !t->lingered) linger(t, 1.0);
    free_state(c->impl);
    c->impl = NULL;
}

/* Tell every rank this one ends the job, and shut the connections: the
 * peers' current or next collective fails at once naming this rank. The
 * processes elsewhere end themselves (their callers abort in turn); the
 * caller exits this one. */
static lf_status tcp_abort(lf_comm *c, int code) {
    tcp_state *t = c->impl;
    if (!t) return LF_OK;
    char msg[CTL_MAX];
    snprintf(msg, sizeof msg, "rank %d ended the job (exit code %d)%s%s", c->rank, code, c->errmsg[0] ? " after: " : "",
             c->errmsg);
    t->bad = -1;
    if (c->rank == 0) {
        hub_tell_all(c, t, LF_ERR_IO, msg);
    } else if (t->nconn && !t->conns[0].wposted) {
        snprintf(t->fail_out, sizeof t->fail_out, "%s", msg);
        post_send(c, &t->conns[0], FR_FAIL, LF_ERR_IO, t->fail_out, strlen(t->fail_out));
        flush_writes(c, t, lf__comm_now_s() + 1.0);
    }
    linger(t, 1.0);
    t->lingered = 1;
    return LF_OK;
}

const struct lf_comm_ops lf__comm_tcp_ops = {
    .name = "tcp",
    .device_buffers = 0,
    .open = tcp_open,
    .close = tcp_close,
    .abort = tcp_abort,
    .all_reduce = tcp_all_reduce,
    .reduce_scatter = tcp_reduce_scatter,
    .all_gather = tcp_all_gather,
    .broadcast = tcp_broadcast,
    .barrier = tcp_barrier,
    .all_reduce_f64 = tcp_all_reduce_f64,
    .all_reduce_i64 = tcp_all_reduce_i64,
};
