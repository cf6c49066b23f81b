/*
 * Continuous batching (engine.h): the scheduler of `llmforge serve`.
 *
 * Why ourselves: the scheduling is the part of vLLM / TGI / llama.cpp's
 * server that is specific to the runtime under it (its KV cache layout, its
 * batched forward); no C library offers it. This one follows vLLM's
 * iteration-level scheduling (Yu et al., "Orca", OSDI 2022; Kwon et al.,
 * "PagedAttention", SOSP 2023) on llmforge's fixed-slot KV cache.
 *
 * Policy, each step:
 *  1. Retire what was cancelled; admit queued requests (FIFO) into free
 *     slots. A slot is a session row: max_context positions of K/V per layer.
 *  2. Runs, within a budget of step_tokens tokens: first every sequence that
 *     decodes (its one newest token), then prompt chunks of the sequences
 *     still prefilling, in admission order (chunked prefill: a long prompt
 *     takes several steps and never stalls the decoders for long).
 *  3. One ragged forward over all runs (lf_session_forward_ragged).
 *     A request that wants its prompt's log-probabilities (echo with
 *     logprobs) has its prompt chunks run with every_row: the head runs on
 *     each of their rows, and row t of a chunk at position p scores prompt
 *     token p + t + 1. Every other run keeps the head on its last row only.
 *  4. A run that reached the end of its sequence samples the next token from
 *     its last row: lf_sample_token keyed by (seed, sequence length), exactly
 *     as lf_generate draws, so a request gives what `llmforge sample` gives
 *     for the same prompt and seed, alone or beside others: bit for bit on a
 *     batch-invariant backend instance (the server's default;
 *     lf_backend_set_batch_invariant), else to the float rounding of
 *     products over a different row count (~1e-6 relative);
 *     tests/serve/test_engine.c checks both.
 *  5. Finish: a stop token (reported to on_token with stop = 1, for its
 *     log-probability record, as OpenAI and vLLM return it; never text),
 *     max_tokens or a full context
 *     (length; max_tokens 0 ends when the prompt is scored), a callback
 *     asking to stop, or cancellation; the slot is free for the next step's
 *     admission.
 *
 * Invariants:
 *  - For each active sequence, fed <= len: tok[0..fed) are in its slot's
 *    cache at positions 0..fed-1; a run feeds tok[fed .. fed+k) at
 *    position fed. fed == len after a run means its last row's logits are
 *    the next-token distribution.
 *  - The queue and the slot table change only under the mutex; the stepping
 *    thread alone reads a sequence's tokens and calls the callbacks, with
 *    the mutex released.
 */
#include "serve/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmforge/infer.h"

typedef struct seq {
    uint64_t id;
    lf_engine_req r; /* callbacks and options; prompt/stop point at our copies */
    int32_t *tok;    /* max_context: the prompt, then the generated tokens */
    int32_t *stop;
    int len, fed, gen;
    int slot;         /* -1 while queued */
    int cancel;       /* set under the mutex */
    struct seq *next; /* queue link */
} seq;

struct lf_engine {
    lf_model *m;
    lf_session *s;
    lf_engine_opts o;
    int V;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    seq *q_head, *q_tail;
    int n_queued;
    seq **slot; /* max_batch: the active sequence of each slot, or NULL */
    int n_active;
    uint64_t next_id;
    lf_engine_stats st;
    int draining, quit, started;
    pthread_t thread;
    /* stepping thread's scratch */
    int32_t *in;       /* step_tokens */
    lf_segment *seg;   /* max_batch */
    seq **run;         /* max_batch: the sequence of each run */
    float *row, *work; /* Vp, V */
    int *iwork;        /* V */
    char err[512];
};

static void seq_free(seq *q) {
    if (!q) return;
    free(q->tok);
    free(q->stop);
    free(q);
}

