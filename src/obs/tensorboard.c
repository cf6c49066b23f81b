/*
 * TensorBoard sink: writes scalar records as a TensorFlow event file that
 * TensorBoard (and anything reading tfevents) loads as is.
 *
 * File: <dir>[/<job_name>]/events.out.tfevents.<unix seconds, 10 digits>.<hostname>
 * (the name TensorFlow's EventsWriter and tensorboardX use; if that name is
 * taken, ".1", ".2", ... is appended rather than overwriting another run).
 *
 * Format, byte by byte:
 *   file   = record*
 *   record = u64 LE length n | u32 LE masked_crc32c(the 8 length bytes)
 *          | n bytes data    | u32 LE masked_crc32c(data)
 *     (TFRecord: tensorflow/core/lib/io/record_writer.cc; masked_crc32c(x) =
 *      rotr15(crc32c(x)) + 0xa282ead8, tensorflow/core/lib/hash/crc32c.h)
 *   data   = a serialized tensorflow.Event (tensorflow/core/util/event.proto,
 *            tensorflow/core/framework/summary.proto):
 *     Event         { double wall_time = 1; int64 step = 2;
 *                     oneof what { string file_version = 3; Summary summary = 5; } }
 *     Summary       { repeated Value value = 1; }
 *     Summary.Value { string tag = 1; oneof value { float simple_value = 2; } }
 *   Protobuf wire format (https://protobuf.dev/programming-guides/encoding/):
 *   each field is a key varint (field_number << 3 | wire_type) then its
 *   payload; wire type 0 varint (step, two's complement for negatives:
 *   10 bytes), 1 fixed64 LE (wall_time), 2 length-delimited (strings and
 *   sub-messages: varint length, bytes), 5 fixed32 LE (simple_value).
 *   Encoded canonically, as protobuf's own serializer does: fields in number
 *   order, proto3 zero values of wall_time and step omitted, oneof members
 *   always written (so simple_value 0.0 is present) — tools/check_tensorboard.py
 *   checks every record re-serializes to the same bytes.
 *
 * Records: first Event{wall_time, file_version: "brain.Event:2"} (written and
 * flushed at open, so even an empty run leaves a loadable file); then one
 * Event per TRAIN or EVAL record, at r->step and r->wall_time (now, when the
 * record has none), its Summary holding every scalar in order. EVENT
 * records carry no scalars worth plotting and are not written.
 *
 * Buffering: records are encoded into memory and written with write(2) when
 * flush_secs have passed since the last write (checked at each emit), when
 * 256 KiB are pending, and at flush/close. The sink never blocks training on
 * a timer or thread of its own.
 *
 * Errors name the file or directory and leave the module's name to the
 * caller's lf_error_prefix (the trainer adds "tensorboard").
 *
 * Failure: a write error (disk full, file system gone) is remembered with a
 * message naming the file, logged once at WARN, and the sink stops writing
 * and drops later records; training goes on. lf_obs_sink_error reports it.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "obs/obs_impl.h"

#define TB_FILE_VERSION "brain.Event:2"
#define TB_DEFAULT_FLUSH_SECS 5.0
#define TB_FLUSH_BYTES (256u * 1024u)
#define TB_HEADER_BYTES 12 /* u64 length + u32 crc */
#define TB_FOOTER_BYTES 4  /* u32 crc */

/* ---------------------------------------------------------------- encoding */

void lf__tb_buf_free(lf__tb_buf *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static lf_status buf_reserve(lf__tb_buf *b, size_t extra) {
    if (extra > SIZE_MAX / 4 - b->len) return lf_fail(LF_ERR_NOMEM, "event of %zu bytes is too large", extra);
    size_t need = b->len + extra;
    if (need <= b->cap) return LF_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) return lf_fail(LF_ERR_NOMEM, "out of memory buffering %zu bytes of events", need);
    b->data = p;
    b->cap = cap;
    return LF_OK;
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + bytes;
}

static uint64_t double_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* double -> float with IEEE round-to-nearest, overflowing to +-inf; written
 * out because C leaves an out-of-range conversion undefined. Values at or
 * beyond FLT_MAX + half an ulp (2^128 - 2^103) round to infinity. */
