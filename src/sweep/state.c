/*
 * The sweep directory's state file, a trial's `llmforge train` arguments,
 * and what a trial's run directory says (its log.jsonl's evaluations, its
 * latest checkpoint's step).
 *
 * Why a JSON file rewritten whole rather than an append-only journal: the
 * state is small (a record per trial), every reader wants all of it, and a
 * rename is the one atomic step POSIX gives: state.json is written to
 * state.json.tmp, fsynced, renamed over the old one and the directory
 * fsynced, so a driver killed at any instant leaves the old state or the
 * new one, never a torn file. Writers serialize on a lock the caller holds
 * (tools/llmforge/cmd_sweep.c: flock on the sweep directory's lock file).
 *
 * Invariants: trial ids are 0..n-1 in array order; a trial's "x" is its
 * point (what the search methods and the trial's overrides are computed
 * from) and "params" the same point written as the values the trial's
 * configuration received (for people and for `sweep best`); a loaded state
 * is checked against the spec, so a hand-edited or damaged file is an
 * error naming the trial, never a crash or a silently different sweep.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/checkpoint.h"
#include "sweep/sweep_impl.h"

#define STATE_FORMAT "llmforge-sweep-state"
#define STATE_VERSION 1
#define STATE_MAX (256u << 20)
#define LOG_MAX (1u << 30)

lf_status lf__sweep_string_override(const char *key, const char *value, char *buf, size_t cap) {
    cJSON *s = cJSON_CreateString(value);
    char *p = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    if (!p) return lf_fail(LF_ERR_NOMEM, "out of memory");
    int n = snprintf(buf, cap, "%s=%s", key, p);
    cJSON_free(p);
    if (n < 0 || (size_t)n >= cap) return lf_fail(LF_ERR_INVALID_ARG, "sweep: the value of '%s' is too long", key);
    return LF_OK;
}

/* ---------------------------------------------------------------- saving */

static cJSON *trial_json(const lf_sweep_spec *s, const lf_sweep_trial *t) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char name[32];
    lf_sweep_trial_name(t->id, name, sizeof name);
    cJSON_AddNumberToObject(o, "id", (double)t->id);
    cJSON_AddStringToObject(o, "name", name);
    cJSON *params = cJSON_AddObjectToObject(o, "params");
    cJSON *x = cJSON_AddArrayToObject(o, "x");
    for (int d = 0; d < s->n_dims; d++) {
        char v[LF_SWEEP_OV_MAX];
        lf_sweep_value_text(s, d, t->x[d], v, sizeof v);
        cJSON *pv = cJSON_Parse(v);
        cJSON_AddItemToObject(params, s->dims[d].key, pv ? pv : cJSON_CreateNull());
        cJSON_AddItemToArray(x, cJSON_CreateNumber(t->x[d]));
    }
    cJSON_AddStringToObject(o, "state", lf_trial_state_name(t->state));
    cJSON_AddNumberToObject(o, "rung", t->rung);
    cJSON_AddNumberToObject(o, "target", t->target);
    cJSON *vals = cJSON_AddArrayToObject(o, "values");
    for (int k = 0; k <= t->rung && k < s->n_rungs; k++)
        cJSON_AddItemToArray(vals, isfinite(t->value[k]) ? cJSON_CreateNumber(t->value[k]) : cJSON_CreateNull());
    cJSON_AddNumberToObject(o, "steps", (double)t->steps);
    cJSON_AddNumberToObject(o, "attempts", t->attempts);
    cJSON_AddNumberToObject(o, "tries", t->tries);
    cJSON_AddNumberToObject(o, "seconds", t->seconds);
    cJSON_AddNumberToObject(o, "pid", (double)t->pid);
    cJSON_AddStringToObject(o, "host", t->host);
    cJSON_AddStringToObject(o, "message", t->message);
    return o;
}