lf_status lf_engine_create(lf_engine **out, lf_model *m, const lf_engine_opts *opts) {
    *out = NULL;
    const lf_model_config *c = lf_model_get_config(m);
    lf_engine_opts o = *opts;
    if (o.max_batch < 1 || o.max_batch > 4096)
        return lf_fail(LF_ERR_RANGE, "serve: --max-batch %d is out of range [1, 4096]", o.max_batch);
    if (o.max_context < 2 || o.max_context > c->block_size)
        return lf_fail(LF_ERR_RANGE, "serve: --max-context %d is out of range [2, the model's block_size %d]",
                       o.max_context, c->block_size);
    if (o.max_queue < 0) return lf_fail(LF_ERR_RANGE, "serve: --max-queue %d is negative", o.max_queue);
    if (o.step_tokens <= 0 || o.step_tokens > o.max_context) o.step_tokens = o.max_context;
    if (o.step_tokens < o.max_batch && o.max_batch <= o.max_context)
        o.step_tokens = o.max_batch; /* every decoder fits */
    lf_engine *e = calloc(1, sizeof *e);
    if (!e) return lf_fail(LF_ERR_NOMEM, "serve: out of memory");
    e->m = m;
    e->o = o;
    e->V = c->vocab_size;
    const int Vp = c->padded_vocab_size > 0 ? c->padded_vocab_size : c->vocab_size;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->slot = calloc((size_t)o.max_batch, sizeof *e->slot);
    e->in = malloc(sizeof(int32_t) * (size_t)o.step_tokens);
    e->seg = malloc(sizeof(lf_segment) * (size_t)o.max_batch);
    e->run = malloc(sizeof(seq *) * (size_t)o.max_batch);
    e->row = malloc(sizeof(float) * (size_t)Vp);
    e->work = malloc(sizeof(float) * (size_t)e->V);
    e->iwork = malloc(sizeof(int) * (size_t)e->V);
    e->next_id = 1;
    e->st.max_batch = o.max_batch;
    if (!e->slot || !e->in || !e->seg || !e->run || !e->row || !e->work || !e->iwork) {
        lf_engine_free(e);
        return lf_fail(LF_ERR_NOMEM, "serve: out of memory");
    }
    /* the session must hold a whole step's tokens as rows: step_tokens <= max_context */
    lf_status st = lf_session_create(&e->s, m, o.max_batch, o.max_context, 1);
    if (st == LF_OK && !lf_session_has_cache(e->s))
        st = lf_fail(LF_ERR_UNSUPPORTED, "serve: the backend has no KV-cache attention");
    if (st != LF_OK) {
        lf_engine_free(e);
        return st;
    }
    *out = e;
    return LF_OK;
}

