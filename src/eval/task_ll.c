/*
 * Log-likelihood tasks: the scoring engine (batched forwards, log-softmax in
 * double), the (context, continuation) encoding of lm-evaluation-harness,
 * and the multiple_choice, classification, ranking and perplexity runners.
 * Definitions are in eval.h ("tasks") and docs/eval.md.
 *
 * Batching: sequences are sorted by length (longest first, then by index, so
 * the grouping is a function of the input alone), right-padded with token 0
 * to the longest of their batch, and run B at a time; the model splits a
 * batch over its replicas, one per thread. Causal attention keeps the padding
 * (which only follows the real tokens) from reaching any scored position, so
 * a sequence's log-likelihood does not depend on its batch beyond float
 * rounding (the replicas run single-threaded kernels, one replica runs
 * multi-threaded ones). The log-softmax of each scored position is computed
 * on its own (OpenMP over positions) and summed per sequence in position
 * order, so the thread count never changes a result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_math.h" /* vectorizable exp and max (header-only) */
#include "core/utf8.h"
#include "eval/eval_impl.h"
#include "llmforge/backend.h"
#include "llmforge/model.h"
#include "llmforge/backend_cpu.h"
#include "eval/tasks_impl.h"

#define PAIR_CHUNK 4096   /* (context, continuation) pairs built and scored at a time */
#define WINDOW_CHUNK 1024 /* perplexity windows scored at a time */
#define AUTO_BATCH_BYTES (2.0 * 1024 * 1024 * 1024)

/* ---------------------------------------------------------------- scoring engine */
/* Rows of length T per forward. On the CPU: those that fit AUTO_BATCH_BYTES
 * of session activations (the planner's own figure for one row on the
 * model's backend), at most one per thread (the replicas). On a device:
 * those whose activations fit half its free memory and whose logits, copied
 * to the host a batch at a time, fit AUTO_BATCH_BYTES, at most
 * DEVICE_BATCH_MAX (the thread count says nothing about a GPU). */
#define DEVICE_BATCH_MAX 64
static int auto_batch(const lf_model *m, int T) {
    size_t per_row = 0;
    if (lf_model_session_plan_bytes(m, 1, T, 0, &per_row) != LF_OK || per_row == 0) return 1;
    lf_backend *be = lf_model_backend(m);
    double b;
    size_t dev_free = 0, dev_total = 0;
    if (!lf_backend_device_name(be)[0] || lf_backend_mem_info(be, &dev_free, &dev_total) != LF_OK) {
        b = floor(AUTO_BATCH_BYTES / (double)per_row); /* the CPU's (cpu-fenced's too) */
        if (b > lf_backend_cpu_threads()) b = lf_backend_cpu_threads();
    } else {
        const lf_model_config *c = lf_model_get_config(m);
        const double logits_row = (double)T * (c->padded_vocab_size > 0 ? c->padded_vocab_size : c->vocab_size) * 4;
        b = fmin(floor(0.5 * (double)dev_free / (double)per_row), floor(AUTO_BATCH_BYTES / logits_row));
        if (b > DEVICE_BATCH_MAX) b = DEVICE_BATCH_MAX;
    }
    return b < 1 ? 1 : (int)b;
}

typedef struct ord {
    int n;
    size_t i;
} ord;

