/*
 * `llmforge serve` (llmforge/serve.h): the OpenAI endpoints on the HTTP
 * layer (src/http/http.h), the request layer (serve_impl.h) and the
 * continuous-batching engine (engine.h).
 *
 * A request's life: an HTTP worker parses it, tokenizes the prompt (chat:
 * the template's spans may hold special tokens, the messages' content never
 * does), submits one engine sequence per choice (n per prompt), and defers
 * the reply. The engine thread then calls back per token: the streaming
 * detokenizer turns ids into whole UTF-8 characters, the stop-string
 * matcher holds back what could still become a stop string, and the text
 * goes out as an SSE chunk (stream) or into the choice (not). When every
 * choice is done the answer is sent (or the stream ends with [DONE]).
 *
 * Log-probabilities: each token's record (its bytes, log-probability,
 * alternatives, and text_offset, the bytes of the choice's text before it)
 * is kept per choice. A whole answer carries them all (those past a stop
 * string left out); a stream attaches each record to the chunk whose text
 * completes the token's bytes (a token holding part of a character waits
 * for the chunk with the rest; held-back text for a possible stop string
 * holds its tokens back too), and the last chunk of a choice takes what is
 * left. The token that ends a choice (the end of text, <|im_end|>) has its
 * record too, as OpenAI's and vLLM's servers give it (lm-evaluation-harness
 * drops each answer's last record, taking it for the generated one): its
 * token is the tokenizer's spelling ("<|endoftext|>", OpenAI's choice; vLLM
 * shows ""), its text_offset the text's end, and it adds nothing to the
 * text. With echo the prompt comes first, as its own chunk in a stream, and
 * with logprobs its tokens' records come first too (the first one's
 * log-probability null), from the engine's prompt scoring.
 *
 * Invariants:
 *  - A call (one HTTP request) is locked by its mutex while the handler
 *    submits and while a callback runs; it is freed by whoever ends it last:
 *    the handler when nothing was submitted, else the engine thread in the
 *    last choice's on_done, after closing the stream.
 *  - The client going away (on_cancel, an HTTP thread) only sets a flag and
 *    asks the engine to cancel: on_cancel never takes the call's mutex (the
 *    stream's close waits for a running on_cancel).
 *  - The API key is compared in constant time and never logged or echoed.
 *  - Seeds: choice j of a request with seed s samples with s + j, so one
 *    request gives the same text alone or beside others; without a seed each
 *    request gets a fresh one.
 */
#include "llmforge/serve.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/model.h"
#include "core/strbuf.h"
#include "http/http.h"
#include "serve/engine.h"
#include "serve/serve_impl.h"

/* ---------------------------------------------------------------- metrics */

enum { EP_COMPLETIONS, EP_CHAT, EP_MODELS, EP_HEALTH, EP_METRICS, EP_OTHER, EP_N };
static const char *const EP_NAME[EP_N] = {"/v1/completions", "/v1/chat/completions",
                                          "/v1/models",      "/health",
                                          "/metrics",        "other"};