void lf_engine_free(lf_engine *e) {
    if (!e) return;
    for (seq *q = e->q_head, *n; q; q = n) {
        n = q->next;
        seq_free(q);
    }
    if (e->slot)
        for (int i = 0; i < e->o.max_batch; i++) seq_free(e->slot[i]);
    lf_session_free(e->s);
    free(e->slot);
    free(e->in);
    free(e->seg);
    free(e->run);
    free(e->row);
    free(e->work);
    free(e->iwork);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

lf_status lf_engine_submit(lf_engine *e, const lf_engine_req *r, uint64_t *id) {
    if (id) *id = 0;
    if (!r->prompt || r->n_prompt < 1) return lf_fail(LF_ERR_RANGE, "the prompt is empty (at least one token)");
    if (r->max_tokens < 0) return lf_fail(LF_ERR_RANGE, "max_tokens %d (at least 0)", r->max_tokens);
    if (r->max_tokens == 0 && r->n_prompt > e->o.max_context)
        return lf_fail(LF_ERR_RANGE, "the prompt has %d tokens; the context holds %d", r->n_prompt, e->o.max_context);
    if (r->max_tokens > 0 && r->n_prompt >= e->o.max_context)
        return lf_fail(LF_ERR_RANGE,
                       "the prompt has %d tokens; the context holds %d, so at most %d leave room for one "
                       "new token",
                       r->n_prompt, e->o.max_context, e->o.max_context - 1);
    if (r->prompt_logprobs && !r->on_prompt)
        return lf_fail(LF_ERR_INVALID_ARG, "prompt_logprobs without an on_prompt callback");
    if (r->logprobs < 0 || r->logprobs > LF_ENGINE_MAX_LOGPROBS)
        return lf_fail(LF_ERR_RANGE, "logprobs %d is out of range [0, %d]", r->logprobs, LF_ENGINE_MAX_LOGPROBS);
    if (r->n_stop_ids < 0 || (r->n_stop_ids > 0 && !r->stop_ids))
        return lf_fail(LF_ERR_RANGE, "stop token list of %d", r->n_stop_ids);
    if (r->adapter < 0 || r->adapter > lf_model_lora_bank_count(e->m))
        return lf_fail(LF_ERR_RANGE, "adapter %d is out of range [0, %d]", r->adapter, lf_model_lora_bank_count(e->m));
    lf_status st = lf_sample_check(e->V, r->temperature, r->top_k, r->top_p > 0 ? r->top_p : 1.0f);
    if (st != LF_OK) return st;
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->V)
            return lf_fail(LF_ERR_RANGE, "prompt token %d at position %d is outside the vocabulary [0, %d)",
                           r->prompt[i], i, e->V);
    seq *q = calloc(1, sizeof *q);
    if (q) q->tok = malloc(sizeof(int32_t) * (size_t)e->o.max_context);
    if (q && r->n_stop_ids) q->stop = malloc(sizeof(int32_t) * (size_t)r->n_stop_ids);
    if (!q || !q->tok || (r->n_stop_ids && !q->stop)) {
        seq_free(q);
        return lf_fail(LF_ERR_NOMEM, "out of memory queueing a request");
    }
    q->r = *r;
    memcpy(q->tok, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    if (r->n_stop_ids) memcpy(q->stop, r->stop_ids, sizeof(int32_t) * (size_t)r->n_stop_ids);
    q->r.prompt = q->tok;
    q->r.stop_ids = q->stop;
    q->len = r->n_prompt;
    q->slot = -1;
    pthread_mutex_lock(&e->mu);
    if (e->draining ||
        e->n_queued >= e->o.max_queue + (e->n_active < e->o.max_batch ? e->o.max_batch - e->n_active : 0)) {
        const int draining = e->draining, queued = e->n_queued;
        pthread_mutex_unlock(&e->mu);
        seq_free(q);
        return draining ? lf_fail(LF_ERR_BUSY, "the server is shutting down")
                        : lf_fail(LF_ERR_BUSY, "the queue is full (%d requests wait; --max-queue %d)", queued,
                                  e->o.max_queue);
    }
    q->id = e->next_id++;
    if (e->q_tail) e->q_tail->next = q;
    else e->q_head = q;
    e->q_tail = q;
    e->n_queued++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (id) *id = q->id;
    return LF_OK;
}

void lf_engine_cancel(lf_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    for (seq *q = e->q_head; q; q = q->next)
        if (q->id == id) q->cancel = 1;
    for (int i = 0; i < e->o.max_batch; i++)
        if (e->slot[i] && e->slot[i]->id == id) e->slot[i]->cancel = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- one step */

/* Frees q's slot and reports it (stepping thread, mutex not held). */
static void retire(lf_engine *e, seq *q, lf_engine_finish why) {
    pthread_mutex_lock(&e->mu);
    if (q->slot >= 0) {
        e->slot[q->slot] = NULL;
        e->n_active--;
    }
    e->st.finished++;
    if (why == LF_FINISH_CANCELLED) e->st.cancelled++;
    pthread_mutex_unlock(&e->mu);
    if (q->r.on_done) q->r.on_done(q->r.user, why, q->r.n_prompt, q->gen);
    seq_free(q);
}

/* The model's log-probabilities of row (V logits): t->id's, and the n most
 * likely (descending; ties by lower id), in one pass that keeps the best n
 * in order (insertion: O(V n), what scoring every prompt row can afford). */
static void logprobs(const float *row, int V, lf_engine_token *t, int n) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++)
        if (row[v] > mx) mx = row[v];
    for (int v = 0; v < V; v++) sum += exp((double)row[v] - mx);
    const double lse = mx + log(sum);
    t->logprob = (float)((double)row[t->id] - lse);
    if (n > V) n = V;
    int k = 0; /* top_id[0..k) hold the best so far, descending; a later id only displaces a smaller value */
    for (int v = 0; v < V && n > 0; v++) {
        if (k == n && !(row[v] > row[t->top_id[n - 1]])) continue;
        int j = k < n ? k++ : n - 1;
        while (j > 0 && row[v] > row[t->top_id[j - 1]]) {
            t->top_id[j] = t->top_id[j - 1];
            j--;
        }
        t->top_id[j] = v;
    }
    for (int j = 0; j < k; j++) t->top_logprob[j] = (float)((double)row[t->top_id[j]] - lse);
    t->n_top = k;
}