lf_status lf_sweep_state_save(const char *path, const lf_sweep_spec *s, const lf_sweep_trial *trials, long n) {
    if (!path || !s || (n > 0 && !trials)) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_state_save: NULL argument");
    cJSON *root = cJSON_CreateObject();
    cJSON *sw = cJSON_Parse(s->text);
    lf_status st = LF_OK;
    char *text = NULL;
    if (!root || !sw) {
        cJSON_Delete(sw);
        st = lf_fail(LF_ERR_NOMEM, "sweep state '%s': out of memory", path);
        goto done;
    }
    cJSON_AddStringToObject(root, "format", STATE_FORMAT);
    cJSON_AddNumberToObject(root, "version", STATE_VERSION);
    cJSON_AddItemToObject(root, "sweep", sw);
    cJSON_AddStringToObject(root, "cwd", s->cwd);
    cJSON *arr = cJSON_AddArrayToObject(root, "trials");
    for (long i = 0; arr && i < n; i++) {
        cJSON *t = trial_json(s, &trials[i]);
        if (!t || !cJSON_AddItemToArray(arr, t)) {
            cJSON_Delete(t);
            st = lf_fail(LF_ERR_NOMEM, "sweep state '%s': out of memory", path);
            goto done;
        }
    }
    text = lf_json_print(root, 1);
    if (!text) {
        st = lf_fail(LF_ERR_NOMEM, "sweep state '%s': out of memory", path);
        goto done;
    }
    char tmp[LF_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if ((st = lf_file_write_all(tmp, text, strlen(text))) != LF_OK) goto done;
    if (rename(tmp, path) != 0) {
        st = lf_fail(LF_ERR_IO, "sweep state: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        goto done;
    }
    char dir[LF_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    st = lf_fsync_dir(slash ? (dir[0] ? dir : "/") : ".");
done:
    cJSON_free(text);
    cJSON_Delete(root);
    return st;
}

/* ---------------------------------------------------------------- loading */

static lf_status read_state(const char *path, cJSON **root) {
    *root = NULL;
    char *text = NULL;
    lf_status st = lf_file_read_all(path, STATE_MAX, &text, NULL);
    if (st != LF_OK) return st;
    cJSON *r = cJSON_Parse(text);
    lf_free(text);
    if (!r) return lf_fail(LF_ERR_FORMAT, "sweep state '%s' is not JSON (damaged?)", path);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(r, "format"), *v = cJSON_GetObjectItemCaseSensitive(r, "version");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, STATE_FORMAT) != 0 || !cJSON_IsNumber(v)) {
        cJSON_Delete(r);
        return lf_fail(LF_ERR_FORMAT, "'%s' is not a sweep state file (no \"format\": \"%s\")", path, STATE_FORMAT);
    }
    if (v->valuedouble != STATE_VERSION) {
        cJSON_Delete(r);
        return lf_fail(LF_ERR_UNSUPPORTED, "sweep state '%s' has version %g; this build reads version %d", path,
                       v->valuedouble, STATE_VERSION);
    }
    *root = r;
    return LF_OK;
}

lf_status lf_sweep_state_spec_text(const char *path, char **json, char **cwd) {
    if (!path || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_state_spec_text: NULL argument");
    *json = NULL;
    if (cwd) *cwd = NULL;
    cJSON *root;
    lf_status st = read_state(path, &root);
    if (st != LF_OK) return st;
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sweep"),
                *cw = cJSON_GetObjectItemCaseSensitive(root, "cwd");
    char *p = cJSON_IsObject(sw) ? lf_json_print(sw, 0) : NULL;
    if (!p || !cJSON_IsString(cw)) {
        cJSON_free(p);
        cJSON_Delete(root);
        return lf_fail(LF_ERR_FORMAT, "sweep state '%s' has no \"sweep\" object or \"cwd\"", path);
    }
    size_t n = strlen(p) + 1, m = strlen(cw->valuestring) + 1;
    *json = lf_alloc(n);
    if (*json) memcpy(*json, p, n);
    cJSON_free(p);
    if (cwd && *json && (*cwd = lf_alloc(m))) memcpy(*cwd, cw->valuestring, m);
    cJSON_Delete(root);
    if (!*json || (cwd && !*cwd)) {
        lf_free(*json);
        *json = NULL;
        return lf_fail(LF_ERR_NOMEM, "out of memory");
    }
    return LF_OK;
}

static lf_status bad_trial(const char *path, long i, const char *what) {
    return lf_fail(LF_ERR_FORMAT, "sweep state '%s': trial %ld: %s", path, i, what);
}

static int num_field(const cJSON *o, const char *key, double lo, double hi, double *v) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(f) || !(f->valuedouble >= lo && f->valuedouble <= hi)) return 0;
    *v = f->valuedouble;
    return 1;
}