static int cmp_ord(const void *a, const void *b) {
    const ord *x = a, *y = b;
    if (x->n != y->n) return x->n > y->n ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* log_softmax(row)[target] in double over the first V logits, and whether
 * target is the first argmax (as torch.argmax). exp is the CPU backend's
 * vectorizable double-precision one (relative error below 1e-12; libm's
 * scalar exp made this loop cost as much as the forward at V = 50257); the
 * arguments are clamped at -150 (exp(-150) ~ 7e-66 is far below the
 * precision of a sum that holds exp(0) = 1). A NaN logit gives a NaN. */
static double logp_of(const float *row, int V, int target, int *is_argmax) {
    const float mx = lf__cpu_max_f32(row, V);
    const double dm = (double)mx;
    double se = 0;
#pragma omp simd reduction(+ : se)
    for (int v = 0; v < V; v++) {
        double y = (double)row[v] - dm, sc;
        y = y < -150.0 ? -150.0 : y;
        const double p = lf__cpu_exp_parts(y, &sc);
        se += sc + sc * p;
    }
    int am = row[target] == mx;
    for (int v = 0; am && v < target; v++) am = row[v] < mx;
    *is_argmax = am;
    return (double)row[target] - dm - log(se);
}

lf_status lf__ev_score(lf_model *m, ev_seq *s, size_t n, int batch) {
    if (n == 0) return LF_OK;
    const lf_model_config *c = lf_model_get_config(m);
    int V = c->vocab_size, Vp = c->padded_vocab_size > 0 ? c->padded_vocab_size : V;
    ord *o = malloc(n * sizeof *o);
    if (!o) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    for (size_t i = 0; i < n; i++) {
        o[i].n = s[i].n;
        o[i].i = i;
    }
    qsort(o, n, sizeof *o, cmp_ord);
    int Tmax = o[0].n - 1;
    int B = batch > 0 ? batch : auto_batch(m, Tmax);
    if ((size_t)B > n) B = (int)n;
    size_t cells = (size_t)B * (size_t)Tmax;
    int32_t *in = malloc(sizeof(int32_t) * cells);
    size_t *pos = malloc(sizeof(size_t) * cells); /* scored positions of a batch: row * T + k - 1 */
    int32_t *tgt = malloc(sizeof(int32_t) * cells);
    double *lp = malloc(sizeof(double) * cells);
    unsigned char *hit = malloc(cells);
    float *lgh = NULL;      /* a batch's logits copied to the host (a backend whose memory is not the host's) */
    lf_session *ses = NULL; /* its own plan: a model in training keeps the trainer's */
    lf_status st = in && pos && tgt && lp && hit ? lf_session_create(&ses, m, B, Tmax, 0)
                                                 : lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    if (st == LF_OK && !lf_session_host_memory(ses) && !(lgh = malloc(sizeof(float) * cells * (size_t)Vp)))
        st = lf_fail(LF_ERR_NOMEM, "eval: out of memory for a batch's logits");
    for (size_t i0 = 0; i0 < n && st == LF_OK; i0 += (size_t)B) {
        int nb = n - i0 < (size_t)B ? (int)(n - i0) : B;
        int T = o[i0].n - 1;
        size_t np = 0;
        for (int r = 0; r < nb; r++) {
            const ev_seq *q = &s[o[i0 + (size_t)r].i];
            memcpy(in + (size_t)r * T, q->tok, sizeof(int32_t) * (size_t)(q->n - 1));
            for (int j = q->n - 1; j < T; j++) in[(size_t)r * T + j] = 0;
            for (int k = q->n - q->n_cont; k < q->n; k++) {
                if (q->mask && !q->mask[k]) continue;
                pos[np] = (size_t)r * T + (size_t)(k - 1);
                tgt[np++] = q->tok[k];
            }
        }
        st = lf_session_forward(ses, in, nb, T, 0);
        if (st != LF_OK) break;
        const float *lg = lf_session_logits(ses); /* read in place on host memory, else copied */
        if (lgh) {
            if ((st = lf_session_copy_logits(ses, 0, (size_t)nb * (size_t)T, lgh)) != LF_OK) break;
            lg = lgh;
        }
        /* each position on its own (any thread), summed below in a fixed order */
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)np; i++) {
            int h;
            lp[i] = logp_of(lg + pos[i] * (size_t)Vp, V, tgt[i], &h);
            hit[i] = (unsigned char)h;
        }
        size_t k = 0;
        for (int r = 0; r < nb; r++) {
            ev_seq *q = &s[o[i0 + (size_t)r].i];
            q->ll = 0;
            q->n_scored = 0;
            q->greedy = 1;
            for (int j = q->n - q->n_cont; j < q->n; j++) {
                if (q->mask && !q->mask[j]) continue;
                q->ll += lp[k];
                q->n_scored++;
                if (!hit[k]) q->greedy = 0;
                k++;
            }
        }
    }
    lf_session_free(ses);
    free(lgh);
    free(in);
    free(pos);
    free(tgt);
    free(lp);
    free(hit);
    free(o);
    return st;
}

/* ---------------------------------------------------------------- (context, continuation) */
/* Code points of a valid UTF-8 string (Python's len(str)). */
static size_t cp_count(const char *s) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += !lf__utf8_is_cont(*p);
    return n;
}

