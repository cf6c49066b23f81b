/*
 * The serving engine: continuous batching over a model (private to
 * src/serve/ and the CLI's serve command; engine.c documents the policy).
 *
 * Requests arrive as token ids with their sampling options and callbacks.
 * Each engine step is one ragged forward (lf_session_forward_ragged) over
 * every active sequence: one-token decode runs and prompt (prefill) chunks
 * alike, up to a token budget. New requests join between steps into free KV
 * cache slots, finished or cancelled ones leave and free theirs. A request
 * is a pure function of its prompt, options and seed: its tokens do not
 * depend on what else runs beside it (sampling draws are keyed by seed and
 * position, lf_sample_token), up to the float rounding of batched products.
 *
 * Threads: lf_engine_submit / lf_engine_cancel / lf_engine_stats may be
 * called from any thread; steps run on one thread (lf_engine_step, or the
 * engine's own thread after lf_engine_start); callbacks run on the stepping
 * thread and must not call lf_engine_step.
 */
#ifndef LF_SERVE_ENGINE_H
#define LF_SERVE_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/core.h"
#include "llmforge/model.h"

#define LF_ENGINE_MAX_LOGPROBS 20

typedef struct lf_engine lf_engine;

typedef struct lf_engine_opts {
    int max_batch;   /* KV-cache slots: sequences decoding at once (>= 1) */
    int max_context; /* positions per slot: prompt + generated (<= block_size) */
    int max_queue;   /* requests waiting for a slot; beyond: LF_ERR_BUSY */
    int step_tokens; /* tokens per forward (prefill chunking); 0: max_context */
} lf_engine_opts;

typedef enum lf_engine_finish {
    LF_FINISH_STOP = 0,      /* a stop token was sampled (passed to on_token with stop = 1) */
    LF_FINISH_LENGTH = 1,    /* max_tokens, or the context is full */
    LF_FINISH_CANCELLED = 2, /* lf_engine_cancel, on_token asked, or shutdown */
    LF_FINISH_ERROR = 3,     /* the forward failed (the message is in lf_engine_error) */
} lf_engine_finish;

/* One generated token: its id, its log-probability under the model's
 * distribution (log-softmax of the raw logits, before temperature/top-k/p),
 * and the n_top most likely tokens with theirs (descending) when asked.
 * stop = 1: the token is one of the request's stop ids (e.g. the end of
 * text): the last token of the sequence, reported for its log-probability
 * record (OpenAI and vLLM return it; lm-evaluation-harness reads it) but
 * not part of the text; the sequence then ends with LF_FINISH_STOP. */
typedef struct lf_engine_token {
    int32_t id;
    int stop;
    float logprob;
    int n_top;
    int32_t top_id[LF_ENGINE_MAX_LOGPROBS];
    float top_logprob[LF_ENGINE_MAX_LOGPROBS];
} lf_engine_token;

typedef struct lf_engine_req {
    const int32_t *prompt; /* n_prompt >= 1 ids (copied at submit) */
    int n_prompt;
    int max_tokens;    /* >= 1; 0: the prompt only (its log-probabilities), then LF_FINISH_LENGTH */
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 0 or 1: off */
    uint64_t seed;
    const int32_t *stop_ids; /* tokens that end the sequence (e.g. end of text); copied */
    int n_stop_ids;
    int logprobs; /* 0..LF_ENGINE_MAX_LOGPROBS alternatives per token */
    /* 1: the prompt's own log-probabilities, each prompt token given those
     * before it, through on_prompt (the prefill then computes the head on
     * every prompt row, not only the last: a vocabulary-wide product per
     * prompt token; other requests in the same step pay nothing). */
    int prompt_logprobs;
    /* prompt_logprobs: called for positions 0 .. n_prompt-1 in order, before
     * the first on_token: the prompt token (id), its log-probability given
     * the tokens before it (NaN at position 0, which has none, and no
     * alternatives there) and `logprobs` alternatives. Non-zero cancels. */
    int (*on_prompt)(void *user, int pos, const lf_engine_token *tok);
    /* Called for each generated token, the stop token last (stop = 1; it
     * counts in n_generated); non-zero cancels the sequence (a stop token
     * ends it with LF_FINISH_STOP whatever the callback returns). */
    int (*on_token)(void *user, const lf_engine_token *tok);
    /* Called once at the end: why, and the prompt and generated token counts. */
    void (*on_done)(void *user, lf_engine_finish why, int n_prompt, int n_generated);
    void *user;
    /* 0: the base model; k: the base + the model's serving adapter k
     * (lf_model_lora_bank_add), batched with requests of other adapters */
    int adapter;
} lf_engine_req;

typedef struct lf_engine_stats {
    int queued, active, slots_in_use, max_batch;
    uint64_t steps, prompt_tokens, generated_tokens, finished, cancelled;
} lf_engine_stats;

/* An engine on m (a session of max_batch slots x max_context positions with
 * a KV cache). LF_ERR_RANGE naming the option when out of range. */
lf_status lf_engine_create(lf_engine **out, lf_model *m, const lf_engine_opts *opts);
void lf_engine_free(lf_engine *e); /* after lf_engine_stop when started */

/* Queue a request; *id identifies it for lf_engine_cancel. LF_ERR_BUSY when
 * max_queue requests already wait or the engine is draining; LF_ERR_RANGE
 * (message names the sizes) when the prompt leaves no room to generate
 * (n_prompt >= max_context; with max_tokens 0, n_prompt > max_context), a
 * token is outside the vocabulary, or a sampling option is out of range;
 * LF_ERR_INVALID_ARG for prompt_logprobs without on_prompt. on_done is not
 * called for a refused request. */
lf_status lf_engine_submit(lf_engine *e, const lf_engine_req *r, uint64_t *id);
/* Cancel a queued or active request (its on_done runs with
 * LF_FINISH_CANCELLED at the next step, or now when it was still queued and
 * no step runs); unknown or finished ids are ignored. */
void lf_engine_cancel(lf_engine *e, uint64_t id);

/* One step: admit queued requests into free slots, one ragged forward over
 * the active sequences, sample, call back, retire. *n_active (may be NULL):
 * sequences active or queued after it. LF_OK with nothing to do when idle.
 * A failed forward ends every active sequence with LF_FINISH_ERROR and
 * returns its status. */
lf_status lf_engine_step(lf_engine *e, int *n_active);

/* The engine's own stepping thread: steps while there is work, sleeps when
 * there is none. lf_engine_stop stops admitting (submit: LF_ERR_BUSY), lets
 * the work finish for up to drain_s seconds, cancels what is left, and
 * joins the thread. */
lf_status lf_engine_start(lf_engine *e);
void lf_engine_stop(lf_engine *e, double drain_s);

void lf_engine_stats_get(lf_engine *e, lf_engine_stats *out);
const char *lf_engine_error(const lf_engine *e); /* the last step failure ("" if none) */

#endif