static const int STATUS[] = {200, 400, 401, 404, 405, 408, 413, 429, 500, 503};
#define N_STATUS ((int)(sizeof STATUS / sizeof STATUS[0]))
static const double TTFT_LE[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double ITL_LE[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define N_LE 11

typedef struct histo {
    uint64_t bucket[N_LE]; /* cumulative at render time */
    uint64_t count;
    double sum;
} histo;

static void histo_add(histo *h, const double *le, double v) {
    for (int i = 0; i < N_LE; i++)
        if (v <= le[i]) h->bucket[i]++;
    h->count++;
    h->sum += v;
}

struct lf_server {
    lf_backend *be; /* the model's own instance (batch-invariant unless opts->batch_variant) */
    lf_model *m;
    lf_tokenizer *tok;
    lf__chat_template tpl;
    /* no chat template in the checkpoint and the built-in ChatML's markers
     * are not in the vocabulary: chat requests answer 400 with this reason */
    int no_chat_template;
    char no_tpl_reason[320];
    lf_engine *e;
    lf__http_server *http;
    lf__serve_limits lim;
    char model_name[256];
    char **adapter;  /* the serving adapters' names (adapter i + 1 of the model's bank) */
    char **lora_dir; /* ... and their directories */
    int n_adapter;
    char *key;
    size_t key_len;
    int32_t stop_ids[17]; /* the end-of-sequence ids first (n_eot of them), then <|im_end|> */
    int n_stop_ids, n_eot;
    atomic_int draining; /* lf_server_stop began */
    atomic_int cutting;  /* the drain time is over: what the engine still holds is cut */
    atomic_ullong next_id;
    int64_t created;
    pthread_mutex_t mu; /* metrics */
    uint64_t requests[EP_N][N_STATUS + 1];
    uint64_t prompt_tokens, completion_tokens;
    histo ttft, itl;
};

static void count_request(lf_server *s, int ep, int status) {
    int k = N_STATUS;
    for (int i = 0; i < N_STATUS; i++)
        if (STATUS[i] == status) k = i;
    pthread_mutex_lock(&s->mu);
    s->requests[ep][k]++;
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- calls and choices */

typedef struct lp_rec {
    char *tok; /* the token's own bytes */
    size_t len;
    double logprob;
    int offset; /* bytes of the choice's text before it */
    lf__serve_top top[LF_ENGINE_MAX_LOGPROBS];
    char *top_tok[LF_ENGINE_MAX_LOGPROBS];
    int n_top;
} lp_rec;

struct call;

typedef struct choice {
    struct call *call;
    int index;
    _Atomic uint64_t engine_id;
    lf_detok_stream *ds;
    lf__stop_matcher *sm;
    lf__sb text;       /* released text (echo first); a stream: the echo until it is sent */
    size_t raw_len;    /* bytes decoded so far (logprob offsets; starts after the echo) */
    size_t prompt_off; /* echo with logprobs: offset of the next prompt token */
    size_t released;   /* a stream: bytes of text sent so far */
    lp_rec *lp;
    int n_lp, cap_lp;
    int lp_sent; /* a stream: records attached to a chunk so far */
    int n_gen, stopped, done, first_sent, echo_pending;
    lf__serve_finish finish;
    double t_last;
} choice;

typedef struct call {
    lf_server *s;
    pthread_mutex_t mu;
    lf__serve_api api;
    int ep;
    lf__http_stream *stream;
    int streaming, include_usage, logprobs, top_logprobs;
    int n;
    choice *ch;
    int remaining; /* choices submitted and not done */
    int prompt_tokens;
    atomic_int gone;     /* the client left */
    lf__serve_error err; /* a failure to answer with once every choice is done */
    int failed;
    int cut; /* a stream cut by shutdown: it ends with an error event, no [DONE] */
    char id[48];
    int64_t created;
    double t0;
    int adapter; /* the request's serving adapter (0: the base) */
} call;

static void choice_clear(choice *c) {
    lf_detok_stream_free(c->ds);
    lf__stop_matcher_free(c->sm);
    free(c->text.p);
    for (int i = 0; i < c->n_lp; i++) {
        free(c->lp[i].tok);
        for (int k = 0; k < c->lp[i].n_top; k++) free(c->lp[i].top_tok[k]);
    }
    free(c->lp);
}

static void call_free(call *k) {
    if (!k) return;
    for (int i = 0; i < k->n; i++) choice_clear(&k->ch[i]);
    free(k->ch);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* ---------------------------------------------------------------- answering */

static const char *JSON_TYPE = "application/json";

static void reply_error(lf__http_request *r, lf_server *s, int ep, const lf__serve_error *e) {
    size_t len = 0;
    char *body = lf__serve_error_json(e, &len);
    char ra[16];
    lf__http_header h = {"Retry-After", ra};
    snprintf(ra, sizeof ra, "%d", e->retry_after > 0 ? e->retry_after : 1);
    if (body) lf__http_reply(r, e->status, JSON_TYPE, &h, e->retry_after > 0 ? 1 : 0, body, len);
    else lf__http_reply_text(r, 500, "out of memory\n");
    free(body);
    count_request(s, ep, e->status);
}

static void stream_error(call *k, const lf__serve_error *e) {
    size_t len = 0;
    char *body = lf__serve_error_json(e, &len);
    char ra[16];
    lf__http_header h = {"Retry-After", ra};
    snprintf(ra, sizeof ra, "%d", e->retry_after > 0 ? e->retry_after : 1);
    if (body) lf__http_stream_reply(k->stream, e->status, JSON_TYPE, &h, e->retry_after > 0 ? 1 : 0, body, len);
    free(body);
    count_request(k->s, k->ep, e->status);
}

static lf__serve_meta meta_of(const call *k) {
    lf__serve_meta m = {.id = k->id,
                        .model = k->adapter ? k->s->adapter[k->adapter - 1] : k->s->model_name,
                        .created = k->created};
    return m;
}

static lf__serve_token_lp view_of(const lp_rec *r) {
    lf__serve_token_lp v = {.token = r->tok,
                            .len = r->len,
                            .logprob = r->logprob,
                            .text_offset = r->offset,
                            .top = r->top,
                            .n_top = r->n_top};
    return v;
}

/* One SSE event with one choice's delta (or finish), and with logprobs the
 * records of the tokens this chunk completes (the last chunk: every record
 * left, but none past a stop string). */
static void send_chunk(call *k, choice *c, const char *text, size_t len, lf__serve_finish finish) {
    c->released += len;
    int from = c->lp_sent, to = c->lp_sent;
    if (k->logprobs) {
        while (to < c->n_lp && (size_t)c->lp[to].offset + c->lp[to].len <= c->released) to++;
        if (finish != LF__FINISH_NONE)
            while (to < c->n_lp && (!c->stopped || (size_t)c->lp[to].offset < c->released)) to++;
        c->lp_sent = to;
    }
    if (atomic_load(&k->gone)) return;
    lf__serve_token_lp *lp = to > from ? malloc(sizeof *lp * (size_t)(to - from)) : NULL;
    for (int i = from; lp && i < to; i++) lp[i - from] = view_of(&c->lp[i]);
    lf__serve_choice ch = {.index = c->index,
                           .text = text,
                           .len = len,
                           .finish = finish,
                           .first = !c->first_sent,
                           .lp = lp,
                           .n_lp = lp ? to - from : 0};
    c->first_sent = 1;
    lf__serve_meta m = meta_of(k);
    size_t jl = 0, el = 0;
    char *json = lf__serve_chunk_json(k->api, &m, &ch, 1, k->include_usage, NULL, &jl);
    char *ev = json ? lf__serve_sse_event(json, jl, &el) : NULL;
    if (ev && lf__http_stream_write(k->stream, ev, el) != LF_OK) atomic_store(&k->gone, 1);
    free(ev);
    free(json);
    free(lp);
}

/* A stream with echo: the prompt's text (and its records) as the first chunk,
 * once the prompt was scored (before the first token, or at the end). */
static void flush_echo(call *k, choice *c) {
    if (!c->echo_pending) return;
    c->echo_pending = 0;
    send_chunk(k, c, c->text.p ? c->text.p : "", c->text.len, LF__FINISH_NONE);
}

/* Every choice is done: the whole answer, or the stream's tail. Frees k. */
static void finish_call(call *k) {
    lf_server *s = k->s;
    int completion = 0;
    for (int i = 0; i < k->n; i++) completion += k->ch[i].n_gen;
    pthread_mutex_lock(&s->mu);
    s->prompt_tokens += (uint64_t)k->prompt_tokens;
    s->completion_tokens += (uint64_t)completion;
    pthread_mutex_unlock(&s->mu);
    lf__serve_usage u = {.prompt_tokens = k->prompt_tokens, .completion_tokens = completion};
    if (k->failed && !k->streaming) {
        stream_error(k, &k->err);
    } else if (k->streaming && k->cut) {
        /* 200 and part of the text are out: an error event, as OpenAI sends
         * one mid-stream (its clients raise it), and no [DONE] */
        if (!atomic_load(&k->gone)) {
            size_t jl = 0, el = 0;
            char *json = lf__serve_error_json(&k->err, &jl);
            char *ev = json ? lf__serve_sse_event(json, jl, &el) : NULL;
            if (ev) lf__http_stream_write(k->stream, ev, el);
            free(ev);
            free(json);
        }
        count_request(s, k->ep, 200);
    } else if (k->streaming) {
        if (!atomic_load(&k->gone)) {
            lf__serve_meta m = meta_of(k);
            if (k->include_usage) {
                size_t jl = 0, el = 0;
                char *json = lf__serve_chunk_json(k->api, &m, NULL, 0, 1, &u, &jl);
                char *ev = json ? lf__serve_sse_event(json, jl, &el) : NULL;
                if (ev) lf__http_stream_write(k->stream, ev, el);
                free(ev);
                free(json);
            }
            lf__http_stream_write(k->stream, LF__SERVE_SSE_DONE, strlen(LF__SERVE_SSE_DONE));
        }
        count_request(s, k->ep, 200);
    } else {
        lf__serve_choice *cs = calloc((size_t)k->n, sizeof *cs);
        lf__serve_token_lp **lps = calloc((size_t)k->n, sizeof *lps);
        int ok = cs && lps;
        for (int i = 0; ok && i < k->n; i++) {
            choice *c = &k->ch[i];
            cs[i] = (lf__serve_choice){.index = c->index,
                                       .text = c->text.p ? c->text.p : "",
                                       .len = c->text.len,
                                       .finish = c->finish};
            if (k->logprobs) {
                int n_keep = 0;
                lps[i] = calloc((size_t)(c->n_lp ? c->n_lp : 1), sizeof **lps);
                if (!lps[i]) {
                    ok = 0;
                    break;
                }
                for (int j = 0; j < c->n_lp; j++) {
                    if ((size_t)c->lp[j].offset >= c->text.len && c->stopped) break; /* past a stop string */
                    lps[i][n_keep++] = view_of(&c->lp[j]);
                }
                cs[i].lp = lps[i];
                cs[i].n_lp = n_keep;
            }
        }
        size_t len = 0;
        lf__serve_meta m = meta_of(k);
        char *body = ok ? lf__serve_response_json(k->api, &m, cs, k->n, &u, &len) : NULL;
        if (body) {
            lf__http_stream_reply(k->stream, 200, JSON_TYPE, NULL, 0, body, len);
            count_request(s, k->ep, 200);
        } else {
            lf__serve_error e;
            lf__serve_error_internal(&e, "out of memory building the answer");
            stream_error(k, &e);
        }
        free(body);
        if (lps)
            for (int i = 0; i < k->n; i++) free(lps[i]);
        free(lps);
        free(cs);
    }
    lf__http_stream_close(k->stream);
    call_free(k);
}

/* Text released by the detokenizer: through the stop matcher into the choice. */
static void emit(call *k, choice *c, const char *text, size_t len) {
    if (c->stopped || !len) return;
    const char *out = NULL;
    size_t out_len = 0;
    int stopped = 0;
    if (lf__stop_matcher_push(c->sm, text, len, &out, &out_len, &stopped) != LF_OK) return;
    if (out_len) {
        if (k->streaming) send_chunk(k, c, out, out_len, LF__FINISH_NONE);
        else lf__sb_put(&c->text, out, out_len);
    }
    if (stopped) c->stopped = 1;
}

/* Bytes of one token, on the plain heap (NULL, *len 0 when it cannot be
 * decoded or memory is short; the record then shows an empty token). */
static char *token_bytes(lf_server *s, int32_t id, size_t *len) {
    uint32_t u = (uint32_t)id;
    char *t = NULL, *copy = NULL;
    *len = 0;
    if (lf_tokenizer_decode(s->tok, &u, 1, &t, len) == LF_OK && t) {
        copy = malloc(*len + 1);
        if (copy) {
            memcpy(copy, t, *len);
            copy[*len] = 0;
        }
    }
    lf_free(t); /* lf_alloc'd -> plain heap, freed with free() */
    if (!copy) *len = 0;
    return copy;
}

/* Append the record of token t at text offset *off (advanced by its bytes). */
static void add_lp(call *k, choice *c, const lf_engine_token *t, size_t *off) {
    if (c->n_lp >= 1 << 20) return;
    if (c->n_lp == c->cap_lp) {
        int cap = c->cap_lp ? 2 * c->cap_lp : 16;
        lp_rec *p = realloc(c->lp, sizeof *p * (size_t)cap);
        if (!p) return;
        c->lp = p;
        c->cap_lp = cap;
    }
    lp_rec *r = &c->lp[c->n_lp];
    memset(r, 0, sizeof *r);
    r->tok = token_bytes(k->s, t->id, &r->len);
    r->logprob = t->logprob;
    r->offset = (int)*off;
    const int want = k->top_logprobs < t->n_top ? k->top_logprobs : t->n_top;
    for (int j = 0; j < want; j++) {
        size_t tl = 0;
        char *txt = token_bytes(k->s, t->top_id[j], &tl);
        if (!txt) continue;
        r->top_tok[r->n_top] = txt;
        r->top[r->n_top] = (lf__serve_top){.token = txt, .len = tl, .logprob = t->top_logprob[j]};
        r->n_top++;
    }
    *off += r->len;
    c->n_lp++;
}

/* echo with logprobs: prompt token pos, scored by the engine. */
static int on_prompt(void *user, int pos, const lf_engine_token *t) {
    (void)pos;
    choice *c = user;
    call *k = c->call;
    pthread_mutex_lock(&k->mu);
    add_lp(k, c, t, &c->prompt_off);
    const int stop = atomic_load(&k->gone);
    pthread_mutex_unlock(&k->mu);
    return stop;
}

static int on_token(void *user, const lf_engine_token *t) {
    choice *c = user;
    call *k = c->call;
    lf_server *s = k->s;
    pthread_mutex_lock(&k->mu);
    const double now = lf_time_now();
    pthread_mutex_lock(&s->mu);
    if (c->n_gen == 0) histo_add(&s->ttft, TTFT_LE, now - k->t0);
    else histo_add(&s->itl, ITL_LE, now - c->t_last);
    pthread_mutex_unlock(&s->mu);
    c->t_last = now;
    c->n_gen++;
    flush_echo(k, c);
    if (t->stop) { /* the end of text (or <|im_end|>): its record, at the end of the text; no text */
        size_t at = c->raw_len;
        if (k->logprobs && !c->stopped) add_lp(k, c, t, &at);
        pthread_mutex_unlock(&k->mu);
        return 0;
    }
    if (k->logprobs) add_lp(k, c, t, &c->raw_len);
    char *text = NULL;
    size_t len = 0;
    if (lf_detok_stream_push(c->ds, (uint32_t)t->id, &text, &len) == LF_OK) emit(k, c, text, len);
    lf_free(text);
    const int stop = c->stopped || atomic_load(&k->gone);
    pthread_mutex_unlock(&k->mu);
    return stop;
}

static void on_done(void *user, lf_engine_finish why, int n_prompt, int n_gen) {
    (void)n_prompt;
    (void)n_gen;
    choice *c = user;
    call *k = c->call;
    pthread_mutex_lock(&k->mu);
    flush_echo(k, c);
    if (!c->stopped) { /* release what the detokenizer and the matcher hold */
        char *text = NULL;
        size_t len = 0;
        if (lf_detok_stream_flush(c->ds, &text, &len) == LF_OK) emit(k, c, text, len);
        lf_free(text);
        if (!c->stopped) {
            const char *out = NULL;
            size_t out_len = 0;
            if (lf__stop_matcher_flush(c->sm, &out, &out_len) == LF_OK && out_len) {
                if (k->streaming) send_chunk(k, c, out, out_len, LF__FINISH_NONE);
                else lf__sb_put(&c->text, out, out_len);
            }
        }
    }
    c->finish = c->stopped || why == LF_FINISH_STOP ? LF__FINISH_STOP : LF__FINISH_LENGTH;
    if (why == LF_FINISH_ERROR && !k->failed) {
        k->failed = 1;
        lf__serve_error_internal(&k->err, lf_engine_error(k->s->e));
    }
    const int shutdown_cut = why == LF_FINISH_CANCELLED && !c->stopped && !atomic_load(&k->gone);
    if (shutdown_cut && !k->failed && !k->cut) {
        /* the drain time ran out under it: an explicit error, never a normal
         * "length" (a client would take the cut text for a whole answer) */
        lf__serve_error_overloaded(&k->err, 503, 1, "the server shut down before the request finished");
        if (k->streaming) k->cut = 1;
        else k->failed = 1;
    }
    if (k->streaming && !k->cut) send_chunk(k, c, "", 0, c->finish);
    c->done = 1;
    const int last = --k->remaining == 0;
    pthread_mutex_unlock(&k->mu);
    if (last) finish_call(k);
}

static void on_cancel(void *user) {
    call *k = user;
    atomic_store(&k->gone, 1);
    for (int i = 0; i < k->n; i++) {
        const uint64_t id = atomic_load(&k->ch[i].engine_id);
        if (id) lf_engine_cancel(k->s->e, id);
    }
}

/* ---------------------------------------------------------------- the endpoints */

/* Tokens of one prompt; a malloc'd int32 array. */
static lf_status encode_text(lf_server *s, const char *text, size_t len, int allow_special, int32_t **out, int *n,
                             lf__sb *acc) {
    lf_encode_opts o = lf_encode_opts_default();
    o.allow_special = allow_special;
    uint32_t *ids = NULL;
    size_t ni = 0;
    lf_status st = lf_tokenizer_encode_opts(s->tok, text, len, &o, &ids, &ni);
    if (st != LF_OK) return st;
    (void)acc;
    int32_t *p = realloc(*out, sizeof(int32_t) * ((size_t)*n + ni + 1));
    if (!p) {
        lf_free(ids);
        return lf_fail(LF_ERR_NOMEM, "out of memory tokenizing");
    }
    for (size_t i = 0; i < ni; i++) p[*n + (int)i] = (int32_t)ids[i];
    *out = p;
    *n += (int)ni;
    lf_free(ids);
    return LF_OK;
}

static void handle_generate(lf__http_request *r, lf_server *s, lf__serve_api api) {
    const int ep = api == LF__SERVE_CHAT ? EP_CHAT : EP_COMPLETIONS;
    size_t blen = 0;
    const char *body = lf__http_body(r, &blen);
    lf__serve_request q;
    lf__serve_error err;
    if (lf__serve_request_parse(api, body ? body : "", blen, &s->lim, &q, &err) != LF_OK) {
        lf__serve_request_free(&q);
        reply_error(r, s, ep, &err);
        return;
    }
    /* the prompts as tokens */
    const int n_prompts = api == LF__SERVE_CHAT ? 1 : q.n_prompts;
    int32_t **ptok = calloc((size_t)n_prompts, sizeof *ptok);
    int *pn = calloc((size_t)n_prompts, sizeof *pn);
    lf_status st = ptok && pn ? LF_OK : LF_ERR_NOMEM;
    int longest = 0, total_prompt = 0;
    for (int i = 0; st == LF_OK && i < n_prompts; i++) {
        if (api == LF__SERVE_CHAT) {
            char *text = NULL;
            size_t tl = 0;
            lf__chat_span *sp = NULL;
            int ns = 0;
            if (s->no_chat_template) {
                lf__serve_error_set(&err, 400, "invalid_request_error", NULL, "messages",
                                    "this model has no chat template, and the built-in ChatML cannot be used with its "
                                    "tokenizer (%s). Give the model a chat template: fine-tune it with `llmforge "
                                    "prepare --mode sft --chat-template ...` (training copies the dataset's "
                                    "chat_template.json into every checkpoint), or put a chat_template.json (or a "
                                    "Hugging Face chat_template.jinja) in the checkpoint directory. /v1/completions "
                                    "takes plain text.",
                                    s->no_tpl_reason);
                st = LF_ERR_RANGE; /* err is set */
                break;
            }
            st = lf__chat_template_render(&s->tpl, q.messages, q.n_messages, 1, &text, &tl, &sp, &ns);
            if (st != LF_OK && st != LF_ERR_NOMEM) { /* the template refused the conversation (raise_exception) */
                char msg[sizeof err.message - 64];
                lf_log(LF_LOG_INFO, "serve: chat template: %s", lf_last_error());
                lf__serve_client_message(msg, sizeof msg, lf_last_error());
                lf__serve_error_set(&err, 400, "invalid_request_error", NULL, "messages", "chat template: %s", msg);
                st = LF_ERR_RANGE; /* err is set */
            }
            for (int j = 0; st == LF_OK && j < ns; j++)
                st = encode_text(s, text + sp[j].off, sp[j].len, sp[j].from_template, &ptok[i], &pn[i], NULL);
            free(text);
            free(sp);
        } else if (q.prompts[i].text) {
            st = encode_text(s, q.prompts[i].text, q.prompts[i].len, 0, &ptok[i], &pn[i], NULL);
        } else {
            ptok[i] = malloc(sizeof(int32_t) * (size_t)(q.prompts[i].n_tokens + 1));
            if (!ptok[i]) st = LF_ERR_NOMEM;
            else {
                memcpy(ptok[i], q.prompts[i].tokens, sizeof(int32_t) * (size_t)q.prompts[i].n_tokens);
                pn[i] = q.prompts[i].n_tokens;
            }
        }
        if (st == LF_OK && pn[i] == 0) {
            lf__serve_error_set(&err, 400, "invalid_request_error", NULL, api == LF__SERVE_CHAT ? "messages" : "prompt",
                                "the prompt is empty after tokenization");
            st = LF_ERR_RANGE;
        }
        if (st == LF_OK && pn[i] > longest) longest = pn[i];
        if (st == LF_OK) total_prompt += pn[i];
    }
    int max_tokens = 0;
    if (st == LF_OK && lf__serve_resolve_max_tokens(&q, &s->lim, longest, &max_tokens, &err) != LF_OK)
        st = LF_ERR_RANGE;
    if (st == LF_OK && max_tokens < 1 && !q.echo) { /* 0 with echo: the prompt only (scored with logprobs) */
        lf__serve_error_set(&err, 400, "invalid_request_error", NULL, "max_tokens",
                            "max_tokens must be at least 1 (0 only with echo)");
        st = LF_ERR_RANGE;
    }
    if (st != LF_OK) {
        if (st != LF_ERR_RANGE) { /* the tokenizer's message: the log keeps its paths, the client gets none */
            char msg[sizeof err.message];
            lf_log(LF_LOG_INFO, "serve: request refused: %s", lf_last_error());
            lf__serve_client_message(msg, sizeof msg, lf_last_error());
            lf__serve_error_set(&err, st == LF_ERR_NOMEM ? 500 : 400,
                                st == LF_ERR_NOMEM ? "server_error" : "invalid_request_error", NULL,
                                api == LF__SERVE_CHAT ? "messages" : "prompt", "%s", msg);
        }
        for (int i = 0; ptok && i < n_prompts; i++) free(ptok[i]);
        free(ptok);
        free(pn);
        lf__serve_request_free(&q);
        reply_error(r, s, ep, &err);
        return;
    }
    /* the call: n choices per prompt */
    call *k = calloc(1, sizeof *k);
    const int nch = n_prompts * q.n;
    if (k) k->ch = calloc((size_t)nch, sizeof *k->ch);
    if (!k || !k->ch) {
        free(k);
        lf__serve_error_internal(&err, "out of memory");
        goto refuse;
    }
    pthread_mutex_init(&k->mu, NULL);
    k->s = s;
    k->api = api;
    k->ep = ep;
    k->n = nch;
    k->streaming = q.stream;
    k->include_usage = q.include_usage;
    k->logprobs = q.logprobs;
    k->top_logprobs = q.top_logprobs;
    k->prompt_tokens = total_prompt;
    k->t0 = lf_time_now();
    k->created = (int64_t)time(NULL);
    k->adapter = q.adapter;
    snprintf(k->id, sizeof k->id, "%s-%016llx", api == LF__SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    /* the stop strings: the request's, and for chat the template's */
    const char *stops[8];
    size_t stop_lens[8];
    int n_stop = 0;
    for (int i = 0; i < q.n_stop && n_stop < 8; i++) {
        stops[n_stop] = q.stop[i];
        stop_lens[n_stop++] = q.stop_len[i];
    }
    if (api == LF__SERVE_CHAT)
        for (int i = 0; i < s->tpl.n_stop && n_stop < 8; i++) {
            stops[n_stop] = s->tpl.stop[i];
            stop_lens[n_stop++] = strlen(s->tpl.stop[i]);
        }
    for (int i = 0; i < nch; i++) {
        choice *c = &k->ch[i];
        c->call = k;
        c->index = i;
        if (lf_detok_stream_create(&c->ds, s->tok) != LF_OK ||
            lf__stop_matcher_create(stops, stop_lens, n_stop, &c->sm) != LF_OK) {
            call_free(k);
            lf__serve_error_internal(&err, "out of memory");
            goto refuse;
        }
        if (q.echo && api == LF__SERVE_COMPLETIONS) { /* the prompt's text first */
            const int p = i / q.n;
            if (q.prompts[p].text) lf__sb_put(&c->text, q.prompts[p].text, q.prompts[p].len);
            else {
                uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)pn[p]);
                char *t = NULL;
                size_t tl = 0;
                for (int j = 0; ids && j < pn[p]; j++) ids[j] = (uint32_t)ptok[p][j];
                if (ids && lf_tokenizer_decode(s->tok, ids, (size_t)pn[p], &t, &tl) == LF_OK)
                    lf__sb_put(&c->text, t, tl);
                lf_free(t);
                free(ids);
            }
            c->raw_len = c->text.len; /* the completion's offsets follow the echoed text */
            c->echo_pending = k->streaming;
        }
    }
    lf__http_stream *stream = NULL;
    if (lf__http_defer(r, on_cancel, k, &stream) != LF_OK) {
        call_free(k);
        lf__serve_error_overloaded(&err, 503, 1, "the server is shutting down");
        goto refuse;
    }
    k->stream = stream;
    pthread_mutex_lock(&k->mu);
    const uint64_t seed0 = q.has_seed ? (uint64_t)q.seed
                                      : (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ atomic_load(&s->next_id) << 20;
    int submitted = 0;
    lf_status sst = LF_OK;
    float temperature, top_p;
    lf__serve_request_sampling(&q, &temperature, &top_p);
    for (int i = 0; i < nch; i++) {
        const int p = i / q.n;
        lf_engine_req er = {.adapter = q.adapter,
                            .prompt = ptok[p],
                            .n_prompt = pn[p],
                            .max_tokens = max_tokens,
                            .temperature = temperature,
                            .top_k = q.top_k,
                            .top_p = top_p,
                            .seed = seed0 + (uint64_t)(i % q.n),
                            .stop_ids = s->stop_ids + (q.ignore_eos ? s->n_eot : 0),
                            .n_stop_ids = s->n_stop_ids - (q.ignore_eos ? s->n_eot : 0),
                            .logprobs = q.logprobs ? (q.top_logprobs > 0 ? q.top_logprobs : 0) : 0,
                            .prompt_logprobs = q.echo && q.logprobs,
                            .on_prompt = on_prompt,
                            .on_token = on_token,
                            .on_done = on_done,
                            .user = &k->ch[i]};
        uint64_t id = 0;
        if (atomic_load(&s->cutting)) sst = lf_fail(LF_ERR_BUSY, "the server is shutting down");
        else sst = lf_engine_submit(s->e, &er, &id);
        if (sst != LF_OK) break;
        atomic_store(&k->ch[i].engine_id, id);
        submitted++;
    }
    if (sst != LF_OK) {
        if (sst == LF_ERR_BUSY)
            lf__serve_error_overloaded(&err, atomic_load(&s->cutting) ? 503 : 429, 1, lf_last_error());
        else {
            char msg[sizeof err.message];
            lf_log(LF_LOG_INFO, "serve: request refused: %s", lf_last_error());
            lf__serve_client_message(msg, sizeof msg, lf_last_error());
            lf__serve_error_set(&err, 400, "invalid_request_error", NULL, api == LF__SERVE_CHAT ? "messages" : "prompt",
                                "%s", msg);
        }
        for (int i = 0; i < submitted; i++) lf_engine_cancel(s->e, atomic_load(&k->ch[i].engine_id));
        k->failed = 1;
        k->err = err;
        k->streaming = 0; /* answered with the error */
    } else if (k->streaming) {
        lf__http_header h[2] = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
        lf__http_stream_begin(stream, 200, "text/event-stream", h, 2);
    }
    k->remaining = submitted;
    pthread_mutex_unlock(&k->mu);
    if (submitted == 0) { /* nothing will call back: answer here */
        stream_error(k, &k->err);
        lf__http_stream_close(stream);
        call_free(k);
    }
    for (int i = 0; i < n_prompts; i++) free(ptok[i]);
    free(ptok);
    free(pn);
    lf__serve_request_free(&q);
    return;
refuse:
    for (int i = 0; i < n_prompts; i++) free(ptok[i]);
    free(ptok);
    free(pn);
    lf__serve_request_free(&q);
    reply_error(r, s, ep, &err);
}

static void handle_models(lf__http_request *r, lf_server *s) {
    cJSON *o = cJSON_CreateObject(), *data = cJSON_CreateArray(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "llmforge");
    cJSON_AddNumberToObject(m, "max_model_len", s->lim.max_context);
    cJSON_AddStringToObject(m, "root", s->model_name);
    cJSON_AddNullToObject(m, "parent");
    cJSON_AddItemToArray(data, m);
    for (int i = 0; i < s->n_adapter; i++) { /* vLLM: an adapter's parent is its base */
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "id", s->adapter[i]);
        cJSON_AddStringToObject(a, "object", "model");
        cJSON_AddNumberToObject(a, "created", (double)s->created);
        cJSON_AddStringToObject(a, "owned_by", "llmforge");
        cJSON_AddNumberToObject(a, "max_model_len", s->lim.max_context);
        cJSON_AddStringToObject(a, "root", s->lora_dir[i]);
        cJSON_AddStringToObject(a, "parent", s->model_name);
        cJSON_AddItemToArray(data, a);
    }
    cJSON_AddItemToObject(o, "data", data);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (txt) lf__http_reply(r, 200, JSON_TYPE, NULL, 0, txt, strlen(txt));
    else lf__http_reply_text(r, 500, "out of memory\n");
    count_request(s, EP_MODELS, txt ? 200 : 500);
    cJSON_free(txt);
}

static void put_histo(lf__sb *b, const char *name, const char *help, const histo *h, const double *le) {
    lf__sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < N_LE; i++)
        lf__sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, le[i], (unsigned long long)h->bucket[i]);
    lf__sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)h->count,
                  name, h->sum, name, (unsigned long long)h->count);
}

