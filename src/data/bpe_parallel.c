/*
 * Multi-threaded encoding of one large text (lf_tokenizer_encode_parallel).
 *
 * The text is cut into parts at positions the tokenizer kind declares safe
 * (ops->cut: encoding the two sides separately gives the ids of the whole;
 * for byte-level BPE see lf__bpe_cut in bpe_pretok.c), about 8 parts per
 * thread and at least 64 KiB each so that a slow part does not hold the
 * others back. POSIX threads (the data module does not link OpenMP) take
 * parts from an atomic counter; the calling thread works too. The ids are
 * concatenated in text order, so the result equals the serial call's.
 *
 * Errors: each part records its status and the message its thread left
 * (lf_last_error is per thread); the first failing part in text order is
 * reported, with offsets relative to the whole text (ops->encode_ex takes
 * the part's base offset), so the message equals the serial call's.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

#define MIN_PART_BYTES (64u << 10)
#define PARTS_PER_THREAD 8

typedef struct part {
    size_t begin, end;
    uint32_t *ids;
    size_t n;
    lf_status st;
    char *msg;
} part;

typedef struct job {
    const lf__tokenizer_ops *ops;
    const void *state;
    const char *text;
    const lf_encode_opts *opts;
    part *parts;
    size_t n_parts;
    atomic_size_t next;
} job;

static void *worker(void *arg) {
    job *j = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_parts) break;
        part *p = &j->parts[i];
        p->st = j->ops->encode_ex(j->state, j->text + p->begin, p->end - p->begin, j->opts, p->begin, &p->ids, &p->n);
        if (p->st != LF_OK) p->msg = strdup(lf_last_error());
    }
    return NULL;
}

static lf_status serial(const lf__tokenizer_ops *ops, const void *state, const char *text, size_t len,
                        const lf_encode_opts *opts, uint32_t **ids, size_t *n) {
    if (ops->encode_ex) return ops->encode_ex(state, text, len, opts, 0, ids, n);
    if (opts->invalid_utf8 != LF_UTF8_STRICT)
        return lf_fail(LF_ERR_UNSUPPORTED, "tokenizer '%s': only strict UTF-8 is supported", ops->prefix);
    return ops->encode(state, text, len, ids, n);
}

lf_status lf__tokenizer_encode_parallel(const lf__tokenizer_ops *ops, const void *state, const char *text, size_t len,
                                        const lf_encode_opts *opts, int n_threads, uint32_t **ids, size_t *n) {
    if (n_threads > 1024) n_threads = 1024;
    if (n_threads <= 1 || !ops->cut || !ops->encode_ex || len < 2 * (size_t)MIN_PART_BYTES)
        return serial(ops, state, text, len, opts, ids, n);
    size_t want = (size_t)n_threads * PARTS_PER_THREAD;
    if (want > len / MIN_PART_BYTES) want = len / MIN_PART_BYTES;
    job j = {.ops = ops, .state = state, .text = text, .opts = opts};
    j.parts = calloc(want, sizeof *j.parts);
    pthread_t *th = calloc((size_t)n_threads, sizeof *th);
    lf_status st = LF_OK;
    if (!j.parts || !th) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory encoding %zu bytes on %d threads", len, n_threads);
        goto done;
    }
    size_t at = 0;
    for (size_t k = 1; k <= want && at < len; k++) {
        size_t target = k == want ? len : len / want * k;
        size_t c = target <= at ? at + 1 : target;
        c = c >= len ? len : ops->cut(state, text, len, c);
        j.parts[j.n_parts++] = (part){.begin = at, .end = c};
        at = c;
    }
    atomic_init(&j.next, 0);
    int started = 0;
    for (int k = 0; k < n_threads - 1; k++) {
        if (pthread_create(&th[k], NULL, worker, &j) != 0) break; /* fewer threads, same result */
        started++;
    }
    worker(&j);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    size_t total = 0;
    for (size_t i = 0; i < j.n_parts; i++) {
        if (j.parts[i].st != LF_OK) {
            st = lf_fail(j.parts[i].st, "%s", j.parts[i].msg ? j.parts[i].msg : lf_status_str(j.parts[i].st));
            goto done;
        }
        total += j.parts[i].n;
    }
    uint32_t *out = lf_alloc(total * sizeof *out);
    if (!out) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory for %zu token ids", total);
        goto done;
    }
    size_t m = 0;
    for (size_t i = 0; i < j.n_parts; i++) {
        if (j.parts[i].n) memcpy(out + m, j.parts[i].ids, j.parts[i].n * sizeof *out);
        m += j.parts[i].n;
    }
    *ids = out;
    *n = total;
done:
    if (j.parts)
        for (size_t i = 0; i < j.n_parts; i++) {
            lf_free(j.parts[i].ids);
            free(j.parts[i].msg);
        }
    free(j.parts);
    free(th);
    return st;
}