static float to_float(double v) {
    const double overflow = 0x1.ffffffp127;
    if (v >= overflow) return INFINITY;
    if (v <= -overflow) return -INFINITY;
    return (float)v;
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Reserve a framed record of n data bytes, write its header and return where
 * the data goes; frame_end then checksums the data and commits the record. */
static uint8_t *frame_begin(lf__tb_buf *b, size_t n, lf_status *st) {
    *st = buf_reserve(b, TB_HEADER_BYTES + n + TB_FOOTER_BYTES);
    if (*st != LF_OK) return NULL;
    uint8_t *p = b->data + b->len;
    put_le(p, (uint64_t)n, 8);
    put_le(p + 8, lf__crc32c_mask(lf__crc32c(0, p, 8)), 4);
    return p + TB_HEADER_BYTES;
}

static void frame_end(lf__tb_buf *b, size_t n) {
    uint8_t *data = b->data + b->len + TB_HEADER_BYTES;
    put_le(data + n, lf__crc32c_mask(lf__crc32c(0, data, n)), 4);
    b->len += TB_HEADER_BYTES + n + TB_FOOTER_BYTES;
}

/* wall_time (field 1, fixed64) and step (field 2, varint), proto3: zeros omitted */
static size_t head_len(double wall_time, long step) {
    return (double_bits(wall_time) ? 1 + 8 : 0) + (step ? 1 + varint_len((uint64_t)(int64_t)step) : 0);
}

static uint8_t *put_head(uint8_t *p, double wall_time, long step) {
    if (double_bits(wall_time)) {
        *p++ = (1 << 3) | 1;
        p = put_le(p, double_bits(wall_time), 8);
    }
    if (step) {
        *p++ = (2 << 3) | 0;
        p = put_varint(p, (uint64_t)(int64_t)step);
    }
    return p;
}

lf_status lf__tb_append_file_version(lf__tb_buf *b, double wall_time, const char *version) {
    size_t vl = strlen(version);
    size_t n = head_len(wall_time, 0) + 1 + varint_len(vl) + vl;
    lf_status st;
    uint8_t *p = frame_begin(b, n, &st);
    if (!p) return st;
    p = put_head(p, wall_time, 0);
    *p++ = (3 << 3) | 2; /* file_version */
    p = put_varint(p, vl);
    memcpy(p, version, vl);
    frame_end(b, n);
    return LF_OK;
}

static int scalar_ok(const lf_obs_scalar *s) { return s->tag && s->tag[0]; }

/* Summary.Value{tag, simple_value}: 1 + varint(len) + len + 1 + 4 */
static size_t value_len(const lf_obs_scalar *s) {
    size_t tl = strlen(s->tag);
    return 1 + varint_len(tl) + tl + 1 + 4;
}

lf_status lf__tb_append_scalars(lf__tb_buf *b, double wall_time, long step, const lf_obs_scalar *scalars,
                                int n_scalars) {
    size_t summary = 0;
    for (int i = 0; i < n_scalars; i++) {
        if (!scalar_ok(&scalars[i])) continue;
        size_t vl = value_len(&scalars[i]);
        summary += 1 + varint_len(vl) + vl;
    }
    if (summary == 0) return LF_OK;
    size_t n = head_len(wall_time, step) + 1 + varint_len(summary) + summary;
    lf_status st;
    uint8_t *p = frame_begin(b, n, &st);
    if (!p) return st;
    p = put_head(p, wall_time, step);
    *p++ = (5 << 3) | 2; /* summary */
    p = put_varint(p, summary);
    for (int i = 0; i < n_scalars; i++) {
        const lf_obs_scalar *s = &scalars[i];
        if (!scalar_ok(s)) continue;
        size_t tl = strlen(s->tag);
        *p++ = (1 << 3) | 2; /* Summary.value */
        p = put_varint(p, value_len(s));
        *p++ = (1 << 3) | 2; /* Value.tag */
        p = put_varint(p, tl);
        memcpy(p, s->tag, tl);
        p += tl;
        *p++ = (2 << 3) | 5; /* Value.simple_value */
        p = put_le(p, float_bits(to_float(s->value)), 4);
    }
    frame_end(b, n);
    return LF_OK;
}

/* ---------------------------------------------------------------- the sink */

typedef struct tb_sink {
    lf_obs_sink base; /* base.impl points back here */
    int fd;
    char *path;
    lf__tb_buf pending;
    double flush_secs;
    double last_write; /* lf_time_now() of the last write */
    int failed;
    char err[1024 + 64];
    int fault_after; /* test hook: 0 = off, else the k-th write fails */
} tb_sink;

static void tb_stop(tb_sink *t, const char *what, int errnum) {
    if (t->failed) return;
    t->failed = 1;
    snprintf(t->err, sizeof t->err, "event file '%s': %s%s%s", t->path, what, errnum ? ": " : "",
             errnum ? strerror(errnum) : "");
    lf__tb_buf_free(&t->pending);
    lf_log(LF_LOG_WARN, "%s; no more TensorBoard events will be written", t->err);
}

/* Write everything pending; on failure stop the sink. */
static void tb_write_pending(tb_sink *t) {
    if (t->failed) return;
    const uint8_t *p = t->pending.data;
    size_t left = t->pending.len;
    while (left > 0) {
        ssize_t w;
        if (t->fault_after > 0 && --t->fault_after == 0) {
            w = -1;
            errno = EIO;
        } else {
            w = write(t->fd, p, left);
        }
        if (w < 0) {
            if (errno == EINTR) continue;
            tb_stop(t, "write failed", errno);
            return;
        }
        p += w;
        left -= (size_t)w;
    }
    t->pending.len = 0;
    t->last_write = lf_time_now();
}

static void tb_emit(lf_obs_sink *s, const lf_obs_record *r) {
    tb_sink *t = s->impl;
    if (t->failed || (r->kind != LF_OBS_TRAIN && r->kind != LF_OBS_EVAL) || !r->scalars) return;
    double wall = r->wall_time > 0 ? r->wall_time : lf_obs_wall_time();
    if (lf__tb_append_scalars(&t->pending, wall, r->step, r->scalars, r->n_scalars) != LF_OK) {
        tb_stop(t, "out of memory buffering events", 0);
        return;
    }
    if (t->pending.len >= TB_FLUSH_BYTES || lf_time_now() - t->last_write >= t->flush_secs) tb_write_pending(t);
}

static void tb_flush(lf_obs_sink *s) {
    tb_sink *t = s->impl;
    if (t->pending.len) tb_write_pending(t);
}

static const char *tb_error(lf_obs_sink *s) {
    tb_sink *t = s->impl;
    return t->failed ? t->err : NULL;
}

static void tb_close(lf_obs_sink *s) {
    if (!s) return;
    tb_sink *t = s->impl;
    tb_flush(s);
    if (t->fd >= 0) close(t->fd); /* nothing left to report an error to */
    lf__tb_buf_free(&t->pending);
    free(t->path);
    free(t);
}

/* Create the sink on `path` (exclusive: fail if it exists, setting *exists;
 * else truncate) and write the file_version event. On failure nothing is
 * left open. */
static lf_status tb_create(lf_obs_sink **out, const char *path, int excl, int *exists, double wall_time,
                           double flush_secs) {
    if (exists) *exists = 0;
    tb_sink *t = calloc(1, sizeof *t);
    if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory opening an event file");
    t->fd = -1;
    t->path = strdup(path);
    if (!t->path) {
        free(t);
        return lf_fail(LF_ERR_NOMEM, "out of memory opening an event file");
    }
    t->flush_secs = (flush_secs > 0 && isfinite(flush_secs)) ? flush_secs : TB_DEFAULT_FLUSH_SECS;
    t->base.name = "tensorboard";
    t->base.emit = tb_emit;
    t->base.flush = tb_flush;
    t->base.close = tb_close;
    t->base.error = tb_error;
    t->base.impl = t;

    lf_status st;
    t->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (excl ? O_EXCL : O_TRUNC), 0644);
    if (t->fd < 0) {
        int e = errno;
        if (exists) *exists = (e == EEXIST);
        st = lf_fail(LF_ERR_IO, "cannot create event file '%s': %s", path, strerror(e));
        goto fail;
    }
    st = lf__tb_append_file_version(&t->pending, wall_time, TB_FILE_VERSION);
    if (st != LF_OK) goto fail;
    tb_write_pending(t);
    if (t->failed) {
        st = lf_fail(LF_ERR_IO, "%s", t->err);
        goto fail;
    }
    *out = &t->base;
    return LF_OK;
fail:
    tb_close(&t->base);
    return st;
}