lf_status lf_engine_step(lf_engine *e, int *n_active) {
    /* 1. cancellations of queued requests, admission */
    seq *dropped = NULL;
    pthread_mutex_lock(&e->mu);
    for (seq **pp = &e->q_head; *pp;) {
        seq *q = *pp;
        if (q->cancel) {
            *pp = q->next;
            e->n_queued--;
            q->next = dropped;
            dropped = q;
        } else {
            pp = &q->next;
        }
    }
    e->q_tail = NULL;
    for (seq *q = e->q_head; q; q = q->next) e->q_tail = q;
    for (int i = 0; i < e->o.max_batch && e->q_head; i++) {
        if (e->slot[i]) continue;
        seq *q = e->q_head;
        e->q_head = q->next;
        if (!e->q_head) e->q_tail = NULL;
        e->n_queued--;
        q->next = NULL;
        q->slot = i;
        e->slot[i] = q;
        e->n_active++;
        e->st.prompt_tokens += (uint64_t)q->r.n_prompt;
    }
    pthread_mutex_unlock(&e->mu);
    while (dropped) {
        seq *n = dropped->next;
        dropped->slot = -1;
        retire(e, dropped, LF_FINISH_CANCELLED);
        dropped = n;
    }

    /* 2. runs: decoders first, then prompt chunks, within the token budget */
    int n_run = 0, total = 0, budget = e->o.step_tokens;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < e->o.max_batch; i++) {
            seq *q = e->slot[i];
            if (!q) continue;
            int cancel;
            pthread_mutex_lock(&e->mu);
            cancel = q->cancel;
            pthread_mutex_unlock(&e->mu);
            if (cancel) {
                if (pass == 0) retire(e, q, LF_FINISH_CANCELLED);
                continue;
            }
            const int left = q->len - q->fed, decoding = q->fed >= q->r.n_prompt;
            if (pass == 1 && q->r.max_tokens == 0 && !q->r.prompt_logprobs) { /* nothing to compute */
                retire(e, q, LF_FINISH_LENGTH);
                continue;
            }
            if (decoding != (pass == 0) || left <= 0 || budget <= 0) continue;
            const int k = left < budget ? left : budget;
            memcpy(e->in + total, q->tok + q->fed, sizeof(int32_t) * (size_t)k);
            e->seg[n_run] = (lf_segment){.slot = q->slot,
                                         .pos = q->fed,
                                         .len = k,
                                         .every_row = !decoding && q->r.prompt_logprobs,
                                         .adapter = q->r.adapter};
            e->run[n_run++] = q;
            total += k;
            budget -= k;
        }
    if (n_run == 0) {
        if (n_active) {
            pthread_mutex_lock(&e->mu);
            *n_active = e->n_active + e->n_queued;
            pthread_mutex_unlock(&e->mu);
        }
        return LF_OK;
    }

    /* 3. the forward */
    lf_status st = lf_session_forward_ragged(e->s, e->in, e->seg, n_run);
    if (st != LF_OK) {
        snprintf(e->err, sizeof e->err, "%s", lf_last_error());
        for (int i = 0; i < e->o.max_batch; i++)
            if (e->slot[i]) retire(e, e->slot[i], LF_FINISH_ERROR);
        return st;
    }
    pthread_mutex_lock(&e->mu);
    e->st.steps++;
    pthread_mutex_unlock(&e->mu);

    /* 4. score prompt rows; sample where a run reached the end of its
     * sequence; 5. finish */
    for (int r = 0, row0 = 0; r < n_run; row0 += e->seg[r].every_row ? e->seg[r].len : 1, r++) {
        seq *q = e->run[r];
        const lf_segment *g = &e->seg[r];
        const int last = row0 + (g->every_row ? g->len - 1 : 0); /* run r's last row */
        if (g->every_row) {
            int stop = 0;
            lf_engine_token t = {0};
            if (g->pos == 0) { /* the first prompt token: nothing before it */
                t.id = q->tok[0];
                t.logprob = NAN;
                stop = q->r.on_prompt(q->r.user, 0, &t);
            }
            for (int i = 0; !stop && i < g->len && g->pos + i + 1 < q->r.n_prompt; i++) {
                if ((st = lf_session_copy_logits(e->s, (size_t)(row0 + i), 1, e->row)) != LF_OK) break;
                t = (lf_engine_token){.id = q->tok[g->pos + i + 1]};
                logprobs(e->row, e->V, &t, q->r.logprobs);
                stop = q->r.on_prompt(q->r.user, g->pos + i + 1, &t);
            }
            if (st != LF_OK || stop) {
                if (st != LF_OK) snprintf(e->err, sizeof e->err, "%s", lf_last_error());
                retire(e, q, st != LF_OK ? LF_FINISH_ERROR : LF_FINISH_CANCELLED);
                st = LF_OK;
                continue;
            }
        }
        q->fed += g->len;
        if (q->fed < q->len) continue;   /* a prompt chunk: more to come */
        if (q->gen >= q->r.max_tokens) { /* max_tokens 0: the prompt was all */
            retire(e, q, LF_FINISH_LENGTH);
            continue;
        }
        st = lf_session_copy_logits(e->s, (size_t)last, 1, e->row); /* run r's last position */
        if (st != LF_OK) {
            snprintf(e->err, sizeof e->err, "%s", lf_last_error());
            retire(e, q, LF_FINISH_ERROR);
            st = LF_OK;
            continue;
        }
        lf_engine_token t = {0};
        t.id = lf_sample_token(e->row, e->V, q->r.temperature, q->r.top_k, q->r.top_p > 0 ? q->r.top_p : 1.0f,
                               q->r.seed, (uint64_t)q->len, e->work, e->iwork);
        for (int j = 0; j < q->r.n_stop_ids; j++) t.stop |= q->stop[j] == t.id;
        logprobs(e->row, e->V, &t, q->r.logprobs);
        q->tok[q->len++] = t.id;
        q->gen++;
        pthread_mutex_lock(&e->mu);
        e->st.generated_tokens++;
        pthread_mutex_unlock(&e->mu);
        /* a stop token is reported too (its log-probability record), then ends the sequence */
        const int cancel = q->r.on_token && q->r.on_token(q->r.user, &t);
        if (t.stop || cancel) {
            retire(e, q, t.stop ? LF_FINISH_STOP : LF_FINISH_CANCELLED);
            continue;
        }
        if (q->gen >= q->r.max_tokens || q->len >= e->o.max_context) retire(e, q, LF_FINISH_LENGTH);
    }
    if (n_active) {
        pthread_mutex_lock(&e->mu);
        *n_active = e->n_active + e->n_queued;
        pthread_mutex_unlock(&e->mu);
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- the engine thread */

static void *loop(void *arg) {
    lf_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->quit) {
        if (e->n_queued == 0 && e->n_active == 0) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        lf_engine_step(e, NULL); /* a failed forward retired its sequences (LF_FINISH_ERROR) */
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

lf_status lf_engine_start(lf_engine *e) {
    if (e->started) return LF_OK;
    if (pthread_create(&e->thread, NULL, loop, e) != 0)
        return lf_fail(LF_ERR_NOMEM, "serve: could not start the engine thread");
    e->started = 1;
    return LF_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void lf_engine_stop(lf_engine *e, double drain_s) {
    pthread_mutex_lock(&e->mu);
    e->draining = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (!e->started) return;
    const double end = now_s() + (drain_s > 0 ? drain_s : 0);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        const int busy = e->n_queued + e->n_active;
        pthread_mutex_unlock(&e->mu);
        if (!busy) break;
        if (now_s() >= end) { /* what is left is cancelled at the next step */
            pthread_mutex_lock(&e->mu);
            for (seq *q = e->q_head; q; q = q->next) q->cancel = 1;
            for (int i = 0; i < e->o.max_batch; i++)
                if (e->slot[i]) e->slot[i]->cancel = 1;
            pthread_cond_broadcast(&e->cv);
            pthread_mutex_unlock(&e->mu);
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&e->mu);
    e->quit = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->started = 0;
}

void lf_engine_stats_get(lf_engine *e, lf_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->queued = e->n_queued;
    out->active = e->n_active;
    out->slots_in_use = e->n_active;
    pthread_mutex_unlock(&e->mu);
}

const char *lf_engine_error(const lf_engine *e) { return e->err; }