static void handle_metrics(lf__http_request *r, lf_server *s) {
    count_request(s, EP_METRICS, 200); /* counted before rendering: this scrape is in its own page */
    lf_engine_stats es;
    lf_engine_stats_get(s->e, &es);
    pthread_mutex_lock(&s->mu);
    uint64_t req[EP_N][N_STATUS + 1];
    memcpy(req, s->requests, sizeof req);
    const uint64_t pt = s->prompt_tokens, ct = s->completion_tokens;
    const histo ttft = s->ttft, itl = s->itl;
    pthread_mutex_unlock(&s->mu);
    lf__sb b = {0};
    lf__sb_printf(&b, "# HELP llmforge_serve_requests_total HTTP requests answered, by endpoint and status.\n"
                      "# TYPE llmforge_serve_requests_total counter\n");
    for (int e = 0; e < EP_N; e++)
        for (int k = 0; k <= N_STATUS; k++) {
            if (!req[e][k] && k != 0) continue;
            char st[16];
            if (k < N_STATUS) snprintf(st, sizeof st, "%d", STATUS[k]);
            else snprintf(st, sizeof st, "other");
            lf__sb_printf(&b, "llmforge_serve_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", EP_NAME[e], st,
                          (unsigned long long)req[e][k]);
        }
    lf__sb_printf(&b,
                  "# HELP llmforge_serve_prompt_tokens_total Prompt tokens of answered requests.\n"
                  "# TYPE llmforge_serve_prompt_tokens_total counter\nllmforge_serve_prompt_tokens_total %llu\n",
                  (unsigned long long)pt);
    lf__sb_printf(&b,
                  "# HELP llmforge_serve_completion_tokens_total Generated tokens of answered requests.\n"
                  "# TYPE llmforge_serve_completion_tokens_total counter\n"
                  "llmforge_serve_completion_tokens_total %llu\n",
                  (unsigned long long)ct);
    put_histo(&b, "llmforge_serve_time_to_first_token_seconds", "From a request's arrival to its first token.", &ttft,
              TTFT_LE);
    put_histo(&b, "llmforge_serve_inter_token_latency_seconds", "Between consecutive tokens of a sequence.", &itl,
              ITL_LE);
    lf__sb_printf(&b,
                  "# HELP llmforge_serve_queue_depth Requests waiting for a KV-cache slot.\n"
                  "# TYPE llmforge_serve_queue_depth gauge\nllmforge_serve_queue_depth %d\n",
                  es.queued);
    lf__sb_printf(&b,
                  "# HELP llmforge_serve_active_sequences Sequences decoding now.\n"
                  "# TYPE llmforge_serve_active_sequences gauge\nllmforge_serve_active_sequences %d\n",
                  es.active);
    lf__sb_printf(&b,
                  "# HELP llmforge_serve_kv_slots KV-cache slots, in use and in all.\n"
                  "# TYPE llmforge_serve_kv_slots gauge\nllmforge_serve_kv_slots{state=\"used\"} %d\n"
                  "llmforge_serve_kv_slots{state=\"total\"} %d\n",
                  es.slots_in_use, es.max_batch);
    lf__sb_printf(&b,
                  "# HELP llmforge_serve_engine_steps_total Batched forwards run by the engine.\n"
                  "# TYPE llmforge_serve_engine_steps_total counter\nllmforge_serve_engine_steps_total %llu\n",
                  (unsigned long long)es.steps);
    if (b.p && !b.failed) lf__http_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, 0, b.p, b.len);
    else lf__http_reply_text(r, 500, "out of memory\n");
    free(b.p);
}

