/*
 * The observability bus: a fixed list of sinks that every record is handed
 * to, in the order the sinks were added (include/llmforge/obs.h is the
 * contract).
 *
 * Invariants:
 *   - the bus owns its sinks from lf_obs_add_sink on, even when adding fails
 *     (the sink is then closed at once), so a caller never has to clean up a
 *     sink it passed in;
 *   - lf_obs_free flushes every sink once, then closes every sink once;
 *   - not thread-safe: one thread (the training thread) emits, flushes and
 *     frees. A sink that serves other threads (Prometheus) locks itself.
 */
#include <stdlib.h>
#include <time.h>
#include "llmforge/obs.h"

#define LF_OBS_MAX_SINKS 16

struct lf_obs {
    lf_obs_sink *sinks[LF_OBS_MAX_SINKS];
    int n;
};

lf_status lf_obs_create(lf_obs **out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_obs_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return lf_fail(LF_ERR_NOMEM, "out of memory creating the metrics bus");
    return LF_OK;
}

lf_status lf_obs_add_sink(lf_obs *o, lf_obs_sink *sink) {
    if (!sink) return lf_fail(LF_ERR_INVALID_ARG, "lf_obs_add_sink: sink is NULL");
    const char *name = sink->name ? sink->name : "(unnamed)";
    if (!sink->close) {
        /* nothing can release it; the caller broke the contract */
        return lf_fail(LF_ERR_INVALID_ARG, "metrics sink '%s' has no close function", name);
    }
    lf_status st = LF_OK;
    if (!o) st = lf_fail(LF_ERR_INVALID_ARG, "lf_obs_add_sink: bus is NULL (sink '%s' closed)", name);
    else if (o->n >= LF_OBS_MAX_SINKS)
        st = lf_fail(LF_ERR_RANGE, "metrics bus is full (%d sinks): sink '%s' closed", LF_OBS_MAX_SINKS, name);
    if (st != LF_OK) {
        sink->close(sink);
        return st;
    }
    o->sinks[o->n++] = sink;
    return LF_OK;
}

void lf_obs_emit(lf_obs *o, const lf_obs_record *r) {
    if (!o || !r) return;
    for (int i = 0; i < o->n; i++)
        if (o->sinks[i]->emit) o->sinks[i]->emit(o->sinks[i], r);
}

void lf_obs_flush(lf_obs *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++)
        if (o->sinks[i]->flush) o->sinks[i]->flush(o->sinks[i]);
}

void lf_obs_free(lf_obs *o) {
    if (!o) return;
    lf_obs_flush(o);
    for (int i = 0; i < o->n; i++) o->sinks[i]->close(o->sinks[i]);
    free(o);
}

const char *lf_obs_sink_error(lf_obs_sink *s) {
    if (!s || !s->error) return NULL;
    return s->error(s);
}

double lf_obs_wall_time(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (double)time(NULL);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