lf_status lf__tb_open_path(lf_obs_sink **out, const char *path, double wall_time, double flush_secs) {
    if (!out || !path || !path[0]) return lf_fail(LF_ERR_INVALID_ARG, "no path for the event file");
    *out = NULL;
    return tb_create(out, path, 0, NULL, wall_time, flush_secs);
}

const char *lf__tb_path(const lf_obs_sink *s) {
    if (!s || s->close != tb_close) return NULL;
    return ((const tb_sink *)s->impl)->path;
}

void lf__tb_fail_write_after(lf_obs_sink *s, int k) {
    if (!s || s->close != tb_close) return;
    ((tb_sink *)s->impl)->fault_after = k > 0 ? k : 0;
}

lf_status lf_obs_tensorboard_open(lf_obs_sink **out, const char *dir, const char *job_name, double flush_secs) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_obs_tensorboard_open: out is NULL");
    *out = NULL;
    if (!dir || !dir[0]) return lf_fail(LF_ERR_INVALID_ARG, "no directory for event files");

    char *full = NULL, *path = NULL;
    lf_status st;
    int has_job = job_name && job_name[0];
    size_t n = strlen(dir) + (has_job ? 1 + strlen(job_name) : 0) + 1;
    full = malloc(n);
    if (!full) return lf_fail(LF_ERR_NOMEM, "out of memory opening an event file");
    snprintf(full, n, "%s%s%s", dir, has_job ? "/" : "", has_job ? job_name : "");
    st = lf_mkdirs(full); /* its message names the directory */
    if (st != LF_OK) goto done;

    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    double now = lf_obs_wall_time();
    long secs = (long)floor(now);

    size_t pn = strlen(full) + strlen(host) + 64;
    path = malloc(pn);
    if (!path) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory opening an event file");
        goto done;
    }
    /* Another writer may already use this second's name (two sinks, a
     * restart): take the next free suffix instead of overwriting it. */
    for (int k = 0; k < 100; k++) {
        if (k == 0) snprintf(path, pn, "%s/events.out.tfevents.%010ld.%s", full, secs, host);
        else snprintf(path, pn, "%s/events.out.tfevents.%010ld.%s.%d", full, secs, host, k);
        int exists;
        st = tb_create(out, path, 1, &exists, now, flush_secs);
        if (st == LF_OK || !exists) break;
    }
done:
    free(path);
    free(full);
    return st;
}