/* Constant time in the length of the expected key. */
static int key_ok(const lf_server *s, const char *auth) {
    if (!s->key) return 1;
    static const char pre[] = "Bearer ";
    if (!auth || strncmp(auth, pre, sizeof pre - 1) != 0) return 0;
    const char *got = auth + sizeof pre - 1;
    const size_t gl = strlen(got);
    unsigned diff = gl != s->key_len;
    for (size_t i = 0; i < s->key_len; i++) diff |= (unsigned char)s->key[i] ^ (unsigned char)(i < gl ? got[i] : 0);
    return diff == 0;
}

static void on_request(lf__http_request *r, void *user) {
    lf_server *s = user;
    const char *method = lf__http_method(r), *path = lf__http_path(r);
    lf__serve_error err;
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(path, "/health")) {
        if (!get) {
            lf__serve_error_method(&err, method, path);
            reply_error(r, s, EP_HEALTH, &err);
            return;
        }
        const int draining = atomic_load(&s->draining);
        lf__http_reply(r, draining ? 503 : 200, JSON_TYPE, NULL, 0,
                       draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}", draining ? 21 : 15);
        count_request(s, EP_HEALTH, draining ? 503 : 200);
        return;
    }
    if (!strcmp(path, "/metrics")) {
        if (!get) {
            lf__serve_error_method(&err, method, path);
            reply_error(r, s, EP_METRICS, &err);
            return;
        }
        handle_metrics(r, s);
        return;
    }
    const int ep = !strcmp(path, "/v1/completions")        ? EP_COMPLETIONS
                   : !strcmp(path, "/v1/chat/completions") ? EP_CHAT
                   : !strcmp(path, "/v1/models")           ? EP_MODELS
                                                           : EP_OTHER;
    if (!key_ok(s, lf__http_header_value(r, "Authorization"))) {
        lf__serve_error_unauthorized(&err);
        reply_error(r, s, ep, &err);
        return;
    }
    if (ep == EP_OTHER) {
        lf__serve_error_not_found(&err, method, path);
        reply_error(r, s, ep, &err);
        return;
    }
    if ((ep == EP_MODELS && !get) || (ep != EP_MODELS && !post)) {
        lf__serve_error_method(&err, method, path);
        reply_error(r, s, ep, &err);
        return;
    }
    if (ep == EP_MODELS) handle_models(r, s);
    else handle_generate(r, s, ep == EP_CHAT ? LF__SERVE_CHAT : LF__SERVE_COMPLETIONS);
}