lf_status lf__ev_pair_seq(const ev_ctx *c, const char *where, const char *context, const char *continuation,
                          ev_seq *seq) {
    memset(seq, 0, sizeof *seq);
    size_t cl = strlen(context), nl = strlen(continuation);
    lf_status st = lf_utf8_validate(context, cl, "context", NULL);
    if (st == LF_OK) st = lf_utf8_validate(continuation, nl, "continuation", NULL);
    if (st != LF_OK) {
        lf_error_prefix("%s", where);
        return st;
    }
    /* HFLM._encode_pair: trailing whitespace of the context belongs to the continuation */
    size_t cut = cl;
    while (cut > 0) {
        size_t b = cut - 1;
        while (b > 0 && lf__utf8_is_cont((unsigned char)context[b])) b--;
        uint32_t cp = 0;
        (void)lf__utf8_scan((const unsigned char *)context + b, cut - b, &cp, NULL); /* valid: checked above */
        if (!lf__u_isspace(cp)) break;
        cut = b;
    }
    char *whole = malloc(cl + nl + 1);
    if (!whole) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    memcpy(whole, context, cl);
    memcpy(whole + cl, continuation, nl + 1);
    uint32_t *ci = NULL, *wi = NULL, eot = c->eot;
    size_t nc = 0, nw = 0;
    const uint32_t *ctx, *cont;
    size_t nctx, ncont;
    if (cut == 0) {
        if (!c->have_eot) {
            free(whole);
            return lf_fail(LF_ERR_FORMAT,
                           "%s: the context is empty (or only whitespace) and the tokenizer has no end-of-text token "
                           "to condition on",
                           where);
        }
        st = lf_tokenizer_encode(c->tok, whole, cl + nl, &wi, &nw);
        ctx = &eot;
        nctx = 1;
        cont = wi;
        ncont = nw;
    } else {
        st = lf_tokenizer_encode(c->tok, context, cut, &ci, &nc);
        if (st != LF_OK) {
            lf_error_prefix("%s: context", where);
        } else if ((st = lf_tokenizer_encode(c->tok, whole, cl + nl, &wi, &nw)) != LF_OK) {
            lf_error_prefix("%s: context + continuation", where);
        }
        ctx = ci;
        nctx = nc;
        ncont = st == LF_OK && nw > nc ? nw - nc : 0;
        cont = ncont ? wi + nc : NULL;
    }
    free(whole);
    if (st != LF_OK) {
        if (cut == 0) lf_error_prefix("%s: continuation", where);
    } else if (ncont == 0) {
        st = lf_fail(LF_ERR_FORMAT, "%s: the continuation encodes to no tokens", where);
    } else if (ncont > (size_t)c->L) {
        st = lf_fail(LF_ERR_RANGE, "%s: the continuation is %zu tokens, more than the model's block_size %d", where,
                     ncont, c->L);
    } else {
        size_t total = nctx + ncont, keep = total < (size_t)c->L + 1 ? total : (size_t)c->L + 1, skip = total - keep;
        seq->tok = malloc(sizeof(int32_t) * keep);
        if (!seq->tok) st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        for (size_t j = 0; st == LF_OK && j < keep; j++) {
            size_t idx = skip + j;
            uint32_t id = idx < nctx ? ctx[idx] : cont[idx - nctx];
            if (id >= (uint32_t)c->V)
                st = lf_fail(LF_ERR_RANGE, "%s: token %u is outside the model's vocabulary [0, %d)", where, id, c->V);
            else seq->tok[j] = (int32_t)id;
        }
        seq->n = (int)keep;
        seq->n_cont = (int)ncont;
    }
    lf_free(ci);
    lf_free(wi);
    if (st != LF_OK) {
        free(seq->tok);
        seq->tok = NULL;
    }
    return st;
}

lf_status lf_eval_loglikelihood(lf_model *m, const lf_tokenizer *tok, lf_eval_ll_request *reqs, size_t n, int batch) {
    if (!m || !tok || (n && !reqs)) return lf_fail(LF_ERR_INVALID_ARG, "eval: NULL argument");
    if (batch < 0) return lf_fail(LF_ERR_INVALID_ARG, "eval: batch %d is negative", batch);
    if (n == 0) return LF_OK;
    const lf_model_config *mc = lf_model_get_config(m);
    ev_ctx c = {.m = m, .tok = tok, .V = mc->vocab_size, .L = mc->block_size};
    int eot = lf_tokenizer_eot(tok);
    if (eot >= 0 && eot < c.V) {
        c.have_eot = 1;
        c.eot = (uint32_t)eot;
    }
    ev_seq *s = calloc(n, sizeof *s);
    if (!s) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    lf_status st = LF_OK;
    for (size_t i = 0; i < n && st == LF_OK; i++) {
        char where[48];
        snprintf(where, sizeof where, "request %zu", i);
        if (!reqs[i].context || !reqs[i].continuation) st = lf_fail(LF_ERR_INVALID_ARG, "%s: NULL text", where);
        else st = lf__ev_pair_seq(&c, where, reqs[i].context, reqs[i].continuation, &s[i]);
    }
    if (st == LF_OK) st = lf__ev_score(m, s, n, batch);
    for (size_t i = 0; i < n; i++) {
        if (st == LF_OK) {
            reqs[i].ll = s[i].ll;
            reqs[i].n_tokens = (int)s[i].n_scored;
            reqs[i].greedy = s[i].greedy;
        }
        free(s[i].tok);
    }
    free(s);
    return st;
}

