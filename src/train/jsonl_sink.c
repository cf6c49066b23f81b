/*
 * The log.jsonl sink: one JSON object per line for every record on the
 * trainer's bus, flushed line by line (a crash loses nothing written).
 *
 *   train  {"type":"train","step":S,"loss":L,"lr":..,"grad_norm":..,"tokens_per_sec":..,"ms":..,
 *           ...every other scalar under its tag, e.g. "train/mfu":.., "time/forward_ms":..}
 *   eval   {"type":"eval","step":S,"train_loss":..,"val_loss":.., ...other eval/ tags}
 *   event  {"type":"<event name>","step":S,"time":<unix seconds>, ...the record's JSON fields}
 *
 * Numbers read back as the value published: a double with the fewest digits
 * that strtod turns back into it (lf_json_number, at most 17); a value that
 * is exactly a float (the learning rate, say) with the fewest that read back
 * as that float (at most 9: "0.0006", not 0.00060000002849847078). Non-finite
 * values, which JSON cannot hold, as null. It lives with the trainer because
 * the train/eval line layout is the trainer's contract (docs/file-formats.md, bench
 * scripts).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/obs.h"
#include "train_impl.h"

typedef struct jsonl_sink {
    lf_obs_sink base;
    FILE *f;
    int failed;
    char path[1024];
} jsonl_sink;

static void put_num(FILE *f, double v) {
    char buf[LF_JSON_NUMBER_MAX];
    if (isfinite(v) && fabs(v) <= FLT_MAX && (double)(float)v == v && v != floor(v)) {
        /* %.Ng is the nearest N-digit decimal: the first that reads back is the shortest */
        for (int prec = 1; prec <= 9; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, v);
            if ((float)strtod(buf, NULL) == (float)v) break;
        }
    } else {
        lf_json_number(buf, sizeof buf, v);
    }
    fputs(buf, f);
}

static const lf_obs_scalar *find(const lf_obs_record *r, const char *tag) {
    for (int i = 0; i < r->n_scalars; i++)
        if (strcmp(r->scalars[i].tag, tag) == 0) return &r->scalars[i];
    return NULL;
}

static void put_rest(FILE *f, const lf_obs_record *r, const char *const *skip, int n_skip) {
    for (int i = 0; i < r->n_scalars; i++) {
        int skipped = 0;
        for (int k = 0; k < n_skip; k++) skipped |= strcmp(r->scalars[i].tag, skip[k]) == 0;
        if (skipped) continue;
        fprintf(f, ",\"%s\":", r->scalars[i].tag);
        put_num(f, r->scalars[i].value);
    }
}

static void jsonl_emit(lf_obs_sink *s, const lf_obs_record *r) {
    jsonl_sink *j = (jsonl_sink *)s;
    if (j->failed) return;
    FILE *f = j->f;
    if (r->kind == LF_OBS_TRAIN) {
        static const char *const fixed[] = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_sec",
                                            "time/step_ms"};
        static const char *const keys[] = {"loss", "lr", "grad_norm", "tokens_per_sec", "ms"};
        fprintf(f, "{\"type\":\"train\",\"step\":%ld", r->step);
        for (int k = 0; k < 5; k++) {
            const lf_obs_scalar *v = find(r, fixed[k]);
            fprintf(f, ",\"%s\":", keys[k]);
            put_num(f, v ? v->value : NAN);
        }
        put_rest(f, r, fixed, 5);
        fputs("}\n", f);
    } else if (r->kind == LF_OBS_EVAL) {
        static const char *const fixed[] = {"eval/train_loss", "eval/val_loss"};
        fprintf(f, "{\"type\":\"eval\",\"step\":%ld,\"train_loss\":", r->step);
        const lf_obs_scalar *tl = find(r, fixed[0]), *vl = find(r, fixed[1]);
        put_num(f, tl ? tl->value : NAN);
        fputs(",\"val_loss\":", f);
        put_num(f, vl ? vl->value : NAN);
        put_rest(f, r, fixed, 2);
        fputs("}\n", f);
    } else {
        fprintf(f, "{\"type\":\"%s\",\"step\":%ld,\"time\":", r->event ? r->event : "event", r->step);
        put_num(f, r->wall_time);
        if (r->json) {
            /* merge the fields of the record's JSON object */
            const char *a = strchr(r->json, '{'), *b = strrchr(r->json, '}');
            if (a && b && b > a + 1) {
                const char *p = a + 1;
                while (p < b && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
                if (p < b) {
                    fputc(',', f);
                    fwrite(p, 1, (size_t)(b - p), f);
                }
            }
        }
        fputs("}\n", f);
    }
    if (fflush(f) != 0 || ferror(f)) {
        j->failed = 1;
        lf_log(LF_LOG_ERROR, "log '%s': write failed (%s); no further records are written", j->path, strerror(errno));
    }
}

static void jsonl_flush(lf_obs_sink *s) {
    jsonl_sink *j = (jsonl_sink *)s;
    if (j->f) fflush(j->f);
}

static void jsonl_close(lf_obs_sink *s) {
    jsonl_sink *j = (jsonl_sink *)s;
    if (j->f) fclose(j->f);
    free(j);
}

lf_status lf__jsonl_sink_open(lf_obs_sink **out, const char *path, int append) {
    *out = NULL;
    jsonl_sink *j = calloc(1, sizeof *j);
    if (!j) return lf_fail(LF_ERR_NOMEM, "out of memory opening '%s'", path);
    snprintf(j->path, sizeof j->path, "%s", path);
    j->f = fopen(path, append ? "a" : "w");
    if (!j->f) {
        lf_status st = lf_fail(LF_ERR_IO, "cannot open '%s' for writing: %s", path, strerror(errno));
        free(j);
        return st;
    }
    j->base.name = "jsonl";
    j->base.emit = jsonl_emit;
    j->base.flush = jsonl_flush;
    j->base.close = jsonl_close;
    j->base.impl = j;
    *out = &j->base;
    return LF_OK;
}