lf_status lf_sweep_state_load(const char *path, const lf_sweep_spec *s, lf_sweep_trial **trials, long *n) {
    if (!path || !s || !trials || !n) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_state_load: NULL argument");
    *trials = NULL;
    *n = 0;
    cJSON *root;
    lf_status st = read_state(path, &root);
    if (st != LF_OK) return st;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "trials");
    if (!cJSON_IsArray(arr)) {
        cJSON_Delete(root);
        return lf_fail(LF_ERR_FORMAT, "sweep state '%s' has no \"trials\" list", path);
    }
    long m = cJSON_GetArraySize(arr);
    if (m > s->trials) {
        cJSON_Delete(root);
        return lf_fail(LF_ERR_FORMAT, "sweep state '%s' holds %ld trials; the sweep has %ld", path, m, s->trials);
    }
    lf_sweep_trial *t = lf_calloc(sizeof *t * (size_t)(m > 0 ? m : 1));
    if (!t) {
        cJSON_Delete(root);
        return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    long i = 0;
    for (const cJSON *o = arr->child; o; o = o->next, i++) {
        lf_sweep_trial_init(&t[i], i, NULL, 0);
        double v;
        if (!num_field(o, "id", i, i, &v)) {
            st = bad_trial(path, i, "\"id\" is not its position in the list");
            break;
        }
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "x");
        if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != s->n_dims) {
            st = bad_trial(path, i, "\"x\" does not have one number per dimension of the space");
            break;
        }
        int d = 0;
        for (const cJSON *e = x->child; e; e = e->next, d++) {
            const lf_sweep_dim *dim = &s->dims[d].pub;
            double xv = cJSON_IsNumber(e) ? e->valuedouble : NAN;
            int ok = isfinite(xv);
            if (dim->type == LF_SWEEP_DIM_GRID || dim->type == LF_SWEEP_DIM_CHOICE)
                ok = ok && xv >= 0 && xv < dim->n_values && xv == floor(xv);
            else ok = ok && xv >= dim->low && xv <= dim->high && (dim->type != LF_SWEEP_DIM_INT || xv == floor(xv));
            if (!ok) {
                char msg[200];
                snprintf(msg, sizeof msg, "\"x\"[%d] is not a value of space key '%s'", d, dim->key);
                st = bad_trial(path, i, msg);
                break;
            }
            t[i].x[d] = xv;
        }
        if (st != LF_OK) break;
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(o, "state");
        int sv = cJSON_IsString(state) ? lf_trial_state_parse(state->valuestring) : -1;
        if (sv < 0) {
            st = bad_trial(path, i, "\"state\" is not running, paused, stopped, completed or failed");
            break;
        }
        t[i].state = (lf_trial_state)sv;
        double rung, target, steps, attempts, tries, secs;
        if (!num_field(o, "rung", -1, s->n_rungs - 1, &rung) || !num_field(o, "target", 0, s->n_rungs - 1, &target) ||
            !num_field(o, "steps", 0, 1e18, &steps) || !num_field(o, "attempts", 0, 1e9, &attempts) ||
            !num_field(o, "tries", 0, 1e9, &tries) || !num_field(o, "seconds", 0, 1e15, &secs)) {
            st = bad_trial(path, i,
                           "\"rung\", \"target\", \"steps\", \"attempts\", \"tries\" or \"seconds\" is "
                           "missing or out of range for this sweep's rungs");
            break;
        }
        t[i].tries = (int)tries;
        t[i].rung = (int)rung;
        t[i].target = (int)target;
        t[i].steps = (long)steps;
        t[i].attempts = (int)attempts;
        t[i].seconds = secs;
        const cJSON *vals = cJSON_GetObjectItemCaseSensitive(o, "values");
        if (!cJSON_IsArray(vals) || cJSON_GetArraySize(vals) != t[i].rung + 1) {
            st = bad_trial(path, i, "\"values\" does not hold one value (or null) per rung reached");
            break;
        }
        int k = 0;
        for (const cJSON *e = vals->child; e; e = e->next, k++) {
            if (!cJSON_IsNumber(e) && !cJSON_IsNull(e)) {
                st = bad_trial(path, i, "a \"values\" entry is neither a number nor null");
                break;
            }
            t[i].value[k] = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        }
        if (st != LF_OK) break;
        if ((t[i].state == LF_TRIAL_PAUSED || t[i].state == LF_TRIAL_STOPPED || t[i].state == LF_TRIAL_COMPLETED) &&
            t[i].rung < 0) {
            st = bad_trial(path, i, "it is paused, stopped or completed but has no value at any rung");
            break;
        }
        if (t[i].state == LF_TRIAL_COMPLETED && t[i].rung != s->n_rungs - 1) {
            st = bad_trial(path, i, "it is completed but has not reached the last rung");
            break;
        }
        double pid = 0;
        if (!num_field(o, "pid", 0, 1e12, &pid)) {
            st = bad_trial(path, i, "\"pid\" is missing or not a process id");
            break;
        }
        t[i].pid = (long)pid;
        const cJSON *host = cJSON_GetObjectItemCaseSensitive(o, "host");
        if (cJSON_IsString(host)) snprintf(t[i].host, sizeof t[i].host, "%s", host->valuestring);
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(o, "message");
        if (cJSON_IsString(msg)) snprintf(t[i].message, sizeof t[i].message, "%s", msg->valuestring);
    }
    cJSON_Delete(root);
    if (st != LF_OK) {
        lf_free(t);
        return st;
    }
    *trials = t;
    *n = m;
    return LF_OK;
}