/* ---------------------------------------------------------------- multiple choice, classification, ranking */
static int n_options(const ev_task *t, const ev_example *e) {
    return t->kind == LF_EVAL_CLASSIFICATION && !e->items ? t->n_labels : e->n_items;
}

static const char *option_label(const ev_task *t, const ev_example *e, int j) {
    return t->kind == LF_EVAL_CLASSIFICATION && !e->items ? t->labels[j] : e->items[j];
}

/* The text scored for option j: the choice, the candidate, or the label's verbaliser. */
static const char *option_text(const ev_task *t, const ev_example *e, int j) {
    const char *s = option_label(t, e, j);
    if (t->kind == LF_EVAL_CLASSIFICATION)
        for (int k = 0; k < t->n_verb; k++)
            if (!strcmp(t->verb_from[k], s)) return t->verb_to[k];
    return s;
}

static int in_list(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

static cJSON *num_array(const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *int_array(const int *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* Classification extras: labels, confusion matrix, per-class scores, and the
 * matrix as text for the table. */
static lf_status classification_details(const ev_ctx *c, const ev_task *t, lf_confusion *cm) {
    cJSON *d = lf__ev_detail(c->res);
    if (!d) return LF_ERR_NOMEM;
    size_t n = lf_confusion_num_labels(cm);
    cJSON *labels = cJSON_AddArrayToObject(d, "labels"), *conf = cJSON_AddArrayToObject(d, "confusion");
    cJSON *pc = cJSON_AddObjectToObject(d, "per_class");
    if (!labels || !conf || !pc) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    size_t w = 4;
    for (size_t i = 0; i < n; i++) {
        const char *l = lf_confusion_label(cm, i);
        if (strlen(l) > w) w = strlen(l);
        cJSON_AddItemToArray(labels, cJSON_CreateString(l));
        cJSON *row = cJSON_CreateArray();
        for (size_t j = 0; row && j < n; j++)
            cJSON_AddItemToArray(row, cJSON_CreateNumber((double)lf_confusion_count(cm, i, j)));
        cJSON_AddItemToArray(conf, row);
        lf_prf p;
        lf_status st = lf_confusion_class(cm, i, &p);
        if (st != LF_OK) return st;
        cJSON *o = cJSON_AddObjectToObject(pc, l);
        if (o) {
            cJSON_AddNumberToObject(o, "precision", p.precision);
            cJSON_AddNumberToObject(o, "recall", p.recall);
            cJSON_AddNumberToObject(o, "f1", p.f1);
            cJSON_AddNumberToObject(o, "support", (double)p.support);
        }
    }
    if (w > 24) w = 24;
    /* the matrix as text: rows gold, columns predicted */
    size_t cap = 256 + (n + 2) * (n + 2) * (w + 4) + strlen(t->name);
    char *txt = malloc(cap);
    if (!txt) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    size_t k = (size_t)snprintf(txt, cap, "%s: confusion matrix (rows gold, columns predicted)\n  %-*s", t->name,
                                (int)w, "");
    for (size_t j = 0; j < n && k < cap; j++)
        k += (size_t)snprintf(txt + k, cap - k, "  %*.*s", (int)w, (int)w, lf_confusion_label(cm, j));
    for (size_t i = 0; i < n && k < cap; i++) {
        k += (size_t)snprintf(txt + k, cap - k, "\n  %-*.*s", (int)w, (int)w, lf_confusion_label(cm, i));
        for (size_t j = 0; j < n && k < cap; j++)
            k += (size_t)snprintf(txt + k, cap - k, "  %*llu", (int)w,
                                  (unsigned long long)lf_confusion_count(cm, i, j));
    }
    if (k < cap) snprintf(txt + k, cap - k, "\n");
    lf__ev_table_extra(c->res, txt);
    return LF_OK;
}

lf_status lf__ev_run_choice(const ev_ctx *c, const ev_task *t) {
    lf_status st = LF_OK;
    double acc = 0, acc_norm = 0;
    lf_confusion *cm = NULL;
    lf_ranking rk;
    cJSON *samples = NULL;
    ev_seq *seqs = NULL;
    double *lls = NULL;
    size_t *gold = NULL, *filt = NULL;
    int max_opts = 1;
    for (size_t i = 0; i < t->n_ex; i++)
        if (n_options(t, &t->ex[i]) > max_opts) max_opts = n_options(t, &t->ex[i]);
    lls = malloc(sizeof(double) * (size_t)max_opts);
    gold = malloc(sizeof(size_t) * (size_t)max_opts);
    filt = malloc(sizeof(size_t) * (size_t)max_opts);
    if (!lls || !gold || !filt) {
        st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        goto done;
    }
    if (t->kind == LF_EVAL_CLASSIFICATION && (st = lf_confusion_create(&cm)) != LF_OK) goto done;
    if (t->kind == LF_EVAL_RANKING && (st = lf_ranking_init(&rk, t->hits, (size_t)t->n_hits)) != LF_OK) goto done;
    if (c->opts->samples) {
        cJSON *d = lf__ev_detail(c->res);
        samples = d ? cJSON_AddArrayToObject(d, "samples") : NULL;
        if (!samples) {
            st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
            goto done;
        }
    }
    size_t dl = strlen(t->delim);
    for (size_t e0 = 0; e0 < t->n_ex && st == LF_OK;) {
        size_t e1 = e0, np = 0;
        while (e1 < t->n_ex && (np == 0 || np + (size_t)n_options(t, &t->ex[e1]) <= PAIR_CHUNK))
            np += (size_t)n_options(t, &t->ex[e1++]);
        seqs = calloc(np, sizeof *seqs);
        if (!seqs) {
            st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
            break;
        }
        size_t k = 0;
        for (size_t e = e0; e < e1 && st == LF_OK; e++) {
            const ev_example *ex = &t->ex[e];
            char where[1100];
            snprintf(where, sizeof where, "%s:%ld", t->file, ex->line);
            for (int j = 0; j < n_options(t, ex) && st == LF_OK; j++) {
                const char *opt = option_text(t, ex, j);
                size_t ol = strlen(opt);
                char *cont = malloc(dl + ol + 1);
                if (!cont) {
                    st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
                    break;
                }
                memcpy(cont, t->delim, dl);
                memcpy(cont + dl, opt, ol + 1);
                st = lf__ev_pair_seq(c, where, ex->text, cont, &seqs[k++]);
                free(cont);
            }
        }
        if (st == LF_OK) st = lf__ev_score(c->m, seqs, np, c->opts->batch);
        k = 0;
        for (size_t e = e0; e < e1 && st == LF_OK; e++) {
            const ev_example *ex = &t->ex[e];
            int n = n_options(t, ex), pred = 0, pred_norm = 0;
            double best_norm = 0;
            for (int j = 0; j < n; j++) {
                lls[j] = seqs[k + (size_t)j].ll;
                if (!isfinite(lls[j])) {
                    st = lf_fail(LF_ERR_NUMERIC, "%s:%ld: the log-likelihood of option %d is %g (non-finite logits)",
                                 t->file, ex->line, j, lls[j]);
                    break;
                }
                if (lls[j] > lls[pred]) pred = j; /* first maximum, as np.argmax */
                double nl = lls[j] / (double)cp_count(option_label(t, ex, j));
                if (j == 0 || nl > best_norm) {
                    best_norm = nl;
                    pred_norm = j;
                }
            }
            k += (size_t)n;
            if (st != LF_OK) break;
            cJSON *smp = samples ? cJSON_CreateObject() : NULL;
            if (smp) {
                cJSON_AddItemToArray(samples, smp);
                cJSON_AddNumberToObject(smp, "line", (double)ex->line);
                cJSON_AddItemToObject(smp, "lls", num_array(lls, n));
            }
            if (t->kind == LF_EVAL_MULTIPLE_CHOICE) {
                int a = in_list(ex->gold, ex->n_gold, pred), an = in_list(ex->gold, ex->n_gold, pred_norm);
                acc += a;
                acc_norm += an;
                if (smp) {
                    cJSON_AddNumberToObject(smp, "pred", pred);
                    cJSON_AddNumberToObject(smp, "pred_norm", pred_norm);
                    cJSON_AddItemToObject(smp, "gold", int_array(ex->gold, ex->n_gold));
                    cJSON_AddNumberToObject(smp, "acc", a);
                    cJSON_AddNumberToObject(smp, "acc_norm", an);
                }
            } else if (t->kind == LF_EVAL_CLASSIFICATION) {
                const char *g = option_label(t, ex, ex->gold[0]), *p = option_label(t, ex, pred);
                st = lf_confusion_add(cm, g, p);
                if (smp) {
                    cJSON_AddStringToObject(smp, "pred", p);
                    cJSON_AddStringToObject(smp, "gold", g);
                }
            } else {
                double rank;
                for (int j = 0; j < ex->n_gold; j++) gold[j] = (size_t)ex->gold[j];
                for (int j = 0; j < ex->n_filtered; j++) filt[j] = (size_t)ex->filtered[j];
                st = lf_rank_query(lls, (size_t)n, gold, (size_t)ex->n_gold, filt, (size_t)ex->n_filtered, t->ties,
                                   &rank);
                if (st == LF_OK) st = lf_ranking_add(&rk, rank);
                if (st != LF_OK) lf_error_prefix("%s:%ld", t->file, ex->line);
                if (smp) cJSON_AddNumberToObject(smp, "rank", rank);
            }
        }
        for (size_t j = 0; j < np; j++) free(seqs[j].tok);
        free(seqs);
        seqs = NULL;
        e0 = e1;
    }
    if (st != LF_OK) goto done;
    double n = (double)t->n_ex;
    if (t->kind == LF_EVAL_MULTIPLE_CHOICE) {
        if ((st = lf__ev_metric(c->res, "acc", acc / n, 1)) == LF_OK)
            st = lf__ev_metric(c->res, "acc_norm", acc_norm / n, 1);
    } else if (t->kind == LF_EVAL_CLASSIFICATION) {
        double a;
        lf_prf macro;
        if ((st = lf_confusion_accuracy(cm, &a)) != LF_OK ||
            (st = lf_confusion_average(cm, LF_AVERAGE_MACRO, NULL, &macro)) != LF_OK)
            goto done;
        if ((st = lf__ev_metric(c->res, "accuracy", a, 1)) == LF_OK &&
            (st = lf__ev_metric(c->res, "macro_f1", macro.f1, 1)) == LF_OK &&
            (st = lf__ev_metric(c->res, "macro_precision", macro.precision, 1)) == LF_OK &&
            (st = lf__ev_metric(c->res, "macro_recall", macro.recall, 1)) == LF_OK)
            st = classification_details(c, t, cm);
    } else {
        double hits[LF_RANKING_MAX_K], mrr, mr;
        if ((st = lf_ranking_result(&rk, hits, &mrr, &mr)) != LF_OK) goto done;
        for (int i = 0; i < t->n_hits && st == LF_OK; i++) {
            char name[32];
            snprintf(name, sizeof name, "hits@%ld", t->hits[i]);
            st = lf__ev_metric(c->res, name, hits[i], 1);
        }
        if (st == LF_OK) st = lf__ev_metric(c->res, "mrr", mrr, 1);
        if (st == LF_OK) st = lf__ev_metric(c->res, "mean_rank", mr, 0);
        cJSON *d = st == LF_OK ? lf__ev_detail(c->res) : NULL;
        if (d) {
            static const char *const tie_names[] = {"pessimistic", "optimistic", "average"};
            cJSON_AddStringToObject(d, "ties", tie_names[t->ties]);
            double hk[LF_RANKING_MAX_K];
            for (int i = 0; i < t->n_hits; i++) hk[i] = (double)t->hits[i];
            cJSON_AddItemToObject(d, "hits", num_array(hk, t->n_hits));
        }
    }
done:
    lf_confusion_free(cm);
    free(lls);
    free(gold);
    free(filt);
    return st;
}

/* ---------------------------------------------------------------- perplexity */
typedef struct ppl_run {
    const ev_ctx *c;
    const ev_task *t;
    int L;
    long S;
    uint32_t *bytelen; /* bytes of each id's text (0 for the special <|endoftext|>) */
    size_t n_bytelen;
    int32_t *tokbuf;  /* (WINDOW_CHUNK, L+1) */
    uint8_t *maskbuf; /* (WINDOW_CHUNK, L+1) or NULL */
    uint64_t *wbytes; /* (WINDOW_CHUNK) bytes of each window's scored targets */
    ev_seq *seqs;
    size_t n_pending;
    long windows;
    lf_lm_stats stats;
} ppl_run;

static lf_status ppl_flush(ppl_run *p) {
    lf_status st = lf__ev_score(p->c->m, p->seqs, p->n_pending, p->c->opts->batch);
    for (size_t i = 0; i < p->n_pending && st == LF_OK; i++) {
        if (!isfinite(p->seqs[i].ll))
            return lf_fail(LF_ERR_NUMERIC, "%s: window %ld has a non-finite log-likelihood (%g)", p->t->file,
                           p->windows - (long)p->n_pending + (long)i, p->seqs[i].ll);
        lf_lm_stats_add(&p->stats, -p->seqs[i].ll, (uint64_t)p->seqs[i].n_scored, p->wbytes[i]);
    }
    p->n_pending = 0;
    return st;
}

/* Tokens [b, b+n) of the dataset split into tok/mask. */
static lf_status stream_read(const ev_task *t, size_t b, size_t n, int32_t *tok, uint8_t *mask, int V) {
    size_t lo = 0, hi = t->n_shards - 1; /* last k with start[k] <= b */
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (t->shard_start[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    size_t k = lo;
    for (size_t i = 0; i < n; i++) {
        size_t pos = b + i;
        while (pos >= t->shard_start[k + 1]) k++;
        uint32_t id = lf_shard_token(t->shards[k], pos - t->shard_start[k]);
        if (id >= (uint32_t)V)
            return lf_fail(LF_ERR_RANGE,
                           "%s: dataset token %u at position %zu is outside the model's vocabulary [0, %d)", t->file,
                           id, pos, V);
        tok[i] = (int32_t)id;
        mask[i] = (uint8_t)lf_shard_mask(t->shards[k], pos - t->shard_start[k]);
    }
    return LF_OK;
}

/* Score one document (doc tokens, or the dataset stream when doc is NULL)
 * of M tokens in windows; *stop set when the window limit is reached. */
static lf_status ppl_document(ppl_run *p, const int32_t *doc, size_t M, int use_mask, int *stop) {
    const ev_task *t = p->t;
    size_t prev_end = 1;
    for (size_t begin = 0; M >= 2; begin += (size_t)p->S) {
        size_t end = begin + (size_t)p->L + 1 < M ? begin + (size_t)p->L + 1 : M;
        size_t first = prev_end > begin + 1 ? prev_end : begin + 1;
        if (end > first) {
            if (t->limit_windows > 0 && p->windows >= t->limit_windows) {
                *stop = 1;
                return LF_OK;
            }
            size_t slot = p->n_pending;
            int32_t *wt = p->tokbuf + slot * (size_t)(p->L + 1);
            uint8_t *wm = p->maskbuf ? p->maskbuf + slot * (size_t)(p->L + 1) : NULL;
            size_t n = end - begin;
            if (doc) {
                memcpy(wt, doc + begin, n * sizeof(int32_t));
            } else {
                lf_status st = stream_read(t, begin, n, wt, wm, p->c->V);
                if (st != LF_OK) return st;
            }
            ev_seq *q = &p->seqs[slot];
            memset(q, 0, sizeof *q);
            q->tok = wt;
            q->mask = use_mask ? wm : NULL;
            q->n = (int)n;
            q->n_cont = (int)(end - first);
            uint64_t bytes = 0;
            for (size_t k = n - (size_t)q->n_cont; k < n; k++) {
                if (q->mask && !q->mask[k]) continue;
                uint32_t id = (uint32_t)wt[k];
                bytes += id < p->n_bytelen ? p->bytelen[id] : 0;
            }
            p->wbytes[slot] = bytes;
            p->n_pending++;
            p->windows++;
            if (p->n_pending == WINDOW_CHUNK) {
                lf_status st = ppl_flush(p);
                if (st != LF_OK) return st;
            }
        }
        prev_end = end;
        if (end == M) break;
    }
    return LF_OK;
}

/* Bytes of each id's text under tokenizer tk; the special token <|endoftext|>
 * counts 0 (it stands for no text; a char vocabulary's end-of-text "\n" is a
 * real character and counts 1). */
static lf_status byte_table(const lf_tokenizer *tk, uint32_t **out, size_t *n) {
    int V = lf_tokenizer_vocab_size(tk);
    uint32_t *b = calloc((size_t)(V > 0 ? V : 1), sizeof *b);
    if (!b) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    for (int i = 0; i < V; i++) {
        uint32_t id = (uint32_t)i;
        char *s = NULL;
        size_t len = 0;
        if (lf_tokenizer_decode(tk, &id, 1, &s, &len) == LF_OK) b[i] = (uint32_t)len;
        lf_free(s);
    }
    uint32_t eot;
    if (lf_tokenizer_special_id(tk, "<|endoftext|>", &eot) == LF_OK && eot < (uint32_t)V) b[eot] = 0;
    *out = b;
    *n = (size_t)V;
    return LF_OK;
}

lf_status lf__ev_run_perplexity(const ev_ctx *c, const ev_task *t) {
    ppl_run p = {.c = c, .t = t, .L = c->L, .S = t->stride ? t->stride : c->L};
    if (p.S > c->L)
        return lf_fail(LF_ERR_RANGE, "%s: stride %ld is more than the model's block_size %d", t->file, p.S, c->L);
    if (t->ds && lf_dataset_vocab_size(t->ds) > c->V)
        return lf_fail(LF_ERR_MISMATCH, "%s: dataset '%s' has a vocabulary of %d, the model only %d", t->file,
                       t->dataset_dir, lf_dataset_vocab_size(t->ds), c->V);
    int use_mask = 0;
    for (size_t i = 0; i < t->n_shards; i++) use_mask |= lf_shard_has_mask(t->shards[i]);
    size_t W = (size_t)(c->L + 1);
    lf_status st = byte_table(t->ds ? t->ds_tok : c->tok, &p.bytelen, &p.n_bytelen);
    if (st != LF_OK) return st;
    p.tokbuf = malloc(sizeof(int32_t) * WINDOW_CHUNK * W);
    p.maskbuf = t->ds ? malloc(WINDOW_CHUNK * W) : NULL;
    p.wbytes = malloc(sizeof(uint64_t) * WINDOW_CHUNK);
    p.seqs = calloc(WINDOW_CHUNK, sizeof *p.seqs);
    int32_t *doc = NULL;
    uint32_t *ids = NULL;
    long docs = 0;
    if (!p.tokbuf || (t->ds && !p.maskbuf) || !p.wbytes || !p.seqs) {
        st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        goto done;
    }
    int stop = 0;
    if (t->ds) {
        st = ppl_document(&p, NULL, t->shard_start[t->n_shards], use_mask, &stop);
        docs = 1;
    } else {
        size_t nd = t->text ? 1 : t->n_ex;
        for (size_t d = 0; d < nd && st == LF_OK && !stop; d++) {
            const char *text = t->text ? t->text : t->ex[d].text;
            size_t tl = t->text ? t->text_len : strlen(text), n_ids = 0;
            st = lf_tokenizer_encode(c->tok, text, tl, &ids, &n_ids);
            if (st != LF_OK) {
                if (t->text) lf_error_prefix("%s", t->text_path);
                else lf_error_prefix("%s:%ld: text", t->file, t->ex[d].line);
                break;
            }
            size_t off = c->have_eot ? 1 : 0, M = n_ids + off;
            doc = malloc(sizeof(int32_t) * (M ? M : 1));
            if (!doc) {
                st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
                break;
            }
            if (off) doc[0] = (int32_t)c->eot;
            for (size_t i = 0; i < n_ids && st == LF_OK; i++) {
                if (ids[i] >= (uint32_t)c->V)
                    st = lf_fail(LF_ERR_RANGE, "%s: token %u is outside the model's vocabulary [0, %d)", t->file,
                                 ids[i], c->V);
                doc[i + off] = (int32_t)ids[i];
            }
            lf_free(ids);
            ids = NULL;
            if (st == LF_OK) st = ppl_document(&p, doc, M, 0, &stop); /* copies the windows */
            free(doc);
            doc = NULL;
            docs++;
        }
    }
    if (st == LF_OK && p.n_pending) st = ppl_flush(&p);
    if (st != LF_OK) goto done;
    if (!p.stats.n_tokens) {
        st = lf_fail(LF_ERR_INVALID_ARG, "%s: no token to score (a text of one token has nothing to predict)", t->file);
        goto done;
    }
    double ppl, bpb = NAN;
    if ((st = lf_lm_perplexity(&p.stats, &ppl)) != LF_OK) goto done;
    if (p.stats.n_bytes && (st = lf_lm_bits_per_byte(&p.stats, &bpb)) != LF_OK) goto done;
    if ((st = lf__ev_metric(c->res, "nll", p.stats.nll_sum / (double)p.stats.n_tokens, 0)) != LF_OK ||
        (st = lf__ev_metric(c->res, "perplexity", ppl, 0)) != LF_OK ||
        (st = lf__ev_metric(c->res, "bits_per_byte", bpb, 0)) != LF_OK)
        goto done;
    cJSON *d = lf__ev_detail(c->res);
    if (d) {
        cJSON_AddNumberToObject(d, "tokens", (double)p.stats.n_tokens);
        cJSON_AddNumberToObject(d, "bytes", (double)p.stats.n_bytes);
        cJSON_AddNumberToObject(d, "windows", (double)p.windows);
        cJSON_AddNumberToObject(d, "documents", (double)docs);
        cJSON_AddNumberToObject(d, "stride", (double)p.S);
        cJSON_AddNumberToObject(d, "block_size", (double)c->L);
        if (t->ds) {
            cJSON_AddStringToObject(d, "dataset", t->dataset_dir);
            cJSON_AddStringToObject(d, "split", t->split);
        } else if (t->text_path) {
            cJSON_AddStringToObject(d, "text_file", t->text_path);
        }
    }
done:
    free(doc);
    lf_free(ids);
    free(p.bytelen);
    free(p.tokbuf);
    free(p.maskbuf);
    free(p.wbytes);
    free(p.seqs);
    return st;
}