static char *error_body(int status, const char *message, const char **content_type, void *user) {
    (void)user;
    lf__serve_error e;
    if (status == 413) lf__serve_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL, "%s", message);
    else if (status == 503) lf__serve_error_overloaded(&e, 503, 1, message);
    else
        lf__serve_error_set(&e, status, status >= 500 ? "server_error" : "invalid_request_error", NULL, NULL, "%s",
                            message);
    size_t len = 0;
    *content_type = JSON_TYPE;
    return lf__serve_error_json(&e, &len);
}

/* ---------------------------------------------------------------- lifecycle */

static void server_free(lf_server *s) {
    if (!s) return;
    lf_engine_free(s->e);
    lf__chat_template_free(&s->tpl);
    lf_tokenizer_free(s->tok);
    lf_model_free(s->m);
    lf_backend_close(s->be);
    lf__serve_names_free(s->adapter, s->n_adapter);
    lf__serve_names_free(s->lora_dir, s->n_adapter);
    free(s->key);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* A checkpoint without a chat template gets the built-in ChatML; when the
 * tokenizer cannot encode its markers (a character vocabulary trained on
 * text without '|'), chat requests are refused with a 400 that says so and
 * how to give the model a template, instead of an error about characters
 * the client never wrote. Announced at start through the source line. */
static lf_status check_builtin_template(lf_server *s) {
    char *text = NULL;
    size_t tl = 0;
    lf__chat_message m[2] = {{LF__ROLE_SYSTEM, "", 0}, {LF__ROLE_USER, "", 0}};
    lf_status st = lf__chat_template_render(&s->tpl, m, 2, 1, &text, &tl, NULL, NULL);
    if (st != LF_OK) return st;
    lf_encode_opts o = lf_encode_opts_default();
    o.allow_special = 1;
    uint32_t *ids = NULL;
    size_t n = 0;
    if (lf_tokenizer_encode_opts(s->tok, text, tl, &o, &ids, &n) != LF_OK) {
        lf__serve_client_message(s->no_tpl_reason, sizeof s->no_tpl_reason, lf_last_error());
        s->no_chat_template = 1;
        char note[600];
        snprintf(note, sizeof note,
                 "none (the checkpoint has no chat template and the built-in ChatML's markers are not in the "
                 "vocabulary: /v1/chat/completions answers 400; /v1/completions works)");
        char *src = strdup(note);
        if (!src) st = lf_fail(LF_ERR_NOMEM, "serve: out of memory");
        else {
            free(s->tpl.source);
            s->tpl.source = src;
        }
    }
    lf_free(ids);
    free(text);
    return st;
}

lf_status lf_server_start(lf_server **out, const char *ckpt, const lf_server_opts *opts) {
    *out = NULL;
    lf_server *s = calloc(1, sizeof *s);
    if (!s) return lf_fail(LF_ERR_NOMEM, "serve: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    atomic_store(&s->next_id, (unsigned long long)time(NULL) << 20);
    s->created = (int64_t)time(NULL);
    char *dir = NULL;
    lf_status st = lf_backend_open(lf_backend_default_name(), &s->be);
    if (st == LF_OK && !opts->batch_variant) st = lf_backend_set_batch_invariant(s->be, 1);
    if (st == LF_OK) st = lf_checkpoint_load_text_model(ckpt, s->be, &s->m, &s->tok, &dir);
    int from_file = 0;
    if (st == LF_OK) st = lf__chat_template_load_dir(dir, &s->tpl, &from_file);
    if (st == LF_OK && !from_file) st = check_builtin_template(s);
    const lf_model_config *c = st == LF_OK ? lf_model_get_config(s->m) : NULL;
    if (st == LF_OK) {
        /* the model's name: the option, else the directory's (a step directory: its run's) */
        if (opts->model_name && *opts->model_name)
            snprintf(s->model_name, sizeof s->model_name, "%s", opts->model_name);
        else {
            char tmp[LF_PATH_MAX];
            snprintf(tmp, sizeof tmp, "%s", dir);
            size_t n = strlen(tmp);
            while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
            char *base = strrchr(tmp, '/');
            base = base ? base + 1 : tmp;
            if (!strncmp(base, "step_", 5) && base > tmp + 1) { /* run/ckpt/step_N -> run */
                base[-1] = 0;
                char *up = strrchr(tmp, '/');
                if (up && !strcmp(up + 1, "ckpt")) {
                    *up = 0;
                    char *run = strrchr(tmp, '/');
                    base = run ? run + 1 : tmp;
                } else {
                    base = up ? up + 1 : tmp;
                }
            }
            snprintf(s->model_name, sizeof s->model_name, "%s", base);
        }
        /* the directory's end-of-sequence ids (generation_config.json, an
         * HF config.json), else the tokenizer's end of text */
        st = lf_checkpoint_eos_ids(dir, s->stop_ids, 16, &s->n_stop_ids);
        const int eot = lf_tokenizer_eot(s->tok);
        if (st == LF_OK && !s->n_stop_ids && eot >= 0 && eot < c->vocab_size) s->stop_ids[s->n_stop_ids++] = eot;
        for (int i = 0; st == LF_OK && i < s->n_stop_ids; i++)
            if (s->stop_ids[i] >= c->vocab_size)
                st = lf_fail(LF_ERR_CONFIG, "serve: '%s': end-of-sequence id %d is outside the vocabulary (%d)", dir,
                             s->stop_ids[i], c->vocab_size);
        s->n_eot = s->n_stop_ids;
        uint32_t imend;
        int have = 0;
        if (lf_tokenizer_special_id(s->tok, "<|im_end|>", &imend) == LF_OK && (int)imend < c->vocab_size)
            for (int i = 0; i < s->n_stop_ids; i++) have |= s->stop_ids[i] == (int32_t)imend;
        else have = 1;
        if (!have) s->stop_ids[s->n_stop_ids++] = (int32_t)imend;
        if (opts->api_key && *opts->api_key) {
            s->key = strdup(opts->api_key);
            s->key_len = strlen(opts->api_key);
            if (!s->key) st = lf_fail(LF_ERR_NOMEM, "serve: out of memory");
        }
    }
    if (st == LF_OK && opts->n_lora > 0) { /* before the engine: its session plans for the widest r */
        st = lf__serve_load_adapters(s->m, dir, s->model_name, opts, &s->adapter, &s->lora_dir);
        if (st == LF_OK) s->n_adapter = opts->n_lora;
    }
    if (st == LF_OK) {
        lf_engine_opts eo = {.max_batch = opts->max_batch > 0 ? opts->max_batch : 8,
                             /* the session's K/V is allocated whole: a model with 128k positions
                              * gets 4096 unless --max-context asks for more */
                             .max_context = opts->max_context > 0 ? opts->max_context
                                                                  : (c->block_size < 4096 ? c->block_size : 4096),
                             .max_queue = opts->max_queue > 0 ? opts->max_queue : 64};
        st = lf_engine_create(&s->e, s->m, &eo);
        if (st == LF_OK) st = lf_engine_start(s->e);
        s->lim = lf__serve_limits_default();
        s->lim.model_name = s->model_name;
        s->lim.adapters = (const char *const *)s->adapter;
        s->lim.n_adapters = s->n_adapter;
        s->lim.max_context = eo.max_context;
        s->lim.max_tokens = opts->max_tokens > 0 ? opts->max_tokens : eo.max_context;
        if (opts->max_n > 0) s->lim.max_n = opts->max_n;
        if (opts->max_body > 0) s->lim.max_body = opts->max_body;
        s->lim.vocab_size = c->vocab_size;
        s->lim.max_sequences = eo.max_batch + eo.max_queue;
        s->lim.max_prompts = opts->max_prompts > 0 ? opts->max_prompts
                                                   : (s->lim.max_sequences < 64 ? s->lim.max_sequences : 64);
        if (st == LF_OK && s->lim.max_prompts > s->lim.max_sequences)
            st = lf_fail(LF_ERR_RANGE,
                         "serve: --max-prompts %d is more than the server ever holds (--max-batch %d + "
                         "--max-queue %d = %d sequences): such a request could never run",
                         s->lim.max_prompts, eo.max_batch, eo.max_queue, s->lim.max_sequences);
    }
    if (st == LF_OK) {
        lf__http_opts ho = {.what = "serve",
                            .host = opts->host,
                            .allow_names = 1,
                            .port = opts->port,
                            .threads = opts->http_threads > 0 ? opts->http_threads : 2,
                            .max_connections = opts->max_connections > 0 ? opts->max_connections : 256,
                            .request_deadline_s = opts->request_deadline_s > 0 ? opts->request_deadline_s : 10,
                            .idle_timeout_s = 30,
                            .max_body = s->lim.max_body,
                            .on_request = on_request,
                            .error_body = error_body,
                            .user = s};
        st = lf__http_start(&s->http, &ho);
    }
    lf_free(dir);
    if (st != LF_OK) {
        if (s->e) lf_engine_stop(s->e, 0);
        server_free(s);
        return st;
    }
    *out = s;
    return LF_OK;
}

int lf_server_port(const lf_server *s) { return s ? lf__http_port(s->http) : -1; }
const char *lf_server_model_name(const lf_server *s) { return s ? s->model_name : ""; }
const char *lf_server_chat_template(const lf_server *s) { return s && s->tpl.source ? s->tpl.source : ""; }

/* The drain (docs/serving.md, "Shutdown"): requests that arrive from now on
 * get 503 from the HTTP layer; every request begun before is received,
 * generated and sent whole until drain_s is over. Then what is left is cut
 * with an explicit error: the engine's sequences end (on_done: 503, or an
 * error event in a stream that already sent 200), a request still arriving
 * gets 503, and lf__http_stop gives those answers up to a second to leave. */
void lf_server_stop(lf_server *s, double drain_s) {
    if (!s) return;
    const double until = lf_time_now() + (drain_s > 0 ? drain_s : 0);
    atomic_store(&s->draining, 1);
    (void)lf__http_drain(s->http, until);
    atomic_store(&s->cutting, 1);
    lf_engine_stop(s->e, 0); /* what is left is cancelled: on_done answers with the error */
    lf__http_stop(s->http);
    server_free(s);
}