/* ---------------------------------------------------------------- a trial's arguments */

lf_status lf_sweep_train_args(const lf_sweep_spec *s, const lf_sweep_trial *t, int rung, const char *trial_dir,
                              const char *base_path, int resume, int threads, char ***argv, int *argc) {
    if (!s || !t || !trial_dir || !argv || !argc || !base_path)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_train_args: NULL argument");
    if (rung < 0 || rung >= s->n_rungs) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_train_args: rung %d", rung);
    *argv = NULL;
    *argc = 0;
    const int max = 8 + s->n_sets + s->n_dims;
    char(*ov)[LF_SWEEP_OV_MAX] = calloc((size_t)max, LF_SWEEP_OV_MAX);
    if (!ov) return lf_fail(LF_ERR_NOMEM, "out of memory");
    int n = 0;
    lf_status st = LF_OK;
    snprintf(ov[n++], LF_SWEEP_OV_MAX, "train");
    snprintf(ov[n++], LF_SWEEP_OV_MAX, "%s", base_path);
    for (int i = 0; i < s->n_sets; i++) snprintf(ov[n++], LF_SWEEP_OV_MAX, "--%s", s->sets[i]);
    char(*pt)[LF_SWEEP_OV_MAX] = calloc(LF_SWEEP_MAX_DIMS, LF_SWEEP_OV_MAX);
    if (!pt) st = lf_fail(LF_ERR_NOMEM, "out of memory");
    if (st == LF_OK) st = lf__sweep_point_overrides(s, t->x, pt);
    for (int d = 0; st == LF_OK && d < s->n_dims; d++) snprintf(ov[n++], LF_SWEEP_OV_MAX, "--%s", pt[d]);
    free(pt);
    /* the sweep's own keys last: they win over anything before them */
    if (st == LF_OK) {
        ov[n][0] = ov[n][1] = '-';
        st = lf__sweep_string_override("out_dir", trial_dir, ov[n] + 2, LF_SWEEP_OV_MAX - 2);
        n++;
    }
    if (st == LF_OK) {
        long stop = rung == s->n_rungs - 1 ? 0 : s->rungs[rung];
        snprintf(ov[n++], LF_SWEEP_OV_MAX, "--train.stop_at=%ld", stop);
    }
    if (resume) snprintf(ov[n++], LF_SWEEP_OV_MAX, "--resume");
    if (threads > 0) snprintf(ov[n++], LF_SWEEP_OV_MAX, "--threads=%d", threads);
    if (st != LF_OK) {
        free(ov);
        return st;
    }
    size_t bytes = sizeof(char *) * (size_t)(n + 1);
    for (int i = 0; i < n; i++) bytes += strlen(ov[i]) + 1;
    char **out = lf_alloc(bytes);
    if (!out) {
        free(ov);
        return lf_fail(LF_ERR_NOMEM, "out of memory");
    }
    char *p = (char *)(out + n + 1);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(ov[i]) + 1;
        memcpy(p, ov[i], l);
        out[i] = p;
        p += l;
    }
    out[n] = NULL;
    free(ov);
    *argv = out;
    *argc = n;
    return LF_OK;
}

/* ---------------------------------------------------------------- a trial's run directory */

lf_status lf_sweep_log_metric(const char *log_path, const char *metric, long step, double *v) {
    if (!log_path || !metric || !v) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_log_metric: NULL argument");
    *v = NAN;
    char *text = NULL;
    size_t len = 0;
    lf_status st = lf_file_read_all(log_path, LOG_MAX, &text, &len);
    if (st != LF_OK) return st;
    char key[300];
    if (!strcmp(metric, "val_loss") || !strcmp(metric, "train_loss")) snprintf(key, sizeof key, "%s", metric);
    else snprintf(key, sizeof key, "eval/%s", metric);
    int found = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (!strstr(line, "\"type\":\"eval\"")) continue; /* cheap filter: the sink writes exactly this */
        cJSON *o = cJSON_Parse(line);
        const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        if (cJSON_IsNumber(s) && (long)s->valuedouble == step) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, key);
            if (m) { /* the last record of that step wins (a resumed run may log it again) */
                found = 1;
                *v = cJSON_IsNumber(m) ? m->valuedouble : NAN;
            }
        }
        cJSON_Delete(o);
    }
    lf_free(text);
    if (!found) return lf_fail(LF_ERR_NOT_FOUND, "'%s': no evaluation of '%s' at step %ld", log_path, metric, step);
    return LF_OK;
}

lf_status lf_sweep_checkpoint_step(const char *run_dir, long *step) {
    if (!run_dir || !step) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_checkpoint_step: NULL argument");
    *step = 0;
    char latest[LF_PATH_MAX + 32];
    snprintf(latest, sizeof latest, "%s/ckpt/latest", run_dir);
    char *dir = NULL;
    lf_status st = lf_checkpoint_resolve(latest, &dir);
    if (st != LF_OK) return st;
    char path[LF_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    lf_free(dir);
    char *text = NULL;
    if ((st = lf_file_read_all(path, 64u << 20, &text, NULL)) != LF_OK) return st;
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    if (!cJSON_IsNumber(s) || s->valuedouble < 0) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "'%s' has no step", path);
    }
    *step = (long)s->valuedouble;
    cJSON_Delete(o);
    return LF_OK;
}
